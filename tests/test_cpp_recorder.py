"""examples/cpp_recorder: the single-header C++ writer records an engine loop; the recording validates
(digest included) and replays exactly against reference. pipeline_step.cpp writes the worked example of
docs/FIXTURES.md "The sampling pipeline" (schema minor 2: every pipeline field, the emitted logprobs and kept sets)
from plain C++ containers; it validates and replays too, logprobs and kept sets included."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from helpers import cli
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.schema import OPTIONAL_EMITTED, PIPELINE_FIELDS
from replay_harness.recording.store import Recording, load_step_file

REPO = Path(__file__).resolve().parents[1]


def build(tmp: Path, name: str) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed: the C++ recorder example cannot be built")
    exe = tmp / name
    subprocess.run(["g++", "-O1", "-std=c++17", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(REPO / "examples" / "cpp_recorder" / f"{name}.cpp")], check=True)
    return exe


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cpp_recorder")
    exe = build(tmp, "engine")
    out = subprocess.run([str(exe), str(tmp / "rec"), "5"], capture_output=True, text=True, check=True).stdout
    return tmp / "rec", out


@pytest.fixture(scope="module")
def pipeline_recording(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cpp_pipeline")
    exe = build(tmp, "pipeline_step")
    subprocess.run([str(exe), str(tmp / "rec")], capture_output=True, text=True, check=True)
    return tmp / "rec"


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


def test_a_recording_without_the_pipeline_stays_minor_0(recording):
    rec, _ = recording
    assert json.loads((rec / "manifest.json").read_text())["schema_minor"] == 0


# The worked example of docs/FIXTURES.md "The sampling pipeline", as the page gives its tensors.
I32, I8, F32 = torch.int32, torch.int8, torch.float32
WORKED = {
    "repetition_penalty": torch.tensor([1.5, 1.0]), "frequency_penalty": torch.tensor([0.5, 0.0]),
    "presence_penalty": torch.tensor([0.25, 0.0]), "min_tokens": torch.tensor([0, 3], dtype=I32),
    "has_grammar": torch.tensor([0, 1], dtype=I8), "logprobs": torch.tensor([2, 2], dtype=I32),
    "logprobs_mode": torch.tensor([1, 0], dtype=I8),
    "prompt_token_ids": torch.tensor([1, 2, 4, 4], dtype=I32),
    "cu_prompt_token_ids": torch.tensor([0, 2, 4], dtype=I32),
    "output_token_ids": torch.tensor([5, 3, 1], dtype=I32), "cu_output_token_ids": torch.tensor([0, 2, 3], dtype=I32),
    "allowed_token_ids": torch.tensor([0, 2, 5, 6], dtype=I32),
    "cu_allowed_token_ids": torch.tensor([0, 0, 4], dtype=I32),
    "stop_token_ids": torch.tensor([2], dtype=I32), "cu_stop_token_ids": torch.tensor([0, 0, 1], dtype=I32),
    "bad_words_token_ids": torch.tensor([3, 7, 6, 7], dtype=I32),
    "cu_bad_words_token_ids": torch.tensor([0, 4, 4], dtype=I32),
    "bad_words_lengths": torch.tensor([2, 2], dtype=I32), "cu_bad_words_lengths": torch.tensor([0, 2, 2], dtype=I32),
    "logit_bias_ids": torch.tensor([6], dtype=I32), "logit_bias_values": torch.tensor([1.25]),
    "cu_logit_bias": torch.tensor([0, 1, 1], dtype=I32), "grammar_bitmask": torch.tensor([[0], [0], [77]], dtype=I32),
    "emitted_tokens": torch.tensor([[6, 4], [0, -1]], dtype=I32),
    "emitted_logprob_ids": torch.tensor([[[6, 6, 4], [4, 4, 6]], [[0, 2, 0], [-1, -1, -1]]], dtype=I32),
    "emitted_logprob_ranks": torch.tensor([[1, 1], [2, -1]], dtype=I32),
    "emitted_kept_mask": torch.tensor([[[127], [127]], [[65], [0]]], dtype=I32),
}


def test_the_pipeline_step_holds_every_field_as_the_page_gives_it(pipeline_recording):
    tensors, _ = load_step_file(pipeline_recording / "steps" / "step-000000.safetensors")
    minor2 = {name for name in PIPELINE_FIELDS if name in WORKED} | (set(OPTIONAL_EMITTED) - {"emitted_routes"})
    assert minor2 <= set(tensors), sorted(minor2 - set(tensors))
    for name, want in WORKED.items():
        assert tensors[name].dtype == want.dtype and torch.equal(tensors[name], want), name
    assert json.loads((pipeline_recording / "manifest.json").read_text())["schema_minor"] == 2


def test_the_pipeline_step_validates_and_replays_with_its_logprobs(pipeline_recording):
    code, out, err = cli("validate", str(pipeline_recording))
    assert code == 0 and "1 steps, valid" in out and "warning" not in out + err, out + err
    code, out, err = cli("run", str(pipeline_recording), "--impl", "reference", "--json")
    assert code == 0, out + err
    doc = json.loads(out)
    text = json.dumps(doc)
    assert '"tokens_matched": 3' in text and '"logprob_slots_compared": 3' in text and '"kept_sets_compared": 3' in text


def test_the_pipeline_fields_decide_the_replayed_tokens(pipeline_recording):
    """Each field the C++ writer laid out matters: the reference emits other tokens when one is dropped, so a
    wrong layout (a cu_* off by one, a bit in the wrong word) could not replay as the page says."""
    step = Recording(pipeline_recording)[0].step
    assert ReferenceSampler().sample(step).tokens.tolist() == [[6, 4], [0, -1]]
    for group in (("logit_bias_ids", "logit_bias_values", "cu_logit_bias"),
                  ("bad_words_token_ids", "cu_bad_words_token_ids", "bad_words_lengths", "cu_bad_words_lengths"),
                  ("grammar_bitmask", "has_grammar"), ("repetition_penalty",), ("frequency_penalty",),
                  ("presence_penalty",), ("allowed_token_ids", "cu_allowed_token_ids"),
                  ("min_tokens", "stop_token_ids", "cu_stop_token_ids")):
        changed = ReferenceSampler().sample(dataclasses.replace(step, **{n: None for n in group})).tokens.tolist()
        assert changed != [[6, 4], [0, -1]], group
