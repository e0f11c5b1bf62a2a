"""The rules of the filter bound that every kernel computing or applying it shares.

The bound of a row is ``(cut_val, cut_idx)`` (:mod:`replay_kernels.filters.params`): a value is kept if it is above
``cut_val``, or equal to it at a token id ``>= cut_idx`` (:func:`keep_mask`). Searching it
(:mod:`replay_kernels.filters.filters` over the row, :mod:`replay_kernels.filters.topk_gather` over candidates) runs
16-way rounds over the monotone int32 key of the fp32 bits (:func:`float_key`, :func:`key_to_float`): each round
evaluates ``WAYS`` :func:`candidates` of the interval and :func:`narrow` keeps the largest where the monotone predicate
holds; ``KEY_ROUNDS`` rounds pin a 32-bit key. Values are read by :func:`clean` (temperature applied, NaN as -inf);
:func:`min_p_bound` and :func:`tie_drops` are the min-p bound and the top-p cut inside a tie group.
"""
from __future__ import annotations

import triton
import triton.language as tl

WAYS = 16            # candidates per round
KEY_ROUNDS = 8       # 16-way rounds over a 32-bit key: ceil(32 / 4)


@triton.jit
def float_key(x):
    """Monotone int32 key of an fp32 value (-0.0 is read as +0.0; no NaN allowed)."""
    x = tl.where(x == 0.0, 0.0, x)
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def key_to_float(key):
    key = key.to(tl.int32)
    bits = tl.where(key < 0, key ^ 0x7FFFFFFF, key)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def keep_mask(x, offs, cut_val, cut_idx):
    """True where the processed value survives the row's filter bound ``(cut_val, cut_idx)``."""
    return (x > cut_val) | ((x == cut_val) & (offs >= cut_idx))


@triton.jit
def clean(row_ptr, offs, V, t):
    """float32 ``div_rn(logits, t)`` of lanes ``offs``, NaN and lanes >= V read as -inf."""
    x = tl.load(row_ptr + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    if t != 1.0:
        x = tl.math.div_rn(x, t)
    return tl.where(x != x, float("-inf"), x)


@triton.jit
def candidates(lo, hi, NC: tl.constexpr):
    j = tl.arange(0, NC).to(tl.int64)
    return lo + ((hi - lo) * (j + 1) + (NC - 1)) // NC


@triton.jit
def narrow(lo, hi, cands, q):
    """The interval after a round: the largest candidate where the monotone ``q`` holds, to below the first fail."""
    return tl.max(tl.where(q, cands, lo), axis=0), tl.min(tl.where(q, hi, cands - 1), axis=0)


@triton.jit
def min_p_bound(M, log_min_p):
    """The min-p bound ``M + log(min_p)``; -inf where that is NaN (min-p off on an all -inf row)."""
    L = M + log_min_p
    return tl.where(L != L, float("-inf"), L)


@triton.jit
def tie_drops(omp, below, S, v, M, m):
    """The m tied values at v whose mass ``(below + j exp(v - M)) / S <= omp`` (fp32 count, < m): dropped by id."""
    ndrop = tl.floor((omp - below / S) / (tl.exp(v - M) / S))
    return tl.minimum(tl.maximum(ndrop, 0.0), (m - 1).to(tl.float32))
