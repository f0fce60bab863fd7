"""Activation functions: thin, differentiable wrappers over tensor methods."""

from __future__ import annotations

import math
from typing import Any

from ...errors import (
    InvalidArgumentError,
)
from ...tensor import Tensor
from ._common import (
    _float_input,
)


def relu(x: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)``; the gradient at 0 is 0. ``inplace`` is accepted; the result is a new
    tensor (as for the modules' ``inplace``: API.md section 8)."""
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``, Phi the standard normal CDF; with ``approximate="tanh"``, PyTorch's
    ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``."""
    if approximate == "none":
        return x.gelu()
    if approximate != "tanh":
        raise InvalidArgumentError(
            f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}"
        )
    x = _float_input("gelu", x)
    inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
    return x * 0.5 * (inner.tanh() + 1.0)


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def log_sigmoid(x: Tensor) -> Tensor:
    """``log(sigmoid(x))``, computed without overflow."""
    return x.log_sigmoid()


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)``."""
    return x.silu()


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, computed without overflow; where ``beta * x`` is
    above ``threshold``, ``x`` itself (torch's linear tail, gradient 1)."""
    out = x.softplus(beta)
    if threshold is None:
        return out
    return out.mask_where((x * beta).greater(threshold), x)


def leaky_relu(x: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return x.leaky_relu(negative_slope)


def softmax(x: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, shifted by the max for stability; ``dtype``
    casts first (torch's arguments)."""
    if dtype is not None:
        x = x.cast(dtype)
    return x.softmax(_softmax_dim("softmax", x, dim))


def log_softmax(
    x: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None
) -> Tensor:
    if dtype is not None:
        x = x.cast(dtype)
    return x.log_softmax(_softmax_dim("log_softmax", x, dim))


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)``."""
    return x.clamp(0.0, 6.0) if x.is_float() else x.clamp(0, 6)


def hardtanh(
    x: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """``x`` clamped to ``[min_val, max_val]``."""
    return x.clamp(min_val, max_val)


def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    """``relu6(x + 3) / 6`` (torch's gradient: 1/6 strictly inside ``(-3, 3)``)."""
    x = _float_input("hardsigmoid", x)
    return (x + 3.0).clamp(0.0, 6.0) / 6.0


def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6``, with torch's gradient (``x / 3 + 0.5`` inside ``[-3, 3]``)."""
    x = _float_input("hardswish", x)
    inside = x.greater(-3.0).logical_and(x.less(3.0))
    above = x.greater_equal(3.0)
    return (x * (x + 3.0) / 6.0).mask_fill(~inside, 0.0).mask_where(above, x)


def elu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""
    x = _float_input("elu", x)
    return x.mask_where(x.less_equal(0.0), x.expm1() * alpha)


def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    x = _float_input("celu", x)
    return x.mask_where(x.less_equal(0.0), (x / alpha).expm1() * alpha)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x: Tensor, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with torch's constants."""
    return elu(x, _SELU_ALPHA) * _SELU_SCALE


def prelu(x: Tensor, weight: Tensor) -> Tensor:
    """``x`` where positive, ``weight * x`` elsewhere; ``weight`` has one value, or one per
    channel (dimension 1)."""
    x = _float_input("prelu", x)
    if weight.numel() != 1 and (x.ndim < 2 or weight.numel() != x.shape[1]):
        raise InvalidArgumentError(
            f"prelu: weight has {weight.numel()} values; expected 1 or one per channel "
            f"({x.shape[1] if x.ndim > 1 else 1})"
        )
    slope = (
        weight.reshape(())
        if weight.numel() == 1
        else weight.reshape((x.shape[1],) + (1,) * (x.ndim - 2))
    )
    return x.mask_where(x.less(0.0), x * slope)


def mish(x: Tensor, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``."""
    return x * x.softplus().tanh()


def softsign(x: Tensor) -> Tensor:
    return x / (x.abs() + 1.0)


def tanhshrink(x: Tensor) -> Tensor:
    return x - x.tanh()


def threshold(x: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where above ``threshold``, else ``value``."""
    return x.mask_fill(x.less_equal(threshold), value)


def glu(x: Tensor, dim: int = -1) -> Tensor:
    """``a * sigmoid(b)``, ``a`` and ``b`` the halves of ``x`` along ``dim``."""
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


def softmin(x: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return softmax(-x, dim, dtype=dtype)


def logsigmoid(x: Tensor) -> Tensor:
    """torch's name for :func:`log_sigmoid`."""
    return x.log_sigmoid()


def _softmax_dim(fn: str, x: Tensor, dim: int | None) -> int:
    """torch's implicit dim (deprecated there): 0 for 0-, 1- and 3-d inputs, else 1."""
    if dim is not None:
        return dim
    return 0 if x.ndim in (0, 1, 3) else 1
