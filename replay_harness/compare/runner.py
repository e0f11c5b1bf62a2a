"""Replay recordings through impls and compare (no printing here)."""
from __future__ import annotations

import os
from contextlib import nullcontext
from typing import Callable

import torch

from replay_harness.compare.diff import Comparison, compare_step, recorded_result
from replay_harness.errors import EnvironmentProblem, UsageError
from replay_harness.impls import get_impl
from replay_harness.impls.contract import Sampler, place, placement
from replay_harness.impls.external import sample_at
from replay_harness.recording.prefetch import ReadStats, units_ahead
from replay_harness.recording.store import Recording, StepRecord


def resolve_device(device: str) -> torch.device:
    """"auto" picks CUDA when present; Triton impls then run natively, else under TRITON_INTERPRET=1."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise EnvironmentProblem("--device cuda asked for, but torch sees no CUDA GPU")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel module is imported
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise UsageError(f"unknown device '{device}' (auto, cpu, cuda)")
    return torch.device(device)


def load_impl(name: str, device: torch.device, impl_args: list[str] | None = None,
              timeout: float | None = None) -> Sampler:
    """``get_impl`` plus the CUDA check (exit 3); ``timeout`` (--impl-timeout) reaches external impls."""
    impl = get_impl(name, impl_args, timeout=timeout)
    if impl.requires_cuda and device.type != "cuda":
        raise EnvironmentProblem(f"impl '{name}' needs a CUDA GPU")
    return impl


def run_recording(rec: Recording, impl: Sampler, against: str | Sampler, device: torch.device,
                  on_step: Callable[[], None] | None = None, stats: ReadStats | None = None,
                  depth: int | None = None) -> Comparison:
    """Replay every step of ``rec`` through ``impl``; ``against`` is "recorded" or an impl.

    Stochastic requests are compared token by token only when both sides declare the same RNG
    contract (an undeclared one, "unknown", never matches). Steps are read ``depth`` ahead by a reader
    thread (recording/prefetch.py; default ``REPLAY_PREFETCH_DEPTH`` or 2), so a few are resident at a
    time; ``stats`` gets the bytes and seconds read.
    """
    return run_recordings([rec], impl, against, device, on_step, stats, depth)[0]


def run_recordings(recs: list[Recording], impl: Sampler, against: str | Sampler, device: torch.device,
                   on_step: Callable[[], None] | None = None, stats: ReadStats | None = None,
                   depth: int | None = None, begin: Callable[[int], None] | None = None) -> list[Comparison]:
    """:func:`run_recording` of each of ``recs``, with one read-ahead across them (the first step of a
    recording is read while the last one of the previous recording is replayed); ``begin(r)`` runs before
    recording r's first step (and for a recording without steps, before the next one's)."""
    heads = [start_comparison(rec, impl, against) for rec in recs]
    units = [(r, i) for r, rec in enumerate(recs) for i in range(len(rec))]
    begun = 0
    for (r, i), record in units_ahead(recs, units, read_device(impl, [o for _, _, o in heads], device), depth, stats):
        while begin is not None and begun <= r:
            begin(begun)
            begun += 1
        cmp, exact, other = heads[r]
        replay_step(cmp, recs[r], i, impl, other, device, exact, record)
        del record
        if on_step:
            on_step()
    while begin is not None and begun < len(recs):
        begin(begun)
        begun += 1
    return [cmp for cmp, _, _ in heads]


def read_device(impl: Sampler, others: list[str | Sampler], device: torch.device) -> torch.device | None:
    """Where the steps are read to: the one device every side runs on when that is a CUDA device (the reader
    thread then copies each step there, recording/prefetch.py), else the CPU (None)."""
    where = {placement(impl, device)} | {placement(o, device) for o in others if not isinstance(o, str)}
    return where.pop() if len(where) == 1 and next(iter(where)).type == "cuda" else None


def start_comparison(rec: Recording, impl: Sampler,
                     against: str | Sampler) -> tuple[Comparison, bool, str | Sampler]:
    """An empty Comparison for ``rec`` (with the note when the RNG contracts differ), whether stochastic
    requests are compared token by token (``exact``), and what the steps are compared with: ``against``,
    except "recorded" on a recording that holds no engine tokens (``Recording.has_engine_tokens``: `replay
    synth` output): compared with the reference's tokens it stores (``expected_tokens: "reference"``), or,
    in one written without them, with the reference run now."""
    cmp = Comparison()
    if against == "recorded" and not rec.has_engine_tokens and rec.has_expected_tokens:
        cmp.notes.append("the recording holds no engine tokens (derived, e.g. by `replay synth`): compared "
                         "against the reference's tokens it stores (expected_tokens)")
    elif against == "recorded" and not rec.has_engine_tokens:
        cmp.notes.append("the recording holds no engine tokens (derived, e.g. by `replay synth`): compared "
                         "against reference")
        against = get_impl("reference")
    other_contract = rec.rng_contract if against == "recorded" else contract_for(against, rec)
    mine = contract_for(impl, rec)
    exact = other_contract == mine != "unknown"
    if not exact:
        cmp.notes.append(f"RNG contracts differ ({mine} vs {other_contract}): "
                         "stochastic requests are not compared token by token; use statistical verification")
    return cmp, exact, against


def contract_for(impl: Sampler, rec: Recording) -> str:
    """The RNG contract ``impl`` replays ``rec`` under: the recording's when the impl implements several and that
    one among them (``rng_contracts``, e.g. the reference's mrv2 and mrv2-fp64: Step.rng_contract fixes the
    width), else the impl's own."""
    several = getattr(impl, "rng_contracts", ())
    # a list that does not hold the impl's own contract is inherited, not declared (a subclass of the reference
    # that declares another contract): the impl's own then
    return rec.rng_contract if impl.rng_contract in several and rec.rng_contract in several else impl.rng_contract


def replay_step(cmp: Comparison, rec: Recording, index: int, impl: Sampler, against: str | Sampler,
                device: torch.device, exact: bool, record: StepRecord | None = None) -> Comparison:
    """Read step ``index`` of ``rec`` (unless ``record`` holds it already), replay it through ``impl`` (and
    ``against``, as ``start_comparison`` returned it) and fold it into ``cmp``."""
    record = rec[index] if record is None else record
    with torch.inference_mode() if device.type == "cuda" else nullcontext():
        got = _to_cpu(sample_at(impl, place(record.step, impl, device), record.index))
        want = recorded_result(record.emitted) if against == "recorded" else \
            _to_cpu(sample_at(against, place(record.step, against, device), record.index))
    compare_step(cmp, record.index, record.step, got, want, exact_stochastic=exact)
    return cmp


def _to_cpu(result):
    result.tokens, result.counts, result.routes = result.tokens.cpu(), result.counts.cpu(), result.routes.cpu()
    return result
