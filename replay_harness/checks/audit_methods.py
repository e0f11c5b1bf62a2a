"""`replay audit` for the verification methods beyond the token-wise rule and for probabilistic drafts (docs/AUDIT.md,
"Verification methods and probabilistic drafts"). Called from :mod:`replay_harness.checks.audit`.

Per temperature > 0 request-step with drafts:

* block and FLy (``verify_method``): the accepted drafts against the method's own exact law given the recorded drafts
  (:mod:`replay_harness.checks.method_laws`): at each reached i, a Bernoulli term of probability
  P(L >= i) / P(L >= i - 1), pooled into the exact Poisson-binomial tails (``method-accept-high`` / ``-low``; the
  token-wise terms of audit's ``acceptance-rate`` leave these requests out). FLy is lossy by design: a
  ``lossy-method`` note gives the total variation between the emitted law and the target's (exact, from FLy's rule
  on the recorded drafts), never a finding;
* probabilistic drafts (``draft_sampling``): under the ``mrv2`` contracts the drafts are re-derived
  (:func:`replay_harness.oracle.drafts.draft_noise_diagnosis`). Drafts drawn with the verifier's own noise key
  (``unsalted``) are a certain ``shared-draft-noise`` finding: a rejected draft's recovered token reuses its noise
  (local-inference-lab/vllm#205). Drafts that are the contract drafter's get the **noise-reuse** test: at every
  rejection, the recovered token against the residual's Gumbel-max draw under the rejected draft's own noise
  (seed, position + 2**30); independent noise matches with probability r(prediction) exactly (upper tail,
  ``draft-noise-reuse``). Drafts from another RNG (an engine with its own noise: nothing to re-derive) get the
  **statistical route**: a recovered token drawn with the rejected draft's noise avoids the tokens the draft
  distribution q favours (that noise is conditioned on the draft winning q's race, which lowers it most where q
  is high), so the count of recovered tokens among the residual's highest-q tokens holding half its mass is tested
  against that mass (lower tail, ``draft-noise-residual``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from replay_harness.checks.findings import AuditResult, Finding, Term, TestResult
from replay_harness.checks.method_laws import fly_path_law, length_law, resample_row
from replay_harness.checks.tails import poisson_binomial_log_tail
from replay_harness.oracle.drafts import UNSALTED, draft_noise_diagnosis, probabilistic
from replay_harness.oracle.methods import method_of
from replay_harness.oracle.rng import DRAFT_NOISE_SALT
from replay_harness.oracle.walk import gumbel_draw
from replay_harness.recording.schema import RNG_CONTRACTS

OWN_LAW = ("block", "fly")
TESTS = {
    # test name: (finding kind, statistic, tail)
    "method-accept-high": ("acceptance-rate", "accepted drafts of block / FLy requests, too many for the method's "
                                              "rule on the recorded drafts", "upper"),
    "method-accept-low": ("acceptance-rate", "accepted drafts of block / FLy requests, too few for the method's "
                                             "rule on the recorded drafts", "lower"),
    "draft-noise-reuse": ("shared-draft-noise", "recovered tokens equal to the residual's draw under the rejected "
                                                "draft's own noise (seed, position + 2^30): fits a verifier that "
                                                "reuses the drafter's noise (local-inference-lab/vllm#205)", "upper"),
    "draft-noise-residual": ("shared-draft-noise", "recovered tokens among the residual's highest-q tokens (half its "
                                                   "mass), too few: fits a recovered token drawn with the rejected "
                                                   "draft's noise (drafts of another RNG)", "lower"),
}


@dataclass
class MethodAudit:
    """What the audit of the methods gathers across a recording's steps."""

    terms: dict[str, list[Term]] = field(default_factory=lambda: {name: [] for name in TESTS})
    unsalted: list[tuple[int, int]] = field(default_factory=list)      # (step, request id)
    other_rng: list[tuple[int, int, str]] = field(default_factory=list)
    lossy: list[tuple[int, int, float]] = field(default_factory=list)  # (step, request id, exact total variation)

    def request(self, index: int, step, r: int, rid: int, toks: list[int], rows: torch.Tensor,
                log_p: torch.Tensor) -> bool:
        """Gather request r's terms (T > 0, with drafts); True when its acceptance is judged here (block, FLy),
        not by audit's token-wise terms. rows [k+1, V] float32 processed, log_p [k+1, V] float64 log-probabilities."""
        a, b = int(step.cu_num_logits[r]), int(step.cu_num_logits[r + 1])
        k = b - a - 1
        if float(step.temperature[r]) == 0.0 or k == 0 or not bool(torch.isfinite(log_p).any(dim=1).all()):
            return False
        method = method_of(step, r)
        drafts = step.draft_token_ids[a:b - 1].tolist()
        p = log_p.exp().numpy()
        q = None
        if step.draft_logits is not None:
            dl = step.draft_logits[step.draft_row_index()[a:b - 1]].double() / float(step.temperature[r])
            q = torch.softmax(dl, dim=-1).numpy()
            if not np.isfinite(q).all():
                return False
        L = len(toks) - 1
        own = method.name in OWN_LAW
        c_row = None
        if own:
            dist, c = length_law(method, rows, p, q, np.array([drafts], dtype=np.int64))
            c_row = None if c is None else c[0]
            reach = 1.0
            for i in range(1, min(L + 1, k) + 1):
                at_least = float(dist[0, i:].sum())
                if reach <= 0:
                    break
                prob = min(1.0, at_least / reach)
                for name in ("method-accept-high", "method-accept-low"):
                    self.terms[name].append(Term(index, rid, i - 1, "verify", prob, L >= i))
                reach = at_least
            if method.name == "fly":
                tv = max(0.5 * float(np.abs(fly_path_law(p, q, dist[0], drafts, j) - p[j]).sum()) for j in range(k))
                self.lossy.append((index, rid, tv))
        if probabilistic(step, r) and q is not None and L < k and drafts[L] >= 0:
            self._noise(index, step, r, rid, method, toks[L], L, p, q, drafts[L], c_row)
        return own

    def _noise(self, index: int, step, r: int, rid: int, method, token: int, j: int, p: np.ndarray, q: np.ndarray,
               d: int, c_row) -> None:
        """The recovered token at a rejection at row j (module docstring)."""
        row = resample_row(method, p, q, j, d, float(c_row[j - 1]) if c_row is not None and j > 0 else 0.0)
        if row.sum() <= 0:
            return
        diagnosis = draft_noise_diagnosis(step, r) if step.rng_contract in RNG_CONTRACTS else "no mrv2 contract"
        if diagnosis == UNSALTED:
            self.unsalted.append((index, rid))
            return
        if diagnosis is None:  # the contract drafter's drafts: predict the recovered token under the draft's noise
            with np.errstate(divide="ignore"):
                scores = torch.from_numpy(np.log(row))
            pos = int(step.positions[int(step.cu_num_logits[r]) + j]) + DRAFT_NOISE_SALT
            guess = gumbel_draw(scores, int(step.seed[r]), pos, fp64=step.rng_contract == "mrv2-fp64")
            self.terms["draft-noise-reuse"].append(Term(index, rid, j, "verify", float(row[guess]), token == guess))
            return
        self.other_rng.append((index, rid, diagnosis))
        support = np.nonzero(row > 0)[0]
        order = support[np.argsort(-q[j][support], kind="stable")]
        cum = np.cumsum(row[order])
        favoured = order[:max(1, int(np.searchsorted(cum, 0.5, side="right")))]
        self.terms["draft-noise-residual"].append(Term(index, rid, j, "verify", float(row[favoured].sum()),
                                                       bool(np.isin(token, favoured))))


def judge(result: AuditResult, audit: MethodAudit, finding_p: float, note_p: float) -> None:
    """Tests, findings and notes of the methods' audit into ``result`` (pooled over the recording)."""
    lf, ln = math.log10(finding_p), math.log10(note_p)
    for name, terms in audit.terms.items():
        if not terms:
            continue
        kind, statistic, tail = TESTS[name]
        observed = sum(t.hit for t in terms)
        log_p = poisson_binomial_log_tail([t.prob for t in terms], observed, upper=tail == "upper") / math.log(10)
        test = TestResult(test=name, kind=kind, scope="verify", statistic=statistic, tail=tail, terms=len(terms),
                          observed=observed, expected=float(sum(t.prob for t in terms)), log10_p=log_p)
        result.tests.append(test)
        if log_p >= ln:
            continue
        rids = sorted({t.request_id for t in terms})
        steps = sorted({t.step for t in terms if t.hit != (tail == "lower")})
        finding = Finding(kind, "finding" if log_p < lf else "note", rids, steps, float(observed), test.expected, log_p,
                          f"{statistic} ({tail} tail of the exact Poisson-binomial)", scope="verify",
                          terms=len(terms), test=name)
        (result.findings if finding.severity == "finding" else result.notes).append(finding)
    if audit.unsalted:
        rids, steps = sorted({r for _, r in audit.unsalted}), sorted({s for s, _ in audit.unsalted})
        result.findings.append(Finding(
            "shared-draft-noise", "finding", rids, steps, float(len(audit.unsalted)), 0.0, -math.inf,
            f"{len(audit.unsalted)} rejection(s) of probabilistic drafts drawn with the verifier's own noise key (no "
            f"2^30 salt: oracle/drafts.py re-derives them): the recovered token reuses the rejected draft's noise "
            f"(local-inference-lab/vllm#205); first: step {steps[0]} request {rids[0]}", scope="all"))
    if audit.other_rng:
        s, rid, why = audit.other_rng[0]
        result.notes.append(Finding(
            "draft-sampling", "note", sorted({r for _, r, _ in audit.other_rng}),
            sorted({s for s, _, _ in audit.other_rng}),
            float(len(audit.other_rng)), None, None,
            f"{len(audit.other_rng)} rejection(s) of probabilistic drafts that are not the contract drafter's ({why}; "
            f"first: step {s} request {rid}): shared noise judged by the statistical route (draft-noise-residual)"))
    if audit.lossy:
        worst = max(audit.lossy, key=lambda x: x[2])
        mean = float(np.mean([tv for _, _, tv in audit.lossy]))
        result.notes.append(Finding(
            "lossy-method", "note", sorted({r for _, r, _ in audit.lossy}), sorted({s for s, _, _ in audit.lossy}),
            mean, None, None,
            f"{len(audit.lossy)} request-step(s) verified with fly, lossy by design (not a finding): the emitted "
            f"law's total variation from the target's, exact from FLy's rule on the recorded drafts, is {mean:.4f} on "
            f"average and {worst[2]:.4f} at most (step {worst[0]} request {worst[1]})"))


def resample_may_repeat(step, r: int) -> bool:
    """Whether request r's walk may stop on a token equal to its draft (block with draft logits: the resample row
    max(e^c p - q, 0) can keep the rejected draft), so audit's structure check must not call that impossible."""
    return method_of(step, r).name == "block" and step.draft_logits is not None

