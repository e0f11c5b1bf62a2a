"""Small gaps (issue 56 item 10): `replay run --steps`, `-h` as `--help` on every command, FAIL rows styled red
(rich drops the colour under NO_COLOR), `--impl` values completing, and a failing pytest check that shows the
message, not the library's frames (``__tracebackhide__``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import main_inproc

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
PLAIN = str(REPO / "fixtures" / "synthetic-plain")
FOUNDING = str(REPO / "fixtures" / "synthetic-founding")
COMMANDS = ["run", "inspect", "validate", "impls", "record", "bench", "synth", "verify", "audit", "conformance",
            "completion"]


def test_run_takes_steps():
    code, out, _ = main_inproc("run", PLAIN, "--steps", "0,2", "--json")
    assert code == 0 and json.loads(out)["recordings"][0]["steps"] == 2
    code, _, err = main_inproc("run", PLAIN, "--steps", "9")
    assert code == 2 and "--steps" in err and err.count("\n") <= 1


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_dash_h_is_help(command):
    code, out, err = main_inproc(*([command] if command else []), "-h")
    assert code == 0 and "Usage" in out, err


def test_fail_rows_are_red():
    from rich.table import Table

    from replay_harness.cli.common import out

    seen = []
    real = out.print
    out.print = lambda *o, **kw: (seen.extend(x for x in o if isinstance(x, Table)), real(*o, **kw))[1]
    try:
        code, _, _ = main_inproc("run", FOUNDING, PLAIN, "--impl", "greedy-only")
    finally:
        del out.print
    assert code == 1
    assert [row.style for row in seen[0].rows] == ["bold red", None]   # FAIL, ok


def test_impl_values_complete(tmp_path):
    env = {**os.environ, "_REPLAY_COMPLETE": "complete_bash", "COMP_WORDS": "replay run --impl gr", "COMP_CWORD": "3"}
    p = subprocess.run([sys.executable, "-c", "from replay_harness.cli import entry; entry()"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert {"greedy-only"} <= set(p.stdout.split()) and "reference" not in p.stdout, p.stdout + p.stderr


def test_a_failing_check_hides_the_library_frames(pytester):
    pytester.makepyfile(test_engine=f'''
def test_fails(replay_check):
    replay_check(r"{FOUNDING}", "greedy-only")
''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "does not replay against recorded" in text
    assert "replay_harness/api.py" not in text and "pytest_plugin.py" not in text, text
