"""Indexing: ``t[...]``, slicing, ``select``/``gather``/``scatter`` with index tensors, masks,
and the indices of non-zero elements.

:class:`IndexingMixin` needs one primitive from the class it is mixed into:
``_apply(op, inputs, params=())`` (:func:`retrograd.tensor._dispatch.apply`), and reads
``shape``, ``ndim`` and ``dtype``. Slices and index arguments are validated here; the values of
index tensors are checked by the backend (``Backend.check_index_range``), so no index tensor is
copied to the host above the backend. Index lists and arrays given by the user are host data
already and become tensors as they are.

Out of range, the classes are API.md section 7's: an index, or a range running past a
dimension's end, is an :class:`~retrograd.IndexOutOfRangeError`; a dimension is a
:class:`~retrograd.ShapeError`.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..backend.protocol import INT_DTYPES, default_float_dtype
from ..context import capturing
from ..errors import (
    DTypeError,
    IndexDTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    KernelArgumentError,
    KernelIndexError,
    ShapeError,
    SizeMismatchError,
    check_bool,
    shape_text,
)
from ._dispatch import (
    COMPLEX_DTYPES,
    NARROW_INTS,
    TensorBase,
    check_same_dtype,
    check_scalar,
    check_written_tensor,
    from_host,
    int_argument,
    int_parameter,
    lift,
    normalize_dim,
    promote,
    untracked,
    wrap,
    written_scalar,
)
from .shape import stack
from .strides import storage_offset_of
from .torch_nodes import TorchOnlyNode
from .views import as_strided_input_positions, as_strided_of, link, refuse_backward
from .views import diagonal_assign as _diagonal_assign
from .views import diagonal_of as _diagonal

__all__ = ["IndexingMixin", "check_indices", "tril", "triu"]


class IndexingMixin:
    """Indexing methods; needs ``_apply`` (see the module docstring)."""

    __slots__ = ()
    _apply: Callable[..., Any]  # the one primitive: retrograd.tensor._dispatch.apply
    shape: tuple[int, ...]
    ndim: int
    dtype: str

    def __getitem__(self, index: Any) -> Any:
        result = _basic_index(self, index)
        if self._backend.is_autodiff:
            _name_index_node(self, index, result)
        return result

    def __iter__(self):
        # checked here, outside a generator: iter() of a 0-d tensor fails at once, as torch's
        if not self.ndim:
            raise DTypeError("iter: iteration over a 0-d tensor (len() of a 0-d tensor)")
        return (self[i] for i in range(len(self)))

    def __reversed__(self) -> Any:
        """torch's ``reversed(t)``: ``t`` flipped along its first dimension (a tensor, not an
        iterator), a 0-d tensor itself (Python's fallback read ``len`` of it and failed)."""
        return self if not self.ndim else self.flip(0)

    def slice(self, ranges: Sequence[Any]) -> Any:
        """Slice the leading dimensions: one ``(start, end)`` pair or ``slice`` per dimension.

        An end past the dimension's size is an error, as in Burn.

        >>> import retrograd as rg
        >>> rg.tensor([[1.0, 2.0, 3.0]]).slice([(0, 1), (1, 3)]).tolist()
        [[2.0, 3.0]]
        """
        return self._apply("slice", (self,), (_ranges("slice", self.shape, ranges),))

    def slice_dim(self, dim: int, range_: Any) -> Any:
        """Burn's ``slice_dim``: :meth:`slice` along one dimension, ``range_`` a ``(start,
        end)`` pair, a ``slice`` or a Python ``range``."""
        d = normalize_dim("slice_dim", dim, self.ndim)
        if isinstance(range_, range):
            range_ = slice(range_.start, range_.stop, range_.step)
        ranges = [slice(None)] * d + [range_]
        return self._apply("slice", (self,), (_ranges("slice_dim", self.shape, ranges),))

    def zeros_like(self) -> Any:
        """Burn's ``zeros_like``: zeros of this shape, dtype and device (untracked)."""
        return wrap(self, self._backend.full(self.shape, 0, self.dtype, self._device))

    def ones_like(self) -> Any:
        """Burn's ``ones_like``: ones of this shape, dtype and device (untracked)."""
        return wrap(self, self._backend.full(self.shape, 1, self.dtype, self._device))

    def contains_nan(self) -> Any:
        """Burn's ``contains_nan``: a 0-d bool tensor, true when any element is NaN."""
        return self.is_nan().any()

    def slice_assign(self, ranges: Sequence[Any], values: Any) -> Any:
        """A copy with the sliced region replaced by ``values``."""
        shape = self.shape
        slices = _ranges("slice_assign", shape, ranges)
        region = tuple(len(range(*s.indices(n))) for s, n in zip(slices, shape))
        region += shape[len(slices) :]
        values = lift(self, values, "slice_assign")
        if values.shape != region:
            values = _broadcast_values("slice_assign", values, region)
        a, b = promote(self, values, "slice_assign")
        return self._apply("slice_assign", (a, b), (slices,))

    def select(self, dim: int, index: Any) -> Any:
        """With an int ``index``, torch's ``select``: the slice at ``index`` along ``dim``,
        that dimension removed (a view). With indices (int64, 1-d tensor or list), Burn's
        ``select``: those entries along ``dim`` (torch's ``index_select``)."""
        if isinstance(index, numbers.Integral) and not isinstance(index, bool):
            d = normalize_dim("select", dim, self.ndim)
            return self[(slice(None),) * d + (int(index),)]
        return self._index_select("select", dim, index)

    def index_select(self, dim: int, index: Any) -> Any:
        """The entries of ``index`` (int64, 1-d; a 0-d index counts as one entry) along
        ``dim`` (torch's ``index_select``, Burn's ``select``)."""
        return self._index_select("index_select", dim, index)

    def _index_select(self, op: str, dim: int, index: Any) -> Any:
        # ``op`` is the name the caller used (select or index_select): errors name it.
        if self.ndim == 0:  # torch's: dim 0 or -1 and one index into the one value
            return self._on_scalar(op, dim, index)._index_select(op, 0, index).reshape(())
        d = normalize_dim(op, dim, self.ndim)
        if isinstance(index, TensorBase) and index.ndim == 0:
            index = index.reshape((1,))
        indices = _index_tensor(op, self, index, d, one_dim=True)
        return self._apply("select", (self, indices), (d,))

    def index_add(self, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Any:
        """A copy with ``alpha * source`` added at ``index`` along ``dim`` (torch's
        ``index_add``; repeated indices accumulate)."""
        check_same_dtype("index_add", self, source)
        source = lift(self, source, "index_add")
        if alpha != 1:
            # torch casts alpha to the tensor's dtype (the result keeps it: a bool tensor's
            # alpha=2 is True, an integer one's -0.5 is 0; an int32 tensor was promoted to
            # float32 by a float alpha)
            if self.dtype == "bool":
                alpha = bool(alpha)
            elif self.dtype in INT_DTYPES:
                alpha = int(alpha)
            source = source * alpha
        return self.select_assign(dim, _one_dim(index), source, "add")

    def index_reduce(
        self, dim: int, index: Any, source: Any, reduce: str, *, include_self: bool = True
    ) -> Any:
        """A copy with the slices of ``source`` reduced (``"prod"``, ``"mean"``, ``"amax"``,
        ``"amin"``) into it at ``index`` along ``dim`` (torch's ``index_reduce``; repeated
        indices reduce together; ``include_self=False`` leaves out the values they land on):
        :meth:`scatter_reduce` with ``index`` spread over ``source``'s shape."""
        if reduce not in ("prod", "mean", "amax", "amin"):
            raise InvalidArgumentError(
                f"index_reduce: reduce must be 'prod', 'mean', 'amax' or 'amin', got {reduce!r}"
            )
        check_same_dtype("index_reduce", self, source)
        if self.dtype == "bool" and self.ndim <= 1:  # (torch's 1-d kernel: before the indices)
            raise DTypeError(
                f"index_reduce: not implemented for a {self.ndim}-d bool tensor (as in torch)"
            )
        source = lift(self, source, "index_reduce")
        x = self.reshape((1,)) if self.ndim == 0 else self  # (a 0-d tensor: its one value)
        d = normalize_dim("index_reduce", dim, x.ndim)
        indices = _index_tensor("index_reduce", x, _one_dim(index), d, one_dim=True)
        if self.dtype == "bool" and reduce == "mean":
            # (torch's mean has no bool division; it checks the indices first)
            raise DTypeError(
                f"index_reduce: not implemented for a {self.ndim}-d bool tensor with reduce "
                f"{reduce!r} (as in torch)"
            )
        region = x.shape[:d] + (indices.shape[0],) + x.shape[d + 1 :]
        if self.ndim == 0 and source.ndim == 0:
            source = source.reshape((1,))
        if tuple(source.shape) != region:
            raise ShapeError(
                f"index_reduce: source of shape {shape_text(source.shape)} does not match "
                f"{shape_text(region)} (the input's shape {shape_text(self.shape)} with "
                f"{indices.shape[0]} indices along dimension {dim})"
            )
        spread = indices.reshape(tuple(-1 if k == d else 1 for k in range(x.ndim)))
        out = x.scatter_reduce(d, spread.expand(region), source, reduce, include_self=include_self)
        out = out.reshape(self.shape)
        given = index if isinstance(index, TensorBase) else None
        if given is not None and given.dtype == "int32" and not include_self:
            # torch's backward then calls index_fill_ with the int32 index, which refuses it
            refuse_backward(
                out,
                "index_reduce: the backward of include_self=False with an int32 index fails "
                "in torch (its index_fill_ expects an int64 index); pass index.long()",
                IndexOutOfRangeError,
            )
        return out

    def index_copy(self, dim: int, index: Any, source: Any) -> Any:
        """A copy with ``source`` written at ``index`` along ``dim``. As torch's, a vector
        takes a 0-d ``source`` at a one-element index (its one written element)."""
        check_same_dtype("index_copy", self, source)
        index = _one_dim(index)
        if getattr(index, "dtype", "int64") != "int64":
            raise DTypeError(f"index_copy: indices must be int64 (as torch's), got {index.dtype}")
        if self.ndim == 1 and source.ndim == 0 and getattr(index, "shape", None) == (1,):
            source = source.reshape((1,))
        return self.select_assign(dim, index, source, "assign")

    def index_fill(self, dim: int, index: Any, value: Any) -> Any:
        """A copy with ``value`` written at ``index`` along ``dim``."""
        values = lift(self, value, "index_fill") if isinstance(value, TensorBase) else value
        if isinstance(values, TensorBase) and values.ndim:
            raise ShapeError(
                f"index_fill: the value must be a number or a 0-d tensor (as in torch), got a "
                f"tensor of shape {shape_text(values.shape)}"
            )
        if isinstance(values, TensorBase):
            check_written_tensor("index_fill", values, self.dtype)
            filler = values.cast(self.dtype)
        else:
            value = check_scalar("index_fill", value)
            if isinstance(value, complex | np.complexfloating) and self.dtype not in (
                COMPLEX_DTYPES
            ):  # torch's index_fill refuses any complex number here, even 2+0j (into bool too)
                raise DTypeError(
                    f"index_fill: the complex value {value!r} cannot be converted to "
                    f"{self.dtype} (as torch refuses it); take .real or abs() of it first"
                )
            value = written_scalar("index_fill", value, self.dtype)
            filler = wrap(self, self._backend.full((), value, self.dtype, self._device))
        if self.ndim == 0:  # its one value (select_assign checks dim and index)
            return self.select_assign(dim, _one_dim(index), filler.reshape((1,)), "assign")
        d = normalize_dim("index_fill", dim, self.ndim)
        if self.numel() == 0 and self.shape[d] > 0:  # (torch checks no index: none written)
            _index_tensor("index_fill", self, _one_dim(index), d, one_dim=True, checked=False)
            nowhere = wrap(self, self._backend.full((), False, "bool", self._device))
            return self.mask_where(nowhere, filler)
        indices = _from_end("index_fill", self, _one_dim(index), d)
        # each position once: a repeated index fills it once, and a tensor value's gradient
        # counts it once (torch's), not once per repetition. The positions are marked on the
        # device (distinct indices would be a host read: their number is data)
        size = self.shape[d]
        unmarked = wrap(self, self._backend.full((size,), 0, "int64", self._device))
        marks = wrap(self, self._backend.full(indices.shape, 1, "int64", self._device))
        filled = unmarked.select_assign(0, indices, marks, "assign").equal_elem(1)
        filled = filled.reshape((1,) * d + (size,) + (1,) * (self.ndim - d - 1))
        return self.mask_where(filled, filler)

    def masked_select(self, mask: Any) -> Any:
        """The elements where ``mask`` (broadcast) is true, as a 1-d tensor (its length is
        data: read on the host, as torch reads it)."""
        return self._select_masked("masked_select", mask)

    def one_hot(self, num_classes: int = -1) -> Any:
        """``[*, num_classes]``: 1 at each index held in this tensor, 0 elsewhere (Burn's
        ``Tensor::one_hot``, torch's ``F.one_hot``); ``num_classes=-1`` takes one more than
        the largest index (a host read, as in torch). An int64 tensor gives int64; a float
        tensor of whole class values gives that float dtype, as Burn's float ``one_hot``."""
        num_classes = int_argument("one_hot", num_classes, "num_classes")
        if self.is_floating_point():
            values = self.detach()
            if values.numel() and not bool((values == values.round()).all().item()):
                raise DTypeError(
                    f"one_hot: a {self.dtype} tensor of classes must hold whole numbers"
                )
            return values.cast("int64").one_hot(num_classes).cast(self.dtype)
        if self.dtype != "int64":
            raise DTypeError(f"one_hot: expected an int64 tensor of indices, got {self.dtype}")
        if not self.numel() and num_classes <= 0:  # nothing to count classes of: torch refuses
            raise KernelArgumentError(  # (torch's RuntimeError)
                f"one_hot: cannot infer num_classes from an empty tensor (shape "
                f"{shape_text(self.shape)}); pass a positive num_classes, got {num_classes}"
            )
        if num_classes == -1:  # the classes' count is data: a host read, as in torch
            num_classes = max(int(self.max().item()) + 1, 0)

        def out_of_range(bad: int | None, num_classes: int = num_classes) -> KernelIndexError:
            # (torch's RuntimeError: "Class values must be non-negative"/"smaller than ...")
            if bad is not None and bad < 0:
                return KernelIndexError(f"one_hot: class values must be non-negative, got {bad}")
            value = "" if bad is None else f", got {bad}"
            return KernelIndexError(
                f"one_hot: class values must be smaller than num_classes={num_classes}{value}"
            )

        # on the backend's device: a deferred check there, no host read per call
        check_indices(self, num_classes, out_of_range)
        classes = wrap(self, self._backend.arange(0, num_classes, 1, "int64", self._device))
        return self.unsqueeze_dim(-1).equal(classes).cast("int64")

    def mask_select(self, mask: Any) -> Any:
        """Burn's name for :meth:`masked_select` (as ``mask_fill`` is for ``masked_fill``)."""
        return self._select_masked("mask_select", mask)

    def _select_masked(self, op: str, mask: Any) -> Any:
        mask = _mask_tensor(op, self, mask)
        shape = np.broadcast_shapes(mask.shape, self.shape)
        x = self.expand(shape).reshape(-1)
        positions = mask.expand(shape).reshape(-1).nonzero(as_tuple=True)[0]
        return x.index_select(0, positions)

    def masked_scatter(self, mask: Any, source: Any) -> Any:
        """A copy with the elements where ``mask`` is true taken, in order, from ``source``."""
        mask = _mask_tensor("masked_scatter", self, mask)
        check_same_dtype("masked_scatter", self, source)
        source = lift(self, source, "masked_scatter")
        shape = tuple(np.broadcast_shapes(self.shape, mask.shape))  # torch broadcasts both
        x = self if self.shape == shape else self.expand(shape)
        positions = mask.expand(shape).reshape(-1).nonzero(as_tuple=True)[0]
        count = positions.shape[0]
        if source.numel() < count:
            raise ShapeError(
                f"masked_scatter: source has {source.numel()} elements, the mask selects {count}"
            )
        values = source.reshape(-1).narrow(0, 0, count)
        flat = x.reshape(-1).select_assign(0, positions, values, "assign")
        return flat.reshape(shape)

    def take(self, index: Any, indices: Any = None) -> Any:
        """torch's ``take(index)``: elements of the flattened tensor at ``index`` (any shape).
        Burn's ``take(dim, indices)``: :meth:`select` along ``dim`` with an index tensor of
        any shape, which takes ``dim``'s place in the result's shape."""
        if indices is not None:
            return self._take_along("take", index, indices)
        index = lift(self, index, "take") if isinstance(index, TensorBase) else index
        index = (
            index
            if isinstance(index, TensorBase)
            else from_host(type(self)._result, np.asarray(index), None, self._backend, self._device)
        )
        if index.dtype != "int64":  # a bool mask would be read as indices 0 and 1
            raise DTypeError(f"take: expected an int64 index, got {index.dtype}")
        shape = index.shape
        index = _wrapped_flat("take", self, index.reshape(-1))
        return self.reshape(-1).index_select(0, index).reshape(shape)

    def _take_along(self, op: str, dim: Any, indices: Any) -> Any:
        if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
            raise DTypeError(f"{op}: dim must be an int, got {dim!r}")
        d = normalize_dim(op, dim, self.ndim)
        indices = lift(self, indices, op) if isinstance(indices, TensorBase) else indices
        if not isinstance(indices, TensorBase):
            indices = from_host(
                type(self)._result, np.asarray(indices), None, self._backend, self._device
            )
        picked = self.select(d, indices.reshape(-1))
        return picked.reshape(self.shape[:d] + indices.shape + self.shape[d + 1 :])

    def put(self, index: Any, source: Any, accumulate: bool = False) -> Any:
        """A copy with ``source`` written (added, with ``accumulate``) at the flat ``index``."""
        check_same_dtype("put", self, source)
        source = lift(self, source, "put")
        # torch reads an index of any shape in its flat order, one source element per entry
        index = index if isinstance(index, TensorBase) else np.asarray(index)
        index_shape = tuple(index.shape)
        index = _index_tensor(
            "put", self.reshape(-1), index.reshape(-1), 0, one_dim=True, checked=False
        )
        if index.numel() != source.numel():
            raise ShapeError(
                f"put: source and index must have the same number of elements, got source "
                f"of shape {shape_text(source.shape)} and index of shape {shape_text(index_shape)}"
            )
        flat = self.reshape(-1).select_assign(
            0, _wrapped_flat("put", self, index), source.reshape(-1),
            "add" if accumulate else "assign",
        )  # fmt: skip
        return flat.reshape(self.shape)

    def where(self, condition: Any, other: Any) -> Any:
        """``self`` where ``condition`` is true, else ``other`` (torch's ``x.where(c, y)``)."""
        from .functions import where

        return where(condition, self, other)

    def select_assign(self, dim: int, indices: Any, values: Any, update: str = "add") -> Any:
        """A copy with ``values`` added to (``update="add"``) or written over (``"assign"``) the
        entries ``indices`` along ``dim``."""
        if self.ndim == 0:  # torch's index_add/copy/fill of a 0-d tensor: its one value
            flat = self._on_scalar("select_assign", dim, indices)
            values = lift(self, values, "select_assign")
            if values.numel() != 1:
                raise ShapeError(
                    f"select_assign: values of shape {shape_text(values.shape)} for a 0-d "
                    "tensor (expected one value)"
                )
            # a 0-d index too, as torch's index_add/index_copy of a 0-d tensor take it
            index = (
                indices.reshape((-1,))
                if isinstance(indices, TensorBase)
                else np.asarray(indices).reshape(-1)
            )
            return flat.select_assign(0, index, values.reshape((1,)), update).reshape(())
        d = normalize_dim("select_assign", dim, self.ndim)
        # torch checks an index as it writes a slice: none when the slices have no elements
        empty = self.numel() == 0 and self.shape[d] > 0
        indices = _index_tensor("select_assign", self, indices, d, one_dim=True, checked=not empty)
        shape = self.shape
        expected = shape[:d] + (indices.shape[0],) + shape[d + 1 :]
        values = lift(self, values, "select_assign")
        if values.shape != expected:
            raise ShapeError(
                f"select_assign: values have shape {shape_text(values.shape)}, expected "
                f"{shape_text(expected)} for {indices.shape[0]} indices along dimension {dim} "
                f"of {shape_text(shape)}"
            )
        if empty:
            indices = indices.clamp(0, shape[d] - 1)
        op = _update_op("select_assign", update, "select")
        a, b = promote(self, values, "select_assign")
        return self._apply(op, (a, indices, b), (d,))

    def _on_scalar(self, op: str, dim: Any, index: Any) -> Any:
        """This 0-d tensor as ``[1]``, for an index op along ``dim`` (0 or -1, as torch takes
        them) with ``index`` of one entry (torch's rule for a 0-d input)."""
        normalize_dim(op, dim, 0, scalar=True)
        count = index.numel() if isinstance(index, TensorBase) else np.asarray(index).size
        if count != 1:
            raise ShapeError(f"{op}: an index into a 0-d tensor has one entry, got {count}")
        return self.reshape((1,))

    def gather(
        self, dim: int, index: Any = None, *, sparse_grad: bool = False, indices: Any = None
    ) -> Any:
        """``out[i][j] = self[i][index[i][j]]`` along ``dim`` (PyTorch's ``gather``, whose
        keyword is ``index``; Burn's name ``indices`` is taken too; ``sparse_grad`` is accepted
        and changes nothing: gradients here are dense)."""
        if (index is None) == (indices is None):
            raise InvalidArgumentError(
                "gather: give the index once, as the second argument or index= (or Burn's "
                f"indices=); got index={'None' if index is None else 'a value'} and "
                f"indices={'None' if indices is None else 'a value'}"
            )
        indices = index if indices is None else indices
        if self.ndim == 0:  # torch's: dim 0 or -1, a 0-d or 1-d index into the one value
            normalize_dim("gather", dim, 0, scalar=True)
            index = indices if isinstance(indices, TensorBase) else np.asarray(indices)
            if index.ndim > 1 and _entry_count(index) > 0:
                raise ShapeError(
                    f"gather: indices of shape {shape_text(tuple(index.shape))} must be 0-d "
                    "or 1-d for a 0-d input"
                )
            return self.reshape((1,)).gather(0, index.reshape((-1,))).reshape(tuple(index.shape))
        d = normalize_dim("gather", dim, self.ndim)
        if _entry_count(indices) == 0:  # torch's: an empty index of any shape and dtype
            shape = tuple(indices.shape) if isinstance(indices, TensorBase) else np.shape(indices)
            picked = self._apply("gather", (self, _no_indices(self)), (d,))
            return picked.reshape(shape)
        indices = _index_tensor("gather", self, indices, d)
        _check_index_extent("gather", indices, self.shape, d)
        return self._apply("gather", (self, indices), (d,))

    def scatter(
        self,
        dim: int,
        index: Any,
        src: Any = None,
        update: str | None = None,
        *,
        value: Any = None,
        reduce: str | None = None,
    ) -> Any:
        """torch's ``scatter``: a copy with ``src`` (or the scalar ``value``) written at
        ``index`` along ``dim`` (``reduce="add"`` adds instead, ``"multiply"`` multiplies);
        Burn's form names the update, ``scatter(dim, indices, values, "add" | "assign")``.
        ``src`` may be larger than ``index`` (its leading part is used, as torch uses it)."""
        if update is None:  # torch's form, which refuses a src of another dtype
            check_same_dtype("scatter", self, src)
            if reduce not in (None, "add", "multiply"):
                raise InvalidArgumentError(
                    f"scatter: reduce={reduce!r} is not supported (only 'add' and 'multiply')"
                )
            update = "assign" if reduce is None else reduce
            if reduce is not None:
                return self._scatter_reduce_keyword(dim, index, src, value, reduce)
        if src is None and value is None:
            raise InvalidArgumentError("scatter: give src (a tensor) or value (a scalar)")
        if src is None or not isinstance(src, TensorBase | np.ndarray | list):
            fill = value if src is None else src
            if not isinstance(fill, TensorBase):  # (torch's bounds: -1 is uint8's 255)
                fill = written_scalar("scatter", fill, self.dtype)
            shape = (
                lift(self, index, "scatter").shape
                if isinstance(index, TensorBase)
                else (np.asarray(index).shape)
            )
            src = wrap(self, self._backend.full(shape, fill, self.dtype, self._device))
        if update == "multiply":  # torch's legacy form of scatter_reduce's "prod"
            return self.scatter_reduce(dim, index, src, "prod", include_self=True)
        return self._scatter(dim, index, src, update)

    def _scatter_reduce_keyword(
        self, dim: int, index: Any, src: Any, value: Any, reduce: str
    ) -> Any:
        """torch's ``scatter(..., reduce="add" | "multiply")``: computed outside the graph, its
        result tracked when an input is, with a backward that refuses (torch implements no
        derivative of this form: "the derivative for aten::scatter is not implemented";
        :meth:`scatter_reduce` and Burn's ``update="add"`` are differentiable)."""
        inputs = [t for t in (self, src) if isinstance(t, TensorBase)]
        plain = [untracked(t) if isinstance(t, TensorBase) else t for t in (self, src)]
        out = plain[0].scatter(dim, index, plain[1], update=reduce, value=value)
        for source in inputs:
            if source.requires_grad:
                kind = f"scatter with reduce={reduce!r}"
                return source._apply("refused_derivative", (source, out), (kind,))
        return out

    def scatter_add(self, dim: int, index: Any, src: Any) -> Any:
        """A copy with ``src`` added at ``index`` along ``dim``."""
        check_same_dtype("scatter_add", self, src)
        return self._scatter(dim, index, src, "add")

    def _scatter(self, dim: int, indices: Any, values: Any, update: str) -> Any:
        if self.ndim == 0:  # torch's: dim 0 or -1, into the one value seen as [1]
            normalize_dim("scatter", dim, 0, scalar=True)
            index = indices if isinstance(indices, TensorBase) else np.asarray(indices)
            values = lift(self, values, "scatter")
            flat = self.reshape((1,))._scatter(
                0, index.reshape((-1,)), values.reshape((-1,)), update
            )
            return flat.reshape(())
        d = normalize_dim("scatter", dim, self.ndim)
        values = lift(self, values, "scatter")
        if _entry_count(indices) == 0:  # torch's: an empty index of any shape, any src
            indices = _no_indices(self)
            values = values.reshape((-1,))[:0].reshape(indices.shape)
        indices = _index_tensor("scatter", self, indices, d)
        if (
            values.shape != indices.shape
            and values.ndim == indices.ndim
            and all(v >= i for v, i in zip(values.shape, indices.shape))
        ):
            values = leading_part("scatter", values, indices.shape)
        if values.shape != indices.shape:
            raise ShapeError(
                f"scatter: values of shape {shape_text(values.shape)} must have the shape of "
                f"indices {shape_text(indices.shape)}"
            )
        _check_index_extent("scatter", indices, self.shape, d)
        op = _update_op("scatter", update, "scatter")
        a, b = promote(self, values, "scatter")
        return self._apply(op, (a, indices, b), (d,))

    def mask_where(self, mask: Any, values: Any) -> Any:
        """``values`` where ``mask`` is true, else ``self`` (broadcasting)."""
        mask = _mask_tensor("mask_where", self, mask)
        a, b = promote(self, values, "mask_where")
        return self._apply("mask_where", (a, mask, b))

    def mask_fill(self, mask: Any, value: float) -> Any:
        """``value`` where ``mask`` is true, else ``self`` (Burn's: a float value makes an int
        tensor's result float)."""
        return self._fill("mask_fill", mask, value, promote_to_float=True)

    def masked_fill(self, mask: Any, value: Any) -> Any:
        """torch's ``masked_fill``: the result keeps this tensor's dtype (a float value is
        truncated toward zero for an int tensor, as torch casts it), and ``value`` may be a
        0-d tensor, which then receives the gradient of the positions it fills.

        >>> import retrograd as rg
        >>> rg.tensor([1, 2]).masked_fill(rg.tensor([True, False]), 1.5).tolist()
        [1, 2]
        """
        out = self._fill("masked_fill", mask, value, promote_to_float=False)
        out._layout = None  # torch's: a row-major clone (MemoryFormat::Contiguous), filled
        return out

    def _fill(self, op: str, mask: Any, value: Any, promote_to_float: bool) -> Any:
        mask = _mask_tensor(op, self, mask)
        if isinstance(value, TensorBase) and not promote_to_float:
            if value.ndim != 0:
                raise ShapeError(
                    f"{op}: value must be a 0-d tensor or a Python scalar, got a tensor of "
                    f"shape {shape_text(value.shape)}"
                )
            check_written_tensor(op, value, self.dtype)
            return self.mask_where(mask, value.cast(self.dtype))
        value = check_scalar(op, value)
        source = self
        if isinstance(value, float) and not self.is_float() and not self.is_complex():
            if promote_to_float:
                source = self.cast(default_float_dtype())
            elif self.dtype == "bool":
                value = bool(value)
            elif self.dtype in NARROW_INTS:  # (written_scalar: truncated within its bounds)
                pass
            elif not math.isfinite(value):
                raise InvalidArgumentError(
                    f"{op}: value {value} cannot be converted to the tensor's dtype {self.dtype}"
                )
            else:
                value = int(value)
        value = written_scalar(op, value, source.dtype)
        return self._apply("mask_fill", (source, mask), (value,))

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Any:
        """The diagonal over ``dim1`` and ``dim2`` (``offset`` above the main one when
        positive), as a new last dimension: a view, as torch's."""
        params = _diagonal_params("diagonal", self.ndim, offset, dim1, dim2)
        return link(_diagonal(self, params), self, "diagonal", params)

    def as_strided(self, size: Sequence[int], stride: Sequence[int],
                   storage_offset: int | None = None) -> Any:  # fmt: skip
        """torch's ``as_strided``: element ``i`` of the view is element ``storage_offset +
        sum(i_k * stride_k)`` of this tensor's storage (its root's elements laid out by their
        strides; ``storage_offset`` defaults to this tensor's own), so a transposed or sliced
        input reads what torch's reads (:func:`~.views.as_strided_input_positions`). A view
        (writes through it reach this tensor, unless two of its elements are one); the
        gradient adds each incoming element into the position it was taken from, as torch's."""
        size, stride = _as_strided_sizes("size", size), _as_strided_sizes("stride", stride)
        if storage_offset is None:
            offset = storage_offset_of(self)
        else:
            offset = int_argument("as_strided", storage_offset, "storage_offset")
        if not isinstance(offset, numbers.Integral) or isinstance(offset, bool):
            raise DTypeError(f"as_strided: storage_offset must be an int, got {offset!r}")
        if len(size) != len(stride):
            raise ShapeError(
                f"as_strided: size {list(size)} and stride {list(stride)} differ in length"
            )
        if any(n < 0 for n in size):
            raise ShapeError(f"as_strided: sizes must be non-negative, got {list(size)}")
        if any(s < 0 for s in stride):
            raise ShapeError(
                f"as_strided: negative strides are not supported (as in torch), got {list(stride)}"
            )
        if offset < 0:
            raise ShapeError(f"as_strided: storage_offset must be non-negative, got {offset}")
        positions = as_strided_input_positions(self, size, stride, int(offset))
        params = (size, stride, int(offset), positions)
        return link(as_strided_of(self, params), self, "as_strided", params)

    def diagonal_scatter(self, src: Any, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Any:
        """A copy with ``src`` (cast to this dtype) written on the diagonal that
        :meth:`diagonal` with the same arguments takes."""
        params = _diagonal_params("diagonal_scatter", self.ndim, offset, dim1, dim2)
        src = lift(self, src, "diagonal_scatter")
        expected = _diagonal(self, params).shape
        if src.shape != expected:
            raise ShapeError(
                f"diagonal_scatter: expected src of shape {shape_text(expected)} (the diagonal), "
                f"got {shape_text(src.shape)}"
            )
        return _diagonal_assign(self, params, src)

    def diag(self, diagonal: int = 0) -> Any:
        """torch's ``diag``: a 1-d tensor becomes the diagonal of a square matrix (zeros
        elsewhere); a matrix gives its ``diagonal``-th diagonal (a copy)."""
        # (a float or a bool is torch's TypeError: 2.5 was truncated to 2, True read as 1)
        diagonal = int_parameter("diag", diagonal, "diagonal")
        if self.ndim == 1:
            n = self.shape[0] + abs(diagonal)
            zeros = wrap(self, self._backend.zeros((n, n), self.dtype, self._device))
            return _diagonal_assign(zeros, (0, 1, int(diagonal)), self)
        if self.ndim != 2:
            raise ShapeError(f"diag: expects a 1-d or 2-d tensor, got {shape_text(self.shape)}")
        return _diagonal(self, (0, 1, int(diagonal)))

    def fill_diagonal_(self, fill_value: Any, wrap: bool = False) -> Any:
        """Fill the elements ``(i, i, ..., i)`` of a matrix, or of a tensor whose dims are all
        equal, in place, as torch's; with ``wrap=True`` a tall matrix's diagonal starts again
        after each ``width + 1`` rows (every ``width + 1``-th element, row-major)."""
        op = "fill_diagonal_"
        if isinstance(fill_value, TensorBase):
            if fill_value.ndim:  # torch's parser takes a number, a 0-d tensor as one
                raise DTypeError(
                    f"{op}: fill_value must be a number, got a tensor of shape "
                    f"{shape_text(fill_value.shape)}"
                )
            fill_value = fill_value.item()  # (then checked against the dtype, as a number)
        if not isinstance(fill_value, numbers.Number | np.bool_):
            raise DTypeError(f"{op}: fill_value must be a number, got {type(fill_value).__name__}")
        if not isinstance(wrap, bool | np.bool_):  # (torch's parser: a TypeError)
            raise DTypeError(f"{op}: wrap must be a bool, got {type(wrap).__name__}")
        if self.ndim < 2:
            raise ShapeError(f"{op}: expected at least 2 dimensions, got {shape_text(self.shape)}")
        if self.ndim > 2 and len(set(self.shape)) > 1:
            raise ShapeError(
                f"{op}: all dimensions of a tensor of more than 2 must be of equal length, got "
                f"{shape_text(self.shape)}"
            )
        number = written_scalar(op, fill_value, self.dtype)
        # (i, ..., i) to (i + 1, ..., i + 1) is one step of this many elements, row-major
        step = sum(math.prod(self.shape[d + 1 :]) for d in range(self.ndim))
        count = min(self.shape)
        if wrap and self.ndim == 2 and self.shape[0] > self.shape[1] + 1:
            count = -(-self.numel() // step)

        def fill(t: Any) -> Any:
            if count == 0:
                return t
            value = type(t)._result(t._backend.full((count,), number, t.dtype, t._device),
                                    t._backend, t._device)  # fmt: skip
            positions = slice(0, (count - 1) * step + 1, step)
            return t.reshape((-1,)).slice_assign([positions], value).reshape(t.shape)

        return self._update(op, fill)

    def tril(self, diagonal: int = 0) -> Any:
        """The lower triangle of the last two dimensions: elements above the ``diagonal``-th
        diagonal become zero (``torch.tril``; 0 is the main diagonal, positive counts up)."""
        return _triangle("tril", self, diagonal)

    def triu(self, diagonal: int = 0) -> Any:
        """The upper triangle of the last two dimensions (``torch.triu``)."""
        return _triangle("triu", self, diagonal)

    def nonzero(self, *, as_tuple: bool = False) -> Any:
        """int64 indices of the non-zero (true) elements, as torch's: ``[count, ndim]`` (as
        :meth:`argwhere`), or with ``as_tuple=True`` one 1-d tensor per dimension (Burn's
        ``nonzero``, in a tuple)."""
        check_bool("nonzero", as_tuple, "as_tuple")
        if not as_tuple:
            return self.argwhere()
        if not self.ndim:  # torch: a 0-d tensor as one dimension of size 1
            return (wrap(self, self._backend.zeros((int(bool(self)),), "int64", self._device)),)
        return tuple(self._apply("nonzero", (self,)))

    def argwhere(self) -> Any:
        """int64 indices ``[count, ndim]`` of the non-zero (true) elements."""
        if self.ndim:
            return stack(list(self.nonzero(as_tuple=True)), 1)
        # A 0-d tensor: one row when it is true. Its count is data, read as nonzero would.
        return wrap(self, self._backend.zeros((int(bool(self)), 0), "int64", self._device))


def tril(t: Any, diagonal: int = 0) -> Any:
    """``t.tril(diagonal)`` (``torch.tril``)."""
    return t.tril(diagonal)


def triu(t: Any, diagonal: int = 0) -> Any:
    """``t.triu(diagonal)`` (``torch.triu``)."""
    return t.triu(diagonal)


# -- helpers -------------------------------------------------------------------------------------
def _triangle(op: str, t: Any, diagonal: int) -> Any:
    """Zero what lies outside the triangle: a ``mask_fill`` (differentiable, the gradient is
    zero there too) with a mask built on the tensor's backend from two ``arange``s, so no host
    array is made or copied to a device."""
    if t.ndim < 2:
        raise ShapeError(f"{op}: needs at least 2 dimensions, got shape {shape_text(t.shape)}")
    diagonal = int_parameter(op, diagonal, "diagonal")
    rows, cols = t.shape[-2:]
    backend, device = t._backend, t._device
    row = wrap(t, backend.arange(0, rows, 1, "int64", device)).reshape((rows, 1))
    col = wrap(t, backend.arange(0, cols, 1, "int64", device)).reshape((1, cols))
    offset = col - row  # j - i: which diagonal each element is on
    outside = offset > diagonal if op == "tril" else offset < diagonal
    out = t.mask_fill(outside, False if t.dtype == "bool" else 0)
    out._layout = None  # torch's result is row-major whatever the input's strides
    return out


def check_indices(
    indices: Any, size: int, message: Callable[[int | None], str], ignore: int | None = None
) -> None:
    """Raise ``IndexOutOfRangeError(message(bad))`` if an entry of the int64 tensor ``indices``
    lies outside ``[0, size)`` (entries equal to ``ignore`` allowed): the backend checks, on its
    device, without a host copy (``bad`` may be ``None`` where it reports no value)."""
    indices._backend.check_index_range(indices._prim, size, message, ignore)


def check_values(ok: Any, error: Callable[[], Exception]) -> None:
    """Raise ``error()`` unless every element of the bool tensor ``ok`` is true: a check of
    values (a probability in [0, 1], a non-negative std) that the backend makes as it checks
    index ranges, on its device, without a host copy (the flags as 0/1 indices into a size
    of 1; a deferred check raises at the next synchronisation)."""
    flags = ok.logical_not().cast("int64")
    flags._backend.check_index_range(flags._prim, 1, lambda bad: error(), None)


def _ranges(op: str, shape: tuple[int, ...], ranges: Sequence[Any]) -> tuple[slice, ...]:
    """Normalize one ``(start, end)`` pair, ``slice``, ``range`` or int (Burn's ``s![i]``:
    ``i..i+1``) per leading dimension.

    As in Burn, ``start`` and ``end`` bound the range ``[start, end)`` whatever the step, and
    a negative step walks that range backwards from its last element: ``slice(0, 4, -2)``
    takes elements 3 and 1. A range past the dimension's end is an out-of-range index; more
    ranges than dimensions a shape error; a range ending before it starts is empty (Burn's
    ``s![2..1]``).
    """
    single_pair = (
        isinstance(ranges, tuple)
        and len(ranges) == 2
        and all(isinstance(v, numbers.Integral | type(None)) for v in ranges)
    )
    if isinstance(ranges, slice | range) or single_pair:
        ranges = [ranges]
    ranges = list(ranges)
    if len(ranges) > len(shape):
        raise ShapeError(
            f"{op}: {len(ranges)} ranges for a tensor with {len(shape)} dimensions "
            f"({shape_text(shape)})"
        )
    slices = []
    for dim, (item, size) in enumerate(zip(ranges, shape)):
        if isinstance(item, range):  # Burn's ``a..b``, as slice_dim takes it
            item = slice(item.start, item.stop, item.step)
        if isinstance(item, slice):
            start, end, step = item.start, item.stop, item.step
        elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
            # Burn's ``s![i]``: the one element at i, its dimension kept
            start = int(item) + size if item < 0 else int(item)
            if not 0 <= start < size:
                raise IndexOutOfRangeError(
                    f"{op}: index {item} is out of bounds for dimension {dim} of size {size} "
                    f"(shape {shape_text(shape)})"
                )
            start, end, step = start, start + 1, None
        else:
            try:
                start, end = item
            except (TypeError, ValueError):
                raise ShapeError(
                    f"{op}: range {item!r} for dimension {dim} is neither (start, end) nor a slice"
                ) from None
            step = None
        step = 1 if step is None else int(step)
        if step == 0:
            raise ShapeError(f"{op}: step for dimension {dim} must not be zero")
        start = 0 if start is None else int(start)
        end = size if end is None else int(end)
        if start < 0:
            start += size
        if end < 0:
            end += size
        if not (0 <= start <= size and 0 <= end <= size):
            raise IndexOutOfRangeError(
                f"{op}: range {start}..{end} is out of bounds for dimension {dim} of size {size} "
                f"(shape {shape_text(shape)})"
            )
        end = max(start, end)
        if step > 0 or start == end:
            slices.append(slice(start, end, step))
        else:
            slices.append(slice(end - 1, start - 1 if start else None, step))
    return tuple(slices)


def _broadcast_values(op: str, values: Any, region: tuple[int, ...]) -> Any:
    try:
        if np.broadcast_shapes(values.shape, region) != region:
            raise ValueError
    except ValueError:
        raise ShapeError(
            f"{op}: values of shape {shape_text(values.shape)} do not fit the region of shape "
            f"{shape_text(region)}"
        ) from None
    return values.expand(region)


#: the ops whose torch kernels take int64 indices alone (the others take int32 too)
_INT64_INDICES_ONLY = frozenset({"index_fill", "index_copy", "put", "take"})


def _index_tensor(
    op: str, x: Any, indices: Any, dim: int, one_dim: bool = False, checked: bool = True
) -> Any:
    """``indices`` as an int64 tensor on ``x``'s backend, its shape and values (unless not
    ``checked``) checked for indexing dimension ``dim`` of ``x``."""
    if isinstance(indices, TensorBase):
        indices = lift(x, indices, op)
    else:  # user's host data: a list or an array
        host = np.asarray(indices)
        if host.size == 0:  # (an empty list: no dtype of its own, float64 to NumPy)
            host = host.astype(np.int64)
        indices = from_host(type(x)._result, host, None, x._backend, x._device)
    if indices.dtype == "int32" and op not in _INT64_INDICES_ONLY:
        indices = indices.cast("int64")  # (torch's kernels take int32 indices as int64)
    if indices.dtype != "int64":
        taken = "int64" if op in _INT64_INDICES_ONLY else "int64 or int32"
        # (torch's index_fill_ raises an IndexError for it, its other kernels a RuntimeError)
        error = IndexDTypeError if op == "index_fill" else DTypeError
        raise error(f"{op}: indices must be {taken} (as torch's), got {indices.dtype}")
    if one_dim and indices.ndim != 1:
        raise ShapeError(f"{op}: indices must be 1-d, got shape {shape_text(indices.shape)}")
    if not one_dim and indices.ndim != x.ndim:
        raise ShapeError(
            f"{op}: indices of shape {shape_text(indices.shape)} must have as many dimensions "
            f"as the input of shape {shape_text(x.shape)}"
        )
    shape = x.shape
    size = shape[dim]

    def message(bad: int | None) -> str:
        which = "an index" if bad is None else f"index {bad}"
        return (
            f"{op}: {which} is out of range for dimension {dim} of size {size} "
            f"(input shape {shape_text(shape)})"
        )

    if checked:
        check_indices(indices, size, message)
    return indices


def _from_end(op: str, x: Any, index: Any, dim: int) -> Any:
    """1-d indices into dimension ``dim`` of ``x`` where a negative one counts from the end,
    as torch's ``index_fill`` (alone among the index ops) reads them: checked against
    ``[-size, size)`` and wrapped."""
    from .advanced import check_from_end

    raw = _index_tensor(op, x, index, dim, one_dim=True, checked=False)
    size = x.shape[dim]
    shifted = check_from_end(
        raw,
        size,
        lambda which: (
            f"{op}: {which} is out of range for dimension {dim} of size {size} "
            f"(input shape {shape_text(x.shape)}; negative indices count from the end)"
        ),
    )
    return shifted % size if size else shifted


def leading_part(op: str, src: Any, shape: tuple[int, ...], *, whole_node: Any = None) -> Any:
    """The leading ``shape`` part of a scatter's ``src``, larger than its index (torch reads
    only that part). torch's backward then gives ``src`` a gradient of the index's shape and
    refuses it ("returned an invalid gradient"): a ``src`` in the graph takes a gradient hook
    that raises that error when a backward reaches it, so the program fails where torch's
    does. (:func:`refuse_backward` on the result, for the reductions whose backward to
    ``self`` reads ``src`` too.)"""
    part = src[tuple(slice(0, n) for n in shape)]
    refuse_backward(part, larger_src_message(op, tuple(src.shape), shape))
    return part


def larger_src_message(op: str, src_shape: tuple[int, ...], shape: tuple[int, ...]) -> str:
    return (
        f"{op}: a src of shape {shape_text(src_shape)}, larger than the index's "
        f"{shape_text(shape)}, is not differentiated (torch's backward fails there: \"returned "
        "an invalid gradient\" or a size mismatch); pass src's part that is read, "
        "src[:index sizes], instead"
    )


def _entry_count(indices: Any) -> int:
    return indices.numel() if isinstance(indices, TensorBase) else np.asarray(indices).size


def _no_indices(x: Any) -> Any:
    """An int64 index of no entries with ``x``'s number of dimensions: what gather/scatter
    read an empty index of any shape as (torch checks neither its shape nor its dtype)."""
    empty = np.zeros((0,) * x.ndim, np.int64)
    return from_host(type(x)._result, empty, None, x._backend, x._device)


def _check_index_extent(op: str, indices: Any, shape: tuple[int, ...], dim: int) -> None:
    """Index tensors of gather/scatter may not be larger than the input outside ``dim``."""
    for axis, (n, m) in enumerate(zip(indices.shape, shape)):
        if axis != dim and n > m:
            raise ShapeError(
                f"{op}: indices of shape {shape_text(indices.shape)} exceed the input of "
                f"shape {shape_text(shape)} in dimension {axis}"
            )


def _mask_tensor(op: str, x: Any, mask: Any) -> Any:
    mask = lift(x, mask, op)
    if mask.dtype != "bool":
        raise DTypeError(f"{op}: mask must be a bool tensor, got {mask.dtype}")
    try:
        np.broadcast_shapes(mask.shape, x.shape)
    except ValueError:
        raise ShapeError(
            f"{op}: mask of shape {shape_text(mask.shape)} does not broadcast with the tensor "
            f"of shape {shape_text(x.shape)}"
        ) from None
    return mask


def _update_op(op: str, update: str, prefix: str) -> str:
    if update not in ("add", "assign"):
        raise InvalidArgumentError(f"{op}: update must be 'add' or 'assign', got {update!r}")
    # interned: the backend's kernel is looked up by this name, and CPython's attribute cache
    # keeps the name it missed with, so a fresh string per call piled up there, call by call
    return sys.intern(f"{prefix}_{update}")


def _host_indices(indices: Any, size: int, dim: int) -> np.ndarray:
    """A list or array index as int64, its negative entries counted from the end as Python
    and torch count them (``x[:, [-1], :]``); entries outside ``[-size, size)`` are an
    :class:`~retrograd.IndexOutOfRangeError`. Host data already, so checked here."""
    array = np.asarray(indices)
    if array.dtype == np.bool_ or not (array.size == 0 or np.issubdtype(array.dtype, np.integer)):
        raise IndexOutOfRangeError(
            f"indexing: a list index must hold ints, got {array.dtype} entries "
            "(use mask_where/mask_fill for masks)"
        )
    array = array.astype(np.int64, copy=False)
    bad = array[(array < -size) | (array >= size)]
    if bad.size:
        raise IndexOutOfRangeError(
            f"indexing: index {int(bad[0])} is out of range for dimension {dim} of size {size}"
        )
    return np.where(array < 0, array + size, array)


def _diagonal_params(op: str, ndim: int, offset: int, dim1: int, dim2: int) -> tuple[int, int, int]:
    """``diagonal``'s view parameters: the two dims (normalized, distinct) and the offset."""
    a = normalize_dim(op, dim1, ndim)
    b = normalize_dim(op, dim2, ndim)
    if a == b:
        raise SizeMismatchError(f"{op}: dimensions {dim1} and {dim2} are the same")
    return (a, b, int_parameter(op, offset, "offset"))


def _name_index_node(t: Any, index: Any, result: Any) -> None:
    """Name the node of ``t[index]`` as torch's: its last step's (an int ``SelectBackward0``, a
    slice ``SliceBackward0``, a ``None`` ``UnsqueezeBackward0``) or, with a tensor, a list or
    a bool among the indices, ``IndexBackward0``."""
    node = getattr(getattr(result, "_prim", None), "node", None)
    source = getattr(t._prim, "node", None)
    if node is None or node.op is None or node is source:
        return
    steps = []  # torch's node of each step (a whole slice or an ellipsis makes none)
    for item in index if type(index) is tuple else (index,):
        if item is None:
            steps.append("UnsqueezeBackward0")
        elif type(item) is int:
            steps.append("SelectBackward0")
        elif type(item) is slice:
            if item != slice(None):
                steps.append("SliceBackward0")
        elif item is not Ellipsis:
            if isinstance(item, numbers.Integral) and not isinstance(item, bool):
                steps.append("SelectBackward0")
            else:
                node.torch_name = "IndexBackward0"
                if not steps:  # (after basic steps, torch's chain is left unwalked)
                    node.torch_inputs = (source,)
                return
    if not steps:  # only whole slices and ellipses: torch's slice of all, or an alias
        steps = ["AliasBackward0" if index is Ellipsis else "SliceBackward0"]
    node.torch_name = steps[-1]
    for name in steps[:-1]:  # torch's steps before the last: nodes of torch's graph alone
        source = TorchOnlyNode(name, (source,))
    node.torch_inputs = (source,)


def _basic_index(t: Any, index: Any) -> Any:
    """``t[index]``: ints, slices, ``...`` and ``None`` give a view of ``t`` (see
    :mod:`.views`); index tensors, lists and bool masks are torch's advanced indexing
    (:mod:`.advanced`), which copies."""
    if not isinstance(index, tuple | int):  # (a tuple or an int: the common cases, as they are)
        from .advanced import index_items

        index = index_items(index)
    if not isinstance(index, tuple):
        index = (index,)
    # a ``range``, or a tuple inside the index, is a sequence of indices, as torch reads it
    arrays = TensorBase | list | np.ndarray | range | tuple
    if any(isinstance(i, np.ndarray) and not i.ndim for i in index):
        from .advanced import int_scalars  # (host data: a 0-d integer array is its int)

        index = tuple(int_scalars((i,))[0] if isinstance(i, np.ndarray) else i for i in index)
    if not capturing.get() and any(
        isinstance(i, TensorBase) or getattr(i, "dtype", None) == np.uint8 for i in index
    ):
        # (a captured step keeps such a tensor an index tensor: its value is not read on the
        # host, which a replay could not follow; the result's values are the same)
        from .advanced import int_scalars

        index = int_scalars(index)
    if any(isinstance(i, arrays | bool | np.bool_) for i in index):
        from .advanced import get_index, split_bool_scalars

        bools = split_bool_scalars(index)
        if bools is not None:
            return get_index(t[bools[0]], bools[1])
        return get_index(t, index)
    slices, items, out_shape = basic_slices(t.shape, index)
    out = t
    region = t.shape
    if any(s != slice(0, n, 1) for s, n in zip(slices, t.shape)):
        out = t._apply("slice", (t,), (slices,))
        region = out.shape
    else:
        slices = None
    if out.shape != out_shape or out is t:
        # (``t[...]`` and ``t[:]`` too: torch's view of the whole, a new tensor, not ``t``)
        out = out._apply("reshape", (out,), (out_shape,))
    return link(out, t, "index", (slices, out_shape, region, items))


def basic_slices(
    shape: tuple[int, ...], index: tuple[Any, ...]
) -> tuple[tuple[slice, ...], tuple[tuple, ...], tuple[int, ...]]:
    """The slices (one per dimension), the items (``("int",)``, ``("slice", step)``,
    ``("new",)`` per index item, for strides) and the output shape of basic indexing."""
    ellipses = sum(1 for i in index if i is Ellipsis)
    if ellipses > 1:
        raise IndexOutOfRangeError("indexing: an index can only have a single ellipsis ('...')")
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    if consumed > len(shape):
        raise IndexOutOfRangeError(
            f"indexing: too many indices ({consumed}) for a tensor of shape {shape_text(shape)}"
        )
    if ellipses:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - consumed) + index[at + 1 :]
    else:
        index = index + (slice(None),) * (len(shape) - consumed)
    slices, items, out_shape, dim = [], [], [], 0
    for item in index:
        if item is None:
            out_shape.append(1)
            items.append(("new",))
            continue
        size = shape[dim]
        if isinstance(item, numbers.Integral) and not isinstance(item, bool):
            i = int(item)
            if not -size <= i < size:
                raise IndexOutOfRangeError(
                    f"indexing: index {i} is out of range for dimension {dim} of size {size}"
                )
            i %= size
            slices.append(slice(i, i + 1, 1))
            items.append(("int",))
        elif isinstance(item, slice):
            if isinstance(item.step, int) and item.step < 0:
                raise InvalidArgumentError(
                    f"indexing: slice {item!r}: step must be greater than zero (as in torch); "
                    "use flip() to reverse"
                )
            try:
                start, stop, step = item.indices(size)
            except (TypeError, ValueError) as error:  # a step of 0, a bound that is no int
                raise IndexOutOfRangeError(f"indexing: slice {item!r}: {error}") from None
            count = len(range(start, stop, step))
            if step < 0 and stop < 0:  # Python's "before the first element"
                stop = None
            slices.append(slice(start, stop, step))
            out_shape.append(count)
            items.append(("slice", step))
        else:
            raise IndexOutOfRangeError(f"indexing: unsupported index {item!r}")
        dim += 1
    return tuple(slices), tuple(items), tuple(out_shape)


def _wrapped_flat(op: str, x: Any, index: Any) -> Any:
    """The int64 flat ``index`` into ``x`` with negative entries counted from the end (torch's
    ``take`` and ``put_`` wrap them), each checked against ``x``'s element count."""
    size = x.numel()

    def message(bad: int | None) -> str:  # the index as given, before the wrap below
        which = "an index" if bad is None else f"index {bad - size}"
        return (
            f"{op}: {which} is out of range for a tensor of {size} elements "
            f"(shape {shape_text(x.shape)})"
        )

    check_indices(index + size, 2 * size, message)
    return index.mask_where(index.lower_elem(0), index + size)


def _one_dim(index: Any) -> Any:
    """A 0-d index as a one-entry 1-d index (torch's index ops take both)."""
    if isinstance(index, TensorBase) and index.ndim == 0:
        return index.reshape((1,))
    return index


def _as_strided_sizes(name: str, values: Any) -> tuple[int, ...]:
    """``as_strided``'s ``size`` or ``stride``: a sequence of ints (0-d int tensors too)."""
    if isinstance(values, TensorBase) or not isinstance(values, Sequence):
        raise DTypeError(f"as_strided: {name} must be a sequence of ints, got {values!r}")
    out = tuple(int_argument("as_strided", v, name) for v in values)
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in out):
        raise DTypeError(f"as_strided: {name} must be a sequence of ints, got {list(values)!r}")
    return tuple(int(v) for v in out)
