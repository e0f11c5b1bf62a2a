"""The one draw kernel: argmax or Gumbel-max over one row per request, pruned, in a single launch.

Every token that ``gumbel-max`` and ``stochastic`` emit by drawing (plain samples,
bonus tokens, placeholder rows, residual resamples, greedy bonus argmaxes) comes
from :func:`_draw_kernel`. Per request r it reads its draw plan (``mode[r]``,
logits ``row[r]``, output ``slot[r]``) and emits ``tokens[r, slot[r]]``:

* ``MODE_GREEDY``: the argmax of the raw row (NaN read as -inf, first index on ties);
* ``MODE_TARGET``: ``argmax(processed + gumbel_noise(seed, pos[row], v))``;
* ``MODE_RESIDUAL``: the same over the residual after rejecting draft ``dtok[r]``
  (one-hot: the draft removed; with draft logits ``log p + log1p(-q/p)`` where q < p);
* ``MODE_NONE``: nothing to draw.

Grid ``(R, SPLITS)``: program (r, s) scans the contiguous span
``[s * span, (s + 1) * span)`` of row r, ``TILES`` tiles of ``BLOCK`` lanes in one load
(``LOAD_TILES`` = 2: more bytes in flight, the largest value of each tile taken from the raw values),
scores each tile that may hold the winner (largest bound first, read a second time: from L1 or L2) and
keeps its best (score, then smallest index).
Bytes: reads each drawn row once from DRAM (4 or 2 B per element; tiles that pass the bound below
again, mostly from cache; the rejected draft row too for ``MODE_RESIDUAL`` with draft logits, only in
tiles that pass); reads a 4 B
published best per load and the row's few listed tokens (below); writes 8 B per program and the token
row. The last program of a row to arrive (an ``acq_rel`` counter per
row, reset by that program) reduces the ``SPLITS`` partials (largest score, then smallest index),
writes the token, the count and the -1 padding: one launch, no reduce kernel, no fill.

Pruning, exact under the ``mrv2`` contract (a pruned token provably cannot win or tie):
the threshold is the larger of the program's running best and the best score any program
of the row has published (``row_best``, a ``bound_rules.float_key`` per row, raised by relaxed
atomics). The row's programs list the tokens of its ``HASHES x SPLITS`` smallest hashes
(``rng.murmur3_preimage``) and score them after their tiles; every other token's noise is
at most ``cut`` (the noise bound of that hash count). A tile whose bound (its largest raw value over
the temperature, an upper bound of its processed values) plus ``cut`` is below the threshold is skipped
after the load; otherwise it is read again, the hash of every lane is computed, and only a tile where
some ``x + gumbel_upper_bound(h)`` reaches the threshold pays for the two logs of the exact noise (and,
for a residual with draft logits, for the draft row and the residual: the bound uses ``log p``, which
the residual never exceeds). The threshold is reduced over the block, so every thread takes the same
branches (docs/KERNELS.md "The draw").
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..filters.bound_rules import float_key, key_to_float
from ..shared.launches import pdl_wait
from ..filters.params import load_processed, process_loaded
from ..shared.partials import block_argmax, block_argmax_top, held_once, last_to_arrive
from ..shared.rng import better, gumbel_upper_bound, murmur3_finish, murmur3_preimage, murmur3_row_key, noised_score

# Draw modes (one per request), shared by the plain samplers and the stochastic walk.
MODE_NONE = tl.constexpr(0)      # nothing to draw (refused request, or greedy verify that stopped on a mismatch)
MODE_GREEDY = tl.constexpr(1)    # argmax of the raw row
MODE_TARGET = tl.constexpr(2)    # Gumbel-max over the processed target row
MODE_RESIDUAL = tl.constexpr(3)  # Gumbel-max over the residual after rejecting ``dtok``

DRAW_PROGRAMS = 1024     # programs per launch the splitting aims at, below 16 rows (about 8 per SM on an H200)
NO_BEST = tl.constexpr(-2139095041)  # float_key(-inf): a row's published best before any program has one
REDUCE_CHUNK = 128       # partials reduced per step
MAX_LISTED = 256         # hashes a program lists at most (8 a lane in one warp)
LOAD_TILES = 2           # tiles a pruning program reads at once (2 and 4 measured; 1,024-lane tiles were slower)
ROW_HASHES = 4096        # the row's smallest hashes whose tokens its programs list, aimed at (see listed_hashes)
# (launches of fewer rows than, tile, warps per program, programs per launch, share the row best, register cap),
# measured offline (CUDA graphs, H200, V = 248,320; 2026-12-01, tools/sweep_draw.py). Below 8 rows:
# 2048 x 8 warps, one tile a program (122 tiles cap the programs), nothing shared: every program starts at once, so a
# published best comes too late to prune anything (sharing cost 8-10% at R = 1..4); capped at 64 registers a thread
# (R = 1: 5.0 against 5.25 us uncapped). From 8 rows: 512-lane tiles, sharing (caps of 48-72 1-20% slower): 1,024
# two-warp programs below 16 rows (one warp 6-9% slower at R = 8, 2,048 or 4,096 no faster, 2026-12-04, ab3e112;
# 8,192 9-20% slower), then one-warp programs (no shared memory or barriers): 2,048 below 64 (3-13% faster than 1,024
# at R = 32..48), 8,192 from 64 (6-26% faster than 1024 x 4 warps x 2048 at R = 64 and 256, plain and verify,
# synthetic and real rows; 16,384: 1-7% faster at R = 256, 5-6% slower at R = 64). Capped at 96 registers, 20 warps an
# SM, no stack (tools/kernel_resources.py, triton 3.6): a plain draw compiles to at most that anyway; the first draw
# of sample-and-check (TOP) took 111 (16 programs; 2026-12-01), a verify draw 114 (verify k=4 R = 256 draw
# 124.8 -> 120.3 µs at 96, R = 64 even; 2026-12-02).
DRAW_SHAPES = ((8, 2048, 8, DRAW_PROGRAMS, False, 64), (16, 512, 2, DRAW_PROGRAMS, True, 96),
               (64, 512, 1, 2 * DRAW_PROGRAMS, True, 96), (1 << 31, 512, 1, 8192, True, 96))


def listed_hashes(splits: int) -> int:
    """Hashes each of a row's ``splits`` programs lists (program s: ``[s * n, (s + 1) * n)``): a power of two
    from 32 (one a lane) to MAX_LISTED, so the row lists ROW_HASHES when it has 16 to 128 programs, more with
    more, fewer with fewer. The tiles' noise bound is then that of hash ``n * splits``: 13.9 for 4,096, 16.6 for
    256 (22.9 with nothing listed)."""
    return max(32, min(MAX_LISTED, triton.next_power_of_2(triton.cdiv(ROW_HASHES, max(splits, 1)))))


def draw_shape(num_rows: int, block: int | None = None, warps: int | None = None,
               programs: int | None = None, table=None) -> tuple[int, int, int, bool, int | None]:
    """(tile, warps per program, programs per launch, share the row best, register cap or None) of a draw over
    ``num_rows`` rows: each of the first three given, else the ``table``'s (default DRAW_SHAPES). None changes a
    token (ties go to the first index in every split; sharing only prunes tokens that cannot win)."""
    _, table_block, table_warps, table_programs, share, maxnreg = next(row for row in table or DRAW_SHAPES
                                                                       if num_rows < row[0])
    return block or table_block, warps or table_warps, programs or table_programs, share, maxnreg


@triton.jit
def _residual(x, offs, valid, r, draft_ptr, d_stride, drow_ptr, dtok_ptr, lse_t_ptr, lse_q_ptr, req_temp_ptr,
              HAS_DRAFT: tl.constexpr):
    """Residual scores of lanes ``offs`` after rejecting draft ``dtok[r]`` (float32, -inf = impossible)."""
    if HAS_DRAFT:
        x = _residual_of_log_p(x - tl.load(lse_t_ptr + r), offs, valid, r, draft_ptr, d_stride, drow_ptr,
                               lse_q_ptr, req_temp_ptr)
    else:
        x = tl.where(offs == tl.load(dtok_ptr + r), float("-inf"), x)
    return x


@triton.jit
def _residual_of_log_p(log_p, offs, valid, r, draft_ptr, d_stride, drow_ptr, lse_q_ptr, req_temp_ptr):
    """``log p + log1p(-q / p)`` where q < p, else -inf: the residual with draft logits, from the target's
    ``log_p = x - lse_t`` of lanes ``offs`` (reads the rejected draft's row). Never above ``log_p``."""
    temp = tl.load(req_temp_ptr + r)
    drow = tl.load(drow_ptr + r)
    q = tl.load(draft_ptr + drow.to(tl.int64) * d_stride + offs, mask=valid, other=float("-inf")).to(tl.float32)
    log_q = tl.math.div_rn(q, temp) - tl.load(lse_q_ptr + r)
    ratio = tl.exp(log_q - log_p)
    # log1p(-ratio), accurate for small ratio.
    y = 1.0 - ratio
    l1p = tl.where(y == 1.0, -ratio, tl.log(y) * (-ratio) / (y - 1.0))
    return tl.where(ratio < 1.0, log_p + l1p, float("-inf"))


@triton.jit
def _listed_best(r, s, key, mode, row_base, V, t, cv, ci, draft_ptr, d_stride, drow_ptr, dtok_ptr, lse_t_ptr,
                 lse_q_ptr, req_temp_ptr, HAS_DRAFT: tl.constexpr, HASHES: tl.constexpr):
    """(score, token) of the best of row r's tokens whose hash is in ``[s * HASHES, (s + 1) * HASHES)``
    (-inf, 0 when none is below V, the usual case: a token id is one uint32 in 2^32 / V): each hash's
    token is ``murmur3_preimage``, its score the one the tiles compute. Ties: the smallest token."""
    h = (s * HASHES + tl.arange(0, HASHES)).to(tl.uint32)
    tok = murmur3_preimage(key, h)
    valid = tok < (tl.zeros((), tl.int32) + V).to(tl.uint32)
    best = tl.full((), float("-inf"), tl.float32)
    best_idx = tl.zeros((), tl.int32)
    if tl.max(valid.to(tl.int32), axis=0) > 0:
        offs = tl.where(valid, tok, V).to(tl.int32)
        x = load_processed(row_base, offs, V, t, cv, ci)
        if mode == MODE_RESIDUAL:
            x = _residual(x, offs, valid, r, draft_ptr, d_stride, drow_ptr, dtok_ptr, lse_t_ptr, lse_q_ptr,
                          req_temp_ptr, HAS_DRAFT)
        score = noised_score(x, h, valid)
        m = tl.max(score, axis=0)
        if m > best:
            best = m
            best_idx = tl.min(tl.where(score == m, offs, V), axis=0)
    return best, best_idx


@triton.jit
def _chunk_top(top, tile_max, row_base, start, hi, r, mode, t, cv, ci, dtok_ptr, TILES: tl.constexpr,
               BLOCK: tl.constexpr):
    """``top`` raised to the largest processed value of the chunk just loaded (``TILES`` tiles of ``BLOCK`` lanes
    from ``start``; no draft logits). The largest of its tile bounds ``tile_max`` (the largest raw value over the
    temperature) is that value whenever the chunk's largest value is kept, and a chunk whose largest value is
    dropped by the row's filter bound holds nothing above the row's largest value, which no bound drops: so the
    row's maximum comes out exact without processing a lane. Lanes are processed only where that fails: a NaN
    bound (NaN reads as -inf; whether max passes a NaN on differs between Triton backends) or the chunk that
    holds a one-hot residual's rejected draft (left out of the residual); those lanes are read again, one tile
    at a time (from L1 or L2). Processing every lane of every chunk cost 15 registers a thread: 16 instead of
    20 programs an SM at R = 256 (tools/kernel_resources.py, ncu)."""
    exact = tl.max((tile_max != tile_max).to(tl.int32), axis=0) > 0
    if mode == MODE_RESIDUAL:
        d = tl.load(dtok_ptr + r)
        exact = exact | ((d >= start) & (d < start + TILES * BLOCK))
    if exact:  # one tile at a time, as the scoring does
        for i in tl.static_range(TILES):
            lanes = start + i * BLOCK + tl.arange(0, BLOCK)
            x = process_loaded(tl.load(row_base + lanes, mask=lanes < hi, other=float("-inf")), lanes, t, cv, ci)
            if mode == MODE_RESIDUAL:
                x = tl.where(lanes == tl.load(dtok_ptr + r), float("-inf"), x)
            top = tl.maximum(top, tl.max(x, axis=0))
    else:
        top = tl.maximum(top, tl.max(tile_max, axis=0))
    return top


@triton.jit
def _score_tile(start, hi, best, best_idx, thr, late, r, mode, row_base, t, cv, ci, key, draft_ptr, d_stride,
                drow_ptr, dtok_ptr, lse_t_ptr, lse_q_ptr, req_temp_ptr, row_best_ptr, HAS_DRAFT: tl.constexpr,
                SHARE: tl.constexpr, PRUNE: tl.constexpr, BLOCK: tl.constexpr):
    """The program's best (score, index) after the tile at ``start``: (largest score, then smallest index).
    ``PRUNE``: the tile's noise is computed only if some ``x + gumbel_upper_bound(h)`` reaches ``thr``.
    ``SHARE``: a better score is published to the row (``row_best``)."""
    offs = start + tl.arange(0, BLOCK)
    valid = offs < hi
    x = process_loaded(tl.load(row_base + offs, mask=valid, other=float("-inf")), offs, t, cv, ci)
    if late:
        x = x - tl.load(lse_t_ptr + r)  # log p; an infinite lse's NaN lanes are never pruned
        ub = tl.where(x == x, x, float("inf"))
    else:
        if mode == MODE_RESIDUAL:
            x = _residual(x, offs, valid, r, draft_ptr, d_stride, drow_ptr, dtok_ptr, lse_t_ptr, lse_q_ptr,
                          req_temp_ptr, HAS_DRAFT)
        ub = x
    h = murmur3_finish(key, offs)
    go = True
    if PRUNE:
        go = tl.max(ub + gumbel_upper_bound(h), axis=0) >= thr
    if go:
        if late:
            x = _residual_of_log_p(x, offs, valid, r, draft_ptr, d_stride, drow_ptr, lse_q_ptr, req_temp_ptr)
        score = noised_score(x, h, valid)
        m, a = tl.max(score, axis=0, return_indices=True)
        if better(m, start + a, best, best_idx):
            best = m
            best_idx = start + a
            if SHARE:
                tl.atomic_max(row_best_ptr + r, float_key(best), sem="relaxed")  # publish
    return best, best_idx


@triton.jit
def _draw_kernel(logits_ptr, l_stride, draft_ptr, d_stride,
                 mode_ptr, row_ptr, slot_ptr, drow_ptr, dtok_ptr, lse_t_ptr, lse_q_ptr,
                 temp_div_ptr, cut_val_ptr, cut_idx_ptr, req_temp_ptr, seed_ptr, pos_ptr,
                 part_max_ptr, part_arg_ptr, arrivals_ptr, row_best_ptr, count_src_ptr, counts_ptr, tokens_ptr,
                 tok_stride, part_top_ptr, top_ptr, list_ptr, list_len_ptr, V, W, span, SPLITS,
                 HAS_DRAFT: tl.constexpr, TOP: tl.constexpr, SHARE: tl.constexpr, PRUNE: tl.constexpr,
                 LIST: tl.constexpr, BLOCK: tl.constexpr, HASHES: tl.constexpr, TILES: tl.constexpr,
                 CHUNK: tl.constexpr, PDL: tl.constexpr = False):
    """Grid (R, SPLITS): program (r, s) draws span s of request r. ``LIST`` (a later draw of sample-and-check):
    grid (G, SPLITS), program (g, s) draws span s of requests ``list[g], list[g + G], ...`` (the
    ``list_len[0]`` requests still open; the others' outputs are written)."""
    pdl_wait(PDL)
    tl.static_assert(not (TOP and LIST), "top[1] is addressed by the grid's rows: TOP launches are never LIST")
    if LIST:
        for j in range(tl.program_id(0), tl.load(list_len_ptr), tl.num_programs(0)):
            _draw_span(tl.load(list_ptr + j), tl.program_id(1), logits_ptr, l_stride, draft_ptr, d_stride,
                       mode_ptr, row_ptr, slot_ptr, drow_ptr, dtok_ptr, lse_t_ptr, lse_q_ptr, temp_div_ptr,
                       cut_val_ptr, cut_idx_ptr, req_temp_ptr, seed_ptr, pos_ptr, part_max_ptr, part_arg_ptr,
                       arrivals_ptr, row_best_ptr, count_src_ptr, counts_ptr, tokens_ptr, tok_stride, part_top_ptr,
                       top_ptr, V, W, span, SPLITS, HAS_DRAFT, TOP, SHARE, PRUNE, BLOCK, HASHES, TILES, CHUNK)
    else:
        _draw_span(tl.program_id(0), tl.program_id(1), logits_ptr, l_stride, draft_ptr, d_stride,
                   mode_ptr, row_ptr, slot_ptr, drow_ptr, dtok_ptr, lse_t_ptr, lse_q_ptr, temp_div_ptr,
                   cut_val_ptr, cut_idx_ptr, req_temp_ptr, seed_ptr, pos_ptr, part_max_ptr, part_arg_ptr,
                   arrivals_ptr, row_best_ptr, count_src_ptr, counts_ptr, tokens_ptr, tok_stride, part_top_ptr,
                   top_ptr, V, W, span, SPLITS, HAS_DRAFT, TOP, SHARE, PRUNE, BLOCK, HASHES, TILES, CHUNK)


@triton.jit
def _draw_span(r, s, logits_ptr, l_stride, draft_ptr, d_stride, mode_ptr, row_ptr, slot_ptr, drow_ptr, dtok_ptr,
               lse_t_ptr, lse_q_ptr, temp_div_ptr, cut_val_ptr, cut_idx_ptr, req_temp_ptr, seed_ptr, pos_ptr,
               part_max_ptr, part_arg_ptr, arrivals_ptr, row_best_ptr, count_src_ptr, counts_ptr, tokens_ptr,
               tok_stride, part_top_ptr, top_ptr, V, W, span, SPLITS, HAS_DRAFT: tl.constexpr, TOP: tl.constexpr,
               SHARE: tl.constexpr, PRUNE: tl.constexpr, BLOCK: tl.constexpr, HASHES: tl.constexpr,
               TILES: tl.constexpr, CHUNK: tl.constexpr):
    """Span ``s`` of request ``r``: its best (score, index), and the row's token if this program is the last
    of the row to arrive (a row with nothing to draw, ``MODE_NONE``: its program 0 writes the count and the -1
    pads, the others exit without an atomic or a store). The span is read ``TILES`` tiles at a time (one load,
    many bytes in flight); a tile that may hold the winner is then scored from a second read (L1 or L2)."""
    mode = tl.load(mode_ptr + r)
    best = tl.full((), float("-inf"), tl.float32)
    best_idx = tl.zeros((), tl.int32)
    top = tl.full((), float("-inf"), tl.float32)  # TOP: the largest processed value the program saw
    if mode != MODE_NONE:
        row = tl.load(row_ptr + r)
        row_base = logits_ptr + row.to(tl.int64) * l_stride
        lo = s * span
        hi = tl.minimum(lo + span, V)
        tile = tl.arange(0, TILES)
        if mode == MODE_GREEDY:  # the first index of the largest raw value (NaN read as -inf)
            for start in range(lo, hi, TILES * BLOCK):
                offs = start + tile[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
                raw = tl.load(row_base + offs, mask=offs < hi, other=float("-inf")).to(tl.float32)
                raw = tl.where(raw != raw, float("-inf"), raw)
                m = tl.max(tl.max(raw, axis=1), axis=0)
                if m > best:
                    best = m
                    best_idx = tl.min(tl.min(tl.where(raw == m, offs, 2147483647), axis=1), axis=0)
        else:
            t = tl.load(temp_div_ptr + row)
            cv = tl.load(cut_val_ptr + row)
            ci = tl.load(cut_idx_ptr + row)
            key = murmur3_row_key(tl.load(seed_ptr + r), tl.load(pos_ptr + row))
            # The residual with draft logits is at most log p = x - lse_t: its draft row and log1p are computed
            # only in tiles that pass the bound. (No TOP launch has draft logits: only steps without them have
            # sample-and-check rows; the row max such a launch records would be that bound, not the residual's.)
            if HAS_DRAFT:
                late = mode == MODE_RESIDUAL
            else:
                late = False
            thr = best
            cut = 0.0
            if PRUNE:
                # Every token whose hash is not among the row's HASHES x SPLITS smallest has noise at most ``cut``
                # (the bound is non-increasing in the hash); those tokens are listed and scored after the tiles,
                # so a tile whose largest value plus ``cut`` is below the threshold cannot win. (An int32 tensor
                # first: SPLITS == 1 arrives as a constant.)
                cut = gumbel_upper_bound((tl.zeros((), tl.int32) + SPLITS * HASHES).to(tl.uint32)) + 0.001
            # The span is read TILES tiles at a time (one load, many bytes in flight). A tile that may hold the
            # winner is then scored (``_score_tile``), largest bound first; the others are skipped.
            for start in range(lo, hi, TILES * BLOCK):
                if PRUNE:
                    thr = best
                    if SHARE:
                        # The row's best published score. Threads read it at their own times: ``thr`` takes the
                        # block's smallest read (never the read itself), so every thread takes the same branches.
                        published = tl.load(row_best_ptr + r, volatile=True)
                        thr = tl.maximum(best, key_to_float(tl.min(tl.broadcast_to(published, [BLOCK]), axis=0)))
                pending = (start + tile * BLOCK < hi).to(tl.int32)  # the chunk's tiles left to score
                tile_max = tl.full([TILES], float("inf"), tl.float32)
                if PRUNE or TOP:
                    offs = start + tile[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
                    raw = tl.load(row_base + offs, mask=offs < hi, other=float("-inf"))
                    # bounds of the processed maxima: division is monotone, a filter only lowers values
                    tile_max = tl.math.div_rn(tl.max(raw.to(tl.float32), axis=1), t)
                    empty = (tile_max < cv) | (tile_max == float("-inf"))  # only -inf once processed
                    if late:
                        tile_max = tile_max - tl.load(lse_t_ptr + r)
                    if TOP:  # the row's largest processed value
                        top = _chunk_top(top, tile_max, row_base, start, hi, r, mode, t, cv, ci, dtok_ptr, TILES,
                                         BLOCK)
                    # ``not <``: a NaN bound (a tile of only NaN, an infinite lse) keeps its tile. A tile of only
                    # -inf is skipped: its scores are -inf, which never beat the program's (-inf, index 0) start
                    pending = tl.where((tile_max + cut < thr) | empty, 0, pending)
                while tl.max(pending, axis=0) > 0:  # each pass clears one pending tile: at most TILES passes
                    # the pending tile of the largest bound (it raises the threshold soonest; NaN first), then the first
                    order = tl.where(pending > 0, tl.where(tile_max == tile_max, tile_max, float("inf")),
                                     float("-inf"))
                    i = tl.min(tl.where((pending > 0) & (order == tl.max(order, axis=0)), tile, TILES), axis=0)
                    best, best_idx = _score_tile(start + i * BLOCK, hi, best, best_idx, thr, late, r, mode, row_base,
                                                 t, cv, ci, key, draft_ptr, d_stride, drow_ptr, dtok_ptr, lse_t_ptr,
                                                 lse_q_ptr, req_temp_ptr, row_best_ptr, HAS_DRAFT, SHARE, PRUNE,
                                                 BLOCK)
                    pending = tl.where(tile == i, 0, pending)
                    if PRUNE:
                        thr = tl.maximum(thr, best)
                        pending = tl.where(tile_max + cut < thr, 0, pending)
            if PRUNE:  # the listed tokens (anywhere in the row): equal scores go to the smaller id
                listed, listed_idx = _listed_best(r, s, key, mode, row_base, V, t, cv, ci, draft_ptr, d_stride,
                                                  drow_ptr, dtok_ptr, lse_t_ptr, lse_q_ptr, req_temp_ptr,
                                                  HAS_DRAFT, HASHES)
                if better(listed, listed_idx, best, best_idx):
                    best = listed
                    best_idx = listed_idx
    finish = s == 0  # a row with nothing to draw: its first program writes the pads, the others exit
    if mode != MODE_NONE:
        tl.store(part_max_ptr + r * SPLITS + s, best)
        tl.store(part_arg_ptr + r * SPLITS + s, best_idx)
        if TOP:
            tl.store(part_top_ptr + r * SPLITS + s, top)
        finish = last_to_arrive(arrivals_ptr, r, SPLITS)
    if finish:
        if SHARE:
            tl.store(row_best_ptr + r, NO_BEST)  # for the next launch
        count = tl.load(count_src_ptr + r)
        if mode != MODE_NONE:
            if TOP:  # the row's largest processed value (sample-and-check sums exp(x - top)), one lane's or not
                token, top, n_spans, first = block_argmax_top(part_max_ptr, part_arg_ptr, part_top_ptr, r * SPLITS,
                                                              SPLITS, CHUNK)
                tl.store(top_ptr + r, top)
                row = tl.load(row_ptr + r)
                tl.store(top_ptr + tl.num_programs(0) + r, held_once(  # top[1]: grid (R, SPLITS), never LIST
                    top, n_spans, first, mode != MODE_GREEDY, logits_ptr + row.to(tl.int64) * l_stride,
                    tl.load(temp_div_ptr + row), tl.load(cut_val_ptr + row), tl.load(cut_idx_ptr + row), span, V,
                    BLOCK, TILES))
            else:
                _, token = block_argmax(part_max_ptr, part_arg_ptr, r * SPLITS, SPLITS, CHUNK)
            tl.store(tokens_ptr + r * tok_stride + tl.load(slot_ptr + r), token.to(tl.int64))
        for j in range(count, W):
            tl.store(tokens_ptr + r * tok_stride + j, -1)
        tl.store(counts_ptr + r, count)


def splits_for(num_rows: int, vocab: int, block: int, programs: int = DRAW_PROGRAMS) -> tuple[int, int]:
    """(SPLITS, span): programs per row so the launch has about ``programs`` programs, and the
    elements each scans (a multiple of ``block``, so every program but the last is full tiles)."""
    tiles = max(1, triton.cdiv(vocab, block))
    splits = max(1, min(tiles, triton.cdiv(programs, max(num_rows, 1))))
    span = triton.cdiv(tiles, splits) * block
    return triton.cdiv(vocab, span) if vocab else 1, span


@dataclass
class DrawScratch:
    """Per-launch scratch of :func:`_draw_kernel` for R rows: partials [R, splits] float32 / int32 and
    the per-row arrival counters [R] int32 (zero between launches: the last program resets them) and
    published bests ``row_best`` [R] int32 (``float_key``; NO_BEST between launches, reset likewise).
    ``track_top``: the launch also writes each row's largest processed value to ``top[0]`` ([2, R] float32;
    partials ``part_top`` [R, splits]) and 1.0 to ``top[1]`` where one lane of a TARGET or RESIDUAL row holds it
    (``partials.held_once``); sample-and-check's first draw does (its checks sum exp(x - top)).
    ``block`` / ``warps`` / ``share`` / ``maxnreg``: the launch's tile, warps per program, whether its programs
    share the row best, and its register cap a thread (:func:`draw_shape`); ``prune``: whether tiles are bounded
    before they are scored (not when every program has one tile and shares nothing: its threshold is -inf at its
    only tile). ``row_slots``: the grid's first dimension G when the launch draws a list of requests (``LIST``;
    the later draws of sample-and-check)."""

    part_max: torch.Tensor
    part_arg: torch.Tensor
    arrivals: torch.Tensor
    row_best: torch.Tensor
    splits: int
    span: int
    part_top: torch.Tensor
    top: torch.Tensor
    block: int
    warps: int
    track_top: bool = False
    share: bool = True
    row_slots: int = 0
    maxnreg: int | None = None

    @property
    def prune(self) -> bool:
        return self.share or self.span > self.block

    @property
    def hashes(self) -> int:
        """The small hashes each program lists (:func:`listed_hashes` of the launch's splits)."""
        return listed_hashes(self.splits)

    @property
    def tiles(self) -> int:
        """Tiles a program reads at once (``TILES``): LOAD_TILES, at most the span's (a power of two); 1 when
        nothing is pruned (one tile a program)."""
        if not self.prune:
            return 1
        return 1 << (min(LOAD_TILES, self.span // self.block).bit_length() - 1)

    def launch_over(self, num_rows: int, rows: tuple | None) -> tuple[tuple[int, int], torch.Tensor, torch.Tensor]:
        """(grid, list, list length) of a draw over all ``num_rows`` requests (``rows`` None: grid (R, SPLITS),
        the list arguments unused placeholders) or over the list ``rows`` = (open_rows, open_len): grid
        (row_slots, SPLITS)."""
        if rows is None:
            return (num_rows, self.splits), self.arrivals, self.arrivals
        return (self.row_slots, self.splits), rows[0], rows[1]

    @classmethod
    def allocate(cls, num_rows: int, vocab: int, block: int | None, device, programs: int | None = None,
                 split_as_rows: int | None = None, track_top: bool = False,
                 warps: int | None = None, table=None) -> "DrawScratch":
        """``split_as_rows``: split each row as if the launch had that many rows (default ``num_rows``);
        ``block`` / ``warps`` / ``programs`` None: from the ``table`` (default DRAW_SHAPES) by ``num_rows``."""
        block, warps, programs, share, maxnreg = draw_shape(num_rows, block, warps, programs, table)
        splits, span = splits_for(num_rows if split_as_rows is None else split_as_rows, vocab, block, programs)
        rows = max(num_rows, 1)
        f32 = dict(dtype=torch.float32, device=device)
        return cls(part_max=torch.empty((rows, splits), **f32),
                   part_arg=torch.empty((rows, splits), dtype=torch.int32, device=device),
                   part_top=torch.empty((rows, splits) if track_top else (1,), **f32),
                   top=torch.empty((2, rows) if track_top else (1,), **f32), track_top=track_top, block=block,
                   warps=warps, share=share, maxnreg=maxnreg,
                   arrivals=torch.zeros(rows, dtype=torch.int32, device=device), splits=splits, span=span,
                   row_best=torch.full((rows,), NO_BEST.value, dtype=torch.int32, device=device))
