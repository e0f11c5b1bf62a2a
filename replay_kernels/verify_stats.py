"""Span statistics of one verify row and the row's log-sum-exp from them (``stochastic``'s position launches).

A verify row is read in spans of ``SPAN`` elements (tiles of ``BLOCK``), one program a span. Per span:
the raw max and its left-most index for greedy rows; for stochastic rows the processed max and sum of
exp(x - max) (and the same for the draft-logits row / temperature), and for rows decided by top-p bounds
the mass and largest value strictly before the draft (:func:`tile_before`; replay_kernels/verify_bounds.py).
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
        acc = acc * tl.exp(m - m_new) + tl.sum(tl.where(x > float("-inf"), tl.exp(x - m_new), 0.0), axis=0)
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
def tile_before(x, offs, xd, d, e, rb, x2, hn, hf, scale):
    """Rescaled running (mass strictly before d, largest value strictly before d, masses at or above the levels
    ``x_d - NEAR_GAP`` and ``x_d - FAR_GAP``) after one tile; ``e = exp(x - m_new)`` (0 on -inf lanes),
    ``scale = exp(m_old - m_new)``."""
    before = (x < xd) | ((x == xd) & (offs < d))
    rb = rb * scale + tl.sum(tl.where(before, e, 0.0), axis=0)
    x2 = tl.maximum(x2, tl.max(tl.where(before, x, float("-inf")), axis=0))
    hn = hn * scale + tl.sum(tl.where(x >= xd - NEAR_GAP, e, 0.0), axis=0)
    hf = hf * scale + tl.sum(tl.where(x >= xd - FAR_GAP, e, 0.0), axis=0)
    return rb, x2, hn, hf


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
    (replay_kernels/verify_bounds.py; a compile-time ``False`` leaves that path out)."""
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
        m = tl.full((), float("-inf"), tl.float32)
        s = tl.zeros((), tl.float32)
        qm = tl.full((), float("-inf"), tl.float32)
        qs = tl.zeros((), tl.float32)
        rb = tl.zeros((), tl.float32)
        x2 = tl.full((), float("-inf"), tl.float32)
        hn = tl.zeros((), tl.float32)
        hf = tl.zeros((), tl.float32)
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
            x = process_loaded(raw, offs, t, cv, ci)
            if bounded:
                m_new = tl.maximum(m, tl.max(x, axis=0))
                if m_new > float("-inf"):
                    scale = tl.exp(m - m_new)
                    e = tl.where(x > float("-inf"), tl.exp(x - m_new), 0.0)
                    s = s * scale + tl.sum(e, axis=0)
                    rb, x2, hn, hf = tile_before(x, offs, xd, d, e, rb, x2, hn, hf, scale)
                m = m_new
            else:
                m, s = online(m, s, x)
            if HAS_DRAFT:
                q = tl.math.div_rn(q.to(tl.float32), temp)
                qm, qs = online(qm, qs, tl.where(q != q, float("-inf"), q))
        tl.store(smax_ptr + out, m)
        tl.store(ssum_ptr + out, s)
        if bounded:
            tl.store(sbound_ptr + PLANE_RB * bstride + out, rb)
            tl.store(sbound_ptr + PLANE_X2 * bstride + out, x2)
            tl.store(sbound_ptr + PLANE_NEAR * bstride + out, hn)
            tl.store(sbound_ptr + PLANE_FAR * bstride + out, hf)
        if HAS_DRAFT:
            tl.store(dmax_ptr + out, qm)
            tl.store(dsum_ptr + out, qs)
