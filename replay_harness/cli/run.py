"""`replay run`: replay recordings through an impl and compare tokens, counts, routes, logprobs and kept sets.

The replay and the comparison live in :mod:`replay_harness.compare`; this module parses the options and
prints (a table, or one JSON document with --json). torch comes in with it, inside :func:`run`.
"""
from __future__ import annotations

from typing import List, Optional

import typer
from replay_harness.cli import tables
from replay_harness.cli.common import (ImplTimeoutOpt, JsonFileOpt, JsonOpt, NanOpt, NegInfOpt, QuietOpt,
                                       RecordingsArg, check_json_file, device_opt, dumps, err, ids, impl_arg_opt,
                                       impl_opt, out, progress, warn_recording, write_json_file)
from replay_harness.errors import EXIT_INCONCLUSIVE, EXIT_MISMATCH, EXIT_OK, UsageError

ImplOpt = impl_opt("Sampler implementation to replay through (`replay impls` lists them).")
ImplArgOpt = impl_arg_opt("(exec:PROGRAM), repeatable; goes to --impl if it is exec:, else to --against "
                          "(docs/EXTERNAL.md).")
READ_REPORT_BYTES = 10**9  # replays that read at least this much say how fast on stderr (docs/SCALE.md)
DeviceOpt = device_opt("On the CPU, Triton impls run under TRITON_INTERPRET=1 (correct, slow).")


def run(
    paths: RecordingsArg,
    impl: ImplOpt = "reference",
    against: str = typer.Option("recorded", "--against", metavar="recorded|NAME",
                                help="What to compare with: 'recorded' (what the engine emitted) or another impl's "
                                     "name (exec:PROGRAM too)."),
    routes_only: bool = typer.Option(False, "--routes-only",
                                     help="Accept a run whose stochastic tokens could not be compared (RNG contracts "
                                          "differ) as a pass on routes, refusals and greedy tokens alone (else exit 4)."),
    impl_arg: ImplArgOpt = None,
    impl_timeout: ImplTimeoutOpt = None,
    steps: Optional[str] = typer.Option(None, "--steps", metavar="STEPS",
                                        help="Steps to replay in every recording, e.g. 0 or 0,2 or 1-3 (default: all; "
                                             "as verify's --steps)."),
    device: DeviceOpt = "auto",
    nan: NanOpt = "error",
    neg_inf: NegInfOpt = "warn",
    as_json: JsonOpt = False,
    json_file: JsonFileOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Replay every step through --impl and compare tokens, counts and routes with --against, and where both
    sides return them logprobs (within 1e-4 + 1e-6|b|), top-n ids, ranks and kept sets (docs/VERIFY.md).
    A divergence on a step with logits processors names the rule an ablation of the oracle reproduces it by.

    Exit 0 when everything matches (floating-point near-ties are reported but tolerated), 1 on a real
    token divergence, a logprob / top-n / rank / kept-set difference, a routing violation or a refused
    request, 2 on bad input, 3 when the impl cannot
    run here, 4 (inconclusive) when nothing was wrong but stochastic tokens could not be compared
    because the RNG contracts differ: test those with `replay verify`, or pass --routes-only to accept
    a check of routes, refusals and greedy tokens alone.

    An external program (any language) is an impl too: --impl exec:./my_sampler (docs/EXTERNAL.md);
    exit 3 when it crashes, hangs past --impl-timeout or answers garbage.

    Example: replay run fixtures/synthetic-mixed --impl greedy-only --against reference
    """
    from contextlib import ExitStack

    from replay_harness.compare import distributed
    from replay_harness.compare.runner import run_recordings

    check_json_file(json_file, paths)
    options = (paths, impl, against, impl_arg, impl_timeout, device, nan, neg_inf)
    if steps is not None and distributed.launched():
        raise UsageError("--steps is not taken under torchrun: replay the chosen steps in one process")
    if distributed.launched():  # one of several processes started by torchrun
        sharded = _run_sharded(options)
        if sharded is None:  # not rank 0: rank 0 reports for all
            raise typer.Exit(EXIT_OK)
        paths, results, dev = sharded
    else:
        import time

        from replay_harness.recording.prefetch import ReadStats

        results, read, start = [], ReadStats(), time.perf_counter()
        with ExitStack() as stack:  # external programs are stopped at the end, also on errors
            dev, paths, recs, sampler, other, loaded = _prepare(options, stack)
            chosen = None if steps is None else [_chosen(steps, p, len(r)) for p, r in zip(paths, recs)]
            total = sum(len(r) for r in recs) if chosen is None else sum(map(len, chosen))
            with progress(f"replay {impl}", total, quiet=quiet) as bar:
                task = bar.add_task("steps", total=total)

                def begin(r: int) -> None:
                    for s in loaded:
                        s.begin_recording(paths[r])
                if chosen is None:
                    cmps = run_recordings(recs, sampler, other, dev, on_step=lambda: bar.advance(task), stats=read,
                                          begin=begin)
                else:
                    cmps = _run_chosen(recs, chosen, sampler, other, dev, lambda: bar.advance(task), read, begin)
                results = list(zip(recs, cmps))
        if not quiet and read.bytes >= READ_REPORT_BYTES:  # what replay read, and how fast (docs/SCALE.md)
            seconds = time.perf_counter() - start
            err.print(f"replay: read {read.bytes / 1e9:.3g} GB of steps in {seconds:.3g} s: "
                      f"{read.bytes / 1e9 / seconds:.3g} GB/s (the reads alone took {read.seconds:.3g} s)")
    for rec, _ in results:  # not closed cleanly, or a digest that does not match: one warning line each
        warn_recording(rec)
    verdicts = [c.verdict(routes_only) for _, c in results]
    ok = "fail" not in verdicts
    code = EXIT_MISMATCH if not ok else EXIT_INCONCLUSIVE if "inconclusive" in verdicts else EXIT_OK
    if as_json or json_file:
        doc = {"schema": "replay.run/1", "impl": impl, "against": against, "device": str(dev), "impl_args": list(impl_arg or []),
               "ok": code == EXIT_OK,
               "exit_code": code, "verdict": _VERDICT[code], "routes_only": routes_only,
               "tokens_not_compared": sum(c.tokens_not_compared for _, c in results),
               "recordings": [{"path": p, "synthetic": r.synthetic, **c.to_dict(), "verdict": v}
                              for p, (r, c), v in zip(paths, results, verdicts)]}
        write_json_file(json_file, dumps(doc))
    if as_json:
        if out.is_terminal:
            out.print_json(dumps(doc))
        else:
            print(dumps(doc))
    else:
        _print_table(impl, against, paths, results, str(dev))
        _print_summary(impl, against, paths, results, code, routes_only, str(dev), impl_arg)
    raise typer.Exit(code)


_VERDICT = {EXIT_OK: "PASS", EXIT_MISMATCH: "FAIL", EXIT_INCONCLUSIVE: "INCONCLUSIVE"}


def _chosen(steps: str, path: str, n: int) -> list[int]:
    """The step indices --steps names in a recording of ``n`` steps (verify's syntax); exit 2 when out of range."""
    from replay_harness.checks.verify import parse_steps

    try:
        return parse_steps(steps, n)
    except ValueError as e:
        raise UsageError(f"--steps for {path}: {e}") from None


def _run_chosen(recs: list, chosen: list[list[int]], sampler, other, dev, on_step, read, begin) -> list:
    """run_recordings over the chosen steps only (one read-ahead across the recordings, as there)."""
    from replay_harness.compare.runner import read_device, replay_step, start_comparison
    from replay_harness.recording.prefetch import units_ahead

    heads = [start_comparison(rec, sampler, other) for rec in recs]
    units = [(r, i) for r, idx in enumerate(chosen) for i in idx]
    begun = 0
    for (r, i), record in units_ahead(recs, units, read_device(sampler, [o for _, _, o in heads], dev), None, read):
        while begun <= r:
            begin(begun)
            begun += 1
        cmp, exact, against = heads[r]
        replay_step(cmp, recs[r], i, sampler, against, dev, exact, record)
        on_step()
    while begun < len(recs):
        begin(begun)
        begun += 1
    return [cmp for cmp, _, _ in heads]


def _print_summary(impl: str, against: str, paths: List[str], results: list, code: int, routes_only: bool,
                   device: str, impl_arg: List[str] | None = None) -> None:
    """The verdict line: PASS / FAIL / INCONCLUSIVE with the counts, and where to go when inconclusive: `replay
    verify` of the side whose tokens went untested (the ``exec:`` program when only ``--against`` is one), with
    the ``--impl-arg`` values that side got."""
    from replay_harness.compare.diff import Comparison

    total = Comparison()
    for _, c in results:
        total.tokens_compared += c.tokens_compared
        total.tokens_matched += c.tokens_matched
        total.tokens_not_compared += c.tokens_not_compared
        total.stochastic_skipped += c.stochastic_skipped
        total.skipped_unrouted += c.skipped_unrouted
        total.logprob_slots_compared += c.logprob_slots_compared
        total.kept_sets_compared += c.kept_sets_compared
        total.logprobs_not_compared += c.logprobs_not_compared
        total.output_divergences += c.output_divergences
        total.argmax_draws, total.argmax_hits = total.argmax_draws + c.argmax_draws, total.argmax_hits + c.argmax_hits
        total.argmax_log_p += c.argmax_log_p  # every T > 0 draw the argmax (compare/argmax_evidence.py)
    line = f"{_VERDICT[code]}: {impl} against {against} on {device}: {total.summary(routes_only)}"
    if code == EXIT_INCONCLUSIVE:
        import shlex

        odd = against if against.startswith("exec:") and not impl.startswith("exec:") else impl
        args = "".join(f" --impl-arg {shlex.quote(a)}" for a in impl_arg or [])
        verify = (f"`replay verify {' '.join(map(shlex.quote, paths[:3]))}{' ...' if len(paths) > 3 else ''} "
                  f"--impl {shlex.quote(odd)}{args}`")
        line += (f"; no pass: run {verify} to test them statistically" + (
            f", or report routes from {impl} (no route, -1, checks nothing)" if routes_only else
            "" if total.argmax_draws and total.argmax_hits == total.argmax_draws else
            ", or pass --routes-only to accept routes, refusals and greedy tokens alone"))
    out.print(line, soft_wrap=True)


def _prepare(options: tuple, stack, shard=None) -> tuple:
    """Check the options, open the recordings and load the impl(s) (closed by ``stack``): (device, paths,
    recordings, impl, against (an impl or "recorded"), the loaded impls). ``shard``: this rank's device."""
    from replay_harness.compare.runner import load_impl, resolve_device
    from replay_harness.recording.discover import find_recordings
    from replay_harness.recording.store import Recording

    paths, impl, against, impl_arg, impl_timeout, device, nan, neg_inf = options
    if impl_timeout is not None and not impl_timeout > 0:
        raise UsageError(f"--impl-timeout must be > 0 seconds, got {impl_timeout:g}")
    exec_impl, exec_against = impl.startswith("exec:"), against.startswith("exec:")
    if impl_timeout is not None and not (exec_impl or exec_against):
        raise UsageError("--impl-timeout is only for external impls (--impl or --against exec:PROGRAM)")
    args_for_against = bool(impl_arg) and exec_against and not exec_impl
    dev = resolve_device(device)
    if shard is not None:
        dev = shard.device(dev)
    paths = find_recordings(paths)
    recs = [Recording(p, nan=nan, neg_inf=neg_inf) for p in paths]
    sampler = load_impl(impl, dev, None if args_for_against else impl_arg, impl_timeout if exec_impl else None)
    stack.callback(sampler.close)
    loaded = [sampler]
    other = against
    if against != "recorded":
        other = load_impl(against, dev, impl_arg if args_for_against else None, impl_timeout if exec_against else None)
        stack.callback(other.close)
        loaded.append(other)
    for s in loaded:
        if impl_timeout is not None and s.external:
            s.timeout = impl_timeout
    return dev, paths, recs, sampler, other, loaded


def _run_sharded(options: tuple) -> tuple | None:
    """Under torchrun: replay this rank's (recording, step) units (compare/distributed.py); rank 0 gets
    (paths, [(recording, Comparison)], its device type) merged in step order, the other ranks None."""
    from contextlib import ExitStack

    from replay_harness.compare import distributed
    from replay_harness.compare.diff import Comparison
    from replay_harness.compare.runner import read_device, replay_step, start_comparison

    mine: dict = {}  # this rank's paths, recordings and per-recording head comparisons (rank 0 reports them)

    def body(shard: distributed.Shard) -> list:
        parts, begun = [], set()
        with ExitStack() as stack:
            dev, paths, recs, sampler, other, loaded = _prepare(options, stack, shard)
            heads = [start_comparison(rec, sampler, other) for rec in recs]
            mine.update(paths=paths, recs=recs, heads=[cmp for cmp, _, _ in heads], device=dev.type)
            where = read_device(sampler, [o for _, _, o in heads], dev)  # as one process reads (runner.py)
            for (r, i), record in shard.steps(recs, where):
                if r not in begun:
                    begun.add(r)
                    for s in loaded:
                        s.begin_recording(paths[r])
                parts.append(((r, i), replay_step(Comparison(), recs[r], i, sampler, heads[r][2], dev, heads[r][1],
                                                  record)))
        return parts

    values = distributed.run_sharded(body)
    if values is None:
        return None
    merged = distributed.merge_units(mine["heads"], [part for parts in values for part in parts])
    return mine["paths"], list(zip(mine["recs"], merged)), mine["device"]


def _print_table(impl: str, against: str, paths: List[str], results: list, device: str) -> None:
    """One row per recording, then per recording: violations, refusals, notes and the first divergence."""
    table = tables.table(f"replay run --impl {impl} --against {against} on {device}",
                         [("recording", tables.TEXT), ("steps", tables.NUM), ("request\nsteps", tables.NUM),
                          ("tokens", tables.NUM), ("matched", tables.NUM), ("also", tables.TEXT),
                          ("result", tables.WORD)])
    for path, (rec, c) in zip(paths, results):
        label = path + (" (synthetic)" if rec.synthetic else "")
        result = {"fail": "FAIL", "inconclusive": "INCONCLUSIVE", "pass": "ok"}[c.verdict()]
        # tokens: every token of the compared requests' answers, compared or not (the same count whatever the
        # impl's RNG contract); matched: of those compared token for token
        also = [f"{n} {what}" for n, what in ((c.tokens_not_compared, "not compared"), (c.near_ties, "near-ties"),
                                              (len(c.violations), "violations"), (len(c.refused), "refused")) if n]
        also += [f"{n} {kind}" for kind, n in c.outputs_by_kind().items()]
        table.add_row(label, str(c.steps), str(c.requests), str(c.tokens_compared + c.tokens_not_compared),
                      str(c.tokens_matched), ", ".join(also) or "-", result, style=tables.cell_style(result))
    out.print(table)
    for path, (rec, c) in zip(paths, results):
        for kind, n in c.violations_by_kind("impl").items():
            request_ids = sorted({v.request_id for v in c.violations if v.kind == kind})
            out.print(f"{path}: routing violation {kind} ({impl}): {n} request-steps; request ids "
                      f"{ids(request_ids)}")
        for kind, n in c.violations_by_kind("against").items():
            request_ids = sorted({v.request_id for v in c.against_violations if v.kind == kind})
            out.print(f"{path}: routing violation {kind} ({against}): {n} request-steps; request ids "
                      f"{ids(request_ids)}")
        if c.refused:
            out.print(f"{path}: {impl} refused {len(c.refused)} request-steps; request ids "
                      f"{ids(sorted({r for _, r in c.refused}))}")
        notes = list(dict.fromkeys(c.notes))  # the comparison's own first, then the impl's (why it refused ...)
        for note in notes[:5]:
            out.print(f"{path}: note: {note}")
        if len(notes) > 5:
            out.print(f"{path}: {len(notes) - 5} more notes (--json lists them all)")
        if c.divergences:
            d = (c.real_divergences or c.divergences)[0]
            kind = "floating-point near-tie" if d.near_tie else "route difference" if d.position is None \
                else "real divergence"
            margin = "" if d.margin is None else f", decision margin {d.margin:.3g}"
            where = f"{path}: first {kind}: step {d.step}, request {d.request_id} (index {d.request})"
            if d.position is None:
                out.print(f"{where}: same tokens, but {impl} took route {d.route} and {against} {d.against_route}")
            else:
                out.print(f"{where}, position {d.position}: {impl} emitted {d.token} ({d.route}), {against} "
                          f"emitted {d.against_token} ({d.against_route}){margin}")
            if c.near_ties:
                out.print(f"{path}: {c.near_ties} divergent request(s) are near-ties (tolerated)")
        _print_outputs(path, c, impl, against)


def _side(which: str, impl: str, against: str) -> str:
    return impl if which == "impl" else "the recording" if against == "recorded" else against


def _print_outputs(path: str, c, impl: str, against: str) -> None:
    """The rules the divergences break (compare/attribution.py), then the first logprob / top-n / rank / kept-set
    difference of each kind (compare/logprobs.py)."""
    for d in c.divergences:
        if d.rule is not None:
            out.print(f"{path}: {_side(d.rule_side, impl, against)}'s tokens are the oracle's with {d.rule}")
    seen = set()
    for d in c.output_divergences:
        if d.kind in seen:
            continue
        seen.add(d.kind)
        n = c.outputs_by_kind()[d.kind]
        line = (f"{path}: {n} {d.kind} difference(s); first: step {d.step}, request {d.request_id} (index "
                f"{d.request}), slot {d.position}: {impl} against {against}: {d.detail}")
        if d.rule is not None:
            line += f"; {_side(d.rule_side, impl, against)}'s are the oracle's with {d.rule}"
        out.print(line)
