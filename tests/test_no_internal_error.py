"""No internal error for any input (issue 67 item 3; docs/HARDENING.md, "No internal error"): stdout and stderr
that fail (a full disk, a reader that left, a closed descriptor, an encoding that cannot hold the text), `bench
--plot-from` on special files and formula-like names, torchrun's variables, a deeply nested `source`, a step
file name ending in a newline, `--steps` of 40,000 steps, `--trials` past its bound: one line and a documented
exit code, never a traceback or "internal error".

Recordings used: copies of the committed fixtures synthetic-plain and real-founding.
"""
from __future__ import annotations

import io
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch  # noqa: F401  (imported before pytester's in-process runs, which drop modules first imported in them)

import replay_harness.api  # noqa: F401
import replay_harness.compare.runner  # noqa: F401
import replay_harness.impls.reference  # noqa: F401
import replay_harness.recording.store  # noqa: F401
from helpers import main_inproc

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
PLAIN = REPO / "fixtures" / "synthetic-plain"
FOUNDING = REPO / "fixtures" / "real-founding"


def _replay(*args: str, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env: dict | None = None,
            timeout: float = 120, limit_as: int | None = None) -> tuple[int, bytes, bytes]:
    """`python -m replay_harness.cli ARGS` as a child with the given stdout / stderr (a file, a descriptor,
    None: inherited); ``limit_as``: an address-space cap in bytes (a runaway read fails instead of eating RAM)."""
    def cap():
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    p = subprocess.run([sys.executable, "-m", "replay_harness.cli", *args], stdout=stdout, stderr=stderr,
                       stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, timeout=timeout,
                       preexec_fn=cap, cwd=REPO)
    return p.returncode, p.stdout or b"", p.stderr or b""


def _one_line(err: str, kind: str = "error") -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"replay: {kind}: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    return lines[0]


class _Failing(io.TextIOBase):
    """A text stream whose writes fail with ``errno`` (after ``after`` characters got through)."""

    def __init__(self, errno_: int, after: int = 0):
        self.errno_, self.left, self.got = errno_, after, []

    def write(self, text: str) -> int:
        if self.left < len(text):
            raise OSError(self.errno_, os.strerror(self.errno_))
        self.left -= len(text)
        self.got.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def _main_with_stdout(stream, *args: str) -> tuple[int, str]:
    """`replay ARGS` in this process with ``stream`` as stdout: (exit code, stderr)."""
    import contextlib

    from replay_harness import cli as replay_cli

    err, saved = io.StringIO(), sys.argv
    sys.argv = ["replay", *args]
    try:
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(err):
            try:
                replay_cli.main()
                code = 0
            except SystemExit as e:
                code = e.code
    finally:
        sys.argv = saved
    return code, err.getvalue()


# ----------------------------------------------------------------------------- stdout and stderr
def test_stdout_on_a_full_disk_is_exit_3_with_one_line():
    with open("/dev/full", "w") as full:
        code, _, err = _replay("impls", stdout=full)
    assert code == 3, err
    assert "cannot write to stdout (No space left on device)" in _one_line(err.decode())


def test_a_reader_that_left_is_not_a_divergence():
    """`replay impls | head -0`: the reader is gone before the first byte; exit 0 (the command's own code), silent."""
    r, w = os.pipe()
    os.close(r)
    try:
        code, _, err = _replay("impls", stdout=w)
    finally:
        os.close(w)
    assert (code, err) == (0, b"")


def test_a_reader_that_left_keeps_a_real_divergence():
    """EPIPE drops the rest of stdout and the command runs to its verdict: exit 1 is the divergence, not the pipe."""
    code, err = _main_with_stdout(_Failing(32), "run", str(FOUNDING), "--impl", "greedy-only", "--device", "cpu",
                                  "--quiet")
    assert code == 1 and "Traceback" not in err and "internal error" not in err, err


@pytest.mark.parametrize("args, expected", [(("impls",), 0), (("inspect", "no/such/recording"), 2)])
def test_closed_stdout_or_stderr_is_no_traceback(args, expected):
    """`replay ... >&-` and `2>&-`: what goes there is dropped (as into /dev/null), the exit code is the command's."""
    for closed in ("stdout", "stderr"):
        code, out, err = _closed(closed, *args)
        assert code == expected, (closed, out, err)
        assert b"Traceback" not in out + err, (closed, err)


def _closed(which: str, *args: str) -> tuple[int, bytes, bytes]:
    """`replay ARGS` with descriptor 1 (``which`` = "stdout") or 2 closed, through the shell."""
    redirect = ">&-" if which == "stdout" else "2>&-"
    cmd = f'"{sys.executable}" -m replay_harness.cli {" ".join(args)} {redirect}'
    p = subprocess.run(["sh", "-c", cmd], capture_output=True, cwd=REPO, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_stderr_on_a_full_disk_keeps_the_exit_code():
    with open("/dev/full", "w") as full:
        code, out, _ = _replay("inspect", "no/such/recording", stderr=full)
    assert code == 2 and b"Traceback" not in out


def test_an_error_with_json_on_a_full_stdout_keeps_its_own_line_and_code():
    code, err = _main_with_stdout(_Failing(28), "inspect", "no/such/recording", "--json")
    assert code == 2
    assert "no such file or directory" in _one_line(err)


def test_a_json_document_lost_on_a_full_disk_is_exit_3():
    code, err = _main_with_stdout(_Failing(28, after=10), "inspect", str(PLAIN), "--json")
    assert code == 3
    assert "cannot write to stdout" in _one_line(err)


def test_text_the_stdout_encoding_cannot_hold_is_escaped(tmp_path):
    """PYTHONIOENCODING=ascii: a recording folder named outside ASCII is written with a backslash escape, exit 0."""
    rec = tmp_path / "naïve-rec"
    shutil.copytree(PLAIN, rec)
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="strict", write_through=True)
    code, err = _main_with_stdout(stream, "inspect", str(rec))
    assert code == 0 and err == "", err
    assert b"na\\xefve" in raw.getvalue()


# ----------------------------------------------------------------------------- bench --plot-from
def _plot_from(path: str, tmp_path: Path, **kwargs) -> tuple[int, str]:
    code, _, err = _replay("bench", "--plot-from", path, "--png", str(tmp_path / "out.png"), **kwargs)
    return code, err.decode()


def test_plot_from_a_fifo_does_not_block(tmp_path):
    """Before any check a FIFO blocked the open for ever: a writer comes after 20 s so a blocked run still ends."""
    fifo = tmp_path / "bench.csv"
    os.mkfifo(fifo)

    def unblock():
        time.sleep(20)
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass

    threading.Thread(target=unblock, daemon=True).start()
    t0 = time.monotonic()
    code, err = _plot_from(str(fifo), tmp_path)
    assert time.monotonic() - t0 < 20
    assert code == 2 and "is a FIFO, not a regular file" in _one_line(err)


def test_plot_from_dev_zero_is_refused_at_once(tmp_path):
    code, err = _plot_from("/dev/zero", tmp_path, timeout=60, limit_as=4 << 30)
    assert code == 2 and "is a character device" in _one_line(err)


def test_plot_from_an_oversize_file_is_refused(tmp_path):
    big = tmp_path / "big.csv"
    with open(big, "wb") as f:
        f.truncate(17 << 20)  # sparse: no disk used
    code, out, err = main_inproc("bench", "--plot-from", str(big), "--png", str(tmp_path / "out.png"))
    assert code == 2 and "over the 16,777,216 bytes" in _one_line(err)


def test_plot_from_a_csv_without_a_plotted_column_is_exit_2(tmp_path):
    """The long layout with the `label` column under another name read as rows, then KeyError in the plot."""
    header = ("case,impl,lbl,side,family,overrides,recording,data,step,group,route_mix,vocab,requests,rows,"
              "max_drafts,top_p,dtype,mode,timed,clock,round,l2_policy,verdict,error,statistic,value,unit")
    ident = "rec#0,reference,reference,A,,,rec,synthetic,0,all,random-sample,3001,8,8,0,,float32,,sample,cpu-wall,,l2,"
    lines = [header, "environment" + "," * 24 + "gpu,cpu,"]
    lines += [f"{ident}conclusive,,{stat},1.5,us" for stat in ("median_us", "p20_us", "p80_us")]
    csv_path = tmp_path / "bench.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    code, _, err = main_inproc("bench", "--plot-from", str(csv_path), "--png", str(tmp_path / "out.png"))
    assert code == 2 and "not a `replay bench` CSV" in _one_line(err)


def test_a_recording_name_with_mathtext_is_plotted_as_text(tmp_path):
    """`$...$` in a recording name was parsed as a formula by matplotlib, an internal error after the tables."""
    pytest.importorskip("matplotlib")
    from replay_harness.bench.report import read_csv

    csv_path = tmp_path / "bench.csv"
    rec = tmp_path / "rec$\\frac{1}{$bad_^"
    shutil.copytree(PLAIN, rec)
    code, _, err = main_inproc("bench", str(rec), "--impl", "reference", "--device", "cpu", "--repeats", "1",
                               "--warmup", "0", "--csv", str(csv_path), "--quiet")
    assert code == 0, err
    assert any("$" in r["recording"] for r in read_csv(csv_path))
    code, out, err = main_inproc("bench", "--plot-from", str(csv_path), "--png", str(tmp_path / "out.png"))
    assert code == 0 and err == "", err
    assert (tmp_path / "out.png").stat().st_size > 0


# ----------------------------------------------------------------------------- torchrun's variables
@pytest.mark.parametrize("env, named", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc'"),
    ({"WORLD_SIZE": str(1 << 40)}, "WORLD_SIZE="),
    ({"WORLD_SIZE": "2"}, "RANK is not set"),
    ({"WORLD_SIZE": "2", "RANK": "x"}, "RANK='x'"),
    ({"WORLD_SIZE": "2", "RANK": "5"}, "RANK='5'"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "zz"}, "LOCAL_RANK='zz'"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE='0'"),
])
def test_torchrun_variables_missing_or_malformed_are_one_line(env, named, monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = main_inproc("run", str(PLAIN), "--impl", "reference", "--device", "cpu", "--quiet", **env)
    assert code == 3 and named in _one_line(err)


def test_a_refused_rendezvous_is_one_line_not_a_cpp_stack():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "REPLAY_DIST_TIMEOUT": "1"}
    code, _, err = _replay("run", str(PLAIN), "--impl", "reference", "--device", "cpu", "--quiet", env=env)
    assert code == 3
    assert "cannot join the gloo process group" in _one_line(err.decode())


# ----------------------------------------------------------------------------- recordings
def test_inspect_json_prints_a_deeply_nested_source(tmp_path):
    rec = tmp_path / "rec"
    shutil.copytree(PLAIN, rec)
    text = (rec / "manifest.json").read_text().rstrip()
    assert text.endswith("}")
    (rec / "manifest.json").write_text(text[:-1] + ', "source": ' + '{"a": ' * 600 + "1" + "}" * 600 + "}")
    code, out, err = main_inproc("inspect", str(rec), "--json")
    assert code == 0 and err == "", err
    deep = json.loads(out)["recordings"][0]["source"]
    for _ in range(600):
        deep = deep["a"]
    assert deep == 1


def test_a_step_file_name_ending_in_a_newline_is_not_a_step(tmp_path):
    from replay_harness.recording.store import Recording

    rec = tmp_path / "rec"
    shutil.copytree(PLAIN, rec)
    shutil.copy(rec / "steps" / "step-000002.safetensors", rec / "steps" / "step-000003.safetensors\n")
    assert len(Recording(rec)) == 3
    code, out, err = main_inproc("validate", str(rec))
    assert code == 0, (out, err)


def test_steps_parse_in_linear_time():
    """--steps naming 40,000 steps took 24 s (each index looked up in a list)."""
    from replay_harness.checks.verify import parse_steps

    t0 = time.monotonic()
    assert parse_steps(",".join(map(str, range(40_000))), 40_000) == list(range(40_000))
    assert parse_steps("0-39999,7,7,0-5", 40_000) == list(range(40_000))
    assert time.monotonic() - t0 < 2.0


@pytest.mark.parametrize("text, reason", [("²", "cannot read '²'"), ("9" * 5000, "does not exist"),
                                          ("0-" + "9" * 5000, "step 3 does not exist")],
                         ids=["unicode-digit", "5000-digits", "range-to-5000-digits"])
def test_steps_that_are_no_index_are_one_clear_line(text, reason):
    code, _, err = main_inproc("run", str(PLAIN), "--impl", "reference", "--device", "cpu", "--steps", text)
    assert code == 2 and reason in _one_line(err, "error")


def test_trials_past_the_bound_is_exit_2():
    code, _, err = main_inproc("verify", "--trials", str(10 ** 30))
    assert code == 2 and "--trials must be from 2 to 1,000,000" in _one_line(err)


# ----------------------------------------------------------------------------- the cases fixed in record, stepfile, the plugin


def test_a_folder_name_that_is_not_utf8_is_readable(tmp_path):
    rec = tmp_path / os.fsdecode(b"rec-\xff")
    shutil.copytree(PLAIN, rec)
    code, out, err = main_inproc("run", str(rec), "--impl", "reference", "--device", "cpu", "--quiet")
    assert code == 0, err


@pytest.mark.parametrize("content, suffix, reason", [
    (b"\xff\xfe not utf-8\n", ".txt", "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, ".json", "not valid JSON"),
    (b'["' + b"x" * 10 + b'", ' + b"7" * 5000 + b"]", ".json", "not valid JSON"),
], ids=["undecodable", "nested-100000-deep", "5000-digit-number"])
def test_prompts_files_that_cannot_be_prompts_are_one_line(tmp_path, content, suffix, reason):
    from replay_harness.cli.record import read_prompts
    from replay_harness.errors import ReplayError

    path = tmp_path / f"prompts{suffix}"
    path.write_bytes(content)
    with pytest.raises(ReplayError, match=reason):
        read_prompts(None, str(path))


def test_an_oversize_prompts_file_is_refused_before_it_is_read(tmp_path):
    from replay_harness.cli.record import read_prompts
    from replay_harness.errors import ReplayError

    path = tmp_path / "prompts.txt"
    with open(path, "wb") as f:
        f.truncate(64 << 20)  # sparse
    with pytest.raises(ReplayError, match="over the"):
        read_prompts(None, str(path))


def test_record_batch_has_an_upper_bound():
    """Parsed only, never run: `record --batch 1000000000` allocates some 23 GB before anything else fails."""
    import typer.main

    from replay_harness.cli import app

    record = typer.main.get_command(app).commands["record"]
    with pytest.raises(Exception, match="65536"):
        record.make_context("record", ["--batch", str(10 ** 9)])


BOOM = """
from replay_harness.impls import register


class Boom:
    name = "boom"

    def sample(self, step):
        raise RuntimeError("boom in the sampler")


register("boom", Boom)
"""


def test_the_plugin_prints_folder_names_escaped(pytester):
    shutil.copytree(PLAIN, pytester.path / "recs" / "x\nreplay: error: FORGED \x1b[2J")
    pytester.makeini("[pytest]\nreplay_recordings = recs\nreplay_device = cpu\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert "\x1b" not in text and not any(ln.startswith("replay: error: FORGED") for ln in text.splitlines())


def test_a_plugin_failure_that_is_no_assertion_is_short(pytester):
    shutil.copytree(PLAIN, pytester.path / "recs" / "plain")
    pytester.makeini("[pytest]\nreplay_recordings = recs\nreplay_device = cpu\n")
    pytester.makeconftest(BOOM)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--replay-impl", "boom")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: boom in the sampler*"])
    assert len(result.stdout.lines) < 40, len(result.stdout.lines)


def test_a_recording_folder_swapped_for_a_symlink_while_read_is_bad_input(monkeypatch):
    """The symlink-race fuzz kind: the recording folder exchanged with a symlink while `inspect` resolves it
    (realpath's lstat saw a link, its readlink a folder: EINVAL naming the path). Exit 2, one line naming the
    path; before, exit 3 ("Invalid argument"), as if the machine were at fault."""
    import errno as errno_

    import replay_harness.recording.discover as discover

    def swapped(path, *a, **kw):
        raise OSError(errno_.EINVAL, "Invalid argument", str(path))

    monkeypatch.setattr(discover.os.path, "realpath", swapped)
    code, _, err = main_inproc("inspect", str(PLAIN))
    monkeypatch.undo()
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"replay: error: {PLAIN}: Invalid argument (the path changed")


def test_an_interrupt_landing_in_a_finalizer_is_delivered_later_not_lost(monkeypatch):
    """The signal-write fuzz kind: SIGINT landing while garbage collection runs a weakref callback. Python's
    handler raised KeyboardInterrupt there, which Python prints as "Exception ignored in ..." with a traceback
    and drops (the command ran on to exit 0). replay's handler (``cli.interrupt``) sends the signal again 10 ms
    later instead, to land in the command's own code; anywhere else it raises at once."""
    import signal
    from types import SimpleNamespace

    from replay_harness import cli

    sent = []
    monkeypatch.setattr(cli.os, "kill", lambda pid, signum: sent.append((pid, signum)))
    finalizer = SimpleNamespace(f_code=SimpleNamespace(co_name="_remove", co_filename="/usr/lib/_weakrefset.py"))
    cli.interrupt(signal.SIGINT, finalizer)  # no KeyboardInterrupt here
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sent == [(os.getpid(), signal.SIGINT)]
    own = SimpleNamespace(f_code=SimpleNamespace(co_name="write_step", co_filename="/x/replay_harness/store.py"))
    with pytest.raises(KeyboardInterrupt):
        cli.interrupt(signal.SIGTERM, own)
