"""Read-ahead of recording steps: a reader thread loads the next steps while the current one is replayed.

A recording can be far larger than host RAM (a production-shape step is ~0.6 GB of bf16 logits), so
replay holds only a few steps at a time: :class:`Prefetcher` yields ``(key, load(key))`` in order while a
daemon thread runs ``load`` on the next keys into a queue of at most ``depth`` items. At most
``depth + 2`` loaded items are alive at once (``depth`` queued, one being read, one being replayed), and
the read of step i+1 overlaps the work on step i. :func:`read_step` is the usual ``load``: read and
validate one step file. For a CUDA target the file is read once into a reused pinned buffer
(:class:`Staging`), the step's inputs are copied to the device on the reader's own stream and checked
there, and the buffer goes back to the pool once the step digest (computed on the digest thread meanwhile,
recording/digest.py) is done: the main thread gets a step already on its device and never waits for a
read, a copy or a hash. Host memory then holds at most the staging buffers (two steps) besides the
consumer's small tensors.

Errors: an exception in ``load`` (a bad step file: ``InputError``) is raised in the consumer when it
reaches that key, so the usual one-line message names the step that failed, after the steps before it
were replayed. Ctrl-C: the consumer waits in ``queue.get`` with a short timeout, so KeyboardInterrupt
arrives at once; the thread is a daemon and stops at its next put (``close``), so it never holds the
process. ``depth = 0`` reads synchronously (no thread).
"""
from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

import torch

DEFAULT_DEPTH = 2
DEPTH_ENV = "REPLAY_PREFETCH_DEPTH"  # steps read ahead; 0: read each step when it is replayed
POLL_S = 0.05  # how often a waiting side checks for Ctrl-C / close

K = TypeVar("K")


def default_depth() -> int:
    """``REPLAY_PREFETCH_DEPTH`` (an integer >= 0), else DEFAULT_DEPTH."""
    raw = os.environ.get(DEPTH_ENV, "")
    return int(raw) if raw.isdigit() else DEFAULT_DEPTH


@dataclass
class ReadStats:
    """What the reads cost: step files read, their bytes, and the seconds the reads took (reader side)."""

    steps: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def add(self, other: "ReadStats") -> None:
        self.steps, self.bytes, self.seconds = (self.steps + other.steps, self.bytes + other.bytes,
                                                self.seconds + other.seconds)


class Prefetcher(Generic[K]):
    """Iterate ``(key, load(key))`` over ``keys`` in order, ``load`` running ``depth`` keys ahead in a thread."""

    def __init__(self, keys: Iterable[K], load: Callable[[K], Any], depth: int | None = None):
        self.keys = list(keys)
        self.load = load
        self.depth = default_depth() if depth is None else depth
        self._queue: queue.Queue = queue.Queue(maxsize=max(self.depth, 1))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="replay-prefetch", daemon=True)

    def _read(self) -> None:
        for key in self.keys:
            if self._stop.is_set():
                return
            try:
                item = (key, self.load(key), None)
            except BaseException as e:  # handed to the consumer, raised at this key
                item = (key, None, e)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=POLL_S)
                    break
                except queue.Full:
                    continue
            del item
            if self._stop.is_set():
                return

    def _get(self) -> tuple[K, Any, BaseException | None]:
        while True:
            try:
                return self._queue.get(timeout=POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():  # cannot happen unless closed
                    raise RuntimeError("the step reader thread stopped early") from None

    def __iter__(self) -> Iterator[tuple[K, Any]]:
        if self.depth == 0:
            for key in self.keys:
                yield key, self.load(key)
            return
        self._thread.start()
        try:
            for _ in self.keys:
                key, value, error = self._get()
                if error is not None:
                    raise error
                yield key, value
                del value  # the consumer's reference is the only one left while the next step is read
        finally:
            self.close()

    def close(self) -> None:
        """Stop the reader (it exits at its next put) and drop what it queued."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break


class Staging:
    """Pinned host buffers that reads for a CUDA device land in (reused: pinning memory is slow), and the
    stream that copies a step's inputs from them to the device.

    One reader thread calls :meth:`take` (through ``Recording.read``; it waits while every buffer is still
    being hashed) and then :meth:`to_device`; the buffer goes back to the pool through the callable
    :meth:`releaser` returned, once nothing reads it any more (the digest thread may call it later)."""

    def __init__(self, device: torch.device, buffers: int = 2):
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self._free: queue.Queue = queue.Queue()
        for _ in range(buffers):
            self._free.put(None)  # allocated on first use, at the size the step needs
        self._taken: torch.Tensor | None = None

    def take(self, nbytes: int) -> torch.Tensor:
        """A pinned uint8 buffer of at least ``nbytes`` (grown when too small)."""
        buf = self._free.get()
        if buf is None or buf.numel() < nbytes:
            buf = None  # free the old one first: pinned memory is the scarce kind
            buf = torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=True)
        self._taken = buf
        return buf

    def releaser(self) -> Callable[[], None]:
        """A callable that gives the buffer last taken back to the pool (a no-op when none is held)."""
        buf, self._taken = self._taken, None
        return (lambda: None) if buf is None else (lambda: self._free.put(buf))

    def to_device(self, tensors: dict[str, torch.Tensor], inputs: Iterable[str]
                  ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """(tensors with ``inputs`` on the device and the rest cloned to their own CPU memory, the tensors to
        check: the same but with only the float rows on the device). Returns when the copies have landed."""
        inputs = set(inputs)
        main = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream):
            moved = {n: (t.to(self.device, non_blocking=True) if n in inputs else t.clone())
                     for n, t in tensors.items()}
        self.stream.synchronize()
        for n in inputs & set(moved):
            moved[n].record_stream(main)  # freed after the main stream's last use, not at the reader's
        check = {n: (moved[n] if n in ("logits", "draft_logits") or n not in inputs else tensors[n].clone())
                 for n in tensors}
        return moved, check


def read_step(rec: Any, index: int, staging: Staging | None = None, stats: ReadStats | None = None) -> Any:
    """``rec.read(index)`` (a StepRecord: read and validated; on ``staging``'s device when given, see
    :class:`Staging`); adds the file's bytes and the seconds taken to ``stats``."""
    start = time.perf_counter()
    record = rec.read(index, staging) if staging is not None else rec[index]
    if stats is not None:
        stats.steps += 1
        stats.bytes += _size(record.file)
        stats.seconds += time.perf_counter() - start
    return record


def units_ahead(recs: Any, units: Iterable[tuple[int, int]], device: torch.device | None = None,
                depth: int | None = None, stats: ReadStats | None = None) -> Prefetcher[tuple[int, int]]:
    """The Prefetcher of (recording, step) ``units`` of several recordings ``recs``: ((r, i), StepRecord),
    one read-ahead across recordings (the next recording's first step is read during the last one's).
    ``device``: where the steps' inputs go (a CUDA device: read through a :class:`Staging`; else the CPU)."""
    staging = Staging(device) if device is not None and device.type == "cuda" else None
    return Prefetcher(units, lambda u: read_step(recs[u[0]], u[1], staging, stats), depth)


def _size(path: os.PathLike) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
