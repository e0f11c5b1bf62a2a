"""Clocks and the L2 policy: every timing in `replay bench` and tools/bench_kernels.py goes through here.

Two ways of timing a zero-argument callable ``fn`` (device work only, no host sync inside):

* **interleaved** (:func:`time_calls`, `replay bench`): several sides' calls, each on ROTATING copies of
  its inputs (enough copies to exceed 2 x L2, :func:`rotation_count`), round by round in alternating
  order; on CUDA one pair of CUDA events per call, each call behind its own ``torch.cuda._sleep`` kernel that
  keeps the device busy while the host enqueues it (so the events measure device time, not launch overhead,
  even after a side that synced the host), the L2
  evicted (:func:`flush_l2`) between warm-up and timing; elsewhere ``time.perf_counter`` wall-clock.
* **per mode** (the kernel benchmark): ``eager-cold`` (:func:`time_cold`: triton ``do_bench``, which
  flushes L2 before every call), ``eager-warm`` (:func:`time_warm`: back-to-back calls, CUDA events),
  ``graph`` (:func:`time_graph`: G launches captured in one CUDA graph, replays timed, divided by G; ``cold``:
  the L2 evicted before each launch, tools/ab_kernels.py ``--cold``).

Statistics: :func:`quantiles` (median, p20, p80 of µs values), :func:`bootstrap_ratio` (A/B ratio CI),
:func:`noisy_sides` (timings too spread out to be a result: docs/BENCH.md, "Noisy timings").
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np
import torch

MAX_ROTATION = 256
ROTATION_CAP_BYTES = 4 << 30
DEFAULT_L2_BYTES = 50 << 20  # used when torch does not report the L2 size
SLEEP_CLOCK_HZ = 2.0e9  # cycles per second assumed for torch.cuda._sleep (too long a sleep is harmless)
MAX_SLEEP_S = 0.5
NOISY_SPREAD = 0.5  # a side whose typical within-step spread (p80 - p20) exceeds this fraction of its median

Call = Callable[[], Any]


# -- statistics --------------------------------------------------------------------------------------------


def quantiles(xs: list[float]) -> tuple[float, float, float]:
    """(median, p20, p80) of ``xs`` (linear interpolation, as numpy and torch.quantile)."""
    med, p20, p80 = np.percentile(np.asarray(xs, dtype=np.float64), [50, 20, 80])
    return float(med), float(p20), float(p80)


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


# -- the L2 policy -----------------------------------------------------------------------------------------


def noisy_sides(measurements: list, sides: list) -> list[str]:
    """One line per side whose timings are too spread out to be a result: over its (sub-)steps timed at least
    twice, the median of (p80 - p20) / median exceeds :data:`NOISY_SPREAD` (a busy machine, a CPU under the
    Triton interpreter, calls that vary); [] when every side is steady. ``measurements``: the bench's
    ``Measurement`` (``side``, ``times_us``); ``sides``: its ``Side`` (``key``, ``label``)."""
    lines = []
    for side in sides:
        spreads = []
        for m in measurements:
            if m.side == side.key and len(m.times_us) >= 2:
                med, p20, p80 = quantiles(m.times_us)
                if med > 0:
                    spreads.append((p80 - p20) / med)
        if spreads and float(np.median(spreads)) > NOISY_SPREAD:
            lines.append(f"{side.label}: the timed calls of a step spread over {float(np.median(spreads)):.2g}x their "
                         f"median (p80 - p20, typical of {len(spreads)} step(s); steady is below {NOISY_SPREAD:g}x): "
                         "the times are not a precise result (a busy machine or the CPU); rerun on a quiet GPU or "
                         "with more --repeats")
    return lines


def l2_bytes(device: torch.device) -> int:
    """The device's L2 size in bytes; 0 off CUDA."""
    if device.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or DEFAULT_L2_BYTES)


def rotation_count(nbytes: int, l2: int, warm_l2: bool, cap_bytes: int = ROTATION_CAP_BYTES,
                   max_copies: int = MAX_ROTATION) -> int:
    """Copies of the inputs to rotate through: enough that they exceed 2 x L2 (at least 2), within caps.

    warm_l2: 1 (the same buffers every call; repeated calls read a warm L2).
    """
    if warm_l2:
        return 1
    n = max(2, math.ceil(2 * l2 / max(nbytes, 1)))
    return max(1, min(n, max_copies, cap_bytes // max(nbytes, 1)))


def flush_l2(device: torch.device, nbytes: int) -> None:
    """Evict the L2 cache by writing ``nbytes`` (2 x L2) of scratch; no-op off CUDA or for nbytes <= 0.

    Cloning the rotating copies writes them, so without this the copies made last (all of them when
    they fit in L2 together, as for one-row steps at the 256-copy cap) would start the timing warm.
    """
    if device.type != "cuda" or nbytes <= 0:
        return
    torch.empty(int(nbytes), dtype=torch.uint8, device=device).zero_()


def rotating(fns: list[Call]) -> Call:
    """One call that runs the next copy's callable each time (copy 0, 1, ..., wrapping): untimed and
    timed calls share one cursor, so a timed call never re-reads the copy a warm-up call just read."""
    cursor = [0]

    def call():
        fn = fns[cursor[0] % len(fns)]
        cursor[0] += 1
        return fn()

    return call


# -- interleaved timing (replay bench) ---------------------------------------------------------------------


def _event_pair() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def time_calls(calls: dict[str, list[Call]], clocks: dict[str, str], repeats: int, warmup: int,
               flush: Callable[[], None] | None = None) -> tuple[dict[str, list[float]], dict[str, float | None]]:
    """Time every side's calls, interleaved: round i calls each side once (order alternating); every call
    (warm-up or timed) moves that side to its next input copy. ``clocks[key]``: "cuda-events" or
    "cpu-wall". ``flush`` (evict L2) runs after the untimed calls, before the timed ones.
    Returns (µs per call per side, device-busy fraction or None per side)."""
    keys = list(calls)
    run = {k: rotating(v) for k, v in calls.items()}
    for key in keys:
        for _ in range(warmup):
            run[key]()
    times: dict[str, list[float]] = {k: [] for k in keys}
    busy: dict[str, float | None] = {k: None for k in keys}
    ev_keys = [k for k in keys if clocks[k] == "cuda-events"]
    wall_keys = [k for k in keys if clocks[k] != "cuda-events"]
    if ev_keys:
        times_ev, busy_ev = _time_cuda({k: run[k] for k in ev_keys}, repeats, flush)
        times.update(times_ev)
        busy.update(busy_ev)
    if wall_keys:
        cuda_sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        if flush is not None and not ev_keys:
            flush()
        for rep in range(repeats):
            for key in (wall_keys if rep % 2 == 0 else wall_keys[::-1]):
                cuda_sync()
                t0 = time.perf_counter()
                run[key]()
                cuda_sync()
                times[key].append((time.perf_counter() - t0) * 1e6)
    return times, busy


def _time_cuda(run: dict[str, Call], repeats: int, flush: Callable[[], None] | None = None):
    """CUDA events around each call, each behind its own sleep kernel, so the events measure device time.

    Every call is preceded by a ``torch.cuda._sleep`` of twice the host time that side's call took in the
    warm round (plus 20 µs): the device is then busy while the host enqueues the call, whatever the call
    before it did. One sleep for the whole round is not enough: a side whose call syncs the host (a peer's
    ``.item()``) drains the device, and the next side's launches would then be timed at the host's pace."""
    keys = list(run)
    torch.cuda.synchronize()
    host_s = {}
    for key in keys:  # one untimed round: each side's host time a call (the device may still run)
        t0 = time.perf_counter()
        run[key]()
        host_s[key] = time.perf_counter() - t0
    if flush is not None:
        flush()
    torch.cuda.synchronize()
    events: dict[str, list] = {k: [] for k in keys}
    sleeper = getattr(torch.cuda, "_sleep", None)  # a private torch helper: absent in some builds
    ahead: dict[str, list[bool]] = {k: [] for k in keys}
    for rep in range(repeats):
        for key in (keys if rep % 2 == 0 else keys[::-1]):
            sleep_s = min(MAX_SLEEP_S, 2 * host_s[key] + 20e-6)
            t0 = time.perf_counter()
            if sleeper is not None:
                sleeper(int(sleep_s * SLEEP_CLOCK_HZ))
            start, end = _event_pair()
            start.record()
            run[key]()
            end.record()
            events[key].append((start, end))
            ahead[key].append(time.perf_counter() - t0 < sleep_s)
    torch.cuda.synchronize()
    times = {k: [s.elapsed_time(e) * 1e3 for s, e in events[k]] for k in keys}
    # the fraction of a side's timed calls the host enqueued whole within the sleep before them: 1.0 = every
    # timing is device time (a call that syncs the host inside, or outran its sleep, counts as not ahead);
    # None without a sleep kernel (nothing kept the device busy: unknown)
    return times, {k: sum(v) / len(v) if v and sleeper is not None else None for k, v in ahead.items()}


# -- per-mode timing (the kernel benchmark) ----------------------------------------------------------------


def sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def time_cpu(fn: Call, calls: int = 3) -> tuple[float, float, float]:
    """Wall-clock (median, p20, p80) µs of ``calls`` calls after one untimed call."""
    fn()
    xs = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t) * 1e6)
    return quantiles(xs)


def estimate_ms(fn: Call, cuda: bool, n: int = 3) -> float:
    """Rough ms per call (one untimed call, then ``n`` back to back)."""
    fn()
    sync(cuda)
    t = time.perf_counter()
    for _ in range(n):
        fn()
    sync(cuda)
    return max((time.perf_counter() - t) * 1e3 / n, 1e-3)


def time_cold(fn: Call, cuda: bool, warmup_ms: float, rep_ms: float) -> tuple[float, float, float]:
    """eager-cold: triton ``do_bench`` (L2 flushed before every call); CPU: :func:`time_cpu`."""
    if not cuda:
        return time_cpu(fn)
    import triton.testing

    r = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return r[0] * 1e3, r[1] * 1e3, r[2] * 1e3


def time_warm(fn: Call, cuda: bool, target_ms: float) -> tuple[float, float, float]:
    """eager-warm: back-to-back calls for about ``target_ms`` (3..300 calls), CUDA events around each."""
    if not cuda:
        return time_cpu(fn)
    n = int(min(300, max(3, target_ms / estimate_ms(fn, cuda))))
    ev = [_event_pair() for _ in range(n)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return quantiles([s.elapsed_time(e) * 1e3 for s, e in ev])


def _captured(body: Call, g_launches: int) -> torch.cuda.CUDAGraph:
    """``body`` run 3 times on a side stream (compiles, allocations), then ``g_launches`` times captured in one
    CUDA graph, replayed once."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(g_launches):
            body()
    g.replay()
    torch.cuda.synchronize()
    return g


def time_graph(fn: Call, launches: int, target_ms: float, cold: bool = False) -> tuple[float, float, float, int]:
    """graph: G <= ``launches`` calls captured in one CUDA graph (fewer for calls over 2 ms), replayed
    for about ``target_ms`` (3..50 replays); (median, p20, p80) µs per launch, and G. CUDA only.

    ``cold``: each call comes after a read of 2 x L2 of scratch (the L2 left full of clean lines: no write-back
    lands in ``fn``'s time, as a zeroing flush's would), and a graph of the reads alone is replayed alternately
    with it: the figures are of the per-launch difference."""
    est = estimate_ms(fn, True)
    g_launches = min(launches if est < 2.0 else max(1, int(20.0 / est)), launches)
    if cold:
        scratch = torch.zeros(2 * l2_bytes(torch.device("cuda")) // 4, dtype=torch.float32, device="cuda")
        graphs = [_captured(lambda: (scratch.sum(), fn()), g_launches), _captured(scratch.sum, g_launches)]
    else:
        graphs = [_captured(fn, g_launches)]
    n = int(min(50, max(3, target_ms / (est * g_launches))))
    ev = [[_event_pair() for _ in graphs] for _ in range(n)]
    for pairs in ev:
        for g, (a, b) in zip(graphs, pairs):
            a.record()
            g.replay()
            b.record()
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) for pairs in ev for a, b in pairs[:1]]
    if cold:
        times = [t - a.elapsed_time(b) for t, pairs in zip(times, ev) for a, b in pairs[1:]]
    del graphs
    return (*quantiles([t * 1e3 / g_launches for t in times]), g_launches)


def copy_bandwidth(cuda: bool, gib: float) -> dict:
    """Device-to-device copy bandwidth (bytes read + written / median): the ceiling a memory-bound kernel
    is measured against. CPU: a 64 MiB copy, marked as not a GPU ceiling."""
    if cuda:
        n = int(gib * 2**30) // 4
        src = torch.randn(n, device="cuda")
        dst = torch.empty_like(src)
        med, p20, p80 = time_cold(lambda: dst.copy_(src), True, warmup_ms=25, rep_ms=200)
        note = "device-to-device copy, bytes read + written"
        del src, dst
        torch.cuda.empty_cache()
    else:
        n = 2**24
        src = torch.randn(n)
        dst = torch.empty_like(src)
        med, p20, p80 = time_cpu(lambda: dst.copy_(src))
        note = "CPU copy (quick mode), not a GPU ceiling"
    nbytes = 2 * n * 4
    return dict(bytes=nbytes, median_us=med, p20_us=p20, p80_us=p80, gbps=nbytes / (med * 1e-6) / 1e9, note=note)
