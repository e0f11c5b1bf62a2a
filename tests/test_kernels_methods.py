"""``stochastic`` on block verification, FLy and the ``mrv2-fp64`` contract (replay_kernels/verify/methods.py,
method_rows.py, method_walk.py, draw/draw64.py) against the oracle (replay_harness/oracle/methods.py), token for
token, on SYNTHETIC steps of irregular shapes and on the committed fixtures; the per-row quantities (block's
residual mass, FLy's entropy) against the oracle's; the standard path's launches unchanged; methods the kernels do
not implement refused by name."""
from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest
import torch

from replay_harness.bench.coverage import triton_launches
from replay_harness.impls import kernel_impls
from replay_harness.impls.kernel_impls import GumbelMaxSampler, StochasticSampler, method_inputs
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.methods import STANDARD, fly_entropy, method_of, verify_with
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.step import ROUTE_CODE
from replay_harness.recording.store import Recording
from replay_harness.recording.synthetic import PIPELINE_RULES, add_pipeline
from replay_kernels.batch import SamplingBatch
from replay_kernels.verify import methods, stochastic
from replay_kernels.verify.methods import MethodSampler, MethodState
from test_kernels import synthetic_step

from conftest import REPO

BLOCK, FLY = VERIFY_METHODS.index("block"), VERIFY_METHODS.index("fly")


def method_step(seed: int, vocab: int, dtype=torch.float32, draft: bool = False, codes=(0, 1, 2), fp64=False,
                r: int = 6, max_k: int = 4, filters: bool = True):
    """A SYNTHETIC step (tests/test_kernels.synthetic_step: greedy and stochastic requests mixed, placeholders,
    top-k / top-p / min-p rows) whose requests take the verify methods ``codes`` in turn; FLy requests get windows
    1-2, entropy thresholds from 0 (every deferrable rejection deferred) to 1e9 (none) and top-k from 1 to above V."""
    step = synthetic_step(seed, vocab, r, max_k, dtype=dtype, draft_logits=draft, filters=filters,
                          placeholders=True, greedy_frac=0.3)
    g = torch.Generator().manual_seed(seed + 99)
    fields = dict(verify_method=torch.tensor([codes[i % len(codes)] for i in range(r)], dtype=torch.int8),
                  rng_contract="mrv2-fp64" if fp64 else "mrv2")
    if FLY in codes:
        fields.update(fly_window=torch.randint(1, 3, (r,), generator=g, dtype=torch.int32),
                      fly_entropy_threshold=torch.tensor([0.0, 0.5, 2.0, 1e9])[torch.randint(0, 4, (r,), generator=g)],
                      fly_entropy_top_k=torch.tensor([1, 5, 50, vocab + 10], dtype=torch.int32)[
                          torch.randint(0, 4, (r,), generator=g)])
    return dataclasses.replace(step, **fields)


def assert_same(step, got, want, label: str = "") -> None:
    assert torch.equal(got.counts, want.counts), (label, got.counts.tolist(), want.counts.tolist())
    assert torch.equal(got.tokens, want.tokens), (label, got.tokens.tolist(), want.tokens.tolist())
    assert torch.equal(got.routes, want.routes), (label, got.notes)


# (vocab, dtype, draft logits): the irregular shapes, each dtype and draft kind at least twice
SHAPES = [(97, torch.float32, False), (97, torch.bfloat16, True), (211, torch.float32, True),
          (211, torch.bfloat16, False), (1000, torch.float32, False), (1000, torch.bfloat16, True)]


@pytest.mark.parametrize("vocab,dtype,draft", SHAPES)
def test_methods_replay_the_reference_token_for_token(vocab, dtype, draft):
    """Standard, block and FLy requests in one step, under mrv2 and under mrv2-fp64: the reference's tokens,
    counts and routes exactly."""
    for i, (codes, fp64) in enumerate((((0, 1, 2), False), ((1, 2, 0), True), ((2,), False), ((1,), True))):
        step = method_step(100 * vocab + 10 * i + draft, vocab, dtype, draft, codes, fp64)
        assert_same(step, StochasticSampler().sample(step), ReferenceSampler().sample(step), f"{codes} fp64={fp64}")


def test_the_synthetic_steps_exercise_every_method():
    """The steps above have teeth: on them the oracle's block and FLy tokens differ from token-wise verification
    for some request, block accepts more drafts somewhere, FLy defers a rejection somewhere, and the fp64 draws
    differ from the float32 ones somewhere (otherwise a kernel that verified the standard way would pass)."""
    seen = Counter()
    for vocab, dtype, draft in SHAPES:
        for i, (codes, fp64) in enumerate((((0, 1, 2), False), ((1, 2, 0), True), ((2,), False), ((1,), True))):
            step = method_step(100 * vocab + 10 * i + draft, vocab, dtype, draft, codes, fp64)
            rows = apply_sampling_params(step)
            cu, vidx = step.cu_num_logits.tolist(), step.draft_row_index()
            for r in range(step.num_requests):
                a, b = cu[r], cu[r + 1]
                args = (rows[a:b], step.draft_token_ids[a:b - 1].tolist(), step.positions[a:b].tolist(),
                        float(step.temperature[r]), int(step.seed[r]),
                        step.draft_logits[vidx[a:b - 1]] if step.draft_logits is not None and b - a > 1 else None)
                method = method_of(step, r)
                got = verify_with(method, *args)
                plain = verify_with(dataclasses.replace(STANDARD, fp64=method.fp64), *args)
                if got != plain:
                    seen[method.name] += 1
                    seen[f"{method.name} longer"] += len(got) > len(plain)
                if method.fp64 and got != verify_with(dataclasses.replace(method, fp64=False), *args):
                    seen["fp64"] += 1
    assert seen["block"] and seen["block longer"] and seen["fly"] and seen["fly longer"] and seen["fp64"], seen


@pytest.mark.parametrize("name", ["block", "fly", "fp64"])
def test_the_method_fixtures_replay_the_reference(name):
    """The committed recordings of each method (fixtures/real-method-*), token for token."""
    rec = Recording(f"{REPO}/fixtures/real-method-{name}")
    for index in range(len(rec)):
        step = rec[index].step
        assert StochasticSampler().refusal(step) is None
        assert_same(step, StochasticSampler().sample(step), ReferenceSampler().sample(step), f"{name} {index}")


def test_a_step_with_the_pipeline_and_logprobs_verifies_by_its_method():
    """Processors first (pipeline.py), then the methods' launches on their float32 rows, then the logprobs."""
    step = add_pipeline(torch.Generator().manual_seed(3), method_step(7, 211, draft=True, codes=(1, 2)),
                        PIPELINE_RULES)
    got, want = StochasticSampler().sample(step), ReferenceSampler().sample(step)
    assert_same(step, got, want)
    if want.logprobs is not None:
        assert torch.allclose(got.logprobs, want.logprobs, atol=1e-4, equal_nan=True)


def _launched_state(step) -> tuple[MethodState, Counter]:
    sampler = MethodSampler(method_inputs(step))
    state = sampler.prepare(SamplingBatch.of(step))
    with triton_launches() as counts:
        sampler.launch(state)
    return state, counts


def test_block_residual_mass_matches_the_oracle():
    """r_{i+1} = sum_x max(e^{c_i} p_{i+1}(x) - q_{i+1}(x), 0) of every stochastic block request with draft
    logits, from the kernels' span partials, against the oracle's torch sum (relative 1e-5)."""
    step = method_step(5, 1000, torch.float32, True, codes=(1,), filters=True)
    state, _ = _launched_state(step)
    rows = apply_sampling_params(step)
    cu, vidx = step.cu_num_logits.tolist(), step.draft_row_index()
    checked = 0
    for r in range(step.num_requests):
        a, b, t = cu[r], cu[r + 1], float(step.temperature[r])
        drafts = step.draft_token_ids[a:b - 1].tolist()
        end = next((i for i, d in enumerate(drafts) if d < 0), len(drafts))
        if t == 0.0 or end < 2:
            continue
        c = torch.tensor(0.0)
        for i in range(end - 1):
            q_i = step.draft_logits[vidx[a + i]].float() / t
            lp = rows[a + i][drafts[i]] - torch.logsumexp(rows[a + i], 0)
            c = torch.clamp(c + (lp - (q_i[drafts[i]] - torch.logsumexp(q_i, 0))), max=0.0)
            q = torch.softmax(step.draft_logits[vidx[a + i + 1]].float() / t, 0)
            want = float(torch.clamp(torch.exp(c) * torch.softmax(rows[a + i + 1], 0) - q, min=0.0).sum())
            nb = state.num_blocks
            got = float(state.mass[r, i * nb:(i + 1) * nb].sum())
            assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-7), (r, i, got, want)
            checked += 1
    assert checked >= 3


def test_fly_entropy_of_listed_rows_matches_the_oracle():
    """The rows listed for FLy's entropy are exactly the deferrable token-wise rejections of FLy requests with
    i + W < k, and each one's top-k entropy (kernels: the sum above the top-k value plus its ties) equals
    ``oracle.methods.fly_entropy`` on the processed row (relative 1e-5), for top-k 1, 5, 50 and above V."""
    checked = Counter()
    for seed in (11, 12):
        step = method_step(seed, 211, torch.float32, seed == 12, codes=(2,), filters=True, r=8, max_k=3)
        g = torch.Generator().manual_seed(seed)
        drafts = torch.where(step.draft_token_ids >= 0, torch.randint(0, 211, step.draft_token_ids.shape, generator=g,
                                                                      dtype=torch.int32), step.draft_token_ids)
        step = dataclasses.replace(step, draft_token_ids=drafts, fly_window=torch.ones(8, dtype=torch.int32),
                                   fly_entropy_top_k=torch.tensor([1, 5, 50, 300] * 2, dtype=torch.int32))
        state, _ = _launched_state(step)
        rows = apply_sampling_params(step)
        fl, nb = state.fly, state.num_blocks
        listed = fl["erows"][:int(fl["filters"].count)].tolist()
        need = torch.nonzero(state.rows["need"]).flatten().tolist()
        assert listed == need
        row_req = step.row_to_request().tolist()
        for f, row in enumerate(listed):
            r = row_req[row]
            k = int(state.fly_k[r])
            lse = float(state.rows["lse_t"][row])
            v = float(fl["ev"][row])
            pv = math.exp(v - lse)
            n_gt, n_eq = int(fl["egt"][f].sum()), int(fl["eeq"][f].sum())
            got = -(float(fl["epart"][f].sum()) + min(k - n_gt, n_eq) * (pv * (v - lse) if pv > 0 else 0.0))
            want = fly_entropy(rows[row], int(step.fly_entropy_top_k[r]))
            assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6), (row, k, got, want)
            checked[min(k, 51)] += 1
    assert len(checked) >= 3, checked


def test_a_standard_step_launches_what_it_did():
    """No method field (or every request standard) under mrv2: the standard state and exactly the standard
    launches (no kernel of the methods); a method step runs the methods' launches and no position launch, and its
    fp64 twin swaps only the draw for the float64 one."""
    plain = synthetic_step(41, 211, 4, 2, filters=False, greedy_frac=0.0, ks=[2, 1, 2, 0])
    impl, kernel = StochasticSampler(), stochastic.StochasticSampler()
    ref_state = kernel.prepare(SamplingBatch.of(plain))
    with triton_launches() as want:
        kernel.launch(ref_state)
    for step in (plain, dataclasses.replace(plain, verify_method=torch.zeros(4, dtype=torch.int8))):
        state = impl.prepare(step)
        assert isinstance(state, stochastic.VerifyState)
        with triton_launches() as got:
            impl.launch(state)
        assert got == want
    block = dataclasses.replace(plain, verify_method=torch.tensor([1, 0, 1, 0], dtype=torch.int8),
                                draft_logits=torch.randn(int(plain.num_drafts.sum()), 211))
    _, counts = _launched_state(block)
    assert counts == Counter({"_row_stats_kernel": 1, "_row_scalars_kernel": 1, "_block_mass_kernel": 1,
                              "_walk_kernel": 1, "_draw_kernel": 1})
    _, counts64 = _launched_state(dataclasses.replace(block, rng_contract="mrv2-fp64"))
    assert counts64 == counts - Counter({"_draw_kernel": 1}) + Counter({"_draw64_kernel": 1})


def test_methods_the_kernels_do_not_implement_are_refused_by_name(monkeypatch):
    """An allow-list: a method the kernels do not implement (draft trees, code 3) is refused by name, never
    verified another way; the plain samplers refuse block and mrv2-fp64 by name."""
    monkeypatch.setattr(kernel_impls, "VERIFY_METHODS", ("standard", "block", "fly", "tree"))
    step = method_step(3, 97, codes=(0, 3))
    got = StochasticSampler().sample(step)
    assert (got.routes == ROUTE_CODE["refused"]).all() and (got.counts == 0).all()
    assert "verify_method tree" in got.notes[0]
    assert methods.METHODS == VERIFY_METHODS[:len(methods.METHODS)]  # the kernels' codes are the schema's
    for step, words in ((method_step(3, 97, codes=(1,)), "verify_method block"),
                        (method_step(3, 97, codes=(0,), fp64=True), "RNG contract mrv2-fp64")):
        why = GumbelMaxSampler().refusal(step)
        assert why is not None and words in why


@pytest.mark.parametrize("fp64", [False, True])
def test_a_prepared_state_launches_again_to_the_same_tokens(fp64):
    """prepare once, launch twice with the outputs, plans and per-row scalars overwritten in between: every
    launch rewrites what it reads (the lists, counters and partials are reset by the launches themselves)."""
    step = method_step(21, 211, torch.bfloat16, True, codes=(1, 2, 0), fp64=fp64)
    sampler = MethodSampler(method_inputs(step))
    state = sampler.prepare(SamplingBatch.of(step))
    first = [t.clone() for t in sampler.launch(state)]
    verify_rows = step.draft_row_index() >= 0  # what the scalars kernel writes (the bonus rows' stay zero)
    for t in (state.tokens, *state.plan.values()):
        t.fill_(7)
    for t in state.rows.values():
        t[verify_rows] = 7
    again = sampler.launch(state)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    want = ReferenceSampler().sample(step)
    assert torch.equal(first[0], want.tokens) and torch.equal(first[1], want.counts)
