"""SCRATCH (eighth session, seventh call): top-p paths after the open-row list lengths are reset by plain stores
(no launch-wide counter). Graph us, SYNTHETIC bench Inputs (seed_of), same as the final bench's inputs."""
import statistics

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

V = 248320
for R, k, tp in ((1, 0, 0.9), (16, 0, 0.9), (64, 0, 0.9), (256, 0, 0.9), (1, 4, 0.9), (8, 4, 0.9), (64, 4, 0.9),
                 (1, 0, 1.0), (64, 4, 1.0)):
    step = Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k), device="cuda").step(tp)
    impl = GumbelMaxSampler() if k == 0 else StochasticSampler()
    st = impl.prepare(step)
    ts = [time_graph(lambda: impl.launch(st), 16, 80.0)[0] for _ in range(3)]
    print(f"{'plain' if k == 0 else 'verify k=4'} R={R} top_p={tp}: graph {statistics.median(ts):.1f} us "
          f"{[round(t, 1) for t in ts]}", flush=True)
