"""Resampling and rearranging: ``interpolate``, ``pad``, ``pixel_shuffle``/``pixel_unshuffle``
and the sliding blocks of ``unfold``/``fold``."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...backend.sizes import check_allocation
from ...errors import (
    ArgumentTypeError,
    DTypeError,
    InvalidArgumentError,
    KernelArgumentError,
    ShapeError,
    SizeMismatchError,
    UnsupportedModeError,
)
from ...tensor import Tensor, cat, full, stack
from ...tensor._dispatch import host_constant
from ...tensor.autocasting import autocast_op
from ...tensor.functions import kernel_read_inputs
from ...tensor.internal import (
    TensorOp,
    apply,
    follow_channels_last,
    int_arguments,
    shape_text,
    wrap,
)
from ._common import (
    _float_input,
    _ints,
)
from .pooling import _adaptive_avg_pool

# -- interpolation ---------------------------------------------------------------------------------
_INTERPOLATION_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


def interpolate(
    input: Tensor,  # noqa: A002 (torch's name: ``F.interpolate(input=x, size=...)``)
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resize the spatial dimensions to ``size``, or by ``scale_factor``, PyTorch's rules.
    ``antialias=True`` (bilinear and bicubic, 4-d input) is torch's (and PIL's) filter, which
    widens with the downsampling factor.

    ``mode``: ``"nearest"`` (PyTorch's legacy floor rule; 1 to 3 spatial dims), ``"linear"``
    (3-d input), ``"bilinear"``, ``"bicubic"`` (4-d, A = -0.75) or ``"trilinear"`` (5-d).
    ``align_corners`` maps corner pixel centres onto each other (interpolating modes only).
    With ``scale_factor`` the output is ``floor(size * scale_factor)`` and, unless
    ``recompute_scale_factor``, the scale factor itself maps coordinates, as in PyTorch.

    >>> import retrograd as rg
    >>> interpolate(rg.ones((1, 1, 2, 2)), scale_factor=2, mode="bilinear").shape
    retrograd.Size([1, 1, 4, 4])
    """
    fn = "interpolate"
    resampled_bytes = False
    if (
        mode in ("nearest", "nearest-exact")
        and isinstance(input, Tensor)
        and input.dtype == "uint8"
    ):
        x = input  # torch resizes uint8 images and label masks by copying pixels
    elif isinstance(input, Tensor) and input.dtype == "uint8" and mode in ("bilinear", "bicubic"):
        if mode == "bicubic" and not antialias:
            # torch's CPU kernel for it converts filtered values past [0, 255] to uint8 in
            # C++ (undefined there), so its bytes are not reproducible: refused
            raise DTypeError(
                f"{fn}: bicubic interpolation of uint8 images without antialias is not "
                "supported here (torch's result converts out-of-range floats to uint8, "
                "undefined behaviour in its kernel); cast to float first, or antialias=True"
            )
        x, resampled_bytes = input, True  # torch's integer filter of uint8 images (PIL's)
    else:
        x = _float_input(fn, input)
    if antialias and (mode not in ("bilinear", "bicubic") or x.ndim != 4):
        raise InvalidArgumentError(
            f"{fn}: antialias=True is restricted to the bilinear and bicubic modes and a 4-d "
            f"input, as in torch; got mode {mode!r} and input {shape_text(x.shape)}"
        )
    spatial = x.ndim - 2
    if mode in ("nearest", "nearest-exact", "area"):
        if not 1 <= spatial <= 3:
            raise UnsupportedModeError(
                f"{fn}: mode {mode!r} needs a 3-d to 5-d input, got {shape_text(x.shape)}"
            )
        if align_corners is not None:
            raise InvalidArgumentError(
                f"{fn}: align_corners can only be set with the interpolating "
                "modes (linear, bilinear, bicubic, trilinear)"
            )
    elif mode in _INTERPOLATION_DIMS:
        if spatial != _INTERPOLATION_DIMS[mode]:
            raise UnsupportedModeError(
                f"{fn}: mode {mode!r} needs a {_INTERPOLATION_DIMS[mode] + 2}-d input, got "
                f"{shape_text(x.shape)}"
            )
    else:
        raise UnsupportedModeError(  # (torch's NotImplementedError)
            f"{fn}: mode must be 'nearest', 'nearest-exact', 'area', 'linear', 'bilinear', "
            f"'bicubic' or 'trilinear', got {mode!r}"
        )
    if (size is None) == (scale_factor is None):
        raise ShapeError(f"{fn}: give exactly one of size and scale_factor")
    in_size = x.shape[2:]
    if size is not None:
        if recompute_scale_factor:
            raise InvalidArgumentError(
                f"{fn}: recompute_scale_factor is not meaningful with an explicit size "
                f"(size={size!r})"
            )
        if isinstance(size, Sequence) and len(size) != spatial:  # (torch: no broadcast)
            raise ShapeError(
                f"{fn}: size must be an int or one int per spatial dimension ({spatial}), "
                f"got {size!r} for input {shape_text(x.shape)}"
            )
        # (area mode is adaptive average pooling, which takes an empty output size as torch)
        out_size = _ints(fn, "size", size, spatial, 0 if mode == "area" else 1)
        scales = (None,) * spatial
    else:
        if isinstance(scale_factor, numbers.Real):
            factors = (float(scale_factor),) * spatial
        else:
            factors = tuple(float(f) for f in scale_factor)
        if len(factors) != spatial:
            raise ShapeError(
                f"{fn}: scale_factor must be one number per spatial dimension, got "
                f"{scale_factor!r} for input {shape_text(x.shape)}"
            )
        # (area mode is adaptive average pooling: a factor of 0 gives an empty output there)
        if any(not (f > 0 or (f == 0 and mode == "area")) for f in factors):
            raise SizeMismatchError(  # (torch's RuntimeError: its output sizes not positive)
                f"{fn}: scale_factor must be positive, got {scale_factor!r} for input "
                f"{shape_text(x.shape)}"
            )
        out_size = tuple(math.floor(n * f) for n, f in zip(in_size, factors))
        scales = (None,) * spatial if recompute_scale_factor else factors
    # (area mode is adaptive average pooling, which decides on empty inputs and outputs itself)
    empty_input = x.shape[1] == 0 or any(n < 1 for n in in_size)
    if mode != "area" and (any(n < 1 for n in out_size) or empty_input):
        raise SizeMismatchError(
            f"{fn}: input {shape_text(x.shape)} and output size {shape_text(out_size)} must "
            "be non-empty"
        )
    if resampled_bytes:
        return _uint8_resampled(x, mode, out_size, bool(align_corners), scales, antialias)
    if antialias:
        return _antialiased(x, mode, out_size, bool(align_corners), scales)
    if mode == "area":  # torch's: adaptive average pooling to the output size
        out = _adaptive_avg_pool(fn, spatial, x, out_size)
        # (torch's 2-d pooling keeps a channels-last input's layout, its 3-d one does not)
        return follow_channels_last(out, x) if spatial == 2 else out
    if mode == "nearest-exact":
        out = _nearest_exact(x, in_size, out_size, scales)
    else:
        kernel_mode = (
            "nearest" if mode == "nearest" else ("bicubic" if mode == "bicubic" else "linear")
        )
        out = apply(
            TensorOp(fn, kernel="interpolate"),
            (x,),
            (out_size, kernel_mode, bool(align_corners), scales),
        )
    return follow_channels_last(out, x)  # (torch's: the input's memory format)


def _antialias_filter(mode: str, x: np.ndarray) -> np.ndarray:
    """torch's anti-aliasing kernels (PIL's): the triangle, or the cubic with A = -0.5."""
    x = np.abs(x)
    if mode == "bilinear":
        return np.maximum(1.0 - x, 0.0)
    a = -0.5
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _antialias_matrix(mode: str, n_in: int, n_out: int, align_corners: bool, factor) -> np.ndarray:
    """``[n_out, n_in]``: each output pixel's normalised filter weights over the input pixels
    of its support (torch's ``_compute_indices_min_size_weights_aa``), the filter stretched by
    the scale when downsampling."""
    if align_corners:
        scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        scale = 1.0 / factor if factor is not None else n_in / n_out
    half = 1.0 if mode == "bilinear" else 2.0  # the filter's support at scale 1
    support = half * scale if scale >= 1.0 else half
    inverse = 1.0 / scale if scale >= 1.0 else 1.0
    matrix = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = scale * (i + 0.5)
        low = max(int(center - support + 0.5), 0)  # (int: C's truncation, as torch's)
        high = min(int(center + support + 0.5), n_in)
        weights = _antialias_filter(mode, (np.arange(low, high) - center + 0.5) * inverse)
        total = weights.sum()
        matrix[i, low:high] = weights / total if total != 0.0 else weights
    return matrix


def _filter_value(mode: str, x: float, antialias: bool) -> float:
    """torch's filters, in its arithmetic (doubles, its order of operations): the triangle,
    or the cubic with A = -0.5 (antialias, PIL's) or -0.75."""
    if mode == "bilinear":
        x = -x if x < 0.0 else x
        return 1.0 - x if x < 1.0 else 0.0
    a = -0.5 if antialias else -0.75
    x = abs(x)
    if x < 1.0:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2.0:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def _int16_weights(mode: str, n_in: int, n_out: int, align_corners: bool, factor: Any,
                   antialias: bool) -> tuple[np.ndarray, int]:  # fmt: skip
    """``([n_out, n_in] weights, precision)``: torch's fixed-point filter of uint8 images
    (``compute_index_ranges_int16_weights``): each output pixel's filter weights over its
    support, normalised, times ``2 ** precision`` and rounded half away from zero, the
    precision the largest that keeps the largest weight within an int16."""
    if align_corners:
        scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        scale = 1.0 / factor if factor is not None and factor > 0 else n_in / n_out
    taps = 2 if mode == "bilinear" else 4
    if antialias:
        support = taps * 0.5 * scale if scale >= 1.0 else taps * 0.5
        widest = math.ceil(support) * 2 + 1
    else:
        support, widest = taps * 0.5, taps
    delta = 0.5 if align_corners and not antialias else 0.0  # (torch's, for uint8 only)
    inverse = 1.0 / scale if scale >= 1.0 and antialias else 1.0
    rows, largest = [], 0.0
    for i in range(n_out):
        center = scale * (i + 0.5 - delta)
        low = max(int(center - support + 0.5 + delta), 0)  # (int: C's truncation, as torch's)
        count = min(max(min(int(center + support + 0.5 + delta), n_in) - low, 0), widest)
        weights = [
            _filter_value(mode, (j + low - center + 0.5 - delta) * inverse, antialias)
            for j in range(count)
        ]
        total = 0.0
        for w in weights:  # (summed in order, as torch's loop)
            total += w
        if total != 0.0:
            weights = [w / total for w in weights]
            largest = max([largest, *weights])
        rows.append((low, weights))
    precision = 0
    while precision < 22 and int(0.5 + largest * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    matrix = np.zeros((n_out, n_in), np.int64)
    for i, (low, weights) in enumerate(rows):
        for j, w in enumerate(weights):
            v = w * (1 << precision)
            matrix[i, low + j] = int(-0.5 + v) if v < 0 else int(0.5 + v)
    return matrix, precision


def _uint8_resampled(x: Tensor, mode: str, out_size, align_corners: bool, scales,
                     antialias: bool) -> Tensor:  # fmt: skip
    """``interpolate`` of a ``[N, C, H, W]`` uint8 image as torch's CPU kernel computes it:
    separable, the width first, each pass in integers (the pixels times the int16 weights,
    plus half, shifted right by the precision, clamped to [0, 255], a uint8 image again);
    a dimension whose size does not change is not filtered. Bit-exact with torch (where its
    generic kernel is right: for more than 4 channels and an output width of 1 it copies
    channel 0 into all, a torch bug not reproduced)."""
    out = x.cast("int64")
    for axis in (1, 0):
        n_in, n_out = out.shape[2 + axis], out_size[axis]
        if n_in == n_out:
            continue
        matrix, precision = _int16_weights(
            mode, n_in, n_out, align_corners, scales[axis], antialias
        )
        weights = host_constant(type(out)._result, matrix.T.copy(), out.backend, out.device)
        moved = out.swap_dims(2 + axis, 3) if axis == 0 else out
        filtered = (moved.matmul(weights) + (1 << (precision - 1))) >> precision
        filtered = filtered.clamp(0, 255)
        out = filtered.swap_dims(2 + axis, 3) if axis == 0 else filtered
    return out.cast("uint8")


def _antialiased(x: Tensor, mode: str, out_size, align_corners: bool, scales) -> Tensor:
    """``interpolate(antialias=True)`` of ``[N, C, H, W]`` ``x``: the separable filter as two
    matrix products (``rows @ x @ columns^T``), so the gradient is theirs. A dimension whose
    size does not change is not filtered (torch's separable kernel skips it, whatever the
    ``scale_factor``: ``scale_factor=(1.3, 2)`` of 3 rows keeps the rows as they are)."""
    out = x
    for axis, (n_in, n_out, factor) in enumerate(zip(x.shape[2:], out_size, scales)):
        if n_in == n_out:
            continue
        matrix = _antialias_matrix(mode, n_in, n_out, align_corners, factor)
        weights = x.new_tensor(matrix).cast(x.dtype)
        out = weights.matmul(out) if axis == 0 else out.matmul(weights.transpose(0, 1))
    return out if out is not x else x.clone()


def _nearest_exact(x: Tensor, in_size: Sequence[int], out_size: Sequence[int], scales) -> Tensor:
    """torch's ``nearest-exact``: output pixel ``i`` reads input ``floor((i + 0.5) * s)``
    (clamped to the last), ``s = 1 / scale_factor`` when the factor maps coordinates, else
    ``in / out``: pixel centres line up, where the legacy ``nearest`` rule drifts by half a
    pixel. In torch's arithmetic: ``s`` a float32 (a float64 ``in / out`` for a float64
    input of 1 or 3 spatial dims, its kernels' opmath there), the product rounded to float32
    before the floor (``floorf``), which decides the pixels on a half (2 of 49 outputs from 2
    inputs: the 25th reads input 1). A ``select`` of host indices per dimension (copied to
    the device once per shape), so the gradient flows back to the pixels read."""
    out = x
    double_sizes = x.dtype == "float64" and len(in_size) != 2
    for axis, (n_in, n_out, factor) in enumerate(zip(in_size, out_size, scales)):
        if factor is not None:
            scale = float(np.float32(1.0 / factor))
        elif double_sizes:
            scale = n_in / n_out
        else:
            scale = float(np.float32(n_in) / np.float32(n_out))
        product = ((np.arange(n_out, dtype=np.float64) + 0.5) * scale).astype(np.float32)
        source = np.floor(product).astype(np.int64)
        out = out.select(2 + axis, _positions(out, np.minimum(source, n_in - 1)))
    return out


def _positions(x: Tensor, indices: np.ndarray) -> Tensor:
    """``indices`` (positions computed from shapes alone) as an int64 tensor on ``x``'s
    device, copied there once and kept (a copy per call would be a host round trip)."""
    return host_constant(type(x)._result, indices.astype(np.int64), x.backend, x.device)


_PAD_MODES = {"constant": None, "reflect": "reflect", "replicate": "edge", "circular": "wrap"}
_PAD_KERNELS = {"reflect": "reflection_pad", "replicate": "replication_pad"}


def _pad_kernel(*args: Any, **kwargs: Any) -> str:
    """torch's kernel for ``pad(input, pad, mode)`` (``reflection_pad2d``...), by which
    autocast casts its input."""
    amounts = kwargs.get("pad", args[1] if len(args) > 1 else None)
    mode = kwargs.get("mode", args[2] if len(args) > 2 else "constant")
    kernel = _PAD_KERNELS.get(mode) if isinstance(mode, str) else None
    if kernel is None or not isinstance(amounts, Sequence):
        return "pad"
    return f"{kernel}{len(amounts) // 2}d"


@autocast_op(_pad_kernel)
def pad(
    input: Tensor,  # noqa: A002 (torch's name: ``F.pad(input=x, pad=...)``)
    pad: Sequence[int],
    mode: str = "constant",
    value: float | None = None,
) -> Tensor:
    """Pad (or, with negative entries, crop) the last dimensions, as ``torch.nn.functional.pad``.

    ``pad`` lists ``(left, right)`` amounts starting from the *last* dimension:
    ``(l, r)`` pads the last one, ``(l, r, t, b)`` the last two. ``mode="constant"`` fills with
    ``value`` (None: 0, torch's default; the other modes refuse another, as torch's);
    ``"reflect"``, ``"replicate"`` and ``"circular"`` repeat the input's own values as torch
    does. Differentiable: a crop is a slice, constant padding a concatenation with
    untracked filled blocks, the other modes a ``select`` of the input's entries (built from
    host index arrays, the pad amounts being host values already, copied to the device once
    per shape), so the gradient of each padded
    element flows back to the element it copies.

    >>> import retrograd as rg
    >>> pad(rg.ones((1, 2)), (1, -1), value=5.0).tolist()
    [[5.0, 1.0]]
    """
    fn = "pad"
    x = input
    if mode not in _PAD_MODES:
        raise UnsupportedModeError(  # (torch's NotImplementedError)
            f"{fn}: mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}"
        )
    if not isinstance(x, Tensor):
        raise DTypeError(f"{fn}: expected a tensor, got {type(x).__name__}")
    if isinstance(value, Tensor | np.ndarray) and value.ndim == 0:
        value = value.item()  # (a 0-d tensor is the number it holds, as torch's parser reads it)
    if value is not None and not isinstance(value, numbers.Number):
        raise ArgumentTypeError(f"{fn}: value must be a number, got {value!r}")
    if isinstance(pad, str) or not isinstance(pad, Sequence | Tensor | np.ndarray):
        raise ArgumentTypeError(f"{fn}: pad must be a tuple of ints, got {pad!r}")
    if value is None:
        value = 0.0
    elif mode != "constant" and value != 0:  # (torch lets a 0 through: no value to use)
        raise InvalidArgumentError(
            f'{fn}: padding mode "{mode}" doesn\'t take in value argument (got value={value!r})'
        )
    amounts = list(int_arguments(fn, tuple(pad), "pad"))
    if any(not isinstance(n, numbers.Integral) or isinstance(n, bool) for n in amounts):
        raise ArgumentTypeError(f"{fn}: pad must hold ints, got {pad!r}")
    if len(amounts) % 2 or len(amounts) > 2 * x.ndim:
        raise SizeMismatchError(
            f"{fn}: pad {amounts} must hold a (left, right) pair for each of at most the "
            f"{x.ndim} dimensions of the input of shape {shape_text(x.shape)}"
        )
    padded = len(amounts) // 2
    if mode != "constant" and not (1 <= padded <= 3 and padded + 1 <= x.ndim <= padded + 2):
        raise UnsupportedModeError(
            f"{fn}: {mode} padding takes 1 to 3 (left, right) pairs and an input of [C, *] or "
            f"[N, C, *] with one dimension per pair (as torch); got pad {amounts} for an input "
            f"of shape {shape_text(x.shape)}"
        )
    if mode in _PAD_KERNELS:
        # torch's 2-d and 3-d kernels let one padded dimension come out empty but refuse a
        # result that is empty in every one of them
        sizes = [
            x.shape[x.ndim - 1 - pair] + int(amounts[2 * pair]) + int(amounts[2 * pair + 1])
            for pair in range(padded)
        ]
        if all(size < 1 for size in sizes):
            raise SizeMismatchError(
                f"{fn}: {mode} padding {amounts} of an input of shape {shape_text(x.shape)} "
                f"leaves no output (sizes {sizes[::-1]} of the padded dimensions)"
            )
    out, copied = x, False
    if mode in _PAD_KERNELS:  # torch's backward kernels read the input (zero derivative)
        (out,) = kernel_read_inputs(x)
    for pair in range(padded):
        dim = x.ndim - 1 - pair
        left, right = int(amounts[2 * pair]), int(amounts[2 * pair + 1])
        size = out.shape[dim]
        if mode in ("constant", "circular"):
            # crops first (torch applies negative amounts as crops, then pads what is left)
            start, stop = max(0, -left), size - max(0, -right)
            if stop < start:
                raise SizeMismatchError(
                    f"{fn}: pad ({left}, {right}) crops more than dimension {dim} of size "
                    f"{size} (input shape {shape_text(x.shape)})"
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
                copied = True
                continue
            kept = out.shape[dim]
            if kept == 0 or max(left, right) > kept:
                raise SizeMismatchError(
                    f"{fn}: circular padding ({left}, {right}) needs dimension {dim} at least "
                    f"as large as the padding, got size {kept} after the crops (input shape "
                    f"{shape_text(x.shape)})"
                )
            indices = np.pad(np.arange(kept, dtype=np.int64), (left, right), mode="wrap")
            out = out.select(dim, _positions(out, indices))
            copied = True
            continue
        if (left, right) == (0, 0):
            continue
        # reflect and replicate: torch maps every output position to the input it copies
        # from the whole input dimension (position i reads i - left, reflected or clamped),
        # a negative amount on one side included: pad by the positive amounts, then crop
        grow = (max(0, left), max(0, right))
        too_wide = mode == "reflect" and max(grow) > size - 1
        # (torch's kernels take [C, *] or [N, C, *] with any batch but some channels)
        no_channels = x.shape[x.ndim - 1 - padded] == 0
        # (torch's one-dimensional kernels refuse an empty result, its 2-d and 3-d ones not)
        smallest = 1 if len(amounts) == 2 else 0
        if size == 0 or too_wide or size + left + right < smallest or no_channels:
            raise SizeMismatchError(
                f"{fn}: {mode} padding ({left}, {right}) needs dimension {dim} larger than the "
                f"padding, some channels and a non-empty result, got size {size} (input shape "
                f"{shape_text(x.shape)})"
            )
        indices = np.pad(np.arange(size, dtype=np.int64), grow, mode=_PAD_MODES[mode])
        indices = indices[max(0, -left) : len(indices) - max(0, -right)]
        out = out.select(dim, _positions(out, indices))
        copied = True
    # torch's pad always returns a new tensor: zero pads or crops alone (views of ``x``) are
    # copied, so a later in-place write into the result leaves ``x`` alone
    return out if copied else out.clone()


def _scale_factor(fn: str, name: str, value: Any) -> int:
    """``value`` as the positive int it must be: torch refuses a float (2.5 truncated to 2
    would give a tensor of the wrong shape, silently), a bool, zero and negatives."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DTypeError(f"{fn}: {name} must be an int, got {value!r}")
    if value < 1:  # (torch's kernel: a RuntimeError)
        raise KernelArgumentError(f"{fn}: expects a positive {name}, but got {value}")
    return int(value)


def pixel_shuffle(x: Tensor, upscale_factor: int) -> Tensor:
    """``[*, C r^2, H, W]`` rearranged to ``[*, C, H r, W r]`` (torch's ``pixel_shuffle``)."""
    r = _scale_factor("pixel_shuffle", "upscale_factor", upscale_factor)
    if x.ndim < 3 or x.shape[-3] % (r * r):
        raise SizeMismatchError(
            f"pixel_shuffle: expected [*, C*{r}^2, H, W] with channels divisible by {r * r}, "
            f"got {shape_text(x.shape)}"
        )
    *lead, c, h, w = x.shape
    lead = tuple(lead)
    out = x.reshape(lead + (c // (r * r), r, r, h, w))
    n = len(lead)
    out = out.permute(tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2))
    return out.reshape(lead + (c // (r * r), h * r, w * r))


def pixel_unshuffle(x: Tensor, downscale_factor: int) -> Tensor:
    """The inverse of :func:`pixel_shuffle`: ``[*, C, H r, W r]`` to ``[*, C r^2, H, W]``."""
    r = _scale_factor("pixel_unshuffle", "downscale_factor", downscale_factor)
    if x.ndim < 3 or x.shape[-1] % r or x.shape[-2] % r:
        raise SizeMismatchError(
            f"pixel_unshuffle: height and width of {shape_text(x.shape)} must divide by {r}"
        )
    *lead, c, h, w = x.shape
    lead = tuple(lead)
    n = len(lead)
    out = x.reshape(lead + (c, h // r, r, w // r, r))
    out = out.permute(tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3))
    return out.reshape(lead + (c * r * r, h // r, w // r))


def _pair(fn: str, name: str, value: Any, minimum: int) -> tuple[int, int]:
    """An int, or exactly two (torch's ``unfold``/``fold`` repeat no one-entry tuple)."""
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) != 2:
        raise ShapeError(f"{fn}: {name} must be an int or a tuple of 2 ints, got {value!r}")
    return _ints(fn, name, value, 2, minimum)


def _im2col_input(fn: str, x: Any) -> Tensor:
    """``x`` for :func:`unfold`/:func:`fold`: a tensor of floats, complex numbers or bools,
    the dtypes torch's CPU im2col/col2im kernels take (its integer ones are not built)."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"{fn}: expected a Tensor as input, got {type(x).__name__}")
    if not (x.is_floating_point() or x.is_complex() or x.dtype == "bool"):
        raise DTypeError(
            f"{fn}: integer inputs are not supported (torch's CPU kernel is not built for "
            f"them), got {x.dtype} {shape_text(x.shape)}"
        )
    return x


def _unfold_args(fn: str, kernel_size: Any, dilation: Any, padding: Any, stride: Any) -> tuple:
    return (
        _pair(fn, "kernel_size", kernel_size, 1),
        _pair(fn, "dilation", dilation, 1),
        _pair(fn, "padding", padding, 0),
        _pair(fn, "stride", stride, 1),
    )


def unfold(
    input: Tensor,  # noqa: A002 (torch's name)
    kernel_size: Any,
    dilation: Any = 1,
    padding: Any = 0,
    stride: Any = 1,
) -> Tensor:
    """Sliding blocks of ``[N, C, H, W]`` as columns ``[N, C kh kw, L]`` (torch's ``unfold``,
    im2col): one strided slice per kernel offset, stacked."""
    fn = "unfold"
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = _unfold_args(
        fn, kernel_size, dilation, padding, stride
    )
    x = _im2col_input(fn, input)
    squeeze = x.ndim == 3
    if squeeze:
        x = x.unsqueeze_dim(0)
    if x.ndim != 4:
        raise SizeMismatchError(f"{fn}: expected a 3-d or 4-d input, got {shape_text(input.shape)}")
    if x.shape[1] == 0:  # (torch's: any batch, but some channels)
        raise SizeMismatchError(
            f"{fn}: expected an input with non-zero sizes in its non-batch dimensions, got "
            f"{shape_text(input.shape)}"
        )
    x = pad(x, (pw, pw, ph, ph)) if ph or pw else x
    n, c, h, w = x.shape
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (w - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise SizeMismatchError(
            f"{fn}: the kernel ({kh}, {kw}) with dilation ({dh}, {dw}) does not fit the padded "
            f"input {shape_text(x.shape)}"
        )
    # one slice per kernel offset: a result no machine holds is refused before the loop
    check_allocation(
        fn,
        (n, c * kh * kw, oh * ow),
        x.dtype,
        f"input {shape_text(input.shape)}, kernel_size ({kh}, {kw})",
    )
    blocks = [
        x[:, :, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]
    out = stack(blocks, 2).reshape((n, c * kh * kw, oh * ow))
    return out.squeeze_dim(0) if squeeze else out


def fold(
    input: Tensor,  # noqa: A002 (torch's name)
    output_size: Any,
    kernel_size: Any,
    dilation: Any = 1,
    padding: Any = 0,
    stride: Any = 1,
) -> Tensor:
    """The adjoint of :func:`unfold` (col2im): columns ``[N, C kh kw, L]`` summed into
    ``[N, C, H, W]``, overlapping blocks added."""
    fn = "fold"
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = _unfold_args(
        fn, kernel_size, dilation, padding, stride
    )
    height, width = _pair(fn, "output_size", output_size, 1)
    cols = _im2col_input(fn, input)
    if cols.ndim not in (2, 3):  # (torch's RuntimeError)
        raise SizeMismatchError(
            f"{fn}: expected a 2-D or 3-D (batch mode) input, got {shape_text(input.shape)}"
        )
    squeeze = cols.ndim == 2
    if squeeze:
        cols = cols.unsqueeze_dim(0)
    n, ckk, length = cols.shape
    if not (ckk and length):  # torch's: only the batch may be empty
        raise SizeMismatchError(
            f"{fn}: expected a 2-D or 3-D (batch mode) input with non-zero dimensions other "
            f"than the batch, got {shape_text(input.shape)}"
        )
    if ckk % (kh * kw):
        raise SizeMismatchError(
            f"{fn}: dimension 1 of {shape_text(input.shape)} must divide by {kh * kw}"
        )
    c = ckk // (kh * kw)
    hp, wp = height + 2 * ph, width + 2 * pw
    oh = (hp - dh * (kh - 1) - 1) // sh + 1
    ow = (wp - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise SizeMismatchError(
            f"{fn}: the kernel ({kh}, {kw}) with dilation ({dh}, {dw}) does not fit the padded "
            f"output_size ({hp}, {wp}): sliding blocks ({oh}, {ow}); input "
            f"{shape_text(input.shape)}"
        )
    if oh * ow != length:
        raise SizeMismatchError(
            f"{fn}: expected {oh * ow} blocks for output_size ({height}, {width}), got {length}"
            f" (dimension -1 of input {shape_text(input.shape)})"
        )
    check_allocation(fn, (n, c, hp, wp), cols.dtype, f"input {shape_text(input.shape)}")
    blocks = cols.reshape((n, c, kh * kw, oh, ow))
    canvas = wrap(cols, cols.backend.zeros((n, c, hp, wp), cols.dtype, cols.device))
    for i in range(kh):
        for j in range(kw):
            block = blocks[:, :, i * kw + j]
            region = (
                slice(None),
                slice(None),
                slice(i * dh, i * dh + (oh - 1) * sh + 1, sh),
                slice(j * dw, j * dw + (ow - 1) * sw + 1, sw),
            )
            zeros = wrap(cols, cols.backend.zeros((n, c, hp, wp), cols.dtype, cols.device))
            canvas = canvas + zeros.slice_assign(list(region), block)
    out = canvas[:, :, ph : ph + height, pw : pw + width]
    return out.squeeze_dim(0) if squeeze else out


def upsample(
    input: Tensor,  # noqa: A002 (torch's name)
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
) -> Tensor:
    """torch's deprecated name for :func:`interpolate`."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(
    input: Tensor,  # noqa: A002 (torch's name)
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
) -> Tensor:
    """:func:`interpolate` with ``mode="nearest"`` (torch's deprecated form)."""
    return interpolate(input, size, scale_factor, "nearest")


def upsample_bilinear(
    input: Tensor,  # noqa: A002 (torch's name)
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
) -> Tensor:
    """:func:`interpolate` with ``mode="bilinear"`` and ``align_corners=True``, as torch's
    deprecated form (unlike ``interpolate``'s default)."""
    return interpolate(input, size, scale_factor, "bilinear", align_corners=True)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:  # noqa: A002 (torch's name)
    """``[N, C, *]`` with its channels regrouped: channel ``g * (C / groups) + i`` moves to
    ``i * groups + g`` (ShuffleNet's shuffle).

    >>> import retrograd as rg
    >>> channel_shuffle(rg.arange(6.0).reshape((1, 6, 1)), 2).flatten().tolist()
    [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    """
    fn = "channel_shuffle"
    if not isinstance(input, Tensor):
        raise ShapeError(f"{fn}: input must be a tensor, got {type(input).__name__}")
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool):
        raise ArgumentTypeError(f"{fn}: groups must be an int, got {groups!r}")
    if groups < 1:
        raise ShapeError(f"{fn}: groups must be a positive int, got {groups!r}")
    if input.ndim < 3 or input.shape[1] % groups:  # torch refuses [N, C] too
        raise SizeMismatchError(
            f"{fn}: expected [N, C, *] (3 dims at least) with C divisible by groups={groups}, got "
            f"{shape_text(input.shape)}"
        )
    n, c, *rest = input.shape
    grouped = input.reshape((n, groups, c // groups, *rest))
    return grouped.transpose(1, 2).reshape(input.shape)


native_channel_shuffle = channel_shuffle  # torch's name for the same op
