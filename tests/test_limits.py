"""Hostile input (issue 16): resource limits checked before allocation, only regular files read, no command
writing over its input, temp-file orphans reported, Ctrl-C honoured. Every test is seconds and allocates
nothing large: oversize claims are crafted safetensors headers or sparse files."""
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest

from helpers import main_inproc, write_recording
from replay_harness import limits
from replay_harness.errors import InputError, UsageError
from replay_harness.recording.derive import check_shape, write_derived
from replay_harness.recording.store import Recording
from replay_harness.recording.synthetic import Case

CASE = Case("lim", vocab_size=40, num_requests=2, max_drafts=2, steps=2, temperatures=(0.0, 1.0),
            features=frozenset())
ROOT = os.geteuid() == 0  # root reads a file with mode 000: the permission tests need another user


@pytest.fixture()
def rec(tmp_path):
    return write_recording(tmp_path / "rec", CASE)


def run_cli(*args, env=None, timeout=60):
    """`replay ARGS` in a subprocess under a timeout (a hang fails the test instead of blocking it)."""
    p = subprocess.run([sys.executable, "-m", "replay_harness.cli", *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env={**os.environ, **(env or {})})
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, p.stdout, p.stderr


def step_file(rec, i=0):
    return rec / "steps" / f"step-{i:06d}.safetensors"


def craft_step(path, header, data=b"\0" * 64):
    """A safetensors file holding ``header`` (its JSON) and ``data``, whatever the header claims."""
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


def one_error_line(err):
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1, err
    return lines[0]


# ----------------------------------------------------------------------------- the limits themselves
def test_limit_values_and_env(monkeypatch):
    assert limits.value(limits.MAX_VOCAB) == 1_048_576
    assert limits.value(limits.MAX_STEP_BYTES) == 16 << 30
    assert limits.value(limits.MAX_MANIFEST_BYTES) == 16 << 20
    monkeypatch.setenv("REPLAY_MAX_VOCAB", "2_000_000")
    assert limits.value(limits.MAX_VOCAB) == 2_000_000
    monkeypatch.setenv("REPLAY_MAX_VOCAB", "lots")
    with pytest.raises(UsageError, match="REPLAY_MAX_VOCAB"):
        limits.value(limits.MAX_VOCAB)


def test_manifest_vocab_over_limit(rec, monkeypatch):
    m = json.loads((rec / "manifest.json").read_text())
    m["vocab_size"] = 2 ** 27
    (rec / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(InputError) as e:
        Recording(rec)
    assert e.value.field == "vocab_size" and "REPLAY_MAX_VOCAB" in str(e.value) and "1,048,576" in str(e.value)
    monkeypatch.setenv("REPLAY_MAX_VOCAB", str(2 ** 28))
    assert Recording(rec).vocab_size == 2 ** 27  # raised: opens (the steps then disagree with V, as they should)


def test_manifest_bytes_over_limit_sparse(rec):
    """A 17 MiB manifest (sparse: 1 KB on disk) is refused from its size, never read."""
    os.truncate(rec / "manifest.json", 17 << 20)
    code, out, err = run_cli("validate", rec, timeout=30)
    assert code == 2
    line = one_error_line(err)
    assert "manifest.json" in line and "REPLAY_MAX_MANIFEST_BYTES" in line and "16,777,216" in line


def test_step_header_claims_over_limit(rec):
    """An 8 KB step whose header claims 32 GiB: exit 2 naming file, step, the limit and the variable."""
    craft_step(step_file(rec, 1), {"logits": {"dtype": "F32", "shape": [8192, 1 << 20],
                                              "data_offsets": [0, 8192 * (1 << 20) * 4]}}, b"\0" * 8000)
    for command in ("validate", "run"):
        code, out, err = run_cli(command, rec, timeout=60)
        assert code == 2, (command, out, err)
        text = err if command == "run" else out
        line = [ln for ln in text.splitlines() if "REPLAY_MAX_STEP_BYTES" in ln][0]
        assert "step-000001.safetensors" in line and "step 1" in line and "17,179,869,184" in line


def test_step_vocab_over_limit_issue_case(rec):
    """The issue's case: V = 2^27 logits (2 GiB claimed) in a small file; refused by the vocabulary limit."""
    v = 1 << 27
    craft_step(step_file(rec, 0), {"logits": {"dtype": "F32", "shape": [4, v], "data_offsets": [0, 4 * v * 4]}})
    r = Recording(rec)
    with pytest.raises(InputError) as e:
        r[0]
    assert e.value.step == 0 and e.value.field == "logits" and "REPLAY_MAX_VOCAB" in str(e.value)


def test_step_file_size_over_limit_sparse(rec, monkeypatch):
    """A sparse step file larger than REPLAY_MAX_STEP_BYTES is refused from its size on disk."""
    os.truncate(step_file(rec, 1), 2 << 30)  # 2 GiB apparent, nothing allocated
    monkeypatch.setenv("REPLAY_MAX_STEP_BYTES", str(1 << 30))
    with pytest.raises(InputError, match="REPLAY_MAX_STEP_BYTES") as e:
        Recording(rec)[1]
    assert e.value.step == 1 and "1,073,741,824" in str(e.value)


def test_synth_step_size_over_limit():
    with pytest.raises(InputError, match="REPLAY_MAX_STEP_BYTES"):
        check_shape(100_000_000, 0, 262_144, 1)


def test_synth_vocab_below_the_kept_head_is_refused_before_writing(tmp_path):
    """Trimming a V = 1000 source to V = 40 cannot keep each row's top-64 logits: exit 2, nothing written
    (it was an internal error, exit 3)."""
    out = tmp_path / "small"
    code, _, err = main_inproc("synth", "fixtures/synthetic-mixed", "--out", str(out), "--vocab", "40", "--batch", "2",
                               "--steps", "1")
    assert code == 2 and "--vocab 40" in err and "at least 64" in err
    assert not out.exists()


# ----------------------------------------------------------------------------- only regular files
@pytest.mark.parametrize("target", ["step", "manifest"])
def test_fifo_is_refused_at_once(rec, target):
    path = step_file(rec, 1) if target == "step" else rec / "manifest.json"
    path.unlink()
    os.mkfifo(path)
    t = time.time()
    code, out, err = run_cli("validate", rec, timeout=30)  # a hang would raise TimeoutExpired
    assert code == 2 and time.time() - t < 30
    text = out + err
    assert "FIFO" in text and path.name in text


def test_symlink_to_fifo_is_refused(rec, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    step_file(rec, 0).unlink()
    step_file(rec, 0).symlink_to(fifo)
    with pytest.raises(InputError, match="FIFO") as e:
        Recording(rec)[0]
    assert e.value.step == 0


def test_permission_denied_is_named(rec, monkeypatch):
    r = Recording(rec)
    if ROOT:  # root reads mode 000: make the access check answer as it would for a user
        monkeypatch.setattr(limits.os, "access", lambda path, mode: False)
    else:
        step_file(rec, 1).chmod(0)
    with pytest.raises(InputError, match="permission denied") as e:
        r[1]
    assert e.value.step == 1 and "No such file" not in str(e.value)


def test_unreadable_steps_folder_is_named(rec, monkeypatch):
    if ROOT:
        def deny(path):
            raise PermissionError(13, "Permission denied", str(path))
        monkeypatch.setattr("replay_harness.recording.store.os.listdir", deny)
    else:
        (rec / "steps").chmod(0)
    try:
        with pytest.raises(InputError, match=r"cannot list the step files \(permission denied\)"):
            Recording(rec)
    finally:
        (rec / "steps").chmod(0o755)


# ----------------------------------------------------------------------------- no data loss
def test_synth_out_is_source_refused_before_anything_is_deleted(rec):
    before = {p.name: p.read_bytes() for p in sorted((rec / "steps").iterdir())}
    manifest = (rec / "manifest.json").read_bytes()
    code, out, err = run_cli("synth", rec, "--out", rec, "--overwrite", "--batch", "2", "--vocab", "64")
    assert code == 2 and "is the input" in err, err
    assert {p.name: p.read_bytes() for p in sorted((rec / "steps").iterdir())} == before
    assert (rec / "manifest.json").read_bytes() == manifest


@pytest.mark.parametrize("where", ["inside", "contains"])
def test_synth_out_inside_or_around_source_refused(rec, where):
    out = rec / "steps" / "x" if where == "inside" else rec.parent
    with pytest.raises(UsageError, match=f"{'is inside' if where == 'inside' else 'contains'} the input"):
        write_derived(rec, out, batch=2, drafts=0, vocab=64, overwrite=True)
    assert not (rec / "steps" / "x").exists() and len(Recording(rec)) == CASE.steps


def test_record_out_around_an_input_refused(tmp_path):
    from replay_harness.record.pipeline import RecordOptions, _out_folder

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hi\n")
    for out, opts in ((model, {"model": str(model)}), (tmp_path, {"model": str(model)}),
                      (prompts, {"inputs": [str(prompts)]})):
        with pytest.raises(UsageError, match="the input"):
            _out_folder(RecordOptions(out_path=str(out), overwrite=True, **opts))
    assert (model / "config.json").exists() and prompts.read_text() == "hi\n"


def test_validate_reports_and_cleans_tmp_orphans(rec):
    orphan = rec / "steps" / ".step-000002.safetensors.k3j4h5.tmp"
    orphan.write_bytes(b"half a step")
    code, out, err = run_cli("validate", rec)
    assert code == 0, (out, err)
    line = [ln for ln in out.splitlines() if orphan.name in ln][0]
    assert line.startswith("warning:") and "--clean-tmp" in line
    code, out, err = run_cli("validate", rec, "--clean-tmp")
    assert code == 0 and not orphan.exists() and f"removed {orphan}" in out
    assert Recording(rec).temp_files() == []


# ----------------------------------------------------------------------------- version, Ctrl-C, warnings
def test_version():
    code, out, err = run_cli("--version")
    assert code == 0 and out.startswith("replay ") and len(out.split()) == 2


@contextlib.contextmanager
def child(args: list[str], **kw):
    """A child process (text pipes) that is killed on the way out if a check failed before it ended."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()


def interrupt(p: subprocess.Popen) -> tuple[str, float]:
    """Ctrl-C to a running child: (its stderr, seconds from the signal until it exited)."""
    t = time.time()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=10)
    return err, time.time() - t


def test_ctrl_c_ends_verify_with_130():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    with child([sys.executable, "-m", "replay_harness.cli", "verify", "--trials", "1000000"], env=env) as p:
        time.sleep(4)
        assert p.poll() is None, p.communicate()
        err, took = interrupt(p)
    assert p.returncode == 130 and took < 3, (p.returncode, err)
    assert err.strip().splitlines()[-1] == "replay: interrupted" and "Traceback" not in err


def test_ctrl_c_ends_a_command_that_does_not_unwind():
    """The grace period: a main thread that keeps working after Ctrl-C is ended anyway, with exit 130."""
    code = ("import time\nfrom replay_harness.cli import _watch_interrupts\n_watch_interrupts()\nprint('ready', "
            "flush=True)\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    time.sleep(60)\n")
    with child([sys.executable, "-c", code]) as p:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # into the try block
        err, took = interrupt(p)
    assert p.returncode == 130 and took < 3 and "replay: interrupted" in err


def test_triton_interpreter_warnings_filtered():
    from replay_harness.cli import _quiet_warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _quiet_warnings()
        warnings.warn_explicit("overflow encountered in exp", RuntimeWarning, "interpreter.py", 1,
                               module="triton.runtime.interpreter")
        warnings.warn_explicit("a warning of ours", UserWarning, "x.py", 1, module="replay_harness.x")
    assert [str(w.message) for w in seen] == ["a warning of ours"]
