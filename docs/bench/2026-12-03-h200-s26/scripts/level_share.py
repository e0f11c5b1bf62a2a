"""CPU model: of the bench's SYNTHETIC verify + top-p 0.9 steps' one-hot RESIDUAL draw rows, how many would the
first check decide from the position launch's bounds (d kept and c above d; or x_c >= t for a level t whose mass at
or above it is below p S), without reading the row; `held`: the residual held-once rule (the token the one lane at
the top without the draft, the draft below it). Tokens from the reference sampler: its final token stands for the
first draw (the same when the first draw is kept, most rows; a row whose first draw missed counts its final token).
    python3 docs/bench/2026-12-03-h200-s26/scripts/level_share.py 3   # -> level_share.txt (CPU, about 10 min)"""
import sys
import torch
from replay_harness.bench.kernels.cases import Inputs
from replay_harness.impls.reference import ReferenceSampler

V, R, k, p, tol = 248320, 64, 4, 0.9, 1e-4
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
tot = dict(held=0, union=0, resid=0, kept_above_d=0, kept_level=0, dropped_below_d=0, c_kept_truth=0, target=0)
for i in range(steps):
    seed = Inputs.seed_of(V, R, k) + i
    step = Inputs.make(V, R, k, seed=seed, device="cpu").step(p, 0)
    res = ReferenceSampler().sample(step)
    cu = step.cu_num_logits
    for r in range(R):
        c = int(res.counts[r]); row = int(cu[r]) + c - 1
        if c == k + 1:
            tot["target"] += 1
            continue
        x = step.logits[row].double() / float(step.temperature[r])
        tok = int(res.tokens[r, c - 1]); d = int(step.draft_token_ids[row])
        M = x.max(); e = torch.exp(x - M); S = e.sum()
        ids = torch.arange(V)
        before_d = (x < x[d]) | ((x == x[d]) & (ids < d))
        Rb = e[before_d].sum()
        d_kept = (Rb + e[d]) / S > (1 - p) * (1 + tol)
        c_above_d = (x[tok] > x[d]) or (x[tok] == x[d] and tok > d)
        low_c = e[(x < x[tok]) | ((x == x[tok]) & (ids <= tok))].sum()
        tot["resid"] += 1
        tot["c_kept_truth"] += int(low_c / S > 1 - p)
        xo = torch.cat([x[:d], x[d + 1:]]); Mo = xo.max()
        held = bool(x[d] < Mo and x[tok] == Mo and int((xo == Mo).sum()) == 1)
        tot["held"] += int(held)
        if d_kept and c_above_d:
            tot["kept_above_d"] += 1
            tot["union"] += 1
            continue
        lev = False
        for g in (4.0, 8.0):
            t = x[d] - g
            if e[x >= t].sum() < p * S * (1 - tol) and x[tok] >= t:
                lev = True
        tot["union"] += int(lev or held)
        if lev:
            tot["kept_level"] += 1
        elif (not c_above_d) and Rb <= (1 - p) * S * (1 - tol):
            tot["dropped_below_d"] += 1
    print(i, tot, flush=True)
