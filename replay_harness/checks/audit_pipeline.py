"""The audit's checks of the sampling pipeline (docs/AUDIT.md, "The sampling pipeline"): emitted tokens a rule
forbids, and whether the penalties were applied. :mod:`replay_harness.checks.audit` calls them per step and token.

* ``forbidden-token`` (certain): an emitted token whose logit the grammar mask, the allowed ids, a -inf logit bias,
  min-tokens or a bad word sets to -inf (before temperature and the filters). The finding names the rule (the first
  in Model Runner V2's order after which the token is -inf: :func:`~replay_harness.compare.ablation.forbidding_rule`),
  the request, the step and the emitted slot.
* ``penalty`` (statistical, Poisson-binomial upper tail): for every T > 0 token of a request with a repetition,
  frequency or presence penalty, let ``p`` be the row's distribution after every rule and ``p0`` the same row
  with the penalties removed, and ``D = {x : p0(x) > p(x)}`` the tokens the penalties make less likely (for
  positive penalties: the request's repeats). The event "the token lies in D" has probability ``p(D)`` under a
  correct sampler, fixed before the draw; a sampler that ignores the penalties draws it with ``p0(D) = p(D) +
  TV(p, p0)``, the largest excess any event can show. The count's exact upper tail is the p-value.
"""
from __future__ import annotations

import math

import torch

from replay_harness.checks.findings import Term
from replay_harness.compare.ablation import PENALTIES, active, forbidding_rule, pipeline_only, variants, without
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.oracle.walk import argmax_first
from replay_harness.recording.step import Step

FORBIDDEN = "forbidden-token"
PENALTY_TEST = "penalty"
MAX_NAMED = 50  # forbidden tokens whose rule is named (each costs up to 8 runs of the pipeline on one request)
TOL = 1e-12     # log-probability difference below which a token is not counted as made less likely


class StepPipeline:
    """What one step's pipeline checks need, computed once per step: the rows after the grammar mask and the
    logits processors alone (``base`` [N, V] float32, None without a pipeline) and the log-probabilities of the
    rows with the penalties removed (``free`` [N, V] float64, None when no request has a penalty)."""

    def __init__(self, step: Step):
        self.step = step
        self.on = step.has_pipeline
        self.base = apply_sampling_params(pipeline_only(step)) if self.on else None
        penalized = [r for r in range(step.num_requests) if any(active(step, p, r) for p in PENALTIES)]
        self.penalized = set(penalized)
        self.free = None
        if penalized:
            free = apply_sampling_params(without(step, *PENALTIES))
            free = torch.nan_to_num(free, nan=-math.inf, neginf=-math.inf)
            self.free = torch.nan_to_num(torch.log_softmax(free.double(), -1), nan=-math.inf)

    def forbids(self, row: int, token: int) -> bool:
        """Whether the pipeline (not the filters) sets ``token``'s finite recorded logit at ``row`` to -inf."""
        return (self.on and bool(torch.isfinite(self.step.logits[row, token]))
                and not bool(torch.isfinite(self.base[row, token])))

    def support_row(self, row: int) -> torch.Tensor:
        """[V] the row the filters cut (after the pipeline): the boundary checks of the audit read it."""
        return self.step.logits[row] if self.base is None else self.base[row]

    def penalty_term(self, index: int, rid: int, r: int, i: int, scope: str, row: int, lp: torch.Tensor,
                     token: int) -> Term | None:
        """The penalty test's term of token ``token`` at ``row`` (emitted slot ``i``), ``lp`` [V] float64 its
        row's log-probabilities after every rule; None when request r has no penalty or they change nothing."""
        if r not in self.penalized:
            return None
        free = self.free[row]
        lower = free > lp + TOL
        lower &= torch.isfinite(free)
        prob = float(lp[lower].exp().sum())
        if not bool(lower.any()) or prob >= 1.0 - 1e-12:
            return None
        return Term(index, rid, i, scope, prob, bool(lower[token]))


def greedy_rule(step: Step, r: int, i: int, token: int) -> str | None:
    """The first ablation (compare/ablation.py's order) under which ``token`` is the argmax of request r's row
    ``i``: what a greedy token that is not the argmax fits ("presence penalty not applied at draft positions")."""
    one = step.select([r]).to("cpu")
    full = apply_sampling_params(one)
    for variant in variants(one):
        if argmax_first(variant.processed(one, full)[i]) == token:
            return variant.text
    return None


class Forbidden:
    """The emitted tokens a rule forbids, gathered per rule: (step, request id, detail) each."""

    def __init__(self) -> None:
        self.named = 0  # rules named so far (forbidden tokens and greedy tokens that are not the argmax)

    def name_greedy(self, step: Step, r: int, i: int, token: int) -> str:
        """"; it is the argmax with presence penalty not applied" for a greedy token that is not the argmax of its
        row after the pipeline, when an ablation makes it one ("" otherwise, or past MAX_NAMED)."""
        if not step.has_pipeline or self.named >= MAX_NAMED:
            return ""
        self.named += 1
        rule = greedy_rule(step, r, i, token)
        return "" if rule is None else f"; it is the argmax with {rule}"

    def add(self, certain: dict, index: int, step: Step, r: int, rid: int, i: int, token: int) -> None:
        """Record token ``token`` at emitted slot ``i`` of request r into ``certain`` (the audit's certain findings,
        keyed by (kind, rule))."""
        rule = "a rule of the pipeline (not named: more than MAX_NAMED forbidden tokens)"
        if self.named < MAX_NAMED:
            self.named += 1
            rule = forbidding_rule(step, r, i, token) or rule
        certain.setdefault((FORBIDDEN, rule), []).append(
            (index, rid, f"position {i}: token {token} is forbidden by the rule '{rule}'"))


def judge_forbidden(kind: tuple[str, str], items: list[tuple[int, int, str]]) -> dict:
    """The keyword arguments of the Finding of one rule's forbidden tokens."""
    _, rule = kind
    detail = "; ".join(f"step {s} request {rid} {d}" for s, rid, d in items[:3])
    more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
    return dict(kind=FORBIDDEN, rule=rule, message=f"emitted token(s) the rule '{rule}' forbids: {detail}{more}")
