"""Run an impl against the conformance vectors and name the rule of every failure.

A vector is a recording (``fixtures/conformance/<rule>/``) whose emitted tokens are what every conforming
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
from replay_harness.compare.runner import run_recording
from replay_harness.conformance.rules import RULE, Rule
from replay_harness.errors import UsageError
from replay_harness.impls.contract import Sampler
from replay_harness.recording.schema import MANIFEST
from replay_harness.recording.store import Recording

DEFAULT_VECTORS = Path(__file__).resolve().parents[2] / "fixtures" / "conformance"


@dataclass
class VectorResult:
    """One vector's outcome: ``failures`` are one-line messages naming the rule (empty: passed)."""

    rule: Rule
    path: Path
    comparison: Comparison
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        return {"rule": self.rule.id, "statement": self.rule.statement, "path": str(self.path), "ok": self.ok,
                "tokens": self.comparison.tokens_compared, "matched": self.comparison.tokens_matched,
                "failures": self.failures}


def find_vectors(root: str | Path | None = None, rules: list[str] | None = None) -> list[tuple[Rule, Recording]]:
    """The vectors under ``root`` (default: the repository's fixtures/conformance), in folder order;
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
    lines += [n for n in cmp.notes if n.startswith("RNG contracts differ")]
    return [f"rule {rule.id}: {line}" for line in lines]


def run_conformance(impl: Sampler, vectors: list[tuple[Rule, Recording]],
                    device: torch.device | None = None) -> list[VectorResult]:
    """Replay every vector through ``impl`` (a Sampler, e.g. from ``get_impl``); strict token comparison."""
    device = device or torch.device("cpu")
    results = []
    for rule, rec in vectors:
        impl.begin_recording(str(rec.path))
        cmp = run_recording(rec, impl, "recorded", device)
        results.append(VectorResult(rule, rec.path, cmp, _failures(rule, cmp)))
    return results
