"""`replay run` on the sampling pipeline: logprobs, top-n ids, ranks and kept sets are compared with a stated
tolerance, each a counted kind of difference; a divergence names the rule whose ablation reproduces it.

Every step is SYNTHETIC (``synthetic.add_pipeline`` on ``random_step``); the engines that drop a rule are
tests/broken_impls.py's, written apart from compare/ablation.py, whose attribution they test.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from broken_impls import PIPELINE_LABELS, DroppedRule, FrozenHistory
from helpers import main_inproc
from replay_harness import impls as registry
from replay_harness.compare.attribution import MAX_ATTRIBUTED
from replay_harness.compare.logprobs import close, compare_slot
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.store import Emitted, RecordingWriter
from replay_harness.recording.synthetic import Case, add_pipeline, random_step

CASE = Case("pipeline", vocab_size=70, num_requests=8, max_drafts=3, temperatures=(0.0, 1.0),
            features=frozenset({"ragged"}))
RULE_INPUTS = {"grammar": ("grammar",), "allowed": ("allowed",), "bias": ("bias",), "min-tokens": ("min-tokens",),
               "repetition": ("penalties",), "frequency": ("penalties",), "presence": ("penalties",),
               "bad-words": ("bad-words",), "history": ("penalties", "bad-words", "min-tokens")}
PENALTY_FIELDS = ("repetition_penalty", "frequency_penalty", "presence_penalty")


def accepting(step):
    """``step`` with every draft the argmax of its row after the pipeline, drafts before it counted (SYNTHETIC):
    greedy requests accept them all, so every row of the walk is reached and a rule at any row shows."""
    cu = step.cu_num_logits.tolist()
    for l in range(step.max_drafts):
        rows, drafts = apply_sampling_params(step), step.draft_token_ids.clone()
        for r in range(step.num_requests):
            if l < cu[r + 1] - cu[r] - 1:
                drafts[cu[r] + l] = int(rows[cu[r] + l].argmax())
        step = dataclasses.replace(step, draft_token_ids=drafts)
    return step


def pipeline_steps(rule: str | None = None, seed: int = 0, n: int = 4, logprobs: bool = False) -> list:
    """SYNTHETIC steps with the inputs of ``rule`` alone (a penalty: that penalty alone; ``logprobs``: and logprob
    requests), or of every rule."""
    gen = torch.Generator().manual_seed(seed)
    steps = []
    for i in range(n):
        step = random_step(gen, CASE, i)
        inputs = RULE_INPUTS[rule] + (("logprobs",) if logprobs else ()) if rule else None
        step = add_pipeline(gen, step, inputs) if rule else add_pipeline(gen, step)
        if rule in ("repetition", "frequency", "presence"):
            step = dataclasses.replace(step, **{f: None for f in PENALTY_FIELDS if not f.startswith(rule)})
        steps.append(accepting(step))
    return steps


def write(path: Path, steps: list, engine=None, edit=None) -> str:
    """A SYNTHETIC recording of ``steps`` whose emitted tokens, logprobs and kept sets come from ``engine``
    (default the reference); ``edit(i, result)`` may change step i's result before it is written."""
    engine = engine or ReferenceSampler()
    with RecordingWriter(path, vocab_size=steps[0].vocab_size, synthetic=True, source={"synthetic": True}) as w:
        for i, step in enumerate(steps):
            res = engine.sample(step)
            if edit is not None:
                edit(i, res)
            w.write_step(step, Emitted(res.tokens.to(torch.int32), res.counts, res.routes, res.logprobs,
                                       res.logprob_ids, res.logprob_ranks, res.kept_mask), meta={"synthetic": True})
    return str(path)


def run_json(*args: str) -> tuple[int, dict]:
    code, out, err = main_inproc("run", *args, "--json", "--quiet")
    assert code in (0, 1), err
    return code, json.loads(out)["recordings"][0]


# ------------------------------------------------------------------------------------------ the tolerance
def test_the_tolerance_is_one_e_minus_4_plus_one_e_minus_6_of_the_other_side():
    for b in (-0.3, -50.0, -2000.0):
        tol = 1e-4 + 1e-6 * abs(b)
        assert close(b + 0.99 * tol, b) and close(b - 0.99 * tol, b)
        assert not close(b + 1.01 * tol, b) and not close(b - 1.01 * tol, b)
    assert close(-math.inf, -math.inf)
    assert not close(-math.inf, -1e30) and not close(-1e30, -math.inf)
    assert close(math.nan, math.nan) and not close(math.nan, -1.0) and not close(-1.0, math.nan)  # no finite logit


def test_top_n_ids_tied_at_the_nth_value_or_at_minus_inf_are_interchangeable():
    v = [-1.0, -0.5, -1.2, -2.0]
    assert compare_slot(3, v, [7, 1, 2, 3], v, [7, 1, 2, 4]) is None  # 3 and 4 tie at the 3rd value
    assert compare_slot(3, v, [7, 1, 2, 3], [-1.0, -0.5, -1.2, -2.00005], [7, 1, 2, 4]) is None  # within tolerance
    assert compare_slot(3, v, [7, 1, 5, 3], v, [7, 1, 2, 3])[0] == "top-n"  # 5 vs 2 above the boundary
    tied = [-1.0, -0.5, -0.5, -2.0]
    assert compare_slot(3, tied, [7, 1, 2, 3], tied, [7, 2, 1, 3]) is None  # ties inside: any order
    inf = [-1.0, -0.5, -math.inf, -math.inf]
    assert compare_slot(3, inf, [7, 1, 9, 10], inf, [7, 1, 11, 12]) is None
    assert compare_slot(3, v, [7, 1, 2, 3], [-1.0, -0.5, -1.2, -2.01], [7, 1, 2, 3])[0] == "logprob"
    assert compare_slot(0, [-1.0003], [7], [-1.0], [7])[0] == "logprob"


# ------------------------------------------------------------------------------------ the four kinds, by run
def test_a_reference_recording_with_every_rule_passes_and_says_what_it_compared(tmp_path):
    rec = write(tmp_path / "ref", pipeline_steps(n=3))
    code, doc = run_json(rec, "--impl", "reference")
    assert code == 0, doc
    assert doc["logprob_slots_compared"] > 10 and doc["kept_sets_compared"] > 10
    assert doc["output_differences"] == {} and doc["logprobs_not_compared"] == 0


def _perturb(i: int, res, slots: dict) -> None:
    """Step 0 of the recording: one difference of each kind at its own request, one inside the tolerance and one
    flip of a kept-set padding bit (bits past V = 70), neither of which counts."""
    if i != 0:
        return
    asked = slots["asked"]
    (r0, r1, r2, r3) = asked[:4]
    res.logprobs[r0, 0, 0] += 3e-4                 # beyond 1e-4 + 1e-6 |b|
    res.logprobs[r1, 0, 0] += 5e-5                 # inside it
    ids = res.logprob_ids[r1, 0]
    n = slots["n"][r1]
    spare = next(t for t in range(CASE.vocab_size) if t not in ids[:n + 1].tolist())
    if n >= 2 and not close(float(res.logprobs[r1, 0, 1]), float(res.logprobs[r1, 0, n])):
        ids[1] = spare                             # a top-n id above the boundary replaced
    res.logprob_ranks[r2, 0] += 1
    res.kept_mask[r3, 0, 0] ^= 1 << 3              # token 3's bit
    res.kept_mask[r3, 0, 2] ^= 1 << 20             # bit 84: padding past V, ignored


def test_each_kind_of_difference_is_counted_and_fails_the_run(tmp_path):
    steps = pipeline_steps(n=2)
    s0 = steps[0]
    res = ReferenceSampler().sample(s0)
    n = s0.logprobs.tolist()
    # requests that asked for n >= 3 logprobs and emitted: r1 must have a top-n with distinct values
    asked = [r for r in range(s0.num_requests) if n[r] >= 3 and int(res.counts[r]) > 0]
    asked += [r for r in range(s0.num_requests) if n[r] >= 0 and int(res.counts[r]) > 0 and r not in asked]
    assert len(asked) >= 4
    rec = write(tmp_path / "edited", steps, edit=lambda i, x: _perturb(i, x, {"asked": asked, "n": n}))
    code, doc = run_json(rec, "--impl", "reference")
    assert code == 1
    want = {"logprob": 1, "top-n": 1, "rank": 1, "kept-set": 1}
    assert doc["output_differences"] == want, doc["output_difference_slots"]
    where = {d["kind"]: (d["step"], d["request"], d["position"]) for d in doc["output_difference_slots"]}
    assert where == {"logprob": (0, asked[0], 0), "top-n": (0, asked[1], 0), "rank": (0, asked[2], 0),
                     "kept-set": (0, asked[3], 0)}
    code, out, _ = main_inproc("run", rec, "--impl", "reference")
    assert code == 1 and "1 kept-set difference(s); first: step 0" in out and "1 logprob" in out


def test_a_side_without_logprobs_is_a_note_not_a_pass_of_logprobs(tmp_path):
    steps = pipeline_steps(n=1)
    rec = write(tmp_path / "r", steps)

    class NoLogprobs(ReferenceSampler):
        name = "no-logprobs"

        def sample(self, step):
            res = super().sample(step)
            res.logprobs = res.logprob_ids = res.logprob_ranks = res.kept_mask = None
            return res
    registry.register("no-logprobs", NoLogprobs)
    code, doc = run_json(rec, "--impl", "no-logprobs")
    assert code == 0 and doc["logprob_slots_compared"] == 0 and doc["logprobs_not_compared"] > 0
    assert any("logprobs not compared" in n for n in doc["notes"])


# ---------------------------------------------------------------------------------- which rule: attribution
@pytest.mark.parametrize("rule", sorted(PIPELINE_LABELS))
def test_a_rule_dropped_at_draft_positions_fails_run_naming_the_rule(tmp_path, rule):
    steps = pipeline_steps(rule, seed=1)
    rec = write(tmp_path / "r", steps)
    name = f"drops-{rule}"
    registry.register(name, lambda: DroppedRule(rule, "drafts"))
    code, out, err = main_inproc("run", rec, "--impl", name, "--against", "reference")
    assert code == 1, out + err
    label = PIPELINE_LABELS[rule]
    assert f"{name}'s tokens are the oracle's with {label} not applied at draft positions (request " in out, out
    code, doc = run_json(rec, "--impl", name, "--against", "reference")
    named = doc["attributed_divergences"]
    assert 0 < len(named) <= MAX_ATTRIBUTED
    assert all(d["rule"].startswith(f"{label} not applied at draft positions (request {d['request_id']}, step "
                                    f"{d['step']})") and d["rule_side"] == "impl" for d in named), named


def test_the_recorded_engine_is_named_when_it_drops_the_rule(tmp_path):
    steps = pipeline_steps("presence", seed=2)
    rec = write(tmp_path / "r", steps, engine=DroppedRule("presence", "drafts"))
    code, out, _ = main_inproc("run", rec, "--impl", "reference")
    assert code == 1 and "the recording's tokens are the oracle's with presence penalty not applied at draft " \
                          "positions (request " in out, out


def test_a_rule_dropped_everywhere_is_named_without_the_draft_qualifier(tmp_path):
    rec = write(tmp_path / "r", pipeline_steps("bias", seed=0))
    registry.register("drops-bias-all", lambda: DroppedRule("bias", "all"))
    code, doc = run_json(rec, "--impl", "drops-bias-all", "--against", "reference")
    assert code == 1
    rules = [d["rule"] for d in doc["attributed_divergences"]]
    assert any(r.startswith("logit bias not applied (request") for r in rules), rules


def test_drafts_not_counted_as_output_is_named(tmp_path):
    rec = write(tmp_path / "r", pipeline_steps("history", seed=0))
    registry.register("frozen-history", FrozenHistory)
    code, out, _ = main_inproc("run", rec, "--impl", "frozen-history", "--against", "reference")
    assert code == 1 and "frozen-history's tokens are the oracle's with drafts not counted as output" in out, out


def test_kept_sets_name_the_rule_without_any_rng(tmp_path):
    """An engine of another RNG contract: its stochastic tokens are not compared, but its kept sets are (they need
    no noise) and their ablation names the rule."""
    rec = write(tmp_path / "r", pipeline_steps("grammar", seed=0, n=2, logprobs=True))

    class OwnRng(DroppedRule):
        rng_contract = "own"
    registry.register("own-rng-grammar", lambda: OwnRng("grammar", "drafts"))
    code, doc = run_json(rec, "--impl", "own-rng-grammar")
    assert code == 1 and doc["output_differences"].get("kept-set", 0) > 0
    firsts = [d for d in doc["output_difference_slots"] if d["rule"]]
    assert firsts and firsts[0]["rule"].startswith("grammar mask not applied at draft positions (request")


def test_no_rule_is_named_on_a_step_without_the_pipeline():
    fixture = str(Path(__file__).resolve().parents[1] / "fixtures" / "synthetic-founding")
    code, doc = run_json(fixture, "--impl", "greedy-only", "--against", "reference")
    assert code == 1 and doc["divergent_requests"] > 0 and doc["attributed_divergences"] == []


def test_a_request_without_grammar_selected_alone_is_processed_as_in_its_step():
    """oracle/processors.py: a selection whose requests all have has_grammar 0 (the near-tie classifier and every
    ablation select one request) keeps the bitmask field and must process as the full step does (it raised)."""
    step = pipeline_steps(seed=0, n=1)[0]
    r = step.has_grammar.tolist().index(0)
    a, b = int(step.cu_num_logits[r]), int(step.cu_num_logits[r + 1])
    assert torch.equal(apply_sampling_params(step.select([r])), apply_sampling_params(step)[a:b])
