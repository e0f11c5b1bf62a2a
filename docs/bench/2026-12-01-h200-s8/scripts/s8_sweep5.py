"""SCRATCH (eighth session, fifth call): the draw kernel's register cap (maxnreg: 80 registers a thread limit
one-warp programs to 24 warps an SM; 64 would allow 32). SYNTHETIC rows.  PYTHONPATH=$PWD python3 scratch/s8_sweep5.py"""
import statistics
import sys
from collections import defaultdict

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

V = 248320
for R, k, tp in ((64, 4, 1.0), (64, 0, 1.0), (256, 0, 1.0), (256, 4, 1.0), (16, 0, 1.0), (1, 0, 1.0), (64, 0, 0.9),
                 (256, 0, 0.9)):
    step = Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k), device="cuda").step(tp)
    named = {}
    for copy in (0, 1):
        for reg in (None, 72, 64, 56, 48):
            impl = GumbelMaxSampler() if k == 0 else StochasticSampler()
            st = impl.prepare(step)
            st.draw.maxnreg = reg
            if getattr(st, "round_draw", None) is not None:
                st.round_draw.maxnreg = reg
            named[f"maxnreg {reg} #{copy}"] = (impl, st)
    toks, res = {}, defaultdict(list)
    for n, (impl, st) in named.items():
        impl.launch(st)
        toks[n] = impl.launch(st)[0].clone()
    for _ in range(3):
        for n, (impl, st) in named.items():
            res[n].append(time_graph(lambda: impl.launch(st), 20, 60.0)[0])
    print(f"== {'plain' if k == 0 else 'verify k=4'} R={R} top_p={tp}")
    for n in sorted(res, key=lambda n: statistics.median(res[n])):
        diff = int((toks[n] != toks["maxnreg None #0"]).any(dim=1).sum())
        print(f"  {n:24s} {statistics.median(res[n]):8.2f} us  {[round(x, 2) for x in res[n]]}  differ: {diff}")
    sys.stdout.flush()
