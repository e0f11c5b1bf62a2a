"""SCRATCH (ninth session; its VARIANTS were edited between calls: this is the last form, s9_sweep5.txt; calls 2-4: listed-hash draw, its row hash count, the R >= 64 draw shape, the
next-tile prefetch and register caps of the one-warp draws, CUDA graphs,
3 rounds interleaved, tokens compared with the committed default. SYNTHETIC bench Inputs and Qwen2.5 /
SmolLM2-derived rows (V = 248,320)."""
import statistics
import sys

import torch

import importlib.util

import replay_kernels.draw as draw
import replay_kernels.gumbel_max as gm
import replay_kernels.stochastic as stoch
from replay_harness.bench.kernels.cases import Inputs
from replay_harness.bench.timing import time_graph
from replay_harness.recording.derive import derive_steps
from replay_harness.recording.store import Recording
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

V = 248320
BASE_SHAPES = draw.DRAW_SHAPES
BIG = 1 << 31


def shapes(block, warps, programs):
    return BASE_SHAPES[:-1] + ((BIG, block, warps, programs, True, None),)


def capped(cap):
    return tuple(row[:5] + (cap if row[2] == 1 else row[5],) for row in BASE_SHAPES)


from old_draw import load_old_draw  # noqa: E402  (this folder is on sys.path)

old = load_old_draw()
NEW_KERNEL = draw._draw_kernel


class OldKernel:  # ece9e68's draw: no listed hashes, no prefetch
    def __getitem__(self, grid):
        def launch(*args, HASHES=None, PREFETCH=None, **kw):
            return old._draw_kernel[grid](*args, **kw)
        return launch


VARIANTS = {  # (table, ROW_HASHES, tiles loaded ahead: None = the committed rule); programs a launch from 64 rows
    "default": (BASE_SHAPES, 4096, None),
    "2560": (shapes(512, 1, 2560), 4096, None),
    "5120": (shapes(512, 1, 5120), 4096, None),
    "7424": (shapes(512, 1, 7424), 4096, None),
    "16384": (shapes(512, 1, 16384), 4096, None),
}
COMMITTED_PREFETCH = draw.DrawScratch.prefetch


def set_depth(depth):
    if depth is None:
        draw.DrawScratch.prefetch = COMMITTED_PREFETCH
    else:
        draw.DrawScratch.prefetch = lambda self, logits, d=depth: d if self.span > self.block else 0


def use_kernel(name):
    k = OldKernel() if name == "old" else NEW_KERNEL
    gm._draw_kernel = k
    stoch._draw_kernel = k
    set_depth(VARIANTS[name][2])


def real(path, R, k):
    step, _ = next(derive_steps(Recording(path), batch=R, drafts=k, vocab=V, steps=1))
    return step.to("cuda")


CASES = [("real qwen plain R=64", lambda: real("fixtures/real-draft-model", 64, 0), 0),
         ("real qwen verify k=4 R=64", lambda: real("fixtures/real-draft-model", 64, 4), 4),
         ("synthetic plain R=8", lambda: Inputs.make(V, 8, 0, seed=Inputs.seed_of(V, 8, 0), device="cuda").step(1.0), 0),
         ("synthetic verify k=4 R=256", lambda: Inputs.make(V, 256, 4, seed=Inputs.seed_of(V, 256, 4), device="cuda").step(1.0), 4),
         ("real qwen plain R=256", lambda: real("fixtures/real-draft-model", 256, 0), 0),
         ("real qwen verify k=4 R=256", lambda: real("fixtures/real-draft-model", 256, 4), 4),
         ("real smol plain R=256", lambda: real("fixtures/real-mixed", 256, 0), 0),
         ("synthetic plain R=256", lambda: Inputs.make(V, 256, 0, seed=Inputs.seed_of(V, 256, 0), device="cuda").step(1.0), 0),
         ("synthetic plain R=64", lambda: Inputs.make(V, 64, 0, seed=Inputs.seed_of(V, 64, 0), device="cuda").step(1.0), 0),
         ("synthetic verify k=4 R=64", lambda: Inputs.make(V, 64, 4, seed=Inputs.seed_of(V, 64, 4), device="cuda").step(1.0), 4),
         ("synthetic plain top-p 0.9 R=256", lambda: Inputs.make(V, 256, 0, seed=Inputs.seed_of(V, 256, 0), device="cuda").step(0.9), 0)]
only = sys.argv[1:] or list(VARIANTS)
for label, make, k in CASES:
    step = make()
    impl = GumbelMaxSampler() if k == 0 else StochasticSampler()
    states, ref = {}, None
    for name in only:
        draw.DRAW_SHAPES, draw.ROW_HASHES, _ = VARIANTS[name]
        states[name] = impl.prepare(step)
    draw.DRAW_SHAPES, draw.ROW_HASHES = BASE_SHAPES, 4096
    times = {n: [] for n in states}
    diff = []
    for n, st in states.items():
        use_kernel(n)
        out = impl.launch(st)
        if ref is None:
            ref = (out[0].clone(), out[1].clone())
        elif not (torch.equal(ref[0], out[0]) and torch.equal(ref[1], out[1])):
            diff.append(n)
    for _ in range(3):
        for n, st in states.items():
            use_kernel(n)
            times[n].append(time_graph(lambda: impl.launch(st), 16, 50.0)[0])
    base = statistics.median(times[only[0]])
    cells = "  ".join(f"{n} {statistics.median(t):.1f} ({statistics.median(t) / base:.2f})" for n, t in times.items())
    print(f"{label}: {cells}  tokens differ: {diff or 'none'}", flush=True)
    del states, step
    torch.cuda.empty_cache()
