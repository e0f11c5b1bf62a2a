"""`replay record`'s verification-method options (docs/RECORDING.md, "Verification methods"): --verify-method with
FLy's window, entropy threshold and top-k (cycled over the requests), --draft-sampling and --rng-contract reach every
recorded step, probabilistic drafts are the contract drafter's, and the recordings replay through the reference; the
committed fixtures fixtures/real-method-* replay through the reference, their method decides tokens, and the kernels
(--impl stochastic) replay the block, FLy and fp64 ones and refuse trees by name; bad option values are one line, exit 2.

Recording tests decode with the SYNTHETIC tiny random Llama of tests/tiny_model.py (2 layers: the early-exit
drafter runs 1). The committed fixtures were recorded from SmolLM2-135M by tools/make_method_fixtures.py.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
import torch

from helpers import load_tool, main_inproc
from tiny_model import save_tiny_llama

from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.drafts import derive_drafts, draft_noise_diagnosis
from replay_harness.oracle.walk import argmax_first
from replay_harness.recording.store import Recording

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parent.parent
PROMPTS = ("abc abc abc", "12, 12, 12", "cab cab")
ARGS = ["--steps", "3", "--seed", "5,6,7", "--temperature", "1,0,0.8", "--drafter", "early-exit", "--num-drafts", "3",
        "--no-stop-at-eos", "--verify-method", "block,fly,fly", "--fly-window", "1,2", "--fly-entropy-threshold",
        "0.25", "--fly-entropy-top-k", "4,2,3", "--draft-sampling", "probabilistic"]
# what each request gets (request i takes value i mod n)
WANT = {"verify_method": [1, 2, 2], "fly_window": [1, 2, 1], "fly_entropy_threshold": [0.25] * 3,
        "fly_entropy_top_k": [4, 2, 3], "draft_sampling": [1, 1, 1]}
FIXTURES = ("real-method-block", "real-method-fly", "real-method-probabilistic", "real-method-fp64")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


def _record(tiny: Path, out: Path, *args: str) -> dict:
    code, stdout, err = main_inproc("record", *PROMPTS, "--model", str(tiny), *args, "--out", str(out), "--json",
                                    "--quiet")
    assert code == 0, err
    return json.loads(stdout)


def _drafts(step, r: int) -> list[int]:
    return step.draft_token_ids[int(step.cu_num_logits[r]):int(step.cu_num_logits[r + 1]) - 1].tolist()


def _tokens(result) -> list[list[int]]:
    return [result.tokens[r, :int(result.counts[r])].tolist() for r in range(result.tokens.shape[0])]


def _replays(path: Path, impl: str = "reference") -> dict:
    code, stdout, err = main_inproc("run", str(path), "--impl", impl, "--against", "recorded", "--json")
    doc = json.loads(stdout)["recordings"][0]
    assert code == 0 and doc["tokens_matched"] == doc["tokens_compared"] > 0, (err, doc)
    return doc


@pytest.fixture(scope="module")
def recorded(tiny, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("rec") / "rec"
    return {"out": out, "summary": _record(tiny, out, *ARGS), "records": list(Recording(out))}


def test_the_methods_reach_every_step_per_request(recorded):
    assert len(recorded["records"]) == 3
    for record in recorded["records"]:
        step = record.step
        for name, want in WANT.items():
            assert getattr(step, name).tolist() == pytest.approx(want), (record.index, name)
        assert step.rng_contract == "mrv2" and step.draft_logits is not None
    source = json.loads((recorded["out"] / "manifest.json").read_text())["source"]
    assert [r["verify_method"] for r in source["requests"]] == ["block", "fly", "fly"]
    assert "fly_window" not in source["requests"][0] and source["requests"][2]["fly_entropy_top_k"] == 3
    assert source["draft_sampling"] == "probabilistic" and "2**30" in source["drafter"]["sampling"]


def test_probabilistic_drafts_are_the_contract_drafters(recorded):
    """Stochastic requests: each draft is the Gumbel-max of draft_logits / T with the noise of (seed, position +
    2**30) (a drafter without the salt, or with torch's generator, draws others); greedy ones: the argmax."""
    salted = 0
    for record in recorded["records"]:
        step = record.step
        for r in range(step.num_requests):
            drafts = _drafts(step, r)
            assert len(drafts) == 3
            if float(step.temperature[r]) == 0:
                d_idx = step.draft_row_index()
                rows = range(int(step.cu_num_logits[r]), int(step.cu_num_logits[r + 1]) - 1)
                assert drafts == [argmax_first(step.draft_logits[int(d_idx[j])]) for j in rows]
            else:
                assert draft_noise_diagnosis(step, r) is None and drafts == derive_drafts(step, r)
                salted += drafts != derive_drafts(step, r, salt=0)
    assert salted > 0  # some draft tells the salted draw from the unsalted one


def test_the_recording_validates_and_replays_through_the_reference(recorded):
    assert main_inproc("validate", str(recorded["out"]))[0] == 0
    doc = _replays(recorded["out"])
    assert doc["tokens_compared"] == recorded["summary"]["emitted"]


def test_greedy_draft_sampling_records_argmax_drafts_without_logits_and_fp64_replays(tiny, tmp_path):
    """--draft-sampling greedy: the argmax whatever the temperature, verified one-hot (no draft logits), as vLLM's
    greedy drafts; the same drafts as probabilistic drafting at temperature 0. --rng-contract mrv2-fp64: the
    manifest says it, the loop samples with it (the replay, which follows the manifest, matches)."""
    common = ["--steps", "3", "--seed", "3,4,5", "--drafter", "early-exit", "--num-drafts", "2", "--no-stop-at-eos"]
    _record(tiny, tmp_path / "greedy", *common, "--temperature", "1", "--draft-sampling", "greedy", "--rng-contract",
            "mrv2-fp64")
    _record(tiny, tmp_path / "argmax", *common, "--temperature", "0", "--draft-sampling", "probabilistic")
    greedy, argmax = Recording(tmp_path / "greedy"), Recording(tmp_path / "argmax")
    assert greedy.rng_contract == "mrv2-fp64" and argmax.rng_contract == "mrv2"
    first = greedy[0].step
    assert first.draft_logits is None and first.draft_sampling.tolist() == [0, 0, 0] and first.verify_method is None
    assert [_drafts(first, r) for r in range(3)] == [_drafts(argmax[0].step, r) for r in range(3)]
    doc = _replays(tmp_path / "greedy")
    assert doc["tokens_compared"] >= 9


def test_without_the_options_the_steps_carry_no_method_fields(tiny, tmp_path):
    _record(tiny, tmp_path / "plain", "--steps", "1", "--seed", "1,2,3", "--drafter", "early-exit")
    step = Recording(tmp_path / "plain")[0].step
    assert (step.verify_method, step.fly_window, step.draft_sampling) == (None, None, None)
    assert step.draft_logits is not None  # the drafter's own draws, as before


BAD_BEFORE_LOAD = [
    (["--verify-method", "blk"], "not one of standard, block, fly"),
    (["--verify-method", "block,,fly"], "an empty value"),
    (["--verify-method", "fly", "--num-drafts", "1"], "--num-drafts K >= 2"),
    (["--fly-window", "1"], "--fly-window: no request uses fly"),
    (["--verify-method", "block", "--fly-entropy-top-k", "2"], "--fly-entropy-top-k: no request uses fly"),
    (["--verify-method", "fly", "--fly-window", "3"], "must be in [1, 2]"),
    (["--verify-method", "fly", "--fly-window", "0"], "must be in [1, 2]"),
    (["--verify-method", "fly", "--fly-window", "x"], "not an integer"),
    (["--verify-method", "fly", "--fly-entropy-threshold=-0.5"], "is negative"),
    (["--verify-method", "fly", "--fly-entropy-threshold", "nan"], "not finite"),
    (["--verify-method", "fly", "--fly-entropy-top-k", "0"], "must be >= 1"),
    (["--draft-sampling", "probabilistic"], "the ngram drafter has no logits"),
    (["--draft-sampling", "random", "--drafter", "early-exit"], "not one of greedy, probabilistic"),
    (["--draft-sampling", "greedy", "--draft-sampling", "probabilistic"], "--draft-sampling"),
    (["--rng-contract", "mrv3"], "not one of mrv2, mrv2-fp64"),
    (["--rng-contract", "mrv2-fp64", "--impl", "gumbel-max"], "--impl gumbel-max implements mrv2"),
]


@pytest.mark.parametrize("args, words", BAD_BEFORE_LOAD, ids=[" ".join(a) for a, _ in BAD_BEFORE_LOAD])
def test_bad_option_values_are_one_line_exit_2_before_the_model_loads(args, words, tmp_path):
    out = tmp_path / "rec"
    code, stdout, err = main_inproc("record", "x", "y", "--model", str(tmp_path / "no-model"), *args, "--out", str(out))
    assert code == 2, (stdout, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in err, err
    assert not out.exists()


# ----------------------------------------------------------------------------- the committed fixtures
def _fixture(name: str) -> Recording:
    return Recording(REPO / "fixtures" / name)


def test_the_fixtures_are_the_tools_commands():
    tool = load_tool("make_method_fixtures")
    assert sorted(tool.FIXTURES) == sorted(FIXTURES)
    for name in FIXTURES:
        source = _fixture(name).manifest["source"]
        assert source["command"] == "replay record " + shlex.join(tool.command(name))
        assert source["generated_by"] == "tools/make_method_fixtures.py" and len(_fixture(name)) == 1


@pytest.mark.parametrize("name", FIXTURES)
def test_each_fixture_replays_through_the_reference(name):
    _replays(REPO / "fixtures" / name)


def test_each_fixtures_method_decides_its_tokens():
    """On the recorded step the reference emits other tokens under standard verification (block, FLy) and under the
    mrv2 contract (fp64); the probabilistic draft is the contract drafter's, neither the argmax nor the unsalted
    draw."""
    ref = ReferenceSampler()
    for name, fields in (("real-method-block", {"verify_method": [1]}),
                         ("real-method-fly", {"verify_method": [2], "fly_window": [1], "fly_entropy_threshold": [0.5],
                                              "fly_entropy_top_k": [5]})):
        record = _fixture(name)[0]
        assert {f: getattr(record.step, f).tolist() for f in fields} == fields
        standard = dataclasses.replace(record.step, verify_method=torch.zeros_like(record.step.verify_method))
        assert _tokens(record.emitted) != _tokens(ref.sample(standard)), name
    fp64 = _fixture("real-method-fp64")
    assert fp64.rng_contract == "mrv2-fp64"
    mrv2 = dataclasses.replace(fp64[0].step, rng_contract="mrv2")
    assert _tokens(fp64[0].emitted) != _tokens(ref.sample(mrv2))
    step = _fixture("real-method-probabilistic")[0].step
    assert step.draft_sampling.tolist() == [1] and float(step.temperature[0]) == 1.0
    drafts = _drafts(step, 0)
    assert draft_noise_diagnosis(step, 0) is None and drafts == derive_drafts(step, 0)
    assert drafts != derive_drafts(step, 0, salt=0) and drafts != [argmax_first(step.draft_logits[0])]


@pytest.mark.parametrize("name", ["real-method-block", "real-method-fly", "real-method-fp64"])
def test_the_kernels_replay_the_block_fly_and_fp64_fixtures(name):
    """stochastic implements block, FLy and mrv2-fp64 (replay_kernels/verify/methods.py, draw/draw64.py): the
    recorded tokens, not a refusal (a kernel verifying the standard way in silence would differ on these steps:
    tests/test_kernels_methods.py)."""
    _replays(REPO / "fixtures" / name, "stochastic")


def test_the_kernels_refuse_the_tree_fixture_by_name():
    code, stdout, err = main_inproc("run", str(REPO / "fixtures" / "real-method-tree"), "--impl", "stochastic")
    assert code == 1 and "stochastic refused the step: verify_method tree is not implemented in the kernels" \
        in stdout + err, stdout + err


def test_the_kernels_verify_the_probabilistic_drafts():
    """Standard verification with the draft logits (q = softmax(draft_logits / T)): the kernels' own path."""
    _replays(REPO / "fixtures" / "real-method-probabilistic", "stochastic")
