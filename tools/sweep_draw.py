#!/usr/bin/env python3
"""Sweep the draw kernel's tile and program count on the first step of recordings (GPU; offline tuning).

    python tools/sweep_draw.py /tmp/real_rows/qwen-R256k0 [more recordings] [--blocks 1024,2048,4096]
        [--programs 1024,2048,4096,8192]

For each recording: ``gumbel-max`` (k = 0 steps) or ``stochastic`` (verify steps) built with each
(block, programs), timed with ``triton.testing.do_bench`` (L2 flushed before every call, median µs), its
tokens checked equal to the default configuration's. Prints one table per recording; the defaults in
replay_kernels/draw/draw.py come from runs of this script (docs/KERNELS.md "The draw").
"""
from __future__ import annotations

import argparse
import itertools

import torch
import triton.testing

from replay_harness.recording.store import Recording
from replay_kernels.draw.gumbel_max import GumbelMaxSampler
from replay_kernels.verify.stochastic import StochasticSampler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recordings", nargs="+")
    ap.add_argument("--blocks", default="1024,2048,4096")
    ap.add_argument("--programs", default="1024,2048,4096,8192")
    args = ap.parse_args()
    blocks = [int(x) for x in args.blocks.split(",")]
    programs = [int(x) for x in args.programs.split(",")]
    for path in args.recordings:
        step = Recording(path)[0].step.to("cuda")
        plain = int(step.num_drafts.max()) == 0 if step.num_requests else True
        make = ((lambda b, p: GumbelMaxSampler(block=b, programs=p)) if plain
                else (lambda b, p: StochasticSampler(draw_block=b, programs=p)))
        want = make(2048, 1024).sample(step).tokens.cpu()
        nbytes = step.logits.numel() * step.logits.element_size()
        print(f"\n{path}: {'gumbel-max' if plain else 'stochastic'}, logits {tuple(step.logits.shape)} "
              f"{step.logits.dtype}, {nbytes / 1e6:.1f} MB")
        print("| block | programs | median µs | GB/s | tokens |")
        print("|---:|---:|---:|---:|---|")
        for b, p in itertools.product(blocks, programs):
            impl = make(b, p)
            state = impl.prepare(step)
            us = triton.testing.do_bench(lambda: impl.launch(state), warmup=25, rep=100) * 1e3
            same = torch.equal(impl.launch(state)[0].cpu(), want)
            print(f"| {b} | {p} | {us:.1f} | {nbytes / us / 1e3:.0f} | {'same' if same else 'DIFFERENT'} |", flush=True)


if __name__ == "__main__":
    main()
