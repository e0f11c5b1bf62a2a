"""SCRATCH: three launches of the plain draw on the bench's SYNTHETIC rows, V = 248,320, R = 256 (ncu profiles the
third)."""
import torch

from replay_harness.bench.kernels.cases import Inputs
from replay_kernels.gumbel_max import GumbelMaxSampler

V, R = 248320, 256
step = Inputs.make(V, R, 0, seed=Inputs.seed_of(V, R, 0), device="cuda").step(1.0)
impl = GumbelMaxSampler()
st = impl.prepare(step)
for _ in range(3):
    impl.launch(st)
torch.cuda.synchronize()
