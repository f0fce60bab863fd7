"""Neural-network functions (PyTorch's signatures and argument meanings).

Layout is PyTorch's: ``[N, C, *spatial]`` (an unbatched ``[C, *spatial]`` input works too).
Convolution, pooling and interpolation run one backend primitive each (see the
"neural-network kernels" section of :class:`~retrograd.backend.Backend`); the rest (linear,
embedding, losses, normalization, dropout) are compositions of tensor operations. Everything
is differentiable, to any order with ``backward(create_graph=True)``.

Bad arguments raise :class:`~retrograd.ShapeError` (or :class:`~retrograd.DTypeError`,
:class:`~retrograd.IndexOutOfRangeError`) naming the function and the shapes at fault, before
anything is computed.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend.sizes import conv_transpose_output_size, pool_output_size
from ..errors import (
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    ShapeError,
)
from ..tensor import Tensor, cat, full
from ..tensor.inplace import assign
from ..tensor.internal import (
    FLOAT_DTYPES,
    Op,
    apply,
    check_indices,
    lift,
    promote,
    shape_text,
    wrap,
)

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "avg_pool1d",
    "avg_pool2d",
    "batch_norm",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cross_entropy",
    "dropout",
    "embedding",
    "gelu",
    "group_norm",
    "interpolate",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_sigmoid",
    "log_softmax",
    "max_pool1d",
    "max_pool1d_with_indices",
    "max_pool2d",
    "max_pool2d_with_indices",
    "mse_loss",
    "pad",
    "relu",
    "rms_norm",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "tanh",
]

IntOrTuple = int | Sequence[int]


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; the gradient at 0 is 0."""
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``, Phi the standard normal CDF; with ``approximate="tanh"``, PyTorch's
    ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``."""
    if approximate == "none":
        return x.gelu()
    if approximate != "tanh":
        raise InvalidArgumentError(
            f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}"
        )
    x = _float_input("gelu", x)
    inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
    return x * 0.5 * (inner.tanh() + 1.0)


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def log_sigmoid(x: Tensor) -> Tensor:
    """``log(sigmoid(x))``, computed without overflow."""
    return x.log_sigmoid()


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)``."""
    return x.silu()


def softplus(x: Tensor, beta: float = 1.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, computed without overflow."""
    return x.softplus(beta)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return x.leaky_relu(negative_slope)


def softmax(x: Tensor, dim: int) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, shifted by the max for stability."""
    return x.softmax(dim)


def log_softmax(x: Tensor, dim: int) -> Tensor:
    return x.log_softmax(dim)


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


# -- argument handling -----------------------------------------------------------------------------
def _ints(fn: str, name: str, value: Any, count: int, minimum: int) -> tuple[int, ...]:
    """``value`` (an int, or one int per spatial dimension) as a tuple of ``count`` ints."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        values = (int(value),) * count
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise ShapeError(
                f"{fn}: {name} must be an int or a tuple of ints, got {value!r}"
            ) from None
        if len(values) == 1:
            values *= count
        if len(values) != count or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values
        ):
            raise ShapeError(
                f"{fn}: {name} must be an int or a tuple of {count} ints, got {value!r}"
            )
        values = tuple(int(v) for v in values)
    if any(v < minimum for v in values):
        bound = "positive" if minimum == 1 else "non-negative"
        raise ShapeError(f"{fn}: {name} must be {bound}, got {value!r}")
    return values


def _as_tensor(fn: str, reference: Tensor, value: Any, name: str) -> Tensor:
    """``value`` (a tensor, array or nested list) on ``reference``'s backend and device."""
    try:
        return lift(reference, value, fn)
    except DTypeError:
        raise DTypeError(f"{fn}: {name} must be a tensor, got {type(value).__name__}") from None


def _float_pair(fn: str, x: Any, other: Any, name: str) -> tuple[Tensor, Tensor]:
    """``x`` and ``other`` on one backend and one float dtype."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"{fn}: input must be a tensor, got {type(x).__name__}")
    other = _as_tensor(fn, x, other, name)
    x, other = promote(x, other, fn)
    if x.dtype not in FLOAT_DTYPES:
        raise DTypeError(f"{fn}: expected float tensors, got {x.dtype} input and {name}")
    return x, other


def _float_input(fn: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{fn}: input must be a tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise DTypeError(f"{fn}: expected a float input, got {x.dtype} {shape_text(x.shape)}")
    return x


def _batched(fn: str, x: Tensor, spatial: int) -> tuple[Tensor, bool]:
    """``x`` with a batch dimension (``[C, *spatial]`` inputs get one, as in PyTorch)."""
    if x.ndim == spatial + 2:
        return x, False
    if x.ndim == spatial + 1:
        return x.unsqueeze_dim(0), True
    raise ShapeError(
        f"{fn}: expected a {spatial + 1}-d (unbatched) or {spatial + 2}-d (batched) input, got "
        f"input {shape_text(x.shape)}"
    )


def _unbatched(out: Tensor, squeeze: bool) -> Tensor:
    return out.squeeze_dim(0) if squeeze else out


def _channel_bias(fn: str, x: Tensor, bias: Any, channels: int) -> Tensor:
    """``bias`` checked to be ``[channels]``, in ``x``'s dtype, or the empty "no bias"."""
    if bias is None:
        return wrap(x, x.backend.zeros((0,), x.dtype, x.device))
    bias = _as_tensor(fn, x, bias, "bias")
    if bias.shape != (channels,):
        raise ShapeError(
            f"{fn}: bias must have shape [{channels}] (one per output channel), got "
            f"{shape_text(bias.shape)}"
        )
    if bias.dtype not in FLOAT_DTYPES:
        raise DTypeError(f"{fn}: bias must be a float tensor, got {bias.dtype}")
    return bias.cast(x.dtype)


# -- linear ---------------------------------------------------------------------------------------
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias``, weight ``[out_features, in_features]`` as in PyTorch.

    >>> import retrograd as rg
    >>> linear(rg.ones((2, 3)), rg.ones((4, 3)), rg.zeros((4,))).shape
    (2, 4)
    """
    fn = "linear"
    x, weight = _float_pair(fn, x, weight, "weight")
    if weight.ndim != 2 or x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        features = x.shape[-1] if x.ndim else "no"
        expected = weight.shape[1] if weight.ndim == 2 else "a 2-d weight [out, in]"
        raise ShapeError(
            f"{fn}: input has {features} features but weight expects {expected}; input "
            f"{shape_text(x.shape)}, weight {shape_text(weight.shape)}"
        )
    lead = x.shape[:-1]
    if bias is not None:
        bias = _as_tensor(fn, x, bias, "bias")
        if bias.shape != (weight.shape[0],):
            raise ShapeError(
                f"{fn}: bias must have shape [{weight.shape[0]}], got {shape_text(bias.shape)}"
            )
    # Flatten leading dimensions: one matrix product, whose weight gradient is one product too.
    flat = x.reshape((-1, x.shape[-1])) if x.ndim > 2 else x
    if x.ndim >= 2 and (bias is None or bias.dtype == x.dtype):
        # one op, PyTorch's addmm: the bias lands in the product's own output, no second array
        empty = bias is None
        bias = wrap(x, x.backend.zeros((0,), x.dtype, x.device)) if empty else bias
        out = apply(_LINEAR, (flat, weight, bias))
    else:  # a vector input, or a bias of another dtype (the result takes the wider one)
        out = flat.matmul(weight.transpose())
        if bias is not None:
            out = out + bias
    if x.ndim > 2:
        out = out.reshape((*lead, weight.shape[0]))
    return out


_LINEAR = Op("linear")


# -- convolution -----------------------------------------------------------------------------------
def _conv(fn, spatial, x, weight, bias, stride, padding, dilation, groups):
    x, weight = _float_pair(fn, x, weight, "weight")
    x, squeeze = _batched(fn, x, spatial)
    if weight.ndim != spatial + 2:
        raise ShapeError(
            f"{fn}: weight must be {spatial + 2}-d [out_channels, in_channels/groups, "
            f"*kernel], got {shape_text(weight.shape)}"
        )
    stride = _ints(fn, "stride", stride, spatial, 1)
    dilation = _ints(fn, "dilation", dilation, spatial, 1)
    groups = _ints(fn, "groups", groups, 1, 1)[0]
    kernel = weight.shape[2:]
    shapes = f"input {shape_text(x.shape)}, weight {shape_text(weight.shape)}"
    same_crop = None
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * spatial
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ShapeError(f"{fn}: padding='same' needs stride 1, got stride {stride}")
            totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
            # PyTorch puts an odd total's extra cell on the right: pad ceil(total/2) on both
            # sides and drop the first output, which read the surplus left cell.
            padding = tuple((t + 1) // 2 for t in totals)
            same_crop = tuple(t % 2 for t in totals)
        else:
            raise ShapeError(
                f"{fn}: padding must be 'valid', 'same', an int or a tuple, got {padding!r}"
            )
    else:
        padding = _ints(fn, "padding", padding, spatial, 0)
    channels, out_channels = x.shape[1], weight.shape[0]
    if channels % groups or out_channels % groups:
        raise ShapeError(
            f"{fn}: groups={groups} must divide the input channels ({channels}) and the output "
            f"channels ({out_channels}); {shapes}"
        )
    if weight.shape[1] * groups != channels:
        raise ShapeError(
            f"{fn}: input has {channels} channels but weight expects "
            f"{weight.shape[1] * groups} (groups={groups}); {shapes}"
        )
    for n, k, p, d in zip(x.shape[2:], kernel, padding, dilation):
        if d * (k - 1) + 1 > n + 2 * p:
            raise ShapeError(
                f"{fn}: kernel {shape_text(kernel)} (dilation {shape_text(dilation)}) is larger "
                f"than the padded input {shape_text(tuple(m + 2 * q for m, q in zip(x.shape[2:], padding)))}; "  # noqa: E501
                f"{shapes}"
            )
    bias = _channel_bias(fn, x, bias, out_channels)
    out = apply(Op(fn, kernel="conv"), (x, weight, bias), (stride, padding, dilation, groups))
    if same_crop is not None and any(same_crop):
        out = out.slice([slice(None), slice(None), *(slice(c, None) for c in same_crop)])
    return _unbatched(out, squeeze)


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
    (1, 3, 5)
    """
    return _conv("conv1d", 1, x, weight, bias, stride, padding, dilation, groups)


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
    (2, 4, 3, 3)
    """
    return _conv("conv2d", 2, x, weight, bias, stride, padding, dilation, groups)


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
    x, weight = _float_pair(fn, x, weight, "weight")
    x, squeeze = _batched(fn, x, spatial)
    if weight.ndim != spatial + 2:
        raise ShapeError(
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
        raise ShapeError(
            f"{fn}: groups={groups} must divide the input channels ({channels}); {shapes}"
        )
    if weight.shape[0] != channels:
        raise ShapeError(
            f"{fn}: input has {channels} channels but weight expects {weight.shape[0]} "
            f"(weight is [in_channels, out_channels/groups, *kernel], groups={groups}); {shapes}"
        )
    kernel = weight.shape[2:]
    out_size = tuple(
        conv_transpose_output_size(*args)
        for args in zip(x.shape[2:], kernel, stride, padding, output_padding, dilation)
    )
    if any(n < 1 for n in out_size):
        raise ShapeError(
            f"{fn}: the output size {shape_text(out_size)} is not positive (padding "
            f"{shape_text(padding)} too large); {shapes}"
        )
    bias = _channel_bias(fn, x, bias, weight.shape[1] * groups)
    out = apply(
        Op(fn, kernel="conv_transpose"),
        (x, weight, bias),
        (stride, padding, output_padding, dilation, groups),
    )
    return _unbatched(out, squeeze)


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
    (1, 3, 9)
    """
    return _conv_transpose(
        "conv_transpose1d", 1, x, weight, bias, stride, padding, output_padding, groups, dilation
    )


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


# -- pooling ---------------------------------------------------------------------------------------
def _pool_args(fn, spatial, x, kernel_size, stride, padding, dilation, ceil_mode):
    kernel = _ints(fn, "kernel_size", kernel_size, spatial, 1)
    no_stride = stride is None or (not isinstance(stride, numbers.Integral) and len(stride) == 0)
    stride = kernel if no_stride else _ints(fn, "stride", stride, spatial, 1)
    padding = _ints(fn, "padding", padding, spatial, 0)
    dilation = _ints(fn, "dilation", dilation, spatial, 1)
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ShapeError(
            f"{fn}: padding {shape_text(padding)} must be at most half the kernel size "
            f"{shape_text(kernel)}; input {shape_text(x.shape)}"
        )
    out_size = tuple(
        pool_output_size(n, k, s, p, d, bool(ceil_mode))
        for n, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)
    )
    if any(n < 1 for n in out_size):
        raise ShapeError(
            f"{fn}: kernel {shape_text(kernel)} (dilation {shape_text(dilation)}) is larger "
            f"than the padded input; input {shape_text(x.shape)}, padding "
            f"{shape_text(padding)}"
        )
    return kernel, stride, padding, dilation


def _avg_pool(
    fn,
    spatial,
    x,
    kernel_size,
    stride,
    padding,
    ceil_mode,
    count_include_pad,
    divisor_override=None,
):
    x, squeeze = _batched(fn, _float_input(fn, x), spatial)
    kernel, stride, padding, _ = _pool_args(
        fn, spatial, x, kernel_size, stride, padding, 1, ceil_mode
    )
    if divisor_override is not None:
        if not isinstance(divisor_override, numbers.Integral) or divisor_override == 0:
            raise InvalidArgumentError(
                f"{fn}: divisor_override must be a nonzero integer, got {divisor_override!r}"
            )
        divisor_override = int(divisor_override)
    pooling = (kernel, stride, padding, bool(ceil_mode), bool(count_include_pad), divisor_override)
    out = apply(Op(fn, kernel="avg_pool"), (x,), pooling)
    return _unbatched(out, squeeze)


def avg_pool1d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """Average over windows of ``kernel_size`` every ``stride`` (default: the kernel size)."""
    return _avg_pool("avg_pool1d", 1, x, kernel_size, stride, padding, ceil_mode, count_include_pad)


def avg_pool2d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """2-d average pooling, PyTorch's ``avg_pool2d`` (``divisor_override``: divide every
    window's sum by it instead).

    >>> import retrograd as rg
    >>> avg_pool2d(rg.ones((1, 1, 4, 4)), 2).tolist()
    [[[[1.0, 1.0], [1.0, 1.0]]]]
    >>> avg_pool2d(rg.ones((1, 1, 4, 4)), 2, divisor_override=1).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    return _avg_pool(
        "avg_pool2d",
        2,
        x,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


def _max_pool(fn, spatial, x, kernel_size, stride, padding, dilation, ceil_mode):
    x, squeeze = _batched(fn, _float_input(fn, x), spatial)
    kernel, stride, padding, dilation = _pool_args(
        fn, spatial, x, kernel_size, stride, padding, dilation, ceil_mode
    )
    pooling = (kernel, stride, padding, dilation, bool(ceil_mode))
    values, indices = apply(Op(fn, kernel="max_pool"), (x,), pooling)
    return _unbatched(values, squeeze), _unbatched(indices, squeeze)


def max_pool1d_with_indices(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(values, indices)`` of 1-d max pooling; int64 indices into the input's last dim."""
    return _max_pool("max_pool1d", 1, x, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d_with_indices(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(values, indices)`` of 2-d max pooling; the int64 indices are flat over ``H*W``, as
    PyTorch's."""
    return _max_pool("max_pool2d", 2, x, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool1d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """Maximum over windows; the gradient goes to each window's (first) maximum."""
    values, indices = max_pool1d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
    return (values, indices) if return_indices else values


def max_pool2d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """2-d max pooling, PyTorch's ``max_pool2d``.

    >>> import retrograd as rg
    >>> max_pool2d(rg.tensor([[[[1.0, 2.0], [4.0, 3.0]]]]), 2).tolist()
    [[[[4.0]]]]
    """
    values, indices = max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
    return (values, indices) if return_indices else values


def _adaptive_avg_pool(fn, spatial, x, output_size):
    x, squeeze = _batched(fn, _float_input(fn, x), spatial)
    if output_size is None or isinstance(output_size, numbers.Integral):
        output_size = (output_size,) * spatial
    output_size = tuple(output_size)
    if len(output_size) == 1:
        output_size *= spatial
    if len(output_size) != spatial:
        raise ShapeError(f"{fn}: output_size must have {spatial} entries, got {output_size!r}")
    # None keeps the input's size, as in PyTorch.
    sizes = tuple(n if o is None else o for o, n in zip(output_size, x.shape[2:]))
    if not all(isinstance(o, numbers.Integral) and o >= 1 for o in sizes):
        raise ShapeError(f"{fn}: output_size must be positive ints, got {output_size!r}")
    if any(n == 0 for n in x.shape[2:]):
        raise ShapeError(f"{fn}: input {shape_text(x.shape)} has an empty spatial dimension")
    out = apply(Op(fn, kernel="adaptive_avg_pool"), (x,), (tuple(int(o) for o in sizes),))
    return _unbatched(out, squeeze)


def adaptive_avg_pool1d(x: Tensor, output_size: int | Sequence[int]) -> Tensor:
    """Average pooling to ``output_size`` cells, PyTorch's windows."""
    return _adaptive_avg_pool("adaptive_avg_pool1d", 1, x, output_size)


def adaptive_avg_pool2d(x: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """Average pooling to ``output_size`` (``None`` keeps a dimension), PyTorch's windows.

    >>> import retrograd as rg
    >>> adaptive_avg_pool2d(rg.ones((2, 3, 7, 5)), 1).shape
    (2, 3, 1, 1)
    """
    return _adaptive_avg_pool("adaptive_avg_pool2d", 2, x, output_size)


# -- interpolation ---------------------------------------------------------------------------------
_INTERPOLATION_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


def interpolate(
    x: Tensor,
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
) -> Tensor:
    """Resize the spatial dimensions to ``size``, or by ``scale_factor``, PyTorch's rules.

    ``mode``: ``"nearest"`` (PyTorch's legacy floor rule; 1 to 3 spatial dims), ``"linear"``
    (3-d input), ``"bilinear"``, ``"bicubic"`` (4-d, A = -0.75) or ``"trilinear"`` (5-d).
    ``align_corners`` maps corner pixel centres onto each other (interpolating modes only).
    With ``scale_factor`` the output is ``floor(size * scale_factor)`` and, unless
    ``recompute_scale_factor``, the scale factor itself maps coordinates, as in PyTorch.

    >>> import retrograd as rg
    >>> interpolate(rg.ones((1, 1, 2, 2)), scale_factor=2, mode="bilinear").shape
    (1, 1, 4, 4)
    """
    fn = "interpolate"
    x = _float_input(fn, x)
    spatial = x.ndim - 2
    if mode == "nearest":
        if not 1 <= spatial <= 3:
            raise ShapeError(
                f"{fn}: mode 'nearest' needs a 3-d to 5-d input, got {shape_text(x.shape)}"
            )
        if align_corners is not None:
            raise InvalidArgumentError(
                f"{fn}: align_corners can only be set with the interpolating "
                "modes (linear, bilinear, bicubic, trilinear)"
            )
    elif mode in _INTERPOLATION_DIMS:
        if spatial != _INTERPOLATION_DIMS[mode]:
            raise ShapeError(
                f"{fn}: mode {mode!r} needs a {_INTERPOLATION_DIMS[mode] + 2}-d input, got "
                f"{shape_text(x.shape)}"
            )
    else:
        raise InvalidArgumentError(
            f"{fn}: mode must be 'nearest', 'linear', 'bilinear', 'bicubic' or 'trilinear', "
            f"got {mode!r}"
        )
    if (size is None) == (scale_factor is None):
        raise ShapeError(f"{fn}: give exactly one of size and scale_factor")
    in_size = x.shape[2:]
    if size is not None:
        out_size = _ints(fn, "size", size, spatial, 1)
        scales = (None,) * spatial
    else:
        if isinstance(scale_factor, numbers.Real):
            factors = (float(scale_factor),) * spatial
        else:
            factors = tuple(float(f) for f in scale_factor)
        if len(factors) != spatial or any(not f > 0 for f in factors):
            raise ShapeError(
                f"{fn}: scale_factor must be positive, one per spatial dimension, got "
                f"{scale_factor!r}"
            )
        out_size = tuple(math.floor(n * f) for n, f in zip(in_size, factors))
        scales = (None,) * spatial if recompute_scale_factor else factors
    if any(n < 1 for n in out_size) or any(n < 1 for n in in_size):
        raise ShapeError(
            f"{fn}: input {shape_text(x.shape)} and output size {shape_text(out_size)} must "
            "be non-empty"
        )
    kernel_mode = "nearest" if mode == "nearest" else ("bicubic" if mode == "bicubic" else "linear")
    return apply(
        Op(fn, kernel="interpolate"), (x,), (out_size, kernel_mode, bool(align_corners), scales)
    )


# -- embedding ------------------------------------------------------------------------------------
def embedding(indices: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of ``weight`` ``[num_embeddings, dim]`` at the int64 ``indices`` (any shape):
    ``[*indices.shape, dim]``. The row at ``padding_idx`` gets no gradient, as in PyTorch.

    >>> import retrograd as rg
    >>> embedding(rg.tensor([[0, 2]], dtype="int64"), rg.eye(3)).tolist()
    [[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]
    """
    fn = "embedding"
    if not isinstance(weight, Tensor):
        raise DTypeError(f"{fn}: weight must be a tensor, got {type(weight).__name__}")
    indices = _as_tensor(fn, weight, indices, "indices")
    if indices.dtype != "int64":
        raise DTypeError(f"{fn}: indices must be int64, got {indices.dtype}")
    if weight.ndim != 2:
        raise ShapeError(
            f"{fn}: weight must be 2-d [num_embeddings, dim], got {shape_text(weight.shape)}"
        )
    count = weight.shape[0]

    def out_of_range(bad: int | None) -> str:
        index = "an index" if bad is None else f"index {bad}"
        return (
            f"{fn}: {index} is out of range for {count} embeddings; indices "
            f"{shape_text(indices.shape)}, weight {shape_text(weight.shape)}"
        )

    check_indices(indices, count, out_of_range)
    flat = indices.reshape((-1,))
    rows = weight.select(0, flat)
    if padding_idx is not None:
        if not -count <= padding_idx < count:
            raise IndexOutOfRangeError(
                f"{fn}: padding_idx {padding_idx} is out of range for {count} embeddings"
            )
        padding = (flat == (padding_idx % count)).reshape((-1, 1))
        rows = rows.mask_where(padding, weight.detach().select(0, flat))
    return rows.reshape((*indices.shape, weight.shape[1]))


# -- losses ----------------------------------------------------------------------------------------
def _reduction(fn: str, reduction: str, size_average: bool | None, reduce: bool | None) -> str:
    """``reduction``, or what PyTorch's deprecated ``size_average``/``reduce`` say instead."""
    if size_average is not None or reduce is not None:
        if reduce is False:
            reduction = "none"
        else:
            reduction = "sum" if size_average is False else "mean"
    if reduction not in ("mean", "sum", "none"):
        raise InvalidArgumentError(
            f"{fn}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
        )
    return reduction


def _reduce(losses: Tensor, reduction: str, total: Tensor | None = None) -> Tensor:
    """``losses`` reduced; ``"mean"`` divides the sum by ``total`` when given (a weighted
    mean), by the number of losses otherwise."""
    if reduction == "none":
        return losses
    if reduction == "sum" or total is not None:
        summed = losses.sum()
        return summed if reduction == "sum" else summed / total
    return losses.mean()


def _class_weights(fn: str, logits: Tensor, weight: Any, classes: int, class_dim: int) -> Tensor:
    """``weight`` ``[C]`` checked, in the logits' dtype, shaped to broadcast along classes."""
    weight = _as_tensor(fn, logits, weight, "weight")
    if weight.shape != (classes,) or weight.dtype not in FLOAT_DTYPES:
        raise ShapeError(
            f"{fn}: weight must be a float tensor of one value per class, shape [{classes}]; "
            f"got {weight.dtype} {shape_text(weight.shape)}, input {shape_text(logits.shape)}"
        )
    shape = [1] * logits.ndim
    shape[class_dim] = classes
    return weight.cast(logits.dtype).reshape(tuple(shape))


def cross_entropy(
    logits: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy of ``logits`` ``[N, C]`` or ``[N, C, d...]`` (or unbatched ``[C]``)
    against class indices (int64 ``[N, d...]``) or class probabilities (float, the logits'
    shape), through ``log_softmax`` so that large logits stay finite. PyTorch's arguments:
    ``weight`` ``[C]`` rescales each class, ``label_smoothing`` mixes the target with the
    uniform distribution; ``"mean"`` divides by the summed weights of the non-ignored targets
    (class indices; their count without ``weight``) or by ``N * d...`` (probabilities).
    ``size_average``/``reduce`` are PyTorch's deprecated spellings of ``reduction``.

    >>> import retrograd as rg
    >>> round(cross_entropy(rg.zeros((2, 4)), rg.tensor([1, 3], dtype="int64")).item(), 4)
    1.3863
    """
    fn = "cross_entropy"
    logits = _float_input(fn, logits)
    reduction = _reduction(fn, reduction, size_average, reduce)
    if not 0.0 <= label_smoothing <= 1.0:
        raise InvalidArgumentError(
            f"{fn}: label_smoothing must be in [0, 1], got {label_smoothing!r}"
        )
    target = _as_tensor(fn, logits, target, "target")
    shapes = f"input {shape_text(logits.shape)}, target {shape_text(target.shape)}"
    if logits.ndim == 0:
        raise ShapeError(f"{fn}: input needs a class dimension; {shapes}")
    class_dim = 0 if logits.ndim == 1 else 1
    classes = logits.shape[class_dim]
    weights = None if weight is None else _class_weights(fn, logits, weight, classes, class_dim)
    log_probs = logits.log_softmax(class_dim)

    def per_target(values: Tensor) -> Tensor:  # -sum over classes, the class dim removed
        if weights is not None:
            values = values * weights
        return -values.sum_dim(class_dim).squeeze_dim(class_dim)

    if target.dtype in FLOAT_DTYPES:
        if target.shape != logits.shape:
            raise ShapeError(f"{fn}: probability targets must have the input's shape; {shapes}")
        if ignore_index != -100:
            raise InvalidArgumentError(
                f"{fn}: ignore_index ({ignore_index}) applies to class-index targets, not to "
                f"probabilities; {shapes}"
            )
        target = target.cast(logits.dtype)
        if label_smoothing:
            target = target * (1.0 - label_smoothing) + label_smoothing / classes
        return _reduce(per_target(log_probs * target), reduction)
    if target.dtype != "int64":
        raise DTypeError(
            f"{fn}: target must be int64 class indices or float probabilities, got {target.dtype}"
        )
    expected = logits.shape[:class_dim] + logits.shape[class_dim + 1 :]
    if target.shape != expected:
        raise ShapeError(
            f"{fn}: class-index targets must have shape {shape_text(expected)} (the input's "
            f"without the class dimension); {shapes}"
        )

    def out_of_range(bad: int | None) -> str:
        value = "a target" if bad is None else f"target {bad}"
        return f"{fn}: {value} is out of range for {classes} classes; {shapes}"

    check_indices(target, classes, out_of_range, ignore_index)
    # The ignored targets are masked whether there are any or not: finding out would read the
    # targets on the host, a synchronisation on a device backend. Masking nothing changes no
    # value.
    ignored = target.equal_elem(ignore_index)
    index = target.mask_fill(ignored, 0).unsqueeze_dim(class_dim)
    losses = -log_probs.gather(class_dim, index).squeeze_dim(class_dim)
    # What "mean" divides by: the weights of the targets that count (their number without
    # weights; all ignored gives 0/0 = nan, as in PyTorch).
    total = None
    if weights is not None:
        picked = weights.expand(logits.shape).gather(class_dim, index).squeeze_dim(class_dim)
        losses = losses * picked
        if reduction == "mean":
            total = picked.mask_fill(ignored, 0.0).sum()
    if label_smoothing:
        uniform = per_target(log_probs) * (label_smoothing / classes)
        losses = losses * (1.0 - label_smoothing) + uniform
    losses = losses.mask_fill(ignored, 0.0)
    if weights is None and reduction == "mean":
        # The sum over the number of targets that count; with none ignored, mean(), the op
        # this loss has always ended with (and that graphs show). The backend picks one, as
        # the host would have to read the targets to know which applies.
        counted = (~ignored).sum()
        by_count = losses.sum() / counted.cast(logits.dtype)
        return by_count.mask_where(counted.equal_elem(losses.numel()), losses.mean())
    return _reduce(losses, reduction, total)


def mse_loss(
    x: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Tensor | None = None,
) -> Tensor:
    """Mean squared error ``mean((x - target)**2)``, PyTorch's arguments: ``weight`` (the
    input's shape) scales each squared error and ``"mean"`` then divides by its sum.
    Unlike PyTorch, a target of another shape is an error, not broadcast with a warning."""
    fn = "mse_loss"
    x, target = _float_pair(fn, x, target, "target")
    reduction = _reduction(fn, reduction, size_average, reduce)
    if x.shape != target.shape:
        raise ShapeError(
            f"{fn}: input and target shapes differ; input {shape_text(x.shape)}, target "
            f"{shape_text(target.shape)}"
        )
    errors = (x - target).square()
    if weight is None:
        return _reduce(errors, reduction)
    weight = _as_tensor(fn, x, weight, "weight")
    if weight.shape != x.shape:
        raise ShapeError(
            f"{fn}: weight and input shapes differ; input {shape_text(x.shape)}, weight "
            f"{shape_text(weight.shape)}"
        )
    weight = weight.cast(x.dtype)
    return _reduce(errors * weight, reduction, weight.sum() if reduction == "mean" else None)


# -- normalization, dropout ------------------------------------------------------------------------
def layer_norm(
    x: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize over the trailing ``normalized_shape`` dims (biased variance, as PyTorch),
    then scale by ``weight`` and shift by ``bias`` (both of ``normalized_shape``)."""
    fn = "layer_norm"
    x = _float_input(fn, x)
    shape = _ints(
        fn,
        "normalized_shape",
        normalized_shape,
        1 if isinstance(normalized_shape, numbers.Integral) else len(normalized_shape),
        1,
    )
    k = len(shape)
    if x.shape[x.ndim - k :] != shape or x.ndim < k:
        raise ShapeError(
            f"{fn}: normalized_shape {shape_text(shape)} must match the input's trailing "
            f"dimensions; input {shape_text(x.shape)}"
        )
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None and _as_tensor(fn, x, value, name).shape != shape:
            raise ShapeError(
                f"{fn}: {name} must have shape {shape_text(shape)}, got "
                f"{shape_text(_as_tensor(fn, x, value, name).shape)}"
            )
    lead = x.shape[: x.ndim - k]
    width = math.prod(shape)
    flat = x.reshape((*lead, width)) if k != 1 else x
    affine = []
    for name, value in (("weight", weight), ("bias", bias)):
        if value is None:
            affine.append(wrap(x, x.backend.zeros((0,), x.dtype, x.device)))
        else:
            value = _as_tensor(fn, x, value, name).cast(x.dtype)
            affine.append(value.reshape((width,)) if k != 1 else value)
    out, _ = apply(_LAYER_NORM, (flat, *affine), (float(eps),))
    return out.reshape(x.shape) if k != 1 else out


_LAYER_NORM = Op("layer_norm")


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``;
    the identity unless ``training``. ``rg.seed`` makes the mask reproducible.

    The mask is drawn once, here, as an untracked tensor, so the recorded graph is a plain
    product that recomputes exactly under any checkpointing strategy.
    """
    fn = "dropout"
    x = _float_input(fn, x)
    if not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"{fn}: probability p must be between 0 and 1, got {p!r}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = wrap(x, x.backend.bernoulli(x.shape, 1.0 - float(p), x.device))
    return x * (keep.cast(x.dtype) * (1.0 / (1.0 - float(p))))


_PAD_MODES = {"constant": None, "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pad (or, with negative entries, crop) the last dimensions, as ``torch.nn.functional.pad``.

    ``pad`` lists ``(left, right)`` amounts starting from the *last* dimension:
    ``(l, r)`` pads the last one, ``(l, r, t, b)`` the last two. ``mode="constant"`` fills with
    ``value``; ``"reflect"``, ``"replicate"`` and ``"circular"`` repeat the input's own values
    as torch does. Differentiable: a crop is a slice, constant padding a concatenation with
    untracked filled blocks, the other modes a ``select`` of the input's entries (built from
    host index arrays: the pad amounts are host values already), so the gradient of each padded
    element flows back to the element it copies.

    >>> import retrograd as rg
    >>> pad(rg.ones((1, 2)), (1, -1), value=5.0).tolist()
    [[5.0, 1.0]]
    """
    fn = "pad"
    if mode not in _PAD_MODES:
        raise InvalidArgumentError(
            f"{fn}: mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}"
        )
    if not isinstance(x, Tensor):
        raise DTypeError(f"{fn}: expected a tensor, got {type(x).__name__}")
    amounts = list(pad)
    if any(not isinstance(n, numbers.Integral) or isinstance(n, bool) for n in amounts):
        raise ShapeError(f"{fn}: pad must hold ints, got {amounts!r}")
    if len(amounts) % 2 or len(amounts) > 2 * x.ndim:
        raise ShapeError(
            f"{fn}: pad {amounts} must hold a (left, right) pair for each of at most the "
            f"{x.ndim} dimensions of the input of shape {shape_text(x.shape)}"
        )
    out = x
    for pair in range(len(amounts) // 2):
        dim = x.ndim - 1 - pair
        left, right = int(amounts[2 * pair]), int(amounts[2 * pair + 1])
        size = out.shape[dim]
        # Crops first (torch applies negative amounts as crops).
        start, stop = max(0, -left), size - max(0, -right)
        if stop < start:
            raise ShapeError(
                f"{fn}: pad ({left}, {right}) crops more than dimension {dim} of size {size} "
                f"(input shape {shape_text(x.shape)})"
            )
        if (start, stop) != (0, size):
            out = out.narrow(dim, start, stop - start)
        left, right = max(0, left), max(0, right)
        if not (left or right):
            continue
        if mode == "constant":
            parts = []
            for amount in (left, right):
                shape = out.shape[:dim] + (amount,) + out.shape[dim + 1 :]
                parts.append(full(shape, value, out.dtype, out.backend, out.device))
            out = cat([parts[0], out, parts[1]], dim)
            continue
        kept = out.shape[dim]
        limit = kept - 1 if mode == "reflect" else (kept if mode == "circular" else None)
        if kept == 0 or (limit is not None and max(left, right) > limit):
            raise ShapeError(
                f"{fn}: {mode} padding ({left}, {right}) needs dimension {dim} larger than the "
                f"padding, got size {kept} (input shape {shape_text(x.shape)})"
            )
        indices = np.pad(np.arange(kept, dtype=np.int64), (left, right), mode=_PAD_MODES[mode])
        out = out.select(dim, indices)
    return out


# -- batch, group and RMS normalization (PyTorch's signatures) ------------------------------------
def _mean_over(fn: str, x: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Mean over several ``dims`` at once (kept with size 1): one reduction, one node."""
    return apply(Op(fn, kernel="mean_dim", floats=True), (x,), (dims,))


def _channel_param(fn: str, x: Tensor, value: Any, name: str, channels: int) -> Tensor | None:
    """A per-channel tensor (``[C]``) checked, in ``x``'s dtype, shaped ``[1, C, 1, ...]``."""
    if value is None:
        return None
    value = _as_tensor(fn, x, value, name)
    if value.shape != (channels,):
        raise ShapeError(
            f"{fn}: {name} must have shape [{channels}] (one value per channel), got "
            f"{shape_text(value.shape)}; input {shape_text(x.shape)}"
        )
    return value.cast(x.dtype).reshape((1, channels) + (1,) * (x.ndim - 2))


def batch_norm(
    input: Tensor,  # noqa: A002 (PyTorch's name)
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalization of ``input`` ``[N, C, *]`` per channel, as ``torch.nn.functional.
    batch_norm``.

    ``training``: normalize by the batch's mean and biased variance over ``N`` and the spatial
    dims; the running statistics given are updated *in place* (PyTorch's semantics),
    ``running = (1 - momentum) running + momentum stat``, with the unbiased variance. The update
    is not recorded in any graph. Otherwise normalize by ``running_mean`` / ``running_var``.

    >>> import retrograd as rg
    >>> mean, var = rg.zeros((2,)), rg.ones((2,))
    >>> x = rg.tensor([[1.0, 2.0], [3.0, 6.0]], dtype="float64")
    >>> out = batch_norm(x, mean, var, training=True, eps=0.0)
    >>> out.tolist(), [round(v, 6) for v in mean.tolist()]
    ([[-1.0, -1.0], [1.0, 1.0]], [0.2, 0.4])
    """
    fn = "batch_norm"
    x = _float_input(fn, input)
    if x.ndim < 2:
        raise ShapeError(f"{fn}: input must be [N, C, *], got {shape_text(x.shape)}")
    channels = x.shape[1]
    stats = [
        _channel_param(fn, x, v, n, channels)
        for v, n in ((running_mean, "running_mean"), (running_var, "running_var"))
    ]
    if (running_mean is None) != (running_var is None):
        raise InvalidArgumentError(f"{fn}: give both running_mean and running_var, or neither")
    scale = _channel_param(fn, x, weight, "weight", channels)
    shift = _channel_param(fn, x, bias, "bias", channels)
    if training:
        dims = (0, *range(2, x.ndim))
        count = x.numel() // channels if channels else 0
        if count <= 1:
            raise InvalidArgumentError(
                f"{fn}: expected more than 1 value per channel when training, got input "
                f"{shape_text(x.shape)}"
            )
        mean = _mean_over(fn, x, dims)
        centered = x - mean
        variance = _mean_over(fn, centered.square(), dims)
        out = centered * (variance + float(eps)).sqrt().recip()
        if running_mean is not None:
            # Statistics cut from the graph: the update is state, not part of the function.
            m = float(momentum)
            batch_mean = mean.detach().reshape((channels,))
            batch_var = variance.detach().reshape((channels,)) * (count / (count - 1))
            for buffer, stat in ((running_mean, batch_mean), (running_var, batch_var)):
                old = buffer.detach().cast(x.dtype)
                assign(buffer, old * (1.0 - m) + stat * m, fn)
    else:
        if running_mean is None:
            raise InvalidArgumentError(
                f"{fn}: running_mean and running_var are needed when not training"
            )
        mean, variance = stats
        out = (x - mean) * (variance + float(eps)).sqrt().recip()
    if scale is not None:
        out = out * scale
    if shift is not None:
        out = out + shift
    return out


def group_norm(
    input: Tensor,  # noqa: A002 (PyTorch's name)
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize ``input`` ``[N, C, *]`` over each of ``num_groups`` groups of channels (with
    the spatial dims; biased variance), then scale and shift per channel, as PyTorch's.

    >>> import retrograd as rg
    >>> group_norm(rg.tensor([[1.0, 3.0, 5.0, 9.0]]), 2, eps=0.0).tolist()
    [[-1.0, 1.0, -1.0, 1.0]]
    """
    fn = "group_norm"
    x = _float_input(fn, input)
    if x.ndim < 2:
        raise ShapeError(f"{fn}: input must be [N, C, *], got {shape_text(x.shape)}")
    channels = x.shape[1]
    if not isinstance(num_groups, numbers.Integral) or num_groups < 1 or channels % num_groups:
        raise InvalidArgumentError(
            f"{fn}: {channels} channels cannot be split into num_groups={num_groups!r} groups; "
            f"input {shape_text(x.shape)}"
        )
    scale = _channel_param(fn, x, weight, "weight", channels)
    shift = _channel_param(fn, x, bias, "bias", channels)
    grouped = x.reshape((x.shape[0], int(num_groups), -1))
    centered = grouped - grouped.mean_dim(-1)
    variance = centered.square().mean_dim(-1)
    out = (centered * (variance + float(eps)).sqrt().recip()).reshape(x.shape)
    if scale is not None:
        out = out * scale
    if shift is not None:
        out = out + shift
    return out


#: ``torch.finfo(dtype).eps``: the default ``eps`` of :func:`rms_norm`
_MACHINE_EPSILON = {"float32": 2.0**-23, "float64": 2.0**-52}


def rms_norm(
    input: Tensor,  # noqa: A002 (PyTorch's name)
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` dims, as
    ``torch.nn.functional.rms_norm`` (``eps=None``: the machine epsilon of the dtype).

    >>> import retrograd as rg
    >>> x = rg.tensor([[3.0, 4.0]], dtype="float64")
    >>> [round(v, 6) for v in rms_norm(x, 2, eps=0.0).tolist()[0]]  # rms = sqrt(12.5)
    [0.848528, 1.131371]
    """
    fn = "rms_norm"
    x = _float_input(fn, input)
    shape = _ints(
        fn,
        "normalized_shape",
        normalized_shape,
        1 if isinstance(normalized_shape, numbers.Integral) else len(normalized_shape),
        1,
    )
    k = len(shape)
    if x.ndim < k or x.shape[x.ndim - k :] != shape:
        raise ShapeError(
            f"{fn}: normalized_shape {shape_text(shape)} must match the input's trailing "
            f"dimensions; input {shape_text(x.shape)}"
        )
    if eps is None:
        eps = _MACHINE_EPSILON[x.dtype]
    dims = tuple(range(x.ndim - k, x.ndim))
    out = x * (_mean_over(fn, x.square(), dims) + float(eps)).sqrt().recip()
    if weight is not None:
        weight = _as_tensor(fn, x, weight, "weight")
        if weight.shape != shape:
            raise ShapeError(
                f"{fn}: weight must have shape {shape_text(shape)}, got {shape_text(weight.shape)}"
            )
        out = out * weight.cast(x.dtype)
    return out


# -- attention -------------------------------------------------------------------------------------
_ATTENTION = Op("scaled_dot_product_attention", kernel="attention")


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``dropout(softmax(query @ key^T * scale + mask)) @ value``, PyTorch's function.

    ``query`` ``[..., L, E]``, ``key`` ``[..., S, E]``, ``value`` ``[..., S, Ev]`` with equal
    leading dimensions; ``attn_mask`` broadcastable to ``[..., L, S]``: bool keeps the keys
    where it is true, float is added to the scores; ``is_causal`` keeps key ``j <= i`` for
    query ``i`` (top-left aligned, as PyTorch; not together with ``attn_mask``); ``scale``
    defaults to ``1 / sqrt(E)``; ``dropout_p`` drops probabilities from the seeded generator
    (``rg.seed``). One fused op (the backend's ``attention``): backward keeps the output and
    each row's log-sum-exp, never the ``[..., L, S]`` probabilities. A float mask that requires
    a gradient gets one: the attention is then composed of ordinary ops.
    """
    fn = "scaled_dot_product_attention"
    q = _float_input(fn, query)
    k, v = (_as_tensor(fn, q, t, name) for t, name in ((key, "key"), (value, "value")))
    shapes = f"query {shape_text(q.shape)}, key {shape_text(k.shape)}, value {shape_text(v.shape)}"
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ShapeError(
            f"{fn}: query, key and value need the same number (>= 2) of dims; {shapes}"
        )
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise DTypeError(f"{fn}: query, key and value must have one float dtype; {shapes}")
    length, source = q.shape[-2], k.shape[-2]
    if (
        k.shape[:-2] != q.shape[:-2]
        or v.shape[:-2] != q.shape[:-2]
        or k.shape[-1] != q.shape[-1]
        or v.shape[-2] != source
    ):
        raise ShapeError(
            f"{fn}: expected query [..., L, E], key [..., S, E] and value [..., S, Ev] with "
            f"equal leading dimensions; {shapes}"
        )
    if not isinstance(dropout_p, numbers.Real) or not 0.0 <= dropout_p <= 1.0:
        raise InvalidArgumentError(f"{fn}: dropout_p must be between 0 and 1, got {dropout_p!r}")
    if is_causal and attn_mask is not None:
        raise InvalidArgumentError(f"{fn}: give attn_mask or is_causal, not both")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    empty = wrap(q, q.backend.zeros((0,), q.dtype, q.device))
    mask = empty
    if attn_mask is not None:
        mask = _as_tensor(fn, q, attn_mask, "attn_mask")
        target = (*q.shape[:-2], length, source)
        try:
            broadcast = _broadcast_shape(mask.shape, target)
        except ValueError:
            broadcast = None
        if broadcast != target:
            raise ShapeError(
                f"{fn}: attn_mask {shape_text(mask.shape)} does not broadcast to the scores "
                f"{shape_text(target)}; {shapes}"
            )
        if mask.dtype == "bool":
            mask = wrap(q, q.backend.zeros(mask.shape, q.dtype, q.device)).mask_fill(
                ~mask, -math.inf
            )
        elif mask.dtype in FLOAT_DTYPES:
            mask = mask.cast(q.dtype)
        else:
            raise DTypeError(f"{fn}: attn_mask must be bool or float, got {mask.dtype}")
        mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape)
    drop = empty
    if dropout_p == 1.0:
        drop = wrap(q, q.backend.zeros((*q.shape[:-2], length, source), q.dtype, q.device))
    elif dropout_p > 0.0:
        keep = wrap(
            q, q.backend.bernoulli((*q.shape[:-2], length, source), 1.0 - dropout_p, q.device)
        )
        drop = keep.cast(q.dtype) * (1.0 / (1.0 - dropout_p))
    if mask.requires_grad:
        return _composed_attention(q, k, v, mask, drop, scale, is_causal)
    out, _ = apply(_ATTENTION, (q, k, v, mask, drop), (scale, bool(is_causal)))
    return out


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast of two shapes (``ValueError`` where they do not broadcast)."""
    if len(a) > len(b):
        raise ValueError
    a = (1,) * (len(b) - len(a)) + a
    if any(m != n and m != 1 for m, n in zip(a, b)):
        raise ValueError
    return b


def _composed_attention(q, k, v, mask, drop, scale, causal):
    """Attention of ordinary ops, for a float mask that requires a gradient."""
    scores = q.matmul(k.swap_dims(-1, -2)) * scale + mask
    if causal:
        length, source = q.shape[-2], k.shape[-2]
        rows = wrap(q, q.backend.arange(0, length, 1, "int64", q.device)).reshape((length, 1))
        cols = wrap(q, q.backend.arange(0, source, 1, "int64", q.device)).reshape((1, source))
        hidden = rows < cols
        scores = scores.mask_fill(hidden, -math.inf)
    probs = scores.softmax(-1)
    if drop.numel():
        probs = probs * drop
    return probs.matmul(v)
