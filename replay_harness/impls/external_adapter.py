"""Serve an in-process impl over the replay.exec/1 protocol (docs/EXTERNAL.md), for process isolation.

    python -m replay_harness.impls.external_adapter IMPL

IMPL is ``module:Class`` (any importable class or factory with ``sample(step) -> SampleResult``) or
the name of a registered impl (``reference``, ``guarded``, an entry point). Then, from the harness:

    replay run REC --impl "exec:python -m replay_harness.impls.external_adapter my_engine.sampler:Sampler"

The adapter prints the handshake (the impl's name and rng_contract), then answers each step path read
from stdin with one JSON reply line; ``kernel_us`` is the wall time of ``impl.sample(step)``. An
exception inside the impl becomes an ``{"error": ...}`` reply (the harness exits 3 with it).
Everything else written to stdout goes to stderr, so the protocol pipe carries only protocol lines: at
start the adapter keeps the real stdout on a private file descriptor and points fd 1 at stderr (``dup2``),
so Python prints, native writes to fd 1 (a C extension's banner at import, ``os.write(1, ...)``) and the
stdout of child processes all land on stderr.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time

import torch

from replay_harness.impls import get_impl
from replay_harness.impls.contract import Sampler, as_sampler, place
from replay_harness.impls.external import read_step_file

USAGE = "usage: python -m replay_harness.impls.external_adapter IMPL   (IMPL = module:Class or a registered impl name)"


def load(target: str) -> Sampler:
    """An impl from ``module:Class`` or a registered impl name (a ``Sampler``; unnamed ones are called ``target``)."""
    if ":" in target:
        module, _, attr = target.partition(":")
        return as_sampler(getattr(importlib.import_module(module), attr)(), target)
    return get_impl(target)


def reply_for(impl: Sampler, path: str, device: torch.device) -> dict:
    """The JSON reply (a dict) for the step file at ``path``."""
    step = place(read_step_file(path)[0], impl, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    res = impl.sample(step)
    if device.type == "cuda":
        torch.cuda.synchronize()
    us = (time.perf_counter() - t0) * 1e6
    if res.self_reported_us is not None:
        us = float(res.self_reported_us)
    return {"tokens": res.tokens.cpu().tolist(), "counts": res.counts.cpu().tolist(),
            "routes": res.routes.cpu().tolist(), "notes": list(res.notes), "kernel_us": us}


def private_stdout():
    """A text stream on a private duplicate of fd 1 (the protocol pipe); fd 1 itself then points at stderr, so
    whatever else writes to stdout, natively or from Python, cannot reach the protocol pipe."""
    sys.stdout.flush()
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8")  # os.dup: not inherited by child processes
    os.dup2(2, 1)
    return proto


def serve(target: str, stdin=None, stdout=None) -> int:
    """Run the protocol loop until EOF on ``stdin``; returns the exit status. Without ``stdout`` the
    protocol goes to the process's real stdout, kept private (:func:`private_stdout`)."""
    stdin = stdin or sys.stdin
    proto = stdout or private_stdout()
    with contextlib.redirect_stdout(sys.stderr):  # stray prints of the impl must not corrupt the protocol
        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel module is imported
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            impl = load(target)
        except Exception as e:  # noqa: BLE001  (any load failure is reported in the handshake's place)
            print(f"cannot load impl {target!r}: {type(e).__name__}: {e}", file=sys.stderr)
            return 3
        if impl.requires_cuda and device.type != "cuda":
            print(f"impl {target!r} needs a CUDA GPU", file=sys.stderr)
            return 3
    _send(proto, {"protocol": "replay.exec/1", "name": str(impl.name), "rng_contract": str(impl.rng_contract),
                  "description": f"{impl.description} (served by replay_harness.impls.external_adapter)"})
    for line in stdin:
        path = line.rstrip("\r\n")
        if not path:
            continue
        with contextlib.redirect_stdout(sys.stderr):
            try:
                doc = reply_for(impl, path, device)
            except Exception as e:  # noqa: BLE001  (the harness turns it into one line and exit 3)
                doc = {"error": f"{type(e).__name__}: {e}"}
        _send(proto, doc)
    return 0


def _send(stream, doc: dict) -> None:
    stream.write(json.dumps(doc, separators=(",", ":")) + "\n")
    stream.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 2
    return serve(argv[0])


if __name__ == "__main__":
    sys.exit(main())
