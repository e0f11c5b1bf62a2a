"""Statistical verification of a sampler impl (`replay verify`): the laws, the trials and the tests.

No printing here; replay_harness/cli/verify.py shows the results. docs/VERIFY.md is the method.

For each request r of a step (k drafts d_0..d_{k-1}, processed target rows p_0..p_k after
``apply_sampling_params``) the impl is run many times with distinct seeds (one impl call holds many
copies of the request, since tokens do not depend on batch composition). The exact law of what a
correct MRV2 sampler emits is known:

* position j < k is *reached* when drafts 0..j-1 were accepted (``count > j``);
* one-hot drafts (no draft logits): d_j is accepted with probability ``p_j(d_j)``, else a token is
  drawn from p_j with d_j removed; the token at a reached position j has law p_j;
* draft logits, drafts drawn per trial from q_j = softmax(draft_logits / T) (default): acceptance
  ``sum_x min(p_j(x), q_j(x))`` and the token has law p_j (Leviathan et al. / Chen et al.);
* draft logits, recorded drafts held fixed (``sample_drafts=False``): acceptance
  ``a_j = min(1, p_j(d_j) / q_j(d_j))`` and law ``a_j delta(d_j) + (1 - a_j) r_j`` with the residual
  ``r_j ∝ max(p_j - q_j, 0)`` (averaged over d_j ~ q_j this is p_j again);
* a placeholder draft (-1) ends verification with a draw from p_j; the bonus position k has law p_k;
* greedy requests (temperature 0) are deterministic: the argmax walk.

Tests per request (statistical ones form one family, Bonferroni-corrected in :func:`finalize`):

* ``distribution``: chi-squared goodness of fit of the token at each reached position against its law,
  bins with expected count < ``MIN_EXPECTED`` merged into one "other" bin, df = bins - 1;
* ``acceptance``: two-sided exact binomial test of the accepted count against the acceptance rate;
* ``independence``: half of the trials are *twins* of the other half (same seed, positions shifted by
  k+1, as the request's next step would have them). With noise keyed by position the twins are
  independent, so their outcomes (count and tokens) coincide with the probability
  ``RequestLaw.collision``; noise reused across positions makes them coincide more often;
* exact checks (no p-value; any deviation fails): ``support`` (a token of probability 0 emitted),
  ``structure`` (accepted prefix is not the drafts, bad count, no -1 padding), ``greedy``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch

from replay_harness.impls.contract import place
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.step import ROUTE_CODE, Step, expected_route, route_name

MIN_EXPECTED = 5.0  # chi-squared: bins expected to hold fewer trials are merged (vLLM's rule)
DEFAULT_ALPHA = 1e-3  # family-wise false-alarm rate of one verify run (Bonferroni over its tests)
DEFAULT_TRIALS = 1000
MAX_ELEMS_PER_CALL = 1 << 24  # logits elements per impl call (bounds memory: rows x V)
STATISTICAL = ("distribution", "acceptance", "independence")


@dataclass
class Check:
    """One test on one request of one step.

    kind: distribution | acceptance | independence (statistical, p_value set) or
          support | structure | greedy (exact, p_value None).
    n: trials the test used; statistic/df: chi-squared (distribution) or the observed count
    (acceptance, independence); expected/observed: rates in [0, 1] for the headline of ``message``.
    passed: set by :func:`finalize` for statistical checks (p_value >= alpha / m).
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

    def to_dict(self) -> dict[str, Any]:
        return {"impl": self.impl, "trials": self.trials, "seed": self.seed, "alpha": self.alpha, "drafts": self.drafts,
                "per_test_threshold": self.threshold, "statistical_tests": self.num_statistical,
                "checks": len(self.checks), "failures": [asdict(c) for c in self.failures],
                "refused": [{"recording": u.recording, "step": u.step, "request": u.request,
                             "request_id": u.request_id, "routes": u.routes} for u in self.refused],
                "not_testable": [{"recording": u.recording, "step": u.step, "request": u.request,
                                  "request_id": u.request_id, "notes": u.notes} for u in self.untestable],
                "units": [{k: v for k, v in asdict(u).items()} for u in self.units], "ok": self.ok}


# ---------------------------------------------------------------------------------------------
# Laws
# ---------------------------------------------------------------------------------------------


@dataclass
class RequestLaw:
    """The exact emitted law of one stochastic request.

    drafts: k recorded ids (-1 placeholder). sampled: drafts are drawn per trial from q (draft-logit
    steps), else held at the recorded ids. p: [k+1, V] float64 target probabilities (after sampling
    params); q: [k, V] float64 draft probabilities or None (one-hot). accept: [k] float64, the
    probability that a trial reaching j continues past it (a_j, or sum_x min(p_j, q_j) when sampled;
    0 for placeholders). emit: [k+1, V] float64, the law of the token at a reached position j.
    collision: probability that two independent runs give the same outcome (count and tokens).
    """

    drafts: list[int]
    sampled: bool
    p: np.ndarray
    q: np.ndarray | None
    accept: np.ndarray
    emit: np.ndarray
    collision: float

    def draw_drafts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """[n, k] int64 drafts for n trials: recorded ids, or draws from q_j where sampled (placeholders kept)."""
        out = np.tile(np.array(self.drafts, dtype=np.int64), (n, 1)).reshape(n, len(self.drafts))
        if self.sampled:
            for j, d in enumerate(self.drafts):
                if d >= 0:
                    cdf = np.cumsum(self.q[j])
                    out[:, j] = np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"),
                                           self.q.shape[1] - 1)
        return out


def softmax64(logits: torch.Tensor) -> np.ndarray:
    """[M, V] float tensor (may hold -inf) -> [M, V] float64 probabilities (rows of all -inf give NaN)."""
    x = logits.detach().cpu().double().numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        x = x - x.max(axis=1, keepdims=True)
        e = np.exp(x)
        return e / e.sum(axis=1, keepdims=True)


def request_law(processed: torch.Tensor, drafts: list[int], temperature: float,
                draft_logits: torch.Tensor | None, sample_drafts: bool = True) -> RequestLaw:
    """Law of a stochastic request. processed: [k+1, V] float32 rows after sampling params;
    draft_logits: [k, V] pre-temperature, or None for one-hot drafts. ``sample_drafts``: with draft
    logits, trials draw their drafts from q (else they keep the recorded ones)."""
    k = len(drafts)
    p = softmax64(processed)
    q = None if draft_logits is None else softmax64(draft_logits.float() / temperature)
    sampled = sample_drafts and q is not None
    accept = np.zeros(k)
    emit = p.copy()
    collision, reach_sq = 0.0, 1.0  # reach_sq: both of two independent runs reach j with the same prefix
    for j, d in enumerate(drafts):
        if d < 0:  # placeholder: verification ends with a draw from p_j
            collision += reach_sq * float((p[j] ** 2).sum())
            reach_sq = 0.0
            break
        if q is None:  # one-hot draft: accept with p(d), else draw from p without d
            a = float(p[j, d])
            same_continue = a * a
            resid = p[j].copy()
            resid[d] = 0.0
        elif sampled:  # d ~ q: accept with sum min(p, q); the emitted token is p-distributed
            overlap = np.minimum(p[j], q[j])
            a = float(overlap.sum())
            same_continue = float((overlap ** 2).sum())
            resid = np.maximum(p[j] - q[j], 0.0)
        else:  # fixed d with draft logits: accept with min(1, p(d)/q(d))
            a = 1.0 if q[j, d] <= 0 < p[j, d] else (0.0 if q[j, d] <= 0 else min(1.0, p[j, d] / q[j, d]))
            same_continue = a * a
            resid = np.maximum(p[j] - q[j], 0.0)
        total = resid.sum()
        resid = resid / total if total > 0 else resid
        accept[j] = a
        if not sampled:
            emit[j] = (1.0 - a) * resid
            emit[j, d] += a
        collision += reach_sq * (1.0 - a) ** 2 * float((resid ** 2).sum())
        reach_sq *= same_continue
    collision += reach_sq * float((p[k] ** 2).sum())
    return RequestLaw(drafts=list(drafts), sampled=sampled, p=p, q=q, accept=accept, emit=emit,
                      collision=min(collision, 1.0))


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------


@dataclass
class ChiSquare:
    statistic: float
    df: int
    p_value: float
    bins: int


def chi_square(observed: np.ndarray, law: np.ndarray, min_expected: float = MIN_EXPECTED) -> ChiSquare | None:
    """Chi-squared goodness of fit of ``observed`` token ids ([n] int) against ``law`` ([V] float64).

    Tokens whose expected count n*law < min_expected are merged into one "other" bin; when that
    bin's own expectation is below min_expected it is folded into the smallest kept bin. Tokens of
    law 0 are left out (the ``support`` check catches them). None when fewer than two bins remain.
    With exactly two bins the p-value is the exact two-sided binomial one (same hypothesis; the
    chi-squared tail overstates the evidence against a small bin by up to ~10x at p ~ 1e-5).
    """
    from scipy.stats import chi2

    n = observed.size
    counts = np.bincount(observed, minlength=law.size)[:law.size].astype(np.float64)
    exp = n * law
    big = exp >= min_expected
    obs_bins, exp_bins = list(counts[big]), list(exp[big])
    rest = (~big) & (law > 0)
    other_e, other_o = float(exp[rest].sum()), float(counts[rest].sum())
    if other_e > 0:
        if other_e >= min_expected or not exp_bins:
            obs_bins.append(other_o)
            exp_bins.append(other_e)
        else:
            i = int(np.argmin(exp_bins))
            obs_bins[i] += other_o
            exp_bins[i] += other_e
    if len(exp_bins) < 2:
        return None
    o, e = np.array(obs_bins), np.array(exp_bins)
    stat = float(((o - e) ** 2 / e).sum())
    df = len(e) - 1
    if df == 1:  # two bins: the exact binomial test (chi2 with one small bin is far too liberal at alpha/m)
        return ChiSquare(statistic=stat, df=df, p_value=binomial_p(int(o[0]), n, float(e[0] / e.sum())), bins=2)
    return ChiSquare(statistic=stat, df=df, p_value=float(chi2.sf(stat, df)), bins=len(e))


def binomial_p(successes: int, n: int, rate: float) -> float:
    """Two-sided exact binomial p-value of ``successes`` in ``n`` trials at ``rate``."""
    from scipy.stats import binomtest

    rate = min(max(rate, 0.0), 1.0)
    return float(binomtest(int(successes), int(n), rate).pvalue)


def finalize(report: VerifyReport) -> VerifyReport:
    """Set ``passed`` on the statistical checks: p >= alpha / m (Bonferroni over the m tests run)."""
    m = report.num_statistical
    report.threshold = report.alpha / m if m else None
    for c in report.checks:
        if c.statistical and c.p_value is not None:
            c.passed = c.p_value >= report.threshold
    return report


# ---------------------------------------------------------------------------------------------
# Trials
# ---------------------------------------------------------------------------------------------


def trial_seeds(rng: np.random.Generator, n: int) -> torch.Tensor:
    """[n] int64 distinct seeds drawn from ``rng``."""
    seeds = np.unique(rng.integers(-2**63, 2**63 - 1, size=n + 8, dtype=np.int64))[:n]
    rng.shuffle(seeds)
    return torch.from_numpy(seeds)


def twin_step(step: Step, r: int, seeds: torch.Tensor, drafts: np.ndarray | None = None,
              second: torch.Tensor | None = None) -> Step:
    """A step holding 2*len(seeds) copies of request r: copy i and its twin i + n share seed i; the
    twins' positions are shifted by k_r + 1 (where the request's next step would be).
    drafts: [2n, k] int64 per-copy draft ids, or None to keep the recorded ones.
    second: [n] seeds for copies n..2n-1 instead of twins (then no shift, no shared seeds)."""
    n = seeds.numel()
    s = step.select([r] * (2 * n))
    k = int(step.num_drafts[r])
    s.seed = torch.cat([seeds, seeds if second is None else second]).to(step.seed.dtype)
    pos = s.positions.clone()
    if second is None:
        pos[n * (k + 1):] += k + 1
    s.positions = pos
    if drafts is not None and k > 0:
        ids = s.draft_token_ids.clone().view(2 * n, k + 1)
        ids[:, :k] = torch.from_numpy(drafts).to(ids.dtype)
        s.draft_token_ids = ids.view(-1)
    return s


def run_trials(step: Step, r: int, impl: Any, seeds: torch.Tensor, device: torch.device,
               on_chunk: Callable[[int], None] | None = None,
               drafts: np.ndarray | None = None,
               second: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run request r 2*len(seeds) times (twins second). Returns tokens [2n, k+1] int64, counts [2n]
    int64 and routes [2n] int64 (numpy), in the order: copies 0..n-1, then their twins.
    drafts: [2n, k] per-copy drafts in that order, or None (recorded drafts).
    second: [n] own seeds for copies n..2n-1 instead of twins (see :func:`twin_step`)."""
    k = int(step.num_drafts[r])
    n = seeds.numel()
    per_call = max(1, MAX_ELEMS_PER_CALL // (2 * (k + 1) * max(step.vocab_size, 1)))
    tokens, counts, routes = [], [], []
    for start in range(0, n, per_call):
        chunk = seeds[start:start + per_call]
        sub = None
        if drafts is not None:
            m = chunk.numel()
            sub = np.concatenate([drafts[start:start + m], drafts[n + start:n + start + m]])
        s = twin_step(step, r, chunk, sub, None if second is None else second[start:start + per_call])
        res = impl.sample(place(s, impl, device))
        t = res.tokens.detach().cpu().long()
        if t.shape[1] < k + 1:
            t = torch.cat([t, torch.full((t.shape[0], k + 1 - t.shape[1]), -1, dtype=torch.long)], 1)
        tokens.append(t[:, :k + 1].numpy())
        counts.append(res.counts.detach().cpu().long().numpy())
        routes.append(res.routes.detach().cpu().long().numpy())
        if on_chunk:
            on_chunk(chunk.numel())
    def halves(parts: list[np.ndarray]) -> np.ndarray:  # every chunk holds its copies, then their twins
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([a[: a.shape[0] // 2] for a in parts] + [a[a.shape[0] // 2:] for a in parts])

    return halves(tokens), halves(counts), halves(routes)


# ---------------------------------------------------------------------------------------------
# Per-request verification
# ---------------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x < 0.9995 or x == 1 else f"{100 * x:.2f}%"


def verify_step(label: str, index: int, step: Step, impl: Any, trials: int, rng: np.random.Generator,
                device: torch.device, requests: Iterable[int] | None = None,
                on_chunk: Callable[[int], None] | None = None, sample_drafts: bool = True,
                twins: bool = True) -> list[UnitReport]:
    """Verify every request (or ``requests``) of one step with ``trials`` runs each (rounded up to even).

    sample_drafts: on draft-logit steps, each trial draws its drafts from q (the theorem's setting);
    False keeps the recorded drafts (the exact conditional law; acceptance min(1, p(d)/q(d))).
    twins: half the trials are twins (independence test); False gives every trial its own seed and
    skips that test (for impls whose noise is, by contract, not keyed by position).

    Statistical checks come back with ``passed=None``; call :func:`finalize` on the whole report.
    """
    step = step.to("cpu")
    processed = apply_sampling_params(step)
    cu = step.cu_num_logits.tolist()
    d_idx = step.draft_row_index()
    name = impl.name
    units = []
    for r in (range(step.num_requests) if requests is None else requests):
        a, b = cu[r], cu[r + 1]
        k, temp = b - a - 1, float(step.temperature[r])
        drafts = step.draft_token_ids[a:b - 1].tolist()
        half = (trials + 1) // 2
        seeds = trial_seeds(rng, half if twins else 2 * half)
        seeds, second = (seeds, None) if twins else (seeds[:half], seeds[half:])
        law = None
        if temp != 0.0:
            dl = step.draft_logits[d_idx[a:b - 1]] if step.draft_logits is not None and k > 0 else None
            law = request_law(processed[a:b], drafts, temp, dl, sample_drafts)
        trial_drafts = law.draw_drafts(rng, 2 * seeds.numel()) if law is not None and law.sampled else None
        tokens, counts, routes = run_trials(step, r, impl, seeds, device, on_chunk, trial_drafts, second)
        if trial_drafts is None:
            trial_drafts = np.tile(np.array(drafts, dtype=np.int64), (counts.size, 1)).reshape(counts.size, k)
        unit = UnitReport(recording=label, step=index, request=r, request_id=int(step.request_ids[r]),
                          temperature=temp, num_drafts=k, expected_route=expected_route(temp, k),
                          routes=sorted({route_name(int(c)) for c in routes}), trials=int(counts.size),
                          status="tested")
        units.append(unit)
        if law is not None and law.sampled:
            unit.notes.append("drafts drawn from the draft logits in every trial")
        where = dict(recording=label, step=index, request=r, request_id=unit.request_id)
        refused = (routes == ROUTE_CODE["refused"]) | (counts == 0)
        if refused.any():
            unit.status = "refused"
            unit.notes.append(f"{name} refused the request in {int(refused.sum())} of {counts.size} trials: "
                              "not verifiable")
            continue
        if not _structure_ok(unit, where, tokens, counts, trial_drafts, step.vocab_size, name, greedy=law is None):
            continue
        if law is None:
            _check_greedy(unit, where, tokens, counts, _greedy_walk(processed[a:b], drafts), name)
            continue
        if not np.isfinite(law.emit).all():
            unit.status = "skipped"
            unit.notes.append("a target row has no finite logit after sampling params: no law to test against")
            continue
        _check_positions(unit, where, tokens, counts, law, name)
        if twins:
            _check_independence(unit, where, tokens, counts, law, name)
        if not unit.checks:  # nothing could be tested (all mass in one bin, outcome certain): not a pass
            unit.status = "untestable"
    return units


def _greedy_walk(processed: torch.Tensor, drafts: list[int]) -> list[int]:
    from replay_harness.oracle.walk import verify_request

    return verify_request(processed, drafts, [0] * (len(drafts) + 1), 0.0, 0, None)


def _structure_ok(unit: UnitReport, where: dict, tokens: np.ndarray, counts: np.ndarray, drafts: np.ndarray,
                  vocab: int, name: str, greedy: bool) -> bool:
    """Counts in [1, k+1], last token in the vocabulary, -1 after it, accepted prefix == the trial's
    drafts ([trials, k])."""
    k = drafts.shape[1]
    problems = []
    for i in range(counts.size):
        c = int(counts[i])
        row = tokens[i]
        if not 1 <= c <= k + 1:
            problems.append(f"count {c} outside 1..{k + 1}")
        elif not 0 <= row[c - 1] < vocab:
            problems.append(f"token {row[c - 1]} at position {c - 1} is outside the vocabulary 0..{vocab - 1}")
        elif (row[c:] != -1).any():
            problems.append(f"tokens after the count {c} are not -1: {row.tolist()}")
        elif not greedy and (row[:c - 1] != drafts[i, :c - 1]).any():
            j = int(np.argmax(row[:c - 1] != drafts[i, :c - 1]))
            problems.append(f"position {j} continues past a token {row[j]} that is not the draft {drafts[i, j]}")
        if problems:
            unit.checks.append(Check(kind="structure", position=None, n=int(counts.size), passed=False,
                                     message=f"{name}: trial {i}: {problems[0]}", **where))
            return False
    return True


def _check_greedy(unit: UnitReport, where: dict, tokens: np.ndarray, counts: np.ndarray, want: list[int],
                  name: str) -> None:
    n = counts.size
    expect = np.full(tokens.shape[1], -1)
    expect[:len(want)] = want
    bad = (counts != len(want)) | (tokens != expect).any(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        got = tokens[i, :counts[i]].tolist()
        msg = (f"greedy request (temperature 0): {name} emitted {got} in {int(bad.sum())} of {n} trials "
               f"where the argmax walk gives {want}")
    else:
        msg = f"all {n} trials emitted the argmax walk {want}"
    unit.checks.append(Check(kind="greedy", position=None, n=n, passed=not bad.any(), message=msg,
                             expected=1.0, observed=float(1 - bad.mean()), **where))


def _check_positions(unit: UnitReport, where: dict, tokens: np.ndarray, counts: np.ndarray, law: RequestLaw,
                     name: str) -> None:
    k = len(law.drafts)
    for j in range(k + 1):
        reached = counts > j
        n = int(reached.sum())
        if n == 0:
            unit.notes.append(f"position {j}: no trial reached it")
            continue
        x = tokens[reached, j]
        e = law.emit[j]
        bad = e[x] <= 0
        if bad.any():
            tok = int(x[np.argmax(bad)])
            unit.checks.append(Check(kind="support", position=j, n=n, passed=False, expected=0.0,
                                     observed=float(bad.mean()),
                                     message=f"{name} emitted token {tok} (probability 0 after sampling params) "
                                             f"in {int(bad.sum())} of {n} trials reaching position {j}", **where))
            continue
        cs = chi_square(x, e)
        if cs is None:
            unit.notes.append(f"position {j}: {n} trials reached it, too few for a chi-squared test "
                              f"(fewer than two bins expect {MIN_EXPECTED:g})")
        else:
            obs = np.bincount(x, minlength=e.size)[:e.size] / n
            tok = int(np.argmax(np.abs(obs - e)))
            what = "the argmax" if tok == int(np.argmax(e)) else (
                "the draft" if j < k and not law.sampled and tok == law.drafts[j] else "token")
            unit.checks.append(Check(
                kind="distribution", position=j, n=n, statistic=cs.statistic, df=cs.df, p_value=cs.p_value,
                expected=float(e[tok]), observed=float(obs[tok]),
                message=f"{name} emitted {what} ({tok}) in {_pct(obs[tok])} of {n} trials reaching position {j}; "
                        f"expected {_pct(e[tok])}", **where))
        if j < k and law.drafts[j] >= 0:
            acc = int((counts[reached] > j + 1).sum())
            a = float(law.accept[j])
            drafted = "its drafts (drawn from q; expected sum min(p, q))" if law.sampled else \
                f"draft {law.drafts[j]}"
            unit.checks.append(Check(
                kind="acceptance", position=j, n=n, statistic=float(acc), p_value=binomial_p(acc, n, a),
                expected=a, observed=acc / n,
                message=f"{name} accepted {drafted} at position {j} in {_pct(acc / n)} of {n} trials "
                        f"reaching it; expected {_pct(a)}", **where))


def _check_independence(unit: UnitReport, where: dict, tokens: np.ndarray, counts: np.ndarray, law: RequestLaw,
                        name: str) -> None:
    n = counts.size // 2
    c = law.collision
    if n == 0 or c >= 1.0 - 1e-12:
        unit.notes.append("independence: every outcome is certain, nothing to test")
        return
    same = (counts[:n] == counts[n:]) & (tokens[:n] == tokens[n:]).all(axis=1)
    hits = int(same.sum())
    unit.checks.append(Check(
        kind="independence", position=None, n=n, statistic=float(hits), p_value=binomial_p(hits, n, c),
        expected=c, observed=hits / n,
        message=f"{name}: twin runs (same seed, positions shifted by {len(law.drafts) + 1}) gave the same outcome "
                f"in {_pct(hits / n)} of {n} pairs; expected {_pct(c)} for noise keyed by position", **where))


def parse_steps(text: str | None, num_steps: int) -> list[int]:
    """'0,2,5-7' -> step indices (all when None); raises ValueError with the reason."""
    if text is None:
        return list(range(num_steps))
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"cannot read {part!r} (examples: 0  0,2  1-3)")
        rng = range(int(lo), int(hi) + 1) if sep else [int(lo)]
        for i in rng:
            if i >= num_steps:
                raise ValueError(f"step {i} does not exist (the recording has {num_steps} steps)")
            if i not in out:
                out.append(i)
    if not out:
        raise ValueError("no step selected")
    return out


def expected_runs(units_per_step: Iterable[int], trials: int) -> int:
    """Total request runs a verify will make (for progress bars)."""
    return sum(units_per_step) * 2 * ((trials + 1) // 2)


__all__ = ["Check", "UnitReport", "VerifyReport", "RequestLaw", "request_law", "chi_square", "binomial_p",
           "finalize", "verify_step", "run_trials", "twin_step", "trial_seeds", "parse_steps"]


def builtin_steps(seed: int = 0) -> list[Step]:
    """SYNTHETIC steps for `replay verify` without a recording (vocabulary 64, so Triton impls run fast
    under the interpreter): step 0 one-hot drafts with top-k and placeholders at temperatures 0, 0.7
    and 1; step 1 draft logits with top-p and min-p at temperatures 0.8, 1 and 1.3. Logits are
    halved after generation (flatter rows, more chi-squared bins)."""
    from replay_harness.recording.synthetic import Case, random_step

    gen = torch.Generator().manual_seed(seed)
    cases = [Case("verify-one-hot", vocab_size=64, num_requests=6, max_drafts=3, temperatures=(0.0, 0.7, 1.0),
                  features=frozenset({"ragged", "top-k", "placeholders"})),
             Case("verify-draft-logits", vocab_size=64, num_requests=6, max_drafts=3,
                  temperatures=(0.8, 1.0, 1.3), features=frozenset({"ragged", "draft-logits", "top-p", "min-p"}))]
    steps = []
    for i, c in enumerate(cases):
        s = random_step(gen, c, i)
        s.logits = s.logits / 2  # flatter rows than the generator's (std 1.5 instead of 3): more bins to test
        if s.draft_logits is not None:
            s.draft_logits = s.draft_logits / 2
        steps.append(s)
    return steps
