"""`replay bench` / `replay synth`: overrides, the greedy-only kernel path, timing helpers, kernel counting,
the coverage guard (exit 4), report formats, derived steps. CPU only (Triton interpreter), SYNTHETIC data."""
from __future__ import annotations

import csv
import json
from collections import Counter

import pytest
import torch

from helpers import TOOLS, cli, load_tool, write_recording
from replay_harness.bench.ab import Side, _callables, floor_bytes, run_bench, split_by_route
from replay_harness.bench.coverage import SideCoverage, judge, pick_kernel_counts, short_kernel_name, triton_launches
from replay_harness.bench.timing import bootstrap_ratio, rotation_count, time_calls
from replay_harness.bench import csvlog
from replay_harness.bench.report import read_csv
from replay_harness.recording.derive import derive_steps, resize_rows
from replay_harness.errors import EXIT_INCONCLUSIVE, InputError, UsageError
from replay_harness.recording.store import Recording
from replay_harness.impls import get_impl
from replay_harness.impls.engine_bug import GreedyOnlySampler, drafted_greedy
from replay_harness.bench.overrides import Overrides, apply_overrides
from replay_harness.recording.synthetic import Case, random_step

CPU = torch.device("cpu")
TINY = Case("tiny-founding", vocab_size=64, num_requests=3, max_drafts=2, steps=2, temperatures=(1.0,),
            features=frozenset({"no-k0", "peaked"}))
TINY_GREEDY = Case("tiny-greedy", vocab_size=64, num_requests=3, max_drafts=2, steps=2, temperatures=(0.0,),
                   features=frozenset({"no-k0"}))
MIXED = Case("small-mixed", vocab_size=97, num_requests=6, max_drafts=3, temperatures=(0.0, 0.7, 1.0),
             features=frozenset({"ragged", "ties", "placeholders", "top-k", "min-p"}))


@pytest.fixture(scope="module")
def founding(tmp_path_factory):
    return write_recording(tmp_path_factory.mktemp("b") / "tiny-founding", TINY)


@pytest.fixture(scope="module")
def greedy(tmp_path_factory):
    return write_recording(tmp_path_factory.mktemp("b") / "tiny-greedy", TINY_GREEDY)


def _sides(a, b=None, ov_a=Overrides(), ov_b=None):
    sides = [Side("A", a, get_impl(a), ov_a)]
    if b is not None:
        sides.append(Side("B", b, get_impl(b), ov_b if ov_b is not None else ov_a))
    return sides


# -- overrides ---------------------------------------------------------------


def test_overrides_set_parameters_and_drop_drafts():
    step = random_step(torch.Generator().manual_seed(1), MIXED)
    out = apply_overrides(step, Overrides(temperature=0.0, top_p=0.5, top_k=7))
    assert torch.equal(out.temperature, torch.zeros(6)) and torch.equal(out.top_p, torch.full((6,), 0.5))
    assert torch.equal(out.top_k, torch.full((6,), 7, dtype=torch.int32)) and out.logits is step.logits
    assert torch.equal(step.top_p, random_step(torch.Generator().manual_seed(1), MIXED).top_p)  # input untouched
    plain = apply_overrides(step, Overrides(drop_drafts=True))
    first = step.cu_num_logits[:-1].long()
    assert plain.logits.shape == (6, 97) and torch.equal(plain.logits, step.logits[first])
    assert plain.cu_num_logits.tolist() == list(range(7)) and plain.max_drafts == 0
    assert plain.draft_token_ids.tolist() == [-1] * 6 and torch.equal(plain.positions, step.positions[first])
    assert plain.expected_routes() == ["greedy-sample" if t == 0 else "random-sample"
                                       for t in step.temperature.tolist()]
    assert Overrides(temperature=0.0, drop_drafts=True).label() == "T=0,drop-drafts"
    for bad in (dict(temperature=-1.0), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-2)):
        with pytest.raises(UsageError):
            Overrides(**bad)


# -- greedy-only on the kernels ----------------------------------------------


def test_greedy_only_kernel_path_matches_the_cpu_oracle():
    gen = torch.Generator().manual_seed(3)
    bug = GreedyOnlySampler()
    for i in range(2):
        step = random_step(gen, MIXED, i)
        mod = drafted_greedy(step)
        drafted = step.num_drafts > 0
        assert torch.equal(mod.temperature[drafted], torch.zeros(int(drafted.sum())))
        assert torch.equal(mod.temperature[~drafted], step.temperature[~drafted])
        oracle, kernels = bug.sample(step), bug.sample_kernels(step)
        assert oracle.route_names() == kernels.route_names()
        assert "greedy-verify" in oracle.route_names() and "random-sample" in oracle.route_names()
        assert torch.equal(oracle.counts, kernels.counts) and torch.equal(oracle.tokens, kernels.tokens)


# -- helpers -------------------------------------------------------------------


def test_rotation_floor_bytes_and_split():
    assert rotation_count(10 << 20, 50 << 20, warm_l2=False) == 10  # 2 x 50 MiB / 10 MiB
    assert rotation_count(1 << 30, 50 << 20, warm_l2=False) == 2  # always at least 2 ...
    assert rotation_count(3 << 30, 50 << 20, warm_l2=False) == 1  # ... unless memory forbids
    assert rotation_count(1 << 10, 50 << 20, warm_l2=False) == 256  # capped
    assert rotation_count(10 << 20, 50 << 20, warm_l2=True) == 1
    step = random_step(torch.Generator().manual_seed(1), MIXED)
    ks, row = step.num_drafts.tolist(), 97 * 4
    routes = step.expected_routes()
    assert floor_bytes(step, routes) == sum(k + 1 for k in ks) * row
    refused = ["refused"] + routes[1:]
    assert floor_bytes(step, refused) == (sum(k + 1 for k in ks) - ks[0] - 1) * row
    parts = split_by_route(step)
    assert sum(s.num_requests for _, s in parts) == 6
    for route, sub in parts:
        assert set(sub.expected_routes()) == {route}


def test_csv_layout_round_trip_and_earlier_files(tmp_path):
    env = {"gpu": "cpu", "torch": "2.x", "clock": "cpu-wall"}
    rec = {"case": "V1000 R1 k0 top_p=1.0", "impl": "gumbel-max", "family": "ours", "vocab": 1000, "requests": 1,
           "clock": "cuda-events", "gpu": "cpu",  # an ID column beats the environment; an environment key goes
           "max_drafts": 0, "top_p": 1.0, "mode": "eager-cold", "round": 1, "median_us": 2.5, "p20_us": 2.0,
           "p80_us": 3.0, "bytes": 4000, "gbps": None}
    path = tmp_path / "kernels.csv"
    csvlog.write(path, [rec], env)
    got_env, recs = csvlog.pivot(list(csv.DictReader(path.open())))
    assert got_env == env and len(recs) == 1 and recs[0]["median_us"] == 2.5 and recs[0]["gbps"] is None
    assert recs[0]["impl"] == "gumbel-max" and recs[0]["vocab"] == "1000" and recs[0]["side"] == ""
    assert recs[0]["clock"] == "cuda-events" and "gpu" not in recs[0]
    with pytest.raises(ValueError):
        csvlog.long_rows([{"not_a_column": 1}], {})
    with pytest.raises(InputError):
        read_csv(path)  # a kernel-benchmark CSV has no recorded steps to plot
    old = tmp_path / "old.csv"  # one row per measurement, as `replay bench --csv` wrote before the long layout
    old.write_text("label,route_mix,step,group,median_us,p20_us,p80_us,clock,recording,gpu\n"
                   "x,random-sample,0,all,5,4,6,cpu-wall,r,cpu\n")
    assert read_csv(old)[0]["median_us"] == 5.0 and read_csv(old)[0]["step"] == 0


class _LogLaunch:
    """A launch-timed impl that only logs which logits buffer each launch reads."""

    def __init__(self, key, log):
        self.key, self.log = key, log

    def prepare(self, step):
        return step

    def launch(self, state):
        self.log.append((self.key, state.logits.data_ptr()))


def test_rotation_gives_every_call_a_cold_unshared_copy():
    # regression: copy 0 was the step's own logits, shared by A and B (the second side of a round read
    # what the first had just pulled into L2), timed round i re-read the copy warm-up call i had just read,
    # and nothing evicted the copies that cloning had left in L2
    step = random_step(torch.Generator().manual_seed(2), TINY)
    log = []
    sides = [Side("A", "fake", _LogLaunch("A", log)), Side("B", "fake", _LogLaunch("B", log))]
    calls = {s.key: _callables(s, step, 8, 0)[0] for s in sides}
    time_calls(calls, {"A": "cpu-wall", "B": "cpu-wall"}, repeats=4, warmup=2, flush=lambda: log.append("flush"))
    assert log.index("flush") == 4 and all(isinstance(x, tuple) for x in log[:4])  # after all warm-up calls
    ptrs = {k: [p for e in log if e != "flush" and e[0] == k for p in e[1:]] for k in "AB"}
    for k in "AB":
        assert len(ptrs[k]) == 6 and len(set(ptrs[k])) == 6  # 8 copies: no call re-reads a copy
    assert not set(ptrs["A"]) & set(ptrs["B"]) and step.logits.data_ptr() not in ptrs["A"] + ptrs["B"]


@pytest.mark.gpu
def test_a_side_that_syncs_the_host_does_not_make_the_next_sides_timing_host_bound():
    """A peer whose call syncs the host (``.item()``) drains the device; the side timed after it must still be
    timed at the device's pace (its own sleep before each call), not at the pace the host enqueues its launches."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import statistics

    x = torch.zeros(1, device="cuda")

    def many_small():  # 40 launches of almost no device work: the host's enqueue is slower than the device
        for _ in range(40):
            x.add_(1)

    def syncs():
        x.sum().item()

    alone, _ = time_calls({"B": [many_small]}, {"B": "cuda-events"}, repeats=20, warmup=2)
    mixed, ahead = time_calls({"A": [syncs], "B": [many_small]}, {"A": "cuda-events", "B": "cuda-events"},
                              repeats=20, warmup=2)
    assert statistics.median(mixed["B"]) < 1.3 * statistics.median(alone["B"]) + 5, (alone["B"], mixed["B"])
    assert ahead["B"] >= 0.9 and ahead["A"] < 0.5  # the side that syncs the host is the one flagged


def test_bootstrap_ratio():
    point, lo, hi = bootstrap_ratio([([2.0] * 5, [1.0] * 5), ([4.0] * 5, [2.0] * 5)], resamples=500)
    assert (point, lo, hi) == (2.0, 2.0, 2.0)
    rng = torch.Generator().manual_seed(0)
    pairs = [((3.0 + torch.rand(20, generator=rng)).tolist(), (1.0 + torch.rand(20, generator=rng)).tolist())
             for _ in range(4)]
    point, lo, hi = bootstrap_ratio(pairs, resamples=1000)
    assert lo < point < hi and 2.0 < lo and hi < 3.5


def test_triton_launch_counter_counts_and_restores():
    from triton.runtime.interpreter import InterpretedFunction
    from replay_kernels.verify.stochastic import StochasticSampler

    before = InterpretedFunction.run
    step = random_step(torch.Generator().manual_seed(5), TINY)
    for fused_below, per_launch in ((0, None), (1 << 30, 1)):  # one launch per draft position, or one for all
        impl = StochasticSampler(fused_below=fused_below)
        state = impl.prepare(step)
        with triton_launches() as counts:
            impl.launch(state)
            impl.launch(state)
        assert InterpretedFunction.run is before
        assert state.positions_launched > 1 and state.fused == (per_launch == 1)
        assert counts == Counter({"_position_kernel": 2 * (per_launch or state.positions_launched), "_draw_kernel": 2})
    # CUDA profiler names are shortened the same way for Triton and torch kernels
    assert short_kernel_name("_position_kernel") == "_position_kernel"
    assert short_kernel_name("void at::native::(anonymous namespace)::fill_kernel<long, 4>(int, long*)") == \
        "fill_kernel"


# -- the coverage guard ------------------------------------------------------


def _cov(**routes) -> SideCoverage:
    c = SideCoverage()
    for k, v in routes.items():
        c.requests_by_route[k.replace("_", "-")] = v
        c.requests += v
    c.kernels = Counter({"k": 1})
    return c


class _M:  # a stand-in measurement (judge only reads clock, timed, device_busy, side and label)
    clock, timed, device_busy, side, label = "cpu-wall", "launch", None, "A", "greedy-only"

    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_judge_names_the_side_whose_calls_the_host_did_not_keep_ahead_of():
    sides = _sides("greedy-only", "stochastic")  # impls that load without the peers (CI has none)
    cov = {"A": _cov(greedy_verify=3), "B": _cov(stochastic_verify=3)}
    ms = [_M(side="A", label="greedy-only", device_busy=1.0), _M(side="B", label="stochastic", device_busy=0.0),
          _M(side="A", label="greedy-only", device_busy=0.95)]
    notes = [n for n in judge(sides, cov, ms, [], CPU).notes if "ahead of the device" in n]
    assert len(notes) == 1 and notes[0].startswith("stochastic: the host enqueued only 0%")
    ms = [_M(side="A", label="greedy-only", device_busy=None)]  # no sleep kernel: unknown, no note
    assert not [n for n in judge(sides, cov, ms, [], CPU).notes if "ahead of the device" in n]


def test_judge_rules():
    sides = _sides("greedy-only", "stochastic")
    ok = judge(sides, {"A": _cov(greedy_verify=3), "B": _cov(stochastic_verify=3)}, [_M()], [], CPU)
    assert ok.conclusive and not ok.reasons
    none = judge(sides, {"A": _cov(greedy_verify=3), "B": _cov(greedy_verify=3)}, [_M()], [], CPU)
    assert not none.conclusive and "no request went down a stochastic route" in none.reasons[0]
    # naming the path under test replaces the default check; A:ROUTE applies to A only
    named = judge(sides, {"A": _cov(greedy_verify=3), "B": _cov(greedy_verify=3)}, [_M()],
                  [(None, "greedy-verify")], CPU)
    assert named.conclusive
    missing = judge(sides, {"A": _cov(greedy_verify=3), "B": _cov(stochastic_verify=3)}, [_M()],
                    [("A", "stochastic-verify")], CPU)
    assert not missing.conclusive and "greedy-only sent no request down stochastic-verify" in missing.reasons[0]
    assert judge(sides, {"A": _cov(greedy_verify=3), "B": _cov(stochastic_verify=3)}, [_M()],
                 [("B", "stochastic-verify")], CPU).conclusive
    drafted = _cov(refused=3)
    drafted.rows_by_route["refused"] = 9  # the refused requests had drafts (k = 2)
    refused = judge(_sides("serial-scan", "gumbel-max"), {"A": drafted, "B": _cov(random_sample=3)}, [_M()], [], CPU)
    assert not refused.conclusive and "refused every request" in refused.reasons[0] and "--drop-drafts" in \
        refused.reasons[0]
    same = judge(_sides("stochastic", "stochastic"), {"A": _cov(random_sample=2), "B": _cov(random_sample=2)},
                 [_M()], [], CPU)
    assert not same.conclusive and "same impl" in same.reasons[0]
    assert not judge(sides, {"A": _cov(), "B": _cov()}, [], [], CPU).conclusive  # nothing measured


def test_kernel_count_an_empty_profile_is_launched_none():
    # regression: an impl that launched nothing on CUDA (the profiler ran and saw no kernel) fell back to
    # the (empty) Triton launcher count with a "host side" source, which switched rule 4 off
    kernels, source, _ = pick_kernel_counts(Counter(), Counter())
    assert kernels == Counter() and "CUPTI" in source
    cov = _cov(random_sample=3)
    cov.kernels, cov.kernel_source = kernels, source
    verdict = judge(_sides("gumbel-max"), {"A": cov}, [_M()], [], torch.device("cuda"))
    assert not verdict.conclusive and "launched no kernel on the GPU" in verdict.reasons[0]
    # CUPTI silently off while Triton launched: the launcher count, said so; the profiler failed: likewise
    kernels, source, _ = pick_kernel_counts(Counter(), Counter({"_position_kernel": 1}))
    assert kernels == Counter({"_position_kernel": 1}) and "host side" in source
    kernels, source, _ = pick_kernel_counts(None, Counter(), "RuntimeError: no CUPTI")
    assert kernels == Counter() and "CUPTI" not in source.split(";")[0] and "no CUPTI" in source
    assert pick_kernel_counts(None, None, "x")[0] is None


def test_a_over_a_with_overrides_that_change_nothing_is_inconclusive(founding):
    # regression: --vs-temperature 1 on an all-temperature-1 recording passed as an A/B run
    sides = _sides("gumbel-max", "gumbel-max", Overrides(drop_drafts=True), Overrides(temperature=1.0,
                                                                                      drop_drafts=True))
    res = run_bench([Recording(founding)], sides, CPU, repeats=1, warmup=0, resamples=200)
    assert not res.verdict.conclusive and "give both the same steps" in res.verdict.reasons[0]


def test_bench_founding_greedy_only_vs_stochastic_counts_routes_and_kernels(founding):
    rec = Recording(founding)
    res = run_bench([rec], _sides("greedy-only", "stochastic"), CPU, repeats=2, warmup=0, resamples=200)
    a, b = res.coverage["A"], res.coverage["B"]
    n = sum(r.step.num_requests for r in rec)
    assert a.requests_by_route == Counter({"greedy-verify": n}) and b.requests_by_route == \
        Counter({"stochastic-verify": n})
    assert a.violations == Counter({"stochastic-verify -> greedy-verify": n}) and not b.violations
    from replay_kernels.verify.stochastic import FUSED_BELOW  # fewer requests: one position launch for all positions
    launches = sum(1 if r.step.num_requests < FUSED_BELOW else max(1, r.step.max_drafts) for r in rec)
    assert a.kernels["_draw_kernel"] == len(rec) and b.kernels["_position_kernel"] == launches
    # greedy-only never ran stochastic-verify for the T = 1 requests with drafts: its timing is of other code
    assert not res.verdict.conclusive and res.verdict.reasons == [
        f"greedy-only: {n} request-step(s) expected the stochastic-verify route (temperature > 0 with drafts) and "
        f"none took it (greedy-verify {n}): the stochastic-verify path never ran for them, so its timing is of other "
        "code. Name the path under test with --expect-route, or --drop-drafts to time plain samples"]
    assert res.ratio is not None and res.ratio.lo <= res.ratio.point <= res.ratio.hi
    # the ratio says what it rests on, and that 2 steps are too few for an honest step-level CI
    assert res.ratio.pairs == 2 and res.ratio.calls == 2 and "rests on 2 (sub-)step(s) x 2" in res.ratio.caveat
    assert len(res.measurements) == 2 * len(rec) and all(len(m.times_us) == 2 for m in res.measurements)
    assert {m.clock for m in res.measurements} == {"cpu-wall"} and res.env["clock"] == "cpu-wall"
    assert any("interpreter" in note for note in res.verdict.notes)
    assert sum(m.tokens for m in res.measurements if m.side == "A") == \
        sum(int(GreedyOnlySampler().sample(r.step).counts.sum()) for r in rec)


def test_bench_cheap_check_temperature_0_vs_1_without_drafts(founding):
    sides = _sides("gumbel-max", "gumbel-max", Overrides(temperature=0.0, drop_drafts=True),
                   Overrides(temperature=1.0, drop_drafts=True))
    res = run_bench([Recording(founding)], sides, CPU, repeats=1, warmup=0, resamples=200, split_routes=True)
    assert set(res.coverage["A"].requests_by_route) == {"greedy-sample"}
    assert set(res.coverage["B"].requests_by_route) == {"random-sample"}
    assert res.verdict.conclusive and {m.label for m in res.measurements} == \
        {"gumbel-max[T=0,drop-drafts]", "gumbel-max[T=1,drop-drafts]"}


# -- the command line: exit 4, report formats ---------------------------------


def test_cli_exit_4_when_the_path_under_test_never_ran(greedy):
    code, out, err = cli("bench", str(greedy), "--impl", "greedy-only", "--vs", "stochastic", "--device", "cpu",
                         "--repeats", "1", "--warmup", "0")
    assert code == EXIT_INCONCLUSIVE == 4, err
    assert "INCONCLUSIVE" in out and "not 'no difference'" in out
    assert "no request went down a stochastic route" in out and "greedy-verify 6" in out


def test_cli_a_over_a_in_disguise_exits_4_with_labels_intact(founding):
    # regressions: the table ate "[drop-drafts]" as a rich markup tag (A showed as plain "gumbel-max"),
    # and A at the recorded temperature 1 vs B at --vs-temperature 1 passed as an A/B run
    code, out, err = cli("bench", str(founding), "--impl", "gumbel-max", "--drop-drafts", "--vs-temperature", "1",
                         "--device", "cpu", "--repeats", "1", "--warmup", "0")
    assert code == 4, err
    assert "A = gumbel-max[drop-drafts] vs B = gumbel-max[T=1,drop-drafts]" in out
    assert "give both the same steps" in out


def test_cli_report_formats(founding, tmp_path):
    j, c, p = tmp_path / "b.json", tmp_path / "b.csv", tmp_path / "b.png"
    # gumbel-max against the torch reference: a side with Triton launches and one without (serial-scan, the
    # scalar loop, took 10 of this test's 22 s under the interpreter)
    code, out, err = cli("bench", str(founding), "--impl", "gumbel-max", "--vs", "reference", "--drop-drafts",
                         "--device", "cpu", "--repeats", "2", "--warmup", "0", "--json", "--json-file", str(j),
                         "--csv", str(c), "--png", str(p))
    assert code == 0, err
    doc = json.loads(out)
    assert doc == json.loads(j.read_text())
    assert doc["exit_code"] == 0 and doc["verdict"]["conclusive"] and doc["env"]["clock"] == "cpu-wall"
    assert {s["impl"] for s in doc["sides"]} == {"gumbel-max", "reference"}
    assert doc["coverage"]["A"]["kernels"]["_draw_kernel"] == 2
    assert "_draw_kernel" not in doc["coverage"]["B"]["kernels"]
    assert doc["ratio"]["lo"] <= doc["ratio"]["point"] <= doc["ratio"]["hi"]
    raw = list(csv.DictReader(c.open()))  # long format: one row per statistic, the environment once
    assert list(raw[0]) == csvlog.COLUMNS and [r["value"] for r in raw if r["statistic"] == "gpu"] == ["cpu"]
    assert sum(r["statistic"] == "median_us" for r in raw) == 4 and {r["unit"] for r in raw
                                                                     if r["statistic"] == "p20_us"} == {"us"}
    rows = read_csv(c)
    assert len(rows) == 4 and {r["side"] for r in rows} == {"A", "B"}
    assert all(r["clock"] == "cpu-wall" and r["gpu"] == "cpu" and r["overrides"] == "drop-drafts"
               and r["route_mix"] == "random-sample" and r["median_us"] > 0 for r in rows)
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    p2 = tmp_path / "again.png"
    code, out, err = cli("bench", "--plot-from", str(c), "--png", str(p2))
    assert code == 0 and p2.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = cli("bench", "--plot-from", str(j), "--png", str(p2))  # not a CSV
    assert code == 2 and "not a `replay bench` CSV" in err


def test_cli_usage_errors(founding):
    code, _, err = cli("bench", str(founding), "--impl", "stochastic", "--expect-route", "C:nowhere")
    assert code == 2 and "--expect-route" in err
    code, _, err = cli("bench", str(founding), "--impl", "stochastic", "--top-p", "0")
    assert code == 2 and "--top-p" in err
    # an output folder that does not exist: refused before the run (was exit 3, "internal error", after it)
    code, out, err = cli("bench", str(founding), "--impl", "gumbel-max", "--drop-drafts", "--device", "cpu",
                         "--csv", "/nonexistent-dir/b.csv")
    assert code == 2 and "--csv /nonexistent-dir/b.csv" in err and len(err.strip().splitlines()) == 1 and not out


# -- derived steps -------------------------------------------------------------


def test_resize_rows_keeps_head_probabilities_and_tail_mass():
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(4, 200, generator=gen) * 3
    rows[:, 7] += 12.0
    rows[1, 50:80] = float("-inf")
    big, ids = resize_rows(rows, 1000, gen)
    assert ids is None and big.shape == (4, 1000) and torch.equal(big.argmax(1), rows.argmax(1))
    p, q = torch.softmax(rows, 1), torch.softmax(big, 1)
    top = p.topk(64, dim=1)
    assert torch.allclose(q.gather(1, top.indices), top.values, rtol=1e-4, atol=1e-7)
    assert torch.isinf(big[1]).sum() > 30  # -inf entries are resampled in proportion
    small, ids = resize_rows(rows, 100, gen)
    assert small.shape == (4, 100) and len(ids) == 4
    assert all(int(ids[j][small[j].argmax()]) == int(rows[j].argmax()) for j in range(4))


def test_derive_steps_and_synth_cli(founding, tmp_path):
    src = Recording(founding)
    steps = list(derive_steps(src, batch=5, drafts=2, vocab=300, steps=2, seed=1))
    for step, info in steps:
        assert step.logits.shape == (15, 300) and step.num_requests == 5 and step.max_drafts == 2
        assert step.draft_token_ids[2::3].tolist() == [-1] * 5 and int(step.draft_token_ids.max()) < 300
        assert step.expected_routes() == ["stochastic-verify"] * 5
    with pytest.raises(UsageError):
        next(derive_steps(src, batch=1, drafts=0, vocab=300_000))
    out = tmp_path / "derived"
    code, text, err = cli("synth", str(founding), "--out", str(out), "--batch", "3", "--drafts", "0",
                          "--vocab", "128", "--steps", "1")
    assert code == 0 and "derived/synthetic" in text, err
    rec = Recording(out)
    assert rec.synthetic and rec.manifest["derived"]["kind"] == "derived/synthetic"
    assert rec.manifest["derived"]["from"] == str(founding) and rec.vocab_size == 128 and len(rec) == 1
    assert rec[0].step.logits.shape == (3, 128) and rec.manifest["expected_tokens"] == "reference"
    want = get_impl("reference").sample(rec[0].step)  # the stored answer is the reference's, token for token
    assert torch.equal(rec[0].emitted.tokens.long(), want.tokens.long()) and rec[0].emitted.counts.tolist() == [1] * 3


# -- external impls: not observable, self-reported time shown beside the harness's --------------

EXTERNAL = r'''
import json, sys
from safetensors.torch import load_file
print(json.dumps({"protocol": "replay.exec/1", "name": "argmax-ext", "rng_contract": "none"}), flush=True)
for line in sys.stdin:
    t = load_file(line.strip())
    cu, logits = t["cu_num_logits"].tolist(), t["logits"].float()
    r = len(cu) - 1
    width = max(cu[i + 1] - cu[i] for i in range(r))
    toks = [[int(logits[cu[i]].argmax())] + [-1] * (width - 1) for i in range(r)]
    print(json.dumps({"tokens": toks, "counts": [1] * r, "routes": ["random-sample"] * r, "kernel_us": 12.5}),
          flush=True)
'''


def test_bench_external_impl_is_not_observable_and_self_reports(founding, tmp_path):
    import sys

    script = tmp_path / "ext.py"
    script.write_text(EXTERNAL)
    name = f"exec:{sys.executable} {script}"
    ext = get_impl(name)
    try:
        sides = [Side("A", name, ext, Overrides(drop_drafts=True)),
                 Side("B", "gumbel-max", get_impl("gumbel-max"), Overrides(drop_drafts=True))]
        res = run_bench([Recording(founding)], sides, CPU, repeats=2, warmup=0, resamples=200)
    finally:
        ext.close()
    a = res.coverage["A"]
    assert a.kernels is None and "not observable" in a.kernel_source
    assert any("not observable" in n for n in res.verdict.notes)
    ma = [m for m in res.measurements if m.side == "A"]
    assert ma and all(m.self_reported_us == 12.5 and m.timed == "sample" for m in ma)
    assert all(m.median_us > 12.5 for m in ma)  # the harness's own wall-clock includes the pipe round trip
    assert "never self-reported" in res.ratio.uses


def test_kernel_bench_inputs_depend_on_the_shape_alone():
    """tools/bench_kernels.py seeds each shape from (V, R, k), not from its place in the run's list: a run of
    `--cases verify` times the same inputs as a full run (it timed others, with other pending top-p rows)."""
    from replay_harness.bench.kernels.cases import Inputs

    seeds = {(V, R, k): Inputs.seed_of(V, R, k) for V in (300, 301) for R in (1, 2) for k in (0, 4)}
    assert len(set(seeds.values())) == len(seeds) and seeds[(300, 2, 4)] == Inputs.seed_of(300, 2, 4)
    a, b = (Inputs.make(300, 2, 4, Inputs.seed_of(300, 2, 4), "cpu") for _ in range(2))
    assert torch.equal(a.logits, b.logits) and torch.equal(a.draft_ids, b.draft_ids)


def test_kernel_ab_tool_loads_separate_copies_and_overrides_one(monkeypatch):
    """tools/ab_kernels.py races copies of replay_kernels: each copy is its own module tree, so a ``--set`` on
    one copy leaves the others and the installed package alone (a shared module would time one setting
    under two names)."""
    import pathlib

    import replay_kernels.draw.sample_check as installed

    ab = load_tool("ab_kernels")
    pkg_dir = str(pathlib.Path(installed.__file__).parents[1])  # the package, above draw/
    one, two = ab.load_variant("t_one", pkg_dir), ab.load_variant("t_two", pkg_dir)
    ab.apply_set(one, "draw.sample_check.ROWS_PER_SLOT = ROWS_PER_SLOT // 2")
    import importlib

    copy_one, copy_two = (importlib.import_module(f"{p}.draw.sample_check") for p in (one, two))
    assert copy_one.ROWS_PER_SLOT == installed.ROWS_PER_SLOT // 2
    assert copy_two.ROWS_PER_SLOT == installed.ROWS_PER_SLOT
    assert copy_one._check_kernel is not copy_two._check_kernel is not installed._check_kernel
    assert copy_one.row_slots(24) != copy_two.row_slots(24)  # read at call time, from the copy's globals
    with pytest.raises(SystemExit, match="no __init__.py"):
        ab.load_variant("t_bad", str(TOOLS))
    with pytest.raises(SystemExit, match="has no NO_SUCH"):
        ab.apply_set(two, "draw.sample_check.NO_SUCH=1")
    if not torch.cuda.is_available():
        monkeypatch.setattr("sys.argv", ["ab_kernels.py", "--variant", f"a={pkg_dir}"])
        assert ab.main() == 2  # a clear refusal without a GPU, not a traceback


def test_kernel_resources_tool_compiles_each_launch_for_sm90(tmp_path):
    """tools/kernel_resources.py records one launch's kernels without running them and compiles each for
    sm_90 (no GPU), and ``--sass`` writes each distinct kernel's SASS: a top-p step is the first draw, its check, (draw, check) rounds and the finish loop: three
    rounds at top-p 0.5 with twenty requests (the most; ``sample_check.launched_rounds``, whose counts
    tests/test_sample_check.py pins: one compile of each kernel here; 10 expected open: no open-row launch);
    with four (2 expected open) the first draw, its check and the open-row launch; below four requests, the
    one launch, with the room an H200 has for its programs.
    Programs an SM follow the H200's register partitions (ncu: 96 registers, 1 warp -> 20; 111 -> 16;
    4 warps at 75 -> 6), not 65,536 / (regs x 32)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(TOOLS.parent)
    out = subprocess.run([sys.executable, str(TOOLS / "kernel_resources.py"), "--impl", "gumbel-max", "--R", "20,4,3",
                          "--V", "3000", "--top-p", "0.5", "--sass", str(tmp_path)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    sass = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert {"R20-0-_draw_kernel.sass", "R20-1-_check_kernel.sass", "R3-0-_one_launch_kernel.sass"} <= set(sass)
    assert all("EXIT" in text and "Function : " in text for text in sass.values())
    tables = out.stdout.split("# gumbel-max V=3000 R=")[1:]  # one table a request count, in the order given
    for table, (requests, expected) in zip(tables, ((20, ["_draw_kernel", "_check_kernel"] * 4 + ["_finish_kernel"]),
                                                    (4, ["_draw_kernel", "_check_kernel", "_open_rows_kernel"]),
                                                    (3, ["_one_launch_kernel"])), strict=True):
        assert table.startswith(f"{requests} ")
        rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ") and "`" in line]
        assert [r[1].strip().strip("`") for r in rows] == expected
        assert all(int(r[5]) > 0 and int(r[7]) > 0 for r in rows)  # registers and programs an SM
        if requests == 4:  # 4 slots allocated, of 2 programs (the draw spans at V = 3000)
            assert "`_open_rows_kernel`: 4 slots of 2 programs allocated; an H200 holds" in table
    assert "needs its 6 programs resident at once; an H200 holds" in out.stdout  # grid (3, 2) at V = 3000
    tool = load_tool("kernel_resources")
    assert [tool.programs_per_sm(r, w) for r, w in ((96, 1), (111, 1), (75, 4), (128, 4), (32, 1))] == [20, 16, 6, 4, 32]
