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

STDERR_KEPT = 64 << 10     # bytes of the program's stderr kept (the last ones) for quoting; the rest is dropped
READ_CHUNK = 64 << 10      # bytes read from the program's pipes at a time

EOF = object()
OVERFLOW = object()
LIVE: dict[int, subprocess.Popen] = {}  # pid -> the running programs (kill_all ends their process groups)
LIVE_LOCK = threading.Lock()


def _put(out: queue.Queue, item: object, discard: threading.Event) -> bool:
    """Queue ``item`` for replay, waiting while the last line is not taken; False (dropped) once ``discard``
    is set: the program was stopped, so a reader thread never waits for ever on a queue nobody reads."""
    while not discard.is_set():
        try:
            out.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def pump_lines(proc: subprocess.Popen, out: queue.Queue, cap: int, discard: threading.Event) -> None:
    """Reader thread: stdout lines (decoded, newline stripped) into ``out`` (a queue of one: the reader waits
    while replay has not taken the last line), then EOF; once ``discard`` is set (the program is being
    stopped), lines are read and dropped, so a program writing at exit never blocks on its pipe and this
    thread ends with the program. A line past ``cap`` bytes: the program's process group is killed, OVERFLOW
    is queued and reading stops (memory stays bounded whatever it writes)."""
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
                _put(out, line, discard)
            buf += chunk[start:]
            if len(buf) > cap:
                kill_group(proc)
                buf = bytearray()
                _put(out, OVERFLOW, discard)
                return
    except (OSError, ValueError):
        pass
    _put(out, EOF, discard)


class StderrTail:
    """What replay keeps of a program's stderr: the last STDERR_KEPT bytes (``kept``), the bytes since the
    last reply (``window``, reset by the reader of replies) and whether they passed ``cap`` (``flooded``)."""

    def __init__(self, cap: int):
        self.kept, self.window, self.cap = bytearray(), 0, cap
        self.flooded = threading.Event()


def pump_stderr(proc: subprocess.Popen, tail: StderrTail) -> None:
    """Reader thread: stderr read to its end; the last STDERR_KEPT bytes kept for quoting, the rest dropped.
    More than ``tail.cap`` bytes between two replies: the process group is killed (the stdout reader then
    sees EOF and the waiting step reports the flood)."""
    try:
        fd = proc.stderr.fileno()
        while chunk := os.read(fd, READ_CHUNK):
            tail.kept += chunk
            if len(tail.kept) > STDERR_KEPT:
                del tail.kept[:-STDERR_KEPT]
            tail.window += len(chunk)
            if tail.window > tail.cap and not tail.flooded.is_set():
                tail.flooded.set()
                kill_group(proc)
    except (OSError, ValueError):
        pass


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (the program and everything it started) while it is not reaped."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_all() -> None:
    """SIGKILL the process group of every running external program, at once (no waiting): what the command
    line does on SIGINT / SIGTERM and before it exits, so no program is left behind on any exit path."""
    with LIVE_LOCK:
        procs = list(LIVE.values())
    for proc in procs:
        kill_group(proc)
