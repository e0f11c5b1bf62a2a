"""The Triton samplers of ``replay_kernels`` as impls: the one place that knows both a recording's ``Step`` and the
kernels' tensors.

``replay_kernels`` imports nothing of this package: its samplers take a :class:`replay_kernels.batch.SamplingBatch`
(Model Runner V2's expanded layout, plain tensors) and return tensors. Each impl here is the kernel sampler with
the harness's contract added: ``prepare`` turns the step into a batch and ``sample`` returns a
:class:`replay_harness.recording.step.SampleResult` (name, description and RNG contract are the kernel sampler's). The kernels' route codes are the recordings' (tests/test_kernels_api.py checks the two tables agree).
"""
from __future__ import annotations

from typing import Any

from replay_harness.impls.contract import LaunchSampler
from replay_harness.recording.step import SampleResult, Step
from replay_kernels.draw import gumbel_max, serial_scan
from replay_kernels.verify import stochastic
from replay_kernels.batch import SamplingBatch


def batch_of(step: Step) -> SamplingBatch:
    """The kernels' view of a step: the same tensors, no copy."""
    return SamplingBatch(
        logits=step.logits, cu_num_logits=step.cu_num_logits, draft_token_ids=step.draft_token_ids,
        positions=step.positions, temperature=step.temperature, top_k=step.top_k, top_p=step.top_p,
        min_p=step.min_p, seed=step.seed, draft_logits=step.draft_logits, request_ids=step.request_ids)


class _KernelImpl:
    """First base of each impl below: ``prepare`` turns the step into a batch for the kernel sampler's own;
    ``sample`` and ``result`` are :class:`LaunchSampler`'s (a SampleResult); ``launch`` is the kernel sampler's."""

    keeps_inputs = True  # the kernels read the step and write only their own outputs (tests/test_impls.py checks)

    def prepare(self, step: Step) -> Any:
        return super().prepare(batch_of(step))

    def sample(self, step: Step) -> SampleResult:
        return LaunchSampler.sample(self, step)

    def result(self, state: Any, tokens, counts) -> SampleResult:
        return LaunchSampler.result(self, state, tokens, counts)


# Bases in this order: the adapter, then the kernel sampler (its prepare / launch before Sampler's defaults, which
# raise), then LaunchSampler (result, and the Sampler contract). Name and description are the kernel sampler's.
class StochasticSampler(_KernelImpl, stochastic.StochasticSampler, LaunchSampler):
    """``stochastic``: :class:`replay_kernels.verify.stochastic.StochasticSampler` on recorded steps."""


class GumbelMaxSampler(_KernelImpl, gumbel_max.GumbelMaxSampler, LaunchSampler):
    """``gumbel-max``: :class:`replay_kernels.draw.gumbel_max.GumbelMaxSampler` on recorded steps."""


class SerialScanSampler(_KernelImpl, serial_scan.SerialScanSampler, LaunchSampler):
    """``serial-scan``: :class:`replay_kernels.draw.serial_scan.SerialScanSampler` on recorded steps."""
