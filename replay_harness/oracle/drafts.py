"""Probabilistic drafts re-derived from what the drafter sampled with (the oracle; docs/FIXTURES.md "Verification
methods", ``draft_sampling``).

A request with ``draft_sampling`` = probabilistic and temperature T > 0 had draft i (verified at row j = cu[r] + i)
drawn by the contract's drafter as vLLM 0.33 MRV2 draws it (``gumbel.py``, ``is_drafting=True``): the Gumbel-max of
``draft_logits[i] / T`` (float32 division; widened to float64 under ``mrv2-fp64``) with the noise of
``(seed, positions[j] + 2**30, token)``. The salt keeps a draft's noise apart from the verifier's resample at the same
position; a drafter that leaves it out (or draws from the global RNG) draws other drafts, which
:func:`draft_noise_diagnosis` names.
"""
from __future__ import annotations

import torch

from replay_harness.oracle.rng import DRAFT_NOISE_SALT
from replay_harness.oracle.walk import argmax_first, gumbel_draw

SALTED, UNSALTED = "salted", "unsalted"


def probabilistic(step, r: int) -> bool:
    """Whether request r's drafts were drawn by the contract's drafter (probabilistic, T > 0, with drafts)."""
    return (step.draft_sampling is not None and int(step.draft_sampling[r]) == 1 and float(step.temperature[r]) != 0
            and step.draft_logits is not None and int(step.num_drafts[r]) > 0)


def derive_drafts(step, r: int, salt: int = DRAFT_NOISE_SALT, seed: int | None = None) -> list[int]:
    """The k_r drafts of request r the drafter would draw (``salt`` added to each row's position; ``seed``: another
    seed than the step's, as verify's trials use)."""
    a, b = int(step.cu_num_logits[r]), int(step.cu_num_logits[r + 1])
    d_idx = step.draft_row_index()
    temperature = float(step.temperature[r])
    seed = int(step.seed[r]) if seed is None else seed
    fp64 = step.rng_contract == "mrv2-fp64"
    out = []
    for j in range(a, b - 1):
        scores = step.draft_logits[int(d_idx[j])].float() / torch.tensor(temperature, dtype=torch.float32)
        out.append(gumbel_draw(scores, seed, int(step.positions[j]) + salt, fp64=fp64))
    return out


def draft_noise_diagnosis(step, r: int) -> str | None:
    """None when request r's recorded drafts are the contract drafter's; else what they are: ``"unsalted"`` (drawn
    with the verifier's own noise key, so a rejected draft's resample reuses its noise), or a sentence saying they
    are neither (another RNG, or drafts not drawn from ``draft_logits``). Only for :func:`probabilistic` requests."""
    a, b = int(step.cu_num_logits[r]), int(step.cu_num_logits[r + 1])
    recorded = step.draft_token_ids[a:b - 1].tolist()
    valid = [i for i, d in enumerate(recorded) if d >= 0]
    if not valid:
        return None
    if all(recorded[i] == d for i, d in zip(valid, [derive_drafts(step, r)[i] for i in valid])):
        return None
    unsalted = derive_drafts(step, r, salt=0)
    if all(recorded[i] == unsalted[i] for i in valid):
        return UNSALTED
    greedy = [argmax_first(step.draft_logits[int(step.draft_row_index()[a + i])]) for i in valid]
    if all(recorded[i] == g for i, g in zip(valid, greedy)):
        return "greedy drafts (the argmax of draft_logits) recorded as probabilistic"
    return "not the contract drafter's draws (another RNG, or drafts not drawn from draft_logits)"
