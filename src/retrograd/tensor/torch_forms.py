"""torch's Tensor methods that are other names or small forms of what the other mixins give:
``adjoint``, ``float_power_``, the ``unsafe_*`` splits,
``new_empty_strided``, ``nonzero_static`` and ``as_subclass`` (``hardshrink`` and ``prelu``,
torch's methods over its functional ops, are installed by :mod:`retrograd.nn.functional`)."""

from __future__ import annotations

import math
import numbers
from typing import Any

from ..errors import ArgumentTypeError, DTypeError, ShapeError, shape_text
from ._dispatch import TensorBase
from .shape import cat
from .storage import number_outputs

__all__ = ["TorchFormsMixin", "nonzero_static", "strided_extent"]


class TorchFormsMixin:
    """See the module's docstring."""

    __slots__ = ()

    def adjoint(self) -> Any:
        """The conjugate transpose of the last two dimensions: for real tensors their
        transpose (a view); torch refuses fewer than 2 dimensions."""
        if self.ndim < 2:
            raise ShapeError(
                "adjoint: only supported on matrices or batches of matrices, got a "
                f"{self.ndim}-D tensor of shape {shape_text(self.shape)}"
            )
        return self.mH

    def float_power_(self, exponent: Any) -> Any:
        """``self ** exponent`` in double precision, in place: torch's result is complex128
        where either operand is complex and float64 otherwise, so only a tensor of that dtype
        can take it."""
        result = self.float_power(exponent)
        if self.dtype != result.dtype:
            raise DTypeError(
                f"float_power_: the base has dtype {self.dtype} but the result is "
                f"{result.dtype}; call it on a {result.dtype} tensor (or use float_power, "
                "which returns a new one)"
            )
        return self.copy_(result)

    def unsafe_chunk(self, chunks: int, dim: int = 0) -> tuple[Any, ...]:
        """:meth:`chunk` (torch's form without view tracking; the same values)."""
        return number_outputs(self.chunk(chunks, dim))

    def unsafe_split(self, split_size: int, dim: int = 0) -> tuple[Any, ...]:
        """:meth:`split` into pieces of ``split_size`` (an int, as torch's; sizes go to
        :meth:`unsafe_split_with_sizes`), torch's form without view tracking."""
        if not isinstance(split_size, numbers.Integral) or isinstance(split_size, bool):
            raise ArgumentTypeError(
                f"unsafe_split: split_size must be an int, got {type(split_size).__name__} "
                f"{split_size!r} (unsafe_split_with_sizes takes sizes)"
            )
        return number_outputs(self.split(int(split_size), dim))

    def unsafe_split_with_sizes(self, split_sizes: Any, dim: int = 0) -> tuple[Any, ...]:
        """:meth:`split` into pieces of ``split_sizes`` (a sequence of ints)."""
        if isinstance(split_sizes, numbers.Integral) or not all(
            isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in split_sizes
        ):
            raise ArgumentTypeError(
                f"unsafe_split_with_sizes: split_sizes must be a sequence of ints, got "
                f"{split_sizes!r}"
            )
        return number_outputs(self.split(list(split_sizes), dim))

    def new_empty_strided(
        self,
        size: Any,
        stride: Any,
        *,
        dtype: Any = None,
        device: Any = None,
        requires_grad: bool = False,
        layout: Any = None,
        pin_memory: bool = False,
    ) -> Any:
        """A tensor of ``size`` laid out with ``stride`` (values unspecified: zeros here),
        this tensor's dtype and device unless given."""
        storage = self.new_zeros(
            strided_extent("new_empty_strided", size, stride), dtype=dtype, device=device
        )
        out = storage.as_strided(tuple(size), tuple(stride))
        return out.require_grad() if requires_grad else out

    def nonzero_static(self, *, size: int, fill_value: int = -1) -> Any:
        """:meth:`nonzero`'s ``(n, ndim)`` indices cut or padded to ``size`` rows (padded
        with ``fill_value``), as torch's."""
        return nonzero_static(self, size=size, fill_value=fill_value)

    def as_subclass(self, cls: type) -> Any:
        """This tensor as an instance of ``cls`` (a subclass of ``Tensor``), aliasing it and
        in its graph, as torch's."""
        refused = ArgumentTypeError(f"as_subclass: cls must be a subclass of Tensor, got {cls!r}")
        if not (isinstance(cls, type) and issubclass(cls, TensorBase)):
            raise refused
        out = self.view_as(self)
        if cls is not type(out):
            try:
                out.__class__ = cls
            except TypeError:  # a class of another layout than Tensor's
                raise refused from None
        return out


def strided_extent(op: str, size: Any, stride: Any) -> int:
    """How many elements a layout of ``size`` and ``stride`` reaches (torch's storage size)."""
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise ShapeError(
            f"{op}: size {shape_text(size)} and stride {tuple(stride)} differ in length"
        )
    if any(n < 0 for n in size) or any(s < 0 for s in stride):
        raise ShapeError(f"{op}: negative size or stride: {shape_text(size)}, {stride}")
    if math.prod(size) == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(size, stride))


def nonzero_static(input: Any, *, size: int, fill_value: int = -1) -> Any:  # noqa: A002
    """``torch.nonzero_static``: the indices of the nonzero elements, ``(size, ndim)``: the
    first ``size`` of them, padded with rows of ``fill_value``."""
    if not isinstance(size, numbers.Integral) or isinstance(size, bool) or size < 0:
        raise ShapeError(f"nonzero_static: size must be a non-negative int, got {size!r}")
    found = input.nonzero()
    count = found.shape[0]
    if count >= size:
        return found[:size]
    padding = found.new_full((size - count, found.shape[1]), fill_value)
    return cat([found, padding])
