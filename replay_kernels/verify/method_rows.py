"""Per-row quantities of the verification methods (``stochastic`` on steps with block / FLy requests or under the
``mrv2-fp64`` contract; replay_kernels/verify/methods.py runs them in order).

Every verify row of a request (draft position i < k) is read once by :func:`_row_stats_kernel`: the span stats of
:mod:`replay_kernels.verify.verify_stats` (processed max and sum-exp, the same tiles, spans and sums as the standard
position launches, so the same log-sum-exp bits; the draft-logits row over the temperature likewise) and, for greedy
requests, the raw max and left-most argmax. :func:`_row_scalars_kernel` (one program a request) turns them into one
scalar set a row: ``lse_t``, ``lse_q``, ``log p(d) = x_d - lse_t``, ``log q(d)``, the row's argmax, the token-wise
accept test (``log p(d) > log u + log q(d)``, u = ``accept_uniform(seed, pos)``; greedy: argmax == d), block's prefix
ratio ``c_i = min(c_{i-1} + log p_i(d_i) - log q_i(d_i), 0)`` up to the first placeholder, and whether the row may
need FLy's entropy (a FLy request's valid draft, rejected token-wise, deferrable, ``i + W < k``).

Then, only where a method needs it:

* :func:`_block_mass_kernel` (block requests with draft logits): ``r_{i+1} = sum_x max(e^{c_i} p_{i+1}(x) -
  q_{i+1}(x), 0)``, a dense pass over row i + 1 and its draft row once c_i is known, in span partials.
* FLy: :func:`_entropy_rows_kernel` lists the rows that may need the entropy (row order), the filter passes of
  :mod:`replay_kernels.filters.filters` find each listed row's ``top_k``-th largest value ``v`` (a top-k search), and
  :func:`_entropy_kernel` sums ``p log p`` over the kept values above ``v`` and counts the kept values above and at
  ``v``; the walk adds ``min(top_k - n_above, n_at) p_v log p_v`` (torch.topk's k values: ties at ``v`` have equal
  terms). Kept: the request's own filter bound (a processed row's dropped tokens are -inf, p = 0).

Bytes (N_v verify rows, V vocabulary, 4 or 2 B an element): stats N_v V (+ the draft rows); block N_b V x 2 (the
rows after a block request's first, and their draft rows); FLy: the filter passes over the listed rows (one stats
pass, 8 search rounds) and one entropy pass; scalars and lists a few bytes a row.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..filters.params import process_loaded
from ..shared.partials import block_argmax
from ..shared.rng import accept_uniform
from .verify_stats import global_lse, load_tile, online, processed_at

METHOD_STANDARD = tl.constexpr(0)  # verify_method codes (the recordings' schema.VERIFY_METHODS order)
METHOD_BLOCK = tl.constexpr(1)
METHOD_FLY = tl.constexpr(2)


@triton.jit
def _row_stats_kernel(cu_ptr, req_temp_ptr, vidx_ptr, logits_ptr, l_stride, draft_ptr, d_stride, temp_div_ptr,
                      cut_val_ptr, cut_idx_ptr, smax_ptr, ssum_ptr, gmax_ptr, garg_ptr, dmax_ptr, dsum_ptr, V, NB, P,
                      HAS_DRAFT: tl.constexpr, SPAN: tl.constexpr, BLOCK: tl.constexpr):
    """Grid (R, NB, P): span b of request r's verify row i (i < k_r), stats at ``(r * P + i) * NB + b``:
    processed (max, sum-exp) always; raw (max, left-most argmax) for greedy requests; the draft row over the
    temperature (max, sum-exp) for stochastic requests with draft logits. Bytes: each verify row once (V x 4 or 2
    B), its draft row once for stochastic requests with draft logits; 12-20 B of stats a span written."""
    r = tl.program_id(0)
    b = tl.program_id(1)
    i = tl.program_id(2)
    start = tl.load(cu_ptr + r)
    k = tl.load(cu_ptr + r + 1) - start - 1
    if i < k:
        row = start + i
        temp = tl.load(req_temp_ptr + r)
        greedy = temp == 0.0
        t = tl.load(temp_div_ptr + row)
        cv = tl.load(cut_val_ptr + row)
        ci = tl.load(cut_idx_ptr + row)
        row_base = logits_ptr + row.to(tl.int64) * l_stride
        draft_base = draft_ptr + tl.load(vidx_ptr + row).to(tl.int64) * d_stride
        lo = b * SPAN
        hi = tl.minimum(lo + SPAN, V)
        m = tl.full((), float("-inf"), tl.float32)
        s = tl.zeros((), tl.float32)
        qm = tl.full((), float("-inf"), tl.float32)
        qs = tl.zeros((), tl.float32)
        best = tl.full((), float("-inf"), tl.float32)
        best_idx = lo
        for start_t in range(lo, hi, BLOCK):
            offs = start_t + tl.arange(0, BLOCK)
            raw = load_tile(row_base, start_t, hi, BLOCK)
            m, s = online(m, s, process_loaded(raw, offs, t, cv, ci))
            if greedy:
                x = raw.to(tl.float32)
                bm, ba = tl.max(tl.where(x != x, float("-inf"), x), axis=0, return_indices=True)
                if bm > best:
                    best = bm
                    best_idx = start_t + ba
            elif HAS_DRAFT:
                q = tl.math.div_rn(load_tile(draft_base, start_t, hi, BLOCK).to(tl.float32), temp)
                qm, qs = online(qm, qs, tl.where(q != q, float("-inf"), q))
        out = (r * P + i) * NB + b
        tl.store(smax_ptr + out, m)
        tl.store(ssum_ptr + out, s)
        tl.store(gmax_ptr + out, best)
        tl.store(garg_ptr + out, best_idx)
        if HAS_DRAFT:
            tl.store(dmax_ptr + out, qm)
            tl.store(dsum_ptr + out, qs)


@triton.jit
def _row_scalars_kernel(cu_ptr, req_temp_ptr, method_ptr, fly_w_ptr, seed_ptr, dtok_ptr, pos_ptr, vidx_ptr,
                        logits_ptr, l_stride, draft_ptr, d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr, smax_ptr,
                        ssum_ptr, gmax_ptr, garg_ptr, dmax_ptr, dsum_ptr, lse_t_ptr, lse_q_ptr, lp_ptr, lq_ptr, c_ptr,
                        arg_ptr, acc_ptr, need_ptr, end_ptr, NB, P, HAS_DRAFT: tl.constexpr, CHUNK: tl.constexpr):
    """Grid (R,): request r's verify rows in order, from their span stats: per row ``lse_t``, ``lse_q``, ``lp`` =
    log p(d), ``lq`` = log q(d) (0 for one-hot drafts), ``c`` (block's prefix ratio; 0 past the block's end),
    ``arg`` (greedy: the argmax), ``acc`` (the token-wise accept test), ``need`` (FLy: may need the entropy); per
    request ``end``: the first placeholder (k without one). Bytes: the 5 x NB span stats of each verify row
    (from L2), its logit at the draft (and the draft row's), 36 B a row written; no row of logits read."""
    r = tl.program_id(0)
    start = tl.load(cu_ptr + r)
    k = tl.load(cu_ptr + r + 1) - start - 1
    temp = tl.load(req_temp_ptr + r)
    greedy = temp == 0.0
    method = tl.load(method_ptr + r)
    window = tl.load(fly_w_ptr + r)
    seed = tl.load(seed_ptr + r)
    c = tl.zeros((), tl.float32)
    end = k
    for i in range(0, k):
        row = start + i
        base = (r * P + i) * NB
        d = tl.load(dtok_ptr + row)
        valid = d >= 0
        lse_t = global_lse(smax_ptr, ssum_ptr, base, NB, CHUNK)
        xd = processed_at(logits_ptr + row.to(tl.int64) * l_stride, tl.maximum(d, 0), tl.load(temp_div_ptr + row),
                          tl.load(cut_val_ptr + row), tl.load(cut_idx_ptr + row))
        xd = tl.where(valid, xd, float("-inf"))
        lp = xd - lse_t
        lq = tl.zeros((), tl.float32)
        lse_q = tl.zeros((), tl.float32)
        if HAS_DRAFT:
            if temp != 0.0:
                lse_q = global_lse(dmax_ptr, dsum_ptr, base, NB, CHUNK)
                qd = tl.load(draft_ptr + tl.load(vidx_ptr + row).to(tl.int64) * d_stride + tl.maximum(d, 0))
                lq = tl.math.div_rn(qd.to(tl.float32), temp) - lse_q
        _, arg = block_argmax(gmax_ptr, garg_ptr, base, NB, CHUNK)
        if greedy:
            acc = valid & (arg == d)
            can_defer = valid & (xd > float("-inf"))
        else:
            u = accept_uniform(seed, tl.load(pos_ptr + row))
            acc = valid & (lp > tl.log(u) + lq)
            can_defer = valid & (lp > float("-inf")) & (lq > float("-inf"))
        if (end == k) & (d < 0):
            end = i
        if end == k:  # block's prefix ratio, up to the first placeholder
            c = tl.minimum(c + (lp - lq), 0.0)
        need = (method == METHOD_FLY) & (acc.to(tl.int32) == 0) & can_defer & (i + window < k)
        tl.store(lse_t_ptr + row, lse_t)
        tl.store(lse_q_ptr + row, lse_q)
        tl.store(lp_ptr + row, lp)
        tl.store(lq_ptr + row, lq)
        tl.store(c_ptr + row, tl.where(end == k, c, 0.0))
        tl.store(arg_ptr + row, arg)
        tl.store(acc_ptr + row, acc.to(tl.int32))
        tl.store(need_ptr + row, need.to(tl.int32))
    tl.store(end_ptr + r, end)


@triton.jit
def _block_mass_kernel(cu_ptr, req_temp_ptr, method_ptr, end_ptr, vidx_ptr, logits_ptr, l_stride, draft_ptr, d_stride,
                       temp_div_ptr, cut_val_ptr, cut_idx_ptr, lse_t_ptr, lse_q_ptr, c_ptr, mass_ptr, V, NB, P,
                       SPAN: tl.constexpr, BLOCK: tl.constexpr):
    """Grid (R, NB, P): for a stochastic block request and i + 1 < its end, span b of ``r_{i+1} = sum_x max(e^{c_i}
    p_{i+1}(x) - q_{i+1}(x), 0)`` (p: the processed row i + 1, q: its draft row over the temperature, each
    normalised by its log-sum-exp) at ``(r * P + i) * NB + b``. Bytes: rows 1 .. end - 1 of each stochastic block
    request with their draft rows (2 V x 4 or 2 B a row), 4 B a span written; every other program exits after
    four loads."""
    r = tl.program_id(0)
    b = tl.program_id(1)
    i = tl.program_id(2)
    temp = tl.load(req_temp_ptr + r)
    if (tl.load(method_ptr + r) == METHOD_BLOCK) & (temp != 0.0) & (i + 1 < tl.load(end_ptr + r)):
        start = tl.load(cu_ptr + r)
        row = start + i + 1
        prefix = tl.exp(tl.load(c_ptr + row - 1))
        lse_t = tl.load(lse_t_ptr + row)
        lse_q = tl.load(lse_q_ptr + row)
        t = tl.load(temp_div_ptr + row)
        cv = tl.load(cut_val_ptr + row)
        ci = tl.load(cut_idx_ptr + row)
        row_base = logits_ptr + row.to(tl.int64) * l_stride
        draft_base = draft_ptr + tl.load(vidx_ptr + row).to(tl.int64) * d_stride
        lo = b * SPAN
        hi = tl.minimum(lo + SPAN, V)
        acc = tl.zeros((BLOCK,), tl.float32)
        for start_t in range(lo, hi, BLOCK):
            offs = start_t + tl.arange(0, BLOCK)
            p = tl.exp(process_loaded(load_tile(row_base, start_t, hi, BLOCK), offs, t, cv, ci) - lse_t)
            q = tl.math.div_rn(load_tile(draft_base, start_t, hi, BLOCK).to(tl.float32), temp)
            q = tl.exp(tl.where(q != q, float("-inf"), q) - lse_q)
            acc += tl.maximum(prefix * p - q, 0.0)
        tl.store(mass_ptr + (r * P + i) * NB + b, tl.sum(acc, axis=0))


@triton.jit
def _entropy_rows_kernel(need_ptr, rows_ptr, count_ptr, slot_ptr, N, F, BLOCK: tl.constexpr):
    """Grid (1,): list in row order the rows whose ``need`` is set (their count at ``count``; at most the F slots,
    which the host sized for every row that can set it) and each row's slot in the list (-1: not listed). Bytes:
    4 B a row read, 4-8 B a row written."""
    listed = tl.zeros((), tl.int32)
    for start in range(0, N, BLOCK):
        row = start + tl.arange(0, BLOCK)
        ok = row < N
        need = (tl.load(need_ptr + row, mask=ok, other=0) != 0).to(tl.int32)
        need = tl.where(listed + tl.cumsum(need, axis=0) <= F, need, 0)
        at = listed + tl.cumsum(need, axis=0) - 1
        tl.store(rows_ptr + at, row, mask=need > 0)
        tl.store(slot_ptr + row, tl.where(need > 0, at, -1), mask=ok)
        listed += tl.sum(need, axis=0)
    tl.store(count_ptr, listed)


@triton.jit
def _entropy_kernel(rows_ptr, count_ptr, logits_ptr, l_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr, lse_t_ptr,
                    ev_ptr, epart_ptr, egt_ptr, eeq_ptr, V, NB, SPAN: tl.constexpr, BLOCK: tl.constexpr):
    """Grid (G, NB): span b of the listed rows g, g + G, ...: the sum of ``p log p`` over the kept values above
    the row's top-k value ``v`` (``ev``), and the counts of kept values above and at ``v``, at ``f * NB + b``.
    Bytes: each listed row once (V x 4 or 2 B), 12 B a span written."""
    b = tl.program_id(1)
    for f in range(tl.program_id(0), tl.load(count_ptr), tl.num_programs(0)):
        row = tl.load(rows_ptr + f)
        row_base = logits_ptr + row.to(tl.int64) * l_stride
        t = tl.load(temp_div_ptr + row)
        cv = tl.load(cut_val_ptr + row)
        ci = tl.load(cut_idx_ptr + row)
        lse = tl.load(lse_t_ptr + row)
        v = tl.load(ev_ptr + row)
        lo = b * SPAN
        hi = tl.minimum(lo + SPAN, V)
        acc = tl.zeros((BLOCK,), tl.float32)
        n_gt = tl.zeros((BLOCK,), tl.int32)
        n_eq = tl.zeros((BLOCK,), tl.int32)
        for start_t in range(lo, hi, BLOCK):
            offs = start_t + tl.arange(0, BLOCK)
            x = process_loaded(load_tile(row_base, start_t, hi, BLOCK), offs, t, cv, ci)
            kept = x > float("-inf")  # the request's filter bound applied: a dropped token reads -inf (p = 0)
            log_p = x - lse
            p = tl.exp(log_p)
            above = kept & (x > v)
            acc += tl.where(above & (p > 0), p * log_p, 0.0)
            n_gt += above.to(tl.int32)
            n_eq += (kept & (x == v)).to(tl.int32)
        tl.store(epart_ptr + f * NB + b, tl.sum(acc, axis=0))
        tl.store(egt_ptr + f * NB + b, tl.sum(n_gt, axis=0))
        tl.store(eeq_ptr + f * NB + b, tl.sum(n_eq, axis=0))
