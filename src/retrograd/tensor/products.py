"""torch's fused products and matrix functions as tensor methods: ``addmm``, ``baddbmm``,
``addbmm``, ``addmv``, ``addr``, ``kron``, ``vdot``, and ``inverse``, ``pinverse``,
``matrix_power``, ``det``, ``logdet``, ``slogdet``, and the solves by a factor:
``cholesky_solve``, ``cholesky_inverse``, ``triangular_solve``.

:class:`ProductsMixin` needs one primitive from the class it is mixed into: ``_apply(op,
inputs, params=())`` (:func:`retrograd.tensor._dispatch.apply`), for the ``inverse``,
``pinv`` and ``slogdet`` kernels; the rest compose the matrix product and elementwise ops of
the other mixins, so their gradients are the parts'. ``beta * input + alpha * (a @ b)`` is
computed as torch defines it: ``beta = 0`` ignores ``input`` (its NaNs do not propagate), and
for integer tensors ``alpha`` and ``beta`` must be integers.

>>> import retrograd as rg
>>> rg.ones(2, 2).addmm(rg.eye(2), rg.full((2, 2), 3.0), alpha=2).tolist()
[[7.0, 7.0], [7.0, 7.0]]
"""

from __future__ import annotations

import math
import warnings
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import DTypeError, InvalidArgumentError, ShapeError, shape_text
from ._dispatch import FLOAT_DTYPES, lift, wrap
from .autocasting import autocast_op
from .compositions import number_scale, scaled
from .functions import undefined_derivative
from .shape import cat

__all__ = [
    "ProductsMixin",
    "SlogdetResult",
    "TriangularSolveResult",
    "lu_factorize",
    "lu_info",
]

#: torch's ``torch.return_types.slogdet``
SlogdetResult = namedtuple("slogdet", ["sign", "logabsdet"])
#: torch's ``torch.return_types.triangular_solve``
TriangularSolveResult = namedtuple("triangular_solve", ["solution", "cloned_coefficient"])


def _removed(name: str, replacement: str) -> Callable[..., Any]:
    """torch's methods removed since torch 1.9 (``Tensor.solve``...): the same error."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise InvalidArgumentError(
            f"{name}: removed from torch since 1.9 (calling it raises there too); use {replacement}"
        )

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Removed in torch (an error there and here); use {replacement}."
    return method


class ProductsMixin:
    """Fused products and matrix functions; needs ``_apply`` (see the module docstring)."""

    __slots__ = ()
    _apply: Callable[..., Any]  # the one primitive: retrograd.tensor._dispatch.apply
    dtype: str
    shape: tuple[int, ...]
    ndim: int

    # -- beta * self + alpha * product --------------------------------------------------------
    @autocast_op("addmm")
    def addmm(self, mat1: Any, mat2: Any, *args: Any, beta: Any = 1, alpha: Any = 1) -> Any:
        """``beta * self + alpha * (mat1 @ mat2)`` (matrices; ``self`` broadcasts)."""
        if args:  # torch's deprecated addmm(beta, [alpha,] mat1, mat2)
            beta, alpha, mat1, mat2 = _scales_first("addmm", (mat1, mat2, *args), beta, alpha)
        mat1, mat2 = lift(self, mat1, "addmm"), lift(self, mat2, "addmm")
        if _one_rounding(self, mat1, mat2, beta, alpha):
            # torch's addmm adds a bias row inside the product, rounding once: in bfloat16
            # and float16 a product rounded before the addition differs (the linear kernel)
            return self._apply("linear", (mat1, mat2.transpose(), self))
        return _accumulated("addmm", self, mat1.mm(mat2), beta, alpha)

    @autocast_op("baddbmm")
    def baddbmm(self, batch1: Any, batch2: Any, *args: Any, beta: Any = 1, alpha: Any = 1) -> Any:
        """``beta * self + alpha * (batch1 @ batch2)``, batched ``[b, n, m] @ [b, m, p]``."""
        if args:  # torch's deprecated baddbmm(beta, [alpha,] batch1, batch2)
            beta, alpha, batch1, batch2 = _scales_first(
                "baddbmm", (batch1, batch2, *args), beta, alpha
            )
        product = lift(self, batch1, "baddbmm").bmm(batch2)
        return _accumulated("baddbmm", self, product, beta, alpha)

    @autocast_op("addbmm")
    def addbmm(self, batch1: Any, batch2: Any, *args: Any, beta: Any = 1, alpha: Any = 1) -> Any:
        """``beta * self + alpha * sum_b(batch1[b] @ batch2[b])``."""
        if args:  # torch's deprecated addbmm(beta, [alpha,] batch1, batch2)
            beta, alpha, batch1, batch2 = _scales_first(
                "addbmm", (batch1, batch2, *args), beta, alpha
            )
        product = lift(self, batch1, "addbmm").bmm(batch2).sum(0)
        return _accumulated("addbmm", self, product, beta, alpha)

    @autocast_op("addmv")
    def addmv(self, mat: Any, vec: Any, *args: Any, beta: Any = 1, alpha: Any = 1) -> Any:
        """``beta * self + alpha * (mat @ vec)``."""
        if args:  # torch's deprecated addmv(beta, [alpha,] mat, vec)
            beta, alpha, mat, vec = _scales_first("addmv", (mat, vec, *args), beta, alpha)
        return _accumulated("addmv", self, lift(self, mat, "addmv").mv(vec), beta, alpha)

    @autocast_op("addr")
    def addr(self, vec1: Any, vec2: Any, *args: Any, beta: Any = 1, alpha: Any = 1) -> Any:
        """``beta * self + alpha * outer(vec1, vec2)``."""
        if args:  # torch's deprecated addr(beta, [alpha,] vec1, vec2)
            beta, alpha, vec1, vec2 = _scales_first("addr", (vec1, vec2, *args), beta, alpha)
        return _accumulated("addr", self, lift(self, vec1, "addr").outer(vec2), beta, alpha)

    def kron(self, other: Any) -> Any:
        """The Kronecker product (the operand with fewer dims gets leading 1s)."""
        b = lift(self, other, "kron")
        ndim = max(self.ndim, b.ndim)
        a_shape = (1,) * (ndim - self.ndim) + self.shape
        b_shape = (1,) * (ndim - b.ndim) + b.shape
        a = self.reshape(tuple(n for size in a_shape for n in (size, 1)))
        b = b.reshape(tuple(n for size in b_shape for n in (1, size)))
        return (a * b).reshape(tuple(m * n for m, n in zip(a_shape, b_shape)))

    def vdot(self, other: Any) -> Any:
        """The dot product of two 1-d tensors, the first conjugated (moot for real ones)."""
        other = lift(self, other, "vdot")
        if self.dtype != other.dtype:
            raise DTypeError(
                f"vdot: expected both tensors to have one dtype, got {self.dtype} and {other.dtype}"
            )
        return self.conj().dot(other)

    # -- matrix functions ---------------------------------------------------------------------
    @autocast_op("inverse")
    def inverse(self) -> Any:
        """The inverse of each square matrix (``rg.linalg.inv``; torch's ``inverse``)."""
        return self._apply("inverse", (_square("inverse", self, floats=True, complex_ok=True),))

    @autocast_op("pinverse")
    def pinverse(self, rcond: float = 1e-15) -> Any:
        """The pseudo-inverse (``rg.linalg.pinv(self, rtol=rcond)``, torch's ``pinverse``):
        singular values at most ``rcond`` times the largest count as zero."""
        if self.ndim < 2 or not (self.dtype in FLOAT_DTYPES or self.is_complex()):
            error = ShapeError if self.dtype in FLOAT_DTYPES or self.is_complex() else DTypeError
            raise error(
                f"pinverse: expected a floating point tensor of at least 2 dimensions, got "
                f"{self.dtype} of shape {shape_text(self.shape)}"
            )
        return self._apply("pinv", (self,), (0.0, float(rcond)))

    def matrix_power(self, n: int) -> Any:
        """The ``n``-th power of each square matrix (by squaring; ``n < 0`` powers the
        inverse; ``n = 0`` gives identities)."""
        if isinstance(n, bool) or not isinstance(n, int | np.integer):
            raise InvalidArgumentError(f"matrix_power: n must be an int, got {n!r}")
        _square("matrix_power", self)
        if n == 0:
            eye = self._backend.eye(self.shape[-1], self.shape[-1], self.dtype, self._device)
            identities = wrap(self, eye).expand(self.shape)
            if not self.requires_grad:
                return identities
            # torch's result stays in the graph with a zero gradient (where, not ``0 * self``,
            # which a NaN or inf would poison)
            return identities.where(identities == identities, self)
        if n < 0 and self.dtype not in FLOAT_DTYPES and not self.is_complex():
            raise DTypeError(
                f"matrix_power: a negative power ({n}) needs the inverse, which needs a "
                f"floating point tensor, got {self.dtype}"
            )
        base = self.inverse() if n < 0 else self
        result, n = None, abs(int(n))
        while n:
            if n & 1:
                result = base if result is None else result.matmul(base)
            n >>= 1
            if n:
                base = base.matmul(base)
        return result

    def matrix_exp(self) -> Any:
        """The exponential of each square matrix (``rg.linalg.matrix_exp``; torch's
        ``matrix_exp``, which the parametrizations tutorial's ``MatrixExponential`` calls)."""
        return self._apply(
            "matrix_exp", (_square("matrix_exp", self, floats=True, complex_ok=True),)
        )

    # torch's methods removed since 1.9: the same error, naming what to use
    solve = _removed("solve", "rg.linalg.solve(A, B)")
    lstsq = _removed("lstsq", "rg.linalg.pinv(A) @ B")
    eig = _removed("eig", "rg.linalg.eig(A)")
    symeig = _removed("symeig", "torch.linalg.eigh (not in retrograd)")

    @autocast_op("cholesky")
    def cholesky(self, upper: bool = False) -> Any:
        """The Cholesky factor of each symmetric positive-definite matrix: lower (``L @ L^T``)
        or, with ``upper``, its transpose; the gradient is torch's."""
        lower = self._apply("cholesky", (_square("cholesky", self, floats=True, complex_ok=True),))
        return lower.mH if upper else lower

    @autocast_op("cholesky_solve")
    def cholesky_solve(self, input2: Any, upper: bool = False) -> Any:
        """torch's ``cholesky_solve``: ``X`` with ``L L^T X = self`` for the Cholesky factor
        ``input2`` (``L``, lower; with ``upper``, ``U`` and ``U^T U``), ``self`` ``[..., n, k]``,
        batch dims broadcasting. Only ``input2``'s triangle is read (LAPACK's ``potrs``), but
        its gradient is torch's: that of ``(L L^T)^-1 B`` in every entry of ``input2``."""
        factor = _square(
            "cholesky_solve", lift(self, input2, "cholesky_solve"), floats=True, complex_ok=True
        )
        triangle = factor.triu() if upper else factor.tril()
        # the triangle's values, the gradient of every entry (torch differentiates L L^T)
        factor = factor - (factor - triangle).detach()
        lower = _adjoint(factor) if upper else factor
        inner = _solved("cholesky_solve", lower, self)
        return _solved("cholesky_solve", _adjoint(lower), inner)

    @autocast_op("cholesky_inverse")
    def cholesky_inverse(self, upper: bool = False) -> Any:
        """torch's ``cholesky_inverse``: ``(L L^T)^-1`` of the Cholesky factor ``self``
        (``(U^T U)^-1`` with ``upper``), as ``cholesky_solve`` of the identity."""
        factor = _square("cholesky_inverse", self, floats=True, complex_ok=True)
        eye = self._backend.eye(self.shape[-1], self.shape[-1], self.dtype, self._device)
        return wrap(self, eye).cholesky_solve(factor, upper)

    @autocast_op("triangular_solve")
    def triangular_solve(
        self,
        A: Any,  # noqa: N803 (torch's name)
        upper: bool = True,
        transpose: bool = False,
        unitriangular: bool = False,
    ) -> Any:
        """torch's deprecated ``triangular_solve``: ``(X, A.clone())`` with ``A X = self``
        (``A^T X = self`` when ``transpose``), reading only ``A``'s ``upper`` (else lower)
        triangle, with ones on its diagonal when ``unitriangular``; the gradient reaches only
        that triangle, as torch's (``rg.linalg.solve_triangular`` is the current form)."""
        matrices = _square(
            "triangular_solve", lift(self, A, "triangular_solve"), floats=True, complex_ok=True
        )
        if unitriangular:
            n = matrices.shape[-1]
            eye = self._backend.eye(n, n, matrices.dtype, self._device)
            strict = matrices.triu(1) if upper else matrices.tril(-1)
            triangle = strict + wrap(self, eye)
        else:
            triangle = matrices.triu() if upper else matrices.tril()
        if transpose:  # (the plain transpose of a complex A too, as torch's)
            triangle = triangle.transpose(-2, -1)
        solution = _solved("triangular_solve", triangle, self)
        return TriangularSolveResult(solution, matrices.clone())

    def lu(self, pivot: bool = True, get_infos: bool = False) -> Any:
        """torch's ``Tensor.lu``: ``(LU, pivots)`` (:func:`lu_factorize`, as
        ``rg.linalg.lu_factor_ex``: a singular matrix is factored, not refused), and LAPACK's
        ``infos`` with ``get_infos``."""
        if self.ndim < 2 or (self.dtype not in FLOAT_DTYPES and not self.is_complex()):
            raise DTypeError(
                f"lu: expected a floating point or complex tensor of at least 2 dimensions, got "
                f"{self.dtype} of shape {shape_text(self.shape)}"
            )
        if not pivot:
            raise InvalidArgumentError(
                "lu: LU without pivoting is not implemented (as torch's on the CPU)"
            )
        lu, pivots = lu_factorize(self)
        return (lu, pivots, lu_info(lu)) if get_infos else (lu, pivots)

    def slogdet(self) -> Any:
        """``(sign, logabsdet)`` of each square matrix; the gradient flows through
        ``logabsdet`` (``g A^-T``; a singular matrix has none)."""
        matrices = _square("slogdet", self, floats=True, complex_ok=True)
        if matrices.is_complex():  # the complex log det carries the sign's gradient too
            logdet = self._apply("complex_logdet", (matrices,))
            logabsdet = logdet.real
            sign = (logdet - logabsdet).exp()
            # a singular matrix's sign is 0, as torch's (it was NaN here: -inf - -inf)
            return SlogdetResult(sign.masked_fill(logabsdet == -math.inf, 0.0), logabsdet)
        logabsdet, sign = self._apply("slogdet", (matrices,))
        # torch records the real sign on A too (it requires grad), its derivative undefined:
        # ``sign.sum().backward()`` runs and leaves A's gradient None (it raised here)
        return SlogdetResult(undefined_derivative(matrices, sign), logabsdet)

    def det(self) -> Any:
        """The determinant, as ``sign * exp(logabsdet)``; its gradient is ``adj(A)^T`` (``det *
        A^-T`` where ``A`` is invertible), which holds at singular matrices too, as torch's."""
        _square("det", self, floats=True, complex_ok=True)  # an error names det, not slogdet
        if self.is_complex():
            return self._apply("complex_logdet", (self,)).exp()
        return self._apply("det", (self,))

    def logdet(self) -> Any:
        """``log det``: NaN for a negative determinant, ``-inf`` for a zero one."""
        _square("logdet", self, floats=True, complex_ok=True)
        if self.is_complex():  # log|det| + i arg(det), as torch's
            return self._apply("complex_logdet", (self,))
        sign, logabsdet = self.slogdet()
        return logabsdet.mask_fill(sign.lower_elem(0.0), float("nan"))


def lu_factorize(matrices: Any) -> tuple[Any, Any]:
    """``(LU, pivots)`` of each matrix of ``matrices`` ``[..., m, n]`` (float or complex) by
    Gaussian elimination with partial pivoting, as LAPACK's ``getrf``: ``LU`` holds ``U`` and, below
    the diagonal, ``L``'s multipliers; ``pivots`` (1-based, int32) the row swapped with row
    ``i`` at step ``i``. Tensor ops only (a ``gather`` per row swap, the Schur complement
    updated), so it runs on every backend and its gradient is the elimination's: torch's
    ``linalg_lu`` backward for matrices of full rank (``rg.linalg.lu_factor`` and ``lu``)."""
    m, n = matrices.shape[-2:]
    batch = tuple(matrices.shape[:-2])
    rows = matrices.new_tensor(np.arange(m), dtype="int64")
    lu, pivots = matrices, []
    for j in range(min(m, n)):
        # LAPACK's pivot: the first row of the largest magnitude in column j, at or below j
        # (for complex, izamax's |Re| + |Im|, not the modulus: zgetrf's choice, and torch's)
        column = lu[..., j:, j]
        if column.is_complex():  # (detached: the pivot's choice has no gradient)
            column = column.detach()
            magnitude = column.real.abs() + column.imag.abs()
        else:
            magnitude = column.abs()
        p = magnitude.argmax(dim=-1, keepdim=True) + j
        pivots.append(p)
        swap = rows.where(rows != j, p).where((rows != p) | (rows == j), j)
        lu = lu.gather(-2, swap.unsqueeze(-1).expand(batch + (m, n)))
        head = lu[..., j : j + 1, j : j + 1]
        # a zero pivot means a zero column below it: LAPACK leaves it unscaled (0, not NaN)
        below = lu[..., j + 1 :, j : j + 1] / head.masked_fill(head == 0, 1.0)
        schur = lu[..., j + 1 :, j + 1 :] - below @ lu[..., j : j + 1, j + 1 :]
        lu = cat([lu[..., : j + 1, :], cat([lu[..., j + 1 :, :j], below, schur], -1)], -2)
    # (int32, as torch's and LAPACK's: the dtype lu_unpack and lu_solve ask for)
    if not pivots:
        # (an empty factorization: a copy recorded on the input, as torch's, not the input
        # itself, which it was here, aliased and with no ``grad_fn``)
        return matrices.clone(), rows.new_zeros(batch + (0,), dtype="int32")
    return lu, (cat(pivots, -1) + 1).int()


def lu_info(lu: Any) -> Any:
    """LAPACK's ``info`` of each factored matrix: ``i`` when ``U[i-1, i-1]`` is the first
    zero on ``U``'s diagonal, else 0 (int32, as torch's; the batch's shape)."""
    k = min(lu.shape[-2:])
    zero = (lu.diagonal(dim1=-2, dim2=-1)[..., :k] == 0).long()
    info = (zero.argmax(dim=-1) + 1) * zero.amax(dim=-1) if k else zero.sum(dim=-1)
    return info.int()


def _adjoint(matrices: Any) -> Any:
    """The conjugate transpose of each matrix (the transpose of a real one, no conj op)."""
    return matrices.mH if matrices.is_complex() else matrices.transpose(-2, -1)


def _scales_first(op: str, args: tuple, beta: Any, alpha: Any) -> tuple[Any, Any, Any, Any]:
    """torch's deprecated overloads of the fused products that take the scales first, still
    in torch 2 (with a warning): ``addmm(beta, mat1, mat2)`` and ``addmm(beta, alpha, mat1,
    mat2)`` (and ``baddbmm``, ``addbmm``, ``addmv``, ``addr``); returns ``(beta, alpha,
    first, second)``."""
    numbers = (int, float, np.integer, np.floating)
    scales, operands = (args[:1], args[1:]) if len(args) == 3 else (args[:2], args[2:])
    if (
        len(args) > 4
        or not all(isinstance(x, numbers) and not isinstance(x, bool) for x in scales)
        or any(isinstance(x, numbers) for x in operands)
    ):
        kinds = ", ".join(type(x).__name__ for x in args)
        raise DTypeError(
            f"{op}: invalid arguments ({kinds}); beta and alpha are keyword arguments "
            f"({op}(a, b, beta=..., alpha=...)), or the deprecated {op}(beta, [alpha,] a, b) "
            "takes them first"
        )
    if (type(beta) is not int or beta != 1) or (type(alpha) is not int or alpha != 1):
        raise DTypeError(f"{op}: beta or alpha given twice (first arguments and keywords)")
    warnings.warn(
        f"This overload of {op} is deprecated: {op}(Number beta, [Number alpha,] ...); use "
        f"{op}(..., beta=..., alpha=...) instead",
        UserWarning,
        stacklevel=3,
    )
    return scales[0], scales[1] if len(scales) == 2 else 1, operands[0], operands[1]


def _one_rounding(bias: Any, mat1: Any, mat2: Any, beta: Any, alpha: Any) -> bool:
    """Whether ``addmm(bias, mat1, mat2, beta, alpha)`` is the linear kernel's bias-row
    product: unit scales, matrices that fit and a bias row of their dtype (a float one)."""
    return (
        type(beta) in (int, float)
        and type(alpha) in (int, float)
        and beta == 1
        and alpha == 1
        and mat1.ndim == 2
        and mat2.ndim == 2
        and mat1.shape[1] == mat2.shape[0]
        and bias.shape == (mat2.shape[1],)
        and bias.dtype == mat1.dtype == mat2.dtype
        and bias.dtype in FLOAT_DTYPES
    )


def _accumulated(op: str, input: Any, product: Any, beta: Any, alpha: Any) -> Any:  # noqa: A002
    """``beta * input + alpha * product``, with ``input`` broadcast to the product's shape."""
    number_scale(op, beta)
    number_scale(op, alpha)
    shape = product.shape
    try:
        out_shape = np.broadcast_shapes(input.shape, shape)
    except ValueError:
        out_shape = None
    if out_shape != shape:
        raise ShapeError(
            f"{op}: input of shape {shape_text(input.shape)} does not broadcast to the "
            f"product's shape {shape_text(shape)}"
        )
    integer = input.dtype not in FLOAT_DTYPES and not input.is_complex()
    if integer and (isinstance(beta, float) or isinstance(alpha, float)):
        raise DTypeError(
            f"{op}: for integer tensors, beta and alpha must be integers (got beta={beta!r}, "
            f"alpha={alpha!r})"
        )
    if op != "addr":  # torch's addr promotes; the fused matrix products do not
        from .reduce import same_dtype

        same_dtype(op, input, product)
    product = product if alpha == 1 else scaled(op, product, alpha)
    if beta == 0:
        # torch's: the product alone (NaNs in input do not propagate), in the promoted dtype,
        # with input still in the graph (its gradient 0): where, not ``0 * input``
        everywhere = product.new_ones(product.shape, dtype="bool")
        return product.where(everywhere, input)
    return (input if beta == 1 else scaled(op, input, beta)) + product


def _solved(op: str, matrices: Any, rhs: Any) -> Any:
    """``X`` with ``matrices @ X = rhs`` (the ``solve`` kernel), ``rhs`` ``[..., n, k]`` of
    ``matrices``' dtype, batch dims broadcasting."""
    n = matrices.shape[-1]
    if rhs.ndim < 2 or rhs.shape[-2] != n:
        raise ShapeError(
            f"{op}: the right-hand side of shape {shape_text(rhs.shape)} does not fit matrices "
            f"of shape {shape_text(matrices.shape)} (expected [..., {n}, k])"
        )
    if rhs.dtype != matrices.dtype:
        raise DTypeError(
            f"{op}: expected one dtype for both operands, got {rhs.dtype} and {matrices.dtype}"
        )
    try:
        batch = tuple(np.broadcast_shapes(matrices.shape[:-2], rhs.shape[:-2]))
    except ValueError:
        raise ShapeError(
            f"{op}: batch dims of shapes {shape_text(rhs.shape)} and "
            f"{shape_text(matrices.shape)} do not broadcast"
        ) from None
    a = matrices if matrices.shape[:-2] == batch else matrices.expand(batch + (n, n))
    b = rhs if rhs.shape[:-2] == batch else rhs.expand(batch + rhs.shape[-2:])
    return a._apply("solve", (a, b))


def _square(op: str, x: Any, floats: bool = False, complex_ok: bool = False) -> Any:
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(
            f"{op}: expected a batch of square matrices, got shape {shape_text(x.shape)}"
        )
    if floats and x.dtype not in FLOAT_DTYPES and not (complex_ok and x.is_complex()):
        raise DTypeError(f"{op}: expected a floating point tensor, got {x.dtype}")
    return x
