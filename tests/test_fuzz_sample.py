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
    code, doc, text = fuzz(tmp_path, "--cases", "68", "--seed", "7", "--per-case", "1", "--subprocess-every", "0")
    assert doc["failures"] == [], text
    assert code == 0 and doc["failed"] == 0 and doc["cases"] == 68
    # every kind ran (68 cases rotate over the 20 corruption, 4 attack, 4 command-line and 6 write-path kinds),
    # every read command ran
    assert len(doc["by_kind"]) == 34 and min(doc["by_kind"].values()) == 2
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


# ----------------------------------------------------------------------------- hostile recordings (2026-12-04)
def _with_header(rec: Path, edit) -> Path:
    """Step 0 of ``rec`` rewritten with its JSON header changed by ``edit(header)`` (data bytes kept)."""
    path = rec / "steps" / "step-000000.safetensors"
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    edit(header)
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])
    return path


@pytest.mark.parametrize("case,field,says", [
    ("million-dims", "__header__", "size its header claims"),   # was minutes: a quadratic product of the dims
    ("offset-4000-digits", "__header__", "size its header claims"),  # was exit 3: too many digits to print
    ("dtype-list", None, "truncated or corrupt"),                 # was exit 3: unhashable type 'list'
    ("dtype-U32", "logits", "dtype U32 is not one the format stores"),  # was a bare KeyError, no field
])
def test_hostile_step_headers_are_exit_2_naming_the_field_in_bounded_time(tmp_path, case, field, says):
    import time

    rec = tmp_path / "rec"
    shutil.copytree(REPO / "fixtures" / "synthetic-plain", rec)
    edits = {"million-dims": lambda h: h["logits"].update(shape=[3] * 1_000_000),
             "offset-4000-digits": lambda h: h["logits"].update(data_offsets=[0, 10 ** 4000]),
             "dtype-list": lambda h: h["logits"].update(dtype=["F32"]),
             "dtype-U32": lambda h: h["logits"].update(dtype="U32")}
    _with_header(rec, edits[case])
    t0 = time.perf_counter()
    code, out, err = in_process("validate", str(rec))
    assert time.perf_counter() - t0 < 20
    assert code == 2 and "Traceback" not in err and "internal error" not in out + err, (code, out, err)
    line = next(ln for ln in (out + err).splitlines() if "step-000000" in ln)
    assert says in line and len(line) < 600 and (field is None or f"field '{field}'" in line), line


@pytest.mark.parametrize("value", [[], {}, ["sha256"]])
def test_a_digest_algorithm_that_is_not_a_string_is_refused(tmp_path, value):
    rec = tmp_path / "rec"
    shutil.copytree(REPO / "fixtures" / "synthetic-plain", rec)
    manifest = json.loads((rec / "manifest.json").read_text())
    (rec / "manifest.json").write_text(json.dumps({**manifest, "digest_algorithm": value}))
    code, out, err = in_process("run", str(rec), "--impl", "reference")
    assert code == 2 and "field 'digest_algorithm'" in err, (code, out, err)


def test_a_folder_tree_deeper_than_python_s_recursion_limit_is_searched(tmp_path):
    """Built and removed one level at a time: mkdir(parents=True) and shutil.rmtree recurse themselves (a tree
    left behind would break pytest's cleanup of old temp folders)."""
    import os

    from replay_harness.recording.discover import find_recordings

    deep = tmp_path / "tree"
    folder, levels = deep, 1200
    os.mkdir(deep)
    for _ in range(levels):
        folder = folder / "a"
        os.mkdir(folder)
    try:
        shutil.copytree(REPO / "fixtures" / "synthetic-plain", folder / "rec")
        assert find_recordings([str(deep)]) == [str(folder / "rec")]
    finally:
        shutil.rmtree(folder / "rec", ignore_errors=True)
        for _ in range(levels + 1):
            os.rmdir(folder)
            folder = folder.parent


def test_step_names_with_non_ascii_digits_are_not_steps(tmp_path):
    rec = tmp_path / "rec"
    shutil.copytree(REPO / "fixtures" / "synthetic-plain", rec)
    last = sorted((rec / "steps").iterdir())[-1]
    arabic = "step-" + "".join(chr(0x0660 + int(c)) for c in last.name[5:11]) + ".safetensors"
    last.rename(rec / "steps" / arabic)  # ignored, like any other name: the closed manifest now counts one short
    with pytest.raises(InputError) as refused:
        Recording(rec)
    assert refused.value.field == "num_steps"


def test_json_documents_are_strict_json():
    """An infinite decision margin (a draw with no second candidate) was written as `Infinity`."""
    from replay_harness.cli.common import dumps

    text = dumps({"margin": float("inf"), "nested": [float("nan"), 1.5], "ok": True})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {"margin": None, "nested": [None, 1.5],
                                                                         "ok": True}


def test_verify_and_audit_skip_a_draft_logits_row_with_no_distribution(tmp_path):
    """An all -inf draft-logits row passes `validate` (its draft is then never acceptable), but q = softmax of it
    is NaN: verify exited 3 (scipy refused p = nan) and audit reported a finding "expected nan"."""
    import torch
    from safetensors.torch import load_file, save_file

    rec = tmp_path / "rec"
    shutil.copytree(REPO / "fixtures" / "synthetic-draft-logits", rec)
    path = rec / "steps" / "step-000000.safetensors"
    tensors = load_file(str(path))
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    tensors["draft_logits"][0] = float("-inf")
    save_file(tensors, str(path), metadata=meta)
    for command in (("verify", str(rec), "--impl", "reference", "--trials", "40"), ("audit", str(rec))):
        code, out, err = in_process(*command)
        assert code in (0, 1, 4) and "internal error" not in out + err and "nan" not in (out + err).lower(), \
            (command, code, out, err)
