"""The logits processors of Model Runner V2 and the grammar mask, in its order, on float32 rows (the oracle).

Before :func:`~replay_harness.oracle.sampling_params.apply_sampling_params`' temperature, min-p, top-k and top-p
(docs/FIXTURES.md, "The sampling pipeline"; vLLM 0.33 ``gpu/sample/sampler.py``, ``logit_bias.py``,
``penalties.py``, ``bad_words.py``, ``structured_outputs.py``), row j of request r at local position l:

0. **grammar** (requests with ``has_grammar``): a token whose bit is clear in the row's ``grammar_bitmask`` is
   -inf (vLLM applies it to the raw logits before the sampler: raw logprobs see it);
1. **allowed token ids** (a non-empty list): every other token is -inf;
2. **logit bias**: ``x[id] += bias``;
3. **min-tokens**: while the row's output holds fewer than ``min_tokens`` tokens, the stop ids are -inf; when
   that leaves a grammar request's row with no finite logit, the stop ids get their finite values back;
4. **penalties**: repetition (``x * (1/rep)`` if x > 0 else ``x * rep``, for tokens in the prompt or the output),
   then frequency (``x - freq * count``), then presence (``x - pres * [count > 0]``);
5. **bad words**: a word whose tokens but the last end the row's output bans its last token (-inf).

The row's **output** is the request's ``output_token_ids`` followed by its drafts before row j (drafts 0..l-1;
a -1 placeholder counts as no token and matches no word), as MRV2 counts them at draft positions. Every rule is
sparse: it touches the tokens of its lists only.
"""
from __future__ import annotations

import torch

from replay_harness.recording.schema import FIELD
from replay_harness.recording.step import Step

NEG_INF = float("-inf")


def _ragged(step: Step, name: str, r: int) -> list[int]:
    values = getattr(step, name)
    if values is None:
        return []
    cu = getattr(step, FIELD[name].ragged)
    return values[int(cu[r]):int(cu[r + 1])].tolist()


def _value(step: Step, name: str, r: int, off):
    x = getattr(step, name)
    return off if x is None else x[r].item()


def grammar_rows(step: Step) -> torch.Tensor:
    """[N] bool: the rows the grammar mask applies to (rows of requests with ``has_grammar``)."""
    if step.grammar_bitmask is None:
        return torch.zeros(step.logits.shape[0], dtype=torch.bool)
    cu = step.cu_num_logits.long().cpu()
    return torch.repeat_interleave(step.has_grammar.cpu().bool(), cu[1:] - cu[:-1])


def grammar_allowed(words: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[M, V] bool from packed [M, ceil(V/32)] int32 words: bit v % 32 of word v // 32 set = token v allowed."""
    bits = (words.long()[:, :, None] >> torch.arange(32)) & 1
    return bits.reshape(words.shape[0], -1)[:, :vocab_size].bool()


def apply_grammar(logits: torch.Tensor, step: Step) -> None:
    """Step 0 in place on ``logits`` [N, V] (any float dtype: -inf is exact in each)."""
    if step.grammar_bitmask is None:
        return
    rows = torch.nonzero(grammar_rows(step)).flatten()
    if rows.numel() == 0:  # a step (or a selection of one) whose requests all have has_grammar 0
        return
    for chunk in rows.split(max(1, (64 << 20) // max(step.vocab_size, 1))):
        allowed = grammar_allowed(step.grammar_bitmask[chunk].cpu(), step.vocab_size).to(logits.device)
        logits[chunk.to(logits.device)] = logits[chunk.to(logits.device)].masked_fill(~allowed, NEG_INF)


def row_outputs(step: Step, r: int) -> list[list[int]]:
    """The output of each row of request r: its ``output_token_ids``, then its drafts before the row."""
    out = _ragged(step, "output_token_ids", r)
    a, b = int(step.cu_num_logits[r]), int(step.cu_num_logits[r + 1])
    drafts = step.draft_token_ids[a:b - 1].tolist()
    return [out + drafts[:l] for l in range(b - a)]


def has_processors(step: Step) -> bool:
    """Whether any rule of steps 1-5 is set in the step."""
    return any(getattr(step, name) is not None for name in (
        "allowed_token_ids", "logit_bias_ids", "min_tokens", "repetition_penalty", "frequency_penalty",
        "presence_penalty", "bad_words_token_ids"))


def apply_processors(logits: torch.Tensor, step: Step) -> None:
    """Steps 1-5 in place on float32 ``logits`` [N, V] (grammar already applied)."""
    if not has_processors(step):
        return
    cu = step.cu_num_logits.tolist()
    grammar = step.has_grammar
    for r in range(step.num_requests):
        allowed = _ragged(step, "allowed_token_ids", r)
        bias_ids, bias = _ragged(step, "logit_bias_ids", r), _ragged(step, "logit_bias_values", r)
        stops, min_tokens = _ragged(step, "stop_token_ids", r), _value(step, "min_tokens", r, 0)
        prompt = set(_ragged(step, "prompt_token_ids", r))
        rep = _value(step, "repetition_penalty", r, 1.0)
        freq = _value(step, "frequency_penalty", r, 0.0)
        pres = _value(step, "presence_penalty", r, 0.0)
        words = _bad_words(step, r)
        for l, output in enumerate(row_outputs(step, r)):
            x = logits[cu[r] + l]
            if allowed:
                keep = torch.tensor(sorted(set(allowed)), dtype=torch.long, device=x.device)
                kept = x[keep].clone()
                x.fill_(NEG_INF)
                x[keep] = kept
            if bias_ids:
                ids = torch.tensor(bias_ids, dtype=torch.long, device=x.device)
                x[ids] += torch.tensor(bias, dtype=torch.float32, device=x.device)
            if stops and len(output) < min_tokens:
                ids = torch.tensor(stops, dtype=torch.long, device=x.device)
                saved = x[ids].clone()
                x[ids] = NEG_INF
                if grammar is not None and int(grammar[r]) and bool(torch.isneginf(x).all()):
                    x[ids] = torch.where(torch.isfinite(saved), saved, x[ids])
            if rep != 1.0 or freq != 0.0 or pres != 0.0:
                _penalize(x, output, prompt, rep, freq, pres)
            for word in words:
                prefix = word[:-1]
                if len(prefix) <= len(output) and output[len(output) - len(prefix):] == prefix:
                    x[word[-1]] = NEG_INF


def _bad_words(step: Step, r: int) -> list[list[int]]:
    tokens, lengths = _ragged(step, "bad_words_token_ids", r), _ragged(step, "bad_words_lengths", r)
    words, at = [], 0
    for n in lengths:
        words.append(tokens[at:at + n])
        at += n
    return words


def _penalize(x: torch.Tensor, output: list[int], prompt: set[int], rep: float, freq: float, pres: float) -> None:
    """Step 4 on one row, over the tokens of the prompt and the output only (float32 arithmetic as MRV2's)."""
    counts: dict[int, int] = {}
    for token in output:
        if token >= 0:
            counts[token] = counts.get(token, 0) + 1
    seen = sorted(set(counts) | (prompt if rep != 1.0 else set()))
    if not seen:
        return
    ids = torch.tensor(seen, dtype=torch.long, device=x.device)
    v = x[ids]
    if rep != 1.0:
        scale = torch.tensor(rep, dtype=torch.float32)
        v = v * torch.where(v > 0, torch.tensor(1.0, dtype=torch.float32) / scale, scale).to(v.device)
    c = torch.tensor([counts.get(t, 0) for t in seen], dtype=torch.int32, device=x.device)
    v = v - torch.tensor(freq, dtype=torch.float32) * c.float()
    v = v - torch.tensor(pres, dtype=torch.float32) * (c > 0).float()
    x[ids] = v
