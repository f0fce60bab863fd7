"""torch's ``torch.nn.modules.normalization`` path: ``LayerNorm``, ``GroupNorm``, ``RMSNorm``
(their home is :mod:`.norm`), and the local response normalizations ``LocalResponseNorm``
and ``CrossMapLRN2d``."""

from __future__ import annotations

from ...tensor import Tensor
from .. import functional as F  # noqa: N812 (PyTorch's idiom)
from ..functional.normalization import _cross_map_lrn2d
from .module import Module
from .norm import GroupNorm, LayerNorm, RMSNorm

__all__ = ["CrossMapLRN2d", "GroupNorm", "LayerNorm", "LocalResponseNorm", "RMSNorm"]


class LocalResponseNorm(Module):
    """``F.local_response_norm(x, size, alpha, beta, k)`` (AlexNet's normalization).

    >>> LocalResponseNorm(2)(rg.ones((1, 3, 4))).shape
    retrograd.Size([1, 3, 4])
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input: Tensor) -> Tensor:
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class CrossMapLRN2d(Module):
    """torch's legacy cross-map LRN of ``[N, C, H, W]`` inputs: its values (its channel
    windows as its running sum builds them, which differ from :class:`LocalResponseNorm`'s),
    differentiated exactly. Its own class, as torch's (no ``LocalResponseNorm``)."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    extra_repr = LocalResponseNorm.extra_repr

    def forward(self, input: Tensor) -> Tensor:
        return _cross_map_lrn2d(input, self.size, self.alpha, self.beta, self.k)
