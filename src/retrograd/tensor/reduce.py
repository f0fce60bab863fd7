"""Reductions and contractions: sums, means, extrema (with their indices), cumulative ops,
sorting, top-k, variance and the matrix product.

:class:`ReduceMixin` needs one primitive from the class it is mixed into:
``_apply(op, inputs, params=())`` (:func:`retrograd.tensor._dispatch.apply`); it reads
``shape``, ``ndim`` and ``numel()``, and checks dimensions and sizes before the backend runs
(dims arrive at the backend normalized; empty extrema are refused, as in PyTorch).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ShapeError, shape_text
from ._dispatch import TensorOp, lift, normalize_dim, promote

__all__ = ["ReduceMixin", "topk"]

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
    def sum(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Any:
        """Sum of all elements, as a 0-d tensor; with ``dim`` (an int or several), torch's
        ``sum(dim, keepdim)``."""
        if dim is None:
            return self._apply("sum", (self,))
        return self._over_dims("sum", dim, keepdim)

    def mean(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Any:
        """Mean of all elements (0-d); with ``dim``, torch's ``mean(dim, keepdim)``."""
        if dim is None:
            return self._apply(MEAN, (self,))
        return self._over_dims("mean", dim, keepdim)

    def _over_dims(self, op: str, dim: Any, keepdim: bool) -> Any:
        """``sum_dim``/``mean_dim`` over each of ``dim``, the dims dropped unless ``keepdim``."""
        ndim = self.ndim
        dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
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

    def prod(self) -> Any:
        """Product of all elements; its gradient is exact where elements are zero."""
        return self._apply("prod", (self,))

    def max(self) -> Any:
        """Largest element (0-d); ties share the gradient evenly, as in PyTorch."""
        return self._apply("max", (self._nonempty("max"),))

    def min(self) -> Any:
        return self._apply("min", (self._nonempty("min"),))

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

    def argmax(self, dim: int) -> Any:
        return self._apply("argmax", (self,), (self._reduce_dim("argmax", dim),))

    def argmin(self, dim: int) -> Any:
        return self._apply("argmin", (self,), (self._reduce_dim("argmin", dim),))

    def var(self, dim: int) -> Any:
        """Unbiased variance along ``dim`` (divides by n - 1, as Burn), kept with size 1."""
        d = normalize_dim("var", dim, self.ndim)
        x = self.float()
        n = x.shape[d]
        centered = x - x.mean_dim(d)
        return centered.square().sum_dim(d).div_scalar(n - 1 if n > 1 else 0.0)

    # -- cumulative ---------------------------------------------------------------------------
    def cumsum(self, dim: int) -> Any:
        return self._apply("cumsum", (self,), (normalize_dim("cumsum", dim, self.ndim),))

    def cumprod(self, dim: int) -> Any:
        """Cumulative product; its gradient is exact where elements are zero."""
        return self._apply("cumprod", (self,), (normalize_dim("cumprod", dim, self.ndim),))

    def cummax(self, dim: int) -> Any:
        return self.cummax_with_indices(dim)[0]

    def cummin(self, dim: int) -> Any:
        return self.cummin_with_indices(dim)[0]

    def cummax_with_indices(self, dim: int) -> tuple[Any, Any]:
        return self._apply("cummax", (self,), (normalize_dim("cummax", dim, self.ndim),))

    def cummin_with_indices(self, dim: int) -> tuple[Any, Any]:
        return self._apply("cummin", (self,), (normalize_dim("cummin", dim, self.ndim),))

    # -- sorting ------------------------------------------------------------------------------
    def sort(self, dim: int = -1, descending: bool = False) -> Any:
        """Stable sort along ``dim``."""
        return self.sort_with_indices(dim, descending)[0]

    def sort_with_indices(self, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
        d = normalize_dim("sort", dim, self.ndim)
        return self._apply("sort", (self,), (d, bool(descending)))

    def argsort(self, dim: int = -1, descending: bool = False) -> Any:
        return self.sort_with_indices(dim, descending)[1]

    def topk(self, k: int, dim: int = -1) -> Any:
        """The ``k`` largest values along ``dim``, largest first (Burn returns values only)."""
        return self.topk_with_indices(k, dim)[0]

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
        return x.topk_with_indices(k, dim)
    values, indices = (-x).topk_with_indices(k, dim)
    return -values, indices
