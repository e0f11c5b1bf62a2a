"""Exact Poisson-binomial tails (log space) and p-value text, for `replay audit` (docs/AUDIT.md)."""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np


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


P_FLOOR = 1e-300  # float p-values below it (0 after underflow) print as "p < 1e-300", never "p = 0"


def p_text(p: float) -> str:
    """'p = 1.19e-05', or 'p < 1e-300' for a float p-value at or below the floor (an underflow is not 0)."""
    return f"p < {P_FLOOR:g}" if p <= P_FLOOR else f"p = {p:.3g}"
