#!/usr/bin/env python3
"""Build, check and time the project's sampler kernels next to the peers, in ONE run.

GPU (H200):   bash tools/run_gpu_bench.sh            (installs the peers, sets PYTHONPATH, runs this)
CPU smoke:    python tools/bench_kernels.py --quick  (TRITON_INTERPRET=1, V=1000, two tiny shapes)

Phases, per shape (V, R, k), inputs allocated once per shape and freed after it:
  1. correctness: our impls' tokens/counts vs the torch ``reference`` (CPU copy of the sampled
     requests; all requests when R <= 8, else --check-requests of them), mismatches classified with
     ``near_tie.is_near_tie``; vLLM MRV2 token parity (same RNG contract) as information;
     determinism: repeated launches give bit-identical tokens. Mismatches never stop the timing.
  2. timing, impls interleaved per shape: eager-cold (triton do_bench, L2 flushed; --rounds rounds
     in alternating impl order), eager-warm (back-to-back calls, CUDA events), graph (G launches
     captured in one CUDAGraph, replays timed, divided by G).

Bytes per row of results (the floor each impl must move at least):
  plain (k=0): R*V*4 (logits read once); verify: N*V*4, N = R*(k+1); FlashInfer's chain sampler
  adds its draft probabilities R*k*V*4. GB/s = bytes / median; floor_us = bytes / copy bandwidth.

Writes OUT/bench.json, OUT/bench.csv (the long layout of replay_harness.bench.csvlog, shared with
`replay bench --csv`) and OUT/bench.md, and prints the headline table last. The work is done by
replay_harness.bench.kernels (cases.py holds the case table); this script only reads its options.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench_out", help="results folder (default $OUT)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny CPU smoke under TRITON_INTERPRET=1: V=1000, shapes R1k0 and R2k4")
    ap.add_argument("--vocab", default=None, help="comma list of vocab sizes (default 248320,151936,32000)")
    ap.add_argument("--cases", default=None,
                    help="comma list of shape filters: labels like R64k4, or 'plain' (k=0) / 'verify' (k>0)")
    ap.add_argument("--impls", default=None, help="comma list of substrings of impl names to time")
    ap.add_argument("--top-p", default=None, help="comma list of top_p values (default 1.0,0.9)")
    ap.add_argument("--top-k", type=int, default=0, help="top-k of every request, with each --top-p (default 0: off)")
    ap.add_argument("--no-peers", action="store_true", help="do not load FlashInfer / vLLM")
    ap.add_argument("--peers-dir", default=str(REPO / ".peers"))
    ap.add_argument("--no-jit", action="store_true", help="refuse a FlashInfer JIT build (prebuilt only)")
    ap.add_argument("--skip-correctness", action="store_true")
    ap.add_argument("--check-requests", type=int, default=8, help="requests checked vs reference when R > 8")
    ap.add_argument("--det-launches", type=int, default=None,
                    help="repeated launches of the determinism check (default 100; 5 with --quick)")
    ap.add_argument("--warmup", type=float, default=25.0, help="do_bench warmup, ms")
    ap.add_argument("--rep", type=float, default=60.0, help="do_bench rep, ms")
    ap.add_argument("--rounds", type=int, default=None,
                    help="eager-cold rounds (alternating impl order; default 2, 1 with --quick)")
    ap.add_argument("--warm-ms", type=float, default=30.0, help="target time of the eager-warm loop, ms")
    ap.add_argument("--graph-ms", type=float, default=40.0, help="target time of the graph replays, ms")
    ap.add_argument("--graph-launches", type=int, default=16, help="launches captured per graph")
    ap.add_argument("--copy-gib", type=float, default=2.0, help="size of the copy-bandwidth test, GiB")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="stop starting new timings after this many seconds (outputs are still written)")
    args = ap.parse_args(argv)
    # the interpreter is slow: fewer repeats in quick mode (explicit flags still win)
    if args.det_launches is None:
        args.det_launches = 5 if args.quick else 100
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede any Triton kernel definition
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(REPO))
    from replay_harness.bench.kernels.run import run
    from replay_harness.bench.kernels.settings import Settings

    opts = vars(args)
    return run(Settings.from_options(cuda=torch.cuda.is_available() and not args.quick, **opts))


if __name__ == "__main__":
    sys.exit(main())
