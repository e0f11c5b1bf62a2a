#!/usr/bin/env python
"""Measure the false-alarm rate of `replay verify` on correct samplers (docs/VERIFY.md, "Threshold and
false-alarm rate").

For every seed, one verify run (the same code as `replay verify --seed S`: verify_step + finalize) of a
correct sampler over the chosen steps; a run that fails any test is a false alarm. The family-wise rate
is reported at several --alpha values from the same trials (each alpha judged by its own `finalize`,
Monte Carlo included), with exact Clopper-Pearson 95% intervals.

Samplers (--impl):
* ``exact`` (default, fast): a sampler written here from the rejection-sampling rule, noise keyed by
  (seed, position) through a splitmix64 hash; correct by construction and several times faster than the
  reference on these steps;
* any registry name (``reference``, ...): the real impl, slow on the CPU.

Steps (--steps): ``builtin`` (the SYNTHETIC steps of `replay verify` without a recording) and/or
recording folders (the committed SmolLM2 fixtures: real rows, V = 49,152).

    python tools/verify_false_alarms.py --seeds 1000 --trials 400
    python tools/verify_false_alarms.py --seeds 200 --impl reference --steps builtin
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from replay_harness.checks.report import VerifyReport, finalize  # noqa: E402
from replay_harness.checks.stats import clopper_pearson  # noqa: E402
from replay_harness.checks.verify import builtin_steps, verify_step  # noqa: E402
from replay_harness.impls.contract import Sampler  # noqa: E402
from replay_harness.oracle.sampling_params import apply_sampling_params  # noqa: E402
from replay_harness.recording.schema import ROUTE_CODE  # noqa: E402
from replay_harness.recording.step import SampleResult, Step, expected_route  # noqa: E402
from replay_harness.recording.store import Recording  # noqa: E402

DEFAULT_STEPS = ["builtin", "fixtures/real-founding", "fixtures/real-mixed", "fixtures/real-topk-topp"]
ALPHAS = (1e-3, 1e-2, 1e-1)


class ExactSampler(Sampler):
    """Speculative sampling by the rule (accept d with min(1, p(d)/q(d)), else draw from max(p - q, 0);
    bonus from p; greedy: the argmax walk), inverse-CDF draws from uniforms keyed by (seed, position)
    (splitmix64).
    Rows are processed once per distinct request (verify's calls hold copies of one request)."""

    name = "exact"
    rng_contract = "exact-philox"
    cpu_only = True

    def sample(self, step: Step) -> SampleResult:
        cu = step.cu_num_logits.tolist()
        r_n, kmax = step.num_requests, step.max_drafts
        tokens = torch.full((r_n, kmax + 1), -1, dtype=torch.int64)
        counts = torch.zeros(r_n, dtype=torch.int32)
        routes = torch.zeros(r_n, dtype=torch.int32)
        cache: dict[tuple, tuple[np.ndarray, np.ndarray | None]] = {}
        d_idx = step.draft_row_index()
        copies = _all_copies(step, cu)
        seen: dict[tuple, int] = {}
        for r in range(r_n):
            a, b = cu[r], cu[r + 1]
            k, temp = b - a - 1, float(step.temperature[r])
            routes[r] = ROUTE_CODE[expected_route(temp, k)]
            # verify's calls hold copies of one request (and, in a step mixing drafted and plain requests,
            # the others once): rows processed once per distinct request
            first = 0 if copies else seen.setdefault(_signature(step, r, a, b), r)
            if first not in cache:
                p = _softmax(apply_sampling_params(step.select([first])))
                q = None
                if step.draft_logits is not None and k > 0 and temp > 0:
                    q = _softmax(step.draft_logits[d_idx[cu[first]:cu[first + 1] - 1]].float() / temp)
                cache[first] = (p, q)
            p, q = cache[first]
            drafts = step.draft_token_ids[a:b - 1].tolist()
            cdfs = cache.setdefault(("cdf", first), {})
            out = _walk(p, q, drafts, temp, int(step.seed[r]), step.positions[a:b].tolist(), cdfs)
            tokens[r, :len(out)] = torch.tensor(out)
            counts[r] = len(out)
        return SampleResult(tokens=tokens, counts=counts, routes=routes)


def _signature(step: Step, r: int, a: int, b: int) -> tuple:
    """What makes request r's processed rows: its row count, sampling parameters and a strided sample of its
    logits (every 97th token) and draft logits."""
    rows = step.logits[a:b, ::97].float().numpy().tobytes()
    dl = b"" if step.draft_logits is None else step.draft_logits[
        step.draft_row_index()[a:b - 1], ::97].float().numpy().tobytes()
    return (b - a, float(step.temperature[r]), int(step.top_k[r]), float(step.top_p[r]), float(step.min_p[r]),
            hash(rows), hash(dl), step.has_pipeline and r)


def _all_copies(step: Step, cu: list[int]) -> bool:
    """True when every request is a copy of request 0 (rows on a stride of tokens, parameters, draft logits):
    verify's calls hold copies of one request, so its rows are processed once."""
    n = cu[1] - cu[0]
    if any(cu[i + 1] - cu[i] != n for i in range(step.num_requests)):
        return False
    same = all(bool((f == f[0]).all()) for f in (step.temperature, step.top_k, step.top_p, step.min_p))
    rows = step.logits.view(step.num_requests, n, -1)[:, :, ::97]  # every 97th token: cheap on V = 49,152
    same = same and bool((rows == rows[:1]).all())
    if same and step.draft_logits is not None and n > 1:
        dl = step.draft_logits.view(step.num_requests, n - 1, -1)[:, :, ::97]
        same = bool((dl == dl[:1]).all())
    return same


def _softmax(x: torch.Tensor) -> np.ndarray:
    x = x.detach().double().numpy()
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)


MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: a bijective 64-bit hash."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & MASK
    return x ^ (x >> 31)


def _uniform(seed: int, position: int, stream: int) -> float:
    """A uniform in [0, 1) keyed by (seed, position, stream): splitmix64 of the three, 53 bits."""
    h = _mix((_mix(seed & MASK) + 0x9E3779B97F4A7C15 * (2 * position + stream + 1)) & MASK)
    return (h >> 11) * 2.0 ** -53


def _draw(cdfs: dict, key: tuple, weights, u: float) -> int:
    """Inverse-CDF draw from ``weights()`` (computed once per key: rows repeat across verify's copies)."""
    if key not in cdfs:
        cdfs[key] = np.cumsum(weights())
    cdf = cdfs[key]
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), cdf.size - 1))


def _walk(p: np.ndarray, q: np.ndarray | None, drafts: list[int], temp: float, seed: int,
          positions: list[int], cdfs: dict) -> list[int]:
    if temp == 0.0:
        out = []
        for j, d in enumerate(drafts):
            t = int(np.argmax(p[j]))
            out.append(t)
            if d < 0 or t != d:
                return out
        return out + [int(np.argmax(p[len(drafts)]))]
    out = []
    for j, d in enumerate(drafts):
        if d < 0:
            return out + [_draw(cdfs, ("p", j), lambda: p[j], _uniform(seed, positions[j], 1))]
        qd = 1.0 if q is None else q[j, d]
        if _uniform(seed, positions[j], 0) * qd < p[j, d]:
            out.append(d)
            continue
        return out + [_draw(cdfs, ("r", j, d), lambda: _residual(p[j], None if q is None else q[j], d),
                            _uniform(seed, positions[j], 1))]
    k = len(drafts)
    return out + [_draw(cdfs, ("p", k), lambda: p[k], _uniform(seed, positions[k], 1))]


def _residual(p: np.ndarray, q: np.ndarray | None, d: int) -> np.ndarray:
    """max(p - q, 0); a one-hot q puts its mass on d."""
    if q is None:
        resid = p.copy()
        resid[d] = 0.0
        return resid
    return np.maximum(p - q, 0.0)


def load_steps(names: list[str]) -> list[tuple[str, int, Step]]:
    steps = []
    for name in names:
        if name == "builtin":
            steps += [("built-in", i, s) for i, s in enumerate(builtin_steps())]
        else:
            steps += [(name, rec.index, rec.step) for rec in Recording(name)]
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=1000, help="verify runs (seeds 0..N-1, shifted by --first-seed)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=400, help="--trials of each verify run (default: the CLI's)")
    ap.add_argument("--impl", default="exact", help="exact (fast, defined here) or a registry impl name")
    ap.add_argument("--steps", nargs="+", default=DEFAULT_STEPS, help="builtin and/or recording folders")
    ap.add_argument("--budget-s", type=float, default=None, help="stop after this many seconds (reports the "
                                                                  "seeds done)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.impl == "exact":
        impl = ExactSampler()
    else:
        from replay_harness.impls import get_impl
        impl = get_impl(args.impl)
    steps = load_steps(args.steps)
    alarms = {a: 0 for a in ALPHAS}
    per_test = {"tests": 0, "below_threshold": 0}
    m_seen, start, done, inconclusive = [], time.time(), 0, 0
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        if args.budget_s is not None and time.time() - start > args.budget_s:
            break
        rng = np.random.default_rng(seed)
        units = []
        for label, index, step in steps:
            units += verify_step(label, index, step, impl, args.trials, rng, torch.device("cpu"))
        for a in ALPHAS:
            rep = finalize(VerifyReport(impl=impl.name, trials=args.trials, seed=seed, alpha=a,
                                        units=copy.deepcopy(units)))
            if not rep.ok:
                alarms[a] += 1
                if a == ALPHAS[0]:
                    worst = min(rep.failures, key=lambda c: c.p_value)
                    print(f"seed {seed}: false alarm at alpha {a:g}: {worst.recording} step {worst.step} request "
                          f"{worst.request} {worst.kind} p = {worst.p_value:.3g} ({worst.method})", flush=True)
            if a == ALPHAS[0]:
                inconclusive += rep.inconclusive  # exit 4 (a mechanism without power): no alarm, no pass
                m_seen.append(rep.num_statistical)
                per_test["tests"] += rep.num_statistical
                per_test["below_threshold"] += len(rep.failures)
        done += 1
    took = time.time() - start
    print(f"impl {impl.name}, steps {' '.join(args.steps)}, --trials {args.trials}: {done} seeds "
          f"({args.first_seed}..{args.first_seed + done - 1}) in {took:.0f} s ({took / max(done, 1):.2f} s/seed); "
          f"{int(np.median(m_seen)) if m_seen else 0} statistical tests per run (median)")
    for a in ALPHAS:
        lo, hi = clopper_pearson(alarms[a], done)
        print(f"alpha {a:g}: {alarms[a]} false alarm(s) in {done} runs = {alarms[a] / max(done, 1):.4f} "
              f"(95% Clopper-Pearson {lo:.4f}-{hi:.4f})")
    print(f"alpha 0.001: {inconclusive} of {done} runs INCONCLUSIVE (a mechanism exercised without power)")
    lo, hi = clopper_pearson(per_test["below_threshold"], per_test["tests"])
    print(f"per test at alpha 0.001: {per_test['below_threshold']} of {per_test['tests']} tests below alpha/m "
          f"(95% CI {lo:.2e}-{hi:.2e}; nominal alpha/m about {1e-3 / max(np.median(m_seen) if m_seen else 1, 1):.1e})")


if __name__ == "__main__":
    main()
