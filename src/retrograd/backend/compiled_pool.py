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

__all__ = ["max_pool2d_last", "max_pool2d_last_backward", "max_pool_planes_backward"]


@numba.njit(error_model="numpy", cache=True, nogil=True)
def _first_real(start, dilation, length):
    """The first cell of a window starting at ``start`` (negative: in the padding) that lies
    at or after zero, clipped into ``[0, length - 1]``."""
    first = start - (start // dilation) * dilation if start < 0 else start
    return min(max(first, 0), length - 1)


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
                first = _first_real(y0, dh, height) * width + _first_real(x0, dw, width)
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
