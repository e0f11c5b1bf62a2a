#!/usr/bin/env python3
"""The kernels against their floor and the peers, measured the way users run them: one process, one table.

GPU (H200, the peers on PYTHONPATH; tools/run_gpu_floor_table.sh derives the recordings and runs this):
    python3 tools/floor_table.py --derived /tmp/ft/qwen-R64k4 /tmp/ft/qwen-R256k4 ... --out floor.json
CPU smoke (TRITON_INTERPRET=1, tiny shapes, no graphs, no peers):
    python3 tools/floor_table.py --tiny --derived fixtures/synthetic-mixed --out /tmp/floor.json

1. Derived steps (real rows tiled to V by `replay synth`): every step of each recording through `replay bench`'s
   own timing (replay_harness.bench.ab.run_bench: CUDA events, inputs rotated past 2 x L2, interleaved with the
   peer, each call behind its own sleep), ``stochastic`` against ``--peer``; then the same steps' launches in a
   CUDA graph (bench.timing.time_graph, warm L2: the kernel benchmark's clock; and with the L2 evicted before
   each launch, as `replay bench` has it: a step smaller than the L2 is read from it by a warm graph). Per recording: the median and
   the worst step of bench / floor, graph / floor, bench / graph and ours / peer.
2. SYNTHETIC fp32 steps (bench.kernels.cases.Inputs, ``--synthetic-steps`` seeds a shape), CUDA graphs, the
   peers in the same loop: plain R = 256 (best of our impls / floor and / fastest peer), verify k = 4 R = 256
   with and without top-p 0.9 (the ratio), verify k = 4 R = 64 / fastest peer; and ``stochastic`` eager R = 1,
   plain and top-p 0.9 (triton do_bench, L2 flushed: the eager-cold clock), with ``gumbel-max`` on the same clock.

The floor of a step is the bytes it must read once (bench.ab.floor_bytes; SYNTHETIC: R(k+1) V x 4 B) at the
device-to-device copy bandwidth measured at the start (bench.timing.copy_bandwidth). Medians over the steps,
with the worst step. Prints the table; ``--out`` writes every figure as JSON. Exit 0; 2 bad option.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from replay_harness.bench.ab import Side, run_bench  # noqa: E402
from replay_harness.bench.kernels import cases  # noqa: E402
from replay_harness.bench.kernels.peers import Peers  # noqa: E402
from replay_harness.bench.timing import copy_bandwidth, time_cold, time_cpu, time_graph  # noqa: E402
from replay_harness.compare.runner import load_impl  # noqa: E402
from replay_harness.impls import get_impl  # noqa: E402
from replay_harness.recording.store import Recording  # noqa: E402

PEER_FAMILIES = ("vllm", "flashinfer")


def med_worst(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "worst": max(xs), "steps": len(xs)} if xs else {}


def graph_us(fn, cuda: bool, cold: bool = False) -> float | None:
    """The kernel benchmark's clock: launches captured in one CUDA graph, µs per launch (None on the CPU); warm
    L2, or ``cold`` (2 x L2 read before each launch, its time taken off: bench.timing.time_graph)."""
    return time_graph(fn, 16, 40.0, cold=cold)[0] if cuda else None


def derived(paths: list[str], peer: str | None, device: torch.device, bw_gbs: float, repeats: int) -> list[dict]:
    """Part 1: per recording, `replay bench` of stochastic (vs ``peer``) per step, and the same steps in a graph."""
    out = []
    cuda = device.type == "cuda"
    for path in paths:
        rec = Recording(path)
        sides = [Side("A", "stochastic", load_impl("stochastic", device, None, None))]
        if peer:
            sides.append(Side("B", peer, load_impl(peer, device, None, None)))
        try:
            result = run_bench([rec], sides, device, repeats=repeats, warmup=3)
        finally:
            for side in sides:
                side.impl.close()
        ours = {m.step: m for m in result.measurements if m.side == "A" and m.group == "all"}
        theirs = {m.step: m for m in result.measurements if m.side == "B" and m.group == "all"}
        impl = get_impl("stochastic")
        rows = []
        for i in sorted(ours):
            m = ours[i]
            step = rec[i].step.to(device)
            state = impl.prepare(step)
            g = graph_us(lambda st=state: impl.launch(st), cuda)
            g_cold = graph_us(lambda st=state: impl.launch(st), cuda, cold=True)
            floor = m.bytes / (bw_gbs * 1e3)
            rows.append(dict(step=i, bytes=m.bytes, floor_us=floor, bench_us=m.median_us, graph_us=g,
                             graph_cold_us=g_cold,
                             peer_us=theirs[i].median_us if i in theirs else None,
                             ahead=m.device_busy))
            del state, step
        head = rec[0].step
        shape = dict(R=int(head.cu_num_logits.numel() - 1), rows=int(head.logits.shape[0]),
                     V=int(head.logits.shape[1]), dtype=str(head.logits.dtype).replace("torch.", ""))
        summary = dict(recording=path, shape=shape, peer=peer, steps=rows,
                       bench_over_floor=med_worst([r["bench_us"] / r["floor_us"] for r in rows]))
        if cuda:
            summary["graph_over_floor"] = med_worst([r["graph_us"] / r["floor_us"] for r in rows])
            summary["bench_over_graph"] = med_worst([r["bench_us"] / r["graph_us"] for r in rows])
            summary["bench_over_cold_graph"] = med_worst([r["bench_us"] / r["graph_cold_us"] for r in rows])
        if peer and all(r["peer_us"] for r in rows):
            summary["ours_over_peer"] = med_worst([r["bench_us"] / r["peer_us"] for r in rows])
        out.append(summary)
        print(f"derived {path}: {summary['shape']}: " + ", ".join(
            f"{key} {v['median']:.2f} (worst {v['worst']:.2f})" for key, v in summary.items()
            if isinstance(v, dict) and "median" in v), file=sys.stderr)
    return out


def synthetic(V: int, steps: int, peers: Peers, cuda: bool, bw_gbs: float, shapes: dict) -> dict:
    """Part 2: SYNTHETIC fp32 steps, graph µs of ours and the peers (eager-cold for the R = 1 cases)."""
    dev = "cuda" if cuda else "cpu"
    out: dict = {}
    for name, (R, k, top_p, clock) in shapes.items():
        per_step = []
        for s in range(steps):
            inp = cases.Inputs.make(V, R, k, cases.Inputs.seed_of(V, R, k) + s, dev)
            x = cases.CaseInput(inp=inp, step=inp.step(top_p), top_p=top_p, peers=peers)
            timed = [t for case in (cases.ours, cases.vllm, cases.flashinfer) for t in case(x)
                     if isinstance(t, cases.Timed)]
            figures = {}
            for t in timed:
                if clock == "eager-cold" and t.impl not in ("stochastic", "gumbel-max"):
                    continue  # gumbel-max runs the same launches: its figure tells the clock from the impl
                if clock == "eager-cold":
                    figures[t.impl] = time_cold(t.fn, cuda, 25.0, 60.0)[0] if cuda else time_cpu(t.fn)[0]
                else:
                    figures[t.impl] = graph_us(t.fn, cuda) if cuda else time_cpu(t.fn)[0]
            fam = {t.impl: t.family for t in timed}
            ours_best = (figures["stochastic"] if clock == "eager-cold"
                         else min(v for i, v in figures.items() if fam[i] == "ours"))
            peer_figs = [v for i, v in figures.items() if fam[i] in PEER_FAMILIES]
            per_step.append(dict(seed=s, figures=figures, ours_best_us=ours_best,
                                 floor_us=inp.N * V * 4 / (bw_gbs * 1e3) if k else R * V * 4 / (bw_gbs * 1e3),
                                 fastest_peer_us=min(peer_figs) if peer_figs else None))
            del x, inp, timed
            if cuda:
                torch.cuda.empty_cache()
        row = dict(R=R, k=k, top_p=top_p, clock=clock, steps=per_step,
                   ours_us=med_worst([p["ours_best_us"] for p in per_step]),
                   over_floor=med_worst([p["ours_best_us"] / p["floor_us"] for p in per_step]))
        if clock == "eager-cold" and all("gumbel-max" in p["figures"] for p in per_step):
            row["gumbel_max_us"] = med_worst([p["figures"]["gumbel-max"] for p in per_step])  # the same clock
        if all(p["fastest_peer_us"] for p in per_step):
            row["over_fastest_peer"] = med_worst([p["ours_best_us"] / p["fastest_peer_us"] for p in per_step])
        out[name] = row
        print(f"synthetic {name}: ours {row['ours_us']['median']:.1f} us (median of {steps}), " + ", ".join(
            f"{key} {v['median']:.2f} (worst {v['worst']:.2f})" for key, v in row.items()
            if isinstance(v, dict) and "median" in v and key != "ours_us"), file=sys.stderr)
    a, b = out.get("verify k=4 top-p 0.9 R=256"), out.get("verify k=4 R=256")
    if a and b:
        out["top-p cost"] = med_worst([x["ours_best_us"] / y["ours_best_us"] for x, y in zip(a["steps"], b["steps"])])
    return out


def print_table(res: dict) -> None:
    def mw(d: dict, fmt: str = ".2f") -> str:
        return f"{d['median']:{fmt}} (worst {d['worst']:{fmt}}, {d['steps']} steps)" if d else "-"

    print(f"copy bandwidth {res['copy_gbs']:.0f} GB/s; device {res['device']}")
    print("| derived recording | shape | bench / floor | graph / floor | bench / graph | bench / cold-L2 graph "
          "| ours / peer |")
    print("|---|---|---|---|---|---|---|")
    for d in res["derived"]:
        s = d["shape"]
        print(f"| {Path(d['recording']).name} | R={s['R']} rows={s['rows']} V={s['V']} {s['dtype']} | "
              f"{mw(d['bench_over_floor'])} | {mw(d.get('graph_over_floor', {}))} | "
              f"{mw(d.get('bench_over_graph', {}))} | {mw(d.get('bench_over_cold_graph', {}))} | "
              f"{mw(d.get('ours_over_peer', {}))} ({d['peer']}) |")
    print("| SYNTHETIC fp32 case | clock | ours µs | ours / floor | ours / fastest peer |")
    print("|---|---|---|---|---|")
    for name, r in res["synthetic"].items():
        if name == "top-p cost":
            continue
        print(f"| {name} | {r['clock']} | {mw(r['ours_us'], '.1f')} | {mw(r['over_floor'])} | "
              f"{mw(r.get('over_fastest_peer', {}))} |")
    if "top-p cost" in res["synthetic"]:
        print(f"verify k=4 R=256: with top-p 0.9 / without: {mw(res['synthetic']['top-p cost'])}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--derived", nargs="*", default=[], help="derived recordings (replay synth), each >= 8 steps")
    ap.add_argument("--peer", default="vllm-mrv2", help="the --vs of the derived benches ('' for none)")
    ap.add_argument("--repeats", type=int, default=20, help="timed calls a step in the derived benches")
    ap.add_argument("--synthetic-steps", type=int, default=8, help="SYNTHETIC seeds a shape (0: skip part 2)")
    ap.add_argument("--vocab", type=int, default=248_320)
    ap.add_argument("--peers-dir", default=str(REPO / ".peers"))
    ap.add_argument("--cases", default=None, help="comma list of substrings: the SYNTHETIC cases to run (default all)")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke: V 4096, R <= 4, 2 seeds, no peers")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.tiny
    if args.repeats < 1 or args.synthetic_steps < 0:
        ap.exit(2, "floor_table: --repeats must be >= 1 and --synthetic-steps >= 0\n")
    device = torch.device("cuda" if cuda else "cpu")
    shapes = {"plain R=256": (256, 0, 1.0, "graph"), "verify k=4 R=256": (256, 4, 1.0, "graph"),
              "verify k=4 top-p 0.9 R=256": (256, 4, 0.9, "graph"), "verify k=4 R=64": (64, 4, 1.0, "graph"),
              "stochastic eager R=1 plain": (1, 0, 1.0, "eager-cold"),
              "stochastic eager R=1 top-p 0.9": (1, 0, 0.9, "eager-cold")}
    if args.tiny:
        args.vocab, args.synthetic_steps, args.peer = 4096, min(args.synthetic_steps, 2), ""
        shapes = {name.replace("R=256", "R=4").replace("R=64", "R=2"): (min(R, 4 if R > 64 else 2), k, tp, c)
                  for name, (R, k, tp, c) in shapes.items()}
    if args.cases:
        shapes = {n: v for n, v in shapes.items() if any(c in n for c in args.cases.split(","))}
    bw = copy_bandwidth(cuda, 2.0 if cuda else 0.0)["gbps"]
    peers = Peers().load(args.peers_dir, cuda=cuda, skip=args.tiny)
    res = dict(device=torch.cuda.get_device_name() if cuda else "cpu (TRITON_INTERPRET)", copy_gbs=bw,
               peers=peers.status, command=" ".join(["floor_table.py", *(sys.argv[1:] if argv is None else argv)]))
    res["derived"] = derived(args.derived, args.peer or None, device, bw, args.repeats)
    res["synthetic"] = synthetic(args.vocab, args.synthetic_steps, peers, cuda, bw, shapes) if args.synthetic_steps else {}
    print_table(res)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
