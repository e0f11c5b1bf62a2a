"""The impl contract, tested over the registry: every impl in ``replay_harness.impls`` (BUILTIN,
``register()``, entry points; ``exec:`` programs have their own tests in tests/test_external.py).

Adding an impl is one class file plus one registry line; the tests below then pick it up:

* parity: an impl whose ``rng_contract`` is "mrv2" emits exactly what ``reference`` emits (tokens,
  counts, routes) on the SYNTHETIC cases of :mod:`replay_harness.recording.synthetic`, up to
  documented floating-point near-ties. A request it does not handle must be marked ``refused``
  (count 0); only requests with drafts may be refused (gumbel-max / serial-scan: every drafted one;
  guarded: the stochastic ones).
* fixtures: every impl replays every committed fixture under fixtures/ without crashing, with valid
  route codes, 0 <= count <= k + 1 and valid token ids.

Without CUDA the Triton impls run under TRITON_INTERPRET=1 (tests/conftest.py), so the synthetic cases
use vocabularies of at most PARITY_VOCAB ids; see FIXTURE_MAX_VOCAB_INTERPRETED for the fixtures.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from replay_harness import impls as registry
from replay_harness.compare.diff import Comparison, compare_step
from replay_harness.errors import EnvironmentProblem
from replay_harness.impls.contract import Adapted, Sampler, as_sampler, place, placement
from replay_harness.recording.step import ROUTE_CODE, SampleResult, Step
from replay_harness.recording.store import Recording
from replay_harness.recording.synthetic import CASES, random_step

REPO = Path(__file__).resolve().parents[1]
FIXTURES = sorted(p.name for p in (REPO / "fixtures").iterdir() if (p / "manifest.json").exists())
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
PARITY_VOCAB = 67       # the synthetic cases, vocabularies cut to this (the interpreter runs numpy per block;
PARITY_STEPS = 2        # serial-scan even per vocabulary id); steps per synthetic case
MAX_NEAR_TIES = 2       # per impl and case (0 seen under the interpreter; GPU libdevice may move an ulp)
# Without CUDA, impls that are not cpu_only (the Triton kernels) run under the interpreter, which takes
# 10 s and more per fixture once the vocabulary is large (real-*: 49152 and 151936 ids; synthetic-filters:
# 4099 ids with top-k/top-p), and serial-scan, one scalar step per vocabulary id, minutes on a 3001-id
# fixture. Those pairs are skipped on the CPU; on a CUDA machine nothing is skipped (88 passed on an H200).
FIXTURE_MAX_VOCAB_INTERPRETED = {"serial-scan": 256}
FIXTURE_MAX_VOCAB_INTERPRETED_DEFAULT = 4096
# Impls that are wrong on purpose: parity must keep failing for them (strict xfail).
DELIBERATELY_WRONG = {"greedy-only": "the founding engine bug: stochastic requests under drafts verified greedily"}


def registry_names() -> list[str]:
    """The impls the tests below run: the whole registry at collection time, less ``exec:`` programs."""
    return [n for n in registry.known_names() if not n.startswith("exec:")]


def _params(names: list[str]) -> list:
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=DELIBERATELY_WRONG[n]))
            if n in DELIBERATELY_WRONG else n for n in names]


@pytest.fixture(scope="module")
def reference() -> Sampler:
    return registry.get_impl("reference")


def _load(name: str) -> Sampler:
    try:
        impl = registry.get_impl(name)
    except EnvironmentProblem as e:  # an optional peer that is not installed here (CI has no .peers)
        pytest.skip(str(e))
    if impl.requires_cuda and DEVICE.type != "cuda":
        pytest.skip(f"impl '{name}' needs a CUDA GPU")
    return impl


def _run(impl: Sampler, step: Step) -> SampleResult:
    res = impl.sample(place(step, impl, DEVICE))
    res.tokens, res.counts, res.routes = res.tokens.cpu(), res.counts.cpu(), res.routes.cpu()
    return res


def synthetic_steps() -> list[tuple[str, Step]]:
    """(case name, step) for every synthetic case, vocabularies cut to PARITY_VOCAB (seeded)."""
    out = []
    for case in CASES.values():
        small = dataclasses.replace(case, vocab_size=min(case.vocab_size, PARITY_VOCAB))
        gen = torch.Generator().manual_seed(11)
        out += [(case.name, random_step(gen, small, i)) for i in range(PARITY_STEPS)]
    return out


@pytest.mark.parametrize("name", _params(registry_names()))
def test_mrv2_impl_matches_reference_on_synthetic_cases(name, reference):
    impl = _load(name)
    if impl.rng_contract != "mrv2":
        pytest.skip(f"rng_contract {impl.rng_contract!r}: compared statistically (replay verify), not token by token")
    compared = 0
    for case, step in synthetic_steps():
        got, want = _run(impl, step), _run(reference, step)
        cmp = Comparison()
        compare_step(cmp, 0, step, got, want)
        k = step.num_drafts.tolist()
        for d in cmp.divergences:
            if d.route == "refused":
                assert k[d.request] > 0, f"{case}: plain request {d.request_id} refused"
                assert int(got.counts[d.request]) == 0, f"{case}: refused request {d.request_id} emitted tokens"
        real = [d for d in cmp.real_divergences if d.route != "refused"]
        assert not real, f"{case}: {real[:3]}"
        assert cmp.near_ties <= MAX_NEAR_TIES, f"{case}: {cmp.near_ties} near-ties"
        assert not cmp.violations and not cmp.against_violations, (case, cmp.violations[:3])
        compared += step.num_requests - len(cmp.refused)
    assert compared > 0, "every request refused: nothing compared"


@pytest.mark.parametrize("name", registry_names())
def test_an_impl_that_keeps_its_inputs_leaves_the_step_as_it_was(name):
    """``keeps_inputs`` makes ``place`` hand the impl the recorded tensors themselves (no copy): the claim must
    hold, on steps with drafts, filters and greedy rows."""
    impl = _load(name)
    if not impl.keeps_inputs:
        pytest.skip("gets a copy of every step (contract.place)")
    for case, step in [s for s in synthetic_steps() if s[0] in ("synthetic-mixed", "synthetic-filters")]:
        placed = place(step, impl, DEVICE)
        before = {f.name: getattr(placed, f.name).clone() for f in dataclasses.fields(placed)
                  if isinstance(getattr(placed, f.name), torch.Tensor)}
        impl.sample(placed)
        changed = [k for k, v in before.items() if not torch.equal(v, getattr(placed, k))]
        assert not changed, f"{case}: {name} wrote into {changed}"


class _WritesIntoItsStep(Sampler):
    """The reference's tokens after writing into the step it was given (engines' samplers do: vLLM divides the
    logits by the temperature in place)."""
    rng_contract, cpu_only = "mrv2", True

    def __init__(self, correct: bool):
        self.correct = correct

    def sample(self, step: Step) -> SampleResult:
        if self.correct:  # x / t in place, then t = 1: the same processed logits, bit for bit
            t = step.temperature
            rows = torch.repeat_interleave(torch.where(t > 0, t, 1.0), step.num_drafts.long() + 1)
            step.logits.div_(rows[:, None].to(step.logits.dtype))
            step.temperature.copy_(torch.where(t > 0, 1.0, 0.0))
        else:  # greedy at every temperature, through its input only
            step.temperature.zero_()
        return registry.get_impl("reference").sample(step)


@pytest.mark.parametrize("fixture", ["synthetic-filters", "synthetic-mixed"])
def test_what_an_impl_writes_into_its_step_reaches_neither_the_other_side_nor_the_routes(fixture):
    """``place`` gives an impl that does not declare ``keeps_inputs`` a copy: a sampler that zeroes the
    temperature it was given is caught (it was compared with a reference run on the zeroed step, and the
    expected routes read from it: a silent pass), and a correct one that divides the logits in place matches."""
    from replay_harness.compare.runner import run_recording

    rec = Recording(REPO / "fixtures" / fixture)
    reference = registry.get_impl("reference")
    cpu = torch.device("cpu")
    wrong = run_recording(rec, _WritesIntoItsStep(correct=False), reference, cpu)
    assert wrong.real_divergences and wrong.violations
    assert not run_recording(rec, _WritesIntoItsStep(correct=True), reference, cpu).real_divergences
    assert run_recording(rec, reference, "recorded", cpu).ok


def _fixture_params() -> list:
    return [pytest.param(n, f, id=f"{n}-{f}") for n in registry_names() for f in FIXTURES]


@pytest.mark.parametrize("name,fixture", _fixture_params())
def test_impl_replays_every_fixture(name, fixture):
    rec = Recording(REPO / "fixtures" / fixture)
    impl = _load(name)
    limit = FIXTURE_MAX_VOCAB_INTERPRETED.get(name, FIXTURE_MAX_VOCAB_INTERPRETED_DEFAULT)
    if DEVICE.type == "cpu" and not impl.cpu_only and rec.vocab_size > limit:
        pytest.skip(f"vocabulary {rec.vocab_size} too slow under TRITON_INTERPRET=1 (replayed when CUDA is present)")
    valid_routes = set(ROUTE_CODE.values())
    for record in rec:
        step = record.step
        got = _run(impl, step)
        k = step.num_drafts.long()
        assert got.tokens.shape[0] == got.counts.shape[0] == got.routes.shape[0] == step.num_requests
        assert set(got.routes.tolist()) <= valid_routes, got.route_names()
        counts = got.counts.long()
        assert bool(((counts >= 0) & (counts <= k + 1)).all()), (counts.tolist(), k.tolist())
        width = torch.arange(got.tokens.shape[1])
        emitted = width[None, :] < counts[:, None]
        assert bool(((got.tokens >= 0) & (got.tokens < step.vocab_size))[emitted].all())
        refused = got.routes == ROUTE_CODE["refused"]
        assert bool((counts[refused] == 0).all()) and bool((counts[~refused] >= 1).all())
    impl.close()


# ---------------------------------------------------------------------------
# the contract and the registry
# ---------------------------------------------------------------------------


class Bare:
    """A third-party impl with ``sample`` and nothing else."""

    def sample(self, step: Step) -> SampleResult:
        return registry.get_impl("reference").sample(step)


def test_third_party_object_gets_the_defaults():
    impl = as_sampler(Bare(), "bare")
    assert isinstance(impl, Adapted) and isinstance(impl, Sampler) and impl.name == "bare"
    assert (impl.rng_contract, impl.requires_cuda, impl.cpu_only, impl.external, impl.timeout, impl.description) \
        == ("unknown", False, False, False, None, "")
    assert not impl.launchable
    impl.begin_recording("x")  # no-ops, never AttributeError
    with impl:
        pass
    assert as_sampler(Bare()).name == "Bare"
    assert placement(impl, torch.device("meta")) == torch.device("meta")
    step = random_step(torch.Generator().manual_seed(0), CASES["synthetic-edge"])
    assert torch.equal(impl.sample(step).tokens, registry.get_impl("reference").sample(step).tokens)


def test_third_party_hooks_are_used():
    class Full(Bare):
        name, rng_contract, cpu_only = "full", "mrv2", True
        closed, labels = 0, []

        def prepare(self, step):
            return step

        def launch(self, state):
            return state.logits.argmax(1), torch.ones(1, dtype=torch.int32)

        def begin_recording(self, label):
            self.labels.append(label)

        def close(self):
            Full.closed += 1

    impl = as_sampler(Full(), "ignored")
    assert impl.name == "full" and impl.rng_contract == "mrv2" and impl.launchable
    assert placement(impl, torch.device("meta")) == torch.device("cpu")
    impl.begin_recording("rec-a")
    impl.close()
    assert impl.inner.labels == ["rec-a"] and Full.closed == 1
    assert as_sampler(impl) is impl


def test_builtin_impls_subclass_sampler_and_declare_their_hooks():
    for name in registry.BUILTIN:
        try:
            impl = registry.get_impl(name)
        except EnvironmentProblem:
            continue  # e.g. Triton missing: `replay impls` shows it unavailable
        assert not isinstance(impl, Adapted), f"built-in '{name}' should subclass Sampler"
        assert impl.name == name and impl.description and impl.rng_contract != "unknown"


def test_register_makes_a_name_available(monkeypatch):
    monkeypatch.setitem(registry._registered, "bare-test", Bare)
    assert "bare-test" in registry.known_names() and "bare-test" in registry_names()
    impl = registry.get_impl("bare-test")
    assert isinstance(impl, Adapted) and impl.name == "bare-test"


def test_a_builtin_line_adds_the_impl_to_the_parity_tests(monkeypatch):
    monkeypatch.setitem(registry.BUILTIN, "reference-again", "replay_harness.impls.reference:ReferenceSampler")
    assert "reference-again" in registry_names()
    assert any(p.values[0] == "reference-again" for p in _fixture_params())
    assert isinstance(registry.get_impl("reference-again"), Sampler)
