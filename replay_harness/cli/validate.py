"""`replay validate`: check recordings against the fixture schema (the rules: replay_harness.recording.validate)."""
from __future__ import annotations

import stat
from pathlib import Path

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
    removed = [str(p) for p in remove_temp_files(rec.path)] if clean_tmp else []
    for tmp in rec.temp_files():  # with --clean-tmp: the ones behind a symlinked or mounted steps/, left alone
        what = ("not deleted: it lies behind a steps/ that is a symlink or a mount point" if clean_tmp else
                f"`replay validate --clean-tmp {path}` deletes it")
        problems.append(InputError(tmp, f"temp file of an interrupted writer ({what})", warning=True))
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


def remove_temp_files(folder: Path) -> list[Path]:
    """Delete the temp files a killed writer left in the recording ``folder`` (``.*.tmp``, regular files only, in
    the folder and its own steps/), relative to the folder's descriptor (replay_harness.guarded): never through
    a steps/ that is a symlink or a mount point. The paths deleted."""
    from replay_harness.errors import UsageError
    from replay_harness.guarded import TMP_SUFFIX, Folder

    removed = []
    with Folder.at(folder) as top:
        folders = [(top, folder)]
        try:
            folders.append((top.subfolder("steps", create=False), folder / "steps"))
        except (OSError, UsageError):
            pass
        for here, shown in folders:
            for name in here.listdir():
                entry = here.lstat(name)
                if name.startswith(".") and name.endswith(TMP_SUFFIX) and entry and stat.S_ISREG(entry.st_mode):
                    here.delete(name)
                    removed.append(shown / name)
        for here, _ in folders[1:]:
            here.close()
    return sorted(removed)
