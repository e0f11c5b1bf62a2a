"""`replay audit`: judge an engine's recording from its logits, params and emitted tokens alone.

Statistics live in ``replay_harness.checks.audit``; this module only prints. torch comes in through it,
inside :func:`audit`. Exit codes: 0 nothing found, 1 findings, 2 bad input (docs/AUDIT.md).
"""
from __future__ import annotations

import math

import typer
from rich.table import Table

from replay_harness.cli.common import (JsonOpt, NanOpt, QuietOpt, RecordingsArg, ids, out, print_json, progress,
                                       small_cpu_threads)
from replay_harness.errors import EXIT_MISMATCH, EXIT_OK, UsageError


def audit(
    paths: RecordingsArg,
    threshold: float = typer.Option(1e-6, "--threshold", help="p-value below which a statistical test is a "
                                    "finding (per test; the family of 10 + 5 x requests tests has a false-alarm "
                                    "rate of at most that many times it: docs/AUDIT.md)."),
    note: float = typer.Option(1e-3, "--note", help="p-value below which a test is listed as a note "
                               "(suspicious, not a finding)."),
    all_tests: bool = typer.Option(False, "--all-tests", help="Show the per-request tests in the table too."),
    nan: NanOpt = "error",
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Judge a recording without replaying it: are the emitted tokens possible, and plausible, under the
    recorded logits and sampling parameters? For engines whose RNG is unknown.

    Checks: temperature > 0 tokens that are always the argmax (greedy-at-temperature), tokens outside
    top-k/top-p/min-p (outside-support), acceptance rates the distributions cannot produce
    (acceptance-rate), noise reused across steps (reused-noise), greedy tokens that are not the argmax
    and emitted tokens that contradict the verify walk (structure).

    Exit 0 when nothing is found (notes allowed), 1 on any finding, 2 on bad input.

    Example: replay audit fixtures/real-founding
    """
    from replay_harness.checks.audit import audit_recording, format_p
    from replay_harness.recording.discover import find_recordings
    from replay_harness.recording.store import Recording

    if not (0 < threshold <= note < 1):
        raise UsageError("need 0 < --threshold <= --note < 1")
    small_cpu_threads()
    paths = find_recordings(paths)
    total = sum(len(Recording(p, nan=nan)) for p in paths)
    results = []
    with progress("replay audit", total, quiet=quiet) as bar:
        task = bar.add_task("steps", total=total)
        for p in paths:
            results.append(audit_recording(p, nan=nan, finding_p=threshold, note_p=note,
                                           on_step=lambda: bar.advance(task)))
    ok = all(r.ok for r in results)
    code = EXIT_OK if ok else EXIT_MISMATCH
    if as_json:
        doc = {"ok": ok, "exit_code": code, "threshold": threshold, "note": note,
               "recordings": [r.to_dict() for r in results]}
        print_json(doc)
        raise typer.Exit(code)

    for r in results:
        label = r.path + (" (synthetic)" if r.synthetic else "")
        table = Table(title=f"replay audit {label}: {r.steps} steps, {r.request_steps} request-steps, "
                            f"{r.tokens_stochastic} T>0 tokens, {r.tokens_greedy} greedy tokens")
        for col in ("check", "scope", "tail", "tokens", "observed", "expected", "p-value", "result"):
            table.add_column(col, justify="left" if col in ("check", "scope", "tail") else "right")
        for t in r.tests:
            if t.scope.startswith("request") and not all_tests:
                continue
            verdict = "FINDING" if t.log10_p < math.log10(threshold) else \
                ("note" if t.log10_p < math.log10(note) else "ok")
            table.add_row(f"{t.kind} ({t.test})", t.scope, t.tail, str(t.terms), str(t.observed),
                          f"{t.expected:.1f}", format_p(t.log10_p), verdict)
        certain = {f.kind for f in r.findings if f.log10_p == float("-inf")}
        for kind in ("outside-support", "greedy-not-argmax", "structure"):
            n = sum(int(f.observed or 0) for f in r.findings if f.kind == kind)
            table.add_row(kind, "all", "-", "-", str(n), "0", "0" if kind in certain else "-",
                          "FINDING" if kind in certain else "ok")
        out.print(table)
    for r in results:
        for f in r.findings:
            out.print(_line(r.path, "finding", f, format_p))
        for f in r.notes:
            out.print(_line(r.path, "note", f, format_p))
        out.print(f"{r.path}: " + ("nothing found" if r.ok else f"{len(r.findings)} finding(s)")
                  + (f", {len(r.notes)} note(s)" if r.notes else ""))
    raise typer.Exit(code)


def _line(path: str, severity: str, f, format_p) -> str:
    """One line per finding: recording, kind, scope, requests, steps, observed vs expected, p-value, what."""
    obs = "" if f.observed is None else f"observed {f.observed:g}" + ("" if f.terms is None else f" of {f.terms}")
    exp = "" if f.expected is None else f" vs expected {f.expected:.1f}"
    p = "" if f.log10_p is None else f", p = {format_p(f.log10_p)}"
    scope = f" ({f.scope})" if f.scope else ""
    return (f"{path}: {severity} {f.kind}{scope}: requests {ids(f.request_ids)}; steps {ids(f.steps)}; "
            f"{obs}{exp}{p}; {f.message}")
