"""Triton kernels and device functions used by the replay harness."""
