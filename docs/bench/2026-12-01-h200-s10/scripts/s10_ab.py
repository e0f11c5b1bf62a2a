"""SCRATCH (tenth session): the working tree's draw (TILES tiles a load, then only the tiles that may win read
again and scored) against the ninth session's (f86f4af: per tile, one tile loaded ahead), CUDA graphs, 3 rounds
interleaved, medians; tokens compared with f86f4af's in every cell. Make the baseline first (the device's git
HEAD is stale): `git show f86f4af:replay_kernels/draw.py > scratch/draw_head.py`. s10_ab_final.txt: `v1t2` is the
committed kernel (then in scratch/draw_v1.py), `t1`/`t2` the tree with scripts/registers.patch applied;
s10_ab_first.txt: the committed kernel as `t2`/`t4`; s10_ab_adaptive.txt: a variant described in BENCHMARKS.md.
Usage: python3 docs/bench/2026-12-01-h200-s10/scripts/s10_ab.py t2,t4"""
import importlib.util
import statistics
import sys

import torch

import replay_kernels.draw as draw
import replay_kernels.gumbel_max as gm
import replay_kernels.stochastic as stoch
from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_harness.recording.derive import derive_steps
from replay_harness.recording.store import Recording
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

spec = importlib.util.spec_from_file_location("replay_kernels._draw_head", "scratch/draw_head.py")
head = importlib.util.module_from_spec(spec)
head.__package__ = "replay_kernels"
sys.modules["replay_kernels._draw_head"] = head
spec.loader.exec_module(head)


class HeadAdapter:
    """HEAD's kernel under the tree's launch arguments (TILES > 1 iff the span has several tiles = PREFETCH)."""

    def __getitem__(self, grid):
        launch = head._draw_kernel[grid]

        def call(*args, TILES, **kw):  # noqa: N803 (the kernel's constexpr name)
            return launch(*args, PREFETCH=TILES > 1, **kw)
        return call


ORIG_TILES = draw.DrawScratch.tiles


def tiles_fixed(n):
    def tiles(self):
        if not self.prune:
            return 1
        return max(1, min(n, 1 << ((self.span // self.block).bit_length() - 1)))
    return property(tiles)


VARIANTS = {"head": (HeadAdapter(), ORIG_TILES), "t1": (gm._draw_kernel, tiles_fixed(1)),
            "t2": (gm._draw_kernel, tiles_fixed(2)), "t4": (gm._draw_kernel, tiles_fixed(4))}
if len(sys.argv) > 1:
    VARIANTS = {k: v for k, v in VARIANTS.items() if k == "head" or k in sys.argv[1].split(",")}
KERNEL = gm._draw_kernel


def use(name):
    kernel, tiles = VARIANTS[name]
    gm._draw_kernel = kernel
    stoch._draw_kernel = kernel
    draw.DrawScratch.tiles = tiles


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
         ("synthetic plain top-p 0.9 R=64", lambda: synth(64, 0, 0.9), 0),
         ("synthetic plain top-p 0.9 R=256", lambda: synth(256, 0, 0.9), 0),
         ("synthetic verify k=4 R=64", lambda: synth(64, 4), 4),
         ("synthetic verify k=4 R=256", lambda: synth(256, 4), 4)]
for label, make, k in CASES:
    step = make()
    impl = GumbelMaxSampler() if k == 0 else StochasticSampler()
    states, outs = {}, {}
    for n in VARIANTS:
        use(n)
        states[n] = impl.prepare(step)
        o = impl.launch(states[n])
        outs[n] = (o[0].clone(), o[1].clone())
    same = all(torch.equal(outs["head"][i], outs[n][i]) for n in VARIANTS for i in range(2))
    times = {n: [] for n in VARIANTS}
    for _ in range(3):
        for n, st in states.items():
            use(n)
            times[n].append(time_graph(lambda: impl.launch(st), 16, 50.0)[0])
    med = {n: statistics.median(v) for n, v in times.items()}
    cells = " ".join(f"{n} {med[n]:.1f} ({med[n] / med['head']:.3f})" for n in VARIANTS)
    print(f"{label}: {cells} tokens {'same' if same else 'DIFFER'}  rounds "
          f"{ {n: [round(x, 1) for x in v] for n, v in times.items()} }", flush=True)
    del states, step
    torch.cuda.empty_cache()
