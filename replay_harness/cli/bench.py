"""`replay bench`: A/B timing on recorded steps, with a coverage guard (the timing: replay_harness.bench).

torch and the bench modules are imported inside :func:`bench`, so ``replay`` starts fast. docs/BENCH.md
is the user guide.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import List, Optional

import typer

from replay_harness.cli.common import (ImplTimeoutOpt, JsonFileOpt, JsonOpt, NanOpt, QuietOpt, check_json_file,
                                       check_output_file, device_opt, err, impl_arg_opt, impl_opt, out, progress,
                                       set_impl_timeout, temperatures, warn_recording, write_json_file)
from replay_harness.errors import EXIT_INCONCLUSIVE, EXIT_MISMATCH, EXIT_OK, UsageError

ImplOpt = impl_opt("Impl A (`replay impls` lists them).", optional=True)
ImplArgOpt = impl_arg_opt("(exec:...); repeatable.")
DeviceOpt = device_opt("CPU: wall-clock, Triton interpreter, not representative.")


def _parse_expect(values: list[str] | None) -> list[tuple[str | None, str]]:
    from replay_harness.recording.step import ROUTES

    out = []
    for v in values or []:
        key, _, route = v.rpartition(":") if ":" in v else (None, "", v)
        key = key or None
        if key not in (None, "A", "B") or route not in ROUTES:
            raise UsageError(f"--expect-route {v!r}: expected ROUTE, A:ROUTE or B:ROUTE with ROUTE one of "
                             + ", ".join(ROUTES))
        out.append((key, route))
    return out


def _temperature_override(values: list[float], option: str) -> float | tuple[float, ...] | None:
    """The --temperature what-if: None (keep the recorded ones), one value for every request, or several
    cycled over each step's requests (request i gets ``values[i % len(values)]``)."""
    if not values:
        return None
    if len(set(values)) == 1:
        return values[0]
    return tuple(values)


def bench(
    paths: Optional[List[str]] = typer.Argument(None, metavar="RECORDING", help="Recording folders, or folders "
                                                "of them (derived ones from `replay synth` too)."),
    impl: ImplOpt = None,
    vs: Optional[str] = typer.Option(None, "--vs", metavar="NAME",
                                     help="Impl B, timed interleaved with A; the report gives time(A)/time(B) with a "
                                          "bootstrap CI."),
    impl_arg: ImplArgOpt = None,
    temperature: Optional[List[str]] = typer.Option(None, "--temperature", metavar="T", help="What-if: requests "
                                                    "at this temperature (0 = greedy); repeatable (or comma "
                                                    "separated), values cycled over each step's requests: "
                                                    "--temperature 0 --temperature 1 alternates."),
    top_p: Optional[float] = typer.Option(None, "--top-p", metavar="P", help="What-if: every request at this top-p."),
    top_k: Optional[int] = typer.Option(None, "--top-k", metavar="N",
                                        help="What-if: every request at this top-k (0 = off)."),
    drop_drafts: bool = typer.Option(False, "--drop-drafts", help="What-if: speculative requests become plain "
                                                                  "samples of their first row."),
    vs_temperature: Optional[List[str]] = typer.Option(None, "--vs-temperature", metavar="T", help="B's "
                                                       "temperature, like --temperature (A keeps --temperature); "
                                                       "without --vs, B is A's impl. The cheap check: "
                                                       "--drop-drafts --temperature 0 --vs-temperature 1."),
    expect_route: Optional[List[str]] = typer.Option(None, "--expect-route", metavar="ROUTE",
                                                     help="Require ROUTE (or A:ROUTE / B:ROUTE) to be taken by some "
                                                          "request, else exit 4; repeatable; replaces the default "
                                                          "stochastic-route check."),
    repeats: Optional[int] = typer.Option(None, "--repeats", metavar="N",
                                          help="Timed calls per step and impl (default 20 on CUDA, 3 on the CPU)."),
    warmup: Optional[int] = typer.Option(None, "--warmup", metavar="N",
                                         help="Untimed calls before timing (default 3 on CUDA, 1 on the CPU)."),
    warm_l2: bool = typer.Option(False, "--warm-l2", help="Reuse one input copy (warm L2) instead of rotating "
                                                          "copies larger than 2x L2."),
    split_routes: bool = typer.Option(False, "--split-routes", help="Time each step's requests per expected "
                                                                    "route separately (a sub-step each)."),
    device: DeviceOpt = "auto",
    nan: NanOpt = "error",
    as_json: JsonOpt = False,
    json_file: JsonFileOpt = None,
    quiet: QuietOpt = False,
    csv_file: Optional[str] = typer.Option(None, "--csv", metavar="PATH",
                                           help="Write one long-format CSV row per measurement."),
    png: Optional[str] = typer.Option(None, "--png", metavar="PATH",
                                      help="Write a plot (time per step by impl and route); needs matplotlib."),
    plot_from: Optional[str] = typer.Option(None, "--plot-from", metavar="CSV",
                                            help="Only render --png from a CSV that `replay bench --csv` wrote."),
    resamples: int = typer.Option(2000, "--resamples", metavar="N", help="Bootstrap resamples of the A/B ratio CI."),
    impl_timeout: ImplTimeoutOpt = None,
    save_baseline: Optional[str] = typer.Option(None, "--save-baseline", metavar="PATH",
                                                help="Write this run's median per case (side, recording, step) to "
                                                     "PATH, a baseline for --compare-baseline (docs/BENCH.md)."),
    compare_baseline: Optional[str] = typer.Option(None, "--compare-baseline", metavar="PATH",
                                                   help="Compare each case's median with the baseline at PATH "
                                                        "(this run / baseline); read before any work."),
    fail_above: Optional[float] = typer.Option(None, "--fail-above", metavar="RATIO",
                                               help="With --compare-baseline: exit 1 naming every case whose "
                                                    "ratio exceeds RATIO (1.10: 10% slower), as "
                                                    "pytest-benchmark's --benchmark-compare-fail."),
) -> None:
    """Time impls on recorded steps (A vs B interleaved), and prove the code under test ran.

    Exit 0: the path under test ran (verdict conclusive, or NOISY when the calls of a step spread over
    more than half their median: the times are then not precise); 4: INCONCLUSIVE (the path under test
    never ran: no stochastic route, an --expect-route not taken, every request refused, or A and B
    identical), never reported as 'no difference'; 2: bad input or usage; 3: environment. Routing
    violations are reported, not failed. With --compare-baseline FILE --fail-above RATIO: 1 when a case
    regressed past RATIO (each named), 4 when the timings are noisy or no case matches the baseline.

    Example: replay bench fixtures/real-founding --impl greedy-only --vs stochastic

    Example: replay bench REC --impl stochastic --compare-baseline main.json --fail-above 1.10
    """
    inputs = [*(paths or []), plot_from]  # never written over: the recordings, the CSV
    check_json_file(json_file, inputs)
    check_output_file(csv_file, inputs, "--csv")
    check_output_file(png, inputs, "--png")
    check_output_file(save_baseline, inputs, "--save-baseline")
    if fail_above is not None and not compare_baseline:
        raise UsageError("--fail-above needs --compare-baseline FILE")
    if fail_above is not None and not fail_above > 0:
        raise UsageError(f"--fail-above {fail_above:g}: must be a ratio > 0 (1.10: fail a case 10% slower)")
    from replay_harness.bench import baseline as baselines

    base_doc = baselines.read_baseline(compare_baseline) if compare_baseline else None
    if plot_from:
        if not png:
            raise UsageError("--plot-from needs --png OUT.png")
        rows = _plot_csv(plot_from)
        try:
            _plot(rows, png)
        except ImportError:
            from replay_harness.errors import EnvironmentProblem
            raise EnvironmentProblem("--png needs matplotlib (pip install 'replay-sampler-harness[bench]')") from None
        out.print(f"wrote {png} from {plot_from} ({len(rows)} rows)")
        raise typer.Exit(EXIT_OK)
    if not paths:
        raise UsageError("give at least one recording folder (or --plot-from CSV --png PNG)")
    if not impl:
        raise UsageError("--impl NAME is required (`replay impls` lists them)")
    expect = _parse_expect(expect_route)

    from replay_harness.bench.ab import Side
    from replay_harness.bench.shard import bench_units
    from replay_harness.compare import distributed
    from replay_harness.bench.overrides import Overrides
    from replay_harness.bench.report import csv_rows, dumps, print_tables, to_json, write_csv
    from replay_harness.compare.runner import load_impl, resolve_device
    from replay_harness.recording.discover import find_recordings
    from replay_harness.recording.store import Recording

    dev = resolve_device(device)
    cuda = dev.type == "cuda"
    repeats = repeats if repeats is not None else (20 if cuda else 3)
    warmup = warmup if warmup is not None else (3 if cuda else 1)
    if repeats < 1 or warmup < 0 or resamples < 100:
        raise UsageError("--repeats must be >= 1, --warmup >= 0, --resamples >= 100")
    temp_a = _temperature_override(temperatures(temperature), "--temperature")
    temp_b = _temperature_override(temperatures(vs_temperature, "--vs-temperature"), "--vs-temperature")
    ov_a = Overrides(temperature=temp_a, top_p=top_p, top_k=top_k, drop_drafts=drop_drafts)
    ov_b = Overrides(temperature=temp_b if temp_b is not None else temp_a, top_p=top_p, top_k=top_k,
                     drop_drafts=drop_drafts)
    paths = find_recordings(paths)
    recs = [Recording(p, nan=nan) for p in paths]
    names = [impl] + ([vs or impl] if (vs or temp_b is not None) else [])
    args = list(impl_arg or [])
    any_external = any(n.startswith("exec:") for n in names)

    def impl_args_for(name: str) -> list[str] | None:
        # external impls take --impl-arg; a built-in given one is refused by get_impl (exit 2)
        if not args:
            return None
        return args if (name.startswith("exec:") or not any_external) else None

    def timeout_for(name: str) -> float | None:
        return impl_timeout if name.startswith("exec:") else None

    def open_sides(on) -> list:  # once per process (under torchrun: on this rank's GPU); closed by bench_units
        sides = [Side("A", names[0], load_impl(names[0], on, impl_args_for(names[0]), timeout_for(names[0])), ov_a)]
        if len(names) == 2:
            sides.append(Side("B", names[1], load_impl(names[1], on, impl_args_for(names[1]),
                                                       timeout_for(names[1])), ov_b))
        set_impl_timeout([side.impl for side in sides], impl_timeout)
        return sides

    quiet = quiet or distributed.launched()  # under torchrun: rank 0 reports, nobody shows progress
    total = sum(len(r) for r in recs)
    done = [0]
    # a terminal: one line per step; else a line at least every REPLAY_PROGRESS_EVERY s (a heartbeat thread
    # that sleeps in between, so it takes no CPU from the timed calls); never a live bar (its refresh thread
    # would share the CPU with the timed calls)
    ticker = nullcontext() if quiet or err.is_terminal else progress("replay bench", total)

    def on_step(text: str) -> None:
        done[0] += 1
        if quiet:
            return
        if err.is_terminal:
            err.print(f"[{done[0]}/{total}] {text}")
        else:
            lines.describe(f"timing {text}")
            lines.update(0, advance=1 if done[0] > 1 else 0)  # the step before this one is done

    def opened(on) -> list:
        if lines is not None:
            lines.describe("loading " + " and ".join(dict.fromkeys(names)))
        sides = open_sides(on)
        if lines is not None:
            lines.describe("the first step: coverage pass and warm-up (kernels compile)")
        return sides

    with ticker as lines:
        if lines is not None:
            lines.add_task("steps", total=total)
        result = bench_units(recs, opened, dev, repeats=repeats, warmup=warmup, warm_l2=warm_l2,
                             split_routes=split_routes, expect_routes=expect, resamples=resamples,
                             on_step=on_step)
        if lines is not None and done[0]:
            lines.update(0, advance=1)  # the last step is done (the line comes as the block ends)
    if result is None:  # under torchrun, not rank 0: rank 0 reports for all
        raise typer.Exit(EXIT_OK)
    for rec in recs:  # not closed cleanly, or a digest that does not match: one warning line each
        warn_recording(rec)
    code = EXIT_OK if result.verdict.conclusive else EXIT_INCONCLUSIVE
    compared = None
    if base_doc is not None:
        compared = baselines.compare_baseline(result, base_doc, compare_baseline, fail_above)
        if code == EXIT_OK and (not compared.cases or (fail_above is not None and result.verdict.noisy)):
            code = EXIT_INCONCLUSIVE  # nothing to compare, or times too spread out to pass or fail a case
        elif code == EXIT_OK and compared.regressed:
            code = EXIT_MISMATCH
    doc = to_json(result, code)
    if compared is not None:
        doc["baseline"] = compared.to_dict()
    write_json_file(json_file, dumps(doc))
    rows = csv_rows(result)
    if csv_file:
        write_csv(csv_file, rows)
    if save_baseline:
        write_json_file(save_baseline, dumps(baselines.to_baseline(result)))
        if not quiet:
            err.print(f"replay bench: saved the baseline {save_baseline} ({len(result.measurements)} case(s))")
    if as_json:
        print(dumps(doc))
    else:
        from replay_harness.cli import tables

        print_tables(result, out, code, tables)
        if compared is not None:
            _print_baseline(compared, result.verdict, code)
    if png:
        try:
            _plot(rows, png)
        except ImportError:
            err.print(f"replay: warning: matplotlib is not installed: {png} not written; render it later with "
                      f"`replay bench --plot-from {csv_file or 'BENCH.csv'} --png {png}`")
    raise typer.Exit(code)


# --plot-from reads at most this much: about 5,800 measurements (2.9 KB each in the long layout), an A/B bench
# of 2,900 steps, more than a plot shows one by one; reading and drawing that takes ~15 s and ~0.5 GB.
MAX_PLOT_CSV_BYTES = 16 << 20


def _plot_csv(path: str) -> list[dict]:
    """The rows of the CSV ``--plot-from`` names (bench/report.read_csv), read only when it is a regular file
    of at most MAX_PLOT_CSV_BYTES: a FIFO (which would block), a device (``/dev/zero`` never ends), a socket
    or a folder is exit 2 at once, and so is a file whose rows lack a column the plot draws. The file is
    opened without blocking, checked through that descriptor, then read through it (``/proc/self/fd``), so
    what was checked is what is read."""
    import os
    import stat

    from replay_harness.bench.report import PLOT_COLUMNS, read_csv
    from replay_harness.errors import InputError
    from replay_harness.limits import os_reason

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise UsageError(f"--plot-from {path}: cannot read ({os_reason(e)})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                                                 (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                                                 (stat.S_ISDIR, "a folder")) if test(st.st_mode)), "a special file")
            raise UsageError(f"--plot-from {path}: is {kind}, not a regular file (name the CSV `replay bench --csv` "
                             "wrote)")
        if st.st_size > MAX_PLOT_CSV_BYTES:
            raise UsageError(f"--plot-from {path}: {st.st_size:,} bytes, over the {MAX_PLOT_CSV_BYTES:,} bytes a plot "
                             "is drawn from (plot part of the bench: a --csv of fewer steps)")
        pinned = f"/proc/self/fd/{fd}"
        try:
            rows = read_csv(pinned if os.path.exists(pinned) else path)
        except InputError as e:  # named by the path given, not by the descriptor
            raise InputError(path, e.message) from None
    finally:
        os.close(fd)
    if any(not PLOT_COLUMNS <= row.keys() for row in rows):  # the long layout's columns under other names
        raise InputError(path, "not a `replay bench` CSV (expected columns " + ", ".join(sorted(PLOT_COLUMNS)) + ")")
    return rows


def _plot(rows: list[dict], png: str) -> None:
    """bench/report.plot_rows with text drawn as written: no mathtext, no TeX, so a recording or impl name
    holding ``$`` or ``\\`` (``rec$\\frac{1}{$``) is a label, not a formula matplotlib fails to parse after the
    tables were printed; matplotlib's warnings (a glyph the font lacks) are not replay's to print."""
    import warnings

    import matplotlib

    from replay_harness.bench.report import plot_rows

    with matplotlib.rc_context({"text.usetex": False, "text.parse_math": False}), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plot_rows(rows, png)


def _print_baseline(compared, verdict, code: int) -> None:
    """The cases against the baseline, then one line: the regressions named, or why nothing is concluded."""
    from replay_harness.bench.baseline import lines

    for line in lines(compared):
        out.print(line)
    limit = f"--fail-above {compared.fail_above:g}" if compared.fail_above is not None else "no --fail-above"
    overall = "-" if compared.overall is None else f"{compared.overall:.3g}x"
    if not verdict.conclusive:
        out.print(f"baseline: not compared (exit {code}): the path under test did not run (see the verdict)")
    elif not compared.cases:
        out.print(f"baseline: INCONCLUSIVE (exit {code}): no case of this run is in {compared.path}")
    elif code == EXIT_INCONCLUSIVE:
        out.print(f"baseline: INCONCLUSIVE (exit {code}): the timings are NOISY, so no case can pass or fail "
                  f"{limit} (overall {overall})")
    elif compared.regressed:
        out.print(f"REGRESSION (exit {code}): {len(compared.regressed)} of {len(compared.cases)} case(s) above "
                  f"{limit}: " + ", ".join(f"{c.case} ({c.ratio:.3g}x)" for c in compared.regressed))
    else:
        out.print(f"baseline: {len(compared.cases)} case(s) compared, none above {limit} (overall {overall})")
