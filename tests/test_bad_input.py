"""Every bad input: one line naming file, step and field; exit 2; no traceback; nothing half-written."""
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from helpers import cli, write_recording
from replay_harness.recording.synthetic import Case

CASE = Case("bad", vocab_size=40, num_requests=3, max_drafts=3, steps=2, temperatures=(0.0, 1.0),
            features=frozenset({"ragged"}))


@pytest.fixture()
def rec(tmp_path):
    return write_recording(tmp_path / "rec", CASE)


def corrupt(rec, fn, step=1):
    """Rewrite step ``step`` with ``fn(tensors)`` applied, keeping its metadata."""
    path = rec / "steps" / f"step-{step:06d}.safetensors"
    with safe_open(str(path), framework="pt") as f:
        meta, t = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    fn(t)
    save_file(t, str(path), metadata=meta)
    return path


def set_item(name, index, value):
    def fn(t):
        t[name] = t[name].clone()
        t[name].view(-1)[index] = value
    return fn


def expect_bad(rec, *fragments, command="run"):
    args = {"run": ["run", str(rec), "--impl", "reference"], "validate": ["validate", str(rec)],
            "inspect": ["inspect", str(rec)]}[command]
    code, out, err = cli(*args)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = [ln for ln in err.strip().splitlines() if ln] if command != "validate" else \
        [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert lines, (out, err)
    line = lines[0]
    if command != "validate":
        assert len(lines) == 1, err
    for frag in fragments:
        assert frag in line, (frag, line)
    return line


BAD_STEPS = {
    "wrong dtype": (lambda t: t.__setitem__("cu_num_logits", t["cu_num_logits"].long()), "cu_num_logits",
                    "wrong dtype int64"),
    "shape mismatch": (lambda t: t.__setitem__("logits", t["logits"][:-1]), "cu_num_logits", "shape mismatch"),
    "non-monotonic": (set_item("cu_num_logits", 2, 0), "cu_num_logits", "not strictly increasing"),
    "draft id >= vocab": (set_item("draft_token_ids", 0, 40), "draft_token_ids", "outside [-1, 40)"),
    "NaN logits": (set_item("logits", 5, float("nan")), "logits", "NaN"),
    "negative temperature": (set_item("temperature", 1, -0.5), "temperature", "must be finite and >= 0"),
    "NaN temperature": (set_item("temperature", 0, float("nan")), "temperature", "nan"),
    "top_p zero": (set_item("top_p", 0, 0.0), "top_p", "outside (0, 1]"),
    "top_p > 1": (set_item("top_p", 2, 1.5), "top_p", "outside (0, 1]"),
    "top_k negative": (set_item("top_k", 0, -3), "top_k", "negative"),
    # schema minor 2 (docs/FIXTURES.md, "The sampling pipeline"): the bad inputs and a rule's missing partner
    "penalty without history": (lambda t: t.__setitem__("frequency_penalty", torch.ones(t["temperature"].shape)),
                                "frequency_penalty", "needs output_token_ids"),
    "bias id outside V": (lambda t: t.update(_ragged(t, "logit_bias_ids", [3, 40], cu="cu_logit_bias"),
                                             logit_bias_values=torch.tensor([1.0, 2.0])),
                          "logit_bias_ids", "id 40 is outside [0, 40)"),
    "bitmask width": (lambda t: t.update(grammar_bitmask=torch.full((t["logits"].shape[0], 3), -1, dtype=torch.int32),
                                         has_grammar=torch.ones(t["temperature"].shape, dtype=torch.int8)),
                      "grammar_bitmask", "ceil(V/32) words"),
    "history over the limit": (lambda t: t.update(_ragged(t, "output_token_ids", [1] * 5000),
                                                  min_tokens=torch.zeros(t["temperature"].shape, dtype=torch.int32)),
                               "output_token_ids", "over the limit of 4,096 tokens"),
    "negative repetition penalty": (lambda t: t.update(
        **_ragged(t, "output_token_ids", [1]), **_ragged(t, "prompt_token_ids", [2]),
        repetition_penalty=torch.full(t["temperature"].shape, -1.0)), "repetition_penalty", "must be finite and > 0"),
    "reserved name": (lambda t: t.__setitem__("allowed_token_mask", torch.ones(3)), "allowed_token_mask",
                      "did not adopt"),
    # a warning (an unknown name) never ends the checks after it (the fuzzer's cases 1804 and 3062 of 2026-12-08:
    # a garbled name beside a wrong shape, or beside a ragged list whose partner's name was garbled)
    "unknown name and a wrong shape": (lambda t: t.update(emitted_routes=torch.zeros(0, dtype=torch.int8),
                                                          some_garbled_name=torch.ones(2)),
                                       "emitted_routes", "expected [3]"),
    "unknown name and a lone ragged list": (lambda t: t.update(prompt_token_ids=torch.tensor([1], dtype=torch.int32),
                                                               cu_prompt_token_97s=torch.zeros(4, dtype=torch.int32)),
                                            "cu_prompt_token_ids", "come together"),
}


def _ragged(t: dict, name: str, first: list[int], cu: str | None = None) -> dict:
    """A ragged list whose first request holds ``first`` and the others nothing."""
    r = t["temperature"].numel()
    return {name: torch.tensor(first, dtype=torch.int32),
            cu or "cu_" + name: torch.tensor([0] + [len(first)] * r, dtype=torch.int32)}


@pytest.mark.parametrize("name", list(BAD_STEPS))
@pytest.mark.parametrize("command", ["run", "validate"])
def test_bad_step(rec, name, command, monkeypatch):
    monkeypatch.setenv("REPLAY_MAX_HISTORY", "4096")
    fn, field, fragment = BAD_STEPS[name]
    path = corrupt(rec, fn)
    expect_bad(rec, str(path), "step 1", f"field '{field}'", fragment, command=command)


def test_nan_can_be_a_warning(rec):
    corrupt(rec, set_item("logits", 5, float("nan")))
    code, out, _ = cli("validate", str(rec), "--nan", "warn")
    assert code == 0 and "warning:" in out and "NaN" in out


def test_verify_takes_nan_like_run(rec):
    """verify reads logits like run: a NaN is an input error naming the field unless --nan warn."""
    corrupt(rec, set_item("logits", 5, float("nan")))
    code, _, err = cli("verify", str(rec), "--steps", "1", "--trials", "2", "--device", "cpu", "--quiet")
    assert code == 2 and "logits" in err and "NaN" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = cli("verify", str(rec), "--steps", "1", "--trials", "2", "--device", "cpu", "--quiet",
                       "--nan", "warn")
    assert code in (0, 1, 4) and "internal error" not in err, (code, err)


def test_missing_path(tmp_path):
    code, _, err = cli("run", str(tmp_path / "nope"))
    assert code == 2 and "no such file" in err and len(err.strip().splitlines()) == 1


def test_truncated_safetensors(rec):
    path = rec / "steps" / "step-000001.safetensors"
    path.write_bytes(path.read_bytes()[:200])
    expect_bad(rec, str(path), "step 1", "truncated")


def test_not_a_recording(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "manifest.json").write_text('{"schema": "something.else/1"}')
    code, _, err = cli("inspect", str(tmp_path / "x"))
    assert code == 2 and "not a replay recording" in err and "field 'schema'" in err


@pytest.mark.parametrize("command", ["run", "inspect", "validate"])
def test_unknown_schema_major(rec, command):
    m = json.loads((rec / "manifest.json").read_text())
    m["schema"] = "replay.recording/2"
    (rec / "manifest.json").write_text(json.dumps(m))
    code, _, err = cli(*(["run", str(rec)] if command == "run" else [command, str(rec)]))
    assert code == 2 and "unknown schema major version '2'" in err


def test_unknown_step_schema_major(rec):
    def fn(t):
        pass
    path = rec / "steps" / "step-000000.safetensors"
    with safe_open(str(path), framework="pt") as f:
        t = {k: f.get_tensor(k) for k in f.keys()}
    save_file(t, str(path), metadata={"replay": json.dumps({"schema": "replay.step/9", "step": 0})})
    expect_bad(rec, str(path), "step 0", "unknown schema major version '9'")


def test_unknown_impl_lists_known(rec):
    code, _, err = cli("run", str(rec), "--impl", "nope")
    assert code == 2 and "known impls:" in err and "reference" in err and "greedy-only" in err


def test_usage_error_exit_2():
    code, _, err = cli("run")
    assert code == 2 and "Traceback" not in err


@pytest.mark.parametrize("command", ["run", "inspect"])
def test_fifo_step_refused(rec, command):
    """A FIFO in place of a step file: exit 2 at once, naming it (issue 16; it used to hang every command)."""
    import os

    path = rec / "steps" / "step-000001.safetensors"
    path.unlink()
    os.mkfifo(path)
    expect_bad(rec, "step-000001.safetensors", "step 1", "not a regular file (a FIFO)", command=command)


def test_validate_many_reports_each_recording_and_exits_2_when_one_is_bad(rec, tmp_path):
    good = write_recording(tmp_path / "good", CASE)
    path = corrupt(rec, set_item("top_p", 2, 1.5))
    code, out, err = cli("validate", str(good), str(rec))
    assert code == 2 and "Traceback" not in out + err, (out, err)
    assert f"{good}: 2 steps, valid" in out and f"{rec}: 2 steps, 1 violation(s)" in out
    assert f"error: {path}: step 1: field 'top_p'" in out
    code, out, err = cli("validate", str(good), str(tmp_path / "nowhere"))
    assert code == 2 and out == ""
    assert err.strip() == f"replay: error: {tmp_path / 'nowhere'}: no such file or directory"
