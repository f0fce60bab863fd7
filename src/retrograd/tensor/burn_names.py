"""Burn's names for tensor ops that retrograd has under torch's (or API.md's) names.

Burn's tests call ``slice_fill``, ``max_abs_dim``, ``sum_dims``, ``max_pair``,
``sort_descending``, ``var_mean``, ``one_hot_fill``, ``roll_dim`` ...; each is a composite of
methods the other mixins define, so each has their gradient and their errors, and runs under
every strategy and backend like them. Dimension lists keep every reduced dimension with size 1,
as Burn's ``*_dims`` do; ``*_dims`` of the extrema reduce one dimension after the other (Burn's
own fold of ``max_dim``), so the gradient goes to one element, as ``max_dim``'s does.

:class:`BurnNamesMixin` needs the methods of the tensor class it is mixed into.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from ..errors import DTypeError, InvalidArgumentError, ShapeError
from ._dispatch import check_scalar, normalize_dim, untracked, wrap

__all__ = ["BurnNamesMixin"]

#: Burn's ``is_close``/``all_close`` defaults (``DEFAULT_RTOL``, ``DEFAULT_ATOL``), torch's too
_RTOL, _ATOL = 1e-5, 1e-8


def _dims(op: str, ndim: int, dims: Sequence[int]) -> list[int]:
    if isinstance(dims, numbers.Integral):
        dims = [dims]
    return sorted({normalize_dim(op, d, ndim) for d in dims})


def _each_dim(x: Any, op: str, dims: Sequence[int], method: str) -> Any:
    """``x`` reduced by ``method`` (a one-dim reduction that keeps it) over each of ``dims``
    in turn."""
    for d in _dims(op, x.ndim, dims):
        x = getattr(x, method)(d)
    return x


def _floats(op: str, x: Any) -> Any:
    if not x.is_float():
        raise DTypeError(f"{op}: expected a floating point tensor, got {x.dtype}")
    return x


class BurnNamesMixin:
    """Burn's op names, as composites (see the module docstring)."""

    __slots__ = ()

    # -- slicing -------------------------------------------------------------------------------
    def slice_fill(self, ranges: Sequence[Any], value: Any) -> Any:
        """Burn's ``slice_fill``: a copy with the sliced region (as :meth:`slice_assign`'s
        ranges, steps included) set to the scalar ``value``."""
        from .indexing import _ranges

        shape = self.shape
        slices = _ranges("slice_fill", shape, ranges)
        region = tuple(len(range(*s.indices(n))) for s, n in zip(slices, shape))
        region += shape[len(slices) :]
        value = check_scalar("slice_fill", value)
        fill = wrap(self, self._backend.full(region, value, self.dtype, self._device))
        return self.slice_assign(ranges, fill)

    def select_dim(self, dim: int, index: int) -> Any:
        """Burn's ``select_dim``: the slice at ``index`` along ``dim``, the dim removed."""
        return self.select(dim, int(index))

    def rank(self) -> int:
        """Burn's ``rank``: the number of dimensions."""
        return self.ndim

    def empty_like(self) -> Any:
        """Burn's ``empty_like``: a tensor of this shape, dtype and device (its values
        unspecified: zeros here)."""
        return self.zeros_like()

    # -- reductions over several dims (kept with size 1) ---------------------------------------
    def sum_dims(self, dims: Sequence[int]) -> Any:
        """Burn's ``sum_dims``: the sum over ``dims``, each kept with size 1."""
        return self.sum(_dims("sum_dims", self.ndim, dims), keepdim=True)

    def sum_dims_squeeze(self, dims: Sequence[int]) -> Any:
        """Burn's ``sum_dims_squeeze``: the sum over ``dims``, which are removed."""
        return self.sum(_dims("sum_dims_squeeze", self.ndim, dims))

    def mean_dims(self, dims: Sequence[int]) -> Any:
        """Burn's ``mean_dims``: the mean over ``dims``, each kept with size 1."""
        return self.mean(_dims("mean_dims", self.ndim, dims), keepdim=True)

    def prod_dims(self, dims: Sequence[int]) -> Any:
        """Burn's ``prod_dims``: the product over ``dims``, each kept with size 1."""
        return _each_dim(self, "prod_dims", dims, "prod_dim")

    def max_dims(self, dims: Sequence[int]) -> Any:
        """Burn's ``max_dims``: ``max_dim`` over each of ``dims`` in turn."""
        return _each_dim(self, "max_dims", dims, "max_dim")

    def min_dims(self, dims: Sequence[int]) -> Any:
        """Burn's ``min_dims``: ``min_dim`` over each of ``dims`` in turn."""
        return _each_dim(self, "min_dims", dims, "min_dim")

    def max_abs(self) -> Any:
        """Burn's ``max_abs``: the largest absolute value (NaN when one is NaN)."""
        return self.abs().max()

    def max_abs_dim(self, dim: int) -> Any:
        """Burn's ``max_abs_dim``: the largest absolute value along ``dim``, kept."""
        return self.abs().max_dim(dim)

    def max_abs_dims(self, dims: Sequence[int]) -> Any:
        """Burn's ``max_abs_dims``: :meth:`max_abs_dim` over each of ``dims`` in turn."""
        return self.abs().max_dims(dims)

    def max_pair(self, other: Any) -> Any:
        """Burn's ``max_pair``: the elementwise maximum (torch's ``maximum``)."""
        return self.maximum(other)

    def min_pair(self, other: Any) -> Any:
        """Burn's ``min_pair``: the elementwise minimum (torch's ``minimum``)."""
        return self.minimum(other)

    def var_bias(self, dim: int) -> Any:
        """Burn's ``var_bias``: the biased variance (dividing by n) along ``dim``, kept."""
        return self.var(normalize_dim("var_bias", dim, self.ndim), unbiased=False, keepdim=True)

    def var_mean(self, dim: int) -> tuple[Any, Any]:
        """Burn's ``var_mean``: ``(var(dim), mean_dim(dim))``, unbiased as :meth:`var`."""
        d = normalize_dim("var_mean", dim, self.ndim)
        return self.var(d, keepdim=True), self.mean_dim(d)

    def var_mean_bias(self, dim: int) -> tuple[Any, Any]:
        """Burn's ``var_mean_bias``: ``(var_bias(dim), mean_dim(dim))``."""
        return self.var_bias(dim), self.mean_dim(normalize_dim("var_mean_bias", dim, self.ndim))

    def median_with_indices(self, dim: int) -> tuple[Any, Any]:
        """Burn's ``median_with_indices``: torch's ``median(dim)`` with ``dim`` kept."""
        return tuple(self.median(normalize_dim("median_with_indices", dim, self.ndim), True))

    # -- sorting -------------------------------------------------------------------------------
    def sort_descending(self, dim: int) -> Any:
        """Burn's ``sort_descending``: the values sorted largest first along ``dim``."""
        return self.sort_with_indices(dim, descending=True)[0]

    def sort_descending_with_indices(self, dim: int) -> tuple[Any, Any]:
        """Burn's ``sort_descending_with_indices``: ``(values, int64 indices)``."""
        return self.sort_with_indices(dim, descending=True)

    def argsort_descending(self, dim: int) -> Any:
        """Burn's ``argsort_descending``: the indices that sort largest first."""
        return self.argsort(dim, descending=True)

    def argtopk(self, k: int, dim: int) -> Any:
        """Burn's ``argtopk``: the indices of the ``k`` largest values along ``dim``, tied
        values in index order, as Burn's stable descending sort gives them (torch's ``topk``
        orders ties as its CPU kernel does)."""
        d = self._topk_dim(int(k), dim)  # (k and dim checked as topk checks them)
        return self.argsort(dim=d, descending=True, stable=True).narrow(d, 0, int(k))

    # -- elementwise ---------------------------------------------------------------------------
    def fmod_scalar(self, other: Any) -> Any:
        """Burn's ``fmod_scalar``: torch's ``fmod`` by a scalar (the dividend's sign)."""
        return self.fmod(other)

    def roll_dim(self, shift: int, dim: int) -> Any:
        """Burn's ``roll_dim``: element ``i`` of the result is element ``(i + shift) mod n``
        along ``dim``. That is torch's ``roll`` by ``-shift``: Burn rolls the other way
        round (its ``roll(shifts, dims)`` too; ``Tensor.roll`` keeps torch's direction, as
        API.md section 10 fixes for torch names)."""
        return self.roll(-int(shift), normalize_dim("roll_dim", dim, self.ndim))

    def is_close(self, other: Any, rtol: float | None = None, atol: float | None = None) -> Any:
        """Burn's ``is_close`` (``None`` tolerances are Burn's defaults, torch's too)."""
        return self.isclose(other, _RTOL if rtol is None else rtol, _ATOL if atol is None else atol)

    def all_close(self, other: Any, rtol: float | None = None, atol: float | None = None) -> bool:
        """Burn's ``all_close``: whether :meth:`is_close` holds everywhere (a Python bool)."""
        return bool(self.is_close(other, rtol, atol).all().item())

    def bool_not(self) -> Any:
        """Burn's ``bool_not`` (torch's ``logical_not``)."""
        return self.logical_not()

    def bool_and(self, other: Any) -> Any:
        """Burn's ``bool_and`` (torch's ``logical_and``)."""
        return self.logical_and(other)

    def bool_or(self, other: Any) -> Any:
        """Burn's ``bool_or`` (torch's ``logical_or``)."""
        return self.logical_or(other)

    def bool_xor(self, other: Any) -> Any:
        """Burn's ``bool_xor`` (torch's ``logical_xor``)."""
        return self.logical_xor(other)

    def bitwise_and_scalar(self, other: int) -> Any:
        return self.bitwise_and(other)

    def bitwise_or_scalar(self, other: int) -> Any:
        return self.bitwise_or(other)

    def bitwise_xor_scalar(self, other: int) -> Any:
        return self.bitwise_xor(other)

    def bitwise_left_shift_scalar(self, other: int) -> Any:
        return self.bitwise_left_shift(other)

    def bitwise_right_shift_scalar(self, other: int) -> Any:
        return self.bitwise_right_shift(other)

    # -- Burn's activations (rg.nn.functional has them too, calling these) ---------------------
    def hard_sigmoid(self, alpha: float = 0.2, beta: float = 0.5) -> Any:
        """Burn's (and ONNX's) ``hard_sigmoid``: ``clamp(alpha * x + beta, 0, 1)`` (torch's
        ``hardsigmoid`` is this with ``alpha = 1/6``); the gradient passes strictly inside."""
        return (_floats("hard_sigmoid", self) * alpha + beta).clamp(0.0, 1.0)

    def quiet_softmax(self, dim: int) -> Any:
        """Burn's ``quiet_softmax`` ("softmax plus one"): ``exp(x_i) / (1 + sum_j exp(x_j))``
        along ``dim``, so a row of very negative values can give all its weights near 0.
        Shifted by the row's (untracked) maximum ``m`` for stability: ``exp(x_i - m) /
        (sum_j exp(x_j - m) + exp(-m))``, as Burn computes it."""
        x = _floats("quiet_softmax", self)
        d = normalize_dim("quiet_softmax", dim, x.ndim)
        peak = untracked(x).amax(d, keepdim=True)
        shifted = (x - peak).exp()
        return shifted / (shifted.sum(d, keepdim=True) + (-peak).exp())

    def thresholded_relu(self, alpha: float = 1.0) -> Any:
        """Burn's (and ONNX's) ``thresholded_relu``: ``x`` where ``x > alpha``, else 0."""
        x = _floats("thresholded_relu", self)
        return x.mask_fill(x.lower_equal(alpha), 0.0)

    # -- one-hot and sampling ------------------------------------------------------------------
    def one_hot_fill(
        self, num_classes: int, on_value: float, off_value: float, axis: int = -1
    ) -> Any:
        """Burn's ``one_hot_fill``: ``on_value`` at each class this tensor holds,
        ``off_value`` elsewhere, the classes along a new dimension ``axis`` of the output (a
        negative one counts from the output's end); a negative class counts from
        ``num_classes`` (``-1`` is the last). The dtype is this tensor's."""
        ndim = self.ndim + 1
        if not -ndim <= axis < ndim:
            raise ShapeError(
                f"one_hot_fill: axis {axis} is out of range for an output with {ndim} "
                f"dimensions (expected {-ndim} to {ndim - 1})"
            )
        classes = self.detach().cast("int64")
        classes = classes.where(classes >= 0, classes + num_classes)
        hot = classes.one_hot(num_classes).cast(self.dtype)
        out = (hot * (on_value - off_value) + off_value).cast(self.dtype)  # int stays int
        return out.movedim(-1, axis % ndim)

    def categorical(self, num_samples: int) -> Any:
        """Burn's ``categorical``: ``num_samples`` class indices drawn with replacement from
        the weights along the last dimension (normalized), int64 ``[..., num_samples]``;
        from the seeded generator (``rg.seed``)."""
        from .selection import multinomial

        if not isinstance(num_samples, numbers.Integral) or num_samples < 1:
            raise InvalidArgumentError(
                f"categorical: num_samples must be at least 1, got {num_samples!r}"
            )
        flat = self.reshape((-1, self.shape[-1]))
        samples = multinomial(flat, int(num_samples), replacement=True)
        return samples.reshape(self.shape[:-1] + (int(num_samples),))
