"""`replay bench`: A/B timing of sampler impls on recorded steps, with proof that the code under test ran.

No printing here (:mod:`replay_harness.bench.report` renders, :mod:`replay_harness.cli.bench` is the
command). docs/BENCH.md is the user guide.

Per step of every recording (optionally split into one sub-step per expected route), for each side
(A = ``--impl``, B = ``--vs``, each with its own parameter overrides):

1. **coverage pass** (untimed, also the JIT warm-up): the routes, counts and ``self_reported_us`` of what
   is timed; one call of exactly what is timed runs under the kernel counter
   (:func:`replay_harness.bench.coverage.count_kernels`). External impls run in another process:
   "not observable".
2. **timing** (:func:`replay_harness.bench.timing.time_calls`): ``launch(state)`` when the impl is
   ``launchable`` (device work only; states prepared from ROTATING copies of the step's logits, enough
   copies to exceed twice the L2 cache, or one copy with ``warm_l2``), else ``sample(step)``; A and B
   interleaved call by call. CUDA events on CUDA; wall-clock on the CPU and for ``cpu_only`` impls
   timed through ``sample`` (they get CPU tensors, :func:`replay_harness.impls.contract.placement`).

The **coverage guard** (:func:`replay_harness.bench.coverage.judge`) turns a run whose path under test
never executed into an INCONCLUSIVE verdict.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

from replay_harness.bench.coverage import SideCoverage, Verdict, count_kernels, judge, merge_coverage
from replay_harness.bench.environment import environment
from replay_harness.bench.overrides import Overrides, apply_overrides
from replay_harness.bench.timing import (bootstrap_ratio, flush_l2, l2_bytes, noisy_sides, quantiles, rotation_count,
                                         time_calls)
from replay_harness.impls.contract import Sampler, as_sampler, placement
from replay_harness.impls.external import sample_at
from replay_harness.recording.step import ROUTES, SampleResult, Step

MIN_CI_STEPS = 5  # fewer (sub-)steps than this: the ratio's CI comes with a caveat


@dataclass
class Side:
    """One impl under test with its parameter overrides. key: "A" (--impl) or "B" (--vs)."""

    key: str
    impl_name: str
    impl: Sampler
    overrides: Overrides = field(default_factory=Overrides)

    def __post_init__(self) -> None:
        self.impl = as_sampler(self.impl)

    @property
    def label(self) -> str:
        ov = self.overrides.label()
        return f"{self.impl_name}[{ov}]" if ov else self.impl_name

    @property
    def external(self) -> bool:
        return self.impl.external

    @property
    def timed_call(self) -> str:
        """'launch' (device work of a prepared state) or 'sample' (the whole sample(step) call)."""
        return "launch" if self.impl.launchable else "sample"

    def runs_on(self, device: torch.device) -> torch.device:
        """Where its steps go: launch-timed impls time device work, so ``device``; impls timed through
        ``sample`` follow the placement rule (``cpu_only`` ones get CPU tensors, as in `replay run`)."""
        return device if self.impl.launchable else placement(self.impl, device)


@dataclass
class Measurement:
    """Timings of one side on one (sub-)step. times_us: one value per timed call."""

    side: str
    label: str
    recording: str
    data: str  # "recorded", "synthetic" or "derived/synthetic"
    step: int
    group: str  # "all" or the expected route of a --split-routes sub-step
    route_mix: str  # routes this side sent the step's requests down, "+"-joined, sorted
    requests: int
    rows: int
    vocab: int
    max_drafts: int
    dtype: str
    times_us: list[float]
    timed: str  # "launch" or "sample"
    clock: str  # "cuda-events" or "cpu-wall"
    bytes: int
    tokens: int
    rotation: int
    device_busy: float | None = None
    self_reported_us: float | None = None

    @property
    def median_us(self) -> float:
        return quantiles(self.times_us)[0]

    @property
    def p20_us(self) -> float:
        return quantiles(self.times_us)[1]

    @property
    def p80_us(self) -> float:
        return quantiles(self.times_us)[2]

    @property
    def gbps(self) -> float | None:
        return self.bytes / (self.median_us * 1e-6) / 1e9 if self.median_us > 0 and self.bytes else None

    @property
    def us_per_token(self) -> float | None:
        return self.median_us / self.tokens if self.tokens else None


@dataclass
class Ratio:
    """time(A) / time(B) over the benchmark with a bootstrap confidence interval."""

    point: float
    lo: float
    hi: float
    confidence: float
    resamples: int
    pairs: int
    calls: int = 0  # fewest timed calls per (sub-)step and impl behind the ratio
    caveat: str = ""  # non-empty when the CI rests on too few steps to carry the step-to-step variation
    statistic: str = ("sum over (sub-)steps of A's median time / the same for B; CI: percentile bootstrap "
                      "resampling steps (paired) and, within each, the timed calls")
    uses: str = "harness time (CUDA events or wall-clock), not self-reported time"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class BenchResult:
    env: dict
    settings: dict
    sides: list[Side]
    measurements: list[Measurement]
    coverage: dict[str, SideCoverage]
    ratio: Ratio | None
    verdict: Verdict


# -- bytes and input copies --------------------------------------------------------------------------------


def step_bytes(step: Step) -> int:
    """Bytes of the step's logits (+ draft logits): what one rotating copy costs."""
    n = step.logits.numel() * step.logits.element_size()
    if step.draft_logits is not None:
        n += step.draft_logits.numel() * step.draft_logits.element_size()
    return int(n)


def floor_bytes(step: Step, routes: list[str]) -> int:
    """Logits bytes the step's routes need read at least once (a floor, not measured traffic).

    A request that is not refused needs its (k+1) rows (a plain sample: its one row); a stochastic-verify
    request with draft logits also needs its k draft rows. Refused requests need nothing.
    """
    ks = step.num_drafts.tolist()
    row = step.vocab_size * step.logits.element_size()
    drow = step.vocab_size * step.draft_logits.element_size() if step.draft_logits is not None else 0
    total = 0
    for k, route in zip(ks, routes):
        if route == "refused":
            continue
        total += (k + 1) * row
        if route == "stochastic-verify":
            total += k * drow
    return total


def _copy_inputs(step: Step) -> Step:
    return dataclasses.replace(step, logits=step.logits.clone(),
                               draft_logits=None if step.draft_logits is None else step.draft_logits.clone())


def _callables(side: Side, step: Step, copies: int, index: int) -> tuple[list[Callable[[], Any]], list]:
    """``copies`` zero-argument calls of what is timed (each on its own copy of the inputs), and a list
    that ``sample`` calls append their results' self_reported_us to. ``index``: the recording's step number
    (what an external impl's messages quote).

    Every copy is a fresh clone, never ``step``'s own tensors: A's and B's steps often share the recorded
    logits (overrides change parameters only), so a shared copy would let the second side of a round read
    what the first just pulled into L2.
    """
    reported: list = []
    steps = [_copy_inputs(step) for _ in range(copies)]
    impl = side.impl
    if impl.launchable:
        states = [impl.prepare(s) for s in steps]
        return [(lambda st=st: impl.launch(st)) for st in states], reported

    def call(s):
        res = sample_at(impl, s, index)
        reported.append(res.self_reported_us)
        return res

    return [(lambda s=s: call(s)) for s in steps], reported


# -- one (sub-)step ----------------------------------------------------------------------------------------


def _coverage_call(s: Side, st: Step, device: torch.device, cov: SideCoverage, index: int) -> SampleResult:
    """One untimed call of what is timed, under the kernel counter; returns its SampleResult (``index``: the
    recording's step number, for an external impl's messages).

    launch-timed impls: prepare + launch once; the result is built from the state's routes (our Triton
    impls keep them there) or, without them, from a separate ``sample`` call.
    """
    holder: dict = {}
    if s.impl.launchable:
        with torch.inference_mode():
            holder["state"] = s.impl.prepare(st)  # host work and copies: not part of what is timed or counted

        def once():
            holder["out"] = s.impl.launch(holder["state"])
    else:
        def once():
            holder["result"] = sample_at(s.impl, st, index)
    with torch.inference_mode():
        if s.external:
            once()
            cov.kernels, cov.kernel_source = None, "not observable: the impl runs in another process"
        elif cov.kernels is None:
            once()
        else:
            kernels, source, launcher = count_kernels(once, s.runs_on(device))
            if kernels is None:
                cov.kernels, cov.kernel_source = None, source
            else:
                cov.kernels.update(kernels)
                cov.kernel_source = source
                if launcher is not None and launcher is not kernels:
                    cov.launcher_kernels = (cov.launcher_kernels or Counter()) + launcher
        if "result" in holder:
            return holder["result"]
        result = s.impl.result(holder["state"], *holder["out"])  # None: the state does not say its routes
        return result if result is not None else sample_at(s.impl, st, index)


def _count_routes(cov: SideCoverage, step: Step, result: SampleResult) -> list[str]:
    """Add one step's routes (per request and row) and routing violations to ``cov``; the route names."""
    routes = result.route_names()
    for route, k, want in zip(routes, step.num_drafts.tolist(), step.expected_routes()):
        cov.requests += 1
        cov.rows += k + 1
        cov.requests_by_route[route] += 1
        cov.rows_by_route[route] += k + 1
        if route != want:
            cov.violations[f"{want} -> {route}"] += 1
    cov.notes.extend(result.notes)
    return routes


def _bench_step(rec, data: str, index: int, group: str, base: Step, sides: list[Side], device: torch.device,
                l2: int, coverage: dict[str, SideCoverage], repeats: int, warmup: int,
                warm_l2: bool) -> list[Measurement]:
    steps = {s.key: apply_overrides(base, s.overrides).to(s.runs_on(device)) for s in sides}
    infos = {}
    for s in sides:
        result = _coverage_call(s, steps[s.key], device, coverage[s.key], index)
        infos[s.key] = (_count_routes(coverage[s.key], steps[s.key], result), int(result.counts.sum()))
    copies = rotation_count(max(step_bytes(st) for st in steps.values()), l2, warm_l2)
    calls, reported, clocks = {}, {}, {}
    for s in sides:
        calls[s.key], reported[s.key] = _callables(s, steps[s.key], copies, index)
        clocks[s.key] = "cuda-events" if s.runs_on(device).type == "cuda" and s.impl.launchable else "cpu-wall"
    flush = None if warm_l2 or not l2 else (lambda: flush_l2(device, 2 * l2))
    with torch.inference_mode():
        times, busy = time_calls(calls, clocks, repeats, warmup, flush)
    out = []
    for s in sides:
        st = steps[s.key]
        routes, tokens = infos[s.key]
        rep = [x for x in reported[s.key] if x is not None]
        out.append(Measurement(
            side=s.key, label=s.label, recording=str(rec.path), data=data, step=index, group=group,
            route_mix="+".join(sorted(set(routes))) or "-", requests=st.num_requests, rows=st.logits.shape[0],
            vocab=st.vocab_size, max_drafts=st.max_drafts, dtype=str(st.logits.dtype).removeprefix("torch."),
            times_us=times[s.key], timed=s.timed_call, clock=clocks[s.key], bytes=floor_bytes(st, routes),
            tokens=tokens, rotation=copies, device_busy=busy[s.key],
            self_reported_us=quantiles(rep)[0] if rep else None))
    del calls
    return out


# -- the benchmark -----------------------------------------------------------------------------------------


def split_by_route(step: Step) -> list[tuple[str, Step]]:
    """[(expected route, sub-step of the requests with that expected route)], in ROUTES order."""
    expected = step.expected_routes()
    out = []
    for route in ROUTES:
        reqs = [r for r, e in enumerate(expected) if e == route]
        if reqs:
            out.append((route, step.select(reqs)))
    return out


def same_step(a: Step, b: Step) -> bool:
    """True when two steps hold the same values in every tensor (what an impl sees is identical)."""
    for f in dataclasses.fields(Step):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if (x is None) != (y is None):
            return False
        if x is not None and x is not y and not (x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)):
            return False
    return True


def _data_label(rec) -> str:
    if "derived" in rec.manifest or (rec.manifest.get("source") or {}).get("derived"):
        return "derived/synthetic"
    return "synthetic" if rec.synthetic else "recorded"


def run_bench(recordings: Iterable, sides: list[Side], device: torch.device, *, repeats: int = 20, warmup: int = 3,
              warm_l2: bool = False, split_routes: bool = False, expect_routes: list[tuple[str | None, str]] = (),
              resamples: int = 2000, confidence: float = 0.95,
              on_step: Callable[[str], None] | None = None) -> BenchResult:
    """Coverage pass + interleaved timing of every side on every step; then the ratio and the verdict.
    (Under torchrun, :func:`replay_harness.bench.shard.bench_units` spreads the steps over the ranks.)"""
    l2 = l2_bytes(device)
    parts = []
    for rec in recordings:
        for s in sides:
            s.impl.begin_recording(str(rec.path))
        for record in rec:
            parts.append(bench_record(rec, record, sides, device, l2, repeats=repeats, warmup=warmup,
                                      warm_l2=warm_l2, split_routes=split_routes, on_step=on_step))
    return finish_bench(parts, sides, device, repeats=repeats, warmup=warmup, warm_l2=warm_l2,
                        split_routes=split_routes, expect_routes=expect_routes, resamples=resamples,
                        confidence=confidence)


@dataclass
class StepPart:
    """What benchmarking one recorded step gave: its measurements, each side's coverage of it, and whether
    A's and B's overridden inputs were identical (an A/A run on paper: same impl, same steps)."""

    measurements: list[Measurement]
    coverage: dict[str, SideCoverage]
    same_inputs: bool


def bench_record(rec, record, sides: list[Side], device: torch.device, l2: int, *, repeats: int, warmup: int,
                 warm_l2: bool, split_routes: bool, on_step: Callable[[str], None] | None = None) -> StepPart:
    """Benchmark one recorded step (a StepRecord of ``rec``; one sub-step per expected route with
    ``split_routes``)."""
    data = _data_label(rec)
    coverage = {s.key: SideCoverage() for s in sides}
    same_inputs = len(sides) == 2 and sides[0].impl_name == sides[1].impl_name and same_step(
        apply_overrides(record.step, sides[0].overrides), apply_overrides(record.step, sides[1].overrides))
    measurements: list[Measurement] = []
    groups = split_by_route(record.step) if split_routes else [("all", record.step)]
    for group, base in groups:
        if on_step:
            on_step(f"{rec.path} step {record.index}" + ("" if group == "all" else f" ({group})"))
        measurements.extend(_bench_step(rec, data, record.index, group, base, sides, device, l2,
                                        coverage, repeats, warmup, warm_l2))
    return StepPart(measurements, coverage, same_inputs)


def finish_bench(parts: list[StepPart], sides: list[Side], device: torch.device, *, repeats: int, warmup: int,
                 warm_l2: bool, split_routes: bool, expect_routes: list[tuple[str | None, str]] = (),
                 resamples: int = 2000, confidence: float = 0.95, processes: int = 1) -> BenchResult:
    """The BenchResult of every step's part (in (recording, step) order): measurements, summed coverage,
    the ratio and the verdict. ``processes``: how many ranks timed the steps (each on its own device)."""
    measurements = [m for part in parts for m in part.measurements]
    coverage = merge_coverage([part.coverage for part in parts], [s.key for s in sides])
    same_inputs = len(sides) == 2 and sides[0].impl_name == sides[1].impl_name and all(p.same_inputs for p in parts)
    ratio = compute_ratio(measurements, sides, resamples, confidence) if len(sides) == 2 else None
    verdict = judge(sides, coverage, measurements, expect_routes, device, same_inputs=same_inputs)
    verdict.noisy = noisy_sides(measurements, sides)
    l2 = l2_bytes(device)
    settings = {"repeats": repeats, "warmup": warmup, "warm_l2": warm_l2, "split_routes": split_routes,
                "expect_routes": [f"{k}:{r}" if k else r for k, r in expect_routes],
                "l2_policy": l2_policy(measurements, warm_l2, l2), "resamples": resamples,
                "confidence": confidence}
    if processes > 1:
        settings["processes"] = processes  # each timed its share of the steps on its own device
    return BenchResult(env=environment(device), settings=settings, sides=sides, measurements=measurements,
                       coverage=coverage, ratio=ratio, verdict=verdict)


def l2_policy(measurements: list[Measurement], warm_l2: bool, l2: int) -> str:
    """One line: how inputs were (not) kept out of L2."""
    if warm_l2:
        return "warm: one input copy, repeated calls may hit L2 (--warm-l2)"
    copies = sorted({m.rotation for m in measurements}) or [0]
    n = f"{copies[0]}" if copies[0] == copies[-1] else f"{copies[0]}-{copies[-1]}"
    if not l2:
        return f"rotating {n} input copies per step (CPU: no GPU L2)"
    return f"rotating {n} input copies per step (>= 2x the {l2 / 2**20:.0f} MiB L2 where memory allows)"


def compute_ratio(measurements: list[Measurement], sides: list[Side], resamples: int,
                  confidence: float) -> Ratio | None:
    a, b = sides[0].key, sides[1].key
    by_key: dict[tuple, dict[str, Measurement]] = {}
    for m in measurements:
        by_key.setdefault((m.recording, m.step, m.group), {})[m.side] = m
    pairs = [(d[a].times_us, d[b].times_us) for d in by_key.values() if a in d and b in d
             and d[a].times_us and d[b].times_us]
    if not pairs or sum(quantiles(y)[0] for _, y in pairs) <= 0:
        return None
    point, lo, hi = bootstrap_ratio(pairs, resamples, confidence)
    calls = min(min(len(x), len(y)) for x, y in pairs)
    caveat = ""
    if len(pairs) < MIN_CI_STEPS:
        caveat = (f"the CI rests on {len(pairs)} (sub-)step(s) x {calls} timed call(s) per impl: with fewer than "
                  f"{MIN_CI_STEPS} steps the bootstrap cannot see how the ratio varies from step to step"
                  + (" (with one step it is the call-to-call noise of that step only)" if len(pairs) == 1 else
                     " and understates the uncertainty") + "; benchmark more steps")
    clocks = sorted({m.clock for m in measurements})
    uses = "the harness's own time (" + " and ".join(
        {"cuda-events": "CUDA events around each call", "cpu-wall": "wall-clock per call"}.get(c, c) for c in clocks) \
        + "), never self-reported time"
    return Ratio(point=point, lo=lo, hi=hi, confidence=confidence, resamples=resamples, pairs=len(pairs),
                 calls=calls, caveat=caveat, uses=uses)
