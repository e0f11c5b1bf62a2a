"""``gumbel-max``: the parallel plain sampler (k = 0), one launch of the pruned draw kernel.

Launches per step: the split-row filter passes of :mod:`replay_kernels.filters.filters` (steps with
min-p / top-k / top-p rows only; rows whose top-k bound is gathered, :mod:`replay_kernels.filters.topk_gather`, are
drawn there from their candidates), then ``draw._draw_kernel`` over grid ``(R, SPLITS)``. Bytes: each row read once
(N x V x 4 B for fp32 logits; 2 B for bf16), tokens and counts written once.
See :mod:`replay_kernels.draw.draw` for the pruning and :mod:`replay_kernels.draw.plain`
for the refusal of requests with drafts.
"""
from __future__ import annotations

from .draw import REDUCE_CHUNK, _draw_kernel
from ..shared.launches import launch
from .plain import PlainSampler, PlainState


class GumbelMaxSampler(PlainSampler):
    """Parallel Gumbel-max: each row split over ``SPLITS`` programs that prune, reduced by the last to finish."""

    name = "gumbel-max"
    description = "parallel Gumbel-max plain sampler (k = 0), pruned, one launch (rows x splits), Triton"

    sample_check = True
    draw_candidates = True

    def _draw(self, s: PlainState, mode, cut_val, cut_idx, d, rows=None) -> None:
        p = s.params
        grid, list_rows, list_len = d.launch_over(s.mode.numel(), rows)
        launch(
            _draw_kernel, grid, s.logits, s.logits.stride(0), s.dummy_f32, 0,
            mode, s.row, s.slot, s.dummy_i32, s.dummy_i32, s.dummy_f32, s.dummy_f32,
            p.temp_div, cut_val, cut_idx, s.dummy_f32, s.seed, s.positions,
            d.part_max, d.part_arg, d.arrivals, d.row_best, s.counts_init, s.counts, s.tokens,
            s.tokens.stride(0), d.part_top, d.top, list_rows, list_len, s.logits.shape[1], s.tokens.shape[1], d.span,
            d.splits, HAS_DRAFT=False, TOP=d.track_top, SHARE=d.share, PRUNE=d.prune, LIST=rows is not None,
            BLOCK=d.block, HASHES=d.hashes, TILES=d.tiles, CHUNK=REDUCE_CHUNK, num_warps=d.warps,
            maxnreg=d.maxnreg)
