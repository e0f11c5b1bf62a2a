"""`replay audit`: judge an engine's recording from its logits, params and emitted tokens alone.

Statistics live in ``replay_harness.checks.audit``; this module only prints. torch comes in through it,
inside :func:`audit`. Exit codes: 0 nothing found, 1 findings, 2 bad input, 4 not testable (docs/AUDIT.md).
"""
from __future__ import annotations

import math

import typer
from replay_harness.cli import tables

from replay_harness.cli.common import (JsonFileOpt, JsonOpt, NanOpt, QuietOpt, RecordingsArg, check_json_file, ids,
                                       out, print_json, progress, small_cpu_threads, warn_recording)
from replay_harness.errors import EXIT_INCONCLUSIVE, EXIT_MISMATCH, EXIT_OK, UsageError


def audit(
    paths: RecordingsArg,
    threshold: float = typer.Option(1e-6, "--threshold", metavar="P",
                                    help="p-value below which a statistical test is a finding (per test; the family of "
                                         "at most 14 + 7 x requests tests has a false-alarm rate of at most that "
                                         "many times it: docs/AUDIT.md)."),
    note: float = typer.Option(1e-3, "--note", metavar="P", help="p-value below which a test is listed as a note "
                               "(suspicious, not a finding)."),
    all_tests: bool = typer.Option(False, "--all-tests", help="Show the per-request tests in the table too."),
    nan: NanOpt = "error",
    as_json: JsonOpt = False,
    json_file: JsonFileOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Judge a recording without replaying it: are the emitted tokens possible, and plausible, under the
    recorded logits and sampling parameters? For engines whose RNG is unknown.

    Checks: temperature > 0 tokens that are always the argmax (greedy-at-temperature), tokens outside
    top-k/top-p/min-p (outside-support), acceptance rates the distributions cannot produce
    (acceptance-rate), noise reused across steps (reused-noise), greedy tokens that are not the argmax,
    emitted tokens that contradict the verify walk (structure), tokens a grammar mask, allowed-ids list,
    -inf bias, bad word or min-tokens forbids (forbidden-token, naming the rule) and penalties not applied
    (penalty-not-applied).

    Exit 0 when nothing is found (notes allowed), 1 on any finding, 2 on bad input, 4 when a recording is
    not testable (no emitted token could be tested, e.g. a derived recording: no engine tokens), never
    reported as "nothing found".

    Example: replay audit fixtures/real-founding
    """
    from replay_harness.checks.audit import format_p
    from replay_harness.checks.audit_shard import audit_units
    from replay_harness.compare import distributed
    from replay_harness.recording.discover import find_recordings
    from replay_harness.recording.store import Recording

    if not (0 < threshold <= note < 1):
        raise UsageError("need 0 < --threshold <= --note < 1")
    check_json_file(json_file, paths)
    small_cpu_threads()
    paths = find_recordings(paths)
    recs = [Recording(p, nan=nan) for p in paths]
    total = sum(len(rec) for rec in recs)
    with progress("replay audit", total, quiet=quiet or distributed.launched()) as bar:
        task = bar.add_task("steps", total=total)
        results = audit_units(paths, nan=nan, finding_p=threshold, note_p=note, on_step=lambda: bar.advance(task))
    if results is None:  # under torchrun, not rank 0: rank 0 reports for all
        raise typer.Exit(EXIT_OK)
    for rec in recs:  # not closed cleanly, or a digest that does not match: one warning line each
        warn_recording(rec)
    testable = all(r.testable for r in results)
    code = EXIT_MISMATCH if not all(r.ok for r in results) else (EXIT_OK if testable else EXIT_INCONCLUSIVE)
    if as_json or json_file:
        # ok: exit 0 (nothing found and everything testable); testable: every recording had a token to test
        doc = {"schema": "replay.audit/1", "ok": code == EXIT_OK, "testable": testable, "exit_code": code, "threshold": threshold,
               "note": note, "recordings": [r.to_dict() for r in results]}
        print_json(doc, json_file=json_file, stdout=as_json)
    if as_json:
        raise typer.Exit(code)

    for r in results:
        label = r.path + (" (synthetic)" if r.synthetic else "")
        T = tables
        table = T.table(f"replay audit {label}: {r.steps} steps, {r.request_steps} request-steps, "
                        f"{r.tokens_stochastic} T>0 tokens, {r.tokens_greedy} greedy tokens",
                        [("check", T.TEXT), ("scope", T.WORD), ("tail", T.WORD), ("tokens", T.NUM),
                         ("observed", T.NUM), ("expected", T.NUM), ("p-value", T.NUM), ("result", T.WORD)])
        for t in r.tests:
            if t.scope.startswith("request") and not all_tests:
                continue
            verdict = "FINDING" if t.log10_p < math.log10(threshold) else \
                ("note" if t.log10_p < math.log10(note) else "ok")
            table.add_row(f"{t.kind} ({t.test})", t.scope, t.tail, str(t.terms), str(t.observed),
                          f"{t.expected:.1f}", format_p(t.log10_p), verdict, style=T.cell_style(verdict))
        certain = {f.kind for f in r.findings if f.log10_p == float("-inf")}
        for kind in ("outside-support", "forbidden-token", "greedy-not-argmax", "structure"):
            n = sum(int(f.observed or 0) for f in r.findings if f.kind == kind)
            verdict = "FINDING" if kind in certain else ("ok" if r.testable else "not tested")
            table.add_row(kind, "all", "-", "-", str(n), "0", "0" if kind in certain else "-", verdict,
                          style=T.cell_style(verdict))
        out.print(table)
    for r in results:
        for f in r.findings:
            out.print(_line(r.path, "finding", f, format_p))
        for f in r.notes:
            out.print(_line(r.path, "note", f, format_p))
        verdict = f"{len(r.findings)} finding(s)" if not r.ok else \
            ("nothing found" if r.testable else f"not testable, {r.not_testable}")
        out.print(f"{r.path}: {verdict}" + (f", {len(r.notes)} note(s)" if r.notes else ""))
    raise typer.Exit(code)


def _line(path: str, severity: str, f, format_p) -> str:
    """One line per finding: recording, kind, scope, requests, steps, observed vs expected, p-value, what."""
    obs = "" if f.observed is None else f"observed {f.observed:g}" + ("" if f.terms is None else f" of {f.terms}")
    exp = "" if f.expected is None else f" vs expected {f.expected:.1f}"
    p = "" if f.log10_p is None else f", p = {format_p(f.log10_p)}"
    scope = f" ({f.scope})" if f.scope else ""
    return (f"{path}: {severity} {f.kind}{scope}: requests {ids(f.request_ids)}; steps {ids(f.steps)}; "
            f"{obs}{exp}{p}; {f.message}")
