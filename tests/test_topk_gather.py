"""Top-k bounds from gathered candidates (replay_kernels/filters/topk_gather.py) against the oracle.

Rows with top-k (alone or with top-p and min-p) find their bound from the values at or above the k-th largest
block maximum instead of the 16-way search. These tests pin that the bound is the oracle's bit for bit (ties at
the k-th value kept, a top-p tie group cut in token-id order, min-p leaving fewer than k values, temperatures,
bf16), that such rows do take the gather (none left to the search), and that the rows it cannot serve (more
candidates than GATHER_CAP, fewer than k finite blocks, +inf) are searched and still exact.
"""
from __future__ import annotations

import pytest
import torch

from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.sampling_params import apply_sampling_params as oracle_params
from replay_kernels.filters import params as kparams
from replay_kernels.draw.draw import MODE_NONE, MODE_TARGET
from replay_kernels.draw.gumbel_max import GumbelMaxSampler
from replay_kernels.filters.topk_gather import GATHER_CAP, SEARCH_CHUNK, gather_max_k
from test_kernels import DEVICE, synthetic_step


def _step(seed: int, vocab: int, rows: int, device="cpu", **kw):
    """A SYNTHETIC plain step, one row a request, every request stochastic (set its filters after)."""
    step = synthetic_step(seed, vocab, rows, 0, ks=[0] * rows, greedy_frac=0.0, filters=False, **kw)
    step.temperature[:] = 1.0
    return step.to(device)


@pytest.fixture(params=[(True, 3), (False, 8)], ids=["sort-3-rounds", "search-8-rounds"])
def solve_path(request, monkeypatch):
    """The solve by one sort (rows of at most SEARCH_CHUNK candidates) with the threshold's 3 rounds, or by the
    searches with 8 (the exact k-th block maximum): the same bounds either way."""
    monkeypatch.setattr("replay_kernels.filters.topk_gather.SORT_SOLVE", request.param[0])
    monkeypatch.setattr("replay_kernels.filters.topk_gather.THRESHOLD_ROUNDS", request.param[1])


def _bounds(step, span: int):
    """(processed logits, rows gathered, rows the gather left to the search) with the Triton bound."""
    logits = step.logits.contiguous()
    rp = kparams.prepare_params(step, filter_span=span)
    kparams.launch_params(logits, rp)
    out = kparams.apply_bounds(logits, rp)
    gathered = 0 if rp.gather is None else rp.gather.rows.numel()
    return out, gathered, int(rp.filters.count) - rp.gather.listed if rp.gather is not None else 0


@pytest.mark.parametrize("vocab,span,seed,dtype", [(4099, 512, 0, torch.float32), (3000, 256, 1, torch.float32),
                                                    (20000, 8192, 2, torch.bfloat16)])
def test_gathered_top_k_bounds_match_the_oracle(vocab, span, seed, dtype, solve_path):
    step = _step(seed, vocab, 10, dtype=dtype, ties=True)
    g = torch.Generator().manual_seed(seed)
    max_k = gather_max_k(vocab, span)
    step.top_k[:] = torch.randint(1, max_k + 1, (10,), generator=g).int()
    step.top_k[0], step.top_k[1] = 1, max_k
    step.top_p[:6] = torch.tensor([0.9, 0.5, 1e-6, 0.99, 0.7, 0.3])
    step.min_p[5:8] = torch.tensor([0.05, 0.5, 0.9])  # 0.9: min-p leaves fewer than k values
    step.temperature[:] = torch.tensor([1.0, 0.6, 1.3, 1.0, 0.8, 1.0, 1.0, 1.3, 0.6, 1.0])
    got, gathered, searched = _bounds(step, span)
    assert gathered == 10 and searched == 0
    want = oracle_params(step)
    assert torch.equal(got, want), (got != want).nonzero()[:10]


def test_gathered_ties_at_the_kth_value_and_at_the_top_p_cut(solve_path):
    """k lands inside a tie group (all of it kept); top-p cuts a tie group inside the top-k set by token id."""
    v, span = 4096, 512
    logits = torch.randn(8, v, generator=torch.Generator().manual_seed(3)) * 0.1 - 8.0
    logits[:, [5, 17, 300, 1041, 2222]] = 1.0   # five tied values
    logits[:, 60] = 1.5
    logits[:, [7, 3000]] = 0.5                   # a pair tied below them
    step = _step(4, v, 8)
    step.logits = logits
    step.top_k[:] = torch.tensor([3, 4, 6, 7, 8, 10, 8, 8], dtype=torch.int32)  # 3, 4: the k-th is in the group of five
    step.top_p[:] = torch.tensor([1.0, 1.0, 0.3, 0.45, 0.6, 0.8, 0.999, 0.95])
    got, gathered, searched = _bounds(step, span)
    assert gathered == 8 and searched == 0
    assert torch.equal(got, oracle_params(step))


def test_many_candidates_in_few_blocks(solve_path):
    """Rows whose largest values share blocks (ramps): the k-th largest block maximum lies far below the k-th
    value, so the k-th value is picked from many more candidates than k: 17 to 49 a row; about 180 (sorted, as
    the real-derived rows' 85 to 150), also in tie groups of 8 cut by top-p; about 310 (over SEARCH_CHUNK: the
    searches)."""
    v, span = 4096, 512  # blocks of 16 lanes
    ramp = torch.arange(v, dtype=torch.float32) * 0.01
    steps8 = (ramp.flip(0) * 12.5).floor() / 12.5  # tie groups of 8 lanes
    step = _step(9, v, 9)
    step.logits = torch.stack([ramp, ramp.flip(0), ramp, ramp.flip(0) - 3.0, ramp, ramp * 0.5, ramp, steps8, ramp])
    step.top_k[:] = torch.tensor([2, 3, 4, 3, 3, 2, 12, 12, 20], dtype=torch.int32)
    step.top_p[:] = torch.tensor([1.0, 1.0, 1.0, 0.4, 0.3, 0.6, 0.5, 0.45, 0.7])
    got, gathered, searched = _bounds(step, span)
    assert gathered == 9 and searched == 0
    assert torch.equal(got, oracle_params(step))


@pytest.mark.parametrize("searched_row", [False, True], ids=["row-solve", "filter-passes"])
def test_rows_the_gather_cannot_serve_are_searched_and_exact(solve_path, searched_row):
    """Rows that do not fit (more than GATHER_CAP candidates, +inf, only -inf) get their bound from the one-program
    search of the row when no row is searched from the start, else from the filter passes with that row; masked
    rows (fewer than k finite blocks) are gathered, every finite value a candidate."""
    v, span = 8192, 1024  # blocks of 32 lanes
    rows = 9 if searched_row else 8
    step = _step(5, v, rows)
    step.logits[0, : GATHER_CAP + 100] = 40.0      # more tied maxima than GATHER_CAP: the row does not fit
    step.logits[1, 40:] = float("-inf")            # 40 finite values in two blocks, k = 3: gathered (T = -inf)
    step.logits[2, 99] = float("inf")               # the largest value is +inf
    step.logits[4, : SEARCH_CHUNK + 50] = 50.0      # more than a search chunk, fewer than GATHER_CAP: gathered
    step.logits[5, :GATHER_CAP] = 45.0             # exactly GATHER_CAP candidates: gathered, every slot written
    step.logits[6] = float("-inf")                 # only -inf
    step.logits[7, 2:] = float("-inf")             # two finite values, k = 5: both kept
    step.top_k[:8] = torch.tensor([5, 3, 7, 9, 4, 2, 4, 5], dtype=torch.int32)
    step.top_p[:8] = torch.tensor([0.9, 0.8, 0.7, 0.9, 0.5, 0.6, 0.5, 1.0])
    if searched_row:
        step.top_k[8] = gather_max_k(v, span) + 1
    got, gathered, searched = _bounds(step, span)
    assert gathered == 8 and searched == 3
    assert torch.equal(got, oracle_params(step))


@pytest.mark.gpu
@pytest.mark.parametrize("searched_row", [False, True], ids=["row-solve", "filter-passes"])
def test_gpu_gathered_bounds_at_a_real_vocabulary(searched_row):
    """The production span and vocabulary (V = 248,320, top-k 50 with top-p and min-p) on the GPU, with a row that
    does not fit (more tied maxima than GATHER_CAP), a masked row and a row of only -inf."""
    step = _step(6, 248320, 10 if searched_row else 9, device=DEVICE)
    step.logits[6, : GATHER_CAP + 7] = 30.0
    step.logits[7, 1000:] = float("-inf")  # 1,000 finite values in 4 blocks: all of them candidates
    step.logits[8] = float("-inf")
    step.top_k[:9] = torch.tensor([50, 50, 1, 200, 50, 7, 50, 50, 50], dtype=torch.int32, device=DEVICE)
    step.top_p[:9] = torch.tensor([0.9, 0.5, 1.0, 0.95, 1.0, 0.8, 0.9, 0.9, 0.9], device=DEVICE)
    step.min_p[4] = 0.3
    step.temperature[1] = 0.7
    if searched_row:
        step.top_k[9] = 300  # above gather_max_k: searched from the start
    got, gathered, searched = _bounds(step, 8192)
    assert gathered == 9 and searched == 2
    assert torch.equal(got, oracle_params(step))


@pytest.mark.parametrize("check_top_k", [True, False])
def test_top_k_alone_by_sample_and_check_or_by_its_gathered_bound(monkeypatch, check_top_k):
    """``plain.CHECK_TOP_K_BELOW``: rows with top-k and no top-p are checked after the draw (steps of fewer
    requests), or drawn from their gathered candidates; both give the reference's tokens (no mass is summed: no
    near-tie either way)."""
    monkeypatch.setattr("replay_kernels.draw.plain.CHECK_TOP_K_BELOW", 13 if check_top_k else 12)
    step = _step(7, 4099, 12)
    step.top_k[:] = torch.tensor([1, 3, 7, 20, 30, 2, 5, 100, 15, 25, 4, 6], dtype=torch.int32)  # 100 > gather_max_k
    step.temperature[:] = torch.tensor([1.0, 0.7, 1.3] * 4)
    impl = GumbelMaxSampler(block=64, programs=16, filter_span=512)
    state = impl.prepare(step)
    assert (state.params.gather is None) == check_top_k
    assert state.params.check.tolist() == ([1] * 12 if check_top_k else [0] * 7 + [1] + [0] * 4)  # k = 100: checked
    tokens, _ = impl.launch(state)
    assert torch.equal(tokens.cpu(), ReferenceSampler().sample(step).tokens.cpu())


def test_gathered_rows_are_drawn_from_their_candidates(monkeypatch):
    """gumbel-max draws a gathered row's token in the gather, from its kept candidates (its plan turns MODE_NONE:
    the draw kernel skips the row), and a row the gather cannot serve in the draw kernel (plan MODE_TARGET after
    the search); every token is the reference's, launch after launch, with greedy requests, a refused request with
    drafts and an unfiltered request in the batch."""
    v, span = 4099, 512
    step = synthetic_step(8, v, 9, 2, ks=[0, 0, 0, 0, 2, 0, 0, 0, 0], greedy_frac=0.0, filters=False, ties=True)
    step.temperature[:] = torch.tensor([1.0, 0.7, 1.3, 0.0, 1.0, 1.0, 0.6, 1.0, 1.0])  # request 3 greedy
    step.top_k[:] = torch.tensor([50, 3, 12, 5, 9, 0, 1, 30, 7], dtype=torch.int32)  # request 5: no filter
    step.top_p[:] = torch.tensor([0.9, 1.0, 0.6, 1.0, 0.8, 1.0, 1.0, 0.95, 0.9])
    fallback_row = int(step.cu_num_logits[8])
    step.logits[fallback_row, : GATHER_CAP + 10] = 60.0  # request 8's row does not fit: searched, then drawn as before
    monkeypatch.setattr("replay_kernels.draw.plain.CHECK_TOP_K_BELOW", 0)  # top-k alone gathered too
    impl = GumbelMaxSampler(block=64, programs=16, filter_span=span)
    state = impl.prepare(step)
    draw = state.params.gather.draw
    assert draw.req.tolist() == [0, 1, 2, -1, -1, -1, 6, 7, 8]  # by gathered row; the refused request 4 has 3 rows
    want = ReferenceSampler().sample(step).tokens.cpu()
    want[4] = -1
    for _ in range(2):  # the plan of the gathered requests is rewritten at every launch
        tokens, counts = impl.launch(state)
        assert torch.equal(tokens.cpu(), want)
        assert counts.tolist() == [1, 1, 1, 1, 0, 1, 1, 1, 1]
        modes = draw.mode.cpu().tolist()
        assert [modes[q] for q in (0, 1, 2, 6, 7)] == [MODE_NONE.value] * 5  # drawn by the gather
        assert modes[8] == MODE_TARGET.value  # searched, then drawn by the draw kernel
        assert [modes[q] for q in (3, 4, 5)] == [state.mode.tolist()[q] for q in (3, 4, 5)]  # as planned
