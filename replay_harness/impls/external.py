"""``exec:PROGRAM``: a sampler that runs in another process (any language), over the replay.exec/1 protocol.

docs/EXTERNAL.md is the normative description; in short:

* the harness starts ``PROGRAM [--impl-arg ...]`` once (its own process group, stdin/stdout pipes,
  stderr captured);
* the program's first stdout line is a JSON handshake
  ``{"protocol": "replay.exec/1", "name": ..., "rng_contract": ...}``;
* per step the harness writes the step to a temp file in the fixture step format (safetensors, the tensor
  names of docs/FIXTURES.md, no ``emitted_*`` tensors; a fresh file renamed onto the step path, so nothing
  the program left there is opened) and sends its absolute path as one line on stdin;
* the program answers one JSON line: ``{"tokens": [[...]], "counts": [...], "routes": [...],
  "kernel_us": 12.5, "notes": [...]}`` (or ``{"error": "..."}``);
* EOF on stdin means exit.

Every failure of the program (no or bad handshake, crash, a step not read or not answered in time, a
reply that is not JSON or past the parser's bounds, a wrong shape or value, a second reply line to one
step, a temp folder removed or replaced, a line or a stderr flood over its cap) raises
:class:`ExternalImplError` (exit code 3), one line naming the program, the step and what went wrong,
quoting the last lines of its stderr. The process group is killed (SIGKILL) on every exit path: an error,
an exception or Ctrl-C while waiting for the program, :meth:`ExecSampler.close`, garbage collection,
:func:`kill_all` (which the command line calls on SIGINT / SIGTERM and before it exits), and a watcher
process when replay ends otherwise (SIGHUP, SIGQUIT, SIGKILL). What replay holds, parses and keeps of the
program's output is bounded (docs/EXTERNAL.md, "Caps"; the constants of external_io).
"""
from __future__ import annotations

import errno
import json
import math
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Any

import torch

from replay_harness.errors import EnvironmentProblem, UsageError
from replay_harness.impls.contract import Sampler
from replay_harness.impls.external_io import (EOF, LIVE, LIVE_LOCK, OVERFLOW, BadJSON, NoteBudget, StderrTail, Unread,
                                              cut, finish, folder_id, parse_line, pipe_bytes, pump_lines, pump_stderr,
                                              shutdown, start_watcher, write_fresh, write_within)
from replay_harness.impls.external_io import kill_all  # noqa: F401 (re-exported: cli.main calls external.kill_all)
from replay_harness.limits import MAX_REPLY_BYTES, MAX_STDERR_BYTES, value
from replay_harness.recording.schema import ROUTE_CODE, ROUTES
from replay_harness.recording.step import SampleResult, Step
from replay_harness.recording.store import encode_step, load_step_file, step_from_tensors, step_metadata, step_tensors

STEP_FILE = "step.safetensors"  # the name of the step file in the temp folder
REFUSED = ROUTE_CODE["refused"]
TAMPERED = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES, errno.EPERM)  # the temp folder was changed
PROTOCOL, PROTOCOL_MAJOR = "replay.exec", 1
HANDSHAKE_TIMEOUT_S, DEFAULT_REPLY_TIMEOUT_S = 10.0, 60.0
MAX_TIMEOUT_S = 1e6        # the longest --impl-timeout (and handshake timeout) taken: about 11.6 days
CLOSE_CHECK_S = 0.01       # at the end of a recording, how long a second reply line to the last step is awaited
CLOSE_GRACE_S = 2.0        # after EOF on stdin, how long the program may take to exit before SIGKILL
STDERR_LINES_QUOTED = 3    # last stderr lines quoted in an error
MAX_QUOTE = 300            # characters of a bad line quoted in an error
HANDSHAKE_BYTES = 64 << 10  # the handshake line, at most (it needs a few hundred)
# a reply line: at most 32 bytes per R x (K + 4) (it needs ~9 a token) + 1 MiB (notes, spaces, other keys)
REPLY_BYTES_PER, REPLY_SLACK = 32, 1 << 20
NAME_CHARS = 200           # the handshake's name and rng_contract, at most; its description is cut to NOTE_CHARS


class ExternalImplError(EnvironmentProblem):
    """The external program failed (exit code 3). ``reason`` is one of: handshake, crash, timeout (a step not
    read or not answered in time), garbage (not a JSON object, past the parser's bounds, or a second reply line
    to one step), shape, value, reported (the program replied with an error), overflow (a stdout line or stderr
    past its cap), step-file (the temp folder was removed or replaced, or the step file could not be written)."""

    def __init__(self, message: str, reason: str):
        self.reason = reason
        super().__init__(message)


def step_file_bytes(step: Step, index: int) -> bytes:
    """``step`` as the bytes of a fixture step file (schema replay.step/1) without the emitted tensors."""
    return encode_step(step_tensors(step), step_metadata(int(index)))


def read_step_file(path: str | os.PathLike) -> tuple[Step, int]:
    """(Step, step index) from a step file of :func:`step_file_bytes` (or a fixture step file)."""
    tensors, raw_meta = load_step_file(path)
    meta = json.loads(raw_meta if raw_meta is not None else "{}")
    return step_from_tensors(tensors), int(meta.get("step", -1))


def check_timeout(seconds: Any, what: str = "--impl-timeout") -> float:
    """``seconds`` as a float in (0, MAX_TIMEOUT_S]; anything else (inf, nan, a huge number, not a number) is a
    usage error (exit 2): waits on the program's pipes take no longer timeout than that."""
    try:
        value_s = float(seconds)
    except (TypeError, ValueError):
        value_s = math.nan
    if not 0 < value_s <= MAX_TIMEOUT_S:
        got = f"{value_s:g}" if not math.isnan(value_s) or isinstance(seconds, float) else repr(seconds)
        raise UsageError(f"{what} must be a number of seconds > 0 and <= {MAX_TIMEOUT_S:,.0f}, got {got}")
    return value_s


def parse_command(spec: str, impl_args: list[str] | None) -> list[str]:
    """argv of ``exec:SPEC``: SPEC split like a shell would (no shell runs), then the --impl-arg values."""
    try:
        argv = shlex.split(spec)
    except ValueError as e:
        raise UsageError(f"--impl exec:{spec}: cannot split the command line ({e})") from None
    if not argv:
        raise UsageError("--impl exec: needs a program, e.g. exec:./my_sampler")
    program = argv[0]
    if os.sep not in program and shutil.which(program) is None:
        raise EnvironmentProblem(f"impl 'exec:{spec}': program '{program}' not found on PATH")
    if os.sep in program and not os.access(program, os.X_OK):
        why = "does not exist" if not os.path.exists(program) else "is not executable"
        raise EnvironmentProblem(f"impl 'exec:{spec}': program '{program}' {why}")
    return argv + list(impl_args or [])


class ExecSampler(Sampler):
    """An impl served by an external program over replay.exec/1 (see the module docstring).

    ``spec``: the text after ``exec:`` (a command line, split with shlex); ``impl_args``: extra arguments.
    ``timeout``: seconds to wait for each step's reply (``--impl-timeout``); ``handshake_timeout``: for
    the first line. Steps reach it on the CPU (``cpu_only``). Use as a context manager or call
    :meth:`close`; a finalizer kills it in any case (garbage collection, interpreter exit).
    ``name``, ``rng_contract`` and ``description`` come from the program's handshake.
    """

    cpu_only = True
    external = True  # runs in another process: in-process kernel counters cannot see it
    keeps_inputs = True  # it reads the step to write the step file: the program gets a file of its own

    def __init__(self, spec: str, impl_args: list[str] | None = None, *, timeout: float = DEFAULT_REPLY_TIMEOUT_S,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT_S):
        self.spec = spec
        self.label = f"exec:{spec}"
        self.timeout = timeout  # checked: (0, MAX_TIMEOUT_S]
        handshake_timeout = check_timeout(handshake_timeout, "the handshake timeout")
        self.argv = parse_command(spec, impl_args)
        self._tmpdir = tempfile.mkdtemp(prefix="replay-exec-")
        self._tmpid = folder_id(self._tmpdir)
        self.max_reply, self.max_stderr = value(MAX_REPLY_BYTES), value(MAX_STDERR_BYTES)
        self._err = StderrTail(self.max_stderr)  # the last STDERR_KEPT bytes; the flood guard
        self._discard = threading.Event()  # the program is being stopped: stdout lines are read and dropped
        self._lines: queue.Queue = queue.Queue(maxsize=1)  # with the line in the reader's hands: 2 held at most
        self._unread = Unread()  # the bytes the reader has read: past self._taken, stdout the program sent after
        self._taken = 0  # the bytes of the lines taken, newlines included
        self._closed = False
        self._steps_sent = 0
        self._held: object = None  # EOF / OVERFLOW taken while looking for a second reply line: the next read's
        self._answered = ""  # the step whose reply was the last line read ("" before the first reply)
        self._notes = NoteBudget()  # what is kept of the replies' notes
        try:
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            raise ExternalImplError(f"impl '{self.label}': cannot start {self.argv[0]}: {e.strerror or e}",
                                    "crash") from None
        os.set_blocking(self._proc.stdin.fileno(), False)  # a step path waits for room until a deadline, no longer
        self._watcher = start_watcher(self._proc)  # kills the group if replay ends without doing so
        with LIVE_LOCK:
            LIVE[self._proc.pid] = self._proc
        # killed and cleaned up when garbage-collected or, at the latest, at interpreter exit
        self._finalizer = weakref.finalize(self, finish, self._proc, self._tmpdir, self._discard, self._watcher)
        threading.Thread(target=pump_lines, args=(self._proc, self._lines, self.max_reply, self._discard,
                                                  self._unread), name="replay-exec-stdout", daemon=True).start()
        self._stderr_thread = threading.Thread(target=pump_stderr, args=(self._proc, self._err),
                                               name="replay-exec-stderr", daemon=True)
        self._stderr_thread.start()
        self._recording = ""
        try:
            hs = self._handshake(handshake_timeout)
        except BaseException:
            self._kill()
            raise
        self.name = str(hs["name"])
        self.rng_contract = str(hs["rng_contract"])
        self.description = cut(str(hs.get("description") or f"external program {self.argv[0]} ({self.name})"))
        self.handshake = {"protocol": hs["protocol"], "name": self.name, "rng_contract": self.rng_contract,
                          "description": self.description}  # what is kept of it, not the whole line

    @property
    def timeout(self) -> float:
        """Seconds to wait for each step's reply (``--impl-timeout``); set to a number in (0, MAX_TIMEOUT_S]."""
        return self._timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._timeout = check_timeout(seconds)

    # -- lifecycle --------------------------------------------------------

    def close(self) -> None:
        """EOF on the program's stdin, wait briefly for it to exit, then kill its process group; remove
        the temp folder. Idempotent. Unless an exception is on its way: ExternalImplError when the program
        sent a second reply line to its last step."""
        if self._closed:
            return
        if sys.exc_info()[0] is None:
            self._check_one_reply(CLOSE_CHECK_S)
        self._closed = True
        self._finalizer.detach()
        self._discard.set()
        try:  # unblock the stdout reader: what the program writes from now on is dropped
            self._lines.get_nowait()
        except queue.Empty:
            pass
        shutdown(self._proc, self._tmpdir, CLOSE_GRACE_S, self._watcher)

    def _kill(self) -> None:
        self._closed = True
        self._discard.set()  # the stdout reader drops what is left and ends with the program
        self._finalizer.detach()
        shutdown(self._proc, self._tmpdir, 0.0, self._watcher)

    def __enter__(self) -> "ExecSampler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def begin_recording(self, label: str) -> None:
        """Step numbers in messages restart at 0 and name ``label`` (the runner sends steps in order)."""
        if not self._closed:
            self._check_one_reply(CLOSE_CHECK_S)
        self._recording, self._steps_sent = str(label), 0

    # -- protocol -----------------------------------------------------------

    def _fail(self, message: str, reason: str) -> ExternalImplError:
        """Kill the program and build the one-line error (with the last stderr lines)."""
        self._kill()
        return ExternalImplError(f"impl '{self.label}': {message}{self._stderr_tail()}", reason)

    def _stderr_tail(self) -> str:
        self._stderr_thread.join(timeout=0.5)  # drain what the dead program wrote last
        text = bytes(self._err.kept).decode("utf-8", errors="replace")
        lines = [ln for ln in text.splitlines() if ln.strip()][-STDERR_LINES_QUOTED:]
        return ("; stderr: " + " | ".join(_clip(ln, 200) for ln in lines)) if lines else "; stderr: (empty)"

    def _exit_text(self) -> str:
        try:
            rc = self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "closed its stdout"
        if rc < 0:
            try:
                return f"was killed by signal {signal.Signals(-rc).name}"
            except ValueError:
                return f"was killed by signal {-rc}"
        return f"exited with code {rc}"

    def _read_line(self, timeout: float, what: str, hint: str, shown: float | None = None) -> bytes:
        """The next stdout line; ``timeout``: seconds left to wait, ``shown``: the timeout the message names."""
        try:
            line = self._held if self._held is not None else self._lines.get(timeout=max(timeout, 0.0))
            self._held = None
        except queue.Empty:
            raise self._fail(f"no {what} within {shown or timeout:g} s ({hint}); program killed", "timeout") from None
        except BaseException:  # Ctrl-C, SIGTERM: the program goes first
            self._kill()
            raise
        if self._err.flooded.is_set():
            raise self._fail(f"program wrote more than {self.max_stderr:,} bytes to stderr before its {what} "
                             f"(REPLAY_MAX_STDERR_BYTES raises the cap); program killed", "overflow")
        if line is OVERFLOW:
            raise self._fail(f"{what} is longer than {self.max_reply:,} bytes without a newline "
                             f"(REPLAY_MAX_REPLY_BYTES raises the cap); program killed", "overflow")
        if line is EOF:
            raise self._fail(f"program {self._exit_text()} before sending its {what}", "crash")
        self._err.window = 0
        self._taken += len(line) + 1
        return line.rstrip(b"\r")

    def _check_one_reply(self, wait: float = 0.0) -> None:
        """ExternalImplError when more stdout followed the last reply (a second line would be taken for the next
        step's reply and shift every later one): a queued line, bytes the reader holds past the reply, bytes
        in the pipe (waiting up to ``wait`` s for a line). What the program writes after replay has sent the next
        step cannot be told from that step's reply. An EOF or an overlong line found here is kept for the next
        read, which reports it."""
        if not self._answered or self._held is not None:
            return
        try:
            item = self._lines.get(timeout=wait) if wait > 0 else self._lines.get_nowait()
        except queue.Empty:
            item = None
        if item is not None and not isinstance(item, bytes):
            self._held = item
            return
        extra = self._unread.bytes - self._taken + pipe_bytes(self._proc.stdout) if item is None else 0
        if extra:  # read, or in the pipe, but not queued yet: the line itself is quoted when it comes soon
            try:
                item = self._lines.get(timeout=0.1)
            except queue.Empty:
                pass
        if isinstance(item, bytes) or extra:
            quoted = isinstance(item, bytes)
            next_one = f"the next one is {_clip(item)!r}" if quoted else f"{extra} more bytes on stdout"
            raise self._fail(f"more than one reply line for {self._answered}: {next_one}", "garbage")

    def _handshake(self, timeout: float) -> dict[str, Any]:
        line = self._read_line(timeout, "handshake", "the first stdout line must be the JSON handshake")
        try:
            hs = parse_line(line, HANDSHAKE_BYTES, "a handshake")
        except BadJSON as e:
            raise self._fail(f"bad handshake: first stdout line {e}", "handshake") from None
        if not isinstance(hs, dict):
            raise self._fail(f"bad handshake: first stdout line is not a JSON object: {_clip(line)!r}", "handshake")
        proto = hs.get("protocol")
        if not isinstance(proto, str) or proto.partition("/")[0] != PROTOCOL:
            raise self._fail(f"bad handshake: 'protocol' is {proto!r}, expected '{PROTOCOL}/{PROTOCOL_MAJOR}'",
                             "handshake")
        if proto.partition("/")[2] != str(PROTOCOL_MAJOR):
            raise self._fail(f"bad handshake: protocol version {proto!r} is not supported; this replay speaks "
                             f"'{PROTOCOL}/{PROTOCOL_MAJOR}'", "handshake")
        for key in ("name", "rng_contract"):
            if not isinstance(hs.get(key), str) or not 0 < len(hs[key]) <= NAME_CHARS:
                raise self._fail(f"bad handshake: '{key}' must be a non-empty string of at most {NAME_CHARS} "
                                 f"characters, got {_clip(repr(hs.get(key)))}", "handshake")
        return hs

    def sample(self, step: Step, index: int | None = None) -> SampleResult:
        """Send one step, wait for the reply, check it and return it as a SampleResult."""
        if self._closed:
            raise ExternalImplError(f"impl '{self.label}': the program was already stopped", "crash")
        index = self._steps_sent if index is None else index
        self._steps_sent += 1
        where = f"step {index}" + (f" of {self._recording}" if self._recording else "")
        try:  # a fresh file renamed onto the path: a FIFO or symlink the program left there is never opened
            path = write_fresh(self._tmpdir, self._tmpid, STEP_FILE, step_file_bytes(step.to("cpu"), index))
        except OSError as e:  # gone, a symlink, another folder, made read-only: the program's doing
            blame = ": the program must not remove, replace or change that folder" if e.errno in TAMPERED else ""
            raise self._fail(f"cannot write {where} to the temp folder {self._tmpdir} ({e.strerror or e}){blame}",
                             "step-file") from None
        self._check_one_reply()  # the last step's: a second line now would be taken for this step's reply
        deadline = time.monotonic() + self.timeout  # for taking the step and replying, together
        try:
            write_within(self._proc.stdin.fileno(), (path + "\n").encode(), deadline)
        except TimeoutError:  # it does not read its stdin: the pipe stayed full
            raise self._fail(f"program did not read {where} from its stdin within {self.timeout:g} s "
                             "(--impl-timeout); program killed", "timeout") from None
        except (OSError, ValueError):
            raise self._fail(f"program {self._exit_text()} before {where} was sent", "crash") from None
        except BaseException:  # Ctrl-C, SIGTERM: the program goes first
            self._kill()
            raise
        line = self._read_line(deadline - time.monotonic(), f"reply to {where}", "--impl-timeout", self.timeout)
        self._answered = where
        try:
            result = self._parse_reply(line, step, where)
            self._check_one_reply()
            return result
        except BaseException as e:
            if not isinstance(e, ExternalImplError):
                self._kill()  # Ctrl-C while parsing a huge reply: the program goes first
            raise

    def _parse_reply(self, line: bytes, step: Step, step_where: str) -> SampleResult:
        where = f"reply to {step_where}"
        r, k = step.num_requests, step.max_drafts
        try:
            doc = parse_line(line, REPLY_BYTES_PER * r * (k + 4) + REPLY_SLACK, "a reply to this step")
        except BadJSON as e:
            raise self._fail(f"{where} {e}", "garbage") from None
        if not isinstance(doc, dict):
            raise self._fail(f"{where} is not a JSON object: {_clip(line)!r}", "garbage")
        if doc.get("error") is not None:  # null: no error (what Go's and Rust's serialisers write)
            raise self._fail(f"program reported an error on {step_where}: {_clip(str(doc['error']))}", "reported")
        for key in ("tokens", "counts", "routes"):
            if key not in doc:
                raise self._fail(f"{where} lacks '{key}'", "shape")
        tokens, counts, routes = doc["tokens"], doc["counts"], doc["routes"]
        if not (isinstance(tokens, list) and len(tokens) == r and all(isinstance(t, list) for t in tokens)
                and all(len(t) == k + 1 for t in tokens)):
            raise self._fail(f"{where}: 'tokens' has shape {_shape(tokens)}, expected [R, K+1] = [{r}, {k + 1}]",
                             "shape")
        for key, val in (("counts", counts), ("routes", routes)):
            if not isinstance(val, list) or len(val) != r:
                raise self._fail(f"{where}: '{key}' has shape {_shape(val)}, expected [R] = [{r}]", "shape")
        if not all(_is_int(x) for row in tokens for x in row) or not all(_is_int(c) for c in counts):
            raise self._fail(f"{where}: 'tokens' and 'counts' must hold integers", "value")
        codes = []
        for i, x in enumerate(routes):
            if isinstance(x, str) and x in ROUTE_CODE:
                codes.append(ROUTE_CODE[x])
            elif _is_int(x) and -1 <= x < len(ROUTES):
                codes.append(int(x))
            else:
                raise self._fail(f"{where}: routes[{i}] = {_clip(repr(x))} is not a route ({', '.join(ROUTES)}, or its "
                                 "code 0-4, or -1)", "value")
        ks = step.num_drafts.tolist()
        v = step.vocab_size
        for i in range(r):
            c = counts[i]
            if not 0 <= c <= ks[i] + 1:
                raise self._fail(f"{where}: counts[{i}] = {c} outside [0, k+1] = [0, {ks[i] + 1}]", "value")
            if (codes[i] == REFUSED and c != 0) or (c == 0 and codes[i] not in (REFUSED, -1)):
                raise self._fail(f"{where}: routes[{i}] = {routes[i]!r} with counts[{i}] = {c} (count 0 if and only "
                                 "if the route is refused, or -1 unknown)", "value")
            row = tokens[i]
            if any(not 0 <= t < v for t in row[:c]) or any(t != -1 for t in row[c:]):
                raise self._fail(f"{where}: tokens[{i}] = {_clip(str(row))} must hold {c} ids in [0, {v}) then -1",
                                 "value")
        kernel_us = doc.get("kernel_us")
        if kernel_us is not None and (isinstance(kernel_us, bool) or not isinstance(kernel_us, (int, float))
                                      or not math.isfinite(kernel_us) or kernel_us < 0):
            raise self._fail(f"{where}: 'kernel_us' must be a number >= 0 or null, got {kernel_us!r}", "value")
        notes = doc.get("notes") or []
        return SampleResult(tokens=torch.tensor(tokens, dtype=torch.int64).reshape(r, k + 1),
                            counts=torch.tensor(counts, dtype=torch.int32),
                            routes=torch.tensor(codes, dtype=torch.int8),
                            notes=self._notes.keep(notes if isinstance(notes, list) else [notes]),
                            self_reported_us=None if kernel_us is None else float(kernel_us))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _shape(x: Any) -> str:
    if not isinstance(x, list):
        return type(x).__name__
    if x and all(isinstance(e, list) for e in x):
        widths = sorted({len(e) for e in x})
        return f"[{len(x)}, {widths[0] if len(widths) == 1 else '/'.join(map(str, widths))}]"
    return f"[{len(x)}]"


def _clip(text: str | bytes, limit: int = MAX_QUOTE) -> str:
    if isinstance(text, bytes):  # a line of the program's: its first characters, decoded
        text = text[:4 * limit + 4].decode("utf-8", errors="replace")
    text = text.replace("\r", " ").replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "…"


def sample_at(impl: Sampler, step: Step, index: int | None) -> SampleResult:
    """``impl.sample(step)``; an external impl is told ``index``, the recording's step number, so its
    messages quote that step (callers that send one step many times, like `replay verify`, use this)."""
    if index is not None and isinstance(impl, ExecSampler):
        return impl.sample(step, index)
    return impl.sample(step)
