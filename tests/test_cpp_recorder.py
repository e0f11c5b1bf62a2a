"""examples/cpp_recorder: the single-header C++ writer records an engine loop; the recording validates
(digest included) and replays exactly against reference."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import cli
from replay_harness.recording.store import Recording

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed: the C++ recorder example cannot be built")
    tmp = tmp_path_factory.mktemp("cpp_recorder")
    exe = tmp / "engine"
    subprocess.run(["g++", "-O1", "-std=c++17", "-ffp-contract=off", "-Wall", "-Werror", "-o", str(exe),
                    str(REPO / "examples" / "cpp_recorder" / "engine.cpp")], check=True)
    out = subprocess.run([str(exe), str(tmp / "rec"), "5"], capture_output=True, text=True, check=True).stdout
    return tmp / "rec", out


def test_recording_validates_with_its_digest(recording):
    rec, out = recording
    code, stdout, err = cli("validate", str(rec))
    assert code == 0 and "5 steps, valid" in stdout and "warning" not in stdout + err
    r = Recording(rec)
    assert r.manifest["complete"] and r.digest() == r.manifest["digest"]
    assert f"recording digest {r.manifest['digest']}" in out
    assert sorted(p.name for p in (rec / "steps").iterdir()) == [f"step-{i:06d}.safetensors" for i in range(5)]


def test_recording_replays_exactly_against_reference(recording):
    rec, _ = recording
    code, out, err = cli("run", str(rec), "--impl", "reference", "--json")
    assert code == 0, out + err
    assert '"tokens_matched": ' in out and '"near_ties": 0' in out
    r = Recording(rec)
    routes = {int(c) for s in r for c in s.emitted.routes}
    assert routes == {1, 2}  # random-sample and greedy-verify both recorded
