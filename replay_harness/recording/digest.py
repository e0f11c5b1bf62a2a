"""Content digests of steps and recordings (docs/FIXTURES.md, "Content digest").

A step digest depends on content only (names, dtypes, shapes, bytes, metadata), never on the
safetensors header layout, so two writers of the same content agree. Written by ``store`` on close,
checked by ``validate``. Two algorithms (the manifest's ``digest_algorithm``): ``xxh3-128`` (XXH3, 128 bits,
tens of GB/s on one core: what this package writes, since schema minor 1) and ``sha256`` (the default when
the key is absent: recordings written before, and writers such as the C++ example that keep it).

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
from concurrent.futures import Future, wait
from typing import Any, Callable, Iterable

import torch
import xxhash

ALGORITHMS = {"sha256": hashlib.sha256, "xxh3-128": xxhash.xxh3_128}
HEX_DIGITS = {"sha256": 64, "xxh3-128": 32}  # length of a digest's lowercase hex form
WRITTEN = "xxh3-128"   # what RecordingWriter writes
LEGACY = "sha256"      # a manifest without digest_algorithm


def algorithm_of(manifest: dict[str, Any]) -> str:
    """The digest algorithm a manifest names (``digest_algorithm``; absent: sha256). Unknown names are
    refused by ``validate.check_manifest``; here they read as sha256, so nothing else breaks on them."""
    name = manifest.get("digest_algorithm", LEGACY)
    return name if isinstance(name, str) and name in ALGORITHMS else LEGACY


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys, no spaces, ASCII only: the form metadata is stored and hashed in."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def tensor_digest(tensors: dict[str, torch.Tensor], meta: dict[str, Any], algorithm: str = LEGACY) -> str:
    """``algorithm`` over canonical content: sorted names, dtype, shape, little-endian bytes, canonical metadata.

    Independent of the safetensors header layout, so two files with the same content have the same digest
    whatever wrote them. Both hashes drop the GIL while they read a tensor's bytes.
    """
    h = ALGORITHMS[algorithm]()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{str(t.dtype).removeprefix('torch.')}|{list(t.shape)}|".encode())
        # reshape(-1) first: a 0-dim tensor cannot be viewed as bytes directly
        h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b"")
    h.update(canonical_json(meta).encode())
    return h.hexdigest()


def recording_digest(step_digests: Iterable[str], algorithm: str = LEGACY) -> str:
    """The recording digest: ``algorithm`` of the step digests' hex strings, concatenated in step order."""
    return ALGORITHMS[algorithm]("".join(step_digests).encode()).hexdigest()


Key = tuple[str, int, int, int, str]  # (resolved path, st_ino, st_size, st_mtime_ns, algorithm) of a step file
KNOWN_LIMIT = 1 << 18  # the most step digests remembered (~200 bytes each); the oldest go first
_known: dict[Key, str] = {}
_pending: dict[Key, Future] = {}  # digests being computed on the digest thread (stepfile.in_digest_thread)
_lock = threading.Lock()  # remembered from the read-ahead and digest threads, looked up from the main thread


def file_key(file: str | os.PathLike, algorithm: str = LEGACY) -> Key | None:
    """The registry key of ``file``'s ``algorithm`` digest as it is now: (resolved path, inode, size, mtime in
    ns, algorithm); None if it cannot be stat'ed. Take it before reading the file, so a change during or after the read (or a file renamed over
    it) gives another key."""
    try:
        st = os.stat(file)
    except OSError:
        return None
    return os.path.realpath(file), st.st_ino, st.st_size, st.st_mtime_ns, algorithm


def remember(key: Key | None, digest: str) -> None:
    """Remember the step digest (64 hex characters) of the file read under ``key`` (None: nothing)."""
    if key is None:
        return
    with _lock:
        _known.pop(key, None)
        _known[key] = digest
        while len(_known) > KNOWN_LIMIT:
            del _known[next(iter(_known))]


def pending(key: Key | None, digest: Future, done: Callable[[], None] | None = None) -> None:
    """Remember ``digest`` (a Future of the step digest) under ``key`` once it is computed, then call ``done``
    (e.g. give a pinned read buffer back); :func:`known` and :func:`export` wait for it meanwhile."""
    if key is not None:
        with _lock:
            _pending[key] = digest

    def finished(f: Future) -> None:
        if key is not None and f.exception() is None:
            remember(key, f.result())
        with _lock:
            if _pending.get(key) is f:
                del _pending[key]
        if done is not None:
            done()
    digest.add_done_callback(finished)


def known(key: Key | None) -> str | None:
    """The step digest remembered under ``key`` (from :func:`file_key` now; one being computed is waited for),
    or None."""
    if key is None:
        return None
    with _lock:
        waiting = _pending.get(key)
    if waiting is not None:  # its result, not _known: wait() may return before the callback remembered it
        wait([waiting])
        return None if waiting.exception() is not None else waiting.result()
    with _lock:
        return _known.get(key)


def export() -> dict[Key, str]:
    """A copy of every remembered digest (what a torchrun rank sends to rank 0), after those being computed."""
    with _lock:
        waiting = dict(_pending)
    wait(list(waiting.values()))
    with _lock:
        known_now = dict(_known)
    return {**known_now, **{k: f.result() for k, f in waiting.items() if f.exception() is None}}


def absorb(digests: dict[Key, str]) -> None:
    """Remember every digest of ``digests`` (another process's :func:`export`)."""
    for key, digest in digests.items():
        remember(key, digest)
