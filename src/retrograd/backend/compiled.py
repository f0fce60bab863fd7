"""The float32 GELU and its gradient as single vectorized loops, compiled with Numba (and a
linear layer's epilogues for captured steps: its bias with the GELU, or with the residual add).

NumPy's float32 ``exp`` runs element by element on this project's machines (about 4 ns an
element, twenty times a multiplication), and the NumPy formulation of the GELU makes eighteen
passes over each block besides; torch's GELU is one vectorized loop. These kernels are one loop
each, which LLVM vectorizes because nothing in it is a call: ``exp`` is Cephes' ``expf``
(argument reduction by ``ln 2``, a degree-5 polynomial, the power of two assembled in the
exponent bits), within 1.5 float32 ulp of the true value, written out here. The GELU is the
same formula as before (``backend/special.py``: Phi as the logistic of a fitted odd polynomial),
so the kernels stay within a few float32 epsilons of the float64 GELU.

The gradient is the derivative of that same formula, not of the exact GELU: with ``e =
exp(-v)`` and ``cdf = 1 / (1 + e)``, ``d/dx [x * cdf] = cdf + x v'(x) * e * cdf**2``, which
needs one ``exp`` (the exact ``Phi + x phi`` needs a second, ``phi``'s) and ``v'`` is one more
polynomial: within 5 float32 epsilons of the exact float64 derivative everywhere (the fit's own
slope error, 4e-7 at most in float64), and the gradient of what forward computes, so float32
finite differences of the GELU agree with it.

The polynomials (Horner's rule) and ``exp``'s argument reduction use fused multiply-adds
(:func:`_fma`, LLVM's ``fma``: one instruction, rounded once), measured about 20% faster
forward and backward than a multiplication and an addition each; explicit, so that the fused
kernels of a captured step (``capture/kernels.py``), which inline these helpers, give the same
bits (tests/test_transformer_ops.py holds the float32 GELU and its gradient within a few float32
epsilons of the float64 values).

Numba caches the machine code beside this file (or in its user-wide cache), so the compile
cost is paid once per machine; the module is imported on the first float32 GELU.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)

__all__ = [
    "EXP_HIGH",
    "EXP_LOW",
    "MINUS_LOGIT",
    "bias_gelu_float32",
    "bias_residual_rows",
    "expf",
    "expf_within",
    "gelu_backward_float32",
    "gelu_float32",
    "gelu_slope",
]

F = np.float32
# For GELU, Phi(x) as a logistic: Phi(x) = 1 / (1 + exp(-v(x))), v = logit(Phi) odd, fitted by
# x * V(x^2), V of degree 6 (iteratively reweighted least squares on [0, 10] in float64,
# weighted by how an error in v moves gelu: x * Phi * (1 - Phi)). Then gelu(x) = x / (1 +
# exp(-v(x))), within 6e-7 absolute of the exact gelu in float32 everywhere (torch's float32
# formula: 1.2e-6). V's leading coefficient is positive, so -v runs to -+inf monotonically as x
# grows in size: exp gives 0 or inf there, hence x or -0, the float32 limits.
MINUS_LOGIT = tuple(
    np.float32(-c)
    for c in (
        3.611400036420895e-09,  # x^13
        -2.669003323788109e-07,
        7.93834141678385e-06,
        -0.0001104812194482487,
        -6.6256955241271e-05,
        0.0726685629871631,
        1.5957684335247322,  # x^1
    )
)
_C = MINUS_LOGIT  # highest power first
#: ``-v'(x)`` as a polynomial in ``x**2`` (highest power first): ``v = x * V(x**2)`` gives
#: ``v' = V + 2 x**2 V'``, the coefficient of ``x**(2k)`` times ``2k + 1``
_SLOPE = tuple(np.float32(float(c) * (2 * (len(_C) - 1 - i) + 1)) for i, c in enumerate(_C))
_ROUNDER = F(12582912.0)  # 1.5 * 2**23
_jit = numba.njit(error_model="numpy", cache=True, nogil=True)


@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose bits are the int32 ``bits`` (a bit cast, vectorizable)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """``a * b + c`` of float32s rounded once (LLVM's ``fma``: one instruction, vectorizable)."""

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return types.float32(types.float32, types.float32, types.float32), codegen


#: ``expf``'s range: ``exp`` is 0 below, inf above (float32's smallest normal and largest value)
EXP_LOW, EXP_HIGH = F(-87.33654), F(88.72283)


@numba.njit(inline="always", error_model="numpy", cache=True)
def expf_within(x):
    """``exp`` of a float32 in ``[EXP_LOW, EXP_HIGH]`` (or NaN, kept): Cephes' ``expf``
    without its range checks."""
    # n = round(x / ln 2): adding 1.5 * 2**23 leaves no fraction bits, so the sum is rounded to
    # an integer (to even at ties), exactly recovered by the subtraction; cheaper than floor
    n = _fma(x, F(1.4426950408889634), _ROUNDER) - _ROUNDER
    r = _fma(n, F(2.12194440e-4), _fma(n, F(-0.693359375), x))
    p = _fma(F(1.9875691500e-4), r, F(1.3981999507e-3))
    p = _fma(p, r, F(8.3334519073e-3))
    p = _fma(p, r, F(4.1665795894e-2))
    p = _fma(p, r, F(1.6666665459e-1))
    p = _fma(p, r, F(5.0000001201e-1))
    power = _float32_from_bits(np.int32(n + F(127.0)) * np.int32(1 << 23))  # 2**n
    return (_fma(p, r * r, r) + F(1.0)) * power


@numba.njit(inline="always", error_model="numpy", cache=True)
def expf(x):
    """``exp`` of a float32 (Cephes' ``expf``): 0 below -87.34, inf above 88.72, NaN kept."""
    y = expf_within(min(max(x, EXP_LOW), EXP_HIGH))
    y = F(np.inf) if x > EXP_HIGH else y
    y = F(0.0) if x < EXP_LOW else y
    return x if x != x else y


@numba.njit(inline="always", error_model="numpy", cache=True)
def _horner(coefficients, square):
    """The polynomial ``coefficients`` (seven, highest power first) at ``square``."""
    p = _fma(square, coefficients[0], coefficients[1])
    p = _fma(p, square, coefficients[2])
    p = _fma(p, square, coefficients[3])
    p = _fma(p, square, coefficients[4])
    p = _fma(p, square, coefficients[5])
    return _fma(p, square, coefficients[6])


@numba.njit(inline="always", error_model="numpy", cache=True)
def _minus_logit(x, square):
    """``-v(x)``, the fitted logit of Phi (negated), by Horner's rule in ``x**2``."""
    return _horner(_C, square) * x


@numba.njit(inline="always", error_model="numpy", cache=True)
def gelu_slope(x):
    """The GELU's derivative at the float32 ``x``: ``cdf + x v'(x) * e * cdf**2``, ``e =
    exp(-v(x))``, ``cdf = 1 / (1 + e)`` (the derivative of :func:`gelu_float32`'s formula).
    Where ``e`` overflows, ``e * cdf**2`` is ``inf * 0``: its limit, 0, is taken. Where that
    density is 0, so is the second term, even where ``x v'(x)`` overflows (``|x|`` above
    1.8e19, where ``x * x`` is infinite): ``cdf``, or NaN at an infinite ``x`` (torch's)."""
    square = x * x
    tail = expf(_minus_logit(x, square))
    cdf = F(1.0) / (tail + F(1.0))
    density = tail * cdf * cdf if tail < F(np.inf) else F(0.0)  # sigma'(v) = e / (1 + e)**2
    if density == F(0.0):
        return cdf + x * F(0.0)
    return _fma(_horner(_SLOPE, square) * x, -density, cdf)


@_jit
def gelu_float32(x, out):
    """``out = x / (1 + exp(-v(x)))`` over flat contiguous float32 arrays."""
    for i in range(x.size):
        v = x[i]
        out[i] = v / (expf(_minus_logit(v, v * v)) + F(1.0))


@_jit
def gelu_backward_float32(grad, x, out):
    """``out = grad * gelu'(x)`` (:func:`gelu_slope`) over flat contiguous float32 arrays."""
    for i in range(x.size):
        out[i] = gelu_slope(x[i]) * grad[i]


@_jit
def bias_gelu_float32(out, bias, y):
    """In place ``out += bias`` (a row ``[D]`` added to each row of the C-contiguous ``[N,
    D]`` ``out``, a linear layer's product) and ``y = gelu(out)`` as :func:`gelu_float32`,
    in one pass: a captured step's linear layer followed by its GELU (``capture/linear.py``),
    the bits of the two calls."""
    rows, width = out.shape
    for i in range(rows):
        row, target = out[i], y[i]
        for j in range(width):
            v = row[j] + bias[j]
            row[j] = v
            target[j] = v / (expf(_minus_logit(v, v * v)) + F(1.0))


@_jit
def bias_residual_rows(out, bias, residual):
    """In place ``out = residual + (out + bias)`` over C-contiguous ``[N, D]`` rows (``bias``
    ``[D]``): a linear layer's product, its bias and the residual stream it is added to, in
    one pass (``capture/linear.py``), the bits of the bias addition and the ``add``."""
    rows, width = out.shape
    for i in range(rows):
        row, base = out[i], residual[i]
        for j in range(width):
            row[j] = base[j] + (row[j] + bias[j])
