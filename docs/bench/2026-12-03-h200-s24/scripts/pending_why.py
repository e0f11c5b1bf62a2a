"""Why the top-p bounds leave a verify test pending on the GPU (twenty-fourth session, diagnostic).

For 20 SYNTHETIC steps (the profile's seeds 1000-1019, V = 248,320, R = 64, k = 4, top-p 0.9) run `stochastic`,
read which requests went pending at which position (the fallback's listed rows, pend), and recompute that test in float64 on the host:
S, Rb, e_d, X2, the masses at or above x_d - 4 and x_d - 8, the interval of log p(d) with and without the
levels, log u, and the exact log p(d). Prints one line per pending test."""
import math

import torch

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.oracle import rng as orng
from replay_kernels.stochastic import StochasticSampler

P, TOL = 0.9, 1e-4
impl = StochasticSampler()
for seed in range(1000, 1020):
    inp = Inputs.make(248320, 64, 4, seed=seed, device="cuda")
    state = impl.prepare(inp.step(P))
    impl.launch(state)
    torch.cuda.synchronize()
    pend = state.pend.cpu()
    listed = state.fallback.rows.cpu()[:int(state.fallback.filters.count)].long()
    print(f"seed {seed}: {listed.numel()} rows listed", flush=True)
    for r in torch.unique(state.fallback.row_req.cpu()[listed]).tolist():
        i = int(pend[r])
        row = r * 5 + i
        x = inp.logits[row].double().cpu()
        d = int(inp.draft_ids[row])
        u = float(orng.accept_uniform(inp.seeds[r:r + 1].cpu(), inp.positions[row:row + 1].cpu())[0])
        m = x.max()
        e = torch.exp(x - m)
        s = float(e.sum())
        xd = float(x[d])
        before = (x < x[d]) | ((x == x[d]) & (torch.arange(x.numel()) < d))
        rb, ed = float(e[before].sum()), float(e[d])
        x2 = float(x[before].max() - m) if bool(before.any()) else -math.inf
        hn, hf = float(e[x >= xd - 4].sum()), float(e[x >= xd - 8].sum())
        xs, o = torch.sort(x, stable=True)
        cs = torch.cumsum(e[o], 0)
        j = int(torch.searchsorted(cs, torch.tensor((1 - P) * s, dtype=torch.float64), right=True))
        sk = s - (float(cs[j - 1]) if j else 0.0)
        print(f"seed {seed} req {r} pos {i}: draft rank {int((x > x[d]).sum())}, e_d/S {ed / s:.4f}, Rb/S {rb / s:.4f}, "
              f"(Rb+e_d)/S-(1-p) {(rb + ed) / s - (1 - P):+.2e}, X2-M {x2:.2f}, Hn/pS {hn / (P * s):.3f}, "
              f"Hf/pS {hf / (P * s):.3f}, e_c*/S {math.exp(float(xs[j] - m)) / s:.2e}, log u {math.log(u):.5f}, "
              f"log p(d) {xd - float(m) - math.log(sk):.5f}", flush=True)
