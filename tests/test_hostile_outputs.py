"""Output paths under attack (docs/HARDENING.md, "Output paths"; issue 55, items 1 and 2 and "also found"):
`synth --out ... --overwrite` never deletes an input reached under another path (a bind mount, a symlinked
steps/ folder, a hard link), and writes beside the old recording before swapping it out; an output path
that is a FIFO, a socket or a device is exit 2 before any work and is left as it was; a failed write
names its path.

Recordings used: copies of the committed fixture synthetic-mixed (SYNTHETIC) and derived outputs of it.
"""
import errno
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from helpers import main_inproc

REPO = Path(__file__).resolve().parent.parent
MIXED = REPO / "fixtures" / "synthetic-mixed"
SYNTH = ("--batch", "4", "--vocab", "1000", "--num-steps", "1")


def _tree(folder: Path) -> dict:
    """Every file under ``folder`` (symlinks followed) -> its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_error(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("replay: error: "), err
    return lines[0]


def test_synth_symlinked_steps_into_out_keeps_the_input(tmp_path):
    """The issue's case exactly: the input's steps/ is a symlink into the folder --out names."""
    real, slrec = tmp_path / "real", tmp_path / "slrec"
    shutil.copytree(MIXED, real)
    slrec.mkdir()
    shutil.copy(real / "manifest.json", slrec / "manifest.json")
    (slrec / "steps").symlink_to("../real/steps")
    before = _tree(real)
    code, out, err = main_inproc("synth", str(slrec), "--out", str(real), "--overwrite", *SYNTH)
    assert code == 2, (out, err)
    line = _one_error(err)
    assert "contains the input" in line and "slrec/steps" in line and "nothing was written or deleted" in line
    assert _tree(real) == before and len(list((real / "steps").iterdir())) == len(before) - 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real", "slrec"]  # no staging folder left


def test_synth_out_with_a_hard_linked_step_file_is_refused(tmp_path):
    """--out holds a hard link of an input step file (the same inode under another path)."""
    src, out = tmp_path / "src", tmp_path / "out"
    shutil.copytree(MIXED, src)
    shutil.copytree(MIXED, out)
    victim = out / "steps" / "step-000001.safetensors"
    victim.unlink()
    os.link(src / "steps" / "step-000001.safetensors", victim)
    before, before_out = _tree(src), _tree(out)
    code, _, err = main_inproc("synth", str(src), "--out", str(out), "--overwrite", *SYNTH)
    assert code == 2 and "step-000001.safetensors is the input" in _one_error(err)
    assert _tree(src) == before and _tree(out) == before_out


def test_synth_out_as_the_input_under_another_path_is_refused(tmp_path, monkeypatch):
    """A bind mount of the input as --out, where the test cannot mount: a symlinked folder whose path
    ``realpath`` is made not to resolve (what a bind mount is to it: another path, the same inode). Before
    the identity check, --overwrite deleted the input's step files here."""
    src = tmp_path / "src"
    shutil.copytree(MIXED, src)
    alias = tmp_path / "alias"
    alias.symlink_to(src)
    monkeypatch.setattr(os.path, "realpath", lambda p, *a, **k: os.path.abspath(p))
    before = _tree(src)
    code, _, err = main_inproc("synth", str(src), "--out", str(alias), "--overwrite", *SYNTH)
    assert code == 2 and "is the input" in _one_error(err)
    assert _tree(src) == before


def test_synth_out_bind_mounted_input_is_refused(tmp_path):
    """A real bind mount of the input as --out (root only; skipped where mounting is not permitted)."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    shutil.copytree(MIXED, src)
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", str(src), str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        before = _tree(src)
        code, _, err = main_inproc("synth", str(src), "--out", str(mnt), "--overwrite", *SYNTH)
        assert code == 2 and "is the input" in _one_error(err)
        assert _tree(src) == before
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_synth_overwrite_swaps_in_a_complete_recording(tmp_path, monkeypatch):
    """The old recording stays whole until the new one is complete: a failure while writing leaves it (and
    no staging folder); a success replaces it with exactly the new steps."""
    out = tmp_path / "out"
    assert main_inproc("synth", str(MIXED), "--out", str(out), "--batch", "4", "--vocab", "1000", "--num-steps", "3")[0] == 0
    old = _tree(out)
    import replay_harness.recording.derive as derive

    real_steps = derive.derive_steps

    def one_then_full(*a, **k):  # the disk fills after the first new step
        for i, item in enumerate(real_steps(*a, **k)):
            if i == 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            yield item

    monkeypatch.setattr(derive, "derive_steps", one_then_full)
    code, _, err = main_inproc("synth", str(MIXED), "--out", str(out), "--overwrite", "--batch", "4", "--vocab",
                               "1000", "--num-steps", "2")
    assert code == 3 and _tree(out) == old, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    monkeypatch.undo()
    code, _, err = main_inproc("synth", str(MIXED), "--out", str(out), "--overwrite", *SYNTH)
    assert code == 0, err
    assert sorted(p.name for p in (out / "steps").iterdir()) == ["step-000000.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~_umask()


def test_synth_overwrite_refuses_a_folder_that_is_not_a_recording(tmp_path):
    out = tmp_path / "home"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = main_inproc("synth", str(MIXED), "--out", str(out), "--overwrite", *SYNTH)
    assert code == 2 and "not a recording" in _one_error(err) and (out / "notes.txt").read_text() == "mine"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _specials(tmp_path: Path) -> list[Path]:
    """A FIFO, a Unix socket and (root only) a character device node c 1 3 (the null device) in ``tmp_path``."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    sock.close()
    nodes = [fifo, sock_path]
    if os.geteuid() == 0:
        dev = tmp_path / "null"
        try:
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            nodes.append(dev)
        except OSError:
            pass
    return nodes


def _same_node(path: Path, before: os.stat_result) -> bool:
    after = os.lstat(path)
    return (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)


@pytest.mark.parametrize("args", [
    ("inspect", str(MIXED), "--json", "--json-file", "{}"),
    ("validate", str(MIXED), "--json-file", "{}"),
    ("synth", str(MIXED), "--out", "{}", *SYNTH),
    ("bench", str(MIXED), "--impl", "reference", "--csv", "{}"),
    ("bench", str(MIXED), "--impl", "reference", "--png", "{}"),
])
def test_special_file_as_output_path_is_exit_2_and_left_alone(tmp_path, args):
    """--json-file, --out, --csv, --png naming a FIFO, a socket or a device: exit 2 before any work, one line
    naming it, the node unchanged (never opened: a FIFO would block; never replaced by a regular file)."""
    nodes = _specials(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    for node in nodes:
        before = os.lstat(node)
        argv = [a.replace("{}", str(node)) for a in args]
        code, out, err = main_inproc(*argv)
        assert code == 2, (argv, out, err)
        line = _one_error(err)
        assert str(node) in line and "not a regular file or folder" in line, line
        assert _same_node(node, before), argv
        assert sorted(p.name for p in tmp_path.iterdir()) == names  # nothing written beside it either


def test_json_file_through_a_symlink_to_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "link").symlink_to(fifo)
    code, _, err = main_inproc("inspect", str(MIXED), "--json-file", str(tmp_path / "link"))
    assert code == 2 and "is a FIFO" in _one_error(err) and (tmp_path / "link").is_symlink()


def test_json_file_written_after_the_check_names_the_path_on_failure(tmp_path, monkeypatch):
    """A --json-file write that fails after its check (disk full) is exit 3 naming the path; a FIFO put
    there after the check is left alone (exit 2)."""
    import replay_harness.cli.common as common

    target = tmp_path / "doc.json"

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    code, _, err = main_inproc("inspect", str(MIXED), "--json-file", str(target))
    monkeypatch.undo()
    assert code == 3, err
    line = _one_error(err)
    assert f"--json-file {target}" in line and "no space left on device" in line
    assert list(tmp_path.iterdir()) == []  # no temp file left

    real_check = common.check_json_file

    def check_then_fifo(path, inputs=()):
        real_check(path, inputs)
        os.mkfifo(path)

    monkeypatch.setattr(common, "check_json_file", check_then_fifo)
    import replay_harness.cli.inspect as inspect_cli

    monkeypatch.setattr(inspect_cli, "check_json_file", check_then_fifo)
    code, _, err = main_inproc("inspect", str(MIXED), "--json-file", str(target))
    assert code == 2 and "is a FIFO" in err and stat.S_ISFIFO(os.lstat(target).st_mode), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json"]


def test_disk_full_while_writing_a_recording_names_the_file(tmp_path, monkeypatch):
    """ENOSPC from the recording writer (what `record` and `synth` share) names the file being written."""
    import replay_harness.recording.store as store

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.os, "fsync", full)
    code, _, err = main_inproc("synth", str(MIXED), "--out", str(tmp_path / "out"), *SYNTH)
    assert code == 3, err
    line = _one_error(err)
    assert "No space left on device" in line and ("manifest.json" in line or ".safetensors" in line), line
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []
