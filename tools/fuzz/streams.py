"""stdout and stderr that fail, for the fuzz worker (tools/fuzz/cli_kinds.py: stdout_failure): in this process,
a text stream that raises what the real one would (and keeps what replay tried to write, so the checks still
see a traceback or a forged line); in a child, the real thing: /dev/full, a pipe whose reader is gone, a closed
descriptor.

Kinds: ``full`` (ENOSPC after a few hundred characters), ``epipe`` (EPIPE: the reader left), ``closed`` (a
closed file: ValueError in this process, EBADF in a child), ``none`` (sys.stdout None: the descriptor was
closed when the interpreter started), ``ascii`` (an encoding that holds ASCII alone, strict), and
``stderr-full`` / ``stderr-epipe`` / ``stderr-none``, the same on stderr.
"""
from __future__ import annotations

import errno
import io
import os
import random


class FailingStream(io.TextIOBase):
    """Takes ``after`` characters, then every write raises OSError(``code``) (ValueError for ``code`` None, as a
    closed file does); ``attempted`` keeps all that was written or tried."""

    def __init__(self, code: int | None, after: int):
        self.code, self.left, self.attempted = code, after, []

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError("str expected")
        self.attempted.append(text)
        if len(text) > self.left:
            self.left = 0
            if self.code is None:
                raise ValueError("I/O operation on closed file.")
            raise OSError(self.code, os.strerror(self.code))
        self.left -= len(text)
        return len(text)

    def flush(self) -> None:
        if self.left == 0 and self.code is not None and self.attempted:
            raise OSError(self.code, os.strerror(self.code))

    def isatty(self) -> bool:
        return False

    def getvalue(self) -> str:
        return "".join(self.attempted)


class AsciiStream(io.TextIOWrapper):
    """stdout with PYTHONIOENCODING=ascii (strict): text outside ASCII raises UnicodeEncodeError."""

    def __init__(self):
        super().__init__(io.BytesIO(), encoding="ascii", errors="strict", write_through=True)

    def getvalue(self) -> str:
        return self.buffer.getvalue().decode("ascii")


def in_process(kind: str | None, rng: random.Random) -> tuple[object | None, object | None]:
    """(stdout, stderr) replacements for a command run in this process; None: a StringIO as usual. A stream
    that is None stands for itself (``none``): the caller sets sys.stdout / sys.stderr to None."""
    if not kind:
        return None, None
    name, _, which = kind.partition("-") if kind.startswith("stderr") else ("stdout", "", kind)
    which = which or name
    after = rng.choice([0, 0, 10, 200, 5000])
    stream = {"full": lambda: FailingStream(errno.ENOSPC, after), "epipe": lambda: FailingStream(errno.EPIPE, after),
              "closed": lambda: FailingStream(None, after), "ascii": AsciiStream, "none": lambda: "none"}[which]()
    return (stream, None) if name == "stdout" else (None, stream)


def child(kind: str | None):
    """For a child process: (stdout, stderr, preexec) as subprocess.Popen takes them, and a cleanup; None for
    stdout / stderr: the caller's own capture."""
    out = err = preexec = None
    opened: list[int] = []
    if kind in ("full", "stderr-full"):
        fd = os.open("/dev/full", os.O_WRONLY)
        opened.append(fd)
        out, err = (fd, None) if kind == "full" else (None, fd)
    elif kind in ("epipe", "stderr-epipe"):
        r, w = os.pipe()
        os.close(r)  # the reader is gone before the first byte
        opened.append(w)
        out, err = (w, None) if kind == "epipe" else (None, w)
    elif kind in ("closed", "none", "stderr-none"):
        target = 2 if kind == "stderr-none" else 1

        def preexec() -> None:  # noqa: F811 (the child starts with that descriptor closed)
            os.close(target)
    env = {"PYTHONIOENCODING": "ascii:strict"} if kind == "ascii" else {}

    def cleanup() -> None:
        for fd in opened:
            os.close(fd)

    return out, err, preexec, env, cleanup
