"""Errors the command line turns into one line and an exit code (README.md, "Exit codes").

Exit codes: 0 all good; 1 mismatch, routing violation or finding; 2 usage or bad input;
3 environment (no GPU where one is required, impl unavailable); 4 inconclusive (the code path
under test never ran, so a result would mean nothing: `replay bench`'s coverage guard).
"""
from __future__ import annotations

import re

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_INCONCLUSIVE = 4


EXIT_INTERRUPTED = 130

# What may not reach a terminal raw (docs/HARDENING.md, "Printing what came from a file"): C0 controls
# (newline, carriage return, ESC, BEL, NUL, ...), DEL, C1 controls, Unicode line and paragraph separators,
# bidirectional overrides and isolates, and lone surrogates (undecodable bytes of a file name).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(m: re.Match) -> str:
    c = ord(m.group())
    return {9: "\\t", 10: "\\n", 13: "\\r"}.get(c) or (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}")


def printable(text: object) -> str:
    """``str(text)`` safe to print as (part of) one line: every control character, line separator,
    bidirectional override and lone surrogate written as a Python escape (``\\n``, ``\\x1b``, ``\\u2028``),
    so a file or folder name or a string read from a file can neither end the line, forge another one,
    nor drive the terminal. Printable text (tabs aside) is unchanged; JSON output needs none of this
    (``json.dumps`` escapes it already)."""
    text = str(text)
    return _UNPRINTABLE.sub(_escaped, text) if _UNPRINTABLE.search(text) else text


class ReplayError(Exception):
    """Base class: ``str(err)`` is the one line shown to the user."""

    exit_code = EXIT_BAD_INPUT


class InputError(ReplayError):
    """A recording (or argument) that breaks the fixture contract.

    The message names the file, the step (when there is one) and the field.
    """

    exit_code = EXIT_BAD_INPUT

    def __init__(self, file: object, message: str, *, step: int | None = None, field: str | None = None,
                 warning: bool = False):
        self.file, self.step, self.field, self.message = str(file), step, field, message
        self.warning = warning  # True: reported, but the step is still usable
        where = [self.file]
        if step is not None:
            where.append(f"step {step}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(": ".join(where) + ": " + message)


class UsageError(ReplayError):
    """A bad command-line choice (unknown impl, conflicting options)."""

    exit_code = EXIT_BAD_INPUT


class EnvironmentProblem(ReplayError):
    """The machine cannot do what was asked (no CUDA, impl failed to load)."""

    exit_code = EXIT_ENVIRONMENT
