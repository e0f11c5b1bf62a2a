"""Which rule a divergence breaks: re-run the torch oracle on the request alone with one rule of the sampling
pipeline removed, and name the ablation that reproduces what a side emitted (docs/VERIFY.md, "The sampling pipeline").

For a request whose tokens (or kept sets) differ from the oracle's, every ablation of
:func:`~replay_harness.compare.ablation.variants` is tried in its fixed order: the rules in Model Runner V2's
order (grammar mask, allowed token ids, logit bias, min-tokens, repetition, frequency and presence penalty, bad
words), each first "not applied at draft positions" (kept on the bonus row, dropped on verify rows), then "not
applied" (everywhere); last "drafts not counted as output" (histories frozen at the step start for every row).
The first that reproduces the side's tokens exactly (count and ids) names the rule; the others that reproduce
them too are listed beside it. Tokens are reproduced only under a shared RNG contract the oracle implements;
kept sets (finite processed logits) and the logprobs of a side's own tokens need no RNG at all.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from replay_harness.compare.ablation import Variant, variants
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.compare.logprobs import compare_slot, unpack
from replay_harness.oracle.logprobs import emitted_outputs
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.step import SampleResult, Step

MAX_ATTRIBUTED = 5  # requests attributed per recording (each costs up to 2 x 8 + 1 oracle runs of one request)


@dataclass
class Attribution:
    """The ablation that reproduces a side's output: ``rule`` its text, ``also`` the others that do too."""

    rule: str
    also: list[str] = field(default_factory=list)

    def message(self, request_id: int, step: int) -> str:
        """"presence penalty not applied at draft positions (request 17, step 2)" (+ what else fits)."""
        text = f"{self.rule} (request {request_id}, step {step})"
        return text + (f"; also fits: {'; '.join(self.also)}" if self.also else "")


class _Rows(ReferenceSampler):
    """The reference walk on given processed rows (its ``process`` hook returns them)."""

    rows: torch.Tensor

    def process(self, step: Step) -> torch.Tensor:
        return self.rows


def one_request(step: Step, r: int) -> Step:
    """Request r alone, on the CPU, without logprob requests (the walk's tokens are all that is compared)."""
    return dataclasses.replace(step.select([r]).to("cpu"), logprobs=None, logprobs_mode=None)


def oracle_tokens(one: Step, processed: torch.Tensor | None = None) -> list[int]:
    """The reference's tokens for the one-request step ``one``, on ``processed`` rows (None: its own)."""
    walker = _Rows()
    walker.rows = apply_sampling_params(one) if processed is None else processed
    res = walker.sample(one)
    return res.tokens[0, :int(res.counts[0])].tolist()


def _search(one: Step, full: torch.Tensor, fits) -> Attribution | None:
    found: list[Variant] = []
    for variant in variants(one):
        rows = variant.processed(one, full)
        if torch.equal(rows, full):  # inert here: it reproduces only what the oracle emits
            continue
        if fits(rows):
            found.append(variant)
    return Attribution(found[0].text, [v.text for v in found[1:]]) if found else None


def attribute_tokens(step: Step, r: int, tokens: list[int]) -> Attribution | None:
    """The ablation under which the oracle emits ``tokens`` for request r of ``step`` (None: none does, or the
    oracle already emits them)."""
    one = one_request(step, r)
    full = apply_sampling_params(one)
    if oracle_tokens(one, full) == tokens:
        return None
    return _search(one, full, lambda rows: oracle_tokens(one, rows) == tokens)


def attribute_outputs(step: Step, r: int, side: SampleResult, count: int) -> Attribution | None:
    """The ablation under which the oracle returns what ``side`` returned beside its tokens for request r's first
    ``count`` emitted slots: the kept sets and, where the request asked for them, the logprobs, top-n ids and ranks
    of ``side``'s own tokens (compare/logprobs.py's tolerance). None: none does, or the oracle already does."""
    one = step.select([r]).to("cpu")
    tokens = side.tokens[r:r + 1].long().cpu()
    counts = torch.tensor([count], dtype=torch.int32)
    n = -1 if one.logprobs is None else int(one.logprobs[0])
    kept = None if side.kept_mask is None or side.kept_mask.shape[1] < count else \
        unpack(side.kept_mask[r, :count].cpu(), step.vocab_size)
    asked = (n >= 0 and side.logprobs is not None and side.logprob_ids is not None
             and side.logprobs.shape[1] >= count and side.logprobs.shape[2] > n)
    if count == 0 or (kept is None and not asked):
        return None

    def fits(rows: torch.Tensor) -> bool:
        if kept is not None and not torch.equal(torch.isfinite(rows[:count]), kept):
            return False
        if not asked:
            return True
        want = emitted_outputs(one, rows, tokens, counts)
        for i in range(count):
            if compare_slot(n, side.logprobs[r, i, :n + 1].double().tolist(), side.logprob_ids[r, i, :n + 1].tolist(),
                            want["logprobs"][0, i, :n + 1].double().tolist(),
                            want["logprob_ids"][0, i, :n + 1].tolist()) is not None:
                return False
            if side.logprob_ranks is not None and int(side.logprob_ranks[r, i]) != int(want["logprob_ranks"][0, i]):
                return False
        return True

    full = apply_sampling_params(one)
    return None if fits(full) else _search(one, full, fits)
