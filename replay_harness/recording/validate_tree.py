"""The value rules of draft trees (docs/FIXTURES.md "Draft trees"): ``tree_parent`` and what a ``tree`` request's
other fields must say. ``validate_pipeline`` calls :func:`check_trees` from its verification-method checks (names,
dtypes and shapes passed, ``verify_method`` codes in range); every problem goes to ``bad(field, message)``, one line
naming the request (and node) like the rest of a step's."""
from __future__ import annotations

import torch

from replay_harness.recording.schema import VERIFY_METHODS

TREE = VERIFY_METHODS.index("tree")
# Rules of the sampling pipeline that count the drafts before a row (a chain's, not a tree's ancestors) or report
# per slot: a tree request must leave them off (docs/FIXTURES.md "Draft trees", "Refused").
_OFF = (("repetition_penalty", 1.0), ("frequency_penalty", 0.0), ("presence_penalty", 0.0), ("min_tokens", 0),
        ("logprobs", -1))


def check_trees(t: dict, k: torch.Tensor, bad) -> None:
    """Every rule of "Draft trees" on a step's tensors ``t`` (k [R] drafts per request)."""
    method = t.get("verify_method")
    if method is not None and bool(((method < 0) | (method >= len(VERIFY_METHODS))).any()):
        return  # the codes' own problem is reported already
    tree = (method.long() == TREE) if method is not None else torch.zeros_like(k, dtype=torch.bool)
    if "tree_parent" not in t:
        if bool(tree.any()):
            bad("verify_method", f"request {int(torch.nonzero(tree)[0])} uses tree, which needs tree_parent")
        return
    cu = t["cu_num_logits"].long().tolist()
    parent = t["tree_parent"].long().tolist()
    drafts = t["draft_token_ids"].long().tolist()
    positions = t["positions"].long().tolist()
    for r in range(len(cu) - 1):
        a, b = cu[r], cu[r + 1]
        if parent[b - 1] != -1:
            bad("tree_parent", f"bonus row {b - 1} (request {r}) must hold -1")
            return
        nodes = parent[a:b - 1]
        if not bool(tree[r]):
            if nodes != list(range(-1, len(nodes) - 1)):
                i = next(i for i, p in enumerate(nodes) if p != i - 1)
                bad("tree_parent", f"request {r} node {i}: parent {nodes[i]}, but the request is not a tree "
                                   f"(verify_method {VERIFY_METHODS[int(method[r])] if method is not None else 'absent'}"
                                   f"): its parents are the chain i - 1")
                return
            continue
        if not _check_tree(r, nodes, drafts[a:b - 1], positions[a:b], "draft_logits" in t, bad):
            return
        _check_tree_request(t, r, bad)
    _check_path(t, tree, cu, parent, drafts, bad)


def _check_tree(r: int, nodes: list[int], drafts: list[int], positions: list[int], has_q: bool, bad) -> bool:
    """Parents precede children, placeholders are leaves, depth and position agree, siblings' tokens differ."""
    depth: list[int] = []
    for i, p in enumerate(nodes):
        if not -1 <= p < i:
            bad("tree_parent", f"request {r} node {i}: parent {p} (a node's parent is -1, the root, or an earlier node)")
            return False
        if p >= 0 and drafts[p] < 0:
            bad("tree_parent", f"request {r} node {i}: its parent {p} is a -1 placeholder (placeholders are leaves)")
            return False
        depth.append(1 if p < 0 else depth[p] + 1)
        want = positions[0] + depth[i] - 1
        if positions[i] != want:
            bad("positions", f"request {r} node {i}: position {positions[i]}, expected {want} (the first node's "
                             f"position + depth {depth[i]} - 1)")
            return False
    last = positions[0] + max(depth, default=0)
    if positions[-1] != last:
        bad("positions", f"request {r}: bonus row position {positions[-1]}, expected {last} (the first node's "
                         "position + the tree's depth)")
        return False
    if not has_q:
        seen: set[tuple[int, int]] = set()
        for i, (p, d) in enumerate(zip(nodes, drafts)):
            if d >= 0 and (p, d) in seen:
                bad("draft_token_ids", f"request {r} node {i}: token {d} repeats a sibling's (one-hot drafts: "
                                       "siblings hold distinct tokens)")
                return False
            seen.add((p, d))
    return True


def _check_tree_request(t: dict, r: int, bad) -> None:
    """A tree request draws no contract drafts and leaves the rules that count a chain's drafts off."""
    if "draft_sampling" in t and int(t["draft_sampling"][r]) == 1:
        bad("draft_sampling", f"request {r}: a tree request's drafts are not the contract drafter's (probabilistic "
                              "drafts are defined for chains only)")
    for name, off in _OFF:
        if name in t and t[name][r].item() != off:
            bad(name, f"request {r}: {t[name][r].item()} on a tree request (rules that count a chain's drafts or "
                      f"report per slot are off for trees: {off})")
    if "bad_words_lengths" in t and "cu_bad_words_lengths" in t:
        cu = t["cu_bad_words_lengths"].long()
        if int(cu[r + 1]) > int(cu[r]):
            bad("bad_words_token_ids", f"request {r}: bad words on a tree request (they count a chain's drafts)")


def _check_path(t: dict, tree: torch.Tensor, cu: list[int], parent: list[int], drafts: list[int], bad) -> None:
    """Every emitted token but the last of a tree request is a node's, each a child of the one before (the path)."""
    tokens, counts = t["emitted_tokens"].long().tolist(), t["emitted_counts"].long().tolist()
    for r in torch.nonzero(tree).flatten().tolist():
        a, b = cu[r], cu[r + 1]
        frontier = {-1}
        for slot in range(max(counts[r] - 1, 0)):
            frontier = {i for i in range(b - 1 - a) if parent[a + i] in frontier and drafts[a + i] == tokens[r][slot]}
            if not frontier:
                bad("emitted_tokens", f"request {r} slot {slot}: token {tokens[r][slot]} is no child's of the path "
                                      "before it (every emitted token but the last is an accepted node's)")
                return
