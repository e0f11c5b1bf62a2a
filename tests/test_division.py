"""tools/check_division.py: its exact fma and the reciprocal division it checks (docs/KERNELS.md "The temperature
division"). CPU only, a few seconds."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from helpers import load_tool

cd = load_tool("check_division")


def rn32(q: Fraction) -> np.float32:
    """The float32 nearest ``q`` (ties to even; past the overflow threshold: inf), computed exactly."""
    if q == 0:
        return np.float32(0.0)
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    ulp = Fraction(2) ** (max(e, -126) - 23)
    n, rem = divmod(a / ulp, 1)
    n = int(n) + (rem > Fraction(1, 2) or (rem == Fraction(1, 2) and int(n) % 2 == 1))
    v = n * ulp
    if v >= Fraction(2) ** 128:
        return np.float32(np.inf if q > 0 else -np.inf)
    return np.float32(float(v) if q > 0 else -float(v))


def test_fma32_rounds_once_where_float64_lands_on_a_float32_midpoint():
    """(1 + 2^-12)^2 - 2^-11 = 1 + 2^-24 exactly, a float32 midpoint: ties to even gives 1. (1 + 2^-12)^2 + 2^-60
    lies just above the midpoint 1 + 2^-11 + 2^-24, but its float64 sum rounds onto it, so a float64 sum and a
    float32 cast gives 1 + 2^-11 where the fma gives 1 + 2^-11 + 2^-23: the TwoSum error term must decide. Random
    near-cancelling triples agree with the exact rational rounding too."""
    a = np.array([1 + 2 ** -12], np.float32)
    for c, want in ((-(2 ** -11), Fraction(1)),
                    (2 ** -60, Fraction(1) + Fraction(1, 2 ** 11) + Fraction(1, 2 ** 23)),
                    (-(2 ** -60), Fraction(1) + Fraction(1, 2 ** 11))):
        c32 = np.array([c], np.float32)
        exact = Fraction(float(a[0])) ** 2 + Fraction(float(c32[0]))
        assert rn32(exact) == np.float32(float(want))
        assert cd.fma32(a, a, c32)[0] == rn32(exact)
    naive = np.float32(np.float64(a[0]) * np.float64(a[0]) + np.float64(2 ** -60))
    assert naive != cd.fma32(a, a, np.array([2 ** -60], np.float32))[0]
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(400) * 2.0 ** rng.integers(-40, 40, 400)).astype(np.float32)
    y = rng.standard_normal(400).astype(np.float32)
    z = (-(x.astype(np.float64) * y) * (1 + rng.standard_normal(400) * 1e-9)).astype(np.float32)
    got = cd.fma32(x, y, z)
    for i in range(400):
        assert got[i] == rn32(Fraction(float(x[i])) * Fraction(float(y[i])) + Fraction(float(z[i]))), i


def test_the_ranged_reciprocal_division_is_ieee_and_the_range_test_is_needed():
    """The ranged form equals IEEE x / t on a sample of every binade and on the edge values, for temperatures
    on both sides of 1 and at the range's ends; the formula alone is wrong on tiny x (the remainder underflows),
    and a range reaching down to 2^-126 would let such lanes through."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32), cd.edge_values()])
    for t in (0.7, 1.3, 0.05, cd.T_LO, cd.T_HI, float(np.nextafter(np.float32(1), np.float32(2)))):
        with np.errstate(all="ignore"):
            assert not cd.differs(cd.ranged_division(x, t), x / np.float32(t)).any(), t
    tiny = cd.binade(2.0 ** -120, 1.0)[::32]
    with np.errstate(all="ignore"):
        want = tiny / np.float32(0.7)
        assert cd.differs(cd.reciprocal_division(tiny, 0.7), want).sum() > 100
        assert not cd.differs(cd.ranged_division(tiny, 0.7), want).any()
        low = cd.X_LO
        try:
            cd.X_LO = 2.0 ** -126
            assert cd.differs(cd.ranged_division(tiny, 0.7), want).any()
        finally:
            cd.X_LO = low
