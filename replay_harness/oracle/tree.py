"""Draft-tree verification (the oracle): multi-draft rejection sampling as SpecInfer (Miao et al., arXiv 2305.09781,
"multi-step speculative sampling") and EAGLE (Li et al., arXiv 2401.15077) publish it, keyed by the ``mrv2`` RNG
contract (docs/FIXTURES.md "Draft trees").

One request of ``verify_method`` tree holds n draft nodes and n + 1 rows (the row layout of a chain): node i's token
``drafts[i]``, its parent ``parents[i]`` (-1: the root, else an earlier node) and its position ``positions[i]``;
row 0 is the root's row (the target after the context: it scores the depth-1 nodes) and row 1 + i is node i's
row (the target after node i: it scores node i's children, and a walk that ends at node i draws from it). A chain is
the tree whose node i has parent i - 1; it emits what the standard walk (:func:`~replay_harness.oracle.walk.
verify_request`) emits, token for token.

The walk starts at the root. At node m (row 1 + m; root: row 0) with children c_0 < c_1 < ... (node order):

* **greedy** (temperature 0): emit ``argmax_first(row)``; go on at the first child whose token equals it, else stop.
* **stochastic**: ``p`` = the processed row. Child c_s (the s-th child) is accepted iff
  ``log p(d) > log u + log q(d)`` (normalised logs; q: ``draft_logits[c] / T``, one-hot without draft logits) with
  ``u = accept_uniform(seed ^ (s << 32), positions[c])``; accepted: emit d and go on at c. Rejected:
  ``p = max(p - q, 0)`` (one-hot: p with d removed), renormalised, and the next sibling is tried against it. A -1
  placeholder child is rejected and leaves p unchanged. No child accepted (or none at all): emit the Gumbel-max draw
  from p keyed by ``(seed, P0 + depth(m))``, P0 the depth-1 position (``positions[0]``): the position of the token
  drawn.

The first child of every node takes ``(seed, position)`` itself, and the draw after node m the position its children
hold, so a chain uses the standard walk's keys exactly. Siblings share a position; the ``seed ^ (s << 32)`` keys
keep their uniforms apart (one shared uniform would make the emitted law depend on the sibling order: lossy).
"""
from __future__ import annotations

import torch

from replay_harness.oracle.rng import accept_uniform
from replay_harness.oracle.walk import argmax_first, gumbel_draw, residual_logits


def sibling_seed(seed: int, s: int) -> int:
    """``seed ^ (s << 32)`` as a signed int64: the acceptance key of a node's s-th child (s = 0: ``seed``)."""
    x = (seed ^ (s << 32)) & ((1 << 64) - 1)
    return x - (1 << 64) if x >= 1 << 63 else x


def children_of(parents: list[int]) -> dict[int, list[int]]:
    """Node -> its children in node order (-1: the root's), for ``parents`` [n] (parent of node i, -1 the root)."""
    out: dict[int, list[int]] = {-1: []}
    for i, p in enumerate(parents):
        out.setdefault(i, [])
        out.setdefault(p, []).append(i)
    return out


def depths(parents: list[int]) -> list[int]:
    """Depth of each node (a child of the root: 1); parents precede children."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


def walk_tree(logits: torch.Tensor, drafts: list[int], parents: list[int], positions: list[int], temperature: float,
              seed: int, draft_logits: torch.Tensor | None, fp64: bool = False, sibling_keys: bool = True,
              residual: bool = True) -> tuple[list[int], list[int]]:
    """(tokens, nodes): the emitted tokens of one tree request and the accepted nodes (the path, root excluded).

    logits [n+1, V] float32 processed (row 0 the root's, row 1 + i node i's); drafts, parents: n ints; positions:
    n + 1 (node i's at i; the last, the bonus row's, unused); draft_logits [n, V] pre-temperature (node i's q) or
    None (one-hot drafts). ``sibling_keys`` and ``residual`` are the two rules a conformance ablation takes out
    (every sibling keyed like the first; each sibling tested against the unmodified row): True is the method.
    """
    kids = children_of(parents)
    depth = depths(parents)
    p0 = positions[0]
    greedy = temperature == 0.0
    tokens: list[int] = []
    path: list[int] = []
    node = -1
    while True:
        row = logits[node + 1]
        if greedy:
            best = argmax_first(row)
            tokens.append(best)
            nxt = next((c for c in kids[node] if drafts[c] == best), None)
            if nxt is None:
                return tokens, path
            path.append(nxt)
            node = nxt
            continue
        scores = row
        accepted = None
        for s, c in enumerate(kids[node]):
            d = drafts[c]
            if d < 0:
                continue  # a placeholder: rejected, the row unchanged
            q = None if draft_logits is None else draft_logits[c].float() / temperature
            u = accept_uniform(torch.tensor(sibling_seed(seed, s if sibling_keys else 0)), torch.tensor(positions[c]))
            log_p = scores[d] - torch.logsumexp(scores, 0)
            log_q = 0.0 if q is None else q[d] - torch.logsumexp(q, 0)
            if bool(log_p > torch.log(u) + log_q):
                accepted = c
                break
            if residual:
                scores = residual_logits(scores, d, q)
        if accepted is None:
            at = p0 + (0 if node < 0 else depth[node])
            tokens.append(gumbel_draw(scores, seed, at, fp64=fp64))
            return tokens, path
        tokens.append(drafts[accepted])
        path.append(accepted)
        node = accepted


def verify_tree(logits: torch.Tensor, drafts: list[int], parents: list[int], positions: list[int], temperature: float,
                seed: int, draft_logits: torch.Tensor | None, fp64: bool = False) -> list[int]:
    """The emitted tokens of one tree request (:func:`walk_tree`'s first half)."""
    return walk_tree(logits, drafts, parents, positions, temperature, seed, draft_logits, fp64)[0]
