"""Per-program partials and their reduction by the last program of a row to arrive.

A split-row kernel has each of a row's ``SPLITS`` programs store its partial (a max, a (score, index) pair,
a sum), then :func:`last_to_arrive` elects the last of them, which reduces the row's partials in span order:
no reduce kernel, no launch-wide barrier. Every (score, index) merge of the draw and the verify (tiles, listed
tokens, programs) takes the order of ``rng.better``: a larger score, or an equal score at a smaller index,
which is the first argmax whatever the order the candidates arrive in. :func:`held_once` (the first draw's last
program) and :func:`held_top` (the checks) write and read whether one lane holds a row's largest value.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..filters.params import process_loaded
from .rng import better


@triton.jit
def block_argmax(max_ptr, arg_ptr, base, NB, CHUNK: tl.constexpr):
    """(max, index) over ``NB`` partial (max, index) pairs at ``base``: the largest max, and of the partials
    that hold it the smallest index (a partial's index may lie outside its span: the listed tokens). NaN-free
    inputs; all -inf gives (-inf, 0)."""
    best = tl.full((), float("-inf"), tl.float32)
    best_idx = tl.zeros((), tl.int32)
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        m = tl.load(max_ptr + base + offs, mask=offs < NB, other=float("-inf"), cache_modifier=".cg")
        a = tl.load(arg_ptr + base + offs, mask=offs < NB, other=0, cache_modifier=".cg")
        best, best_idx = _merge_chunk(m, a, offs < NB, best, best_idx)
    return best, best_idx


@triton.jit
def _merge_chunk(m, a, ok, best, best_idx):
    """(best, best_idx) merged with one chunk of (max ``m``, index ``a``) partials, lanes ``ok`` in range: the
    chunk's largest max at the smallest index holding it, taken in the order of ``rng.better``."""
    cm = tl.max(m, axis=0)
    ca = tl.min(tl.where((m == cm) & ok, a, 2147483647), axis=0)
    take = better(cm, ca, best, best_idx)
    best_idx = tl.where(take, ca, best_idx)
    return tl.where(take, cm, best), best_idx


@triton.jit
def block_argmax_top(max_ptr, arg_ptr, top_ptr, base, NB, CHUNK: tl.constexpr):
    """:func:`block_argmax` of the (max, index) partials, and over the ``NB`` per-span maxima at ``top_ptr``: the
    largest, how many spans hold it and the first that does (NaN-free; the counts of an all -inf row are never
    used). One pass, a chunk's three loads in flight together: the draw's tail was a chain of round trips to L2."""
    best = tl.full((), float("-inf"), tl.float32)
    best_idx = tl.zeros((), tl.int32)
    top = tl.full((), float("-inf"), tl.float32)
    n_spans = tl.zeros((), tl.int32)
    first = tl.zeros((), tl.int32) + NB
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        ok = offs < NB
        m = tl.load(max_ptr + base + offs, mask=ok, other=float("-inf"), cache_modifier=".cg")
        a = tl.load(arg_ptr + base + offs, mask=ok, other=0, cache_modifier=".cg")
        u = tl.load(top_ptr + base + offs, mask=ok, other=float("-inf"), cache_modifier=".cg")
        best, best_idx = _merge_chunk(m, a, ok, best, best_idx)
        cu = tl.max(u, axis=0)
        at_top = (u == cu) & ok
        count = tl.sum(at_top.to(tl.int32), axis=0)
        n_spans = tl.where(cu > top, count, tl.where(cu == top, n_spans + count, n_spans))
        first = tl.where(cu > top, tl.min(tl.where(at_top, offs, NB), axis=0), first)
        top = tl.maximum(top, cu)
    return best_idx, top, n_spans, first


@triton.jit
def block_max(max_ptr, base, NB, CHUNK: tl.constexpr):
    """The largest of ``NB`` partial maxima at ``base``."""
    best = tl.full((), float("-inf"), tl.float32)
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        best = tl.maximum(best, tl.max(tl.load(max_ptr + base + offs, mask=offs < NB, other=float("-inf"),
                                                cache_modifier=".cg"), axis=0))
    return best


@triton.jit
def last_to_arrive(arrivals_ptr, r, SPLITS):
    """Call after this program stored its partials for row ``r``: True in the last of the row's ``SPLITS``
    programs to arrive (an ``acq_rel`` counter per row), which may then read every partial. It resets the
    counter for the next launch."""
    tl.debug_barrier()
    last = tl.atomic_add(arrivals_ptr + r, 1, sem="acq_rel", scope="gpu") == SPLITS - 1
    if last:
        tl.store(arrivals_ptr + r, 0)
        tl.debug_barrier()
    return last


@triton.jit
def held_once(top, n_spans, first, target, row_base, t, cv, ci, span, V, BLOCK: tl.constexpr, TILES: tl.constexpr):
    """1.0 when exactly one lane of a ``target`` row (TARGET or RESIDUAL) holds its largest processed value ``top``
    (> -inf), else 0.0. ``n_spans`` / ``first``: how many of the row's spans (of ``span`` lanes) have ``top`` as
    their maximum and the first that does (:func:`block_argmax_top`); a span's maximum is at least its largest
    processed value and at most ``top`` (a chunk whose largest value the filter drops reports its bound: such a span
    counts like one holding ``top``, so a flag can be missed, never set wrongly). With exactly one such span, its
    lanes are read again, ``TILES`` tiles of ``BLOCK`` at a time (processed with ``t``, ``cv``, ``ci``), and counted
    (a one-hot residual's rejected draft, left out of ``top``, counts if it equals it). A drawn token whose value is
    ``top`` is then that lane, the top of the (value, index) order, which every top-p and top-k > 0 keeps:
    sample-and-check's first check (``sample_check._check_span``) and the open-row launch's redraws
    (``one_launch.settle_row``) keep it without reading the row."""
    lanes_at_top = tl.zeros((), tl.int32)
    if (n_spans == 1) & (top > float("-inf")) & target:
        hi = tl.minimum(first * span + span, V)
        for start in range(first * span, hi, TILES * BLOCK):
            lanes = start + tl.arange(0, TILES)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
            x = process_loaded(tl.load(row_base + lanes, mask=lanes < hi, other=float("-inf")), lanes, t, cv, ci)
            lanes_at_top += tl.sum(tl.sum((x == top).to(tl.int32), axis=1), axis=0)
    return (lanes_at_top == 1).to(tl.float32)


@triton.jit
def held_top(top_ptr, top_rows, r, draft, base, t, M):
    """Whether a draw at row ``r``'s largest value ``M`` is the one lane there (``top[1, r]`` of ``top`` [2,
    top_rows], from :func:`held_once`): the check would count no larger value and its two sums would add the same
    terms (every lane at or below the token), so ``low == S``, kept whatever top-p. A RESIDUAL row's M leaves its
    rejected ``draft`` (-1: none, any other row) out while the sums keep it in: the draft's processed value (min-p
    not applied: a bound) must be below M too. Sample-and-check's first check and the open-row launch read it."""
    held = tl.load(top_ptr + top_rows + r) != 0.0
    if draft >= 0:
        held = held & (token_value(base, draft, t) < M)
    return held


@triton.jit
def token_value(base, c, t):
    """The processed value of token ``c`` of the row at ``base`` (temperature ``t`` applied; NaN read as -inf; no
    filter bound)."""
    xc = tl.load(base + c).to(tl.float32)
    if t != 1.0:
        xc = tl.math.div_rn(xc, t)
    return tl.where(xc != xc, float("-inf"), xc)
