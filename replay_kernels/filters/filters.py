"""The filter bound ``(cut_val, cut_idx)`` of min-p / top-k / top-p rows, split across many programs per row.

Same bound, same search as the oracle's rule (see :mod:`replay_kernels.filters.params` for what the bound means): row
max ``M``; min-p bound ``L = M + log(min_p)``; top-k: the k-th largest value by a 16-way search over the monotone int32
key of the fp32 bits (ties at the k-th value kept); top-p: the sum-exp ``S`` of the kept values, a 16-way search for the
smallest kept value ``v*`` whose ascending cumulative mass exceeds ``1 - p``, the size and lower mass of the tie group
at ``v*``, and, when the oracle's stable sort cuts that group, a 16-way search over token ids for the cut index.

Each pass over a row is one launch over grid ``(F, SPLITS)``: program (f, s) reads the span ``[s * FILTER_SPAN,
(s + 1) * FILTER_SPAN)`` of filtered row f (V x 4 B per row per pass for fp32 logits) and writes its partial counts or
masses for the round's 16 candidates (``SPLITS x 16 x 4 B`` per row). The next launch's programs each add the
partials of their row in split order (so the sums are deterministic and do not depend on the batch: ``SPLITS``
depends on V only), narrow the interval, and evaluate the next candidates. Tiny ``(F,)`` launches settle one search
and set up the next. Launches per step: 1 stats pass, 8 rounds + 1 for top-k (only when some row has top-k), 1 sum
pass (only with min-p or top-k), 8 rounds + 1 tie pass + 5 index rounds for top-p (only when some row has top-p),
and 4 small settle / setup launches. A row that has converged, or does not use a stage, exits its programs after one
load. The rows are ``rows[:count]`` with ``count`` on the device, and the grid may have fewer programs along rows
(G) than rows: program (g, s) then serves rows g, g + G, ... (the verify fallback lists its few rows on the device
and launches ``FilterScratch.grid_rows`` of them instead of one a row of the step). Inside a round only the lanes
that can separate the candidates do the 16-way compare (keys inside the interval; top-p carries the mass below it
from round to round, so the other lanes skip their exp); a span without such a lane stops after one load of the
whole span (after the first rounds, most spans), the others accumulate per lane and reduce once.

Each pass's work on one span of one row is a function (:func:`stats_span`, :func:`mass_span`, :func:`round_span`;
:func:`step_row` for a settle / setup step), which the kernels here loop over their rows and which
:mod:`replay_kernels.filters.filter_loop` runs between barriers in one cooperative launch (the verify fallback's cuts).

Near-ties: the cumulative mass is a sum of per-span fp32 sums (the oracle sums a sorted fp32 cumsum), so a top-p
decision within rounding of ``1 - p`` may differ; documented in docs/KERNELS.md and classified by the near-tie
check.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from .bound_rules import KEY_ROUNDS, WAYS, candidates, clean, float_key, key_to_float, min_p_bound, narrow, tie_drops
from ..shared.launches import launch

FILTER_SPAN = 8192   # elements of one row per program (fixed: the sums do not depend on the batch)
ROUND_BLOCK, ROUND_WARPS = 512, 8  # a search round's tile (per-lane [ROUND_BLOCK, 16] accumulators) and warps

SEARCH_TOPK = tl.constexpr(0)  # Q(c) = #{x : key(x) >= c} >= kk
SEARCH_TOPP = tl.constexpr(1)  # Q(c) = sum_{x >= L, key(x) < c} exp(x - M) / S <= 1 - p
SEARCH_IDX = tl.constexpr(2)   # Q(c) = #{v < c : x[v] == v*} <= ndrop

# settle/setup steps (what ``_step_kernel`` does between passes)
STEP_AFTER_STATS = tl.constexpr(0)  # M, min-p bound L; top-k interval
STEP_AFTER_TOPK = tl.constexpr(1)   # L = max(L, k-th value)
STEP_BEFORE_TOPP = tl.constexpr(2)  # S; top-p interval
STEP_AFTER_TOPP = tl.constexpr(3)   # v*
STEP_BEFORE_IDX = tl.constexpr(4)   # tie group size and lower mass -> ndrop; index interval
STEP_FINAL = tl.constexpr(5)        # cut_val, cut_idx


@triton.jit
def _fresh(ptr):
    """A load from L2 (not L1): scratch another program of the cooperative loop
    (:mod:`replay_kernels.filters.filter_loop`) stored before their barrier."""
    return tl.load(ptr, cache_modifier=".cg")


@triton.jit
def stats_span(logits_ptr, stride, rows_ptr, temp_ptr, pmax_ptr, psum_ptr, f, s, V, SPLITS, SPAN: tl.constexpr):
    """Pass 1 on span ``s`` of listed row ``f``: max and sum-exp (relative to that max) of its clean values."""
    row = tl.load(rows_ptr + f)
    x = clean(logits_ptr + row.to(tl.int64) * stride, s * SPAN + tl.arange(0, SPAN), V, tl.load(temp_ptr + row))
    m = tl.max(x, axis=0)
    tl.store(pmax_ptr + f * SPLITS + s, m)
    tl.store(psum_ptr + f * SPLITS + s, tl.sum(tl.where(x > float("-inf"), tl.exp(x - m), 0.0), axis=0))


@triton.jit
def _stats_kernel(logits_ptr, stride, rows_ptr, count_ptr, temp_ptr, pmax_ptr, psum_ptr, V, SPLITS,
                  SPAN: tl.constexpr):
    """Grid (G, SPLITS): :func:`stats_span` (one load a span)."""
    for f in range(tl.program_id(0), tl.load(count_ptr), tl.num_programs(0)):
        stats_span(logits_ptr, stride, rows_ptr, temp_ptr, pmax_ptr, psum_ptr, f, tl.program_id(1), V, SPLITS, SPAN)


@triton.jit
def mass_span(logits_ptr, stride, rows_ptr, temp_ptr, lo_ptr, m_ptr, psum_ptr, pcnt_ptr, vstar_ptr, f, s, V, SPLITS,
              TIES: tl.constexpr, SPAN: tl.constexpr):
    """Span ``s`` of listed row ``f``: its sum of exp(x - M) over x >= L (``TIES``: over L <= x < v*, and the
    count of x == v*), from one load of the span. A row whose stage is off (``lo_ptr`` holds +inf) is skipped."""
    L = _fresh(lo_ptr + f)
    row = tl.load(rows_ptr + f)
    if L < float("inf"):
        offs = s * SPAN + tl.arange(0, SPAN)
        x = clean(logits_ptr + row.to(tl.int64) * stride, offs, V, tl.load(temp_ptr + row))
        keep = (x >= L) & (x > float("-inf"))
        if TIES:
            vstar = _fresh(vstar_ptr + f)
            tl.store(pcnt_ptr + f * SPLITS + s, tl.sum(((offs < V) & (x == vstar)).to(tl.int32), axis=0))
            keep = keep & (x < vstar)
        tl.store(psum_ptr + f * SPLITS + s, tl.sum(tl.where(keep, tl.exp(x - _fresh(m_ptr + f)), 0.0), axis=0))


@triton.jit
def _mass_kernel(logits_ptr, stride, rows_ptr, count_ptr, temp_ptr, lo_ptr, m_ptr, psum_ptr, pcnt_ptr, vstar_ptr, V,
                 SPLITS, TIES: tl.constexpr, SPAN: tl.constexpr):
    """Grid (G, SPLITS): :func:`mass_span`."""
    for f in range(tl.program_id(0), tl.load(count_ptr), tl.num_programs(0)):
        mass_span(logits_ptr, stride, rows_ptr, temp_ptr, lo_ptr, m_ptr, psum_ptr, pcnt_ptr, vstar_ptr, f,
                  tl.program_id(1), V, SPLITS, TIES, SPAN)


@triton.jit
def _settle(lo, hi, below, pcnt_ptr, pmass_ptr, f, SPLITS: tl.constexpr, kk, S, omp, ndrop, MODE: tl.constexpr,
            NC: tl.constexpr):
    """The interval after the round that evaluated the candidates of [lo, hi]: the partials of row f
    added in split order, the predicate, the largest candidate where it holds. Top-p partials hold the
    mass of keys in [lo, c) only; ``below`` is the mass below lo, and the mass below the new lo is
    returned too: (lo, hi, below)."""
    cands = candidates(lo, hi, NC)
    j = tl.arange(0, NC)
    cnt = tl.zeros([NC], dtype=tl.int32)
    mass = tl.zeros([NC], dtype=tl.float32)
    for s in tl.static_range(SPLITS):  # unrolled: the loads issue together, the adds stay in split order
        base = (f * SPLITS + s) * NC
        if MODE == SEARCH_TOPP:
            mass += tl.load(pmass_ptr + base + j, cache_modifier=".cg")
        else:
            cnt += tl.load(pcnt_ptr + base + j, cache_modifier=".cg")
    if MODE == SEARCH_TOPK:
        q = cnt >= kk
    elif MODE == SEARCH_TOPP:
        q = ((below + mass) / S) <= omp
        below = below + tl.max(tl.where(q, mass, 0.0), axis=0)  # the partials grow with the candidate
    else:
        q = cnt <= ndrop
    lo, hi = narrow(lo, hi, cands, q)
    return lo, hi, below


@triton.jit
def _separating(x, offs, V, lo, hi, L, vstar, MODE: tl.constexpr):
    """The lanes (clean values ``x`` at ``offs``) that can tell the candidates of a round apart."""
    key = float_key(x)  # (the index search does not use it)
    if MODE == SEARCH_TOPK:
        inside = (offs < V) & (key > lo) & (key < hi)
    elif MODE == SEARCH_TOPP:
        inside = (offs < V) & (key >= lo) & (key < hi) & (x >= L) & (x > float("-inf"))
    else:
        inside = (offs < V) & (x == vstar)
    return inside


@triton.jit
def round_span(logits_ptr, stride, rows_ptr, temp_ptr, topk_ptr, bound_ptr, m_ptr, s_ptr, omp_ptr, vstar_ptr,
               ndrop_ptr, lo_in, hi_in, base_in, lo_out, hi_out, base_out, cnt_in, mass_in, cnt_out, mass_out, f, s,
               first, V, SPLITS: tl.constexpr, MODE: tl.constexpr, SPAN: tl.constexpr, BLOCK: tl.constexpr,
               NC: tl.constexpr):
    """One search round on span ``s`` of listed row ``f``. The interval and the partials are double-buffered by
    round parity (``*_in`` from the previous round, ``*_out`` for the next), so no program of a round overwrites
    what another still reads. Unless ``first``, settle the previous round's candidates (every program of the row
    gets the same interval; the span-0 program stores it), then evaluate the new candidates on the span: keys
    inside (lo, hi) for top-k (keys >= hi add to every count), keys in [lo, hi) for top-p (lower keys are the
    carried base mass, so their exp is skipped too), ties of v* for the index search (``_separating``). The span
    is loaded whole first and stops there without such a lane (one load, not a loop of dependent ones);
    otherwise each tile adds its compare to per-lane [BLOCK, NC] accumulators, reduced once."""
    row = tl.load(rows_ptr + f)
    lo = _fresh(lo_in + f)
    hi = _fresh(hi_in + f)
    below = _fresh(base_in + f)
    if first == 0:
        if lo < hi:
            kk = tl.load(topk_ptr + row)
            lo, hi, below = _settle(lo, hi, below, cnt_in, mass_in, f, SPLITS, kk, _fresh(s_ptr + f),
                                    _fresh(omp_ptr + f), _fresh(ndrop_ptr + f), MODE, NC)
    if s == 0:
        tl.store(lo_out + f, lo)
        tl.store(hi_out + f, hi)
        tl.store(base_out + f, below)
    if lo < hi:
        t = tl.load(temp_ptr + row)
        row_ptr = logits_ptr + row.to(tl.int64) * stride
        L = _fresh(bound_ptr + f)
        M = _fresh(m_ptr + f)
        vstar = _fresh(vstar_ptr + f)
        cands = candidates(lo, hi, NC).to(tl.int32)  # inside [lo, hi], so int32 keys or token ids
        offs = s * SPAN + tl.arange(0, SPAN)
        x = clean(row_ptr, offs, V, t)
        cnt = tl.zeros([NC], dtype=tl.int32)
        if MODE == SEARCH_TOPK:  # keys >= hi count for every candidate
            cnt += tl.sum(((offs < V) & (float_key(x) >= hi)).to(tl.int32), axis=0)
        acc_cnt = tl.zeros([BLOCK, NC], dtype=tl.int32)
        acc_mass = tl.zeros([BLOCK, NC], dtype=tl.float32)
        if tl.max(_separating(x, offs, V, lo, hi, L, vstar, MODE).to(tl.int32), axis=0) > 0:
            for start in range(s * SPAN, tl.minimum(s * SPAN + SPAN, V), BLOCK):  # tiles past V add nothing
                offs_t = start + tl.arange(0, BLOCK)
                xt = clean(row_ptr, offs_t, V, t)
                inside = _separating(xt, offs_t, V, lo, hi, L, vstar, MODE)
                if MODE == SEARCH_TOPK:
                    acc_cnt += (inside[:, None] & (float_key(xt)[:, None] >= cands[None, :])).to(tl.int32)
                elif MODE == SEARCH_TOPP:
                    e = tl.where(inside, tl.exp(xt - M), 0.0)
                    acc_mass += tl.where(float_key(xt)[:, None] < cands[None, :], e[:, None], 0.0)
                else:
                    acc_cnt += (inside[:, None] & (offs_t[:, None] < cands[None, :])).to(tl.int32)
        base = (f * SPLITS + s) * NC + tl.arange(0, NC)
        if MODE == SEARCH_TOPP:
            tl.store(mass_out + base, tl.sum(acc_mass, axis=0))
        else:
            tl.store(cnt_out + base, cnt + tl.sum(acc_cnt, axis=0))


@triton.jit
def _round_kernel(logits_ptr, stride, rows_ptr, count_ptr, temp_ptr, topk_ptr, bound_ptr, m_ptr, s_ptr, omp_ptr,
                  vstar_ptr, ndrop_ptr, lo_in, hi_in, base_in, lo_out, hi_out, base_out, cnt_in, mass_in, cnt_out,
                  mass_out, V, SPLITS: tl.constexpr, MODE: tl.constexpr, FIRST: tl.constexpr, SPAN: tl.constexpr,
                  BLOCK: tl.constexpr, NC: tl.constexpr):
    """One search round, grid (G, SPLITS): :func:`round_span`."""
    for f in range(tl.program_id(0), tl.load(count_ptr), tl.num_programs(0)):
        round_span(logits_ptr, stride, rows_ptr, temp_ptr, topk_ptr, bound_ptr, m_ptr, s_ptr, omp_ptr, vstar_ptr,
                   ndrop_ptr, lo_in, hi_in, base_in, lo_out, hi_out, base_out, cnt_in, mass_in, cnt_out, mass_out, f,
                   tl.program_id(1), FIRST, V, SPLITS, MODE, SPAN, BLOCK, NC)


@triton.jit
def step_row(rows_ptr, logminp_ptr, topk_ptr, topp_ptr, pmax_ptr, psum_ptr, pcnt_ptr, bound_ptr, sum_bound_ptr, m_ptr,
             s0_ptr, s_ptr, omp_ptr, vstar_ptr, ndrop_ptr, lo_in, hi_in, base_in, cnt_in, mass_in, lo_out, hi_out,
             base_out, cut_val_ptr, cut_idx_ptr, f, V, SPLITS: tl.constexpr, STEP: tl.constexpr,
             HAS_BOUND_PASS: tl.constexpr, HAS_TOPP: tl.constexpr, NC: tl.constexpr):
    """Settle the search that just ran on listed row ``f`` and set up its next stage (see STEP_*)."""
    row = tl.load(rows_ptr + f)
    kk = tl.load(topk_ptr + row)
    p = tl.load(topp_ptr + row)
    zero64 = tl.zeros((), tl.int64)
    if STEP == STEP_AFTER_STATS:
        M = tl.full((), float("-inf"), tl.float32)
        for s in tl.static_range(SPLITS):
            M = tl.maximum(M, _fresh(pmax_ptr + f * SPLITS + s))
        S0 = tl.zeros((), tl.float32)
        for s in tl.static_range(SPLITS):
            ms = _fresh(pmax_ptr + f * SPLITS + s)
            S0 += tl.where(ms > float("-inf"), _fresh(psum_ptr + f * SPLITS + s) * tl.exp(ms - M), 0.0)
        L = min_p_bound(M, tl.load(logminp_ptr + row))
        tl.store(m_ptr + f, M)
        tl.store(s0_ptr + f, S0)
        tl.store(bound_ptr + f, L)
        use_sum = (p < 1.0) & (M > float("-inf")) & (L > float("-inf"))
        tl.store(sum_bound_ptr + f, tl.where(use_sum, L, float("inf")))
        active = kk < V
        lowest = float_key(tl.full((), float("-inf"), tl.float32)).to(tl.int64)
        tl.store(lo_out + f, tl.where(active, lowest, zero64))
        tl.store(hi_out + f, tl.where(active, float_key(M).to(tl.int64), zero64))
    elif STEP == STEP_AFTER_TOPK:
        L = tl.load(bound_ptr + f)
        if kk < V:
            lo = tl.load(lo_in + f)
            hi = tl.load(hi_in + f)
            if lo < hi:
                lo, hi, _ = _settle(lo, hi, 0.0, cnt_in, mass_in, f, SPLITS, kk, 1.0, 0.0, 0, SEARCH_TOPK, NC)
            L = tl.maximum(L, key_to_float(lo))
            tl.store(bound_ptr + f, L)
            M = tl.load(m_ptr + f)
            tl.store(sum_bound_ptr + f, tl.where((p < 1.0) & (M > float("-inf")) & (L > float("-inf")), L,
                                                 float("inf")))
    elif STEP == STEP_BEFORE_TOPP:
        M = tl.load(m_ptr + f)
        L = tl.load(bound_ptr + f)
        S = tl.load(s0_ptr + f)
        if HAS_BOUND_PASS:
            if L > float("-inf"):
                S = tl.zeros((), tl.float32)
                for s in tl.static_range(SPLITS):
                    S += _fresh(psum_ptr + f * SPLITS + s)
        tl.store(s_ptr + f, S)
        tl.store(omp_ptr + f, 1.0 - p)
        active = (p < 1.0) & (M > float("-inf"))
        tl.store(lo_out + f, tl.where(active, float_key(L).to(tl.int64), zero64))
        tl.store(hi_out + f, tl.where(active, float_key(M).to(tl.int64), zero64))
        tl.store(base_out + f, 0.0)  # no kept mass below key(L)
    elif STEP == STEP_AFTER_TOPP:
        M = tl.load(m_ptr + f)
        L = tl.load(bound_ptr + f)
        active = (p < 1.0) & (M > float("-inf"))
        vstar = tl.full((), float("inf"), tl.float32)
        if active:
            lo = tl.load(lo_in + f)
            hi = tl.load(hi_in + f)
            if lo < hi:
                lo, hi, _ = _settle(lo, hi, tl.load(base_in + f), cnt_in, mass_in, f, SPLITS, kk,
                                    tl.load(s_ptr + f), tl.load(omp_ptr + f), 0, SEARCH_TOPP, NC)
            vstar = key_to_float(lo)
        tl.store(vstar_ptr + f, vstar)
        tl.store(sum_bound_ptr + f, tl.where(active, L, float("inf")))
    elif STEP == STEP_BEFORE_IDX:
        vstar = tl.load(vstar_ptr + f)
        ndrop = tl.zeros((), tl.int32)
        if vstar < float("inf"):
            m = tl.zeros((), tl.int32)
            below = tl.zeros((), tl.float32)
            for s in tl.static_range(SPLITS):
                m += _fresh(pcnt_ptr + f * SPLITS + s)
                below += _fresh(psum_ptr + f * SPLITS + s)
            if m > 1:
                S = tl.load(s_ptr + f)
                ndrop = tie_drops(tl.load(omp_ptr + f), below, S, vstar, tl.load(m_ptr + f), m).to(tl.int32)
        tl.store(ndrop_ptr + f, ndrop)
        tl.store(lo_out + f, zero64)
        tl.store(hi_out + f, tl.where(ndrop > 0, zero64 + (V - 1), zero64))
    else:  # STEP_FINAL
        cut_val = tl.load(bound_ptr + f)
        cut_idx = tl.zeros((), tl.int32)
        if HAS_TOPP:
            vstar = tl.load(vstar_ptr + f)
            if vstar < float("inf"):
                cut_val = vstar
                ndrop = tl.load(ndrop_ptr + f)
                if ndrop > 0:
                    lo = tl.load(lo_in + f)
                    hi = tl.load(hi_in + f)
                    if lo < hi:
                        lo, hi, _ = _settle(lo, hi, 0.0, cnt_in, mass_in, f, SPLITS, kk, 1.0, 0.0, ndrop,
                                            SEARCH_IDX, NC)
                    cut_idx = lo.to(tl.int32)
        tl.store(cut_val_ptr + row, cut_val)
        tl.store(cut_idx_ptr + row, cut_idx)


@triton.jit
def _step_kernel(rows_ptr, count_ptr, logminp_ptr, topk_ptr, topp_ptr, pmax_ptr, psum_ptr, pcnt_ptr, bound_ptr,
                 sum_bound_ptr, m_ptr, s0_ptr, s_ptr, omp_ptr, vstar_ptr, ndrop_ptr, lo_in, hi_in, base_in, cnt_in,
                 mass_in, lo_out, hi_out, base_out, cut_val_ptr, cut_idx_ptr, V, SPLITS: tl.constexpr,
                 STEP: tl.constexpr, HAS_BOUND_PASS: tl.constexpr, HAS_TOPP: tl.constexpr, NC: tl.constexpr):
    """Grid (G,): :func:`step_row` of every listed row."""
    for f in range(tl.program_id(0), tl.load(count_ptr), tl.num_programs(0)):
        step_row(rows_ptr, logminp_ptr, topk_ptr, topp_ptr, pmax_ptr, psum_ptr, pcnt_ptr, bound_ptr, sum_bound_ptr,
                 m_ptr, s0_ptr, s_ptr, omp_ptr, vstar_ptr, ndrop_ptr, lo_in, hi_in, base_in, cnt_in, mass_in, lo_out,
                 hi_out, base_out, cut_val_ptr, cut_idx_ptr, f, V, SPLITS, STEP, HAS_BOUND_PASS, HAS_TOPP, NC)


@dataclass
class FilterScratch:
    """Device scratch of the filter passes for F filtered rows and ``splits`` spans per row.

    Per row: bound/sum_bound/m/s0/s/omp/vstar [F] float32, ndrop [F] int32, lo/hi [2, F] int64 (intervals,
    by round parity), base [2, F] float32 (top-p mass below lo, by round parity); per span: pmax/psum
    [F, splits] float32, pcnt [F, splits] int32; per round: cnt [2, F, splits, WAYS] int32 and mass
    [2, F, splits, WAYS] float32 (partials, by round parity).
    Stage flags (host bools fixed at prepare time, so the launch sequence is graph-static):
    any_topk, any_topp, any_bound (some top-p row also has min-p or top-k). count [1] int32: the rows
    searched (F unless a list filled on the device says fewer); grid_rows: programs along rows (G <= F).
    """

    splits: int
    span: int
    idx_rounds: int
    any_topk: bool
    any_topp: bool
    any_bound: bool
    grid_rows: int = 1
    count: torch.Tensor | None = None
    f32: dict = field(default_factory=dict)
    i32: dict = field(default_factory=dict)
    lo: torch.Tensor | None = None
    hi: torch.Tensor | None = None
    base: torch.Tensor | None = None
    cnt: torch.Tensor | None = None
    mass: torch.Tensor | None = None

    @classmethod
    def allocate(cls, num_rows: int, vocab: int, device, *, any_topk: bool, any_topp: bool,
                 any_bound: bool, span: int = FILTER_SPAN, grid_rows: int | None = None,
                 listed: int | None = None) -> "FilterScratch":
        """``span``: elements per program (a power of two; tests shrink it to split small rows);
        ``grid_rows``: programs along rows (default one a row); ``listed``: the rows listed at first
        (default ``num_rows``; a list filled on the device starts shorter)."""
        splits = max(1, triton.cdiv(vocab, span))
        fs = cls(splits=splits, span=span, any_topk=any_topk, any_topp=any_topp,
                 any_bound=any_bound, idx_rounds=max(1, triton.cdiv(max(vocab - 1, 1).bit_length(), 4)))
        f = max(num_rows, 1)
        listed = num_rows if listed is None else listed
        fs.grid_rows, fs.count = min(f, grid_rows or f), torch.full((1,), listed, dtype=torch.int32, device=device)
        for name in ("bound", "sum_bound", "m", "s0", "s", "omp", "vstar"):
            fs.f32[name] = torch.empty(f, dtype=torch.float32, device=device)
        fs.f32.update({name: torch.empty((f, splits), dtype=torch.float32, device=device) for name in ("pmax", "psum")})
        fs.i32["ndrop"] = torch.zeros(f, dtype=torch.int32, device=device)
        fs.i32["pcnt"] = torch.empty((f, splits), dtype=torch.int32, device=device)
        fs.lo = torch.zeros((2, f), dtype=torch.int64, device=device)
        fs.hi = torch.zeros((2, f), dtype=torch.int64, device=device)
        fs.base = torch.zeros((2, f), dtype=torch.float32, device=device)
        fs.cnt = torch.empty((2, f, splits, WAYS), dtype=torch.int32, device=device)
        fs.mass = torch.empty((2, f, splits, WAYS), dtype=torch.float32, device=device)
        return fs


def launch_filters(logits: torch.Tensor, rows: torch.Tensor, temp_div: torch.Tensor, log_min_p: torch.Tensor,
                   top_k: torch.Tensor, top_p: torch.Tensor, cut_val: torch.Tensor, cut_idx: torch.Tensor,
                   fs: FilterScratch) -> None:
    """Device work only (graph-capturable): write ``cut_val`` / ``cut_idx`` of the rows ``rows[:fs.count]``."""
    F, S, V = fs.grid_rows, fs.splits, logits.shape[1]
    if rows.numel() == 0:
        return
    a, b = fs.f32, fs.i32
    head = (logits, logits.stride(0), rows, fs.count, temp_div)  # what every pass over the rows reads first

    def step(kind, buf_in: int, part_in: int, buf_out: int):
        launch(_step_kernel, (F,), rows, fs.count, log_min_p, top_k, top_p, a["pmax"], a["psum"], b["pcnt"],
               a["bound"], a["sum_bound"], a["m"], a["s0"], a["s"], a["omp"], a["vstar"], b["ndrop"],
               fs.lo[buf_in], fs.hi[buf_in], fs.base[buf_in], fs.cnt[part_in], fs.mass[part_in],
               fs.lo[buf_out], fs.hi[buf_out], fs.base[buf_out], cut_val, cut_idx, V, S,
               STEP=kind, HAS_BOUND_PASS=fs.any_bound, HAS_TOPP=fs.any_topp, NC=WAYS, num_warps=1)

    def search(mode, rounds: int) -> None:
        for r in range(rounds):
            launch(_round_kernel, (F, S), *head, top_k, a["bound"], a["m"], a["s"],
                   a["omp"], a["vstar"], b["ndrop"], fs.lo[r % 2], fs.hi[r % 2], fs.base[r % 2],
                   fs.lo[(r + 1) % 2], fs.hi[(r + 1) % 2], fs.base[(r + 1) % 2],
                   fs.cnt[(r + 1) % 2], fs.mass[(r + 1) % 2],
                   fs.cnt[r % 2], fs.mass[r % 2], V, S, MODE=mode, FIRST=r == 0, NC=WAYS,
                   SPAN=fs.span, BLOCK=min(fs.span, ROUND_BLOCK), num_warps=ROUND_WARPS)

    def mass(ties: bool) -> None:
        launch(_mass_kernel, (F, S), *head, a["sum_bound"], a["m"], a["psum"], b["pcnt"], a["vstar"], V, S, TIES=ties,
               SPAN=fs.span, num_warps=8)

    launch(_stats_kernel, (F, S), *head, a["pmax"], a["psum"], V, S, SPAN=fs.span, num_warps=8)
    step(STEP_AFTER_STATS, 1, 1, 0)
    if fs.any_topk:
        search(SEARCH_TOPK, KEY_ROUNDS)
        step(STEP_AFTER_TOPK, KEY_ROUNDS % 2, (KEY_ROUNDS - 1) % 2, 1)
    if fs.any_topp:
        if fs.any_bound:
            mass(False)
        step(STEP_BEFORE_TOPP, 1, 1, 0)
        search(SEARCH_TOPP, KEY_ROUNDS)
        step(STEP_AFTER_TOPP, KEY_ROUNDS % 2, (KEY_ROUNDS - 1) % 2, 1)
        mass(True)
        step(STEP_BEFORE_IDX, 1, 1, 0)
        search(SEARCH_IDX, fs.idx_rounds)
        step(STEP_FINAL, fs.idx_rounds % 2, (fs.idx_rounds - 1) % 2, 1)
    else:
        step(STEP_FINAL, 0, 0, 1)
