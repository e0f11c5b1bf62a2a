"""Triton sampling kernels of vLLM Model Runner V2's semantics, token for token, as a library.

Public entry points on plain tensors: :mod:`replay_kernels.api` (``gumbel_sample``, ``rejection_sample`` and their
prepared, graph-capturable forms). The package imports nothing of ``replay_harness``; the harness adapts its
recordings to these samplers in ``replay_harness/impls/kernel_impls.py``. Design: docs/KERNELS.md.
"""
import os
import sys

from .shared.interpret import interpreting, skip_repeated_patching

# The CPU path: skip the interpreter's repeated patching. Asked only where Triton is loaded or the interpreter is
# asked for, so that importing the pure-torch modules (batch.py: the recording format's Step builds on it) does
# not load Triton.
if ("triton" in sys.modules or os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")) \
        and interpreting():
    skip_repeated_patching()
