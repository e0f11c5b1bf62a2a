"""replay_kernels/shared/ex2.py: exp of softmax terms in one MUFU.EX2 gives tl.exp's value wherever that is at least
2^-126 and +0 below, and the softmax sums it goes into are tl.exp's bit for bit (the module's claim)."""
from __future__ import annotations

import os
import subprocess
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton / replay_kernels are imported

import pytest  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from replay_kernels.shared import ex2  # noqa: E402
from replay_kernels.shared.ex2 import exp_terms  # noqa: E402

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


@triton.jit
def _tiled_kernel(x_ptr, out_ptr, TILES: tl.constexpr, BLOCK: tl.constexpr):
    """Per row of TILES x BLOCK lanes, both ways: verify_stats.online's running sum (tiles whose maximum is far
    below the running one add only tiny terms) and sample_check's per-lane accumulators against the row max,
    with a low(c)-like share: the mass of the lanes at or below M - 50 over the whole mass."""
    r = tl.program_id(0)
    base = x_ptr + r * TILES * BLOCK
    M = tl.max(tl.load(base + tl.arange(0, TILES * BLOCK)), axis=0)
    m = tl.full((), float("-inf"), tl.float32)
    fast = tl.zeros((), tl.float32)
    ref = tl.zeros((), tl.float32)
    lane_fast = tl.zeros((BLOCK,), tl.float32)
    lane_ref = tl.zeros((BLOCK,), tl.float32)
    low_fast = tl.zeros((BLOCK,), tl.float32)
    low_ref = tl.zeros((BLOCK,), tl.float32)
    for j in range(TILES):
        x = tl.load(base + j * BLOCK + tl.arange(0, BLOCK))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        fast = fast * tl.exp(m - m_new) + tl.sum(exp_terms(x - m_new), axis=0)
        ref = ref * tl.exp(m - m_new) + tl.sum(tl.where(x > float("-inf"), tl.exp(x - m_new), 0.0), axis=0)
        m = m_new
        e_fast = exp_terms(x - M)
        e_ref = tl.exp(x - M)
        lane_fast += e_fast
        lane_ref += e_ref
        low_fast += tl.where(x <= M - 50.0, e_fast, 0.0)
        low_ref += tl.where(x <= M - 50.0, e_ref, 0.0)
    tl.store(out_ptr + r * 6 + 0, fast)
    tl.store(out_ptr + r * 6 + 1, ref)
    tl.store(out_ptr + r * 6 + 2, tl.sum(lane_fast, axis=0))
    tl.store(out_ptr + r * 6 + 3, tl.sum(lane_ref, axis=0))
    tl.store(out_ptr + r * 6 + 4, tl.sum(low_fast, axis=0) / tl.sum(lane_fast, axis=0))
    tl.store(out_ptr + r * 6 + 5, tl.sum(low_ref, axis=0) / tl.sum(lane_ref, axis=0))


def test_running_and_per_lane_sums_equal_tl_exp_when_tiles_sit_far_below_the_maximum():
    """Tile j of a row sits 12 j below the first (randn x 8 within a tile): from the eighth tile on, its terms are
    below 2^-126 against the running maximum, and whole per-lane accumulators are made of them."""
    g = torch.Generator().manual_seed(7)
    tiles, block = 16, 1024
    x = torch.randn(32, tiles, block, generator=g) * 8.0 - 12.0 * torch.arange(tiles).view(1, tiles, 1)
    x = x[:, torch.randperm(tiles, generator=g)].reshape(32, -1).contiguous().to(DEVICE)  # the maximum anywhere
    out = torch.empty(32, 6, device=DEVICE)
    _tiled_kernel[(32,)](x, out, TILES=tiles, BLOCK=block)
    assert torch.equal(out[:, 0], out[:, 1]) and torch.equal(out[:, 2], out[:, 3])
    assert torch.equal(out[:, 4], out[:, 5])  # the share at or below M - 50: tiny, equal, and so the same verdict


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


@pytest.mark.parametrize("value", ["1", "true", "on"])
def test_no_inline_assembly_under_any_spelling_of_triton_interpret(value):
    """Triton interprets for TRITON_INTERPRET=1, true, yes or on; so must ex2 (inline PTX cannot be interpreted)."""
    code = "from replay_kernels.shared import ex2; print(bool(ex2.FTZ))"
    env = {**os.environ, "TRITON_INTERPRET": value}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-500:]
