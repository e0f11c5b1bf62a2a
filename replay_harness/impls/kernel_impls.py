"""The Triton samplers of ``replay_kernels`` as impls: the one place that knows both a recording's ``Step`` and the
kernels' tensors.

``replay_kernels`` imports nothing of this package: its samplers take a :class:`replay_kernels.batch.SamplingBatch`
(Model Runner V2's expanded layout, plain tensors) and return tensors. Each impl here is the kernel sampler with
the harness's contract added: ``prepare`` turns the step into a batch and ``sample`` returns a
:class:`replay_harness.recording.step.SampleResult` (name, description and RNG contract are the kernel sampler's;
``stochastic`` also replays the ``mrv2-fp64`` contract and block / FLy verification: ``rng_contracts``,
``verify_methods``, the allow-lists :func:`unsupported` checks by name). The kernels' route codes are the recordings' (tests/test_kernels_api.py checks the two tables agree).
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from replay_harness.errors import EnvironmentProblem
from replay_harness.impls.contract import LaunchSampler
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.step import ROUTE_CODE, SampleResult, Step
from replay_kernels.draw import gumbel_max, serial_scan
from replay_kernels.verify import methods, stochastic
from replay_kernels.verify.methods import MethodInputs, MethodSampler
from replay_kernels.batch import SamplingBatch


def unsupported(step: Step, verify_methods: tuple[str, ...] = ("standard",),
                contracts: tuple[str, ...] = ("mrv2",)) -> str | None:
    """Why the kernels cannot replay ``step`` exactly, or None. ``verify_methods`` / ``contracts``: the verification
    methods and RNG contracts the impl implements, by name (an allow-list: a method or contract the schema gains
    later is refused by name until an impl lists it; docs/FIXTURES.md "Verification methods")."""
    method = getattr(step, "verify_method", None)  # a plain SamplingBatch (the pipeline's float32 rows) has neither
    contract = getattr(step, "rng_contract", "mrv2")
    if method is not None:
        names = {VERIFY_METHODS[c] if 0 <= c < len(VERIFY_METHODS) else f"code {c}" for c in method.tolist()}
        refused = sorted(names - set(verify_methods))
        if refused:
            return (f"verify_method {', '.join(refused)} is not implemented in the kernels "
                    f"({', '.join(verify_methods)} only)")
    if contract not in contracts:
        return f"RNG contract {contract} is not implemented in the kernels ({', '.join(contracts)} only)"
    return None


def method_inputs(step: Step) -> MethodInputs:
    """The verification-method fields of ``step`` as the kernels take them (replay_kernels/verify/methods.py)."""
    return MethodInputs(verify_method=getattr(step, "verify_method", None),
                        fly_window=getattr(step, "fly_window", None),
                        fly_entropy_threshold=getattr(step, "fly_entropy_threshold", None),
                        fly_entropy_top_k=getattr(step, "fly_entropy_top_k", None),
                        fp64=getattr(step, "rng_contract", "mrv2") == "mrv2-fp64")


def batch_of(step: Step) -> SamplingBatch:
    """The kernels' view of a step: the same tensors (every field of a SamplingBatch, the sampling pipeline's
    inputs and logprob requests included), no copy."""
    return SamplingBatch(**{f.name: getattr(step, f.name) for f in fields(SamplingBatch)})


class _KernelImpl:
    """First base of each impl below: ``prepare`` turns the step into a batch for the kernel sampler's own;
    ``sample`` and ``result`` are :class:`LaunchSampler`'s (a SampleResult); ``launch`` is the kernel sampler's."""

    keeps_inputs = True  # the kernels read the step and write only their own outputs (tests/test_impls.py checks)
    verify_methods: tuple[str, ...] = ("standard",)  # what unsupported() lets through, by name
    rng_contracts: tuple[str, ...] = ("mrv2",)

    def refusal(self, step: Step) -> str | None:
        return unsupported(step, self.verify_methods, self.rng_contracts)

    def prepare(self, step: Step) -> Any:
        why = self.refusal(step)
        if why:
            raise EnvironmentProblem(f"impl '{self.name}': {why}")
        return super().prepare(batch_of(step))

    def sample(self, step: Step) -> SampleResult:
        why = self.refusal(step)
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
    """``stochastic``: :class:`replay_kernels.verify.stochastic.StochasticSampler` on recorded steps; a step with
    block or FLy requests, or under the ``mrv2-fp64`` contract, goes to
    :class:`replay_kernels.verify.methods.MethodSampler` (the standard path's launches are unchanged)."""

    verify_methods = methods.METHODS
    rng_contracts = ("mrv2", "mrv2-fp64")

    def prepare(self, step: Step) -> Any:
        inputs = method_inputs(step)
        if not inputs.wanted():
            return super().prepare(step)
        why = self.refusal(step)
        if why:
            raise EnvironmentProblem(f"impl '{self.name}': {why}")
        return MethodSampler(inputs, filter_span=self.filter_span, draw_block=self.draw_block,
                             programs=self.programs).prepare(batch_of(step))

    def launch(self, state: Any):
        if methods.is_method_state(state):
            return MethodSampler().launch(state)
        return super().launch(state)


class GumbelMaxSampler(_KernelImpl, gumbel_max.GumbelMaxSampler, LaunchSampler):
    """``gumbel-max``: :class:`replay_kernels.draw.gumbel_max.GumbelMaxSampler` on recorded steps."""


class SerialScanSampler(_KernelImpl, serial_scan.SerialScanSampler, LaunchSampler):
    """``serial-scan``: :class:`replay_kernels.draw.serial_scan.SerialScanSampler` on recorded steps."""
