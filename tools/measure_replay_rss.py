#!/usr/bin/env python3
"""Peak RSS and GB/s of `replay run` on a big derived recording, next to the disk's own read bandwidth.

    python tools/measure_replay_rss.py --folder /data/big --gb 50            # the issue-14 measurement
    python tools/measure_replay_rss.py --folder /tmp/big --gb 2 --batch 64  # a quick check

1. makes (or, with --reuse, keeps) a recording of about --gb GB with `replay synth` (V = 248,320 by
   default; R, k, V and the source recording are options; the source's dtype is kept: bf16 for
   fixtures/real-draft-model) in --folder;
2. measures the disk's read bandwidth on the recording's own step files: each file is fsynced and
   dropped from the page cache (posix_fadvise DONTNEED), then read sequentially in 16 MiB blocks;
3. drops the files from the page cache again and runs `replay run FOLDER --json` as a child, measuring
   its wall time and peak RSS (``os.wait4``: the child's maximum resident set); the replay's GB/s is the
   recording's bytes over the wall time, and again over the wall time minus the start-up (the same
   command on a one-step recording: --startup-on, by default fixtures/synthetic-founding; give a one-step
   recording of the measured shape, run once before, so the start-up holds the same kernel loads);
4. prints the ratios of docs/BENCHMARKS.md ("Record and replay"): replay GB/s (after start-up) over the
   cold read GB/s, and peak RSS over 4 steps' bytes + 1 GB.

Prints one JSON document (and writes it to --json-out). Helpers for scripts (tools/run_gpu_scale.sh):
``exec -- CMD ...`` (run CMD: {"rc", "wall_s", "max_rss_mib"} on stderr's last line, CMD's output
passed through), ``drop-cache PATH ...`` and ``disk-read READERS PATH ...`` (the read bandwidth of the files
under PATH with READERS parallel readers, cold: one JSON line).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLOCK = 16 << 20


def step_files(folder: Path) -> list[Path]:
    """The step files of the recording at ``folder``, or of every recording under it."""
    return sorted((folder / "steps").glob("step-*.safetensors")) if (folder / "steps").is_dir() else \
        sorted(p for p in folder.rglob("step-*.safetensors") if p.is_file())


def drop_cache(paths: list[Path]) -> None:
    """Write back and drop every file of ``paths`` (folders: recursively) from the page cache."""
    for path in paths:
        for f in ([path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]):
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)  # dirty pages are not dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _read_all(files: list[Path]) -> int:
    """Read ``files`` sequentially in BLOCK-sized reads; the bytes read."""
    view, total = memoryview(bytearray(BLOCK)), 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while n := fh.readinto(view):
                total += n
    return total


def disk_read(files: list[Path], readers: int = 1) -> dict:
    """Read bandwidth of ``files`` from the disk (page cache dropped first and after), with ``readers``
    threads each reading every readers-th file (file reads release the GIL): 2 readers is what 2 ranks
    replaying from the same disk see."""
    from concurrent.futures import ThreadPoolExecutor

    drop_cache(files)
    start = time.perf_counter()
    with ThreadPoolExecutor(readers) as pool:
        total = sum(pool.map(_read_all, [files[i::readers] for i in range(readers)]))
    seconds = time.perf_counter() - start
    drop_cache(files)
    return {"bytes": total, "readers": readers, "seconds": round(seconds, 3),
            "gb_per_s": round(total / seconds / 1e9, 3)}


def exec_measured(cmd: list[str]) -> dict:
    """Run ``cmd`` (output passed through) and wait for it with ``os.wait4``: rc, wall_s, max_rss_mib."""
    import signal

    start = time.perf_counter()
    proc = subprocess.Popen(cmd)
    # `timeout` (or Ctrl-C) stops this helper: pass it on, so torchrun stops its ranks (no orphans)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: proc.send_signal(signum))
    while True:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            break
        except InterruptedError:
            continue
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"rc": proc.returncode, "wall_s": round(time.perf_counter() - start, 3),
            "max_rss_mib": round(usage.ru_maxrss / 1024, 1)}  # Linux: KiB


def measured_child(cmd: list[str], stdout_file: Path) -> dict:
    """``exec`` in a fresh helper process (so its rusage is this command's alone), stdout to a file."""
    with open(stdout_file, "w") as fh:
        p = subprocess.run([sys.executable, __file__, "exec", "--", *cmd], stdout=fh, stderr=subprocess.PIPE,
                           text=True, cwd=REPO)
    lines = p.stderr.strip().splitlines()
    result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {"rc": p.returncode}
    result["stderr_tail"] = "\n".join(lines[-6:-1])
    return result


def make_recording(args: argparse.Namespace) -> dict:
    """`replay synth` a recording of about args.gb GB into args.folder (kept with --reuse)."""
    itemsize = 2  # bf16 sources (real-draft-model); the file size below is what counts anyway
    step_bytes = args.batch * (args.drafts + 1) * args.vocab * itemsize
    steps = max(1, math.ceil(args.gb * 1e9 / step_bytes))
    folder = Path(args.folder)
    if args.reuse and ((folder / "manifest.json").exists() or any(folder.rglob("manifest.json"))):
        return {"made": False, "steps": len(step_files(folder))}
    cmd = [sys.executable, "-m", "replay_harness.cli", "synth", args.source, "--out", str(folder), "--batch",
           str(args.batch), "--drafts", str(args.drafts), "--vocab", str(args.vocab), "--steps", str(steps),
           "--overwrite"]
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        sys.exit(f"replay synth failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    return {"made": True, "steps": steps, "seconds": round(time.perf_counter() - start, 1)}


def measure(args: argparse.Namespace) -> dict:
    folder = Path(args.folder).resolve()
    made = make_recording(args)
    files = step_files(folder)
    nbytes = sum(f.stat().st_size for f in files)
    disk = disk_read(files)
    device = args.device
    impl = args.impl or ("stochastic" if device == "cuda" else "reference")
    run_args = ["--impl", impl, "--against", args.against, "--device", device, "--json", "--quiet"]
    replay = [sys.executable, "-m", "replay_harness.cli", "run"]
    work = Path(args.work or folder.parent)
    startup = measured_child([*replay, args.startup_on, *run_args], work / "startup.json")
    drop_cache(files)
    child = measured_child([*replay, str(folder), *run_args], work / "replay_run.json")
    try:
        ok = json.loads((work / "replay_run.json").read_text()).get("ok")
    except ValueError:
        ok = None
    wall, net = child.get("wall_s", 0.0), child.get("wall_s", 0.0) - startup.get("wall_s", 0.0)
    return {
        "recording": str(folder), "made": made, "steps": len(files), "bytes": nbytes, "gb": round(nbytes / 1e9, 3),
        "shape": {"R": args.batch, "k": args.drafts, "V": args.vocab, "source": args.source},
        "step_mib": round(nbytes / max(len(files), 1) / 2**20, 1),
        "disk_read": disk,
        "replay": {"command": " ".join(["replay", "run", str(folder), *run_args]), "rc": child.get("rc"),
                   "ok": ok, "wall_s": wall, "max_rss_mib": child.get("max_rss_mib"),
                   "gb_per_s_wall": round(nbytes / wall / 1e9, 3) if wall > 0 else None,
                   "startup_s": startup.get("wall_s"), "startup_max_rss_mib": startup.get("max_rss_mib"),
                   "gb_per_s_after_startup": round(nbytes / net / 1e9, 3) if net > 0 else None,
                   "prefetch_depth": os.environ.get("REPLAY_PREFETCH_DEPTH", "2 (default)"),
                   "stderr_tail": child.get("stderr_tail")},
        "rss_vs_recording": round(child.get("max_rss_mib", 0) * 2**20 / nbytes, 4) if nbytes else None,
        "ratios": {
            "replay_over_cold_read": round(nbytes / net / 1e9 / disk["gb_per_s"], 3) if net > 0 else None,
            "replay_wall_over_cold_read": round(nbytes / wall / 1e9 / disk["gb_per_s"], 3) if wall > 0 else None,
            "rss_over_4_steps_plus_1gb": round(child.get("max_rss_mib", 0) * 2**20
                                               / (4 * nbytes / max(len(files), 1) + 1e9), 3),
        },
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "exec":
        cmd = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[2:]
        result = exec_measured(cmd)
        print(json.dumps(result), file=sys.stderr)
        sys.exit(result["rc"])
    if len(sys.argv) > 1 and sys.argv[1] == "drop-cache":
        drop_cache([Path(p) for p in sys.argv[2:]])
        return
    if len(sys.argv) > 2 and sys.argv[1] == "disk-read":
        files = sorted(f for p in sys.argv[3:] for f in ([Path(p)] if Path(p).is_file() else Path(p).rglob("*"))
                       if f.is_file())
        print(json.dumps(disk_read(files, int(sys.argv[2]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", required=True, help="where the recording is made (or kept, --reuse)")
    ap.add_argument("--gb", type=float, default=2.0, help="recording size in GB (1e9 bytes)")
    ap.add_argument("--batch", type=int, default=256, help="R, requests per step")
    ap.add_argument("--drafts", type=int, default=4, help="k, drafts per request")
    ap.add_argument("--vocab", type=int, default=248320, help="V")
    ap.add_argument("--source", default="fixtures/real-draft-model", help="real recording synth takes rows from")
    ap.add_argument("--reuse", action="store_true", help="keep an existing recording in --folder")
    ap.add_argument("--device", default="cuda" if _cuda() else "cpu")
    ap.add_argument("--impl", default=None, help="default: stochastic on CUDA, reference on the CPU")
    ap.add_argument("--against", default="recorded", help="(derived recordings: compared against reference)")
    ap.add_argument("--startup-on", default=str(REPO / "fixtures" / "synthetic-founding"),
                    help="the one-step recording whose replay is the start-up subtracted")
    ap.add_argument("--work", default=None, help="folder for the run's JSON output (default: beside --folder)")
    ap.add_argument("--json-out", default=None, help="also write the result here")
    args = ap.parse_args()
    result = measure(args)
    text = json.dumps(result, indent=2)
    print(text)
    r = result["ratios"]
    print(f"replay run {result['gb']} GB: {result['replay']['gb_per_s_after_startup']} GB/s after start-up "
          f"({result['replay']['gb_per_s_wall']} wall) / cold read {result['disk_read']['gb_per_s']} GB/s = "
          f"{r['replay_over_cold_read']} ({r['replay_wall_over_cold_read']} wall); peak RSS "
          f"{result['replay']['max_rss_mib']} MiB = {r['rss_over_4_steps_plus_1gb']} x (4 steps + 1 GB)",
          file=sys.stderr)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


if __name__ == "__main__":
    main()
