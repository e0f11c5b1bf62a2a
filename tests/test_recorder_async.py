"""The Recorder's asynchronous mode (docs/RECORDING.md, "Asynchronous recording"): the same files as the
sync mode, a bounded queue with block / drop, writer errors surfaced as the sync path's errors, crash
safety under SIGKILL, and (on a GPU) the side-stream copy ordered after the producing kernels."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from replay_harness.errors import InputError
from replay_harness.recording.recorder import Recorder
from replay_harness.recording.store import Recording
from replay_harness.recording.validate import check_recording

REPO = Path(__file__).resolve().parent.parent
V = 16


def _inputs(i: int, **over) -> dict:
    """Engine step ``i`` (seeded by ``i``): request 0 with 2 drafts, request 1 plain; logits bf16."""
    gen = torch.Generator().manual_seed(i)
    d = dict(logits=torch.randn(4, V, generator=gen).to(torch.bfloat16), cu_num_logits=torch.tensor([0, 3, 4]),
             draft_token_ids=[5, 7, -1, -1], positions=np.array([10, 11, 12, 4]) + i,
             temperature=[0.0, 1.0], top_k=[0, 5], top_p=None, min_p=0.1, seed=[1, i],
             request_ids=[100, 101], emitted_tokens=[[5, 3], [int(i % V)]], emitted_counts=None,
             emitted_routes=["greedy-verify", "random-sample"],
             draft_logits=torch.randn(2, V, generator=gen), meta={"batch": [i]})
    d.update(over)
    return d


BAD = {3: dict(temperature=[-1.0, 1.0]), 7: dict(draft_token_ids=[5, V, -1, -1])}  # refused engine steps


def _record(path: Path, n: int, **kw) -> list[str]:
    """Record engine steps 0..n-1 (BAD ones refused); the engine scribbles over its buffers after each
    call, as engines reuse them. Returns the error lines, in order."""
    errors = []
    rec = Recorder(path, V, source={"engine": "test"}, **kw)
    for i in range(n):
        args = _inputs(i, **BAD.get(i, {}))
        try:
            rec.record_step(**args)
        except InputError as e:
            errors.append(str(e))
        args["logits"].fill_(7.0)           # the engine reuses its logits buffer
        args["cu_num_logits"][1] = 1        # ... and its index buffer
        args["positions"][:] = -5           # ... and its numpy array
        args["meta"]["batch"].append(-1)    # ... and its metadata
        args["emitted_tokens"][0][0] = 99   # ... and its lists
    try:
        rec.close()
    except InputError as e:
        errors.append(str(e))
    return errors


def _files(path: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((path / "steps").iterdir())}


@pytest.mark.parametrize("max_pending", [1, 3])
def test_async_writes_the_same_bytes_and_errors_as_sync(tmp_path, max_pending):
    sync_errors = _record(tmp_path / "sync", 10)
    async_errors = _record(tmp_path / "async", 10, mode="async", max_pending=max_pending)
    s, a = Recording(tmp_path / "sync"), Recording(tmp_path / "async")
    assert len(s) == 8 and _files(tmp_path / "async") == _files(tmp_path / "sync")  # byte-identical steps
    assert a.manifest["digest"] == s.manifest["digest"] == s.digest() and a.manifest["complete"]
    assert [r.meta["engine_step"] for r in a] == [0, 1, 2, 4, 5, 6, 8, 9]
    assert a.manifest["dropped_steps"] == 0 and "dropped_steps" not in s.manifest
    # the same one-line errors (file, step, field), each surfaced once: at a later call or at close
    assert [e.replace("/async/", "/sync/") for e in async_errors] == sync_errors and len(sync_errors) == 2
    assert "step-000003.safetensors: step 3: field 'temperature'" in sync_errors[0]
    assert "step-000006.safetensors: step 6: field 'draft_token_ids'" in sync_errors[1]
    assert check_recording(a) == []


def test_async_every_and_budget_match_sync(tmp_path):
    one = None
    for mode in ("sync", "async"):
        with Recorder(tmp_path / f"probe-{mode}", V, mode=mode) as rec:
            rec.record_step(**_inputs(0))
        one = (tmp_path / f"probe-{mode}" / "steps" / "step-000000.safetensors").stat().st_size
    budget = 3 * one + 4096 + 10
    for mode in ("sync", "async"):
        with Recorder(tmp_path / mode, V, mode=mode, every=2, max_bytes=budget, max_pending=8) as rec:
            for i in range(12):
                rec.record_step(**_inputs(i))
    assert _files(tmp_path / "async") == _files(tmp_path / "sync")
    assert [r.meta["engine_step"] for r in Recording(tmp_path / "async")] == [0, 2, 4]
    assert rec.full and rec.bytes_written <= budget


class _Gate:
    """Holds the writer thread inside its first write until opened."""

    def __init__(self, rec: Recorder):
        self.open, self.entered = threading.Event(), threading.Event()
        real = rec._writer.write_step

        def write_step(*a, **k):
            self.entered.set()
            assert self.open.wait(10), "gate never opened"
            return real(*a, **k)

        rec._writer.write_step = write_step


def test_drop_skips_and_counts_steps_when_the_queue_is_full(tmp_path):
    rec = Recorder(tmp_path / "rec", V, mode="async", max_pending=2, when_full="drop")
    gate = _Gate(rec)
    rec.record_step(**_inputs(0))
    assert gate.entered.wait(10)                 # step 0 is being written (slot 1 of 2)
    rec.record_step(**_inputs(1))                # queued (slot 2 of 2)
    started = time.perf_counter()
    for i in range(2, 6):                        # no free slot: dropped at once, never waited for
        assert rec.record_step(**_inputs(i)) is None
    assert time.perf_counter() - started < 0.5 and rec.dropped == 4
    gate.open.set()
    rec.close()
    r = Recording(tmp_path / "rec")
    assert r.manifest["dropped_steps"] == 4 and r.manifest["num_steps"] == 2
    assert [x.meta["engine_step"] for x in r] == [0, 1]
    assert check_recording(r) == []


def test_block_waits_for_a_free_slot_and_drops_nothing(tmp_path):
    rec = Recorder(tmp_path / "rec", V, mode="async", max_pending=1, when_full="block")
    gate = _Gate(rec)
    rec.record_step(**_inputs(0))
    assert gate.entered.wait(10)
    opener = threading.Timer(0.3, gate.open.set)
    opener.start()
    started = time.perf_counter()
    rec.record_step(**_inputs(1))                # waits until step 0's slot is free
    waited = time.perf_counter() - started
    opener.join()
    rec.close()
    assert waited >= 0.25 and rec.dropped == 0
    r = Recording(tmp_path / "rec")
    assert r.manifest["dropped_steps"] == 0 and [x.meta["engine_step"] for x in r] == [0, 1]


def test_an_exception_in_the_loop_writes_queued_steps_and_leaves_the_recording_open(tmp_path):
    with pytest.raises(RuntimeError, match="engine crashed"):
        with Recorder(tmp_path / "rec", V, mode="async", max_pending=4) as rec:
            for i in range(4):
                rec.record_step(**_inputs(i))
            raise RuntimeError("engine crashed")
    r = Recording(tmp_path / "rec")
    assert len(r) == 4 and not r.manifest["complete"]
    with pytest.raises(InputError, match="after close"):
        rec.record_step(**_inputs(5))


@pytest.mark.parametrize("kw,field", [(dict(mode="later"), "mode"), (dict(max_pending=0), "max_pending"),
                                      (dict(when_full="wait"), "when_full")])
def test_bad_async_options_are_one_line_input_errors(tmp_path, kw, field):
    with pytest.raises(InputError) as e:
        Recorder(tmp_path / "rec", V, **kw)
    assert e.value.field == field


# ----------------------------------------------------------------------------- SIGKILL mid-recording
CHILD = r"""
import sys, torch
from replay_harness.recording.recorder import Recorder
V = int(sys.argv[2])
rec = Recorder(sys.argv[1], V, mode="async", max_pending=3, when_full="block")
i = 0
while True:  # until killed: ~2 MB steps, each seeded by its engine step
    g = torch.Generator().manual_seed(i)
    rec.record_step(torch.randn(128, V, generator=g), list(range(129)), None, list(range(128)), 1.0, None,
                    None, None, 7, None, [[i % V]] * 128, None)
    i += 1
"""


def test_sigkill_async_keeps_every_written_step_valid(tmp_path):
    out = tmp_path / "rec"
    vocab = 4096
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(vocab)], cwd=REPO, stderr=subprocess.PIPE)
    third = out / "steps" / "step-000002.safetensors"
    deadline = time.time() + 60
    try:
        while not third.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.time() < deadline, "no third step within 60 s"
            time.sleep(0.005)
        time.sleep(0.05)  # somewhere inside a later write
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    r = Recording(out)
    assert len(r) >= 3 and not r.manifest["complete"]
    problems = check_recording(r)
    assert [p.field for p in problems] == ["complete"] and problems[0].warning  # only "did not close cleanly"
    for record in r:  # every written step is whole, in order, and holds its own engine step's content
        i = record.meta["engine_step"]
        assert i == record.index
        assert torch.equal(record.step.logits, torch.randn(128, vocab, generator=torch.Generator().manual_seed(i)))
        assert record.emitted.tokens.tolist() == [[i % vocab]] * 128


# ----------------------------------------------------------------------------- CUDA: side stream, pinned pool
@pytest.mark.gpu
def test_cuda_copy_waits_for_the_producing_kernels_and_matches_sync(tmp_path):
    dev = torch.device("cuda")
    torch.cuda.synchronize()
    for mode in ("sync", "async"):
        with Recorder(tmp_path / mode, V, mode=mode, max_pending=2) as rec:
            for i in range(6):
                base = _inputs(i)
                logits = torch.zeros(4, V, dtype=torch.bfloat16, device=dev)
                torch.cuda._sleep(50_000_000)             # a long kernel before the one producing the logits
                logits.copy_(base["logits"].to(dev, non_blocking=True))
                base.update(logits=logits, cu_num_logits=base["cu_num_logits"].to(dev),
                            draft_logits=base["draft_logits"].to(dev)[:, :].t().contiguous().t())  # strided view
                rec.record_step(**base)
                del logits, base                           # freed: without record_stream the allocator
                torch.full((4, V), 7.0, dtype=torch.bfloat16, device=dev)  # would hand the block out now
    assert _files(tmp_path / "async") == _files(tmp_path / "sync")
    assert torch.equal(Recording(tmp_path / "async")[5].step.logits, _inputs(5)["logits"])
