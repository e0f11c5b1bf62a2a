"""The reference against vLLM 0.33 Model Runner V2's own kernels (the upstream oracle).

Runs when the peer files are present (`../shared/peers/prepare.sh` makes .peers/;
see docs/TESTING.md); skipped otherwise (CI has no .peers). On the CPU the vLLM
Triton kernels run under TRITON_INTERPRET=1, so vocabularies stay small here.

Steps are SYNTHETIC (replay_harness.recording.synthetic). vLLM takes post-temperature
target logits, so both sides get the output of our ``apply_sampling_params``;
its temperature kernel is checked against ours separately.
"""
import os
import sys

import types

import pytest
import torch
import triton
import triton.language as tl

from conftest import PEERS
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.near_tie import is_near_tie
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.synthetic import Case, random_step
from replay_kernels.shared.interpret import interpreting

pytestmark = pytest.mark.peers


@triton.jit
def _interpreter_log1p(x):
    return tl.log(1.0 + x)


@pytest.fixture(scope="module")
def vllm():
    if not os.path.isdir(os.path.join(PEERS, "vllm_mrv2")):
        pytest.skip("vLLM MRV2 peer files not prepared (.peers/vllm_mrv2); see docs/TESTING.md")
    sys.path.insert(0, PEERS)
    import gpu_env

    try:
        gumbel_sample, rejection_sample = gpu_env.load_vllm_mrv2(PEERS)
    except gpu_env.PeerUnavailable as e:
        pytest.skip(str(e))
    from vllm.v1.worker.gpu.sample.gumbel import apply_temperature

    if interpreting():
        # Triton's interpreter has no libdevice.log1p; give vLLM's residual kernel log(1 + x) instead.
        # That only moves the residual by rounding, which the near-tie classification absorbs.
        from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils as rsu

        rsu.tldevice = types.SimpleNamespace(log1p=_interpreter_log1p)
    return gumbel_sample, rejection_sample, apply_temperature


def vllm_verify(rejection_sample, step, processed, **options):
    """Run vLLM's rejection_sample on one step (``options``: its keyword options, e.g. use_block_verification);
    returns (tokens [R, K+1] -1 padded, counts [R])."""
    r, n = step.num_requests, processed.shape[0]
    k_max = max(step.max_drafts, 1)
    cu = step.cu_num_logits.to(torch.int32)
    rows = step.row_to_request().to(torch.int32)
    local = (torch.arange(n) - step.cu_num_logits.long()[rows.long()]).to(torch.int32)
    draft_sampled = torch.cat([torch.zeros(1, dtype=torch.int32), step.draft_token_ids[:-1]])
    draft_logits = None
    if step.draft_logits is not None:
        draft_logits = torch.zeros(r, k_max, step.vocab_size, dtype=step.draft_logits.dtype)
        d_idx = step.draft_row_index()
        for j in range(n):
            if d_idx[j] >= 0:
                draft_logits[rows[j], local[j]] = step.draft_logits[d_idx[j]]
    sampled, num = rejection_sample(processed.contiguous(), draft_logits, draft_sampled, cu, step.positions,
                                    torch.arange(r, dtype=torch.int32), rows, local, step.temperature, step.seed,
                                    k_max, **options)
    width = step.max_drafts + 1
    keep = torch.arange(width)[None, :] < num[:, None].long()
    return torch.where(keep, sampled[:, :width], torch.full_like(sampled[:, :width], -1)), num


CASES = [
    Case("v97", vocab_size=97, num_requests=6, temperatures=(0.0, 0.7, 1.0), features=frozenset({"ragged", "ties"})),
    Case("v1000", vocab_size=1000, num_requests=6, temperatures=(1.0,), features=frozenset({"peaked", "placeholders"})),
    Case("v8209-draft", vocab_size=8209, num_requests=3, max_drafts=3, temperatures=(0.0, 0.9, 1.0),
         features=frozenset({"draft-logits", "peaked"})),
    Case("v4099-filters", vocab_size=4099, num_requests=6, temperatures=(0.6, 1.0),
         features=frozenset({"top-k", "top-p", "ragged"})),
    Case("v2048-bf16", vocab_size=2048, num_requests=4, temperatures=(0.0, 1.0), dtype=torch.bfloat16,
         features=frozenset({"draft-logits", "-inf"})),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reference_matches_vllm_rejection_sample(vllm, case):
    _, rejection_sample, _ = vllm
    gen = torch.Generator().manual_seed(7)
    near_ties = compared = 0
    for i in range(3):
        step = random_step(gen, case, i)
        ours = ReferenceSampler().sample(step)
        theirs, num = vllm_verify(rejection_sample, step, apply_sampling_params(step))
        for r in range(step.num_requests):
            compared += 1
            a, b = ours.tokens[r], theirs[r]
            if torch.equal(a, b):
                continue
            pos = int(torch.nonzero(a != b)[0])
            near, margin = is_near_tie(step, r, pos)
            assert near, f"{case.name} step {i} request {r} pos {pos}: ours {a.tolist()} vLLM {b.tolist()} " \
                         f"(margin {margin:.3g})"
            near_ties += 1
    assert near_ties <= max(1, compared // 20), f"{near_ties} near-ties in {compared} requests"


@pytest.mark.parametrize("vocab", [97, 3001])
def test_reference_plain_sample_matches_vllm_gumbel_sample(vllm, vocab):
    gumbel_sample, _, _ = vllm
    case = Case("plain", vocab_size=vocab, num_requests=16, temperatures=(0.0, 0.5, 1.0),
                features=frozenset({"all-k0"}))
    step = random_step(torch.Generator().manual_seed(vocab), case)
    processed = apply_sampling_params(step)
    rows = step.row_to_request().to(torch.int32)
    theirs = gumbel_sample(processed, rows, step.temperature, step.seed, step.positions,
                           apply_temperature=False, is_drafting=False)
    ours = ReferenceSampler().sample(step)
    assert torch.equal(ours.tokens[:, 0], theirs.long())


def test_temperature_matches_vllm_kernel(vllm):
    _, _, apply_temperature = vllm
    case = Case("temp", vocab_size=1000, num_requests=5, temperatures=(0.0, 0.3, 1.0, 1.7))
    step = random_step(torch.Generator().manual_seed(3), case)
    theirs = step.logits.float().clone()
    apply_temperature(theirs, step.row_to_request().to(torch.int32), step.temperature)
    assert torch.equal(apply_sampling_params(step), theirs)
