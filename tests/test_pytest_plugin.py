"""The pytest11 plugin (replay_harness.testing.pytest_plugin): an engine project's tests pass or fail
as they should, with --replay-impl choosing the impl. Runs pytest on small example projects (pytester)."""
from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
FOUNDING = REPO / "fixtures" / "synthetic-founding"   # temperature 1.0 under drafts: greedy-only diverges
PLAIN = REPO / "replay_harness" / "conformance" / "vectors" / "gumbel-hash"

PROJECT = f'''
from replay_harness.impls.reference import ReferenceSampler

class MySampler(ReferenceSampler):
    name = "my-engine"

def test_recording_replays(replay_check):
    replay_check(r"{FOUNDING}")

def test_my_sampler(replay_check):
    cmp = replay_check(r"{PLAIN}", MySampler())
    assert cmp.tokens_matched == cmp.tokens_compared > 0
'''


def test_plugin_passes_on_a_conforming_project(pytester):
    pytester.makepyfile(test_engine=PROJECT)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_plugin_fails_with_a_broken_impl(pytester):
    pytester.makepyfile(test_engine=PROJECT)
    result = pytester.runpytest("-p", "no:cacheprovider", "--replay-impl", "greedy-only")
    result.assert_outcomes(passed=1, failed=1)   # the explicit MySampler() ignores --replay-impl
    result.stdout.fnmatch_lines(["*greedy-only does not replay against recorded*",
                                 "*routing violation stochastic-verify -> greedy-verify (greedy-only)*"])


def test_plugin_options_are_registered(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--replay-impl=NAME*", "*--replay-impl-arg=ARG*"])
