"""External impls (`--impl exec:PROGRAM`, docs/EXTERNAL.md): the C++ example sampler, the Python adapter,
and every documented failure of a misbehaving program (one line, exit 3, never a hang).

Recordings used: committed fixtures (real-founding from SmolLM2-135M; synthetic-* generated) and SYNTHETIC
recordings written here.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from helpers import cli, write_recording
from replay_harness.errors import EnvironmentProblem, UsageError
from replay_harness.impls.external import ExecSampler, ExternalImplError
from replay_harness.impls import get_impl
from replay_harness.recording.store import Recording
from replay_harness.impls.engine_bug import GreedyOnlySampler, GuardedSampler
from replay_harness.recording.synthetic import Case, random_step

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "fixtures"
SOURCE = REPO / "examples" / "cpp_sampler" / "sampler.cpp"
FOUNDING = [str(FIX / "real-founding"), str(FIX / "synthetic-founding")]


def _build(out: Path, *defines: str) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed: the C++ example sampler cannot be built")
    subprocess.run(["g++", "-O2", "-std=c++17", "-ffp-contract=off", *defines, "-o", str(out), str(SOURCE)],
                   check=True, capture_output=True, text=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def cpp(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("cpp") / "sampler")


@pytest.fixture(scope="module")
def cpp_guarded(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("cpp") / "sampler-guarded", "-DGUARDED")


def _same_results(impl, builtin, paths) -> int:
    """Assert ``impl`` emits what ``builtin`` emits (tokens, counts, routes, notes) on every step; step count."""
    n = 0
    for path in paths:
        impl.begin_recording(path)
        for record in Recording(path):
            got, want = impl.sample(record.step), builtin.sample(record.step)
            assert torch.equal(got.tokens, want.tokens), (path, record.index)
            assert torch.equal(got.counts, want.counts) and torch.equal(got.routes, want.routes)
            assert got.notes == want.notes
            n += 1
    return n


def test_cpp_sampler_reports_the_founding_violation_like_greedy_only(cpp):
    # same per-step results as the builtin greedy-only => the same comparison and report lines
    with get_impl(f"exec:{cpp}") as impl:
        assert _same_results(impl, GreedyOnlySampler(), FOUNDING) == 5
    rc, out, err = cli("run", *FOUNDING, "--impl", f"exec:{cpp}", "--against", "reference")
    assert rc == 1, err
    label = f"exec:{cpp}"
    assert (f"real-founding: routing violation stochastic-verify -> greedy-verify ({label}): 3 request-steps; "
            "request ids 0, 1") in out
    assert (f"synthetic-founding: routing violation stochastic-verify -> greedy-verify ({label}): 18 "
            "request-steps; request ids 1000, 1001, 1002") in out


def test_cpp_guarded_build_refuses_like_guarded(cpp_guarded):
    with get_impl(f"exec:{cpp_guarded}") as impl:
        assert impl.name == "cpp-guarded"
        assert _same_results(impl, GuardedSampler(), FOUNDING) == 5
    rc, out, err = cli("run", *FOUNDING, "--impl", f"exec:{cpp_guarded}", "--against", "reference")
    assert rc == 1, err
    assert f"real-founding: exec:{cpp_guarded} refused 3 request-steps; request ids 0, 1" in out
    assert f"synthetic-founding: exec:{cpp_guarded} refused 18 request-steps; request ids 1000, 1001" in out
    assert "routing violation" not in out


def test_cpp_plain_samples_match_reference_exactly(cpp, tmp_path):
    # SYNTHETIC plain samples (k = 0): f16 logits with temperatures != 1 (division + Gumbel noise) and the
    # committed f32 synthetic-plain fixture; every stochastic token must equal the torch oracle's.
    case = Case("plain-f16", vocab_size=2003, num_requests=8, max_drafts=0, steps=2,
                temperatures=(0.0, 0.6, 1.0, 1.7), features=frozenset({"all-k0", "-inf"}), dtype=torch.float16)
    rec = write_recording(tmp_path / "plain-f16", case)
    rc, out, err = cli("run", str(rec), str(FIX / "synthetic-plain"), "--impl", f"exec:{cpp}",
                       "--against", "reference", "--json")
    assert rc == 0, out + err
    doc = json.loads(out)
    for r in doc["recordings"]:
        assert r["tokens_matched"] == r["tokens_compared"] == r["requests"] > 0
        assert r["stochastic_requests_not_compared"] == 0


def test_cpp_sampler_in_process_reports_kernel_time_and_refuses_filters(cpp):
    gen = torch.Generator().manual_seed(3)
    step = random_step(gen, Case("mixed-bf16", vocab_size=300, features=frozenset({"ragged", "ties"}),
                                 dtype=torch.bfloat16))
    with get_impl(f"exec:{cpp}") as impl:
        assert (impl.name, impl.rng_contract, impl.cpu_only, impl.requires_cuda) == \
            ("cpp-greedy-only", "mrv2", True, False)
        got = impl.sample(step)
        want = GreedyOnlySampler().sample(step)
        assert torch.equal(got.tokens, want.tokens) and torch.equal(got.counts, want.counts)
        assert torch.equal(got.routes, want.routes)
        assert got.self_reported_us is not None and got.self_reported_us > 0
        filtered = random_step(gen, Case("filters", vocab_size=300, temperatures=(1.0,),
                                         features=frozenset({"all-k0", "top-k"})))
        res = impl.sample(filtered)  # top_k = [1, 5, 0, 20, 2, 0]: requests 0, 1, 3, 4 are filtered
        assert res.route_names() == ["refused", "refused", "random-sample", "refused", "refused", "random-sample"]
        assert any("not implemented in this example" in n for n in res.notes)
        proc, tmpdir = impl._proc, impl._tmpdir
    assert proc.poll() is not None and not os.path.exists(tmpdir)  # closed: process gone, temp files removed


# ---------------------------------------------------------------- the Python adapter


def test_python_adapter_round_trips_reference_exactly():
    # SYNTHETIC fixtures whose recorded tokens are the reference's: synthetic-mixed (greedy and stochastic
    # verify, placeholders, ties), synthetic-filters (top-k/top-p/min-p, temperatures != 1)
    recs = [str(FIX / n) for n in ("synthetic-mixed", "synthetic-filters")]
    impl = f"exec:{sys.executable} -m replay_harness.impls.external_adapter"
    rc, out, err = cli("run", *recs, "--impl", impl, "--impl-arg", "replay_harness.impls.reference:ReferenceSampler",
                       "--json")
    assert rc == 0, out + err
    doc = json.loads(out)
    assert doc["impl_args"] == ["replay_harness.impls.reference:ReferenceSampler"]
    for r in doc["recordings"]:
        assert r["tokens_matched"] == r["tokens_compared"] > 0 and r["stochastic_requests_not_compared"] == 0


# ---------------------------------------------------------------- misbehaving programs

FAKE = textwrap.dedent('''
    """A misbehaving replay.exec/1 program for tests. argv: MODE [PIDFILE]."""
    import json, os, signal, struct, sys, time

    mode = sys.argv[1]
    if len(sys.argv) > 2:
        open(sys.argv[2], "w").write(str(os.getpid()))
    if mode == "exit-early":
        print("cannot open model.bin", file=sys.stderr, flush=True)
        sys.exit(5)
    if mode == "bad-handshake":
        print("MySampler v2 starting up", flush=True)
    elif mode == "bad-version":
        print(json.dumps({"protocol": "replay.exec/2", "name": "x", "rng_contract": "mrv2"}), flush=True)
    elif mode == "slow-handshake":
        time.sleep(60)
    else:
        print(json.dumps({"protocol": "replay.exec/1", "name": "fake", "rng_contract": "mrv2"}), flush=True)

    def shape(path):
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        t = json.loads(raw[8:8 + n])["cu_num_logits"]
        a, b = t["data_offsets"]
        cu = struct.unpack("<%di" % t["shape"][0], raw[8 + n + a:8 + n + b])
        return len(cu) - 1, max(cu[i + 1] - cu[i] - 1 for i in range(len(cu) - 1))

    for i, line in enumerate(sys.stdin):
        r, k = shape(line.strip())
        if mode == "crash" and i == 1:
            print("segfault in verify_kernel at row 3", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "hang":
            time.sleep(600)
        if mode == "garbage":
            print("step done, 3 tokens", flush=True)
            continue
        width = k + 2 if mode == "shape" else k + 1
        print(json.dumps({"tokens": [[-1] * width] * r, "counts": [0] * r, "routes": ["refused"] * r}), flush=True)
''')


@pytest.fixture(scope="module")
def fake(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("fake") / "fake_sampler.py"
    path.write_text(FAKE)
    return f"exec:{sys.executable} {path}"


CASES = {  # mode: (reason, message); {rec} is the recording
    "exit-early": ("crash", "program exited with code 5 before sending its handshake; stderr: cannot open model.bin"),
    "bad-handshake": ("handshake", "bad handshake: first stdout line is not a JSON object: 'MySampler v2 starting up'"),
    "bad-version": ("handshake", "bad handshake: protocol version 'replay.exec/2' is not supported"),
    "crash": ("crash", "program was killed by signal SIGKILL before sending its reply to step 1 of {rec}; "
                       "stderr: segfault in verify_kernel at row 3"),
    "garbage": ("garbage", "reply to step 0 of {rec} is not a JSON object: 'step done, 3 tokens'"),
    "shape": ("shape", "reply to step 0 of {rec}: 'tokens' has shape [6, 6], expected [R, K+1] = [6, 5]"),
    "hang": ("timeout", "no reply to step 0 of {rec} within 1.5 s (--impl-timeout); program killed"),
}
SYN_FOUNDING = str(FIX / "synthetic-founding")  # SYNTHETIC: 3 steps of 6 requests, K = 4 in step 0


def _assert_killed(pidfile: Path) -> None:
    with pytest.raises(ProcessLookupError):  # the program (its process group) was killed, not left behind
        os.kill(int(pidfile.read_text()), 0)


@pytest.mark.parametrize("mode", sorted(CASES))
def test_misbehaving_program_raises_the_documented_error(fake, tmp_path, mode):
    reason, message = CASES[mode]
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    with pytest.raises(ExternalImplError) as e:
        with ExecSampler(f"{fake[len('exec:'):]} {mode} {pidfile}", timeout=1.5) as impl:
            impl.begin_recording(SYN_FOUNDING)
            for record in Recording(SYN_FOUNDING):
                impl.sample(record.step)
    assert e.value.reason == reason and e.value.exit_code == 3
    assert message.format(rec=SYN_FOUNDING) in str(e.value) and "\n" not in str(e.value)
    assert time.monotonic() - t0 < 10
    _assert_killed(pidfile)


@pytest.mark.parametrize("mode", ["crash", "hang"])
def test_cli_prints_one_line_and_exits_3(fake, tmp_path, mode):
    pidfile = tmp_path / "pid"
    impl = f"{fake} {mode} {pidfile}"
    t0 = time.monotonic()
    rc, out, err = cli("run", SYN_FOUNDING, "--impl", impl, "--impl-timeout", "1.5")
    assert rc == 3, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == f"replay: error: impl '{impl}': " + CASES[mode][1].format(rec=SYN_FOUNDING) + \
        ("" if mode == "crash" else "; stderr: (empty)"), err
    assert time.monotonic() - t0 < 30
    _assert_killed(pidfile)


def test_hung_handshake_times_out(fake, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(ExternalImplError, match=r"no handshake within 0.5 s") as e:
        ExecSampler(f"{fake[len('exec:'):]} slow-handshake {tmp_path / 'pid'}", handshake_timeout=0.5)
    assert e.value.reason == "timeout" and e.value.exit_code == 3 and time.monotonic() - t0 < 10
    _assert_killed(tmp_path / "pid")


def test_usage_errors():
    with pytest.raises(UsageError, match="only for external impls"):
        get_impl("reference", ["--x"])
    with pytest.raises(EnvironmentProblem, match="does not exist"):
        get_impl("exec:./no/such/sampler")
    rc, _, err = cli("run", str(FIX / "synthetic-founding"), "--impl", "greedy-only", "--impl-timeout", "3")
    assert rc == 2 and "--impl-timeout is only for external impls" in err
