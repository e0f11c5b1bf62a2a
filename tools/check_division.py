#!/usr/bin/env python3
"""Check an exact division by a per-row reciprocal against IEEE ``x / t`` in float32, on the CPU (numpy; no GPU).

    python3 tools/check_division.py --all --t 0.7              # every fp32 x, the formula without its range test
    python3 tools/check_division.py --t 0.7,1.3 --random 16   # the ranged form, over the binades that decide it

The formula (docs/KERNELS.md "The temperature division"): ``r = RN(1 / t)`` once a row, then a lane takes
``q0 = RN(x * r)``, ``e = fma(q0, -t, x)``, ``q = fma(e, r, q0)``. With ``r`` correctly rounded and ``q0`` within an
ulp of ``x / t``, the remainder ``e`` is exact and ``q`` is ``RN(x / t)`` (Markstein's theorem; Muller et al.,
Handbook of Floating-Point Arithmetic, 2nd ed., section 4.9), as long as nothing under- or overflows. The ranged
form takes it only for ``2^-90 <= |x| < 2^90`` on rows with ``2^-20 <= t <= 2^20``, and the IEEE division for
every other lane and row.

``--all`` runs the formula alone over all 2^32 float32 ``x`` (minutes a ``t``) and prints where it differs from
numpy's IEEE division: the inputs a range test must send to the IEEE division. Without ``--all``, for each ``t``
it checks the ranged form over the binades that decide it: ``x`` in [1, 2), [2^-90, 2^-89) and [2^89, 2^90)
(each sign; 2^23 values each) plus zeros, infinities, NaN and values just outside the range. Inside the range no
step under- or overflows, so every step scales exactly with ``x -> 2^k x`` and one binade stands for all of them.
``--random N`` adds N temperatures log-uniform in [2^-20, 2^20] (seed 0), the range's ends and the float after 1.

The fma is emulated exactly: the product of two float32 is exact in float64; the sum is rounded to float64 and
then to float32, which can differ from one rounding only when the float64 result is a float32 midpoint (or the
overflow threshold) and the sum was inexact, and then the error term of the float64 sum (TwoSum) says which way.
Exit 1 when the ranged form differs from IEEE anywhere checked, 2 on a bad argument.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

X_LO, X_HI = 2.0 ** -90, 2.0 ** 90   # the lanes that take the formula: X_LO <= |x| < X_HI
T_LO, T_HI = 2.0 ** -20, 2.0 ** 20   # the rows that take the reciprocal (t)
OVERFLOW = 2.0 ** 128                # where float32 rounding goes to inf, as a float64 neighbour


def fma32(a, b, c) -> np.ndarray:
    """``fma(a, b, c)`` of float32 values, rounded once to float32 (round to nearest, ties to even)."""
    a64, b64, c64 = (np.asarray(v, np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):
        p = a64 * b64  # exact: 24 + 24 bits
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)  # TwoSum: s + err == p + c exactly
        m = s.astype(np.float32)
        m64 = m.astype(np.float64)
        m64 = np.where(np.isinf(m64) & np.isfinite(s), np.copysign(OVERFLOW, s), m64)
        nb = np.nextafter(m, np.where(s > m64, np.inf, -np.inf).astype(np.float32))
        nb64 = nb.astype(np.float64)
        nb64 = np.where(np.isinf(nb64) & np.isfinite(s), np.copysign(OVERFLOW, s), nb64)
        midpoint = np.isfinite(s) & (err != 0) & (m64 != s) & ((m64 + nb64) * 0.5 == s)
    if midpoint.any():
        upper, lower = np.where(m64 > nb64, m, nb), np.where(m64 > nb64, nb, m)
        m = np.where(midpoint, np.where(err > 0, upper, lower), m)
    return m


def reciprocal_division(x: np.ndarray, t: float) -> np.ndarray:
    """The formula alone: ``fma(fma(q0, -t, x), r, q0)`` with ``q0 = RN(x * r)``, ``r = RN(1 / t)``."""
    t32 = np.float32(t)
    r = np.float32(1.0) / t32
    with np.errstate(all="ignore"):
        q0 = (x.astype(np.float64) * np.float64(r)).astype(np.float32)  # one rounding of an exact product
        return fma32(fma32(q0, -t32, x), r, q0)


def ranged_division(x: np.ndarray, t: float) -> np.ndarray:
    """The ranged form: the formula inside the range, the IEEE division outside it."""
    t32 = np.float32(t)
    with np.errstate(all="ignore"):
        ieee = x / t32
    if not (T_LO <= t32 <= T_HI):
        return ieee
    ax = np.abs(x)
    return np.where((ax >= X_LO) & (ax < X_HI), reciprocal_division(x, t), ieee)


def differs(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where two float32 arrays differ bit for bit (any NaN equals any NaN)."""
    return (got.view(np.uint32) != want.view(np.uint32)) & ~(np.isnan(got) & np.isnan(want))


def binade(lo: float, sign: float) -> np.ndarray:
    """Every float32 in [lo, 2 lo) (lo a power of two), times ``sign``."""
    start = np.float32(lo).view(np.uint32)
    return (np.arange(start, start + (1 << 23), dtype=np.uint32).view(np.float32) * np.float32(sign))


def edge_values() -> np.ndarray:
    """Zeros, infinities, NaN, the smallest and largest values, and values on both sides of the range's ends."""
    ends = [np.float32(v) for v in (X_LO, X_HI, 1e-45, 1.17549435e-38, 3.4028235e38)]
    with np.errstate(over="ignore"):
        near = [np.nextafter(e, np.float32(s) * np.float32(np.inf)) for e in ends for s in (1, -1)]
    vals = np.array(ends + near + [0.0, np.inf, np.nan], np.float32)
    return np.concatenate([vals, -vals])


def check_ranged_form(t: float) -> int:
    """Differences of the ranged form from IEEE over the deciding binades and the edge values, for one t."""
    bad = 0
    for lo in (1.0, X_LO, X_HI / 2):
        for sign in (1.0, -1.0):
            x = binade(lo, sign)
            with np.errstate(all="ignore"):
                bad += int(differs(ranged_division(x, t), x / np.float32(t)).sum())
    x = edge_values()
    with np.errstate(all="ignore"):
        bad += int(differs(ranged_division(x, t), x / np.float32(t)).sum())
    return bad


def check_all(t: float, chunk: int = 1 << 24) -> tuple[int, float, float]:
    """(inputs where the formula alone differs from IEEE, smallest and largest |x| among them), over all 2^32 x."""
    bad, lo, hi = 0, np.inf, 0.0
    for start in range(0, 1 << 32, chunk):
        x = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(all="ignore"):
            miss = differs(reciprocal_division(x, t), x / np.float32(t))
        if miss.any():
            ax = np.abs(x[miss])
            bad, lo, hi = bad + int(miss.sum()), min(lo, float(np.nanmin(ax))), max(hi, float(np.nanmax(ax)))
    return bad, lo, hi


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--t", default="0.7", help="temperatures, comma-separated (float32)")
    ap.add_argument("--random", type=int, default=0, metavar="N", help="also N log-uniform temperatures and the ends")
    ap.add_argument("--all", action="store_true", help="the formula alone over every float32 x")
    args = ap.parse_args(argv)
    try:
        temps = [float(v) for v in args.t.split(",") if v]
    except ValueError:
        print(f"check_division: --t {args.t!r}: expected numbers, comma-separated", file=sys.stderr)
        return 2
    if args.random:
        rng = np.random.default_rng(0)
        temps += [T_LO, T_HI, float(np.nextafter(np.float32(1), np.float32(2)))]
        temps += [float(np.float32(2.0 ** e)) for e in rng.uniform(-20, 20, args.random)]
    failed = 0
    for t in temps:
        if args.all:
            bad, lo, hi = check_all(t)
            span = f"; |x| from {lo:.7g} to {hi:.7g}" if bad else ""
            print(f"t={np.float32(t)!r}: the formula alone differs from IEEE on {bad:,} of 2^32 inputs{span}",
                  flush=True)
        else:
            bad = check_ranged_form(t)
            failed += bad
            print(f"t={np.float32(t)!r}: the ranged form differs from IEEE on {bad} inputs", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
