"""The digest check of a closed recording uses the step digests remembered when the steps were read
(``Recording.__getitem__``; recording/digest.py) and reads again only the steps not read since, with the
same warnings as reading every step again (docs/SCALE.md)."""
from __future__ import annotations

import json
import os
import struct
import shutil
from pathlib import Path

import pytest

from replay_harness.recording import digest as registry
from replay_harness.recording.store import Recording, load_step_file
from replay_harness.recording.validate import close_problems

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "synthetic-mixed"


def _copy(tmp_path: Path) -> Path:
    """A copy of the closed 3-step fixture (its own paths, so nothing of it is remembered yet)."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "rec"))


def _count_reads(monkeypatch) -> list[int]:
    """The step indices ``Recording.read_tensors`` is called with from now on."""
    calls: list[int] = []
    read = Recording.read_tensors

    def counted(self, index):
        calls.append(index)
        return read(self, index)

    monkeypatch.setattr(Recording, "read_tensors", counted)
    return calls


def _is_digest_warning(problems) -> bool:
    return len(problems) == 1 and problems[0].warning and problems[0].field == "digest"


def _first_finite_logit_offset(file: Path) -> int:
    """The byte offset in ``file`` of the lowest byte of its first finite logit (flipping its low bit keeps
    the value finite, so the step still passes the schema check)."""
    data = file.read_bytes()
    n = int.from_bytes(data[:8], "little")
    start = json.loads(data[8:8 + n])["logits"]["data_offsets"][0]
    logits = load_step_file(file)[0]["logits"].reshape(-1)
    index = int(logits.isfinite().nonzero()[0])
    return 8 + n + start + index * logits.element_size()


def test_reading_every_step_leaves_nothing_to_read_for_the_digest_check(tmp_path, monkeypatch):
    rec = Recording(_copy(tmp_path))
    for i in range(len(rec)):
        rec[i]
    calls = _count_reads(monkeypatch)
    assert close_problems(rec) == []
    assert calls == []
    assert all(registry.known(registry.file_key(f)) for f in rec.files)


def test_only_the_steps_not_read_are_read_for_the_digest_check(tmp_path, monkeypatch):
    rec = Recording(_copy(tmp_path))
    rec[1]
    calls = _count_reads(monkeypatch)
    assert close_problems(rec) == []
    assert calls == [0, 2]


def test_a_step_rewritten_after_it_was_read_still_gives_the_digest_warning(tmp_path):
    path = _copy(tmp_path)
    rec = Recording(path)
    for i in range(len(rec)):
        rec[i]
    file = rec.files[1]
    before = os.stat(file)
    at = _first_finite_logit_offset(file)
    data = bytearray(file.read_bytes())
    old = struct.unpack_from("<f", data, at)[0]
    struct.pack_into("<f", data, at, 2.5 if old == 1.5 else 1.5)  # one logit changed, the file as long as before
    file.write_bytes(bytes(data))
    # the key is (path, size, mtime): an edit later than the filesystem's timestamp tick, as a real one is
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    assert os.stat(file).st_size == before.st_size
    assert _is_digest_warning(close_problems(rec))
    rec[1]  # read again: the changed content's digest is remembered, and still does not match
    assert _is_digest_warning(close_problems(Recording(path)))


@pytest.mark.parametrize("read_first", [False, True], ids=["unread", "read"])
def test_a_bit_flipped_copy_gives_the_digest_warning(tmp_path, read_first):
    path = _copy(tmp_path)
    file = path / "steps" / "step-000002.safetensors"
    data = bytearray(file.read_bytes())
    data[_first_finite_logit_offset(file)] ^= 1
    file.write_bytes(bytes(data))
    rec = Recording(path)
    if read_first:
        for i in range(len(rec)):
            rec[i]
    assert _is_digest_warning(close_problems(rec))


def test_the_registry_is_bounded_and_exported_and_absorbed(monkeypatch):
    monkeypatch.setattr(registry, "_known", {})
    monkeypatch.setattr(registry, "KNOWN_LIMIT", 2)
    keys = [(f"/x/{i}", 1, 1) for i in range(3)]
    for i, key in enumerate(keys):
        registry.remember(key, f"{i}" * 64)
    assert registry.known(keys[0]) is None and registry.known(keys[2]) == "2" * 64
    exported = registry.export()
    monkeypatch.setattr(registry, "_known", {})
    registry.absorb(exported)
    assert registry.export() == exported and registry.known(None) is None
