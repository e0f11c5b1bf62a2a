"""`replay verify` for the verification methods beyond the token-wise rule: block, FLy and probabilistic drafts
(docs/VERIFY.md, "Verification methods: lossless or lossy"). Called from
:func:`replay_harness.checks.verify.verify_step`.

Per stochastic request whose method is block or FLy (``step.verify_method``), with the trials' drafts D [n, k]:

* ``acceptance`` (per i = 1..k): how many trials accepted at least i drafts, against the method's own exact law of
  the accepted length (:mod:`replay_harness.checks.method_laws`): exact binomial with fixed drafts, else the exact
  two-sided Poisson-binomial (each trial has its own probability);
* lossless methods (block): the **path** tests. Each trial's emitted path is extended past its stop by draws from
  the target's rows (the verifier's own generator); a lossless method then emits, at every position j, the law
  p_j, and along the path the product law, whatever the drafts: ``distribution`` tests of each position against
  p_j and of each pair (j, j + 1) against p_j x p_{j+1} (binned; Pearson's X^2, Monte Carlo near the threshold);
* FLy (lossy by design): the token drawn at the stop against FLy's resample row (``distribution``), and one
  ``lossy`` check (exact, never failing) that carries the divergence: the total variation between the extended
  path's law and the target's at the position where it is largest, exact from FLy's rule for fixed drafts and
  measured over the trials, with what sampling alone would give;
* fixed drafts: twin and position tests (``independence``, ``position``) at the method's coincidence probability.

Probabilistic drafts (``draft_sampling`` = probabilistic, any method): every trial's drafts are the contract
drafter's draws for that trial's seed (oracle/drafts.py: noise of (seed, position + 2**30)), and the **noise-reuse**
test (kind ``independence``, per position) counts the rejections whose recovered token equals the residual's
Gumbel-max draw under the rejected draft's own noise. A verifier whose noise is independent of the drafter's
makes that match with probability r(prediction) exactly (the residual's mass there), so the count is an exact
Poisson-binomial; an engine whose drafter and verifier share the noise matches every time.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from replay_harness.checks.method_laws import fly_path_law, length_law, resample_row
from replay_harness.checks.report import Check
from replay_harness.checks.stats import MIN_EXPECTED, binomial_p, chi_square
from replay_harness.checks.tails import poisson_binomial_log_tail
from replay_harness.checks.trials import same_outcome
from replay_harness.oracle.drafts import derive_drafts, probabilistic
from replay_harness.oracle.methods import Method, method_of, verify_with
from replay_harness.oracle.rng import DRAFT_NOISE_SALT, gumbel_rows
from replay_harness.oracle.walk import gumbel_draw

OWN_LAW = ("block", "fly")  # methods tested against their own law instead of the token-wise one
LOSSY = ("fly",)            # methods whose emitted law differs from the target's by design
NOISE_SIMULATIONS = 50      # draws of n tokens from p_j: the total variation sampling alone gives
FULL_ROWS = 1 << 20         # trials x V at most for whole-row noise (else each draw's pruned candidates alone)
TOKENWISE_BLOCK = ("fits block verification implemented token-wise (each draft tested alone against min(1, p/q) "
                   "inside the block walk: vllm-project/vllm-ascend#7807)")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x < 0.9995 or x == 1 else f"{100 * x:.2f}%"


def own_law(step, r: int) -> bool:
    """Whether request r is verified against its method's own law (block, FLy) instead of the token-wise one."""
    return method_of(step, r).name in OWN_LAW


def greedy_walk(step, r: int, rows: torch.Tensor, drafts: list[int]) -> list[int]:
    """The tokens a temperature-0 request must emit under its method (FLy defers at T = 0 too); rows [k+1, V]."""
    a = int(step.cu_num_logits[r])
    return verify_with(method_of(step, r), rows, drafts, step.positions[a:a + len(drafts) + 1].tolist(), 0.0,
                       int(step.seed[r]), None)


def trial_drafts(step, r: int, law, rng: np.random.Generator, groups: list[tuple[torch.Tensor, int]]) -> np.ndarray:
    """[n, k] int64 drafts of the trials of ``groups`` ([(seeds [m] int64, position shift)], n = sum m): the contract
    drafter's draws for each trial's seed at its shifted positions (probabilistic requests), else
    ``law.draw_drafts(rng, n)`` (placeholders kept)."""
    n = sum(int(s.numel()) for s, _ in groups)
    if not probabilistic(step, r):
        return law.draw_drafts(rng, n)
    if step.rng_contract == "mrv2-fp64" or n * step.vocab_size > FULL_ROWS:
        rows = [derive_drafts(step, r, salt=DRAFT_NOISE_SALT + shift, seed=int(s)) for seeds, shift in groups
                for s in seeds.tolist()]
        out = np.array(rows, dtype=np.int64).reshape(n, len(law.drafts))
    else:  # the same draws, every trial at once (oracle/rng.py: gumbel_rows; first index on ties)
        a = int(step.cu_num_logits[r])
        seeds = torch.cat([s.to(torch.int64) for s, _ in groups])
        shifts = torch.cat([torch.full((int(s.numel()),), sh, dtype=torch.int64) for s, sh in groups])
        d_idx = step.draft_row_index()
        out = np.zeros((n, len(law.drafts)), dtype=np.int64)
        for j in range(len(law.drafts)):
            scores = step.draft_logits[int(d_idx[a + j])].float() / torch.tensor(float(step.temperature[r]))
            at = shifts + int(step.positions[a + j]) + DRAFT_NOISE_SALT
            out[:, j] = _gumbel_argmax(scores.expand(n, -1), seeds, at)
    return np.where(np.array(law.drafts)[None, :] >= 0, out, -1)


def _gumbel_argmax(scores: torch.Tensor, seeds: torch.Tensor, pos: torch.Tensor) -> np.ndarray:
    """[m] int64: row i's Gumbel-max draw of ``scores`` [m, V] with the mrv2 noise of (seeds[i], pos[i]), as
    oracle/walk.py's ``gumbel_draw`` gives it (float32 sums, NaN read as -inf, first index on ties)."""
    x = torch.nan_to_num(scores.float(), nan=-math.inf, posinf=math.inf)
    return torch.argmax(x + gumbel_rows(seeds, pos, x.shape[1]), dim=1).numpy().astype(np.int64)


def check_request(unit, where: dict, step, r: int, rows: torch.Tensor, law, tokens: np.ndarray, counts: np.ndarray,
                  drafts: np.ndarray, groups: list[tuple[torch.Tensor, int]], rng: np.random.Generator, name: str,
                  pairs: tuple | None) -> bool:
    """Append request r's method checks to ``unit``; True when they replace the token-wise tests (block, FLy).

    rows [k+1, V] float32 processed target rows; law: the request's RequestLaw (p, q, recorded drafts); tokens
    [n, k+1], counts [n], drafts [n, k]: the trials (first group, then the second); groups: their seeds and
    position shifts; pairs: (first, other, again) Outcomes for the twin / position tests, or None."""
    method = method_of(step, r)
    sampled_prob = probabilistic(step, r) and law.sampled
    if method.name not in OWN_LAW or not law.drafts:  # a plain sample (k = 0) is a draw from p under any method
        if sampled_prob:
            _noise_reuse(unit, where, step, r, method, law, tokens, counts, drafts, groups, None, name)
        return False
    dist, c = length_law(method, rows, law.p, law.q, drafts)
    accepted = counts - 1
    _acceptance(unit, where, method, dist, accepted, name, fixed=not law.sampled)
    ext = _extend(tokens, counts, law.p, np.random.default_rng(rng.integers(0, 2 ** 63)))
    if method.name in LOSSY:
        _resamples(unit, where, step, r, method, law, tokens, accepted, name)
        _lossy(unit, where, method, law, dist, ext, np.random.default_rng(rng.integers(0, 2 ** 63)))
    else:
        _path(unit, where, method, law.p, ext, name)
    if pairs is not None and law.sampled:
        unit.notes.append(f"independence, position: not run for {method.name} with drafts drawn per trial (the "
                          f"coincidence probability needs fixed drafts; --recorded-drafts runs them)")
    elif pairs is not None:
        first, other, again = pairs
        collision = _collision(method, law, dist[0], c[0] if c is not None else None)
        _pair(unit, where, "independence", first, other, collision,
              f"{name} ({method.name}): twin runs (same seed, other batch rows, positions shifted by "
              f"{len(law.drafts) + 1})")
        if again is not None:
            _pair(unit, where, "position", first, again, collision,
                  f"{name} ({method.name}): reruns in the same batch row with the same seed at positions shifted by "
                  f"{2 * (len(law.drafts) + 1)}")
    if sampled_prob:
        _noise_reuse(unit, where, step, r, method, law, tokens, counts, drafts, groups, c, name)
    return True


def _two_sided(probs: np.ndarray, hits: int) -> float:
    """Two-sided exact p-value of ``hits`` successes of independent Bernoulli(probs): 2 x the smaller tail."""
    if np.all(probs == probs[0]):
        return binomial_p(hits, probs.size, float(probs[0]))
    up = poisson_binomial_log_tail(probs, hits, upper=True)
    lo = poisson_binomial_log_tail(probs, hits, upper=False)
    return min(1.0, 2.0 * math.exp(min(up, lo)))


def _acceptance(unit, where: dict, method: Method, dist: np.ndarray, accepted: np.ndarray, name: str,
                fixed: bool) -> None:
    n, k1 = dist.shape
    for i in range(1, k1):
        probs = np.clip(dist[:, i:].sum(axis=1), 0.0, 1.0)
        if np.all((probs < 1e-12) | (probs > 1 - 1e-12)):
            unit.notes.append(f"acceptance of {i} draft(s): certain under {method.name}'s rule, nothing to test")
            continue
        hits = int((accepted >= i).sum())
        e = float(probs.mean())
        too_many = hits / n > e
        if method.name == "block":
            why = (f"too many accepted: {TOKENWISE_BLOCK}, or an acceptance uniform fixed low" if too_many else
                   "too few accepted: fits the token-wise walk (stop at the first failure) in place of the block rule, "
                   "or a wrong prefix ratio")
        else:
            why = ("too many accepted: fits a deferral looser than FLy's (window, entropy gate)" if too_many else
                   "too few accepted: fits FLy's deferral not applied (the token-wise walk)")
        floor = float(np.exp(np.log(np.maximum(probs, 1e-300)).sum()))
        unit.checks.append(Check(
            kind="acceptance", position=i - 1, n=n, statistic=float(hits), p_value=_two_sided(probs, hits),
            expected=e, observed=hits / n, method="binomial", floor_p=floor, floor_rate=e,
            message=f"{name} ({method.name}) accepted at least {i} draft(s) in {_pct(hits / n)} of {n} trials; "
                    f"{method.name}'s rule gives {_pct(e)}{'' if fixed else ' (mean over the trials drafts)'}: {why}",
            **where))


def _draw(p: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    cdf = np.cumsum(p)
    return np.minimum(np.searchsorted(cdf, rng.random(m) * cdf[-1], side="right"), p.size - 1)


def _extend(tokens: np.ndarray, counts: np.ndarray, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[n, k+1] the emitted paths, each extended past its count by draws from the target rows p_j."""
    ext = tokens.copy()
    for j in range(p.shape[0]):
        short = counts <= j
        if short.any():
            ext[short, j] = _draw(p[j], int(short.sum()), rng)
    return ext


def _floor(cs, n: int) -> float:
    from scipy.stats import chi2

    mode = float(cs.probs.max())
    return binomial_p(n, n, mode) if cs.exact else max(mode ** n, float(chi2.sf(n * (1 - mode) / mode, cs.df)))


def _dist_check(unit, where: dict, j: int, x: np.ndarray, law: np.ndarray, what: str, want: str,
                why: str = "", item: str = "token") -> None:
    """A ``distribution`` check of tokens ``x`` [m] against ``law`` [V] (support first: a token of law 0 fails);
    ``why``: the mechanisms a departure fits, appended to the message; ``item``: what a value of ``x`` is."""
    m = x.size
    bad = law[x] <= 0
    if bad.any():
        tok = int(x[np.argmax(bad)])
        unit.checks.append(Check(kind="support", position=j, n=m, passed=False, expected=0.0,
                                 observed=float(bad.mean()),
                                 message=f"{what}: {item} {tok} (probability 0 under {want}) in {int(bad.sum())} of "
                                         f"{m}{why}",
                                 **where))
        return
    cs = chi_square(x, law)
    if cs is None:
        unit.notes.append(f"{what}: {m} tokens, too few for a chi-squared test")
        return
    obs = np.bincount(x, minlength=law.size)[:law.size] / m
    tok = int(np.argmax(np.abs(obs - law)))
    unit.checks.append(Check(
        kind="distribution", position=j, n=m, statistic=cs.statistic, df=cs.df, p_value=cs.p_value,
        expected=float(law[tok]), observed=float(obs[tok]), bins=cs.probs, floor_p=_floor(cs, m),
        floor_rate=float(cs.probs.max()), method="binomial" if cs.exact else "chi-squared",
        message=f"{what}: {item} {tok} in {_pct(obs[tok])} of {m}; {want} gives {_pct(law[tok])}{why}", **where))


def _bins(p: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(bin of every token [V] int64, bin probabilities [B]): tokens expected >= MIN_EXPECTED times alone, the
    rest in one last bin."""
    big = n * p >= MIN_EXPECTED
    code = np.full(p.size, int(big.sum()), dtype=np.int64)
    code[big] = np.arange(int(big.sum()))
    probs = np.append(p[big], p[~big].sum())
    return code, probs


def _path(unit, where: dict, method: Method, p: np.ndarray, ext: np.ndarray, name: str) -> None:
    """Lossless: every position of the extended path has law p_j, every pair (j, j+1) the product law."""
    n, k1 = ext.shape
    why = (f"; a departure means {method.name} as run here is not lossless" +
           (f": {TOKENWISE_BLOCK}" if method.name == "block" else ""))
    for j in range(k1):
        _dist_check(unit, where, j, ext[:, j], p[j],
                    f"{name} ({method.name}): the emitted path (extended past the step by target draws) at "
                    f"position {j}",
                    "the target (lossless)", why)
    for j in range(k1 - 1):
        (ca, pa), (cb, pb) = _bins(p[j], n), _bins(p[j + 1], n)
        codes = ca[ext[:, j]] * pb.size + cb[ext[:, j + 1]]
        joint = np.outer(pa, pb).ravel()
        _dist_check(unit, where, j, codes, joint,
                    f"{name} ({method.name}): the emitted path's positions {j} and {j + 1} jointly (binned cells)",
                    "the target's product law (lossless along the path)", why, "cell")


def _resamples(unit, where: dict, step, r: int, method: Method, law, tokens: np.ndarray, accepted: np.ndarray,
               name: str) -> None:
    """The token drawn where the walk stopped, against the method's resample row (fixed per position)."""
    k = len(law.drafts)
    for j in range(k + 1):
        stop = accepted == j
        if not stop.any():
            continue
        row = resample_row(method, law.p, law.q, j, law.drafts[j] if j < k else -1)
        _dist_check(unit, where, j, tokens[stop, j], row,
                    f"{name} ({method.name}): the token drawn where the walk stopped (position {j})",
                    f"{method.name}'s resample row")


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a - b).sum())


def _lossy(unit, where: dict, method: Method, law, dist: np.ndarray, ext: np.ndarray, rng: np.random.Generator) -> None:
    """One ``lossy`` check: the divergence of the extended path's law from the target's (module docstring)."""
    n, k1 = ext.shape
    rows = []
    for j in range(k1):
        freq = np.bincount(ext[:, j], minlength=law.p.shape[1])[:law.p.shape[1]] / n
        exact = None if law.sampled else _tv(fly_path_law(law.p, law.q, dist[0], law.drafts, j), law.p[j])
        noise = float(np.mean([_tv(np.bincount(_draw(law.p[j], n, rng), minlength=freq.size) / n, law.p[j])
                               for _ in range(NOISE_SIMULATIONS)]))
        cs = chi_square(ext[:, j], law.p[j])
        # fixed drafts: the largest exact divergence; drawn drafts: the smallest p-value (most evident divergence)
        rank = exact if exact is not None else (-1.0 if cs is None else -math.log(max(cs.p_value, 1e-300)))
        rows.append((rank, j, exact, _tv(freq, law.p[j]), noise, None if cs is None else cs.p_value))
    _, j, exact, measured, noise, p = max(rows, key=lambda row: row[0])
    if exact is not None and exact < 1e-9:
        msg = (f"{method.name} is lossy by design, but on this request its deferral cannot change the outcome: the "
               f"emitted path's law equals the target's (exact total variation 0 from {method.name}'s rule)")
        unit.checks.append(Check(kind="lossy", position=j, n=n, passed=True, statistic=measured, expected=0.0,
                                 observed=measured, message=msg, **where))
        return
    ex = f"exact {exact:.4f} from {method.name}'s rule on these drafts, " if exact is not None else ""
    pt = "" if p is None else f"; chi-squared p = {p:.3g} that the path follows the target there"
    msg = (f"{method.name} is lossy by design: at position {j} of the emitted path (extended past the step by target "
           f"draws) its law is {ex}measured {measured:.4f} over {n} trials (sampling alone gives about {noise:.4f}) "
           f"in total variation from the target's{pt}")
    unit.checks.append(Check(kind="lossy", position=j, n=n, passed=True, statistic=measured,
                             expected=exact, observed=measured, message=msg, **where))


def lossy_checks(report) -> list[Check]:
    """The ``lossy`` checks of a verify report, the largest divergence first (exact where known, else measured)."""
    found = [c for c in report.checks if c.kind == "lossy"]
    return sorted(found, key=lambda c: -(c.expected if c.expected is not None else c.observed or 0.0))


def lossy_lines(report, limit: int = 20) -> list[str]:
    """One line per request of a lossy method (largest divergence first), for `replay verify`'s text output."""
    found = lossy_checks(report)
    lines = [f"{c.recording}: step {c.step}, request {c.request_id} (index {c.request}): LOSSY (by design, not a "
             f"failure): {c.message}" for c in found[:limit]]
    if len(found) > limit:
        lines.append(f"... and {len(found) - limit} more lossy requests (--json lists all)")
    return lines


def lossy_json(report) -> list[dict]:
    """The lossy checks for `replay verify --json` (``lossy``): where, exact and measured total variation."""
    return [dict(recording=c.recording, step=c.step, request=c.request, request_id=c.request_id, position=c.position,
                 exact_tv=c.expected, measured_tv=c.observed, trials=c.n, message=c.message)
            for c in lossy_checks(report)]


def _collision(method: Method, law, dist_row: np.ndarray, c_row: np.ndarray | None) -> float:
    """P(two independent runs give the same outcome) for fixed drafts: sum_l P(L = l)^2 |row_l|^2."""
    k = len(law.drafts)
    total = 0.0
    for l in range(k + 1):
        prev = float(c_row[l - 1]) if c_row is not None and l > 0 else 0.0
        row = resample_row(method, law.p, law.q, l, law.drafts[l] if l < k else -1, prev)
        total += float(dist_row[l]) ** 2 * float((row ** 2).sum())
    return min(total, 1.0)


def _pair(unit, where: dict, kind: str, a, b, c: float, what: str) -> None:
    n = a.counts.size
    if n == 0 or c >= 1.0 - 1e-12:
        unit.notes.append(f"{kind}: every outcome is certain, nothing to test")
        return
    hits = int(same_outcome(a, b).sum())
    fits = ("noise that does not depend on the position (keyed by seed and batch row)" if kind == "position"
            else "noise keyed without the position and the batch row")
    unit.checks.append(Check(
        kind=kind, position=None, n=n, statistic=float(hits), p_value=binomial_p(hits, n, c), expected=c,
        observed=hits / n, method="binomial", floor_p=binomial_p(n, n, c), floor_rate=c, floor_scale=2.0,
        message=f"{what} gave the same outcome in {_pct(hits / n)} of {n} pairs; expected {_pct(c)} for independent "
                f"runs: " + (f"too many coincidences; fits {fits}" if hits / n > c else "too few coincidences: a "
                             "wrong marginal law"), **where))


def _noise_reuse(unit, where: dict, step, r: int, method: Method, law, tokens: np.ndarray, counts: np.ndarray,
                 drafts: np.ndarray, groups, c: np.ndarray | None, name: str) -> None:
    """Per position j: rejections at j whose recovered token is the residual's draw under the rejected draft's own
    noise, against sum_t r_t(prediction_t) (exact Poisson-binomial upper tail)."""
    a = int(step.cu_num_logits[r])
    k = len(law.drafts)
    pos = step.positions[a:a + k + 1].numpy().astype(np.int64)
    seeds = np.concatenate([s.numpy() for s, _ in groups])
    shifts = np.concatenate([np.full(int(s.numel()), sh, dtype=np.int64) for s, sh in groups])
    fp64 = step.rng_contract == "mrv2-fp64"
    accepted = counts - 1
    for j in range(k):
        rejected = np.nonzero((accepted == j) & (drafts[:, j] >= 0))[0]
        rows = [resample_row(method, law.p, law.q, j, int(drafts[t, j]),
                             float(c[t, j - 1]) if c is not None and j > 0 else 0.0) for t in rejected.tolist()]
        keep = [i for i, row in enumerate(rows) if row.sum() > 0]
        if not keep:
            continue
        rejected, rows = rejected[keep], np.stack([rows[i] for i in keep])
        with np.errstate(divide="ignore"):
            scores = torch.from_numpy(np.log(rows))
        at = torch.from_numpy(pos[j] + shifts[rejected] + DRAFT_NOISE_SALT).to(torch.int64)
        if fp64 or rows.size > FULL_ROWS:
            guess = np.array([gumbel_draw(scores[i], int(seeds[t]), int(at[i]), fp64=fp64)
                              for i, t in enumerate(rejected.tolist())], dtype=np.int64)
        else:
            guess = _gumbel_argmax(scores, torch.from_numpy(seeds[rejected]).to(torch.int64), at)
        probs = rows[np.arange(rejected.size), guess].tolist()
        hits = int((tokens[rejected, j] == guess).sum())
        m = len(probs)
        if m == 0 or sum(probs) >= m - 1e-12:
            continue
        pr = np.array(probs)
        e = float(pr.sum())
        p_value = math.exp(poisson_binomial_log_tail(pr, hits, upper=True))
        verdict = ("too many: the recovered token reuses the rejected draft's noise (the drafter's and the verifier's "
                   "noise overlap: local-inference-lab/vllm#205)" if hits > e else "no sign of shared noise")
        unit.checks.append(Check(
            kind="independence", position=j, n=m, statistic=float(hits), p_value=min(1.0, p_value), expected=e / m,
            observed=hits / m, method="binomial", floor_p=float(np.exp(np.log(np.maximum(pr, 1e-300)).sum())),
            floor_rate=e / m,
            message=f"{name} ({method.name}, probabilistic drafts): noise-reuse test: after {m} rejection(s) at "
                    f"position {j} the recovered token was the residual's draw under the rejected draft's own noise "
                    f"(seed, position + 2^30) {hits} time(s); expected {e:.1f} for a verifier whose noise is "
                    f"independent of the drafter's: {verdict}", **where))
