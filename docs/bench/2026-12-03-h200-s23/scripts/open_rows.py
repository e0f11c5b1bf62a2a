"""How many requests sample-and-check leaves open after its first check (top-p 0.9, SYNTHETIC steps, H200).

Patches replay_kernels.sample_check.launch_rounds for one launch per step to stop after the first check and
read the length of the first open-row list (the rows the launched rounds and the finish loop then serve).
    python3 docs/bench/2026-12-03-h200-s23/scripts/open_rows.py
"""
import statistics
import torch
from replay_harness.bench.kernels.cases import Inputs
from replay_kernels import sample_check, plain
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

from replay_kernels import stochastic

orig = sample_check.launch_rounds
MODULES = (sample_check, plain, stochastic)


def first_only(cs, draw_open, logits, mode, row, slot, params, tokens, top, dtok, seed, positions, cut=None):
    sample_check.launch_check(cs, logits, mode, row, slot, params, tokens, top, 0, cut)  # recorded, run after


for V, R, k, p in [(248320, 64, 0, 0.9), (248320, 256, 0, 0.9), (248320, 64, 4, 0.9), (248320, 8, 0, 0.9)]:
    impl = GumbelMaxSampler(one_launch=False) if k == 0 else StochasticSampler()
    counts = []
    for s in range(20):
        inp = Inputs.make(V, R, k, seed=1000 + s, device="cuda")
        state = impl.prepare(inp.step(p))
        for m in MODULES:
            m.launch_rounds = first_only
        try:
            impl.launch(state)
            torch.cuda.synchronize()
        finally:
            for m in MODULES:
                m.launch_rounds = orig
        cs = state.check
        counts.append(-1 if cs is None else int(cs.open_len[0]) if cs.rounds else int((cs.mode != 0).sum()))
        del state, inp
    print(f"V={V} R={R} k={k} top_p={p}: requests open after the first check, 20 steps: {counts} "
          f"(median {statistics.median(counts)}; rounds launched after it: {cs.rounds if cs is not None else '-'})")
