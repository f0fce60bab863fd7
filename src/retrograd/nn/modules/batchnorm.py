"""torch's ``torch.nn.modules.batchnorm`` path: the batch normalization layers (their home is
:mod:`.norm`), and :class:`SyncBatchNorm`, batch normalization whose training statistics are
those of the whole batch across the devices of a running ``DistributedContext``.

In training inside a context of more than one device, each device's batch is normalized by the
mean and (biased) variance of every device's batch together, as torch's ``SyncBatchNorm``
does over its process group: the per-channel sums and element counts, then the sums of squared
deviations from the global mean, are all-reduced (``dist.all_reduce``, differentiable: the
backward all-reduces their gradients), so outputs and input gradients are those of
``BatchNorm`` on the concatenated batch. The running statistics get the global mean and the
unbiased global variance. Outside a context, with one device, or in eval mode it is
``BatchNorm`` (torch: no process group, or eval mode). Every device must call it in the same
order (the collectives are matched by order), as in torch.
"""

from __future__ import annotations

import math
from typing import Any

from ...errors import DTypeError, InvalidArgumentError, ShapeError
from ...tensor import Tensor, cat, full
from ...tensor.inplace import assign
from .module import Module
from .norm import BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNorm, _NormBase  # noqa: F401 (torch path)

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm"]


class SyncBatchNorm(_BatchNorm):
    """Batch normalization of ``[N, C, *]`` synchronized across the devices of a running
    ``DistributedContext`` in training (module docstring); torch's signature, parameters,
    buffers and state-dict keys. ``process_group`` must be ``None`` (every device of the
    context, torch's default group)."""

    ranks = tuple(range(2, 9))

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any = None,
        device: Any = None,
        dtype: str | None = None,
        *,
        bias: bool = True,
        backend: Any = None,
    ):
        super().__init__(
            num_features,
            eps,
            momentum,
            affine,
            track_running_stats,
            backend=backend,
            device=device,
            dtype=dtype,
            bias=bias,
        )
        if process_group is not None:
            raise InvalidArgumentError(
                "SyncBatchNorm: process_group is not supported; statistics are synchronized "
                "over every device of the running DistributedContext"
            )
        self.process_group = None

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim < 2:
            raise ShapeError(f"SyncBatchNorm: expected at least 2D input (got {input.ndim}D input)")
        devices = self._sync_devices(input) if self.training else ()
        if len(devices) < 2:
            return super().forward(input)
        out = self._synchronized(input, devices, self._update_factor())
        self._count_batch()
        return out

    @staticmethod
    def _sync_devices(x: Tensor) -> tuple:
        """The devices of the running context that hosts ``x``'s device (none without one)."""
        from ...distributed.registry import active_context

        context = active_context(x.device)
        return () if context is None else tuple(context.devices)

    def _synchronized(self, x: Tensor, devices: tuple, factor: float) -> Tensor:
        """Normalize by the statistics of every device's batch (two differentiable sums)."""
        from ...distributed import ReduceOperation, all_reduce

        sum_op = ReduceOperation.SUM
        dims = (0, *range(2, x.ndim))
        channels = x.shape[1]
        local_count = math.prod(x.shape) // max(channels, 1)
        count_tensor = full((1,), float(local_count), dtype=x.dtype, device=x.device)
        totals = all_reduce(cat([x.sum(dims), count_tensor]), sum_op, devices).resolve()
        count = totals[channels:]
        per_channel = (1, channels) + (1,) * (x.ndim - 2)
        mean = totals[:channels] / count
        centered = x - mean.reshape(per_channel)
        squares = all_reduce((centered * centered).sum(dims), sum_op, devices).resolve()
        var = squares / count
        out = centered / (var + self.eps).sqrt().reshape(per_channel)
        if self.weight is not None:
            out = out * self.weight.reshape(per_channel)
        if self.bias is not None:
            out = out + self.bias.reshape(per_channel)
        if self.track_running_stats:
            total = float(count.item())
            unbiased = var.detach() * (total / max(total - 1.0, 1.0))
            for buffer, stat in ((self.running_mean, mean.detach()), (self.running_var, unbiased)):
                assign(buffer, buffer * (1.0 - factor) + stat * factor, "SyncBatchNorm")
        return out

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group: Any = None) -> Module:
        """``module`` with every ``BatchNorm*d`` replaced by a ``SyncBatchNorm`` sharing its
        parameters and buffers (a batch-norm ``module`` itself: a new layer), as torch's."""
        if not isinstance(module, Module):
            raise DTypeError(
                f"SyncBatchNorm.convert_sync_batchnorm: expected a Module, got "
                f"{type(module).__name__}"
            )
        converted = module
        if isinstance(module, _BatchNorm):
            converted = cls(
                module.num_features,
                module.eps,
                module.momentum,
                module.affine,
                module.track_running_stats,
                process_group,
                bias=module.bias is not None,
            )
            if module.affine:
                converted.weight = module.weight
                converted.bias = module.bias
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                converted._buffers[name] = module._buffers[name]
            converted.training = module.training
        for name, child in list(module.named_children()):
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted
