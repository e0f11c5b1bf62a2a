"""`replay diff A B`: where two recordings of the same prompts part (the work: replay_harness.recording.recording_diff)."""
from __future__ import annotations

import typer

from replay_harness.cli.common import JsonFileOpt, JsonOpt, check_json_file, ids, out, print_json, warn_recording
from replay_harness.errors import EXIT_MISMATCH, EXIT_OK

MAX_LINES = 20  # partings printed one line each; --json lists all


def diff(
    a: str = typer.Argument(..., metavar="A", help="A recording (e.g. from the engine's current build)."),
    b: str = typer.Argument(..., metavar="B", help="A recording of the same prompts (e.g. from the new build)."),
    atol: float = typer.Option(1e-3, "--atol", metavar="X", help="Logits are the same within X + RTOL * |b|."),
    rtol: float = typer.Option(1e-2, "--rtol", metavar="RTOL", help="Relative part of the logits' tolerance."),
    as_json: JsonOpt = False,
    json_file: JsonFileOpt = None,
) -> None:
    """Show where two recordings of the same prompts part: for every request, the first step whose emitted
    tokens (or recorded route) differ between A and B, and which of its inputs differ there, by rule:
    sampling-params, drafts, pipeline (schema minor 2: penalties, bias, grammar bitmask, ...), positions,
    logits or draft-logits (beyond --atol + --rtol |b|); "sampler" when every input is the same, so the
    sampler's output itself differs. Steps are paired by index, requests by request id.

    Exit 0 when no request parts (and both hold the same steps and requests), 1 when one does, 2 on bad
    input. Request-steps with the same tokens but an input beyond the tolerance are counted ("drift").

    Example: replay diff recordings/build-old recordings/build-new --atol 1e-2
    """
    from replay_harness.recording.recording_diff import diff_recordings
    from replay_harness.recording.store import Recording
    from replay_harness.errors import UsageError

    if not (atol >= 0 and rtol >= 0):
        raise UsageError("--atol and --rtol must be >= 0")
    check_json_file(json_file, [a, b])
    ra, rb = Recording(a), Recording(b)
    for rec in (ra, rb):
        warn_recording(rec)
    d = diff_recordings(ra, rb, atol=atol, rtol=rtol)
    code = EXIT_OK if d.same else EXIT_MISMATCH
    if as_json or json_file:
        print_json({"schema": "replay.diff/1", "ok": code == EXIT_OK, "exit_code": code, **d.to_dict()},
                   json_file=json_file, stdout=as_json)
    if not as_json:
        _print(d, code)
    raise typer.Exit(code)


def _print(d, code: int) -> None:
    """One line per parting request (at most MAX_LINES), the notes, then the verdict line."""
    for note in d.notes:
        out.print(f"note: {note}")
    for p in d.partings[:MAX_LINES]:
        what = (f"tokens {p.a_tokens} vs {p.b_tokens}" if p.kind == "tokens" else
                f"same tokens {p.a_tokens}, route {p.a_route} vs {p.b_route}")
        why = ("inputs differ: " + "; ".join(x.detail for x in p.inputs) if p.inputs else
               "same inputs: the sampler's output differs")
        out.print(f"request {p.request_id} parts at step {p.step} (position {p.position}): {what} "
                  f"[{', '.join(p.rules)}]; {why}")
    if len(d.partings) > MAX_LINES:
        out.print(f"... and {len(d.partings) - MAX_LINES} more parting request(s) (--json lists all)")
    for side, only in (("A", d.only_a), ("B", d.only_b)):
        if only:
            out.print(f"only in {side}'s step: " + ids([f"request {q} (step {s})" for s, q in only], 6))
    if d.drift:
        out.print("same tokens, inputs beyond the tolerance (drift): "
                  + ", ".join(f"{r} {n} request-step(s)" for r, n in d.drift.items()))
    rules = ", ".join(f"{r} {n}" for r, n in d.by_rule().items())
    head = f"{d.request_steps} request-steps of {d.requests} requests compared over {min(d.steps_a, d.steps_b)} steps"
    if code == EXIT_OK:
        out.print(f"SAME: {d.a} and {d.b}: {head}; no request parts")
    else:
        out.print(f"DIFFERENT: {d.a} and {d.b}: {head}; {len(d.partings)} request(s) part"
                  + (f", by rule: {rules}" if rules else ""))
