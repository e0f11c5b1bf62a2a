"""Span statistics of one verify row and the row's log-sum-exp from them (``stochastic``'s position launches).

A verify row is read in spans of ``SPAN`` elements (whole tiles of ``BLOCK``), one or several a program. Per span:
the raw max and its left-most index for greedy rows; for stochastic rows the processed max and sum of
exp(x - max) (and the same for the draft-logits row / temperature), and for rows decided by top-p bounds
the mass and largest value strictly before the draft and two level masses, against the draft's value
(:func:`span_bounds`, one pass over the span; replay_kernels/verify/verify_bounds.py). The terms' exp is
``ex2.exp_terms`` (two instructions instead of five; the same sums).
The accept tests add the spans in span order (``partials.block_max``, :func:`spans_sum` and :func:`bound_sums`, in
:func:`global_lse` and ``verify_bounds.bounded_verdict``), so a row's sums depend on SPAN and BLOCK only,
never on the batch or on how the launches are laid out.

Each program loads its span's next tile before it reduces the current one (:func:`load_tile`), so one tile is in
flight while another is summed: the same values added in the same order, so the same sums bit for bit. Verify k=4
R = 256 on the H200: position launches 157 -> 139 µs, position 0 at 68% of DRAM bandwidth instead of 64%
(measured 2026-12-02; docs/KERNELS.md "Verify position launches").
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..shared.ex2 import LOG2E, exp2_terms, exp_terms
from ..shared.partials import block_max
from ..filters.bound_rules import keep_mask
from ..filters.params import process_loaded

# A bounded row's levels: its draft's value x_d minus NEAR_GAP and FAR_GAP; the mass at or above each bounds the first
# kept token's mass (verify_bounds.first_kept_bound). Two levels decide on the benchmark's rows as many tests as
# four at 2, 4, 8, 16 did (fewer block sums a tile; measured 2026-12-03).
NEAR_GAP = tl.constexpr(4.0)
FAR_GAP = tl.constexpr(8.0)
# Planes of a bounded row's span stats (``sbound``): Rb, X2, the masses at or above x_d - NEAR_GAP and x_d - FAR_GAP.
PLANE_RB, PLANE_X2, PLANE_NEAR, PLANE_FAR = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2), tl.constexpr(3)
BOUND_PLANES = 4
# A bounded span's tile (six per-lane accumulators of this many lanes) and the bounded launches' register cap: 62
# registers used, no stack, 8 programs an SM. Measured (H200, verify k=4 + top-p 0.9 R = 64, 20 steps;
# 2026-12-03): tiles of 1,024 (112 registers, 4 an SM) +1.6%, two tiles in flight
# +0.2%, uncapped (69 registers, 7 an SM) +0.9%.
BOUND_BLOCK = tl.constexpr(512)
BOUND_MAXNREG = 64


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
def _rescaled(m, s, gm):
    """One chunk of span (max ``m``, sum ``s``) pairs rescaled to the row's max ``gm`` and added (a span whose max
    is -inf adds 0): what :func:`spans_sum` and :func:`global_lse` add, the same bits in both."""
    return tl.sum(tl.where(m > float("-inf"), s * tl.exp(m - gm), 0.0), axis=0)


@triton.jit
def spans_sum(max_ptr, sum_ptr, gm, base, NB, CHUNK: tl.constexpr):
    """A row's span sums rescaled to its max ``gm``: the sum over spans of ``sum * exp(max - gm)`` (a span
    whose max is -inf adds 0), in span order, ``CHUNK`` spans at a time."""
    tot = tl.zeros((), tl.float32)
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        m = tl.load(max_ptr + base + offs, mask=offs < NB, other=float("-inf"), cache_modifier=".cg")
        s = tl.load(sum_ptr + base + offs, mask=offs < NB, other=0.0, cache_modifier=".cg")
        tot += _rescaled(m, s, gm)
    return tot


@triton.jit
def bound_sums(smax_ptr, ssum_ptr, sbound_ptr, bstride, base, NB, CHUNK: tl.constexpr):
    """A bounded row's (max M, S, Rb, X2, the masses at or above x_d - NEAR_GAP and x_d - FAR_GAP) from its span
    stats (:func:`span_bounds`): every plane of ``CHUNK`` spans loaded at once (one round trip to L2 a chunk, not
    one a plane), the sums added in span order."""
    gm = tl.full((), float("-inf"), tl.float32)
    x2 = tl.full((), float("-inf"), tl.float32)
    S = tl.zeros((), tl.float32)
    rb = tl.zeros((), tl.float32)
    hn = tl.zeros((), tl.float32)
    hf = tl.zeros((), tl.float32)
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        ok = offs < NB
        at = base + offs
        m = tl.load(smax_ptr + at, mask=ok, other=float("-inf"), cache_modifier=".cg")
        s = tl.load(ssum_ptr + at, mask=ok, other=0.0, cache_modifier=".cg")
        r = tl.load(sbound_ptr + PLANE_RB * bstride + at, mask=ok, other=0.0, cache_modifier=".cg")
        x = tl.load(sbound_ptr + PLANE_X2 * bstride + at, mask=ok, other=float("-inf"), cache_modifier=".cg")
        n = tl.load(sbound_ptr + PLANE_NEAR * bstride + at, mask=ok, other=0.0, cache_modifier=".cg")
        f = tl.load(sbound_ptr + PLANE_FAR * bstride + at, mask=ok, other=0.0, cache_modifier=".cg")
        gm = tl.maximum(gm, tl.max(m, axis=0))
        x2 = tl.maximum(x2, tl.max(x, axis=0))
        S += tl.sum(s, axis=0)
        rb += tl.sum(r, axis=0)
        hn += tl.sum(n, axis=0)
        hf += tl.sum(f, axis=0)
    return gm, S, rb, x2, hn, hf


@triton.jit
def global_lse(max_ptr, sum_ptr, base, NB, CHUNK: tl.constexpr):
    """log-sum-exp of a row from its span (max, sum-exp) stats. Up to ``CHUNK`` spans the maxima and sums are
    loaded once, together (one round trip to L2 instead of two), and added exactly as ``block_max`` and
    :func:`spans_sum` add them."""
    if NB <= CHUNK:
        offs = tl.arange(0, CHUNK)
        m = tl.load(max_ptr + base + offs, mask=offs < NB, other=float("-inf"), cache_modifier=".cg")
        s = tl.load(sum_ptr + base + offs, mask=offs < NB, other=0.0, cache_modifier=".cg")
        gm = tl.max(m, axis=0)
        tot = _rescaled(m, s, gm)
    else:
        gm = block_max(max_ptr, base, NB, CHUNK)
        tot = spans_sum(max_ptr, sum_ptr, gm, base, NB, CHUNK)
    return gm + tl.log(tot)


@triton.jit
def span_bounds(row_base, lo, hi, d, xd, t, cv, ci, BLOCK: tl.constexpr):
    """A bounded row's stats over lanes [lo, hi) in one pass: (max, then against the draft's value ``x_d``: the sum
    of ``exp(x - x_d)`` (S), the mass (Rb) and the largest value (X2) strictly before the draft ``d``, the masses at or
    above ``x_d - NEAR_GAP`` and ``x_d - FAR_GAP``). Per-lane sums and a per-lane max over tiles of BLOCK, each
    reduced once at the end: six block reductions a span, no rescaling, and the span read once. Every exp is taken
    against ``x_d`` (0 where ``x_d`` is -inf: the verdict then reads no sum), so the sums are exact-scale only while
    the row's max is within ``verify_bounds.REF_GAP`` of ``x_d``; the verdict checks that. A NaN logit is not read as
    -inf here (unlike :func:`process_loaded`): it makes S NaN, which the verdict leaves to the exact cut; the max,
    X2, Rb and the levels skip it (a NaN compares false). The order of the sums differs from :func:`online`'s; only
    the bounds read them, with a margin (verify_bounds.BOUND_TOL)."""
    c2 = tl.where(xd > float("-inf"), xd, 0.0) * LOG2E
    near = xd - NEAR_GAP
    far = xd - FAR_GAP
    lane_max = tl.full((BLOCK,), float("-inf"), tl.float32)
    acc_s = tl.zeros((BLOCK,), tl.float32)
    acc_rb = tl.zeros((BLOCK,), tl.float32)
    acc_x2 = tl.full((BLOCK,), float("-inf"), tl.float32)
    acc_hn = tl.zeros((BLOCK,), tl.float32)
    acc_hf = tl.zeros((BLOCK,), tl.float32)
    raw_next = load_tile(row_base, lo, hi, BLOCK)
    for start in range(lo, hi, BLOCK):
        raw = raw_next
        raw_next = load_tile(row_base, start + BLOCK, hi, BLOCK)  # in flight while this tile is summed
        x = raw.to(tl.float32)
        if t != 1.0:
            x = tl.math.div_rn(x, t)
        if cv != float("-inf"):
            x = tl.where(keep_mask(x, start + tl.arange(0, BLOCK), cv, ci), x, float("-inf"))
        e = exp2_terms(x * LOG2E - c2)  # one FMA and one MUFU.EX2; a -inf lane: +0
        # strictly before d in the (value, id) order: a tie with x_d counts below d's id; every tile but d's own
        # lies wholly on one side of it (a scalar, not a lane's id compared)
        if (start < d) & (d < start + BLOCK):
            before = (x < xd) | ((x == xd) & (start + tl.arange(0, BLOCK) < d))
        else:
            before = (x < xd) | ((x == xd) & (d >= start + BLOCK))
        lane_max = tl.maximum(lane_max, x)
        acc_s += e
        acc_rb += tl.where(before, e, 0.0)
        acc_x2 = tl.maximum(acc_x2, tl.where(before, x, float("-inf")))
        acc_hn += tl.where(x >= near, e, 0.0)
        acc_hf += tl.where(x >= far, e, 0.0)
    return (tl.max(lane_max, axis=0), tl.sum(acc_s, axis=0), tl.sum(acc_rb, axis=0), tl.max(acc_x2, axis=0),
            tl.sum(acc_hn, axis=0), tl.sum(acc_hf, axis=0))


@triton.jit
def processed_at(row_base, d, t, cv, ci):
    """The processed value of token ``d`` of a row (temperature, filter bound; NaN read as -inf)."""
    xd = tl.math.div_rn(tl.load(row_base + d).to(tl.float32), t)
    return tl.where((xd > cv) | ((xd == cv) & (d >= ci)), xd, float("-inf"))


@triton.jit
def span_ends(start, lo, hi, SPAN: tl.constexpr, BLOCK: tl.constexpr):
    """Whether the tile at ``start`` is the last of a span of a program's lanes [lo, hi) and another span follows
    (spans are whole tiles: ``StochasticSampler`` checks SPAN % BLOCK == 0)."""
    return ((start + BLOCK - lo) % SPAN == 0) & (start + BLOCK < hi)


@triton.jit
def span_stats(row_base, draft_base, lo, hi, first, greedy, bounded, d, xd, t, cv, ci, temp, smax_ptr, ssum_ptr,
                sarg_ptr, dmax_ptr, dsum_ptr, sbound_ptr, bstride, out,
                HAS_DRAFT: tl.constexpr, BLOCK: tl.constexpr, FIRST: tl.constexpr, SPAN: tl.constexpr,
                SPANS: tl.constexpr):
    """The stats of lanes [lo, hi) of one verify row, stored at ``out``: raw max + left-most argmax
    (greedy), or processed max + sum-exp and the same for the draft row / temperature (stochastic);
    ``bounded`` rows also, at ``sbound + plane * bstride + out``: the mass (PLANE_RB) and the largest value
    (PLANE_X2) strictly before the draft ``d``, the masses at or above ``x_d - NEAR_GAP`` and ``x_d - FAR_GAP``
    (replay_kernels/verify/verify_bounds.py; a compile-time ``False`` leaves that path out; steps with draft logits
    have no bounded row: ``prepare_params(check=draft is None)``, so a bounded row writes no draft stats).
    ``FIRST``: ``first`` is the span's first tile of BLOCK lanes, loaded by the caller together with the draft token
    (a launch without bounds; the same values as loading it here, one dependent round trip earlier).
    [lo, hi) holds up to ``SPANS`` spans of ``SPAN`` lanes (a bounded row: one): each span's stats are taken from
    -inf and 0 over its own tiles and stored at ``out`` + its index, so the same bits as one program a span; the
    next span's first tile is in flight while the last of the previous one is reduced."""
    if greedy:
        best = tl.full((), float("-inf"), tl.float32)
        best_idx = lo
        raw_next = first if FIRST else load_tile(row_base, lo, hi, BLOCK)
        for start in range(lo, hi, BLOCK):
            raw = raw_next.to(tl.float32)
            raw_next = load_tile(row_base, start + BLOCK, hi, BLOCK)  # in flight while this tile is reduced
            m, a = tl.max(tl.where(raw != raw, float("-inf"), raw), axis=0, return_indices=True)
            if m > best:
                best = m
                best_idx = start + a
            if SPANS > 1:
                if span_ends(start, lo, hi, SPAN, BLOCK):
                    tl.store(smax_ptr + out, best)
                    tl.store(sarg_ptr + out, best_idx)
                    out += 1
                    best = tl.full((), float("-inf"), tl.float32)
                    best_idx = start + BLOCK
        tl.store(smax_ptr + out, best)
        tl.store(sarg_ptr + out, best_idx)
    else:
        if bounded:
            m, s, rb, x2, hn, hf = span_bounds(row_base, lo, hi, d, xd, t, cv, ci, BOUND_BLOCK)
            tl.store(sbound_ptr + PLANE_RB * bstride + out, rb)
            tl.store(sbound_ptr + PLANE_X2 * bstride + out, x2)
            tl.store(sbound_ptr + PLANE_NEAR * bstride + out, hn)
            tl.store(sbound_ptr + PLANE_FAR * bstride + out, hf)
        else:
            m = tl.full((), float("-inf"), tl.float32)
            s = tl.zeros((), tl.float32)
            qm = tl.full((), float("-inf"), tl.float32)
            qs = tl.zeros((), tl.float32)
            raw_next = first if FIRST else load_tile(row_base, lo, hi, BLOCK)
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
                if SPANS > 1:
                    if span_ends(start, lo, hi, SPAN, BLOCK):
                        if HAS_DRAFT:
                            tl.store(dmax_ptr + out, qm)
                            tl.store(dsum_ptr + out, qs)
                            qm = tl.full((), float("-inf"), tl.float32)
                            qs = tl.zeros((), tl.float32)
                        tl.store(smax_ptr + out, m)
                        tl.store(ssum_ptr + out, s)
                        out += 1
                        m = tl.full((), float("-inf"), tl.float32)
                        s = tl.zeros((), tl.float32)
            if HAS_DRAFT:
                tl.store(dmax_ptr + out, qm)
                tl.store(dsum_ptr + out, qs)
        tl.store(smax_ptr + out, m)
        tl.store(ssum_ptr + out, s)
