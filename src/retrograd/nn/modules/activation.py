"""Activation modules: ``ReLU``, ``GELU``, ``SiLU``, ``Tanh``, ``Sigmoid`` (PyTorch's
constructor arguments; ``inplace=True`` is accepted and nothing is modified in place)."""

from __future__ import annotations

from ...errors import InvalidArgumentError
from ...tensor import Tensor
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from .module import Module

__all__ = ["GELU", "ReLU", "SiLU", "Sigmoid", "Tanh"]


class ReLU(Module):
    """``max(x, 0)`` elementwise."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    """``x * Phi(x)`` (``approximate="none"``, exact) or PyTorch's tanh approximation
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (``approximate="tanh"``).

    >>> round(GELU("tanh")(rg.tensor([1.0])).item(), 6)
    0.841192
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise InvalidArgumentError(
                f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}"
            )
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """``x * sigmoid(x)`` elementwise."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Tanh(Module):
    """``tanh(x)`` elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)
