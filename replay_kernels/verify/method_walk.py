"""The walk of one request under its verification method, from the per-row scalars of
:mod:`replay_kernels.verify.method_rows`: how many drafts are accepted, and the draw plan of the last token (the
oracle: ``replay_harness/oracle/methods.py`` and ``walk.py``; docs/FIXTURES.md "Verification methods").

* standard: token-wise. Greedy: the first row whose argmax is not its draft (or a placeholder) ends the walk and
  emits that argmax. Stochastic: the first rejection resamples from the residual at its row, a placeholder draws
  from the target at its row.
* block (stochastic requests; greedy ones verify token-wise): with ``end`` the first placeholder, draft i < end is
  tested against ``u_i = accept_uniform(seed ^ (i << 32), pos_i)`` and ``h_i = r_{i+1} / (r_{i+1} + 1 - e^{c_i})``
  (1 when that denominator is not positive; ``h_i = e^{c_i}`` for the last draft before ``end``), with ``r_{i+1}``
  the block mass (draft logits) or ``e^{c_i} (1 - p_{i+1}(d_{i+1}))`` (one-hot drafts); the accepted length is the
  largest ``i + 1`` with ``u_i <= h_i``. The residual at a rejection tau is ``max(e^{c_{tau-1}} p - q, 0)``: the
  standard residual's with ``lse_t`` lowered by ``c_{tau-1}`` (so ``log p`` is raised by it; one-hot: p without
  the draft, as the standard one).
* fly: token-wise, but a rejection at i with a finite p and q, ``i + W < k`` and a top-k entropy at least the
  threshold is deferred: accepted with the next W drafts if they are accepted natively, else the walk stops at i.

Kernel: :func:`_walk_kernel` grid (R,), one program a request: reads a few scalars a verify row (and, for block and
FLy, the span partials of the block mass and the entropy), writes the accepted drafts, the count and the plan of
the draw kernel (mode, row, slot, rejected draft, LSEs). No row of logits is read.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..draw.draw import MODE_GREEDY, MODE_NONE, MODE_RESIDUAL, MODE_TARGET
from ..shared.rng import accept_uniform
from .method_rows import METHOD_BLOCK, METHOD_FLY


@triton.jit
def _partial_sum(ptr, base, NB, CHUNK: tl.constexpr):
    """The sum of ``NB`` span partials at ``base``, in span order, CHUNK at a time."""
    tot = tl.zeros((), ptr.dtype.element_ty)
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        tot += tl.sum(tl.load(ptr + base + offs, mask=offs < NB, other=0), axis=0)
    return tot


@triton.jit
def _standard_length(start, k, acc_ptr):
    """Drafts accepted token-wise: the first row whose accept test fails (greedy: argmax != draft) ends it."""
    tau = k
    for i in range(0, k):
        if (tau == k) & (tl.load(acc_ptr + start + i) == 0):
            tau = i
    return tau


@triton.jit
def _block_length(r, start, k, seed, pos_ptr, lp_ptr, c_ptr, end_ptr, mass_ptr, NB, P, HAS_DRAFT: tl.constexpr,
                  CHUNK: tl.constexpr):
    """Block verification's accepted length (module docstring)."""
    end = tl.load(end_ptr + r)
    tau = tl.zeros((), tl.int32)
    for i in range(0, end):
        u = accept_uniform(seed ^ ((tl.zeros((), tl.int64) + i) << 32), tl.load(pos_ptr + start + i))
        prefix = tl.exp(tl.load(c_ptr + start + i))
        h = prefix
        if i + 1 < end:
            if HAS_DRAFT:
                resid = _partial_sum(mass_ptr, (r * P + i) * NB, NB, CHUNK)
            else:
                resid = prefix * (1.0 - tl.exp(tl.load(lp_ptr + start + i + 1)))
            denom = resid + 1.0 - prefix
            h = tl.where(denom > 0, tl.math.div_rn(resid, tl.where(denom > 0, denom, 1.0)), 1.0)
        if u <= h:
            tau = i + 1
    return tau


@triton.jit
def _fly_entropy(row, top_k, lse_t_ptr, ev_ptr, eslot_ptr, epart_ptr, egt_ptr, eeq_ptr, NB, CHUNK: tl.constexpr):
    """FLy's top-k entropy ``-sum p log p`` of a listed row (method_rows: the sum above the top-k value v, plus
    ``min(top_k - n_above, n_at)`` times v's term)."""
    f = tl.load(eslot_ptr + row)
    lse = tl.load(lse_t_ptr + row)
    v = tl.load(ev_ptr + row)
    above = _partial_sum(epart_ptr, f * NB, NB, CHUNK)
    n_gt = _partial_sum(egt_ptr, f * NB, NB, CHUNK)
    n_eq = _partial_sum(eeq_ptr, f * NB, NB, CHUNK)
    pv = tl.exp(v - lse)
    term_v = tl.where(pv > 0, pv * (v - lse), 0.0)
    return -(above + tl.minimum(top_k - n_gt, n_eq).to(tl.float32) * term_v)


@triton.jit
def _fly_length(start, k, window, threshold, top_k, acc_ptr, need_ptr, lse_t_ptr, ev_ptr, eslot_ptr, epart_ptr,
                egt_ptr, eeq_ptr, NB, CHUNK: tl.constexpr):
    """FLy's accepted length (module docstring); ``need`` marks the deferrable rejections (method_rows)."""
    length = tl.zeros((), tl.int32)
    pending = tl.zeros((), tl.int32) - 1
    go = tl.full((), 1, tl.int32)
    for i in range(0, k):
        if go != 0:
            accepted = tl.load(acc_ptr + start + i)
            if pending >= 0:
                if accepted == 0:
                    go = 0
                elif i - pending == window:
                    length = i + 1
                    pending = -1
            elif accepted != 0:
                length = i + 1
            else:
                deferred = tl.zeros((), tl.int32)
                if tl.load(need_ptr + start + i) != 0:
                    entropy = _fly_entropy(start + i, top_k, lse_t_ptr, ev_ptr, eslot_ptr, epart_ptr, egt_ptr,
                                           eeq_ptr, NB, CHUNK)
                    deferred = (entropy >= threshold).to(tl.int32)
                if deferred != 0:
                    pending = i
                else:
                    go = 0
    return length


@triton.jit
def _walk_kernel(cu_ptr, req_temp_ptr, method_ptr, fly_w_ptr, fly_thr_ptr, fly_k_ptr, seed_ptr, dtok_ptr, pos_ptr,
                 vidx_ptr, lp_ptr, lse_t_ptr, lse_q_ptr, c_ptr, arg_ptr, acc_ptr, need_ptr, end_ptr, mass_ptr,
                 eslot_ptr, ev_ptr, epart_ptr, egt_ptr, eeq_ptr, tokens_ptr, tok_stride, counts_ptr, mode_ptr,
                 rrow_ptr, slot_ptr, rdrow_ptr, rdtok_ptr, plse_t_ptr, plse_q_ptr, NB, P, HAS_DRAFT: tl.constexpr,
                 CHUNK: tl.constexpr):
    """Grid (R,): request r's accepted length under its method, its accepted drafts, count and draw plan."""
    r = tl.program_id(0)
    start = tl.load(cu_ptr + r)
    k = tl.load(cu_ptr + r + 1) - start - 1
    greedy = tl.load(req_temp_ptr + r) == 0.0
    method = tl.load(method_ptr + r)
    if (method == METHOD_BLOCK) & (tl.load(req_temp_ptr + r) != 0.0) & (k > 0):
        tau = _block_length(r, start, k, tl.load(seed_ptr + r), pos_ptr, lp_ptr, c_ptr, end_ptr, mass_ptr, NB, P,
                            HAS_DRAFT, CHUNK)
    elif (method == METHOD_FLY) & (k > 0):
        tau = _fly_length(start, k, tl.load(fly_w_ptr + r), tl.load(fly_thr_ptr + r), tl.load(fly_k_ptr + r),
                          acc_ptr, need_ptr, lse_t_ptr, ev_ptr, eslot_ptr, epart_ptr, egt_ptr, eeq_ptr, NB, CHUNK)
    else:
        tau = _standard_length(start, k, acc_ptr)
    for i in range(0, tau):
        tl.store(tokens_ptr + r * tok_stride + i, tl.load(dtok_ptr + start + i).to(tl.int64))
    row = start + tau
    mode = tl.full((), MODE_TARGET, tl.int32)
    shift = tl.zeros((), tl.float32)
    if tau == k:
        mode = tl.where(greedy, MODE_GREEDY, MODE_TARGET)
    elif greedy:  # the argmax of the row where the walk stopped, from its stats: nothing left to draw
        tl.store(tokens_ptr + r * tok_stride + tau, tl.load(arg_ptr + row).to(tl.int64))
        mode = tl.full((), MODE_NONE, tl.int32)
    elif tl.load(dtok_ptr + row) >= 0:
        mode = tl.full((), MODE_RESIDUAL, tl.int32)
        if HAS_DRAFT:
            if (method == METHOD_BLOCK) & (tau > 0):
                shift = tl.load(c_ptr + row - 1)
        tl.store(rdrow_ptr + r, tl.load(vidx_ptr + row))
        tl.store(rdtok_ptr + r, tl.load(dtok_ptr + row))
        tl.store(plse_t_ptr + r, tl.load(lse_t_ptr + row) - shift)
        tl.store(plse_q_ptr + r, tl.load(lse_q_ptr + row))
    tl.store(mode_ptr + r, mode)
    tl.store(rrow_ptr + r, row)
    tl.store(slot_ptr + r, tau)
    tl.store(counts_ptr + r, tau + 1)
