"""`replay diff A B` (issue 66 item 7): where two recordings of the same prompts part, by step, request and rule.

A is a SYNTHETIC recording (two steps of synthetic-mixed with the sampling pipeline's inputs, tokens from the
reference); B is A with one change per request of step 1, each the kind of change a new engine build makes:
its sampling parameters, its logits, its drafts, its grammar bitmask, nothing but the emitted token (the
sampler), a logits change within the tolerance and one beyond it that changed no token (drift). Each test
fails when the diff blames the wrong input, misses a parting or reports one that is not there."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from helpers import main_inproc
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.recording_diff import diff_recordings
from replay_harness.recording.store import Emitted, Recording, RecordingWriter
from replay_harness.recording.synthetic import CASES, add_pipeline, random_step

CASE = CASES["synthetic-mixed"]  # 8 requests, ragged drafts, vocabulary 1000


def _steps():
    gen = torch.Generator().manual_seed(7)
    return [add_pipeline(gen, random_step(gen, CASE, i)) for i in range(2)]


def _emitted(step):
    res = ReferenceSampler().sample(step)
    return Emitted(res.tokens.to(torch.int32), res.counts, res.routes)


def _write(path, steps, emitted):
    with RecordingWriter(path, vocab_size=CASE.vocab_size, synthetic=True, source={"synthetic": True}) as w:
        for step, e in zip(steps, emitted):
            w.write_step(step, e)
    return path


def _other_token(e, r):
    e.tokens[r, 0] = (int(e.tokens[r, 0]) + 1) % CASE.vocab_size


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(A, B, {what was changed: request id}) with B's step 1 changed request by request."""
    root = tmp_path_factory.mktemp("diff")
    steps = _steps()
    emitted = [_emitted(s) for s in steps]
    a = _write(root / "a", steps, emitted)
    s1 = steps[1]
    cu = s1.cu_num_logits.tolist()
    ks = [cu[r + 1] - cu[r] - 1 for r in range(s1.num_requests)]
    drafted = next(r for r in range(s1.num_requests) if ks[r] > 0)
    grammar = next(r for r in range(s1.num_requests) if int(s1.has_grammar[r]) and r != drafted)
    plain = [r for r in range(s1.num_requests) if r not in (drafted, grammar)]
    params, logits, sampler, tiny, drift = plain[:5]
    b_step = dataclasses.replace(s1, temperature=s1.temperature.clone(), logits=s1.logits.clone(),
                                 draft_token_ids=s1.draft_token_ids.clone(), grammar_bitmask=s1.grammar_bitmask.clone())
    e1 = _emitted(s1)
    b_step.temperature[params] = float(s1.temperature[params]) + 0.25
    _other_token(e1, params)
    b_step.logits[cu[logits], 3] += 5.0
    _other_token(e1, logits)
    _other_token(e1, sampler)  # same inputs, another token: the sampler's output
    b_step.logits[cu[tiny]] += 1e-5  # within the tolerance: not a difference at all
    low = int(s1.logits[cu[drift]].float().nan_to_num(neginf=1e30).argmin())
    b_step.logits[cu[drift], low] -= 0.5 if torch.isfinite(s1.logits[cu[drift], low]) else 0.0
    row = cu[drafted]
    b_step.draft_token_ids[row] = (int(s1.draft_token_ids[row]) + 1) % CASE.vocab_size
    _other_token(e1, drafted)
    b_step.grammar_bitmask[cu[grammar], 0] ^= 1
    _other_token(e1, grammar)
    b = _write(root / "b", [steps[0], b_step], [emitted[0], e1])
    ids = s1.request_ids.tolist()
    changed = {"params": params, "logits": logits, "sampler": sampler, "tiny": tiny, "drift": drift,
               "drafts": drafted, "pipeline": grammar}
    return a, b, {k: ids[r] for k, r in changed.items()}


def test_each_parting_is_blamed_on_the_input_that_differs(pair):
    a, b, req = pair
    d = diff_recordings(Recording(a), Recording(b))
    parts = {p.request_id: p for p in d.partings}
    expected = {req["params"]: ["sampling-params"], req["logits"]: ["logits"], req["sampler"]: ["sampler"],
                req["drafts"]: ["drafts"], req["pipeline"]: ["pipeline"]}
    assert {q: p.rules for q, p in parts.items()} == expected
    assert all(p.step == 1 and p.kind == "tokens" for p in parts.values())   # step 0 is identical
    assert [x.field for x in parts[req["pipeline"]].inputs] == ["grammar_bitmask"]
    assert [x.field for x in parts[req["drafts"]].inputs] == ["draft_token_ids"]
    assert "row 0, token 3" in parts[req["logits"]].inputs[0].detail   # where the logits differ
    assert not parts[req["sampler"]].inputs
    assert d.drift == {"logits": 1}                          # same tokens, logits beyond the tolerance
    assert req["tiny"] not in parts and req["drift"] not in parts
    assert d.request_steps == 2 * CASE.num_requests and not d.same


def test_identical_recordings_are_the_same_and_a_tighter_tolerance_sees_the_tiny_change(pair):
    a, b, req = pair
    assert diff_recordings(Recording(a), Recording(a)).same
    d = diff_recordings(Recording(a), Recording(b), atol=1e-7, rtol=0.0)
    assert d.drift == {"logits": 2}   # the 1e-5 change too, now beyond the tolerance


def test_the_command_names_request_step_and_rule_and_exits_1(pair):
    a, b, req = pair
    code, out, err = main_inproc("diff", str(a), str(b))
    assert code == 1, err
    line = next(ln for ln in out.splitlines() if ln.startswith(f"request {req['logits']} "))
    assert "parts at step 1" in line and "[logits]" in line and "logits: 1 of" in line
    line = next(ln for ln in out.splitlines() if ln.startswith(f"request {req['sampler']} "))
    assert "[sampler]" in line and "same inputs: the sampler's output differs" in line
    assert out.splitlines()[-1].startswith("DIFFERENT: ") and "5 request(s) part" in out.splitlines()[-1]
    code, out, _ = main_inproc("diff", str(a), str(a))
    assert code == 0 and out.splitlines()[-1].startswith("SAME: ")


def test_json_lists_every_parting_with_its_rules(pair):
    a, b, req = pair
    code, out, _ = main_inproc("diff", str(a), str(b), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["schema"] == "replay.diff/1" and doc["ok"] is False and doc["exit_code"] == 1
    assert sorted(doc["by_rule"].items()) == [("drafts", 1), ("logits", 1), ("pipeline", 1), ("sampler", 1),
                                              ("sampling-params", 1)]
    assert {p["request_id"]: p["rules"] for p in doc["partings"]}[req["params"]] == ["sampling-params"]


def test_a_route_change_with_the_same_tokens_is_a_parting(tmp_path):
    steps = _steps()
    emitted = [_emitted(s) for s in steps]
    a = _write(tmp_path / "a", steps, emitted)
    changed = dataclasses.replace(emitted[1], routes=emitted[1].routes.clone())
    changed.routes[0] = 2 if int(changed.routes[0]) != 2 else 3   # greedy-verify, else stochastic-verify
    b = _write(tmp_path / "b", steps, [emitted[0], changed])
    d = diff_recordings(Recording(a), Recording(b))
    assert [(p.kind, p.step, p.rules) for p in d.partings] == [("route", 1, ["sampler"])]


def test_bad_input_is_one_line_exit_2(tmp_path, pair):
    a, _, _ = pair
    code, out, err = main_inproc("diff", str(a), str(tmp_path / "missing"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "missing" in err
    code, _, err = main_inproc("diff", str(a), str(a), "--atol", "-1")
    assert code == 2 and "--atol" in err


def test_logits_of_another_vocabulary_differ_and_other_rows_are_left_to_the_drafts_rule():
    from replay_harness.recording.recording_diff import _differs

    assert "vocabulary 5 vs 6" in _differs("logits", torch.zeros(2, 5), torch.zeros(2, 6), 1e-3, 1e-2)
    assert _differs("logits", torch.zeros(2, 5), torch.zeros(3, 5), 1e-3, 1e-2) is None   # k differs: drafts
    inf = torch.tensor([[float("-inf"), 1.0]])
    assert _differs("logits", inf, inf.clone(), 1e-3, 1e-2) is None                       # -inf equals -inf
    assert "1 of 2 values" in _differs("logits", inf, torch.tensor([[0.0, 1.0]]), 1e-3, 1e-2)
