"""Sample-and-check in one launch (replay_kernels/one_launch.py): the same tokens as the launch sequence.

Under ``TRITON_INTERPRET=1`` the launch has one program a row (its barriers pass at once); on the GPU one
program a draw span, every program of a row waiting for the others at each barrier. Both must emit the
sequence's tokens (sample_check.py) and the reference's, leave the barrier counters at zero for the next
launch, and fall back to the sequence when the programs would not all be resident. SYNTHETIC steps only.
"""
from __future__ import annotations

import pytest
import torch

from replay_harness.impls.reference import ReferenceSampler
from replay_kernels import one_launch
from replay_kernels.gumbel_max import GumbelMaxSampler
from test_kernels import DEVICE, assert_repeatable_and_graph_capturable, compare, synthetic_step
from test_sample_check import _low_top_p_step


def _plain(seed: int, vocab: int, requests: int, dtype=torch.float32, top_k: bool = True, **kw):
    step = synthetic_step(seed, vocab, requests, 0, ks=[0] * requests, greedy_frac=0.2, dtype=dtype, **kw)
    if not top_k:  # no gathered rows at any R: top-p, min-p and greedy rows only
        step.top_k = torch.zeros_like(step.top_k)
    step.temperature[0], step.top_k[0], step.top_p[0], step.min_p[0] = 1.0, 0, 0.8, 0.0  # one check row at least
    return step


def _no_sequence(*args, **kwargs):
    raise AssertionError("the launch sequence ran: the step should have taken the one launch")


def _assert_same_as_sequence(step, monkeypatch, device: str = "cpu", max_near_ties: int = 2,
                             **shape) -> GumbelMaxSampler:
    one = GumbelMaxSampler(one_launch=True, **shape)
    with monkeypatch.context() as m:
        m.setattr("replay_kernels.plain.launch_rounds", _no_sequence)
        state = one.prepare(step.to(device))
        assert state.one is not None and state.check is not None
        tokens, counts = (x.clone() for x in one.launch(state))
        assert not state.one.sync.any() and not state.one.exits.any()  # ready for the next launch
        again = one.launch(state)
        assert torch.equal(again[0], tokens) and torch.equal(again[1], counts)
        got = one.sample(step.to(device))
    seq = GumbelMaxSampler(one_launch=False, **shape).sample(step.to(device))
    assert torch.equal(seq.tokens.cpu(), tokens.cpu()) and torch.equal(seq.counts.cpu(), counts.cpu())
    compare(step, got, ReferenceSampler().sample(step), max_near_ties=max_near_ties)
    return one


@pytest.mark.parametrize("vocab,seed,requests,ties,neg_inf,span,block", [
    (97, 0, 3, False, False, 8192, 128), (1000, 1, 3, True, False, 256, 128), (1000, 2, 2, False, True, 256, 64),
    (4099, 3, 3, True, True, 1024, 256)])
def test_one_launch_matches_the_sequence_and_reference(vocab, seed, requests, ties, neg_inf, span, block,
                                                      monkeypatch):
    """Every filter mix (top-k and top-p rows are checked below CHECK_TOP_K_BELOW requests; min-p rows and rows
    with both carry a prepared bound), greedy rows, ties at the row maximum, -inf lanes, temperatures != 1."""
    _assert_same_as_sequence(_plain(seed, vocab, requests, ties=ties, neg_inf=neg_inf), monkeypatch,
                             block=block, filter_span=span)


def test_one_launch_many_rows_bf16(monkeypatch):
    """Twelve requests without top-k (nothing gathered), bf16 logits."""
    _assert_same_as_sequence(_plain(4, 700, 12, dtype=torch.bfloat16, top_k=False), monkeypatch, block=64,
                             filter_span=128)


@pytest.mark.parametrize("block", [64, 1024])
def test_one_launch_redraws_until_the_token_is_kept(block, monkeypatch):
    """Flat rows at top-p 0.02-0.2: most first draws miss the set, so the loop redraws (several rounds a row):
    a program that scores its spans again each round (block 64), and one with one span whose scores it keeps
    (block 1024 >= V: ONE_SPAN, a redraw is a masked maximum, as on the GPU)."""
    _assert_same_as_sequence(_low_top_p_step(5, 700, 3), monkeypatch, max_near_ties=0, block=block, filter_span=256)


def _peaked_step(vocab: int):
    """Three top-p 0.5 rows at temperature 1: row 0 with one lane 30 above the rest (the bounded Gumbel noise,
    at most about 22.9 and at least about -2.8, cannot move the draw off it), row 1 with two such lanes (the
    maximum held twice), row 2 as drawn."""
    step = _plain(8, vocab, 3, top_k=False)
    step.temperature[:], step.top_k[:], step.top_p[:], step.min_p[:] = 1.0, 0, 0.5, 0.0
    step.logits[0, vocab // 3] = step.logits[0].max() + 30.0
    step.logits[1, 5] = step.logits[1, vocab - 7] = step.logits[1].max() + 30.0
    return step


def test_a_first_draw_held_once_at_the_top_is_kept_without_a_check(monkeypatch):
    """The only lane at the row maximum is kept by any top-p (and any top-k > 0): its row writes no check
    partial; a maximum held by two lanes is checked (the tie order decides), with the sequence's tokens."""
    step = _peaked_step(1000)
    one = _assert_same_as_sequence(step, monkeypatch, block=128, filter_span=256)
    state = one.prepare(step)
    state.one.pall.fill_(float("nan"))
    tokens = one.launch(state)[0]
    assert tokens[0, 0] == 1000 // 3 and tokens[1, 0] in (5, 1000 - 7)
    assert state.one.pall[0].isnan().all() and not state.one.pall[1].isnan().any()


def test_the_default_is_the_sequence_under_the_interpreter_and_for_larger_steps():
    step = _plain(1, 500, 3, top_k=False)
    if one_launch.interpreting():
        assert GumbelMaxSampler().prepare(step).one is None
    big = _plain(1, 500, one_launch.ONE_LAUNCH_BELOW, top_k=False)
    assert GumbelMaxSampler().prepare(big.to(DEVICE)).one is None
    gathered = _plain(6, 500, 6)  # a top-k row gathered: the one launch does not draw from candidates
    gathered.temperature[1], gathered.top_k[1], gathered.top_p[1], gathered.min_p[1] = 1.0, 5, 1.0, 0.0
    state = GumbelMaxSampler(one_launch=True, filter_span=128).prepare(gathered)
    assert state.params.gather is not None and state.one is None


@pytest.mark.gpu
@pytest.mark.parametrize("vocab,requests,seed", [(248320, 1, 0), (151936, 3, 1), (32000, 3, 2)])
def test_gpu_one_launch_matches_the_sequence(vocab, requests, seed, monkeypatch):
    """One program a draw span (122 a row at V = 248,320), barriers across programs; 100 repeats and a graph."""
    step = _plain(seed, vocab, requests, top_k=requests > 1)
    impl = _assert_same_as_sequence(step, monkeypatch, "cuda")
    state = impl.prepare(step.to("cuda"))
    assert state.one.programs > 1
    monkeypatch.setattr("replay_kernels.plain.launch_rounds", _no_sequence)
    assert_repeatable_and_graph_capturable(impl, state)


@pytest.mark.gpu
def test_gpu_held_once_at_the_top(monkeypatch):
    step = _peaked_step(248320)
    one = _assert_same_as_sequence(step, monkeypatch, "cuda")
    state = one.prepare(step.to("cuda"))
    state.one.pall.fill_(float("nan"))
    one.launch(state)
    assert state.one.pall[0].isnan().all().item() and not state.one.pall[1].isnan().any().item()


@pytest.mark.gpu
def test_gpu_one_launch_redraws(monkeypatch):
    _assert_same_as_sequence(_low_top_p_step(7, 151936, 3), monkeypatch, "cuda", max_near_ties=0)


@pytest.mark.gpu
def test_gpu_falls_back_when_the_programs_would_not_all_be_resident(monkeypatch):
    step = _plain(3, 248320, 2, top_k=False).to("cuda")
    monkeypatch.setattr(one_launch, "resident_programs", lambda compiled, device: 100)
    impl = GumbelMaxSampler(one_launch=True)
    state = impl.prepare(step)
    tokens = impl.launch(state)[0].clone()
    assert len(state.launches) > 1  # the sequence: draw, check, rounds, finish
    assert torch.equal(tokens.cpu(), GumbelMaxSampler(one_launch=False).sample(step).tokens.cpu())


@pytest.mark.gpu
def test_gpu_a_launch_too_large_to_be_resident_is_refused_and_the_sequence_runs(monkeypatch):
    """The launch is cooperative: programs that cannot all be resident (``fits`` wrong, or an SM limit it did not
    see) make the driver refuse it, where a plain launch would wait at the first barrier forever; the sampler
    then runs the launch sequence, with the same tokens."""
    step = _plain(3, 248320, 8, top_k=False).to("cuda")  # 8 x 122 programs: more than an H200 holds at once
    monkeypatch.setattr(one_launch, "fits", lambda *args: True)
    impl = GumbelMaxSampler(one_launch=True)
    state = impl.prepare(step)
    assert state.one is not None
    tokens = impl.launch(state)[0].clone()
    assert state.one is None and len(state.launches) > 2
    assert torch.equal(tokens.cpu(), GumbelMaxSampler(one_launch=False).sample(step).tokens.cpu())
