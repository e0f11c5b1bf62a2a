"""The oracle's logits processors, each rule against values worked out by hand from vLLM 0.33 MRV2's semantics
(docs/FIXTURES.md "The sampling pipeline"): what a plausible mistake (dividing instead of multiplying by the
reciprocal, penalising before the bias, not counting drafts, matching bad words against the prompt) would change."""
import dataclasses

import torch

from replay_harness.oracle.processors import apply_grammar, apply_processors, row_outputs
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.step import Step

V = 8
NEG = float("-inf")


def step_of(rows: list[list[float]], k: int = 0, drafts: list[int] | None = None, temperature: float = 1.0,
            **fields) -> Step:
    """One request with ``k`` drafts (``rows`` = its k + 1 logits rows, V = 8), plus pipeline ``fields``."""
    n = len(rows)
    assert n == k + 1
    d = (drafts or []) + [-1]
    return Step(logits=torch.tensor(rows, dtype=torch.float32), cu_num_logits=torch.tensor([0, n], dtype=torch.int32),
                draft_token_ids=torch.tensor(d, dtype=torch.int32), positions=torch.arange(10, 10 + n),
                temperature=torch.tensor([temperature]), top_k=torch.zeros(1, dtype=torch.int32),
                top_p=torch.ones(1), min_p=torch.zeros(1), seed=torch.tensor([7]),
                request_ids=torch.tensor([1]), **fields)


def ragged(name: str, values: list, dtype=torch.int32) -> dict:
    return {name: torch.tensor(values, dtype=dtype), "cu_" + name: torch.tensor([0, len(values)], dtype=torch.int32)}


def processed(step: Step) -> torch.Tensor:
    x = step.logits.float().clone()
    apply_grammar(x, step)
    apply_processors(x, step)
    return x


ROW = [2.0, -1.0, 0.5, 3.0, -2.0, 1.0, 0.0, -0.5]


def test_repetition_multiplies_by_the_reciprocal_for_positive_logits_and_by_the_penalty_otherwise():
    s = step_of([ROW], repetition_penalty=torch.tensor([1.7]), **ragged("prompt_token_ids", [0, 1]),
                **ragged("output_token_ids", [3]))
    x = processed(s)[0]
    inv = torch.tensor(1.0) / torch.tensor(1.7)  # float32 reciprocal, then a multiply (not a division)
    assert x[0] == torch.tensor(2.0) * inv and x[3] == torch.tensor(3.0) * inv
    assert x[1] == torch.tensor(-1.0) * torch.tensor(1.7)
    assert torch.equal(x[[2, 4, 5, 6, 7]], torch.tensor(ROW)[[2, 4, 5, 6, 7]])  # unseen tokens untouched


def test_frequency_and_presence_count_the_output_and_the_drafts_before_each_row():
    rows = [ROW, ROW, ROW]
    s = step_of(rows, k=2, drafts=[5, 5], frequency_penalty=torch.tensor([0.5]), presence_penalty=torch.tensor([1.0]),
                **ragged("output_token_ids", [5, 2, 5]))
    assert row_outputs(s, 0) == [[5, 2, 5], [5, 2, 5, 5], [5, 2, 5, 5, 5]]
    x = processed(s)
    for row, count5 in enumerate((2, 3, 4)):  # the draft at row 0 counts from row 1 on, not at row 0
        assert x[row, 5] == torch.tensor(1.0) - torch.tensor(0.5) * count5 - 1.0
        assert x[row, 2] == torch.tensor(0.5) - 0.5 - 1.0
        assert x[row, 3] == 3.0


def test_bias_comes_before_the_repetition_penalty():
    s = step_of([ROW], repetition_penalty=torch.tensor([2.0]), **ragged("prompt_token_ids", [1]),
                **ragged("output_token_ids", []), logit_bias_ids=torch.tensor([1], dtype=torch.int32),
                logit_bias_values=torch.tensor([3.0]), cu_logit_bias=torch.tensor([0, 1], dtype=torch.int32))
    # -1 + 3 = 2 > 0, then halved: 1.0 (penalising first would give -1 * 2 + 3 = 1.0 too, so bias 3.5: 1.25 vs 1.5)
    s = dataclasses.replace(s, logit_bias_values=torch.tensor([3.5]))
    assert processed(s)[0, 1] == torch.tensor(2.5) * (torch.tensor(1.0) / torch.tensor(2.0))


def test_allowed_ids_keep_their_values_and_mask_the_rest():
    s = step_of([ROW], **ragged("allowed_token_ids", [6, 2]))
    x = processed(s)[0]
    assert x[2] == 0.5 and x[6] == 0.0 and bool(torch.isneginf(x[[0, 1, 3, 4, 5, 7]]).all())


def test_bad_word_matches_the_tail_of_the_output_including_drafts_never_the_prompt():
    words = {"bad_words_token_ids": torch.tensor([4, 3, 7], dtype=torch.int32),
             "cu_bad_words_token_ids": torch.tensor([0, 3], dtype=torch.int32),
             "bad_words_lengths": torch.tensor([2, 1], dtype=torch.int32),
             "cu_bad_words_lengths": torch.tensor([0, 2], dtype=torch.int32)}  # words [4, 3] and [7]
    s = step_of([ROW, ROW], k=1, drafts=[4], **words, **ragged("output_token_ids", [1]),
                **ragged("prompt_token_ids", [4]))
    x = processed(s)
    assert x[0, 3] == 3.0 and torch.isneginf(x[1, 3])  # [4, 3]: the draft 4 completes the prefix for row 1 only
    assert torch.isneginf(x[:, 7]).all()  # a one-token word is always banned


def test_min_tokens_suppresses_stops_while_the_row_output_is_short_and_restores_for_a_grammar_row():
    base = dict(min_tokens=torch.tensor([3], dtype=torch.int32), **ragged("stop_token_ids", [3]),
                **ragged("output_token_ids", [1, 2]))
    x = processed(step_of([ROW, ROW], k=1, drafts=[0], **base))
    assert torch.isneginf(x[0, 3]) and x[1, 3] == 3.0  # row 1's output holds 2 + the draft = 3 tokens
    only_stop = torch.tensor([[1 << 3]], dtype=torch.int32)  # the grammar allows token 3 alone
    g = step_of([ROW], **base, grammar_bitmask=only_stop, has_grammar=torch.tensor([1], dtype=torch.int8))
    x = processed(g)[0]
    assert x[3] == 3.0 and torch.isneginf(x[[0, 1, 2, 4, 5, 6, 7]]).all()  # restored: else nothing is allowed
    no_grammar = step_of([ROW], **base, **ragged("allowed_token_ids", [3]))
    assert torch.isneginf(processed(no_grammar)[0]).all()  # no grammar: no restore (vLLM #53728's case)


def test_grammar_bits_and_greedy_rows_take_processors_but_not_temperature():
    mask = torch.tensor([[0b10100101]], dtype=torch.int32)  # tokens 0, 2, 5, 7 allowed
    s = step_of([ROW], temperature=0.0, grammar_bitmask=mask, has_grammar=torch.tensor([1], dtype=torch.int8),
                presence_penalty=torch.tensor([5.0]), **ragged("output_token_ids", [0]))
    x = apply_sampling_params(s)[0]
    assert torch.isneginf(x[[1, 3, 4, 6]]).all()
    assert x[0] == 2.0 - 5.0 and x[2] == 0.5 and x[5] == 1.0 and x[7] == -0.5
