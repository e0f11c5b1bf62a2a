"""The `replay` command line (typer). Human tables on stdout, --json for machines,
progress on stderr. Exit codes (README.md): 0 ok, 1 mismatch, routing violation, refusal,
failed test or finding, 2 usage or bad input, 3 environment, 4 inconclusive."""
from __future__ import annotations

import errno
import json
import os
import sys
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_MISMATCH, EXIT_OK, ReplayError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Record LLM decode steps and replay them through swappable sampler implementations; "
                       "compare tokens, routing and timing. `replay CMD --help` explains a command, with an "
                       "example. Exit codes: 0 ok; 1 divergence, routing violation, refusal, failed test or "
                       "finding; 2 usage or bad input; 3 environment; 4 inconclusive.")
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)

JSON_OPT = typer.Option(False, "--json", help="Print one JSON document instead of tables.")
DEVICE_OPT = typer.Option("auto", "--device", help="auto (CUDA if present), cpu, or cuda. On the CPU, Triton "
                                                    "impls run under TRITON_INTERPRET=1 (correct, slow).")
NAN_OPT = typer.Option("error", "--nan", help="What a NaN in the logits is: error (exit 2) or warn.")

# One line per command in `replay --help` (click would cut the docstring's first sentence at ~45 chars).
SHORT_HELP = {
    "run": "Replay recordings through an impl; compare tokens, counts, routes.",
    "inspect": "Summarize a recording: steps, shapes, params, drafts, bytes.",
    "validate": "Check a recording against the fixture schema; exit 2 if invalid.",
    "impls": "List the sampler implementations --impl accepts.",
    "record": "Decode with a real model (speculative decoding); record each step.",
    "bench": "Time impl A vs B on recorded steps; exit 4 if the path never ran.",
    "synth": "Derive production-shape steps (R, k, V) from a real recording.",
    "verify": "Test statistically that an impl samples the right distribution.",
    "audit": "Judge a recording's emitted tokens without replaying it.",
}


def _clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, marked with ' …' when cut."""
    return text if len(text) <= limit else text[:limit - 2].rstrip() + " …"


def _progress(total: int, label: str) -> Progress:
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=True, disable=not err.is_terminal or total < 2)


@app.command(short_help=SHORT_HELP["run"])
def run(
    paths: List[str] = typer.Argument(..., help="Recording folders (each holds manifest.json and steps/)."),
    impl: str = typer.Option("reference", "--impl", help="Sampler implementation to replay through "
                                                           "(`replay impls` lists them)."),
    against: str = typer.Option("recorded", "--against", help="What to compare with: 'recorded' (what the "
                                                                "engine emitted) or another impl's name "
                                                                "(exec:PROGRAM too)."),
    impl_arg: Optional[List[str]] = typer.Option(None, "--impl-arg", help="Argument for an external impl "
                                                 "(exec:PROGRAM), repeatable; goes to --impl if it is exec:, "
                                                 "else to --against (docs/EXTERNAL.md)."),
    impl_timeout: Optional[float] = typer.Option(None, "--impl-timeout", help="Seconds an external impl may "
                                                 "take to answer one step (default 60); past it the program "
                                                 "is killed and replay exits 3."),
    device: str = DEVICE_OPT,
    nan: str = NAN_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Replay every step through --impl and compare tokens, counts and routes with --against.

    Exit 0 when everything matches (floating-point near-ties are reported but tolerated), 1 on a real
    token divergence, a routing violation or a refused request, 2 on bad input, 3 when the impl cannot
    run here.

    An external program (any language) is an impl too: --impl exec:./my_sampler (docs/EXTERNAL.md);
    exit 3 when it crashes, hangs past --impl-timeout or answers garbage.

    Example: replay run fixtures/synthetic-mixed --impl greedy-only --against reference
    """
    from contextlib import ExitStack

    from .errors import UsageError
    from .fixture import Recording
    from .runner import load_impl, resolve_device, run_recording

    if nan not in ("error", "warn"):
        raise typer.BadParameter("--nan takes error or warn")
    if impl_timeout is not None and not impl_timeout > 0:
        raise UsageError(f"--impl-timeout must be > 0 seconds, got {impl_timeout:g}")
    exec_impl, exec_against = impl.startswith("exec:"), against.startswith("exec:")
    if impl_timeout is not None and not (exec_impl or exec_against):
        raise UsageError("--impl-timeout is only for external impls (--impl or --against exec:PROGRAM)")
    args_for_against = bool(impl_arg) and exec_against and not exec_impl
    dev = resolve_device(device)
    recs = [Recording(p, nan=nan) for p in paths]
    results = []
    with ExitStack() as stack:  # external programs are stopped at the end, also on errors
        sampler = load_impl(impl, dev, None if args_for_against else impl_arg)
        stack.callback(getattr(sampler, "close", lambda: None))
        other = against if against == "recorded" else load_impl(against, dev, impl_arg if args_for_against else None)
        stack.callback(getattr(other, "close", lambda: None))
        for s in (sampler, other):
            if impl_timeout is not None and hasattr(s, "timeout"):
                s.timeout = impl_timeout
        with _progress(sum(len(r) for r in recs), f"replay {impl}") as bar:
            task = bar.add_task("steps", total=sum(len(r) for r in recs))
            for path, rec in zip(paths, recs):
                for s in (sampler, other):
                    if hasattr(s, "begin_recording"):
                        s.begin_recording(path)
                results.append((rec, run_recording(rec, sampler, other, dev, on_step=lambda: bar.advance(task))))
    ok = all(c.ok for _, c in results)
    if as_json:
        doc = {"impl": impl, "against": against, "impl_args": list(impl_arg or []), "ok": ok,
               "exit_code": EXIT_OK if ok else EXIT_MISMATCH,
               "recordings": [{"path": p, "synthetic": r.synthetic, **c.to_dict()}
                              for p, (r, c) in zip(paths, results)]}
        out.print_json(json.dumps(doc, sort_keys=True)) if out.is_terminal else print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        _print_run_table(impl, against, paths, results)
    raise typer.Exit(EXIT_OK if ok else EXIT_MISMATCH)


def _print_run_table(impl: str, against: str, paths: list[str], results) -> None:
    table = Table(title=f"replay run --impl {impl} --against {against}")
    for col in ("recording", "steps", "requests", "tokens", "matched", "near-ties", "violations", "refused",
                "result"):
        table.add_column(col, justify="left" if col == "recording" else "right")
    for path, (rec, c) in zip(paths, results):
        label = path + (" (synthetic)" if rec.synthetic else "")
        table.add_row(label, str(c.steps), str(c.requests), str(c.tokens_compared), str(c.tokens_matched),
                      str(c.near_ties), str(len(c.violations)), str(len(c.refused)), "ok" if c.ok else "FAIL")
    out.print(table)
    for path, (rec, c) in zip(paths, results):
        for kind, n in c.violations_by_kind("impl").items():
            ids = sorted({v.request_id for v in c.violations if v.kind == kind})
            out.print(f"{path}: routing violation {kind} ({impl}): {n} request-steps; request ids "
                      f"{_ids(ids)}")
        for kind, n in c.violations_by_kind("against").items():
            ids = sorted({v.request_id for v in c.against_violations if v.kind == kind})
            out.print(f"{path}: routing violation {kind} ({against}): {n} request-steps; request ids {_ids(ids)}")
        if c.refused:
            out.print(f"{path}: {impl} refused {len(c.refused)} request-steps; request ids "
                      f"{_ids(sorted({r for _, r in c.refused}))}")
        for note in sorted(set(n for n in c.notes if "refused" not in n))[:5]:
            out.print(f"{path}: note: {note}")
        if c.divergences:
            d = (c.real_divergences or c.divergences)[0]
            kind = "floating-point near-tie" if d.near_tie else "real divergence"
            margin = "" if d.margin is None else f", decision margin {d.margin:.3g}"
            where = f"{path}: first {kind}: step {d.step}, request {d.request_id} (index {d.request})"
            if d.position is None:
                out.print(f"{where}: same tokens, but {impl} took route {d.route} and {against} {d.against_route}")
            else:
                out.print(f"{where}, position {d.position}: {impl} emitted {d.token} ({d.route}), {against} "
                          f"emitted {d.against_token} ({d.against_route}){margin}")
            if c.near_ties:
                out.print(f"{path}: {c.near_ties} divergent request(s) are near-ties (tolerated)")


def _ids(ids: list[int], limit: int = 12) -> str:
    shown = ", ".join(map(str, ids[:limit]))
    return shown + (f" … (+{len(ids) - limit} more)" if len(ids) > limit else "")


@app.command(short_help=SHORT_HELP["inspect"])
def inspect(path: str = typer.Argument(..., help="A recording folder."), as_json: bool = JSON_OPT) -> None:
    """Show what a recording holds: steps, shapes, dtypes, parameter mix, drafts, acceptance, bytes.

    Exit 0, or 2 when the folder is not a readable recording.

    Example: replay inspect fixtures/real-founding --json
    """
    from .fixture import Recording
    from .inspect_recording import summarize

    s = summarize(Recording(path))
    if as_json:
        print(json.dumps(s, indent=2, sort_keys=True))
        return
    table = Table(title=f"{path}" + (" (synthetic)" if s["synthetic"] else ""), show_header=False)
    table.add_column("what")
    table.add_column("value")
    rows = [
        ("schema", f"{s['schema']}  complete={s['complete']}  rng={s['rng_contract']}"),
        ("source", _clip(json.dumps(s["source"], sort_keys=True), 200)),
        ("steps / requests / rows", f"{s['steps']} / {s['requests']} / {s['rows']}"),
        ("vocab", str(s["vocab_size"])),
        ("logits shapes", ", ".join(f"{k} x{v}" for k, v in s["logits_shapes"].items())),
        ("logits dtypes", ", ".join(f"{k} x{v}" for k, v in s["logits_dtypes"].items())),
        ("drafts per request (k: count)", ", ".join(f"{k}: {v}" for k, v in s["drafts_per_request"].items())),
        ("greedy / stochastic requests", f"{s['greedy_requests']} / {s['stochastic_requests']}"),
        ("top-k / top-p / min-p requests", f"{s['top_k_requests']} / {s['top_p_requests']} / {s['min_p_requests']}"),
        ("steps with draft logits", str(s["steps_with_draft_logits"])),
        ("recorded routes", ", ".join(f"{k}: {v}" for k, v in s["recorded_routes"].items()) or "not recorded"),
        ("acceptance by position", ", ".join(f"{k}: {v:.2f}" for k, v in s["acceptance_rate_by_position"].items())
         or "no drafts"),
        ("mean accepted drafts", "-" if s["mean_accepted_drafts"] is None else f"{s['mean_accepted_drafts']:.2f}"),
        ("bytes on disk", f"{s['bytes_on_disk']:,}"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    out.print(table)


@app.command(short_help=SHORT_HELP["validate"])
def validate(path: str = typer.Argument(..., help="A recording folder."), nan: str = NAN_OPT,
             as_json: bool = JSON_OPT) -> None:
    """Check a recording against fixture schema v1; list every violation (file, step, field).

    Exit 0 when valid (warnings allowed), 2 when any violation is found.

    Example: replay validate fixtures/real-founding --nan warn
    """
    from .fixture import Recording
    from .validate import check_recording

    if nan not in ("error", "warn"):
        raise typer.BadParameter("--nan takes error or warn")
    rec = Recording(path, nan=nan)
    problems = check_recording(rec, nan=nan)
    errors = [p for p in problems if not p.warning]
    if as_json:
        print(json.dumps({"path": path, "valid": not errors, "steps": len(rec),
                          "problems": [{"file": p.file, "step": p.step, "field": p.field, "message": p.message,
                                        "severity": "warning" if p.warning else "error"} for p in problems]},
                         indent=2, sort_keys=True))
    else:
        for p in problems:
            out.print(("warning: " if p.warning else "error: ") + str(p))
        out.print(f"{path}: {len(rec)} steps, " + ("valid" if not errors else f"{len(errors)} violation(s)"))
    raise typer.Exit(2 if errors else 0)


@app.command(short_help=SHORT_HELP["impls"])
def impls(as_json: bool = JSON_OPT) -> None:
    """List the sampler implementations --impl accepts (builtins, replay.impls plugins, exec:PROGRAM).

    Example: replay impls --json
    """
    from .impls import BUILTIN, get_impl, known_names

    rows = []
    for name in known_names():
        try:
            impl = get_impl(name)
            rows.append({"name": name, "description": impl.description, "rng_contract": impl.rng_contract,
                         "requires_cuda": impl.requires_cuda, "available": True,
                         "source": "builtin" if name in BUILTIN else "plugin"})
        except ReplayError as e:
            rows.append({"name": name, "description": str(e), "rng_contract": None, "requires_cuda": None,
                         "available": False, "source": "builtin" if name in BUILTIN else "plugin"})
    if as_json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return
    table = Table(title="impls")
    for col in ("name", "rng", "cuda only", "description"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], str(r["rng_contract"]), str(r["requires_cuda"]), r["description"])
    table.caption = "and exec:PROGRAM [--impl-arg ARG ...]: an external sampler process (docs/EXTERNAL.md)"
    out.print(table)


from .record_cli import record  # noqa: E402  (imports no torch or transformers at start-up)

app.command(short_help=SHORT_HELP["record"])(record)
from .bench_cli import bench, synth  # noqa: E402

app.command(short_help=SHORT_HELP["bench"])(bench)
app.command(short_help=SHORT_HELP["synth"])(synth)
from .verify_cli import verify  # noqa: E402

app.command(short_help=SHORT_HELP["verify"])(verify)
from .audit_cli import audit  # noqa: E402
app.command(short_help=SHORT_HELP["audit"])(audit)


def main() -> None:
    """Console-script entry: one line and a documented exit code for every error, never a traceback."""
    try:
        rc = app(standalone_mode=False, prog_name="replay")  # same name under python -m
        sys.exit(rc if isinstance(rc, int) else 0)
    except ReplayError as e:
        err.print(f"replay: error: {e}", markup=False)
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
        err.print(f"replay: error: {where}{e.strerror or e}{hint}", markup=False)
        sys.exit(EXIT_BAD_INPUT if bad_path else EXIT_ENVIRONMENT)
    except (typer.Abort, KeyboardInterrupt):
        err.print("replay: interrupted", markup=False)
        sys.exit(130)
    except Exception as e:  # click usage errors (typer may vendor click: match by shape) and the unexpected
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `replay`: the help, not an error
            print(e.format_message())
            sys.exit(EXIT_OK)
        if hasattr(e, "format_message") and isinstance(getattr(e, "exit_code", None), int):
            kind = "usage error" if e.exit_code == 2 else "error"
            err.print(f"replay: {kind}: {e.format_message()}", markup=False)
            sys.exit(e.exit_code)
        if os.environ.get("REPLAY_DEBUG"):
            raise
        err.print(f"replay: internal error: {type(e).__name__}: {e} (set REPLAY_DEBUG=1 for a traceback)",
                  markup=False)
        sys.exit(3)


if __name__ == "__main__":
    main()
