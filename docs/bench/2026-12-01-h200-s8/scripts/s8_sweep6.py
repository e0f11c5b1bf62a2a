"""SCRATCH (eighth session, sixth call): sample-and-check's later rounds over the open-row lists: requests per
slot and the open rows' split; per-instance kernel times. SYNTHETIC rows.  PYTHONPATH=$PWD python3 scratch/s8_sweep6.py"""
import statistics
import sys
from collections import defaultdict

import torch
import triton
from torch.profiler import ProfilerActivity, profile

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_kernels import draw, sample_check
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

V = 248320
for R, k in ((256, 0), (64, 0), (16, 0), (1, 0), (64, 4)):
    step = Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k), device="cuda").step(0.9)
    make = GumbelMaxSampler if k == 0 else StochasticSampler
    impl = make()
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
    print(f"== top-p 0.9 R={R} k={k} (default): kernel instances in launch order (median of 10 launches, us)")
    for i in range(per):
        print(f"  {i:2d} {seq[i][0][0][:20]:20s} {statistics.median(t for _, t in seq[i]):8.1f}")
    named = {"default": (impl, st)}
    for rps in (2, 4, 8, 16, 32):
        for sar in (1, 4, 8, 32):
            if rps > R and rps != 8 or sar > R and sar != 8:
                continue
            i2 = make()
            s2 = i2.prepare(step)
            s2.round_draw = draw.DrawScratch.allocate(R, V, None, "cuda", None, split_as_rows=min(R, sar),
                                                      table=sample_check.ROUND_DRAW_SHAPES)
            s2.round_draw.row_slots = s2.check.row_slots = max(1, triton.cdiv(R, rps))
            named[f"rows/slot {rps} split as {sar} (sp {s2.round_draw.splits})"] = (i2, s2)
    toks, res = {}, defaultdict(list)
    for n, (i, s) in named.items():
        i.launch(s)
        toks[n] = i.launch(s)[0].clone()
    for _ in range(3):
        for n, (i, s) in named.items():
            res[n].append(time_graph(lambda: i.launch(s), 10, 60.0)[0])
    print(f"== top-p 0.9 R={R} k={k}: later rounds' slots and split")
    for n in sorted(res, key=lambda n: statistics.median(res[n])):
        diff = int((toks[n] != toks["default"]).any(dim=1).sum())
        print(f"  {n:40s} {statistics.median(res[n]):8.2f} us  {[round(x, 1) for x in res[n]]}  differ: {diff}")
    sys.stdout.flush()
