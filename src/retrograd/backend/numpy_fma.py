"""``a * b + c`` rounded once (C's ``fma``) on NumPy arrays, which have no such ufunc.

torch's CPU kernels of ``lerp``, ``add``/``sub`` with an ``alpha`` and ``addcmul`` compute their
results with a fused multiply-add (``vec::fmadd``, and the compiler contracts the scalar tails
alike), so a multiplication and an addition rounded apart differ from torch's by an ulp in 5 to
25% of the elements. These functions give the bits of the fused operation:

- float32: the product of two float32s is exact in float64 (48 significant bits), and the sum
  with ``c`` is rounded once in float64, then again to float32. That second rounding is wrong
  only when the float64 sum lands exactly on a float32 midpoint (or in float32's subnormal
  range, whose grid is coarser) while being inexact; those elements (rare: about one in 2**24
  of random products, and only where ``c`` is tiny beside the product) are then rounded to odd
  in float64, which makes the float32 rounding correct (Boldo and Melquiond, "Emulation of FMA
  and correctly rounded sums: proved algorithms using rounding to odd", 2008);
- float64: the product exactly as a pair (Dekker's TwoProduct with Veltkamp's split), the sum
  with ``c`` as a pair (Knuth's TwoSum), the two low parts added with rounding to odd, and the
  high part added to that, rounded once (the same paper's algorithm). Where the splitting could
  overflow or the product's low part underflow (magnitudes past 2**995 or under 2**-960), and
  where the result is not finite, the elements are computed one by one, exactly, with Python's
  rationals (``float`` of a ``Fraction`` is correctly rounded).

"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["add_scaled", "addcmul", "fused_multiply_add", "lerp"]

_SPLITTER = 134217729.0  # 2**27 + 1: Veltkamp's split of a float64 into two 26-bit halves
_FLOAT32_MIDPOINT_MASK = np.uint64((1 << 29) - 1)  # the float64 bits below float32's last one
_FLOAT32_MIDPOINT = np.uint64(1 << 28)
_FLOAT32_SMALLEST_NORMAL = 2.0**-126
_SAFE_LOW, _SAFE_HIGH = 2.0**-960, 2.0**995


def lerp(x: np.ndarray, end: np.ndarray, weight: Any) -> np.ndarray:
    """torch's ``lerp`` (``weight`` an array or a Python number): ``fma(w, end - x, x)`` where
    ``|w| < 1/2``, else ``fma(w - 1, end - x, end)``, so both ends are exact."""
    dtype = x.dtype
    diff = np.subtract(end, x)
    if isinstance(weight, np.ndarray | np.generic):  # (a 0-d one may be a NumPy scalar)
        small = np.abs(weight) < 0.5
        coefficient = np.where(small, weight, weight - dtype.type(1))
        base = np.where(small, x, end)
    else:
        weight = dtype.type(weight)  # torch takes a scalar weight in the dtype
        small = abs(weight) < 0.5
        coefficient = weight if small else weight - dtype.type(1)
        base = x if small else end
    return fused_multiply_add(coefficient, diff, base, dtype)


def add_scaled(x: np.ndarray, y: np.ndarray, alpha: float) -> np.ndarray:
    """torch's ``add(x, y, alpha=alpha)`` of float arrays: ``fma(y, alpha, x)``."""
    return fused_multiply_add(y, x.dtype.type(alpha), x, x.dtype)


def addcmul(x: np.ndarray, t1: np.ndarray, t2: np.ndarray, value: float) -> np.ndarray:
    """torch's ``addcmul(x, t1, t2, value=value)`` of float arrays: ``fma(value * t1, t2, x)``."""
    dtype = x.dtype
    scaled = t1 if value == 1 else np.multiply(t1, dtype.type(value))
    return fused_multiply_add(scaled, t2, x, dtype)


def fused_multiply_add(a: Any, b: Any, c: Any, dtype: Any) -> np.ndarray:
    """``a * b + c`` rounded once, broadcasting, of float32 or float64 arrays or scalars of
    ``dtype``."""
    operands = [np.asarray(v, dtype) for v in (a, b, c)]
    if np.dtype(dtype) == np.float64:
        return _fma_float64(*operands)
    return _fma_float32(*operands)


def _fma_float32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    total = np.multiply(a, b, dtype=np.float64)  # exact
    if total.shape != c.shape:
        total = np.broadcast_to(total, np.broadcast_shapes(total.shape, c.shape)).copy()
    total += c  # rounded once, in float64
    shape = total.shape
    # (count_nonzero, not .any(): on a small array the call costs more than the arithmetic,
    # and .any()'s costs 2 us against 0.3)
    suspect = np.bitwise_and(total.view(np.uint64), _FLOAT32_MIDPOINT_MASK) == _FLOAT32_MIDPOINT
    suspect |= np.abs(total) < _FLOAT32_SMALLEST_NORMAL
    if np.count_nonzero(suspect):
        where = np.flatnonzero(suspect)
        product = _flat(a, shape)[where].astype(np.float64) * _flat(b, shape)[where]
        addend = _flat(c, shape)[where].astype(np.float64)
        flat = total.reshape(-1)
        flat[where] = _rounded_to_odd(flat[where], product, addend)
    return total.astype(np.float32)


def _fma_float64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        product = a * b
        a_high, a_low = _split(a)
        b_high, b_low = _split(b)
        product_low = (
            (a_high * b_high - product) + a_high * b_low + a_low * b_high
        ) + a_low * b_low
        high, sum_low = _two_sum(c, product)
        low = _rounded_to_odd(sum_low + product_low, sum_low, product_low)
        out = np.asarray(high + low)
        # An overflow anywhere (the split of a huge operand, the product, the sum) leaves an
        # infinity or NaN in ``out``; a product so small that its low part underflows is the
        # one other way for the pair arithmetic to be inexact.
        finite = np.isfinite(out)
        tiny = np.abs(product) < _SAFE_LOW
        size = out.size
        if (
            np.count_nonzero(finite) == size
            and not np.count_nonzero(tiny)
            and np.count_nonzero(out) == size
        ):
            return out
        out = out.copy()
        # an exact zero: IEEE's sign of the sum (``-0`` only for ``-0 + -0``), which the pair
        # arithmetic loses; the product is exact there
        zero = out == 0
        out[zero] = (product + c)[zero]
        not_finite = ~finite
        if not_finite.any():
            # IEEE's rules: the plain formula where a factor is not finite, the addend where it
            # alone is not (a finite product, however large, leaves it as it is)
            factors_finite = np.isfinite(a) & np.isfinite(b)
            out = np.where(not_finite & ~factors_finite, product + c, out)
            out = np.where(not_finite & factors_finite & ~np.isfinite(c), c, out)
            one_by_one = not_finite & factors_finite & np.isfinite(c)
        else:
            one_by_one = np.zeros(out.shape, bool)
        one_by_one |= tiny & (a != 0) & (b != 0)
    if one_by_one.any():
        where = np.flatnonzero(np.broadcast_to(one_by_one, out.shape))
        operands = [_flat(v, out.shape)[where] for v in (a, b, c)]
        out.reshape(-1)[where] = [_exact_fma(*values) for values in zip(*operands, strict=True)]
    return out


def _flat(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(x, shape).reshape(-1)


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split: ``x = high + low``, each with at most 26 significant bits."""
    scaled = x * _SPLITTER
    high = scaled - (scaled - x)
    return high, x - high


def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x + y`` rounded, and its rounding error (exact)."""
    total = x + y
    y_part = total - x
    return total, (x - (total - y_part)) + (y - y_part)


def _rounded_to_odd(total: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x + y`` rounded to odd, from ``total``, its float64 rounding to nearest: where the sum
    was inexact and ``total`` has an even last bit, the neighbour towards the exact sum."""
    y_part = total - x
    error = (x - (total - y_part)) + (y - y_part)
    bits = np.asarray(total).view(np.int64)
    nudge = (error != 0) & ((bits & 1) == 0) & np.isfinite(total)
    if not np.count_nonzero(nudge):
        return total
    # the bits as an integer grow with the magnitude: +1 steps away from zero
    away = np.signbit(error) == np.signbit(total)
    stepped = (bits + np.where(away, 1, -1)).view(np.float64)
    return np.where(nudge, stepped, total)


def _exact_fma(a: float, b: float, c: float) -> float:
    """One element, exactly (Python's rationals), IEEE's rules where it is not finite."""
    a, b, c = float(a), float(b), float(c)
    if not (math.isfinite(a) and math.isfinite(b)):
        return a * b + c
    if not math.isfinite(c):
        return c  # (a finite product, however large, leaves an infinite or NaN addend)
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        # the sign of an exact zero: -0 only for -0 + -0 (the product then is exact)
        return a * b + c
    try:
        return float(exact)
    except OverflowError:
        return math.inf if exact > 0 else -math.inf
