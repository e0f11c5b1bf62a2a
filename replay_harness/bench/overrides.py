"""What-if parameter overrides on a recorded step (``replay bench --temperature/--top-p/--top-k/--drop-drafts``).

The recorded logits stay as they are; only the per-request sampling parameters change, and
``drop_drafts`` turns every speculative request into a plain sample: request r keeps only its
first row (the target distribution at the position it would have sampled without drafts), its
draft tokens and draft logits are dropped. An overridden step is a what-if, not what the engine
ran: reports label it with :meth:`Overrides.label`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from replay_harness.errors import UsageError
from replay_harness.recording.step import PER_REQUEST_FIELDS, Step


@dataclass(frozen=True)
class Overrides:
    """None / False = keep what was recorded. ``temperature``: one value for every request, or a tuple cycled
    over each step's requests (request i gets ``temperature[i % len]``)."""

    temperature: float | tuple[float, ...] | None = None
    top_p: float | None = None
    top_k: int | None = None
    drop_drafts: bool = False

    def __post_init__(self) -> None:
        for t in self.temperatures:
            if not (t >= 0.0 and t < float("inf")):
                raise UsageError(f"--temperature {t}: must be finite and >= 0 (0 = greedy)")
        if self.top_p is not None and not (0.0 < self.top_p <= 1.0):
            raise UsageError(f"--top-p {self.top_p}: must be in (0, 1] (1 = off)")
        if self.top_k is not None and self.top_k < 0:
            raise UsageError(f"--top-k {self.top_k}: must be >= 0 (0 = off)")

    @property
    def temperatures(self) -> tuple[float, ...]:
        """The temperature override as a tuple: () when none."""
        if self.temperature is None:
            return ()
        return tuple(self.temperature) if isinstance(self.temperature, tuple) else (self.temperature,)

    @property
    def empty(self) -> bool:
        return self == Overrides()

    def label(self) -> str:
        """Short text for tables and CSV: 'T=0,drop-drafts'; '' when nothing is overridden."""
        parts = []
        if self.temperature is not None:
            parts.append("T=" + "/".join(f"{t:g}" for t in self.temperatures))
        if self.top_p is not None:
            parts.append(f"top_p={self.top_p:g}")
        if self.top_k is not None:
            parts.append(f"top_k={self.top_k}")
        if self.drop_drafts:
            parts.append("drop-drafts")
        return ",".join(parts)

    def to_dict(self) -> dict:
        temperature = list(self.temperature) if isinstance(self.temperature, tuple) else self.temperature
        return {"temperature": temperature, "top_p": self.top_p, "top_k": self.top_k,
                "drop_drafts": self.drop_drafts}


def apply_overrides(step: Step, ov: Overrides) -> Step:
    """A new Step with ``ov`` applied (tensors stay on the step's device; the input is not modified).

    drop_drafts: logits [R, V] = the first row of each request; cu_num_logits = 0..R; draft_token_ids
    all -1; positions of the kept rows; draft_logits None.
    """
    if ov.empty:
        return step
    per_req = {name: getattr(step, name) for name in PER_REQUEST_FIELDS}
    r = step.num_requests
    if ov.temperature is not None:
        values = ov.temperatures
        cycled = [values[i % len(values)] for i in range(r)]
        per_req["temperature"] = torch.tensor(cycled, dtype=step.temperature.dtype, device=step.temperature.device)
    if ov.top_p is not None:
        per_req["top_p"] = torch.full_like(step.top_p, ov.top_p)
    if ov.top_k is not None:
        per_req["top_k"] = torch.full_like(step.top_k, ov.top_k)
    if not ov.drop_drafts:
        return dataclasses.replace(step, **per_req)
    # without drafts each request keeps its first row: MRV2 keys that row's rules (penalties, bad words,
    # min-tokens) by its request's history alone, so the pipeline inputs carry over as they are
    first = step.cu_num_logits[:-1].long().to(step.logits.device)
    dev = step.cu_num_logits.device
    grammar = step.grammar_bitmask
    return dataclasses.replace(
        step, logits=step.logits.index_select(0, first), cu_num_logits=torch.arange(r + 1, dtype=torch.int32, device=dev),
        draft_token_ids=torch.full((r,), -1, dtype=torch.int32, device=step.draft_token_ids.device),
        positions=step.positions.index_select(0, first.to(step.positions.device)), draft_logits=None,
        grammar_bitmask=None if grammar is None else grammar.index_select(0, first.to(grammar.device)), **per_req)
