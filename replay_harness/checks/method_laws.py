"""The exact law of the accepted length under each verification method, per trial (docs/VERIFY.md, "Verification
methods: lossless or lossy").

For one stochastic request with target probabilities p [k+1, V] (float64, after sampling params), draft
probabilities q [k, V] (float64, softmax(draft_logits / T); None: one-hot drafts) and the drafts of n trials
D [n, k] int64 (-1 placeholders), the accepted length L (the emitted count minus one) has, per trial, an exact law
[n, k+1] float64 that depends on the drafts alone, because every acceptance uniform is independent of the others
(MRV2 keys them by position; block by ``seed ^ (i << 32)`` and position):

* **standard**: draft i passes with a_i = min(1, p_i(d_i) / q_i(d_i)) (one-hot: p_i(d_i)); L stops at the first
  failure (or placeholder);
* **block** (Sun et al., arXiv 2403.10444, as oracle/methods.py runs it): h_i from the prefix ratio c_i and the
  next row's residual mass; L = the largest i + 1 with u_i <= h_i, so P(L = l) = h_{l-1} prod_{i >= l} (1 - h_i);
* **fly**: token-wise passes, a failure at i deferred when the row's entropy gate opens and i + W < k, resolved by
  the next W passes; the law by dynamic programming over (position, pending failure).

:func:`resample_row` is the law of the token drawn at the stop; :func:`fly_path_law` the law FLy gives a position
of the emitted path extended past the step by target draws (what losslessness compares with p_j).
"""
from __future__ import annotations

import numpy as np

from replay_harness.oracle.methods import Method, fly_entropy


def draft_probs(p: np.ndarray, q: np.ndarray | None, drafts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p_i(d_i), q_i(d_i), valid) per trial and draft: [n, k] float64, float64 (1 for one-hot drafts), bool."""
    n, k = drafts.shape
    valid = drafts >= 0
    idx = np.where(valid, drafts, 0)
    cols = np.arange(k)[None, :]
    pd = np.where(valid, p[cols, idx], 0.0)
    qd = np.ones_like(pd) if q is None else np.where(valid, q[cols, idx], 0.0)
    return pd, qd, valid


def token_accept(pd: np.ndarray, qd: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """[n, k] float64 a_i = min(1, p_i(d_i) / q_i(d_i)) (0 at placeholders; 1 when q is 0 and p is not)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(qd > 0, np.minimum(1.0, pd / qd), (pd > 0).astype(np.float64))
    return np.where(valid, a, 0.0)


def walk_law(a: np.ndarray, defer: np.ndarray, window: int) -> np.ndarray:
    """[n, k+1] float64 law of L for token-wise passes a [n, k] with FLy's deferral (``defer`` [n, k] bool: the
    failure at i may be deferred; ``window`` W; W = 0 or no deferral: the standard walk)."""
    n, k = a.shape
    law = np.zeros((n, k + 1))
    states: dict[int, np.ndarray] = {-1: np.ones(n)}  # pending failure (-1: none) -> mass still walking
    for i in range(k):
        new: dict[int, np.ndarray] = {}
        acc, rej = a[:, i], 1.0 - a[:, i]
        for pending, m in states.items():
            if pending >= 0:
                law[:, pending] += m * rej
                key = -1 if i - pending == window else pending
                new[key] = new.get(key, 0.0) + m * acc
            else:
                new[-1] = new.get(-1, 0.0) + m * acc
                can = defer[:, i] & (window >= 1) & (i + window < k)
                if can.any():
                    new[i] = new.get(i, 0.0) + m * rej * can
                law[:, i] += m * rej * ~can
        states = new
    law[:, k] += states.get(-1, 0.0)
    return law


def _residual_mass(p: np.ndarray, q: np.ndarray, s: np.ndarray) -> np.ndarray:
    """[n] sum_x max(s p(x) - q(x), 0) for scales s [n] (p, q: [V]), by the tokens sorted by q / p."""
    keep = p > 0
    ratio = q[keep] / p[keep]
    order = np.argsort(ratio)
    ratio, pk, qk = ratio[order], p[keep][order], q[keep][order]
    cp, cq = np.concatenate([[0.0], np.cumsum(pk)]), np.concatenate([[0.0], np.cumsum(qk)])
    m = np.searchsorted(ratio, s, side="left")
    return np.maximum(s * cp[m] - cq[m], 0.0)


def block_law(p: np.ndarray, q: np.ndarray | None, drafts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(law [n, k+1], c [n, k]) under block verification: c_i the clamped log prefix ratio (module docstring)."""
    n, k = drafts.shape
    pd, qd, valid = draft_probs(p, q, drafts)
    end = np.where(valid.all(axis=1), k, np.argmin(valid, axis=1))  # a placeholder ends the block
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = np.where(pd > 0, np.log(pd) - np.log(np.where(qd > 0, qd, 1.0)), -np.inf)
    delta = np.where(qd > 0, delta, np.where(pd > 0, np.inf, -np.inf))  # q(d) = 0 < p(d): the ratio clamps to 1
    c = np.zeros((n, k))
    run = np.zeros(n)
    for i in range(k):
        run = np.minimum(run + delta[:, i], 0.0)
        c[:, i] = run
    h = np.zeros((n, k))
    for i in range(k):
        prefix = np.exp(c[:, i])
        if i + 1 < k:
            if q is None:
                resid = prefix * (1.0 - pd[:, i + 1])
            else:
                resid = _residual_mass(p[i + 1], q[i + 1], prefix)
            denom = resid + 1.0 - prefix
            with np.errstate(divide="ignore", invalid="ignore"):
                inner = np.where(denom > 0, resid / np.where(denom > 0, denom, 1.0), 1.0)
        else:
            inner = prefix
        h[:, i] = np.where(i + 1 < end, inner, np.where(i + 1 == end, prefix, 0.0))
    tail = np.ones((n, k + 1))
    for i in range(k - 1, -1, -1):
        tail[:, i] = tail[:, i + 1] * (1.0 - h[:, i])
    law = np.zeros((n, k + 1))
    law[:, 0] = tail[:, 0]
    law[:, 1:] = h * tail[:, 1:]
    return law, c


def fly_defer(processed, pd: np.ndarray, qd: np.ndarray, valid: np.ndarray, method: Method) -> np.ndarray:
    """[n, k] bool: a failure at i may be deferred (both probabilities positive and the row's top-k entropy at
    least the threshold; ``processed`` [k+1, V] the float32 rows FLy reads)."""
    k = pd.shape[1]
    gate = np.array([fly_entropy(processed[i], method.top_k) >= method.threshold for i in range(k)], dtype=bool)
    return valid & (pd > 0) & (qd > 0) & gate[None, :]


def length_law(method: Method, processed, p: np.ndarray, q: np.ndarray | None,
               drafts: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(law of L [n, k+1], block's c [n, k] or None) for ``method`` on the trials' drafts [n, k]."""
    if method.name == "block":
        return block_law(p, q, drafts)
    pd, qd, valid = draft_probs(p, q, drafts)
    a = token_accept(pd, qd, valid)
    if method.name == "fly":
        return walk_law(a, fly_defer(processed, pd, qd, valid, method), method.window), None
    return walk_law(a, np.zeros_like(valid), 0), None


def resample_row(method: Method, p: np.ndarray, q: np.ndarray | None, j: int, d: int,
                 c_prev: float = 0.0) -> np.ndarray:
    """[V] float64 law of the token drawn when the walk stops at row j with draft ``d`` (-1: a placeholder, or
    j = k: the bonus row; both draw from p_j). block: max(e^{c_{j-1}} p_j - q_j, 0) normalised (``c_prev``);
    standard and FLy: max(p_j - q_j, 0); one-hot drafts: p_j without d. All zero when nothing is left."""
    if d < 0 or j >= p.shape[0] - 1:
        return p[j].copy()
    if q is None:
        out = p[j].copy()
        out[d] = 0.0
    else:
        scale = float(np.exp(c_prev)) if method.name == "block" else 1.0
        out = np.maximum(scale * p[j] - q[j], 0.0)
    total = out.sum()
    return out / total if total > 0 else out


def fly_path_law(p: np.ndarray, q: np.ndarray | None, law: np.ndarray, drafts: list[int], j: int) -> np.ndarray:
    """[V] float64 law of position j of the path extended past the step by target draws, for fixed ``drafts``
    and the accepted length's ``law`` [k+1] (one trial's row): P(L > j) at d_j, P(L = j) on the resample row,
    P(L < j) on p_j. A lossless method gives p_j exactly."""
    out = float(law[:j].sum()) * p[j]
    out = out + float(law[j]) * resample_row(Method("fly"), p, q, j, drafts[j] if j < len(drafts) else -1)
    if j < len(drafts) and drafts[j] >= 0:
        out[drafts[j]] += float(law[j + 1:].sum())
    return out
