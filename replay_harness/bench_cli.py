"""`replay bench` (A/B timing with a coverage guard) and `replay synth` (derived production-shape steps).

Registered in replay_harness/cli.py at the bench anchor. torch and the bench modules are imported inside
the commands, so ``replay`` starts fast. docs/BENCH.md is the user guide.
"""
from __future__ import annotations

import sys
from typing import List, Optional

import typer

from .errors import EXIT_INCONCLUSIVE, EXIT_OK, UsageError


def _parse_expect(values: list[str] | None) -> list[tuple[str | None, str]]:
    from .step import ROUTES

    out = []
    for v in values or []:
        key, _, route = v.rpartition(":") if ":" in v else (None, "", v)
        key = key or None
        if key not in (None, "A", "B") or route not in ROUTES:
            raise UsageError(f"--expect-route {v!r}: expected ROUTE, A:ROUTE or B:ROUTE with ROUTE one of "
                             + ", ".join(ROUTES))
        out.append((key, route))
    return out


def _check_outputs(**paths: str | None) -> None:
    """Refuse an output file whose folder does not exist BEFORE the benchmark runs (not after, as an
    internal error that also hides the verdict)."""
    import os

    for opt, path in paths.items():
        if path:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise UsageError(f"--{opt.replace('_', '-')} {path}: folder {folder} does not exist")


def bench(
    paths: Optional[List[str]] = typer.Argument(None, help="Recording folders (derived ones from `replay synth` too)."),
    impl: Optional[str] = typer.Option(None, "--impl", help="Impl A (`replay impls` lists them)."),
    vs: Optional[str] = typer.Option(None, "--vs", help="Impl B, timed interleaved with A; the report gives "
                                                         "time(A)/time(B) with a bootstrap CI."),
    impl_arg: Optional[List[str]] = typer.Option(None, "--impl-arg", help="Argument for an external impl "
                                                                           "(exec:...); repeatable."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="What-if: every request at this "
                                                                            "temperature (0 = greedy)."),
    top_p: Optional[float] = typer.Option(None, "--top-p", help="What-if: every request at this top-p."),
    top_k: Optional[int] = typer.Option(None, "--top-k", help="What-if: every request at this top-k (0 = off)."),
    drop_drafts: bool = typer.Option(False, "--drop-drafts", help="What-if: speculative requests become plain "
                                                                  "samples of their first row."),
    vs_temperature: Optional[float] = typer.Option(None, "--vs-temperature", help="B's temperature (A keeps "
                                                   "--temperature); without --vs, B is A's impl. The cheap check: "
                                                   "--drop-drafts --temperature 0 --vs-temperature 1."),
    expect_route: Optional[List[str]] = typer.Option(None, "--expect-route", help="Require ROUTE (or A:ROUTE / "
                                                     "B:ROUTE) to be taken by some request, else exit 4; "
                                                     "repeatable; replaces the default stochastic-route check."),
    repeats: Optional[int] = typer.Option(None, "--repeats", help="Timed calls per step and impl (default 20 "
                                                                  "on CUDA, 3 on the CPU)."),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="Untimed calls before timing (default 3 on "
                                                                "CUDA, 1 on the CPU)."),
    warm_l2: bool = typer.Option(False, "--warm-l2", help="Reuse one input copy (warm L2) instead of rotating "
                                                          "copies larger than 2x L2."),
    split_routes: bool = typer.Option(False, "--split-routes", help="Time each step's requests per expected "
                                                                    "route separately (a sub-step each)."),
    device: str = typer.Option("auto", "--device", help="auto (CUDA if present), cpu, or cuda. CPU: wall-clock, "
                                                        "Triton interpreter, not representative."),
    nan: str = typer.Option("error", "--nan", help="What a NaN in the logits is: error (exit 2) or warn."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
    json_file: Optional[str] = typer.Option(None, "--json-file", help="Also write the JSON document here."),
    csv_file: Optional[str] = typer.Option(None, "--csv", help="Write one long-format CSV row per measurement."),
    png: Optional[str] = typer.Option(None, "--png", help="Write a plot (time per step by impl and route); "
                                                          "needs matplotlib."),
    plot_from: Optional[str] = typer.Option(None, "--plot-from", help="Only render --png from a CSV that "
                                                                      "`replay bench --csv` wrote."),
    resamples: int = typer.Option(2000, "--resamples", help="Bootstrap resamples of the A/B ratio CI."),
) -> None:
    """Time impls on recorded steps (A vs B interleaved), and prove the code under test ran.

    Exit 0: conclusive; 4: INCONCLUSIVE (the path under test never ran: no stochastic route, an
    --expect-route not taken, every request refused, or A and B identical), never reported as
    'no difference'; 2: bad input or usage; 3: environment. Routing violations are reported, not failed.

    Example: replay bench fixtures/real-founding --impl greedy-only --vs stochastic
    """
    from rich.console import Console

    # markup off: labels such as "stochastic[drop-drafts]" would otherwise be eaten as rich style tags
    out = Console(highlight=False, markup=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    _check_outputs(json_file=json_file, csv=csv_file, png=png)
    if plot_from:
        if not png:
            raise UsageError("--plot-from needs --png OUT.png")
        from .bench_report import plot_rows, read_csv

        rows = read_csv(plot_from)
        try:
            plot_rows(rows, png)
        except ImportError:
            from .errors import EnvironmentProblem
            raise EnvironmentProblem("--png needs matplotlib (pip install 'replay-sampler-harness[bench]')") from None
        out.print(f"wrote {png} from {plot_from} ({len(rows)} rows)")
        raise typer.Exit(EXIT_OK)
    if not paths:
        raise UsageError("give at least one recording folder (or --plot-from CSV --png PNG)")
    if not impl:
        raise UsageError("--impl NAME is required (`replay impls` lists them)")
    if nan not in ("error", "warn"):
        raise UsageError("--nan takes error or warn")
    expect = _parse_expect(expect_route)

    from .bench import Side, run_bench
    from .bench_report import csv_rows, dumps, plot_rows, print_tables, to_json, write_csv
    from .fixture import Recording
    from .overrides import Overrides
    from .runner import load_impl, resolve_device

    dev = resolve_device(device)
    cuda = dev.type == "cuda"
    repeats = repeats if repeats is not None else (20 if cuda else 3)
    warmup = warmup if warmup is not None else (3 if cuda else 1)
    if repeats < 1 or warmup < 0 or resamples < 100:
        raise UsageError("--repeats must be >= 1, --warmup >= 0, --resamples >= 100")
    ov_a = Overrides(temperature=temperature, top_p=top_p, top_k=top_k, drop_drafts=drop_drafts)
    ov_b = Overrides(temperature=vs_temperature if vs_temperature is not None else temperature, top_p=top_p,
                     top_k=top_k, drop_drafts=drop_drafts)
    recs = [Recording(p, nan=nan) for p in paths]
    names = [impl] + ([vs or impl] if (vs or vs_temperature is not None) else [])
    args = list(impl_arg or [])
    any_external = any(n.startswith("exec:") for n in names)

    def impl_args_for(name: str) -> list[str] | None:
        # external impls take --impl-arg; a built-in given one is refused by get_impl (exit 2)
        if not args:
            return None
        return args if (name.startswith("exec:") or not any_external) else None

    sides = [Side("A", names[0], load_impl(names[0], dev, impl_args_for(names[0])), ov_a)]
    if len(names) == 2:
        sides.append(Side("B", names[1], load_impl(names[1], dev, impl_args_for(names[1])), ov_b))
    try:
        total = sum(len(r) for r in recs)
        done = [0]

        def progress(text: str) -> None:
            done[0] += 1
            if err.is_terminal:
                err.print(f"[{done[0]}/{total}] {text}", markup=False)

        result = run_bench(recs, sides, dev, repeats=repeats, warmup=warmup, warm_l2=warm_l2,
                           split_routes=split_routes, expect_routes=expect, resamples=resamples, on_step=progress)
    finally:
        for s in sides:
            close = getattr(s.impl, "close", None)
            if callable(close):
                close()
    code = EXIT_OK if result.verdict.conclusive else EXIT_INCONCLUSIVE
    doc = to_json(result, code)
    if json_file:
        with open(json_file, "w") as f:
            f.write(dumps(doc) + "\n")
    rows = csv_rows(result)
    if csv_file:
        write_csv(csv_file, rows)
    if as_json:
        print(dumps(doc))
    else:
        print_tables(result, out, code)
    if png:
        try:
            plot_rows(rows, png)
        except ImportError:
            err.print(f"replay: warning: matplotlib is not installed: {png} not written; render it later with "
                      f"`replay bench --plot-from {csv_file or 'BENCH.csv'} --png {png}`", markup=False)
    raise typer.Exit(code)


def synth(
    source: str = typer.Argument(..., help="A real recording to take logits rows from."),
    out_path: str = typer.Option(..., "--out", help="Folder for the derived recording."),
    batch: int = typer.Option(..., "--batch", help="Requests per step (R)."),
    drafts: int = typer.Option(0, "--drafts", help="Drafts per request (k; 0 = plain samples)."),
    vocab: int = typer.Option(..., "--vocab", help="Vocabulary size (up to 262,144)."),
    steps: int = typer.Option(2, "--steps", help="Steps to derive."),
    seed: int = typer.Option(0, "--seed", help="Seed of the resampling and the request seeds."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the derived manifest as JSON."),
) -> None:
    """Build DERIVED steps at a production shape (R, k, V) from a real recording's logits rows.

    Rows are tiled; each row keeps its 64 largest logits and their probabilities, the rest is extended by
    resampling the row's own values (tail mass kept). The output is labelled derived/synthetic; emitted
    tokens are empty (compare impls with each other). Example:
    replay synth fixtures/real-founding --out /tmp/v248k --batch 64 --drafts 4 --vocab 248320
    """
    import json

    from .derive import write_derived
    from .fixture import Recording

    path = write_derived(source, out_path, batch=batch, drafts=drafts, vocab=vocab, steps=steps, seed=seed,
                         overwrite=overwrite)
    manifest = Recording(path).manifest
    if as_json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
    else:
        d = manifest["derived"]
        print(f"wrote {path}: {steps} derived/synthetic step(s), R={batch} k={drafts} V={vocab} from {d['from']} "
              f"(V={d['from_vocab_size']}); {d['argmax_draft_rows']} draft row(s) use the row argmax")
