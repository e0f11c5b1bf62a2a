"""The speculative decode loop that records every step (:func:`decode`): a batch of requests, each with its
own sampling parameters; every step each request gets up to K drafts (ragged), the target runs once per request
over context + drafts (what its KV cache lacks: :mod:`replay_harness.record.kv_cache`), the step is laid out in
Model Runner V2's expanded layout (:class:`replay_harness.recording.step.Step`, :func:`build_step`), sampled by a
registry impl and recorded with what it emitted and the routes taken. Requests with sampling pipeline options
(:mod:`replay_harness.record.sampling_options`) add the step's histories, lists and per-request values, and
grammar requests their rows of the grammar bitmask (:mod:`replay_harness.record.grammar`), advanced by what the
sampler emitted. Requests with a verification method (:mod:`replay_harness.record.method_options`) add the step's
verify_method, fly_* and draft_sampling fields; the step carries the run's RNG contract. A request of
``verify_method`` tree drafts a tree (:mod:`replay_harness.record.tree`): its rows are the root's and each node's,
the step carries ``tree_parent`` (chains: i - 1), and what the sampler emitted follows the accepted path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from replay_harness.oracle.tree import depths
from replay_harness.record.grammar import RequestGrammar
from replay_harness.record.kv_cache import RequestCaches
from replay_harness.record.method_options import TREE, RequestMethod, method_fields
from replay_harness.record.model import CausalLM
from replay_harness.record.sampling_options import PipelineParams, fields_on, step_inputs
from replay_harness.record.tree import check_tree_pipeline, propose_tree, tree_rows
from replay_harness.recording.step import Step


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0       # 0 = off
    top_p: float = 1.0   # 1 = off
    min_p: float = 0.0   # 0 = off
    seed: int = 0        # int64


@dataclass
class Request:
    request_id: int
    prompt: str
    prompt_ids: list[int]
    params: SamplingParams
    tokens: list[int] = field(default_factory=list)  # prompt + generated
    done: bool = False
    caches: RequestCaches | None = field(default=None, repr=False)  # its KV caches (decode opens them)
    pipeline: PipelineParams = field(default_factory=PipelineParams)  # penalties, lists, grammar, logprobs
    grammar: RequestGrammar | None = field(default=None, repr=False)  # its grammar state (pipeline.grammar)
    method: RequestMethod | None = None  # how its drafts are verified (None: no verify_method field)

    @property
    def generated(self) -> list[int]:
        return self.tokens[len(self.prompt_ids):]


@dataclass
class DecodeStats:
    steps: int = 0
    recorded: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0
    stopped: str = "steps"  # steps | eos | max-bytes
    grammar_refused: list[int] = field(default_factory=list)  # request ids whose emitted token the grammar refused


def build_step(rows: list[tuple], on: set[str] = frozenset(), stop_ids: list[int] = (),
               draft_sampling: int | None = None, rng_contract: str = "mrv2") -> Step:
    """Lay out one step (MRV2 expanded layout) from per-request (request, drafts, target rows, draft logits) or
    (request, drafts, target rows, draft logits, parents).

    target rows: [k+1, V], row i predicts position len(tokens)+i; draft logits: [k, V] or None; parents: a tree
    request's k node parents (-1 the root; rows and positions as docs/FIXTURES.md "Draft trees" lays them out), or
    None for a chain; once a request has parents the step carries ``tree_parent`` (chains: i - 1). ``on``: the
    groups of pipeline fields the step carries (:func:`~replay_harness.record.sampling_options.fields_on`);
    ``stop_ids``: the min-tokens stop ids; ``draft_sampling``: the run's (None: no field); ``rng_contract``: the
    recording's, which fixes the noise width of the impl's draws.
    """
    rows = [(*row, None) if len(row) == 4 else tuple(row) for row in rows]
    cu, drafts, positions, logits, dl, parents = [0], [], [], [], [], []
    has_dl = any(d is not None for _, ds, _, d, _ in rows if ds)
    if has_dl and any(d is None for _, ds, _, d, _ in rows if ds):
        raise ValueError("draft logits for some requests but not all: a step carries them for every verify row")
    for req, ds, lg, d, tree in rows:
        k, p0 = len(ds), len(req.tokens)
        cu.append(cu[-1] + k + 1)
        drafts.extend(ds + [-1])
        if tree is None:
            parents.extend(list(range(-1, k - 1)) + [-1])
            positions.extend(range(p0, p0 + k + 1))
        else:
            depth = depths(tree)
            parents.extend(list(tree) + [-1])
            positions.extend([p0 + x - 1 for x in depth] + [p0 + max(depth, default=0)])
        logits.append(lg)
        if has_dl and k:
            dl.append(d)
    has_tree = any(tree is not None for *_, tree in rows)
    p = [req.params for req, *_ in rows]
    pipeline = step_inputs(on, [req.pipeline for req, *_ in rows], [req.prompt_ids for req, *_ in rows],
                           [req.generated for req, *_ in rows], list(stop_ids)) if on else {}
    if "grammar" in on:
        words = (logits[0].shape[-1] + 31) // 32
        pipeline["grammar_bitmask"] = torch.cat([
            req.grammar.rows(ds) if req.grammar is not None else torch.full((len(ds) + 1, words), -1, dtype=torch.int32)
            for req, ds, *_ in rows])
    return Step(
        logits=torch.cat(logits, 0),
        cu_num_logits=torch.tensor(cu, dtype=torch.int32),
        draft_token_ids=torch.tensor(drafts, dtype=torch.int32),
        positions=torch.tensor(positions, dtype=torch.int64),
        temperature=torch.tensor([x.temperature for x in p], dtype=torch.float32),
        top_k=torch.tensor([x.top_k for x in p], dtype=torch.int32),
        top_p=torch.tensor([x.top_p for x in p], dtype=torch.float32),
        min_p=torch.tensor([x.min_p for x in p], dtype=torch.float32),
        seed=torch.tensor([x.seed for x in p], dtype=torch.int64),
        request_ids=torch.tensor([req.request_id for req, *_ in rows], dtype=torch.int64),
        draft_logits=torch.cat(dl, 0) if has_dl else None,
        tree_parent=torch.tensor(parents, dtype=torch.int32) if has_tree else None,
        rng_contract=rng_contract,
        **pipeline, **method_fields([req.method for req, *_ in rows], draft_sampling),
    )


def decode(lm: CausalLM, drafter, requests: list[Request], *, steps: int, num_drafts: int, impl,
           recorder=None, stop_at_eos: bool = True, kv_cache: bool = True,
           on_step: Callable[[int, Step, Any, bool], None] | None = None, draft_sampling: int | None = None,
           rng_contract: str = "mrv2") -> DecodeStats:
    """Decode ``requests`` together for up to ``steps`` sampler calls, recording each through ``recorder``.

    Per step and request: ``drafter.propose`` gives up to ``num_drafts`` drafts (and their
    pre-temperature draft logits for model drafters); the target runs once over context + drafts;
    ``impl.sample(step)`` decides; ``tokens[:count]`` are appended. A request that emits an
    end-of-sequence token leaves the batch (``stop_at_eos``). With a recorder, each step is recorded with
    what the impl emitted and the routes it took; the loop stops early at the recorder's byte budget.

    ``kv_cache``: each request keeps KV caches (target; drafter when it runs a model) across steps, rolled
    back after each step to the prefix shared with the grown context. False: every forward runs the whole
    context (the old way, kept for comparison).

    Requests with pipeline options: each step carries the groups of fields some request uses, the min-tokens
    stop ids being the model's EOS ids; a grammar request whose emitted token its grammar refuses (a sampler
    that broke the mask) leaves the batch and is listed in ``grammar_refused``. ``draft_sampling`` and
    ``rng_contract``: the run's (:func:`build_step`). A tree request (``method.verify_method`` tree) drafts the
    tree of :func:`~replay_harness.record.tree.propose_tree` with its ``tree_width`` over ``num_drafts`` nodes and
    gets the target's row for every node (:func:`~replay_harness.record.tree.tree_rows`); UsageError before the
    first step when a tree request has a pipeline rule a tree cannot take.
    """
    check_tree_pipeline([r.method for r in requests], [r.pipeline for r in requests])
    stats = DecodeStats()
    on = fields_on([r.pipeline for r in requests])
    stop_ids = sorted(lm.eos_token_ids) if "min_tokens" in on else []
    for req in requests:
        if not req.tokens:
            req.tokens = list(req.prompt_ids)
        if kv_cache and req.caches is None:
            req.caches = RequestCaches.open(lm, drafter)
    for i in range(steps):
        active = [r for r in requests if not r.done]
        if not active:
            stats.stopped = "eos"
            break
        rows = []
        for req in active:
            caches = req.caches or RequestCaches()
            if req.method is not None and req.method.verify_method == TREE:
                tree = propose_tree(drafter, req.tokens, req.method.tree_width, num_drafts, caches.draft)
                rows.append((req, tree.tokens, tree_rows(lm, req.tokens, tree, caches.target), None, tree.parents))
                stats.drafted += len(tree.tokens)
                continue
            proposal = drafter.propose(req.tokens, num_drafts, req.params, caches.draft) if num_drafts > 0 else None
            ds = list(proposal.tokens) if proposal else []
            cached = {} if caches.target is None else {"cache": caches.target}  # stand-in LMs take no cache
            target = lm.next_logits(req.tokens + ds, keep=len(ds) + 1, **cached)
            d_logits = proposal.logits if proposal and ds else None
            if d_logits is not None:
                d_logits = d_logits.to(target.dtype)
            rows.append((req, ds, target, d_logits))
            stats.drafted += len(ds)
        step = build_step(rows, on, stop_ids, draft_sampling, rng_contract)
        result = impl.sample(step)
        written = None
        if recorder is not None:
            written = recorder.record_sample(step, result)
            if written is not None:
                stats.recorded += 1
        for r, req in enumerate(active):
            n = int(result.counts[r])
            new = [int(t) for t in result.tokens[r, :n].tolist()]
            stats.accepted += max(n - 1, 0)
            stats.emitted += n
            req.tokens.extend(new)
            if req.caches is not None:
                req.caches.rollback(req.tokens)
            if req.grammar is not None and not req.grammar.advance(new):
                stats.grammar_refused.append(req.request_id)
                req.done = True
            if req.done or (stop_at_eos and any(t in lm.eos_token_ids for t in new)):
                req.done, req.caches = True, None  # None frees its keys and values
        stats.steps += 1
        if on_step:
            on_step(i, step, result, written is not None)
        if recorder is not None and recorder.full:
            stats.stopped = "max-bytes"
            break
    return stats
