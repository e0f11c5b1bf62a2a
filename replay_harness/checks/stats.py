"""The p-values of `replay verify`, each valid at the tiny per-test thresholds Bonferroni asks for.

"Valid" means P(p <= t) <= t for every t under the null hypothesis, so a Bonferroni family of m tests
at ``alpha / m`` each fails a correct impl with probability at most ``alpha``:

* :func:`binomial_p`: two-sided exact binomial (acceptance, twin and position tests, two-bin distribution
  tests);
* :func:`bin_tokens` + :func:`chi_square`: Pearson's X^2 over bins with expected count >= ``MIN_EXPECTED``.
  Its chi-squared tail is only an approximation, liberal by 2-6x at p ~ 1e-5 on real rows, so it is
  never the verdict near the threshold: :func:`monte_carlo_p` simulates X^2 under the exact multinomial
  law and gives ``(1 + exceedances) / (1 + simulations)``, valid for any number of simulations
  (:func:`replay_harness.checks.report.finalize` runs it, with the simulation count chosen from the
  threshold, for every test whose approximate p-value is within ``MC_CUTOFF`` x of it);
* :func:`clopper_pearson`: the exact confidence interval of a measured false-alarm count (tools/).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_EXPECTED = 5.0     # bins expected to hold fewer trials are merged (vLLM's rule)
MC_CUTOFF = 100.0      # Monte Carlo runs for tests whose chi-squared p-value is below MC_CUTOFF x threshold
MC_RESOLUTION = 4.0    # simulations = ceil(MC_RESOLUTION / threshold): a test with 0-2 exceedances fails
MC_CHUNK = 1 << 15     # simulations drawn per numpy call (bounds memory: chunk x bins int64)


@dataclass
class ChiSquare:
    """Pearson's X^2 of one position. probs: [bins] float64 bin probabilities under the law (sum 1);
    n: trials; p_value: the chi-squared approximation, or the exact binomial one when bins == 2."""

    statistic: float
    df: int
    p_value: float
    bins: int
    n: int
    probs: np.ndarray
    exact: bool  # True: p_value is exact (two bins); False: approximate until :func:`monte_carlo_p`


def bin_tokens(observed: np.ndarray, law: np.ndarray,
               min_expected: float = MIN_EXPECTED) -> tuple[np.ndarray, np.ndarray] | None:
    """Counts and probabilities of the bins of ``observed`` ([n] int token ids) under ``law`` ([V] float64).

    Tokens whose expected count n*law < min_expected are merged into one "other" bin; when that bin's own
    expectation is below min_expected it is folded into the smallest kept bin. Tokens of law 0 are left
    out (the ``support`` check catches them). Returns (counts [B] float64, probs [B] float64), or None when
    fewer than two bins remain. The binning depends on n and the law only, never on the counts.
    """
    n = observed.size
    counts = np.bincount(observed, minlength=law.size)[:law.size].astype(np.float64)
    exp = n * law
    big = exp >= min_expected
    obs_bins, prob_bins = list(counts[big]), list(law[big])
    rest = (~big) & (law > 0)
    other_e, other_o = float(exp[rest].sum()), float(counts[rest].sum())
    if other_e > 0:
        if other_e >= min_expected or not prob_bins:
            obs_bins.append(other_o)
            prob_bins.append(float(law[rest].sum()))
        else:
            i = int(np.argmin(prob_bins))
            obs_bins[i] += other_o
            prob_bins[i] += float(law[rest].sum())
    if len(prob_bins) < 2:
        return None
    probs = np.array(prob_bins)
    return np.array(obs_bins), probs / probs.sum()


def pearson(counts: np.ndarray, probs: np.ndarray, n: int) -> np.ndarray:
    """X^2 of counts [..., B] against n * probs [B] (vectorised over leading axes)."""
    e = n * probs
    return (((counts - e) ** 2) / e).sum(axis=-1)


def chi_square(observed: np.ndarray, law: np.ndarray, min_expected: float = MIN_EXPECTED) -> ChiSquare | None:
    """Goodness of fit of ``observed`` token ids ([n] int) against ``law`` ([V] float64), bins as
    :func:`bin_tokens`. With exactly two bins the p-value is the exact two-sided binomial one (same
    hypothesis); otherwise ``scipy.stats.chi2.sf`` (approximate; see :func:`monte_carlo_p`)."""
    from scipy.stats import chi2

    binned = bin_tokens(observed, law, min_expected)
    if binned is None:
        return None
    o, probs = binned
    n = observed.size
    stat = float(pearson(o, probs, n))
    df = len(o) - 1
    if df == 1:
        return ChiSquare(stat, 1, binomial_p(int(o[0]), n, float(probs[0])), 2, n, probs, exact=True)
    return ChiSquare(stat, df, float(chi2.sf(stat, df)), len(o), n, probs, exact=False)


def monte_carlo_p(statistic: float, n: int, probs: np.ndarray, rng: np.random.Generator, simulations: int,
                  stop_at: float | None = None) -> tuple[float, int]:
    """Monte Carlo p-value of Pearson's X^2 >= ``statistic`` for n multinomial trials over ``probs`` [B].

    Returns (p, simulations run), p = (1 + exceedances) / (1 + simulations): valid (P(p <= t) <= t) for
    any number of simulations. ``stop_at``: stop early once p can no longer fall below it (the verdict
    at that threshold is then the same as the full run's; p is the estimate so far).
    """
    tol = 1e-9 * max(1.0, abs(statistic))  # float noise in X^2 must not turn a tie into a non-exceedance
    hits = done = 0
    while done < simulations:
        m = min(MC_CHUNK, simulations - done)
        hits += int((pearson(rng.multinomial(n, probs, size=m), probs, n) >= statistic - tol).sum())
        done += m
        if stop_at is not None and (1 + hits) / (1 + simulations) >= stop_at:
            break
    return (1 + hits) / (1 + done), done


def simulations_for(threshold: float) -> int:
    """Monte Carlo simulations for a test judged at ``threshold``: enough that 0-2 exceedances fail it."""
    return int(math.ceil(MC_RESOLUTION / threshold))


def binomial_p(successes: int, n: int, rate: float) -> float:
    """Two-sided exact binomial p-value of ``successes`` in ``n`` trials at ``rate``."""
    from scipy.stats import binomtest

    rate = min(max(rate, 0.0), 1.0)
    return float(binomtest(int(successes), int(n), rate).pvalue)


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided confidence interval of a rate from k events in n trials."""
    from scipy.stats import beta

    a = 1.0 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi
