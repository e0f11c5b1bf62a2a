"""``greedy-only`` (the founding engine bug) and ``guarded`` (its small honest fix); two held-out verification-method
bugs, ``tokenwise-block`` and ``shared-draft-noise`` (docs/VERIFY.md, "Verification methods: lossless or lossy").

greedy-only: every request that carries drafts is verified greedily, whatever its
temperature: the argmax walk over raw logits, bonus = argmax of the bonus row. A
temperature-1.0 request silently decodes greedily. Requests without drafts are
sampled correctly (as the engine's plain sampler does).

guarded: greedy verify for temperature-0 requests; a temperature > 0 request
under speculative decoding is refused by name (route ``refused``, no tokens).

greedy-only has two paths with the same routes and tokens: ``sample`` on CPU tensors is the
readable torch oracle (the runner gives it CPU tensors, ``cpu_only``); ``prepare`` / ``launch``
(and ``sample`` on a CUDA step) run what the buggy engine runs on a GPU: the ``stochastic``
Triton kernels on a copy of the step whose drafted requests have temperature 0, so every drafted
request takes the kernels' greedy-verify branch and plain requests are sampled as recorded.
``replay bench`` times that path.

tokenwise-block: block verification implemented token-wise (vllm-project/vllm-ascend#7807). shared-draft-noise: a
verifier that draws with the drafter's noise key on probabilistic-draft requests (local-inference-lab/vllm#205).
Both are the reference otherwise; they are not in the registry (``module:Class``).
"""
from __future__ import annotations

import dataclasses

import torch

from replay_harness.impls.contract import Sampler
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.walk import verify_request
from replay_harness.recording.step import ROUTE_CODE, SampleResult, Step


def _greedy_walk(step: Step, r: int) -> list[int]:
    a, b = step.cu_num_logits[r].item(), step.cu_num_logits[r + 1].item()
    return verify_request(step.logits[a:b].float(), step.draft_token_ids[a:b - 1].tolist(),
                          step.positions[a:b].tolist(), 0.0, int(step.seed[r]), None)


def _plain_samples(step: Step) -> SampleResult:
    """Reference tokens for the requests without drafts; the others are left empty."""
    result = SampleResult.empty(step.num_requests, step.max_drafts)
    plain = torch.nonzero(step.num_drafts == 0).flatten().tolist()
    if plain:
        sub = ReferenceSampler().sample(step.select(plain))
        for i, r in enumerate(plain):
            _put(result, r, sub.tokens[i, :int(sub.counts[i])].tolist(), "greedy-sample" if
                 float(step.temperature[r]) == 0.0 else "random-sample")
    return result


def _put(result: SampleResult, r: int, tokens: list[int], route: str) -> None:
    result.tokens[r, :len(tokens)] = torch.tensor(tokens, dtype=torch.int64)
    result.counts[r] = len(tokens)
    result.routes[r] = ROUTE_CODE[route]


def drafted_greedy(step: Step) -> Step:
    """A copy of ``step`` whose requests with drafts (k > 0) have temperature 0 (the engine bug's routing).

    Tensors stay on the step's device; the logits are shared, not copied.
    """
    k = step.num_drafts.to(step.temperature.device)
    temp = torch.where(k > 0, torch.zeros_like(step.temperature), step.temperature)
    return dataclasses.replace(step, temperature=temp)


class GreedyOnlySampler(Sampler):
    name = "greedy-only"
    description = "reproduces the engine bug: every speculative step verified greedily, whatever the temperature"
    rng_contract = "mrv2"
    cpu_only = True  # the oracle loops per request in Python; the runner gives it CPU tensors
    keeps_inputs = True  # reads the step only (tests/test_impls.py checks)

    def __init__(self) -> None:
        self._kernels = None

    def _stochastic(self):
        if self._kernels is None:
            from replay_kernels.verify.stochastic import StochasticSampler  # Triton: imported only when used

            self._kernels = StochasticSampler()
        return self._kernels

    def prepare(self, step: Step):
        """Kernel path, host work: ``StochasticSampler.prepare`` of :func:`drafted_greedy` (step)."""
        return self._stochastic().prepare(drafted_greedy(step))

    def launch(self, state) -> tuple[torch.Tensor, torch.Tensor]:
        """Kernel path, device work only (graph-capturable): tokens [R, max_k+1] int64, counts [R] int32."""
        return self._stochastic().launch(state)

    def sample_kernels(self, step: Step) -> SampleResult:
        """The kernel path as a SampleResult (routes: greedy-verify for drafted requests, else as expected)."""
        state = self.prepare(step)
        tokens, counts = self.launch(state)
        return SampleResult(tokens=tokens.cpu(), counts=counts.cpu(), routes=state.routes.clone())

    def sample(self, step: Step) -> SampleResult:
        if step.logits.device.type == "cuda":
            return self.sample_kernels(step)
        result = _plain_samples(step)  # plain samples (k = 0) are right in the engine
        for r in torch.nonzero(step.num_drafts > 0).flatten().tolist():
            _put(result, r, _greedy_walk(step, r), "greedy-verify")
        return result


class GuardedSampler(Sampler):
    name = "guarded"
    description = "the small fix: greedy verify at temperature 0, temperature > 0 under drafts refused by name"
    rng_contract = "mrv2"
    cpu_only = True  # the oracle loops per request in Python; the runner gives it CPU tensors
    keeps_inputs = True  # reads the step only (tests/test_impls.py checks)

    def sample(self, step: Step) -> SampleResult:
        result = _plain_samples(step)
        refused = []
        for r in torch.nonzero(step.num_drafts > 0).flatten().tolist():
            if float(step.temperature[r]) == 0.0:
                _put(result, r, _greedy_walk(step, r), "greedy-verify")
            else:
                _put(result, r, [], "refused")
                refused.append(int(step.request_ids[r]))
        if refused:
            result.notes.append("refused requests " + ", ".join(map(str, refused)) +
                                ": temperature > 0 under speculative decoding needs a stochastic verifier")
        return result


# --------------------------------------------------------------------------- held-out method bugs (issue 65)
# Not in the registry: tests and docs/VERIFY.md ("Verification methods: lossless or lossy") load them by
# ``module:Class`` (register(), or exec: through replay_harness.impls.external_adapter).
def tokenwise_block(logits: torch.Tensor, drafts: list[int], positions: list[int], temperature: float, seed: int,
                    draft_logits: torch.Tensor | None) -> list[int]:
    """"Block" verification implemented token-wise (vllm-project/vllm-ascend#7807): the block walk (the accepted
    length is the largest i + 1 whose test passes, block's uniforms) but every draft tested alone against
    min(1, p/q), and the token-wise residual max(p - q, 0) at the stop. Not lossless. logits [k+1, V] processed."""
    from replay_harness.oracle.methods import step_seed
    from replay_harness.oracle.rng import accept_uniform
    from replay_harness.oracle.walk import accept_test, gumbel_draw, residual_logits

    k = len(drafts)
    q = None if draft_logits is None else draft_logits.float() / temperature
    end = next((i for i, d in enumerate(drafts) if d < 0), k)
    accepted = 0
    for i in range(end):
        u = accept_uniform(torch.tensor(step_seed(seed, i)), torch.tensor(positions[i]))
        log_p, threshold = accept_test(logits[i], drafts[i], None if q is None else q[i], seed, positions[i], u)
        if bool(log_p > threshold):
            accepted = i + 1
    tau = accepted
    if tau == k or drafts[tau] < 0:
        return drafts[:tau] + [gumbel_draw(logits[tau], seed, positions[tau])]
    scores = residual_logits(logits[tau], drafts[tau], None if q is None else q[tau])
    return drafts[:tau] + [gumbel_draw(scores, seed, positions[tau])]


class TokenwiseBlockSampler(ReferenceSampler):
    name = "tokenwise-block"
    description = "reproduces vllm-ascend#7807: block verification with each draft tested token-wise (not lossless)"

    def verify(self, logits, drafts, positions, temperature, seed, draft_logits, method=None):
        if method is not None and method.name == "block" and temperature != 0.0 and drafts:
            return tokenwise_block(logits, drafts, positions, temperature, seed, draft_logits)
        return super().verify(logits, drafts, positions, temperature, seed, draft_logits, method)


class SharedDraftNoiseSampler(ReferenceSampler):
    """The reference whose verifier, on probabilistic-draft requests, draws with the drafter's noise key
    (position + 2**30): a rejected draft's recovered token reuses that draft's Gumbel noise vector, as when a
    drafter leaves out the salt and draws with the verifier's key (local-inference-lab/vllm#205)."""

    name = "shared-draft-noise"
    description = "reproduces local-inference-lab/vllm#205: the drafter's and the verifier's noise overlap"

    def sample(self, step: Step) -> SampleResult:
        from replay_harness.oracle.drafts import probabilistic
        from replay_harness.oracle.rng import DRAFT_NOISE_SALT

        positions = step.positions.clone()
        cu = step.cu_num_logits.tolist()
        for r in range(step.num_requests):
            if probabilistic(step, r):
                positions[cu[r]:cu[r + 1]] += DRAFT_NOISE_SALT
        return super().sample(dataclasses.replace(step, positions=positions))
