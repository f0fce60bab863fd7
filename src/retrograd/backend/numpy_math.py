"""The NumPy backend's kernels of :mod:`.protocol_math`: SciPy's special functions (Cephes,
float32 evaluated by SciPy's own float32 loops or in float64 and rounded) and NumPy's ufuncs."""

from __future__ import annotations

import numpy as np
import scipy.special

from .protocol import singular_matrix
from .protocol_math import not_positive_definite

__all__ = ["NumpyMathKernels"]


def _like(out, x):
    """``out`` in ``x``'s dtype (SciPy computes some float32 inputs in float64)."""
    return np.asarray(out).astype(np.asarray(x).dtype, copy=False)


class NumpyMathKernels:
    """The special functions and bit operations on NumPy arrays."""

    def lgamma(self, x):
        # SciPy's gammaln(-inf) is -inf; log|Gamma| grows without bound there (torch: +inf)
        return _like(np.where(np.isneginf(x), np.inf, scipy.special.gammaln(x)), x)

    def digamma(self, x):
        return _like(scipy.special.psi(x), x)

    def polygamma(self, x, n):
        if n == 0:
            return self.digamma(x)
        return _like(scipy.special.polygamma(n, x), x)

    def i0(self, x):
        return _like(scipy.special.i0(x), x)

    def i1(self, x):
        return _like(scipy.special.i1(x), x)

    def erfc(self, x):
        return _like(scipy.special.erfc(x), x)

    fmod = staticmethod(np.fmod)
    nextafter = staticmethod(np.nextafter)
    gcd = staticmethod(np.gcd)
    lcm = staticmethod(np.lcm)
    bitwise_and = staticmethod(np.bitwise_and)
    bitwise_or = staticmethod(np.bitwise_or)
    bitwise_xor = staticmethod(np.bitwise_xor)
    bitwise_not = staticmethod(np.invert)
    signbit = staticmethod(np.signbit)

    def bitwise_left_shift(self, x, y):
        out = np.left_shift(x, np.clip(y, 0, 63))
        return np.where((y >= 64) | (y < 0), 0, out)

    def bitwise_right_shift(self, x, y):
        return np.right_shift(x, np.clip(y, 0, 63))

    def cholesky(self, x):
        try:
            return np.linalg.cholesky(x)
        except np.linalg.LinAlgError:
            raise not_positive_definite(x.shape) from None

    def solve(self, a, b):
        try:
            return np.linalg.solve(a, b)
        except np.linalg.LinAlgError:
            raise singular_matrix("solve", a.shape) from None

    def slogdet(self, x):
        sign, logabsdet = np.linalg.slogdet(x)
        return _like(logabsdet, x), _like(sign, x)
