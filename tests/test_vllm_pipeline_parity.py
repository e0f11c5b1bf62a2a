"""``vllm-mrv2`` (vLLM 0.33 Model Runner V2's own logits processors, sampler and logprobs; impls/vllm_pipeline.py)
against ``reference`` token for token, on SYNTHETIC steps with the sampling pipeline's rules
(``recording.synthetic.add_pipeline``).

Runs when the peer files are present (``../shared/peers/prepare.sh`` makes .peers/; docs/TESTING.md) and is skipped
otherwise (CI has no .peers). On the CPU vLLM's Triton kernels run under TRITON_INTERPRET=1, so vocabularies stay
small. A token that differs must be a floating-point near-tie of the decision, and rare; logprobs, top-n ids and
ranks are compared by the project's rule (compare/logprobs.py). The grammar stand-in (the kit has no
structured_outputs.py) is checked against the oracle's mask without the peer.
"""
import dataclasses
import os

import pytest
import torch

from conftest import PEERS
from replay_harness.compare.logprobs import OutputCounts, compare_outputs
from replay_harness.errors import EnvironmentProblem
from replay_harness.impls import get_impl
from replay_harness.impls.vllm_pipeline import apply_grammar_bits, engine_state
from replay_harness.oracle.near_tie import is_near_tie
from replay_harness.oracle.processors import grammar_allowed
from replay_harness.recording.step import Step
from replay_harness.recording.synthetic import PIPELINE_RULES, Case, add_pipeline, random_step

peers = pytest.mark.peers


@pytest.fixture(scope="module")
def peer():
    if not os.path.isdir(os.path.join(PEERS, "vllm_mrv2")):
        pytest.skip("vLLM MRV2 peer files not prepared (.peers/vllm_mrv2); see docs/TESTING.md")
    try:
        return get_impl("vllm-mrv2")
    except EnvironmentProblem as e:
        pytest.skip(str(e))


def agree(peer, step: Step, label: str) -> tuple[int, int, int]:
    """(requests, near-ties, logprob slots compared) of vllm-mrv2 against the reference on ``step``; asserts every
    other token difference and every logprob / top-n / rank difference away."""
    ours, theirs = get_impl("reference").sample(step), peer.sample(step)
    ties, counts = 0, OutputCounts()
    for r in range(step.num_requests):
        a, b = ours.tokens[r], theirs.tokens[r]
        same = int(ours.counts[r]) if torch.equal(a, b) else int(torch.nonzero(a != b)[0])
        if not torch.equal(a, b):
            near, margin = is_near_tie(step, r, same)
            assert near, f"{label} request {r} pos {same}: reference {a.tolist()} vLLM {b.tolist()} " \
                         f"(margin {margin:.3g})"
            ties += 1
        else:
            assert int(ours.counts[r]) == int(theirs.counts[r]), f"{label} request {r}: counts differ"
        diffs = compare_outputs(0, step, theirs, ours, r, same, 0, counts)
        assert not diffs, f"{label}: {diffs[0]}"
    assert counts.logprobs_missing == 0, f"{label}: a side returned no logprobs"
    return step.num_requests, ties, counts.logprob_slots


CASES = [
    Case("v97-mixed", vocab_size=97, num_requests=6, temperatures=(0.0, 0.7, 1.0),
         features=frozenset({"ragged", "placeholders", "ties"})),
    Case("v257-bf16-draft", vocab_size=257, num_requests=5, max_drafts=3, temperatures=(0.0, 0.9, 1.0),
         dtype=torch.bfloat16, features=frozenset({"draft-logits", "peaked"})),
    Case("v211-filters", vocab_size=211, num_requests=6, temperatures=(0.0, 0.6, 1.3),
         features=frozenset({"top-k", "top-p", "min-p", "ragged"})),
    Case("v300-plain", vocab_size=300, num_requests=8, temperatures=(0.0, 0.8, 1.0), features=frozenset({"all-k0"})),
]


@peers
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vllm_pipeline_matches_reference_with_every_rule(peer, case):
    gen = torch.Generator().manual_seed(64)
    total = ties = slots = 0
    for i in range(3):
        step = add_pipeline(gen, random_step(gen, case, i))
        n, t, s = agree(peer, step, f"{case.name} step {i}")
        total, ties, slots = total + n, ties + t, slots + s
    assert slots > 0, "no logprob slot was compared"
    assert ties <= max(1, total // 20), f"{ties} near-ties in {total} requests"


RULE_CASE = Case("v61-rules", vocab_size=61, num_requests=8, temperatures=(0.0, 1.0, 0.8),
                 features=frozenset({"ragged"}))


@peers
@pytest.mark.parametrize("rule", [r for r in PIPELINE_RULES if r != "logprobs"])
def test_each_rule_changes_tokens_and_vllm_applies_it(peer, rule):
    """One rule at a time: it must change the reference's tokens on these steps (else the check could not see a
    peer that skips it), and vllm-mrv2 must give the reference's tokens with it."""
    gen = torch.Generator().manual_seed(7)
    changed = 0
    for i in range(3):
        plain = random_step(gen, RULE_CASE, i)
        step = add_pipeline(gen, plain, (rule,))
        ref_plain, ref_rule = get_impl("reference").sample(plain), get_impl("reference").sample(step)
        changed += int((ref_plain.tokens != ref_rule.tokens).any(dim=1).sum())
        agree(peer, step, f"{rule} step {i}")
    assert changed, f"the {rule} rule changed no token of the reference: the test cannot tell it applied"


@peers
@pytest.mark.parametrize("mode", [0, 1, 2, 3], ids=["raw_logprobs", "processed_logprobs", "raw_logits",
                                                    "processed_logits"])
def test_one_logprobs_mode_for_the_whole_batch(peer, mode):
    """vLLM's mode is engine-wide: every request in one mode (one compute_topk_scores call over all rows, request
    1 asking nothing), with the rules on so raw and processed values differ."""
    case = Case("v150", vocab_size=150, num_requests=5, temperatures=(0.0, 0.7, 1.0),
                features=frozenset({"ragged", "top-k"}))
    gen = torch.Generator().manual_seed(mode)
    step = add_pipeline(gen, random_step(gen, case))
    step = dataclasses.replace(step, logprobs=torch.tensor([2, -1, 4, 0, 3], dtype=torch.int32),
                               logprobs_mode=torch.full((5,), mode, dtype=torch.int8))
    _, _, slots = agree(peer, step, f"mode {mode}")
    assert slots >= step.num_requests - 1
    if mode in (1, 3):  # processed values see the rules: at least one differs from the raw one
        raw = get_impl("reference").sample(dataclasses.replace(step, logprobs_mode=torch.full((5,), mode - 1,
                                                                                            dtype=torch.int8)))
        theirs = peer.sample(step)
        assert not torch.equal(raw.logprobs, theirs.logprobs)


@peers
def test_min_tokens_gives_a_grammar_row_its_stop_ids_back_when_nothing_else_is_left(peer):
    """Rows whose grammar allows only stop ids while min-tokens bans them: vLLM restores the stop ids' logits
    for grammar requests (its CHECK_ALL_MASKED_ROWS pass), so they are drawn, not token 0 of an all -inf row;
    a request without a grammar keeps the ban (its row has other tokens)."""
    from replay_harness.oracle.logprobs import pack_bits

    case = Case("v90", vocab_size=90, num_requests=4, temperatures=(0.0, 1.0), features=frozenset({"ragged"}))
    gen = torch.Generator().manual_seed(9)
    step = random_step(gen, case)
    r, n = step.num_requests, step.logits.shape[0]
    stops = [[40, 71]] * r
    allowed = torch.zeros(n, 90, dtype=torch.bool)
    allowed[:, [40, 71]] = True
    flat = lambda lists: (torch.tensor([t for x in lists for t in x], dtype=torch.int32),  # noqa: E731
                          torch.tensor([0] + [sum(len(x) for x in lists[:i + 1]) for i in range(r)], dtype=torch.int32))
    step = dataclasses.replace(
        step, output_token_ids=flat([[3]] * r)[0], cu_output_token_ids=flat([[3]] * r)[1],
        min_tokens=torch.full((r,), 9, dtype=torch.int32), stop_token_ids=flat(stops)[0],
        cu_stop_token_ids=flat(stops)[1], grammar_bitmask=pack_bits(allowed),
        has_grammar=torch.tensor([1, 1, 0, 1][:r], dtype=torch.int8))
    agree(peer, step, "restore")
    theirs = peer.sample(step)
    emitted = [t for q in (0, 1, 3) for t in theirs.tokens[q, :int(theirs.counts[q])].tolist()]
    assert emitted and set(emitted) <= {40, 71}
    assert not set(theirs.tokens[2, :int(theirs.counts[2])].tolist()) & {40, 71}


@peers
def test_engine_state_is_the_histories_in_vllms_layout(peer):
    """input_ids (MRV2's: the last committed token, then row l holds the draft verified at row l - 1), the
    prompt bit mask and output counts of vLLM's bincount, the model position of the min-tokens rule."""
    gen = torch.Generator().manual_seed(3)
    case = Case("v77", vocab_size=77, num_requests=4, max_drafts=3, features=frozenset({"no-k0"}))
    step = add_pipeline(gen, random_step(gen, case))
    from replay_harness.impls.peers import vllm_layout

    st = engine_state(step, step, vllm_layout(step))
    cu = step.cu_num_logits.tolist()
    for r in range(step.num_requests):
        out = step.output_token_ids[step.cu_output_token_ids[r]:step.cu_output_token_ids[r + 1]]
        prompt = step.prompt_token_ids[step.cu_prompt_token_ids[r]:step.cu_prompt_token_ids[r + 1]]
        assert int(st.input_ids[cu[r]]) == int(out[-1])
        assert torch.equal(st.input_ids[cu[r] + 1:cu[r + 1]], step.draft_token_ids[cu[r]:cu[r + 1] - 1])
        _, _, _, bins, counts = st.penalties
        if r > 0:  # request 0 has the penalties off: vLLM bins only the requests that use them
            assert torch.equal(grammar_allowed(bins[r:r + 1], 77)[0],
                               torch.zeros(77, dtype=torch.bool).index_fill_(0, prompt.long(), True))
            assert torch.equal(counts[r], torch.bincount(out.long(), minlength=77).to(torch.int32))
        pos = st.bias[0][cu[r]:cu[r + 1]]
        assert pos.tolist() == [prompt.numel() + out.numel() - 1 + l for l in range(cu[r + 1] - cu[r])]


@pytest.mark.parametrize("all_rows", [False, True], ids=["some-rows", "all-rows"])
def test_grammar_stand_in_masks_as_the_oracle(all_rows):
    """The peer's own grammar code (vLLM's structured_outputs.py kernel is not in the kit): -inf exactly where
    the oracle's unpacking clears a bit, bit 31 (negative words) and a V that is not a multiple of 32 included;
    rows outside ``rows`` untouched."""
    gen = torch.Generator().manual_seed(5)
    n, v = 6, 75
    words = torch.randint(-2**31, 2**31 - 1, (n, 3), generator=gen, dtype=torch.int64).to(torch.int32)
    words[0, 0] = -2**31  # only bit 31: token 31 allowed in the first word
    logits = torch.randn(n, v, generator=gen).to(torch.bfloat16)
    rows = torch.arange(n) if all_rows else torch.tensor([0, 2, 5])
    got = logits.clone()
    apply_grammar_bits(got, rows, words[rows].contiguous())
    want = logits.clone()
    want[rows] = want[rows].masked_fill(~grammar_allowed(words[rows], v), float("-inf"))
    assert torch.equal(got, want)
    assert bool(torch.isneginf(got).any()) and torch.isfinite(got[0, 31])
