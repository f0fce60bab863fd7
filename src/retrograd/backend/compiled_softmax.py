"""The softmax op and its gradient over the last dimension of float32 rows, one compiled loop
each (Numba).

NumPy's softmax is five passes over memory (the row maxima, the shift, ``exp``, the sums, the
division) and its float32 ``exp`` runs element by element on this project's machines (about
4 ns an element): a masked attention written out (``att.masked_fill(mask, -inf).softmax(-1)``)
spent more on it than on the product before it. Here each row is read while it is in the
first-level cache: its maximum, ``exp`` of each element less it (the vectorizable ``expf`` of
``backend/compiled.py``, within 1.5 float32 ulp), their sum, then the scaling by its inverse.
The gradient ``out * (grad - rowsum(grad * out))`` is a dot product and one pass per row.

Bits: ``exp`` differs from NumPy's by a couple of ulp and the sums are taken in vector lanes,
so results agree with the NumPy formulation to float32 rounding, not bit for bit; every call on
the same row gives the same bits (a recomputed softmax matches forward's). Infinities and NaN
are torch's: a row holding NaN, or ``+inf``, or only ``-inf``, is NaN; ``-inf`` elements of
any other row are exact zeros.
"""

from __future__ import annotations

import numba
import numpy as np

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)
from .compiled_attention import exp_not_above_zero, row_max, row_sum

__all__ = ["softmax_backward_rows", "softmax_rows"]

F = np.float32

_jit = numba.njit(error_model="numpy", cache=True, nogil=True)


@_jit
def softmax_rows(x, out):
    """``out[r] = softmax(x[r])`` for C-contiguous float32 ``[rows, width]`` arrays."""
    rows, width = x.shape
    for r in range(rows):
        row, target = x[r], out[r]
        peak = row_max(row, width)
        for j in range(width):
            target[j] = exp_not_above_zero(row[j] - peak)
        inverse = F(1.0) / row_sum(target, width)
        for j in range(width):
            target[j] *= inverse


@numba.njit(error_model="numpy", cache=True, fastmath={"reassoc"})
def _row_dot(a, b, width):
    """``sum(a[:width] * b[:width])`` in vector lanes (the same order on every call)."""
    total = F(0.0)
    for j in range(width):
        total += a[j] * b[j]
    return total


@_jit
def softmax_backward_rows(grad, out, result):
    """``result[r] = out[r] * (grad[r] - sum(grad[r] * out[r]))`` for C-contiguous float32
    ``[rows, width]`` arrays: the gradient of ``sum(grad * softmax(x))`` in ``x``."""
    rows, width = out.shape
    for r in range(rows):
        g, p, target = grad[r], out[r], result[r]
        total = _row_dot(g, p, width)
        for j in range(width):
            target[j] = p[j] * (g[j] - total)
