"""Replacing an output recording without ever deleting an input: the checks, a staging folder, the swap.

`replay synth --out DIR [--overwrite]` and the pytest plugin's ``--replay-update`` (docs/HARDENING.md,
"Writes and deletes") write a recording this way, through :mod:`replay_harness.guarded`:

1. :func:`claim_replace`, before any work: DIR checked against the inputs (place through the mount table,
   identity of DIR, of every folder above it and of everything under it, symlinks not followed); an existing
   non-empty DIR needs ``overwrite``, must be a recording (``manifest.json``), may hold no mount point, no
   input and no more than WALK_LIMIT entries, and may not itself be a symlink or a mount point;
2. :func:`write_replacing`: the new recording is written into a staging folder beside DIR, made and held open
   through DIR's parent's descriptor; DIR is checked again; the staging folder is swapped into place (an
   atomic ``renameat2(RENAME_EXCHANGE)`` relative to that descriptor where the kernel offers it, else two
   renames); the old recording is deleted last, never following a link nor crossing a mount. An error or
   Ctrl-C while writing leaves the old recording as it was and removes the staging folder.
"""
from __future__ import annotations

import os
import stat
from typing import Callable, Iterable

from replay_harness.errors import UsageError
from replay_harness.guarded import Claim, Inputs, claim, claims

MANIFEST = "manifest.json"


def claim_replace(out: str | os.PathLike, inputs: Inputs | Iterable, *, overwrite: bool,
                  option: str = "--out") -> Claim:
    """Check the output recording folder ``out`` against ``inputs`` before any work (UsageError, exit 2, when
    writing it could touch an input or replacing it could delete more than a recording: see the module
    docstring); the claim :func:`write_replacing` writes through."""
    c = claim(out, inputs, option, folder=True, overwrite=overwrite, swap=True)
    _check_old(c, overwrite)
    return c


def _check_old(c: Claim, overwrite: bool) -> None:
    old = c.existing()
    if old is None:
        return
    with old:
        if not old.listdir():
            return
        if not overwrite:
            raise UsageError(f"{c.label}: folder exists and is not empty (pass --overwrite to replace it)")
        if not old.is_file(MANIFEST):
            raise UsageError(f"{c.label}: not a recording (no {MANIFEST}); --overwrite replaces only a recording")
        old.check_tree(c.label)


def write_replacing(c: Claim, write: Callable[[str], object]) -> None:
    """``write(staged)`` writes the new recording into the staging folder ``staged`` (a path; its writer gets
    the descriptor held for it); then it is swapped in for the output of ``c`` (:func:`swap_into_place`)."""
    staged: str | None = None
    swapped = False
    try:  # the staging folder made inside the try: an interrupt right after it still discards it
        staged = c.staging()
        write(staged)
        _check_old(c, c.overwrite)  # again: nothing may have moved in meanwhile
        swap_into_place(c, os.path.basename(staged))
        swapped = True
    finally:
        if staged is not None:
            discard(c, None if swapped else os.path.basename(staged))
            claims.forget(staged)
        claims.forget(c.path)


def swap_into_place(c: Claim, staged: str) -> None:
    """Put the complete recording ``staged`` (an entry of the output's parent) at the output of ``c``; the
    recording that was there is deleted only after the new one is in place. A missing or empty output is
    simply replaced by a rename."""
    base = c.parent()
    st = base.lstat(c.name)
    if st is None or (stat.S_ISDIR(st.st_mode) and not _holds_anything(base, c.name)):
        base.rename_entry(staged, c.name)
        return
    if base.exchange(staged, c.name):
        old = staged
    else:
        old = base.make_temp_folder(f"{c.name}.old")
        base.rename_entry(c.name, old)  # onto the empty folder just made
        try:
            base.rename_entry(staged, c.name)
        except BaseException:
            base.rename_entry(old, c.name)  # put the old recording back
            raise
    try:
        base.remove_tree(old)
    except UsageError as e:
        raise UsageError(f"{c.label}: the new recording is in place, but the old one (now "
                         f"{os.path.join(base.shown, old)}) was not deleted: {e}") from None


def _holds_anything(base, name: str) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=base.fd)
    except OSError:
        return True
    try:
        return bool(os.listdir(fd))
    finally:
        os.close(fd)


def discard(c: Claim, staged: str | None) -> None:
    """Remove a staging folder that did not make it into place (an error, Ctrl-C); never raises."""
    if staged is not None:
        try:
            c.parent().remove_tree(staged)
        except (OSError, UsageError):
            pass
