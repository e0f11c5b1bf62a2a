"""What `replay audit` reports: the Bernoulli terms of its tests, test results, findings and notes, and
the per-recording result (JSON shapes included). The statistics live in replay_harness.checks.audit.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from replay_harness.checks.tails import format_p


@dataclass
class Term:
    """One Bernoulli event of a statistical test: ``hit`` happened with probability ``prob`` under H0."""

    step: int
    request_id: int
    offset: int  # emitted-token index within the request's step (row offset)
    scope: str   # "verify" or "plain"
    prob: float
    hit: bool


@dataclass
class TestResult:
    """A test over a set of terms. log10_p is log10 of the tail probability (-inf: impossible)."""

    test: str
    kind: str
    scope: str  # "verify", "plain" or "request <id>"
    statistic: str
    tail: str
    terms: int
    observed: int
    expected: float
    log10_p: float

    @property
    def p_value(self) -> float:
        return 10 ** self.log10_p if self.log10_p > -320 else 0.0


@dataclass
class Finding:
    """Something the recording's tokens rule out (severity "finding") or make suspicious ("note")."""

    kind: str
    severity: str
    request_ids: list[int]
    steps: list[int]
    observed: float | None
    expected: float | None
    log10_p: float | None  # None: not a statistical statement; -inf: certain
    message: str
    scope: str = ""
    terms: int | None = None  # tokens (Bernoulli terms) the test covered
    test: str = ""            # the statistical test (TESTS key) behind it; "" for certain findings
    rule: str = ""            # forbidden-token: the pipeline rule that forbids the tokens (checks/audit_pipeline.py)

    @property
    def p_value(self) -> float | None:
        if self.log10_p is None:
            return None
        return 10 ** self.log10_p if self.log10_p > -320 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["p_value"] = self.p_value
        d["p_value_text"] = None if self.log10_p is None else format_p(self.log10_p)
        if d["log10_p"] is not None and not math.isfinite(d["log10_p"]):
            d["log10_p"] = None if d["log10_p"] != d["log10_p"] else "-inf"
        return d


@dataclass
class AuditResult:
    path: str
    synthetic: bool
    engine_tokens: bool = True  # False: the recording says it holds no engine tokens (derived: `replay synth`)
    steps: int = 0
    request_steps: int = 0
    tokens_stochastic: int = 0
    tokens_greedy: int = 0
    refused: int = 0
    tests: list[TestResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No finding (says nothing about whether anything was tested: :attr:`testable`)."""
        return not self.findings

    @property
    def tokens_tested(self) -> int:
        return self.tokens_stochastic + self.tokens_greedy

    @property
    def testable(self) -> bool:
        """At least one emitted token was tested; else "nothing found" would be no verdict at all."""
        return self.tokens_tested > 0

    @property
    def not_testable(self) -> str | None:
        """Why nothing was tested ("0 tokens tested: ..."); None when something was."""
        if self.testable:
            return None
        if not self.engine_tokens:
            why = "the recording has no engine tokens (derived recording)"
        elif self.steps == 0:
            why = "the recording has no steps"
        elif self.refused == self.request_steps:
            why = f"none of its {self.request_steps} request-steps emitted a token"
        else:
            why = "no emitted token could be tested"
        return f"0 tokens tested: {why}"

    def to_dict(self) -> dict:
        tests = []
        for t in self.tests:
            d = asdict(t)
            d["p_value"] = t.p_value
            d["p_value_text"] = format_p(t.log10_p)
            d["log10_p"] = "-inf" if t.log10_p == -math.inf else t.log10_p
            tests.append(d)
        return {"path": self.path, "synthetic": self.synthetic, "ok": self.ok, "testable": self.testable,
                "not_testable": self.not_testable, "steps": self.steps,
                "request_steps": self.request_steps, "tokens_stochastic": self.tokens_stochastic,
                "tokens_greedy": self.tokens_greedy, "refused": self.refused,
                "findings": [f.to_dict() for f in self.findings], "notes": [f.to_dict() for f in self.notes],
                "tests": tests}
