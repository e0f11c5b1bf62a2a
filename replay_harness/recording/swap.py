"""Replacing an output recording without ever deleting an input: identity checks, a staging folder, the swap.

`replay synth --out DIR --overwrite` (docs/HARDENING.md, "Output paths") compares files and folders by
identity (st_dev, st_ino: the same file under another path, through a symlink, a hard link or a bind mount,
is the same file) before anything is written or deleted; writes the new recording into a staging folder
beside DIR; and only once it is complete swaps it into place (an atomic exchange where the kernel offers
one, else two renames), deleting the old recording last.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

from replay_harness.errors import UsageError

MANIFEST = "manifest.json"
STEPS = "steps"
WALK_LIMIT = 100_000  # entries of an output folder looked at before --overwrite refuses it (not a recording)


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def input_identities(source: str | os.PathLike) -> dict[tuple[int, int], str]:
    """(st_dev, st_ino) -> path of what a recording reads, symlinks resolved: its folder, manifest.json,
    steps/ and every file in steps/ (the same file reached by another path has the same identity)."""
    found: dict[tuple[int, int], str] = {}
    folder = Path(source)
    candidates = [folder, folder / MANIFEST, folder / STEPS]
    try:
        candidates += sorted((folder / STEPS).iterdir())
    except OSError:
        pass
    for p in candidates:
        try:
            found.setdefault(_ident(os.stat(p)), str(p))
        except OSError:
            continue
    return found


def check_replace(out: str | os.PathLike, source: str | os.PathLike, *, overwrite: bool,
                  option: str = "--out") -> None:
    """UsageError (exit 2), before anything is written or deleted, when writing the recording ``out`` could
    touch the recording ``source``, or replacing it could delete more than a recording:

    * ``out`` exists and is not a folder; or is a non-empty folder without ``overwrite``; or, with it, a
      non-empty folder that is not a recording (no manifest.json) or that holds another file system;
    * ``out``, a folder above it, or anything under it (symlinks not followed; each entry's own identity
      and, for a symlink, its target's) is one of the source's folder, manifest, steps/ or step files
      (:func:`input_identities`): a bind mount, a symlink or a hard link of the input."""
    out = Path(out)
    if os.path.lexists(out) and not out.is_dir():
        raise UsageError(f"{option} {out}: is a file, not a folder (name a new or empty folder)")
    inputs = input_identities(source)

    def clash(p: Path, st: os.stat_result) -> None:
        hit = inputs.get(_ident(st))
        if hit is not None:
            raise UsageError(f"{option} {out}: {p} is the input {hit} under another path (a bind mount, a symlink "
                             "or a hard link); name an output apart from the input (nothing was written or deleted)")

    real = Path(os.path.realpath(out))
    for p in [real, *real.parents]:  # the output, or a folder that holds it, is the input
        try:
            clash(p, os.stat(p))
        except OSError:
            continue
    if not out.is_dir():
        return
    entries = os.listdir(out)
    if not entries:
        return
    if not overwrite:
        raise UsageError(f"{option} {out}: folder exists and is not empty (pass --overwrite to replace it)")
    if not (out / MANIFEST).is_file():
        raise UsageError(f"{option} {out}: not a recording (no {MANIFEST}); --overwrite replaces only a recording")
    top = os.stat(out)
    seen = 0
    for folder, dirs, files in os.walk(out, followlinks=False):
        for name in dirs + files:
            seen += 1
            if seen > WALK_LIMIT:
                raise UsageError(f"{option} {out}: holds more than {WALK_LIMIT:,} files; --overwrite replaces "
                                 "only a recording")
            p = Path(folder) / name
            try:
                st = os.lstat(p)
            except OSError:
                continue
            clash(p, st)
            if stat.S_ISLNK(st.st_mode):
                try:
                    clash(p, os.stat(p))
                except OSError:
                    pass
            elif st.st_dev != top.st_dev:
                raise UsageError(f"{option} {out}: {p} is on another file system (a mount point); --overwrite "
                                 "does not delete across one")


def staging_folder(out: str | os.PathLike) -> Path:
    """A new empty folder beside ``out`` (same file system, so the swap is a rename): ``.NAME.RANDOM.tmp``;
    the folders above ``out`` are made when missing."""
    out = Path(os.path.abspath(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(staged, 0o777 & ~umask)  # the mode a plain mkdir gives, not mkdtemp's 0700
    return staged


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange the folders ``a`` and ``b`` (Linux renameat2 RENAME_EXCHANGE); False when the
    kernel, the C library or the file system does not offer it."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def swap_into_place(staged: Path, out: str | os.PathLike) -> None:
    """Put the complete recording ``staged`` at ``out``; the recording that was there (checked by
    :func:`check_replace`) is deleted only after the new one is in place. A missing or empty ``out`` is
    simply replaced by a rename."""
    out = Path(out)
    if out.is_symlink():
        out = Path(os.path.realpath(out))  # the folder the link names is the output, the link stays
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        os.replace(staged, out)
        return
    if _exchange(staged, out):
        shutil.rmtree(staged)  # now the old recording
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", suffix=".tmp", dir=out.parent))
    os.replace(out, old)  # onto the empty folder just made
    try:
        os.replace(staged, out)
    except BaseException:
        os.replace(old, out)  # put the old recording back
        raise
    shutil.rmtree(old)


def discard(staged: Path | None) -> None:
    """Remove a staging folder that did not make it into place (an error, Ctrl-C); never raises."""
    if staged is not None:
        shutil.rmtree(staged, ignore_errors=True)
