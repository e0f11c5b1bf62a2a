"""`replay verify` and `replay audit` on draft trees (checks/tree_verify.py, checks/audit_tree.py; docs/VERIFY.md
"Draft trees: the lossless test", docs/AUDIT.md "Draft trees").

* :func:`node_law` against the oracle's walk: one-hot children give the target's row (lossless); with draft logits
  the exact law given the drafts matches 4,000 walks (Pearson's X^2, p > 1e-4: a correct law fails 1 in 10,000).
* verify: the reference passes a SYNTHETIC step of a one-hot tree (T = 1), a draft-logit tree (T = 0.8), a greedy
  tree and a chain request, with per-node distribution checks at the root and below. Two buggy tree verifiers
  (siblings sharing one acceptance uniform; no residual update after a rejected sibling) fail, the failing check
  naming the tree and the mechanism. The verify's false-alarm rate on the SYNTHETIC tree requests, measured by
  :func:`false_alarms` (200 runs of 500 trials, 2026-12-08): 0 runs failed at alpha 1e-3, 9 at 0.05, 40 at 0.2
  (docs/VERIFY.md "Draft trees: the lossless test").
* audit: a token that leaves the tree is a ``structure`` finding naming the node; a one-hot tree walk that stops on
  an accepted child's token too; the reference's tree tokens audit clean, with no chain acceptance terms.

SYNTHETIC data throughout, except the committed fixtures/real-method-tree.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from replay_harness.checks.audit import audit_steps
from replay_harness.checks.report import VerifyReport, finalize
from replay_harness.checks.tree_verify import RULES, node_law
from replay_harness.checks.verify import verify_step
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.tree import walk_tree
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.step import Step

TREE = VERIFY_METHODS.index("tree")
ROWS = [[.25, .2, .15, .2, .1, .1], [.1, .3, .1, .25, .15, .1], [.3, .1, .2, .1, .2, .1], [.2, .2, .2, .2, .1, .1],
        [.1, .1, .35, .15, .15, .15], [.2, .1, .1, .4, .1, .1], [.3, .2, .1, .1, .2, .1], [.15, .15, .3, .2, .1, .1]]
PARENTS = [-1, -1, -1, 0, 0, 1, 3]   # the root's children nodes 0-2; node 0's 3 and 4; node 1's 5; node 3's 6
DRAFTS = [0, 1, 2, 3, 1, 0, 2]


def tree_step(reqs: list[dict], vocab: int) -> Step:
    """A SYNTHETIC step: each dict has logits [n+1, V], drafts, parents, pos0, temperature, seed, optional q [n, V]
    and tree (False: a standard chain, parents i - 1)."""
    def positions(r):
        depth: list[int] = []
        for p in r["parents"]:
            depth.append(1 if p < 0 else depth[p] + 1)
        return [r["pos0"] + d - 1 for d in depth] + [r["pos0"] + max(depth, default=0)]
    n_r = len(reqs)
    with_q = any(r.get("q") is not None for r in reqs)
    return Step(
        logits=torch.cat([r["logits"] for r in reqs]).float(),
        cu_num_logits=torch.tensor([0] + [len(r["drafts"]) + 1 for r in reqs]).cumsum(0).to(torch.int32),
        draft_token_ids=torch.tensor([d for r in reqs for d in r["drafts"] + [-1]], dtype=torch.int32),
        positions=torch.tensor([p for r in reqs for p in positions(r)], dtype=torch.int64),
        temperature=torch.tensor([r["temperature"] for r in reqs], dtype=torch.float32),
        top_k=torch.zeros(n_r, dtype=torch.int32), top_p=torch.ones(n_r), min_p=torch.zeros(n_r),
        seed=torch.tensor([r["seed"] for r in reqs], dtype=torch.int64), request_ids=torch.arange(n_r),
        draft_logits=(torch.cat([r["q"] if r.get("q") is not None else torch.zeros(len(r["drafts"]), vocab)
                                 for r in reqs]) if with_q else None),
        verify_method=torch.tensor([TREE if r.get("tree", True) else 0 for r in reqs], dtype=torch.int8),
        tree_parent=torch.tensor([p for r in reqs for p in r["parents"] + [-1]], dtype=torch.int32))


def synthetic_tree_steps(seed: int = 0) -> list[Step]:
    """SYNTHETIC (V = 6): step 0 holds a one-hot depth-3 tree at T = 1, the same tree at T = 0 and a standard chain of
    two one-hot drafts at T = 1; step 1 a draft-logit tree (the root's three children, node 0's two) at T = 0.8 (a
    step's draft logits are every request's q, so the one-hot trees sit in a step without them)."""
    g = torch.Generator().manual_seed(seed)
    onehot = torch.log(torch.tensor(ROWS))
    q = torch.randn(5, 6, generator=g)
    flat = torch.randn(6, 6, generator=g) / 2
    chain = torch.randn(3, 6, generator=g) / 2
    return [tree_step([dict(logits=onehot, drafts=DRAFTS, parents=PARENTS, pos0=30, temperature=1.0, seed=1),
                       dict(logits=onehot, drafts=DRAFTS, parents=PARENTS, pos0=70, temperature=0.0, seed=3),
                       dict(logits=chain, drafts=[1, 2], parents=[-1, 0], pos0=90, temperature=1.0, seed=4,
                            tree=False)], 6),
            tree_step([dict(logits=flat, drafts=[4, 4, 1, 2, 0], parents=[-1, -1, -1, 0, 0], pos0=50,
                            temperature=0.8, seed=2, q=q)], 6)]


class TreeBug(ReferenceSampler):
    """The reference with one tree flaw (a key of RULES other than "method"), taken out of the oracle's walk."""

    def __init__(self, flaw: str):
        self.flaw = flaw
        self.name = f"tree-bug:{flaw}"

    def verify(self, logits, drafts, positions, temperature, seed, draft_logits, method=None):
        if method is None or method.name != "tree" or temperature == 0.0:
            return super().verify(logits, drafts, positions, temperature, seed, draft_logits, method)
        return walk_tree(logits, drafts, list(method.parents), positions, temperature, seed, draft_logits,
                         sibling_keys=self.flaw != "shared-uniform", residual=self.flaw != "no-residual")[0]


def run_verify(impl, steps: list[Step], trials: int = 2000, seed: int = 0, alpha: float = 1e-3) -> VerifyReport:
    report = VerifyReport(impl=impl.name, trials=trials, seed=seed, alpha=alpha)
    for i, step in enumerate(steps):
        report.units += verify_step("syn", i, step, impl, trials, None, torch.device("cpu"), seed_key=(seed, 0))
    return finalize(report)


def test_node_law_of_one_hot_children_is_the_target_row():
    p = np.array(ROWS[0])
    for toks in ([0, 1, 2], [2], [-1, 3], [5, 0, 4, 1]):
        assert np.allclose(node_law(p, toks, [None] * len(toks)), p)
    # the buggy rules are not lossless here (the diagnosis relies on their laws differing)
    for rule in ("shared-uniform", "no-residual"):
        assert np.abs(node_law(p, [0, 1, 2], [None] * 3, rule) - p).sum() > 0.05


def test_node_law_with_draft_logits_matches_the_oracle_walk():
    from replay_harness.checks.stats import chi_square

    g = torch.Generator().manual_seed(3)
    rows = torch.randn(3, 8, generator=g)
    q = torch.randn(2, 8, generator=g)
    drafts, parents, positions = [1, 3], [-1, -1], [10, 10, 11]  # both accepted with probability < 1
    law = node_law(torch.softmax(rows[0].double(), 0).numpy(), drafts,
                   list(torch.softmax(q.double(), 1).numpy()))
    first = np.array([walk_tree(rows, drafts, parents, positions, 1.0, 500 + s, q)[0][0] for s in range(4000)])
    assert chi_square(first, law).p_value > 1e-4


def test_the_reference_passes_tree_verify_with_per_node_checks():
    report = run_verify(ReferenceSampler(), synthetic_tree_steps())
    failed = [c.message for c in report.checks if c.passed is False]
    assert not failed, failed
    units = {(u.step, u.request): u for u in report.units}
    assert all(u.status == "tested" for u in units.values())
    onehot = [c for c in units[0, 0].checks if c.kind == "distribution"]
    assert {c.position for c in onehot} >= {0, 1, 2} and all("(tree)" in c.message for c in onehot)
    assert "the target's row (lossless)" in onehot[0].message
    assert [c.kind for c in units[0, 1].checks if c.kind != "route"] == ["greedy"] and units[0, 1].checks[-1].passed
    assert all("(tree)" not in c.message for c in units[0, 2].checks)  # the chain keeps the token-wise tests
    logits = [c for c in units[1, 0].checks if c.kind == "distribution"]
    assert {c.position for c in logits} >= {0, 1} and "multi-draft rejection" in logits[0].message


@pytest.mark.parametrize("flaw", ["shared-uniform", "no-residual"])
def test_a_buggy_tree_verifier_fails_naming_the_tree_and_the_mechanism(flaw):
    report = run_verify(TreeBug(flaw), synthetic_tree_steps())
    failed = [c for c in report.checks if c.passed is False]
    assert failed and all((c.step, c.request) in ((0, 0), (1, 0)) for c in failed)
    assert any("(tree)" in c.message and RULES[flaw] in c.message for c in failed), [c.message for c in failed]


def test_a_malformed_tree_answer_fails_structure():
    class LeavesTheTree(ReferenceSampler):
        name = "leaves-the-tree"

        def verify(self, logits, drafts, positions, temperature, seed, draft_logits, method=None):
            out = super().verify(logits, drafts, positions, temperature, seed, draft_logits, method)
            return [5, 5] if method is not None and method.name == "tree" else out  # 5 is no child of the root

    report = run_verify(LeavesTheTree(), synthetic_tree_steps(), trials=20)
    bad = [c for c in report.checks if c.kind == "structure" and c.passed is False]
    assert {(c.step, c.request) for c in bad} == {(0, 0), (0, 1), (1, 0)}
    assert "not the token of a child of the root" in bad[0].message


def _audit(step: Step, tokens: list[list[int]]):
    t = torch.full((len(tokens), 4), -1, dtype=torch.int64)
    for i, row in enumerate(tokens):
        t[i, :len(row)] = torch.tensor(row)
    return audit_steps([(step, t, torch.tensor([len(x) for x in tokens]))])


def test_audit_names_a_token_that_leaves_the_tree_and_an_accepted_child_left_unwalked():
    step = synthetic_tree_steps()[0]
    ok = ReferenceSampler().sample(step)
    rows = [ok.tokens[r, :int(ok.counts[r])].tolist() for r in range(3)]
    clean = _audit(step, rows)
    assert not [f for f in clean.findings if f.kind == "structure"]
    leave = _audit(step, [[0, 4, 1]] + rows[1:])  # node 0's children hold 3 and 1: 4 leaves the tree
    msgs = [f.message for f in leave.findings if f.kind == "structure"]
    assert msgs and "not the token of a child of node 0" in msgs[0] and "[3, 1]" in msgs[0]
    stop = _audit(step, [[1, 0]] + rows[1:])  # node 1's child 5 holds 0: accepted, so the walk had to go on
    msgs = [f.message for f in stop.findings if f.kind == "structure"]
    assert msgs and "child node 5" in msgs[0]
    deep = _audit(step, [[0, 3, 2, 1]] + rows[1:])  # the whole path to node 6, then a free draw: fine
    assert not [f for f in deep.findings if f.kind == "structure"]


def test_audit_of_the_reference_tree_tokens_is_clean_and_takes_no_chain_acceptance_terms():
    triples = []
    for s in range(150):
        one = tree_step([dict(logits=torch.log(torch.tensor(ROWS)), drafts=DRAFTS, parents=PARENTS, pos0=30 + 8 * s,
                              temperature=1.0, seed=1000 + s)], 6)
        out = ReferenceSampler().sample(one)
        triples.append((one, out.tokens, out.counts))
    res = audit_steps(triples)
    assert res.ok, [f.message for f in res.findings]
    assert not [t for t in res.tests if t.test in ("accept-high", "accept-low") and t.terms]
    assert res.tokens_stochastic > 150


def false_alarms(runs: int = 200, trials: int = 500, alphas: tuple[float, ...] = (1e-3, 0.05, 0.2)) -> dict:
    """The measured false-alarm rate of verify on tree requests (docs/VERIFY.md "Draft trees: the lossless test"):
    ``runs`` verifies of the reference on the two SYNTHETIC tree requests of :func:`synthetic_tree_steps` (the one-hot
    tree at T = 1, the draft-logit tree at T = 0.8), ``trials`` each, seeds 0..runs-1; per alpha, how many runs
    failed any check. Not a test (minutes): ``python -c "import sys; sys.path.insert(0, 'tests'); import
    test_tree_checks as t; print(t.false_alarms())"``."""
    import copy

    one, logits = synthetic_tree_steps()
    steps = [one.select([0]), logits]
    failed = {a: 0 for a in alphas}
    impl = ReferenceSampler()
    for seed in range(runs):
        units = []
        for i, step in enumerate(steps):
            units += verify_step("syn", i, step, impl, trials, None, torch.device("cpu"), seed_key=(seed, 0))
        for a in alphas:
            report = finalize(VerifyReport(impl=impl.name, trials=trials, seed=seed, alpha=a,
                                           units=copy.deepcopy(units)))
            failed[a] += any(c.passed is False for c in report.checks)
    return dict(runs=runs, trials=trials, failed=failed)
