"""A saved bench baseline with a failing threshold (issue 66 item 7), and bench's NOISY verdict (item 6).

`replay bench --save-baseline F` then `--compare-baseline F --fail-above 1.10`: on the CPU, an in-process impl
that sleeps a fixed time per call (the reference plus a delay: the sleep dominates, so its timing is steady on
a busy machine) passes against its own baseline and fails, naming the case, once its delay is tripled (an
artificially slowed kernel). An impl whose calls alternate between 10 and 200 ms is too noisy for a verdict:
bench no longer calls it "conclusive", and a baseline comparison is exit 4, neither a pass nor a failure."""
from __future__ import annotations

import json
import time

import pytest

from helpers import main_inproc, write_recording
from replay_harness import impls as registry
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.synthetic import Case

BASE_DELAY_S = 0.08


class Sleepy(ReferenceSampler):
    """The reference, plus ``delay`` seconds of sleep per call."""

    name = "sleepy"
    delay = BASE_DELAY_S

    def sample(self, step):
        time.sleep(type(self).delay)
        return super().sample(step)


class Jumpy(ReferenceSampler):
    """The reference, sleeping 10 ms and 200 ms on alternate calls: a spread of 19x its median."""

    name = "jumpy"
    calls = 0

    def sample(self, step):
        Jumpy.calls += 1
        time.sleep(0.2 if Jumpy.calls % 2 else 0.01)
        return super().sample(step)


@pytest.fixture()
def rec(tmp_path, monkeypatch):
    monkeypatch.setitem(registry._registered, "sleepy", Sleepy)
    monkeypatch.setitem(registry._registered, "jumpy", Jumpy)
    monkeypatch.setattr(Sleepy, "delay", BASE_DELAY_S)
    case = Case("tiny", vocab_size=50, num_requests=3, max_drafts=0, steps=3, temperatures=(1.0,))
    return write_recording(tmp_path / "tiny", case)


def bench(rec, impl, *extra):
    return main_inproc("bench", str(rec), "--impl", impl, "--device", "cpu", "--repeats", "5", "--warmup", "1",
                       "-q", *extra)


def test_a_slowed_impl_fails_its_baseline_naming_the_case_and_the_unchanged_one_passes(rec, tmp_path):
    base = tmp_path / "base.json"
    code, out, err = bench(rec, "sleepy", "--save-baseline", str(base))
    assert code == 0, out + err
    doc = json.loads(base.read_text())
    assert doc["schema"] == "replay.bench-baseline/1" and [c["case"] for c in doc["cases"]] == \
        ["A: tiny#0", "A: tiny#1", "A: tiny#2"]
    code, out, err = bench(rec, "sleepy", "--compare-baseline", str(base), "--fail-above", "1.10")
    assert code == 0, out + err
    assert "3 case(s) compared, none above --fail-above 1.1" in out.splitlines()[-1]
    Sleepy.delay = 3 * BASE_DELAY_S   # the slowed kernel
    code, out, err = bench(rec, "sleepy", "--compare-baseline", str(base), "--fail-above", "1.10")
    assert code == 1, out + err
    last = out.splitlines()[-1]
    assert last.startswith("REGRESSION (exit 1): 3 of 3 case(s) above --fail-above 1.1: A: tiny#0 (")
    assert "REGRESSED" in out


def test_the_json_document_carries_the_comparison(rec, tmp_path):
    base = tmp_path / "base.json"
    assert bench(rec, "sleepy", "--save-baseline", str(base))[0] == 0
    Sleepy.delay = 3 * BASE_DELAY_S
    code, out, _ = bench(rec, "sleepy", "--compare-baseline", str(base), "--fail-above", "1.10", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["exit_code"] == 1
    assert doc["baseline"]["regressed"] == ["A: tiny#0", "A: tiny#1", "A: tiny#2"]
    assert all(c["ratio"] > 2 for c in doc["baseline"]["cases"])


def test_noisy_timings_are_not_called_conclusive_and_cannot_pass_or_fail_a_baseline(rec, tmp_path):
    code, out, err = bench(rec, "jumpy")
    assert code == 0, out + err   # the path under test ran: not inconclusive
    assert "verdict: NOISY" in out and "verdict: conclusive" not in out and "jumpy: the timed calls" in out
    code, out, _ = bench(rec, "jumpy", "--json")
    verdict = json.loads(out)["verdict"]
    assert verdict["conclusive"] and verdict["timing"] == "noisy" and verdict["verdict"] == "noisy"
    base = tmp_path / "base.json"
    assert bench(rec, "sleepy", "--save-baseline", str(base))[0] == 0
    code, out, _ = bench(rec, "jumpy", "--compare-baseline", str(base), "--fail-above", "1.10")
    assert code == 4 and "INCONCLUSIVE (exit 4): the timings are NOISY" in out.splitlines()[-1]


@pytest.mark.parametrize("content, message", [("not json", "not a JSON document"),
                                              ('{"schema": "other"}', "not a bench baseline"),
                                              ('{"schema": "replay.bench-baseline/1", "cases": [{}]}', "cases")])
def test_a_bad_baseline_is_one_line_exit_2_before_any_work(rec, tmp_path, content, message):
    base = tmp_path / "base.json"
    base.write_text(content)
    start = time.monotonic()
    code, out, err = bench(rec, "sleepy", "--compare-baseline", str(base), "--fail-above", "1.1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err and str(base) in err
    assert time.monotonic() - start < 5 * BASE_DELAY_S * 3   # refused before timing anything
    code, _, err = bench(rec, "sleepy", "--fail-above", "1.1")
    assert code == 2 and "--fail-above needs --compare-baseline" in err
