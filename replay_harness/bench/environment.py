"""One environment capture for every benchmark output: where, on what and with which code it ran.

:func:`environment` returns a flat dict (JSON- and CSV-friendly):

    device            "cuda" or "cpu" (the device timed)
    gpu               the GPU's name, or "cpu"
    clock             "cuda-events" or "cpu-wall" (the clock `replay bench` uses on this device)
    l2_bytes          the GPU's L2 size (None on the CPU)
    sm, sms, mem_gib  compute capability, multiprocessor count, memory (CUDA only)
    nvidia_smi        driver, SM / memory clocks, power, temperature, utilization (CUDA only)
    torch, triton, cuda, python   versions
    triton_interpret  True under TRITON_INTERPRET=1 (Triton kernels interpreted: timings not representative)
    host, date        machine name, UTC time of the capture (ISO 8601, "Z")
    commit            git commit of the repository ("unknown" outside a git checkout)
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path

import torch

from replay_harness.bench.timing import l2_bytes

REPO = Path(__file__).resolve().parents[2]
SMI_QUERY = "driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,utilization.gpu"


def _run(argv: list[str], cwd: Path | None = None) -> str:
    """stdout (or stderr) of a short command, or 'unavailable: why'."""
    try:
        q = subprocess.run(argv, capture_output=True, text=True, timeout=20, cwd=cwd)
    except Exception as e:  # noqa: BLE001 - the tool may be missing; the capture says so
        return f"unavailable: {e}"
    return q.stdout.strip() if q.returncode == 0 else f"unavailable: {(q.stderr or q.stdout).strip()[:200]}"


def commit() -> str:
    """The checkout's commit, with "+ uncommitted changes" when tracked files differ from it (a copied working
    tree, e.g. on a lent GPU machine, can carry an older HEAD than its files). Read-only: writes nothing to git."""
    out = _run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO)
    if out.startswith("unavailable"):
        return "unknown"
    changed = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)
    return f"{out} + uncommitted changes" if changed and not changed.startswith("unavailable") else out


def environment(device: torch.device) -> dict:
    import triton

    env = {"device": device.type, "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(),
           "triton_interpret": os.environ.get("TRITON_INTERPRET", "") == "1", "host": platform.node(),
           "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": commit()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(gpu=torch.cuda.get_device_name(device), l2_bytes=l2_bytes(device), clock="cuda-events",
                   sm=f"{p.major}.{p.minor}", sms=p.multi_processor_count, mem_gib=round(p.total_memory / 2**30, 1),
                   nvidia_smi=_run(["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader"]))
    else:
        env.update(gpu="cpu", l2_bytes=None, clock="cpu-wall")
    return env
