"""Top-p accept tests of a verify decided by bounds on the kept mass, without the cut (``stochastic``).

A stochastic verify accepts draft d at a row iff ``log p(d) > log u + log q(d)``, where ``p`` is the
softmax of the processed row: after top-p, ``p(d) = e_d / S_kept`` if d is kept, else 0
(``e_j = exp(x_j - x_d)``, masses taken against the draft's own value, so ``e_d = 1``; ``S`` the sum of every
``e_j`` left by min-p).
Searching the top-p cut of every verify row costs up to 23 passes over it (:mod:`replay_kernels.filters.filters`).
One pass gives ``S``, ``Rb`` (the mass strictly before d in the ascending ``(value, token id)`` order
the oracle sorts by) and ``X2`` (the largest value strictly before d), and with them:

* d is kept iff ``(Rb + e_d) / S > 1 - p`` (the oracle's sorted ``cumsum > 1 - p`` at d);
* the removed mass ``R*`` is the largest prefix sum of the order that is at most ``(1 - p) S``, and
  ``c*``, the first kept token, is at or before d. If ``Rb <= (1 - p) S``, ``c* = d`` and
  ``S_kept = S - Rb``. Otherwise ``c*`` is strictly before d: ``R* <= (1 - p) S`` and
  ``R* > (1 - p) S - e_c*`` with ``e_c* <= exp(X2 - x_d)``, and ``R* <= Rb``, so
  ``S_kept`` lies in ``[max(p S, S - Rb), min(S, p S + e_c*)]``.

The same pass also sums ``H(t)``, the mass at or above each level ``t = x_d - 4`` and ``x_d - 8``
(``verify_stats.NEAR_GAP`` / ``FAR_GAP``). The kept set holds ``S_kept >= p S``; if ``H(t) < p S`` it
cannot lie within ``{x >= t}``, so ``x_c* < t`` and ``e_c* < exp(t - x_d)`` (:func:`first_kept_bound` takes
the smallest of these bounds and ``exp(X2 - x_d)``). X2 alone is the second largest value when the
draft is the row's top, a bound as wide as that token's mass; the levels put the cut below ``x_d - 8``
on rows whose kept set reaches that deep (the benchmark's rows), where ``e_c*`` is tiny.

So ``log p(d)`` lies in ``[-log(hi), -log(lo)]``; when the threshold ``log u + log q``
is outside that interval (with a margin for fp32 rounding: ``BOUND_TOL`` relative on the sums,
``LOG_MARGIN`` on the logs) the test is decided exactly as with the cut. Otherwise (the threshold
inside, or ``(Rb + e_d) / S`` or ``Rb`` within rounding of ``(1 - p) S``) the request is *pending*:
its walk stops at that position, and :func:`launch_fallback` searches the exact cut of its rows
from there on (the filter passes over a row list filled on the device), after which one position launch
verifies the pending requests again, from their pending positions, with the exact cuts. The draw rows of the
top-p requests (bonus, placeholder or one-hot residual) are then drawn by sample-and-check
(:mod:`replay_kernels.draw.sample_check`):
a drawn token the check finds outside the top-p set is drawn again above it.

Why against ``x_d`` and not the row's max ``M``: a span's pass then needs no max first, so it reads the span once
(``verify_stats.span_bounds``). The terms are then at most ``exp(M - x_d)``; while ``M - x_d <= REF_GAP`` (60)
every sum stays below ``V e^60``, far from the fp32 range, and a term flushed to zero (below 2^-126) is
negligible against ``S >= e_d = 1``. Beyond it (a draft about e^-60 as likely as the top) the sums are not read:
``S_kept >= p`` in units of the top's mass, so ``log p(d) <= x_d - M - log p``, and the test is rejected when that
is below the threshold, else pending. A NaN logit makes ``S`` NaN: pending too (the exact cut reads NaN as -inf).

Measured on the benchmark's SYNTHETIC rows (randn * 3 plus a peak, drafts the argmax 70% of the time,
R = 64, k = 4): with ``X2`` alone 15 of 20 steps had a pending request, with the levels 6 of 20 (4 of them
within the rounding margins, 2 with the cut right at a level; measured 2026-12-03);
on real rows a few %. Used for rows whose request has top-p without top-k and no draft logits
(``RowParams.check``); the others keep the search.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..filters.filter_loop import FilterLoop, launcher
from ..filters.filters import FilterScratch, launch_filters
from ..shared.launches import launch, pdl_wait
from .verify_stats import FAR_GAP, NEAR_GAP

BOUND_TOL = tl.constexpr(1e-4)    # relative: the fp32 sums S and Rb (a bound of ~5e-6 at V = 248,320)
LOG_MARGIN = tl.constexpr(1e-5)   # absolute, on the log-domain comparison
REF_GAP = tl.constexpr(60.0)      # the bounded sums are read while the row's max is at most this above x_d

VERDICT_REJECT = tl.constexpr(0)
VERDICT_ACCEPT = tl.constexpr(1)
VERDICT_PENDING = tl.constexpr(2)

# a request's walk (``walk[r]``)
WALK_DONE = tl.constexpr(0)     # stopped (rejection, greedy mismatch, placeholder) or all accepted
WALK_OPEN = tl.constexpr(1)     # verifying, bounds allowed
WALK_PENDING = tl.constexpr(2)  # stopped at ``pend[r]`` on an undecided test: waits for the exact cut
WALK_EXACT = tl.constexpr(3)    # verifying again after the fallback, with the exact cuts


@triton.jit
def first_kept_bound(S, hn, hf, x2, xd, p):
    """An upper bound of ``e_c*``, the first kept token's mass (against ``x_d``): ``exp(X2 - x_d)``, or
    ``exp(t - x_d)`` for a level ``t = x_d - NEAR_GAP`` or ``x_d - FAR_GAP`` whose mass at or above it (``hn``,
    ``hf``) is below ``p S``: the kept set holds at least ``p S`` (within rounding: BOUND_TOL), so it reaches below
    ``t``, and every value at or above ``t`` is kept. Also returns the lowest such ``t`` (+inf: neither)."""
    ec = tl.exp(x2 - xd)
    level = tl.full((), float("inf"), tl.float32)
    if hn < p * S * (1.0 - BOUND_TOL):
        ec = tl.minimum(ec, tl.exp(-NEAR_GAP))
        level = xd - NEAR_GAP
    if hf < p * S * (1.0 - BOUND_TOL):
        ec = tl.minimum(ec, tl.exp(-FAR_GAP))
        level = xd - FAR_GAP
    return ec, level


@triton.jit
def bounded_verdict(gm, S, rb, x2, hn, hf, xd, thr, p):
    """Accept, reject or pending for a kept-or-not draft of processed value ``xd`` (-inf: removed by
    min-p) against ``thr = log u + log q``, from the row's max ``gm`` and its sums against ``x_d``
    (``verify_stats.bound_sums``: S, Rb, X2 and the level masses ``hn``, ``hf``); and ``kept_above``: every
    processed value above it is in the top-p set (``x_d`` when d is kept, a level when the kept set reaches below
    it; +inf: neither known). A rejection's residual draw is kept unchecked above it (``sample_check._check_span``)."""
    verdict = VERDICT_REJECT + tl.zeros((), tl.int32)
    kept_above = tl.full((), float("inf"), tl.float32)
    if xd > float("-inf"):
        if gm - xd > REF_GAP:  # the sums are not read: p(d) <= exp(x_d - M) / p
            if xd - gm - tl.log(p * (1.0 - BOUND_TOL)) > thr - LOG_MARGIN:
                verdict = VERDICT_PENDING + tl.zeros((), tl.int32)
        elif (S != S) | (gm != gm):  # a NaN logit: the exact cut reads it as -inf
            verdict = VERDICT_PENDING + tl.zeros((), tl.int32)
        else:
            omp = (1.0 - p) * S
            low = rb + 1.0  # e_d = 1
            near = (tl.abs(low - omp) <= BOUND_TOL * S) | (tl.abs(rb - omp) <= BOUND_TOL * S)
            if near:
                verdict = VERDICT_PENDING + tl.zeros((), tl.int32)
            elif low > omp:  # kept
                kept_above = xd
                lo = tl.maximum(p * S, S - rb)
                hi = S - rb
                if rb > omp:
                    ec, level = first_kept_bound(S, hn, hf, x2, xd, p)
                    hi = tl.minimum(S, p * S + ec)
                    kept_above = tl.minimum(kept_above, level)
                lo = lo * (1.0 - BOUND_TOL)
                hi = hi * (1.0 + BOUND_TOL)
                if -tl.log(hi) > thr + LOG_MARGIN:
                    verdict = VERDICT_ACCEPT + tl.zeros((), tl.int32)
                elif -tl.log(lo) > thr - LOG_MARGIN:
                    verdict = VERDICT_PENDING + tl.zeros((), tl.int32)
    return verdict, kept_above


# Slots of the fallback's filter loop (each serves every 8th listed row; also the programs along rows of the launch
# sequence, when the loop is off): a step lists 3-5 rows when one request is pending, none most often. 8 instead of
# 32 made the sequence's 13 idle search rounds 25.5 -> 14.1 µs (R = 64, k = 4; measured
# 2026-12-03); the loop makes them one launch of 1.3 µs (filter_loop.py, 2026-12-03).
FALLBACK_GRID_ROWS = 8
LIST_BLOCK = 1024        # rows a step of the one-program listing reads


@triton.jit
def _fallback_rows_kernel(cu_ptr, row_req_ptr, check_ptr, walk_ptr, pend_ptr, cut_val_ptr, cut_idx_ptr, fb_rows_ptr,
                          fb_count_ptr, fb_cut_val_ptr, fb_cut_idx_ptr, N, BLOCK: tl.constexpr,
                          PDL: tl.constexpr = False):
    """Grid (1,): copy every row's cut into the fallback's cut arrays, and list in row order (then their
    count) the rows that need the exact top-p cut: a row of a pending request at or after its pending
    position."""
    pdl_wait(PDL)
    listed = tl.zeros((), tl.int32)
    for start in range(0, N, BLOCK):
        row = start + tl.arange(0, BLOCK)
        ok = row < N
        tl.store(fb_cut_val_ptr + row, tl.load(cut_val_ptr + row, mask=ok), mask=ok)
        tl.store(fb_cut_idx_ptr + row, tl.load(cut_idx_ptr + row, mask=ok), mask=ok)
        r = tl.load(row_req_ptr + row, mask=ok, other=0)
        pending = (tl.load(walk_ptr + r, mask=ok, other=0) == WALK_PENDING) & (row - tl.load(cu_ptr + r, mask=ok)
                                                                               >= tl.load(pend_ptr + r, mask=ok))
        need = (ok & pending & (tl.load(check_ptr + row, mask=ok, other=0) != 0)).to(tl.int32)
        tl.store(fb_rows_ptr + listed + tl.cumsum(need, axis=0) - 1, row, mask=need > 0)
        listed += tl.sum(need, axis=0)
    tl.store(fb_count_ptr, listed)


@dataclass
class Fallback:
    """Scratch of the fallback for N rows: rows [N] int32 (the listed rows first, their count in
    ``filters.count``), the cut arrays the later launches read, cut_val [N] float32 / cut_idx [N] int32,
    row_req [N] int32 (the request of each row), and the filter passes' scratch over N rows (top-p
    stages; FALLBACK_GRID_ROWS programs along rows)."""

    rows: torch.Tensor
    cut_val: torch.Tensor
    cut_idx: torch.Tensor
    row_req: torch.Tensor
    filters: FilterScratch

    @classmethod
    def allocate(cls, row_req: torch.Tensor, vocab: int, any_min_p: bool, span: int, device) -> "Fallback":
        n = max(row_req.numel(), 1)
        i32 = dict(dtype=torch.int32, device=device)
        return cls(rows=torch.empty(n, **i32), cut_val=torch.empty(n, dtype=torch.float32, device=device),
                   cut_idx=torch.empty(n, **i32), row_req=row_req.to(**i32),
                   filters=FilterScratch.allocate(n, vocab, device, any_topk=False, any_topp=True,
                                                  any_bound=any_min_p, span=span, grid_rows=FALLBACK_GRID_ROWS))


def launch_fallback(fb: Fallback, logits: torch.Tensor, cu: torch.Tensor, params, walk: torch.Tensor,
                    pend: torch.Tensor, loop: FilterLoop | None = None) -> None:
    """Device work: list the rows that need the exact cut and search it into ``fb.cut_val`` /
    ``fb.cut_idx`` (every other row gets a copy of its prepared cut): in one cooperative launch
    (:mod:`replay_kernels.filters.filter_loop`) when ``loop`` is given and a slot of it fits the device, else by the
    launch sequence of ``filters.launch_filters`` (the same cuts)."""
    launch(_fallback_rows_kernel, (1,), cu, fb.row_req, params.check, walk, pend, params.cut_val, params.cut_idx,
           fb.rows, fb.filters.count, fb.cut_val, fb.cut_idx, fb.row_req.numel(), BLOCK=LIST_BLOCK, num_warps=4)
    args = (logits, fb.rows, params.temp_div, params.log_min_p, params.top_k, params.top_p, fb.cut_val, fb.cut_idx,
            fb.filters)
    run = None if loop is None else launcher(loop, *args)
    if run is None:
        launch_filters(*args)
    else:
        run()
