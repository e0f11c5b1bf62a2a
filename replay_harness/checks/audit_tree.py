"""`replay audit` for draft trees (docs/AUDIT.md "Draft trees"; the format: docs/FIXTURES.md "Draft trees"). Called
from :mod:`replay_harness.checks.audit`.

A tree request's emitted tokens must follow a path of its tree: token 0 is drawn at the root, and every emitted token
but the last is the token of a child of the node before it (the root first), the walk going on at that child; the
last token is free (the residual draw, or the draw at a leaf). Each emitted token is therefore drawn from the row of
the node it was emitted at (row ``cu[r]`` for the root, ``cu[r] + 1 + m`` for node m), not from row ``cu[r] + i`` as
in a chain: :func:`emitted_rows` gives audit those rows, so its per-token checks (support, argmax, noise) read the
right distribution. Tree requests take no chain acceptance terms (``acceptance-rate``): a tree's acceptance rate is
its siblings' multi-draft law, not ``sum min(p, q)`` per row.

Certain ``structure`` findings, naming the request and the node:

* an emitted token before the last that is no child's token of the node the walk stands at (the walk leaves the
  tree);
* without draft logits (one-hot children), a last token equal to a child's token of the node it was drawn at: that
  child was accepted (a rejected child's token leaves the residual), so the walk had to go on at it.

Siblings may hold one token when the tree has draft logits; the walk then goes on at the first of them (their rows
are the target after the same context and the same token).
"""
from __future__ import annotations

from replay_harness.oracle.methods import method_of
from replay_harness.oracle.tree import children_of


def is_tree(step, r: int) -> bool:
    """Whether request r of ``step`` is verified as a draft tree (``verify_method`` tree)."""
    return step.verify_method is not None and method_of(step, r).name == "tree"


def _node(m: int) -> str:
    return "the root" if m < 0 else f"node {m}"


def emitted_rows(col, index: int, step, r: int, rid: int, toks: list[int], may_repeat: bool = False) -> list[int]:
    """Global logits rows (ints) of request r's emitted tokens ``toks``, one per token the walk can place; a token that
    leaves the tree is a ``structure`` finding (``col.certain_finding``) and the rows stop after it (the tokens past
    it have no known row). ``may_repeat``: the last token may equal a rejected child's token (pipeline rules)."""
    a, b = int(step.cu_num_logits[r]), int(step.cu_num_logits[r + 1])
    drafts = step.draft_token_ids[a:b - 1].tolist()
    parents = step.tree_parent[a:b - 1].tolist()
    kids = children_of(parents)
    rows: list[int] = []
    node = -1
    for i, t in enumerate(toks):
        rows.append(a + 1 + node)
        nxt = next((c for c in kids[node] if drafts[c] == t and t >= 0), None)
        if i < len(toks) - 1:
            if nxt is None:
                held = [drafts[c] for c in kids[node]]
                col.certain_finding("structure", index, rid, f"tree request: token {i} ({t}) is not the token of a "
                                    f"child of {_node(node)} (its children hold {held}) yet later tokens follow: the "
                                    f"emitted tokens leave the tree")
                return rows
            node = nxt
        elif nxt is not None and step.draft_logits is None and not may_repeat:
            col.certain_finding("structure", index, rid, f"tree request: the walk stopped at {_node(node)} on token "
                                f"{i} ({t}), the token of its child node {nxt}: that child was accepted, so the walk "
                                f"had to go on at it")
    return rows
