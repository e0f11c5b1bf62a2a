"""docs/FIXTURES.md is normative: one test per rule it states, against the validator and the code.

The validator rules (what `replay validate` refuses) and the byte-level contracts a second implementation
must reproduce (digest pre-image, Gumbel hash, uniform conversion, the 1 - u clamp) are each checked here
from the document's wording, not from the code under test. Schema minor 2: the sampling pipeline's refused
values and partners, its rules 0-5 written again from the page (numpy float32) against the oracle, and the
page's worked example (its printed rows, tokens, logprobs and kept sets).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import documented_step_digest
from replay_harness.errors import InputError
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle import rng
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.step import Step
from replay_harness.recording.store import Emitted, Recording, RecordingWriter
from replay_harness.recording.synthetic import Case, add_pipeline, random_step
from replay_harness.recording.validate import check_recording

REPO = Path(__file__).resolve().parents[1]
VECTORS = REPO / "replay_harness" / "conformance" / "vectors"
VECTOR = VECTORS / "greedy-ties"   # 1 step, V = 16, routes recorded
ALL_RECORDINGS = sorted(p for p in [*(REPO / "fixtures").iterdir(), *VECTORS.iterdir()]
                        if (p / "manifest.json").exists())


@pytest.fixture()
def rec(tmp_path):
    shutil.copytree(VECTOR, tmp_path / "rec")
    return tmp_path / "rec"


def errors(path) -> list:
    """The validator's errors; a recording refused on open (readers check a few rules too) gives that one."""
    try:
        rec = Recording(path)
    except InputError as e:
        return [e]
    return [p for p in check_recording(rec) if not p.warning]


def edit_manifest(rec, fn):
    m = json.loads((rec / "manifest.json").read_text())
    fn(m)
    (rec / "manifest.json").write_text(json.dumps(m))


def edit_step(rec, fn, metadata=None):
    path = rec / "steps" / "step-000000.safetensors"
    t = load_file(str(path))
    meta = {"replay": json.dumps({"schema": "replay.step/1", "step": 0}, separators=(",", ":"))}
    fn(t)
    save_file(t, str(path), metadata={**meta, **(metadata or {})})


@pytest.mark.parametrize("path", ALL_RECORDINGS, ids=lambda p: p.name)
def test_every_committed_recording_is_valid(path):
    assert errors(path) == []


# ----------------------------------------------------------------------------- manifest.json
@pytest.mark.parametrize("key", ["schema_minor", "vocab_size", "rng_contract", "synthetic", "source", "complete",
                                 "num_steps", "digest"])
def test_a_manifest_key_missing_is_refused(rec, key):
    edit_manifest(rec, lambda m: m.pop(key))
    problems = errors(rec)
    assert [p.field for p in problems] == [key], problems


@pytest.mark.parametrize("key,value", [("schema_minor", -1), ("schema_minor", "0"), ("synthetic", 1),
                                       ("rng_contract", ""), ("source", []), ("complete", "yes"),
                                       ("num_steps", True), ("digest", "ABC"), ("digest", None),
                                       ("dropped_steps", -1), ("dropped_steps", True)])
def test_a_manifest_value_of_the_wrong_kind_is_refused(rec, key, value):
    edit_manifest(rec, lambda m: m.update({key: value}))
    problems = [p for p in errors(rec) if p.field == key]
    assert problems, f"{key}={value!r} accepted"


@pytest.mark.parametrize("key,value", [("source", "my-engine 1.4"), ("num_steps", 1.0), ("synthetic", "yes"),
                                       ("schema_minor", True), ("complete", 1), ("rng_contract", ""),
                                       ("digest_algorithm", "md5")])
def test_readers_refuse_a_present_key_of_the_wrong_kind(rec, key, value):
    """"Readers are lenient about absence only": `replay run` / `inspect` open the recording (``Recording``) and
    refuse a key that is present but not of its kind, as `replay validate` does (an empty rng_contract was read
    as a contract named "" and compared with mrv2)."""
    edit_manifest(rec, lambda m: m.update({key: value}))
    with pytest.raises(InputError) as refused:
        Recording(rec)
    assert refused.value.field == key


def test_readers_take_defaults_for_absent_keys(rec):
    edit_manifest(rec, lambda m: [m.pop(k) for k in ("schema_minor", "rng_contract", "synthetic", "source",
                                                     "complete", "num_steps", "digest")])
    r = Recording(rec)
    assert r.rng_contract == "mrv2" and not r.synthetic and len(r) == 1 and r[0].index == 0


def test_an_open_manifest_needs_no_num_steps_or_digest(rec):
    edit_manifest(rec, lambda m: (m.update(complete=False), m.pop("num_steps"), m.pop("digest")))
    assert errors(rec) == []


def test_unknown_manifest_keys_and_a_newer_minor_are_accepted(rec):
    edit_manifest(rec, lambda m: m.update(schema_minor=7, engine_notes={"x": 1}))
    assert errors(rec) == []


# ----------------------------------------------------------------------------- step files
def test_a_second_metadata_key_is_refused(rec):
    """By every reader, not `replay validate` alone: ``Recording.read`` is what `replay run` and `inspect` use."""
    edit_step(rec, lambda t: None, metadata={"format": "pt"})
    problems = errors(rec)
    assert [p.field for p in problems] == ["__metadata__"] and "'format'" in problems[0].message
    with pytest.raises(InputError) as refused:
        Recording(rec)[0]
    assert refused.value.field == "__metadata__" and refused.value.step == 0


@pytest.mark.parametrize("replay_meta,message", [({"schema": "replay.step/1", "step": 0.0}, "says step 0.0"),
                                                 ([0], "must be a JSON object")])
def test_a_step_index_must_be_a_json_integer_and_the_metadata_an_object(rec, replay_meta, message):
    path = rec / "steps" / "step-000000.safetensors"
    save_file(load_file(str(path)), str(path), metadata={"replay": json.dumps(replay_meta)})
    with pytest.raises(InputError) as refused:
        Recording(rec)[0]
    assert refused.value.field.startswith("__metadata__") and message in str(refused.value)


def test_a_header_length_past_the_end_of_the_file_names_the_header(rec):
    path = rec / "steps" / "step-000000.safetensors"
    data = path.read_bytes()
    path.write_bytes((1 << 40).to_bytes(8, "little") + data[8:])
    with pytest.raises(InputError) as refused:
        Recording(rec)[0]
    assert refused.value.field == "__header__" and "the header length says 1099511627776 bytes" in str(refused.value)


def test_negative_positions_are_refused(rec):
    edit_step(rec, lambda t: t["positions"].__setitem__(0, -1))
    assert [p.field for p in errors(rec)] == ["positions"]


def test_positions_up_to_int64_max_are_accepted(rec):
    edit_step(rec, lambda t: t["positions"].__setitem__(0, 2 ** 63 - 1))
    assert [p.field for p in errors(rec)] == []


def test_zero_requests_are_refused(rec):
    def empty(t):
        t["cu_num_logits"] = torch.zeros(1, dtype=torch.int32)
    edit_step(rec, empty)
    assert "R >= 1" in errors(rec)[0].message


@pytest.mark.parametrize("route", [0, 1, 2, 3])
def test_count_zero_needs_route_refused(rec, route):
    def fn(t):
        t["emitted_counts"][0] = 0
        t["emitted_tokens"][0] = -1
        t["emitted_routes"][0] = route
    edit_step(rec, fn)
    assert [p.field for p in errors(rec)] == ["emitted_routes"]


def test_route_refused_needs_count_zero_and_unknown_route_may_be_zero(rec):
    def refused_with_tokens(t):
        t["emitted_routes"][0] = 4
    edit_step(rec, refused_with_tokens)
    assert [p.field for p in errors(rec)] == ["emitted_routes"]

    def unknown_empty(t):
        t["emitted_counts"][0], t["emitted_tokens"][0], t["emitted_routes"][0] = 0, -1, -1
    edit_step(rec, unknown_empty)
    assert errors(rec) == []


# ----------------------------------------------------------------------------- byte-level contracts
def test_digest_pre_image_is_the_documented_bytes():
    """sha256 over, per tensor in name order, `name|dtype|shape|` (torch dtype names, the shape as
    `[5, 8]` with ', ') then the raw bytes; then the canonical metadata JSON."""
    path = VECTOR / "steps" / "step-000000.safetensors"
    meta = json.loads(json.loads(path.read_bytes()[8:8 + struct.unpack("<Q", path.read_bytes()[:8])[0]])
                      ["__metadata__"]["replay"])
    assert json.dumps(meta, sort_keys=True, separators=(",", ":")) == \
        '{"rule":"greedy-ties","schema":"replay.step/1","step":0}'  # the canonical form the digest hashes
    manifest = json.loads((VECTOR / "manifest.json").read_text())
    step = documented_step_digest(path, hashlib.sha256)
    assert hashlib.sha256(step.encode()).hexdigest() == manifest["digest"]


def _mix(h, k):
    m = 0xFFFFFFFF
    k = (k * 0xCC9E2D51) & m
    k = ((k << 15) | (k >> 17)) & m
    k = (k * 0x1B873593) & m
    h ^= k
    h = ((h << 13) | (h >> 19)) & m
    return (h * 5 + 0xE6546B64) & m


def _fmix(h):
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


@pytest.mark.parametrize("seed,pos,token", [(12345, 20531159, 1), (0, 0, 0), (-1, 2 ** 32 + 5, 7),
                                            (-(2 ** 63), 2 ** 62, 15), (2 ** 63 - 1, 3, 2 ** 31)])
def test_gumbel_hash_as_documented(seed, pos, token):
    """h = 0; mix seed_lo, seed_hi, pos_lo, token; fmix32(h ^ 16); u in fp32; 1 - u clamped at 2^-24."""
    s = seed & (2 ** 64 - 1)
    h = 0
    for word in (s & 0xFFFFFFFF, s >> 32, pos & 0xFFFFFFFF, token & 0xFFFFFFFF):
        h = _mix(h, word)
    h = _fmix(h ^ 16)
    assert h == int(rng.murmur3_hash32(seed, pos, token))
    f = torch.float32
    u = (torch.tensor(h >> 16, dtype=f) * 2.0 ** -16 + (torch.tensor(h & 0xFFFF, dtype=f) + 0.5) * 2.0 ** -32)
    assert torch.equal(u, rng.murmur3_uniform32(seed, pos, token))
    if (seed, pos, token) == (12345, 20531159, 1):
        assert float(u) == 1.0 and float(rng.gumbel_noise(seed, pos, token)) == pytest.approx(-2.8115, abs=1e-4)
    assert torch.isfinite(rng.gumbel_noise(seed, pos, token))


# ----------------------------------------------------------------------------- the sampling pipeline (schema minor 2)
FIXTURES_MD = REPO / "docs" / "FIXTURES.md"
_I32, _I8 = torch.int32, torch.int8


def worked_pipeline_step():
    """The step of docs/FIXTURES.md "Worked example: the pipeline, two requests, V = 8", as the page gives it."""
    def i32(*v):
        return torch.tensor(v, dtype=_I32)

    return Step(
        logits=torch.tensor([[0.5, 1.0, 2.0, 3.75, 2.5, -1.0, 1.5, 0.0], [1.0, 0.5, -0.5, 2.0, 1.875, 0.0, 2.5, 3.5],
                             [2.0, -1.0, 3.0, 1.0, 0.5, 2.5, 1.5, -0.5]]),
        cu_num_logits=i32(0, 2, 3), draft_token_ids=i32(6, -1, -1), positions=torch.tensor([12, 13, 4]),
        temperature=torch.tensor([0.0, 0.5]), top_k=i32(0, 0), top_p=torch.tensor([1.0, 1.0]),
        min_p=torch.tensor([0.0, 0.0]), seed=torch.tensor([1234, 7]), request_ids=torch.tensor([17, 18]),
        repetition_penalty=torch.tensor([1.5, 1.0]), frequency_penalty=torch.tensor([0.5, 0.0]),
        presence_penalty=torch.tensor([0.25, 0.0]), min_tokens=i32(0, 3), has_grammar=torch.tensor([0, 1], dtype=_I8),
        logprobs=i32(2, 2), logprobs_mode=torch.tensor([1, 0], dtype=_I8),
        prompt_token_ids=i32(1, 2, 4, 4), cu_prompt_token_ids=i32(0, 2, 4),
        output_token_ids=i32(5, 3, 1), cu_output_token_ids=i32(0, 2, 3),
        allowed_token_ids=i32(0, 2, 5, 6), cu_allowed_token_ids=i32(0, 0, 4),
        stop_token_ids=i32(2), cu_stop_token_ids=i32(0, 0, 1),
        bad_words_token_ids=i32(3, 7, 6, 7), cu_bad_words_token_ids=i32(0, 4, 4),
        bad_words_lengths=i32(2, 2), cu_bad_words_lengths=i32(0, 2, 2),
        logit_bias_ids=i32(6), logit_bias_values=torch.tensor([1.25]), cu_logit_bias=i32(0, 1, 1),
        grammar_bitmask=torch.tensor([[0], [0], [77]], dtype=_I32))


def _documented_rows() -> dict[int, list[float]]:
    """The ``row N: [...]`` lines of the pipeline's worked example in docs/FIXTURES.md."""
    text = FIXTURES_MD.read_text().split("### Worked example: the pipeline")[1].split("## Emitted logprobs")[0]
    rows = {}
    for n, values in re.findall(r"^row (\d): \[([^\]]*)\]", text, flags=re.MULTILINE):
        rows[int(n)] = [float(v) for v in values.split(",")]
    return rows


def test_the_pipeline_worked_example_is_what_the_reference_computes():
    """Each processed row the page prints, the tokens, logprobs, ranks and kept sets it states."""
    step = worked_pipeline_step()
    processed = apply_sampling_params(step)
    rows = _documented_rows()
    assert sorted(rows) == [0, 1, 2]
    for n, values in rows.items():
        assert processed[n].tolist() == torch.tensor(values, dtype=torch.float32).tolist(), n
    res = ReferenceSampler().sample(step)
    assert res.tokens.tolist() == [[6, 4], [0, -1]] and res.counts.tolist() == [2, 1] and res.routes.tolist() == [2, 1]
    assert res.logprob_ids.tolist() == [[[6, 6, 4], [4, 4, 6]], [[0, 2, 0], [-1, -1, -1]]]
    want = torch.tensor([[[-0.965405941, -0.965405941, -1.21540594], [-1.07605124, -1.07605124, -1.20105124]],
                         [[-1.5460062, -0.546006203, -1.5460062], [float("-inf")] * 3]])
    assert torch.equal(res.logprobs, want)
    assert res.logprob_ranks.tolist() == [[1, 1], [2, -1]]
    assert res.kept_mask.tolist() == [[[127], [127]], [[65], [0]]]


def _np_rules(step) -> torch.Tensor:
    """docs/FIXTURES.md "The rules, in order" (rules 0-5) written from the page with numpy float32, one row at a
    time: a second implementation of the text, to hold the oracle to it."""
    f32 = np.float32
    v = step.vocab_size
    x_all = step.logits.float().numpy().copy()
    cu = step.cu_num_logits.tolist()

    def lst(name, r):
        values = getattr(step, name)
        if values is None:
            return []
        c = getattr(step, "cu_logit_bias" if name.startswith("logit_bias") else "cu_" + name)
        return values[int(c[r]):int(c[r + 1])].tolist()

    def per(name, r, off):
        t = getattr(step, name)
        return off if t is None else t[r].item()

    for r in range(step.num_requests):
        drafts = step.draft_token_ids[cu[r]:cu[r + 1] - 1].tolist()
        lengths, flat, words = lst("bad_words_lengths", r), lst("bad_words_token_ids", r), []
        for n in lengths:
            words.append(flat[:n])
            flat = flat[n:]
        for l in range(cu[r + 1] - cu[r]):
            x = x_all[cu[r] + l]
            out = lst("output_token_ids", r) + drafts[:l]
            if per("has_grammar", r, 0) == 1:                                    # 0. grammar
                w = step.grammar_bitmask[cu[r] + l].tolist()
                for t in range(v):
                    if not (w[t // 32] >> (t % 32)) & 1:
                        x[t] = -np.inf
            allowed = lst("allowed_token_ids", r)                                # 1. allowed ids
            if allowed:
                keep = x[allowed].copy()
                x[:] = -np.inf
                x[allowed] = keep
            for t, b in zip(lst("logit_bias_ids", r), lst("logit_bias_values", r)):  # 2. bias
                x[t] = f32(x[t] + f32(b))
            stops = lst("stop_token_ids", r)                                     # 3. min-tokens
            if stops and len(out) < per("min_tokens", r, 0):
                before = x[stops].copy()
                x[stops] = -np.inf
                if per("has_grammar", r, 0) == 1 and np.isneginf(x).all():
                    for t, b in zip(stops, before):
                        if np.isfinite(b):
                            x[t] = b
            rep, freq, pres = f32(per("repetition_penalty", r, 1.0)), f32(per("frequency_penalty", r, 0.0)), \
                f32(per("presence_penalty", r, 0.0))
            counts = {}
            for t in out:
                if t >= 0:
                    counts[t] = counts.get(t, 0) + 1
            if rep != 1:                                                         # 4. penalties
                s = f32(f32(1.0) / rep)
                for t in set(lst("prompt_token_ids", r)) | set(counts):
                    x[t] = f32(x[t] * s) if x[t] > 0 else f32(x[t] * rep)
            for t, c in counts.items():
                x[t] = f32(x[t] - f32(freq * f32(c)))
                x[t] = f32(x[t] - pres)
            for w in words:                                                      # 5. bad words
                if len(w) - 1 <= len(out) and out[len(out) - (len(w) - 1):] == w[:-1]:
                    x[w[-1]] = -np.inf
    return torch.from_numpy(x_all)


@pytest.mark.parametrize("seed", range(4))
def test_the_pipeline_rules_as_written_are_the_oracle_bit_for_bit(seed):
    """SYNTHETIC steps with every pipeline rule (synthetic.add_pipeline), greedy so that the processed rows are the
    pipeline's alone: the page's rules 0-5, implemented from the text, give the oracle's rows bit for bit."""
    gen = torch.Generator().manual_seed(seed)
    step = add_pipeline(gen, random_step(gen, Case("pipeline-spec", vocab_size=70, num_requests=8), 0))
    step = dataclasses.replace(step, temperature=torch.zeros_like(step.temperature))
    want = _np_rules(step)
    got = apply_sampling_params(step)
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(want)
    assert torch.equal(got[finite], want[finite])
    assert bool((want != step.logits.float()).any())  # the rules did change rows


@pytest.mark.parametrize("rule", ["grammar-mask", "allowed-token-ids", "logit-bias", "min-tokens", "min-tokens-restore",
                                  "repetition-penalty", "frequency-penalty", "presence-penalty", "penalties-at-drafts",
                                  "bad-words"])
def test_the_pipeline_rules_as_written_match_the_oracle_on_each_vector(rule):
    """The conformance vector of each rule (its restore, its words completed by drafts ...), greedy: the page's
    rules 0-5 give the oracle's rows bit for bit."""
    step = Recording(VECTORS / rule)[0].step
    step = dataclasses.replace(step, temperature=torch.zeros_like(step.temperature))
    want, got = _np_rules(step), apply_sampling_params(step)
    finite = torch.isfinite(want)
    assert torch.equal(torch.isneginf(got), torch.isneginf(want)) and torch.equal(got[finite], want[finite])


@pytest.fixture()
def pipe(tmp_path):
    """A recording of the pipeline's worked example (the reference's answer, logprobs and kept sets included)."""
    step = worked_pipeline_step()
    res = ReferenceSampler().sample(step)
    with RecordingWriter(tmp_path / "pipe", vocab_size=8, synthetic=True) as w:
        w.write_step(step, Emitted(res.tokens.to(_I32), res.counts.to(_I32), res.routes.to(_I8), res.logprobs,
                                   res.logprob_ids, res.logprob_ranks, res.kept_mask))
    return tmp_path / "pipe"


def test_the_pipeline_worked_example_is_valid(pipe):
    assert errors(pipe) == []
    assert json.loads((pipe / "manifest.json").read_text())["schema_minor"] == 2


def _set(name, index, value):
    def fn(t):
        t[name].view(-1)[index] = value
    return fn


def _drop(*names):
    def fn(t):
        for n in names:
            del t[n]
    return fn


def _put(name, value):
    def fn(t):
        t[name] = value
    return fn


# (the edit, the field refused): one per row of "Refused values of the pipeline" and "Which fields go together"
PIPELINE_REFUSALS = {
    "ragged 2-D": (_put("stop_token_ids", torch.tensor([[2]], dtype=_I32)), "stop_token_ids"),
    "cu not from 0": (_put("cu_stop_token_ids", torch.tensor([1, 1, 1], dtype=_I32)), "cu_stop_token_ids"),
    "cu decreasing": (_put("cu_allowed_token_ids", torch.tensor([0, 5, 4], dtype=_I32)), "cu_allowed_token_ids"),
    "cu end": (_put("cu_output_token_ids", torch.tensor([0, 2, 2], dtype=_I32)), "cu_output_token_ids"),
    "prompt id >= V": (_set("prompt_token_ids", 0, 8), "prompt_token_ids"),
    "output id < 0": (_set("output_token_ids", 1, -1), "output_token_ids"),
    "allowed id >= V": (_set("allowed_token_ids", 0, 8), "allowed_token_ids"),
    "stop id >= V": (_set("stop_token_ids", 0, 9), "stop_token_ids"),
    "bad word id < 0": (_set("bad_words_token_ids", 0, -2), "bad_words_token_ids"),
    "bias id >= V": (_set("logit_bias_ids", 0, 8), "logit_bias_ids"),
    "repetition 0": (_set("repetition_penalty", 1, 0.0), "repetition_penalty"),
    "repetition < 0": (_set("repetition_penalty", 0, -1.5), "repetition_penalty"),
    "repetition inf": (_set("repetition_penalty", 0, float("inf")), "repetition_penalty"),
    "frequency NaN": (_set("frequency_penalty", 0, float("nan")), "frequency_penalty"),
    "presence -inf": (_set("presence_penalty", 1, float("-inf")), "presence_penalty"),
    "min_tokens < 0": (_set("min_tokens", 0, -1), "min_tokens"),
    "has_grammar 2": (_set("has_grammar", 0, 2), "has_grammar"),
    "logprobs < -1": (_set("logprobs", 0, -2), "logprobs"),
    "logprobs > V": (_set("logprobs", 0, 9), "logprobs"),
    "mode 4": (_set("logprobs_mode", 0, 4), "logprobs_mode"),
    "bias count": (_put("logit_bias_values", torch.tensor([1.25, 2.0])), "cu_logit_bias"),  # both end at cu[-1]
    "bias NaN": (_set("logit_bias_values", 0, float("nan")), "logit_bias_values"),
    "bias +inf": (_set("logit_bias_values", 0, float("inf")), "logit_bias_values"),
    "bias twice": (lambda t: (t.update(logit_bias_ids=torch.tensor([6, 6], dtype=_I32),
                                       logit_bias_values=torch.tensor([1.0, 2.0]),
                                       cu_logit_bias=torch.tensor([0, 2, 2], dtype=_I32))), "logit_bias_ids"),
    "word length 0": (lambda t: t.update(bad_words_lengths=torch.tensor([4, 0], dtype=_I32)), "bad_words_lengths"),
    "lengths sum": (lambda t: t.update(bad_words_lengths=torch.tensor([2, 1], dtype=_I32)), "bad_words_lengths"),
    "logprob column 0": (_set("emitted_logprob_ids", 0, 4), "emitted_logprob_ids"),
    "logprob unused id": (_set("emitted_logprob_ids", 11, 3), "emitted_logprob_ids"),
    "logprob +inf": (_set("emitted_logprobs", 1, float("inf")), "emitted_logprobs"),  # NaN is allowed (no finite logit)
    "rank 0": (_set("emitted_logprob_ranks", 0, 0), "emitted_logprob_ranks"),
    "rank unused": (_set("emitted_logprob_ranks", 3, 1), "emitted_logprob_ranks"),
    "L too small": (lambda t: t.update(emitted_logprobs=t["emitted_logprobs"][:, :, :2].contiguous(),
                                       emitted_logprob_ids=t["emitted_logprob_ids"][:, :, :2].contiguous()),
                    "emitted_logprobs"),
    "reserved bad_words_ids": (_put("bad_words_ids", torch.tensor([1], dtype=_I32)), "bad_words_ids"),
    "reserved allowed_token_mask": (_put("allowed_token_mask", torch.ones(3, 8, dtype=_I8)), "allowed_token_mask"),
    # Which fields go together
    "list without cu": (_drop("cu_prompt_token_ids"), "cu_prompt_token_ids"),  # the missing one is named
    "bias without values": (_drop("logit_bias_values"), "logit_bias_values"),
    "repetition without prompt": (_drop("prompt_token_ids", "cu_prompt_token_ids"), "repetition_penalty"),
    "penalties without output": (_drop("output_token_ids", "cu_output_token_ids"), "frequency_penalty"),
    "stops without min_tokens": (_drop("min_tokens"), "stop_token_ids"),
    "words without lengths": (_drop("bad_words_lengths", "cu_bad_words_lengths"), "bad_words_token_ids"),
    "bitmask without has_grammar": (_drop("has_grammar"), "grammar_bitmask"),
    "has_grammar without bitmask": (_drop("grammar_bitmask"), "has_grammar"),
    "mode without logprobs": (_drop("logprobs", "emitted_logprobs", "emitted_logprob_ids", "emitted_logprob_ranks"),
                              "logprobs_mode"),
    "emitted logprobs without logprobs": (_drop("logprobs", "logprobs_mode"), "emitted_logprobs"),
    "logprobs without ranks": (_drop("emitted_logprob_ranks"), "emitted_logprobs"),
}


@pytest.mark.parametrize("case", sorted(PIPELINE_REFUSALS))
def test_a_pipeline_value_the_page_refuses_is_refused(pipe, case):
    edit, field = PIPELINE_REFUSALS[case]
    edit_step(pipe, edit)
    assert field in [p.field for p in errors(pipe)], errors(pipe)


@pytest.mark.parametrize("case", ["negative penalties", "bias -inf", "empty allowed", "logprobs V"])
def test_pipeline_values_the_page_allows_are_valid(pipe, case):
    edit = {"negative penalties": lambda t: t.update(frequency_penalty=torch.tensor([-2.0, 0.0]),
                                                     presence_penalty=torch.tensor([-0.5, 3.0])),
            "bias -inf": _set("logit_bias_values", 0, float("-inf")),
            "empty allowed": lambda t: t.update(allowed_token_ids=torch.zeros(0, dtype=_I32),
                                                cu_allowed_token_ids=torch.zeros(3, dtype=_I32)),
            "logprobs V": lambda t: t.update(logprobs=torch.tensor([2, 8], dtype=_I32),
                                             logprobs_mode=torch.tensor([1, 3], dtype=_I8))}[case]
    if case == "logprobs V":  # n = V needs L >= 9 columns
        def widen(t):
            edit(t)
            pad = torch.full((2, 2, 6), float("-inf"))
            t["emitted_logprobs"] = torch.cat([t["emitted_logprobs"], pad], 2)
            ids = torch.cat([t["emitted_logprob_ids"], torch.full((2, 2, 6), -1, dtype=_I32)], 2)
            ids[1, 0, 3:9] = torch.tensor([1, 3, 4, 5, 6, 7], dtype=_I32)
            t["emitted_logprob_ids"] = ids
            t["emitted_logprobs"][1, 0, 3:9] = -5.0
        edit_step(pipe, widen)
    else:
        edit_step(pipe, edit)
    assert errors(pipe) == []


def test_a_grammar_row_that_allows_nothing_is_a_warning_and_token_0(pipe):
    edit_step(pipe, lambda t: (t["grammar_bitmask"].__setitem__((2, 0), 1 << 9),  # bit past V = 8 only
                               t.update(logprobs=torch.tensor([2, -1], dtype=_I32),
                                        emitted_logprob_ids=torch.where(torch.arange(2)[:, None, None] == 1, -1,
                                                                        t["emitted_logprob_ids"]),
                                        emitted_logprob_ranks=torch.where(torch.arange(2)[:, None] == 1, -1,
                                                                          t["emitted_logprob_ranks"]))))
    problems = check_recording(Recording(pipe))
    assert [p.field for p in problems if not p.warning] == []
    assert any(p.warning and p.field == "grammar_bitmask" and "row 2 allows no token" in p.message for p in problems)
    step = Recording(pipe)[0].step
    assert ReferenceSampler().sample(step).tokens[1, 0] == 0
