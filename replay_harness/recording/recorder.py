"""The Recorder API: record an engine's decode steps from inside its own loop.

For engines that are not ours (a vLLM fork, a C++ port behind pybind, an
in-house server): the engine's decode loop calls :meth:`Recorder.record_step`
once per sampler call with what the sampler saw and what it emitted. The
Recorder converts the inputs to the fixture dtypes
(:mod:`replay_harness.recording.recorder_inputs`), validates them with the
fixture validator and streams them to disk through
:class:`replay_harness.recording.store.RecordingWriter` (one file per step, written to a
temporary name, fsynced and renamed: a crash loses at most the step in flight).

    from replay_harness import Recorder

    with Recorder("recordings/run-1", vocab_size=V, source={"engine": "my-engine 1.2"},
                  rng_contract="unknown",          # "mrv2" only if the engine's noise is vLLM MRV2's
                  max_bytes=200_000_000, every=1) as rec:
        for step in engine_loop():
            ...                                  # the engine samples as usual
            rec.record_step(
                logits=logits,                   # [N, V] what the sampler saw (bf16 stays bf16)
                cu_num_logits=cu,                # [R+1]  0, 1+k_0, ...
                positions=positions,             # [N]    position of the token sampled at each row
                temperature=temps,               # [R]    (or a scalar)
                seed=seeds,                      # [R]    int64 (or a scalar)
                emitted_tokens=out_tokens,       # [R, max_k+1] -1 padded, or a list of R lists
                # optional, with their defaults:
                draft_token_ids=drafts,          # [N]    draft per verify row, -1 on bonus rows (None: all -1)
                top_k=top_k, top_p=top_p, min_p=min_p,   # [R] each (None: 0, 1, 0: off)
                request_ids=req_ids,             # [R]    (None: 0..R-1)
                emitted_counts=out_counts,       # [R]    (None: the ids >= 0 per request)
                emitted_routes=routes,           # [R]    codes or route names (None: not recorded)
                draft_logits=draft_logits,       # [N-R, V] pre-temperature (None: one-hot drafts)
                # schema minor 2, each optional (recorder_inputs.KEYWORDS):
                output_token_ids=[[1, 2], [3]],  # ragged lists as R lists (or values + cu_output_token_ids)
                frequency_penalty=0.5, logprobs=[5, None], emitted_logprobs=lp, emitted_logprob_ids=ids,
                emitted_logprob_ranks=ranks)
            if rec.full:                         # --max-bytes budget reached
                break

Inputs may be torch tensors (any device; they are copied to the CPU), numpy
arrays, or (nested) Python lists and scalars; the conversions (dtypes, defaults,
ragged lists, the emitted logprobs' layouts) are recorder_inputs' docstring and
docs/RECORDING.md's table. A required argument left out, like every other problem,
raises :class:`replay_harness.errors.InputError` naming the recording's step file,
the step and the field; nothing is written for that step and the Recorder stays
usable (earlier steps are untouched).

``rng_contract`` is what the manifest claims about the engine's noise, and replay
compares sampled tokens token for token only under a contract both sides declare.
It defaults to "unknown": a Recorder cannot know it, and claiming "mrv2" for an
engine with its own RNG made `replay run` fail a correct engine on every sampled
token (issue 66). Under "unknown", greedy tokens, routes and counts are still
compared exactly and sampled tokens are tested by `replay audit` / `replay verify`.

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

import json
import os
from pathlib import Path
from typing import Any

import torch

from replay_harness.errors import InputError
from replay_harness.recording.async_writer import WHEN_FULL, AsyncStepWriter, Slot, snapshot
from replay_harness.recording.recorder_inputs import EMITTED_KEYWORDS, check_keywords, convert_step
from replay_harness.recording.schema import MANIFEST, PIPELINE_FIELDS, STEPS_DIR, step_file_name
from replay_harness.recording.store import RecordingWriter, step_tensors
from replay_harness.recording.step import SampleResult, Step

__all__ = ["Recorder"]

HEADER_ALLOWANCE = 4096  # bytes: an upper bound on a step file's safetensors header


class Recorder:
    """Streams an engine's decode steps into a recording folder (schema replay.recording/1).

    path        the recording folder to create (must be absent or empty unless ``overwrite``)
    vocab_size  V, the width of every logits row
    source      provenance written to the manifest (engine, model, versions, params); JSON-able
    rng_contract the noise contract the engine's sampler declares: "unknown" (default; sampled tokens are then
                tested statistically, never compared token for token) or a name such as "mrv2" (vLLM
                Model Runner V2's Philox / Gumbel noise, docs/FIXTURES.md) when it implements it
    max_bytes   budget for the step files: a step that would take the total over it is not
                written and :attr:`full` becomes True (the loop should stop)
    every       record only every N-th call of :meth:`record_step` (calls 0, N, 2N, ...);
                each step file's metadata keeps the engine's step index as ``engine_step``
    synthetic   True for made-up data (shown by ``replay inspect``)
    overwrite   replace what ``path`` holds (a folder that is not empty is refused without it: one left
                by an aborted run, ``complete: false``, included)
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
                 rng_contract: str = "unknown", max_bytes: int | None = None, every: int = 1,
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
        if not isinstance(rng_contract, str) or not rng_contract:
            raise InputError(path, f"rng_contract must be a non-empty name, got {rng_contract!r}",
                             field="rng_contract")
        if not overwrite:
            _refuse_existing(Path(path))
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

    def record_step(self, logits=None, cu_num_logits=None, draft_token_ids=None, positions=None, temperature=None,
                    top_k=None, top_p=None, min_p=None, seed=None, request_ids=None, emitted_tokens=None,
                    emitted_counts=None, emitted_routes=None, draft_logits=None, meta: dict[str, Any] | None = None,
                    **fields) -> Path | None:
        """Convert, validate and write one step; returns the file written, or None when skipped.

        Required: ``logits``, ``cu_num_logits``, ``positions``, ``temperature``, ``seed``, ``emitted_tokens``
        (one missing is an InputError naming it, as any bad input). The others default as the module docstring
        says; ``fields``: schema minor 2's optional keywords (recorder_inputs.KEYWORDS: the sampling pipeline's
        inputs, ``logit_bias``, ``emitted_logprobs`` / ``_logprob_ids`` / ``_logprob_ranks`` / ``_kept_mask``).

        A call is skipped (nothing converted, nothing written) when it is not one of
        every ``every``-th, when the recording is :attr:`full`, or when writing it would
        exceed ``max_bytes`` (then :attr:`full` becomes True). Raises InputError on bad input.

        Async: snapshots the inputs, queues them and returns None (or drops the step, see
        ``when_full``); then raises the error of an earlier step the writer thread refused,
        if any (this call's step stays queued).
        """
        if self.closed:
            raise InputError(self.path, "record_step after close()")
        check_keywords(list(fields), self.path)
        engine_step = self.calls
        self.calls += 1
        if engine_step % self.every or self.full:
            return None
        args = dict(logits=logits, cu_num_logits=cu_num_logits, draft_token_ids=draft_token_ids,
                    positions=positions, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                    seed=seed, request_ids=request_ids, emitted_tokens=emitted_tokens,
                    emitted_counts=emitted_counts, emitted_routes=emitted_routes, draft_logits=draft_logits,
                    meta=meta, **{k: v for k, v in fields.items() if v is not None})
        if self._async is None:
            if any(isinstance(v, torch.Tensor) and v.is_cuda for v in args.values()):
                args = snapshot(args, self._slot, copy_host=False)
                self._slot.wait()
            return self._write_step(engine_step, **args)
        self._async.submit(engine_step, args)
        self._raise_writer_error()
        return None

    def _write_step(self, engine_step: int, meta: dict[str, Any] | None = None,
                    row_max: dict[str, torch.Tensor] | None = None, **args) -> Path | None:
        """The one path every step takes (the caller's thread in sync mode, the writer thread in async):
        convert (recorder_inputs.convert_step), validate, check the budget, write atomically. ``row_max``: the
        float rows' maxima taken on the device by the snapshot (async_writer.ROW_MAX)."""
        if self.full:  # async: the budget ran out while this step was queued
            return None
        index = self.num_steps
        step, emitted = convert_step(args, self.path / STEPS_DIR / step_file_name(index), index, self.vocab_size)
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
        """Record a :class:`Step` (its pipeline fields included) and the :class:`SampleResult` an impl returned
        for it (its logprobs, ranks and kept sets included, when it has them)."""
        fields = {name: getattr(step, name) for name in PIPELINE_FIELDS}
        fields.update({name: getattr(result, name.removeprefix("emitted_")) for name in EMITTED_KEYWORDS})
        return self.record_step(step.logits, step.cu_num_logits, step.draft_token_ids, step.positions,
                                step.temperature, step.top_k, step.top_p, step.min_p, step.seed,
                                step.request_ids, result.tokens, result.counts, result.routes,
                                draft_logits=step.draft_logits, meta=meta, **fields)

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


def _refuse_existing(path: Path) -> None:
    """Refuse a ``path`` that is a file or a folder that is not empty, in the API's words (``overwrite=True``;
    RecordingWriter's own message names the command line's ``--overwrite``)."""
    if path.exists() and not path.is_dir():
        raise InputError(path, "exists and is not a folder", field="path")
    if path.is_dir() and any(path.iterdir()):
        what = "folder exists and is not empty"
        try:
            if json.loads((path / MANIFEST).read_text()).get("complete") is False:
                what = "folder holds a recording that did not close (complete: false, an aborted run?)"
        except (OSError, ValueError, AttributeError):
            pass
        raise InputError(path, f"{what}: pass overwrite=True to Recorder to replace it, or choose another path",
                         field="path")
