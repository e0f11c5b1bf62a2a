"""replay_kernels/ex2.py: exp of softmax terms in one MUFU.EX2 gives tl.exp's value wherever that is at least
2^-126 and +0 below, and the softmax sums it goes into are tl.exp's bit for bit (the module's claim)."""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton / replay_kernels are imported

import pytest  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from replay_kernels import ex2  # noqa: E402
from replay_kernels.ex2 import exp_terms  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TINY = 2.0 ** -126


@triton.jit
def _terms_kernel(x_ptr, fast_ptr, ref_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(fast_ptr + offs, exp_terms(x))
    tl.store(ref_ptr + offs, tl.exp(x))


@triton.jit
def _sums_kernel(x_ptr, fast_ptr, ref_ptr, BLOCK: tl.constexpr):
    """Per row of BLOCK lanes: sum of exp(x - max) both ways (verify_stats.online's tile sum, before and after)."""
    r = tl.program_id(0)
    x = tl.load(x_ptr + r * BLOCK + tl.arange(0, BLOCK))
    m = tl.max(x, axis=0)
    tl.store(fast_ptr + r, tl.sum(exp_terms(x - m), axis=0))
    tl.store(ref_ptr + r, tl.sum(tl.where(x > float("-inf"), tl.exp(x - m), 0.0), axis=0))


def test_terms_equal_tl_exp_above_the_normal_range_and_zero_below():
    x = torch.cat([torch.linspace(-110.0, 0.0, 4096 - 4), torch.tensor([float("-inf"), -87.0, -87.5, -88.0])])
    x = x.to(DEVICE)
    fast, ref = torch.empty_like(x), torch.empty_like(x)
    _terms_kernel[(x.numel() // 1024,)](x, fast, ref, BLOCK=1024)
    normal = ref >= TINY
    assert torch.equal(fast[normal], ref[normal])  # the same product, the same MUFU.EX2: bit for bit
    assert bool((fast[~normal] == 0).all()) if ex2.FTZ else torch.equal(fast, ref)
    assert int(normal.sum()) < x.numel() - 100  # the sweep does reach below 2^-126
    assert fast[x.numel() - 4].item() == 0.0  # exp(-inf)


@pytest.mark.parametrize("spread", [3.0, 30.0, 60.0])
def test_softmax_sums_equal_tl_exp_bit_for_bit(spread):
    """Rows whose terms reach far below 2^-126 (randn x 30 or 60): the flushed terms change no sum."""
    g = torch.Generator().manual_seed(int(spread))
    x = torch.randn(64, 2048, generator=g) * spread
    x[::7, ::5] = float("-inf")
    x = x.to(DEVICE)
    fast = torch.empty(64, device=DEVICE)
    ref = torch.empty(64, device=DEVICE)
    _sums_kernel[(64,)](x, fast, ref, BLOCK=2048)
    assert torch.equal(fast, ref)
