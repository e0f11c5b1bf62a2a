"""Triton sampling kernels of vLLM Model Runner V2's semantics, token for token, as a library.

Public entry points on plain tensors: :mod:`replay_kernels.api` (``gumbel_sample``, ``rejection_sample`` and their
prepared, graph-capturable forms). The package imports nothing of ``replay_harness``; the harness adapts its
recordings to these samplers in ``replay_harness/impls/kernel_impls.py``. Design: docs/KERNELS.md.
"""
from .interpret import interpreting, skip_repeated_patching

if interpreting():  # the CPU path: skip the interpreter's repeated patching
    skip_repeated_patching()
