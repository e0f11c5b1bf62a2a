"""Coverage: what each impl actually did, counted, and the guard that turns an untested run INCONCLUSIVE.

* kernel launches (:func:`count_kernels`): on CUDA the torch profiler's device (CUPTI) kernel events,
  counted by kernel name; on the CPU the Triton launcher (``JITFunction.run`` / the interpreter's
  ``InterpretedFunction.run``) wrapped and counted (:func:`triton_launches`);
* routes per request and row, and routing violations (:class:`SideCoverage`, filled by
  :mod:`replay_harness.bench.ab`);
* the coverage guard (:func:`judge`): docs/BENCH.md "Coverage guard"; exit 4 in the CLI.
"""
from __future__ import annotations

import warnings
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

STOCHASTIC_ROUTES = ("random-sample", "stochastic-verify")


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
class Verdict:
    """``conclusive``: the path under test ran (the coverage guard found no reason against it); ``noisy``: why
    the timings are too spread out to be a precise result (:func:`replay_harness.bench.timing.noisy_sides`),
    empty when steady. A run is called "conclusive" only when it is both (:attr:`label`)."""

    conclusive: bool
    reasons: list[str]  # why not conclusive (empty when conclusive)
    notes: list[str]
    noisy: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """"inconclusive" (the path under test did not run), "noisy" (it ran; the times are too spread out)
        or "conclusive"."""
        return "inconclusive" if not self.conclusive else "noisy" if self.noisy else "conclusive"

    def to_dict(self) -> dict:
        return {"conclusive": self.conclusive, "reasons": self.reasons, "notes": self.notes,
                "timing": "noisy" if self.noisy else "steady", "noisy": self.noisy, "verdict": self.label}



def merge_coverage(parts: list[dict[str, SideCoverage]], keys: list[str]) -> dict[str, SideCoverage]:
    """Per side, the coverage of consecutive parts (steps, in order) summed into one, as if one SideCoverage
    had gone through them all: kernels become "not observable" (None, with its reason) from the first
    part that could not count them on, and nothing is counted after it."""
    merged = {key: SideCoverage() for key in keys}
    for part in parts:
        for key, cov in part.items():
            into = merged[key]
            into.requests += cov.requests
            into.rows += cov.rows
            into.requests_by_route.update(cov.requests_by_route)
            into.rows_by_route.update(cov.rows_by_route)
            into.violations.update(cov.violations)
            into.notes.extend(cov.notes)
            if into.kernels is None:
                continue
            if cov.kernels is None:
                into.kernels, into.kernel_source = None, cov.kernel_source
                continue
            into.kernels.update(cov.kernels)
            into.kernel_source = cov.kernel_source or into.kernel_source
            if cov.launcher_kernels is not None:
                into.launcher_kernels = (into.launcher_kernels or Counter()) + cov.launcher_kernels
    return merged


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


def _routes_text(cov: SideCoverage) -> str:
    return ", ".join(f"{r} {n}" for r, n in sorted(cov.requests_by_route.items())) or "no requests"


def missed_routes(cov: SideCoverage) -> list[tuple[str, int, str]]:
    """The stochastic routes a side's requests expected but none took: [(route, request-steps that expected
    it, where they went)]. Counted from the routes taken and the routing violations ("expected -> got");
    a request whose route is not reported ("unknown") is not counted either way."""
    out = []
    for route in STOCHASTIC_ROUTES:
        went = {k.split(" -> ")[1]: v for k, v in cov.violations.items()
                if k.startswith(f"{route} -> ") and not k.endswith("-> unknown")}
        if went and cov.requests_by_route.get(route, 0) == 0:
            out.append((route, sum(went.values()), ", ".join(f"{g} {n}" for g, n in sorted(went.items()))))
    return out


def judge(sides: list, coverage: dict[str, SideCoverage], measurements: list,
          expect_routes: Iterable[tuple[str | None, str]], device: torch.device,
          same_inputs: bool = False) -> Verdict:
    """The coverage guard. INCONCLUSIVE (reasons non-empty) when any of:

    1. no --expect-route given, and no request of the benchmark went down a stochastic route
       (random-sample / stochastic-verify) in any side: the sampling path never ran; or, per route, a
       side whose requests expected a stochastic route (T > 0 with drafts: stochastic-verify; T > 0
       without: random-sample) took it for none of them (:func:`missed_routes`: e.g. greedy-only on a
       temperature-1 recording with drafts, whose plain requests did sample);
    2. an --expect-route ROUTE (``A:ROUTE`` / ``B:ROUTE`` for one side) was taken by no request of a side
       it applies to;
    3. a side refused every request (it timed kernels with nothing to do);
    4. on CUDA, a side whose kernels were counted launched none;
    5. A and B are the same impl with the same parameters (an A/A run: the ratio is noise by construction),
       also when their overrides differ only on paper (``same_inputs``: every overridden step identical,
       e.g. ``--vs-temperature 1`` on a recording whose requests are all at temperature 1);
    6. nothing was measured (no steps).

    ``sides`` are :class:`replay_harness.bench.ab.Side`, ``measurements`` its ``Measurement`` (only
    ``clock``, ``timed``, ``device_busy``, ``side`` and ``label`` are read).
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
    elif measurements and any(coverage[s.key].requests_by_route.get(r, 0) for s in sides for r in STOCHASTIC_ROUTES):
        for s in sides:
            for route, expected, went in missed_routes(coverage[s.key]):
                reasons.append(f"{s.label}: {expected} request-step(s) expected the {route} route (temperature > 0"
                               f"{' with drafts' if route == 'stochastic-verify' else ', no drafts'}) and none "
                               f"took it ({went}): the {route} path never ran for them, so its timing is of other "
                               f"code. Name the path under test with --expect-route, or --drop-drafts to time plain "
                               f"samples")
    elif measurements:
        who = " and ".join(f"{s.label} ({_routes_text(coverage[s.key])})" for s in sides)
        reasons.append("no request went down a stochastic route (random-sample or stochastic-verify) in "
                       f"{who}: the sampling path never ran, so equal timings would not mean 'no difference'. "
                       "Benchmark recordings with temperature > 0 requests, use --temperature / --drop-drafts, "
                       "or name the path under test with --expect-route")
    for s in sides:
        cov = coverage[s.key]
        if cov.requests and cov.requests_by_route.get("refused", 0) == cov.requests:
            drafted = cov.rows_by_route.get("refused", 0) > cov.requests  # some refused request had drafts
            reasons.append(f"{s.label} refused every request ({cov.requests}): it launched kernels with nothing "
                           "to do" + ("; the refused requests carry drafts: add --drop-drafts to time plain "
                                      "samples" if drafted else ""))
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
    behind: dict[tuple[str, str], float] = {}  # per side: the smallest fraction of its calls enqueued ahead
    for m in measurements:
        if m.device_busy is not None:
            behind[m.side, m.label] = min(behind.get((m.side, m.label), 1.0), m.device_busy)
    for (_, label), ahead in behind.items():
        if ahead < 0.5:
            notes.append(f"{label}: the host enqueued only {ahead:.0%} of its calls ahead of the device on some step "
                         "(a host sync inside the call, or a launch slower than the sleep before it): host time is "
                         "part of its timings")
    return Verdict(conclusive=not reasons, reasons=reasons, notes=notes)
