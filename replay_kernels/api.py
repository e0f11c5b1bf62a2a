"""Public entry points: the samplers on plain tensors, in the argument layout of vLLM Model Runner V2's own sampler
functions, returning what those return.

* :func:`gumbel_sample` — a plain sample (no drafts), one logits row a request: MRV2's ``gumbel_sample`` with its
  ``apply_sampling_params`` folded in. Returns ``sampled [R] int64``.
* :func:`rejection_sample` — a speculative step over the expanded batch (``1 + k_r`` rows a request): MRV2's
  ``rejection_sample`` with the sampling parameters folded in. Returns ``(sampled [R, K+1] int64, num_sampled [R]
  int32)``; slots past ``num_sampled`` hold -1 (MRV2 leaves them unwritten).
* :func:`prepare_gumbel_sample` / :func:`prepare_rejection_sample` — the same split into host work (once) and a
  :class:`Prepared` whose ``launch()`` is device work only: no host sync, graph-capturable.

Differences of layout from MRV2, all on the caller's side of the call:

* logits are the model's, before temperature and filters (the kernels apply temperature, min-p, top-k and top-p
  on the fly, exactly as MRV2's ``apply_sampling_params`` would, without writing a processed copy);
* per-request tensors (``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed``) are ``[R]``, already gathered
  through ``idx_mapping`` (MRV2 indexes ``[max_num_reqs]`` tensors by it);
* ``draft_token_ids[j]`` is the draft verified at row ``j`` (-1 on each request's bonus row and for placeholders):
  MRV2's ``draft_sampled[j + 1]`` (:func:`draft_tokens_from_sampled` converts).

The tokens are those of the ``mrv2`` RNG contract: Philox ``accept_uniform(seed, pos)`` for the accept test and
murmur3 Gumbel noise ``(seed, pos, token)`` for every draw (docs/KERNELS.md); token-identical to MRV2 on the same
inputs, up to the documented near-tie class of fp32 sums.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .batch import SamplingBatch

_SAMPLERS: dict[str, Any] = {}


def _sampler(kind: str):
    """One sampler of each kind with its default configuration (a sampler holds no per-call state)."""
    if kind not in _SAMPLERS:
        if kind == "plain":
            from .draw.gumbel_max import GumbelMaxSampler
            _SAMPLERS[kind] = GumbelMaxSampler()
        else:
            from .verify.stochastic import StochasticSampler
            _SAMPLERS[kind] = StochasticSampler()
    return _SAMPLERS[kind]


def _params(r: int, device, top_k, top_p, min_p) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    off = dict(device=device)
    return (torch.zeros(r, dtype=torch.int32, **off) if top_k is None else top_k,
            torch.ones(r, dtype=torch.float32, **off) if top_p is None else top_p,
            torch.zeros(r, dtype=torch.float32, **off) if min_p is None else min_p)


@dataclass
class Prepared:
    """A prepared call: ``launch()`` runs the kernels (device work only, graph-capturable) and returns the
    outputs, the same buffers every launch, overwritten.

    The launch reads the input tensors it was prepared with: what is written in place between launches into the
    logits (and draft logits), and into ``draft_token_ids`` (int32), ``pos`` and ``seed`` (int64) passed in those
    dtypes on the logits' device, is what the next launch reads; the sampling parameters, ``cu_num_logits`` and
    the shapes are read at prepare time (the launch sequence depends on them): prepare again when they change.
    """

    sampler: Any
    state: Any
    plain: bool

    def launch(self):
        tokens, counts = self.sampler.launch(self.state)
        return tokens[:, 0] if self.plain else (tokens, counts)


def prepare_gumbel_sample(logits: torch.Tensor, temperature: torch.Tensor, seed: torch.Tensor, pos: torch.Tensor, *,
                          top_k: torch.Tensor | None = None, top_p: torch.Tensor | None = None,
                          min_p: torch.Tensor | None = None) -> Prepared:
    """Host work of :func:`gumbel_sample` (same arguments); ``Prepared.launch()`` returns ``sampled [R] int64``."""
    r, device = logits.shape[0], logits.device
    k, p, m = _params(r, device, top_k, top_p, min_p)
    batch = SamplingBatch(logits=logits, cu_num_logits=torch.arange(r + 1, dtype=torch.int32, device=device),
                          draft_token_ids=torch.full((r,), -1, dtype=torch.int32, device=device), positions=pos,
                          temperature=temperature, top_k=k, top_p=p, min_p=m, seed=seed)
    sampler = _sampler("plain")
    return Prepared(sampler, sampler.prepare(batch), plain=True)


def gumbel_sample(logits: torch.Tensor, temperature: torch.Tensor, seed: torch.Tensor, pos: torch.Tensor, *,
                  top_k: torch.Tensor | None = None, top_p: torch.Tensor | None = None,
                  min_p: torch.Tensor | None = None) -> torch.Tensor:
    """One token a request: greedy rows (temperature 0) take the argmax of the raw row (first index on ties), the
    others ``argmax(processed + gumbel_noise(seed, pos, v))``.

    logits      [R, V] float32 | bfloat16 | float16, last dimension contiguous (else copied)
    temperature [R] float32, 0 = greedy
    seed        [R] int64
    pos         [R] int64, the position of each row (the noise key)
    top_k       [R] int32, 0 or >= V = off (None: off for all)
    top_p       [R] float32, 1 = off (None: off for all)
    min_p       [R] float32, 0 = off (None: off for all)

    Returns ``sampled [R] int64`` on the logits' device.
    """
    return prepare_gumbel_sample(logits, temperature, seed, pos, top_k=top_k, top_p=top_p, min_p=min_p).launch()


def prepare_rejection_sample(target_logits: torch.Tensor, draft_token_ids: torch.Tensor, cu_num_logits: torch.Tensor,
                             pos: torch.Tensor, temperature: torch.Tensor, seed: torch.Tensor, *,
                             top_k: torch.Tensor | None = None, top_p: torch.Tensor | None = None,
                             min_p: torch.Tensor | None = None, draft_logits: torch.Tensor | None = None) -> Prepared:
    """Host work of :func:`rejection_sample` (same arguments); ``Prepared.launch()`` returns its outputs."""
    r = cu_num_logits.numel() - 1
    k, p, m = _params(r, target_logits.device, top_k, top_p, min_p)
    batch = SamplingBatch(logits=target_logits, cu_num_logits=cu_num_logits, draft_token_ids=draft_token_ids,
                          positions=pos, temperature=temperature, top_k=k, top_p=p, min_p=m, seed=seed,
                          draft_logits=draft_logits)
    sampler = _sampler("verify")
    return Prepared(sampler, sampler.prepare(batch), plain=False)


def rejection_sample(target_logits: torch.Tensor, draft_token_ids: torch.Tensor, cu_num_logits: torch.Tensor,
                     pos: torch.Tensor, temperature: torch.Tensor, seed: torch.Tensor, *,
                     top_k: torch.Tensor | None = None, top_p: torch.Tensor | None = None,
                     min_p: torch.Tensor | None = None,
                     draft_logits: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify each request's drafts and draw its next token (the resample after a rejection, or the bonus).

    R requests, request r owning rows ``[cu_num_logits[r], cu_num_logits[r+1])``: k_r verify rows then its bonus
    row (k_r = 0: a plain sample), N rows in all, K = max k_r.

    target_logits   [N, V] float32 | bfloat16 | float16, before temperature and filters
    draft_token_ids [N] int32: the draft verified at row j; -1 on bonus rows and for placeholders
    cu_num_logits   [R+1] int32, exclusive prefix sum of rows per request, starting at 0
    pos             [N] int64, the position of each row (the RNG key)
    temperature     [R] float32, 0 = greedy verify (accept iff the draft is the argmax)
    seed            [R] int64
    top_k / top_p / min_p  [R] int32 / float32 / float32, off = 0 / 1 / 0 (None: off for all)
    draft_logits    [N - R, V] float (optional): pre-temperature draft logits, one row per verify row (None:
                    one-hot drafts, ``log q = 0``)

    Returns ``(sampled [R, K+1] int64, num_sampled [R] int32)`` on the logits' device: request r emits
    ``sampled[r, :num_sampled[r]]`` (its accepted drafts, then the resampled or bonus token); -1 after.
    """
    return prepare_rejection_sample(target_logits, draft_token_ids, cu_num_logits, pos, temperature, seed,
                                    top_k=top_k, top_p=top_p, min_p=min_p, draft_logits=draft_logits).launch()


def draft_tokens_from_sampled(draft_sampled: torch.Tensor, cu_num_logits: torch.Tensor) -> torch.Tensor:
    """[N] int32 ``draft_token_ids`` from MRV2's ``draft_sampled [N]`` (the input token at each row: the draft
    verified by row j is ``draft_sampled[j + 1]``): shifted by one, -1 on each request's bonus row."""
    out = torch.full_like(draft_sampled, -1, dtype=torch.int32)
    out[:-1] = draft_sampled[1:].to(torch.int32)
    out[cu_num_logits[1:].long() - 1] = -1
    return out
