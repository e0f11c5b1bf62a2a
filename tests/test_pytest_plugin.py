"""The pytest11 plugin (replay_harness.testing.pytest_plugin): an engine project's tests pass or fail
as they should, with --replay-impl choosing the impl, and the plugin is as safe as the CLI (issue 66 item 3): a
broken recording is the CLI's one line, a recording edited after close warns as `replay run` does, and
--replay-update writes only what changed, once, with a relative source and never a copy of a copy. Runs pytest on
small example projects (pytester) holding SYNTHETIC fixtures."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch  # imported before pytester's in-process runs, which drop modules first imported in them

import replay_harness.api  # noqa: F401
import replay_harness.compare.runner  # noqa: F401
import replay_harness.impls.engine_bug  # noqa: F401
import replay_harness.impls.reference  # noqa: F401
import replay_harness.recording.store  # noqa: F401

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


# ----------------------------------------------------------------------------- as safe as the CLI (issue 66 item 3)
RUN = ("-p", "no:cacheprovider")
# docs/INTEGRATION.md's parametrized example as it read before it skipped .updated folders: every entry of the folder
ITERDIR_EXAMPLE = '''
from pathlib import Path
import pytest

RECORDINGS = sorted((Path(__file__).parent / "recordings").iterdir())

@pytest.mark.parametrize("rec", RECORDINGS, ids=lambda p: p.name)
def test_engine_sampler_replays(replay_check, rec):
    replay_check(rec)
'''


def _recordings(pytester, *names: str) -> Path:
    """tests/recordings/NAME copies of the SYNTHETIC fixtures, collected through the ini file (device cpu)."""
    recs = pytester.path / "tests" / "recordings"
    for name in names:
        shutil.copytree(REPO / "fixtures" / name, recs / name)
    pytester.makeini("[pytest]\nreplay_recordings = tests/recordings\nreplay_device = cpu\n")
    return recs


def test_a_broken_recording_fails_in_the_cli_s_one_line(pytester):
    recs = _recordings(pytester, "synthetic-plain")
    broken = recs / "broken"
    shutil.copytree(recs / "synthetic-plain", broken)
    step = broken / "steps" / "step-000000.safetensors"
    data = bytearray(step.read_bytes())
    data[10:30] = b"x" * 20                             # the header's JSON, spoiled
    step.write_bytes(bytes(data))
    pytester.makepyfile(test_engine=f"def test_check(replay_check):\n    replay_check(r'{broken}')\n")
    result = pytester.runpytest_inprocess(*RUN)
    result.assert_outcomes(passed=1, failed=2)          # collected and through replay_check alike
    cli = subprocess.run([sys.executable, "-m", "replay_harness.cli", "run", str(broken), "--device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 2 and cli.stderr.startswith("replay: error: ")
    line = cli.stderr.strip().removeprefix("replay: error: ")
    assert "step 0: unreadable safetensors file" in line
    out = result.stdout.lines
    assert out.count(line) == 2, result.stdout.str()    # each failure is the CLI's line, alone
    assert len(out) < 40 and not any("Traceback" in x or "store.py" in x or "During handling" in x for x in out)


def _edit_after_close(path: Path, tmp: Path) -> None:
    """Lower step 0's smallest finite logit and put that step file in place of the recorded one: the tokens stay,
    the content digest no longer matches."""
    from replay_harness.recording.store import Recording, RecordingWriter

    rec = Recording(path)
    first = rec[0]
    row = first.step.logits[0]
    finite = torch.where(torch.isfinite(row), row, torch.full_like(row, float("inf")))
    row[int(finite.argmin())] -= 1.0
    with RecordingWriter(tmp, vocab_size=rec.vocab_size, rng_contract=rec.rng_contract) as w:
        w.write_step(first.step, first.emitted)
    shutil.copyfile(tmp / "steps" / "step-000000.safetensors", path / "steps" / "step-000000.safetensors")


def test_a_recording_edited_after_close_warns_as_run_does(pytester):
    recs = _recordings(pytester, "synthetic-plain")
    _edit_after_close(recs / "synthetic-plain", pytester.path / "scratch")
    result = pytester.runpytest_inprocess(*RUN)
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*ReplayRecordingWarning: replay: warning: *synthetic-plain*manifest.json: field "
                                 "'digest': content digest does not match the steps*"])
    warning = "replay_harness.testing.pytest_plugin.ReplayRecordingWarning"
    result = pytester.runpytest_inprocess(*RUN, "-W", f"error::{warning}")
    result.assert_outcomes(failed=1)                    # asked for, the warning fails the check


def test_update_writes_changed_recordings_once_with_a_relative_source_and_no_copy_of_a_copy(pytester):
    recs = _recordings(pytester, "synthetic-plain", "synthetic-founding")
    pytester.makepyfile(**{"tests/test_replay": ITERDIR_EXAMPLE})   # checks what the ini folder collects, too
    before = sorted(p.name for p in recs.iterdir())
    result = pytester.runpytest_inprocess(*RUN, "--replay-update", "--replay-impl", "greedy-only")
    result.assert_outcomes(passed=4)
    wrote = [x for x in result.stdout.lines if "--replay-update wrote" in x]
    assert len(wrote) == 1 and "synthetic-founding.updated" in wrote[0], wrote   # once, though checked twice
    result.stdout.fnmatch_lines(["*--replay-update: 1 recording(s) unchanged*"])  # greedy-only answers plain alike
    assert sorted(p.name for p in recs.iterdir()) == sorted(before + ["synthetic-founding.updated"])
    manifest = json.loads((recs / "synthetic-founding.updated" / "manifest.json").read_text())
    assert manifest["source"]["updated_from"] == "tests/recordings/synthetic-founding"
    assert manifest["source"]["updated_by"] == "greedy-only"
    # again: the example now also lists synthetic-founding.updated, which is not re-recorded
    result = pytester.runpytest_inprocess(*RUN, "--replay-update", "--replay-impl", "greedy-only")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*--replay-update: 1 .updated folder(s) skipped*"])
    assert sorted(p.name for p in recs.iterdir()) == sorted(before + ["synthetic-founding.updated"])
