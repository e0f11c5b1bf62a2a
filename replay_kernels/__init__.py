"""Triton kernels and device functions used by the replay harness."""
from .interpret import interpreting, skip_repeated_patching

if interpreting():  # the CPU path: skip the interpreter's repeated patching
    skip_repeated_patching()
