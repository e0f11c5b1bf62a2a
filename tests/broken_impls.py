"""Deliberately broken samplers: `replay verify` must catch each one (tests/test_verify.py).

Each is the reference (replay_harness/impls/reference.py) with one flaw, built from the reference's own
pieces (accept_test, residual_logits, gumbel_draw). Flaws:

* ``u-zero``               acceptance uniform fixed at its minimum (u ~ 0): every draft accepted
* ``residual-from-p``      after a rejection, resample from p instead of the residual max(p - q, 0)
* ``residual-abs``         resample from |p - q| (the residual not clamped at 0)
* ``noise-reused``         Gumbel noise keyed without the position (same noise at every position)
* ``u-shared``             acceptance uniform keyed without the position (one u for all drafts)
* ``temperature-ignored``  logits not divided by the temperature (filters still applied)

and :class:`RowKeyedNoise`, the founding engine's random-sample kernel: noise keyed by (seed, batch row,
token), not by position. Its marginals are right and twins in other batch rows get other noise, so only
the position test of `replay verify` (same seed, same batch row, other positions) can see it.
"""
from __future__ import annotations

import dataclasses

import torch

from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.rng import ACCEPT_UNIFORM_MIN
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.oracle.walk import accept_test, gumbel_draw, residual_logits
from replay_harness.recording.step import Step

FLAWS = ("u-zero", "residual-from-p", "residual-abs", "noise-reused", "u-shared", "temperature-ignored")


class BrokenSampler(ReferenceSampler):
    """The reference with one flaw (see FLAWS): overrides its ``process`` and ``verify`` hooks."""

    def __init__(self, flaw: str):
        if flaw not in FLAWS:
            raise ValueError(flaw)
        self.flaw = flaw
        self.name = f"broken:{flaw}"
        self.description = f"reference with a deliberate flaw: {flaw}"

    def process(self, step: Step) -> torch.Tensor:
        if self.flaw == "temperature-ignored":
            t = torch.where(step.temperature > 0, torch.ones_like(step.temperature), step.temperature)
            return apply_sampling_params(dataclasses.replace(step, temperature=t))
        return apply_sampling_params(step)

    def _draw(self, scores: torch.Tensor, seed: int, pos: int) -> int:
        return gumbel_draw(scores, seed, 0 if self.flaw == "noise-reused" else pos)

    def _residual(self, target: torch.Tensor, d: int, q: torch.Tensor | None) -> torch.Tensor:
        if self.flaw == "residual-from-p":
            return target
        if self.flaw == "residual-abs":
            p = torch.softmax(target, 0)
            qp = torch.zeros_like(p) if q is None else torch.softmax(q, 0)
            if q is None:
                qp[d] = 1.0
            return torch.log((p - qp).abs())
        return residual_logits(target, d, q)

    def verify(self, logits: torch.Tensor, drafts: list[int], positions: list[int], temperature: float,
                seed: int, draft_logits: torch.Tensor | None, *method) -> list[int]:
        """The flawed token-wise walk (``method``: the reference hook's verification method, taken and ignored:
        the flaws are of the standard walk)."""
        if temperature == 0.0:  # no flaw touches greedy requests
            return super().verify(logits, drafts, positions, temperature, seed, draft_logits, *method)
        k = len(drafts)
        out = []
        for i, d in enumerate(drafts):
            if d < 0:
                return out + [self._draw(logits[i], seed, positions[i])]
            q = None if draft_logits is None else draft_logits[i].float() / temperature
            u_pos = positions[0] if self.flaw == "u-shared" else positions[i]
            log_p, threshold = accept_test(logits[i], d, q, seed, u_pos)
            if self.flaw == "u-zero":
                log_q = 0.0 if q is None else q[d] - torch.logsumexp(q, 0)
                threshold = torch.log(torch.tensor(ACCEPT_UNIFORM_MIN)) + log_q
            if bool(log_p > threshold):
                out.append(d)
                continue
            return out + [self._draw(self._residual(logits[i], d, q), seed, positions[i])]
        return out + [self._draw(logits[k], seed, positions[k])]


class RowKeyedNoise(ReferenceSampler):
    """The reference with every position of request r replaced by its batch row r: the noise (Gumbel and
    acceptance uniform alike) is keyed by (seed, batch row, token) and the same at every position."""

    name = "row-keyed-noise"
    description = "noise keyed by seed, batch row and token, not position (the founding engine's kernel)"

    def sample(self, step: Step):
        rows = torch.repeat_interleave(torch.arange(step.num_requests, dtype=step.positions.dtype),
                                       (step.cu_num_logits[1:] - step.cu_num_logits[:-1]).long())
        return super().sample(dataclasses.replace(step, positions=rows))


# The sampling pipeline's rules (docs/FIXTURES.md, "The sampling pipeline"), each with the Step fields that switch
# it off, written here on their own (not taken from compare/ablation.py, whose attribution these engines test).
PIPELINE_FIELDS_OF = {
    "grammar": ("grammar_bitmask", "has_grammar"),
    "allowed": ("allowed_token_ids", "cu_allowed_token_ids"),
    "bias": ("logit_bias_ids", "logit_bias_values", "cu_logit_bias"),
    "min-tokens": ("min_tokens",),
    "repetition": ("repetition_penalty",),
    "frequency": ("frequency_penalty",),
    "presence": ("presence_penalty",),
    "bad-words": ("bad_words_token_ids", "cu_bad_words_token_ids", "bad_words_lengths", "cu_bad_words_lengths"),
}
PIPELINE_LABELS = {"grammar": "grammar mask", "allowed": "allowed token ids", "bias": "logit bias",
                   "min-tokens": "min-tokens", "repetition": "repetition penalty", "frequency": "frequency penalty",
                   "presence": "presence penalty", "bad-words": "bad words"}


class DroppedRule(ReferenceSampler):
    """The reference with one rule of the sampling pipeline not applied: on verify rows only (``where="drafts"``,
    an engine whose draft-position path forgets it) or on every row (``where="all"``)."""

    def __init__(self, rule: str, where: str = "drafts"):
        self.rule, self.where = rule, where
        self.name = f"drops-{rule}-{where}"
        self.description = f"reference without the {rule} rule ({where})"

    def process(self, step: Step) -> torch.Tensor:
        off = apply_sampling_params(dataclasses.replace(step, **{f: None for f in PIPELINE_FIELDS_OF[self.rule]}))
        if self.where == "all":
            return off
        full = apply_sampling_params(step)
        bonus = step.cu_num_logits[1:].long() - 1
        keep = full.clone()
        mask = torch.ones(full.shape[0], dtype=torch.bool)
        mask[bonus] = False
        keep[mask] = off[mask]
        return keep


class FrozenHistory(ReferenceSampler):
    """The reference whose penalties, bad words and min-tokens see the request's output at the step start on every
    row: the drafts before a row are not counted as output (each row processed as a one-row request)."""

    name = "frozen-history"
    description = "drafts not counted as output by the pipeline's history rules"

    def process(self, step: Step) -> torch.Tensor:
        out = torch.empty(step.logits.shape, dtype=torch.float32)
        cu = step.cu_num_logits.tolist()
        for r in range(step.num_requests):
            one = step.select([r])
            for l in range(cu[r + 1] - cu[r]):
                row = dataclasses.replace(
                    one, logits=one.logits[l:l + 1], cu_num_logits=torch.tensor([0, 1], dtype=torch.int32),
                    draft_token_ids=torch.tensor([-1], dtype=torch.int32), positions=one.positions[l:l + 1],
                    draft_logits=None,
                    grammar_bitmask=None if one.grammar_bitmask is None else one.grammar_bitmask[l:l + 1])
                out[cu[r] + l] = apply_sampling_params(row)[0]
        return out
