"""CPU model of the residual held-once patch on the bench's SYNTHETIC verify + top-p steps (V = 248,320, R = 64,
k = 4): of the requests whose draw row is checked (bonus TARGET or one-hot RESIDUAL), how many does the first check
skip (drawn token = the one lane at the row's top, which is the top of the whole order) before and after the patch.
Tokens from the reference sampler (the oracle), so the drawn tokens are the contract's."""
import sys
import torch
from replay_harness.bench.kernels.cases import Inputs
from replay_harness.impls.reference import ReferenceSampler

V, R, k = 248320, 64, 4
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
tot = dict(target=0, target_skip=0, resid=0, resid_skip_new=0, resid_d_above=0)
for i in range(steps):
    seed = Inputs.seed_of(V, R, k) + i
    step = Inputs.make(V, R, k, seed=seed, device="cpu").step(0.9, 0)
    res = ReferenceSampler().sample(step)
    toks, counts = res.tokens, res.counts
    cu = step.cu_num_logits
    for r in range(R):
        c = int(counts[r]); row = int(cu[r]) + c - 1
        x = step.logits[row].float() / float(step.temperature[r])
        tok = int(toks[r, c - 1])
        if c == k + 1:  # bonus: TARGET
            tot["target"] += 1
            M = x.max()
            tot["target_skip"] += int(x[tok] == M and int((x == M).sum()) == 1)
        else:
            tot["resid"] += 1
            d = int(step.draft_token_ids[row])
            xo = torch.cat([x[:d], x[d + 1:]])
            M = xo.max()
            if x[d] >= M:
                tot["resid_d_above"] += 1
            else:
                tot["resid_skip_new"] += int(x[tok] == M and int((xo == M).sum()) == 1)
    print(i, tot, flush=True)
