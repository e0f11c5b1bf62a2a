"""Read-ahead of recording steps (replay_harness/recording/prefetch.py): a bounded number of steps is
resident, the read runs ahead of the work, errors surface at the step that failed, Ctrl-C ends the wait,
and replay gives the same result with and without it.

Resident steps are counted with weakref finalizers on what the loader returns (a hook, not timing).
"""
from __future__ import annotations

import _thread
import signal
import threading
import time
import weakref

import pytest
import torch

from replay_harness.compare import runner
from replay_harness.errors import InputError
from replay_harness.impls import get_impl
from replay_harness.recording import prefetch
from replay_harness.recording.prefetch import Prefetcher, ReadStats
from replay_harness.recording.store import Recording
from replay_harness.recording.synthetic import Case, write_case


class Live:
    """Counts the loaded objects still alive, and the most alive at once."""

    def __init__(self):
        self.alive = self.peak = 0
        self.lock = threading.Lock()

    def track(self, obj):
        with self.lock:
            self.alive += 1
            self.peak = max(self.peak, self.alive)
        weakref.finalize(obj, self._gone)
        return obj

    def _gone(self):
        with self.lock:
            self.alive -= 1


class Blob:
    """Stands for a loaded step (weak-referenceable)."""

    def __init__(self, key):
        self.key = key


def _wait_until_reader_is_ahead(p: Prefetcher, key: int, n: int) -> None:
    """Block until the reader has filled the queue (or read everything): the worst case for residency."""
    deadline = time.monotonic() + 10
    while not (p._queue.full() or key + p.depth >= n - 1) and time.monotonic() < deadline:
        time.sleep(0.001)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_at_most_depth_plus_two_items_are_resident_and_the_reader_runs_ahead(depth):
    live, n = Live(), 12
    p = Prefetcher(range(n), lambda k: live.track(Blob(k)), depth)
    seen, ahead = [], 0
    for key, blob in p:
        _wait_until_reader_is_ahead(p, key, n)
        ahead = max(ahead, live.alive - 1)  # loaded beyond the one being worked on
        seen.append(blob.key)
    assert seen == list(range(n))
    assert live.peak <= depth + 2  # depth queued + one being read + one being worked on
    assert ahead >= depth  # the next steps were read while this one was worked on


def test_an_error_in_the_reader_surfaces_at_the_step_that_failed():
    def load(k):
        if k == 3:
            raise InputError("rec/steps/step-000003.safetensors", "unreadable safetensors file", step=3)
        return k

    got = []
    with pytest.raises(InputError, match="step-000003.*unreadable") as info:
        for key, value in Prefetcher(range(6), load, 2):
            got.append(value)
    assert got == [0, 1, 2]
    assert info.value.exit_code == 2


def test_ctrl_c_ends_the_wait_for_a_hung_read_within_a_second():
    release = threading.Event()

    def load(k):
        if k == 1:
            release.wait(30)  # a read that hangs (a dead network file system)
        return k

    p = Prefetcher(range(3), load, 2)
    # Python's own Ctrl-C handler, whatever the runner inherited (a shell's background job ignores SIGINT, and
    # interrupt_main then does nothing).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.2, _thread.interrupt_main).start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            for _ in p:
                pass
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 1.5
    assert p._thread.daemon  # never holds the process at exit
    release.set()


@pytest.fixture(scope="module")
def big_recording(tmp_path_factory):
    """8 steps of ~1 MB each (V = 32,768, float32)."""
    path = tmp_path_factory.mktemp("prefetch") / "big"
    write_case(Case("big", vocab_size=32768, num_requests=4, max_drafts=2, steps=8, temperatures=(0.0, 1.0)), path)
    return Recording(path)


def test_replay_with_prefetch_keeps_few_steps_resident_and_gives_the_same_result(big_recording, monkeypatch):
    live = Live()
    read = prefetch.read_step
    monkeypatch.setattr(prefetch, "read_step", lambda *a, **k: live.track(read(*a, **k)))
    impl, dev = get_impl("reference"), torch.device("cpu")
    stats = ReadStats()
    ahead = runner.run_recording(big_recording, impl, "recorded", dev, stats=stats, depth=2)
    assert 1 <= live.peak <= 4  # never more than depth + 2 of the 8 steps at once
    files = sum(f.stat().st_size for f in big_recording.files)
    assert stats.steps == 8 and stats.bytes == files > 4 << 20
    synchronous = runner.run_recording(big_recording, impl, "recorded", dev, depth=0)
    assert ahead.to_dict() == synchronous.to_dict() and ahead.ok and ahead.steps == 8


def test_a_bad_step_is_the_usual_one_line_error_after_the_steps_before_it(big_recording, tmp_path):
    import shutil

    rec_path = tmp_path / "bad"
    shutil.copytree(big_recording.path, rec_path)
    victim = sorted((rec_path / "steps").iterdir())[5]
    victim.write_bytes(victim.read_bytes()[:100])
    steps = []
    with pytest.raises(InputError, match=r"step-000005") as info:
        runner.run_recording(Recording(rec_path), get_impl("reference"), "recorded", torch.device("cpu"),
                             on_step=lambda: steps.append(1), depth=2)
    assert len(steps) == 5 and "\n" not in str(info.value)


def test_run_recordings_reads_the_next_recording_ahead_and_begins_each_in_order(big_recording, tmp_path, monkeypatch):
    """One read-ahead across recordings: the next recording's first step is read while the previous
    recording's last step is replayed (it restarted per recording before); ``begin(r)`` runs just before
    recording r's first step; the Comparisons equal one run per recording."""
    import shutil

    shutil.copytree(big_recording.path, tmp_path / "second")
    recs = [big_recording, Recording(tmp_path / "second")]
    events = []
    read = prefetch.read_step

    def logged_read(rec, index, *a, **k):
        events.append(("read", recs.index(rec), index))
        return read(rec, index, *a, **k)

    class Slow(type(get_impl("reference"))):
        def sample(self, step):
            events.append(("sample",))
            time.sleep(0.05)  # the reader thread has time to run ahead
            return super().sample(step)

    monkeypatch.setattr(prefetch, "read_step", logged_read)
    got = runner.run_recordings(recs, Slow(), "recorded", torch.device("cpu"), depth=2,
                                begin=lambda r: events.append(("begin", r)))
    begins = [i for i, e in enumerate(events) if e[0] == "begin"]
    samples = [i for i, e in enumerate(events) if e[0] == "sample"]
    assert [events[i] for i in begins] == [("begin", 0), ("begin", 1)]
    assert begins[0] < samples[0] and samples[7] < begins[1] < samples[8]  # 8 steps each
    assert events.index(("read", 1, 0)) < samples[7]  # read during recording 0's last step, not after it
    monkeypatch.setattr(prefetch, "read_step", read)
    want = [runner.run_recording(rec, get_impl("reference"), "recorded", torch.device("cpu"), depth=0) for rec in recs]
    assert [c.to_dict() for c in got] == [c.to_dict() for c in want]
