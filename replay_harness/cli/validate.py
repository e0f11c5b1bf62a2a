"""`replay validate`: check a recording against the fixture schema (the rules: replay_harness.recording.validate)."""
from __future__ import annotations

import typer

from replay_harness.cli.common import JsonOpt, NanOpt, RecordingArg, out, print_json


def validate(path: RecordingArg, nan: NanOpt = "error", as_json: JsonOpt = False) -> None:
    """Check a recording against fixture schema v1; list every violation (file, step, field).

    Exit 0 when valid (warnings allowed), 2 when any violation is found.

    Example: replay validate fixtures/real-founding --nan warn
    """
    from replay_harness.recording.store import Recording
    from replay_harness.recording.validate import check_recording

    rec = Recording(path, nan=nan)
    problems = check_recording(rec, nan=nan)
    errors = [p for p in problems if not p.warning]
    if as_json:
        print_json({"path": path, "valid": not errors, "steps": len(rec),
                    "problems": [{"file": p.file, "step": p.step, "field": p.field, "message": p.message,
                                  "severity": "warning" if p.warning else "error"} for p in problems]})
    else:
        for p in problems:
            out.print(("warning: " if p.warning else "error: ") + str(p))
        out.print(f"{path}: {len(rec)} steps, " + ("valid" if not errors else f"{len(errors)} violation(s)"))
    raise typer.Exit(2 if errors else 0)
