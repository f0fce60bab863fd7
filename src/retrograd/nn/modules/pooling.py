"""Pooling and resizing layers: ``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d``,
``Upsample`` (PyTorch's arguments; a pooling ``stride`` defaults to ``kernel_size``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...tensor import Tensor
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from .module import Module

__all__ = ["AdaptiveAvgPool2d", "AvgPool2d", "MaxPool2d", "Upsample"]


class MaxPool2d(Module):
    """2-d max pooling; ``return_indices=True`` also returns the int64 argmax indices.

    >>> MaxPool2d(2)(rg.ones((1, 1, 4, 4))).shape
    (1, 1, 2, 2)
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x: Tensor) -> Any:
        pool = F.max_pool2d_with_indices if self.return_indices else F.max_pool2d
        return pool(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """2-d average pooling.

    >>> AvgPool2d(2)(rg.ones((1, 1, 4, 4))).shape
    (1, 1, 2, 2)
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(
            x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed ``output_size`` (an int, or a pair; ``None`` keeps a size).

    >>> AdaptiveAvgPool2d((1, 1))(rg.ones((2, 3, 5, 7))).shape
    (2, 3, 1, 1)
    """

    def __init__(self, output_size: int | Sequence[int | None]):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class Upsample(Module):
    """Resize to ``size`` or by ``scale_factor`` with ``mode`` (``F.interpolate``).

    >>> Upsample(scale_factor=2)(rg.ones((1, 1, 2, 3))).shape
    (1, 1, 4, 6)
    """

    def __init__(
        self,
        size: int | Sequence[int] | None = None,
        scale_factor: float | Sequence[float] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(
            x,
            self.size,
            self.scale_factor,
            self.mode,
            self.align_corners,
            self.recompute_scale_factor,
        )

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            return f"scale_factor={self.scale_factor}, mode={self.mode!r}"
        return f"size={self.size}, mode={self.mode!r}"
