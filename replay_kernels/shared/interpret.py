"""Faster ``TRITON_INTERPRET=1`` runs (the CPU path of the CLI, and CI): the same kernels, the same results.

Triton's interpreter (3.9 here) re-patches the language before every call of a ``@triton.jit`` device
function: ``inspect.getmembers`` over ``triton.language``, its ``tensor`` and ``math``, hundreds of
attributes each time, and the kernels here call device functions in every tile of every program. A
kernel launch has already patched those same module objects and restores them when it ends, so a device
function called inside a launch whose language modules the launch patched gets nothing from it. This
skips exactly those repeats and nothing else: a device function called outside a launch, or from a
module whose language modules the launch did not patch, is patched as before. Measured on the CI
machine: ``tests/test_kernels.py::test_stochastic_fused_and_per_position_launches_agree[151]``
spends 55 s of its 143 s under cProfile in that patching (measured 2026-12-01).

It touches two private names of ``triton.runtime.interpreter`` (``_patch_lang``, ``GridExecutor``); when a
Triton release lacks either, :func:`skip_repeated_patching` changes nothing and returns False.
"""
from __future__ import annotations

import os


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET`` set to 1, true, yes or on: Triton's own
    reading of it, ``triton.knobs.runtime.interpret``, where the release has knobs)."""
    try:
        import triton
        return bool(triton.knobs.runtime.interpret)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def skip_repeated_patching() -> bool:
    """Install the skip (once); True when installed or already there."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_patch_lang", None)
    executor = getattr(interpreter, "GridExecutor", None)
    if getattr(original, "skips_repeats", False):
        return True
    if not callable(original) or executor is None:
        return False
    patched: set[int] = set()  # ids of the language modules the launch in progress has patched
    depth = [0]                # launches in progress (0 or 1: a kernel cannot launch a kernel)

    def patch_lang(fn):
        langs = {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}
        if depth[0] and langs and langs <= patched:
            empty = getattr(interpreter, "_LangPatchScope", None)
            return empty() if empty is not None else None
        scope = original(fn)
        if depth[0]:
            patched.update(langs)
        return scope

    patch_lang.skips_repeats = True
    launch = executor.__call__

    def call(self, *args, **kwargs):
        depth[0] += 1
        try:
            return launch(self, *args, **kwargs)
        finally:
            depth[0] -= 1
            if not depth[0]:
                patched.clear()  # the launch restored the language: the next one patches again

    interpreter._patch_lang = patch_lang
    executor.__call__ = call
    return True
