"""What `replay verify` found: one Check per test, one UnitReport per request of a step, the VerifyReport,
and :func:`finalize`, which judges the statistical checks as one Bonferroni family (docs/VERIFY.md,
"Threshold and false-alarm rate"), and :func:`coverage`, which judges the mechanisms each recording exercised
(docs/VERIFY.md, "Power per mechanism"; filled in per request by :mod:`replay_harness.checks.power`). No
printing here (replay_harness/cli/verify.py prints).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from replay_harness.checks.stats import MC_CUTOFF, monte_carlo_p, simulations_for

STATISTICAL = ("distribution", "acceptance", "independence", "position")
DEFAULT_ALPHA = 1e-3  # family-wise false-alarm rate of one verify run (Bonferroni over its tests)
MIN_EFFECT = 1e-3  # a mechanism's bug moving less of a request's probability is not judged on it (power.py)
ORDER = ("greedy", "temperature", "position-noise", "top-k", "top-p", "min-p", "acceptance", "residual")  # power.py
TEST_TITLES = {"position": "position test (noise does not depend on position)"}  # failure lines; else "KIND test"


@dataclass
class Check:
    """One test on one request of one step.

    kind: distribution | acceptance | independence | position (statistical, p_value set) or
          support | structure | greedy (exact, p_value None).
    n: trials (pairs) the test used; statistic/df: Pearson's X^2 (distribution) or the observed count
    (acceptance, independence, position); expected/observed: rates in [0, 1] for the headline of ``message``.
    method: how p_value was computed: "binomial" (exact), "chi-squared" (approximate, far from the
    threshold only) or "monte-carlo" (``simulations`` multinomial draws; ``approx_p`` keeps the
    chi-squared value). passed: set by :func:`finalize` (p_value >= alpha / m).
    floor_p: the smallest p-value any outcome could give in the direction of a bug (every pair coinciding;
    every reached draft accepted; every trial on the most likely token: greedy at T > 0); floor_rate, the
    rate r with floor ~ r^n, and floor_scale, trials of the request per counted event, give the trials that
    would let it fall below a threshold. powered: set by :func:`finalize` (floor_p < threshold): a test that
    passed without power is not a pass (docs/VERIFY.md, "Power floor").
    """

    kind: str
    recording: str
    step: int
    request: int
    request_id: int
    position: int | None
    n: int
    message: str
    statistic: float | None = None
    df: int | None = None
    p_value: float | None = None
    expected: float | None = None
    observed: float | None = None
    passed: bool | None = None
    method: str | None = None
    simulations: int | None = None
    approx_p: float | None = None
    floor_p: float | None = None
    floor_rate: float | None = None
    floor_scale: float = 1.0
    powered: bool | None = None
    bins: Any = field(default=None, repr=False)  # distribution: [B] float64 bin probabilities (not in JSON)

    def trials_for_power(self, threshold: float) -> int | None:
        """About the trials per request with which an outcome in the bug's direction falls below
        ``threshold`` (floor ~ 2 r^n); None when no number of trials does (r = 1)."""
        r = self.floor_rate
        if r is None or r >= 1.0 - 1e-12:
            return None
        n = math.ceil(math.log(threshold / 2) / math.log(r))
        t = math.ceil(n * self.floor_scale)
        return t + t % 2

    @property
    def title(self) -> str:
        return TEST_TITLES.get(self.kind, f"{self.kind} test")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("bins")
        return d

    @property
    def statistical(self) -> bool:
        return self.kind in STATISTICAL


@dataclass
class UnitReport:
    """One request of one step: what was tested and how it went.

    status: tested | refused (the impl refused it: not verifiable) | skipped (no finite target row) |
    untestable (a stochastic request on which no test could run, e.g. all mass in one chi-squared bin
    and a certain twin outcome: shown as "not testable", never as "ok").
    """

    recording: str
    step: int
    request: int
    request_id: int
    temperature: float
    num_drafts: int
    expected_route: str
    routes: list[str]
    trials: int
    status: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # mechanism id -> the bug's effect on this request / the probability the tests run missed it
    # (replay_harness/checks/power.py); empty: no mechanism judged (reports built by hand)
    exercised: dict[str, float] = field(default_factory=dict)
    covers: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]


@dataclass
class VerifyReport:
    impl: str
    trials: int
    seed: int
    alpha: float
    drafts: str = "sampled"  # draft-logit steps: "sampled" from q per trial, or "recorded"
    units: list[UnitReport] = field(default_factory=list)
    threshold: float | None = None  # per-test p-value floor: alpha / (number of statistical tests)
    simulations: int = 0  # Monte Carlo simulations run by finalize, all tests together
    # per recording, per exercised mechanism: effect, miss, covered, trials_needed (set by finalize; power.py)
    coverage: dict[str, dict[str, dict]] = field(default_factory=dict)

    @property
    def checks(self) -> list[Check]:
        return [c for u in self.units for c in u.checks]

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]

    @property
    def refused(self) -> list[UnitReport]:
        return [u for u in self.units if u.status == "refused"]

    @property
    def untestable(self) -> list[UnitReport]:
        return [u for u in self.units if u.status in ("untestable", "skipped")]

    @property
    def num_statistical(self) -> int:
        return sum(c.statistical and c.p_value is not None for c in self.checks)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.refused

    @property
    def powerless(self) -> list[Check]:
        """Statistical tests that passed but could not have failed in the bug's direction (not passes)."""
        return [c for c in self.checks if c.statistical and c.passed and c.powered is False]

    @property
    def powered(self) -> list[Check]:
        return [c for c in self.checks if c.statistical and c.p_value is not None and c.powered is not False]

    @property
    def uncovered(self) -> dict[str, list[str]]:
        """Per recording, the mechanisms its requests exercise that no test could have caught (power.py)."""
        return uncovered(self.coverage)

    @property
    def inconclusive(self) -> bool:
        """Nothing failed, and either no statistical test could have failed in a bug's direction (all
        powerless, or none ran: every request greedy or not testable) or a recording exercises a mechanism
        none of its tests could have caught (docs/VERIFY.md, "Power per mechanism"): no pass (exit 4)."""
        return self.ok and (not self.powered or bool(self.uncovered))

    def trials_needed(self) -> int | None:
        """The --trials with which every uncovered mechanism, or else at least one powerless test, could fail
        (None: no number of trials does)."""
        gaps = [v for rec in self.coverage.values() for v in rec.values() if not v["covered"]]
        if gaps:
            needs = [v["trials_needed"] for v in gaps]
            return None if None in needs else max(needs)
        needs = [c.trials_for_power(self.threshold) for c in self.powerless] if self.threshold else []
        needs = [n for n in needs if n is not None]
        return min(needs) if needs else None

    def to_dict(self) -> dict[str, Any]:
        return {"impl": self.impl, "trials": self.trials, "seed": self.seed, "alpha": self.alpha, "drafts": self.drafts,
                "per_test_threshold": self.threshold, "statistical_tests": self.num_statistical,
                "monte_carlo_simulations": self.simulations,
                "checks": len(self.checks), "failures": [c.to_dict() for c in self.failures],
                "powerless_tests": len(self.powerless), "inconclusive": self.inconclusive,
                "trials_needed": self.trials_needed(),
                "refused": [{"recording": u.recording, "step": u.step, "request": u.request,
                             "request_id": u.request_id, "routes": u.routes} for u in self.refused],
                "not_testable": [{"recording": u.recording, "step": u.step, "request": u.request,
                                  "request_id": u.request_id, "notes": u.notes} for u in self.untestable],
                "mechanisms": self.coverage, "uncovered": self.uncovered,
                "units": [{**asdict(u), "checks": [c.to_dict() for c in u.checks]} for u in self.units],
                "ok": self.ok}


def finalize(report: VerifyReport) -> VerifyReport:
    """Judge the statistical checks: p >= alpha / m (Bonferroni over the m tests run).

    A distribution test whose chi-squared p-value lies below ``MC_CUTOFF`` x the threshold gets its
    verdict from a Monte Carlo p-value under the exact multinomial law instead (``simulations_for`` the
    threshold; seeded from the report's seed, so a run is reproducible). Every verdict then rests on a
    valid p-value, and the family-wise false-alarm rate is at most alpha.
    """
    m = report.num_statistical
    report.threshold = report.alpha / m if m else None
    rng = np.random.default_rng([report.seed & 0xFFFFFFFF, 0x5EED])
    for c in report.checks:
        if not (c.statistical and c.p_value is not None):
            continue
        if c.method == "chi-squared" and c.p_value < MC_CUTOFF * report.threshold:
            sims = simulations_for(report.threshold)
            c.approx_p = c.p_value
            c.p_value, c.simulations = monte_carlo_p(c.statistic, c.n, c.bins, rng, sims, stop_at=report.threshold)
            c.method = "monte-carlo"
            report.simulations += c.simulations
        c.passed = c.p_value >= report.threshold
        if c.floor_p is not None:
            c.powered = c.floor_p < report.threshold
    report.coverage = coverage(report.units, report.threshold or report.alpha)
    return report


# Power per mechanism (docs/VERIFY.md, "Power per mechanism"): what replay_harness/checks/power.py filled in per
# request, judged per recording against the run's threshold.


def trials_for(miss: float, trials: int, threshold: float) -> int | None:
    """The trials with which a miss probability ``miss`` seen at ``trials`` falls below ``threshold`` (it falls
    about geometrically in the trials); None when no number does (miss 1)."""
    if not 0.0 < miss < 1.0 - 1e-12:
        return None if miss >= 1.0 - 1e-12 else trials
    t = math.ceil(trials * math.log(threshold / 2) / math.log(miss))
    return t + t % 2


def coverage(units, threshold: float) -> dict[str, dict[str, dict]]:
    """Per recording, per exercised mechanism: {"effect", "miss", "covered", "trials_needed"}. Only tested
    requests count (a refused one fails the run; one with no test is listed as not testable)."""
    out: dict[str, dict[str, dict]] = {}
    for u in units:
        if getattr(u, "status", None) != "tested" or not getattr(u, "exercised", None):
            continue
        rec = out.setdefault(u.recording, {})
        for m, effect in u.exercised.items():
            if effect < MIN_EFFECT:
                continue
            miss = u.covers.get(m, 1.0)
            cur = rec.get(m)
            need = trials_for(miss, u.trials, threshold) if miss >= threshold else None
            if cur is None:
                rec[m] = {"effect": effect, "miss": miss, "covered": miss < threshold, "trials_needed": need}
                continue
            cur["effect"] = max(cur["effect"], effect)
            cur["covered"] = cur["covered"] or miss < threshold
            cur["miss"] = min(cur["miss"], miss)
            if need is not None:
                cur["trials_needed"] = need if cur["trials_needed"] is None else min(cur["trials_needed"], need)
    for rec in out.values():
        for v in rec.values():
            if v["covered"]:
                v["trials_needed"] = None
    rank = {m: i for i, m in enumerate(ORDER)}
    return {label: dict(sorted(rec.items(), key=lambda kv: rank.get(kv[0], len(ORDER)))) for label, rec in out.items()}


def uncovered(cov: dict[str, dict[str, dict]]) -> dict[str, list[str]]:
    """Per recording, the exercised mechanisms no test covered (empty recordings left out)."""
    found = {label: [m for m, v in rec.items() if not v["covered"]] for label, rec in cov.items()}
    return {label: ms for label, ms in found.items() if ms}
