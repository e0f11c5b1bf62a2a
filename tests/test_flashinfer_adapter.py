"""The FlashInfer peer's adapter (``replay_harness.impls.peers.FlashInferSampler``): which target rows each FlashInfer
call gets and where its tokens land. FlashInfer itself needs CUDA, so these tests give the adapter a stand-in module
that draws deterministically (argmax; every draft accepted): they pin the adapter's row layout, not FlashInfer's
sampling (`replay verify --impl flashinfer` on the GPU machine does that; docs/BENCHMARKS.md)."""
from __future__ import annotations

import torch

from replay_harness.impls.peers import FlashInferSampler
from test_kernels import synthetic_step


class ArgmaxFlashInfer:
    """The three FlashInfer calls the adapter makes, drawn by argmax (a stand-in for the CPU, not FlashInfer)."""

    @staticmethod
    def sampling_from_logits(logits, seed, offset):
        return logits.argmax(-1).int()

    @staticmethod
    def softmax(x):
        return torch.softmax(x, -1)

    @staticmethod
    def chain_speculative_sampling(dprobs, dids, probs, seed, offset):
        b, k = dids.shape
        emitted = torch.cat([dids.long(), probs[:, k].argmax(-1, keepdim=True)], 1)
        return emitted, None, torch.full((b,), k)


def _sampler() -> FlashInferSampler:
    sampler = FlashInferSampler.__new__(FlashInferSampler)  # without loading FlashInfer
    sampler.fi = ArgmaxFlashInfer()
    return sampler


def test_requests_whose_first_draft_is_a_placeholder_draw_from_their_first_row():
    """Every request drafted one placeholder (2 rows a request, all drawn at k = 0): each draws from its first row.
    Taking the whole batch as one plain draw (2R rows for R requests) failed `replay verify --impl flashinfer` with
    a shape mismatch (fixed in dc0da87, 2026-12-04)."""
    step = synthetic_step(180, 50, 5, 1, greedy_frac=0.0, filters=False, ks=[1] * 5)
    step.draft_token_ids = torch.full_like(step.draft_token_ids, -1)
    sampler = _sampler()
    state = sampler.prepare(step)
    assert not state.whole_plain
    tokens, counts = sampler.launch(state)
    first_rows = step.cu_num_logits[:-1].long()
    assert torch.equal(tokens[:, 0], step.logits[first_rows].argmax(-1))
    assert torch.equal(tokens[:, 1], torch.full((5,), -1)) and torch.equal(counts, torch.ones(5, dtype=torch.int32))


def test_plain_batches_and_ragged_drafts_land_in_their_requests():
    """A plain batch is one draw over the batch as it stands; ragged drafts (k = 0, 2, 3 and a placeholder at
    position 1) are grouped by k, and each group's tokens land in its own requests' slots."""
    plain = synthetic_step(181, 50, 4, 0, greedy_frac=0.0, filters=False, ks=[0] * 4)
    sampler = _sampler()
    state = sampler.prepare(plain)
    assert state.whole_plain
    tokens, counts = sampler.launch(state)
    assert torch.equal(tokens[:, 0], plain.logits.argmax(-1)) and torch.equal(counts, torch.ones(4, dtype=torch.int32))

    step = synthetic_step(182, 50, 4, 3, greedy_frac=0.0, filters=False, ks=[0, 2, 3, 3])
    step.draft_token_ids[step.cu_num_logits[3] + 1] = -1  # request 3 stops at its second row
    state = sampler.prepare(step)
    tokens, counts = sampler.launch(state)
    cu, drafts = step.cu_num_logits.tolist(), step.draft_token_ids.tolist()
    for r, k in enumerate([0, 2, 3, 1]):
        want = drafts[cu[r]:cu[r] + k] + [int(step.logits[cu[r] + k].argmax())]
        assert tokens[r, :k + 1].tolist() == want and int(counts[r]) == k + 1, (r, tokens[r], counts[r])
