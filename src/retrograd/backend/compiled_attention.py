"""The softmax passes of float32 attention as single compiled loops over rows (Numba).

Blocked attention (``backend/numpy_transformer.py``) spends its non-matmul time on the
``R x K`` score blocks. Forward takes each row's scores times the scale, their maximum, the
``exp`` of each less the maximum, their sum, and divides by it; backward exponentiates the
scaled scores less forward's log-sum-exp, then forms ``scale * (dP - rowsum(dP * P)) * P``. As
NumPy calls these are a dozen passes over each block (and a pass over ``q`` to scale it, over
``dq`` to scale that), and NumPy's float32 ``exp`` runs element by element on this project's
machines (about 4 ns an element). These loops make one pass over each row while it is in the
first-level cache, with the vectorizable ``expf`` of ``backend/compiled.py`` (Cephes' ``expf``
with fused multiply-adds; the arguments here are at most 0, so only its lower range check is
kept), and apply the causal mask by bounds instead of an added ``-inf``: the keys after a
query's own position are written as exact zeros, the probabilities ``exp(-inf)`` gave.

Bits: the scale multiplies the scores after the product (NumPy's path scales ``q`` before it),
the probabilities are normalised before the product with ``v`` (NumPy's path divides its
output rows), and ``exp`` differs from NumPy's float32 ``exp`` by a couple of ulp: outputs and
gradients agree with the NumPy formulation to a float32 tolerance (tests/test_compiled_attention
.py: 2e-6 of each result's largest magnitude, and as close to float64 as NumPy's).

The caller hands C-contiguous float32 blocks ``[N, R, K]``: ``N`` the (batch x head)
matrices, ``R`` query rows starting at query ``first``, ``K`` keys.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)
from .compiled import EXP_LOW, expf_within

__all__ = [
    "causal_limits",
    "exp_not_above_zero",
    "exp_scores",
    "row_max",
    "row_sum",
    "softmax_forward",
    "softmax_grad",
]

F = np.float32

_jit = numba.njit(error_model="numpy", cache=True, nogil=True)


@numba.njit(inline="always", error_model="numpy", cache=True)
def causal_limits(first, row, keys, causal):
    """How many keys query ``first + row`` sees: all ``keys``, or when causal those up to its
    own position (PyTorch's ``tril``: key ``j`` is hidden from query ``i`` when ``j > i``)."""
    return min(keys, first + row + 1) if causal else keys


@numba.njit(inline="always", error_model="numpy", cache=True)
def _larger(value, peak):
    """``value`` if it is larger than ``peak`` or NaN, else ``peak`` (NumPy's ``max``)."""
    return value if value > peak or value != value else peak


@numba.njit(inline="always", error_model="numpy", cache=True)
def row_max(row, limit):
    """The maximum of ``row[:limit]`` (``limit >= 1``), NaN if any is, over four interleaved
    running maxima (one chain of comparisons would wait on each in turn)."""
    a = b = c = d = row[0]
    quads = limit // 4 * 4
    for j in range(0, quads, 4):
        a, b = _larger(row[j], a), _larger(row[j + 1], b)
        c, d = _larger(row[j + 2], c), _larger(row[j + 3], d)
    for j in range(quads, limit):
        a = _larger(row[j], a)
    return _larger(_larger(b, a), _larger(d, c))


@numba.njit(error_model="numpy", cache=True, fastmath={"reassoc"})
def row_sum(row, limit):
    """The sum of ``row[:limit]``, in vector lanes (reassociated: LLVM vectorizes a sum only
    so; the same order on every call of the same length)."""
    total = F(0.0)
    for j in range(limit):
        total += row[j]
    return total


@numba.njit(inline="always", error_model="numpy", cache=True)
def exp_not_above_zero(x):
    """``exp(x)`` for a float32 ``x <= 0`` (a scaled score less its row's maximum or
    log-sum-exp) or NaN (kept): 0 below ``EXP_LOW``, as ``expf``."""
    below = x < EXP_LOW
    y = expf_within(EXP_LOW if below else x)
    return F(0.0) if below else y


@_jit
def softmax_forward(scores, first, causal, scale, lse):
    """In place, each row's probabilities ``softmax(scale * s)`` over the keys it sees (zeros
    after them); ``lse[n, r]`` each row's log-sum-exp of ``scale * s`` over those keys (a row
    whose scores are all ``-inf``: zeros and ``+inf``, as the NumPy formulation's)."""
    count, rows, keys = scores.shape
    for n in range(count):
        for r in range(rows):
            row = scores[n, r]
            limit = causal_limits(first, r, keys, causal)
            for j in range(limit):
                row[j] *= scale
            peak = row_max(row, limit)
            if peak == -np.inf:
                # every score -inf (a key holding -inf, not a mask): torch's zero row, not
                # exp(-inf - -inf) = NaN; lse = +inf makes backward's exp 0 there too
                for j in range(keys):
                    row[j] = 0.0
                lse[n, r] = np.inf
                continue
            for j in range(limit):
                row[j] = exp_not_above_zero(row[j] - peak)
            total = row_sum(row, limit)
            inverse = F(1.0) / total
            for j in range(limit):
                row[j] *= inverse
            for j in range(limit, keys):
                row[j] = 0.0
            lse[n, r] = peak + F(math.log(total))


@_jit
def exp_scores(scores, lse, first, causal, scale):
    """In place, each row's probabilities ``exp(scale * s - lse)`` over the keys it sees
    (zeros after them), ``lse[n, r]`` the row's log-sum-exp from forward."""
    count, rows, keys = scores.shape
    for n in range(count):
        for r in range(rows):
            row = scores[n, r]
            limit = causal_limits(first, r, keys, causal)
            shift = lse[n, r]
            for j in range(limit):
                row[j] = exp_not_above_zero(row[j] * scale - shift)
            for j in range(limit, keys):
                row[j] = 0.0


@_jit
def softmax_grad(dprobs, probs, row_sums, scale):
    """In place, the unscaled scores' gradient ``(dP - rowsum(dP * P)) * P * scale``
    (``row_sums[n, r]``)."""
    count, rows, keys = dprobs.shape
    for n in range(count):
        for r in range(rows):
            target, p = dprobs[n, r], probs[n, r]
            total = row_sums[n, r]
            for j in range(keys):
                target[j] = (target[j] - total) * p[j] * scale
