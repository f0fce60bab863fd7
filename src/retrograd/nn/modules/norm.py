"""Normalization layers: ``LayerNorm``, ``BatchNorm1d/2d/3d``, ``GroupNorm``,
``RMSNorm``, with PyTorch's signatures, parameters (``weight`` ones, ``bias`` zeros) and
buffers (``running_mean``, ``running_var``, ``num_batches_tracked``), so state dicts match."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import DivisionByZeroError, InvalidArgumentError, ShapeError
from ...tensor import Tensor, tensor
from ...tensor.dtypes import default_float_dtype
from ...tensor.inplace import assign
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from ..parameter import Parameter
from .module import Module, _reset_affine

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "LayerNorm", "RMSNorm"]


def _filled(shape: tuple[int, ...], value: float, dtype: str, backend: Any, device: Any) -> Tensor:
    return tensor(np.full(shape, value), dtype=dtype, backend=backend, device=device)


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(normalized_shape)


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims, then scale and shift.

    >>> LayerNorm(4)(rg.ones((2, 4))).shape
    retrograd.Size([2, 4])
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        dtype = dtype or default_float_dtype()
        shape = _shape(normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_filled(shape, 1.0, dtype, backend, device))
            if bias:
                self.bias = Parameter(_filled(shape, 0.0, dtype, backend, device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        """Weight ones and bias zeros again (with ``elementwise_affine``), in place."""
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class _NormBase(Module):
    """What torch's batch and instance norms share (its ``_NormBase``): ``num_features``
    channels, ``weight`` ones and ``bias`` zeros (with ``affine``), running statistics as
    buffers (with ``track_running_stats``: ``running_mean``, ``running_var``,
    ``num_batches_tracked``), their resets, the loading of states older than that count, and
    the ``extra_repr``. Custom norms subclass it as they do torch's."""

    _version = 2  # torch's: version 2 added ``num_batches_tracked``

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: str | None = None,
        *,
        bias: bool = True,
        backend: Any = None,
    ):
        super().__init__()
        dtype = dtype or default_float_dtype()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        shape = (num_features,)
        if affine:
            self.weight = Parameter(_filled(shape, 1.0, dtype, backend, device))
            if bias:  # torch 2.13's ``bias=False``: a scale without a shift
                self.bias = Parameter(_filled(shape, 0.0, dtype, backend, device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _filled(shape, 0.0, dtype, backend, device))
            self.register_buffer("running_var", _filled(shape, 1.0, dtype, backend, device))
            self.register_buffer(
                "num_batches_tracked",
                tensor(np.array(0, dtype=np.int64), backend=backend, device=device),
            )
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        """The running mean zeros, variance ones, no batch counted (with
        ``track_running_stats``), in place."""
        if self.track_running_stats:
            for name, value in (("running_mean", 0.0), ("running_var", 1.0)):
                buffer = getattr(self, name)
                assign(buffer, _filled(buffer.shape, value, buffer.dtype, buffer.backend, None))
            assign(self.num_batches_tracked, self.num_batches_tracked * 0)

    def reset_parameters(self) -> None:
        """The running statistics reset, weight ones and bias zeros again, in place."""
        self.reset_running_stats()
        _reset_affine(self)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args: Any) -> None:
        # torch's: a state without version metadata, or of a version before 2 (the
        # checkpoints of torch before 0.4, which torchvision's DenseNet weights still are),
        # has no ``num_batches_tracked``; the module's own count is kept
        version = local_metadata.get("version")
        if (version is None or version < 2) and self.track_running_stats:
            key = prefix + "num_batches_tracked"
            if key not in state_dict and self.num_batches_tracked is not None:
                state_dict[key] = self.num_batches_tracked
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)

    def extra_repr(self) -> str:
        # ``bias``: whether the module holds one (torch 2.13's ``bias=False`` drops it)
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )


class _BatchNorm(_NormBase):
    """Batch normalization with running statistics, as PyTorch's ``_BatchNorm``."""

    #: the input ranks this layer takes
    ranks: tuple[int, ...] = ()

    def _counts_batch(self) -> bool:
        return self.training and self.track_running_stats and self.num_batches_tracked is not None

    def _update_factor(self) -> float:
        """The running statistics' update factor of this training batch: ``momentum``, or
        ``1 / batches`` (counting this one) for a cumulative average (``momentum=None``)."""
        if self.momentum is not None:
            return self.momentum
        if not self._counts_batch():
            return 0.0
        return 1.0 / float(self.num_batches_tracked.item() + 1)

    def _count_batch(self) -> None:
        """Count a training batch (``num_batches_tracked``) once it is normalized: a batch
        refused (one value per channel) no longer counted, which changed every later
        cumulative average (torch counts it)."""
        if self._counts_batch():
            counter = self.num_batches_tracked
            assign(counter, counter + 1, type(self).__name__)

    def forward(self, input: Tensor) -> Tensor:
        name = type(self).__name__
        if input.ndim not in self.ranks:
            raise ShapeError(
                f"{name}: expected a {' or '.join(f'{r}-d' for r in self.ranks)} input, got "
                f"shape {list(input.shape)}"
            )
        factor = self._update_factor()
        # As PyTorch: batch statistics in training, and in eval when no running ones are kept.
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        out = F.batch_norm(
            input,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )
        self._count_batch()
        return out


class BatchNorm1d(_BatchNorm):
    """Batch normalization of ``[N, C]`` or ``[N, C, L]`` per channel.

    >>> BatchNorm1d(3)(rg.random((4, 3))).shape
    retrograd.Size([4, 3])
    """

    ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization of ``[N, C, H, W]`` per channel; running statistics (buffers) are
    updated in training mode with ``momentum`` and used in eval mode.

    >>> bn = BatchNorm2d(3)
    >>> sorted(bn.state_dict())
    ['bias', 'num_batches_tracked', 'running_mean', 'running_var', 'weight']
    """

    ranks = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalization of ``[N, C, D, H, W]`` per channel."""

    ranks = (5,)


class GroupNorm(Module):
    """Group normalization of ``[N, C, *]``: ``num_groups`` groups of channels.

    >>> GroupNorm(2, 4)(rg.random((3, 4, 5))).shape
    retrograd.Size([3, 4, 5])
    """

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device: Any = None,
        dtype: str | None = None,
        *,
        bias: bool = True,
        backend: Any = None,
    ):
        super().__init__()
        if num_groups == 0:  # (torch's ZeroDivisionError of its modulo)
            raise DivisionByZeroError(f"GroupNorm: num_groups must not be 0 ({num_channels})")
        if num_groups < 1 or num_channels % num_groups:
            raise InvalidArgumentError(
                f"GroupNorm: num_channels {num_channels} must be divisible by num_groups "
                f"{num_groups}"
            )
        dtype = dtype or default_float_dtype()
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups,
            num_channels,
            eps,
            affine,
        )
        if affine:
            self.weight = Parameter(_filled((num_channels,), 1.0, dtype, backend, device))
            if bias:
                self.bias = Parameter(_filled((num_channels,), 0.0, dtype, backend, device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        """Weight ones and bias zeros again (with ``affine``), in place."""
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
            f"bias={self.bias is not None}"
        )


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` dims
    (``eps=None``: the machine epsilon of the dtype it is computed in, float32's for float16
    and bfloat16), as PyTorch's.

    >>> RMSNorm(4)(rg.ones((2, 4))).shape
    retrograd.Size([2, 4])
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        dtype = dtype or default_float_dtype()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_filled(self.normalized_shape, 1.0, dtype, backend, device))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        """Weight ones again (with ``elementwise_affine``), in place."""
        _reset_affine(self)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )
