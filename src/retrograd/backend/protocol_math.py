"""The special functions, integer bit operations and the remaining elementwise kernels of the
backend protocol: the log-gamma family (``lgamma``, ``digamma``, ``polygamma``), the modified
Bessel functions ``i0``/``i1``, ``erfc``, C's ``fmod`` and ``nextafter``, ``gcd``/``lcm``, the
bitwise operations of integer and bool tensors, ``signbit``, ``cholesky``, ``solve`` and
``slogdet``.

Each is one library call on every backend (SciPy's special functions and NumPy's ufuncs;
torch's operators), exact where a composition of the other primitives would not be (``1 -
erf(x)`` loses every digit of ``erfc`` for large ``x``; ``fmod`` from ``remainder`` rounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InvalidArgumentError, shape_text

__all__ = ["MathProtocol", "not_positive_definite"]


def not_positive_definite(shape: Sequence[int]) -> InvalidArgumentError:
    """The error for a matrix with no Cholesky factor (torch raises its ``LinAlgError``)."""
    return InvalidArgumentError(
        f"cholesky: the input matrix of shape {shape_text(shape)} is not positive-definite"
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

    def fmod(self, x: Any, y: Any) -> Any:
        """C's ``fmod``: the remainder with the sign of the dividend (exact)."""
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
        """``x << y`` of int64 tensors (0 for shifts of 64 bits or more, as torch's)."""
        raise NotImplementedError

    def bitwise_right_shift(self, x: Any, y: Any) -> Any:
        """Arithmetic ``x >> y`` of int64 tensors (the sign for shifts of 64 or more)."""
        raise NotImplementedError

    def signbit(self, x: Any) -> Any:
        """Whether the sign bit is set (bool; true for ``-0.0``)."""
        raise NotImplementedError

    def cholesky(self, x: Any) -> Any:
        """The lower Cholesky factor ``L`` (``L @ L^T = x``) of each symmetric positive-definite
        matrix of ``x``; another raises ``rg.InvalidArgumentError``."""
        raise NotImplementedError

    def solve(self, a: Any, b: Any) -> Any:
        """``X`` with ``a @ X = b`` for each square ``a`` ``[..., n, n]`` and ``b``
        ``[..., n, k]`` (one batch shape); a singular ``a`` raises
        ``rg.InvalidArgumentError``."""
        raise NotImplementedError

    def slogdet(self, x: Any) -> tuple[Any, Any]:
        """``(log |det A|, sign(det A))`` of each matrix of ``x`` ``[..., n, n]`` (``-inf``
        and 0 for a singular one)."""
        raise NotImplementedError
