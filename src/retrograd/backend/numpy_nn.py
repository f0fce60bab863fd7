"""NumPy kernels of the neural-network primitives (convolution, pooling, interpolation).

Convolutions are im2col: a copy of the strided windows of the (padded) input into a column
buffer, then one batched matmul. Their adjoints are the matching transposed products: the
transposed convolution multiplies by the transposed weight and folds the columns back (col2im,
one strided add per kernel offset), and the weight gradient multiplies the output gradient by
the columns. The column buffer is 9x the input for a 3x3 kernel, so the batch is processed in
blocks whose columns fit in cache (:data:`COLUMN_BLOCK_BYTES`): each block is one window copy,
one matmul and, for col2im, one add per kernel offset, all vectorized; written and read back
while cached, this runs 1.5-2x faster than one pass over DRAM-sized columns. Pooling and
interpolation work on whole arrays. The only Python loops are over batch blocks, kernel
offsets, interpolation taps and spatial axes, never over pixels.

Shapes are ``[N, C, *spatial]`` with 1 to 3 spatial dimensions; every tuple parameter has one
entry per spatial dimension, as the protocol (:class:`~retrograd.backend.protocol.Backend`)
describes.

Memory layout (never the shape) is the kernels' choice, as PyTorch's ``channels_last``
memory format: ungrouped convolutions and transposed convolutions write channels-last
arrays (``[N, *spatial, C]`` in memory, shape ``[N, C, *spatial]``), elementwise NumPy
ufuncs keep that layout, pooling keeps its input's, and a convolution of a channels-last
input copies its columns in runs of ``kernel[-1] * C`` contiguous values instead of
``out[-1]`` and multiplies a whole batch block at once. In the benchmark CNN this makes the
second convolution's forward about 20% faster. Any layout is accepted: values never depend
on it beyond rounding (tests/test_nn_layouts.py).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .sizes import conv_output_size, conv_transpose_output_size, pool_output_size

__all__ = ["NumpyNNKernels"]


# -- helpers --------------------------------------------------------------------------------------
def channels_last(x: np.ndarray) -> bool:
    """Whether ``x`` ``[N, C, *spatial]`` (C > 1) lies in memory as a C-contiguous
    ``[N, *spatial, C]``: the layout convolutions write their outputs in."""
    return x.ndim > 2 and x.shape[1] > 1 and np.moveaxis(x, 1, -1).flags.c_contiguous


def _empty_like_layout(x: np.ndarray, shape) -> np.ndarray:
    """An uninitialized ``[N, C, *spatial]`` array of ``shape``, channels-last if ``x`` is."""
    if channels_last(x):
        return np.moveaxis(np.empty((shape[0], *shape[2:], shape[1]), dtype=x.dtype), -1, 1)
    return np.empty(shape, dtype=x.dtype)


def _channel_rows(x: np.ndarray) -> np.ndarray:
    """``x`` ``[N, C, *spatial]`` as matrices ``[N, C, prod(spatial)]``, a view (no copy) in
    either layout."""
    n, c = x.shape[:2]
    cells = math.prod(x.shape[2:])
    if channels_last(x):
        return np.moveaxis(x, 1, -1).reshape(n, cells, c).transpose(0, 2, 1)
    return x.reshape(n, c, cells)


def _axis_slices(offsets, lengths, strides, dilations):
    """For a kernel offset per axis: the slice of the padded input each output reads."""
    return tuple(
        slice(k * d, k * d + s * (n - 1) + 1, s)
        for k, n, s, d in zip(offsets, lengths, strides, dilations)
    )


def _place(x: np.ndarray, before, total_lengths, fill) -> np.ndarray:
    """``x`` placed at offset ``before`` in an array of spatial ``total_lengths`` filled with
    ``fill``; the part of ``x`` beyond ``total_lengths`` is cut off."""
    spatial = x.shape[2:]
    if all(b == 0 for b in before) and tuple(total_lengths) == tuple(spatial):
        return x
    out = _empty_like_layout(x, x.shape[:2] + tuple(total_lengths))
    out.fill(fill)
    target, source = [], []
    for b, n, total in zip(before, spatial, total_lengths):
        end = min(b + n, total)
        target.append(slice(b, end))
        source.append(slice(0, end - b))
    out[(slice(None), slice(None), *target)] = x[(slice(None), slice(None), *source)]
    return out


#: Bytes of im2col columns per batch block: small enough to stay in cache between the copy
#: (or matmul) that writes them and the matmul (or fold) that reads them.
COLUMN_BLOCK_BYTES = 2 << 20


def _batch_blocks(n: int, sample_bytes: int):
    """``(size, starts)``: batch blocks whose columns take about :data:`COLUMN_BLOCK_BYTES`."""
    size = max(1, min(n, COLUMN_BLOCK_BYTES // max(sample_bytes, 1)))
    return size, range(0, n, size)


def _windows(x, kernel, stride, padding, dilation, out_size, fill=0):
    """A view ``[N, C, *kernel, *out_size]`` of the windows of ``x`` padded with ``fill``:
    element ``[n, c, k..., o...]`` is the input cell kernel offset ``k`` of output ``o``
    reads."""
    extents = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    needed = [s * (o - 1) + e for s, o, e in zip(stride, out_size, extents)]
    xp = _place(x, padding, needed, fill)
    ndim = len(kernel)
    windows = sliding_window_view(xp, extents, axis=tuple(range(2, 2 + ndim)))
    windows = windows[
        (slice(None), slice(None))
        + tuple(slice(None, None, s) for s in stride)
        + tuple(slice(None, None, d) for d in dilation)
    ]
    # [N, C, *out, *kernel] -> [N, C, *kernel, *out]
    return windows.transpose(0, 1, *range(2 + ndim, 2 + 2 * ndim), *range(2, 2 + ndim))


def _im2col_blocks(x, kernel, stride, padding, dilation, groups, out_size, out_channels=0):
    """Yield ``(start, stop, columns)`` per batch block: the columns
    ``[stop-start, groups, C/groups * prod(kernel), prod(out_size)]`` of ``x[start:stop]``.

    Row ``(c, k...)`` holds input channel ``c`` at kernel offset ``k``, so that
    ``weight @ columns`` is the convolution in NCHW. One buffer serves every block.
    A channels-last ``x`` (``groups == 1`` only) has its columns stored transposed,
    ``[stop-start, prod(out_size), prod(kernel) * C]`` with rows ordered ``(k..., c)``: they
    are copied in runs of ``kernel[-1] * C`` contiguous values rather than ``out_size[-1]``,
    which makes the copy much cheaper. They are yielded as the transposed view, so the shape
    is the same either way. ``out_channels``: the caller writes that many values per output
    cell while the block is cached; they count towards the block's size.
    """
    n, c = x.shape[:2]
    ndim = len(kernel)
    windows = _windows(x, kernel, stride, padding, dilation, out_size)
    rows, cells = (c // groups) * math.prod(kernel), math.prod(out_size)
    size, starts = _batch_blocks(n, (c * math.prod(kernel) + out_channels) * cells * x.itemsize)
    last = _columns_channels_last(x, groups)
    if last:  # [N, C, *kernel, *out] -> [N, *out, *kernel, C]
        windows = windows.transpose(0, *range(2 + ndim, 2 + 2 * ndim), *range(2, 2 + ndim), 1)
    buffer = np.empty((size, *windows.shape[1:]), dtype=x.dtype)
    for start in starts:
        stop = min(start + size, n)
        block = buffer[: stop - start]
        np.copyto(block, windows[start:stop])
        if last:  # the same [B, G, rows, cells] interface, as transposed matrices
            yield start, stop, block.reshape(stop - start, 1, cells, rows).swapaxes(2, 3)
        else:
            yield start, stop, block.reshape(stop - start, groups, rows, cells)


def _columns_channels_last(x: np.ndarray, groups: int) -> bool:
    """Whether :func:`_im2col_blocks` orders the rows of ``x``'s columns ``(k..., c)``."""
    return groups == 1 and channels_last(x)


def _weight_rows(weight: np.ndarray, groups: int, last: bool) -> np.ndarray:
    """``weight`` ``[O, C/G, *kernel]`` as ``[G, O/G, rows]``, rows ordered as the columns."""
    if last:
        weight = np.moveaxis(weight, 1, -1)
    return weight.reshape(groups, weight.shape[0] // groups, -1)


def _fold(out, columns, kernel, stride, dilation, in_size, last=False):
    """col2im: add ``columns`` ``[N, C, *kernel, *in_size]`` into ``out`` ``[N, C, *full]``
    (the padded output), one strided add per kernel offset. With ``last``, both are
    channels-last: ``columns`` ``[N, *in_size, *kernel, C]`` into ``out`` ``[N, *full, C]``."""
    everything = slice(None)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        cells = _axis_slices(offsets, in_size, stride, dilation)
        if last:
            taps = (everything,) * (1 + len(in_size))
            out[(everything, *cells, everything)] += columns[(*taps, *offsets, everything)]
        else:
            out[(everything, everything, *cells)] += columns[(everything, everything, *offsets)]


def _fold_axis(g, axis, kernel, stride, padding, length):
    """Adjoint of "window sums along ``axis``": spread each window's value over its cells."""
    count = g.shape[axis]
    full = max(stride * (count - 1) + kernel, padding + length)
    shape = list(g.shape)
    shape[axis] = full
    out = np.zeros(shape, dtype=g.dtype)
    index = [slice(None)] * g.ndim
    for k in range(kernel):
        index[axis] = slice(k, k + stride * (count - 1) + 1, stride)
        out[tuple(index)] += g
    index[axis] = slice(padding, padding + length)
    return out[tuple(index)]


def _window_counts(length, kernel, stride, padding, count, include_pad):
    """How many cells each of ``count`` windows along one axis averages (PyTorch's divisor)."""
    starts = np.arange(count) * stride - padding
    ends = np.minimum(starts + kernel, length + padding)
    if include_pad:
        return ends - starts
    return np.minimum(ends, length) - np.maximum(starts, 0)


def _avg_pool_divisor(
    spatial, out_size, kernel, stride, padding, count_include_pad, divisor_override, dtype
):
    """What each average-pooling window's sum is divided by: ``divisor_override`` when given,
    else PyTorch's count of the window's cells, ``out_size`` shaped."""
    if divisor_override is not None:
        return np.asarray(divisor_override, dtype=dtype)
    divisor = np.ones((), dtype=dtype)
    for axis, (n, o, k, s, p) in enumerate(zip(spatial, out_size, kernel, stride, padding)):
        counts = _window_counts(n, k, s, p, o, count_include_pad).astype(dtype)
        divisor = np.multiply.outer(divisor, counts) if axis else counts
    return divisor


def _along(array, axis, matrix):
    """Apply ``matrix`` ``[out, in]`` to ``axis`` of ``array``."""
    moved = np.moveaxis(array, axis, -1)
    return np.moveaxis(np.matmul(moved, matrix.T), -1, axis)


def _adaptive_matrix(length, out, dtype):
    """Rows average PyTorch's adaptive windows ``[floor(i*L/out), ceil((i+1)*L/out))``."""
    i = np.arange(out)
    starts = (i * length) // out
    ends = -((-(i + 1) * length) // out)
    positions = np.arange(length)
    inside = (positions >= starts[:, None]) & (positions < ends[:, None])
    return (inside / (ends - starts)[:, None]).astype(dtype)


# -- interpolation taps ----------------------------------------------------------------------------
_CUBIC_A = -0.75


def _source_scale(length, out, align_corners, scale, real):
    """PyTorch's source-coordinate scale: (L-1)/(out-1) when aligning corners, else 1/scale
    when a scale factor was given, else L/out."""
    if align_corners:
        return real(length - 1) / real(out - 1) if out > 1 else real(0)
    if scale is not None and scale > 0:
        return real(1.0 / scale)
    return real(length) / real(out)


def _interpolation_taps(length, out, mode, align_corners, scale, dtype):
    """Per output position along one axis: input indices ``[taps, out]`` and their weights.

    Indices never decrease along the output axis, which the adjoint relies on.
    """
    real = np.dtype(dtype).type
    positions = np.arange(out)
    if mode == "nearest":
        if out == length:
            index = positions
        elif out == 2 * length:
            index = positions // 2
        else:  # PyTorch's legacy "nearest": floor(dst * scale), in float32 whatever the dtype
            ratio = _source_scale(length, out, False, scale, np.float32)
            index = np.floor(positions.astype(np.float32) * ratio).astype(np.int64)
            index = np.minimum(index, length - 1)
        return index[None, :], np.ones((1, out), dtype=dtype)
    ratio = _source_scale(length, out, align_corners, scale, real)
    if align_corners:
        source = positions.astype(dtype) * ratio
    else:
        source = (positions.astype(dtype) + real(0.5)) * ratio - real(0.5)
    if mode == "linear":
        source = np.maximum(source, real(0))
        low = source.astype(np.int64)  # source >= 0: truncation is floor
        frac = source - low.astype(dtype)
        high = np.minimum(low + 1, length - 1)
        return np.stack([low, high]), np.stack([1 - frac, frac]).astype(dtype)
    # bicubic: four taps around floor(source), clamped to the input, Keys' kernel with A=-0.75
    base = np.minimum(np.floor(source), real(length - 1))
    t = np.clip(source - base, 0, 1).astype(dtype)
    a = real(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = np.stack([far(t + 1), near(t), near(1 - t), far((1 - t) + 1)]).astype(dtype)
    base = base.astype(np.int64)
    index = np.stack([np.clip(base + k, 0, length - 1) for k in (-1, 0, 1, 2)])
    return index, weights


def _gather_axis(x, axis, index, weights):
    """Forward interpolation along ``axis``: ``sum_t weights[t] * x[..., index[t], ...]``."""
    shape = [1] * x.ndim
    shape[axis] = -1
    out = None
    for tap_index, tap_weights in zip(index, weights):
        term = np.take(x, tap_index, axis=axis)
        if not np.all(tap_weights == 1):
            term *= tap_weights.reshape(shape)
        out = term if out is None else out + term
    return out


def _scatter_axis(g, axis, index, weights, length):
    """Adjoint of :func:`_gather_axis`: indices never decrease, so the outputs that read one
    input cell are a contiguous run, summed by one ``reduceat`` per tap."""
    shape = [1] * g.ndim
    shape[axis] = -1
    out_shape = list(g.shape)
    out_shape[axis] = length
    out = np.zeros(out_shape, dtype=g.dtype)
    target = [slice(None)] * g.ndim
    for tap_index, tap_weights in zip(index, weights):
        term = g if np.all(tap_weights == 1) else g * tap_weights.reshape(shape)
        starts = np.flatnonzero(np.r_[True, tap_index[1:] != tap_index[:-1]])
        target[axis] = tap_index[starts]
        out[tuple(target)] += np.add.reduceat(term, starts, axis=axis)
    return out


def _first_real_cells(spatial, out_size, stride, padding, dilation, places):
    """Flat index of each window's first cell inside the input (clipped into it for the
    degenerate windows that cover only padding)."""
    first_real = np.zeros((), dtype=np.int64)
    for length, o, s, p, d, place in zip(spatial, out_size, stride, padding, dilation, places):
        starts = np.arange(o) * s - p
        first = np.where(starts < 0, starts - (starts // d) * d, starts)
        first_real = np.add.outer(first_real, np.clip(first, 0, length - 1) * place)
    return first_real


def _max_pool_masked(cells, window_start, displacements, first_real, has_nan):
    """Max pooling with masked updates, for inputs holding NaN or -inf.

    A later cell wins only if strictly greater, or NaN (which propagates, the last NaN
    winning, as in PyTorch). Padding is -inf and never wins, so a window whose real cells are
    all -inf keeps its first real cell.
    """
    best = np.full(cells.shape[1:], -np.inf, dtype=cells.dtype)
    indices = np.broadcast_to(first_real, best.shape).copy()
    for cell, displacement in zip(cells, displacements):
        better = np.greater(cell, best)
        if has_nan:
            better |= np.isnan(cell)
        np.maximum(best, cell, out=best)
        np.copyto(indices, window_start + displacement, where=better)
    return best, indices


class NumpyNNKernels:
    """The neural-network primitives of :class:`~retrograd.backend.NumpyBackend`."""

    # -- convolution ----------------------------------------------------------------------------
    def conv(self, x, weight, bias, stride, padding, dilation, groups):
        n = x.shape[0]
        c_out = weight.shape[0]
        kernel = weight.shape[2:]
        out_size = tuple(
            conv_output_size(length, k, s, p, d)
            for length, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)
        )
        w = _weight_rows(weight, groups, _columns_channels_last(x, groups))
        blocks = _im2col_blocks(x, kernel, stride, padding, dilation, groups, out_size, c_out)
        cells = math.prod(out_size)
        if groups == 1:
            # Written channels-last ([N, *out, C_out] in memory, the transposed product), the
            # layout whose columns the next convolution copies fastest.
            out = np.empty((n, cells, c_out), dtype=x.dtype)
            for start, stop, columns in blocks:
                rows = columns[:, 0].swapaxes(1, 2)  # [B, cells, rows]
                if rows.flags.c_contiguous:  # channels-last columns: one product per block
                    rows = rows.reshape(-1, rows.shape[2])
                block = out[start:stop].reshape(rows.shape[:-1] + (c_out,))
                np.matmul(rows, w[0].T, out=block)
                if bias.size:  # while the block is in cache
                    block += bias
            return np.moveaxis(out.reshape(n, *out_size, c_out), -1, 1)
        out = np.empty((n, groups, c_out // groups, cells), dtype=x.dtype)
        per_channel = bias.reshape(groups, c_out // groups, 1) if bias.size else None
        for start, stop, columns in blocks:
            block = np.matmul(w, columns, out=out[start:stop])
            if per_channel is not None:
                block += per_channel
        return out.reshape(n, c_out, *out_size)

    def conv_transpose(self, x, weight, bias, stride, padding, output_padding, dilation, groups):
        n, c_in = x.shape[:2]
        kernel = weight.shape[2:]
        per_group_out = weight.shape[1]
        c_out = groups * per_group_out
        in_size = x.shape[2:]
        out_size = tuple(
            conv_transpose_output_size(*args)
            for args in zip(in_size, kernel, stride, padding, output_padding, dilation)
        )
        extents = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
        full = [
            max(s * (m - 1) + e, p + o)
            for s, m, e, p, o in zip(stride, in_size, extents, padding, out_size)
        ]
        crop = tuple(slice(p, p + o) for p, o in zip(padding, out_size))
        if groups == 1:
            # Channels-last, as conv: columns [B, *in, *kernel, C_out] = x^T @ weight, folded
            # into the padded output with one add of runs of C_out values per kernel offset.
            out = np.empty((n, *full, c_out), dtype=x.dtype)
            out[...] = bias if bias.size else 0
            w = np.moveaxis(weight, 1, -1).reshape(c_in, -1)
            xs = _channel_rows(x).swapaxes(1, 2)
            size, starts = _batch_blocks(n, w.shape[1] * xs.shape[1] * x.itemsize)
            buffer = np.empty((size, xs.shape[1], w.shape[1]), dtype=x.dtype)
            for start in starts:
                stop = min(start + size, n)
                columns = np.matmul(xs[start:stop], w, out=buffer[: stop - start])
                columns = columns.reshape(stop - start, *in_size, *kernel, c_out)
                _fold(out[start:stop], columns, kernel, stride, dilation, in_size, last=True)
            out = np.ascontiguousarray(out[(slice(None), *crop, slice(None))])
            return np.moveaxis(out, -1, 1)
        out = np.empty((n, c_out, *full), dtype=x.dtype)
        out[...] = bias.reshape((c_out,) + (1,) * len(full)) if bias.size else 0
        # columns[n, g, (o, k...), l] = sum_c weight[g, c, (o, k...)] * x[n, g, c, l], folded
        # into the padded output block by block while they are in cache.
        w = weight.reshape(groups, c_in // groups, per_group_out * math.prod(kernel))
        w = w.transpose(0, 2, 1)
        xs = _channel_rows(x).reshape(n, groups, c_in // groups, math.prod(in_size))
        size, starts = _batch_blocks(n, w.shape[1] * groups * xs.shape[3] * x.itemsize)
        buffer = np.empty((size, groups, w.shape[1], xs.shape[3]), dtype=x.dtype)
        for start in starts:
            stop = min(start + size, n)
            columns = np.matmul(w, xs[start:stop], out=buffer[: stop - start])
            columns = columns.reshape(stop - start, c_out, *kernel, *in_size)
            _fold(out[start:stop], columns, kernel, stride, dilation, in_size)
        return out[(slice(None), slice(None), *crop)]

    def conv_weight_grad(self, x, out_grad, kernel_size, stride, padding, dilation, groups):
        c_in = x.shape[1]
        c_out = out_grad.shape[1]
        out_size = out_grad.shape[2:]
        g = _channel_rows(out_grad).reshape(
            out_grad.shape[0], groups, c_out // groups, math.prod(out_size)
        )
        grad = np.zeros(
            (groups, c_out // groups, (c_in // groups) * math.prod(kernel_size)), dtype=x.dtype
        )
        for start, stop, columns in _im2col_blocks(
            x, kernel_size, stride, padding, dilation, groups, out_size
        ):
            # [B, G, O/G, L] @ [B, G, L, C/G*K], summed over the block
            grad += np.matmul(g[start:stop], columns.swapaxes(2, 3)).sum(axis=0)
        if _columns_channels_last(x, groups):  # rows (k..., c) -> (c, k...)
            grad = np.moveaxis(grad.reshape(c_out, *kernel_size, c_in), -1, 1)
        return np.ascontiguousarray(grad.reshape(c_out, c_in // groups, *kernel_size))

    # -- pooling ----------------------------------------------------------------------------------
    def avg_pool(
        self, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None
    ):
        spatial = x.shape[2:]
        out_size = tuple(
            pool_output_size(n, k, s, p, 1, ceil_mode)
            for n, k, s, p in zip(spatial, kernel_size, stride, padding)
        )
        needed = [s * (o - 1) + k for s, o, k in zip(stride, out_size, kernel_size)]
        out = _place(x, padding, needed, 0)
        # Window sums are separable: one axis at a time, one strided add per kernel offset.
        for axis, (k, s, o) in enumerate(zip(kernel_size, stride, out_size), start=2):
            index = [slice(None)] * out.ndim
            total = None
            for offset in range(k):
                index[axis] = slice(offset, offset + s * (o - 1) + 1, s)
                part = out[tuple(index)]
                total = part.copy() if total is None else np.add(total, part, out=total)
            out = total
        divisor = _avg_pool_divisor(
            spatial,
            out_size,
            kernel_size,
            stride,
            padding,
            count_include_pad,
            divisor_override,
            x.dtype,
        )
        return out / divisor

    def avg_pool_backward(
        self,
        grad,
        input_size,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override=None,
    ):
        out_size = grad.shape[2:]
        divisor = _avg_pool_divisor(
            input_size,
            out_size,
            kernel_size,
            stride,
            padding,
            count_include_pad,
            divisor_override,
            grad.dtype,
        )
        g = grad / divisor
        for axis, (n, k, s, p) in enumerate(zip(input_size, kernel_size, stride, padding), start=2):
            g = _fold_axis(g, axis, k, s, p, n)
        return g

    def max_pool(self, x, kernel_size, stride, padding, dilation, ceil_mode):
        n, c = x.shape[:2]
        spatial = x.shape[2:]
        ndim = len(spatial)
        out_size = tuple(
            pool_output_size(length, k, s, p, d, ceil_mode)
            for length, k, s, p, d in zip(spatial, kernel_size, stride, padding, dilation)
        )
        # Every window's cells, contiguous: [prod(kernel), N, C, *out] (padding is -inf).
        windows = _windows(x, kernel_size, stride, padding, dilation, out_size, -np.inf)
        if channels_last(x):  # keep the layout: the copy reads runs of C values
            cells = np.empty((*kernel_size, n, *out_size, c), dtype=x.dtype)
            cells = np.moveaxis(cells, -1, ndim + 1)
        else:
            cells = np.empty((*kernel_size, n, c, *out_size), dtype=x.dtype)
        order = (*range(2, 2 + ndim), 0, 1, *range(2 + ndim, 2 + 2 * ndim))
        np.copyto(cells, windows.transpose(order))
        cells = cells.reshape(math.prod(kernel_size), n, c, *out_size)
        # Flat input index of each window's first cell, and each kernel offset's displacement.
        places = [math.prod(spatial[axis + 1 :]) for axis in range(ndim)]
        window_start = np.zeros((), dtype=np.int64)
        for o, s, p, place in zip(out_size, stride, padding, places):
            window_start = np.add.outer(window_start, (np.arange(o) * s - p) * place)
        displacements = np.array(
            [
                sum(k * d * place for k, d, place in zip(offsets, dilation, places))
                for offsets in itertools.product(*(range(k) for k in kernel_size))
            ],
            dtype=np.int64,
        )
        lowest = np.min(x) if x.size else np.inf
        if not lowest > -np.inf:  # NaN or -inf in the input: the careful, slower path
            first_real = _first_real_cells(spatial, out_size, stride, padding, dilation, places)
            return _max_pool_masked(
                cells, window_start, displacements, first_real, bool(np.isnan(lowest))
            )
        # Every window holds a finite cell, which beats the -inf padding: the value is the
        # maximum over the cells, the index the first cell equal to it (PyTorch's tie rule),
        # picked with branch-free integer arithmetic: on NumPy a masked copy with an
        # unpredictable mask is many times slower.
        best = cells[0].copy(order="K")
        for cell in cells[1:]:
            np.maximum(best, cell, out=best)
        number = np.int8 if len(cells) <= 127 else np.int64
        winner = np.zeros_like(best, dtype=number)
        for k in range(len(cells) - 1, -1, -1):  # the last write is the first equal offset
            hit = np.equal(cells[k], best).view(np.int8).astype(number, copy=False)
            winner += hit * (number(k) - winner)
        if channels_last(winner):  # np.take writes C order: keep the layout of the input
            indices = np.moveaxis(np.take(displacements, np.moveaxis(winner, 1, -1)), -1, 1)
        else:
            indices = np.take(displacements, winner)
        indices += window_start
        return best, indices

    def max_pool_backward(self, grad, indices, input_size):
        n, c = grad.shape[:2]
        cells = math.prod(input_size)
        # Scatter in the input's memory order, so the gradient comes out in its layout:
        # [N, C, cells], or [N, cells, C] for a channels-last input.
        last = channels_last(indices)
        if last:
            indices, grad = np.moveaxis(indices, 1, -1), np.moveaxis(grad, 1, -1)
            flat = indices * c
            flat += np.arange(c)
        else:
            flat = indices + (np.arange(c) * cells).reshape((c,) + (1,) * (indices.ndim - 2))
        flat += (np.arange(n) * (cells * c)).reshape((n,) + (1,) * (indices.ndim - 1))
        out = np.zeros(n * c * cells, dtype=grad.dtype)
        # Overlapping windows can pick one cell several times: add, not assign.
        np.add.at(out, flat.ravel(), grad.ravel())
        if last:
            return np.moveaxis(out.reshape(n, *input_size, c), -1, 1)
        return out.reshape(n, c, *input_size)

    def adaptive_avg_pool(self, x, output_size):
        out = x
        for axis, (n, o) in enumerate(zip(x.shape[2:], output_size), start=2):
            out = _along(out, axis, _adaptive_matrix(n, o, x.dtype))
        return np.ascontiguousarray(out)

    def adaptive_avg_pool_backward(self, grad, input_size):
        out = grad
        for axis, (n, o) in enumerate(zip(input_size, grad.shape[2:]), start=2):
            out = _along(out, axis, _adaptive_matrix(n, o, grad.dtype).T)
        return np.ascontiguousarray(out)

    # -- interpolation ----------------------------------------------------------------------------
    def interpolate(self, x, output_size, mode, align_corners, scales):
        out = x
        for axis, (n, o, scale) in enumerate(zip(x.shape[2:], output_size, scales), start=2):
            index, weights = _interpolation_taps(n, o, mode, align_corners, scale, x.dtype)
            out = _gather_axis(out, axis, index, weights)
        return out

    def interpolate_backward(self, grad, input_size, mode, align_corners, scales):
        g = grad
        for axis, (n, o, scale) in enumerate(zip(input_size, grad.shape[2:], scales), start=2):
            index, weights = _interpolation_taps(n, o, mode, align_corners, scale, grad.dtype)
            g = _scatter_axis(g, axis, index, weights, n)
        return g
