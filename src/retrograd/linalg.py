"""torch's ``torch.linalg`` names retrograd has, differentiable, batched over leading dims, on
float tensors, on every backend: :func:`inv` and :func:`pinv` (the inverse's ``-A^-T g
A^-T``; torch's pseudo-inverse backward), :func:`det` and :func:`slogdet` (the gradient of
``log |det A|`` is ``A^-T``), :func:`solve` (LU; its gradients ``A^-T g`` and ``-A^-T g
X^T``), :func:`cholesky` (torch's backward) and :func:`matrix_power`.

>>> import retrograd as rg
>>> rg.linalg.inv(rg.tensor([[2.0, 0.0], [0.0, 4.0]], dtype="float64")).tolist()
[[0.5, 0.0], [0.0, 0.25]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DTypeError, InvalidArgumentError, ShapeError, shape_text
from .tensor import FLOAT_DTYPES, Tensor
from .tensor._dispatch import lift
from .tensor.creation import _no_out

__all__ = ["cholesky", "det", "inv", "matrix_power", "pinv", "slogdet", "solve"]


def _matrices(op: str, A: Any) -> Tensor:  # noqa: N803 (torch's name)
    if not isinstance(A, Tensor):
        raise DTypeError(f"{op}: expected a tensor, got {type(A).__name__}")
    if A.dtype not in FLOAT_DTYPES:
        raise DTypeError(f"{op}: expected a floating point tensor, got {A.dtype}")
    if A.ndim < 2:
        raise ShapeError(
            f"{op}: the input must have at least 2 dimensions, got shape {shape_text(A.shape)}"
        )
    return A


def inv(A: Tensor, *, out: Any = None) -> Tensor:  # noqa: N803 (torch's name)
    """The inverse of each square matrix of ``A`` ``[..., n, n]``; a singular one raises
    ``rg.InvalidArgumentError`` (torch: its ``LinAlgError``)."""
    _no_out("linalg.inv", out)
    matrices = _matrices("linalg.inv", A)
    if matrices.shape[-1] != matrices.shape[-2]:
        raise ShapeError(
            f"linalg.inv: A must be batches of square matrices, but they are "
            f"{matrices.shape[-2]} by {matrices.shape[-1]} matrices"
        )
    return matrices._apply("inverse", (matrices,))


def pinv(
    A: Tensor,  # noqa: N803 (torch's name)
    *,
    atol: float | None = None,
    rtol: float | None = None,
    hermitian: bool = False,
    out: Any = None,
) -> Tensor:
    """The Moore-Penrose pseudo-inverse of each matrix of ``A`` ``[..., m, n]``, as torch's:
    singular values at most ``max(atol, rtol * largest)`` count as zero, ``rtol`` defaulting to
    ``eps * max(m, n)`` when neither tolerance is given (to 0 when only ``atol`` > 0 is).
    Tolerances are numbers (torch also takes tensors of them). The gradient is torch's, which
    holds where the rank does not change under a small perturbation."""
    _no_out("linalg.pinv", out)
    matrices = _matrices("linalg.pinv", A)
    if hermitian:
        raise InvalidArgumentError(
            "linalg.pinv: hermitian=True (which reads only the lower triangle) is not "
            "supported; drop it for a symmetric input (the result is the same)"
        )
    if isinstance(atol, Tensor) or isinstance(rtol, Tensor):
        raise InvalidArgumentError("linalg.pinv: atol and rtol must be numbers, not tensors")
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else _eps(A.dtype) * max(A.shape[-2:])
    return matrices._apply("pinv", (matrices,), (float(atol or 0.0), float(rtol)))


def det(A: Tensor, *, out: Any = None) -> Tensor:  # noqa: N803 (torch's name)
    """The determinant of each square matrix of ``A`` (``A.det()``)."""
    _no_out("linalg.det", out)
    return _matrices("linalg.det", A).det()


def slogdet(A: Tensor, *, out: Any = None) -> Any:  # noqa: N803 (torch's name)
    """``(sign, logabsdet)`` of each square matrix of ``A`` (``A.slogdet()``)."""
    _no_out("linalg.slogdet", out)
    return _matrices("linalg.slogdet", A).slogdet()


def matrix_power(A: Tensor, n: int, *, out: Any = None) -> Tensor:  # noqa: N803 (torch's name)
    """The ``n``-th power of each square matrix of ``A`` (``A.matrix_power(n)``)."""
    _no_out("linalg.matrix_power", out)
    return _matrices("linalg.matrix_power", A).matrix_power(n)


def cholesky(A: Tensor, *, upper: bool = False, out: Any = None) -> Tensor:  # noqa: N803
    """The Cholesky factor of each symmetric positive-definite matrix of ``A``
    (``A.cholesky(upper)``); another raises ``rg.InvalidArgumentError``."""
    _no_out("linalg.cholesky", out)
    return _matrices("linalg.cholesky", A).cholesky(upper)


def solve(A: Tensor, B: Any, *, left: bool = True, out: Any = None) -> Tensor:  # noqa: N803
    """``X`` with ``A @ X = B`` (``X @ A = B`` when ``left=False``) for square ``A``
    ``[..., n, n]``; ``B`` is ``[..., n, k]`` or a vector ``[..., n]``, batch dims
    broadcasting, as torch's. A singular ``A`` raises ``rg.InvalidArgumentError``."""
    _no_out("linalg.solve", out)
    matrices = _matrices("linalg.solve", A)
    n = matrices.shape[-1]
    if matrices.shape[-2] != n:
        raise ShapeError(
            f"linalg.solve: A must be batches of square matrices, got shape "
            f"{shape_text(matrices.shape)}"
        )
    rhs = lift(matrices, B, "linalg.solve")
    vector = rhs.ndim == 1 or (left and rhs.shape == matrices.shape[:-1])
    if vector:
        rhs = rhs.unsqueeze_dim(-1) if left else rhs.unsqueeze_dim(-2)
    if not left:
        matrices, rhs = matrices.transpose(-2, -1), rhs.transpose(-2, -1)
    if rhs.shape[-2] != n:
        raise ShapeError(
            f"linalg.solve: B of shape {shape_text(tuple(B.shape))} does not fit A of shape "
            f"{shape_text(A.shape)}"
        )
    batch = tuple(np.broadcast_shapes(matrices.shape[:-2], rhs.shape[:-2]))
    a, b = matrices, rhs.cast(matrices.dtype) if rhs.dtype != matrices.dtype else rhs
    a = a if a.shape[:-2] == batch else a.expand(batch + a.shape[-2:])
    b = b if b.shape[:-2] == batch else b.expand(batch + b.shape[-2:])
    x = a._apply("solve", (a, b))
    if not left:
        x = x.transpose(-2, -1)
    return x.squeeze_dim(-1 if left else -2) if vector else x


def _eps(dtype: str) -> float:
    if dtype in ("bfloat16",):
        return 0.0078125
    return float(np.finfo(np.dtype(dtype)).eps)
