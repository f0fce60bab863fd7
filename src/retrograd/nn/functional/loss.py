"""Losses with PyTorch's reductions: cross entropy (class indices or probabilities), negative
log-likelihood, mean squared error, binary cross entropy, L1/smooth-L1/Huber, KL divergence,
Poisson and Gaussian negative log-likelihoods."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import (
    ArgumentTypeError,
    DTypeError,
    InvalidArgumentError,
    MixedDTypeError,
    ResultCastError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
    check_bool,
)
from ...tensor import Tensor
from ...tensor.autocasting import autocast_op
from ...tensor.functions import kernel_read_inputs
from ...tensor.internal import (
    FLOAT_DTYPES,
    check_indices,
    check_values,
    result_dtype,
    shape_text,
    tracked_wide_float,
    untracked,
)
from ._common import (
    _HALF_DTYPES,
    _as_tensor,
    _clamped_min,
    _float_input,
    _float_pair,
    _refuse_integer,
)


# -- losses ----------------------------------------------------------------------------------------
def _reduction(fn: str, reduction: str, size_average: bool | None, reduce: bool | None) -> str:
    """``reduction``, or what PyTorch's deprecated ``size_average``/``reduce`` say instead."""
    if size_average is not None or reduce is not None:
        # torch reads them by truth (its legacy_get_string): a 0 is False, as written so
        if reduce is not None and not reduce:
            reduction = "none"
        else:
            reduction = "sum" if size_average is not None and not size_average else "mean"
    if reduction == "elementwise_mean":  # torch's name of "mean" before 0.4.1, still read
        warnings.warn(
            "reduction='elementwise_mean' is deprecated. Please use reduction='mean' instead.",
            UserWarning,
            stacklevel=3,
        )
        reduction = "mean"
    if reduction not in ("mean", "sum", "none"):
        raise InvalidArgumentError(
            f"{fn}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
        )
    return reduction


def _reduce(losses: Tensor, reduction: str, total: Tensor | None = None) -> Tensor:
    """``losses`` reduced; ``"mean"`` divides the sum by ``total`` when given (a weighted
    mean), by the number of losses otherwise."""
    if reduction == "none":
        return losses
    if reduction == "sum" or total is not None:
        summed = losses.sum()
        return summed if reduction == "sum" else summed / total
    return losses.mean()


def _class_weights(
    fn: str, logits: Tensor, weight: Any, classes: int, class_dim: int, exact: bool = True
) -> Tensor:
    """``weight`` ``[C]`` checked, shaped to broadcast along classes: in the logits' dtype,
    which torch's class-index kernels require it to have (``exact``); else (probability
    targets, torch's composite) in its own dtype, for the loss to promote with it."""
    given = weight
    weight = _as_tensor(fn, logits, weight, "weight")
    if weight.shape != (classes,) or weight.dtype not in FLOAT_DTYPES:
        # torch's RuntimeError ("weight tensor should be defined either for all 4 classes")
        error = SizeMismatchError if weight.shape != (classes,) else ShapeError
        raise error(
            f"{fn}: weight must be a float tensor of one value per class, shape [{classes}]; "
            f"got {weight.dtype} {shape_text(weight.shape)}, input {shape_text(logits.shape)}"
        )
    shape = [1] * logits.ndim
    shape[class_dim] = classes
    if weight.dtype != logits.dtype and {weight.dtype, logits.dtype} & _HALF_DTYPES:
        # torch's kernels take the weight in the input's dtype only: a float32 weight with
        # half-precision logits is refused there
        raise DTypeError(
            f"{fn}: weight must have the input's dtype, got weight {weight.dtype} and input "
            f"{logits.dtype} {shape_text(logits.shape)}"
        )
    if exact and isinstance(given, Tensor) and weight.dtype != logits.dtype:
        raise DTypeError(
            f"{fn}: expected scalar type {logits.dtype} but found {weight.dtype}: the class "
            f"weight must have the input's dtype (torch's kernel takes no other); input "
            f"{logits.dtype} {shape_text(logits.shape)}, weight {weight.dtype}"
        )
    if exact or not isinstance(given, Tensor):
        weight = weight.cast(logits.dtype)
    return weight.reshape(tuple(shape))


@autocast_op("cross_entropy")
def cross_entropy(
    logits: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy of ``logits`` ``[N, C]`` or ``[N, C, d...]`` (or unbatched ``[C]``)
    against class indices (int64 ``[N, d...]``) or class probabilities (float, the logits'
    shape), through ``log_softmax`` so that large logits stay finite. PyTorch's arguments:
    ``weight`` ``[C]`` rescales each class, ``label_smoothing`` mixes the target with the
    uniform distribution; ``"mean"`` divides by the summed weights of the non-ignored targets
    (class indices; their count without ``weight``) or by ``N * d...`` (probabilities).
    ``size_average``/``reduce`` are PyTorch's deprecated spellings of ``reduction``.

    >>> import retrograd as rg
    >>> round(cross_entropy(rg.zeros((2, 4)), rg.tensor([1, 3], dtype="int64")).item(), 4)
    1.3863
    """
    fn = "cross_entropy"
    logits = _float_input(fn, logits)
    reduction = _reduction(fn, reduction, size_average, reduce)
    if not 0.0 <= label_smoothing <= 1.0:
        raise InvalidArgumentError(
            f"{fn}: label_smoothing must be in [0, 1], got {label_smoothing!r}"
        )
    target = _as_tensor(fn, logits, target, "target")
    shapes = f"input {shape_text(logits.shape)}, target {shape_text(target.shape)}"
    if logits.ndim == 0:
        raise ShapeError(f"{fn}: input needs a class dimension; {shapes}")
    class_dim = 0 if logits.ndim == 1 else 1
    classes = logits.shape[class_dim]
    probabilities = target.dtype in FLOAT_DTYPES
    weights = None
    if weight is not None:
        weights = _class_weights(fn, logits, weight, classes, class_dim, not probabilities)
    log_probs = logits.log_softmax(class_dim)

    def per_target(values: Tensor) -> Tensor:  # -sum over classes, the class dim removed
        if weights is not None:
            values = values * weights
        return -values.sum_dim(class_dim).squeeze_dim(class_dim)

    if target.dtype in FLOAT_DTYPES:
        if target.shape != logits.shape:
            raise SizeMismatchError(  # (torch's RuntimeError)
                f"{fn}: probability targets must have the input's shape; {shapes}"
            )
        if ignore_index != -100:
            raise InvalidArgumentError(
                f"{fn}: ignore_index ({ignore_index}) applies to class-index targets, not to "
                f"probabilities; {shapes}"
            )
        # torch's composite promotes the loss with the target's and the weight's dtypes
        # (the target smoothed in its own dtype, before it is promoted: torch's order)
        wide = result_dtype(logits.dtype, target.dtype)
        if weights is not None:
            wide = result_dtype(wide, weights.dtype)
            weights = weights.cast(wide)
        if label_smoothing:
            target = target * (1.0 - label_smoothing) + label_smoothing / classes
        target, log_probs = target.cast(wide), log_probs.cast(wide)
        return _reduce(per_target(log_probs * target), reduction)
    if target.dtype == "uint8":  # (torch's class-index losses take Long or Byte targets)
        target = target.long()
    if target.dtype != "int64":
        raise MixedDTypeError(  # (torch's RuntimeError)
            f"{fn}: target must be int64 (or uint8) class indices or float probabilities, as "
            f"torch's, got {target.dtype}"
        )
    smoothing = None
    if label_smoothing:
        smoothing = (label_smoothing, per_target(log_probs) * (label_smoothing / classes))
    return _class_index_loss(
        fn, log_probs, target, weights, ignore_index, reduction, class_dim, smoothing
    )


def _class_index_loss(
    fn: str,
    log_probs: Tensor,
    target: Tensor,
    weights: Tensor | None,
    ignore_index: int,
    reduction: str,
    class_dim: int,
    smoothing: tuple[float, Tensor] | None = None,
) -> Tensor:
    """``-weight[t] * log_probs[t]`` for each int64 class index ``t`` of ``target`` (0 where
    ``t == ignore_index``), reduced; "mean" divides by the weights of the targets that count
    (their number without ``weights``). ``smoothing`` = ``(fraction, uniform)`` mixes in
    cross-entropy's label-smoothing term: ``loss * (1 - fraction) + uniform``."""
    if not isinstance(ignore_index, numbers.Integral) or isinstance(ignore_index, bool):
        raise ArgumentTypeError(f"{fn}: ignore_index must be an int, got {ignore_index!r}")
    classes = log_probs.shape[class_dim]
    shapes = f"input {shape_text(log_probs.shape)}, target {shape_text(target.shape)}"
    expected = log_probs.shape[:class_dim] + log_probs.shape[class_dim + 1 :]
    if target.shape != expected:
        # torch: a ValueError where the batch sizes differ, a RuntimeError otherwise
        batch_differs = class_dim == 1 and (target.ndim == 0 or target.shape[0] != expected[0])
        raise (ShapeError if batch_differs else SizeMismatchError)(
            f"{fn}: class-index targets must have shape {shape_text(expected)} (the input's "
            f"without the class dimension); {shapes}"
        )

    def out_of_range(bad: int | None) -> str:
        value = "a target" if bad is None else f"target {bad}"
        return f"{fn}: {value} is out of range for {classes} classes; {shapes}"

    check_indices(target, classes, out_of_range, ignore_index)
    if weights is None and smoothing is None and tracked_wide_float(log_probs):
        params = (class_dim, ignore_index, reduction)
        return log_probs._apply("nll_loss", (log_probs, target), params)
    # The ignored targets are masked whether there are any or not: finding out would read the
    # targets on the host, a synchronisation on a device backend. Masking nothing changes no
    # value.
    ignored = target.equal_elem(ignore_index)
    index = target.mask_fill(ignored, 0).unsqueeze_dim(class_dim)
    # torch's nll_loss_backward reads its input (of zero derivative): under create_graph the
    # gradient is a function of it, not a constant
    (read,) = kernel_read_inputs(log_probs)
    losses = -read.gather(class_dim, index).squeeze_dim(class_dim)
    # What "mean" divides by: the weights of the targets that count (their number without
    # weights; all ignored gives 0/0 = nan, as in PyTorch).
    total = None
    if weights is not None:
        picked = weights.expand(log_probs.shape).gather(class_dim, index).squeeze_dim(class_dim)
        losses = losses * picked
        if reduction == "mean":
            total = picked.mask_fill(ignored, 0.0).sum()
    if smoothing is not None:
        fraction, uniform = smoothing
        if total is not None:
            # torch's weighted mean reduces the two terms apart, each over the targets'
            # weights: with every counted weight 0 the loss is 0/0 = NaN, not uniform/0 = inf
            nll = _reduce(losses.mask_fill(ignored, 0.0), reduction, total)
            return nll * (1.0 - fraction) + _reduce(
                uniform.mask_fill(ignored, 0.0), reduction, total
            )
        losses = losses * (1.0 - fraction) + uniform
    losses = losses.mask_fill(ignored, 0.0)
    if weights is None and reduction == "mean":
        # The sum over the number of targets that count; with none ignored, mean(), the op
        # this loss has always ended with (and that graphs show). The backend picks one, as
        # the host would have to read the targets to know which applies.
        counted = (~ignored).sum()
        by_count = losses.sum() / counted.cast(log_probs.dtype)
        return by_count.mask_where(counted.equal_elem(losses.numel()), losses.mean())
    return _reduce(losses, reduction, total)


@autocast_op("nll_loss")
def nll_loss(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """The negative log-likelihood of int64 class indices ``target`` under log-probabilities
    ``input`` ``[N, C]`` or ``[N, C, d...]`` (unbatched: ``[C]`` and a 0-d target), PyTorch's
    ``F.nll_loss``: ``-weight[t] * input[t]`` per target, 0 where ``t == ignore_index``;
    ``"mean"`` divides by the summed weights of the targets that count (their number without
    ``weight``). ``F.cross_entropy(x, t)`` is ``nll_loss(log_softmax(x, 1), t)``.

    >>> import retrograd as rg
    >>> nll_loss(rg.tensor([[-1.0, -2.0], [-3.0, -4.0]]), rg.tensor([1, 0], dtype="int64")).item()
    2.5
    """
    fn = "nll_loss"
    log_probs = _float_input(fn, input)
    reduction = _reduction(fn, reduction, size_average, reduce)
    target = _as_tensor(fn, log_probs, target, "target")
    if log_probs.ndim == 0:
        raise ShapeError(f"{fn}: input needs a class dimension, got a 0-d input")
    if target.dtype == "uint8":  # (torch's class-index losses take Long or Byte targets)
        target = target.long()
    if target.dtype != "int64":
        raise MixedDTypeError(  # (torch's RuntimeError)
            f"{fn}: target must be int64 (or uint8) class indices, as torch's, got {target.dtype}"
        )
    class_dim = 0 if log_probs.ndim == 1 else 1
    classes = log_probs.shape[class_dim]
    weights = None if weight is None else _class_weights(fn, log_probs, weight, classes, class_dim)
    return _class_index_loss(fn, log_probs, target, weights, ignore_index, reduction, class_dim)


@autocast_op("mse_loss")
def mse_loss(
    x: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Tensor | None = None,
) -> Tensor:
    """Mean squared error ``mean((x - target)**2)``, PyTorch's arguments: ``weight`` (the
    input's shape) scales each squared error and ``"mean"`` then divides by its sum. A target
    of another shape is broadcast with the input, with torch's warning."""
    errors = Tensor.square
    return _pointwise(
        "mse_loss", x, target, size_average, reduce, reduction, weight, errors, op="mse_loss"
    )


def _one_float_pair(x: Tensor, y: Tensor, *others: Tensor) -> bool:
    """Whether a loss of ``x`` and ``y`` records its op of the op table: both float32 or both
    float64, something tracked (elsewhere the composite computes the same values)."""
    return x.dtype == y.dtype and tracked_wide_float(x, y, *others)


def _dimensioned(x: Any, target: Any) -> tuple[Any, Any]:
    """``x`` and ``target``, a 0-d tensor beside a larger one made ``[1]``: torch broadcasts
    the pair before its kernel promotes them, so the 0-d one counts as dimensioned (a float64
    0-d target of a float32 input gives a float64 loss; the 0-d rule kept float32)."""
    if isinstance(x, Tensor) and isinstance(target, Tensor) and (x.ndim == 0) != (target.ndim == 0):
        x = x.reshape((1,)) if x.ndim == 0 else x
        target = target.reshape((1,)) if target.ndim == 0 else target
    return x, target


def _pointwise(
    fn: str,
    x: Any,
    target: Any,
    size_average: bool | None,
    reduce: bool | None,
    reduction: str,
    weight: Any,
    error: Callable[[Tensor], Tensor],
    complex_ok: bool = False,
    op: str | None = None,
) -> Tensor:
    """A loss of each element's ``error(x - target)``: the target broadcast with the input
    (with torch's warning), ``weight`` (the input's shape) scaling each error, and ``"mean"``
    then dividing by the weights' sum (torch 2.13's weighted ``mse_loss`` and ``l1_loss``).
    ``op``: the loss's op of the op table, with its reduction, whose rules are torch's
    kernel's, recorded for an unweighted loss of a float pair of one shape."""
    given_shape = getattr(x, "shape", None)
    x, target = _dimensioned(x, target)
    x, target = _float_pair(fn, x, target, "target", complex_ok=complex_ok)
    reduction = _reduction(fn, reduction, size_average, reduce)
    if op is not None and weight is None and x.shape == target.shape and _one_float_pair(x, target):
        return x._apply(op, (x, target), (reduction,))
    input_shape = x.shape if given_shape is None else tuple(given_shape)
    x, target = _broadcast_pair(fn, x, target)
    errors = error(x - target)
    if weight is None:
        return _reduce(errors, reduction)
    weight = _sample_weights(fn, x, weight, input_shape)
    return _reduce(errors * weight, reduction, weight.sum() if reduction == "mean" else None)


def _sample_weights(fn: str, reference: Tensor, weight: Any, input_shape: tuple) -> Tensor:
    """The ``weight`` of torch 2.13's regression losses: one per input element (torch's
    "Weights and input must have the same size"). A tensor keeps its dtype, which the
    weighted losses are promoted with (a float64 weight gives a float64 loss, as torch's);
    an array or a list, which torch does not take, is read in the input's dtype."""
    given = weight
    weight = _as_tensor(fn, reference, weight, "weight")
    if not isinstance(given, Tensor):
        weight = weight.cast(reference.dtype)
    if weight.shape != input_shape:
        raise ShapeError(
            f"{fn}: Weights and input must have the same size; input "
            f"{shape_text(input_shape)}, weight {shape_text(weight.shape)}"
        )
    return weight


def _broadcast_pair(fn: str, x: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """torch's rule for the elementwise regression losses: a target of another shape is
    broadcast with the input, with its warning (a deliberate broadcast, as a target of one
    image against a batch, is common); shapes that do not broadcast are a ``ShapeError``."""
    if x.shape == target.shape:
        return x, target
    shape = _broadcastable(fn, x, target)
    warnings.warn(
        f"{fn}: using a target size ({shape_text(target.shape)}) that is different to the input "
        f"size ({shape_text(x.shape)}). This will likely lead to incorrect results due to "
        "broadcasting. Please ensure they have the same size.",
        UserWarning,
        stacklevel=4,  # the caller of the loss (past its error guard)
    )
    return x.expand(shape), target.expand(shape)


def _broadcastable(fn: str, x: Tensor, target: Tensor) -> tuple[int, ...]:
    """The shape an input and a target broadcast to; torch's ``RuntimeError`` where they do
    not (the regression losses, and those computed elementwise without a shape check of
    their own: ``kl_div``, ``poisson_nll_loss``)."""
    try:
        return tuple(np.broadcast_shapes(x.shape, target.shape))
    except ValueError:
        raise SizeMismatchError(
            f"{fn}: input and target shapes do not broadcast; input {shape_text(x.shape)}, "
            f"target {shape_text(target.shape)}"
        ) from None


def _same_shape(fn: str, x: Tensor, target: Tensor) -> None:
    if x.shape != target.shape:
        raise ShapeError(
            f"{fn}: using a target size ({shape_text(target.shape)}) that is different to the "
            f"input size ({shape_text(x.shape)}) is not supported; make them match"
        )


def _weighted(fn: str, losses: Tensor, weight: Any) -> Tensor:
    if weight is None:
        return losses
    weight = _as_tensor(fn, losses, weight, "weight").cast(losses.dtype)
    return losses * weight


_BCE_EPS = 9.999999960041972e-13  # float(np.float32(1e-12))
#: the largest finite value of each half dtype
_HALF_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


@autocast_op("binary_cross_entropy")
def binary_cross_entropy(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``-(y log x + (1 - y) log(1 - x))`` for probabilities ``x``, each log clamped at -100
    as torch's (so ``x`` of 0 or 1 gives a finite loss); ``weight`` broadcasts over it."""
    fn = "binary_cross_entropy"
    x, y = _float_pair(fn, input, target, "target", one_dtype=True)
    _same_shape(fn, x, y)
    reduction = _reduction(fn, reduction, size_average, reduce)
    # The values from the clamped logs (of x's values), as torch computes them. The
    # gradients: where x (1 - x) >= eps (torch's eps, the float32 nearest 1e-12, in every
    # dtype) the loss's own formula, recorded as ``direct - value(direct)`` (zero in value),
    # so that second derivatives are right too; elsewhere (x at 0 or 1: a saturated sigmoid)
    # torch's finite first derivatives, (x - y) / max(x (1 - x), eps) in x and the unclamped
    # logs in y, added as (x - x) * slope.
    constant, target = untracked(x), untracked(y)
    # torch refuses probabilities outside [0, 1] (NaN too), where the logs would give NaN,
    # and targets outside [0, 1] (a class index given for a probability gave a loss)
    for name, values, given in (("input", constant, x), ("target", target, y)):
        check_values(
            values.greater_equal_elem(0.0).logical_and(values.lower_equal_elem(1.0)),
            lambda name=name, given=given: InvalidArgumentError(
                f"{fn}: all elements of {name} should be between 0 and 1; {name} "
                f"{shape_text(given.shape)} {given.dtype}"
            ),
        )
    if x.dtype in ("float32", "float64"):
        # one op whose rules read x and y (torch's backward formulas), with its reduction
        # where no weight comes between (the mean's 1 / n after the rule, as torch's kernel):
        # see autodiff/ops.py
        if weight is None:
            return x._apply("binary_cross_entropy", (x, y), (reduction,))
        losses = x._apply("binary_cross_entropy", (x, y), ("none",))
        return _reduce(_weighted(fn, losses, weight), reduction)
    raw_log_x = constant.log()
    raw_log_not_x = (1.0 - constant).log()  # torch: log(1 - x), not log1p(-x)
    log_x, log_not_x = raw_log_x.clamp_min(-100.0), raw_log_not_x.clamp_min(-100.0)
    losses = -(target * log_x + (1.0 - target) * log_not_x)
    if not (x.requires_grad or y.requires_grad):
        return _reduce(_weighted(fn, losses, weight), reduction)
    # x (1 - x) against eps in float32 (torch's opmath type) for a half dtype, where eps
    # rounds to 0 and x at 0 or 1 was no edge (the logs of 0 then made the loss NaN)
    wide = constant.cast("float32") if x.dtype in _HALF_DTYPES else constant
    edge = (wide * (1.0 - wide)).less(_BCE_EPS)
    inner = x.masked_fill(edge, 0.5)
    direct = -(y * inner.log() + (1.0 - y) * (1.0 - inner).log())
    losses = losses + (direct - untracked(direct))
    # (zero in value and gradient where no x is at an edge: added whatever the data, so that
    # no host read of ``edge`` stalls a step on an accelerator)
    slopes = None
    if x.requires_grad:
        slopes = (x - constant) * _edge_slope(wide, target, edge, x.dtype)
    if y.requires_grad:  # torch: the unclamped logs (finite here where torch's are infinite)
        slope = raw_log_not_x - raw_log_x
        slope = slope.mask_where(slope.is_inf(), log_not_x - log_x)
        term = (y - target) * slope.mask_fill(edge.logical_not(), 0.0)
        slopes = term if slopes is None else slopes + term
    losses = losses + slopes
    return _reduce(_weighted(fn, losses, weight), reduction)


def _edge_slope(wide: Tensor, target: Tensor, edge: Tensor, dtype: str) -> Tensor:
    """torch's first derivative in x at the edges, ``(x - y) / max(x (1 - x), eps)``, zero
    off them, from ``wide`` (x's values, in float32 for a half dtype, where eps rounds to 0
    and 0 / 0 made a NaN), saturated to ``dtype``'s finite range: the slope multiplies a term
    that is zero in value, and a NaN or infinite slope made the loss itself NaN."""
    slope = (wide - target.cast(wide.dtype)) / (wide * (1.0 - wide)).clamp_min(_BCE_EPS)
    if dtype in _HALF_DTYPES:
        bound = _HALF_MAX[dtype]
        slope = slope.clamp(-bound, bound).cast(dtype)
    return slope.mask_fill(edge.logical_not(), 0.0)


@autocast_op("binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """``(1 - y) x - w_pos log(sigmoid(x))`` with ``w_pos = 1 + (pos_weight - 1) y``, torch's
    formula (stable for large logits)."""
    fn = "binary_cross_entropy_with_logits"
    # torch's log_sigmoid has no integer kernel, and its float loss is written in the
    # target's dtype (an integer input or target was promoted and computed)
    _refuse_integer(fn, input, UnsupportedDTypeError)
    _refuse_integer(fn, target, ResultCastError, "target")
    mixed = (
        isinstance(input, Tensor)
        and isinstance(target, Tensor)
        and input.dtype != target.dtype
        and input.dtype in FLOAT_DTYPES
        and target.dtype in FLOAT_DTYPES
    )
    x, y = _float_pair(fn, input, target, "target")
    _same_shape(fn, x, y)
    reduction = _reduction(fn, reduction, size_average, reduce)
    if mixed:
        return _reduce(_mixed_bce_with_logits(fn, input, target, weight, pos_weight), reduction)
    if pos_weight is not None:
        pos = _as_tensor(fn, x, pos_weight, "pos_weight").cast(x.dtype)
        if (
            _one_float_pair(x, y, pos)
            and pos.ndim <= x.ndim
            and all(n in (1, m) for n, m in zip(pos.shape[::-1], x.shape[::-1]))
        ):
            # one op of the op table (autodiff/ops.py) whose rules read x, y and pos_weight,
            # as torch's: the composite below held 1 - y and the positive weight of each
            # entry, untracked values of x's size (1.49x torch's bytes; 7 December)
            losses = x._apply("bce_with_logits_pos_weight", (x, y, pos))
            return _reduce(_weighted(fn, losses, weight), reduction)
    if pos_weight is None and weight is None and _one_float_pair(x, y):
        # one op of the op table with its reduction, whose rules are torch's kernel's
        return x._apply("bce_with_logits_loss", (x, y), (reduction,))
    log_sigmoid = x.log_sigmoid()
    if pos_weight is not None:
        log_sigmoid = log_sigmoid * ((pos - 1.0) * y + 1.0)
    losses = (1.0 - y) * x - log_sigmoid
    return _reduce(_weighted(fn, losses, weight), reduction)


def _mixed_bce_with_logits(
    fn: str, x: Tensor, y: Tensor, weight: Tensor | None, pos_weight: Tensor | None
) -> Tensor:
    """The unreduced loss of an input and a target of two float dtypes, in torch's steps and
    dtypes: ``log_sigmoid(x)`` in the input's dtype (scaled in place by ``1 + (pos_weight -
    1) y``), ``(1 - y) * x - log_sigmoid(x)`` (then times ``weight``) each step rounded to the
    target's dtype, which is the result's (a float32 input with a float64 target was
    promoted first, its float64 loss off torch's by float32 rounding; a float64 input with a
    float32 target gave a float64 loss, torch's is float32)."""
    log_sigmoid = x.log_sigmoid()
    if pos_weight is not None:
        pos = _as_tensor(fn, x, pos_weight, "pos_weight")
        log_sigmoid = (log_sigmoid * ((pos - 1.0) * y + 1.0)).cast(x.dtype)
    losses = ((1.0 - y) * x).cast(y.dtype)
    losses = (losses - log_sigmoid).cast(y.dtype)
    if weight is not None:
        losses = (losses * _as_tensor(fn, losses, weight, "weight")).cast(y.dtype)
    return losses


@autocast_op("l1_loss")
def l1_loss(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Tensor | None = None,
) -> Tensor:
    """Mean absolute error, PyTorch's arguments: ``weight`` (the input's shape) scales each
    absolute error and ``"mean"`` then divides by its sum (torch 2.13's)."""
    errors = Tensor.abs  # of complex errors too (a real loss, as torch's)
    return _pointwise(
        "l1_loss", input, target, size_average, reduce, reduction, weight, errors, complex_ok=True
    )


@autocast_op("smooth_l1_loss")
def smooth_l1_loss(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """``0.5 d**2 / beta`` where ``|d| < beta``, ``|d| - 0.5 beta`` elsewhere (``d = x - y``;
    ``beta=0`` is the L1 loss)."""
    fn = "smooth_l1_loss"
    x, y = _broadcast_pair(fn, *_float_pair(fn, *_dimensioned(input, target), "target"))
    reduction = _reduction(fn, reduction, size_average, reduce)
    if not beta >= 0:  # (a NaN too, as torch's check)
        raise InvalidArgumentError(f"{fn}: beta must be non-negative, got {beta}")
    diff = x - y
    if beta == 0:
        return _reduce(diff.abs(), reduction)
    if tracked_wide_float(diff):
        # one op of the op table with its reduction, whose rule reads the difference and is
        # torch's kernel's arithmetic (autodiff/ops.py)
        return diff._apply("smooth_l1_loss", (diff,), (float(beta), reduction))
    return _reduce(diff._apply("smooth_l1", (diff,), (float(beta),)), reduction)


@autocast_op("huber_loss")
def huber_loss(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    reduction: str = "mean",
    delta: float = 1.0,
    weight: Tensor | None = None,
) -> Tensor:
    """``0.5 d**2`` where ``|d| < delta``, ``delta (|d| - 0.5 delta)`` elsewhere."""
    fn = "huber_loss"
    if not delta > 0:  # (torch's: a negative delta gave a negative loss, NaN a NaN one)
        raise InvalidArgumentError(f"{fn}: delta must be positive, got {delta}")
    x, y = _float_pair(fn, input, target, "target")
    input_shape = x.shape
    x, y = _broadcast_pair(fn, x, y)
    reduction = _reduction(fn, reduction, None, None)
    diff = x - y
    if isinstance(input, Tensor) and input.dtype in FLOAT_DTYPES and input.dtype != x.dtype:
        # torch's kernel writes into a tensor like the input, as soft_margin_loss's: a float64
        # target of a float32 input gives float32 losses, computed in float64
        losses = diff._apply("huber", (diff,), (float(delta),)).cast(input.dtype)
        if weight is not None:
            losses = losses * _sample_weights(fn, losses, weight, input_shape)
        return _reduce(losses, reduction)
    # one op whose rule reads the difference, as smooth_l1_loss's (at |d| == delta both
    # branches have the same value and slope; torch's second derivative there is 0)
    if weight is None and tracked_wide_float(diff):
        # with its reduction, as smooth_l1_loss's
        return diff._apply("huber_loss", (diff,), (float(delta), reduction))
    losses = diff._apply("huber", (diff,), (float(delta),))
    if weight is None:
        return _reduce(losses, reduction)
    return _reduce(losses * _sample_weights(fn, x, weight, input_shape), reduction)


@autocast_op("kl_div")
def kl_div(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """``target * (log(target) - input)`` (``input`` holds log-probabilities; a zero target
    contributes zero, a negative one NaN: torch's ``xlogy(target, target) - target * input``);
    ``reduction="batchmean"`` divides the sum by the batch size."""
    fn = "kl_div"
    log_target = check_bool(fn, log_target, "log_target")
    for name, value in (("input", input), ("target", target)):
        if isinstance(value, Tensor) and value.dtype not in FLOAT_DTYPES and not value.is_complex():
            raise MixedDTypeError(  # (torch's RuntimeError, "Integral inputs not supported")
                f"{fn}: integral inputs are not supported, got {name} {value.dtype} "
                f"{shape_text(value.shape)}"
            )
    x, y = _float_pair(fn, input, target, "target")
    _broadcastable(fn, x, y)
    batchmean = reduction == "batchmean"
    reduction = _reduction(fn, "sum" if batchmean else reduction, size_average, reduce)
    if log_target:
        losses = y.exp() * (y - x)
    else:
        # torch's xlogy(target, target) - target * input: 0 for a zero target, NaN for a
        # negative one. Written -(y x) + xlogy(y, y) (the same values) so that the engine,
        # running the shallower node first, sums the target's gradient as torch's does: the
        # xlogy's two terms, then the product's (the other order rounded otherwise in 28%)
        losses = -(y * x) + y.xlogy(y)
    out = _reduce(losses, reduction)
    if batchmean and reduction == "sum":
        return out / (x.shape[0] if x.ndim else 1)
    return out


@autocast_op("poisson_nll_loss")
def poisson_nll_loss(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    log_input: bool = True,
    full: bool = False,
    size_average: bool | None = None,
    eps: float = 1e-8,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """The Poisson negative log-likelihood: ``exp(x) - y x`` for log-rates ``x``
    (``log_input``), else ``x - y log(x + eps)``; ``full`` adds Stirling's approximation
    ``y log y - y + log(2 pi y) / 2`` where ``y > 1``, as torch's."""
    fn = "poisson_nll_loss"
    reduction = _reduction(fn, reduction, size_average, reduce)
    x, y = _float_pair(fn, input, target, "target")
    _broadcastable(fn, x, y)
    if log_input:
        losses = x.exp() - y * x
    else:
        losses = x - y * (x + eps).log()
    if full:
        stirling = y * y.log() - y + (y * (2 * math.pi)).log() * 0.5
        losses = losses + stirling.mask_fill(y.less_equal(1.0), 0.0)
    return _reduce(losses, reduction)


def gaussian_nll_loss(
    input: Tensor,  # noqa: A002 (torch's name)
    target: Tensor,
    var: Tensor | float,
    full: bool = False,
    eps: float = 1e-6,
    reduction: str = "mean",
) -> Tensor:
    """``(log(max(var, eps)) + (x - y)**2 / max(var, eps)) / 2`` (plus ``log(2 pi) / 2`` with
    ``full``). ``var`` has the input's shape, or one dimension of size 1 (or missing last),
    or is a float, as torch allows; the clamp at ``eps`` is not differentiated, as in torch.
    A negative variance is an error (read on the host, as torch reads it)."""
    fn = "gaussian_nll_loss"
    reduction = _reduction(fn, reduction, None, None)
    x, y = _float_pair(fn, input, target, "target")
    if isinstance(var, numbers.Real) and not isinstance(var, bool):
        if var < 0:
            raise InvalidArgumentError(f"{fn}: var has negative entry/entries ({var})")
        var = x.new_full(x.shape, float(var))
    variance = _as_tensor(fn, x, var, "var").cast(x.dtype)
    if bool(variance.less(0.0).any().item()):
        raise InvalidArgumentError(f"{fn}: var has negative entry/entries")
    if variance.shape != x.shape:
        if variance.shape == x.shape[:-1]:
            variance = variance.unsqueeze_dim(-1)
        elif not (
            variance.ndim == x.ndim
            and sum(v for s, v in zip(x.shape, variance.shape) if s != v) == 1
        ):
            raise ShapeError(
                f"{fn}: var is of incorrect size {shape_text(variance.shape)} for input "
                f"{shape_text(x.shape)} (the input's shape, or one dimension of size 1)"
            )
    variance = _clamped_min(variance, eps)
    losses = (variance.log() + (x - y).square() / variance) * 0.5
    if full:
        losses = losses + 0.5 * math.log(2 * math.pi)
    return _reduce(losses, reduction)
