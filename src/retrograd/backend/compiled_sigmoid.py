"""The float32 sigmoid and SiLU as single compiled loops (Numba), for large arrays.

NumPy's sigmoid here is six passes over memory (``|x|``, the negation, ``exp``, two
divisions and a select) with float32 ``exp`` run element by element, and slower still where
``exp(-|x|)`` is subnormal: about 49 ms for a million elements against torch's 3.8 (one
thread). These loops make one pass, with the vectorizable ``expf`` of ``backend/compiled.py``
(within 1.5 float32 ulp of the true value), in the arrays' own memory order
(:func:`.compiled_relu.dense_flat`), and the same formula: ``1 / (1 + t)`` for ``x >= 0`` and
``t / (1 + t)`` below, ``t = exp(-|x|)``, so no intermediate overflows. As torch's, a
result below float32's normal range (``x < -87.3``) is zero, NaN stays NaN; SiLU is ``x *
sigmoid(x)``.
"""

from __future__ import annotations

import numba
import numpy as np

from .compiled_attention import exp_not_above_zero

__all__ = ["sigmoid_flat", "silu_flat"]

F = np.float32


@numba.njit(inline="always", error_model="numpy", cache=True)
def _sigmoid(x):
    tail = exp_not_above_zero(-abs(x))
    return F(1.0) / (F(1.0) + tail) if x >= 0 else tail / (F(1.0) + tail)


@numba.njit(error_model="numpy", cache=True, nogil=True)
def sigmoid_flat(x, out):
    """``out[i] = sigmoid(x[i])`` for one-dimensional float32 views."""
    for i in range(x.size):
        out[i] = _sigmoid(x[i])


@numba.njit(error_model="numpy", cache=True, nogil=True)
def silu_flat(x, out):
    """``out[i] = x[i] * sigmoid(x[i])`` for one-dimensional float32 views."""
    for i in range(x.size):
        out[i] = x[i] * _sigmoid(x[i])
