"""What reads recordings learns draft trees (docs/FIXTURES.md "Draft trees"): `replay synth` (recording/derive.py)
reads each tree row as the row it is, `replay diff` (recording/recording_diff.py) blames a different tree shape on
the drafts rule, `replay inspect` (cli/inspect_tree.py) counts a tree's acceptance by depth, not by position.

The steps here are SYNTHETIC: the worked example of FIXTURES.md "Draft trees" (V = 8) beside a greedy chain request.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from helpers import main_inproc
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.derive import scored_by_row
from replay_harness.recording.recording_diff import input_differences, rule_of
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.step import Step
from replay_harness.recording.store import Emitted, Recording, RecordingWriter

TREE = VERIFY_METHODS.index("tree")
REPO = Path(__file__).resolve().parent.parent
ROWS = [[.05, .05, .3, .05, .05, .4, .05, .05], [.1, .1, .1, .1, .1, .1, .1, .3],
        [.05, .05, .05, .5, .05, .1, .1, .1], [.2, .1, .1, .1, .1, .1, .1, .2]]
CHAIN = [[0, 5, 0, 0, 0, 0, 0, 0], [0, 0, 6, 0, 0, 0, 0, 0], [7, 0, 0, 0, 0, 0, 0, 0]]  # argmaxes 1, 2, 0


def _step(parents=(-1, -1, 0)) -> Step:
    """SYNTHETIC: request 0 the FIXTURES.md tree (T = 1, seed 7: emits [2, 3]), request 1 a greedy chain of drafts
    [1, 2] that accepts both (emits [1, 2, 0])."""
    depth = [1, 1, 2] if list(parents) != [-1, 0, 1] else [1, 2, 3]
    return Step(logits=torch.cat([torch.tensor(ROWS).log(), torch.tensor(CHAIN, dtype=torch.float32)]),
                cu_num_logits=torch.tensor([0, 4, 7], dtype=torch.int32),
                draft_token_ids=torch.tensor([5, 2, 7, -1, 1, 2, -1], dtype=torch.int32),
                positions=torch.tensor([39 + d for d in depth] + [40 + max(depth), 10, 11, 12]),
                temperature=torch.tensor([1.0, 0.0]), top_k=torch.zeros(2, dtype=torch.int32), top_p=torch.ones(2),
                min_p=torch.zeros(2), seed=torch.tensor([7, 0]), request_ids=torch.tensor([0, 1]),
                verify_method=torch.tensor([TREE, 0], dtype=torch.int8),
                tree_parent=torch.tensor(list(parents) + [-1, -1, 0, -1], dtype=torch.int32))


def _write(path: Path, steps: list[Step]) -> Path:
    with RecordingWriter(path, vocab_size=8, synthetic=True, source={"synthetic": True}) as w:
        for step in steps:
            res = ReferenceSampler().sample(step)
            w.write_step(step, Emitted(res.tokens.to(torch.int32), res.counts, res.routes))
    return path


def test_the_example_emits_what_fixtures_md_says():
    res = ReferenceSampler().sample(_step())
    assert res.tokens[0, :int(res.counts[0])].tolist() == [2, 3]
    assert res.tokens[1, :int(res.counts[1])].tolist() == [1, 2, 0]


def test_synth_reads_each_tree_row_as_the_row_it_is():
    """Row cu + 1 + m is node m's: it verified m's first child (a leaf's: none) at P0 + depth(m); the tree layout's
    own draft and position on that row are node m + 1's. Chains keep theirs."""
    draft, positions = scored_by_row(_step())
    assert draft.tolist() == [5, 7, -1, -1, 1, 2, -1]
    assert positions.tolist() == [40, 41, 41, 42, 10, 11, 12]
    as_chain = dataclasses.replace(_step((-1, 0, 1)), verify_method=torch.tensor([TREE, 0], dtype=torch.int8))
    assert scored_by_row(as_chain)[0].tolist() == [5, 2, 7, -1, 1, 2, -1]  # a chain read as a tree: unchanged
    assert scored_by_row(as_chain)[1].tolist() == [40, 41, 42, 43, 10, 11, 12]


def test_synth_from_a_tree_recording_validates_and_replays(tmp_path):
    src = _write(tmp_path / "src", [_step()])
    out = tmp_path / "derived"
    code, _, err = main_inproc("synth", str(src), "--out", str(out), "--batch", "2", "--drafts", "1", "--vocab", "64",
                               "--num-steps", "2")
    assert code == 0, err
    assert main_inproc("validate", str(out))[0] == 0
    step = Recording(out)[0].step
    assert step.tree_parent is None and step.verify_method is None  # derived steps are chains
    # request 0 takes pool rows 0 and 1: the root's row with node 0's token 5, then node 0's row (bonus)
    assert int(step.draft_token_ids[0]) == 5 and step.positions[:2].tolist() == [40, 41]
    code, stdout, err = main_inproc("run", str(out), "--impl", "reference", "--against", "recorded", "--json")
    assert code == 0, err


def test_diff_blames_another_tree_shape_on_the_drafts_rule():
    assert rule_of("tree_parent") == "drafts"
    a = _step()
    b = dataclasses.replace(a, tree_parent=torch.tensor([-1, -1, 1, -1, -1, 0, -1], dtype=torch.int32))
    found = input_differences(a, 0, b, 0, 1e-3, 1e-2)
    assert [(d.rule, d.field) for d in found] == [("drafts", "tree_parent")]
    assert input_differences(a, 1, b, 1, 1e-3, 1e-2) == []  # the chain request's rows are the same


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("rec") / "mixed", [_step()])


def _inspect(path: Path) -> dict:
    code, stdout, err = main_inproc("inspect", str(path), "--json")
    assert code == 0, err
    return json.loads(stdout)["recordings"][0]


def test_inspect_counts_a_tree_by_depth_and_chains_by_position(mixed):
    """The tree (3 nodes, depth 2) accepted node 1 at depth 1 and nothing deeper; the chain accepted both drafts. A
    chain's reading of the tree would say 3 positions and a rate of 0.5 at position 1."""
    s = _inspect(mixed)
    assert s["acceptance_rate_by_position"] == {"0": 1.0, "1": 1.0}
    assert s["acceptance_rate_by_depth"] == {"1": 1.0, "2": 0.0} and s["tree_request_steps"] == 1
    code, table, _ = main_inproc("inspect", str(mixed))
    assert code == 0 and "tree acceptance by depth" in table and "1: 1.00, 2: 0.00" in table


def test_inspect_of_a_tree_only_recording_says_so_and_chains_are_as_before():
    s = _inspect(REPO / "fixtures" / "real-method-tree")
    assert s["acceptance_rate_by_position"] == {} and s["acceptance_rate_by_depth"] == {"1": 1.0}
    code, table, _ = main_inproc("inspect", str(REPO / "fixtures" / "real-method-tree"))
    assert "no chain drafts (tree requests: by depth)" in table
    chain = _inspect(REPO / "fixtures" / "real-method-block")
    assert "acceptance_rate_by_depth" not in chain and "tree_request_steps" not in chain
