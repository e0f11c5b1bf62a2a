"""The Triton samplers of ``replay_kernels`` as impls: the one place that knows both a recording's ``Step`` and the
kernels' tensors.

``replay_kernels`` imports nothing of this package: its samplers take a :class:`replay_kernels.batch.SamplingBatch`
(Model Runner V2's expanded layout, plain tensors) and return tensors. Each impl here is the kernel sampler with
the harness's contract added: ``prepare`` turns the step into a batch and ``sample`` returns a
:class:`replay_harness.recording.step.SampleResult` (name, description and RNG contract are the kernel sampler's). The kernels' route codes are the recordings' (tests/test_kernels_api.py checks the two tables agree).
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from replay_harness.errors import EnvironmentProblem
from replay_harness.impls.contract import LaunchSampler
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.step import ROUTE_CODE, SampleResult, Step
from replay_kernels.draw import gumbel_max, serial_scan
from replay_kernels.verify import stochastic
from replay_kernels.batch import SamplingBatch


def unsupported(step: Step) -> str | None:
    """Why the kernels cannot replay ``step`` exactly, or None: they verify drafts the standard way under the
    ``mrv2`` contract (block and FLy verification and the mrv2-fp64 contract are the oracle's only so far;
    docs/FIXTURES.md "Verification methods")."""
    method = getattr(step, "verify_method", None)  # a plain SamplingBatch (the pipeline's float32 rows) has neither
    contract = getattr(step, "rng_contract", "mrv2")
    if method is not None and bool((method != 0).any()):
        methods = sorted({VERIFY_METHODS[int(c)] for c in method.tolist() if c})
        return f"verify_method {', '.join(methods)} is not implemented in the kernels (standard only)"
    if contract != "mrv2":
        return f"RNG contract {contract} is not implemented in the kernels (mrv2 only)"
    return None


def batch_of(step: Step) -> SamplingBatch:
    """The kernels' view of a step: the same tensors (every field of a SamplingBatch, the sampling pipeline's
    inputs and logprob requests included), no copy."""
    return SamplingBatch(**{f.name: getattr(step, f.name) for f in fields(SamplingBatch)})


class _KernelImpl:
    """First base of each impl below: ``prepare`` turns the step into a batch for the kernel sampler's own;
    ``sample`` and ``result`` are :class:`LaunchSampler`'s (a SampleResult); ``launch`` is the kernel sampler's."""

    keeps_inputs = True  # the kernels read the step and write only their own outputs (tests/test_impls.py checks)

    def prepare(self, step: Step) -> Any:
        why = unsupported(step)
        if why:
            raise EnvironmentProblem(f"impl '{self.name}': {why}")
        return super().prepare(batch_of(step))

    def sample(self, step: Step) -> SampleResult:
        why = unsupported(step)
        if why:  # refused by name, never verified the standard way in silence
            result = SampleResult.empty(step.num_requests, step.max_drafts)
            result.routes[:] = ROUTE_CODE["refused"]
            result.notes.append(f"{self.name} refused the step: {why}")
            return result
        return LaunchSampler.sample(self, step)

    def result(self, state: Any, tokens, counts) -> SampleResult:
        """LaunchSampler's result, with the logprob outputs of a step that asks for them (logprobs, logprob_ids,
        logprob_ranks, kept_mask: replay_kernels/filters/logprobs.py)."""
        result = LaunchSampler.result(self, state, tokens, counts)
        for name, value in (state.emitted() if hasattr(state, "emitted") else {}).items():
            setattr(result, name, value)
        return result


# Bases in this order: the adapter, then the kernel sampler (its prepare / launch before Sampler's defaults, which
# raise), then LaunchSampler (result, and the Sampler contract). Name and description are the kernel sampler's.
class StochasticSampler(_KernelImpl, stochastic.StochasticSampler, LaunchSampler):
    """``stochastic``: :class:`replay_kernels.verify.stochastic.StochasticSampler` on recorded steps."""


class GumbelMaxSampler(_KernelImpl, gumbel_max.GumbelMaxSampler, LaunchSampler):
    """``gumbel-max``: :class:`replay_kernels.draw.gumbel_max.GumbelMaxSampler` on recorded steps."""


class SerialScanSampler(_KernelImpl, serial_scan.SerialScanSampler, LaunchSampler):
    """``serial-scan``: :class:`replay_kernels.draw.serial_scan.SerialScanSampler` on recorded steps."""
