"""An `exec:` program never outlives replay and never grows replay's memory without bound (docs/EXTERNAL.md,
"Caps" and "Process group"; issue 55, items 4 and 5): SIGINT and SIGTERM while the program hangs are exit
130 well under a second with the program's whole process group gone (also a program that ignores SIGTERM
and has a child in the background); the timeout, an error and a normal close kill the group too; a reply
line past REPLAY_MAX_REPLY_BYTES or a stderr flood past REPLAY_MAX_STDERR_BYTES is exit 3 at once, one line,
with bounded RSS.

Recording used: the committed fixture synthetic-mixed (SYNTHETIC).
"""
import os
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


def _start(tmp_path: Path, behaviour: str, *extra: str) -> tuple[subprocess.Popen, Path]:
    pgid_file = tmp_path / f"{behaviour}.pgid"
    env = dict(os.environ, PGID_FILE=str(pgid_file))
    env.pop("REPLAY_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-m", "replay_harness.cli", "run", MIXED, "--impl",
                             f"exec:{_program(tmp_path, behaviour)}", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
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
