"""Errors the command line turns into one line and an exit code (README.md, "Exit codes").

Exit codes: 0 all good; 1 mismatch, routing violation or finding; 2 usage or bad input;
3 environment (no GPU where one is required, impl unavailable); 4 inconclusive (the code path
under test never ran, so a result would mean nothing: `replay bench`'s coverage guard).
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_INCONCLUSIVE = 4


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
