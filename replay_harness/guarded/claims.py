"""Output paths checked once, before any work, and written through the descriptor of that check.

:func:`claim` checks an output path against the inputs (:class:`~replay_harness.guarded.inputs.Inputs`) and
keeps its parent folder open; the writer takes that claim with :func:`claimed` and works relative to the
same descriptor, so a path swapped after the check (a symlink flipped, a folder renamed) changes nothing.
The claims are kept by path (the last :data:`MAX_CLAIMS`): a command's check and its writer meet there
without passing objects through code that only knows the path. The writer uses the folder held open even
when the path names another one by then (a symlink flipped, the folder renamed); only a claim whose folder
was deleted since (one left by an earlier command of a long-lived process) is made again, checked against
the same inputs.

Refused (UsageError, exit 2, one line naming the option and the path, before anything is written):

* the output is, lies inside or (a folder) holds an input: by place through the mount table, and by
  identity of the parent and every folder above it;
* the entry at the path is an input by identity (a hard link, a symlink to it), a FIFO, socket or device, a
  folder where a file belongs or a file where a folder belongs, or a mount point (a file's, or a folder's
  that is renamed into place);
* a symlink at the path of a folder under ``--overwrite`` (without it, the folder the link names is the
  output, resolved once at the check).
"""
from __future__ import annotations

import errno
import os
import stat
from collections import OrderedDict
from typing import Iterable

from replay_harness.errors import EnvironmentProblem, UsageError
from replay_harness.guarded.folders import NOFOLLOW_DIR, Folder, open_dir
from replay_harness.guarded.inputs import Inputs
from replay_harness.guarded.mounts import is_mount_point, mount_table, place_of

MAX_CLAIMS = 32
APART = "name an output apart from the inputs (nothing was written or deleted)"
_CLAIMS: "OrderedDict[str, Claim | Pinned]" = OrderedDict()
_STAGED: dict[str, tuple[Folder, str, tuple[int, int]]] = {}  # staging folders not finished with: (parent, name, ino/dev)


def reason(e: OSError) -> str:
    return e.strerror.lower() if e.strerror else type(e).__name__


def _key(path: str | os.PathLike) -> str:
    """The path a claim is kept under: absolute (as given where the working folder is gone)."""
    try:
        return os.path.abspath(os.fspath(path))
    except OSError:
        return os.fspath(path)


def _inputs(inputs: Inputs | Iterable | None) -> Inputs:
    return inputs if isinstance(inputs, Inputs) else Inputs(inputs or ())


def _refuse_place(inputs: Inputs, fd: int, names: list[str], label: str, holds: bool) -> None:
    """UsageError when the place ``fd``/``names`` is, lies inside or (``holds``) holds an input, or the folder
    ``fd`` or one above it is an input folder."""
    hit = inputs.place_clash(place_of(fd, mount_table()).child(*names), holds=holds)
    if hit is not None:
        raise UsageError(f"{label}: {hit[0]} the input {hit[1]}; {APART}")
    src = inputs.folder_clash(fd)
    if src is not None:
        raise UsageError(f"{label}: is inside the input {src}; {APART}")


class Claim:
    """An output path checked against ``inputs`` (see the module docstring): ``folder`` (a recording's
    folder) or a file; ``overwrite``: an existing folder will be replaced; ``swap``: it will be replaced by a
    rename (so it may not be a mount point)."""

    def __init__(self, path: str | os.PathLike, inputs: Inputs, option: str, *, folder: bool,
                 overwrite: bool = False, swap: bool = False):
        self.path, self.inputs, self.option = os.fspath(path), inputs, option
        self.folder, self.overwrite, self.swap = folder, overwrite, swap
        self.label = f"{option} {self.path}".strip()
        self.via_link = False
        self._open(self.path)

    # ------------------------------------------------------------------ the check
    def _open(self, given: str) -> None:
        parent, name = os.path.split(given)
        if name in ("", ".", ".."):
            parent, name = os.path.split(os.path.realpath(given))
        if not name:
            raise UsageError(f"{self.label}: is the root folder; name a new path")
        rest: list[str] = []
        anc = parent or "."
        while True:
            try:
                fd = open_dir(anc)
                break
            except FileNotFoundError:
                up, last = os.path.split(anc)
                if not self.folder or not last:
                    raise UsageError(f"{self.label}: folder {_key(parent or '.')} does not exist") from None
                rest.insert(0, last)
                anc = up or "."
            except OSError as e:
                hint = " (a file where a folder is expected)" if e.errno == errno.ENOTDIR else ""
                raise UsageError(f"{self.label}: cannot open the folder {anc} ({reason(e)}){hint}") from None
        self.name, self.rest = name, rest
        self.base = Folder(fd, anc, self.inputs)
        self._check()

    def _check(self) -> None:
        base, name = self.base, self.name
        _refuse_place(self.inputs, base.fd, [*self.rest, name], self.label, self.folder)
        if not self.rest:
            base.labels[name] = self.label
        st = None if self.rest else base.lstat(name)
        if st is None:
            return self._writable()
        base.check_entry(name, verb="written or deleted")  # an input by identity; a FIFO, socket or device
        if stat.S_ISLNK(st.st_mode):
            try:
                st = os.stat(name, dir_fd=base.fd)
            except OSError:
                raise UsageError(f"{self.label}: is a symlink to nothing; name a new path") from None
            if self.folder:
                if self.overwrite or self.via_link:  # via_link: it was followed once already, and changed since
                    raise UsageError(f"{self.label}: is a symlink; --overwrite does not replace what a link names "
                                     "(name the folder itself)")
                real = os.path.realpath(os.path.join(base.shown, name))  # once: the folder it names is the output
                self.base.close()
                self.via_link = True
                return self._open(real)
        if self.folder and not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{self.label}: is a file, not a folder (name a new or empty folder)")
        if not self.folder and stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{self.label}: is a folder; name a file")
        if not self.folder or self.swap:
            self._refuse_mount_point()
        self._writable()

    def _refuse_mount_point(self) -> None:
        try:
            fd = os.open(self.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.base.fd)
        except OSError:
            return
        try:
            mounted = is_mount_point(fd, self.base.fd)
        finally:
            os.close(fd)
        if mounted:
            why = ("the new recording is written beside it and renamed into place, which a mount point does not "
                   "allow; name a folder inside it" if self.folder else "replay does not write over one")
            raise UsageError(f"{self.label}: is a mount point; {why} (nothing was written)")

    def _writable(self) -> None:
        if self.folder:
            return self._folder_writable()
        exists = self.base.lstat(self.name) is not None
        if not os.access(".", os.W_OK | os.X_OK, dir_fd=self.base.fd) or (
                exists and not os.access(self.name, os.W_OK, dir_fd=self.base.fd)):
            raise UsageError(f"{self.label}: cannot write there (permission denied)")

    def _folder_writable(self) -> None:
        """A folder output needs write permission where replay creates entries: the folder it is made in (missing,
        or swapped into place beside the old one), else the folder itself and, under ``--overwrite`` in place,
        its own ``steps/`` (a read-only folder or file system found here, before the work, not after it)."""
        st = None if self.rest else self.base.lstat(self.name)
        if st is None or self.swap:
            where, name = self.base.shown, "."
        else:
            where, name = os.path.join(self.base.shown, self.name), self.name
        if not os.access(name, os.W_OK | os.X_OK, dir_fd=self.base.fd, effective_ids=True):
            raise UsageError(f"{self.label}: cannot write in {where} (no write permission or a read-only file "
                             "system; nothing was written or deleted)")
        if st is not None and not self.swap and self.overwrite:
            steps = os.path.join(self.name, "steps")
            try:
                sst = os.stat(steps, dir_fd=self.base.fd, follow_symlinks=False)
            except OSError:
                return
            if stat.S_ISDIR(sst.st_mode) and not os.access(steps, os.W_OK | os.X_OK, dir_fd=self.base.fd,
                                                            effective_ids=True):
                raise UsageError(f"{self.label}: cannot delete the old steps in {os.path.join(where, 'steps')} (no "
                                 "write permission or a read-only file system; nothing was written or deleted)")

    # ------------------------------------------------------------------ the use
    def fresh(self) -> bool:
        """Is the folder held open still there (not deleted since; where it now is does not matter: it is the one
        checked)?"""
        try:
            return os.fstat(self.base.fd).st_nlink > 0
        except OSError:
            return False

    def parent(self) -> Folder:
        """The folder the output goes in (folders missing above it made now, each opened O_NOFOLLOW)."""
        while self.rest:
            sub = self.base.subfolder(self.rest.pop(0), create=True)
            self.base.close()
            self.base = sub
        self.base.labels[self.name] = self.label
        return self.base

    def existing(self) -> Folder | None:
        """The folder now at the path (opened O_NOFOLLOW, checked as at the claim), or None when there is none."""
        base = self.parent()
        st = base.lstat(self.name)
        if st is None:
            return None
        self._check()
        if not stat.S_ISDIR(st.st_mode):
            return None
        try:
            return Folder(os.open(self.name, NOFOLLOW_DIR, dir_fd=base.fd), self.path, self.inputs)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                raise UsageError(f"{self.label}: changed while it was checked (now a symlink, a file or gone); "
                                 f"{APART}") from None
            raise

    def target(self, *, create: bool = True) -> Folder:
        """The output folder (made when missing and ``create``), opened O_NOFOLLOW relative to its parent."""
        base = self.parent()
        if create:
            try:
                os.mkdir(self.name, 0o777, dir_fd=base.fd)
            except FileExistsError:
                pass
        try:
            fd = os.open(self.name, NOFOLLOW_DIR, dir_fd=base.fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UsageError(f"{self.label}: is no longer the folder checked (a symlink or a file now); "
                                 "nothing was written") from None
            raise
        hit = self.inputs.identity(os.fstat(fd))
        if hit is not None:
            os.close(fd)
            raise UsageError(f"{self.label}: is the input {hit} under another path; {APART}")
        return Folder(fd, self.path, self.inputs)

    def staging(self) -> str:
        """A new empty folder beside the output (``.NAME.RANDOM.tmp``: same file system, so it can be renamed
        into place), held open for its writer (:func:`claimed` gives it); its path."""
        base = self.parent()
        name = base.make_temp_folder(self.name)
        try:
            path = os.path.join(base.shown, name)
            fd = os.open(name, NOFOLLOW_DIR, dir_fd=base.fd)
            _STAGED[_key(path)] = (Folder(os.dup(base.fd), base.shown), name, os.fstat(fd)[1:3])
            _register(path, Pinned(Folder(fd, path, self.inputs), self.option))
        except BaseException:  # Ctrl-C before its writer knows of it: removed at once
            base.remove_tree(name)
            raise
        return path

    def write(self, data: bytes, what: str = "the file") -> None:
        """Write a file output atomically through the parent's descriptor; an OS error is EnvironmentProblem
        (exit 3) naming the option and path."""
        try:
            self.parent().write_file(self.name, data)
        except OSError as e:
            raise EnvironmentProblem(f"{self.label}: cannot write {what} ({reason(e)})") from None

    def close(self) -> None:
        self.base.close()


class Pinned:
    """A folder replay made itself (a staging folder), held open: its writer uses this descriptor."""

    folder, overwrite, via_link = True, True, False

    def __init__(self, folder: Folder, option: str):
        self.dir, self.option, self.inputs, self.path = folder, option, folder.inputs, folder.shown

    def fresh(self) -> bool:
        return True

    def verify(self, inputs: Inputs) -> None:
        _refuse_place(inputs, self.dir.fd, [], f"{self.option} {self.path}", True)

    def target(self, *, create: bool = True) -> Folder:
        return Folder(os.dup(self.dir.fd), self.path, self.inputs)

    def close(self) -> None:
        self.dir.close()


def _register(path: str | os.PathLike, c: "Claim | Pinned") -> None:
    key = _key(path)
    old = _CLAIMS.pop(key, None)
    if old is not None and old is not c:
        old.close()
    _CLAIMS[key] = c
    while len(_CLAIMS) > MAX_CLAIMS:
        _CLAIMS.popitem(last=False)[1].close()


def claim(path: str | os.PathLike, inputs: Inputs | Iterable | None, option: str, *, folder: bool,
          overwrite: bool = False, swap: bool = False) -> "Claim | Pinned":
    """Check the output ``path`` of ``option`` against ``inputs`` now, before any work (see the module
    docstring), and keep the claim for its writer. A staging folder replay made is checked, not replaced."""
    held = _CLAIMS.get(_key(path))
    if isinstance(held, Pinned):
        held.verify(_inputs(inputs))
        return held
    c = Claim(path, _inputs(inputs), option, folder=folder, overwrite=overwrite, swap=swap)
    _register(path, c)
    return c


def claimed(path: str | os.PathLike, option: str, *, folder: bool) -> "Claim | Pinned":
    """The claim of ``path`` for its writer: the one its check made (a folder's is handed over: the caller
    closes it), checked again against the same inputs when the path names another folder by now; a new one
    (no inputs known) when none was made."""
    key = _key(path)
    held = _CLAIMS.get(key)
    if held is not None and held.folder == folder and held.fresh():
        if folder:
            del _CLAIMS[key]
        return held
    inputs = held.inputs if held is not None else Inputs()
    c = Claim(path, inputs, held.option if held is not None else option, folder=folder,
              overwrite=held.overwrite if held is not None else False)
    if folder:
        _CLAIMS.pop(key, None)
        if held is not None:
            held.close()
    else:
        _register(path, c)
    return c


def write_file(path: str | os.PathLike, data: bytes | str, option: str, what: str = "the file") -> None:
    """Write the file output ``path`` of ``option`` atomically through its claim (:func:`claimed`)."""
    claimed(path, option, folder=False).write(data.encode() if isinstance(data, str) else data, what)


def forget(path: str | os.PathLike) -> None:
    """Drop (and close) the claim kept for ``path``, if any (a staging folder's: its writer is done with it)."""
    held = _CLAIMS.pop(_key(path), None)
    if held is not None:
        held.close()
    staged = _STAGED.pop(_key(path), None)
    if staged is not None:
        staged[0].close()


def discard_unfinished() -> list[str]:
    """Remove every staging folder :meth:`Claim.staging` made that its writer did not finish with (a Ctrl-C or
    SIGTERM between its making and the writer's own cleanup): only the folder made (same inode), never
    following a link nor crossing a mount; never raises. Called on the way out of every command (``cli.main``).
    Returns the paths removed."""
    removed = []
    while _STAGED:
        _, (parent, name, made) = _STAGED.popitem()
        try:
            st = parent.lstat(name)
            if st is not None and stat.S_ISDIR(st.st_mode) and (st.st_ino, st.st_dev) == made:
                parent.remove_tree(name)
                removed.append(os.path.join(parent.shown, name))
        except (OSError, UsageError):
            pass
        finally:
            parent.close()
    return removed


def release() -> None:
    """Close every claim kept (their descriptors)."""
    while _CLAIMS:
        _CLAIMS.popitem()[1].close()
