"""`replay validate`: check recordings against the fixture schema (the rules: replay_harness.recording.validate)."""
from __future__ import annotations

import typer

from replay_harness.cli.common import (JsonFileOpt, JsonOpt, NanOpt, NegInfOpt, RecordingsArg, check_json_file, out,
                                       print_json)


def validate(paths: RecordingsArg, nan: NanOpt = "error", neg_inf: NegInfOpt = "warn", as_json: JsonOpt = False,
             json_file: JsonFileOpt = None,
             clean_tmp: bool = typer.Option(False, "--clean-tmp", help="Delete the temp files (.*.tmp) an "
                                            "interrupted writer left in the recording (run it when no writer "
                                            "is writing there).")) -> None:
    """Check recordings (or folders of recordings) against fixture schema v1; list every violation (file,
    step, field).

    Exit 0 when valid (warnings allowed), 2 when any violation is found. Temp files left by a killed writer
    are reported as warnings; --clean-tmp deletes them. All -inf logits rows are warned about and counted
    (--neg-inf-rows error makes them violations).

    Example: replay validate fixtures/real-founding --nan warn
    """
    from replay_harness.recording.discover import find_recordings

    check_json_file(json_file, paths)
    docs = [_validate_one(p, nan, neg_inf, clean_tmp, as_json) for p in find_recordings(paths)]
    if as_json or json_file:
        # one shape whatever the number of recordings (docs/INTEGRATION.md, "JSON documents"); `ok` as in every
        # command's document, `valid` kept beside it (the same boolean) for the readers written against it
        ok = all(d["ok"] for d in docs)
        print_json({"schema": "replay.validate/1", "ok": ok, "valid": ok, "exit_code": 0 if ok else 2,
                    "recordings": docs}, json_file=json_file, stdout=as_json)
    raise typer.Exit(0 if all(d["valid"] for d in docs) else 2)


def _validate_one(path: str, nan: str, neg_inf: str, clean_tmp: bool, as_json: bool) -> dict:
    """Check one recording; print its lines (not with ``as_json``); its JSON document."""
    from replay_harness.errors import InputError
    from replay_harness.recording.store import Recording
    from replay_harness.recording.validate import check_recording, is_neg_inf_row

    rec = Recording(path, nan=nan, neg_inf=neg_inf)
    problems = check_recording(rec, nan=nan, neg_inf=neg_inf)
    removed = []
    for tmp in rec.temp_files():
        if clean_tmp:
            tmp.unlink(missing_ok=True)
            removed.append(str(tmp))
        else:
            problems.append(InputError(tmp, "temp file of an interrupted writer (`replay validate --clean-tmp "
                                            f"{path}` deletes it)", warning=True))
    errors = [p for p in problems if not p.warning]
    neg_inf_rows = sum(map(is_neg_inf_row, problems))
    if not as_json:
        for p in problems:
            out.print(("warning: " if p.warning else "error: ") + str(p))
        for f in removed:
            out.print(f"removed {f}")
        counted = f", {neg_inf_rows} all -inf row(s)" if neg_inf_rows else ""
        out.print(f"{path}: {len(rec)} steps, " + ("valid" if not errors else f"{len(errors)} violation(s)")
                  + counted)
    return {"path": path, "ok": not errors, "valid": not errors, "steps": len(rec), "removed_tmp": removed,
            "neg_inf_rows": neg_inf_rows,
            "problems": [{"file": p.file, "step": p.step, "field": p.field, "message": p.message,
                          "severity": "warning" if p.warning else "error"} for p in problems]}
