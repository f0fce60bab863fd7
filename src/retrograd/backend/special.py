"""The error function and the exact GELU for the NumPy backend.

float64 goes to :mod:`scipy.special` (``erf``, ``erfc``: Cephes, accurate to about an ulp).

float32 does not: scipy's ufuncs evaluate element by element, about 15 ns an element on one
core of the benchmark machine (2**20 float32 values: scipy ``erf`` 15.8 ms, ``np.exp`` 0.5
ms, torch's vectorized ``erf`` 0.9 ms), which made the exact GELU most of a GPT step. float32
evaluates instead the rational approximation Eigen and XLA use for float32 ``erf``: the
argument clamped to [-4, 4] (beyond, erf is +-1 in float32), then ``x * P(x^2) / Q(x^2)``
with P of degree 6 and Q of degree 4, as whole-array NumPy ufuncs on blocks small enough to
stay in cache (one pass over memory instead of twenty). It agrees with the exact value to
4.2e-7 relative everywhere (about four float32 epsilons; tests/test_transformer_ops.py checks
it against scipy in float64) and runs about four times faster than scipy's float32 ``erf``.

:func:`gelu` and :func:`gelu_backward` in float32 write Phi as a logistic of a fitted
polynomial, evaluated in one vectorized loop compiled with Numba (``backend/compiled.py``,
which has the polynomial and its own vectorizable ``exp``).
"""

from __future__ import annotations

import threading

import numpy as np

from .lazy import scipy_special

__all__ = ["erf", "gelu", "gelu_backward"]

#: Elements per block: up to four float32 scratch buffers of this size (1 MiB) stay in a core's
#: L2 cache (2 MiB here); measured 4-7% faster than 32 K (fewer ufunc calls), 128 K slower.
_BLOCK = 1 << 16

# Eigen's generic_fast_erf_float (also XLA's ErfImpl32): odd numerator, even denominator.
_ALPHA = tuple(
    np.float32(c)
    for c in (
        -2.72614225801306e-10,  # x^13
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,  # x^1
    )
)
_BETA = tuple(
    np.float32(c)
    for c in (
        -1.45660718464996e-05,  # x^8
        -2.13374055278905e-04,
        -1.68282697438203e-03,
        -7.37332916720468e-03,
        -1.42647390514189e-02,  # x^0
    )
)
_INV_SQRT_2 = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


#: each thread's scratch buffers (a workspace, as BLAS keeps one): allocated once, not per call,
#: so that they neither cost page faults every call nor add to the activation memory of a step
_WORKSPACE = threading.local()


def _blocks(size: int, buffers: int = 4):
    """``(start, end, scratch buffers of the block's length)`` for each block of a flat array
    of ``size`` elements; the float32 buffers are this thread's workspace (taken while the
    loop runs: a kernel run inside another's loop makes its own)."""
    scratch = getattr(_WORKSPACE, "free", None)
    _WORKSPACE.free = None
    if scratch is None:
        scratch = np.empty((4, _BLOCK), np.float32)
    try:
        for start in range(0, size, _BLOCK):
            end = min(start + _BLOCK, size)
            yield start, end, *scratch[:buffers, : end - start]
    finally:
        _WORKSPACE.free = scratch


def _polynomial(x: np.ndarray, coefficients: tuple, out: np.ndarray) -> np.ndarray:
    """The polynomial of ``coefficients`` (highest power first) at the float32 block ``x``,
    by Horner's rule, into ``out``."""
    np.multiply(x, coefficients[0], out=out)
    for coefficient in coefficients[1:-1]:
        out += coefficient
        out *= x
    out += coefficients[-1]
    return out


def _rational_block(t, x2, p, q, alpha, beta) -> np.ndarray:
    """``t * alpha(t^2) / beta(t^2)`` of the float32 block ``t`` into ``p`` (``x2``, ``q``:
    scratch); ``alpha``, ``beta`` list coefficients from the highest power down."""
    np.multiply(t, t, out=x2)
    _polynomial(x2, alpha, p)
    p *= t
    np.divide(p, _polynomial(x2, beta, q), out=p)
    return p


def _erf_block(t: np.ndarray, x2: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """erf of the float32 block ``t`` (overwritten with its clamped value); the result is
    left in ``p`` (``x2``, ``q`` are scratch)."""
    np.clip(t, -4.0, 4.0, out=t)
    return _rational_block(t, x2, p, q, _ALPHA, _BETA)


def _flat(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, in the dtype of ``x`` (float64 for ints).

    >>> float(erf(np.array(0.5)))
    0.5204998778130465
    """
    x = np.asarray(x)
    if x.dtype != np.float32:
        return scipy_special.erf(x if x.dtype == np.float64 else x.astype(np.float64))
    flat = _flat(x)
    out = np.empty_like(flat)
    for start, end, t, x2, p, q in _blocks(flat.size):
        np.copyto(t, flat[start:end])
        out[start:end] = _erf_block(t, x2, p, q)  # NaN passes through clip and the rational
    return out.reshape(x.shape)


def gelu(x: np.ndarray) -> np.ndarray:
    """``x * Phi(x)``, Phi the standard normal CDF, in the dtype of ``x``.

    float64: ``0.5 * x * erfc(-x / sqrt(2))``, exact where ``1 + erf`` would cancel; float32:
    ``x / (1 + exp(-v(x)))``, ``v`` the fitted logit of Phi (``backend/compiled.py``), in one
    vectorized loop.
    """
    if x.dtype != np.float32:
        return (0.5 * x) * scipy_special.erfc(x * -_INV_SQRT_2)
    from .compiled import gelu_float32  # Numba: imported (and compiled) on first use

    flat = _flat(x)
    out = np.empty_like(flat)
    gelu_float32(flat, out)
    return out.reshape(x.shape)


def gelu_backward(grad: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``grad * (Phi(x) + x * phi(x))``, the gradient of :func:`gelu` at ``x``.

    float32 differentiates :func:`gelu`'s own formula (the fitted logistic, one ``exp``;
    ``backend/compiled.py``) rather than reading ``Phi`` back from the forward's output:
    backward then holds only ``x``, and the output is freed as soon as the next layer's
    backward has read it, as in torch (the output held to the GELU's backward put the GPT's
    activation peak 4 MiB above torch's at GPT-small's shapes).
    """
    if x.dtype != np.float32:
        cdf = 0.5 * scipy_special.erfc(x * -_INV_SQRT_2)
        return grad * (cdf + x * (np.exp(-0.5 * np.square(x)) * _INV_SQRT_2PI))
    from .compiled import gelu_backward_float32

    grad, x = np.broadcast_arrays(grad, x)
    result = np.empty(x.size, np.float32)
    gelu_backward_float32(_flat(grad), _flat(x), result)
    return result.reshape(x.shape)
