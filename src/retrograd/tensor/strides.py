"""Strides as torch would have them, in elements: row-major ones, torch's contiguity test, and
the strides of an elementwise op's output, which follow its operands' layout (torch's
``TensorIterator``: ``x.t().exp()`` has ``x.t()``'s strides, not row-major ones). Values here
are always computed row-major; the strides are modelled only to answer ``stride()``,
``is_contiguous()`` and whether ``view`` can be a view, as torch would (:mod:`.views`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..backend.sizes import ITEMSIZE
from .links import base_of

__all__ = [
    "contiguous_strides",
    "copy_order",
    "elementwise_strides",
    "is_contiguous",
    "non_overlapping",
    "non_overlapping_and_dense",
    "storage_offset_of",
    "strides_of",
    "view_strides",
]


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _iteration_order(shape: tuple[int, ...], operands: Any) -> list[int]:
    """TensorIterator's order of the dimensions of ``shape`` (``reorder_dimensions``), the
    fastest-moving first, by the operands' strides (each a sequence as long as ``shape``),
    the first operand's first: the smaller stride innermost; between equal strides of an
    operand the smaller size innermost; where every operand ties (or has a 0 stride) the
    order stays, as torch's insertion sort leaves it."""

    def should_swap(d0: int, d1: int) -> int:
        for strides in operands:
            s0, s1 = strides[d0], strides[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(len(shape) - 1, -1, -1))
    for i in range(1, len(shape)):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            comparison = should_swap(perm[d0], perm[d1])
            if comparison > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif comparison < 0:
                break
    return perm


def copy_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """For each element of a tensor of ``shape`` and ``strides``, when torch's CPU copy of a
    contiguous tensor into it (``t.copy_(src)``) writes it: an int64 array of ``shape``, 0 for
    the first written. TensorIterator orders the dimensions by the operands' strides, the
    destination's first, the smaller stride innermost; between equal strides of an operand
    the smaller size goes innermost, and where every operand ties the order stays. Where the
    positions overlap (unfold windows, ``as_strided``) the last one written is the value the
    memory keeps: torch's in-place backward (``CopySlices``) copies a view's gradient back
    that way."""
    perm = _iteration_order(shape, (tuple(strides), contiguous_strides(shape)))
    outer_first = perm[::-1]
    steps = np.arange(math.prod(shape), dtype=np.int64).reshape([shape[d] for d in outer_first])
    return steps.transpose(np.argsort(outer_first)) if shape else steps


def is_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """torch's ``is_contiguous``: size-1 dimensions do not count; empty tensors are."""
    if math.prod(shape) == 0:
        return True
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


def non_overlapping_and_dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """torch's ``isnon_overlapping_and_dense``: some permutation of the dimensions is
    contiguous (dimensions of size 0 or 1 do not count); a contiguous tensor (an empty one,
    or one whose size-1 dimensions have any strides) is, as torch's flag says."""
    if is_contiguous(shape, strides):
        return True
    order = sorted((d for d in range(len(shape)) if shape[d] >= 2), key=lambda d: strides[d])
    expected = 1
    for d in order:
        if strides[d] != expected:
            return False
        expected *= shape[d]
    return True


def non_overlapping(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether no two elements of a view of ``shape`` and ``strides`` share a location, by
    the sufficient test: taken by increasing stride, each dimension's stride passes the
    farthest offset the dimensions before it reach (dense or not: ``(3, 2)`` strides
    ``(4, 1)`` is; unfold's overlapping windows, ``(5, 2)`` strides ``(1, 1)``, are not).

    >>> non_overlapping((3, 2), (2, 1)), non_overlapping((5, 2), (1, 1))
    (True, False)
    """
    reach = 0
    for d in sorted((d for d in range(len(shape)) if shape[d] >= 2), key=lambda d: strides[d]):
        if strides[d] <= reach:
            return False
        reach += strides[d] * (shape[d] - 1)
    return True


def elementwise_strides(
    shape: tuple[int, ...], operands: list[tuple[tuple[int, ...], tuple[int, ...]]]
) -> tuple[int, ...] | None:
    """The strides torch's ``TensorIterator`` gives the output of ``shape`` of an elementwise
    op on ``operands`` (each ``(shape, strides)``): the operands' own strides when all have
    the output's shape and one non-overlapping, dense layout (its fast setup); otherwise the
    dimensions ordered by the operands' strides (``reorder_dimensions``: the first operand
    whose strides tell two dimensions apart orders them, a broadcast dimension telling
    nothing) and laid out densely in that order. ``None`` for a 0-d output."""
    ndim = len(shape)
    if ndim == 0 or not operands:
        return None
    first = operands[0][1]
    same_shape = all(s == shape for s, _ in operands)
    if same_shape and all(is_contiguous(s, st) for s, st in operands):
        # torch's contiguous fast setup: row-major, whatever strides the operands' size-1 or
        # empty dimensions have
        return contiguous_strides(shape)
    if (
        same_shape
        and all(st == first for _, st in operands)
        and non_overlapping_and_dense(shape, first)
    ):
        return tuple(first)
    broadcast = []
    for s, st in operands:
        lead = ndim - len(s)
        own = [0 if n == 1 and m != 1 else x for n, m, x in zip(s, shape[lead:], st)]
        broadcast.append([0] * lead + own)

    perm = _iteration_order(shape, broadcast)  # perm[0] is the fastest-moving dimension
    strides = [0] * ndim
    step = 1
    for d in perm:
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def overlapping_view_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], kind: str, params: tuple
) -> tuple[int, ...]:
    """The strides torch gives the view ``kind`` with ``params`` of a tensor of ``shape`` and
    ``strides``, for the views whose positions can share memory: ``expand`` (0 where a
    dimension of one is expanded, or a leading one is added), ``unfold`` (the window's
    dimension last) and ``as_strided`` (its own)."""
    if kind == "as_strided":
        return tuple(params[1])
    if kind == "expand":
        target = params[0]
        lead = len(target) - len(shape)
        own = [0] * lead + [
            0 if n == 1 and m != 1 else s for n, m, s in zip(shape, target[lead:], strides)
        ]
        return tuple(own)
    d, _, step = params  # unfold
    return (*strides[:d], strides[d] * step, *strides[d + 1 :], strides[d])


def strides_of(t: Any) -> tuple[int, ...]:
    """``t``'s strides as torch would have them (a root tensor is contiguous)."""
    view = getattr(t, "_view", None)
    if view is None:
        layout = getattr(t, "_layout", None)  # an elementwise op's (shape, strides)
        if layout is not None and layout[0] == t.shape:
            return layout[1]
        return contiguous_strides(t.shape)
    base = base_of(view)  # a views.Link: (base, kind, params)
    if base is None:  # a detached tensor whose base is gone: its own root
        return contiguous_strides(t.shape)
    strides = strides_of(base)
    shape = base.shape
    kind, params = view[1], view[2]
    if kind == "reshape" and len(params) > 1:  # squeeze and unsqueeze: torch's own formulas
        return _squeezed_strides(shape, strides, *params[1])
    if kind == "reshape":
        new = view_strides(shape, strides, params[0])
        return new if new is not None else contiguous_strides(params[0])
    if kind == "permute":
        return tuple(strides[d] for d in params[0])
    if kind == "index":
        return _index_strides(shape, strides, params[3] if len(params) > 3 else None, t.shape)
    if kind in ("expand", "unfold"):
        return overlapping_view_strides(shape, strides, kind, params)
    if kind == "diagonal":
        a, b, _ = params
        rest = tuple(s for i, s in enumerate(strides) if i not in (a, b))
        return (*rest, strides[a] + strides[b])
    if kind == "as_strided":
        return params[1]
    if kind == "bitcast":  # (in the view's elements: the last dim's stride is 1 if sizes differ)
        source, target = ITEMSIZE[base.dtype], ITEMSIZE[params[0]]
        if source == target:
            return strides
        rest = tuple(s * source // target for s in strides[:-1])
        return (*rest, 1)
    # complex parts: counted in real numbers, two to a complex element
    if kind in ("real", "imag"):
        return tuple(2 * s for s in strides)
    if kind == "view_as_real":
        return (*(2 * s for s in strides), 1)
    if kind == "view_as_complex":
        return tuple(s // 2 for s in strides[:-1])
    return strides  # data, detach


def _squeezed_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], how: str, dims: tuple[int, ...]
) -> tuple[int, ...]:
    """The strides of torch's ``squeeze`` (``dims`` dropped, the others kept) and
    ``unsqueeze`` (a size-1 dimension inserted at each of ``dims``, ascending, with stride
    ``size * stride`` of the dimension it lands before, 1 at the end: its
    ``inferUnsqueezeGeometry``), which differ from a ``view``'s for size-1 dimensions and
    empty tensors."""
    if how == "squeeze":
        return tuple(s for d, s in enumerate(strides) if d not in dims)
    sizes, out = list(shape), list(strides)
    for d in dims:
        out.insert(d, 1 if d >= len(sizes) else sizes[d] * out[d])
        sizes.insert(d, 1)
    return tuple(out)


def storage_offset_of(t: Any) -> int:
    """``t``'s storage offset as torch would have it, in elements of its root's storage (a
    root is laid out densely from 0 by :func:`strides_of`): a slice moves it by its starts,
    a diagonal by its offset, ``as_strided`` sets it; other views keep their base's."""
    view = getattr(t, "_view", None)
    if view is None:
        return 0
    base, kind, params = base_of(view), view[1], view[2]
    if base is None:  # a detached tensor whose base is gone: its own root
        return 0
    offset = storage_offset_of(base)
    if kind == "index" and params[0] is not None:
        strides = strides_of(base)
        for d, piece in enumerate(params[0]):
            offset += piece.indices(base.shape[d])[0] * strides[d]
    elif kind == "diagonal":
        a, b, shift = params
        strides = strides_of(base)
        offset += shift * strides[b] if shift >= 0 else -shift * strides[a]
    elif kind == "as_strided":
        offset = params[2]
    elif kind == "bitcast":  # (counted in the view's elements)
        offset = offset * ITEMSIZE[base.dtype] // ITEMSIZE[params[0]]
    elif kind in ("real", "view_as_real"):
        offset *= 2
    elif kind == "imag":
        offset = 2 * offset + 1
    elif kind == "view_as_complex":
        offset //= 2
    return offset


def _index_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], items: Any, out_shape: tuple[int, ...]
) -> tuple[int, ...]:
    """Strides after basic indexing; ``items`` says per index item ``("int",)``,
    ``("slice", step)`` or ``("new",)``."""
    if items is None:
        return contiguous_strides(out_shape)
    out, dim = [], 0
    for item in items:
        if item[0] == "new":
            out.append(strides[dim] * shape[dim] if dim < len(shape) else 1)
            continue
        if item[0] == "slice":
            out.append(strides[dim] * item[1])
        dim += 1
    return tuple(out)


def view_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], target: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The strides of ``target`` as a view of a tensor with ``shape`` and ``strides``, or
    ``None`` where no view exists (torch's ``computeStride``: then ``view`` fails and
    ``reshape`` copies)."""
    if math.prod(shape) == 0:
        return tuple(strides) if tuple(shape) == tuple(target) else contiguous_strides(target)
    if not shape:
        return contiguous_strides(target)
    new = [0] * len(target)
    view_d = len(target) - 1
    chunk_base_stride = strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        if tensor_d == 0 or (
            shape[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk_base_stride
        ):
            while view_d >= 0 and (view_numel < tensor_numel or target[view_d] == 1):
                new[view_d] = view_numel * chunk_base_stride
                view_numel *= target[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(new)
