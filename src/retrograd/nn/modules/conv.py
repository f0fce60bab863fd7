"""Convolution layers: ``Conv1d``, ``Conv2d``, ``Conv3d``, ``ConvTranspose1d``,
``ConvTranspose2d``, ``ConvTranspose3d`` with PyTorch's signatures,
weight layouts (``[out, in/groups, *k]``; transposed ``[in, out/groups, *k]``) and default
initialization (U(-k, k), k = 1/sqrt(fan_in), fan_in from the weight's second dimension)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...errors import InvalidArgumentError, ShapeError
from ...tensor import Tensor
from ...tensor.dtypes import default_float_dtype
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from ..parameter import Parameter
from .module import Module, _fan_in_bound, _redraw_uniform, _uniform

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]

#: torch's padding modes other than zeros, as ``F.pad`` names them
_PAD_MODES = {"reflect": "reflect", "replicate": "replicate", "circular": "circular"}


def _tuple(value: int | Sequence[int], count: int) -> tuple[int, ...]:
    return (value,) * count if isinstance(value, int) else tuple(value)


def _reversed_padding_repeated_twice(
    padding: str | tuple[int, ...],
    kernel_size: tuple[int, ...],
    dilation: tuple[int, ...],
    spatial: int,
) -> list[int] | tuple[int, ...]:
    """torch's ``_reversed_padding_repeated_twice``: ``F.pad``'s amounts (last dimension
    first, left then right) of a ``padding_mode`` other than zeros. Real code reads it
    (layers overriding ``_conv_forward``, seamless tiling patches), so it is torch's own:
    a tuple for numbers, a list for 'valid' (zeros) and 'same' (``d * (k - 1)`` in all, the
    odd one at the end). A one-entry dilation or kernel size holds for every dimension, as in
    the convolution itself (torch's zip pads one dimension alone there:
    tests/test_fuzz18_regressions.py)."""
    if not isinstance(padding, str):
        return tuple(n for p in reversed(padding) for n in (p, p))
    dilation, kernel_size = (t * spatial if len(t) == 1 else t for t in (dilation, kernel_size))
    amounts = [0, 0] * len(kernel_size)
    if padding == "same":
        for d, k, i in zip(dilation, kernel_size, range(len(kernel_size) - 1, -1, -1)):
            total = d * (k - 1)
            amounts[2 * i], amounts[2 * i + 1] = total // 2, total - total // 2
    return amounts


class _ConvNd(Module):
    """What the convolutions share: arguments, checks, the weight and bias."""

    spatial = 2
    transposed = False
    #: the functional form, called by ``_conv_forward`` (the transposed one has its own)
    _convolution = staticmethod(F.conv2d)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | str = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: str | None = None,
        *,
        output_padding: int | Sequence[int] = 0,
        backend: Any = None,
    ):
        super().__init__()
        name = type(self).__name__
        if groups < 1:
            raise InvalidArgumentError(f"{name}: groups must be a positive integer, got {groups}")
        if in_channels % groups or out_channels % groups:
            raise InvalidArgumentError(
                f"{name}: in_channels {in_channels} and out_channels {out_channels} must be "
                f"divisible by groups {groups}"
            )
        if padding_mode != "zeros" and (padding_mode not in _PAD_MODES or self.transposed):
            raise InvalidArgumentError(
                f"{name}: padding_mode {padding_mode!r} is not supported (expected 'zeros', "
                "'reflect', 'replicate' or 'circular'; transposed convolutions: 'zeros')"
            )
        n = self.spatial
        if isinstance(padding, str):
            # torch refuses these when the module is built, not at its first forward
            if padding not in ("valid", "same"):
                raise InvalidArgumentError(
                    f"{name}: invalid padding string {padding!r}, should be 'valid' or 'same'"
                )
            if padding == "same" and any(s != 1 for s in _tuple(stride, n)):
                raise InvalidArgumentError(
                    f"{name}: padding='same' is not supported for strided convolutions "
                    f"(stride {stride})"
                )
        dtype = dtype or default_float_dtype()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _tuple(kernel_size, n)
        self.stride = _tuple(stride, n)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n)
        self.dilation = _tuple(dilation, n)
        self.output_padding = _tuple(output_padding, n)
        self.groups, self.padding_mode = groups, padding_mode
        self._reversed_padding_repeated_twice = _reversed_padding_repeated_twice(
            self.padding, self.kernel_size, self.dilation, n
        )
        if self.transposed:
            shape = (in_channels, out_channels // groups, *self.kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *self.kernel_size)
        # PyTorch's fan_in: the weight's second dimension times the kernel's size.
        bound = _fan_in_bound(shape[1] * math.prod(self.kernel_size))
        self.weight = Parameter(_uniform(shape, bound, backend, device, dtype))
        if bias:
            self.bias = Parameter(_uniform((out_channels,), bound, backend, device, dtype))
        else:
            self.register_parameter("bias", None)

    def __setstate__(self, state: dict) -> None:
        """A layer pickled before it kept ``_reversed_padding_repeated_twice`` gets it from
        its padding (as torch's ``__setstate__`` fills in what older layers lack)."""
        self.__dict__.update(state)
        if "_reversed_padding_repeated_twice" not in state:
            self._reversed_padding_repeated_twice = _reversed_padding_repeated_twice(
                self.padding, self.kernel_size, self.dilation, self.spatial
            )

    def reset_parameters(self) -> None:
        """Draw weight and bias again as the constructor does (U(-k, k), k = 1/sqrt(fan_in),
        fan_in from the weight's second dimension and the kernel), in place."""
        bound = _fan_in_bound(self.weight.shape[1] * math.prod(self.weight.shape[2:]))
        _redraw_uniform(self.weight, bound)
        _redraw_uniform(self.bias, bound)

    def extra_repr(self) -> str:
        text = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * self.spatial:
            text += f", padding={self.padding}"
        if self.dilation != (1,) * self.spatial:
            text += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.padding_mode != "zeros":
            text += f", padding_mode={self.padding_mode}"
        return text


class _Convolution(_ConvNd):
    """The (non-transposed) convolutions' forward: torch's ``Conv1d``/``2d``/``3d`` go
    through ``_conv_forward``, which the transposed ones do not have."""

    def forward(self, input: Tensor) -> Tensor:
        return self._conv_forward(input, self.weight, self.bias)

    def _conv_forward(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """The convolution of ``x`` by ``weight`` and ``bias`` with this layer's settings
        (the padding mode applied first): torch's hook for subclasses that convolve with
        other weights than their own (Whisper's ``Conv1d`` casting them to the input's dtype,
        weight-standardised and quantised layers), which :meth:`forward` calls as torch's
        does."""
        padding = self.padding
        if self.padding_mode != "zeros":
            # torch pads with the mode by the amounts it computed when the layer was built
            # (a subclass or a patch may have set them), then convolves unpadded
            x = F.pad(
                x, list(self._reversed_padding_repeated_twice), mode=_PAD_MODES[self.padding_mode]
            )
            padding = 0
        return self._convolution(x, weight, bias, self.stride, padding, self.dilation, self.groups)


class Conv1d(_Convolution):
    """1-d convolution over ``[N, C, L]``, weight ``[out, in/groups, k]``; PyTorch's
    signature (``_ConvNd``'s).

    >>> Conv1d(2, 4, 3, padding=1)(rg.ones((1, 2, 7))).shape
    retrograd.Size([1, 4, 7])
    """

    spatial = 1
    _convolution = staticmethod(F.conv1d)


class Conv2d(_Convolution):
    """2-d convolution over ``[N, C, H, W]``, weight ``[out, in/groups, kh, kw]``; PyTorch's
    signature (``_ConvNd``'s).

    >>> Conv2d(1, 4, 3, padding=1)(rg.ones((2, 1, 8, 8))).shape
    retrograd.Size([2, 4, 8, 8])
    """


class Conv3d(_Convolution):
    """3-d convolution over ``[N, C, D, H, W]``, weight ``[out, in/groups, kd, kh, kw]``."""

    spatial = 3
    _convolution = staticmethod(F.conv3d)


class _ConvTransposeNd(_ConvNd):
    """What torch's transposed convolutions share (its ``_ConvTransposeNd``): the
    constructor with ``output_padding``, and the forward with an ``output_size``. Each
    dimension's layer subclasses it alone, as in torch (a ``ConvTranspose1d`` is no
    ``ConvTranspose2d``)."""

    transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: int | Sequence[int] = 1,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: str | None = None,
        **factory: Any,
    ):
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
            output_padding=output_padding,
            **factory,
        )

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:
        return self._transposed_convolution(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self._output_padding(input, output_size),
            self.groups,
            self.dilation,
        )

    def _output_padding(self, x: Tensor, output_size: Any) -> tuple[int, ...]:
        """``output_padding``, or torch's for an ``output_size`` asked of the call: the
        shape padded past the smallest output ``(in - 1) s - 2 p + d (k - 1) + 1``, which may
        grow by at most ``s - 1``."""
        if output_size is None:
            return tuple(self.output_padding)
        n = self.spatial
        leading = 2 if x.ndim == n + 2 else 1
        sizes = [int(size) for size in output_size]
        if len(sizes) == leading + n:
            sizes = sizes[leading:]
        if len(sizes) != n:
            raise ShapeError(
                f"{type(self).__name__}: for a {x.ndim}-d input, output_size must have {n} or "
                f"{leading + n} elements, got {list(output_size)}"
            )
        smallest = [
            (x.shape[leading + d] - 1) * self.stride[d] - 2 * self.padding[d]
            + self.dilation[d] * (self.kernel_size[d] - 1) + 1
            for d in range(n)
        ]  # fmt: skip
        largest = [low + self.stride[d] - 1 for d, low in enumerate(smallest)]
        if any(not low <= size <= high for size, low, high in zip(sizes, smallest, largest)):
            raise ShapeError(
                f"{type(self).__name__}: requested an output size of {sizes}, but valid sizes "
                f"range from {smallest} to {largest} (for an input of {x.shape[leading:]})"
            )
        return tuple(size - low for size, low in zip(sizes, smallest))


class ConvTranspose2d(_ConvTransposeNd):
    """2-d transposed convolution, weight ``[in, out/groups, kh, kw]`` (PyTorch's layout).

    >>> ConvTranspose2d(4, 2, 2, stride=2)(rg.ones((1, 4, 3, 3))).shape
    retrograd.Size([1, 2, 6, 6])
    """

    spatial = 2
    _transposed_convolution = staticmethod(F.conv_transpose2d)


class ConvTranspose1d(_ConvTransposeNd):
    """1-d transposed convolution, weight ``[in, out/groups, k]``."""

    spatial = 1
    _transposed_convolution = staticmethod(F.conv_transpose1d)


class ConvTranspose3d(_ConvTransposeNd):
    """3-d transposed convolution, weight ``[in, out/groups, kd, kh, kw]``."""

    spatial = 3
    _transposed_convolution = staticmethod(F.conv_transpose3d)
