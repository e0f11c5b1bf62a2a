"""Where a folder lies on its file system, read from the mount table (docs/HARDENING.md, "Writes and deletes").

A bind mount shows a folder under a second path with the same device number (``st_dev``), so neither the
path nor ``st_dev`` tells that ``/mnt/x`` *is* ``/data/rec``. The mount table does: each line of
``/proc/self/mountinfo`` gives a mount's id, its device, the folder of the file system it shows (``root``)
and where it is mounted. An open folder's mount id is in ``/proc/self/fdinfo/FD`` and its path in
``/proc/self/fd/FD``; together they give its :class:`Place`: the device and the path from the root of the
file system, the same whichever mount it is reached through. Where ``/proc`` lacks these (not Linux), a
place falls back to ``st_dev`` and the resolved path.
"""
from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass

_ESCAPE = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space as \040, a newline as \012, "\" as \134


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mountinfo: its id, the device ("major:minor"), the folder of the file system it
    shows (``root``) and the path it is mounted at (``point``)."""

    id: int
    dev: str
    root: str
    point: str


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


def mount_table() -> dict[int, Mount]:
    """Mount id -> :class:`Mount` for every mount this process sees; {} when the table cannot be read."""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            text = f.read().decode("utf-8", "surrogateescape")
    except OSError:
        return {}
    table = {}
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < 5 or not fields[0].isdigit():
            continue
        table[int(fields[0])] = Mount(int(fields[0]), fields[2], _unescape(fields[3]), _unescape(fields[4]))
    return table


def mount_id(fd: int) -> int | None:
    """The id of the mount an open descriptor lies on (``mnt_id`` of /proc/self/fdinfo/FD); None if unknown."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            for line in f.read().decode("ascii", "replace").splitlines():
                if line.startswith("mnt_id:"):
                    return int(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return None


def fd_path(fd: int) -> str | None:
    """The path of an open descriptor in this process's view (/proc/self/fd/FD); None when the kernel cannot
    give one (deleted, outside the process's root, not Linux)."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if not path.startswith("/") or path.endswith(" (deleted)"):
        return None
    return path


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@dataclass(frozen=True)
class Place:
    """Where a file or folder lies: the device and its path from the root of that file system (the same
    through any bind mount, symlink or relative path)."""

    dev: str
    path: str

    def child(self, *names: str) -> "Place":
        return Place(self.dev, posixpath.normpath(posixpath.join(self.path, *names)))

    def relation(self, other: "Place") -> str | None:
        """"is" (the same place), "is inside" (under ``other``), "contains" (``other`` is under it), or None."""
        if self.dev != other.dev:
            return None
        if self.path == other.path:
            return "is"
        if _within(self.path, other.path):
            return "is inside"
        if _within(other.path, self.path):
            return "contains"
        return None


def place_of(fd: int, table: dict[int, Mount] | None = None) -> Place:
    """The :class:`Place` of the open folder ``fd`` (``table``: a :func:`mount_table` already read)."""
    table = mount_table() if table is None else table
    path, mount = fd_path(fd), table.get(mount_id(fd) or -1)
    if path is not None and mount is not None and _within(path, mount.point):
        rest = path[len(mount.point.rstrip("/")):].lstrip("/")
        return Place(mount.dev, posixpath.normpath(posixpath.join(mount.root, rest)))
    st = os.fstat(fd)
    return Place(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", path or f"<inode {st.st_ino}>")


def is_mount_point(fd: int, parent_fd: int) -> bool:
    """Is the open folder ``fd`` the root of a mount other than its parent's (``parent_fd``)? By mount id where
    /proc gives it (a bind mount of the same file system included), else by device number."""
    a, b = mount_id(fd), mount_id(parent_fd)
    if a is not None and b is not None:
        return a != b
    return os.fstat(fd).st_dev != os.fstat(parent_fd).st_dev


def mounts_under(fd: int, table: dict[int, Mount] | None = None) -> list[str]:
    """The mount points strictly inside the open folder ``fd`` (a bind-mounted file or folder among them)."""
    path = fd_path(fd)
    if path is None:
        return []
    table = mount_table() if table is None else table
    return sorted(m.point for m in table.values() if m.point != path and _within(m.point, path))
