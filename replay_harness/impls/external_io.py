"""The pipes and files of an ``exec:`` program (replay_harness.impls.external): bounded readers of its stdout
lines and its stderr, the process-group kills (docs/EXTERNAL.md, "Caps" and "Process group") and the writer of
the step files that opens nothing the program left in the temp folder (docs/EXTERNAL.md, "The temp folder").

Whatever the program writes, replay holds at most two stdout lines of at most ``REPLAY_MAX_REPLY_BYTES``
each (the reader waits while the last line is not taken) and the last ``STDERR_KEPT`` bytes of stderr;
a longer line, or more than ``REPLAY_MAX_STDERR_BYTES`` of stderr between two replies, kills the program's
process group at once.
"""
from __future__ import annotations

import array
import errno
import fcntl
import os
import queue
import secrets
import shutil
import signal
import subprocess
import termios
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


class Unread:
    """Bytes the stdout reader has read past the last line it queued (the next lines of the same read, or the
    start of one): ``bytes``, set before each line is queued, so whoever takes a line sees what followed it."""

    def __init__(self):
        self.bytes = 0


def pipe_bytes(pipe) -> int:
    """Bytes waiting in ``pipe`` (a file object), not consumed (FIONREAD); 0 when it cannot tell (closed, EOF)."""
    try:
        n = array.array("i", [0])
        fcntl.ioctl(pipe.fileno(), termios.FIONREAD, n, True)
        return int(n[0])
    except (OSError, ValueError, TypeError):
        return 0


def pump_lines(proc: subprocess.Popen, out: queue.Queue, cap: int, discard: threading.Event,
               unread: Unread | None = None) -> None:
    """Reader thread: stdout lines (decoded, newline stripped) into ``out`` (a queue of one: the reader waits
    while replay has not taken the last line), then EOF; once ``discard`` is set (the program is being
    stopped), lines are read and dropped, so a program writing at exit never blocks on its pipe and this
    thread ends with the program. A line past ``cap`` bytes: the program's process group is killed, OVERFLOW
    is queued and reading stops (memory stays bounded whatever it writes). ``unread.bytes``: what this
    reader holds after the line it queued last."""
    buf = bytearray()
    unread = unread or Unread()
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
                unread.bytes = len(chunk) - start
                _put(out, line, discard)
            buf += chunk[start:]
            unread.bytes = len(buf)
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


def folder_id(path: str) -> tuple[int, int]:
    """(device, inode) of the folder at ``path`` (not following a symlink): what :func:`write_fresh` checks."""
    st = os.lstat(path)
    return st.st_dev, st.st_ino


def write_fresh(folder: str, ident: tuple[int, int], name: str, data: bytes) -> str:
    """Write ``data`` to ``folder/name`` without opening anything found at that path; returns the path.

    The folder is opened without following a symlink and must still be the one ``ident`` names (``folder_id``
    when it was made); ``data`` goes to a new file created there with O_CREAT|O_EXCL|O_NOFOLLOW, which is then
    renamed onto ``name``: a rename replaces whatever entry is there (a FIFO, a symlink, a hard link to
    another file), never opens or follows it. So a program that planted something at the path can neither
    make replay wait nor make it write outside ``folder``. OSError when the folder is gone or replaced (a
    symlink: ELOOP / ENOTDIR; another folder: ENOENT) or the write fails.
    """
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(dfd)
        if (st.st_dev, st.st_ino) != ident:
            raise FileNotFoundError(errno.ENOENT, "replaced by another folder", folder)
        fresh = f".{name}.{secrets.token_hex(8)}"
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.close(fd)
            fd = -1
            os.replace(fresh, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(fresh, dir_fd=dfd)
            except OSError:
                pass
            raise
    finally:
        os.close(dfd)
    return os.path.join(folder, name)


def finish(proc: subprocess.Popen, tmpdir: str, discard: threading.Event) -> None:
    """The finalizer (garbage collection, interpreter exit): the stdout reader lets go, the group is killed."""
    discard.set()
    shutdown(proc, tmpdir, 0.0)


def shutdown(proc: subprocess.Popen, tmpdir: str, grace: float) -> None:
    """Close stdin (EOF = exit), wait ``grace`` seconds, then SIGKILL the process group; remove ``tmpdir``
    (only a symlink, when the program left one in its place)."""
    try:
        if proc.stdin and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
        if proc.poll() is None and grace > 0:
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        try:  # the program and anything it started (also when the program itself has exited: its group lives on)
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
    finally:
        with LIVE_LOCK:
            LIVE.pop(proc.pid, None)
        try:
            if os.path.islink(tmpdir):  # the program put a symlink in the folder's place: the link goes, not its target
                os.unlink(tmpdir)
        except OSError:
            pass
        shutil.rmtree(tmpdir, ignore_errors=True)  # never follows a symlink inside
