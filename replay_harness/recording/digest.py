"""Content digests of steps and recordings (docs/FIXTURES.md, "Content digest").

A step digest depends on content only (names, dtypes, shapes, bytes, metadata), never on the
safetensors header layout, so two writers of the same content agree. Written by ``store`` on close,
checked by ``validate``.

A process-wide registry remembers the digest of each step file read (``Recording.__getitem__``), keyed by
the file's resolved path, inode, size and mtime taken before the read, so the digest check of a closed recording
(``validate.close_problems``) hashes only the steps not read since; under torchrun each rank's registry
is gathered to rank 0 (``compare.distributed.run_sharded``).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import Any, Iterable

import torch


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys, no spaces, ASCII only: the form metadata is stored and hashed in."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def tensor_digest(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> str:
    """sha256 over canonical content: sorted names, dtype, shape, little-endian bytes, canonical metadata.

    Independent of the safetensors header layout, so two files with the same
    content have the same digest whatever wrote them.
    """
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{str(t.dtype).removeprefix('torch.')}|{list(t.shape)}|".encode())
        # reshape(-1) first: a 0-dim tensor cannot be viewed as bytes directly
        h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b"")
    h.update(canonical_json(meta).encode())
    return h.hexdigest()


def recording_digest(step_digests: Iterable[str]) -> str:
    """The recording digest: sha256 of the step digests' hex strings, concatenated in step order."""
    return hashlib.sha256("".join(step_digests).encode()).hexdigest()


Key = tuple[str, int, int, int]  # (resolved path, st_ino, st_size, st_mtime_ns) of a step file
KNOWN_LIMIT = 1 << 18  # the most step digests remembered (~200 bytes each); the oldest go first
_known: dict[Key, str] = {}
_lock = threading.Lock()  # remembered from the read-ahead thread, looked up from the main thread


def file_key(file: str | os.PathLike) -> Key | None:
    """The registry key of ``file`` as it is now: (resolved path, inode, size, mtime in ns); None if it cannot
    be stat'ed. Take it before reading the file, so a change during or after the read (or a file renamed over
    it) gives another key."""
    try:
        st = os.stat(file)
    except OSError:
        return None
    return os.path.realpath(file), st.st_ino, st.st_size, st.st_mtime_ns


def remember(key: Key | None, digest: str) -> None:
    """Remember the step digest (64 hex characters) of the file read under ``key`` (None: nothing)."""
    if key is None:
        return
    with _lock:
        _known.pop(key, None)
        _known[key] = digest
        while len(_known) > KNOWN_LIMIT:
            del _known[next(iter(_known))]


def known(key: Key | None) -> str | None:
    """The step digest remembered under ``key`` (from :func:`file_key` now), or None."""
    if key is None:
        return None
    with _lock:
        return _known.get(key)


def export() -> dict[Key, str]:
    """A copy of every remembered digest (what a torchrun rank sends to rank 0)."""
    with _lock:
        return dict(_known)


def absorb(digests: dict[Key, str]) -> None:
    """Remember every digest of ``digests`` (another process's :func:`export`)."""
    for key, digest in digests.items():
        remember(key, digest)
