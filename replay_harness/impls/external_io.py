"""The pipes of an ``exec:`` program (replay_harness.impls.external): bounded readers of its stdout lines and
its stderr, and the process-group kills (docs/EXTERNAL.md, "Caps" and "Process group").

Whatever the program writes, replay holds at most two stdout lines of at most ``REPLAY_MAX_REPLY_BYTES``
each (the reader waits while the last line is not taken) and the last ``STDERR_KEPT`` bytes of stderr;
a longer line, or more than ``REPLAY_MAX_STDERR_BYTES`` of stderr between two replies, kills the program's
process group at once.
"""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
from typing import Any

STDERR_KEPT = 64 << 10     # bytes of the program's stderr kept (the last ones) for quoting; the rest is dropped
READ_CHUNK = 64 << 10      # bytes read from the program's pipes at a time

_EOF = object()
_OVERFLOW = object()
_LIVE: dict[int, subprocess.Popen] = {}  # pid -> the running programs (kill_all ends their process groups)
_LIVE_LOCK = threading.Lock()


def _pump_lines(proc: subprocess.Popen, out: queue.Queue, cap: int) -> None:
    """Reader thread: stdout lines (decoded, newline stripped) into ``out`` (a queue of one: the reader waits
    while replay has not taken the last line), then _EOF. A line past ``cap`` bytes: the program's process
    group is killed, _OVERFLOW is queued and reading stops (memory stays bounded whatever it writes)."""
    buf = bytearray()
    try:
        fd = proc.stdout.fileno()
        while True:
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                break
            start = 0
            while (nl := chunk.find(b"\n", start)) >= 0:
                buf += chunk[start:nl]
                start = nl + 1
                if len(buf) > cap:
                    break
                line = buf.decode("utf-8", errors="replace").rstrip("\r")
                buf.clear()
                out.put(line)
            buf += chunk[start:]
            if len(buf) > cap:
                _kill_group(proc)
                out.put(_OVERFLOW)
                return
    except (OSError, ValueError):
        pass
    out.put(_EOF)


def _pump_stderr(sampler: Any) -> None:
    """Reader thread: stderr read to its end; the last STDERR_KEPT bytes kept for quoting, the rest dropped.
    More than ``max_stderr`` bytes between two replies: the process group is killed (the stdout reader then
    sees EOF and the waiting step reports the flood)."""
    proc, tail = sampler._proc, sampler._stderr
    try:
        fd = proc.stderr.fileno()
        while chunk := os.read(fd, READ_CHUNK):
            tail += chunk
            if len(tail) > STDERR_KEPT:
                del tail[:-STDERR_KEPT]
            sampler._stderr_window += len(chunk)
            if sampler._stderr_window > sampler.max_stderr and not sampler._flooded.is_set():
                sampler._flooded.set()
                _kill_group(proc)
    except (OSError, ValueError):
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (the program and everything it started) while it is not reaped."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_all() -> None:
    """SIGKILL the process group of every running external program, at once (no waiting): what the command
    line does on SIGINT / SIGTERM and before it exits, so no program is left behind on any exit path."""
    with _LIVE_LOCK:
        procs = list(_LIVE.values())
    for proc in procs:
        _kill_group(proc)
