"""The power floor of `replay verify` (issue 54, item 5): a test that no outcome could push below its
threshold in a bug's direction is not a pass, and a run where nothing could have failed is exit 4
"INCONCLUSIVE: ... raise --trials to N" (N computed), never PASS."""
from __future__ import annotations

import json
from pathlib import Path

from helpers import cli
from replay_harness.checks.report import Check, VerifyReport, finalize
from replay_harness.checks.stats import binomial_p

REPO = Path(__file__).resolve().parents[1]


def _pair(rate: float, pairs: int) -> Check:
    return Check(kind="position", recording="x", step=0, request=0, request_id=0, position=None, n=pairs,
                 message="m", statistic=float(pairs), p_value=binomial_p(pairs, pairs, rate), method="binomial",
                 floor_p=binomial_p(pairs, pairs, rate), floor_rate=rate, floor_scale=2.0)


def test_a_test_that_could_not_fail_is_not_a_pass_and_the_trials_it_needs_are_computed():
    from replay_harness.checks.report import UnitReport

    unit = UnitReport("x", 0, 0, 0, 1.0, 1, "stochastic-verify", ["greedy-verify"], 400, "tested",
                      checks=[_pair(0.9994, 200)])
    report = finalize(VerifyReport(impl="x", trials=400, seed=0, alpha=1e-3, units=[unit]))
    assert report.ok and report.powerless and report.inconclusive
    need = report.trials_needed()
    assert need is not None and need > 400
    # with that many trials, every pair coinciding would fail the test
    assert binomial_p(need // 2, need // 2, 0.9994) < report.threshold
    # a confident-but-testable row keeps its power: a pass
    unit.checks = [_pair(0.3, 200)]
    assert not finalize(VerifyReport(impl="x", trials=400, seed=0, alpha=1e-3, units=[unit])).inconclusive


def test_verify_greedy_only_on_real_draft_model_is_never_a_pass():
    code, out, err = cli("verify", str(REPO / "fixtures" / "real-draft-model"), "--impl", "greedy-only", "-q")
    assert code in (1, 4), out + err
    if code == 4:
        assert "INCONCLUSIVE" in out and "raise --trials to" in out.replace("\n", " ")


def test_verify_on_an_all_greedy_recording_is_exit_4():
    code, out, err = cli("verify", str(REPO / "fixtures" / "real-greedy"), "--impl", "reference", "--json",
                         "--trials", "20")
    doc = json.loads(out)
    assert code == 4 and doc["exit_code"] == 4 and doc["inconclusive"], err
