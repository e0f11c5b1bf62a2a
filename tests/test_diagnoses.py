"""Diagnoses that name the mechanism the evidence supports (issue 54, item 3): audit names reused noise
for a position-blind engine locked in a loop on the argmax; verify's pair tests say which direction they
failed and name greedy verification when the failing request was verified greedily; the support failure
names the filter that removed the token; p-values below the float range never print as 0."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from replay_harness.checks.audit import audit_steps
from replay_harness.recording.step import SampleResult, Step

V, STEPS, REQUESTS = 32, 40, 4


def _looping_model(seed: int) -> torch.Tensor:
    """A toy model whose next-token logits depend on the last token only and favour repeating it."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(V, V, generator=g) + 4.0 * torch.eye(V)


def _decode(engine: str, seed: int) -> list:
    """STEPS plain T = 1 steps of REQUESTS requests; each token feeds the next step's logits.
    engine: "position-blind" (Gumbel-max with one noise vector per request, reused at every position)
    or "correct" (fresh noise every step)."""
    model, g = _looping_model(seed), torch.Generator().manual_seed(seed + 1)
    noise = -torch.log(-torch.log(torch.rand(REQUESTS, V, generator=g)))
    last, out = list(range(REQUESTS)), []
    for s in range(STEPS):
        logits = torch.stack([model[t] for t in last])
        if engine == "correct":
            noise = -torch.log(-torch.log(torch.rand(REQUESTS, V, generator=g)))
        last = (logits + noise).argmax(-1).tolist()
        step = Step(logits=logits, cu_num_logits=torch.arange(REQUESTS + 1, dtype=torch.int32),
                    draft_token_ids=torch.full((REQUESTS,), -1, dtype=torch.int32),
                    positions=torch.full((REQUESTS,), 10 + s, dtype=torch.int64),
                    temperature=torch.ones(REQUESTS), top_k=torch.zeros(REQUESTS, dtype=torch.int32),
                    top_p=torch.ones(REQUESTS), min_p=torch.zeros(REQUESTS),
                    seed=torch.arange(REQUESTS, dtype=torch.int64), request_ids=torch.arange(REQUESTS))
        out.append((step, torch.tensor(last).view(REQUESTS, 1), torch.ones(REQUESTS, dtype=torch.int32)))
    return out


def test_audit_names_reused_noise_for_a_looping_position_blind_engine():
    for seed in range(3):
        result = audit_steps(_decode("position-blind", seed), path="looping")
        noise = [f for f in result.findings if f.kind == "reused-noise"]
        assert noise and noise[0].p_value < 1e-6, [(f.kind, f.test, f.message) for f in result.findings]
        for f in result.findings:  # where the evidence also fits greedy decoding, both are named
            if f.kind == "greedy-at-temperature":
                assert "noise reused across positions" in f.message
        clean = audit_steps(_decode("correct", seed), path="looping-correct")
        assert clean.ok, [f.message for f in clean.findings]


# ----------------------------------------------------------------------------------------------- verify
from replay_harness.checks.report import VerifyReport, finalize  # noqa: E402
from replay_harness.checks.tails import p_text  # noqa: E402
from replay_harness.checks.verify import builtin_steps, verify_step  # noqa: E402
from replay_harness.impls import get_impl  # noqa: E402
from replay_harness.impls.reference import ReferenceSampler  # noqa: E402


def _verify(impl, step_index: int, trials: int = 60) -> VerifyReport:
    step = builtin_steps()[step_index]
    report = VerifyReport(impl=impl.name, trials=trials, seed=0, alpha=1e-3)
    report.units = verify_step("built-in", step_index, step, impl, trials, np.random.default_rng(0), torch.device("cpu"))
    return finalize(report)


def test_pair_failures_of_a_greedily_verified_request_name_greedy_verification():
    report = _verify(get_impl("greedy-only"), 0)
    pairs = [c for c in report.failures if c.kind in ("independence", "position")]
    assert pairs
    for c in pairs:
        assert "too many coincidences" in c.message and "greedy decoding at temperature" in c.message, c.message
        assert "route greedy-verify" in c.message and "for noise keyed by position" not in c.message
    accept = [c for c in report.failures if c.kind == "acceptance"]
    assert accept and all(("too many accepted" if c.observed > c.expected else "too few accepted") in c.message
                          for c in accept)


class IgnoresFilter(ReferenceSampler):
    def __init__(self, field: str):
        self.field, self.name = field, f"ignores-{field}"

    def process(self, step):
        off = {"top_k": torch.zeros_like(step.top_k), "min_p": torch.zeros_like(step.min_p)}[self.field]
        return super().process(dataclasses.replace(step, **{self.field: off}))


def test_the_support_failure_names_the_filter_that_removed_the_token():
    for field, step_index, words in (("top_k", 0, "removed by top-k"), ("min_p", 1, "removed by min-p")):
        support = [c for c in _verify(IgnoresFilter(field), step_index).failures if c.kind == "support"]
        assert any(words in c.message for c in support), [c.message for c in support]
        assert all("removed by" in c.message for c in support)  # (without min-p, top-p cuts elsewhere too)


def test_p_values_below_the_float_range_never_print_as_zero():
    from replay_harness.cli.verify import _fmt_p

    assert p_text(0.0) == "p < 1e-300" and p_text(1e-320) == "p < 1e-300" and p_text(1.19e-5) == "p = 1.19e-05"
    assert _fmt_p(0.0) == "< 1e-300" and _fmt_p(2.37e-192) == "2.37e-192"
    assert not math.isnan(float("0"))


class BatchGreedy(ReferenceSampler):
    """The founding engine's batch rule: any draft in the step sends EVERY request to the greedy path (a T = 1
    plain request is argmaxed when it shares a step with drafted ones); routes labelled from the parameters."""

    name = "batch-greedy"

    def sample(self, step):
        from replay_harness.recording.schema import ROUTE_CODE

        if int(step.num_drafts.max()) == 0:
            return super().sample(step)
        res = super().sample(dataclasses.replace(step, temperature=torch.zeros_like(step.temperature)))
        res.routes = torch.tensor([ROUTE_CODE[r] for r in step.expected_routes()], dtype=res.routes.dtype)
        return res


def test_verify_sees_a_plain_request_argmaxed_because_it_shares_a_step_with_drafted_ones():
    from pathlib import Path

    from replay_harness.recording.store import Recording

    step = Recording(Path(__file__).resolve().parents[1] / "fixtures" / "real-mixed")[1].step  # k = 0, 0, 1
    report = VerifyReport(impl="batch-greedy", trials=100, seed=0, alpha=1e-3)
    report.units = verify_step("real-mixed", 1, step, BatchGreedy(), 100, np.random.default_rng(0),
                               torch.device("cpu"), requests=[1])
    finalize(report)
    assert report.units[0].num_drafts == 0 and report.failures, [c.message for c in report.checks]
