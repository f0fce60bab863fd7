"""Pooling and resizing layers: ``MaxPool1d/2d/3d``, ``AvgPool1d/2d/3d``,
``AdaptiveAvgPool1d/2d/3d``, ``AdaptiveMaxPool1d/2d``, ``Upsample`` (PyTorch's arguments; a
pooling ``stride`` defaults to ``kernel_size``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import InvalidArgumentError
from ...tensor import Tensor
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from .module import Module

__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "FractionalMaxPool2d",
    "FractionalMaxPool3d",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "MaxUnpool3d",
    "Upsample",
    "UpsamplingBilinear2d",
    "UpsamplingNearest2d",
]


class _MaxPoolNd(Module):
    """What torch's max poolings share (its ``_MaxPoolNd``); each dimension's layer names
    its functional form (``_pool``, ``_pool_with_indices``)."""

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
        # torch stores the default stride as the kernel size (code reads ``pool.stride``)
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = stride if stride is not None else kernel_size
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    _pool: Any = None
    _pool_with_indices: Any = None

    def forward(self, input: Tensor) -> Any:
        pool = self._pool_with_indices if self.return_indices else self._pool
        return pool(
            input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode
        )

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class MaxPool2d(_MaxPoolNd):
    """2-d max pooling; ``return_indices=True`` also returns the int64 argmax indices.

    >>> MaxPool2d(2)(rg.ones((1, 1, 4, 4))).shape
    retrograd.Size([1, 1, 2, 2])
    """

    _pool = staticmethod(F.max_pool2d)
    _pool_with_indices = staticmethod(F.max_pool2d_with_indices)


class _AvgPoolNd(Module):
    """What torch's average poolings share (its ``_AvgPoolNd``): here the 2-d and 3-d
    constructor and forward, each dimension's layer naming its functional form (``_pool``);
    ``AvgPool1d`` takes no ``divisor_override``."""

    _pool: Any = None

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ):
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = stride if stride is not None else kernel_size  # as torch stores it
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return self._pool(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad, self.divisor_override,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(_AvgPoolNd):
    """2-d average pooling.

    >>> AvgPool2d(2)(rg.ones((1, 1, 4, 4))).shape
    retrograd.Size([1, 1, 2, 2])
    """

    _pool = staticmethod(F.avg_pool2d)


class _AdaptiveAvgPoolNd(Module):
    """What torch's adaptive average poolings share (its ``_AdaptiveAvgPoolNd``); each
    dimension's layer names its functional form (``_pool``)."""

    _pool: Any = None

    def __init__(self, output_size: int | Sequence[int | None]):
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return self._pool(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """Average pooling to a fixed ``output_size`` (an int, or a pair; ``None`` keeps a size).

    >>> AdaptiveAvgPool2d((1, 1))(rg.ones((2, 3, 5, 7))).shape
    retrograd.Size([2, 3, 1, 1])
    """

    _pool = staticmethod(F.adaptive_avg_pool2d)


class Upsample(Module):
    """Resize to ``size`` or by ``scale_factor`` with ``mode`` (``F.interpolate``).

    >>> Upsample(scale_factor=2)(rg.ones((1, 1, 2, 3))).shape
    retrograd.Size([1, 1, 4, 6])
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
        self.name = type(self).__name__
        # torch stores the factor as float(s), which is what code reading it sees; a factor
        # of 0 (falsy) as None, as torch's (then interpolate's "either size or scale_factor")
        if isinstance(scale_factor, tuple | list):
            scale_factor = tuple(float(factor) for factor in scale_factor)
        else:
            scale_factor = float(scale_factor) if scale_factor else None
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        return F.interpolate(
            input,
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


class MaxPool1d(_MaxPoolNd):
    """1-d max pooling over ``[N, C, L]``."""

    _pool = staticmethod(F.max_pool1d)
    _pool_with_indices = staticmethod(F.max_pool1d_with_indices)


class MaxPool3d(_MaxPoolNd):
    """3-d max pooling over ``[N, C, D, H, W]``."""

    _pool = staticmethod(F.max_pool3d)
    _pool_with_indices = staticmethod(F.max_pool3d_with_indices)


class AvgPool1d(_AvgPoolNd):
    """1-d average pooling over ``[N, C, L]``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True):  # fmt: skip
        Module.__init__(self)  # torch's own arguments: no divisor_override
        # one-element tuples, as torch stores them (code reads ``pool.kernel_size[0]``)
        self.kernel_size, self.padding = _repeated(kernel_size, 1), _repeated(padding, 1)
        self.stride = _repeated(stride if stride is not None else kernel_size, 1)
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool1d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
        )


class AvgPool3d(_AvgPoolNd):
    """3-d average pooling over ``[N, C, D, H, W]``."""

    _pool = staticmethod(F.avg_pool3d)


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    _pool = staticmethod(F.adaptive_avg_pool1d)


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    _pool = staticmethod(F.adaptive_avg_pool3d)


class _AdaptiveMaxPoolNd(Module):
    """What torch's adaptive max poolings share (its ``_AdaptiveMaxPoolNd``); each
    dimension's layer names its functional form (``_pool``)."""

    _pool: Any = None

    def __init__(self, output_size: Any, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input: Tensor) -> Tensor:
        return self._pool(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """Maximum pooling to a fixed ``output_size`` (torch's windows)."""

    _pool = staticmethod(F.adaptive_max_pool2d)


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    _pool = staticmethod(F.adaptive_max_pool1d)


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    _pool = staticmethod(F.adaptive_max_pool3d)


class UpsamplingNearest2d(Upsample):
    """``F.interpolate(x, size, scale_factor, "nearest")`` (torch's legacy module)."""

    def __init__(self, size: Any = None, scale_factor: Any = None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """``F.interpolate(x, size, scale_factor, "bilinear", align_corners=True)`` (torch's
    legacy module; note ``align_corners=True``, unlike ``Upsample``'s default).

    >>> UpsamplingBilinear2d(scale_factor=2)(rg.ones((1, 1, 2, 3))).shape
    retrograd.Size([1, 1, 4, 6])
    """

    def __init__(self, size: Any = None, scale_factor: Any = None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class _LPPoolNd(Module):
    """Power-average pooling: the ``norm_type``-norm of each window."""

    _fn: Any = None

    def __init__(self, norm_type: float, kernel_size: Any, stride: Any = None,
                 ceil_mode: bool = False):  # fmt: skip
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def forward(self, input: Tensor) -> Tensor:
        # torch's modules pass float(norm_type): an int or bool input's powers are then
        # floats, where the functional form with an int p pools them as integers
        return type(self)._fn(
            input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode
        )

    def extra_repr(self) -> str:
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, ceil_mode={self.ceil_mode}"
        )


class LPPool1d(_LPPoolNd):
    _fn = staticmethod(F.lp_pool1d)


class LPPool2d(_LPPoolNd):
    """``F.lp_pool2d``.

    >>> LPPool2d(2, 2)(rg.full((1, 1, 4, 4), 2.0)).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """

    _fn = staticmethod(F.lp_pool2d)


class LPPool3d(_LPPoolNd):
    _fn = staticmethod(F.lp_pool3d)


class _MaxUnpoolNd(Module):
    """The partial inverse of max pooling: ``forward(input, indices, output_size=None)``."""

    _fn: Any = None

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0):
        super().__init__()
        # tuples of one size a dimension, as torch stores them
        dims = self._dims
        self.kernel_size, self.padding = _repeated(kernel_size, dims), _repeated(padding, dims)
        self.stride = _repeated(stride if stride is not None else kernel_size, dims)

    def forward(self, input: Tensor, indices: Tensor, output_size: Sequence[int] | None = None):
        return type(self)._fn(
            input, indices, self.kernel_size, self.stride, self.padding, output_size
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    _fn, _dims = staticmethod(F.max_unpool1d), 1


class MaxUnpool2d(_MaxUnpoolNd):
    _fn, _dims = staticmethod(F.max_unpool2d), 2


class MaxUnpool3d(_MaxUnpoolNd):
    _fn, _dims = staticmethod(F.max_unpool3d), 3


class _FractionalMaxPoolNd(Module):
    """Fractional max pooling (torch's ``FractionalMaxPool2d``/``3d``): ``kernel_size``
    windows at pseudo-random steps giving ``output_size`` cells, or ``output_ratio`` (in
    (0, 1)) of the input's. ``_random_samples``, a buffer, fixes the steps."""

    _fn: Any = None
    _dims = 2

    def __init__(
        self,
        kernel_size: Any,
        output_size: Any = None,
        output_ratio: Any = None,
        return_indices: bool = False,
        _random_samples: Tensor | None = None,
    ):
        super().__init__()
        name, dims = type(self).__name__, self._dims
        sizes = _repeated(kernel_size, dims)
        if not all(isinstance(k, int) and k > 0 for k in sizes):
            raise InvalidArgumentError(
                f"{name}: kernel_size must be positive ints, got {kernel_size!r}"
            )
        self.kernel_size = sizes
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = None if output_size is None else _repeated(output_size, dims)
        self.output_ratio = None if output_ratio is None else _repeated(output_ratio, dims)
        if output_size is None and output_ratio is None:
            raise InvalidArgumentError(
                f"{name} requires specifying either an output size, or a pooling ratio"
            )
        if output_size is not None and output_ratio is not None:
            raise InvalidArgumentError(
                f"{name}: only one of output_size and output_ratio may be specified"
            )
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise InvalidArgumentError(
                f"{name}: output_ratio must be between 0 and 1 (got {output_ratio})"
            )

    def forward(self, input: Tensor) -> Any:
        return type(self)._fn(
            input,
            self.kernel_size,
            self.output_size,
            self.output_ratio,
            self.return_indices,
            _random_samples=self._random_samples,
        )


def _repeated(value: Any, dims: int) -> tuple:
    """torch's ``_pair``/``_triple``: a sequence as a tuple, anything else repeated."""
    return tuple(value) if isinstance(value, Sequence) else (value,) * dims


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """2-d fractional max pooling.

    >>> FractionalMaxPool2d(2, output_size=3)(rg.ones((1, 1, 5, 5))).shape
    retrograd.Size([1, 1, 3, 3])
    """

    _fn, _dims = staticmethod(F.fractional_max_pool2d), 2


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """3-d fractional max pooling of ``[N, C, T, H, W]`` (or ``[C, T, H, W]``)."""

    _fn, _dims = staticmethod(F.fractional_max_pool3d), 3
