"""torch's top-level forms of functional operations (``torch.conv2d``, ``torch.pdist``,
``torch.cosine_similarity``, ``torch.layer_norm``, ``torch.dropout``...), which real code calls
as often as the ``torch.nn.functional`` ones: the same functions where torch's signatures agree
(:data:`SAME_AS_FUNCTIONAL`), and thin forms where they differ (``torch.dropout(input, p,
train)``, ``torch.embedding(weight, indices)``, the losses' ATen forms whose ``reduction`` is
an int: 0 none, 1 mean, 2 sum)."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ...errors import (
    DTypeError,
    InvalidArgumentError,
    KernelArgumentError,
    MixedDTypeError,
    ShapeError,
    SizeMismatchError,
    guard,
    guard_namespace,
    shape_text,
)
from ...tensor import Tensor, tensor
from ...tensor.autocasting import autocast_op
from ...tensor.internal import normalize_dim, result_dtype, wrap
from . import alpha_dropout as _alpha_dropout
from . import dropout as _dropout
from . import embedding as _embedding
from . import feature_alpha_dropout as _feature_alpha_dropout
from . import group_norm as _group_norm
from . import layer_norm as _layer_norm

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
    "hardshrink",
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


def layer_norm(
    input: Any,  # noqa: A002 (torch's names)
    normalized_shape: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    cudnn_enable: bool = True,
) -> Any:
    """``torch.layer_norm``: :func:`~retrograd.nn.functional.layer_norm`; ``cudnn_enable``
    (torch's choice of kernel on CUDA) changes nothing in the values, here as there."""
    return _layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(
    input: Any,  # noqa: A002 (torch's names)
    num_groups: int,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    cudnn_enabled: bool = True,
) -> Any:
    """``torch.group_norm``: :func:`~retrograd.nn.functional.group_norm`; ``cudnn_enabled``
    (torch's choice of kernel on CUDA) changes nothing in the values."""
    return _group_norm(input, num_groups, weight, bias, eps)


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


#: ATen's ``EmbeddingBagMode``
_BAG_MODES = {0: "sum", 1: "mean", 2: "max"}
#: the dtypes whose contiguous ``sum`` bags take torch's CPU fast path, which skips offset2bag
_FAST_SUM_DTYPES = ("float32", "float16", "bfloat16")


def embedding_bag(
    weight: Any,
    indices: Any,
    offsets: Any,
    scale_grad_by_freq: bool = False,
    mode: int = 0,
    sparse: bool = False,
    per_sample_weights: Any = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``torch.embedding_bag(weight, indices, offsets, ...)``, the ATen form the functional
    one calls: ``mode`` an int (0 sum, 1 mean, 2 max), a negative ``padding_idx`` counted
    from the end (``None``: no padding), and four results as torch's CPU kernel gives them:
    the bags (:func:`~retrograd.nn.functional.embedding_bag`, with its gradients), each
    index's bag (``offset2bag``; empty on the ``sum`` path that skips it: float32, float16 or
    bfloat16 weights with unit stride along the rows and no padding), each bag's size
    (padding left out; zeros for ``sum``), and for ``max`` the row that gave each maximum
    (for ``sum`` and ``mean`` a copy of the sizes)."""
    op = "embedding_bag"
    if isinstance(mode, bool) or mode not in _BAG_MODES:
        raise InvalidArgumentError(f"{op}: mode must be 0 (sum), 1 (mean) or 2 (max), got {mode!r}")
    for name, value in (("indices", indices), ("offsets", offsets)):
        if not isinstance(value, Tensor) or value.ndim != 1:
            found = shape_text(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise ShapeError(
                f"{op}: {name} must be a 1-d tensor in this form (2-d bags go through "
                f"nn.functional.embedding_bag), got {found}"
            )
    if not isinstance(weight, Tensor) or weight.ndim != 2:
        found = shape_text(weight.shape) if isinstance(weight, Tensor) else type(weight).__name__
        raise ShapeError(f"{op}: weight must be a 2-d tensor, got {found}")
    count = weight.shape[0]
    if padding_idx is not None:
        if isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral):
            raise InvalidArgumentError(
                f"{op}: padding_idx must be an int or None, got {padding_idx!r}"
            )
        if not -count <= padding_idx < count:
            raise KernelArgumentError(  # (torch's RuntimeError)
                f"{op}: padding_idx must be within the number of embeddings, {-count} through "
                f"{count - 1}, but got {padding_idx}"
            )
        padding_idx = int(padding_idx) % count
    if include_last_offset and offsets.shape[0] == 0:
        raise KernelArgumentError(  # (torch's RuntimeError)
            f"{op}: include_last_offset needs at least one offset, got none"
        )
    output = _functional().embedding_bag(
        indices, weight, offsets, None, 2.0, scale_grad_by_freq, _BAG_MODES[mode], sparse,
        per_sample_weights, include_last_offset, padding_idx,
    )  # fmt: skip
    index_dtype = result_dtype(indices.dtype, offsets.dtype)
    fast_sum = (
        mode == 0
        and padding_idx is None
        and weight.dtype in _FAST_SUM_DTYPES
        and weight.stride(1) == 1
        and (per_sample_weights is None or per_sample_weights.stride(0) == 1)
    )
    offset2bag, bag_size, max_indices = _bag_bookkeeping(
        weight, indices.numpy().astype(np.int64), offsets.numpy().astype(np.int64), mode,
        padding_idx, include_last_offset, fast_sum,
    )  # fmt: skip
    made = dict(dtype=index_dtype, backend=indices.backend, device=indices.device)
    return (
        output,
        tensor(offset2bag, **made),
        tensor(bag_size, **made),
        tensor(max_indices, **made),
    )


def _bag_bookkeeping(
    weight: Tensor,
    indices: np.ndarray,
    offsets: np.ndarray,
    mode: int,
    padding_idx: int | None,
    include_last_offset: bool,
    fast_sum: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch's CPU ``offset2bag``, ``bag_size`` and ``max_indices`` (EmbeddingBag.cpp), on
    the host: the offsets were checked by the bags' own computation."""
    n = indices.shape[0]
    bags = offsets.shape[0] - int(include_last_offset)
    starts = offsets[:bags]
    # make_offset2bag: a one at each bag's start, the first less one, a running sum (an
    # index past the last start belongs to the last bag, as torch's kernel reads it)
    marks = np.zeros(n + 1, np.int64)
    np.add.at(marks, starts, 1)
    marks[0] -= 1
    offset2bag = np.cumsum(marks)[:n]
    padded = indices == padding_idx if padding_idx is not None else np.zeros(n, bool)
    if mode == 0:
        # zeros, of the offsets' length without a gradient to take (forward-only kernel)
        bag_size = np.zeros(bags if weight.requires_grad else offsets.shape[0], np.int64)
        return (np.zeros(0, np.int64) if fast_sum else offset2bag), bag_size, bag_size.copy()
    bag_size = np.zeros(bags, np.int64)
    if bags:
        bag_size[:-1] = starts[1:] - starts[:-1]
        bag_size[-1] = n - starts[-1]
        bag_size -= np.bincount(offset2bag[padded], minlength=bags)[:bags]
    if mode == 1:
        return offset2bag, bag_size, bag_size.copy()
    return offset2bag, bag_size, _max_rows(weight, indices, offset2bag, ~padded, bags)


def _max_rows(
    weight: Tensor, indices: np.ndarray, offset2bag: np.ndarray, kept: np.ndarray, bags: int
) -> np.ndarray:
    """Per bag and column, the row whose value torch's max loop keeps: the bag's first
    entry, replaced only by a strictly larger one (a tie keeps the earlier row; a NaN first
    entry stays); 0 for an empty bag."""
    values = np.asarray(weight.detach().numpy())
    rows = np.zeros((bags, values.shape[1]), np.int64)
    positions = np.flatnonzero(kept)
    owner = offset2bag[positions]  # non-decreasing: offsets do not decrease
    rank = np.arange(positions.size) - np.searchsorted(owner, owner, side="left")
    best = np.zeros(rows.shape, values.dtype)
    for step in range(int(rank.max()) + 1 if rank.size else 0):
        chosen = rank == step
        bag, row = owner[chosen], indices[positions[chosen]]
        candidate = values[row]
        if step == 0:
            best[bag], rows[bag] = candidate, row[:, None]
            continue
        larger = candidate > best[bag]
        best[bag] = np.where(larger, candidate, best[bag])
        rows[bag] = np.where(larger, row[:, None], rows[bag])
    return rows


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


# torch's top-level loss functions (``torch.kl_div``, ``torch.hinge_embedding_loss``, ...) give
# every element's loss when ``reduction`` is left out: their schemas say ``reduction=1`` (mean),
# but torch 2.13's Python binding passes 0 (none), and code calling them gets that. So do these;
# ``nn.functional``'s forms keep their ``"mean"`` default.
def binary_cross_entropy_with_logits(
    input: Any,  # noqa: A002 (torch's names)
    target: Any,
    weight: Any = None,
    pos_weight: Any = None,
    reduction: int = 0,
) -> Any:
    op = "binary_cross_entropy_with_logits"
    return _functional().binary_cross_entropy_with_logits(
        input, target, weight, reduction=_reduction(op, reduction), pos_weight=pos_weight
    )


def kl_div(input: Any, target: Any, reduction: int = 0, *, log_target: bool = False) -> Any:  # noqa: A002
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
    reduction: int = 0,
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
    reduction: int = 0,
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
    input1: Any, input2: Any, target: Any, margin: float = 0.0, reduction: int = 0
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
    reduction: int = 0,
) -> Any:
    return _functional().hinge_embedding_loss(
        input, target, margin=margin, reduction=_reduction("hinge_embedding_loss", reduction)
    )


def cosine_embedding_loss(
    input1: Any, input2: Any, target: Any, margin: float = 0.0, reduction: int = 0
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


@autocast_op("conv_tbc")
def conv_tbc(input: Any, weight: Any, bias: Any, pad: int = 0) -> Any:  # noqa: A002
    """``torch.conv_tbc`` (fairseq's ``ConvTBC``): a 1-d convolution of a ``[time, batch,
    in_channels]`` input by a ``[kernel_width, in_channels, out_channels]`` weight and a
    ``[out_channels]`` bias (required), ``pad`` zero steps at each end of time: ``conv1d`` of
    the input as ``[batch, in_channels, time]`` by the weight as ``[out_channels, in_channels,
    kernel_width]``, the result as ``[time + 2 pad - kernel_width + 1, batch,
    out_channels]`` (empty where that is 0, as torch's)."""
    op = "conv_tbc"
    for name, value in (("input", input), ("weight", weight), ("bias", bias)):
        if not isinstance(value, Tensor):
            raise DTypeError(f"{op}: {name} must be a tensor, got {type(value).__name__}")
    shapes = (
        f"input {shape_text(input.shape)}, weight {shape_text(weight.shape)}, "
        f"bias {shape_text(bias.shape)}"
    )
    if input.ndim != 3:
        raise ShapeError(f"{op}: input must be 3-d [time, batch, in_channels]; {shapes}")
    if weight.ndim != 3:
        raise ShapeError(
            f"{op}: weight must be 3-d [kernel_width, in_channels, out_channels]; {shapes}"
        )
    if bias.ndim != 1:
        raise ShapeError(f"{op}: bias must be 1-d [out_channels]; {shapes}")
    if input.shape[2] != weight.shape[1]:
        raise SizeMismatchError(
            f"{op}: input's in_channels (dim 2) must equal weight's dim 1; {shapes}"
        )
    if bias.shape[0] != weight.shape[2]:
        raise SizeMismatchError(
            f"{op}: bias's size must equal weight's out_channels (dim 2); {shapes}"
        )
    if not (input.dtype == weight.dtype == bias.dtype):
        raise MixedDTypeError(
            f"{op}: input, weight and bias must have one dtype, got {input.dtype}, "
            f"{weight.dtype} and {bias.dtype}"
        )
    if isinstance(pad, bool) or not isinstance(pad, numbers.Integral):
        raise InvalidArgumentError(f"{op}: pad must be an int, got {pad!r}")
    length = input.shape[0] + 2 * int(pad) - weight.shape[0] + 1
    if length < 0 or pad < 0:
        raise SizeMismatchError(
            f"{op}: pad {pad} leaves an output of {length} time steps (pad must be "
            f"non-negative and time + 2 pad at least kernel_width); {shapes}"
        )
    if length == 0:  # an empty output, still of input's, weight's and bias's graphs
        return input[:0] @ weight[0] + bias
    out = _functional().conv1d(
        input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=int(pad)
    )
    return out.permute(2, 0, 1)


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
    if not train or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    if input.ndim < 2:  # (torch checks the rank only where it draws a mask)
        raise ShapeError(
            f"{op}: feature dropout needs at least 2 dimensions [N, C, *], got "
            f"{shape_text(input.shape)}"
        )
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
    # (out of range, or any dim of a 0-d tensor, is torch's IndexError: it computed here)
    d = normalize_dim("norm_except_dim", dim, v.ndim)
    others = tuple(i for i in range(v.ndim) if i != d)
    return v.norm(pow, dim=others, keepdim=True) if others else v.abs()


__all__ = [
    "alpha_dropout",
    "alpha_dropout_",
    "batch_norm",
    "binary_cross_entropy_with_logits",
    "constant_pad_nd",
    "conv_tbc",
    "convolution",
    "cosine_embedding_loss",
    "ctc_loss",
    "dropout",
    "dropout_",
    "embedding",
    "embedding_bag",
    "feature_alpha_dropout",
    "feature_alpha_dropout_",
    "feature_dropout",
    "feature_dropout_",
    "grid_sampler",
    "group_norm",
    "hinge_embedding_loss",
    "instance_norm",
    "kl_div",
    "layer_norm",
    "margin_ranking_loss",
    "norm_except_dim",
    "poisson_nll_loss",
    "rrelu",
    "triplet_margin_loss",
]

# torch's top-level forms answer arguments no check foresaw with an error of the hierarchy
# naming the function, as every public function does (errors.guard)
guard_namespace(globals(), __all__)
