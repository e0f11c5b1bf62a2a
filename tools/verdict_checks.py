#!/usr/bin/env python3
"""Measure the false-alarm rate and power behind two verdicts (docs/INTEGRATION.md, docs/AUDIT.md).

    python tools/verdict_checks.py conformance --seeds 20 --budget-s 1500   # correct non-mrv2 sampler, all vectors
    python tools/verdict_checks.py audit-loop --seeds 100                    # audit on looping toy models

``conformance``: `OtherRng` (tests/test_conformance_rng.py: the reference's rules, its own noise) through
`run_conformance` at the default 200 trials and alpha 0.001, one run per seed; a run with any FAIL is a
false alarm. ``audit-loop``: tests/test_diagnoses.py's looping toy model (the next row favours repeating the
last token by BOOST nats; 4 requests x 40 plain T = 1 steps) at boosts 2.5, 4 and 6: a correct sampler
(fresh Gumbel noise) over ``--seeds`` seeds per boost (findings are false alarms), and the position-blind
engine (one noise vector per request) over half as many (how often reused noise is named).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def conformance(seeds: int, first: int, budget: float) -> None:
    from test_conformance_rng import OtherRng

    from replay_harness.conformance.runner import find_vectors, run_conformance

    t0, runs, fails = time.time(), 0, 0
    for seed in range(first, first + seeds):
        if time.time() - t0 > budget:
            break
        bad = [r.rule.id for r in run_conformance(OtherRng(), find_vectors(), seed=seed) if r.status == "FAIL"]
        runs, fails = runs + 1, fails + bool(bad)
        print(f"seed {seed}: {'FAIL ' + ','.join(bad) if bad else 'pass'} ({time.time() - t0:.0f} s)", flush=True)
    print(f"conformance: {fails} of {runs} runs of a correct non-mrv2 sampler failed ({time.time() - t0:.0f} s)")


def audit_loop(seeds: int) -> None:
    import test_diagnoses as td

    from replay_harness.checks.audit import audit_steps

    for boost in (2.5, 4.0, 6.0):
        td._looping_model = (lambda b: lambda seed: torch.randn(td.V, td.V, generator=torch.Generator().manual_seed(
            seed)) + b * torch.eye(td.V))(boost)
        clean = [audit_steps(td._decode("correct", 1000 + s), path="x") for s in range(seeds)]
        blind = [audit_steps(td._decode("position-blind", 2000 + s), path="x") for s in range(seeds // 2)]
        named = sum(any(f.kind == "reused-noise" for f in r.findings) for r in blind)
        print(f"boost {boost}: correct {sum(bool(r.findings) for r in clean)}/{len(clean)} with a finding "
              f"({sum(bool(r.notes) for r in clean)} with a note); position-blind: reused noise named in "
              f"{named}/{len(blind)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["conformance", "audit-loop"])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=float("inf"))
    args = ap.parse_args()
    if args.what == "conformance":
        conformance(args.seeds, args.first_seed, args.budget_s)
    else:
        audit_loop(args.seeds)


if __name__ == "__main__":
    main()
