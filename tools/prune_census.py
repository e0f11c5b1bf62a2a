#!/usr/bin/env python3
"""How much of a plain step the `mrv2` contract lets the pruned draw skip (CPU, exact; docs/KERNELS.md "Where the
floor is not reached").

    python tools/prune_census.py /tmp/ft/qwen-R256k0 /tmp/ft/smol-R256k0 [--steps 0] [--tile 512]

For each request of the step's plain rows (k = 0) at temperature T > 0: its best Gumbel score ``b = max_v (x_v / T
+ g_v)`` with the contract's own noise (``replay_harness.oracle.rng.gumbel_row``), then

* the tiles (``--tile`` lanes, the draw's tile from 8 rows) whose largest value plus ``cut`` reaches ``b``:
  the draw must hash every lane of those tiles whatever order its programs run in (test 1 of docs/KERNELS.md "The
  draw" against the row's final best, the highest threshold it can ever have);
* the tokens within ``cut`` of ``b``.

``cut`` is the noise bound of the tokens the launch does not list, for the step's number of rows
(:func:`listed_count`, from the launch's own scratch; 13.2 at R = 256). Greedy rows (T = 0) are an argmax and hash
nothing. The table gives, per temperature over the ``--steps`` (and over every plain row: "all"), the rows and the
mean and median of both fractions. Synthetic recordings (from `replay synth`) are what the floor table benches; any
recording with plain steps works.
"""
from __future__ import annotations

import argparse
import math
import statistics
import struct

import torch

from replay_harness.oracle.rng import gumbel_row
from replay_harness.recording.store import Recording
from replay_kernels.draw.draw import DrawScratch, draw_shape


def listed_count(rows: int, vocab: int) -> int:
    """The hashes each row of a draw launch over ``rows`` rows lists: ``HASHES x SPLITS`` of its scratch."""
    scratch = DrawScratch.allocate(rows, vocab, None, "cpu")
    return scratch.hashes * scratch.splits


def noise_cut(rows: int, vocab: int) -> float:
    """``gumbel_upper_bound(H) + 0.001`` (the draw's ``cut``) for a launch of ``rows`` rows: H =
    :func:`listed_count`. Python twin of ``rng.gumbel_upper_bound``: (159 - bits(fp32(H)) / 2^23) ln 2 + 0.01."""
    h = listed_count(rows, vocab)
    bits = struct.unpack("<I", struct.pack("<f", float(h)))[0]
    return (159.0 - bits / 2**23) * math.log(2.0) + 0.01 + 0.001


def census(path: str, step_index: int, tile: int) -> dict[float, list[tuple[float, float]]]:
    """{temperature: [(fraction of tiles within cut, fraction of tokens within cut) per plain row]}."""
    step = Recording(path)[step_index].step
    cu = step.cu_num_logits.tolist()
    logits = step.logits.float()
    rows, vocab = len(cu) - 1, logits.shape[1]
    cut = noise_cut(rows, vocab)
    tiles = math.ceil(vocab / tile)
    out: dict[float, list[tuple[float, float]]] = {}
    for r in range(rows):
        if cu[r + 1] - cu[r] != 1:
            continue  # a request with drafts: not a plain row
        t = float(step.temperature[r])
        if t == 0.0:
            out.setdefault(t, []).append((0.0, 0.0))
            continue
        x = logits[cu[r]] / t
        best = float((x + gumbel_row(int(step.seed[r]), int(step.positions[cu[r]]), vocab)).max())
        padded = torch.cat([x, torch.full((tiles * tile - vocab,), float("-inf"))]).view(tiles, tile)
        out.setdefault(t, []).append((float((padded.max(1).values + cut >= best).float().mean()),
                                      float((x + cut >= best).float().mean())))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recordings", nargs="+")
    ap.add_argument("--steps", default="0", help="comma list of step indices (default 0)")
    ap.add_argument("--tile", type=int, default=draw_shape(256)[0],
                    help="lanes a tile (default: the draw's from 8 rows)")
    args = ap.parse_args()
    print("| recording | steps | T | rows | tiles to hash: mean (median) | tokens within the cut: mean |")
    print("|---|---:|---:|---:|---|---:|")
    for path in args.recordings:
        steps = [int(v) for v in args.steps.split(",")]
        rows: dict[float, list[tuple[float, float]]] = {}
        for s in steps:
            for t, v in census(path, s, args.tile).items():
                rows.setdefault(t, []).extend(v)
        every = [v for t in sorted(rows) for v in rows[t]]
        for t, v in sorted(rows.items()) + [("all", every)]:
            tiles, tokens = [a for a, _ in v], [b for _, b in v]
            label = t if isinstance(t, str) else f"{t:.2f}"
            print(f"| {path} | {len(steps)} | {label} | {len(v)} | {statistics.mean(tiles):.4f} "
                  f"({statistics.median(tiles):.4f}) | {statistics.mean(tokens):.5f} |")

if __name__ == "__main__":
    main()
