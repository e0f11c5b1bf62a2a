"""The plain draw of a gathered top-k row, from its candidates (:mod:`replay_kernels.filters.topk_gather`).

A top-k row's kept set is among its gathered candidates (every kept value is at least the k-th largest, itself
at least the gather threshold), so ``argmax(processed + gumbel_noise(seed, pos, v))`` over the row is the argmax
over the kept candidates: the same processed values (the candidates are the clean values at the row's
temperature), the same ``mrv2`` noise (``rng.noised_score``), the same order (largest score, then smallest id,
as the draw kernel's: ``rng.better``). ``topk_gather._solve_kernel`` calls :func:`draw_candidates` after the
bound, so a drawn row is read twice (block maxima, gather) instead of three times.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .bound_rules import keep_mask
from ..shared.rng import better, murmur3_finish, noised_score


@dataclass
class CandidateDraw:
    """The draw of a plain sample done by ``topk_gather._solve_kernel`` on the gathered candidates (the draw
    kernel then skips the request: one read of the row fewer). Same token as the draw kernel: same processed values,
    same ``mrv2`` noise, same order (largest score, then smallest id).

    req [F] int32: the request that draws from gathered row f (plan MODE_TARGET), -1 for none; seed [R] int64;
    positions [N] int64; tokens [R, W] int64 (the token goes to column 0); mode [R] int32: the draw plan the draw
    kernel follows, a copy of the requests' plan whose gathered requests get ``done`` (drawn here) or ``open``
    (the row did not fit: once its bound is searched, the draw kernel draws it) at every launch."""

    req: torch.Tensor
    seed: torch.Tensor
    positions: torch.Tensor
    tokens: torch.Tensor
    mode: torch.Tensor
    done: int
    open: int


@triton.jit
def _best_noised(x, idx, live, cv, ci, key):
    """(score, id) of the best kept candidate of a chunk: the largest ``x + noise``, then the smallest id (the
    draw kernel's order) under the bound ``(cv, ci)``."""
    score = noised_score(x, murmur3_finish(key, idx), live & keep_mask(x, idx, cv, ci))
    m = tl.max(score, axis=0)
    return m, tl.min(tl.where(score == m, idx, 2147483647), axis=0)


@triton.jit
def draw_candidates(x0, id0, vals_ptr, ids_ptr, n, cv, ci, key, CHUNK: tl.constexpr):
    """The Gumbel-max token of a gathered row: the kept set is among its n candidates (every kept value is
    at least the k-th largest), so the best score over them is the best over the row."""
    j0 = tl.arange(0, CHUNK)
    best, best_id = _best_noised(x0, id0, j0 < n, cv, ci, key)
    for start in range(CHUNK, n, CHUNK):
        j = start + j0
        m, i = _best_noised(tl.load(vals_ptr + j, mask=j < n, other=float("-inf")),
                            tl.load(ids_ptr + j, mask=j < n, other=0), j < n, cv, ci, key)
        if better(m, i, best, best_id):
            best = m
            best_id = i
    return best_id
