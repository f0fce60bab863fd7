"""torch's selection statistics, scatter forms, rearrangements, counts and metadata methods:
``kthvalue``, ``nanmedian``, ``quantile``/``nanquantile``, ``nanmean``, ``aminmax``, ``cov``,
``corrcoef``, ``renorm``, ``dist``; ``take_along_dim``, ``scatter_reduce``, ``index_put``,
``select_scatter``, ``slice_scatter``, ``diag_embed``, ``diagflat``; ``rot90``, ``msort``,
``hsplit``/``vsplit``/``dsplit``, ``split_with_sizes``, ``sum_to_size``; ``unique``,
``unique_consecutive``, ``bincount``, ``histc``, ``multinomial``, ``bernoulli``; and
``is_signed``, ``nbytes``, ``itemsize``..., with the autograd-hook names (``register_hook``,
``grad_fn``, ``retains_grad``) answered as they hold here.

:class:`SelectionMixin` needs one primitive from the class it is mixed into: ``_apply(op,
inputs, params=())`` (:func:`retrograd.tensor._dispatch.apply`), through the methods of the
other mixins it composes (``sort``, ``gather``, ``index_copy``, ``flip``...), so every
differentiable result here has the parts' gradients. Counts whose size is data (``unique``,
``bincount``, ``histc``) read the values on the host, as torch's do.

>>> import retrograd as rg
>>> rg.tensor([[1, 2], [3, 4]]).rot90().tolist()
[[2, 4], [1, 3]]
>>> rg.tensor([3.0, 1.0, 2.0]).kthvalue(2).values.item()
2.0
"""

from __future__ import annotations

import math
import numbers
import operator
from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..autodiff.grad_mode import enable_grad, no_grad
from ..autodiff.ops import OPS
from ..backend.protocol import default_float_dtype
from ..backend.std_algorithms import std_sort
from ..errors import (
    NODE_NAMERS,
    AutodiffError,
    DTypeError,
    EmptyReductionError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    InvalidValueError,
    KernelArgumentError,
    KernelDTypeError,
    MixedDTypeError,
    SamplingError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
    check_callable,
    shape_text,
)
from ._dispatch import (
    COMPLEX_DTYPES,
    FLOAT_DTYPES,
    GRAD_DTYPES,
    INT_DTYPES,
    TensorBase,
    check_same_dtype,
    checked_generator,
    from_host,
    int_argument,
    lift,
    normalize_dim,
    scalar_dims,
    tensor_argument,
    untracked,
    wrap,
)
from .autocasting import autocast_op
from .complexes import complex as complex_of_parts
from .dtypes import DTYPE_OBJECTS
from .functions import check_unique_dim, refused_derivative
from .functions import unique as _unique
from .indexing import check_values, larger_src_message, refuse_backward
from .layouts import preserve_format
from .spacing import torch_linspace
from .torch_nodes import TorchOnlyNode
from .views import SHOW_AS_REPLACED, complex_view_of, link, refuse_rebased_no_grad_view

__all__ = ["AminmaxResult", "KthvalueResult", "SelectionMixin", "multinomial"]

#: torch's ``torch.return_types``
KthvalueResult = namedtuple("kthvalue", ["values", "indices"])
NanmedianResult = namedtuple("nanmedian", ["values", "indices"])
AminmaxResult = namedtuple("aminmax", ["min", "max"])
HistogramResult = namedtuple("histogram", ["hist", "bin_edges"])
ModeResult = namedtuple("mode", ["values", "indices"])
_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")
#: the spellings torch's ``scatter_reduce`` forward also takes (ATen's ``get_reduction_enum``),
#: as the names they stand for (its backward and ``index_reduce`` refuse them)
_SCATTER_REDUCE_ALIASES = {"max": "amax", "min": "amin"}


def _write_part(part: Any, value: Any) -> None:
    """Write ``value`` into ``part`` (a ``.real``/``.imag`` view): ``copy_`` of a tensor, or
    ``fill_`` with a number. (``z.real += v`` assigns back a view it already wrote: the
    copy writes the same values again, as torch's setter does.)"""
    if isinstance(value, TensorBase):
        part.copy_(value)
    else:
        part.fill_(value)


class SelectionMixin:
    """Selection statistics, scatter forms, rearrangements, counts and metadata; needs
    ``_apply`` (see the module docstring)."""

    __slots__ = ()
    _apply: Callable[..., Any]  # the one primitive: retrograd.tensor._dispatch.apply
    dtype: str
    shape: tuple[int, ...]
    ndim: int
    _backend: Any
    _device: Any
    _prim: Any

    # -- selection statistics -----------------------------------------------------------------
    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> Any:
        """``(values, indices)`` of the ``k``-th smallest element along ``dim`` (1-based)."""
        x = self.reshape((1,)) if self.ndim == 0 else self
        d = normalize_dim("kthvalue", dim, x.ndim)
        if x.shape[d] == 0:  # (torch's IndexError, before its dtype check)
            raise EmptyReductionError(
                f"kthvalue: dimension {dim} of shape {shape_text(self.shape)} is empty"
            )
        if self.dtype == "bool" and self.ndim:  # (torch's 0-d path takes bools)
            raise DTypeError("kthvalue: not implemented for bool tensors (as in torch)")
        if not 1 <= k <= x.shape[d]:
            raise ShapeError(
                f"kthvalue: k={k} is out of range for dimension {dim} of size {x.shape[d]}"
            )
        values, indices = x.sort_with_indices(d)
        indices = indices.narrow(d, k - 1, 1)
        if x.device.kind == "cpu":
            indices = _kth_ties_as_torch(x, values, indices, d, k)
        values = x.gather(d, indices)  # (the gradient goes to that index, as torch's)
        if not keepdim or self.ndim == 0:
            shape = self.shape if self.ndim == 0 else None
            values = values.squeeze_dim(d) if shape is None else values.reshape(shape)
            indices = indices.squeeze_dim(d) if shape is None else indices.reshape(shape)
        return KthvalueResult(values, indices)

    @scalar_dims
    def nanmedian(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """:meth:`median` ignoring NaN (the lower middle of the others; NaN where all are)."""
        # (torch's nanmedian of all of an empty bool tensor is True; along a dim it refuses)
        if self.dtype == "bool" and (self.numel() or dim is not None):
            raise DTypeError("nanmedian: not implemented for bool tensors (as in torch)")
        if dim is None:
            flat = self.reshape((-1,))
            if flat.shape[0] == 0:  # torch: NaN, not an error
                from .reduce import _empty_median

                return _empty_median(flat)
            value = _nan_lower_middle(untracked(flat), 0)[0].reshape((1,))
            if not flat.requires_grad:
                return value.reshape(())
            # torch shares the gradient among the elements equal to it, as median's
            from .reduce import _shared_evenly

            return _shared_evenly(flat, untracked(flat), value, (0,)).reshape(())
        d = normalize_dim("nanmedian", dim, self.ndim)
        if self.ndim and self.shape[d] == 0:
            raise EmptyReductionError(
                f"nanmedian: dimension {dim} of shape {shape_text(self.shape)} is empty"
            )
        values, indices = _nan_lower_middle(self, d)
        if not keepdim:
            values, indices = values.squeeze_dim(d), indices.squeeze_dim(d)
        return NanmedianResult(values, indices)

    @autocast_op("quantile")
    def quantile(
        self, q: Any, dim: int | None = None, keepdim: bool = False, *,
        interpolation: str = "linear",
    ) -> Any:  # fmt: skip
        """The ``q``-quantiles (a number, or a 1-d tensor of them: a leading dim) along
        ``dim`` (of all elements when ``None``), interpolated as torch's; NaN where a slice
        holds one."""
        return _quantile(self, "quantile", q, dim, keepdim, interpolation, ignore_nan=False)

    @autocast_op("nanquantile")
    def nanquantile(
        self, q: Any, dim: int | None = None, keepdim: bool = False, *,
        interpolation: str = "linear",
    ) -> Any:  # fmt: skip
        """:meth:`quantile` of the values that are not NaN."""
        return _quantile(self, "nanquantile", q, dim, keepdim, interpolation, ignore_nan=True)

    def mode(self, dim: int = -1, keepdim: bool = False) -> Any:
        """``(values, indices)`` of the most frequent value along ``dim`` (the smallest of
        those equally frequent; each NaN counted apart) and the position torch's CPU kernel
        reports for it (:func:`_torch_mode_position`); the positions are found on the host,
        the values gathered (the gradient reaches those positions)."""
        if self.is_complex():  # (torch's NotImplementedError: "mode_cpu" not implemented)
            raise UnsupportedDTypeError(f"mode: not implemented for {self.dtype} tensors")
        x = self.reshape((1,)) if self.ndim == 0 else self
        d = normalize_dim("mode", dim, x.ndim)
        if x.shape[d] == 0:
            raise EmptyReductionError(  # (torch's IndexError, a ShapeError of ours)
                f"mode: dimension {dim} of shape {shape_text(self.shape)} is empty"
            )
        rows = np.moveaxis(x.numpy(), d, -1)
        flat = rows.reshape(-1, rows.shape[-1])
        positions = np.array([_torch_mode_position(row) for row in flat], np.int64)
        index = self._host(np.moveaxis(positions.reshape(rows.shape[:-1] + (1,)), -1, d), "int64")
        values = x.gather(d, index)
        if not keepdim or self.ndim == 0:
            values, index = values.squeeze_dim(d), index.squeeze_dim(d)
        return ModeResult(values, index)

    def logcumsumexp(self, dim: int) -> Any:
        """``log(cumsum(exp(self)))`` along ``dim`` without overflow or underflow (the
        backend's scan), with torch's gradient (NaN at infinite inputs, as torch's)."""
        d = normalize_dim("logcumsumexp", dim, self.ndim, scalar=True)
        if self.dtype not in FLOAT_DTYPES:
            raise UnsupportedDTypeError(
                f"logcumsumexp: expected a floating point tensor, got {self.dtype}"
            )
        if self.ndim == 0:  # (0 or -1: the value itself, its gradient passed on, as torch's)
            return self
        return self._apply("logcumsumexp", (self,), (d,))

    @scalar_dims
    def nanmean(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
        """The mean of the values that are not NaN (float tensors)."""
        if self.dtype not in FLOAT_DTYPES:  # (torch: whatever dtype= says)
            raise UnsupportedDTypeError(
                f"nanmean: expected a floating point tensor, got {self.dtype}"
            )
        x = self if dtype is None else self.cast(dtype)
        if x.dtype not in FLOAT_DTYPES:  # (torch's RuntimeError: "could not infer output dtype")
            raise UnsupportedDTypeError(
                f"nanmean: dtype= must be a floating point dtype, got {x.dtype}"
            )
        if dim is None:  # every dim (kept, of size 1, with keepdim: torch's)
            dim = ()
        count = x.isnan().logical_not().cast(x.dtype).sum(dim, keepdim)
        return x.nansum(dim, keepdim) / count

    def aminmax(self, *, dim: int | None = None, keepdim: bool = False) -> Any:
        """``(min, max)`` over ``dim`` (all elements when ``None``)."""
        if dim is None:
            low, high = self.amin(), self.amax()
            if keepdim:
                shape = (1,) * self.ndim
                low, high = low.reshape(shape), high.reshape(shape)
            return AminmaxResult(low, high)
        return AminmaxResult(self.amin(dim, keepdim), self.amax(dim, keepdim))

    def cov(self, *, correction: int = 1, fweights: Any = None, aweights: Any = None) -> Any:
        """The covariance matrix of the variables in the rows (observations in the columns);
        a 1-d tensor or a single row is one variable (a 0-d result, as torch's). ``fweights``
        (int counts) and ``aweights`` (float importances) weight the observations, with
        torch's normalization: ``sum(w) - correction * sum(w * aweights) / sum(w)``."""
        if self.dtype == "bool":  # (torch's RuntimeError)
            raise UnsupportedDTypeError("cov: bool tensors are not supported")
        if self.ndim > 2:
            raise SizeMismatchError(
                f"cov: expected at most 2 dimensions, got {shape_text(self.shape)}"
            )
        x = self.reshape((1, -1)) if self.ndim < 2 else self
        x = x if x.dtype in FLOAT_DTYPES or x.is_complex() else x.cast(default_float_dtype())
        n = x.shape[1]
        weights = importances = None
        for name, given, integral in (("fweights", fweights, True), ("aweights", aweights, False)):
            if given is None:
                continue
            w = lift(x, given, "cov")
            if not integral:
                importances = w
            if w.ndim > 1 or w.numel() != n:
                raise SizeMismatchError(
                    f"cov: {name} must be 0-d or 1-d with one weight per observation ({n}), "
                    f"got {shape_text(w.shape)}"
                )
            if (w.dtype in INT_DTYPES) != integral or w.dtype == "bool":  # (any int: torch's)
                kind = "an integral" if integral else "a floating point"
                raise UnsupportedDTypeError(f"cov: {name} must have {kind} dtype, got {w.dtype}")
            if n and bool(w.detach().min().less(0).item()):
                raise InvalidValueError(f"cov: {name} cannot be negative")
            weights = w if weights is None else weights * w
        if weights is None:
            centred = x - x.mean(1, True)
            out = centred.matmul(_conj_t(centred)) / max(n - correction, 0)
            return out.reshape(()) if x.shape[0] == 1 else out
        total = weights.sum()
        if not bool(total.detach().ne(0).item()):
            raise InvalidValueError("cov: weights sum to zero, can't be normalized")
        centred = x - ((x * weights).sum(1) / total).unsqueeze_dim(1)
        if importances is not None and correction != 0:
            norm = total - (weights * importances).sum() * correction / total
        else:
            norm = total - correction
        norm = norm.mask_fill(norm.lower_equal(0), 0)  # (torch's: inf or NaN, with a warning)
        out = centred.matmul(_conj_t(centred * weights)) / norm
        return out.reshape(()) if x.shape[0] == 1 else out

    def corrcoef(self) -> Any:
        """Pearson's correlation coefficients of the rows, clipped to ``[-1, 1]``."""
        c = self.cov()
        if c.ndim == 0:
            return c / c
        diagonal = c.diagonal()
        std = (diagonal.real if diagonal.is_complex() else diagonal).sqrt()
        c = c / std.unsqueeze_dim(1) / std.unsqueeze_dim(0)
        if c.is_complex():  # each part clipped, as torch's
            return complex_of_parts(c.real.clamp(-1.0, 1.0), c.imag.clamp(-1.0, 1.0))
        return c.clamp(-1.0, 1.0)

    def renorm(self, p: float, dim: int, maxnorm: float) -> Any:
        """Each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` scaled down to it
        (by ``maxnorm / (norm + 1e-7)``, torch's factor)."""
        if self.ndim < 2:  # (torch's rule: one slice per entry of dim, of at least one dim)
            raise SizeMismatchError(
                f"renorm: input needs at least 2 dimensions, got {shape_text(self.shape)}"
            )
        d = normalize_dim("renorm", dim, self.ndim)
        if not p > 0:  # NaN too
            raise InvalidValueError(f"renorm: non-positive-norm not supported, got p={p!r}")
        if not maxnorm >= 0:
            raise InvalidValueError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm!r}")
        others = tuple(i for i in range(self.ndim) if i != d)

        def norm_of(x: Any) -> Any:
            return x.norm(p, others, True) if others else x.abs()

        # Scaled only where the norm exceeds maxnorm: a slice whose norm is NaN is kept, as
        # torch's kernel keeps it. The kept slices are zeroed before the differentiable norm,
        # so that no NaN (or 1 / 0) of theirs reaches the gradient through the masked factor.
        plain_norms = norm_of(self.detach())
        exceeds = plain_norms.greater(maxnorm)
        if self.requires_grad and self.is_float() and not self.is_complex():
            # one op of the op table whose rule reads the input alone and recomputes the
            # norms, as torch's renorm_backward: the composite below held the masked input
            # and the factor's quotient (2.04x torch's saved bytes; 7 December). The factor,
            # untracked, is the composite's to the bit (a scaled slice's norm is the same
            # masked or not), and so are the values.
            factor = (maxnorm / (plain_norms + 1e-7)).mask_fill(~exceeds, 1.0)
            return self._apply("renorm", (self, factor), (float(p), others, float(maxnorm)))
        norms = norm_of(self.mask_fill(~exceeds, 0.0))
        factor = (maxnorm / (norms + 1e-7)).mask_fill(~exceeds, 1.0)
        return self * factor

    def dist(self, other: Any, p: float = 2) -> Any:
        """The ``p``-norm of ``self - other``."""
        return (self - tensor_argument("dist", other)).norm(p)

    def msort(self) -> Any:
        """The values sorted along dim 0."""
        return self.sort(0).values

    # -- index and scatter forms --------------------------------------------------------------
    def take_along_dim(self, indices: Any, dim: int | None = None) -> Any:
        """``gather`` along ``dim`` with the other dims of ``self`` and ``indices``
        broadcast; with ``dim=None``, of the flattened tensors."""
        index = lift(self, indices, "take_along_dim")
        if dim is None:
            return self.reshape((-1,)).gather(0, index.reshape((-1,)))
        d = normalize_dim("take_along_dim", dim, self.ndim)
        if index.dtype != "int64":  # (torch's, with a dim: Long alone; gather takes int32)
            raise DTypeError(
                f"take_along_dim: indices must be int64 with a dim (as torch's), got {index.dtype}"
            )
        if index.ndim != self.ndim:
            raise ShapeError(
                f"take_along_dim: input and indices must have the same number of dimensions, "
                f"got {shape_text(self.shape)} and {shape_text(index.shape)}"
            )
        sizes = [1 if i == d else n for i, n in enumerate(self.shape)]
        broadcast = np.broadcast_shapes(
            tuple(sizes), tuple(1 if i == d else n for i, n in enumerate(index.shape))
        )
        source = self.expand(tuple(self.shape[d] if i == d else n for i, n in enumerate(broadcast)))
        index = index.expand(
            tuple(index.shape[d] if i == d else n for i, n in enumerate(broadcast))
        )
        # torch counts negative indices from the end here (not with dim=None, nor in gather)
        index = index.mask_where(index.lower_elem(0), index + self.shape[d])
        return source.gather(d, index)

    def scatter_reduce(
        self, dim: int, index: Any, src: Any, reduce: str, *, include_self: bool = True
    ) -> Any:
        """``src`` reduced into a copy at ``index`` along ``dim``: ``"sum"``, ``"prod"``,
        ``"mean"``, ``"amax"`` or ``"amin"``. ``amax``/``amin`` split the gradient evenly
        among the values that tie for the result, as torch's backward does. ``"max"`` and
        ``"min"`` give ``amax``'s and ``amin``'s values, as torch's forward does (its parser
        of the reduction reads them so; code ported from torch_scatter writes them), and a
        backward through them fails, as torch's does."""
        if isinstance(reduce, str) and reduce in _SCATTER_REDUCE_ALIASES:
            out = self.scatter_reduce(
                dim, index, src, _SCATTER_REDUCE_ALIASES[reduce], include_self=include_self
            )
            refuse_backward(
                out,
                f"scatter_reduce: the gradient of reduce={reduce!r} is not implemented (as in "
                "torch, whose backward expects 'sum', 'prod', 'mean', 'amax' or 'amin'); write "
                f"{_SCATTER_REDUCE_ALIASES[reduce]!r}, which gives the same values",
                KernelArgumentError,
            )
            return out
        check_same_dtype("scatter_reduce", self, src)  # (amax/amin/prod cast src: torch refuses)
        if not isinstance(include_self, bool | np.bool_):  # (a str was read as true)
            raise DTypeError(
                f"scatter_reduce: include_self must be a bool, got {type(include_self).__name__}"
            )
        if reduce == "mean" and self.dtype == "bool":
            raise DTypeError(
                "scatter_reduce: reduce='mean' of a bool tensor is not implemented "
                "(as in torch); cast it to a number dtype first"
            )
        if self.ndim == 0:  # torch's: dim 0 or -1, into the one value seen as [1]
            normalize_dim("scatter_reduce", dim, 0, scalar=True)
            index = index if isinstance(index, TensorBase) else np.asarray(index)
            src = lift(self, src, "scatter_reduce")
            flat = self.reshape((1,)).scatter_reduce(
                0, index.reshape((-1,)), src.reshape((-1,)), reduce, include_self=include_self
            )
            return flat.reshape(())
        empty = (index.numel() if isinstance(index, TensorBase) else np.asarray(index).size) == 0
        if empty and reduce in ("sum", "prod", "mean", "amax", "amin"):
            return self.scatter_add(dim, index, src)  # torch's: a copy, whatever the shapes
        if reduce in ("amax", "amin"):
            return self._scatter_extreme(dim, index, src, reduce, include_self)
        if reduce == "prod":
            return self._scatter_product(dim, index, src, include_self)
        if reduce not in ("sum", "mean"):
            raise InvalidArgumentError(
                f"scatter_reduce: reduce={reduce!r} is not supported (only 'sum', 'prod', "
                "'mean', 'amax' and 'amin')"
            )
        base = self if include_self else self.scatter(dim, index, value=0)
        total = base.scatter_add(dim, index, src)
        if reduce == "sum":
            return total
        index = lift(self, index, "scatter_reduce")
        ones = self._filled(index.shape, 1)
        counts = self._filled(self.shape, 1 if include_self else 0)
        counts = counts.scatter_add(dim, index, ones).clamp_min(1)
        if self.dtype in FLOAT_DTYPES:
            return total / counts
        return total.div(counts, rounding_mode="floor")

    def _scatter_extreme(
        self, dim: int, index: Any, src: Any, reduce: str, include_self: bool
    ) -> Any:
        """:meth:`scatter_reduce`'s ``amax``/``amin``: the result computed outside the graph
        (by :meth:`scatter_nd` over each index entry's full position), then the gradient routed
        to the values equal to it, split evenly at a tie, NaN where torch's is (torch's rule,
        an infinite winner's share included)."""
        op = "scatter_reduce"
        d = normalize_dim(op, dim, self.ndim)
        index, src = lift(self, index, op), lift(self, src, op)
        self.detach().scatter_add(d, index, src.detach().cast(self.dtype))  # torch's checks
        full_shape, larger = tuple(src.shape), src.shape != index.shape
        if larger:  # torch reads src only where index has entries
            src = src[tuple(slice(0, n) for n in index.shape)]
        src = src.cast(self.dtype)
        extreme = "max" if reduce == "amax" else "min"
        if include_self:
            base = self.detach()
        elif self.dtype in FLOAT_DTYPES:
            base = self.detach().scatter(
                d, index, value=-math.inf if extreme == "max" else math.inf
            )
        elif self.dtype == "bool":  # (False below every bool, True above)
            base = self.detach().scatter(d, index, value=extreme == "min")
        else:
            info = np.iinfo(self.dtype)  # (the dtype's own bounds: int64's overflow int32)
            base = self.detach().scatter(d, index, value=info.min if extreme == "max" else info.max)
        result = base.scatter_nd(self._scatter_positions(d, index), src.detach(), extreme)
        tracked = [t for t in (self, src) if t.requires_grad]
        if not tracked or self.dtype not in FLOAT_DTYPES:
            return result
        value = result.gather(d, index)
        self_won = self.detach() == result
        src_won = src.detach() == value
        # torch counts an equal self value in the split even where include_self=False leaves
        # it out (and then gives it no gradient): its rule, kept so gradients agree
        count = self_won.cast(self.dtype).scatter_add(d, index, src_won.cast(self.dtype))
        # Each value's gradient is won / count times the cell's, multiplied as torch's (not
        # masked): a loser's 0 times a NaN or infinite cell gradient is NaN, and a NaN result
        # (nothing equals it: count 0) gives every value of its cell 0/0, NaN, as torch's.
        # The carriers below are zero-valued except in such NaN cells.
        out = result
        if self.requires_grad:
            weight = self_won.cast(self.dtype) / count
            share = self._apply("zero_carrier", (self,))
            if not include_self:  # torch zeroes the gradient of the self values left out
                scattered = self._filled(self.shape, 0).scatter(d, index, value=1).cast("bool")
                share = share.mask_fill(scattered, 0.0)
                weight = weight.mask_fill(scattered, 0.0)
            out = out + share * weight
        if src.requires_grad:
            share = src._apply("zero_carrier", (src,))
            share = share * (src_won.cast(self.dtype) / count.gather(d, index))
            out = out.scatter_add(d, index, share)
        if _unbroadcastable(full_shape, index.shape):
            # (torch's backward, to self too, compares src with the result's gather)
            refuse_backward(out, larger_src_message(op, full_shape, tuple(index.shape)))
        return out

    def _scatter_product(self, dim: int, index: Any, src: Any, include_self: bool) -> Any:
        """:meth:`scatter_reduce`'s ``prod``: :meth:`scatter_nd`'s ``"mul"`` over each index
        entry's full position, so the gradient is the product of the other factors, zeros
        included (torch's)."""
        op = "scatter_reduce"
        d = normalize_dim(op, dim, self.ndim)
        index, src = lift(self, index, op), lift(self, src, op)
        self.detach().scatter_add(d, index, src.detach())  # torch's checks
        full_shape, larger = tuple(src.shape), src.shape != index.shape
        if larger:  # torch reads src only where index has entries
            src = src[tuple(slice(0, n) for n in index.shape)]
        base = self if include_self else self.scatter(d, index, value=1)
        out = base.scatter_nd(self._scatter_positions(d, index), src, "mul")
        if _unbroadcastable(full_shape, index.shape):
            # (torch's backward, to self too, divides by src of the wrong shape)
            refuse_backward(out, larger_src_message(op, full_shape, tuple(index.shape)))
        return out

    def _scatter_positions(self, d: int, index: Any) -> Any:
        """``[*index.shape, ndim]``: the full position each entry of ``index`` along ``d``
        names (its own coordinates, with the index in place of dimension ``d``)."""
        grids = np.indices(index.shape, dtype=np.int64).reshape(index.ndim, -1).T
        positions = self._host(grids, "int64").reshape((*index.shape, index.ndim))
        column = self._host(np.arange(index.ndim) == d, "bool")
        return positions.mask_where(column, index.unsqueeze(-1))

    def gather_nd(self, indices: Any) -> Any:
        """Burn's ``gather_nd``: ``indices`` (int64 ``[*batch, k]``) names a position in the
        first ``k`` dims; the result, ``[*batch, *shape[k:]]``, holds the slice there."""
        flat, batch, rest = self._nd_positions("gather_nd", indices)
        lead = math.prod(self.shape[: self.ndim - len(rest)])
        return self.reshape((lead, *rest)).select(0, flat).reshape((*batch, *rest))

    def scatter_nd(self, indices: Any, values: Any, update: str = "add") -> Any:
        """Burn's ``scatter_nd``: a copy with ``values`` (``[*batch, *shape[k:]]``) combined into
        the slices ``indices`` (int64 ``[*batch, k]``) names, by ``update``: ``"add"``,
        ``"assign"``, ``"mul"``, ``"max"`` or ``"min"`` (repeated positions add, multiply or
        reduce in turn). As Burn's, ``"max"``/``"min"`` send the gradient to every side that
        holds the result, both at a tie (torch's ``amax`` would split it); an infinite value
        that wins gets none."""
        op = "scatter_nd"
        if update not in ("add", "assign", "mul", "max", "min"):
            raise InvalidArgumentError(
                f"{op}: update must be 'add', 'assign', 'mul', 'max' or 'min', got {update!r}"
            )
        flat, batch, rest = self._nd_positions(op, indices)
        values = lift(self, values, op)
        if values.shape != (*batch, *rest):
            raise ShapeError(
                f"{op}: values must have shape {shape_text((*batch, *rest))} (indices' batch "
                f"dims, then the data's dims past k), got {shape_text(values.shape)}"
            )
        lead = math.prod(self.shape[: self.ndim - len(rest)])
        data = self.reshape((lead, *rest))
        values = values.cast(self.dtype).reshape((flat.shape[0], *rest))
        if update in ("add", "assign"):
            return data.select_assign(0, flat, values, update).reshape(self.shape)
        # one kernel however often a position repeats (no host read of the positions, no
        # loop over their repeats), torch's gradient for "mul" (the select_reduce op)
        if update == "mul":
            return data._apply("select_reduce", (data, flat, values), (0, "prod")).reshape(
                self.shape
            )
        # max / min: the result computed outside the graph, then each side's gradient routed
        # to where it equals the result (both at a tie, as Burn's backward)
        plain = values.detach()
        reduce = "amax" if update == "max" else "amin"
        result = untracked(data)._apply(
            "select_reduce", (untracked(data), flat, plain), (0, reduce)
        )
        data_won = data.detach() == result
        values_won = (plain == result.select(0, flat)) & plain.isfinite()
        out = data.mask_where(~data_won, result)
        if values.requires_grad:
            zero_valued = (values - plain).mask_fill(~values_won, 0.0)
            out = out.select_assign(0, flat, zero_valued, "add")
        return out.reshape(self.shape)

    def _nd_positions(self, op: str, indices: Any) -> tuple[Any, tuple, tuple]:
        """``indices`` ``[*batch, k]`` as flat positions in the first ``k`` dims (int64
        ``[prod(batch)]``), the batch dims and the data's dims past ``k``."""
        indices = lift(self, indices, op)
        if indices.dtype != "int64":  # (gather_nd, scatter_nd: Burn's names, int64 indices)
            raise DTypeError(f"{op}: indices must be int64, got {indices.dtype}")
        if indices.ndim < 1 or not 1 <= indices.shape[-1] <= self.ndim:
            raise ShapeError(
                f"{op}: indices must be [*batch, k] with 1 <= k <= {self.ndim} (the data's "
                f"dims, {shape_text(self.shape)}), got {shape_text(indices.shape)}"
            )
        k = indices.shape[-1]
        lead = self.shape[:k]
        rows = indices.reshape((-1, k))
        if rows.shape[0]:  # on the backend's device, no host read (indexing.check_values)
            bounds = self._host(np.asarray(lead, dtype=np.int64), "int64")
            check_values(
                (rows >= 0) & (rows < bounds),
                lambda: IndexOutOfRangeError(
                    f"{op}: an index is out of range for the first {k} dims "
                    f"{shape_text(lead)} of {shape_text(self.shape)}"
                ),
            )
        strides = np.ones(k, dtype=np.int64)
        for j in range(k - 2, -1, -1):
            strides[j] = strides[j + 1] * lead[j + 1]
        flat = (rows * self._host(strides, "int64")).sum_dim(1).reshape(-1)
        return flat, indices.shape[:-1], self.shape[k:]

    def index_put(self, indices: Sequence[Any], values: Any, accumulate: bool = False) -> Any:
        """A copy with ``values`` at the positions the index tensors ``indices`` name (one per
        leading dim, as ``t[indices] = values``); ``accumulate`` adds, duplicates summing."""
        indices = tuple(indices)
        # one value written through a mask: torch's masked_fill_ path (any shape, cast)
        single = (
            not accumulate
            and isinstance(values, TensorBase)
            and values.numel() == 1
            and any(isinstance(i, TensorBase) and i.dtype == "bool" for i in indices)
        )
        if isinstance(values, TensorBase) and values.dtype != self.dtype and not single:
            self._index_put_checks_before_dtype(indices, values, accumulate)
            raise DTypeError(
                f"index_put: the values' dtype {values.dtype} is not the tensor's {self.dtype} "
                "(torch requires them to match)"
            )
        if isinstance(values, TensorBase):
            # torch's index_put_ broadcasts the values to the indexing result without
            # dropping their leading ones (t[i] = v drops them; index_put_ does not)
            tensors = [i for i in indices if isinstance(i, TensorBase)]
            if len(tensors) == len(indices) and tensors:
                masks = [i for i in tensors if i.dtype == "bool"]
                consumed = sum(i.ndim for i in masks) + len(tensors) - len(masks)
                # a mask's true positions are one dimension, broadcast with the int indices
                lead = max([1 if i.dtype == "bool" else i.ndim for i in tensors])
                if values.ndim > lead + self.ndim - consumed and not single:
                    raise ShapeError(
                        f"index_put: shape mismatch: value tensor of shape "
                        f"{shape_text(values.shape)} cannot be broadcast to the indexing result "
                        f"({lead + self.ndim - consumed} dimensions) of a tensor of shape "
                        f"{shape_text(self.shape)}"
                    )
        if not accumulate:
            out = self.clone()
            out[indices] = values
            return out
        # a bool mask indexes its true positions (k dims: k index tensors), as in torch,
        # once its shape is checked against the dims it covers
        from .advanced import check_mask, warn_byte_mask

        parts: list[Any] = []
        for i in indices:
            if isinstance(i, TensorBase) and i.dtype == "uint8":  # (torch's legacy byte mask)
                warn_byte_mask()
                i = i.cast("bool")
            if isinstance(i, TensorBase) and i.dtype == "bool":
                if i.ndim:
                    check_mask(i.shape, self.shape, len(parts))
                parts.extend(i.nonzero(as_tuple=True))
            else:
                parts.append(i)
        indices = tuple(parts)
        try:  # (torch's IndexError, before the indices are combined)
            np.broadcast_shapes(*(tuple(np.shape(i)) for i in indices))
        except ValueError:
            shapes = ", ".join(shape_text(tuple(np.shape(i))) for i in indices)
            raise IndexOutOfRangeError(
                "index_put: shape mismatch: indexing tensors could not be broadcast together "
                f"with shapes {shapes}"
            ) from None
        if len(indices) > self.ndim:
            raise InvalidArgumentError(
                f"index_put: too many indices ({len(indices)}) for a tensor of "
                f"{self.ndim} dimensions"
            )
        if len(indices) < self.ndim:
            # torch: the leading dims indexed, whole slices of the rest added at each index
            lead, rest = self.shape[: len(indices)], self.shape[len(indices) :]
            flat = None
            for d, (size, stride_index) in enumerate(zip(lead, indices)):
                index = self._put_index(stride_index, d)
                flat = index if flat is None else flat * size + index
            # (index tensors that broadcast to several dims: the values broadcast to those)
            picked = flat.shape
            flat = flat.reshape((-1,))
            rows = self.reshape((math.prod(lead),) + rest)
            values = lift(self, values, "index_put") if not np.isscalar(values) else values
            if np.isscalar(values):
                values = wrap(self, self._backend.full(rest, values, self.dtype, self._device))
            values = _fitted(values, picked + rest).cast(self.dtype)
            values = values.reshape((flat.shape[0],) + rest)
            return rows.index_add(0, flat, values).reshape(self.shape)
        flat = None
        for d, (size, stride_index) in enumerate(zip(self.shape, indices)):
            index = self._put_index(stride_index, d)
            flat = index if flat is None else flat * size + index
        values = lift(self, values, "index_put") if not np.isscalar(values) else values
        if np.isscalar(values):
            values = wrap(self, self._backend.full(flat.shape, values, self.dtype, self._device))
        values = _fitted(values, flat.shape)
        return self.put(flat.reshape((-1,)), values.reshape((-1,)), accumulate=True)

    def _index_put_checks_before_dtype(self, indices: tuple, values: Any, accumulate: bool) -> None:
        """torch's ``index_put`` checks the indices (their dtypes, broadcast, a mask's shape)
        and the values' shape before the values' dtype (their range after it): their error
        first, found by the call on a copy, outside the graph, with the values cast."""
        with no_grad():
            try:
                cast = values.detach().cast(self.dtype)
            except Exception:  # (values that cannot be cast: the dtype error is the one)
                return
            try:
                self.detach().clone().index_put(indices, cast, accumulate)
            except IndexOutOfRangeError as error:
                if "is out of range for dimension" in str(error) or "out of bounds" in str(error):
                    return  # (torch checks the range after the dtype)
                raise

    def _put_index(self, index: Any, d: int) -> Any:
        """``index_put``'s index tensor for dim ``d``, checked to lie in ``[-size, size)``
        (torch's "index 3 is out of bounds for dimension 1 with size 2"), as non-negative
        positions."""
        from .advanced import _check

        size = self.shape[d]
        index = lift(self, index, "index_put")
        if index.dtype not in ("int64", "int32"):  # (as torch's, int8/int16 and floats too)
            raise IndexOutOfRangeError(
                "index_put: tensors used as indices must be long, int, byte or bool tensors, "
                f"got {index.dtype}"
            )
        index = index.cast("int64")
        _check(index, size, d, self.shape)
        return index.mask_where(index.lower_elem(0), index + size)

    def select_scatter(self, src: Any, dim: int, index: int) -> Any:
        """A copy with ``src`` written at ``index`` along ``dim``."""
        d = normalize_dim("select_scatter", dim, self.ndim)
        position = normalize_dim("select_scatter", index, self.shape[d])
        return self._rows_copy(d, [position], lift(self, src, "select_scatter").unsqueeze_dim(d))

    def slice_scatter(
        self, src: Any, dim: int = 0, start: int | None = None, end: int | None = None,
        step: int = 1,
    ) -> Any:  # fmt: skip
        """A copy with ``src`` written at ``start:end:step`` along ``dim``."""
        d = normalize_dim("slice_scatter", dim, self.ndim)
        positions = list(range(self.shape[d]))[slice(start, end, step)]
        return self._rows_copy(d, positions, lift(self, src, "slice_scatter"))

    def _rows_copy(self, d: int, positions: list[int], src: Any) -> Any:
        expected = tuple(len(positions) if i == d else n for i, n in enumerate(self.shape))
        if src.shape != expected:
            raise ShapeError(
                f"expected src of shape {shape_text(expected)}, got {shape_text(src.shape)}"
            )
        index = wrap(self, self._backend.from_data(np.asarray(positions, np.int64), "int64",
                                                   self._device))  # fmt: skip
        if src.dtype != self.dtype and not src.is_complex():  # torch copies src into self's dtype
            src = src.cast(self.dtype)
        return self.index_copy(d, index, src)

    def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Any:
        """Matrices with the last dim of ``self`` on their ``offset`` diagonal, placed in dims
        ``dim1``, ``dim2`` of the result."""
        offset = int_argument("diag_embed", offset, "offset")
        if self.ndim == 0:  # torch's: no last dim to put on the diagonal
            raise ShapeError("diag_embed: expects a tensor of at least 1 dimension, got a 0-d one")
        m = self.shape[-1]
        n = m + abs(offset)
        row = wrap(self, self._backend.arange(0, n, 1, "int64", self._device))
        on_diagonal = (row.unsqueeze_dim(0) - row.unsqueeze_dim(1)).equal_elem(offset)
        x = self.reshape((1,)) if self.ndim == 0 else self
        if n > m:
            pad = wrap(self, self._backend.zeros(x.shape[:-1] + (n - m,), x.dtype, self._device))
            from .shape import cat

            x = cat([x, pad], -1)
        values = x.unsqueeze_dim(-1) if offset >= 0 else x.unsqueeze_dim(-2)
        values = values.expand(x.shape[:-1] + (n, n))
        zeros = wrap(self, self._backend.zeros(values.shape, x.dtype, self._device))
        out = zeros.mask_where(on_diagonal, values)
        ndim = out.ndim
        d1, d2 = normalize_dim("diag_embed", dim1, ndim), normalize_dim("diag_embed", dim2, ndim)
        if d1 == d2:
            raise SizeMismatchError("diag_embed: dim1 and dim2 cannot be the same dimension")
        return out.movedim((ndim - 2, ndim - 1), (d1, d2))

    def diagflat(self, offset: int = 0) -> Any:
        """The flattened values as the ``offset`` diagonal of a matrix."""
        return self.reshape((-1,)).diag_embed(offset)

    # -- rearrangements -----------------------------------------------------------------------
    def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Any:
        """Rotated by 90 degrees ``k`` times in the plane of ``dims``, from the first towards
        the second."""
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            # k % 4 of a float is no number of quarter turns: 1.5 rotated nothing
            raise DTypeError(f"rot90: k must be an int, got {k!r}")
        if len(dims) != 2:
            raise SizeMismatchError(f"rot90: dims must name 2 dimensions, got {tuple(dims)}")
        a, b = (normalize_dim("rot90", d, self.ndim) for d in dims)
        if a == b:
            raise SizeMismatchError(f"rot90: dims must differ, got {tuple(dims)}")
        k %= 4
        if k == 1:
            return self.flip(b).transpose(a, b)
        if k == 2:
            return self.flip(a, b)
        if k == 3:
            return self.flip(a).transpose(a, b)
        return self.clone()

    def hsplit(self, sections: Any) -> tuple[Any, ...]:
        """``tensor_split`` along dim 1 (dim 0 of a 1-d tensor)."""
        return self._split_along("hsplit", sections, 0 if self.ndim == 1 else 1, 1)

    def vsplit(self, sections: Any) -> tuple[Any, ...]:
        return self._split_along("vsplit", sections, 0, 2)

    def dsplit(self, sections: Any) -> tuple[Any, ...]:
        return self._split_along("dsplit", sections, 2, 3)

    def _split_along(self, op: str, sections: Any, dim: int, least: int) -> tuple[Any, ...]:
        if self.ndim < least:
            raise ShapeError(
                f"{op}: needs at least {least} dimensions, got {shape_text(self.shape)}"
            )
        if isinstance(sections, TensorBase) and sections.ndim == 0:
            sections = operator.index(sections)  # torch reads a 0-d int tensor as the count
        if isinstance(sections, int) and sections and self.shape[dim] % sections:
            raise ShapeError(
                f"{op}: dimension {dim} of size {self.shape[dim]} is not divisible by {sections}"
            )
        return self.tensor_split(sections, dim)

    def split_with_sizes(self, split_sizes: Sequence[int], dim: int = 0) -> tuple[Any, ...]:
        """Pieces of the given sizes along ``dim`` (they must add up to its size)."""
        d = normalize_dim("split_with_sizes", dim, self.ndim)
        if sum(split_sizes) != self.shape[d]:
            raise ShapeError(
                f"split_with_sizes: sizes {list(split_sizes)} do not add up to dimension "
                f"{dim} of size {self.shape[d]}"
            )
        return tuple(self.split(list(split_sizes), d))

    def sum_to_size(self, *size: Any) -> Any:
        """Summed down to ``size`` (which must broadcast to this shape)."""
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], Sequence) else size
        try:
            ok = np.broadcast_shapes(tuple(shape), self.shape) == self.shape
        except ValueError:
            ok = False
        if not ok:
            raise ShapeError(
                f"sum_to_size: size {shape_text(shape)} is not expandable to "
                f"{shape_text(self.shape)}"
            )
        lead = self.ndim - len(shape)
        dims = tuple(range(lead)) + tuple(
            lead + i for i, n in enumerate(shape) if n == 1 and self.shape[lead + i] != 1
        )
        out = self.sum(dims, True) if dims else self
        return out.reshape(tuple(shape))

    def narrow_copy(self, dim: int, start: int, length: int) -> Any:
        """:meth:`narrow` (a copy: tensors are values here)."""
        return self.narrow(dim, start, length).clone()

    # -- counts (host reads) and draws --------------------------------------------------------
    def unique(
        self, sorted: bool = True, return_inverse: bool = False,  # noqa: A002 (torch's name)
        return_counts: bool = False, dim: int | None = None,
    ) -> Any:  # fmt: skip
        """``rg.unique`` of this tensor."""
        return _unique(self, sorted, return_inverse, return_counts, dim)

    def unique_consecutive(
        self, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
    ) -> Any:
        """The values with each run of equal neighbours kept once (flattened; with ``dim``,
        the slices along ``dim`` with each run of equal neighbouring slices kept once); a host
        read, not differentiable, as torch's (its values require grad when the input does, and
        a backward through them raises)."""
        if dim is None:
            array = self.numpy().reshape(-1)
            starts = np.concatenate(([True], array[1:] != array[:-1]))[: array.size]
            kept = array[starts]
        else:
            d = normalize_dim("unique_consecutive", dim, self.ndim)
            moved = np.moveaxis(self.numpy().reshape(self.shape), d, 0)
            if check_unique_dim("unique_consecutive", self.shape, d):
                starts = np.zeros(0, bool)
            else:
                rows = moved.reshape(moved.shape[0], -1)
                differs = (rows[1:] != rows[:-1]).any(axis=1)
                starts = np.concatenate(([True], differs))[: rows.shape[0]]
            kept = np.moveaxis(moved[starts], 0, d)
        kept = self._host(np.ascontiguousarray(kept), self.dtype)
        out = [refused_derivative("unique_consecutive", self, kept)]
        if return_inverse:
            inverse = np.cumsum(starts) - 1
            shape = self.shape if dim is None else (self.shape[d],)
            out.append(self._host(inverse.reshape(shape), "int64"))
        if return_counts:
            counts = np.diff(np.append(np.flatnonzero(starts), starts.size))
            out.append(self._host(counts, "int64"))
        return tuple(out) if len(out) > 1 else out[0]

    def bincount(self, weights: Any = None, minlength: int = 0) -> Any:
        """How often each non-negative int occurs (summing ``weights`` instead, when given);
        not differentiable, as in torch: weights that require grad give a result in the graph
        (requiring grad, as torch's) whose backward raises torch's "the derivative for
        bincount is not implemented"."""
        if self.ndim != 1 or self.dtype not in INT_DTYPES:
            raise UnsupportedDTypeError(
                f"bincount: expected a 1-d integer tensor, got {self.dtype} of shape "
                f"{shape_text(self.shape)}"
            )
        if not isinstance(minlength, numbers.Integral) or minlength < 0:
            raise InvalidValueError(f"bincount: minlength must be >= 0, got {minlength!r}")
        array = self.numpy().astype(np.int64)
        if array.size and array.min() < 0:
            raise InvalidValueError("bincount: the input must hold non-negative ints")
        if weights is None:
            return self._host(np.bincount(array, minlength=minlength), "int64")
        w = lift(self, weights, "bincount")
        if w.shape != self.shape and array.size:  # (torch's RuntimeError; none for no input)
            raise SizeMismatchError(
                f"bincount: weights {shape_text(w.shape)} must be 1-d and as long as the input "
                f"{shape_text(self.shape)}"
            )
        # torch 2.13: the float weights' own dtype (float32 too), float64 for int or bool ones;
        # int64 zeros for an empty input, whatever the weights (torch's early return)
        dtype = w.dtype if w.dtype in FLOAT_DTYPES else "float64"
        if not array.size:
            dtype = "int64"
        counts = self._host(
            np.bincount(array, weights=w.numpy().astype(np.float64), minlength=minlength), dtype
        )
        # (torch's early return for an empty input gives int64 zeros outside the graph)
        return refused_derivative("bincount", w, counts) if array.size else counts

    def histc(self, bins: int = 100, min: float = 0, max: float = 0) -> Any:  # noqa: A002
        """A histogram of ``bins`` equal bins over ``[min, max]`` (the data's range when both
        are 0); values outside are not counted (float tensors; not differentiable)."""
        if self.dtype not in FLOAT_DTYPES:
            raise UnsupportedDTypeError(
                f"histc: expected a floating point tensor, got {self.dtype}"
            )
        # in the tensor's precision, as torch bins: a value on a bin's edge falls as there
        if isinstance(bins, bool) or not isinstance(bins, numbers.Integral) or bins < 1:
            raise InvalidValueError(f"histc: bins must be a positive int, got {bins!r}")
        kind = np.float64 if self.dtype == "float64" else np.float32
        array = self.numpy().reshape(-1).astype(kind)
        low, high = kind(min), kind(max)
        if low == high and array.size:
            low, high = array.min(), array.max()
        if not (np.isfinite(low) and np.isfinite(high)):  # (a NaN or inf in the data, or given)
            raise InvalidValueError(f"histc: range of [{low}, {high}] is not finite")
        if low == high:
            low, high = low - kind(1.0), high + kind(1.0)
        if low > high:
            raise InvalidValueError(f"histc: max ({high}) must not be below min ({low})")
        inside = array[(array >= low) & (array <= high)]
        position = ((inside - low) * kind(bins) / (high - low)).astype(np.int64)
        counts = np.bincount(np.minimum(position, bins - 1), minlength=bins)
        return self._host(counts.astype(np.float64), self.dtype)

    def histogram(
        self,
        bins: Any = 100,
        *,
        range: Sequence[float] | None = None,  # noqa: A002 (torch's name)
        weight: Any = None,
        density: bool = False,
        out: Any = None,
    ) -> Any:
        """torch's ``histogram``: ``(hist, bin_edges)`` of the flattened tensor over ``bins``
        equal bins of ``range`` (the data's, widened by 1/2 each side when it is one value)
        or over the increasing edges of a 1-d tensor ``bins``; the last bin holds its right
        edge, values outside are not counted. ``weight`` (the input's shape) sums weights
        instead of counting; ``density`` divides by the total and the bin widths. Not
        differentiable, as torch's: where an input requires grad the outputs do too, and
        backward through them raises. Edges that decrease are refused (torch's counts for
        them follow no rule)."""
        fn = "histogram"
        if out is not None:
            raise InvalidArgumentError(f"{fn}: out= is not supported; use the returned tuple")
        if self.dtype not in ("float32", "float64"):
            raise UnsupportedDTypeError(
                f"{fn}: expected a float32 or float64 input, got {self.dtype}"
            )
        kind = np.float64 if self.dtype == "float64" else np.float32
        values = self.detach().numpy().reshape(-1).astype(kind)
        if isinstance(bins, TensorBase):
            if range is not None:  # (torch's argument parser: no such overload, a TypeError)
                raise DTypeError(f"{fn}: range= goes with an int bins, not with bin edges")
            if bins.ndim != 1:
                raise SizeMismatchError(
                    f"{fn}: bins must be a 1-d tensor of edges, got {bins.ndim}-d"
                )
            if bins.dtype != self.dtype:
                raise MixedDTypeError(
                    f"{fn}: bins of dtype {bins.dtype} for an input of dtype {self.dtype} "
                    "(they must match, as torch's)"
                )
            if bins.shape[0] < 1:
                raise SizeMismatchError(f"{fn}: bins must hold at least one edge")
            edges = bins.detach().numpy().astype(kind)
            if np.any(edges[1:] < edges[:-1]):
                # torch counts these by a binary search that assumes order (values land in
                # bins they are not in); numpy's rule instead: a clear refusal
                raise InvalidArgumentError(
                    f"{fn}: bin edges must be non-decreasing, got {edges.tolist()}"
                )
        else:
            count = int_argument(fn, bins, "bins")
            if not isinstance(count, numbers.Integral) or isinstance(count, bool):
                raise DTypeError(f"{fn}: bins must be an int or a 1-d tensor, got {bins!r}")
            if count <= 0:
                raise InvalidValueError(f"{fn}: bins must be > 0, got {count}")
            edges = self._histogram_edges(fn, values, count, range)
        if weight is not None:
            weight = lift(self, weight, fn)
            if weight.shape != self.shape:
                raise SizeMismatchError(
                    f"{fn}: weight of shape {shape_text(weight.shape)} must have the input's "
                    f"shape {shape_text(self.shape)}"
                )
            if weight.dtype != self.dtype:
                raise MixedDTypeError(
                    f"{fn}: weight of dtype {weight.dtype} for an input of dtype {self.dtype}"
                )
        count = len(edges) - 1
        hist = np.zeros(max(count, 0), kind)
        if count > 0:
            inside = (values >= edges[0]) & (values <= edges[-1])  # (NaN: neither)
            position = np.searchsorted(edges, values[inside], side="right") - 1
            position = np.minimum(position, count - 1)  # the right edge: the last bin
            if weight is None:
                np.add.at(hist, position, kind(1.0))
            else:
                np.add.at(hist, position, weight.detach().numpy().reshape(-1)[inside])
            if density:
                with np.errstate(divide="ignore", invalid="ignore"):
                    hist = hist / hist.sum(dtype=kind) / np.diff(edges)
        hist, edges = self._host(hist, self.dtype), self._host(edges, self.dtype)
        # torch's outputs require grad where an input does, and backward through them raises
        for source in (self, bins, weight):
            if isinstance(source, TensorBase) and source.requires_grad:
                hist, edges = (
                    source._apply("refused_derivative", (source, result), ("histogram",))
                    for result in (hist, edges)
                )
                break
        return HistogramResult(hist, edges)

    def _histogram_edges(
        self, fn: str, values: np.ndarray, count: int, bounds: Sequence[float] | None
    ) -> np.ndarray:
        """torch's edges of ``count`` equal bins: ``linspace`` over ``bounds`` (or the data's
        range, ``[0, 1]`` for no data), a range of one value widened by 1/2 each side."""
        if bounds is not None:
            low, high = (float(bound) for bound in bounds)
        elif values.size:
            low, high = float(values.min()), float(values.max())
        else:
            low, high = 0.0, 1.0
        if low > high:
            raise InvalidValueError(
                f"{fn}: the range's min should not exceed its max, got min {low} max {high}"
            )
        if not (math.isfinite(low) and math.isfinite(high)):
            raise InvalidValueError(f"{fn}: the range [{low}, {high}] is not finite")
        if low == high:
            low, high = low - 0.5, high + 0.5
        return torch_linspace(low, high, count + 1, values.dtype.type)

    def _filled(self, shape: tuple[int, ...], value: Any) -> Any:
        return wrap(self, self._backend.full(shape, value, self.dtype, self._device))

    def _host(self, array: np.ndarray, dtype: str) -> Any:
        # (ascontiguousarray makes a 0-d array 1-d: its shape is put back)
        array = np.ascontiguousarray(array).reshape(np.shape(array))
        return wrap(self, self._backend.from_data(array, dtype, self._device))

    def multinomial(self, num_samples: int, replacement: bool = False, *,
                    generator: Any = None) -> Any:  # fmt: skip
        """``rg.multinomial`` of these weights."""
        return multinomial(self, num_samples, replacement, generator=generator)

    def bernoulli(self, p: Any = None, *, generator: Any = None) -> Any:
        """Zeros and ones drawn with the probabilities this tensor holds (or ``p``)."""
        if p is None and self.dtype not in FLOAT_DTYPES and not self.is_complex():
            # torch's NotImplementedError ("bernoulli_tensor_cpu_p_" not implemented for
            # 'Long'): int and bool probabilities were drawn from
            raise UnsupportedDTypeError(
                f"bernoulli: expected float probabilities, got {self.dtype} "
                f"{shape_text(self.shape)}"
            )
        draws = self._filled(self.shape, 0)
        probabilities = self if p is None else p
        drawn = draws.bernoulli_(probabilities, generator=generator)
        if not isinstance(probabilities, TensorBase):
            if not self.requires_grad:
                return drawn
            # torch records the draw on this tensor, and its backward refuses
            return self._apply("refused_derivative", (self, drawn), ("bernoulli",))
        # as torch's, a draw in the probabilities' graph with a zero gradient for them
        from .compositions import _zero_gradient  # (compositions imports this module)

        return _zero_gradient(drawn, probabilities, probabilities)

    # -- metadata -----------------------------------------------------------------------------
    def is_signed(self) -> bool:
        return self.dtype not in ("bool", "uint8")

    def is_complex(self) -> bool:
        return self.dtype in COMPLEX_DTYPES

    def is_same_size(self, other: Any) -> bool:
        return self.shape == tuple(other.shape)

    def is_nonzero(self) -> bool:
        """The truth of a one-element tensor (an error for any other)."""
        if self.numel() != 1:
            raise ShapeError(
                f"is_nonzero: expected a one-element tensor, got {shape_text(self.shape)}"
            )
        return bool(self.item())

    @property
    def is_cpu(self) -> bool:
        return self._device.kind == "cpu"

    @property
    def is_nested(self) -> bool:
        return False

    # torch's flags of devices, layouts and conjugate views that this library has none of:
    # generic code branches on them (``if x.is_mps: ...``, ``x.is_quantized``)
    @property
    def is_meta(self) -> bool:
        return self._device.kind == "meta"

    @property
    def is_mps(self) -> bool:
        return self._device.kind == "mps"

    @property
    def is_xpu(self) -> bool:
        return self._device.kind == "xpu"

    is_ipu = is_maia = is_mtia = is_vulkan = is_mkldnn = is_quantized = is_sparse_csr = property(
        lambda self: False
    )

    def is_conj(self) -> bool:
        """False: no tensor here has a conjugate bit (torch's lazy conjugation): ``conj()``
        of a complex tensor computes the conjugate at once, as torch's ``resolve_conj``."""
        return False

    def is_neg(self) -> bool:
        """False: a real tensor has no negative bit."""
        return False

    def conj(self) -> Any:
        """The complex conjugate; a real tensor is its own (torch returns it)."""
        if self.dtype not in COMPLEX_DTYPES:
            return self
        return self._apply("conj", (self,))

    conj_physical = conj

    def resolve_conj(self) -> Any:
        """The tensor itself: no tensor here has a pending (lazy) conjugation to resolve."""
        return self

    resolve_neg = resolve_conj

    @property
    def real(self) -> Any:
        """The real part (of a real tensor: the tensor itself, as torch returns it); a view,
        as torch's: a write into it changes ``self``, and one into ``self`` shows in it."""
        if self.dtype not in COMPLEX_DTYPES:
            return self
        return link(complex_view_of(self, "real"), self, "real")

    @property
    def imag(self) -> Any:
        """The imaginary part of a complex tensor, a view as :attr:`real`."""
        if self.dtype not in COMPLEX_DTYPES:
            raise KernelDTypeError(  # (torch's RuntimeError)
                "imag is not implemented for tensors with non-complex dtypes."
            )
        return link(complex_view_of(self, "imag"), self, "imag")

    @real.setter
    def real(self, value: Any) -> None:
        """``z.real = v``: ``v`` (a tensor, broadcast, or a number) written into the real part,
        torch's setter (so ``z.real += v``, which assigns back, works as in torch)."""
        _write_part(self.real, value)

    @imag.setter
    def imag(self, value: Any) -> None:
        """``z.imag = v``, as :attr:`real`'s setter (a real tensor has no imaginary part to
        write: torch's refusal)."""
        _write_part(self.imag, value)

    def angle(self) -> Any:
        """The argument of each element, ``atan2(imag, real)``; of a real tensor, 0 or pi
        (NaN kept), as torch's."""
        if self.dtype in COMPLEX_DTYPES:
            return self.imag.atan2(self.real)
        x = self if self.dtype in FLOAT_DTYPES else self.to(default_float_dtype())
        return (x < 0).to(x.dtype) * math.pi + x * 0

    @property
    def itemsize(self) -> int:
        return DTYPE_OBJECTS[self.dtype].itemsize

    @property
    def nbytes(self) -> int:
        return DTYPE_OBJECTS[self.dtype].itemsize * math.prod(self.shape)

    def short(self, memory_format: Any = preserve_format) -> Any:
        """Cast to int16 (wrapping values past its range, floats truncated toward zero, as
        torch's)."""
        return self._cast_in_format("short", "int16", memory_format)

    def char(self, memory_format: Any = preserve_format) -> Any:
        """Cast to int8 (wrapping values past its range, floats truncated toward zero, as
        torch's)."""
        return self._cast_in_format("char", "int8", memory_format)

    def new(self, *args: Any, device: Any = None) -> Any:
        """torch's legacy constructor in this tensor's dtype and device: sizes (ints, or one
        ``Size`` such as ``x.shape``) make a tensor of that shape (zeros: torch leaves it
        uninitialized), one sequence the data, no argument an empty tensor."""
        return type(self)._legacy_new(
            "new", self.dtype, args, self.device if device is None else device
        )

    def register_hook(self, hook: Any) -> Any:
        """torch's tensor hook: ``hook(grad)`` is called with this tensor's gradient once a
        backward has summed it, and what it returns (a tensor of the same shape and dtype;
        ``None`` keeps the gradient, changed in place or not) flows on in its place to the
        tensors this one was computed from, or, for a leaf, is the gradient ``backward()``
        returns. Under ``create_graph`` the hook runs recorded. Returns a handle whose
        ``remove()`` takes the hook away.

        >>> import retrograd as rg
        >>> x = rg.tensor([1.0, -2.0]).require_grad()
        >>> y = x * 3
        >>> handle = y.register_hook(lambda g: g.clamp(max=0.5))
        >>> x.grad((y * y).sum().backward()).tolist()
        [1.5, -36.0]
        """
        check_callable("register_hook", hook)
        backend = self._autodiff("register_hook")
        if not self.requires_grad:
            raise AutodiffError(
                "register_hook: cannot register a hook on a tensor that doesn't require gradient"
            )
        make, shape, dtype, device = type(self)._result, self.shape, self.dtype, self._device

        def on_gradient(grad_backend: Any, grad: Any) -> Any:
            tracked = getattr(grad_backend, "is_autodiff", False)
            if tracked:  # create_graph: the hook's ops are recorded
                incoming = make(grad, grad_backend, device)
            else:
                incoming = make(backend.wrap(grad), backend, device)
            with enable_grad() if tracked else no_grad():
                result = hook(incoming)
            # (read by the engine: a hook that returned None handed on the tensor it was
            # given, written in place or not, which torch's autograd.grad has captured)
            kept[0] = result is None
            out = incoming if result is None else result
            if not isinstance(out, TensorBase):  # (a TypeError, as torch's)
                raise DTypeError(
                    f"register_hook: the hook returned a {type(out).__name__}; expected a "
                    "tensor (the new gradient) or None"
                )
            if out.shape != shape:
                raise ShapeError(
                    f"register_hook: the hook returned a gradient of shape {list(out.shape)}, "
                    f"expected shape {list(shape)}"
                )
            if out.dtype != dtype:
                raise DTypeError(
                    f"register_hook: the hook changed the gradient's dtype from {dtype} to "
                    f"{out.dtype}"
                )
            prim, source = out._prim, out._backend
            if tracked:
                if source is grad_backend:
                    return prim
                return grad_backend.wrap(source.inner_value(prim))
            return source.inner_value(prim) if source.is_autodiff else prim

        kept = [False]  # (not an attribute set inside on_gradient: a cycle through itself)
        on_gradient.kept_its_argument = kept
        return backend.register_hook(self._prim, on_gradient, self._former_keys)

    def register_post_accumulate_grad_hook(self, hook: Any) -> Any:
        """Refused: torch calls the hook with the parameter once its ``.grad`` holds the
        gradient (an optimizer stepped inside backward); here gradients are values that
        ``backward()`` returns, so there is no ``.grad`` for the hook to read."""
        raise AutodiffError(
            "register_post_accumulate_grad_hook: gradients are values in retrograd: backward() "
            "returns an rg.Gradients, so no .grad is filled for the hook to read; step after "
            "backward (optimizer.step(grads)), or change the gradient with register_hook"
        )

    @property
    def retains_grad(self) -> bool:
        """Whether ``retain_grad()`` was called on this (tracked, non-leaf) tensor: through
        writes under ``no_grad``, ``inference_mode`` or through ``.data`` (the node holding
        its gradient is the one before them) and through ``detach_()``, as torch's flag."""
        if self.__dict__.get("_retains_grad_after_detach"):
            return True
        backend = self._backend
        if not backend.is_autodiff or not backend.is_tracked(self._prim):
            return False
        node = backend.gradient_node(self._prim)
        return node is not None and node.op is not None and bool(node.retain)

    @property
    def grad_fn(self) -> Any:
        """The backward node of the op that made this tensor (a :class:`BackwardNode`: its
        name as a string, with torch's ``name()`` and ``next_functions``), or ``None`` for a
        leaf or an untracked tensor: ``t.grad_fn is None`` means the same here as in torch."""
        backend = self._backend
        if not backend.is_autodiff or not backend.is_tracked(self._prim):
            return None
        refuse_rebased_no_grad_view("grad_fn", self)
        node = getattr(self._prim, "node", None)
        if getattr(node, "op", None) is None:
            return None
        return BackwardNode.of(node, backend, self.device, type(self), self.ndim)


#: torch's names of what a backward node saves (``grad_fn._saved_self``), by op: where each
#: is in the node (an input, the output, a parameter, a parameter torch holds as a 0-d
#: tensor, an input torch saves transposed, a constant, or nothing); ops not named here have
#: none. ``linear`` is torch's ``addmm`` (with a bias) or ``mm`` (without): :func:`_saved_names`
_SAVED_NAMES: dict[str, dict[str, tuple[str, Any]]] = {
    "pow_scalar": {"self": ("input", 0), "exponent": ("param", 0)},
    # 2.0 ** x: torch's PowBackward2, whose self is the number
    "rpow_scalar": {"self": ("param", 0), "exponent": ("input", 0), "result": ("out", 0)},
    "pow": {"self": ("input", 0), "exponent": ("input", 1), "result": ("out", 0)},
    "mul": {"self": ("input", 0), "other": ("input", 1)},
    # x * 2: torch saves the number as a 0-d tensor, and no self (a constant's gradient)
    "mul_scalar": {"self": ("unsaved", 0), "other": ("scalar", 0)},
    "div": {"self": ("input", 0), "other": ("input", 1)},
    "div_scalar": {"self": ("unsaved", 0), "other": ("scalar", 0)},
    "matmul": {"self": ("input", 0), "mat2": ("input", 1)},
    "exp": {"result": ("out", 0)},
    "log": {"self": ("input", 0)},
    "sqrt": {"result": ("out", 0)},
    "sin": {"self": ("input", 0)},
    "cos": {"self": ("input", 0)},
    "tanh": {"result": ("out", 0)},
    "sigmoid": {"result": ("out", 0)},
    "relu": {"result": ("out", 0)},
    "softmax": {"dim": ("param", 0), "result": ("out", 0)},
    "log_softmax": {"dim": ("param", 0), "result": ("out", 0)},
    # torch's ConvolutionBackward0, for convolutions and transposed ones alike
    "conv": {
        "input": ("input", 0), "weight": ("input", 1), "stride": ("param", 0),
        "padding": ("param", 1), "dilation": ("param", 2), "groups": ("param", 3),
        "transposed": ("const", False), "output_padding": ("zeros", 0),
    },
    "conv_transpose": {
        "input": ("input", 0), "weight": ("input", 1), "stride": ("param", 0),
        "padding": ("param", 1), "output_padding": ("param", 2), "dilation": ("param", 3),
        "groups": ("param", 4), "transposed": ("const", True),
    },
}  # fmt: skip

#: ``F.linear`` as torch records it: ``addmm(bias, input, weight.t())`` with a bias,
#: ``mm(input, weight.t())`` without
_LINEAR_WITH_BIAS = {
    "mat1": ("input", 0), "mat2": ("transposed", 1), "alpha": ("const", 1), "beta": ("const", 1),
}  # fmt: skip
_LINEAR_WITHOUT_BIAS = {"self": ("input", 0), "mat2": ("transposed", 1)}


def _saved_names(node: Any) -> dict[str, tuple[str, Any]]:
    """torch's saved names of ``node``'s op, and where each is in the node."""
    name = getattr(node.op, "name", None)
    if name == "linear":
        return _LINEAR_WITH_BIAS if node.parents[2] is not None else _LINEAR_WITHOUT_BIAS
    return _SAVED_NAMES.get(name, {})


_FREED = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)


#: ``autograd.graph.saved_tensors_hooks``, installed by that module (which is above this
#: layer): the pair a :class:`SavedTensor`'s ``register_hooks`` packs and unpacks with
SAVED_TENSORS_HOOKS: list[Any] = [None]


class SavedTensor:
    """torch's ``SavedTensor`` (``grad_fn._raw_saved_self``): one value a backward node
    keeps; ``register_hooks(pack, unpack)`` holds it packed until backward unpacks it."""

    def __init__(self, grad_fn: BackwardNode, position: int) -> None:
        self._grad_fn, self._position = grad_fn, position

    def register_hooks(self, pack_hook: Callable[[Any], Any], unpack_hook: Callable) -> None:
        from ..autodiff.saved_hooks import pack_one

        node = self._grad_fn._node
        if node.consumed:
            raise AutodiffError(_FREED)
        # (checks both are callable)
        pair = SAVED_TENSORS_HOOKS[0](pack_hook, unpack_hook)
        pack_one(self._grad_fn._backend, node.saved, self._position, (pair._pack, pair._unpack))


#: the dtype torch gives a Python number it saves as a 0-d tensor
_SCALAR_DTYPES = {"float": "float64", "int": "int64", "bool": "bool", "complex": "complex128"}

#: the kinds of saved value that are no tensor the node keeps: no ``_raw_saved_`` for them
_UNRAW = ("param", "scalar", "const", "zeros")


def _pool_name(kind: str) -> Callable[[Any], str]:
    def name(node: Any) -> str:
        dims = len(node.params[0])
        if kind == "MaxPool":
            return f"MaxPool{dims}DWithIndicesBackward0" if dims > 1 else "MaxPool1DBackward0"
        return f"AvgPool{dims}DBackward0" if dims > 1 else "AvgPool1DBackward0"

    return name


def _function_name(node: Any) -> str:
    function = getattr(node.params[0], "cls", None) if node.params else None
    return f"{function.__name__}Backward" if function is not None else "FunctionBackward"


#: torch's class names of the backward nodes of the ops whose names differ from the op's in
#: CamelCase followed by ``Backward0`` (``exp``: ``ExpBackward0``), by retrograd's op name: a
#: name, or a function of the node. An op torch computes as several records under one name
#: (``x.sum(1)``'s, which retrograd records as a sum and a reshape) shows its last record's
_TORCH_NODE_NAMES: dict[str, str | Callable[[Any], str]] = {
    "add_scalar": "AddBackward0",
    "sub_scalar": "SubBackward0",
    "mul_scalar": "MulBackward0",
    "div_scalar": "DivBackward0",
    "rsub_scalar": "RsubBackward1",
    "add_scaled": lambda node: "SubBackward0" if node.params[0] < 0 else "AddBackward0",
    "pow_scalar": "PowBackward0",
    "square": "PowBackward0",
    "pow": "PowBackward1",
    "rpow_scalar": "PowBackward2",
    "recip": "ReciprocalBackward0",
    "log1p": "Log1PBackward0",
    "max": "MaxBackward1",
    "min": "MinBackward1",
    "mean_dim": "MeanBackward1",
    "sum_dim": "SumBackward1",
    "matmul": "MmBackward0",
    "linear": lambda node: "MmBackward0" if node.parents[2] is None else "AddmmBackward0",
    "reshape": "ViewBackward0",
    "swap_dims": "TransposeBackward0",
    "select": "IndexSelectBackward0",
    "mask_where": "WhereBackward0",
    "mask_fill": "MaskedFillBackward0",
    "clamp": "ClampBackward1",
    "cast": "ToCopyBackward0",
    "repeat_dim": "RepeatBackward0",
    "lerp_scalar": "LerpBackward0",
    "conv": "ConvolutionBackward0",
    "conv_transpose": "ConvolutionBackward0",
    "layer_norm": "NativeLayerNormBackward0",
    "max_pool": _pool_name("MaxPool"),
    "avg_pool": _pool_name("AvgPool"),
    "autograd_function": _function_name,
}


def _name_kept(namer: Callable[[Any], str]) -> Callable[[Any], None]:
    """An ``Op.on_release``: fix the node's torch name, read by ``namer`` from the node's
    params or parents, before a consuming backward lets go of them. Read after, it raised
    ``IndexError`` (``print(model(x))`` after ``loss.backward()``: a ``Linear``'s output;
    round 94)."""

    def keep(node: Any) -> None:
        if node.torch_name is None:
            node.torch_name = namer(node)

    return keep


for _op_name, _namer in _TORCH_NODE_NAMES.items():
    if not isinstance(_namer, str) and _op_name in OPS:
        OPS[_op_name].on_release = _name_kept(_namer)


def torch_node_name(node: Any, ndim: int | None = None) -> str:
    """torch's class name of the backward node that records what ``node`` records
    (``AccumulateGrad`` for a leaf); ``ndim``: the output's rank, where known (a product of
    batches of matrices is torch's ``bmm``)."""
    if node.torch_name is not None:
        return node.torch_name
    op = node.op
    if op is None:
        return "AccumulateGrad"
    if op.name == "matmul" and ndim == 3:
        return "BmmBackward0"
    named = _TORCH_NODE_NAMES.get(op.name)
    if named is None:
        named = _TORCH_NODE_NAMES[op.name] = (
            "".join(part.capitalize() for part in op.name.split("_")) + "Backward0"
        )
    return named if type(named) is str else named(node)


def _differentiable_arguments(args: tuple, kwargs: dict) -> tuple:
    """The nodes (``None``: untracked) of the floating tensor arguments of a public op, in
    order, those in a list (``cat``'s) too: the inputs of torch's node for the op, whose
    ``next_functions`` leave out what has no gradient (indices, masks, targets)."""
    edges = []
    for argument in (*args, *kwargs.values()):
        for t in argument if type(argument) in (list, tuple) else (argument,):
            if isinstance(t, TensorBase) and t.dtype in GRAD_DTYPES:
                edges.append(getattr(t._prim, "node", None) if t._backend.is_autodiff else None)
    return tuple(edges)


def _given_dim(position: int) -> Callable[[tuple, dict], bool]:
    """Whether the call names a dim (``x.max(1)``; ``rg.max(a, b)`` is torch's maximum)."""

    def given(args: tuple, kwargs: dict) -> bool:
        if len(args) > position:
            return type(args[position]) in (int, tuple, list)
        return kwargs.get("dim") is not None

    return given


def _naming(name: str, when: Callable[[tuple, dict], bool] | None = None) -> Callable:
    """What names the node of an op's result(s) ``name``, where ``when(args, kwargs)``: a
    node the op made, not an argument's own (``x.contiguous()`` of a contiguous ``x``)."""

    def namer(args: tuple, kwargs: dict, result: Any) -> None:
        if when is not None and not when(args, kwargs):
            return
        given = {id(getattr(a._prim, "node", None)) for a in args if isinstance(a, TensorBase)}
        if type(result) is tuple or type(result) is list:
            results = result
        else:  # a tensor, or (values, indices)
            results = (getattr(result, "values", None) if hasattr(result, "indices") else result,)
        edges = None
        for position, value in enumerate(results):
            if not isinstance(value, TensorBase) or not value._backend.is_autodiff:
                continue
            node = getattr(value._prim, "node", None)
            if node is not None and node.op is not None and id(node) not in given:
                node.torch_name = name
                if edges is None:
                    edges = _differentiable_arguments(args, kwargs)
                node.torch_inputs = edges
                if position:
                    node.torch_output = position

    return namer


#: the composites whose result's node torch names otherwise than its last record's: the
#: name, and when (``None``: always)
_NAMED_BY_OP: dict[str, tuple[str, Callable[[tuple, dict], bool] | None]] = {
    "sum": ("SumBackward1", _given_dim(1)),
    "mean": ("MeanBackward1", _given_dim(1)),
    "max": ("MaxBackward0", _given_dim(1)),
    "min": ("MinBackward0", _given_dim(1)),
    "squeeze": ("SqueezeBackward1", _given_dim(1)),
    "var": ("VarBackward0", None),
    "std": ("StdBackward0", None),
    "norm": ("LinalgVectorNormBackward0", None),
    "amax": ("AmaxBackward0", None),
    "amin": ("AminBackward0", None),
    "logsumexp": ("LogsumexpBackward0", None),
    "mv": ("MvBackward0", None),
    "dot": ("DotBackward0", None),
    "mm": ("MmBackward0", None),
    "bmm": ("BmmBackward0", None),
    "addmm": ("AddmmBackward0", None),
    "baddbmm": ("BaddbmmBackward0", None),
    "unsqueeze": ("UnsqueezeBackward0", None),
    "stack": ("StackBackward0", None),
    "clone": ("CloneBackward0", None),
    "contiguous": ("CloneBackward0", None),
    "maximum": ("MaximumBackward0", None),
    "minimum": ("MinimumBackward0", None),
    "chunk": ("SplitBackward0", None),
    "unbind": ("UnbindBackward0", None),
    "tril": ("TrilBackward0", None),
    "triu": ("TriuBackward0", None),
    "trace": ("TraceBackward0", None),
    "sign": ("SignBackward0", None),
    "roll": ("RollBackward0", None),
    "t": ("TBackward0", None),
    "select": ("SelectBackward0", None),
    "elu": ("EluBackward0", None),
    "softplus": ("SoftplusBackward0", None),
    "softplus_threshold": ("SoftplusBackward0", None),
    "hardtanh": ("HardtanhBackward0", None),
    "mse_loss": ("MseLossBackward0", None),
    "nll_loss": ("NllLossBackward0", None),
    "cross_entropy": ("NllLossBackward0", None),
    "binary_cross_entropy": ("BinaryCrossEntropyBackward0", None),
    "binary_cross_entropy_with_logits": ("BinaryCrossEntropyWithLogitsBackward0", None),
    "embedding": ("EmbeddingBackward0", None),
}
NODE_NAMERS.update({op: _naming(name, when) for op, (name, when) in _NAMED_BY_OP.items()})


def _name_split(args: tuple, kwargs: dict, result: Any) -> None:
    sizes = args[1] if len(args) > 1 else kwargs.get("split_size_or_sections")
    listed = isinstance(sizes, list | tuple)
    _naming("SplitWithSizesBackward0" if listed else "SplitBackward0")(args, kwargs, result)


def _name_cross_entropy(args: tuple, kwargs: dict, result: Any) -> None:
    """torch's ``cross_entropy`` of class indices: ``nll_loss(log_softmax(input))``, two
    nodes where retrograd's fused loss has one."""
    _naming("NllLossBackward0")(args, kwargs, result)
    node = getattr(getattr(result, "_prim", None), "node", None)
    logits = args[0] if args else kwargs.get("input")
    target = args[1] if len(args) > 1 else kwargs.get("target")
    if (
        node is not None
        and node.torch_name == "NllLossBackward0"
        and isinstance(target, TensorBase)
        and target.dtype not in GRAD_DTYPES
        and isinstance(logits, TensorBase)
    ):
        source = getattr(logits._prim, "node", None)
        node.torch_inputs = (
            None if source is None else TorchOnlyNode("LogSoftmaxBackward0", (source,)),
        )


NODE_NAMERS["split"] = _name_split
NODE_NAMERS["cross_entropy"] = _name_cross_entropy

#: ``F.pad``'s node in torch, by mode (its kernel's, of the padded dims' count)
_PADS = {
    "constant": "ConstantPadNd",
    "reflect": "ReflectionPad{}D",
    "replicate": "ReplicationPad{}D",
}


def _name_pad(args: tuple, kwargs: dict, result: Any) -> None:
    mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
    pad = args[1] if len(args) > 1 else kwargs.get("pad")
    kind = _PADS.get(mode)
    if kind is not None and isinstance(pad, tuple | list):
        _naming(kind.format(len(pad) // 2) + "Backward0")(args, kwargs, result)


NODE_NAMERS["pad"] = _name_pad

_NODE_CLASSES: dict[str, type] = {}


class BackwardNode(str):
    """A tensor's ``grad_fn``: the name of torch's node for the op that made it
    (``"MulBackward0"``, a string as before, so ``"Mul" in t.grad_fn`` holds), as the class
    name too (``type(t.grad_fn).__name__``, a subclass made once per name), that also walks
    the graph as torch's nodes do: ``name()``, and ``next_functions``, one ``(node, 0)`` pair
    per input of the op: the input's own ``grad_fn``, an ``AccumulateGrad`` node for a leaf
    that requires grad, ``None`` for an untracked input (the blitz tutorial's
    ``loss.grad_fn.next_functions[0][0]``)."""

    _node: Any
    _backend: Any
    _device: Any
    _tensor_class: type  # the class of the tensor it belongs to: its saved values' class

    @classmethod
    def of(
        cls, node: Any, backend: Any, device: Any, tensor_class: type, ndim: int | None = None
    ) -> BackwardNode:
        name = torch_node_name(node, ndim)
        kind = _NODE_CLASSES.get(name)
        if kind is None:
            kind = _NODE_CLASSES[name] = type(name, (BackwardNode,), {"__module__": "torch"})
        made = kind(name)
        made._node, made._backend, made._device = node, backend, device
        made._tensor_class = tensor_class
        return made

    def _locate_saved(self, name: str) -> tuple[tuple[str, int], int | None]:
        """Where torch's saved ``name`` is in the node, and its position among the values the
        node keeps (``None``: not kept, its rules never read it for the gradients asked)."""
        source = _saved_names(self._node).get(name)
        if source is None:
            raise AttributeError(f"'{self}' object has no attribute '_saved_{name}'")
        if self._node.consumed:
            raise AutodiffError(_FREED)
        kind, i = source
        plan = self._node.plan
        if kind in ("input", "transposed"):
            kept = i in plan.saved_inputs
            return source, plan.saved_inputs.index(i) if kept else None
        if kind == "out":
            return source, len(plan.saved_inputs) if plan.save_out else None
        return source, None

    def __getattr__(self, attribute: str) -> Any:
        from ..autodiff.checkpoint.budget.pool import Constant, Slot
        from ..autodiff.checkpoint.state import RECOMPUTE
        from ..autodiff.graph import AutodiffPrimitive
        from ..autodiff.saved_hooks import Packed

        if attribute.startswith("_raw_saved_"):
            (kind, _), position = self._locate_saved(attribute[len("_raw_saved_") :])
            if kind in _UNRAW:
                raise AttributeError(f"'{self}' object has no attribute '{attribute}'")
            return None if position is None else SavedTensor(self, position)
        if not attribute.startswith("_saved_"):
            raise AttributeError(f"'{self}' object has no attribute '{attribute}'")
        (kind, i), position = self._locate_saved(attribute[len("_saved_") :])
        node = self._node
        if kind == "param":
            return node.params[i]
        if kind == "scalar":  # as torch wraps a Python number: a double, a long, a complex
            number = node.params[i]
            dtype = _SCALAR_DTYPES.get(type(number).__name__)
            return from_host(self._tensor_class, number, dtype, self._backend, self._device)
        if kind == "const":
            return i
        if kind == "zeros":  # a convolution's output padding: none, one 0 per spatial dim
            return (0,) * len(node.params[0])
        if position is None:
            return None
        actions = node.saved.actions
        if actions is None:
            raise AutodiffError(_FREED)
        value = [v for _, v, is_backup in actions if not is_backup][position]
        if type(value) in (Slot, Constant):  # held in a memory budget's pool
            value = value.value
        if type(value) is Packed:
            value = value.unpack(value.packed)
        elif value is RECOMPUTE:
            raise AutodiffError(
                f"{self}: its saved {attribute[7:]!r} is recomputed during backward by the "
                "checkpointing strategy, not held"
            )
        # torch's saved input is the input itself, its saved result an output of this node
        owner = node if kind == "out" else node.parents[i]
        saved = self._tensor_class(AutodiffPrimitive(value, owner), self._backend, self._device)
        return saved.t() if kind == "transposed" else saved

    def __dir__(self) -> list[str]:
        names = _saved_names(self._node) if self._node.op is not None else {}
        raw = [f"_raw_saved_{n}" for n, (kind, _) in names.items() if kind not in _UNRAW]
        return sorted({*super().__dir__(), *(f"_saved_{n}" for n in names), *raw})

    def name(self) -> str:
        """torch's ``name()``: the class name, C++-qualified for a leaf's node, as torch's
        (``torch::autograd::AccumulateGrad``)."""
        return "torch::autograd::AccumulateGrad" if self == "AccumulateGrad" else str(self)

    @property
    def next_functions(self) -> tuple[tuple[BackwardNode | None, int], ...]:
        """torch's: one ``(node, output index)`` pair per differentiable input of the op,
        in torch's order: the node that made the input (with which of its outputs the input
        is: ``x.unbind()``'s second is 1), an ``AccumulateGrad`` node for a leaf that
        requires grad, ``(None, 0)`` for an input that does not."""
        return tuple(
            (None, 0)
            if edge is None
            else (
                BackwardNode.of(edge, self._backend, self._device, self._tensor_class),
                edge.torch_output,
            )
            for edge in _torch_edges(self._node)
        )


#: the ops of a tensor and a number whose torch node lists the number as a second input
_NUMBER_AS_OPERAND = frozenset(["add_scalar", "sub_scalar", "mul_scalar", "div_scalar"])


def _linear_edges(node: Any) -> tuple:
    """torch's ``linear``: ``addmm(bias, input, weight.t())`` (``mm(input, weight.t())``
    without a bias), the weight's ``t()`` a node of its own."""
    x, weight, bias = node.parents
    transposed = None if weight is None else TorchOnlyNode("TBackward0", (weight,))
    return (x, transposed) if bias is None else (bias, x, transposed)


#: the primitive ops whose inputs torch's node orders otherwise, by op name
_EDGES_BY_OP: dict[str, Callable[[Any], tuple]] = {
    "linear": _linear_edges,
    # where(mask, values, x): torch's WhereBackward0 has (self, other), not the condition
    "mask_where": lambda node: (node.parents[2], node.parents[0]),
}


def stands_for(node: Any, old: Any) -> None:
    """Make ``node`` (a write through ``.data`` into a tensor computed in the graph: the op
    ``data_write`` or ``data_replace``) show as ``old``, the node that made the tensor: torch's
    ``.data`` write leaves the tensor's ``grad_fn`` as it was (``MulBackward0``, with its
    ``next_functions``)."""
    if node is None or old is None or old.op is None:
        return
    node.torch_name = torch_node_name(old)
    node.torch_inputs = _torch_edges(old)
    if old.torch_output:
        node.torch_output = old.torch_output


SHOW_AS_REPLACED[0] = stands_for


def _torch_edges(node: Any) -> tuple:
    """The inputs of torch's node for what ``node`` records (see
    :attr:`BackwardNode.next_functions`): the public op's arguments where it was a composite
    (``torch_inputs``), else the op's inputs that have a gradient rule, in torch's order."""
    edges = node.torch_inputs
    if edges is not None:
        return edges
    op = node.op
    if op is None:
        return ()
    reorder = _EDGES_BY_OP.get(op.name)
    if reorder is not None:
        return reorder(node)
    rules = op.vjps or ()
    parents = node.parents
    if not op.variadic and len(rules) == len(parents):  # (an index, a mask: no rule, no edge)
        parents = tuple(parent for parent, rule in zip(parents, rules) if rule is not None)
    if op.name in _NUMBER_AS_OPERAND:
        parents += (None,)  # torch's node of ``x * 2`` has the 2 as an input
    return parents


def _kth_ties_as_torch(x: Any, ordered: Any, indices: Any, d: int, k: int) -> Any:
    """``indices`` of the k-th values along ``d``, with those of rows where that value is
    tied replaced by the one torch's CPU ``kthvalue`` reports: the position its quickselect
    leaves at ``k - 1`` (a host read; a row whose k-th value is not tied is left as sorted)."""
    n = x.shape[d]
    sorted_rows = np.moveaxis(untracked(ordered).numpy(), d, -1).reshape(-1, n)

    def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else a == b

    kth = sorted_rows[:, k - 1]
    tied = np.zeros(kth.shape, bool)
    if k >= 2:
        tied |= same(sorted_rows[:, k - 2], kth)
    if k < n:
        tied |= same(sorted_rows[:, k], kth)
    if not tied.any():
        return indices
    rows = np.moveaxis(untracked(x).numpy(), d, -1).reshape(-1, n)
    picked = np.moveaxis(indices.numpy(), d, -1).reshape(-1).copy()
    for r in np.flatnonzero(tied):
        picked[r] = _torch_quickselect(rows[r].tolist(), k - 1)
    shape = tuple(1 if i == d else s for i, s in enumerate(x.shape))
    moved = picked.reshape(shape[:d] + shape[d + 1 :] + (1,))
    return x._host(np.ascontiguousarray(np.moveaxis(moved, -1, d)), "int64")


def _torch_mode_position(row: np.ndarray) -> int:
    """The index torch's CPU ``mode`` reports for one row: it sorts ``(value, index)`` pairs
    by value with ``std::sort`` (not stable) and takes the index that ends the first longest
    run of equal values (``!=`` parts runs, so each NaN is a run of its own)."""
    n = row.shape[0]
    if n <= 16 and not (row.dtype.kind in "fc" and np.isnan(row).any()):
        # libstdc++ sorts this few by insertion, which keeps ties in order: the chosen
        # value's last occurrence (the smallest of the most frequent values)
        values, counts = np.unique(row, return_counts=True)
        return int(np.flatnonzero(row == values[np.argmax(counts)])[-1])
    pairs = list(zip(row.tolist(), range(n)))
    std_sort(pairs, 0, n, lambda a, b: a[0] < b[0])
    best_count, best_position, run = 0, 0, 0
    for i, (value, position) in enumerate(pairs):
        run += 1
        if i == n - 1 or value != pairs[i + 1][0]:
            if run > best_count:
                best_count, best_position = run, position
            run = 0
    return best_position


def _torch_quickselect(values: list, k: int) -> int:
    """The original index torch's ``quick_select_template`` (ATen's SortingUtils.h) leaves at
    position ``k`` of ``values``: median-of-three pivots, Hoare partitions, NaN largest."""

    def after(a: Any, b: Any) -> bool:  # torch's gt_or_nan
        return (a != a and b == b) or a > b

    order = list(range(len(values)))

    def swap(i: int, j: int) -> None:
        values[i], values[j] = values[j], values[i]
        order[i], order[j] = order[j], order[i]

    low, high = 0, len(values) - 1
    while high > low:
        if high == low + 1:
            if after(values[low], values[high]):
                swap(low, high)
            break
        swap(low + (high - low) // 2, low + 1)
        if after(values[low + 1], values[high]):
            swap(low + 1, high)
        if after(values[low], values[high]):
            swap(low, high)
        if after(values[low + 1], values[low]):
            swap(low + 1, low)
        i, j, pivot = low + 1, high, values[low]
        while True:
            i += 1
            while after(pivot, values[i]):
                i += 1
            j -= 1
            while after(values[j], pivot):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(low, j)
        if j <= k:
            low = i
        if j >= k:
            high = j - 1
    return order[k]


def _nan_lower_middle(x: Any, d: int) -> tuple[Any, Any]:
    """The lower middle of the non-NaN values along ``d`` (kept as size 1), with its index
    (sorting puts NaN last)."""
    values, indices = x.sort_with_indices(d)
    count = x.isnan().logical_not().cast("int64").sum(d, True)
    middle = ((count - 1).clamp_min(0)).div(2, rounding_mode="floor")
    all_nan = _all_nan_pick(x.shape[d] if x.ndim else 1)
    if all_nan:  # (the stable sort keeps an all-NaN slice in order: position is index)
        middle = middle.mask_fill(count == 0, all_nan)
    return values.gather(d, middle), indices.gather(d, middle)


def _all_nan_pick(n: int) -> int:
    """The index torch's CPU ``nanmedian`` gives an all-NaN slice of ``n``: its kernel runs
    ``std::nth_element`` for position 0 with every element equivalent, so the answer is where
    libstdc++'s introselect moves things (its median-of-three swaps the middle element to the
    front, its partition swaps ``p`` with ``last - p``, and it goes on below the cut while more
    than 3 remain). The rounds are replayed backwards from position 0."""
    rounds, last, depth = [], n, 2 * (n.bit_length() - 1) if n else 0
    while last > 3 and depth:
        depth -= 1
        rounds.append(last)
        last = (last - 1) // 2 + 1
    p = 0
    for last in reversed(rounds):
        p = last - p if p else 0  # before the partition
        mid = last // 2
        p = mid if p == 0 else 0 if p == mid else p  # before the swap of the front and mid
    return p


def _quantile(
    x: Any, op: str, q: Any, dim: Any, keepdim: bool, interpolation: str, ignore_nan: bool
) -> Any:
    if interpolation not in _INTERPOLATIONS:
        raise InvalidArgumentError(
            f"{op}: interpolation must be one of {list(_INTERPOLATIONS)}, got {interpolation!r}"
        )
    if x.dtype not in ("float32", "float64"):  # (torch's CPU and CUDA kernels: no half ones)
        raise DTypeError(f"{op}: expected a float32 or float64 tensor, got {x.dtype}")
    if x.numel() == 0:  # (a reduced dimension of size 1 of an empty tensor passed: torch's)
        raise ShapeError(f"{op}: input tensor must be non-empty, got shape {shape_text(x.shape)}")
    if isinstance(q, TensorBase):
        qs = lift(x, q, op)
        if qs.dtype != x.dtype:  # (torch converts no q tensor)
            raise DTypeError(
                f"{op}: q tensor must have the input's dtype {x.dtype}, got {qs.dtype}"
            )
    else:  # numbers in the input's dtype, as torch takes them
        qs = wrap(x, x._backend.from_data(np.asarray(q, np.float64), x.dtype, x._device))
    scalar_q = qs.ndim == 0
    if qs.ndim > 1:  # checked before the flattening below, which would hide it
        raise ShapeError(f"{op}: q must be a number or a 1-d tensor, got {shape_text(qs.shape)}")
    qs = qs.reshape((-1,))
    q_values = qs.numpy()
    outside = ~((q_values >= 0) & (q_values <= 1))  # (a NaN q is neither: refused too)
    if outside.any():
        raise InvalidArgumentError(
            f"{op}: q values must be in [0, 1], got {q_values[outside][:4].tolist()}"
        )
    if not x.ndim and dim is not None:  # 0 or -1 of a 0-d tensor: its one value, as torch's
        normalize_dim(op, dim, 0, scalar=True)
        dim, keepdim = None, False
    source = x.reshape((-1,)) if dim is None else x
    d = 0 if dim is None else normalize_dim(op, dim, x.ndim)
    values = source.sort(d).values.movedim(d, -1)  # [..., n], NaN last
    n = values.shape[-1]
    nans = values.isnan()
    qs = qs.cast(values.dtype)
    # A row's NaN is its result, read (as torch reads it, so that the gradient reaches that
    # NaN too) at a rank past the numbers: the last place of a row holding one, for quantile,
    # and place 0 of a row of NaN only, for nanquantile
    if ignore_nan:
        last = nans.logical_not().cast(values.dtype).sum(-1, True) - 1.0
        ranks = (last * qs).clamp_min(0.0)  # [..., len(q)]
    else:
        ranks = (qs * (n - 1.0)).expand(values.shape[:-1] + qs.shape)
        ranks = ranks.mask_fill(nans.any(-1, True).expand(ranks.shape), n - 1.0)
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()
    below = ranks.floor().clamp_min(0.0).cast("int64")
    low = values.gather(-1, below)
    if interpolation in ("linear", "midpoint"):
        # Only these two interpolate, as torch's: a lerp at weight 0 of an infinity would
        # make NaN (and of -0.0, +0.0) where the value read is the result
        above = ranks.ceil().clamp_min(0.0).cast("int64")
        if interpolation == "midpoint":
            weights = ranks.mul_scalar(0.0).add_scalar(0.5)
        else:
            weights = ranks - ranks.floor()
        low = low.lerp(values.gather(-1, above), weights)
    out = low.movedim(-1, 0)  # q first, as torch
    if keepdim:
        kept = (
            (1,) * x.ndim
            if dim is None
            else tuple(1 if i == d else n for i, n in enumerate(x.shape))
        )
        out = out.reshape(out.shape[:1] + kept)
    return out.squeeze_dim(0) if scalar_q else out


def _check_weights(rows: Any) -> None:
    """torch's checks of multinomial weights ``[rows, categories]`` (NumPy)."""
    if not np.isfinite(rows).all() or (rows < 0).any():
        raise SamplingError(
            "multinomial: probability tensor contains either `inf`, `nan` or element < 0"
        )
    if (rows.sum(axis=1) <= 0).any():
        raise SamplingError(
            "multinomial: invalid multinomial distribution (sum of probabilities <= 0)"
        )


def multinomial(
    input: Any,  # noqa: A002 (torch's name)
    num_samples: int = 1,
    replacement: bool = False,
    *,
    generator: Any = None,
) -> Any:
    """int64 indices drawn from the categories of each row of the weights ``input`` (1-d, or
    2-d with one
    distribution per row; weights need not sum to one), as ``torch.multinomial``.

    Draws come from the backend's seeded generator (:func:`seed`), on the backend: with
    ``replacement``, by inverting each row's cumulative distribution at uniform draws;
    without, by the Gumbel top-k trick (the ``num_samples`` largest of ``log p - log(-log u)``),
    which draws exactly as sampling one at a time without replacement does. On the CPU the
    weights are checked as torch checks them (negative, infinite or NaN weights, an all-zero
    row: each a ``SamplingError``, a ``RuntimeError`` as torch's); ``generator`` (an
    ``rg.Generator``) draws from its own stream instead;
    on an accelerator they are not read back (torch checks there with a device-side assert).

    >>> import retrograd as rg
    >>> rg.seed(0)
    >>> rg.multinomial(rg.tensor([0.0, 1.0, 0.0]), 2, replacement=True).tolist()
    [1, 1]
    """
    probs = input
    if not isinstance(probs, TensorBase):
        raise DTypeError(f"multinomial: probs must be a tensor, got {type(probs).__name__}")
    if probs.dtype not in FLOAT_DTYPES:
        raise DTypeError(f"multinomial: probs must be a float tensor, got {probs.dtype}")
    if probs.ndim not in (1, 2) or probs.shape[-1] == 0:
        raise ShapeError(
            f"multinomial: probs must be 1-d or 2-d with at least one category, got shape "
            f"{shape_text(probs.shape)}"
        )
    num_samples = int_argument("multinomial", num_samples, "num_samples")
    if not isinstance(num_samples, numbers.Integral):
        raise InvalidArgumentError(
            f"multinomial: num_samples must be a positive int, got {num_samples!r}"
        )
    if num_samples < 1:  # torch's RuntimeError "cannot sample n_sample <= 0 samples"
        raise SamplingError(f"multinomial: num_samples must be a positive int, got {num_samples}")
    categories = probs.shape[-1]
    if not replacement and num_samples > categories:
        raise SamplingError(
            f"multinomial: cannot draw {num_samples} samples without replacement from "
            f"{categories} categories (shape {shape_text(probs.shape)})"
        )
    p = probs.detach()  # a float tensor (checked above), in its own precision
    rows = p if p.ndim == 2 else p.unsqueeze_dim(0)
    if p.device.kind == "cpu":
        _check_weights(rows.numpy())
    count = rows.shape[0]
    generator = checked_generator("multinomial", generator)

    def uniform(shape: tuple[int, ...]) -> Any:
        if generator is not None:
            drawn = generator.draws(shape, "uniform", p.dtype)
            return untracked(from_host(type(p)._result, drawn, p.dtype, p._backend, p._device))
        return wrap(p, p._backend.random(shape, "uniform", p.dtype, p._device))

    if replacement:
        cdf = rows.cumsum(1)
        total = cdf.narrow(1, categories - 1, 1)  # [rows, 1]
        draws = uniform((count, int(num_samples)))
        draws = draws * total
        # The index is how many cumulative weights lie at or below the draw (zero-weight
        # categories are never chosen: their cumulative weight equals the one before).
        below = cdf.unsqueeze_dim(1) <= draws.unsqueeze_dim(2)  # [rows, samples, categories]
        out = below.long().sum_dim(2).squeeze_dim(2).clamp_max(categories - 1)
    else:
        drawn = uniform((count, categories))
        # u in [0, 1): clamp away from 0 and 1 so both logs stay finite.
        gumbel = -(-(drawn.clamp(1e-20, 1.0 - 1e-7)).log()).log()
        # Zero-weight categories get key -inf (last, never drawn while others remain); the
        # clamp only keeps log from warning about the zeros the fill replaces.
        keys = (rows.clamp_min(1e-30).log() + gumbel).mask_fill(rows <= 0.0, -math.inf)
        out = keys.topk_with_indices(int(num_samples), 1)[1]
    return out if probs.ndim == 2 else out.squeeze_dim(0)


def _fitted(values: Any, shape: tuple[int, ...]) -> Any:
    """``values`` broadcast to ``index_put``'s indexing result ``shape``; torch refuses values
    that would widen it (broadcasting the indices to the values instead)."""
    try:
        fits = np.broadcast_shapes(values.shape, shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(
            f"index_put: shape mismatch: value tensor of shape {shape_text(values.shape)} "
            f"cannot be broadcast to indexing result of shape {shape_text(shape)}"
        )
    return values.expand(tuple(shape))


def _conj_t(x: Any) -> Any:
    """The conjugate transpose of a matrix (its transpose if real): ``cov``'s ``x^H``."""
    transposed = x.transpose(0, 1)
    return transposed.conj() if transposed.is_complex() else transposed


def _unbroadcastable(src_shape: tuple[int, ...], index_shape: tuple[int, ...]) -> bool:
    """Whether a ``src`` of ``src_shape``, larger than the index, fails to broadcast with the
    index's shape: where torch's ``prod``/``amax``/``amin`` backward then fails. Where it
    broadcasts (src larger only where the index has size 1), torch's backward runs, giving the
    unread part of ``src`` a gradient of its broadcast formulas; ours gives that part none."""
    return any(s != i and i != 1 for s, i in zip(src_shape, index_shape))
