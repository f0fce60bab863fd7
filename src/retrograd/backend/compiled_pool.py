"""2-d max pooling of channels-last arrays as compiled loops (Numba).

NumPy's max pooling copies every window's cells out (one strided copy per kernel offset),
reduces them, then finds each maximum's first position with integer arithmetic: several
passes over memory. These loops read each cell once, in the layout convolutions write
(``[N, H, W, C]``), and keep each window's running maximum and its position in registers;
the backward adds each gradient into the cell its window picked, in the same order as
``np.add.at`` over the gradient in memory order (the same bits, overlapping windows
included).

PyTorch's rule, which the NumPy path follows too: a cell replaces the window's maximum when
it is greater or NaN (the last NaN wins); the maximum starts at ``-inf`` at the window's first
cell inside the input, so padding never wins and a window of ``-inf`` points at its first
real cell.
"""

from __future__ import annotations

import numba
import numpy as np

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)

__all__ = [
    "max_pool2d_last",
    "max_pool2d_last_backward",
    "max_pool2d_planes",
    "max_pool_planes_backward",
]


@numba.njit(error_model="numpy", cache=True, nogil=True)
def _first_real(start, dilation, length):
    """The first cell of a window starting at ``start`` (negative: in the padding) that lies
    at or after zero, not clipped: PyTorch's kernels advance a window's start by the
    dilation until it is inside, and a window over padding alone keeps that position."""
    return start - (start // dilation) * dilation if start < 0 else start


@numba.njit(error_model="numpy", cache=True, nogil=True)
def _first_cell(y0, dh, height, x0, dw, width):
    """The flat index PyTorch gives a window before any cell wins (a window over padding
    alone keeps it): its rows' and columns' first positions at or after zero, kept inside
    the plane where they would point past it."""
    return min(_first_real(y0, dh, height) * width + _first_real(x0, dw, width), height * width - 1)


@numba.njit(error_model="numpy", cache=True, nogil=True)
def max_pool2d_last(x, best, index, kh, kw, sh, sw, ph, pw, dh, dw):
    """``best[n, oy, ox, c]`` (``[N, OH, OW, C]``) the maximum of ``x`` ``[N, H, W, C]`` over
    the window of output ``(oy, ox)``, ``index[n, oy, ox, c]`` its flat position ``y * W + x``
    in the input."""
    batch, height, width, channels = x.shape
    out_h, out_w = best.shape[1], best.shape[2]
    for n in range(batch):
        for oy in range(out_h):
            y0 = oy * sh - ph
            for ox in range(out_w):
                x0 = ox * sw - pw
                first = _first_cell(y0, dh, height, x0, dw, width)
                cell_best = best[n, oy, ox]
                cell_index = index[n, oy, ox]
                cell_best[:] = -np.inf
                cell_index[:] = first
                for i in range(kh):
                    y = y0 + i * dh
                    if y < 0 or y >= height:
                        continue
                    for j in range(kw):
                        xx = x0 + j * dw
                        if xx < 0 or xx >= width:
                            continue
                        source = x[n, y, xx]
                        place = y * width + xx
                        for c in range(channels):
                            value = source[c]
                            if value > cell_best[c] or value != value:
                                cell_best[c] = value
                                cell_index[c] = place


@numba.njit(error_model="numpy", cache=True, nogil=True)
def max_pool2d_planes(x, best, index, kh, kw, sh, sw, ph, pw, dh, dw):
    """``best[p, oy, ox]`` (``[planes, OH, OW]``) the maximum of the plane ``x[p]``
    (``[planes, H, W]``, the layout PyTorch's convolutions write) over the window of output
    ``(oy, ox)``, ``index[p, oy, ox]`` its flat position ``y * W + x`` in the plane, for
    inputs without NaN; returns whether a NaN was read, in which case the results are not
    PyTorch's and the caller pools another way.

    A plane's window, unlike a channels-last row of channels, gives no run of independent
    maxima to vectorize; what costs here is branching. A cell replaces the window's maximum
    when strictly greater (the first maximum keeps its place, PyTorch's tie rule), chosen by
    selects, not branches: with random data every other comparison would mispredict. NaN,
    which must win, is only noted (one more comparison, no branch): checking it per cell
    the way :func:`max_pool2d_last` does makes every comparison a branch again.
    """
    planes, height, width = x.shape
    out_h, out_w = best.shape[1], best.shape[2]
    rows_lo, rows_hi = _inside(out_h, height, kh, sh, ph, dh)
    columns_lo, columns_hi = _inside(out_w, width, kw, sw, pw, dw)
    if dh != 1 or dw != 1:  # every window checked
        rows_lo, rows_hi, columns_lo, columns_hi = 0, 0, 0, 0
    seen_nan = False
    for p in range(planes):
        for oy in range(out_h):
            y0 = oy * sh - ph
            row_inside = rows_lo <= oy < rows_hi
            for ox in range(out_w):
                x0 = ox * sw - pw
                cell_best = -np.inf
                if row_inside and columns_lo <= ox < columns_hi:
                    # The common window: no bounds, unit dilation (the loops unroll).
                    cell_index = y0 * width + x0
                    for y in range(y0, y0 + kh):
                        for column in range(x0, x0 + kw):
                            value = x[p, y, column]
                            take = value > cell_best
                            seen_nan |= value != value
                            cell_best = value if take else cell_best
                            cell_index = y * width + column if take else cell_index
                else:
                    cell_index = _first_cell(y0, dh, height, x0, dw, width)
                    for i in range(kh):
                        y = y0 + i * dh
                        for j in range(kw):
                            column = x0 + j * dw
                            if 0 <= y < height and 0 <= column < width:
                                value = x[p, y, column]
                                take = value > cell_best
                                seen_nan |= value != value
                                cell_best = value if take else cell_best
                                cell_index = y * width + column if take else cell_index
                best[p, oy, ox] = cell_best
                index[p, oy, ox] = cell_index
    return seen_nan


@numba.njit(error_model="numpy", cache=True, nogil=True)
def _inside(out_length, length, kernel, stride, padding, dilation):
    """The outputs ``[lo, hi)`` along one axis whose windows lie wholly inside the input."""
    lo = 0
    while lo < out_length and lo * stride - padding < 0:
        lo += 1
    hi = out_length
    while hi > lo and (hi - 1) * stride - padding + (kernel - 1) * dilation >= length:
        hi -= 1
    return lo, hi


@numba.njit(error_model="numpy", cache=True, nogil=True)
def max_pool2d_last_backward(grad, index, out):
    """``out`` ``[N, cells, C]`` (every cell written) = zeros plus each ``grad[n, o, c]``
    (``[N, out_cells, C]``, any strides) added at ``out[n, index[n, o, c], c]``, in memory
    order. Each sample's zeros are written just before its adds, which then find them in the
    cache; ``grad`` is read where it lies (a flattened pool's gradient arrives ``[N, C, ...]``)
    rather than copied channels-last first."""
    batch, out_cells, channels = grad.shape
    for n in range(batch):
        out[n] = 0
        for o in range(out_cells):
            for c in range(channels):
                out[n, index[n, o, c], c] += grad[n, o, c]


@numba.njit(error_model="numpy", cache=True, nogil=True)
def max_pool_planes_backward(grad, index, out):
    """``out`` ``[planes, cells]`` (every cell written) = zeros plus each ``grad[p, o]``
    (``[planes, out_cells]``) added at ``out[p, index[p, o]]``: channels-first pooling of any
    rank, each plane's flat indices. Plane by plane, in memory order, as ``np.add.at`` over the
    flattened arrays adds (the same bits); each plane's zeros are written just before its adds."""
    planes, out_cells = grad.shape
    for p in range(planes):
        out[p] = 0
        for o in range(out_cells):
            out[p, index[p, o]] += grad[p, o]
