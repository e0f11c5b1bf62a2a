"""Triton kernels (stochastic, gumbel-max, serial-scan, params) against the torch oracle.

On a machine without CUDA the kernels run under TRITON_INTERPRET=1 (numpy,
IEEE float32), on small vocabularies. Every step here is SYNTHETIC: random
logits from a seeded torch.Generator, never model output.

Exactness contract: tokens, counts and routes equal the ``reference`` impl.
The only tolerated differences are floating-point near-ties
(``replay_harness.oracle.near_tie.is_near_tie``); each comparison asserts at most
``MAX_NEAR_TIES`` of them per test (0 expected under the interpreter).
"""
import dataclasses
import math
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton / replay_kernels are imported

import pytest  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from replay_harness.impls.reference import ReferenceSampler  # noqa: E402
from replay_harness.oracle import rng as oracle_rng  # noqa: E402
from replay_harness.oracle.near_tie import is_near_tie  # noqa: E402
from replay_harness.oracle.sampling_params import apply_sampling_params as oracle_params  # noqa: E402
from replay_harness.recording.step import ROUTE_CODE, Step  # noqa: E402
from replay_kernels.shared import rng  # noqa: E402
from replay_kernels.verify import verify_bounds  # noqa: E402
from replay_kernels.filters.params import apply_sampling_params as triton_params  # noqa: E402
from replay_kernels.draw.draw import MODE_RESIDUAL  # noqa: E402
from replay_kernels.draw.gumbel_max import GumbelMaxSampler  # noqa: E402
from replay_kernels.draw.serial_scan import SerialScanSampler  # noqa: E402
from replay_kernels.verify.stochastic import StochasticSampler  # noqa: E402

# Near-ties tolerated per comparison test (documented bound; 0 seen on CPU).
MAX_NEAR_TIES = 2
NEG_INF = float("-inf")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # for the few tests that also run on a GPU


# ---------------------------------------------------------------------------
# SYNTHETIC step builders
# ---------------------------------------------------------------------------


def synthetic_step(seed: int, vocab: int, num_requests: int, max_k: int, *, dtype=torch.float32,
                   draft_logits: bool = False, greedy_frac: float = 0.3, filters: bool = True,
                   ties: bool = False, neg_inf: bool = False, placeholders: bool = False,
                   ks: list[int] | None = None, device="cpu") -> Step:
    """A SYNTHETIC step: random logits, ragged k (incl. 0), mixed greedy / stochastic requests.

    Drafts are the target argmax (likely accepted) or random ids (likely rejected);
    draft logits, when present, are the target logits plus noise (so q ~ p).
    """
    g = torch.Generator().manual_seed(seed)
    r = num_requests
    k = torch.tensor(ks) if ks is not None else torch.randint(0, max_k + 1, (r,), generator=g)
    n = int((k + 1).sum())
    cu = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(k + 1, 0)]).to(torch.int32)
    logits = torch.randn(n, vocab, generator=g) * 3.0
    if ties:  # duplicate row maxima: first index must win (greedy), stable order (top-p)
        for j in range(n):
            a, b = torch.randint(0, vocab, (2,), generator=g).tolist()
            top = float(logits[j].max()) + 1.0
            logits[j, a] = top
            logits[j, b] = top
            c = torch.randint(0, vocab, (3,), generator=g)
            logits[j, c] = float(logits[j, c[0]])
    if neg_inf:
        mask = torch.rand(n, vocab, generator=g) < 0.2
        mask[:, 0] = False
        logits[mask] = NEG_INF
    logits = logits.to(dtype)
    temps = torch.where(torch.rand(r, generator=g) < greedy_frac, torch.zeros(r),
                        torch.tensor([0.6, 1.0, 1.3])[torch.randint(0, 3, (r,), generator=g)])
    top_k = torch.zeros(r, dtype=torch.int32)
    top_p = torch.ones(r, dtype=torch.float32)
    min_p = torch.zeros(r, dtype=torch.float32)
    if filters:
        for i in range(r):
            kind = int(torch.randint(0, 7, (1,), generator=g))
            if kind == 1:
                top_k[i] = 1
            elif kind == 2:
                top_k[i] = int(torch.randint(2, max(3, vocab // 4), (1,), generator=g))
            elif kind == 3:
                top_p[i] = 1e-6  # tiny top-p: the max alone
            elif kind == 4:
                top_p[i] = float(torch.empty(1).uniform_(0.3, 0.95, generator=g))
            elif kind == 5:
                min_p[i] = float(torch.empty(1).uniform_(0.01, 0.3, generator=g))
            elif kind == 6:
                top_k[i] = int(torch.randint(2, max(3, vocab // 2), (1,), generator=g))
                top_p[i] = float(torch.empty(1).uniform_(0.5, 0.95, generator=g))
                min_p[i] = 0.02
        top_k[temps == 0] = 0
        top_p[temps == 0] = 1.0
        min_p[temps == 0] = 0.0
    drafts = torch.full((n,), -1, dtype=torch.int32)
    argmax = logits.float().argmax(1)
    for i in range(r):
        a = int(cu[i])
        for j in range(int(k[i])):
            roll = float(torch.rand(1, generator=g))
            if placeholders and roll < 0.1:
                d = -1
            elif roll < 0.7:
                d = int(argmax[a + j])
            else:
                d = int(torch.randint(0, vocab, (1,), generator=g))
            drafts[a + j] = d
    positions = torch.cat([torch.arange(int(k[i]) + 1) + int(torch.randint(0, 4000, (1,), generator=g))
                           for i in range(r)]).to(torch.int64) if r else torch.zeros(0, dtype=torch.int64)
    seeds = torch.randint(-2**62, 2**62, (r,), generator=g, dtype=torch.int64)
    dl = None
    if draft_logits:
        is_bonus = torch.zeros(n, dtype=torch.bool)
        is_bonus[cu[1:].long() - 1] = True
        base = logits.float()[~is_bonus]
        dl = (base + torch.randn(base.shape, generator=g) * 0.7).to(dtype)
        dl[~torch.isfinite(base)] = 0.0
    step = Step(logits=logits, cu_num_logits=cu, draft_token_ids=drafts, positions=positions,
                temperature=temps.float(), top_k=top_k, top_p=top_p, min_p=min_p, seed=seeds,
                request_ids=torch.arange(100, 100 + r, dtype=torch.int64), draft_logits=dl)
    return step.to(device) if device != "cpu" else step


def compare(step: Step, result, expected, *, max_near_ties: int = MAX_NEAR_TIES) -> int:
    """Assert ``result`` equals ``expected`` up to documented near-ties; returns the near-tie count."""
    assert torch.equal(result.routes.cpu(), expected.routes), (result.routes, expected.routes)
    assert result.tokens.shape == expected.tokens.shape
    near = 0
    rt, rc = result.tokens.cpu(), result.counts.cpu()
    for r in range(step.num_requests):
        if torch.equal(rt[r], expected.tokens[r]) and int(rc[r]) == int(expected.counts[r]):
            continue
        diff = (rt[r] != expected.tokens[r]).nonzero()
        pos = int(diff[0]) if diff.numel() else min(int(rc[r]), int(expected.counts[r])) - 1
        tie, margin = is_near_tie(step.to("cpu"), r, pos)
        assert tie, (f"request {r} position {pos}: got {rt[r].tolist()} (count {int(rc[r])}), "
                     f"expected {expected.tokens[r].tolist()} (count {int(expected.counts[r])}), margin {margin}")
        near += 1
    assert near <= max_near_ties, f"{near} near-ties"
    return near


# ---------------------------------------------------------------------------
# apply_sampling_params
# ---------------------------------------------------------------------------


# split: one span per row at these vocabularies (8192), or rows split over 4-5 spans (a power of two >= V/4)
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("vocab,seed,ties,neg_inf", [(97, 0, False, False), (1000, 1, True, False),
                                                      (1000, 2, False, True), (4099, 3, True, True)])
def test_params_match_oracle(vocab, seed, ties, neg_inf, split):
    step = synthetic_step(seed, vocab, 10, 2, ties=ties, neg_inf=neg_inf, greedy_frac=0.1)
    got = triton_params(step, filter_span=1 << (vocab // 4 - 1).bit_length() if split else 8192)
    want = oracle_params(step)
    assert torch.equal(got, want), (got != want).nonzero()[:10]


def test_params_top_p_tie_group_is_cut_in_index_order():
    # One row, a tie group straddling the top-p boundary: the stable ascending
    # sort drops the group's lowest ids first.
    v = 64
    logits = torch.full((1, v), -8.0)
    logits[0, [5, 17, 30, 41]] = 1.0
    logits[0, 60] = 1.5
    for p in (0.3, 0.45, 0.6, 0.8, 0.999):
        step = Step(logits=logits.clone(), cu_num_logits=torch.tensor([0, 1], dtype=torch.int32),
                    draft_token_ids=torch.tensor([-1], dtype=torch.int32), positions=torch.tensor([3]),
                    temperature=torch.tensor([1.0]), top_k=torch.tensor([0], dtype=torch.int32),
                    top_p=torch.tensor([p]), min_p=torch.tensor([0.0]), seed=torch.tensor([7]),
                    request_ids=torch.tensor([1]))
        for span in (8192, 16):  # the tie group in one span, and spread over four of them
            assert torch.equal(triton_params(step, filter_span=span), oracle_params(step)), (p, span)


def test_params_bf16_and_topk1():
    step = synthetic_step(4, 1000, 8, 1, dtype=torch.bfloat16, ties=True, greedy_frac=0.0)
    step.top_k[:] = 1
    assert torch.equal(triton_params(step), oracle_params(step))
    assert torch.equal(triton_params(step, filter_span=64), oracle_params(step))


# ---------------------------------------------------------------------------
# stochastic
# ---------------------------------------------------------------------------

STOCHASTIC_CASES = [
    # vocab, seed, kwargs, (stats_block, draw_block)
    (97, 10, dict(), (4096, 2048)),
    (97, 11, dict(draft_logits=True, placeholders=True), (32, 32)),
    (1000, 12, dict(ties=True), (256, 128)),
    (1000, 13, dict(draft_logits=True, neg_inf=True), (256, 256)),
    (1000, 14, dict(dtype=torch.bfloat16, draft_logits=True), (4096, 2048)),
    (4099, 15, dict(placeholders=True, ties=True), (4096, 2048)),
    (4099, 16, dict(draft_logits=True, dtype=torch.float16), (1024, 512)),
    (8209, 17, dict(draft_logits=True), (4096, 2048)),
]


@pytest.mark.parametrize("vocab,seed,kwargs,blocks", STOCHASTIC_CASES)
def test_stochastic_matches_reference(vocab, seed, kwargs, blocks):
    step = synthetic_step(seed, vocab, 8 if vocab < 5000 else 4, 4, **kwargs)
    got = StochasticSampler(stats_block=blocks[0], draw_block=blocks[1]).sample(step)
    want = ReferenceSampler().sample(step)
    compare(step, got, want)


def test_stochastic_covers_every_route_and_outcome():
    """Across a batch of seeds: accepts, rejections, bonus draws and all four routes occur."""
    seen_routes, accepted, rejected, bonus = set(), 0, 0, 0
    for seed in range(20, 26):
        step = synthetic_step(seed, 211, 8, 3, draft_logits=seed % 2 == 0, filters=seed % 3 == 0)
        got = StochasticSampler(stats_block=64, draw_block=64, stats_span=256).sample(step)
        compare(step, got, ReferenceSampler().sample(step))
        seen_routes |= set(got.route_names())
        k = step.num_drafts
        bonus += int((got.counts.long() == k + 1).sum())
        accepted += int((got.counts.long() - 1).clamp(min=0).sum())
        rejected += int(((got.counts.long() < k + 1) & (k > 0)).sum())
    assert seen_routes == {"greedy-sample", "random-sample", "greedy-verify", "stochastic-verify"}
    assert accepted > 0 and rejected > 0 and bonus > 0


def test_stochastic_all_k0_and_all_greedy():
    plain = synthetic_step(30, 500, 6, 0, ks=[0] * 6)
    compare(plain, StochasticSampler().sample(plain), ReferenceSampler().sample(plain))
    greedy = synthetic_step(31, 500, 6, 4, greedy_frac=1.0, ties=True)
    compare(greedy, StochasticSampler(stats_block=128).sample(greedy), ReferenceSampler().sample(greedy))


@pytest.mark.parametrize("filters", [False, True])
def test_stochastic_on_a_draft_free_batch_runs_the_plain_sampler_s_launches(filters):
    """A batch where no request has drafts is a plain sample: stochastic prepares the plain sampler's state (no
    position launch) and emits its tokens, which are the reference's; one drafted request keeps the verify path."""
    from replay_kernels.draw.plain import PlainState

    plain = synthetic_step(32, 700, 5, 0, ks=[0] * 5, filters=filters)
    state = StochasticSampler().prepare(plain)
    assert isinstance(state, PlainState)
    got = StochasticSampler().sample(plain)
    compare(plain, got, ReferenceSampler().sample(plain))
    assert torch.equal(got.tokens, GumbelMaxSampler().sample(plain).tokens)
    stray = dataclasses.replace(plain, draft_logits=torch.zeros(3, 700))  # draft logits without drafts: refused
    with pytest.raises(ValueError, match="draft_logits has 3 rows"):
        StochasticSampler().prepare(stray)
    drafted = synthetic_step(33, 700, 5, 2, ks=[0, 0, 1, 0, 0], filters=filters)
    assert not isinstance(StochasticSampler().prepare(drafted), PlainState)
    compare(drafted, StochasticSampler().sample(drafted), ReferenceSampler().sample(drafted))


@pytest.mark.parametrize("seed", [150, 151])  # with and without draft logits
def test_stochastic_fused_and_per_position_launches_agree(seed):
    """Few requests verify every position in one launch (``fused_below``), more in one launch per position:
    both read the same span stats and run the same tests, so the tokens (and with them a request's tokens
    whatever batch it is in) are the same. Mixed greedy / stochastic, placeholders, draft logits, and
    top-p steps whose bounds leave some tests pending (in the run whose first step has no draft logits)."""
    steps = [synthetic_step(seed, 300, 9, 4, draft_logits=seed % 2 == 0, placeholders=True, filters=True),
             synthetic_step(seed + 10, 257, 7, 3, ties=True, ks=[3, 0, 1, 3, 2, 3, 3])]
    if seed % 2:
        top_p = top_p_verify_step(seed, 200, 10, 0.0)
        top_p.top_p = torch.empty(10).uniform_(0.3, 0.6, generator=torch.Generator().manual_seed(seed))
        steps.append(top_p)
    kw = dict(stats_block=64, draw_block=64, stats_span=128, filter_span=128)
    for step in steps:
        fused, per_position = StochasticSampler(fused_below=1 << 30, **kw), StochasticSampler(fused_below=0, **kw)
        a, b = fused.prepare(step), per_position.prepare(step)
        assert a.fused and not b.fused
        fused.launch(a)
        per_position.launch(b)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.counts, b.counts)
        compare(step, fused.result(a, a.tokens, a.counts), ReferenceSampler().sample(step))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("fused_below", [0, 1 << 30])
def test_stochastic_spans_per_program_keep_each_span_s_stats(fused_below, device):
    """A position program that takes several spans (``program_spans``; stochastic.POSITION_SPANS) stores each span's
    stats from its own tiles: the same bits as one program a span, so the same tokens. 4 spans a program over 9
    spans of V = 1,100 (the last program takes the short ninth span alone); greedy and stochastic requests, draft
    logits, placeholders, a span of -inf in the middle of a program (its argmax is its own first lane), and a top-p
    step whose exact round reads its pending rows with several spans a program. A span is whole tiles."""
    ties = synthetic_step(172, 1100, 6, 3, ties=True, filters=False)  # no top-p: no bounded launch (one span)
    ties.logits[:, 640:768] = float("-inf")  # span 5, the second of program 1
    top_p = top_p_verify_step(170, 1100, 6, 0.0)
    top_p.top_p = torch.empty(6).uniform_(0.3, 0.6, generator=torch.Generator().manual_seed(170))
    kw = dict(stats_block=64, draw_block=64, stats_span=128, filter_span=128, fused_below=fused_below)
    for step in (synthetic_step(171, 1100, 7, 4, draft_logits=True, placeholders=True, ks=[4, 0, 2, 4, 3, 4, 1]),
                 ties, top_p):
        states = []
        for spans in (1, 4):
            impl = StochasticSampler(program_spans=spans, **kw)
            state = impl.prepare(step.to(device))
            assert state.num_stats_blocks == 9 and state.program_spans == spans
            for buf in (state.smax, state.ssum, state.sarg, state.dmax, state.dsum):
                buf.fill_(-7)  # a stat never written stays -7 in both
            impl.launch(state)
            states.append(state)
        one, four = states
        for name in ("smax", "ssum", "sarg", "dmax", "dsum", "tokens", "counts"):
            assert torch.equal(getattr(one, name), getattr(four, name)), name
        if step is top_p:
            assert pending_requests(four) > 0  # the exact round ran
        compare(step, impl.result(four, four.tokens, four.counts), ReferenceSampler().sample(step))
    with pytest.raises(ValueError, match="not a multiple"):
        StochasticSampler(stats_block=64, stats_span=96)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_stochastic_span_sums_far_from_the_draft_value(device):
    """Verify rows whose span maxima lie far from the draft's value, both ways: drafts 100 above every other logit
    of their row (accepted) and drafts 90 below a token of their row, with draft logits (rejected; the residual draw
    reads both rows' log-sum-exp), against the reference, on the CPU and the GPU (where tiny terms flush to 0). A span
    sum taken against x_d would flush to 0 in the first kind and overflow fp32 in the second: the variant that
    did so (measured on 2026-12-04, not adopted; its patch is in git history at ab3e112) fails both
    kinds of request without its second pass against the span's max (mutation-checked on the CPU)."""
    step = synthetic_step(160, 300, 8, 3, draft_logits=True, greedy_frac=0.0, filters=False, ks=[3] * 8)
    logits, drafts = step.logits.clone(), step.draft_token_ids.clone()
    cu = step.cu_num_logits.tolist()
    for r in range(step.num_requests):
        for row in range(cu[r], cu[r + 1] - 1):
            d = int(drafts[row])
            if r % 2 == 0:
                logits[row, d] = float(logits[row].max()) + 100.0
            else:
                logits[row, (d + 150) % logits.shape[1]] = float(logits[row, d]) + 90.0
    step.logits = logits
    got = StochasticSampler(stats_block=64, draw_block=64, stats_span=128).sample(step.to(device))
    want = ReferenceSampler().sample(step)
    assert int((want.counts[0::2] == 4).sum()) == 4 and int((want.counts[1::2] == 1).sum()) == 4, want.counts
    compare(step, got, want, max_near_ties=0)


def test_stochastic_prepare_launch_is_repeatable():
    step = synthetic_step(40, 300, 5, 3, draft_logits=True)
    impl = StochasticSampler(stats_block=64, draw_block=64)
    state = impl.prepare(step)
    t1, c1 = (x.clone() for x in impl.launch(state))
    t2, c2 = impl.launch(state)
    assert torch.equal(t1, t2) and torch.equal(c1, c2)
    assert t1.dtype == torch.int64 and c1.dtype == torch.int32


def test_stochastic_empty_step():
    step = synthetic_step(41, 50, 0, 2, ks=[])
    res = StochasticSampler().sample(step)
    assert res.tokens.shape == (0, 1) and res.counts.numel() == 0


# ---------------------------------------------------------------------------
# plain samplers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("vocab,seed,kwargs", [(97, 50, dict()), (1000, 51, dict(ties=True, neg_inf=True)),
                                               (4099, 52, dict(dtype=torch.bfloat16)), (8209, 53, dict())])
def test_gumbel_max_matches_reference(vocab, seed, kwargs):
    step = synthetic_step(seed, vocab, 6, 0, ks=[0] * 6, **kwargs)
    block = 256 if vocab <= 1000 else 2048
    compare(step, GumbelMaxSampler(block=block).sample(step), ReferenceSampler().sample(step))


@pytest.mark.parametrize("vocab,seed,kwargs", [(97, 60, dict(ties=True)), (300, 61, dict(dtype=torch.bfloat16))])
def test_serial_scan_matches_reference(vocab, seed, kwargs):
    step = synthetic_step(seed, vocab, 4, 0, ks=[0] * 4, **kwargs)
    compare(step, SerialScanSampler().sample(step), ReferenceSampler().sample(step))


@pytest.mark.parametrize("impl", [GumbelMaxSampler(block=64), SerialScanSampler()], ids=lambda i: i.name)
def test_plain_samplers_refuse_requests_with_drafts(impl):
    step = synthetic_step(70, 97, 4, 2, ks=[0, 2, 0, 1])
    got = impl.sample(step)
    want = ReferenceSampler().sample(step)
    refused = ROUTE_CODE["refused"]
    assert got.routes.tolist() == [int(want.routes[0]), refused, int(want.routes[2]), refused]
    assert got.counts.tolist()[1] == 0 and got.counts.tolist()[3] == 0
    assert (got.tokens[[1, 3]] == -1).all()
    for r in (0, 2):
        assert got.tokens[r].tolist() == want.tokens[r].tolist() and int(got.counts[r]) == 1
    assert got.notes and "stochastic" in got.notes[0]


# ---------------------------------------------------------------------------
# the draw kernel: split rows, pruning, last-program reduce
# ---------------------------------------------------------------------------


def peaked(step: Step, spike: float, seed: int) -> Step:
    """The step with one large logit per row at a random id (SYNTHETIC, shaped like real LLM rows):
    most tiles then cannot win, so the draw kernel prunes them after the load."""
    g = torch.Generator().manual_seed(seed)
    logits = step.logits.float().clone()
    for j in range(logits.shape[0]):
        logits[j, int(torch.randint(0, logits.shape[1], (1,), generator=g))] += spike
    step.logits = logits.to(step.logits.dtype)
    return step


# (programs, block): one program per row scanning every tile in order (pruning across tiles),
# a few programs per row, and one tile per program (the last-program reduce over 6-12 partials).
DRAW_LAYOUTS = [(1, 64), (16, 64), (4096, 128)]


@pytest.mark.parametrize("programs,block", DRAW_LAYOUTS)
@pytest.mark.parametrize("spike", [0.0, 40.0])
def test_gumbel_max_split_and_pruned_rows_match_reference(programs, block, spike):
    step = peaked(synthetic_step(80, 1500, 32, 0, ks=[0] * 32, ties=True, greedy_frac=0.1, filters=spike > 0),
                  spike, seed=81)
    impl = GumbelMaxSampler(block=block, programs=programs, filter_span=256)
    compare(step, impl.sample(step), ReferenceSampler().sample(step))


@pytest.mark.parametrize("programs,block", DRAW_LAYOUTS)
def test_stochastic_split_and_pruned_draws_match_reference(programs, block):
    step = peaked(synthetic_step(82, 777, 6, 3, draft_logits=True, placeholders=True), 12.0, seed=83)
    got = StochasticSampler(stats_block=128, draw_block=block, programs=programs, filter_span=128,
                            stats_span=512).sample(step)
    compare(step, got, ReferenceSampler().sample(step))


@triton.jit
def _noise_kernel(seed, pos, tok_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, rng.gumbel_noise(seed, pos, tl.load(tok_ptr + offs)))


def _kernel_noise(seed: int, pos: int, ids: torch.Tensor) -> torch.Tensor:
    """The kernels' own fp32 noise of tokens ``ids`` (int32 on DEVICE, a power-of-two count), on the CPU."""
    noise = torch.empty(ids.numel(), dtype=torch.float32, device=DEVICE)
    _noise_kernel[(1,)](seed, pos, ids, noise, N=ids.numel())
    return noise.cpu()


def _one_request(logits: torch.Tensor, seed: int, pos: int) -> Step:
    """A plain step of one temperature-1 request without filters (CPU)."""
    return Step(logits=logits, cu_num_logits=torch.tensor([0, 1], dtype=torch.int32),
                draft_token_ids=torch.tensor([-1], dtype=torch.int32), positions=torch.tensor([pos]),
                temperature=torch.ones(1), top_k=torch.zeros(1, dtype=torch.int32), top_p=torch.ones(1),
                min_p=torch.zeros(1), seed=torch.tensor([seed]), request_ids=torch.tensor([1]))


def _tie_step(seed: int, pos: int, tok: int, x_tok: float, candidates: torch.Tensor) -> tuple[Step, int]:
    """One request (V = 8,192, the rest at -30): token 5 at 18.8 - its noise, ``tok`` at ``x_tok``, and the first
    of ``candidates`` (a power-of-two count) whose logit makes its fp32 score equal tok's in the kernels' own
    noise (and whose noise is below 4). Returns the step and that token."""
    best = torch.tensor(x_tok, dtype=torch.float32) + _kernel_noise(seed, pos, torch.tensor([tok], dtype=torch.int32,
                                                                                        device=DEVICE))[0]
    noise = _kernel_noise(seed, pos, candidates.to(torch.int32).to(DEVICE))
    x = best - noise  # fp32 subtraction
    i = int((((x + noise) == best) & (noise < 4.0)).nonzero()[0])
    logits = torch.full((1, 8192), -30.0)
    logits[0, 5] = 18.8 - float(oracle_rng.gumbel_noise(seed, pos, 5))
    logits[0, tok] = x_tok
    logits[0, int(candidates[i])] = float(x[i])
    return _one_request(logits, seed, pos), int(candidates[i])


# A token whose hash is tiny (6): its noise, 20.31, is above the bound the draw's tiles use for every other
# token, so the tile skips it and the program's list of small-hash tokens must score it (found by search with
# ``murmur3_preimage``: seed 68974, position 77, token 1708 < V).
LISTED = dict(seed=68974, pos=77, token=1708, vocab=8192)


@pytest.mark.parametrize("impl", [GumbelMaxSampler(block=64, programs=1),
                                  StochasticSampler(stats_block=64, draw_block=64, programs=1)],
                         ids=["plain", "stochastic"])
def test_draw_scores_the_listed_token_its_tile_skips(impl):
    """Every other token sits at -30 but one (id 5, scored first) at 18.8 - noise: tile 1708's max (0) plus
    the tiles' noise bound (16.6: one program a row lists 256 hashes) is below 18.8, so the tile is skipped
    after the load; token 1708 still wins with 0 + 20.31, listed by its hash. Without the list the draw emits 5."""
    seed, pos, tok, vocab = LISTED["seed"], LISTED["pos"], LISTED["token"], LISTED["vocab"]
    assert int(oracle_rng.murmur3_hash32(seed, pos, tok)) == 6
    logits = torch.full((1, vocab), -30.0)
    logits[0, tok] = 0.0
    logits[0, 5] = 18.8 - float(oracle_rng.gumbel_noise(seed, pos, 5))
    step = _one_request(logits, seed, pos)
    expected = ReferenceSampler().sample(step)
    assert expected.tokens[0, 0].item() == tok
    assert impl.sample(step.to(DEVICE)).tokens[0, 0].item() == tok


def test_draw_ties_between_a_listed_token_and_a_tile_token_go_to_the_smaller_id():
    """Token 1708 (listed, 0 + 20.31) ties in the kernels' own fp32 arithmetic with a token k > 1708 whose
    logit is chosen for it; token 5 at 18.8 makes the draw skip tile 1708 (0 + 16.6 < 18.8) but score k's
    tile. The listed tokens are merged after the tiles: on the equal score the smaller id, 1708, must win
    (a strictly-greater merge keeps k)."""
    tok = LISTED["token"]
    step, _ = _tie_step(LISTED["seed"], LISTED["pos"], tok, 0.0, torch.arange(tok + 64, tok + 64 + 512))
    assert GumbelMaxSampler(block=64, programs=1).sample(step.to(DEVICE)).tokens[0, 0].item() == tok


def test_draw_ties_across_programs_go_to_the_smaller_id():
    """Token 331 (hash 528: listed by program 2 of 16) ties in fp32 with a token k > 331 that program 0 finds
    in its tiles, while its own tile is skipped (3.5 + 13.9 < 18.8). The last program's reduce must take the
    smallest id among equal partials, not the first partial (which holds k)."""
    seed, pos, tok = 12992, 77, 331
    assert int(oracle_rng.murmur3_hash32(seed, pos, tok)) == 528
    step, _ = _tie_step(seed, pos, tok, 3.5, torch.arange(384, 512))  # k after 331's tile [320, 384)
    assert ReferenceSampler().sample(step).tokens[0, 0].item() == tok
    assert GumbelMaxSampler(block=64, programs=16).sample(step.to(DEVICE)).tokens[0, 0].item() == tok


def test_draw_ties_inside_one_read_go_to_the_smaller_id():
    """Token 191 (last of tile [128, 192)) ties in fp32 with a token k of the next tile, which the program reads
    in the same load and scores first (its bound is larger: x_k > x_191). On the equal score the tile merge
    must keep the smaller id, 191 (a strictly-greater merge keeps k)."""
    seed, pos, tok = 4242, 9, 191
    ids = torch.arange(192, 256)
    noise = _kernel_noise(seed, pos, torch.cat([ids, torch.tensor([tok] * 64)]).to(torch.int32).to(DEVICE))
    candidates = ids[noise[:64] < noise[64] - 0.2][:32]
    step, k = _tie_step(seed, pos, tok, 16.0, candidates)
    assert step.logits[0, k] > step.logits[0, tok]
    assert ReferenceSampler().sample(step).tokens[0, 0].item() == tok
    assert GumbelMaxSampler(block=64, programs=1).sample(step.to(DEVICE)).tokens[0, 0].item() == tok


@pytest.mark.parametrize("fill,finite", [(NEG_INF, None), (float("nan"), 777)], ids=["all-inf", "nan-but-one"])
def test_draw_of_rows_without_finite_tiles_ends_like_the_reference(fill, finite):
    """A row whose tiles have no finite value (all -inf, or NaN read as -inf but for one token), split in four
    programs of two loads of two tiles: every bound is -inf or NaN and no threshold exists yet. The draw must
    end and emit the reference's token (a pick of an already scored tile would loop forever)."""
    logits = torch.full((1, 1000), fill)
    if finite is not None:
        logits[0, finite] = 2.5
    step = _one_request(logits, seed=31, pos=4)
    want = ReferenceSampler().sample(step).tokens[0, 0].item()
    assert GumbelMaxSampler(block=64, programs=4).sample(step.to(DEVICE)).tokens[0, 0].item() == want


def boost_listed(step: Step, row_hashes: int, seed: int) -> tuple[Step, int]:
    """The step with each row's tokens of hash below ``row_hashes`` given a logit that makes their noised score
    win or lose by 0.01 against the row's best other score (SYNTHETIC); returns it and the number of them."""
    g = torch.Generator().manual_seed(seed)
    logits = step.logits.float().clone()
    cu = step.cu_num_logits.tolist()
    ids = torch.arange(logits.shape[1])
    count = 0
    for r in range(step.num_requests):
        t = float(step.temperature[r]) or 1.0
        for j in range(cu[r], cu[r + 1]):
            seed_r, pos = int(step.seed[r]), int(step.positions[j])
            listed = (oracle_rng.murmur3_hash32(seed_r, pos, ids) < row_hashes).nonzero().flatten()
            if listed.numel() == 0:
                continue
            count += listed.numel()
            noise = oracle_rng.gumbel_noise(seed_r, pos, ids)
            score = torch.where(torch.isfinite(logits[j]), logits[j] / t + noise, float("-inf"))
            score[listed] = float("-inf")
            for tok in listed.tolist():
                margin = 0.01 if float(torch.rand(1, generator=g)) < 0.5 else -0.01
                logits[j, tok] = t * (float(score.max()) - float(noise[tok]) + margin)
    step.logits = logits.to(step.logits.dtype)
    return step, count


@pytest.mark.skipif(DEVICE == "cuda", reason="16,384 hashes a program: a 16K-lane one-warp block the GPU compiler "
                    "takes minutes over (timed out on the H200); the interpreter runs it in seconds")
@pytest.mark.parametrize("kind", ["plain", "stochastic"])
def test_listed_tokens_score_like_their_tiles(monkeypatch, kind):
    """With about one listed token a row (ROW_HASHES raised) given logits that make it win or lose by 0.01,
    under temperatures, top-k / top-p / min-p bounds and residual rows with draft logits, the draw's tokens
    equal ``reference``: a listed token's score is the one its tile would compute."""
    import replay_kernels.draw.draw as draw

    monkeypatch.setattr(draw, "ROW_HASHES", 1 << 20)
    monkeypatch.setattr(draw, "MAX_LISTED", 1 << 16)
    if kind == "plain":
        step = synthetic_step(87, 4096, 8, 0, ks=[0] * 8, greedy_frac=0.0)
        impl = GumbelMaxSampler(block=64, programs=64)
    else:
        step = synthetic_step(88, 4096, 8, 3, draft_logits=True, greedy_frac=0.0)
        impl = StochasticSampler(stats_block=64, draw_block=64, programs=64, stats_span=256)
    step, listed = boost_listed(step, 1 << 20, seed=89)
    assert listed >= step.num_requests // 2
    compare(step, impl.sample(step.to(DEVICE)), ReferenceSampler().sample(step), max_near_ties=0)


def test_draw_is_batch_composition_independent():
    """A request's token does not depend on which other requests share the launch, nor on the split."""
    step = synthetic_step(84, 900, 6, 0, ks=[0] * 6)
    whole = GumbelMaxSampler(block=64, programs=8).sample(step)
    for r in range(step.num_requests):
        alone = GumbelMaxSampler(block=128, programs=64).sample(step.select([r]))
        assert alone.tokens[0].tolist() == whole.tokens[r].tolist()


def test_launch_rewrites_every_output_slot():
    """No fill kernel: the draw writes tokens, -1 pads and counts itself, launch after launch."""
    step = synthetic_step(85, 400, 5, 3, ks=[0, 3, 1, 0, 2], draft_logits=True)
    for impl in (StochasticSampler(stats_block=64, draw_block=64, programs=7), GumbelMaxSampler(block=64)):
        state = impl.prepare(step)
        first = [x.clone() for x in impl.launch(state)]
        state.tokens.fill_(12345)
        state.counts.fill_(77)
        again = impl.launch(state)
        assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


def test_draw_resets_the_published_row_bests_for_the_next_launch():
    """The programs of a row prune against the best score any of them published this launch; the last
    program resets the row's key (draw.NO_BEST), or the next launch would prune against a stale score."""
    from replay_kernels.draw.draw import NO_BEST

    step = synthetic_step(86, 300, 4, 2, ks=[0, 2, 1, 0], draft_logits=True)
    for impl in (StochasticSampler(stats_block=128, draw_block=64, programs=9), GumbelMaxSampler(block=128)):
        state = impl.prepare(step)
        for _ in range(2):
            impl.launch(state)
            assert (state.draw.row_best == NO_BEST.value).all(), impl.name


# ---------------------------------------------------------------------------
# GPU: production vocabularies, determinism
# ---------------------------------------------------------------------------


def assert_repeatable_and_graph_capturable(impl, state, launches: int = 100) -> None:
    """``launches`` repeated launches give bit-identical tokens and counts, and the launch captured in a CUDA
    graph (no host sync inside) replays to the same outputs."""
    first = [x.clone() for x in impl.launch(state)]
    for _ in range(launches):
        tokens, counts = impl.launch(state)
        assert torch.equal(tokens, first[0]) and torch.equal(counts, first[1])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        impl.launch(state)
    state.tokens.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(state.tokens, first[0]) and torch.equal(state.counts, first[1])


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [151936, 248320])
def test_gpu_large_vocab_exact_and_deterministic(vocab):
    assert torch.cuda.is_available()
    for seed, kwargs in [(80, dict()), (81, dict(draft_logits=True)), (82, dict(dtype=torch.bfloat16, ties=True))]:
        step = synthetic_step(seed, vocab, 16, 4, device="cuda", **kwargs)
        want = ReferenceSampler().sample(step.to("cpu"))  # the oracle runs on the CPU
        impl = StochasticSampler()
        got = impl.sample(step)
        # GPU libdevice log / FMA contraction may move noise by an ulp: near-ties allowed (bound stated above).
        compare(step, got, want)
        assert_repeatable_and_graph_capturable(impl, impl.prepare(step))
        plain = synthetic_step(seed + 10, vocab, 16, 0, ks=[0] * 16, device="cuda", **kwargs)
        gm = GumbelMaxSampler()
        compare(plain, gm.sample(plain), ReferenceSampler().sample(plain.to("cpu")))
        gstate = gm.prepare(plain)
        gfirst = gm.launch(gstate)[0].clone()
        for _ in range(100):
            assert torch.equal(gm.launch(gstate)[0], gfirst)


# ---------------------------------------------------------------------------
# stochastic: top-p accept tests decided by bounds (replay_kernels/verify/verify_bounds.py)
# ---------------------------------------------------------------------------


def top_p_verify_step(seed: int, vocab: int, num_requests: int, spike: float) -> Step:
    """SYNTHETIC: every request stochastic (T = 1 or 0.7) with top-p in [0.5, 0.95] (a few with min-p too),
    one-hot drafts (the argmax 70% of the time), ragged k; ``spike`` > 0 adds a peak per row."""
    step = synthetic_step(seed, vocab, num_requests, 4, greedy_frac=0.0, filters=False)
    g = torch.Generator().manual_seed(seed + 1)
    r = step.num_requests
    step.temperature = torch.where(torch.rand(r, generator=g) < 0.7, 1.0, 0.7)
    step.top_p = torch.empty(r).uniform_(0.5, 0.95, generator=g)
    step.min_p = torch.where(torch.rand(r, generator=g) < 0.25, 0.01, 0.0)
    return peaked(step, spike, seed + 2) if spike else step


def pending_requests(state) -> int:
    """Requests that went to the exact-cut fallback: they list two rows or more (a decided top-p request
    lists its draw row alone)."""
    rows = state.fallback.rows.cpu()[:int(state.fallback.filters.count)]
    req = state.fallback.row_req.cpu()[rows.long()]
    return int((torch.bincount(req, minlength=state.tokens.shape[0]) >= 2).sum())


@pytest.mark.parametrize("seed,vocab,spike", [(90, 700, 0.0), (91, 700, 9.0), (92, 2500, 6.0), (93, 301, 14.0)])
def test_stochastic_top_p_bounds_match_reference(seed, vocab, spike):
    step = top_p_verify_step(seed, vocab, 12, spike)
    impl = StochasticSampler(stats_block=128, draw_block=128, stats_span=512, filter_span=256)
    state = impl.prepare(step)
    assert state.fallback is not None and int(state.params.check.sum()) == step.logits.shape[0]
    tokens, counts = impl.launch(state)
    compare(step, impl.result(state, tokens, counts), ReferenceSampler().sample(step))


def test_stochastic_top_p_bounds_decide_most_tests_and_fallback_runs(monkeypatch):
    """Across these steps some tests are decided by the bounds and some go to the exact fallback; both
    give the reference's tokens (so neither path is dead code). The same tokens again when the fallback's
    passes have one program along rows, which then serves every row the fallback lists in turn, and the same
    cuts when they run as the launch sequence instead of the cooperative loop
    (replay_kernels/filters/filter_loop.py)."""
    impl = StochasticSampler(stats_block=128, draw_block=128, stats_span=512, filter_span=256)
    seq = StochasticSampler(stats_block=128, draw_block=128, stats_span=512, filter_span=256, fallback_loop=False)
    pending = requests = 0
    for seed in range(100, 103):  # pending requests 1, 1, 1 of 6, 8, 10 (seeds 103-105: 0, 2, 2 of 7, 7, 8)
        step = top_p_verify_step(seed, 200, 10, 0.0)
        # a small top-p on a small flat vocabulary: a wide band [p S, p S + e_2], pending more often
        step.top_p = torch.empty(step.num_requests).uniform_(0.3, 0.6, generator=torch.Generator().manual_seed(seed))
        monkeypatch.setattr(verify_bounds, "FALLBACK_GRID_ROWS", 32)
        state = impl.prepare(step)
        tokens, counts = (x.clone() for x in impl.launch(state))
        pending += pending_requests(state)
        requests += int((step.num_drafts > 0).sum())
        compare(step, impl.result(state, tokens, counts), ReferenceSampler().sample(step))
        sequence = seq.prepare(step)
        assert state.fallback_loop is not None and sequence.fallback_loop is None
        assert [torch.equal(a, b) for a, b in zip(seq.launch(sequence), (tokens, counts))] == [True, True]
        assert torch.equal(sequence.fallback.cut_val, state.fallback.cut_val)
        assert torch.equal(sequence.fallback.cut_idx, state.fallback.cut_idx)
        monkeypatch.setattr(verify_bounds, "FALLBACK_GRID_ROWS", 1)
        one = impl.prepare(step)
        assert one.fallback.filters.grid_rows == 1
        assert [torch.equal(a, b) for a, b in zip(impl.launch(one), (tokens, counts))] == [True, True]
        # one launch a position before the fallback (the exact round takes every position in one launch either way)
        per_position = StochasticSampler(stats_block=128, draw_block=128, stats_span=512, filter_span=256,
                                         fused_below=0)
        state = per_position.prepare(step)
        assert [torch.equal(a, b) for a, b in zip(per_position.launch(state), (tokens, counts))] == [True, True]
    assert 0 < pending < requests, (pending, requests)


def test_stochastic_exact_round_walks_on_from_a_later_pending_position():
    """A request whose first draft is accepted by the bounds and whose second is undecided waits at position 1;
    the exact round (one launch for every position) walks it on from there: tokens equal the reference's with
    one launch a position or one for them all before the fallback. Position 0 rows are peaked at their draft
    (accepted whatever u), the later ones are flat at top-p 0.3-0.6 (undecided often)."""
    kw = dict(stats_block=32, draw_block=128, stats_span=64, filter_span=256)  # 4 spans a row: NB x P arrivals
    seed = 131  # of seeds 130-133, the one with a request pending at position 1 that then walks on
    step = top_p_verify_step(seed, 200, 10, 0.0)
    step.top_p = torch.empty(step.num_requests).uniform_(0.3, 0.6, generator=torch.Generator().manual_seed(seed))
    step.min_p = torch.zeros(step.num_requests)
    cu = step.cu_num_logits.tolist()
    for r in range(step.num_requests):
        if cu[r + 1] - cu[r] >= 3:
            step.logits[cu[r], int(step.draft_token_ids[cu[r]])] += 60.0
    want = ReferenceSampler().sample(step)
    later = 0
    for impl in (StochasticSampler(**kw), StochasticSampler(fused_below=0, **kw)):
        state = impl.prepare(step)
        tokens, counts = impl.launch(state)
        compare(step, impl.result(state, tokens, counts), want)
        rows = state.fallback.rows.cpu()[:int(state.fallback.filters.count)].long()
        listed = set(state.fallback.row_req.cpu()[rows].tolist())
        # walked on: the pending position accepted and a later one tested (a count beyond it)
        later += sum(1 <= int(state.pend[r]) and int(counts[r]) > int(state.pend[r]) + 1 for r in listed)
    assert later == 2, later  # that request, in both layouts


def x2_pending(x: torch.Tensor, d: int, p: float, u: float) -> bool:
    """Would the bounds with ``X2`` alone (the largest value before d bounding e_c*) leave this accept test
    undecided? float64, no rounding margins: ``log u`` inside ``[x_d - M - log hi, x_d - M - log lo]``."""
    x = x.double()
    m, e = x.max(), torch.exp(x - x.max())
    s = float(e.sum())
    before = (x < x[d]) | ((x == x[d]) & (torch.arange(x.numel()) < d))
    rb = float(e[before].sum())
    if rb + float(e[d]) <= (1 - p) * s or rb <= (1 - p) * s:  # removed, or d is the first kept token: exact
        return False
    hi = min(s, p * s + math.exp(float(x[before].max() - m)))
    lo = max(p * s, s - rb)
    return float(x[d] - m) - math.log(hi) <= math.log(u) <= float(x[d] - m) - math.log(lo)


def test_stochastic_top_p_level_masses_decide_what_x2_leaves_pending():
    """Rows of a peak (value 0), a runner-up (-0.7: e = 0.5) and a flat tail (-8.3 +- noise, half the peak's
    mass), top-p 0.9, the peak drafted: the kept set ends in the tail, so the first kept token's mass is
    about 2.5e-4, but X2 (the runner-up) bounds it by 0.5 and leaves about one test in eight undecided. The
    masses at or above x_d - 2 ... x_d - 16 bound it by e^-8 and decide them all. Same tokens as the reference."""
    r, v = 32, 2048
    step = synthetic_step(130, v, r, 1, greedy_frac=0.0, filters=False, ks=[1] * r)
    g = torch.Generator().manual_seed(131)
    logits = -8.3 + 0.1 * torch.randn(2 * r, v, generator=g)
    drafts = step.draft_token_ids.clone()
    for row in range(2 * r):
        peak, second = torch.randperm(v, generator=g)[:2].tolist()
        logits[row, peak], logits[row, second] = 0.0, -0.7
        drafts[row] = peak if row % 2 == 0 else -1
    step.logits, step.draft_token_ids = logits, drafts
    step.temperature = torch.ones(r)
    step.top_p = torch.full((r,), 0.9)
    u = oracle_rng.accept_uniform(step.seed, step.positions[0::2].long())
    by_x2 = sum(x2_pending(logits[2 * q], int(drafts[2 * q]), 0.9, float(u[q])) for q in range(r))
    impl = StochasticSampler(stats_block=128, draw_block=128, stats_span=512, filter_span=256)
    state = impl.prepare(step)
    tokens, counts = impl.launch(state)
    compare(step, impl.result(state, tokens, counts), ReferenceSampler().sample(step))
    assert by_x2 >= 3 and pending_requests(state) == 0, (by_x2, pending_requests(state))


def test_stochastic_top_p_bounds_drafts_at_the_cut():
    """Drafts on either side of the top-p cut (the first kept token c*, the last removed one): the kept
    test and the case c* = d of the bounds are exercised where an off-by-one in the order would flip them."""
    step = top_p_verify_step(110, 300, 12, 0.0)
    step.min_p = torch.zeros(step.num_requests)
    drafts = step.draft_token_ids.clone()
    cu = step.cu_num_logits.tolist()
    for r in range(step.num_requests):
        for j, row in enumerate(range(cu[r], cu[r + 1] - 1)):
            x = (step.logits[row].float() / step.temperature[r]).double()
            order = torch.argsort(x, stable=True)
            mass = torch.cumsum(torch.softmax(x, 0)[order], 0)
            first_kept = int((mass > 1 - float(step.top_p[r])).nonzero()[0])
            drafts[row] = int(order[first_kept - (j + r) % 2]) if first_kept else int(order[0])
    step.draft_token_ids = drafts
    impl = StochasticSampler(stats_block=128, draw_block=128, stats_span=512, filter_span=256)
    compare(step, impl.sample(step), ReferenceSampler().sample(step))


def test_stochastic_top_p_bounds_heavy_tokens_at_the_cut():
    """Rows of four heavy tokens (masses 0.4, 0.3, 0.2, 0.06; 0.04 spread over the rest) at top-p 0.88:
    the 0.06 token is the last removed one (reference: always rejected), the 0.2 token the first kept
    (c* = d: the kept mass is S - Rb exactly). A kept test that counted d's own mass before it, or a
    bound that dropped a case, accepts the removed token or misjudges the first kept one."""
    g = torch.Generator().manual_seed(120)
    step = synthetic_step(120, 500, 40, 3, greedy_frac=0.0, filters=False, ks=[3] * 40)
    n, v = step.logits.shape
    logits = torch.empty(n, v)
    drafts = step.draft_token_ids.clone()
    for row in range(n):
        mass = torch.full((v,), 0.04 / (v - 4))
        heavy = torch.randperm(v, generator=g)[:4]
        mass[heavy] = torch.tensor([0.4, 0.3, 0.2, 0.06])
        logits[row] = torch.log(mass) + 2.0
        if drafts[row] >= 0:
            drafts[row] = int(heavy[3 - (row % 2)])  # the removed 0.06 token, or the first kept 0.2 one
    step.logits, step.draft_token_ids = logits, drafts
    step.temperature = torch.ones(40)
    step.top_p = torch.full((40,), 0.88)
    impl = StochasticSampler(stats_block=128, draw_block=128, stats_span=512, filter_span=256)
    compare(step, impl.sample(step), ReferenceSampler().sample(step))


@pytest.mark.parametrize("first,second", [(10, 900), (100, 300)])
def test_stochastic_top_p_bounds_order_ties_by_id(first, second):
    """Two tokens of the same value (mass 0.3 each; 0.36 on a third, 0.04 spread) at top-p 0.5: the oracle's order
    puts the lower id first, so it is removed (cumulative mass 0.34) and the other kept (0.64). Drafting either must
    count the tie before the higher id only: in another tile of the span pass (10, 900: the tile wholly before the
    draft) or in the draft's own tile (100, 300; tiles of 512). Counting no tie rejects the kept one always; counting
    both accepts the removed one. Same tokens as the reference."""
    g = torch.Generator().manual_seed(150)
    v, r = 1200, 24
    step = synthetic_step(150, v, r, 2, greedy_frac=0.0, filters=False, ks=[2] * r)
    n = step.logits.shape[0]
    logits = torch.empty(n, v)
    drafts = step.draft_token_ids.clone()
    for row in range(n):
        mass = torch.full((v,), 0.04 / (v - 3))
        third = int(torch.randint(1200 - 100, 1200, (1,), generator=g))
        mass[[first, second, third]] = torch.tensor([0.3, 0.3, 0.36])
        logits[row] = torch.log(mass) + 1.0
        if drafts[row] >= 0:
            drafts[row] = first if row % 2 == 0 else second
    assert float(logits[0, first]) == float(logits[0, second])
    step.logits, step.draft_token_ids = logits, drafts
    step.temperature = torch.ones(r)
    step.top_p = torch.full((r,), 0.5)
    impl = StochasticSampler(stats_block=128, draw_block=128, stats_span=512, filter_span=256)
    compare(step, impl.sample(step), ReferenceSampler().sample(step))


def test_stochastic_top_p_bounds_far_drafts_and_nan_rows():
    """The bounded sums are taken against the draft's own value x_d (verify_stats.span_bounds). Drafts 100 below
    their row's top (beyond ``verify_bounds.REF_GAP``: exp(100) overflows fp32, so the sums must not be read) are
    rejected by the coarse bound, without the exact-cut fallback; a request with a NaN logit in its first verify
    row (its sum S is NaN) goes to the fallback, whose cut reads NaN as -inf. Tokens are the reference's on the
    step with NaN read as -inf (NaN logits are outside conformance, docs/FIXTURES.md; the kernels read them as
    -inf). Mutation-checked: without the REF_GAP branch the overflowed sums leave the far drafts pending; without
    the NaN branch the launch does not finish under the interpreter (the NaN row's residual never settles)."""
    step = top_p_verify_step(140, 300, 8, 0.0)
    step.min_p = torch.zeros(step.num_requests)
    logits, drafts = step.logits.float().clone(), step.draft_token_ids.clone()
    cu = step.cu_num_logits.tolist()
    nan_request = next(r for r in range(step.num_requests) if cu[r + 1] - cu[r] >= 2)
    for r in range(step.num_requests):
        for row in range(cu[r], cu[r + 1] - 1):
            if r == nan_request and row == cu[r]:
                drafts[row] = int(logits[row].argmax())
                logits[row, drafts[row]] += 30.0  # accepted whatever u: a rejection here is wrong
                logits[row, (drafts[row] + 7) % logits.shape[1]] = float("nan")
            elif drafts[row] >= 0:
                drafts[row] = int(logits[row].argmin())
                logits[row, int(logits[row].argmax())] = float(logits[row, drafts[row]]) + 100.0
    step.logits, step.draft_token_ids = logits, drafts
    impl = StochasticSampler(stats_block=128, draw_block=128, stats_span=512, filter_span=256)
    state = impl.prepare(step)
    tokens, counts = impl.launch(state)
    as_neg_inf = step.to("cpu")
    as_neg_inf.logits = torch.nan_to_num(logits, nan=float("-inf"))
    compare(step, impl.result(state, tokens, counts), ReferenceSampler().sample(as_neg_inf))
    rows = state.fallback.rows.cpu()[:int(state.fallback.filters.count)]
    listed = set(state.fallback.row_req.cpu()[rows.long()].tolist())
    assert nan_request in listed and int(state.pend[nan_request]) == 0, (listed, nan_request)
    assert pending_requests(state) == 1, pending_requests(state)


def test_stochastic_first_check_keeps_residual_draws_unread_when_the_verify_knows_them_kept():
    """The first check keeps a one-hot RESIDUAL row's drawn token unread (partials left NaN) exactly when (a) it is
    the one lane at the row's top and the rejected draft is below it (the draw's top leaves the draft out, the
    check's sums keep it in: with the draft below, every lane is at or before the token, ``low == S``), or (b) its
    value is above ``kept_above[r]``, which the rejection's bounds set (``verify_bounds.bounded_verdict``: the
    draft was kept, or a level's mass is below p S); every token above ``kept_above`` is in the oracle's top-p
    set. Tokens are the reference's. Mutation-checked: dropping the draft test, flagging only TARGET rows, or a
    level test turned around (mass at or above the level at least p S) fails it."""
    impl = StochasticSampler(stats_block=128, draw_block=128, stats_span=512, filter_span=256)
    counts = dict(held=0, level=0, read=0, draft_above=0)
    for seed, spike in [(120, 0.0), (121, 0.0), (122, 6.0), (123, 6.0)]:
        step = top_p_verify_step(seed, 300, 16, spike)
        state = impl.prepare(step)
        state.check.pall.fill_(float("nan"))
        tokens, got_counts = impl.launch(state)
        compare(step, impl.result(state, tokens, got_counts), ReferenceSampler().sample(step))
        cut_val, cut_idx = state.fallback.cut_val.cpu(), state.fallback.cut_idx.cpu()
        kept_set = oracle_params(step) > float("-inf")
        for r in torch.nonzero(state.mode.cpu() == MODE_RESIDUAL.value).flatten().tolist():
            row, d, above = int(state.rrow[r]), int(state.rdtok[r]), float(state.kept_above[r])
            ids = torch.arange(step.logits.shape[1])
            x = step.logits[row].float() / step.temperature[r]
            x = torch.where((x > cut_val[row]) | ((x == cut_val[row]) & (ids >= cut_idx[row])), x, float("-inf"))
            assert bool(kept_set[row][x > above].all()), (seed, r, above)
            others = torch.where(ids == d, float("-inf"), x)
            top = float(others.max())
            noise = oracle_rng.gumbel_row(int(step.seed[r]), int(step.positions[row]), x.numel())
            first = int(torch.argmax(others + noise))
            held = float(x[first]) == top and int((others == top).sum()) == 1 and float(x[d]) < top
            level = float(x[first]) > above
            skipped = bool(torch.isnan(state.check.pall[r]).all())
            assert skipped == (held or level), (seed, r, first, d, above)
            counts["held"] += held
            counts["level"] += level and not held
            counts["read"] += not skipped
            counts["draft_above"] += float(x[first]) == top and float(x[d]) >= top and not level
    assert all(counts.values()), counts
