"""``reference``: the torch oracle as an impl (the walk itself is :mod:`replay_harness.oracle.walk`)."""
from __future__ import annotations

import torch

from replay_harness.impls.contract import Sampler
from replay_harness.oracle.logprobs import emitted_outputs
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.oracle.methods import STANDARD, Method, method_of, verify_with
from replay_harness.recording.schema import RNG_CONTRACTS
from replay_harness.recording.step import ROUTE_CODE, SampleResult, Step, expected_route


class ReferenceSampler(Sampler):
    name = "reference"
    description = "pure torch oracle, Model Runner V2 semantics (greedy and stochastic verify per request)"
    rng_contract = "mrv2"
    rng_contracts = RNG_CONTRACTS  # the width of every draw follows the recording's contract (Step.rng_contract)
    cpu_only = True  # the oracle loops per request in Python; the runner gives it CPU tensors
    keeps_inputs = True  # reads the step only (tests/test_impls.py checks)

    def process(self, step: Step) -> torch.Tensor:
        """[N, V] float32 target rows after sampling params (a hook: tests/broken_impls.py overrides it)."""
        return apply_sampling_params(step)

    def verify(self, logits: torch.Tensor, drafts: list[int], positions: list[int], temperature: float,
               seed: int, draft_logits: torch.Tensor | None, method: Method = STANDARD) -> list[int]:
        """One request's emitted tokens (a hook: tests/broken_impls.py overrides it)."""
        return verify_with(method, logits, drafts, positions, temperature, seed, draft_logits)

    def sample(self, step: Step) -> SampleResult:
        processed = self.process(step)
        result = SampleResult.empty(step.num_requests, step.max_drafts)
        cu = step.cu_num_logits.tolist()
        d_idx = step.draft_row_index()
        for r in range(step.num_requests):
            a, b = cu[r], cu[r + 1]
            temperature = float(step.temperature[r])
            draft_logits = None
            if step.draft_logits is not None and b - a > 1:
                draft_logits = step.draft_logits[d_idx[a:b - 1]]
            tokens = self.verify(processed[a:b], step.draft_token_ids[a:b - 1].tolist(),
                                 step.positions[a:b].tolist(), temperature, int(step.seed[r]), draft_logits,
                                 method_of(step, r))
            result.tokens[r, :len(tokens)] = torch.tensor(tokens)
            result.counts[r] = len(tokens)
            result.routes[r] = ROUTE_CODE[expected_route(temperature, b - a - 1)]
        if step.logprobs is not None:
            for name, value in emitted_outputs(step, processed, result.tokens, result.counts).items():
                setattr(result, name, value)
        return result
