"""Margin, ranking and sequence losses, as torch's: ``margin_ranking_loss``,
``hinge_embedding_loss``, ``soft_margin_loss``, ``multilabel_soft_margin_loss``,
``multilabel_margin_loss``, ``multi_margin_loss``, ``ctc_loss``.

Compositions of differentiable tensor ops; the class-index targets are read on the backend's
device (masks and gathers), never on the host.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from ...autodiff.grad_mode import is_grad_enabled
from ...backend.protocol_ctc import IMPOSSIBLE as _CTC_IMPOSSIBLE
from ...errors import (
    AutodiffError,
    DTypeError,
    InvalidArgumentError,
    KernelArgumentError,
    KernelIndexError,
    MixedDTypeError,
    ResultCastError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
)
from ...tensor import Tensor
from ...tensor._dispatch import host_constant
from ...tensor.autocasting import autocast_op
from ...tensor.functions import once_differentiable_inputs
from ...tensor.internal import FLOAT_DTYPES, check_indices, shape_text, tracked_wide_float
from ._common import _as_tensor, _float_input, _float_pair, _refuse_integer
from .loss import _broadcastable, _reduce, _reduction

__all__ = [
    "ctc_loss",
    "hinge_embedding_loss",
    "margin_ranking_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "multilabel_soft_margin_loss",
    "soft_margin_loss",
]


def _class_numbers(x: Tensor, classes: int) -> Tensor:
    """``0 .. classes - 1`` (int64) on ``x``'s device, copied there once per size (a copy
    each call would be a host round trip)."""
    return host_constant(type(x)._result, np.arange(classes, dtype=np.int64), x.backend, x.device)


@autocast_op("margin_ranking_loss")
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
        raise SizeMismatchError(  # (torch's RuntimeError)
            f"{fn}: all input tensors should have the same number of dimensions; input1 "
            f"{shape_text(x1.shape)}, input2 {shape_text(x2.shape)}, target {shape_text(y.shape)}"
        )
    _broadcastable(fn, x1, x2)
    _broadcastable(fn, x1 - x2, y)
    return _reduce((-y * (x1 - x2) + margin).clamp_min(0.0), reduction)


@autocast_op("hinge_embedding_loss")
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
    x = _float_input(fn, input)
    # the target is only compared (with 1 and -1): the loss keeps the input's dtype, as torch's
    y = _as_tensor(fn, x, target, "target")
    _broadcastable(fn, x, y)
    zeros = x.new_zeros(x.shape)
    margin_term = zeros.mask_where(y.not_equal_elem(1.0), (margin - x).clamp_min(0.0))
    return _reduce(margin_term + zeros.mask_where(y.not_equal_elem(-1.0), x), reduction)


def _target_to_input_shape(fn: str, x: Tensor, target: Tensor) -> Tensor:
    """``target`` broadcast to ``x``'s shape, as torch's kernels write into an output of the
    input's shape: a target that would grow it is refused."""
    if target.shape == x.shape:
        return target
    fits = target.ndim <= x.ndim and all(
        t in (1, n) for t, n in zip(reversed(target.shape), reversed(x.shape), strict=False)
    )
    if not fits:  # (torch's RuntimeError: its output has the input's shape)
        raise SizeMismatchError(
            f"{fn}: target {shape_text(target.shape)} does not broadcast to the input's shape "
            f"{shape_text(x.shape)}"
        )
    return target.expand(x.shape)


@autocast_op("soft_margin_loss")
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
    if isinstance(target, Tensor) and target.requires_grad and is_grad_enabled():
        # torch's kernel has no derivative for the target, and refuses one that requires grad
        # (the composition below would give it one)
        raise AutodiffError(
            f"The function '{fn}' is not differentiable with respect to argument 'target'. "
            f"This input cannot have requires_grad True (target {shape_text(target.shape)})."
        )
    # torch's kernel writes the float loss into a tensor like the input: an integer input is
    # its cast error (it was promoted beside a float target, and computed)
    _refuse_integer(fn, input, ResultCastError)
    x, y = _float_pair(fn, input, target, "target")
    y = _target_to_input_shape(fn, x, y)
    if x.dtype == y.dtype and not y.requires_grad and tracked_wide_float(x):
        # one op with its reduction, whose rule is torch's soft_margin_loss_backward (the
        # composite's rules, and the mean's apart, rounded otherwise in a third of the
        # elements); torch gives the target no gradient
        return x._apply("soft_margin_loss", (x, y), (reduction,))
    losses = (-y * x).exp().log1p()
    if isinstance(input, Tensor) and input.dtype in FLOAT_DTYPES:
        # torch's kernel writes into a tensor like the input: a float64 target of a float32
        # input gives a float32 loss
        losses = losses.cast(input.dtype)
    return _reduce(losses, reduction)


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
    _refuse_integer(fn, input, UnsupportedDTypeError)  # (torch's log_sigmoid has no int kernel)
    x, y = _float_pair(fn, input, target, "target")
    _broadcastable(fn, x, y)  # (both ways, as torch's composite: no output of x's shape)
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
    if target.dtype != "int64":  # (torch's RuntimeError, both)
        raise MixedDTypeError(f"{fn}: target must hold int64 class indices, got {target.dtype}")
    if target.shape != expected:
        raise SizeMismatchError(
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


@autocast_op("multilabel_margin_loss")
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
    (x,) = once_differentiable_inputs(fn, x)  # (torch's backward kernel has no derivative)

    def out_of_range(bad: int | None) -> str:
        value = "a target" if bad is None else f"target {bad}"
        return f"{fn}: {value} is out of range for {classes} classes (-1 ends the targets)"

    check_indices(target, classes, out_of_range, -1)
    # the targets that count: those before the first -1
    counted = target.not_equal_elem(-1).cast("int64").cumprod(-1).equal_elem(1)
    index = target.mask_fill(~counted, 0)
    arange = _class_numbers(x, classes)
    # is_target[..., i]: class i is one of the counted targets
    hits = index.unsqueeze_dim(-1).equal(arange).logical_and(counted.unsqueeze_dim(-1))
    is_target = hits.any(-2)
    picked = x.gather(-1, index)  # x[y_j], [..., K]
    # torch's kernel counts a term where it is > 0 only, as multi_margin_loss's: not at 0 (no
    # gradient), nor at NaN (neither value nor gradient; relu kept a NaN logit's NaN)
    hinge = x.unsqueeze_dim(-2) - picked.unsqueeze_dim(-1) + 1.0  # [..., K, C]
    keep = counted.unsqueeze_dim(-1).logical_and((~is_target).unsqueeze_dim(-2))
    hinge = hinge.mask_fill(hinge.greater(0.0).logical_and(keep).logical_not(), 0.0)
    per_sample = hinge.sum_dim(-1).squeeze_dim(-1).sum_dim(-1).squeeze_dim(-1) / classes
    return _reduce(per_sample, reduction)


@autocast_op("multi_margin_loss")
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
    (x,) = once_differentiable_inputs(fn, x)  # (torch's backward kernel has no derivative)

    def out_of_range(bad: int | None) -> str:
        value = "a target" if bad is None else f"target {bad}"
        return f"{fn}: {value} is out of range for {classes} classes"

    check_indices(target, classes, out_of_range)
    index = target.unsqueeze_dim(-1)
    picked = x.gather(-1, index)
    # torch's kernel counts a term where it is > 0 only: not at 0 (no gradient), nor at NaN
    # (neither value nor gradient), unlike clamp_min
    hinge = x - picked + margin
    hinge = hinge.mask_fill(hinge.greater(0.0).logical_not(), 0.0)
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
    arange = _class_numbers(x, classes)
    hinge = hinge.mask_fill(index.equal(arange), 0.0)
    return _reduce(hinge.sum_dim(-1).squeeze_dim(-1) / classes, reduction)


@autocast_op("ctc_loss")
def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """The connectionist temporal classification loss, torch's ``F.ctc_loss``:
    ``-log p(target | input)`` summed over the alignments by the forward (alpha) recursion in
    log space, for ``log_probs`` ``[T, N, C]`` (or unbatched ``[T, C]``), targets padded
    ``[N, S]`` or concatenated ``[sum(target_lengths)]``; ``"mean"`` divides each loss by its
    target length, then averages. An impossible alignment costs ``inf`` (0 with
    ``zero_infinity``). The lengths are read on the host, as torch reads them.

    One op (the backend protocol's ``ctc_loss``, backend/protocol_ctc.py) whose rule reads
    ``log_probs`` and the targets, as torch's, and reruns the alpha recursion beside the beta
    recursion: the exact gradient in ``log_probs``. torch's kernel returns a shortcut that is
    exact only after ``log_softmax``'s backward (it adds ``exp(log_probs)`` times the summed
    gradient, which ``log_softmax`` removes): through the ``log_softmax`` that produces
    ``log_probs``, as torch's contract has it, the two agree."""
    fn = "ctc_loss"
    reduction = _reduction(fn, reduction, None, None)
    x = _float_input(fn, log_probs)
    if x.dtype in ("float16", "bfloat16"):  # torch's ctc kernels (CPU and CUDA) have none either
        raise DTypeError(
            f"{fn}: log_probs of dtype {x.dtype} are not supported, as in torch (float32 or "
            f"float64 only); cast them first (log_probs.float()), got {shape_text(x.shape)}"
        )
    unbatched = x.ndim == 2
    if unbatched:
        x = x.unsqueeze_dim(1)
    if x.ndim != 3:
        raise ShapeError(f"{fn}: log_probs must be [T, N, C] or [T, C], got {shape_text(x.shape)}")
    steps, batch, classes = x.shape
    in_lengths = _host_lengths(fn, x, input_lengths, "input_lengths", batch)
    out_lengths = _host_lengths(fn, x, target_lengths, "target_lengths", batch)
    if np.any(in_lengths > steps) or np.any(in_lengths < 0) or np.any(out_lengths < 0):
        # (torch's RuntimeError; a ShapeError of the hierarchy as before)
        raise SizeMismatchError(
            f"{fn}: input_lengths must lie in [0, {steps}] and target_lengths be non-negative; "
            f"got {in_lengths.tolist()} and {out_lengths.tolist()}"
        )
    labels = _padded_targets(fn, x, targets, out_lengths, unbatched)
    if not 0 <= blank < classes:
        raise KernelArgumentError(  # (torch's RuntimeError "blank must be in label range")
            f"{fn}: blank {blank} is out of range for {classes} classes"
        )
    labels = _labels_read(fn, labels, out_lengths, blank, classes)
    # the protocol's ctc_loss (backend/protocol_ctc.py), one op of the op table whose rule
    # reads the log-probabilities and the targets and reruns the alpha recursion beside the
    # beta recursion: a composite of tensor ops held each step's candidates, shifted alphas
    # and masks (4.1x torch's saved bytes; 7 December)
    padded = x.new_tensor(labels, dtype="int64")
    lengths = (tuple(in_lengths.tolist()), tuple(out_lengths.tolist()))
    losses = x._apply("ctc_loss", (x, padded), (blank, *lengths))
    return _ctc_reduced(x, losses, in_lengths, out_lengths, reduction, zero_infinity, unbatched)


def _ctc_reduced(
    x: Tensor,
    losses: Tensor,
    in_lengths: np.ndarray,
    out_lengths: np.ndarray,
    reduction: str,
    zero_infinity: bool,
    unbatched: bool,
) -> Tensor:
    """The sequences' losses ``[N]`` (about ``-_CTC_IMPOSSIBLE`` where no alignment exists)
    made ``inf`` (or 0, ``zero_infinity``) where impossible, 0 for an empty input of no
    labels, and reduced."""
    infinite = losses.greater(-_CTC_IMPOSSIBLE / 2)
    empty = _mask(x, in_lengths == 0)
    infinite = infinite.logical_or(empty.logical_and(_mask(x, out_lengths > 0)))
    losses = losses.mask_fill(empty.logical_and(~infinite), 0.0)
    losses = (
        losses.mask_fill(infinite, 0.0) if zero_infinity else losses.mask_fill(infinite, math.inf)
    )
    if unbatched:
        losses = losses.squeeze_dim(0)
    if reduction == "mean":
        divisor = x.new_tensor(np.maximum(out_lengths, 1).astype(np.float64)).cast(x.dtype)
        return (losses / (divisor.squeeze_dim(0) if unbatched else divisor)).mean()
    return _reduce(losses, reduction)


def _host_lengths(fn: str, x: Tensor, lengths: Any, name: str, batch: int) -> np.ndarray:
    if isinstance(lengths, Tensor):
        lengths = lengths.numpy()
    values = np.asarray(lengths).reshape(-1)
    if values.dtype.kind not in "iu" or values.shape != (batch,):
        raise ShapeError(
            f"{fn}: {name} must hold {batch} ints (one per sequence), got {np.asarray(lengths)!r}"
        )
    return values.astype(np.int64)


def _padded_targets(fn, x, targets, lengths, unbatched) -> np.ndarray:
    """The targets as a host ``[N, S]`` int64 array (concatenated ones split by length)."""
    values = targets.numpy() if isinstance(targets, Tensor) else np.asarray(targets)
    if values.dtype.kind in "fb":  # torch casts the targets to int64 (float labels truncate)
        values = values.astype(np.int64)
    if values.dtype.kind not in "iu":
        raise DTypeError(f"{fn}: targets must hold integer class indices, got {values.dtype}")
    if unbatched:
        values = values.reshape(1, -1)
    if values.ndim == 1:
        if values.shape[0] != lengths.sum():
            raise ShapeError(
                f"{fn}: concatenated targets hold {values.shape[0]} labels, target_lengths sum "
                f"to {int(lengths.sum())}"
            )
        padded = np.zeros((len(lengths), max(int(lengths.max(initial=0)), 1)), dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        for n, (a, b) in enumerate(itertools.pairwise(offsets)):
            padded[n, : b - a] = values[a:b]
        values = padded
    if values.ndim != 2 or values.shape[0] != len(lengths) or np.any(lengths > values.shape[1]):
        raise ShapeError(
            f"{fn}: targets must be [N, S] with S >= every target length, got "
            f"{list(values.shape)} for lengths {lengths.tolist()}"
        )
    return values.astype(np.int64)


def _labels_read(
    fn: str, labels: np.ndarray, lengths: np.ndarray, blank: int, classes: int
) -> np.ndarray:
    """The labels ``[N, S]`` with the entries past each target length (padding, never read by
    torch: ``-100`` or the vocabulary size are common) set to ``blank``, so the recursion's
    gather reads only classes; a label within its length outside ``[0, classes)`` is refused
    (torch's kernel reads outside its log-probabilities there; a gather would wrap ``-1``
    round to the last class)."""
    read = np.arange(labels.shape[1])[None, :] < lengths[:, None]
    outside = read & ((labels < 0) | (labels >= classes))
    if outside.any():
        sequence, position = (int(i) for i in np.argwhere(outside)[0])
        raise KernelIndexError(
            f"{fn}: target label {int(labels[sequence, position])} of sequence {sequence} (at "
            f"{position}, within its target length {int(lengths[sequence])}) is out of range "
            f"for {classes} classes"
        )
    return np.where(read, labels, blank)


def _mask(x: Tensor, values: np.ndarray) -> Tensor:
    """A host bool array as a mask on ``x``'s backend and device."""
    return _as_tensor("ctc_loss", x, values, "mask")
