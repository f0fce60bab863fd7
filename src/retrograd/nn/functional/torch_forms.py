"""torch's top-level forms of functional operations (``torch.conv2d``, ``torch.pdist``,
``torch.cosine_similarity``, ``torch.layer_norm``, ``torch.dropout``...), which real code calls
as often as the ``torch.nn.functional`` ones: the same functions where torch's signatures agree
(:data:`SAME_AS_FUNCTIONAL`), and thin forms where they differ (``torch.dropout(input, p,
train)``, ``torch.embedding(weight, indices)``, the losses' ATen forms whose ``reduction`` is
an int: 0 none, 1 mean, 2 sum)."""

from __future__ import annotations

import numbers
from typing import Any

from ...errors import InvalidArgumentError, ShapeError, guard, guard_namespace, shape_text
from ...tensor import Tensor
from ...tensor.internal import wrap
from . import alpha_dropout as _alpha_dropout
from . import dropout as _dropout
from . import embedding as _embedding
from . import feature_alpha_dropout as _feature_alpha_dropout

#: the functional names torch also exports at top level with the same leading arguments
SAME_AS_FUNCTIONAL = (
    "adaptive_avg_pool1d",
    "avg_pool1d",
    "bilinear",
    "celu",
    "channel_shuffle",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cosine_similarity",
    "group_norm",
    "hardshrink",
    "layer_norm",
    "max_pool1d",
    "max_pool1d_with_indices",
    "max_pool2d",
    "max_pool3d",
    "pairwise_distance",
    "pdist",
    "pixel_shuffle",
    "pixel_unshuffle",
    "prelu",
    "rms_norm",
    "rrelu_",
    "selu",
    "selu_",
    "celu_",
    "threshold",
    "threshold_",
)


def dropout(input: Any, p: float, train: bool) -> Any:  # noqa: A002 (torch's names)
    """``torch.dropout(input, p, train)``: :func:`~retrograd.nn.functional.dropout`."""
    return _dropout(input, p, train)


def alpha_dropout(input: Any, p: float, train: bool) -> Any:  # noqa: A002
    """``torch.alpha_dropout(input, p, train)``."""
    return _alpha_dropout(input, p, train)


def feature_alpha_dropout(input: Any, p: float, train: bool) -> Any:  # noqa: A002
    """``torch.feature_alpha_dropout(input, p, train)``."""
    return _feature_alpha_dropout(input, p, train)


def embedding(
    weight: Any,
    indices: Any,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Any:
    """``torch.embedding(weight, indices)``: the weight first, and ``padding_idx=-1`` for none
    (the ATen form the functional one calls)."""
    return _embedding(
        indices,
        weight,
        None if padding_idx == -1 else padding_idx,
        scale_grad_by_freq=scale_grad_by_freq,
        sparse=sparse,
    )


def _tensor_hardshrink(self: Tensor, lambd: float = 0.5) -> Tensor:
    """``nn.functional.hardshrink(self, lambd)``."""
    return _functional().hardshrink(self, lambd)


def _tensor_prelu(self: Tensor, weight: Tensor) -> Tensor:
    """``nn.functional.prelu(self, weight)``."""
    return _functional().prelu(self, weight)


_tensor_hardshrink.__name__ = _tensor_hardshrink.__qualname__ = "hardshrink"
_tensor_prelu.__name__ = _tensor_prelu.__qualname__ = "prelu"
# torch's Tensor methods over functional ops, installed here, above the tensor layer, and
# guarded as the Tensor's own methods are
Tensor.hardshrink = guard("hardshrink", _tensor_hardshrink, Tensor, "Tensor.hardshrink")
Tensor.prelu = guard("prelu", _tensor_prelu, Tensor, "Tensor.prelu")


#: ATen's reduction enum (``at::Reduction``)
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction(op: str, reduction: Any) -> str:
    if isinstance(reduction, bool) or reduction not in _REDUCTIONS:
        raise InvalidArgumentError(
            f"{op}: reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction!r}"
        )
    return _REDUCTIONS[reduction]


def _functional() -> Any:
    from ... import nn

    return nn.functional


def batch_norm(
    input: Any,  # noqa: A002 (torch's names)
    weight: Any,
    bias: Any,
    running_mean: Any,
    running_var: Any,
    training: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
) -> Any:
    """``torch.batch_norm``: ATen's order (weight and bias before the running statistics)."""
    return _functional().batch_norm(
        input, running_mean, running_var, weight, bias, training, momentum, eps
    )


def instance_norm(
    input: Any,  # noqa: A002 (torch's names)
    weight: Any,
    bias: Any,
    running_mean: Any,
    running_var: Any,
    use_input_stats: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
) -> Any:
    """``torch.instance_norm``: ATen's order (weight and bias before the running statistics)."""
    return _functional().instance_norm(
        input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps
    )


def binary_cross_entropy_with_logits(
    input: Any,  # noqa: A002 (torch's names)
    target: Any,
    weight: Any = None,
    pos_weight: Any = None,
    reduction: int = 1,
) -> Any:
    op = "binary_cross_entropy_with_logits"
    return _functional().binary_cross_entropy_with_logits(
        input, target, weight, reduction=_reduction(op, reduction), pos_weight=pos_weight
    )


def kl_div(input: Any, target: Any, reduction: int = 1, *, log_target: bool = False) -> Any:  # noqa: A002
    return _functional().kl_div(
        input, target, reduction=_reduction("kl_div", reduction), log_target=log_target
    )


def poisson_nll_loss(
    input: Any,  # noqa: A002 (torch's names)
    target: Any,
    log_input: bool,
    full: bool,
    eps: float,
    reduction: int,
) -> Any:
    return _functional().poisson_nll_loss(
        input,
        target,
        log_input=log_input,
        full=full,
        eps=eps,
        reduction=_reduction("poisson_nll_loss", reduction),
    )


def ctc_loss(
    log_probs: Any,
    targets: Any,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: int = 1,
    zero_infinity: bool = False,
) -> Any:
    return _functional().ctc_loss(
        log_probs,
        targets,
        input_lengths,
        target_lengths,
        blank=blank,
        reduction=_reduction("ctc_loss", reduction),
        zero_infinity=zero_infinity,
    )


def triplet_margin_loss(
    anchor: Any,
    positive: Any,
    negative: Any,
    margin: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-06,
    swap: bool = False,
    reduction: int = 1,
) -> Any:
    return _functional().triplet_margin_loss(
        anchor,
        positive,
        negative,
        margin=margin,
        p=p,
        eps=eps,
        swap=swap,
        reduction=_reduction("triplet_margin_loss", reduction),
    )


def margin_ranking_loss(
    input1: Any, input2: Any, target: Any, margin: float = 0.0, reduction: int = 1
) -> Any:
    return _functional().margin_ranking_loss(
        input1,
        input2,
        target,
        margin=margin,
        reduction=_reduction("margin_ranking_loss", reduction),
    )


def hinge_embedding_loss(
    input: Any,  # noqa: A002 (torch's names)
    target: Any,
    margin: float = 1.0,
    reduction: int = 1,
) -> Any:
    return _functional().hinge_embedding_loss(
        input, target, margin=margin, reduction=_reduction("hinge_embedding_loss", reduction)
    )


def cosine_embedding_loss(
    input1: Any, input2: Any, target: Any, margin: float = 0.0, reduction: int = 1
) -> Any:
    return _functional().cosine_embedding_loss(
        input1,
        input2,
        target,
        margin=margin,
        reduction=_reduction("cosine_embedding_loss", reduction),
    )


def constant_pad_nd(input: Any, pad: Any, value: Any = 0) -> Any:  # noqa: A002
    """``torch.constant_pad_nd``: ``nn.functional.pad`` in ``"constant"`` mode."""
    return _functional().pad(input, list(pad), mode="constant", value=value)


def convolution(
    input: Any,  # noqa: A002 (torch's names)
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
) -> Any:
    """``torch.convolution``: the convolution (or transposed one) of as many spatial
    dimensions as ``weight`` has beyond its first two."""
    spatial = weight.ndim - 2
    if spatial not in (1, 2, 3):
        raise ShapeError(
            f"convolution: expected a weight of 3 to 5 dimensions, got {shape_text(weight.shape)}"
        )
    functional = _functional()
    if transposed:
        transpose = getattr(functional, f"conv_transpose{spatial}d")
        return transpose(input, weight, bias, stride, padding, output_padding, groups, dilation)
    return getattr(functional, f"conv{spatial}d")(
        input, weight, bias, stride, padding, dilation, groups
    )


_INTERPOLATIONS = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}


def grid_sampler(
    input: Any,  # noqa: A002 (torch's names)
    grid: Any,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
) -> Any:
    """``torch.grid_sampler``: ``grid_sample`` with ATen's int modes (interpolation 0
    bilinear, 1 nearest, 2 bicubic; padding 0 zeros, 1 border, 2 reflection)."""
    if interpolation_mode not in _INTERPOLATIONS or isinstance(interpolation_mode, bool):
        raise InvalidArgumentError(
            f"grid_sampler: interpolation_mode must be 0, 1 or 2, got {interpolation_mode!r}"
        )
    if padding_mode not in _PADDINGS or isinstance(padding_mode, bool):
        raise InvalidArgumentError(
            f"grid_sampler: padding_mode must be 0, 1 or 2, got {padding_mode!r}"
        )
    return _functional().grid_sample(
        input,
        grid,
        mode=_INTERPOLATIONS[interpolation_mode],
        padding_mode=_PADDINGS[padding_mode],
        align_corners=bool(align_corners),
    )


def rrelu(
    input: Any,  # noqa: A002 (torch's names)
    lower: float = 0.125,
    upper: float = 1.0 / 3.0,
    training: bool = False,
    generator: Any = None,
) -> Any:
    """``torch.rrelu``: its fifth argument is a generator (the functional one's is
    ``inplace``); draws come from the global stream."""
    if generator is not None:
        raise InvalidArgumentError(
            "rrelu: a generator is not taken here; its slopes are drawn from the stream "
            "rg.manual_seed seeds"
        )
    return _functional().rrelu(input, lower, upper, training)


def _in_place(input: Any, out: Any) -> Any:  # noqa: A002
    return input if out is input else input.copy_(out)


def dropout_(input: Any, p: float, train: bool) -> Any:  # noqa: A002
    """``torch.dropout_``: :func:`dropout` written into ``input``."""
    return _in_place(input, _dropout(input, p, train))


def alpha_dropout_(input: Any, p: float, train: bool) -> Any:  # noqa: A002
    return _in_place(input, _alpha_dropout(input, p, train))


def feature_alpha_dropout_(input: Any, p: float, train: bool) -> Any:  # noqa: A002
    return _in_place(input, _feature_alpha_dropout(input, p, train))


def feature_dropout(input: Any, p: float, train: bool) -> Any:  # noqa: A002
    """``torch.feature_dropout``: whole slices ``input[n, c]`` of an ``[N, C, *]`` input
    zeroed with probability ``p``, the rest scaled by ``1 / (1 - p)``."""
    op = "feature_dropout"
    if not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"{op}: probability p must be between 0 and 1, got {p!r}")
    if input.ndim < 2:
        raise ShapeError(
            f"{op}: feature dropout needs at least 2 dimensions [N, C, *], got "
            f"{shape_text(input.shape)}"
        )
    if not train or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    mask_shape = input.shape[:2] + (1,) * (input.ndim - 2)
    keep = wrap(input, input._backend.bernoulli(mask_shape, 1.0 - float(p), input.device))
    return input * (keep.cast(input.dtype) * (1.0 / (1.0 - float(p))))


def feature_dropout_(input: Any, p: float, train: bool) -> Any:  # noqa: A002
    return _in_place(input, feature_dropout(input, p, train))


def norm_except_dim(v: Any, pow: float = 2, dim: int = 0) -> Any:  # noqa: A002 (torch's name)
    """``torch.norm_except_dim`` (weight norm's): the ``pow``-norm over every dimension but
    ``dim``, kept as size 1 (``dim=-1``: the norm of the whole tensor, 0-d)."""
    if dim == -1:
        return v.norm(pow)
    d = dim % v.ndim if v.ndim else 0
    others = tuple(i for i in range(v.ndim) if i != d)
    return v.norm(pow, dim=others, keepdim=True) if others else v.abs()


__all__ = [
    "alpha_dropout",
    "alpha_dropout_",
    "batch_norm",
    "binary_cross_entropy_with_logits",
    "constant_pad_nd",
    "convolution",
    "cosine_embedding_loss",
    "ctc_loss",
    "dropout",
    "dropout_",
    "embedding",
    "feature_alpha_dropout",
    "feature_alpha_dropout_",
    "feature_dropout",
    "feature_dropout_",
    "grid_sampler",
    "hinge_embedding_loss",
    "instance_norm",
    "kl_div",
    "margin_ranking_loss",
    "norm_except_dim",
    "poisson_nll_loss",
    "rrelu",
    "triplet_margin_loss",
]

# torch's top-level forms answer arguments no check foresaw with an error of the hierarchy
# naming the function, as every public function does (errors.guard)
guard_namespace(globals(), __all__)
