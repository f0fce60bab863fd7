"""NumPy's own sine and cosine, element by element, for fused kernels (compiled with Numba).

NumPy computes float32 ``sin`` and ``cos`` with its own vectorized algorithm where the CPU has
fused multiply-add (``loops_trigonometric.dispatch.cpp``, ``simd_sincos_f32``): Cody-Waite
reduction by pi/2 in three fused multiply-adds, degree-9 and degree-8 polynomials, the quadrant
choosing and negating; arguments beyond the reduction's range go to the C library's ``sinf``
and ``cosf``, and a NaN gives NumPy's quiet NaN. :func:`sin_float32` and :func:`cos_float32`
are that algorithm for one element, operation for operation with the same fused multiply-adds,
so a fused kernel that calls them computes NumPy's bits. In float64 NumPy calls the C library's
``sin`` and ``cos`` one element at a time, as Numba's ``math.sin`` and ``math.cos`` do.

Whether the bits do agree depends on the machine (NumPy without FMA support falls back to the
C library in float32), so :func:`.kernels.matches_numpy` checks each function against NumPy on
a probe of arguments before fusion treats it as exact.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from ..backend import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)

__all__ = [
    "cos_float32",
    "cos_float64",
    "cos_outside_float32",
    "cos_reduced_float32",
    "sin_float32",
    "sin_float64",
    "sin_outside_float32",
    "sin_reduced_float32",
]

F = np.float32


@intrinsic
def fma32(typingctx, a, b, c):
    """``a * b + c`` rounded once (LLVM's ``fma``), in float32."""
    if not all(arg == types.float32 for arg in (a, b, c)):
        return None

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return types.float32(types.float32, types.float32, types.float32), codegen


#: The C library's float32 sine and cosine (what NumPy's ``npy_sinf`` calls), by symbol: a
#: call LLVM does not evaluate for every element of a vectorized loop as it would ``math.sin``
#: (NumPy calls it only beyond the reduction's range), and one Numba's disk cache can keep.
_sinf = types.ExternalFunction("sinf", types.float32(types.float32))
_cosf = types.ExternalFunction("cosf", types.float32(types.float32))


def _hex(text: str) -> np.float32:
    return F(float.fromhex(text))


TWO_OVER_PI = _hex("0x1.45f306p-1")
PIO2_HIGH, PIO2_MED, PIO2_LOW = (
    _hex("-0x1.921fb0p+00"),
    _hex("-0x1.5110b4p-22"),
    _hex("-0x1.846988p-48"),
)
RINT_MAGIC = _hex("0x1.800000p+23")
COS_POLY = tuple(_hex(c) for c in ("0x1.98e616p-16", "-0x1.6c06dcp-10", "0x1.55553cp-05"))
SIN_POLY = tuple(_hex(c) for c in ("0x1.7d3bbcp-19", "-0x1.a06bbap-13", "0x1.11119ap-07"))
HALF, ONE, ZERO = F(-0.5), F(1.0), F(0.0)
THIRD = _hex("-0x1.555556p-03")
#: Beyond these the Cody-Waite reduction loses accuracy and NumPy calls the C library.
SIN_RANGE, COS_RANGE = F(117435.992), F(71476.0625)


@numba.njit(inline="always", error_model="numpy")
def _reduced(x, cosine):
    """NumPy's SIMD path for one element within the reduction's range: no call, no branch
    (selections only), so that LLVM vectorizes a loop of it. A NaN gives NumPy's NaN."""
    number = x == x
    x = x if number else ZERO
    # round to nearest; NumPy's compiler contracts the product and the sum into one FMA
    quadrant = fma32(x, TWO_OVER_PI, RINT_MAGIC) - RINT_MAGIC
    reduced = fma32(quadrant, PIO2_HIGH, x)
    reduced = fma32(quadrant, PIO2_MED, reduced)
    reduced = fma32(quadrant, PIO2_LOW, reduced)
    square = reduced * reduced
    cos = fma32(COS_POLY[0], square, COS_POLY[1])
    cos = fma32(cos, square, COS_POLY[2])
    cos = fma32(cos, square, HALF)
    cos = fma32(cos, square, ONE)
    sin = fma32(SIN_POLY[0], square, SIN_POLY[1])
    sin = fma32(sin, square, SIN_POLY[2])
    sin = fma32(sin, square, THIRD)
    sin = fma32(sin, square, ZERO)
    sin = fma32(sin, reduced, reduced)
    turn = np.int32(quadrant) + np.int32(1 if cosine else 0)
    out = sin if turn & 1 == 0 else cos
    out = ZERO - out if turn & 2 == 2 else out
    return out if number else F(np.nan)


@numba.njit(inline="always", error_model="numpy")
def sin_float32(x):
    """NumPy's float32 ``sin`` of ``x``."""
    return _sinf(x) if abs(x) > SIN_RANGE else _reduced(x, False)


@numba.njit(inline="always", error_model="numpy")
def cos_float32(x):
    """NumPy's float32 ``cos`` of ``x``."""
    return _cosf(x) if abs(x) > COS_RANGE else _reduced(x, True)


@numba.njit(inline="always", error_model="numpy")
def sin_reduced_float32(x):
    """:func:`sin_float32` where :func:`sin_outside_float32` is false (vectorizable)."""
    return _reduced(x, False)


@numba.njit(inline="always", error_model="numpy")
def cos_reduced_float32(x):
    """:func:`cos_float32` where :func:`cos_outside_float32` is false (vectorizable)."""
    return _reduced(x, True)


@numba.njit(inline="always", error_model="numpy")
def sin_outside_float32(x):
    """Whether NumPy's float32 ``sin`` of ``x`` calls the C library."""
    return abs(x) > SIN_RANGE


@numba.njit(inline="always", error_model="numpy")
def cos_outside_float32(x):
    """Whether NumPy's float32 ``cos`` of ``x`` calls the C library."""
    return abs(x) > COS_RANGE


@numba.njit(inline="always", error_model="numpy")
def sin_float64(x):
    """NumPy's float64 ``sin`` (the C library's)."""
    return math.sin(x)


@numba.njit(inline="always", error_model="numpy")
def cos_float64(x):
    """NumPy's float64 ``cos`` (the C library's)."""
    return math.cos(x)


sin_reduced_float64, cos_reduced_float64 = sin_float64, cos_float64


@numba.njit(inline="always", error_model="numpy")
def sin_outside_float64(x):
    """Never: NumPy's float64 ``sin`` is the C library's everywhere."""
    return False


cos_outside_float64 = sin_outside_float64
