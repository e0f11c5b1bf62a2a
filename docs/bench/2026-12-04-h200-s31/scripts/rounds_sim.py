"""SYNTHETIC (numpy, CPU): how many (draw, check) rounds sample-and-check takes a row at top-p 0.9, on rows of the
bench's law (randn*3 plus one peak carrying 27-95% of the mass), with random Gumbel noise. About a minute:
    python3 docs/bench/2026-12-04-h200-s31/scripts/rounds_sim.py   # {1: 0.9075, 2: 0.089, 3: 0.0035}
A round draws the Gumbel-max over the tokens above the last miss in (value, index) order and keeps the token if
it is in the top-p set (the oracle's cumsum rule), as replay_kernels/sample_check.py does."""
import math

import numpy as np

rng = np.random.default_rng(0)
V, p, rows = 248320, 0.9, 2000
hist = {}
for _ in range(rows):
    x = rng.standard_normal(V).astype(np.float32) * 3
    x[rng.integers(V)] = math.log(V) + 4.5 + (rng.random() * 4 - 1)
    e = np.exp(x - x.max())
    e /= e.sum()
    order = np.argsort(x, kind="stable")  # ascending (value, index)
    kept = np.zeros(V, bool)
    kept[order[np.cumsum(e[order]) > 1 - p]] = True
    score = x + -np.log(-np.log(rng.random(V)))
    rank = np.empty(V, int)
    rank[order] = np.arange(V)
    lo, n = -1, 0
    while True:
        n += 1
        cand = np.where(rank > lo)[0]
        c = cand[np.argmax(score[cand])]
        if kept[c]:
            break
        lo = rank[c]
    hist[n] = hist.get(n, 0) + 1
print({k: hist[k] / rows for k in sorted(hist)})
