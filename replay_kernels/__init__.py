"""Triton kernels and device functions used by the replay harness."""
import os

if os.environ.get("TRITON_INTERPRET") == "1":  # the CPU path: skip the interpreter's repeated patching
    from .interpret import skip_repeated_patching

    skip_repeated_patching()
