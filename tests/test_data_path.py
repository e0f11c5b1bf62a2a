"""The recording data path (docs/FIXTURES.md "One step file", "Content digest"; docs/SCALE.md): the one-pass
step-file writer and its xxh3-128 digest, the reader's single buffer, recordings written before (sha256),
and derived recordings that store the reference's tokens. Every recording here is SYNTHETIC."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as st_save

from helpers import cli, documented_step_digest, main_inproc
from replay_harness.recording.schema import SCHEMA_MINOR
from replay_harness.impls import get_impl
from replay_harness.errors import InputError
from replay_harness.recording import digest as registry
from replay_harness.recording.derive import write_derived
from replay_harness.recording.schema import MANIFEST
from replay_harness.recording.stepfile import read_step_file
from replay_harness.recording.store import Emitted, Recording, RecordingWriter
from replay_harness.recording.synthetic import CASES, random_step
from replay_harness.recording.validate import check_recording

MIXED = Path(__file__).resolve().parent.parent / "fixtures" / "synthetic-mixed"


def _written(tmp_path: Path, steps: int = 3) -> Path:
    """A recording of ``steps`` random bf16 steps (drafts, draft logits, routes) written by RecordingWriter."""
    case = CASES["synthetic-draft-logits"]
    gen = torch.Generator().manual_seed(0)
    with RecordingWriter(tmp_path / "rec", vocab_size=case.vocab_size, synthetic=True,
                         source={"synthetic": True}) as w:
        for i in range(steps):
            step = random_step(gen, case, i)
            got = get_impl("reference").sample(step)
            w.write_step(step, Emitted(got.tokens.int(), got.counts.int(), got.routes.to(torch.int8)))
    return tmp_path / "rec"


def test_new_step_files_are_plain_safetensors_byte_for_byte(tmp_path):
    rec = Recording(_written(tmp_path))
    assert rec.manifest["digest_algorithm"] == "xxh3-128" and len(rec.manifest["digest"]) == 32
    assert rec.manifest["schema_minor"] == SCHEMA_MINOR == 2 and rec.manifest["write_stats"]["steps"] == 3
    for i, file in enumerate(rec.files):
        ours, raw_meta = read_step_file(file)
        theirs = load_file(str(file))  # safetensors' own reader
        assert set(ours) == set(theirs)
        for name in ours:
            assert ours[name].dtype == theirs[name].dtype and torch.equal(ours[name], theirs[name]), name
        with safe_open(str(file), framework="pt") as f:
            assert f.metadata() == {"replay": raw_meta}
        data = file.read_bytes()
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        assert (8 + n) % 8 == 0  # the data starts 8-byte aligned
        for name, info in header.items():  # every tensor starts at a multiple of its element size
            if name != "__metadata__":
                assert info["data_offsets"][0] % ours[name].element_size() == 0, name
        # the same tensors saved by safetensors itself have the same content digest (it is layout-free)
        assert registry.tensor_digest(theirs, json.loads(raw_meta), "xxh3-128") == rec.step_digest(i)
    assert check_recording(rec) == []


@pytest.mark.parametrize("name", ["logits", "draft_logits", "cu_num_logits", "temperature", "seed", "positions",
                                  "emitted_tokens", "emitted_routes"])
def test_a_flipped_byte_in_any_tensor_is_caught_by_validate(tmp_path, name):
    path = _written(tmp_path)
    file = Recording(path).files[1]
    data = bytearray(file.read_bytes())
    n = int.from_bytes(data[:8], "little")
    lo, hi = json.loads(data[8:8 + n])[name]["data_offsets"]
    data[8 + n + (lo + hi) // 2] ^= 0x01  # the lowest bit of a byte in the middle of the tensor
    file.write_bytes(bytes(data))
    problems = check_recording(Recording(path))
    assert problems, f"a flipped byte in {name} went unnoticed"
    assert any(p.field == "digest" for p in problems) or any(not p.warning for p in problems)
    code, out, err = main_inproc("validate", str(path))
    assert code == 2 or (code == 0 and "content digest does not match" in out + err), out + err


def test_a_recording_written_before_still_validates_and_replays(tmp_path):
    rec = Recording(MIXED)
    assert "digest_algorithm" not in rec.manifest and rec.digest_algorithm == "sha256"
    assert len(rec.manifest["digest"]) == 64 and rec.digest() == rec.manifest["digest"]
    assert check_recording(rec) == []
    code, out, err = cli("run", str(MIXED), "--device", "cpu", "--quiet")
    assert code == 0 and "warning" not in err, out + err


def test_a_digest_of_the_wrong_length_for_its_algorithm_is_refused(tmp_path):
    path = _written(tmp_path, steps=1)
    manifest = json.loads((path / MANIFEST).read_text())
    for algorithm, field in (("sha256", "digest"), ("md5", "digest_algorithm")):  # refused on open, by every reader
        (path / MANIFEST).write_text(json.dumps({**manifest, "digest_algorithm": algorithm}))
        with pytest.raises(InputError) as refused:
            Recording(path)
        assert refused.value.field == field


def test_the_reader_views_one_buffer_and_copies_a_misaligned_tensor(tmp_path):
    """A foreign writer may order tensors so that one starts off its element size (safetensors allows it)."""
    tensors = {"a": torch.tensor([7], dtype=torch.int8), "b": torch.arange(5, dtype=torch.int32),
               "c": torch.tensor([[1, -2], [3, -4]], dtype=torch.int8)}
    header = {"__metadata__": {"replay": "{}"}}
    offset, parts = 0, []
    for name in ("a", "b", "c"):  # "a" first: "b" starts at byte 1
        raw = tensors[name].reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": {torch.int8: "I8", torch.int32: "I32"}[tensors[name].dtype],
                        "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        parts.append(raw)
    text = json.dumps(header).encode()
    file = tmp_path / "foreign.safetensors"
    file.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(parts))
    got, meta = read_step_file(file)
    assert meta == "{}" and all(torch.equal(got[n], tensors[n]) for n in tensors)
    assert got["a"].untyped_storage().data_ptr() == got["c"].untyped_storage().data_ptr()  # one buffer
    assert got["b"].untyped_storage().data_ptr() != got["a"].untyped_storage().data_ptr()  # the copied one


def test_a_derived_recording_replays_against_the_tokens_it_stores(tmp_path, monkeypatch):
    out = write_derived(MIXED, tmp_path / "derived", batch=3, drafts=2, vocab=256, steps=2)
    rec = Recording(out)
    assert rec.has_expected_tokens and not rec.has_engine_tokens and rec.rng_contract == "mrv2"
    for record in rec:  # the stored answer is the reference's
        want = get_impl("reference").sample(record.step)
        assert torch.equal(record.emitted.tokens.long(), want.tokens.long())
        assert torch.equal(record.emitted.routes.long(), want.routes.long())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    code, out_text, err = main_inproc("run", str(out), "--impl", "stochastic", "--device", device, "--json")
    assert code == 0 and "tokens it stores" in out_text, out_text + err
    # the oracle is not run again: with a reference that would fail, the replay still passes
    from replay_harness.compare.runner import run_recording
    from replay_harness.impls.reference import ReferenceSampler

    def never(self, step):
        raise AssertionError("the reference ran during the replay of a recording that stores its tokens")
    monkeypatch.setattr(ReferenceSampler, "sample", never)
    cmp = run_recording(Recording(out), get_impl("stochastic"), "recorded", torch.device(device))
    assert cmp.steps == 2 and cmp.ok


def test_a_derived_recording_written_without_answers_is_compared_with_the_reference_run_then(tmp_path):
    out = write_derived(MIXED, tmp_path / "derived", batch=3, drafts=1, vocab=256, steps=1, expected=False)
    rec = Recording(out)
    assert not rec.has_expected_tokens and int(rec[0].emitted.counts.sum()) == 0
    code, out_text, err = cli("run", str(out), "--device", "cpu")
    assert code == 0 and "compared against reference" in out_text, out_text + err


def test_a_bf16_step_written_by_the_recorder_round_trips(tmp_path):
    from replay_harness.recording.recorder import Recorder

    case = CASES["synthetic-draft-logits"]
    step = random_step(torch.Generator().manual_seed(3), case)
    got = get_impl("reference").sample(step)
    with Recorder(tmp_path / "r", case.vocab_size, source={"synthetic": True}, synthetic=True) as rec:
        rec.record_sample(step, got)
    back = Recording(tmp_path / "r")
    assert torch.equal(back[0].step.logits, step.logits) and back[0].step.logits.dtype == torch.bfloat16
    stats = back.manifest["write_stats"]
    assert stats["steps"] == 1 and stats["bytes"] > step.logits.numel() * 2 and stats["engine"]["calls"] == 1
    # the phases are where the write path's seconds went: each measured, together no more than the total
    assert set(stats["phases"]) == {"check", "write", "fsync", "publish", "digest_wait"}
    assert all(v >= 0 for v in stats["phases"].values()) and stats["phases"]["write"] > 0
    assert sum(stats["phases"].values()) <= stats["seconds"] + 1e-6


@pytest.mark.gpu
def test_a_cuda_read_gives_the_cpu_read_s_step_and_digest(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from replay_harness.recording.prefetch import ReadStats, units_ahead

    path = _written(tmp_path, steps=4)
    rec = Recording(path)
    cpu = [rec[i] for i in range(len(rec))]
    registry._known.clear()
    seen = []
    for (_, i), record in units_ahead([Recording(path)], [(0, i) for i in range(len(rec))], torch.device("cuda"),
                                      stats=ReadStats()):
        assert record.step.logits.is_cuda and not record.emitted.tokens.is_cuda
        assert torch.equal(record.step.logits.cpu(), cpu[i].step.logits)
        seen.append(i)
    assert seen == list(range(len(rec))) and Recording(path).digest() == rec.manifest["digest"]


def test_copy_of_fixture_keeps_its_sha256_digest_after_a_rewrite_by_safetensors(tmp_path):
    """The digest does not depend on the layout: a sha256 fixture re-saved by safetensors still matches."""
    path = tmp_path / "m"
    shutil.copytree(MIXED, path)
    rec = Recording(path)
    file = rec.files[0]
    tensors, raw_meta = read_step_file(file)
    file.write_bytes(st_save({k: v.clone() for k, v in tensors.items()}, metadata={"replay": raw_meta}))
    assert check_recording(Recording(path)) == []


def test_the_xxh3_digest_is_the_documented_bytes(tmp_path):
    """docs/FIXTURES.md, "Content digest", with H = xxh3-128, recomputed from the file bytes and the text alone."""
    import xxhash

    path = _written(tmp_path, steps=2)
    step_digests = [documented_step_digest(f, xxhash.xxh3_128) for f in sorted((path / "steps").iterdir())]
    manifest = json.loads((path / MANIFEST).read_text())
    assert all(len(d) == 32 for d in step_digests)
    assert xxhash.xxh3_128("".join(step_digests).encode()).hexdigest() == manifest["digest"]
