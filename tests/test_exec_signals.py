"""An `exec:` program never outlives replay and never grows replay's memory without bound (docs/EXTERNAL.md,
"Caps" and "Process group"; issue 55, items 4 and 5; issue 67, item 2): SIGINT and SIGTERM while the program
hangs are exit 130 well under a second with the program's whole process group gone (also a program that
ignores SIGTERM and has a child in the background); SIGHUP, SIGQUIT and SIGKILL to replay, and SIGTERM and
SIGHUP to pytest under the plugin, leave nothing of the group either (the watcher); the timeout, an error
and a normal close kill the group too; a reply line past REPLAY_MAX_REPLY_BYTES, a stderr flood past
REPLAY_MAX_STDERR_BYTES or replies of 60 MB of notes step after step are exit 3 at once, one line, with
bounded RSS.

Recording used: the committed fixture synthetic-mixed (SYNTHETIC).
"""
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import main_inproc
from tools.fuzz.hostile_kinds import alive_in

REPO = Path(__file__).resolve().parent.parent
MIXED = str(REPO / "fixtures" / "synthetic-mixed")
HANDSHAKE = '{"protocol": "replay.exec/1", "name": "hostile", "rng_contract": "none"}'

# A program that answers the handshake, reads the first step, starts `sleep 1000` in the background, writes
# its process group to PGID_FILE, then does BEHAVIOUR (hang, flood stdout, flood stderr).
PROGRAM = f"""\
#!{sys.executable}
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ignores SIGTERM (so does its child): only SIGKILL ends it
print({HANDSHAKE!r}, flush=True)
sys.stdin.readline()
subprocess.Popen(["sleep", "1000"], preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
with open(os.environ["PGID_FILE"] + ".tmp", "w") as f:
    f.write(str(os.getpgrp()))
os.rename(os.environ["PGID_FILE"] + ".tmp", os.environ["PGID_FILE"])
BEHAVIOUR
"""
BEHAVIOURS = {
    "hang": "time.sleep(1000)",
    "flood-stdout": "chunk = b'x' * (1 << 20)\nwhile True:\n    os.write(1, chunk)",
    "flood-stderr": "chunk = b'e' * (1 << 20)\nwhile True:\n    os.write(2, chunk)",
    "flood-lines": "chunk = b'not a reply\\n' * 100000\nwhile True:\n    os.write(1, chunk)",
}


def _program(tmp_path: Path, behaviour: str) -> Path:
    prog = tmp_path / f"{behaviour}.py"
    prog.write_text(PROGRAM.replace("BEHAVIOUR", textwrap.dedent(BEHAVIOURS[behaviour])))
    prog.chmod(0o755)
    return prog


def _wait_gone(pgid: int, seconds: float = 2.0) -> list[int]:
    """PIDs of process group ``pgid`` still running after up to ``seconds`` (tools/fuzz/hostile_kinds.alive_in)."""
    end = time.monotonic() + seconds
    while (alive := alive_in([pgid])) and time.monotonic() < end:
        time.sleep(0.02)
    return alive


def _no_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGQUIT's default action dumps core


def _start(tmp_path: Path, behaviour: str, *extra: str, argv: list[str] | None = None) -> tuple[subprocess.Popen, Path]:
    """``replay run MIXED --impl exec:PROGRAM EXTRA`` (or ``argv`` + the program) as a child; the program's
    process group lands in the returned file."""
    pgid_file = tmp_path / f"{behaviour}.pgid"
    env = dict(os.environ, PGID_FILE=str(pgid_file))
    env.pop("REPLAY_DEBUG", None)
    prog = _program(tmp_path, behaviour)
    argv = [*argv, f"exec:{prog}"] if argv else ["-m", "replay_harness.cli", "run", MIXED, "--impl", f"exec:{prog}"]
    proc = subprocess.Popen([sys.executable, *argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=tmp_path, preexec_fn=_no_core)
    return proc, pgid_file


def _pgid(proc: subprocess.Popen, pgid_file: Path, seconds: float = 120.0) -> int:
    end = time.monotonic() + seconds
    while not pgid_file.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the program never started"
        time.sleep(0.02)
    return int(pgid_file.read_text())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_a_program_hangs_is_130_fast_and_leaves_nothing(tmp_path, signum):
    proc, pgid_file = _start(tmp_path, "hang")
    try:
        pgid = _pgid(proc, pgid_file)
        time.sleep(0.2)  # replay is waiting for the reply
        start = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=10)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
    alive = _wait_gone(pgid, 0.5)
    for pid in alive:  # never leave them behind, whatever the verdict
        os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert took < 0.7, took
    assert err.decode().strip().splitlines()[-1] == "replay: interrupted"
    assert alive == [], alive


def _signal_and_count(proc: subprocess.Popen, pgid_file: Path, signum: int) -> list[int]:
    """Send ``signum`` once the program hangs; the PIDs of its group left 2 s after replay ended (killed)."""
    try:
        pgid = _pgid(proc, pgid_file)
        time.sleep(0.2)
        proc.send_signal(signum)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    alive = _wait_gone(pgid, 2.0)
    for pid in alive:  # never leave them behind, whatever the verdict
        os.kill(pid, signal.SIGKILL)
    return alive


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGQUIT, signal.SIGKILL])
def test_a_signal_that_ends_replay_by_default_ends_the_program_s_group(tmp_path, signum):
    """SIGHUP (the terminal closed), SIGQUIT (Ctrl-\\) and SIGKILL end replay by their default action, so no
    code of replay's runs: a watcher process outside the group sees replay's end and kills the group."""
    proc, pgid_file = _start(tmp_path, "hang")
    alive = _signal_and_count(proc, pgid_file, signum)
    assert proc.returncode == -signum and alive == [], (proc.returncode, alive)


PLUGIN_TEST = f"def test_replays(replay_check):\n    replay_check({MIXED!r})\n"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_pytest_under_the_plugin_ends_the_program_s_group(tmp_path, signum):
    """pytest keeps SIGTERM's and SIGHUP's default action: a replay_check through an exec: program that hangs,
    pytest signalled, nothing of the program's group left."""
    (tmp_path / "test_replays.py").write_text(PLUGIN_TEST)
    proc, pgid_file = _start(tmp_path, "hang", argv=["-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                     "test_replays.py", "--replay-device", "cpu", "--replay-impl"])
    alive = _signal_and_count(proc, pgid_file, signum)
    assert proc.returncode == -signum and alive == [], (proc.returncode, alive)


def test_timeout_kills_the_group(tmp_path):
    proc, pgid_file = _start(tmp_path, "hang", "--impl-timeout", "0.5")
    out, err = proc.communicate(timeout=120)
    pgid = int(pgid_file.read_text())
    alive = _wait_gone(pgid)
    assert proc.returncode == 3 and "within 0.5 s" in err.decode() and alive == [], (err, alive)


@pytest.mark.parametrize("behaviour,says", [
    ("flood-stdout", "is longer than 67,108,864 bytes without a newline"),
    ("flood-stderr", "wrote more than 67,108,864 bytes to stderr"),
])
def test_flood_is_exit_3_fast_with_bounded_memory(tmp_path, behaviour, says):
    """A program flooding stdout without a newline, or stderr, at the default caps: exit 3 within seconds of
    the flood's start (not at the 60 s step timeout), one line, the group gone, replay's peak RSS within
    400 MiB of a plain run."""
    proc, pgid_file = _start(tmp_path, behaviour)
    started: list[float] = []  # when the program began to flood (replay's start-up, torch's import, aside)
    peak_kb = _peak_kb(proc, lambda: started or not pgid_file.exists() or started.append(time.monotonic()))
    took = time.monotonic() - started[0]
    out, err = proc.communicate(timeout=60)
    err = err.decode()
    assert proc.returncode == 3, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("replay: error: ") and says in lines[0], err
    assert took < 30, took
    assert _wait_gone(int(pgid_file.read_text())) == []
    assert peak_kb < _baseline_rss_kb() + 400 * 1024, (peak_kb, _baseline_rss_kb())


# Valid replies (every request refused) carrying 600 notes of 100,000 characters: 60 MB a reply.
NOTES_PROGRAM = f"""\
#!{sys.executable}
import json, os, struct, sys
print({HANDSHAKE!r}, flush=True)
for line in sys.stdin:
    raw = open(line.strip(), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    a, b = hdr["cu_num_logits"]["data_offsets"]
    cu = struct.unpack("<%di" % hdr["cu_num_logits"]["shape"][0], raw[8 + n + a:8 + n + b])
    r, k = len(cu) - 1, max(cu[i + 1] - cu[i] - 1 for i in range(len(cu) - 1))
    reply = {{"tokens": [[-1] * (k + 1)] * r, "counts": [0] * r, "routes": ["refused"] * r,
              "notes": ["n" * 100000] * 600}}
    os.write(1, (json.dumps(reply) + "\\n").encode())
"""


def test_notes_do_not_grow_memory_step_after_step(tmp_path):
    """12 steps answered with 60 MB of notes each (the issue: 1.9 GB over 10 steps, every note kept; 860 MiB
    over a plain run here): a reply past its step's size (docs/EXTERNAL.md, "Caps") is refused unparsed, exit
    3 at the first step, one line; peak RSS within 400 MiB of a plain run."""
    from replay_harness.recording.store import Recording, RecordingWriter

    rec, mixed = tmp_path / "twelve", Recording(MIXED)
    with RecordingWriter(rec, vocab_size=mixed.vocab_size, rng_contract=mixed.rng_contract, synthetic=True) as w:
        for record in [*mixed] * 4:
            w.write_step(record.step, record.emitted)
    prog = tmp_path / "notes.py"
    prog.write_text(NOTES_PROGRAM)
    prog.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-m", "replay_harness.cli", "run", str(rec), "--impl", f"exec:{prog}",
                             "--quiet"], stdout=(tmp_path / "out").open("wb"),
                            stderr=subprocess.PIPE)  # a file: the notes printed must not fill a pipe
    peak_kb = _peak_kb(proc)
    err = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 3 and len(err.strip().splitlines()) == 1, err[-500:]
    assert f"reply to step 0 of {rec} is 60,002,735 bytes, over the 1,050,624 a reply to this step may have" in err, err
    assert peak_kb < _baseline_rss_kb() + 400 * 1024, (peak_kb, _baseline_rss_kb())


def test_many_lines_are_held_two_at_a_time(tmp_path, monkeypatch):
    """A program that floods short lines: the first is the (bad) reply, exit 3, nothing else buffered, and
    the reader threads end with the program (none left waiting on a queue nobody reads)."""
    import threading

    def readers() -> list:
        return [t for t in threading.enumerate() if t.name.startswith("replay-exec-")]

    monkeypatch.setenv("PGID_FILE", str(tmp_path / "pgid"))
    threads = len(readers())
    code, _, err = main_inproc("run", MIXED, "--impl", f"exec:{_program(tmp_path, 'flood-lines')}")
    assert code == 3 and "is not a JSON object: 'not a reply'" in err and len(err.splitlines()) == 1, err
    assert _wait_gone(int((tmp_path / "pgid").read_text())) == []
    end = time.monotonic() + 2.0
    while len(readers()) > threads and time.monotonic() < end:
        time.sleep(0.02)
    assert len(readers()) <= threads, readers()


def test_normal_close_kills_what_the_program_left_behind(tmp_path, monkeypatch):
    """A program that answers every step and exits on EOF, leaving `sleep 1000` behind: gone after the run."""
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f"#!/bin/sh\nsleep 1000 &\necho $(ps -o pgid= $$) > {tmp_path / 'pgid'}\n"
                       f"exec {sys.executable} -m replay_harness.impls.external_adapter reference\n")
    wrapper.chmod(0o755)
    code, out, err = main_inproc("run", MIXED, "--impl", f"exec:{wrapper}")
    assert code == 0, err
    assert _wait_gone(int((tmp_path / "pgid").read_text())) == []


_BASELINE: list[int] = []


def _peak_kb(proc: subprocess.Popen, tick=lambda: None) -> int:
    """The peak RSS (KiB) of a running child until it exits: its VmHWM, read every 10 ms (wait4's ru_maxrss
    would count this test process's RSS too, as of the child's exec); ``tick`` is called at each reading."""
    peak = 0
    while proc.poll() is None:
        tick()
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                peak = max([peak] + [int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:")])
        except OSError:
            pass
        time.sleep(0.01)
    return peak


def _baseline_rss_kb() -> int:
    """Peak RSS (KiB) of `replay run` through the built-in reference impl: what replay costs without a program."""
    if not _BASELINE:
        proc = subprocess.Popen([sys.executable, "-m", "replay_harness.cli", "run", MIXED, "--impl", "reference"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _BASELINE.append(_peak_kb(proc))
    return _BASELINE[0]
