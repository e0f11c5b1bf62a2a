"""SCRATCH (eighth session, fourth call): plain R=1 tiles without pruning; the verify k=4 R=64 draw's shape.
SYNTHETIC rows.   PYTHONPATH=$PWD python3 scratch/s8_sweep4.py"""
import statistics
import sys
from collections import defaultdict

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_kernels import draw
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

V = 248320


def race(title, named, rounds=3):
    toks, res = {}, defaultdict(list)
    for n, (impl, st) in named.items():
        impl.launch(st)
        toks[n] = impl.launch(st)[0].clone()
    for _ in range(rounds):
        for n, (impl, st) in named.items():
            res[n].append(time_graph(lambda: impl.launch(st), 20, 60.0)[0])
    base = next(iter(named))
    print(f"== {title}")
    for n in sorted(res, key=lambda n: statistics.median(res[n])):
        diff = int((toks[n] != toks[base]).any(dim=1).sum())
        print(f"  {n:30s} {statistics.median(res[n]):8.2f} us  {[round(x, 2) for x in res[n]]}  differ: {diff}")
    sys.stdout.flush()


for R, k, shapes in ((1, 0, [(4096, 16, 1024, False), (4096, 8, 1024, False), (2048, 8, 1024, False),
                             (2048, 4, 1024, False), (1024, 4, 1024, False), (1024, 8, 1024, False),
                             (1024, 2, 1024, False), (512, 2, 1024, False)]),
                     (64, 4, [(512, 1, 8192, True), (512, 1, 2048, True), (1024, 2, 2048, True),
                              (1024, 2, 8192, True), (256, 1, 8192, True), (1024, 4, 2048, True),
                              (512, 2, 4096, True)])):
    step = Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k), device="cuda").step(1.0)
    named = {}
    for copy in (0, 1):
        impl = GumbelMaxSampler() if k == 0 else StochasticSampler()
        named[f"table #{copy}"] = (impl, impl.prepare(step))
        for b, w, p, share in shapes:
            impl = GumbelMaxSampler() if k == 0 else StochasticSampler()
            st = impl.prepare(step)
            st.draw = draw.DrawScratch.allocate(R, V, b, "cuda", p, warps=w)
            st.draw.share = share
            named[f"b{b} w{w} p{p} s{int(share)} #{copy}"] = (impl, st)
    race(f"{'plain' if k == 0 else 'verify k=4'} R={R}", named)
