"""One decode step of the sampler, in Model Runner V2's expanded layout.

Request ``r`` owns the ``1 + k_r`` consecutive logits rows
``[cu_num_logits[r], cu_num_logits[r+1])``: ``k_r`` draft-verify rows, then its
bonus row. ``k_r == 0`` is a plain sample. docs/FIXTURES.md is the normative
description of every field and :mod:`replay_harness.recording.schema` tables them;
this module only holds them and decides the expected route.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from replay_kernels.batch import SamplingBatch, route_of
from replay_harness.recording.schema import (  # noqa: F401  (re-exported: the route table's old home)
    FIELD, PER_REQUEST_FIELDS, RAGGED_FIELDS, ROUTE_CODE, ROUTES, UNKNOWN_ROUTE, route_name)


def select_ragged(values: torch.Tensor, cu: torch.Tensor, requests: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, cu) of a ragged list holding only ``requests``' entries, in that order."""
    bounds = cu.tolist()
    pieces = [values[bounds[r]:bounds[r + 1]] for r in requests]
    sizes = torch.tensor([0] + [p.numel() for p in pieces], dtype=cu.dtype)
    return (torch.cat(pieces) if pieces else values[:0]), torch.cumsum(sizes, 0).to(cu.dtype)


def expected_route(temperature: float, num_drafts: int) -> str:
    """The route a request must take: temperature 0 is greedy; drafts mean verify (the one rule:
    ``replay_kernels.batch.route_of``)."""
    return route_of(temperature, num_drafts)


@dataclass
class Step(SamplingBatch):
    """Inputs of one sampler call as a recording holds them: the fields and row layout of
    :class:`replay_kernels.batch.SamplingBatch` (R requests, N = sum(1 + k_r) rows, V vocabulary; shapes and
    dtypes there and in docs/FIXTURES.md), ``request_ids`` [R] int64 always set (a step file holds them), plus
    what the harness does with a step: move it, select requests, the expected route of each request.

    How drafts were verified and drawn (docs/FIXTURES.md "Verification methods"; None: standard, greedy drafts):
    verify_method [R] int8 (schema.VERIFY_METHODS), fly_window [R] int32, fly_entropy_threshold [R] float32,
    fly_entropy_top_k [R] int32 (FLy's), draft_sampling [R] int8 (schema.DRAFT_SAMPLING), tree_parent [N] int32
    (draft trees: row cu[r] + i holds node i's parent, -1 the root; docs/FIXTURES.md "Draft trees"). ``rng_contract``:
    the recording's contract (manifest), which fixes the noise width of every draw."""

    verify_method: torch.Tensor | None = None
    fly_window: torch.Tensor | None = None
    fly_entropy_threshold: torch.Tensor | None = None
    fly_entropy_top_k: torch.Tensor | None = None
    draft_sampling: torch.Tensor | None = None
    tree_parent: torch.Tensor | None = None
    rng_contract: str = "mrv2"

    def to(self, device: torch.device | str) -> "Step":
        moved = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return Step(**{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in moved.items()})

    def select(self, requests: list[int]) -> "Step":
        """A step holding only the given requests, in the given order (batch-composition tests)."""
        cu = self.cu_num_logits.tolist()
        rows = [j for r in requests for j in range(cu[r], cu[r + 1])]
        rows_t = torch.tensor(rows, dtype=torch.long)
        req_t = torch.tensor(requests, dtype=torch.long)
        sizes = torch.tensor([cu[r + 1] - cu[r] for r in requests], dtype=torch.int32)
        new_cu = torch.cat([torch.zeros(1, dtype=torch.int32), torch.cumsum(sizes, 0).to(torch.int32)])
        draft_logits = None
        if self.draft_logits is not None:
            d_idx = self.draft_row_index()[rows_t]
            draft_logits = self.draft_logits[d_idx[d_idx >= 0]]
        per_req = {n: getattr(self, n)[req_t.to(getattr(self, n).device)] for n in PER_REQUEST_FIELDS
                   if getattr(self, n) is not None}
        for name in RAGGED_FIELDS:
            if getattr(self, name) is not None:
                cu_name = FIELD[name].ragged
                per_req[name], per_req[cu_name] = select_ragged(getattr(self, name), getattr(self, cu_name), requests)
        for name in ("grammar_bitmask", "tree_parent"):  # per row
            if getattr(self, name) is not None:
                per_req[name] = getattr(self, name)[rows_t.to(getattr(self, name).device)]
        return Step(logits=self.logits[rows_t], cu_num_logits=new_cu, draft_token_ids=self.draft_token_ids[rows_t],
                    positions=self.positions[rows_t], draft_logits=draft_logits, rng_contract=self.rng_contract,
                    **per_req)



@dataclass
class SampleResult:
    """What a sampler emitted for one step.

    tokens [R, max_k+1] int64  emitted ids, -1 after the last emitted one
    counts [R]          int32  emitted tokens per request (accepted drafts + 1; 0 when refused)
    routes [R]          int8   route codes (see ROUTES)
    notes               list[str]  human remarks, e.g. why requests were refused
    self_reported_us    float | None  the impl's own timing of this step in µs (external programs that
                                      time their kernels report it; `replay bench` shows it beside its own)
    logprobs [R, max_k+1, L] float32, logprob_ids [R, max_k+1, L] int32, logprob_ranks [R, max_k+1] int32,
    kept_mask [R, max_k+1, ceil(V/32)] int32   (optional) what the impl returns beside its tokens when the step
                                      asks for logprobs (the layout of the ``emitted_*`` tensors, docs/FIXTURES.md)
    """

    tokens: torch.Tensor
    counts: torch.Tensor
    routes: torch.Tensor
    notes: list[str] = field(default_factory=list)
    self_reported_us: float | None = None
    logprobs: torch.Tensor | None = None
    logprob_ids: torch.Tensor | None = None
    logprob_ranks: torch.Tensor | None = None
    kept_mask: torch.Tensor | None = None

    @classmethod
    def empty(cls, num_requests: int, max_drafts: int) -> "SampleResult":
        return cls(tokens=torch.full((num_requests, max_drafts + 1), -1, dtype=torch.int64),
                   counts=torch.zeros(num_requests, dtype=torch.int32),
                   routes=torch.full((num_requests,), UNKNOWN_ROUTE, dtype=torch.int8))

    def route_names(self) -> list[str]:
        return [route_name(c) for c in self.routes.tolist()]
