"""The special functions, integer bit operations and the remaining elementwise kernels of the
backend protocol: the log-gamma family (``lgamma``, ``digamma``, ``polygamma``), the modified
Bessel functions ``i0``/``i1``, ``erfc``, the rest of ``torch.special`` (scaled Bessel and
error functions, the normal CDF and quantile, zeta, the incomplete gamma functions, Bessel
functions and orthogonal polynomials by name), C's ``fmod`` and ``nextafter``, ``gcd``/``lcm``, the
bitwise operations of integer and bool tensors, ``signbit``, ``cholesky``, ``solve``,
``slogdet`` and the decompositions of ``rg.linalg`` (``linalg_eigh``, ``linalg_svd``,
``linalg_qr``, ``matrix_exp``).

A decomposition has several outputs and an op of the autodiff table has one, so each returns
its factors *packed* into one array (see each method), which the tensor layer slices apart and
whose gradient the op's backward rule slices the same way.

Each is one library call on every backend (SciPy's special functions and NumPy's ufuncs;
torch's operators), exact where a composition of the other primitives would not be (``1 -
erf(x)`` loses every digit of ``erfc`` for large ``x``; ``fmod`` from ``remainder`` rounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import LinAlgError, shape_text

__all__ = ["BESSEL_FUNCTIONS", "POLYNOMIALS", "MathProtocol", "not_positive_definite"]

#: torch.special's Bessel-type functions of one argument, one kernel (``bessel_function``)
BESSEL_FUNCTIONS = (
    "airy_ai",
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "modified_bessel_i0",
    "modified_bessel_i1",
    "modified_bessel_k0",
    "modified_bessel_k1",
    "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1",
    "spherical_bessel_j0",
)
#: torch.special's orthogonal polynomials ``p(x, n)``, one kernel (``orthogonal_polynomial``)
POLYNOMIALS = (
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
)


def not_positive_definite(
    shape: Sequence[int], batch_index: int | None = None, order: int | None = None
) -> LinAlgError:
    """The error for a matrix with no Cholesky factor (torch's ``LinAlgError``), naming, as
    torch's does, the first failing matrix of a batch (its flat index) and the order of its
    leading minor that is not positive-definite, where the backend knows them."""
    where = "" if batch_index is None or len(shape) <= 2 else f" (batch element {batch_index})"
    minor = "" if order is None else f" (its leading minor of order {order} is not)"
    return LinAlgError(
        f"cholesky: the input matrix of shape {shape_text(shape)}{where} is not "
        f"positive-definite{minor}"
    )


class MathProtocol:
    """The kernels of :mod:`retrograd.backend.protocol_math` (a mixin of
    :class:`~retrograd.backend.protocol.Backend`). Float kernels keep their input's dtype;
    the bitwise ones take int64 or bool operands of one dtype, broadcasting."""

    def lgamma(self, x: Any) -> Any:
        """``log |Gamma(x)|``."""
        raise NotImplementedError

    def digamma(self, x: Any) -> Any:
        """``d/dx log Gamma(x)`` (``-inf`` at ``+0``, as torch's)."""
        raise NotImplementedError

    def polygamma(self, x: Any, n: int) -> Any:
        """The ``n``-th derivative of ``digamma`` (``n >= 0``)."""
        raise NotImplementedError

    def i0(self, x: Any) -> Any:
        """The modified Bessel function of the first kind, order 0."""
        raise NotImplementedError

    def i1(self, x: Any) -> Any:
        """The modified Bessel function of the first kind, order 1 (``i0``'s derivative)."""
        raise NotImplementedError

    def erfc(self, x: Any) -> Any:
        """``1 - erf(x)``, accurate where ``erf(x)`` is near 1."""
        raise NotImplementedError

    # -- torch.special's further functions (retrograd.special): float in, same dtype out ------
    def i0e(self, x: Any) -> Any:
        """``exp(-|x|) i0(x)``, the exponentially scaled modified Bessel function of order 0."""
        raise NotImplementedError

    def i1e(self, x: Any) -> Any:
        """``exp(-|x|) i1(x)``."""
        raise NotImplementedError

    def erfcx(self, x: Any) -> Any:
        """The scaled complementary error function ``exp(x^2) erfc(x)``, without overflow."""
        raise NotImplementedError

    def ndtr(self, x: Any) -> Any:
        """The standard normal CDF ``Phi(x)``."""
        raise NotImplementedError

    def log_ndtr(self, x: Any) -> Any:
        """``log Phi(x)``, accurate in the lower tail (where ``Phi`` underflows)."""
        raise NotImplementedError

    def ndtri(self, x: Any) -> Any:
        """``Phi^-1(x)``, the standard normal quantile (``-inf``/``inf`` at 0/1, NaN outside)."""
        raise NotImplementedError

    def entr(self, x: Any) -> Any:
        """``-x log x`` (0 at 0, ``-inf`` for negative ``x``)."""
        raise NotImplementedError

    def bessel_function(self, x: Any, kind: str) -> Any:
        """The Bessel function ``kind`` of ``x``: one of :data:`BESSEL_FUNCTIONS` (torch's
        ``torch.special.<kind>``: ``bessel_j0`` ... ``spherical_bessel_j0``, ``airy_ai``)."""
        raise NotImplementedError

    def xlog1py(self, x: Any, y: Any) -> Any:
        """``x * log1p(y)``, 0 where ``x`` is 0 (unless ``y`` is NaN); broadcasting."""
        raise NotImplementedError

    def xlogy(self, x: Any, y: Any) -> Any:
        """``x * log(y)``, 0 where ``x`` is 0 (unless ``y`` is NaN); broadcasting."""
        raise NotImplementedError

    def zeta(self, x: Any, q: Any) -> Any:
        """The Hurwitz zeta function ``sum_k (k + q)^-x``; broadcasting."""
        raise NotImplementedError

    def gammainc(self, a: Any, x: Any) -> Any:
        """The regularized lower incomplete gamma function ``P(a, x)``; broadcasting."""
        raise NotImplementedError

    def gammaincc(self, a: Any, x: Any) -> Any:
        """The regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)``."""
        raise NotImplementedError

    def orthogonal_polynomial(self, x: Any, n: Any, kind: str) -> Any:
        """The polynomial ``kind`` (one of :data:`POLYNOMIALS`, torch's names) of degree ``n``
        at ``x`` (one float dtype, broadcasting), as torch computes it: ``n`` truncated to an
        integer, 0 where it is negative."""
        raise NotImplementedError

    def fmod(self, x: Any, y: Any) -> Any:
        """C's ``fmod``: the remainder with the sign of the dividend (exact)."""
        raise NotImplementedError

    def floor_divide(self, x: Any, y: Any) -> Any:
        """``x // y`` of int64 tensors (broadcasting), rounded down, exact at every magnitude
        and wrapping as torch's integer kernel does (``-2**63 // -1`` is ``-2**63``); a zero
        divisor is refused above the backend."""
        raise NotImplementedError

    def nextafter(self, x: Any, y: Any) -> Any:
        """The next representable value after ``x`` towards ``y``."""
        raise NotImplementedError

    def gcd(self, x: Any, y: Any) -> Any:
        """The greatest common divisor of int64 tensors (non-negative)."""
        raise NotImplementedError

    def lcm(self, x: Any, y: Any) -> Any:
        """The least common multiple of int64 tensors (non-negative)."""
        raise NotImplementedError

    def bitwise_and(self, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def bitwise_or(self, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def bitwise_xor(self, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def bitwise_not(self, x: Any) -> Any:
        raise NotImplementedError

    def bitwise_left_shift(self, x: Any, y: Any) -> Any:
        """``x << y`` of int64 tensors (0 for shifts of 64 bits or more or negative ones, as
        torch's)."""
        raise NotImplementedError

    def bitwise_right_shift(self, x: Any, y: Any) -> Any:
        """Arithmetic ``x >> y`` of int64 tensors (the sign for shifts of 64 or more or negative
        ones, as torch's)."""
        raise NotImplementedError

    def signbit(self, x: Any) -> Any:
        """Whether the sign bit is set (bool; true for ``-0.0``)."""
        raise NotImplementedError

    def frexp_exponent(self, x: Any) -> Any:
        """The int64 ``e`` of each float element, ``x = m * 2**e`` with ``0.5 <= |m| < 1``
        (0 for zeros, infinities and NaN), as C's ``frexp``."""
        raise NotImplementedError

    def cholesky(self, x: Any) -> Any:
        """The lower Cholesky factor ``L`` (``L @ L^T = x``) of each symmetric positive-definite
        matrix of ``x``; another raises ``rg.errors.LinAlgError``."""
        raise NotImplementedError

    def solve(self, a: Any, b: Any) -> Any:
        """``X`` with ``a @ X = b`` for each square ``a`` ``[..., n, n]`` and ``b``
        ``[..., n, k]`` (one batch shape); a singular ``a`` raises
        ``rg.errors.LinAlgError``."""
        raise NotImplementedError

    def slogdet(self, x: Any) -> tuple[Any, Any]:
        """``(log |det A|, sign(det A))`` of each matrix of ``x`` ``[..., n, n]`` (``-inf``
        and 0 for a singular one)."""
        raise NotImplementedError

    def linalg_eigh(self, x: Any, upper: bool) -> Any:
        """The eigendecomposition of each symmetric matrix of ``x`` ``[..., n, n]`` (reading
        only its upper triangle when ``upper``, else the lower), packed ``[..., n, n + 1]``:
        the eigenvectors in the first ``n`` columns, the eigenvalues (ascending) in the last."""
        raise NotImplementedError

    def linalg_eig(self, x: Any) -> Any:
        """The eigendecomposition of each square matrix of ``x`` ``[..., n, n]`` (LAPACK's
        ``geev``, as torch's: unit eigenvectors whose largest component is real), packed
        ``[..., n, n + 1]`` in the complex dtype of ``x``'s: the eigenvectors in the first
        ``n`` columns, the eigenvalues in the last (complex for a real ``x`` too)."""
        raise NotImplementedError

    def linalg_svd(self, x: Any, full_matrices: bool) -> Any:
        """The SVD ``U diag(S) Vh`` of each matrix of ``x`` ``[..., m, n]``, packed
        ``[..., m*p + k + q*n]``: ``U`` ``[m, p]``, ``S`` (descending) ``[k]`` and ``Vh``
        ``[q, n]`` flattened, in that order; ``k = min(m, n)``, ``p = m`` and ``q = n`` when
        ``full_matrices``, else ``p = q = k``."""
        raise NotImplementedError

    def linalg_qr(self, x: Any, mode: str) -> Any:
        """The QR decomposition of each matrix of ``x`` ``[..., m, n]`` (Householder, as
        LAPACK's ``geqrf``), packed ``[..., m*p + r*n]``: ``Q`` ``[m, p]`` then ``R`` ``[r,
        n]`` flattened; ``mode`` ``"reduced"``: ``p = r = min(m, n)``, ``"complete"``: ``p =
        r = m``, ``"r"``: no ``Q`` (``p = 0``), ``r = min(m, n)``."""
        raise NotImplementedError

    def matrix_exp(self, x: Any) -> Any:
        """The exponential of each square matrix of ``x`` ``[..., n, n]``."""
        raise NotImplementedError
