"""NumPy twins of the Winograd transforms (:mod:`.compiled_winograd`): the same arithmetic,
operation for operation and in the same order, over whole arrays, so that they give the
compiled kernels' bits; and the kernels as :class:`~.kernel_compile.Twinned`, which the
convolutions call (:mod:`.numpy_conv`).

Why: the eleven Winograd kernels take about 20 s of CPU (30 s and more on a loaded machine)
to compile on a cold Numba cache: the first 3x3 convolution of a fresh install (or of a fresh
CI clone's test workers) waited for it. Now the kernels compile in a background process
(:mod:`.kernel_compile`) while these twins run, and the convolutions switch to the kernels
once their cache entries are in place. Because the twins give the kernels' bits (as
``tests/test_kernel_compile.py`` checks, kernel against twin, on odd shapes, edge tiles and
signed zeros), the switch may happen anywhere, between a forward and its recomputation too:
checkpointing strategies still give bit-identical gradients.

Each twin evaluates its kernel's row formulas (``_input_row`` and the like, written out below
in the same association and with the same float32 constants) on strided views of all tiles at
once: IEEE arithmetic without fused multiply-adds (Numba contracts none without ``fastmath``)
rounds each operation alike, element by element, whichever loop runs it. Only
:func:`fold_tiles4`, whose overlapping patches add into the same cells, keeps the kernel's
order of additions with a Python loop over the tiles (vectorized over the batch and the
channels). The twins are several times slower than the kernels: they bridge the compile.
"""

from __future__ import annotations

import numpy as np

from . import compiled_winograd as cw
from .kernel_compile import Twinned

__all__ = [
    "fold_tiles4",
    "grad_tiles",
    "grad_tiles4",
    "input_tiles",
    "input_tiles4",
    "output_tiles",
    "output_tiles4",
    "weight_grad_untile",
    "weight_grad_untile4",
    "weight_tiles",
    "weight_tiles4",
]

_PLUS, _MINUS = cw._PLUS, cw._MINUS
_TWO, _FOUR, _FIVE, _EIGHT = cw._TWO, cw._FOUR, cw._FIVE, cw._EIGHT
_QUARTER, _SIXTH, _TWELFTH = cw._QUARTER, cw._SIXTH, cw._TWELFTH
_MINUS_SIXTH, _TWENTY_FOURTH = cw._MINUS_SIXTH, cw._TWENTY_FOURTH


def _put(dst: np.ndarray, value: np.ndarray) -> None:
    """``dst`` (``[T, C]``, or any shape of as many values) = ``value``, tile-major."""
    dst[...] = value.reshape(dst.shape)


# -- F(2x2, 3x3) -----------------------------------------------------------------------------------
def _combine(a, b, c, d, sb, sc, sd):
    return a + sb * b + sc * c + sd * d


def _pair(a, b, sa, sb):
    return sa * a + sb * b


def _input_tiles(xp, tiles_h, tiles_w, v):
    rows = [(0, 2, _MINUS), (1, 2, _PLUS), (2, 1, _MINUS), (1, 3, _MINUS)]
    for a, (i0, i1, si) in enumerate(rows):
        p = xp[:, i0 : i0 + 2 * tiles_h : 2]
        q = xp[:, i1 : i1 + 2 * tiles_h : 2]

        def col(r, k):
            return r[:, :, k : k + 2 * tiles_w : 2]

        _put(v[4 * a], _combine(col(p, 0), col(p, 2), col(q, 0), col(q, 2), _MINUS, si, -si))
        _put(v[4 * a + 1], _combine(col(p, 1), col(p, 2), col(q, 1), col(q, 2), _PLUS, si, si))
        _put(v[4 * a + 2], _combine(col(p, 2), col(p, 1), col(q, 2), col(q, 1), _MINUS, si, -si))
        _put(v[4 * a + 3], _combine(col(p, 1), col(p, 3), col(q, 1), col(q, 3), _MINUS, si, -si))


def _output_tiles(m, out, bias, has_bias):
    batch, height, width, channels = out.shape
    tiles_h, tiles_w = (height + 1) // 2, (width + 1) // 2
    t = m.reshape(16, batch, tiles_h, tiles_w, channels)
    s0 = t[0] + t[4] + t[8]
    s1 = t[1] + t[5] + t[9]
    s2 = t[2] + t[6] + t[10]
    s3 = t[3] + t[7] + t[11]
    q0 = t[4] - t[8] - t[12]
    q1 = t[5] - t[9] - t[13]
    q2 = t[6] - t[10] - t[14]
    q3 = t[7] - t[11] - t[15]
    b = bias if has_bias else out.dtype.type(0)
    half_w, half_h = width // 2, height // 2
    out[:, 0::2, 0::2] = s0 + s1 + s2 + b
    out[:, 0::2, 1::2] = (s1 - s2 - s3 + b)[:, :, :half_w]
    out[:, 1::2, 0::2] = (q0 + q1 + q2 + b)[:, :half_h]
    out[:, 1::2, 1::2] = (q1 - q2 - q3 + b)[:, :half_h, :half_w]


def _grad_tiles(gp, z):
    g00, g01 = gp[:, 0::2, 0::2], gp[:, 0::2, 1::2]
    g10, g11 = gp[:, 1::2, 0::2], gp[:, 1::2, 1::2]
    values = [
        _PLUS * g00,
        _pair(g00, g01, _PLUS, _PLUS),
        _pair(g00, g01, _PLUS, _MINUS),
        _MINUS * g01,
        _pair(g00, g10, _PLUS, _PLUS),
        _combine(g00, g01, g10, g11, _PLUS, _PLUS, _PLUS),
        _combine(g00, g01, g10, g11, _MINUS, _PLUS, _MINUS),
        _pair(g01, g11, _MINUS, _MINUS),
        _pair(g00, g10, _PLUS, _MINUS),
        _combine(g00, g01, g10, g11, _PLUS, _MINUS, _MINUS),
        _combine(g00, g01, g10, g11, _MINUS, _MINUS, _PLUS),
        _pair(g01, g11, _MINUS, _PLUS),
        _MINUS * g10,
        _pair(g10, g11, _MINUS, _MINUS),
        _pair(g10, g11, _MINUS, _PLUS),
        _PLUS * g11,
    ]
    for e, value in enumerate(values):
        _put(z[e], value)


def _three(a, b, c, sb, scale):
    return scale * (a + sb * b + c)


def _half_sum(a, b, c, sa, half):
    return sa * a + half * (b + c)


def _weight_tiles(taps, order, u):
    half, one = taps.dtype.type(0.5), taps.dtype.type(1)
    w = [taps[:, :, k] for k in range(9)]
    r = [None] * 12
    for j in range(3):
        r[j] = one * w[j]
        r[3 + j] = _three(w[j], w[3 + j], w[6 + j], one, half)
        r[6 + j] = _three(w[j], w[3 + j], w[6 + j], -one, half)
        r[9 + j] = one * w[6 + j]
    for i in range(4):
        u[order[4 * i]] = one * r[3 * i]
        u[order[4 * i + 1]] = _three(r[3 * i], r[3 * i + 1], r[3 * i + 2], one, half)
        u[order[4 * i + 2]] = _three(r[3 * i], r[3 * i + 1], r[3 * i + 2], -one, half)
        u[order[4 * i + 3]] = one * r[3 * i + 2]


def _weight_grad_untile(du, taps):
    half, one = du.dtype.type(0.5), du.dtype.type(1)
    h = [None] * 12
    for j in range(4):
        h[j] = _half_sum(du[j], du[4 + j], du[8 + j], one, half)
        h[4 + j] = _pair(du[4 + j], du[8 + j], half, -half)
        h[8 + j] = _half_sum(du[12 + j], du[4 + j], du[8 + j], one, half)
    for i in range(3):
        taps[:, :, 3 * i] = _half_sum(h[4 * i], h[4 * i + 1], h[4 * i + 2], one, half)
        taps[:, :, 3 * i + 1] = _pair(h[4 * i + 1], h[4 * i + 2], half, -half)
        taps[:, :, 3 * i + 2] = _half_sum(h[4 * i + 3], h[4 * i + 1], h[4 * i + 2], one, half)


# -- F(4x4, 3x3) -----------------------------------------------------------------------------------
def _input_row(d0, d1, d2, d3, d4, d5):
    return (
        _FOUR * d0 - _FIVE * d2 + d4,
        d3 + d4 - _FOUR * (d1 + d2),
        d4 - d3 + _FOUR * (d1 - d2),
        d4 - d2 + _TWO * (d3 - d1),
        d4 - d2 + _TWO * (d1 - d3),
        _FOUR * d1 - _FIVE * d3 + d5,
    )


def _output_row(m0, m1, m2, m3, m4, m5):
    return (
        m0 + (m1 + m2) + (m3 + m4),
        (m1 - m2) + _TWO * (m3 - m4),
        (m1 + m2) + _FOUR * (m3 + m4),
        (m1 - m2) + _EIGHT * (m3 - m4) + m5,
    )


def _grad_row(g0, g1, g2, g3):
    return (
        g0,
        (g0 + g2) + (g1 + g3),
        (g0 + g2) - (g1 + g3),
        (g0 + _FOUR * g2) + _TWO * (g1 + _FOUR * g3),
        (g0 + _FOUR * g2) - _TWO * (g1 + _FOUR * g3),
        g3,
    )


def _weight_row(w0, w1, w2):
    return (
        _QUARTER * w0,
        _MINUS_SIXTH * (w0 + w1 + w2),
        _MINUS_SIXTH * (w0 - w1 + w2),
        _TWENTY_FOURTH * w0 + _TWELFTH * w1 + _SIXTH * w2,
        _TWENTY_FOURTH * w0 - _TWELFTH * w1 + _SIXTH * w2,
        w2,
    )


def _untile_row(d0, d1, d2, d3, d4, d5):
    return (
        _QUARTER * d0 - _SIXTH * (d1 + d2) + _TWENTY_FOURTH * (d3 + d4),
        _SIXTH * (d2 - d1) + _TWELFTH * (d3 - d4),
        _SIXTH * ((d3 + d4) - (d1 + d2)) + d5,
    )


def _fold_row(m0, m1, m2, m3, m4, m5):
    return (
        _FOUR * m0,
        _FOUR * ((m2 - m1) + m5) + _TWO * (m4 - m3),
        -(_FIVE * m0 + _FOUR * (m1 + m2) + (m3 + m4)),
        (m1 - m2) + _TWO * (m3 - m4) - _FIVE * m5,
        m0 + (m1 + m2) + (m3 + m4),
        m5,
    )


def _input_tiles4(xp, tiles_h, tiles_w, v):
    # B^T down the columns of each row of tiles, then along each tile's rows
    rows = _input_row(*(xp[:, k : k + 4 * tiles_h : 4] for k in range(6)))
    for a, r in enumerate(rows):
        columns = (r[:, :, k : k + 4 * tiles_w : 4] for k in range(6))
        for b, value in enumerate(_input_row(*columns)):
            _put(v[6 * a + b], value)


def _output_tiles4(m, out, bias, has_bias):
    batch, height, width, channels = out.shape
    tiles_h, tiles_w = (height + 3) // 4, (width + 3) // 4
    t = m.reshape(36, batch, tiles_h, tiles_w, channels)
    rows = [None] * 24
    for b in range(6):
        for i, value in enumerate(_output_row(*(t[6 * k + b] for k in range(6)))):
            rows[6 * i + b] = value
    full = np.empty((batch, tiles_h, 4, tiles_w, 4, channels), dtype=out.dtype)
    for i in range(4):
        for j, value in enumerate(_output_row(*rows[6 * i : 6 * i + 6])):
            full[:, :, i, :, j] = value
    out[...] = full.reshape(batch, 4 * tiles_h, 4 * tiles_w, channels)[:, :height, :width]
    if has_bias:
        out += bias


def _grad_tiles4(gp, z):
    rows = _grad_row(*(gp[:, k::4] for k in range(4)))
    for a, r in enumerate(rows):
        for b, value in enumerate(_grad_row(*(r[:, :, k::4] for k in range(4)))):
            _put(z[6 * a + b], value)


def _weight_tiles4(taps, flip, u):
    w = [taps[:, :, 8 - k] if flip else taps[:, :, k] for k in range(9)]
    r = [None] * 18
    for j in range(3):
        for p, value in enumerate(_weight_row(w[j], w[3 + j], w[6 + j])):
            r[3 * p + j] = value
    for p in range(6):
        for q, value in enumerate(_weight_row(r[3 * p], r[3 * p + 1], r[3 * p + 2])):
            u[6 * p + q] = value


def _weight_grad_untile4(du, taps):
    h = [None] * 18
    for b in range(6):
        for i, value in enumerate(_untile_row(*(du[6 * k + b] for k in range(6)))):
            h[6 * i + b] = value
    for i in range(3):
        for j, value in enumerate(_untile_row(*h[6 * i : 6 * i + 6])):
            taps[:, :, 3 * i + j] = value


def _fold_tiles4(m, dx, tiles_h, tiles_w, top, left):
    batch, height, width, channels = dx.shape
    t = m.reshape(36, batch, tiles_h, tiles_w, channels)
    rows = [None] * 36
    for b in range(6):
        for i, value in enumerate(_fold_row(*(t[6 * k + b] for k in range(6)))):
            rows[6 * i + b] = value
    patches = np.empty((batch, tiles_h, tiles_w, 6, 6, channels), dtype=dx.dtype)
    for i in range(6):
        for j, value in enumerate(_fold_row(*rows[6 * i : 6 * i + 6])):
            patches[:, :, :, i, j] = value
    # the patches overlap: added tile by tile in the kernel's order, so that each cell's sum
    # is rounded as the kernel's
    for ty in range(tiles_h):
        y0, y1 = max(0, 4 * ty - top), min(height, 4 * ty - top + 6)
        if y0 >= y1:
            continue
        for tx in range(tiles_w):
            x0, x1 = max(0, 4 * tx - left), min(width, 4 * tx - left + 6)
            if x0 >= x1:
                continue
            patch = patches[:, ty, tx, y0 - 4 * ty + top : y1 - 4 * ty + top]
            dx[:, y0:y1, x0:x1] += patch[:, :, x0 - 4 * tx + left : x1 - 4 * tx + left]


input_tiles = Twinned(cw.input_tiles, _input_tiles)
output_tiles = Twinned(cw.output_tiles, _output_tiles)
grad_tiles = Twinned(cw.grad_tiles, _grad_tiles)
weight_tiles = Twinned(cw.weight_tiles, _weight_tiles)
weight_grad_untile = Twinned(cw.weight_grad_untile, _weight_grad_untile)
input_tiles4 = Twinned(cw.input_tiles4, _input_tiles4)
output_tiles4 = Twinned(cw.output_tiles4, _output_tiles4)
grad_tiles4 = Twinned(cw.grad_tiles4, _grad_tiles4)
weight_tiles4 = Twinned(cw.weight_tiles4, _weight_tiles4)
weight_grad_untile4 = Twinned(cw.weight_grad_untile4, _weight_grad_untile4)
fold_tiles4 = Twinned(cw.fold_tiles4, _fold_tiles4)
