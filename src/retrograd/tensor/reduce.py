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

from ..backend.protocol import GRAD_DTYPES, default_float_dtype
from ..errors import (
    DTypeError,
    EmptyReductionError,
    InvalidArgumentError,
    InvalidValueError,
    MixedDTypeError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
    shape_text,
)
from . import norms
from ._dispatch import (
    TensorOp,
    int_dims,
    int_parameter,
    joined,
    lift,
    normalize_dim,
    preserved_layout,
    real_only,
    refuse_sequence,
    scalar_dims,
    untracked,
)
from .autocasting import autocast_op
from .pairs import values_and_indices
from .views import unlink

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

#: the dtypes torch's sum, prod, cumsum and cumprod compute in int64 (unless dtype= says)
_WIDENED = ("bool", "uint8", "int8", "int16", "int32")
#: the 16-bit floats whose variance torch accumulates in float32 and rounds once
_HALF_DTYPES = ("float16", "bfloat16")


def _as_uint8_when(x: Any, answer: Any) -> Any:
    """``answer`` (bool) of ``any``/``all`` as torch gives it: uint8 for a uint8 ``x``."""
    return answer.cast("uint8") if x.dtype == "uint8" else answer


#: torch's ``torch.return_types``: named ``(values, indices)`` pairs.
MaxResult = namedtuple("max", ["values", "indices"])
MinResult = namedtuple("min", ["values", "indices"])


#: torch's pairs that API.md section 2 reads as the values (:mod:`.pairs`)
SortResult = values_and_indices("sort")
TopkResult = values_and_indices("topk")
CummaxResult = values_and_indices("cummax")
CumminResult = values_and_indices("cummin")
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
            raise EmptyReductionError(
                f"{op}: dimension {dim} of shape {shape_text(self.shape)} is empty"
            )
        return d

    def _nonempty(self, op: str) -> Any:
        if self.numel() == 0:
            raise EmptyReductionError(
                f"{op}: cannot reduce an empty tensor of shape {shape_text(self.shape)}"
            )
        return self

    # -- over all elements --------------------------------------------------------------------
    @scalar_dims
    def sum(
        self, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, dtype: Any = None
    ) -> Any:
        """Sum of all elements, as a 0-d tensor; with ``dim`` (an int or several), torch's
        ``sum(dim, keepdim)``. Bools and ints sum as int64; ``dtype`` casts first
        (``dtype=bool`` gives torch's bool result: whether any element is nonzero)."""
        x = self if dtype is None else self.cast(dtype)
        if x.dtype in _WIDENED:
            if dtype is not None:  # (computed in int64, then wrapped into the dtype asked for)
                return x.cast("int64").sum(dim, keepdim).cast(x.dtype)
            x = x.cast("int64")
        if dim is None:
            return x._apply("sum", (x,))
        return x._over_dims("sum", dim, keepdim)

    @scalar_dims
    def mean(
        self, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, dtype: Any = None
    ) -> Any:
        """Mean of all elements (0-d); with ``dim``, torch's ``mean(dim, keepdim)``. An
        integer or bool tensor needs ``dtype=`` (torch cannot infer the result's dtype)."""
        x = self if dtype is None else self.cast(dtype)
        if x._backend.dtype(x._prim) not in GRAD_DTYPES:
            raise DTypeError(
                f"mean: could not infer the output dtype of a {x.dtype} tensor (as in torch); "
                "pass dtype= or cast to a floating dtype first"
            )
        if dim is None:
            return x._apply(MEAN, (x,))
        return x._over_dims("mean", dim, keepdim)

    @scalar_dims
    def nansum(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
        """:meth:`sum` counting NaN as zero; as torch's, the NaNs are zeroed before ``dtype``
        casts (a NaN summed as int64 or bool counts as 0). Ints and bools sum as int64."""
        if self.is_complex():
            raise UnsupportedDTypeError(  # (torch's RuntimeError)
                "nansum: complex tensors are not supported (as torch's CPU kernel)"
            )
        if dim is None and keepdim:  # torch: every dim kept, of size 1
            dim = ()
        x = self
        if self.is_float():
            # the op table's nan_zeroed where a gradient is recorded (torch's rule); a tensor
            # that records none (one of an inner backend too: a gradient read from
            # Gradients) is zeroed by the protocol's mask_fill, which every backend has
            x = (
                self._apply("nan_zeroed", (self,))
                if self.requires_grad
                else self.mask_fill(self.isnan(), 0.0)
            )
        return x.sum(dim, keepdim, dtype=dtype)

    def _over_dims(self, op: str, dim: Any, keepdim: bool) -> Any:
        """``sum_dim``/``mean_dim`` over each of ``dim``, the dims dropped unless ``keepdim``."""
        ndim = self.ndim
        dims = int_dims(op, dim)
        if not dims:  # torch: an empty tuple of dims reduces every dim
            dims = tuple(range(ndim))
        normalized = sorted({normalize_dim(op, d, ndim) for d in dims})
        if len(normalized) != len(dims):
            raise ShapeError(f"{op}: dimensions {list(dims)} repeat")
        # one kernel over every dim (torch's, whose accumulation order a chain of one-dim
        # reductions does not keep: 1 to 8 ulp off torch's sum over (1, 2), 7 December)
        out = self._apply("sum_dim" if op == "sum" else MEAN_DIM, (self,), (tuple(normalized),))
        if keepdim:
            return out
        shape = tuple(n for axis, n in enumerate(out.shape) if axis not in normalized)
        return out._apply("reshape", (out,), (shape,))

    @autocast_op("prod")
    def prod(self, dim: int | None = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
        """Product of all elements (or along ``dim``, torch's ``prod(dim, keepdim)``); its
        gradient is torch's: ``result / input`` when no element is zero, exact products of
        the others where one is. ``dtype`` casts first (``dtype=bool`` gives torch's bool
        result: whether every element is nonzero)."""
        x = self if dtype is None else self.cast(dtype)
        if x.dtype in _WIDENED:
            if dtype is not None:
                return x.cast("int64").prod(dim, keepdim).cast(x.dtype)
            x = x.cast("int64")
        if x.ndim == 0 and (dim is None or (isinstance(dim, int) and dim in (0, -1))):
            # torch: the product of one element is itself, its gradient the incoming one
            return x.reshape(())
        if dim is None:
            return x._apply("prod", (x,))
        out = x.prod_dim(dim)
        return out if keepdim else out.squeeze_dim(dim)

    @scalar_dims
    def max(self, dim: Any = None, keepdim: bool = False, *, other: Any = None) -> Any:
        """torch's ``max``: the largest element (0-d; ties share the gradient evenly); with
        ``dim``, ``(values, indices)`` along it (the gradient goes to the index); with a
        tensor (or ``other=``, torch's keyword), the elementwise ``maximum``."""
        dim = _dim_or_other("max", dim, other)
        if dim is None:
            return self._apply("max", (self._nonempty("max"),))
        if not isinstance(dim, numbers.Integral):
            return self.maximum(dim)
        values, indices = self.max_dim_with_indices(dim)
        if not keepdim:
            values, indices = _own(values.squeeze_dim(dim)), _own(indices.squeeze_dim(dim))
        return MaxResult(values, indices)

    @scalar_dims
    def min(self, dim: Any = None, keepdim: bool = False, *, other: Any = None) -> Any:
        """torch's ``min``, as :meth:`max`."""
        dim = _dim_or_other("min", dim, other)
        if dim is None:
            return self._apply("min", (self._nonempty("min"),))
        if not isinstance(dim, numbers.Integral):
            return self.minimum(dim)
        values, indices = self.min_dim_with_indices(dim)
        if not keepdim:
            values, indices = _own(values.squeeze_dim(dim)), _own(indices.squeeze_dim(dim))
        return MinResult(values, indices)

    @scalar_dims
    def amax(self, dim: Any = (), keepdim: bool = False) -> Any:
        """The largest values over ``dim`` (all dims when empty); ties share the gradient
        evenly, as torch's ``amax``."""
        return _even_extremum(self, "amax", dim, keepdim)

    @scalar_dims
    def amin(self, dim: Any = (), keepdim: bool = False) -> Any:
        return _even_extremum(self, "amin", dim, keepdim)

    def _norm_extremum(self, op: str, dims: tuple[int, ...]) -> Any:
        """``amax``/``amin`` over ``dims`` (kept) with the infinite norms' gradient: a NaN
        result's ties are the NaNs (:func:`_even_extremum`'s ``nan_ties``)."""
        return _even_extremum(self, op, dims, True, nan_ties=True)

    @scalar_dims
    def any(self, dim: Any = None, keepdim: bool = False) -> Any:
        """Whether any element is non-zero (bool; over ``dim`` when given: over none for
        ``dim=()``, as torch's, unlike ``sum``'s every dim)."""
        nonzero = self.not_equal(False if self.dtype == "bool" else 0)
        if dim is None and keepdim:  # (every dim kept with size 1, as torch's)
            dim = tuple(range(self.ndim))
        if isinstance(dim, (tuple, list)) and not dim:
            return _as_uint8_when(self, nonzero)
        return _as_uint8_when(self, nonzero.cast("int64").sum(dim, keepdim).greater(0))

    @scalar_dims
    def all(self, dim: Any = None, keepdim: bool = False) -> Any:
        """Whether every element is non-zero (bool; over ``dim`` when given, over none for
        ``dim=()`` as :meth:`any`)."""
        if dim is None and keepdim:  # (every dim kept with size 1, as torch's)
            dim = tuple(range(self.ndim))
        if isinstance(dim, (tuple, list)) and not dim:
            return _as_uint8_when(self, self.not_equal(False if self.dtype == "bool" else 0))
        zeros = self.equal(False if self.dtype == "bool" else 0).cast("int64")
        return _as_uint8_when(self, zeros.sum(dim, keepdim).equal(0))

    def any_dim(self, dim: int) -> Any:
        """Burn's ``any_dim``: whether any element along ``dim`` is non-zero, ``dim`` kept
        with size 1 (bool)."""
        return self.any(normalize_dim("any_dim", dim, self.ndim), keepdim=True)

    def all_dim(self, dim: int) -> Any:
        """Burn's ``all_dim``: whether every element along ``dim`` is non-zero, ``dim`` kept
        with size 1 (bool; true along an empty dimension)."""
        return self.all(normalize_dim("all_dim", dim, self.ndim), keepdim=True)

    @scalar_dims
    def count_nonzero(self, dim: Any = None) -> Any:
        return self.not_equal(False if self.dtype == "bool" else 0).cast("int64").sum(dim)

    @scalar_dims
    def logsumexp(self, dim: Any, keepdim: bool = False) -> Any:
        """``log(sum(exp(self)))`` over ``dim``, shifted by the maximum for stability."""
        if dim is None:  # (torch's signature requires the dims)
            raise DTypeError("logsumexp: dim must be an int or a tuple of ints, got None")
        if self.is_complex():
            # torch's: shifted by the largest finite real part, the rest a composition of
            # holomorphic ops whose complex rules give its gradient
            dims = _dims("logsumexp", dim, self.ndim)
            if self.numel() == 0:  # log(0) = -inf over an empty dimension
                out = self.exp().sum(dims, keepdim=True).log()
            else:
                real = untracked(self).real
                peak = real.mask_fill(real.isfinite().logical_not(), -math.inf).amax(dims, True)
                peak = peak.mask_fill(peak.is_inf(), 0.0).cast(self.dtype)
                out = (self - peak).exp().sum(dims, keepdim=True).log() + peak
            return out if keepdim else out.squeeze_dims(dims)
        x = real_only("logsumexp", self)
        x = x if x.is_float() else x.cast(default_float_dtype())
        if x.numel() == 0:  # torch: log(0) = -inf over an empty dimension
            out = x.exp().sum(dim, keepdim=True).log()
            return (
                out
                if keepdim
                else out.squeeze_dims((dim,) if isinstance(dim, numbers.Integral) else tuple(dim))
            )
        # the shift: the largest entry short of +inf (a +inf shift makes inf - inf; shifting
        # by 0 instead, exp of the finite entries over ~88 overflowed, and their gradient,
        # exp(x) / sum, was inf / inf where torch's exp(x - inf) is 0)
        values = untracked(x)
        peak = values.mask_fill(values.equal(math.inf), -math.inf).amax(dim, keepdim=True)
        peak = peak.mask_fill(peak.is_inf(), 0.0)
        dims = _dims("logsumexp", dim, x.ndim)
        if x.requires_grad:  # the op table's, for torch's gradient exp(x - out)
            out = x._apply("logsumexp", (x, peak), (dims,))
        else:  # (a tensor of an inner backend too, which has no such kernel)
            out = (x - peak).exp().sum(dims, keepdim=True).log() + peak
        return out if keepdim else out.squeeze_dims(dims)

    def squeeze_dims(self, dims: Sequence[int]) -> Any:
        """Remove each of ``dims`` (all of size 1; repeats count once); no dims removes every
        dimension of size 1, as Burn's ``squeeze_dims(&[])``."""
        shape = self.shape
        if len(dims) == 0:
            drop = {axis for axis, n in enumerate(shape) if n == 1}
        else:
            drop = {normalize_dim("squeeze_dims", d, len(shape)) for d in dims}
        wide = sorted(axis for axis in drop if shape[axis] != 1)
        if wide:
            raise ShapeError(
                f"squeeze_dims: dimension {wide[0]} has size {shape[wide[0]]}, expected 1 "
                f"(shape {shape_text(shape)}, dims {list(dims)})"
            )
        kept = tuple(n for axis, n in enumerate(shape) if axis not in drop)
        return self._apply("reshape", (self,), (kept,))

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

    @scalar_dims
    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """torch's ``argmax``: int64 index of the largest value along ``dim`` (dropped unless
        ``keepdim``), or into the flattened tensor when ``dim`` is ``None``."""
        return _arg_extremum(self, "argmax", dim, keepdim)

    @scalar_dims
    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Any:
        return _arg_extremum(self, "argmin", dim, keepdim)

    @scalar_dims
    def median(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """torch's ``median``: the lower of the two middle values, or NaN where the values
        hold one (its first position as the index); with ``dim``, ``(values, indices)``
        along it. Without ``dim`` the gradient is shared among the elements equal to the
        median, as torch's."""
        # (torch's median of all of an empty bool tensor is True; along a dim it refuses)
        if self.dtype == "bool" and (self.numel() or dim is not None):
            raise DTypeError("median: not implemented for bool tensors (as in torch)")
        if dim is None:
            flat = self.reshape((-1,))
            if flat.shape[0] == 0:  # torch: NaN, not an error
                return _empty_median(flat)
            constant = untracked(flat)
            values, _ = constant.sort_with_indices(0)
            value = values.gather(0, _median_position(constant, 0)).reshape(())
            if not flat.requires_grad:
                return value
            return _shared_evenly(flat, constant, value, (0,)).reshape(())
        d = normalize_dim("median", dim, self.ndim)
        if self.shape[d] == 0:
            raise EmptyReductionError(  # (torch's IndexError, a ShapeError of ours)
                f"median: dimension {dim} of shape {shape_text(self.shape)} is empty"
            )
        values, indices = self.sort_with_indices(d)
        position = _median_position(self, d)
        values, indices = values.gather(d, position), indices.gather(d, position)
        if not keepdim:
            values, indices = values.squeeze_dim(d), indices.squeeze_dim(d)
        return MedianResult(values, indices)

    @scalar_dims
    def var(
        self, dim: Any = None, unbiased: Any = True, keepdim: bool = False, *,
        correction: Any = None,
    ) -> Any:  # fmt: skip
        """torch's ``var``: over ``dim`` (all elements when ``None``), dividing by
        ``n - correction`` (``unbiased=True``: correction 1), the dims dropped unless
        ``keepdim``. A float16 or bfloat16 input's value is accumulated in float32 and
        rounded once, as torch's forward (in 16 bits the mean, the deviations and their sum
        were each rounded); its gradient stays the 16-bit one, as torch's backward."""
        out = _variance(self, "var", dim, unbiased, keepdim, correction)
        if self.dtype not in _HALF_DTYPES:
            return out
        exact = _variance(
            untracked(self).cast("float32"), "var", dim, unbiased, keepdim, correction
        )
        return _rounded_once(out, exact)

    @scalar_dims
    def std(
        self, dim: Any = None, unbiased: Any = True, keepdim: bool = False, *,
        correction: Any = None,
    ) -> Any:  # fmt: skip
        """torch's ``std``: the square root of :meth:`var`; where it is 0 the gradient is 0
        (torch's ``std_backward`` masks the 1 / (2 std) there). A float16 or bfloat16 input's
        variance and root are taken in float32 and rounded once, as torch's (:meth:`var`)."""
        variance = _variance(self, "std", dim, unbiased, keepdim, correction)
        zero = variance.equal_elem(0.0)
        out = variance.mask_fill(zero, 1.0).sqrt().mask_fill(zero, 0.0)
        if self.dtype not in _HALF_DTYPES:
            return out
        exact = _variance(
            untracked(self).cast("float32"), "std", dim, unbiased, keepdim, correction
        )
        return _rounded_once(out, exact.sqrt())

    @scalar_dims(position=1)
    def norm(
        self, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None
    ) -> Any:
        """torch's ``norm``, with its dispatch: ``"fro"`` over at most two dims (or all) is
        the 2-norm of the elements, ``"nuc"`` a nuclear norm over two dims (all, for a
        matrix), a number ``p`` (any: ``inf``, ``-inf``, 0, negative) the vector ``p``-norm
        over ``dim`` (``rg.linalg.vector_norm``, torch's gradients, zero at a zero vector).
        An integer or bool tensor is refused, as torch refuses it (pass ``dtype=``)."""
        if self.is_complex() and dtype is not None:  # torch's rules: a complex dtype= only,
            return norms.tensor_norm(self, p, dim, keepdim, dtype=dtype)  # not narrowing
        x = self if dtype is None else self.cast(dtype)
        if x.is_complex() and p != "nuc":  # a complex tensor's vector norms: of |x|
            x = x.abs()
        if not x.is_float():
            raise UnsupportedDTypeError(
                f"norm: expected a floating point tensor, got {x.dtype} (as torch)"
            )
        return norms.tensor_norm(x, p, dim, keepdim)

    # -- cumulative ---------------------------------------------------------------------------
    @scalar_dims
    def cumsum(self, dim: int, *, dtype: Any = None) -> Any:
        """Cumulative sum along ``dim``; ``dtype`` casts first (bools and ints sum as int64,
        as torch's)."""
        x = self if dtype is None else self.cast(dtype)
        if x.dtype == "bool" and dtype is not None:
            return _cumulative_as_bool("cumsum", x, dim)
        if x.dtype in _WIDENED:
            if dtype is not None:
                return x.cast("int64").cumsum(dim).cast(x.dtype)
            x = x.cast("int64")
        return x._apply("cumsum", (x,), (normalize_dim("cumsum", dim, x.ndim),))

    @scalar_dims
    def cumprod(self, dim: int, *, dtype: Any = None) -> Any:
        """Cumulative product; its gradient is exact where elements are zero. ``dtype``
        casts first; bools multiply as int64, as torch's."""
        x = self if dtype is None else self.cast(dtype)
        if x.dtype == "bool" and dtype is not None:
            return _cumulative_as_bool("cumprod", x, dim)
        if x.dtype in _WIDENED:
            if dtype is not None:
                return x.cast("int64").cumprod(dim).cast(x.dtype)
            x = x.cast("int64")
        return x._apply("cumprod", (x,), (normalize_dim("cumprod", dim, x.ndim),))

    @scalar_dims
    def cummax(self, dim: int) -> Any:
        """The running maximum along ``dim``: the values (API.md section 2, Burn's), which
        are also torch's ``(values, indices)`` pair (:class:`~.pairs.ValuesAndIndices`)."""
        return CummaxResult(*self.cummax_with_indices(dim))

    @scalar_dims
    def cummin(self, dim: int) -> Any:
        """The running minimum along ``dim``, as :meth:`cummax`."""
        return CumminResult(*self.cummin_with_indices(dim))

    @scalar_dims
    def cummax_with_indices(self, dim: int) -> tuple[Any, Any]:
        return self._apply("cummax", (self,), (normalize_dim("cummax", dim, self.ndim),))

    @scalar_dims
    def cummin_with_indices(self, dim: int) -> tuple[Any, Any]:
        return self._apply("cummin", (self,), (normalize_dim("cummin", dim, self.ndim),))

    # -- sorting ------------------------------------------------------------------------------
    @scalar_dims
    def sort(self, *args: Any, **kwargs: Any) -> Any:
        """The values sorted along ``dim`` (API.md section 2), which are also torch's
        ``(values, indices)`` pair: ``sort(dim=-1, descending=False)``, or, as torch's other
        overload, ``sort(*, stable, dim=-1, descending=False)`` (``stable`` keyword-only with
        ``dim`` and ``descending`` keywords too)."""
        return self._sorted(*_stable_overload("sort", args, kwargs))

    def _sorted(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
        """The values sorted along ``dim`` (API.md section 2), which are also torch's
        ``(values, indices)`` pair (:class:`~.pairs.ValuesAndIndices`); always stable. (torch's
        CPU ``sort(stable=False)`` of float32/float64/int32/int64 runs x86-simd-sort, whose
        order of ties depends on the machine's vector width (AVX2 or AVX-512), so no fixed
        order reproduces it; ties here keep their original order.)"""
        return SortResult(*self.sort_with_indices(dim, descending))

    @scalar_dims
    def sort_with_indices(self, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
        d = normalize_dim("sort", dim, self.ndim)
        values, indices = self._apply("sort", (self,), (d, bool(descending)))
        layout = preserved_layout(self)
        if layout is not None:  # torch's sort writes into empty_like(self): self's layout
            values._layout = indices._layout = (tuple(self.shape), layout)
        return values, indices

    @scalar_dims
    def argsort(self, *args: Any, **kwargs: Any) -> Any:
        """torch's ``argsort`` (always stable, so ``stable`` changes nothing: see
        :meth:`sort`), with ``sort``'s two overloads."""
        dim, descending, _stable = _stable_overload("argsort", args, kwargs)
        return self.sort_with_indices(dim, descending)[1]

    def topk(  # (a 0-d tensor: the function's, which takes torch's k=0 there too)
        self,
        k: int,
        dim: int = -1,
        largest: bool = True,
        sorted: bool = True,  # noqa: A002 (torch's name)
    ) -> Any:
        """The ``k`` largest (``largest=False``: smallest) entries along ``dim``, largest
        (smallest) first: the values (API.md section 2), which are also torch's ``(values,
        indices)`` pair (:class:`~.pairs.ValuesAndIndices`)."""
        return topk(self, k, dim, largest, sorted)

    @scalar_dims(position=1)
    def topk_with_indices(
        self,
        k: int,
        dim: int = -1,
        largest: bool = True,
        sorted: bool = True,  # noqa: A002
    ) -> tuple[Any, Any]:
        d = self._topk_dim(k, dim)
        return self._apply("topk", (self,), (int(k), d, bool(largest), bool(sorted)))

    def _topk_dim(self, k: int, dim: int) -> int:
        """``dim`` normalized, once ``topk``'s dtype and ``k`` are checked."""
        if self.dtype == "bool":
            raise DTypeError("topk: bool tensors are not supported (as in torch)")
        d = normalize_dim("topk", dim, self.ndim)
        if not 0 <= k <= self.shape[d]:
            raise ShapeError(
                f"topk: k={k} is out of range for dimension {dim} of size {self.shape[d]}"
            )
        return d

    # -- contraction --------------------------------------------------------------------------
    @autocast_op("matmul")
    def matmul(self, other: Any) -> Any:
        """Matrix product; batched, batch dims broadcasting; 1-d operands as in NumPy."""
        if getattr(type(other), "_sparse_coo", False):
            from .sparse_coo import dense_sparse_mm

            return dense_sparse_mm("matmul", self, other)
        refuse_sequence("matmul", other)
        a, b = joined(self, other, "matmul")  # (unguarded: it joins a decorator itself)
        same_dtype("matmul", a, b)
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
        if squeeze or out.ndim > 2:
            node = getattr(out._prim, "node", None)
            if node is not None and node.op is not None:  # torch's node, by the ranks
                node.torch_name = _MATMUL_NODES.get((len(a_shape), len(b_shape))) or (
                    "CloneBackward0" if len(a_shape) == 2 else "UnsafeViewBackward0"
                )
        return out

    @autocast_op("mm")
    def mm(self, mat2: Any) -> Any:
        """The product of two matrices (2-d only, as torch's ``mm``; ``mat2`` may be sparse)."""
        if getattr(type(mat2), "_sparse_coo", False):
            from .sparse_coo import dense_sparse_mm

            return dense_sparse_mm("mm", self, mat2)
        other = lift(self, mat2, "mm")
        if self.ndim != 2 or other.ndim != 2:
            raise ShapeError(
                f"mm: expects two matrices, got shapes {shape_text(self.shape)} and "
                f"{shape_text(other.shape)}"
            )
        return self.matmul(other)

    @autocast_op("bmm")
    def bmm(self, mat2: Any) -> Any:
        """Batched matrix product of ``[b, n, m]`` and ``[b, m, p]`` (no broadcasting)."""
        other = lift(self, mat2, "bmm")
        if self.ndim != 3 or other.ndim != 3 or self.shape[0] != other.shape[0]:
            raise ShapeError(
                f"bmm: expects [b, n, m] and [b, m, p] with one b, got "
                f"{shape_text(self.shape)} and {shape_text(other.shape)}"
            )
        return self.matmul(other)

    @autocast_op("mv")
    def mv(self, vec: Any) -> Any:
        other = lift(self, vec, "mv")
        if self.ndim != 2 or other.ndim != 1:
            raise ShapeError(
                f"mv: expects a matrix and a vector, got {shape_text(self.shape)} and "
                f"{shape_text(other.shape)}"
            )
        return self.matmul(other)

    @autocast_op("dot")
    def dot(self, tensor: Any) -> Any:
        """torch's ``dot`` (its parameter's name ``tensor`` too): the inner product of two
        vectors."""
        other = lift(self, tensor, "dot")
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

    @autocast_op("trace")
    def trace(self) -> Any:
        """The sum of the main diagonal of a matrix (2-d only, as torch's)."""
        if self.ndim != 2:
            raise ShapeError(f"trace: expected a matrix, got shape {shape_text(self.shape)}")
        if self.dtype == "bool":
            raise DTypeError("trace: not implemented for bool tensors (as in torch)")
        return self.diagonal().sum()

    def diff(self, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Any:
        """The ``n``-th forward difference along ``dim`` (``prepend``/``append`` joined
        first)."""
        from .shape import cat

        x = self
        if not isinstance(n, numbers.Integral) or n < 0:
            raise InvalidValueError(f"diff: order n must be a non-negative int, got {n!r}")
        d = normalize_dim("diff", dim, self.ndim)
        before, after = (None if p is None else lift(x, p, "diff") for p in (prepend, append))
        for part in (before, after):
            if part is not None and part.ndim != x.ndim:  # (torch's RuntimeError, n=0 too)
                raise SizeMismatchError(
                    f"diff: prepend and append must have the input's {x.ndim} dimensions, got "
                    f"{shape_text(part.shape)} for {shape_text(x.shape)}"
                )
        if n == 0:  # torch's: the input itself, prepend and append not joined
            return x
        if before is not None or after is not None:
            x = cat([p for p in (before, x, after) if p is not None], d)
        for _ in range(n):
            size = x.shape[d]
            if size == 0:  # torch: an empty difference stays empty
                break
            later, earlier = x.narrow(d, 1, size - 1), x.narrow(d, 0, size - 1)
            x = later.logical_xor(earlier) if x.dtype == "bool" else later - earlier
        return x

    def __matmul__(self, other):
        return self.matmul(other)

    def __rmatmul__(self, other):
        refuse_sequence("matmul", other)
        return lift(self, other, "matmul").matmul(self)


#: torch's node of ``a @ b`` by the ranks of ``a`` and ``b`` where its product is no ``mm``
#: (a batched one: ``UnsafeViewBackward0``, or ``CloneBackward0`` for a matrix first)
_MATMUL_NODES = {(1, 1): "DotBackward0", (2, 1): "MvBackward0", (1, 2): "SqueezeBackward4"}


def _cumulative_as_bool(op: str, x: Any, dim: int) -> Any:
    """``cumsum``/``cumprod`` with ``dtype=bool``: torch has no bool kernel for them, so only
    the results that need none (0-d or empty: the input cast) are given."""
    normalize_dim(op, dim, x.ndim)
    if x.ndim and x.numel():
        raise DTypeError(f"{op}: dtype=bool is not supported (as in torch), got {tuple(x.shape)}")
    return x.clone()


def same_dtype(op: str, *operands: Any) -> None:
    """torch's rule for matrix products: no type promotion (the operands share one dtype,
    and it is not bool); a mixed product is an error, never a silent cast."""
    dtypes = [t.dtype for t in operands]
    if len(set(dtypes)) > 1:
        shapes = ", ".join(f"{t.dtype} {shape_text(t.shape)}" for t in operands)
        raise MixedDTypeError(f"{op}: expected operands of one dtype, got {shapes}")
    if dtypes and dtypes[0] == "bool":
        raise UnsupportedDTypeError(  # (torch's NotImplementedError: "addmm_impl_cpu_" ...)
            f"{op}: not implemented for bool tensors (cast to int64 or a float)"
        )


def topk(
    x: Any,
    k: int,
    dim: int = -1,
    largest: bool = True,
    sorted: bool = True,  # noqa: A002
) -> tuple[Any, Any]:
    """``(values, int64 indices)`` of the ``k`` largest (``largest=False``: smallest) entries
    along ``dim``, as ``torch.topk``, as a :class:`~.pairs.ValuesAndIndices` (the values
    tensor too, as the method ``x.topk(k, d)`` of API.md section 2 gives). Sorted, largest
    (or smallest) first, unless ``sorted=False``; tied values (and, unsorted, the order) as
    torch's CPU kernel gives them."""
    k = int_parameter("topk", k, "k")
    if x.ndim == 0 and isinstance(dim, numbers.Integral) and dim in (0, -1):
        # torch sees a 0-d tensor as [1] along dim 0 or -1 (the default): the result 0-d again,
        # its one value even for k=0 (torch's kernel copies a one-element input whole)
        values, indices = topk(x.reshape((1,)), k or 1, 0, largest, sorted)
        return TopkResult(values.reshape(()), indices.reshape(()))
    return TopkResult(*x.topk_with_indices(k, dim, largest, sorted))


# -- compositions ---------------------------------------------------------------------------------
def _dim_or_other(op: str, dim: Any, other: Any) -> Any:
    """``max``/``min``'s second argument: ``dim`` (an int or a tensor given positionally) or
    torch's ``other=`` keyword (a tensor), not both."""
    if other is None:
        return dim
    if dim is not None:
        raise InvalidArgumentError(f"{op}: give dim or other, not both (got dim={dim!r})")
    return other


def _dims(op: str, dim: Any, ndim: int) -> tuple[int, ...]:
    """``dim`` (``None``, an int or several; ``()`` for all) as sorted normalized dims."""
    if dim is None:
        return tuple(range(ndim))
    dims = int_dims(op, dim)
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


def _own(result: Any) -> Any:
    """``result``, a view (a squeeze, a reshape) of a temporary this op made, cut from it:
    torch's result of the op is no view, so ``detach_()`` of it works there (``x.argmax()
    .detach_()``, ``x.max(0).values.detach_()`` raised "can't detach views in-place" here,
    round 93) and writes into it have no base to reach."""
    unlink(result)
    return result


def _arg_extremum(x: Any, op: str, dim: Any, keepdim: bool) -> Any:
    if x.dtype == "bool":
        raise DTypeError(f"{op}: bool tensors are not supported (as in torch); cast to int64")
    if dim is None:
        flat = x.reshape((-1,))
        out = flat._apply(op, (flat,), (flat._reduce_dim(op, 0),)).reshape(())
        return _own(out.reshape((1,) * x.ndim) if keepdim else out)
    d = x._reduce_dim(op, dim)
    out = x._apply(op, (x,), (d,))
    return out if keepdim else _own(out.squeeze_dim(d))


def _even_extremum(x: Any, op: str, dim: Any, keepdim: bool, nan_ties: bool = False) -> Any:
    """``amax``/``amin``: the values of successive ``max_dim``/``min_dim``; the gradient
    split evenly among the tied elements (``x - x.detach()`` is zero in value, so the value
    is the extremum exactly and the gradient is ``tied / count``). With ``nan_ties`` a NaN
    result's ties are the NaNs (the infinite norms' rule)."""
    dims = _dims(op, dim, x.ndim)
    if any(x.shape[d] == 0 for d in dims) or (not dims and x.numel() == 0):
        x._nonempty(op)  # torch refuses only a reduction over an empty dimension
    if x.requires_grad and x.is_float():
        # one op of the op table (autodiff/ops.py), whose rule reads x and the result: torch's
        # ties share the gradient; amax's backward counts the elements equal to the result,
        # none when it is NaN (with nan_ties, the NaNs)
        return _dropped(x._apply(op, (x,), (dims, nan_ties)), dims, keepdim)
    value = x
    for d in dims:
        value = value.max_dim(d) if op == "amax" else value.min_dim(d)
    return _dropped(value, dims, keepdim)


def _empty_median(flat: Any) -> Any:
    """torch's median of no elements: NaN, as its kernel casts it to the tensor's dtype
    (int64's minimum, bool's True)."""
    if flat.is_float():
        return flat.sum() * math.nan
    return flat.new_full((), -(2**63) if flat.dtype == "int64" else True, dtype=flat.dtype)


def _median_position(x: Any, d: int) -> Any:
    """Where each slice's median sits along ``d`` after a stable ascending sort (kept dim):
    the lower middle, or the first NaN (sorted last) where the slice holds any."""
    n = x.shape[d]
    shape = tuple(1 if axis == d else size for axis, size in enumerate(x.shape))
    middle = (n - 1) // 2
    if not x.is_float():
        return untracked(x).sum_dim(d).cast("int64").mul(0).add(middle).reshape(shape)
    nans = untracked(x).isnan().cast("int64").sum_dim(d)
    return (nans.mul(-1).add(n)).mask_where(nans.equal_elem(0), nans.mul(0).add(middle))


def _shared_evenly(
    x: Any, constant: Any, value: Any, dims: tuple[int, ...], nan_ties: bool = True
) -> Any:
    """``value`` (an extremum or median of ``x`` over ``dims``, kept) with torch's gradient:
    split evenly among the elements equal to it (with ``nan_ties``, the NaNs when it is NaN,
    as torch's evenly_distribute_backward). ``x - constant`` is zero in value where finite,
    so a finite value is exact; an infinite or NaN one is the mean of its tied copies (itself,
    exactly), so that ``inf - inf`` puts no NaN into it."""
    mask = constant.equal(value)
    if nan_ties:
        mask = mask.logical_or(constant.isnan().logical_and(value.isnan()))
    tied = mask.cast(x.dtype)
    count = tied.sum(dims, keepdim=True)
    # (every element's gradient is grad * tied / count, as torch's: an infinite or NaN
    # gradient makes the untied ones NaN too; only infinite elements are masked, where
    # x - constant would put inf - inf into the value)
    offset = (x - constant).mask_fill(constant.isfinite().logical_not(), 0.0)
    out = value + (offset * tied).sum(dims, keepdim=True) / count
    # (the infinite and NaN results mended on the device whatever they are: a host read
    # asking whether any is would stall an accelerator's queue at every call)
    copies = value.expand(x.shape).mask_where(mask, x)  # x where tied: equal to value
    extreme = copies.mask_fill(mask.logical_not(), 0.0).sum(dims, keepdim=True) / count
    if not nan_ties:  # a NaN nothing equals: torch's grad * mask / count is NaN everywhere
        unmatched = (x * (tied / count)).sum(dims, keepdim=True)
        extreme = extreme.mask_where(count.equal(0.0), unmatched)
    return out.mask_where(value.isfinite().logical_not(), extreme)


def _variance(x: Any, op: str, dim: Any, unbiased: Any, keepdim: bool, correction: Any) -> Any:
    if isinstance(dim, bool):  # torch's ``var(input, unbiased)`` overload: every element
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased else 0
    if x.is_complex():  # torch's: E|z - mean|^2, the real part's variance plus the imaginary's
        return _variance(x.real, op, dim, None, keepdim, correction) + _variance(
            x.imag, op, dim, None, keepdim, correction
        )
    if not x.is_float():
        raise DTypeError(
            f"{op}: only floating point tensors are supported (as in torch), got {x.dtype}"
        )
    dims = _dims(op, dim, x.ndim)
    count = math.prod(x.shape[d] for d in dims)
    scale = count - correction
    if scale > 0:
        # one op of the op table whose rule reads x, torch's var_backward (autodiff/ops.py):
        # the composition below held x - mean, an array of x's size, beside x
        return _dropped(x._apply("variance", (x,), (dims, correction)), dims, keepdim)
    # No degrees of freedom left. torch's var_backward is 2 / (n - correction) * grad *
    # (x - mean), its forward divides by max(n - correction, 0): the mean's own path (zero in
    # exact arithmetic) is not in it, and would turn an infinity of the slice into inf - inf,
    # NaN at every element. So the mean is a constant here, and ``_mean_curvature`` (zero in
    # value and first derivative) gives back the mean's part of the second derivative,
    # 2 / (n - c) (I - 1 / n).
    mean = untracked(x.mean(dims, keepdim=True))
    total = (x - mean).square().sum(dims, keepdim=True)
    if scale == 0:  # the incoming gradient is not finite anyway
        return _dropped(total / 0.0, dims, keepdim)
    # torch: forward total / 0 (inf, or NaN for 0), backward by the negative n - c
    out = total / scale
    out = out + untracked(total / 0.0 - out)
    if x.requires_grad:
        out = out + _mean_curvature(x, dims, count * scale)
    return _dropped(out, dims, keepdim)


def _rounded_once(low: Any, exact: Any) -> Any:
    """``exact`` (float32, untracked) rounded to ``low``'s 16-bit dtype as the value, with the
    gradient of ``low`` (the same quantity computed in 16 bits): ``low - low`` is exactly 0
    where ``low`` is finite (its gradient ``low``'s), and 0 untracked where it is not."""
    constant = untracked(low)
    shift = (low - constant).mask_fill(constant.isfinite().logical_not(), 0.0)
    return shift + exact.cast(low.dtype)


def _mean_curvature(x: Any, dims: tuple[int, ...], divisor: float) -> Any:
    """``-(sum of (x - x0))**2 / divisor`` over ``dims`` (kept), ``x0`` being ``x``'s value:
    0 in value and in first derivative, its second derivative ``-2 / divisor`` for every pair
    of elements of a slice. The sum is exactly 0, or NaN for a slice holding a non-finite
    element: such a slice's term is cut to 0 (its NaN would reach every element's first
    derivative), one reduced element each, so the term costs a subtraction and a sum."""
    shift = (x - untracked(x)).sum(dims, keepdim=True)
    return shift.mask_fill(shift.isnan(), 0.0).square() / -divisor


def _stable_overload(op: str, args: tuple, kwargs: dict) -> tuple[Any, Any, Any]:
    """``(dim, descending, stable)`` of a ``sort``/``argsort`` call, as torch's two overloads
    read them: ``(dim=-1, descending=False)``, positional or keyword, or ``(*, stable,
    dim=-1, descending=False)``, all keywords; ``stable`` beside a positional argument
    matches neither, and torch refuses it (``x.sort(0, stable=True)``)."""
    if "axis" in kwargs:  # torch's parser takes NumPy's name for dim (errors._NUMPY_NAMES)
        if "dim" in kwargs:
            raise DTypeError(f"{op}: got dim twice (as dim= and as axis=)")
        kwargs = {("dim" if key == "axis" else key): value for key, value in kwargs.items()}
    unknown = set(kwargs) - {"dim", "descending", "stable"}
    if unknown:
        raise DTypeError(f"{op}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    if len(args) > 2:
        raise DTypeError(
            f"{op}() takes at most 2 positional arguments (dim, descending), got {len(args)}"
        )
    if "stable" in kwargs and args:
        raise DTypeError(
            f"{op}(): stable= is keyword-only with dim= and descending= keywords too (torch's "
            f"overload (*, bool stable, int dim=-1, bool descending=False)); got "
            f"{len(args)} positional argument(s) beside it: write {op}(dim=..., stable=...)"
        )
    named = dict(zip(("dim", "descending"), args))
    for key in named:
        if key in kwargs:
            raise DTypeError(f"{op}() got multiple values for argument {key!r}")
    named.update(kwargs)
    return named.get("dim", -1), named.get("descending", False), named.get("stable", False)
