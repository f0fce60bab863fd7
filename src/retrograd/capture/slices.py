"""A gradient assembled from slices, in one pass: a rewrite of a segment's calls before fusion.

The backward of a split (``q, k, v = qkv.split(n_embd, 2)`` in a transformer's attention)
reaches the NumPy backend as one ``slice_backward`` (an array of zeros of the whole shape, one
part written into it) and one ``slice_accumulate`` per other part (each added into its slice
of those zeros, in place). When consecutive calls do that, the parts tile the whole array
(each element in exactly one part) and nothing else reads the partial results, the program
runs them as one :func:`slice_gather`: each part written once into an uninitialized array
instead of zeroing it, writing one part, then reading and writing the other parts' slices
again (0.20 against 0.10 ms for a GPT's [16, 128, 384] at n_embd 128). The bits are the
calls': the first part copied, the others added to ``0.0`` as the accumulations added them
to the zeros (a ``-0.0`` becomes ``+0.0``, as it did).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .fusion import _is_numpy_kernel
from .recording import slot_readers

__all__ = ["MAX_GATHER_ELEMENTS", "gather_slices", "slice_gather"]

#: Whole arrays of at most this many elements are checked for the tiling at capture (a count
#: per element); larger ones keep their calls.
MAX_GATHER_ELEMENTS = 1 << 26


def slice_gather(shape: tuple, slices: tuple, first: np.ndarray, *rest: np.ndarray) -> Any:
    """``slice_backward(first, shape, slices[0])`` followed by ``slice_accumulate`` of each of
    ``rest`` at ``slices[1:]``, for parts that tile ``shape``: one write per element."""
    out = np.empty(shape, first.dtype)
    out[slices[0]] = first
    zero = first.dtype.type(0)
    for where, part in zip(slices[1:], rest):
        np.add(part, zero, out=out[where])
    return out


def _array_meta(encoded: tuple, meta: list) -> tuple | None:
    """``(shape, dtype)`` of a slot holding an array, else ``None``."""
    if encoded[0] != "s":
        return None
    info = meta[encoded[1]]
    if info is None or info[0] is not np.ndarray:
        return None
    return tuple(info[1]), np.dtype(info[2])


def _tiles(shape: tuple, slices: list, parts: list[tuple]) -> bool:
    """Whether the parts (their shapes) fill ``slices`` of ``shape`` exactly, and the slices
    cover every element once."""
    size = int(np.prod(shape))
    if size == 0 or size > MAX_GATHER_ELEMENTS:
        return False
    count = np.zeros(shape, np.uint8)
    try:
        for where, part in zip(slices, parts):
            view = count[where]
            if view.shape != part or view.base is not count:  # a part's shape, in a view
                return False
            view += 1
    except (IndexError, TypeError, ValueError):
        return False
    return bool((count == 1).all())


def _chain(calls: list[tuple], start: int, meta: list, later: set, readers: dict) -> int:
    """How many calls from ``start`` form a gather (0 if none)."""
    _, function, name, args, kwargs, out = calls[start]
    if (
        name != "slice_backward"
        or kwargs
        or type(out) is not int
        or len(args) != 3
        or not _is_numpy_kernel(function, name)
        or args[1][0] != "c"
        or args[2][0] != "c"
    ):
        return 0
    first = _array_meta(args[0], meta)
    if first is None or first[1].kind != "f" or not isinstance(args[1][1], tuple):
        return 0
    shape, dtype = tuple(args[1][1]), first[1]
    slices, parts = [args[2][1]], [first[0]]
    previous, end = out, start + 1
    while end < len(calls):
        _, function, name, args, kwargs, out = calls[end]
        if (
            name != "slice_accumulate"
            or kwargs
            or type(out) is not int
            or len(args) != 3
            or not _is_numpy_kernel(function, name)
            or args[0] != ("s", previous)
            or readers.get(previous) != 1
            or previous in later
            or args[2][0] != "c"
        ):
            break
        part = _array_meta(args[1], meta)
        if part is None or part[1] != dtype:
            break
        slices.append(args[2][1])
        parts.append(part[0])
        previous, end = out, end + 1
    length = end - start
    if length < 2 or not _tiles(shape, slices, parts):
        return 0
    return length


def gather_slices(calls: list[tuple], meta: list, later: set) -> list[tuple]:
    """``calls`` with each run of ``slice_backward`` and ``slice_accumulate`` calls that
    assembles a whole array from its parts replaced by one :func:`slice_gather` call.
    ``meta``: each slot's recorded type, shape and dtype; ``later``: the slots read after
    these calls."""
    readers = slot_readers(calls)
    out: list[tuple] = []
    position = 0
    while position < len(calls):
        length = _chain(calls, position, meta, later, readers)
        if not length:
            out.append(calls[position])
            position += 1
            continue
        run = calls[position : position + length]
        shape, slices = run[0][3][1][1], tuple(call[3][2][1] for call in run)
        parts = [run[0][3][0], *(call[3][1] for call in run[1:])]
        args = [("c", shape), ("c", slices), *parts]
        out.append(("call", slice_gather, "slice_gather", args, {}, run[-1][5]))
        position += length
    return out
