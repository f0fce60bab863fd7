"""Average, max and adaptive average pooling: one backend primitive each."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from ...backend.sizes import pool_output_size
from ...errors import (
    InvalidArgumentError,
    ShapeError,
)
from ...tensor import Tensor
from ...tensor.internal import (
    TensorOp,
    apply,
    shape_text,
)
from ._common import (
    IntOrTuple,
    _batched,
    _float_input,
    _ints,
    _unbatched,
)


# -- pooling ---------------------------------------------------------------------------------------
def _pool_args(fn, spatial, x, kernel_size, stride, padding, dilation, ceil_mode):
    kernel = _ints(fn, "kernel_size", kernel_size, spatial, 1)
    no_stride = stride is None or (not isinstance(stride, numbers.Integral) and len(stride) == 0)
    stride = kernel if no_stride else _ints(fn, "stride", stride, spatial, 1)
    padding = _ints(fn, "padding", padding, spatial, 0)
    dilation = _ints(fn, "dilation", dilation, spatial, 1)
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ShapeError(
            f"{fn}: padding {shape_text(padding)} must be at most half the kernel size "
            f"{shape_text(kernel)}; input {shape_text(x.shape)}"
        )
    out_size = tuple(
        pool_output_size(n, k, s, p, d, bool(ceil_mode))
        for n, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)
    )
    if any(n < 1 for n in out_size):
        raise ShapeError(
            f"{fn}: kernel {shape_text(kernel)} (dilation {shape_text(dilation)}) is larger "
            f"than the padded input; input {shape_text(x.shape)}, padding "
            f"{shape_text(padding)}"
        )
    return kernel, stride, padding, dilation


def _avg_pool(
    fn,
    spatial,
    x,
    kernel_size,
    stride,
    padding,
    ceil_mode,
    count_include_pad,
    divisor_override=None,
):
    x, squeeze = _batched(fn, _float_input(fn, x), spatial)
    kernel, stride, padding, _ = _pool_args(
        fn, spatial, x, kernel_size, stride, padding, 1, ceil_mode
    )
    if divisor_override is not None:
        if not isinstance(divisor_override, numbers.Integral) or divisor_override == 0:
            raise InvalidArgumentError(
                f"{fn}: divisor_override must be a nonzero integer, got {divisor_override!r}"
            )
        divisor_override = int(divisor_override)
    pooling = (kernel, stride, padding, bool(ceil_mode), bool(count_include_pad), divisor_override)
    out = apply(TensorOp(fn, kernel="avg_pool"), (x,), pooling)
    return _unbatched(out, squeeze)


def avg_pool1d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """Average over windows of ``kernel_size`` every ``stride`` (default: the kernel size)."""
    return _avg_pool("avg_pool1d", 1, x, kernel_size, stride, padding, ceil_mode, count_include_pad)


def avg_pool2d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """2-d average pooling, PyTorch's ``avg_pool2d`` (``divisor_override``: divide every
    window's sum by it instead).

    >>> import retrograd as rg
    >>> avg_pool2d(rg.ones((1, 1, 4, 4)), 2).tolist()
    [[[[1.0, 1.0], [1.0, 1.0]]]]
    >>> avg_pool2d(rg.ones((1, 1, 4, 4)), 2, divisor_override=1).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    return _avg_pool(
        "avg_pool2d",
        2,
        x,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


def _max_pool(fn, spatial, x, kernel_size, stride, padding, dilation, ceil_mode):
    x, squeeze = _batched(fn, _float_input(fn, x), spatial)
    kernel, stride, padding, dilation = _pool_args(
        fn, spatial, x, kernel_size, stride, padding, dilation, ceil_mode
    )
    pooling = (kernel, stride, padding, dilation, bool(ceil_mode))
    values, indices = apply(TensorOp(fn, kernel="max_pool"), (x,), pooling)
    return _unbatched(values, squeeze), _unbatched(indices, squeeze)


def max_pool1d_with_indices(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(values, indices)`` of 1-d max pooling; int64 indices into the input's last dim."""
    return _max_pool("max_pool1d", 1, x, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d_with_indices(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(values, indices)`` of 2-d max pooling; the int64 indices are flat over ``H*W``, as
    PyTorch's."""
    return _max_pool("max_pool2d", 2, x, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool1d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """Maximum over windows; the gradient goes to each window's (first) maximum."""
    values, indices = max_pool1d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
    return (values, indices) if return_indices else values


def max_pool2d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """2-d max pooling, PyTorch's ``max_pool2d``.

    >>> import retrograd as rg
    >>> max_pool2d(rg.tensor([[[[1.0, 2.0], [4.0, 3.0]]]]), 2).tolist()
    [[[[4.0]]]]
    """
    values, indices = max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
    return (values, indices) if return_indices else values


def _adaptive_avg_pool(fn, spatial, x, output_size):
    x, squeeze = _batched(fn, _float_input(fn, x), spatial)
    if output_size is None or isinstance(output_size, numbers.Integral):
        output_size = (output_size,) * spatial
    output_size = tuple(output_size)
    if len(output_size) == 1:
        output_size *= spatial
    if len(output_size) != spatial:
        raise ShapeError(f"{fn}: output_size must have {spatial} entries, got {output_size!r}")
    # None keeps the input's size, as in PyTorch.
    sizes = tuple(n if o is None else o for o, n in zip(output_size, x.shape[2:]))
    if not all(isinstance(o, numbers.Integral) and o >= 1 for o in sizes):
        raise ShapeError(f"{fn}: output_size must be positive ints, got {output_size!r}")
    if any(n == 0 for n in x.shape[2:]):
        raise ShapeError(f"{fn}: input {shape_text(x.shape)} has an empty spatial dimension")
    out = apply(TensorOp(fn, kernel="adaptive_avg_pool"), (x,), (tuple(int(o) for o in sizes),))
    return _unbatched(out, squeeze)


def adaptive_avg_pool1d(x: Tensor, output_size: int | Sequence[int]) -> Tensor:
    """Average pooling to ``output_size`` cells, PyTorch's windows."""
    return _adaptive_avg_pool("adaptive_avg_pool1d", 1, x, output_size)


def adaptive_avg_pool2d(x: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """Average pooling to ``output_size`` (``None`` keeps a dimension), PyTorch's windows.

    >>> import retrograd as rg
    >>> adaptive_avg_pool2d(rg.ones((2, 3, 7, 5)), 1).shape
    (2, 3, 1, 1)
    """
    return _adaptive_avg_pool("adaptive_avg_pool2d", 2, x, output_size)


def avg_pool3d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """3-d average pooling, PyTorch's ``avg_pool3d``."""
    return _avg_pool(
        "avg_pool3d", 3, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
        divisor_override,
    )  # fmt: skip


def max_pool3d_with_indices(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> tuple[Tensor, Tensor]:
    return _max_pool("max_pool3d", 3, x, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """3-d max pooling, PyTorch's ``max_pool3d``."""
    values, indices = max_pool3d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
    return (values, indices) if return_indices else values


def adaptive_avg_pool3d(x: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    return _adaptive_avg_pool("adaptive_avg_pool3d", 3, x, output_size)


def _adaptive_max_pool(fn: str, spatial: int, x: Tensor, output_size: Any, return_indices: bool):
    """Maximum over torch's adaptive windows (``floor(i n / o)`` to ``ceil((i + 1) n / o)``),
    one window at a time: the gradient goes to each window's maximum, as torch's."""
    x, squeeze = _batched(fn, _float_input(fn, x), spatial)
    if output_size is None or isinstance(output_size, numbers.Integral):
        output_size = (output_size,) * spatial
    sizes = tuple(n if o is None else int(o) for o, n in zip(tuple(output_size), x.shape[2:]))
    if len(sizes) != spatial or any(o < 1 for o in sizes):
        raise ShapeError(f"{fn}: output_size must be {spatial} positive ints, got {output_size!r}")
    if return_indices:
        raise InvalidArgumentError(f"{fn}: return_indices=True is not supported")
    cells = x
    for axis, (n, o) in enumerate(zip(x.shape[2:], sizes)):
        dim = 2 + axis
        pieces = []
        for i in range(o):
            start, end = (i * n) // o, -(-((i + 1) * n) // o)
            pieces.append(cells.narrow(dim, start, end - start).max(dim, keepdim=True).values)
        cells = pieces[0] if o == 1 else _cat(pieces, dim)
    return _unbatched(cells, squeeze)


def _cat(pieces: list[Tensor], dim: int) -> Tensor:
    from ...tensor import cat

    return cat(pieces, dim)


def adaptive_max_pool1d(x: Tensor, output_size: Any, return_indices: bool = False) -> Tensor:
    return _adaptive_max_pool("adaptive_max_pool1d", 1, x, output_size, return_indices)


def adaptive_max_pool2d(x: Tensor, output_size: Any, return_indices: bool = False) -> Tensor:
    """Maximum pooling to ``output_size`` (``None`` keeps a dimension), torch's windows."""
    return _adaptive_max_pool("adaptive_max_pool2d", 2, x, output_size, return_indices)
