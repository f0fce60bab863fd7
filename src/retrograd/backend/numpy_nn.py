"""NumPy kernels of the neural-network primitives (convolution, pooling, interpolation).

Convolutions are im2col: one copy of the strided windows of the (padded) input into a column
buffer, then one batched matmul. Their adjoints are the matching transposed products: the
transposed convolution multiplies by the transposed weight and folds the columns back (col2im,
one strided add per kernel offset), and the weight gradient multiplies the output gradient by
the columns. Pooling and interpolation work on whole arrays too; the only Python loops are over
kernel offsets, interpolation taps and spatial axes, never over pixels or batch elements.

Shapes are ``[N, C, *spatial]`` with 1 to 3 spatial dimensions; every tuple parameter has one
entry per spatial dimension, as the protocol (:class:`~retrograd.backend.protocol.Backend`)
describes.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = [
    "NumpyNNKernels",
    "conv_output_size",
    "conv_transpose_output_size",
    "pool_output_size",
]


# -- sizes (shared with the functional layer, which validates with them) -----------------------
def conv_output_size(length: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length of a convolution along one axis (may be < 1 for bad arguments)."""
    return (length + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def conv_transpose_output_size(
    length: int, kernel: int, stride: int, padding: int, output_padding: int, dilation: int
) -> int:
    """Output length of a transposed convolution along one axis."""
    return (length - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def pool_output_size(
    length: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool
) -> int:
    """Output length of a pooling window along one axis, PyTorch's rule.

    With ``ceil_mode`` a last, partial window is kept only if it starts inside the input or
    its left padding.
    """
    span = length + 2 * padding - dilation * (kernel - 1) - 1
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= length + padding:
            out -= 1
        return out
    return span // stride + 1


# -- helpers --------------------------------------------------------------------------------------
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
    out = np.full(x.shape[:2] + tuple(total_lengths), fill, dtype=x.dtype)
    target, source = [], []
    for b, n, total in zip(before, spatial, total_lengths):
        end = min(b + n, total)
        target.append(slice(b, end))
        source.append(slice(0, end - b))
    out[(slice(None), slice(None), *target)] = x[(slice(None), slice(None), *source)]
    return out


def _im2col(x, kernel, stride, padding, dilation, groups, out_size):
    """Columns ``[N, groups, C/groups * prod(kernel), prod(out_size)]`` of ``x``'s windows.

    Row ``(c, k...)`` of a column holds input channel ``c`` at kernel offset ``k``; one copy of
    a strided window view, laid out so that ``weight @ columns`` is the convolution in NCHW.
    """
    n, c = x.shape[:2]
    extents = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    needed = [s * (o - 1) + e for s, o, e in zip(stride, out_size, extents)]
    xp = _place(x, padding, needed, 0)
    ndim = len(kernel)
    windows = sliding_window_view(xp, extents, axis=tuple(range(2, 2 + ndim)))
    windows = windows[
        (slice(None), slice(None))
        + tuple(slice(None, None, s) for s in stride)
        + tuple(slice(None, None, d) for d in dilation)
    ]
    # windows: [N, C, *out, *kernel] -> columns [N, C, *kernel, *out]
    order = (0, 1, *range(2 + ndim, 2 + 2 * ndim), *range(2, 2 + ndim))
    columns = np.empty((n, c, *kernel, *out_size), dtype=x.dtype)
    np.copyto(columns, windows.transpose(order))
    return columns.reshape(n, groups, (c // groups) * math.prod(kernel), math.prod(out_size))


def _col2im(columns, kernel, stride, padding, dilation, in_size, out_size):
    """The adjoint of :func:`_im2col` (without groups): sums ``[N, C, *kernel, *in_size]``
    columns into an output of spatial ``out_size``, cropping ``padding`` on the left."""
    n, c = columns.shape[:2]
    extents = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    full = [max(s * (m - 1) + e, p + o)
            for s, m, e, p, o in zip(stride, in_size, extents, padding, out_size)]  # fmt: skip
    out = np.zeros((n, c, *full), dtype=columns.dtype)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        target = (slice(None), slice(None)) + _axis_slices(offsets, in_size, stride, dilation)
        out[target] += columns[(slice(None), slice(None), *offsets)]
    crop = tuple(slice(p, p + o) for p, o in zip(padding, out_size))
    return out[(slice(None), slice(None), *crop)]


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


def _avg_divisor(spatial, out_size, kernel, stride, padding, count_include_pad, dtype):
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


class NumpyNNKernels:
    """The neural-network primitives of :class:`~retrograd.backend.NumpyBackend`."""

    # -- convolution ----------------------------------------------------------------------------
    def conv(self, x, weight, stride, padding, dilation, groups):
        n = x.shape[0]
        c_out = weight.shape[0]
        kernel = weight.shape[2:]
        out_size = tuple(
            conv_output_size(length, k, s, p, d)
            for length, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)
        )
        columns = _im2col(x, kernel, stride, padding, dilation, groups, out_size)
        w = weight.reshape(groups, c_out // groups, -1)
        return np.matmul(w, columns).reshape(n, c_out, *out_size)

    def conv_transpose(self, x, weight, stride, padding, output_padding, dilation, groups):
        n, c_in = x.shape[:2]
        kernel = weight.shape[2:]
        per_group_out = weight.shape[1]
        in_size = x.shape[2:]
        out_size = tuple(
            conv_transpose_output_size(*args)
            for args in zip(in_size, kernel, stride, padding, output_padding, dilation)
        )
        # columns[n, g, (o, k...), l] = sum_c weight[g, c, (o, k...)] * x[n, g, c, l]
        w = weight.reshape(groups, c_in // groups, per_group_out * math.prod(kernel))
        xs = x.reshape(n, groups, c_in // groups, math.prod(in_size))
        columns = np.matmul(w.transpose(0, 2, 1), xs)
        columns = columns.reshape(n, groups * per_group_out, *kernel, *in_size)
        return _col2im(columns, kernel, stride, padding, dilation, in_size, out_size)

    def conv_weight_grad(self, x, out_grad, kernel_size, stride, padding, dilation, groups):
        n, c_in = x.shape[:2]
        c_out = out_grad.shape[1]
        out_size = out_grad.shape[2:]
        columns = _im2col(x, kernel_size, stride, padding, dilation, groups, out_size)
        g = out_grad.reshape(n, groups, c_out // groups, math.prod(out_size))
        # One product per batch element, summed: [N, G, O/G, L] @ [N, G, L, C/G*K].
        grad = np.matmul(g, columns.transpose(0, 1, 3, 2)).sum(axis=0)
        return grad.reshape(c_out, c_in // groups, *kernel_size)

    # -- pooling ----------------------------------------------------------------------------------
    def avg_pool(self, x, kernel_size, stride, padding, ceil_mode, count_include_pad):
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
        divisor = _avg_divisor(spatial, out_size, kernel_size, stride, padding,
                               count_include_pad, x.dtype)  # fmt: skip
        return out / divisor

    def avg_pool_backward(self, grad, input_size, kernel_size, stride, padding, ceil_mode,
                          count_include_pad):  # fmt: skip
        out_size = grad.shape[2:]
        divisor = _avg_divisor(input_size, out_size, kernel_size, stride, padding,
                               count_include_pad, grad.dtype)  # fmt: skip
        g = grad / divisor
        for axis, (n, k, s, p) in enumerate(zip(input_size, kernel_size, stride, padding),
                                            start=2):  # fmt: skip
            g = _fold_axis(g, axis, k, s, p, n)
        return g

    def max_pool(self, x, kernel_size, stride, padding, dilation, ceil_mode):
        spatial = x.shape[2:]
        out_size = tuple(
            pool_output_size(n, k, s, p, d, ceil_mode)
            for n, k, s, p, d in zip(spatial, kernel_size, stride, padding, dilation)
        )
        needed = [s * (o - 1) + d * (k - 1) + 1
                  for s, o, d, k in zip(stride, out_size, dilation, kernel_size)]  # fmt: skip
        xp = _place(x, padding, needed, -np.inf)
        out_shape = x.shape[:2] + out_size
        # Running maximum over the kernel offsets, in row-major order; a later offset wins only
        # if strictly greater (or NaN, which propagates), so ties go to the first, as in PyTorch.
        # Padding is -inf and never wins; a window whose real cells are all -inf keeps its
        # first real cell, which is where the winning offset starts.
        best = np.full(out_shape, -np.inf, dtype=x.dtype)
        winner = self._first_real_offsets(out_size, kernel_size, stride, padding, dilation)
        winner = np.broadcast_to(winner, out_shape).copy()
        has_nan = bool(np.isnan(x).any())
        for number, offsets in enumerate(itertools.product(*(range(k) for k in kernel_size))):
            view = xp[(slice(None), slice(None), *_axis_slices(offsets, out_size, stride,
                                                                dilation))]  # fmt: skip
            better = np.greater(view, best)
            if has_nan:
                better |= np.isnan(view)
            np.copyto(best, view, where=better)
            np.copyto(winner, number, where=better)
        # The winner's flat index over the input's spatial dimensions.
        indices = np.zeros(out_shape, dtype=np.int64)
        place = 1
        for axis in reversed(range(len(spatial))):
            k, s, p, d = kernel_size[axis], stride[axis], padding[axis], dilation[axis]
            inner = math.prod(kernel_size[axis + 1 :])
            offset = (winner // inner) % k
            start = (np.arange(out_size[axis]) * s - p).reshape(
                (-1,) + (1,) * (len(spatial) - axis - 1))  # fmt: skip
            indices += (start + offset * d) * place
            place *= spatial[axis]
        return best, indices

    @staticmethod
    def _first_real_offsets(out_size, kernel_size, stride, padding, dilation):
        """Per output position, the number of the first kernel offset inside the input."""
        number = np.zeros((), dtype=np.int64)
        for o, k, s, p, d in zip(out_size, kernel_size, stride, padding, dilation):
            starts = np.arange(o) * s - p
            first = np.clip(-(starts // d), 0, k - 1)
            first = np.where(starts >= 0, 0, first)
            number = np.add.outer(number * k, first)
        return number

    def max_pool_backward(self, grad, indices, input_size):
        n, c = grad.shape[:2]
        cells = math.prod(input_size)
        flat = indices.reshape(n * c, -1) + (np.arange(n * c) * cells)[:, None]
        # Overlapping windows can pick one cell several times: sum with bincount (in float64,
        # then rounded once).
        total = np.bincount(flat.ravel(), weights=grad.reshape(-1), minlength=n * c * cells)
        return total.astype(grad.dtype, copy=False).reshape(n, c, *input_size)

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
