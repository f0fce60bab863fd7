"""Activation functions: thin, differentiable wrappers over tensor methods."""

from __future__ import annotations

import math

from ...errors import (
    InvalidArgumentError,
)
from ...tensor import Tensor
from ._common import (
    _float_input,
)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; the gradient at 0 is 0."""
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


def softplus(x: Tensor, beta: float = 1.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, computed without overflow."""
    return x.softplus(beta)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return x.leaky_relu(negative_slope)


def softmax(x: Tensor, dim: int) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, shifted by the max for stability."""
    return x.softmax(dim)


def log_softmax(x: Tensor, dim: int) -> Tensor:
    return x.log_softmax(dim)


def tanh(x: Tensor) -> Tensor:
    return x.tanh()
