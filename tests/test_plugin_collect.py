"""The pytest plugin as snapshot-testing users expect (issue 56 item 11): recordings collected from a configured
folder without test code, ini options (replay_impl, replay_device, replay_recordings), and --replay-update, which
writes what the impl emits now as REC.updated beside the recording, never over it."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch  # noqa: F401  (imported before pytester's in-process runs, which drop modules first imported in them)

import replay_harness.api  # noqa: F401
import replay_harness.compare.runner  # noqa: F401
import replay_harness.impls.engine_bug  # noqa: F401
import replay_harness.impls.reference  # noqa: F401
import replay_harness.recording.store  # noqa: F401

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]


def _project(pytester, impl: str = "reference") -> Path:
    recs = pytester.path / "tests" / "recordings"
    for name in ("synthetic-plain", "synthetic-founding"):
        shutil.copytree(REPO / "fixtures" / name, recs / name)
    pytester.makeini(f"[pytest]\nreplay_recordings = tests/recordings\nreplay_impl = {impl}\nreplay_device = cpu\n")
    return recs


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_recordings_are_collected_from_the_ini_folder(pytester):
    _project(pytester)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*synthetic-founding*PASSED*", "*replay: 2 check(s) passed: reference on cpu*"])


def test_the_ini_impl_is_used_and_the_command_line_wins(pytester):
    _project(pytester, impl="greedy-only")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)      # founding: temperature 1.0 under drafts
    result.stdout.fnmatch_lines(["*greedy-only does not replay against recorded on cpu*"])
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--replay-impl", "reference")
    result.assert_outcomes(passed=2)


def test_update_writes_a_new_recording_beside_never_over_the_input(pytester):
    recs = _project(pytester)
    before = _files(recs)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--replay-update", "--replay-impl", "greedy-only")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*--replay-update wrote *synthetic-founding.updated*"])
    assert {k: v for k, v in _files(recs).items() if ".updated" not in k} == before   # inputs untouched
    assert not (recs / "synthetic-plain.updated").exists()   # greedy-only answers plain steps as recorded
    from replay_harness.api import compare, load

    updated = recs / "synthetic-founding.updated"
    assert load(updated).manifest["source"]["updated_from"] == "tests/recordings/synthetic-founding"
    cmp = compare(updated, "greedy-only", device="cpu")   # its tokens are greedy-only's (its routes stay wrong)
    assert cmp.tokens_matched == cmp.tokens_compared > 0 and not cmp.real_divergences
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)                 # the .updated copies are not collected
