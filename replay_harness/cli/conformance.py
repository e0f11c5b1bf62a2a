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

    Exit 0 when every applicable vector passes, 1 when any fails (each failure names its rule), 2 on bad
    input, 3 when the impl cannot run here, 4 when no chosen vector applies to the impl's RNG contract or a
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
    applicable = [r for r in results if r.status != "n/a"]
    ok = all(r.ok for r in results)
    powerless = [r for r in applicable if r.status == "no power"]
    code = EXIT_MISMATCH if not ok else EXIT_OK if applicable and not powerless else EXIT_INCONCLUSIVE
    if as_json or json_file:
        print_json({"schema": "replay.conformance/1", "impl": impl, "device": dev.type, "rng_contract": contract, "ok": code == EXIT_OK,
                    "exit_code": code,
                    "vectors": [r.to_dict() for r in results]}, json_file=json_file, stdout=as_json)
    if not as_json:
        for r in results:
            c = r.comparison
            what = {"exact": f"{c.tokens_matched}/{c.tokens_compared} tokens",
                    "rng-independent": f"route, support and statistics: {r.tests} checks",
                    "not applicable": f"MRV2 bit-exact rule: not applicable to rng_contract {contract}"}[r.mode]
            out.print(f"{r.status:4s} {r.rule.id:26s} {what}" + ("; none could have failed: raise --trials"
                                                                if r.status == "no power" else ""),
                      style=tables.cell_style(r.status))
        for r in results:
            if r.failures:
                out.print(f"{impl}: rule {r.rule.id} says: {r.rule.statement} (docs/FIXTURES.md, '{r.rule.section}')")
            for line in r.failures[:5]:
                out.print(f"{impl}: {line}")
            if len(r.failures) > 5:
                out.print(f"{impl}: rule {r.rule.id}: … (+{len(r.failures) - 5} more)")
        passed = sum(r.status == "ok" for r in applicable)
        line = f"{impl} on {dev.type}: {passed}/{len(applicable)} conformance vectors pass"
        if len(applicable) < len(results):
            line += (f" (RNG-independent rules, by route, support and statistics at {trials} trials; "
                     f"{len(results) - len(applicable)} MRV2 bit-exact vector(s) not applicable to rng_contract "
                     f"{contract})")
        if code == EXIT_INCONCLUSIVE:
            line = (f"INCONCLUSIVE: {line}: " + (f"{len(powerless)} vector(s) without power at {trials} trials"
                                                 if powerless else f"no chosen vector applies to rng_contract {contract}"))
        out.print(line, soft_wrap=True)
    raise typer.Exit(code)
