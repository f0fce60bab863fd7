"""NumPy kernels of the neural-network primitives: pooling, interpolation, batch norm; the
convolutions are in :mod:`.numpy_conv`.

Pooling and interpolation work on whole arrays: the only Python loops are over kernel offsets,
interpolation taps and spatial axes, never over pixels. Shapes are ``[N, C, *spatial]`` with 1
to 3 spatial dimensions; every tuple parameter has one entry per spatial dimension, as the
protocol (:class:`~retrograd.backend.protocol.Backend`) describes.

Memory layout (never the shape) is the kernels' choice, as PyTorch's ``channels_last`` memory
format: convolutions write channels-last arrays (``[N, *spatial, C]`` in memory), elementwise
NumPy ufuncs keep that layout, and pooling and batch norm keep their input's. Any layout is
accepted: values never depend on it beyond rounding (tests/test_nn_layouts.py).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .numpy_conv import NumpyConvKernels, _place, _windows, channels_last
from .sizes import pool_output_size

__all__ = ["NumpyNNKernels", "channels_last"]


# -- helpers --------------------------------------------------------------------------------------
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


def _adaptive_windows(length, out):
    """PyTorch's adaptive windows of an axis of ``length``: ``[floor(i*L/out),
    ceil((i+1)*L/out))`` for each of the ``out`` cells, as (starts, ends)."""
    i = np.arange(out)
    return (i * length) // out, -((-(i + 1) * length) // out)


def _window_means(array, axis, out):
    """The mean of each adaptive window along ``axis``: each window summed on its own (as
    torch's kernel), so a NaN reaches only the cells whose windows hold it (a matrix
    product would spread it through its zero weights to every cell)."""
    moved = np.moveaxis(array, axis, 0)
    starts, ends = _adaptive_windows(moved.shape[0], out)
    means = np.stack([moved[s:e].sum(0) / (e - s) for s, e in zip(starts, ends)])
    return np.moveaxis(means.astype(array.dtype, copy=False), 0, axis)


def _window_spread(grad, axis, length):
    """The adjoint of :func:`_window_means`: each cell's gradient over its window's size,
    added to the window's positions only (torch's backward kernel's support)."""
    moved = np.moveaxis(grad, axis, 0)
    starts, ends = _adaptive_windows(length, moved.shape[0])
    spread = np.zeros((length,) + moved.shape[1:], dtype=grad.dtype)
    for cell, (s, e) in enumerate(zip(starts, ends)):
        spread[s:e] += moved[cell] / (e - s)
    return np.moveaxis(spread, 0, axis)


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


def _interpolation_taps(length, out, mode, align_corners, scale, dtype, spatial=2, zero_tap=False):
    """Per output position along one axis (of ``spatial``): input indices ``[taps, out]`` and
    their weights.

    Indices never decrease along the output axis, which the adjoint relies on.
    """
    real = np.dtype(dtype).type
    positions = np.arange(out)
    if mode == "nearest":
        # torch's 2-d kernel (and every backward) copies an axis of the same size, and halves
        # the indices of one twice as long, whatever the scale factor; its 1-d and 3-d
        # forward kernels apply the factor
        if out == length and (spatial == 2 or scale is None):
            index = positions
        elif out == 2 * length and (spatial == 2 or scale is None):
            index = positions // 2
        elif spatial != 2 and scale is None and np.dtype(dtype) == np.float64:
            # torch's 1-d and 3-d forward kernels scale a float64 input's sizes in float64
            # (their opmath), the product rounded to float32 before the floor (14 pixels to
            # 46: output 23 reads pixel 7, where float32 throughout reads 6); its backward
            # takes the float32 rule below, so the gradient stays torch's
            product = positions * (length / out)
            index = np.floor(product.astype(np.float32)).astype(np.int64)
            index = np.minimum(index, length - 1)
        else:  # PyTorch's legacy "nearest": floor(dst * scale), in float32 whatever the dtype
            ratio = _source_scale(length, out, False, scale, np.float32)
            index = np.floor(positions.astype(np.float32) * ratio).astype(np.int64)
            index = np.minimum(index, length - 1)
        return index[None, :], np.ones((1, out), dtype=dtype)
    if mode == "linear" and out == length:
        # torch's linear kernels copy an axis whose size does not change, whatever the
        # scale factor (which would otherwise map coordinates by 1 / scale_factor); its
        # forward still adds the element's second tap of weight 0, so an infinity becomes NaN
        # (x * 1 + x * 0), and a NaN or infinity spreads from there along the other axes
        if zero_tap:
            return np.stack([positions, positions]), np.stack(
                [np.ones(out, dtype=dtype), np.zeros(out, dtype=dtype)]
            )
        return positions[None, :], np.ones((1, out), dtype=dtype)
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
    """Flat index of each window's first cell at or after zero along every axis, as
    PyTorch's kernels place it before any cell wins: a window over padding alone keeps it,
    its position past an axis's end not clipped (it runs into the next row, as PyTorch's
    does), only kept inside the input."""
    first_real = np.zeros((), dtype=np.int64)
    for o, s, p, d, place in zip(out_size, stride, padding, dilation, places):
        starts = np.arange(o) * s - p
        first = np.where(starts < 0, starts - (starts // d) * d, starts)
        first_real = np.add.outer(first_real, first * place)
    return np.minimum(first_real, math.prod(spatial) - 1)


def _every_window_real(spatial, out_size, kernel_size, stride, padding, dilation):
    """Whether every pooling window holds at least one cell of the input (not padding
    alone), along every axis."""
    for length, o, k, s, p, d in zip(spatial, out_size, kernel_size, stride, padding, dilation):
        starts = np.arange(o) * s - p
        first = np.where(starts < 0, starts - (starts // d) * d, starts)
        if np.any((first >= length) | (first > starts + d * (k - 1))):
            return False
    return True


#: Max pools of this many input (gradient: output) elements or more run compiled
#: (:mod:`.compiled_pool`); smaller ones stay NumPy's, so that a small model never loads Numba.
COMPILED_POOL_MIN_SIZE = 1 << 16


def _compiled_pool(x: np.ndarray, dtype) -> bool:
    """Whether a 2-d max pool of ``x`` (or its backward, of ``x`` its indices) of values of
    ``dtype`` runs compiled: ``x`` channels-last and of at least
    :data:`COMPILED_POOL_MIN_SIZE` elements, ``dtype`` float32 or float64."""
    return (
        x.ndim == 4
        and dtype in (np.float32, np.float64)
        and x.size >= COMPILED_POOL_MIN_SIZE
        and channels_last(x)
    )


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


# -- batch normalization ---------------------------------------------------------------------------
def _per_channel(x: np.ndarray, subscript: str | None = None) -> tuple[np.ndarray, str]:
    """``x`` ``[N, C, *]`` as an array whose per-channel sums are a reduction with an
    ``einsum`` subscript: ``([M, C], "mc")`` for a channels-last ``x`` (and for ``[N, C]``), a
    view; else ``([N, C, cells], "ncm")``, C-contiguous. ``subscript``: that layout, whatever
    ``x``'s (copied into it if needed)."""
    n, c = x.shape[:2]
    moved = np.moveaxis(x, 1, -1)
    if subscript is None:
        subscript = "mc" if moved.flags.c_contiguous else "ncm"
    if subscript == "mc":
        return np.ascontiguousarray(moved).reshape(-1, c), subscript
    return np.ascontiguousarray(x).reshape(n, c, math.prod(x.shape[2:])), subscript


def _from_per_channel(rows: np.ndarray, shape: tuple[int, ...], subscript: str) -> np.ndarray:
    """The ``[N, C, *]`` array of ``shape`` that :func:`_per_channel` laid out as ``rows``."""
    if subscript == "ncm":
        return rows.reshape(shape)
    return np.moveaxis(rows.reshape(shape[0], *shape[2:], shape[1]), -1, 1)


#: Rows a float32 per-channel sum adds in float32 before the partial sums meet in float64.
SUM_BLOCK_ROWS = 128


def _channel_dot(a: np.ndarray, b: np.ndarray | None, subscript: str) -> np.ndarray:
    """Per channel, ``sum(a * b)`` (or ``sum(a)`` for ``b`` ``None``), in float64.

    float64 arrays add in float64. float32 ``[M, C]`` rows add in float32 in blocks of
    :data:`SUM_BLOCK_ROWS` rows, whose partial sums add in float64: within a unit in the last
    place of float32 for any batch (measured 3e-8 relative on 32768 rows), twice as fast as
    converting every value to float64 on the way."""
    operands = (a,) if b is None else (a, b)
    terms = ",".join([subscript] * len(operands))
    rows = a.shape[0] - a.shape[0] % SUM_BLOCK_ROWS
    if a.dtype != np.float32 or subscript != "mc" or not rows:
        return np.einsum(f"{terms}->c", *operands, dtype=np.float64)
    blocks = [x[:rows].reshape(-1, SUM_BLOCK_ROWS, x.shape[1]) for x in operands]
    partial = np.einsum(f"{','.join(['bmc'] * len(operands))}->bc", *blocks)
    total = partial.sum(axis=0, dtype=np.float64)
    if rows < a.shape[0]:
        total += np.einsum(f"{terms}->c", *(x[rows:] for x in operands), dtype=np.float64)
    return total


#: The dtypes whose channels-last batch norm runs compiled (``backend/compiled_norm.py``). Not
#: float64: its sums, in another order than NumPy's, moved a deep float64 net's gradients
#: (Inception v3 on a batch of two, tests/test_model_zoo.py) by 3e-9 relative from where
#: NumPy's left them beside torch's, past that test's 1e-9; float64 stays as it was. The
#: kernels take float64 too (the finite-difference tests run them so).
COMPILED_BATCH_NORM_DTYPES: tuple = (np.float32,)


def _compiled_batch_norm(rows: np.ndarray, subscript: str) -> bool:
    """Whether batch norm runs in the compiled kernels: channels-last rows ``[M, C]`` of
    :data:`COMPILED_BATCH_NORM_DTYPES`, not empty."""
    return subscript == "mc" and rows.dtype in COMPILED_BATCH_NORM_DTYPES and rows.size > 0


def _batch_norm_compiled(rows, shape, weight, bias, eps):
    """:meth:`NumpyNNKernels.batch_norm` of channels-last ``rows`` ``[M, C]`` (the input of
    ``shape``): the same sums and arithmetic in three compiled passes over memory."""
    from .compiled_norm import batch_norm_columns, channel_moments  # Numba: on first use

    dtype, channels = rows.dtype, rows.shape[1]
    mean, variance = np.empty(channels), np.empty(channels)
    channel_moments(rows, SUM_BLOCK_ROWS, mean, variance)
    rstd = 1.0 / np.sqrt(variance + eps)
    scale = rstd * weight if weight.size else rstd
    shift = bias.astype(dtype) if bias.size else np.zeros(channels, dtype)
    out = np.empty_like(rows)
    centre, scale = mean.astype(dtype), scale.astype(dtype)
    batch_norm_columns(rows, centre, scale, shift, bias.size > 0, out)
    stats = np.stack([mean, rstd]).astype(dtype)
    return _from_per_channel(out, shape, "mc"), stats


def _batch_norm_backward_compiled(g, rows, shape, weight, stats):
    """:meth:`NumpyNNKernels.batch_norm_backward` of channels-last ``rows`` and ``g``: two
    compiled passes over memory."""
    from .compiled_norm import batch_norm_backward_columns, channel_projections

    dtype, count, channels = rows.dtype, rows.shape[0], rows.shape[1]
    centre = np.ascontiguousarray(stats[0])
    rstd = stats[1].astype(np.float64)
    dbias, projection = np.zeros(channels), np.zeros(channels)
    channel_projections(g, rows, centre, SUM_BLOCK_ROWS, dbias, projection)
    dweight = projection * rstd
    a = rstd * weight if weight.size else rstd
    b = -a * rstd * rstd * projection / count
    k = -a * dbias / count
    dx = np.empty_like(rows)
    batch_norm_backward_columns(g, rows, centre, *(v.astype(dtype) for v in (a, b, k)), dx)
    return _from_per_channel(dx, shape, "mc"), dweight.astype(dtype), dbias.astype(dtype)


def _column(vector: np.ndarray, subscript: str, dtype) -> np.ndarray:
    """A per-channel ``[C]`` vector in ``dtype``, shaped to broadcast against the rows."""
    vector = vector.astype(dtype, copy=False)
    return vector if subscript == "mc" else vector[:, None]


class NumpyNNKernels(NumpyConvKernels):
    """The neural-network primitives of :class:`~retrograd.backend.NumpyBackend`."""

    # -- batch normalization ----------------------------------------------------------------------
    def batch_norm(self, x, weight, bias, eps):
        # mean, then the variance of the centred values (two passes, float64 sums), then the
        # affine map in place on the centred values: the output keeps x's layout
        rows, subscript = _per_channel(x)
        if _compiled_batch_norm(rows, subscript):
            return _batch_norm_compiled(rows, x.shape, weight, bias, eps)
        count = x.size // x.shape[1]
        mean = _channel_dot(rows, None, subscript) / count
        centered = np.subtract(rows, _column(mean, subscript, x.dtype))
        variance = _channel_dot(centered, centered, subscript) / count
        rstd = 1.0 / np.sqrt(variance + eps)
        scale = rstd * weight if weight.size else rstd
        np.multiply(centered, _column(scale, subscript, x.dtype), out=centered)
        if bias.size:
            np.add(centered, _column(bias, subscript, x.dtype), out=centered)
        stats = np.stack([mean, rstd]).astype(x.dtype)
        return _from_per_channel(centered, x.shape, subscript), stats

    def batch_norm_backward(self, grad, x, weight, stats, eps):
        # dx = rstd * w * (g - mean(g) - xhat * mean(g * xhat)), as g * a + (x - mean) * b + k
        # per channel: two passes of sums, then three of arithmetic
        rows, subscript = _per_channel(x)
        g = _per_channel(grad, subscript)[0]
        if _compiled_batch_norm(rows, subscript):
            return _batch_norm_backward_compiled(g, rows, x.shape, weight, stats)
        count = x.size // x.shape[1]
        mean, rstd = stats[0].astype(np.float64), stats[1].astype(np.float64)
        centered = np.subtract(rows, _column(mean, subscript, x.dtype))
        dbias = _channel_dot(g, None, subscript)
        projection = _channel_dot(g, centered, subscript)
        dweight = projection * rstd
        a = rstd * weight if weight.size else rstd
        b = -a * rstd * rstd * projection / count
        k = -a * dbias / count
        np.multiply(centered, _column(b, subscript, x.dtype), out=centered)
        np.add(centered, _column(k, subscript, x.dtype), out=centered)
        dx = np.multiply(g, _column(a, subscript, x.dtype))
        np.add(dx, centered, out=dx)
        dtype = x.dtype
        return (
            _from_per_channel(dx, x.shape, subscript),
            dweight.astype(dtype),
            dbias.astype(dtype),
        )

    def batch_norm_update(self, running_mean, running_var, stats, momentum, eps, count):
        # the protocol's arithmetic, the same NumPy operations, without its dozen dispatches
        # through the backend per layer and step
        variance = np.subtract(np.reciprocal(np.square(stats[1])), eps)
        variance = np.multiply(variance, count / (count - 1))
        return tuple(
            np.add(np.multiply(old, 1.0 - momentum), np.multiply(new, momentum))
            for old, new in ((running_mean, stats[0]), (running_var, variance))
        )

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
                # (the first from a sum of +0.0, as torch's kernel starts its window sums:
                # a window of -0.0 averages to +0.0, as there)
                total = part + 0 if total is None else np.add(total, part, out=total)
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
        if x.dtype.kind in "iu":  # torch's integer pooling divides as C does, toward zero
            quotient = np.abs(out) // np.abs(divisor)
            return np.where((out < 0) != (divisor < 0), -quotient, quotient)
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
        if _compiled_pool(x, x.dtype):  # one pass, the same values and positions (compiled_pool)
            from .compiled_pool import max_pool2d_last

            best = np.empty((n, *out_size, c), dtype=x.dtype)
            indices = np.empty((n, *out_size, c), dtype=np.int64)
            max_pool2d_last(
                np.moveaxis(x, 1, -1), best, indices, *kernel_size, *stride, *padding, *dilation
            )
            return np.moveaxis(best, -1, 1), np.moveaxis(indices, -1, 1)
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
        # NaN or -inf in the input, or a window over padding alone (dilation, ceil_mode),
        # whose -inf maximum must point at a real cell: the careful, slower path
        if not lowest > -np.inf or not _every_window_real(
            spatial, out_size, kernel_size, stride, padding, dilation
        ):
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

    def max_pool_backward(self, grad, indices, input_size, *window):
        # the indices say where each gradient goes: the window is not needed
        n, c = grad.shape[:2]
        cells = math.prod(input_size)
        # Scatter in the input's memory order, so the gradient comes out in its layout:
        # [N, C, cells], or [N, cells, C] for a channels-last input.
        last = channels_last(indices)
        if last and _compiled_pool(indices, grad.dtype):  # the same adds, in order (compiled_pool)
            from .compiled_pool import max_pool2d_last_backward

            out = np.empty((n, cells, c), dtype=grad.dtype)
            max_pool2d_last_backward(
                np.moveaxis(grad, 1, -1).reshape(n, -1, c),
                np.moveaxis(indices, 1, -1).reshape(n, -1, c),
                out,
            )
            return np.moveaxis(out.reshape(n, *input_size, c), -1, 1)
        if not last and grad.dtype in (np.float32, np.float64) and grad.size:
            from .compiled_pool import max_pool_planes_backward  # the same adds, in order

            out = np.empty((n * c, cells), dtype=grad.dtype)
            max_pool_planes_backward(
                np.ascontiguousarray(grad).reshape(n * c, -1),
                np.ascontiguousarray(indices).reshape(n * c, -1),
                out,
            )
            return out.reshape(n, c, *input_size)
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
        for axis, o in enumerate(output_size, start=2):
            out = _window_means(out, axis, o)
        return np.ascontiguousarray(out)

    def adaptive_avg_pool_backward(self, grad, input_size):
        out = grad
        for axis, n in enumerate(input_size, start=2):
            out = _window_spread(out, axis, n)
        return np.ascontiguousarray(out)

    # -- interpolation ----------------------------------------------------------------------------
    def interpolate(self, x, output_size, mode, align_corners, scales):
        out = x
        for axis, (n, o, scale) in enumerate(zip(x.shape[2:], output_size, scales), start=2):
            index, weights = _interpolation_taps(
                n, o, mode, align_corners, scale, x.dtype, len(output_size), zero_tap=True
            )
            out = _gather_axis(out, axis, index, weights)
        return out

    def interpolate_backward(self, grad, input_size, mode, align_corners, scales):
        if mode == "bicubic" and tuple(input_size) == tuple(grad.shape[2:]):
            # torch's bicubic backward copies the gradient when no size changes, though its
            # forward interpolated by the scale factors
            return grad.copy()
        g = grad
        for axis, (n, o, scale) in enumerate(zip(input_size, grad.shape[2:], scales), start=2):
            # (torch's nearest backward takes the 2-d kernel's shortcuts in every dimension)
            index, weights = _interpolation_taps(n, o, mode, align_corners, scale, grad.dtype)
            g = _scatter_axis(g, axis, index, weights, n)
        return g
