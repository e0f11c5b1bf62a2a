"""The CI recipe for an engine with its own RNG (docs/QUICKSTART.md, "CI for an engine with its own RNG"):
examples/engine_ci/test_engine.py, run by pytest as a user runs it, passes on the correct fake engine and
fails on the two held-out bugs, each failure naming its mechanism, through the plugin's replay_verify and
replay_audit fixtures."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "engine_ci" / "test_engine.py"


def _pytest(bug: str, tmp_path: Path) -> tuple[int, str]:
    env = {**os.environ, "ENGINE_BUG": bug}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                        str(tmp_path / "base"), str(EXAMPLE)], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=900)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("bug, names", [
    ("", None),
    ("greedy-at-temperature", ["verify FAIL: my-engine at 400 trials: temperature (temperature applied",
                               "audit FAIL: greedy-at-temperature"]),
    ("position-blind", ["verify FAIL: my-engine at 400 trials: position-noise (noise keyed by position",
                        "audit FAIL: reused-noise"]),
])
def test_the_example_passes_the_engine_and_fails_each_bug_by_name(bug, names, tmp_path):
    code, out = _pytest(bug, tmp_path)
    if names is None:
        assert code == 0 and "2 passed" in out, out
        return
    assert code == 1 and "2 failed" in out, out
    for name in names:
        assert name in out, out
    assert "Traceback" not in out  # one message per failure, no harness frames


pytest_plugins = ["pytester"]


def test_replay_verify_on_a_missing_recording_is_one_line(pytester):
    pytester.makepyfile(test_x='''
def test_verify(replay_verify):
    replay_verify("no/such/recording", "reference", trials=4)

def test_audit(replay_audit):
    replay_audit("no/such/recording")
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")  # Triton loads once per process
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert "Traceback" not in text and text.count("no/such/recording") >= 2, text


def test_replay_verify_is_inconclusive_where_trials_are_too_few(pytester):
    pytester.makepyfile(test_x=f'''
def test_verify(replay_verify):
    replay_verify(r"{REPO / "fixtures" / "real-mixed"}", "reference", trials=4)
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")  # Triton loads once per process
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*verify INCONCLUSIVE: reference at 4 trials: no power for temperature*"])
