"""Shape operations: reshaping, transposing, broadcasting, tiling, splitting and joining
(:func:`cat`, :func:`stack`).

:class:`ShapeMixin` needs one primitive from the class it is mixed into:
``_apply(op, inputs, params=())`` (:func:`retrograd.tensor._dispatch.apply`), and reads
``shape`` and ``ndim``. Every target shape is computed and checked here from shape tuples
alone, so the backend receives normalized dims and complete shapes.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import IndexOutOfRangeError, ShapeError, reported, shape_text
from ._dispatch import lift, normalize_dim, result_dtype

__all__ = ["ShapeMixin", "cat", "flatten", "stack"]


class ShapeMixin:
    """Shape methods; needs ``_apply`` (see the module docstring)."""

    __slots__ = ()
    _apply: Callable[..., Any]  # the one primitive: retrograd.tensor._dispatch.apply
    shape: tuple[int, ...]
    ndim: int

    def reshape(self, *shape: Any) -> Any:
        """The same elements in ``shape``, given as one sequence or as separate ints
        (``t.reshape(2, -1)``, as torch); one entry may be -1."""
        target = infer_shape("reshape", self.shape, varargs_shape("reshape", shape))
        return self._apply("reshape", (self,), (target,))

    def view(self, *shape: Any) -> Any:
        """:meth:`reshape` (tensors here have no strides a view could fail on)."""
        target = infer_shape("view", self.shape, varargs_shape("view", shape))
        return self._apply("reshape", (self,), (target,))

    def contiguous(self) -> Any:
        """``self``: memory layout is the backend's business (docs/architecture.md)."""
        return self

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
        return self._apply("swap_dims", (self,), (ndim - 2, ndim - 1))

    @property
    def T(self) -> Any:  # noqa: N802
        return self.transpose()

    def swap_dims(self, dim1: int, dim2: int) -> Any:
        a = normalize_dim("swap_dims", dim1, self.ndim)
        b = normalize_dim("swap_dims", dim2, self.ndim)
        return self if a == b else self._apply("swap_dims", (self,), (a, b))

    def permute(self, dims: Sequence[int]) -> Any:
        ndim = self.ndim
        normalized = tuple(normalize_dim("permute", d, ndim) for d in dims)
        if sorted(normalized) != list(range(ndim)):
            raise ShapeError(
                f"permute: {list(dims)} is not a permutation of the {ndim} dimensions of "
                f"{shape_text(self.shape)}"
            )
        return self._apply("permute", (self,), (normalized,))

    def flip(self, dims: Sequence[int]) -> Any:
        ndim = self.ndim
        normalized = tuple(normalize_dim("flip", d, ndim) for d in _dims_arg(dims))
        if len(set(normalized)) != len(normalized):
            raise ShapeError(f"flip: dimensions {list(dims)} repeat")
        return self._apply("flip", (self,), (normalized,)) if normalized else self

    def expand(self, shape: Sequence[int]) -> Any:
        """Broadcast to ``shape`` (-1 keeps a dimension), without copying."""
        shape = shape_arg(shape)
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
        return self if target == own else self._apply("expand", (self,), (target,))

    def broadcast_to(self, shape: Sequence[int]) -> Any:
        return self.expand(shape)

    def repeat_dim(self, dim: int, times: int) -> Any:
        """Tile the tensor ``times`` times along ``dim``."""
        d = normalize_dim("repeat_dim", dim, self.ndim)
        if not isinstance(times, numbers.Integral) or times < 0:
            raise ShapeError(f"repeat_dim: times must be a non-negative int, got {times!r}")
        return self if times == 1 else self._apply("repeat_dim", (self,), (d, int(times)))

    def repeat(self, sizes: Sequence[int]) -> Any:
        """Tile the tensor ``sizes[d]`` times along each dimension ``d`` (PyTorch's ``repeat``,
        Burn's ``repeat``); extra leading sizes add dimensions."""
        sizes = shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: {len(sizes)} sizes for a tensor with {self.ndim} dimensions")
        out = self.reshape((1,) * (len(sizes) - self.ndim) + self.shape)
        for dim, times in enumerate(sizes):
            out = out.repeat_dim(dim, times)
        return out

    def squeeze_dim(self, dim: int) -> Any:
        """Remove dimension ``dim``, which must have size 1."""
        shape = self.shape
        d = normalize_dim("squeeze_dim", dim, len(shape))
        if shape[d] != 1:
            raise ShapeError(
                f"squeeze_dim: dimension {dim} has size {shape[d]}, expected 1 "
                f"(shape {shape_text(shape)})"
            )
        return self._apply("reshape", (self,), (shape[:d] + shape[d + 1 :],))

    def squeeze(self, dim: int | None = None) -> Any:
        if dim is not None:
            return self.squeeze_dim(dim)
        return self._apply("reshape", (self,), (tuple(n for n in self.shape if n != 1),))

    def unsqueeze_dim(self, dim: int) -> Any:
        """Insert a dimension of size 1 at ``dim`` (negative counts from the output's end)."""
        shape = self.shape
        d = normalize_dim("unsqueeze_dim", dim, len(shape), extra=1)
        return self._apply("reshape", (self,), (shape[:d] + (1,) + shape[d:],))

    unsqueeze = unsqueeze_dim

    def flatten(self, start: int = 0, end: int = -1) -> Any:
        """Merge dimensions ``start..=end`` into one."""
        shape = self.shape
        if not shape:
            return self.reshape((1,))
        s = normalize_dim("flatten", start, len(shape))
        e = normalize_dim("flatten", end, len(shape))
        if s > e:
            raise ShapeError(f"flatten: start {start} comes after end {end}")
        merged = math.prod(shape[s : e + 1])
        return self._apply("reshape", (self,), (shape[:s] + (merged,) + shape[e + 1 :],))

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
        slices = (slice(None),) * d + (slice(start, start + length),)
        return self._apply("slice", (self,), (slices,))

    def chunk(self, chunks: int, dim: int = 0) -> list[Any]:
        """Split into ``chunks`` pieces of ceil(size / chunks) (the last may be smaller)."""
        if not isinstance(chunks, numbers.Integral) or chunks <= 0:
            raise ShapeError(f"chunk: chunks must be a positive int, got {chunks!r}")
        d = normalize_dim("chunk", dim, self.ndim)
        size = self.shape[d]
        step = max(1, -(-size // chunks))
        return [self.narrow(d, s, min(step, size - s)) for s in range(0, size, step)]

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> list[Any]:
        """Pieces of ``split_size`` along ``dim`` (the last may be smaller), or of each size."""
        d = normalize_dim("split", dim, self.ndim)
        size = self.shape[d]
        if isinstance(split_size, numbers.Integral):
            if split_size <= 0:
                raise ShapeError(f"split: split_size must be positive, got {split_size}")
            sizes = [min(split_size, size - s) for s in range(0, size, split_size)]
        else:
            sizes = [int(n) for n in split_size]
            if sum(sizes) != size or any(n < 0 for n in sizes):
                raise ShapeError(f"split: sizes {sizes} do not add up to dimension size {size}")
        pieces, start = [], 0
        for n in sizes:
            pieces.append(self.narrow(d, start, n))
            start += n
        return pieces

    def unfold(self, dim: int, size: int, step: int) -> Any:
        """Sliding windows of ``size`` every ``step`` along ``dim``, as a new last dimension."""
        d = normalize_dim("unfold", dim, self.ndim)
        length = self.shape[d]
        if size <= 0 or step <= 0 or size > length:
            raise ShapeError(
                f"unfold: window size {size} and step {step} do not fit dimension {dim} of size "
                f"{length}"
            )
        return self._apply("unfold", (self,), (d, int(size), int(step)))


# -- joining -------------------------------------------------------------------------------------
def cat(tensors: Sequence[Any], dim: int = 0) -> Any:
    """Concatenate along ``dim``; the other dimensions must match.

    >>> import retrograd as rg
    >>> rg.cat([rg.zeros((1, 2)), rg.ones((2, 2))], 0).shape
    (3, 2)
    """
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("cat: needs at least one tensor")
    first = tensors[0]
    lifted = [first] + [lift(first, t, "cat") for t in tensors[1:]]
    dtype = lifted[0].dtype
    for t in lifted[1:]:
        dtype = result_dtype(dtype, t.dtype)
    lifted = [t.cast(dtype) for t in lifted]
    ndim = lifted[0].ndim
    d = normalize_dim("cat", dim, ndim)
    reference = lifted[0].shape
    for t in lifted[1:]:
        shape = t.shape
        if len(shape) != ndim or any(
            a != b for axis, (a, b) in enumerate(zip(shape, reference)) if axis != d
        ):
            raise ShapeError(
                f"cat: shapes {', '.join(shape_text(x.shape) for x in lifted)} differ outside "
                f"dimension {dim}"
            )
    backend = first._backend
    with reported("cat", backend, lifted):
        out = backend.cat([t._prim for t in lifted], d)
    return type(first)._result(out, backend, first._device)


def stack(tensors: Sequence[Any], dim: int = 0) -> Any:
    """Stack equal-shaped tensors along a new dimension ``dim`` (negative counts from the
    output's end)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack: needs at least one tensor")
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
def varargs_shape(op: str, args: tuple[Any, ...]) -> tuple[int, ...]:
    """A shape given as one sequence (``(2, 3)``) or as separate ints (``2, 3``), as torch
    takes both."""
    if len(args) == 1 and not isinstance(args[0], numbers.Integral):
        return shape_arg(args[0])
    if not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in args):
        raise ShapeError(f"{op}: expected a shape (ints or one sequence of ints), got {args!r}")
    return tuple(int(n) for n in args)


def shape_arg(shape: Any) -> tuple[int, ...]:
    """A shape argument (an int or a sequence of ints) as a tuple of ints."""
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    try:
        return tuple(int(n) for n in shape)
    except TypeError:
        raise ShapeError(f"expected a shape (a sequence of ints), got {shape!r}") from None


def _dims_arg(dims: Any) -> tuple[int, ...]:
    return (dims,) if isinstance(dims, numbers.Integral) else tuple(dims)


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
