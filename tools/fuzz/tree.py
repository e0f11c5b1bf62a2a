"""Snapshot of an input tree, to prove a command left it unchanged, and its removal.

A snapshot maps every path under the root (symlinks not followed) to (kind, mode, size, content digest):
a regular file's digest covers its bytes (only the data extents of a sparse file, with their offsets, so a
20 GiB sparse claim is hashed in microseconds), a symlink's its target text, a folder's its entry names.
Files and folders without read permission are read by briefly granting the owner read permission (the
mode is put back exactly); FIFOs, sockets and devices are never opened.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import stat

Entry = tuple[str, int, int, str]  # (kind, st_mode & 0o7777, st_size, sha256 hex or "")


def _data_digest(path: str, size: int) -> str:
    """sha256 of a regular file's data extents (offset, bytes), found with SEEK_DATA / SEEK_HOLE."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        fd, pos = f.fileno(), 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            h.update(start.to_bytes(8, "little"))
            os.lseek(fd, start, os.SEEK_SET)
            left = end - start
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                h.update(chunk)
                left -= len(chunk)
            pos = end
    return h.hexdigest()


def _with_mode(path: str, mode: int, need: int, fn):
    """fn() with ``need`` bits added to ``path``'s mode when they are missing, the mode put back after."""
    if mode & need == need:
        return fn()
    os.chmod(path, mode | need)
    try:
        return fn()
    finally:
        os.chmod(path, mode)


def snapshot(root: str | os.PathLike, skip: tuple[str, ...] = ()) -> dict[str, Entry]:
    """Every path under ``root`` (relative, "." for root) -> (kind, mode, size, digest); the paths in ``skip``
    ("./out") are left out, of their folder's listing too (an output a command may make or replace)."""
    out: dict[str, Entry] = {}
    root = str(root)

    def visit(path: str, rel: str) -> None:
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", 0, 0, os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = ("file", mode, st.st_size, _with_mode(path, mode, 0o400, lambda: _data_digest(path, st.st_size)))
        elif stat.S_ISDIR(st.st_mode):
            names = sorted(n for n in _with_mode(path, mode, 0o500, lambda: os.listdir(path))
                           if f"{rel}/{n}" not in skip)
            out[rel] = ("dir", mode, 0, hashlib.sha256(os.fsencode("\0".join(names))).hexdigest())
            _with_mode(path, mode, 0o500, lambda: [visit(os.path.join(path, n), f"{rel}/{n}") for n in names])
        else:
            kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "special"
            out[rel] = (kind, mode, 0, f"{st.st_ino}:{st.st_rdev}")  # replaced by another node: a change

    visit(root, ".")
    return out


def differences(before: dict[str, Entry], after: dict[str, Entry], limit: int = 3) -> list[str]:
    """What changed between two snapshots, a few phrases ("steps/x: bytes changed", "y: added")."""
    found = []
    for rel in sorted(set(before) | set(after)):
        a, b = before.get(rel), after.get(rel)
        if a == b:
            continue
        if a is None or b is None:
            found.append(f"{rel}: {'added' if a is None else 'removed'}")
        else:
            what = ("kind" if a[0] != b[0] else "mode" if a[1] != b[1] else "size" if a[2] != b[2] else "bytes")
            found.append(f"{rel}: {what} changed")
    return found[:limit] + ([f"(+{len(found) - limit} more)"] if len(found) > limit else [])


def unmount_under(root: str) -> None:
    """Detach every mount point at or under ``root`` (the write-path kinds' bind mounts), deepest first, so a
    delete never reaches through one into what it shows."""
    try:
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
    except OSError:
        return
    real = os.path.realpath(root)
    decode = lambda p: re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), p)  # noqa: E731
    under = [decode(p) for p in points if decode(p) == real or decode(p).startswith(real + "/")]
    if under:
        libc = ctypes.CDLL(None, use_errno=True)
        for point in sorted(set(under), key=len, reverse=True):
            libc.umount2(os.fsencode(point), 2)  # MNT_DETACH


def remove(root: str | os.PathLike) -> None:
    """Delete ``root`` whatever the modes under it (mount points under it detached first; each folder made
    listable before it is walked; links not followed)."""
    root = str(root)
    unmount_under(root)
    if os.path.islink(root) or (os.path.lexists(root) and not os.path.isdir(root)):
        os.unlink(root)
        return
    if not os.path.lexists(root):
        return
    os.chmod(root, 0o700)
    for dirpath, dirnames, _ in os.walk(root, followlinks=False):  # top-down: children fixed before visited
        for name in dirnames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, 0o700)
    shutil.rmtree(root, ignore_errors=True)
