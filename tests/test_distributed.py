"""`replay run`, `verify`, `audit` and `bench` under torchrun (2 processes, gloo, CPU) say what a
single-process run says.

Each test launches ``python -m torch.distributed.run --nproc-per-node 2 -m replay_harness.cli COMMAND ...``
on committed fixtures (audit: two small recordings with reused noise, made here) and compares stdout (or
the JSON document; bench: the steps measured, as its timings differ by nature) and the exit code with
``python -m replay_harness.cli COMMAND ...``.
torchrun exits 1 whenever a rank exits nonzero; the rank's own exit code is in torchrun's failure report
("exitcode : 2"), which is what the bad-recording test checks (docs/SCALE.md).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from replay_harness.compare.distributed import TEST_FAIL_ENV, TIMEOUT_ENV, assign

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
LIMIT_S = 50  # the longest one launch may take on a busy 2-core machine


def _run(args: list[str], *, nproc: int | None = None, extra_env: dict[str, str] | None = None):
    """(exit code, stdout, stderr, seconds) of `replay ARGS`, under torchrun with ``nproc`` processes."""
    env = {k: v for k, v in os.environ.items() if k != TEST_FAIL_ENV}
    env.update({"OMP_NUM_THREADS": "1", TIMEOUT_ENV: "20", **(extra_env or {})})
    launcher = [] if nproc is None else ["-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
    start = time.monotonic()
    p = subprocess.run([sys.executable, *launcher, "-m", "replay_harness.cli", *args], capture_output=True,
                       text=True, cwd=REPO, env=env, timeout=LIMIT_S)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - start


def _left_behind(token: str) -> list[int]:
    """Pids of processes still running with ``token`` in their environment (orphaned ranks)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if token.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_assign_is_balanced_deterministic_and_covers_every_unit():
    sizes = [100, 90, 80, 70, 60, 50, 40, 30, 20, 10, 10]
    owner = assign(sizes, 3)
    assert owner == assign(sizes, 3) and set(owner) == {0, 1, 2}
    loads = [sum(s for s, o in zip(sizes, owner) if o == r) for r in range(3)]
    assert max(loads) - min(loads) <= max(sizes)
    assert assign([5, 5, 5], 1) == [0, 0, 0] and assign([], 4) == []


@pytest.mark.parametrize("args", [
    ["run", "fixtures/synthetic-mixed", "fixtures/synthetic-founding", "fixtures/real-founding", "--json"],
    ["run", "fixtures/synthetic-founding", "--impl", "greedy-only", "--against", "reference", "--json"],
    ["run", "fixtures/synthetic-founding", "fixtures/synthetic-mixed", "--impl", "greedy-only",
     "--against", "reference"],
], ids=["ok-json", "violation-json", "violation-table"])
def test_two_ranks_print_what_one_process_prints(args):
    code, out, err, _ = _run(args)
    dcode, dout, derr, _ = _run(args, nproc=2)
    assert code == dcode, derr
    assert dout == out
    assert code == (1 if "greedy-only" in args else 0)


def test_bad_recording_is_the_same_one_line_error_exit_2(tmp_path):
    rec = tmp_path / "rec"
    shutil.copytree(FIXTURES / "synthetic-mixed", rec)
    steps = sorted((rec / "steps").iterdir())
    data = bytearray(steps[1].read_bytes())
    data[8:40] = b"x" * 32  # a corrupt header in step 1 ...
    steps[1].write_bytes(bytes(data))
    steps[2].write_bytes(steps[2].read_bytes()[:100])  # ... and a truncated step 2: step 1 is reported
    args = ["run", "fixtures/synthetic-founding", str(rec), "--json"]
    code, out, err, _ = _run(args)
    dcode, dout, derr, _ = _run(args, nproc=2)
    assert code == 2 and "step 1" in err
    assert dcode != 0 and dout == out
    line = err.strip().splitlines()[-1]
    assert line in derr.splitlines()
    assert re.search(r"exitcode\s*:\s*2\b", derr), derr  # torchrun's report: rank 0 exited 2


@pytest.mark.parametrize("command", [["run"], ["verify", "--impl", "reference", "--steps", "0", "--trials", "10"]])
def test_a_tampered_step_read_by_rank_1_gives_rank_0_the_one_digest_warning(tmp_path, command):
    """The step digests are computed where the steps are read and gathered to rank 0 (docs/SCALE.md): a
    logit bit-flipped in step 1 (run: rank 1's, assign deals the largest step, step 0, to rank 0; verify
    --steps 0: a step no unit reads, hashed by the ranks after their units) is warned about once, as in a
    single-process run."""
    from test_digest_reads import _first_finite_logit_offset

    rec = tmp_path / "rec"
    shutil.copytree(FIXTURES / "synthetic-mixed", rec)
    step = rec / "steps" / "step-000001.safetensors"
    data = bytearray(step.read_bytes())
    data[_first_finite_logit_offset(step)] ^= 1
    step.write_bytes(bytes(data))
    args = [command[0], str(rec), *command[1:], "--json"]
    code, out, err, _ = _run(args)
    dcode, dout, derr, _ = _run(args, nproc=2)
    assert err.count("replay: warning:") == 1 and "content digest does not match" in err
    assert derr.count("replay: warning:") == 1 and "content digest does not match" in derr
    assert dout == out
    # torchrun exits 1 for any non-zero rank; rank 0's own code is in its report (docs/SCALE.md)
    assert dcode == code if code in (0, 1) else (dcode == 1 and re.search(rf"exitcode\s*:\s*{code}\b", derr)), derr


@pytest.mark.parametrize("mode", ["raise", "kill", "hang"])
def test_a_failing_rank_ends_the_job_nonzero_without_hanging(mode):
    token = uuid.uuid4().hex
    env = {TEST_FAIL_ENV: f"1:{mode}", TIMEOUT_ENV: "5", "REPLAY_TEST_TOKEN": token}
    code, out, err, seconds = _run(["run", "fixtures/synthetic-founding", "--json"], nproc=2, extra_env=env)
    assert code != 0 and seconds < LIMIT_S
    assert '"recordings"' not in out  # no report from a job that lost a rank
    if mode == "raise":
        assert "replay: error: rank 1: internal error: RuntimeError" in err
    if mode == "hang":
        assert "did not answer within 5 s" in err
    if Path("/proc").is_dir():
        time.sleep(0.5)
        assert _left_behind(token) == []


# ----------------------------------------------------------------------------- verify, audit, bench (issue 14)
def _json(out: str) -> dict:
    """The one JSON document a command printed (rank 0 only: a second document would not parse)."""
    return json.loads(out)


def test_verify_under_two_ranks_gives_the_same_statistics_json_and_exit_code():
    """Trial seeds are a pure function of (seed, recording, step, request): the p-values, failures and the
    exit code (1: greedy-only fails the distribution tests) do not depend on the number of processes."""
    args = ["verify", "fixtures/synthetic-founding", "fixtures/real-founding", "--impl", "greedy-only",
            "--trials", "24", "--json", "--quiet"]
    code, out, err, _ = _run(args)
    dcode, dout, derr, _ = _run(args, nproc=2)
    assert code == 1, err
    assert dcode != 0 and re.search(r"exitcode\s*:\s*1\b", derr), derr
    doc, ddoc = _json(out), _json(dout)
    assert doc["failures"] and doc["statistical_tests"] > 10
    assert ddoc == doc


def test_audit_under_two_ranks_carries_per_request_state_across_ranks(tmp_path):
    """Reused noise is judged from earlier steps' tokens of the same request (state carried from step to
    step): with the steps dealt over two ranks the findings, p-values and exit code are unchanged."""
    from replay_harness.recording.store import Emitted, RecordingWriter
    from test_audit import InverseCdf, ReusedGumbel, make_steps

    import torch

    for name, engine in (("gumbel", ReusedGumbel()), ("icdf", InverseCdf(reuse=True))):
        with RecordingWriter(tmp_path / name, vocab_size=64, synthetic=True, source={"synthetic": True}) as w:
            for step, tokens, counts in make_steps(1, engine, n_steps=10, max_k=0):
                w.write_step(step, Emitted(tokens.to(torch.int32), counts.to(torch.int32)))
    args = ["audit", str(tmp_path / "gumbel"), str(tmp_path / "icdf"), "fixtures/real-founding", "--json", "--quiet"]
    code, out, err, _ = _run(args)
    dcode, dout, derr, _ = _run(args, nproc=2)
    assert code == 1, err
    doc = _json(out)
    found = {(f["kind"], f["test"]) for r in doc["recordings"] for f in r["findings"]}
    assert {("reused-noise", "recurrence"), ("reused-noise", "rank-overlap")} <= found
    assert dcode != 0 and re.search(r"exitcode\s*:\s*1\b", derr), derr
    assert _json(dout) == doc


def test_bench_under_two_ranks_times_every_step_once():
    args = ["bench", "fixtures/synthetic-founding", "fixtures/real-founding", "--impl", "reference",
            "--repeats", "1", "--warmup", "0", "--json"]
    dcode, dout, derr, _ = _run(args, nproc=2)
    assert dcode == 0, derr
    doc = _json(dout)
    measured = sorted((m["recording"], m["step"]) for m in doc["measurements"])
    assert measured == sorted([("fixtures/synthetic-founding", i) for i in range(3)] +
                              [("fixtures/real-founding", i) for i in range(2)])
    assert doc["settings"]["processes"] == 2
    assert doc["coverage"]["A"]["requests"] == sum(m["requests"] for m in doc["measurements"])


@pytest.mark.parametrize("gpus,local_world,local_rank,want_gpu,want_shared", [
    (2, 2, 1, 1, False),   # one rank per GPU: NCCL, cuda:LOCAL_RANK
    (1, 4, 3, 0, True),    # four readers on a one-GPU host share cuda:0 (gloo)
    (2, 4, 3, 1, True),    # round robin over the host's GPUs
    (4, 2, 1, 1, False),   # fewer ranks than GPUs
])
def test_ranks_beyond_the_hosts_gpus_share_them_round_robin(monkeypatch, gpus, local_world, local_rank, want_gpu,
                                                            want_shared):
    import torch

    from replay_harness.compare.distributed import Shard

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    shard = Shard(rank=local_rank, world_size=local_world, local_rank=local_rank, local_world_size=local_world)
    assert (shard.gpu(), shard.shares_gpu) == (want_gpu, want_shared)


def test_bench_refuses_ranks_that_share_a_gpu(monkeypatch):
    """Two ranks timing kernels on one GPU time each other: bench says so (exit 2) instead of reporting it."""
    import torch

    from replay_harness.bench import shard as bench_shard
    from replay_harness.compare import distributed
    from replay_harness.errors import UsageError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(distributed, "launched", lambda: True)
    seen = {}

    def fake_run_sharded(body):
        try:
            body(distributed.Shard(rank=0, world_size=2, local_rank=0, local_world_size=2))
        except UsageError as e:
            seen["error"] = e
        return None

    monkeypatch.setattr(distributed, "run_sharded", fake_run_sharded)
    assert bench_shard.bench_units([], lambda dev: [], torch.device("cuda"), repeats=1, warmup=0) is None
    assert "ranks sharing a GPU" in str(seen["error"]) and seen["error"].exit_code == 2


@pytest.mark.parametrize("env,gpus,want", [
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, 2, "nccl"),   # torchrun, one rank a GPU
    ({"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"}, 1, "gloo"),   # four readers on a one-GPU host
    ({"LOCAL_RANK": "5"}, 8, "nccl"),                             # no LOCAL_WORLD_SIZE: a GPU each, not WORLD_SIZE
])
def test_the_backend_follows_the_ranks_per_gpu_of_this_host(monkeypatch, env, gpus, want):
    import torch
    import torch.distributed as dist

    from replay_harness.compare import distributed

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    for key, value in {"RANK": "9", "WORLD_SIZE": "16", **env}.items():  # 16 ranks over hosts of `gpus` GPUs
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    assert distributed.backend_for(distributed.this_shard()) == want
