"""The bench guard per route (issue 54, item 4): on a recording with temperature > 0 requests with drafts,
a side whose stochastic-verify route never ran for them is INCONCLUSIVE (exit 4), even when its plain
requests did sample (random-sample used to count as "the sampling path ran")."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from helpers import cli
from replay_harness.bench.coverage import SideCoverage, missed_routes

REPO = Path(__file__).resolve().parents[1]


def test_missed_routes_counts_requests_that_expected_a_stochastic_route():
    cov = SideCoverage(requests=5, requests_by_route=Counter({"greedy-verify": 3, "random-sample": 2}),
                       violations=Counter({"stochastic-verify -> greedy-verify": 3}))
    assert missed_routes(cov) == [("stochastic-verify", 3, "greedy-verify 3")]
    cov.requests_by_route["stochastic-verify"] = 1  # the route ran for some: the path was exercised
    assert missed_routes(cov) == []
    unknown = SideCoverage(requests=2, violations=Counter({"stochastic-verify -> unknown": 2}))
    assert missed_routes(unknown) == []  # routes not reported: not counted either way


def test_bench_greedy_only_on_a_mixed_recording_is_exit_4():
    code, out, err = cli("bench", str(REPO / "fixtures" / "real-mixed"), "--impl", "greedy-only", "--device", "cpu",
                         "--repeats", "1", "--warmup", "0")
    assert code == 4, out + err
    assert "INCONCLUSIVE" in out and "stochastic-verify path never ran" in out.replace("\n", " ")
