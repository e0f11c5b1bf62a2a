"""The pipes and files of an ``exec:`` program (replay_harness.impls.external): bounded readers of its stdout
lines and its stderr, the write of a step path with a deadline, the bounded JSON parse of a line, the
process-group kills and the watcher that kills the group when replay ends without doing so (docs/EXTERNAL.md,
"Caps" and "Process group"), and the writer of the step files that opens nothing the program left in the
temp folder (docs/EXTERNAL.md, "The temp folder").

Whatever the program writes, replay holds at most two stdout lines of at most ``REPLAY_MAX_REPLY_BYTES``
each, as bytes (the reader waits while the last line is not taken) and the last ``STDERR_KEPT`` bytes of
stderr; a longer line, or more than ``REPLAY_MAX_STDERR_BYTES`` of stderr between two replies, kills the
program's process group at once. A line is parsed only within a length, a nesting and MAX_DIGITS
(:func:`parse_line`).
"""
from __future__ import annotations

import array
import errno
import fcntl
import json
import os
import queue
import secrets
import select
import shutil
import signal
import subprocess
import sys
import termios
import threading
import time
from typing import Any

STDERR_KEPT = 64 << 10     # bytes of the program's stderr kept (the last ones) for quoting; the rest is dropped
READ_CHUNK = 64 << 10      # bytes read from the program's pipes at a time
MAX_DIGITS = 100           # digits of an integer in a line (an int64 has 19)
NOTES_PER_REPLY = 16       # notes kept of one reply (the rest dropped, a note says how many)
NOTE_CHARS = 2_000         # characters kept of one note (the rest dropped, the note says how many)
NOTES_KEPT = 1 << 20       # characters of notes kept over a sampler's life (then notes are dropped, a note says so)

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
    """``bytes``: all the bytes the stdout reader has read so far, counted the moment they are read, before any
    line of them is queued: whoever took lines of N bytes in all (newlines included) knows that ``bytes - N``
    followed them, whether the reader still holds them or waits to queue them."""

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
    """Reader thread: stdout lines (bytes, newline stripped) into ``out`` (a queue of one: the reader waits
    while replay has not taken the last line), then EOF; once ``discard`` is set (the program is being
    stopped), lines are read and dropped, so a program writing at exit never blocks on its pipe and this
    thread ends with the program. A line past ``cap`` bytes: the program's process group is killed, OVERFLOW
    is queued and reading stops (memory stays bounded whatever it writes). ``unread.bytes``: the bytes read
    (a line keeps its ``\\r``, so that the count of what was taken is exact)."""
    buf = bytearray()
    unread = unread or Unread()
    try:
        fd = proc.stdout.fileno()
        while True:
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                break
            unread.bytes += len(chunk)
            start = 0
            while (nl := chunk.find(b"\n", start)) >= 0:
                buf += chunk[start:nl]
                start = nl + 1
                if len(buf) > cap:
                    break
                line = bytes(buf)  # kept as bytes: decoded once, when parsed
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


def write_within(fd: int, data: bytes, deadline: float) -> None:
    """Write ``data`` to the non-blocking pipe ``fd``, waiting for room until ``deadline`` (time.monotonic()):
    TimeoutError past it (a program that never reads its stdin: the pipe stays full), OSError (BrokenPipeError)
    when the program closed it. Ctrl-C while waiting raises KeyboardInterrupt as usual."""
    view, poller = memoryview(data), select.poll()
    poller.register(fd, select.POLLOUT)
    while view:
        try:
            view = view[os.write(fd, view):]
            continue
        except BlockingIOError:
            pass
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        poller.poll(max(1, int(left * 1000)))  # room, an error or a hang-up: the next write tells which


def _small_int(text: str) -> int:
    """json's parse_int: an integer of at most MAX_DIGITS digits (int() of a long one is quadratic; of more
    than 4,300 digits a ValueError, or unbounded where the interpreter's limit was lifted)."""
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise BadJSON(f"holds a number of {len(text.lstrip('-')):,} digits (at most {MAX_DIGITS})")
    return int(text)


class BadJSON(ValueError):
    """A line past the parser's bounds; ``str()`` says which, to follow the line's name ("reply to step 3 ...")."""


def parse_line(line: bytes, max_bytes: int, what: str) -> Any:
    """``line`` as JSON (UTF-8, undecodable bytes replaced); None when it is not JSON. BadJSON when it is longer
    than ``max_bytes`` (what bounds the parse's memory: a byte of JSON makes at most about 30 bytes of Python
    objects, ``[[]],`` or ``{},``), nested deeper than the parser's recursion goes (Python's recursion limit,
    1,000 frames less the caller's: a RecursionError otherwise) or holds an integer of more than MAX_DIGITS
    digits. ``what``: the line, for the message ("a reply to this step")."""
    if len(line) > max_bytes:
        raise BadJSON(f'is {len(line):,} bytes, over the {max_bytes:,} {what} may have (docs/EXTERNAL.md, "Caps")')
    try:
        return json.loads(line.decode("utf-8", errors="replace"), parse_int=_small_int)
    except BadJSON:
        raise
    except RecursionError:
        raise BadJSON(f"is nested deeper than the JSON parser goes ({sys.getrecursionlimit():,} levels, less "
                      "replay's own)") from None
    except ValueError:
        return None


def cut(text: str) -> str:
    """``text`` cut to NOTE_CHARS characters, saying how many were dropped."""
    return text if len(text) <= NOTE_CHARS else f"{text[:NOTE_CHARS]}… ({len(text) - NOTE_CHARS:,} more characters)"


class NoteBudget:
    """What a sampler keeps of its replies' notes (docs/EXTERNAL.md, "Caps"; the callers keep every note they
    get, `replay run` a recording's, `replay bench` a run's): the first NOTES_PER_REPLY of a reply, each cut to
    NOTE_CHARS characters, while NOTES_KEPT characters last; then none, one note saying so."""

    def __init__(self):
        self.left = NOTES_KEPT

    def keep(self, notes: list) -> list[str]:
        if self.left <= 0:
            return []
        wanted = [cut(n if isinstance(n, str) else str(n)) for n in notes[:NOTES_PER_REPLY]]
        if len(notes) > NOTES_PER_REPLY:
            wanted.append(f"{len(notes) - NOTES_PER_REPLY:,} more notes dropped ({NOTES_PER_REPLY} kept a reply)")
        kept = []
        for note in wanted:
            if len(note) > self.left:
                kept.append(f'notes past {NOTES_KEPT:,} characters dropped (docs/EXTERNAL.md, "Caps")')
                self.left = 0
                break
            kept.append(note)
            self.left -= len(note)
        return kept


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


# The watcher of one program's group: a shell in a new session (no terminal signal reaches it, and it ignores
# the others) reading a pipe only replay holds. "done" on it: replay killed the group itself. EOF without it:
# replay ended by a signal's default action (SIGHUP, SIGQUIT, SIGKILL, SIGTERM under pytest), a crash or
# os._exit, and the watcher kills the group.
_WATCH = 'trap "" HUP INT QUIT TERM PIPE; read -r said; [ "$said" = done ] || kill -s KILL -- "-$1" 2>/dev/null'


def start_watcher(proc: subprocess.Popen) -> subprocess.Popen | None:
    """The watcher of ``proc``'s process group (above); None when no shell can be started (then only replay's
    own exit paths kill the group)."""
    try:
        return subprocess.Popen(["/bin/sh", "-c", _WATCH, "replay-exec-watcher", str(proc.pid)],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError:
        return None


def _release(watcher: subprocess.Popen | None) -> None:
    """Tell the watcher the group is gone ("done"), so it exits without a kill, and reap it."""
    if watcher is None:
        return
    for say in (lambda: watcher.stdin.write(b"done\n"), watcher.stdin.close):
        try:
            say()
        except (OSError, ValueError):  # it is gone already (killed by someone): nothing to tell
            pass
    try:
        watcher.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        watcher.kill()
        watcher.wait()


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


def finish(proc: subprocess.Popen, tmpdir: str, discard: threading.Event,
           watcher: subprocess.Popen | None = None) -> None:
    """The finalizer (garbage collection, interpreter exit): the stdout reader lets go, the group is killed."""
    discard.set()
    shutdown(proc, tmpdir, 0.0, watcher)


def shutdown(proc: subprocess.Popen, tmpdir: str, grace: float, watcher: subprocess.Popen | None = None) -> None:
    """Close stdin (EOF = exit), wait ``grace`` seconds, then SIGKILL the process group; release the group's
    watcher; remove ``tmpdir`` (only a symlink, when the program left one in its place)."""
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
        _release(watcher)
    finally:
        with LIVE_LOCK:
            LIVE.pop(proc.pid, None)
        try:
            if os.path.islink(tmpdir):  # the program put a symlink in the folder's place: the link goes, not its target
                os.unlink(tmpdir)
        except OSError:
            pass
        shutil.rmtree(tmpdir, ignore_errors=True)  # never follows a symlink inside
