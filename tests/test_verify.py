"""`replay verify`: the statistics are right, the test has power, the command names the failure.

Power tests run the reference and deliberately broken variants (tests/broken_impls.py) on the same
SYNTHETIC steps with the same trials: the reference must pass, each flaw must be caught at the
position and by the statistic that its flaw affects.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from broken_impls import FLAWS, BrokenSampler
from helpers import cli, write_recording
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.checks.verify import VerifyReport, chi_square, finalize, parse_steps, request_law, verify_step
from replay_harness.recording.step import Step
from replay_harness.recording.synthetic import Case

TRIALS = 300
V = 12


def _step(rows: list[list[float]], ks: list[int], drafts: list[int], temps: list[float],
          draft_logits: list[list[float]] | None = None, first_id: int = 0) -> Step:
    """A SYNTHETIC step from explicit probabilities (rows [N, V]); drafts per row, -1 on bonus rows."""
    r = len(ks)
    logits = torch.log(torch.tensor(rows, dtype=torch.float32))
    cu = torch.tensor([0] + list(np.cumsum([k + 1 for k in ks])), dtype=torch.int32)
    positions = torch.cat([torch.arange(100 * (i + 1), 100 * (i + 1) + k + 1) for i, k in enumerate(ks)])
    return Step(logits=logits, cu_num_logits=cu, draft_token_ids=torch.tensor(drafts, dtype=torch.int32),
                positions=positions, temperature=torch.tensor(temps, dtype=torch.float32),
                top_k=torch.zeros(r, dtype=torch.int32), top_p=torch.ones(r, dtype=torch.float32),
                min_p=torch.zeros(r, dtype=torch.float32), seed=torch.arange(r, dtype=torch.int64) + 7,
                request_ids=torch.arange(r, dtype=torch.int64) + first_id,
                draft_logits=None if draft_logits is None else torch.tensor(draft_logits, dtype=torch.float32))


def _row(hot: int, mass: float) -> list[float]:
    """Probability `mass` on token `hot`, the rest spread unevenly over the other tokens."""
    rest = np.arange(1, V + 1, dtype=np.float64)
    rest[hot] = 0
    row = rest / rest.sum() * (1 - mass)
    row[hot] = mass
    return row.tolist()


# Step 0, one-hot drafts: request 0 (T=1, k=2) accepts d0 with 0.35 then d1 with 0.8 (u-shared makes the
# second certain); request 1 (T=0.5, k=1); request 2 plain sample (T=1); request 3 greedy (k=2).
ONE_HOT = _step(
    rows=[_row(0, 0.35), _row(1, 0.8), _row(2, 0.3), _row(3, 0.3), _row(4, 0.2), _row(5, 0.25),
          _row(6, 0.5), _row(6, 0.5), _row(7, 0.5)],
    ks=[2, 1, 0, 2], drafts=[0, 1, -1, 3, -1, -1, 6, 6, -1], temps=[1.0, 0.5, 1.0, 0.0])
# Step 1, draft logits (q differs from p): request 0 (T=0.8, k=2), request 1 (T=1, k=1).
DRAFT_LOGITS = _step(
    rows=[_row(0, 0.3), _row(1, 0.4), _row(2, 0.3), _row(3, 0.3), _row(4, 0.3)],
    ks=[2, 1], drafts=[5, 6, -1, 7, -1], temps=[0.8, 1.0], first_id=10,
    draft_logits=[np.log(_row(5, 0.5)).tolist(), np.log(_row(6, 0.5)).tolist(), np.log(_row(7, 0.6)).tolist()])
STEPS = [ONE_HOT, DRAFT_LOGITS]


def _verify(impl, trials: int = TRIALS, steps=STEPS, twins: bool = True) -> VerifyReport:
    rep = VerifyReport(impl=impl.name, trials=trials, seed=0, alpha=1e-3)
    rng = np.random.default_rng(0)
    for i, s in enumerate(steps):
        rep.units += verify_step("synthetic", i, s, impl, trials, rng, torch.device("cpu"), twins=twins)
    return finalize(rep)


@pytest.fixture(scope="module")
def reference_report() -> VerifyReport:
    return _verify(ReferenceSampler())


def test_reference_passes_every_test(reference_report):
    rep = reference_report
    assert rep.ok, [c.message for c in rep.failures]
    kinds = {c.kind for c in rep.checks}
    assert {"distribution", "acceptance", "independence", "greedy"} <= kinds
    # every stochastic position that trials reach is tested: step 0 request 0 has positions 0, 1, 2
    assert {c.position for c in rep.checks if c.step == 0 and c.request == 0 and c.kind == "distribution"} == {0, 1, 2}
    assert rep.threshold == pytest.approx(1e-3 / rep.num_statistical)


# flaw -> (step, request, kind, position) that must fail
EXPECTED = {
    "u-zero": (0, 0, "acceptance", 0),
    "residual-from-p": (0, 0, "distribution", 0),
    "residual-abs": (1, 0, "distribution", 0),
    "noise-reused": (0, 2, "independence", None),
    "u-shared": (0, 0, "acceptance", 1),
    "temperature-ignored": (0, 1, "distribution", 0),
}


@pytest.mark.parametrize("flaw", FLAWS)
def test_broken_variant_is_caught_where_it_breaks(flaw, reference_report):
    rep = _verify(BrokenSampler(flaw))
    assert not rep.ok
    failed = {(c.step, c.request, c.kind, c.position) for c in rep.failures}
    assert EXPECTED[flaw] in failed, [c.message for c in rep.failures]
    # same steps, same trials, same threshold family: the reference passed exactly these tests
    assert all(c.p_value is None or c.p_value < rep.threshold for c in rep.failures)


def test_reused_noise_has_right_marginals_so_only_twins_can_see_it():
    rep = _verify(BrokenSampler("noise-reused"), steps=[ONE_HOT], twins=False)
    assert rep.ok and "independence" not in {c.kind for c in rep.checks}


class _Rewired:
    """The reference fed a rewritten step: a stand-in for impls that mishandle a parameter."""

    def __init__(self, name, rewrite):
        self.name, self.rewrite, self.cpu_only = name, rewrite, True

    def sample(self, step):
        return ReferenceSampler().sample(self.rewrite(step))


def test_greedy_deviation_and_zero_probability_tokens_fail_exactly():
    import dataclasses

    step = ONE_HOT.select([2, 3])  # a plain T=1 sample and a greedy k=2 request
    step.top_k = torch.tensor([3, 0], dtype=torch.int32)
    assert _verify(ReferenceSampler(), 100, [step]).ok
    sampled_greedy = _Rewired("greedy-sampled",
                              lambda s: dataclasses.replace(s, temperature=torch.ones_like(s.temperature)))
    no_top_k = _Rewired("top-k-ignored", lambda s: dataclasses.replace(s, top_k=torch.zeros_like(s.top_k)))
    greedy = {(c.request, c.kind) for c in _verify(sampled_greedy, 100, [step]).failures}
    support = [c for c in _verify(no_top_k, 100, [step]).failures if c.kind == "support"]
    assert (1, "greedy") in greedy
    assert support and support[0].request == 0 and "probability 0 after sampling params" in support[0].message


def test_laws_follow_the_rejection_sampling_theorem():
    """Fixed-draft laws averaged over d ~ q give p; acceptance averaged gives sum min(p, q)."""
    g = torch.Generator().manual_seed(1)
    target, draft = torch.randn(2, 9, generator=g), torch.randn(1, 9, generator=g)
    p = torch.softmax(target[0].double(), 0).numpy()
    q = torch.softmax(draft[0].double() / 0.8, 0).numpy()
    mix, acc = np.zeros(9), 0.0
    for d in range(9):
        law = request_law(target / 1.0, [d], 0.8, draft, sample_drafts=False)
        mix += q[d] * law.emit[0]
        acc += q[d] * law.accept[0]
    assert np.allclose(mix, p, atol=1e-12)
    assert acc == pytest.approx(np.minimum(p, q).sum())
    sampled = request_law(target, [3], 0.8, draft, sample_drafts=True)
    assert sampled.accept[0] == pytest.approx(np.minimum(p, q).sum()) and np.allclose(sampled.emit[0], p)
    one_hot = request_law(target, [3], 1.0, None)
    assert one_hot.accept[0] == pytest.approx(p[3]) and np.allclose(one_hot.emit[0], p)


def test_collision_probability_matches_simulation():
    """The twin test's expected coincidence rate is the law's own: check it by drawing outcomes."""
    target = torch.log(torch.tensor([_row(0, 0.4), _row(1, 0.6), _row(2, 0.3)]))
    law = request_law(target, [0, 1], 1.0, None)
    rng = np.random.default_rng(0)

    def outcome():
        for j in range(2):
            if rng.random() >= law.accept[j]:
                return j, int(rng.choice(V, p=law.p[j] * (np.arange(V) != j) / (1 - law.p[j, j])))
        return 2, int(rng.choice(V, p=law.p[2]))

    hits = np.mean([outcome() == outcome() for _ in range(20000)])
    assert hits == pytest.approx(law.collision, abs=0.015)


def test_chi_square_merges_sparse_bins_and_matches_scipy():
    from scipy.stats import chisquare

    law = np.array([0.5, 0.3, 0.15, 0.03, 0.02, 0.0])
    obs = np.repeat(np.arange(6), [50, 28, 16, 4, 2, 0])  # n = 100: bins 3 and 4 expect 3 and 2 -> merged
    cs = chi_square(obs, law)
    ref = chisquare([50, 28, 16, 6], [50, 30, 15, 5])
    assert cs.df == 3 and cs.bins == 4
    assert cs.statistic == pytest.approx(ref.statistic) and cs.p_value == pytest.approx(ref.pvalue)
    assert chi_square(np.zeros(3, dtype=np.int64), law) is None  # n = 3: no two bins expect 5


def test_chi_square_false_alarm_rate_is_at_most_nominal():
    """Under the null (exact multinomial draws), p < 0.01 happens in at most about 1% of runs."""
    rng = np.random.default_rng(5)
    law = rng.dirichlet(np.ones(40) * 0.3)
    runs = 3000
    ps = np.array([chi_square(rng.choice(40, size=300, p=law), law).p_value for _ in range(runs)])
    assert (ps < 0.01).mean() <= 0.02
    assert (ps < 0.2).mean() == pytest.approx(0.2, abs=0.04)  # and the test is not degenerate


def test_two_bin_distribution_test_keeps_its_false_alarm_rate_at_the_bonferroni_floor():
    """A peaked row leaves two bins, one expecting 6 of 400. The chi-squared tail there is ~9x too
    liberal at a per-test floor of 5e-5; the exact binomial keeps P(p < floor) <= floor (exact sum)."""
    from scipy.stats import binom

    n, law, floor = 400, np.array([0.985, 0.015]), 5e-5
    rate = sum(binom.pmf(k, n, law[0]) for k in range(n + 1)
               if chi_square(np.repeat([0, 1], [k, n - k]), law).p_value < floor)
    assert rate <= floor


def _peaked_and_plain_step() -> Step:
    """SYNTHETIC: request 0 a T=1.3 plain sample with all mass on one token (nothing testable: one
    chi-squared bin, twins certain to agree); request 1 an ordinary T=1 one-draft request."""
    peaked = [1.0] + [float(np.exp(-60.0))] * (V - 1)
    return _step(rows=[peaked, _row(1, 0.4), _row(2, 0.3)], ks=[0, 1], drafts=[-1, 1, -1], temps=[1.3, 1.0])


def test_a_request_where_nothing_could_be_tested_is_not_reported_as_ok(tmp_path):
    from replay_harness.recording.store import Emitted, RecordingWriter
    from replay_harness.cli.verify import unit_result

    step = _peaked_and_plain_step()
    rep = _verify(ReferenceSampler(), 40, [step])
    peaked, plain = rep.units
    assert peaked.checks == [] and peaked.status == "untestable" and unit_result(peaked) == "not testable"
    assert plain.checks and unit_result(plain) == "ok" and rep.ok
    res = ReferenceSampler().sample(step)
    with RecordingWriter(tmp_path / "rec", vocab_size=V, synthetic=True, source={"synthetic": True}) as w:
        w.write_step(step, Emitted(res.tokens.to(torch.int32), res.counts.to(torch.int32)))
    # 40 trials leave the residual draw of request 1 without power (exit 4, docs/VERIFY.md "Power per mechanism")
    rc, out, err = cli("verify", str(tmp_path / "rec"), "--trials", "100", "--device", "cpu")
    assert rc == 0, (out, err)
    row = next(x for x in out.splitlines() if "random-sample" in x)
    assert "not testable" in row and " 1.3 " in row and " ok " not in row
    assert any(line.strip() == "1 request(s) not testable" for line in out.strip().splitlines()[:-1])


def test_parse_steps():
    assert parse_steps(None, 3) == [0, 1, 2]
    assert parse_steps("2,0-1", 5) == [2, 0, 1]
    for bad in ("x", "7", ",", "1-"):
        with pytest.raises(ValueError):
            parse_steps(bad, 5)


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


def test_cli_greedy_only_fails_on_the_founding_recording_and_names_it():
    rc, out, err = cli("verify", "fixtures/real-founding", "--impl", "greedy-only", "--steps", "0",
                       "--trials", "200", "--device", "cpu")
    assert rc == 1, (out, err)
    line = next(x for x in out.splitlines() if "position 0: distribution test FAILED" in x)
    assert line.startswith("fixtures/real-founding: step 0, request ")
    assert "chi2 = " in line and "df = " in line and "p = " in line
    assert "greedy-only emitted the argmax" in line and "in 100.0% of 200 trials reaching position 0" in line
    assert out.strip().splitlines()[-1].startswith("FAIL: greedy-only on cpu:")


def test_cli_reference_passes_on_a_real_recording_json():
    rc, out, err = cli("verify", "fixtures/real-founding", "--impl", "reference", "--steps", "0",
                       "--trials", "100", "--device", "cpu", "--json")  # 40: the residual draw without power
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] and doc["exit_code"] == 0, (doc["failures"], err)
    assert doc["statistical_tests"] >= 4 and doc["recordings"][0]["steps"] == [0]


def test_cli_guarded_refusals_are_not_a_pass():
    rc, out, _ = cli("verify", "fixtures/real-founding", "--impl", "guarded", "--steps", "0", "--trials", "4",
                     "--device", "cpu")
    assert rc == 1
    assert "guarded refused the request in 4 of 4 trials: not verifiable" in out
    assert "2 request(s) refused" in out


def test_cli_stochastic_passes_on_a_small_synthetic_recording(tmp_path):
    rec = write_recording(tmp_path / "rec", Case("verify-tiny", vocab_size=16, num_requests=1, max_drafts=2,
                                                  steps=1, temperatures=(1.0,), features=frozenset({"no-k0"})))
    rc, out, err = cli("verify", str(rec), "--impl", "stochastic", "--trials", "100", "--device", "cpu")
    assert rc == 0, (out, err)
    assert "PASS: stochastic on cpu:" in out and "0 failed" in out


@pytest.mark.parametrize("args, needle", [
    (["fixtures/no-such-recording"], "no such file"),
    (["fixtures/real-founding", "--steps", "9"], "step 9 does not exist"),
    (["fixtures/real-founding", "--trials", "1"], "--trials must be from 2 to"),
    (["fixtures/real-founding", "--alpha", "2"], "--alpha must lie in (0, 1)"),
    (["--impl", "no-such-impl"], "unknown impl"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, needle):
    rc, out, err = cli("verify", *args)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, (rc, out, err)


# ----------------------------------------------------------------------------- simulated engines on real rows
# The committed SmolLM2-135M fixtures (bf16 rows, V = 49,152). real-mixed: step 0 requests 1 (T=1, k=1) and
# 2 (T=0.7, k=1, a confident row); step 1 request 1 is a plain T=1 sample (the random-sample kernel).
def _verify_fixture(impl, name: str, trials: int, seed: int = 0) -> VerifyReport:
    from replay_harness.recording.store import Recording

    path = f"fixtures/{name}"
    rep = VerifyReport(impl=impl.name, trials=trials, seed=seed, alpha=1e-3)
    rng = np.random.default_rng(seed)
    for record in Recording(path):
        rep.units += verify_step(path, record.index, record.step, impl, trials, rng, torch.device("cpu"))
    return finalize(rep)


def test_position_blind_engine_fails_by_the_position_test_on_real_rows():
    """Noise keyed by (seed, batch row, token): twins in other batch rows get other noise and pass; the
    same seed in the same batch row at other positions repeats its outcome: "noise does not depend on
    position" fails, on the plain sample and on the speculative requests alike."""
    from broken_impls import RowKeyedNoise

    torch.set_num_threads(1)
    rep = _verify_fixture(RowKeyedNoise(), "real-mixed", 100)
    failed = {(c.step, c.request, c.kind) for c in rep.failures}
    assert {c.kind for c in rep.failures} == {"position"}, [c.message for c in rep.failures]
    assert {(0, 1, "position"), (1, 1, "position")} <= failed
    c = next(c for c in rep.failures if c.step == 1)
    assert c.title == "position test (noise does not depend on position)" and c.observed == 1.0
    assert "same batch row with the same seed" in c.message
    assert all(c.passed for c in rep.checks if c.kind == "independence")  # the twin test cannot see it
    ref = _verify_fixture(ReferenceSampler(), "real-mixed", 100)
    assert ref.ok and any(c.kind == "position" for c in ref.checks), [c.message for c in ref.failures]


def test_greedy_at_temperature_fails_on_real_rows():
    from replay_harness.impls.engine_bug import GreedyOnlySampler

    rep = _verify_fixture(GreedyOnlySampler(), "real-founding", 60)
    assert {(0, 0, "distribution"), (0, 0, "acceptance")} <= {(c.step, c.request, c.kind) for c in rep.failures}


def test_monte_carlo_p_value_decides_near_the_threshold():
    """A distribution test whose chi-squared p-value lies near alpha/m is judged by a Monte Carlo p-value
    under the exact multinomial law (simulations stated); one far above it keeps the chi-squared value."""
    from replay_harness.checks.report import Check
    from replay_harness.checks.stats import bin_tokens, monte_carlo_p, simulations_for

    rng = np.random.default_rng(3)
    law = rng.dirichlet(np.ones(30) * 0.3)
    draws = (chi_square(rng.choice(30, size=300, p=law), law) for _ in range(5000))
    cs = next(c for c in draws if 1e-4 < c.p_value < 1e-2 and not c.exact)  # within 100x of the threshold
    far = next(c for c in draws if c.p_value > 0.05 and not c.exact)
    where = dict(recording="r", step=0, request=0, request_id=0, position=0, n=300, message="")
    near_c = Check(kind="distribution", statistic=cs.statistic, df=cs.df, p_value=cs.p_value, bins=cs.probs,
                   method="chi-squared", **where)
    far_c = Check(kind="distribution", statistic=far.statistic, df=far.df, p_value=far.p_value, bins=far.probs,
                  method="chi-squared", **where)
    rep = VerifyReport(impl="x", trials=300, seed=0, alpha=2e-4)  # two tests: threshold 1e-4
    rep.units = [type("U", (), {"checks": [near_c, far_c]})()]
    finalize(rep)
    assert rep.threshold == pytest.approx(1e-4) and rep.simulations == near_c.simulations
    assert near_c.method == "monte-carlo" and near_c.approx_p == cs.p_value and near_c.simulations > 0
    assert far_c.method == "chi-squared" and far_c.p_value == far.p_value
    assert "bins" not in near_c.to_dict() and near_c.to_dict()["simulations"] == near_c.simulations
    # the Monte Carlo p-value is valid: under the law, P(p <= t) <= t (here t = 0.1, 400 draws)
    counts_probs = [bin_tokens(rng.choice(30, size=300, p=law), law) for _ in range(400)]
    ps = [monte_carlo_p(float(((o - 300 * p) ** 2 / (300 * p)).sum()), 300, p, rng, 99)[0] for o, p in counts_probs]
    assert np.mean(np.array(ps) <= 0.1) <= 0.1 + 3 * np.sqrt(0.1 * 0.9 / 400)
    assert simulations_for(5e-5) == 80000


HANG = '''
import json, sys, time
print(json.dumps({"protocol": "replay.exec/1", "name": "hang", "rng_contract": "mrv2"}), flush=True)
for line in sys.stdin:
    time.sleep(600)
'''


def test_cli_external_timeout_names_the_recording_step_not_the_call(tmp_path):
    """--impl-timeout works on verify, and the message quotes the recording's step number (1), not how
    many impl calls verify made."""
    import sys

    prog = tmp_path / "hang.py"
    prog.write_text(HANG)
    rc, out, err = cli("verify", "fixtures/real-founding", "--steps", "1", "--trials", "4",
                       "--impl", f"exec:{sys.executable} {prog}", "--impl-timeout", "1", "--device", "cpu")
    assert rc == 3, out + err
    assert "no reply to step 1 of fixtures/real-founding within 1 s (--impl-timeout)" in err, err
    rc, _, err = cli("verify", "--impl", "reference", "--impl-timeout", "5")
    assert rc == 2 and "--impl-timeout is only for external impls" in err


def test_the_steps_verify_sends_hold_unique_request_ids():
    """docs/FIXTURES.md: request ids are unique in a step, and an ``exec:`` program may check it. verify's calls
    hold many copies of one request plus the step's other requests (context): every id differs, the context
    requests keep their recorded ids."""
    from pathlib import Path

    from replay_harness.checks.trials import Group, context_of, copies_step
    from replay_harness.recording.store import Recording

    rec = Recording(Path(__file__).resolve().parents[1] / "fixtures" / "synthetic-mixed")
    step = next(s.step for s in rec if len(context_of(s.step, 0)) > 0)
    context = context_of(step, 0)
    groups = [Group(seeds=torch.arange(6, dtype=torch.int64)), Group(seeds=torch.arange(6, dtype=torch.int64),
                                                                    shift=1)]
    ids = copies_step(step, 0, groups, 0, 6, context).request_ids.tolist()
    assert len(ids) == 12 + len(context) and len(set(ids)) == len(ids)
    assert ids[12:] == step.request_ids[context].tolist()


def test_cli_summary_is_one_fact_a_line_and_a_short_verdict_last():
    """Issue 66 item 5: the summary was one 312-character line in CI logs; now the breakdown is one fact a line
    and the verdict last, short."""
    rc, out, _ = cli("verify", "fixtures/real-founding", "--impl", "guarded", "--steps", "0", "--trials", "4",
                     "--device", "cpu")
    lines = out.rstrip().splitlines()
    assert lines[-1].startswith("FAIL: guarded on cpu: ") and len(lines[-1]) <= 100, lines[-1]
    assert any(line.strip().startswith("2 request(s) refused") for line in lines[:-1])
    assert any("statistical tests" in line and "Bonferroni" in line for line in lines[:-1]) or \
        any(line.strip() == "no statistical test ran" for line in lines[:-1])
