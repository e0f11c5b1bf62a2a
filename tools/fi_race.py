#!/usr/bin/env python3
"""``stochastic`` against every FlashInfer sampling path of the same semantics, one FlashInfer version a process
(issue 68; tools/run_gpu_fi_race.sh runs it once under 0.6.18.post1 and once under 0.7.2.post1, then --table).

GPU, FlashInfer installed on PYTHONPATH (gpu_env.py loads its prebuilt modules, never JIT):
    python3 tools/fi_race.py --peers .peers --label fi0.7 --csv $OUT/fi07.csv
    python3 tools/fi_race.py --table $OUT/fi06.csv $OUT/fi07.csv > $OUT/fi_race.md
CPU smoke (TRITON_INTERPRET=1, no FlashInfer: ours only, tiny V):
    python3 tools/fi_race.py --vocab 1000 --requests 1 2 --seeds 1 --csv /tmp/fi_race.csv

SYNTHETIC inputs (bench.kernels.cases.Inputs: randn x 3 plus one peak a row, at temperature 1), V = 248,320 by
default, float32 and bfloat16, R = 1, 64, 256. Cases and the FlashInfer paths timed for each (a path that raises on
its first call, or is absent from the installed version, is a skip with its reason):

    top-k K (50, 1024)     top_k_top_p_sampling_from_logits(x, K, 1.0) (0.7: the top_k_first fast path for K <= 256),
                           top_k_sampling_from_probs(softmax(x), K), cake top_k_top_p_sampling_from_probs(softmax(x), K, 1.0)
    top-p 0.9              top_p_sampling_from_probs(softmax(x), 0.9)
    top-k 50 + top-p 0.9   top_k_top_p_sampling_from_logits(x, 50, 0.9), cake (softmax + cake_top_k_top_p ... )
    verify k = 4           chain_speculative_sampling(one-hot draft probs, drafts, softmax(x)) (and with the target
                           probabilities given: FlashInfer's own input, not ours)

Clock: each path's launches captured in a CUDA graph (bench.timing.time_graph; R = 1 with the L2 evicted before each
launch, as eager requests meet it), the impls in a rotating order per seed; ``--seeds`` seeds a shape (median and
worst). Every figure is a row of the CSV (label, case, dtype, R, impl, family, seed, us, bytes); ``--table`` reads
CSVs of several labels and prints, per (case, dtype, R), ours, each label's fastest path, and ours / fastest
(the median over seeds of the per-seed ratio, and the worst seed). Exit 0; 2 bad option.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from replay_harness.bench.kernels.cases import Inputs  # noqa: E402
from replay_harness.bench.timing import time_cpu, time_graph  # noqa: E402
from replay_harness.impls import get_impl  # noqa: E402

CASES = {  # name: (top_k (0 = off), top_p, drafts)
    "top-k 50": (50, 1.0, 0), "top-k 1024": (1024, 1.0, 0), "top-p 0.9": (0, 0.9, 0),
    "top-k 50 + top-p 0.9": (50, 0.9, 0), "verify k=4": (0, 1.0, 4)}
FIELDS = ("label", "case", "dtype", "R", "impl", "family", "seed", "us", "bytes")


def fi_paths(fi, cake, x: torch.Tensor, top_k: int, top_p: float, inp: Inputs) -> dict:
    """{path name: zero-argument call} of FlashInfer for one case on logits ``x`` [N, V] (temperature 1)."""
    paths = {}
    if inp.k:
        R, k, V = inp.R, inp.k, inp.V
        dids = inp.draft_ids.view(R, k + 1)[:, :k].contiguous()
        dprobs = torch.zeros(R, k, V, dtype=torch.float32, device=x.device)
        dprobs.scatter_(2, dids.long().unsqueeze(-1), 1.0)
        tprobs = fi.softmax(x).view(R, k + 1, V)
        paths["softmax+chain_speculative"] = lambda: fi.chain_speculative_sampling(
            dprobs, dids, fi.softmax(x).view(R, k + 1, V), seed=0, offset=0)
        paths["chain_speculative(probs given)"] = lambda: fi.chain_speculative_sampling(
            dprobs, dids, tprobs, seed=0, offset=0)
        return paths
    if top_k:
        paths[f"top_k_top_p_from_logits(k={top_k},p={top_p})"] = lambda: fi.top_k_top_p_sampling_from_logits(
            x, top_k, top_p, seed=0, offset=0)
        if cake is not None:
            paths["softmax+cake"] = lambda: cake(fi.softmax(x), top_k, top_p, philox_seed=0, philox_offset=0)
        if top_p >= 1.0:
            paths["softmax+top_k_from_probs"] = lambda: fi.top_k_sampling_from_probs(
                fi.softmax(x), top_k, seed=0, offset=0)
    else:
        paths["softmax+top_p_from_probs"] = lambda: fi.top_p_sampling_from_probs(fi.softmax(x), top_p, seed=0,
                                                                                 offset=0)
    return paths


def load_fi(peers: str | None):
    """(flashinfer module or None, cake sampler or None, status line)."""
    if peers is None or not torch.cuda.is_available():
        return None, None, "FlashInfer not loaded (no --peers, or no GPU)"
    sys.path.insert(0, str(Path(peers).resolve()))
    import gpu_env  # the peers kit's loader (../shared/peers/README.md)
    try:
        fi = gpu_env.load_flashinfer(peers, allow_jit=False, cake=True)
    except Exception as e:  # noqa: BLE001  (PeerUnavailable and import errors: a skip, with why)
        return None, None, f"FlashInfer unavailable: {type(e).__name__}: {e}"
    cake = getattr(fi, "cake_top_k_top_p_sampling_from_probs", None)
    state = gpu_env.LOADED.get("cake_sampling", "?") if hasattr(gpu_env, "LOADED") else "?"
    return fi, cake, f"FlashInfer {fi.__version__}; cake: {state}"


def race(args, emit) -> None:
    """Time every case; ``emit(row)`` each figure as it is measured (a killed run keeps what it wrote)."""
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    fi, cake, status = load_fi(args.peers)
    print(status, file=sys.stderr)
    for case in args.cases:
        top_k, top_p, k = CASES[case]
        for dtype in args.dtypes:
            for R in args.requests:
                for seed in range(args.seeds):
                    inp = Inputs.make(args.vocab, R, k, Inputs.seed_of(args.vocab, R, k) + seed, dev)
                    x = inp.logits.to(getattr(torch, dtype))
                    step = inp.step(top_p, top_k)
                    step.logits = x
                    impl = get_impl("stochastic")
                    calls = {"stochastic": ("ours", _bound(impl, step))}
                    skips = {}
                    if fi is not None:
                        for name, fn in fi_paths(fi, cake, x, top_k, top_p, inp).items():
                            try:
                                fn()
                                torch.cuda.synchronize()
                                calls[name] = ("flashinfer", fn)
                            except Exception as e:  # noqa: BLE001
                                skips[name] = f"{type(e).__name__}: {str(e)[:160]}"
                    names = list(calls)
                    shift = seed % len(names)
                    timed = []
                    for name in names[shift:] + names[:shift]:
                        fam, fn = calls[name]
                        try:
                            us = time_graph(fn, 16, 40.0, cold=R == 1)[0] if cuda else time_cpu(fn)[0]
                        except Exception as e:  # noqa: BLE001  (a path that cannot be captured in a graph)
                            skips[name] = f"not timed: {type(e).__name__}: {str(e)[:160]}"
                            continue
                        timed.append(f"{name} {us:.1f}")
                        emit(dict(label=args.label, case=case, dtype=dtype, R=R, impl=name, family=fam,
                                  seed=seed, us=round(us, 3), bytes=inp.N * inp.V * x.element_size()))
                    if seed == 0:
                        line = ", ".join(timed)
                        print(f"{args.label} {case} {dtype} R={R}: {line}"
                              + "".join(f"; skip {n}: {why}" for n, why in skips.items()), file=sys.stderr)
                    del inp, x, step, calls
                    if cuda:
                        torch.cuda.empty_cache()


def _bound(impl, step):
    state = impl.prepare(step)
    return lambda: impl.launch(state)


def table(paths: list[str]) -> str:
    """Markdown: per (case, dtype, R) ours and each label's fastest FlashInfer path, with ours / fastest."""
    by = defaultdict(lambda: defaultdict(dict))  # (case, dtype, R) -> label -> impl -> {seed: us}
    labels = []
    for p in paths:
        with open(p, newline="") as f:
            for r in csv.DictReader(f):
                if r["label"] not in labels:
                    labels.append(r["label"])
                by[(r["case"], r["dtype"], int(r["R"]))][r["label"]].setdefault(r["impl"], {})[int(r["seed"])] = \
                    float(r["us"])
    head = ["case", "dtype", "R", "stochastic µs"] + [f"fastest {lb} (µs)" for lb in labels] + \
        [f"ours / {lb} (worst)" for lb in labels]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in sorted(by, key=lambda t: (list(CASES).index(t[0]) if t[0] in CASES else 99, t[1], t[2])):
        ours_by_label = {lb: d.get("stochastic", {}) for lb, d in by[key].items()}
        ours_all = [v for d in ours_by_label.values() for v in d.values()]
        cells = [key[0], key[1], str(key[2]), f"{statistics.median(ours_all):.1f}" if ours_all else "-"]
        ratios = []
        for lb in labels:
            d = by[key].get(lb, {})
            peers = {i: s for i, s in d.items() if i != "stochastic"}
            if not peers:
                cells.append("-")
                ratios.append("-")
                continue
            best = min(peers, key=lambda i: statistics.median(peers[i].values()))
            cells.append(f"{best} {statistics.median(peers[best].values()):.1f}")
            ours = ours_by_label.get(lb, {})
            per_seed = [ours[s] / min(p[s] for p in peers.values() if s in p) for s in ours
                        if any(s in p for p in peers.values())]
            ratios.append(f"{statistics.median(per_seed):.2f} ({max(per_seed):.2f})" if per_seed else "-")
        out.append("| " + " | ".join(cells + ratios) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", nargs="+", metavar="CSV", help="print the table of these CSVs and exit")
    ap.add_argument("--peers", default=None, help="the peers folder (.peers) whose gpu_env.py loads FlashInfer")
    ap.add_argument("--label", default="fi", help="this run's label in the CSV (e.g. fi0.6, fi0.7)")
    ap.add_argument("--csv", default=None, help="write the figures here")
    ap.add_argument("--vocab", type=int, default=248320)
    ap.add_argument("--requests", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES), metavar="CASE")
    ap.add_argument("--seeds", type=int, default=8, help="SYNTHETIC seeds a shape (default 8)")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    f = open(args.csv, "w", newline="") if args.csv else None
    w = csv.DictWriter(f, fieldnames=FIELDS) if f else None
    if w:
        w.writeheader()

    def emit(row: dict) -> None:
        if w:
            w.writerow(row)
            f.flush()

    race(args, emit)
    if f:
        f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
