"""`replay conformance`: the vectors pass for reference, stochastic (interpreter; it refuses block and FLy steps by
name, and fp64-noise is not applicable to its mrv2 contract) and the C++ example sampler's conformant build
(-DCONFORMANT) before the pipeline and the methods; deliberately wrong samplers (and its founding-bug builds) fail
them, named by rule. The verification methods' vectors change when their method is replaced (METHOD_ABLATIONS)."""
from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import cli
from replay_harness.conformance.rules import RULES
from replay_harness.conformance.runner import DEFAULT_VECTORS, find_vectors, run_conformance
from replay_harness.impls import get_impl
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle import rng, sampling_params
from replay_harness.oracle.drafts import derive_drafts, draft_noise_diagnosis
from replay_harness.oracle.walk import argmax_first
from replay_harness.recording.schema import DRAFT_SAMPLING, VERIFY_METHODS
from replay_harness.recording.store import Recording

REPO = Path(__file__).resolve().parents[1]
# what the founding builds of examples/cpp_sampler (default, -DGUARDED) get right; -DCONFORMANT passes all
CPP_FOUNDING_RULES = ["greedy-ties", "gumbel-hash", "gumbel-clamp", "temperature", "logits-dtypes"]


class ExactTopK(ReferenceSampler):
    """Wrong: top-k keeps exactly k tokens (ties at the k-th value broken by index)."""

    name = "exact-top-k"

    def process(self, step):
        right = sampling_params.top_k_top_p_sorted

        def exact(logits, k, p):
            order = logits.sort(dim=-1, descending=True, stable=True).indices
            keep = torch.zeros_like(logits, dtype=torch.bool)
            for i in range(logits.shape[0]):
                keep[i, order[i, :int(k[i])]] = True
            return right(logits.masked_fill(~keep, float("-inf")), torch.full_like(k, logits.shape[1]), p)

        sampling_params.top_k_top_p_sorted = exact
        try:
            return super().process(step)
        finally:
            sampling_params.top_k_top_p_sorted = right


# The inputs of schema minor 2's pipeline (docs/FIXTURES.md, "The sampling pipeline"); the logprob requests stay.
PIPELINE_NAMES = ("repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens", "has_grammar",
                  "grammar_bitmask", "prompt_token_ids", "cu_prompt_token_ids", "output_token_ids",
                  "cu_output_token_ids", "allowed_token_ids", "cu_allowed_token_ids", "stop_token_ids",
                  "cu_stop_token_ids", "bad_words_token_ids", "cu_bad_words_token_ids", "bad_words_lengths",
                  "cu_bad_words_lengths", "logit_bias_ids", "logit_bias_values", "cu_logit_bias")


class IgnoresPipeline(ReferenceSampler):
    """Wrong: samples as if the step held no field of the sampling pipeline (the raw logits)."""

    name = "ignores-pipeline"

    def sample(self, step):
        return super().sample(dataclasses.replace(step, **{n: None for n in PIPELINE_NAMES}))


class NoClamp(ReferenceSampler):
    """Wrong: log(1 - u) without the 2^-24 clamp (u = 1.0 gives -inf noise)."""

    name = "no-clamp"

    def sample(self, step):
        clamp, rng.LOG_CLAMP_MIN = rng.LOG_CLAMP_MIN, 0.0
        try:
            return super().sample(step)
        finally:
            rng.LOG_CLAMP_MIN = clamp


def _load_tool():
    """tools/make_conformance.py as a module (registered, so that its dataclasses resolve their module)."""
    if "make_conformance_tool" not in sys.modules:
        spec = importlib.util.spec_from_file_location("make_conformance_tool", REPO / "tools" / "make_conformance.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["make_conformance_tool"]


PIPELINE_RULES = [r.id for r in RULES if r.pipeline]
METHOD_RULES = [r.id for r in RULES if r.method]
REFUSED_BY_KERNELS = []  # the kernels implement every method of the committed vectors (trees: tree_vectors.py)


class IgnoresMethods(ReferenceSampler):
    """Wrong: verifies every request token-wise whatever its verify_method (block verification done token-wise,
    vllm-project/vllm-ascend#7807; FLy ignored)."""

    name = "ignores-methods"

    def sample(self, step):
        return super().sample(dataclasses.replace(step, verify_method=None))


class Fp32Noise(ReferenceSampler):
    """Wrong: claims mrv2-fp64 but draws mrv2's float32 noise."""

    name = "fp32-noise"

    def sample(self, step):
        return super().sample(dataclasses.replace(step, rng_contract="mrv2"))


def test_one_vector_per_rule_and_small():
    assert sorted(p.name for p in DEFAULT_VECTORS.iterdir()) == sorted(r.id for r in RULES)
    assert sum(f.stat().st_size for f in DEFAULT_VECTORS.rglob("*") if f.is_file()) < 1_000_000


def test_the_reference_passes_every_vector_token_for_token():
    """fp64-noise included: the reference implements mrv2-fp64 too (rng_contracts), so it is compared exactly."""
    results = run_conformance(get_impl("reference"), find_vectors())
    assert [r.rule.id for r in results if not r.ok] == []
    assert all(r.mode == "exact" and r.comparison.tokens_compared > 0 for r in results)


def test_stochastic_passes_every_vector_token_for_token():
    """block, FLy and fp64-noise included: stochastic implements both contracts (rng_contracts), so every vector
    is compared exactly, as the reference's are."""
    results = {r.rule.id: r for r in run_conformance(get_impl("stochastic"), find_vectors())}
    assert sorted(rule for rule, r in results.items() if not r.ok) == REFUSED_BY_KERNELS
    assert results["fp64-noise"].mode == "exact" and results["fp64-noise"].comparison.tokens_compared > 0
    assert all(r.comparison.tokens_compared > 0 for r in results.values())


def test_every_pipeline_rule_has_a_vector_and_an_ablation():
    tool = _load_tool()
    assert len(PIPELINE_RULES) == 13 and set(tool.ABLATIONS) == set(PIPELINE_RULES)
    for rule in PIPELINE_RULES:
        assert Recording(DEFAULT_VECTORS / rule).manifest["schema_minor"] == 2


@pytest.mark.parametrize("rule", PIPELINE_RULES)
def test_a_pipeline_vector_changes_when_its_rule_is_left_out(rule):
    """The committed vector holds the reference's answer (logprobs and kept sets included), and that answer is
    not the one of the same step without the rule (make_conformance.ABLATIONS): the vector pins its rule."""
    tool = _load_tool()
    for record in Recording(DEFAULT_VECTORS / rule):
        again = tool.emitted(record.step)
        recorded = tool.rule_output(rule, record.emitted)
        assert all(torch.equal(a, b) for a, b in zip(recorded, tool.rule_output(rule, again)))
        assert torch.equal(record.emitted.tokens, again.tokens)
        without = tool.rule_output(rule, tool.ablated(rule, record.step))
        assert not all(torch.equal(a, b) for a, b in zip(recorded, without)), f"{rule}: the rule changes nothing"


def test_raw_logprobs_are_read_after_the_grammar_mask():
    """logprobs-raw request 0: its raw top 3 are the grammar's allowed tokens, not the raw logits' top 3."""
    step = Recording(DEFAULT_VECTORS / "logprobs-raw")[0]
    assert int(step.step.has_grammar[0]) == 1 and int(step.step.logprobs_mode[0]) == 0
    top = step.step.logits[0].topk(3).indices.tolist()
    allowed = [v for v in range(16) if int(step.step.grammar_bitmask[0, 0]) >> v & 1]
    got = step.emitted.logprob_ids[0, 0, 1:4].tolist()
    assert set(got) <= set(allowed) and not set(got) & (set(top) - set(allowed))


def test_every_method_rule_has_a_vector_and_an_ablation():
    tool = _load_tool()
    assert METHOD_RULES == ["block-verification", "fly-verification", "probabilistic-drafts", "fp64-noise"]
    assert set(tool.METHOD_ABLATIONS) == set(METHOD_RULES)
    block, fly, drafts, fp64 = (Recording(DEFAULT_VECTORS / rule) for rule in METHOD_RULES)
    assert fp64.rng_contract == "mrv2-fp64" and {block.rng_contract, fly.rng_contract, drafts.rng_contract} == {"mrv2"}
    assert all(bool((rec.step.verify_method == VERIFY_METHODS.index(name)).all())
               for recording, name in ((block, "block"), (fly, "fly")) for rec in recording)
    assert all(bool((rec.step.draft_sampling == DRAFT_SAMPLING.index("probabilistic")).all()) for rec in drafts)


@pytest.mark.parametrize("rule", METHOD_RULES)
def test_a_method_vector_changes_when_its_method_is_replaced(rule):
    """The committed vector holds the reference's tokens, and every ablation (block and FLy by standard
    verification, probabilistic drafts by greedy or unsalted draws, mrv2-fp64 by mrv2) gives other tokens."""
    tool = _load_tool()
    for record in Recording(DEFAULT_VECTORS / rule):
        assert torch.equal(record.emitted.tokens, tool.emitted(record.step).tokens)
        for what, ablate in tool.METHOD_ABLATIONS[rule]:
            assert not torch.equal(record.emitted.tokens, tool.emitted(ablate(record.step)).tokens), (rule, what)


def test_the_probabilistic_drafts_are_the_contract_drafters():
    """Each stochastic request's drafts are the salted Gumbel-max of its draft logits (never the unsalted draw);
    the greedy request's are their argmax."""
    step = Recording(DEFAULT_VECTORS / "probabilistic-drafts")[0].step
    cu, d_idx = step.cu_num_logits.tolist(), step.draft_row_index()
    for r in range(step.num_requests):
        drafts = step.draft_token_ids[cu[r]:cu[r + 1] - 1].tolist()
        if float(step.temperature[r]) == 0:
            assert drafts == [argmax_first(step.draft_logits[int(d_idx[j])]) for j in range(cu[r], cu[r + 1] - 1)]
            continue
        assert draft_noise_diagnosis(step, r) is None and drafts == derive_drafts(step, r)
        assert drafts != derive_drafts(step, r, salt=0)


@pytest.mark.parametrize("wrong,failed", [(IgnoresMethods, ["block-verification", "fly-verification"]),
                                          (Fp32Noise, ["fp64-noise"])])
def test_a_sampler_that_ignores_a_method_fails_its_vector_by_name(wrong, failed):
    results = run_conformance(wrong(), find_vectors(rules=METHOD_RULES))
    assert sorted(r.rule.id for r in results if not r.ok) == failed
    assert all(line.startswith(f"rule {r.rule.id}: step ") for r in results for line in r.failures)


@pytest.mark.parametrize("rule", PIPELINE_RULES)
def test_an_impl_that_ignores_the_pipeline_fails_each_pipeline_vector(rule):
    results = run_conformance(IgnoresPipeline(), find_vectors(rules=[rule]))
    assert [r.rule.id for r in results if not r.ok] == [rule]


@pytest.mark.parametrize("wrong,rule", [(ExactTopK, "top-k-ties"), (NoClamp, "gumbel-clamp")])
def test_a_wrong_sampler_fails_its_rule_by_name(wrong, rule):
    results = run_conformance(wrong(), find_vectors())
    failed = [r for r in results if not r.ok]
    assert [r.rule.id for r in failed] == [rule]
    assert all(line.startswith(f"rule {rule}: step 0, request ") for line in failed[0].failures)


def test_cli_names_the_rule_and_exits_1():
    code, out, err = cli("conformance", "--impl", "exec:python -m replay_harness.impls.external_adapter",
                         "--impl-arg", "test_conformance:NoClamp", "--rule", "gumbel-*", cwd=REPO / "tests")
    assert code == 1, err
    assert "FAIL gumbel-clamp" in out and "ok   gumbel-hash" in out
    assert "rule gumbel-clamp says: 1 - u is clamped" in out and "1/2 conformance vectors pass" in out


def test_cli_ok_and_usage():
    code, out, _ = cli("conformance", "--rule", "top-*")
    assert code == 0 and "2/2 conformance vectors pass" in out
    code, _, err = cli("conformance", "--rule", "nothing-like-this")
    assert code == 2 and "no conformance vector" in err


@pytest.fixture(scope="module")
def cpp_builds(tmp_path_factory):
    """The C++ example sampler's three builds: {"": founding bug, "GUARDED": its fix, "CONFORMANT": the contract}."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    tmp = tmp_path_factory.mktemp("cpp_sampler")
    builds = {}
    for define in ("", "GUARDED", "CONFORMANT"):
        exe = tmp / f"sampler-{define.lower() or 'default'}"
        subprocess.run(["g++", "-O1", "-std=c++17", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror",
                        *([f"-D{define}"] if define else []), "-o", str(exe),
                        str(REPO / "examples" / "cpp_sampler" / "sampler.cpp")], check=True)
        builds[define] = exe
    return builds


def test_cpp_conformant_build_passes_every_vector_before_the_pipeline(cpp_builds):
    rules = [a for r in RULES if not r.pipeline and not r.method for a in ("--rule", r.id)]
    code, out, err = cli("conformance", "--impl", f"exec:{cpp_builds['CONFORMANT']}", *rules)
    assert code == 0, out + err
    assert f"{len(rules) // 2}/{len(rules) // 2} conformance vectors pass" in out


def test_cpp_conformant_build_refuses_the_pipeline_vectors_by_name(cpp_builds):
    """examples/cpp_sampler implements no input of schema minor 2: a step holding one is refused whole, naming the
    fields (n/a, never ok: sampling the raw logits would pass some vectors by luck and fail others as bugs)."""
    rules = [a for r in RULES if r.pipeline for a in ("--rule", r.id)]
    code, out, _ = cli("conformance", "--impl", f"exec:{cpp_builds['CONFORMANT']}", *rules)
    status = {line.split()[1]: line.split()[0] for line in out.splitlines()
              if line.split()[:1] in (["FAIL"], ["ok"], ["n/a"])}
    assert status and set(status.values()) == {"n/a"}, out
    assert code == 4 and "INCONCLUSIVE" in out, out  # nothing chosen applied: no pass on no evidence


def test_cpp_conformant_build_refuses_block_and_fly_by_name(cpp_builds):
    """examples/cpp_sampler verifies drafts the standard way only: block and FLy requests with drafts are refused by
    name (never verified token-wise as if the method were standard), the probabilistic drafts (standard verification
    with draft logits) pass, fp64-noise is n/a to its mrv2."""
    rules = [a for r in METHOD_RULES for a in ("--rule", r)]
    code, out, _ = cli("conformance", "--impl", f"exec:{cpp_builds['CONFORMANT']}", *rules)
    status = {line.split()[1]: line.split()[0] for line in out.splitlines()
              if line.split()[:1] in (["FAIL"], ["ok"], ["n/a"])}
    assert code == 0 and status["fly-verification"] == "n/a" and status["probabilistic-drafts"] == "ok" \
        and status["fp64-noise"] == "n/a" and status["block-verification"] in ("ok", "n/a"), out
    assert "refused" in out


# What each founding build of examples/cpp_sampler refuses outright: every request of these vectors (plain requests
# with filters at t > 0; every step holding an input of schema minor 2; FLy requests with drafts; -DGUARDED also every
# request with drafts at t > 0), which `replay conformance` reports "n/a" (not tested), never ok; and what it passes
# beside CPP_FOUNDING_RULES (the requests it does not refuse). fp64-noise is n/a to both (another contract than their
# mrv2); block-verification passes on the requests neither refuses (greedy, no drafts).
CPP_PIPELINE_REFUSED = sorted(PIPELINE_RULES)
CPP_ALL_REFUSED = {"": sorted(["filter-order", "fly-verification", "fp64-noise", "min-p", "top-k-ties", "top-p-cut",
                               *CPP_PIPELINE_REFUSED]),
                   "GUARDED": sorted(["draft-logits", "filter-order", "fly-verification", "fp64-noise", "min-p",
                                      "stochastic-verify", "top-k-ties", "top-p-cut", *CPP_PIPELINE_REFUSED])}
CPP_ALSO_PASSED = {"": ["block-verification"],
                   "GUARDED": ["block-verification", "extreme-seeds-positions", "placeholder-drafts",
                               "probabilistic-drafts"]}


@pytest.mark.parametrize("define", ["", "GUARDED"])
def test_cpp_founding_builds_fail_the_stochastic_rules_by_name(cpp_builds, define):
    # the default build verifies drafts greedily at t > 0 (the founding bug): exactly the stochastic rules below
    # fail, each named; -DGUARDED refuses those requests by name and fails nothing. Both refuse plain requests with
    # filters and every step with an input of the sampling pipeline; the others pass or, all refused, are n/a
    code, out, _ = cli("conformance", "--impl", f"exec:{cpp_builds[define]}")
    status = {line.split()[1]: line.split()[0] for line in out.splitlines()
              if line.split()[:1] in (["FAIL"], ["ok"], ["n/a"])}
    passed = sorted(CPP_FOUNDING_RULES + CPP_ALSO_PASSED[define])
    failed = sorted(r.id for r in RULES if r.id not in passed + CPP_ALL_REFUSED[define])
    assert code == (1 if failed else 0), out
    assert failed == ([] if define else ["draft-logits", "extreme-seeds-positions", "placeholder-drafts",
                                         "probabilistic-drafts", "stochastic-verify"])
    assert sorted(r for r, st in status.items() if st == "n/a") == CPP_ALL_REFUSED[define]
    assert sorted(r for r, st in status.items() if st == "ok") == passed
    assert sorted(r for r, st in status.items() if st == "FAIL") == failed
    assert f"{len(passed)}/{len(RULES) - len(CPP_ALL_REFUSED[define])} conformance vectors pass" in out
    assert "top-k-ties                 every request (12) refused by the impl: not tested" in out
    rules = [a for r in CPP_FOUNDING_RULES for a in ("--rule", r)]
    code, out, err = cli("conformance", "--impl", f"exec:{cpp_builds[define]}", *rules)
    assert code == 0, out + err
