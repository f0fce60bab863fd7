"""torch's ``ctc_loss`` composed of backend primitives: the forward (alpha) recursion in log
space, each sequence's negative log-likelihood (the arithmetic of ``nn.functional.ctc_loss``'s
composite, op for op, so its bits), and the gradient in the log-probabilities from the
log-probabilities and the targets alone: the alpha recursion is rerun in the backward beside
the beta recursion, never held between forward and backward (torch's ``_ctc_loss`` holds its
``[T, N, 2S + 1]`` alphas).

``targets`` are padded ``[N, S]`` int64 labels; the lengths are host tuples, read on the host
as torch reads them. A state no alignment reaches has the log-probability ``IMPOSSIBLE``,
finite, so that no ``inf - inf`` reaches a value or a gradient.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

IMPOSSIBLE = -1e30


def _extended(b, targets: Any, blank: int) -> tuple[Any, Any]:
    """The extended labels ``[N, 2S + 1]`` (blank, l1, blank, l2, ..., blank) and where a
    state may be entered from two states back (a label other than blank and than the label
    before it), ``[N, 2S + 1]`` bool."""
    n, s = b.shape(targets)
    device = b.device(targets)
    blanks = b.full((n, s, 1), blank, "int64", device)
    pairs = b.cat([blanks, b.reshape(targets, (n, s, 1))], 2)
    ext = b.cat([b.reshape(pairs, (n, 2 * s)), b.full((n, 1), blank, "int64", device)], 1)
    width = 2 * s + 1
    skip = b.full((n, min(width, 2)), False, "bool", device)
    if width > 2:
        later = b.slice(ext, (slice(0, n, 1), slice(2, width, 1)))
        earlier = b.slice(ext, (slice(0, n, 1), slice(0, width - 2, 1)))
        allowed = b.logical_and(b.not_equal_elem(later, blank), b.not_equal(later, earlier))
        skip = b.cat([skip, allowed], 1)
    return ext, skip


def _logsumexp0(b, stacked: Any) -> Any:
    """``logsumexp`` over dim 0, kept: the tensor method's arithmetic (shifted by the largest
    entry short of ``+inf``, 0 where that is infinite)."""
    shifted = b.mask_fill(stacked, b.equal_elem(stacked, math.inf), -math.inf)
    peak = b.max_dim(shifted, 0)[0]
    peak = b.mask_fill(peak, b.is_inf(peak), 0.0)
    return b.add(b.log(b.sum_dim(b.exp(b.sub(stacked, peak)), (0,))), peak)


def _stack0(b, pieces: list[Any]) -> Any:
    return b.cat([b.reshape(p, (1, *b.shape(p))) for p in pieces], 0)


def _time_step(b, x: Any, t: int) -> Any:
    """``x[t]``, ``[N, C]``."""
    _, n, c = b.shape(x)
    return b.reshape(b.slice(x, (slice(t, t + 1, 1), slice(0, n, 1), slice(0, c, 1))), (n, c))


def _shifted(b, values: Any, by: int, fill: Any) -> Any:
    """``values`` ``[N, L]`` moved ``by`` states along dim 1 (right for ``by > 0``, left for
    ``by < 0``), ``fill`` ``[N, 1]`` coming in."""
    n, width = b.shape(values)
    k = abs(by)
    if by > 0:
        kept = b.slice(values, (slice(0, n, 1), slice(0, width - k, 1)))
        return b.cat([fill] * k + [kept], 1)
    kept = b.slice(values, (slice(0, n, 1), slice(k, width, 1)))
    return b.cat([kept] + [fill] * k, 1)


def _running(b, lengths: tuple[int, ...], t: int, device: Any) -> Any:
    """``[N, 1]`` bool: which sequences are still read at time ``t``."""
    host = (np.asarray(lengths, np.int64) > t).reshape(-1, 1)
    return b.from_data(host, "bool", device)


def _alphas(b, x: Any, ext: Any, skip: Any, in_lengths: tuple[int, ...]) -> list[Any]:
    """The log-space alphas ``[N, L]`` of every time step (an alpha stays as it was once its
    sequence has ended)."""
    steps = b.shape(x)[0]
    n, width = b.shape(ext)
    dtype, device = b.dtype(x), b.device(x)
    impossible = b.full((n, 1), IMPOSSIBLE, dtype, device)
    start = np.full((n, width), IMPOSSIBLE)
    start[:, 0] = 0.0
    if width > 1:  # (targets of no labels, [N, 0]: the blank-only path alone)
        start[:, 1] = 0.0
    alpha = b.add(b.gather(_time_step(b, x, 0), ext, 1), b.from_data(start, dtype, device))
    alphas = [alpha]
    never = b.full((n, width), IMPOSSIBLE, dtype, device)
    for t in range(1, steps):
        candidates = [alpha, _shifted(b, alpha, 1, impossible)]
        if width > 2:
            two = _shifted(b, alpha, 2, impossible)
            candidates.append(b.mask_where(two, b.logical_not(skip), never))
        step = b.add(b.reshape(_logsumexp0(b, _stack0(b, candidates)), (n, width)),
                     b.gather(_time_step(b, x, t), ext, 1))  # fmt: skip
        alpha = b.mask_where(alpha, _running(b, in_lengths, t, device), step)
        alphas.append(alpha)
    return alphas


def ctc_loss(
    b, x: Any, targets: Any, blank: int, in_lengths: tuple[int, ...], out_lengths: tuple[int, ...]
) -> Any:
    """``[N]``: each sequence's ``-log p(target | input)`` for ``x`` ``[T, N, C]``; an
    impossible alignment gives about ``-IMPOSSIBLE`` (the caller makes it ``inf``)."""
    ext, skip = _extended(b, targets, blank)
    alpha = _alphas(b, x, ext, skip, in_lengths)[-1]
    n = b.shape(ext)[0]
    dtype, device = b.dtype(x), b.device(x)
    lengths = np.asarray(out_lengths, np.int64)
    ends = np.stack([2 * lengths, np.maximum(2 * lengths - 1, 0)], 1)
    final = b.gather(alpha, b.from_data(ends, "int64", device), 1)
    single = (lengths == 0)[:, None] & np.array([False, True])  # (one end state: the blank)
    final = b.mask_where(
        final, b.from_data(single, "bool", device), b.full((n, 2), IMPOSSIBLE, dtype, device)
    )
    return b.neg(b.reshape(_logsumexp0(b, b.swap_dims(final, 0, 1)), (n,)))


def ctc_loss_backward(
    b,
    g: Any,
    x: Any,
    targets: Any,
    nll: Any,
    blank: int,
    in_lengths: tuple[int, ...],
    out_lengths: tuple[int, ...],
) -> Any:
    """The gradient in ``x`` of :func:`ctc_loss` for the incoming ``g`` ``[N]``: at each time
    step a sequence reads, ``-g`` times the share of its alignments that emit each class
    there (``exp(alpha + beta - emit + nll)`` summed over the states of that class). This is
    the exact gradient in the log-probabilities; torch's kernel adds ``exp(x) g``, which the
    ``log_softmax`` before it removes. Zero for an impossible alignment, as the composite's."""
    steps, n, classes = b.shape(x)
    ext, skip = _extended(b, targets, blank)
    width = b.shape(ext)[1]
    dtype, device = b.dtype(x), b.device(x)
    alphas = _alphas(b, x, ext, skip, in_lengths)
    impossible = b.full((n, 1), IMPOSSIBLE, dtype, device)
    never = b.full((n, width), IMPOSSIBLE, dtype, device)
    entered_by_skip = _shifted(b, skip, -2, b.full((n, 1), False, "bool", device))
    lengths = np.asarray(out_lengths, np.int64)
    states = np.arange(width)[None, :]
    final_states = (states == 2 * lengths[:, None]) | (states == 2 * lengths[:, None] - 1)
    final_states = b.from_data(final_states, "bool", device)
    last = np.asarray(in_lengths, np.int64) - 1
    possible = b.lower_elem(nll, -IMPOSSIBLE / 2)  # (about -IMPOSSIBLE: no alignment)
    possible = b.reshape(possible, (n, 1))
    grads = [None] * steps
    beta = never
    for t in range(steps - 1, -1, -1):
        emit = b.gather(_time_step(b, x, t), ext, 1)
        if t < steps - 1:
            candidates = [beta, _shifted(b, beta, -1, impossible)]
            if width > 2:
                two = _shifted(b, beta, -2, impossible)
                candidates.append(b.mask_where(two, b.logical_not(entered_by_skip), never))
            inner = b.reshape(_logsumexp0(b, _stack0(b, candidates)), (n, width))
            beta = b.add(inner, emit)
        # a sequence's last step starts its betas at the final states
        starts = b.from_data((last == t).reshape(-1, 1), "bool", device)
        beta = b.mask_where(beta, starts, b.mask_where(never, final_states, emit))
        share = b.add(b.add(alphas[t], b.reshape(nll, (n, 1))), b.sub(beta, emit))
        read = b.logical_and(possible, _running(b, in_lengths, t, device))
        share = b.exp(b.mask_where(never, read, share))
        per_class = b.scatter_add(b.zeros((n, classes), dtype, device), ext, share, 1)
        grads[t] = b.mul(b.neg(b.reshape(g, (n, 1))), per_class)
    return _stack0(b, grads)
