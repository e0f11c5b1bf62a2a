"""Classify a token divergence: floating-point near-tie or real difference.

Two correct implementations of the same contract can still disagree when a
decision sits on a floating-point knife edge: a different summation order in the
log-sum-exp, ``log`` from libdevice instead of the C library, or a fused
multiply-add move a score by a few ulp. A divergence at (request, position) is a
*near-tie* when the decision taken there had a margin of at most
``NEAR_TIE_TOL`` (in logit units, i.e. nats) under the reference computation:

* greedy argmax: the gap between the best and second-best processed logit;
* stochastic accept: |log p(d) - log u - log q(d)|;
* Gumbel draw (resample or bonus): the gap between the best and second-best
  noised score.

At 1e-4 nats a decision can only flip through rounding (fp32 logits of
magnitude <= 100 carry about 1e-5 of rounding after the steps above), while a
real bug essentially never lands inside the band.

A decision on an all ``-inf`` logits row (every token masked: docs/FIXTURES.md, "All -inf rows") has
no margin: the reference emits token 0 there, as vLLM does, and a divergence on such a row is compared
exactly, never a near-tie. Nor is a divergence whose margin comes out NaN (no decision to measure).
"""
from __future__ import annotations

import torch

from replay_harness.oracle.walk import accept_test, residual_logits
from replay_harness.oracle.rng import gumbel_row
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.step import Step

NEAR_TIE_TOL = 1e-4


def _top2_gap(scores: torch.Tensor) -> float:
    finite = torch.nan_to_num(scores.float(), nan=float("-inf"))
    top = torch.topk(finite, 2).values if finite.numel() > 1 else torch.tensor([0.0, float("-inf")])
    gap = float(top[0] - top[1])
    return gap if gap == gap else float("inf")


def decision_margin(step: Step, request: int, position: int) -> float:
    """Smallest margin of the decisions that produce token ``position`` of ``request``."""
    sub = step.select([request]).to("cpu")  # on the CPU whatever device the step was read to (as it was recorded)
    logits = apply_sampling_params(sub)
    k = logits.shape[0] - 1
    position = min(position, k)
    temperature, seed = float(sub.temperature[0]), int(sub.seed[0])
    pos = sub.positions.tolist()
    if temperature == 0.0:
        return _top2_gap(logits[position])
    noise = gumbel_row(seed, pos[position], step.vocab_size, logits.device)
    d = int(sub.draft_token_ids[position]) if position < k else -1
    if d < 0:
        return _top2_gap(logits[position] + noise)
    q = None if sub.draft_logits is None else sub.draft_logits[position].float() / temperature
    log_p, threshold = accept_test(logits[position], d, q, seed, pos[position])
    accept_margin = abs(float(log_p - threshold))
    return min(accept_margin, _top2_gap(residual_logits(logits[position], d, q) + noise))


def neg_inf_row(step: Step, request: int, position: int) -> bool:
    """Is the target logits row of token ``position`` of ``request`` all ``-inf`` (every token masked)?"""
    first, last = int(step.cu_num_logits[request]), int(step.cu_num_logits[request + 1]) - 1
    return bool(torch.isneginf(step.logits[min(first + position, last)]).all())


def is_near_tie(step: Step, request: int, position: int) -> tuple[bool, float | None]:
    """(near-tie?, decision margin in nats); (False, None) on an all -inf row or a NaN margin."""
    if neg_inf_row(step, request, position):
        return False, None
    margin = decision_margin(step, request, position)
    if margin != margin:
        return False, None
    return margin <= NEAR_TIE_TOL, margin
