"""Reductions and contractions: sums, means, extrema (with their indices), cumulative ops,
sorting, top-k, variance and the matrix product.

:class:`ReduceMixin` needs one primitive from the class it is mixed into:
``_apply(op, inputs, params=())`` (:func:`retrograd.tensor._dispatch.apply`); it reads
``shape``, ``ndim`` and ``numel()``, and checks dimensions and sizes before the backend runs
(dims arrive at the backend normalized; empty extrema are refused, as in PyTorch).
"""

from __future__ import annotations

import math
import numbers
from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

from ..backend.protocol import default_float_dtype
from ..errors import InvalidArgumentError, ShapeError, shape_text
from . import norms
from ._dispatch import TensorOp, lift, normalize_dim, promote, untracked

__all__ = [
    "CummaxResult",
    "CumminResult",
    "MaxResult",
    "MedianResult",
    "MinResult",
    "ReduceMixin",
    "SortResult",
    "TopkResult",
    "topk",
]

#: torch's ``torch.return_types``: named ``(values, indices)`` pairs.
MaxResult = namedtuple("max", ["values", "indices"])
MinResult = namedtuple("min", ["values", "indices"])
SortResult = namedtuple("sort", ["values", "indices"])
TopkResult = namedtuple("topk", ["values", "indices"])
CummaxResult = namedtuple("cummax", ["values", "indices"])
CumminResult = namedtuple("cummin", ["values", "indices"])
MedianResult = namedtuple("median", ["values", "indices"])

_EMPTY_REFUSED = ("max_dim", "min_dim", "argmax", "argmin")
MEAN = TensorOp("mean", floats=True)
MEAN_DIM = TensorOp("mean_dim", floats=True)


class ReduceMixin:
    """Reductions along all or one dimension; needs ``_apply`` (see the module docstring)."""

    __slots__ = ()
    _apply: Callable[..., Any]  # the one primitive: retrograd.tensor._dispatch.apply
    shape: tuple[int, ...]
    ndim: int

    def _reduce_dim(self, op: str, dim: int) -> int:
        """``dim`` normalized; an empty dimension is refused for extrema and arg-extrema."""
        d = normalize_dim(op, dim, self.ndim)
        if op in _EMPTY_REFUSED and self.shape[d] == 0:
            raise ShapeError(f"{op}: dimension {dim} of shape {shape_text(self.shape)} is empty")
        return d

    def _nonempty(self, op: str) -> Any:
        if self.numel() == 0:
            raise ShapeError(
                f"{op}: cannot reduce an empty tensor of shape {shape_text(self.shape)}"
            )
        return self

    # -- over all elements --------------------------------------------------------------------
    def sum(
        self, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, dtype: Any = None
    ) -> Any:
        """Sum of all elements, as a 0-d tensor; with ``dim`` (an int or several), torch's
        ``sum(dim, keepdim)``. Bools and ints sum as int64; ``dtype`` casts first."""
        x = self if dtype is None else self.cast(dtype)
        if x.dtype == "bool":
            x = x.cast("int64")
        if dim is None:
            return x._apply("sum", (x,))
        return x._over_dims("sum", dim, keepdim)

    def mean(
        self, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, dtype: Any = None
    ) -> Any:
        """Mean of all elements (0-d); with ``dim``, torch's ``mean(dim, keepdim)``."""
        x = self if dtype is None else self.cast(dtype)
        if dim is None:
            return x._apply(MEAN, (x,))
        return x._over_dims("mean", dim, keepdim)

    def nansum(self, dim: Any = None, keepdim: bool = False) -> Any:
        return self.mask_fill(self.is_nan(), 0.0).sum(dim, keepdim)

    def _over_dims(self, op: str, dim: Any, keepdim: bool) -> Any:
        """``sum_dim``/``mean_dim`` over each of ``dim``, the dims dropped unless ``keepdim``."""
        ndim = self.ndim
        dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
        if not dims:  # torch: ``dim=()`` reduces every dimension, as amax/var/std here do
            dims = tuple(range(ndim))
        normalized = sorted({normalize_dim(op, d, ndim) for d in dims})
        if len(normalized) != len(dims):
            raise ShapeError(f"{op}: dimensions {list(dims)} repeat")
        out = self
        for d in normalized:
            out = out.sum_dim(d) if op == "sum" else out.mean_dim(d)
        if keepdim:
            return out
        shape = tuple(n for axis, n in enumerate(out.shape) if axis not in normalized)
        return out._apply("reshape", (out,), (shape,))

    def prod(self, dim: int | None = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
        """Product of all elements (or along ``dim``, torch's ``prod(dim, keepdim)``); its
        gradient is exact where elements are zero."""
        x = self if dtype is None else self.cast(dtype)
        if dim is None:
            return x._apply("prod", (x,))
        out = x.prod_dim(dim)
        return out if keepdim else out.squeeze_dim(dim)

    def max(self, dim: Any = None, keepdim: bool = False) -> Any:
        """torch's ``max``: the largest element (0-d; ties share the gradient evenly); with
        ``dim``, ``(values, indices)`` along it (the gradient goes to the index); with a
        tensor, the elementwise ``maximum``."""
        if dim is None:
            return self._apply("max", (self._nonempty("max"),))
        if not isinstance(dim, numbers.Integral):
            return self.maximum(dim)
        values, indices = self.max_dim_with_indices(dim)
        if not keepdim:
            values, indices = values.squeeze_dim(dim), indices.squeeze_dim(dim)
        return MaxResult(values, indices)

    def min(self, dim: Any = None, keepdim: bool = False) -> Any:
        """torch's ``min``, as :meth:`max`."""
        if dim is None:
            return self._apply("min", (self._nonempty("min"),))
        if not isinstance(dim, numbers.Integral):
            return self.minimum(dim)
        values, indices = self.min_dim_with_indices(dim)
        if not keepdim:
            values, indices = values.squeeze_dim(dim), indices.squeeze_dim(dim)
        return MinResult(values, indices)

    def amax(self, dim: Any = (), keepdim: bool = False) -> Any:
        """The largest values over ``dim`` (all dims when empty); ties share the gradient
        evenly, as torch's ``amax``."""
        return _even_extremum(self, "amax", dim, keepdim)

    def amin(self, dim: Any = (), keepdim: bool = False) -> Any:
        return _even_extremum(self, "amin", dim, keepdim)

    def any(self, dim: Any = None, keepdim: bool = False) -> Any:
        """Whether any element is non-zero (bool; over ``dim`` when given)."""
        counts = self.not_equal(False if self.dtype == "bool" else 0).cast("int64")
        return counts.sum(dim, keepdim).greater(0)

    def all(self, dim: Any = None, keepdim: bool = False) -> Any:
        """Whether every element is non-zero (bool; over ``dim`` when given)."""
        zeros = self.equal(False if self.dtype == "bool" else 0).cast("int64")
        return zeros.sum(dim, keepdim).equal(0)

    def count_nonzero(self, dim: Any = None) -> Any:
        return self.not_equal(False if self.dtype == "bool" else 0).cast("int64").sum(dim)

    def logsumexp(self, dim: Any, keepdim: bool = False) -> Any:
        """``log(sum(exp(self)))`` over ``dim``, shifted by the maximum for stability."""
        x = self if self.is_float() else self.cast(default_float_dtype())
        peak = untracked(x).amax(dim, keepdim=True)
        peak = peak.mask_fill(peak.is_inf(), 0.0)
        out = (x - peak).exp().sum(dim, keepdim=True).log() + peak
        if keepdim:
            return out
        dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
        return out.squeeze_dims(dims)

    def squeeze_dims(self, dims: Sequence[int]) -> Any:
        """Remove each of ``dims`` (all of size 1)."""
        ndim = self.ndim
        drop = {normalize_dim("squeeze", d, ndim) for d in dims}
        shape = tuple(n for axis, n in enumerate(self.shape) if axis not in drop)
        return self._apply("reshape", (self,), (shape,))

    # -- along one dimension (kept with size 1) -----------------------------------------------
    def sum_dim(self, dim: int) -> Any:
        """Sum along ``dim``, kept with size 1."""
        dims = (self._reduce_dim("sum_dim", dim),)  # the kernel takes a tuple of dims
        return self._apply("sum_dim", (self,), (dims,))

    def mean_dim(self, dim: int) -> Any:
        dims = (self._reduce_dim("mean_dim", dim),)
        return self._apply(MEAN_DIM, (self,), (dims,))

    def prod_dim(self, dim: int) -> Any:
        return self._apply("prod_dim", (self,), (self._reduce_dim("prod_dim", dim),))

    def max_dim(self, dim: int) -> Any:
        return self.max_dim_with_indices(dim)[0]

    def min_dim(self, dim: int) -> Any:
        return self.min_dim_with_indices(dim)[0]

    def max_dim_with_indices(self, dim: int) -> tuple[Any, Any]:
        """``(values, int64 indices)`` of the maximum along ``dim`` (kept with size 1)."""
        return self._apply("max_dim", (self,), (self._reduce_dim("max_dim", dim),))

    def min_dim_with_indices(self, dim: int) -> tuple[Any, Any]:
        return self._apply("min_dim", (self,), (self._reduce_dim("min_dim", dim),))

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """torch's ``argmax``: int64 index of the largest value along ``dim`` (dropped unless
        ``keepdim``), or into the flattened tensor when ``dim`` is ``None``."""
        return _arg_extremum(self, "argmax", dim, keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Any:
        return _arg_extremum(self, "argmin", dim, keepdim)

    def median(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """torch's ``median``: the lower of the two middle values; with ``dim``,
        ``(values, indices)`` along it."""
        if dim is None:
            flat = self.reshape((-1,))
            values, indices = flat.sort_with_indices(0)
            middle = (flat.shape[0] - 1) // 2
            return values.narrow(0, middle, 1).reshape(())
        d = normalize_dim("median", dim, self.ndim)
        values, indices = self.sort_with_indices(d)
        middle = (self.shape[d] - 1) // 2
        values, indices = values.narrow(d, middle, 1), indices.narrow(d, middle, 1)
        if not keepdim:
            values, indices = values.squeeze_dim(d), indices.squeeze_dim(d)
        return MedianResult(values, indices)

    def var(
        self, dim: Any = None, unbiased: Any = True, keepdim: bool = False, *,
        correction: Any = None,
    ) -> Any:  # fmt: skip
        """torch's ``var``: over ``dim`` (all elements when ``None``), dividing by
        ``n - correction`` (``unbiased=True``: correction 1), the dims dropped unless
        ``keepdim``."""
        return _variance(self, "var", dim, unbiased, keepdim, correction)

    def std(
        self, dim: Any = None, unbiased: Any = True, keepdim: bool = False, *,
        correction: Any = None,
    ) -> Any:  # fmt: skip
        """torch's ``std``: the square root of :meth:`var`."""
        return _variance(self, "std", dim, unbiased, keepdim, correction).sqrt()

    def norm(
        self, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None
    ) -> Any:
        """torch's ``norm``, with its dispatch: ``"fro"`` over at most two dims (or all) is
        the 2-norm of the elements, ``"nuc"`` a nuclear norm over two dims (all, for a
        matrix), a number ``p`` (any: ``inf``, ``-inf``, 0, negative) the vector ``p``-norm
        over ``dim`` (``rg.linalg.vector_norm``, torch's gradients, zero at a zero vector).
        An integer tensor is taken in the default float dtype (torch refuses it)."""
        x = self if dtype is None else self.cast(dtype)
        x = x if x.is_float() else x.cast(default_float_dtype())
        return norms.tensor_norm(x, p, dim, keepdim)

    # -- cumulative ---------------------------------------------------------------------------
    def cumsum(self, dim: int) -> Any:
        return self._apply("cumsum", (self,), (normalize_dim("cumsum", dim, self.ndim),))

    def cumprod(self, dim: int) -> Any:
        """Cumulative product; its gradient is exact where elements are zero."""
        return self._apply("cumprod", (self,), (normalize_dim("cumprod", dim, self.ndim),))

    def cummax(self, dim: int) -> Any:
        """torch's ``cummax``: ``(values, indices)`` along ``dim``, an index the latest where
        the running maximum is reached. (A bare tensor here would let ported
        ``torch.cummax(x, d)[0]`` read the first row instead of the values.)"""
        return CummaxResult(*self.cummax_with_indices(dim))

    def cummin(self, dim: int) -> Any:
        """torch's ``cummin``: ``(values, indices)`` along ``dim``."""
        return CumminResult(*self.cummin_with_indices(dim))

    def cummax_with_indices(self, dim: int) -> tuple[Any, Any]:
        return self._apply("cummax", (self,), (normalize_dim("cummax", dim, self.ndim),))

    def cummin_with_indices(self, dim: int) -> tuple[Any, Any]:
        return self._apply("cummin", (self,), (normalize_dim("cummin", dim, self.ndim),))

    # -- sorting ------------------------------------------------------------------------------
    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
        """torch's ``sort``: ``(values, indices)`` along ``dim`` (always stable)."""
        return SortResult(*self.sort_with_indices(dim, descending))

    def sort_with_indices(self, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
        d = normalize_dim("sort", dim, self.ndim)
        return self._apply("sort", (self,), (d, bool(descending)))

    def argsort(self, dim: int = -1, descending: bool = False) -> Any:
        return self.sort_with_indices(dim, descending)[1]

    def topk(
        self,
        k: int,
        dim: int = -1,
        largest: bool = True,
        sorted: bool = True,  # noqa: A002 (torch's name)
    ) -> Any:
        """torch's ``topk``: ``(values, indices)`` of the ``k`` largest (``largest=False``:
        smallest) entries along ``dim``, largest (smallest) first."""
        return topk(self, k, dim, largest, sorted)

    def topk_with_indices(self, k: int, dim: int = -1) -> tuple[Any, Any]:
        d = normalize_dim("topk", dim, self.ndim)
        if not 0 <= k <= self.shape[d]:
            raise ShapeError(
                f"topk: k={k} is out of range for dimension {dim} of size {self.shape[d]}"
            )
        return self._apply("topk", (self,), (int(k), d))

    # -- contraction --------------------------------------------------------------------------
    def matmul(self, other: Any) -> Any:
        """Matrix product; batched, batch dims broadcasting; 1-d operands as in NumPy."""
        a, b = promote(self, other, "matmul")
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError(
                f"matmul: both operands need at least 1 dimension, got shapes "
                f"{shape_text(a.shape)} and {shape_text(b.shape)}"
            )
        a_shape, b_shape = a.shape, b.shape
        squeeze = []
        if a.ndim == 1:
            a = a.unsqueeze_dim(0)
            squeeze.append(-2)
        if b.ndim == 1:
            b = b.unsqueeze_dim(1)
            squeeze.append(-1)
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(
                f"matmul: inner dimensions differ: {shape_text(a_shape)} @ "
                f"{shape_text(b_shape)} ({a.shape[-1]} != {b.shape[-2]})"
            )
        out = self._apply("matmul", (a, b))
        for dim in squeeze:
            out = out.squeeze_dim(dim)
        return out

    def mm(self, mat2: Any) -> Any:
        """The product of two matrices (2-d only, as torch's ``mm``)."""
        other = lift(self, mat2, "mm")
        if self.ndim != 2 or other.ndim != 2:
            raise ShapeError(
                f"mm: expects two matrices, got shapes {shape_text(self.shape)} and "
                f"{shape_text(other.shape)}"
            )
        return self.matmul(other)

    def bmm(self, mat2: Any) -> Any:
        """Batched matrix product of ``[b, n, m]`` and ``[b, m, p]`` (no broadcasting)."""
        other = lift(self, mat2, "bmm")
        if self.ndim != 3 or other.ndim != 3 or self.shape[0] != other.shape[0]:
            raise ShapeError(
                f"bmm: expects [b, n, m] and [b, m, p] with one b, got "
                f"{shape_text(self.shape)} and {shape_text(other.shape)}"
            )
        return self.matmul(other)

    def mv(self, vec: Any) -> Any:
        other = lift(self, vec, "mv")
        if self.ndim != 2 or other.ndim != 1:
            raise ShapeError(
                f"mv: expects a matrix and a vector, got {shape_text(self.shape)} and "
                f"{shape_text(other.shape)}"
            )
        return self.matmul(other)

    def dot(self, other: Any) -> Any:
        other = lift(self, other, "dot")
        if self.ndim != 1 or other.ndim != 1:
            raise ShapeError(
                f"dot: expects 1-d tensors, got {shape_text(self.shape)} and "
                f"{shape_text(other.shape)}"
            )
        return self.matmul(other)

    inner = dot

    def outer(self, vec2: Any) -> Any:
        """``self[i] * vec2[j]`` (two vectors)."""
        other = lift(self, vec2, "outer")
        if self.ndim != 1 or other.ndim != 1:
            raise ShapeError(
                f"outer: expects 1-d tensors, got {shape_text(self.shape)} and "
                f"{shape_text(other.shape)}"
            )
        return self.unsqueeze_dim(1) * other.unsqueeze_dim(0)

    ger = outer

    def trace(self) -> Any:
        """The sum of the main diagonal of a matrix."""
        return self.diagonal().sum()

    def diff(self, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Any:
        """The ``n``-th forward difference along ``dim`` (``prepend``/``append`` joined
        first)."""
        from .shape import cat

        x = self
        if not isinstance(n, numbers.Integral) or n < 0:
            raise InvalidArgumentError(f"diff: order n must be a non-negative int, got {n!r}")
        d = normalize_dim("diff", dim, self.ndim)
        if prepend is not None or append is not None:
            parts = [p for p in (prepend, x, append) if p is not None]
            x = cat([lift(x, p, "diff") for p in parts], d)
        for _ in range(n):
            size = x.shape[d]
            later, earlier = x.narrow(d, 1, size - 1), x.narrow(d, 0, size - 1)
            x = later.logical_xor(earlier) if x.dtype == "bool" else later - earlier
        return x

    def __matmul__(self, other):
        return self.matmul(other)

    def __rmatmul__(self, other):
        return lift(self, other, "matmul").matmul(self)


def topk(
    x: Any,
    k: int,
    dim: int = -1,
    largest: bool = True,
    sorted: bool = True,  # noqa: A002
) -> tuple[Any, Any]:
    """``(values, int64 indices)`` of the ``k`` largest (``largest=False``: smallest) entries
    along ``dim``, as ``torch.topk`` (the method ``x.topk(k, d)`` keeps Burn's values-only
    form). The result is always sorted, largest (or smallest) first."""
    if largest:
        return TopkResult(*x.topk_with_indices(k, dim))
    values, indices = (-x).topk_with_indices(k, dim)
    return TopkResult(-values, indices)


# -- compositions ---------------------------------------------------------------------------------
def _dims(op: str, dim: Any, ndim: int) -> tuple[int, ...]:
    """``dim`` (``None``, an int or several; ``()`` for all) as sorted normalized dims."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
    if not dims:
        return tuple(range(ndim))
    normalized = sorted({normalize_dim(op, d, ndim) for d in dims})
    if len(normalized) != len(dims):
        raise ShapeError(f"{op}: dimensions {list(dims)} repeat")
    return tuple(normalized)


def _dropped(x: Any, dims: tuple[int, ...], keepdim: bool) -> Any:
    if keepdim:
        return x
    shape = tuple(n for axis, n in enumerate(x.shape) if axis not in dims)
    return x._apply("reshape", (x,), (shape,))


def _arg_extremum(x: Any, op: str, dim: Any, keepdim: bool) -> Any:
    if dim is None:
        flat = x.reshape((-1,))
        out = flat._apply(op, (flat,), (flat._reduce_dim(op, 0),)).reshape(())
        return out.reshape((1,) * x.ndim) if keepdim else out
    d = x._reduce_dim(op, dim)
    out = x._apply(op, (x,), (d,))
    return out if keepdim else out.squeeze_dim(d)


def _even_extremum(x: Any, op: str, dim: Any, keepdim: bool) -> Any:
    """``amax``/``amin``: the values of successive ``max_dim``/``min_dim``; the gradient
    split evenly among the tied elements (``x - x.detach()`` is zero in value, so the value
    is the extremum exactly and the gradient is ``tied / count``)."""
    dims = _dims(op, dim, x.ndim)
    x._nonempty(op)
    tracked = x.requires_grad
    constant = untracked(x) if tracked else x
    value = constant
    for d in dims:
        value = value.max_dim(d) if op == "amax" else value.min_dim(d)
    if tracked:
        tied = constant.equal(value).cast(x.dtype)
        count = tied.sum(dims, keepdim=True)
        value = value + ((x - constant) * tied).sum(dims, keepdim=True) / count
    return _dropped(value, dims, keepdim)


def _variance(x: Any, op: str, dim: Any, unbiased: Any, keepdim: bool, correction: Any) -> Any:
    if correction is None:
        correction = 1 if unbiased else 0
    x = x if x.is_float() else x.cast(default_float_dtype())
    dims = _dims(op, dim, x.ndim)
    count = math.prod(x.shape[d] for d in dims)
    centered = x - x.mean(dims, keepdim=True)
    total = centered.square().sum(dims, keepdim=True)
    out = total / max(count - correction, 0) if count - correction > 0 else total / 0.0
    return _dropped(out, dims, keepdim)
