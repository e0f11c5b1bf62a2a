"""The `replay` command line (typer). Human tables on stdout, --json for machines,
progress on stderr. Exit codes (README.md): 0 ok, 1 mismatch, routing violation, refusal,
failed test or finding, 2 usage or bad input, 3 environment, 4 inconclusive.

One module per command (``replay_harness/cli/<command>.py``); what they share (consoles, progress,
option types) is in :mod:`replay_harness.cli.common`. This module builds the app, registers the
commands in the order `replay --help` lists them, and maps every error to one line and an exit code
(:func:`main`).
"""
from __future__ import annotations

import errno
import os
import sys

import typer

from replay_harness.cli import audit, bench, conformance, impls, inspect, record, run, synth, validate, verify
from replay_harness.cli.common import err
from replay_harness.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_OK, ReplayError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Record LLM decode steps and replay them through swappable sampler implementations; "
                       "compare tokens, routing and timing. `replay CMD --help` explains a command, with an "
                       "example. Exit codes: 0 ok; 1 divergence, routing violation, refusal, failed test or "
                       "finding; 2 usage or bad input; 3 environment; 4 inconclusive.")

# One line per command in `replay --help` (click would cut the docstring's first sentence at ~45 chars).
COMMANDS = (
    (run.run, "Replay recordings through an impl; compare tokens, counts, routes."),
    (inspect.inspect, "Summarize a recording: steps, shapes, params, drafts, bytes."),
    (validate.validate, "Check a recording against the fixture schema; exit 2 if invalid."),
    (impls.impls, "List the sampler implementations --impl accepts."),
    (record.record, "Decode with a real model (speculative decoding); record each step."),
    (bench.bench, "Time impl A vs B on recorded steps; exit 4 if the path never ran."),
    (synth.synth, "Derive production-shape steps (R, k, V) from a real recording."),
    (verify.verify, "Test statistically that an impl samples the right distribution."),
    (audit.audit, "Judge a recording's emitted tokens without replaying it."),
    (conformance.conformance, "Check an impl against the conformance vectors, rule by rule."),
)
for command, short_help in COMMANDS:
    app.command(short_help=short_help)(command)


def main() -> None:
    """Console-script entry: one line and a documented exit code for every error, never a traceback."""
    try:
        rc = app(standalone_mode=False, prog_name="replay")  # same name under python -m
        sys.exit(rc if isinstance(rc, int) else 0)
    except ReplayError as e:
        err.print(f"replay: error: {e}")
        sys.exit(e.exit_code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except OSError as e:  # a path the user named: a file where a folder belongs (--out), no permission, ...
        if os.environ.get("REPLAY_DEBUG"):
            raise
        where = f"{e.filename}: " if e.filename else ""
        hint = " (a file where a folder is expected)" if e.errno == errno.ENOTDIR else ""
        bad_path = e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EACCES,
                               errno.EPERM, errno.ENAMETOOLONG, errno.EROFS)
        err.print(f"replay: error: {where}{e.strerror or e}{hint}")
        sys.exit(EXIT_BAD_INPUT if bad_path else EXIT_ENVIRONMENT)
    except (typer.Abort, KeyboardInterrupt):
        err.print("replay: interrupted")
        sys.exit(130)
    except Exception as e:  # click usage errors (typer may vendor click: match by shape) and the unexpected
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `replay`: the help, not an error
            print(e.format_message())
            sys.exit(EXIT_OK)
        if hasattr(e, "format_message") and isinstance(getattr(e, "exit_code", None), int):
            kind = "usage error" if e.exit_code == 2 else "error"
            err.print(f"replay: {kind}: {e.format_message()}")
            sys.exit(e.exit_code)
        if os.environ.get("REPLAY_DEBUG"):
            raise
        err.print(f"replay: internal error: {type(e).__name__}: {e} (set REPLAY_DEBUG=1 for a traceback)")
        sys.exit(3)


if __name__ == "__main__":
    main()
