"""SCRATCH (eighth session, ninth call): verify after the position launches' 56-register cap. Graph us."""
import statistics

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_kernels.stochastic import StochasticSampler

V = 248320
for R, tp in ((1, 1.0), (8, 1.0), (64, 1.0), (256, 1.0), (64, 0.9)):
    step = Inputs.make(V, R, 4, seed=Inputs.seed_of(V, R, 4), device="cuda").step(tp)
    impl = StochasticSampler()
    st = impl.prepare(step)
    ts = [time_graph(lambda: impl.launch(st), 16, 60.0)[0] for _ in range(3)]
    print(f"verify k=4 R={R} top_p={tp}: graph {statistics.median(ts):.1f} us {[round(t, 1) for t in ts]}", flush=True)
