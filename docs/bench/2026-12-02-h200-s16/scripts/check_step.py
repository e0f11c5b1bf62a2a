"""The bench's SYNTHETIC top-p 0.9 step at V = 248,320 (seed_of(V, R, 0)) launched twice by gumbel-max, for ncu
(call3.sh profiled the first launch's first draw and first check). R from argv (default 64). The last line reads
``runner_up``, which only the runner-up tree has: on 3ad3946 it fails after the profiled launches."""
import sys

from replay_harness.bench.kernels.cases import Inputs
from replay_kernels.gumbel_max import GumbelMaxSampler

V, R = 248320, int(sys.argv[1]) if len(sys.argv) > 1 else 64
impl = GumbelMaxSampler()
state = impl.prepare(Inputs.make(V, R, 0, seed=Inputs.seed_of(V, R, 0), device="cuda").step(0.9))
for _ in range(2):
    impl.launch(state)
print("rounds", state.check.rounds, "runner-ups vouched for", int((state.draw.runner_up >= 0).sum()), "of", R)
