"""The ``mrv2`` RNG contract as ``@triton.jit`` device functions.

Same contract as the torch oracle ``replay_harness/oracle/rng.py`` (read its module
docstring for the definitions); these are what our Triton sampling kernels
call. They match vLLM Model Runner V2 (``vllm/v1/worker/gpu/sample/gumbel.py``)
bit for bit: same Philox stream (``tl.rand``), same hash, same fp32 expression
trees (so a GPU compile contracts them into FMAs the same way vLLM's does).

* ``accept_uniform(seed, pos)``: acceptance uniform, float32 in (0, 1).
* ``murmur3_hash32(seed, pos, token)``: uint32 hash (domain 0).
* ``murmur3_uniform32(seed, pos, token)``: Gumbel uniform, float32 in (0, 1].
* ``gumbel_noise(seed, pos, token)``: ``-log(-log(1 - u))``, float32.
* The same in stages, for kernels that prune: ``murmur3_row_key(seed, pos)`` once per
  row, ``murmur3_finish(key, token)``, ``hash_to_uniform(h)``, ``uniform_to_gumbel(u)``,
  and ``gumbel_upper_bound(h)`` (a bound on the noise from the hash alone, non-increasing in h).
* ``noised_score(x, h, valid)``: the Gumbel-max score ``x + noise(h)`` (-inf where not valid or NaN), and
  ``better(score, idx, best, best_idx)``: the argmax order (a larger score, then the smaller token id).
* ``murmur3_row_key_hi(seed, pos)`` and ``gumbel_noise64(key_lo, key_hi, token)``: the ``mrv2-fp64`` contract's
  float64 noise (two hashes, a 53-bit uniform), for draws under that contract only.
* ``murmur3_preimage(key, h)``: the token whose ``murmur3_finish(key, token)`` is h (for a fixed row key the
  token -> hash map is a bijection of uint32), so a kernel can list the few tokens of a row whose noise is large.

``seed`` is an int64 scalar (any integer dtype is widened to int64), ``pos`` an
integer scalar or block (int64 semantics), ``token`` an int32/int64 scalar or
block of token ids; results have the broadcast shape.

Exactness: the uniforms are exact on every backend. ``gumbel_noise`` uses
``tl.log``: under ``TRITON_INTERPRET=1`` that is numpy's float32 log, on GPU
libdevice's ``logf``, and the GPU compile may contract the series into FMAs;
each can move the noise by an ulp or so against the torch oracle (whose log is
correctly rounded). The harness classifies such differences as near-ties.

Uses only APIs present in Triton 3.0-3.9 (``tl.rand``, ``tl.maximum``,
``tl.where``, ``tl.log``, ``tl.zeros_like``, ``.to``).
"""

import triton
import triton.language as tl

# Smallest acceptance uniform (= tl.rand's smallest positive value).
ACCEPT_UNIFORM_MIN = tl.constexpr(4.6566127342e-10)
# Lower clamp for 1 - u before log (2**-24).
LOG_CLAMP_MIN = tl.constexpr(5.960464477539063e-08)
# Use the series for log(1 - u) below this u.
SERIES_CUTOFF = tl.constexpr(0.25)
# Absolute margin of gumbel_upper_bound over the computed noise (rounding of log is ~1e-6 of 23).
NOISE_SLACK = tl.constexpr(0.01)


@triton.jit
def accept_uniform(seed, pos):
    """``max(tl.rand(seed, pos), ACCEPT_UNIFORM_MIN)``: float32 in (0, 1).

    ``pos`` is widened to int64 so its high word enters the Philox counter
    whatever its dtype (identical to ``tl.rand`` for int64 positions).
    """
    return tl.maximum(tl.rand(seed, pos.to(tl.int64)), ACCEPT_UNIFORM_MIN)


@triton.jit
def _rotl32(x, r: tl.constexpr):
    return (x << r) | (x >> (32 - r))


@triton.jit
def _murmur3_mix(h, k):
    # All operands are uint32 (literals >= 2**31 are typed uint32 by Triton,
    # and uint32 * int32-literal stays uint32), so products wrap mod 2**32.
    k = k * 0xCC9E2D51
    k = _rotl32(k, 15)
    k = k * 0x1B873593
    h = _rotl32(h ^ k, 13)
    return h * 5 + 0xE6546B64


@triton.jit
def _murmur3_fmix32(h):
    h = h ^ (h >> 16)
    h = h * 0x85EBCA6B
    h = h ^ (h >> 13)
    h = h * 0xC2B2AE35
    return h ^ (h >> 16)


@triton.jit
def murmur3_row_key(seed, pos):
    """The (seed, pos) prefix of the hash: h after mixing seed low/high and pos low words into 0 (uint32 scalar).

    Compute it once per row; :func:`murmur3_finish` adds the token word.
    """
    seed = seed.to(tl.int64)
    pos = pos.to(tl.int64)
    seed_lo = (seed & 0xFFFFFFFF).to(tl.uint32)
    seed_hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    pos_lo = (pos & 0xFFFFFFFF).to(tl.uint32)
    h = _murmur3_mix(tl.zeros_like(seed_lo), seed_lo)
    h = _murmur3_mix(h, seed_hi)
    return _murmur3_mix(h, pos_lo)


@triton.jit
def murmur3_finish(row_key, token):
    """``fmix32(mix(row_key, token) ^ 16)``: the hash of (seed, pos, token), shape of ``token``."""
    return _murmur3_fmix32(_murmur3_mix(row_key, token.to(tl.uint32)) ^ 16)


# Inverses mod 2^32 of the odd multipliers of the hash (murmur3's c1, c2, the fmix constants, 5).
_INV_C1 = tl.constexpr(0xDEE13BB1)
_INV_C2 = tl.constexpr(0x56ED309B)
_INV_FMIX1 = tl.constexpr(0xA5CB9243)
_INV_FMIX2 = tl.constexpr(0x7ED1B41D)
_INV_5 = tl.constexpr(0xCCCCCCCD)


@triton.jit
def _rotr32(x, r: tl.constexpr):
    return (x >> r) | (x << (32 - r))


@triton.jit
def murmur3_preimage(row_key, h):
    """The token t (uint32, shape of ``h``) with ``murmur3_finish(row_key, t) == h``: each step of the
    hash undone in reverse order (xor-shifts by their inverse, products by the inverse multiplier, the
    rotations by the opposite rotation). ``h`` uint32. A token id is t when t < V; most t are not."""
    h = h ^ (h >> 16)
    h = h * _INV_FMIX2
    h = h ^ (h >> 13) ^ (h >> 26)
    h = h * _INV_FMIX1
    h = h ^ (h >> 16)
    h = h ^ 16
    k = _rotr32((h - 0xE6546B64) * _INV_5, 13) ^ row_key
    k = _rotr32(k * _INV_C2, 15)
    return k * _INV_C1


@triton.jit
def murmur3_hash32(seed, pos, token):
    """32-bit hash of (seed, pos, token): tl.uint32 of the shape of ``token``.

    Mixes seed low/high 32 bits, pos low 32 bits, token low 32 bits into h = 0,
    then ``fmix32(h ^ 16)``. The first three mixes stay scalar.
    """
    return murmur3_finish(murmur3_row_key(seed, pos), token)


@triton.jit
def hash_to_uniform(h):
    """float32 in (0, 1], the correctly rounded (h + 0.5) / 2**32 of a uint32 hash.

    The hash is split into 16-bit halves (each converts to fp32 exactly) so no
    uint32 -> fp32 conversion is needed.
    """
    hi16 = (h >> 16).to(tl.int32).to(tl.float32)
    lo16 = (h & 0xFFFF).to(tl.int32).to(tl.float32)
    return hi16 * 1.52587890625e-05 + (lo16 + 0.5) * 2.3283064365386963e-10


@triton.jit
def murmur3_uniform32(seed, pos, token):
    """Gumbel uniform: float32 in (0, 1], ``hash_to_uniform(murmur3_hash32(seed, pos, token))``."""
    return hash_to_uniform(murmur3_hash32(seed, pos, token))


@triton.jit
def log1p_neg(u):
    """``log(1 - u)``: degree-8 series for u < 0.25, else ``log(max(1-u, 2**-24))``."""
    poly = 1.0 / 8.0
    poly = 1.0 / 7.0 + u * poly
    poly = 1.0 / 6.0 + u * poly
    poly = 1.0 / 5.0 + u * poly
    poly = 1.0 / 4.0 + u * poly
    poly = 1.0 / 3.0 + u * poly
    poly = 1.0 / 2.0 + u * poly
    poly = 1.0 + u * poly
    series = -u * poly
    direct = tl.log(tl.maximum(1.0 - u, LOG_CLAMP_MIN))
    return tl.where(u < SERIES_CUTOFF, series, direct)


@triton.jit
def uniform_to_gumbel(u):
    """Gumbel(0, 1) noise ``-log(-log(1 - u))`` of a uniform from :func:`hash_to_uniform`."""
    return -tl.log(-log1p_neg(u))


@triton.jit
def gumbel_noise(seed, pos, token):
    """Gumbel(0, 1) noise ``-log(-log(1 - u))``, u = ``murmur3_uniform32``: float32."""
    return uniform_to_gumbel(murmur3_uniform32(seed, pos, token))


@triton.jit
def gumbel_upper_bound(h):
    """A cheap upper bound of the noise of hash ``h``: three ops, no uniform, no log.

    ``-log(-log(1 - u)) <= -log(u)`` (as ``-log(1 - u) >= u``) and ``u >= (h + 0.5) 2^-32`` up to fp32
    rounding, so the noise is at most ``(32 - log2(h)) ln 2``. With f = fp32(h) = 2^e (1 + m),
    ``log2(f) = e + log2(1 + m) >= e + m = bits(f) / 2^23 - 127``; so the noise is at most
    ``(159 - bits(f) / 2^23) ln 2`` plus ``NOISE_SLACK`` (the rounding of f and of the computed noise).
    For h = 0 the bound is 110: loose, still a bound.
    """
    bits = h.to(tl.float32).to(tl.int32, bitcast=True).to(tl.float32)
    return (159.0 - bits * 1.1920928955078125e-07) * 0.6931471805599453 + NOISE_SLACK


@triton.jit
def noised_score(x, h, valid):
    """The Gumbel-max score ``x + noise(h)`` of lanes with hashes ``h``; -inf where not ``valid`` or NaN (a NaN
    or a -inf minus +inf logit can never win)."""
    score = x + uniform_to_gumbel(hash_to_uniform(h))
    return tl.where(valid & (score == score), score, float("-inf"))


@triton.jit
def better(score, idx, best, best_idx):
    """Whether (score, idx) comes before (best, best_idx): a larger score, or an equal one at a smaller index."""
    return (score > best) | ((score == best) & (idx < best_idx))


# ---------------------------------------------------------------------------- the `mrv2-fp64` variant
# vLLM's use_fp64_gumbel (oracle: rng.murmur3_uniform64 / gumbel_noise64): a 53-bit uniform from two hashes of
# (seed, pos, token), the second started from DOMAIN_HI, and the noise -log(-log(u)) in float64. The accept uniform
# is the contract's (unchanged).
DOMAIN_HI = tl.constexpr(0x9E3779B9)
TWO_POW_M53 = tl.constexpr(1.1102230246251565e-16)  # 2**-53, exact in fp32 and fp64


@triton.jit
def murmur3_row_key_hi(seed, pos):
    """The (seed, pos) prefix of the fp64 contract's second hash: :func:`murmur3_row_key` with h starting at
    DOMAIN_HI instead of 0 (uint32 scalar)."""
    seed = seed.to(tl.int64)
    pos = pos.to(tl.int64)
    seed_lo = (seed & 0xFFFFFFFF).to(tl.uint32)
    seed_hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    pos_lo = (pos & 0xFFFFFFFF).to(tl.uint32)
    h = _murmur3_mix(tl.zeros_like(seed_lo) + DOMAIN_HI, seed_lo)
    h = _murmur3_mix(h, seed_hi)
    return _murmur3_mix(h, pos_lo)


@triton.jit
def gumbel_noise64(key_lo, key_hi, token):
    """float64 Gumbel noise ``-log(-log(u))`` of the fp64 contract, shape of ``token``: ``u = ((hi << 21 | lo >> 11)
    + 0.5) 2**-53`` (1.0 steps down one) from ``lo = murmur3_finish(key_lo, token)``, ``hi = murmur3_finish(key_hi,
    token)`` (row keys :func:`murmur3_row_key` and :func:`murmur3_row_key_hi`). The 53 bits convert to float64
    exactly; ``tl.log`` of float64 is numpy's under the interpreter, libdevice's ``log`` on GPU."""
    lo = murmur3_finish(key_lo, token)
    hi = murmur3_finish(key_hi, token)
    r53 = (hi.to(tl.uint64) << 21) | (lo >> 11).to(tl.uint64)
    u = (r53.to(tl.int64).to(tl.float64) + 0.5) * TWO_POW_M53
    u = tl.where(u == 1.0, u - TWO_POW_M53, u)
    return -tl.log(-tl.log(u))
