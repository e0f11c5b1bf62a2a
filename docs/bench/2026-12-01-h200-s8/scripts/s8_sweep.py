"""SCRATCH (eighth session): (A) plain small-R draw shapes and the shared row best on/off; (B) position kernel
warps/tile; (C) per-kernel device time of the top-p paths (torch.profiler). SYNTHETIC rows (bench Inputs).
    PYTHONPATH=$PWD python3 scratch/s8_sweep.py A B C"""
import statistics
import sys
from collections import defaultdict

import torch

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_kernels import draw
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

V = 248320
parts = sys.argv[1:] or ["A", "B", "C"]


def step_of(R, k, top_p):
    return Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k), device="cuda").step(top_p)


def race(named, rounds=3):
    """named: {name: (impl, state)} -> {name: [us per round]} interleaved, and tokens."""
    toks, res = {}, defaultdict(list)
    for n, (impl, st) in named.items():
        impl.launch(st)
        toks[n] = impl.launch(st)[0].clone()
    for _ in range(rounds):
        for n, (impl, st) in named.items():
            res[n].append(time_graph(lambda: impl.launch(st), 20, 60.0)[0])
    return res, toks


def show(title, res, toks, base):
    print(f"== {title}")
    for n in sorted(res, key=lambda n: statistics.median(res[n])):
        diff = int((toks[n] != toks[base]).any(dim=1).sum())
        print(f"  {n:28s} {statistics.median(res[n]):8.2f} us  {[round(x, 2) for x in res[n]]}  differ: {diff}")
    sys.stdout.flush()


if "A" in parts:
    shapes = [(2048, 8), (2048, 4), (1024, 4), (1024, 8), (1024, 2), (512, 1), (512, 2), (512, 4), (256, 1),
              (1024, 1)]
    for R in (1, 2, 4, 8, 16, 32):
        step = step_of(R, 0, 1.0)
        named = {}
        for b, w in shapes:
            for progs in ((1024, 8192) if R >= 4 else (1024,)):
                for share in (True, False):
                    impl = GumbelMaxSampler()
                    st = impl.prepare(step)
                    st.draw = draw.DrawScratch.allocate(R, V, b, "cuda", progs, warps=w)
                    st.draw.share = share
                    named[f"b{b} w{w} p{progs} share{int(share)}"] = (impl, st)
        impl = GumbelMaxSampler()
        named["default"] = (impl, impl.prepare(step))
        res, toks = race(named)
        show(f"plain R={R}", res, toks, "default")

if "B" in parts:
    configs = [(4, 2048, 8192)] + [(w, b, s) for w in (1, 2) for b in (512, 1024, 2048) for s in (4096, 8192)
                                   if b <= s]
    for R, k, tp in [(64, 4, 1.0), (256, 4, 1.0), (8, 4, 1.0), (1, 4, 1.0), (64, 4, 0.9)]:
        step = step_of(R, k, tp)
        named = {}
        for w, b, s in configs:
            impl = StochasticSampler(position_warps=w, stats_block=b, stats_span=s)
            named[f"w{w} b{b} s{s}"] = (impl, impl.prepare(step))
        res, toks = race(named, rounds=3)
        show(f"verify k={k} R={R} top_p={tp}", res, toks, "w4 b2048 s8192")

if "C" in parts:
    from torch.profiler import ProfilerActivity, profile
    for label, impl, R, k, tp in [("gumbel-max", GumbelMaxSampler(), 256, 0, 0.9),
                                  ("gumbel-max", GumbelMaxSampler(), 64, 0, 0.9),
                                  ("gumbel-max", GumbelMaxSampler(), 1, 0, 0.9),
                                  ("gumbel-max", GumbelMaxSampler(), 256, 0, 1.0),
                                  ("stochastic", StochasticSampler(), 64, 4, 0.9),
                                  ("stochastic", StochasticSampler(), 64, 4, 1.0)]:
        st = impl.prepare(step_of(R, k, tp))
        for _ in range(3):
            impl.launch(st)
        torch.cuda.synchronize()
        n = 20
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                impl.launch(st)
            torch.cuda.synchronize()
        agg = defaultdict(lambda: [0, 0.0])
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                a = agg[e.name]
                a[0] += 1
                a[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        tot = sum(v[1] for v in agg.values()) / n
        print(f"== {label} R={R} k={k} top_p={tp}: device time per launch {tot:.1f} us")
        for name, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
            print(f"  {name[:60]:60s} x{c / n:4.1f}  {t / n:8.1f} us")
        sys.stdout.flush()
