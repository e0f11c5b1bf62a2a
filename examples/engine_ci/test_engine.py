"""CI for an engine with its own RNG (docs/QUICKSTART.md, "CI for an engine with its own RNG").

A fake engine (SYNTHETIC: random logits, V = 64) with two greedy requests that verify drafts and two sampled
ones drawn with ``torch.multinomial`` from the engine's own generator. `replay run` cannot compare its sampled
tokens (its RNG is not vLLM's), so CI checks them statistically: ``replay_verify`` runs the sampler 400 times
per request and fails, naming the mechanism, on a sampler that decodes greedily at temperature > 0 or reuses
its noise across positions; ``replay_audit`` judges the tokens the engine recorded.

    pip install replay-harness    # the pytest plugin comes with it
    pytest examples/engine_ci                                   # passes
    ENGINE_BUG=greedy-at-temperature pytest examples/engine_ci  # fails: temperature
    ENGINE_BUG=position-blind pytest examples/engine_ci         # fails: position-noise
"""
import os

import pytest
import torch

from replay_harness import Recorder
from replay_harness.recording.step import ROUTE_CODE, SampleResult, Step

V, BUG = 64, os.environ.get("ENGINE_BUG", "")


class Engine:
    """The engine's sampler: greedy requests verify their drafts by argmax, sampled ones (no drafts) draw from
    softmax(logits / T) with a generator seeded by (seed, position)."""

    name = "my-engine"

    def sample(self, step):
        cu, R = step.cu_num_logits.tolist(), step.num_requests
        res = SampleResult.empty(R, step.max_drafts)
        for r in range(R):
            rows, t = step.logits[cu[r]:cu[r + 1]].float(), float(step.temperature[r])
            if t == 0 or BUG == "greedy-at-temperature":  # the bug: argmax whatever the temperature
                out = []
                for j in range(rows.shape[0]):
                    out.append(int(rows[j].argmax()))
                    if j + 1 == rows.shape[0] or out[-1] != int(step.draft_token_ids[cu[r] + j]):
                        break
            else:
                pos = 0 if BUG == "position-blind" else int(step.positions[cu[r]])  # the bug: no position
                g = torch.Generator().manual_seed((int(step.seed[r]) * 1_000_003 + pos) % 2 ** 63)
                out = [int(torch.multinomial(torch.softmax(rows[0] / t, -1), 1, generator=g))]
            res.tokens[r, :len(out)], res.counts[r] = torch.tensor(out), len(out)
            res.routes[r] = ROUTE_CODE[("greedy-" if t == 0 else "random-") + ("verify" if len(rows) > 1 else "sample")]
        return res


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """Four steps of the engine, recorded with the Recorder as its decode loop would (SYNTHETIC logits)."""
    path, gen = tmp_path_factory.mktemp("engine") / "run", torch.Generator().manual_seed(0)
    with Recorder(path, V, source={"engine": "fake engine (SYNTHETIC)"}, rng_contract="my-engine-rng") as rec:
        for s in range(4):
            logits = torch.randn(2 * 3 + 2, V, generator=gen)  # requests 0, 1: 2 drafts each; 2, 3: none
            drafts = [int(logits[0].argmax()), 7, -1, int(logits[3].argmax()), int(logits[4].argmax()), -1, -1, -1]
            step_positions = [10 + s + j for j in range(3)] * 2 + [20 + s, 30 + s]
            step = Step(logits=logits, cu_num_logits=torch.tensor([0, 3, 6, 7, 8], dtype=torch.int32),
                        draft_token_ids=torch.tensor(drafts, dtype=torch.int32),
                        positions=torch.tensor(step_positions), temperature=torch.tensor([0.0, 0.0, 1.0, 0.8]),
                        top_k=torch.zeros(4, dtype=torch.int32), top_p=torch.ones(4), min_p=torch.zeros(4),
                        seed=torch.tensor([1, 2, 3, 4]), request_ids=torch.arange(4))
            rec.record_sample(step, Engine().sample(step))  # an engine calls rec.record_step(...) in its loop
    return path


def test_engine_samples_from_the_right_distribution(recording, replay_verify):
    replay_verify(recording, Engine())


def test_engine_recorded_tokens_pass_the_audit(recording, replay_audit):
    replay_audit(recording)
