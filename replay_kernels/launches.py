"""A prepared state's launches, built once and replayed: the per-step Python of ``launch`` runs once a state.

Every kernel of this package launches through :func:`launch`. A sampler's ``launch(state)`` is a fixed
sequence of kernel launches: no host sync, no torch op between them, the same arguments on every call for
one state (its preallocated buffers, views of them, shapes and constexprs fixed by ``prepare``). So
:func:`run_recorded` builds the sequence on a state's first launch, without running it (each call
``kernel[grid]`` with its arguments), keeps it on the state (``state.launches``) and runs the list then and on
every later launch. What is built once: the argument lists, the views (``open_len[j:j + 1]``...), the
grids, the launch plans' properties. Eager steps of many small launches are host-bound (docs/BENCHMARKS.md,
fifteenth session: our own Python took about 22 µs a launch on the CI machine, Triton aside).

Each call is still Triton's public ``kernel[grid](*args, **options)``, made when the list runs: compilation,
its cache, the current stream (a CUDA graph's capture stream too) are Triton's, as in a direct launch. So a
module constant read by a launch function (a block size, a register cap) is read when the state first
launches; change it before ``prepare``.
"""
from __future__ import annotations

import threading
from functools import partial
from typing import Any, Callable

_local = threading.local()  # .recording: the list being built in this thread, or None


def launch(kernel, grid: tuple, *args, **options) -> None:
    """``kernel[grid](*args, **options)``: now, or appended to the sequence this thread is recording."""
    call = partial(kernel[grid], *args, **options)
    recording = getattr(_local, "recording", None)
    if recording is None:
        call()
    else:
        recording.append(call)


def run_recorded(state: Any, build: Callable[[], None]) -> None:
    """Run ``state.launches``, first recording it with ``build()`` (the launches it makes, none run) if None."""
    if state.launches is None:
        _local.recording = calls = []
        try:
            build()
        finally:
            _local.recording = None
        state.launches = calls
    for call in state.launches:
        call()
