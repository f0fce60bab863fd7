"""torch's ``torch.nn.quantized`` (``torch.ao.nn.quantized``) names that a float model uses
before any conversion: :class:`FloatFunctional`, the module a quantization-ready model calls
for its additions, products and concatenations so that a later conversion can observe them.
retrograd has no quantized kernels and no conversion: these compute in floating point, as
torch's do until ``convert``.

>>> import retrograd as rg
>>> FloatFunctional().add(rg.tensor(3.0), rg.tensor(4.0)).item()
7.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..tensor import cat
from . import functional as F  # noqa: N812 (PyTorch's idiom)
from .modules import Identity, Module

__all__ = ["FloatFunctional"]


class FloatFunctional(Module):
    """torch's ``FloatFunctional``: ``add``, ``add_scalar``, ``mul``, ``mul_scalar``,
    ``cat``, ``add_relu`` and ``matmul`` as methods, each result passed through
    ``activation_post_process`` (an ``Identity``; the ``*_scalar`` forms skip it, as torch's).
    Calling the module itself is refused (a ``RuntimeError``), as torch refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.activation_post_process = Identity()

    def forward(self, x: Any) -> Any:
        # torch's RuntimeError (NotImplementedError is one): no forward, by design
        raise NotImplementedError(
            "FloatFunctional is not intended to use the 'forward'; call one of its "
            "operations (add, add_scalar, mul, mul_scalar, cat, add_relu, matmul), as in torch"
        )

    def add(self, x: Any, y: Any) -> Any:
        return self.activation_post_process(x + y)

    def add_scalar(self, x: Any, y: float) -> Any:
        return x + y

    def mul(self, x: Any, y: Any) -> Any:
        return self.activation_post_process(x * y)

    def mul_scalar(self, x: Any, y: float) -> Any:
        return x * y

    def cat(self, x: Sequence[Any], dim: int = 0) -> Any:
        return self.activation_post_process(cat(list(x), dim))

    def add_relu(self, x: Any, y: Any) -> Any:
        return self.activation_post_process(F.relu(x + y))

    def matmul(self, x: Any, y: Any) -> Any:
        return self.activation_post_process(x @ y)
