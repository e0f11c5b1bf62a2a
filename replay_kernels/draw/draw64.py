"""The draw under the ``mrv2-fp64`` contract (vLLM's ``use_fp64_gumbel``): argmax or Gumbel-max in float64.

The twin of :mod:`replay_kernels.draw.draw` for requests whose recording's contract is ``mrv2-fp64``: the same draw
plan (``mode``, ``row``, ``slot``, the rejected draft and the LSEs of a residual), the same processed or residual
float32 scores, but each score is widened to float64 and gets the contract's float64 noise
(``rng.gumbel_noise64``: two murmur3 hashes, a 53-bit uniform, ``-log(-log(u))``), as the oracle's
``walk.gumbel_draw(fp64=True)``. The pruning of the float32 draw bounds the noise from one 32-bit hash; the fp64
noise takes its high 32 bits from the second hash, so that pruning does not apply. What prunes here: the bound of
every fp64 noise value, ``walk.NOISE_HIGH_FP64`` (38; the noise is at most 37.5 since ``1 - u >= 2**-54``), then a
bound from the second hash ``hi`` alone: ``-log(-log u) <= -log(1 - u)`` and ``1 - u > (2**32 - 1 - hi) 2**-32``, so
the noise is at most ``rng.gumbel_upper_bound(~hi)`` (the float32 draw's bound of ``-log(h 2**-32)``, with its
slack). A tile none of whose lanes' ``x + bound`` reaches the program's best cannot hold the winner (nor tie it) and
skips the first hash and the two float64 logs.

Kernel, grid and bytes (R requests, V vocabulary): :func:`_draw64_kernel` grid ``(R, SPLITS)``, program (r, s)
reads span s of the plan's row once (4 or 2 B an element; the rejected draft's row too for a residual with draft
logits), computes the second hash for the tiles within 38 of its best and two hashes and two float64 logs for the
lanes of the tiles that pass the hash's bound, stores a float64
partial (score, index); the last program of the row to arrive (``partials.last_to_arrive``) reduces the SPLITS
partials (largest score, then smallest index), writes the token, the count and the -1 pads. One launch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..filters.params import process_loaded
from ..shared.partials import last_to_arrive
from ..shared.rng import (better, gumbel_noise64, gumbel_upper_bound, murmur3_finish, murmur3_row_key,
                          murmur3_row_key_hi)
from .draw import MODE_GREEDY, MODE_NONE, MODE_RESIDUAL, _residual, splits_for

NOISE_HIGH_FP64 = tl.constexpr(38.0)  # every fp64 noise value is below it (oracle walk.NOISE_HIGH_FP64)
DRAW64_BLOCK = 1024
DRAW64_PROGRAMS = 1024  # programs per launch the splitting aims at (draw.DRAW_PROGRAMS)
REDUCE64_CHUNK = 128


@triton.jit
def _draw64_kernel(logits_ptr, l_stride, draft_ptr, d_stride, mode_ptr, row_ptr, slot_ptr, drow_ptr, dtok_ptr,
                   lse_t_ptr, lse_q_ptr, temp_div_ptr, cut_val_ptr, cut_idx_ptr, req_temp_ptr, seed_ptr, pos_ptr,
                   part_max_ptr, part_arg_ptr, arrivals_ptr, counts_ptr, tokens_ptr, tok_stride, V, W, span, SPLITS,
                   HAS_DRAFT: tl.constexpr, BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    """Grid (R, SPLITS): program (r, s) draws span s of request r's plan in float64; the last program of the row
    to arrive writes the token at ``slot[r]``, the count (``counts[r]``, set by the walk) and the -1 pads. A row
    with nothing to draw (``MODE_NONE``): its program 0 writes the pads, the others exit."""
    r = tl.program_id(0)
    s = tl.program_id(1)
    mode = tl.load(mode_ptr + r)
    best = tl.full((), float("-inf"), tl.float64)
    best_idx = tl.zeros((), tl.int32)
    if mode != MODE_NONE:
        row = tl.load(row_ptr + r)
        row_base = logits_ptr + row.to(tl.int64) * l_stride
        lo = s * span
        hi = tl.minimum(lo + span, V)
        if mode == MODE_GREEDY:  # the first index of the largest raw value (NaN read as -inf)
            for start in range(lo, hi, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                raw = tl.load(row_base + offs, mask=offs < hi, other=float("-inf")).to(tl.float32)
                raw = tl.where(raw != raw, float("-inf"), raw).to(tl.float64)
                m, a = tl.max(raw, axis=0, return_indices=True)
                if m > best:
                    best = m
                    best_idx = start + a
        else:
            t = tl.load(temp_div_ptr + row)
            cv = tl.load(cut_val_ptr + row)
            ci = tl.load(cut_idx_ptr + row)
            seed = tl.load(seed_ptr + r)
            pos = tl.load(pos_ptr + row)
            key_lo = murmur3_row_key(seed, pos)
            key_hi = murmur3_row_key_hi(seed, pos)
            for start in range(lo, hi, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                valid = offs < hi
                x = process_loaded(tl.load(row_base + offs, mask=valid, other=float("-inf")), offs, t, cv, ci)
                if mode == MODE_RESIDUAL:
                    x = _residual(x, offs, valid, r, draft_ptr, d_stride, drow_ptr, dtok_ptr, lse_t_ptr, lse_q_ptr,
                                  req_temp_ptr, HAS_DRAFT)
                x = tl.where(x != x, float("-inf"), x)
                # no lane of the tile can reach the best (nor tie it: the noise is strictly below the bound), first
                # by the bound of every fp64 noise value, then lane by lane from the second hash alone
                go = tl.max(x, axis=0).to(tl.float64) + NOISE_HIGH_FP64 >= best
                if go:
                    ub = x + gumbel_upper_bound(~murmur3_finish(key_hi, offs))
                    go = tl.max(ub, axis=0).to(tl.float64) >= best
                if go:
                    score = x.to(tl.float64) + gumbel_noise64(key_lo, key_hi, offs)
                    score = tl.where(valid & (score == score), score, float("-inf"))
                    m, a = tl.max(score, axis=0, return_indices=True)
                    if better(m, start + a, best, best_idx):
                        best = m
                        best_idx = start + a
    finish = s == 0
    if mode != MODE_NONE:
        tl.store(part_max_ptr + r * SPLITS + s, best)
        tl.store(part_arg_ptr + r * SPLITS + s, best_idx)
        finish = last_to_arrive(arrivals_ptr, r, SPLITS)
    if finish:
        count = tl.load(counts_ptr + r)
        if mode != MODE_NONE:
            top = tl.full((), float("-inf"), tl.float64)
            token = tl.zeros((), tl.int32)
            for c in range(0, SPLITS, CHUNK):
                offs = c + tl.arange(0, CHUNK)
                ok = offs < SPLITS
                m = tl.load(part_max_ptr + r * SPLITS + offs, mask=ok, other=float("-inf"), cache_modifier=".cg")
                a = tl.load(part_arg_ptr + r * SPLITS + offs, mask=ok, other=0, cache_modifier=".cg")
                cm = tl.max(m, axis=0)
                ca = tl.min(tl.where((m == cm) & ok, a, 2147483647), axis=0)
                take = better(cm, ca, top, token)
                token = tl.where(take, ca, token)
                top = tl.where(take, cm, top)
            tl.store(tokens_ptr + r * tok_stride + tl.load(slot_ptr + r), token.to(tl.int64))
        for j in range(count, W):
            tl.store(tokens_ptr + r * tok_stride + j, -1)


@dataclass
class Draw64Scratch:
    """Scratch of :func:`_draw64_kernel` for R rows: float64 / int32 partials [R, splits], arrival counters [R]
    int32 (zero between launches: the last program of a row resets its counter); ``splits`` programs a row, each
    ``span`` elements (a multiple of the tile)."""

    part_max: torch.Tensor
    part_arg: torch.Tensor
    arrivals: torch.Tensor
    splits: int
    span: int
    block: int = DRAW64_BLOCK

    @classmethod
    def allocate(cls, num_rows: int, vocab: int, device, block: int = DRAW64_BLOCK,
                 programs: int = DRAW64_PROGRAMS) -> "Draw64Scratch":
        splits, span = splits_for(num_rows, vocab, block, programs)
        rows = max(num_rows, 1)
        return cls(part_max=torch.empty((rows, splits), dtype=torch.float64, device=device),
                   part_arg=torch.empty((rows, splits), dtype=torch.int32, device=device),
                   arrivals=torch.zeros(rows, dtype=torch.int32, device=device), splits=splits, span=span,
                   block=block)
