"""The NumPy backend's kernels of :mod:`.protocol_math`: SciPy's special functions (Cephes,
float32 evaluated by SciPy's own float32 loops or in float64 and rounded) and NumPy's ufuncs."""

from __future__ import annotations

import numpy as np
import scipy.linalg
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

    def linalg_eigh(self, x, upper):
        values, vectors = np.linalg.eigh(x, UPLO="U" if upper else "L")
        return np.concatenate([vectors, values[..., None]], axis=-1)

    def linalg_svd(self, x, full_matrices):
        u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
        return _flat_cat([u, s, vh], x.shape[:-2])

    def linalg_qr(self, x, mode):
        batch, (m, n) = x.shape[:-2], x.shape[-2:]
        if mode == "r":
            r = np.linalg.qr(x, mode="r") if m and n else np.zeros(batch + (min(m, n), n), x.dtype)
            return _flat_cat([r], batch)
        if not (m and n):  # LAPACK has nothing to factor; Q is the identity, as torch's
            k = m if mode == "complete" else min(m, n)
            q = np.broadcast_to(np.eye(m, k, dtype=x.dtype), batch + (m, k))
            return _flat_cat([q, np.zeros(batch + (k, n), x.dtype)], batch)
        q, r = np.linalg.qr(x, mode=mode)
        return _flat_cat([q, r], batch)

    def matrix_exp(self, x):
        if x.ndim == 2 or x.size == 0:
            return _like(scipy.linalg.expm(x) if x.size else x.copy(), x)
        flat = x.reshape((-1,) + x.shape[-2:])
        return _like(np.stack([scipy.linalg.expm(a) for a in flat]).reshape(x.shape), x)


def _flat_cat(parts, batch):
    """``parts`` with their matrix dims flattened, side by side along one last dim."""
    return np.concatenate([p.reshape(batch + (-1,)) for p in parts], axis=-1)
