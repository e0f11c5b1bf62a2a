"""A prepared state's launches, built once and replayed: the per-step host work of ``launch`` runs once a state.

Every kernel of this package launches through :func:`launch`. A sampler's ``launch(state)`` is a fixed
sequence of kernel launches: no host sync, no torch op between them, the same arguments on every call for
one state (its preallocated buffers, views of them, shapes and constexprs fixed by ``prepare``). So
:func:`run_recorded` records the sequence on a state's first launch, keeps it on the state
(``state.launches``) and runs the list then and on every later launch.

What a recorded launch skips: our Python that builds each launch's arguments (views such as
``open_len[j:j + 1]``, grids, plan properties: about 22 µs a launch on the CI machine), and Triton's
``JITFunction.run`` (binding and specializing every argument, the cache key: most of the 30-48 µs an
eager launch of an empty 36-argument kernel cost on the H200 machine's host, measured
2026-12-02). When the sequence is recorded (``build`` done: the PDL trigger of each launch depends on the next),
each kernel is compiled for its arguments through ``JITFunction.warmup`` (Triton's own
path: same specialization, same cache) and the list keeps its launcher, ``compiled[grid]``, with
the arguments in signature order, constexprs included (what ``JITFunction.run`` passes it in the sources
of triton 3.6 and 3.9; run on the GPU with 3.6). The launcher reads the current stream when it runs, so
a CUDA graph's capture stream too.
Under ``TRITON_INTERPRET=1``, or when ``warmup`` gives no compiled kernel, the list holds ``kernel[grid]`` calls.

So a module constant read by a launch function (a block size, a register cap) is read when the state first
launches: change it before ``prepare``. The tokens do not depend on the path: the same compiled kernel
runs on the same arguments.
"""
from __future__ import annotations

import threading
from functools import lru_cache, partial
from typing import Any, Callable

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
from triton.runtime.jit import JITFunction

from .interpret import interpreting

_local = threading.local()  # .recording: the list being built in this thread, or None


# Programmatic dependent launch: a kernel that declares a ``PDL`` constexpr is launched with ``launch_pdl`` on a
# device of compute capability 9.0 or more (not under the interpreter). Its programs start while the kernel before
# it drains and wait (``griddepcontrol.wait``, :func:`pdl_wait`) for it to finish before reading anything.
PDL = True
# The ``PDL`` constexpr's values, when the kernel lets the next one's programs start: EARLY, as soon as its own
# programs have all passed their wait; LATE, as they exit. A recorded launch triggers early only when the launch
# after it in the sequence waits for it (a PDL kernel), and never the sequence's last (what follows a sampler is
# the caller's); a launch site may ask for LATE (docs/KERNELS.md "Programmatic dependent launch": measured).
PDL_EARLY = 1
PDL_LATE = 2


def launch(kernel, grid: tuple, *args, trigger: int | None = None, **options) -> None:
    """``kernel[grid](*args, **options)``: now, or recorded into this thread's sequence (compiled when the
    sequence ends, :func:`run_recorded`); with ``launch_pdl`` where :data:`PDL` allows it for the kernel.
    ``trigger``: :data:`PDL_LATE` where measured faster; None: early when the next recorded launch waits for this
    one, else late (an unrecorded launch: late)."""
    recording = getattr(_local, "recording", None)
    if recording is None:
        _compiled_call(kernel, grid, args, options, PDL_LATE)()
    else:
        recording.append((kernel, grid, args, options, trigger))


def _with_pdl(kernel, options: dict, trigger: int = PDL_EARLY) -> dict:
    """``options`` with ``PDL`` (= ``trigger``) and ``launch_pdl`` on where :data:`PDL` allows it for ``kernel``."""
    if "PDL" in kernel.arg_names and PDL and _pdl_device():
        return dict(options, PDL=trigger, launch_pdl=True)
    return options


@lru_cache(maxsize=None)
def _pdl_device() -> bool:
    """Whether the current device runs programmatic dependent launches (sm_90 and later; never the interpreter)."""
    import torch
    return not interpreting() and torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


@triton.jit
def pdl_wait(PDL: tl.constexpr):
    """In a kernel launched by :func:`launch`: under ``PDL``, wait until the kernel before it has finished (its
    writes visible), then (``PDL_EARLY``) let the kernel after it start its programs. Call before any load or
    store."""
    if PDL:
        gdc_wait()
        if PDL == 1:  # PDL_EARLY (a kernel reads no module global); PDL_LATE: the programs' exits trigger
            gdc_launch_dependents()


def compiled_kernel(kernel: JITFunction, grid: tuple, args: tuple, options: dict, trigger: int = PDL_EARLY):
    """The compiled kernel ``kernel[grid](*args, **options)`` launches (``JITFunction.warmup``: the same
    specialization and cache), or None when warmup gives none (a jit_cache_hook, or a tool that intercepts run)."""
    compiled = kernel.warmup(*args, grid=grid, **_with_pdl(kernel, options, trigger))
    if hasattr(compiled, "result"):  # an asynchronous compile
        compiled = compiled.result()
    return compiled


def _compiled_call(kernel, grid: tuple, args: tuple, options: dict, trigger: int) -> Callable[[], None]:
    """A call that launches ``kernel[grid](*args, **options)`` (PDL ``trigger`` where it applies) through the
    compiled kernel's launcher."""
    options = _with_pdl(kernel, options, trigger)
    if not isinstance(kernel, JITFunction):  # the interpreter's kernels
        return partial(kernel[grid], *args, **options)
    compiled = compiled_kernel(kernel, grid, args, options, trigger)
    if compiled is None:  # no compiled kernel to keep
        return partial(kernel[grid], *args, **options)
    params = kernel.signature.parameters
    bound = kernel.signature.bind(*args, **{k: v for k, v in options.items() if k in params})
    bound.apply_defaults()
    return partial(compiled[tuple(grid) + (1,) * (3 - len(grid))], *bound.arguments.values())


def run_recorded(state: Any, build: Callable[[], None]) -> None:
    """Run ``state.launches``, first recording it with ``build()`` (the launches it makes, none run) if None."""
    if state.launches is None:
        _local.recording = specs = []
        try:
            build()
        finally:
            _local.recording = None
        state.launches = _calls(specs)
    for call in state.launches:
        call()


def _calls(specs: list[tuple]) -> list[Callable[[], None]]:
    """The recorded launches ``(kernel, grid, args, options, trigger)`` as calls; a launch's PDL trigger is early
    where the next launch waits for it (:data:`PDL_EARLY`: the next is a PDL kernel), else late."""
    waits = [_with_pdl(kernel, {}).get("launch_pdl", False) for kernel, *_ in specs[1:]] + [False]
    return [_compiled_call(kernel, grid, args, options, trigger or (PDL_EARLY if then else PDL_LATE))
            for (kernel, grid, args, options, trigger), then in zip(specs, waits)]


def run_cooperative(state: Any, build: Callable[[], None], fields: tuple[str, ...]) -> None:
    """:func:`run_recorded`; if the driver refuses a cooperative launch (its grid cannot be resident at once: a
    ``RuntimeError`` naming it), the scratch ``state.<field>`` of every cooperative path is set to None, the
    first check's open-row list emptied (``state.check.open_len``: the refused launch did not reset it) and the
    sequence recorded again without them (the same tokens)."""
    try:
        run_recorded(state, build)
    except RuntimeError as error:
        if all(getattr(state, f) is None for f in fields) or "cooperative" not in str(error).lower():
            raise
        for f in fields:
            setattr(state, f, None)
        if getattr(state, "check", None) is not None:
            state.check.open_len.zero_()
        state.launches = None
        run_recorded(state, build)
