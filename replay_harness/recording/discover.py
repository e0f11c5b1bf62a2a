"""Which recordings a command's path arguments name: recordings, or folders that hold recordings.

A path whose folder has a ``manifest.json`` is one recording. Any other folder is searched
recursively (in sorted order, never inside a recording) for recordings. Each recording is
listed once, in the order first found, however many arguments name it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from replay_harness.errors import InputError
from replay_harness.recording.schema import MANIFEST


def _walk(folder: Path) -> list[Path]:
    """The recordings at or below ``folder``, depth first in sorted order (a stack, not recursion: a folder
    tree a thousand levels deep is no RecursionError)."""
    found: list[Path] = []
    stack = [folder]
    while stack:
        here = stack.pop()
        if (here / MANIFEST).exists():
            found.append(here)
            continue
        try:
            children = sorted(p for p in here.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            continue
        stack.extend(reversed(children))
    return found


def find_recordings(paths: Iterable[str]) -> list[str]:
    """The recordings under ``paths`` (str paths, as given or found); InputError (exit 2) for a path
    that does not exist or holds no recording."""
    out: list[str] = []
    seen: set[str] = set()
    for arg in paths:
        path = Path(arg)
        if not path.exists():
            raise InputError(arg, "no such file or directory")
        if not path.is_dir() or (path / MANIFEST).exists():
            found = [path]  # Recording() reports what is wrong with a non-recording path
        else:
            found = _walk(path)
            if not found:
                raise InputError(arg, f"no replay recording ({MANIFEST}) in this folder or below")
        for rec in found:
            key = os.path.realpath(rec)
            if key not in seen:
                seen.add(key)
                out.append(str(rec) if rec != path else arg)
    return out
