"""The filter passes in one cooperative launch (replay_kernels/filters/filter_loop.py) give the launch sequence's cuts.

The loop runs the sequence's own per-span functions between barriers, so its cuts must equal
``filters.launch_filters``' bit for bit, on every stage: the top-k search, the min-p mass pass, the top-p search,
the tie pass and the cut-index search (rows quantized so the top-p cut falls inside a tie group).
"""
from __future__ import annotations

import pytest
import torch

from replay_kernels.filters.filter_loop import FilterLoop, launcher
from replay_kernels.filters.filters import FilterScratch, launch_filters


def _rows(seed: int, rows: int, vocab: int, device: str):
    """SYNTHETIC rows, values on a grid of 0.5 (many ties), with per-row temperature, top-k, top-p (1 on some rows:
    their cut is the top-k or min-p bound), min-p; the inputs of ``launch_filters`` (log min-p -inf where off,
    top-k = V where off)."""
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(rows, vocab, generator=g) * 4).round() / 2
    temp = torch.where(torch.rand(rows, generator=g) < 0.5, 1.0, 0.7)
    top_k = torch.where(torch.rand(rows, generator=g) < 0.4, torch.randint(1, 60, (rows,), generator=g), vocab)
    top_p = torch.where(torch.rand(rows, generator=g) < 0.3, 1.0, torch.empty(rows).uniform_(0.2, 0.97, generator=g))
    min_p = torch.where(torch.rand(rows, generator=g) < 0.3, 0.02, 0.0)
    log_min_p = torch.where(min_p > 0, torch.log(min_p.clamp_min(1e-30)), float("-inf"))
    return [t.to(device) for t in (logits, temp.float(), log_min_p.float(), top_k.to(torch.int32), top_p.float())]


def _cuts(logits, temp, log_min_p, top_k, top_p, fs: FilterScratch, loop: FilterLoop | None):
    rows = torch.arange(logits.shape[0], dtype=torch.int32, device=logits.device)
    cut_val = torch.full((logits.shape[0],), float("nan"), device=logits.device)
    cut_idx = torch.full((logits.shape[0],), -7, dtype=torch.int32, device=logits.device)
    args = (logits, rows, temp, log_min_p, top_k, top_p, cut_val, cut_idx, fs)
    if loop is None:
        launch_filters(*args)
    else:
        run = launcher(loop, *args)
        assert run is not None
        run()
    return cut_val, cut_idx


@pytest.mark.parametrize("seed,rows,vocab,grid_rows,any_topk", [(1, 7, 300, 3, True), (2, 5, 1000, 2, False),
                                                                 (3, 4, 257, 8, True)])
def test_filter_loop_gives_the_launch_sequence_cuts(seed, rows, vocab, grid_rows, any_topk):
    logits, temp, log_min_p, top_k, top_p = _rows(seed, rows, vocab, "cpu")
    if not any_topk:
        top_k[:] = vocab
    kw = dict(any_topk=any_topk, any_topp=True, any_bound=True, span=128, grid_rows=grid_rows)
    fs = FilterScratch.allocate(rows, vocab, "cpu", **kw)
    want = _cuts(logits, temp, log_min_p, top_k, top_p, fs, None)
    ties_cut = int((fs.i32["ndrop"] > 0).sum())  # rows whose top-p cut splits a tie group: the index search ran
    loop_fs = FilterScratch.allocate(rows, vocab, "cpu", **kw)
    loop = FilterLoop.allocate(loop_fs, "cpu")
    got = _cuts(logits, temp, log_min_p, top_k, top_p, loop_fs, loop)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(loop_fs.i32["ndrop"], fs.i32["ndrop"]) and ties_cut > 0
    assert int(loop.sync.abs().sum()) == 0 and int(loop.exits.abs().sum()) == 0  # counters reset for the next launch
    loop_fs.count.zero_()  # no listed row: the launch writes no cut
    idle_val, idle_idx = _cuts(logits, temp, log_min_p, top_k, top_p, loop_fs, loop)
    assert bool(torch.isnan(idle_val).all()) and bool((idle_idx == -7).all())


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [248320, 151936])
def test_gpu_filter_loop_gives_the_launch_sequence_cuts(vocab):
    """Slots of P > 1 programs meeting at real barriers; 20 repeats give the same cuts."""
    logits, temp, log_min_p, top_k, top_p = _rows(5, 6, vocab, "cuda")
    kw = dict(any_topk=True, any_topp=True, any_bound=True, grid_rows=4)
    fs = FilterScratch.allocate(6, vocab, "cuda", **kw)
    want = _cuts(logits, temp, log_min_p, top_k, top_p, fs, None)
    loop_fs = FilterScratch.allocate(6, vocab, "cuda", **kw)
    loop = FilterLoop.allocate(loop_fs, "cuda")
    assert loop.programs == loop_fs.splits > 1
    for _ in range(20):
        got = _cuts(logits, temp, log_min_p, top_k, top_p, loop_fs, loop)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
