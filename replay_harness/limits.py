"""Resource limits and file guards for hostile input, in one place (docs/FIXTURES.md, "Limits").

Every limit has a default that fits real use and an environment variable that raises it:

    REPLAY_MAX_VOCAB           1,048,576 tokens     vocab_size of a manifest, V of a step's logits
    REPLAY_MAX_STEP_BYTES      16 GiB               a step file, as its size on disk and as its header claims
    REPLAY_MAX_MANIFEST_BYTES  16 MiB               manifest.json
    REPLAY_MAX_REPLY_BYTES     64 MiB               one reply line of an exec: program
    REPLAY_MAX_STDERR_BYTES    64 MiB               an exec: program's stderr between two replies
    REPLAY_MAX_HISTORY         1,048,576 tokens     a request's entries in one ragged list of a step (its prompt,
                                                    its output so far, its bias / allowed / stop / bad-word lists)

Limits are checked before anything is allocated (a header claiming 2 GiB is refused from its 8-byte
length and its JSON, never by reading the 2 GiB). Exceeding one is an :class:`InputError` (exit 2)
naming file, step, field, the limit and the variable. Only regular files are read (no FIFO, device or
socket: opening one would block or never end); symlinks are followed and their target checked. No command
writes into, over or around one of its inputs, nor over a FIFO, socket or device (:func:`check_output`, through
replay_harness.guarded: docs/HARDENING.md, "Writes and deletes").
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from replay_harness.errors import InputError, UsageError
from replay_harness.guarded import claim


@dataclass(frozen=True)
class Limit:
    """One limit: what it bounds (a phrase for messages), its default, the variable that raises it."""

    what: str
    default: int
    env: str
    unit: str = "bytes"


MAX_VOCAB = Limit("vocabulary size", 1 << 20, "REPLAY_MAX_VOCAB", unit="tokens")
MAX_STEP_BYTES = Limit("step file size", 16 << 30, "REPLAY_MAX_STEP_BYTES")
MAX_MANIFEST_BYTES = Limit("manifest size", 16 << 20, "REPLAY_MAX_MANIFEST_BYTES")
# What replay takes from an external program (`exec:`; docs/EXTERNAL.md, "Caps"): one reply line (the largest
# real step, R = 65,536 requests, k = 16, V = 1,048,576, answers in about 11 MB), and the stderr it may write
# between two replies (past either, the program is killed: exit 3).
MAX_REPLY_BYTES = Limit("reply line", 64 << 20, "REPLAY_MAX_REPLY_BYTES")
MAX_STDERR_BYTES = Limit("stderr between two replies", 64 << 20, "REPLAY_MAX_STDERR_BYTES")
# A request's entries in one ragged list of a step (docs/FIXTURES.md, "The sampling pipeline"): bounds the
# reference's per-row history work (penalties, bad words) to O(entries x rows).
MAX_HISTORY = Limit("token history", 1 << 20, "REPLAY_MAX_HISTORY", unit="tokens")
LIMITS = (MAX_VOCAB, MAX_STEP_BYTES, MAX_MANIFEST_BYTES, MAX_REPLY_BYTES, MAX_STDERR_BYTES, MAX_HISTORY)


def value(limit: Limit) -> int:
    """The limit in force: the environment variable when set (a positive integer), else the default."""
    text = os.environ.get(limit.env)
    if text is None or not text.strip():
        return limit.default
    try:
        n = int(text.strip().replace("_", ""), 0)
    except ValueError:
        n = 0
    if n <= 0:
        raise UsageError(f"{limit.env}={text!r}: must be a positive integer ({limit.unit})")
    return n


def enforce(limit: Limit, amount: int, file: object, *, step: int | None = None, field: str | None = None,
            claim: str = "") -> None:
    """InputError (exit 2) when ``amount`` exceeds ``limit``: one line naming the limit and its variable."""
    cap = value(limit)
    if amount > cap:
        raise InputError(file, f"{claim or limit.what}: {amount:,} {limit.unit}, over the limit of {cap:,} "
                               f"{limit.unit} (set {limit.env} to raise it)", step=step, field=field)


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


def os_reason(e: OSError) -> str:
    """An OSError in a few lower-case words ("permission denied")."""
    return e.strerror.lower() if e.strerror else type(e).__name__


def regular_file(path: str | os.PathLike, *, step: int | None = None, field: str | None = None) -> int:
    """The size in bytes of ``path``, a regular file once symlinks are resolved; else InputError (exit 2)
    saying what it is ("a FIFO", "permission denied", ...). Never opens the file, so never blocks."""
    path = Path(path)
    try:
        st = os.stat(path)  # follows symlinks: the target is what gets read
    except OSError as e:
        raise InputError(path, f"cannot read ({os_reason(e)})", step=step, field=field) from None
    for is_kind, name in _KINDS:
        if is_kind(st.st_mode):
            raise InputError(path, f"not a regular file ({name}); replay reads only regular files",
                             step=step, field=field)
    if not os.access(path, os.R_OK):
        raise InputError(path, "cannot read (permission denied)", step=step, field=field)
    return st.st_size


def read_regular(path: str | os.PathLike, limit: Limit, *, field: str | None = None) -> bytes:
    """The bytes of a regular file no larger than ``limit`` (checked before reading)."""
    size = regular_file(path, field=field)
    enforce(limit, size, path, field=field)
    try:
        with open(path, "rb") as f:
            return f.read(size + 1)
    except OSError as e:
        raise InputError(path, f"cannot read ({os_reason(e)})", field=field) from None


def special_kind(path: str | os.PathLike) -> str | None:
    """What an existing ``path`` is when it is neither a regular file nor a folder once symlinks are resolved
    ("a FIFO", "a socket", "a character device", "a block device"); None otherwise (also when it does not
    exist). Never opens it (opening a FIFO blocks)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((name for is_kind, name in _KINDS[:-1] if is_kind(mode)), None)


def check_special_output(out: str | os.PathLike | None, option: str) -> None:
    """UsageError (exit 2) when the output path ``out`` of ``option`` exists and is a FIFO, a socket or a
    device (symlinks resolved): replay would block on it, or replace a node other programs use (docs/HARDENING.md,
    "Output paths"). Nothing is opened, written or replaced."""
    if out is None:
        return
    kind = special_kind(out)
    if kind is not None:
        raise UsageError(f"{option} {out}: is {kind}, not a regular file or folder; name a new path "
                         "(nothing was written)")


def check_output(out: str | os.PathLike | None, inputs: Iterable[str | os.PathLike | None], option: str, *,
                 folder: bool = True, overwrite: bool = False) -> None:
    """UsageError (exit 2), before any work or deletion, when the output ``out`` of ``option`` (a ``folder``, or a
    file) is a FIFO, a socket or a device (:func:`check_special_output`), or is, lies inside or (a folder)
    holds one of ``inputs``: by place through the mount table (a bind mount is the folder it shows) and by
    identity (st_dev, st_ino) of the entry, of every folder above it and of everything under the inputs
    (replay_harness.guarded.claims). Writing (or --overwrite deleting) there would destroy an input. The
    check's claim (the parent folder's descriptor, the inputs) is what the output's writer uses; ``overwrite``:
    the folder will be replaced in place, so it may not be a symlink (refused here rather than by the writer)."""
    if out is None:
        return
    check_special_output(out, option)
    claim(out, inputs, option, folder=folder, overwrite=overwrite)
