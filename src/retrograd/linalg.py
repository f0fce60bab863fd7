"""torch's ``torch.linalg`` names retrograd has, differentiable, batched over leading dims, on
float tensors, on every backend: :func:`inv` and :func:`pinv` (the inverse's ``-A^-T g
A^-T``; torch's pseudo-inverse backward), :func:`det` and :func:`slogdet` (the gradient of
``log |det A|`` is ``A^-T``), :func:`solve` (LU; its gradients ``A^-T g`` and ``-A^-T g
X^T``), :func:`cholesky` (torch's backward) and :func:`matrix_power`; the norms
(:func:`vector_norm`, :func:`matrix_norm`, :func:`norm`, from :mod:`retrograd.tensor.norms`);
the decompositions :func:`eigh`/:func:`eigvalsh`, :func:`svd`/:func:`svdvals`, :func:`qr` and
:func:`matrix_exp`, with torch's backward formulas (one op each, whose kernel packs the
factors into one array); :func:`lstsq`, :func:`solve_triangular`, :func:`multi_dot`,
:func:`cross`, :func:`vecdot`, :func:`matmul`, :func:`diagonal`, :func:`matrix_rank`,
:func:`cond`, :func:`vander` and the ``_ex`` variants; :func:`eig`/:func:`eigvals` (complex
results, torch's backward).

>>> import retrograd as rg
>>> rg.linalg.inv(rg.tensor([[2.0, 0.0], [0.0, 4.0]], dtype="float64")).tolist()
[[0.5, 0.0], [0.0, 0.25]]
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np

from .backend.protocol import COMPLEX_DTYPES
from .errors import (
    ArgumentTypeError,
    DTypeError,
    InvalidArgumentError,
    InvalidValueError,
    KernelDTypeError,
    LinAlgError,
    MixedDTypeError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
    shape_text,
)
from .errors import guard as _guard
from .errors import guard_namespace as _guard_namespace
from .tensor import FLOAT_DTYPES, Tensor
from .tensor._dispatch import lift, normalize_dim, untracked
from .tensor.autocasting import autocast_op
from .tensor.creation import _no_out
from .tensor.creation import randn as _creation_randn
from .tensor.functions import accepts_out as _accepts_out
from .tensor.functions import undefined_derivative
from .tensor.norms import matrix_norm, norm, vector_norm
from .tensor.products import TriangularSolveResult, lu_factorize, lu_info
from .tensor.shape import cat

__all__ = [
    "LinAlgError",
    "cholesky",
    "cholesky_ex",
    "cond",
    "cross",
    "det",
    "diagonal",
    "eig",
    "eigh",
    "eigvals",
    "eigvalsh",
    "householder_product",
    "inv",
    "inv_ex",
    "ldl_factor",
    "ldl_factor_ex",
    "ldl_solve",
    "lstsq",
    "lu",
    "lu_factor",
    "lu_factor_ex",
    "lu_solve",
    "lu_unpack",
    "matmul",
    "matrix_exp",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "multi_dot",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "solve_ex",
    "solve_triangular",
    "svd",
    "svdvals",
    "tensorinv",
    "tensorsolve",
    "vander",
    "vecdot",
    "vector_norm",
]

#: the functions below that take torch's ``out=`` (see the end of the module)
_TAKES_OUT = (
    "inv",
    "tensorinv",
    "tensorsolve",
    "pinv",
    "det",
    "slogdet",
    "matrix_power",
    "cholesky",
    "solve",
    "eigh",
    "eig",
    "eigvals",
    "eigvalsh",
    "svd",
    "svdvals",
    "qr",
    "householder_product",
    "geqrf",
    "ormqr",
    "lu_factor_ex",
    "lu_factor",
    "lu_unpack",
    "ldl_factor_ex",
    "ldl_factor",
    "ldl_solve",
    "lu",
    "lu_solve",
    "solve_triangular",
    "multi_dot",
    "cross",
    "vecdot",
    "matmul",
    "matrix_rank",
    "cond",
    "inv_ex",
    "cholesky_ex",
    "solve_ex",
    "vector_norm",
    "matrix_norm",
    "norm",
)
_LAPACK_NAMES = frozenset(("geqrf", "ormqr", "lu_unpack"))

# torch.return_types' names and fields
EighResult = namedtuple("linalg_eigh", ["eigenvalues", "eigenvectors"])
EigResult = namedtuple("linalg_eig", ["eigenvalues", "eigenvectors"])
SVDResult = namedtuple("linalg_svd", ["U", "S", "Vh"])
QRResult = namedtuple("linalg_qr", ["Q", "R"])
LstsqResult = namedtuple("linalg_lstsq", ["solution", "residuals", "rank", "singular_values"])
InvExResult = namedtuple("linalg_inv_ex", ["inverse", "info"])
CholeskyExResult = namedtuple("linalg_cholesky_ex", ["L", "info"])
SolveExResult = namedtuple("linalg_solve_ex", ["result", "info"])
LUFactorResult = namedtuple("linalg_lu_factor", ["LU", "pivots"])
LUFactorExResult = namedtuple("linalg_lu_factor_ex", ["LU", "pivots", "info"])
LUResult = namedtuple("linalg_lu", ["P", "L", "U"])
LUUnpackResult = namedtuple("lu_unpack", ["P", "L", "U"])
LDLFactorResult = namedtuple("linalg_ldl_factor", ["LD", "pivots"])
LDLFactorExResult = namedtuple("linalg_ldl_factor_ex", ["LD", "pivots", "info"])


def _matrices(op: str, A: Any, complex_ok: bool = False) -> Tensor:  # noqa: N803 (torch's name)
    """``A``, checked: a float tensor (or complex, for the ops with complex rules) of matrices."""
    if not isinstance(A, Tensor):
        raise DTypeError(f"{op}: expected a tensor, got {type(A).__name__}")
    if A.dtype not in FLOAT_DTYPES and not (complex_ok and A.dtype in COMPLEX_DTYPES):
        # (torch's RuntimeError "Expected a floating point or complex tensor", or for
        # eigh its NotImplementedError "linalg_eigh_cpu" not implemented for 'Long')
        raise UnsupportedDTypeError(f"{op}: expected a floating point tensor, got {A.dtype}")
    if A.ndim < 2:
        raise ShapeError(
            f"{op}: the input must have at least 2 dimensions, got shape {shape_text(A.shape)}"
        )
    return A


@autocast_op("linalg_inv")
def inv(A: Tensor, *, out: Any = None) -> Tensor:  # noqa: N803 (torch's name)
    """The inverse of each square matrix of ``A`` ``[..., n, n]``; a singular one raises
    ``rg.linalg.LinAlgError`` (torch's ``LinAlgError``, a ``RuntimeError``)."""
    _no_out("linalg.inv", out)
    matrices = _matrices("linalg.inv", A, complex_ok=True)
    if matrices.shape[-1] != matrices.shape[-2]:
        raise ShapeError(
            f"linalg.inv: A must be batches of square matrices, but they are "
            f"{matrices.shape[-2]} by {matrices.shape[-1]} matrices"
        )
    return matrices._apply("inverse", (matrices,))


@autocast_op("linalg_tensorinv")
def tensorinv(A: Tensor, ind: int = 2, *, out: Any = None) -> Tensor:  # noqa: N803
    """The tensor ``X`` of shape ``A.shape[ind:] + A.shape[:ind]`` with ``tensordot(A, X,
    ind)`` the identity, as torch's: the inverse of ``A`` read as a square matrix of
    ``prod(A.shape[:ind])`` rows."""
    _no_out("linalg.tensorinv", out)
    if not isinstance(A, Tensor):
        raise DTypeError(f"linalg.tensorinv: expected a tensor, got {type(A).__name__}")
    if isinstance(ind, bool) or not isinstance(ind, int) or ind <= 0:
        raise InvalidArgumentError(
            f"linalg.tensorinv: expected a strictly positive ind, got {ind!r}"
        )
    if ind > A.ndim:  # (torch's RuntimeError "invalid slice"; a 0-d A was its own inverse)
        raise InvalidValueError(
            f"linalg.tensorinv: ind={ind} is more than the {A.ndim} dimensions of A "
            f"{shape_text(A.shape)}"
        )
    rows, columns = A.shape[:ind], A.shape[ind:]
    if math.prod(rows) != math.prod(columns):
        raise ShapeError(
            f"linalg.tensorinv: A {shape_text(A.shape)} with ind={ind} is not square: "
            f"prod{tuple(rows)} = {math.prod(rows)} rows and prod{tuple(columns)} = "
            f"{math.prod(columns)} columns"
        )
    square = A.reshape(math.prod(rows), math.prod(columns))
    return inv(square).reshape(tuple(columns) + tuple(rows))


@autocast_op("linalg_tensorsolve")
def tensorsolve(A: Tensor, B: Any, dims: Sequence[int] | None = None, *, out: Any = None) -> Tensor:  # noqa: N803
    """``X`` with ``tensordot(A, X, X.ndim) == B``, as torch's: ``X`` has the shape
    ``A.shape[B.ndim:]`` (after ``dims`` of ``A`` are moved to its end), ``A`` read as a
    square matrix of ``B.numel()`` rows."""
    _no_out("linalg.tensorsolve", out)
    if not isinstance(A, Tensor):
        raise DTypeError(f"linalg.tensorsolve: expected a tensor, got {type(A).__name__}")
    rhs = lift(A, B, "linalg.tensorsolve")
    system = A
    if dims is not None:
        moved = [normalize_dim("linalg.tensorsolve", d, A.ndim) for d in dims]
        system = A.movedim(moved, list(range(A.ndim - len(moved), A.ndim)))
    solution_shape = tuple(system.shape[rhs.ndim :])
    if (
        tuple(system.shape[: rhs.ndim]) != tuple(rhs.shape)
        or math.prod(solution_shape) != rhs.numel()
    ):
        raise ShapeError(
            f"linalg.tensorsolve: A {shape_text(system.shape)} and B {shape_text(rhs.shape)} "
            "do not make a square system (A's leading dims must be B's, and the product of "
            "the rest B's number of elements)"
        )
    square = system.reshape(rhs.numel(), math.prod(solution_shape))
    return solve(square, rhs.reshape(-1)).reshape(solution_shape)


@autocast_op("linalg_pinv")
def pinv(
    A: Tensor,  # noqa: N803 (torch's name)
    rcond: float | None = None,
    hermitian: bool = False,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    out: Any = None,
) -> Tensor:
    """The Moore-Penrose pseudo-inverse of each matrix of ``A`` ``[..., m, n]``, as torch's:
    singular values at most ``max(atol, rtol * largest)`` count as zero, ``rtol`` defaulting to
    ``eps * max(m, n)`` when neither tolerance is given (to 0 when only ``atol`` > 0 is).
    Tolerances are numbers (torch also takes tensors of them); ``rcond`` is torch's older
    ``rtol`` (with ``atol = 0``). The gradient is torch's, which
    holds where the rank does not change under a small perturbation. ``hermitian=True``
    (square ``A``) reads only the lower triangle, mirrored, as torch's; its gradient is the
    general one at ``A``, as torch's (for a symmetric ``A``, the gradient without it)."""
    _no_out("linalg.pinv", out)
    if rcond is not None:  # torch's older form: pinv(A, rcond, hermitian) is rtol=rcond, atol=0
        if atol is not None or rtol is not None:
            raise InvalidArgumentError("linalg.pinv: give rcond, or atol and rtol, not both")
        if isinstance(rcond, Tensor):
            raise InvalidArgumentError("linalg.pinv: rcond must be a number, not a tensor")
        atol, rtol = 0.0, float(rcond)
    matrices = (
        _square("linalg.pinv", A, complex_ok=True)
        if hermitian
        else _matrices("linalg.pinv", A, complex_ok=True)
    )
    if hermitian:
        matrices = _lower_mirrored(matrices)
    if isinstance(atol, Tensor) or isinstance(rtol, Tensor):
        raise InvalidArgumentError("linalg.pinv: atol and rtol must be numbers, not tensors")
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else _eps(A.dtype) * max(A.shape[-2:])
    return matrices._apply("pinv", (matrices,), (float(atol or 0.0), float(rtol)))


def _lower_mirrored(matrices: Tensor) -> Tensor:
    """``matrices`` with each upper triangle replaced by the mirrored (conjugated) lower one,
    the gradient passing through unchanged (torch's ``pinv(hermitian=True)`` differentiates
    its general formula at its input): ``mirrored + (matrices - matrices)``, the difference
    exactly 0."""
    fixed = untracked(matrices)
    diagonal = fixed.tril().triu()
    if diagonal.is_complex():  # a Hermitian matrix's diagonal is real (LAPACK's heevd reads so)
        diagonal = diagonal.real
    strict = fixed.tril(-1)
    return (strict + strict.mH + diagonal) + (matrices - fixed)


@autocast_op("linalg_det")
def det(A: Tensor, *, out: Any = None) -> Tensor:  # noqa: N803 (torch's name)
    """The determinant of each square matrix of ``A`` (``A.det()``)."""
    _no_out("linalg.det", out)
    return _matrices("linalg.det", A, complex_ok=True).det()


@autocast_op("linalg_slogdet")
def slogdet(A: Tensor, *, out: Any = None) -> Any:  # noqa: N803 (torch's name)
    """``(sign, logabsdet)`` of each square matrix of ``A`` (``A.slogdet()``)."""
    _no_out("linalg.slogdet", out)
    return _matrices("linalg.slogdet", A, complex_ok=True).slogdet()


@autocast_op("linalg_matrix_power")
def matrix_power(A: Tensor, n: int, *, out: Any = None) -> Tensor:  # noqa: N803 (torch's name)
    """The ``n``-th power of each square matrix of ``A`` (``A.matrix_power(n)``); integer
    matrices too for ``n >= 0``, as torch's."""
    _no_out("linalg.matrix_power", out)
    if isinstance(A, Tensor) and A.dtype not in FLOAT_DTYPES and A.dtype not in COMPLEX_DTYPES:
        if A.ndim < 2:
            raise ShapeError(
                f"linalg.matrix_power: the input must have at least 2 dimensions, got shape "
                f"{shape_text(A.shape)}"
            )
        return A.matrix_power(n)
    return _matrices("linalg.matrix_power", A, complex_ok=True).matrix_power(n)


@autocast_op("linalg_cholesky")
def cholesky(A: Tensor, *, upper: bool = False, out: Any = None) -> Tensor:  # noqa: N803
    """The Cholesky factor of each symmetric positive-definite matrix of ``A``
    (``A.cholesky(upper)``); another raises ``rg.InvalidArgumentError``."""
    _no_out("linalg.cholesky", out)
    return _matrices("linalg.cholesky", A, complex_ok=True).cholesky(upper)


@autocast_op("linalg_solve")
def solve(A: Tensor, B: Any, *, left: bool = True, out: Any = None) -> Tensor:  # noqa: N803
    """``X`` with ``A @ X = B`` (``X @ A = B`` when ``left=False``) for square ``A``
    ``[..., n, n]``; ``B`` is ``[..., n, k]`` or a vector ``[..., n]``, batch dims
    broadcasting, as torch's. A singular ``A`` raises ``rg.InvalidArgumentError``."""
    _no_out("linalg.solve", out)
    matrices = _matrices("linalg.solve", A, complex_ok=True)
    n = matrices.shape[-1]
    if matrices.shape[-2] != n:
        raise ShapeError(
            f"linalg.solve: A must be batches of square matrices, got shape "
            f"{shape_text(matrices.shape)}"
        )
    if isinstance(B, Tensor) and B.dtype != matrices.dtype:  # torch's rule: no promotion
        raise MixedDTypeError(
            f"linalg.solve: A ({matrices.dtype}) and B ({B.dtype}) must have the same dtype"
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


def _square(op: str, A: Any, complex_ok: bool = False) -> Tensor:  # noqa: N803 (torch's name)
    matrices = _matrices(op, A, complex_ok)
    if matrices.shape[-1] != matrices.shape[-2]:
        raise ShapeError(
            f"{op}: A must be batches of square matrices, but they are "
            f"{matrices.shape[-2]} by {matrices.shape[-1]} matrices"
        )
    return matrices


def _identity(matrices: Tensor) -> Tensor:
    """The ``n x n`` identity in ``matrices``' dtype, backend and device (untracked)."""
    return matrices.new_zeros((matrices.shape[-1],)).add_scalar(1.0).diag()


def _unpacked(packed: Tensor, shapes: Sequence[tuple[int, ...]]) -> list[Tensor]:
    """The factors a decomposition kernel packed along the last dim (the backend protocol's
    ``linalg_svd``), each reshaped to its matrix shape: slices, so each factor's gradient
    reaches the packed output, and the op's backward rule reads all of them at once."""
    batch, start, parts = packed.shape[:-1], 0, []
    for shape in shapes:
        size = math.prod(shape)
        parts.append(packed[..., start : start + size].reshape(batch + tuple(shape)))
        start += size
    return parts


# -- decompositions ------------------------------------------------------------------------------
@autocast_op("linalg_eigh")
def eigh(A: Tensor, UPLO: str = "L", *, out: Any = None) -> Any:  # noqa: N803 (torch's names)
    """torch's ``linalg.eigh``: ``(eigenvalues, eigenvectors)`` of each symmetric matrix of
    ``A`` ``[..., n, n]``, eigenvalues ascending, reading only the ``UPLO`` triangle.

    The gradient is torch's (``V (skew(V^T gV) / E + diag(gL)) V^T``, ``E[i, j] = L[j] -
    L[i]``), not symmetrized, as torch's. As torch's docs say, it is defined for distinct
    eigenvalues and for losses that do not depend on the eigenvectors' signs; when no gradient
    reaches the eigenvectors it is ``V diag(gL) V^T``, defined for repeated eigenvalues too.

    >>> import retrograd as rg
    >>> values, vectors = rg.linalg.eigh(rg.tensor([[2.0, 1.0], [1.0, 2.0]], dtype="float64"))
    >>> [round(v, 12) for v in values.tolist()]
    [1.0, 3.0]
    >>> rg.linalg.svdvals(rg.tensor([[3.0, 0.0], [0.0, -4.0]], dtype="float64")).tolist()
    [4.0, 3.0]
    """
    _no_out("linalg.eigh", out)
    matrices = _square("linalg.eigh", A, complex_ok=True)
    if UPLO not in ("L", "U"):
        raise InvalidArgumentError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    n = matrices.shape[-1]
    packed = matrices._apply("linalg_eigh", (matrices,), (UPLO == "U",))
    values = packed[..., n]  # real, stored in the complex pack of a complex A
    return EighResult(values.real if values.is_complex() else values, packed[..., :n])


@autocast_op("linalg_eig")
def eig(A: Tensor, *, out: Any = None) -> Any:  # noqa: N803 (torch's name)
    """torch's ``linalg.eig``: ``(eigenvalues, eigenvectors)`` of each square matrix of ``A``
    ``[..., n, n]``, complex (for a real ``A`` too), as LAPACK's ``geev`` gives them: unit
    eigenvectors whose largest component is real, in torch's order.

    The gradient is torch's ``linalg_eig_backward`` (of a real ``A``, its real part): defined
    for distinct eigenvalues and for losses that do not depend on each eigenvector's phase
    (``v -> v e^{i phi}``); a loss that does is refused in backward, as torch's. When no
    gradient reaches the eigenvectors it is ``V^-H diag(gL) V^H``."""
    _no_out("linalg.eig", out)
    matrices = _square("linalg.eig", A, complex_ok=True)
    n = matrices.shape[-1]
    packed = matrices._apply("linalg_eig", (matrices,))
    return EigResult(packed[..., n], packed[..., :n])


@autocast_op("linalg_eigvals")
def eigvals(A: Tensor, *, out: Any = None) -> Tensor:  # noqa: N803 (torch's name)
    """torch's ``linalg.eigvals``: the eigenvalues of :func:`eig` (complex)."""
    _no_out("linalg.eigvals", out)
    return eig(_square("linalg.eigvals", A, complex_ok=True)).eigenvalues


@autocast_op("linalg_eigvalsh")
def eigvalsh(A: Tensor, UPLO: str = "L", *, out: Any = None) -> Tensor:  # noqa: N803
    """torch's ``linalg.eigvalsh``: the eigenvalues of :func:`eigh` (gradient ``V diag(g)
    V^T``)."""
    _no_out("linalg.eigvalsh", out)
    return eigh(A, UPLO).eigenvalues


@autocast_op("linalg_svd")
def svd(
    A: Tensor,  # noqa: N803 (torch's name)
    full_matrices: bool = True,
    *,
    driver: str | None = None,
    out: Any = None,
) -> Any:
    """torch's ``linalg.svd``: ``(U, S, Vh)`` with ``A = U diag(S) Vh`` for each matrix of
    ``A`` ``[..., m, n]``, ``S`` descending.

    The gradient is torch's ``svd_backward``: defined for distinct singular values (and, for
    a non-square ``A`` with gradients on ``U`` or ``Vh``, non-zero ones), for losses that do not
    depend on the singular vectors' signs; with ``full_matrices`` the columns of ``U`` and rows
    of ``Vh`` past ``min(m, n)`` get none (arbitrary bases, as torch's docs say). ``driver``
    (CUDA only in torch) is not supported."""
    _no_out("linalg.svd", out)
    matrices = _matrices("linalg.svd", A, complex_ok=True)
    if driver is not None:
        raise InvalidArgumentError("linalg.svd: driver= is for CUDA inputs only (as torch's)")
    m, n = matrices.shape[-2:]
    k = min(m, n)
    shapes = ((m, m if full_matrices else k), (k,), (n if full_matrices else k, n))
    packed = matrices._apply("linalg_svd", (matrices,), (bool(full_matrices),))
    u, s, vh = _unpacked(packed, shapes)
    return SVDResult(u, s.real if s.is_complex() else s, vh)  # S real, packed complex


@autocast_op("linalg_svdvals")
def svdvals(A: Tensor, *, driver: str | None = None, out: Any = None) -> Tensor:  # noqa: N803
    """torch's ``linalg.svdvals``: the singular values, descending (gradient ``U diag(g)
    Vh``, defined for repeated ones too)."""
    _no_out("linalg.svdvals", out)
    return svd(_matrices("linalg.svdvals", A, complex_ok=True), False, driver=driver).S


@autocast_op("linalg_qr")
def qr(A: Tensor, mode: str = "reduced", *, out: Any = None) -> Any:  # noqa: N803
    """torch's ``linalg.qr``: ``(Q, R)`` of each matrix of ``A`` ``[..., m, n]`` (LAPACK's
    Householder QR: ``R``'s diagonal may be negative, as torch's). ``mode`` ``"reduced"``,
    ``"complete"`` (``Q`` square), or ``"r"`` (``Q`` empty). The gradient is torch's
    ``linalg_qr_backward``, for ``A`` of full rank; as torch's it refuses ``mode="r"`` and a
    complete factorization of a tall matrix (raised in backward).

    >>> import retrograd as rg
    >>> q, r = rg.linalg.qr(rg.tensor([[3.0, 1.0], [4.0, 2.0]], dtype="float64"))
    >>> [round(v, 12) + 0.0 for v in (q @ r).flatten().tolist()]
    [3.0, 1.0, 4.0, 2.0]
    """
    _no_out("linalg.qr", out)
    matrices = _matrices("linalg.qr", A, complex_ok=True)
    if mode not in ("reduced", "complete", "r"):
        raise InvalidArgumentError(
            f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}"
        )
    m, n = matrices.shape[-2:]
    k = m if mode == "complete" else min(m, n)
    packed = matrices._apply("linalg_qr", (matrices,), (mode,))
    if mode == "r":
        (r,) = _unpacked(packed, ((k, n),))
        # torch's empty Q is an output of the factorization too: it requires grad where A
        # does, and a backward through it is refused as R's is (it was a constant here)
        return QRResult(packed.flatten()[:0], r)
    q, r = _unpacked(packed, ((m, k), (k, n)))
    return QRResult(q, r)


@autocast_op("linalg_householder_product")
def householder_product(A: Tensor, tau: Any, *, out: Any = None) -> Tensor:  # noqa: N803
    """torch's ``linalg.householder_product`` (LAPACK's ``orgqr``): the first ``n`` columns
    of ``H_1 ... H_k`` for ``A`` ``[..., m, n]`` and ``tau`` ``[..., k]`` (``m >= n >= k``),
    ``H_i = I - tau_i v_i v_i^H``, ``v_i`` column ``i`` of ``A`` below the diagonal with a 1
    on it; written with tensor ops, differentiable through ``A`` and ``tau`` as torch's.

    >>> import retrograd as rg
    >>> a = rg.tensor([[1.0], [2.0]], dtype="float64")
    >>> rg.linalg.householder_product(a, rg.tensor([0.4], dtype="float64")).tolist()
    [[0.6], [-0.8]]
    """
    _no_out("linalg.householder_product", out)
    matrices = _matrices("linalg.householder_product", A, complex_ok=True)
    tau = lift(matrices, tau, "linalg.householder_product")
    m, n = matrices.shape[-2:]
    k = tau.shape[-1] if tau.ndim else -1
    if not m >= n >= k >= 0 or tuple(tau.shape[:-1]) != tuple(matrices.shape[:-2]):
        raise ShapeError(
            f"linalg.householder_product: A of shape {shape_text(matrices.shape)} and tau of "
            f"shape {shape_text(tau.shape)} do not fit (A [..., m, n] with m >= n, tau "
            "[..., k] with k <= n and A's batch)"
        )
    eye = matrices.new_tensor(np.eye(m, n), dtype=matrices.dtype)
    vectors = matrices.tril(diagonal=-1) + eye
    Q = eye.expand(matrices.shape)  # noqa: N806 (the maths' names)
    if k == 0:
        # no reflector: torch's identity is still recorded on A and tau (zero gradients);
        # empty sums link them exactly, whatever A holds (0 * NaN would be NaN)
        link = matrices[..., :0, :].sum(-2, keepdim=True) + tau.sum(-1)[..., None, None]
        return Q + link
    for i in range(k - 1, -1, -1):
        v = vectors[..., :, i : i + 1]
        Q = Q - tau[..., i : i + 1].unsqueeze(-1) * (v @ (v.mH @ Q))  # noqa: N806
    return Q


GeqrfResult = namedtuple("geqrf", ["a", "tau"])


@autocast_op("geqrf")
def geqrf(input: Tensor, *, out: Any = None) -> Any:  # noqa: A002 (torch's name)
    """torch's ``geqrf`` (LAPACK's): ``(a, tau)``, the QR factorization of ``input`` ``[..., m, n]``
    in Householder form: ``R`` on and above ``a``'s diagonal, the reflectors' vectors below
    it, ``tau`` ``[..., min(m, n)]`` their scales (:func:`householder_product` makes ``Q``).
    As torch's, the result is recorded on ``input`` and its backward refuses."""
    import scipy.linalg

    _no_out("geqrf", out)
    matrices = _matrices("geqrf", input)
    m, n = matrices.shape[-2:]
    values = matrices.detach().numpy()
    flat = values.reshape((math.prod(matrices.shape[:-2]), m, n))  # -1 is ambiguous at size 0
    packed = np.empty_like(flat)
    scales = np.empty((flat.shape[0], min(m, n)), flat.dtype)
    for i, matrix in enumerate(flat if flat.size else ()):  # LAPACK refuses a 0-row matrix
        (factor,) = scipy.linalg.get_lapack_funcs(("geqrf",), (matrix,))
        packed[i], scales[i] = factor(matrix)[:2]
    batch = matrices.shape[:-2]
    results = [
        matrices.new_tensor(packed.reshape(values.shape), dtype=matrices.dtype),
        matrices.new_tensor(scales.reshape(batch + (min(m, n),)), dtype=matrices.dtype),
    ]
    if matrices.requires_grad:
        results = [
            matrices._apply("refused_derivative", (matrices, r), ("geqrf",)) for r in results
        ]
    return GeqrfResult(*results)


@autocast_op("orgqr")
def orgqr(input: Tensor, input2: Any) -> Tensor:  # noqa: A002 (torch's names)
    """torch's ``orgqr``: :func:`householder_product` of the reflectors ``input`` and their
    scales ``input2`` (the names torch's parser takes; its docs say ``tau``)."""
    return householder_product(input, input2)


@autocast_op("ormqr")
def ormqr(
    input: Tensor,  # noqa: A002 (torch's names: its parser's, where its docs say A, tau, other)
    input2: Any,
    input3: Any,
    left: bool = True,
    transpose: bool = False,
    *,
    out: Any = None,
) -> Tensor:
    """torch's ``ormqr``: ``other`` (``input3``) multiplied by the full orthogonal ``Q`` of
    the reflectors ``(A, tau)`` (``input``, ``input2``: :func:`geqrf`'s form): ``Q @ other``
    (``left``) or ``other @ Q``, with ``Q^T`` for ``transpose``. ``A`` ``[..., mn, k]``,
    ``mn`` the size of ``other``'s side; differentiable through all three, as torch's."""
    _no_out("ormqr", out)
    matrices = _matrices("ormqr", input)
    other = lift(matrices, input3, "ormqr")
    tau = lift(matrices, input2, "ormqr")
    if other.ndim < 2:
        raise ShapeError(f"ormqr: other must be [..., m, n], got {shape_text(other.shape)}")
    mn, columns = matrices.shape[-2:]
    side = other.shape[-2] if left else other.shape[-1]
    if mn != side or tau.ndim < 1 or tau.shape[-1] > min(mn, columns):
        raise ShapeError(
            f"ormqr: A of shape {shape_text(matrices.shape)}, tau of shape "
            f"{shape_text(tau.shape)} and other of shape {shape_text(other.shape)} do not fit "
            f"(A [..., mn, k] with mn other's {'rows' if left else 'columns'}, tau "
            "[..., <= min(mn, k)])"
        )
    if columns > mn:
        matrices = matrices[..., :, :mn]
    elif columns < mn:  # (the reflectors are A's first columns: the rest make identity)
        padding = matrices.new_zeros(matrices.shape[:-1] + (mn - columns,))
        matrices = cat([matrices, padding], -1)
    Q = householder_product(matrices, tau)  # noqa: N806 (the maths' name)
    if transpose:
        Q = Q.mT  # noqa: N806
    return Q @ other if left else other @ Q


def lu_factor_ex(
    A: Tensor,  # noqa: N803 (torch's name)
    *,
    pivot: bool = True,
    check_errors: bool = False,
    out: Any = None,
) -> Any:
    """torch's ``linalg.lu_factor_ex``: :func:`lu_factor`'s ``(LU, pivots)`` and LAPACK's
    ``info`` per matrix (``i`` when ``U[i-1, i-1]`` is the first zero on ``U``'s diagonal,
    else 0); ``check_errors`` raises for a nonzero one, as :func:`lu_factor` always does."""
    _no_out("linalg.lu_factor_ex", out)
    factors = _lu_factor("linalg.lu_factor_ex", A, pivot)
    info = lu_info(factors.LU)
    if check_errors:
        _check_lu_info("linalg.lu_factor_ex", info)
    return LUFactorExResult(*factors, info)


def _check_lu_info(op: str, info: Tensor) -> None:
    bad = [int(i) for i in info.flatten().tolist() if i]
    if bad:
        raise LinAlgError(
            f"{op}: U[{bad[0]},{bad[0]}] is zero (the matrix is singular) and using it on "
            "lu_solve would divide by zero; linalg.lu or linalg.lu_factor_ex factor it anyway "
            "(as torch's)"
        )


@autocast_op("linalg_lu_factor")
def lu_factor(A: Tensor, *, pivot: bool = True, out: Any = None) -> Any:  # noqa: N803
    """torch's ``linalg.lu_factor``: ``(LU, pivots)`` of each matrix of ``A`` ``[..., m, n]``
    by Gaussian elimination with partial pivoting, as LAPACK's ``getrf``: ``LU`` holds ``U``
    and, below the diagonal, ``L``'s multipliers; ``pivots`` (1-based, as LAPACK's) says which
    row was swapped with row ``i`` at step ``i``. :func:`lu_unpack` makes ``P, L, U`` of it.

    Written with tensor ops (a row swap by ``gather``, the Schur complement updated), so it
    runs on every backend and its gradient is that of the elimination, torch's for matrices of
    full rank. ``pivots`` are int32, as torch's (:func:`lu_unpack` and :func:`lu_solve` take
    no other dtype, as torch's).
    As torch on the CPU, ``pivot=False`` is refused; as torch's, a singular matrix (a zero on
    ``U``'s diagonal) is refused too (:func:`lu_factor_ex` and :func:`lu` factor it).

    >>> import retrograd as rg
    >>> LU, pivots = rg.linalg.lu_factor(rg.tensor([[1.0, 2.0], [3.0, 4.0]], dtype="float64"))
    >>> LU.tolist(), pivots.tolist()
    ([[3.0, 4.0], [0.3333333333333333, 0.6666666666666667]], [2, 2])
    """
    _no_out("linalg.lu_factor", out)
    factors = _lu_factor("linalg.lu_factor", A, pivot)
    _check_lu_info("linalg.lu_factor", lu_info(factors.LU))
    return factors


def _lu_factor(op: str, A: Any, pivot: bool) -> Any:  # noqa: N803 (torch's name)
    matrices = _matrices(op, A, complex_ok=True)
    if not pivot:
        raise InvalidArgumentError(
            f"{op}: LU without pivoting is not implemented (as torch's on the CPU)"
        )
    return LUFactorResult(*lu_factorize(matrices))


def lu_unpack(
    LU_data: Tensor,  # noqa: N803 (torch's names)
    LU_pivots: Tensor,  # noqa: N803
    unpack_data: bool = True,
    unpack_pivots: bool = True,
    *,
    out: Any = None,
) -> Any:
    """torch's ``lu_unpack``: ``(P, L, U)`` with ``A = P @ L @ U`` from :func:`lu_factor`'s
    ``(LU, pivots)``; ``L`` unit lower triangular ``[..., m, k]``, ``U`` upper ``[..., k,
    n]``, ``k = min(m, n)``. What is not unpacked is an empty tensor, as torch's."""
    _no_out("lu_unpack", out)
    lu = _matrices("lu_unpack", LU_data, complex_ok=True)
    _check_pivots("torch.lu_unpack: LU_pivots", LU_pivots)
    m, n = lu.shape[-2:]
    k = min(m, n)
    if tuple(LU_pivots.shape) != tuple(lu.shape[:-2]) + (k,):
        raise ShapeError(
            f"lu_unpack: LU_pivots of shape {shape_text(LU_pivots.shape)} do not fit LU_data "
            f"of shape {shape_text(lu.shape)} (expected {shape_text(lu.shape[:-2] + (k,))})"
        )
    empty = lu.new_zeros((0,))
    L = U = P = empty  # noqa: N806 (torch's names)
    rows = lu.new_tensor(np.arange(m), dtype="int64")
    if unpack_data:
        unit = (rows[:, None] == rows[None, :k]).to(lu.dtype)
        L = lu[..., :, :k].tril(-1) + unit  # noqa: N806
        U = lu[..., :k, :].triu()  # noqa: N806
    else:
        # torch's empty L and U are outputs of the unpacking all the same: they require grad
        # where LU does (they were constants here)
        L, U = lu.flatten()[:0], lu.flatten()[:0]  # noqa: N806
    if unpack_pivots:
        # the rows of P^T A in order: row i of the factored matrix is A's row perm[i]
        perm = rows.expand(tuple(LU_pivots.shape[:-1]) + (m,))
        swaps = LU_pivots.long() - 1  # (gather's index dtype)
        for i in range(k):
            p = swaps[..., i : i + 1]
            at_i, at_p = perm[..., i : i + 1], perm.gather(-1, p)
            perm = perm.where(rows != i, at_p).where((rows != p) | (rows == i), at_i)
        P = (rows[:, None] == perm[..., None, :]).to(lu.dtype)  # noqa: N806
    return LUUnpackResult(P, L, U)


def _check_pivots(what: str, pivots: Any) -> None:
    """Refuse pivots that are not an int32 tensor (:func:`lu_factor`'s), as torch's: a
    ``DTypeError`` saying ``what`` they are."""
    if not isinstance(pivots, Tensor) or pivots.dtype != "int32":
        raise DTypeError(
            f"{what} should be a Tensor of scalar type int32 (lu_factor's pivots), got "
            f"{getattr(pivots, 'dtype', type(pivots).__name__)}"
        )


@autocast_op("linalg_lu")
def lu(A: Tensor, *, pivot: bool = True, out: Any = None) -> Any:  # noqa: N803 (torch's name)
    """torch's ``linalg.lu``: ``(P, L, U)`` with ``A = P @ L @ U`` (:func:`lu_factor` then
    :func:`lu_unpack`); the gradients of ``L`` and ``U`` reach ``A``.

    >>> import retrograd as rg
    >>> P, L, U = rg.linalg.lu(rg.tensor([[1.0, 2.0], [3.0, 4.0]], dtype="float64"))
    >>> P.tolist(), U.tolist()
    ([[0.0, 1.0], [1.0, 0.0]], [[3.0, 4.0], [0.0, 0.6666666666666667]])
    """
    _no_out("linalg.lu", out)
    return LUResult(*lu_unpack(*_lu_factor("linalg.lu", A, pivot)))


@autocast_op("linalg_lu_solve")
def lu_solve(
    LU: Tensor,  # noqa: N803 (torch's names)
    pivots: Tensor,
    B: Any,  # noqa: N803
    *,
    left: bool = True,
    adjoint: bool = False,
    out: Any = None,
) -> Tensor:
    """torch's ``linalg.lu_solve``: ``X`` with ``A X = B`` for ``A = P L U`` given as
    :func:`lu_factor`'s ``(LU, pivots)`` (``A^H X = B`` with ``adjoint``, ``X A = B`` when not
    ``left``), by two triangular solves; the gradient reaches ``LU``'s two triangles and
    ``B``, as torch's.

    >>> import retrograd as rg
    >>> a = rg.tensor([[1.0, 2.0], [3.0, 4.0]], dtype="float64")
    >>> LU, piv = rg.linalg.lu_factor(a)
    >>> rg.linalg.lu_solve(LU, piv, rg.tensor([[5.0], [11.0]], dtype="float64")).tolist()
    [[1.0], [2.0]]
    """
    _no_out("linalg.lu_solve", out)
    factors = _square("linalg.lu_solve", LU, complex_ok=True)
    _check_pivots("linalg.lu_solve: pivots", pivots)
    rhs = lift(factors, B, "linalg.lu_solve")
    if rhs.dtype != factors.dtype:  # torch's rule (a complex LU and a real B too): no promotion
        raise MixedDTypeError(
            f"linalg.lu_solve: LU ({factors.dtype}) and B ({rhs.dtype}) must have the same dtype"
        )
    n = factors.shape[-1]
    if rhs.ndim < 2 or rhs.shape[-2 if left else -1] != n:
        raise ShapeError(
            f"linalg.lu_solve: B of shape {shape_text(rhs.shape)} does not fit LU of shape "
            f"{shape_text(factors.shape)} (B needs at least 2 dimensions and {n} "
            f"{'rows' if left else 'columns'})"
        )
    if not left:  # X A = B is A^H X^H = B^H (X A^H = B is A X^H = B^H)
        return _adjoint(lu_solve(factors, pivots, _adjoint(rhs), adjoint=not adjoint))
    P, L, U = lu_unpack(factors, pivots)  # noqa: N806 (torch's names)
    if adjoint:  # A^H = U^H L^H P^T
        y = solve_triangular(_adjoint(U), rhs, upper=False)
        return P @ solve_triangular(_adjoint(L), y, upper=True, unitriangular=True)
    y = solve_triangular(L, P.mT @ rhs, upper=False, unitriangular=True)
    return solve_triangular(U, y, upper=True)


def _adjoint(matrices: Tensor) -> Tensor:
    """The conjugate transpose of each matrix (the transpose of a real one, no conj op)."""
    return matrices.mH if matrices.is_complex() else matrices.mT


def _ldl_routine(name: str, matrix: np.ndarray, hermitian: bool) -> Any:
    """LAPACK's ``sytrf``/``sytrs`` (``hetrf``/``hetrs`` for a complex ``hermitian``) of
    ``matrix``'s dtype, the routines torch's CPU kernels call."""
    import scipy.linalg

    kind = "he" if hermitian and np.iscomplexobj(matrix) else "sy"
    (routine,) = scipy.linalg.get_lapack_funcs((kind + name,), (matrix,))
    return routine


def _recorded_without_derivative(op: str, inputs: Sequence[Tensor], result: Tensor) -> Tensor:
    """``result`` recorded on the ``inputs`` that require grad, with a backward that refuses
    as torch's ("derivative for aten::<op> is not implemented")."""
    for given in inputs:
        if given.requires_grad:
            result = given._apply("refused_derivative", (given, result), (op,))
    return result


def _ldl_factor(op: str, A: Any, hermitian: bool) -> LDLFactorExResult:  # noqa: N803
    matrices = _matrices(op, A, complex_ok=True)
    if matrices.shape[-1] != matrices.shape[-2]:
        raise ShapeError(
            f"{op}: A must be batches of square matrices, but they are "
            f"{matrices.shape[-2]} by {matrices.shape[-1]} matrices"
        )
    n = matrices.shape[-1]
    batch = matrices.shape[:-2]
    values = matrices.detach().numpy()
    flat = values.reshape((math.prod(batch), n, n))
    packed = np.zeros_like(flat)
    pivots = np.empty((flat.shape[0], n), np.int32)
    info = np.zeros(flat.shape[0], np.int32)
    for i, matrix in enumerate(flat if flat.size else ()):  # (LAPACK refuses n = 0)
        factor, ipiv, code = _ldl_routine("trf", matrix, hermitian)(matrix, lower=1)
        packed[i], pivots[i], info[i] = np.tril(factor), ipiv, code
    LD = matrices.new_tensor(packed.reshape(values.shape), dtype=matrices.dtype)  # noqa: N806
    return LDLFactorExResult(
        _recorded_without_derivative("linalg_ldl_factor_ex", (matrices,), LD),
        matrices.new_tensor(pivots.reshape(batch + (n,)), dtype="int32"),
        matrices.new_tensor(info.reshape(batch), dtype="int32"),
    )


def _check_ldl_info(op: str, info: Tensor) -> None:
    bad = [int(i) for i in info.flatten().tolist() if i]
    if bad:
        raise LinAlgError(
            f"{op}: D[{bad[0] - 1},{bad[0] - 1}] is exactly zero (the matrix is singular), so "
            "the factorization cannot solve with it (torch fails there with its 'Unknown "
            "error code: 1'); linalg.ldl_factor_ex without check_errors factors it anyway"
        )


def ldl_factor_ex(
    A: Tensor,  # noqa: N803 (torch's name)
    *,
    hermitian: bool = False,
    check_errors: bool = False,
    out: Any = None,
) -> Any:
    """torch's ``linalg.ldl_factor_ex``: :func:`ldl_factor`'s ``(LD, pivots)`` and LAPACK's
    ``info`` per matrix (int32: ``i`` when ``D[i-1, i-1]`` is exactly zero, else 0);
    ``check_errors`` raises a :class:`LinAlgError` for a nonzero one."""
    _no_out("linalg.ldl_factor_ex", out)
    result = _ldl_factor("linalg.ldl_factor_ex", A, hermitian)
    if check_errors:
        _check_ldl_info("linalg.ldl_factor_ex", result.info)
    return result


def ldl_factor(A: Tensor, *, hermitian: bool = False, out: Any = None) -> Any:  # noqa: N803
    """torch's ``linalg.ldl_factor``: ``(LD, pivots)``, the Bunch-Kaufman factorization
    ``A = P L D L^T P^T`` (``L D L^H`` for a complex ``hermitian``) of each symmetric matrix
    of ``A`` ``[..., n, n]``, read from its lower triangle, as LAPACK's ``sytrf`` (which
    torch's CPU kernel calls, here through SciPy): ``LD`` holds ``L``'s multipliers below
    the diagonal and ``D``'s 1x1 and 2x2 blocks on and beside it, its upper triangle zero;
    ``pivots`` (int32, 1-based) are LAPACK's (a negative pair marks a 2x2 block). A singular
    matrix is refused (:func:`ldl_factor_ex` factors it). As torch's, the result is recorded
    on ``A`` with a backward that refuses (torch has no derivative for it).

    >>> import retrograd as rg
    >>> LD, pivots = rg.linalg.ldl_factor(rg.tensor([[4.0, 2.0], [2.0, 3.0]], dtype="float64"))
    >>> LD.tolist(), pivots.tolist()
    ([[4.0, 0.0], [0.5, 2.0]], [1, 2])
    """
    _no_out("linalg.ldl_factor", out)
    result = _ldl_factor("linalg.ldl_factor", A, hermitian)
    _check_ldl_info("linalg.ldl_factor", result.info)
    return LDLFactorResult(result.LD, result.pivots)


def ldl_solve(
    LD: Tensor,  # noqa: N803 (torch's names)
    pivots: Tensor,
    B: Any,  # noqa: N803
    *,
    hermitian: bool = False,
    out: Any = None,
) -> Tensor:
    """torch's ``linalg.ldl_solve``: ``X`` with ``A X = B`` for ``A`` given as
    :func:`ldl_factor`'s ``(LD, pivots)``, by LAPACK's ``sytrs`` (``hetrs``); batch dims
    broadcast. As torch's, its backward refuses (torch has no derivative for it)."""
    _no_out("linalg.ldl_solve", out)
    factors = _matrices("linalg.ldl_solve", LD, complex_ok=True)
    _check_pivots("linalg.ldl_solve: pivots", pivots)
    if not isinstance(B, Tensor):
        raise DTypeError(f"linalg.ldl_solve: B must be a tensor, got {type(B).__name__}")
    n = factors.shape[-1]
    if (
        factors.shape[-2] != n
        or tuple(pivots.shape) != tuple(factors.shape[:-1])
        or B.ndim < 2
        or B.shape[-2] != n
    ):
        raise ShapeError(
            f"linalg.ldl_solve: LD of shape {shape_text(factors.shape)}, pivots of shape "
            f"{shape_text(pivots.shape)} and B of shape {shape_text(B.shape)} do not fit (LD "
            "[..., n, n], pivots [..., n], B [..., n, k])"
        )
    if B.dtype != factors.dtype:
        raise DTypeError(
            f"linalg.ldl_solve: B's dtype {B.dtype} is not LD's {factors.dtype} (torch "
            "requires them to match)"
        )
    try:
        batch = tuple(np.broadcast_shapes(factors.shape[:-2], B.shape[:-2]))
    except ValueError:
        raise ShapeError(
            f"linalg.ldl_solve: the batch dims of LD {shape_text(factors.shape)} and B "
            f"{shape_text(B.shape)} do not broadcast"
        ) from None
    k = B.shape[-1]
    count = math.prod(batch)
    packed = np.broadcast_to(factors.detach().numpy(), batch + (n, n)).reshape((count, n, n))
    swaps = np.broadcast_to(pivots.numpy(), batch + (n,)).reshape((count, n))
    rhs = np.broadcast_to(B.detach().numpy(), batch + (n, k)).reshape((count, n, k))
    solved = np.empty_like(rhs)
    for i in range(count if n and k else 0):
        routine = _ldl_routine("trs", packed[i], hermitian)
        solved[i], code = routine(packed[i], swaps[i], rhs[i], lower=1)
        if code < 0:  # (a pivot out of range: LAPACK's argument check)
            raise InvalidArgumentError(f"linalg.ldl_solve: LAPACK refused the pivots ({code})")
    if not n or not k:
        solved[...] = 0
    X = factors.new_tensor(solved.reshape(batch + (n, k)), dtype=factors.dtype)  # noqa: N806
    return _recorded_without_derivative("linalg_ldl_solve", (factors, B), X)


@autocast_op("linalg_matrix_exp")
def matrix_exp(A: Tensor) -> Tensor:  # noqa: N803 (torch's name)
    """torch's ``linalg.matrix_exp`` of each square matrix of ``A`` (SciPy's ``expm`` on
    NumPy; torch's own on torch). The gradient is the top-right block of ``exp([[A^T, g], [0,
    A^T]])``, as torch's.

    >>> import retrograd as rg
    >>> rg.linalg.matrix_exp(rg.zeros((2, 2), dtype="float64")).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    matrices = _square("linalg.matrix_exp", A, complex_ok=True)
    return matrices._apply("matrix_exp", (matrices,))


# -- solvers and products ------------------------------------------------------------------------
@autocast_op("linalg_lstsq")
def lstsq(
    A: Tensor,  # noqa: N803 (torch's name)
    B: Any,  # noqa: N803 (torch's name)
    rcond: float | None = None,
    *,
    driver: str | None = None,
) -> Any:
    """torch's ``linalg.lstsq``: ``(solution, residuals, rank, singular_values)`` for ``A``
    ``[..., m, n]`` and ``B`` ``[..., m, k]`` (or ``[..., m]``), the fields as torch's CPU
    default driver ``"gelsy"`` fills them (``residuals`` and ``singular_values`` empty,
    ``rank`` int64); ``"gelsd"`` and ``"gelss"`` also give the singular values and, for ``m >
    n`` and every ``A`` of full rank, the squared residual of each column; ``"gels"`` the
    residuals (``m > n``) and no rank, as torch's. The solution is the minimum-norm one,
    ``pinv(A) @ B`` with singular values at most ``rcond * largest`` dropped (``rcond``
    defaulting to ``eps * max(m, n)``), and so is its gradient (torch's also goes through
    ``pinv``); for a rank-deficient ``A`` gelsy's basic solution differs from it."""
    matrices = _matrices("linalg.lstsq", A, complex_ok=True)
    if driver not in (None, "gels", "gelsy", "gelsd", "gelss"):
        raise InvalidArgumentError(f"linalg.lstsq: unknown driver {driver!r}")
    rhs = lift(matrices, B, "linalg.lstsq")
    if not 0 <= matrices.ndim - rhs.ndim <= 1:  # torch's rule: no broadcast of A's batch
        raise ShapeError(
            f"linalg.lstsq: B of shape {shape_text(rhs.shape)} must have as many dimensions as "
            f"A of shape {shape_text(matrices.shape)}, or one fewer"
        )
    # a vector right-hand side only of exactly A's shape less its last dimension (torch's
    # rule); another of one dimension fewer is a batch of matrices
    vector = rhs.shape == matrices.shape[:-1]
    if rhs.ndim < 1 or (not vector and rhs.ndim < 2):
        raise ShapeError(
            f"linalg.lstsq: B must have at least 1 dimension, got shape {tuple(rhs.shape)}"
        )
    if not vector and rhs.ndim == matrices.ndim - 1:
        # (torch takes some of these, pairing entries of different batches, and refuses others)
        raise ShapeError(
            f"linalg.lstsq: B of shape {shape_text(rhs.shape)}, one dimension fewer than A of "
            f"shape {shape_text(matrices.shape)}, must be A's shape less its last dimension"
        )
    rows = rhs.shape[-1] if vector else rhs.shape[-2]
    if rows != matrices.shape[-2]:
        raise ShapeError(
            f"linalg.lstsq: A of shape {shape_text(matrices.shape)} and B of shape "
            f"{shape_text(rhs.shape)} have different numbers of rows"
        )
    if rhs.dtype != matrices.dtype:
        raise MixedDTypeError(
            f"linalg.lstsq: A ({matrices.dtype}) and B ({rhs.dtype}) must have the same dtype"
        )
    if rcond is None or driver == "gels":  # torch's gels (a QR solve) ignores rcond
        rcond = _eps(matrices.dtype) * max(matrices.shape[-2:])
    inverse = pinv(matrices, rtol=float(rcond))
    solution = (inverse @ rhs.unsqueeze_dim(-1)).squeeze_dim(-1) if vector else inverse @ rhs
    fixed = untracked(matrices)  # (detach() keeps a leaf's requires_grad, Burn's rule)
    empty = fixed.new_zeros((0,))
    empty = empty.real if empty.is_complex() else empty
    if driver == "gels":  # torch's: gels computes no rank
        rank = fixed.new_zeros((0,), dtype="int64")
    else:
        rank = matrix_rank(fixed, rtol=float(rcond))
    if driver not in ("gelsd", "gelss"):  # torch's: only the SVD drivers report these
        values = empty
    else:
        # torch's singular values are not differentiable (they required grad here, for an A
        # that is a leaf, and took a gradient)
        values = svdvals(fixed)
    m, n = matrices.shape[-2:]
    full_rank = driver == "gels" or bool((rank == n).all().item())
    # torch's empty residuals are an output of the solve all the same: they require grad
    # where A or B does, their gradient undefined (they were a constant here)
    source = matrices if matrices.requires_grad else rhs
    residuals = undefined_derivative(source, empty)
    if driver in ("gels", "gelsd", "gelss") and m > n and full_rank:
        # torch's: the squared residual of each column, a vector B read as one column
        columns = rhs.unsqueeze_dim(-1) if vector else rhs
        fitted = matrices @ (solution.unsqueeze_dim(-1) if vector else solution)
        difference = fitted - columns
        squares = difference.abs().square() if difference.is_complex() else difference.square()
        residuals = squares.sum(-2)
    return LstsqResult(solution, residuals, rank, values)


def solve_triangular(
    A: Tensor,  # noqa: N803 (torch's name)
    B: Any,  # noqa: N803 (torch's name)
    *,
    upper: bool,
    left: bool = True,
    unitriangular: bool = False,
    out: Any = None,
) -> Tensor:
    """torch's ``linalg.solve_triangular``: ``X`` with ``A X = B`` (``X A = B`` when not
    ``left``), reading only the ``upper`` (else lower) triangle of ``A`` (with ones on its
    diagonal when ``unitriangular``); the gradient reaches only that triangle, as torch's.

    >>> import retrograd as rg
    >>> a = rg.tensor([[2.0, 9.0], [1.0, 4.0]], dtype="float64")
    >>> rg.linalg.solve_triangular(a, rg.tensor([[2.0], [5.0]], dtype="float64"),
    ...                            upper=False).tolist()
    [[1.0], [1.0]]
    """
    _no_out("linalg.solve_triangular", out)
    matrices = _square("linalg.solve_triangular", A, complex_ok=True)
    rhs = lift(matrices, B, "linalg.solve_triangular")
    if rhs.ndim < 2:
        raise ShapeError(
            f"linalg.solve_triangular: B must have at least 2 dimensions, got shape "
            f"{shape_text(rhs.shape)}"
        )
    if rhs.shape == matrices.shape[:-1]:  # a batch of matrices here, never solve's vector
        rhs = rhs.expand(np.broadcast_shapes(matrices.shape[:-2], rhs.shape[:-2]) + rhs.shape[-2:])
    n, k = matrices.shape[-1], rhs.shape[-2 if left else -1]
    if k != n:
        equation = "AX = B" if left else "XA = B"
        raise ShapeError(
            f"linalg.solve_triangular: incompatible shapes of A and B for the equation "
            f"{equation} ({shape_text(matrices.shape)} and {shape_text(rhs.shape)})"
        )
    if rhs.dtype != matrices.dtype:  # torch's result takes A's dtype
        rhs = rhs.cast(matrices.dtype)
    if unitriangular:
        strict = matrices.triu(1) if upper else matrices.tril(-1)
        triangle = strict + _identity(matrices)
    else:
        triangle = matrices.triu() if upper else matrices.tril()
    try:
        return solve(triangle, rhs, left=left)
    except InvalidArgumentError:  # a zero pivot: torch's substitution gives inf and NaN
        if left:
            return _substitute(triangle, rhs, upper)
        return _substitute(triangle.mT, rhs.mT, not upper).mT


def _substitute(triangle: Tensor, rhs: Tensor, upper: bool) -> Tensor:
    """``X`` with ``triangle @ X = rhs`` by back- (``upper``) or forward substitution, one row
    at a time, dividing by each pivot (a zero one gives inf or NaN, as in torch)."""
    n = triangle.shape[-1]
    rows: dict[int, Tensor] = {}
    for i in reversed(range(n)) if upper else range(n):
        acc = rhs[..., i : i + 1, :]
        known = range(i + 1, n) if upper else range(i)
        if len(known):
            solved = cat([rows[j] for j in known], -2)
            acc = acc - triangle[..., i : i + 1, known.start : known.stop] @ solved
        rows[i] = acc / triangle[..., i : i + 1, i : i + 1]
    return cat([rows[i] for i in range(n)], -2)


@autocast_op("multi_dot")
def multi_dot(tensors: Sequence[Tensor], *, out: Any = None) -> Tensor:
    """torch's ``linalg.multi_dot``: the product of two or more matrices, the first may be a
    row vector and the last a column vector (their dims dropped from the result). The products
    are taken left to right (torch orders them by cost; the result is the same up to
    rounding)."""
    _no_out("linalg.multi_dot", out)
    if isinstance(tensors, Tensor):  # list() would take its rows for the matrices, silently
        raise DTypeError(
            "linalg.multi_dot: tensors must be a list or tuple of tensors, got a tensor of "
            f"shape {shape_text(tensors.shape)}"
        )
    tensors = list(tensors)
    if len(tensors) < 2:
        raise InvalidArgumentError(
            f"linalg.multi_dot: expected at least 2 tensors, got {len(tensors)}"
        )
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise DTypeError(f"linalg.multi_dot: argument {i} is a {type(t).__name__}")
        allowed = (1, 2) if i in (0, len(tensors) - 1) else (2,)
        if t.ndim not in allowed:
            raise ShapeError(
                f"linalg.multi_dot: tensor {i} must be "
                f"{'1-D or 2-D' if len(allowed) == 2 else '2-D'}, got shape {shape_text(t.shape)}"
            )
    first_vector, last_vector = tensors[0].ndim == 1, tensors[-1].ndim == 1
    mats = list(tensors)
    if first_vector:
        mats[0] = mats[0].unsqueeze_dim(0)
    if last_vector:
        mats[-1] = mats[-1].unsqueeze_dim(-1)
    for i in range(len(mats) - 1):
        if mats[i].shape[-1] != mats[i + 1].shape[-2]:
            raise ShapeError(
                f"linalg.multi_dot: tensors {i} and {i + 1} of shapes "
                f"{shape_text(tensors[i].shape)} and {shape_text(tensors[i + 1].shape)} cannot "
                "be multiplied"
            )
    result = mats[0]
    for m in mats[1:]:
        result = result @ m
    if last_vector:
        result = result.squeeze_dim(-1)
    if first_vector:
        result = result.squeeze_dim(0)
    return result


def cross(input: Tensor, other: Any, *, dim: int = -1, out: Any = None) -> Tensor:  # noqa: A002
    """torch's ``linalg.cross``: the cross product of 3-vectors along ``dim`` (default the
    last), the inputs broadcasting."""
    _no_out("linalg.cross", out)
    if not isinstance(input, Tensor):
        raise DTypeError(f"linalg.cross: expected a tensor, got {type(input).__name__}")
    if isinstance(other, Tensor) and other.ndim != input.ndim:
        # (torch's RuntimeError; the tensor method, API.md section 2's ``cross(other, d)``,
        # aligns an operand of fewer dims at the end)
        raise SizeMismatchError(
            f"linalg.cross: inputs must have the same number of dimensions, got shapes "
            f"{shape_text(input.shape)} and {shape_text(other.shape)}"
        )
    return input.cross(other, dim)


@autocast_op("linalg_vecdot")
def vecdot(x: Tensor, y: Any, *, dim: int = -1, out: Any = None) -> Tensor:
    """torch's ``linalg.vecdot``: ``sum(conj(x) * y)`` along ``dim``, the inputs
    broadcasting (the conjugate of a real ``x`` is ``x``)."""
    _no_out("linalg.vecdot", out)
    if not isinstance(x, Tensor):
        raise DTypeError(f"linalg.vecdot: expected a tensor, got {type(x).__name__}")
    if isinstance(y, Tensor) and y.dtype != x.dtype:  # torch's rule: no promotion
        raise MixedDTypeError(
            f"linalg.vecdot: x ({x.dtype}) and y ({y.dtype}) must have the same dtype"
        )
    if x.dtype not in FLOAT_DTYPES and not x.is_complex():  # (torch's RuntimeError)
        raise KernelDTypeError(
            f"linalg.vecdot: expected a floating point or complex tensor as input, got "
            f"{x.dtype} {shape_text(x.shape)}"
        )
    product = (x.conj() if x.is_complex() else x) * lift(x, y, "linalg.vecdot")
    return product.sum(normalize_dim("linalg.vecdot", dim, product.ndim))


def matmul(input: Tensor, other: Any, *, out: Any = None) -> Tensor:  # noqa: A002
    """torch's ``linalg.matmul`` (``torch.matmul``)."""
    _no_out("linalg.matmul", out)
    if not isinstance(input, Tensor):
        raise DTypeError(f"linalg.matmul: expected a tensor, got {type(input).__name__}")
    return input.matmul(other)


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: N803
    """torch's ``linalg.diagonal``: ``A.diagonal(offset, dim1, dim2)``, over the last two
    dims by default."""
    if not isinstance(A, Tensor):
        raise DTypeError(f"linalg.diagonal: expected a tensor, got {type(A).__name__}")
    return A.diagonal(offset, dim1, dim2)


@autocast_op("linalg_matrix_rank")
def matrix_rank(
    A: Tensor,  # noqa: N803 (torch's name)
    *older: Any,
    atol: float | None = None,
    rtol: float | None = None,
    hermitian: bool = False,
    out: Any = None,
    tol: float | None = None,
) -> Tensor:
    """torch's ``linalg.matrix_rank``: the number of singular values above ``max(atol, rtol *
    largest)`` (int64), the tolerances defaulting as :func:`pinv`'s. ``hermitian`` uses the
    absolute eigenvalues, as torch's. ``tol`` (torch's older form, also positional:
    ``matrix_rank(A, tol, hermitian=False)``, which was refused) is ``atol=tol, rtol=0``."""
    _no_out("linalg.matrix_rank", out)
    if older:
        if len(older) > 2 or tol is not None:
            raise ArgumentTypeError(
                f"linalg.matrix_rank: takes A, tol and hermitian by position, got "
                f"{1 + len(older)} positional arguments" + (" and tol=" if tol is not None else "")
            )
        tol = older[0]
        if tol is None:  # (torch's parser: its older form's tol is a number or a tensor)
            raise ArgumentTypeError("linalg.matrix_rank: tol given by position must not be None")
        if len(older) == 2:
            hermitian = older[1]
    if tol is not None:
        if atol is not None or rtol is not None:
            raise InvalidArgumentError("linalg.matrix_rank: give tol, or atol and rtol, not both")
        atol, rtol = tol, 0.0
    matrices = _matrices("linalg.matrix_rank", A, complex_ok=True).detach()
    values = eigvalsh(matrices).abs() if hermitian else svdvals(matrices)
    if not values.shape[-1]:
        return values.sum(-1).cast("int64")
    largest = values.amax(-1, keepdim=True)
    if isinstance(atol, Tensor) or isinstance(rtol, Tensor):
        tolerance = _tensor_tolerance(values, largest, atol, rtol, A.shape)
    else:
        if rtol is None:
            rtol = 0.0 if atol is not None and atol > 0 else _eps(A.dtype) * max(A.shape[-2:])
        tolerance = (largest * float(rtol)).clamp_min(float(atol or 0.0))
    return values.greater(tolerance).cast("int64").sum(-1)


def _tensor_tolerance(
    values: Tensor, largest: Tensor, atol: Any, rtol: Any, shape: tuple[int, ...]
) -> Tensor:
    """torch's ``max(atol, rtol * largest)`` where ``atol`` or ``rtol`` is a tensor of one
    tolerance per matrix (broadcasting over the batch dims): a missing ``rtol`` is 0 where
    ``atol > 0`` and ``eps * max(m, n)`` elsewhere, as torch's."""

    def column(tol: Any) -> Tensor:
        if not isinstance(tol, Tensor):  # (a number beside a tensor one: tol's rtol=0)
            tol = values.new_zeros(()) + float(tol)
        tol = lift(values, tol, "linalg.matrix_rank").detach()
        return tol.cast(values.dtype).unsqueeze_dim(-1)

    default = _eps(values.dtype) * max(shape[-2:])
    absolute = column(values.new_zeros(()) if atol is None else atol)
    if rtol is None:
        relative = (absolute > 0).logical_not().cast(values.dtype) * default
    else:
        relative = column(rtol)
    return (largest * relative).maximum(absolute)


_COND_ORDERS = (None, "fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)


@autocast_op("linalg_cond")
def cond(A: Tensor, p: Any = None, *, out: Any = None) -> Tensor:  # noqa: N803
    """torch's ``linalg.cond``: ``p`` ``None``/2 (largest over smallest singular value), -2
    (its inverse), or ``norm(A, p) * norm(inv(A), p)`` for ``"fro"``, ``"nuc"``, ``±1``,
    ``±inf`` (square ``A``)."""
    _no_out("linalg.cond", out)
    matrices = _matrices("linalg.cond", A, complex_ok=True)
    if matrices.numel() == 0:  # torch's: a condition number of 0 for each empty matrix
        if p not in _COND_ORDERS:
            raise InvalidArgumentError(
                f"linalg.cond: order {p!r} is not supported (expected None, 'fro', 'nuc', 1, "
                "-1, 2, -2, inf or -inf)"
            )
        if isinstance(p, str):  # (torch checks squareness first for these, not for numbers)
            _square("linalg.cond", matrices, complex_ok=True)
        # (real, as every condition number: it was complex for complex matrices)
        zeros = untracked(matrices).new_zeros(matrices.shape[:-2])
        return zeros.real if zeros.is_complex() else zeros
    if p is None or p in (2, -2):
        values = svdvals(matrices)
        largest, smallest = values[..., 0], values[..., -1]
        return largest / smallest if p != -2 else smallest / largest
    matrices = _square("linalg.cond", matrices, complex_ok=True)
    # torch's: a singular matrix's condition number in these norms is inf, not an error
    inverse, info = inv_ex(matrices)
    singular = info.not_equal(0)
    # (a failed inverse is NaN, which the nuclear norm's SVD refuses: zeros stand in for it)
    inverse = inverse.mask_fill(singular.unsqueeze_dim(-1).unsqueeze_dim(-1), 0.0)
    number = matrix_norm(matrices, p) * matrix_norm(inverse, p)
    return number.mask_fill(singular, math.inf)


def vander(x: Tensor, *, N: int | None = None) -> Tensor:  # noqa: N803 (torch's name)
    """torch's ``linalg.vander``: ``[..., n, N]`` of the powers ``x^0 .. x^(N-1)`` of each
    element of ``x`` ``[..., n]`` (``N`` defaulting to ``n``), as a cumulative product (exact
    gradient at zeros)."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"linalg.vander: expected a tensor, got {type(x).__name__}")
    if x.dtype == "bool":  # (torch's RuntimeError: floats, complex and integers only)
        raise KernelDTypeError(
            f"linalg.vander: supports floating point, complex and integer tensors, got bool "
            f"{shape_text(x.shape)}"
        )
    if x.ndim < 1:
        raise ShapeError("linalg.vander: x must have at least one dimension")
    n = x.shape[-1] if N is None else int(N)
    if n <= 1:  # (torch refuses N = 1 too, and a default N of one element or none)
        raise InvalidArgumentError(f"linalg.vander: N must be greater than 1, got {n}")
    column = x.unsqueeze_dim(-1)
    ones = column.new_zeros(column.shape).add_scalar(1.0) if x.is_float() else None
    if ones is None:
        ones = column.new_zeros(column.shape) + 1
    powers = column.expand(x.shape + (n - 1,)).cumprod(-1)

    return cat([ones, powers], -1)


# -- the _ex variants ----------------------------------------------------------------------------
def _lapack_info(matrices: Tensor, kind: str) -> np.ndarray:
    """LAPACK's ``info`` of each matrix (host arrays; computed only on the failure path):
    ``getrf``'s first exactly-zero pivot (1-based) or ``potrf``'s order of the first leading
    minor that is not positive-definite; 0 where the factorization succeeds."""
    import scipy.linalg

    wide = "complex128" if matrices.is_complex() else "float64"
    values = matrices.detach().cast(wide).numpy()
    flat = values.reshape((-1,) + values.shape[-2:])
    info = np.zeros(len(flat), np.int32)
    for i, a in enumerate(flat):
        if kind == "lu":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lu, _ = scipy.linalg.lu_factor(a, check_finite=False)
            zeros = np.flatnonzero(np.diag(lu) == 0)
            info[i] = zeros[0] + 1 if zeros.size else 0
        else:
            for k in range(1, a.shape[-1] + 1):
                try:
                    lower = np.tril(a[:k, :k], -1)
                    np.linalg.cholesky(np.tril(a[:k, :k]) + lower.conj().T)
                except np.linalg.LinAlgError:
                    info[i] = k
                    break
    return info.reshape(values.shape[:-2])


def _ex(op: str, compute: Any, matrices: Tensor, kind: str, check_errors: bool) -> Any:
    try:
        return compute(matrices), matrices.new_zeros(matrices.shape[:-2], dtype="int32")
    except LinAlgError:
        if check_errors:
            raise
    info = _lapack_info(matrices, kind)
    failed = info != 0
    # the failing matrices are replaced by the identity for the computation and their
    # results are NaN (torch's LAPACK leaves partial results there)
    mask = lift(matrices, failed.reshape(failed.shape + (1, 1)), op)
    result = compute(matrices.where(mask.logical_not(), _identity(matrices)))
    nan_mask = mask.expand(mask.shape[:-2] + result.shape[-2:]) if result.ndim >= 2 else mask
    return result.mask_fill(nan_mask, math.nan), lift(matrices, info, op)


@autocast_op("linalg_inv")
def inv_ex(A: Tensor, *, check_errors: bool = False, out: Any = None) -> Any:  # noqa: N803
    """torch's ``linalg.inv_ex``: ``(inverse, info)``, ``info`` LAPACK's (0, or the 1-based
    position of the first zero pivot) for each matrix, int32 as torch's; a singular matrix's
    inverse is NaN (torch's holds LAPACK's partial result), and raises
    ``rg.linalg.LinAlgError`` when ``check_errors``."""
    _no_out("linalg.inv_ex", out)
    matrices = _square("linalg.inv_ex", A, complex_ok=True)
    return InvExResult(*_ex("linalg.inv_ex", inv, matrices, "lu", check_errors))


@autocast_op("linalg_cholesky")
def cholesky_ex(
    A: Tensor,  # noqa: N803 (torch's name)
    *,
    upper: bool = False,
    check_errors: bool = False,
    out: Any = None,
) -> Any:
    """torch's ``linalg.cholesky_ex``: ``(L, info)``, ``info`` the order of the first leading
    minor that is not positive-definite (0 for none), int32; a failed factor is NaN."""
    _no_out("linalg.cholesky_ex", out)
    matrices = _square("linalg.cholesky_ex", A, complex_ok=True)
    return CholeskyExResult(
        *_ex(
            "linalg.cholesky_ex", lambda m: cholesky(m, upper=upper), matrices, "chol", check_errors
        )
    )


def solve_ex(
    A: Tensor,  # noqa: N803 (torch's name)
    B: Any,  # noqa: N803 (torch's name)
    *,
    left: bool = True,
    check_errors: bool = False,
    out: Any = None,
) -> Any:
    """torch's ``linalg.solve_ex``: ``(result, info)`` of :func:`solve`, ``info`` as
    :func:`inv_ex`'s; a singular matrix's solution is NaN."""
    _no_out("linalg.solve_ex", out)
    matrices = _square("linalg.solve_ex", A, complex_ok=True)
    try:
        result = solve(matrices, B, left=left)
        return SolveExResult(result, matrices.new_zeros(matrices.shape[:-2], dtype="int32"))
    except LinAlgError:
        if check_errors:
            raise
    info = _lapack_info(matrices, "lu")
    # (an array: for one matrix, ``info != 0`` is a NumPy scalar, which lift refuses)
    failed = lift(matrices, np.asarray(info != 0), "linalg.solve_ex")
    safe = matrices.where(failed.reshape(failed.shape + (1, 1)).logical_not(), _identity(matrices))
    result = solve(safe, B, left=left)
    shape = failed.shape + (1,) * (result.ndim - failed.ndim)
    info_tensor = lift(matrices, info, "linalg.solve_ex")
    return SolveExResult(result.mask_fill(failed.reshape(shape), math.nan), info_tensor)


# Arguments no check foresaw (a str or None for a tensor, a str for a size) get an error of
# the hierarchy naming the function (errors.guard), as rg.* and nn.functional's do.
#: torch's ``out=`` for every function here that takes one (in the result's own dtype, as
#: torch's linalg kernels require): written by :func:`accepts_out`, so the function itself
#: never sees it
for _name in _TAKES_OUT:
    globals()[_name] = _accepts_out(
        _name if _name in _LAPACK_NAMES else f"linalg.{_name}", same_dtype=True
    )(globals()[_name])
_guard_namespace(globals(), __all__)


# -- torch's deprecated Tensor forms ---------------------------------------------------------
# ``Tensor.qr``/``svd``/``lu_solve`` (and so ``rg.qr``/``svd``/``lu_solve``), written over the
# functions above: they are installed on ``Tensor`` here, as the tensor layer below cannot
# import this module.
#: torch's ``torch.return_types.qr`` and ``svd`` (of the deprecated ``torch.qr``/``torch.svd``)
LegacyQRResult = namedtuple("qr", ["Q", "R"])
LegacySVDResult = namedtuple("svd", ["U", "S", "V"])


def _tensor_qr(self: Tensor, some: bool = True) -> Any:
    """torch's deprecated ``qr``: ``(Q, R)`` of ``rg.linalg.qr(self, "reduced" if some else
    "complete")`` (Glow's ``InvConv2d`` and other flows still call it)."""
    return LegacyQRResult(*qr(self, "reduced" if some else "complete"))


def _tensor_svd(self: Tensor, some: bool = True, compute_uv: bool = True) -> Any:
    """torch's deprecated ``svd``: ``(U, S, V)`` with ``self = U diag(S) V^H`` (``V``, not
    ``rg.linalg.svd``'s ``Vh``: its conjugate transpose), reduced when ``some``; without
    ``compute_uv``, ``S`` alone and zero ``U`` ``[..., m, m]`` and ``V`` ``[..., n, n]``, as
    torch's."""
    if not compute_uv:
        values = svdvals(self)
        m, n = self.shape[-2:]
        batch = tuple(self.shape[:-2])
        return LegacySVDResult(
            self.new_zeros((*batch, m, m)).detach(),
            values,
            self.new_zeros((*batch, n, n)).detach(),
        )
    u, values, vh = svd(self, full_matrices=not some)
    return LegacySVDResult(u, values, vh.mH)


def _tensor_lu_solve(self: Tensor, LU_data: Any, LU_pivots: Any) -> Any:  # noqa: N803
    """torch's deprecated ``lu_solve``: ``X`` with ``A X = self`` for ``A``'s
    ``(LU_data, LU_pivots)`` of :meth:`~retrograd.Tensor.lu` (``rg.linalg.lu_solve(LU,
    pivots, B)``)."""
    return lu_solve(LU_data, LU_pivots, self)


# -- low-rank factorizations (torch.svd_lowrank, torch.pca_lowrank: top level in torch) ---
def svd_lowrank(A: Any, q: int | None = 6, niter: int | None = 2, M: Any = None) -> tuple:  # noqa: N803 (torch's names)
    """``(U, S, V)`` of rank ``q`` with ``A - M ≈ U diag(S) V^T`` by torch's randomized
    method (Halko et al. 2009, algorithm 5.1): a Gaussian sketch of ``q`` columns drawn by
    ``rg.randn``, refined by ``niter`` subspace iterations, so it is exact only where ``A - M``
    has rank at most ``q``, and a program seeded as torch's draws torch's sketch.
    Differentiable."""
    op = "svd_lowrank"
    matrix = _matrix_argument(op, A)
    if matrix.ndim < 2:
        raise ShapeError(f"{op}: A must have at least 2 dimensions, got {shape_text(matrix.shape)}")
    q = 6 if q is None else q
    if not isinstance(q, numbers.Integral) or isinstance(q, bool) or q < 0:
        raise InvalidArgumentError(f"{op}: q must be a non-negative int, got {q!r}")
    niter = _subspace_iterations(op, niter)
    if M is not None:
        M = _matrix_argument(op, M).broadcast_to(matrix.shape)  # noqa: N806
    m, n = matrix.shape[-2:]
    if m < n:  # the method wants a tall matrix: factor the conjugate transpose
        matrix = matrix.mH
        M = None if M is None else M.mH  # noqa: N806
    basis = _approximate_basis(matrix, int(q), niter, M)
    projected = basis.mH @ matrix
    if M is not None:
        projected = projected - basis.mH @ M
    left, singular, right_h = svd(projected, full_matrices=False)
    left, right = basis @ left, right_h.mH
    return (right, singular, left) if m < n else (left, singular, right)


def pca_lowrank(A: Any, q: int | None = None, center: bool = True, niter: int = 2) -> tuple:  # noqa: N803
    """``(U, S, V)`` of the principal components of the rows of ``A`` (centered by the column
    means with ``center``): ``q`` of them, ``min(6, m, n)`` by default, by
    :func:`svd_lowrank`'s randomized method (as torch's). Differentiable."""
    op = "pca_lowrank"
    matrix = _matrix_argument(op, A)
    if matrix.ndim < 2:
        raise ShapeError(f"{op}: A must have at least 2 dimensions, got {shape_text(matrix.shape)}")
    m, n = matrix.shape[-2:]
    q = min(6, m, n) if q is None else q
    if not isinstance(q, numbers.Integral) or isinstance(q, bool) or not 0 <= q <= min(m, n):
        raise InvalidArgumentError(
            f"{op}: q must be an int between 0 and min(m, n) = {min(m, n)}, got {q!r}"
        )
    niter = _subspace_iterations(op, niter)
    if center:
        matrix = matrix - matrix.mean(dim=-2, keepdim=True)
    return svd_lowrank(matrix, int(q), niter=niter)


def _subspace_iterations(op: str, niter: Any) -> int:
    niter = 2 if niter is None else niter
    if not isinstance(niter, numbers.Integral) or isinstance(niter, bool) or niter < 0:
        raise InvalidArgumentError(f"{op}: niter must be a non-negative int, got {niter!r}")
    return int(niter)


#: what draws the low-rank methods' Gaussian sketch: the package installs ``rg.randn`` as it
#: is when called (:func:`draw_sketches_with`), as torch's method calls ``torch.randn``, so a
#: program that seeds or replaces it draws torch's sketch
_SKETCH_DRAW = [_creation_randn]


def draw_sketches_with(draw: Any) -> None:
    """Make ``draw(n, q, dtype=..., device=...)`` draw :func:`svd_lowrank`'s sketches."""
    _SKETCH_DRAW[0] = draw


def _approximate_basis(matrix: Any, q: int, niter: int, shift: Any) -> Any:
    """An orthonormal basis ``Q`` (``[..., m, min(m, q)]``) of the range of ``matrix -
    shift``, as torch's ``get_approximate_basis``."""

    def times(factor: Any, conjugate: bool = False) -> Any:
        operand = matrix.mH if conjugate else matrix
        product = operand @ factor
        if shift is not None:
            product = product - (shift.mH if conjugate else shift) @ factor
        return product

    sketch = _SKETCH_DRAW[0](matrix.shape[-1], q, dtype=matrix.dtype, device=matrix.device)
    basis = qr(times(sketch)).Q
    for _ in range(niter):
        basis = qr(times(basis, conjugate=True)).Q
        basis = qr(times(basis)).Q
    return basis


def _matrix_argument(op: str, value: Any) -> Tensor:
    if not isinstance(value, Tensor):
        raise DTypeError(f"{op}: A must be a tensor, got {type(value).__name__}")
    if not (value.is_floating_point() or value.is_complex()):  # (the sketch is a float one)
        raise DTypeError(f"{op}: expected a floating point tensor, got {value.dtype}")
    return value


_checked_triangular_solve = Tensor.triangular_solve


def _tensor_triangular_solve(
    self: Tensor,
    A: Any,  # noqa: N803 (torch's name)
    upper: bool = True,
    transpose: bool = False,
    unitriangular: bool = False,
) -> Any:
    """torch's deprecated ``triangular_solve`` (the tensor layer's, which checks the
    arguments); at a zero on the diagonal, torch's substitution gives inf and NaN where the
    general solve refuses, so that case is :func:`solve_triangular`'s, as ``linalg``'s."""
    try:
        return _checked_triangular_solve(self, A, upper, transpose, unitriangular)
    except LinAlgError:
        matrices = lift(self, A, "triangular_solve")
        coefficient = matrices.mT if transpose else matrices  # A^T's triangle is the other
        solution = solve_triangular(
            coefficient, self, upper=upper != transpose, unitriangular=unitriangular
        )
        return TriangularSolveResult(solution, matrices.clone())


_tensor_qr.__name__ = _tensor_qr.__qualname__ = "qr"
_tensor_svd.__name__ = _tensor_svd.__qualname__ = "svd"
_tensor_lu_solve.__name__ = _tensor_lu_solve.__qualname__ = "lu_solve"
# torch's LAPACK-named forms, outside ``__all__``, and the Tensor forms above are guarded as
# ``__all__``'s are (the Tensor's were installed after its own methods were guarded)
_guard_namespace(globals(), ["geqrf", "orgqr", "ormqr", "svd_lowrank", "pca_lowrank"])
Tensor.qr = _guard("qr", _tensor_qr, Tensor, "Tensor.qr")
Tensor.svd = _guard("svd", _tensor_svd, Tensor, "Tensor.svd")
_tensor_triangular_solve.__name__ = _tensor_triangular_solve.__qualname__ = "triangular_solve"
Tensor.triangular_solve = _guard(
    "triangular_solve", _tensor_triangular_solve, Tensor, "Tensor.triangular_solve"
)
Tensor.lu_solve = _guard("lu_solve", _tensor_lu_solve, Tensor, "Tensor.lu_solve")
Tensor.geqrf = geqrf
Tensor.orgqr = orgqr
Tensor.ormqr = ormqr
