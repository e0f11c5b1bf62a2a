"""`replay conformance` from a non-editable install (issue 56 item 1): the wheel carries the conformance vectors.

Builds the wheel from a copy of the sources (nothing written into the clone), installs it with ``pip install
--no-deps --target DIR`` (torch and the rest come from the running environment) and runs ``python -m
replay_harness.cli conformance --impl reference`` with ``PYTHONPATH=DIR`` from a folder outside the clone:
the package must find its vectors where it is installed (it looked in the clone's ``fixtures/`` before: exit 2,
"no conformance vectors at ...").
Then the pytest plugin of the same install runs a small project's check and its collected recording, as
docs/INTEGRATION.md's CI recipe does.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "replay_harness", "replay_kernels")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def test_conformance_runs_from_an_installed_wheel(tmp_path):
    src = tmp_path / "src"
    for name in SOURCES:
        p = REPO / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(p, src / name)
    wheels = tmp_path / "wheels"
    r = _run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
              "-w", str(wheels)])
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = wheels.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "replay_harness/conformance/vectors/greedy-ties/manifest.json" in names
    assert sum(n.endswith(".safetensors") and "/vectors/" in n for n in names) >= 13

    target = tmp_path / "site"
    r = _run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)])
    assert r.returncode == 0, r.stderr[-2000:]

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "NO_COLOR": "1"}
    where = _run([sys.executable, "-c", "import replay_harness; print(replay_harness.__file__)"], cwd=outside, env=env)
    assert where.stdout.strip().startswith(str(target)), where.stdout + where.stderr   # the wheel, not the clone
    r = _run([sys.executable, "-m", "replay_harness.cli", "conformance", "--impl", "reference"], cwd=outside, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    from replay_harness.conformance.rules import RULES
    assert f"{len(RULES)}/{len(RULES)} conformance vectors pass" in r.stdout

    # the rest of docs/INTEGRATION.md's CI recipe: the pytest plugin from the installed wheel (entry point pytest11)
    shutil.copytree(REPO / "fixtures" / "synthetic-plain", outside / "tests" / "recordings" / "run-1")
    (outside / "pytest.ini").write_text("[pytest]\nreplay_recordings = tests/recordings\n")
    (outside / "tests" / "test_replay.py").write_text(
        "def test_engine_sampler_replays(replay_check):\n    replay_check('tests/recordings/run-1')\n")
    r = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=outside, env=env)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert "replay: 2 check(s) passed: reference on cpu" in r.stdout
