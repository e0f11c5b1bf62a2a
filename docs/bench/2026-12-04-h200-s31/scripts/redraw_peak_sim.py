"""SYNTHETIC (numpy, CPU): of the rows a first draw at top-p 0.9 leaves open, how many redraw the row's peak (the
one lane at its largest value), which the open-row launch then keeps without its check. Rows of the bench's law
(randn*3 plus one peak carrying 27-95% of the mass), random Gumbel noise. About a minute:
    python3 docs/bench/2026-12-04-h200-s31/scripts/redraw_peak_sim.py   # open 140 redraw is the peak 98 0.7"""
import math, numpy as np
rng = np.random.default_rng(1)
V, p, rows = 248320, 0.9, 1500
opened = peak2 = 0
for _ in range(rows):
    x = rng.standard_normal(V).astype(np.float32) * 3
    x[rng.integers(V)] = math.log(V) + 4.5 + (rng.random() * 4 - 1)
    e = np.exp(x - x.max()); e /= e.sum()
    order = np.argsort(x, kind="stable")
    kept = np.zeros(V, bool); kept[order[np.cumsum(e[order]) > 1 - p]] = True
    score = x + -np.log(-np.log(rng.random(V)))
    c = int(np.argmax(score))
    if kept[c]: continue
    opened += 1
    cand = np.where(x > x[c])[0]
    c2 = cand[np.argmax(score[cand])]
    peak2 += int(c2 == int(np.argmax(x)))
print("open", opened, "redraw is the peak", peak2, peak2 / max(opened, 1))
