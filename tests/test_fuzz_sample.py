"""The corrupted-recording fuzz driver (tools/fuzz_recordings.py, docs/HARDENING.md) in CI: a small seeded
sample finds nothing, and the driver does report each kind of failure, so a fuzz run can fail.

The 10,000-case run is in docs/HARDENING.md; this is its smoke test (~40 cases, one worker, ~10 s).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import main_inproc
from replay_harness.errors import InputError
from replay_harness.recording.store import Recording

REPO = Path(__file__).resolve().parent.parent
DRIVER = REPO / "tools" / "fuzz_recordings.py"


def fuzz(tmp_path: Path, *args: str, timeout: float = 120) -> tuple[int, dict, str]:
    out = tmp_path / "fuzz.json"
    proc = subprocess.run([sys.executable, str(DRIVER), "--workers", "1", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)
    return proc.returncode, json.loads(out.read_text()), proc.stdout + proc.stderr


def test_a_seeded_sample_of_corrupted_recordings_fails_nothing(tmp_path):
    code, doc, text = fuzz(tmp_path, "--cases", "48", "--seed", "7", "--per-case", "1", "--subprocess-every", "0")
    assert doc["failures"] == [], text
    assert code == 0 and doc["failed"] == 0 and doc["cases"] == 48
    # every kind ran (48 cases rotate over the 20 corruption and 4 attack kinds), every read command ran
    assert len(doc["by_kind"]) == 24 and min(doc["by_kind"].values()) == 2
    assert {"validate", "inspect", "run", "audit", "bench"} <= set(doc["by_command"])
    assert doc["forged_lines"] == doc["orphans"] == doc["modified_inputs"] == 0
    # bad input was refused as bad input, and the controls passed
    assert doc["exit_codes_by_kind"]["valid"] == {"0": 2}
    refused = ("fifo-in-place", "oversize-manifest", "sparse-oversize", "truncated-step")
    for kind in refused + (("unreadable",) if doc["permission_checks"] else ()):  # root keeping CAP_DAC_OVERRIDE
        assert set(doc["exit_codes_by_kind"][kind]) == {"2"}, (kind, doc["exit_codes_by_kind"][kind])
    assert doc["max_rss_grown_kb"] <= doc["rss_bound_kb"]


def test_the_driver_reports_each_kind_of_failure(tmp_path):
    """Deliberately broken commands (tools/fuzz/worker.py, selftest-*) on one case: a write into the
    input, an escaped exception, an internal error (exit 3), memory past the bound and a hang must each
    be reported, and make the run exit 1."""
    # case 19 (kind "valid") starts the rotation at the 2nd command: modify, raise, exit3, memory, forged, then hang
    commands = "selftest-hang,selftest-modify,selftest-raise,selftest-exit3,selftest-memory,selftest-forged"
    code, doc, text = fuzz(tmp_path, "--only", "19", "--commands", commands, "--per-case", "6",
                           "--subprocess-every", "0", "--timeout", "4")
    assert code == 1, text
    by_command = {f["command"]: set(f["problems"]) for f in doc["failures"]}
    assert "modified" in by_command["selftest-modify"]
    assert "traceback" in by_command["selftest-raise"]
    assert {"exit-3", "internal-error"} <= by_command["selftest-exit3"]
    assert "rss" in by_command["selftest-memory"]
    assert "hang" in by_command["selftest-hang"]
    assert "forged-line" in by_command["selftest-forged"]
    assert doc["hangs"] == 1 and doc["tracebacks"] == 1 and doc["modified_inputs"] == 1 and doc["rss_over_bound"] == 1


# ----------------------------------------------------------------------------- what the fuzz run found
@pytest.mark.parametrize("source", [float("nan"), 1.5, "engine", [], True])
def test_a_manifest_source_that_is_not_an_object_is_refused_on_open(tmp_path, source):
    """Fuzz case 7343 of seed 1 (`source: NaN`): `replay bench` looked a key up in it and exited 3
    ("internal error: AttributeError: 'float' object has no attribute 'get'"). Now every reader refuses it."""
    rec = tmp_path / "rec"
    shutil.copytree(REPO / "fixtures" / "synthetic-plain", rec)
    manifest = json.loads((rec / "manifest.json").read_text())
    manifest["source"] = source
    (rec / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError) as refused:
        Recording(rec)
    assert refused.value.field == "source" and "must be a JSON object" in str(refused.value)
    code, out, err = in_process("bench", str(rec), "--impl", "reference", "--device", "cpu", "--repeats", "1",
                                "--warmup", "0")
    assert code == 2 and err.count("\n") == 1 and "field 'source'" in err, (code, err)


def in_process(*args: str) -> tuple[int, str, str]:
    """`replay ARGS` through cli.main() in this process: (exit code, stdout, stderr)."""
    return main_inproc(*args)
