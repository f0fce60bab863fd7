"""Instance normalization: ``InstanceNorm1d/2d/3d`` with PyTorch's signatures (no affine
parameters and no running statistics by default), over ``F.instance_norm``."""

from __future__ import annotations

from typing import Any

from ...errors import ShapeError
from ...tensor import Tensor
from .. import functional as F  # noqa: N812 (PyTorch's idiom)
from .norm import _NormBase

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]


class _InstanceNorm(_NormBase):
    """torch's ``_InstanceNorm``: a :class:`~.norm._NormBase` without affine parameters or
    running statistics by default."""

    #: the spatial dims of the batched input
    spatial = 2

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
        backend: Any = None,
    ):
        options = (num_features, eps, momentum, affine, track_running_stats, device, dtype)
        super().__init__(*options, bias=bias, backend=backend)

    def forward(self, input: Tensor) -> Tensor:
        name = type(self).__name__
        if input.ndim not in (self.spatial + 1, self.spatial + 2):
            raise ShapeError(
                f"{name}: expected a {self.spatial + 1}-d or {self.spatial + 2}-d input, got "
                f"shape {list(input.shape)}"
            )
        unbatched = input.ndim == self.spatial + 1
        if unbatched:
            input = input.unsqueeze(0)  # noqa: A001
        use_input_stats = self.training or not self.track_running_stats
        # momentum=None: torch passes 0.0 (no cumulative average, unlike the batch norms), so
        # the running statistics stay where they are
        out = F.instance_norm(
            input, self.running_mean, self.running_var, self.weight, self.bias, use_input_stats,
            self.momentum if self.momentum is not None else 0.0, self.eps,
        )  # fmt: skip
        return out.squeeze(0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of ``[N, C, L]`` (or ``[C, L]``)."""

    spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization of ``[N, C, H, W]`` (or ``[C, H, W]``).

    >>> InstanceNorm2d(3)(rg.random((2, 3, 4, 4))).shape
    retrograd.Size([2, 3, 4, 4])
    """

    spatial = 2


class InstanceNorm3d(_InstanceNorm):
    spatial = 3
