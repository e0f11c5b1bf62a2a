"""The asynchronous half of the Recorder: snapshot a step's inputs now, write them on a thread.

The engine's thread calls :meth:`AsyncStepWriter.submit` from ``Recorder.record_step``. It takes a
*slot* (one step's host buffers; there are ``max_pending`` of them, reused), snapshots every input
into it and returns at once; the writer thread waits for the snapshot's copies to land, then runs
the Recorder's own synchronous path (convert, validate, atomic write + fsync) and gives the slot back.
The slots are the bound on steps in flight: when none is free, ``when_full="block"`` waits for one
and ``"drop"`` skips the step and counts it (:attr:`AsyncStepWriter.dropped`). Free slots are taken last
in, first out (one slot does the work while the writer keeps up), and a step larger than any before
pins every slot's buffer for its size at once, so pinning memory (~0.1 s for a 636 MB step, and every
CUDA call of the process waits meanwhile) happens at the first step of each new size, never later.

Snapshots (the engine may reuse or free its tensors once ``record_step`` returns):

* a CUDA tensor is copied into the slot's pinned host buffer (uint8, grown on demand, never shrunk)
  on a side stream that first waits on the device's current stream (so the copy reads what the
  producing kernels wrote); the row maxima of the float rows (``logits``, ``draft_logits``) are
  computed there too, before the copy, so the writer's checks read no logit on the host
  (``validate.check_step``'s ``row_max``); an event recorded after the copies is what the writer thread waits on,
  and ``record_stream`` keeps the tensor's memory from being reused before the copy read it. The
  engine's stream never waits. The engine must not write a tensor it passed *in place* on a later
  kernel before that copy ran (pass a ``clone()`` if it does: a device copy, far cheaper than D2H);
* a CPU tensor is cloned, a numpy array copied, lists, tuples and dicts copied element by element (the
  per-request lists and ``logit_bias`` dicts of schema minor 2 included; a CUDA tensor inside a list is copied
  to the CPU synchronously); scalars and None are kept.

The synchronous Recorder takes the same snapshot into its one slot (:func:`snapshot`) and waits for it: the
device copy is then a pinned one in both modes.

Errors of a step on the writer thread (the InputError the synchronous path raises, or an OSError) are
queued, traceback dropped, for :meth:`pop_error`: the Recorder raises them at its next call or close.
"""
from __future__ import annotations

import atexit
import collections
import queue
import threading
from typing import Any, Callable

import numpy as np
import torch

__all__ = ["AsyncStepWriter", "Slot", "snapshot", "WHEN_FULL", "ROW_MAX"]

WHEN_FULL = ("block", "drop")
ROW_MAX = "row_max"  # the snapshot's key for {float field: its row maxima} (checked from these, not re-read)
_ROWS = ("logits", "draft_logits")  # the float rows whose maxima are taken on the device
_ALIGN = 64  # bytes: every tensor's offset in a slot's pinned buffer (any dtype can view it)
D2H_CHUNK_BYTES = 32 << 20  # a device-to-host copy is queued in pieces of this size (docs/RECORDING.md)
_streams: dict[torch.device, torch.cuda.Stream] = {}  # one side stream per device, for the process


class Slot:
    """Host memory for one step in flight: a pinned byte buffer for its CUDA tensors and their events."""

    def __init__(self) -> None:
        self.pinned: torch.Tensor | None = None   # [capacity] uint8, pinned; None until a CUDA step needs it
        self.events: list[torch.cuda.Event] = []  # one per device copied from, recorded after its copies

    def reserve(self, nbytes: int) -> torch.Tensor:
        """The pinned buffer, grown to at least ``nbytes`` (by 25% at least, so a slowly growing batch
        does not reallocate every step). Views into a buffer replaced here keep it alive."""
        have = 0 if self.pinned is None else self.pinned.numel()
        if self.pinned is None or nbytes > have:
            self.pinned = None  # free the old buffer first: pinned memory is the scarce kind
            self.pinned = torch.empty(max(nbytes, have + have // 4, _ALIGN), dtype=torch.uint8, pin_memory=True)
        return self.pinned

    def wait(self) -> None:
        """Block the calling (writer) thread until this step's device copies have landed."""
        for event in self.events:
            event.synchronize()
        self.events = []


class AsyncStepWriter:
    """A writer thread fed through ``max_pending`` reusable slots.

    write       the synchronous path, ``write(engine_step, **args)``: runs on the writer thread, in
                submission order, with ``args`` snapshotted (host tensors, copied arrays and lists)
    max_pending steps in flight at most (queued or being written); also the number of slots
    when_full   "block" (wait for a slot) or "drop" (skip the step, count it in :attr:`dropped`)
    """

    def __init__(self, write: Callable[..., Any], *, max_pending: int, when_full: str):
        self._write = write
        self.when_full = when_full
        self.dropped = 0  # steps skipped because every slot was in flight ("drop")
        # LIFO: the slot written last is reused first, so when the writer keeps up one warm slot does all the
        # work and the others are never pinned (pinning a step's worth of memory costs the engine ~0.1 s)
        self._free: queue.LifoQueue[Slot] = queue.LifoQueue()
        self._slots = [Slot() for _ in range(max_pending)]
        for slot in self._slots:
            self._free.put(slot)
        self._largest = 0  # bytes: every slot's pinned buffer holds at least this many
        self._work: queue.SimpleQueue = queue.SimpleQueue()  # (engine_step, args, slot), None to stop
        self._errors: collections.deque[BaseException] = collections.deque()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="replay-recorder-writer", daemon=True)
        self._thread.start()
        atexit.register(self.stop)  # an interpreter exiting without close() still writes what is queued

    # ------------------------------------------------------------------ engine thread
    def submit(self, engine_step: int, args: dict[str, Any]) -> bool:
        """Snapshot ``args`` into a free slot and queue it; False when the step was dropped."""
        slot = self._take_slot()
        if slot is None:
            self.dropped += 1
            return False
        try:
            taken = snapshot(args, slot)
        except BaseException:
            slot.events = []
            self._free.put(slot)
            raise
        if slot.pinned is not None and slot.pinned.numel() > self._largest:
            # a step larger than any before: pin every slot for it now, in this call, so that no later
            # step of this size pins memory while the engine runs (cudaHostAlloc stalls every CUDA call
            # of the process, the engine's launches included, for as long as it pins: ~0.1 s for 636 MB)
            self._largest = slot.pinned.numel()
            for other in self._slots:
                other.reserve(self._largest)
        self._work.put((engine_step, taken, slot))
        return True

    def pop_error(self) -> BaseException | None:
        """The oldest error of a step the writer thread failed on and nobody was told of yet."""
        return self._errors.popleft() if self._errors else None

    def stop(self) -> None:
        """Write everything queued, then end the writer thread. Idempotent."""
        if not self._stopped:
            self._stopped = True
            self._work.put(None)
            self._thread.join()
            atexit.unregister(self.stop)

    def _take_slot(self) -> Slot | None:
        if self.when_full == "drop":
            try:
                return self._free.get_nowait()
            except queue.Empty:
                return None
        while True:  # "block": wait, but never on a writer thread that died
            try:
                return self._free.get(timeout=0.5)
            except queue.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError("the recorder's writer thread died; no step can be written") from None

    # ------------------------------------------------------------------ writer thread
    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            engine_step, args, slot = item
            try:
                slot.wait()
                self._write(engine_step, **args)
            except Exception as e:  # reported at the engine's next call; the thread goes on
                self._errors.append(e.with_traceback(None))
            finally:
                del args, item  # no view into the slot's buffer outlives the step
                self._free.put(slot)



def snapshot(args: dict[str, Any], slot: Slot, copy_host: bool = True) -> dict[str, Any]:
    """``args`` with every value copied to host memory the engine cannot touch any more (CUDA tensors: queued
    into ``slot``, landed after ``slot.wait()``), plus :data:`ROW_MAX` when a float row was on a device.
    ``copy_host=False`` (the synchronous Recorder): host values are kept as they are, not copied."""
    on_device = [(name, t) for name, t in args.items() if isinstance(t, torch.Tensor) and t.is_cuda]
    out = {name: (_host_copy(value) if copy_host else value) for name, value in args.items()
           if not (isinstance(value, torch.Tensor) and value.is_cuda)}
    if on_device:
        out.update(_copy_from_devices(on_device, slot))
    return out


def _copy_from_devices(tensors: list[tuple[str, torch.Tensor]], slot: Slot) -> dict[str, Any]:
    """Queue D2H copies of ``tensors`` (and of the float rows' maxima) into the slot's pinned buffer on each
    device's side stream."""
    maxima = {}
    with torch.no_grad():
        for device in dict.fromkeys(t.device for _, t in tensors):
            side = _streams.get(device)
            if side is None:
                side = _streams[device] = torch.cuda.Stream(device=device)
            side.wait_stream(torch.cuda.current_stream(device))  # after the kernels that produced them
            with torch.cuda.stream(side):
                for name, t in tensors:
                    if t.device == device and name in _ROWS and t.ndim == 2 and t.shape[1] and t.dtype in (
                            torch.float32, torch.bfloat16, torch.float16):  # others are converted on the host
                        maxima[name] = t.detach().amax(1)
    everything = tensors + [(f"{ROW_MAX}.{name}", m) for name, m in maxima.items()]
    offsets, total = [], 0
    for _, t in everything:
        offsets.append(total)
        total += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    pinned = slot.reserve(total)
    out: dict[str, Any] = {}
    for device in dict.fromkeys(t.device for _, t in everything):
        side = _streams[device]
        with torch.cuda.stream(side):
            for (name, t), offset in zip(everything, offsets):
                if t.device != device:
                    continue
                nbytes = t.numel() * t.element_size()
                host = pinned[offset:offset + nbytes].view(t.dtype).view(t.shape)
                flat_host, flat = host.view(-1), t.detach().reshape(-1)
                per = max(1, D2H_CHUNK_BYTES // t.element_size())
                for at in range(0, flat.numel(), per):  # in pieces: the engine's own copies queue behind one
                    flat_host[at:at + per].copy_(flat[at:at + per], non_blocking=True)
                t.record_stream(side)  # the allocator keeps its memory until the copy ran
                out[name] = host
            event = torch.cuda.Event()
            event.record(side)
            slot.events.append(event)
    rows = {name[len(ROW_MAX) + 1:]: out.pop(name) for name in list(out) if name.startswith(f"{ROW_MAX}.")}
    if rows:
        out[ROW_MAX] = rows
    return out


def _host_copy(value: Any) -> Any:
    """A copy of ``value`` the caller cannot change (host tensors cloned, arrays and lists copied)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone() if value.device.type == "cpu" else value.detach().cpu()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return [_host_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_host_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _host_copy(v) for k, v in value.items()}
    return value
