"""What an engine returns beside its tokens (the oracle): logprobs and kept sets of the emitted slots.

For request r that asked for ``logprobs[r] = n >= 0`` and each emitted slot i (row ``cu[r] + i``), from the
row's **raw** logits (the model's, after the grammar mask, widened to float32) or its **processed** logits
(after every rule of ``apply_sampling_params``), as ``logprobs_mode`` says (docs/FIXTURES.md, "Emitted logprobs
and kept sets"; vLLM 0.33 ``gpu/sample/logprob.py``):

* column 0: the emitted token; columns 1..n: the n largest, descending, ties by ascending id (another order of
  tied values is as good: ``compare/logprobs.py`` treats ties as interchangeable);
* values: ``x - logsumexp(x)`` (the logprob modes) or ``x`` (the logits modes);
* rank: the count of tokens whose value is >= the emitted token's (1 = the largest);
* kept set: the tokens whose processed logit is finite (vLLM's sampling mask), as packed int32 words.
"""
from __future__ import annotations

import torch

from replay_harness.oracle.processors import grammar_allowed, grammar_rows
from replay_harness.recording.step import Step

NEG_INF = float("-inf")


def raw_rows(step: Step, rows: torch.Tensor) -> torch.Tensor:
    """[M, V] float32 raw logits of ``rows`` (the grammar mask applied, nothing else)."""
    x = step.logits[rows].to(torch.float32, copy=True)
    if step.grammar_bitmask is not None:
        on = grammar_rows(step)[rows]
        allowed = grammar_allowed(step.grammar_bitmask[rows].cpu(), step.vocab_size).to(x.device)
        x = torch.where(on[:, None].to(x.device) & ~allowed, torch.full_like(x, NEG_INF), x)
    return x


def pack_bits(keep: torch.Tensor) -> torch.Tensor:
    """[..., ceil(V/32)] int32 words from [..., V] bool (bit v % 32 of word v // 32)."""
    v = keep.shape[-1]
    pad = (-v) % 32
    bits = torch.nn.functional.pad(keep.long(), (0, pad)).reshape(*keep.shape[:-1], -1, 32)
    words = (bits << torch.arange(32)).sum(-1)
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)


def top_ids(x: torch.Tensor, n: int) -> torch.Tensor:
    """[n] int64: the n largest of ``x`` [V], descending, ties by ascending id (NaN read as -inf)."""
    x = torch.nan_to_num(x, nan=NEG_INF)
    order = torch.sort(-x, stable=True).indices  # ascending -x: descending x, stable: ascending id on ties
    return order[:n]


def emitted_outputs(step: Step, processed: torch.Tensor, tokens: torch.Tensor, counts: torch.Tensor
                    ) -> dict[str, torch.Tensor]:
    """logprobs [R, K+1, L] float32, logprob_ids [R, K+1, L] int32, logprob_ranks [R, K+1] int32 (-1 / -inf /
    -1 where nothing was asked or emitted) and kept_mask [R, K+1, ceil(V/32)] int32 of emitted slots, for
    ``tokens`` [R, K+1] / ``counts`` [R] and the step's ``processed`` [N, V] float32 rows."""
    r_count, slots = tokens.shape
    asked = step.logprobs.long().tolist() if step.logprobs is not None else [-1] * r_count
    modes = step.logprobs_mode.long().tolist() if step.logprobs_mode is not None else [0] * r_count
    width = 1 + max([n for n in asked if n >= 0], default=0)
    words = (step.vocab_size + 31) // 32
    values = torch.full((r_count, slots, width), NEG_INF, dtype=torch.float32)
    ids = torch.full((r_count, slots, width), -1, dtype=torch.int32)
    ranks = torch.full((r_count, slots), -1, dtype=torch.int32)
    kept = torch.zeros((r_count, slots, words), dtype=torch.int32)
    cu = step.cu_num_logits.tolist()
    for r in range(r_count):
        count = int(counts[r])
        if count == 0:
            continue
        rows = torch.arange(cu[r], cu[r] + count)
        kept[r, :count] = pack_bits(torch.isfinite(processed[rows]).cpu())
        n = asked[r]
        if n < 0:
            continue
        src = processed[rows].float() if modes[r] in (1, 3) else raw_rows(step, rows)
        for i in range(count):
            x, token = src[i].cpu(), int(tokens[r, i])
            chosen = torch.cat([torch.tensor([token]), top_ids(x, n)])
            scores = x if modes[r] in (2, 3) else x - torch.logsumexp(x, 0)
            values[r, i, :n + 1] = scores[chosen]
            ids[r, i, :n + 1] = chosen.to(torch.int32)
            ranks[r, i] = int((torch.nan_to_num(x, nan=NEG_INF) >= x[token]).sum())
    return {"logprobs": values, "logprob_ids": ids, "logprob_ranks": ranks, "kept_mask": kept}
