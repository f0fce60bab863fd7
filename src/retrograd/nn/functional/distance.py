"""Distances and the losses built on them, as torch's: ``cosine_similarity``,
``pairwise_distance``, ``pdist``, ``triplet_margin_loss``, ``triplet_margin_with_distance_loss``,
``cosine_embedding_loss``.

All are compositions of differentiable tensor ops, with torch's edge handling: where torch
clamps a norm without recording the clamp (``cosine_similarity``'s ``eps``), the clamp is added
here as a constant offset, so the value is clamped and the gradient flows as torch's does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import InvalidArgumentError, InvalidValueError, ShapeError, SizeMismatchError
from ...tensor import Tensor
from ...tensor.autocasting import autocast_op
from ...tensor.functions import once_differentiable_inputs, row_distance
from ...tensor.internal import normalize_dim, shape_text
from ._common import _clamped_min, _float_input, _float_pair, _real
from .loss import _reduce, _reduction

__all__ = [
    "cosine_embedding_loss",
    "cosine_similarity",
    "pairwise_distance",
    "pdist",
    "triplet_margin_loss",
    "triplet_margin_with_distance_loss",
]


def _broadcast(fn: str, x1: Tensor, x2: Tensor) -> tuple[Tensor, Tensor]:
    try:
        shape = np.broadcast_shapes(x1.shape, x2.shape)
    except ValueError:
        raise ShapeError(
            f"{fn}: the shapes do not broadcast; x1 {shape_text(x1.shape)}, x2 "
            f"{shape_text(x2.shape)}"
        ) from None
    return x1.expand(shape), x2.expand(shape)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps))`` along ``dim`` (the inputs
    broadcast first), torch's formula: each input is divided by its own clamped norm.

    >>> import retrograd as rg
    >>> cosine_similarity(rg.tensor([[3.0, 4.0]]), rg.tensor([[4.0, 3.0]])).tolist()
    [0.9600000381469727]
    """
    fn = "cosine_similarity"
    if not eps >= 0:  # (a NaN too, as torch's check)
        raise InvalidArgumentError(f"{fn}: eps must be non-negative, got {eps}")
    x1, x2 = _broadcast(fn, *_float_pair(fn, x1, x2, "x2"))
    dim = normalize_dim(fn, dim, x1.ndim)
    n1 = _clamped_min(x1.norm(2, dim, keepdim=True), eps)
    n2 = _clamped_min(x2.norm(2, dim, keepdim=True), eps)
    return ((x1 / n1) * (x2 / n2)).sum_dim(dim).squeeze_dim(dim)


def pairwise_distance(
    x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    """``||x1 - x2 + eps||_p`` along the last dimension (torch adds ``eps`` to the
    difference, not to the norm).

    >>> import retrograd as rg
    >>> pairwise_distance(rg.tensor([[3.0, 0.0]]), rg.tensor([[0.0, 4.0]]), eps=0.0).tolist()
    [5.0]
    """
    fn = "pairwise_distance"
    p = float(_real(fn, "p", p))  # (a bool is the number it is, as torch's parser reads it)
    x1, x2 = _float_pair(fn, x1, x2, "x2")
    _broadcast(fn, x1, x2)
    # (two 0-d inputs: |x1 - x2 + eps|, 0-d, as torch 2.13 gives it)
    return (x1 - x2 + eps).norm(p, -1, keepdim=keepdim)


def pdist(input: Tensor, p: float = 2.0) -> Tensor:  # noqa: A002 (torch's name)
    """The ``p``-norm distances between the rows of ``input`` ``[N, M]``, pairs ``i < j`` in
    row-major order (``N (N - 1) / 2`` values), as torch's; the gradient at a zero distance is
    zero.

    >>> import retrograd as rg
    >>> pdist(rg.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]], dtype="float64")).tolist()
    [5.0, 1.0, 4.242640687119285]
    """
    fn = "pdist"
    x = _float_input(fn, input)
    if x.ndim != 2:
        raise SizeMismatchError(
            f"{fn}: input must be a 2-d tensor [N, M], got {shape_text(x.shape)}"
        )
    if not p >= 0:  # NaN too
        raise InvalidValueError(f"{fn}: p must be non-negative, got {p}")
    if x.shape[0] < 2:  # no pairs: an empty result, connected to the graph
        return x.sum_dim(1).reshape((-1,)).narrow(0, 0, 0)
    (x,) = once_differentiable_inputs(fn, x)  # (torch's _pdist_backward has no derivative)
    # (untracked too, on an autodiff backend: one kernel, so tracked and untracked values agree)
    if p > 0 and x.dtype in ("float32", "float64") and (x.requires_grad or x._backend.is_autodiff):
        # one op of the op table (autodiff/ops.py) whose rule reads x and the distances, as
        # torch's _pdist_backward: the composite below held the [pairs, M] differences (23x
        # torch's bytes for 64 rows; 7 December)
        return x._apply("pdist", (x,), (float(p),))
    rows, cols = np.triu_indices(x.shape[0], 1)
    left = x.index_select(0, x.new_tensor(rows, dtype="int64"))
    right = x.index_select(0, x.new_tensor(cols, dtype="int64"))
    return row_distance(left - right, p)


def _same_ndim(fn: str, **tensors: Tensor) -> None:
    if len({t.ndim for t in tensors.values()}) > 1:
        shapes = ", ".join(f"{name} {shape_text(t.shape)}" for name, t in tensors.items())
        raise ShapeError(f"{fn}: the inputs must have the same number of dimensions; {shapes}")


def _triplet(
    fn: str,
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    distance: Callable[[Tensor, Tensor], Tensor],
    margin: float,
    swap: bool,
    reduction: str,
) -> Tensor:
    """``max(margin + d(a, p) - d(a, n), 0)``; with ``swap``, ``d(a, n)`` is replaced by
    ``min(d(a, n), d(p, n))`` (the distance swap of Balntas et al.)."""
    if margin <= 0:
        raise InvalidArgumentError(f"{fn}: expected margin to be greater than 0, got {margin}")
    _same_ndim(fn, anchor=anchor, positive=positive, negative=negative)
    positive_distance = distance(anchor, positive)
    negative_distance = distance(anchor, negative)
    if swap:
        negative_distance = negative_distance.minimum(distance(positive, negative))
    losses = (positive_distance - negative_distance + margin).clamp_min(0.0)
    return _reduce(losses, reduction)


@autocast_op("triplet_margin_loss")
def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2,
    eps: float = 1e-6,
    swap: bool = False,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch's triplet loss with :func:`pairwise_distance` (``p``, ``eps``) as the distance.

    >>> import retrograd as rg
    >>> a, b = rg.tensor([[0.0, 0.0]]), rg.tensor([[3.0, 4.0]])
    >>> round(triplet_margin_loss(a, a, b, margin=6.0, eps=0.0).item(), 12)
    1.0
    """
    fn = "triplet_margin_loss"
    reduction = _reduction(fn, reduction, size_average, reduce)
    anchor = _float_input(fn, anchor)
    # (any rank, as torch's: the distance runs along the last dim, batched over the rest)
    _same_ndim(fn, anchor=anchor, positive=positive, negative=negative)

    def distance(a: Tensor, b: Tensor) -> Tensor:
        return pairwise_distance(a, b, p, eps)

    return _triplet(fn, anchor, positive, negative, distance, margin, swap, reduction)


def triplet_margin_with_distance_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    *,
    distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
    margin: float = 1.0,
    swap: bool = False,
    reduction: str = "mean",
) -> Tensor:
    """The triplet loss with any ``distance_function`` (default :func:`pairwise_distance`)."""
    fn = "triplet_margin_with_distance_loss"
    reduction = _reduction(fn, reduction, None, None)
    distance = pairwise_distance if distance_function is None else distance_function
    return _triplet(fn, anchor, positive, negative, distance, margin, swap, reduction)


# torch's EPSILON, added to each squared magnitude: a C++ float, so 1e-12 rounded to float32
# (in float64 the two differ in the tenth digit, and near a zero vector in the loss too)
_COSINE_EMBEDDING_EPS = 9.999999960041972e-13


@autocast_op("cosine_embedding_loss")
def cosine_embedding_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``1 - cos(x1, x2)`` where ``target`` is 1, ``max(0, cos(x1, x2) - margin)`` where it
    is -1 (0 elsewhere), ``cos`` along the last dimension of ``[N, D]`` inputs with a ``[N]``
    target (or ``[D]`` with a 0-d target); torch adds ``1e-12`` (as a float32) to each squared
    magnitude."""
    fn = "cosine_embedding_loss"
    reduction = _reduction(fn, reduction, size_average, reduce)
    x1, x2 = _float_pair(fn, input1, input2, "input2")
    y = _float_pair(fn, x1, target, "target")[1]
    shapes = (
        f"input1 {shape_text(x1.shape)}, input2 {shape_text(x2.shape)}, target "
        f"{shape_text(y.shape)}"
    )
    # (torch's RuntimeErrors, each)
    if y.ndim not in (0, 1):
        raise SizeMismatchError(
            f"{fn}: 0-d or 1-d target expected, multi-target not supported; {shapes}"
        )
    if x1.ndim != y.ndim + 1 or x2.ndim != y.ndim + 1:
        raise SizeMismatchError(
            f"{fn}: a {y.ndim}-d target expects {y.ndim + 1}-d inputs; {shapes}"
        )
    if len({n for n in (x1.shape[:1] + x2.shape[:1] + y.shape) if n != 1}) > 1:
        raise SizeMismatchError(f"{fn}: the batch sizes do not broadcast; {shapes}")
    dim = y.ndim
    dot = (x1 * x2).sum_dim(dim).squeeze_dim(dim)
    square1 = x1.square().sum_dim(dim).squeeze_dim(dim) + _COSINE_EMBEDDING_EPS
    square2 = x2.square().sum_dim(dim).squeeze_dim(dim) + _COSINE_EMBEDDING_EPS
    cos = dot / (square1 * square2).sqrt()
    zeros = cos.new_zeros(cos.shape)
    losses = zeros.mask_where(y.equal_elem(1.0), 1.0 - cos)
    losses = losses + zeros.mask_where(y.equal_elem(-1.0), (cos - margin).clamp_min(0.0))
    return _reduce(losses, reduction)
