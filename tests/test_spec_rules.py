"""docs/FIXTURES.md is normative: one test per rule it states, against the validator and the code.

The validator rules (what `replay validate` refuses) and the byte-level contracts a second implementation
must reproduce (digest pre-image, Gumbel hash, uniform conversion, the 1 - u clamp) are each checked here
from the document's wording, not from the code under test.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import documented_step_digest
from replay_harness.errors import InputError
from replay_harness.oracle import rng
from replay_harness.recording.store import Recording
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
