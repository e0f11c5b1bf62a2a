"""Audit a recording without replaying it: judge the engine's emitted tokens against the recorded
distributions alone (docs/AUDIT.md). Statistics only; ``replay_harness.cli.audit`` prints.

For an engine whose RNG is unknown, exact replay is impossible, but the recording still fixes the
distribution every emitted token must follow. Under speculative sampling (greedy drafts, n-gram drafts or
draft-model drafts alike) the token emitted at row ``j`` of a request, given that the earlier tokens were
accepted drafts, is distributed as ``p_j`` = softmax of row ``j`` after ``apply_sampling_params``
(temperature, min-p, top-k, top-p). Every check below is a statement about that fact:

* ``greedy-at-temperature``: how often a temperature > 0 request emitted the argmax. Each emitted token is
  a Bernoulli with success probability ``p_j(argmax)``; the count over many tokens is Poisson-binomial and
  the p-value is its exact upper tail.
* ``acceptance-rate``: each reached draft ``d_j`` is accepted with probability ``sum_x min(p_j, q_j)``
  (``p_j(d_j)`` for one-hot drafts); the accepted count's exact Poisson-binomial upper and lower tails.
* ``reused-noise``: noise reused across positions/steps of one request makes (a) the same non-argmax tokens
  recur (Gumbel-max with a reused noise vector) and (b) consecutive tokens' probability-rank intervals
  overlap (inverse-CDF sampling with a reused uniform). Each is a count of Bernoulli events whose
  probabilities are fixed before the token is drawn; Poisson-binomial upper tail again.
* ``outside-support``: a temperature > 0 token with zero probability under top-k / top-p / min-p (or a
  ``-inf`` logit, or outside the rejection residual): certain (p-value 0), unless it sits within a
  rounding tolerance of the filter boundary (then a note).
* ``greedy-not-argmax``: a temperature-0 token that is not the argmax by more than ``NEAR_TIE_TOL``.
* ``structure``: emitted tokens that contradict the verify walk (an emitted token before the last that is
  not the draft; a walk that stops right after accepting a draft).

Thresholds: a statistical test is a *finding* at p < ``FINDING_P`` (1e-6) and a *note* ("suspicious") at
p < ``NOTE_P`` (1e-3). Tests per recording: 5 statistics x (2 pooled scopes + one per request id).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import numpy as np
import torch

from replay_harness.recording.store import Recording
from replay_harness.oracle.near_tie import NEAR_TIE_TOL
from replay_harness.oracle.sampling_params import apply_sampling_params, normalized_top_k
from replay_harness.recording.step import Step

FINDING_P = 1e-6
NOTE_P = 1e-3
BOUNDARY_REL = 2.0 ** -7  # relative rounding of a bf16 logit: the filter-boundary tolerance (with NEAR_TIE_TOL)
BOUNDARY_MASS = 1e-4      # top-p mass tolerance

TESTS = {
    # test name: (finding kind, statistic, tail)
    "argmax": ("greedy-at-temperature", "emitted tokens that are the argmax (T > 0)", "upper"),
    "accept-high": ("acceptance-rate", "accepted drafts, too many for the recorded distributions", "upper"),
    "accept-low": ("acceptance-rate", "accepted drafts, too few for the recorded distributions", "lower"),
    "recurrence": ("reused-noise", "non-argmax tokens that repeat an earlier token of the request", "upper"),
    "rank-overlap": ("reused-noise", "non-argmax tokens whose probability-rank interval overlaps the previous "
                                     "token's", "upper"),
}
SCOPES = ("verify", "plain")  # T > 0 request-steps with drafts (stochastic-verify) / without (random-sample)


# ----------------------------------------------------------------------------------------------- tails
def poisson_binomial_log_tail(probs: Iterable[float], observed: int, upper: bool = True) -> float:
    """Natural log of P(X >= observed) (``upper``) or P(X <= observed), X = sum of Bernoulli(probs).

    Exact, by dynamic programming over the probabilities in log space (O(n^2), n = terms strictly
    between 0 and 1), so tails far below 1e-308 keep their exponent. Returns -inf for impossible counts.
    """
    p = np.clip(np.nan_to_num(np.asarray(list(probs), dtype=np.float64), nan=0.0), 0.0, 1.0)
    ones = int((p >= 1.0).sum())
    core = p[(p > 0.0) & (p < 1.0)]
    k, n = observed - ones, core.size
    if upper:
        if k <= 0:
            return 0.0
        if k > n:
            return -math.inf
    else:
        if k < 0:
            return -math.inf
        if k >= n:
            return 0.0
    log_pmf = np.full(n + 1, -np.inf)
    log_pmf[0] = 0.0
    for i, (a, b) in enumerate(zip(np.log(core), np.log1p(-core))):
        log_pmf[1:i + 2] = np.logaddexp(log_pmf[1:i + 2] + b, log_pmf[0:i + 1] + a)
        log_pmf[0] += b
    part = log_pmf[k:] if upper else log_pmf[:k + 1]
    top = part.max()
    return float(top + np.log(np.exp(part - top).sum())) if np.isfinite(top) else -math.inf


def format_p(log10_p: float) -> str:
    """'0' for certainty, '3.1e-45' even below the float range."""
    if log10_p == -math.inf:
        return "0"
    if log10_p > -4:
        return f"{10 ** log10_p:.3g}"
    e = math.floor(log10_p)
    m = 10 ** (log10_p - e)
    if m >= 9.95:
        m, e = 1.0, e + 1
    return f"{m:.1f}e{e}"


# ----------------------------------------------------------------------------------------------- results
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
        return not self.findings

    def to_dict(self) -> dict:
        tests = []
        for t in self.tests:
            d = asdict(t)
            d["p_value"] = t.p_value
            d["p_value_text"] = format_p(t.log10_p)
            d["log10_p"] = "-inf" if t.log10_p == -math.inf else t.log10_p
            tests.append(d)
        return {"path": self.path, "synthetic": self.synthetic, "ok": self.ok, "steps": self.steps,
                "request_steps": self.request_steps, "tokens_stochastic": self.tokens_stochastic,
                "tokens_greedy": self.tokens_greedy, "refused": self.refused,
                "findings": [f.to_dict() for f in self.findings], "notes": [f.to_dict() for f in self.notes],
                "tests": tests}


# ----------------------------------------------------------------------------------------------- per token
def _support_reason(step: Step, r: int, raw_row: torch.Tensor, token: int) -> str | None:
    """Why ``token`` is certainly outside the support of request ``r`` even with rounding slack, or None
    when it sits within the tolerance of a filter boundary (then the engine's rounding may explain it)."""
    temperature = float(step.temperature[r])
    logits = raw_row.double() / temperature
    lt = float(logits[token])
    if lt == -math.inf:
        return "its logit is -inf"
    slack = NEAR_TIE_TOL + BOUNDARY_REL * abs(lt)
    min_p = float(step.min_p[r])
    keep = torch.isfinite(logits)
    if min_p > 0:
        threshold = float(logits.max()) + math.log(min_p)
        if lt + slack < threshold:
            return f"below min-p {min_p:g}"
        keep &= logits >= threshold
    k = int(normalized_top_k(step.top_k[r:r + 1], step.vocab_size)[0])
    above = keep & (logits > lt + slack)
    if k < step.vocab_size:
        if int(above.sum()) >= k:
            return f"outside top-k {k} ({int(above.sum())} tokens score higher)"
        kth = torch.topk(torch.where(keep, logits, torch.tensor(-math.inf, dtype=logits.dtype)), k).values[-1]
        keep &= logits >= kth
    top_p = float(step.top_p[r])
    if top_p < 1:
        probs = torch.softmax(torch.where(keep, logits, torch.tensor(-math.inf, dtype=logits.dtype)), 0)
        mass = float(probs[keep & (logits > lt + slack)].sum())
        if mass >= top_p + BOUNDARY_MASS:
            return f"outside top-p {top_p:g} ({mass:.4f} of the mass scores higher)"
    return None


class _Collector:
    """Walks the emitted tokens of a recording and gathers terms, certain findings and notes."""

    def __init__(self, result: AuditResult):
        self.result = result
        self.terms: dict[str, list[Term]] = {name: [] for name in TESTS}
        self.certain: dict[str, list[tuple[int, int, str]]] = {}  # kind -> (step, request id, detail)
        self.boundary: list[tuple[int, int, str]] = []
        self.near_ties: list[tuple[int, int]] = []
        self.seen: dict[int, set[int]] = {}
        self.prev_interval: dict[int, tuple[float, float]] = {}

    def certain_finding(self, kind: str, step: int, rid: int, detail: str) -> None:
        self.certain.setdefault(kind, []).append((step, rid, detail))

    def step(self, index: int, step: Step, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        self.result.steps += 1
        # a NaN (allowed with --nan warn) counts as -inf, as the kernels treat it
        processed = torch.nan_to_num(apply_sampling_params(step), nan=-math.inf, neginf=-math.inf)
        log_p = torch.log_softmax(processed.double(), dim=-1)
        log_p = torch.nan_to_num(log_p, nan=-math.inf, neginf=-math.inf)
        cu = step.cu_num_logits.tolist()
        drafts = step.draft_token_ids.tolist()
        d_idx = step.draft_row_index()
        for r in range(step.num_requests):
            rid, c = int(step.request_ids[r]), int(counts[r])
            a, k = cu[r], cu[r + 1] - cu[r] - 1
            self.result.request_steps += 1
            if c == 0:
                self.result.refused += 1
                continue
            toks = tokens[r, :c].tolist()
            self._structure(index, rid, toks, drafts[a:a + k], k)
            temperature = float(step.temperature[r])
            if temperature == 0.0:
                self._greedy(index, rid, step, a, toks)
                continue
            scope = "verify" if k > 0 else "plain"
            for i, t in enumerate(toks):
                j = a + i
                lp = log_p[j]
                probs = lp.exp()
                self.result.tokens_stochastic += 1
                if lp[t] == -math.inf:
                    self._outside(index, rid, step, r, j, i, t)
                row = processed[j]
                is_max = row == row.max()
                hit = bool(is_max[t])
                self.terms["argmax"].append(Term(index, rid, i, scope, float(probs[is_max].sum()), hit))
                d = drafts[j] if i < k else -1
                if d >= 0:
                    alpha = self._accept_prob(step, probs, d, int(d_idx[j]), temperature)
                    self.terms["accept-high"].append(Term(index, rid, i, scope, alpha, t == d))
                    self.terms["accept-low"].append(Term(index, rid, i, scope, alpha, t == d))
                if i == c - 1 and i < k and d >= 0 and t != d and step.draft_logits is not None:
                    self._residual(index, rid, step, lp, int(d_idx[j]), temperature, t)
                self._noise(index, rid, i, scope, probs, is_max, t, hit)

    def _structure(self, index: int, rid: int, toks: list[int], drafts: list[int], k: int) -> None:
        for i, t in enumerate(toks[:-1]):
            if i >= k or t != drafts[i]:
                self.certain_finding("structure", index, rid, f"token {i} ({t}) is not the draft "
                                     f"({drafts[i] if i < k else 'none'}) yet later tokens follow")
                return
        last = len(toks) - 1
        if last < k and drafts[last] >= 0 and toks[last] == drafts[last]:
            self.certain_finding("structure", index, rid, f"the walk stopped after accepting draft {last} "
                                 f"({toks[last]}) instead of verifying the next row")

    def _greedy(self, index: int, rid: int, step: Step, a: int, toks: list[int]) -> None:
        for i, t in enumerate(toks):
            row = step.logits[a + i].float()
            row = torch.nan_to_num(row, nan=-math.inf, neginf=-math.inf)
            gap = float(row.max() - row[t])
            self.result.tokens_greedy += 1
            if gap > NEAR_TIE_TOL:
                self.certain_finding("greedy-not-argmax", index, rid, f"token {i} ({t}) is {gap:.4g} below the "
                                     f"argmax {int(row.argmax())}")
            elif gap > 0:
                self.near_ties.append((index, rid))

    def _outside(self, index: int, rid: int, step: Step, r: int, j: int, i: int, t: int) -> None:
        reason = _support_reason(step, r, step.logits[j], t)
        if reason is None:
            self.boundary.append((index, rid, f"token {i} ({t}) is outside the support by less than the "
                                              f"rounding tolerance"))
        else:
            self.certain_finding("outside-support", index, rid, f"token {i} ({t}): {reason}")

    def _accept_prob(self, step: Step, probs: torch.Tensor, d: int, draft_row: int, temperature: float) -> float:
        if step.draft_logits is None:
            return float(probs[d])
        q = torch.softmax(step.draft_logits[draft_row].double() / temperature, 0)
        return float(torch.minimum(probs, q).sum())

    def _residual(self, index: int, rid: int, step: Step, lp: torch.Tensor, draft_row: int, temperature: float,
                  t: int) -> None:
        log_q = torch.log_softmax(step.draft_logits[draft_row].double() / temperature, 0)
        excess = float(log_q[t] - lp[t])
        if excess > NEAR_TIE_TOL + BOUNDARY_REL * abs(float(log_q[t])):
            self.certain_finding("outside-support", index, rid, f"resampled token {t} has q >= p (outside the "
                                 f"residual max(p - q, 0); log q - log p = {excess:.3g})")

    def _noise(self, index: int, rid: int, i: int, scope: str, probs: torch.Tensor, is_max: torch.Tensor,
               t: int, hit: bool) -> None:
        seen = self.seen.setdefault(rid, set())
        if seen:
            ids = torch.tensor(sorted(seen), dtype=torch.long)
            pi = float(probs[ids][~is_max[ids]].sum())
            self.terms["recurrence"].append(Term(index, rid, i, scope, pi, (t in seen) and not hit))
        seen.add(t)
        sorted_p, order = torch.sort(probs, descending=True, stable=True)
        hi = torch.cumsum(sorted_p, 0)
        lo = hi - sorted_p
        where = int(torch.nonzero(order == t)[0])
        interval = (float(lo[where]), float(hi[where]))
        prev = self.prev_interval.get(rid)
        if prev is not None:
            overlap = (lo < prev[1]) & (hi > prev[0]) & ~is_max[order]
            pi = float(sorted_p[overlap].sum())
            self.terms["rank-overlap"].append(Term(index, rid, i, scope, pi, bool(overlap[where])))
        self.prev_interval[rid] = interval


# ----------------------------------------------------------------------------------------------- judging
def run_test(name: str, scope: str, terms: list[Term]) -> TestResult:
    kind, statistic, tail = TESTS[name]
    observed = sum(t.hit for t in terms)
    log_p = poisson_binomial_log_tail([t.prob for t in terms], observed, upper=tail == "upper")
    return TestResult(test=name, kind=kind, scope=scope, statistic=statistic, tail=tail, terms=len(terms),
                      observed=observed, expected=float(sum(t.prob for t in terms)), log10_p=log_p / math.log(10))


def _judge(result: AuditResult, col: _Collector, finding_p: float, note_p: float) -> None:
    lf, ln = math.log10(finding_p), math.log10(note_p)
    for name, terms in col.terms.items():
        pooled = [run_test(name, s, [t for t in terms if t.scope == s]) for s in SCOPES]
        by_req: dict[int, list[Term]] = {}
        for t in terms:
            by_req.setdefault(t.request_id, []).append(t)
        per_req = {rid: run_test(name, f"request {rid}", ts) for rid, ts in sorted(by_req.items())}
        result.tests.extend(x for x in pooled if x.terms)
        result.tests.extend(per_req.values())
        named: set[int] = set()
        for test in pooled:
            if not test.terms or test.log10_p >= ln:
                continue
            scoped = [t for t in terms if t.scope == test.scope]
            rids = sorted({t.request_id for t in scoped}, key=lambda r: per_req[r].log10_p)
            # the requests that pull in the finding's direction (more hits than expected for an upper tail)
            sign = -1 if test.tail == "lower" else 1
            suspicious = [r for r in rids if sign * (per_req[r].observed - per_req[r].expected) > 0] or rids
            steps = sorted({t.step for t in scoped if t.request_id in suspicious and t.hit != (test.tail == "lower")})
            sev = "finding" if test.log10_p < lf else "note"
            if sev == "finding":
                named.update(suspicious)
            _add(result, Finding(test.kind, sev, suspicious, steps, test.observed, test.expected, test.log10_p,
                                 _message(test), scope=test.scope, terms=test.terms,
                                 test=test.test))
        for rid, test in per_req.items():
            if rid in named or test.log10_p >= ln:
                continue
            steps = sorted({t.step for t in by_req[rid] if t.hit != (test.tail == "lower")})
            sev = "finding" if test.log10_p < lf else "note"
            _add(result, Finding(test.kind, sev, [rid], steps, test.observed, test.expected, test.log10_p,
                                 _message(test), scope=test.scope, terms=test.terms,
                                 test=test.test))
    for kind, items in col.certain.items():
        rids = sorted({rid for _, rid, _ in items})
        steps = sorted({s for s, _, _ in items})
        detail = "; ".join(f"step {s} request {rid}: {d}" for s, rid, d in items[:3])
        more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
        result.findings.append(Finding(kind, "finding", rids, steps, float(len(items)), 0.0, -math.inf,
                                       f"impossible emitted token(s): {detail}{more}", scope="all"))
    if col.boundary:
        items = col.boundary
        result.notes.append(Finding("outside-support", "note", sorted({r for _, r, _ in items}),
                                    sorted({s for s, _, _ in items}), float(len(items)), None, None,
                                    f"{len(items)} token(s) just outside a top-k/top-p/min-p boundary, within the "
                                    f"rounding tolerance (not a finding): {items[0][2]}"))
    if col.near_ties:
        result.notes.append(Finding("greedy-not-argmax", "note", sorted({r for _, r in col.near_ties}),
                                    sorted({s for s, _ in col.near_ties}), float(len(col.near_ties)), None, None,
                                    f"{len(col.near_ties)} greedy token(s) within {NEAR_TIE_TOL:g} of the argmax "
                                    f"(near-ties, tolerated)"))


def _message(test: TestResult) -> str:
    return f"{test.statistic} ({test.tail} tail of the exact Poisson-binomial)"


def _add(result: AuditResult, f: Finding) -> None:
    (result.findings if f.severity == "finding" else result.notes).append(f)


def audit_recording(path: str, *, nan: str = "error", finding_p: float = FINDING_P, note_p: float = NOTE_P,
                    on_step: Callable[[], None] | None = None) -> AuditResult:
    """Audit every step of the recording at ``path``; raises InputError on bad input."""
    rec = Recording(path, nan=nan)
    result = AuditResult(path=str(path), synthetic=rec.synthetic)
    col = _Collector(result)
    for record in rec:
        col.step(record.index, record.step, record.emitted.tokens.long(), record.emitted.counts)
        if on_step:
            on_step()
    _judge(result, col, finding_p, note_p)
    return result


def audit_steps(steps: Iterable[tuple[Step, torch.Tensor, torch.Tensor]], *, path: str = "<memory>",
                finding_p: float = FINDING_P, note_p: float = NOTE_P) -> AuditResult:
    """Audit (step, emitted tokens [R, K+1] int64, counts [R]) triples held in memory (tests, engines)."""
    result = AuditResult(path=path, synthetic=True)
    col = _Collector(result)
    for index, (step, tokens, counts) in enumerate(steps):
        col.step(index, step, tokens.long(), counts)
    _judge(result, col, finding_p, note_p)
    return result
