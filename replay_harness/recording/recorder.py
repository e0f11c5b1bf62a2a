"""The Recorder API: record an engine's decode steps from inside its own loop.

For engines that are not ours (a vLLM fork, a C++ port behind pybind, an
in-house server): the engine's decode loop calls :meth:`Recorder.record_step`
once per sampler call with what the sampler saw and what it emitted. The
Recorder converts the inputs to the fixture dtypes, validates them with the
fixture validator and streams them to disk through
:class:`replay_harness.recording.store.RecordingWriter` (one file per step, written to a
temporary name, fsynced and renamed: a crash loses at most the step in flight).

    from replay_harness.recording.recorder import Recorder

    with Recorder("recordings/run-1", vocab_size=V, source={"engine": "my-engine 1.2"},
                  max_bytes=200_000_000, every=1) as rec:
        for step in engine_loop():
            ...                                  # the engine samples as usual
            rec.record_step(
                logits=logits,                   # [N, V] what the sampler saw (bf16 stays bf16)
                cu_num_logits=cu,                # [R+1]  0, 1+k_0, ...
                draft_token_ids=drafts,          # [N]    draft per verify row, -1 on bonus rows
                positions=positions,             # [N]    position of the token sampled at each row
                temperature=temps, top_k=top_k, top_p=top_p, min_p=min_p,   # [R] each
                seed=seeds,                      # [R] int64
                request_ids=req_ids,             # [R]
                emitted_tokens=out_tokens,       # [R, max_k+1] -1 padded, or a list of R lists
                emitted_counts=out_counts,       # [R] (None: the lengths of the lists)
                emitted_routes=routes,           # optional: [R] codes or route names
                draft_logits=draft_logits)       # optional: [N-R, V] pre-temperature
            if rec.full:                         # --max-bytes budget reached
                break

Inputs may be torch tensors (any device; they are copied to the CPU), numpy
arrays, or (nested) Python lists and scalars. Conversions (docs/RECORDING.md):

* ``logits`` / ``draft_logits``: float32, bfloat16 and float16 are kept as they
  are (lossless); float64 is narrowed to float32; anything else is refused.
* integer fields: any integer dtype (or Python ints) is converted to the fixture
  dtype (:data:`replay_harness.recording.schema.FIELDS`: ``cu_num_logits``,
  ``draft_token_ids``, ``top_k``, ``emitted_*``: int32; ``positions``, ``seed``,
  ``request_ids``: int64) after a range check;
  floats, bools and values that do not fit are refused.
* ``temperature``, ``top_p``, ``min_p``: any real dtype, converted to float32.
* a per-request field given as a scalar is broadcast to every request;
  ``top_k=None`` means 0 (off), ``top_p=None`` 1, ``min_p=None`` 0,
  ``draft_token_ids=None`` all -1 (only valid without drafts),
  ``request_ids=None`` 0..R-1.
* ``emitted_routes``: route codes or names from :data:`replay_harness.recording.schema.ROUTES`.

Every problem raises :class:`replay_harness.errors.InputError` naming the
recording's step file, the step and the field; nothing is written for that
step and the Recorder stays usable (earlier steps are untouched).

Both modes copy CUDA inputs to the host the same way (async_writer.snapshot: a
side-stream copy into pinned memory, the logits' row maxima taken on the device
first so the checks read no logit on the host) and write each step in one pass
(stepfile.write_step_file: no serialised copy, the digest computed beside the
write, the GIL released while bytes move).

``mode="async"`` takes the copy, the checks and the write out of the engine's
loop (:mod:`replay_harness.recording.async_writer`): ``record_step`` snapshots the
inputs and returns; a writer thread runs the very same path as ``mode="sync"``,
in order, so the step files and the digest are byte-identical. At most ``max_pending`` steps are in
flight; when they all are, ``when_full="block"`` waits and ``"drop"`` skips the
step and counts it (manifest ``dropped_steps``). A step the writer thread
refuses raises its InputError (the one the sync path raises) at the next
``record_step`` or at ``close()``. docs/RECORDING.md, "Asynchronous recording".
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from replay_harness.errors import InputError
from replay_harness.recording.async_writer import WHEN_FULL, AsyncStepWriter, Slot, snapshot
from replay_harness.recording.schema import FIELD, FLOATS, ROUTE_CODE, STEPS_DIR, step_file_name
from replay_harness.recording.store import Emitted, RecordingWriter, step_tensors
from replay_harness.recording.step import SampleResult, Step

__all__ = ["Recorder"]

HEADER_ALLOWANCE = 4096  # bytes: an upper bound on a step file's safetensors header


class Recorder:
    """Streams an engine's decode steps into a recording folder (schema replay.recording/1).

    path        the recording folder to create (must be absent or empty unless ``overwrite``)
    vocab_size  V, the width of every logits row
    source      provenance written to the manifest (engine, model, versions, params); JSON-able
    rng_contract the noise contract the engine's sampler follows ("mrv2" by default)
    max_bytes   budget for the step files: a step that would take the total over it is not
                written and :attr:`full` becomes True (the loop should stop)
    every       record only every N-th call of :meth:`record_step` (calls 0, N, 2N, ...);
                each step file's metadata keeps the engine's step index as ``engine_step``
    synthetic   True for made-up data (shown by ``replay inspect``)
    overwrite   replace an existing recording in ``path``
    mode        "sync" (convert, check and write inside ``record_step``) or "async" (snapshot
                inside ``record_step``, the rest on a writer thread; see the module docstring)
    max_pending async: steps in flight at most (snapshotted, not yet written)
    when_full   async, with ``max_pending`` steps in flight: "block" (wait) or "drop" (skip the
                step; :attr:`dropped` counts them, the manifest's ``dropped_steps`` on close)

    Use it as a context manager: a clean exit writes the final manifest
    (``complete: true``, step count, digest); an exception leaves
    ``complete: false`` and every finished step readable (async: the queued steps are
    written first).
    """

    def __init__(self, path: str | os.PathLike, vocab_size: int, *, source: dict[str, Any] | None = None,
                 rng_contract: str = "mrv2", max_bytes: int | None = None, every: int = 1,
                 synthetic: bool = False, overwrite: bool = False, mode: str = "sync", max_pending: int = 4,
                 when_full: str = "block"):
        if not isinstance(vocab_size, int) or vocab_size <= 0:
            raise InputError(path, f"vocab_size must be a positive integer, got {vocab_size!r}", field="vocab_size")
        if every < 1:
            raise InputError(path, f"every must be >= 1, got {every}", field="every")
        if max_bytes is not None and max_bytes <= 0:
            raise InputError(path, f"max_bytes must be positive, got {max_bytes}", field="max_bytes")
        if mode not in ("sync", "async"):
            raise InputError(path, f"mode must be 'sync' or 'async', got {mode!r}", field="mode")
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise InputError(path, f"max_pending must be an integer >= 1, got {max_pending!r}", field="max_pending")
        if when_full not in WHEN_FULL:
            raise InputError(path, f"when_full must be 'block' or 'drop', got {when_full!r}", field="when_full")
        self.path = Path(path)
        self.vocab_size = vocab_size
        self.max_bytes = max_bytes
        self.every = every
        self.calls = 0            # record_step calls so far (the engine's step index)
        self.bytes_written = 0    # bytes of step files written so far
        self.full = False         # True once the max_bytes budget stopped a step
        self.closed = False
        self.writer_errors: list[BaseException] = []  # async: errors left after the one close() raised
        self._writer = RecordingWriter(self.path, vocab_size=vocab_size, rng_contract=rng_contract,
                                       source=source, synthetic=synthetic, overwrite=overwrite)
        self._async = (AsyncStepWriter(self._write_step, max_pending=max_pending, when_full=when_full)
                       if mode == "async" else None)
        self._slot = Slot() if mode == "sync" else None  # the synchronous mode's pinned host buffer
        self.mode, self.when_full = mode, when_full

    # ------------------------------------------------------------------ public API
    @property
    def num_steps(self) -> int:
        """Steps written so far."""
        return len(self._writer._digests)

    @property
    def write_stats(self) -> dict[str, Any]:
        """What the writer did so far: steps, bytes and seconds spent in the write path (check + write + fsync;
        async: on the writer thread), and those seconds by phase (``phases``). ``bytes / seconds`` is the writer's
        throughput (manifest ``write_stats``). A copy: the writer thread goes on adding to its own."""
        stats = self._writer.write_stats
        return {**stats, "phases": dict(stats["phases"])}

    @property
    def dropped(self) -> int:
        """Steps skipped because ``max_pending`` steps were in flight (async, ``when_full="drop"``)."""
        return self._async.dropped if self._async else 0

    def record_step(self, logits, cu_num_logits, draft_token_ids, positions, temperature, top_k, top_p, min_p,
                    seed, request_ids, emitted_tokens, emitted_counts, emitted_routes=None,
                    draft_logits=None, meta: dict[str, Any] | None = None) -> Path | None:
        """Convert, validate and write one step; returns the file written, or None when skipped.

        A call is skipped (nothing converted, nothing written) when it is not one of
        every ``every``-th, when the recording is :attr:`full`, or when writing it would
        exceed ``max_bytes`` (then :attr:`full` becomes True). Raises InputError on bad input.

        Async: snapshots the inputs, queues them and returns None (or drops the step, see
        ``when_full``); then raises the error of an earlier step the writer thread refused,
        if any (this call's step stays queued).
        """
        if self.closed:
            raise InputError(self.path, "record_step after close()")
        engine_step = self.calls
        self.calls += 1
        if engine_step % self.every or self.full:
            return None
        args = dict(logits=logits, cu_num_logits=cu_num_logits, draft_token_ids=draft_token_ids,
                    positions=positions, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                    seed=seed, request_ids=request_ids, emitted_tokens=emitted_tokens,
                    emitted_counts=emitted_counts, emitted_routes=emitted_routes, draft_logits=draft_logits,
                    meta=meta)
        if self._async is None:
            if any(isinstance(v, torch.Tensor) and v.is_cuda for v in args.values()):
                args = snapshot(args, self._slot, copy_host=False)
                self._slot.wait()
            return self._write_step(engine_step, **args)
        self._async.submit(engine_step, args)
        self._raise_writer_error()
        return None

    def _write_step(self, engine_step: int, logits, cu_num_logits, draft_token_ids, positions, temperature, top_k,
                    top_p, min_p, seed, request_ids, emitted_tokens, emitted_counts, emitted_routes, draft_logits,
                    meta, row_max: dict[str, torch.Tensor] | None = None) -> Path | None:
        """The one path every step takes (the caller's thread in sync mode, the writer thread in async):
        convert, validate, check the budget, write atomically. ``row_max``: the float rows' maxima taken on
        the device by the snapshot (async_writer.ROW_MAX)."""
        if self.full:  # async: the budget ran out while this step was queued
            return None
        index = self.num_steps
        where = self.path / STEPS_DIR / step_file_name(index)

        def conv_float(name: str, x) -> torch.Tensor:
            t = _as_tensor(x, name, where, index)
            if t.dtype == torch.float64:
                t = t.float()
            if t.dtype not in FLOATS:
                raise InputError(where, f"dtype {_dname(t.dtype)} is not a float dtype "
                                        "(float32, bfloat16, float16; float64 is narrowed to float32)",
                                 step=index, field=name)
            return t

        logits_t = conv_float("logits", logits)
        cu = self._int("cu_num_logits", cu_num_logits, where, index)
        r = max(cu.numel() - 1, 0)
        n = logits_t.shape[0] if logits_t.ndim >= 1 else 0
        if draft_token_ids is None:
            drafts = torch.full((n,), -1, dtype=FIELD["draft_token_ids"].dtype)
        else:
            drafts = self._int("draft_token_ids", draft_token_ids, where, index)
        per_req = {
            "temperature": self._float_param("temperature", temperature, r, None, where, index),
            "top_k": self._int("top_k", 0 if top_k is None else top_k, where, index, broadcast=r),
            "top_p": self._float_param("top_p", top_p, r, 1.0, where, index),
            "min_p": self._float_param("min_p", min_p, r, 0.0, where, index),
            "seed": self._int("seed", seed, where, index, broadcast=r),
            "request_ids": (torch.arange(r, dtype=FIELD["request_ids"].dtype) if request_ids is None
                            else self._int("request_ids", request_ids, where, index, broadcast=r)),
        }
        step = Step(logits=logits_t, cu_num_logits=cu, draft_token_ids=drafts,
                    positions=self._int("positions", positions, where, index),
                    draft_logits=None if draft_logits is None else conv_float("draft_logits", draft_logits),
                    **per_req)
        emitted = self._emitted(emitted_tokens, emitted_counts, emitted_routes, step, where, index)

        if self.max_bytes is not None:
            predicted = sum(t.numel() * t.element_size() for t in step_tensors(step, emitted).values())
            if self.bytes_written + predicted + HEADER_ALLOWANCE > self.max_bytes:
                self.full = True
                return None
        file = self._writer.write_step(step, emitted, meta={"engine_step": engine_step, **(meta or {})},
                                       row_max=row_max)
        self.bytes_written += file.stat().st_size
        return file

    def record_sample(self, step: Step, result: SampleResult, meta: dict[str, Any] | None = None) -> Path | None:
        """Record a :class:`Step` and the :class:`SampleResult` an impl returned for it."""
        return self.record_step(step.logits, step.cu_num_logits, step.draft_token_ids, step.positions,
                                step.temperature, step.top_k, step.top_p, step.min_p, step.seed,
                                step.request_ids, result.tokens, result.counts, result.routes,
                                draft_logits=step.draft_logits, meta=meta)

    def close(self) -> None:
        """Write the final manifest (complete, step count, digest). Idempotent.

        Async: first writes every queued step and records ``dropped_steps`` in the manifest; then,
        with the recording closed, raises the first error of a step the writer thread refused that
        no ``record_step`` raised yet (:attr:`writer_errors` keeps the rest)."""
        if self.closed:
            return
        if self._async is not None:
            self._async.stop()
            self._writer.manifest["dropped_steps"] = self._async.dropped
        self._writer.close(engine={"calls": self.calls, "every": self.every, "mode": self.mode,
                                   "when_full": self.when_full if self._async else None, "dropped": self.dropped,
                                   "budget_full": self.full})
        self.closed = True
        self._raise_writer_error(keep_rest=True)

    def _raise_writer_error(self, keep_rest: bool = False) -> None:
        """Raise the oldest unreported error of the writer thread (at close, the others go to writer_errors)."""
        error = self._async.pop_error() if self._async else None
        if error is not None:
            if keep_rest:
                self.writer_errors = list(iter(self._async.pop_error, None))
            raise error

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        elif self._async is not None:  # write what is queued; the manifest keeps complete: false
            self._async.stop()
            self.closed = True
        # on an exception the manifest keeps complete: false; finished steps stay readable

    # ------------------------------------------------------------------ conversions
    def _int(self, name: str, x, where: Path, index: int, broadcast: int | None = None) -> torch.Tensor:
        t = _as_tensor(x, name, where, index)
        if t.dtype == torch.bool or t.is_floating_point() or t.is_complex():
            raise InputError(where, f"dtype {_dname(t.dtype)} is not an integer dtype", step=index, field=name)
        if t.dtype in (torch.uint16, torch.uint32, torch.uint64):  # few torch ops support these: go via numpy
            arr = t.numpy()
            if arr.size and int(arr.max()) > 2 ** 63 - 1:
                raise InputError(where, f"value {int(arr.max())} does not fit int64", step=index, field=name)
            t = torch.from_numpy(arr.astype(np.int64))
        if broadcast is not None and t.ndim == 0:
            t = t.reshape(1).expand(broadcast)
        target = FIELD[name].dtype
        if t.numel() and t.dtype != target:
            info = torch.iinfo(target)
            lo, hi = int(t.min()), int(t.max())
            if lo < info.min or hi > info.max:
                raise InputError(where, f"value {lo if lo < info.min else hi} does not fit {_dname(target)}",
                                 step=index, field=name)
        return t.to(target).contiguous()

    def _float_param(self, name: str, x, r: int, default: float | None, where: Path, index: int) -> torch.Tensor:
        if x is None:
            if default is None:
                raise InputError(where, "required (0 means greedy)", step=index, field=name)
            x = default
        t = _as_tensor(x, name, where, index)
        if t.dtype == torch.bool or t.is_complex():
            raise InputError(where, f"dtype {_dname(t.dtype)} is not a real number dtype", step=index, field=name)
        if t.ndim == 0:
            t = t.reshape(1).expand(r)
        return t.to(FIELD[name].dtype).contiguous()

    def _emitted(self, tokens, counts, routes, step: Step, where: Path, index: int) -> Emitted:
        r = step.num_requests
        width = step.max_drafts + 1 if r else 1
        if _is_ragged_list(tokens):
            rows = [list(map(int, row)) for row in tokens]
            if len(rows) != r:
                raise InputError(where, f"{len(rows)} lists, expected one per request ({r})", step=index,
                                 field="emitted_tokens")
            if any(len(row) > width for row in rows):
                raise InputError(where, f"a request emitted more than max_k+1={width} tokens", step=index,
                                 field="emitted_tokens")
            padded = [row + [-1] * (width - len(row)) for row in rows]
            tok = self._int("emitted_tokens", padded if padded else np.zeros((0, width), np.int64), where, index)
            if counts is None:
                counts = [sum(1 for v in row if v >= 0) for row in rows]
        else:
            tok = self._int("emitted_tokens", tokens, where, index)
            if counts is None:
                counts = (tok >= 0).sum(1) if tok.ndim == 2 else tok
        cnt = self._int("emitted_counts", counts, where, index)
        if tok.ndim == 2 and tok.shape[1] > width and bool((tok[:, width:] == -1).all()):
            tok = tok[:, :width].contiguous()  # an impl padded wider than this step's max_k+1
        if tok.ndim == 2 and cnt.ndim == 1 and cnt.numel() == tok.shape[0] and tok.numel():
            # slots past the count are -1 by contract; engines often leave garbage there
            col = torch.arange(tok.shape[1])[None, :]
            tok = torch.where(col < cnt.long()[:, None], tok, torch.full_like(tok, -1))
        rt = None
        if routes is not None:
            if isinstance(routes, (list, tuple)) and any(isinstance(x, str) for x in routes):
                unknown = [x for x in routes if isinstance(x, str) and x not in ROUTE_CODE]
                if unknown:
                    raise InputError(where, f"unknown route {unknown[0]!r}; known: {', '.join(ROUTE_CODE)}",
                                     step=index, field="emitted_routes")
                routes = [ROUTE_CODE[x] if isinstance(x, str) else int(x) for x in routes]
            rt = _as_tensor(routes, "emitted_routes", where, index)
            if rt.dtype == torch.bool or rt.is_floating_point():
                raise InputError(where, f"dtype {_dname(rt.dtype)} is not an integer dtype", step=index,
                                 field="emitted_routes")
            target, info = FIELD["emitted_routes"].dtype, torch.iinfo(FIELD["emitted_routes"].dtype)
            if rt.numel() and (int(rt.min()) < info.min or int(rt.max()) > info.max):
                raise InputError(where, f"route code does not fit {_dname(target)}", step=index,
                                 field="emitted_routes")
            rt = rt.to(target).contiguous()
        return Emitted(tokens=tok, counts=cnt, routes=rt)


def _dname(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _is_ragged_list(x) -> bool:
    """A list of per-request lists (any lengths): padded with -1 to max_k+1 by the Recorder."""
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(row, (list, tuple)) for row in x)


def _as_tensor(x, name: str, where: Path, index: int) -> torch.Tensor:
    """A CPU tensor from a tensor, numpy array, list or scalar (no copy for CPU tensors)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    try:
        if isinstance(x, np.ndarray):
            if x.dtype.kind not in "biufc":
                raise TypeError(f"numpy dtype {x.dtype}")
            return torch.from_numpy(np.ascontiguousarray(x))
        if isinstance(x, (Sequence, int, float, np.generic)) and not isinstance(x, (str, bytes)):
            arr = np.asarray(x)
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"values of type {arr.dtype}")
            return torch.from_numpy(arr)  # converted to the field's dtype by the caller
    except (TypeError, ValueError) as e:
        raise InputError(where, f"cannot convert to a tensor ({e})", step=index, field=name) from None
    raise InputError(where, f"expected a torch tensor, numpy array or list, got {type(x).__name__}",
                     step=index, field=name)
