"""Margin and ranking losses, as torch's: ``margin_ranking_loss``, ``hinge_embedding_loss``,
``soft_margin_loss``, ``multilabel_soft_margin_loss``, ``multilabel_margin_loss``,
``multi_margin_loss``.

Compositions of differentiable tensor ops; the class-index targets are read on the backend's
device (masks and gathers), never on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import DTypeError, InvalidArgumentError, ShapeError
from ...tensor import Tensor
from ...tensor.internal import check_indices, shape_text
from ._common import _as_tensor, _float_input, _float_pair
from .loss import _reduce, _reduction, _same_shape

__all__ = [
    "hinge_embedding_loss",
    "margin_ranking_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "multilabel_soft_margin_loss",
    "soft_margin_loss",
]


def margin_ranking_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``max(0, -y (x1 - x2) + margin)`` (the three inputs broadcast; torch requires them to
    have the same number of dimensions).

    >>> import retrograd as rg
    >>> x1, x2, y = rg.tensor([1.0, 2.0]), rg.tensor([2.0, 0.0]), rg.tensor([1.0, 1.0])
    >>> margin_ranking_loss(x1, x2, y).item()
    0.5
    """
    fn = "margin_ranking_loss"
    reduction = _reduction(fn, reduction, size_average, reduce)
    x1, x2 = _float_pair(fn, input1, input2, "input2")
    y = _float_pair(fn, x1, target, "target")[1]
    if not x1.ndim == x2.ndim == y.ndim:
        raise ShapeError(
            f"{fn}: all input tensors should have the same number of dimensions; input1 "
            f"{shape_text(x1.shape)}, input2 {shape_text(x2.shape)}, target {shape_text(y.shape)}"
        )
    return _reduce((-y * (x1 - x2) + margin).clamp_min(0.0), reduction)


def hinge_embedding_loss(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    margin: float = 1.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``x`` where ``y`` is not -1, plus ``max(0, margin - x)`` where ``y`` is not 1 (torch's
    two terms: a target of 1 or -1 picks one of them)."""
    fn = "hinge_embedding_loss"
    reduction = _reduction(fn, reduction, size_average, reduce)
    x, y = _float_pair(fn, input, target, "target")
    zeros = x.new_zeros(x.shape)
    margin_term = zeros.mask_where(y.not_equal_elem(1.0), (margin - x).clamp_min(0.0))
    return _reduce(margin_term + zeros.mask_where(y.not_equal_elem(-1.0), x), reduction)


def soft_margin_loss(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``log(1 + exp(-y x))``, the two-class logistic loss of targets 1 and -1."""
    fn = "soft_margin_loss"
    reduction = _reduction(fn, reduction, size_average, reduce)
    x, y = _float_pair(fn, input, target, "target")
    _same_shape(fn, x, y)
    return _reduce((-y * x).exp().log1p(), reduction)


def multilabel_soft_margin_loss(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``-(y log sigmoid(x) + (1 - y) log sigmoid(-x))`` (times ``weight``), averaged over
    the classes (the last dimension), then reduced over the samples."""
    fn = "multilabel_soft_margin_loss"
    reduction = _reduction(fn, reduction, size_average, reduce)
    x, y = _float_pair(fn, input, target, "target")
    _same_shape(fn, x, y)
    if x.ndim == 0:
        raise ShapeError(f"{fn}: input needs a class dimension, got a 0-d input")
    losses = -(y * x.log_sigmoid() + (1.0 - y) * (-x).log_sigmoid())
    if weight is not None:
        losses = losses * _as_tensor(fn, x, weight, "weight").cast(x.dtype)
    per_sample = losses.sum_dim(-1).squeeze_dim(-1) / x.shape[-1]
    return _reduce(per_sample, reduction)


def _class_targets(fn: str, x: Tensor, target: Any, expected: tuple[int, ...]) -> Tensor:
    """``target`` as int64 class indices of shape ``expected``."""
    target = _as_tensor(fn, x, target, "target")
    if target.dtype != "int64":
        raise DTypeError(f"{fn}: target must hold int64 class indices, got {target.dtype}")
    if target.shape != expected:
        raise ShapeError(
            f"{fn}: target must have shape {shape_text(expected)}; input {shape_text(x.shape)}, "
            f"target {shape_text(target.shape)}"
        )
    return target


def _classes_input(fn: str, input: Any) -> Tensor:  # noqa: A002
    x = _float_input(fn, input)
    if x.ndim not in (1, 2) or x.shape[-1] == 0:
        raise ShapeError(
            f"{fn}: expected a non-empty [C] or [N, C] input, got {shape_text(x.shape)}"
        )
    return x


def multilabel_margin_loss(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``sum_j sum_i max(0, 1 - (x[y_j] - x[i])) / C`` over the target classes ``y_j`` (the
    entries of ``target`` before its first -1) and the classes ``i`` that are not targets, for
    ``[C]`` or ``[N, C]`` inputs and int64 targets of the same shape."""
    fn = "multilabel_margin_loss"
    reduction = _reduction(fn, reduction, size_average, reduce)
    x = _classes_input(fn, input)
    target = _class_targets(fn, x, target, x.shape)
    classes = x.shape[-1]

    def out_of_range(bad: int | None) -> str:
        value = "a target" if bad is None else f"target {bad}"
        return f"{fn}: {value} is out of range for {classes} classes (-1 ends the targets)"

    check_indices(target, classes, out_of_range, -1)
    # the targets that count: those before the first -1
    counted = target.not_equal_elem(-1).cast("int64").cumprod(-1).equal_elem(1)
    index = target.mask_fill(~counted, 0)
    arange = x.new_tensor(np.arange(classes), dtype="int64")
    # is_target[..., i]: class i is one of the counted targets
    hits = index.unsqueeze_dim(-1).equal(arange).logical_and(counted.unsqueeze_dim(-1))
    is_target = hits.any(-2)
    picked = x.gather(-1, index)  # x[y_j], [..., K]
    hinge = (x.unsqueeze_dim(-2) - picked.unsqueeze_dim(-1) + 1.0).clamp_min(0.0)  # [..., K, C]
    keep = counted.unsqueeze_dim(-1).logical_and((~is_target).unsqueeze_dim(-2))
    hinge = hinge.mask_fill(~keep, 0.0)
    per_sample = hinge.sum_dim(-1).squeeze_dim(-1).sum_dim(-1).squeeze_dim(-1) / classes
    return _reduce(per_sample, reduction)


def multi_margin_loss(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    p: int = 1,
    margin: float = 1.0,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``sum_{i != y} w[y] max(0, margin - x[y] + x[i])^p / C`` for ``[N, C]`` (or ``[C]``)
    inputs and int64 class targets ``[N]`` (or 0-d); ``p`` is 1 or 2, as torch allows."""
    fn = "multi_margin_loss"
    reduction = _reduction(fn, reduction, size_average, reduce)
    if p not in (1, 2):
        raise InvalidArgumentError(f"{fn}: only p == 1 and p == 2 are supported, got {p!r}")
    x = _classes_input(fn, input)
    target = _class_targets(fn, x, target, x.shape[:-1])
    classes = x.shape[-1]

    def out_of_range(bad: int | None) -> str:
        value = "a target" if bad is None else f"target {bad}"
        return f"{fn}: {value} is out of range for {classes} classes"

    check_indices(target, classes, out_of_range)
    index = target.unsqueeze_dim(-1)
    picked = x.gather(-1, index)
    hinge = (x - picked + margin).clamp_min(0.0)
    if p == 2:
        hinge = hinge.square()
    if weight is not None:
        weight = _as_tensor(fn, x, weight, "weight")
        if weight.shape != (classes,):
            raise ShapeError(
                f"{fn}: weight must have shape [{classes}] (one per class), got "
                f"{shape_text(weight.shape)}"
            )
        hinge = hinge * weight.cast(x.dtype).gather(0, target.reshape((-1,))).reshape(index.shape)
    arange = x.new_tensor(np.arange(classes), dtype="int64")
    hinge = hinge.mask_fill(index.equal(arange), 0.0)
    return _reduce(hinge.sum_dim(-1).squeeze_dim(-1) / classes, reduction)
