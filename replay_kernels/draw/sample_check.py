"""Top-k or top-p of a plain sample by sample-and-check: draw first, then test the drawn token.

Every filter keeps a suffix ``K`` of the row in ascending ``(value, index)`` order
(:mod:`replay_kernels.filters.params`). The plain sample is ``argmax_{v in K}(x_v + g_v)``
(first index on ties). Instead of searching the bound of ``K`` (8 + 1 + 5 passes over
the row, :mod:`replay_kernels.filters.filters`), draw over a superset ``A`` of ``K`` and test
the winner ``c``:

* ``c in K``: it is the answer (``K`` is inside ``A``, so nothing in ``K`` beats it,
  and no tied token of ``K`` has a lower index than ``c``);
* ``c not in K``: no token at or below ``c`` in the order is in ``K`` (a suffix), so
  draw again over ``A = {v : (x_v, v) > (x_c, c)}``, which is the draw kernel's filter
  bound ``(cut_val, cut_idx) = (x_c, c + 1)``.

The test of ``c`` is one pass over the row, split like the filter passes (grid
``(R, SPLITS)``, spans of ``FILTER_SPAN`` elements fixed by V, so the sums do not
depend on the batch): ``#{v : x_v > x_c}`` (top-k: ``c`` is kept iff that count
is below k, ties at the k-th value kept), and, for top-p, the masses ``S`` (every
kept-by-min-p value) and ``low(c)`` (those at or below ``c`` in the order), each
``exp(x - M)`` with ``M`` the row's largest processed value (recorded by the first
draw, which reads every tile anyway), summed per lane, then per span, and the spans
added in order by the last program of the row to arrive; ``c`` is kept iff ``low(c) / S > 1 - p``
(the oracle's ``cumsum(softmax) > 1 - p`` at ``c``'s sorted position, within fp32
rounding: a near-tie, as for the search). The largest value is always kept (its ``low`` and ``S`` are the same
sum), so the first check does not read the row of a drawn token that one lane holds at the row's top (the first
draw tells: ``partials.held_once``), nor, in a verify, a residual draw above what the rejection's bounds found kept
(``verify_bounds.bounded_verdict``). An all ``-inf`` row keeps its first draw (token 0).

At temperature 1 a drawn token misses the top-p set with probability at most ``1 - p``, so one check settles most
rows: a step costs the draw, one check pass (an ``exp`` per element, like the stats pass; count only for top-k),
then up to ``EXTRA_ROUNDS`` (draw, check) pairs (:func:`launched_rounds`) over a list of the rows still open (no
program for the others; these draws split each open row over more programs than the first draw does), then
:func:`_finish_kernel`, one program per row that loops (draw, check) over whole rows until every row is settled
(exact whatever the parameters; rarely has work). Rows with both top-k and top-p get a bound first (their top-p
mass is over the top-k set, which a check does not give: replay_kernels/filters/topk_gather.py).

Bytes per check pass: V x 4 B (fp32) per open row, 12 B per program of partials; 4 B per row of ``top``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import triton
import triton.language as tl

from ..shared.ex2 import exp_terms
from .draw import DRAW_PROGRAMS, MODE_NONE, MODE_RESIDUAL, MODE_TARGET, DrawScratch
from ..shared.partials import held_top, last_to_arrive, token_value
from ..filters.filters import FILTER_SPAN
from ..shared.launches import launch, pdl_wait
from ..filters.params import load_processed
from ..shared.rng import gumbel_upper_bound, murmur3_finish, murmur3_row_key, noised_score

EXTRA_ROUNDS = 3  # at most this many (draw, check) launch pairs after the first check, before the finish loop
FINISH_ODDS = 0.02  # fewer rounds while the chance that some row is left to the finish loop stays below this
CHECK_BLOCK = 1024  # elements per tile of a check pass (tools/profile_kernels.py --check-sweep)
# Later checks and draws of sample-and-check run over the list of rows still open: grid (row_slots, SPLITS), one
# slot per ROWS_PER_SLOT requests (top-p 0.9 leaves about one row in ten open), each open row split like a draw of
# ROUND_SPLIT_AS_ROWS rows (31 programs of four 2048-lane tiles at V = 248,320), in 2048-lane tiles of 8 warps
# capped at 72 registers a thread. Measured at top-p 0.9 (2026-12-01): 2-5% faster end to
# end than 2 or 4 requests a slot or one-tile programs at R = 64 and 256; 16 requests a slot: 2% faster at R = 256,
# 19% slower at R = 64. The first draw's shapes are draw.DRAW_SHAPES.
ROWS_PER_SLOT = 8
ROUND_SPLIT_AS_ROWS = 32
ROUND_DRAW_SHAPES = ((1 << 31, 2048, 8, DRAW_PROGRAMS, True, 72),)
FIRST_CHECK_MAXNREG = 80  # 6 programs an SM (uncapped: 88 registers, 5; tools/kernel_resources.py, triton 3.6)
VERDICT_CHUNK = tl.constexpr(32)  # spans a load of the verdict's sums: one chunk for the 31 spans at V = 248,320
CHECK_WARPS = 4  # 1024 x 4 warps: 6% faster than 8 warps at R = 256, 2% at R = 64, equal at R = 1 (H200 sweep)


@triton.jit
def _span_check(base, lo, hi, V, t, L, xc, c, kk, p, M, BLOCK: tl.constexpr):
    """Over lanes [lo, hi) of one row: (sum of exp(x - M), the same over lanes at or below ``(xc, c)``,
    count of x > xc), ``M`` the row's largest value. Kept-by-min-p values (x >= L) only in the sums, which
    are computed only for top-p rows (``p < 1``); the count only for top-k rows (``kk < V``). Per-lane
    accumulators, added across lanes once at the end: no reduction per tile.

    Two tiles are loaded at once (twice the bytes in flight: the pass is latency-bound), then added to the
    accumulators one after the other, in the order of a one-tile loop, so the sums do not depend on it; a
    second tile past ``hi`` reads -inf and adds +0."""
    acc_all = tl.zeros((BLOCK,), tl.float32)
    acc_low = tl.zeros((BLOCK,), tl.float32)
    acc_cnt = tl.zeros((BLOCK,), tl.int32)
    floor = tl.maximum(L, -3.4028234663852886e38)
    for start in range(lo, hi, 2 * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        if start + 2 * BLOCK <= hi:
            x0 = tl.load(base + offs)
            x1 = tl.load(base + offs + BLOCK)
        else:
            x0 = tl.load(base + offs, mask=offs < hi, other=float("-inf"))
            x1 = tl.load(base + offs + BLOCK, mask=offs + BLOCK < hi, other=float("-inf"))
        acc_all, acc_low, acc_cnt = _tile_sums(x0.to(tl.float32), offs, start, acc_all, acc_low, acc_cnt, V, t,
                                               floor, xc, c, kk, p, M, BLOCK)
        acc_all, acc_low, acc_cnt = _tile_sums(x1.to(tl.float32), offs + BLOCK, start + BLOCK, acc_all, acc_low,
                                               acc_cnt, V, t, floor, xc, c, kk, p, M, BLOCK)
    return tl.sum(acc_all, axis=0), tl.sum(acc_low, axis=0), tl.sum(acc_cnt, axis=0)


@triton.jit
def _tile_sums(x, offs, start, acc_all, acc_low, acc_cnt, V, t, floor, xc, c, kk, p, M, BLOCK: tl.constexpr):
    """One tile's terms (lanes ``offs``, loaded values ``x``) added to the per-lane accumulators.

    A lane costs one compare and one select a sum (the pass is bound by the ALU pipe otherwise): NaN, -inf and
    min-p-dropped lanes all fail ``x >= floor`` = ``max(L, -FLT_MAX)`` (a NaN needs no -inf select), and a
    tile wholly before or after ``c`` tests its order by value alone. The sums add the same terms in the same
    order as a lane-by-lane ``(x < xc) | (x == xc & id <= c)`` test on NaN-cleaned values (the terms it drops
    are +0)."""
    if t != 1.0:
        x = tl.math.div_rn(x, t)
    if kk < V:
        acc_cnt += (x > xc).to(tl.int32)
    if p < 1.0:
        e = tl.where(x >= floor, exp_terms(x - M), 0.0)
        acc_all += e
        if start + BLOCK <= c + 1:  # every lane at or before c
            acc_low += tl.where(x <= xc, e, 0.0)
        elif start > c:  # every lane after c
            acc_low += tl.where(x < xc, e, 0.0)
        else:
            acc_low += tl.where((x < xc) | ((x == xc) & (offs <= c)), e, 0.0)
    return acc_all, acc_low, acc_cnt


@triton.jit
def _verdict(pall_ptr, plow_ptr, pcnt_ptr, base, SPLITS, xc, kk, p):
    """Is the drawn token kept? The partials of one row added ``VERDICT_CHUNK`` spans at a time (a tree within
    a chunk, chunks in span order: fixed by V, so no sum depends on the batch). One vector load a chunk: a
    serial load a span cost the one launch's 122 programs, all reading the same three lines, 4.5 µs."""
    S = tl.zeros((), tl.float32)
    low = tl.zeros((), tl.float32)
    cnt = tl.zeros((), tl.int32)
    for start in range(0, SPLITS, VERDICT_CHUNK):
        offs = start + tl.arange(0, VERDICT_CHUNK)
        ok = offs < SPLITS
        S += tl.sum(tl.load(pall_ptr + base + offs, mask=ok, other=0.0, cache_modifier=".cg"), axis=0)
        low += tl.sum(tl.load(plow_ptr + base + offs, mask=ok, other=0.0, cache_modifier=".cg"), axis=0)
        cnt += tl.sum(tl.load(pcnt_ptr + base + offs, mask=ok, other=0, cache_modifier=".cg"), axis=0)
    kept = cnt < kk
    if p < 1.0:  # the oracle's drop rule negated (a NaN mass, from a +inf maximum, drops nothing), and
        # low == S: nothing kept is above the token, the top of the order, which top-p always keeps (below
        # p = 2^-25, 1 - p rounds to 1: no token passes the first test)
        kept = kept & (~(low / S <= 1.0 - p) | (low == S))
    return kept | (xc == float("-inf"))


@triton.jit
def _check_kernel(logits_ptr, l_stride, mode_in, mode_out, row_ptr, slot_ptr, check_ptr, temp_ptr, lbound_ptr,
                  topk_ptr, topp_ptr, cut_val_in, cut_idx_in, cut_val_out, cut_idx_out, tokens_ptr, tok_stride,
                  top_ptr, dtok_ptr, kept_ptr, pall_ptr, plow_ptr, pcnt_ptr, arrivals_ptr, list_in, len_in, list_out,
                  len_out, len_done, V, SPLITS, LIST: tl.constexpr, APPEND: tl.constexpr, SPAN: tl.constexpr,
                  BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """Test the token the last draw wrote to ``tokens[r, slot[r]]`` of the rows that are open (mode TARGET or
    RESIDUAL, and a check row). The first check: grid (R, SPLITS), every row. A later one (``LIST``): grid (G,
    SPLITS) over the ``len_in[0]`` rows of ``list_in`` (the rows still open), like the ``LIST`` draw; its program
    (0, 0) sets ``len_done[0]`` back to 0 for the next launch (the list two rounds back, which no later kernel
    reads; a plain store, no launch-wide counter). ``APPEND``: rows that stay open are appended to ``list_out``
    (count ``len_out[0]``, in arrival order: the order changes no token). ``top``, ``dtok``, ``kept``: see
    ``launch_check``."""
    pdl_wait(PDL)
    if LIST:
        for j in range(tl.program_id(0), tl.load(len_in), tl.num_programs(0)):
            _check_span(tl.load(list_in + j), tl.program_id(1), logits_ptr, l_stride, mode_in, mode_out, row_ptr,
                        slot_ptr, check_ptr, temp_ptr, lbound_ptr, topk_ptr, topp_ptr, cut_val_in, cut_idx_in,
                        cut_val_out, cut_idx_out, tokens_ptr, tok_stride, top_ptr, dtok_ptr, kept_ptr, pall_ptr,
                        plow_ptr, pcnt_ptr, arrivals_ptr, list_out, len_out, V, SPLITS, APPEND, False, SPAN, BLOCK)
        if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
            tl.store(len_done, 0)
    else:
        _check_span(tl.program_id(0), tl.program_id(1), logits_ptr, l_stride, mode_in, mode_out, row_ptr,
                    slot_ptr, check_ptr, temp_ptr, lbound_ptr, topk_ptr, topp_ptr, cut_val_in, cut_idx_in,
                    cut_val_out, cut_idx_out, tokens_ptr, tok_stride, top_ptr, dtok_ptr, kept_ptr, pall_ptr,
                    plow_ptr, pcnt_ptr, arrivals_ptr, list_out, len_out, V, SPLITS, APPEND, True, SPAN, BLOCK)


@triton.jit
def _check_span(r, s, logits_ptr, l_stride, mode_in, mode_out, row_ptr, slot_ptr, check_ptr, temp_ptr, lbound_ptr,
                topk_ptr, topp_ptr, cut_val_in, cut_idx_in, cut_val_out, cut_idx_out, tokens_ptr, tok_stride,
                top_ptr, dtok_ptr, kept_ptr, pall_ptr, plow_ptr, pcnt_ptr, arrivals_ptr, list_out, len_out, V,
                SPLITS, APPEND: tl.constexpr, FIRST: tl.constexpr, SPAN: tl.constexpr, BLOCK: tl.constexpr):
    """Span ``s`` of row ``r``'s check. The last program of the row to arrive settles it: kept -> mode NONE; else
    the row's bound becomes (x_c, c + 1), the mode stays and (``APPEND``) the row joins ``list_out``. It writes the
    row's mode and bound to the ``*_out`` arrays (the first check copies the ``*_in`` ones; in a later check they
    are the same arrays).

    ``FIRST``: a drawn token that is the one lane at its row's largest value (``partials.held_top``) is kept without
    reading the row: that is the check's own verdict. A RESIDUAL row's token above ``kept[r]``
    (``verify_bounds.bounded_verdict``: the rejected draft was kept, or a level's mass says the kept set reaches
    below it, within BOUND_TOL) is kept unread as well."""
    mode = tl.load(mode_in + r)
    row = tl.load(row_ptr + r)
    open_row = ((mode == MODE_TARGET) | (mode == MODE_RESIDUAL)) & (tl.load(check_ptr + row) != 0)
    token_ptr = tokens_ptr + r * tok_stride + tl.load(slot_ptr + r)
    if open_row:
        base = logits_ptr + row.to(tl.int64) * l_stride
        t = tl.load(temp_ptr + row)
        c = tl.load(token_ptr).to(tl.int32)
        xc = token_value(base, c, t)
        kk = tl.load(topk_ptr + row)
        p = tl.load(topp_ptr + row)
        M = tl.load(top_ptr + r)
        if FIRST:  # grid (R, SPLITS): top[1] at top_ptr + R
            draft = tl.load(dtok_ptr + r, mask=mode == MODE_RESIDUAL, other=-1)
            top_of_order = held_top(top_ptr, tl.num_programs(0), r, draft, base, t, M)
            top_of_order = top_of_order & (xc == M) & (kk > 0)
            if mode == MODE_RESIDUAL:
                top_of_order = top_of_order | (xc > tl.load(kept_ptr + r))  # above what the verify knows kept
            open_row = ~top_of_order
        if open_row:
            s_all, s_low, cnt = _span_check(base, s * SPAN, tl.minimum(s * SPAN + SPAN, V), V, t,
                                            tl.load(lbound_ptr + row), xc, c, kk, p, M, BLOCK)
            tl.store(pall_ptr + r * SPLITS + s, s_all)
            tl.store(plow_ptr + r * SPLITS + s, s_low)
            tl.store(pcnt_ptr + r * SPLITS + s, cnt)
    if last_to_arrive(arrivals_ptr, r, SPLITS):
        cv = tl.load(cut_val_in + row)
        ci = tl.load(cut_idx_in + row)
        new_mode = MODE_NONE
        if open_row:
            base = logits_ptr + row.to(tl.int64) * l_stride
            c = tl.load(token_ptr).to(tl.int32)
            xc = token_value(base, c, tl.load(temp_ptr + row))
            if not _verdict(pall_ptr, plow_ptr, pcnt_ptr, r * SPLITS, SPLITS, xc,
                            tl.load(topk_ptr + row), tl.load(topp_ptr + row)):
                new_mode = mode
                cv = xc
                ci = c + 1
                if APPEND:
                    tl.store(list_out + tl.atomic_add(len_out, 1, sem="relaxed"), r)
        tl.store(mode_out + r, new_mode)
        tl.store(cut_val_out + row, cv)
        tl.store(cut_idx_out + row, ci)


@triton.jit
def _row_draw(base, V, t, cv, ci, key, skip, BLOCK: tl.constexpr):
    """argmax (first index on ties) of processed + Gumbel noise over a whole row, token ``skip`` left out
    (a one-hot residual's rejected draft; -1: none): the same token as the pruned draw kernel. A tile pays
    for the noise's logs only if some ``x + gumbel_upper_bound(h)`` reaches the best score so far (the draw
    kernel's rule: a skipped tile holds no score above it, and a tie at a later index loses)."""
    best = tl.full((), float("-inf"), tl.float32)
    best_idx = tl.zeros((), tl.int32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.where(offs == skip, float("-inf"), load_processed(base, offs, V, t, cv, ci))
        h = murmur3_finish(key, offs)
        if tl.max(x + gumbel_upper_bound(h), axis=0) >= best:
            score = noised_score(x, h, offs < V)
            m, a = tl.max(score, axis=0, return_indices=True)
            if m > best:
                best = m
                best_idx = start + a
    return best_idx


@triton.jit
def _finish_kernel(logits_ptr, l_stride, mode_ptr, row_ptr, slot_ptr, dtok_ptr, temp_ptr, lbound_ptr, topk_ptr,
                   topp_ptr, cut_val_ptr, cut_idx_ptr, seed_ptr, pos_ptr, tokens_ptr, tok_stride, top_ptr,
                   pall_ptr, plow_ptr, pcnt_ptr, len_done, V, SPLITS,
                   SPAN: tl.constexpr, BLOCK: tl.constexpr):
    """Grid (R,): a row still open after the launched rounds loops (draw above its bound, check) in
    one program until the drawn token is kept (a RESIDUAL row leaves its rejected draft ``dtok[r]`` out).
    Same spans and sums as the split kernels, so the verdicts are the same. Program 0 sets ``len_done[0]``
    (the last list's length) back to 0 for the next launch."""
    r = tl.program_id(0)
    tl.store(len_done, 0, mask=r == 0)
    mode = tl.load(mode_ptr + r)
    if (mode == MODE_TARGET) | (mode == MODE_RESIDUAL):
        skip = tl.load(dtok_ptr + r, mask=mode == MODE_RESIDUAL, other=-1)
        row = tl.load(row_ptr + r)
        base = logits_ptr + row.to(tl.int64) * l_stride
        t = tl.load(temp_ptr + row)
        L = tl.load(lbound_ptr + row)
        kk = tl.load(topk_ptr + row)
        p = tl.load(topp_ptr + row)
        key = murmur3_row_key(tl.load(seed_ptr + r), tl.load(pos_ptr + row))
        M = tl.load(top_ptr + r)
        cv = tl.load(cut_val_ptr + row)
        ci = tl.load(cut_idx_ptr + row)
        done = tl.zeros((), tl.int32)
        rounds = tl.zeros((), tl.int32)
        while (done == 0) & (rounds <= V):  # a miss drops a token at least: V + 1 rounds bound a NaN verdict's loop
            rounds += 1
            c = _row_draw(base, V, t, cv, ci, key, skip, BLOCK)
            xc = token_value(base, c, t)
            for s in range(0, SPLITS):
                s_all, s_low, cnt = _span_check(base, s * SPAN, tl.minimum(s * SPAN + SPAN, V), V, t, L, xc,
                                                c, kk, p, M, BLOCK)
                tl.store(pall_ptr + r * SPLITS + s, s_all)
                tl.store(plow_ptr + r * SPLITS + s, s_low)
                tl.store(pcnt_ptr + r * SPLITS + s, cnt)
            tl.debug_barrier()
            done = _verdict(pall_ptr, plow_ptr, pcnt_ptr, r * SPLITS, SPLITS, xc, kk, p).to(tl.int32)
            cv = xc
            ci = c + 1
            tl.store(tokens_ptr + r * tok_stride + tl.load(slot_ptr + r), c.to(tl.int64))
        tl.store(mode_ptr + r, MODE_NONE)


# ---------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------


@dataclass
class CheckScratch:
    """Per-launch state of sample-and-check for R requests over N rows of V tokens.

    mode [R] int32, cut_val [N] float32, cut_idx [N] int32: the working draw plan (the prepared one is left as it
    is, so a launch can be replayed); partials pall/plow [R, splits] float32 and pcnt [R, splits] int32; arrivals
    [R] int32 (zero between launches). The rows still open after check i: ``open_rows[i, :open_len[i]]`` [rounds, R]
    / [rounds + 1] int32 (lengths zero between launches: list i is read by draw and check i + 1, and its length
    reset by check i + 2, or by the finish kernel; the last length is a spare that stays 0); ``rounds``: the
    launched (draw, check) rounds (:func:`launched_rounds`); ``row_slots``: the first grid dimension G of the later
    checks and draws (ROWS_PER_SLOT requests a slot)."""

    mode: torch.Tensor
    cut_val: torch.Tensor
    cut_idx: torch.Tensor
    pall: torch.Tensor
    plow: torch.Tensor
    pcnt: torch.Tensor
    arrivals: torch.Tensor
    open_rows: torch.Tensor
    open_len: torch.Tensor
    splits: int
    span: int
    row_slots: int
    rounds: int

    @classmethod
    def allocate(cls, num_requests: int, num_rows: int, vocab: int, device, span: int = FILTER_SPAN,
                 miss: Sequence[float] = (1.0,)) -> "CheckScratch":
        """``miss``: what :func:`launched_rounds` reads (default: EXTRA_ROUNDS rounds)."""
        splits = max(1, triton.cdiv(vocab, span))
        r, n = max(num_requests, 1), max(num_rows, 1)
        f32 = dict(dtype=torch.float32, device=device)
        i32 = dict(dtype=torch.int32, device=device)
        rounds = launched_rounds(miss)
        lists = max(rounds, 1)  # at least one, so every launch argument is a real tensor
        return cls(mode=torch.zeros(r, **i32), cut_val=torch.empty(n, **f32), cut_idx=torch.empty(n, **i32),
                   pall=torch.empty((r, splits), **f32), plow=torch.empty((r, splits), **f32),
                   pcnt=torch.empty((r, splits), **i32), arrivals=torch.zeros(r, **i32),
                   open_rows=torch.zeros((lists, r), **i32), open_len=torch.zeros(lists + 1, **i32),
                   splits=splits, span=span,
                   row_slots=row_slots(num_requests), rounds=rounds)


def launched_rounds(miss: Sequence[float]) -> int:
    """The (draw, check) rounds to launch after the first check: the fewest n <= EXTRA_ROUNDS with
    ``sum(m ** (n + 1) for m in miss) <= FINISH_ODDS``; ``miss``: per checked request, a bound on the chance
    that a draw misses its set (``RowParams.check_miss``). A draw misses a top-p set with probability at most
    ``m = 1 - p``, and so does each later draw given the earlier misses (the next of the same Gumbel order: a
    draw without replacement; the mass left outside the set over the mass left is at most ``m``). So the sum
    bounds the chance that some row is still open after n rounds, when the finish loop takes it (exact either
    way: the rounds change no token, only the launches: at R = 1 and top-p 0.9, one round, five launches).
    Plain draws only: a verify's residual draw (the target without a rejected draft) misses the set with
    probability up to ``m / (1 - q(draft))``, so ``stochastic`` launches EXTRA_ROUNDS."""
    for n in range(EXTRA_ROUNDS):
        if math.fsum(m ** (n + 1) for m in miss) <= FINISH_ODDS:
            return n
    return EXTRA_ROUNDS


def row_slots(num_requests: int) -> int:
    """G, the first grid dimension of a later check or draw: one slot per ROWS_PER_SLOT requests."""
    return max(1, triton.cdiv(num_requests, ROWS_PER_SLOT))


def round_draw_scratch(num_rows: int, vocab: int, block: int | None, device, programs: int | None) -> DrawScratch:
    """Scratch of the later draws over ``num_rows`` requests (``block`` / ``programs`` None: from
    ROUND_DRAW_SHAPES): grid (row_slots, SPLITS), each open row split like a draw of ROUND_SPLIT_AS_ROWS rows."""
    scratch = DrawScratch.allocate(num_rows, vocab, block, device, programs,
                                   split_as_rows=min(max(num_rows, 1), ROUND_SPLIT_AS_ROWS), table=ROUND_DRAW_SHAPES)
    scratch.row_slots = row_slots(num_rows)
    return scratch


def launch_rounds(cs: CheckScratch, draw_open, logits: torch.Tensor, mode: torch.Tensor, row: torch.Tensor,
                  slot: torch.Tensor, params, tokens: torch.Tensor, top: torch.Tensor, dtok: torch.Tensor,
                  seed: torch.Tensor, positions: torch.Tensor, cut: tuple | None = None, settle=None,
                  kept_above: torch.Tensor | None = None) -> None:
    """Everything after the first draw, a fixed launch sequence: its check, ``cs.rounds`` (draw, check) pairs over
    the rows still open, then the finish loop. ``draw_open(mode, cut_val, cut_idx, rows)`` launches the impl's draw
    over the list ``rows`` = (open_rows [R] int32, open_len [1] int32). ``settle``: a callable that launches the
    open-row kernel (``open_rows.launcher``): then the check lists every row it leaves open and that one launch
    settles them all (no rounds, no finish loop; the same tokens). ``kept_above``: ``launch_check``'s."""
    launch_check(cs, logits, mode, row, slot, params, tokens, top, dtok, 0, cut, append=True if settle else None,
                 kept_above=kept_above)
    if settle is not None:
        settle()
        return
    for i in range(1, cs.rounds + 1):
        draw_open(cs.mode, cs.cut_val, cs.cut_idx, (cs.open_rows[i - 1], cs.open_len[i - 1:i]))
        launch_check(cs, logits, mode, row, slot, params, tokens, top, dtok, i)
    launch_finish(cs, logits, row, slot, dtok, params, seed, positions, tokens, top)


def launch_check(cs: CheckScratch, logits: torch.Tensor, mode: torch.Tensor, row: torch.Tensor, slot: torch.Tensor,
                 params, tokens: torch.Tensor, top: torch.Tensor, dtok: torch.Tensor, check_round: int,
                 cut: tuple | None = None, append: bool | None = None, kept_above: torch.Tensor | None = None) -> None:
    """Check ``check_round`` (0: the first, over every request, reading the plan ``mode`` and the bounds
    ``cut``, default ``params.cut_*``; i > 0: the rows open after check i - 1); ``row`` / ``slot`` [R] int32: each
    request's draw row and token slot; ``top`` [2, R] float32: each row's largest processed value and whether one
    lane holds it (``DrawScratch.top`` of the first draw); ``dtok`` [R] int32: a RESIDUAL row's rejected draft;
    ``kept_above`` [R] float32: the value above which a RESIDUAL row's draw is known kept (a verify's; None: a plain
    sample, which has no RESIDUAL row, so ``top`` stands in, never read). Rows left open join list
    ``check_round`` unless it is the last (``append``: whether they do, default that rule)."""
    first = check_round == 0
    mode_in = mode if first else cs.mode
    cut_val_in, cut_idx_in = (cut or (params.cut_val, params.cut_idx)) if first else (cs.cut_val, cs.cut_idx)
    append = check_round < cs.rounds if append is None else append
    j_in, j_out = max(check_round - 1, 0), check_round if append else 0
    j_done = check_round - 2 if check_round >= 2 else cs.open_len.numel() - 1  # a spare length: nothing to reset
    grid = (mode.numel(), cs.splits) if first else (cs.row_slots, cs.splits)
    launch(_check_kernel, grid,
           logits, logits.stride(0), mode_in, cs.mode, row, slot, params.check, params.temp_div, params.cut_val,
           params.top_k, params.top_p, cut_val_in, cut_idx_in, cs.cut_val, cs.cut_idx, tokens, tokens.stride(0), top,
           dtok, top if kept_above is None else kept_above, cs.pall, cs.plow, cs.pcnt, cs.arrivals, cs.open_rows[j_in],
           cs.open_len[j_in:j_in + 1], cs.open_rows[j_out],
           cs.open_len[j_out:j_out + 1], cs.open_len[j_done:j_done + 1], logits.shape[1], cs.splits,
           LIST=not first, APPEND=append, SPAN=cs.span, BLOCK=min(cs.span, CHECK_BLOCK), num_warps=CHECK_WARPS,
           maxnreg=FIRST_CHECK_MAXNREG if first else None)


def launch_finish(cs: CheckScratch, logits: torch.Tensor, row: torch.Tensor, slot: torch.Tensor, dtok: torch.Tensor,
                  params, seed: torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor, top: torch.Tensor) -> None:
    """The one-program-per-row loop for rows still open (the others exit after one load); ``dtok`` [R]
    int32: the rejected draft of a RESIDUAL row."""
    last = max(cs.rounds - 1, 0)  # the last list: read by the last round, reset here
    launch(_finish_kernel, (cs.mode.numel(),),
           logits, logits.stride(0), cs.mode, row, slot, dtok, params.temp_div, params.cut_val, params.top_k,
           params.top_p, cs.cut_val, cs.cut_idx, seed, positions, tokens, tokens.stride(0), top, cs.pall, cs.plow,
           cs.pcnt, cs.open_len[last:last + 1], logits.shape[1], cs.splits, SPAN=cs.span,
           BLOCK=min(cs.span, CHECK_BLOCK), num_warps=CHECK_WARPS)
