"""No silent pass (issue 54, item 1): a run whose stochastic tokens could not be compared (RNG contracts
differ) is INCONCLUSIVE on every surface (Comparison, `replay run` exit 4, the Python API, the pytest
plugin), with the count of tokens not compared, unless routes-only was asked for by name."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from helpers import cli
from replay_harness.api import InconclusiveReplay, assert_replays, compare
from replay_harness.impls.reference import ReferenceSampler

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
MIXED = REPO / "fixtures" / "synthetic-mixed"
GREEDY = REPO / "fixtures" / "real-greedy"


class PositionBlind:
    """A sampler written from docs/INTEGRATION.md alone: ``sample(step)`` and nothing else (so its RNG
    contract is "unknown"), with noise keyed without the position (every position at 0)."""

    name = "position-blind"

    def sample(self, step):
        import dataclasses

        return ReferenceSampler().sample(dataclasses.replace(step, positions=torch.zeros_like(step.positions)))


class HonestRoutesOtherRng(ReferenceSampler):
    """Right routes (labelled from the request's parameters), its own RNG contract: position-blind noise."""

    name = "other-rng"
    rng_contract = "my-engine-rng"

    def sample(self, step):
        import dataclasses

        return super().sample(dataclasses.replace(step, positions=torch.zeros_like(step.positions)))


def test_comparison_counts_the_tokens_it_could_not_compare():
    cmp = compare(MIXED, PositionBlind())
    assert cmp.ok and cmp.tokens_not_compared > 0 and cmp.stochastic_skipped > 0
    assert cmp.verdict() == "inconclusive" and cmp.verdict(routes_only=True) == "pass"
    assert cmp.to_dict()["tokens_not_compared"] == cmp.tokens_not_compared and cmp.to_dict()["inconclusive"]
    with pytest.raises(InconclusiveReplay, match=r"INCONCLUSIVE: position-blind on cpu: .* stochastic token\(s\) .* "
                                                 r"not compared .*replay verify"):
        assert_replays(MIXED, PositionBlind())
    assert assert_replays(MIXED, PositionBlind(), routes_only=True).tokens_not_compared > 0
    # an all-greedy recording compares every token whatever the contract: a pass
    assert compare(GREEDY, PositionBlind()).verdict() == "pass"


def test_run_of_an_exec_program_with_another_rng_is_exit_4(tmp_path):
    impl = "exec:" + sys.executable + " -m replay_harness.impls.external_adapter test_no_silent_pass:HonestRoutesOtherRng"
    code, out, err = cli("run", str(MIXED), "--impl", impl, cwd=REPO / "tests")
    assert code == 4, out + err
    assert "INCONCLUSIVE" in out and "not compared" in out and "replay verify" in out
    code, out, err = cli("run", str(MIXED), "--impl", impl, "--routes-only", "--json", cwd=REPO / "tests")
    doc = json.loads(out)
    assert code == 0 and doc["routes_only"] and doc["tokens_not_compared"] > 0 and doc["verdict"] == "PASS"


PROJECT = f'''
import dataclasses
import torch
from replay_harness.impls.reference import ReferenceSampler

class Sampler:  # sample(step) -> SampleResult, as docs/INTEGRATION.md shows; noise without the position
    def sample(self, step):
        return ReferenceSampler().sample(dataclasses.replace(step, positions=torch.zeros_like(step.positions)))

def test_my_sampler(replay_check):
    replay_check(r"{MIXED}", Sampler())

def test_my_sampler_routes_only(replay_check):
    replay_check(r"{MIXED}", Sampler(), routes_only=True)
'''


def test_plugin_never_passes_a_sampler_whose_tokens_were_not_compared(pytester):
    pytester.makepyfile(test_engine=PROJECT)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*INCONCLUSIVE*stochastic token(s)*not compared*replay verify*"])
    result = pytester.runpytest("-p", "no:cacheprovider", "--replay-routes-only")
    result.assert_outcomes(passed=2)
