"""`replay conformance`: run an impl against the conformance vectors (replay_harness.conformance)."""
from __future__ import annotations

from typing import List, Optional

import typer

from replay_harness.cli.common import (ImplTimeoutOpt, JsonFileOpt, JsonOpt, check_json_file, device_opt,
                                       impl_arg_opt, impl_opt, out, print_json)
from replay_harness.errors import EXIT_INCONCLUSIVE, EXIT_MISMATCH, EXIT_OK, UsageError

ImplOpt = impl_opt("Sampler implementation to check (`replay impls` lists them; exec:PROGRAM too).")
ImplArgOpt = impl_arg_opt("(exec:PROGRAM), repeatable (docs/EXTERNAL.md).")
DeviceOpt = device_opt("On the CPU, Triton impls run under TRITON_INTERPRET=1 (correct, slow).")


def conformance(
    impl: ImplOpt = "reference",
    impl_arg: ImplArgOpt = None,
    impl_timeout: ImplTimeoutOpt = None,
    vectors: Optional[str] = typer.Option(None, "--vectors", metavar="FOLDER", help="Folder of vectors (default: the "
                                                                   "vectors shipped in the package)."),
    rule: Optional[List[str]] = typer.Option(None, "--rule", metavar="GLOB",
                                             help="Only the vectors whose rule id matches this glob (repeatable), e.g. "
                                                  "'greedy-*'."),
    trials: int = typer.Option(200, "--trials", metavar="N", help="Runs per request of the RNG-independent check "
                               "(an impl of another RNG contract than the vectors' mrv2)."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of those runs (same seed, same verdict)."),
    device: DeviceOpt = "auto",
    as_json: JsonOpt = False,
    json_file: JsonFileOpt = None,
) -> None:
    """Check an impl against the conformance vectors: one small recording per sampling rule of
    docs/FIXTURES.md, compared token for token (near-ties are failures here) when the impl declares the
    vectors' RNG contract (mrv2). Any other impl is checked on the RNG-independent rules (greedy and its
    ties, filters, routing, placeholders, stochastic verify, bonus) by route, support and statistics
    (--trials runs per request, family-wise false-alarm rate 0.001); the MRV2 bit-exact vectors are
    "n/a" for it.

    A request the impl refuses (a plain sampler given drafts) is not tested: a vector whose every request
    was refused is "n/a", never a failure (`replay run` fails refusals). Exit 0 when every applicable vector
    passes, 1 when any fails (each failure names its rule), 2 on bad input, 3 when the impl cannot run
    here, 4 when no chosen vector applies to the impl (its RNG contract, or every request refused) or a
    vector had no test that could have failed at these --trials ("no power").

    Example: replay conformance --impl exec:./sampler --rule 'greedy-*' --rule 'gumbel-*'
    """
    from replay_harness.cli import tables
    from replay_harness.compare.runner import load_impl, resolve_device
    from replay_harness.conformance.runner import find_vectors, run_conformance

    if impl_timeout is not None and not impl_timeout > 0:
        raise UsageError(f"--impl-timeout must be > 0 seconds, got {impl_timeout:g}")
    if trials < 2:
        raise UsageError(f"--trials must be at least 2, got {trials}")
    if impl_arg and not impl.startswith("exec:"):
        raise UsageError("--impl-arg is only for external impls (--impl exec:PROGRAM)")
    check_json_file(json_file, [vectors])
    dev = resolve_device(device)
    found = find_vectors(vectors, rule)
    sampler = load_impl(impl, dev, impl_arg, impl_timeout if impl.startswith("exec:") else None)
    try:
        if impl_timeout is not None and sampler.external:
            sampler.timeout = impl_timeout
        contract = sampler.rng_contract
        results = run_conformance(sampler, found, dev, trials=trials, seed=seed)
    finally:
        sampler.close()
    refused = [_set_aside_refusals(r, rec) for r, (_, rec) in zip(results, found)]
    refused += [(0, 0)] * (len(results) - len(found))  # the noise's own line (no vector; conformance/runner.py)
    status = [_status(r, n, total) for r, (n, total) in zip(results, refused)]
    applicable = [r for r, st in zip(results, status) if st != "n/a"]
    ok = all(r.ok for r in results)
    powerless = [r for r, st in zip(results, status) if st == "no power"]
    code = EXIT_MISMATCH if not ok else EXIT_OK if applicable and not powerless else EXIT_INCONCLUSIVE
    if as_json or json_file:
        print_json({"schema": "replay.conformance/1", "impl": impl, "device": dev.type, "rng_contract": contract,
                    "ok": code == EXIT_OK, "exit_code": code,
                    "vectors": [{**r.to_dict(), "status": st, "refused": n, "requests": total}
                                for r, st, (n, total) in zip(results, status, refused)]},
                    json_file=json_file, stdout=as_json)
    if not as_json:
        for r, st, (n, total) in zip(results, status, refused):
            c = r.comparison
            what = {"exact": f"{c.tokens_matched}/{c.tokens_compared} tokens",
                    "rng-independent": f"route, support and statistics: {r.tests} checks",
                    "not applicable": f"MRV2 bit-exact rule: not applicable to rng_contract {contract}"}[r.mode]
            if n and n == total:
                what = f"every request ({n}) refused by the impl: not tested"
            elif n:
                what += f"; {n} of {total} request(s) refused by the impl: not tested"
            out.print(f"{st:4s} {r.rule.id:26s} {what}" + ("; none could have failed: raise --trials"
                                                            if st == "no power" else ""),
                      style=tables.cell_style(st))
        for r in results:
            if r.failures:
                out.print(f"{impl}: rule {r.rule.id} says: {r.rule.statement} (docs/FIXTURES.md, '{r.rule.section}')")
            for line in r.failures[:5]:
                out.print(f"{impl}: {line}")
            if len(r.failures) > 5:
                out.print(f"{impl}: rule {r.rule.id}: … (+{len(r.failures) - 5} more)")
        passed = sum(st == "ok" for st in status)
        line = f"{impl} on {dev.type}: {passed}/{len(applicable)} conformance vectors pass"
        bit_exact = sum(st == "n/a" and r.mode == "not applicable" for r, st in zip(results, status))
        all_refused = sum(st == "n/a" and r.mode != "not applicable" for r, st in zip(results, status))
        if bit_exact:
            line += (f" (RNG-independent rules, by route, support and statistics at {trials} trials; "
                     f"{bit_exact} MRV2 bit-exact vector(s) not applicable to rng_contract {contract})")
        if all_refused:
            line += f"; {all_refused} vector(s) n/a: the impl refused every request of them"
        if code == EXIT_INCONCLUSIVE:
            line = (f"INCONCLUSIVE: {line}: " + (f"{len(powerless)} vector(s) without power at {trials} trials"
                                                 if powerless else f"no chosen vector applies to {impl}"))
        out.print(line, soft_wrap=True)
    raise typer.Exit(code)


def _set_aside_refusals(r, rec) -> tuple[int, int]:
    """Take the requests the impl refused out of a vector's failures: a refusal says "this impl does not handle
    such a request" (a plain sampler and drafts, `guarded` and T > 0 under drafts), so the rule is not tested
    on it, neither passed nor failed; `replay run` still fails a refusal (exit 1). Returns (requests refused,
    requests in the vector). The runner names a refusal "step S, request R: refused" in exact mode (its
    Comparison lists them) and "...: refused (why)" in the RNG-independent mode, with a route line beside it."""
    total = sum(int(record.step.num_requests) for record in rec)
    if r.mode == "exact":
        refused = {(int(s), int(q)) for s, q in r.comparison.refused}
    else:
        refused = set()
        for line in r.failures:
            where, _, what = line.partition(": step ")[2].partition(": ")
            step, _, request = where.partition(", request ")
            if what.startswith("refused") and step.isdigit() and request.lstrip("-").isdigit():
                refused.add((int(step), int(request)))
    heads = tuple(f"rule {r.rule.id}: step {s}, request {q}:" for s, q in refused)
    heads += tuple(f"rule {r.rule.id}: step {s}, request {q}," for s, q in refused)
    r.failures = [line for line in r.failures if not line.startswith(heads)]
    return len(refused), total


def _status(r, refused: int, total: int) -> str:
    """The vector's status: "n/a" also when the impl refused every request of it (nothing was tested)."""
    return "n/a" if total and refused == total and not r.failures else r.status
