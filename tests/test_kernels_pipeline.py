"""The Triton samplers with the whole sampling pipeline (replay_kernels/filters/processors.py, logprobs.py,
replay_kernels/pipeline.py) against the torch oracle.

Every step here is SYNTHETIC: random logits from a seeded generator (tests/test_kernels.synthetic_step) with the
pipeline's inputs of ``replay_harness.recording.synthetic.add_pipeline``, or small hand-made rows. Under
TRITON_INTERPRET=1 (tests/conftest.py) the impls ``stochastic``, ``gumbel-max`` and ``serial-scan`` must equal
``reference`` token for token and count for count, with logprobs within 1e-5 (the log-sum-exp is summed in another
order), top-n ids, ranks and kept masks exactly; the processors' float32 rows equal the oracle's bit for bit.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch

from replay_harness.bench.coverage import triton_launches
from replay_harness.impls.kernel_impls import GumbelMaxSampler, SerialScanSampler, StochasticSampler
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.processors import apply_grammar, apply_processors
from replay_harness.oracle.logprobs import pack_bits
from replay_harness.recording.step import Step
from replay_harness.recording.synthetic import PIPELINE_RULES, add_pipeline
from replay_kernels import pipeline
from replay_kernels.batch import SamplingBatch
from replay_kernels.draw import gumbel_max
from replay_kernels.draw.plain import PlainState
from replay_kernels.filters.processors import launch_processors, prepare_processors
from replay_kernels.verify import stochastic
from replay_kernels.verify.stochastic import VerifyState
from test_kernels import synthetic_step

RULES = tuple(rule for rule in PIPELINE_RULES if rule != "logprobs")
NEG_INF = float("-inf")


def pipeline_step(seed: int, vocab: int, num_requests: int, max_k: int, rules=PIPELINE_RULES, **kwargs) -> Step:
    """A SYNTHETIC step with the pipeline inputs of ``rules`` (k = 0 for every request when ``max_k`` is 0)."""
    ks = [0] * num_requests if max_k == 0 else None
    step = synthetic_step(seed, vocab, num_requests, max_k, ks=ks, **kwargs)
    return add_pipeline(torch.Generator().manual_seed(seed + 1000), step, tuple(rules))


def oracle_rows(step: Step) -> torch.Tensor:
    """[N, V] float32: the oracle's rows after the grammar mask and the processors (before temperature)."""
    rows = step.logits.float().clone()
    apply_grammar(rows, step)
    apply_processors(rows, step)
    return rows


def kernel_rows(step: Step) -> torch.Tensor:
    p = prepare_processors(step, step.logits.device)
    launch_processors(p)
    return p.rows


def assert_same_rows(got: torch.Tensor, want: torch.Tensor) -> None:
    same = (got == want) | (torch.isnan(got) & torch.isnan(want))
    assert bool(same.all()), [(j, v, float(got[j, v]), float(want[j, v])) for j, v in (~same).nonzero()[:5].tolist()]


def assert_equal_results(step: Step, got, want) -> None:
    """Tokens, counts and routes equal; with logprob requests, logprobs within 1e-5, ids, ranks, kept masks equal."""
    assert torch.equal(got.routes, want.routes), (got.routes, want.routes)
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.counts, want.counts), \
        (got.tokens, want.tokens, got.counts, want.counts)
    if step.logprobs is None:
        assert got.logprobs is None
        return
    assert torch.equal(got.logprob_ids, want.logprob_ids), (got.logprob_ids, want.logprob_ids)
    assert torch.equal(got.logprob_ranks, want.logprob_ranks), (got.logprob_ranks, want.logprob_ranks)
    assert torch.equal(got.kept_mask, want.kept_mask)
    torch.testing.assert_close(got.logprobs, want.logprobs, atol=1e-5, rtol=0, equal_nan=True)


# ---------------------------------------------------------------------------
# the processors' rows, bit for bit
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("rules", [(rule,) for rule in RULES] + [RULES])
@pytest.mark.parametrize("vocab,dtype,max_k", [(97, torch.float32, 3), (211, torch.bfloat16, 2),
                                               (1000, torch.float32, 0)])
def test_processor_rows_equal_the_oracle(rules, vocab, dtype, max_k):
    step = pipeline_step(7 + vocab, vocab, 7, max_k, rules, dtype=dtype)
    want = oracle_rows(step)
    assert not torch.equal(want, step.logits.float()), "the rules must change some row"
    assert_same_rows(kernel_rows(step), want)


def _one_request(logits: torch.Tensor, drafts: list[int], **fields) -> Step:
    """A SYNTHETIC one-request step over hand-made rows ``logits`` [k+1, V] (k = len(drafts)), greedy."""
    k = len(drafts)
    return Step(logits=logits, cu_num_logits=torch.tensor([0, k + 1], dtype=torch.int32),
                draft_token_ids=torch.tensor(drafts + [-1], dtype=torch.int32),
                positions=torch.arange(k + 1, dtype=torch.int64), temperature=torch.tensor([0.0]),
                top_k=torch.zeros(1, dtype=torch.int32), top_p=torch.ones(1), min_p=torch.zeros(1),
                seed=torch.tensor([5]), request_ids=torch.tensor([1]), **fields)


def _ragged(*lists: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    values = torch.tensor([x for xs in lists for x in xs], dtype=torch.int32)
    cu = torch.tensor([0] + [len(xs) for xs in lists], dtype=torch.int32).cumsum(0).to(torch.int32)
    return values, cu


def test_drafts_before_the_row_count_as_output():
    """Row l's output is the request's output then drafts 0..l-1 (a -1 placeholder: a token of the length that
    matches nothing): frequency counts them, a bad word's prefix matches across the output / draft boundary,
    min-tokens counts the placeholder."""
    v = 40
    logits = torch.zeros(4, v)
    out, cu_out = _ragged([9])
    words, cu_words = _ragged([9, 5, 7, 6])   # words (9, 5, 7) and (6,): 7 banned after "9 5"; 6 always
    lengths, cu_lengths = _ragged([3, 1])
    stops, cu_stops = _ragged([11])
    step = _one_request(
        logits, [5, -1, 5], output_token_ids=out, cu_output_token_ids=cu_out,
        frequency_penalty=torch.tensor([2.0]), presence_penalty=torch.tensor([0.5]),
        bad_words_token_ids=words, cu_bad_words_token_ids=cu_words, bad_words_lengths=lengths,
        cu_bad_words_lengths=cu_lengths, min_tokens=torch.tensor([3], dtype=torch.int32),
        stop_token_ids=stops, cu_stop_token_ids=cu_stops)
    got = kernel_rows(step)
    assert_same_rows(got, oracle_rows(step))
    assert got[:, 5].tolist() == [0.0, -2.5, -2.5, -4.5]  # drafts 5, -1, 5 before rows 1, 2, 3
    assert got[:, 9].tolist() == [-2.5] * 4               # the request's own output
    assert got[:, 7].tolist() == [0.0, NEG_INF, 0.0, 0.0]  # "9 5" ends row 1's output only
    assert got[:, 6].tolist() == [NEG_INF] * 4
    assert got[:, 11].tolist() == [NEG_INF, NEG_INF, 0.0, 0.0]  # outputs of 1, 2, 3 (placeholder), 4 tokens


def test_min_tokens_gives_a_grammar_row_left_empty_its_stop_ids_back():
    """Suppressing the stop ids of a grammar request's row that allows only stop ids would leave no finite
    logit: the stop ids get their finite values back. A row with one more allowed token stays suppressed, and so
    does a request without grammar whose allowed ids are its stop ids (its row is left all -inf)."""
    v = 70
    logits = torch.randn(3, v, generator=torch.Generator().manual_seed(3))
    logits[:, 21] = NEG_INF  # a stop id that is -inf stays -inf when the others come back
    allowed = torch.zeros(3, v, dtype=torch.bool)
    allowed[:, [20, 21, 33]] = True
    allowed[1, 50] = True       # row 1: one more token, finite: no restore
    stops, cu_stops = _ragged([20, 21, 33, 20], [20, 21, 33])
    allowed_ids, cu_allowed = _ragged([], [33, 20, 21])
    out, cu_out = _ragged([], [])
    step = Step(logits=logits, cu_num_logits=torch.tensor([0, 2, 3], dtype=torch.int32),
                draft_token_ids=torch.tensor([4, -1, -1], dtype=torch.int32), positions=torch.arange(3),
                temperature=torch.tensor([0.0, 0.8]), top_k=torch.zeros(2, dtype=torch.int32), top_p=torch.ones(2),
                min_p=torch.zeros(2), seed=torch.tensor([1, 2]), request_ids=torch.tensor([1, 2]),
                output_token_ids=out, cu_output_token_ids=cu_out, min_tokens=torch.tensor([5, 5], dtype=torch.int32),
                stop_token_ids=stops, cu_stop_token_ids=cu_stops, allowed_token_ids=allowed_ids,
                cu_allowed_token_ids=cu_allowed, has_grammar=torch.tensor([1, 0], dtype=torch.int8),
                grammar_bitmask=pack_bits(allowed))
    got = kernel_rows(step)
    assert_same_rows(got, oracle_rows(step))
    assert got[0, [20, 33]].tolist() == logits[0, [20, 33]].tolist() and float(got[0, 21]) == NEG_INF
    assert bool(torch.isneginf(got[1, [20, 21, 33]]).all()) and float(got[1, 50]) == float(logits[1, 50])
    assert bool(torch.isneginf(got[2]).all())  # request 1 has no grammar: no restore
    assert_equal_results(step, StochasticSampler().sample(step), ReferenceSampler().sample(step))


# ---------------------------------------------------------------------------
# the impls against reference: tokens, counts, logprobs
# ---------------------------------------------------------------------------

CASES = [
    # impl, vocab, dtype, max_k, rules, greedy_frac
    ("stochastic", 97, torch.float32, 3, PIPELINE_RULES, 0.3),
    ("stochastic", 211, torch.bfloat16, 2, PIPELINE_RULES, 0.3),
    ("stochastic", 1000, torch.float32, 0, PIPELINE_RULES, 0.3),
    ("stochastic", 211, torch.float32, 2, PIPELINE_RULES, 1.0),   # every request greedy
    ("stochastic", 97, torch.bfloat16, 2, PIPELINE_RULES, 0.0),   # no greedy request
    ("gumbel-max", 211, torch.bfloat16, 0, PIPELINE_RULES, 0.3),
    ("gumbel-max", 1000, torch.float32, 0, PIPELINE_RULES, 0.3),
    ("serial-scan", 97, torch.float32, 0, PIPELINE_RULES, 0.3),
    ("stochastic", 97, torch.float32, 2, ("logprobs",), 0.3),    # logprobs alone: the rows are the logits
] + [("stochastic", 97, torch.float32, 2, (rule, "logprobs"), 0.3) for rule in RULES]
IMPLS = {"stochastic": StochasticSampler, "gumbel-max": GumbelMaxSampler, "serial-scan": SerialScanSampler}


@pytest.mark.parametrize("impl,vocab,dtype,max_k,rules,greedy_frac", CASES)
def test_kernel_impls_equal_reference(impl, vocab, dtype, max_k, rules, greedy_frac):
    step = pipeline_step(31 + vocab + max_k, vocab, 6, max_k, rules, dtype=dtype, greedy_frac=greedy_frac)
    want = ReferenceSampler().sample(step)
    assert_equal_results(step, IMPLS[impl]().sample(step), want)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["stochastic", "gumbel-max"])
@pytest.mark.parametrize("vocab,dtype", [(1000, torch.float32), (32011, torch.bfloat16), (151936, torch.float32),
                                         (248320, torch.bfloat16)])
def test_kernel_impls_equal_reference_on_the_gpu(impl, vocab, dtype):
    """The same on CUDA at irregular and real vocabularies: the oracle runs on the CPU, the kernels on the GPU
    (where Triton may contract a multiply-add; the processors' sparse pass keeps fp fusion off)."""
    max_k = 2 if impl == "stochastic" else 0
    step = pipeline_step(57 + vocab, vocab, 9, max_k, PIPELINE_RULES, dtype=dtype, greedy_frac=0.3)
    want = ReferenceSampler().sample(step)
    got = IMPLS[impl]().sample(step.to("cuda"))
    assert_equal_results(step, dataclasses.replace(
        got, **{f.name: getattr(got, f.name).cpu() for f in dataclasses.fields(got)
                if isinstance(getattr(got, f.name), torch.Tensor)}), want)


def test_top_n_ties_go_to_the_smaller_id_and_processed_rows_rank_minus_inf_ties():
    """Processed logits of a top-k 2 row (the tie at the 2nd value kept): every other token is -inf, so the top 6
    end in -inf ties (ascending ids); a raw row's equal values are listed by id too."""
    v = 64
    logits = torch.full((2, v), -3.0)
    logits[:, [40, 7, 19]] = 2.0
    logits[:, 33] = 4.0
    step = Step(logits=logits, cu_num_logits=torch.tensor([0, 1, 2], dtype=torch.int32),
                draft_token_ids=torch.tensor([-1, -1], dtype=torch.int32), positions=torch.tensor([3, 4]),
                temperature=torch.tensor([0.7, 1.0]), top_k=torch.tensor([2, 0], dtype=torch.int32),
                top_p=torch.ones(2), min_p=torch.zeros(2), seed=torch.tensor([8, 9]), request_ids=torch.tensor([1, 2]),
                logprobs=torch.tensor([6, 6], dtype=torch.int32), logprobs_mode=torch.tensor([3, 0], dtype=torch.int8))
    want = ReferenceSampler().sample(step)
    assert want.logprob_ids[:, 0, 1:].tolist() == [[33, 7, 19, 40, 0, 1]] * 2
    assert want.logprobs[0, 0, 5:].tolist() == [NEG_INF] * 2 and bool(torch.isfinite(want.logprobs[1, 0]).all())
    for impl in (StochasticSampler(), GumbelMaxSampler()):
        assert_equal_results(step, impl.sample(step), want)


def test_a_state_launches_again_with_the_same_outputs():
    """prepare once, launch twice: the rows, tokens and logprob outputs are rewritten, not accumulated: column 0,
    rank and kept words of a request's slots, every column of a request with n > 0 (the rest keeps its fill)."""
    step = pipeline_step(5, 97, 5, 2)
    impl = StochasticSampler()
    state = impl.prepare(step)
    first = impl.result(state, *impl.launch(state))
    state.processors.rows.fill_(123.0)
    lp = state.logprobs
    for r, (k, n) in enumerate(zip(step.num_drafts.tolist(), step.logprobs.tolist())):
        lp.values[r, :k + 1, :1 if n <= 0 else None] = 7.0
        lp.ids[r, :k + 1, :1 if n <= 0 else None] = 7
        lp.kept[r, :k + 1] = 7
        lp.ranks[r, :k + 1] = 7
    again = impl.result(state, *impl.launch(state))
    assert_equal_results(step, again, first)
    assert_equal_results(step, again, ReferenceSampler().sample(step))


# ---------------------------------------------------------------------------
# a batch without pipeline fields: the sampler's own state and launches
# ---------------------------------------------------------------------------


def _launched(sampler, batch) -> tuple[Counter, object]:
    state = sampler.prepare(batch)
    with triton_launches() as counts:
        sampler.launch(state)
    return counts, state


@pytest.mark.parametrize("kind,max_k", [("stochastic", 2), ("stochastic", 0), ("gumbel-max", 0)])
def test_a_batch_without_pipeline_fields_launches_what_it_did(kind, max_k):
    """No pipeline field, no logprob request: the sampler's own state on the step's own logits (no copy) and its
    own launches; with pipeline fields, the same launches plus exactly one dense and one sparse launch."""
    make = {"stochastic": stochastic.StochasticSampler, "gumbel-max": gumbel_max.GumbelMaxSampler}[kind]
    plain = synthetic_step(41, 97, 4, max_k, ks=[0] * 4 if max_k == 0 else None)
    counts, state = _launched(make(), SamplingBatch.of(plain))
    assert type(state) is (VerifyState if max_k else PlainState) and state.logits.data_ptr() == plain.logits.data_ptr()
    assert not {"_dense_kernel", "_sparse_kernel", "_logprob_kernel"} & set(counts)
    assert sum(counts.values()) == len(state.launches)
    piped = add_pipeline(torch.Generator().manual_seed(2), plain, RULES)
    more, piped_state = _launched(make(), SamplingBatch.of(piped))
    assert isinstance(piped_state, pipeline.PipelineState) and piped_state.logprobs is None
    assert more - counts == Counter({"_dense_kernel": 1, "_sparse_kernel": 1}) and not counts - more
    only_logprobs = dataclasses.replace(plain, logprobs=torch.tensor([2, -1, 0, 3], dtype=torch.int32))
    lp_state = make().prepare(SamplingBatch.of(only_logprobs))
    assert lp_state.processors is None and lp_state.inner.logits.data_ptr() == plain.logits.data_ptr()
    sampled = make().sample(SamplingBatch.of(only_logprobs))
    assert set(sampled.emitted) == {"logprobs", "logprob_ids", "logprob_ranks", "kept_mask"}
