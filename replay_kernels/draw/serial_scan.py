"""``serial-scan``: one program per row, a scalar loop over the whole vocabulary (the slow engine kernel).

Kept as the baseline the founding engine shipped: one thread per row. Grid ``(R,)``,
``num_warps=1``; reads each row once (V x 4 B fp32) in V dependent scalar steps;
writes the token row (token or -1 pads) and the count. Same tokens as ``reference``
on k = 0 requests; requests with drafts are refused (:mod:`replay_kernels.draw.plain`).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .draw import MODE_GREEDY, MODE_NONE
from ..shared.launches import launch
from .plain import PlainSampler, PlainState
from ..shared.rng import gumbel_noise


@triton.jit
def _serial_scan_kernel(logits_ptr, l_stride, mode_ptr, row_ptr, temp_div_ptr, cut_val_ptr, cut_idx_ptr,
                        seed_ptr, pos_ptr, count_src_ptr, counts_ptr, tokens_ptr, tok_stride, V, W):
    r = tl.program_id(0)
    mode = tl.load(mode_ptr + r)
    count = tl.load(count_src_ptr + r)
    if mode != MODE_NONE:
        row = tl.load(row_ptr + r)
        row_base = logits_ptr + row.to(tl.int64) * l_stride
        t = tl.load(temp_div_ptr + row)
        cv = tl.load(cut_val_ptr + row)
        ci = tl.load(cut_idx_ptr + row)
        seed = tl.load(seed_ptr + r)
        pos = tl.load(pos_ptr + row)
        greedy = mode == MODE_GREEDY
        best = tl.full((), float("-inf"), tl.float32)
        best_idx = tl.zeros((), tl.int32)
        zero = tl.zeros((), tl.int32)
        for v0 in range(0, V):
            v = v0 + zero  # a tensor under the interpreter too
            raw = tl.load(row_base + v).to(tl.float32)
            if greedy:
                s = raw
            else:
                x = tl.math.div_rn(raw, t)
                keep = (x > cv) | ((x == cv) & (v >= ci))
                x = tl.where(keep, x, float("-inf"))
                s = x + gumbel_noise(seed, pos, v)
            better = s > best  # NaN never wins: read as -inf
            best_idx = tl.where(better, v, best_idx)
            best = tl.where(better, s, best)
        tl.store(tokens_ptr + r * tok_stride, best_idx.to(tl.int64))
    for j in range(count, W):
        tl.store(tokens_ptr + r * tok_stride + j, -1)
    tl.store(counts_ptr + r, count)


class SerialScanSampler(PlainSampler):
    """One program per row, scalar loop over the whole vocabulary (reproduces the slow engine kernel)."""

    name = "serial-scan"
    description = "serial one-thread-per-row Gumbel-max scan (k = 0), the slow engine kernel, Triton"

    def _draw(self, s: PlainState, mode, cut_val, cut_idx, scratch) -> None:
        launch(_serial_scan_kernel, (s.mode.numel(),),
               s.logits, s.logits.stride(0), mode, s.row, s.params.temp_div, cut_val, cut_idx,
               s.seed, s.positions, s.counts_init, s.counts, s.tokens, s.tokens.stride(0),
               s.logits.shape[1], s.tokens.shape[1], num_warps=1)
