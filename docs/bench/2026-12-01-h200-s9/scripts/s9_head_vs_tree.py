"""SCRATCH (ninth session): the working tree's draw against HEAD's (63e7af8; runs: scripts/halves.patch -> s9_halves.txt,
scripts/lagged.patch -> s9_lagged.txt, scripts/quick.patch -> s9_quick.txt), CUDA graphs, 3 rounds interleaved, tokens compared."""
import importlib.util
import statistics
import sys

import torch

import replay_kernels.gumbel_max as gm
import replay_kernels.stochastic as stoch
from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_harness.recording.derive import derive_steps
from replay_harness.recording.store import Recording
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

# scratch/draw_head.py: make it with `git show 63e7af8:replay_kernels/draw.py > scratch/draw_head.py` (the device's
# git HEAD is stale); the variant under test is the working tree (scripts/halves.patch, scripts/lagged.patch)
spec = importlib.util.spec_from_file_location("replay_kernels._draw_head", "scratch/draw_head.py")
head = importlib.util.module_from_spec(spec)
head.__package__ = "replay_kernels"
sys.modules["replay_kernels._draw_head"] = head
spec.loader.exec_module(head)
KERNELS = {"head": head._draw_kernel, "tree": gm._draw_kernel}  # tree: the working tree


def use(name):
    gm._draw_kernel = KERNELS[name]
    stoch._draw_kernel = KERNELS[name]


V = 248320


def real(path, R, k):
    step, _ = next(derive_steps(Recording(path), batch=R, drafts=k, vocab=V, steps=1))
    return step.to("cuda")


def synth(R, k, tp=1.0):
    return Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k), device="cuda").step(tp)


CASES = [("real qwen plain R=256", lambda: real("fixtures/real-draft-model", 256, 0), 0),
         ("real qwen plain R=64", lambda: real("fixtures/real-draft-model", 64, 0), 0),
         ("real qwen verify k=4 R=256", lambda: real("fixtures/real-draft-model", 256, 4), 4),
         ("real qwen verify k=4 R=64", lambda: real("fixtures/real-draft-model", 64, 4), 4),
         ("real smol plain R=256", lambda: real("fixtures/real-mixed", 256, 0), 0),
         ("synthetic plain R=1", lambda: synth(1, 0), 0),
         ("synthetic plain R=8", lambda: synth(8, 0), 0),
         ("synthetic plain R=64", lambda: synth(64, 0), 0),
         ("synthetic plain R=256", lambda: synth(256, 0), 0),
         ("synthetic plain top-p 0.9 R=256", lambda: synth(256, 0, 0.9), 0),
         ("synthetic verify k=4 R=64", lambda: synth(64, 4), 4),
         ("synthetic verify k=4 R=256", lambda: synth(256, 4), 4)]
for label, make, k in CASES:
    step = make()
    impl = GumbelMaxSampler() if k == 0 else StochasticSampler()
    states = {n: impl.prepare(step) for n in KERNELS}
    outs = {}
    for n, st in states.items():
        use(n)
        o = impl.launch(st)
        outs[n] = (o[0].clone(), o[1].clone())
    same = all(torch.equal(outs["head"][i], outs["tree"][i]) for i in range(2))
    times = {n: [] for n in states}
    for _ in range(3):
        for n, st in states.items():
            use(n)
            times[n].append(time_graph(lambda: impl.launch(st), 16, 50.0)[0])
    med = {n: statistics.median(v) for n, v in times.items()}
    print(f"{label}: head {med['head']:.1f} tree {med['tree']:.1f} ({med['tree'] / med['head']:.3f}) "
          f"tokens {'same' if same else 'DIFFER'}  rounds {[[round(x, 1) for x in v] for v in times.values()]}",
          flush=True)
    del states, step
    torch.cuda.empty_cache()
