"""Phases of the open-row launch from %globaltimer stamps (scratch/trace copy; SYNTHETIC top-p 0.9 steps).

    bash docs/bench/2026-12-04-h200-s31/scripts/make_variants.sh   # makes scratch/trace
    python3 docs/bench/2026-12-04-h200-s31/scripts/trace_open_rows.py --R 64 --steps 6 --reps 3
Per step: the open rows, then per phase the median over the slots (each slot: the median over its programs) of
the time since the launch's first program started (µs), and the slowest slot's."""
import argparse, importlib, statistics, sys
sys.path.insert(0, "tools")
import torch
from ab_kernels import load_variant, make_step

ap = argparse.ArgumentParser()
ap.add_argument("--R", type=int, default=64)
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--reps", type=int, default=5)
a = ap.parse_args()
pkg = load_variant("trace", "scratch/trace/replay_kernels")
GM = importlib.import_module(pkg + ".gumbel_max").GumbelMaxSampler
orows = importlib.import_module(pkg + ".open_rows")
NAMES = {1: "floor", 8: "draw", 9: "bar1", 10: "cand", 11: "check", 12: "bar2", 13: "verdict", 14: "refloor",
         16: "draw2", 17: "bar1'", 18: "cand2", 19: "check2", 20: "bar2'", 21: "verdict2", 22: "refloor2"}
agg = {}
for i in range(a.steps):
    step = make_step(None, a.R, 0, 0.9, i)
    impl = GM()
    state = impl.prepare(step)
    impl.launch(state)
    torch.cuda.synchronize()
    tr_t = orows.TRACE
    if tr_t is None:
        print(f"step {i}: no open-row launch"); continue
    for rep in range(a.reps):
        tr_t.zero_()
        impl.launch(state)
        torch.cuda.synchronize()
        tr = tr_t.view(-1, 64).cpu().to(torch.float64)
        start = tr[:, 0][tr[:, 0] > 0]
        t0 = start.min()
        rel = lambda v: (v - t0) / 1000.0
        end = rel(tr[:, 3][tr[:, 3] > 0].max())
        n_prog = tr.shape[0]
        S, Pn = orows.GRID
        slots_line = []
        for s in range(S):
            block = tr[s * Pn:(s + 1) * Pn]
            for entry in (0, 1):
                e = block[:, entry * 32:(entry + 1) * 32]
                if (e[:, 1] > 0).sum() == 0:
                    continue
                row = int(e[0, 2])
                cells = {}
                for k, name in NAMES.items():
                    v = e[:, k][e[:, k] > 0]
                    if len(v):
                        cells[name] = (rel(v.median().item()), rel(v.max().item()))
                for name, (med, mx) in cells.items():
                    agg.setdefault((entry, name), []).append(med)
                if rep == 0:
                    slots_line.append(f"slot {s} entry {entry} row {row}: " + ", ".join(
                        f"{n} {m:.1f}/{x:.1f}" for n, (m, x) in cells.items()))
        agg.setdefault(("all", "end"), []).append(end)
        agg.setdefault(("all", "start spread"), []).append(rel(start.max()))
        if rep == 0:
            print(f"step {i}: {S} slots x {Pn} programs, launch {end:.1f} us (first program to last exit); programs "
                  f"started within {rel(start.max()):.1f}")
            print("\n".join("  " + l for l in slots_line))
print("\nmedian over steps, reps and slots (µs since the first program started):")
for key, v in sorted(agg.items(), key=lambda kv: (str(kv[0][0]), statistics.median(kv[1]))):
    print(f"  {key[0]} {key[1]}: {statistics.median(v):.2f} (n={len(v)}, max {max(v):.2f})")
