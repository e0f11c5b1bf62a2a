"""The exact law of what a correct speculative sampler emits for one request (docs/VERIFY.md, "Method").

Leviathan et al. 2023 / Chen et al. 2023, with vLLM Model Runner V2 semantics: for request r with k drafts
d_0..d_{k-1} and processed target rows p_0..p_k (after ``apply_sampling_params``, float64 here):

* position j < k is *reached* when drafts 0..j-1 were accepted (``count > j``);
* one-hot drafts (no draft logits): d_j is accepted with probability ``p_j(d_j)``, else a token is drawn
  from p_j with d_j removed; the token at a reached position j has law p_j;
* draft logits, drafts drawn per trial from q_j = softmax(draft_logits / T): acceptance
  ``sum_x min(p_j(x), q_j(x))`` and the token has law p_j;
* draft logits, recorded drafts held fixed: acceptance ``a_j = min(1, p_j(d_j) / q_j(d_j))`` and law
  ``a_j delta(d_j) + (1 - a_j) r_j`` with the residual ``r_j ∝ max(p_j - q_j, 0)``;
* a placeholder draft (-1) ends verification with a draw from p_j; the bonus position k has law p_k.

No trials and no tests here: :mod:`replay_harness.checks.verify` runs the impl, :mod:`.stats` tests.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


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
