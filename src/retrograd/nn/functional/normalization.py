"""Layer, batch, group, RMS and local response normalization, and dropout (alpha dropout
included)."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

from ...errors import (
    ArgumentTypeError,
    AutodiffError,
    DivisionByZeroError,
    InvalidArgumentError,
    KernelArgumentError,
    MixedDTypeError,
    ShapeError,
    SizeMismatchError,
)
from ...tensor import Tensor
from ...tensor.autocasting import autocast_op
from ...tensor.functions import kernel_bias, kernel_read_inputs
from ...tensor.inplace import assign, write_out
from ...tensor.internal import (
    TensorOp,
    apply,
    follow_channels_last,
    lay_out,
    reported,
    shape_text,
    wrap,
)
from ...tensor.layouts import contiguous_format
from ._common import (
    _PLAIN_DTYPES,
    _as_tensor,
    _float_input,
    _ints,
    _real,
)


# -- normalization, dropout ------------------------------------------------------------------------
@autocast_op("layer_norm")
def layer_norm(
    x: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize over the trailing ``normalized_shape`` dims (biased variance, as PyTorch),
    then scale by ``weight`` and shift by ``bias`` (both of ``normalized_shape``)."""
    if type(eps) is float and isinstance(x, Tensor):
        out = _plain_layer_norm(x, normalized_shape, weight, bias, eps)
        if out is not None:
            return out
    fn = "layer_norm"
    eps = _real(fn, "eps", eps)
    x = _float_input(fn, x)
    shape = _ints(
        fn,
        "normalized_shape",
        normalized_shape,
        1 if isinstance(normalized_shape, numbers.Integral) else len(normalized_shape),
        0,  # torch normalizes over a zero-size shape too: an empty result
    )
    if not shape:
        raise SizeMismatchError(  # (torch's RuntimeError)
            f"{fn}: normalized_shape must have at least one dimension, got ()"
        )
    k = len(shape)
    if x.shape[x.ndim - k :] != shape or x.ndim < k:
        raise SizeMismatchError(  # (torch's RuntimeError: "Given normalized_shape=...")
            f"{fn}: normalized_shape {shape_text(shape)} must match the input's trailing "
            f"dimensions; input {shape_text(x.shape)}"
        )
    _check_parameter_dtypes(fn, x, (("weight", weight), ("bias", bias)))
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None and _as_tensor(fn, x, value, name).shape != shape:
            raise ShapeError(
                f"{fn}: {name} must have shape {shape_text(shape)}, got "
                f"{shape_text(_as_tensor(fn, x, value, name).shape)}"
            )
    lead = x.shape[: x.ndim - k]
    width = math.prod(shape)
    if width == 0:
        # nothing to normalize (torch's result is empty too): the empty output still reads
        # weight and bias, so their gradients are empty tensors of their shapes, as torch's
        out = x * 0.0
        for name, value in (("weight", weight), ("bias", bias)):
            if value is not None:
                out = out + _as_tensor(fn, x, value, name).cast(x.dtype) * 0.0
        return out
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


_LAYER_NORM = TensorOp("layer_norm")


def _plain_layer_norm(
    x: Tensor, normalized_shape: Any, weight: Any, bias: Any, eps: float
) -> Tensor | None:
    """A layer's call, the one every forward makes: a float32/float64 input normalized over
    its last dimension (``normalized_shape`` an int or a tuple of one), with weight and bias
    of that width (or none) of the input's dtype, backend and device. The one op
    :func:`layer_norm`'s general path records for it, without that path's checks, lifts and
    casts, which are no-ops here. None for any other call: the general path takes it, and
    its errors."""
    dtype = x.dtype
    if dtype not in _PLAIN_DTYPES:
        return None
    kind = type(normalized_shape)
    if kind is tuple and len(normalized_shape) == 1:
        width = normalized_shape[0]
    elif kind is int:
        width = normalized_shape
    else:
        return None
    shape = x.shape
    if type(width) is not int or width <= 0 or not shape or shape[-1] != width:
        return None
    backend, device = x.backend, x.device
    affine = []
    for value in (weight, bias):
        if value is None:
            affine.append(wrap(x, backend.zeros((0,), dtype, device)))
        elif (
            isinstance(value, Tensor)
            and value.dtype == dtype
            and value.backend is backend
            and value.device is device
            and value.shape == (width,)
        ):
            affine.append(value)
        else:
            return None
    out, _ = apply(_LAYER_NORM, (x, *affine), (eps,))
    return out


def _dropout_input(fn: str, x: Any, p: Any, training: Any, *, complex_ok: bool) -> Tensor:
    """``x`` for a dropout: a float tensor (a complex one too where ``complex_ok``), or,
    where the dropout draws no mask (not ``training``; ``p`` 0 or 1; an empty input), a
    tensor of any dtype: torch's dropouts return an integer or bool input then (zeros of its
    dtype for ``p`` 1) and refuse it only where they would draw."""
    if isinstance(x, Tensor) and not x.is_floating_point():
        no_mask = not training or p in (0.0, 1.0) or x.numel() == 0
        if no_mask or (complex_ok and x.is_complex()):
            return x
    return _float_input(fn, x)


def _all_dropped(x: Tensor) -> Tensor:
    """The result of a dropout with ``p`` 1: zeros of ``x``'s dtype, still recorded on
    ``x`` where it requires grad (a zero gradient, as torch's)."""
    return x * 0.0 if x.is_floating_point() or x.is_complex() else x.new_zeros(x.shape)


def dropout(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``;
    the identity unless ``training``. ``rg.seed`` makes the mask reproducible.

    The mask is drawn once, here, as an untracked tensor, so the recorded graph is a plain
    product that recomputes exactly under any checkpointing strategy.
    """
    fn = "dropout"
    x = _dropout_input(fn, x, p, training, complex_ok=True)
    if not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"{fn}: probability p must be between 0 and 1, got {p!r}")
    if not training or p == 0.0 or x.numel() == 0:
        return x
    if p == 1.0:
        return _all_dropped(x)
    keep = wrap(x, x.backend.bernoulli(x.shape, 1.0 - float(p), x.device))
    return x * (keep.cast(x.dtype) * (1.0 / (1.0 - float(p))))


def _feature_dropout(fn: str, x: Tensor, p: float, training: bool, spatial: int) -> Tensor:
    """Zero whole channels with probability ``p``, scaling the rest by ``1 / (1 - p)``:
    torch's ``dropout1d/2d/3d``, whose channel dimension is not always the one the name says.

    ``dropout1d`` takes ``[N, C, L]`` or unbatched ``[C, L]``. ``dropout3d`` takes
    ``[N, C, D, H, W]``; any other rank is read as unbatched, its first dimension the channels.
    ``dropout2d`` always reads dimension 1 as the channels, so a 3-d input is ``[N, C, L]``
    (not unbatched ``[C, H, W]``) and a 2-d one ``[N, C]`` is element-wise dropout. Ranks
    other than the documented ones warn, as torch does.
    """
    x = _dropout_input(fn, x, p, training, complex_ok=False)
    if not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"{fn}: probability p must be between 0 and 1, got {p!r}")
    documented = (spatial + 1, spatial + 2)
    if spatial == 1 and x.ndim not in documented:
        raise ShapeError(f"{fn}: expected a 2-d or 3-d input, got {shape_text(x.shape)}")
    batched = x.ndim == spatial + 2 if spatial != 2 else True
    if spatial == 2 and x.ndim == 3:
        warnings.warn(
            f"{fn}: received a 3-d input, read as [N, C, L] (channel-wise 1-d dropout) as torch "
            "reads it for now; torch will read it as unbatched [C, H, W] in a future release",
            UserWarning,
            stacklevel=3,
        )
    elif x.ndim not in documented:
        warnings.warn(
            f"{fn}: received a {x.ndim}-d input; torch deprecates this (it expects "
            f"{documented[0]}-d or {documented[1]}-d) and zeroes whole slices along dimension "
            f"{1 if batched else 0}",
            UserWarning,
            stacklevel=3,
        )
    if not training or p == 0.0 or x.numel() == 0:
        return x
    if p == 1.0:
        return _all_dropped(x)
    if x.ndim < (2 if batched else 1):  # (torch checks the rank only where it draws a mask)
        raise ShapeError(
            f"{fn}: feature dropout needs at least 2 dimensions [N, C, *], got "
            f"{shape_text(x.shape)}"
        )
    lead = 2 if batched else 1
    mask_shape = x.shape[:lead] + (1,) * (x.ndim - lead)
    keep = wrap(x, x.backend.bernoulli(mask_shape, 1.0 - float(p), x.device))
    return x * (keep.cast(x.dtype) * (1.0 / (1.0 - float(p))))


def dropout1d(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of ``[N, C, L]`` (or unbatched ``[C, L]``)."""
    return _feature_dropout("dropout1d", x, p, training, 1)


def dropout2d(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of ``[N, C, H, W]`` (torch's ``dropout2d``: dimension 1 is the
    channels at every rank, so ``[N, C, L]`` drops ``[L]`` rows and ``[N, C]`` elements)."""
    return _feature_dropout("dropout2d", x, p, training, 2)


def dropout3d(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of ``[N, C, D, H, W]``; other ranks are unbatched ``[C, *]``."""
    return _feature_dropout("dropout3d", x, p, training, 3)


_SELU_ALPHA_PRIME = 1.7580993408473766  # -scale * alpha of SELU: where alpha dropout sends


def _alpha_dropout(fn: str, x: Tensor, p: float, training: bool, feature: bool) -> Tensor:
    """torch's alpha dropout: dropped elements (whole channels with ``feature``) take SELU's
    negative saturation value, and an affine map ``a x + b`` keeps the mean and variance."""
    x = _dropout_input(fn, x, p, training, complex_ok=False)
    if not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"{fn}: probability p must be between 0 and 1, got {p!r}")
    if not training or p == 0.0 or x.numel() == 0:
        return x
    if p == 1.0:
        return _all_dropped(x)
    if feature and x.ndim < 2:  # (torch checks the rank only where it draws a mask)
        raise ShapeError(
            f"{fn}: feature dropout needs at least 2 dimensions [N, C, *], got "
            f"{shape_text(x.shape)}"
        )
    p = float(p)
    shape = x.shape[:2] + (1,) * (x.ndim - 2) if feature else x.shape
    keep = wrap(x, x.backend.bernoulli(shape, 1.0 - p, x.device)).cast(x.dtype)
    a = 1.0 / math.sqrt((_SELU_ALPHA_PRIME**2 * p + 1.0) * (1.0 - p))
    b = (keep - 1.0) * (_SELU_ALPHA_PRIME * a) + _SELU_ALPHA_PRIME * a * p
    return x * (keep * a) + b


def alpha_dropout(
    x: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False
) -> Tensor:
    """Dropout for self-normalizing (SELU) networks: the identity unless ``training``."""
    return _alpha_dropout("alpha_dropout", x, p, training, False)


def feature_alpha_dropout(
    x: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False
) -> Tensor:
    """:func:`alpha_dropout` of whole channels of ``[N, C, *]`` inputs."""
    return _alpha_dropout("feature_alpha_dropout", x, p, training, True)


def local_response_norm(
    input: Tensor,  # noqa: A002 (torch's name)
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
) -> Tensor:
    """``x / (k + alpha * mean(x**2 over size neighbouring channels))**beta`` (AlexNet's
    normalization), the window zero-padded by ``size // 2`` before and ``(size - 1) // 2``
    after each channel, as torch's.

    >>> import retrograd as rg
    >>> out = local_response_norm(rg.ones((1, 3, 1)), 2, alpha=1.0)
    >>> [round(v, 6) for v in out.flatten().tolist()]
    [0.737788, 0.594604, 0.594604]
    """
    fn = "local_response_norm"
    x = _float_input(fn, input)
    if x.ndim < 3:
        raise ShapeError(
            f"{fn}: expected a 3-d or higher input [N, C, *], got {shape_text(x.shape)}"
        )
    if not isinstance(size, numbers.Integral) or isinstance(size, bool):
        raise ArgumentTypeError(f"{fn}: size must be an int, got {size!r}")
    if size < 1:
        raise KernelArgumentError(  # (torch's RuntimeError: "kernel size should be ...")
            f"{fn}: size must be a positive int, got {size!r}"
        )
    if x.numel() == 0:
        return x
    channels = x.shape[1]
    squares = x.square().reshape((x.shape[0], channels, -1))
    before, after = size // 2, (size - 1) // 2
    zeros = squares.new_zeros
    padded = _cat_dim1([zeros((squares.shape[0], before, squares.shape[2])), squares,
                        zeros((squares.shape[0], after, squares.shape[2]))])  # fmt: skip
    window = padded.narrow(1, 0, channels)
    for offset in range(1, size):
        window = window + padded.narrow(1, offset, channels)
    div = (window.reshape(x.shape) * (alpha / size) + k).pow(beta)
    return x / div


def _cross_map_lrn2d(x: Tensor, size: int, alpha: float, beta: float, k: float) -> Tensor:
    """torch's legacy ``CrossMapLRN2d`` forward, its channel windows as its running sum
    builds them (the first channel stays in every window past the first ``size // 2 + 1``,
    as torch's loop never subtracts it); differentiated exactly, where torch's hand-written
    backward assumes centred windows (and fails for ``size=1``)."""
    fn = "CrossMapLRN2d"
    x = _float_input(fn, x)
    if x.ndim != 4:
        raise ShapeError(f"{fn}: expected a 4-d input [N, C, H, W], got {shape_text(x.shape)}")
    channels = x.shape[1]
    squares = x.square()
    running = squares.cumsum(1)
    pre_pad = int((size - 1) / 2 + 1)
    scales = []
    for c in range(channels):
        scale = running.narrow(1, min(c + pre_pad - 1, channels - 1), 1)
        if c > pre_pad:
            scale = scale - (running.narrow(1, c - pre_pad, 1) - squares.narrow(1, 0, 1))
        scales.append(scale)
    scale = _cat_dim1(scales) * (alpha / size) + k
    return x * scale.pow(-beta)


def _cat_dim1(pieces: list[Tensor]) -> Tensor:
    from ...tensor import cat

    return cat(pieces, 1)


def normalize(
    input: Tensor,  # noqa: A002 (PyTorch's name)
    p: float = 2.0,
    dim: int = 1,
    eps: float = 1e-12,
    out: Any = None,
) -> Tensor:
    """``input / max(||input||_p, eps)`` along ``dim`` (torch's ``normalize``). ``out=`` (the
    power iteration of torch's ``SpectralNorm``, ``normalize(torch.mv(W.t(), u), dim=0,
    out=v)``, which updates the module's buffer) is written in place, resized as torch
    resizes it, and returned; as in torch, not where the result needs a graph."""
    # (a complex input divided by its real norm, as torch's)
    complex_input = isinstance(input, Tensor) and input.is_complex()
    x = input if complex_input else _float_input("normalize", input)
    result = x / x.norm(p, dim, keepdim=True).clamp_min(eps)
    return result if out is None else write_out("normalize", out, result)


def instance_norm(
    input: Tensor,  # noqa: A002 (PyTorch's name)
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Each sample's channels normalized over their spatial dims (``[N, C, *]``), as torch's
    ``instance_norm``: the biased variance normalizes; running statistics, when given, are
    updated with the batch's mean of each instance's mean and unbiased variance."""
    fn = "instance_norm"
    eps = _real(fn, "eps", eps)
    if momentum is not None:
        momentum = _real(fn, "momentum", momentum)
    x = _float_input(fn, input)
    if x.ndim < 3:
        raise ShapeError(f"{fn}: input must be [N, C, *spatial], got {shape_text(x.shape)}")
    if (running_mean is None) != (running_var is None):  # (torch's check, before any other)
        raise InvalidArgumentError(f"{fn}: give both running_mean and running_var, or neither")
    channels = x.shape[1]
    scale = _channel_param(fn, x, weight, "weight", channels)
    shift = _channel_param(fn, x, bias, "bias", channels)
    count = math.prod(x.shape[2:])
    if use_input_stats and count == 1:  # (as torch, whatever the batch: an empty one too)
        raise InvalidArgumentError(
            f"{fn}: expected more than 1 spatial element per channel when training, got "
            f"input {shape_text(x.shape)}"
        )
    if use_input_stats and not x.numel():  # as torch: empty in, empty out, no statistics
        return _affine_only(fn, x, weight, bias, channels)
    if x.numel():  # (torch's running statistics may differ: it casts them)
        _check_parameter_dtypes(fn, x, (("weight", weight), ("bias", bias)))
    if use_input_stats:
        dims = tuple(range(2, x.ndim))
        work = _opmath(x)
        mean = _mean_over(fn, work, dims)
        centered = work - mean
        variance = _mean_over(fn, centered.square(), dims)
        out = (centered * (variance + float(eps)).sqrt().recip()).cast(x.dtype)
        if running_mean is not None and running_var is not None:
            m = float(momentum)
            batch_mean = mean.detach().mean(0).reshape((channels,))
            batch_var = (variance.detach() * (count / (count - 1))).mean(0).reshape((channels,))
            for buffer, stat in ((running_mean, batch_mean), (running_var, batch_var)):
                old = buffer.detach().cast(x.dtype)
                assign(buffer, old * (1.0 - m) + stat.cast(x.dtype) * m, fn)
    else:
        if running_mean is None or running_var is None:
            raise InvalidArgumentError(f"{fn}: use_input_stats=False needs running statistics")
        mean = _channel_param(fn, x, running_mean, "running_mean", channels)
        var = _channel_param(fn, x, running_var, "running_var", channels)
        # (torch's eval-mode batch_norm kernel reads the input: see batch_norm)
        (read,) = kernel_read_inputs(x, derivative="none")
        out = (read - mean) * (var + float(eps)).sqrt().recip()
    if scale is not None:
        # (torch's batch_norm kernel reads the weight: its gradient requires grad where the
        # weight does, with no derivative in it)
        out = out * kernel_read_inputs(scale, derivative="none")[0]
    if shift is not None:
        # (torch's instance_norm is a batch_norm: its bias's gradient comes from the joint
        # kernel with the input and weight)
        out = out + kernel_bias(shift, x, scale)
    # torch normalizes a row-major view of the input's N*C planes: its result is row-major
    # whatever the input's memory format (the elementwise steps here followed a channels-last one)
    lay_out(out, contiguous_format)
    return out


# -- batch, group and RMS normalization (PyTorch's signatures) ------------------------------------
def _check_parameter_dtypes(fn: str, x: Tensor, parameters: Sequence[tuple[str, Any]]) -> None:
    """torch's rule for its normalization kernels: the parameters given (tensors) share the
    input's dtype, or are all float32 for a float16/bfloat16 input; other mixes are refused
    (they are not cast)."""
    given = [(name, value) for name, value in parameters if isinstance(value, Tensor)]
    if x.dtype in _HALF and all(value.dtype == "float32" for _, value in given):
        return
    for name, value in given:
        if value.dtype != x.dtype:
            raise MixedDTypeError(
                f"{fn}: mixed dtypes: the input is {x.dtype} but {name} is {value.dtype}; "
                "the parameters must have the input's dtype (or all be float32 for a "
                "float16/bfloat16 input)"
            )


def _mean_over(fn: str, x: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Mean over several ``dims`` at once (kept with size 1): one reduction, one node."""
    return apply(TensorOp(fn, kernel="mean_dim", floats=True), (x,), (dims,))


def _affine_operands(fn: str, x: Tensor, weight: Any, bias: Any, channels: int) -> list:
    """The weight and bias of a fused normalization op, checked per channel: an absent one is
    the empty ``[0]`` tensor that tells the kernel there is none (one, shared by both)."""
    empty = None
    affine = []
    for value, name in ((weight, "weight"), (bias, "bias")):
        value = _channel_vector(fn, x, value, name, channels)
        if value is None:
            if empty is None:
                empty = wrap(x, x.backend.zeros((0,), x.dtype, x.device))
            value = empty
        affine.append(value)
    return affine


def _channel_vector(fn: str, x: Tensor, value: Any, name: str, channels: int) -> Tensor | None:
    """A per-channel tensor checked, ``[C]`` in ``x``'s dtype (``None`` stays ``None``)."""
    if value is None:
        return None
    value = _as_tensor(fn, x, value, name)
    if value.shape != (channels,):
        raise SizeMismatchError(  # (torch's RuntimeError: "... should contain 4 elements")
            f"{fn}: {name} must have shape [{channels}] (one value per channel), got "
            f"{shape_text(value.shape)}; input {shape_text(x.shape)}"
        )
    return value.cast(x.dtype)


def _channel_param(fn: str, x: Tensor, value: Any, name: str, channels: int) -> Tensor | None:
    """A per-channel tensor (``[C]``) checked, in ``x``'s dtype, shaped ``[1, C, 1, ...]``."""
    value = _channel_vector(fn, x, value, name, channels)
    if value is None:
        return None
    return value.reshape((1, channels) + (1,) * (x.ndim - 2))


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
    >>> mean, var = rg.zeros((2,), dtype="float64"), rg.ones((2,), dtype="float64")
    >>> x = rg.tensor([[1.0, 2.0], [3.0, 6.0]], dtype="float64")
    >>> out = batch_norm(x, mean, var, training=True)
    >>> [[round(v, 4) for v in row] for row in out.tolist()], [round(v, 6) for v in mean.tolist()]
    ([[-1.0, -1.0], [1.0, 1.0]], [0.2, 0.4])
    """
    fn = "batch_norm"
    eps = _real(fn, "eps", eps)
    if momentum is not None:
        momentum = _real(fn, "momentum", momentum)
    x = _float_input(fn, input)
    if x.ndim < 2:
        raise ShapeError(f"{fn}: input must be [N, C, *], got {shape_text(x.shape)}")
    # (torch's checks: a channel of equal values in a batch has variance 0)
    if training and not eps > 0.0:
        raise InvalidArgumentError(f"{fn}: eps must be positive during training, got {eps}")
    if not eps >= 0.0:
        raise InvalidArgumentError(f"{fn}: eps must be non-negative, got {eps}")
    if (running_mean is None) != (running_var is None):
        raise InvalidArgumentError(f"{fn}: give both running_mean and running_var, or neither")
    if x.numel():  # (torch returns an empty batch before its check)
        _check_parameter_dtypes(
            fn,
            x,
            (
                ("weight", weight),
                ("bias", bias),
                ("running_mean", running_mean),
                ("running_var", running_var),
            ),
        )
    if (
        training
        and type(x)._sticky
        and running_mean is not None
        and not (type(running_mean)._sticky and type(running_var)._sticky)
    ):
        # an element of a vmap's batch would update statistics shared by all of them
        raise AutodiffError(
            "Batch norm got a batched tensor as input while the running_mean or running_var, "
            "which will be updated in place, were not batched. If you are using a module and "
            "do not need eval mode, please set `track_running_stats` to be False (or call "
            "torch.func.replace_all_batch_norm_modules_); otherwise give batched running "
            "statistics or compute outside vmap"
        )
    channels = x.shape[1]
    running = [
        _channel_vector(fn, x, value, name, channels)
        for value, name in ((running_mean, "running_mean"), (running_var, "running_var"))
    ]
    if not training:
        if running_mean is None:
            raise KernelArgumentError(  # (torch's RuntimeError)
                f"{fn}: running_mean and running_var are needed when not training"
            )
        column = (1, channels) + (1,) * (x.ndim - 2)
        mean, variance = (value.reshape(column) for value in running)
        # torch's native_batch_norm_backward reads the input, of no derivative in eval mode:
        # under create_graph the input's gradient requires grad, as torch's
        (x,) = kernel_read_inputs(x, derivative="none")
        normalized = (x - mean) * (variance + float(eps)).sqrt().recip()
        return _affine_only(fn, normalized, weight, kernel_bias(bias, x, weight), channels)
    # (torch counts the values per channel from the shape: one is refused even without
    # channels, where there are no values at all)
    if x.shape[0] * math.prod(x.shape[2:]) == 1:
        raise InvalidArgumentError(
            f"{fn}: expected more than 1 value per channel when training, got input "
            f"{shape_text(x.shape)}"
        )
    if not x.numel():  # torch's empty batch: an empty result, the statistics left alone
        return _affine_only(fn, x, weight, bias, channels)
    count = x.numel() // channels
    # One fused op: the batch's statistics, the normalization and the affine map, with a
    # joint backward (the backend's batch_norm_backward).
    affine = _affine_operands(fn, x, weight, bias, channels)
    out, stats = apply(_BATCH_NORM, (x, *affine), (float(eps),))
    if running_mean is not None:
        # The running statistics follow the batch's, outside any graph (state, not part of
        # the function), in one backend call from the op's statistics. Float32 buffers of a
        # half-precision input are updated in float32, as torch's kernel does (rounded to the
        # input's dtype first, they kept 8 or 11 bits across steps).
        mean, variance = (
            _as_tensor(fn, x, value, name)
            for value, name in ((running_mean, "running_mean"), (running_var, "running_var"))
        )
        with reported(fn, x.backend, (x,)):
            updated = x.backend.batch_norm_update(
                mean.detach().primitive,
                variance.detach().primitive,
                stats.primitive,
                float(momentum),
                float(eps),
                count,
            )
        for buffer, value in zip((running_mean, running_var), updated):
            assign(buffer, wrap(x, value), fn)
    return follow_channels_last(out, x)  # (torch's: the input's memory format)


_BATCH_NORM = TensorOp("batch_norm")


def _affine_only(
    fn: str, x: Tensor, weight: Tensor | None, bias: Tensor | None, channels: int
) -> Tensor:
    """``x``, already normalized, through the affine map of ``weight`` and ``bias`` where
    given: evaluation's last step, and the whole result for an empty ``x`` (torch's: no
    statistics to take, the map still applied, so weight and bias get their zero gradients)."""
    out = x
    scale = _channel_param(fn, x, weight, "weight", channels)
    shift = _channel_param(fn, x, bias, "bias", channels)
    if scale is not None:
        out = out * scale
    if shift is not None:
        out = out + shift
    return out


@autocast_op("group_norm")
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
    eps = _real(fn, "eps", eps)
    if not isinstance(num_groups, numbers.Integral) or isinstance(num_groups, bool):
        raise ArgumentTypeError(f"{fn}: num_groups must be an int, got {num_groups!r}")
    x = _float_input(fn, input)
    if x.ndim < 2:  # (torch's RuntimeError: "Expected at least 2 dimensions")
        raise SizeMismatchError(f"{fn}: input must be [N, C, *], got {shape_text(x.shape)}")
    channels = x.shape[1]
    if num_groups == 0:  # (torch's ZeroDivisionError of its modulo)
        raise DivisionByZeroError(f"{fn}: num_groups must not be 0; input {shape_text(x.shape)}")
    if not isinstance(num_groups, numbers.Integral) or num_groups < 1 or channels % num_groups:
        raise KernelArgumentError(  # (torch's RuntimeError)
            f"{fn}: {channels} channels cannot be split into num_groups={num_groups!r} groups; "
            f"input {shape_text(x.shape)}"
        )
    # torch's check (_verify_batch_size of [N * C / G, G, *]): one value in all but the
    # group dim is refused
    if x.shape[0] * channels // num_groups * math.prod(x.shape[2:]) == 1:
        raise InvalidArgumentError(
            f"{fn}: expected more than 1 value per channel when training, got input "
            f"{shape_text(x.shape)} in {num_groups} groups"
        )
    _check_parameter_dtypes(fn, x, (("weight", weight), ("bias", bias)))
    if x.dtype in ("float32", "float64") and x.numel() and x.backend.is_autodiff:
        # One op (autodiff/nn_ops.py): the statistics, the normalization and the affine map,
        # whose joint rule reads x, the weight and the statistics, as torch's
        # native_group_norm_backward; as the composite below it held the centered values and
        # the normalized output (twice torch's bytes). An absent weight or bias is the empty
        # [0] tensor.
        affine = _affine_operands(fn, x, weight, bias, channels)
        if any(t.requires_grad for t in (x, *affine)):
            out, _ = apply(_GROUP_NORM, (x, *affine), (int(num_groups), float(eps)))
            return out
    scale = _channel_param(fn, x, weight, "weight", channels)
    shift = _channel_param(fn, x, bias, "bias", channels)
    per_group = channels // num_groups * math.prod(x.shape[2:])  # (not -1: N may be 0)
    grouped = _opmath(x).reshape((x.shape[0], int(num_groups), per_group))
    centered = grouped - grouped.mean_dim(-1)
    variance = centered.square().mean_dim(-1)
    out = (centered * (variance + float(eps)).sqrt().recip()).reshape(x.shape).cast(x.dtype)
    if scale is not None:
        out = out * scale
    if shift is not None:
        out = out + shift
    return out


_GROUP_NORM = TensorOp("group_norm")

#: ``torch.finfo(dtype).eps`` of the dtypes :func:`rms_norm` computes in: its default ``eps``
_MACHINE_EPSILON = {
    "float32": 2.0**-23,
    "float64": 2.0**-52,
}

#: the dtypes whose statistics torch accumulates in float32 (its "opmath" type)
_HALF = ("float16", "bfloat16")


def _opmath(x: Tensor) -> Tensor:
    """``x`` in the dtype its statistics are taken in: float32 for a half-precision ``x`` (a
    composite's sums over many values would overflow, or lose the mean, in 16 bits)."""
    return x.cast("float32") if x.dtype in _HALF else x


def rms_norm(
    input: Tensor,  # noqa: A002 (PyTorch's name)
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` dims, as
    ``torch.nn.functional.rms_norm`` (``eps=None``: the machine epsilon of the dtype it is
    computed in, float32's for float16 and bfloat16, as torch's).

    >>> import retrograd as rg
    >>> x = rg.tensor([[3.0, 4.0]], dtype="float64")
    >>> [round(v, 6) for v in rms_norm(x, 2, eps=0.0).tolist()[0]]  # rms = sqrt(12.5)
    [0.848528, 1.131371]
    """
    fn = "rms_norm"
    if eps is not None:
        eps = _real(fn, "eps", eps)
    x = _float_input(fn, input)
    shape = _ints(
        fn,
        "normalized_shape",
        normalized_shape,
        1 if isinstance(normalized_shape, numbers.Integral) else len(normalized_shape),
        0,  # torch normalizes over a zero-size shape too: an empty result
    )
    if not shape:
        raise SizeMismatchError(  # (torch's RuntimeError)
            f"{fn}: normalized_shape must have at least one dimension, got ()"
        )
    k = len(shape)
    if x.ndim < k or x.shape[x.ndim - k :] != shape:
        raise SizeMismatchError(  # (torch's RuntimeError: "Given normalized_shape=...")
            f"{fn}: normalized_shape {shape_text(shape)} must match the input's trailing "
            f"dimensions; input {shape_text(x.shape)}"
        )
    dims = tuple(range(x.ndim - k, x.ndim))
    work = _opmath(x)
    if eps is None:  # torch's: the epsilon of the dtype it computes in (float32 for a half x)
        eps = _MACHINE_EPSILON[work.dtype]
    # torch's rsqrt (its kernel's): sqrt then recip rounded twice, 3 ulp off (7 December)
    out = (work * (_mean_over(fn, work.square(), dims) + float(eps)).rsqrt()).cast(x.dtype)
    if weight is not None:
        weight = _as_tensor(fn, x, weight, "weight")
        if weight.shape != shape:
            raise ShapeError(
                f"{fn}: weight must have shape {shape_text(shape)}, got {shape_text(weight.shape)}"
            )
        out = out * weight.cast(x.dtype)
    return out
