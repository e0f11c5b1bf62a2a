"""Span statistics of one verify row and the row's log-sum-exp from them (``stochastic``'s position launches).

A verify row is read in spans of ``SPAN`` elements (tiles of ``BLOCK``), one program a span. Per span:
the raw max and its left-most index for greedy rows; for stochastic rows the processed max and sum of
exp(x - max) (and the same for the draft-logits row / temperature), and for rows decided by top-p bounds
the mass and largest value strictly before the draft and two level masses (:func:`span_bounds`, two passes over
the span; replay_kernels/verify_bounds.py). The terms' exp is ``ex2.exp_terms`` (two instructions instead of five;
the same sums).
The accept tests add the spans in span order (``partials.block_max`` and :func:`spans_sum`, in
:func:`global_lse` and ``verify_bounds.bounded_verdict``), so a row's sums depend on SPAN and BLOCK only,
never on the batch or on how the launches are laid out.

Each program loads its span's next tile before it reduces the current one (:func:`load_tile`), so one tile is in
flight while another is summed: the same values added in the same order, so the same sums bit for bit. Verify k=4
R = 256 on the H200: position launches 157 -> 139 µs, position 0 at 68% of DRAM bandwidth instead of 64%
(seventeenth session, docs/BENCHMARKS.md).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .ex2 import exp_terms
from .partials import block_max
from .params import process_loaded

# A bounded row's levels: its draft's value x_d minus NEAR_GAP and FAR_GAP; the mass at or above each bounds the first
# kept token's mass (verify_bounds.first_kept_bound). Two levels decide on the benchmark's rows as many tests as
# four at 2, 4, 8, 16 did (fewer block sums a tile; docs/BENCHMARKS.md, twenty-fourth session).
NEAR_GAP = tl.constexpr(4.0)
FAR_GAP = tl.constexpr(8.0)
# Planes of a bounded row's span stats (``sbound``): Rb, X2, the masses at or above x_d - NEAR_GAP and x_d - FAR_GAP.
PLANE_RB, PLANE_X2, PLANE_NEAR, PLANE_FAR = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2), tl.constexpr(3)
BOUND_PLANES = 4
# A bounded span's second pass: tiles of this many lanes (five per-lane accumulators: 8 registers each at 4 warps;
# 96 registers a thread, 5 programs an SM). The launches with bounded rows are uncapped: measured (H200, verify k=4
# + top-p 0.9, 20 steps, before ex2; docs/BENCHMARKS.md twenty-fifth session) at R = 64 1,024 at a cap of 80 (16 B of
# stack, 6 an SM) +1.8%, 512 uncapped (78 registers) and 512 at 72 (7 an SM) within 1% of 1,024 uncapped; at R = 8
# 512 was 3% faster (106.1 against 109.5 µs), not raced again with ex2.
BOUND_SUM_BLOCK = tl.constexpr(1024)
BOUND_MAXNREG = None


@triton.jit
def load_tile(base, start, hi, BLOCK: tl.constexpr):
    """Lanes ``[start, start + BLOCK)`` of a row as stored (lanes at or past ``hi`` read -inf, no bytes)."""
    offs = start + tl.arange(0, BLOCK)
    return tl.load(base + offs, mask=offs < hi, other=float("-inf"))


@triton.jit
def online(m, acc, x):
    """Running (max, sum of exp(x - max)) after adding the tile ``x`` (one rescale per tile)."""
    m_new = tl.maximum(m, tl.max(x, axis=0))
    if m_new > float("-inf"):
        acc = acc * tl.exp(m - m_new) + tl.sum(exp_terms(x - m_new), axis=0)  # a -inf lane: exp(-inf) = +0
    return m_new, acc


@triton.jit
def spans_sum(max_ptr, sum_ptr, gm, base, NB, CHUNK: tl.constexpr):
    """A row's span sums rescaled to its max ``gm``: the sum over spans of ``sum * exp(max - gm)`` (a span
    whose max is -inf adds 0), in span order, ``CHUNK`` spans at a time."""
    tot = tl.zeros((), tl.float32)
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        m = tl.load(max_ptr + base + offs, mask=offs < NB, other=float("-inf"), cache_modifier=".cg")
        s = tl.load(sum_ptr + base + offs, mask=offs < NB, other=0.0, cache_modifier=".cg")
        tot += tl.sum(tl.where(m > float("-inf"), s * tl.exp(m - gm), 0.0), axis=0)
    return tot


@triton.jit
def global_lse(max_ptr, sum_ptr, base, NB, CHUNK: tl.constexpr):
    """log-sum-exp of a row from its span (max, sum-exp) stats."""
    gm = block_max(max_ptr, base, NB, CHUNK)
    return gm + tl.log(spans_sum(max_ptr, sum_ptr, gm, base, NB, CHUNK))


@triton.jit
def span_bounds(row_base, lo, hi, d, xd, t, cv, ci, BLOCK: tl.constexpr, SUM_BLOCK: tl.constexpr):
    """A bounded row's stats over lanes [lo, hi): (max, sum of exp(x - max), the mass (Rb) and the largest value
    (X2) strictly before the draft ``d``, the masses at or above ``x_d - NEAR_GAP`` and ``x_d - FAR_GAP``), each
    exp taken against the span's max. Two passes: the per-lane max over tiles of BLOCK (one block reduction at
    the end), then the span again (from L1 / L2) in tiles of SUM_BLOCK, per-lane sums and a per-lane max reduced
    once each at the end: six block reductions a span instead of six a tile, and no rescaling. The order of the
    sums differs from :func:`online`'s; only the bounds read them, with a margin (verify_bounds.BOUND_TOL)."""
    lane_max = tl.full((BLOCK,), float("-inf"), tl.float32)
    raw_next = load_tile(row_base, lo, hi, BLOCK)
    for start in range(lo, hi, BLOCK):
        raw = raw_next
        raw_next = load_tile(row_base, start + BLOCK, hi, BLOCK)  # in flight while this tile is compared
        lane_max = tl.maximum(lane_max, process_loaded(raw, start + tl.arange(0, BLOCK), t, cv, ci))
    m = tl.max(lane_max, axis=0)
    acc_s = tl.zeros((SUM_BLOCK,), tl.float32)
    acc_rb = tl.zeros((SUM_BLOCK,), tl.float32)
    acc_x2 = tl.full((SUM_BLOCK,), float("-inf"), tl.float32)
    acc_hn = tl.zeros((SUM_BLOCK,), tl.float32)
    acc_hf = tl.zeros((SUM_BLOCK,), tl.float32)
    if m > float("-inf"):
        sub_next = load_tile(row_base, lo, hi, SUM_BLOCK)
        for start in range(lo, hi, SUM_BLOCK):
            offs = start + tl.arange(0, SUM_BLOCK)
            sub = sub_next
            sub_next = load_tile(row_base, start + SUM_BLOCK, hi, SUM_BLOCK)
            x = process_loaded(sub, offs, t, cv, ci)
            e = exp_terms(x - m)  # a -inf lane: +0
            before = (x < xd) | ((x == xd) & (offs < d))
            acc_s += e
            acc_rb += tl.where(before, e, 0.0)
            acc_x2 = tl.maximum(acc_x2, tl.where(before, x, float("-inf")))
            acc_hn += tl.where(x >= xd - NEAR_GAP, e, 0.0)
            acc_hf += tl.where(x >= xd - FAR_GAP, e, 0.0)
    return (m, tl.sum(acc_s, axis=0), tl.sum(acc_rb, axis=0), tl.max(acc_x2, axis=0), tl.sum(acc_hn, axis=0),
            tl.sum(acc_hf, axis=0))


@triton.jit
def processed_at(row_base, d, t, cv, ci):
    """The processed value of token ``d`` of a row (temperature, filter bound; NaN read as -inf)."""
    xd = tl.math.div_rn(tl.load(row_base + d).to(tl.float32), t)
    return tl.where((xd > cv) | ((xd == cv) & (d >= ci)), xd, float("-inf"))


@triton.jit
def span_stats(row_base, draft_base, lo, hi, greedy, bounded, d, xd, t, cv, ci, temp, smax_ptr, ssum_ptr, sarg_ptr,
                dmax_ptr, dsum_ptr, sbound_ptr, bstride, out,
                HAS_DRAFT: tl.constexpr, BLOCK: tl.constexpr):
    """The stats of lanes [lo, hi) of one verify row, stored at ``out``: raw max + left-most argmax
    (greedy), or processed max + sum-exp and the same for the draft row / temperature (stochastic);
    ``bounded`` rows also, at ``sbound + plane * bstride + out``: the mass (PLANE_RB) and the largest value
    (PLANE_X2) strictly before the draft ``d``, the masses at or above ``x_d - NEAR_GAP`` and ``x_d - FAR_GAP``
    (replay_kernels/verify_bounds.py; a compile-time ``False`` leaves that path out; steps with draft logits
    have no bounded row: ``prepare_params(check=draft is None)``, so a bounded row writes no draft stats)."""
    if greedy:
        best = tl.full((), float("-inf"), tl.float32)
        best_idx = lo
        raw_next = load_tile(row_base, lo, hi, BLOCK)
        for start in range(lo, hi, BLOCK):
            raw = raw_next.to(tl.float32)
            raw_next = load_tile(row_base, start + BLOCK, hi, BLOCK)  # in flight while this tile is reduced
            m, a = tl.max(tl.where(raw != raw, float("-inf"), raw), axis=0, return_indices=True)
            if m > best:
                best = m
                best_idx = start + a
        tl.store(smax_ptr + out, best)
        tl.store(sarg_ptr + out, best_idx)
    else:
        if bounded:
            m, s, rb, x2, hn, hf = span_bounds(row_base, lo, hi, d, xd, t, cv, ci, BLOCK, BOUND_SUM_BLOCK)
            tl.store(sbound_ptr + PLANE_RB * bstride + out, rb)
            tl.store(sbound_ptr + PLANE_X2 * bstride + out, x2)
            tl.store(sbound_ptr + PLANE_NEAR * bstride + out, hn)
            tl.store(sbound_ptr + PLANE_FAR * bstride + out, hf)
        else:
            m = tl.full((), float("-inf"), tl.float32)
            s = tl.zeros((), tl.float32)
            qm = tl.full((), float("-inf"), tl.float32)
            qs = tl.zeros((), tl.float32)
            raw_next = load_tile(row_base, lo, hi, BLOCK)
            q_next = raw_next  # a placeholder without draft logits (never read)
            if HAS_DRAFT:
                q_next = load_tile(draft_base, lo, hi, BLOCK)
            for start in range(lo, hi, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                raw = raw_next
                raw_next = load_tile(row_base, start + BLOCK, hi, BLOCK)  # in flight while this tile is summed
                q = q_next
                if HAS_DRAFT:
                    q_next = load_tile(draft_base, start + BLOCK, hi, BLOCK)
                m, s = online(m, s, process_loaded(raw, offs, t, cv, ci))
                if HAS_DRAFT:
                    q = tl.math.div_rn(q.to(tl.float32), temp)
                    qm, qs = online(qm, qs, tl.where(q != q, float("-inf"), q))
            if HAS_DRAFT:
                tl.store(dmax_ptr + out, qm)
                tl.store(dsum_ptr + out, qs)
        tl.store(smax_ptr + out, m)
        tl.store(ssum_ptr + out, s)
