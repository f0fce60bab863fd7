"""torch's fused elementwise kernels as single compiled loops (Numba), for large float arrays:
``lerp``, ``add``/``sub`` with an ``alpha``, ``addcmul``, each with LLVM's ``fma`` (one
instruction, rounded once) where torch's kernel has its ``vec::fmadd``, so the bits are torch's
(:mod:`.numpy_fma` gives the same bits in NumPy passes, for small arrays: a small model never
loads Numba).

The caller (:class:`~retrograd.backend.NumpyBackend`) hands them one-dimensional views of
arrays of one shape and dtype that lie densely in memory in the same order
(:func:`.compiled_relu.dense_flat`); a scalar operand comes as a NumPy scalar of that dtype.
"""

from __future__ import annotations

import numba
from numba.extending import intrinsic

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)

__all__ = ["add_scaled_flat", "addcmul_flat", "fma", "lerp_flat", "lerp_scalar_flat"]

_jit = numba.njit(error_model="numpy", cache=True, nogil=True)


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` rounded once (three floats of one type)."""

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return a(a, a, a), codegen


@_jit
def lerp_flat(x, end, weight, out):
    """torch's ``lerp``: ``fma(w, end - x, x)`` where ``|w| < 1/2``, else
    ``fma(w - 1, end - x, end)`` (exact at both ends)."""
    one = x.dtype.type(1)
    for i in range(x.size):
        w = weight[i]
        diff = end[i] - x[i]
        if abs(w) < 0.5:
            out[i] = fma(w, diff, x[i])
        else:
            out[i] = fma(w - one, diff, end[i])


@_jit
def lerp_scalar_flat(x, end, weight, out):
    """:func:`lerp_flat` with one weight."""
    small = abs(weight) < 0.5
    coefficient = weight if small else weight - x.dtype.type(1)
    if small:
        for i in range(x.size):
            out[i] = fma(coefficient, end[i] - x[i], x[i])
    else:
        for i in range(x.size):
            out[i] = fma(coefficient, end[i] - x[i], end[i])


@_jit
def add_scaled_flat(x, y, alpha, out):
    """torch's ``add`` with ``alpha``: ``fma(y, alpha, x)``."""
    for i in range(x.size):
        out[i] = fma(y[i], alpha, x[i])


@_jit
def addcmul_flat(x, t1, t2, value, out):
    """torch's ``addcmul``: ``fma(value * t1, t2, x)``."""
    for i in range(x.size):
        out[i] = fma(value * t1[i], t2[i], x[i])
