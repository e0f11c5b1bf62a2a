"""`replay inspect`'s acceptance numbers for recordings that hold draft trees (docs/FIXTURES.md "Draft trees").

A tree request's k nodes are not k positions: siblings share a depth and at most one node per depth is accepted,
so the chain's "acceptance by position" (request-steps with k > i that accepted more than i drafts,
replay_harness/recording/summary.py) misreads it. :func:`split_acceptance` counts the two apart: chains by position
as before, trees **by depth** (depth d, from 1: tree request-steps whose tree reaches depth d, and among them those
whose accepted path reaches it, ``emitted_counts - 1 >= d``). A recording without tree requests is left as
``summarize`` made it.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from replay_harness.oracle.tree import depths
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.store import Recording

TREE = VERIFY_METHODS.index("tree")


def split_acceptance(rec: Recording, summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` (``summarize(rec)``; steps already checked) with, when some request uses ``tree``:
    ``acceptance_rate_by_position`` over chain requests only, ``acceptance_rate_by_depth`` over tree requests
    (module docstring) and ``tree_request_steps``. Keys are strings (JSON), depths from 1, positions from 0."""
    chain_acc, chain_off, tree_acc, tree_off = Counter(), Counter(), Counter(), Counter()
    trees = 0
    for i in range(len(rec)):
        t, _ = rec.read_tensors(i)
        if "verify_method" not in t:
            codes = [0] * (t["cu_num_logits"].numel() - 1)
        else:
            codes = t["verify_method"].long().tolist()
        cu = t["cu_num_logits"].long().tolist()
        counts = t["emitted_counts"].long().tolist()
        parents = t["tree_parent"].long().tolist() if "tree_parent" in t else None
        for r, code in enumerate(codes):
            a, k = counts[r] - 1, cu[r + 1] - cu[r] - 1
            if code == TREE:
                trees += 1
            if a < 0:  # no token recorded (a derived step, a refusal)
                continue
            if code == TREE and parents is not None:
                for d in range(1, max(depths(parents[cu[r]:cu[r + 1] - 1]), default=0) + 1):
                    tree_off[d] += 1
                    tree_acc[d] += int(a >= d)
            else:
                for pos in range(k):
                    chain_off[pos] += 1
                    chain_acc[pos] += int(a > pos)
    if not trees:
        return summary
    return {**summary, "tree_request_steps": trees,
            "acceptance_rate_by_position": {str(p): chain_acc[p] / chain_off[p] for p in sorted(chain_off)},
            "acceptance_rate_by_depth": {str(d): tree_acc[d] / tree_off[d] for d in sorted(tree_off)}}
