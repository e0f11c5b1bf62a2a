"""The trials of `replay verify`: many copies of one request in one impl call, each with its own seed.

Tokens do not depend on batch composition, so ``Step.select([r] * N)`` holds N copies of request r (plus,
in a step that mixes requests with and without drafts, the other requests once: :func:`context_of`) and
one impl call gives N runs. A *group* of copies is (seeds [n], position shift, drafts [n, k] or None);
a call holds the same slice of every group, group after group, so copy i of the first group sits in the
same batch row in every call that starts with a group of the same size. That is what the position test
needs: same seed, same batch row, other positions (docs/VERIFY.md, "Method").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from replay_harness.impls.contract import place
from replay_harness.impls.external import sample_at
from replay_harness.recording.step import Step

MAX_ELEMS_PER_CALL = 1 << 24  # logits elements per impl call (bounds memory: rows x V)


@dataclass
class Group:
    """n copies of a request: seeds [n] int64, positions shifted by ``shift``, drafts [n, k] int64 (None:
    the recorded drafts)."""

    seeds: torch.Tensor
    shift: int = 0
    drafts: np.ndarray | None = None


@dataclass
class Outcomes:
    """What n copies emitted: tokens [n, k+1] int64 (-1 padded), counts [n] int64, routes [n] int64."""

    tokens: np.ndarray
    counts: np.ndarray
    routes: np.ndarray


def trial_seeds(rng: np.random.Generator, n: int) -> torch.Tensor:
    """[n] int64 distinct seeds drawn from ``rng``."""
    seeds = np.unique(rng.integers(-2**63, 2**63 - 1, size=n + 8, dtype=np.int64))[:n]
    rng.shuffle(seeds)
    return torch.from_numpy(seeds)


def request_rng(seed: int, source: int, step: int, request: int) -> np.random.Generator:
    """The generator of one verify unit's trials (request ``request`` of step ``step`` of the ``source``-th
    recording, --seed ``seed``): a pure function of the unit, so the statistics do not depend on which
    process verifies which step, nor in which order (`torchrun`, docs/SCALE.md)."""
    word = seed & 0xFFFFFFFFFFFFFFFF  # SeedSequence takes non-negative words; --seed may be negative
    return np.random.default_rng([word & 0xFFFFFFFF, word >> 32, source, step, request])


def context_of(step: Step, r: int) -> list[int]:
    """The requests that ride along with request r's copies in every impl call: the step's other requests
    when the step mixes requests with and without drafts, so an impl that decides per batch (the founding
    engine: any draft in the step sends every request to the greedy verifier) is seen deciding it for r too;
    none otherwise. Their outputs are ignored; a correct impl's tokens do not depend on the batch."""
    drafted = (step.num_drafts > 0).tolist()
    if len(set(drafted)) < 2:
        return []
    return [i for i in range(step.num_requests) if i != r]


def copies_step(step: Step, r: int, groups: list[Group], start: int, stop: int, context: list[int] = ()) -> Step:
    """A step holding copies start..stop-1 of every group of request r, group after group, then the
    ``context`` requests of ``step`` as recorded (one each)."""
    m = stop - start
    context = list(context)
    s = step.select([r] * (m * len(groups)) + context)
    k = int(step.num_drafts[r])
    s.seed = torch.cat([g.seeds[start:stop] for g in groups] + [step.seed[context]]).to(step.seed.dtype)
    rows = m * len(groups) * (k + 1)
    pos, ids = s.positions.clone(), s.draft_token_ids.clone()
    pv, iv = pos[:rows].view(len(groups), m, k + 1), ids[:rows].view(len(groups), m, k + 1)
    for i, g in enumerate(groups):
        pv[i] += g.shift
        if g.drafts is not None and k > 0:
            iv[i, :, :k] = torch.from_numpy(g.drafts[start:stop]).to(ids.dtype)
    s.positions, s.draft_token_ids = pos, ids
    s.request_ids = _copy_ids(step, r, m * len(groups), context)
    return s


def _copy_ids(step: Step, r: int, copies: int, context: list[int]) -> torch.Tensor:
    """Request ids for ``copies`` copies of request r then the ``context`` requests (their recorded ids): a
    step's ids are unique (docs/FIXTURES.md), and an impl (an ``exec:`` program) may check it. The copies take
    the smallest ids >= 0 that no context request holds."""
    taken = set(step.request_ids[context].tolist())
    ids: list[int] = []
    candidate = 0
    while len(ids) < copies:
        if candidate not in taken:
            ids.append(candidate)
        candidate += 1
    return torch.cat([torch.tensor(ids, dtype=torch.int64), step.request_ids[context].to(torch.int64)])


def run_groups(step: Step, r: int, impl: Any, groups: list[Group], device: torch.device, index: int | None = None,
               on_chunk: Callable[[int], None] | None = None) -> list[Outcomes]:
    """Run every group of copies of request r (all groups the same size n); one Outcomes per group.

    Calls hold at most ``MAX_ELEMS_PER_CALL`` logits elements; ``index`` is the recording's step number
    (what an external impl's messages quote). ``on_chunk(runs)`` after every call.
    """
    k = int(step.num_drafts[r])
    n = groups[0].seeds.numel()
    context = context_of(step, r)
    # copies per call: sized for two groups whatever their number, so copy i of the first group sits in
    # the same batch row in a one-group call as in a two-group one (the position test relies on it)
    per_call = max(1, MAX_ELEMS_PER_CALL // (max(2, len(groups)) * (k + 1) * max(step.vocab_size, 1)))
    parts: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in groups]
    for start in range(0, n, per_call):
        stop = min(n, start + per_call)
        res = sample_at(impl, place(copies_step(step, r, groups, start, stop, context), impl, device), index)
        t = res.tokens.detach().cpu().long()
        if t.shape[1] < k + 1:
            t = torch.cat([t, torch.full((t.shape[0], k + 1 - t.shape[1]), -1, dtype=torch.long)], 1)
        t, c, ro = t[:, :k + 1].numpy(), res.counts.detach().cpu().long().numpy(), res.routes.detach().cpu().long().numpy()
        m = stop - start
        for i in range(len(groups)):
            parts[i].append((t[i * m:(i + 1) * m], c[i * m:(i + 1) * m], ro[i * m:(i + 1) * m]))
        if on_chunk:
            on_chunk(m * len(groups))
    return [Outcomes(*(np.concatenate([p[j] for p in ps]) for j in range(3))) for ps in parts]


def same_outcome(a: Outcomes, b: Outcomes) -> np.ndarray:
    """[n] bool: copy i of ``a`` and of ``b`` emitted the same count and tokens."""
    return (a.counts == b.counts) & (a.tokens == b.tokens).all(axis=1)


def expected_runs(units_per_step, trials: int, position: bool = True) -> int:
    """Total request runs a verify will make (for progress bars): 2n per request, plus n for the position
    test (n = trials / 2 rounded up)."""
    n = (trials + 1) // 2
    return sum(units_per_step) * (3 * n if position else 2 * n)
