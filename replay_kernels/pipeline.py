"""Any sampler of this package on a batch with the sampling pipeline's inputs or logprob requests.

The samplers apply temperature, min-p, top-k and top-p on the fly; the rest of Model Runner V2's pipeline (the
grammar mask and the logits processors) comes first, as float32 rows (:mod:`replay_kernels.filters.processors`),
and the sampler runs unchanged on them: its own ``prepare`` on a batch whose logits are those rows and which holds
no pipeline field. Logprob requests add the launches of :mod:`replay_kernels.filters.logprobs` after the
sampler's. A batch with neither (``wanted`` False) never comes here: its state and launches are the sampler's own.

``prepare`` (host work) returns a :class:`PipelineState`; ``launch`` (device work only, graph-capturable) runs the
processors' launches, the sampler's, then the logprob launches, and returns the sampler's ``(tokens, counts)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .batch import SamplingBatch
from .filters.filters import FILTER_SPAN
from .filters.logprobs import Logprobs, launch_logprobs, outputs, prepare_logprobs
from .filters.processors import Processors, launch_processors, prepare_processors

# The fields the sampler's own batch keeps (every other field is the pipeline's or the logprob requests').
SAMPLER_FIELDS = ("logits", "cu_num_logits", "draft_token_ids", "positions", "temperature", "top_k", "top_p", "min_p",
                  "seed", "request_ids", "draft_logits")


def wanted(batch: SamplingBatch) -> bool:
    """Whether ``batch`` needs the pipeline: a processor or grammar field, or logprob requests."""
    return batch.has_pipeline or batch.logprobs is not None


@dataclass
class PipelineState:
    """inner: the sampler's state, prepared on ``rows``; processors: the launches that write ``rows`` (None: the
    rows are the batch's logits); logprobs: the logprob launches (None: none asked). ``routes`` and ``notes``
    are the inner state's."""

    inner: object
    processors: Processors | None
    logprobs: Logprobs | None
    notes: list = field(default_factory=list)

    @property
    def routes(self) -> torch.Tensor:
        return self.inner.routes

    def emitted(self) -> dict[str, torch.Tensor]:
        """Host copies of the logprob outputs (empty when none were asked): logprobs, logprob_ids,
        logprob_ranks, kept_mask."""
        return outputs(self.logprobs) if self.logprobs is not None else {}


def prepare(sampler, batch: SamplingBatch, filter_span: int = FILTER_SPAN) -> PipelineState:
    """Host work: the processors' lists and rows, the sampler's own ``prepare`` on them, the logprob scratch."""
    logits = batch.logits
    processors = prepare_processors(batch, logits.device) if batch.has_pipeline else None
    rows = processors.rows if processors is not None else (logits if logits.stride(1) == 1 else logits.contiguous())
    own = {name: getattr(batch, name) for name in SAMPLER_FIELDS}
    inner = sampler.prepare(SamplingBatch(**dict(own, logits=rows)))
    logprobs = prepare_logprobs(batch, rows, filter_span) if batch.logprobs is not None else None
    return PipelineState(inner, processors, logprobs, list(getattr(inner, "notes", [])))


def launch(sampler, state: PipelineState) -> tuple[torch.Tensor, torch.Tensor]:
    """Device work only: the processors' launches, the sampler's, the logprob launches; ``(tokens, counts)``."""
    if state.processors is not None:
        launch_processors(state.processors)
    tokens, counts = sampler.launch(state.inner)
    if state.logprobs is not None:
        launch_logprobs(state.logprobs, tokens, counts)
    return tokens, counts
