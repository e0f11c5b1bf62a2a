"""The write-path classes of issue 67 item 4 (docs/HARDENING.md, "The fuzz classes of the write path"): read-only
places are refused before any work, a delete that fails after its check names what it left, and the fuzzer's
six write-path kinds (bind mounts, read-only folders, symlink races, signals mid-write, the plugin's
``--replay-update``, ``record --model`` paths) run clean on a seeded sample.

Root ignores file modes, so the read-only cases run in a child that has dropped CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH (tools/fuzz/worker.py: drop_file_capabilities), as the fuzz workers do. Recordings used:
copies of the committed fixture synthetic-plain (SYNTHETIC).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLAIN = REPO / "fixtures" / "synthetic-plain"
SYNTH = ("--batch", "2", "--vocab", "1000", "--num-steps", "1")


def _capless(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python ARGS`` in a child whose file-permission capabilities are gone (modes enforced even as root)."""
    sys.path.insert(0, str(REPO))
    from tools.fuzz.worker import drop_file_capabilities

    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=cwd or REPO,
                          preexec_fn=drop_file_capabilities)


def _replay(*args: str) -> subprocess.CompletedProcess:
    return _capless("-m", "replay_harness.cli", *args)


def _modes_enforced(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        return _capless("-c", f"open({str(probe)!r}).read()").returncode != 0
    finally:
        probe.chmod(0o600)


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes() if p.is_file() else b"")
            for p in sorted(root.rglob("*"))}


def _read_only(folder: Path, which: str) -> None:
    for p in {"top": [folder], "steps": [folder / "steps"], "all": [folder, *folder.rglob("*")]}[which]:
        p.chmod(p.stat().st_mode & ~0o222)


@pytest.mark.parametrize("which", ["top", "steps", "all"])
def test_synth_onto_a_read_only_old_recording_is_refused_before_the_work(tmp_path, which):
    """issue 67: `synth --out OLD --overwrite` onto a read-only old recording swapped the new one in, failed to
    delete the old one (exit 2) and left it in a `.OLD.RANDOM.tmp` staging folder. Now: exit 2 before any work,
    naming the read-only folder; OLD as it was, nothing beside it."""
    if not _modes_enforced(tmp_path):
        pytest.skip("file modes are not enforced here")
    old = tmp_path / "old"
    shutil.copytree(PLAIN, old)
    _read_only(old, which)
    before = _tree(old)
    p = _replay("synth", str(PLAIN), "--out", str(old), "--overwrite", *SYNTH)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "is read-only" in lines[0] and "--out" in lines[0], p.stderr
    assert _tree(old) == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["old", "probe"]


@pytest.mark.parametrize("out", ["new", "a/b/new"])
def test_synth_into_a_read_only_folder_is_refused_naming_the_option(tmp_path, out):
    """A new output in a read-only folder: exit 2 at the check, one line naming --out and the folder. Before:
    "replay: error: .new.RANDOM.tmp: Permission denied" (the staging folder's name, no option)."""
    if not _modes_enforced(tmp_path):
        pytest.skip("file modes are not enforced here")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        p = _replay("synth", str(PLAIN), "--out", str(locked / out), *SYNTH)
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith(f"replay: error: --out {locked / out}: cannot write in {locked}"), p.stderr
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


CLAIM = """
import json, sys
from replay_harness.errors import ReplayError
from replay_harness.guarded import claim
out = {}
for name, kw in [("ro-steps", dict(overwrite=True)), ("ro-top", dict(overwrite=True)), ("ro-top", dict()),
                 ("ok", dict(overwrite=True))]:
    try:
        claim(sys.argv[1] + "/" + name, [], "--out", folder=True, **kw).close()
        out[name + str(sorted(kw))] = "ok"
    except ReplayError as e:
        out[name + str(sorted(kw))] = str(e)
print(json.dumps(out))
"""


def test_record_out_in_place_needs_write_permission_on_the_folder_and_its_steps(tmp_path):
    """`record --out DIR [--overwrite]` writes into DIR in place and deletes DIR/steps' files: a read-only DIR or
    steps/ is refused at the check (before the model loads), not after the model ran."""
    if not _modes_enforced(tmp_path):
        pytest.skip("file modes are not enforced here")
    for name, which in (("ro-steps", "steps"), ("ro-top", "top"), ("ok", None)):
        shutil.copytree(PLAIN, tmp_path / name)
        if which:
            _read_only(tmp_path / name, which)
    p = _capless("-c", CLAIM, str(tmp_path))
    got = json.loads(p.stdout)
    assert "cannot delete the old steps" in got["ro-steps['overwrite']"], got
    assert "cannot write in" in got["ro-top['overwrite']"] and "cannot write in" in got["ro-top[]"], got
    assert got["ok['overwrite']"] == "ok", got


def test_a_delete_that_fails_after_the_check_names_what_it_left(tmp_path, monkeypatch):
    """A mode changed (or a read-only remount) between the check and the delete: a UsageError naming the folder
    left in place (synth adds "the new recording is in place, but the old one ... was not deleted"), not a
    bare "manifest.json: Permission denied"."""
    from replay_harness.errors import UsageError
    from replay_harness.guarded import Folder, Inputs

    shutil.copytree(PLAIN, tmp_path / "old")
    real_unlink = os.unlink

    def refuse(name, *a, **kw):
        if name == "manifest.json":
            raise PermissionError(13, "Permission denied", name)
        return real_unlink(name, *a, **kw)

    monkeypatch.setattr(os, "unlink", refuse)
    with Folder.at(tmp_path, Inputs()) as base:
        with pytest.raises(UsageError, match=r"cannot delete manifest.json \(permission denied\); left in place: .*old"):
            base.remove_tree("old")
    assert (tmp_path / "old" / "manifest.json").is_file()


def test_the_write_path_kinds_run_clean_on_a_sample(tmp_path):
    """Two cases of each write-path kind (cases 28-33 and 62-67 of seed 3: mounts, readonly-output,
    symlink-race, signal-write, plugin-update, record-model) through the fuzz driver, in one worker: no failure
    of any kind (traceback, hang, internal error, modified input, partial output, orphan)."""
    out = tmp_path / "fuzz.json"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "fuzz_recordings.py"), "--workers", "1",
                           "--subprocess-every", "0", "--seed", "3", "--per-case", "2", "--out", str(out),
                           "--only", ",".join(str(i) for i in [*range(28, 34), *range(62, 68)])],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    doc = json.loads(out.read_text())
    assert proc.returncode == 0 and doc["failed"] == 0, proc.stdout + proc.stderr
    assert set(doc["by_kind"]) == {"mounts", "readonly-output", "symlink-race", "signal-write", "plugin-update",
                                   "record-model"}


def test_ctrl_c_right_after_a_temp_file_is_made_leaves_nothing(tmp_path, monkeypatch):
    """SIGINT landing as ``os.open`` returns the new temp file of an atomic write (found by the signal-write
    fuzz kind): the temp file is removed, not left as ``.NAME.RANDOM.tmp``."""
    from replay_harness.guarded import Folder

    real_open = os.open

    def interrupted(path, flags, *a, **kw):
        fd = real_open(path, flags, *a, **kw)
        if flags & os.O_CREAT and str(path).endswith(".tmp"):
            os.close(fd)
            raise KeyboardInterrupt
        return fd

    monkeypatch.setattr(os, "open", interrupted)
    with Folder.at(tmp_path) as folder:
        with pytest.raises(KeyboardInterrupt):
            folder.write_file("out.json", b"{}")
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_between_the_staging_folder_and_its_writer_leaves_nothing(tmp_path, monkeypatch):
    """SIGINT after `synth`'s staging folder is made but before the code that would remove it on an error
    runs (recording/swap.py: write_replacing): exit 130, and ``cli.main`` removes the folder on the way out
    (guarded.discard_unfinished). Before: ``.new.RANDOM.tmp`` stayed beside the output."""
    import posixpath

    from helpers import main_inproc

    real_basename = posixpath.basename
    fired = []

    def interrupted(p):
        if str(p).endswith(".tmp") and not fired:
            fired.append(p)
            raise KeyboardInterrupt
        return real_basename(p)

    monkeypatch.setattr(posixpath, "basename", interrupted)
    code, _, err = main_inproc("synth", str(PLAIN), "--out", str(tmp_path / "new"), *SYNTH)
    monkeypatch.undo()
    assert fired and code == 130, err
    assert list(tmp_path.iterdir()) == []
