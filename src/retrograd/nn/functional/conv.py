"""Convolutions and transposed convolutions, 1-d to 3-d: one backend primitive each."""

from __future__ import annotations

from ...backend.sizes import conv_transpose_output_size
from ...errors import (
    DTypeError,
    MixedDTypeError,
    SizeMismatchError,
)
from ...tensor import Tensor
from ...tensor.autocasting import autocast_op
from ...tensor.complexes import complex as complex_of_parts
from ...tensor.internal import (
    TensorOp,
    apply,
    follow_channels_last,
    shape_text,
)
from ._common import (
    IntOrTuple,
    _batched,
    _channel_bias,
    _float_pair,
    _ints,
    _unbatched,
)


# -- convolution -----------------------------------------------------------------------------------
def _check_kernel(fn: str, kernel: tuple[int, ...], shapes: str) -> None:
    # An empty kernel would give an output of bias alone; torch refuses it.
    if 0 in kernel:
        raise SizeMismatchError(
            f"{fn}: kernel size must be positive, got {shape_text(kernel)}; {shapes}"
        )


def _complex_parts(fn, convolve, x, weight, bias):
    """A convolution of complex ``x`` and ``weight`` as torch computes it, from real
    convolutions of the parts: ``(a + ib) * (c + id) = (a c - b d) + i (a d + b c)``, the
    bias's parts added to each; the gradients follow from those of the parts."""
    if not (isinstance(x, Tensor) and isinstance(weight, Tensor)) or x.dtype != weight.dtype:
        raise MixedDTypeError(
            f"{fn}: input and weight must have the same dtype, got "
            f"{getattr(x, 'dtype', type(x).__name__)} input and "
            f"{getattr(weight, 'dtype', type(weight).__name__)} weight"
        )
    if isinstance(bias, Tensor) and bias.dtype != x.dtype:
        raise DTypeError(f"{fn}: bias must have the input's dtype {x.dtype}, got {bias.dtype}")
    a, b, c, d = x.real, x.imag, weight.real, weight.imag
    bias_real, bias_imag = (None, None) if bias is None else (bias.real, bias.imag)
    real = convolve(a, c, bias_real) - convolve(b, d, None)
    imag = convolve(a, d, bias_imag) + convolve(b, c, None)
    return complex_of_parts(real, imag)


def _is_complex(*tensors):
    return any(isinstance(t, Tensor) and t.is_complex() for t in tensors)


def _conv(fn, spatial, x, weight, bias, stride, padding, dilation, groups):
    if _is_complex(x, weight, bias):
        return _complex_parts(
            fn,
            lambda a, w, b: _conv(fn, spatial, a, w, b, stride, padding, dilation, groups),
            x,
            weight,
            bias,
        )
    # integers too: torch's CPU convolutions compute them in their dtype (wrapping)
    x, weight = _float_pair(fn, x, weight, "weight", integers=True, one_dtype=True)
    x, squeeze = _batched(fn, x, spatial)
    if weight.ndim != spatial + 2:
        raise SizeMismatchError(
            f"{fn}: weight must be {spatial + 2}-d [out_channels, in_channels/groups, "
            f"*kernel], got {shape_text(weight.shape)}"
        )
    stride = _ints(fn, "stride", stride, spatial, 1)
    dilation = _ints(fn, "dilation", dilation, spatial, 1)
    groups = _ints(fn, "groups", groups, 1, 1)[0]
    kernel = weight.shape[2:]
    shapes = f"input {shape_text(x.shape)}, weight {shape_text(weight.shape)}"
    _check_kernel(fn, kernel, shapes)
    given = x
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * spatial
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise SizeMismatchError(f"{fn}: padding='same' needs stride 1, got stride {stride}")
            totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
            # PyTorch puts an odd total's extra cell on the right: as its _convolution_same,
            # a zero-padded copy of the input takes it, the convolution pads floor(total/2) on
            # both sides (a symmetric ceil(total/2) and a crop of the first output read the
            # input's first cells with a gradient of 0: inf or NaN there made the weight's
            # gradient NaN, torch's finite)
            padding = tuple(t // 2 for t in totals)
            extra = [t % 2 for t in totals]
            if any(extra):
                from .sampling import pad

                x = pad(x, [v for e in reversed(extra) for v in (0, e)])
        else:
            raise SizeMismatchError(
                f"{fn}: padding must be 'valid', 'same', an int or a tuple, got {padding!r}"
            )
    else:
        padding = _ints(fn, "padding", padding, spatial, 0)
    channels, out_channels = x.shape[1], weight.shape[0]
    if out_channels == 0:  # as torch: "expected weight to be at least 1 at dimension 0"
        raise SizeMismatchError(f"{fn}: weight has no output channels (dimension 0 is 0); {shapes}")
    if channels % groups or out_channels % groups:
        raise SizeMismatchError(
            f"{fn}: groups={groups} must divide the input channels ({channels}) and the output "
            f"channels ({out_channels}); {shapes}"
        )
    if weight.shape[1] * groups != channels:
        raise SizeMismatchError(
            f"{fn}: input has {channels} channels but weight expects "
            f"{weight.shape[1] * groups} (groups={groups}); {shapes}"
        )
    for n, k, p, d in zip(x.shape[2:], kernel, padding, dilation):
        if d * (k - 1) + 1 > n + 2 * p:
            raise SizeMismatchError(
                f"{fn}: kernel {shape_text(kernel)} (dilation {shape_text(dilation)}) is larger "
                f"than the padded input {shape_text(tuple(m + 2 * q for m, q in zip(x.shape[2:], padding)))}; "  # noqa: E501
                f"{shapes}"
            )
    if isinstance(bias, Tensor) and bias.dtype != x.dtype and x.dtype in ("float32", "float64"):
        # torch's convolutions refuse a bias of another dtype (its transposed ones cast it)
        raise DTypeError(
            f"{fn}: input type ({x.dtype}) and bias type ({bias.dtype}) should be the same"
        )
    bias = _channel_bias(fn, x, bias, out_channels)
    out = apply(TensorOp(fn, kernel="conv"), (x, weight, bias), (stride, padding, dilation, groups))
    if spatial in (2, 3) and not squeeze:  # torch's output is channels-last if x or weight is
        follow_channels_last(out, given, weight)
    return _unbatched(out, squeeze)


@autocast_op("conv1d")
def conv1d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: IntOrTuple | str = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
) -> Tensor:
    """1-d convolution (cross-correlation) of ``x`` ``[N, C_in, L]`` with ``weight``
    ``[C_out, C_in/groups, K]``; ``padding`` is symmetric, or ``"valid"``/``"same"``.

    >>> import retrograd as rg
    >>> conv1d(rg.ones((1, 2, 5)), rg.ones((3, 2, 3)), padding=1).shape
    retrograd.Size([1, 3, 5])
    """
    return _conv("conv1d", 1, x, weight, bias, stride, padding, dilation, groups)


@autocast_op("conv2d")
def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: IntOrTuple | str = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
) -> Tensor:
    """2-d convolution of ``x`` ``[N, C_in, H, W]`` with ``weight`` ``[C_out, C_in/groups,
    kH, kW]``, PyTorch's ``conv2d``.

    >>> import retrograd as rg
    >>> conv2d(rg.ones((2, 3, 8, 8)), rg.ones((4, 3, 3, 3)), stride=2).shape
    retrograd.Size([2, 4, 3, 3])
    """
    return _conv("conv2d", 2, x, weight, bias, stride, padding, dilation, groups)


@autocast_op("conv3d")
def conv3d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: IntOrTuple | str = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
) -> Tensor:
    """3-d convolution of ``x`` ``[N, C_in, D, H, W]``, PyTorch's ``conv3d``."""
    return _conv("conv3d", 3, x, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(
    fn, spatial, x, weight, bias, stride, padding, output_padding, groups, dilation
):
    if _is_complex(x, weight, bias):
        return _complex_parts(
            fn,
            lambda a, w, b: _conv_transpose(
                fn, spatial, a, w, b, stride, padding, output_padding, groups, dilation
            ),
            x,
            weight,
            bias,
        )
    x, weight = _float_pair(fn, x, weight, "weight", one_dtype=True)
    x, squeeze = _batched(fn, x, spatial)
    if weight.ndim != spatial + 2:
        raise SizeMismatchError(
            f"{fn}: weight must be {spatial + 2}-d [in_channels, out_channels/groups, *kernel], "
            f"got {shape_text(weight.shape)}"
        )
    stride = _ints(fn, "stride", stride, spatial, 1)
    padding = _ints(fn, "padding", padding, spatial, 0)
    # output_padding >= stride is accepted, as Burn does: the extra trailing cells are zero
    # (plus bias). PyTorch would reject it.
    output_padding = _ints(fn, "output_padding", output_padding, spatial, 0)
    dilation = _ints(fn, "dilation", dilation, spatial, 1)
    groups = _ints(fn, "groups", groups, 1, 1)[0]
    shapes = f"input {shape_text(x.shape)}, weight {shape_text(weight.shape)}"
    channels = x.shape[1]
    if channels % groups:
        raise SizeMismatchError(
            f"{fn}: groups={groups} must divide the input channels ({channels}); {shapes}"
        )
    if weight.shape[0] != channels:
        raise SizeMismatchError(
            f"{fn}: input has {channels} channels but weight expects {weight.shape[0]} "
            f"(weight is [in_channels, out_channels/groups, *kernel], groups={groups}); {shapes}"
        )
    kernel = weight.shape[2:]
    _check_kernel(fn, kernel, shapes)
    out_size = tuple(
        conv_transpose_output_size(*args)
        for args in zip(x.shape[2:], kernel, stride, padding, output_padding, dilation)
    )
    if any(n < 1 for n in out_size):
        raise SizeMismatchError(
            f"{fn}: the output size {shape_text(out_size)} is not positive (padding "
            f"{shape_text(padding)} too large); {shapes}"
        )
    bias = _channel_bias(fn, x, bias, weight.shape[1] * groups)
    out = apply(
        TensorOp(fn, kernel="conv_transpose"),
        (x, weight, bias),
        (stride, padding, output_padding, dilation, groups),
    )
    if spatial in (2, 3) and not squeeze:  # torch's output is channels-last if x or weight is
        follow_channels_last(out, x, weight)
    return _unbatched(out, squeeze)


@autocast_op("conv_transpose1d")
def conv_transpose1d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    output_padding: IntOrTuple = 0,
    groups: int = 1,
    dilation: IntOrTuple = 1,
) -> Tensor:
    """1-d transposed convolution, weight ``[C_in, C_out/groups, K]`` (PyTorch's
    ``conv_transpose1d``, argument order included).

    >>> import retrograd as rg
    >>> conv_transpose1d(rg.ones((1, 2, 4)), rg.ones((2, 3, 3)), stride=2).shape
    retrograd.Size([1, 3, 9])
    """
    return _conv_transpose(
        "conv_transpose1d", 1, x, weight, bias, stride, padding, output_padding, groups, dilation
    )


@autocast_op("conv_transpose2d")
def conv_transpose2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    output_padding: IntOrTuple = 0,
    groups: int = 1,
    dilation: IntOrTuple = 1,
) -> Tensor:
    """2-d transposed convolution, weight ``[C_in, C_out/groups, kH, kW]``."""
    return _conv_transpose(
        "conv_transpose2d", 2, x, weight, bias, stride, padding, output_padding, groups, dilation
    )


@autocast_op("conv_transpose3d")
def conv_transpose3d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    output_padding: IntOrTuple = 0,
    groups: int = 1,
    dilation: IntOrTuple = 1,
) -> Tensor:
    """3-d transposed convolution, weight ``[C_in, C_out/groups, kD, kH, kW]``."""
    return _conv_transpose(
        "conv_transpose3d", 3, x, weight, bias, stride, padding, output_padding, groups, dilation
    )
