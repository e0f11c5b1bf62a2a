"""Compare what two samplers emitted for the same steps: tokens, counts, routes, and where both sides return them
logprobs, top-n ids, ranks and kept sets (:mod:`replay_harness.compare.logprobs`). A real token divergence on a
step with the sampling pipeline is attributed to a rule (:mod:`replay_harness.compare.attribution`).

Pure functions returning dataclasses; printing lives in :mod:`replay_harness.cli.run`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, fields

import torch

from replay_harness.compare import argmax_evidence
from replay_harness.compare.attribution import MAX_ATTRIBUTED, attribute_outputs, attribute_tokens
from replay_harness.compare.logprobs import KINDS, OutputCounts, OutputDivergence, compare_outputs
from replay_harness.oracle.near_tie import is_near_tie
from replay_harness.recording.step import SampleResult, Step, route_name


@dataclass
class Divergence:
    step: int
    request: int          # index in the step
    request_id: int       # the engine's id
    position: int | None  # first output slot that differs; None: same tokens, different route
    token: int | None     # what the impl under test emitted there (-1: nothing)
    against_token: int | None  # what the other side emitted there
    route: str
    against_route: str
    near_tie: bool
    margin: float | None  # decision margin under the reference (nats)
    rule: str | None = None       # the ablation of the pipeline that reproduces a side's tokens (attribution.py)
    rule_side: str | None = None  # whose tokens it reproduces: "impl" or "against"


@dataclass
class Violation:
    step: int
    request_id: int
    expected: str
    got: str

    @property
    def kind(self) -> str:
        return f"{self.expected} -> {self.got}"


@dataclass
class Comparison:
    """Totals over the steps of one recording."""

    steps: int = 0
    requests: int = 0
    requests_matched: int = 0
    tokens_compared: int = 0
    tokens_matched: int = 0
    stochastic_skipped: int = 0  # requests not compared token by token (RNG contracts differ)
    tokens_not_compared: int = 0  # their tokens: a stochastic token the comparison could not check
    skipped_unrouted: int = 0  # of those requests, the ones the impl under test gave no route (-1): nothing checked
    divergences: list[Divergence] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)          # impl under test
    against_violations: list[Violation] = field(default_factory=list)  # the other side (e.g. the engine)
    refused: list[tuple[int, int]] = field(default_factory=list)       # (step, request_id)
    notes: list[str] = field(default_factory=list)
    logprob_slots_compared: int = 0   # emitted slots whose logprobs, top-n ids and ranks were compared
    kept_sets_compared: int = 0       # emitted slots whose kept sets were compared
    logprobs_not_compared: int = 0    # slots that asked for logprobs where a side returned none
    output_divergences: list[OutputDivergence] = field(default_factory=list)  # logprob / top-n / rank / kept-set
    attributed: int = 0               # requests whose token divergence went through the ablations (MAX_ATTRIBUTED)
    attributed_outputs: int = 0       # requests whose logprob / kept-set difference did (MAX_ATTRIBUTED)
    # tokens not compared (RNG contracts differ): the last token of each T > 0 request-step, drawn at random by a
    # correct sampler; how many were the argmax of their processed row, and the log of the probability that a
    # correct sampler draws the argmax at every one of those (argmax_evidence.py)
    argmax_draws: int = 0
    argmax_hits: int = 0
    argmax_log_p: float = 0.0
    argmax_steps: list[tuple[int, int, str]] = field(default_factory=list)  # (step, request_id, route) of hits

    @property
    def real_divergences(self) -> list[Divergence]:
        return [d for d in self.divergences if not d.near_tie]

    @property
    def near_ties(self) -> int:
        return sum(d.near_tie for d in self.divergences)

    def outputs_by_kind(self) -> dict[str, int]:
        """Logprob, top-n, rank and kept-set differences, counted by kind (compare/logprobs.py KINDS)."""
        found = Counter(d.kind for d in self.output_divergences)
        return {kind: found[kind] for kind in KINDS if found[kind]}

    def violations_by_kind(self, which: str = "impl") -> dict[str, int]:
        items = self.violations if which == "impl" else self.against_violations
        return dict(sorted(Counter(v.kind for v in items).items()))

    @property
    def argmax_contradiction(self) -> bool:
        """Every drawn T > 0 token not compared was the argmax, where a correct sampler does that with
        probability below ARGMAX_P (argmax_evidence.py): greedy decoding under the routes it reported."""
        return argmax_evidence.contradicts(self)

    @property
    def ok(self) -> bool:
        """Nothing wrong was seen (divergences, violations, refusals, argmax tokens under stochastic routes).
        Not a pass by itself: see :meth:`verdict` (a run that could not compare a stochastic token is
        inconclusive)."""
        return not (self.real_divergences or self.violations or self.against_violations or self.refused
                    or self.output_divergences or self.argmax_contradiction)

    @property
    def inconclusive(self) -> bool:
        """Nothing wrong was seen, but stochastic tokens were not compared (RNG contracts differ): no pass."""
        return self.ok and self.tokens_not_compared > 0

    def verdict(self, routes_only: bool = False) -> str:
        """"fail" (something wrong), "inconclusive" (ok, but ``tokens_not_compared`` > 0 and the user did not
        ask for routes only, or every drawn token was the argmax: argmax_evidence.suspect) or "pass" (exit codes
        1, 4, 0; docs/VERIFY.md, "Verdicts")."""
        if not self.ok:
            return "fail"
        unchecked = self.skipped_unrouted if routes_only else self.tokens_not_compared
        if routes_only and argmax_evidence.suspect(self):  # every drawn token the argmax: routes are not enough
            return "inconclusive"
        return "inconclusive" if unchecked else "pass"

    def summary(self, routes_only: bool = False) -> str:
        """The summary line's counts: tokens compared, matched and not compared."""
        text = f"{self.tokens_compared} tokens compared, {self.tokens_matched} matched"
        if self.tokens_not_compared:
            text += (f", {self.tokens_not_compared} stochastic token(s) in {self.stochastic_skipped} request-step(s) "
                     f"not compared (RNG contracts differ{': routes only, as asked' if routes_only else ''})")
        if routes_only and self.skipped_unrouted:
            text += f"; {self.skipped_unrouted} of those request-step(s) came without a route: nothing was checked"
        if self.logprob_slots_compared or self.kept_sets_compared:
            differ = sum(self.outputs_by_kind().values())
            text += (f"; {self.logprob_slots_compared} logprob slot(s) and {self.kept_sets_compared} kept set(s) "
                     f"compared, {differ} difference(s)")
        if self.logprobs_not_compared:
            text += f"; {self.logprobs_not_compared} logprob slot(s) not compared (a side returned none)"
        if self.argmax_contradiction:
            text += "; " + argmax_evidence.describe(self)
        elif argmax_evidence.suspect(self):
            text += (f"; all {self.argmax_draws} random draws at temperature > 0 were the argmax (probability "
                     f"{argmax_evidence.probability(self):.2g} for a correct sampler): too few to call it greedy "
                     f"decoding, too many for --routes-only to pass")
        return text

    def merge(self, later: "Comparison") -> "Comparison":
        """Fold ``later`` (the comparison of the steps that follow) into this one: counts add, lists
        extend. Merging the per-step comparisons in step order gives what one pass over the steps gives."""
        for f in fields(self):
            value = getattr(later, f.name)
            setattr(self, f.name, getattr(self, f.name) + value)
        argmax_evidence.refresh(self, Violation)
        return self

    def to_dict(self) -> dict:
        first = self.divergences[0] if self.divergences else None
        first_real = self.real_divergences[0] if self.real_divergences else None
        return {
            "ok": self.ok, "steps": self.steps, "requests": self.requests,
            "requests_matched": self.requests_matched, "tokens_compared": self.tokens_compared,
            "tokens_matched": self.tokens_matched, "stochastic_requests_not_compared": self.stochastic_skipped,
            "tokens_not_compared": self.tokens_not_compared, "inconclusive": self.inconclusive,
            "stochastic_requests_without_route": self.skipped_unrouted,
            "divergent_requests": len(self.divergences), "near_ties": self.near_ties,
            "first_divergence": asdict(first) if first else None,
            "first_real_divergence": asdict(first_real) if first_real else None,
            "routing_violations": self.violations_by_kind("impl"),
            "routing_violation_requests": [asdict(v) for v in self.violations[:20]],
            "against_routing_violations": self.violations_by_kind("against"),
            "refused": [{"step": s, "request_id": r} for s, r in self.refused[:50]],
            "refused_count": len(self.refused), "notes": self.notes,
            "attributed_divergences": [asdict(d) for d in self.divergences if d.rule is not None][:20],
            "logprob_slots_compared": self.logprob_slots_compared, "kept_sets_compared": self.kept_sets_compared,
            "logprobs_not_compared": self.logprobs_not_compared,
            "output_differences": self.outputs_by_kind(),
            "output_difference_slots": [asdict(d) for d in self.output_divergences[:20]],
            "argmax_draws": self.argmax_draws, "argmax_hits": self.argmax_hits,
            "argmax_probability": argmax_evidence.probability(self),
            "argmax_contradiction": self.argmax_contradiction,
        }


def _check_routes(step_index: int, step: Step, routes: list[str], out: list[Violation]) -> None:
    for r, (want, got) in enumerate(zip(step.expected_routes(), routes)):
        if got not in (want, "refused", "unknown"):
            out.append(Violation(step_index, int(step.request_ids[r]), want, got))


def compare_step(cmp: Comparison, step_index: int, step: Step, a: SampleResult, b: SampleResult,
                 *, exact_stochastic: bool = True) -> None:
    """Fold one step's comparison of ``a`` (impl under test) against ``b`` into ``cmp``."""
    cmp.steps += 1
    cmp.requests += step.num_requests
    routes_a, routes_b = a.route_names(), b.route_names()
    _check_routes(step_index, step, routes_a, cmp.violations)
    _check_routes(step_index, step, routes_b, cmp.against_violations)
    cmp.notes.extend(f"step {step_index}: {n}" for n in a.notes)
    width = max(a.tokens.shape[1], b.tokens.shape[1])
    ta = torch.nn.functional.pad(a.tokens.long(), (0, width - a.tokens.shape[1]), value=-1)
    tb = torch.nn.functional.pad(b.tokens.long(), (0, width - b.tokens.shape[1]), value=-1)
    counted = OutputCounts()
    processed = None  # the step's rows after sampling params, computed when a T > 0 token is not compared
    for r in range(step.num_requests):
        rid = int(step.request_ids[r])
        ca, cb = int(a.counts[r]), int(b.counts[r])
        n = max(ca, cb)
        same = ta[r, :n] == tb[r, :n]
        agree = n if bool(same.all()) else int(torch.nonzero(~same)[0])
        _outputs(cmp, step_index, step, a, b, r, min(agree, ca, cb), min(ca, cb), counted)
        if routes_a[r] == "refused":
            cmp.refused.append((step_index, rid))
        if not exact_stochastic and float(step.temperature[r]) != 0.0:
            if ca and routes_a[r] != "refused":
                processed = processed if processed is not None else argmax_evidence.processed_rows(step)
                argmax_evidence.observe(cmp, step_index, step, r, ta[r, :ca].tolist(), routes_a[r], processed)
            cmp.stochastic_skipped += 1
            cmp.tokens_not_compared += max(ca, cb, 1)
            cmp.skipped_unrouted += routes_a[r] == "unknown"
            continue
        cmp.tokens_compared += n
        cmp.tokens_matched += int(same.sum())
        if bool(same.all()) and (routes_a[r] == routes_b[r] or "unknown" in (routes_a[r], routes_b[r])):
            cmp.requests_matched += 1  # an unrecorded route (optional in the format) is no divergence
            continue
        if bool(same.all()):  # same tokens, different route
            cmp.divergences.append(Divergence(step_index, r, rid, None, None, None, routes_a[r], routes_b[r],
                                              False, None))
            continue
        pos = agree
        near, margin = False, None
        if routes_a[r] == routes_b[r] and routes_a[r] != "refused":
            near, margin = is_near_tie(step, r, pos)
        d = Divergence(step_index, r, rid, pos, int(ta[r, pos]), int(tb[r, pos]), routes_a[r], routes_b[r], near,
                       margin)
        cmp.divergences.append(d)
        if not near and step.has_pipeline and cmp.attributed < MAX_ATTRIBUTED:
            cmp.attributed += 1
            for side, tokens, c in (("impl", ta, ca), ("against", tb, cb)):
                found = attribute_tokens(step, r, tokens[r, :c].tolist()) if c else None
                if found is not None:
                    d.rule, d.rule_side = found.message(rid, step_index), side
                    break
    if processed is not None:
        argmax_evidence.refresh(cmp, Violation)
    cmp.logprob_slots_compared += counted.logprob_slots
    cmp.kept_sets_compared += counted.kept_slots
    if counted.logprobs_missing:
        cmp.logprobs_not_compared += counted.logprobs_missing
        note = "logprobs not compared where the step asks for them: a side returned none"
        if note not in cmp.notes:
            cmp.notes.append(note)


def _outputs(cmp: Comparison, step_index: int, step: Step, a: SampleResult, b: SampleResult, r: int, slots: int,
             rows: int, counted: OutputCounts) -> None:
    """Request r's logprob / top-n / rank / kept-set differences into ``cmp``; on a step with the pipeline the
    first is attributed to a rule (no RNG involved: compare/attribution.py), within MAX_ATTRIBUTED requests."""
    found = compare_outputs(step_index, step, a, b, r, slots, rows, counted)
    if found and step.has_pipeline and cmp.attributed_outputs < MAX_ATTRIBUTED:
        cmp.attributed_outputs += 1
        for side, x, count in (("impl", a, int(a.counts[r])), ("against", b, int(b.counts[r]))):
            fit = attribute_outputs(step, r, x, count)
            if fit is not None:
                found[0].rule, found[0].rule_side = fit.message(int(step.request_ids[r]), step_index), side
                break
    cmp.output_divergences.extend(found)


def recorded_result(emitted) -> SampleResult:
    """The engine's recorded answer as a SampleResult (routes unknown when not recorded)."""
    routes = emitted.routes if emitted.routes is not None else torch.full_like(emitted.counts, -1, dtype=torch.int8)
    return SampleResult(tokens=emitted.tokens.long(), counts=emitted.counts, routes=routes.to(torch.int8),
                        logprobs=emitted.logprobs, logprob_ids=emitted.logprob_ids,
                        logprob_ranks=emitted.logprob_ranks, kept_mask=emitted.kept_mask)


__all__ = ["Comparison", "Divergence", "Violation", "compare_step", "recorded_result", "route_name"]
