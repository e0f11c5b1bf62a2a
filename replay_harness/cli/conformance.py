"""`replay conformance`: run an impl against the conformance vectors (replay_harness.conformance)."""
from __future__ import annotations

from typing import List, Optional

import typer

from replay_harness.cli.common import (ImplTimeoutOpt, JsonFileOpt, JsonOpt, check_json_file, device_opt,
                                       impl_arg_opt, impl_opt, out, print_json)
from replay_harness.errors import EXIT_MISMATCH, EXIT_OK, UsageError

ImplOpt = impl_opt("Sampler implementation to check (`replay impls` lists them; exec:PROGRAM too).")
ImplArgOpt = impl_arg_opt("(exec:PROGRAM), repeatable (docs/EXTERNAL.md).")
DeviceOpt = device_opt("On the CPU, Triton impls run under TRITON_INTERPRET=1 (correct, slow).")


def conformance(
    impl: ImplOpt = "reference",
    impl_arg: ImplArgOpt = None,
    impl_timeout: ImplTimeoutOpt = None,
    vectors: Optional[str] = typer.Option(None, "--vectors", metavar="FOLDER", help="Folder of vectors (default: the "
                                                                   "repository's fixtures/conformance)."),
    rule: Optional[List[str]] = typer.Option(None, "--rule", metavar="GLOB",
                                             help="Only the vectors whose rule id matches this glob (repeatable), e.g. "
                                                  "'greedy-*'."),
    device: DeviceOpt = "auto",
    as_json: JsonOpt = False,
    json_file: JsonFileOpt = None,
) -> None:
    """Check an impl against the conformance vectors: one small recording per sampling rule of
    docs/FIXTURES.md, compared token for token (near-ties are failures here).

    Exit 0 when every vector passes, 1 when any fails (each failure names its rule), 2 on bad input,
    3 when the impl cannot run here.

    Example: replay conformance --impl exec:./sampler --rule 'greedy-*' --rule 'gumbel-*'
    """
    from replay_harness.compare.runner import load_impl, resolve_device
    from replay_harness.conformance.runner import find_vectors, run_conformance

    if impl_timeout is not None and not impl_timeout > 0:
        raise UsageError(f"--impl-timeout must be > 0 seconds, got {impl_timeout:g}")
    if impl_arg and not impl.startswith("exec:"):
        raise UsageError("--impl-arg is only for external impls (--impl exec:PROGRAM)")
    check_json_file(json_file, [vectors])
    dev = resolve_device(device)
    found = find_vectors(vectors, rule)
    sampler = load_impl(impl, dev, impl_arg, impl_timeout if impl.startswith("exec:") else None)
    try:
        if impl_timeout is not None and sampler.external:
            sampler.timeout = impl_timeout
        results = run_conformance(sampler, found, dev)
    finally:
        sampler.close()
    ok = all(r.ok for r in results)
    if as_json or json_file:
        print_json({"impl": impl, "ok": ok, "exit_code": EXIT_OK if ok else EXIT_MISMATCH,
                    "vectors": [r.to_dict() for r in results]}, json_file=json_file, stdout=as_json)
    if not as_json:
        for r in results:
            c = r.comparison
            out.print(f"{'ok  ' if r.ok else 'FAIL'} {r.rule.id:26s} {c.tokens_matched}/{c.tokens_compared} tokens")
        for r in results:
            if r.failures:
                out.print(f"{impl}: rule {r.rule.id} says: {r.rule.statement} (docs/FIXTURES.md, '{r.rule.section}')")
            for line in r.failures[:5]:
                out.print(f"{impl}: {line}")
            if len(r.failures) > 5:
                out.print(f"{impl}: rule {r.rule.id}: … (+{len(r.failures) - 5} more)")
        passed = sum(r.ok for r in results)
        out.print(f"{impl}: {passed}/{len(results)} conformance vectors pass")
    raise typer.Exit(EXIT_OK if ok else EXIT_MISMATCH)
