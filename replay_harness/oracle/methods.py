"""Verification methods beyond the token-wise rejection sampler (the oracle), as vLLM 0.33's Model Runner V2 runs
them (``spec_decode/rejection_sampler_utils.py``, ``spec_decode/fly.py``; docs/FIXTURES.md "Verification methods").

For one stochastic request with drafts d_0..d_{k-1}, processed target rows p_0..p_k (float32 logits) and, when the
drafter sampled, draft rows q_0..q_{k-1} (pre-temperature logits, divided by T here; one-hot otherwise):

* **block** (Sun et al., arXiv 2403.10444): the prefix ratio ``c_i = min(c_{i-1} + log p_i(d_i) - log q_i(d_i), 0)``
  (c_{-1} = 0; a -1 placeholder ends the block); draft i is tested against ``u_i = accept_uniform(seed ^ (i << 32),
  pos_i)`` and the threshold ``h_i = r_{i+1} / (r_{i+1} + 1 - e^{c_i})`` (1 when that denominator is 0), with
  ``r_{i+1} = sum_x max(e^{c_i} p_{i+1}(x) - q_{i+1}(x), 0)`` (one-hot: ``e^{c_i} (1 - p_{i+1}(d_{i+1}))``), or
  ``h_i = e^{c_i}`` for the last draft (or one followed by a placeholder); the accepted length is the largest
  ``i + 1`` with ``u_i <= h_i``. At a rejection at tau the resample draws from ``max(e^{c_{tau-1}} p_tau - q_tau, 0)``
  (one-hot: p_tau without d_tau); all accepted: the bonus row. Greedy requests verify token-wise.
* **fly** (entropy-gated deferred rejection): token-wise tests, but a rejection at i whose row's top-k entropy is at
  least the threshold, with both probabilities finite and ``i + W < k``, is deferred: if the next W drafts are
  accepted natively the rejected draft is accepted too (lossy by design); otherwise the walk stops at i. The
  resample at the stop uses the normalisers of the row where it stopped (greedy: that row's argmax).

Every draw is :func:`~replay_harness.oracle.walk.gumbel_draw` at the row's position with the request's seed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from replay_harness.oracle.rng import accept_uniform
from replay_harness.oracle.tree import verify_tree
from replay_harness.oracle.walk import argmax_first, gumbel_draw, residual_logits, verify_request
from replay_harness.recording.schema import VERIFY_METHODS

@dataclass(frozen=True)
class Method:
    """How one request's drafts are verified: ``name`` one of schema.VERIFY_METHODS; FLy's window, entropy
    threshold and top-k; ``fp64``: the draws' noise width (the recording's contract is ``mrv2-fp64``); ``parents``:
    a tree's parent of each node (oracle/tree.py)."""

    name: str = "standard"
    window: int = 0
    threshold: float = 0.0
    top_k: int = 0
    fp64: bool = False
    parents: tuple[int, ...] = ()


STANDARD = Method()


def method_of(step, r: int) -> Method:
    """Request r's :class:`Method` from the step's fields (absent: standard) and its contract."""
    code = 0 if step.verify_method is None else int(step.verify_method[r])
    fly = VERIFY_METHODS[code] == "fly"
    parents = ()
    if VERIFY_METHODS[code] == "tree":
        parents = tuple(step.tree_parent[int(step.cu_num_logits[r]):int(step.cu_num_logits[r + 1]) - 1].tolist())
    return Method(VERIFY_METHODS[code], int(step.fly_window[r]) if fly else 0,
                  float(step.fly_entropy_threshold[r]) if fly else 0.0, int(step.fly_entropy_top_k[r]) if fly else 0,
                  step.rng_contract == "mrv2-fp64", parents)


def verify_with(method: Method, logits: torch.Tensor, drafts: list[int], positions: list[int], temperature: float,
                seed: int, draft_logits: torch.Tensor | None) -> list[int]:
    """One request's tokens under ``method`` (greedy requests verify token-wise under block, as MRV2's)."""
    if method.name == "block" and temperature != 0.0 and drafts:
        return verify_block(logits, drafts, positions, temperature, seed, draft_logits, method.fp64)
    if method.name == "tree":
        return verify_tree(logits, drafts, list(method.parents), positions, temperature, seed, draft_logits,
                           method.fp64)
    if method.name == "fly" and drafts:
        return verify_fly(logits, drafts, positions, temperature, seed, draft_logits, method.window,
                          method.threshold, method.top_k, method.fp64)
    return verify_request(logits, drafts, positions, temperature, seed, draft_logits, fp64=method.fp64)


def _log_prob(row: torch.Tensor, token: int) -> torch.Tensor:
    return row[token] - torch.logsumexp(row, 0)


def step_seed(seed: int, i: int) -> int:
    """``seed ^ (i << 32)`` as a signed int64 (vLLM's spec_step_seed): block verification's seed for draft i."""
    x = (seed ^ (i << 32)) & ((1 << 64) - 1)
    return x - (1 << 64) if x >= 1 << 63 else x


def verify_block(logits: torch.Tensor, drafts: list[int], positions: list[int], temperature: float, seed: int,
                 draft_logits: torch.Tensor | None, fp64: bool = False) -> list[int]:
    """Tokens of one request under block verification (module docstring). logits [k+1, V] float32 processed;
    draft_logits [k, V] pre-temperature or None (one-hot drafts)."""
    k = len(drafts)
    q = None if draft_logits is None else draft_logits.float() / temperature
    cum, c = [], torch.tensor(0.0)
    end = next((i for i, d in enumerate(drafts) if d < 0), k)  # a placeholder ends the block
    for i in range(end):
        lq = 0.0 if q is None else _log_prob(q[i], drafts[i])
        c = torch.clamp(c + (_log_prob(logits[i], drafts[i]) - lq), max=0.0)
        cum.append(c)
    accepted = 0
    for i in range(end):
        u = accept_uniform(torch.tensor(step_seed(seed, i)), torch.tensor(positions[i]))
        prefix = torch.exp(cum[i])
        if i + 1 < end:
            nxt = drafts[i + 1]
            m_b = torch.softmax(logits[i + 1], 0)
            if q is None:
                residual = prefix * (1.0 - m_b[nxt])
            else:
                residual = torch.clamp(prefix * m_b - torch.softmax(q[i + 1], 0), min=0.0).sum()
            denom = residual + 1.0 - prefix
            h = residual / denom if bool(denom > 0) else torch.tensor(1.0)
        else:
            h = prefix
        if bool(u <= h):
            accepted = i + 1
    out = drafts[:accepted]
    if accepted == k:
        return out + [gumbel_draw(logits[k], seed, positions[k], fp64=fp64)]
    tau = accepted
    if drafts[tau] < 0:
        return out + [gumbel_draw(logits[tau], seed, positions[tau], fp64=fp64)]
    if q is None:
        return out + [gumbel_draw(residual_logits(logits[tau], drafts[tau], None), seed, positions[tau], fp64=fp64)]
    log_p = logits[tau] - torch.logsumexp(logits[tau], 0) + (cum[tau - 1] if tau > 0 else 0.0)
    log_q = q[tau] - torch.logsumexp(q[tau], 0)
    ratio = torch.exp(log_q - log_p)
    scores = torch.where(ratio < 1, log_p + torch.log1p(-ratio), torch.full_like(log_p, -math.inf))
    return out + [gumbel_draw(scores, seed, positions[tau], fp64=fp64)]


def fly_entropy(row: torch.Tensor, top_k: int) -> float:
    """FLy's entropy of one processed row [V]: ``-sum p log p`` over its ``top_k`` largest probabilities."""
    top = torch.topk(row.float(), min(top_k, row.numel())).values
    log_p = top - torch.logsumexp(row.float(), 0)
    p = torch.exp(log_p)
    return float(-torch.where(p > 0, p * log_p, torch.zeros_like(p)).sum())


def verify_fly(logits: torch.Tensor, drafts: list[int], positions: list[int], temperature: float, seed: int,
               draft_logits: torch.Tensor | None, window: int, threshold: float, top_k: int,
               fp64: bool = False) -> list[int]:
    """Tokens of one request under FLy (module docstring); ``window`` W >= 1, ``threshold`` and ``top_k`` gate a
    deferral by the rejected row's entropy."""
    k = len(drafts)
    greedy = temperature == 0.0
    q = None if draft_logits is None or greedy else draft_logits.float() / temperature
    uniforms = accept_uniform(torch.tensor(seed), torch.tensor(positions[:k], dtype=torch.int64))
    accepted_length, pending = 0, -1
    for i, d in enumerate(drafts):
        valid = d >= 0
        if greedy:
            accepted = valid and argmax_first(logits[i]) == d
            can_defer = valid and bool(logits[i][d] > -math.inf)
        else:
            lp = _log_prob(logits[i], d) if valid else torch.tensor(-math.inf)
            lq = torch.tensor(0.0) if q is None or not valid else _log_prob(q[i], d)
            accepted = valid and bool(lp > torch.log(uniforms[i]) + lq)
            can_defer = valid and bool(lp > -math.inf) and bool(lq > -math.inf)
        if pending >= 0:
            if not accepted:
                break
            if i - pending == window:
                accepted_length, pending = i + 1, -1
        elif accepted:
            accepted_length = i + 1
        elif can_defer and i + window < k and fly_entropy(logits[i], top_k) >= threshold:
            pending = i
        else:
            break
    out = drafts[:accepted_length]
    if accepted_length == k:
        return out + [gumbel_draw(logits[k], seed, positions[k], fp64=fp64) if not greedy
                      else argmax_first(logits[k])]
    tau = accepted_length
    if greedy:
        return out + [argmax_first(logits[tau])]
    qt = None if q is None else q[tau]
    scores = logits[tau] if drafts[tau] < 0 else residual_logits(logits[tau], drafts[tau], qt)
    return out + [gumbel_draw(scores, seed, positions[tau], fp64=fp64)]
