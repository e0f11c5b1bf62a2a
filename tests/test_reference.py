"""The torch reference: MRV2 semantics on hand-made and SYNTHETIC steps."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

from replay_harness.impls.engine_bug import GreedyOnlySampler, GuardedSampler
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.sampling_params import apply_sampling_params, top_k_top_p_sorted
from replay_harness.recording.step import ROUTE_CODE, Step
from replay_harness.recording.synthetic import Case, random_step

REF = ReferenceSampler()


def make_step(rows, drafts, temps, *, seeds=None, positions=None, top_k=None, top_p=None, min_p=None,
              draft_logits=None):
    """rows: list per request of [k+1, V] logits; drafts: list per request of k ids."""
    logits = torch.cat([torch.as_tensor(r, dtype=torch.float32) for r in rows])
    sizes = [len(r) for r in rows]
    cu = torch.tensor([0] + list(np.cumsum(sizes)), dtype=torch.int32)
    ids = torch.cat([torch.tensor(list(d) + [-1], dtype=torch.int32) for d in drafts])
    r = len(rows)
    return Step(logits=logits, cu_num_logits=cu, draft_token_ids=ids,
                positions=torch.tensor(positions or list(range(100, 100 + len(ids))), dtype=torch.int64),
                temperature=torch.tensor(temps, dtype=torch.float32),
                top_k=torch.tensor(top_k or [0] * r, dtype=torch.int32),
                top_p=torch.tensor(top_p or [1.0] * r, dtype=torch.float32),
                min_p=torch.tensor(min_p or [0.0] * r, dtype=torch.float32),
                seed=torch.tensor(seeds or [11 * (i + 1) for i in range(r)], dtype=torch.int64),
                request_ids=torch.arange(r, dtype=torch.int64), draft_logits=draft_logits)


def spike(v, hot, value=10.0):
    row = torch.full((v,), -10.0)
    row[hot] = value
    return row


def test_greedy_verify_perfect_match_and_bonus():
    rows = [torch.stack([spike(8, 1), spike(8, 2), spike(8, 3), spike(8, 4)])]
    res = REF.sample(make_step(rows, [[1, 2, 3]], [0.0]))
    assert res.tokens.tolist() == [[1, 2, 3, 4]] and res.counts.tolist() == [4]
    assert res.routes.tolist() == [ROUTE_CODE["greedy-verify"]]


def test_greedy_verify_early_mismatch_writes_argmax_then_stops():
    rows = [torch.stack([spike(8, 1), spike(8, 5), spike(8, 3), spike(8, 4)])]
    res = REF.sample(make_step(rows, [[1, 2, 3]], [0.0]))
    assert res.tokens.tolist() == [[1, 5, -1, -1]] and res.counts.tolist() == [2]


def test_greedy_placeholder_is_rejected_and_ties_take_first_index():
    row = torch.zeros(8)
    row[3] = row[6] = 5.0  # exact tie: first index wins
    rows = [torch.stack([row, spike(8, 2)])]
    res = REF.sample(make_step(rows, [[-1]], [0.0]))
    assert res.tokens.tolist() == [[3, -1]]


def test_ragged_batch_and_k0():
    rows = [torch.stack([spike(8, 1), spike(8, 2), spike(8, 5)]), spike(8, 7)[None], torch.stack([spike(8, 0), spike(8, 6)])]
    res = REF.sample(make_step(rows, [[1, 2], [], [0]], [0.0, 0.0, 0.0]))
    assert res.tokens.tolist() == [[1, 2, 5], [7, -1, -1], [0, 6, -1]]
    assert [r for r in res.route_names()] == ["greedy-verify", "greedy-sample", "greedy-verify"]


def test_stochastic_one_hot_target_always_accepts():
    """p(draft) = 1: log p = 0 > log u for every u in (0, 1) — the u = 0 bug would also pass, so see next test."""
    rows = [torch.stack([spike(16, 3, 60.0), spike(16, 4, 60.0), spike(16, 9, 60.0)])]
    for seed in range(20):
        res = REF.sample(make_step(rows, [[3, 4]], [1.0], seeds=[seed]))
        assert res.tokens.tolist() == [[3, 4, 9]]


def test_stochastic_rejects_improbable_draft_and_never_emits_it():
    """p(draft) ~ 1e-4: accepted ~1e-4 of the time; a fixed u = 0 (vllm-ascend#13730) would always accept."""
    rows = [torch.stack([spike(16, 3, 0.0) * 0 + torch.tensor([0.0] * 15 + [-9.2]), torch.zeros(16)])]
    accepted = 0
    for seed in range(200):
        res = REF.sample(make_step(rows, [[15]], [1.0], seeds=[seed]))
        accepted += int(res.tokens[0, 0] == 15)
    assert accepted <= 2


def test_top_k_1_is_argmax_and_top_p_tiny_keeps_max():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=gen)
    masked = top_k_top_p_sorted(logits, torch.full((6,), 1), torch.ones(6))
    assert torch.equal(masked.argmax(1), logits.argmax(1)) and bool((torch.isfinite(masked).sum(1) == 1).all())
    masked = top_k_top_p_sorted(logits, torch.full((6,), 50), torch.full((6,), 1e-6))
    assert bool((torch.isfinite(masked).sum(1) == 1).all())


def test_top_k_keeps_ties_at_the_boundary():
    logits = torch.tensor([[1.0, 3.0, 2.0, 2.0, 0.0]])
    masked = top_k_top_p_sorted(logits, torch.tensor([2]), torch.ones(1))
    assert torch.isfinite(masked).tolist() == [[False, True, True, True, False]]


def test_sampling_params_order_and_untouched_rows():
    gen = torch.Generator().manual_seed(1)
    case = Case("p", vocab_size=300, num_requests=8, temperatures=(0.0, 1.0, 0.5),
                features=frozenset({"top-k", "top-p", "min-p"}))
    step = random_step(gen, case)
    out = apply_sampling_params(step)
    rows = step.row_to_request()
    for j in range(out.shape[0]):
        r = int(rows[j])
        t = float(step.temperature[r])
        if t == 0.0:
            assert torch.equal(out[j], step.logits[j])  # greedy rows untouched
            continue
        x = step.logits[j].float() / t if t != 1.0 else step.logits[j].float()
        if float(step.min_p[r]) > 0:
            x = x.masked_fill(x < x.max() + math.log(float(step.min_p[r])), float("-inf"))
        k = int(step.top_k[r]) or 300
        x = top_k_top_p_sorted(x[None], torch.tensor([k]), step.top_p[r:r + 1])[0]
        assert torch.equal(out[j], x)


def test_sampling_params_in_row_chunks_give_the_same_bits(monkeypatch):
    """apply_sampling_params filters rows in chunks of CHUNK_BYTES (bounded memory on a large step): one row a
    chunk must give exactly what one chunk of every row gives, on steps with temperature, min-p, top-k, top-p,
    greedy and untouched rows."""
    from replay_harness.oracle import sampling_params

    gen = torch.Generator().manual_seed(5)
    case = Case("chunks", vocab_size=257, num_requests=9, max_drafts=3, temperatures=(0.0, 0.7, 1.0, 1.3),
                features=frozenset({"top-k", "top-p", "min-p", "ties", "-inf"}))
    for i in range(4):
        step = random_step(gen, case, i)
        whole = apply_sampling_params(step)
        monkeypatch.setattr(sampling_params, "CHUNK_BYTES", 1)
        rowwise = apply_sampling_params(step)
        monkeypatch.setattr(sampling_params, "CHUNK_BYTES", 64 << 20)
        assert torch.equal(whole.isnan(), rowwise.isnan())
        assert torch.equal(whole.nan_to_num(), rowwise.nan_to_num())


@pytest.mark.parametrize("vocab", [64, 1000])
def test_batch_composition_does_not_change_tokens(vocab):
    """A request replayed alone and inside a batch of 64 gets the same tokens."""
    case = Case("b", vocab_size=vocab, num_requests=64, temperatures=(0.0, 0.8, 1.0),
                features=frozenset({"ragged", "top-p", "draft-logits"}))
    step = random_step(torch.Generator().manual_seed(vocab), case)
    full = REF.sample(step)
    for r in (0, 17, 63):
        alone = REF.sample(step.select([r]))
        assert torch.equal(alone.tokens[0, :int(alone.counts[0])], full.tokens[r, :int(full.counts[r])])
    rev = list(reversed(range(64)))
    shuffled = REF.sample(step.select(rev))
    for i, r in enumerate(rev):
        assert torch.equal(shuffled.tokens[i, :int(shuffled.counts[i])], full.tokens[r, :int(full.counts[r])])


def test_same_inputs_same_tokens_and_seeds_matter():
    case = Case("d", vocab_size=500, num_requests=8, temperatures=(1.0,), features=frozenset({"no-k0"}))
    step = random_step(torch.Generator().manual_seed(5), case)
    a, b = REF.sample(step), REF.sample(step)
    assert torch.equal(a.tokens, b.tokens)
    step.seed = step.seed ^ (1 << 40)  # differs only above bit 32
    c = REF.sample(step)
    assert not torch.equal(a.tokens, c.tokens)


def test_stochastic_verify_samples_the_target_distribution():
    """Chi-squared goodness of fit (vLLM MRV2's test): bins with expected count < 5 merged,
    pass iff chi2 < df + 10 * sqrt(2 df) (about 10 sigma: no false alarms in practice).
    V = 12, one draft from a different draft distribution, 3000 seeds; the first emitted token must
    follow softmax(target / T) whatever the draft."""
    v, n = 12, 3000
    gen = torch.Generator().manual_seed(9)
    target = torch.randn(v, generator=gen) * 1.5
    draft = torch.randn(v, generator=gen) * 1.5
    q = torch.softmax(draft / 0.8, 0)
    counts = torch.zeros(v)
    for seed in range(n):
        d = int(torch.multinomial(q, 1, generator=gen))
        rows = [torch.stack([target, torch.zeros(v)])]
        step = make_step(rows, [[d]], [0.8], seeds=[seed], positions=[seed % 977, seed % 977 + 1],
                         draft_logits=draft[None])
        counts[int(REF.sample(step).tokens[0, 0])] += 1
    expected = torch.softmax(target / 0.8, 0) * n
    keep = expected >= 5
    obs = torch.cat([counts[keep], counts[~keep].sum()[None]]) if bool((~keep).any()) else counts
    exp = torch.cat([expected[keep], expected[~keep].sum()[None]]) if bool((~keep).any()) else expected
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    df = obs.numel() - 1
    assert chi2 < df + 10 * math.sqrt(2 * df), chi2
    assert stats.chi2.sf(chi2, df) > 1e-6


def test_greedy_only_reproduces_the_bug_and_guarded_refuses():
    rows = [torch.stack([torch.zeros(10), torch.zeros(10)]), torch.stack([spike(10, 2), spike(10, 3)])]
    step = make_step(rows, [[4], [2]], [1.0, 0.0])
    bug = GreedyOnlySampler().sample(step)
    assert bug.route_names() == ["greedy-verify", "greedy-verify"]
    assert bug.tokens[0, 0] == 0  # uniform logits: greedy takes id 0, never the draft at T = 1
    fix = GuardedSampler().sample(step)
    assert fix.route_names() == ["refused", "greedy-verify"] and fix.counts.tolist() == [0, 2]
    assert "refused requests 0" in fix.notes[0]


@pytest.mark.parametrize("kind", ["peaked", "flat", "huge", "ties", "inf", "all-neg-inf", "nan", "near-bound"])
def test_pruned_gumbel_draw_equals_the_full_argmax(kind):
    """gumbel_draw gives noise only to tokens that can still win; it must pick exactly the token of the full
    argmax(x + noise) (first on ties, NaN as -inf). A bound off by one noise unit, or a strict/non-strict slip,
    changes the token on the rows built to sit at the bound."""
    from replay_harness.oracle.rng import gumbel_row
    from replay_harness.oracle.walk import NOISE_HIGH, argmax_first, gumbel_draw

    v = 5003
    gen = torch.Generator().manual_seed(7)
    for trial in range(40):
        x = torch.randn(v, generator=gen)
        if kind == "peaked":
            x = x * 3 - 30
            x[torch.randint(0, v, (5,), generator=gen)] = 0.0
        elif kind == "huge":
            x = x * 1e30
        elif kind == "ties":
            x = torch.round(x)
        elif kind == "inf":
            x[[17, 4000]] = float("inf")
        elif kind == "all-neg-inf":
            x[:] = float("-inf")
        elif kind == "nan":
            x[::3] = float("nan")
        elif kind == "near-bound":  # tokens from well inside to just outside the candidate margin
            x = torch.full((v,), -1e4)
            x[100] = 0.0
            x[:50] = -torch.linspace(0.0, NOISE_HIGH + 3.0, 50)
        seed, pos = 1000 + trial, 3 * trial
        full = argmax_first(x + gumbel_row(seed, pos, v))
        assert gumbel_draw(x, seed, pos) == full, (kind, trial)
