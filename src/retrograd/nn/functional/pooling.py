"""Average, max and adaptive average pooling (one backend primitive each); adaptive max
pooling, power-average pooling and max unpooling (compositions of tensor ops)."""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...backend.sizes import check_allocation, pool_output_size
from ...errors import (
    ArgumentTypeError,
    DTypeError,
    InvalidArgumentError,
    InvalidMaxIndexError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
    check_bool,
)
from ...tensor import Tensor, cat, rand, zeros
from ...tensor._dispatch import host_constant
from ...tensor.autocasting import autocast_op
from ...tensor.functions import kernel_read_inputs
from ...tensor.internal import (
    TensorOp,
    apply,
    check_indices,
    follow_channels_last,
    int_arguments,
    shape_text,
)
from ._common import (
    IntOrTuple,
    _as_tensor,
    _batched,
    _float_input,
    _ints,
    _unbatched,
)

# -- pooling ---------------------------------------------------------------------------------------
#: The integer dtypes torch 2.13's CPU max pooling takes (average pooling: int64 alone).
_MAX_POOL_INTEGERS = ("int64", "int32", "int16", "int8", "uint8")


def _pool_input(fn: str, x: Any, integers: bool, every_integer: bool = False) -> Tensor:
    """``x``, a float tensor, or an int64 one where torch 2.13 pools integers on the CPU
    (``integers``: max pooling in 2-d and 3-d, and in 1-d with its indices; average pooling,
    each window's sum divided as C divides integers, toward zero); ``every_integer``: any
    integer dtype but bool (max pooling). Integer tensors never require grad, so nothing is
    recorded; any other dtype is refused, naming it."""
    accepted = _MAX_POOL_INTEGERS if every_integer else ("int64",)
    if integers and isinstance(x, Tensor) and x.dtype in accepted:
        return x
    return _float_input(fn, x)


def _pool_args(fn, spatial, x, kernel_size, stride, padding, dilation, ceil_mode):
    if 0 in x.shape[1:]:  # (``x`` batched: torch refuses an empty channel or window dim,
        # even where padding would give the windows something to cover)
        raise SizeMismatchError(
            f"{fn}: expected an input with non-zero sizes in its non-batch dimensions, got "
            f"input {shape_text(x.shape)}"
        )
    kernel = _ints(fn, "kernel_size", kernel_size, spatial, 1)
    no_stride = stride is None or (not isinstance(stride, numbers.Integral) and len(stride) == 0)
    stride = kernel if no_stride else _ints(fn, "stride", stride, spatial, 1)
    padding = _ints(fn, "padding", padding, spatial, 0)
    dilation = _ints(fn, "dilation", dilation, spatial, 1)
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise SizeMismatchError(
            f"{fn}: padding {shape_text(padding)} must be at most half the kernel size "
            f"{shape_text(kernel)}; input {shape_text(x.shape)}"
        )
    out_size = tuple(
        pool_output_size(n, k, s, p, d, check_bool(fn, ceil_mode, "ceil_mode"))
        for n, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)
    )
    if any(n < 1 for n in out_size):
        raise SizeMismatchError(
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
    x, squeeze = _batched(fn, _pool_input(fn, x, True), spatial)
    kernel, stride, padding, _ = _pool_args(
        fn, spatial, x, kernel_size, stride, padding, 1, ceil_mode
    )
    sizes = x.shape[-spatial:]
    if spatial == 3 and any(n < k for n, k in zip(sizes, kernel)):
        # torch's 3-d average pooling compares the unpadded input with the kernel
        raise SizeMismatchError(
            f"{fn}: input image {sizes} smaller than kernel size {kernel} (the padding does "
            "not count, as in torch)"
        )
    count_include_pad = check_bool(fn, count_include_pad, "count_include_pad")
    if divisor_override is not None:
        if not isinstance(divisor_override, numbers.Integral) or isinstance(divisor_override, bool):
            raise ArgumentTypeError(
                f"{fn}: divisor_override must be an int, got {divisor_override!r}"
            )
        if divisor_override == 0:
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
    out = _avg_pool(
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
    return follow_channels_last(out, x)  # (torch's: the input's memory format)


def _max_pool(fn, spatial, x, kernel_size, stride, padding, dilation, ceil_mode, indices=True):
    x, squeeze = _batched(fn, _pool_input(fn, x, spatial > 1 or indices, True), spatial)
    kernel, stride, padding, dilation = _pool_args(
        fn, spatial, x, kernel_size, stride, padding, dilation, ceil_mode
    )
    pooling = (kernel, stride, padding, dilation, bool(ceil_mode))
    if x.dtype in _MAX_POOL_INTEGERS:
        values, indices = _integer_max_pool(fn, x, pooling)
    else:
        values, indices = apply(TensorOp(fn, kernel="max_pool"), (x,), pooling)
    return _unbatched(values, squeeze), _unbatched(indices, squeeze)


def _integer_max_pool(fn: str, x: Tensor, pooling: tuple) -> tuple[Tensor, Tensor]:
    """Max pooling of integer ``x``, exact at any magnitude: the float kernel pools each
    value's rank among the distinct values (equal values share a rank, so torch's first
    maximum is found; ranks are small enough to be exact floats), and the values are read
    back from ``x`` at the maxima's indices."""
    _, ranks = x.unique(return_inverse=True)
    _, indices = apply(TensorOp(fn, kernel="max_pool"), (ranks.double(),), pooling)
    n, c = x.shape[:2]
    values = x.reshape((n, c, -1)).gather(2, indices.reshape((n, c, -1)))
    return values.reshape(indices.shape), indices


def max_pool1d_with_indices(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,  # torch's, unused: the indices are always returned
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
    return_indices: bool = False,  # torch's, unused: the indices are always returned
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
    values, indices = _max_pool(
        "max_pool1d", 1, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )  # (torch pools int64 in 1-d only with the indices)
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
    follow_channels_last(values, x)  # (torch's: the input's memory format)
    follow_channels_last(indices, x)
    return (values, indices) if return_indices else values


def _adaptive_output_size(fn: str, spatial: int, output_size: Any) -> tuple:
    """``output_size`` (an int, or one int or ``None`` per spatial dimension) as a tuple of
    ``spatial`` entries; a float, a bool, a str or a bare ``None`` is the wrong type, torch's
    ``TypeError``."""
    output_size = int_arguments(fn, output_size, "output_size")
    if isinstance(output_size, numbers.Integral) and not isinstance(output_size, bool):
        return (output_size,) * spatial
    entries = tuple(output_size) if isinstance(output_size, (tuple, list)) else None
    if entries is None or not all(
        o is None or (isinstance(o, numbers.Integral) and not isinstance(o, bool)) for o in entries
    ):
        raise ArgumentTypeError(
            f"{fn}: output_size must be an int or a tuple of ints (or None), got {output_size!r}"
        )
    return entries


def _adaptive_avg_pool(fn, spatial, x, output_size):
    # a complex input to one cell: torch's mean over the spatial dims (its only complex form)
    complex_mean = isinstance(x, Tensor) and x.is_complex()
    x, squeeze = _batched(fn, x if complex_mean else _float_input(fn, x), spatial)
    output_size = _adaptive_output_size(fn, spatial, output_size)
    if len(output_size) != spatial:  # (a one-entry tuple too, as torch: no repeat)
        raise ShapeError(f"{fn}: output_size must have {spatial} entries, got {output_size!r}")
    # None keeps the input's size, as in PyTorch.
    sizes = tuple(n if o is None else o for o, n in zip(output_size, x.shape[2:]))
    if not all(isinstance(o, numbers.Integral) and o >= 0 for o in sizes):
        raise ShapeError(f"{fn}: output_size must be non-negative ints, got {output_size!r}")
    if complex_mean:
        if any(o != 1 for o in sizes):  # (torch's NotImplementedError)
            raise UnsupportedDTypeError(
                f"{fn}: a {x.dtype} input pools only to output size 1 (torch's mean), got "
                f"output_size {output_size!r}"
            )
        return _unbatched(x.mean(tuple(range(2, x.ndim)), keepdim=True), squeeze)
    if any(o != 1 for o in sizes):  # (to one cell torch takes the mean: NaN of nothing)
        # (torch's 3-d kernel also refuses a batched input without channels, its 1-d and
        # 2-d ones not)
        _refuse_empty_window(fn, x, squeeze, channels=spatial == 3)
    # torch's empty output, or its NaN means (and no kernel for an empty batch or no
    # channels: the torch backend's 3-d one refuses them where torch's function takes them)
    if not all(sizes) or not x.numel():
        dims = tuple(range(2, x.ndim))
        out = x.mean(dims, keepdim=True).expand((*x.shape[:2], *(int(o) for o in sizes)))
        return _unbatched(out, squeeze)
    out = apply(TensorOp(fn, kernel="adaptive_avg_pool"), (x,), (tuple(int(o) for o in sizes),))
    return _unbatched(out, squeeze)


def adaptive_avg_pool1d(x: Tensor, output_size: int | Sequence[int]) -> Tensor:
    """Average pooling to ``output_size`` cells, PyTorch's windows."""
    return _adaptive_avg_pool("adaptive_avg_pool1d", 1, x, output_size)


def adaptive_avg_pool2d(x: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """Average pooling to ``output_size`` (``None`` keeps a dimension), PyTorch's windows.

    >>> import retrograd as rg
    >>> adaptive_avg_pool2d(rg.ones((2, 3, 7, 5)), 1).shape
    retrograd.Size([2, 3, 1, 1])
    """
    out = _adaptive_avg_pool("adaptive_avg_pool2d", 2, x, output_size)
    return follow_channels_last(out, x)  # (torch's: the input's memory format)


@autocast_op("avg_pool3d")
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
    return_indices: bool = False,  # torch's, unused: the indices are always returned
) -> tuple[Tensor, Tensor]:
    return _max_pool("max_pool3d", 3, x, kernel_size, stride, padding, dilation, ceil_mode)


@autocast_op("max_pool3d")
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
    follow_channels_last(values, x)  # (torch's: the input's memory format, channels_last_3d)
    follow_channels_last(indices, x)
    return (values, indices) if return_indices else values


@autocast_op("adaptive_avg_pool3d")
def adaptive_avg_pool3d(x: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    return _adaptive_avg_pool("adaptive_avg_pool3d", 3, x, output_size)


def _adaptive_max_pool(fn: str, spatial: int, x: Tensor, output_size: Any, return_indices: bool):
    """Maximum over torch's adaptive windows (``floor(i n / o)`` to ``ceil((i + 1) n / o)``),
    one window at a time: the gradient goes to each window's maximum, as torch's. With
    ``return_indices``, also each maximum's flat index in its ``[N, C]`` plane."""
    x, squeeze = _batched(fn, _float_input(fn, x), spatial)
    # torch's adaptive_max_pool backward kernel reads the input (of zero derivative): under
    # create_graph the gradient is a function of it, not a constant
    (x,) = kernel_read_inputs(x)
    output_size = _adaptive_output_size(fn, spatial, output_size)
    sizes = tuple(n if o is None else int(o) for o, n in zip(output_size, x.shape[2:]))
    if len(output_size) != spatial or any(o < 0 for o in sizes):
        raise ShapeError(
            f"{fn}: output_size must be {spatial} non-negative ints, got {output_size!r}"
        )
    _refuse_empty_window(fn, x, squeeze, channels=True)
    # an output no memory holds is refused before a window is cut (torch's allocator refuses
    # it; cutting 2**40 windows first would never end)
    check_allocation(fn, (*x.shape[:2], *sizes), x.dtype, f"output_size {output_size!r}")
    if not all(sizes):  # torch's empty output (and indices)
        dims = tuple(range(2, x.ndim))
        out = _unbatched(x.sum(dims, keepdim=True).expand((*x.shape[:2], *sizes)), squeeze)
        return (out, out.long()) if return_indices else out
    if return_indices:
        values, indices = _adaptive_max_cells(x, sizes)
        return _unbatched(values, squeeze), _unbatched(indices, squeeze)
    cells = x
    # the last axis first: among tied maxima the gradient then goes to the first in
    # row-major order (the smallest row holding the maximum, its first column), as torch's
    for axis, (n, o) in reversed(list(enumerate(zip(x.shape[2:], sizes)))):
        cells = _adaptive_max_along(cells, 2 + axis, n, o)
    return _unbatched(cells, squeeze)


def _adaptive_max_along(cells: Tensor, dim: int, n: int, o: int) -> Tensor:
    """The maxima of ``o`` adaptive windows along ``dim`` (of size ``n``), all windows in one
    gather (a Python loop over windows takes minutes for a large ``output_size``): window
    ``i`` is read as ``k`` (the widest window's width) positions from its start, those past
    its end repeating its last one, which leaves its maximum, and the first of tied maxima
    (where the gradient goes), unchanged."""
    cells_at = np.arange(o, dtype=np.int64)
    starts, ends = (cells_at * n) // o, -((-(cells_at + 1) * n) // o)  # _adaptive_window's
    width = int((ends - starts).max())
    positions = np.minimum(starts[:, None] + np.arange(width), ends[:, None] - 1)
    gathered = cells.index_select(dim, _constant(cells, positions.reshape(-1)))
    shape = (*cells.shape[:dim], o, width, *cells.shape[dim + 1 :])
    windows = gathered.reshape(shape)
    first = windows.max(dim + 1).values
    if width == 1:
        return first
    # torch's kernel takes a later NaN over an earlier one (``val > max || isnan(val)``): in
    # a window holding NaNs the gradient goes to its last (in row-major order, taking the
    # last axis first); the first of tied numbers otherwise
    last = windows.flip((dim + 1,)).max(dim + 1).values
    return last.where(first.detach().isnan(), first)


def _refuse_empty_window(fn: str, x: Tensor, squeeze: bool, channels: bool = False) -> None:
    """torch's adaptive pools refuse an empty spatial dimension: every window would be empty
    (an average of nothing, NaN, where torch refuses). ``x`` is batched; ``squeeze``: the
    input was not (the message shows the input as given). With ``channels``, also a batched
    input without channels (the first dimension of an unbatched one is its batch, to torch)."""
    given = x.shape[1:] if squeeze else x.shape
    if any(n == 0 for n in x.shape[2:]) or (channels and not squeeze and x.shape[1] == 0):
        raise SizeMismatchError(
            f"{fn}: expected an input with non-zero sizes in its non-batch dimensions, got "
            f"{shape_text(given)}"
        )


def _adaptive_window(i: int, n: int, o: int) -> tuple[int, int]:
    return (i * n) // o, -(-((i + 1) * n) // o)


def _adaptive_max_cells(x: Tensor, sizes: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Values and flat indices (row-major over the spatial dims: ``(d * H + h) * W + w`` in 3-d)
    of the adaptive maxima of ``[N, C, *spatial]`` ``x``, one window at a time (the first
    maximum in row-major order, the last NaN where there are NaNs)."""
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    strides = [math.prod(spatial[axis + 1 :]) for axis in range(len(spatial))]
    values, indices = [], []
    for cell in itertools.product(*(range(o) for o in sizes)):
        window, starts, spans = x, [], []
        for axis, (i, size, o) in enumerate(zip(cell, spatial, sizes)):
            begin, end = _adaptive_window(i, size, o)
            window = window.narrow(2 + axis, begin, end - begin)
            starts.append(begin)
            spans.append(end - begin)
        flat = window.reshape((n, c, math.prod(spans)))
        value, rest = flat.max_dim_with_indices(2)
        if flat.shape[2] > 1:
            # torch's kernel takes a later NaN over an earlier one (``val > max ||
            # isnan(val)``): a window's last NaN is its maximum (the first of tied numbers
            # otherwise), its index and where the gradient goes
            reversed_at = flat.detach().flip((2,)).max_dim_with_indices(2)[1]
            rest = ((flat.shape[2] - 1) - reversed_at).where(value.detach().isnan(), rest)
            value = flat.gather(2, rest)
        index = None
        for axis in reversed(range(len(spans))):  # the window's flat index, last dim first
            term = (rest % spans[axis] + starts[axis]) * strides[axis]
            index = term if index is None else index + term
            rest = rest // spans[axis]
        indices.append(index)
        values.append(value)
    shape = (n, c, *sizes)
    return _cat(values, 2).reshape(shape), _cat(indices, 2).reshape(shape)


def _cat(pieces: list[Tensor], dim: int) -> Tensor:
    from ...tensor import cat

    return cat(pieces, dim)


def adaptive_max_pool1d(x: Tensor, output_size: Any, return_indices: bool = False) -> Tensor:
    return _adaptive_max_pool("adaptive_max_pool1d", 1, x, output_size, return_indices)


def adaptive_max_pool2d(x: Tensor, output_size: Any, return_indices: bool = False) -> Tensor:
    """Maximum pooling to ``output_size`` (``None`` keeps a dimension), torch's windows."""
    return _adaptive_max_pool("adaptive_max_pool2d", 2, x, output_size, return_indices)


@autocast_op("adaptive_max_pool3d")
def adaptive_max_pool3d(x: Tensor, output_size: Any, return_indices: bool = False) -> Tensor:
    """Maximum pooling of ``[N, C, D, H, W]`` (or ``[C, D, H, W]``) to ``output_size``."""
    return _adaptive_max_pool("adaptive_max_pool3d", 3, x, output_size, return_indices)


def adaptive_max_pool3d_with_indices(
    x: Tensor,
    output_size: Any,
    return_indices: bool = False,  # torch's, unused: the indices are always returned
) -> tuple[Tensor, Tensor]:
    """:func:`adaptive_max_pool3d` and the flat int64 index (``(d * H + h) * W + w``) of each
    maximum."""
    return _adaptive_max_pool("adaptive_max_pool3d", 3, x, output_size, True)


def adaptive_max_pool1d_with_indices(
    x: Tensor,
    output_size: Any,
    return_indices: bool = False,  # torch's, unused: the indices are always returned
) -> tuple[Tensor, Tensor]:
    """:func:`adaptive_max_pool1d` and the int64 index of each maximum."""
    return _adaptive_max_pool("adaptive_max_pool1d", 1, x, output_size, True)


def adaptive_max_pool2d_with_indices(
    x: Tensor,
    output_size: Any,
    return_indices: bool = False,  # torch's, unused: the indices are always returned
) -> tuple[Tensor, Tensor]:
    """:func:`adaptive_max_pool2d` and the flat int64 index (``h * W + w``) of each maximum."""
    return _adaptive_max_pool("adaptive_max_pool2d", 2, x, output_size, True)


# -- power-average pooling and max unpooling -------------------------------------------------------
def _lp_pool(fn, spatial, x, norm_type, kernel_size, stride, ceil_mode) -> Tensor:
    """torch's ``(sum over the window of x**p)**(1 / p)``: the average pool of ``x**p`` times
    the window's size, its sign kept (``sign(s) relu(|s|)``) before the root. An int64 or
    bool input is torch's too: its power pooled as integers (each window's sum divided toward
    zero), the root a float32 one. An infinite ``norm_type`` is torch's special case: the
    maximum of ``|x|`` over each window (``-inf``: minus the maximum of ``-|x|``)."""
    if isinstance(x, Tensor) and isinstance(norm_type, (int, float)) and math.isinf(norm_type):
        max_pool = {1: max_pool1d, 2: max_pool2d, 3: max_pool3d}[spatial]
        if norm_type > 0:
            return max_pool(x.abs(), kernel_size, stride, 0, 1, ceil_mode)
        return -max_pool(-x.abs(), kernel_size, stride, 0, 1, ceil_mode)
    if not (isinstance(x, Tensor) and x.dtype in ("int64", "bool")):
        x = _float_input(fn, x)
    kernel = _ints(fn, "kernel_size", kernel_size, spatial, 1)
    pool = {1: avg_pool1d, 2: avg_pool2d, 3: avg_pool3d}[spatial]
    sums = pool(x.pow(norm_type), kernel, stride, 0, ceil_mode)
    area = 1
    for k in kernel:
        area *= k
    return (sums.sign() * sums.abs().relu() * area).pow(1.0 / norm_type)


def lp_pool1d(
    input: Tensor,  # noqa: A002 (torch's name)
    norm_type: float,
    kernel_size: int,
    stride: IntOrTuple | None = None,
    ceil_mode: bool = False,
) -> Tensor:
    """1-d power-average pooling: the ``norm_type``-norm of each window."""
    infinite = isinstance(norm_type, (int, float)) and math.isinf(norm_type)  # a max pool
    if isinstance(kernel_size, (tuple, list)) and not infinite:  # torch multiplies by it
        raise DTypeError(f"lp_pool1d: kernel_size must be an int, got {kernel_size!r}")
    return _lp_pool("lp_pool1d", 1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(
    input: Tensor,  # noqa: A002 (torch's name)
    norm_type: float,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    ceil_mode: bool = False,
) -> Tensor:
    """2-d power-average pooling: the ``norm_type``-norm of each window.

    >>> import retrograd as rg
    >>> lp_pool2d(rg.full((1, 1, 2, 2), 2.0), 2, 2).tolist()
    [[[[4.0]]]]
    """
    return _lp_pool("lp_pool2d", 2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(
    input: Tensor,  # noqa: A002 (torch's name)
    norm_type: float,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    ceil_mode: bool = False,
) -> Tensor:
    """3-d power-average pooling: the ``norm_type``-norm of each window."""
    return _lp_pool("lp_pool3d", 3, input, norm_type, kernel_size, stride, ceil_mode)


def _unpool_size(fn, x, kernel, stride, padding, output_size) -> tuple[int, ...]:
    """torch's ``_unpool_output_size``: ``(in - 1) stride - 2 padding + kernel``, or
    ``output_size`` (with or without its leading ``N, C``) within ``stride`` of that."""
    spatial = len(kernel)
    default = tuple(
        (n - 1) * s + k - 2 * p for n, s, k, p in zip(x.shape[-spatial:], stride, kernel, padding)
    )
    if output_size is None:
        return default
    size = tuple(int(v) for v in output_size)
    if len(size) == spatial + 2:
        size = size[2:]
    if len(size) != spatial or not all(d - s < v < d + s for v, d, s in zip(size, default, stride)):
        raise ShapeError(
            f"{fn}: output_size {tuple(output_size)} is invalid: expected {spatial} sizes, each "
            f"within the stride of the default {default}; input {shape_text(x.shape)}"
        )
    return size


def _max_unpool(fn, spatial, x, indices, kernel_size, stride, padding, output_size) -> Tensor:
    """Each value of ``x`` written at its flat ``indices`` in a zero ``[N, C, *out]`` plane
    (max pooling's indices undo it); the gradient reads the plane back at the indices."""
    x, squeeze = _batched(fn, _float_input(fn, x), spatial)
    indices = _as_tensor(fn, x, indices, "indices")
    if squeeze:
        indices = indices.unsqueeze_dim(0)
    if indices.dtype != "int64" or indices.shape != x.shape:
        raise SizeMismatchError(
            f"{fn}: indices must be int64 with the input's shape; input {shape_text(x.shape)}, "
            f"indices {indices.dtype} {shape_text(indices.shape)}"
        )
    kernel = _ints(fn, "kernel_size", kernel_size, spatial, 1)
    strides = kernel if stride is None else _ints(fn, "stride", stride, spatial, 1)
    pads = _ints(fn, "padding", padding, spatial, 0)
    size = _unpool_size(fn, x, kernel, strides, pads, output_size)
    plane = 1
    for v in size:
        plane *= v

    def out_of_range(bad: int | None) -> InvalidMaxIndexError:
        value = "an index" if bad is None else f"index {bad}"
        return InvalidMaxIndexError(  # (torch's RuntimeError: "Found an invalid max index")
            f"{fn}: {value} is out of range for an output of size {size} ({plane} elements)"
        )

    n, c = x.shape[:2]
    cells = math.prod(x.shape[2:])  # (not -1: N may be 0)
    flat = x.reshape((n, c, cells))
    if plane == 0 and min(size) == 0:
        # torch returns the empty plane without reading the indices (a pool of padding 1 and
        # kernel 2 over one element unpools to size 0); sliced from x to keep the graph
        return _unbatched(flat[:, :, :0].reshape((n, c, *size)), squeeze)
    check_indices(indices, plane, out_of_range)
    out = flat.new_zeros((n, c, plane)).scatter(2, indices.reshape((n, c, cells)), flat)
    return _unbatched(out.reshape((n, c, *size)), squeeze)


def max_unpool1d(
    input: Tensor,  # noqa: A002 (torch's name)
    indices: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    output_size: Sequence[int] | None = None,
) -> Tensor:
    """The partial inverse of :func:`max_pool1d`: maxima back at their indices, zeros
    elsewhere."""
    return _max_unpool("max_unpool1d", 1, input, indices, kernel_size, stride, padding, output_size)


@autocast_op("max_unpool2d")
def max_unpool2d(
    input: Tensor,  # noqa: A002 (torch's name)
    indices: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    output_size: Sequence[int] | None = None,
) -> Tensor:
    """The partial inverse of :func:`max_pool2d`: maxima back at their indices, zeros
    elsewhere.

    >>> import retrograd as rg
    >>> x = rg.tensor([[[[1.0, 2.0], [4.0, 3.0]]]])
    >>> values, indices = max_pool2d(x, 2, return_indices=True)
    >>> max_unpool2d(values, indices, 2).tolist()
    [[[[0.0, 0.0], [4.0, 0.0]]]]
    """
    return _max_unpool("max_unpool2d", 2, input, indices, kernel_size, stride, padding, output_size)


@autocast_op("max_unpool3d")
def max_unpool3d(
    input: Tensor,  # noqa: A002 (torch's name)
    indices: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    output_size: Sequence[int] | None = None,
) -> Tensor:
    """The partial inverse of :func:`max_pool3d`."""
    return _max_unpool("max_unpool3d", 3, input, indices, kernel_size, stride, padding, output_size)


# -- fractional max pooling ------------------------------------------------------------------------
def _fractional_starts(sample: Tensor, length: int, out: int, kernel: int) -> Tensor:
    """Each pooling window's first cell along one axis, for every sample (``[N, C]`` of them):
    torch's pseudo-random sequence (Graham's fractional max pooling), computed in the samples'
    own float type and truncated to ints as torch's kernel does, so that given the same
    samples the windows are torch's exactly. The last window always ends at the input's end.
    Returns ``[N, C, out]`` int64, computed on the samples' device (reading the samples on
    the host would stall an accelerator's queue at every call)."""
    last = sample.new_full((*sample.shape, 1), length - kernel, dtype="int64")
    if out <= 1:
        return last[..., :out]
    kind = np.dtype(sample.dtype).type
    alpha = float(kind(length - kernel) / kind(out - 1))  # (exact in the samples' type)
    steps = _constant(sample, np.arange(out - 1).astype(kind))
    scaled = (steps + sample.unsqueeze(-1)) * alpha
    first = (sample * alpha).to("int64").unsqueeze(-1)
    return cat([scaled.to("int64") - first, last], -1)


def _constant(x: Tensor, array: np.ndarray) -> Tensor:
    """``array`` (of the shapes alone) on ``x``'s device, copied there once and kept."""
    return host_constant(type(x)._result, array, x.backend, x.device)


def _fractional_samples(fn: str, x: Tensor, samples: Any, spatial: int) -> Tensor:
    """The uniform samples (``[N, C, spatial]``, one per plane and axis), untracked, in ``x``'s
    dtype (float32 for bfloat16): ``samples`` checked as torch checks ``_random_samples``, or
    fresh ones drawn from the global generator when it is ``None``."""
    n, c = x.shape[:2]
    if samples is None:
        samples = rand((n, c, spatial), dtype=x.dtype, backend=x.backend, device=x.device)
    if not isinstance(samples, Tensor):
        raise DTypeError(f"{fn}: _random_samples must be a tensor, got {type(samples).__name__}")
    if samples.dtype != x.dtype:
        raise DTypeError(
            f"{fn}: _random_samples must have the input's dtype {x.dtype}, got {samples.dtype}"
        )
    if samples.ndim != 3 or samples.shape[1:] != (c, spatial) or samples.shape[0] < n:
        raise ShapeError(
            f"{fn}: _random_samples must be [N, C, {spatial}] with N at least the batch size "
            f"{n} and C = {c} channels, got {shape_text(samples.shape)} for input "
            f"{shape_text(x.shape)}"
        )
    samples = _as_tensor(fn, x, samples.detach(), "_random_samples")[:n]
    return samples.to("float32") if x.dtype == "bfloat16" else samples


def _fractional_max_pool(
    fn: str,
    spatial: int,
    input: Any,  # noqa: A002 (torch's name)
    kernel_size: Any,
    output_size: Any,
    output_ratio: Any,
    random_samples: Any,
) -> tuple[Tensor, Tensor]:
    """Values and flat int64 indices of fractional max pooling of ``[N, C, *spatial]`` (or
    unbatched) ``input``: windows of ``kernel_size`` starting at torch's pseudo-random
    positions (:func:`_fractional_starts`), the maximum of each (the first in row-major order;
    the last NaN where a window holds one, as torch's kernel). The values are gathered from the
    input at the maxima's indices, so the gradient goes to each maximum (summed where windows
    overlap), as torch's backward scatters it."""
    x, squeeze = _batched(fn, _float_input(fn, input), spatial)
    # torch's backward kernel reads the input (of zero derivative): see kernel_read_inputs
    (x,) = kernel_read_inputs(x)
    kernel = _ints(fn, "kernel_size", kernel_size, spatial, 1)
    sizes = x.shape[2:]
    if output_size is None and output_ratio is None:
        raise InvalidArgumentError(
            f"{fn}: requires specifying either an output_size or an output_ratio"
        )
    if output_size is None:
        ratios = _ratios(fn, output_ratio, spatial)
        out = tuple(int(n * r) for n, r in zip(sizes, ratios))
    else:
        out = _ints(fn, "output_size", output_size, spatial, 0)
    # torch's 3-d kernel wants one cell to spare (a strict bound), its 2-d one not
    spare = 1 if spatial == 3 else 0
    for axis, (n, o, k) in enumerate(zip(sizes, out, kernel)):
        if o + k - 1 + spare > n:
            bound = "<" if spare else "<="
            raise SizeMismatchError(
                f"{fn}: kernel size {k} too large for output size {o} along spatial dimension "
                f"{axis} of size {n} (needs output_size + kernel_size - 1 {bound} input size); "
                f"input {shape_text(x.shape)}"
            )
    samples = _fractional_samples(fn, x, random_samples, spatial)
    n, c = x.shape[:2]
    # torch's 2-d kernel reads each plane's samples as (W, H), its 3-d one as (T, H, W)
    order = (1, 0) if spatial == 2 else tuple(range(spatial))
    strides = [math.prod(sizes[axis + 1 :]) for axis in range(spatial)]
    made = dict(backend=x.backend, device=x.device)
    flat = zeros((n, c) + (1,) * (2 * spatial), dtype="int64", **made)
    for axis in range(spatial):
        sample = samples[..., order[axis]]
        starts = _fractional_starts(sample, sizes[axis], out[axis], kernel[axis])
        cells = starts.unsqueeze(-1) + _constant(x, np.arange(kernel[axis], dtype=np.int64))
        shape = [n, c] + [1] * (2 * spatial)  # cells: [N, C, out, kernel]
        shape[2 + axis], shape[2 + spatial + axis] = out[axis], kernel[axis]
        flat = flat + (cells * strides[axis]).reshape(shape)
    cells_out, window = math.prod(out), math.prod(kernel)
    windows = flat.reshape((n, c, cells_out * window))
    planes = x.reshape((n, c, math.prod(sizes)))
    seen = planes.detach().gather(2, windows).reshape((n, c, cells_out, window))
    nan = seen.isnan()
    last_nan = (window - 1) - nan.flip(-1).long().argmax(-1)
    choice = seen.argmax(-1).where(~nan.any(-1), last_nan)
    indices = windows.reshape((n, c, cells_out, window)).gather(3, choice.unsqueeze(-1))
    indices = indices.reshape((n, c, cells_out))
    values = planes.gather(2, indices).reshape((n, c, *out))
    return _unbatched(values, squeeze), _unbatched(indices.reshape((n, c, *out)), squeeze)


def _ratios(fn: str, output_ratio: Any, spatial: int) -> tuple[float, ...]:
    """``output_ratio`` (a number, or one per spatial dimension) as ``spatial`` floats."""
    ratios = (output_ratio,) * spatial if isinstance(output_ratio, numbers.Real) else output_ratio
    try:
        ratios = tuple(float(r) for r in ratios)
    except TypeError:
        ratios = ()
    if len(ratios) == 1:
        ratios *= spatial
    if len(ratios) != spatial:
        raise ShapeError(
            f"{fn}: output_ratio must be a number or a tuple of {spatial} numbers, got "
            f"{output_ratio!r}"
        )
    return ratios


def fractional_max_pool2d_with_indices(
    input: Tensor,  # noqa: A002 (torch's name)
    kernel_size: IntOrTuple,
    output_size: IntOrTuple | None = None,
    output_ratio: float | Sequence[float] | None = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`fractional_max_pool2d`'s values and the flat int64 index (``h * W + w``) of
    each maximum."""
    return _fractional_max_pool(
        "fractional_max_pool2d", 2, input, kernel_size, output_size, output_ratio,
        _random_samples,
    )  # fmt: skip


@autocast_op("fractional_max_pool2d")
def fractional_max_pool2d(
    input: Tensor,  # noqa: A002 (torch's name)
    kernel_size: IntOrTuple,
    output_size: IntOrTuple | None = None,
    output_ratio: float | Sequence[float] | None = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> Any:
    """2-d fractional max pooling (Graham, 2014), torch's: ``kernel_size`` windows at
    pseudo-random steps that give ``output_size`` cells (or ``output_ratio`` of the input's
    size). ``_random_samples`` (``[N, C, 2]``, in the input's dtype) fixes the steps; given
    torch's samples the windows, values and indices are torch's.

    >>> import retrograd as rg
    >>> fractional_max_pool2d(rg.ones((1, 1, 5, 5)), 2, output_size=3).shape
    retrograd.Size([1, 1, 3, 3])
    """
    values, indices = fractional_max_pool2d_with_indices(
        input, kernel_size, output_size, output_ratio, return_indices, _random_samples
    )
    return (values, indices) if return_indices else values


def fractional_max_pool3d_with_indices(
    input: Tensor,  # noqa: A002 (torch's name)
    kernel_size: IntOrTuple,
    output_size: IntOrTuple | None = None,
    output_ratio: float | Sequence[float] | None = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`fractional_max_pool3d`'s values and the flat int64 index
    (``(t * H + h) * W + w``) of each maximum."""
    return _fractional_max_pool(
        "fractional_max_pool3d", 3, input, kernel_size, output_size, output_ratio,
        _random_samples,
    )  # fmt: skip


@autocast_op("fractional_max_pool3d")
def fractional_max_pool3d(
    input: Tensor,  # noqa: A002 (torch's name)
    kernel_size: IntOrTuple,
    output_size: IntOrTuple | None = None,
    output_ratio: float | Sequence[float] | None = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> Any:
    """3-d fractional max pooling of ``[N, C, T, H, W]`` (or ``[C, T, H, W]``), torch's;
    ``_random_samples`` is ``[N, C, 3]``."""
    values, indices = fractional_max_pool3d_with_indices(
        input, kernel_size, output_size, output_ratio, return_indices, _random_samples
    )
    return (values, indices) if return_indices else values
