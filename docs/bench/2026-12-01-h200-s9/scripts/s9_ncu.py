"""SCRATCH: three launches of the plain draw on Qwen2.5-derived rows, R = 256 (ncu profiles the third)."""
import torch

from replay_harness.recording.derive import derive_steps
from replay_harness.recording.store import Recording
from replay_kernels.gumbel_max import GumbelMaxSampler

step, _ = next(derive_steps(Recording("fixtures/real-draft-model"), batch=256, drafts=0, vocab=248320, steps=1))
impl = GumbelMaxSampler()
st = impl.prepare(step.to("cuda"))
for _ in range(3):
    impl.launch(st)
torch.cuda.synchronize()
