"""SCRATCH (eighth session, second call): the new small-R draw table against alternatives (each config allocated
twice: allocation-to-allocation spread), and the top-p paths after settled rows exit at once. SYNTHETIC rows.
    PYTHONPATH=$PWD python3 scratch/s8_sweep2.py"""
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


def step_of(R, k, top_p):
    return Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k), device="cuda").step(top_p)


def race(named, rounds=3):
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
        print(f"  {n:30s} {statistics.median(res[n]):8.2f} us  {[round(x, 2) for x in res[n]]}  differ: {diff}")
    sys.stdout.flush()


for R in (1, 2, 4, 6, 8, 12, 16, 32, 48, 64, 96, 128):
    step = step_of(R, 0, 1.0)
    named = {}
    cands = [(2048, 8, 1024, False), (2048, 8, 1024, True), (512, 1, 1024, True), (512, 1, 2048, True),
             (512, 1, 4096, True), (512, 1, 8192, True), (1024, 4, 1024, True)]
    for copy in (0, 1):
        impl = GumbelMaxSampler()
        named[f"table #{copy} {draw.draw_shape(R)}"] = (impl, impl.prepare(step))
        for b, w, p, share in cands:
            impl = GumbelMaxSampler()
            st = impl.prepare(step)
            st.draw = draw.DrawScratch.allocate(R, V, b, "cuda", p, warps=w)
            st.draw.share = share
            named[f"b{b} w{w} p{p} s{int(share)} #{copy}"] = (impl, st)
    res, toks = race(named)
    show(f"plain R={R}", res, toks, next(iter(named)))

from torch.profiler import ProfilerActivity, profile  # noqa: E402
for label, impl, R, k, tp in [("gumbel-max", GumbelMaxSampler(), 256, 0, 0.9),
                              ("gumbel-max", GumbelMaxSampler(), 64, 0, 0.9),
                              ("gumbel-max", GumbelMaxSampler(), 1, 0, 0.9),
                              ("stochastic", StochasticSampler(), 64, 4, 1.0)]:
    st = impl.prepare(step_of(R, k, tp))
    for _ in range(3):
        impl.launch(st)
    torch.cuda.synchronize()
    g = time_graph(lambda: impl.launch(st), 20, 100.0)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            impl.launch(st)
        torch.cuda.synchronize()
    agg = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name][0] += 1
            agg[e.name][1] += e.device_time_total
    print(f"== {label} R={R} k={k} top_p={tp}: graph {g[0]:.1f} us (p20 {g[1]:.1f}, p80 {g[2]:.1f}); "
          f"device time per launch {sum(v[1] for v in agg.values()) / 20:.1f} us")
    for name, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name[:40]:40s} x{c / 20:4.1f}  {t / 20:8.1f} us")
    sys.stdout.flush()
