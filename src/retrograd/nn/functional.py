"""Neural-network functions (PyTorch's signatures and argument meanings)."""

from __future__ import annotations

from ..tensor import Tensor

__all__ = [
    "gelu",
    "leaky_relu",
    "log_sigmoid",
    "log_softmax",
    "relu",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "tanh",
]


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; the gradient at 0 is 0."""
    return x.relu()


def gelu(x: Tensor) -> Tensor:
    """``x * Phi(x)``, Phi the standard normal CDF (exact, not the tanh approximation)."""
    return x.gelu()


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
