"""ARCHIVED from the first call (the baseline now comes from git, see load_old_draw), against 94a147f's first draft (the draw before HASHES / PREFETCH were launch
parameters); the committed kernel takes them, so the "old" swap no longer runs. SCRATCH (ninth session): A/B of the draw with listed small-hash tokens (new) against ece9e68's draw (old),
CUDA graphs, interleaved rounds, tokens compared. SYNTHETIC bench Inputs and Qwen2.5 / SmolLM2-derived rows."""
import importlib.util
import statistics
import sys
import time

import torch

import replay_kernels.gumbel_max as gm
import replay_kernels.stochastic as st
from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_harness.recording.derive import derive_steps
from replay_harness.recording.store import Recording
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

from old_draw import load_old_draw  # noqa: E402  (this folder is on sys.path)

old = load_old_draw()
NEW = gm._draw_kernel
KERNELS = {"old": old._draw_kernel, "new": NEW}


def use(name):
    gm._draw_kernel = KERNELS[name]
    st._draw_kernel = KERNELS[name]


V = 248320
cases = []
for R, k, tp in ((1, 0, 1.0), (8, 0, 1.0), (64, 0, 1.0), (256, 0, 1.0), (256, 0, 0.9), (64, 4, 1.0), (256, 4, 1.0)):
    cases.append((f"synthetic {'plain' if k == 0 else 'verify k=4'} R={R} top_p={tp}",
                  lambda R=R, k=k, tp=tp: Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k), device="cuda").step(tp),
                  k))
for name, path, R, k in (("qwen", "fixtures/real-draft-model", 256, 0), ("qwen", "fixtures/real-draft-model", 64, 0),
                         ("qwen", "fixtures/real-draft-model", 256, 4), ("qwen", "fixtures/real-draft-model", 64, 4),
                         ("smol", "fixtures/real-mixed", 256, 0)):
    def make(path=path, R=R, k=k):
        step, _ = next(derive_steps(Recording(path), batch=R, drafts=k, vocab=V, steps=1))
        return step.to("cuda")
    cases.append((f"real {name} {'plain' if k == 0 else 'verify k=4'} R={R}", make, k))

for label, make, k in cases:
    t0 = time.time()
    step = make()
    impl = GumbelMaxSampler() if k == 0 else StochasticSampler()
    state = impl.prepare(step)
    toks = {}
    for name in ("old", "new"):
        use(name)
        out = impl.launch(state)
        toks[name] = (out[0].clone(), out[1].clone())
    same = torch.equal(toks["old"][0], toks["new"][0]) and torch.equal(toks["old"][1], toks["new"][1])
    times = {"old": [], "new": []}
    for _ in range(3):
        for name in ("old", "new"):
            use(name)
            times[name].append(time_graph(lambda: impl.launch(state), 16, 60.0)[0])
    use("new")
    med = {n: statistics.median(v) for n, v in times.items()}
    print(f"{label}: old {med['old']:.1f} new {med['new']:.1f} us  new/old {med['new'] / med['old']:.3f}  "
          f"tokens {'same' if same else 'DIFFER'}  rounds old {[round(x, 1) for x in times['old']]} "
          f"new {[round(x, 1) for x in times['new']]} ({time.time() - t0:.0f} s)", flush=True)
    del state, step
    torch.cuda.empty_cache()
