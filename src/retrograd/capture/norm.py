"""A layer norm's input gradient added to the residual stream's in the same pass: a rewrite of
a segment's calls before fusion.

In a pre-norm transformer block (``x = x + attn(ln_1(x))``) backward reaches the NumPy
backend as ``layer_norm_backward`` (the input's gradient ``dx``, the weight's and the
bias's) followed by ``add(residual, dx)``, the two paths' gradients of ``x`` summed. When
the ``add`` comes right after and nothing else reads ``dx``, the program runs them as one
:func:`layer_norm_backward_add` call: the compiled kernel writes ``residual + dx`` as it
computes ``dx`` (``backend/compiled_norm.py``), so ``dx`` is never stored nor read back (a
GPT's [2048, 128]: one array and two passes of it fewer). One compiled function computes
``dx`` for both, so the bits are the calls'; where the compiled kernel does not apply (other
dtypes, layouts), the two calls run as recorded.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ..backend.numpy_transformer import _compiled_layer_norm
from .fusion import _is_numpy_kernel
from .recording import slot_readers

__all__ = ["fuse_layer_norm_backward_add", "layer_norm_backward_add"]


def layer_norm_backward_add(
    backward: Any, add: Any, first: bool, grad: Any, x: Any, weight: Any, stats: Any, eps: Any,
    residual: Any,
) -> tuple:  # fmt: skip
    """``(add(residual, dx), dweight, dbias)`` (``add(dx, residual)`` unless ``first``), ``dx,
    dweight, dbias = backward(grad, x, weight, stats, eps)``; in one pass where the compiled
    layer norm applies, else the two calls."""
    if (
        isinstance(residual, np.ndarray)
        and isinstance(x, np.ndarray)
        and residual.shape == x.shape
        and residual.dtype == x.dtype
        and getattr(grad, "shape", None) == x.shape
        and _compiled_layer_norm(x, weight, grad, stats)
    ):
        from ..backend.compiled_norm import layer_norm_backward_rows

        width = x.shape[-1]
        rows = np.ascontiguousarray(x).reshape(-1, width)
        grads = np.ascontiguousarray(grad).reshape(-1, width)
        base = np.ascontiguousarray(residual).reshape(-1, width)
        means, rstds = np.ascontiguousarray(stats).reshape(2, -1)
        out = np.empty(x.shape, x.dtype)  # its own memory, as the add's result
        dweight, dbias = np.zeros(width), np.zeros(width)
        weight = np.ascontiguousarray(weight)
        flat = out.reshape(rows.shape)
        layer_norm_backward_rows(grads, rows, weight, means, rstds, base, flat, dweight, dbias)
        return out, dweight.astype(x.dtype), dbias.astype(x.dtype)
    dx, dweight, dbias = backward(grad, x, weight, stats, eps)
    return (add(residual, dx) if first else add(dx, residual)), dweight, dbias


def _array_meta(encoded: tuple, meta: list) -> tuple | None:
    if encoded[0] != "s":
        return None
    info = meta[encoded[1]]
    if info is None or info[0] is not np.ndarray:
        return None
    return tuple(info[1]), np.dtype(info[2])


def _fusable(backward: tuple, add: tuple, meta: list, later: set, readers: dict) -> int | None:
    """Which operand of ``add`` (0 or 1) is the residual stream's gradient when the two
    calls can run as one; else ``None``."""
    _, function, name, args, kwargs, outs = backward
    if (
        name != "layer_norm_backward"
        or kwargs
        or len(args) != 5
        or type(outs) is not tuple
        or len(outs) != 3
        or not _is_numpy_kernel(function, name)
    ):
        return None
    dx = outs[0]
    _, function, name, args, kwargs, out = add
    if (
        name != "add"
        or kwargs
        or len(args) != 2
        or type(out) is not int
        or not _is_numpy_kernel(function, name)
        or dx in later
        or readers.get(dx) != 1
        or ("s", dx) not in args
        or args[0] == args[1]
    ):
        return None
    residual = 1 if args[0] == ("s", dx) else 0
    ours, theirs, result = (
        _array_meta(("s", dx), meta),
        _array_meta(args[residual], meta),
        meta[out],
    )
    if ours is None or theirs is None or result is None or ours != theirs:
        return None
    if ours[1] not in (np.float32, np.float64) or tuple(result[1]) != ours[0]:
        return None
    return residual


def fuse_layer_norm_backward_add(calls: list[tuple], meta: list, later: set) -> list[tuple]:
    """``calls`` with each ``layer_norm_backward`` followed by the ``add`` of its input's
    gradient to another (read by nothing else) replaced by one
    :func:`layer_norm_backward_add` call. ``meta``: each slot's recorded type, shape and
    dtype; ``later``: the slots read after these calls."""
    readers = slot_readers(calls)
    out: list[tuple] = []
    position = 0
    while position < len(calls):
        call = calls[position]
        following = calls[position + 1] if position + 1 < len(calls) else None
        residual = None
        if following is not None:
            residual = _fusable(call, following, meta, later, readers)
        if residual is None:
            out.append(call)
            position += 1
            continue
        function = partial(layer_norm_backward_add, call[1], following[1], residual == 0)
        args = [*call[3], following[3][residual]]
        outs = (following[5], *call[5][1:])
        out.append(("call", function, "layer_norm_backward_add", args, {}, outs))
        position += 2
    return out
