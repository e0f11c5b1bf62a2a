"""Draft trees (docs/FIXTURES.md "Draft trees"): the oracle's multi-draft rejection (replay_harness/oracle/tree.py), the
format's tree_parent and its value rules (recording/validate_tree.py), the reference impl replaying tree steps, and the
kernels refusing them by name.

* A chain recorded as a tree (node i's parent i - 1) emits what the standard walk emits, token for token (greedy,
  stochastic, draft logits, placeholders, mrv2-fp64), through the oracle and through the `reference` impl.
* Small trees worked by hand from the published rule (the uniforms and draws recomputed here from oracle/rng.py).
* Lossless: the emitted law equals the target's. Test: Pearson's X^2 of the emitted sequences (one-hot tree: the
  whole path) or first tokens (iid drafts from q) against the exact law, p-value by Monte Carlo under the multinomial
  law (checks/stats.py: valid, P(p <= t) <= t); fails at p < 1e-3, so a correct walk fails with probability at most
  1e-3 per test (measured over 40 seed bases of the one-hot test, 1500 trials each: no p below 0.05, the smallest
  0.058, 2026-12-08).
  The same test fails the two plausible bugs (siblings sharing one uniform; siblings tested against the unmodified
  row) at p < 1e-6.

SYNTHETIC data (seeded random rows, V <= 32), except the committed fixtures/real-method-tree (SmolLM2-135M).
"""
from __future__ import annotations

import dataclasses
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import cli, load_tool

from replay_harness.checks.stats import chi_square, monte_carlo_p
from replay_harness.conformance.tree_vectors import ABLATIONS
from replay_harness.impls import get_impl
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.rng import accept_uniform
from replay_harness.oracle.tree import sibling_seed, verify_tree, walk_tree
from replay_harness.oracle.walk import argmax_first, gumbel_draw, verify_request
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.step import ROUTE_CODE, Step
from replay_harness.recording.store import Emitted, Recording, RecordingWriter, step_tensors
from replay_harness.recording.validate import check_step

REPO = Path(__file__).resolve().parent.parent
TREE = VERIFY_METHODS.index("tree")
THRESHOLD = 1e-3
TRIALS = 1500  # seeds per law test


def chain_case(g: torch.Generator, k: int, v: int = 32, with_q: bool = False, placeholder: bool = False):
    """(logits [k+1, V], drafts, positions, draft_logits or None): drafts mostly near the top of their row."""
    logits = torch.randn(k + 1, v, generator=g) * 2
    drafts = [int(torch.topk(logits[i], 3).indices[int(torch.randint(3, (1,), generator=g))]) for i in range(k)]
    if placeholder and k:
        drafts[int(torch.randint(k, (1,), generator=g))] = -1
    pos0 = int(torch.randint(0, 1 << 40, (1,), generator=g))
    q = torch.randn(k, v, generator=g) * 2 if with_q and k else None
    return logits, drafts, [pos0 + i for i in range(k + 1)], q


@pytest.mark.parametrize("temperature,with_q,placeholder,fp64", [
    (1.0, False, False, False), (0.7, True, False, False), (1.0, False, True, False), (0.0, False, True, False),
    (1.3, True, True, True)])
def test_a_chain_as_a_tree_emits_the_standard_walk_token_for_token(temperature, with_q, placeholder, fp64):
    g = torch.Generator().manual_seed(int(temperature * 10) + 3 * with_q + 7 * placeholder)
    for trial in range(60):
        k = trial % 5
        logits, drafts, positions, q = chain_case(g, k, with_q=with_q, placeholder=placeholder)
        seed = int(torch.randint(-(1 << 62), 1 << 62, (1,), generator=g))
        rows = logits / temperature if temperature else logits
        want = verify_request(rows, drafts, positions, temperature, seed, q, fp64=fp64)
        got = verify_tree(rows, drafts, list(range(-1, k - 1)), positions, temperature, seed, q, fp64=fp64)
        assert got == want, (trial, drafts)


def tree_step(reqs: list[dict], vocab: int) -> Step:
    """A SYNTHETIC step of tree requests: each dict has logits [n+1, V], drafts, parents, pos0, temperature, seed and
    optionally tree (False: standard, parents must be the chain) and q [n, V]."""
    def positions(r):
        depth = []
        for p in r["parents"]:
            depth.append(1 if p < 0 else depth[p] + 1)
        return [r["pos0"] + d - 1 for d in depth] + [r["pos0"] + max(depth, default=0)]
    sizes = [len(r["drafts"]) + 1 for r in reqs]
    with_q = any(r.get("q") is not None for r in reqs)
    n_r = len(reqs)
    return Step(
        logits=torch.cat([r["logits"] for r in reqs]).float(),
        cu_num_logits=torch.tensor([0] + sizes).cumsum(0).to(torch.int32),
        draft_token_ids=torch.tensor([d for r in reqs for d in r["drafts"] + [-1]], dtype=torch.int32),
        positions=torch.tensor([p for r in reqs for p in positions(r)], dtype=torch.int64),
        temperature=torch.tensor([r["temperature"] for r in reqs], dtype=torch.float32),
        top_k=torch.zeros(n_r, dtype=torch.int32), top_p=torch.ones(n_r), min_p=torch.zeros(n_r),
        seed=torch.tensor([r["seed"] for r in reqs], dtype=torch.int64),
        request_ids=torch.arange(n_r, dtype=torch.int64),
        draft_logits=(torch.cat([r["q"] if r.get("q") is not None else torch.zeros(len(r["drafts"]), vocab)
                                 for r in reqs]) if with_q else None),
        verify_method=torch.tensor([TREE if r.get("tree", True) else 0 for r in reqs], dtype=torch.int8),
        tree_parent=torch.tensor([p for r in reqs for p in r["parents"] + [-1]], dtype=torch.int32))


def test_the_reference_replays_a_chain_tree_step_as_the_standard_step():
    g = torch.Generator().manual_seed(5)
    reqs = []
    for i in range(12):
        k = i % 4
        logits, drafts, _, q = chain_case(g, k, with_q=i % 3 == 0, placeholder=i % 5 == 1)
        reqs.append(dict(logits=logits, drafts=drafts, parents=list(range(-1, k - 1)), pos0=17 * i,
                         temperature=(0.0, 1.0, 0.8)[i % 3], seed=1000 + i, q=q))
    tree = tree_step(reqs, 32)
    standard = dataclasses.replace(tree, verify_method=None, tree_parent=None)
    a, b = ReferenceSampler().sample(tree), ReferenceSampler().sample(standard)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.counts, b.counts) and torch.equal(a.routes, b.routes)


def onehot_tree(v: int = 6):
    """A SYNTHETIC depth-3 tree: the root's children tokens 0, 1, 2 (nodes 0-2); node 0's children 3 and 1 (nodes
    3, 4); node 1's child 0 (node 5); node 3's child 2 (node 6). Each row gives the drafts moderate mass."""
    parents = [-1, -1, -1, 0, 0, 1, 3]
    drafts = [0, 1, 2, 3, 1, 0, 2]
    logits = torch.log(torch.tensor([[.25, .2, .15, .2, .1, .1], [.1, .3, .1, .25, .15, .1], [.3, .1, .2, .1, .2, .1],
                                     [.2, .2, .2, .2, .1, .1], [.1, .1, .35, .15, .15, .15], [.2, .1, .1, .4, .1, .1],
                                     [.3, .2, .1, .1, .2, .1], [.15, .15, .3, .2, .1, .1]]))
    return logits, drafts, parents


def test_greedy_follows_the_child_equal_to_the_argmax():
    logits, drafts, parents = onehot_tree()
    positions = [50, 50, 50, 51, 51, 51, 52, 53]
    # root argmax 0 -> node 0; node 0's row argmax 1 -> node 4 (token 1), a leaf; node 4's row argmax 3: the bonus
    assert walk_tree(logits, drafts, parents, positions, 0.0, 1, None) == ([0, 1, 3], [0, 4])
    # root argmax 3 matches no child: the walk stops there
    x = logits.clone()
    x[0, 3] = 5.0
    assert walk_tree(x, drafts, parents, positions, 0.0, 1, None) == ([3], [])


def _u(seed: int, s: int, pos: int) -> float:
    return float(accept_uniform(torch.tensor(sibling_seed(seed, s)), torch.tensor(pos)))


def test_siblings_are_tried_in_order_each_with_its_own_uniform_against_the_residual():
    """Worked by hand: at the root p = row 0; child s is accepted iff p_s(d) > u_s with u_s keyed by seed ^ (s << 32)
    and p_s the row with the earlier siblings' tokens removed and renormalised; else the draw from p_3."""
    logits, drafts, parents = onehot_tree()
    positions = [50, 50, 50, 51, 51, 51, 52, 53]
    p = torch.softmax(logits[0], 0).double()
    seen = set()
    for seed in range(400):
        rest, outcome = p.clone(), None
        for s, d in enumerate((0, 1, 2)):
            if rest[d] / rest.sum() > _u(seed, s, 50):
                outcome = ("accept", s)
                break
            rest[d] = 0.0
        tokens, path = walk_tree(logits, drafts, parents, positions, 1.0, seed, None)
        if outcome is None:
            masked = logits[0].clone()
            masked[[0, 1, 2]] = -math.inf
            assert tokens == [gumbel_draw(masked, seed, 50)] and path == []
            seen.add("draw")
        else:
            assert path[0] == outcome[1] and tokens[0] == drafts[outcome[1]]
            seen.add(outcome)
    assert seen == {("accept", 0), ("accept", 1), ("accept", 2), "draw"}


def test_a_placeholder_sibling_is_rejected_and_counts_in_the_keys():
    """Children [-1, 4] of the root: the placeholder leaves p unchanged; token 4 is the second child (s = 1)."""
    logits = torch.log(torch.tensor([[.1, .1, .1, .1, .5, .1], [.2] * 5 + [0.0], [.1, .5, .1, .1, .1, .1]]))
    for seed in range(40):
        tokens = verify_tree(logits, [-1, 4], [-1, -1], [7, 7, 8], 1.0, seed, None)
        if 0.5 > _u(seed, 1, 7):
            assert tokens == [4, gumbel_draw(logits[2], seed, 8)]
        else:
            masked = logits[0].clone()
            masked[4] = -math.inf
            assert tokens == [gumbel_draw(masked, seed, 7)]


def test_draft_logits_take_the_residual_max_p_minus_q():
    """Two siblings with their own q: after rejecting the first, the second is tested against max(p - q_0, 0)."""
    p = torch.tensor([.4, .3, .2, .1])
    q0, q1 = torch.tensor([.7, .1, .1, .1]), torch.tensor([.25, .5, .15, .1])
    logits = torch.log(torch.stack([p, torch.full((4,), .25), torch.full((4,), .25)]))
    q = torch.log(torch.stack([q0, q1]))
    res = torch.clamp(p - q0, min=0)
    res = res / res.sum()  # [0, .2/.3, .1/.3, 0]
    hits = 0
    for seed in range(200):
        tokens = verify_tree(logits, [0, 1], [-1, -1], [3, 3, 4], 1.0, seed, q)
        if float(p[0] / q0[0]) > _u(seed, 0, 3):
            assert tokens[0] == 0
        elif float(res[1] / q1[1]) > _u(seed, 1, 3):
            assert tokens[0] == 1
            hits += 1
        else:
            final = torch.log(torch.clamp(res - q1, min=0))
            assert tokens == [gumbel_draw(final, seed, 3)]
    assert hits > 10


def _sequence_law(logits: torch.Tensor, drafts: list[int], parents: list[int]) -> dict[tuple, float]:
    """The exact law of the emitted sequence of a one-hot tree walk that is lossless: at node m emit x ~ row(m); go
    on at the child whose token is x, else stop."""
    probs = torch.softmax(logits.double(), 1)
    law: dict[tuple, float] = {}

    def visit(node: int, prefix: tuple, mass: float) -> None:
        for x, px in enumerate(probs[node + 1].tolist()):
            child = next((c for c, p in enumerate(parents) if p == node and drafts[c] == x), None)
            if child is None:
                law[prefix + (x,)] = law.get(prefix + (x,), 0.0) + mass * px
            else:
                visit(child, prefix + (x,), mass * px)
    visit(-1, (), 1.0)
    return law


def _p_value(observed: list, law: dict, exact: bool = True) -> float:
    """Pearson's X^2 p-value of ``observed`` outcomes against ``law``: by Monte Carlo (4000 simulations; valid, at
    least 1/4001), or (``exact`` False) the chi-squared approximation, to show a bug's p far below the threshold."""
    if any(o not in law for o in observed):
        return 0.0  # an outcome the law gives probability 0
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    probs = np.array([law[k] for k in keys])
    obs = np.array([index[o] for o in observed])
    chi = chi_square(obs, probs)
    if not exact:
        return chi.p_value
    return monte_carlo_p(chi.statistic, chi.n, chi.probs, np.random.default_rng(0), 4000)[0]


def _onehot_p_value(base: int, trials: int, exact: bool = True, **rules) -> float:
    logits, drafts, parents = onehot_tree()
    positions = [90, 90, 90, 91, 91, 91, 92, 93]
    law = _sequence_law(logits, drafts, parents)
    seen = [tuple(walk_tree(logits, drafts, parents, positions, 1.0, base + s, None, **rules)[0])
            for s in range(trials)]
    return _p_value(seen, law, exact)


def test_a_one_hot_tree_emits_the_target_law_along_the_whole_path():
    assert _onehot_p_value(10_000, TRIALS) >= THRESHOLD


@pytest.mark.parametrize("bug", [{"sibling_keys": False}, {"residual": False}])
def test_the_law_test_fails_siblings_sharing_a_uniform_or_skipping_the_residual(bug):
    assert _onehot_p_value(10_000, TRIALS, exact=False, **bug) < 1e-6


def test_iid_drafts_from_q_emit_the_target_first_token():
    """SpecInfer's setting: three root children drawn independently from q (their q rows recorded); the first token
    follows p whatever the children drawn."""
    p = torch.tensor([.35, .25, .2, .1, .1])
    q = torch.tensor([.1, .2, .4, .2, .1])
    logits = torch.log(torch.stack([p] + [torch.full((5,), .2)] * 3))
    ql = torch.log(q).expand(3, 5)
    rng = np.random.default_rng(3)
    first = []
    for s in range(TRIALS):
        drafts = rng.choice(5, size=3, p=q.numpy()).tolist()
        first.append((verify_tree(logits, drafts, [-1, -1, -1], [4, 4, 4, 5], 1.0, 20_000 + s, ql)[0],))
    assert _p_value(first, {(x,): float(px) for x, px in enumerate(p.tolist())}) >= THRESHOLD


# ----------------------------------------------------------------------------- the format
def _problems(step: Step, emitted: Emitted | None = None) -> list[str]:
    if emitted is None:  # the valid example's tokens: a broken step may not replay at all
        res = ReferenceSampler().sample(_example())
        emitted = Emitted(res.tokens.to(torch.int32), res.counts, res.routes)
    return [f"{p.field}: {p.message}" for p in check_step(step_tensors(step, emitted), step.logits.shape[1],
                                                          file=Path("x/step-000000.safetensors"), step=0)
            if not p.warning]


def _example(**change) -> Step:
    logits, drafts, parents = onehot_tree()
    return tree_step([dict(logits=logits, drafts=drafts, parents=parents, pos0=40, temperature=1.0, seed=3),
                      dict(logits=logits[:3], drafts=[2, 1], parents=[-1, 0], pos0=9, temperature=0.0, seed=4,
                           tree=False)], 6) if not change else dataclasses.replace(_example(), **change)


def _with(step: Step, name: str, index: int, value) -> Step:
    t = getattr(step, name).clone()
    t[index] = value
    return dataclasses.replace(step, **{name: t})


def test_a_valid_tree_step_has_no_problem():
    assert _problems(_example()) == []


@pytest.mark.parametrize("edit,expected", [
    (lambda s: dataclasses.replace(s, tree_parent=None), "verify_method: request 0 uses tree, which needs tree_parent"),
    (lambda s: _with(s, "tree_parent", 3, 5), "tree_parent: request 0 node 3: parent 5 (a node's parent is -1"),
    (lambda s: _with(s, "tree_parent", 7, 0), "tree_parent: bonus row 7 (request 0) must hold -1"),
    (lambda s: _with(s, "tree_parent", 9, -1), "tree_parent: request 1 node 1: parent -1, but the request is not a "
                                               "tree (verify_method standard)"),
    (lambda s: _with(s, "positions", 4, 42), "positions: request 0 node 4: position 42, expected 41"),
    (lambda s: _with(s, "positions", 7, 44), "positions: request 0: bonus row position 44, expected 43"),
    (lambda s: _with(s, "draft_token_ids", 4, 3), "draft_token_ids: request 0 node 4: token 3 repeats a sibling's"),
    (lambda s: _with(s, "draft_token_ids", 0, -1), "tree_parent: request 0 node 3: its parent 0 is a -1 placeholder"),
    (lambda s: dataclasses.replace(s, draft_sampling=torch.tensor([1, 0], dtype=torch.int8),
                                   draft_logits=torch.zeros(9, 6)), "draft_sampling: request 0: a tree request"),
    (lambda s: dataclasses.replace(s, logprobs=torch.tensor([2, -1], dtype=torch.int32),
                                   logprobs_mode=torch.zeros(2, dtype=torch.int8)), "logprobs: request 0: 2 on a tree"),
])
def test_each_tree_rule_is_one_line_naming_the_field(edit, expected):
    problems = _problems(edit(_example()))
    assert problems and problems[0].startswith(expected), problems


def test_an_emitted_token_off_the_tree_is_refused():
    step = _example()
    res = ReferenceSampler().sample(step)
    tokens = res.tokens.to(torch.int32).clone()
    tokens[0, :3] = torch.tensor([1, 1, 4])  # 1 is node 1's token, but node 1 has no child 1
    problems = _problems(step, Emitted(tokens, torch.tensor([3, int(res.counts[1])], dtype=torch.int32), res.routes))
    assert problems == ["emitted_tokens: request 0 slot 1: token 1 is no child's of the path before it (every "
                        "emitted token but the last is an accepted node's)"]


def test_a_tree_recording_round_trips_and_replays_through_the_reference(tmp_path):
    step = _example()
    res = ReferenceSampler().sample(step)
    with RecordingWriter(tmp_path / "rec", vocab_size=6, synthetic=True, source={"synthetic": True}) as w:
        w.write_step(step, Emitted(res.tokens.to(torch.int32), res.counts, res.routes))
    back = Recording(tmp_path / "rec")[0].step
    assert torch.equal(back.tree_parent, step.tree_parent) and int(back.verify_method[0]) == TREE
    assert torch.equal(ReferenceSampler().sample(back.select([1, 0])).tokens, res.tokens[[1, 0]])
    code, out, err = cli("run", str(tmp_path / "rec"), "--impl", "reference")
    assert code == 0, out + err


def test_the_kernels_refuse_a_tree_step_by_name():
    result = get_impl("stochastic").sample(_example())
    assert result.routes.tolist() == [ROUTE_CODE["refused"]] * 2
    assert any("tree" in note for note in result.notes), result.notes


def test_argmax_first_is_the_greedy_root_choice():  # the greedy walk uses the kernels' first-index tie rule
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [0.0] * 4, [0.0] * 4])
    assert verify_tree(logits, [2, 1], [-1, -1], [0, 0, 1], 0.0, 0, None) == [1, argmax_first(logits[2])]


def docs_example() -> Step:
    """The worked example of docs/FIXTURES.md "Draft trees" (SYNTHETIC)."""
    rows = torch.log(torch.tensor([[.05, .05, .3, .05, .05, .4, .05, .05], [.1, .1, .1, .1, .1, .1, .1, .3],
                                   [.05, .05, .05, .5, .05, .1, .1, .1], [.2, .1, .1, .1, .1, .1, .1, .2]]))
    return tree_step([dict(logits=rows, drafts=[5, 2, 7], parents=[-1, -1, 0], pos0=40, temperature=1.0, seed=7)], 8)


def test_the_docs_worked_example():
    step = docs_example()
    assert step.positions.tolist() == [40, 40, 41, 42]
    assert round(float(accept_uniform(torch.tensor(7), torch.tensor(40))), 4) == 0.7363
    assert round(float(accept_uniform(torch.tensor(7 ^ (1 << 32)), torch.tensor(40))), 4) == 0.2838
    res = ReferenceSampler().sample(step)
    assert res.tokens.tolist() == [[2, 3, -1, -1]] and res.counts.tolist() == [2]
    greedy = ReferenceSampler().sample(dataclasses.replace(step, temperature=torch.zeros(1)))
    assert greedy.tokens.tolist() == [[5, 7, 0, -1]] and greedy.counts.tolist() == [3]


def test_the_cpp_header_writes_the_docs_example(tmp_path):
    """examples/cpp_recorder/tree_step.cpp (Step::draft_trees) writes the page's worked example: valid, schema minor
    2, the reference replays it token for token."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed: the C++ recorder example cannot be built")
    exe = tmp_path / "tree_step"
    subprocess.run(["g++", "-O1", "-std=c++17", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(REPO / "examples" / "cpp_recorder" / "tree_step.cpp")], check=True)
    subprocess.run([str(exe), str(tmp_path / "rec")], check=True, capture_output=True)
    rec = Recording(tmp_path / "rec")
    step = rec[0].step
    assert step.tree_parent.tolist() == [-1, -1, 0, -1] and step.verify_method.tolist() == [TREE]
    assert rec.manifest["schema_minor"] == 2
    assert torch.equal(rec[0].emitted.tokens.long(), ReferenceSampler().sample(step).tokens)
    assert torch.equal(rec[0].emitted.tokens.long(), ReferenceSampler().sample(docs_example()).tokens)


def test_the_tree_vector_pins_the_rules_and_the_kernels_refuse_it(tmp_path):
    """tools/make_tree_vectors.py: every ablation changes the vector's tokens (the builder refuses otherwise), the
    reference replays it, `stochastic` refuses every request by name."""
    out = load_tool("make_tree_vectors").write_vector(tmp_path / "tree-verification")
    rec = Recording(out)
    assert len(rec) == 2 and all(bool((r.step.verify_method == TREE).all()) for r in rec)
    code, text, err = cli("run", str(out), "--impl", "reference")
    assert code == 0, text + err
    for record in rec:
        for what, ablate in ABLATIONS:
            assert not torch.equal(record.emitted.tokens.long(), ablate(record.step).long()), what
        refused = get_impl("stochastic").sample(record.step)
        assert set(refused.routes.tolist()) == {ROUTE_CODE["refused"]} and "tree" in " ".join(refused.notes)


def test_the_committed_real_tree_fixture():
    """fixtures/real-method-tree (SmolLM2-135M as its own drafter, top-2 siblings; tools/make_method_fixtures.py):
    the first sibling rejected, the second accepted; the same rows read as a chain emit other tokens; the kernels
    refuse it by name."""
    rec = Recording(REPO / "fixtures" / "real-method-tree")
    record = rec[0]
    step = record.step
    assert not rec.manifest["synthetic"] and step.tree_parent.tolist() == [-1, -1, -1]
    got = ReferenceSampler().sample(step)
    assert torch.equal(got.tokens.to(torch.int32), record.emitted.tokens)
    assert record.emitted.tokens[0, 0] == step.draft_token_ids[1] and int(record.emitted.counts[0]) == 2
    chain = ReferenceSampler().sample(dataclasses.replace(step, verify_method=None,
                                                          tree_parent=torch.tensor([-1, 0, -1], dtype=torch.int32)))
    assert not torch.equal(chain.tokens, got.tokens)
    assert "tree" in " ".join(get_impl("stochastic").sample(step).notes)


def test_replay_record_refuses_a_tree_with_the_ngram_drafter_in_one_line(tmp_path):
    """`replay record --verify-method tree` draws its trees from a model drafter (docs/RECORDING.md "Draft trees";
    tests/test_record_tree.py records them): the n-gram drafter, the default, has no sibling candidates."""
    code, out, err = cli("record", "abc", "def", "--verify-method", "standard,tree", "--steps", "1", "--out",
                         str(tmp_path / "rec"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "tree" in err, err


def test_the_recorder_api_takes_tree_parent_and_refuses_a_bad_tree_in_one_line(tmp_path):
    """Recorder.record_step(verify_method=["tree"], tree_parent=[...]): written and replayed; a parent after its
    child is an InputError naming file, step and field."""
    from replay_harness.errors import InputError
    from replay_harness.recording.recorder import Recorder

    step = docs_example()
    args = dict(logits=step.logits, cu_num_logits=[0, 4], draft_token_ids=[5, 2, 7, -1], positions=[40, 40, 41, 42],
                temperature=[1.0], seed=[7], emitted_tokens=[[2, 3]], verify_method=["tree"])
    with Recorder(tmp_path / "rec", 8, rng_contract="mrv2", synthetic=True) as rec:
        rec.record_step(**args, tree_parent=[-1, -1, 0, -1])
        with pytest.raises(InputError) as bad:
            rec.record_step(**args, tree_parent=[-1, 2, 0, -1])
    assert "step-000001" in str(bad.value) and bad.value.field == "tree_parent" and "\n" not in str(bad.value)
    code, out, err = cli("run", str(tmp_path / "rec"), "--impl", "reference")
    assert code == 0, out + err
