"""Fixture format v1: round trip, lossless dtypes, canonical digests, atomic streaming writes."""
import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from helpers import write_recording
from replay_harness.errors import InputError
from replay_harness.recording.schema import FIELDS, INPUT
from replay_harness.recording.step import Step
from replay_harness.recording.store import Emitted, Recording, RecordingWriter, tensor_digest
from replay_harness.recording.synthetic import Case, random_step

CASE = Case("fmt", vocab_size=64, num_requests=3, features=frozenset({"draft-logits", "ragged"}),
            dtype=torch.bfloat16, steps=2)


def test_round_trip_is_lossless_and_lazy(tmp_path):
    gen = torch.Generator().manual_seed(1)
    step = random_step(gen, CASE)
    emitted = Emitted(torch.full((3, step.max_drafts + 1), -1, dtype=torch.int32), torch.zeros(3, dtype=torch.int32))
    with RecordingWriter(tmp_path / "rec", vocab_size=64, source={"engine": "test"}) as w:
        w.write_step(step, emitted)
    rec = Recording(tmp_path / "rec")
    assert len(rec) == 1 and rec.manifest["complete"] and rec.manifest["num_steps"] == 1
    got = rec[0].step
    assert got.logits.dtype == torch.bfloat16 and torch.equal(got.logits, step.logits)  # bf16 stays bf16
    assert torch.equal(got.draft_logits, step.draft_logits)
    for name in ("cu_num_logits", "draft_token_ids", "positions", "seed", "top_k"):
        assert torch.equal(getattr(got, name), getattr(step, name))
    assert not list((tmp_path / "rec").rglob("*.tmp"))  # no temp files left behind


def test_digest_is_canonical_across_processes(tmp_path):
    """Same content written by two processes -> same digest, whatever the header byte order."""
    code = ("import sys, torch; sys.path.insert(0, 'tests'); from helpers import write_recording; "
            "from replay_harness.recording.synthetic import Case; "
            "write_recording(__import__('pathlib').Path(sys.argv[1]), Case('d', vocab_size=50, steps=2))")
    for name in ("a", "b"):
        subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], check=True)
    a, b = Recording(tmp_path / "a"), Recording(tmp_path / "b")
    assert a.digest() == b.digest() == a.manifest["digest"]
    t, meta = a.read_tensors(0)
    t2 = dict(t)
    t2["seed"] = t["seed"] + 1
    assert tensor_digest(t2, meta) != tensor_digest(t, meta)



def test_schema_table_matches_step_and_written_files(tmp_path):
    """The one field table covers every Step field, and a written step holds each tensor in its table dtype."""
    import dataclasses

    # rng_contract is the manifest's (one per recording), carried on each Step for the oracle's noise width
    assert [f.name for f in dataclasses.fields(Step) if f.name != "rng_contract"] == \
        [f.name for f in FIELDS if f.role == INPUT]
    write_recording(tmp_path / "rec", CASE)
    tensors, _ = Recording(tmp_path / "rec").read_tensors(0)
    for f in FIELDS:
        if f.name in tensors:
            assert tensors[f.name].dtype in f.dtypes and tensors[f.name].ndim == len(f.shape), f.name


def test_unclosed_recording_keeps_finished_steps(tmp_path):
    gen = torch.Generator().manual_seed(2)
    w = RecordingWriter(tmp_path / "rec", vocab_size=64)
    step = random_step(gen, CASE)
    emitted = Emitted(torch.full((3, step.max_drafts + 1), -1, dtype=torch.int32), torch.zeros(3, dtype=torch.int32))
    w.write_step(step, emitted)
    w.write_step(step, emitted)
    # no close(): as after a crash
    (tmp_path / "rec" / "steps" / ".step-000002.safetensors.x.tmp").write_bytes(b"half a step")
    rec = Recording(tmp_path / "rec")
    assert len(rec) == 2 and rec.manifest["complete"] is False
    assert torch.equal(rec[1].step.logits, step.logits)


def test_writer_refuses_bad_step_and_writes_nothing(tmp_path):
    gen = torch.Generator().manual_seed(3)
    step = random_step(gen, CASE)
    step.temperature[0] = -1.0
    emitted = Emitted(torch.full((3, step.max_drafts + 1), -1, dtype=torch.int32), torch.zeros(3, dtype=torch.int32))
    with pytest.raises(InputError, match="temperature"):
        with RecordingWriter(tmp_path / "rec", vocab_size=64) as w:
            w.write_step(step, emitted)
    assert not list((tmp_path / "rec" / "steps").iterdir())


def test_writer_refuses_existing_folder(tmp_path):
    write_recording(tmp_path / "rec", Case("x", vocab_size=30, steps=1))
    with pytest.raises(InputError, match="exists"):
        RecordingWriter(tmp_path / "rec", vocab_size=30)


def test_single_metadata_key_and_schema(tmp_path):
    rec = Recording(write_recording(tmp_path / "rec", Case("x", vocab_size=30, steps=1)))
    from safetensors import safe_open

    with safe_open(str(rec.files[0]), framework="pt") as f:
        meta = f.metadata()
    assert list(meta) == ["replay"] and json.loads(meta["replay"])["schema"] == "replay.step/1"
    assert json.loads((tmp_path / "rec" / "manifest.json").read_text())["schema"] == "replay.recording/1"


def test_synthetic_recordings_say_so(tmp_path):
    from replay_harness.recording.synthetic import CASES, write_case

    rec = Recording(write_case(CASES["synthetic-edge"], tmp_path / "rec"))
    assert rec.synthetic and rec.manifest["source"]["synthetic"] is True
    assert rec[0].meta.get("synthetic") is True


def test_foreign_safetensors_is_not_a_step(tmp_path):
    rec = Recording(write_recording(tmp_path / "rec", Case("x", vocab_size=30, steps=1)))
    save_file({"x": torch.zeros(2)}, str(rec.files[0]))
    with pytest.raises(InputError, match="not a replay step"):
        Recording(tmp_path / "rec")[0]


def test_written_files_are_readable_by_others(tmp_path):
    """Atomic writes go through mkstemp (mode 0600); the final files must get the usual 0666 & ~umask."""
    import os
    import stat

    from replay_harness.recording.synthetic import CASES
    from helpers import write_recording

    rec = write_recording(tmp_path / "rec", CASES["synthetic-edge"], steps=1)
    umask = os.umask(0o022)
    os.umask(umask)
    for f in [rec / "manifest.json", *sorted((rec / "steps").iterdir())]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask, f
