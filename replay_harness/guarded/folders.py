"""An open folder that replay writes in or deletes from: every operation relative to its descriptor.

A :class:`Folder` holds a descriptor of a folder checked once (:mod:`replay_harness.guarded.claims`); what
it writes, renames and deletes is named relative to that descriptor, so no path is resolved again between
the check and the use:

* a new file is created ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a temp name (``.NAME.RANDOM.tmp``), written,
  fsynced and renamed over NAME, after NAME is checked once more: never over an input (identity), never
  over a FIFO, socket or device (symlinks followed for that check, never for the write);
* a subfolder is opened ``O_NOFOLLOW`` and must lie on the folder's own mount;
* a delete (:meth:`Folder.remove_tree`) never follows a symlink (the link is unlinked) and never crosses a
  mount: at each folder, its device and its mount id must be the top's, and the mount table must show no
  mount point inside; an entry that is an input (identity) stops it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import secrets
import stat
import weakref

from replay_harness.errors import UsageError
from replay_harness.guarded.inputs import DIR_FLAGS, WALK_LIMIT, Inputs, ident
from replay_harness.guarded.mounts import is_mount_point, mount_id, mounts_under

NOFOLLOW_DIR = DIR_FLAGS | os.O_NOFOLLOW
TMP_SUFFIX = ".tmp"
MAX_TREE_DEPTH = 32  # folders deep replay deletes (a recording is 2)
KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"))
SPARED = "(a bind mount, a symlink or a hard link)"


def open_dir(path: str | os.PathLike, *, dir_fd: int | None = None, nofollow: bool = False) -> int:
    """A descriptor of the folder ``path`` (relative to ``dir_fd``); O_PATH where the folder may be written but
    not listed (mode -wx: the writes work through it, its fsync is skipped)."""
    flags = NOFOLLOW_DIR if nofollow else DIR_FLAGS
    try:
        return os.open(path, flags, dir_fd=dir_fd)
    except PermissionError:
        return os.open(path, flags | os.O_PATH, dir_fd=dir_fd)


def _fsync(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.EBADF:  # an O_PATH descriptor (open_dir) cannot be fsynced
            raise


def special_kind(mode: int) -> str | None:
    """"a FIFO", "a socket", "a character device", "a block device", or None (a file, folder or link)."""
    return next((name for is_kind, name in KINDS if is_kind(mode)), None)


class Folder:
    """An open folder (see the module docstring). ``inputs``: what it may never write over or delete;
    ``labels``: entry name -> how messages name it (``--json-file PATH``), else FOLDER/NAME."""

    def __init__(self, fd: int, shown: str, inputs: Inputs | None = None, labels: dict[str, str] | None = None):
        self.fd, self.shown = fd, shown
        self.inputs = inputs if inputs is not None else Inputs()
        self.labels = dict(labels or {})
        self._close = weakref.finalize(self, os.close, fd)

    @classmethod
    def at(cls, path: str | os.PathLike, inputs: Inputs | None = None) -> "Folder":
        """The existing folder ``path`` (symlinks in the path followed, as the user named it)."""
        return cls(open_dir(path), os.fspath(path), inputs)

    def close(self) -> None:
        self._close()

    def __enter__(self) -> "Folder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def label(self, name: str) -> str:
        return self.labels.get(name) or os.path.join(self.shown, name)

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry ``name`` itself (a symlink not followed); None when there is none."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def listdir(self) -> list[str]:
        return os.listdir(self.fd)

    def is_file(self, name: str) -> bool:
        st = self.lstat(name)
        return st is not None and stat.S_ISREG(st.st_mode)

    # ------------------------------------------------------------------ writing
    def check_entry(self, name: str, *, verb: str = "written") -> None:
        """UsageError (exit 2) when the entry ``name`` is an input (its own identity or, for a symlink, its
        target's) or, symlinks followed, a FIFO, socket or device: nothing may replace it."""
        st = self.lstat(name)
        if st is None:
            return
        target: os.stat_result | None = st
        hit = self.inputs.identity(st)
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.stat(name, dir_fd=self.fd)
            except OSError:
                target = None
            hit = hit or (self.inputs.identity(target) if target is not None else None)
        if hit is not None:
            raise UsageError(f"{self.label(name)}: is the input {hit} under another path {SPARED}; name an output "
                             f"apart from the inputs (nothing was {verb})")
        kind = special_kind(target.st_mode) if target is not None else None
        if kind is not None:
            raise UsageError(f"{self.label(name)}: is {kind}, not a regular file or folder; name a new path "
                             f"(nothing was {verb})")

    def create_temp(self, name: str) -> tuple[int, str]:
        """A new empty file beside ``name`` (``.NAME.RANDOM.tmp``, created O_EXCL | O_NOFOLLOW, mode 0666 less
        the umask, as open() gives): (its descriptor, its name)."""
        while True:
            tmp = f".{name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                             dir_fd=self.fd)
            except FileExistsError:
                continue
            except BaseException:  # Ctrl-C right after the file was made (O_EXCL: it is ours): not left behind
                self.discard(tmp)
                raise
            return fd, tmp

    def publish(self, tmp: str, name: str) -> None:
        """Rename the written temp file ``tmp`` over ``name`` (checked first: :meth:`check_entry`), then fsync
        the folder."""
        self.check_entry(name)
        try:
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            _fsync(self.fd)
        except OSError as e:  # named by the file it was for, not the temp name
            raise OSError(e.errno, e.strerror, os.path.join(self.shown, name)) from None

    def discard(self, tmp: str | None) -> None:
        """Remove a temp file that was not published; never raises."""
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=self.fd)
            except OSError:
                pass

    def write_file(self, name: str, data: bytes) -> None:
        """Write ``data`` as ``name`` atomically (temp file, fsync, :meth:`publish`)."""
        fd, tmp = self.create_temp(name)
        try:
            try:
                view, at = memoryview(data), 0
                while at < len(view):
                    at += os.write(fd, view[at:at + (16 << 20)])
                os.fsync(fd)
            except OSError as e:
                raise OSError(e.errno, e.strerror, os.path.join(self.shown, name)) from None
            finally:
                os.close(fd)
            self.publish(tmp, name)
            tmp = None
        finally:
            self.discard(tmp)

    def subfolder(self, name: str, *, create: bool = True) -> "Folder":
        """The folder ``name`` inside this one (made when missing and ``create``), opened without following a
        symlink; UsageError when it is a symlink, not a folder, an input (identity) or a mount point."""
        if create:
            try:
                os.mkdir(name, 0o777, dir_fd=self.fd)
            except FileExistsError:
                pass
        try:
            fd = os.open(name, NOFOLLOW_DIR, dir_fd=self.fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UsageError(f"{self.label(name)}: is a symlink or not a folder; replay does not write through "
                                 "a link") from None
            raise
        sub = Folder(fd, os.path.join(self.shown, name), self.inputs)
        hit = self.inputs.identity(os.fstat(fd))
        if hit is not None or is_mount_point(fd, self.fd):
            sub.close()
            raise UsageError(f"{self.label(name)}: " + (
                f"is the input {hit} under another path {SPARED}; nothing was written" if hit is not None else
                "is a mount point; replay writes a folder's contents only on that folder's own mount"))
        return sub

    def delete(self, name: str) -> None:
        """Delete the entry ``name`` (a symlink goes, never what it names); not a folder; never an input."""
        st = self.lstat(name)
        if st is None:
            return
        hit = self.inputs.identity(st)
        if hit is not None:
            raise UsageError(f"{self.label(name)}: is the input {hit} under another path {SPARED}; not deleted")
        os.unlink(name, dir_fd=self.fd)

    # ------------------------------------------------------------------ deleting a tree
    def check_tree(self, prefix: str) -> None:
        """Before a delete of this folder's contents: UsageError (``prefix``: how the message starts) when an
        entry is an input (its own identity, or a symlink's target's), a mount point lies inside (the mount
        table, and each folder's device and mount id), it holds more than WALK_LIMIT entries or nests deeper
        than MAX_TREE_DEPTH. Symlinks are not followed."""
        under = mounts_under(self.fd)
        if under:
            raise UsageError(f"{prefix}: {under[0]} is a mount point (another file system or a bind mount); "
                             "--overwrite does not delete across one")
        self._check_level(self.fd, self.shown, os.fstat(self.fd).st_dev, mount_id(self.fd), 0, [0], prefix)

    def _check_level(self, fd: int, shown: str, dev: int, mnt: int | None, depth: int, seen: list, prefix: str
                     ) -> None:
        if depth > MAX_TREE_DEPTH:
            raise UsageError(f"{prefix}: nests folders more than {MAX_TREE_DEPTH} deep; --overwrite replaces only "
                             "a recording")
        names = os.listdir(fd)
        if names and not os.access(".", os.W_OK | os.X_OK, dir_fd=fd, effective_ids=True):
            raise UsageError(f"{prefix}: {shown} is read-only (no write permission or a read-only file system), so "
                             "the old recording could not be deleted; make it writable or name another folder "
                             "(nothing was written or deleted)")
        for name in names:
            seen[0] += 1
            if seen[0] > WALK_LIMIT:
                raise UsageError(f"{prefix}: holds more than {WALK_LIMIT:,} files; --overwrite replaces only a "
                                 "recording")
            here = os.path.join(shown, name)
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            hits = [self.inputs.identity(st)]
            if stat.S_ISLNK(st.st_mode):
                try:
                    hits.append(self.inputs.identity(os.stat(name, dir_fd=fd)))
                except OSError:
                    pass
            hit = next((h for h in hits if h is not None), None)
            if hit is not None:
                raise UsageError(f"{prefix}: {here} is the input {hit} under another path {SPARED}; name an output "
                                 "apart from the input (nothing was written or deleted)")
            if stat.S_ISDIR(st.st_mode):
                child = self._enter(fd, name, st, dev, mnt, here, prefix)
                try:
                    self._check_level(child, here, dev, mnt, depth + 1, seen, prefix)
                finally:
                    os.close(child)

    @staticmethod
    def _enter(fd: int, name: str, st: os.stat_result, dev: int, mnt: int | None, here: str, prefix: str) -> int:
        """The subfolder ``name`` opened O_NOFOLLOW; UsageError when it is a mount point or changed since ``st``."""
        child = os.open(name, NOFOLLOW_DIR, dir_fd=fd)
        cst = os.fstat(child)
        if cst.st_dev != dev or (mnt is not None and mount_id(child) != mnt) or ident(cst) != ident(st):
            os.close(child)
            raise UsageError(f"{prefix}: {here} is a mount point (another file system or a bind mount) or changed "
                             "meanwhile; replay does not delete across one")
        return child

    def remove_tree(self, name: str) -> None:
        """Delete the entry ``name`` and, for a folder, everything in it (see the module docstring): a symlink
        is unlinked, never followed; UsageError, with what is left in place, at a mount point or an input."""
        st = self.lstat(name)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            self.delete(name)
            return
        prefix = self.label(name)
        fd = os.open(name, NOFOLLOW_DIR, dir_fd=self.fd)
        try:
            if ident(os.fstat(fd)) != ident(st) or is_mount_point(fd, self.fd):
                raise UsageError(f"{prefix}: is a mount point or changed meanwhile; replay does not delete across one")
            hit = self.inputs.identity(st)
            if hit is not None:
                raise UsageError(f"{prefix}: is the input {hit} under another path {SPARED}; not deleted")
            under = mounts_under(fd)
            if under:
                raise UsageError(f"{prefix}: {under[0]} is a mount point; replay does not delete across one")
            self._empty(fd, os.path.join(self.shown, name), st.st_dev, mount_id(fd), 0, prefix)
            os.rmdir(name, dir_fd=self.fd)
        except OSError as e:  # permissions changed since the check, a read-only remount: what is left is named
            raise UsageError(f"{prefix}: cannot delete {e.filename or name} ({os.strerror(e.errno or 0).lower()}); "
                             f"left in place: {os.path.join(self.shown, name)}") from None
        finally:
            os.close(fd)

    def _empty(self, fd: int, shown: str, dev: int, mnt: int | None, depth: int, prefix: str) -> None:
        if depth > MAX_TREE_DEPTH:
            raise UsageError(f"{prefix}: nests folders more than {MAX_TREE_DEPTH} deep; not deleted")
        for name in os.listdir(fd):
            here = os.path.join(shown, name)
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            hit = self.inputs.identity(st)
            if hit is not None:
                raise UsageError(f"{prefix}: {here} is the input {hit} under another path {SPARED}; not deleted")
            if stat.S_ISDIR(st.st_mode):
                child = self._enter(fd, name, st, dev, mnt, here, prefix)
                try:
                    self._empty(child, here, dev, mnt, depth + 1, prefix)
                finally:
                    os.close(child)
                os.rmdir(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)  # a symlink is unlinked, never followed

    # ------------------------------------------------------------------ renaming in place
    def exchange(self, a: str, b: str) -> bool:
        """Atomically exchange the entries ``a`` and ``b`` of this folder (Linux renameat2 RENAME_EXCHANGE);
        False when the kernel, the C library or the file system does not offer it."""
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            renameat2 = libc.renameat2
        except (OSError, AttributeError):
            return False
        if renameat2(self.fd, os.fsencode(a), self.fd, os.fsencode(b), 2) == 0:  # 2: RENAME_EXCHANGE
            return True
        code = ctypes.get_errno()
        if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
            return False
        raise OSError(code, os.strerror(code), self.label(b))

    def rename_entry(self, a: str, b: str) -> None:
        """Rename the entry ``a`` to ``b`` in this folder (``b`` absent or an empty folder)."""
        os.rename(a, b, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def make_temp_folder(self, name: str, mode: int = 0o777) -> str:
        """A new empty folder ``.NAME.RANDOM.tmp`` here (mode 0777 less the umask, as mkdir gives): its name."""
        while True:
            tmp = f".{name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
            try:
                os.mkdir(tmp, mode, dir_fd=self.fd)
            except FileExistsError:
                continue
            except BaseException:  # Ctrl-C right after the folder was made (a fresh name: it is ours)
                try:
                    os.rmdir(tmp, dir_fd=self.fd)
                except OSError:
                    pass
                raise
            return tmp
