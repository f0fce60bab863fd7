"""The fold (col2im) of a 2-d transposed convolution as one compiled loop (Numba).

A transposed convolution whose windows overlap (stride below the kernel) sums, into each
output cell, the products of the input cells whose windows cover it. As NumPy operations that
is one strided add over the whole output per kernel offset: nine passes for a 3x3 kernel, each
reading the products with a stride of ``prod(kernel) * C``. This loop makes the same passes,
per sample, while that sample's products are still in cache (the caller multiplies and folds
one small batch block at a time): each output cell receives its contributions in the same
order (kernel offsets in row-major order, starting from zero), so the same bits, a quarter
less time than NumPy's passes over large blocks on the small CNN's input gradient.

A bias's gradient, the per-channel sums of a channels-last output gradient, is one pass here
too, accumulated in float64 in memory order (NumPy's ``einsum`` casts blocks to float64 first:
twice the time).

A weight ``[O, C, T]`` (``T`` the kernel's taps) reordered tap-major, ``[T, O, C]``, and back:
the tap-by-tap convolutions' operands. NumPy's copy of the transposed view reads every ``T``-th
value; these loops read one filter's row (``C * T`` values, in the L1 cache) and write its
``T`` runs of ``C`` values (and back: read ``T`` runs, write one row), about 0.5 ms each way
against NumPy's 0.8 and 1.0 on ResNet-18's 512x512x3x3 weight.
"""

from __future__ import annotations

import numba

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)

__all__ = ["channel_sums", "fold2d", "taps_first", "taps_last"]


@numba.njit(error_model="numpy", cache=True, nogil=True)
def fold2d(products, out, sh, sw, dh, dw):
    """``out[n, y, x, c]`` (``[B, H, W, C]``, every cell written) = the sum, kernel offsets
    ``(i, j)`` in row-major order, of ``products[n, m, l, i, j, c]`` (``[B, in_h, in_w, kh,
    kw, C]``) over the input cells ``(m, l)`` with ``m * sh + i * dh == y`` and ``l * sw + j *
    dw == x``."""
    batch, in_h, in_w, kh, kw, channels = products.shape
    out[...] = 0
    for n in range(batch):
        for i in range(kh):
            for j in range(kw):
                for m in range(in_h):
                    y = m * sh + i * dh
                    for l in range(in_w):  # noqa: E741  (the input column, as in the docstring)
                        x = l * sw + j * dw
                        for c in range(channels):
                            out[n, y, x, c] += products[n, m, l, i, j, c]


@numba.njit(error_model="numpy", cache=True, nogil=True)
def channel_sums(rows, sums):
    """``sums[c]`` (float64, zeros on entry) += ``rows[m, c]`` (``[M, C]``), ``m`` in order."""
    for m in range(rows.shape[0]):
        for c in range(rows.shape[1]):
            sums[c] += rows[m, c]


@numba.njit(error_model="numpy", cache=True, nogil=True)
def taps_first(weight, out):
    """``out[t, o, c]`` (``[T, O, C]``) = ``weight[o, c, t]`` (``[O, C, T]``)."""
    for o in range(weight.shape[0]):
        for t in range(weight.shape[2]):
            for c in range(weight.shape[1]):
                out[t, o, c] = weight[o, c, t]


@numba.njit(error_model="numpy", cache=True, nogil=True)
def taps_last(taps, out):
    """``out[o, c, t]`` (``[O, C, T]``) = ``taps[t, o, c]`` (``[T, O, C]``)."""
    for o in range(taps.shape[1]):
        for t in range(taps.shape[0]):
            for c in range(taps.shape[2]):
                out[o, c, t] = taps[t, o, c]
