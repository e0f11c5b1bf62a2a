"""Tests for the ``mrv2`` RNG contract.

Three implementations are checked against each other and against fixed values:

* ``replay_harness.oracle.rng``: the torch oracle (CPU here, CUDA on a GPU machine);
* ``replay_kernels.shared.rng``: our ``@triton.jit`` device functions;
* vLLM MRV2's own ``gumbel.py`` (only where ``.peers/vllm_mrv2`` is checked out;
  those tests skip elsewhere, e.g. in CI), plus a pure-Python scalar reference
  and a golden table that was produced by vLLM's kernels.

Without CUDA the Triton kernels run under ``TRITON_INTERPRET=1``.

About ``tl.log``: under the interpreter it is numpy's float32 ``np.log``, which
differs from a correctly rounded log in the last bit for ~10% of inputs (so
does torch's CPU ``log``); on GPU it is libdevice's ``logf`` and the series may
be contracted into FMAs. The oracle uses a correctly rounded log, so Gumbel
noise is compared (a) bit for bit with the interpreter's ``tl.log`` patched to
be correctly rounded, and (b) within a few-ulp bound with the native ``tl.log``.
Both uniforms are compared bit for bit everywhere.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import contextlib  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from replay_harness.oracle import rng as R  # noqa: E402
from replay_kernels.shared import rng as K  # noqa: E402
from replay_kernels.shared.interpret import interpreting  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
VLLM_ROOT = REPO_ROOT / ".peers" / "vllm_mrv2"
INTERPRET = interpreting()
DEVICE = "cpu" if INTERPRET else "cuda"

needs_triton = pytest.mark.skipif(
    not (INTERPRET or torch.cuda.is_available()),
    reason="no GPU and TRITON_INTERPRET is not 1",
)
interpreter_only = pytest.mark.skipif(not INTERPRET, reason="patches the Triton interpreter")


def _load_vllm_gumbel():
    """vLLM's gumbel.py module, None if not checked out, or the import error."""
    if not VLLM_ROOT.is_dir():
        return None
    if str(VLLM_ROOT) not in sys.path:
        sys.path.insert(0, str(VLLM_ROOT))
    try:
        from vllm.v1.worker.gpu.sample import gumbel
    except Exception as exc:  # a broken checkout must fail, not skip
        return exc
    return gumbel


vllm_gumbel = _load_vllm_gumbel()


@pytest.fixture
def vllm():
    if vllm_gumbel is None:
        pytest.skip(".peers/vllm_mrv2 is not checked out")
    if isinstance(vllm_gumbel, Exception):
        pytest.fail(f"importing vLLM's gumbel.py from {VLLM_ROOT} failed: {vllm_gumbel!r}")
    return vllm_gumbel


def bits(x: torch.Tensor) -> torch.Tensor:
    """float32 -> its int32 bit pattern (for bit-for-bit comparisons)."""
    assert x.dtype == torch.float32
    return x.view(torch.int32)


def assert_bits_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    actual, expected = actual.cpu(), expected.cpu()
    assert actual.shape == expected.shape, what
    bad = bits(actual) != bits(expected)
    if bad.any():
        i = bad.nonzero()[0].tolist()
        pytest.fail(
            f"{what}: {int(bad.sum())}/{bad.numel()} differ; first at {i}: "
            f"{actual[tuple(i)].item()!r} vs {expected[tuple(i)].item()!r}"
        )


@contextlib.contextmanager
def correctly_rounded_tl_log():
    """Make the interpreter's ``tl.log`` correctly rounded, like the oracle's."""
    from triton.runtime.interpreter import InterpreterBuilder

    def cr_log(x):
        return np.log(x.astype(np.float64)).astype(x.dtype)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InterpreterBuilder, "create_log", lambda self, arg: self.unary_op(arg, cr_log))
        yield


# ---------------------------------------------------------------------------
# Test cases
# ---------------------------------------------------------------------------

EDGE_SEEDS = [
    0, 1, -1, 2**31 - 1, 2**31, 2**32, 2**32 + 5, 2**40 + 123, -(2**40), 2**63 - 1, -(2**63),
]
# 2**32 - 3 makes the position block cross into the Philox counter's high word.
EDGE_POS = [0, 1, 2**31 - 1, 2**31 + 7, 2**32 - 3, 2**33, 12345678901]
EDGE_TOKENS = [0, 1, 262143, 131072, 2**31 - 1]
BLOCK = 128
N_RANDOM_SEEDS = 50

# Found by search: Philox word 0 (tl.rand == 0.0) and murmur h >= 0xFFFFFF80
# (u rounds to 1.0, so 1 - u hits the 2**-24 clamp).
PHILOX_ZERO = (12345, 388776973)
MURMUR_ONE = (-(2**40), 31517926, 262143)

# (seed, pos, token, hash, bits(uniform), bits(gumbel), bits(tl.rand(seed, pos)))
# produced by vLLM MRV2's murmur3_hash32 / murmur3_uniform32 / _log1p_neg_stable
# / tl_rand32 under the interpreter, tl.log correctly rounded (see
# test_golden_table_matches_vllm). Rows cover both log branches, u near 0.25,
# tiny u (large noise), u == 1.0 and tl.rand == 0.0.
GOLDEN = [
    (4294967301, 5, 104035, 0x00004114, 0x36822900, 0x41475BCD, 0x3DAC5A22),
    (-1, 2147483655, 228869, 0x000005C8, 0x34B91000, 0x416E16D5, 0x3F627124),
    (0, 0, 94008, 0x00011AD4, 0x378D6A40, 0x412FD9D1, 0x3F4C4FD1),
    (1099511627899, 17, 82210, 0x3FFFB0E7, 0x3E7FFEC4, 0x3F9F7A69, 0x3D89811F),
    (0, 0, 46674, 0x40009432, 0x3E800128, 0x3F9F784A, 0x3F4C4FD1),
    (0, 0, 0, 0x8134CDF8, 0x3F0134CE, 0x3EB4B534, 0x3F4C4FD1),
    (1, 0, 0, 0x92228D1B, 0x3F12228D, 0x3E2B5732, 0x3E60BFCB),
    (-1, 7, 1, 0x099035B2, 0x3D19035B, 0x40512B49, 0x3F5C41E4),
    (2147483647, 2147483655, 262143, 0xAEAA68C2, 0x3F2EAA69, 0xBE0C17AC, 0x3F4AFC41),
    (2147483648, 8589934592, 128000, 0x461E0BC4, 0x3E8C3C18, 0x3F91D2A3, 0x3EC53DA0),
    (4294967296, 5, 42, 0xEA714F9E, 0x3F6A7150, 0xBF67F110, 0x3E9F8C0B),
    (4294967301, 5, 42, 0xA9B15E70, 0x3F29B15E, 0xBDAB58B3, 0x3DAC5A22),
    (1099511627899, 17, 151645, 0xB7B7C3E0, 0x3F37B7C4, 0xBE7063DA, 0x3D89811F),
    (-1099511627776, 31517926, 262143, 0xFFFFFFD5, 0x3F800000, 0xC033F049, 0x3C19604B),
    (9223372036854775807, 1023, 99, 0xAD0861E0, 0x3F2D0862, 0xBDF45E80, 0x3F1C2578),
    (-9223372036854775808, 4294967295, 5, 0xA050D4C1, 0x3F2050D5, 0x3C831A01, 0x3F5BAB57),
    (1234567890123456789, 4096, 32000, 0x09982B49, 0x3D1982B5, 0x4050F513, 0x3F0C054D),
    (-987654321987654321, 8589934593, 200019, 0xA0D7A59B, 0x3F20D7A6, 0x3C2A9408, 0x3EE27B8D),
    (12345, 388776973, 7, 0xF538815F, 0x3F753881, 0xBF939428, 0x00000000),
]


def _u32_to_i32(x: int) -> int:
    return x - 2**32 if x >= 2**31 else x


def _golden_columns(device=DEVICE):
    cols = list(zip(*GOLDEN))
    seeds, pos, tokens = (torch.tensor(c, dtype=torch.int64, device=device) for c in cols[:3])
    expected = [torch.tensor([_u32_to_i32(v) for v in c], dtype=torch.int32) for c in cols[3:]]
    return seeds, pos, tokens, expected


def _random_int64(gen: torch.Generator, n: int) -> torch.Tensor:
    return torch.randint(-(2**63), 2**63 - 1, (n,), generator=gen, dtype=torch.int64)


@pytest.fixture(scope="module")
def cases():
    """Rows (seed, pos) with a block of tokens each; every edge seed x edge pos,
    plus random int64 seeds with random positions. On DEVICE."""
    gen = torch.Generator().manual_seed(20240607)
    seeds = [s for s in EDGE_SEEDS for _ in EDGE_POS] + _random_int64(gen, N_RANDOM_SEEDS).tolist()
    random_pos = torch.randint(0, 2**40, (N_RANDOM_SEEDS,), generator=gen).tolist()
    pos = EDGE_POS * len(EDGE_SEEDS) + random_pos
    tokens = torch.randint(0, 262144, (len(seeds), BLOCK), generator=gen, dtype=torch.int32)
    tokens[:, : len(EDGE_TOKENS)] = torch.tensor(EDGE_TOKENS, dtype=torch.int32)
    as_i64 = dict(dtype=torch.int64, device=DEVICE)
    return torch.tensor(seeds, **as_i64), torch.tensor(pos, **as_i64), tokens.to(DEVICE)


@pytest.fixture(scope="module")
def oracle(cases):
    """The torch oracle on the cases, laid out like the kernels' outputs."""
    seeds, pos, tokens = cases
    positions = pos[:, None] + torch.arange(BLOCK, device=DEVICE)
    s, p = seeds[:, None], pos[:, None]
    return {
        "rand": R.philox_uniform(s, positions),
        "accept": R.accept_uniform(s, positions),
        "accept_scalar": R.accept_uniform(seeds, pos),
        "hash": R.murmur3_hash32(s, p, tokens).to(torch.int32),  # wraps to int32 bits
        "uniform": R.murmur3_uniform32(s, p, tokens),
        "gumbel": R.gumbel_noise(s, p, tokens),
    }


# ---------------------------------------------------------------------------
# Triton test kernels
# ---------------------------------------------------------------------------

OUTPUTS = ("rand", "accept", "accept_scalar", "hash", "uniform", "gumbel")


@triton.jit
def _ours_kernel(seed_ptr, pos_ptr, tok_ptr, rand_ptr, accept_ptr, accept_scalar_ptr,
                 hash_ptr, uniform_ptr, gumbel_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    out = row * BLOCK + offs
    seed = tl.load(seed_ptr + row)
    pos = tl.load(pos_ptr + row)
    tok = tl.load(tok_ptr + out)
    positions = pos + offs  # int64 block of Philox offsets
    tl.store(rand_ptr + out, tl.rand(seed, positions))
    tl.store(accept_ptr + out, K.accept_uniform(seed, positions))
    tl.store(accept_scalar_ptr + row, K.accept_uniform(seed, pos))
    tl.store(hash_ptr + out, K.murmur3_hash32(seed, pos, tok).to(tl.int32, bitcast=True))
    tl.store(uniform_ptr + out, K.murmur3_uniform32(seed, pos, tok))
    tl.store(gumbel_ptr + out, K.gumbel_noise(seed, pos, tok))


@triton.jit
def _vllm_kernel(seed_ptr, pos_ptr, tok_ptr, rand_ptr, accept_ptr, accept_scalar_ptr,
                 hash_ptr, uniform_ptr, gumbel_ptr, BLOCK: tl.constexpr):
    """The same outputs from vLLM MRV2's own device functions."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    out = row * BLOCK + offs
    seed = tl.load(seed_ptr + row)
    pos = tl.load(pos_ptr + row)
    tok = tl.load(tok_ptr + out)
    positions = pos + offs
    tl.store(rand_ptr + out, vllm_gumbel.tl_rand32(seed, positions, True))
    tl.store(accept_ptr + out, vllm_gumbel.tl_rand32(seed, positions, False))
    tl.store(accept_scalar_ptr + row, vllm_gumbel.tl_rand32(seed, pos, False))
    tl.store(hash_ptr + out, vllm_gumbel.murmur3_hash32(seed, pos, tok).to(tl.int32, bitcast=True))
    u = vllm_gumbel.murmur3_uniform32(seed, pos, tok)
    tl.store(uniform_ptr + out, u)
    # gumbel_noised_argmax's fp32 noise expression.
    tl.store(gumbel_ptr + out, -tl.log(-vllm_gumbel._log1p_neg_stable(u)))


def launch(kernel, seeds, pos, tokens, block=BLOCK) -> dict:
    """Run a test kernel over rows (seeds[i], pos[i], tokens[i, :block])."""
    n = seeds.numel()
    dev = seeds.device
    out = {k: torch.empty((n, block), dtype=torch.float32, device=dev) for k in OUTPUTS}
    out["accept_scalar"] = torch.empty(n, dtype=torch.float32, device=dev)
    out["hash"] = torch.empty((n, block), dtype=torch.int32, device=dev)
    kernel[(n,)](seeds, pos, tokens, *(out[k] for k in OUTPUTS), BLOCK=block)
    return out


@pytest.fixture(scope="module")
def ours_native(cases):
    return launch(_ours_kernel, *cases)


@pytest.fixture(scope="module")
def ours_cr_log(cases):
    if not INTERPRET:
        pytest.skip("needs the interpreter to patch tl.log")
    with correctly_rounded_tl_log():
        return launch(_ours_kernel, *cases)


# ---------------------------------------------------------------------------
# Independent references: pure Python scalars and the golden table
# ---------------------------------------------------------------------------

M32 = 0xFFFFFFFF


def py_philox_word(seed: int, offset: int) -> int:
    s, o = seed % 2**64, offset % 2**64
    k0, k1 = s & M32, s >> 32
    c0, c1, c2, c3 = o & M32, o >> 32, 0, 0
    for _ in range(10):
        pb, pa = 0xCD9E8D57 * c2, 0xD2511F53 * c0
        c0, c1, c2, c3 = (pb >> 32) ^ c1 ^ k0, pb & M32, (pa >> 32) ^ c3 ^ k1, pa & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0


def py_tl_rand(seed: int, offset: int) -> np.float32:
    x = _u32_to_i32(py_philox_word(seed, offset))
    x = ~x if x < 0 else x
    return np.float32(x) * np.float32(4.6566127342e-10)


def py_murmur3(seed: int, pos: int, token: int) -> int:
    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & M32

    def mix(h, k):
        k = rotl((k * 0xCC9E2D51) & M32, 15) * 0x1B873593 & M32
        return (rotl(h ^ k, 13) * 5 + 0xE6546B64) & M32

    s = seed % 2**64
    h = 0
    for word in (s & M32, s >> 32, pos & M32, token & M32):
        h = mix(h, word)
    h ^= 16
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def py_gumbel(seed: int, pos: int, token: int) -> np.float32:
    f = np.float32
    h = py_murmur3(seed, pos, token)
    u = f(h >> 16) * f(2**-16) + (f(h & 0xFFFF) + f(0.5)) * f(2**-32)
    if u < 0.25:
        poly = f(1 / 8)
        for k in range(7, 0, -1):
            poly = f(1 / k) + u * poly
        log1m = -u * poly
    else:
        log1m = f(math.log(max(f(1) - u, f(2**-24))))
    return -f(math.log(-log1m))


def test_oracle_matches_pure_python_reference():
    gen = torch.Generator().manual_seed(7)
    seeds = EDGE_SEEDS + _random_int64(gen, 20).tolist()
    triples = [(s, p, t) for s in seeds for p, t in zip(EDGE_POS, EDGE_TOKENS + [77, 5000])]
    s, p, t = (torch.tensor(c, dtype=torch.int64) for c in zip(*triples))
    words, rands = R.philox_randint(s, p), R.philox_uniform(s, p)
    hashes, gumbels = R.murmur3_hash32(s, p, t), R.gumbel_noise(s, p, t)
    for i, (seed, pos, tok) in enumerate(triples):
        assert int(words[i]) == py_philox_word(seed, pos), (seed, pos)
        assert rands[i].item() == float(py_tl_rand(seed, pos)), (seed, pos)
        assert int(hashes[i]) == py_murmur3(seed, pos, tok), (seed, pos, tok)
        assert gumbels[i].item() == float(py_gumbel(seed, pos, tok)), (seed, pos, tok)


def test_oracle_matches_golden_table():
    seeds, pos, tokens, (h, u, g, r) = _golden_columns()
    assert torch.equal(R.murmur3_hash32(seeds, pos, tokens).to(torch.int32).cpu(), h)
    assert torch.equal(bits(R.murmur3_uniform32(seeds, pos, tokens)).cpu(), u)
    assert torch.equal(bits(R.gumbel_noise(seeds, pos, tokens)).cpu(), g)
    assert torch.equal(bits(R.philox_uniform(seeds, pos)).cpu(), r)
    accept = R.accept_uniform(seeds, pos).cpu()
    assert torch.equal(accept, torch.clamp(r.view(torch.float32), min=R.ACCEPT_UNIFORM_MIN))


# ---------------------------------------------------------------------------
# Triton vs torch oracle
# ---------------------------------------------------------------------------


@needs_triton
@pytest.mark.parametrize("name", ["rand", "accept", "accept_scalar", "uniform"])
def test_triton_uniforms_bit_identical_to_oracle(ours_native, oracle, name):
    """tl.rand, accept_uniform and murmur3_uniform32: bit for bit, all backends."""
    assert_bits_equal(ours_native[name], oracle[name], name)


@needs_triton
def test_triton_hash_bit_identical_to_oracle(ours_native, oracle):
    assert torch.equal(ours_native["hash"].cpu(), oracle["hash"].cpu())


@needs_triton
def test_triton_accept_uniform_is_clamped_tl_rand(ours_native):
    clamped = torch.clamp(ours_native["rand"], min=R.ACCEPT_UNIFORM_MIN)
    assert_bits_equal(ours_native["accept"], clamped, "accept vs max(tl.rand, min)")


@needs_triton
def test_triton_hash_ignores_token_dtype(cases, ours_native):
    seeds, pos, tokens = cases
    out64 = launch(_ours_kernel, seeds[:16], pos[:16], tokens[:16].to(torch.int64).contiguous())
    assert torch.equal(out64["hash"], ours_native["hash"][:16])


@needs_triton
@interpreter_only
def test_triton_gumbel_bit_identical_with_correctly_rounded_log(ours_cr_log, oracle):
    """With tl.log correctly rounded (as the oracle's log is) every bit agrees:
    the series, the clamp, the branch and the fp32 op order are the same."""
    assert_bits_equal(ours_cr_log["gumbel"], oracle["gumbel"], "gumbel")


# Native tl.log (numpy's np.log / libdevice logf) is within ~1-2 ulp of a
# correctly rounded log; through g = -log(-log(1 - u)) that moves g by at most
# about 2.4e-7 * (1 + |g|). A wrong constant, branch or order moves it far more.
GUMBEL_ATOL = 4e-7
GUMBEL_RTOL = 4e-7


@needs_triton
def test_triton_gumbel_close_with_native_log(ours_native, oracle):
    actual, expected = ours_native["gumbel"].cpu(), oracle["gumbel"].cpu()
    diff = (actual - expected).abs()
    bound = GUMBEL_ATOL + GUMBEL_RTOL * expected.abs()
    assert torch.isfinite(actual).all()
    assert (diff <= bound).all(), f"max |diff| {diff.max().item():.3g}"


@triton.jit
def _preimage_kernel(seed_ptr, pos_ptr, h_ptr, tok_ptr, back_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    out = row * BLOCK + tl.arange(0, BLOCK)
    key = K.murmur3_row_key(tl.load(seed_ptr + row), tl.load(pos_ptr + row))
    h = tl.load(h_ptr + out).to(tl.uint32, bitcast=True)
    tok = K.murmur3_preimage(key, h)
    tl.store(tok_ptr + out, tok.to(tl.int32, bitcast=True))
    tl.store(back_ptr + out, K.murmur3_finish(key, tok).to(tl.int32, bitcast=True))


@needs_triton
def test_triton_preimage_inverts_the_hash(cases):
    """``murmur3_preimage`` gives the token whose hash is h, for small hashes (the draw lists those tokens)
    and random ones: the kernel's own hash maps it back, and so does the pure-Python murmur3 from the seed."""
    seeds, pos, _ = cases
    gen = torch.Generator().manual_seed(5)
    n = seeds.numel()
    hashes = torch.randint(-2**31, 2**31, (n, BLOCK), generator=gen, dtype=torch.int32)
    hashes[:, :16] = torch.arange(16, dtype=torch.int32)  # the smallest hashes, whose noise is largest
    hashes = hashes.to(DEVICE)
    tok, back = torch.empty_like(hashes), torch.empty_like(hashes)
    _preimage_kernel[(n,)](seeds, pos, hashes, tok, back, BLOCK=BLOCK)
    assert torch.equal(back, hashes)
    for i in range(0, n, max(1, n // 8)):
        for j in (0, 1, 15, BLOCK - 1):
            t, h = int(tok[i, j]) & M32, int(hashes[i, j]) & M32
            assert py_murmur3(int(seeds[i]), int(pos[i]), t) == h, (i, j)


@triton.jit
def _noise_bound_kernel(h_ptr, noise_ptr, bound_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    h = tl.load(h_ptr + offs).to(tl.uint32, bitcast=True)
    tl.store(noise_ptr + offs, K.uniform_to_gumbel(K.hash_to_uniform(h)))
    tl.store(bound_ptr + offs, K.gumbel_upper_bound(h))


@needs_triton
def test_gumbel_upper_bound_holds_and_the_census_uses_the_draws_cut():
    """The draw skips a tile when its values plus ``gumbel_upper_bound`` of the unlisted hashes cannot reach the
    threshold: the bound must be at least the computed noise of every hash (the smallest ones, whose noise is
    largest, hashes around powers of two, random ones), and within 0.75 of it for small hashes (a looser bound
    prunes less). tools/prune_census.py's ``noise_cut`` is the kernel's cut for the launch's listed hashes."""
    from helpers import load_tool
    from replay_kernels.draw.draw import DrawScratch

    census = load_tool("prune_census")
    listed = {}  # rows of a launch -> the hashes its rows list (the tiles' cut is the bound of that hash)
    for rows in (8, 64, 256):
        scratch = DrawScratch.allocate(rows, 248_320, None, "cpu")  # what the launch passes as HASHES, SPLITS
        listed[rows] = scratch.hashes * scratch.splits
    gen = torch.Generator().manual_seed(13)
    special = [(1 << e) + d for e in range(1, 32) for d in (-1, 0, 1)] + sorted(set(listed.values()))
    h = torch.cat([torch.arange(2048, dtype=torch.int64), torch.tensor(special, dtype=torch.int64),
                   torch.randint(0, 2**32, (4096 - 2048 - len(special),), generator=gen, dtype=torch.int64)])
    h32 = torch.where(h >= 2**31, h - 2**32, h).to(torch.int32).to(DEVICE)
    noise, bound = torch.empty(h.numel(), device=DEVICE), torch.empty(h.numel(), device=DEVICE)
    _noise_bound_kernel[(h.numel() // 1024,)](h32, noise, bound, BLOCK=1024)
    noise, bound = noise.cpu(), bound.cpu()
    assert (bound >= noise).all(), h[bound < noise][:8]
    assert (bound - noise)[1:2048].max() < 0.75
    for rows, hashes in listed.items():
        kernel_cut = float(bound[(h == hashes).nonzero()[0, 0]]) + 0.001
        assert census.noise_cut(rows, 248_320) == pytest.approx(kernel_cut, abs=1e-5)
        assert 13.0 < kernel_cut < 14.0


@needs_triton
def test_triton_edge_values():
    """tl.rand == 0.0 (accept clamps to its minimum) and u == 1.0 (1-u clamps)."""
    seeds = torch.tensor([PHILOX_ZERO[0], MURMUR_ONE[0]], device=DEVICE)
    pos = torch.tensor([PHILOX_ZERO[1], MURMUR_ONE[1]], device=DEVICE)
    tokens = torch.full((2, 16), MURMUR_ONE[2], dtype=torch.int32, device=DEVICE)
    out = launch(_ours_kernel, seeds, pos, tokens, block=16)
    assert out["rand"][0, 0].item() == 0.0
    assert out["accept"][0, 0].item() == np.float32(R.ACCEPT_UNIFORM_MIN)
    assert out["accept_scalar"][0].item() == np.float32(R.ACCEPT_UNIFORM_MIN)
    assert out["uniform"][1, 0].item() == 1.0
    expected_g = -math.log(-math.log(2**-24))  # clamp branch (native tl.log)
    assert out["gumbel"][1, 0].item() == pytest.approx(expected_g, rel=1e-6)
    assert R.philox_uniform(*PHILOX_ZERO).item() == 0.0
    assert R.murmur3_uniform32(*MURMUR_ONE).item() == 1.0


# ---------------------------------------------------------------------------
# vLLM MRV2 (only with .peers/vllm_mrv2)
# ---------------------------------------------------------------------------


@needs_triton
def test_vllm_device_functions_bit_identical_to_ours(vllm, cases, ours_native):
    """Same Triton, same backend: vLLM's tl_rand32 / murmur3_hash32 /
    murmur3_uniform32 / noise expression and ours agree in every bit, Gumbel
    noise included (same tl.log, same expression tree)."""
    theirs = launch(_vllm_kernel, *cases)
    for name in OUTPUTS:
        if name == "hash":
            assert torch.equal(theirs[name], ours_native[name]), name
        else:
            assert_bits_equal(theirs[name], ours_native[name], f"vllm {name}")


@needs_triton
def test_vllm_device_functions_bit_identical_to_oracle(vllm, cases, oracle):
    ctx = correctly_rounded_tl_log() if INTERPRET else contextlib.nullcontext()
    with ctx:
        theirs = launch(_vllm_kernel, *cases)
    assert torch.equal(theirs["hash"].cpu(), oracle["hash"].cpu())
    names = OUTPUTS if INTERPRET else ("rand", "accept", "accept_scalar", "uniform")
    for name in names:
        if name != "hash":
            assert_bits_equal(theirs[name], oracle[name], f"vllm {name} vs oracle")


@needs_triton
def test_golden_table_matches_vllm(vllm):
    """Provenance of GOLDEN: vLLM's kernels reproduce it."""
    seeds, pos, tokens, (h, u, g, r) = _golden_columns()
    ctx = correctly_rounded_tl_log() if INTERPRET else contextlib.nullcontext()
    block = 16
    tok_block = tokens.to(torch.int32)[:, None].expand(-1, block).contiguous()
    with ctx:
        out = launch(_vllm_kernel, seeds, pos, tok_block, block=block)
    assert torch.equal(out["hash"][:, 0].cpu(), h)
    assert torch.equal(bits(out["uniform"][:, 0]).cpu(), u)
    assert torch.equal(bits(out["rand"][:, 0]).cpu(), r)
    if INTERPRET:
        assert torch.equal(bits(out["gumbel"][:, 0]).cpu(), g)


@needs_triton
@pytest.mark.parametrize("is_drafting", [False, True])
def test_vllm_gumbel_sample_matches_oracle(vllm, is_drafting):
    """End to end: vLLM's gumbel_sample picks argmax(logits + oracle noise);
    drafting salts the position with 2**30."""
    gen = torch.Generator().manual_seed(3)
    n, vocab = 6, 3000
    logits = torch.randn(n, vocab, generator=gen).to(DEVICE)
    seeds = torch.tensor([0, -1, 2**32 + 5, 2**63 - 1, -(2**63), 2**40 + 123], device=DEVICE)
    pos = torch.tensor([0, 2**31 + 7, 5, 2**33, 17, 100], device=DEVICE)
    mapping = torch.arange(n, dtype=torch.int32, device=DEVICE)
    temperature = torch.ones(n, device=DEVICE)
    ctx = correctly_rounded_tl_log() if INTERPRET else contextlib.nullcontext()
    with ctx:
        sampled = vllm.gumbel_sample(logits, mapping, temperature, seeds, pos,
                                     apply_temperature=False, is_drafting=is_drafting)
    noise_pos = pos + (2**30 if is_drafting else 0)
    expected = (logits + R.gumbel_rows(seeds, noise_pos, vocab)).argmax(dim=-1)
    assert torch.equal(sampled.cpu(), expected.cpu())
    # The noise decides: another seed would have sampled differently.
    other = (logits + R.gumbel_rows(seeds + 1, noise_pos, vocab)).argmax(dim=-1)
    assert not torch.equal(other.cpu(), expected.cpu())


# ---------------------------------------------------------------------------
# Torch oracle: arithmetic, clamps, inputs
# ---------------------------------------------------------------------------


def test_mul32_full_product_without_overflow():
    gen = torch.Generator().manual_seed(11)
    a = torch.cat([torch.tensor([0, 1, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, M32]),
                   torch.randint(0, 2**32, (1000,), generator=gen)])
    for b in (R.PHILOX_ROUND_A, R.PHILOX_ROUND_B, R.MURMUR_C1, M32, 1):
        hi, lo = R._mul32(a, b)
        for x, h, low in zip(a.tolist(), hi.tolist(), lo.tolist()):
            assert (h << 32) | low == x * b, (x, b)


def test_uint32_to_uniform_matches_tl_rand_conversion():
    words = torch.tensor([0, 1, 2**31 - 1, 2**31, 2**31 + 1, M32 - 1, M32])
    u = R.uint32_to_uniform(words)
    scale = np.float32(4.6566127342e-10)
    expected = [0.0, scale, np.float32(2**31 - 1) * scale, np.float32(2**31 - 1) * scale,
                np.float32(2**31 - 2) * scale, scale, 0.0]
    assert u.tolist() == [float(e) for e in expected]
    assert u.max().item() < 1.0


def test_accept_uniform_clamps_zero(monkeypatch):
    """accept_uniform never returns 0, whichever word the Philox gives."""
    assert R.accept_uniform(*PHILOX_ZERO).item() == np.float32(R.ACCEPT_UNIFORM_MIN)
    for word in (0, M32):
        fake = lambda s, o, device=None, w=word: torch.full((4,), w)  # noqa: E731
        monkeypatch.setattr(R, "philox_randint", fake)
        assert R.philox_uniform(0, 0).tolist() == [0.0] * 4
        assert R.accept_uniform(0, 0).tolist() == [float(np.float32(R.ACCEPT_UNIFORM_MIN))] * 4


def test_log_clamp_when_uniform_is_one():
    u = R.murmur3_uniform32(*MURMUR_ONE)
    assert u.item() == 1.0
    log1m = np.float32(math.log(2**-24))  # log(max(1 - 1, 2**-24)), fp32
    assert R.log1p_neg(torch.tensor([1.0])).item() == log1m
    assert R.gumbel_noise(*MURMUR_ONE).item() == -np.float32(math.log(-float(log1m)))


def test_int_and_tensor_inputs_agree_and_broadcast():
    seed, pos = -(2**40) + 3, 2**33 + 9
    tokens = torch.arange(10)
    row = R.gumbel_noise(seed, pos, tokens)
    assert row.dtype == torch.float32 and row.shape == (10,)
    as_tensors = R.gumbel_noise(torch.tensor([seed]), torch.tensor([pos]), tokens.to(torch.int32))
    assert torch.equal(as_tensors, row)
    assert torch.equal(R.gumbel_row(seed, pos, 10), row)
    grid = R.murmur3_uniform32(torch.tensor([[1], [2]]), torch.tensor([[5], [6]]), tokens)
    assert grid.shape == (2, 10)
    assert R.accept_uniform(2**63 - 1, torch.arange(3)).shape == (3,)
    with pytest.raises(TypeError):
        R.philox_uniform(torch.tensor([1.5]), 0)


def test_gumbel_rows_matches_gumbel_row(monkeypatch):
    monkeypatch.setattr(R, "_GUMBEL_CHUNK_ELEMS", 2 * 1000)  # force several chunks
    seeds = torch.tensor([0, -1, 2**32 + 5, 2**63 - 1, -(2**63)])
    pos = torch.tensor([0, 1, 2**31 + 7, 2**33, 17])
    rows = R.gumbel_rows(seeds, pos, 1000)
    assert rows.shape == (5, 1000) and rows.dtype == torch.float32
    for i in range(5):
        assert torch.equal(rows[i], R.gumbel_row(int(seeds[i]), int(pos[i]), 1000))


# ---------------------------------------------------------------------------
# What the stream depends on
# ---------------------------------------------------------------------------


def _fraction_equal(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a == b).float().mean().item()


@pytest.mark.parametrize("base", [0, 12345, -7, 2**62 + 1])
def test_every_seed_bit_matters(base):
    """Seeds differing in any one bit, above bit 32 included, give unrelated
    noise and acceptance uniforms (catches using only the low 32 bits)."""
    tokens = torch.arange(2048)
    positions = torch.arange(2048) + 1000
    g0, a0 = R.gumbel_noise(base, 5, tokens), R.accept_uniform(base, positions)
    for bit in range(64):
        other = ((base ^ (1 << bit)) + 2**63) % 2**64 - 2**63  # wrap to int64
        assert _fraction_equal(R.gumbel_noise(other, 5, tokens), g0) < 0.01, bit
        assert _fraction_equal(R.accept_uniform(other, positions), a0) < 0.01, bit


def test_position_and_token_dependence():
    tokens = torch.arange(2048)
    g = R.gumbel_noise(99, 1000, tokens)
    assert _fraction_equal(R.gumbel_noise(99, 1001, tokens), g) < 0.01
    assert _fraction_equal(R.gumbel_noise(99, 1000, tokens + 1), g) < 0.01
    # Contract: the hash mixes only pos's low 32 bits (as vLLM MRV2 does) ...
    assert torch.equal(R.gumbel_noise(99, 1000 + 2**32, tokens), g)
    # ... while Philox's counter takes all 64 bits of the position.
    positions = torch.arange(2048)
    a = R.accept_uniform(99, positions)
    assert _fraction_equal(R.accept_uniform(99, positions + 2**32), a) < 0.01
    # Word order matters: swapping seed halves changes the stream.
    seed = 0x0000000100000002
    swapped = 0x0000000200000001
    g_seed, g_swapped = R.gumbel_noise(seed, 0, tokens), R.gumbel_noise(swapped, 0, tokens)
    assert _fraction_equal(g_swapped, g_seed) < 0.01


# ---------------------------------------------------------------------------
# Statistics (deterministic inputs; thresholds only catch broken generators)
# ---------------------------------------------------------------------------

N_STAT = 100_000
SIGMAS = 5  # |mean - expected| <= 5 standard errors (false alarm ~6e-7)
KS_ALPHA = 1e-6  # reject the distribution when the KS p-value is below this
UNIFORM_KURTOSIS = 9 / 5
GUMBEL_KURTOSIS = 3 + 12 / 5  # excess kurtosis 2.4
EULER_GAMMA = 0.5772156649015329  # mean of Gumbel(0, 1)


def _check_moments(x: np.ndarray, mean: float, var: float, kurtosis: float) -> None:
    """Mean and variance within SIGMAS standard errors; lag-1 correlation ~ 0.

    ``kurtosis`` is E[(x - mean)**4] / var**2 of the target distribution, which
    sets the standard error of the sample variance.
    """
    n = x.size
    assert abs(x.mean() - mean) <= SIGMAS * math.sqrt(var / n), (x.mean(), mean)
    stderr_var = var * math.sqrt((kurtosis - 1) / n)
    assert abs(x.var() - var) <= SIGMAS * stderr_var, (x.var(), var)
    # Neighbouring draws are uncorrelated.
    r = np.corrcoef(x[:-1], x[1:])[0, 1]
    assert abs(r) <= SIGMAS / math.sqrt(n), r


def _ks(x: np.ndarray, dist: str) -> None:
    stats = pytest.importorskip("scipy.stats")
    p = stats.kstest(x, dist).pvalue
    assert p >= KS_ALPHA, f"KS p-value {p:.3g} for {dist}"


@pytest.mark.parametrize("seed,pos", [(0, 0), (2**40 + 123, 2**33), (-(2**63), 7)])
def test_murmur_uniform_statistics(seed, pos):
    u = R.murmur3_uniform32(seed, pos, torch.arange(N_STAT)).double().numpy()
    assert u.min() > 0.0 and u.max() <= 1.0
    _check_moments(u, 0.5, 1 / 12, UNIFORM_KURTOSIS)
    _ks(u, "uniform")


@pytest.mark.parametrize("seed", [0, -1, 2**63 - 1])
def test_philox_uniform_statistics(seed):
    u = R.accept_uniform(seed, torch.arange(N_STAT) + 2**32 - N_STAT // 2).double().numpy()
    assert u.min() > 0.0 and u.max() < 1.0
    _check_moments(u, 0.5, 1 / 12, UNIFORM_KURTOSIS)
    _ks(u, "uniform")


def test_murmur_uniform_statistics_across_seeds():
    """One token, many request seeds: the per-request stream is uniform too."""
    gen = torch.Generator().manual_seed(5)
    u = R.murmur3_uniform32(_random_int64(gen, N_STAT), 42, 31337).double().numpy()
    _check_moments(u, 0.5, 1 / 12, UNIFORM_KURTOSIS)
    _ks(u, "uniform")


def test_gumbel_noise_statistics():
    g = R.gumbel_noise(2**32 + 5, 17, torch.arange(N_STAT)).double().numpy()
    _check_moments(g, EULER_GAMMA, math.pi**2 / 6, GUMBEL_KURTOSIS)
    _ks(g, "gumbel_r")


def test_mul32_keeps_the_full_product_where_int64_wraps():
    """oracle.R._mul32 reads the wrapped int64 product as the uint64 one: against the product split into 16-bit
    halves (every intermediate below 2**49), on words whose product carries into bit 63 (so the int64 is negative)
    and on the extremes."""
    g = torch.Generator().manual_seed(5)
    a = torch.cat([torch.randint(0, 2**32, (200_000,), generator=g, dtype=torch.int64),
                   torch.tensor([0, 1, 2**31 - 1, 2**31, 2**32 - 1], dtype=torch.int64)])
    wrapped = False
    for b in (R.MURMUR_C1, R.MURMUR_C2, R.MURMUR_F1, R.MURMUR_F2, R.PHILOX_ROUND_A, R.PHILOX_ROUND_B,
              2**32 - 1):
        p_lo, p_hi = (a & 0xFFFF) * b, (a >> 16) * b
        want_hi = (p_hi + (p_lo >> 16)) >> 16
        want_lo = (((p_hi & 0xFFFF) << 16) + p_lo) & R.MASK32
        hi, lo = R._mul32(a, b)
        assert torch.equal(hi, want_hi) and torch.equal(lo, want_lo), hex(b)
        wrapped = wrapped or bool(((a * b) < 0).any())
    assert wrapped  # the case the wrap-around reading exists for (MURMUR_C1, the Philox constants, 2**32 - 1)
