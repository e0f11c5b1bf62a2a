"""Power per mechanism (docs/VERIFY.md, "Power per mechanism"): which sampling mechanisms a request exercises,
and how likely each mechanism's named bug would have slipped past the tests that ran on it.

A *mechanism* is one thing a sampler must do, named with the bug that breaks it (``MECHANISMS``). Per request
(a :class:`~replay_harness.checks.report.UnitReport`), two float dicts keyed by mechanism id:

* ``exercised[m]``: the size of the bug's effect on this request (a probability, in [0, 1]); a mechanism is
  exercised when that is at least ``MIN_EFFECT`` (a bug moving less than 0.1% of a request's mass is not
  judged on it);
* ``covers[m]``: the *miss probability*: the largest p-value (statistical tests) or probability of no evidence
  (exact checks) that the bug would give on the tests that ran, the smallest over those tests. The mechanism
  is covered when it lies below the run's per-test threshold (:func:`replay_harness.checks.report.finalize`).

The bugs and the tests that see them:

* ``temperature`` (greedy decoding at T > 0: every token the argmax): distribution tests (every trial on the
  most likely bin), twin and position tests (every pair coincides), acceptance tests (a greedy verifier
  accepts the draft iff it is the argmax);
* ``position-noise`` (noise keyed without the position): the position test (every pair coincides);
* ``top-k`` / ``top-p`` / ``min-p`` (the filter ignored): the support check; miss probability
  prod_j (1 - m_j)^n_j, m_j the mass the unfiltered row puts on tokens the filter removes (times the
  rejection probability at a draft position with fixed drafts), n_j the trials reaching position j;
* ``acceptance`` (greedy verification at T > 0): acceptance tests, at the count a greedy verifier's expected
  acceptance rate gives (1 when the draft is the argmax, 0 when not; q(argmax) for drafts drawn from q);
* ``residual`` (a rejection redrawn from p instead of max(p - q, 0)): the distribution test at the draft's
  position, by the chi-squared p-value at the statistic the bug gives on average (degrees of freedom plus the
  noncentrality n sum (bug - e)^2 / e over the bins that expect MIN_EXPECTED trials, the rest one bin): an
  approximation of that test's power;
* ``greedy`` (the argmax walk at T = 0): the exact greedy check, always covered when it ran.

:func:`check_route` is the exact ``route`` check: a reported route that contradicts the temperature (greedy at
T > 0, stochastic at T = 0) fails at any trial count. An exact check on a greedy row covers ``greedy`` alone: it
is no power for a rule about stochastic verification.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from replay_harness.checks.report import MIN_EFFECT, Check, coverage, trials_for, uncovered  # noqa: F401 (re-exported)

MECHANISMS = {
    "greedy": "the argmax walk at temperature 0",
    "temperature": "temperature applied (greedy decoding at temperature > 0)",
    "position-noise": "noise keyed by position (position-blind noise)",
    "top-k": "top-k applied (top-k ignored)",
    "top-p": "top-p applied (top-p ignored)",
    "min-p": "min-p applied (min-p ignored)",
    "acceptance": "stochastic verify acceptance (greedy verification at temperature > 0)",
    "residual": "the residual draw after a rejection (drawn from p instead of max(p - q, 0))",
}
_FILTERS = (("min-p", "min_p"), ("top-k", "top_k"), ("top-p", "top_p"))


GREEDY_ROUTES = ("greedy-sample", "greedy-verify")
STOCHASTIC_ROUTES = ("random-sample", "stochastic-verify")


def check_route(unit, where: dict, name: str) -> None:
    """An exact ``route`` check that fails when a route the impl reported contradicts the request's temperature
    (a greedy route at T > 0, a stochastic one at T = 0): evidence at any number of trials."""
    wrong = [r for r in unit.routes if r in (GREEDY_ROUTES if unit.temperature != 0.0 else STOCHASTIC_ROUTES)]
    if not wrong:
        return
    what = ("greedy decoding at temperature" if unit.temperature != 0.0 else "sampling at temperature")
    unit.checks.append(Check(kind="route", position=None, n=unit.trials, passed=False, **where,
                             message=f"{name} reported route {','.join(wrong)} at temperature {unit.temperature:g} "
                                     f"(expected {unit.expected_route}): {what} {unit.temperature:g}, by its own "
                                     f"account"))


def argmax_walks(outcomes, p: np.ndarray) -> bool:
    """Whether every run of ``outcomes`` (tokens [n, k+1], counts [n]) emitted the argmax of each row it reached:
    what greedy verification gives whatever the drafts (p: [k+1, V] the request's target law)."""
    arg = p.argmax(axis=1)
    reached = np.arange(outcomes.tokens.shape[1])[None, :] < outcomes.counts[:, None]
    same = outcomes.tokens == arg[None, :outcomes.tokens.shape[1]]
    return bool(outcomes.counts.size) and bool((~reached | same).all())


def greedy_unit(unit) -> None:
    """A temperature-0 request whose greedy check ran: it exercises and covers ``greedy``."""
    if any(c.kind == "greedy" for c in unit.checks):
        unit.exercised["greedy"] = 1.0
        unit.covers["greedy"] = 0.0


def stochastic_unit(unit, law, step, r: int, counts: np.ndarray, twins: bool) -> None:
    """Fill ``unit.exercised`` and ``unit.covers`` for a tested T > 0 request (its checks already run).

    law: the request's RequestLaw; step: the CPU step; counts: [trials] int64 emitted counts of the first
    two groups (the trials the position checks used)."""
    from replay_harness.checks.stats import binomial_p

    p, k = law.p, len(law.drafts)
    arg = p.argmax(axis=1)
    exercised, covers = unit.exercised, unit.covers

    def cover(m: str, miss: float) -> None:
        covers[m] = min(covers.get(m, 1.0), float(miss))

    exercised["temperature"] = float(max(1.0 - p[j].max() for j in range(k + 1)))
    if twins:
        exercised["position-noise"] = float(1.0 - law.collision)
    accept_effect, resid_effect = 0.0, 0.0
    for c in unit.checks:
        if c.kind in ("independence", "position") and c.floor_p is not None:
            cover("temperature", c.floor_p)
            if c.kind == "position":
                cover("position-noise", c.floor_p)
        elif c.kind == "distribution" and c.floor_p is not None:
            cover("temperature", c.floor_p)
            bug = _residual_bug(law, c.position)
            if bug is not None:
                cover("residual", _expected_p(law.emit[c.position], bug, c.n))
        elif c.kind == "acceptance":
            j = c.position
            rate = float(law.q[j, arg[j]]) if law.sampled else float(law.drafts[j] == arg[j])
            accept_effect = max(accept_effect, abs(rate - float(law.accept[j])))
            miss = binomial_p(int(round(c.n * rate)), c.n, float(law.accept[j]))
            cover("acceptance", miss)
            cover("temperature", miss)
    for j, d in enumerate(law.drafts):
        if d < 0:
            break
        bug = _residual_bug(law, j)
        if bug is not None:
            resid_effect = max(resid_effect, 0.5 * float(np.abs(bug - law.emit[j]).sum()))
    if k:
        exercised["acceptance"] = accept_effect
        exercised["residual"] = resid_effect
    for m, mass in filter_masses(step, r, law).items():
        n = np.array([(counts > j).sum() for j in range(k + 1)], dtype=np.float64)
        exercised[m] = float(mass.max())
        with np.errstate(divide="ignore"):
            log_miss = float((n * np.log1p(-np.minimum(mass, 1.0))).sum())
        cover(m, math.exp(log_miss) if log_miss > -745 else 0.0)


def _expected_p(e: np.ndarray, bug: np.ndarray, n: int) -> float:
    """The chi-squared p-value at the statistic n trials from ``bug`` give on average against the law ``e``:
    tokens expecting at least MIN_EXPECTED trials are bins, the rest one bin; X^2 ~ df + n sum (bug - e)^2 / e
    (the noncentrality plus the central part). An approximation of the distribution test's power."""
    from scipy.stats import chi2

    from replay_harness.checks.stats import MIN_EXPECTED

    big = n * e >= MIN_EXPECTED
    eb = np.append(e[big], e[~big].sum())
    bb = np.append(bug[big], bug[~big].sum())
    keep = eb > 0
    df = int(keep.sum()) - 1
    if df < 1:
        return 1.0
    lam = n * float(((bb[keep] - eb[keep]) ** 2 / eb[keep]).sum())
    return float(chi2.sf(lam + df, df))


def _residual_bug(law, j: int) -> np.ndarray | None:
    """[V] float64: the law at draft position j when a rejection redraws from p_j instead of the residual;
    None at the bonus position or a placeholder."""
    if j is None or j >= len(law.drafts) or law.drafts[j] < 0:
        return None
    p, d, a = law.p[j], law.drafts[j], float(law.accept[j])
    if law.q is None:
        resid = p.copy()
        resid[d] = 0.0
    else:
        resid = np.maximum(p - law.q[j], 0.0)
    total = resid.sum()
    if total <= 0:
        return None
    resid = resid / total
    return law.emit[j] + (1.0 - a) * (p - resid)


def filter_masses(step, r: int, law) -> dict[str, np.ndarray]:
    """Per filter set on request r (min-p > 0, 0 < top-k < V, top-p < 1): [k+1] float64, the probability that
    a sampler ignoring that filter emits a token it removes at each reached position (the row without the
    filter, its mass on removed tokens; at a draft position with fixed drafts, times the rejection
    probability)."""
    from replay_harness.checks.laws import softmax64
    from replay_harness.oracle.sampling_params import apply_sampling_params

    one = step.select([r])
    off = {"min_p": (float(one.min_p[0]) > 0, torch.zeros_like(one.min_p)),
           "top_k": (0 < int(one.top_k[0]) < step.vocab_size, torch.zeros_like(one.top_k)),
           "top_p": (float(one.top_p[0]) < 1, torch.ones_like(one.top_p))}
    out = {}
    kept = law.p > 0
    k = len(law.drafts)
    for m, f in _FILTERS:
        on, value = off[f]
        if not on:
            continue
        with np.errstate(invalid="ignore"):
            wide = softmax64(apply_sampling_params(dataclasses.replace(one, **{f: value})))
        if not np.isfinite(wide).all():
            continue
        mass = np.where(kept, 0.0, wide).sum(axis=1)
        if not law.sampled:
            mass[:k] *= 1.0 - law.accept
        out[m] = mass
    return out


def failed_mechanism(check) -> str:
    """The mechanism a failed check points at first (power.MECHANISMS ids; "structure" for a malformed answer)."""
    msg = check.message
    if check.kind in ("route", "greedy", "acceptance"):
        return {"route": "temperature", "greedy": "greedy", "acceptance": "acceptance"}[check.kind]
    if check.kind in ("independence", "position"):
        greedy = any(w in msg for w in ("fits greedy decoding", "a deterministic sampler", "greedy decoding at T > 0"))
        return "temperature" if greedy else "position-noise"
    if check.kind == "support":
        return next((f for f in ("min-p", "top-k", "top-p") if f"removed by {f}" in msg), "support")
    if check.kind == "distribution":
        return "temperature" if check.observed is not None and check.observed >= 1.0 and "the argmax" in msg \
            else "distribution"
    return check.kind


def describe(cov: dict[str, dict[str, dict]]) -> list[str]:
    """One line per recording: the mechanisms its tests could have caught, and those they could not (with the
    trials that would)."""
    lines = []
    order = list(MECHANISMS)
    for label, rec in cov.items():
        rec = dict(sorted(rec.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
        could = [m for m, v in rec.items() if v["covered"]]
        could_not = [m + (f" (--trials {v['trials_needed']})" if v["trials_needed"] else "")
                     for m, v in rec.items() if not v["covered"]]
        text = f"  {label}: could have caught: {', '.join(could) or 'nothing'}"
        if could_not:
            text += f"; no power for: {', '.join(could_not)}"
        lines.append(text)
    return lines


def gaps_text(gaps: dict[str, list[str]]) -> str:
    """The INCONCLUSIVE verdict's list: 'no power for temperature, position-noise (REC); ...'."""
    return "; ".join(f"no power for {', '.join(ms)} ({label})" for label, ms in gaps.items())
