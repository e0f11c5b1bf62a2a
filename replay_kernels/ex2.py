"""``exp`` of the per-element softmax terms in one ``MUFU.EX2`` instruction on the GPU.

On sm_90 ``tl.exp(x)`` is ``ex2.approx.f32(x * log2(e))`` (the product rounded to fp32) and ptxas expands that
instruction to keep results below 2^-126 as denormals: a compare, two predicated multiplies and the ``MUFU.EX2``,
with the multiply by log2(e) six instructions an element. :func:`exp_terms` computes the same product and
``ex2.approx.ftz.f32``: the same value bit for bit wherever the result is at least 2^-126, and +0 below (ftz),
in two instructions.

Where it is used, every term goes into a sum that also holds the term of its own maximum, ``exp(0) = 1``: a
span's or row's sum-exp (``verify_stats``) and sample-and-check's masses, whose verdict divides by the row's
``S >= 1`` (``sample_check``). A term below 2^-126 is less than 2^-102 of an ulp of such a sum, and all of a
span's together (8,192 of them) less than 2^-89: rounding to nearest drops them, so the sums, and with them the
tokens, are the ones ``tl.exp`` gives (checked on the GPU: tests/test_ex2.py, and tools/ab_kernels.py compares
the tokens of both in every step).
Under ``TRITON_INTERPRET=1`` (no inline assembly there) it is ``tl.exp`` itself, the CPU's values as before.
"""
from __future__ import annotations

import os

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # rounded to fp32 in the kernel: 0x3FB8AA3B, tl.exp's own constant
FTZ = tl.constexpr(os.environ.get("TRITON_INTERPRET") != "1")  # inline PTX: compiled kernels only


@triton.jit
def exp_terms(x):
    """``exp(x)`` for float32 ``x`` (any shape); results below 2^-126 are +0 on the GPU (ftz); -inf gives +0,
    NaN gives NaN."""
    if FTZ:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * LOG2E], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return tl.exp(x)
