"""torch's vector and matrix norms (``rg.linalg.vector_norm``, ``matrix_norm``, ``norm``)
and ``Tensor.norm``'s dispatch among them: in the tensor layer, which ``Tensor.norm`` belongs
to, and re-exported by :mod:`retrograd.linalg`."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from ..backend.protocol import COMPLEX_DTYPES, FLOAT_DTYPES
from ..errors import DTypeError, InvalidArgumentError, KernelDTypeError, ShapeError, shape_text
from ._dispatch import TensorBase as Tensor
from ._dispatch import int_dims, normalize_dim, result_dtype, stood_for
from .dtypes import canonical_dtype

__all__ = ["matrix_norm", "norm", "tensor_norm", "vector_norm"]

_HALF_DTYPES = ("float16", "bfloat16")


def _no_out(op: str, out: Any) -> None:
    if out is not None:
        raise InvalidArgumentError(
            f"{op}: out= is not supported (tensors are values here); assign the result"
        )


def _singular_values(A: Tensor) -> Tensor:  # noqa: N803 (torch's name)
    """``rg.linalg.svdvals`` (the ``S`` the ``linalg_svd`` kernel packs after ``U``)."""
    m, n = A.shape[-2:]
    k = min(m, n)
    packed = A._apply("linalg_svd", (A,), (False,))
    values = packed[..., m * k : m * k + k]
    return values.real if values.is_complex() else values  # real, packed with complex U, Vh


def _norm_input(op: str, x: Any, dtype: Any) -> Tensor:
    """``x`` cast to ``dtype``, under torch's rules (each refusal torch's ``RuntimeError``):
    a float or complex input, ``dtype`` of its kind (complex for a complex input), a cast that
    does not narrow."""
    x = stood_for(x)
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: expected a tensor, got {type(x).__name__}")
    kinds = COMPLEX_DTYPES if x.is_complex() else FLOAT_DTYPES
    if x.dtype not in kinds:  # (before dtype=, which does not make an int input valid)
        raise KernelDTypeError(
            f"{op}: expected a floating point or complex tensor as input, got {x.dtype} of "
            f"shape {shape_text(x.shape)}"
        )
    if dtype is not None:
        name = canonical_dtype(op, dtype)
        if name not in kinds:
            kind = "complex for complex" if x.is_complex() else "real floating point for real"
            raise KernelDTypeError(f"{op}: dtype should be {kind} inputs, got {dtype}")
        if result_dtype(x.dtype, name) != name:  # torch: a cast that does not narrow
            raise KernelDTypeError(
                f"{op}: the dtype of the input ({x.dtype}) should be convertible without "
                f"narrowing to the specified dtype ({name})"
            )
        x = x.cast(name)
    return x


def _reduced_dims(op: str, dim: Any, ndim: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(ndim))
    dims = int_dims(op, dim)
    if not dims:
        return tuple(range(ndim))
    normalized = sorted({normalize_dim(op, d, max(ndim, 1)) for d in dims})
    if len(normalized) != len(dims):
        raise ShapeError(f"{op}: dimensions {list(dims)} repeat")
    return tuple(normalized)


def _drop(x: Tensor, dims: tuple[int, ...], keepdim: bool) -> Tensor:
    if keepdim:
        return x
    return x.reshape(tuple(n for axis, n in enumerate(x.shape) if axis not in dims))


def _vector_norm(x: Tensor, ord: float, dims: tuple[int, ...], keepdim: bool) -> Tensor:  # noqa: A002
    """The ``ord``-norm over ``dims``, composed of differentiable ops whose gradient is
    torch's ``norm_backward``: zero at a zero vector, zero at the zero entries (``ord < 1``)."""
    # a 0-d input stays 0-d, keepdim or not (torch's)
    squeeze = not x.ndim
    if squeeze:
        x, dims, keepdim = x.reshape((1,)), (0,), True
    # torch accumulates a half-precision norm in float32: in 16 bits the squares of entries
    # under ~1e-4 (float16) flush to 0, and a small vector's norm came out 0
    given = x.dtype
    if given in _HALF_DTYPES:
        x = x.cast("float32")
    magnitude = x.abs() if abs(ord) == math.inf else None
    if ord == 2:
        # one op whose rule is torch's norm_backward (0 at a zero vector, its own derivative
        # NaN there), reading x and the norm (7 December: a composition held |x| beside x)
        out = x._apply("norm2", (x,), (dims,))
    elif abs(ord) == math.inf:
        # torch's backward splits the gradient among the entries at the norm, or among the
        # NaNs when it is NaN (whose sign, 0, then gives them none)
        out = magnitude._norm_extremum("amax" if ord > 0 else "amin", dims)
    elif ord == 0:
        # the count has no gradient (a NaN counts, as torch's); the zero term keeps the
        # result in the graph, as torch's (every entry masked: NaNs too)
        count = x.not_equal(0.0).cast(x.dtype).sum(dims, keepdim=True)
        everywhere = x.equal(x).logical_or(x.isnan())
        out = count + x.mask_fill(everywhere, 0.0).sum(dims, keepdim=True)
    else:
        # one op on the backend's norm kernel, whose rule is torch's norm_backward: as a
        # sum of |x| or of powers its float32 result was a few ulps off torch's (164.38943
        # for torch's 164.38950, the 1-norm of 210 normal entries). Over dims of size 1 the
        # kernel gives |x| itself, as torch's (exact at subnormal and huge entries), and the
        # rule stays torch's: NaN at an infinite entry for ord 3, where |x|'s was its sign
        out = x._apply("vector_norm", (x,), (ord, dims))
    out = _drop(out.cast(given), dims, keepdim)
    return out.reshape(()) if squeeze else out


def vector_norm(
    x: Tensor,
    ord: float = 2,  # noqa: A002 (torch's name)
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    dtype: Any = None,
    out: Any = None,
) -> Tensor:
    """torch's ``linalg.vector_norm``: ``(sum |x|^ord)^(1/ord)`` over ``dim`` (every element
    when ``None``), ``ord`` any number, ``inf`` (max ``|x|``), ``-inf`` (min), 0 (the count of
    non-zeros). Differentiable, with torch's subgradients: 0 at a zero vector, and 0 at zero
    entries for ``ord < 1``.

    >>> import retrograd as rg
    >>> rg.linalg.vector_norm(rg.tensor([3.0, -4.0], dtype="float64")).item()
    5.0
    >>> rg.linalg.vector_norm(rg.tensor([[1.0, -2.0], [0.0, 3.0]]), ord=1, dim=1).tolist()
    [3.0, 3.0]
    """
    _no_out("linalg.vector_norm", out)
    if isinstance(x, Tensor) and x.is_complex():  # the norm of a complex vector: of |x|
        x = _norm_input("linalg.vector_norm", x, dtype).abs()
        dtype = None
    x = _norm_input("linalg.vector_norm", x, dtype)
    if isinstance(ord, str) or not isinstance(ord, numbers.Real) or isinstance(ord, bool):
        raise InvalidArgumentError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    dims = _reduced_dims("linalg.vector_norm", dim, x.ndim)
    if ord < 0 or ord == math.inf:
        empty = [d for d in dims if x.ndim and x.shape[d] == 0]
        if empty or (x.ndim and not x.numel() and dim is None):
            raise ShapeError(
                f"linalg.vector_norm: cannot compute the {ord} norm over an empty dimension of "
                f"a tensor of shape {shape_text(x.shape)}"
            )
    return _vector_norm(x, float(ord), dims, keepdim)


_MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)


def matrix_norm(
    A: Tensor,  # noqa: N803 (torch's name)
    ord: Any = "fro",  # noqa: A002 (torch's name)
    dim: tuple[int, int] = (-2, -1),
    keepdim: bool = False,
    *,
    dtype: Any = None,
    out: Any = None,
) -> Tensor:
    """torch's ``linalg.matrix_norm`` over the two dims ``dim``: ``"fro"``, ``"nuc"`` (the
    sum of the singular values), ``2``/``-2`` (the largest/smallest singular value), ``1``/
    ``-1`` (max/min column sum of ``|A|``), ``inf``/``-inf`` (max/min row sum).
    Differentiable; through the singular values (``"nuc"``, ``±2``) the gradient is torch's
    ``svd_backward``, defined where they are distinct.

    >>> import retrograd as rg
    >>> a = rg.tensor([[1.0, -2.0], [3.0, 4.0]], dtype="float64")
    >>> [rg.linalg.matrix_norm(a, o).item() for o in (1, float("inf"), "fro")]
    [6.0, 7.0, 5.477225575051661]
    """
    _no_out("linalg.matrix_norm", out)
    if isinstance(A, Tensor) and A.is_complex() and dtype is not None:  # a complex dtype=
        A = _norm_input("linalg.matrix_norm", A, dtype)  # noqa: N806
        dtype = None
    if isinstance(A, Tensor) and A.is_complex() and dtype is None and ord not in ("nuc", 2, -2):
        # the norms of the entries' magnitudes, as torch's ("fro", the row and column sums);
        # those of the singular values are of the complex matrix itself (below)
        A = A.abs()  # noqa: N806
    if not (isinstance(A, Tensor) and A.is_complex() and dtype is None):
        A = _norm_input("linalg.matrix_norm", A, dtype)  # noqa: N806
    if A.ndim < 2:
        raise ShapeError(
            f"linalg.matrix_norm: the input must have at least 2 dimensions, got shape "
            f"{shape_text(A.shape)}"
        )
    if isinstance(dim, numbers.Integral) or len(tuple(dim)) != 2:
        raise ShapeError(f"linalg.matrix_norm: dim must be a 2-tuple of ints, got {dim!r}")
    d0, d1 = (normalize_dim("linalg.matrix_norm", d, A.ndim) for d in dim)
    if d0 == d1:
        raise ShapeError(f"linalg.matrix_norm: dims must be different, got {dim!r}")
    if isinstance(ord, bool) or not any(
        ord == o and isinstance(ord, str) == isinstance(o, str) for o in _MATRIX_ORDS
    ):
        raise InvalidArgumentError(
            f"linalg.matrix_norm: order {ord!r} is not supported (expected 'fro', 'nuc', "
            "1, -1, 2, -2, inf or -inf)"
        )
    if ord == "fro":
        return _vector_norm(A, 2.0, tuple(sorted((d0, d1))), keepdim)
    if ord in ("nuc", 2, -2):
        rest = [d for d in range(A.ndim) if d not in (d0, d1)]
        values = _singular_values(A.permute(*rest, d0, d1))
        # (no singular values: torch's largest is 0, the identity of a maximum of
        # non-negative values, as its sum; its smallest is refused)
        if ord == "nuc" or (ord == 2 and values.shape[-1] == 0):
            result = values.sum(-1)
        else:
            result = values.amax(-1) if ord == 2 else values.amin(-1)
        if keepdim:
            result = result.reshape(tuple(1 if d in (d0, d1) else n for d, n in enumerate(A.shape)))
        return result
    if abs(ord) == math.inf:
        d0, d1 = d1, d0
    sums = A.abs().sum((d0,), keepdim=True)
    if ord > 0:  # (no columns, or rows: torch's largest sum is 0, as their sum)
        result = sums.amax((d1,), keepdim=True) if sums.shape[d1] else sums.sum((d1,), True)
    else:
        result = sums.amin((d1,), keepdim=True)
    return _drop(result, tuple(sorted((d0, d1))), keepdim)


def norm(
    A: Tensor,  # noqa: N803 (torch's name)
    ord: Any = None,  # noqa: A002 (torch's name)
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    dtype: Any = None,
    out: Any = None,
) -> Tensor:
    """torch's ``linalg.norm``: a matrix norm (:func:`matrix_norm`) when ``ord`` is given
    with two ``dim`` (or none, for a 2-D input), else a vector norm (:func:`vector_norm`,
    ``ord`` 2 when ``None``: the Frobenius norm of a matrix); a string ``ord`` is a matrix
    norm's."""
    _no_out("linalg.norm", out)
    A = stood_for(A)  # noqa: N806 (torch's name)
    if not isinstance(A, Tensor):
        raise DTypeError(f"linalg.norm: expected a tensor, got {type(A).__name__}")
    dims = None if dim is None else int_dims("linalg.norm", dim)
    if dims is not None and len(dims) not in (1, 2):
        raise ShapeError(
            f"linalg.norm: if dim is specified, it must be of length 1 or 2, got {list(dims)}"
        )
    if dims is None and ord is not None and A.ndim not in (1, 2):
        raise ShapeError(
            f"linalg.norm: if dim is not specified but ord is, the input must be 1-D or 2-D, "
            f"got shape {shape_text(A.shape)}"
        )
    if isinstance(ord, str) or (
        ord is not None and (len(dims) == 2 if dims is not None else A.ndim == 2)
    ):
        return matrix_norm(A, ord, dims if dims is not None else (0, 1), keepdim, dtype=dtype)
    return vector_norm(A, 2 if ord is None else ord, dims, keepdim, dtype=dtype)


def tensor_norm(x: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False,
                dtype: Any = None) -> Tensor:  # fmt: skip
    """``Tensor.norm`` / ``torch.norm``'s dispatch: ``"fro"`` over at most two dims is the
    2-norm of the elements, another string a :func:`matrix_norm` (over every dim when
    ``dim`` is ``None``), a number (or ``None``: 2) a :func:`vector_norm`."""
    if isinstance(p, str):
        if p == "fro" and (dim is None or isinstance(dim, numbers.Integral) or len(dim) <= 2):
            return vector_norm(x, 2, dim, keepdim, dtype=dtype)
        dims = tuple(range(x.ndim)) if dim is None else dim
        return matrix_norm(x, p, dims, keepdim, dtype=dtype)
    return vector_norm(x, 2.0 if p is None else p, dim, keepdim, dtype=dtype)
