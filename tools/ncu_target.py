"""Launch one impl on one SYNTHETIC production shape a few times, for Nsight Compute to profile.

    ncu --section SpeedOfLight --kernel-name regex:_draw_kernel --launch-skip 2 --launch-count 1 \
        python tools/ncu_target.py --impl gumbel-max --R 256 --k 0 --V 248320 [--top-p 0.9] [--top-k 50]

Inputs are replay_harness.bench.kernels.cases.Inputs (randn*3 plus one peak per row, temperature 1), or with
``--source REC`` the first step derived from a real recording at (R, k), widened to V = 248,320
(``tools/ab_kernels.py``'s real-row cases: ``--source fixtures/real-draft-model`` is Qwen2.5).
"""
from __future__ import annotations

import argparse

import torch

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.impls import get_impl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", default="stochastic")
    ap.add_argument("--R", type=int, default=256)
    ap.add_argument("--k", type=int, default=0)
    ap.add_argument("--V", type=int, default=248320)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0, help="top-k of every request (default 0: off)")
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--source", default=None, help="a real recording to derive the step from (V = 248,320)")
    args = ap.parse_args()
    if args.source:
        from ab_kernels import make_step  # tools/ab_kernels.py, next to this script

        step = make_step(args.source, args.R, args.k, args.top_p, 0, args.top_k)
    else:
        step = Inputs.make(args.V, args.R, args.k, seed=0, device="cuda").step(args.top_p, args.top_k)
    impl = get_impl(args.impl)
    state = impl.prepare(step)
    for _ in range(args.launches):
        impl.launch(state)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
