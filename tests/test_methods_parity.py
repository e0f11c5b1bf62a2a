"""The oracle's verification methods (block, FLy, the fp64 contract) against vLLM 0.33 Model Runner V2's own
``rejection_sample`` (docs/FIXTURES.md "Verification methods"); skipped without .peers (CI has none).

SYNTHETIC steps; vLLM's kernels run under TRITON_INTERPRET=1 on the CPU, so vocabularies stay small. A token
that differs must be a floating-point near-tie of the decision (the project's near-tie class), and rare.
"""
import dataclasses

import pytest
import torch

from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.near_tie import is_near_tie
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.synthetic import Case, random_step
from test_vllm_parity import vllm, vllm_verify  # noqa: F401  (the fixture)

pytestmark = pytest.mark.peers

CASES = [
    Case("v211-onehot", vocab_size=211, num_requests=6, max_drafts=4, temperatures=(0.0, 0.7, 1.0),
         features=frozenset({"ragged", "peaked", "placeholders"})),
    Case("v512-draft", vocab_size=512, num_requests=6, max_drafts=4, temperatures=(0.0, 0.8, 1.0),
         features=frozenset({"draft-logits", "ragged"})),
]


def with_method(step, name: str, window: int = 0, threshold: float = 0.0, top_k: int = 3):
    r = step.num_requests
    return dataclasses.replace(
        step, verify_method=torch.full((r,), VERIFY_METHODS.index(name), dtype=torch.int8),
        fly_window=torch.full((r,), window, dtype=torch.int32),
        fly_entropy_threshold=torch.full((r,), threshold, dtype=torch.float32),
        fly_entropy_top_k=torch.full((r,), top_k, dtype=torch.int32))


def agree(rejection_sample, step, **options) -> tuple[int, int]:
    """(requests compared, near-ties) of the reference against vLLM on one step; asserts every other
    difference away."""
    ours = ReferenceSampler().sample(step)
    theirs, _ = vllm_verify(rejection_sample, step, apply_sampling_params(step), **options)
    ties = 0
    for r in range(step.num_requests):
        a, b = ours.tokens[r], theirs[r]
        if torch.equal(a, b):
            continue
        pos = int(torch.nonzero(a != b)[0])
        near, margin = is_near_tie(step, r, pos)
        assert near, f"request {r} pos {pos}: ours {a.tolist()} vLLM {b.tolist()} ({options}, margin {margin:.3g})"
        ties += 1
    return step.num_requests, ties


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("method", ["block", "fly-w1", "fly-w2-gated", "fp64"])
def test_method_matches_vllm(vllm, case, method):  # noqa: F811
    _, rejection_sample, _ = vllm
    gen = torch.Generator().manual_seed(11)
    total = ties = 0
    for i in range(4):
        step = random_step(gen, case, i)
        if method == "block":
            step, options = with_method(step, "block"), {"use_block_verification": True}
        elif method == "fly-w1":
            step, options = with_method(step, "fly", 1, 0.0), {"fly_window_size": 1, "fly_entropy_threshold": 0.0,
                                                               "fly_entropy_top_k": 3}
        elif method == "fly-w2-gated":
            step, options = with_method(step, "fly", 2, 0.6, 4), {"fly_window_size": 2, "fly_entropy_threshold": 0.6,
                                                                  "fly_entropy_top_k": 4}
        else:
            step, options = dataclasses.replace(step, rng_contract="mrv2-fp64"), {"use_fp64": True}
        n, t = agree(rejection_sample, step, **options)
        total, ties = total + n, ties + t
    assert ties <= max(1, total // 20), f"{ties} near-ties in {total} requests"


@pytest.mark.parametrize("fp64", [False, True], ids=["mrv2", "mrv2-fp64"])
def test_derived_drafts_match_vllm_drafter(vllm, fp64):  # noqa: F811
    """oracle/drafts.py draws what vLLM's drafter draws (gumbel_sample with is_drafting=True: pos + 2**30), and
    the unsalted draws differ (the mechanism draft_noise_diagnosis names)."""
    from replay_harness.oracle.drafts import derive_drafts

    gumbel_sample, _, _ = vllm
    case = Case("drafts", vocab_size=733, num_requests=6, max_drafts=4, temperatures=(0.6, 1.0, 1.4),
                features=frozenset({"draft-logits", "no-k0"}), dtype=torch.float32)
    step = random_step(torch.Generator().manual_seed(5), case)
    step = dataclasses.replace(step, draft_sampling=torch.ones(step.num_requests, dtype=torch.int8),
                               rng_contract="mrv2-fp64" if fp64 else "mrv2")
    verify_rows = step.draft_row_index() >= 0
    rows = step.row_to_request()[verify_rows].to(torch.int32)
    theirs = gumbel_sample(step.draft_logits.float().contiguous(), rows, step.temperature, step.seed,
                           step.positions[verify_rows], apply_temperature=True, is_drafting=True, use_fp64=fp64)
    ours = torch.tensor([d for r in range(step.num_requests) for d in derive_drafts(step, r)])
    unsalted = torch.tensor([d for r in range(step.num_requests) for d in derive_drafts(step, r, salt=0)])
    assert torch.equal(ours, theirs.long())
    assert not torch.equal(unsalted, theirs.long())
