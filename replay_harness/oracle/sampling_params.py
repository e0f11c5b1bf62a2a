"""``apply_sampling_params`` over the expanded batch, in Model Runner V2 order.

Every row takes its request's parameters (the ``1 + k_r`` rows of a request,
bonus row included). Order, on float32 logits: the grammar mask and the logits
processors (:mod:`replay_harness.oracle.processors`: allowed ids, logit bias,
min-tokens, penalties, bad words), then temperature, min-p, top-k, top-p.
Greedy requests (temperature 0) skip temperature and the filters, as the engine
forces their top-k/top-p/min-p off (processors still apply to them). Rows of a
request that needs no processing (temperature 1, no filters, no processor) are
left bit-identical, as upstream does.
"""
from __future__ import annotations

import torch

from replay_harness.oracle.processors import apply_grammar, apply_processors
from replay_harness.recording.step import Step


def normalized_top_k(top_k: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[R] int64: k, with 0 (off) or k > V mapped to V, as the engine stores it."""
    k = top_k.long()
    return torch.where((k <= 0) | (k > vocab_size), torch.full_like(k, vocab_size), k)


def needs_processing(step: Step) -> torch.Tensor:
    """[R] bool: the request's logits change under its parameters (upstream's rule)."""
    t = step.temperature
    k = normalized_top_k(step.top_k, step.vocab_size)
    return (t != 0) & ((t != 1) | (step.min_p != 0) | (k != step.vocab_size) | (step.top_p != 1))


def top_k_top_p_sorted(logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Sort-based top-k then top-p mask (the oracle rule).

    logits [M, V] float32, k [M] int64 in [1, V], p [M] float32 in (0, 1].
    top-k keeps every value >= the k-th largest (ties at the boundary are kept);
    top-p keeps the smallest suffix of the ascending sort whose softmax mass
    exceeds 1 - p, and always the largest value.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=False, stable=True)
    kth = sorted_logits.gather(1, (logits.shape[1] - k).unsqueeze(1))
    sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop = cum <= (1 - p).unsqueeze(1)
    drop[:, -1] = False
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


CHUNK_BYTES = 64 << 20  # float32 rows filtered at a time: the sort's values and int64 indices, the softmax and
                       # cumsum exist for one chunk only (docs/HARDENING.md, "Limits checked against")


def _row_chunks(rows: torch.Tensor, vocab_size: int) -> list[torch.Tensor]:
    """The indices of the rows where ``rows`` [N] bool is set, in chunks of at most CHUNK_BYTES of float32."""
    at = torch.nonzero(rows).flatten()
    per = max(1, CHUNK_BYTES // (4 * max(vocab_size, 1)))
    return list(at.split(per))


def apply_sampling_params(step: Step) -> torch.Tensor:
    """[N, V] float32 processed target logits for every row of the step. Every rule is per row, so the rows
    are processed in chunks (:data:`CHUNK_BYTES`): the same values, bit for bit, in bounded extra memory."""
    logits = step.logits.to(torch.float32, copy=True)  # one copy, also of float32 logits
    apply_grammar(logits, step)
    apply_processors(logits, step)
    rows = step.row_to_request().to(logits.device)
    active = needs_processing(step)[rows]
    if not bool(active.any()):
        return logits
    temp, min_p, top_p = step.temperature[rows], step.min_p[rows], step.top_p[rows]
    k = normalized_top_k(step.top_k, step.vocab_size)[rows]
    for at in _row_chunks(active & (temp != 1), step.vocab_size):
        logits[at] = logits[at] / temp[at, None]
    for at in _row_chunks(active & (min_p != 0), step.vocab_size):
        x = logits[at]
        threshold = x.max(dim=1, keepdim=True).values + torch.log(min_p[at])[:, None]
        logits[at] = x.masked_fill(x < threshold, float("-inf"))
    for at in _row_chunks(active & ((k != step.vocab_size) | (top_p != 1)), step.vocab_size):
        logits[at] = top_k_top_p_sorted(logits[at], k[at], top_p[at])
    return logits
