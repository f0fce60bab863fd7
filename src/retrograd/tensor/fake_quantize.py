"""torch's fake quantization, the float ops quantization-aware training is written with:
``torch.fake_quantize_per_tensor_affine`` and ``torch.fake_quantize_per_channel_affine``.

Each rounds ``x`` onto the integer grid of a scale and zero point and back, in floating point,
as torch's CPU kernels compute it: ``q = zero_point + nearbyint(x * inv_scale)`` with
``inv_scale = 1.0f / scale`` in float32 (a per-channel float zero point is added before the
rounding, ``nearbyint(x * inv_scale + zero_point)``, as torch's other kernel), the output
``(clamp(q, quant_min, quant_max) - zero_point) * scale``; the gradient is the
straight-through one, ``grad`` where ``quant_min <= q <= quant_max`` and 0 elsewhere (the op
``fake_quantize`` of the op table). Scale and zero point take no gradient: torch refuses
ones that require grad, but here a value computed from ``weight.detach()`` (a leaf that
requires grad, Burn's rule) does, as an observer's scale does, so they are taken as constants.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..errors import (
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    ShapeError,
    shape_text,
)
from ._dispatch import TensorBase, lift

__all__ = ["fake_quantize_per_channel_affine", "fake_quantize_per_tensor_affine"]

#: the input dtypes torch's kernels take; float16 and bfloat16 are computed in float32 (torch's
#: ``self * inv_scale`` promotes them to the float ``inv_scale``)
_INPUTS = ("float32", "float64", "float16", "bfloat16")


def _input(op: str, x: Any) -> Any:
    if not isinstance(x, TensorBase):
        raise DTypeError(f"{op}: input must be a tensor, got {type(x).__name__}")
    if x.dtype not in _INPUTS:
        raise DTypeError(f"{op}: not implemented for a {x.dtype} input (a floating-point one)")
    return x


def _range(op: str, quant_min: Any, quant_max: Any) -> tuple[int, int]:
    for name, value in (("quant_min", quant_min), ("quant_max", quant_max)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise DTypeError(f"{op}: {name} must be an int, got {type(value).__name__}")
    if quant_min > quant_max:
        raise InvalidArgumentError(
            f"{op}: `quant_min` should be less than or equal to `quant_max` (got {quant_min} "
            f"and {quant_max})"
        )
    return int(quant_min), int(quant_max)


def _fake_quantize(
    op: str, x: Any, scale: Any, zero_point: Any, qmin: int, qmax: int, float_zp: bool
) -> Any:
    """The shared computation: ``scale`` (float32) and ``zero_point`` (any dtype) are tensors
    broadcast against ``x``; ``float_zp``: a float zero point, added before the rounding."""
    work = x if x.dtype in ("float32", "float64") else x.float()
    inv_scale = (1.0 / scale.detach()).to(work.dtype)  # 1.0f / scale, in float32
    scale = scale.detach().to(work.dtype)
    zero_point = zero_point.detach().to(work.dtype)
    inv_scale, scale, zero_point = (lift(work, t, op) for t in (inv_scale, scale, zero_point))
    if work.requires_grad:
        inputs = (work, inv_scale, zero_point, scale)
        out = work._apply("fake_quantize", inputs, (qmin, qmax, float_zp))
    else:  # the op's forward, by tensor ops
        scaled = work * inv_scale
        q = (scaled + zero_point).round() if float_zp else scaled.round() + zero_point
        out = (q.clamp(qmin, qmax) - zero_point) * scale
    return out if out.dtype == x.dtype else out.to(x.dtype)


def fake_quantize_per_tensor_affine(
    input: Any,  # noqa: A002 (torch's name)
    scale: Any,
    zero_point: Any,
    quant_min: int,
    quant_max: int,
) -> Any:
    """``input`` quantized onto one grid of ``scale`` (a float, or a one-element tensor) and
    ``zero_point`` (an int, or a one-element tensor) and dequantized, with the straight-through
    gradient (see the module)."""
    op = "fake_quantize_per_tensor_affine"
    x = _input(op, input)
    values = []
    for name, value in (("scale", scale), ("zero_point", zero_point)):
        if isinstance(value, TensorBase):
            if value.numel() != 1:
                raise ShapeError(
                    f"{op}: {name} must hold one element (a Tensor with {value.numel()} "
                    f"elements cannot be converted to Scalar), got shape {shape_text(value.shape)}"
                )
            value = value.item()
        elif name == "zero_point" and (
            isinstance(value, bool) or not isinstance(value, numbers.Integral)
        ):
            raise DTypeError(
                f"{op}: zero_point must be an int or a tensor, got {type(value).__name__}"
            )
        values.append(value)
    qmin, qmax = _range(op, quant_min, quant_max)
    sc = np.float32(values[0])  # torch's kernel: float sc = scale
    zp = int(values[1])  # (a float tensor's value truncated, as torch's toInt)
    if not qmin <= zp <= qmax:
        raise InvalidArgumentError(
            f"{op}: `zero_point` must be between `quant_min` and `quant_max` (got {zp}, "
            f"range [{qmin}, {qmax}])"
        )
    scale_t = lift(x, np.asarray(sc, dtype=np.float32), op)
    zero_t = lift(x, np.asarray(zp, dtype=np.float32), op)
    return _fake_quantize(op, x, scale_t, zero_t, qmin, qmax, False)


def fake_quantize_per_channel_affine(
    input: Any,  # noqa: A002 (torch's name)
    scale: Any,
    zero_point: Any,
    axis: int,
    quant_min: int,
    quant_max: int,
) -> Any:
    """``input`` quantized onto one grid per slice along ``axis`` (``scale``: a 1-D float32
    tensor, ``zero_point``: a 1-D int32, float32 or float16 one, each of ``input.size(axis)``
    elements) and dequantized, with the straight-through gradient (see the module). A float
    zero point is added before the rounding, as torch's kernel adds it."""
    op = "fake_quantize_per_channel_affine"
    x = _input(op, input)
    for name, value in (("scale", scale), ("zero_point", zero_point)):
        if not isinstance(value, TensorBase):
            raise DTypeError(f"{op}: {name} must be a tensor, got {type(value).__name__}")
        if value.dim() != 1:
            raise ShapeError(
                f"{op}: {name} should be a 1-D tensor, got shape {shape_text(value.shape)}"
            )
    if scale.dtype != "float32":
        raise DTypeError(f"{op}: scale must be float32, found {scale.dtype}")
    if zero_point.dtype not in ("int32", "float32", "float16"):
        raise DTypeError(
            f"{op}: zero_point must be int32, float32 or float16, found {zero_point.dtype}"
        )
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise DTypeError(f"{op}: axis must be an int, got {type(axis).__name__}")
    if axis >= x.dim():
        raise IndexOutOfRangeError(
            f"{op}: axis {axis} is out of range for an input of shape {shape_text(x.shape)}"
        )
    if axis < 0:
        raise InvalidArgumentError(
            f"{op}: `axis` must be between 0 and the number of dimensions of input "
            f"(got {axis} for shape {shape_text(x.shape)})"
        )
    qmin, qmax = _range(op, quant_min, quant_max)
    if scale.numel() != x.shape[axis] or zero_point.numel() != x.shape[axis]:
        raise ShapeError(
            f"{op}: dimensions of scale {shape_text(scale.shape)} and zero_point "
            f"{shape_text(zero_point.shape)} are not consistent with input "
            f"{shape_text(x.shape)} along axis {axis}"
        )
    if zero_point.dtype == "int32" and zero_point.numel():
        low, high = int(zero_point.min().item()), int(zero_point.max().item())
        if low < qmin or high > qmax:
            raise InvalidArgumentError(
                f"{op}: `zero_point` must be between `quant_min` and `quant_max` (got values "
                f"in [{low}, {high}], range [{qmin}, {qmax}])"
            )
    shape = [1] * x.dim()
    shape[axis] = x.shape[axis]
    scale_t = lift(x, scale, op).reshape(shape)
    zero_t = lift(x, zero_point, op).reshape(shape)
    return _fake_quantize(op, x, scale_t, zero_t, qmin, qmax, zero_point.dtype != "int32")
