"""Sample-and-check in one launch (replay_kernels/draw/one_launch.py): the same tokens as the launch sequence.

Under ``TRITON_INTERPRET=1`` the launch has one program a row (its barriers pass at once); on the GPU one
program a draw span, every program of a row waiting for the others at each barrier. Both must emit the
sequence's tokens (sample_check.py) and the reference's, leave the barrier counters at zero for the next
launch, and fall back to the sequence when the programs would not all be resident. SYNTHETIC steps only.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from replay_harness.impls.reference import ReferenceSampler
from replay_kernels.draw import one_launch, open_rows
from replay_kernels.draw.gumbel_max import GumbelMaxSampler
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
        m.setattr("replay_kernels.draw.plain.launch_rounds", _no_sequence)
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
    monkeypatch.setattr("replay_kernels.draw.plain.launch_rounds", _no_sequence)
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


# ---------------------------------------------------------------------------
# The open-row launch: what the first check leaves open, settled in one cooperative launch
# ---------------------------------------------------------------------------


def _no_rounds(*args, **kwargs):
    raise AssertionError("the finish loop ran: the open-row launch should have settled every row")


def _verify_low_top_p_step(seed: int, vocab: int, requests: int):
    """SYNTHETIC verify step, one-hot drafts, every request at temperature 1 and top-p 0.6 on flat rows where
    each draft holds about half the row's mass: a draft is rejected about one time in six, and the residual
    draw (the target without it) then usually misses the top-p set, so the open-row launch redraws over the
    values above the miss, where the rejected draft would win about half the time were it not left out."""
    step = synthetic_step(seed, vocab, requests, 3, greedy_frac=0.0, filters=False)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(step.logits.shape, generator=g) * 0.5
    rows = torch.nonzero(step.draft_token_ids >= 0).flatten()
    logits[rows, step.draft_token_ids[rows].long()] = float(torch.log(torch.exp(logits[0]).sum()))
    step.logits = logits.to(step.logits.dtype)
    step.temperature = torch.ones(requests)
    step.top_p = torch.full((requests,), 0.6)
    return step


def _assert_open_rows_as_rounds(step, impl_cls, monkeypatch, device: str = "cpu", **shape):
    """``impl_cls(open_rows=True)`` settles every row the first check leaves open in the open-row launch (the
    finish loop never runs), with the launched rounds' tokens and the reference's; its counters and the
    first check's list are zero again after a launch, and a second launch repeats the tokens."""
    with monkeypatch.context() as m:
        m.setattr("replay_kernels.draw.sample_check.launch_finish", _no_rounds)
        impl = impl_cls(open_rows=True, **shape)
        state = impl.prepare(step.to(device))
        assert state.open is not None and state.check is not None
        tokens, counts = (x.clone() for x in impl.launch(state))
        assert not state.open.sync.any() and not state.open.exits.any() and not state.check.open_len.any()
        again = impl.launch(state)
        assert torch.equal(again[0], tokens) and torch.equal(again[1], counts)
        got = impl.result(state, tokens, counts)
    rounds = impl_cls(open_rows=False, **shape).sample(step.to(device))
    assert torch.equal(rounds.tokens.cpu(), tokens.cpu()) and torch.equal(rounds.counts.cpu(), counts.cpu())
    compare(step, got, ReferenceSampler().sample(step), max_near_ties=0)
    return impl


@pytest.mark.parametrize("vocab,seed,requests,block,span", [(700, 5, 12, 64, 256), (1000, 6, 9, 1024, 128),
                                                           (4099, 7, 5, 256, 1024)])
def test_open_rows_settle_what_the_first_check_leaves_open(vocab, seed, requests, block, span, monkeypatch):
    """Plain steps past the one launch (or with it off), most first draws missing a top-p (or top-k <= 4) set:
    the open-row launch redraws and checks until each row is kept."""
    step = _low_top_p_step(seed, vocab, requests)
    _assert_open_rows_as_rounds(step, GumbelMaxSampler, monkeypatch, one_launch=False, block=block,
                                filter_span=span)


def test_open_rows_a_slot_settles_several_rows(monkeypatch):
    """Two slots for twelve requests: each slot takes its list entries one after the other, its barrier count
    carried from row to row."""
    monkeypatch.setattr(open_rows, "OPEN_ROW_SLOTS", 2)
    impl = _assert_open_rows_as_rounds(_low_top_p_step(9, 400, 12), GumbelMaxSampler, monkeypatch,
                                       one_launch=False, block=64, filter_span=128)
    assert impl.prepare(_low_top_p_step(9, 400, 12)).open.sync.numel() == 2


def test_open_rows_of_a_verify_leave_the_rejected_draft_out(monkeypatch):
    """Verify steps with top-p: open RESIDUAL rows draw the target without the rejected draft (the finish
    loop's rule), open bonus rows the target; tokens go to each request's slot."""
    from replay_kernels.verify.stochastic import StochasticSampler
    _assert_open_rows_as_rounds(_verify_low_top_p_step(11, 600, 16), StochasticSampler, monkeypatch,
                                stats_block=64, draw_block=64, stats_span=128, filter_span=128)


def _lanes_at_values_step(seed: int, vocab: int, requests: int, values: tuple, top_p: float):
    """Rows at -30 but for ``len(values)`` random lanes a row, lane i at ``values[i]``, every request at ``top_p``
    (no top-k): (step, lanes [requests, len(values)])."""
    step = _low_top_p_step(seed, vocab, requests)
    g = torch.Generator().manual_seed(seed)
    logits = torch.full((requests, vocab), -30.0)
    lanes = torch.stack([torch.randperm(vocab, generator=g)[:len(values)] for _ in range(requests)])
    for i, value in enumerate(values):
        logits[torch.arange(requests), lanes[:, i]] = value
    step.logits, step.top_p = logits, torch.full((requests,), top_p)
    step.top_k = torch.zeros(requests, dtype=torch.int32)
    return step, lanes


def test_open_rows_keep_a_redraw_held_once_at_the_top_without_its_check(monkeypatch):
    """Rows of one peak (8.0), one runner-up (7.0) and the rest at -30, top-p 0.5: the set is the peak alone, a
    first draw of the runner-up (about one row in four) misses, and the redraw above it can only be the peak, the
    one lane at the row's top (the first draw's ``top[1]``): kept without its check, so the open-row launch's
    check partials stay unwritten (NaN), with the rounds' and the reference's tokens. Mutation-checked: never
    keeping a redraw without its check fails it."""
    from replay_harness.oracle.rng import gumbel_row

    vocab, requests, opened = 500, 12, 0
    for seed in (3, 4):
        step, lanes = _lanes_at_values_step(seed, vocab, requests, (8.0, 7.0), 0.5)
        for r in range(requests):
            noise = gumbel_row(int(step.seed[r]), int(step.positions[r]), vocab)
            opened += int(torch.argmax(step.logits[r] + noise)) == int(lanes[r, 1])
        impl = GumbelMaxSampler(open_rows=True, one_launch=False, block=64, filter_span=128)
        state = impl.prepare(step.to(DEVICE))
        state.open.pall.fill_(float("nan"))
        tokens = impl.launch(state)[0].cpu()
        assert torch.isnan(state.open.pall).all(), seed
        assert tokens[:, 0].tolist() == lanes[:, 0].tolist()
        _assert_open_rows_as_rounds(step, GumbelMaxSampler, monkeypatch, DEVICE, one_launch=False, block=64,
                                    filter_span=128)
    assert opened >= 2  # rows the open-row launch settled happened


def test_open_rows_check_a_redraw_at_a_top_two_lanes_hold(monkeypatch):
    """Rows whose top (8.0) two lanes hold, a runner-up at 7.0, the rest at -30, top-p 0.3: only the higher id of the
    pair is kept. A first draw of the runner-up misses and the redraw above it is either lane of the pair, at the
    row's top but not its one lane (``top[1]`` is 0): the lower id must be checked and rejected, then drawn again.
    Mutation-checked: keeping a redraw at the top whatever the flag fails it."""
    from replay_harness.oracle.rng import gumbel_row

    vocab, requests, lower_redrawn = 400, 12, 0
    for seed in (5, 6, 7):
        step, lanes = _lanes_at_values_step(seed, vocab, requests, (8.0, 8.0, 7.0), 0.3)
        pair = lanes[:, :2].sort(dim=1).values
        for r in range(requests):
            noised = step.logits[r] + gumbel_row(int(step.seed[r]), int(step.positions[r]), vocab)
            lower_redrawn += int(torch.argmax(noised)) == int(lanes[r, 2]) and noised[pair[r, 0]] >= noised[pair[r, 1]]
        _assert_open_rows_as_rounds(step, GumbelMaxSampler, monkeypatch, DEVICE, one_launch=False, block=64,
                                    filter_span=128)
    assert lower_redrawn >= 1  # the case the flag must not skip happened


def _floored_too_high(monkeypatch):
    """Every open row's redraw floored at 1e30: the first draw's partials replaced by one a row, its last token
    of the largest value (always drawn again) said to score that. No lane reaches the floor."""
    real = open_rows.launcher

    def floored(s, cs, first, logits, row, *rest):
        x = logits[row.long()].float()
        last_top = x.shape[1] - 1 - torch.flip(x, [1]).argmax(-1)
        fake = SimpleNamespace(part_max=torch.full((row.numel(), 1), 1e30, device=x.device),
                               part_arg=last_top.to(torch.int32).view(-1, 1).contiguous(), splits=1, top=first.top)
        return real(s, cs, fake, logits, row, *rest)

    monkeypatch.setattr(open_rows, "launcher", floored)


def test_open_rows_draw_again_unpruned_below_a_floor_nothing_reaches(monkeypatch):
    """A redraw's floor is a score some drawn token is believed to reach; when the pruned draw's best falls below
    it, the draw runs again unpruned, so even a false floor gives the rounds' tokens. Token 0 holds each row's
    largest value, so it is always kept: without that rule every lane is pruned and each open row takes it."""
    _floored_too_high(monkeypatch)
    step = _low_top_p_step(5, 700, 12)
    step.logits[:, 0] = step.logits.max(-1).values + 0.01
    _assert_open_rows_as_rounds(step, GumbelMaxSampler, monkeypatch, one_launch=False, block=64, filter_span=256)


def test_open_rows_by_the_requests_expected_open():
    """The open-row launch's programs a row by the sum of the checked requests' miss bounds (OPEN_ROW_SHAPES):
    122 up to 3 expected, 61 up to 8, then the launched rounds (``open_rows=True``: the last shape)."""
    assert open_rows.shape([0.1] * 30) == (122, 168)
    assert open_rows.shape([0.1] * 64) == (61, 128)
    assert open_rows.shape([0.1] * 90) is None
    assert open_rows.shape([0.1] * 90, force=True) == (61, 128)
    step = _plain(1, 500, 12, top_k=False)
    step.temperature[:], step.top_p[:], step.min_p[:] = 1.0, 0.9, 0.0
    assert GumbelMaxSampler().prepare(step).open is not None  # 1.2 expected
    step.top_p[:] = 0.2  # 9.6 expected: the rounds
    assert GumbelMaxSampler().prepare(step).open is None
    assert GumbelMaxSampler(open_rows=True).prepare(step).open is not None
    assert GumbelMaxSampler(open_rows=False, one_launch=False).prepare(step).open is None


@pytest.mark.gpu
@pytest.mark.parametrize("vocab,requests,top_p,seed", [(248320, 64, 0.9, 0), (151936, 12, None, 1),
                                                      (32000, 40, None, 2)])
def test_gpu_open_rows_match_the_rounds(vocab, requests, top_p, seed, monkeypatch):
    """Slots of 61 or 122 programs meeting at barriers; 100 repeats and a CUDA graph."""
    if top_p is None:
        step = _low_top_p_step(seed, vocab, requests)
    else:
        step = _plain(seed, vocab, requests, top_k=False)
        step.temperature[:], step.top_p[:], step.min_p[:] = 1.0, top_p, 0.0
    impl = _assert_open_rows_as_rounds(step, GumbelMaxSampler, monkeypatch, "cuda")
    state = impl.prepare(step.to("cuda"))
    programs, _ = open_rows.shape(state.params.check_miss, force=True)
    assert state.open.programs == min(programs, state.open.draw_splits) > 1
    monkeypatch.setattr("replay_kernels.draw.sample_check.launch_finish", _no_rounds)
    assert_repeatable_and_graph_capturable(impl, state)


@pytest.mark.gpu
@pytest.mark.parametrize("programs,maxnreg", [(122, 168), (61, 128)])
def test_gpu_open_rows_draw_again_unpruned_below_a_floor_nothing_reaches(programs, maxnreg, monkeypatch):
    """The false floor on the GPU, at 122 programs a row (one span each, its scores kept in registers) and 61."""
    _floored_too_high(monkeypatch)
    monkeypatch.setattr(open_rows, "OPEN_ROW_SHAPES", ((1e9, programs, maxnreg),))
    step = _low_top_p_step(4, 248320, 12)
    step.logits[:, 0] = step.logits.max(-1).values + 0.01
    impl = _assert_open_rows_as_rounds(step, GumbelMaxSampler, monkeypatch, "cuda")
    assert impl.prepare(step.to("cuda")).open.programs == programs


@pytest.mark.gpu
def test_gpu_open_rows_of_a_verify(monkeypatch):
    from replay_kernels.verify.stochastic import StochasticSampler
    _assert_open_rows_as_rounds(_verify_low_top_p_step(13, 151936, 16), StochasticSampler, monkeypatch, "cuda")


@pytest.mark.gpu
def test_gpu_open_rows_refused_when_too_large_run_the_rounds(monkeypatch):
    """More slots than the device holds at once (``resident_programs`` overstated): the driver refuses the
    cooperative launch, and the sampler runs the rounds and the finish loop instead, with the same tokens."""
    step = _low_top_p_step(3, 248320, 40).to("cuda")
    monkeypatch.setattr(one_launch, "resident_programs", lambda compiled, device: 10 ** 6)
    monkeypatch.setattr(open_rows, "OPEN_ROW_SLOTS", 40)  # 40 x 61 programs: more than an H200 holds
    monkeypatch.setattr(open_rows, "OPEN_ROW_SHAPES", ((1e9, 61, 128),))
    impl = GumbelMaxSampler()
    state = impl.prepare(step)
    tokens = impl.launch(state)[0].clone()
    assert state.open is None and not state.check.open_len.any()
    assert torch.equal(tokens.cpu(), GumbelMaxSampler(open_rows=False).sample(step).tokens.cpu())
