"""``own-rng``: a correct speculative sampler with noise of its own (``torch.Generator``), not the ``mrv2`` contract,
for every verification method: the token-wise rule, block verification and FLy (docs/VERIFY.md, "Verification
methods: lossless or lossy"). Written from the published rules in float64 probabilities, apart from the oracle, so
that `replay verify` can be shown to pass a correct engine whose noise it cannot reproduce.

Every draw has its own generator, seeded from (request seed, position, purpose) through a splitmix64 mix, so the
noise is keyed by position as an engine's must be (twin and position tests) and independent of the contract
drafter's murmur3 noise (the noise-reuse test). Not in the registry: tests load it by class.
"""
from __future__ import annotations

import torch

from replay_harness.impls.contract import Sampler
from replay_harness.oracle.methods import Method, fly_entropy, method_of, verify_with
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.step import ROUTE_CODE, SampleResult, Step, expected_route

_M64 = (1 << 64) - 1
ACCEPT, DRAW = 1, 2  # purposes of a generator


def _generator(seed: int, pos: int, purpose: int) -> torch.Generator:
    h = 0x9E3779B97F4A7C15
    for x in (seed, pos, purpose):
        h = ((h ^ (x & _M64)) * 0xBF58476D1CE4E5B9) & _M64
        h ^= h >> 31
        h = (h * 0x94D049BB133111EB) & _M64
        h ^= h >> 29
    return torch.Generator().manual_seed(h & ((1 << 63) - 1))


def _uniform(seed: int, pos: int) -> float:
    return float(torch.rand(1, generator=_generator(seed, pos, ACCEPT), dtype=torch.float64))


def _draw(probs: torch.Tensor, seed: int, pos: int) -> int:
    """One token from ``probs`` [V] float64 (unnormalised; all zero: nothing left, the argmax)."""
    if not bool(probs.sum() > 0):
        return int(torch.argmax(probs))
    return int(torch.multinomial(probs, 1, generator=_generator(seed, pos, DRAW)))


def _residual(p: torch.Tensor, q: torch.Tensor | None, d: int, scale: float = 1.0) -> torch.Tensor:
    if q is None:
        out = p.clone()
        out[d] = 0.0
        return out
    out = torch.clamp(scale * p - q, min=0.0)
    return out if bool(out.sum() > 0) else p


def _ratio(p: torch.Tensor, q: torch.Tensor | None, d: int) -> float:
    if q is None:
        return float(p[d])
    return min(1.0, float(p[d] / q[d])) if float(q[d]) > 0 else float(float(p[d]) > 0)


def walk(method: Method, rows: torch.Tensor, p: torch.Tensor, q: torch.Tensor | None, drafts: list[int],
         positions: list[int], seed: int) -> list[int]:
    """One stochastic request's tokens. rows [k+1, V] float32 processed (FLy's entropy gate reads them); p [k+1, V]
    and q [k, V] (None: one-hot drafts) float64 probabilities."""
    k = len(drafts)
    end = next((i for i, d in enumerate(drafts) if d < 0), k)
    qi = (lambda i: None) if q is None else (lambda i: q[i])
    if method.name == "block":
        prefix_ratio, h = [], []  # prefix_ratio[i] = min(1, prod_{m <= i} p_m(d_m) / q_m(d_m)), clamped as it goes
        for i in range(end):
            pd, qd = float(p[i, drafts[i]]), 1.0 if q is None else float(q[i, drafts[i]])
            ratio = (pd / qd if qd > 0 else (float("inf") if pd > 0 else 0.0))
            prev = prefix_ratio[-1] if prefix_ratio else 1.0
            prefix_ratio.append(min(prev * ratio, 1.0))
        for i in range(end):
            m = prefix_ratio[i]
            if i + 1 < end:
                nxt = drafts[i + 1]
                resid = m * (1.0 - float(p[i + 1, nxt])) if q is None else float(torch.clamp(m * p[i + 1] - q[i + 1],
                                                                                              min=0.0).sum())
                h.append(resid / (resid + 1.0 - m) if resid + 1.0 - m > 0 else 1.0)
            else:
                h.append(m)
        accepted = max([i + 1 for i in range(end) if _uniform(seed ^ (i << 32), positions[i]) <= h[i]], default=0)
        out = drafts[:accepted]
        if accepted == k or drafts[accepted] < 0:
            return out + [_draw(p[accepted], seed, positions[accepted])]
        scale = prefix_ratio[accepted - 1] if accepted > 0 else 1.0
        return out + [_draw(_residual(p[accepted], qi(accepted), drafts[accepted], scale), seed, positions[accepted])]
    window = method.window if method.name == "fly" else 0
    accepted, pending = 0, -1
    for i, d in enumerate(drafts):
        ok = d >= 0 and _uniform(seed, positions[i]) < _ratio(p[i], qi(i), d)
        can = (d >= 0 and window > 0 and i + window < k and float(p[i, d]) > 0
               and (q is None or float(q[i, d]) > 0) and fly_entropy(rows[i], method.top_k) >= method.threshold)
        if pending >= 0:
            if not ok:
                break
            if i - pending == window:
                accepted, pending = i + 1, -1
        elif ok:
            accepted = i + 1
        elif can:
            pending = i
        else:
            break
    out = drafts[:accepted]
    if accepted == k or drafts[accepted] < 0:
        return out + [_draw(p[accepted], seed, positions[accepted])]
    return out + [_draw(_residual(p[accepted], qi(accepted), drafts[accepted]), seed, positions[accepted])]


class OwnRngSampler(Sampler):
    name = "own-rng"
    description = "a correct sampler (standard, block, FLy) with its own torch.Generator noise, not mrv2's"
    rng_contract = "torch-generator"
    cpu_only = True
    keeps_inputs = True

    def sample(self, step: Step) -> SampleResult:
        processed = apply_sampling_params(step)
        result = SampleResult.empty(step.num_requests, step.max_drafts)
        cu = step.cu_num_logits.tolist()
        d_idx = step.draft_row_index()
        for r in range(step.num_requests):
            a, b = cu[r], cu[r + 1]
            t = float(step.temperature[r])
            drafts, positions = step.draft_token_ids[a:b - 1].tolist(), step.positions[a:b].tolist()
            seed = int(step.seed[r])
            rows = processed[a:b]
            if t == 0.0:  # greedy: no noise, the method's argmax walk
                tokens = verify_with(method_of(step, r), rows, drafts, positions, 0.0, seed, None)
            else:
                q = None
                if step.draft_logits is not None and b - a > 1:
                    q = torch.softmax(step.draft_logits[d_idx[a:b - 1]].double() / t, dim=-1)
                p = torch.softmax(rows.double(), dim=-1)
                tokens = walk(method_of(step, r), rows, p, q, drafts, positions, seed)
            result.tokens[r, :len(tokens)] = torch.tensor(tokens)
            result.counts[r] = len(tokens)
            result.routes[r] = ROUTE_CODE[expected_route(t, b - a - 1)]
        return result
