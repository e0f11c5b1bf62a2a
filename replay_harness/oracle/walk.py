"""The reference walk: the torch oracle, Model Runner V2 semantics, one request at a time.

Per request r with k drafts (rows j = start .. start+k, the last is the bonus row):

* greedy (temperature 0): for each draft, emit argmax(row) (first index on ties);
  stop at the first draft that differs (or is a -1 placeholder). If all pass,
  emit argmax of the bonus row.
* stochastic: accept draft d iff  log p(d) > log u + log q(d), with
  u = accept_uniform(seed, pos[j]) and q the draft distribution (one-hot, log q = 0,
  without draft logits). A -1 placeholder ends verification. On rejection,
  resample from the residual max(p - q, 0) (one-hot: p with d removed); after
  all accepted, draw the bonus from p. Draws are Gumbel-max with the noise of
  ``rng.gumbel_noise(seed, pos[row], token)``, computed only for the tokens that can still
  win (:func:`gumbel_draw`: the same token as the whole row, exactly).
* k = 0 is the bonus draw alone (greedy-sample / random-sample).

Logits first go through ``apply_sampling_params`` (temperature, min-p, top-k, top-p).
"""
from __future__ import annotations

import torch

from replay_harness.oracle.rng import accept_uniform, draw_noise


def argmax_first(x: torch.Tensor) -> int:
    """Index of the maximum, first on ties, NaN treated as -inf (as the kernels do)."""
    return argmax_first_exact(x.float())


def argmax_first_exact(x: torch.Tensor) -> int:
    """:func:`argmax_first` in ``x``'s own float dtype (float64 scores of the fp64 contract stay float64)."""
    x = torch.nan_to_num(x, nan=float("-inf"), posinf=float("inf"))
    return int(torch.argmax(x))


def residual_logits(target: torch.Tensor, draft_token: int, draft: torch.Tensor | None) -> torch.Tensor:
    """[V] float32 log of the residual max(p - q, 0) (up to a constant) after rejecting ``draft_token``.

    target: [V] processed target logits; draft: [V] draft logits already divided by
    the temperature, or None for a one-hot draft.
    """
    if draft is None:
        out = target.clone()
        out[draft_token] = float("-inf")
        return out
    log_p = target - torch.logsumexp(target, 0)
    log_q = draft - torch.logsumexp(draft, 0)
    ratio = torch.exp(log_q - log_p)
    return torch.where(ratio < 1, log_p + torch.log1p(-ratio), torch.full_like(log_p, float("-inf")))


# Every Gumbel noise value of the mrv2 contract is at most NOISE_HIGH: the uniform is at least 2**-33, so the
# noise is at most 22.87 (mrv2-fp64: 1 - u is at least 2**-54, so at most 37.5). A looser bound stays exact,
# only slower.
NOISE_HIGH = 23.0
NOISE_HIGH_FP64 = 38.0


def gumbel_draw(scores: torch.Tensor, seed: int, pos: int, fp64: bool = False) -> int:
    """Gumbel-max draw from unnormalised log-probabilities ``scores`` [V]: the token of
    ``argmax_first(scores + gumbel_noise(seed, pos, v))``, with NaN read as -inf; ``fp64``: the scores widened
    to float64 plus the fp64 contract's noise (``rng.gumbel_noise64``), as vLLM's ``use_fp64_gumbel``.

    Only candidates get noise. The winner scores at least what the largest ``x`` (first index) scores with its
    own noise, ``floor``; a token with ``fl(x + NOISE_HIGH) < floor`` (float32 rounding is monotone) scores
    strictly less whatever its noise, so it can neither win nor tie. On LLM rows that leaves about 1% of
    248,320 tokens; a flat row keeps them all.
    """
    x = torch.nan_to_num(scores.float(), nan=float("-inf"), posinf=float("inf"))
    if fp64:
        x = x.double()
    top = int(torch.argmax(x))
    floor = x[top] + draw_noise(seed, pos, top, fp64=fp64)
    cand = torch.nonzero(x + (NOISE_HIGH_FP64 if fp64 else NOISE_HIGH) >= floor).flatten()  # index order kept
    return int(cand[argmax_first_exact(x[cand] + draw_noise(seed, pos, cand, fp64=fp64))])


def accept_test(target: torch.Tensor, draft_token: int, draft: torch.Tensor | None, seed: int,
                pos: int, u: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(d), log u + log q(d)) for the stochastic accept test; accept iff the first is greater.

    target: [V] processed target logits; draft: [V] draft logits divided by the temperature, or None
    (one-hot draft, log q = 0); u: ``accept_uniform(seed, pos)`` when the caller computed it already.
    """
    log_p = target[draft_token] - torch.logsumexp(target, 0)
    log_q = 0.0 if draft is None else draft[draft_token] - torch.logsumexp(draft, 0)
    u = accept_uniform(torch.tensor(seed), torch.tensor(pos)) if u is None else u
    return log_p, torch.log(u) + log_q


def verify_request(logits: torch.Tensor, drafts: list[int], positions: list[int], temperature: float,
                   seed: int, draft_logits: torch.Tensor | None, fp64: bool = False) -> list[int]:
    """Tokens emitted by one request.

    logits [k+1, V] float32 processed; drafts: k ids (-1 = placeholder); positions: k+1;
    draft_logits [k, V] pre-temperature or None; ``fp64``: the draws of the ``mrv2-fp64`` contract.
    """
    k = len(drafts)
    if temperature == 0.0:
        out = []
        for i, d in enumerate(drafts):
            best = argmax_first(logits[i])
            out.append(best)
            if d < 0 or best != d:
                return out
        return out + [argmax_first(logits[k])]

    out = []
    uniforms = accept_uniform(torch.tensor(seed), torch.tensor(positions[:k], dtype=torch.int64))  # one Philox call
    for i, d in enumerate(drafts):
        if d < 0:  # placeholder: verification ends, draw from the target at this row
            return out + [gumbel_draw(logits[i], seed, positions[i], fp64)]
        q = None if draft_logits is None else draft_logits[i].float() / temperature
        log_p, threshold = accept_test(logits[i], d, q, seed, positions[i], uniforms[i])
        if bool(log_p > threshold):
            out.append(d)
            continue
        return out + [gumbel_draw(residual_logits(logits[i], d, q), seed, positions[i], fp64)]
    return out + [gumbel_draw(logits[k], seed, positions[k], fp64)]
