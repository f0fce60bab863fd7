"""Layer norm forward and backward as single loops over rows, compiled with Numba.

NumPy pays per call, so its layer norm is a dozen whole passes over each block of rows (the
mean, the centred rows, their squares, the scaling, the weight, the bias; backward twice as
many). These kernels make one pass over memory each: a row (a few hundred elements, in L1)
is read once, its sums taken in the loops that follow, and the result written once. Backward
is PyTorch's formula, ``dx = rstd * (g w - mean(g w) - xhat * mean(g w xhat))``, with
``xhat = (x - mean) * rstd``: one loop for the two row sums (and the weight and bias
gradients), one for ``dx``, both over the row in cache.

Forward takes each row's mean and variance in float64 (two passes over the row in cache, the
variance of the centred values) and rounds them once to the arrays' dtype. Backward's row sums
are in the arrays' dtype, as PyTorch's; the weight and bias gradients are summed over blocks of
:data:`ROWS_PER_FLUSH` rows in the arrays' dtype and those block sums in float64 (float64 adds
per element measured 1.8x slower for the whole backward). The elementwise arithmetic stays in
the arrays' dtype. Sums are reassociated (``fastmath`` ``reassoc`` only, so LLVM vectorizes
them); the order is fixed by the compiled code, so results are the same from run to run.

Batch norm over channels-last rows ``[M, C]`` (a convolution's output: ``[N, H, W, C]`` in
memory) is per channel, along the columns: the forward's two passes of sums (the mean, then
the squares of the centred values) and one that writes the output; the backward's one pass
of sums (of the gradient and of its product with the centred input) and one that writes the
input's gradient: four and three passes over memory where NumPy's whole-array operations made
eight and ten (ResNet-18's batch norms at batch 16, each timed alone and summed: forward 2.7 ->
1.1 ms, backward 3.6 -> 1.4 ms a step, torch's 1.0 and 1.3; one thread). Float32 by default
(``numpy_nn.COMPILED_BATCH_NORM_DTYPES``). The sums are the NumPy backend's
(``numpy_nn._channel_dot``): in the arrays' dtype over blocks of ``block`` rows, the block
sums in float64; the arithmetic per element is the NumPy kernels', in the arrays' dtype, in
the same order. Not reassociated: each channel's sum runs
down its column, the loops across channels vectorize as they are.

Numba caches the machine code beside this file (or in its user-wide cache); the module is
imported on the first layer norm (or channels-last batch norm) the NumPy backend runs.
"""

from __future__ import annotations

import numba
import numpy as np

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)

__all__ = [
    "ROWS_PER_FLUSH",
    "batch_norm_backward_columns",
    "batch_norm_columns",
    "channel_moments",
    "channel_projections",
    "layer_norm_backward_rows",
    "layer_norm_rows",
]

_jit = numba.njit(error_model="numpy", cache=True, nogil=True, fastmath={"reassoc"})
_exact = numba.njit(error_model="numpy", cache=True, nogil=True)


@_jit
def layer_norm_rows(x, weight, bias, eps, out, means, rstds):
    """``out = (x - mean) * rstd * weight + bias`` for each row of the C-contiguous ``x``
    ``[N, D]`` (``weight``/``bias`` empty: none), ``means[i]``/``rstds[i]`` each row's mean
    and ``1 / sqrt(var + eps)``, the variance the biased one (over ``D``)."""
    rows, width = x.shape
    scaled, shifted = weight.size > 0, bias.size > 0
    for i in range(rows):
        row = x[i]
        total = 0.0
        for j in range(width):
            total += row[j]
        mean64 = total / width
        squares = 0.0
        for j in range(width):
            centred = row[j] - mean64
            squares += centred * centred
        rstd64 = 1.0 / np.sqrt(squares / width + eps)
        means[i], rstds[i] = mean64, rstd64
        mean, rstd = means[i], rstds[i]  # in the arrays' dtype
        target = out[i]
        for j in range(width):
            value = (row[j] - mean) * rstd
            if scaled:
                value = value * weight[j]
            if shifted:
                value = value + bias[j]
            target[j] = value


#: Rows whose weight and bias gradients are summed in the arrays' dtype before each flush into
#: the float64 totals: float64 sums of short float32 sums, at float32 speed (a float64 add per
#: element measured 1.8x slower for the whole kernel).
ROWS_PER_FLUSH = 16


@_jit
def layer_norm_backward_rows(grad, x, weight, means, rstds, addend, dx, dweight, dbias):
    """The gradients of ``sum(grad * layer_norm(x))`` for the C-contiguous ``grad``, ``x``
    ``[N, D]``: ``dx`` written, ``dweight``/``dbias`` (float64 ``[D]``, zeros on entry) the
    sums over rows of ``grad * xhat`` and ``grad``; ``weight`` empty: none.

    With ``addend`` ``[N, D]`` (C-contiguous; empty: none), ``dx`` receives ``addend + dx``,
    each row's sum taken while the row is in cache, the input's gradient never stored in
    memory (a residual stream's gradient summed with the layer norm's in one pass,
    ``capture/norm.py``). Both uses run this one compiled function and its one loop for
    ``dx``, so the reassociated sums are the same machine code and ``addend + dx`` has the
    bits of the two steps (two kernels with copies of the loops gave results 1 ulp apart once
    in CI; tests/test_capture_norm.py compares them). The add's own pass costs the fused call
    10-20% over one loop writing ``addend + dx`` (measured on [2048, 384] float32); the plain
    call is as fast as before."""
    rows, width = x.shape
    scaled, added = weight.size > 0, addend.size > 0
    factors = np.empty(2, x.dtype)  # the two row means, rounded to the arrays' dtype
    partial_weight = np.zeros(width, x.dtype)
    partial_bias = np.zeros(width, x.dtype)
    zero = partial_bias[0]  # a zero of the arrays' dtype (callers pass width > 0)
    for i in range(rows):
        row, g, target = x[i], grad[i], dx[i]
        mean, rstd = means[i], rstds[i]
        # The two row sums in a loop that stores nothing: LLVM vectorizes a reduction loop
        # that also stores (the channel sums below, once here) only behind run-time checks
        # that no array overlaps another, and ``weight`` or ``addend`` empty may point
        # anywhere, even next to this call's own buffers. Where a check failed the sums ran
        # in the scalar loop's order: the bits depended on where the allocator put an
        # empty array (a checkpointed step's gradients differed in the last bit).
        weighted = zero  # sum of g * w
        projected = zero  # sum of g * w * xhat
        for j in range(width):
            xhat = (row[j] - mean) * rstd
            gw = g[j] * weight[j] if scaled else g[j]
            weighted += gw
            projected += gw * xhat
        for j in range(width):
            partial_weight[j] += g[j] * ((row[j] - mean) * rstd)
            partial_bias[j] += g[j]
        factors[0], factors[1] = weighted / width, projected / width
        offset, slope = factors[0], factors[1]
        for j in range(width):
            xhat = (row[j] - mean) * rstd
            gw = g[j] * weight[j] if scaled else g[j]
            target[j] = rstd * (gw - offset - xhat * slope)
        if added:  # the row is in cache: a pass over it, not over memory
            base = addend[i]
            for j in range(width):
                target[j] = base[j] + target[j]
        if (i + 1) % ROWS_PER_FLUSH == 0 or i + 1 == rows:
            for j in range(width):
                dweight[j] += partial_weight[j]
                dbias[j] += partial_bias[j]
                partial_weight[j] = 0
                partial_bias[j] = 0


@_exact
def _flush(partial, totals, i, rows, block):
    """Add the block sums ``partial`` into the float64 ``totals`` (and zero them) after row
    ``i`` when a block of ``block`` rows, or the last row, ends there."""
    if (i + 1) % block == 0 or i + 1 == rows:
        for j in range(partial.shape[0]):
            totals[j] += partial[j]
            partial[j] = 0


@_exact
def channel_moments(rows, block, means, variances):
    """Per column of ``rows`` ``[M, C]`` (C-contiguous, M > 0): ``means[c]`` its mean and
    ``variances[c]`` the mean of the squares of its values less that mean rounded to the
    arrays' dtype (float64 ``[C]`` outputs; sums as the module docstring says)."""
    count, channels = rows.shape
    partial = np.zeros(channels, rows.dtype)
    totals = np.zeros(channels, np.float64)
    for i in range(count):
        row = rows[i]
        for j in range(channels):
            partial[j] += row[j]
        _flush(partial, totals, i, count, block)
    for j in range(channels):
        means[j] = totals[j] / count
        totals[j] = 0
    centre = means.astype(rows.dtype)
    for i in range(count):
        row = rows[i]
        for j in range(channels):
            centred = row[j] - centre[j]
            partial[j] += centred * centred
        _flush(partial, totals, i, count, block)
    for j in range(channels):
        variances[j] = totals[j] / count


@_exact
def batch_norm_columns(rows, centre, scale, shift, shifted, out):
    """``out[m, c] = (rows[m, c] - centre[c]) * scale[c] (+ shift[c] where ``shifted``)``, in
    the arrays' dtype."""
    for i in range(rows.shape[0]):
        row, target = rows[i], out[i]
        for j in range(rows.shape[1]):
            value = (row[j] - centre[j]) * scale[j]
            if shifted:
                value = value + shift[j]
            target[j] = value


@_exact
def channel_projections(grad, rows, centre, block, sums, projections):
    """Per column, ``sums[c]`` the sum of ``grad`` and ``projections[c]`` that of ``grad *
    (rows - centre)`` (``[M, C]`` C-contiguous, M > 0; float64 ``[C]`` outputs, zeros on
    entry)."""
    count, channels = rows.shape
    partial_sums = np.zeros(channels, rows.dtype)
    partial_projections = np.zeros(channels, rows.dtype)
    for i in range(count):
        row, g = rows[i], grad[i]
        for j in range(channels):
            partial_sums[j] += g[j]
            partial_projections[j] += g[j] * (row[j] - centre[j])
        _flush(partial_sums, sums, i, count, block)
        _flush(partial_projections, projections, i, count, block)


@_exact
def batch_norm_backward_columns(grad, rows, centre, a, b, k, dx):
    """``dx[m, c] = grad[m, c] * a[c] + ((rows[m, c] - centre[c]) * b[c] + k[c])``, in the
    arrays' dtype."""
    for i in range(rows.shape[0]):
        row, g, target = rows[i], grad[i], dx[i]
        for j in range(rows.shape[1]):
            target[j] = g[j] * a[j] + ((row[j] - centre[j]) * b[j] + k[j])
