"""Special functions NumPy lacks, vectorized.

``erf`` and ``erfc`` evaluate W. J. Cody's rational Chebyshev approximations ("Rational
Chebyshev approximations for the error function", Math. Comp. 1969), which are accurate to about
18 significant digits, in float64; float32 inputs are computed in float64 and rounded once.
"""

from __future__ import annotations

import numpy as np

__all__ = ["erf", "erfc"]

# |x| <= 0.46875: erf(x) = x * P(x^2) / Q(x^2)
_A = (
    3.16112374387056560e00,
    1.13864154151050156e02,
    3.77485237685302021e02,
    3.20937758913846947e03,
    1.85777706184603153e-1,
)
_B = (
    2.36012909523441209e01,
    2.44024637934444173e02,
    1.28261652607737228e03,
    2.84423683343917062e03,
)
# 0.46875 < |x| <= 4: erfc(x) = exp(-x^2) * P(x) / Q(x)
_C = (
    5.64188496988670089e-1,
    8.88314979438837594e00,
    6.61191906371416295e01,
    2.98635138197400131e02,
    8.81952221241769090e02,
    1.71204761263407058e03,
    2.05107837782607147e03,
    1.23033935479799725e03,
    2.15311535474403846e-8,
)
_D = (
    1.57449261107098347e01,
    1.17693950891312499e02,
    5.37181101862009858e02,
    1.62138957456669019e03,
    3.29079923573345963e03,
    4.36261909014324716e03,
    3.43936767414372164e03,
    1.23033935480374942e03,
)
# |x| > 4: erfc(x) = exp(-x^2)/x * (1/sqrt(pi) - P(1/x^2)/(x^2 Q(1/x^2)))
_P = (
    3.05326634961232344e-1,
    3.60344899949804439e-1,
    1.25781726111229246e-1,
    1.60837851487422766e-2,
    6.58749161529837803e-4,
    1.63153871373020978e-2,
)
_Q = (
    2.56852019228982242e00,
    1.87295284992346047e00,
    5.27905102951428412e-1,
    6.05183413124413191e-2,
    2.33520497626869185e-3,
)
_INV_SQRT_PI = 0.56418958354775628695
_SMALL, _MIDDLE = 0.46875, 4.0


def _erf_small(x):
    ysq = x * x
    num = _A[4] * ysq
    den = ysq
    for i in range(3):
        num = (num + _A[i]) * ysq
        den = (den + _B[i]) * ysq
    return x * (num + _A[3]) / (den + _B[3])


def _exp_minus_square(y):
    """exp(-y*y) without the rounding error of squaring y: split y = high + low."""
    high = np.trunc(y * 16.0) / 16.0
    return np.exp(-high * high) * np.exp(-(y - high) * (y + high))


def _erfc_middle(y):
    num = _C[8] * y
    den = y
    for i in range(7):
        num = (num + _C[i]) * y
        den = (den + _D[i]) * y
    return _exp_minus_square(y) * (num + _C[7]) / (den + _D[7])


def _erfc_large(y):
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        ysq = 1.0 / (y * y)
        num = _P[5] * ysq
        den = ysq
        for i in range(4):
            num = (num + _P[i]) * ysq
            den = (den + _Q[i]) * ysq
        tail = ysq * (num + _P[4]) / (den + _Q[4])
        value = _exp_minus_square(y) * (_INV_SQRT_PI - tail) / y
    return np.where(np.isinf(y), 0.0, value)


def _erfc_positive(y):
    """erfc(y) for y >= 0 outside the small interval (float64 array)."""
    out = np.empty_like(y)
    middle = y <= _MIDDLE
    out[middle] = _erfc_middle(y[middle])
    out[~middle] = _erfc_large(y[~middle])
    return out


def _as_float64(x):
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype != np.float64 else x


def _evaluate(x, small_branch, large_branch):
    """Shared driver: ``small_branch(x, erf_small)`` for ``|x| <= 0.46875`` and
    ``large_branch(x, erfc(|x|))`` elsewhere, in float64, NaN preserved, cast back."""
    x = np.asarray(x)
    dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    x64 = _as_float64(x)
    y = np.abs(x64)
    out = np.empty_like(x64)
    small = y <= _SMALL
    out[small] = small_branch(_erf_small(x64[small]))
    rest = ~small
    out[rest] = large_branch(x64[rest], _erfc_positive(y[rest]))
    nan = np.isnan(x64)
    if nan.any():
        out[nan] = np.nan
    return out.astype(dtype, copy=False)


def erf(x):
    """The error function, elementwise, in the dtype of ``x`` (float64 for ints).

    >>> float(erf(np.array(0.5)))
    0.5204998778130465
    """
    return _evaluate(x, lambda value: value, lambda x, tail: np.copysign((0.5 - tail) + 0.5, x))


def erfc(x):
    """The complementary error function ``1 - erf(x)``, accurate where erf(x) is near 1."""
    return _evaluate(
        x, lambda value: 1.0 - value, lambda x, tail: np.where(x < 0, 2.0 - tail, tail)
    )
