"""Verdicts that pass on no evidence (issue 66 item 8): `replay verify` judges power per mechanism and per
recording (one powered test elsewhere passes nothing), a route that contradicts the temperature fails at any
trial count, and `replay run` does not take a sampler's stochastic routes on trust when its tokens are all
argmaxes. The held-out samplers are in tests/held_out.py."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from held_out import GreedyAtTemperature, OwnRng, PositionBlind
from helpers import cli
from replay_harness.api import compare
from replay_harness.checks.report import Check, UnitReport, VerifyReport, finalize
from replay_harness.checks.verify import builtin_steps, verify_units
from replay_harness.compare.diff import Comparison

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
MIXED = REPO / "fixtures" / "synthetic-mixed"


def _exec(cls: str) -> str:
    return f"exec:{sys.executable} -m replay_harness.impls.external_adapter held_out:{cls}"


def _verdict(impl, trials: int) -> VerifyReport:
    units = verify_units([("built-in", True, builtin_steps(), [0, 1])], lambda d: impl, trials, 0,
                         torch.device("cpu"))
    return finalize(VerifyReport(impl=impl.name, trials=trials, seed=0, alpha=1e-3, units=units))


@pytest.mark.parametrize("trials", [2, 4, 10, 100])
def test_the_held_out_bugs_never_pass_verify(trials):
    for bug, mechanism in ((GreedyAtTemperature(), "temperature"), (PositionBlind(), "position-noise")):
        rep = _verdict(bug, trials)
        assert not (rep.ok and not rep.inconclusive), (bug.name, trials)
        if rep.ok:  # exit 4: the mechanism the bug breaks is named among those without power
            assert mechanism in rep.uncovered["built-in"], rep.uncovered


def test_a_correct_sampler_with_its_own_rng_passes_with_every_mechanism_covered():
    rep = _verdict(OwnRng(), 400)
    assert rep.ok and not rep.inconclusive, [c.message for c in rep.failures] + [str(rep.uncovered)]
    assert {"greedy", "temperature", "position-noise", "top-k", "top-p", "min-p", "acceptance",
            "residual"} <= set(rep.coverage["built-in"])


def _unit(recording: str, exercised: dict, covers: dict, checks: list) -> UnitReport:
    u = UnitReport(recording, 0, 0, 0, 1.0, 0, "random-sample", ["random-sample"], 400, "tested", checks=checks)
    u.exercised, u.covers = exercised, covers
    return u


def _stat(recording: str) -> Check:
    return Check(kind="distribution", recording=recording, step=0, request=0, request_id=0, position=0, n=400,
                 message="m", p_value=0.5, floor_p=1e-30, floor_rate=0.5, floor_scale=1.0)


def test_one_powered_recording_does_not_pass_another_without_power():
    strong = _unit("a", {"temperature": 0.5}, {"temperature": 1e-30}, [_stat("a")])
    weak = _unit("b", {"temperature": 0.5}, {"temperature": 0.2}, [_stat("b")])
    rep = finalize(VerifyReport(impl="x", trials=400, seed=0, alpha=1e-3, units=[strong, weak]))
    assert rep.ok and rep.powered and rep.inconclusive
    assert rep.uncovered == {"b": ["temperature"]}
    assert rep.trials_needed() is not None and rep.trials_needed() > 400
    alone = finalize(VerifyReport(impl="x", trials=400, seed=0, alpha=1e-3, units=[strong]))
    assert not alone.inconclusive


def test_an_exact_greedy_check_is_no_power_for_stochastic_verification():
    greedy = _unit("v", {"greedy": 1.0}, {"greedy": 0.0},
                   [Check(kind="greedy", recording="v", step=0, request=1, request_id=1, position=None, n=4,
                          message="m", passed=True)])
    sampled = _unit("v", {"acceptance": 0.4, "temperature": 0.4}, {"acceptance": 0.3, "temperature": 0.3},
                    [_stat("v")])
    sampled.checks[0].floor_p = 0.3
    rep = finalize(VerifyReport(impl="x", trials=4, seed=0, alpha=1e-3, units=[greedy, sampled]))
    assert rep.inconclusive and rep.uncovered == {"v": ["temperature", "acceptance"]}


def test_verify_names_the_mechanisms_without_power_on_a_real_recording():
    code, out, err = cli("verify", "../fixtures/real-mixed", "--impl", _exec("GreedyAtTemperature"), "--trials", "4",
                         cwd=TESTS)
    assert code == 4, out + err
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("INCONCLUSIVE") and "no power for temperature, position-noise" in verdict, verdict
    assert "could have caught: greedy; no power for: temperature (--trials" in out


def test_a_route_that_contradicts_the_temperature_fails_at_any_trials():
    code, out, err = cli("verify", str(REPO / "fixtures" / "real-draft-model"), "--impl", "greedy-only", "--trials", "2")
    assert code == 1, out + err
    assert "route test FAILED (exact check): greedy-only reported route greedy-verify at temperature 1" in out
    code, out, err = cli("verify", str(REPO / "fixtures" / "real-draft-model"), "--impl", "greedy-only", "--trials", "2",
                         "--json")
    doc = json.loads(out)
    assert doc["exit_code"] == 1 and doc["failures"][0]["kind"] == "route"


def test_a_stochastic_route_at_temperature_zero_fails_verify():
    from replay_harness.recording.schema import ROUTE_CODE

    class Liar(OwnRng):
        def sample(self, step):
            res = super().sample(step)
            res.routes = torch.tensor([ROUTE_CODE["stochastic-verify" if k else "random-sample"]
                                       for k in step.num_drafts.tolist()], dtype=torch.int8)
            return res

    rep = _verdict(Liar(), 2)
    assert not rep.ok
    lines = [c.message for c in rep.failures if c.kind == "route"]
    assert lines and all("at temperature 0" in m and "sampling at temperature 0" in m for m in lines)


def test_run_fails_argmax_tokens_under_stochastic_routes_with_or_without_routes_only():
    cmp = compare(MIXED, GreedyAtTemperature())
    assert cmp.argmax_contradiction and not cmp.ok and cmp.verdict(routes_only=True) == "fail"
    assert "greedy decoding, although the sampler reported route" in cmp.summary()
    control = compare(MIXED, OwnRng())
    assert control.ok and not control.argmax_contradiction and control.verdict(routes_only=True) == "pass"
    for extra in ((), ("--routes-only",)):
        code, out, err = cli("run", "../fixtures/synthetic-mixed", "--impl", _exec("GreedyAtTemperature"), *extra,
                             cwd=TESTS)
        assert code == 1, out + err
        assert "tokens contradict the routes: all 13 random draws at temperature > 0 were the argmax" in out
        assert "routing violation stochastic-verify -> argmax at every draw (greedy)" in out


def test_every_draw_the_argmax_without_enough_evidence_is_no_routes_only_pass():
    cmp = Comparison(tokens_not_compared=3, stochastic_skipped=3, argmax_draws=3, argmax_hits=3,
                     argmax_log_p=math.log(0.01))
    assert cmp.ok and cmp.verdict(routes_only=True) == "inconclusive"
    assert "too many for --routes-only to pass" in cmp.summary()
    cmp.argmax_hits = 2  # one draw was not the argmax: routes-only as asked
    assert cmp.verdict(routes_only=True) == "pass"


def test_run_does_not_suggest_routes_only_when_every_draw_was_the_argmax():
    code, out, err = cli("run", "../fixtures/real-mixed", "--impl", _exec("GreedyAtTemperature"), cwd=TESTS)
    assert code == 4, out + err
    last = out.strip().splitlines()[-1]
    assert "INCONCLUSIVE" in last and "--routes-only" not in last, last
    code, out, err = cli("run", "../fixtures/real-mixed", "--impl", _exec("OwnRng"), cwd=TESTS)
    assert code == 4 and "--routes-only" in out.strip().splitlines()[-1]


def test_the_support_test_names_min_p_when_min_p_is_what_is_missing():
    """SYNTHETIC row: token 3 (p 0.08) survives min-p 0.1 alone, but top-p 0.9 after min-p cuts it; without min-p,
    top-p keeps it. A sampler that skips min-p emits it: min-p is named, not top-p."""
    from replay_harness.checks.verify import removed_by
    from replay_harness.recording.step import Step

    probs = torch.tensor([0.5, 0.2, 0.1, 0.08, 0.03, 0.03, 0.03, 0.03])
    step = Step(logits=probs.log().view(1, 8), cu_num_logits=torch.tensor([0, 1], dtype=torch.int32),
                draft_token_ids=torch.tensor([-1], dtype=torch.int32), positions=torch.tensor([5]),
                temperature=torch.tensor([1.0]), top_k=torch.zeros(1, dtype=torch.int32), top_p=torch.tensor([0.9]),
                min_p=torch.tensor([0.1]), seed=torch.tensor([1]), request_ids=torch.tensor([0]))
    assert removed_by(step, 0, 0, 3) == "removed by min-p 0.1"
    assert removed_by(step, 0, 0, 5) == "removed by min-p 0.1"  # min-p alone removes it too


def test_conformance_stochastic_verify_at_4_trials_passes_neither_bug():
    from replay_harness.conformance.runner import find_vectors, run_conformance

    for bug in (GreedyAtTemperature(), PositionBlind()):
        results = run_conformance(bug, find_vectors(rules=["stochastic-verify"]), trials=4)
        status = {r.rule.id: r.status for r in results}
        assert status == {"stochastic-verify": "no power", "position-keyed-noise": "no power"}, (bug.name, status)


def test_conformance_prints_one_noise_bug_once_not_under_every_rule():
    from replay_harness.conformance.runner import find_vectors, run_conformance

    results = run_conformance(PositionBlind(), find_vectors(rules=["temperature", "top-k-ties", "top-p-cut"]))
    status = {r.rule.id: r.status for r in results}
    assert status == {"temperature": "ok", "top-k-ties": "ok", "top-p-cut": "ok", "position-keyed-noise": "FAIL"}
    noise = results[-1].failures
    assert noise and all(line.startswith("rule position-keyed-noise: vector ") for line in noise)
    assert any("fits noise that does not depend on the position" in line for line in noise)


def test_greedy_verification_under_stochastic_routes_on_draft_logit_steps_is_not_blamed_on_the_noise():
    """Builtin step 1 draws the drafts from q per trial: a greedy verifier's outcomes differ from trial to trial,
    yet each is the argmax walk; its pair failures name greedy decoding first, and the mechanism is temperature."""
    from replay_harness.checks.power import failed_mechanism

    units = verify_units([("built-in", True, builtin_steps(), [1])], lambda d: GreedyAtTemperature(), 100, 0,
                         torch.device("cpu"))
    rep = finalize(VerifyReport(impl="g", trials=100, seed=0, alpha=1e-3, units=units))
    pairs = [c for c in rep.failures if c.kind in ("independence", "position")]
    new = "fits greedy decoding at T > 0: every run emitted the argmax"
    assert pairs and any(new in c.message for c in pairs)  # before: "fits noise keyed without the position"
    assert all(new in c.message or "fits a deterministic sampler" in c.message for c in pairs)
    assert {failed_mechanism(c) for c in pairs} == {"temperature"}
