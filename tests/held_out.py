"""The two held-out sampler bugs of issue 66 item 8, with their own RNG contract (so `replay run` cannot compare
their sampled tokens) and the routes a correct sampler reports (so no route gives them away):

* ``GreedyAtTemperature``: the argmax walk at every temperature (temperature never applied);
* ``PositionBlind``: the reference's sampling with every position at 0 (noise keyed by seed alone);
* ``OwnRng``: correct, with its own noise (the reference's at positions shifted by a constant): the control.
"""
from __future__ import annotations

import dataclasses

import torch

from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.schema import ROUTE_CODE


def _expected_routes(step) -> torch.Tensor:
    return torch.tensor([ROUTE_CODE[r] for r in step.expected_routes()], dtype=torch.int8)


class GreedyAtTemperature(ReferenceSampler):
    name = "greedy-at-temperature"
    description = "argmax at every temperature, stochastic routes reported"
    rng_contract = "my-engine-rng"
    rng_contracts = ("my-engine-rng",)

    def sample(self, step):
        res = super().sample(dataclasses.replace(step, temperature=torch.zeros_like(step.temperature)))
        res.routes = _expected_routes(step)
        return res


class PositionBlind(ReferenceSampler):
    name = "position-blind"
    description = "noise keyed by the seed alone"
    rng_contract = "my-engine-rng"
    rng_contracts = ("my-engine-rng",)

    def sample(self, step):
        return super().sample(dataclasses.replace(step, positions=torch.zeros_like(step.positions)))


class OwnRng(ReferenceSampler):
    name = "own-rng"
    description = "correct, its own noise"
    rng_contract = "my-engine-rng"
    rng_contracts = ("my-engine-rng",)

    def sample(self, step):
        return super().sample(dataclasses.replace(step, positions=step.positions + 7919))
