"""`replay audit` under torchrun: the (recording, step) units spread over the ranks, the result of one process.

The audit's collector (:mod:`replay_harness.checks.audit`) carries state from step to step for every
request id: the tokens the request emitted before (the recurrence test) and the probability-rank interval
of its previous token (the rank-overlap test). A step is judged from that state, so it runs in two passes:

1. **carry** (each rank, its own steps): what a step hands on, per request id: the tokens it adds to the
   request's "seen" set and the interval of its last token (one sort per request, where the audit sorts
   once per token). The carries go to every rank (``all_gather_object``: a few numbers per request).
2. **audit** (each rank, its own steps): the step goes through a collector started from the carries of
   the recording's earlier steps, which is exactly the state a single process has there. Rank 0 joins
   the per-step terms, certain findings, notes and counts in step order and judges them as one process
   does (:func:`replay_harness.checks.audit._judge`): same tests, findings, p-values, JSON and exit code.

Pass 1 reads every step a second time and costs about a third of pass 2 (no per-token sort), so N ranks
audit about N / 1.35 times as fast as one process. Recordings without engine tokens (derived) have
nothing to audit and are handled by rank 0 alone, as a single process handles them.
"""
from __future__ import annotations

from typing import Any, Callable

from replay_harness.checks.audit import FINDING_P, NOTE_P, _Collector, _judge, audit_recording
from replay_harness.checks.findings import AuditResult
from replay_harness.compare import distributed
from replay_harness.recording.store import Recording

COUNTS = ("steps", "request_steps", "tokens_stochastic", "tokens_greedy", "refused")  # AuditResult's counters
Carry = dict[int, tuple[list[int], tuple[float, float]]]  # request id -> (tokens seen, last token's interval)


class _CarryCollector(_Collector):
    """Pass 1: the audit's walk over one step, keeping only what the step hands on to the next ones."""

    def __init__(self) -> None:
        super().__init__(AuditResult(path="", synthetic=False))
        self.added: dict[int, list[int]] = {}
        self.last: dict[int, tuple] = {}

    def _noise(self, index: int, rid: int, i: int, scope: str, probs, is_max, t: int, hit: bool) -> None:
        self.added.setdefault(rid, []).append(t)
        self.last[rid] = (index, rid, i, scope, probs, is_max, t, hit)  # replaced by the request's next token

    def carry(self) -> Carry:
        """Per request id: the tokens added to its seen set, and its last token's interval (the audit's own
        ``_noise`` run on that token alone, from an empty state)."""
        scratch = _Collector(AuditResult(path="", synthetic=False))
        for args in self.last.values():
            _Collector._noise(scratch, *args)
        return {rid: (self.added[rid], scratch.prev_interval[rid]) for rid in self.last}


def _walk(col: _Collector, record) -> _Collector:
    """``record`` (a StepRecord) through the audit's walk."""
    col.step(record.index, record.step, record.emitted.tokens.long(), record.emitted.counts)
    return col


def _states(carries: dict[tuple[int, int], Carry], mine: list[tuple[int, int]]) -> dict[tuple[int, int], tuple]:
    """Per unit of ``mine`` (in order), the collector state (seen, prev_interval) one process has when it
    reaches that step: the carries of the recording's earlier steps, folded in one pass per recording."""
    states, at = {}, (-1, 0)
    seen: dict[int, set[int]] = {}
    prev: dict[int, tuple[float, float]] = {}
    for r, i in mine:
        if at[0] != r:
            seen, prev, at = {}, {}, (r, 0)
        for j in range(at[1], i):
            for rid, (tokens, interval) in carries[(r, j)].items():
                seen.setdefault(rid, set()).update(tokens)
                prev[rid] = interval
        at = (r, i)
        states[(r, i)] = ({rid: set(tokens) for rid, tokens in seen.items()}, dict(prev))  # the walk adds to them
    return states


def _join(result: AuditResult, parts: list[_Collector]) -> _Collector:
    """One collector holding the parts' terms, findings and counts in step order (``result`` is its result)."""
    col = _Collector(result)
    for part in parts:
        for name, terms in part.terms.items():
            col.terms[name].extend(terms)
        for kind, items in part.certain.items():
            col.certain.setdefault(kind, []).extend(items)
        col.boundary.extend(part.boundary)
        col.near_ties.extend(part.near_ties)
        col.forced.extend(part.forced)
        for name in COUNTS:
            setattr(result, name, getattr(result, name) + getattr(part.result, name))
    return col


def audit_units(paths: list[str], *, nan: str = "error", finding_p: float = FINDING_P, note_p: float = NOTE_P,
                on_step: Callable[[], None] | None = None) -> list[AuditResult] | None:
    """The AuditResult of every recording, in one process (``audit_recording`` each, ``on_step`` after every
    step) or sharded over torchrun's ranks (rank 0 gets them, the other ranks None)."""
    if not distributed.launched():
        return [audit_recording(p, nan=nan, finding_p=finding_p, note_p=note_p, on_step=on_step) for p in paths]
    recs = [Recording(p, nan=nan) for p in paths]
    units = [(r, i) for r, rec in enumerate(recs) if rec.has_engine_tokens for i in range(len(rec))]
    sizes = distributed.unit_sizes([recs[r].files[i] for r, i in units])

    def body(shard: distributed.Shard) -> Any:
        mine = [units[u] for u in shard.mine(sizes)]
        carried, failed = {}, None
        try:
            for unit, record in shard.steps(recs, units=mine):
                carried[unit] = _walk(_CarryCollector(), record).carry()
        except Exception as e:  # the other ranks must still meet this rank at the all-gather
            failed = e
        shared = shard.share(None if failed else carried)
        if failed is not None:
            raise failed
        if any(part is None for part in shared):  # another rank failed: it reports (run_sharded)
            return []
        states = _states({unit: c for part in shared for unit, c in part.items()}, mine)
        parts = []
        for (r, i), record in shard.steps(recs, units=mine):
            col = _Collector(AuditResult(path=str(paths[r]), synthetic=recs[r].synthetic))
            col.seen, col.prev_interval = states.pop((r, i))
            _walk(col, record)
            col.seen, col.prev_interval = {}, {}  # not needed on rank 0
            parts.append(((r, i), col))
        return parts

    values = distributed.run_sharded(body)
    if values is None:
        return None
    by_unit = dict(part for parts in values for part in parts)
    results = []
    for r, (path, rec) in enumerate(zip(paths, recs)):
        if not rec.has_engine_tokens:
            results.append(audit_recording(path, nan=nan, finding_p=finding_p, note_p=note_p))
            continue
        result = AuditResult(path=str(path), synthetic=rec.synthetic)
        _judge(result, _join(result, [by_unit[(r, i)] for i in range(len(rec))]), finding_p, note_p)
        results.append(result)
    return results
