"""torchvision.ops over retrograd: box operations (differentiable where torchvision's are),
non-maximum suppression, and the building-block modules of torchvision's models."""

from __future__ import annotations

import math
import numbers
import sys
import types
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import nn
from ..errors import DTypeError, InvalidArgumentError, ShapeError
from ..tensor import Tensor
from . import _lib as rg


def _check_boxes(fn: str, boxes: Tensor) -> None:
    if not isinstance(boxes, Tensor):
        raise InvalidArgumentError(f"{fn}: boxes should be a Tensor, got {type(boxes).__name__}")
    if boxes.dim() != 2 or boxes.shape[-1] != 4:
        raise ShapeError(f"{fn}: boxes should be [N, 4], got {list(boxes.shape)}")


def box_area(boxes: Tensor) -> Tensor:
    """(x2 - x1) * (y2 - y1) of boxes [N, 4] in (x1, y1, x2, y2)."""
    _check_boxes("box_area", boxes)
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def _inter_union(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor]:
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = boxes1[:, None, :2].maximum(boxes2[None, :, :2])
    rb = boxes1[:, None, 2:].minimum(boxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    return inter, area1[:, None] + area2[None, :] - inter


def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Intersection over union [N, M] of boxes (x1, y1, x2, y2)."""
    _check_boxes("box_iou", boxes1)
    _check_boxes("box_iou", boxes2)
    inter, union = _inter_union(boxes1, boxes2)
    return inter / union


def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """IoU minus the share of the enclosing box outside the union [N, M]."""
    _check_boxes("generalized_box_iou", boxes1)
    _check_boxes("generalized_box_iou", boxes2)
    inter, union = _inter_union(boxes1, boxes2)
    iou = inter / union
    lti = boxes1[:, None, :2].minimum(boxes2[None, :, :2])
    rbi = boxes1[:, None, 2:].maximum(boxes2[None, :, 2:])
    whi = (rbi - lti).clamp(min=0)
    areai = whi[:, :, 0] * whi[:, :, 1]
    return iou - (areai - union) / areai


def generalized_box_iou_loss(
    boxes1: Tensor, boxes2: Tensor, reduction: str = "none", eps: float = 1e-7
) -> Tensor:
    """1 - GIoU of matching pairs of boxes [..., 4] (torchvision's, with ``eps``)."""
    if reduction not in ("none", "mean", "sum"):
        raise InvalidArgumentError(
            f"generalized_box_iou_loss: invalid reduction {reduction!r}: "
            "supported reductions are none, mean, sum"
        )
    if boxes1.shape != boxes2.shape or boxes1.shape[-1] != 4:
        raise ShapeError(
            f"generalized_box_iou_loss: boxes should both be [..., 4], got "
            f"{list(boxes1.shape)} and {list(boxes2.shape)}"
        )
    x1, y1, x2, y2 = boxes1.unbind(dim=-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)
    xkis1, ykis1 = x1.maximum(x1g), y1.maximum(y1g)
    xkis2, ykis2 = x2.minimum(x2g), y2.minimum(y2g)
    intsct = ((xkis2 - xkis1) * (ykis2 - ykis1)) * ((ykis2 > ykis1) & (xkis2 > xkis1)).to(x1.dtype)
    union = (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - intsct
    iou = intsct / (union + eps)
    xc1, yc1 = x1.minimum(x1g), y1.minimum(y1g)
    xc2, yc2 = x2.maximum(x2g), y2.maximum(y2g)
    area_c = (xc2 - xc1) * (yc2 - yc1)
    loss = 1 - (iou - ((area_c - union) / (area_c + eps)))
    if reduction == "mean":
        return loss.mean() if loss.numel() > 0 else 0.0 * loss.sum()
    if reduction == "sum":
        return loss.sum()
    return loss


def box_convert(boxes: Tensor, in_fmt: str, out_fmt: str) -> Tensor:
    """Between 'xyxy', 'xywh' and 'cxcywh'."""

    formats = ("xyxy", "xywh", "cxcywh")
    if in_fmt not in formats or out_fmt not in formats:
        raise InvalidArgumentError(
            f"box_convert: unsupported bounding box formats {in_fmt!r} -> {out_fmt!r} "
            f"(supported: {formats})"
        )
    if in_fmt == out_fmt:
        return boxes.clone()
    a, b, c, d = boxes.unbind(-1)
    if in_fmt == "xywh":
        a, b, c, d = a, b, a + c, b + d
    elif in_fmt == "cxcywh":
        a, b, c, d = a - 0.5 * c, b - 0.5 * d, a + 0.5 * c, b + 0.5 * d
    if out_fmt == "xywh":
        a, b, c, d = a, b, c - a, d - b
    elif out_fmt == "cxcywh":
        a, b, c, d = (a + c) / 2, (b + d) / 2, c - a, d - b
    return rg.stack((a, b, c, d), dim=-1)


def clip_boxes_to_image(boxes: Tensor, size: tuple[int, int]) -> Tensor:
    if not isinstance(size, list | tuple) or len(size) != 2:  # (a bare unpacking ValueError)
        raise ShapeError(f"clip_boxes_to_image: size should be (height, width), got {size!r}")
    height, width = size
    x = boxes[..., 0::2].clamp(min=0, max=width)
    y = boxes[..., 1::2].clamp(min=0, max=height)
    return rg.stack((x, y), dim=boxes.dim()).reshape(boxes.shape)


def remove_small_boxes(boxes: Tensor, min_size: float) -> Tensor:
    ws, hs = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    return rg.where((ws >= min_size) & (hs >= min_size))[0]


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Indices (int64) of the boxes kept, by decreasing score: each box drops every later one
    that overlaps it with IoU > ``iou_threshold``."""

    _check_boxes("nms", boxes)
    if isinstance(iou_threshold, bool) or not isinstance(iou_threshold, int | float):
        # (NumPy's bare UFuncTypeError from the comparison)
        raise DTypeError(f"nms: iou_threshold should be a number, got {iou_threshold!r}")
    if scores.dim() != 1 or scores.shape[0] != boxes.shape[0]:
        raise ShapeError(
            f"nms: scores should be [N] for boxes [N, 4], got {list(scores.shape)} and "
            f"{list(boxes.shape)}"
        )
    b = boxes.detach().cpu().numpy().astype(np.float64)
    order = np.argsort(-scores.detach().cpu().numpy(), kind="stable")
    areas = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    suppressed = np.zeros(len(b), dtype=bool)
    keep = []
    for position, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = order[position + 1 :]
        xx1 = np.maximum(b[i, 0], b[rest, 0])
        yy1 = np.maximum(b[i, 1], b[rest, 1])
        xx2 = np.minimum(b[i, 2], b[rest, 2])
        yy2 = np.minimum(b[i, 3], b[rest, 3])
        inter = np.clip(xx2 - xx1, 0, None) * np.clip(yy2 - yy1, 0, None)
        with np.errstate(invalid="ignore", divide="ignore"):
            iou = inter / (areas[i] + areas[rest] - inter)
        suppressed[rest[iou > iou_threshold]] = True
    return rg.tensor(np.asarray(keep, dtype=np.int64), dtype=rg.int64)


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """nms within each category of ``idxs`` (boxes of different categories never suppress
    each other), kept indices by decreasing score."""

    _check_boxes("batched_nms", boxes)
    if boxes.numel() == 0:
        return rg.empty((0,), dtype=rg.int64)
    max_coordinate = boxes.max()
    offsets = idxs.to(boxes.dtype) * (max_coordinate + 1)
    return nms(boxes + offsets[:, None], scores, iou_threshold)


def stochastic_depth(input: Tensor, p: float, mode: str, training: bool = True) -> Tensor:  # noqa: A002
    """Drop whole rows ('row') or the whole batch ('batch') with probability ``p``, scaling the
    survivors by 1 / (1 - p)."""

    if p < 0.0 or p > 1.0:
        raise InvalidArgumentError(f"drop probability has to be between 0 and 1, but got {p}")
    if mode not in ("batch", "row"):
        raise InvalidArgumentError(f"mode has to be either 'batch' or 'row', but got {mode}")
    if not training or p == 0.0:
        return input
    survival_rate = 1.0 - p
    size = [input.shape[0]] + [1] * (input.dim() - 1) if mode == "row" else [1] * input.dim()
    noise = rg.empty(size, dtype=input.dtype, device=input.device).bernoulli_(survival_rate)
    if survival_rate > 0.0:
        noise = noise.div(survival_rate)
    return input * noise


class StochasticDepth(nn.Module):
    def __init__(self, p: float, mode: str) -> None:
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return stochastic_depth(input, self.p, self.mode, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, mode={self.mode}"


class FrozenBatchNorm2d(nn.Module):
    """BatchNorm2d with fixed statistics and affine parameters (all buffers)."""

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", rg.ones(num_features))
        self.register_buffer("bias", rg.zeros(num_features))
        self.register_buffer("running_mean", rg.zeros(num_features))
        self.register_buffer("running_var", rg.ones(num_features))

    def _load_from_state_dict(self, state_dict, prefix, *args: Any, **kwargs: Any) -> None:
        state_dict.pop(prefix + "num_batches_tracked", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight.reshape(1, -1, 1, 1)
        b = self.bias.reshape(1, -1, 1, 1)
        rv = self.running_var.reshape(1, -1, 1, 1)
        rm = self.running_mean.reshape(1, -1, 1, 1)
        scale = w * (rv + self.eps).rsqrt()
        return x * scale + (b - rm * scale)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class Conv2dNormActivation(nn.Sequential):
    """Conv2d, then a norm layer, then an activation (torchvision's keys: 0, 1, 2)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        padding: int | None = None,
        groups: int = 1,
        norm_layer: Callable | None = nn.BatchNorm2d,
        activation_layer: Callable | None = nn.ReLU,
        dilation: int = 1,
        inplace: bool | None = True,
        bias: bool | None = None,
    ) -> None:
        if padding is None:
            padding = (kernel_size - 1) // 2 * dilation
        if bias is None:
            bias = norm_layer is None
        layers = [
            nn.Conv2d(
                in_channels,
                out_channels,
                kernel_size,
                stride,
                padding,
                dilation=dilation,
                groups=groups,
                bias=bias,
            )
        ]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            params = {} if inplace is None else {"inplace": inplace}
            layers.append(activation_layer(**params))
        super().__init__(*layers)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    """input * scale_activation(fc2(activation(fc1(avgpool(input)))))."""

    def __init__(
        self,
        input_channels: int,
        squeeze_channels: int,
        activation: Callable = nn.ReLU,
        scale_activation: Callable = nn.Sigmoid,
    ) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        scale = self.fc2(self.activation(self.fc1(self.avgpool(input))))
        return self.scale_activation(scale) * input


class MLP(nn.Sequential):
    """Linear layers with norm, activation and dropout between (torchvision.ops.MLP)."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: list[int],
        norm_layer: Callable | None = None,
        activation_layer: Callable | None = nn.ReLU,
        inplace: bool | None = None,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        params = {} if inplace is None else {"inplace": inplace}
        layers: list[nn.Module] = []
        in_dim = in_channels
        for hidden_dim in hidden_channels[:-1]:
            layers.append(nn.Linear(in_dim, hidden_dim, bias=bias))
            if norm_layer is not None:
                layers.append(norm_layer(hidden_dim))
            layers.append(activation_layer(**params))
            layers.append(nn.Dropout(dropout, **params))
            in_dim = hidden_dim
        layers.append(nn.Linear(in_dim, hidden_channels[-1], bias=bias))
        layers.append(nn.Dropout(dropout, **params))
        super().__init__(*layers)


def _rois_as_rows(fn: str, boxes: Any) -> np.ndarray:
    """``boxes``: Tensor[K, 5] (batch index, x1, y1, x2, y2) or a list of Tensor[L, 4], one per
    image, as a float64 array [K, 5]."""
    if isinstance(boxes, (list, tuple)):
        rows = []
        for index, per_image in enumerate(boxes):
            array = np.asarray(per_image.detach().cpu().numpy(), dtype=np.float64)
            if array.ndim != 2 or array.shape[-1] != 4:
                raise ShapeError(
                    f"{fn}: boxes of image {index} should be [L, 4], got {list(array.shape)}"
                )
            rows.append(np.concatenate([np.full((len(array), 1), index), array], axis=1))
        return np.concatenate(rows) if rows else np.zeros((0, 5))
    if not isinstance(boxes, Tensor) or boxes.dim() != 2 or boxes.shape[-1] != 5:
        raise ShapeError(
            f"{fn}: boxes should be a Tensor [K, 5] (batch index, x1, y1, x2, y2) or a list of "
            f"Tensor [L, 4], got {list(getattr(boxes, 'shape', [])) or type(boxes).__name__}"
        )
    return np.asarray(boxes.detach().cpu().numpy(), dtype=np.float64)


def _output_size(output_size: Any, op: str = "roi_align") -> tuple[int, int]:
    if isinstance(output_size, numbers.Integral):
        output_size = (output_size, output_size)
    if (
        not isinstance(output_size, list | tuple)
        or len(output_size) != 2
        or any(not isinstance(n, numbers.Integral) or isinstance(n, bool) for n in output_size)
    ):
        raise DTypeError(
            f"{op}: output_size should be an int or (height, width), got {output_size!r}"
        )
    if min(output_size) <= 0:  # (a bare OverflowError: "cannot convert float infinity")
        raise InvalidArgumentError(f"{op}: output_size must be positive, got {output_size!r}")
    return int(output_size[0]), int(output_size[1])


def _bilinear_taps(positions: np.ndarray, size: int):
    """torchvision's roi_align sampling along one axis: the low and high indices, their weights,
    and whether each position is inside (-1, size)."""
    inside = (positions >= -1.0) & (positions <= size)
    clamped = np.maximum(positions, 0.0)
    low = np.floor(clamped).astype(np.int64)
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1, low)
    high = np.where(at_edge, size - 1, low + 1)
    clamped = np.where(at_edge, low.astype(np.float64), clamped)
    frac = clamped - low
    return low, high, 1.0 - frac, frac, inside


def roi_align(
    input: Tensor,  # noqa: A002 (torchvision's name)
    boxes: Any,
    output_size: Any,
    spatial_scale: float = 1.0,
    sampling_ratio: int = -1,
    aligned: bool = False,
) -> Tensor:
    """Region of interest align (Mask R-CNN): each box's ``output_size`` bins averaged over
    bilinear samples, as torchvision's kernel; differentiable in ``input``."""
    if not isinstance(input, Tensor) or input.dim() != 4:
        raise ShapeError(
            f"roi_align: input should be [N, C, H, W], got {list(getattr(input, 'shape', []))}"
        )
    rois = _rois_as_rows("roi_align", boxes)
    pooled_h, pooled_w = _output_size(output_size, "roi_align")
    _, channels, height, width = input.shape
    offset = 0.5 if aligned else 0.0
    outputs = []
    for batch_index, x1, y1, x2, y2 in rois:
        start_w, start_h = x1 * spatial_scale - offset, y1 * spatial_scale - offset
        roi_w, roi_h = x2 * spatial_scale - offset - start_w, y2 * spatial_scale - offset - start_h
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / pooled_h, roi_w / pooled_w
        grid_h = sampling_ratio if sampling_ratio > 0 else int(np.ceil(roi_h / pooled_h))
        grid_w = sampling_ratio if sampling_ratio > 0 else int(np.ceil(roi_w / pooled_w))
        count = max(grid_h * grid_w, 1)
        if grid_h <= 0 or grid_w <= 0:
            outputs.append(input.new_zeros((channels, pooled_h, pooled_w)))
            continue
        ys = start_h + (
            np.arange(pooled_h)[:, None] * bin_h
            + (np.arange(grid_h)[None, :] + 0.5) * bin_h / grid_h
        ).reshape(-1)
        xs = start_w + (
            np.arange(pooled_w)[:, None] * bin_w
            + (np.arange(grid_w)[None, :] + 0.5) * bin_w / grid_w
        ).reshape(-1)
        y_low, y_high, hy, ly, y_in = _bilinear_taps(ys, height)
        x_low, x_high, hx, lx, x_in = _bilinear_taps(xs, width)
        valid = (y_in[:, None] & x_in[None, :]).astype(np.float64)
        feature = input[int(batch_index)]
        total = None
        for rows, row_w in ((y_low, hy), (y_high, ly)):
            for cols, col_w in ((x_low, hx), (x_high, lx)):
                weight = rg.from_numpy(row_w[:, None] * col_w[None, :] * valid).to(input.dtype)
                taps = feature[:, rows[:, None], cols[None, :]] * weight.to(input.device)
                total = taps if total is None else total + taps
        binned = total.reshape(channels, pooled_h, grid_h, pooled_w, grid_w).sum(dim=(2, 4))
        outputs.append(binned / count)
    if not outputs:
        return input.new_zeros((0, channels, pooled_h, pooled_w))
    return rg.stack(outputs, dim=0)


def roi_pool(input: Tensor, boxes: Any, output_size: Any, spatial_scale: float = 1.0) -> Tensor:  # noqa: A002
    """Region of interest max pooling (Fast R-CNN), as torchvision's kernel (an empty bin is 0);
    differentiable in ``input``."""
    if not isinstance(input, Tensor) or input.dim() != 4:
        raise ShapeError(
            f"roi_pool: input should be [N, C, H, W], got {list(getattr(input, 'shape', []))}"
        )
    rois = _rois_as_rows("roi_pool", boxes)
    pooled_h, pooled_w = _output_size(output_size, "roi_pool")
    _, channels, height, width = input.shape

    def c_round(value: float) -> int:  # C's round: halves away from zero
        return int(np.sign(value) * np.floor(abs(value) + 0.5))

    outputs = []
    for batch_index, x1, y1, x2, y2 in rois:
        start_w, start_h = c_round(x1 * spatial_scale), c_round(y1 * spatial_scale)
        end_w, end_h = c_round(x2 * spatial_scale), c_round(y2 * spatial_scale)
        roi_w, roi_h = max(end_w - start_w + 1, 1), max(end_h - start_h + 1, 1)
        bin_h, bin_w = roi_h / pooled_h, roi_w / pooled_w
        feature = input[int(batch_index)]
        bins = []
        for ph in range(pooled_h):
            h0 = min(max(int(np.floor(ph * bin_h)) + start_h, 0), height)
            h1 = min(max(int(np.ceil((ph + 1) * bin_h)) + start_h, 0), height)
            for pw in range(pooled_w):
                w0 = min(max(int(np.floor(pw * bin_w)) + start_w, 0), width)
                w1 = min(max(int(np.ceil((pw + 1) * bin_w)) + start_w, 0), width)
                if h1 <= h0 or w1 <= w0:
                    bins.append(input.new_zeros((channels,)))
                else:
                    bins.append(feature[:, h0:h1, w0:w1].amax(dim=(1, 2)))
        outputs.append(rg.stack(bins, dim=1).reshape(channels, pooled_h, pooled_w))
    if not outputs:
        return input.new_zeros((0, channels, pooled_h, pooled_w))
    return rg.stack(outputs, dim=0)


class RoIAlign(nn.Module):
    def __init__(
        self, output_size: Any, spatial_scale: float, sampling_ratio: int, aligned: bool = False
    ) -> None:
        super().__init__()
        self.output_size, self.spatial_scale = output_size, spatial_scale
        self.sampling_ratio, self.aligned = sampling_ratio, aligned

    def forward(self, input: Tensor, rois: Any) -> Tensor:  # noqa: A002
        return roi_align(
            input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned
        )


class RoIPool(nn.Module):
    def __init__(self, output_size: Any, spatial_scale: float) -> None:
        super().__init__()
        self.output_size, self.spatial_scale = output_size, spatial_scale

    def forward(self, input: Tensor, rois: Any) -> Tensor:  # noqa: A002
        return roi_pool(input, rois, self.output_size, self.spatial_scale)


def sigmoid_focal_loss(
    inputs: Tensor,
    targets: Tensor,
    alpha: float = 0.25,
    gamma: float = 2,
    reduction: str = "none",
) -> Tensor:
    """RetinaNet's focal loss of logits ``inputs`` against binary ``targets`` of the same shape:
    the binary cross-entropy scaled by ``(1 - p_t) ** gamma`` and, where ``alpha >= 0``, by
    ``alpha_t`` (torchvision.ops.sigmoid_focal_loss)."""
    if reduction not in ("none", "mean", "sum"):
        raise InvalidArgumentError(
            f"sigmoid_focal_loss: invalid reduction {reduction!r}: "
            "supported reductions are none, mean, sum"
        )
    if not isinstance(inputs, Tensor) or not isinstance(targets, Tensor):
        raise InvalidArgumentError(
            "sigmoid_focal_loss: inputs and targets should be Tensors, got "
            f"{type(inputs).__name__} and {type(targets).__name__}"
        )
    if inputs.shape != targets.shape:
        raise ShapeError(
            "sigmoid_focal_loss: inputs and targets should have the same shape, got "
            f"{list(inputs.shape)} and {list(targets.shape)}"
        )
    p = inputs.sigmoid()
    ce_loss = nn.functional.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    if alpha >= 0:
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        loss = alpha_t * loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


class ExtraFPNBlock(nn.Module):
    """What a FeaturePyramidNetwork's ``extra_blocks`` is: a module taking the pyramid's
    results, its inputs and its names, and returning the results and names extended."""

    def forward(
        self, results: list[Tensor], x: list[Tensor], names: list[str]
    ) -> tuple[list[Tensor], list[str]]:
        raise NotImplementedError


class LastLevelMaxPool(ExtraFPNBlock):
    """A 'pool' level on top of the pyramid: its last level max-pooled with stride 2."""

    def forward(
        self, x: list[Tensor], y: list[Tensor], names: list[str]
    ) -> tuple[list[Tensor], list[str]]:
        names.append("pool")
        x.append(nn.functional.max_pool2d(x[-1], kernel_size=1, stride=2, padding=0))
        return x, names


class FeaturePyramidNetwork(nn.Module):
    """torchvision.ops.FeaturePyramidNetwork: 1x1 lateral convolutions (``inner_blocks``), a
    top-down pathway adding each coarser level upsampled to the finer one by nearest
    neighbours, and 3x3 output convolutions (``layer_blocks``); takes and returns an ordered
    dict of feature maps, finest first (torchvision's state-dict keys and initialization)."""

    def __init__(
        self,
        in_channels_list: list[int],
        out_channels: int,
        extra_blocks: ExtraFPNBlock | None = None,
        norm_layer: Callable[..., nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.inner_blocks = nn.ModuleList()
        self.layer_blocks = nn.ModuleList()
        for in_channels in in_channels_list:
            if in_channels == 0:
                raise InvalidArgumentError(
                    "FeaturePyramidNetwork: in_channels=0 is currently not supported"
                )
            self.inner_blocks.append(
                Conv2dNormActivation(
                    in_channels,
                    out_channels,
                    kernel_size=1,
                    padding=0,
                    norm_layer=norm_layer,
                    activation_layer=None,
                )
            )
            self.layer_blocks.append(
                Conv2dNormActivation(
                    out_channels,
                    out_channels,
                    kernel_size=3,
                    norm_layer=norm_layer,
                    activation_layer=None,
                )
            )
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_uniform_(module.weight, a=1)
                if module.bias is not None:
                    nn.init.constant_(module.bias, 0)
        if extra_blocks is not None and not isinstance(extra_blocks, nn.Module):
            raise InvalidArgumentError(
                "FeaturePyramidNetwork: extra_blocks should be an ExtraFPNBlock (a Module), got "
                f"{type(extra_blocks).__name__}"
            )
        self.extra_blocks = extra_blocks

    def get_result_from_inner_blocks(self, x: Tensor, idx: int) -> Tensor:
        return self.inner_blocks[idx](x)

    def get_result_from_layer_blocks(self, x: Tensor, idx: int) -> Tensor:
        return self.layer_blocks[idx](x)

    def forward(self, x: dict[str, Tensor]) -> OrderedDict[str, Tensor]:
        if not isinstance(x, dict) or len(x) != len(self.inner_blocks):
            raise InvalidArgumentError(
                f"FeaturePyramidNetwork: expected a dict of {len(self.inner_blocks)} feature "
                f"maps, finest first, got {type(x).__name__}"
                + (f" of {len(x)}" if isinstance(x, dict) else "")
            )
        names = list(x.keys())
        features = list(x.values())
        last_inner = self.get_result_from_inner_blocks(features[-1], -1)
        results = [self.get_result_from_layer_blocks(last_inner, -1)]
        for idx in range(len(features) - 2, -1, -1):
            inner_lateral = self.get_result_from_inner_blocks(features[idx], idx)
            feat_shape = inner_lateral.shape[-2:]
            inner_top_down = nn.functional.interpolate(last_inner, size=feat_shape, mode="nearest")
            last_inner = inner_lateral + inner_top_down
            results.insert(0, self.get_result_from_layer_blocks(last_inner, idx))
        if self.extra_blocks is not None:
            results, names = self.extra_blocks(results, features, names)
        return OrderedDict(zip(names, results, strict=True))


def _infer_scale(feature: Tensor, original_size: tuple[int, int]) -> float:
    """The power of two nearest the ratio of a feature map's height to the image's."""
    approx_scale = float(feature.shape[-2]) / float(original_size[0])
    return 2.0 ** round(math.log2(approx_scale))


class LevelMapper:
    """The pyramid level of each box (FPN paper, eq. 1): ``floor(canonical_level +
    log2(sqrt(area) / canonical_scale) + eps)`` clamped to ``[k_min, k_max]``, counted from
    ``k_min``."""

    def __init__(
        self,
        k_min: int,
        k_max: int,
        canonical_scale: int = 224,
        canonical_level: int = 4,
        eps: float = 1e-6,
    ) -> None:
        self.k_min, self.k_max = k_min, k_max
        self.s0, self.lvl0, self.eps = canonical_scale, canonical_level, eps

    def __call__(self, boxlists: list[Tensor]) -> Tensor:
        s = rg.cat([box_area(boxlist) for boxlist in boxlists]).sqrt()
        target_lvls = (self.lvl0 + (s / self.s0).log2() + self.eps).floor()
        target_lvls = target_lvls.clamp(min=self.k_min, max=self.k_max)
        return target_lvls.to(rg.int64) - self.k_min


class MultiScaleRoIAlign(nn.Module):
    """torchvision.ops.MultiScaleRoIAlign: each box pooled by :func:`roi_align` from the level
    of ``featmap_names`` its size maps to (:class:`LevelMapper`); the levels' scales are
    inferred from the first call's feature and image sizes, as torchvision's."""

    def __init__(
        self,
        featmap_names: list[str],
        output_size: int | tuple[int, int] | list[int],
        sampling_ratio: int,
        *,
        canonical_scale: int = 224,
        canonical_level: int = 4,
    ) -> None:
        super().__init__()
        if isinstance(output_size, int):
            output_size = (output_size, output_size)
        self.featmap_names = featmap_names
        self.sampling_ratio = sampling_ratio
        self.output_size = tuple(output_size)
        self.scales: list[float] | None = None
        self.map_levels: LevelMapper | None = None
        self.canonical_scale = canonical_scale
        self.canonical_level = canonical_level

    def forward(
        self, x: dict[str, Tensor], boxes: list[Tensor], image_shapes: list[tuple[int, int]]
    ) -> Tensor:
        x_filtered = [v for k, v in x.items() if k in self.featmap_names]
        if not x_filtered:
            raise InvalidArgumentError(
                f"MultiScaleRoIAlign: none of the feature maps {list(x)} is one of "
                f"featmap_names {list(self.featmap_names)}"
            )
        if not isinstance(boxes, list | tuple) or not boxes:
            raise InvalidArgumentError(
                "MultiScaleRoIAlign: boxes should be a list of [K, 4] tensors, one an image"
            )
        if self.scales is None or self.map_levels is None:
            original = (max(s[0] for s in image_shapes), max(s[1] for s in image_shapes))
            self.scales = [_infer_scale(feature, original) for feature in x_filtered]
            lvl_min = -math.log2(self.scales[0])
            lvl_max = -math.log2(self.scales[-1])
            self.map_levels = LevelMapper(
                int(lvl_min), int(lvl_max), self.canonical_scale, self.canonical_level
            )
        concat_boxes = rg.cat(list(boxes), dim=0)
        ids = rg.cat(
            [b.new_full((b.shape[0], 1), float(i)) for i, b in enumerate(boxes)], dim=0
        ).to(concat_boxes.dtype)
        rois = rg.cat([ids, concat_boxes], dim=1)
        if len(x_filtered) == 1:
            return roi_align(
                x_filtered[0],
                rois,
                self.output_size,
                spatial_scale=self.scales[0],
                sampling_ratio=self.sampling_ratio,
            )
        levels = self.map_levels(list(boxes))
        first = x_filtered[0]
        result = first.new_zeros((rois.shape[0], first.shape[1], *self.output_size))
        for level, (per_level_feature, scale) in enumerate(
            zip(x_filtered, self.scales, strict=True)
        ):
            idx_in_level = rg.where(levels == level)[0]
            rois_per_level = rois[idx_in_level]
            pooled = roi_align(
                per_level_feature,
                rois_per_level,
                self.output_size,
                spatial_scale=scale,
                sampling_ratio=self.sampling_ratio,
            )
            result[idx_in_level] = pooled.to(result.dtype)
        return result

    def extra_repr(self) -> str:
        return (
            f"featmap_names={self.featmap_names}, output_size={self.output_size}, "
            f"sampling_ratio={self.sampling_ratio}"
        )


def _submodule(leaf: str, *names: str) -> types.ModuleType:
    """torchvision keeps these names in ``torchvision.ops.<leaf>`` too, a path scripts import
    from (``from torchvision.ops.feature_pyramid_network import LastLevelMaxPool``); ops is one
    module here, so that path is a module of its own giving the very same objects."""
    module = types.ModuleType(f"{__name__}.{leaf}")
    for name in names:
        setattr(module, name, globals()[name])
    sys.modules[module.__name__] = module
    return module


feature_pyramid_network = _submodule(
    "feature_pyramid_network", "ExtraFPNBlock", "FeaturePyramidNetwork", "LastLevelMaxPool"
)
focal_loss = _submodule("focal_loss", "sigmoid_focal_loss")
poolers = _submodule("poolers", "LevelMapper", "MultiScaleRoIAlign")
boxes = _submodule(
    "boxes",
    "batched_nms",
    "box_area",
    "box_convert",
    "box_iou",
    "clip_boxes_to_image",
    "generalized_box_iou",
    "nms",
    "remove_small_boxes",
)
