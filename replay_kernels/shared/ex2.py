"""``exp`` of the per-element softmax terms in one ``MUFU.EX2`` instruction on the GPU.

On sm_90 ``tl.exp(x)`` is ``ex2.approx.f32(x * log2(e))`` (the product rounded to fp32) and ptxas expands that
instruction to keep results below 2^-126 as denormals: the multiply, a compare, two predicated multiplies and the
``MUFU.EX2``, five instructions an element. :func:`exp_terms` computes the same product and ``ex2.approx.ftz.f32``:
the same value bit for bit wherever the result is at least 2^-126, and +0 below (ftz), in two instructions.

Why the sums it enters come out as with ``tl.exp`` (the uses: ``verify_stats`` sum-exp of a tile and the bounded
sums, ``sample_check``'s masses ``S`` and ``low(c)``): a flushed term is below 2^-126; the sums that decide a token
are at least 1 (a row's sum-exp and ``S`` hold their maximum's term, exp(0)), at least ``1 - p`` >= 2^-24 where
``low(c) / S`` is compared with ``1 - p``, or read with a relative margin of 1e-4 (the bounded verify sums,
``verify_bounds.BOUND_TOL``). A tile whose maximum is below the running one, a per-lane accumulator or a span's
partial may itself be tiny; a change below 2^-100 of it reaches such a decided sum only through a rounding tie
at every addition on the way up (about 2^-100 on real data), and then as one ulp: the near-tie class of the fp32
sums (docs/KERNELS.md), not a new one. ``low(c) == S`` compares two sums of the same terms either way. Checked on
the GPU: tests/test_ex2.py (terms; sums with -inf lanes and tiles below the running maximum), and
tools/ab_kernels.py found the tokens equal in every step raced. Under ``TRITON_INTERPRET`` (no inline assembly
there) it is ``tl.exp`` itself, the CPU's values as before.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .interpret import interpreting

LOG2E = tl.constexpr(1.4426950408889634)  # rounded to fp32 in the kernel: 0x3FB8AA3B, tl.exp's own constant
FTZ = tl.constexpr(not interpreting())  # inline PTX: compiled kernels only (decided at import, as triton.jit does)


@triton.jit
def exp_terms(x):
    """``exp(x)`` for float32 ``x`` (any shape); results below 2^-126 are +0 on the GPU (ftz); -inf gives +0,
    NaN gives NaN."""
    if FTZ:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * LOG2E], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return tl.exp(x)


@triton.jit
def exp2_terms(y):
    """``2^y`` for float32 ``y`` (any shape), one ``MUFU.EX2`` on the GPU (results below 2^-126: +0); for a caller
    that folds ``log2 e`` into an FMA of its own (``verify_stats.span_bounds``)."""
    if FTZ:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [y], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return tl.exp2(y)
