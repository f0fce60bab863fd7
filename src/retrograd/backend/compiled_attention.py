"""The softmax passes of float32 attention as single compiled loops over rows (Numba).

Blocked attention (``backend/numpy_transformer.py``) spends its non-matmul time on the
``L x S`` score blocks: forward adds the causal bias to the diagonal block, takes each row's
maximum, subtracts it and exponentiates; backward adds the bias and subtracts the log-sum-exp
before exponentiating, then forms ``(dP - rowsum(dP * P)) * P``. As NumPy calls these are six
and four passes over each block, and NumPy's float32 ``exp`` runs element by element on this
project's machines (about 4 ns an element). These loops make one pass each, with the
vectorizable ``expf`` of ``backend/compiled.py`` (Cephes' ``expf`` with fused multiply-adds),
and apply the causal mask by bounds instead of an added ``-inf``: the keys after a query's
own position are written as exact zeros, the probabilities ``exp(-inf)`` gave.

Bits: the maximum and the subtraction give NumPy's bits (one IEEE operation each); only
``exp`` differs from NumPy's float32 ``exp``, by a couple of ulp per probability, so outputs
and gradients agree with the NumPy formulation to a float32 tolerance
(tests/test_compiled_attention.py: 2e-6 of each result's largest magnitude, and as close to
float64 as NumPy's). ``(dP - row) * P`` keeps NumPy's order and bits.

The caller hands C-contiguous float32 blocks ``[N, R, K]``: ``N`` the (batch x head)
matrices, ``R`` query rows starting at query ``first``, ``K`` keys.
"""

from __future__ import annotations

import numba

from .compiled import expf

__all__ = ["causal_limits", "exp_scores", "softmax_forward", "softmax_grad"]

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
def _row_max(row, limit):
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


@_jit
def softmax_forward(scores, first, causal, peaks):
    """In place, each row's unnormalised probabilities ``exp(s - max(s))`` over the keys it
    sees (zeros after them); ``peaks[n, r]`` each row's maximum."""
    count, rows, keys = scores.shape
    for n in range(count):
        for r in range(rows):
            row = scores[n, r]
            limit = causal_limits(first, r, keys, causal)
            peak = _row_max(row, limit)
            for j in range(limit):
                row[j] = expf(row[j] - peak)
            for j in range(limit, keys):
                row[j] = 0.0
            peaks[n, r] = peak


@_jit
def exp_scores(scores, lse, first, causal):
    """In place, each row's probabilities ``exp(s - lse)`` over the keys it sees (zeros
    after them), ``lse[n, r]`` the row's log-sum-exp from forward."""
    count, rows, keys = scores.shape
    for n in range(count):
        for r in range(rows):
            row = scores[n, r]
            limit = causal_limits(first, r, keys, causal)
            shift = lse[n, r]
            for j in range(limit):
                row[j] = expf(row[j] - shift)
            for j in range(limit, keys):
                row[j] = 0.0


@_jit
def softmax_grad(dprobs, probs, row_sums):
    """In place, the scores' gradient ``(dP - rowsum(dP * P)) * P`` (``row_sums[n, r]``)."""
    count, rows, keys = dprobs.shape
    for n in range(count):
        for r in range(rows):
            target, p = dprobs[n, r], probs[n, r]
            total = row_sums[n, r]
            for j in range(keys):
                target[j] = (target[j] - total) * p[j]
