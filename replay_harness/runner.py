"""Replay recordings through impls and compare (no printing here)."""
from __future__ import annotations

import os
from contextlib import nullcontext
from typing import Any, Callable, Iterable

import torch

from .compare import Comparison, compare_step, recorded_result
from .errors import EnvironmentProblem, UsageError
from .fixture import Recording
from .impls import get_impl


def resolve_device(device: str) -> torch.device:
    """"auto" picks CUDA when present; Triton impls then run natively, else under TRITON_INTERPRET=1."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise EnvironmentProblem("--device cuda asked for, but torch sees no CUDA GPU")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel module is imported
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise UsageError(f"unknown device '{device}' (auto, cpu, cuda)")
    return torch.device(device)


def load_impl(name: str, device: torch.device, impl_args: list[str] | None = None) -> Any:
    impl = get_impl(name, impl_args)
    if getattr(impl, "requires_cuda", False) and device.type != "cuda":
        raise EnvironmentProblem(f"impl '{name}' needs a CUDA GPU")
    return impl


def run_recording(rec: Recording, impl: Any, against: str | Any, device: torch.device,
                  on_step: Callable[[], None] | None = None) -> Comparison:
    """Replay every step of ``rec`` through ``impl``; ``against`` is an impl or "recorded"."""
    cmp = Comparison()
    other_contract = rec.rng_contract if against == "recorded" else getattr(against, "rng_contract", None)
    exact = other_contract is not None and other_contract == getattr(impl, "rng_contract", None)
    if not exact:
        cmp.notes.append(f"RNG contracts differ ({getattr(impl, 'rng_contract', None)} vs {other_contract}): "
                         "stochastic requests are not compared token by token; use statistical verification")
    for record in rec:
        with torch.inference_mode() if device.type == "cuda" else nullcontext():
            got = _to_cpu(impl.sample(_on(record.step, impl, device)))
            want = recorded_result(record.emitted) if against == "recorded" else \
                _to_cpu(against.sample(_on(record.step, against, device)))
        compare_step(cmp, record.index, record.step, got, want, exact_stochastic=exact)
        if on_step:
            on_step()
    return cmp


def _on(step, impl, device: torch.device):
    """The step on the device the impl runs on: torch oracles (``cpu_only``) stay on the CPU."""
    return step if getattr(impl, "cpu_only", False) else step.to(device)


def _to_cpu(result):
    result.tokens, result.counts, result.routes = result.tokens.cpu(), result.counts.cpu(), result.routes.cpu()
    return result


def open_recordings(paths: Iterable[str], nan: str = "error") -> list[Recording]:
    return [Recording(p, nan=nan) for p in paths]
