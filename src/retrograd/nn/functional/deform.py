"""Deformable convolution (torchvision's ``ops.deform_conv2d``, Burn's ``deform_conv2d``): a
composite of the tensor API, so its gradients in the input, offsets, mask, weight and bias are
the parts' (bilinear sampling's gradient in the offsets included)."""

from __future__ import annotations

from typing import Any

from ...errors import ShapeError
from ...tensor import Tensor, arange
from ...tensor.internal import shape_text
from ._common import IntOrTuple, _as_tensor, _channel_bias, _float_pair, _ints

__all__ = ["deform_conv2d"]


def deform_conv2d(
    input: Tensor,  # noqa: A002 (torchvision's name)
    offset: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = (1, 1),
    padding: IntOrTuple = (0, 0),
    dilation: IntOrTuple = (1, 1),
    mask: Tensor | None = None,
) -> Tensor:
    """torchvision's ``deform_conv2d``: each kernel tap of each output position reads the
    input at its regular place moved by ``offset`` ``[N, 2 * offset_groups * kH * kW, oH,
    oW]`` (``(dy, dx)`` per tap), bilinearly interpolated (zero outside the input), scaled by
    ``mask`` ``[N, offset_groups * kH * kW, oH, oW]`` when given. ``weight`` is ``[out,
    in / groups, kH, kW]``; ``groups`` and ``offset_groups`` follow from the shapes."""
    fn = "deform_conv2d"
    x, weight = _float_pair(fn, input, weight, "weight")
    offset = _as_tensor(fn, x, offset, "offset").cast(x.dtype)
    if x.ndim != 4 or weight.ndim != 4 or offset.ndim != 4:
        raise ShapeError(
            f"{fn}: input, offset and weight must be 4-d, got {shape_text(x.shape)}, "
            f"{shape_text(offset.shape)} and {shape_text(weight.shape)}"
        )
    sh, sw = _ints(fn, "stride", stride, 2, 1)
    ph, pw = _ints(fn, "padding", padding, 2, 0)
    dh, dw = _ints(fn, "dilation", dilation, 2, 1)
    batch, channels, height, width = x.shape
    out_channels, group_channels, kh, kw = weight.shape
    taps = kh * kw
    if taps == 0:
        raise ShapeError(f"{fn}: weight {shape_text(weight.shape)} has an empty kernel")
    if (
        group_channels == 0
        or channels % group_channels
        or out_channels % (channels // group_channels)
    ):
        raise ShapeError(
            f"{fn}: weight {shape_text(weight.shape)} does not divide the input's "
            f"{channels} channels into groups"
        )
    groups = channels // group_channels
    oh = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"{fn}: input {shape_text(x.shape)} is smaller than the kernel")
    if (
        offset.shape[0] != batch
        or offset.shape[2:] != (oh, ow)
        or offset.shape[1] == 0  # no offset groups: Burn's "offset groups must be non-zero"
        or offset.shape[1] % (2 * taps)
    ):
        raise ShapeError(
            f"{fn}: offset must be [{batch}, 2 * offset_groups * {taps}, {oh}, {ow}], got "
            f"{shape_text(offset.shape)}"
        )
    offset_groups = offset.shape[1] // (2 * taps)
    if channels % offset_groups:
        raise ShapeError(
            f"{fn}: {offset_groups} offset groups do not divide the input's {channels} channels"
        )
    if mask is not None:
        mask = _as_tensor(fn, x, mask, "mask").cast(x.dtype)
        if mask.shape != (batch, offset_groups * taps, oh, ow):
            raise ShapeError(
                f"{fn}: mask must be [{batch}, {offset_groups * taps}, {oh}, {ow}], got "
                f"{shape_text(mask.shape)}"
            )
    bias = _channel_bias(fn, x, bias, out_channels)

    # where each tap of each output position reads: [N, G, taps, oH, oW]
    pairs = offset.reshape((batch, offset_groups, taps, 2, oh, ow))
    tap_rows = (arange(0, kh, backend=x.backend, device=x.device) * dh).float().cast(x.dtype)
    tap_cols = (arange(0, kw, backend=x.backend, device=x.device) * dw).float().cast(x.dtype)
    out_rows = (arange(0, oh, backend=x.backend, device=x.device) * sh - ph).cast(x.dtype)
    out_cols = (arange(0, ow, backend=x.backend, device=x.device) * sw - pw).cast(x.dtype)
    base_y = tap_rows.reshape((kh, 1, 1, 1)).expand((kh, kw, oh, ow)) + out_rows.reshape(
        (1, 1, oh, 1)
    )
    base_x = tap_cols.reshape((1, kw, 1, 1)).expand((kh, kw, oh, ow)) + out_cols.reshape(
        (1, 1, 1, ow)
    )
    y = pairs.select(3, _index(x, 0)).squeeze_dim(3) + base_y.reshape((1, 1, taps, oh, ow))
    xs = pairs.select(3, _index(x, 1)).squeeze_dim(3) + base_x.reshape((1, 1, taps, oh, ow))

    # torchvision: a point at or past one pixel outside reads zero; inside, each of the four
    # neighbours outside the input reads zero
    inside = (y > -1) & (y < height) & (xs > -1) & (xs < width)
    y0, x0 = y.detach().floor(), xs.detach().floor()
    ly, lx = y - y0, xs - x0
    group_channels_off = channels // offset_groups
    source = x.reshape((batch, offset_groups, group_channels_off, height * width))
    sampled = None
    for dy, dx, weight_of in (
        (0, 0, lambda: (1 - ly) * (1 - lx)),
        (0, 1, lambda: (1 - ly) * lx),
        (1, 0, lambda: ly * (1 - lx)),
        (1, 1, lambda: ly * lx),
    ):
        cy, cx = y0 + dy, x0 + dx
        valid = inside & (cy >= 0) & (cy <= height - 1) & (cx >= 0) & (cx <= width - 1)
        flat = (cy.clamp(0, height - 1) * width + cx.clamp(0, width - 1)).cast("int64")
        index = flat.reshape((batch, offset_groups, 1, taps * oh * ow)).expand(
            (batch, offset_groups, group_channels_off, taps * oh * ow)
        )
        values = source.gather(3, index).reshape(
            (batch, offset_groups, group_channels_off, taps, oh, ow)
        )
        term = values * weight_of().mask_fill(~valid, 0.0).unsqueeze_dim(2)
        sampled = term if sampled is None else sampled + term
    if mask is not None:
        sampled = sampled * mask.reshape((batch, offset_groups, 1, taps, oh, ow))

    # columns [N, groups, C/groups * taps, oH * oW] against weight [groups, out/groups, ...]
    columns = sampled.reshape((batch, groups, group_channels * taps, oh * ow))
    kernel = weight.reshape((1, groups, out_channels // groups, group_channels * taps))
    out = kernel.matmul(columns).reshape((batch, out_channels, oh, ow))
    if bias.shape[0]:
        out = out + bias.reshape((1, out_channels, 1, 1))
    return out


def _index(x: Tensor, i: int) -> Any:
    return arange(i, i + 1, backend=x.backend, device=x.device)
