"""The ``mrv2`` RNG contract in plain torch: the oracle for our Triton kernels.

vLLM's Model Runner V2 sampler (``vllm/v1/worker/gpu/sample/gumbel.py``) draws
two kinds of randomness, both pure functions of integers:

* the acceptance uniform of rejection sampling: Triton's ``tl.rand(seed, pos)``
  (Philox-4x32-10), clamped away from 0 (:func:`accept_uniform`);
* the Gumbel noise of Gumbel-max sampling: a 32-bit murmur3-style hash of
  ``(seed, pos, token)`` turned into a uniform and then into
  ``-log(-log(1 - u))`` (:func:`murmur3_uniform32`, :func:`gumbel_noise`).

``replay_kernels/shared/rng.py`` implements the same contract as ``@triton.jit``
device functions; ``tests/test_rng.py`` proves the two bit-identical.

Conventions
-----------
* Every integer input (``seed``, ``pos``/``offset``, ``token``) is a Python int
  or an integer tensor; all are taken as int64 (seeds may be any int64,
  negative included) and broadcast together. Device: that of the tensor inputs,
  else ``device=`` (default CPU).
* Unsigned 32-bit arithmetic is done in int64 tensors holding values in
  ``[0, 2**32)``, masked with ``& 0xFFFFFFFF`` after every step. Products are
  split into 16-bit halves so no intermediate exceeds 2**49 (a plain 32x32-bit
  product can overflow int64; torch's uint64 lacks ``>>`` and ``+`` on CPU).
* Floating point results are float32, computed with the same fp32 operations
  in the same order as the Triton code, so they agree bit for bit.
* ``log`` is evaluated in float64 and rounded to float32 (correctly rounded in
  all but astronomically rare cases), which makes the oracle identical on CPU
  and CUDA. Triton's ``tl.log`` (numpy's ``np.log`` under the interpreter,
  libdevice on GPU) is within ~1 ulp of it but not always equal, so compiled
  Gumbel noise can differ from this oracle in the last bits; the harness treats
  such differences as near-ties. Uniforms (both kinds) are exact everywhere.
"""

from __future__ import annotations

import torch

Int = int | torch.Tensor

MASK32 = 0xFFFFFFFF

# Philox-4x32 (Salmon et al. 2011), as in triton/language/random.py.
PHILOX_ROUND_A = 0xD2511F53
PHILOX_ROUND_B = 0xCD9E8D57
PHILOX_KEY_A = 0x9E3779B9
PHILOX_KEY_B = 0xBB67AE85
PHILOX_ROUNDS = 10
# tl.rand's int32 -> [0, 1) scale; the float literal is rounded to fp32 at use.
RAND_SCALE = 4.6566127342e-10
# Smallest acceptance uniform: tl.rand's smallest positive value.
ACCEPT_UNIFORM_MIN = 4.6566127342e-10

# murmur3 (x86_32) constants.
MURMUR_C1 = 0xCC9E2D51
MURMUR_C2 = 0x1B873593
MURMUR_N = 0xE6546B64
MURMUR_F1 = 0x85EBCA6B
MURMUR_F2 = 0xC2B2AE35
MURMUR_LENGTH = 16  # four 32-bit words were mixed in
TWO_POW_M16 = 1.52587890625e-05  # 2**-16, exact in fp32
TWO_POW_M32 = 2.3283064365386963e-10  # 2**-32, exact in fp32

# Lower clamp for 1 - u before log (2**-24).
LOG_CLAMP_MIN = 5.960464477539063e-08
# Use the series for log(1 - u) below this u.
SERIES_CUTOFF = 0.25

# Row chunk for gumbel_rows: at most this many elements per chunk.
_GUMBEL_CHUNK_ELEMS = 1 << 22


# --------------------------------------------------------------------------
# 32-bit unsigned helpers on int64 tensors
# --------------------------------------------------------------------------


def _i64(x: Int, device: torch.device | str | None = None) -> torch.Tensor:
    """``x`` as an int64 tensor (Python ints must fit in int64)."""
    if isinstance(x, torch.Tensor):
        if x.is_floating_point() or x.is_complex():
            raise TypeError(f"expected an integer tensor, got {x.dtype}")
        return x.to(torch.int64)
    return torch.tensor(x, dtype=torch.int64, device=device)


def _device_of(*xs: Int, device: torch.device | str | None) -> torch.device | str | None:
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x.device
    return device


def _lo32(x: torch.Tensor) -> torch.Tensor:
    """Low 32 bits of an int64, as a value in [0, 2**32)."""
    return x & MASK32


def _hi32(x: torch.Tensor) -> torch.Tensor:
    """High 32 bits of an int64 (two's complement), as a value in [0, 2**32)."""
    return (x >> 32) & MASK32


def _mul32(a: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Full 64-bit product of uint32 ``a`` (int64 tensor) and ``b`` (int constant in [0, 2**32)).

    Returns ``(hi, lo)``, the high and low 32-bit words, each in [0, 2**32). The product is below 2**64, and
    torch's int64 multiply keeps its low 64 bits (two's complement wrap-around), which are the product's bits:
    the arithmetic shift's sign bits above bit 31 are masked off. tests/test_rng.py checks this against the
    product split into 16-bit halves, on words that carry into bit 63.
    """
    p = a * b
    return (p >> 32) & MASK32, p & MASK32


def _mullo32(a: torch.Tensor, b: int) -> torch.Tensor:
    """``a * b mod 2**32`` for uint32 ``a`` (tensor) and ``b`` (int constant)."""
    return (a * b) & MASK32


def _rotl32(x: torch.Tensor, r: int) -> torch.Tensor:
    """Rotate the uint32 ``x`` left by ``r`` bits (0 < r < 32)."""
    return ((x << r) & MASK32) | (x >> (32 - r))


def _log_f32(x: torch.Tensor) -> torch.Tensor:
    """Natural log of a float32 tensor, correctly rounded to float32.

    Computed in float64 so the result does not depend on the device's float32
    ``log`` (torch CPU, torch CUDA and numpy differ in the last bit).
    """
    return torch.log(x.to(torch.float64)).to(torch.float32)


# --------------------------------------------------------------------------
# Acceptance uniform: Triton's tl.rand (Philox-4x32-10)
# --------------------------------------------------------------------------


def philox_randint(seed: Int, offset: Int, *, device=None) -> torch.Tensor:
    """First Philox-4x32-10 output word, == ``tl.randint(seed, offset)``'s bits.

    Key = (seed low 32, seed high 32), counter = (offset low 32, offset high 32,
    0, 0). ``seed``, ``offset``: int or int64-able tensors, broadcast together.
    Returns an int64 tensor of the broadcast shape with values in [0, 2**32).
    """
    device = _device_of(seed, offset, device=device)
    seed, offset = _i64(seed, device), _i64(offset, device)
    k0, k1 = _lo32(seed), _hi32(seed)
    c0, c1 = _lo32(offset), _hi32(offset)
    c2 = c3 = torch.zeros_like(c0)
    for _ in range(PHILOX_ROUNDS):
        hi_b, lo_b = _mul32(c2, PHILOX_ROUND_B)
        hi_a, lo_a = _mul32(c0, PHILOX_ROUND_A)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0 = (k0 + PHILOX_KEY_A) & MASK32
        k1 = (k1 + PHILOX_KEY_B) & MASK32
    return c0


def uint32_to_uniform(word: torch.Tensor) -> torch.Tensor:
    """Triton's ``uint_to_uniform_float`` for 32-bit words: float32 in [0, 1).

    ``word``: int64 tensor with values in [0, 2**32). The word is read as an
    int32 ``x``; ``x = ~x`` if negative; result ``float32(x) * fp32(RAND_SCALE)``.
    """
    # For a negative int32 x (word >= 2**31), ~x == word ^ 0xFFFFFFFF.
    x = torch.where(word >= 2**31, word ^ MASK32, word)  # [0, 2**31)
    # int -> fp32 rounds to nearest even; the scalar is rounded to fp32 and the
    # multiply is done in fp32 (torch's opmath for float32 is float32).
    return x.to(torch.float32) * RAND_SCALE


def philox_uniform(seed: Int, offset: Int, *, device=None) -> torch.Tensor:
    """``tl.rand(seed, offset)`` bit for bit: float32 in [0, 1), may be 0.

    ``seed``, ``offset``: int or integer tensors (int64 semantics), broadcast.
    """
    return uint32_to_uniform(philox_randint(seed, offset, device=device))


def accept_uniform(seed: Int, pos: Int, *, device=None) -> torch.Tensor:
    """Acceptance uniform of MRV2 rejection sampling: float32 in (0, 1).

    ``max(tl.rand(seed, pos), ACCEPT_UNIFORM_MIN)``; never 0.
    ``seed``: per-request int64 seed; ``pos``: int64 sequence position.
    """
    return torch.clamp(philox_uniform(seed, pos, device=device), min=ACCEPT_UNIFORM_MIN)


# --------------------------------------------------------------------------
# Gumbel noise: murmur3-style hash of (seed, pos, token)
# --------------------------------------------------------------------------


def _murmur3_mix(h: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """One murmur3 body step: mix the uint32 word ``k`` into the state ``h``."""
    k = _mullo32(k, MURMUR_C1)
    k = _rotl32(k, 15)
    k = _mullo32(k, MURMUR_C2)
    h = _rotl32(h ^ k, 13)
    return (h * 5 + MURMUR_N) & MASK32


def _murmur3_fmix32(h: torch.Tensor) -> torch.Tensor:
    """murmur3's 32-bit finaliser (avalanche)."""
    h = h ^ (h >> 16)
    h = _mullo32(h, MURMUR_F1)
    h = h ^ (h >> 13)
    h = _mullo32(h, MURMUR_F2)
    return h ^ (h >> 16)


def murmur3_hash32(seed: Int, pos: Int, token: Int, *, device=None, domain: int = 0) -> torch.Tensor:
    """The 32-bit hash behind the Gumbel noise.

    Mixes, in order, seed low 32 bits, seed high 32 bits, pos low 32 bits and
    token (low 32 bits) into h = ``domain`` (0; the fp64 contract's second word uses
    :data:`DOMAIN_HI`), then ``fmix32(h ^ 16)``.
    Inputs broadcast together; returns int64 with values in [0, 2**32).
    Per-row inputs (shape ``[N, 1]``) are mixed before broadcasting to tokens.
    """
    device = _device_of(seed, pos, token, device=device)
    seed, pos, token = _i64(seed, device), _i64(pos, device), _i64(token, device)
    h = _murmur3_mix(torch.full_like(seed, domain), _lo32(seed))
    h = _murmur3_mix(h, _hi32(seed))
    h = _murmur3_mix(h, _lo32(pos))
    h = _murmur3_mix(h, _lo32(token))
    return _murmur3_fmix32(h ^ MURMUR_LENGTH)


def hash_to_uniform(h: torch.Tensor) -> torch.Tensor:
    """uint32 hash (int64 in [0, 2**32)) -> float32 uniform in (0, 1].

    ``float32(h >> 16) * 2**-16 + (float32(h & 0xFFFF) + 0.5) * 2**-32`` in
    fp32, in that order: the correctly rounded ``(h + 0.5) * 2**-32``. It is
    1.0 for h >= 0xFFFFFF80 (probability 2**-25).
    """
    hi16 = (h >> 16).to(torch.float32)
    lo16 = (h & 0xFFFF).to(torch.float32)
    return hi16 * TWO_POW_M16 + (lo16 + 0.5) * TWO_POW_M32


def murmur3_uniform32(seed: Int, pos: Int, token: Int, *, device=None) -> torch.Tensor:
    """Gumbel uniform of MRV2: float32 in (0, 1] for each (seed, pos, token).

    ``seed``: int64 request seed; ``pos``: int64 position (only its low 32 bits
    matter); ``token``: token id(s) (low 32 bits). Broadcast together.
    """
    return hash_to_uniform(murmur3_hash32(seed, pos, token, device=device))


def log1p_neg(u: torch.Tensor) -> torch.Tensor:
    """``log(1 - u)`` for float32 ``u`` in (0, 1], as gumbel.py computes it.

    For u < 0.25 the degree-8 series ``-u * (1 + u/2 + ... + u**7/8)`` in Horner
    form (fp32, innermost first); else ``log(max(1 - u, 2**-24))``.
    """
    poly = torch.full_like(u, 1.0 / 8.0)
    for k in (7, 6, 5, 4, 3, 2, 1):
        poly = 1.0 / k + u * poly  # separate fp32 multiply and add
    series = -u * poly
    direct = _log_f32(torch.clamp(1.0 - u, min=LOG_CLAMP_MIN))
    return torch.where(u < SERIES_CUTOFF, series, direct)


def gumbel_noise(seed: Int, pos: Int, token: Int, *, device=None) -> torch.Tensor:
    """Gumbel(0, 1) noise of MRV2: ``-log(-log(1 - u))``, u = murmur3_uniform32.

    Inputs as in :func:`murmur3_uniform32`; returns float32 of the broadcast
    shape. Bit-identical to ``replay_kernels.shared.rng.gumbel_noise`` given a
    correctly rounded ``tl.log`` (see module docstring).
    """
    u = murmur3_uniform32(seed, pos, token, device=device)
    return -_log_f32(-log1p_neg(u))


# ---------------------------------------------------------------------------- the contract's variants
# `mrv2-fp64` (vLLM's use_fp64_gumbel): every Gumbel draw takes a 53-bit uniform from two hashes (the second
# in domain DOMAIN_HI) and the noise -log(-log(u)) in float64; the accept uniform is unchanged.
DOMAIN_HI = 0x9E3779B9
TWO_POW_M53 = 1.1102230246251565e-16
# A drafter's draws (probabilistic drafts) key their noise by pos + DRAFT_NOISE_SALT, so a draft and the
# verifier's resample at the same position never share noise (vLLM gumbel.py _DRAFT_NOISE_SALT).
DRAFT_NOISE_SALT = 1 << 30


def murmur3_uniform64(seed: Int, pos: Int, token: Int, *, device=None) -> torch.Tensor:
    """float64 uniform in (0, 1) of the fp64 contract: ``((hi << 32 | lo) >> 11 + 0.5) * 2**-53``, with
    ``lo`` / ``hi`` the domain-0 / DOMAIN_HI hashes; the largest value (1.0 after rounding) steps down one."""
    lo = murmur3_hash32(seed, pos, token, device=device)
    hi = murmur3_hash32(seed, pos, token, device=device, domain=DOMAIN_HI)
    random53 = (hi << 21) | (lo >> 11)  # ((hi << 32) | lo) >> 11 without leaving int64
    u = (random53.to(torch.float64) + 0.5) * TWO_POW_M53
    return torch.where(u == 1.0, u - TWO_POW_M53, u)


def gumbel_noise64(seed: Int, pos: Int, token: Int, *, device=None) -> torch.Tensor:
    """float64 Gumbel noise of the fp64 contract: ``-log(-log(u))``, u = :func:`murmur3_uniform64`."""
    return -torch.log(-torch.log(murmur3_uniform64(seed, pos, token, device=device)))


def draw_noise(seed: Int, pos: Int, token: Int, *, fp64: bool = False, device=None) -> torch.Tensor:
    """The Gumbel noise of one draw under the contract's width: float32 (``mrv2``) or float64 (``mrv2-fp64``)."""
    return gumbel_noise64(seed, pos, token, device=device) if fp64 else gumbel_noise(seed, pos, token, device=device)


def gumbel_row(seed: int, pos: int, vocab_size: int, device=None) -> torch.Tensor:
    """Gumbel noise for tokens ``0..vocab_size-1`` of one row: float32 ``[V]``."""
    tokens = torch.arange(vocab_size, dtype=torch.int64, device=device)
    return gumbel_noise(seed, pos, tokens)


def gumbel_rows(seeds: torch.Tensor, pos: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Gumbel noise for a batch of rows: float32 ``[N, V]`` on ``seeds.device``.

    ``seeds``, ``pos``: integer tensors ``[N]`` (int64 semantics), one request
    seed and position per row. Row ``i`` equals ``gumbel_row(seeds[i], pos[i],
    V)``. Rows are processed in chunks of about 4M elements to bound memory.
    """
    seeds = _i64(seeds).reshape(-1)
    pos = _i64(pos).to(seeds.device).reshape(-1)
    if seeds.shape != pos.shape:
        raise ValueError(f"seeds {tuple(seeds.shape)} and pos {tuple(pos.shape)} differ")
    n = seeds.numel()
    out = torch.empty((n, vocab_size), dtype=torch.float32, device=seeds.device)
    tokens = torch.arange(vocab_size, dtype=torch.int64, device=seeds.device)
    rows = max(1, _GUMBEL_CHUNK_ELEMS // max(vocab_size, 1))
    for start in range(0, n, rows):
        sl = slice(start, start + rows)
        out[sl] = gumbel_noise(seeds[sl, None], pos[sl, None], tokens)
    return out
