"""SCRATCH (eighth session, eighth call): register caps of the position kernel (verify) and the check kernel
(top-p): maxnreg changes no arithmetic (spills only), so any cap keeps every sum's order. SYNTHETIC rows.
    PYTHONPATH=$PWD python3 scratch/s8_sweep8.py"""
import statistics
import sys
from collections import defaultdict

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_kernels import sample_check
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

V = 248320
CAPS = (None, 80, 72, 64, 56)
for R, k, tp, what in ((64, 4, 1.0, "position"), (256, 4, 1.0, "position"), (8, 4, 1.0, "position"),
                       (256, 0, 0.9, "check"), (64, 0, 0.9, "check")):
    step = Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k), device="cuda").step(tp)
    named = {}
    for cap in CAPS:
        impl = StochasticSampler() if k else GumbelMaxSampler()
        if what == "position":
            impl.position_maxnreg = cap
        named[f"{what} maxnreg {cap}"] = (impl, impl.prepare(step), cap)

    def run(impl, st, cap):
        if what == "check":
            sample_check.CHECK_MAXNREG = cap
        return impl.launch(st)

    toks, res = {}, defaultdict(list)
    for n, (impl, st, cap) in named.items():
        run(impl, st, cap)
        toks[n] = run(impl, st, cap)[0].clone()
    for _ in range(3):
        for n, (impl, st, cap) in named.items():
            res[n].append(time_graph(lambda: run(impl, st, cap), 16, 60.0)[0])
    sample_check.CHECK_MAXNREG = None
    base = next(iter(named))
    print(f"== {'plain' if k == 0 else 'verify k=4'} R={R} top_p={tp}")
    for n in sorted(res, key=lambda n: statistics.median(res[n])):
        diff = int((toks[n] != toks[base]).any(dim=1).sum())
        print(f"  {n:24s} {statistics.median(res[n]):8.2f} us  {[round(x, 2) for x in res[n]]}  differ: {diff}")
    sys.stdout.flush()
