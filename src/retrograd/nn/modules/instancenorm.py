"""Instance normalization: ``InstanceNorm1d/2d/3d`` with PyTorch's signatures (no affine
parameters and no running statistics by default), over ``F.instance_norm``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ShapeError
from ...tensor import Tensor, tensor
from ...tensor.dtypes import default_float_dtype
from .. import functional as F  # noqa: N812 (PyTorch's idiom)
from ..parameter import Parameter
from .module import Module, _reset_affine
from .norm import _keep_num_batches_tracked, _norm_options, _reset_running_stats

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]


class _InstanceNorm(Module):
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
    ):
        super().__init__()
        dtype = dtype or default_float_dtype()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        shape = (num_features,)
        if affine:
            self.weight = Parameter(tensor(np.ones(shape), dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(tensor(np.zeros(shape), dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer(
                "running_mean", tensor(np.zeros(shape), dtype=dtype, device=device)
            )
            self.register_buffer("running_var", tensor(np.ones(shape), dtype=dtype, device=device))
            self.register_buffer(
                "num_batches_tracked", tensor(np.array(0, dtype=np.int64), device=device)
            )
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        _reset_running_stats(self)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args: Any) -> None:
        _keep_num_batches_tracked(self, state_dict, prefix, local_metadata)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)

    def reset_parameters(self) -> None:
        """The running statistics reset, weight ones and bias zeros again, in place."""
        self.reset_running_stats()
        _reset_affine(self)

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        if x.ndim not in (self.spatial + 1, self.spatial + 2):
            raise ShapeError(
                f"{name}: expected a {self.spatial + 1}-d or {self.spatial + 2}-d input, got "
                f"shape {list(x.shape)}"
            )
        unbatched = x.ndim == self.spatial + 1
        if unbatched:
            x = x.unsqueeze(0)
        use_input_stats = self.training or not self.track_running_stats
        # momentum=None: torch passes 0.0 (no cumulative average, unlike the batch norms), so
        # the running statistics stay where they are
        out = F.instance_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, use_input_stats,
            self.momentum if self.momentum is not None else 0.0, self.eps,
        )  # fmt: skip
        return out.squeeze(0) if unbatched else out

    def extra_repr(self) -> str:
        return _norm_options(self)


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of ``[N, C, L]`` (or ``[C, L]``)."""

    spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization of ``[N, C, H, W]`` (or ``[C, H, W]``).

    >>> InstanceNorm2d(3)(rg.random((2, 3, 4, 4))).shape
    (2, 3, 4, 4)
    """

    spatial = 2


class InstanceNorm3d(_InstanceNorm):
    spatial = 3
