#!/usr/bin/env python3
"""What recording costs a decode loop: the Recorder sync vs async (block, drop), and the disk it writes to.

GPU (H200):  python tools/bench_recorder.py --dir /local/scratch --out recorder.json
CPU smoke:   python tools/bench_recorder.py --tiny --out /tmp/recorder.json     (R 2,4, V 4096, CPU, 1 thread)

A simulated engine loop, per step: a decode step's worth of device work (``--step-ms``, 20 ms:
``torch.cuda._sleep`` calibrated with CUDA events; on the CPU a ``time.sleep``, the host waiting on
its device), then the logits [N, V] (N = R*(k+1), ``--dtype``, fresh each step as an engine's are),
a greedy "sampler" (argmax), ``record_step`` with every input on the device, and the engine's one
sync a step (the sampled tokens to the host). Per batch size R, the loop runs ``--steps`` timed
steps (after ``--warmup`` untimed ones) in each mode:

  none          no recording: the baseline loop time
  sync          Recorder(mode="sync"): D2H copy, checks, write + fsync inside the loop
  async-block   Recorder(mode="async", when_full="block", max_pending=--max-pending)
  async-drop    Recorder(mode="async", when_full="drop"): steps dropped when the queue is full
  async-every   async-block recording every N-th step, N the derived sustainable rate (a check)

loss per recorded step = (loop time - baseline) / recorded steps, also as a fraction of --step-ms;
loop loss = loop time / baseline - 1 (what the engine loses, whatever was recorded).
The disk's write bandwidth is measured in the same run, before and after the modes (a --disk-mib file in
--dir, then fsync; plain, and with write-back started as it goes, the way the Recorder writes; the
fastest of all is the floor: the virtual disk of the GPU machine varies by 20% between runs). Writer throughput: step bytes / seconds in the write path, from the Recorder's
own ``write_stats`` (sync: copy, checks, write, fsync in record_step; async: the writer thread), and as
the sync loop sees it (step bytes / sync loss per step).
Sustainable rate: record every N-th step, N = ceil(1.1 x max(step bytes / disk bandwidth, async writer
seconds per step) / step seconds) (10% headroom); the async-every run records that long enough to record
>= 8 steps. ``in rec`` is the engine thread's own time inside record_step (the enqueue), per step.

The step-file floor: the same disk writing files of one step's size from memory the way a step file is
written (temp file, streamed write-back, fsync, rename, fsync of the folder) but with no conversion, check
or digest; measured before every writer run and after the last, its median is the writer's floor for that
R (per-file costs are the disk's). Each writer run's seconds per phase (check, write, fsync, publish,
digest_wait: the manifest's ``write_stats.phases``) are printed too.

The ratios of docs/BENCHMARKS.md ("Record and replay") are printed at the end, one line each.

Prints a table; writes JSON to --out. Exit 0 ok, 2 bad option, 3 no CUDA for --device cuda, 130 Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from replay_harness.recording.recorder import Recorder  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
MODES = ("none", "sync", "async-block", "async-drop", "async-every")
HEADROOM = 1.1  # the sustainable rate leaves the writer 10% of its time idle (jitter, other disk users)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--batch", default="64,256", help="comma list of R (requests per step)")
    ap.add_argument("--drafts", type=int, default=4, help="k, drafts per request")
    ap.add_argument("--vocab", type=int, default=248_320, help="V")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--step-ms", type=float, default=20.0, help="simulated decode step, ms")
    ap.add_argument("--steps", type=int, default=16, help="timed engine steps per mode")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed engine steps first: pinned pool, caches, a full queue (default max-pending + 1)")
    ap.add_argument("--max-pending", type=int, default=4, help="async queue bound")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--dir", default=None, help="where recordings and the disk test file go (default: a temp dir)")
    ap.add_argument("--disk-mib", type=int, default=2048, help="size of the disk bandwidth test file, MiB")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke: R 2,4, V 4096, 12 steps, 64 MiB disk test")
    args = ap.parse_args(argv)
    if args.tiny:
        args.batch, args.vocab, args.steps, args.disk_mib = "2,4", 4096, 12, 64
        args.device = args.device or "cpu"
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.warmup = args.max_pending + 1 if args.warmup is None else args.warmup
    try:
        args.batch = [int(x) for x in args.batch.split(",")]
    except ValueError:
        ap.exit(2, f"bench_recorder: --batch: expected a comma list of integers, got {args.batch!r}\n")
    args.modes = args.modes.split(",")
    bad = [m for m in args.modes if m not in MODES]
    if bad or min(args.batch) < 1 or args.steps < 1 or args.drafts < 0 or args.vocab < 2 or args.max_pending < 1:
        ap.exit(2, f"bench_recorder: bad option: {bad or 'batch, steps, drafts and vocab must be positive'}\n")
    if args.device not in ("cuda", "cpu"):
        ap.exit(2, f"bench_recorder: --device must be cuda or cpu, got {args.device!r}\n")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.exit(3, "bench_recorder: --device cuda but torch sees no CUDA device\n")
    return args


# ----------------------------------------------------------------------------- the simulated engine
class Engine:
    """A decode loop's shape of work: device time, fresh logits, a sampler, one sync a step."""

    def __init__(self, device: str, r: int, k: int, vocab: int, dtype: torch.dtype, step_ms: float):
        self.device, self.r, self.k, self.vocab, self.dtype = torch.device(device), r, k, vocab, dtype
        self.step_s = step_ms / 1000
        self.cycles = _sleep_cycles(step_ms) if device == "cuda" else 0
        d = self.device
        n = r * (k + 1)
        gen = torch.Generator(device=d).manual_seed(0)
        self.cu = torch.arange(0, n + 1, k + 1, dtype=torch.int32, device=d)
        drafts = torch.randint(0, vocab, (r, k + 1), generator=gen, device=d, dtype=torch.int32)
        drafts[:, -1] = -1
        self.drafts = drafts.reshape(-1)
        self.positions = torch.arange(n, device=d, dtype=torch.int64)
        self.per_req = dict(temperature=torch.zeros(r, device=d), top_k=torch.zeros(r, dtype=torch.int32, device=d),
                            top_p=torch.ones(r, device=d), min_p=torch.zeros(r, device=d),
                            seed=torch.arange(r, device=d), request_ids=torch.arange(r, device=d))
        self.counts = torch.full((r,), k + 1, dtype=torch.int32, device=d)
        self.n = n
        self.in_record_s = 0.0  # the engine thread's time inside record_step

    @property
    def step_bytes(self) -> int:
        return self.n * self.vocab * torch.empty((), dtype=self.dtype).element_size()

    def step(self, rec: Recorder | None) -> None:
        if self.cycles:
            torch.cuda._sleep(self.cycles)  # the forward pass
        else:
            time.sleep(self.step_s)         # the host waits on its device
        logits = torch.randn(self.n, self.vocab, device=self.device, dtype=self.dtype)
        tokens = logits.view(self.r, self.k + 1, self.vocab).argmax(-1).int()  # the "sampler"
        if rec is not None:
            start = time.perf_counter()
            rec.record_step(logits, self.cu, self.drafts, self.positions, emitted_tokens=tokens,
                            emitted_counts=self.counts, **self.per_req)
            self.in_record_s += time.perf_counter() - start
        tokens.cpu()  # the engine's one sync a step


def _sleep_cycles(ms: float) -> int:
    """torch.cuda._sleep cycles that take ``ms`` milliseconds (measured with CUDA events)."""
    probe = 10_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(2):  # the first launch warms up
        start.record()
        torch.cuda._sleep(probe)
        end.record()
        end.synchronize()
    return int(probe * ms / start.elapsed_time(end))


def run_mode(engine: Engine, mode: str, root: Path, args, every: int = 1, steps: int | None = None) -> dict:
    """Time ``steps`` (default ``args.steps``) engine steps recording in ``mode``; the recording is deleted
    afterwards."""
    steps = steps or args.steps
    path = root / f"rec-R{engine.r}-{mode}"
    rec = None
    if mode != "none":
        kind = dict(mode="sync") if mode == "sync" else dict(
            mode="async", max_pending=args.max_pending, when_full="drop" if mode == "async-drop" else "block")
        rec = Recorder(path, engine.vocab, source={"engine": "bench_recorder"}, every=every, **kind)
    try:
        for _ in range(args.warmup):
            engine.step(rec)
        _sync(engine)
        before_dropped = rec.dropped if rec else 0
        calls_before = rec.calls if rec else 0
        engine.in_record_s = 0.0
        start = time.perf_counter()
        for _ in range(steps):
            engine.step(rec)
        _sync(engine)
        loop_s = time.perf_counter() - start
        dropped = (rec.dropped if rec else 0) - before_dropped
        chosen = sum(1 for c in range(calls_before, calls_before + steps) if c % every == 0)
        recorded = 0 if rec is None else chosen - dropped
        close_start = time.perf_counter()
        if rec is not None:
            rec.close()
        drain_s = time.perf_counter() - close_start
        stats = rec.write_stats if rec is not None else None
    finally:
        shutil.rmtree(path, ignore_errors=True)
    writer = stats["bytes"] / stats["seconds"] / 1e6 if stats and stats["seconds"] else None
    phases = {k: 1000 * v / stats["steps"] for k, v in stats["phases"].items()} if stats and stats["steps"] else {}
    return dict(R=engine.r, mode=mode, every=every, steps=steps, recorded=recorded, dropped=dropped,
                loop_ms_per_step=1000 * loop_s / steps, drain_after_loop_s=drain_s, writer_MBps=writer,
                in_record_ms_per_step=1000 * engine.in_record_s / steps, phases_ms_per_step=phases)


def step_file_floor(root: Path, step_bytes: int, files: int) -> dict:
    """The disk's bandwidth for the Recorder's unit of work: ``files`` files of ``step_bytes`` random bytes
    each, written from memory the way a step file is (stepfile.atomic_write: streamed write-back, fsync,
    rename, fsync of the folder), with no conversion, check or digest. Per-file costs (two fsyncs, the
    write-back's start and drain) are the disk's; what the writer loses beyond this is the writer's."""
    from replay_harness.recording.stepfile import atomic_write

    data = np.random.default_rng(1).integers(0, 256, step_bytes, dtype=np.uint8)
    folder = root / "step-floor"
    folder.mkdir(exist_ok=True)
    phases: dict[str, float] = {}
    start = time.perf_counter()
    for i in range(files):
        atomic_write(folder / f"f{i}.bin", [memoryview(data)], phases)
    seconds = time.perf_counter() - start
    shutil.rmtree(folder, ignore_errors=True)
    return dict(bytes=step_bytes * files, files=files, seconds=seconds, MBps=step_bytes * files / seconds / 1e6,
                phases_ms_per_file={k: 1000 * v / files for k, v in phases.items()})


def _sync(engine: Engine) -> None:
    """Wait for the engine's stream only (not the recorder's side stream, whose copies are not loop time)."""
    if engine.device.type == "cuda":
        torch.cuda.current_stream().synchronize()


def disk_bandwidth(root: Path, mib: int) -> dict:
    """Write ``mib`` MiB (chunks of random bytes) to a file in ``root``, fsync, time it: once plain (64 MiB
    writes), then starting write-back after every chunk (posix_fadvise DONTNEED, as stepfile.write_step_file
    does) with 64 MiB and with 16 MiB chunks. The fastest is the disk's write bandwidth."""
    out = {}
    for how, mib_chunk in (("plain", 64), ("streamed", 64), ("streamed16", 16)):
        chunk = np.random.default_rng(0).integers(0, 256, mib_chunk * 2 ** 20, dtype=np.uint8).tobytes()
        file = root / f"disk-test-{how}.bin"
        written, start = 0, time.perf_counter()
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            while written < mib * 2 ** 20:
                part = memoryview(chunk)[: min(len(chunk), mib * 2 ** 20 - written)]
                at = 0
                while at < len(part):
                    at += os.write(fd, part[at:])
                if how.startswith("streamed"):
                    os.posix_fadvise(fd, written, len(part), os.POSIX_FADV_DONTNEED)
                written += len(part)
            os.fsync(fd)
        finally:
            os.close(fd)
        seconds = time.perf_counter() - start
        file.unlink()
        out[how] = dict(bytes=written, seconds=seconds, MBps=written / seconds / 1e6)
    best = max(out.values(), key=lambda d: d["MBps"])
    return dict(**best, **{f"{how}_MBps": d["MBps"] for how, d in out.items()})


def derive(rows: list[dict], engine: Engine, disk: dict, step_ms: float) -> dict:
    """The sustainable every-N-th-step rate for this R from the disk bandwidth and the async writer's
    throughput (else the sync writer's), and the writer's throughput against the disk's."""
    base = next(x for x in rows if x["mode"] == "none")["loop_ms_per_step"]
    sync = next((x for x in rows if x["mode"] == "sync"), None)
    asynchronous = next((x for x in rows if x["mode"].startswith("async") and x["writer_MBps"]), None)
    disk_s = engine.step_bytes / (disk["MBps"] * 1e6)
    writer = (asynchronous or sync or {}).get("writer_MBps")
    writer_s = engine.step_bytes / (writer * 1e6) if writer else 0.0
    every = max(1, math.ceil(HEADROOM * max(disk_s, writer_s) / (step_ms / 1000)))
    sync_loss_s = max((sync["loop_ms_per_step"] - base) / 1000, 1e-9) if sync else None
    return dict(R=engine.r, step_bytes=engine.step_bytes, disk_s_per_step=disk_s, writer_s_per_step=writer_s,
                bound="disk" if disk_s >= writer_s else "writer", every=every,
                sync_writer_MBps=sync["writer_MBps"] if sync else None,
                sync_loop_MBps=engine.step_bytes / sync_loss_s / 1e6 if sync else None,
                async_writer_MBps=asynchronous["writer_MBps"] if asynchronous else None)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dtype = DTYPES[args.dtype]
    if args.device == "cpu":  # the CPU "engine" only waits and argmaxes: intra-op threads would spin
        torch.set_num_threads(1)  # against the writer thread (on 2 shared cores: a 10 ms bf16 argmax)
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-recorder-"))
    root.mkdir(parents=True, exist_ok=True)
    out: dict = dict(device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                     label=args.device.upper(), drafts=args.drafts, vocab=args.vocab, dtype=args.dtype,
                     step_ms=args.step_ms, max_pending=args.max_pending, dir=str(root), rows=[], sustainable=[],
                     command=" ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]))
    try:
        out["disk"] = disk_bandwidth(root, args.disk_mib)
        print(f"disk {root}: {out['disk']['MBps']:.0f} MB/s (write + fsync {args.disk_mib} MiB)", file=sys.stderr)
        for r in args.batch:
            engine = Engine(args.device, r, args.drafts, args.vocab, dtype, args.step_ms)
            rows, floors = [], []
            for mode in args.modes:
                if mode == "async-every":
                    continue
                if mode != "none":  # the step-file floor measured next to every writer run
                    floors.append(step_file_floor(root, engine.step_bytes, max(4, min(args.steps, 8))))
                rows.append(run_mode(engine, mode, root, args))
                print(f"R={r} {mode}: {rows[-1]['loop_ms_per_step']:.2f} ms/step", file=sys.stderr)
            if floors:
                floors.append(step_file_floor(root, engine.step_bytes, max(4, min(args.steps, 8))))
                out.setdefault("step_file_floor", {})[str(r)] = floors
            if not any(x["mode"] == "none" for x in rows):
                rows.insert(0, run_mode(engine, "none", root, args))
            rate = derive(rows, engine, out["disk"], args.step_ms)
            if "async-every" in args.modes:  # long enough to record >= 8 steps
                rows.append(run_mode(engine, "async-every", root, args, every=rate["every"],
                                     steps=max(args.steps, 8 * rate["every"])))
            base = next(x for x in rows if x["mode"] == "none")["loop_ms_per_step"]
            for x in rows:
                lost_ms = (x["loop_ms_per_step"] - base) * x["steps"]
                x["loss_ms_per_recorded_step"] = lost_ms / x["recorded"] if x["recorded"] else None
                x["loss_fraction_of_step"] = (x["loss_ms_per_recorded_step"] / args.step_ms
                                              if x["recorded"] else None)
                x["loop_loss"] = x["loop_ms_per_step"] / base - 1
                x["step_bytes"] = engine.step_bytes
            out["rows"] += rows
            out["sustainable"].append(rate)
            del engine
        after = disk_bandwidth(root, args.disk_mib)  # the disk again after the modes: the floor is the faster
        print(f"disk again: {after['MBps']:.0f} MB/s", file=sys.stderr)
        out["disk_before"], out["disk_after"] = out["disk"], after
        if after["MBps"] > out["disk"]["MBps"]:
            out["disk"] = after
            for rate in out["sustainable"]:
                rate["disk_s_per_step"] = rate["step_bytes"] / (after["MBps"] * 1e6)
    except KeyboardInterrupt:
        print("bench_recorder: interrupted", file=sys.stderr)
        return 130
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    print_table(out)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


def print_table(out: dict) -> None:
    print(f"[{out['label']}] {out['device']}  k={out['drafts']} V={out['vocab']} {out['dtype']}  "
          f"step {out['step_ms']:g} ms  max_pending {out['max_pending']}  "
          f"disk {out['disk']['MBps']:.0f} MB/s")
    print(f"{'R':>4} {'mode':<12} {'every':>5} {'MB/st':>6} {'ms/st':>7} {'rec':>4} {'drop':>4} "
          f"{'lost/rec':>8} {'loop+':>6} {'MB/s':>6} {'in rec':>6}")
    for x in out["rows"]:
        lost, writer = x["loss_ms_per_recorded_step"], x["writer_MBps"]
        print(f"{x['R']:>4} {x['mode']:<12} {x['every']:>5} {x['step_bytes'] / 1e6:>6.0f} "
              f"{x['loop_ms_per_step']:>7.2f} {x['recorded']:>4} {x['dropped']:>4} "
              f"{'-' if lost is None else format(lost, '.2f'):>8} {x['loop_loss']:>6.1%} "
              f"{'-' if writer is None else format(writer, '.0f'):>6} {x['in_record_ms_per_step']:>6.2f}")
    disk = out["disk"]["MBps"]
    for s in out["sustainable"]:
        print(f"R={s['R']}: sustainable: record 1 step in {s['every']} ({s['bound']}-bound: disk "
              f"{1000 * s['disk_s_per_step']:.1f} ms, writer {1000 * s['writer_s_per_step']:.1f} ms per step)")
    for x in out["rows"]:
        if x["phases_ms_per_step"]:
            print(f"R={x['R']} {x['mode']}: writer ms per step: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in x["phases_ms_per_step"].items()))
    for r, floors in out.get("step_file_floor", {}).items():
        print(f"R={r}: step-file floor (no check, no digest), measured before each writer run and after the last: "
              + ", ".join(f"{f['MBps']:.0f}" for f in floors) + " MB/s; ms per file: "
              + ", ".join(f"{k} {v:.1f}" for k, v in floors[0]["phases_ms_per_file"].items()))
    print("ratios (docs/BENCHMARKS.md, 'Record and replay'):")
    for s in out["sustainable"]:
        floors = [f["MBps"] for f in out.get("step_file_floor", {}).get(str(s["R"]), [])]
        step_floor = float(np.median(floors)) if floors else None
        for what in ("sync_writer_MBps", "async_writer_MBps", "sync_loop_MBps"):
            if s.get(what):
                line = f"  R={s['R']}: {what[:-5]} {s[what]:.0f} MB/s / disk {disk:.0f} MB/s = {s[what] / disk:.2f}"
                if step_floor:
                    line += f"; / step-file floor {step_floor:.0f} MB/s (median) = {s[what] / step_floor:.2f}"
                print(line)
    for x in out["rows"]:
        if x["mode"] in ("async-every", "async-block") and x["recorded"]:
            print(f"  R={x['R']}: {x['mode']} every {x['every']}: engine loop +{x['loop_loss']:.1%} "
                  f"({x['recorded']} steps recorded, {x['dropped']} dropped)")


if __name__ == "__main__":
    sys.exit(main())
