"""Sample-and-check top-k / top-p (replay_kernels/draw/sample_check.py) against the reference.

``gumbel-max`` draws first and checks the drawn token against the row's top-k / top-p set; these
tests pin that it emits the reference's tokens (up to documented near-ties) on SYNTHETIC rows with
every filter mix, ties, -inf and NaN-free masks, temperatures != 1, several spans per row, and on the
path where the launched rounds do not settle a row and the one-program-per-row finish loop must. The rounds
and the finish loop are the fallback of the open-row launch (tests/test_one_launch.py), so their tests ask for
them (``open_rows=False``).
"""
from __future__ import annotations

import signal

import pytest
import torch
import triton
import triton.language as tl

from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.rng import gumbel_row
from replay_kernels.draw import sample_check
from replay_kernels.draw.gumbel_max import GumbelMaxSampler
from replay_kernels.shared.partials import block_argmax_top
from replay_kernels.verify.stochastic import StochasticSampler
from test_kernels import DEVICE, assert_repeatable_and_graph_capturable, compare, synthetic_step


def _plain(seed: int, vocab: int, requests: int, **kw):
    return synthetic_step(seed, vocab, requests, 0, ks=[0] * requests, greedy_frac=0.1, **kw)


@pytest.mark.parametrize("vocab,seed,ties,neg_inf,span", [(97, 0, False, False, 8192), (1000, 1, True, False, 256),
                                                           (1000, 2, False, True, 256), (4099, 3, True, True, 1024)])
def test_every_filter_mix_matches_reference(vocab, seed, ties, neg_inf, span):
    step = _plain(seed, vocab, 24, ties=ties, neg_inf=neg_inf)
    impl = GumbelMaxSampler(block=128, programs=64, filter_span=span)
    state = impl.prepare(step)
    assert state.check is not None  # the mix has top-k-only and top-p-only rows
    compare(step, impl.sample(step), ReferenceSampler().sample(step))


def _low_top_p_step(seed: int, vocab: int, requests: int):
    """Flat rows at temperature 1 and top-p 0.02-0.2: the unfiltered draw usually misses the set."""
    step = _plain(seed, vocab, requests, filters=False)
    g = torch.Generator().manual_seed(seed)
    step.logits = (torch.randn(step.logits.shape, generator=g) * 0.5).to(step.logits.dtype)
    step.temperature = torch.ones(requests)
    step.top_p = torch.empty(requests).uniform_(0.02, 0.2, generator=g)
    step.top_k[::3] = torch.randint(1, 5, (len(range(0, requests, 3)),), generator=g, dtype=torch.int32)
    step.top_p[::3] = 1.0  # every third row: top-k only (k <= 4)
    return step


def _assert_finish_loop_settles(vocab: int, device: str, **shape) -> None:
    """No launched round: the one-program-per-row finish loop (its draw pruned by the noise bound) settles every
    row the first check leaves open, most of them here, with the reference's tokens."""
    step = _low_top_p_step(5, vocab, 12)
    unfiltered = [int(torch.argmax(step.logits[r].float() + gumbel_row(int(step.seed[r]), int(step.positions[r]),
                                                                       vocab))) for r in range(12)]
    want = ReferenceSampler().sample(step)
    missed = sum(unfiltered[r] != int(want.tokens[r, 0]) for r in range(12))
    assert missed >= 6, missed  # the first draw misses the set on most rows: the later stages do the work
    compare(step, GumbelMaxSampler(open_rows=False, **shape).sample(step.to(device)), want, max_near_ties=0)


def test_finish_loop_settles_rows_the_rounds_leave_open(monkeypatch):
    monkeypatch.setattr("replay_kernels.draw.sample_check.EXTRA_ROUNDS", 0)
    _assert_finish_loop_settles(700, "cpu", block=64, programs=16, filter_span=256)


@pytest.mark.gpu
def test_gpu_finish_loop_settles_rows_the_rounds_leave_open(monkeypatch):
    """The same at a real vocabulary and the production launch shapes (the loop's pruned draw on the GPU)."""
    monkeypatch.setattr("replay_kernels.draw.sample_check.EXTRA_ROUNDS", 0)
    _assert_finish_loop_settles(151936, "cuda")


@pytest.mark.parametrize("rounds", [0, 1, 2, 3])
def test_rounds_and_finish_agree_and_launch_replays(rounds, monkeypatch):
    monkeypatch.setattr("replay_kernels.draw.sample_check.EXTRA_ROUNDS", rounds)  # every list-length reset path
    step = _low_top_p_step(6, 300, 6)
    impl = GumbelMaxSampler(block=64, programs=16, filter_span=128, open_rows=False)
    state = impl.prepare(step)
    first = [x.clone() for x in impl.launch(state)]
    assert not state.check.open_len.any()  # every open-row list is empty again for the next launch
    again = impl.launch(state)  # the working plan is rebuilt from the prepared one: same tokens
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    compare(step, impl.sample(step), ReferenceSampler().sample(step), max_near_ties=0)


def test_launched_rounds_settle_the_open_rows_without_the_finish_loop(monkeypatch):
    """The later checks and draws run over the list of rows still open: with enough rounds and no finish
    loop they alone must settle every row, and leave the lists empty for the next launch."""
    step = _low_top_p_step(9, 400, 10)
    monkeypatch.setattr("replay_kernels.draw.sample_check.EXTRA_ROUNDS", 24)
    monkeypatch.setattr("replay_kernels.draw.sample_check.launch_finish", lambda *args: None)
    impl = GumbelMaxSampler(block=64, programs=16, filter_span=128, open_rows=False)
    state = impl.prepare(step)
    assert state.check.row_slots < step.num_requests  # a slot covers several requests
    tokens = impl.launch(state)[0].clone()
    assert not state.check.open_len.any()
    assert torch.equal(impl.launch(state)[0], tokens)
    compare(step, impl.sample(step), ReferenceSampler().sample(step), max_near_ties=0)


def test_a_slot_draws_and_checks_every_row_of_its_list(monkeypatch):
    """One launched round, no finish loop: a slot that covers several open rows (8 requests a slot) must
    leave the same tokens and working plan as one slot per request."""
    step = _low_top_p_step(9, 400, 10)
    monkeypatch.setattr("replay_kernels.draw.sample_check.EXTRA_ROUNDS", 1)
    monkeypatch.setattr("replay_kernels.draw.sample_check.launch_finish", lambda *args: None)
    out = []
    for per_slot in (1, 8):
        monkeypatch.setattr("replay_kernels.draw.sample_check.ROWS_PER_SLOT", per_slot)
        impl = GumbelMaxSampler(block=64, programs=16, filter_span=128, open_rows=False)
        state = impl.prepare(step)
        assert state.check.row_slots == -(-step.num_requests // per_slot)
        out.append((impl.launch(state)[0].clone(), state.check.mode.clone(), state.check.cut_idx.clone()))
    assert all(torch.equal(a, b) for a, b in zip(*out))


def test_check_counts_tied_tokens_before_the_drawn_one_and_not_after():
    """A top-p row whose mass is one group of 40 equal values spread over ten check tiles: the drawn token c
    is kept iff more than (1 - p) of the group lies at or below it in (value, id) order, i.e. iff the tied
    tokens of lower id (in earlier tiles, in c's own tile) outnumber (1 - p) x 40. The check tests a tile
    wholly before c by value alone (x <= x_c), one wholly after by x < x_c: swapping the two keeps a token
    it must redraw, or redraws one it must keep."""
    requests, vocab = 12, 3000
    step = _plain(11, vocab, requests, filters=False)
    logits = torch.full((requests, vocab), float("-inf"))
    logits[:, 37 + 71 * torch.arange(40)] = 0.0  # ids 37..2806: three or four in each tile of 256
    step.logits = logits.to(step.logits.dtype)
    step.temperature = torch.ones(requests)
    step.top_p = torch.tensor([0.3125, 0.5375, 0.7375] * 4)  # (1 - p) x 40 = 27.5, 18.5, 10.5: no near-tie
    impl = GumbelMaxSampler(block=64, programs=16, filter_span=256)  # check tiles of 256, one a program
    want = ReferenceSampler().sample(step)
    drawn = [int(torch.argmax(logits[r] + gumbel_row(int(step.seed[r]), int(step.positions[r]), vocab)))
             for r in range(requests)]
    kept = sum(drawn[r] == int(want.tokens[r, 0]) for r in range(requests))
    assert 0 < kept < requests  # both verdicts are exercised
    compare(step, impl.sample(step), want, max_near_ties=0)


def test_check_sums_each_span_once():
    """The check pass loads two tiles at once; with tiles as wide as the span, the second tile of a pair is the
    next span's, which its own program sums. Two equal tokens in spans 0 and 1 of a 1024-token row, top-p 0.6:
    both are kept (the lower one's mass at or below it is 1/2 > 0.4). A second tile read past the span would
    count token 300 twice in span 0's sum and make the lower token's share 1/3, redrawing it."""
    requests, vocab = 12, 1024
    step = _plain(12, vocab, requests, filters=False)
    logits = torch.full((requests, vocab), float("-inf"))
    logits[:, [10, 300]] = 0.0
    step.logits = logits.to(step.logits.dtype)
    step.temperature = torch.ones(requests)
    step.top_p = torch.full((requests,), 0.6)
    want = ReferenceSampler().sample(step)
    lower = sum(int(want.tokens[r, 0]) == 10 for r in range(requests))
    assert 0 < lower < requests  # both tokens are drawn, and the lower one is kept
    impl = GumbelMaxSampler(block=64, programs=16, filter_span=256)  # check tiles of 256 = the span
    compare(step, impl.sample(step), want, max_near_ties=0)


def _processed_max(row: torch.Tensor, temperature: float, skip: int = -1) -> float:
    """The largest value of ``row / temperature`` (IEEE division, NaN read as -inf), token ``skip`` left out."""
    x = row.float() / temperature
    x = torch.where(torch.isnan(x), torch.tensor(float("-inf")), x)
    if skip >= 0:
        x[skip] = float("-inf")
    return float(x.max())


def _assert_first_draw_records_exact_maxima(vocab: int, device: str, **shape) -> None:
    """Sample-and-check's first draw records each row's largest processed value (``draw.top``) from the tile
    bounds; only a load with a NaN bound, or holding a one-hot residual's rejected draft, is processed lane by
    lane. Rows here: NaN in whole loads and single lanes, temperatures 0.6 / 1.3, and verify requests whose
    rejected draft is the row's largest value. Taking the bound of those loads gives the draft's value (or,
    where the backend's max passes NaN on, NaN) instead of the largest value the residual keeps."""
    requests = 8
    step = _low_top_p_step(11, vocab, requests)
    step.top_k[:] = 0
    step.temperature = torch.tensor([1.0, 0.6, 1.3, 1.0, 0.6, 1.3, 1.0, 0.6])
    logits = step.logits.clone()
    logits[0, 128:128 + vocab // 8] = float("nan")  # whole loads of NaN
    logits[1, 7] = float("nan")  # one NaN lane: that load's bound is NaN
    logits[2, :] = float("nan")
    logits[2, vocab - 2] = 1.0  # everything NaN but one token
    step.logits = logits.to(step.logits.dtype)
    impl = GumbelMaxSampler(**shape)
    state = impl.prepare(step.to(device))
    impl.launch(state)
    want = [_processed_max(step.logits[r], float(step.temperature[r])) for r in range(requests)]
    assert state.draw.top[0].tolist() == want

    # verify, one draft a request, no draft logits: the draft is each row's largest value and is rejected
    # (accepted only if u < p(draft), about 1e-3 here), so the draw row is the residual without it
    verify = synthetic_step(12, vocab, requests, 1, ks=[1] * requests, greedy_frac=0.0, filters=False)
    g = torch.Generator().manual_seed(12)
    logits = torch.randn(verify.logits.shape, generator=g) * 0.5
    drafts = torch.randint(0, vocab, (requests,), generator=g)
    for r in range(requests):
        logits[2 * r, drafts[r]] = float(logits[2 * r].max()) + 0.5
    verify.logits = logits.to(verify.logits.dtype)
    verify.draft_token_ids = torch.stack([drafts, torch.full_like(drafts, -1)], 1).flatten().to(torch.int32)
    verify.temperature = torch.tensor([1.0, 0.6, 1.3, 1.0] * 2)
    verify.top_p = torch.full((requests,), 0.5)
    stochastic = StochasticSampler(**{("draw_block" if k == "block" else k): v for k, v in shape.items()})
    state = stochastic.prepare(verify.to(device))
    tokens, counts = stochastic.launch(state)
    assert counts.tolist() == [1] * requests  # every draft rejected: the draw rows are the residuals
    want = [_processed_max(verify.logits[2 * r], float(verify.temperature[r]), int(drafts[r]))
            for r in range(requests)]
    assert state.draw.top[0].tolist() == want
    assert tokens.tolist() == ReferenceSampler().sample(verify).tokens.tolist()


def test_first_draw_records_each_checked_rows_exact_max():
    _assert_first_draw_records_exact_maxima(2001, "cpu", block=64, programs=8, filter_span=256)


@pytest.mark.gpu
def test_gpu_first_draw_records_each_checked_rows_exact_max():
    """On the GPU too: whether max passes a NaN on differs between backends (the interpreter skips it)."""
    _assert_first_draw_records_exact_maxima(151936, "cuda")


def test_batch_composition_does_not_change_a_checked_row():
    step = _low_top_p_step(7, 500, 6)
    whole = GumbelMaxSampler(block=64, programs=8, filter_span=128).sample(step)
    for r in range(step.num_requests):
        alone = GumbelMaxSampler(block=128, programs=32, filter_span=128).sample(step.select([r]))
        assert alone.tokens[0].tolist() == whole.tokens[r].tolist()


def test_rows_with_top_k_and_top_p_keep_the_search():
    step = _low_top_p_step(8, 300, 4)
    step.top_k[:] = 50
    step.top_p[:] = 0.5
    params = GumbelMaxSampler(filter_span=128).prepare(step).params
    assert not params.any_check and params.num_filter_rows == 4
    assert sample_check.EXTRA_ROUNDS >= 1


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [151936, 248320])
def test_gpu_checked_rows_exact_deterministic_and_graph_capturable(vocab):
    for seed, dtype in [(90, torch.float32), (91, torch.bfloat16)]:
        step = _plain(seed, vocab, 24, ties=True).to("cuda")
        step.logits = step.logits.to(dtype)
        step.top_p[::2] = torch.where(step.temperature[::2] > 0, 0.9, 1.0)  # production top-p next to the mix
        impl = GumbelMaxSampler()
        state = impl.prepare(step)
        assert state.check is not None
        compare(step, impl.sample(step), ReferenceSampler().sample(step.to("cpu")))
        assert_repeatable_and_graph_capturable(impl, state)


TINY_TOP_P_CASES = [(1e-9, 1.0), (2.0 ** -26, 1.0), (0.5, 1e-39)]


def _assert_keeps_the_largest_value(top_p: float, temperature: float, vocab: int, device: str, small: bool):
    def timeout(*_):
        raise TimeoutError("sample-and-check did not settle a row")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(300)
    try:
        plain = _plain(7, vocab, 6, filters=False)
        verify = synthetic_step(8, vocab, 4, 2, ks=[2] * 4, greedy_frac=0.0, filters=False)
        kw_plain = dict(block=64, programs=16, filter_span=128) if small else {}
        kw_verify = dict(stats_block=64, draw_block=64, stats_span=128, filter_span=128) if small else {}
        for step, impl in ((plain, GumbelMaxSampler(**kw_plain)), (verify, StochasticSampler(**kw_verify))):
            if temperature < 1.0:  # negative logits but one positive token a row: -inf and one +inf
                logits = torch.randn(step.logits.shape, generator=torch.Generator().manual_seed(1)) - 5.0
                logits[torch.arange(logits.shape[0]), torch.arange(logits.shape[0]) * 7 % vocab] = 1.0
                step.logits = logits
            step.top_p = torch.full_like(step.top_p, top_p)
            step.top_k = torch.zeros_like(step.top_k)
            step.min_p = torch.zeros_like(step.min_p)
            step.temperature = torch.full_like(step.temperature, temperature)
            compare(step, impl.sample(step.to(device)), ReferenceSampler().sample(step), max_near_ties=0)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("top_p,temperature", TINY_TOP_P_CASES)
def test_top_p_keeps_the_largest_value_when_fp32_cannot_tell(top_p, temperature):
    """A top-p so small that ``1 - p`` rounds to 1 in fp32 keeps only each row's largest value (the oracle
    always keeps it): no drawn token passes ``low / S > 1 - p``, so the check keeps the top of the order
    (``low == S``), or the finish loop draws forever (a hang on the GPU; found in review). A temperature of
    1e-39 sends one token per row to +inf and the rest to -inf: the check's mass is NaN, which the oracle's
    drop rule (``cum <= 1 - p``) never drops, so the check must not reject it either (it emitted token 0).
    Plain and verify steps; a regression that hangs fails on the alarm instead."""
    _assert_keeps_the_largest_value(top_p, temperature, 300, "cpu", small=True)


@pytest.mark.gpu
@pytest.mark.parametrize("top_p,temperature", TINY_TOP_P_CASES)
def test_gpu_top_p_keeps_the_largest_value_when_fp32_cannot_tell(top_p, temperature):
    """The same on the GPU at a real vocabulary and the production launch shapes (the hang was GPU-only)."""
    _assert_keeps_the_largest_value(top_p, temperature, 151936, "cuda", small=False)

TIE_RAW = (24.000001907348633, 24.000003814697266)  # distinct fp32 values whose quotients by 3 are equal


def _top_held_step(seed: int, vocab: int):
    """12 rows at top-p 0.3, flat at 0 but for a peak of about 75% of the mass: held by one token (rows 0-3,
    10-11) or tied between two (4-7 at temperature 1, 8-9 at temperature 3 with distinct raw values; row 4's
    pair in one program's span, two loads apart with 2 x 64-lane loads). Of a tied pair only the higher id is
    kept (ascending (value, id) order), so a drawn lower id must be checked and rejected."""
    step = _plain(seed, vocab, 12, filters=False)
    logits = torch.zeros(12, vocab)
    lanes = {0: (3,), 1: (vocab // 2,), 2: (vocab - 1,), 3: (700,), 4: (5, 300), 5: (300, 301), 6: (5, vocab - 40),
             7: (2, 650), 8: (6, 9), 9: (20, vocab - 3), 10: (11,), 11: (vocab - 7,)}
    for r, held in lanes.items():
        for i, lane in enumerate(held):
            logits[r, lane] = 8.0 if r < 8 else (TIE_RAW[i] if r < 10 else 24.0)
    step.logits = logits
    step.temperature = torch.tensor([1.0] * 8 + [3.0] * 4)
    step.top_p = torch.full((12,), 0.3)
    step.top_k = torch.zeros(12, dtype=torch.int32)
    step.min_p = torch.zeros(12)
    return step, lanes


def test_first_check_keeps_a_drawn_token_held_once_at_the_top_unread_and_checks_ties():
    """The first draw flags rows whose largest processed value one lane holds (``draw.top[1]``, whatever token it
    drew: the open-row launch keeps a redraw at that value by it too); the first
    check keeps a drawn token that is that lane without reading the row (its partials stay unwritten) and
    checks every other row, ties at the top included (rows 8-9: distinct raw values, equal after the
    temperature). Mutation-checked: counting the lanes of one span when the top lies in two, counting only the
    last load of a program that holds the top in two, or keeping a drawn token at the top whatever the flag,
    fails it."""
    vocab, drew_tied_lower = 1000, 0
    for seed in range(3):
        step, lanes = _top_held_step(seed, vocab)
        impl = GumbelMaxSampler(block=64, programs=16, filter_span=256)
        state = impl.prepare(step.to(DEVICE))
        state.check.pall.fill_(float("nan"))
        tokens, counts = (t.cpu() for t in impl.launch(state)[:2])
        top_held, pall = state.draw.top[1].cpu(), state.check.pall.cpu()
        for r in range(12):
            x = step.logits[r] / step.temperature[r]
            first = int(torch.argmax(x + gumbel_row(int(step.seed[r]), int(step.positions[r]), vocab)))
            assert float(top_held[r]) == float(len(lanes[r]) == 1), (seed, r, first)
            unread = bool(torch.isnan(pall[r]).all())
            assert unread == (len(lanes[r]) == 1 and first == lanes[r][0]), (seed, r, first)
            drew_tied_lower += len(lanes[r]) == 2 and first == lanes[r][0]
        want = ReferenceSampler().sample(step)
        assert tokens.tolist() == want.tokens.tolist()
        assert counts.tolist() == want.counts.tolist()
    assert drew_tied_lower >= 2  # the case the flag must not skip happened


def test_launched_rounds_bound_the_chance_a_row_is_left_to_the_finish_loop():
    """``launched_rounds``: the fewest rounds n (at most EXTRA_ROUNDS) with sum over the checked requests of
    (1 - p)^(n + 1) <= FINISH_ODDS. The claim under it, measured with the oracle's noise: a row needs more than
    n + 1 draws (its first kept token's rank in the Gumbel order of the unfiltered row) with probability at most
    (1 - p)^(n + 1). 4,000 SYNTHETIC rows of V = 64 (randn x 1.5) at top-p 0.5 and 0.8: each frequency stays
    under the bound plus 4 standard errors (at p = 0.5 one draw misses 0.49 of the time: close to the bound)."""
    from replay_harness.oracle.rng import gumbel_rows
    from replay_harness.oracle.sampling_params import top_k_top_p_sorted

    rows, vocab = 4000, 64
    g = torch.Generator().manual_seed(77)
    x = torch.randn(rows, vocab, generator=g) * 1.5
    noised = x + gumbel_rows(torch.arange(rows) + 5000, torch.full((rows,), 3), vocab)
    for p in (0.5, 0.8):
        kept = top_k_top_p_sorted(x, torch.full((rows,), vocab), torch.full((rows,), p)) > float("-inf")
        in_order = kept.gather(1, noised.argsort(dim=1, descending=True, stable=True))
        draws = in_order.to(torch.int8).argmax(dim=1) + 1  # the draws until a kept token
        for n in range(4):
            bound = (1 - p) ** (n + 1)
            seen = float((draws > n + 1).float().mean())
            assert seen <= bound + 4 * (bound * (1 - bound) / rows) ** 0.5, (p, n, seen, bound)
        assert float((draws > 1).float().mean()) > 0.5 * (1 - p)  # the rows do miss: the test has power
    p9 = 1 - float(torch.tensor(0.9))  # 1 - p of a float32 top-p 0.9
    assert [sample_check.launched_rounds([p9] * r) for r in (1, 2, 8, 64)] == [1, 2, 2, 3]
    assert sample_check.launched_rounds([0.5]) == sample_check.launched_rounds([1.0]) == sample_check.EXTRA_ROUNDS


def test_plain_steps_launch_the_rounds_their_top_p_needs_and_verify_steps_all():
    plain = _plain(40, 500, 1, filters=False)
    plain.temperature[:] = 1.0
    plain.top_p[:] = 0.9
    state = GumbelMaxSampler(block=64, programs=16, filter_span=128).prepare(plain)
    assert state.check.rounds == 1
    assert state.params.check_miss == (1 - float(torch.tensor(0.9)),)
    plain.top_p[:], plain.top_k[:] = 1.0, 20  # top-k: no bound on a miss
    assert GumbelMaxSampler(filter_span=128).prepare(plain).check.rounds == sample_check.EXTRA_ROUNDS
    verify = synthetic_step(41, 300, 1, 2, ks=[2], greedy_frac=0.0, filters=False)
    verify.top_p[:] = 0.9  # a residual draw can miss more often than 1 - p
    impl = StochasticSampler(stats_block=64, draw_block=64, stats_span=128, filter_span=128)
    assert impl.prepare(verify).check.rounds == sample_check.EXTRA_ROUNDS


@triton.jit
def _argmax_top_kernel(max_ptr, arg_ptr, top_ptr, out_ptr, NB, CHUNK: tl.constexpr):
    token, top, n_spans, first = block_argmax_top(max_ptr, arg_ptr, top_ptr, 0, NB, CHUNK)
    tl.store(out_ptr, token.to(tl.float32))
    tl.store(out_ptr + 1, top)
    tl.store(out_ptr + 2, n_spans.to(tl.float32))
    tl.store(out_ptr + 3, first.to(tl.float32))


@pytest.mark.parametrize("nb,top_spans", [(300, [40, 140, 299]), (300, [299]), (128, [0, 127]), (7, [3])])
def test_the_draw_tail_counts_the_spans_at_the_top_across_chunks(nb, top_spans):
    """The first draw's last program reduces the (score, token) partials and the per-span maxima in one pass of
    CHUNK = 32 here (``partials.block_argmax_top``): the token is the largest score's smallest token, the top the
    largest maximum, with how many spans hold it and the first that does, whichever chunks they lie in (a chunk
    that raises the top restarts the count; one that meets it adds to it). Mutation-checked: restarting the
    count on a chunk that only meets the top, or keeping the first span of the last chunk, fails it."""
    g = torch.Generator().manual_seed(nb)
    scores = torch.randn(nb, generator=g)
    scores[[5, nb - 1]] = 9.0  # tied best scores: the smaller token wins
    args = torch.randperm(10 * nb, generator=g)[:nb].to(torch.int32)
    maxima = torch.randn(nb, generator=g)
    maxima[top_spans] = 7.5
    out = torch.zeros(4)
    dev = [t.to(DEVICE) for t in (scores, args, maxima, out)]
    _argmax_top_kernel[(1,)](*dev, nb, CHUNK=32)
    token, top, n_spans, first = dev[3].cpu().tolist()
    assert int(token) == min(int(args[5]), int(args[nb - 1]))
    assert (top, int(n_spans), int(first)) == (7.5, len(top_spans), top_spans[0])
