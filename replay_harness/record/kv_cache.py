"""One sequence's KV cache for the record loop, rolled back to the prefix the next call shares with it.

A :class:`SequenceCache` pairs a transformers cache object (``DynamicCache``) with the token ids whose
keys and values it holds. Before each forward pass (:meth:`SequenceCache.advance`) it is cropped to the
longest prefix it shares with the new input, and only the rest is run. That is how speculative decoding
rolls back: after a step the context is ``x + accepted drafts + one new token``, the cache holds ``x +
all drafts``, so the entries of the rejected drafts (and everything after them) are dropped and those of
the accepted ones are kept. Nothing here imports transformers: the model builds the cache object.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def shared_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


class SequenceCache:
    """The KV cache of one sequence: ``kv`` (a transformers ``Cache``; per layer keys and values
    [1, kv_heads, len(ids), head_dim] in the model's dtype) and ``ids``, the tokens it holds, in order.

    Invariant: ``kv.get_seq_length() == len(ids)``. A cache serves one model (or one early-exit depth).
    """

    def __init__(self, kv: Any):
        self.kv = kv
        self.ids: list[int] = []

    @torch.inference_mode()
    def rollback(self, ids: list[int]) -> None:
        """Keep only the entries of the longest prefix shared with ``ids`` (drop rejected drafts and after)."""
        n = shared_prefix(self.ids, ids)
        if n < len(self.ids):
            self.kv.crop(n - len(self.ids))  # negative: remove that many entries from the end
            self.ids = self.ids[:n]

    def advance(self, ids: list[int], keep: int) -> list[int]:
        """Prepare a forward pass over ``ids`` that must yield logits at the last ``keep`` positions: roll
        back to the prefix shared with ``ids[:-keep]`` and return the ids still to run (at least ``keep``).

        ``ids`` count as held from here on: the caller runs the returned ids through the model with ``kv``.
        """
        if not 1 <= keep <= len(ids):
            raise ValueError(f"keep={keep} for {len(ids)} ids")
        self.rollback(ids[:len(ids) - keep])
        start = len(self.ids)
        self.ids = list(ids)
        return ids[start:]


def forward_inputs(ids: list[int], keep: int, cache: SequenceCache | None) -> dict[str, Any]:
    """A transformers forward's keyword arguments: ``input_ids`` [1, n] int64 (all of ``ids`` without a
    cache, else what the cache does not hold) and the cache to read and extend."""
    if cache is None:
        return {"input_ids": torch.tensor([ids], dtype=torch.long), "use_cache": False}
    return {"input_ids": torch.tensor([cache.advance(ids, keep)], dtype=torch.long), "cache": cache.kv,
            "use_cache": True}


@dataclass
class RequestCaches:
    """One request's caches in the record loop: the target's and, for a model drafter, the drafter's."""

    target: SequenceCache | None = None
    draft: SequenceCache | None = None

    @classmethod
    def open(cls, lm: Any, drafter: Any) -> "RequestCaches":
        """Empty caches from ``lm.new_cache()`` and ``drafter.new_cache()`` (None where there is no such
        method: n-gram drafts, test stand-ins)."""
        def new(owner: Any) -> SequenceCache | None:
            return owner.new_cache() if hasattr(owner, "new_cache") else None
        return cls(new(lm), new(drafter))

    def rollback(self, ids: list[int]) -> None:
        """After a step: keep in each cache only the prefix shared with the grown context ``ids``."""
        for cache in (self.target, self.draft):
            if cache is not None:
                cache.rollback(ids)
