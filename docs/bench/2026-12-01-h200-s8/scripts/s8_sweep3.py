"""SCRATCH (eighth session, third call): sample-and-check top-p 0.9 (SYNTHETIC rows): per-kernel-instance device
times in launch order, and the later draws' split / shape (state.round_draw replaced; tokens compared).
    PYTHONPATH=$PWD python3 scratch/s8_sweep3.py"""
import statistics
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_kernels import draw
from replay_kernels.gumbel_max import GumbelMaxSampler

V = 248320


def step_of(R, k, top_p):
    return Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k), device="cuda").step(top_p)


for R in (256, 64, 16, 1):
    step = step_of(R, 0, 0.9)
    impl = GumbelMaxSampler()
    st = impl.prepare(step)
    for _ in range(3):
        impl.launch(st)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            impl.launch(st)
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per = len(ev) // 10
    seq = defaultdict(list)
    for i, e in enumerate(ev):
        seq[i % per].append((e.name, e.device_time_total))
    print(f"== top-p 0.9 R={R}: kernel instances in launch order (median of 10 launches, us)")
    for i in range(per):
        print(f"  {i:2d} {seq[i][0][0][:20]:20s} {statistics.median(t for _, t in seq[i]):8.1f}")
    named = {"default": (impl, st)}
    for b, w, p in ((1024, 4, 1024), (512, 1, 1024), (512, 1, 8192), (2048, 8, 1024)):
        for sar in sorted({max(1, R // 4), max(1, R // 16), max(1, R // 64), 1}):
            i2 = GumbelMaxSampler()
            s2 = i2.prepare(step)
            s2.round_draw = draw.DrawScratch.allocate(R, V, b, "cuda", p, split_as_rows=sar, warps=w)
            s2.round_draw.later = True
            named[f"b{b} w{w} p{p} as{sar} sp{s2.round_draw.splits}"] = (i2, s2)
    toks, res = {}, defaultdict(list)
    for n, (i, s) in named.items():
        i.launch(s)
        toks[n] = i.launch(s)[0].clone()
    for _ in range(3):
        for n, (i, s) in named.items():
            res[n].append(time_graph(lambda: i.launch(s), 10, 60.0)[0])
    print(f"== top-p 0.9 R={R}: later draws' shape")
    for n in sorted(res, key=lambda n: statistics.median(res[n])):
        diff = int((toks[n] != toks["default"]).any(dim=1).sum())
        print(f"  {n:36s} {statistics.median(res[n]):8.2f} us  {[round(x, 1) for x in res[n]]}  differ: {diff}")
    sys.stdout.flush()
