"""Read-ahead of recording steps: a reader thread loads the next steps while the current one is replayed.

A recording can be far larger than host RAM (a production-shape step is ~0.6 GB of bf16 logits), so
replay holds only a few steps at a time: :class:`Prefetcher` yields ``(key, load(key))`` in order while a
daemon thread runs ``load`` on the next keys into a queue of at most ``depth`` items. At most
``depth + 2`` loaded items are alive at once (``depth`` queued, one being read, one being replayed), and
the read of step i+1 overlaps the work on step i. :func:`read_step` is the usual ``load``: read and
validate one step file (the validation touches every byte, so the thread does the whole read) and, for a
CUDA target, copy it into pinned memory so the host-to-device copy can run asynchronously.

Errors: an exception in ``load`` (a bad step file: ``InputError``) is raised in the consumer when it
reaches that key, so the usual one-line message names the step that failed, after the steps before it
were replayed. Ctrl-C: the consumer waits in ``queue.get`` with a short timeout, so KeyboardInterrupt
arrives at once; the thread is a daemon and stops at its next put (``close``), so it never holds the
process. ``depth = 0`` reads synchronously (no thread).
"""
from __future__ import annotations

import dataclasses
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


def pinned(step: Any) -> Any:
    """``step`` (a Step) with every tensor in pinned (page-locked) host memory: ``.to(cuda)`` can then copy
    asynchronously. Only call it when CUDA is present."""
    fields = {f.name: getattr(step, f.name) for f in dataclasses.fields(step)}
    return type(step)(**{k: (v.pin_memory() if isinstance(v, torch.Tensor) else v) for k, v in fields.items()})


def read_step(rec: Any, index: int, pin: bool = False, stats: ReadStats | None = None) -> Any:
    """``rec[index]`` (a StepRecord: read and validated), its inputs pinned when ``pin``; adds the file's
    bytes and the seconds taken to ``stats``."""
    start = time.perf_counter()
    record = rec[index]
    if pin:
        record.step = pinned(record.step)
    if stats is not None:
        stats.steps += 1
        stats.bytes += _size(record.file)
        stats.seconds += time.perf_counter() - start
    return record


def units_ahead(recs: Any, units: Iterable[tuple[int, int]], device: torch.device | None = None,
                depth: int | None = None, stats: ReadStats | None = None) -> Prefetcher[tuple[int, int]]:
    """The Prefetcher of (recording, step) ``units`` of several recordings ``recs``: ((r, i), StepRecord),
    one read-ahead across recordings (the next recording's first step is read during the last one's)."""
    pin = device is not None and device.type == "cuda"
    return Prefetcher(units, lambda u: read_step(recs[u[0]], u[1], pin, stats), depth)


def _size(path: os.PathLike) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
