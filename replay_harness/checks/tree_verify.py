"""`replay verify` for draft trees (docs/VERIFY.md "Draft trees: the lossless test"; the walk: docs/FIXTURES.md "Draft
trees", :mod:`replay_harness.oracle.tree`). Called from :func:`replay_harness.checks.verify.verify_step`.

Per tree request, ``trials`` runs through the impl, each copy with its own fresh seed, the recorded tree kept (its
nodes, tokens, positions and draft logits). Each trial's emitted tokens are mapped back onto the tree: token 0 was
drawn at the root, token i + 1 at the node whose token token i is (the first such child of the node before it).
Checks, per request:

* exact: ``structure`` (a count outside 1..depth + 1, a token outside the vocabulary or not -1 after the count, an
  emitted token before the last that is no child's token of the node it was emitted at), ``greedy`` (temperature 0:
  every trial emits the oracle's greedy walk), ``route``, ``support`` (a token of probability 0 at its node);
* statistical, per node the trials reach (the root first, then depth by depth while a node is reached by enough
  trials for a test): ``distribution``, Pearson's X^2 of the tokens emitted at node m (the trials whose path reaches
  m) against their exact law (:func:`node_law`): the token either accepts one of m's children or is the draw after
  every child was rejected. For one-hot children (no draft logits: EAGLE's top-k expansion) that law **is the
  target's row of m** (the processed row: temperature, filters, per-row pipeline rules), which is what lossless
  means at m, conditionally on the path so far; with recorded draft logits it is multi-draft rejection's exact law
  given those drafts (the target's only on average over drafts drawn from q). Bins as :mod:`.stats`, Monte Carlo
  near the threshold; one family with every other statistical check (Bonferroni, :func:`.report.finalize`).

A departing node's message names the tree and the mechanism the frequencies fit best (:data:`RULES`): the exact
law of the same node under siblings that share one acceptance uniform (keys not ``seed ^ (s << 32)``), and under a
sibling tested against the unmodified row (no residual update after a rejection). The twin and position tests are
not run for tree requests (notes say so).
"""
from __future__ import annotations

import numpy as np
import torch

from replay_harness.checks import power
from replay_harness.checks.laws import softmax64
from replay_harness.checks.report import Check, UnitReport
from replay_harness.checks.stats import MIN_EXPECTED, binomial_p, chi_square
from replay_harness.checks.trials import Group, run_groups, trial_seeds
from replay_harness.oracle.methods import method_of
from replay_harness.oracle.tree import children_of, depths, verify_tree
from replay_harness.recording.step import ROUTE_CODE, expected_route, route_name

# rule name -> what a node's frequencies fitting it means ("method": the walk as docs/FIXTURES.md defines it)
RULES = {
    "method": "the method's law",
    "shared-uniform": "siblings sharing one acceptance uniform (every sibling keyed like the first, not "
                      "seed ^ (s << 32)): the accepted sibling depends on the sibling order",
    "no-residual": "no residual update after a rejected sibling (each sibling tested against the unmodified row, "
                   "the final draw from it too)",
}


def is_tree(step, r: int) -> bool:
    """Whether request r of ``step`` is verified as a draft tree (``verify_method`` tree)."""
    return step.verify_method is not None and method_of(step, r).name == "tree"


def node_law(p: np.ndarray, tokens: list[int], qs: list[np.ndarray | None], rule: str = "method") -> np.ndarray:
    """[V] float64: the exact law of the token emitted at one node of a stochastic tree walk, given its children.

    p [V] float64 the node's processed target distribution (sum 1); tokens: the children's tokens in node order (-1
    placeholders: rejected, p unchanged); qs: each child's draft distribution [V] float64, or None (one-hot).
    Child s is accepted with probability min(1, p_s(d) / q_s(d)) (p_s: the residual after the earlier rejections),
    else ``p_s+1 = max(p_s - q_s, 0)`` renormalised; after the last, the draw from the residual. ``rule``: a key of
    :data:`RULES` (the two buggy walks' exact laws, for the diagnosis).
    """
    law = np.zeros_like(p)
    res = p.copy()
    reach, high = 1.0, 0.0  # high: the largest acceptance threshold so far (one uniform shared by the siblings)
    for d, q in zip(tokens, qs):
        if d < 0:
            continue
        cur = p if rule == "no-residual" else res
        qd = 1.0 if q is None else float(q[d])
        a = min(1.0, float(cur[d]) / qd) if qd > 0 else float(cur[d] > 0)
        if rule == "shared-uniform":
            law[d] += max(0.0, a - high)
            high = max(high, a)
            reach = 1.0 - high
        else:
            law[d] += reach * a
            reach *= 1.0 - a
        if rule != "no-residual":
            onehot = np.zeros_like(p)
            onehot[d] = 1.0
            res = np.maximum(res - (onehot if q is None else q), 0.0)
            total = res.sum()
            res = res / total if total > 0 else res
    law += max(reach, 0.0) * (p if rule == "no-residual" else res)
    return law / law.sum()


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x < 0.9995 or x == 1 else f"{100 * x:.2f}%"


def _node(m: int) -> str:
    return "the root" if m < 0 else f"node {m}"


def paths(tokens: np.ndarray, counts: np.ndarray, drafts: list[int], parents: list[int], vocab: int) \
        -> tuple[list[list[int]], tuple[int, str] | None]:
    """(per trial, the node each emitted token was drawn at (-1: the root), first problem (trial, text) or None).

    tokens [n, w] int64 (-1 padded), counts [n]: the trials; a problem is a malformed answer (``structure``)."""
    kids = children_of(parents)
    top = max(depths(parents), default=0) + 1
    out: list[list[int]] = []
    for i in range(counts.size):
        c, row = int(counts[i]), tokens[i]
        if not 1 <= c <= top:
            return out, (i, f"count {c} outside 1..{top} (the tree's depth + 1)")
        if not 0 <= row[c - 1] < vocab:
            return out, (i, f"token {row[c - 1]} at position {c - 1} is outside the vocabulary 0..{vocab - 1}")
        if (row[c:] != -1).any():
            return out, (i, f"tokens after the count {c} are not -1: {row.tolist()}")
        node, at = -1, []
        for j in range(c):
            at.append(node)
            if j == c - 1:
                break
            nxt = next((m for m in kids[node] if drafts[m] == row[j] and drafts[m] >= 0), None)
            if nxt is None:
                held = [drafts[m] for m in kids[node]]
                return out, (i, f"token {j} ({row[j]}) is not the token of a child of {_node(node)} (its children "
                                f"hold {held}) yet later tokens follow: the path leaves the tree")
            node = nxt
        out.append(at)
    return out, None


def verify(label: str, index: int, step, r: int, impl, trials: int, rng: np.random.Generator, device,
                   processed: torch.Tensor, on_chunk=None) -> UnitReport:
    """Verify tree request r of ``step`` (CPU tensors) with ``trials`` runs; processed [N, V] float32 the step's rows
    after sampling params (request r's: its root's, then its nodes'). Statistical checks come back with
    ``passed=None`` (:func:`.report.finalize`)."""
    a, b = int(step.cu_num_logits[r]), int(step.cu_num_logits[r + 1])
    rows = processed[a:b]
    k, temp, name = b - a - 1, float(step.temperature[r]), impl.name
    drafts = step.draft_token_ids[a:b - 1].tolist()
    parents = step.tree_parent[a:b - 1].tolist()
    positions = step.positions[a:b].tolist()
    seeds = trial_seeds(rng, 2 * ((trials + 1) // 2))
    out = run_groups(step, r, impl, [Group(seeds, 0)], device, index, on_chunk)[0]
    unit = UnitReport(recording=label, step=index, request=r, request_id=int(step.request_ids[r]), temperature=temp,
                      num_drafts=k, expected_route=expected_route(temp, k),
                      routes=sorted({route_name(int(c)) for c in out.routes}), trials=int(out.counts.size),
                      status="tested")
    unit.notes.append("tree request: recorded tree kept in every trial; twin and position tests not run")
    where = dict(recording=label, step=index, request=r, request_id=unit.request_id)
    power.check_route(unit, where, name)
    refused = (out.routes == ROUTE_CODE["refused"]) | (out.counts == 0)
    if refused.any():
        unit.status = "refused"
        unit.notes.append(f"{name} refused the tree request in {int(refused.sum())} of {out.counts.size} trials: not "
                          f"verifiable")
        return unit
    at, problem = paths(out.tokens, out.counts, drafts, parents, step.vocab_size)
    if problem is not None:
        unit.checks.append(Check(kind="structure", position=None, n=int(out.counts.size), passed=False,
                                 message=f"{name} (tree): trial {problem[0]}: {problem[1]}", **where))
        return unit
    if temp == 0.0:
        _greedy(unit, where, out.tokens, out.counts, verify_tree(rows, drafts, parents, positions, 0.0, 0, None), name)
        power.greedy_unit(unit)
        return unit
    p = softmax64(rows)
    q = None
    if step.draft_logits is not None and k > 0:
        q = softmax64(step.draft_logits[step.draft_row_index()[a:b - 1]].double() / temp)
    if not np.isfinite(p).all() or (q is not None and not np.isfinite(q).all()):
        unit.status = "skipped"
        unit.notes.append("a target or draft-logits row gives no distribution after the temperature: no law to test")
        return unit
    _laws(unit, where, out.tokens, at, p, q, drafts, parents, name)
    if not unit.checks:
        unit.status = "untestable"
    return unit


def _greedy(unit, where: dict, tokens: np.ndarray, counts: np.ndarray, want: list[int], name: str) -> None:
    bad = np.array([int(c) != len(want) or t[:c].tolist() != want for t, c in zip(tokens, counts)])
    n = counts.size
    i = int(np.argmax(bad))
    msg = (f"greedy tree request (temperature 0): {name} emitted {tokens[i, :counts[i]].tolist()} in {int(bad.sum())} "
           f"of {n} trials where the greedy tree walk (the child equal to each row's argmax) gives {want}"
           if bad.any() else f"all {n} trials emitted the greedy tree walk {want}")
    unit.checks.append(Check(kind="greedy", position=None, n=n, passed=not bad.any(), message=msg, expected=1.0,
                             observed=float(1 - bad.mean()), **where))


def _laws(unit, where: dict, tokens: np.ndarray, at: list[list[int]], p: np.ndarray, q: np.ndarray | None,
          drafts: list[int], parents: list[int], name: str) -> None:
    """One ``distribution`` (or ``support``) check per node reached by enough trials, the root first."""
    kids = children_of(parents)
    depth = depths(parents)
    emitted: dict[int, list[int]] = {}
    for t, nodes in zip(tokens.tolist(), at):
        for j, m in enumerate(nodes):
            emitted.setdefault(m, []).append(t[j])
    for m in sorted(emitted, key=lambda m: (0 if m < 0 else depth[m], m)):
        x = np.array(emitted[m], dtype=np.int64)
        toks = [drafts[c] for c in kids[m]]
        qs = [None if q is None else q[c] for c in kids[m]]
        law = node_law(p[m + 1], toks, qs)
        what = f"{name} (tree): the token emitted at {_node(m)} (depth {0 if m < 0 else depth[m]}, {x.size} trials)"
        want = "the target's row (lossless)" if q is None else "multi-draft rejection's law given the recorded drafts"
        j = 0 if m < 0 else depth[m]
        bad = law[x] <= 0
        if bad.any():
            tok = int(x[np.argmax(bad)])
            unit.checks.append(Check(kind="support", position=j, n=x.size, passed=False, expected=0.0,
                                     observed=float(bad.mean()),
                                     message=f"{what}: token {tok} (probability 0 under {want}) in {int(bad.sum())} "
                                             f"of {x.size}{_diagnosis(x, p[m + 1], toks, qs)}", **where))
            continue
        cs = chi_square(x, law)
        if cs is None:
            unit.notes.append(f"tree: {_node(m)}: {x.size} trials reached it, too few for a chi-squared test (fewer "
                              f"than two bins expect {MIN_EXPECTED:g})")
            continue
        obs = np.bincount(x, minlength=law.size)[:law.size] / x.size
        tok = int(np.argmax(np.abs(obs - law)))
        mode = float(cs.probs.max())  # the power floor: every trial on the most likely bin
        n = x.size
        floor = binomial_p(n, n, mode) if cs.exact else max(mode ** n, _chi2_sf(n * (1 - mode) / mode, cs.df))
        unit.checks.append(Check(
            kind="distribution", position=j, n=x.size, statistic=cs.statistic, df=cs.df, p_value=cs.p_value,
            expected=float(law[tok]), observed=float(obs[tok]), bins=cs.probs, floor_rate=mode,
            floor_p=floor,
            method="binomial" if cs.exact else "chi-squared",
            message=f"{what}: token {tok} in {_pct(obs[tok])}; {want} gives {_pct(law[tok])}"
                    f"{_diagnosis(x, p[m + 1], toks, qs)}", **where))


def _chi2_sf(x: float, df: int) -> float:
    from scipy.stats import chi2

    return float(chi2.sf(x, df))


def _diagnosis(x: np.ndarray, p: np.ndarray, toks: list[int], qs: list) -> str:
    """'; a departure means ...': the rule of :data:`RULES` whose exact law fits the tokens ``x`` best (the largest
    chi-squared p-value; a law that gives an emitted token probability 0 does not fit)."""
    fits = {}
    for rule in RULES:
        law = node_law(p, toks, qs, rule)
        if (law[x] <= 0).any():
            fits[rule] = 0.0
            continue
        cs = chi_square(x, law)
        fits[rule] = 1.0 if cs is None else cs.p_value
    best = max(fits, key=lambda r: fits[r])
    if best == "method" or fits[best] == fits["method"]:
        return ("; a departure means the tree walk as run here is not lossless (none of the known tree bugs fits "
                "better than the method)")
    return (f"; a departure means the tree walk as run here is not lossless: the frequencies fit {RULES[best]} "
            f"(chi-squared p = {fits[best]:.3g} against that law, {fits['method']:.3g} against the method's)")
