"""`replay verify`: does an impl sample from the right distribution? (statistics: replay_harness.checks.verify)

torch, numpy and scipy are imported inside :func:`verify`, so ``replay`` starts fast. docs/VERIFY.md is
the method.
"""
from __future__ import annotations

from typing import List, Optional

import typer
from replay_harness.cli import tables

from replay_harness.cli.common import (ImplTimeoutOpt, JsonFileOpt, JsonOpt, NanOpt, QuietOpt, check_json_file,
                                       device_opt, impl_arg_opt, impl_opt, out, print_json, progress, set_impl_timeout,
                                       small_cpu_threads, warn_recording)
from replay_harness.errors import EXIT_INCONCLUSIVE, EXIT_MISMATCH, EXIT_OK, UsageError

MAX_FAILURE_LINES = 20
# --trials at most: memory and runtime grow linearly with it (a request's outcomes are held at once: tokens
# alone are trials x (k + 1) x 8 bytes, 136 MB at this bound with k = 16); a probability is then resolved to
# about 3 / sqrt(trials) = 0.3%. A larger value would run out of memory, not verify better.
MAX_TRIALS = 1_000_000
ImplOpt = impl_opt("Sampler implementation to verify (`replay impls`).")
ImplArgOpt = impl_arg_opt("(exec:PROGRAM), repeatable.")
DeviceOpt = device_opt("On the CPU, Triton impls run under TRITON_INTERPRET=1 (slow).")


def verify(
    paths: Optional[List[str]] = typer.Argument(None, metavar="RECORDING", help="Recording folders (or "
                                                "folders of them). None: built-in SYNTHETIC steps "
                                                "(vocabulary 64: one-hot and draft-logit drafts, greedy, "
                                                "top-k/top-p/min-p, placeholders)."),
    impl: ImplOpt = "reference",
    trials: int = typer.Option(400, "--trials", metavar="N",
                               help="Runs of every request, each with its own seed (half of them twins: same seed, "
                                    "shifted positions), plus half as many for the position test. Runtime and memory "
                                    "are linear in it; power grows with it; at most 1,000,000."),
    steps: Optional[str] = typer.Option(None, "--steps", metavar="STEPS",
                                        help="Steps to verify in every recording, e.g. 0 or 0,2 or 1-3 (default: "
                                             "all)."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of the trial seeds (same seed, same trials)."),
    alpha: float = typer.Option(1e-3, "--alpha", metavar="P", help="Family-wise false-alarm rate: each of the m tests "
                                                      "must reach p >= alpha/m (Bonferroni); every verdict "
                                                      "rests on an exact or Monte Carlo p-value, so the rate "
                                                      "is at most alpha (docs/VERIFY.md)."),
    recorded_drafts: bool = typer.Option(False, "--recorded-drafts", help="On steps with draft logits, keep "
                                         "the recorded drafts in every trial (exact conditional law) instead of "
                                         "drawing them from the draft distribution q (default)."),
    no_twins: bool = typer.Option(False, "--no-twins", help="Give every trial its own seed and skip the "
                                  "independence and position tests (for impls whose RNG contract does not key "
                                  "noise by position)."),
    impl_arg: ImplArgOpt = None,
    impl_timeout: ImplTimeoutOpt = None,
    device: DeviceOpt = "auto",
    nan: NanOpt = "error",
    as_json: JsonOpt = False,
    json_file: JsonFileOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Check statistically that --impl samples from the right distribution.

    Every request of every chosen step is re-run --trials times with distinct seeds. Per position, the
    emitted tokens are tested against the exact law after sampling params (chi-squared, sparse bins
    merged; Monte Carlo p-values near the threshold), the acceptance rate against the theoretical one
    (binomial), twin runs and same-row reruns at other positions for independent noise (binomial:
    "noise does not depend on position"), greedy requests for the exact argmax walk; block verification and draft
    trees against their lossless laws, FLy against its own rule, reported LOSSY with its measured divergence
    (exit 0: lossy by design, docs/VERIFY.md). Exit 0 when every test passes, 1 when
    a test fails (position and statistic named) or requests were refused (not verifiable), 2 on bad
    input, 3 when the impl cannot run here, 4 when nothing could be tested or a mechanism the recording
    exercises (temperature, position-keyed noise, top-k, top-p, min-p, acceptance, residual) had no power.

    Example: replay verify fixtures/real-founding --impl greedy-only
    """
    from replay_harness.recording.discover import find_recordings
    from replay_harness.recording.store import Recording
    from replay_harness.compare.runner import load_impl, resolve_device
    from replay_harness.checks.verify import VerifyReport, builtin_steps, finalize, parse_steps, verify_units
    from replay_harness.compare import distributed

    if not 2 <= trials <= MAX_TRIALS:
        raise UsageError(f"--trials must be from 2 to {MAX_TRIALS:,}, got {trials}")
    if not 0 < alpha < 1:
        raise UsageError(f"--alpha must lie in (0, 1), got {alpha:g}")
    check_json_file(json_file, paths)
    dev = resolve_device(device)
    small_cpu_threads(dev)
    sources = []  # (label, synthetic, [(index, step)]) -- steps are read lazily
    if paths:
        paths = find_recordings(paths)
        for p in paths:
            rec = Recording(p, nan=nan)
            try:
                chosen = parse_steps(steps, len(rec))
            except ValueError as e:
                raise UsageError(f"--steps for {p}: {e}") from None
            sources.append((p, rec.synthetic, rec, chosen))
    else:
        built = builtin_steps()
        try:
            chosen = parse_steps(steps, len(built))
        except ValueError as e:
            raise UsageError(f"--steps for the built-in steps: {e}") from None
        sources.append(("built-in (synthetic)", True, built, chosen))

    report = VerifyReport(impl=impl, trials=trials + trials % 2, seed=seed, alpha=alpha,
                          drafts="recorded" if recorded_drafts else "sampled")

    def open_impl(on):  # once per process (under torchrun: on this rank's GPU)
        sampler = load_impl(impl, on, impl_arg, impl_timeout if impl.startswith("exec:") else None)
        set_impl_timeout(sampler, impl_timeout)
        return sampler

    def step_at(rec, i):
        return rec[i].step if isinstance(rec, Recording) else rec[i]

    quiet = quiet or distributed.launched()  # under torchrun: no bar (and no reading every step for its total)
    total = 0 if quiet else sum(_runs(step_at(rec, i), trials, not no_twins) for _, _, rec, chosen in sources
                                for i in chosen)
    with progress("replay verify", total, quiet=quiet) as bar:
        task = bar.add_task("runs", total=total)
        units = verify_units(sources, open_impl, trials, seed, dev, sample_drafts=not recorded_drafts,
                             twins=not no_twins, on_chunk=lambda n: bar.advance(task, n))
    if units is None:  # under torchrun, not rank 0: rank 0 reports for all
        raise typer.Exit(EXIT_OK)
    report.units = units
    finalize(report)
    for _, _, rec, _ in sources:  # not closed cleanly, or a digest that does not match: one warning line each
        if isinstance(rec, Recording):
            warn_recording(rec)
    code = EXIT_OK if report.ok else EXIT_MISMATCH
    if report.inconclusive:  # nothing could have failed in a bug's direction: no pass (docs/VERIFY.md)
        code = EXIT_INCONCLUSIVE
    if as_json or json_file:
        from replay_harness.checks.methods_verify import lossy_json

        doc = {"schema": "replay.verify/1", **report.to_dict(), "device": dev.type, "exit_code": code, "ok": code == EXIT_OK,
               "lossy": lossy_json(report), "recordings": [{"path": label, "synthetic": syn, "steps": chosen}
                              for label, syn, _, chosen in sources]}
        print_json(doc, default=float, json_file=json_file, stdout=as_json)
    if not as_json:
        _print(report, sources, code, dev.type)
    raise typer.Exit(code)


def _runs(step, trials: int, twins: bool) -> int:
    """The impl runs verify makes for ``step``: the position test (twins) runs for T > 0 requests only."""
    from replay_harness.checks.trials import expected_runs

    stochastic = int((step.temperature != 0).sum())
    return (expected_runs([step.num_requests - stochastic], trials, position=False)
            + expected_runs([stochastic], trials, position=twins))


def _fmt_p(p: float) -> str:
    """A p-value cell: an underflow (p = 0.0 in floats) is "< 1e-300", never "0"."""
    from replay_harness.checks.tails import P_FLOOR

    return f"< {P_FLOOR:g}" if p <= P_FLOOR else f"{p:.3g}"


def unit_result(u) -> str:
    """The table's result cell: a request with no test run is "not testable", one whose statistical tests
    all passed without power (none could have failed in a bug's direction) "no power", never "ok"."""
    if u.status == "refused":
        return "refused"
    if u.status in ("skipped", "untestable") or not u.checks:
        return "not testable"
    if u.failed:
        return "FAIL"
    stat = [c for c in u.checks if c.statistical]
    return "no power" if stat and all(c.powered is False for c in stat) else "ok"


def _statistic(c, thr: float) -> str:
    """How a failed test's p-value came about: the statistic, the method and the threshold."""
    from replay_harness.checks.tails import p_text

    if c.kind == "distribution":
        how = {"monte-carlo": f"Monte Carlo, {c.simulations} simulations; chi-squared approximation "
                              f"{_fmt_p(c.approx_p or 0.0)}", "binomial": "two bins: exact binomial"}.get(c.method,
                                                                                                   "chi-squared")
        return f"chi2 = {c.statistic:.1f}, df = {c.df}, {p_text(c.p_value)} < {thr:.2g}; {how}"
    if c.statistical:
        return f"binomial: {int(c.statistic)} of {c.n}, {p_text(c.p_value)} < {thr:.2g}"
    return "exact check"


def _print(report, sources, code: int, device: str) -> None:
    """The table (one row per request), one line per failed test and refusal, and the verdict."""
    T = tables
    out.print(f"replay verify --impl {report.impl} on {device} ({report.trials} trials per request, "
              f"alpha {report.alpha:g})")
    for recording in dict.fromkeys(u.recording for u in report.units):  # one table per recording, named above it
        table = T.table(recording, [("step", T.NUM), ("request", T.NUM), ("temp", T.NUM), ("k", T.NUM),
                                    ("route", T.TEXT), ("tests", T.NUM), ("min p", T.NUM), ("result", T.WORD)])
        for u in (u for u in report.units if u.recording == recording):
            ps = [c.p_value for c in u.checks if c.p_value is not None]
            result = unit_result(u)
            table.add_row(str(u.step), str(u.request_id), f"{u.temperature:g}", str(u.num_drafts), ",".join(u.routes),
                          str(len(u.checks)), _fmt_p(min(ps)) if ps else "-", result, style=T.cell_style(result))
        out.print(table)
    thr = report.threshold
    for c in report.failures[:MAX_FAILURE_LINES]:
        where = f"{c.recording}: step {c.step}, request {c.request_id} (index {c.request})"
        if c.position is not None:
            where += f", position {c.position}"
        out.print(f"{where}: {c.title} FAILED ({_statistic(c, thr)}): {c.message}")
    if len(report.failures) > MAX_FAILURE_LINES:
        out.print(f"... and {len(report.failures) - MAX_FAILURE_LINES} more failed tests (--json lists all)")
    for u in report.refused:
        out.print(f"{u.recording}: step {u.step}, request {u.request_id} (index {u.request}): "
                  f"{'; '.join(u.notes)} (route {','.join(u.routes)})")
    m, failed = report.num_statistical, report.failures
    exact = [c for c in report.checks if not c.statistical]
    stat_failed = sum(c.statistical for c in failed)
    # the breakdown one fact a line (CI logs fold nothing), the verdict last and short
    if m:
        out.print(f"  {m} statistical tests, {stat_failed} failed (per-test threshold p >= {thr:.2g}: family-wise "
                  f"false-alarm rate at most {report.alpha:g}, Bonferroni)")
    else:
        out.print("  no statistical test ran")
    out.print(f"  {len(exact)} exact checks, {len(failed) - stat_failed} failed")
    out.print(f"  {len(report.refused)} request(s) refused")
    if report.untestable:
        out.print(f"  {len(report.untestable)} request(s) not testable")
    if report.powerless:
        out.print(f"  {len(report.powerless)} test(s) passed without power (no outcome could fall below the threshold "
                  "in a bug's direction: not counted as passes)")
    from replay_harness.checks.power import describe, gaps_text

    for line in describe(report.coverage):  # per recording: the mechanisms that could have failed, and not
        out.print(line, soft_wrap=True)
    from replay_harness.checks.methods_verify import lossy_lines

    lossy = lossy_lines(report)  # a lossy method (FLy): its divergence, never a silent pass (docs/VERIFY.md)
    for line in lossy:
        out.print(line, soft_wrap=True)
    verdict = {EXIT_OK: "LOSSY" if lossy else "PASS", EXIT_MISMATCH: "FAIL", EXIT_INCONCLUSIVE: "INCONCLUSIVE"}[code]
    summary = f"{m + len(exact)} tests, {len(failed)} failed, {len(report.refused)} refused"
    if code == EXIT_INCONCLUSIVE:
        need, gaps = report.trials_needed(), report.uncovered
        summary += ((f": {gaps_text(gaps)}" if gaps and report.powered else ": nothing here could have failed") + (
            f"; raise --trials to {need}" if need else
            "; more trials cannot help (every request greedy, not testable or certain): verify other steps or "
            "recordings with temperature > 0 requests"))
    out.print(f"{verdict}: {report.impl} on {device}: {summary}", soft_wrap=True)
