"""The Recorder and schema minor 2 (issue 64): every input of the sampling pipeline and the emitted logprobs,
ranks and kept sets, in every form record_step documents (recording/recorder_inputs.py, docs/RECORDING.md "The
Recorder API"), in sync and async mode. The steps are SYNTHETIC (synthetic.random_step + add_pipeline)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from replay_harness.errors import InputError
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.recorder import Recorder
from replay_harness.recording.schema import FIELD, LOGPROBS_MODES, PIPELINE_FIELDS, ROUTES
from replay_harness.recording.store import Recording
from replay_harness.recording.synthetic import Case, add_pipeline, random_step

MODES = ["sync", "async"]
CASE = Case("synthetic-recorder-pipeline", vocab_size=75, num_requests=6, max_drafts=3, temperatures=(0.0, 1.0))
V = CASE.vocab_size  # 75: three bit words, the last one partly used
EMITTED = ("logprobs", "logprob_ids", "logprob_ranks", "kept_mask")
# issue 64's inputs: the pipeline's (histories, penalties, bias, allowed / stop / bad-word lists, min-tokens, grammar,
# logprob requests), every one of which synthetic.add_pipeline sets
ISSUE64 = PIPELINE_FIELDS[:PIPELINE_FIELDS.index("grammar_bitmask") + 1]


def _synthetic_step():
    """A SYNTHETIC step with every pipeline rule on (request 0 of each rule off) and the reference's answer,
    logprobs and kept sets included."""
    gen = torch.Generator().manual_seed(11)
    step = add_pipeline(gen, random_step(gen, CASE))
    return step, ReferenceSampler().sample(step)


def _lists(values: torch.Tensor, cu: torch.Tensor) -> list[list]:
    bounds = cu.tolist()
    return [values[a:b].tolist() for a, b in zip(bounds, bounds[1:])]


def _unpack(words: torch.Tensor) -> torch.Tensor:
    """bool [..., V] from int32 words [..., W] (bit v % 32 of word v // 32)."""
    bits = ((words.long() & 0xFFFFFFFF)[..., None] >> torch.arange(32)) & 1
    return bits.reshape(*words.shape[:-1], -1)[..., :V].bool()


def _record(path, mode, calls):
    with Recorder(path, V, mode=mode, synthetic=True) as rec:
        for kwargs in calls:
            rec.record_step(**kwargs)
    return Recording(path)


def _base(step, result) -> dict:
    return dict(logits=step.logits, cu_num_logits=step.cu_num_logits, draft_token_ids=step.draft_token_ids,
                positions=step.positions, temperature=step.temperature, top_k=step.top_k, top_p=step.top_p,
                min_p=step.min_p, seed=step.seed, request_ids=step.request_ids)


@pytest.mark.parametrize("mode", MODES)
def test_record_sample_keeps_every_pipeline_field_and_the_emitted_logprobs(tmp_path, mode):
    step, result = _synthetic_step()
    assert result.logprobs is not None and all(getattr(step, n) is not None for n in ISSUE64)
    assert len(ISSUE64) == 23
    with Recorder(tmp_path / "rec", V, mode=mode, synthetic=True) as rec:
        rec.record_sample(step, result)
    back = Recording(tmp_path / "rec")[0]
    for name in ISSUE64:
        got = getattr(back.step, name)
        assert got is not None and got.dtype == FIELD[name].dtype, name
        assert torch.equal(got, getattr(step, name).to(got.dtype)), name
    for name in EMITTED:
        assert torch.equal(getattr(back.emitted, name), getattr(result, name)), name
    # the pipeline reached the file: the reference answers the read step as it answered the original, and the
    # same step without its pipeline would have been answered differently (so the check above has teeth)
    again = ReferenceSampler().sample(back.step)
    assert torch.equal(again.tokens, result.tokens) and torch.equal(again.logprob_ids, result.logprob_ids)
    bare = ReferenceSampler().sample(dataclasses.replace(back.step, **{n: None for n in ISSUE64}))
    assert not torch.equal(bare.tokens, result.tokens)


def _as_tensors(step, result) -> dict:
    """record_step's arguments in the fixture's own layout: tensors, values + cu_*, [R, K+1, L]."""
    return {**_base(step, result), **{n: getattr(step, n) for n in ISSUE64},
            "emitted_tokens": result.tokens, "emitted_counts": result.counts, "emitted_routes": result.routes,
            **{f"emitted_{n}": getattr(result, n) for n in EMITTED}}


def _per_row(step, result, gen: torch.Generator) -> dict:
    """The emitted logprobs as vLLM returns them: one row per logits row [N, L+2] (the batch's widest columns and
    two more), int64 ids and ranks, a bool kept mask over V; garbage wherever no emitted slot and asked-for
    column is (rows past a count, columns past a request's n, requests that asked for none)."""
    n_rows, width = step.logits.shape[0], result.logprobs.shape[2]
    values = torch.randn(n_rows, width + 2, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, V, (n_rows, width + 2), generator=gen)
    ranks = torch.randint(1, V, (n_rows,), generator=gen)
    kept = torch.rand(n_rows, V, generator=gen) < 0.5
    cu, asked = step.cu_num_logits.tolist(), step.logprobs.tolist()
    for r in range(step.num_requests):
        for i in range(int(result.counts[r])):
            row, n = cu[r] + i, asked[r]
            kept[row] = _unpack(result.kept_mask[r, i])
            if n >= 0:
                values[row, :n + 1] = result.logprobs[r, i, :n + 1].double()
                ids[row, :n + 1] = result.logprob_ids[r, i, :n + 1].long()
                ranks[row] = int(result.logprob_ranks[r, i])
    return dict(emitted_logprobs=values, emitted_logprob_ids=ids, emitted_logprob_ranks=ranks, emitted_kept_mask=kept)


@pytest.mark.parametrize("mode", MODES)
def test_per_request_lists_and_engine_layouts_give_the_very_step_file_of_values_and_cu(tmp_path, mode):
    """The same step given once as the fixture's own tensors (values + cu_*, [R, K+1, L]) and once in the forms
    an engine holds: R lists (of lists, arrays, tensors, None), bad words as lists of words, logit bias as dicts,
    the grammar as a bool mask, mode names, None for no logprobs, per-row logprobs with garbage around them."""
    step, result = _synthetic_step()
    as_tensors = _as_tensors(step, result)
    words_cu, lengths = step.cu_bad_words_lengths.tolist(), step.bad_words_lengths.tolist()
    tokens = _lists(step.bad_words_token_ids, step.cu_bad_words_token_ids)
    bad_words = []
    for r, toks in enumerate(tokens):
        at, mine = 0, []
        for length in lengths[words_cu[r]:words_cu[r + 1]]:
            mine.append(toks[at:at + length])
            at += length
        bad_words.append(mine)
    bias_ids = _lists(step.logit_bias_ids, step.cu_logit_bias)
    bias_values = _lists(step.logit_bias_values, step.cu_logit_bias)
    counts = result.counts.tolist()
    as_lists = {
        **_base(step, result),
        "repetition_penalty": step.repetition_penalty.double().numpy(),   # float64: narrowed
        "frequency_penalty": step.frequency_penalty.tolist(),
        "presence_penalty": step.presence_penalty.tolist(),
        "min_tokens": step.min_tokens.numpy().astype(np.int16),
        "has_grammar": [bool(x) for x in step.has_grammar],
        "logprobs": [None if n < 0 else n for n in step.logprobs.tolist()],
        "logprobs_mode": [LOGPROBS_MODES[m] for m in step.logprobs_mode.tolist()],
        "prompt_token_ids": [np.array(x, dtype=np.int64) for x in _lists(step.prompt_token_ids,
                                                                           step.cu_prompt_token_ids)],
        "output_token_ids": [torch.tensor(x, dtype=torch.int64) for x in _lists(step.output_token_ids,
                                                                                  step.cu_output_token_ids)],
        # empty lists as None (request 0) and as np.array([]) (float64: no dtype to check when empty)
        "allowed_token_ids": [None if r == 0 else np.array(x) for r, x in enumerate(
            _lists(step.allowed_token_ids, step.cu_allowed_token_ids))],
        "stop_token_ids": step.stop_token_ids.long(), "cu_stop_token_ids": step.cu_stop_token_ids.numpy(),
        "bad_words_token_ids": bad_words,
        "logit_bias": [dict(zip(i, v)) if i else None for i, v in zip(bias_ids, bias_values)],
        "grammar_bitmask": _unpack(step.grammar_bitmask),
        "emitted_tokens": [row[:c] for row, c in zip(result.tokens.tolist(), counts)],
        "emitted_routes": [ROUTES[c] for c in result.routes.tolist()],
        **_per_row(step, result, torch.Generator().manual_seed(5)),
    }
    allowed = as_lists["allowed_token_ids"]
    assert allowed[0] is None and any(v is not None and not v.size for v in allowed) and any(not w for w in bad_words)
    a = _record(tmp_path / "tensors", mode, [as_tensors])
    b = _record(tmp_path / "lists", mode, [as_lists])
    ta, tb = a.read_tensors(0)[0], b.read_tensors(0)[0]
    assert sorted(ta) == sorted(tb)
    for name in ta:
        assert ta[name].dtype == tb[name].dtype and torch.equal(ta[name], tb[name]), name
    assert a.manifest["digest"] == b.manifest["digest"]
    assert torch.equal(b[0].emitted.logprob_ids, result.logprob_ids)  # the garbage is gone, the answer kept


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_cuda_inputs_give_the_cpu_step_file(tmp_path, mode):
    """Every tensor on the GPU (the snapshot's pinned copies, in both modes) and per-request lists of CUDA
    tensors: the step file of the same inputs on the CPU."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    step, result = _synthetic_step()
    on_cpu = _as_tensors(step, result)
    on_gpu = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in on_cpu.items()}
    on_gpu["allowed_token_ids"] = [torch.tensor(x, device="cuda") for x in _lists(step.allowed_token_ids,
                                                                                   step.cu_allowed_token_ids)]
    del on_gpu["cu_allowed_token_ids"]
    a = _record(tmp_path / "cpu", "sync", [on_cpu])
    b = _record(tmp_path / "cuda", mode, [on_gpu])
    assert a.manifest["digest"] == b.manifest["digest"]
    assert a.read_tensors(0)[0].keys() == b.read_tensors(0)[0].keys()


# ----------------------------------------------------------------------------- a small step, by hand
W16 = 16


def _small(**over) -> dict:
    """Two requests, V = 16: request 0 with 2 drafts (3 rows), request 1 plain (1 row)."""
    gen = torch.Generator().manual_seed(2)
    d = dict(logits=torch.randn(4, W16, generator=gen), cu_num_logits=[0, 3, 4], draft_token_ids=[5, 7, -1, -1],
             positions=[10, 11, 12, 4], temperature=[0.0, 1.0], seed=[1, 2], emitted_tokens=[[5, 3], [9]])
    d.update(over)
    return d


def test_values_are_converted_as_documented(tmp_path):
    with Recorder(tmp_path / "rec", W16) as rec:
        rec.record_step(**_small(
            repetition_penalty=1.25, prompt_token_ids=[[1], []], output_token_ids=torch.tensor([4, 5, 6]),
            cu_output_token_ids=np.array([0, 2, 3]), min_tokens=np.int16(3), logprobs=[5, None],
            logprobs_mode="processed_logits", has_grammar=[True, False],
            grammar_bitmask=np.array([[0x80000001]] * 4, dtype=np.uint32),
            logit_bias=[{3: 0.5, 1: float("-inf")}, None], bad_words_token_ids=[[[1, 2], [3]], None],
            verify_method="standard", draft_sampling=["greedy", 0]))
    s = Recording(tmp_path / "rec")[0].step
    assert s.repetition_penalty.tolist() == [1.25, 1.25] and s.min_tokens.tolist() == [3, 3]
    assert s.min_tokens.dtype == torch.int32 and s.output_token_ids.dtype == torch.int32
    assert s.prompt_token_ids.tolist() == [1] and s.cu_prompt_token_ids.tolist() == [0, 1, 1]
    assert s.output_token_ids.tolist() == [4, 5, 6] and s.cu_output_token_ids.tolist() == [0, 2, 3]
    assert s.logprobs.tolist() == [5, -1] and s.logprobs_mode.tolist() == [3, 3]
    assert s.has_grammar.dtype == torch.int8 and s.has_grammar.tolist() == [1, 0]
    assert s.grammar_bitmask.dtype == torch.int32 and s.grammar_bitmask[:, 0].tolist() == [-2 ** 31 + 1] * 4
    assert s.logit_bias_ids.tolist() == [3, 1] and s.logit_bias_values.tolist() == [0.5, float("-inf")]
    assert s.cu_logit_bias.tolist() == [0, 2, 2]
    assert s.bad_words_token_ids.tolist() == [1, 2, 3] and s.cu_bad_words_token_ids.tolist() == [0, 3, 3]
    assert s.bad_words_lengths.tolist() == [2, 1] and s.cu_bad_words_lengths.tolist() == [0, 2, 2]
    assert s.verify_method.dtype == torch.int8 and s.verify_method.tolist() == [0, 0]  # names or codes
    assert s.draft_sampling.tolist() == [0, 0]


LOGPROBS = dict(logprobs=[0, 0], emitted_logprobs=torch.zeros(2, 3, 1),
                emitted_logprob_ids=torch.tensor([[[5], [3], [-1]], [[9], [-1], [-1]]]),
                emitted_logprob_ranks=[[1, 1, -1], [1, -1, -1]])
BAD = [  # (field, arguments, message): conversion errors, then the validator's rules reached through the Recorder
    ("output_token_ids", dict(output_token_ids=[[1, 2]]), "1 lists, expected one per request (2)"),
    ("output_token_ids", dict(output_token_ids=[[1.5], [2]]), "not an integer dtype"),
    ("output_token_ids", dict(output_token_ids=torch.tensor([1, 2])), "needs cu_output_token_ids [R+1] beside it"),
    ("cu_output_token_ids", dict(cu_output_token_ids=[0, 1, 2]), "given without output_token_ids"),
    ("cu_output_token_ids", dict(output_token_ids=[[1], [2]], cu_output_token_ids=[0, 1, 2]), "one or the other"),
    ("bad_words_token_ids", dict(bad_words_token_ids=[[1, 2], []], output_token_ids=[[1], [2]]),
     "request 0: expected a list of words"),
    ("logit_bias", dict(logit_bias=[{1: 0.5}]), "expected a list of 2 dicts"),
    ("logit_bias_values", dict(logit_bias_ids=[[1, 2], [3]], logit_bias_values=[[0.5], [1.0]]),
     "request 0: 1 values for 2 ids"),
    ("logprobs_mode", dict(logprobs=[1, 1], logprobs_mode="sideways"), "unknown mode 'sideways'"),
    ("grammar_bitmask", dict(has_grammar=[1, 0], grammar_bitmask=torch.ones(4, W16 + 1, dtype=torch.bool)),
     "a bool mask must be [..., V=16]"),
    ("grammar_bitmask", dict(has_grammar=[1, 0], grammar_bitmask=torch.full((4, 1), 2 ** 32)), "fit 32 bits"),
    ("emitted_logprob_ids", {**LOGPROBS, "emitted_logprob_ids": LOGPROBS["emitted_logprob_ids"].float()},
     "not an integer dtype"),
    ("emitted_logprob_ranks", {**LOGPROBS, "emitted_logprob_ranks": [[1, 1, -1], [2 ** 40, -1, -1]]},
     "does not fit int32"),
    # the validator, reached through the Recorder
    ("output_token_ids", dict(output_token_ids=[[1, W16], [2]]), "request 0: id 16 is outside [0, 16)"),
    ("repetition_penalty", dict(repetition_penalty=0.0, prompt_token_ids=[[1], [2]], output_token_ids=[[1], [2]]),
     "must be finite and > 0"),
    ("min_tokens", dict(min_tokens=[1, 2]), "needs output_token_ids"),
    ("emitted_logprob_ids", {**LOGPROBS, "emitted_logprob_ids": torch.tensor([[[6], [3], [-1]], [[9], [-1], [-1]]])},
     "column 0 must hold the emitted token"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("field,kwargs,message", BAD, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD)])
def test_bad_pipeline_input_names_file_step_field_and_writes_nothing(tmp_path, mode, field, kwargs, message):
    rec = Recorder(tmp_path / "rec", W16, mode=mode)
    rec.record_step(**_small(**LOGPROBS))           # step 0, good (the logprobs' layout is right)
    with pytest.raises(InputError) as e:
        rec.record_step(**_small(**kwargs))        # sync: raised here
        rec.close()                                # async: the writer's refusal, raised at close
    assert e.value.field == field and e.value.step == 1 and message in str(e.value), str(e.value)
    assert e.value.file.endswith("step-000001.safetensors") and "\n" not in str(e.value)
    if mode == "sync":
        assert rec.record_step(**_small()) is not None  # still usable; nothing was written for the bad one
        rec.close()
    assert len(Recording(tmp_path / "rec")) == (2 if mode == "sync" else 1)


@pytest.mark.parametrize("mode", MODES)
def test_an_unknown_keyword_is_refused_at_once_with_the_close_names(tmp_path, mode):
    with Recorder(tmp_path / "rec", W16, mode=mode) as rec:
        with pytest.raises(InputError) as e:
            rec.record_step(**_small(), output_tokens_ids=[[1], [2]])
        assert e.value.field == "output_tokens_ids" and "did you mean output_token_ids" in str(e.value)
        assert rec.calls == 0   # refused before the call counted
