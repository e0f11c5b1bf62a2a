"""One device default, ``auto``, on every surface (issue 56 item 2): the CLI, the Python API and the pytest plugin,
and every report says which device ran. Without CUDA, auto is the CPU and the reports say "cpu"; with
torch.cuda.is_available patched to True the API and the plugin pick cuda (the replay itself is stubbed: no kernel
runs, nothing touches a GPU)."""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch

from helpers import main_inproc

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
PLAIN = REPO / "fixtures" / "synthetic-plain"
FOUNDING = REPO / "fixtures" / "synthetic-founding"
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what auto does without CUDA")


def test_every_surface_defaults_to_auto():
    from replay_harness import api
    from replay_harness.testing import pytest_plugin

    for fn in (api.replay, api.compare, api.assert_replays):
        assert inspect.signature(fn).parameters["device"].default == "auto", fn.__name__
    seen = {}

    class Group:
        def addoption(self, name, **kw):
            seen[name] = kw.get("default")

    class Parser:
        def getgroup(self, *a, **kw):
            return Group()

        def addini(self, name, *a, **kw):
            seen[name] = kw.get("default")

    pytest_plugin.pytest_addoption(Parser())
    assert seen["--replay-device"] in ("auto", None)   # None: the ini option's default (auto) applies


@no_cuda
def test_auto_is_cpu_without_cuda_and_the_reports_say_so():
    from replay_harness.api import assert_replays, compare

    cmp = compare(PLAIN, "reference")
    assert cmp.device == "cpu"
    with pytest.raises(AssertionError, match=r"does not replay against recorded on cpu:"):
        assert_replays(FOUNDING, "greedy-only")
    code, out, _ = main_inproc("run", str(PLAIN), "--impl", "reference", "--json")
    assert code == 0 and json.loads(out)["device"] == "cpu"
    code, out, _ = main_inproc("run", str(PLAIN), "--impl", "reference", COLUMNS="200")
    assert code == 0 and "on cpu" in out.splitlines()[0] and "PASS: reference against recorded on cpu:" in out


def _stub_replay(monkeypatch) -> list:
    """torch sees a GPU; the replay is a stub that records the device it was given (no kernel, no GPU)."""
    from replay_harness.compare import runner
    from replay_harness.compare.diff import Comparison

    devices = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def fake_run_recording(rec, sampler, against, device, *a, **kw):
        devices.append(device)
        return Comparison(steps=len(rec))

    monkeypatch.setattr(runner, "run_recording", fake_run_recording)
    return devices


def test_api_picks_cuda_when_torch_sees_one(monkeypatch):
    from replay_harness.api import compare

    devices = _stub_replay(monkeypatch)
    cmp = compare(PLAIN, "reference")
    assert [d.type for d in devices] == ["cuda"] and cmp.device == "cuda"


def test_plugin_picks_cuda_when_torch_sees_one(monkeypatch, pytester):
    devices = _stub_replay(monkeypatch)
    pytester.makepyfile(test_engine=f'''
def test_replays(replay_check):
    assert replay_check(r"{PLAIN}").device == "cuda"
''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert [d.type for d in devices] == ["cuda"]
    result.stdout.fnmatch_lines(["*replay: 1 check(s) passed: reference on cuda*"])


@no_cuda
def test_plugin_reports_the_cpu_without_cuda(pytester):
    pytester.makepyfile(test_engine=f'''
def test_replays(replay_check):
    replay_check(r"{PLAIN}")

def test_fails(replay_check):
    replay_check(r"{FOUNDING}", "greedy-only")
''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*greedy-only does not replay against recorded on cpu:*"])
    result.stdout.fnmatch_lines(["*replay: 1 check(s) passed: reference on cpu*"])
