"""`replay verify` and `replay audit` on the verification methods (docs/VERIFY.md, "Verification methods: lossless or
lossy"; docs/AUDIT.md, "Verification methods and probabilistic drafts").

Standard and block verification must pass as lossless; FLy must be reported lossy with its divergence (exit 0, the
verdict LOSSY), never a silent pass nor a failure; block verification implemented token-wise (vllm-ascend#7807) and
a drafter sharing the verifier's noise (local-inference-lab/vllm#205) must fail, naming the method and the
mechanism; a correct engine with its own RNG (impls/own_rng.py) must pass. All steps here are SYNTHETIC.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from helpers import main_inproc
from replay_harness.checks.audit import audit_steps
from replay_harness.checks.method_laws import block_law, length_law
from replay_harness.checks.stats import chi_square
from replay_harness.checks.verify import VerifyReport, finalize, verify_step
from replay_harness.impls import register
from replay_harness.impls.engine_bug import SharedDraftNoiseSampler, TokenwiseBlockSampler
from replay_harness.impls.own_rng import OwnRngSampler
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.drafts import derive_drafts
from replay_harness.oracle.methods import Method, verify_block, verify_fly
from replay_harness.recording.step import Step

V = 16
TRIALS = 300
CODES = {"standard": 0, "block": 1, "fly": 2}


def method_step(method: str, draft_logits: bool, probabilistic: bool = False, seed: int = 0, requests: int = 2,
                k: int = 3, salt: int | None = None, argmax_drafts: bool = False) -> Step:
    """A SYNTHETIC step: ``requests`` requests (temperatures 1 and 0.8, k drafts each, V = 16, flattened rows),
    verified by ``method`` (FLy: window 1, entropy threshold 0.5 over the top 5). Drafts: random ids, or with
    ``probabilistic`` the contract drafter's draws (``salt``: another noise salt than the contract's), or with
    ``argmax_drafts`` each row's argmax."""
    gen = torch.Generator().manual_seed(seed)
    rows = requests * (k + 1)
    logits = torch.randn(rows, V, generator=gen) * 1.2
    temps = torch.tensor([1.0, 0.8] * requests, dtype=torch.float32)[:requests]
    cu = torch.arange(0, rows + 1, k + 1, dtype=torch.int32)
    drafts = torch.randint(0, V, (rows,), generator=gen, dtype=torch.int32)
    if argmax_drafts:  # likely drafts: FLy's deferral then often turns a rejection into an acceptance
        drafts = torch.argmax(logits, -1).to(torch.int32)
    drafts[k::k + 1] = -1
    step = Step(logits=logits, cu_num_logits=cu, draft_token_ids=drafts,
                positions=torch.cat([torch.arange(50 * (i + 1), 50 * (i + 1) + k + 1) for i in range(requests)]),
                temperature=temps, top_k=torch.zeros(requests, dtype=torch.int32),
                top_p=torch.ones(requests, dtype=torch.float32), min_p=torch.zeros(requests, dtype=torch.float32),
                seed=torch.arange(requests, dtype=torch.int64) + 11,
                request_ids=torch.arange(requests, dtype=torch.int64),
                draft_logits=(logits[torch.arange(rows) % (k + 1) != k] + torch.randn(requests * k, V, generator=gen))
                if draft_logits else None,
                verify_method=torch.full((requests,), CODES[method], dtype=torch.int8),
                fly_window=torch.full((requests,), 1, dtype=torch.int32),
                fly_entropy_threshold=torch.full((requests,), 0.5, dtype=torch.float32),
                fly_entropy_top_k=torch.full((requests,), 5, dtype=torch.int32),
                draft_sampling=torch.full((requests,), int(probabilistic), dtype=torch.int8))
    if probabilistic:
        for r in range(requests):
            kw = {} if salt is None else {"salt": salt}
            step.draft_token_ids[r * (k + 1):r * (k + 1) + k] = torch.tensor(derive_drafts(step, r, **kw))
    return step


def verify(impl, steps, trials: int = TRIALS, seed: int = 0) -> VerifyReport:
    report = VerifyReport(impl=impl.name, trials=trials, seed=seed, alpha=1e-3)
    for i, s in enumerate(steps):
        report.units += verify_step("syn", i, s, impl, trials, None, torch.device("cpu"), seed_key=(seed, 0))
    return finalize(report)


# ------------------------------------------------------------------------------------------------ the laws
@pytest.mark.parametrize("draft_logits", [False, True])
def test_block_and_fly_length_laws_match_the_oracle(draft_logits):
    """The exact law of the accepted length (checks/method_laws.py) against 1,000 runs of the oracle's walk
    (oracle/methods.py) with distinct seeds: Pearson's X^2 over the k + 1 lengths (sparse ones merged), p > 1e-5.
    Drafts: each draft row's argmax (so p < q at some of them, and several lengths are likely)."""
    step = method_step("block", draft_logits)
    rows = step.logits[:4]
    dl = step.draft_logits[:3] if draft_logits else None
    drafts = (torch.argmax(dl, -1) if draft_logits else torch.argmax(rows[:3], -1)).tolist()
    p = torch.softmax(rows.double(), -1).numpy()
    q = None if dl is None else torch.softmax(dl.double(), -1).numpy()
    positions = list(range(50, 54))
    fly = Method("fly", 1, 0.5, 5)
    for method, run in ((Method("block"), lambda s: verify_block(rows, drafts, positions, 1.0, s, dl)),
                        (fly, lambda s: verify_fly(rows, drafts, positions, 1.0, s, dl, 1, 0.5, 5))):
        law = length_law(method, rows, p, q, np.array([drafts]))[0][0]
        lengths = np.array([len(run(s)) - 1 for s in range(1000)])
        cs = chi_square(lengths, law)  # lengths expected < 5 times merged (checks/stats.py)
        assert cs is not None and cs.df >= 1 and cs.p_value > 1e-5, (method.name, np.bincount(lengths), law)
        assert (law[lengths] > 0).all()


def test_block_law_with_a_placeholder_ends_the_block():
    p = np.full((3, 4), 0.25)
    law, _ = block_law(p, None, np.array([[1, -1]]))
    assert law.shape == (1, 3) and law[0, 2] == 0 and abs(law[0, 1] - 0.25) < 1e-12


# ------------------------------------------------------------------------------------------ lossless methods
@pytest.mark.parametrize("impl", [ReferenceSampler(), OwnRngSampler()], ids=["reference", "own-rng"])
def test_standard_and_block_pass_as_lossless(impl):
    steps = [method_step("standard", False), method_step("block", False, seed=1), method_step("block", True, seed=2)]
    report = verify(impl, steps)
    assert report.ok and not report.inconclusive, [c.message for c in report.failures]
    block = [c for c in report.checks if c.step > 0]
    assert any("emitted path" in c.message for c in block) and any("jointly" in c.message for c in block)
    assert not any(c.kind == "lossy" for c in report.checks)


def test_tokenwise_block_fails_naming_method_and_mechanism():
    report = verify(TokenwiseBlockSampler(), [method_step("block", False, seed=1), method_step("block", True, seed=2)])
    assert not report.ok
    messages = " ".join(c.message for c in report.failures)
    assert "(block)" in messages and "token-wise" in messages and "vllm-ascend#7807" in messages
    assert {c.kind for c in report.failures} >= {"acceptance", "distribution"}


# ------------------------------------------------------------------------------------------------ FLy: lossy
@pytest.mark.parametrize("impl", [ReferenceSampler(), OwnRngSampler()], ids=["reference", "own-rng"])
def test_fly_is_reported_lossy_with_its_divergence_not_failed(impl):
    report = verify(impl, [method_step("fly", False, seed=3, argmax_drafts=True)])
    assert report.ok, [c.message for c in report.failures]
    lossy = [c for c in report.checks if c.kind == "lossy"]
    assert len(lossy) == 2 and all(c.passed for c in lossy)
    worst = max(lossy, key=lambda c: c.expected)
    assert worst.expected > 0.05 and "lossy by design" in worst.message
    assert abs(worst.observed - worst.expected) < 0.1  # measured agrees with FLy's exact law


def test_cli_fly_fixture_verdict_is_lossy_exit_0():
    code, out, _ = main_inproc("verify", "fixtures/real-method-fly", "--trials", "100")
    assert code == 0, out
    assert "LOSSY (by design, not a failure)" in out and "total variation" in out
    assert out.strip().splitlines()[-1].startswith("LOSSY: reference")


# -------------------------------------------------------------------------------- probabilistic drafts: noise
def test_shared_draft_noise_fails_by_the_noise_reuse_test():
    steps = [method_step("standard", True, probabilistic=True, seed=4), method_step("block", True, True, seed=5)]
    report = verify(SharedDraftNoiseSampler(), steps)
    reuse = [c for c in report.failures if "noise-reuse" in c.message]
    assert reuse and {c.step for c in reuse} == {0, 1}
    assert all("reuses the rejected draft's noise" in c.message and "#205" in c.message for c in reuse)
    assert "(block, probabilistic drafts)" in " ".join(c.message for c in reuse)


@pytest.mark.parametrize("impl", [ReferenceSampler(), OwnRngSampler()], ids=["reference", "own-rng"])
def test_correct_engines_pass_the_noise_reuse_test(impl):
    steps = [method_step("standard", True, probabilistic=True, seed=4), method_step("block", True, True, seed=5)]
    report = verify(impl, steps)
    assert report.ok, [c.message for c in report.failures]
    assert any("noise-reuse" in c.message for c in report.checks)


def test_cli_tokenwise_block_and_shared_noise_exit_1():
    register("tokenwise-block", TokenwiseBlockSampler)
    register("shared-draft-noise", SharedDraftNoiseSampler)
    code, out, _ = main_inproc("verify", "fixtures/real-method-block", "--impl", "tokenwise-block", "--trials", "200")
    assert code == 1 and "(block)" in out and "vllm-ascend#7807" in out, out
    code, out, _ = main_inproc("verify", "fixtures/real-method-probabilistic", "--impl", "shared-draft-noise",
                               "--trials", "200")
    assert code == 1 and "noise-reuse test" in out and "reuses the rejected draft's noise" in out, out


# --------------------------------------------------------------------------------------------------- audit
def _recorded(step: Step, impl, copies: int, seed: int = 0) -> list[tuple[Step, torch.Tensor, torch.Tensor]]:
    """``copies`` SYNTHETIC request-steps per request of ``step`` (each its own seed and request id; probabilistic
    drafts re-drawn by the contract drafter for that seed), emitted by ``impl``."""
    out = []
    for c in range(copies):
        s = step.select(list(range(step.num_requests)))
        s.seed = torch.arange(step.num_requests, dtype=torch.int64) + 1000 * c + seed
        s.request_ids = torch.arange(step.num_requests, dtype=torch.int64) + step.num_requests * c
        if s.draft_sampling is not None and int(s.draft_sampling[0]) == 1:
            k = int(s.num_drafts[0])
            for r in range(s.num_requests):
                s.draft_token_ids[r * (k + 1):r * (k + 1) + k] = torch.tensor(derive_drafts(s, r))
        res = impl.sample(s)
        out.append((s, res.tokens, res.counts))
    return out


def test_audit_shared_draft_noise_and_unsalted_drafts_are_findings():
    step = method_step("standard", True, probabilistic=True, seed=6, requests=4)
    ok = audit_steps(_recorded(step, ReferenceSampler(), 40))
    assert not [f for f in ok.findings if f.kind == "shared-draft-noise"], [f.message for f in ok.findings]
    assert any(t.test == "draft-noise-reuse" for t in ok.tests)
    bad = audit_steps(_recorded(step, SharedDraftNoiseSampler(), 40))
    assert any(f.kind == "shared-draft-noise" and f.test == "draft-noise-reuse" for f in bad.findings)
    unsalted = method_step("standard", True, probabilistic=True, seed=6, requests=4, salt=0)
    res = ReferenceSampler().sample(unsalted)
    found = audit_steps([(unsalted, res.tokens, res.counts)])
    certain = [f for f in found.findings if f.kind == "shared-draft-noise"]
    assert certain and "verifier's own noise key" in certain[0].message


def test_audit_block_and_fly_use_their_own_acceptance_law():
    for method in ("block", "fly"):
        result = audit_steps(_recorded(method_step(method, False, seed=7, requests=4, argmax_drafts=True),
                                       ReferenceSampler(), 40))
        assert not [f for f in result.findings if f.kind == "acceptance-rate"], [f.message for f in result.findings]
        assert any(t.test == "method-accept-high" for t in result.tests)
    lossy = [n for n in result.notes if n.kind == "lossy-method"]
    assert lossy and "lossy by design" in lossy[0].message
    wrong = audit_steps(_recorded(method_step("block", False, seed=7, requests=4), TokenwiseBlockSampler(), 40))
    assert any(f.kind == "acceptance-rate" and f.test == "method-accept-high" for f in wrong.findings)


def test_trial_drafts_are_the_contract_drafters_draws():
    """verify's trial drafts of a probabilistic request (all trials at once) equal oracle/drafts.py's, trial by
    trial, at every position shift."""
    from replay_harness.checks.laws import request_law
    from replay_harness.checks.methods_verify import trial_drafts
    from replay_harness.oracle.rng import DRAFT_NOISE_SALT

    step = method_step("block", True, probabilistic=True, seed=12)
    law = request_law(step.logits[:4], step.draft_token_ids[:3].tolist(), 1.0, step.draft_logits[:3])
    seeds = torch.tensor([5, -7, 2 ** 40 + 3], dtype=torch.int64)
    got = trial_drafts(step, 0, law, np.random.default_rng(0), [(seeds, 0), (seeds, 4)])
    want = [derive_drafts(step, 0, salt=DRAFT_NOISE_SALT + shift, seed=int(s)) for shift in (0, 4) for s in seeds]
    assert got.tolist() == want


class FastEngine(ReferenceSampler):
    """A correct engine for the false-alarm measurement, vectorised over the copies of one request (what verify
    sends): uniforms and inverse-CDF draws from a splitmix64 hash of (seed, position, purpose), numpy noise of its
    own. Accepted lengths follow checks/method_laws.py (pinned against the oracle above), resamples its rows."""

    name = "fast-numpy"
    rng_contract = "numpy-splitmix"

    @staticmethod
    def _u(seed: np.ndarray, pos: np.ndarray, purpose: int) -> np.ndarray:
        m = np.uint64(0xFFFFFFFFFFFFFFFF)
        with np.errstate(over="ignore"):
            h = seed.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ pos.astype(np.uint64) * np.uint64(
                0xBF58476D1CE4E5B9) ^ np.uint64(purpose * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF)
            for _ in range(2):
                h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9) & m
                h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB) & m
                h ^= h >> np.uint64(31)
        return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)

    def sample(self, step):
        from replay_harness.checks.method_laws import length_law, resample_row
        from replay_harness.oracle.sampling_params import apply_sampling_params
        from replay_harness.recording.step import ROUTE_CODE, SampleResult, expected_route

        k, n, t = int(step.num_drafts[0]), step.num_requests, float(step.temperature[0])
        assert (step.num_drafts == k).all() and t > 0  # copies of one stochastic request
        rows = apply_sampling_params(step)[:k + 1]
        p = torch.softmax(rows.double(), -1).numpy()
        q = None if step.draft_logits is None else torch.softmax(step.draft_logits[:k].double() / t, -1).numpy()
        drafts = step.draft_token_ids.view(n, k + 1)[:, :k].long().numpy()
        seeds, pos = step.seed.numpy(), step.positions.view(n, k + 1).numpy()
        from replay_harness.oracle.methods import method_of

        method = method_of(step, 0)
        law, c = length_law(method, rows, p, q, drafts)
        u = self._u(seeds, pos[:, 0], 1)
        lengths = (u[:, None] > np.cumsum(law, axis=1)).sum(axis=1)
        result = SampleResult.empty(n, k)
        for i in range(n):
            j = int(lengths[i])
            row = resample_row(method, p, q, j, int(drafts[i, j]) if j < k else -1,
                               float(c[i, j - 1]) if c is not None and j > 0 else 0.0)
            cdf = np.cumsum(row)
            tok = int(min(np.searchsorted(cdf, self._u(seeds[i:i + 1], pos[i, j:j + 1], 2)[0] * cdf[-1], "right"),
                          row.size - 1))
            out = drafts[i, :j].tolist() + [tok]
            result.tokens[i, :len(out)] = torch.tensor(out)
            result.counts[i] = len(out)
            result.routes[i] = ROUTE_CODE[expected_route(t, k)]
        return result


# --------------------------------------------------------------------------------- false-alarm rate (slow)
@pytest.mark.slow
def test_false_alarm_rate_of_the_method_checks():
    """Runs of `verify` (alpha = 0.001, 200 trials) of a correct engine (FastEngine) on SYNTHETIC block (one-hot and
    draft-logit drafts), FLy and probabilistic-draft steps, one seed each; the number of runs from
    REPLAY_METHOD_ALARM_RUNS (default 6). Measured with 300 (docs/VERIFY.md, "Verification methods: lossless or
    lossy"). A correct engine's family-wise rate is at most alpha = 0.1%."""
    runs = int(os.environ.get("REPLAY_METHOD_ALARM_RUNS", "6"))
    steps = [method_step("block", True, seed=8, requests=1),
             method_step("fly", False, seed=9, requests=1, argmax_drafts=True),
             method_step("block", True, probabilistic=True, seed=10, requests=1),
             method_step("block", False, seed=11, requests=1, argmax_drafts=True)]
    alarms, tests = [], 0
    for run in range(runs):
        report = verify(FastEngine(), steps, trials=200, seed=run)
        tests += report.num_statistical
        if not report.ok:
            alarms.append((run, [c.message for c in report.failures]))
    print(f"false alarms: {len(alarms)} of {runs} runs ({tests} statistical tests): {alarms}")
    assert len(alarms) <= max(1, runs // 100), alarms  # at most alpha = 0.1% expected; 1% tolerated
