"""Draft trees in `replay record` (``--verify-method tree``; docs/RECORDING.md "Draft trees", docs/FIXTURES.md
"Draft trees"): the tree drafter (:func:`propose_tree`) and the target's rows for every node (:func:`tree_rows`).

The tree (EAGLE's top-k at the root, each branch extended as a chain): the drafter's ``W`` likeliest tokens after
the context (``--tree-width``; ties: the lower id first) are the root's children, and the ``K`` nodes of the budget
(``--num-drafts``) are dealt round robin over the ``W`` branches, each branch extended by the drafter's argmax: branch
j holds ``K // W + (j < K mod W)`` nodes (W = min(W, K)). Nodes are numbered breadth first (depth 1 first, branches in
rank order), so parents precede children. Every node is chosen deterministically from the context, so the drafts
are one-hot (no draft logits): the case the tree walk (replay_harness/oracle/tree.py) is lossless for.

Example (W = 2, K = 5): branches of 3 and 2 nodes; tokens ``[a0, b0, a1, b1, a2]``, parents ``[-1, -1, 0, 1, 2]``,
depths ``[1, 1, 2, 2, 3]``.

The target's rows: row 0 the target after the context, row 1 + i the target after the context and node i's path
(its ancestors and itself), each row conditioned on its own path only. The paths to the leaves run as one batch
([L, D] ids, L leaves, D the tree's depth, right-padded) on a copy of the request's target KV cache grown over the
context (:class:`~replay_harness.record.kv_cache.SequenceCache`; without one, [L, context + D] ids); a node's row is
read from the first leaf path through it. Models without a transformers module (test stand-ins) run one path at a
time through ``next_logits``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from replay_harness.errors import UsageError
from replay_harness.oracle.tree import depths
from replay_harness.oracle.walk import argmax_first
from replay_harness.record.method_options import TREE

# A tree request's pipeline options that must stay off (docs/FIXTURES.md "Draft trees", "Refused": they count a
# chain's drafts or report per slot), with their off values; a grammar is refused too (its mask per node would need
# the grammar state along each path).
_OFF = (("repetition_penalty", 1.0), ("frequency_penalty", 0.0), ("presence_penalty", 0.0), ("min_tokens", 0),
        ("logprobs", None), ("bad_words", []), ("grammar", None))


def check_tree_pipeline(methods: list[Any], pipelines: list[Any]) -> None:
    """UsageError (one line naming the option and request) when a tree request (its ``methods`` entry, a
    :class:`~replay_harness.record.method_options.RequestMethod` or None, has ``verify_method`` tree) has a pipeline
    option on (its ``pipelines`` entry, a :class:`~replay_harness.record.sampling_options.PipelineParams`) that a
    tree cannot take (``_OFF``). Checked before the model loads (record/pipeline.py) and again by the decode loop."""
    for r, (method, pipeline) in enumerate(zip(methods, pipelines)):
        if method is None or method.verify_method != TREE:
            continue
        for name, off in _OFF:
            if getattr(pipeline, name) != off:
                option = "--" + name.replace("_", "-") if name != "grammar" else "--json-schema/--regex"
                raise UsageError(f"{option}: on for request {r}, which uses --verify-method tree (a tree's rows are "
                                 "not a chain's: docs/FIXTURES.md 'Draft trees')")


@dataclass
class TreeProposal:
    """One request's draft tree: ``tokens`` [n] node tokens and ``parents`` [n] (-1: the root), in node order."""

    tokens: list[int]
    parents: list[int]

    def paths(self) -> list[list[int]]:
        """The node indices from depth 1 down to each leaf, leaves in node order."""
        has_child = set(self.parents)
        out = []
        for leaf in (i for i in range(len(self.tokens)) if i not in has_child):
            path, node = [], leaf
            while node >= 0:
                path.append(node)
                node = self.parents[node]
            out.append(path[::-1])
        return out

    def depths(self) -> list[int]:
        """Each node's depth (a child of the root: 1)."""
        return depths(self.parents)


def branch_lengths(width: int, budget: int) -> list[int]:
    """Nodes per branch: ``budget`` dealt round robin over ``min(width, budget)`` branches (module docstring)."""
    w = min(width, budget)
    return [budget // w + (1 if j < budget % w else 0) for j in range(w)] if w > 0 else []


def top_tokens(logits: torch.Tensor, w: int) -> list[int]:
    """The ``w`` largest entries of ``logits`` [V] (float32 compare), ties broken by the lower id."""
    order = torch.sort(logits.float(), descending=True, stable=True).indices
    return [int(t) for t in order[:w]]


def propose_tree(drafter: Any, tokens: list[int], width: int, budget: int, cache: Any = None) -> TreeProposal:
    """The draft tree after ``tokens`` (module docstring) from a model drafter (one with ``_next_logits(ids,
    cache)``, as :mod:`replay_harness.record.drafters`' early-exit and draft-model drafters); ``cache``: the
    request's drafter cache (rolled back between branches by its shared-prefix rule) or None."""
    if not hasattr(drafter, "_next_logits"):
        raise UsageError(f"--verify-method tree: the {getattr(drafter, 'name', '?')} drafter has no distribution to "
                         "take the top tokens of (use --drafter early-exit or draft-model)")
    lengths = branch_lengths(width, budget)
    if not lengths:
        return TreeProposal([], [])
    firsts = top_tokens(drafter._next_logits(list(tokens), cache), len(lengths))
    branches = []
    for first, length in zip(firsts, lengths):
        ids = list(tokens) + [first]
        for _ in range(length - 1):
            ids.append(argmax_first(drafter._next_logits(ids, cache)))
        branches.append(ids[len(tokens):])
    out, index = TreeProposal([], []), {}
    for d in range(max(lengths)):
        for j, branch in enumerate(branches):
            if d < len(branch):
                index[j, d] = len(out.tokens)
                out.tokens.append(branch[d])
                out.parents.append(index[j, d - 1] if d else -1)
    return out


def tree_rows(lm: Any, tokens: list[int], tree: TreeProposal, cache: Any = None) -> torch.Tensor:
    """[n + 1, V] the target's rows for ``tree`` after ``tokens`` (row 0 the root's, row 1 + i node i's; dtype as
    computed). ``cache``: the request's target :class:`~replay_harness.record.kv_cache.SequenceCache` (it ends
    holding the context only) or None."""
    cached = {} if cache is None else {"cache": cache}
    root = lm.next_logits(list(tokens), keep=1, **cached)
    if not tree.tokens:
        return root
    paths = tree.paths()
    if hasattr(lm, "model"):
        by_path = _batched(lm, tokens, tree, paths, cache)
    else:  # stand-ins: one path at a time
        by_path = [lm.next_logits(list(tokens) + [tree.tokens[i] for i in p], keep=len(p) + 1, **cached)[1:]
                   for p in paths]
        if cache is not None:
            cache.rollback(list(tokens))
    rows: list[torch.Tensor | None] = [None] * len(tree.tokens)
    for p, logits in zip(paths, by_path):
        for depth, node in enumerate(p):
            if rows[node] is None:
                rows[node] = logits[depth]
    return torch.cat([root, torch.stack(rows)])


@torch.inference_mode()
def _batched(lm: Any, tokens: list[int], tree: TreeProposal, paths: list[list[int]], cache: Any) -> torch.Tensor:
    """[L, D, V]: the target after each path's prefixes (depth 1 .. D), one forward over the L paths."""
    depth = max(len(p) for p in paths)
    ids = torch.tensor([[tree.tokens[i] for i in p] + [tree.tokens[p[-1]]] * (depth - len(p)) for p in paths],
                       dtype=torch.long)  # right padding: a causal row never reads the pad after it
    if cache is None:
        context = torch.tensor([list(tokens)] * len(paths), dtype=torch.long)
        out = lm.model(input_ids=torch.cat([context, ids], 1), use_cache=False, logits_to_keep=depth)
        return out.logits
    kv = copy.deepcopy(cache.kv)  # the context's keys and values, one copy per path
    kv.batch_repeat_interleave(len(paths))
    return lm.model(input_ids=ids, cache=kv, use_cache=True, logits_to_keep=depth).logits
