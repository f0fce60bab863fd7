"""NumPy kernels of the fused transformer primitives: layer norm, attention and log-softmax.

Every kernel follows one rule for temporaries: it writes into arrays it has just created itself
(``out=`` and in-place ufuncs on them), never into an argument, which the autodiff engine may
still hold for another rule.

Attention never materialises the whole ``[..., L, S]`` probability tensor: the leading (batch)
dimension is processed in blocks whose ``L x S`` scores fit in cache
(:data:`ATTENTION_BLOCK_ELEMENTS`), forward as in backward. Forward keeps the output and the
log-sum-exp of each row (``[..., L]``); backward recomputes each block's probabilities as
``exp(scores - lse)`` (one matmul and one ``exp``, measured cheaper than keeping them: keeping
them costs a ``[..., L, S]`` array per layer for the whole forward, as much as the rest of the
block's activations at block size 128) and needs two ``L x S`` temporaries per block, the
probabilities and their gradient. FlashAttention's backward, blocked over the batch instead of
over the sequence (NumPy pays per call, not per element). In float32 without a mask or
dropout, each block's softmax passes (the scale, the causal mask, the row maximum, ``exp``,
the row sums and the normalisation, and backward's ``scale * (dP - rowsum(dP * P)) * P``) run
as one compiled loop each (``backend/compiled_attention.py``: within float32 rounding of these
NumPy passes), and a block is two matmuls and a loop.

The outputs of attention and its gradients are laid out in memory as their inputs are (the
shape is the protocol's, the layout the backend's choice): q, k, v of a transformer are views
``[B, T, H, E] -> [B, H, T, E]``, and an output ``[B, H, T, E]`` lying in memory as
``[B, T, H, E]`` makes the ``transpose(1, 2).reshape(B, T, C)`` that follows a free view.
"""

from __future__ import annotations

import numpy as np

from . import special

__all__ = ["ATTENTION_BLOCK_ELEMENTS", "NumpyTransformerKernels"]

#: Scores per block of attention (float32: 1 MiB), so that the block's passes run in cache.
ATTENTION_BLOCK_ELEMENTS = 1 << 18


def _row_mean(x: np.ndarray) -> np.ndarray:
    """The mean of each row (last dimension), kept as a dimension of size 1: a matrix-vector
    product with ``1 / width`` (BLAS), about 4x faster than NumPy's reduction along a short
    last axis, which pays per row."""
    width = x.shape[-1]
    return np.matmul(x, np.full((width, 1), 1.0 / width, dtype=x.dtype))


def _column_sum(x: np.ndarray) -> np.ndarray:
    """The sum over every leading dimension (a ``[D]`` result), as a vector-matrix product."""
    rows = x.reshape(-1, x.shape[-1])
    return np.matmul(np.ones(rows.shape[0], dtype=x.dtype), rows)


#: Elements per block of rows of layer norm, so that a block's passes run in cache.
LAYER_NORM_BLOCK_ELEMENTS = 1 << 15


#: Elements per block of rows of log-softmax (float32: 256 KiB).
LOG_SOFTMAX_BLOCK_ELEMENTS = 1 << 16


def _row_ranges(
    count: int, width: int, elements: int = LAYER_NORM_BLOCK_ELEMENTS
) -> list[tuple[int, int]]:
    """``(start, end)`` of each block of rows of ``elements`` (layer norm's by default)."""
    step = max(1, elements // max(width, 1))
    return [(start, min(start + step, count)) for start in range(0, count, step)]


def _like(x: np.ndarray, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """An uninitialized array laid out in memory as ``x`` (its axis order), of ``shape``."""
    if shape is None or tuple(shape) == x.shape:
        return np.empty_like(x, order="K")
    return np.empty(shape, x.dtype)


def _causal_bias(length: int, source: int, dtype: np.dtype) -> np.ndarray:
    """``-inf`` where key ``j`` is hidden from query ``i`` (``j > i``, PyTorch's ``tril``),
    else 0: added to the scores (a broadcast add; measured faster than a masked copy)."""
    return np.triu(np.full((length, source), -np.inf, dtype=dtype), 1)


def _block_rows(q: np.ndarray, length: int, source: int) -> int:
    """How many entries of the leading dimension one block of attention takes."""
    per_entry = length * source * (int(np.prod(q.shape[1:-2])) if q.ndim > 3 else 1)
    return max(1, ATTENTION_BLOCK_ELEMENTS // max(per_entry, 1))


#: Query rows per block of causal attention: a block of rows attends only to the keys up to
#: its last row, so the scores above the diagonal are mostly never computed (5/8 of the
#: square at T = 128, as FlashAttention skips masked tiles). 32 against 64 rows, interleaved
#: at GPT-small's shapes since the mask went to diagonal blocks only: backward ~10% faster,
#: forward even.
ATTENTION_ROWS = 32


def _batch_blocks(q: np.ndarray, length: int, source: int) -> list[tuple[int, int]]:
    step = _block_rows(q, length, source)
    return [(start, min(start + step, q.shape[0])) for start in range(0, q.shape[0], step)]


def _row_blocks(length: int, source: int, causal: bool) -> list[tuple[slice, int]]:
    """``(query rows, number of keys they attend to)`` per block, in order."""
    if not causal or length <= ATTENTION_ROWS:
        return [(slice(0, length), source)]
    blocks = []
    for start in range(0, length, ATTENTION_ROWS):
        end = min(start + ATTENTION_ROWS, length)
        blocks.append((slice(start, end), min(source, end)))
    return blocks


def _rows(x: np.ndarray, rows: slice, keys: int) -> np.ndarray:
    """The part of a mask or dropout multiplier ``[..., L or 1, S or 1]`` for a row block."""
    return x[
        ...,
        rows if x.shape[-2] != 1 else slice(None),
        slice(0, keys) if x.shape[-1] != 1 else slice(None),
    ]


def _accumulate(target: np.ndarray, a: np.ndarray, b: np.ndarray, index: int) -> None:
    """``target = a @ b`` for the first block, ``target += a @ b`` after."""
    if index == 0:
        np.matmul(a, b, out=target)
    else:
        target += np.matmul(a, b)


def _extend(x: np.ndarray) -> np.ndarray:
    """A contiguous copy of ``x`` with one more, unset, last column."""
    extended = np.empty((*x.shape[:-1], x.shape[-1] + 1), x.dtype)
    np.copyto(extended[..., :-1], x)
    return extended


def _part(x: np.ndarray, start: int, end: int, ndim: int) -> np.ndarray:
    """The block ``[start:end]`` of a mask or dropout multiplier (broadcast along dim 0 when
    its first dimension is 1)."""
    if x.ndim == ndim and x.shape[0] != 1:
        return x[start:end]
    return x


def _compiled_layer_norm(x: np.ndarray, *others: np.ndarray) -> bool:
    """Whether layer norm runs in the compiled kernels (``backend/compiled_norm.py``): float32
    or float64 rows, every other array of the same dtype, nothing empty."""
    return (
        x.dtype in (np.float32, np.float64)
        and x.size > 0
        and all(other.dtype == x.dtype for other in others)
    )


def _layer_norm_compiled(x, weight, bias, eps):
    from .compiled_norm import layer_norm_rows  # Numba: imported (and compiled) on first use

    width = x.shape[-1]
    rows = np.ascontiguousarray(x).reshape(-1, width)
    out = np.empty(rows.shape, x.dtype)
    stats = np.empty((2, rows.shape[0]), x.dtype)
    weight, bias = np.ascontiguousarray(weight), np.ascontiguousarray(bias)
    layer_norm_rows(rows, weight, bias, float(eps), out, stats[0], stats[1])
    return out.reshape(x.shape), stats.reshape(2, *x.shape[:-1])


def _layer_norm_backward_compiled(grad, x, weight, stats):
    from .compiled_norm import layer_norm_backward_rows

    width = x.shape[-1]
    rows = np.ascontiguousarray(x).reshape(-1, width)
    grads = np.ascontiguousarray(grad).reshape(-1, width)
    means, rstds = np.ascontiguousarray(stats).reshape(2, -1)
    dx = np.empty(rows.shape, x.dtype)
    dweight, dbias = np.zeros(width), np.zeros(width)
    weight = np.ascontiguousarray(weight)
    no_addend = np.empty((0, width), x.dtype)
    layer_norm_backward_rows(grads, rows, weight, means, rstds, no_addend, dx, dweight, dbias)
    return dx.reshape(x.shape), dweight.astype(x.dtype), dbias.astype(x.dtype)


def _compiled_softmax(q, k, v, mask, drop, *others):
    """The compiled softmax loops (``backend/compiled_attention.py``) when they take this
    attention: float32 throughout, neither a mask nor dropout; else ``None``."""
    if mask.size or drop.size or not all(a.dtype == np.float32 for a in (q, k, v, *others)):
        return None
    if q.size == 0 or k.shape[-2] == 0:
        return None
    from . import compiled_attention  # Numba: imported (and compiled) on first use

    return compiled_attention


def _stack(block: np.ndarray, dims: int = 2) -> np.ndarray:
    """A block ``[..., R, K]`` (``dims`` 2) or ``[..., R]`` (``dims`` 1) as the C-contiguous
    ``[N, R, K]`` or ``[N, R]`` the compiled loops take: a view of a contiguous block, a copy
    of a strided one (which they only read)."""
    return np.ascontiguousarray(block).reshape(-1, *block.shape[-dims:])


def _exp_less_peak(scores, mask_part, hidden, rows, keys, mask):
    """NumPy's softmax passes of a forward block, in place: the mask and causal bias added,
    ``exp(s - max(s))``; returns each row's maximum (0 where every key is masked) and where
    rows are fully masked (``None`` when none is)."""
    if mask.size:
        scores += _rows(mask_part, rows, keys)
    if hidden is not None and rows.start < keys:  # keys before the rows: seen
        scores[..., rows.start :] += hidden[rows, rows.start : keys]
    peak = np.max(scores, axis=-1, keepdims=True)
    hidden_rows = np.isneginf(peak)  # every key masked: a zero row (torch)
    if not hidden_rows.any():
        hidden_rows = None
    else:
        peak[hidden_rows] = 0.0
    scores -= peak
    np.exp(scores, out=scores)
    return peak, hidden_rows


def _attention_compiled(kernels, q, k, v, scale, causal):
    """Float32 attention without mask or dropout, each block's softmax one compiled loop
    (``backend/compiled_attention.py``: the scale, the row maxima, ``exp``, the row sums and
    the normalisation), so that each block is two matmuls and one loop: ``q`` is not scaled
    beforehand, ``v`` not extended by a column of ones, the output not divided afterwards."""
    length, source = q.shape[-2], k.shape[-2]
    out = _like(q, (*q.shape[:-1], v.shape[-1]))
    lse = np.empty(q.shape[:-1], q.dtype)
    factor = q.dtype.type(scale)
    for start, end in _batch_blocks(q, length, source):
        queries, keys_t, values = q[start:end], np.swapaxes(k[start:end], -1, -2), v[start:end]
        for rows, keys in _row_blocks(length, source, causal):
            probs = np.matmul(queries[..., rows, :], keys_t[..., :keys])
            block_lse = np.empty(probs.shape[:-1], probs.dtype)
            kernels.softmax_forward(_stack(probs), rows.start, causal, factor, _stack(block_lse, 1))
            lse[start:end, ..., rows] = block_lse
            np.matmul(probs, values[..., :keys, :], out=out[start:end, ..., rows, :])
    return out, lse


def _attention_backward_compiled(kernels, grad, q, k, v, out, lse, scale, causal):
    """The backward of :func:`_attention_compiled`: per block the probabilities recomputed
    (one matmul, one loop), ``dP``, and the scaled scores' gradient in one loop, so that
    neither ``q`` nor ``dq`` takes a pass for the scale."""
    length, source = q.shape[-2], k.shape[-2]
    dq, dk, dv = _like(q), _like(k), _like(v)
    factor = q.dtype.type(scale)
    row = np.einsum("...ld,...ld->...l", grad, out)  # rowsum(dP * P), from the small tensors
    # the widest row block first: it writes the gradients of the keys it reaches (all but,
    # when causal with L < S, the last S - L, which no query sees), the others add
    blocks = _row_blocks(length, source, causal)[::-1]
    reached = blocks[0][1]
    dk[..., reached:, :] = 0.0
    dv[..., reached:, :] = 0.0
    for start, end in _batch_blocks(q, length, source):
        queries, keys, grads = q[start:end], k[start:end], grad[start:end]
        keys_t, values_t = np.swapaxes(keys, -1, -2), np.swapaxes(v[start:end], -1, -2)
        dq_part, dk_part, dv_part = dq[start:end], dk[start:end], dv[start:end]
        for index, (rows, width) in enumerate(blocks):
            probs = np.matmul(queries[..., rows, :], keys_t[..., :width])
            shift = _stack(lse[start:end, ..., rows], 1)
            kernels.exp_scores(_stack(probs), shift, rows.start, causal, factor)
            g = grads[..., rows, :]
            dprobs = np.matmul(g, values_t[..., :width])
            _accumulate(dv_part[..., :width, :], np.swapaxes(probs, -1, -2), g, index)
            sums = _stack(row[start:end, ..., rows], 1)
            kernels.softmax_grad(_stack(dprobs), _stack(probs), sums, factor)
            np.matmul(dprobs, keys[..., :width, :], out=dq_part[..., rows, :])
            _accumulate(
                dk_part[..., :width, :], np.swapaxes(dprobs, -1, -2), queries[..., rows, :], index
            )
    return dq, dk, dv


class NumpyTransformerKernels:
    """The fused transformer kernels of :class:`~retrograd.backend.NumpyBackend`."""

    def linear(self, x, weight, bias):
        out = np.matmul(x, weight.T)
        if bias.size:
            out += bias  # the product is this kernel's own array
        return out

    def gelu_backward(self, grad, x):
        return special.gelu_backward(grad, x)

    # -- log-softmax -------------------------------------------------------------------------
    # Over the last dimension, in blocks of rows (:data:`LOG_SOFTMAX_BLOCK_ELEMENTS`) whose
    # passes run in cache, forward and backward: a language model's ``[tokens, vocabulary]``
    # head is tens of MiB, and whole-array passes each go to memory. Another dimension takes
    # whole-array passes (on arrays made here, no temporary left over).
    def log_softmax(self, x, dim):
        if x.size == 0:  # nothing to normalise (np.max of an empty axis raises)
            return x.copy()
        if dim != x.ndim - 1:
            out = np.subtract(x, np.max(x, axis=dim, keepdims=True))
            total = np.sum(np.exp(out), axis=dim, keepdims=True)
            return np.subtract(out, np.log(total, out=total), out=out)
        rows = x.reshape(-1, x.shape[-1])
        out = np.empty(rows.shape, x.dtype)
        for start, end in _row_ranges(rows.shape[0], rows.shape[1], LOG_SOFTMAX_BLOCK_ELEMENTS):
            block, target = rows[start:end], out[start:end]
            np.subtract(block, np.max(block, axis=1, keepdims=True), out=target)
            total = np.sum(np.exp(target), axis=1, keepdims=True)
            np.subtract(target, np.log(total, out=total), out=target)
        return out.reshape(x.shape)

    def log_softmax_backward(self, grad, out, dim):
        if out.size == 0:
            return np.zeros(out.shape, np.result_type(grad, out))
        if dim != out.ndim - 1:
            result = np.exp(out)
            result *= -np.sum(grad, axis=dim, keepdims=True)
            return np.add(result, grad, out=result)
        width = out.shape[-1]
        rows, grads = out.reshape(-1, width), grad.reshape(-1, width)
        result = np.empty(rows.shape, np.result_type(grad, out))
        for start, end in _row_ranges(rows.shape[0], width, LOG_SOFTMAX_BLOCK_ELEMENTS):
            target, block = result[start:end], grads[start:end]
            np.exp(rows[start:end], out=target)
            target *= -np.sum(block, axis=1, keepdims=True)
            target += block
        return result.reshape(out.shape)

    # -- layer norm ---------------------------------------------------------------------------
    # Both kernels run over blocks of rows (:data:`LAYER_NORM_BLOCK_ELEMENTS`), every pass of a
    # block while it is in cache: measured about 2x faster than whole-array passes at a GPT's
    # [2048, 128] (each whole-array pass went to memory).
    def layer_norm(self, x, weight, bias, eps):
        if _compiled_layer_norm(x, weight, bias):
            return _layer_norm_compiled(x, weight, bias, eps)
        width = x.shape[-1]
        rows = x.reshape(-1, width)
        out = np.empty(rows.shape, x.dtype)
        stats = np.empty((2, rows.shape[0]), x.dtype)
        for start, end in _row_ranges(rows.shape[0], width):
            block, target = rows[start:end], out[start:end]
            mean = _row_mean(block)
            np.subtract(block, mean, out=target)
            variance = np.einsum("ij,ij->i", target, target)[:, None]
            variance *= x.dtype.type(1.0 / width)
            variance += eps
            rstd = np.sqrt(variance, out=variance)
            np.reciprocal(rstd, out=rstd)
            target *= rstd
            if weight.size:
                target *= weight
            if bias.size:
                target += bias
            stats[0, start:end], stats[1, start:end] = mean[:, 0], rstd[:, 0]
        return out.reshape(x.shape), stats.reshape(2, *x.shape[:-1])

    def layer_norm_backward(self, grad, x, weight, stats, eps):
        if _compiled_layer_norm(x, weight, grad, stats):
            return _layer_norm_backward_compiled(grad, x, weight, stats)
        # dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = grad * weight, xhat =
        # (x - mean) * rstd, rearranged so that both row means are matrix-vector products of
        # arrays made anyway: mean(gw) = grad @ w / D, mean(gw * xhat) = rstd * (grad * (x -
        # mean)) @ w / D. Then dx = rstd * gw + (x - mean) * beta + gamma per row: seven
        # passes over [N, D] instead of thirteen.
        width = x.shape[-1]
        rows, grads = x.reshape(-1, width), grad.reshape(-1, width)
        means, rstds = stats.reshape(2, -1, 1)
        dtype = x.dtype.type
        w = weight if weight.size else np.ones(width, x.dtype)
        dx = np.empty(rows.shape, x.dtype)
        dweight = np.zeros(width, x.dtype)
        centered = product = None
        for start, end in _row_ranges(rows.shape[0], width):
            block, g, target = rows[start:end], grads[start:end], dx[start:end]
            mean, rstd = means[start:end], rstds[start:end]
            if centered is None or centered.shape[0] != end - start:
                centered = np.empty((end - start, width), x.dtype)
                product = np.empty_like(centered)
            np.subtract(block, mean, out=centered)
            np.multiply(g, centered, out=product)  # grad * (x - mean)
            dweight += np.matmul(rstd[:, 0], product)  # sum over rows of grad * xhat
            projection = np.matmul(product, w)[:, None]  # D * mean(gw * xhat) / rstd
            offset = np.matmul(g, w)[:, None]  # D * mean(gw)
            projection *= rstd * rstd * rstd
            projection *= dtype(-1.0 / width)  # beta = -rstd^2 * mean(gw * xhat)
            offset *= rstd
            offset *= dtype(-1.0 / width)  # gamma = -rstd * mean(gw)
            np.multiply(g, w, out=target)
            target *= rstd
            centered *= projection
            target += centered
            target += offset
        return dx.reshape(x.shape), dweight, _column_sum(grads)

    # -- attention ----------------------------------------------------------------------------
    def attention(self, q, k, v, mask, drop, scale, causal):
        compiled = _compiled_softmax(q, k, v, mask, drop)
        if compiled is not None:
            return _attention_compiled(compiled, q, k, v, scale, causal)
        length, source = q.shape[-2], k.shape[-2]
        out = _like(q, (*q.shape[:-1], v.shape[-1]))
        lse = np.empty(q.shape[:-1], q.dtype)
        hidden = _causal_bias(length, source, q.dtype) if causal else None
        ndim = q.ndim
        factor = q.dtype.type(scale)
        # Each row's scores less the row's own maximum, as torch's kernels: exp cannot
        # overflow, and each exponent is rounded at its own size. (Any larger shift, a bound
        # on the scores say, rounds every exponent at the shift's size: with one long key, an
        # attention sink, float32 errors several times torch's.)
        for start, end in _batch_blocks(q, length, source):
            scaled = np.multiply(q[start:end], factor)
            keys_t = np.swapaxes(k[start:end], -1, -2)
            values = v[start:end]
            # values with a column of ones: the product with the unnormalised probabilities
            # then also gives each row's sum (normalising after it, FlashAttention's way, on
            # L x Ev values instead of L x S, and no reduction along a short axis)
            extended = _extend(values)
            extended[..., -1] = 1.0
            ones = extended[..., -1:]
            mask_part, drop_part = _part(mask, start, end, ndim), _part(drop, start, end, ndim)
            for rows, keys in _row_blocks(length, source, causal):
                scores = np.matmul(scaled[..., rows, :], keys_t[..., :keys])
                peak, hidden_rows = _exp_less_peak(scores, mask_part, hidden, rows, keys, mask)
                target = out[start:end, ..., rows, :]
                if drop.size:  # the sum of the kept probabilities, then dropout
                    total = np.matmul(scores, ones[..., :keys, :])
                    scores *= _rows(drop_part, rows, keys)
                    weighted = np.matmul(scores, values[..., :keys, :])
                else:
                    weighted = np.matmul(scores, extended[..., :keys, :])
                    total = weighted[..., -1:]
                    weighted = weighted[..., :-1]
                if hidden_rows is not None:  # 0 / 1 = 0 there; lse = +inf makes backward's exp 0
                    total = np.where(hidden_rows, 1.0, total).astype(total.dtype)
                    peak[hidden_rows] = np.inf
                np.divide(weighted, total, out=target)
                lse[start:end, ..., rows] = (np.log(total) + peak)[..., 0]
        return out, lse

    def attention_backward(self, grad, q, k, v, out, lse, mask, drop, scale, causal):
        compiled = _compiled_softmax(q, k, v, mask, drop, grad)
        if compiled is not None:
            return _attention_backward_compiled(compiled, grad, q, k, v, out, lse, scale, causal)
        length, source = q.shape[-2], k.shape[-2]
        dq, dk, dv = _like(q), _like(k), _like(v)
        hidden = _causal_bias(length, source, q.dtype) if causal else None
        ndim = q.ndim
        factor = q.dtype.type(scale)
        # rowsum(grad * out) = rowsum(dP * P): the softmax term, from the small tensors
        row = np.einsum("...ld,...ld->...l", grad, out)
        for start, end in _batch_blocks(q, length, source):
            scaled = np.multiply(q[start:end], factor)
            keys, keys_t = k[start:end], np.swapaxes(k[start:end], -1, -2)
            values_t, grads = np.swapaxes(v[start:end], -1, -2), grad[start:end]
            mask_part, drop_part = _part(mask, start, end, ndim), _part(drop, start, end, ndim)
            dk_part, dv_part, dq_part = dk[start:end], dv[start:end], dq[start:end]
            # the widest row block first: it writes the gradients of the keys it reaches (all
            # but, when causal with L < S, the last S - L, which no query sees), the others add
            blocks = _row_blocks(length, source, causal)
            reached = blocks[-1][1]
            if reached < source:
                dk_part[..., reached:, :] = 0.0
                dv_part[..., reached:, :] = 0.0
            for index, (rows, width) in enumerate(reversed(blocks)):
                probs = np.matmul(scaled[..., rows, :], keys_t[..., :width])
                if mask.size:
                    probs += _rows(mask_part, rows, width)
                probs -= lse[start:end, ..., rows, None]
                if hidden is not None and rows.start < width:
                    probs[..., rows.start :] += hidden[rows, rows.start : width]
                np.exp(probs, out=probs)
                g = grads[..., rows, :]
                dprobs = np.matmul(g, values_t[..., :width])
                kept = probs
                if drop.size:
                    part = _rows(drop_part, rows, width)
                    dprobs *= part
                    kept = probs * part
                _accumulate(dv_part[..., :width, :], np.swapaxes(kept, -1, -2), g, index)
                dprobs -= row[start:end, ..., rows, None]
                dprobs *= probs
                np.matmul(dprobs, keys[..., :width, :], out=dq_part[..., rows, :])
                _accumulate(
                    dk_part[..., :width, :],
                    np.swapaxes(dprobs, -1, -2),
                    scaled[..., rows, :],
                    index,
                )
            dq_part *= factor
        return dq, dk, dv
