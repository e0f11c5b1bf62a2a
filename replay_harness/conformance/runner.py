"""Run an impl against the conformance vectors and name the rule of every failure.

An impl that replays a vector under the vector's RNG contract (``mrv2``; ``mrv2-fp64`` for ``fp64-noise``) is
compared token for token on it (below): the contract is chosen as `replay run` chooses it
(:func:`replay_harness.compare.runner.contract_for`: the recording's when the impl implements it among several, as
the reference does both), an impl's ``rng_contracts`` believed only when they hold its own ``rng_contract`` (a
subclass of the reference that declares another contract inherits the reference's list). Any other impl is checked
on the RNG-independent vectors by route, support and statistics (:mod:`replay_harness.conformance.independent`),
and the bit-exact vectors (``Rule.mrv2_only``) are "not applicable" to it: never a failure, never a pass.

A vector is a recording (``replay_harness/conformance/vectors/<rule>/``, shipped in the package) whose emitted tokens are what every conforming
impl must emit, token for token: unlike ``replay run``, a near-tie is a failure here (the vectors keep
every rounding-sensitive decision more than 1e-3 nats from its threshold, and their exact ties are decided
by rules, not by rounding).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

import torch

from replay_harness.compare.diff import Comparison
from replay_harness.compare.runner import contract_for, run_recording
from replay_harness.conformance.rules import MECHANISMS_OF, NOISE_RULE, RULE, Rule
from replay_harness.errors import UsageError
from replay_harness.impls.contract import Sampler
from replay_harness.recording.schema import MANIFEST
from replay_harness.recording.store import Recording

# package data (pyproject.toml): a wheel install finds them as an editable one does
DEFAULT_VECTORS = Path(__file__).resolve().parent / "vectors"


@dataclass
class VectorResult:
    """One vector's outcome: ``failures`` are one-line messages naming the rule (empty: passed).

    mode: "exact" (token for token, the impl's RNG contract is the vectors'), "rng-independent" (route,
    support and statistics) or "not applicable" (an MRV2 bit-exact vector, another RNG contract)."""

    rule: Rule
    path: Path
    comparison: Comparison
    failures: list[str] = field(default_factory=list)
    mode: str = "exact"
    tests: int = 0  # rng-independent: the checks run on this vector (statistical and exact)
    powered: bool = True  # rng-independent: an exact check ran, or a statistical test that could have failed

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def status(self) -> str:
        """"ok", "FAIL", "n/a" (an MRV2 bit-exact vector, another RNG) or "no power" (nothing on the vector
        could have failed at these trials: not a pass; docs/VERIFY.md, "Power floor")."""
        if self.mode == "not applicable":
            return "n/a"
        return "FAIL" if self.failures else "ok" if self.powered else "no power"

    def to_dict(self) -> dict:
        return {"rule": self.rule.id, "statement": self.rule.statement, "path": str(self.path), "ok": self.ok,
                "mode": self.mode, "status": self.status, "mrv2_only": self.rule.mrv2_only,
                "tokens": self.comparison.tokens_compared, "matched": self.comparison.tokens_matched,
                "tests": self.tests, "failures": self.failures}


def find_vectors(root: str | Path | None = None, rules: list[str] | None = None) -> list[tuple[Rule, Recording]]:
    """The vectors under ``root`` (default: the vectors shipped in this package), in folder order;
    ``rules``: glob patterns of rule ids to keep (e.g. ``["greedy-*", "gumbel-clamp"]``)."""
    root = Path(root) if root is not None else DEFAULT_VECTORS
    if not root.is_dir():
        raise UsageError(f"no conformance vectors at {root} (pass --vectors DIR)")
    out = []
    for path in sorted(p for p in root.iterdir() if (p / MANIFEST).exists()):
        rec = Recording(path)
        rule_id = rec.manifest.get("source", {}).get("rule", path.name)
        rule = RULE.get(rule_id) or Rule(rule_id, rec.manifest.get("source", {}).get("statement", "?"), "?")
        if rules and not any(fnmatch.fnmatch(rule.id, pat) for pat in rules):
            continue
        out.append((rule, rec))
    if not out:
        raise UsageError(f"no conformance vector under {root} matches --rule {' '.join(rules or [])}")
    return out


def _failures(rule: Rule, cmp: Comparison) -> list[str]:
    """One line per divergence, routing violation or refusal, each naming the rule."""
    refused = set(cmp.refused)
    lines = [f"step {s}, request {r}: refused" for s, r in cmp.refused]
    for d in cmp.divergences:
        if (d.step, d.request_id) in refused:
            continue
        where = f"step {d.step}, request {d.request_id}"
        if d.position is None:
            what = f"route {d.route}, expected {d.against_route}"
        else:
            what = f"slot {d.position}: emitted {d.token}, expected {d.against_token}"
        lines.append(f"{where}, {what}")
    lines += [f"step {v.step}, request {v.request_id}: route {v.got}, expected {v.expected}" for v in cmp.violations]
    return [f"rule {rule.id}: {line}" for line in lines]


def _replays(impl: Sampler, rec: Recording) -> bool:
    """Whether ``impl`` replays ``rec`` under the vector's own contract (module docstring)."""
    return contract_for(impl, rec) == rec.rng_contract != "unknown"  # contract_for believes only a declared list


def run_conformance(impl: Sampler, vectors: list[tuple[Rule, Recording]], device: torch.device | None = None,
                    trials: int | None = None, seed: int = 0, alpha: float | None = None) -> list[VectorResult]:
    """Check ``impl`` (a Sampler, e.g. from ``get_impl``) on every vector: token for token when its RNG
    contract is the vectors', else by route, support and statistics on the RNG-independent vectors
    (``trials`` runs per request, ``seed``, family-wise ``alpha``), the MRV2 bit-exact ones "not applicable"."""
    from replay_harness.conformance import independent

    device = device or torch.device("cpu")
    results, other = [], []
    for rule, rec in vectors:
        if _replays(impl, rec):
            impl.begin_recording(str(rec.path))
            cmp = run_recording(rec, impl, "recorded", device)
            results.append(VectorResult(rule, rec.path, cmp, _failures(rule, cmp)))
        else:
            results.append(VectorResult(rule, rec.path, Comparison(), [],
                                        "not applicable" if rule.mrv2_only else "rng-independent"))
            if not rule.mrv2_only:
                other.append((len(results) - 1, rule, rec))
    if other:
        lines, report, noise = independent.check_vectors(
            impl, [(rule, rec) for _, rule, rec in other], device, trials or independent.DEFAULT_TRIALS, seed,
            alpha or independent.DEFAULT_ALPHA)
        for (i, rule, rec), found in zip(other, lines):
            results[i].failures = [f"rule {rule.id}: {line}" for line in found]
            checks = [c for u in report.units if u.recording == str(rec.path) for c in u.checks]
            results[i].tests = len(checks)
            results[i].powered = _powered(rule, report.coverage.get(str(rec.path), {}), checks)
        results.append(_noise_result(report, noise))
    return results


def _powered(rule: Rule, coverage: dict, checks: list) -> bool:
    """Whether a vector's RNG-independent check could have caught a bug of its rule: every mechanism of the rule
    (rules.MECHANISMS_OF) that the vector exercises covered, at least one exercised; a rule not listed: an exact
    check ran, or a statistical test with power."""
    wanted = MECHANISMS_OF.get(rule.id)
    if wanted is None:
        return any(not c.statistical or c.powered is not False for c in checks)
    relevant = [m for m in wanted if m in coverage]
    return bool(relevant) and all(coverage[m]["covered"] for m in relevant)


def _noise_result(report, noise: list[str]) -> VectorResult:
    """The noise's own line (rules.NOISE_RULE): the grouped twin / position failures, or whether any vector that
    exercises position-keyed noise had the power to see it reused."""
    from replay_harness.conformance.independent import PAIR_TESTS

    exercised = [rec["position-noise"] for rec in report.coverage.values() if "position-noise" in rec]
    result = VectorResult(NOISE_RULE, Path("(every vector)"), Comparison(),
                          [f"rule {NOISE_RULE.id}: {line}" for line in noise], "rng-independent")
    result.tests = sum(c.kind in PAIR_TESTS for c in report.checks)
    result.powered = any(v["covered"] for v in exercised)
    if not exercised and not noise:
        result.mode = "not applicable"  # no stochastic request in the chosen vectors: nothing about the noise
    return result
