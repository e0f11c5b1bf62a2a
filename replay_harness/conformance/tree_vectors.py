"""The draft-tree conformance vector (docs/FIXTURES.md "Draft trees"): its SYNTHETIC step, its ablations and its
checks, written by ``tools/make_tree_vectors.py``.

Two steps, V = 16, ``rng_contract`` mrv2, every request of ``verify_method`` tree. The first (one-hot drafts): a tree
whose first sibling is rejected and a later one accepted (the ``seed ^ (s << 32)`` key of the s-th child), one whose
residual (p without the rejected siblings' tokens) decides the next sibling, a greedy tree whose argmax is the second
child; controls: a chain recorded as a tree, a placeholder sibling, a request with no nodes. The second (a step's
``draft_logits`` cover all its requests): two trees whose siblings carry their own q (``max(p - q, 0)``). Each candidate request is kept only when its tokens stay the same under
PERTURBATIONS random moves of every logit by up to 1e-3 (so an impl that rounds otherwise still matches it token for
token), and the step only when every ablation (:data:`ABLATIONS`) changes its tokens.

Tensors [n+1, V] float32 throughout; row 0 of a request is the root's, row 1 + i node i's (the format's layout).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.methods import STANDARD, Method
from replay_harness.oracle.tree import depths, walk_tree
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.step import Step
from replay_harness.recording.store import Emitted

RULE_ID = "tree-verification"
STATEMENT = ("draft trees: at each node the children are tried in node order, the s-th accepted iff log p(d) > log u "
             "+ log q(d) with u the Philox uniform of (seed ^ (s << 32), its position) and p the row less the earlier "
             "siblings' q (max(p - q, 0), renormalised); none accepted: the Gumbel draw at the children's position; "
             "greedy follows the child equal to the argmax")
V = 16
TREE = VERIFY_METHODS.index("tree")
PERTURBATIONS = 16


@dataclass
class TreeReq:
    """One request: logits [n+1, V], n node tokens and parents, the first node's position, T, seed, q [n, V]."""

    logits: torch.Tensor
    drafts: list[int]
    parents: list[int]
    pos0: int = 0
    temperature: float = 1.0
    seed: int = 0
    q: torch.Tensor | None = None


def build_step(reqs: list[TreeReq]) -> Step:
    """The step of ``reqs`` (positions by depth: node i at pos0 + depth - 1, the bonus row at pos0 + the depth)."""
    def positions(r: TreeReq) -> list[int]:
        d = depths(r.parents)
        return [r.pos0 + x - 1 for x in d] + [r.pos0 + max(d, default=0)]

    n = len(reqs)
    with_q = any(r.q is not None for r in reqs)
    return Step(
        logits=torch.cat([r.logits for r in reqs]).float(),
        cu_num_logits=torch.tensor([0] + [len(r.drafts) + 1 for r in reqs]).cumsum(0).to(torch.int32),
        draft_token_ids=torch.tensor([d for r in reqs for d in r.drafts + [-1]], dtype=torch.int32),
        positions=torch.tensor([p for r in reqs for p in positions(r)], dtype=torch.int64),
        temperature=torch.tensor([r.temperature for r in reqs], dtype=torch.float32),
        top_k=torch.zeros(n, dtype=torch.int32), top_p=torch.ones(n), min_p=torch.zeros(n),
        seed=torch.tensor([r.seed for r in reqs], dtype=torch.int64),
        request_ids=torch.arange(100, 100 + n, dtype=torch.int64),
        draft_logits=(torch.cat([r.q if r.q is not None else torch.zeros(len(r.drafts), V) for r in reqs]).float()
                      if with_q else None),
        verify_method=torch.full((n,), TREE, dtype=torch.int8),
        tree_parent=torch.tensor([p for r in reqs for p in r.parents + [-1]], dtype=torch.int32))


class _Walk(ReferenceSampler):
    """The reference with the tree walk's rules switched (``sibling_keys``, ``residual``: oracle/tree.py)."""

    def __init__(self, **rules: bool):
        self.rules = rules

    def verify(self, logits, drafts, positions, temperature, seed, draft_logits, method: Method = STANDARD):
        if method.name != "tree":
            return super().verify(logits, drafts, positions, temperature, seed, draft_logits, method)
        return walk_tree(logits, drafts, list(method.parents), positions, temperature, seed, draft_logits,
                         method.fp64, **self.rules)[0]


def emitted(step: Step, **rules: bool) -> Emitted:
    """The reference's answer (``rules``: a tree rule switched off, for an ablation)."""
    res = _Walk(**rules).sample(step)
    return Emitted(res.tokens.to(torch.int32), res.counts.to(torch.int32), res.routes.to(torch.int8))


def _as_chain(step: Step) -> Step:
    """Standard verification of the same rows and tokens (the tree read as a chain, node order)."""
    cu = step.cu_num_logits.tolist()
    chain = [i - 1 if i < b - a - 1 else -1 for a, b in zip(cu, cu[1:]) for i in range(b - a)]
    return dataclasses.replace(step, verify_method=torch.zeros_like(step.verify_method),
                               tree_parent=torch.tensor(chain, dtype=torch.int32))


# What replacing the method means (what, tokens of the step without it): each must change the vector's tokens.
ABLATIONS: list[tuple[str, Callable[[Step], torch.Tensor]]] = [
    ("standard verification (the nodes read as a chain)", lambda s: emitted(_as_chain(s)).tokens),
    ("every sibling keyed like the first (one shared uniform)", lambda s: emitted(s, sibling_keys=False).tokens),
    ("each sibling tested against the unmodified row (no residual)", lambda s: emitted(s, residual=False).tokens),
]


def perturbed_ok(step: Step) -> bool:
    """The tokens survive PERTURBATIONS random moves of every logit (and draft logit) by up to 1e-3."""
    want = emitted(step).tokens
    g = torch.Generator().manual_seed(11)
    for _ in range(PERTURBATIONS):
        move = {name: getattr(step, name) + (torch.rand(getattr(step, name).shape, generator=g) - 0.5) * 2e-3
                for name in ("logits", "draft_logits") if getattr(step, name) is not None}
        if not torch.equal(emitted(dataclasses.replace(step, **move)).tokens, want):
            return False
    return True


def _first(make: Callable[[int], TreeReq], changed: Callable[[Step], bool], what: str) -> TreeReq:
    """The first request make(0), make(1), ... that ``changed`` accepts alone in a step and that survives the
    perturbations."""
    for i in range(400):
        req = make(i)
        step = build_step([req])
        if changed(step) and perturbed_ok(step):
            return req
    raise SystemExit(f"{RULE_ID}: no candidate request for {what}")


def _differs(index: int) -> Callable[[Step], bool]:
    return lambda step: not torch.equal(ABLATIONS[index][1](step), emitted(step).tokens)


def build(seed: int = sum(map(ord, RULE_ID))) -> list[Step]:
    """The vector's steps (module docstring); SystemExit when a check fails."""
    g = torch.Generator().manual_seed(seed)

    def rows(n: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(n, V, generator=g) * scale

    def top(x: torch.Tensor, j: int) -> int:
        return int(x.topk(j + 1).indices[j])

    def three_siblings(i: int) -> TreeReq:  # the root's top three as siblings, the first with a child
        x = rows(5, 0.8)
        return TreeReq(x, [top(x[0], 0), top(x[0], 1), top(x[0], 2), top(x[1], 0)], [-1, -1, -1, 0],
                       pos0=10 * i + 3, seed=3000 + i)

    def with_q(i: int) -> TreeReq:  # two siblings with their own draft logits
        x, q = rows(3, 1.0), rows(2, 1.0)
        return TreeReq(x, [top(q[0], 0), top(q[1], 0)], [-1, -1], pos0=7 * i, temperature=0.9, seed=4000 + i, q=q)

    def greedy(i: int) -> TreeReq:  # the argmax is the second child, which has a child of its own
        x = rows(4, 1.5)
        return TreeReq(x, [top(x[0], 1), top(x[0], 0), top(x[2], 0)], [-1, -1, 1], temperature=0.0, pos0=i)

    reqs = [_first(three_siblings, _differs(1), "the sibling keys"),
            _first(three_siblings, _differs(2), "the residual"),
            _first(greedy, _differs(0), "a greedy tree")]
    x = rows(3, 1.5)
    reqs += [TreeReq(x, [top(x[0], 0), top(x[1], 1)], [-1, 0], pos0=50, seed=5000),  # a chain as a tree
             TreeReq(rows(3, 1.0), [-1, top(x[0], 0)], [-1, -1], pos0=60, seed=5001),  # a placeholder sibling
             TreeReq(rows(1, 1.0), [], [], pos0=70, seed=5002)]  # no nodes: a plain draw
    steps = [build_step(reqs), build_step([_first(with_q, _differs(1), "draft logits, the sibling keys"),
                                           _first(with_q, _differs(2), "draft logits, the residual")])]
    for step in steps:
        check(step)
    return steps


def check(step: Step) -> None:
    """Every ablation changes the step's tokens, and the tokens survive the perturbations (SystemExit otherwise)."""
    want = emitted(step).tokens
    for what, tokens in ABLATIONS:
        if torch.equal(tokens(step), want):
            raise SystemExit(f"{RULE_ID}: the tokens do not change with {what}")
    if not perturbed_ok(step):
        raise SystemExit(f"{RULE_ID}: the tokens change under a 1e-3 perturbation")
