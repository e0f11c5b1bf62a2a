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
* ``forbidden-token`` and ``penalty``: the sampling pipeline's rules (grammar mask, allowed ids, logit bias,
  min-tokens, bad words; repetition / frequency / presence penalties): :mod:`replay_harness.checks.audit_pipeline`.
* block and FLy acceptance by their own laws, FLy's lossy note, noise shared between drafter and verifier
  (``shared-draft-noise``): :mod:`replay_harness.checks.audit_methods`; draft trees (their path, the rows of their
  tokens): :mod:`replay_harness.checks.audit_tree`.

Thresholds: a statistical test is a *finding* at p < ``FINDING_P`` (1e-6) and a *note* ("suspicious") at
p < ``NOTE_P`` (1e-3). Tests per recording: 7 statistics x (2 pooled scopes + one per request id) at most (the
penalty test only over requests with a penalty).
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import torch

from replay_harness.checks import audit_tree
from replay_harness.checks.audit_methods import MethodAudit, judge as judge_methods, resample_may_repeat
from replay_harness.checks.audit_pipeline import PENALTY_TEST, Forbidden, StepPipeline, judge_forbidden
from replay_harness.checks.findings import AuditResult, Finding, Term, TestResult
from replay_harness.checks.tails import format_p, poisson_binomial_log_tail  # noqa: F401 (format_p: re-exported)
from replay_harness.oracle.near_tie import NEAR_TIE_TOL
from replay_harness.recording.prefetch import units_ahead
from replay_harness.recording.store import Recording
from replay_harness.oracle.sampling_params import apply_sampling_params, normalized_top_k
from replay_harness.recording.step import Step

FINDING_P = 1e-6
NOTE_P = 1e-3
# filter-boundary tolerance by the logits' dtype: (absolute, relative) slack of a logit, the rounding an
# engine computing in that precision can introduce (bf16: 8 significant bits; float32: 8 ulps)
BOUNDARY_SLACK = {torch.bfloat16: (NEAR_TIE_TOL, 2.0 ** -7), torch.float16: (NEAR_TIE_TOL, 2.0 ** -10),
                  torch.float32: (1e-6, 2.0 ** -20), torch.float64: (1e-9, 2.0 ** -40)}
BOUNDARY_MASS = 1e-4      # top-p mass tolerance


def boundary_slack(dtype: torch.dtype, value: float) -> float:
    """How far a logit of ``dtype`` may sit across a filter boundary by rounding alone (float32: ulp-level)."""
    absolute, relative = BOUNDARY_SLACK.get(dtype, BOUNDARY_SLACK[torch.bfloat16])
    return absolute + relative * abs(value)

TESTS = {
    # test name: (finding kind, statistic, tail)
    "argmax": ("greedy-at-temperature", "emitted tokens that are the argmax (T > 0)", "upper"),
    "accept-high": ("acceptance-rate", "accepted drafts, too many for the recorded distributions", "upper"),
    "accept-low": ("acceptance-rate", "accepted drafts, too few for the recorded distributions", "lower"),
    "recurrence": ("reused-noise", "non-argmax tokens that repeat an earlier token of the request", "upper"),
    "rank-overlap": ("reused-noise", "non-argmax tokens whose probability-rank interval overlaps the previous "
                                     "token's", "upper"),
    "loop": ("reused-noise", "tokens, the argmax included, that repeat an earlier token of the request", "upper"),
    PENALTY_TEST: ("penalty-not-applied", "tokens the penalties make less likely (for positive penalties: repeats), "
                                          "too many for the penalized distributions: fits penalties not applied "
                                          "(or applied weaker)", "upper"),
}
LOOP_TEST = "loop"  # fits reused noise locked on the argmax AND greedy decoding of a looping model: both named
SCOPES = ("verify", "plain")  # T > 0 request-steps with drafts (stochastic-verify) / without (random-sample)


# ----------------------------------------------------------------------------------------------- per token
def _support_reason(step: Step, r: int, raw_row: torch.Tensor, token: int,
                    dtype: torch.dtype | None = None) -> str | None:
    """Why ``token`` is certainly outside the support of request ``r`` even with rounding slack, or None
    when it sits within the tolerance of a filter boundary (then the engine's rounding may explain it).
    ``raw_row``: the row the filters cut (the recorded logits, after the pipeline's rules when the step has
    them); ``dtype``: the recorded logits' dtype (the slack follows it; default ``raw_row``'s)."""
    temperature = float(step.temperature[r])
    logits = raw_row.double() / temperature
    lt = float(logits[token])
    if lt == -math.inf:
        return "its logit is -inf"
    slack = boundary_slack(dtype or raw_row.dtype, lt)
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
        self.forced: list[tuple[int, int, str]] = []  # T > 0 tokens of rows with no finite logit
        self.seen: dict[int, set[int]] = {}
        self.prev_interval: dict[int, tuple[float, float]] = {}
        self.forbidden = Forbidden()
        self.pipe: StepPipeline | None = None
        self.methods = MethodAudit()  # block, FLy, probabilistic drafts (checks/audit_methods.py)

    def certain_finding(self, kind: str, step: int, rid: int, detail: str) -> None:
        self.certain.setdefault(kind, []).append((step, rid, detail))

    def step(self, index: int, step: Step, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        self.result.steps += 1
        # a NaN (allowed with --nan warn) counts as -inf, as the kernels treat it
        processed = torch.nan_to_num(apply_sampling_params(step), nan=-math.inf, neginf=-math.inf)
        log_p = torch.log_softmax(processed.double(), dim=-1)
        log_p = torch.nan_to_num(log_p, nan=-math.inf, neginf=-math.inf)
        self.pipe = pipe = StepPipeline(step)
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
            tree = audit_tree.emitted_rows(self, index, step, r, rid, toks, resample_may_repeat(step, r)) \
                if audit_tree.is_tree(step, r) else None  # draft trees: the rows of their path (audit_tree.py)
            if tree is None:
                self._structure(index, rid, toks, drafts[a:a + k], k, resample_may_repeat(step, r))
            toks, rows = (toks, [a + i for i in range(len(toks))]) if tree is None else (toks[:len(tree)], tree)
            temperature = float(step.temperature[r])
            if temperature == 0.0:
                self._greedy(index, rid, step, r, rows, toks, processed)
                continue
            scope = "verify" if k > 0 else "plain"
            own = self.methods.request(index, step, r, rid, toks, processed[a:a + k + 1], log_p[a:a + k + 1]) \
                or tree is not None  # a tree's acceptance is its siblings' law: no chain acceptance terms
            for i, t in enumerate(toks):
                j = rows[i]
                lp = log_p[j]
                probs = lp.exp()
                self.result.tokens_stochastic += 1
                if not bool(torch.isfinite(lp).any()):  # no finite logit: the token is forced, not sampled
                    self.forced.append((index, rid, f"token {i} ({t})"))
                    continue
                if pipe.forbids(j, t):
                    self.forbidden.add(self.certain, index, step, r, rid, i, t)
                elif lp[t] == -math.inf:
                    self._outside(index, rid, step, r, j, i, t)
                term = pipe.penalty_term(index, rid, r, i, scope, j, lp, t)
                if term is not None:
                    self.terms[PENALTY_TEST].append(term)
                row = processed[j]
                is_max = row == row.max()
                hit = bool(is_max[t])
                self.terms["argmax"].append(Term(index, rid, i, scope, float(probs[is_max].sum()), hit))
                d = drafts[j] if i < k and tree is None else -1
                if d >= 0 and not own:  # block / FLy: their own acceptance law (audit_methods.py)
                    alpha = self._accept_prob(step, probs, d, int(d_idx[j]), temperature)
                    if alpha == alpha:  # NaN: a draft-logits row with no distribution (all -inf, or overflowing)
                        self.terms["accept-high"].append(Term(index, rid, i, scope, alpha, t == d))
                        self.terms["accept-low"].append(Term(index, rid, i, scope, alpha, t == d))
                if i == c - 1 and i < k and d >= 0 and t != d and step.draft_logits is not None:
                    self._residual(index, rid, step, lp, int(d_idx[j]), temperature, t)
                self._noise(index, rid, i, scope, probs, is_max, t, hit)

    def _structure(self, index: int, rid: int, toks: list[int], drafts: list[int], k: int,
                   may_repeat: bool = False) -> None:
        for i, t in enumerate(toks[:-1]):
            if i >= k or t != drafts[i]:
                self.certain_finding("structure", index, rid, f"token {i} ({t}) is not the draft "
                                     f"({drafts[i] if i < k else 'none'}) yet later tokens follow")
                return
        last = len(toks) - 1
        if last < k and drafts[last] >= 0 and toks[last] == drafts[last] and not may_repeat:
            self.certain_finding("structure", index, rid, f"the walk stopped after accepting draft {last} "
                                 f"({toks[last]}) instead of verifying the next row")

    def _greedy(self, index: int, rid: int, step: Step, r: int, rows: list[int], toks: list[int],
                processed: torch.Tensor) -> None:
        """Greedy tokens against the argmax of their rows after the pipeline's rules (``processed``: a greedy row
        takes them and no filter)."""
        for i, t in enumerate(toks):
            self.result.tokens_greedy += 1
            if self.pipe is not None and self.pipe.forbids(rows[i], t):
                self.forbidden.add(self.certain, index, step, r, rid, i, t)
                continue
            row = processed[rows[i]] if step.has_pipeline else step.logits[rows[i]].float()
            row = torch.nan_to_num(row, nan=-math.inf, neginf=-math.inf)
            gap = float(row.max() - row[t])
            if gap > NEAR_TIE_TOL:
                self.certain_finding("greedy-not-argmax", index, rid, f"token {i} ({t}) is {gap:.4g} below the "
                                     f"argmax {int(row.argmax())}{self.forbidden.name_greedy(step, r, i, t)}")
            elif gap > 0:
                self.near_ties.append((index, rid))

    def _outside(self, index: int, rid: int, step: Step, r: int, j: int, i: int, t: int) -> None:
        reason = _support_reason(step, r, self.pipe.support_row(j), t, step.logits.dtype)
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
        if excess > boundary_slack(step.draft_logits.dtype, float(log_q[t])):
            self.certain_finding("outside-support", index, rid, f"resampled token {t} has q >= p (outside the "
                                 f"residual max(p - q, 0); log q - log p = {excess:.3g})")

    def _noise(self, index: int, rid: int, i: int, scope: str, probs: torch.Tensor, is_max: torch.Tensor,
               t: int, hit: bool) -> None:
        seen = self.seen.setdefault(rid, set())
        if seen:
            ids = torch.tensor(sorted(seen), dtype=torch.long)
            pi = float(probs[ids][~is_max[ids]].sum())
            self.terms["recurrence"].append(Term(index, rid, i, scope, pi, (t in seen) and not hit))
            # the same count with the argmax kept: position-blind noise can lock a request in a loop whose
            # token is also the argmax, which the count above (argmax left out) cannot see
            self.terms[LOOP_TEST].append(Term(index, rid, i, scope, float(probs[ids].sum()), t in seen))
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
    judge_methods(result, col.methods, finding_p, note_p)
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
        what = judge_forbidden(kind, items) if isinstance(kind, tuple) else \
            dict(kind=kind, message=f"impossible emitted token(s): {detail}{more}")
        result.findings.append(Finding(severity="finding", request_ids=rids, steps=steps, observed=float(len(items)),
                                       expected=0.0, log10_p=-math.inf, scope="all", **what))
    if col.boundary:
        items = col.boundary
        result.notes.append(Finding("outside-support", "note", sorted({r for _, r, _ in items}),
                                    sorted({s for s, _, _ in items}), float(len(items)), None, None,
                                    f"{len(items)} token(s) just outside a top-k/top-p/min-p boundary, within the "
                                    f"rounding tolerance (not a finding): {items[0][2]}"))
    if col.forced:
        items = col.forced
        result.notes.append(Finding("degenerate-row", "note", sorted({r for _, r, _ in items}),
                                    sorted({s for s, _, _ in items}), float(len(items)), None, None,
                                    f"{len(items)} T > 0 token(s) from rows with no finite logit after sampling "
                                    f"params: forced, not sampled, so not judged (first: step {items[0][0]} "
                                    f"request {items[0][1]} {items[0][2]})"))
    scopes_of: dict[int, set[str]] = {}
    for t in col.terms["argmax"]:
        scopes_of.setdefault(t.request_id, set()).add(t.scope)
    _one_diagnosis(result, scopes_of)
    if col.near_ties:
        result.notes.append(Finding("greedy-not-argmax", "note", sorted({r for _, r in col.near_ties}),
                                    sorted({s for s, _ in col.near_ties}), float(len(col.near_ties)), None, None,
                                    f"{len(col.near_ties)} greedy token(s) within {NEAR_TIE_TOL:g} of the argmax "
                                    f"(near-ties, tolerated)"))


def _one_diagnosis(result: AuditResult, scopes_of: dict[int, set[str]] | None = None) -> None:
    """One primary diagnosis per finding: noise reused across positions makes a request's draws move
    together, which also inflates (or deflates) its argmax count (a reused uniform below p(argmax) emits
    the argmax at every step). A greedy-at-temperature finding in the scope of a reused-noise finding
    (verify / plain / one request), on requests it names, or on requests whose T > 0 tokens all lie in such
    scopes (``scopes_of``: request id -> "verify" / "plain") is that symptom, not a second bug: it becomes
    a note saying so. (A greedy verifier emits only argmax tokens, which the reused-noise counts leave
    out, so it never triggers this.)"""
    _both_mechanisms(result)
    noise = [f for f in result.findings if f.kind == "reused-noise" and f.test != LOOP_TEST]
    noisy = {r for f in noise for r in f.request_ids}
    scopes = {f.scope for f in noise}
    if not noisy:
        return
    keep = []
    for f in result.findings:
        covered = all((scopes_of or {}).get(r, {"?"}) <= scopes for r in f.request_ids)
        if f.kind == "greedy-at-temperature" and (f.scope in scopes or set(f.request_ids) <= noisy or covered):
            f.severity = "note"
            f.message += "; explained by the reused-noise finding in the same scope (correlated draws), " \
                         "not a separate bug"
            result.notes.append(f)
        else:
            keep.append(f)
    result.findings = keep


def _both_mechanisms(result: AuditResult) -> None:
    """A ``loop`` finding (tokens, argmax included, repeating earlier ones) and a greedy-at-temperature
    finding on the same scope or requests fit two mechanisms: noise reused across positions that locks a
    request in a loop on the argmax, and greedy decoding of a model that loops. Both stay findings, each
    naming the other (``replay verify --impl`` on the engine's sampler tells them apart)."""
    loops = [f for f in result.findings if f.test == LOOP_TEST]
    greedy = [f for f in result.findings if f.kind == "greedy-at-temperature"]
    for lf in loops:
        for gf in greedy:
            if lf.scope == gf.scope or set(lf.request_ids) & set(gf.request_ids):
                if "also fits noise reused" not in gf.message:
                    gf.message += ("; the evidence also fits noise reused across positions (a position-blind "
                                   "sampler locked in a loop on the argmax: see the reused-noise loop finding)")
                lf.message += ("; the evidence also fits greedy decoding at T > 0 of a looping model (see the "
                               "greedy-at-temperature finding); `replay verify --impl` tells them apart")
                break


def _message(test: TestResult) -> str:
    return f"{test.statistic} ({test.tail} tail of the exact Poisson-binomial)"


def _add(result: AuditResult, f: Finding) -> None:
    (result.findings if f.severity == "finding" else result.notes).append(f)


def audit_recording(path: str, *, nan: str = "error", finding_p: float = FINDING_P, note_p: float = NOTE_P,
                    on_step: Callable[[], None] | None = None) -> AuditResult:
    """Audit every step of the recording at ``path``; raises InputError on bad input. A recording that holds
    no engine tokens (``Recording.has_engine_tokens``: derived by `replay synth`) is not testable: its steps
    are counted, not read (``AuditResult.not_testable`` says why)."""
    rec = Recording(path, nan=nan)
    result = AuditResult(path=str(path), synthetic=rec.synthetic, engine_tokens=rec.has_engine_tokens)
    col = _Collector(result)
    steps = [(0, i) for i in range(len(rec))]
    for _, record in (units_ahead([rec], steps) if result.engine_tokens else enumerate(steps)):
        if result.engine_tokens:  # steps read ahead by a thread, a few resident (recording/prefetch.py)
            col.step(record.index, record.step, record.emitted.tokens.long(), record.emitted.counts)
        else:
            result.steps += 1
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
