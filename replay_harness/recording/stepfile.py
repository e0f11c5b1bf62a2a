"""A step file's bytes: the one writer and the one reader of the safetensors layout (docs/FIXTURES.md).

Writing (:func:`write_step_file`) is one pass over the tensor bytes, in the caller's thread with the GIL
released: the JSON header is built here, then every tensor's bytes go from its own (host, often pinned)
memory straight into a temp file with ``os.write`` (no serialised copy of the step), write-back of what
was written is started every :data:`WRITEBACK_BYTES` (``posix_fadvise(DONTNEED)``, so the disk works while
the rest is copied into the page cache and the final ``fsync`` waits for the tail only), and the content
digest (digest.py) is computed on a second thread over the same memory at the same time. Then fsync,
rename over the target, fsync the folder, relative to the folder's descriptor (replay_harness.guarded): a
crash loses at most the step in flight.

Tensors are laid out like safetensors' own writer lays them out (element size descending, then name), so
every tensor starts at a multiple of its element size and a reader can view it in place.

Reading: :func:`check_step_file` first (a regular file within the size limits, as its header claims them),
then :func:`read_step_file` lets safetensors check the header (every rule it enforces, its error messages),
reads the data region with one ``readinto`` pass into a single buffer (pinned when asked: the host-to-device
copy then needs no second pass) and returns views into it.
"""
from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import safe_open

from replay_harness.errors import InputError
from replay_harness.guarded import TMP_SUFFIX, Folder
from replay_harness.limits import MAX_MANIFEST_BYTES, MAX_STEP_BYTES, MAX_VOCAB, enforce, os_reason, regular_file
from replay_harness.recording.digest import canonical_json, tensor_digest
from replay_harness.recording.schema import METADATA_KEY

__all__ = ["write_step_file", "encode_step", "read_step_file", "StepFileProblem", "check_step_file", "file_header",
           "DTYPES", "TMP_SUFFIX"]

CHUNK_BYTES = 16 << 20      # bytes handed to one os.write / readinto call
WRITEBACK_BYTES = 16 << 20  # start the disk's write-back after every this many bytes written
DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32,
          "I64": torch.int64, "I8": torch.int8, "U8": torch.uint8, "F64": torch.float64, "I16": torch.int16,
          "BOOL": torch.bool}
_NAMES = {v: k for k, v in DTYPES.items()}

_hasher: ThreadPoolExecutor | None = None
_hasher_lock = threading.Lock()


def _hash_thread() -> ThreadPoolExecutor:
    """The process's digest thread (created on first use; hashing drops the GIL, so it runs beside the write)."""
    global _hasher
    with _hasher_lock:
        if _hasher is None:
            _hasher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="replay-digest")
        return _hasher


def in_digest_thread(fn: Callable[..., str], *args: Any) -> Future:
    """``fn(*args)`` on the digest thread (a Future)."""
    return _hash_thread().submit(fn, *args)


def _bytes_of(t: torch.Tensor) -> memoryview:
    """The raw little-endian bytes of a contiguous CPU tensor, without a copy."""
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def _layout(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Names in file order: element size descending, then name (every offset a multiple of its element size)."""
    return sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))


def file_header(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> bytes:
    """The 8-byte length and the JSON header of a step file holding ``tensors`` (contiguous, CPU) and ``meta``
    (under the one ``replay`` metadata key), padded with spaces to a multiple of 8 bytes."""
    header: dict[str, Any] = {"__metadata__": {METADATA_KEY: canonical_json(meta)}}
    offset = 0
    for name in _layout(tensors):
        t = tensors[name]
        if t.dtype not in _NAMES:
            raise ValueError(f"{name}: dtype {t.dtype} has no safetensors name")
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def encode_step(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> bytes:
    """The whole step file in memory (small files: the steps sent to external impls, tests)."""
    return b"".join([file_header(tensors, meta), *(_bytes_of(tensors[n]) for n in _layout(tensors))])


def _start_writeback(fd: int, offset: int, nbytes: int) -> None:
    os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_DONTNEED)  # Linux: starts write-back


def _write_all(fd: int, parts: list[memoryview], every: int = WRITEBACK_BYTES,
               start_writeback: Callable[[int, int, int], None] | None = None) -> None:
    """Write ``parts`` in order to ``fd`` in CHUNK_BYTES pieces, calling ``start_writeback(fd, offset, nbytes)`` on
    what was written every ``every`` bytes (default: posix_fadvise DONTNEED, where the OS has it; the write
    protocol's variants are measured with other arguments by tools/probe_write_back.py)."""
    if start_writeback is None and hasattr(os, "posix_fadvise"):
        start_writeback = _start_writeback
    written = started = 0
    for part in parts:
        at = 0
        while at < len(part):
            n = os.write(fd, part[at:at + CHUNK_BYTES])
            at += n
            written += n
            if start_writeback is not None and written - started >= every:
                start_writeback(fd, started, written - started)
                started = written


def _fsync_folder(folder: Path) -> None:
    """fsync a folder by path (tools/probe_write_back.py's variants; replay's writes fsync their folder's descriptor)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, parts: list, phases: dict[str, float] | None = None, folder: Folder | None = None) -> None:
    """Write ``parts`` (bytes-like) to a temp file beside ``path``, fsync, rename over ``path``, fsync the folder,
    all relative to ``folder``'s descriptor (replay_harness.guarded: created O_EXCL | O_NOFOLLOW, never renamed
    over an input, a FIFO, a socket or a device); without ``folder``, ``path``'s folder is opened once here.

    The file gets the mode a plain ``open()`` would give (0666 minus the umask).
    ``phases``: seconds added per phase (``write``: create + the os.write calls, ``fsync``: the file's
    fsync, ``publish``: rename + the folder's fsync), where the time of a write path goes."""
    marks = [time.perf_counter()]
    own = folder is None
    here = Folder.at(path.parent) if folder is None else folder
    try:
        fd, tmp = here.create_temp(path.name)
        try:
            try:
                _write_all(fd, [memoryview(p) for p in parts])
                marks.append(time.perf_counter())
                os.fsync(fd)
                marks.append(time.perf_counter())
            finally:
                os.close(fd)
            here.publish(tmp, path.name)
            tmp = None
        finally:
            here.discard(tmp)
    finally:
        if own:
            here.close()
    marks.append(time.perf_counter())
    if phases is not None:
        for name, a, b in zip(("write", "fsync", "publish"), marks, marks[1:]):
            phases[name] = phases.get(name, 0.0) + b - a


def write_step_file(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any], algorithm: str,
                    phases: dict[str, float] | None = None, folder: Folder | None = None) -> str:
    """Write one step file atomically (:func:`atomic_write`, in ``folder`` when given); returns its content
    digest (``algorithm``, digest.py).

    ``tensors``: contiguous CPU tensors by fixture name. The digest is computed on the digest thread while
    this thread writes; both read the tensors' own memory (one pass each, no copy). ``phases``: as
    :func:`atomic_write`, plus ``digest_wait`` (the wait for the digest after the write)."""
    order = _layout(tensors)
    digest = in_digest_thread(tensor_digest, tensors, meta, algorithm)
    try:
        atomic_write(path, [file_header(tensors, meta), *(_bytes_of(tensors[n]) for n in order)], phases, folder)
    finally:
        start = time.perf_counter()
        value = digest.result()  # never leave the digest thread reading memory the caller may reuse
        if phases is not None:
            phases["digest_wait"] = phases.get("digest_wait", 0.0) + time.perf_counter() - start
    return value


class StepFileProblem(ValueError):
    """A step file safetensors reads but this format refuses, with the field to name: ``__metadata__`` holding
    keys besides ``replay`` (docs/FIXTURES.md, "One step file"), or a tensor of a dtype outside the format's."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def _utf8_name(file: str | os.PathLike, fd: int) -> str:
    """A name safetensors can open for ``file`` (open as ``fd``): safetensors takes a UTF-8 str, and a folder
    named in another encoding (bytes Python holds as surrogates) has none, so it is reached through the
    descriptor (/proc/self/fd/FD, the same file)."""
    name = os.fspath(file)
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return f"/proc/self/fd/{fd}"


def read_step_file(file: str | os.PathLike, alloc: Callable[[int], torch.Tensor] | None = None
                   ) -> tuple[dict[str, torch.Tensor], str | None]:
    """Every tensor of a step file and its raw ``replay`` metadata string (None if absent); StepFileProblem when
    ``__metadata__`` holds another key or a tensor's dtype is not one of :data:`DTYPES`.

    safetensors checks the header first (raises its own errors on a bad file: the caller reports them);
    then the data region is read once into ``alloc(nbytes)`` (a uint8 tensor; default ``torch.empty``, pass
    one that returns pinned memory for a CUDA target) and each tensor is a view into it (a copy only where a
    foreign writer left an offset that is not a multiple of the element size)."""
    with open(file, "rb") as f:  # one descriptor: the header safetensors accepted, then the data region in one pass
        with safe_open(_utf8_name(file, f.fileno()), framework="pt") as st:
            metadata = st.metadata() or {}
            names = list(st.keys())
        extra = sorted(k for k in metadata if k != METADATA_KEY)
        if extra:
            raise StepFileProblem(f"__metadata__ holds more than the one key '{METADATA_KEY}': "
                                  f"{', '.join(repr(k)[:40] for k in extra[:3])}", "__metadata__")
        raw_meta = metadata.get(METADATA_KEY)
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n).decode("utf-8"))
        for name in names:  # before a byte of data is read
            if header[name]["dtype"] not in DTYPES:
                raise StepFileProblem(f"dtype {header[name]['dtype']} is not one the format stores "
                                      f"({', '.join(DTYPES)})", name[:60])
        size = os.fstat(f.fileno()).st_size - 8 - n
        buf = (alloc or (lambda nbytes: torch.empty(nbytes, dtype=torch.uint8)))(size)[:size]
        view = memoryview(buf.numpy()) if size else memoryview(b"")
        at = 0
        while at < size:
            got = f.readinto(view[at:at + CHUNK_BYTES])
            if not got:
                raise ValueError(f"file shrank while read: {at} of {size} data bytes")
            at += got
    tensors = {}
    for name in names:
        info = header[name]
        dtype, (lo, hi) = DTYPES[info["dtype"]], info["data_offsets"]
        raw = buf[lo:hi]
        if lo % dtype.itemsize:
            raw = raw.clone()
        tensors[name] = raw.view(dtype).reshape(info["shape"])
    return tensors, raw_meta


# element sizes of the dtypes a header may claim: the ones the format stores, and others safetensors reads
_DTYPE_BYTES = {**{name: dtype.itemsize for name, dtype in DTYPES.items()},
                "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


_CLAIM_CAP = 2 ** 64  # past any limit: a claim is counted up to here (a product of a million dims, an offset of
                     # 4,000 digits: bounded time, and a number the message can print)


def _claimed_bytes(header: dict) -> int:
    """The data bytes a safetensors JSON header claims: the largest end offset, or the tensors' sizes (each
    counted up to 2^64)."""
    claimed = 0
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        offsets, shape, dtype = info.get("data_offsets"), info.get("shape"), info.get("dtype")
        if isinstance(offsets, list) and offsets and all(isinstance(o, int) for o in offsets):
            claimed = max(claimed, min(max(offsets), _CLAIM_CAP))
        if isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape):
            n = _DTYPE_BYTES.get(dtype, 1) if isinstance(dtype, str) else 1
            for d in shape:
                n = min(n * d, _CLAIM_CAP)
                if n == 0 or n == _CLAIM_CAP:
                    break
            claimed = max(claimed, n)
    return claimed


def check_step_file(file: Path, index: int) -> None:
    """Before a step file is opened by safetensors: a regular file (not a FIFO, device or socket), within
    REPLAY_MAX_STEP_BYTES on disk and as its header claims, with logits V within REPLAY_MAX_VOCAB.

    Reads only the 8-byte length and the JSON header (itself capped like a manifest); a header safetensors
    would reject anyway is left to it (the caller reports that as an unreadable file)."""
    size = regular_file(file, step=index)
    enforce(MAX_STEP_BYTES, size, file, step=index, claim="file size")
    try:
        with open(file, "rb") as f:
            n = int.from_bytes(f.read(8), "little") if size >= 8 else -1
            if n > size - 8 >= 0:  # a length past the end: say so, not safetensors' "header too large"
                raise InputError(file, f"the header length says {n} bytes but {size - 8} follow it (truncated or "
                                       "corrupt)", step=index, field="__header__")
            if not 0 < n:
                return
            enforce(MAX_MANIFEST_BYTES, n, file, step=index, field="__header__", claim="JSON header size")
            header = json.loads(f.read(n).decode("utf-8"))
    except OSError as e:
        raise InputError(file, f"cannot read ({os_reason(e)})", step=index) from None
    except (ValueError, RecursionError):
        return
    if not isinstance(header, dict):
        return
    enforce(MAX_STEP_BYTES, 8 + n + _claimed_bytes(header), file, step=index, field="__header__",
            claim="size its header claims")
    shape = header.get("logits", {}).get("shape") if isinstance(header.get("logits"), dict) else None
    if isinstance(shape, list) and len(shape) == 2 and isinstance(shape[1], int):
        enforce(MAX_VOCAB, shape[1], file, step=index, field="logits", claim="vocabulary size V")
