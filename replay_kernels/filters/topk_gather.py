"""The filter bound of top-k rows from a gathered candidate set: two passes over the row, not 8 to 23.

A row with top-k (with or without top-p and min-p) keeps a subset of ``{x >= x_(k)}``, the values at or
above its k-th largest. Four launches find that set and its bound without the 16-way search of
:mod:`replay_kernels.filters.filters`:

1. ``_block_max_kernel``, grid ``(F, SPLITS)``: the maxima of the row's blocks of ``span / 32`` lanes (256)
   (clean values: temperature applied, NaN read as -inf). One read of the row.
2. ``_threshold_kernel``, grid ``(F,)``: ``M``, the row's largest value; the min-p bound ``L = M + log(min_p)``;
   ``L0``, a block maximum with at least k block maxima at or above it (the k-th largest, or a little below:
   ``THRESHOLD_ROUNDS``). The blocks are disjoint, so at least k values are ``>= L0``: ``x_(k) >= L0``. The
   threshold ``T = max(L0, L)``; ``L0 = -inf`` on a row with fewer than k finite blocks (every finite value).
3. ``_gather_kernel``, grid ``(F, cdiv(V, GATHER_SPAN))``: every finite lane with ``x >= T`` appends ``(x, id)``
   to its row's candidate list (each such lane takes its slot with one ``atomic_add``; a span without any
   writes nothing). One read of the row. The slot order is the arrival order: the searches below count and
   add in fixed point, so nothing depends on it.
4. ``_solve_kernel``, grid ``(F,)``: the searches of :mod:`replay_kernels.filters.filters` (16-way rounds over the
   monotone int32 key), on the n candidates instead of the row: the k-th largest value ``x_(k)`` (top-k keeps
   every value ``>= x_(k)``, ties kept, all of them candidates; with ``n < k`` min-p left fewer than k values,
   ``L > L0``, and keeps the candidates, all of them); for top-p (``p < 1``) over that kept set, the sum-exp
   ``S``, the largest value ``v*`` whose kept mass strictly below is at most ``(1 - p) S``, and inside the tie
   group at ``v*`` the count dropped in token-id order (the oracle's stable sort) and the id of the first
   kept. The masses ``exp(x - M)`` are added as int64 multiples of 2^-40: exact, so the sums do not depend
   on the order the candidates arrived in (fp32 rounds each term by at most 2^-24 relative; these drop terms
   below 2^-40 absolute, with ``S >= 1``: a finer rounding of the same near-tie class). A row of at most
   SEARCH_CHUNK (256) candidates reads each answer off one ascending sort of its (key, id) pairs instead
   (``_bound_by_sort``: same predicates, the same int64 terms summed as prefix sums; the real-derived rows have
   85 to 150 candidates, many tied at the threshold). With a
   :class:`CandidateDraw` (plain samples of ``gumbel-max``) it also draws the row's token: the kept set is among
   the candidates, so the Gumbel-max over the kept candidates is the draw over the row, without a third read.

A row whose candidates do not fit (``n > GATHER_CAP``: many ties at the top, or many finite values in few
blocks), of only -inf, or whose largest value is +inf is appended to the row list of
:func:`replay_kernels.filters.filters.launch_filters`, which searches its bound as before, when that list has rows of
its own (its launches run every step, graph-static); when it has none, the filter passes are not launched and
5. ``_row_solve_kernel``, grid ``(F,)``, solves those rows: the solve's searches over the whole row, one program
   a row (slow: about 20 reads of the row; every other program exits at once).
Rows with ``k > gather_max_k(V, span)`` stay with the search from the start (host rule, fixed by V).

Near-ties: the cumulative mass is a fixed-point sum, not the oracle's sorted fp32 cumsum: a top-p decision
within rounding of ``1 - p`` may differ, the class the search has too (replay_harness/oracle/near_tie.py).
Bytes per row: 2 reads of the row (8 B a value for fp32 logits) plus ``8 n`` B of candidates written and read
(a drawn row is not read again; a row left to the search is searched and drawn as before).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .bound_rules import KEY_ROUNDS, WAYS, candidates, clean, float_key, key_to_float, min_p_bound, narrow, tie_drops
from .candidate_draw import CandidateDraw, draw_candidates
from ..shared.launches import launch
from ..shared.rng import murmur3_row_key

GATHER_CAP = 2048           # candidates a row, searched by one program (a power of two)
GATHER_SPAN = 2048          # lanes a gather program reads (4 warps, 16 lanes a thread: per-lane atomics cost registers)
SEARCH_CHUNK = 256          # candidates a row solved by one sort (more: a search round reads 256 at a time)
SORT_SMALL = 64             # rows of at most this many candidates sorted at this width (the interpreter: 256 is slow)
THRESHOLD_CHUNK = 1024      # block maxima a round of the threshold search reads at a time (992 at V = 248,320: all)
THRESHOLD_ROUNDS = 3        # its 16-way rounds from the smallest finite block maximum (8 pin the k-th exactly)
SORT_SOLVE = True           # rows with at most SEARCH_CHUNK candidates: each search's answer off one sort
ROW_SOLVE = True            # rows that do not fit: the one-program search when no row is searched from the start
ROW_SOLVE_CHUNK = 512       # lanes a step of that search (1,024 spilled: 552 B a thread, triton 3.6)
BLOCKS_PER_SPAN = 32        # block maxima a span of the filter passes (blocks of span / 32 lanes)
GATHER_MAX_K = 256          # rows with a larger k keep the search (so do k above a quarter of the blocks)
SOLVE_WARPS = 4             # the solve (8: even, slower at R = 256; measured 2026-12-02)
THRESHOLD_WARPS = 8         # the threshold (16: slower at R = 1)
_ROUNDS, _WAYS = tl.constexpr(KEY_ROUNDS), tl.constexpr(WAYS)  # the searches' 16-way rounds over 32 bits


def gather_max_k(vocab: int, span: int) -> int:
    """The largest k gathered at this vocabulary: a quarter of the row's non-empty blocks, at most GATHER_MAX_K.

    The threshold is the k-th largest block maximum; with k at most a quarter of the blocks, an
    exchangeable row has about 1.15 k values above it (far below GATHER_CAP)."""
    lanes = max(1, span // BLOCKS_PER_SPAN)
    return min(GATHER_MAX_K, triton.cdiv(vocab, lanes) // 4)


@triton.jit
def _block_max_kernel(logits_ptr, stride, rows_ptr, temp_ptr, bmax_ptr, V, NB, SPAN: tl.constexpr,
                      NBLK: tl.constexpr):
    """Grid (F, SPLITS): the NBLK block maxima of span s of gather row f, from one load of the span."""
    f = tl.program_id(0)
    s = tl.program_id(1)
    row = tl.load(rows_ptr + f)
    x = clean(logits_ptr + row.to(tl.int64) * stride, s * SPAN + tl.arange(0, SPAN), V, tl.load(temp_ptr + row))
    tl.store(bmax_ptr + f * NB + s * NBLK + tl.arange(0, NBLK), tl.max(tl.reshape(x, (NBLK, SPAN // NBLK)), axis=1))


@triton.jit
def _chunk_partials(x, idx, live, c, kth, M, vstar, MODE: tl.constexpr):
    """One chunk's 16 partials (int64) for the candidates ``c`` (see :func:`_partials`)."""
    key = float_key(x)
    if MODE == 0:
        part = tl.sum((live[:, None] & (key[:, None] >= c[None, :])).to(tl.int32), axis=0).to(tl.int64)
    elif MODE == 1:
        e = _fixed(x, M, live & (key >= kth))
        part = tl.sum(tl.where(key[:, None] < c[None, :], e[:, None], 0), axis=0)
    else:
        part = tl.sum(((live & (x == vstar))[:, None] & (idx[:, None] < c[None, :])).to(tl.int32), axis=0).to(tl.int64)
    return part


@triton.jit
def _partials(x0, id0, vals_ptr, ids_ptr, n, c, kth, M, vstar, MODE: tl.constexpr, CHUNK: tl.constexpr, t=1.0,
              ROW: tl.constexpr = False):
    """One round's 16 partials over the n values at ``vals_ptr`` (token ids at ``ids_ptr``): the first CHUNK are
    ``x0`` / ``id0``, loaded once by the caller (a row's candidates, most often all of them), the rest are read a
    chunk at a time. ``ROW``: ``vals_ptr`` is a logits row of n values (clean values at temperature ``t``, token
    id = lane; ``ids_ptr`` unused).

    ``MODE`` 0: ``#{x : key(x) >= c}``; 1: ``sum{x >= kth, key(x) < c} fix(exp(x - M))`` (int64 fixed point, so
    the sum does not depend on the candidates' order); 2: ``#{x == vstar, id < c}``."""
    j0 = tl.arange(0, CHUNK)
    acc = _chunk_partials(x0, id0, j0 < n, c, kth, M, vstar, MODE)
    for start in range(CHUNK, n, CHUNK):
        j = start + j0
        if ROW:
            x = clean(vals_ptr, j, n, t)
        else:
            x = tl.load(vals_ptr + j, mask=j < n, other=float("-inf"))
        if MODE == 2 and not ROW:
            idx = tl.load(ids_ptr + j, mask=j < n, other=0)
        else:
            idx = j
        acc += _chunk_partials(x, idx, j < n, c, kth, M, vstar, MODE)
    return acc


@triton.jit
def _fixed(x, M, keep):
    """exp(x - M) in [0, 1] as int64 multiples of 2^-40 where ``keep`` (else 0): sums exact, in any order."""
    return tl.where(keep, (tl.exp(x - M) * 1099511627776.0).to(tl.int64), 0)


@triton.jit
def _mass(fixed):
    """A fixed-point sum of :func:`_fixed` as fp32."""
    return fixed.to(tl.float32) * 9.094947017729282e-13  # 2^-40


@triton.jit
def _search(x0, id0, vals_ptr, ids_ptr, n, c_lo, c_hi, target, kth, M, S, vstar, MODE: tl.constexpr,
            CHUNK: tl.constexpr, ROUNDS: tl.constexpr = _ROUNDS, t=1.0, ROW: tl.constexpr = False):
    """The largest c in [c_lo, c_hi] (int64) whose predicate holds, by 8 rounds of a 16-way search (2^32 values);
    with fewer ``ROUNDS``, a c where it holds, at most ``(c_hi - c_lo) / 16^ROUNDS`` below the largest.

    ``MODE`` 0: ``#{key >= c} >= target``; 1: ``mass(x >= kth, key < c) / S <= target``; 2: ``#{x == vstar,
    id < c} <= target``. Each is monotone in c and holds at ``c_lo``. ``t`` / ``ROW``: see :func:`_partials`."""
    lo = c_lo
    hi = c_hi
    for _ in tl.static_range(ROUNDS):
        c = candidates(lo, hi, _WAYS)
        part = _partials(x0, id0, vals_ptr, ids_ptr, n, c, kth, M, vstar, MODE, CHUNK, t, ROW)
        if MODE == 1:
            q = _mass(part) / S <= target
        elif MODE == 0:
            q = part >= target
        else:
            q = part <= target
        lo, hi = narrow(lo, hi, c, q)
    return lo


@triton.jit
def _threshold_kernel(rows_ptr, topk_ptr, logminp_ptr, bmax_ptr, thr_ptr, m_ptr, cnt_ptr, fb_count_ptr, listed, NB,
                      CHUNK: tl.constexpr, ROUNDS: tl.constexpr):
    """Grid (F,): M, the gather threshold max(L0, L) (+inf: leave the row to the search), the candidate
    count set to 0; program 0 sets the search's list back to its ``listed`` rows. L0 is a block maximum
    value with at least k block maxima at or above it, searched from the smallest finite block maximum in
    ``ROUNDS`` 16-way rounds: the k-th largest block maximum when they pin it, a little below otherwise
    (a few more candidates; any such L0 has at least k values at or above it)."""
    f = tl.program_id(0)
    if f == 0:
        tl.store(fb_count_ptr, listed)
    row = tl.load(rows_ptr + f)
    kk = tl.load(topk_ptr + row)  # 1 <= kk <= NB (gather_max_k); loaded before the block maxima, with them
    log_min_p = tl.load(logminp_ptr + row)
    j0 = tl.arange(0, CHUNK)
    x0 = tl.load(bmax_ptr + f * NB + j0, mask=j0 < NB, other=float("-inf"))
    M = tl.max(x0, axis=0)
    low = tl.min(tl.where(x0 > float("-inf"), x0, float("inf")), axis=0)  # the smallest finite block maximum
    finite = tl.sum((x0 > float("-inf")).to(tl.int32), axis=0)
    for start in range(CHUNK, NB, CHUNK):
        j = start + j0
        x = tl.load(bmax_ptr + f * NB + j, mask=j < NB, other=float("-inf"))
        M = tl.maximum(M, tl.max(x, axis=0))
        low = tl.minimum(low, tl.min(tl.where(x > float("-inf"), x, float("inf")), axis=0))
        finite += tl.sum((x > float("-inf")).to(tl.int32), axis=0)
    ok = (M > float("-inf")) & (M < float("inf"))  # else a row of only -inf (or NaN), or +inf: the search
    L0 = tl.full((), float("-inf"), tl.float32)  # fewer than k finite blocks (a masked row): every finite value
    if ok & (finite >= kk):  # #{block max >= low} >= k: the predicate holds at low
        L0 = key_to_float(_search(x0, j0, bmax_ptr + f * NB, bmax_ptr, NB, float_key(low).to(tl.int64),
                                  float_key(M).to(tl.int64), kk.to(tl.int64), 0, M, 1.0, M, 0, CHUNK, ROUNDS))
    L = min_p_bound(M, log_min_p)
    tl.store(thr_ptr + f, tl.where(ok, tl.maximum(L0, L), float("inf")))
    tl.store(m_ptr + f, M)
    tl.store(cnt_ptr + f, 0)


@triton.jit
def _gather_kernel(logits_ptr, stride, rows_ptr, temp_ptr, thr_ptr, cnt_ptr, vals_ptr, ids_ptr, V,
                   SPAN: tl.constexpr, CAP: tl.constexpr):
    """Grid (F, cdiv(V, SPAN)): append the lanes of span s with x >= T to row f's candidates, from one load of the
    span: each such lane (a few a row) takes its slot with its own ``atomic_add``; slots past CAP are
    counted, not written."""
    f = tl.program_id(0)
    s = tl.program_id(1)
    thr = tl.load(thr_ptr + f)
    if thr < float("inf"):
        row = tl.load(rows_ptr + f)
        offs = s * SPAN + tl.arange(0, SPAN)
        x = clean(logits_ptr + row.to(tl.int64) * stride, offs, V, tl.load(temp_ptr + row))
        sel = (x >= thr) & (x > float("-inf"))  # T may be -inf (a masked row): -inf lanes are never candidates
        if tl.max(sel.to(tl.int32), axis=0) > 0:
            pos = tl.atomic_add(cnt_ptr + f + tl.zeros([SPAN], tl.int32), 1, mask=sel)
            tl.store(vals_ptr + f * CAP + pos, x, mask=sel & (pos < CAP))
            tl.store(ids_ptr + f * CAP + pos, offs, mask=sel & (pos < CAP))


@triton.jit
def _bound_by_search(x0, id0, vals, ids, n, thr, kk, p, M, CHUNK: tl.constexpr, t=1.0, ROW: tl.constexpr = False):
    """(cut_val, cut_idx) of a row from its n candidates by the three 16-way searches (the first CHUNK in ``x0`` /
    ``id0``, the rest read a chunk at a time): the k-th largest value; for top-p the value v* and the tie cut.
    ``t`` / ``ROW``: the n values are a logits row (:func:`_partials`)."""
    top = float_key(M).to(tl.int64)
    kth = _search(x0, id0, vals, ids, n, float_key(thr).to(tl.int64), top, kk, 0, M, 1.0, M, 0, CHUNK, _ROUNDS, t,
                  ROW)
    cut_val = key_to_float(kth)
    cut_idx = tl.zeros((), tl.int32)
    if p < 1.0:
        c = tl.full([_WAYS], 2147483647, tl.int64)  # every kept value is below: the total mass
        S = _mass(tl.max(_partials(x0, id0, vals, ids, n, c, kth, M, M, 1, CHUNK, t, ROW), axis=0))
        omp = 1.0 - p
        vstar = _search(x0, id0, vals, ids, n, kth, top, omp, kth, M, S, M, 1, CHUNK, _ROUNDS, t, ROW)  # mass below
        cut_val = key_to_float(vstar)
        m = tl.max(_partials(x0, id0, vals, ids, n, c, kth, M, cut_val, 2, CHUNK, t, ROW), axis=0)  # v*'s tie group
        if m > 1:  # the oracle's stable sort cuts the tie group in id order: drop its ndrop lowest ids
            vs = tl.full([_WAYS], 0, tl.int64) + vstar
            below = _mass(tl.max(_partials(x0, id0, vals, ids, n, vs, kth, M, M, 1, CHUNK, t, ROW), axis=0))
            ndrop = tie_drops(omp, below, S, cut_val, M, m).to(tl.int64)
            if ndrop > 0:
                zero = tl.zeros((), tl.int64)
                cut_idx = _search(x0, id0, vals, ids, n, zero, zero + 2147483647, ndrop, kth, M, S, cut_val, 2,
                                  CHUNK, _ROUNDS, t, ROW).to(tl.int32)
    return cut_val, cut_idx


@triton.jit
def _bound_by_sort(x0, id0, n, thr, kk, p, M, CHUNK: tl.constexpr):
    """The same (cut_val, cut_idx) as :func:`_bound_by_search` for a row whose n <= CHUNK candidates are all in
    ``x0`` / ``id0``, read off one ascending sort of (key, id) instead of 8 rounds a search: the k-th largest is at
    position CHUNK - k; a tie group's first position has the exclusive prefix sum of the kept masses (the same
    int64 terms) equal to the mass strictly below it, and the later positions of a group hold more, so the
    largest value passing the top-p predicate on the prefixes is the one passing it on the masses below; the
    group's members are in id order, so the tie cut is at its first position plus the count dropped.
    Values come back through their key (-0.0 as +0.0), as the search's do."""
    pos = tl.arange(0, CHUNK)
    first = CHUNK - n  # dead lanes (x = -inf, never a candidate) sort first
    s = tl.sort((float_key(x0).to(tl.int64) << 32) | id0.to(tl.int64))
    u = key_to_float((s >> 32).to(tl.int32))
    kth = tl.max(tl.where(pos == CHUNK - kk, u, float("-inf")), axis=0)  # the kk-th largest
    kth = key_to_float(float_key(tl.where(n >= kk, kth, thr)))  # fewer than k (min-p kept fewer): every one
    cut_val = kth
    cut_idx = tl.zeros((), tl.int32)
    if p < 1.0:
        kept = (pos >= first) & (u >= kth)
        e = _fixed(u, M, kept)
        S = _mass(tl.sum(e, axis=0))
        omp = 1.0 - p
        prefix = tl.cumsum(e, axis=0) - e  # kept mass at earlier positions
        cut_val = key_to_float(float_key(tl.max(tl.where(kept & (_mass(prefix) / S <= omp), u, kth), axis=0)))
        tie = (pos >= first) & (u == cut_val)
        m = tl.sum(tie.to(tl.int32), axis=0)
        if m > 1:  # drop the tie group's ndrop lowest ids: keep from its position start + ndrop
            start = tl.min(tl.where(tie, pos, CHUNK), axis=0)
            below = tl.sum(tl.where(pos == start, prefix, 0), axis=0)
            ndrop = tie_drops(omp, _mass(below), S, cut_val, M, m).to(tl.int32)
            if ndrop > 0:
                cut_idx = tl.max(tl.where(pos == start + ndrop, (s & 0x7FFFFFFF).to(tl.int32), 0), axis=0)
    return cut_val, cut_idx


@triton.jit
def _solve_row(vals, ids, n, thr, kk, p, M, key, draw, by_sort, CHUNK: tl.constexpr, SEARCH: tl.constexpr):
    """(cut_val, cut_idx, token) of a row from its n candidates, the first CHUNK loaded once: by one sort when
    ``by_sort`` (n <= CHUNK), else (``SEARCH`` compiled in) by the searches; the token (when ``draw``) from the
    kept candidates."""
    j0 = tl.arange(0, CHUNK)
    x0 = tl.load(vals + j0, mask=j0 < n, other=float("-inf"))
    id0 = tl.load(ids + j0, mask=j0 < n, other=0)
    # top-k: every value >= the k-th largest; fewer than k candidates (min-p kept fewer): all (x >= thr)
    if SEARCH:
        if by_sort:
            cut_val, cut_idx = _bound_by_sort(x0, id0, n, thr, kk, p, M, CHUNK)
        else:
            cut_val, cut_idx = _bound_by_search(x0, id0, vals, ids, n, thr, kk, p, M, CHUNK)
    else:
        cut_val, cut_idx = _bound_by_sort(x0, id0, n, thr, kk, p, M, CHUNK)
    tok = tl.zeros((), tl.int32)
    if draw:
        tok = draw_candidates(x0, id0, vals, ids, n, cut_val, cut_idx, key, CHUNK)
    return cut_val, cut_idx, tok


@triton.jit
def _solve_kernel(rows_ptr, topk_ptr, topp_ptr, thr_ptr, m_ptr, cnt_ptr, vals_ptr, ids_ptr, cut_val_ptr, cut_idx_ptr,
                  fb_rows_ptr, fb_count_ptr, req_ptr, seed_ptr, pos_ptr, tokens_ptr, tok_stride, mode_ptr,
                  CAP: tl.constexpr, CHUNK: tl.constexpr, SORT_SMALL: tl.constexpr, SORT: tl.constexpr,
                  DRAW: tl.constexpr, DONE: tl.constexpr, OPEN: tl.constexpr):
    """Grid (F,): the bound of row f from its n candidates, the filter passes' three searches on them only
    (k-th value; top-p value v*; the tie cut in id order), or the row appended to the search's list.
    ``DRAW`` (:class:`CandidateDraw`): request ``req[f]`` (if >= 0) also gets its token, drawn from the kept
    candidates, and its draw plan ``mode[req[f]]`` set to DONE; OPEN when the row was appended."""
    f = tl.program_id(0)
    row = tl.load(rows_ptr + f)
    n = tl.load(cnt_ptr + f)
    thr = tl.load(thr_ptr + f)
    # every scalar the program reads, loaded up front so their round trips overlap (a program is latency)
    M = tl.load(m_ptr + f)  # the largest candidate
    kk = tl.load(topk_ptr + row).to(tl.int64)
    p = tl.load(topp_ptr + row)
    r = -1
    key = tl.zeros((), tl.uint32)
    if DRAW:
        r = tl.load(req_ptr + f)
        key = murmur3_row_key(tl.load(seed_ptr + tl.maximum(r, 0)), tl.load(pos_ptr + row))
    if (thr < float("inf")) & (n <= CAP):
        vals = vals_ptr + f * CAP
        ids = ids_ptr + f * CAP
        if SORT & (n <= SORT_SMALL):  # most rows: a narrow sort (exchangeable rows have about 1.15 k candidates)
            cut_val, cut_idx, tok = _solve_row(vals, ids, n, thr, kk, p, M, key, r >= 0, True, SORT_SMALL, False)
        else:
            cut_val, cut_idx, tok = _solve_row(vals, ids, n, thr, kk, p, M, key, r >= 0, SORT & (n <= CHUNK), CHUNK,
                                               True)
        tl.store(cut_val_ptr + row, cut_val)
        tl.store(cut_idx_ptr + row, cut_idx)
        if r >= 0:
            tl.store(tokens_ptr + r * tok_stride, tok.to(tl.int64))
            tl.store(mode_ptr + r, DONE)
    else:
        tl.store(fb_rows_ptr + tl.atomic_add(fb_count_ptr, 1), row)
        if r >= 0:
            tl.store(mode_ptr + r, OPEN)


@triton.jit
def _row_solve_kernel(logits_ptr, stride, rows_ptr, temp_ptr, topk_ptr, topp_ptr, logminp_ptr, thr_ptr, m_ptr,
                      cnt_ptr, cut_val_ptr, cut_idx_ptr, V, CAP: tl.constexpr, CHUNK: tl.constexpr):
    """Grid (F,): the bound of each gathered row that did not fit, by the same searches over the whole row in one
    program (CHUNK lanes a step, about 20 reads of the row: slow, for rows of more than CAP candidates, of only
    -inf or with +inf; the other programs exit at once). Launched instead of the filter passes when no row is
    searched from the start: one launch where they take 10 to 23."""
    f = tl.program_id(0)
    if (tl.load(thr_ptr + f) == float("inf")) | (tl.load(cnt_ptr + f) > CAP):
        row = tl.load(rows_ptr + f)
        M = tl.load(m_ptr + f)
        cut_val = tl.full((), float("-inf"), tl.float32)  # a row of only -inf: every value is -inf anyway
        cut_idx = tl.zeros((), tl.int32)
        if M > float("-inf"):
            t = tl.load(temp_ptr + row)
            row_ptr = logits_ptr + row.to(tl.int64) * stride
            j0 = tl.arange(0, CHUNK)
            # with +inf the masses are NaN and no top-p cut holds: the top-k set (and the min-p bound) is kept
            p = tl.where(M == float("inf"), 1.0, tl.load(topp_ptr + row))
            L = min_p_bound(M, tl.load(logminp_ptr + row))
            cut_val, cut_idx = _bound_by_search(clean(row_ptr, j0, V, t), j0, row_ptr, row_ptr, V, L,
                                                tl.load(topk_ptr + row).to(tl.int64), p, M, CHUNK, t, True)
        tl.store(cut_val_ptr + row, cut_val)
        tl.store(cut_idx_ptr + row, cut_idx)


@dataclass
class GatherScratch:
    """Device scratch of the gather for F rows: rows [F] int32 (the gathered rows), bmax [F, NB] float32
    (NB = SPLITS x BLOCKS_PER_SPAN block maxima), thr / m [F] float32, cnt [F] int32 (candidates found),
    vals [F, GATHER_CAP] float32 / ids [F, GATHER_CAP] int32 (the candidates, in arrival order). ``listed``: the
    rows the search's list holds before any is appended (host int)."""

    rows: torch.Tensor
    bmax: torch.Tensor
    thr: torch.Tensor
    m: torch.Tensor
    cnt: torch.Tensor
    vals: torch.Tensor
    ids: torch.Tensor
    span: int
    listed: int
    draw: CandidateDraw | None = None

    @property
    def row_solve(self) -> bool:
        """Whether rows that do not fit are solved by ``_row_solve_kernel`` (no row is searched from the start,
        so the filter passes are not launched) rather than appended to the search's list."""
        return ROW_SOLVE and self.listed == 0

    @classmethod
    def allocate(cls, rows: torch.Tensor, splits: int, span: int, listed: int, device) -> "GatherScratch":
        f = rows.numel()
        nblk = min(BLOCKS_PER_SPAN, span)
        i32 = dict(dtype=torch.int32, device=device)
        return cls(rows=rows.to(**i32), bmax=torch.empty((f, splits * nblk), dtype=torch.float32, device=device),
                   thr=torch.empty(f, dtype=torch.float32, device=device),
                   m=torch.empty(f, dtype=torch.float32, device=device), cnt=torch.zeros(f, **i32),
                   vals=torch.empty((f, GATHER_CAP), dtype=torch.float32, device=device),
                   ids=torch.empty((f, GATHER_CAP), **i32),
                   span=span, listed=listed)


def launch_gather(logits: torch.Tensor, gs: GatherScratch, temp_div: torch.Tensor, log_min_p: torch.Tensor,
                  top_k: torch.Tensor, top_p: torch.Tensor, cut_val: torch.Tensor, cut_idx: torch.Tensor,
                  search_rows: torch.Tensor, search_count: torch.Tensor) -> None:
    """Device work only (graph-capturable): the bounds of the rows ``gs.rows``; a row that cannot be
    gathered is appended to ``search_rows[search_count:]`` (``search_count`` is first set to ``gs.listed``)."""
    F, V = gs.rows.numel(), logits.shape[1]
    if F == 0:
        return
    nb, nblk = gs.bmax.shape[1], min(BLOCKS_PER_SPAN, gs.span)
    head = (logits, logits.stride(0), gs.rows, temp_div)
    launch(_block_max_kernel, (F, nb // nblk), *head, gs.bmax, V, nb, SPAN=gs.span, NBLK=nblk, num_warps=8)
    launch(_threshold_kernel, (F,), gs.rows, top_k, log_min_p, gs.bmax, gs.thr, gs.m, gs.cnt, search_count,
           gs.listed, nb, CHUNK=min(THRESHOLD_CHUNK, triton.next_power_of_2(nb)), ROUNDS=THRESHOLD_ROUNDS,
           num_warps=THRESHOLD_WARPS)
    gspan = min(GATHER_SPAN, gs.span)
    launch(_gather_kernel, (F, triton.cdiv(V, gspan)), *head, gs.thr, gs.cnt, gs.vals, gs.ids, V, SPAN=gspan,
           CAP=GATHER_CAP, num_warps=4)
    d = gs.draw
    draw_args = ((d.req, d.seed, d.positions, d.tokens, d.tokens.stride(0), d.mode) if d is not None
                 else (gs.rows, gs.rows, gs.rows, gs.rows, 0, gs.rows))  # placeholders, unused without DRAW
    launch(_solve_kernel, (F,), gs.rows, top_k, top_p, gs.thr, gs.m, gs.cnt, gs.vals, gs.ids, cut_val, cut_idx,
           search_rows, search_count, *draw_args, CAP=GATHER_CAP, CHUNK=SEARCH_CHUNK, SORT_SMALL=SORT_SMALL,
           SORT=SORT_SOLVE, DRAW=d is not None, DONE=d.done if d else 0, OPEN=d.open if d else 0, num_warps=SOLVE_WARPS)
    if gs.row_solve:
        launch(_row_solve_kernel, (F,), *head, top_k, top_p, log_min_p, gs.thr, gs.m, gs.cnt, cut_val, cut_idx, V,
               CAP=GATHER_CAP, CHUNK=ROW_SOLVE_CHUNK, num_warps=8)
