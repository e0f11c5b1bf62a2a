"""What a command reads, as identities and places: what no write or delete may touch.

:class:`Inputs` takes the paths a command reads (recordings, folders of recordings, a model folder or file,
a prompts file) and records, before any work:

* the identity (st_dev, st_ino) of each input and of everything under an input folder (a symlink's own and
  its target's; a symlinked folder walked only when it is a recording's ``steps/``, the one folder a reader
  follows through a link; loops cut by identity; at most :data:`WALK_LIMIT` entries, :data:`MAX_DEPTH`
  folders deep): the same file under another path (a hard link, a symlink, a bind mount) has the same
  identity;
* the :class:`~replay_harness.guarded.mounts.Place` of each input and of each ``steps/`` a symlink inside an
  input names (a recording whose ``steps/`` links elsewhere reads there): a target is refused when its
  place is, lies inside or (for a folder written or deleted) holds one of them, through any mount.

A path that does not exist (a Hub repo id, a built-in model name) names no file and is skipped.
"""
from __future__ import annotations

import os
import stat
from typing import Iterable

from replay_harness.guarded.mounts import Mount, Place, mount_table, place_of

WALK_LIMIT = 100_000  # entries under the inputs recorded by identity (the places still cover the rest)
MAX_DEPTH = 16        # folders deep under an input
LINKED_FOLDER = "steps"  # the one folder a reader follows through a symlink (Recording reads REC/steps/*); others
                         # (`loop -> .`, `up -> /`) are never read, so not followed: their link and target are kept
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class Inputs:
    """The identities and places of the files and folders a command reads (see the module docstring)."""

    def __init__(self, paths: Iterable[str | os.PathLike | None] = ()):
        self.ids: dict[tuple[int, int], str] = {}
        self.places: list[tuple[Place, str]] = []
        self.paths: list[str] = []
        self._seen = 0
        table = mount_table()
        for p in paths:
            self.add(p, table)

    def add(self, path: str | os.PathLike | None, table: dict[int, Mount] | None = None) -> None:
        """Record ``path`` (a file or a folder, symlinks followed) and, for a folder, what lies under it."""
        if path is None:
            return
        try:
            shown = os.fspath(path)
            st = os.stat(shown)
            real = os.path.realpath(shown)
        except (OSError, ValueError, TypeError):
            return
        table = mount_table() if table is None else table
        self.paths.append(shown)
        self.ids.setdefault(ident(st), shown)
        folder, name = (real, None) if stat.S_ISDIR(st.st_mode) else os.path.split(real)
        try:
            fd = os.open(folder, DIR_FLAGS)
        except OSError:
            return
        try:
            place = place_of(fd, table)
            self.places.append((place.child(name) if name else place, shown))
            if name is None:
                self._walk(fd, shown, 0, table, {ident(st)})
        finally:
            os.close(fd)

    def _walk(self, fd: int, shown: str, depth: int, table: dict[int, Mount], visited: set) -> None:
        if depth >= MAX_DEPTH:
            return
        try:
            names = os.listdir(fd)
        except OSError:
            return
        for name in names:
            if self._seen >= WALK_LIMIT:
                return
            self._seen += 1
            here = os.path.join(shown, name)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            self.ids.setdefault(ident(st), here)
            linked = stat.S_ISLNK(st.st_mode)
            if linked:
                try:
                    st = os.stat(name, dir_fd=fd)
                except OSError:
                    continue
                self.ids.setdefault(ident(st), here)
            if not stat.S_ISDIR(st.st_mode) or ident(st) in visited or (linked and name != LINKED_FOLDER):
                continue
            visited.add(ident(st))
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                if linked:
                    self.places.append((place_of(child, table), here))  # a recording's linked steps/: read there
                self._walk(child, here, depth + 1, table, visited)
            except OSError:
                pass
            finally:
                os.close(child)

    def identity(self, st: os.stat_result) -> str | None:
        """The input (as shown to the user) that has the identity of ``st``; None when none has."""
        return self.ids.get(ident(st))

    def place_clash(self, place: Place, *, holds: bool) -> tuple[str, str] | None:
        """(how, input) when ``place`` is an input's place, lies inside one or (``holds``: a folder written or
        deleted) holds one; how is "is", "is inside" or "contains". None when apart from every input."""
        for other, shown in self.places:
            how = place.relation(other)
            if how is not None and (how != "contains" or holds):
                return how, shown
        return None

    def folder_clash(self, fd: int) -> str | None:
        """The input that is the open folder ``fd`` or a folder above it, by identity (a ".." walk to the root,
        which crosses mounts as the kernel does); None when none is."""
        try:
            here = os.dup(fd)
        except OSError:
            return None
        try:
            for _ in range(256):
                st = os.fstat(here)
                hit = self.identity(st)
                if hit is not None:
                    return hit
                up = os.open("..", DIR_FLAGS | os.O_PATH, dir_fd=here)
                if ident(os.fstat(up)) == ident(st):  # the root
                    os.close(up)
                    return None
                os.close(here)
                here = up
        except OSError:
            return None
        finally:
            os.close(here)
        return None
