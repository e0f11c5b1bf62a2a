"""Drafters for the speculative decode loop (replay_harness.record.decode.decode). All real:

* ``ngram`` — prompt lookup (no model): find the latest earlier occurrence of the
  context's last n tokens (n from ``max_n`` down to ``min_n``) and propose the
  tokens that followed it. Drafts are one-hot (no draft logits); k is ragged:
  fewer than K, or none, when the context has no match.
* ``early-exit`` — self-speculative: the target's first ``layers`` decoder layers,
  its final norm and its LM head, run autoregressively K times. Records the draft
  logits (pre-temperature). Greedy requests draft the argmax; stochastic ones
  sample from softmax(draft_logits / temperature) with a generator keyed by
  (seed, position), as stochastic verification requires drafts drawn from q.
  ``draft_sampling`` (``replay record --draft-sampling``) replaces these draws:
  greedy drafts the argmax for every request and records no draft logits (one-hot,
  as vLLM's greedy drafts); probabilistic draws each draft as the RNG contract's
  drafter does (:func:`contract_draft`; docs/FIXTURES.md "Verification methods").
* ``draft-model`` — a separate model sharing the target's vocabulary, same
  drafting rule as early exit; records the draft model's logits (pre-temperature).
  The committed pair is ``--model Qwen/Qwen2.5-Coder-1.5B-Instruct --draft-model
  Qwen/Qwen2.5-Coder-0.5B-Instruct`` (docs/RECORDING.md). There is no default: pass
  ``--draft-model`` a Hugging Face Hub repo id, a local transformers folder or .gguf
  file (or the target's own, a degenerate but real self-check where every greedy
  draft is accepted).

The model drafters keep a KV cache per request when the loop gives them one (``new_cache()``, passed
back to ``propose``): each draft then runs one token, not the whole context; the loop rolls the cache
back to the accepted prefix after the step. Without one they run the whole context every draft.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from replay_harness.errors import UsageError
from replay_harness.oracle.rng import DRAFT_NOISE_SALT
from replay_harness.oracle.walk import argmax_first, gumbel_draw
from replay_harness.record.kv_cache import SequenceCache
from replay_harness.recording.schema import DRAFT_SAMPLING

DRAFTERS = ("ngram", "early-exit", "draft-model")


@dataclass
class Proposal:
    tokens: list[int]                  # k draft ids (k may be 0)
    logits: torch.Tensor | None = None  # [k, V] pre-temperature draft logits, or None (one-hot drafts)


class NGramDrafter:
    """Prompt-lookup drafts: continue the latest earlier match of the context's last n tokens."""

    name = "ngram"
    records_draft_logits = False

    def __init__(self, min_n: int = 1, max_n: int = 3):
        if not 1 <= min_n <= max_n:
            raise UsageError(f"n-gram sizes must satisfy 1 <= min_n <= max_n (got {min_n}, {max_n})")
        self.min_n, self.max_n = min_n, max_n

    def propose(self, tokens: list[int], k: int, params: Any = None, cache: Any = None) -> Proposal:
        """Up to ``k`` drafts continuing the latest match (``params``, ``cache``: unused, no model runs)."""
        length = len(tokens)
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            pattern = tokens[length - n:]
            for start in range(length - n - 1, -1, -1):  # latest match first, never the suffix itself
                if tokens[start:start + n] == pattern:
                    follow = tokens[start + n:start + n + k]
                    if follow:
                        return Proposal(list(follow))
        return Proposal([])

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "min_n": self.min_n, "max_n": self.max_n, "draft_logits": False}


def _draft_generator(seed: int, position: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed((int(seed) * 0x9E3779B1 + int(position) * 0x85EBCA6B) % (2 ** 63))
    return g


def _choose(logits: torch.Tensor, temperature: float, seed: int, position: int) -> int:
    """argmax at temperature 0; else a draw from softmax(logits / temperature) keyed by (seed, position)."""
    x = logits.float()
    if temperature == 0.0:
        return int(torch.argmax(x))
    probs = torch.softmax(x / temperature, 0)
    return int(torch.multinomial(probs, 1, generator=_draft_generator(seed, position)))


def contract_draft(logits: torch.Tensor, temperature: float, seed: int, position: int, fp64: bool = False) -> int:
    """A probabilistic draft as the contract's drafter draws it: the argmax at temperature 0, else the Gumbel-max
    of ``logits / T`` (float32) with the noise of ``(seed, position + 2**30)``, float64 under ``mrv2-fp64``
    (``position``: that of the row verifying the draft; the re-derivation is oracle/drafts.py)."""
    if temperature == 0.0:
        return argmax_first(logits)
    scores = logits.float() / torch.tensor(temperature, dtype=torch.float32)
    return gumbel_draw(scores, seed, position + DRAFT_NOISE_SALT, fp64=fp64)


_SAMPLING = {None: "argmax at temperature 0, else multinomial from softmax(draft_logits/T) keyed by (seed, position)",
             0: "greedy: the argmax for every request, no draft logits recorded (one-hot drafts)",
             1: "probabilistic: argmax at temperature 0, else the Gumbel-max of draft_logits/T with the contract's "
                "noise keyed by (seed, position + 2**30)"}


class _ModelDrafter:
    records_draft_logits = True
    draft_sampling: int | None = None  # None: the draws above; else a code of schema.DRAFT_SAMPLING
    fp64 = False  # probabilistic draws with the mrv2-fp64 contract's noise

    def _choose(self, logits: torch.Tensor, temperature: float, seed: int, position: int) -> int:
        if self.draft_sampling is None:
            return _choose(logits, temperature, seed, position)
        if DRAFT_SAMPLING[self.draft_sampling] == "greedy":
            return argmax_first(logits)
        return contract_draft(logits, temperature, seed, position, self.fp64)

    def _sampling(self) -> dict[str, Any]:
        return {"sampling": _SAMPLING[self.draft_sampling]}

    def _next_logits(self, ids: list[int], cache: SequenceCache | None) -> torch.Tensor:
        """[V] the drafter's logits after ``ids``; ``cache``: this request's (from :meth:`new_cache`) or None."""
        raise NotImplementedError

    def propose(self, tokens: list[int], k: int, params: Any, cache: SequenceCache | None = None) -> Proposal:
        """Up to ``k`` drafts after ``tokens`` and their [k, V] pre-temperature logits (``cache``: see above)."""
        ids, rows = list(tokens), []
        temperature = float(getattr(params, "temperature", 0.0))
        seed = int(getattr(params, "seed", 0))
        for _ in range(k):
            logits = self._next_logits(ids, cache)
            rows.append(logits)
            ids.append(self._choose(logits, temperature, seed, len(ids)))
        drafts = ids[len(tokens):]
        if self.draft_sampling is not None and DRAFT_SAMPLING[self.draft_sampling] == "greedy":
            return Proposal(drafts)  # one-hot: greedy drafts carry no probabilities (vLLM's draft_sample_method)
        return Proposal(drafts, torch.stack(rows) if rows else None)


class EarlyExitDrafter(_ModelDrafter):
    """Self-speculative drafts from the target's first ``layers`` layers + its norm and LM head."""

    name = "early-exit"

    def __init__(self, lm, layers: int | None = None):
        self.lm = lm
        self.layers = layers if layers is not None else max(1, lm.num_layers // 2)
        if not 1 <= self.layers < lm.num_layers:
            raise UsageError(f"--early-exit-layers must be in [1, {lm.num_layers - 1}], got {self.layers}")

    def _next_logits(self, ids: list[int], cache: SequenceCache | None) -> torch.Tensor:
        return self.lm.early_exit_logits(ids, self.layers, cache)

    def new_cache(self) -> SequenceCache:
        return self.lm.new_cache()  # the first ``layers`` of its layers fill; it serves this depth only

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "layers": self.layers, "of_layers": self.lm.num_layers,
                "draft_logits": self.draft_sampling != 0, **self._sampling()}


def _token_table(lm) -> dict[str, int] | None:
    """The tokenizer's token -> id table (None when the model has no tokenizer, as in unit-test stubs)."""
    tok = getattr(lm, "tokenizer", None)
    return tok.get_vocab() if tok is not None else None


class DraftModelDrafter(_ModelDrafter):
    """Drafts from a separate model that shares the target's vocabulary."""

    name = "draft-model"

    def __init__(self, target, draft):
        if draft.vocab_size != target.vocab_size:
            raise UsageError(f"draft model vocabulary {draft.vocab_size} != target vocabulary {target.vocab_size}")
        if draft is not target and _token_table(draft) != _token_table(target):
            raise UsageError(f"draft model {draft.name} and target {target.name} have {draft.vocab_size}-row LM heads "
                             "but different tokenizers: draft ids would mean other tokens")
        self.draft = draft

    def _next_logits(self, ids: list[int], cache: SequenceCache | None) -> torch.Tensor:
        if cache is None:  # stand-in draft models in tests take no cache
            return self.draft.next_logits(ids, keep=1)[0]
        return self.draft.next_logits(ids, keep=1, cache=cache)[0]

    def new_cache(self) -> SequenceCache | None:
        return self.draft.new_cache() if hasattr(self.draft, "new_cache") else None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.draft.source, "draft_logits": self.draft_sampling != 0,
                **self._sampling()}


def make_drafter(name: str, lm, *, early_exit_layers: int | None = None, draft_model: str | None = None,
                 dtype: str = "float32", draft_gguf_file: str | None = None, draft_sampling: int | None = None,
                 fp64: bool = False):
    """The drafter ``name``; ``draft_sampling`` (a code of schema.DRAFT_SAMPLING, or None) and ``fp64`` set how a
    model drafter draws (module docstring; the n-gram drafter's drafts are one-hot whatever they say)."""
    drafter = _make(name, lm, early_exit_layers, draft_model, dtype, draft_gguf_file)
    if isinstance(drafter, _ModelDrafter):
        drafter.draft_sampling, drafter.fp64 = draft_sampling, fp64
    return drafter


def _make(name: str, lm, early_exit_layers: int | None, draft_model: str | None, dtype: str,
          draft_gguf_file: str | None):
    if name == "ngram":
        return NGramDrafter()
    if name == "early-exit":
        return EarlyExitDrafter(lm, early_exit_layers)
    if name == "draft-model":
        if not draft_model:
            raise UsageError("--drafter draft-model needs --draft-model REPO|PATH (a Hugging Face Hub repo id or a "
                             "local folder / .gguf sharing the target's vocabulary; docs/RECORDING.md)")
        from replay_harness.record.model import load_model

        same = draft_model == lm.name and draft_gguf_file == getattr(lm, "gguf_file", None)
        draft = lm if same else load_model(draft_model, dtype, draft_gguf_file, option="--draft-model")
        return DraftModelDrafter(lm, draft)
    raise UsageError(f"unknown drafter '{name}' ({', '.join(DRAFTERS)})")
