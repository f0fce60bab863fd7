"""The float32 sigmoid, SiLU and tanh as single compiled loops (Numba), for large arrays.

NumPy's float32 transcendental functions run element by element on this project's machines,
and its sigmoid is six passes over memory besides (``|x|``, the negation, ``exp``, two
divisions and a select), slower still where ``exp(-|x|)`` is subnormal: about 49 ms for a
million elements against torch's 3.8, and ``np.tanh`` 3.6 ms against 1.1 here (one thread).
These loops make one pass, in the arrays' own memory order (:func:`.compiled_relu.dense_flat`),
on the vectorizable ``expf`` of ``backend/compiled.py`` (within 1.5 float32 ulp):

- ``sigmoid``: ``1 / (1 + t)`` for ``x >= 0`` and ``t / (1 + t)`` below, ``t = exp(-|x|)``
  (NumPy's formula: nothing overflows); as torch's, a result below float32's normal range
  (``x < -87.3``) is zero; SiLU is ``x * sigmoid(x)``;
- ``tanh``: Cephes' ``tanhf``, ``1 - 2 / (exp(2|x|) + 1)`` with the sign of ``x`` above
  ``|x| = 0.625`` and an odd polynomial below (no cancellation near zero), within 1.3 float32
  ulp (NumPy's: 1.4), ``-0.0`` and NaN kept.
"""

from __future__ import annotations

import numba
import numpy as np

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)
from .compiled import expf
from .compiled_attention import exp_not_above_zero

__all__ = ["sigmoid_flat", "silu_flat", "tanh_flat"]

F = np.float32
#: Cephes' ``tanhf`` polynomial for ``|x| <= 0.625``: ``tanh(x) = x + x z P(z)``, ``z = x**2``
#: (highest power first)
_TANH = tuple(
    F(c) for c in (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1)
)
_TANH_LAST = F(-3.33332819422e-1)


@numba.njit(inline="always", error_model="numpy", cache=True)
def _sigmoid(x):
    tail = exp_not_above_zero(-abs(x))
    return F(1.0) / (F(1.0) + tail) if x >= 0 else tail / (F(1.0) + tail)


@numba.njit(inline="always", error_model="numpy", cache=True)
def _tanh(x):
    size = abs(x)
    if size > F(0.625):
        above = F(1.0) - F(2.0) / (expf(size + size) + F(1.0))
        return above if x > 0 else -above
    z = x * x
    if z == F(0.0):  # 0, -0.0 and subnormals: tanh(x) is x (the sum below loses -0.0's sign)
        return x
    p = _TANH[0]
    for c in _TANH[1:]:
        p = p * z + c
    return (p * z + _TANH_LAST) * z * x + x


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


@numba.njit(error_model="numpy", cache=True, nogil=True)
def tanh_flat(x, out):
    """``out[i] = tanh(x[i])`` for one-dimensional float32 views."""
    for i in range(x.size):
        out[i] = _tanh(x[i])
