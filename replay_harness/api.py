"""The Python API: load a recording, replay it through an impl, compare (docs/INTEGRATION.md).

    from replay_harness.api import load, replay, compare, assert_replays
    rec = load("fixtures/synthetic-mixed")            # Recording: len(rec), rec[i].step, rec[i].emitted
    results = replay(rec, "stochastic")                # [SampleResult per step]
    cmp = compare(rec, "greedy-only", against="reference")
    cmp.verdict(), cmp.tokens_not_compared, cmp.real_divergences, cmp.violations, cmp.to_dict()
    assert_replays(rec, my_sampler)                    # AssertionError naming the first problem

A sampler object that does not declare ``rng_contract = "mrv2"`` (plain ``sample(step)`` objects default
to "unknown") cannot be compared token for token on stochastic requests: the Comparison counts those
tokens (``tokens_not_compared``), its ``verdict()`` is "inconclusive", and :func:`assert_replays` raises
:class:`InconclusiveReplay` (an AssertionError) unless ``routes_only=True`` was asked for on purpose.

``impl`` is a registered name (``replay impls``), ``exec:PROGRAM`` (docs/EXTERNAL.md) or any object with
``sample(step) -> SampleResult``. ``device``: "auto" (default, as in the CLI and the pytest plugin: CUDA when
torch sees a GPU, else the CPU, where Triton impls run under TRITON_INTERPRET=1), "cpu" or "cuda"; the
Comparison says which ran (``cmp.device``), and so does every AssertionError. The same code runs ``replay
run``; nothing here prints.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator

from replay_harness.compare.diff import Comparison
from replay_harness.recording.step import SampleResult
from replay_harness.recording.store import Recording

__all__ = ["load", "replay", "compare", "assert_replays", "describe_failure", "InconclusiveReplay"]


class InconclusiveReplay(AssertionError):
    """Nothing wrong was seen, but stochastic tokens could not be compared (RNG contracts differ): no pass.
    ``comparison`` holds the counts (``tokens_not_compared``)."""

    def __init__(self, message: str, comparison: Comparison):
        super().__init__(message)
        self.comparison = comparison


def load(path: str | os.PathLike | Recording, *, nan: str = "error") -> Recording:
    """Open a recording folder (lazy; an ``InputError`` names file, step and field on bad input)."""
    return path if isinstance(path, Recording) else Recording(path, nan=nan)


@contextmanager
def _opened(impl: Any, device: Any, impl_args: list[str] | None) -> Iterator[Any]:
    """(sampler, torch.device) for a name or an object; samplers started here are closed on exit."""
    from replay_harness.compare.runner import load_impl, resolve_device
    from replay_harness.impls.contract import as_sampler

    dev = resolve_device(device) if isinstance(device, str) else device
    sampler = load_impl(impl, dev, impl_args) if isinstance(impl, str) else as_sampler(impl)
    try:
        yield sampler, dev
    finally:
        if isinstance(impl, str):
            sampler.close()


def replay(recording: Any, impl: Any = "reference", *, device: Any = "auto",
           impl_args: list[str] | None = None) -> list[SampleResult]:
    """What ``impl`` emits for every step of ``recording`` (a path or a Recording), run on ``device`` (the
    results are moved to the CPU)."""
    from replay_harness.impls.contract import place

    rec = load(recording)
    with _opened(impl, device, impl_args) as (sampler, dev):
        sampler.begin_recording(str(rec.path))
        out = []
        for record in rec:
            res = sampler.sample(place(record.step, sampler, dev))
            res.tokens, res.counts, res.routes = res.tokens.cpu(), res.counts.cpu(), res.routes.cpu()
            out.append(res)
        return out


def compare(recording: Any, impl: Any = "reference", *, against: Any = "recorded", device: Any = "auto",
            impl_args: list[str] | None = None) -> Comparison:
    """Replay through ``impl`` and compare with ``against`` ("recorded": what the engine emitted, or an
    impl); the :class:`Comparison` that ``replay run`` prints (``ok`` tolerates near-ties), with
    ``device`` set to the device that ran ("cpu", "cuda", ...)."""
    from replay_harness.compare import runner

    rec = load(recording)
    with _opened(impl, device, impl_args) as (sampler, dev):
        sampler.begin_recording(str(rec.path))
        if isinstance(against, str) and against == "recorded":
            cmp = runner.run_recording(rec, sampler, "recorded", dev)
        else:
            with _opened(against, dev, None) as (other, _):
                other.begin_recording(str(rec.path))
                cmp = runner.run_recording(rec, sampler, other, dev)
    cmp.device = str(dev)
    return cmp


def describe_failure(cmp: Comparison, label: str = "impl") -> str:
    """One line per problem of a failed comparison (the lines ``replay run`` prints), '' when ok."""
    lines = [f"routing violation {kind} ({label}): {n} request-steps" for kind, n in cmp.violations_by_kind().items()]
    lines += [f"routing violation {kind} (against): {n} request-steps"
              for kind, n in cmp.violations_by_kind("against").items()]
    if cmp.refused:
        lines.append(f"{label} refused {len(cmp.refused)} request-steps")
    for d in cmp.real_divergences[:3]:
        where = f"step {d.step}, request {d.request_id} (index {d.request})"
        lines.append(f"route difference at {where}: same tokens, route {d.route} vs {d.against_route}"
                     if d.position is None
                     else f"divergence at {where}, position {d.position}: {label} emitted {d.token} ({d.route}), "
                          f"expected {d.against_token} ({d.against_route})")
    return "\n".join(lines)


def inconclusive_reason(cmp: Comparison, path: Any, label: str) -> str:
    """The one line an inconclusive comparison gives: what was not compared, and where to go."""
    contracts = next((n for n in cmp.notes if n.startswith("RNG contracts differ")), "RNG contracts differ")
    on = getattr(cmp, "device", None)
    return (f"{path}: INCONCLUSIVE: {label}{f' on {on}' if on else ''}: {cmp.summary()}; "
            f"{contracts.split(':')[0]}. Test the sampler "
            f"statistically with `replay verify {path} --impl ...`, declare rng_contract = \"mrv2\" if it "
            f"implements that contract, or pass routes_only=True (--replay-routes-only) to accept routes, refusals "
            f"and greedy tokens alone")


def assert_replays(recording: Any, impl: Any = "reference", *, against: Any = "recorded", device: Any = "auto",
                   impl_args: list[str] | None = None, routes_only: bool = False) -> Comparison:
    """:func:`compare`, raising ``AssertionError`` with :func:`describe_failure`'s lines unless ``ok``, and
    :class:`InconclusiveReplay` when stochastic tokens could not be compared (RNG contracts differ) unless
    ``routes_only`` (a check of routes, refusals and greedy tokens alone, asked for on purpose)."""
    __tracebackhide__ = True  # a failing check in a pytest run shows the message, not these frames
    rec = load(recording)
    cmp = compare(rec, impl, against=against, device=device, impl_args=impl_args)
    label = impl if isinstance(impl, str) else getattr(impl, "name", type(impl).__name__)
    if not cmp.ok:
        raise AssertionError(f"{rec.path}: {label} does not replay against "
                             f"{against if isinstance(against, str) else 'impl'} on {cmp.device}:"
                             f"\n{describe_failure(cmp, str(label))}")
    if cmp.verdict(routes_only) == "inconclusive":
        raise InconclusiveReplay(inconclusive_reason(cmp, rec.path, str(label)), cmp)
    return cmp
