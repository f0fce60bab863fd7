"""A global gradient norm's sum of squares in one call: a rewrite of a segment's calls before
fusion.

A global norm written out (``clip_grad_norm_``'s before its norm became one
``Backend.global_norm`` call, as it still is with ``create_graph`` gradients, or a step's own)
reaches the NumPy backend as, per gradient,
``square``, ``sum`` and a ``cast`` of that sum to float64, the casts summed by ``add`` one
after another: four calls per parameter (208 for nanoGPT's 52), the last two on 0-d arrays,
where NumPy's per-call cost is the whole cost. When such calls come one after another and
nothing else reads their values, the program runs them as one :func:`squares_total` call: the
same ``square`` and ``sum`` per gradient, the cast and the sums as Python floats (IEEE
doubles: a float32 widened exactly, each addition NumPy's float64 ``add``, in the same order),
so the bits are the calls'.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from .fusion import _is_numpy_kernel
from .recording import slot_readers

__all__ = ["fuse_squares_total", "squares_total"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def squares_total(square: Any, total: Any, *grads: Any) -> np.float64:
    """``sum_i float64(total(square(grads[i])))``, summed left to right in float64 (what
    ``add(add(cast(s_0), cast(s_1)), ...)`` gives, as a NumPy float64 scalar)."""
    acc = float(total(square(grads[0])))
    for grad in grads[1:]:
        acc += float(total(square(grad)))
    return np.float64(acc)


def _own(call: tuple, name: str, arity: int) -> bool:
    _, function, called, args, kwargs, out = call
    return (
        called == name
        and not kwargs
        and len(args) == arity
        and type(out) is int
        and _is_numpy_kernel(function, name)
    )


def _unit(calls: list, at: int, meta: list, later: set, readers: dict) -> int | None:
    """The slot of ``cast(sum(square(g)), float64)`` made by the three calls from ``at`` (a
    float gradient ``g``; the intermediates read by nothing else), else ``None``."""
    if at + 3 > len(calls):
        return None
    square, total, cast = calls[at : at + 3]
    if not (_own(square, "square", 1) and _own(total, "sum", 1) and _own(cast, "cast", 2)):
        return None
    grad = square[3][0]
    if grad[0] != "s" or meta[grad[1]] is None or meta[grad[1]][0] is not np.ndarray:
        return None
    if np.dtype(meta[grad[1]][2]) not in _FLOATS:
        return None
    for call, value in ((total, square[5]), (cast, total[5])):
        if call[3][0] != ("s", value) or readers.get(value) != 1 or value in later:
            return None
    if cast[3][1][0] != "c" or meta[cast[5]] is None:
        return None
    if np.dtype(meta[cast[5]][2]) != np.float64 or tuple(meta[cast[5]][1]) != ():
        return None
    return cast[5]


def _chain(calls: list, start: int, meta: list, later: set, readers: dict) -> tuple:
    """``(number of calls, gradients)`` of a sum of squares from ``start`` (``(0, [])``)."""
    first = _unit(calls, start, meta, later, readers)
    if first is None:
        return 0, []
    grads, total, end = [calls[start][3][0]], first, start + 3
    while True:
        value = _unit(calls, end, meta, later, readers)
        if value is None or end + 3 >= len(calls):
            break
        add = calls[end + 3]
        if (
            not _own(add, "add", 2)
            or add[3] != [("s", total), ("s", value)]
            or readers.get(total) != 1
            or total in later
            or readers.get(value) != 1
            or value in later
            or meta[add[5]] is None
            or meta[add[5]][0] is not np.float64
        ):
            break
        grads.append(calls[end][3][0])
        total, end = add[5], end + 4
    if len(grads) < 2:
        return 0, []
    return end - start, grads


def fuse_squares_total(calls: list[tuple], meta: list, later: set) -> list[tuple]:
    """``calls`` with each run of per-gradient ``square``, ``sum``, float64 ``cast`` and the
    ``add`` of the casts replaced by one :func:`squares_total` call. ``meta``: each slot's
    recorded type, shape and dtype; ``later``: the slots read after these calls."""
    readers = slot_readers(calls)
    out: list[tuple] = []
    position = 0
    while position < len(calls):
        length, grads = _chain(calls, position, meta, later, readers)
        if not length:
            out.append(calls[position])
            position += 1
            continue
        first = calls[position]
        function = partial(squares_total, first[1], calls[position + 1][1])
        result = calls[position + length - 1][5]
        out.append(("call", function, "squares_total", grads, {}, result))
        position += length
    return out
