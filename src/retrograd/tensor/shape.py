"""Shape operations: reshaping, transposing, broadcasting, tiling, splitting and joining
(:func:`cat`, :func:`stack`).

:class:`ShapeMixin` needs one primitive from the class it is mixed into:
``_apply(op, inputs, params=())`` (:func:`retrograd.tensor._dispatch.apply`), and reads
``shape`` and ``ndim``. Every target shape is computed and checked here from shape tuples
alone, so the backend receives normalized dims and complete shapes.
"""

from __future__ import annotations

import itertools
import math
import numbers
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..backend.sizes import ITEMSIZE, check_allocation, machine_memory_bytes
from ..errors import (
    ArgumentTypeError,
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    OutOfMemoryError,
    ShapeError,
    SizeMismatchError,
    reported,
    shape_text,
)
from ._dispatch import (
    TensorBase,
    check_int_list,
    int_argument,
    int_arguments,
    int_dims,
    int_parameter,
    lift,
    normalize_dim,
    result_dtype,
    scalar_dims,
    sticky_class,
    stood_for,
)
from .dtypes import canonical_dtype
from .layouts import (
    channels_last,
    channels_last_3d,
    check_format_query,
    check_memory_format,
    contiguous_format,
    format_contiguous,
    format_strides,
    suggested_format,
)
from .pairs import ValuesAndIndices
from .storage import number_outputs
from .strides import storage_offset_of
from .views import (
    contiguous_strides,
    is_contiguous,
    link,
    strides_of,
    view_error,
    view_strides,
)

__all__ = [
    "ShapeMixin",
    "cat",
    "flatten",
    "follow_channels_last",
    "laid_out_in",
    "lay_out",
    "stack",
]


class ShapeMixin:
    """Shape methods; needs ``_apply`` (see the module docstring)."""

    __slots__ = ()
    _apply: Callable[..., Any]  # the one primitive: retrograd.tensor._dispatch.apply
    shape: tuple[int, ...]
    ndim: int

    def reshape(self, *args: Any, shape: Any = None) -> Any:
        """The same elements in ``shape``, given as one sequence, as separate ints
        (``t.reshape(2, -1)``) or by keyword (``t.reshape(shape=(2, -1))``), as torch; one entry
        may be -1. A view of this tensor where torch's would be one (see :mod:`.views`), else
        a copy."""
        shape = by_keyword("reshape", args, "shape", shape)
        target = keep_zero_dims(self.shape, varargs_shape("reshape", shape))
        target = infer_shape("reshape", self.shape, target)
        return _reshaped("reshape", self, target, strict=False)

    def view(self, *shape: Any, size: Any = None, dtype: Any = None) -> Any:
        """:meth:`reshape` as a view; where torch's strides allow none (after a transpose),
        the error torch gives. ``view(dtype)`` reads the bytes as another dtype, as torch's
        (``float32`` as ``int32``, ``uint8`` as ``int8`` or ``bool``; between itemsizes, the
        last dimension scaled under torch's conditions): a view, with no gradient, as torch's
        (an in-place write into either is seen in the other)."""
        if dtype is not None and not shape and size is None:
            return _bitcast(self, canonical_dtype("view", dtype))
        shape = by_keyword("view", shape, "size", size)
        if len(shape) == 1 and _names_dtype(shape[0]):
            return _bitcast(self, canonical_dtype("view", shape[0]))
        target = infer_shape("view", self.shape, varargs_shape("view", shape))
        return _reshaped("view", self, target, strict=True)

    def view_as(self, other: Any) -> Any:
        return self.view(other.shape)

    def reshape_as(self, other: Any) -> Any:
        """``other``'s shape exactly: a 0 in it is an empty dimension (torch's), never
        Burn's "keep this size" of :meth:`reshape` (``reshape_as`` of an empty tensor gave
        the input's own shape back)."""
        target = infer_shape("reshape_as", self.shape, tuple(other.shape))
        return _reshaped("reshape_as", self, target, strict=False)

    def ravel(self) -> Any:
        return self.reshape(-1)

    def contiguous(self, memory_format: Any = None) -> Any:
        """``self`` when its layout is contiguous as torch's would be; otherwise a copy, which
        aliases nothing (an in-place op on it leaves this tensor alone, as in torch).
        ``memory_format=rg.channels_last`` (``_3d``): ``self`` where it is contiguous in that
        format already, else a copy with torch's channels-last strides (the values are the
        same: :mod:`.layouts`)."""
        check_memory_format("contiguous", memory_format, self.ndim)
        if memory_format is channels_last or memory_format is channels_last_3d:
            if format_contiguous(memory_format, tuple(self.shape), strides_of(self)):
                return self
            return laid_out_in(self, memory_format)
        if _row_major(self) or is_contiguous(self.shape, strides_of(self)):
            return self
        # an expanded tensor may hold far fewer values than its shape says (a broadcast):
        # torch copies it out here, so a shape no machine holds is refused before the copy
        check_allocation("contiguous", self.shape, self.dtype)
        return type(self)._result(self._prim, self._backend, self._device)

    def is_contiguous(self, memory_format: Any = None) -> bool:
        """torch's answer: row-major contiguity, or (``memory_format=rg.channels_last`` /
        ``channels_last_3d``) contiguity in that format, False for a tensor of another rank."""
        check_format_query("is_contiguous", memory_format)
        if memory_format is channels_last or memory_format is channels_last_3d:
            return format_contiguous(memory_format, tuple(self.shape), strides_of(self))
        return _row_major(self) or is_contiguous(self.shape, strides_of(self))

    def stride(self, dim: int | None = None) -> Any:
        """The strides torch would give this tensor (elements, not bytes)."""
        strides = strides_of(self)
        return strides if dim is None else strides[normalize_dim("stride", dim, self.ndim)]

    def transpose(self, dim0: int | None = None, dim1: int | None = None) -> Any:
        """Swap ``dim0`` and ``dim1`` (torch's ``transpose(d0, d1)``); without arguments, the
        last two dimensions (Burn's ``transpose()``; a tensor with fewer than 2 is returned
        unchanged)."""
        if dim0 is not None or dim1 is not None:
            if dim0 is None or dim1 is None:
                raise ShapeError(
                    f"transpose: give both dimensions or neither, got {dim0!r} and {dim1!r}"
                )
            return self.swap_dims(dim0, dim1)
        ndim = self.ndim
        if ndim < 2:
            return self
        return self.swap_dims(ndim - 2, ndim - 1)

    @property
    def T(self) -> Any:  # noqa: N802
        """The dimensions reversed (torch's ``T``; for a matrix its transpose)."""
        ndim = self.ndim
        # a new view even where nothing moves, as torch's: ``x.T.unsqueeze_(0)`` leaves x alone
        return self.permute(tuple(range(ndim - 1, -1, -1)))

    @property
    def mT(self) -> Any:  # noqa: N802 (torch's name)
        """The last two dimensions swapped (a batch of matrices transposed); a 0-d tensor
        itself, as torch's (deprecated there)."""
        if self.ndim == 0:
            return self
        if self.ndim < 2:
            raise ShapeError(f"mT: needs at least 2 dimensions, got {shape_text(self.shape)}")
        return self.swap_dims(-2, -1)

    @property
    def mH(self) -> Any:  # noqa: N802 (torch's name)
        """The conjugate of :attr:`mT` (of a real tensor: ``mT``)."""
        return self.mT.conj()

    @property
    def H(self) -> Any:  # noqa: N802 (torch's name)
        """A matrix's conjugate transpose (real: the transpose); a 0-d tensor itself, as
        torch's, which refuses other ranks."""
        if self.ndim == 0:
            return self
        if self.ndim != 2:
            raise ShapeError(f"H: expects a matrix or a 0-d tensor, got {shape_text(self.shape)}")
        return self.swap_dims(0, 1).conj()

    def t(self) -> Any:
        """torch's ``t()``: a matrix transposed; a 0-d or 1-d tensor as it is."""
        if self.ndim > 2:
            raise ShapeError(
                f"t: expects a tensor with <= 2 dimensions, got {shape_text(self.shape)}; "
                "use transpose(d0, d1)"
            )
        return self.permute(tuple(range(self.ndim))) if self.ndim < 2 else self.swap_dims(0, 1)

    def swap_dims(self, dim1: int, dim2: int) -> Any:
        ndim = self.ndim
        a = normalize_dim("swap_dims", dim1, ndim, scalar=True)
        b = normalize_dim("swap_dims", dim2, ndim, scalar=True)
        if a == b:  # a new view, as torch's, not this tensor: its in-place shape ops are its own
            return self.permute(tuple(range(ndim)))
        out = self._apply("swap_dims", (self,), (a, b))
        order = list(range(ndim))
        order[a], order[b] = b, a
        return link(out, self, "permute", (tuple(order),))

    def swapdims(self, dim0: int, dim1: int) -> Any:
        """torch's ``swapdims(dim0, dim1)`` (its keyword names)."""
        return self.swap_dims(dim0, dim1)

    def swapaxes(self, axis0: int, axis1: int) -> Any:
        """torch's ``swapaxes(axis0, axis1)`` (its keyword names)."""
        return self.swap_dims(axis0, axis1)

    def permute(self, *args: Any, dims: Any = None) -> Any:
        """Reorder the dimensions: ``permute(2, 0, 1)``, ``permute((2, 0, 1))`` or
        ``permute(dims=(2, 0, 1))``."""
        dims = by_keyword("permute", args, "dims", dims)
        if len(dims) == 1 and not isinstance(dims[0], numbers.Integral):
            check_int_list("permute", dims[0], "dims")
            dims = tuple(dims[0])
        ndim = self.ndim
        normalized = tuple(normalize_dim("permute", d, ndim) for d in dims)
        if sorted(normalized) != list(range(ndim)):
            raise ShapeError(
                f"permute: {list(dims)} is not a permutation of the {ndim} dimensions of "
                f"{shape_text(self.shape)}"
            )
        return link(self._apply("permute", (self,), (normalized,)), self, "permute", (normalized,))

    def movedim(self, source: Any, destination: Any) -> Any:
        """Move dimension(s) ``source`` to ``destination`` (the others keep their order)."""
        ndim = self.ndim
        sources = _dims_arg(source)
        targets = _dims_arg(destination)
        if len(sources) != len(targets):
            raise ShapeError(f"movedim: {list(sources)} and {list(targets)} differ in length")
        sources = tuple(normalize_dim("movedim", d, ndim, scalar=True) for d in sources)
        targets = tuple(normalize_dim("movedim", d, ndim, scalar=True) for d in targets)
        if not ndim:  # 0 or -1 of a 0-d tensor, as torch takes them: nothing moves
            return self.permute(())
        order = [-1] * ndim
        for s, t in zip(sources, targets):
            order[t] = s
        rest = iter(d for d in range(ndim) if d not in sources)
        order = [d if d != -1 else next(rest) for d in order]
        return self.permute(order)

    moveaxis = movedim

    def flip(self, *args: Any, dims: Any = None) -> Any:
        """Reverse the order along ``dims`` (``flip(0, 1)``, ``flip((0, 1))`` or
        ``flip(dims=(0, 1))``)."""
        dims = by_keyword("flip", args, "dims", dims)
        if len(dims) == 1:
            dims = dims[0]
        return self._flip(dims)

    def fliplr(self) -> Any:
        return self.flip(1)

    def flipud(self) -> Any:
        if self.ndim < 1:  # flip(0) takes a 0-d tensor's dim 0; torch's flipud does not
            raise ShapeError("flipud: input must be >= 1-d, got a 0-d tensor")
        return self.flip(0)

    def _flip(self, dims: Any) -> Any:
        ndim = self.ndim
        normalized = tuple(normalize_dim("flip", d, ndim, scalar=True) for d in _dims_arg(dims))
        if len(set(normalized)) != len(normalized):
            raise ShapeError(f"flip: dimensions {list(dims)} repeat")
        if not ndim:  # 0 or -1 of a 0-d tensor, as torch takes them: nothing to reverse
            normalized = ()
        # torch's flip always copies, even over no dimension: a later in-place write into the
        # result must leave this tensor alone
        return self._apply("flip", (self,), (normalized,)) if normalized else self.clone()

    def expand(self, *sizes: Any, size: Any = None) -> Any:
        """Broadcast to ``sizes`` (-1 keeps a dimension; torch's keyword is ``size``), without
        copying: a view (writing into it is refused, as torch refuses it). No sizes at all
        is torch's TypeError, a 0-d tensor's too (``expand(())`` is the empty shape)."""
        if not sizes and size is None:
            raise ArgumentTypeError('expand() missing 1 required positional arguments: "size"')
        sizes = by_keyword("expand", sizes, "size", size)
        shape = varargs_shape("expand", sizes)
        own = self.shape
        if len(shape) < len(own):
            raise ShapeError(
                f"expand: cannot expand shape {shape_text(own)} to fewer dimensions "
                f"{shape_text(shape)}"
            )
        lead = len(shape) - len(own)
        target = tuple(own[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(shape))
        for i, n in enumerate(own):
            if n != 1 and n != target[lead + i]:
                raise ShapeError(
                    f"expand: dimension {i} of size {n} cannot expand to {target[lead + i]} "
                    f"({shape_text(own)} -> {shape_text(shape)})"
                )
        if any(n < 0 for n in target):
            raise ShapeError(f"expand: invalid target shape {shape_text(shape)}")
        if math.prod(n for n in target if n) > _INT64_MAX:  # (NumPy's "iterator is too large")
            raise ShapeError(
                f"expand: the shape {shape_text(target)} has more elements than an int64 counts "
                f"(torch: numel: integer multiplication overflow); input {shape_text(own)}"
            )
        if target == own:  # a new view, as torch's (an in-place shape op on it is its own)
            return self.permute(tuple(range(len(own))))
        return link(self._apply("expand", (self,), (target,)), self, "expand", (target,))

    def broadcast_to(self, shape: Sequence[int]) -> Any:
        return self.expand(shape)

    def expand_as(self, other: Any) -> Any:
        return self.expand(other.shape)

    def repeat_dim(self, dim: int, times: int) -> Any:
        """Tile the tensor ``times`` times along ``dim``."""
        d = normalize_dim("repeat_dim", dim, self.ndim)
        if not isinstance(times, numbers.Integral) or times < 0:
            raise ShapeError(f"repeat_dim: times must be a non-negative int, got {times!r}")
        return self if times == 1 else self._apply("repeat_dim", (self,), (d, int(times)))

    def repeat(self, *sizes: Any, repeats: Any = None) -> Any:
        """Tile the tensor ``sizes[d]`` times along each dimension ``d`` (PyTorch's ``repeat``,
        Burn's ``repeat``; ``repeat(2, 3)`` or ``repeat((2, 3))``); extra leading sizes add
        dimensions; torch's keyword is ``repeats``."""
        sizes = varargs_shape("repeat", by_keyword("repeat", sizes, "repeats", repeats))
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: {len(sizes)} sizes for a tensor with {self.ndim} dimensions")
        shape = (1,) * (len(sizes) - self.ndim) + self.shape
        result = tuple(n * times for n, times in zip(shape, sizes))
        check_allocation("repeat", result, self.dtype, f"input {shape_text(self.shape)}")
        out = self._apply("reshape", (self,), (shape,))
        for dim, times in enumerate(sizes):
            out = out.repeat_dim(dim, times)
        return out

    def tile(self, *args: Any, dims: Any = None) -> Any:
        """torch's ``tile``: as :meth:`repeat`, fewer sizes than dimensions padded with 1s."""
        sizes = varargs_shape("tile", by_keyword("tile", args, "dims", dims))
        return self.repeat((1,) * (self.ndim - len(sizes)) + sizes)

    def repeat_interleave(
        self, repeats: Any, dim: int | None = None, *, output_size: int | None = None
    ) -> Any:
        """Each element repeated ``repeats`` times along ``dim`` (the flattened tensor when
        ``None``); ``repeats`` an int or a 1-d tensor of counts (read on the host, as torch
        reads it to size the output)."""
        x = self.reshape(-1) if dim is None else self
        d = 0 if dim is None else normalize_dim("repeat_interleave", dim, x.ndim)
        if isinstance(repeats, TensorBase):
            if repeats.dtype == "int32":  # (torch's takes int32 counts too)
                repeats = repeats.cast("int64")
            if repeats.dtype != "int64":
                raise DTypeError(
                    f"repeat_interleave: repeats must be an int64 tensor, got {repeats.dtype}"
                )
            if repeats.ndim > 1:
                raise ShapeError(
                    f"repeat_interleave: repeats must be a 0-d or 1-d tensor, got shape "
                    f"{shape_text(repeats.shape)}"
                )
            counts = repeats.tolist()
            # (one count, a 0-d or one-element tensor, broadcasts over the dimension, as torch)
            repeats = counts if isinstance(counts, list) and len(counts) != 1 else repeats.item()
        if isinstance(repeats, numbers.Integral):
            if repeats < 0:
                raise ShapeError(f"repeat_interleave: repeats must be >= 0, got {repeats}")
            shape = x.shape
            out = x.unsqueeze_dim(d + 1).expand(shape[: d + 1] + (int(repeats),) + shape[d + 1 :])
            out = out.reshape(shape[:d] + (shape[d] * int(repeats),) + shape[d + 1 :])
        else:
            counts = [int(n) for n in repeats]
            if len(counts) != x.shape[d] or any(n < 0 for n in counts):
                raise ShapeError(
                    f"repeat_interleave: repeats must have one non-negative count per element "
                    f"of dimension {d} (size {x.shape[d]}), got {len(counts)}"
                )
            index = [i for i, n in enumerate(counts) for _ in range(n)]
            out = x.index_select(d, index)
        if output_size is not None and output_size != out.shape[d]:
            raise ShapeError(
                f"repeat_interleave: output_size {output_size} does not match the repeated "
                f"size {out.shape[d]} of dimension {d}"
            )
        return out

    def roll(self, shifts: Any, dims: Any = None) -> Any:
        """Elements shifted ``shifts`` places along ``dims`` (wrapping around); without
        ``dims``, along the flattened tensor, then reshaped back."""
        if isinstance(shifts, list | tuple) and not shifts:
            raise ShapeError("roll: `shifts` required (got an empty sequence), as in torch")
        if dims is None:
            flat = self.reshape(-1)
            return flat.roll(shifts, 0).reshape(self.shape)
        shift_list, dim_list = _dims_arg(shifts), _dims_arg(dims)
        if len(shift_list) != len(dim_list):
            raise SizeMismatchError(f"roll: {len(shift_list)} shifts for {len(dim_list)} dims")
        out = self
        for shift, dim in zip(shift_list, dim_list):
            d = normalize_dim("roll", dim, self.ndim)
            size = self.shape[d]
            if size == 0:
                continue
            k = int(shift) % size
            if k:
                out = cat([out.narrow(d, size - k, k), out.narrow(d, 0, size - k)], d)
        # torch's roll always copies, a whole-turn shift too: makemore's MLP writes into
        # ``torch.roll(idx, 1, 1)`` of a one-column ``idx`` and expects ``idx`` untouched
        return out.clone() if out is self else out

    def squeeze_dim(self, dim: int) -> Any:
        """Remove dimension ``dim``, which must have size 1."""
        shape = self.shape
        d = normalize_dim("squeeze_dim", dim, len(shape))
        if shape[d] != 1:
            raise ShapeError(
                f"squeeze_dim: dimension {dim} has size {shape[d]}, expected 1 "
                f"(shape {shape_text(shape)})"
            )
        return _reshaped(
            "squeeze_dim", self, shape[:d] + shape[d + 1 :], squeezing=("squeeze", (d,))
        )

    @scalar_dims
    def squeeze(self, dim: Any = None) -> Any:
        """Remove dimensions of size 1: all of them, or ``dim`` (an int or several) where it
        has size 1 (torch's ``squeeze`` leaves a dimension of another size alone)."""
        shape = self.shape
        if dim is None:
            drop = {d for d, n in enumerate(shape) if n == 1}
        else:
            dims = int_dims("squeeze", dim)
            named = [normalize_dim("squeeze", d, len(shape)) for d in dims]
            if len(set(named)) != len(named):
                raise ShapeError(f"squeeze: dim {dim!r} names a dimension more than once")
            drop = {d for d in named if shape[d] == 1}
        kept = tuple(n for d, n in enumerate(shape) if d not in drop)
        return _reshaped("squeeze", self, kept, squeezing=("squeeze", tuple(sorted(drop))))

    def unsqueeze_dim(self, dim: int) -> Any:
        """Insert a dimension of size 1 at ``dim`` (negative counts from the output's end)."""
        shape = self.shape
        d = normalize_dim("unsqueeze_dim", dim, len(shape), extra=1)
        target = shape[:d] + (1,) + shape[d:]
        return _reshaped("unsqueeze", self, target, squeezing=("unsqueeze", (d,)))

    unsqueeze = unsqueeze_dim

    def unsqueeze_dims(self, dims: Sequence[int]) -> Any:
        """Insert a dimension of size 1 at each of ``dims``, positions in the output (Burn's
        ``unsqueeze_dims``): a negative entry counts from the output's end, the k-th negative
        one from the right landing one place further left; a repeated position inserts that
        many dimensions there."""
        shape = self.shape
        rank = len(shape) + len(dims)
        positions = []
        offset = rank
        for d in dims:
            if not isinstance(d, numbers.Integral) or not -rank <= d < rank:
                raise ShapeError(
                    f"unsqueeze_dims: dimension {d} is out of range for an output with {rank} "
                    f"dimensions (shape {shape_text(shape)}, dims {list(dims)})"
                )
            if d < 0:
                offset -= 1
                d = d + offset + 1
            positions.append(int(d))
        positions.sort()
        for i in range(1, len(positions)):
            positions[i] = max(positions[i], positions[i - 1] + 1)
        if positions and positions[-1] >= rank:
            raise ShapeError(
                f"unsqueeze_dims: dims {list(dims)} place a dimension past the output's {rank} "
                f"(shape {shape_text(shape)})"
            )
        rest = iter(shape)
        inserted = set(positions)
        target = tuple(1 if i in inserted else next(rest) for i in range(rank))
        return _reshaped("unsqueeze_dims", self, target, squeezing=("unsqueeze", tuple(positions)))

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Any:
        """Split dimension ``dim`` into ``sizes`` (one may be -1)."""
        shape = self.shape
        d = normalize_dim("unflatten", dim, len(shape))
        try:
            sizes = infer_shape("unflatten", (shape[d],), shape_arg(sizes, "unflatten"))
        except ShapeError as error:  # (it names dimension d's size only)
            raise ShapeError(f"{error} (dimension {d} of {shape_text(shape)})") from None
        return _reshaped("unflatten", self, shape[:d] + sizes + shape[d + 1 :])

    def flatten(
        self,
        start_dim: int = 0,
        end_dim: int = -1,
        *,
        start: int | None = None,
        end: int | None = None,
    ) -> Any:
        """Merge dimensions ``start_dim..=end_dim`` into one, under torch's signature
        (``start`` and ``end``, Burn's names, by keyword too)."""
        if start is not None:
            if start_dim != 0:
                raise TypeError("flatten() got multiple values for argument 'start_dim'")
            start_dim = start
        if end is not None:
            if end_dim != -1:
                raise TypeError("flatten() got multiple values for argument 'end_dim'")
            end_dim = end
        start, end = start_dim, end_dim
        shape = self.shape
        if not shape:
            for dim in (start, end):
                if dim not in (-1, 0):  # (torch's range for a 0-d tensor)
                    raise ShapeError(
                        f"flatten: dimension {dim} is out of range for a 0-d tensor (expected "
                        "-1 to 0)"
                    )
            return self.reshape((1,))
        s = normalize_dim("flatten", start, len(shape))
        e = normalize_dim("flatten", end, len(shape))
        if s > e:
            raise ShapeError(f"flatten: start {start} comes after end {end}")
        if s == e:
            return self
        merged = math.prod(shape[s : e + 1])
        return _reshaped("flatten", self, shape[:s] + (merged,) + shape[e + 1 :])

    def narrow(self, dim: int, start: int, length: int) -> Any:
        """Elements ``start .. start + length`` along ``dim`` (a range past the end is an
        out-of-range index, as for :meth:`slice`)."""
        d = normalize_dim("narrow", dim, self.ndim)
        size = self.shape[d]
        if start < 0:
            start += size
        if length < 0 or not (0 <= start <= size and start + length <= size):
            message = (
                f"narrow: start {start} and length {length} do not fit dimension {dim} "
                f"of size {size}"
            )
            raise ShapeError(message) if length < 0 else IndexOutOfRangeError(message)
        slices = (slice(None),) * d + (slice(start, start + length, 1),)
        out = self._apply("slice", (self,), (slices,))
        items = (("slice", 1),) * len(self.shape)
        return link(out, self, "index", (slices, out.shape, out.shape, items))

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Any, ...]:
        """Split into ``chunks`` pieces of ceil(size / chunks) (the last may be smaller); a
        tuple, as torch's (``x.chunk(2) + (y,)``)."""
        chunks = int_parameter("chunk", chunks, "chunks")
        if chunks <= 0:
            raise ShapeError(f"chunk: chunks must be a positive int, got {chunks!r}")
        d = normalize_dim("chunk", dim, self.ndim)
        size = self.shape[d]
        if size == 0:  # torch: as many empty pieces as asked for
            return tuple(self.narrow(d, 0, 0) for _ in range(int(chunks)))
        step = max(1, -(-size // chunks))
        return number_outputs(
            tuple(self.narrow(d, s, min(step, size - s)) for s in range(0, size, step)), "Split"
        )

    def unbind(self, dim: int = 0) -> tuple[Any, ...]:
        """The slices along ``dim``, that dimension removed (views, as torch's)."""
        d = normalize_dim("unbind", dim, self.ndim)
        lead = (slice(None),) * d
        return number_outputs(tuple(self[lead + (i,)] for i in range(self.shape[d])), "Unbind")

    def tensor_split(
        self,
        indices_or_sections: Any = None,
        dim: int = 0,
        *,
        sections: Any = None,
        indices: Any = None,
        tensor_indices_or_sections: Any = None,
    ) -> tuple[Any, ...]:
        """torch's ``tensor_split``: ``n`` nearly equal pieces (the first ``size % n`` one
        larger), or pieces between the given indices; torch's keyword forms ``sections=``,
        ``indices=`` and ``tensor_indices_or_sections=`` name the same argument."""
        given = [
            v
            for v in (indices_or_sections, sections, indices, tensor_indices_or_sections)
            if v is not None
        ]
        if len(given) != 1:
            raise ArgumentTypeError(
                "tensor_split: give exactly one of indices_or_sections, sections, indices or "
                f"tensor_indices_or_sections, got {len(given)}"
            )
        indices_or_sections = given[0]
        d = normalize_dim("tensor_split", dim, self.ndim)
        size = self.shape[d]
        if isinstance(indices_or_sections, TensorBase) and indices_or_sections.ndim > 1:
            raise ShapeError(
                "tensor_split: a tensor of indices or sections must be 0-d or 1-d, got shape "
                f"{shape_text(indices_or_sections.shape)}"
            )
        indices_or_sections = int_arguments("tensor_split", indices_or_sections, "sections")
        if isinstance(indices_or_sections, numbers.Integral):
            n = int(indices_or_sections)
            if n <= 0:
                raise ShapeError(f"tensor_split: sections must be positive, got {n}")
            _refuse_countless_pieces("tensor_split", n, self.shape)
            base, extra = divmod(size, n)
            bounds = [0]
            for i in range(n):
                bounds.append(bounds[-1] + base + (1 if i < extra else 0))
        else:
            # a negative index counts from the end, as in torch and Python
            inner = [operator.index(i) for i in indices_or_sections]
            bounds = [0] + [min(max(i + size if i < 0 else i, 0), size) for i in inner] + [size]
        return tuple(self.narrow(d, a, max(b - a, 0)) for a, b in itertools.pairwise(bounds))

    def iter_dim(self, dim: int) -> Iterator[Any]:
        """Burn's ``iter_dim``: the slices of size 1 along ``dim`` in order, ``dim`` kept (each
        a :meth:`narrow`); the dimension is checked when called, the slices made as iterated."""
        d = normalize_dim("iter_dim", dim, self.ndim)
        return (self.narrow(d, i, 1) for i in range(self.shape[d]))

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple[Any, ...]:
        """Pieces of ``split_size`` along ``dim`` (the last may be smaller), or of each size;
        a tuple, as torch's."""
        d = normalize_dim("split", dim, self.ndim)
        size = self.shape[d]
        if isinstance(split_size, TensorBase):
            # torch's Tensor.split reads a tensor as int(split_size): any one-element tensor,
            # truncated (a 0-d float 2.0 is 2)
            if math.prod(split_size.shape) != 1:
                raise ShapeError(
                    f"split: a tensor split_size must hold one element, got shape "
                    f"{shape_text(split_size.shape)}"
                )
            split_size = int(split_size.item())
        split_size = int_arguments("split", split_size, "split_size")
        if isinstance(split_size, bool) or not isinstance(
            split_size, numbers.Integral | list | tuple
        ):
            raise DTypeError(
                f"split: split_size must be an int or a sequence of ints, got "
                f"{type(split_size).__name__} {split_size!r}"
            )
        if isinstance(split_size, numbers.Integral):
            if split_size < 0 or (split_size == 0 and size > 0):
                raise ShapeError(
                    f"split: split_size must be positive unless dimension {dim} is empty, got "
                    f"{split_size} for shape {shape_text(self.shape)}"
                )
            # an empty dimension is one empty piece, as in torch
            sizes = [min(split_size, size - s) for s in range(0, size, split_size or 1)] or [0]
        else:
            if not all(isinstance(n, numbers.Integral) for n in split_size):
                raise DTypeError(f"split: split sizes must be ints, got {list(split_size)!r}")
            sizes = [int(n) for n in split_size]
            if sum(sizes) != size or any(n < 0 for n in sizes):
                raise ShapeError(f"split: sizes {sizes} do not add up to dimension size {size}")
        pieces, start = [], 0
        for n in sizes:
            pieces.append(self.narrow(d, start, n))
            start += n
        view_op = "Split" if isinstance(split_size, numbers.Integral) else "SplitWithSizes"
        return number_outputs(tuple(pieces), view_op)

    def unfold(self, dimension: int, size: int, step: int) -> Any:
        """Sliding windows of ``size`` every ``step`` along ``dimension``, as a new last
        dimension (windows of size 0 too, as torch's, whose keyword is ``dimension``)."""
        dim = dimension
        size, step = int_argument("unfold", size, "size"), int_argument("unfold", step, "step")
        if self.ndim == 0 and dim in (0, -1):
            # torch: a 0-d tensor is one element along one dimension, its window that
            # dimension (shape (size,))
            return self.reshape(1).unfold(0, size, step).reshape(-1)
        d = normalize_dim("unfold", dim, self.ndim)
        length = self.shape[d]
        if size < 0 or step <= 0 or size > length:
            raise ShapeError(
                f"unfold: window size {size} and step {step} do not fit dimension {dim} of size "
                f"{length}"
            )
        params = (d, int(size), int(step))
        return link(self._apply("unfold", (self,), params), self, "unfold", params)


# -- joining -------------------------------------------------------------------------------------
def refuse_one_tensor(op: str, tensors: Any) -> None:
    """torch's refusal of a tensor where a sequence of tensors is due (``torch.cat(t)``):
    iterating it would silently join its slices, as ``torch.cat(h[-2:], dim=-1)`` for
    ``torch.cat((h[-2], h[-1]), dim=-1)`` would."""
    if isinstance(tensors, TensorBase):
        raise DTypeError(
            f"{op}(): argument 'tensors' must be a tuple or list of Tensors, not a Tensor "
            f"(of shape {shape_text(tensors.shape)})"
        )


def joined_tensors(op: str, tensors: Sequence[Any]) -> list[Any]:
    """The entries of ``cat``/``stack``'s sequence as tensors: a ``(values, indices)`` pair
    gives its values, a value that stands for a tensor (a state dict's entry, which is a tensor
    in torch) its tensor (``__retrograd_tensor__``); every entry must then be a tensor, in
    torch's words: torch refuses a NumPy array or a number at any place
    (``torch.cat([t, np.ones(3)])``)."""
    joined = []
    for position, t in enumerate(tensors):
        if isinstance(t, ValuesAndIndices):
            t = t.values
        elif not isinstance(t, TensorBase):
            t = stood_for(t)
        if not isinstance(t, TensorBase):
            kind = type(t)
            got = kind.__name__ if kind.__module__ == "builtins" else kind.__qualname__
            if kind.__module__.split(".")[0] == "numpy":
                got = f"numpy.{got}"
            raise DTypeError(
                f"{op}(): expected Tensor as element {position} in argument 0, but got {got}"
            )
        joined.append(t)
    return joined


def cat(tensors: Sequence[Any], dim: int = 0) -> Any:
    """Concatenate along ``dim``; the other dimensions must match.

    >>> import retrograd as rg
    >>> rg.cat([rg.zeros((1, 2)), rg.ones((2, 2))], 0).shape
    retrograd.Size([3, 2])
    """
    refuse_one_tensor("cat", tensors)
    tensors = joined_tensors("cat", tensors)
    if not tensors:
        raise ShapeError("cat: needs at least one tensor")
    first = tensors[0]
    lifted = [first] + [lift(first, t, "cat") for t in tensors[1:]]
    dtype = lifted[0].dtype
    for t in lifted[1:]:
        dtype = result_dtype(dtype, t.dtype)
    lifted = [t.cast(dtype) for t in lifted]
    # torch's legacy rule: a 1-d empty tensor joins anything (it is skipped, after taking
    # part in the dtype); among 1-d tensors it is joined as any other, so that the result
    # is in the graph when it is (torch's requires grad then)
    joined = [t for t in lifted if t.shape != (0,)]
    if joined and len(joined) < len(lifted) and any(t.ndim != 1 for t in joined):
        lifted = joined
    ndim = lifted[0].ndim
    # (torch wraps dim against the first tensor it does not skip: none, no dim to check)
    d = 0 if not joined else normalize_dim("cat", dim, ndim)
    reference = lifted[0].shape
    for t in lifted[1:]:
        shape = t.shape
        if len(shape) != ndim or any(
            a != b for axis, (a, b) in enumerate(zip(shape, reference)) if axis != d
        ):
            raise SizeMismatchError(
                f"cat: shapes {', '.join(shape_text(x.shape) for x in lifted)} differ outside "
                f"dimension {dim}"
            )
    backend = first._backend
    with reported("cat", backend, lifted):
        out = backend.cat([t._prim for t in lifted], d)
    return sticky_class(lifted, type(first)._result)(out, backend, first._device)


def stack(tensors: Sequence[Any], dim: int = 0) -> Any:
    """Stack equal-shaped tensors along a new dimension ``dim`` (negative counts from the
    output's end)."""
    refuse_one_tensor("stack", tensors)
    tensors = joined_tensors("stack", tensors)
    if not tensors:
        raise ShapeError("stack: needs at least one tensor")
    first = tensors[0]
    tensors = [first] + [lift(first, t, "stack") for t in tensors[1:]]
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        listed = ", ".join(shape_text(s) for s in shapes)
        raise ShapeError(f"stack: all tensors need the same shape, got {listed}")
    d = normalize_dim("stack", dim, tensors[0].ndim, extra=1)
    return cat([t.unsqueeze_dim(d) for t in tensors], d)


def flatten(t: Any, start_dim: int = 0, end_dim: int = -1) -> Any:
    """``t.flatten(start_dim, end_dim)`` (``torch.flatten``)."""
    return t.flatten(start_dim, end_dim)


# -- shape arguments -----------------------------------------------------------------------------
def by_keyword(op: str, args: tuple[Any, ...], keyword: str, value: Any) -> tuple[Any, ...]:
    """The varargs of a method torch also lets take its sequence by keyword
    (``t.reshape(shape=...)``, ``t.permute(dims=...)``): ``args``, or ``(value,)`` when the
    keyword was given instead."""
    if value is None:
        return args
    if args:
        raise ShapeError(f"{op}: got {keyword}= and positional {keyword} {args!r}; give one")
    return (value,)


def varargs_shape(op: str, args: tuple[Any, ...]) -> tuple[int, ...]:
    """A shape given as one sequence (``(2, 3)``) or as separate ints (``2, 3``), as torch
    takes both."""
    args = tuple(int_arguments(op, args, "size"))
    if len(args) == 1 and not _a_size(args[0]):
        return shape_arg(args[0], op)
    if not all(_a_size(n) for n in args):
        # a float or a str among the sizes: the wrong type, torch's TypeError
        raise ArgumentTypeError(
            f"{op}: expected a shape (ints or one sequence of ints), got {args!r}"
        )
    return tuple(_size(n) for n in args)


def _a_size(n: Any) -> bool:
    """An int (not a bool), or an int tensor of one element, which torch takes for a size as
    its ``__index__`` (``x.view(n, -1)`` with ``n = lengths.max()``)."""
    if isinstance(n, numbers.Integral):
        return not isinstance(n, bool)
    return getattr(n, "shape", None) is not None and _one_int(n)


def _one_int(n: Any) -> bool:
    return math.prod(n.shape) == 1 and str(n.dtype) in ("int64", "int32")


def _size(n: Any) -> int:
    return operator.index(n) if isinstance(n, numbers.Integral) else int(n.reshape(()).item())


def shape_arg(shape: Any, op: str = "shape") -> tuple[int, ...]:
    """A shape argument (an int or a sequence of ints: an int tensor of one element counts; a
    float, a str, or a tensor of several elements given whole do not, as in torch) as a
    tuple of ints."""
    shape = int_arguments(op, shape, "size")
    if _a_size(shape):
        return (_size(shape),)
    check_int_list(op, shape, "shape")
    try:
        return tuple(_size(n) if _a_size(n) else operator.index(n) for n in shape)
    except TypeError:
        raise ArgumentTypeError(
            f"{op}: expected a shape (a sequence of ints), got {shape!r}"
        ) from None


def _dims_arg(dims: Any) -> tuple[int, ...]:
    return int_dims("dims", dims)


def keep_zero_dims(own: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """Burn's ``reshape``: a 0 in ``shape`` keeps the input's size at that position. Only for
    a tensor with elements, where torch's literal 0 could never hold; an empty tensor's 0 stays
    torch's empty dimension."""
    if 0 not in shape or math.prod(own) == 0:
        return shape
    if any(n == 0 and i >= len(own) for i, n in enumerate(shape)):
        raise ShapeError(
            f"reshape: a 0 in {shape_text(shape)} keeps the input's size at its position, but "
            f"the input {shape_text(own)} has no dimension there"
        )
    return tuple(own[i] if n == 0 else n for i, n in enumerate(shape))


def infer_shape(op: str, own: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with its -1 resolved, checked to hold as many elements as ``own``."""
    count = math.prod(own)
    unknown = [i for i, n in enumerate(shape) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in shape):
        raise ShapeError(f"{op}: invalid shape {shape_text(shape)}")
    if unknown:
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or count % known:
            raise ShapeError(
                f"{op}: cannot reshape {shape_text(own)} ({count} elements) to {shape_text(shape)}"
            )
        shape = tuple(count // known if n == -1 else n for n in shape)
    if math.prod(shape) != count:
        raise ShapeError(
            f"{op}: cannot reshape {shape_text(own)} ({count} elements) to {shape_text(shape)}"
        )
    return shape


def laid_out_in(t: Any, fmt: Any) -> Any:
    """A copy of ``t`` (the same values; the gradient flows back to ``t``) with the strides
    torch gives a tensor laid out in ``fmt`` (``channels_last``: :func:`.layouts.format_strides`),
    where they differ from row-major ones. An expanded ``t`` is refused before the copy if no
    machine could hold it."""
    check_allocation("contiguous", t.shape, t.dtype)
    out = type(t)._result(t._prim, t._backend, t._device)
    lay_out(out, fmt)
    return out


def lay_out(t: Any, fmt: Any) -> None:
    """Give ``t`` itself the strides of memory format ``fmt`` (row-major ones for
    ``contiguous_format``), its values unchanged: torch's ``Module.to(memory_format=)``
    replacing a parameter's data by one laid out so."""
    shape = tuple(t.shape)
    strides = format_strides(fmt, shape)
    t._layout = None if strides == contiguous_strides(shape) else (shape, strides)


def follow_channels_last(out: Any, *sources: Any) -> Any:
    """``out``, the 4-d or 5-d result of a convolution, pooling or normalization of
    ``sources``, with torch's channels-last strides where one of the sources is laid out
    channels-last (torch's ``suggest_memory_format``, which picks the output's layout)."""
    if out.ndim not in (4, 5):
        return out
    for source in sources:
        if source is None or source.ndim != out.ndim:
            continue
        fmt = suggested_format(tuple(source.shape), strides_of(source))
        if fmt is not contiguous_format:
            lay_out(out, fmt)
            break
    return out


def _row_major(t: Any) -> bool:
    """Whether ``t`` is known contiguous without computing strides: neither a view nor an
    elementwise result that follows a non-contiguous operand's layout."""
    return getattr(t, "_view", None) is None and getattr(t, "_layout", None) is None


def _reshaped(
    op: str,
    t: Any,
    target: tuple[int, ...],
    strict: bool = False,
    squeezing: tuple[str, tuple[int, ...]] | None = None,
) -> Any:
    """``t`` in ``target`` shape: a view of ``t`` where torch's strides allow one (always for
    a contiguous tensor), else a copy (``strict``: torch's ``view`` error). ``squeezing``
    (``("squeeze", dropped dims)`` or ``("unsqueeze", inserted dims)``): always a view, with
    the strides of torch's own formula for it."""
    out = t._apply("reshape", (t,), (target,))
    if squeezing is not None:
        return link(out, t, "reshape", (target, squeezing))
    if not _row_major(t) and view_strides(t.shape, strides_of(t), target) is None:
        if strict:
            raise view_error(op, t.shape, target)
        return out
    return link(out, t, "reshape", (target,))


def _bitcast(t: Any, dtype: str) -> Any:
    """``t.view(dtype)``: torch's conditions for itemsizes that differ, then the backend's
    reading of the bytes, linked to ``t`` as a view (:mod:`.views`)."""
    source, target = ITEMSIZE[t.dtype], ITEMSIZE[dtype]
    if source != target:
        what = f"to view {t.dtype} as {dtype} (different element sizes, as torch's)"
        if t.ndim == 0:
            raise ShapeError(f"view: the tensor cannot be 0-d {what}")
        strides = strides_of(t)
        if strides[-1] != 1:
            raise ShapeError(f"view: stride(-1) must be 1 {what}, got {strides[-1]}")
        if target > source:
            ratio = target // source
            if t.shape[-1] % ratio:
                raise ShapeError(
                    f"view: size(-1) must be divisible by {ratio} {what}, got {t.shape[-1]}"
                )
            if storage_offset_of(t) % ratio:
                raise ShapeError(
                    f"view: the storage offset must be divisible by {ratio} {what}, got "
                    f"{storage_offset_of(t)}"
                )
            for d, stride in enumerate(strides[:-1]):
                if stride % ratio:
                    raise ShapeError(
                        f"view: stride({d}) must be divisible by {ratio} {what}, got {stride}"
                    )
    # (a view of t, as torch's: an in-place write into either is seen in the other)
    return link(t._apply("bitcast", (t,), (dtype,)), t, "bitcast", (dtype,))


def _names_dtype(value: Any) -> bool:
    from .dtypes import DTYPE_OBJECTS

    if isinstance(value, str):
        return value.removeprefix("torch.") in DTYPE_OBJECTS
    return type(value).__name__ == "dtype"


#: The most elements a shape may count (torch's and NumPy's sizes are int64)
_INT64_MAX = 2**63 - 1

#: The least memory one piece of a split takes (its Python object and view record): the
#: bound below which a number of pieces cannot be held.
_PIECE_BYTES = 64


def _refuse_countless_pieces(op: str, count: int, shape: Sequence[int]) -> None:
    """Refuse ``count`` pieces that no memory holds, before making the first of them (a loop
    over ``2**70`` pieces would never end): past int64 as torch's ``OverflowError``
    (:class:`InvalidArgumentError`), past the machine's memory as its allocator's."""
    if count >= 2**63:
        raise InvalidArgumentError(f"{op}: sections must fit int64, got {count}")
    available = machine_memory_bytes()
    if available is not None and count * _PIECE_BYTES > available:
        raise OutOfMemoryError(
            f"{op}: out of memory: {count} pieces of a {shape_text(tuple(shape))} tensor "
            f"need more than this machine's {available} bytes of memory"
        )
