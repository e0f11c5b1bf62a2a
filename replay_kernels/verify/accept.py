"""The accept test of one draft position of a verify, and the end of a request's walk (``stochastic``).

Run by the last program of a request to arrive in a position launch, from the span stats of the position's row: greedy
(the raw argmax against the draft), stochastic (``log p(d) > log u + log q(d)``, with the row's log-sum-exp or, for
top-p rows without draft logits, the bounds of :mod:`replay_kernels.verify.verify_bounds`). A rejection, a greedy
mismatch or a placeholder ends the walk and fixes the draw plan (mode, row, slot; the rejected draft, the LSEs and, for
bounded rows, the value above which every token is known kept); an undecided bounded test makes the request pending (the
exact-cut fallback then verifies it again from that position).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..draw.draw import MODE_NONE, MODE_RESIDUAL, MODE_TARGET
from ..shared.partials import block_argmax
from ..shared.rng import accept_uniform
from .verify_bounds import VERDICT_ACCEPT, VERDICT_REJECT, WALK_DONE, WALK_EXACT, WALK_PENDING, bounded_verdict
from .verify_stats import bound_sums, global_lse, processed_at


@triton.jit
def close_walk(r, mode, rrow, slot, mode_ptr, rrow_ptr, slot_ptr, counts_ptr, walk_ptr):
    """End request r's walk at draft position ``slot``: draw ``mode`` at ``rrow`` into that slot."""
    tl.store(mode_ptr + r, mode)
    tl.store(rrow_ptr + r, rrow)
    tl.store(slot_ptr + r, slot)
    tl.store(counts_ptr + r, slot + 1)
    tl.store(walk_ptr + r, WALK_DONE)


@triton.jit
def accept_test(r, i, start, greedy, temp, base, seed_ptr, dtok_row_ptr, pos_ptr, vidx_ptr, logits_ptr,
                l_stride, draft_ptr, d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr, check_ptr, topp_ptr,
                smax_ptr, ssum_ptr, sarg_ptr, dmax_ptr, dsum_ptr, sbound_ptr, bstride, walk_ptr,
                pend_ptr, tokens_ptr, tok_stride, counts_ptr, mode_ptr, rrow_ptr, slot_ptr, rdrow_ptr, rdtok_ptr,
                lse_t_ptr, lse_q_ptr, kept_ptr, NB, HAS_DRAFT: tl.constexpr, BOUNDED: tl.constexpr,
                EXACT: tl.constexpr, CHUNK: tl.constexpr):
    """The accept test of request r's draft position i from the row's span stats at ``base``: writes the
    accepted token (returns 1), or ends the walk (rejection, greedy mismatch, placeholder: the count and
    the draw plan) or makes the request pending (undecided by the top-p bounds); returns 0 then. A rejection
    stores ``kept[r]``: the value above which the bounds found every token kept (``bounded_verdict``; +inf when
    not bounded), so sample-and-check's first check keeps a residual draw above it unread."""
    row = start + i
    d = tl.load(dtok_row_ptr + row)
    go = tl.zeros((), tl.int32)
    if BOUNDED:  # every plane loaded up front, in flight while the row's other loads are: read only if bounded
        gm, S, rb, x2, hn, hf = bound_sums(smax_ptr, ssum_ptr, sbound_ptr, bstride, base, NB, CHUNK)
    else:  # never read
        zero = tl.zeros((), tl.float32)
        gm, S, rb, x2, hn, hf = zero, zero, zero, zero, zero, zero
    if greedy:
        _, best = block_argmax(smax_ptr, sarg_ptr, base, NB, CHUNK)
        tl.store(tokens_ptr + r * tok_stride + i, best.to(tl.int64))
        if (d < 0) | (best != d):  # the argmax is the last token: nothing to draw
            close_walk(r, MODE_NONE, row, i, mode_ptr, rrow_ptr, slot_ptr, counts_ptr, walk_ptr)
        else:
            go = go + 1
    elif d < 0:  # a placeholder ends verification: draw from the target at its row
        close_walk(r, MODE_TARGET, row, i, mode_ptr, rrow_ptr, slot_ptr, counts_ptr, walk_ptr)
    else:
        vi = tl.load(vidx_ptr + row)
        xd = processed_at(logits_ptr + row.to(tl.int64) * l_stride, d, tl.load(temp_div_ptr + row),
                          tl.load(cut_val_ptr + row), tl.load(cut_idx_ptr + row))
        u = accept_uniform(tl.load(seed_ptr + r), tl.load(pos_ptr + row))
        lt = tl.zeros((), tl.float32)
        lq = tl.zeros((), tl.float32)
        bounded = False
        kept_above = tl.full((), float("inf"), tl.float32)
        if BOUNDED:
            bounded = tl.load(check_ptr + row) != 0
        if bounded:  # one-hot drafts: log q = 0
            verdict, kept_above = bounded_verdict(gm, S, rb, x2, hn, hf, xd, tl.log(u), tl.load(topp_ptr + row))
        else:
            lt = global_lse(smax_ptr, ssum_ptr, base, NB, CHUNK)
            log_q = tl.zeros((), tl.float32)
            if HAS_DRAFT:
                lq = global_lse(dmax_ptr, dsum_ptr, base, NB, CHUNK)
                qd = tl.load(draft_ptr + vi.to(tl.int64) * d_stride + d).to(tl.float32)
                log_q = tl.math.div_rn(qd, temp) - lq
            verdict = tl.where(xd - lt > tl.log(u) + log_q, VERDICT_ACCEPT, VERDICT_REJECT)
        if verdict == VERDICT_ACCEPT:
            tl.store(tokens_ptr + r * tok_stride + i, d.to(tl.int64))
            go = go + 1
            if EXACT:
                tl.store(walk_ptr + r, WALK_EXACT)
        elif verdict == VERDICT_REJECT:  # resample from the residual at this row
            tl.store(rdrow_ptr + r, vi)
            tl.store(rdtok_ptr + r, d)
            tl.store(lse_t_ptr + r, lt)
            tl.store(lse_q_ptr + r, lq)
            tl.store(kept_ptr + r, kept_above)
            close_walk(r, MODE_RESIDUAL, row, i, mode_ptr, rrow_ptr, slot_ptr, counts_ptr, walk_ptr)
        else:  # undecided by the bounds: wait for the exact cut (verify_bounds.launch_fallback)
            tl.store(pend_ptr + r, i)
            tl.store(walk_ptr + r, WALK_PENDING)
    return go
