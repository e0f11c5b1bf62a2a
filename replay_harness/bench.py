"""`replay bench`: A/B timing of sampler impls on recorded steps, with proof that the code under test ran.

No printing here (bench_report.py renders, bench_cli.py is the command). docs/BENCH.md is the user guide.

Per step of every recording (optionally split into one sub-step per expected route), for each side
(A = ``--impl``, B = ``--vs``, each with its own parameter overrides):

1. **coverage pass** (untimed, also the JIT warm-up): ``impl.sample(step)`` gives the routes, counts and
   ``self_reported_us``; one more call of exactly what is timed runs under a kernel counter: on CUDA the
   torch profiler's device (CUPTI) kernel events, counted by kernel name; on the CPU the Triton
   launcher (``JITFunction.run`` / the interpreter's ``InterpretedFunction.run``) wrapped and counted.
   External impls (``exec:``) run in another process: "not observable".
2. **timing**: ``launch(state)`` when the impl has ``prepare``/``launch`` (device work only; states are
   prepared from ROTATING copies of the step's logits, enough copies to exceed twice the L2 cache so
   repeated runs do not read warm L2, or one copy with ``warm_l2``), else ``sample(step)``. ``warmup``
   untimed calls, then ``repeats`` timed calls per side, A and B interleaved call by call (the order
   alternates every round). On CUDA each call sits between two CUDA events, and a ``torch.cuda._sleep``
   kernel queued first keeps the device busy while the host enqueues every call, so the events measure
   device time rather than Python launch overhead (``device_busy`` reports how full the queue stayed).
   On the CPU (and for ``cpu_only`` impls timed through ``sample``): ``time.perf_counter`` wall-clock.

The **coverage guard** (:func:`judge`) turns a run whose path under test never executed into an
INCONCLUSIVE verdict (exit 4 in the CLI), see docs/BENCH.md "Coverage guard".
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import os
import platform
import time
import warnings
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch

from .overrides import Overrides, apply_overrides
from .step import ROUTES, Step

STOCHASTIC_ROUTES = ("random-sample", "stochastic-verify")
MAX_ROTATION = 256
ROTATION_CAP_BYTES = 4 << 30
DEFAULT_L2_BYTES = 50 << 20  # used when torch does not report the L2 size
SLEEP_CLOCK_HZ = 2.0e9  # cycles per second assumed for torch.cuda._sleep (too long a sleep is harmless)
MAX_SLEEP_S = 0.5
MIN_CI_STEPS = 5  # fewer (sub-)steps than this: the ratio's CI comes with a caveat


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------


@dataclass
class Side:
    """One impl under test with its parameter overrides. key: "A" (--impl) or "B" (--vs)."""

    key: str
    impl_name: str
    impl: Any
    overrides: Overrides = field(default_factory=Overrides)

    @property
    def label(self) -> str:
        ov = self.overrides.label()
        return f"{self.impl_name}[{ov}]" if ov else self.impl_name

    @property
    def external(self) -> bool:
        return self.impl_name.startswith("exec:") or bool(getattr(self.impl, "external", False))

    @property
    def timed_call(self) -> str:
        """'launch' (device work of a prepared state) or 'sample' (the whole sample(step) call)."""
        return "launch" if callable(getattr(self.impl, "prepare", None)) and \
            callable(getattr(self.impl, "launch", None)) else "sample"

    def runs_on(self, device: torch.device) -> torch.device:
        """Where its steps go: cpu_only impls timed through sample() get CPU tensors (as in `replay run`)."""
        if self.timed_call == "sample" and getattr(self.impl, "cpu_only", False):
            return torch.device("cpu")
        return device


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
        return float(np.median(self.times_us))

    @property
    def p20_us(self) -> float:
        return float(np.percentile(self.times_us, 20))

    @property
    def p80_us(self) -> float:
        return float(np.percentile(self.times_us, 80))

    @property
    def gbps(self) -> float | None:
        return self.bytes / (self.median_us * 1e-6) / 1e9 if self.median_us > 0 and self.bytes else None

    @property
    def us_per_token(self) -> float | None:
        return self.median_us / self.tokens if self.tokens else None


@dataclass
class SideCoverage:
    """What one side actually did over the whole benchmark (counted, not inferred)."""

    requests: int = 0
    rows: int = 0
    requests_by_route: Counter = field(default_factory=Counter)
    rows_by_route: Counter = field(default_factory=Counter)
    violations: Counter = field(default_factory=Counter)  # "expected -> got" -> request-steps
    kernels: Counter | None = field(default_factory=Counter)  # None: not observable
    kernel_source: str = ""
    launcher_kernels: Counter | None = None  # host-side Triton launch counts (cross-check on CUDA)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"requests": self.requests, "rows": self.rows, "requests_by_route": dict(self.requests_by_route),
                "rows_by_route": dict(self.rows_by_route), "violations": dict(self.violations),
                "kernels": None if self.kernels is None else dict(self.kernels),
                "kernel_launches": None if self.kernels is None else sum(self.kernels.values()),
                "kernel_source": self.kernel_source,
                "launcher_kernels": None if self.launcher_kernels is None else dict(self.launcher_kernels),
                "notes": sorted(set(self.notes))}


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
class Verdict:
    conclusive: bool
    reasons: list[str]  # why not conclusive (empty when conclusive)
    notes: list[str]

    def to_dict(self) -> dict:
        return {"conclusive": self.conclusive, "reasons": self.reasons, "notes": self.notes}


@dataclass
class BenchResult:
    env: dict
    settings: dict
    sides: list[Side]
    measurements: list[Measurement]
    coverage: dict[str, SideCoverage]
    ratio: Ratio | None
    verdict: Verdict


# ---------------------------------------------------------------------------
# environment, bytes, rotation
# ---------------------------------------------------------------------------


def environment(device: torch.device) -> dict:
    import triton

    env = {"device": device.type, "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(),
           "triton_interpret": os.environ.get("TRITON_INTERPRET", "") == "1",
           "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["l2_bytes"] = l2_bytes(device)
        env["clock"] = "cuda-events"
    else:
        env["gpu"] = "cpu"
        env["l2_bytes"] = None
        env["clock"] = "cpu-wall"
    return env


def l2_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or DEFAULT_L2_BYTES)


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


def rotation_count(nbytes: int, l2: int, warm_l2: bool, cap_bytes: int = ROTATION_CAP_BYTES,
                   max_copies: int = MAX_ROTATION) -> int:
    """Copies of the inputs to rotate through: enough that they exceed 2 x L2 (at least 2), within caps.

    warm_l2: 1 (the same buffers every call; repeated calls read a warm L2).
    """
    if warm_l2:
        return 1
    n = max(2, math.ceil(2 * l2 / max(nbytes, 1)))
    return max(1, min(n, max_copies, cap_bytes // max(nbytes, 1)))


def _copy_inputs(step: Step) -> Step:
    return dataclasses.replace(step, logits=step.logits.clone(),
                               draft_logits=None if step.draft_logits is None else step.draft_logits.clone())


# ---------------------------------------------------------------------------
# kernel counting
# ---------------------------------------------------------------------------


def _launcher_classes() -> list[type]:
    """Triton classes whose ``run`` launches a kernel: JITFunction (compiled) and InterpretedFunction
    (TRITON_INTERPRET=1). Both are reached through ``KernelInterface.__getitem__`` -> ``self.run``
    in triton 3.x (seen in 3.6 and 3.9)."""
    out = []
    try:
        from triton.runtime.jit import JITFunction
        out.append(JITFunction)
    except ImportError:
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction
        out.append(InterpretedFunction)
    except ImportError:
        pass
    return [c for c in out if "run" in c.__dict__]


@contextmanager
def triton_launches():
    """Count Triton kernel launches by kernel name while inside; yields a Counter, or None if the
    launcher could not be wrapped (then launches are "not observable")."""
    classes = _launcher_classes()
    if not classes:
        yield None
        return
    counts: Counter = Counter()
    originals = []
    for cls in classes:
        orig = cls.__dict__["run"]

        def run(self, *args, _orig=orig, **kwargs):
            if not kwargs.get("warmup", False):
                fn = getattr(self, "fn", None)
                counts[getattr(fn, "__name__", None) or getattr(self, "__name__", "?")] += 1
            return _orig(self, *args, **kwargs)

        originals.append((cls, orig))
        cls.run = run
    try:
        yield counts
    finally:
        for cls, orig in originals:
            cls.run = orig


def short_kernel_name(name: str) -> str:
    """'void at::native::(anonymous namespace)::foo<4, Bar>(...)' -> 'foo'; Triton names stay as they are."""
    name = name.removeprefix("void ").replace("(anonymous namespace)", "anon")
    for sep in ("<", "("):
        name = name.split(sep, 1)[0]
    return name.rsplit("::", 1)[-1].strip() or "?"


def count_kernels(fn: Callable[[], Any], device: torch.device) -> tuple[Counter | None, str, Counter | None]:
    """Run ``fn`` once and count what it launched: (kernels, source, Triton launcher counts).

    CUDA: device kernel events of the torch profiler (CUPTI), by short name (includes torch kernels such as
    the output fill); falls back to the Triton launcher counts if the profiler records nothing.
    CPU: the Triton launcher counts (torch ops on the CPU are not counted).
    """
    if device.type != "cuda":
        with triton_launches() as launches:
            fn()
        if launches is None:
            return None, "not observable (could not wrap Triton's launcher)", None
        return launches, "Triton launcher (CPU, interpreter); torch ops not counted", None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    kernels: Counter | None = None  # None: the profiler failed
    why = ""
    with triton_launches() as launches:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Profiler clears events at the end of each cycle"
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    fn()
                    torch.cuda.synchronize()
                events = prof.events()
            kernels = Counter(short_kernel_name(e.name) for e in events if e.device_type == DeviceType.CUDA)
        except Exception as e:  # noqa: BLE001 - CUPTI can be unavailable; say so and fall back
            why = f"{type(e).__name__}: {e}"
            fn()
            torch.cuda.synchronize()
    return pick_kernel_counts(kernels, launches, why)


def pick_kernel_counts(profiled: Counter | None, launches: Counter | None,
                       why: str = "") -> tuple[Counter | None, str, Counter | None]:
    """Which count to trust on CUDA: the profiler's device kernels when it saw some; the Triton launcher's
    counts when the profiler failed (``profiled`` None) or saw nothing while Triton launched (CUPTI
    silently off); an EMPTY profiler count when the profiler ran and neither saw a launch, so the guard's
    "launched no kernel" rule fires (an empty Counter must not fall through to "host side" counts)."""
    if profiled:
        return profiled, "CUDA profiler (CUPTI) device kernel events", launches
    if launches:
        return launches, "Triton launcher (host side; the CUDA profiler recorded no kernel" + \
            (f": {why})" if why else ")"), launches
    if profiled is not None:
        return Counter(), "CUDA profiler (CUPTI) device kernel events (none recorded; no Triton launch either)", \
            launches
    if launches is not None:
        return launches, f"Triton launcher (host side; the CUDA profiler failed: {why})", launches
    return None, "not observable" + (f" ({why})" if why else ""), None


# ---------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------


def _callables(side: Side, step: Step, copies: int) -> tuple[list[Callable[[], Any]], list]:
    """``copies`` zero-argument calls of what is timed (each on its own copy of the inputs), and a list
    that ``sample`` calls append their results' self_reported_us to.

    Every copy is a fresh clone, never ``step``'s own tensors: A's and B's steps often share the recorded
    logits (overrides change parameters only), so a shared copy would let the second side of a round read
    what the first just pulled into L2.
    """
    reported: list = []
    steps = [_copy_inputs(step) for _ in range(copies)]
    if side.timed_call == "launch":
        states = [side.impl.prepare(s) for s in steps]
        return [(lambda st=st: side.impl.launch(st)) for st in states], reported

    def call(s):
        res = side.impl.sample(s)
        reported.append(getattr(res, "self_reported_us", None))
        return res

    return [(lambda s=s: call(s)) for s in steps], reported


def _rotating(fns: list[Callable[[], Any]]) -> Callable[[], Any]:
    """One call that runs the next copy's callable each time (copy 0, 1, ..., wrapping): untimed and
    timed calls share one cursor, so a timed call never re-reads the copy a warm-up call just read."""
    cursor = [0]

    def call():
        fn = fns[cursor[0] % len(fns)]
        cursor[0] += 1
        return fn()

    return call


def flush_l2(device: torch.device, nbytes: int) -> None:
    """Evict the L2 cache by writing ``nbytes`` (2 x L2) of scratch; no-op off CUDA or for nbytes <= 0.

    Cloning the rotating copies writes them, so without this the copies made last (all of them when
    they fit in L2 together, as for one-row steps at the 256-copy cap) would start the timing warm.
    """
    if device.type != "cuda" or nbytes <= 0:
        return
    torch.empty(int(nbytes), dtype=torch.uint8, device=device).zero_()


def time_calls(calls: dict[str, list[Callable[[], Any]]], clocks: dict[str, str], repeats: int,
               warmup: int, flush: Callable[[], None] | None = None
               ) -> tuple[dict[str, list[float]], dict[str, float | None]]:
    """Time every side's calls, interleaved: round i calls each side once (order alternating); every call
    (warm-up or timed) moves that side to its next input copy. ``flush`` (evict L2) runs after the
    untimed calls, before the timed ones. Returns (µs per call per side, device-busy fraction or None)."""
    keys = list(calls)
    calls = {k: [_rotating(v)] for k, v in calls.items()}
    for key in keys:
        for i in range(warmup):
            calls[key][0]()
    times: dict[str, list[float]] = {k: [] for k in keys}
    busy: dict[str, float | None] = {k: None for k in keys}
    ev_keys = [k for k in keys if clocks[k] == "cuda-events"]
    wall_keys = [k for k in keys if clocks[k] != "cuda-events"]
    if ev_keys:
        times_ev, busy_ev = _time_cuda({k: calls[k] for k in ev_keys}, repeats, flush)
        times.update(times_ev)
        busy.update(busy_ev)
    if wall_keys:
        cuda_sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        if flush is not None and not ev_keys:
            flush()
        for rep in range(repeats):
            for key in (wall_keys if rep % 2 == 0 else wall_keys[::-1]):
                fn = calls[key][0]
                cuda_sync()
                t0 = time.perf_counter()
                fn()
                cuda_sync()
                times[key].append((time.perf_counter() - t0) * 1e6)
    return times, busy


def _time_cuda(calls: dict[str, list[Callable[[], Any]]], repeats: int, flush: Callable[[], None] | None = None):
    """CUDA events around each call; a sleep kernel first so the host enqueues ahead of the device."""
    keys = list(calls)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for key in keys:
        calls[key][0]()
    host_round = time.perf_counter() - t0  # host enqueue time of one round (the device may still run)
    if flush is not None:
        flush()
    torch.cuda.synchronize()
    sleep_s = min(MAX_SLEEP_S, 1.5 * host_round * repeats + 1e-3)
    events = {k: [] for k in keys}
    sleeper = getattr(torch.cuda, "_sleep", None)
    if sleeper is not None:
        sleeper(int(sleep_s * SLEEP_CLOCK_HZ))
    for rep in range(repeats):
        for key in (keys if rep % 2 == 0 else keys[::-1]):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            calls[key][0]()
            end.record()
            events[key].append((start, end))
    torch.cuda.synchronize()
    times = {k: [s.elapsed_time(e) * 1e3 for s, e in events[k]] for k in keys}
    firsts = [ev[0][0] for ev in events.values() if ev]
    lasts = [ev[-1][1] for ev in events.values() if ev]
    span = max(firsts[0].elapsed_time(e) for e in lasts) * 1e3 if firsts else 0.0
    total = sum(sum(v) for v in times.values())
    frac = min(1.0, total / span) if span > 0 else None
    return times, {k: frac for k in keys}


# ---------------------------------------------------------------------------
# the benchmark
# ---------------------------------------------------------------------------


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
    """Coverage pass + interleaved timing of every side on every step; then the ratio and the verdict."""
    env = environment(device)
    l2 = l2_bytes(device)
    coverage = {s.key: SideCoverage() for s in sides}
    measurements: list[Measurement] = []
    same_inputs = len(sides) == 2 and sides[0].impl_name == sides[1].impl_name  # stays True for an A/A run
    for rec in recordings:
        data = _data_label(rec)
        for s in sides:
            if hasattr(s.impl, "begin_recording"):
                s.impl.begin_recording(str(rec.path))
        for record in rec:
            if same_inputs:
                same_inputs = same_step(apply_overrides(record.step, sides[0].overrides),
                                        apply_overrides(record.step, sides[1].overrides))
            groups = split_by_route(record.step) if split_routes else [("all", record.step)]
            for group, base in groups:
                if on_step:
                    on_step(f"{rec.path} step {record.index}" + ("" if group == "all" else f" ({group})"))
                measurements.extend(_bench_step(rec, data, record.index, group, base, sides, device, l2,
                                                coverage, repeats, warmup, warm_l2))
    ratio = compute_ratio(measurements, sides, resamples, confidence) if len(sides) == 2 else None
    verdict = judge(sides, coverage, measurements, expect_routes, device, same_inputs=same_inputs)
    settings = {"repeats": repeats, "warmup": warmup, "warm_l2": warm_l2, "split_routes": split_routes,
                "expect_routes": [f"{k}:{r}" if k else r for k, r in expect_routes],
                "l2_policy": l2_policy(measurements, warm_l2, l2), "resamples": resamples,
                "confidence": confidence}
    return BenchResult(env=env, settings=settings, sides=sides, measurements=measurements, coverage=coverage,
                       ratio=ratio, verdict=verdict)


def l2_policy(measurements: list[Measurement], warm_l2: bool, l2: int) -> str:
    """One line: how inputs were (not) kept out of L2."""
    if warm_l2:
        return "warm: one input copy, repeated calls may hit L2 (--warm-l2)"
    copies = sorted({m.rotation for m in measurements}) or [0]
    n = f"{copies[0]}" if copies[0] == copies[-1] else f"{copies[0]}-{copies[-1]}"
    if not l2:
        return f"rotating {n} input copies per step (CPU: no GPU L2)"
    return f"rotating {n} input copies per step (>= 2x the {l2 / 2**20:.0f} MiB L2 where memory allows)"


def _coverage_call(s: Side, st: Step, device: torch.device, cov: SideCoverage):
    """One untimed call of what is timed, under the kernel counter; returns its SampleResult.

    launch-timed impls: prepare + launch once; the result is built from the state's routes (our Triton
    impls keep them there) or, without them, from a separate ``sample`` call.
    """
    from .step import SampleResult

    holder: dict = {}
    if s.timed_call == "launch":
        with torch.inference_mode():
            holder["state"] = s.impl.prepare(st)  # host work and copies: not part of what is timed or counted

        def once():
            holder["out"] = s.impl.launch(holder["state"])
    else:
        def once():
            holder["result"] = s.impl.sample(st)
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
        state = holder["state"]
        if isinstance(getattr(state, "routes", None), torch.Tensor):
            tokens, counts = holder["out"]
            return SampleResult(tokens=tokens.cpu(), counts=counts.cpu(), routes=state.routes.clone().cpu(),
                                notes=list(getattr(state, "notes", []) or []))
        return s.impl.sample(st)


def _bench_step(rec, data: str, index: int, group: str, base: Step, sides: list[Side], device: torch.device,
                l2: int, coverage: dict[str, SideCoverage], repeats: int, warmup: int,
                warm_l2: bool) -> list[Measurement]:
    steps = {s.key: apply_overrides(base, s.overrides).to(s.runs_on(device)) for s in sides}
    infos = {}
    for s in sides:
        st = steps[s.key]
        result = _coverage_call(s, st, device, coverage[s.key])
        routes = result.route_names()
        cov = coverage[s.key]
        ks = st.num_drafts.tolist()
        for route, k, want in zip(routes, ks, st.expected_routes()):
            cov.requests += 1
            cov.rows += k + 1
            cov.requests_by_route[route] += 1
            cov.rows_by_route[route] += k + 1
            if route != want:
                cov.violations[f"{want} -> {route}"] += 1
        cov.notes.extend(result.notes)
        infos[s.key] = (routes, int(result.counts.sum()))
    copies = rotation_count(max(step_bytes(st) for st in steps.values()), l2, warm_l2)
    calls, reported, clocks = {}, {}, {}
    for s in sides:
        dev = s.runs_on(device)
        calls[s.key], reported[s.key] = _callables(s, steps[s.key], copies)
        clocks[s.key] = "cuda-events" if dev.type == "cuda" and s.timed_call == "launch" else "cpu-wall"
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
            self_reported_us=float(np.median(rep)) if rep else None))
    del calls
    return out


# ---------------------------------------------------------------------------
# ratio and verdict
# ---------------------------------------------------------------------------


def bootstrap_ratio(pairs: list[tuple[list[float], list[float]]], resamples: int = 2000, confidence: float = 0.95,
                    seed: int = 0) -> tuple[float, float, float]:
    """(point, lo, hi) of sum_i median(a_i) / sum_i median(b_i).

    Percentile bootstrap: each resample draws the steps with replacement (paired: the same steps for A and
    B) and, within each drawn step, A's and B's timed calls with replacement.
    """
    a_med = np.array([np.median(a) for a, _ in pairs])
    b_med = np.array([np.median(b) for _, b in pairs])
    point = float(a_med.sum() / b_med.sum())
    rng = np.random.default_rng(seed)
    s = len(pairs)
    ma = np.stack([np.median(rng.choice(np.asarray(a), size=(resamples, len(a))), axis=1) for a, _ in pairs])
    mb = np.stack([np.median(rng.choice(np.asarray(b), size=(resamples, len(b))), axis=1) for _, b in pairs])
    pick = rng.integers(0, s, size=(resamples, s))
    cols = np.arange(resamples)[:, None]
    boot = ma[pick, cols].sum(axis=1) / mb[pick, cols].sum(axis=1)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return point, float(lo), float(hi)


def compute_ratio(measurements: list[Measurement], sides: list[Side], resamples: int,
                  confidence: float) -> Ratio | None:
    a, b = sides[0].key, sides[1].key
    by_key: dict[tuple, dict[str, Measurement]] = {}
    for m in measurements:
        by_key.setdefault((m.recording, m.step, m.group), {})[m.side] = m
    pairs = [(d[a].times_us, d[b].times_us) for d in by_key.values() if a in d and b in d
             and d[a].times_us and d[b].times_us]
    if not pairs or sum(np.median(y) for _, y in pairs) <= 0:
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


def _routes_text(cov: SideCoverage) -> str:
    return ", ".join(f"{r} {n}" for r, n in sorted(cov.requests_by_route.items())) or "no requests"


def judge(sides: list[Side], coverage: dict[str, SideCoverage], measurements: list[Measurement],
          expect_routes: Iterable[tuple[str | None, str]], device: torch.device,
          same_inputs: bool = False) -> Verdict:
    """The coverage guard. INCONCLUSIVE (reasons non-empty) when any of:

    1. no --expect-route given, and no request of the benchmark went down a stochastic route
       (random-sample / stochastic-verify) in any side: the sampling path never ran;
    2. an --expect-route ROUTE (``A:ROUTE`` / ``B:ROUTE`` for one side) was taken by no request of a side
       it applies to;
    3. a side refused every request (it timed kernels with nothing to do);
    4. on CUDA, a side whose kernels were counted launched none;
    5. A and B are the same impl with the same parameters (an A/A run: the ratio is noise by construction),
       also when their overrides differ only on paper (``same_inputs``: every overridden step identical,
       e.g. ``--vs-temperature 1`` on a recording whose requests are all at temperature 1);
    6. nothing was measured (no steps).
    """
    reasons, notes = [], []
    labels = {s.key: s.label for s in sides}
    if not measurements:
        reasons.append("no steps were measured (empty recordings?)")
    expect_routes = list(expect_routes)
    if expect_routes:
        for key, route in expect_routes:
            for s in sides:
                if key in (None, s.key) and coverage[s.key].requests_by_route.get(route, 0) == 0:
                    reasons.append(f"--expect-route {route}: {s.label} sent no request down {route} "
                                   f"(its routes: {_routes_text(coverage[s.key])})")
    elif measurements and not any(coverage[s.key].requests_by_route.get(r, 0) for s in sides
                                  for r in STOCHASTIC_ROUTES):
        who = " and ".join(f"{s.label} ({_routes_text(coverage[s.key])})" for s in sides)
        reasons.append("no request went down a stochastic route (random-sample or stochastic-verify) in "
                       f"{who}: the sampling path never ran, so equal timings would not mean 'no difference'. "
                       "Benchmark recordings with temperature > 0 requests, use --temperature / --drop-drafts, "
                       "or name the path under test with --expect-route")
    for s in sides:
        cov = coverage[s.key]
        if cov.requests and cov.requests_by_route.get("refused", 0) == cov.requests:
            reasons.append(f"{s.label} refused every request ({cov.requests}): it launched kernels with nothing "
                           "to do" + ("; it takes plain samples only: add --drop-drafts"
                                      if s.impl_name in ("gumbel-max", "serial-scan") else ""))
        if device.type == "cuda" and cov.kernels is not None and "CUPTI" in cov.kernel_source \
                and sum(cov.kernels.values()) == 0 and s.runs_on(device).type == "cuda":
            reasons.append(f"{s.label} launched no kernel on the GPU")
        if cov.kernels is None:
            notes.append(f"{s.label}: kernels {cov.kernel_source}")
        if cov.violations:
            notes.append(f"{s.label}: routing violations " + ", ".join(
                f"{k} x{v}" for k, v in sorted(cov.violations.items())) + " (reported, not an error in bench)")
    if len(sides) == 2:
        a, b = sides
        if a.impl_name == b.impl_name and a.overrides == b.overrides:
            reasons.append(f"A and B are the same impl ({a.label}) with the same parameters: the ratio measures "
                           "noise only")
        elif a.impl_name == b.impl_name and same_inputs:
            reasons.append(f"A and B are the same impl ({a.impl_name}) and their overrides ({a.label} vs "
                           f"{b.label}) give both the same steps (every parameter equal): the ratio measures noise only")
        ka, kb = coverage[a.key].kernels, coverage[b.key].kernels
        if ka is not None and kb is not None and ka and ka == kb:
            notes.append(f"{labels['A']} and {labels['B']} launched the same kernels the same number of times; "
                         "they differ only inside those kernels (parameters, branches) — see the routes")
        clocks = {m.clock for m in measurements}
        if len(clocks) > 1:
            notes.append("A and B were timed with different clocks (" + ", ".join(sorted(clocks)) +
                         "): the ratio compares unlike times")
    if any(m.clock == "cpu-wall" and m.timed == "launch" for m in measurements) and device.type != "cuda":
        notes.append("CPU timing: Triton kernels ran under the interpreter (TRITON_INTERPRET=1); the times are "
                     "not representative of a GPU")
    busy = [m.device_busy for m in measurements if m.device_busy is not None]
    if busy and min(busy) < 0.5:
        notes.append(f"the device queue ran dry (busy fraction down to {min(busy):.2f}): host launch overhead "
                     "is part of some timings")
    return Verdict(conclusive=not reasons, reasons=reasons, notes=notes)
