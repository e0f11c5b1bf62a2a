"""The RNG-independent conformance check: what every correct sampler must do, whatever its noise.

An impl whose RNG contract is not the vectors' (``mrv2``) cannot reproduce their tokens bit for bit, yet
most rules do not depend on the noise: greedy picks the first maximum and verifies by it, filters keep
the right support (top-k ties, top-p cut, min-p bound, their order, the temperature), a -1 draft ends
verification, stochastic verify accepts and resamples by the rejection-sampling law and draws the bonus
token, and the route follows the request's parameters. Per request of every such vector (docs/INTEGRATION.md,
"Conformance for any RNG"):

* route: every trial's route must be the expected one (``Step.expected_routes``; "unknown" tolerated);
* temperature 0: every trial must emit the argmax walk exactly (ties: the first index);
* temperature > 0: ``replay verify``'s tests (:func:`replay_harness.checks.verify.verify_step`) with
  ``trials`` runs each: support (a token outside top-k / top-p / min-p fails, named by filter), structure,
  distribution and acceptance against the exact law, and the twin and same-row position tests for noise
  that does not depend on the seed or the position. All statistical tests of one conformance run form
  one Bonferroni family at ``alpha`` (:func:`replay_harness.checks.report.finalize`), so a correct sampler
  fails a run with probability at most ``alpha``; the trials are fixed by ``seed``.

No printing here; :mod:`replay_harness.conformance.runner` turns the failures into rule-named lines.
"""
from __future__ import annotations

from typing import Any

import torch

from replay_harness.checks.power import failed_mechanism
from replay_harness.checks.report import VerifyReport, finalize
from replay_harness.checks.tails import p_text
from replay_harness.checks.verify import verify_step
from replay_harness.recording.store import Recording

DEFAULT_TRIALS = 200   # runs per request: the twin and position tests get 100 pairs each
DEFAULT_ALPHA = 1e-3   # family-wise false-alarm rate of one conformance run


PAIR_TESTS = ("independence", "position")


def check_vectors(impl: Any, vectors: list[tuple[Any, Recording]], device: torch.device, trials: int = DEFAULT_TRIALS,
                  seed: int = 0, alpha: float = DEFAULT_ALPHA) -> tuple[list[list[str]], VerifyReport, list[str]]:
    """Check ``impl`` on every vector by route, support and statistics; returns (one list of failure lines
    per vector, without the rule prefix; the finalized VerifyReport of all of them; the noise lines).

    The noise lines ("vector RULE: step S, request R...") are the failed twin and position tests whose evidence
    fits reused noise (not greedy decoding: checks/power.py ``failed_mechanism``), with the distribution failures
    of the requests that failed them that point at nothing more specific (an argmax every time stays with the
    rule, as do acceptance failures): they come from the noise, whatever the vector's rule, so one
    noise bug is not printed as every rule's failure (rules.NOISE_RULE)."""
    report = VerifyReport(impl=impl.name, trials=trials + trials % 2, seed=seed, alpha=alpha)
    owner: list[int] = []  # vector index of every unit
    for v, (_, rec) in enumerate(vectors):
        impl.begin_recording(str(rec.path))
        for record in rec:
            units = verify_step(str(rec.path), record.index, record.step, impl, trials, None, device,
                                seed_key=(seed, v))
            report.units.extend(units)
            owner.extend([v] * len(units))
    finalize(report)
    lines: list[list[str]] = [[] for _ in vectors]
    noise: list[str] = []
    for v, u in zip(owner, report.units):
        noisy = any(c.kind in PAIR_TESTS and failed_mechanism(c) == "position-noise" for c in u.failed)
        where = f"step {u.step}, request {u.request_id}"
        wrong = sorted(set(u.routes) - {u.expected_route, "unknown"})
        if wrong:
            lines[v].append(f"{where}: route {','.join(wrong)}, expected {u.expected_route}")
        if u.status == "refused":
            lines[v].append(f"{where}: refused ({'; '.join(u.notes)})")
        for c in u.failed:
            at = "" if c.position is None else f", position {c.position}"
            p = "" if c.p_value is None else f" ({p_text(c.p_value)} < {report.threshold:.2g})"
            line = f"{where}{at}: {c.title} failed{p}: {c.message}"
            if noisy and c.statistical and failed_mechanism(c) in ("position-noise", "distribution"):
                noise.append(f"vector {vectors[v][0].id}: {line}")
            else:
                lines[v].append(line)
    return lines, report, noise
