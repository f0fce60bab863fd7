"""Winograd's minimal filtering F(2x2, 3x3) and F(4x4, 3x3): the transforms of a 3x3
stride-1 convolution whose products are 16 (36) matrix products (NumPy's) of 2.25 (4) times
fewer multiply-adds than im2col's one (Lavin and Gray, "Fast Algorithms for Convolutional
Neural Networks", 2016). On this project's machines NumPy's OpenBLAS runs its Haswell (AVX2)
kernels (the operator pins ``OPENBLAS_CORETYPE``) while PyTorch's oneDNN convolutions use
AVX-512: fewer products is how the NumPy backend keeps up.

Each ``m x m`` block of output cells (a *tile*; ``m`` = 2 or 4) reads an ``(m + 2)`` square
patch of the padded input ``d``::

    Y = A^T [ (G w G^T) * (B^T d B) ] A          (* elementwise, per input and output channel)

    F(2x2, 3x3): B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
                 G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
                 A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]

(F(4x4, 3x3)'s, on the points 0, 1, -1, 2, -2 and infinity, are written above its kernels),
so that, with ``V[e, t, c]`` the transformed values ``e`` of tile ``t`` and channel ``c`` and
``U[e, o, c]`` those of the weight, ``M[e] = V[e] @ U[e].T`` holds the tiles' transformed
outputs per output channel; the output transform sums them back to cells. The weight
gradient is the same algebra transposed: ``dU[e] = Z[e].T @ V[e]`` with ``Z = A dY A^T`` the
transformed output-gradient tiles, and ``dw = G^T dU G``.

The transforms are additions and small multiples, compiled loops over channels-last arrays:
each innermost loop runs along the channels (contiguous; LLVM vectorizes it) and touches
few arrays, so that LLVM's run-time alias checks stay within its limit (a loop that writes
sixteen arrays at once is left scalar: ten times slower). F(4x4, 3x3)'s first pass runs over
a whole row of tiles at once, its loops as long as the row.

Accuracy, float32 (the callers' only dtype here; float64 keeps im2col's products): within 8
float32 epsilons of the convolution of the absolute values for F(2x2, 3x3), 64 for F(4x4,
3x3) (its coefficients up to 8 and 1/24 amplify rounding; im2col's products: about 1), as
``tests/test_winograd.py`` holds them against torch in float64. F(2x2, 3x3)'s coefficients
are exact in float64, where the tests check its algebra to 1e-12.
"""

from __future__ import annotations

import numba
import numpy as np

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)

__all__ = [
    "FLIPPED",
    "WEIGHT",
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

_jit = numba.njit(error_model="numpy", cache=True, nogil=True)

# the signs as float32 constants: a float64 literal would make a float32 sum float64
_PLUS, _MINUS = np.float32(1), np.float32(-1)


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _combine(dst, a, b, c, d, sb, sc, sd):
    """``dst = a + sb b + sc c + sd d`` (1-d, one length; the signs -1, 0 or 1, constants
    where inlined): one loop with four loads and one store, few enough pointers for LLVM's
    run-time alias checks, so that it vectorizes."""
    for i in range(dst.shape[0]):
        dst[i] = a[i] + sb * b[i] + sc * c[i] + sd * d[i]


@_jit
def input_tiles(xp, tiles_h, tiles_w, v):
    """``v[e, t, c]`` (``[16, N * tiles_h * tiles_w, C]``) = ``B^T d B`` of each tile's 4x4
    patch ``d`` of ``xp`` ``[N, >= 2 * tiles_h + 2, >= 2 * tiles_w + 2, C]`` (the padded
    channels-last input; tile ``(ty, tx)`` starts at ``(2 ty, 2 tx)``), tiles in row-major
    order ``(n, ty, tx)``."""
    t = 0
    for n in range(xp.shape[0]):
        for ty in range(tiles_h):
            y = 2 * ty
            for tx in range(tiles_w):
                x = 2 * tx
                # B^T's rows: d0 - d2, d1 + d2, d2 - d1, d1 - d3; entry (a, b) of B^T d B
                # combines rows and columns alike: four cells, signs the products of theirs
                for a in range(4):
                    i0, i1, si = (
                        (0, 2, _MINUS)
                        if a == 0
                        else (1, 2, _PLUS)
                        if a == 1
                        else (2, 1, _MINUS)
                        if a == 2
                        else (1, 3, _MINUS)
                    )
                    p = xp[n, y + i0]
                    q = xp[n, y + i1]
                    _combine(v[4 * a, t], p[x], p[x + 2], q[x], q[x + 2], _MINUS, si, -si)
                    _combine(v[4 * a + 1, t], p[x + 1], p[x + 2], q[x + 1], q[x + 2], _PLUS, si, si)
                    _combine(
                        v[4 * a + 2, t], p[x + 2], p[x + 1], q[x + 2], q[x + 1], _MINUS, si, -si
                    )
                    _combine(
                        v[4 * a + 3, t], p[x + 1], p[x + 3], q[x + 1], q[x + 3], _MINUS, si, -si
                    )
                t += 1


@_jit
def output_tiles(m, out, bias, has_bias):
    """``out`` ``[N, H, W, O]`` (channels-last, every cell written) = ``A^T m A`` of each
    tile's 16 values ``m[:, t, o]`` (``[16, N * ceil(H / 2) * ceil(W / 2), O]``), plus
    ``bias[o]`` when ``has_bias``; the cells of the last tiles past ``H`` or ``W`` dropped."""
    batch, height, width, channels = out.shape
    tiles_h, tiles_w = (height + 1) // 2, (width + 1) // 2
    t = 0
    for n in range(batch):
        for ty in range(tiles_h):
            y = 2 * ty
            two_rows = y + 1 < height
            for tx in range(tiles_w):
                x = 2 * tx
                two_columns = x + 1 < width
                for o in range(channels):
                    # A^T m: along rows
                    s0 = m[0, t, o] + m[4, t, o] + m[8, t, o]
                    s1 = m[1, t, o] + m[5, t, o] + m[9, t, o]
                    s2 = m[2, t, o] + m[6, t, o] + m[10, t, o]
                    s3 = m[3, t, o] + m[7, t, o] + m[11, t, o]
                    q0 = m[4, t, o] - m[8, t, o] - m[12, t, o]
                    q1 = m[5, t, o] - m[9, t, o] - m[13, t, o]
                    q2 = m[6, t, o] - m[10, t, o] - m[14, t, o]
                    q3 = m[7, t, o] - m[11, t, o] - m[15, t, o]
                    b = bias[o] if has_bias else out.dtype.type(0)
                    out[n, y, x, o] = s0 + s1 + s2 + b
                    if two_columns:
                        out[n, y, x + 1, o] = s1 - s2 - s3 + b
                    if two_rows:
                        out[n, y + 1, x, o] = q0 + q1 + q2 + b
                        if two_columns:
                            out[n, y + 1, x + 1, o] = q1 - q2 - q3 + b
                t += 1


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _pair(dst, a, b, sa, sb):
    """``dst = sa a + sb b`` (one loop, as :func:`_combine`)."""
    for i in range(dst.shape[0]):
        dst[i] = sa * a[i] + sb * b[i]


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _signed(dst, a, sa):
    """``dst = sa a``."""
    for i in range(dst.shape[0]):
        dst[i] = sa * a[i]


@_jit
def grad_tiles(gp, z):
    """``z[e, t, o]`` (``[16, N * H / 2 * W / 2, O]``) = ``A g A^T`` of each 2x2 tile ``g``
    of the channels-last output gradient ``gp`` ``[N, H, W, O]`` (``H`` and ``W`` even: the
    caller pads it with zeros), ``A = [[1, 0], [1, 1], [1, -1], [0, -1]]``."""
    t = 0
    for n in range(gp.shape[0]):
        for ty in range(gp.shape[1] // 2):
            top, bottom = gp[n, 2 * ty], gp[n, 2 * ty + 1]
            for tx in range(gp.shape[2] // 2):
                g00, g01 = top[2 * tx], top[2 * tx + 1]
                g10, g11 = bottom[2 * tx], bottom[2 * tx + 1]
                _signed(z[0, t], g00, _PLUS)
                _pair(z[1, t], g00, g01, _PLUS, _PLUS)
                _pair(z[2, t], g00, g01, _PLUS, _MINUS)
                _signed(z[3, t], g01, _MINUS)
                _pair(z[4, t], g00, g10, _PLUS, _PLUS)
                _combine(z[5, t], g00, g01, g10, g11, _PLUS, _PLUS, _PLUS)
                _combine(z[6, t], g00, g01, g10, g11, _MINUS, _PLUS, _MINUS)
                _pair(z[7, t], g01, g11, _MINUS, _MINUS)
                _pair(z[8, t], g00, g10, _PLUS, _MINUS)
                _combine(z[9, t], g00, g01, g10, g11, _PLUS, _MINUS, _MINUS)
                _combine(z[10, t], g00, g01, g10, g11, _MINUS, _MINUS, _PLUS)
                _pair(z[11, t], g01, g11, _MINUS, _PLUS)
                _signed(z[12, t], g10, _MINUS)
                _pair(z[13, t], g10, g11, _MINUS, _MINUS)
                _pair(z[14, t], g10, g11, _MINUS, _PLUS)
                _signed(z[15, t], g11, _PLUS)
                t += 1


#: F(2x2, 3x3)'s weight transform as a matrix, ``G``'s Kronecker square (float64, exact:
#: halves and quarters): ``U[e] = sum_k WEIGHT[e, k] w[..., k]`` (``k`` the 9 kernel offsets,
#: ``e`` the 16 transformed values, both row-major), and the weight gradient's ``dw[..., k] =
#: sum_e WEIGHT[e, k] dU[e]``: the definition :func:`weight_tiles` and
#: :func:`weight_grad_untile` compute in fewer operations (the tests hold them to it).
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
WEIGHT = np.kron(_G, _G)
#: ``G F = P G`` for the flip ``F`` of the three taps and ``P`` the swap of the first and last
#: of the four transformed ones: the transform of a flipped weight is the weight's, its 16
#: values permuted (``WEIGHT[FLIPPED]``: an input gradient's weight with no flipped copy).
FLIPPED = np.array([4 * p + q for p in (3, 1, 2, 0) for q in (3, 1, 2, 0)])
#: The identity order of :func:`weight_tiles`.
UNFLIPPED = np.arange(16)


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _three(dst, a, b, c, sb, scale):
    """``dst = scale (a + sb b + c)``."""
    for i in range(dst.shape[0]):
        dst[i] = scale * (a[i] + sb * b[i] + c[i])


@_jit
def weight_tiles(taps, order, u):
    """``u[order[e], a, b]`` (``[16, A, B]``) = value ``e`` of ``G w G^T`` for each 3x3
    kernel ``w`` (``taps[a, b]``, ``[A, B, 9]`` C-contiguous, row-major), as
    ``WEIGHT @ taps[a, b]`` but in 30 additions instead of 144 multiply-adds."""
    half = taps.dtype.type(0.5)
    one = taps.dtype.type(1)
    width = taps.shape[1]
    w = np.empty((9, width), dtype=taps.dtype)  # one row of kernels, offsets outermost
    r = np.empty((12, width), dtype=taps.dtype)  # G w: 4 x 3 per kernel
    for a in range(taps.shape[0]):
        for b in range(width):
            for k in range(9):
                w[k, b] = taps[a, b, k]
        for j in range(3):
            _signed(r[j], w[j], one)
            _three(r[3 + j], w[j], w[3 + j], w[6 + j], one, half)
            _three(r[6 + j], w[j], w[3 + j], w[6 + j], -one, half)
            _signed(r[9 + j], w[6 + j], one)
        for i in range(4):
            _signed(u[order[4 * i], a], r[3 * i], one)
            _three(u[order[4 * i + 1], a], r[3 * i], r[3 * i + 1], r[3 * i + 2], one, half)
            _three(u[order[4 * i + 2], a], r[3 * i], r[3 * i + 1], r[3 * i + 2], -one, half)
            _signed(u[order[4 * i + 3], a], r[3 * i + 2], one)


@_jit
def weight_grad_untile(du, taps):
    """``taps[o, c]`` (``[O, C, 9]``, row-major 3x3) = ``G^T du[:, o, c] G`` of ``du`` ``[16,
    O, C]``, as ``du[:, o, c] @ WEIGHT`` but in 36 additions instead of 144 multiply-adds."""
    half = du.dtype.type(0.5)
    one = du.dtype.type(1)
    width = du.shape[2]
    h = np.empty((12, width), dtype=du.dtype)  # G^T du: 3 x 4 per kernel
    k = np.empty((9, width), dtype=du.dtype)
    for o in range(du.shape[1]):
        # G^T's rows: [1, 1/2, 1/2, 0], [0, 1/2, -1/2, 0], [0, 1/2, 1/2, 1]
        for j in range(4):
            _half_sum(h[j], du[j, o], du[4 + j, o], du[8 + j, o], one, half)
            _pair(h[4 + j], du[4 + j, o], du[8 + j, o], half, -half)
            _half_sum(h[8 + j], du[12 + j, o], du[4 + j, o], du[8 + j, o], one, half)
        for i in range(3):
            _half_sum(k[3 * i], h[4 * i], h[4 * i + 1], h[4 * i + 2], one, half)
            _pair(k[3 * i + 1], h[4 * i + 1], h[4 * i + 2], half, -half)
            _half_sum(k[3 * i + 2], h[4 * i + 3], h[4 * i + 1], h[4 * i + 2], one, half)
        for c in range(width):
            for j in range(9):
                taps[o, c, j] = k[j, c]


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _half_sum(dst, a, b, c, sa, half):
    """``dst = sa a + half (b + c)``."""
    for i in range(dst.shape[0]):
        dst[i] = sa * a[i] + half * (b[i] + c[i])


# -- F(4x4, 3x3) -----------------------------------------------------------------------------------
# B^T = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
#        [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]
# G = [[1/4, 0, 0], [-1/6, -1/6, -1/6], [-1/6, 1/6, -1/6], [1/24, 1/12, 1/6],
#      [1/24, -1/12, 1/6], [0, 0, 1]]
# A^T = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]
# (Lavin and Gray's points 0, 1, -1, 2, -2 and infinity.)


# float32 constants (a float64 literal would make the arithmetic float64): these kernels are
# float32's (the callers' only dtype for F(4x4, 3x3))
_TWO, _FOUR, _FIVE, _EIGHT = np.float32(2), np.float32(4), np.float32(5), np.float32(8)
_QUARTER, _SIXTH, _TWELFTH = np.float32(1 / 4), np.float32(1 / 6), np.float32(1 / 12)
_MINUS_SIXTH, _TWENTY_FOURTH = np.float32(-1 / 6), np.float32(1 / 24)


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _input_row(d0, d1, d2, d3, d4, d5, r0, r1, r2, r3, r4, r5):
    """``r = B^T d`` for six vectors ``d`` (one loop per output: few pointers each)."""
    for i in range(r0.shape[0]):
        r0[i] = _FOUR * d0[i] - _FIVE * d2[i] + d4[i]
    for i in range(r0.shape[0]):
        r1[i] = d3[i] + d4[i] - _FOUR * (d1[i] + d2[i])
    for i in range(r0.shape[0]):
        r2[i] = d4[i] - d3[i] + _FOUR * (d1[i] - d2[i])
    for i in range(r0.shape[0]):
        r3[i] = d4[i] - d2[i] + _TWO * (d3[i] - d1[i])
    for i in range(r0.shape[0]):
        r4[i] = d4[i] - d2[i] + _TWO * (d1[i] - d3[i])
    for i in range(r0.shape[0]):
        r5[i] = _FOUR * d1[i] - _FIVE * d3[i] + d5[i]


@_jit
def input_tiles4(xp, tiles_h, tiles_w, v):
    """F(4x4, 3x3)'s ``v[e, t, c]`` (``[36, N * tiles_h * tiles_w, C]``) = ``B^T d B`` of
    each tile's 6x6 patch ``d`` of ``xp`` ``[N, >= 4 * tiles_h + 2, 4 * tiles_w + 2, C]``
    (tile ``(ty, tx)`` starts at ``(4 ty, 4 tx)``), tiles in order ``(n, ty, tx)``.

    ``B^T`` runs down the columns of a whole row of tiles at once (six loops as long as the
    row), then ``(.) B`` along each tile's rows: short loops (one per channel vector) are
    few."""
    width, channels = xp.shape[2], xp.shape[3]
    rows = np.empty((6, width, channels), dtype=xp.dtype)  # B^T d of a row of tiles
    t = 0
    for n in range(xp.shape[0]):
        for ty in range(tiles_h):
            y = 4 * ty
            _input_row(
                xp[n, y].reshape(-1), xp[n, y + 1].reshape(-1), xp[n, y + 2].reshape(-1),
                xp[n, y + 3].reshape(-1), xp[n, y + 4].reshape(-1), xp[n, y + 5].reshape(-1),
                rows[0].reshape(-1), rows[1].reshape(-1), rows[2].reshape(-1),
                rows[3].reshape(-1), rows[4].reshape(-1), rows[5].reshape(-1),
            )  # fmt: skip
            for tx in range(tiles_w):
                x = 4 * tx
                for a in range(6):
                    r = rows[a]
                    _input_row(
                        r[x], r[x + 1], r[x + 2], r[x + 3], r[x + 4], r[x + 5],
                        v[6 * a, t], v[6 * a + 1, t], v[6 * a + 2, t],
                        v[6 * a + 3, t], v[6 * a + 4, t], v[6 * a + 5, t],
                    )  # fmt: skip
                t += 1


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _output_row(m0, m1, m2, m3, m4, m5, y0, y1, y2, y3):
    """``y = A^T m`` for six vectors ``m``."""
    for i in range(y0.shape[0]):
        y0[i] = m0[i] + (m1[i] + m2[i]) + (m3[i] + m4[i])
    for i in range(y0.shape[0]):
        y1[i] = (m1[i] - m2[i]) + _TWO * (m3[i] - m4[i])
    for i in range(y0.shape[0]):
        y2[i] = (m1[i] + m2[i]) + _FOUR * (m3[i] + m4[i])
    for i in range(y0.shape[0]):
        y3[i] = (m1[i] - m2[i]) + _EIGHT * (m3[i] - m4[i]) + m5[i]


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _add(dst, bias):
    """``dst += bias``."""
    for i in range(dst.shape[0]):
        dst[i] += bias[i]


@_jit
def output_tiles4(m, out, bias, has_bias):
    """F(4x4, 3x3)'s ``out`` ``[N, H, W, O]`` (every cell written) = ``A^T m A`` of each
    tile's 36 values ``m[:, t, o]`` (``[36, N * ceil(H / 4) * ceil(W / 4), O]``), plus
    ``bias[o]`` when ``has_bias``; the cells of the last tiles past ``H`` or ``W`` dropped.
    ``A^T`` runs over a whole row of tiles at once (their values lie together in ``m``)."""
    batch, height, width, channels = out.shape
    tiles_h, tiles_w = (height + 3) // 4, (width + 3) // 4
    rows = np.empty((24, tiles_w, channels), dtype=m.dtype)  # A^T m: rows[6 i + b]
    partial = np.empty((4, channels), dtype=m.dtype)  # a row of a tile cut by the edge
    t = 0
    for n in range(batch):
        for ty in range(tiles_h):
            y = 4 * ty
            for b in range(6):
                _output_row(
                    m[b, t : t + tiles_w].reshape(-1), m[6 + b, t : t + tiles_w].reshape(-1),
                    m[12 + b, t : t + tiles_w].reshape(-1), m[18 + b, t : t + tiles_w].reshape(-1),
                    m[24 + b, t : t + tiles_w].reshape(-1), m[30 + b, t : t + tiles_w].reshape(-1),
                    rows[b].reshape(-1), rows[6 + b].reshape(-1),
                    rows[12 + b].reshape(-1), rows[18 + b].reshape(-1),
                )  # fmt: skip
            for tx in range(tiles_w):
                x = 4 * tx
                full = y + 4 <= height and x + 4 <= width
                for i in range(min(4, height - y)):
                    r0, r1, r2 = rows[6 * i, tx], rows[6 * i + 1, tx], rows[6 * i + 2, tx]
                    r3, r4, r5 = rows[6 * i + 3, tx], rows[6 * i + 4, tx], rows[6 * i + 5, tx]
                    if full:
                        _output_row(
                            r0, r1, r2, r3, r4, r5,
                            out[n, y + i, x], out[n, y + i, x + 1],
                            out[n, y + i, x + 2], out[n, y + i, x + 3],
                        )  # fmt: skip
                    else:
                        _output_row(
                            r0, r1, r2, r3, r4, r5,
                            partial[0], partial[1], partial[2], partial[3],
                        )  # fmt: skip
                        for j in range(min(4, width - x)):
                            out[n, y + i, x + j] = partial[j]
                    if has_bias:
                        for j in range(min(4, width - x)):
                            _add(out[n, y + i, x + j], bias)
            t += tiles_w


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _grad_row(g0, g1, g2, g3, z0, z1, z2, z3, z4, z5):
    """``z = A g`` for four vectors ``g`` (``A`` = ``A^T``'s transpose, 6 x 4)."""
    for i in range(z0.shape[0]):
        z0[i] = g0[i]
    for i in range(z0.shape[0]):
        z1[i] = (g0[i] + g2[i]) + (g1[i] + g3[i])
    for i in range(z0.shape[0]):
        z2[i] = (g0[i] + g2[i]) - (g1[i] + g3[i])
    for i in range(z0.shape[0]):
        z3[i] = (g0[i] + _FOUR * g2[i]) + _TWO * (g1[i] + _FOUR * g3[i])
    for i in range(z0.shape[0]):
        z4[i] = (g0[i] + _FOUR * g2[i]) - _TWO * (g1[i] + _FOUR * g3[i])
    for i in range(z0.shape[0]):
        z5[i] = g3[i]


@_jit
def grad_tiles4(gp, z):
    """F(4x4, 3x3)'s ``z[e, t, o]`` (``[36, N * H / 4 * W / 4, O]``) = ``A g A^T`` of each
    4x4 tile ``g`` of the channels-last output gradient ``gp`` ``[N, H, W, O]`` (``H`` and
    ``W`` multiples of 4: the caller pads it with zeros); ``A`` down a whole row of tiles
    at once."""
    width, channels = gp.shape[2], gp.shape[3]
    rows = np.empty((6, width, channels), dtype=gp.dtype)  # A g of a row of tiles
    t = 0
    for n in range(gp.shape[0]):
        for ty in range(gp.shape[1] // 4):
            y = 4 * ty
            _grad_row(
                gp[n, y].reshape(-1), gp[n, y + 1].reshape(-1),
                gp[n, y + 2].reshape(-1), gp[n, y + 3].reshape(-1),
                rows[0].reshape(-1), rows[1].reshape(-1), rows[2].reshape(-1),
                rows[3].reshape(-1), rows[4].reshape(-1), rows[5].reshape(-1),
            )  # fmt: skip
            for tx in range(width // 4):
                x = 4 * tx
                for a in range(6):
                    r = rows[a]
                    _grad_row(
                        r[x], r[x + 1], r[x + 2], r[x + 3],
                        z[6 * a, t], z[6 * a + 1, t], z[6 * a + 2, t],
                        z[6 * a + 3, t], z[6 * a + 4, t], z[6 * a + 5, t],
                    )  # fmt: skip
                t += 1


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _weight_row(w0, w1, w2, u0, u1, u2, u3, u4, u5):
    """``u = G w`` for three vectors ``w``."""
    for i in range(u0.shape[0]):
        u0[i] = _QUARTER * w0[i]
    for i in range(u0.shape[0]):
        u1[i] = _MINUS_SIXTH * (w0[i] + w1[i] + w2[i])
    for i in range(u0.shape[0]):
        u2[i] = _MINUS_SIXTH * (w0[i] - w1[i] + w2[i])
    for i in range(u0.shape[0]):
        u3[i] = _TWENTY_FOURTH * w0[i] + _TWELFTH * w1[i] + _SIXTH * w2[i]
    for i in range(u0.shape[0]):
        u4[i] = _TWENTY_FOURTH * w0[i] - _TWELFTH * w1[i] + _SIXTH * w2[i]
    for i in range(u0.shape[0]):
        u5[i] = w2[i]


@_jit
def weight_tiles4(taps, flip, u):
    """F(4x4, 3x3)'s ``u[e, a, b]`` (``[36, A, B]``) = ``G w G^T`` of each 3x3 kernel ``w``
    (``taps[a, b]``, ``[A, B, 9]`` C-contiguous, row-major; with ``flip``, turned by 180
    degrees: its taps reversed)."""
    width = taps.shape[1]
    w = np.empty((9, width), dtype=taps.dtype)
    r = np.empty((18, width), dtype=taps.dtype)  # G w: r[3 p + j]
    for a in range(taps.shape[0]):
        for b in range(width):
            for k in range(9):
                w[k, b] = taps[a, b, 8 - k] if flip else taps[a, b, k]
        for j in range(3):
            _weight_row(
                w[j], w[3 + j], w[6 + j], r[j], r[3 + j], r[6 + j], r[9 + j], r[12 + j], r[15 + j]
            )
        for p in range(6):
            _weight_row(
                r[3 * p], r[3 * p + 1], r[3 * p + 2],
                u[6 * p, a], u[6 * p + 1, a], u[6 * p + 2, a],
                u[6 * p + 3, a], u[6 * p + 4, a], u[6 * p + 5, a],
            )  # fmt: skip


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _untile_row(d0, d1, d2, d3, d4, d5, k0, k1, k2):
    """``k = G^T d`` for six vectors ``d``."""
    for i in range(k0.shape[0]):
        k0[i] = _QUARTER * d0[i] - _SIXTH * (d1[i] + d2[i]) + _TWENTY_FOURTH * (d3[i] + d4[i])
    for i in range(k0.shape[0]):
        k1[i] = _SIXTH * (d2[i] - d1[i]) + _TWELFTH * (d3[i] - d4[i])
    for i in range(k0.shape[0]):
        k2[i] = _SIXTH * ((d3[i] + d4[i]) - (d1[i] + d2[i])) + d5[i]


@_jit
def weight_grad_untile4(du, taps):
    """F(4x4, 3x3)'s ``taps[o, c]`` (``[O, C, 9]``, row-major 3x3) = ``G^T du[:, o, c] G``
    of ``du`` ``[36, O, C]``."""
    width = du.shape[2]
    h = np.empty((18, width), dtype=du.dtype)  # G^T du: h[6 i + b]
    k = np.empty((9, width), dtype=du.dtype)
    for o in range(du.shape[1]):
        for b in range(6):
            _untile_row(
                du[b, o], du[6 + b, o], du[12 + b, o], du[18 + b, o], du[24 + b, o], du[30 + b, o],
                h[b], h[6 + b], h[12 + b],
            )  # fmt: skip
        for i in range(3):
            _untile_row(
                h[6 * i], h[6 * i + 1], h[6 * i + 2], h[6 * i + 3], h[6 * i + 4], h[6 * i + 5],
                k[3 * i], k[3 * i + 1], k[3 * i + 2],
            )  # fmt: skip
        for c in range(width):
            for j in range(9):
                taps[o, c, j] = k[j, c]


@numba.njit(inline="always", error_model="numpy", cache=True, nogil=True)
def _fold_row(m0, m1, m2, m3, m4, m5, q0, q1, q2, q3, q4, q5):
    """``q = B m`` for six vectors ``m`` (``B``: ``B^T``'s transpose)."""
    for i in range(q0.shape[0]):
        q0[i] = _FOUR * m0[i]
    for i in range(q0.shape[0]):
        q1[i] = _FOUR * ((m2[i] - m1[i]) + m5[i]) + _TWO * (m4[i] - m3[i])
    for i in range(q0.shape[0]):
        q2[i] = -(_FIVE * m0[i] + _FOUR * (m1[i] + m2[i]) + (m3[i] + m4[i]))
    for i in range(q0.shape[0]):
        q3[i] = (m1[i] - m2[i]) + _TWO * (m3[i] - m4[i]) - _FIVE * m5[i]
    for i in range(q0.shape[0]):
        q4[i] = m0[i] + (m1[i] + m2[i]) + (m3[i] + m4[i])
    for i in range(q0.shape[0]):
        q5[i] = m5[i]


@_jit
def fold_tiles4(m, dx, tiles_h, tiles_w, top, left):
    """F(4x4, 3x3)'s input gradient: ``dx`` ``[N, H, W, C]`` (zeros on entry) += ``B m B^T``
    of each tile's 36 values ``m[:, t, c]`` (``[36, N * tiles_h * tiles_w, C]``: the
    products ``Z[e] @ U[e]`` of the transformed output gradient and weight), each tile's 6x6
    patch added where the forward's tile read its input, tile ``(ty, tx)`` at ``(4 ty - top,
    4 tx - left)`` (``top``, ``left``: the forward's padding). The patches overlap; their
    cells outside ``dx`` (the padding) are dropped. ``B`` runs over a whole row of tiles at
    once first."""
    batch, height, width, channels = dx.shape
    rows = np.empty((36, tiles_w, channels), dtype=m.dtype)  # B m: rows[6 i + b]
    patch = np.empty((6, channels), dtype=m.dtype)
    t = 0
    for n in range(batch):
        for ty in range(tiles_h):
            for b in range(6):
                _fold_row(
                    m[b, t : t + tiles_w].reshape(-1), m[6 + b, t : t + tiles_w].reshape(-1),
                    m[12 + b, t : t + tiles_w].reshape(-1), m[18 + b, t : t + tiles_w].reshape(-1),
                    m[24 + b, t : t + tiles_w].reshape(-1), m[30 + b, t : t + tiles_w].reshape(-1),
                    rows[b].reshape(-1), rows[6 + b].reshape(-1), rows[12 + b].reshape(-1),
                    rows[18 + b].reshape(-1), rows[24 + b].reshape(-1), rows[30 + b].reshape(-1),
                )  # fmt: skip
            for tx in range(tiles_w):
                for i in range(6):
                    y = 4 * ty + i - top
                    if y < 0 or y >= height:
                        continue
                    _fold_row(
                        rows[6 * i, tx], rows[6 * i + 1, tx], rows[6 * i + 2, tx],
                        rows[6 * i + 3, tx], rows[6 * i + 4, tx], rows[6 * i + 5, tx],
                        patch[0], patch[1], patch[2], patch[3], patch[4], patch[5],
                    )  # fmt: skip
                    for j in range(6):
                        x = 4 * tx + j - left
                        if 0 <= x < width:
                            _add(dx[n, y, x], patch[j])
            t += tiles_w
