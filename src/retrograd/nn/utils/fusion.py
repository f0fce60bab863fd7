"""torch's ``torch.nn.utils.fusion``: a convolution or linear layer followed by batch norm in
eval mode folded into one layer (``fuse_conv_bn_eval``, ``fuse_linear_bn_eval``) and the
weight arithmetic itself (``fuse_conv_bn_weights``, ``fuse_linear_bn_weights``), torch's
formulas operation for operation."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgumentError, ShapeError
from ...tensor import Tensor, ones_like, zeros_like
from ..parameter import Parameter

__all__ = [
    "fuse_conv_bn_eval",
    "fuse_conv_bn_weights",
    "fuse_linear_bn_eval",
    "fuse_linear_bn_weights",
]


def _defaults(running_mean: Tensor, bias: Any, bn_weight: Any, bn_bias: Any) -> tuple:
    bias = zeros_like(running_mean) if bias is None else bias
    bn_weight = ones_like(running_mean) if bn_weight is None else bn_weight
    bn_bias = zeros_like(running_mean) if bn_bias is None else bn_bias
    return bias, bn_weight, bn_bias


def fuse_conv_bn_weights(conv_w: Tensor, conv_b: Tensor | None, bn_rm: Tensor, bn_rv: Tensor,
                         bn_eps: float, bn_w: Tensor | None, bn_b: Tensor | None,
                         transpose: bool = False) -> tuple[Parameter, Parameter]:  # fmt: skip
    """The weight and bias of a convolution that computes ``bn(conv(x))`` for a batch norm in
    eval mode (``transpose``: a transposed convolution, whose output channels are dim 1).

    >>> import retrograd as rg
    >>> w, b = fuse_conv_bn_weights(rg.ones((2, 1, 1)), None, rg.zeros(2), rg.ones(2), 0.0,
    ...                             rg.tensor([2.0, 3.0]), None)
    >>> w.reshape(-1).tolist(), b.tolist()
    ([2.0, 3.0], [0.0, 0.0])
    """
    weight_dtype = conv_w.dtype
    bias_dtype = conv_b.dtype if conv_b is not None else weight_dtype
    conv_b, bn_w, bn_b = _defaults(bn_rm, conv_b, bn_w, bn_b)
    bn_var_rsqrt = (bn_rv + bn_eps).rsqrt()
    shape = [1, -1] if transpose else [-1, 1]
    shape += [1] * (conv_w.ndim - 2)
    fused_w = (conv_w * (bn_w * bn_var_rsqrt).reshape(shape)).cast(weight_dtype)
    fused_b = ((conv_b - bn_rm) * bn_var_rsqrt * bn_w + bn_b).cast(bias_dtype)
    return (
        Parameter(fused_w.detach(), requires_grad=conv_w.requires_grad),
        Parameter(fused_b.detach(), requires_grad=conv_b.requires_grad),
    )


def fuse_linear_bn_weights(linear_w: Tensor, linear_b: Tensor | None, bn_rm: Tensor,
                           bn_rv: Tensor, bn_eps: float, bn_w: Tensor | None,
                           bn_b: Tensor | None) -> tuple[Parameter, Parameter]:  # fmt: skip
    """The weight and bias of a linear layer that computes ``bn(linear(x))`` for a batch norm
    in eval mode."""
    linear_b, bn_w, bn_b = _defaults(bn_rm, linear_b, bn_w, bn_b)
    bn_scale = bn_w * (bn_rv + bn_eps).rsqrt()
    fused_w = linear_w * bn_scale.unsqueeze(-1)
    fused_b = (linear_b - bn_rm) * bn_scale + bn_b
    return (
        Parameter(fused_w.detach(), requires_grad=linear_w.requires_grad),
        Parameter(fused_b.detach(), requires_grad=linear_b.requires_grad),
    )


def _check_eval(op: str, layer: Any, bn: Any) -> None:
    if layer.training or bn.training:
        raise InvalidArgumentError(f"{op}: Fusion only for eval! (call .eval() on both modules)")
    if bn.running_mean is None or bn.running_var is None:
        raise InvalidArgumentError(
            f"{op}: the batch norm has no running statistics (track_running_stats=False)"
        )


def fuse_conv_bn_eval(conv: Any, bn: Any, transpose: bool = False) -> Any:
    """A copy of ``conv`` computing ``bn(conv(x))`` (both in eval mode)."""
    _check_eval("fuse_conv_bn_eval", conv, bn)
    fused = conv.replicate()
    fused.weight, fused.bias = fuse_conv_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias,
        transpose,
    )  # fmt: skip
    return fused


def fuse_linear_bn_eval(linear: Any, bn: Any) -> Any:
    """A copy of ``linear`` computing ``bn(linear(x))`` (both in eval mode)."""
    _check_eval("fuse_linear_bn_eval", linear, bn)
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise ShapeError(
            "fuse_linear_bn_eval: to fuse, linear.out_features must equal bn.num_features or "
            f"bn.num_features must be 1, got {linear.out_features} and {bn.num_features}"
        )
    fused = linear.replicate()
    fused.weight, fused.bias = fuse_linear_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias
    )
    return fused
