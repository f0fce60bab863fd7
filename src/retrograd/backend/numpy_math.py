"""The NumPy backend's kernels of :mod:`.protocol_math`: SciPy's special functions (Cephes,
float32 evaluated by SciPy's own float32 loops or in float64 and rounded) and NumPy's ufuncs.

The orthogonal polynomials are SciPy's ``eval_*`` at integer degrees (recurrences, as torch's
kernels); Chebyshev's third and fourth kinds, which SciPy lacks, are ``U_n -+ U_{n-1}``
(``V_n(cos t) = cos((n + 1/2) t) / cos(t / 2)`` is that difference)."""

from __future__ import annotations

import math

import numpy as np

from .lazy import scipy_linalg, scipy_special
from .protocol import COMPLEX_SEEN, singular_matrix
from .protocol_math import not_positive_definite

__all__ = ["NumpyMathKernels"]


def _scipy(name):
    """SciPy's special function ``name``, looked up at its call (SciPy is imported then)."""
    return lambda *args: getattr(scipy_special, name)(*args)


def _spherical_j0(x):
    return scipy_special.spherical_jn(0, x)


def _airy_ai(x):
    return scipy_special.airy(x)[0]


#: torch.special's Bessel-type names and SciPy's functions
_BESSEL = {
    "airy_ai": _airy_ai,
    "bessel_j0": _scipy("j0"),
    "bessel_j1": _scipy("j1"),
    "bessel_y0": _scipy("y0"),
    "bessel_y1": _scipy("y1"),
    "modified_bessel_i0": _scipy("i0"),
    "modified_bessel_i1": _scipy("i1"),
    "modified_bessel_k0": _scipy("k0"),
    "modified_bessel_k1": _scipy("k1"),
    "scaled_modified_bessel_k0": _scipy("k0e"),
    "scaled_modified_bessel_k1": _scipy("k1e"),
    "spherical_bessel_j0": _spherical_j0,
}


def _chebyshev_v(n, x):
    return scipy_special.eval_chebyu(n, x) - scipy_special.eval_chebyu(n - 1, x)


def _chebyshev_w(n, x):
    return scipy_special.eval_chebyu(n, x) + scipy_special.eval_chebyu(n - 1, x)


def _shifted(polynomial):
    return lambda n, x: polynomial(n, 2.0 * x - 1.0)


#: torch.special's polynomial names and ``p(n, x)`` at integer ``n >= 0``
_POLYNOMIALS = {
    "chebyshev_polynomial_t": _scipy("eval_chebyt"),
    "chebyshev_polynomial_u": _scipy("eval_chebyu"),
    "chebyshev_polynomial_v": _chebyshev_v,
    "chebyshev_polynomial_w": _chebyshev_w,
    "shifted_chebyshev_polynomial_t": _shifted(_scipy("eval_chebyt")),
    "shifted_chebyshev_polynomial_u": _shifted(_scipy("eval_chebyu")),
    "shifted_chebyshev_polynomial_v": _shifted(_chebyshev_v),
    "shifted_chebyshev_polynomial_w": _shifted(_chebyshev_w),
    "hermite_polynomial_h": _scipy("eval_hermite"),
    "hermite_polynomial_he": _scipy("eval_hermitenorm"),
    "laguerre_polynomial_l": _scipy("eval_laguerre"),
    "legendre_polynomial_p": _scipy("eval_legendre"),
}


def _like(out, x):
    """``out`` in ``x``'s dtype (SciPy computes some float32 inputs in float64)."""
    return np.asarray(out).astype(np.asarray(x).dtype, copy=False)


class NumpyMathKernels:
    """The special functions and bit operations on NumPy arrays."""

    def lgamma(self, x):
        # SciPy's gammaln(-inf) is -inf; log|Gamma| grows without bound there (torch: +inf).
        # At float64's subnormals SciPy's is inf: there lgamma(x) is -log|x| to the last bit
        out = np.where(np.isneginf(x), np.inf, scipy_special.gammaln(x))
        with np.errstate(divide="ignore"):
            subnormal = (np.abs(x) < np.finfo(np.float64).tiny) & (x != 0)
            out = np.where(subnormal, -np.log(np.abs(x)), out)
        return _like(out, x)

    def digamma(self, x):
        return _like(scipy_special.psi(x), x)

    def polygamma(self, x, n):
        if n == 0:
            return self.digamma(x)
        out = _like(scipy_special.polygamma(n, x), x)
        if n > 1:  # torch's is (-1)^(n+1) n! zeta(n + 1, x): NaN at +inf, as its zeta
            return np.where(np.isposinf(x), np.asarray(np.nan, out.dtype), out)
        if n == 1:
            # torch's trigamma reflects x < 1/2 to 1 - x, adding pi^2 / sin^2(pi x) in x's
            # precision: at the poles (x = 0, -1, ...) that is a huge finite value (sin(pi x)
            # is not exactly 0), NaN at -inf; SciPy's is inf at both
            x = np.asarray(x)
            edge = np.isneginf(x) | ((x < 0) & (x == np.floor(x)))
            if edge.any():
                with np.errstate(invalid="ignore", divide="ignore"):
                    sine = np.sin(x.dtype.type(np.pi) * x)
                    reflected = np.pi**2 / (sine * sine) + scipy_special.polygamma(1, 1.0 - x)
                out = np.where(edge, reflected.astype(out.dtype), out)
        return out

    def i0(self, x):
        return _like(scipy_special.i0(x), x)

    def i1(self, x):
        return _like(scipy_special.i1(x), x)

    def erfc(self, x):
        return _like(scipy_special.erfc(x), x)

    def i0e(self, x):
        return _like(scipy_special.i0e(x), x)

    def i1e(self, x):
        return _like(scipy_special.i1e(x), x)

    def erfcx(self, x):
        return _like(scipy_special.erfcx(x), x)

    def erfinv(self, x):
        # SciPy's in float64 (a float32 rounded once: torch's float32 erfinv is the exact
        # value rounded, and so is this, where SciPy's own float32 loop is an ulp off in 40%)
        wide = np.asarray(x, np.float64)
        return _like(np.copysign(scipy_special.erfinv(wide), wide), x)  # (-0 kept, as torch's)

    def ndtr(self, x):
        return _like(scipy_special.ndtr(x), x)

    def log_ndtr(self, x):
        return _like(scipy_special.log_ndtr(x), x)

    def ndtri(self, x):
        return _like(scipy_special.ndtri(x), x)

    def entr(self, x):
        return _like(scipy_special.entr(x), x)

    def bessel_function(self, x, kind):
        return _like(_BESSEL[kind](x), x)

    def xlog1py(self, x, y):
        return _like(scipy_special.xlog1py(x, y), x)

    def xlogy(self, x, y):
        return _like(scipy_special.xlogy(x, y), x)

    def zeta(self, x, q):
        # torch's Hurwitz zeta is NaN at q = +inf (SciPy's: its limit, 0), save at x = 1,
        # where torch's kernel answers inf before it looks at q
        undefined = np.isposinf(q) & (x != 1)
        return _like(np.where(undefined, np.nan, scipy_special.zeta(x, q)), x)

    def gammainc(self, a, x):
        return _like(scipy_special.gammainc(a, x), x)

    def gammaincc(self, a, x):
        return _like(scipy_special.gammaincc(a, x), x)

    def orthogonal_polynomial(self, x, n, kind):
        x, n = np.broadcast_arrays(x, n)
        finite = np.isfinite(n)
        # torch casts the degree to int64 (truncation) and gives 0 for a negative one
        degree = np.trunc(np.where(finite, n, 0.0)).astype(np.int64)
        values = _POLYNOMIALS[kind](np.maximum(degree, 0), x.astype(np.float64))
        out = np.where(degree < 0, 0.0, np.where(finite, values, np.nan))
        return _like(out, x)

    fmod = staticmethod(np.fmod)

    @staticmethod
    def floor_divide(x, y):
        with np.errstate(over="ignore", divide="ignore"):  # (-2**63 // -1 wraps, as torch's)
            return np.floor_divide(x, y)

    nextafter = staticmethod(np.nextafter)
    gcd = staticmethod(np.gcd)

    @staticmethod
    def lcm(x, y):
        # torch's kernel: |x / gcd * y| in the operands' dtype, a product past its range
        # wrapping before the absolute value is taken (NumPy's lcm takes |x| and |y| first,
        # so a product that wraps comes out negative where torch's is positive)
        divisor = np.gcd(x, y)
        product = (x // np.where(divisor == 0, 1, divisor)) * y
        return np.where(divisor == 0, 0, np.abs(product)).astype(product.dtype, copy=False)

    bitwise_and = staticmethod(np.bitwise_and)
    bitwise_or = staticmethod(np.bitwise_or)
    bitwise_xor = staticmethod(np.bitwise_xor)
    bitwise_not = staticmethod(np.invert)
    signbit = staticmethod(np.signbit)

    @staticmethod
    def frexp_exponent(x):
        return np.frexp(x)[1].astype(np.int64)

    def bitwise_left_shift(self, x, y):
        out = np.left_shift(x, np.clip(y, 0, 63))
        return np.where((y >= 64) | (y < 0), 0, out)

    def bitwise_right_shift(self, x, y):
        # (a negative amount shifts as one of 64 or more, as torch's kernel: the sign)
        return np.right_shift(x, np.where(np.less(y, 0), 63, np.minimum(y, 63)))

    def cholesky(self, x):
        try:
            return np.linalg.cholesky(x)
        except np.linalg.LinAlgError:
            raise not_positive_definite(x.shape, *_first_failed_minor(x)) from None

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

    def linalg_eig(self, x):
        COMPLEX_SEEN[0] = True
        complex_dtype = np.complex64 if x.dtype in (np.float32, np.complex64) else np.complex128
        # NumPy's geev is torch's: the same vectors; a real x with real eigenvalues gives real
        # arrays, made complex as torch's
        values, vectors = np.linalg.eig(x)
        return np.concatenate([vectors, values[..., None]], axis=-1).astype(complex_dtype)

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
            return _like(scipy_linalg.expm(x) if x.size else x.copy(), x)
        flat = x.reshape((-1,) + x.shape[-2:])
        return _like(np.stack([scipy_linalg.expm(a) for a in flat]).reshape(x.shape), x)


def _flat_cat(parts, batch):
    """``parts`` with their matrix dims flattened, side by side along one last dim."""
    # (each part's flat size spelled out: a -1 cannot be inferred from an empty batch)
    return np.concatenate(
        [p.reshape(batch + (math.prod(p.shape[len(batch) :]),)) for p in parts], axis=-1
    )


def _first_failed_minor(x: np.ndarray) -> tuple[int | None, int | None]:
    """The flat batch index of the first matrix of ``x`` with no Cholesky factor and the order
    of its first leading minor that is not positive-definite (a bisection: once a minor
    fails, every larger one does)."""
    n = x.shape[-1]
    for index, matrix in enumerate(x.reshape(-1, n, n)):
        if _has_cholesky(matrix):
            continue
        low, high = 1, n  # minors of order < low factor; the minor of order high does not
        while low < high:
            middle = (low + high) // 2
            if _has_cholesky(matrix[:middle, :middle]):
                low = middle + 1
            else:
                high = middle
        return index, high
    return None, None


def _has_cholesky(matrix: np.ndarray) -> bool:
    try:
        np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        return False
    return True
