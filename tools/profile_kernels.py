#!/usr/bin/env python3
"""Where a sampler launch spends its device time, kernel by kernel (GPU; guides kernel work, issue 12).

    python tools/profile_kernels.py [--vocab 248320] [--launches 20] [--sequence] [--sweep]

For each case (R requests, k drafts, top-p, top-k) on the benchmark's SYNTHETIC rows
(replay_harness.bench.kernels.cases.Inputs: fp32 randn*3 plus one peak per row, temperature 1):
``gumbel-max`` (k = 0) or ``stochastic`` (k > 0) is prepared once, launched ``--launches`` times under
torch.profiler (CUDA activity), and every kernel's device time is summed and divided by the launches:
a table of µs per launch and calls per launch, per kernel, with the launch's total device time.
``--sequence``: also the kernels of one launch in launch order (median device µs of each), and for verify
steps with top-p the rows the exact-cut fallback lists on 20 more steps (how often its passes have work).

``--sweep``: the draw kernel's tile (BLOCK) and program count for plain samples at R = 1, 64 and 256,
timed as CUDA-graph replays (``triton.testing.do_bench_cudagraph``, µs; the benchmark's "graph" column),
each configuration's tokens checked equal to the default's. ``--check-sweep``: the same for the tile and
warps of sample-and-check's check pass (top-p 0.9 plain samples; a tile changes the order of the sums, so
a token may differ on a near-tie).
"""
from __future__ import annotations

import argparse
import itertools
import statistics
from collections import defaultdict

import torch

from replay_harness.bench.kernels.cases import Inputs
from replay_kernels.draw.draw import DRAW_PROGRAMS
from replay_kernels.draw.gumbel_max import GumbelMaxSampler
from replay_kernels.verify.stochastic import StochasticSampler

CASES = [  # (R, k, top_p, top_k)
    (1, 0, 1.0, 0), (256, 0, 1.0, 0), (1, 0, 0.9, 0), (64, 0, 0.9, 0), (256, 0, 0.9, 0), (256, 0, 1.0, 50),
    (64, 4, 1.0, 0), (256, 4, 1.0, 0), (64, 4, 0.9, 0), (1, 0, 0.9, 50), (64, 0, 0.9, 50), (64, 4, 0.9, 50),
]


def device_kernels(fn, calls: int, warmup: int = 3) -> list[tuple[str, float]]:
    """(kernel name, device µs) of every kernel ``calls`` calls of ``fn`` run, in launch order (one
    torch.profiler run, after ``warmup`` calls)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return [(e.name, e.time_range.elapsed_us()) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def kernel_times(fn, launches: int) -> tuple[dict[str, list[float]], float]:
    """{kernel name: [total µs, calls]} over ``launches`` calls of ``fn`` (after 3 warm-ups), and the total."""
    per: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for name, us in device_kernels(fn, launches):
        per[name][0] += us
        per[name][1] += 1
    return per, sum(v[0] for v in per.values())


def launch_sequence(fn, launches: int) -> list[tuple[str, float]]:
    """The kernels of one call of ``fn`` in launch order, each with its median device µs over ``launches``
    calls profiled one at a time (after 3 warm-ups)."""
    calls = [device_kernels(fn, 1, warmup=3 if i == 0 else 0) for i in range(launches)]
    return [(name, statistics.median(c[i][1] for c in calls if len(c) > i)) for i, (name, _) in enumerate(calls[0])]


def fallback_rows(V: int, R: int, k: int, top_p: float, seeds: int) -> list[int]:
    """Rows the exact-cut fallback of ``stochastic`` lists (undecided top-p accept tests) on ``seeds`` steps."""
    impl, listed = StochasticSampler(), []
    for seed in range(seeds):
        state = impl.prepare(Inputs.make(V, R, k, seed=1000 + seed, device="cuda").step(top_p))
        impl.launch(state)
        listed.append(int(state.fallback.filters.count) if state.fallback is not None else 0)
        del state
    return listed


def profile_cases(V: int, launches: int, sequence: bool) -> None:
    for R, k, top_p, top_k in CASES:
        inp = Inputs.make(V, R, k, seed=R * 10 + k, device="cuda")
        impl = GumbelMaxSampler() if k == 0 else StochasticSampler()
        state = impl.prepare(inp.step(top_p, top_k))
        per, total = kernel_times(lambda: impl.launch(state), launches)
        print(f"\n## V={V} R={R} k={k} top_p={top_p} top_k={top_k}: {total / launches:.1f} µs of device time "
              f"per launch ({impl.name})")
        print("| kernel | µs / launch | calls / launch |\n|---|---:|---:|")
        for name, (us, calls) in sorted(per.items(), key=lambda kv: -kv[1][0]):
            print(f"| `{name[:60]}` | {us / launches:.1f} | {calls / launches:.2f} |")
        if sequence:
            print("\nLaunch sequence (median device µs):\n\n| # | kernel | µs |\n|---:|---|---:|")
            for i, (name, us) in enumerate(launch_sequence(lambda: impl.launch(state), launches)):
                print(f"| {i} | `{name[:60]}` | {us:.1f} |")
            if k and top_p < 1.0:
                rows = fallback_rows(V, R, k, top_p, 20)
                print(f"\nRows the fallback lists, 20 SYNTHETIC steps (seeds 1000-1019): {rows}")
        del inp, state
        torch.cuda.empty_cache()


def graph_sweep(V: int, top_p: float, title: str, names: tuple[str, str], grid, make, default) -> None:
    """For R = 1, 64, 256: ``make(a, b)`` (a configured GumbelMaxSampler) for every (a, b) of ``grid``, timed
    as CUDA-graph replays (µs per launch), its tokens compared with those of ``make(*default)``."""
    from triton.testing import do_bench_cudagraph

    grid = list(grid)  # walked once per R
    for R in (1, 64, 256):
        step = Inputs.make(V, R, 0, seed=R, device="cuda").step(top_p)
        want = make(*default).sample(step).tokens.cpu()
        print(f"\n## {title}, plain top-p {top_p} R={R} V={V}: CUDA-graph µs per launch (default {default})")
        print(f"| {names[0]} | {names[1]} | µs | tokens equal |\n|---:|---:|---:|---|")
        for a, b in grid:
            impl = make(a, b)
            state = impl.prepare(step)
            same = bool(torch.equal(impl.sample(step).tokens.cpu(), want))
            us = 1000 * do_bench_cudagraph(lambda: impl.launch(state), rep=50)
            print(f"| {a} | {b} | {us:.2f} | {'yes' if same else 'NO'} |")


def sweep(V: int) -> None:
    """The draw kernel's tile and program count (warps from draw.DRAW_SHAPES by rows)."""
    graph_sweep(V, 1.0, "draw sweep", ("block", "programs"), itertools.product((512, 1024, 2048, 4096),
                (256, 1024, 2048, 4096)), lambda block, programs: GumbelMaxSampler(block=block, programs=programs),
                (None, None))


def warps_sweep(V: int) -> None:
    """The draw kernel's warps per program and tile (replay_kernels.draw.draw.DRAW_SHAPES, restored after), with
    8 x DRAW_PROGRAMS warps a launch (8,192 one-warp programs, 1,024 of 8 warps); tokens compared with the
    table's choice."""
    from replay_kernels.draw import draw

    table = draw.DRAW_SHAPES

    def make(warps: int | None, block: int | None) -> GumbelMaxSampler:
        one_shape = (1 << 31, block, warps, 8 * DRAW_PROGRAMS // warps, True, None)  # shared best, no register cap
        draw.DRAW_SHAPES = table if warps is None else (one_shape,)
        return GumbelMaxSampler()

    try:
        graph_sweep(V, 1.0, "draw warps sweep", ("warps", "block"),
                    itertools.product((1, 2, 4, 8), (256, 512, 1024, 2048)), make, (None, None))
    finally:
        draw.DRAW_SHAPES = table


def check_sweep(V: int) -> None:
    """The check pass's tile and warps (module constants of replay_kernels.draw.sample_check, restored after)."""
    from replay_kernels.draw import sample_check

    def make(block: int, warps: int) -> GumbelMaxSampler:
        sample_check.CHECK_BLOCK, sample_check.CHECK_WARPS = block, warps
        return GumbelMaxSampler()

    default = (sample_check.CHECK_BLOCK, sample_check.CHECK_WARPS)
    try:
        graph_sweep(V, 0.9, "check sweep", ("block", "warps"), itertools.product((1024, 2048, 4096, 8192),
                    (4, 8, 16)), make, default)
    finally:
        sample_check.CHECK_BLOCK, sample_check.CHECK_WARPS = default


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=248320)
    ap.add_argument("--launches", type=int, default=20)
    ap.add_argument("--sweep", action="store_true", help="also sweep the draw kernel's tile and program count")
    ap.add_argument("--check-sweep", action="store_true", help="also sweep the check pass's tile and warps")
    ap.add_argument("--warps-sweep", action="store_true", help="also sweep the draw kernel's warps and tile")
    ap.add_argument("--no-profile", action="store_true", help="only the sweeps")
    ap.add_argument("--sequence", action="store_true",
                    help="also each case's kernels in launch order, and the rows the verify top-p fallback lists")
    args = ap.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if not args.no_profile:
        profile_cases(args.vocab, args.launches, args.sequence)
    if args.sweep:
        sweep(args.vocab)
    if args.check_sweep:
        check_sweep(args.vocab)
    if args.warps_sweep:
        warps_sweep(args.vocab)


if __name__ == "__main__":
    main()
