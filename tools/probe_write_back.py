#!/usr/bin/env python3
"""Where a step file's write time goes on this disk: the write protocol's variants, interleaved.

    python tools/probe_write_back.py --dir /path/on/the/recording/disk --mib 152,607 --files 8 --rounds 3

For each size, ``--files`` files of that many MiB of random bytes are written from memory per variant, the
variants taking turns for ``--rounds`` rounds (so a disk that drifts during the run drifts for all of them),
and the median MB/s per variant is printed with its per-file phases:

  current      stepfile.atomic_write: temp file, os.write in 16 MiB pieces with write-back started every
               16 MiB (posix_fadvise DONTNEED), fsync, rename, fsync of the folder (what the Recorder does)
  wb64         the same with write-back started every 64 MiB
  sfr          write-back started with sync_file_range(SYNC_FILE_RANGE_WRITE) every 16 MiB (Linux, ctypes)
  no-folder    current without the folder's fsync (a crash of the machine may lose the rename; a killed
               process never does)
  one-file     all the files' bytes appended to one file, one fsync at the end (the disk's streaming
               bandwidth: no per-file cost at all)

Synthetic bytes (random), real files on the named disk. Prints a table; ``--out`` writes JSON. Exit 0, 2 on
a bad option.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from replay_harness.recording import stepfile  # noqa: E402

_libc = ctypes.CDLL(None, use_errno=True)
_SYNC_FILE_RANGE_WRITE = 2


def _sync_file_range(fd: int, offset: int, nbytes: int) -> None:
    if _libc.sync_file_range(fd, ctypes.c_int64(offset), ctypes.c_int64(nbytes), _SYNC_FILE_RANGE_WRITE):
        raise OSError(ctypes.get_errno(), "sync_file_range")


def write_file(path: Path, data: memoryview, variant: str, phases: dict) -> None:
    """One file of ``data`` with ``variant``'s protocol (see the module docstring)."""
    if variant == "current":
        stepfile.atomic_write(path, [data], phases)
        return
    t0 = time.perf_counter()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        stepfile._write_all(fd, [data], every=64 << 20 if variant == "wb64" else stepfile.WRITEBACK_BYTES,
                            start_writeback=_sync_file_range if variant == "sfr" else None)
        t1 = time.perf_counter()
        os.fsync(fd)
        t2 = time.perf_counter()
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if variant != "no-folder":
        stepfile._fsync_folder(path.parent)
    t3 = time.perf_counter()
    for name, a, b in (("write", t0, t1), ("fsync", t1, t2), ("publish", t2, t3)):
        phases[name] = phases.get(name, 0.0) + b - a


def one_file(folder: Path, data: memoryview, files: int, phases: dict) -> None:
    """All ``files`` copies of ``data`` appended to one file with the step writer's loop, one fsync at the end."""
    t0 = time.perf_counter()
    fd = os.open(folder / "stream.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        stepfile._write_all(fd, [data] * files)
        t1 = time.perf_counter()
        os.fsync(fd)
    finally:
        os.close(fd)
    t2 = time.perf_counter()
    phases["write"] = phases.get("write", 0.0) + t1 - t0
    phases["fsync"] = phases.get("fsync", 0.0) + t2 - t1


VARIANTS = ("current", "wb64", "sfr", "no-folder", "one-file")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="a folder on the disk to measure (default: a temp dir)")
    ap.add_argument("--mib", default="152,607", help="comma list of file sizes, MiB")
    ap.add_argument("--files", type=int, default=8, help="files per variant per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (variants interleaved)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    variants = args.variants.split(",")
    try:
        sizes = [int(x) for x in args.mib.split(",")]
    except ValueError:
        ap.exit(2, f"probe_write_back: --mib: expected integers, got {args.mib!r}\n")
    if set(variants) - set(VARIANTS) or min(sizes) < 1 or args.files < 1 or args.rounds < 1:
        ap.exit(2, "probe_write_back: bad option\n")
    made = None if args.dir else tempfile.mkdtemp(prefix="probe-write-")
    root = Path(args.dir or made)
    folder = root / "probe-write-back"
    folder.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    try:
        for mib in sizes:
            data = memoryview(np.random.default_rng(mib).integers(0, 256, mib << 20, dtype=np.uint8))
            for _ in range(args.rounds):
                for variant in variants:
                    phases: dict = {}
                    start = time.perf_counter()
                    if variant == "one-file":
                        one_file(folder, data, args.files, phases)
                    else:
                        for i in range(args.files):
                            write_file(folder / f"f{i}.bin", data, variant, phases)
                    seconds = time.perf_counter() - start
                    row = results.setdefault(f"{mib}/{variant}", {"MBps": [], "phases_ms": []})
                    row["MBps"].append(len(data) * args.files / seconds / 1e6)
                    row["phases_ms"].append({k: 1000 * v / args.files for k, v in phases.items()})
                    for f in folder.iterdir():
                        f.unlink()
    finally:
        shutil.rmtree(made or folder, ignore_errors=True)
    print(f"{'MiB':>5} {'variant':<10} {'median MB/s':>11} {'min':>6} {'max':>6}  ms per file (first round)")
    for key, row in results.items():
        mib, variant = key.split("/")
        phases = ", ".join(f"{k} {v:.1f}" for k, v in row["phases_ms"][0].items())
        print(f"{mib:>5} {variant:<10} {statistics.median(row['MBps']):>11.0f} {min(row['MBps']):>6.0f} "
              f"{max(row['MBps']):>6.0f}  {phases}")
    if args.out:
        Path(args.out).write_text(json.dumps(dict(dir=str(root), files=args.files, rounds=args.rounds,
                                                  results=results), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
