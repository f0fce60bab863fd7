"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the assignment and loss code of detectors and mask classifiers, trained a few steps against
torch's run of the same code from the same weights and draws. The programs are written here in
the style of Megvii-BaseDetection/YOLOX, tianzhi0549/FCOS (on maskrcnn_benchmark) and
facebookresearch/Mask2Former (on detectron2 and DETR's utilities).

- An anchor-free decoupled head with SimOTA assignment, in YOLOX's style: ``prior_bias``
  replacing each ``conv.bias`` by ``torch.nn.Parameter(b.view(-1), requires_grad=True)`` after
  ``b.data.fill_``; the training forward writing ``out[..., :2] = (out[..., :2] + grid) *
  stride`` and ``out[..., 2:4] = torch.exp(...) * stride`` into the conv output, grids by
  ``torch.meshgrid(..., indexing="ij")`` cached per level, ``.type(dtype)`` of the
  ``feats[0].type()`` string, ``torch.zeros(1, n).fill_(stride).type_as(x)``; the losses with
  ``new_zeros``, ``F.one_hot``, ``encode_l1`` writing columns; the assignment under
  ``@torch.no_grad()``: the centre prior, pairwise IoU with ``(lt < rb).type(lt.type())``, the
  cost with ``100000.0 * (~both)``, ``sigmoid_()``/``sqrt_()`` in place under
  ``torch.cuda.amp.autocast(False)``, ``F.binary_cross_entropy``; dynamic k with its
  ``uint8`` matrix, ``torch.topk``/``clamp``/``.int()``/``tolist()``, ``assigned[:, shared] *=
  0``, ``fg[fg.clone()] = kept``; the IoU and GIoU box losses; ``ConvBNAct`` with in-place SiLU;
  the L1 term switched on after the first step; three SGD groups by ``add_param_group``; a
  weight EMA (``deepcopy(model).eval()``, ``v *= d`` and ``v += (1.0 - d) * current[name].detach()``
  on the state dict's tensors) and a cosine lr written into each group; inference decoding
  (``flatten(start_dim=2)``, ``torch.full``) and postprocessing (``pred.new(pred.shape)``,
  ``torch.max(..., keepdim=True)``, per-class and class-agnostic greedy NMS in plain torch,
  standing in for torchvision's ``nms``/``batched_nms``).
- A one-stage dense detector's loss in FCOS's style: ``Scale`` (``torch.FloatTensor``), towers of
  ``GroupNorm(32, ...)`` added by ``add_module``, ``torch.nn.init.normal_``/``constant_``,
  locations by ``torch.arange(..., step=)`` and ``torch.meshgrid``; the targets: centre sampling
  by ``torch.where`` into slices of ``new_zeros``, size ranges by ``new_tensor``/``expand``,
  ``area[inside == 0] = INF``, ``.min(dim=1)``, ``ltrb[range(len(locations)), which]``,
  ``torch.split`` per level; centerness targets; the IoU/GIoU loss of distances; a sigmoid
  focal loss in the style of maskrcnn_benchmark's CPU one (``(t == classes).float()``, ``((t !=
  classes) * (t >= 0)).float()``); ``torch.nonzero(...).squeeze(1)``, ``new_tensor([numel])``;
  a ``Targets`` holder built by ``torch.as_tensor``.
- A Mask2Former-style set criterion: mask losses through ``torch.jit.script``, point sampling
  by ``F.grid_sample(maps, 2.0 * coords - 1.0, ...)``, uncertain points by ``torch.rand``,
  ``torch.topk`` and ``chosen += shift[:, None]``, masks padded by ``slot[...].copy_(m)``, the
  class-weight buffer, ``torch.full`` targets written through a tuple index,
  ``F.cross_entropy(logits.transpose(1, 2), ..., weight)``, the auxiliary losses, the weights
  applied by ``losses[name] *= ...``; the Hungarian matcher with ``torch.einsum`` costs under
  ``amp.autocast(enabled=False)`` (``from torch.cuda import amp``) and scipy's
  ``linear_sum_assignment`` of ``cost.reshape(n_queries, -1).cpu()``; driven by a two-layer
  masked-attention decoder
  (sine positions by ``cumsum(..., dtype=)``, ``nn.MultiheadAttention`` blocks, the masks by
  ``torch.einsum("bqc,bchw->bqhw", ...)``, a boolean attention mask ``F.interpolate``-d,
  thresholded and repeated per head, ``blocked[torch.where(blocked.sum(-1) ==
  blocked.shape[-1])] = False`` resetting fully blocked rows, an empty ``nn.Sequential`` as
  the identity projection); and a sigmoid focal mask loss in place of the point-sampled
  cross-entropy in a second run.
- A multi-scale deformable-attention encoder in the style of Mask2Former's pixel decoder: the
  reference sampling (``value.split`` by products of 0-d tensors, ``reshape(n * heads, d, h,
  w)`` by 0-d tensors, ``F.grid_sample`` of offsets that carry gradients), the offsets' bias
  replaced by an ``nn.Parameter`` under ``torch.no_grad()`` and the directions scaled by
  ``start[:, :, p, :] *= p + 1``, ``torch.nn.init``'s ``constant_``/``xavier_uniform_``/
  ``normal_``, ``nn.Parameter(torch.Tensor(...))``, layers cloned by ``copy.deepcopy``, valid
  ratios, reference points by ``torch.linspace(0.5, h - 0.5, h)`` of the 0-d tensors met
  iterating the long shapes tensor, ``start_index`` by ``shapes.prod(1).cumsum(0)``; the
  output split back into maps by ``torch.split`` of 0-d tensor sizes and ``view(bs, -1,
  shapes[i][0], shapes[i][1])``.

The lines changed: the ``import`` lines and the gradient lines (``loss.backward()`` returns
the gradients, ``step`` takes them). torch's ``jit.script`` reads a function's source file,
which text run by ``exec`` has not: the torch run of the mask criterion calls the scripted
losses eagerly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

IMPORTS = (
    "\nimport torch\nimport torch.nn as nn\n",
    "\nimport retrograd as torch\nimport retrograd.nn as nn\n",
)
STEP = ("    loss.backward()\n    optimizer.step()\n", "    optimizer.step(loss.backward())\n")


# -- a YOLOX-style head ---------------------------------------------------------------------------
YOLOX_SOURCE = '''
import math
from copy import deepcopy

import torch
import torch.nn as nn
from torch.nn import functional as F


# ---- box helpers (boxes as centre x, centre y, width, height unless named xyxy) ----
def cxcywh_iou(a, b):
    """IoU of every box of a against every box of b: [len(a), len(b)]."""
    lt = torch.max(a[:, None, :2] - a[:, None, 2:] / 2, b[:, :2] - b[:, 2:] / 2)
    rb = torch.min(a[:, None, :2] + a[:, None, 2:] / 2, b[:, :2] + b[:, 2:] / 2)
    overlaps = (lt < rb).type(lt.type()).prod(dim=2)
    inter = torch.prod(rb - lt, 2) * overlaps
    return inter / (torch.prod(a[:, 2:], 1)[:, None] + torch.prod(b[:, 2:], 1) - inter)


class BoxIoULoss(nn.Module):
    """1 - IoU**2, or 1 - GIoU, per matched pair (reduction="none")."""

    def __init__(self, kind="iou"):
        super().__init__()
        self.kind = kind

    def forward(self, pred, target_boxes):
        pred, target = pred.view(-1, 4), target_boxes.view(-1, 4)
        p_lo, p_hi = pred[:, :2] - pred[:, 2:] / 2, pred[:, :2] + pred[:, 2:] / 2
        t_lo, t_hi = target[:, :2] - target[:, 2:] / 2, target[:, :2] + target[:, 2:] / 2
        lt, rb = torch.max(p_lo, t_lo), torch.min(p_hi, t_hi)
        inter = torch.prod(rb - lt, 1) * (lt < rb).type(lt.type()).prod(dim=1)
        union = torch.prod(pred[:, 2:], 1) + torch.prod(target[:, 2:], 1) - inter
        iou = inter / (union + 1e-16)
        if self.kind == "giou":
            hull = torch.prod(torch.max(p_hi, t_hi) - torch.min(p_lo, t_lo), 1)
            giou = iou - (hull - union) / hull.clamp(1e-16)
            return 1 - giou.clamp(min=-1.0, max=1.0)
        return 1 - iou**2


class ConvBNAct(nn.Module):
    def __init__(self, c_in, c_out, k=3, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, stride, padding=(k - 1) // 2, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x):
        x = self.bn(self.conv(x))
        return self.act(x)


class DecoupledHead(nn.Module):
    """Anchor-free: per level a 1x1 stem, then a class branch and a box/objectness branch."""

    def __init__(self, num_classes, in_channels, strides, width=16, iou_kind="iou"):
        super().__init__()
        self.num_classes, self.strides = num_classes, strides
        self.stems, self.cls_branch, self.box_branch = (
            nn.ModuleList(),
            nn.ModuleList(),
            nn.ModuleList(),
        )
        self.cls_out, self.box_out, self.obj_out = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for c in in_channels:
            self.stems.append(ConvBNAct(c, width, k=1))
            self.cls_branch.append(nn.Sequential(ConvBNAct(width, width), ConvBNAct(width, width)))
            self.box_branch.append(nn.Sequential(ConvBNAct(width, width), ConvBNAct(width, width)))
            self.cls_out.append(nn.Conv2d(width, num_classes, 1))
            self.box_out.append(nn.Conv2d(width, 4, 1))
            self.obj_out.append(nn.Conv2d(width, 1, 1))
        self.use_l1 = False
        self.box_loss = BoxIoULoss(iou_kind)
        self.bce = nn.BCEWithLogitsLoss(reduction="none")
        self.l1 = nn.L1Loss(reduction="none")
        self.grid_cache = [torch.zeros(1) for _ in strides]

    def prior_bias(self, prior_prob):
        value = -math.log((1 - prior_prob) / prior_prob)
        for conv in list(self.cls_out) + list(self.obj_out):
            bias = conv.bias.view(1, -1)
            bias.data.fill_(value)
            conv.bias = torch.nn.Parameter(bias.view(-1), requires_grad=True)

    def level_grid(self, level, h, w, dtype):
        grid = self.grid_cache[level]
        if grid.shape[2:4] != (h, w):
            ys, xs = torch.meshgrid([torch.arange(h), torch.arange(w)], indexing="ij")
            grid = torch.stack((xs, ys), 2).view(1, 1, h, w, 2).type(dtype)
            self.grid_cache[level] = grid
        return grid.view(1, -1, 2)

    def forward(self, feats, labels=None):
        per_level, raw_boxes, grids, level_strides = [], [], [], []
        for level, (x, stride) in enumerate(zip(feats, self.strides)):
            x = self.stems[level](x)
            cls_map = self.cls_out[level](self.cls_branch[level](x))
            box_feat = self.box_branch[level](x)
            box_map, obj_map = self.box_out[level](box_feat), self.obj_out[level](box_feat)
            if not self.training:
                per_level.append(torch.cat([box_map, obj_map.sigmoid(), cls_map.sigmoid()], 1))
                continue
            n, _, h, w = box_map.shape
            out = torch.cat([box_map, obj_map, cls_map], 1)
            out = (
                out.view(n, 1, 5 + self.num_classes, h, w)
                .permute(0, 1, 3, 4, 2)
                .reshape(n, h * w, -1)
            )
            grid = self.level_grid(level, h, w, feats[0].type())
            out[..., :2] = (out[..., :2] + grid) * stride  # decoded in place, in the conv output
            out[..., 2:4] = torch.exp(out[..., 2:4]) * stride
            per_level.append(out)
            grids.append(grid)
            level_strides.append(torch.zeros(1, grid.shape[1]).fill_(stride).type_as(feats[0]))
            if self.use_l1:
                raw = box_map.view(n, 1, 4, h, w).permute(0, 1, 3, 4, 2).reshape(n, -1, 4)
                raw_boxes.append(raw.clone())
        if self.training:
            return self.losses(
                torch.cat(per_level, 1),
                torch.cat(grids, 1),
                torch.cat(level_strides, 1),
                raw_boxes,
                labels,
                feats[0].dtype,
            )
        self.level_sizes = [o.shape[-2:] for o in per_level]
        flat = torch.cat([o.flatten(start_dim=2) for o in per_level], dim=2).permute(0, 2, 1)
        return self.decode(flat, feats[0].type())

    def decode(self, flat, dtype):
        grids, strides = [], []
        for (h, w), stride in zip(self.level_sizes, self.strides):
            ys, xs = torch.meshgrid([torch.arange(h), torch.arange(w)], indexing="ij")
            grid = torch.stack((xs, ys), 2).view(1, -1, 2)
            grids.append(grid)
            strides.append(torch.full((*grid.shape[:2], 1), stride))
        grids, strides = torch.cat(grids, dim=1).type(dtype), torch.cat(strides, dim=1).type(dtype)
        flat[..., :2] = (flat[..., :2] + grids) * strides
        flat[..., 2:4] = torch.exp(flat[..., 2:4]) * strides
        return flat

    def losses(self, outputs, grids, strides, raw_boxes, labels, dtype):
        boxes, obj, cls = outputs[:, :, :4], outputs[:, :, 4:5], outputs[:, :, 5:]
        counts = (labels.sum(dim=2) > 0).sum(dim=1)
        n_anchor = outputs.shape[1]
        cls_t, box_t, obj_t, l1_t, fg_all = [], [], [], [], []
        n_fg, n_gt_total = 0.0, 0.0
        for b in range(outputs.shape[0]):
            n_gt = int(counts[b])
            n_gt_total += n_gt
            if n_gt == 0:
                fg = outputs.new_zeros(n_anchor).bool()
                cls_t.append(outputs.new_zeros((0, self.num_classes)))
                box_t.append(outputs.new_zeros((0, 4)))
                l1_t.append(outputs.new_zeros((0, 4)))
                obj_t.append(outputs.new_zeros((n_anchor, 1)).to(dtype))
                fg_all.append(fg)
                continue
            gt_boxes, gt_cls = labels[b, :n_gt, 1:5], labels[b, :n_gt, 0]
            fg, classes, ious, gt_index, count = simota_assign(
                gt_boxes, gt_cls, boxes[b], cls[b], obj[b], grids, strides, self.num_classes
            )
            n_fg += count
            cls_t.append(F.one_hot(classes.to(torch.int64), self.num_classes) * ious.unsqueeze(-1))
            box_t.append(gt_boxes[gt_index])
            obj_t.append(fg.unsqueeze(-1).to(dtype))
            fg_all.append(fg)
            if self.use_l1:
                l1_t.append(
                    encode_l1(
                        outputs.new_zeros((count, 4)),
                        gt_boxes[gt_index],
                        strides[0][fg],
                        grids[0, :, 0][fg],
                        grids[0, :, 1][fg],
                    )
                )
        cls_t, box_t, obj_t, fg_all = (
            torch.cat(cls_t, 0),
            torch.cat(box_t, 0),
            torch.cat(obj_t, 0),
            torch.cat(fg_all, 0),
        )
        n_fg = max(n_fg, 1)
        iou_term = 5.0 * self.box_loss(boxes.view(-1, 4)[fg_all], box_t).sum() / n_fg
        obj_term = self.bce(obj.view(-1, 1), obj_t).sum() / n_fg
        cls_term = self.bce(cls.view(-1, self.num_classes)[fg_all], cls_t).sum() / n_fg
        l1_term = 0.0
        if self.use_l1:
            l1_term = (
                self.l1(torch.cat(raw_boxes, 1).view(-1, 4)[fg_all], torch.cat(l1_t, 0)).sum()
                / n_fg
            )
        total = iou_term + obj_term + cls_term + l1_term
        return total, iou_term, obj_term, cls_term, l1_term, n_fg / max(n_gt_total, 1)


def encode_l1(target, gt, stride, gx, gy, eps=1e-8):
    # the raw regression each matched box should have had, column by column
    target[:, 0] = gt[:, 0] / stride - gx
    target[:, 1] = gt[:, 1] / stride - gy
    target[:, 2] = torch.log(gt[:, 2] / stride + eps)
    target[:, 3] = torch.log(gt[:, 3] / stride + eps)
    return target


# ---- SimOTA label assignment ----
def centre_prior(gt_boxes, grids, strides, radius=2.5):
    """Anchors centred in a box or near its centre; among those, the pairs that are both."""
    s = strides[0]
    cx = ((grids[0, :, 0] + 0.5) * s).unsqueeze(0)
    cy = ((grids[0, :, 1] + 0.5) * s).unsqueeze(0)
    gx, gy = gt_boxes[:, 0:1], gt_boxes[:, 1:2]
    half_w, half_h = 0.5 * gt_boxes[:, 2:3], 0.5 * gt_boxes[:, 3:4]
    in_box = torch.stack(
        [cx - (gx - half_w), cy - (gy - half_h), (gx + half_w) - cx, (gy + half_h) - cy], 2
    )
    in_box = in_box.min(dim=-1).values > 0.0
    reach = radius * s.unsqueeze(0)
    in_centre = torch.stack(
        [cx - (gx - reach), cy - (gy - reach), (gx + reach) - cx, (gy + reach) - cy], 2
    )
    in_centre = in_centre.min(dim=-1).values > 0.0
    candidates = (in_box.sum(dim=0) > 0) | (in_centre.sum(dim=0) > 0)
    return candidates, in_box[:, candidates] & in_centre[:, candidates]


@torch.no_grad()
def simota_assign(gt_boxes, gt_cls, boxes, cls, obj, grids, strides, num_classes):
    fg, both = centre_prior(gt_boxes, grids, strides)
    n_gt = gt_boxes.shape[0]
    cand_boxes, cand_cls, cand_obj = boxes[fg], cls[fg], obj[fg]
    ious = cxcywh_iou(gt_boxes, cand_boxes)
    onehot = (
        F.one_hot(gt_cls.to(torch.int64), num_classes)
        .float()
        .unsqueeze(1)
        .repeat(1, cand_boxes.shape[0], 1)
    )
    with torch.cuda.amp.autocast(False):
        scores = cand_cls.float().unsqueeze(0).repeat(n_gt, 1, 1).sigmoid_()
        scores = scores * cand_obj.float().unsqueeze(0).repeat(n_gt, 1, 1).sigmoid_()
        cls_cost = F.binary_cross_entropy(scores.sqrt_(), onehot, reduction="none").sum(-1)
    cost = cls_cost + 3.0 * -torch.log(ious + 1e-8) + 100000.0 * (~both)
    return dynamic_k(cost, ious, gt_cls, n_gt, fg)


def dynamic_k(cost, ious, gt_cls, n_gt, fg):
    assigned = torch.zeros_like(cost, dtype=torch.uint8)
    top_ious, _ = torch.topk(ious, min(10, ious.size(1)), dim=1)
    ks = torch.clamp(top_ious.sum(1).int(), min=1).tolist()
    for g in range(n_gt):
        _, picked = torch.topk(cost[g], k=ks[g], largest=False)
        assigned[g][picked] = 1
    shared = assigned.sum(0) > 1
    if shared.sum() > 0:  # an anchor claimed twice goes to its cheapest box
        _, cheapest = torch.min(cost[:, shared], dim=0)
        assigned[:, shared] *= 0
        assigned[cheapest, shared] = 1
    kept = assigned.sum(0) > 0
    fg[fg.clone()] = kept
    gt_index = assigned[:, kept].argmax(0)
    return fg, gt_cls[gt_index], (assigned * ious).sum(0)[kept], gt_index, kept.sum().item()


# ---- inference: plain-torch NMS (standing in for torchvision's) and postprocessing ----
def greedy_nms(xyxy, scores, threshold):
    areas = (xyxy[:, 2] - xyxy[:, 0]) * (xyxy[:, 3] - xyxy[:, 1])
    order, keep = scores.argsort(descending=True), []
    while order.numel() > 0:
        best, rest = order[0], order[1:]
        keep.append(best)
        if rest.numel() == 0:
            break
        w = (xyxy[rest, 2].clamp(max=xyxy[best, 2]) - xyxy[rest, 0].clamp(min=xyxy[best, 0])).clamp(
            min=0
        )
        h = (xyxy[rest, 3].clamp(max=xyxy[best, 3]) - xyxy[rest, 1].clamp(min=xyxy[best, 1])).clamp(
            min=0
        )
        overlap = w * h / (areas[best] + areas[rest] - w * h)
        order = rest[overlap <= threshold]
    return torch.stack(keep) if keep else xyxy.new_zeros(0, dtype=torch.long)


def per_class_nms(xyxy, scores, classes, threshold):
    if xyxy.numel() == 0:
        return torch.empty((0,), dtype=torch.int64)
    shift = classes.to(xyxy) * (xyxy.max() + torch.tensor(1).to(xyxy))
    return greedy_nms(xyxy + shift[:, None], scores, threshold)


def postprocess(pred, num_classes, conf=0.7, iou_threshold=0.45, class_agnostic=False):
    corners = pred.new(pred.shape)
    corners[:, :, 0] = pred[:, :, 0] - pred[:, :, 2] / 2
    corners[:, :, 1] = pred[:, :, 1] - pred[:, :, 3] / 2
    corners[:, :, 2] = pred[:, :, 0] + pred[:, :, 2] / 2
    corners[:, :, 3] = pred[:, :, 1] + pred[:, :, 3] / 2
    pred[:, :, :4] = corners[:, :, :4]
    results = []
    for rows in pred:
        best, label = torch.max(rows[:, 5 : 5 + num_classes], 1, keepdim=True)
        keep = (rows[:, 4] * best.squeeze() >= conf).squeeze()
        dets = torch.cat((rows[:, :5], best, label.float()), 1)[keep]
        if not dets.size(0):
            results.append(None)
            continue
        score = dets[:, 4] * dets[:, 5]
        if class_agnostic:
            kept = greedy_nms(dets[:, :4], score, iou_threshold)
        else:
            kept = per_class_nms(dets[:, :4], score, dets[:, 6], iou_threshold)
        results.append(dets[kept])
    return results


# ---- training helpers: an EMA of the weights, three parameter groups ----
class WeightEMA:
    def __init__(self, model, decay=0.9999):
        self.ema = deepcopy(model).eval()
        self.updates = 0
        self.decay = lambda n: decay * (1 - math.exp(-n / 2000))
        for frozen in self.ema.parameters():
            frozen.requires_grad_(False)

    def update(self, model):
        with torch.no_grad():
            self.updates += 1
            d = self.decay(self.updates)
            current = model.state_dict()
            for name, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v *= d
                    v += (1.0 - d) * current[name].detach()


def grouped_sgd(model, lr, momentum=0.9, weight_decay=5e-4):
    norm_weights, weights, biases = [], [], []
    for name, m in model.named_modules():
        if hasattr(m, "bias") and isinstance(m.bias, nn.Parameter):
            biases.append(m.bias)
        if isinstance(m, nn.BatchNorm2d) or "bn" in name:
            norm_weights.append(m.weight)
        elif hasattr(m, "weight") and isinstance(m.weight, nn.Parameter):
            weights.append(m.weight)
    opt = torch.optim.SGD(norm_weights, lr=lr, momentum=momentum, nesterov=True)
    opt.add_param_group({"params": weights, "weight_decay": weight_decay})
    opt.add_param_group({"params": biases})
    return opt


head = DecoupledHead(3, in_channels=[8, 12], strides=[8, 16], iou_kind=iou_type)
head.prior_bias(1e-2)
initialize(head)
optimizer = grouped_sgd(head, 0.01)
ema = WeightEMA(head, 0.9998)
feats = [torch.randn(2, 8, 8, 8), torch.randn(2, 12, 4, 4)]
# per image up to three rows of (class, cx, cy, w, h); all-zero rows are padding. The first
# image's two boxes overlap: both want the same anchor, which dynamic k gives to the cheaper
labels = torch.tensor(
    [
        [[1.0, 20.0, 26.0, 18.0, 14.0], [2.0, 24.0, 24.0, 20.0, 18.0], [0.0, 0.0, 0.0, 0.0, 0.0]],
        [[0.0, 44.0, 38.0, 20.0, 16.0], [0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]],
    ]
)
head.train()
total_steps = 3
for step in range(total_steps):
    head.use_l1 = use_l1 and step >= 1  # the L1 term joins for the last steps
    loss, iou_term, obj_term, cls_term, l1_term, fg_ratio = head(feats, labels)
    record.append(
        [float(loss), float(iou_term), float(obj_term), float(cls_term), float(l1_term), fg_ratio]
    )
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    ema.update(head)
    for group in optimizer.param_groups:
        group["lr"] = 0.01 * 0.5 * (1.0 + math.cos(math.pi * (step + 1) / total_steps))
    record.append(params_of(head))  # after the step
record.append({k: v.numpy().copy() for k, v in ema.ema.state_dict().items()})
head.eval()
with torch.no_grad():
    record.append(head(feats).numpy().copy())
    record.append(ema.ema(feats).numpy().copy())
    for agnostic in (False, True):
        found = postprocess(head(feats), 3, conf=1e-5, iou_threshold=0.1, class_agnostic=agnostic)
        record.append({f"image {i}": d.numpy().copy() for i, d in enumerate(found)})
'''


@pytest.mark.parametrize("iou_type, use_l1", [("iou", True), ("giou", False)])
def test_yolox_simota_head_trains_as_torch(capsys, iou_type, use_l1):
    (theirs, ours), _ = runs_with_draws(
        YOLOX_SOURCE,
        [IMPORTS, STEP],
        capsys,
        9401,
        initialize=initializer(),
        params_of=params_of,
        iou_type=iou_type,
        use_l1=use_l1,
    )
    assert len(theirs) == 3 * 2 + 5
    assert 0 < len(theirs[-1]["image 0"]) < len(theirs[-2]["image 0"]) < 80  # NMS suppressed boxes
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


# -- an FCOS-style loss ---------------------------------------------------------------------------
FCOS_SOURCE = '''
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

INF = 100000000


class Targets(object):
    """The ground truth of one image: corner boxes and a field of class labels (1-based)."""

    def __init__(self, boxes, image_size):
        boxes = torch.as_tensor(boxes, dtype=torch.float32)
        if boxes.ndimension() != 2 or boxes.size(-1) != 4:
            raise ValueError("boxes must be [n, 4], got {}".format(tuple(boxes.shape)))
        self.boxes, self.image_size, self.fields = boxes, image_size, {}

    def add_field(self, name, value):
        self.fields[name] = value

    def get_field(self, name):
        return self.fields[name]

    def area(self):
        b = self.boxes  # pixel-inclusive corners, as the detection codebases count them
        return (b[:, 2] - b[:, 0] + 1) * (b[:, 3] - b[:, 1] + 1)


def focal_loss_per_class(logits, labels, gamma, alpha):
    """Sigmoid focal loss of [n, C] logits against integer labels (0 = background)."""
    classes = torch.arange(1, logits.shape[1] + 1, dtype=labels.dtype).unsqueeze(0)
    t = labels.unsqueeze(1)
    p = torch.sigmoid(logits)
    positive = (t == classes).float() * (1 - p) ** gamma * torch.log(p) * alpha
    negative = ((t != classes) * (t >= 0)).float() * p**gamma * torch.log(1 - p) * (1 - alpha)
    return -(positive + negative)


class FocalLoss(nn.Module):
    def __init__(self, gamma=2.0, alpha=0.25):
        super().__init__()
        self.gamma, self.alpha = gamma, alpha

    def forward(self, logits, labels):
        return focal_loss_per_class(logits, labels, self.gamma, self.alpha).sum()


class LTRBIoULoss(nn.Module):
    """IoU (as -log) or GIoU loss of distances (left, top, right, bottom) from one location."""

    def __init__(self, kind="iou"):
        super().__init__()
        self.kind = kind

    def forward(self, pred, target, weights=None):
        pl, pt, pr, pb = pred.unbind(1)
        tl, tt, tr, tb = target.unbind(1)
        pred_area = (pl + pr) * (pt + pb)
        target_area = (tl + tr) * (tt + tb)
        inter = (torch.min(pl, tl) + torch.min(pr, tr)) * (torch.min(pt, tt) + torch.min(pb, tb))
        hull = (torch.max(pl, tl) + torch.max(pr, tr)) * (
            torch.max(pt, tt) + torch.max(pb, tb)
        ) + 1e-7
        union = pred_area + target_area - inter
        iou = (inter + 1.0) / (union + 1.0)
        if self.kind == "iou":
            per_box = -torch.log(iou)
        elif self.kind == "giou":
            per_box = 1 - (iou - (hull - union) / hull)
        else:
            raise NotImplementedError(self.kind)
        if weights is not None and weights.sum() > 0:
            return (per_box * weights).sum()
        return per_box.sum()


class Scale(nn.Module):
    def __init__(self, init=1.0):
        super().__init__()
        self.scale = nn.Parameter(torch.FloatTensor([init]))

    def forward(self, x):
        return x * self.scale


def all_reduce_sum(t):  # one process: nothing to sum across
    return t


class DenseTargetLoss(object):
    """Per-location targets (size ranges per level, centre sampling) and the three losses."""

    def __init__(self, cfg):
        c = cfg.MODEL.FCOS
        self.focal = FocalLoss(c.LOSS_GAMMA, c.LOSS_ALPHA)
        self.box_loss = LTRBIoULoss(c.IOU_LOSS_TYPE)
        self.centerness_loss = nn.BCEWithLogitsLoss(reduction="sum")
        self.strides, self.radius, self.normalize = (
            c.FPN_STRIDES,
            c.CENTER_SAMPLING_RADIUS,
            c.NORM_REG_TARGETS,
        )
        self.size_ranges = [[-1, 24], [24, INF]]

    def centre_region(self, boxes, xs, ys):
        """[locations, boxes]: whether each location lies within `radius` strides of a box centre
        (clipped to the box)."""
        n_loc, n_box = len(xs), boxes.shape[0]
        boxes = boxes[None].expand(n_loc, n_box, 4)
        cx, cy = (boxes[..., 0] + boxes[..., 2]) / 2, (boxes[..., 1] + boxes[..., 3]) / 2
        region = boxes.new_zeros(boxes.shape)
        if cx[..., 0].sum() == 0:
            return xs.new_zeros(xs.shape, dtype=torch.uint8)
        start = 0
        for level, count in enumerate(self.points_per_level):
            stop = start + count
            r = self.strides[level] * self.radius
            rows = slice(start, stop)
            region[rows, :, 0] = torch.where(
                cx[rows] - r > boxes[rows, :, 0], cx[rows] - r, boxes[rows, :, 0]
            )
            region[rows, :, 1] = torch.where(
                cy[rows] - r > boxes[rows, :, 1], cy[rows] - r, boxes[rows, :, 1]
            )
            region[rows, :, 2] = torch.where(
                cx[rows] + r > boxes[rows, :, 2], boxes[rows, :, 2], cx[rows] + r
            )
            region[rows, :, 3] = torch.where(
                cy[rows] + r > boxes[rows, :, 3], boxes[rows, :, 3], cy[rows] + r
            )
            start = stop
        distances = torch.stack(
            (
                xs[:, None] - region[..., 0],
                ys[:, None] - region[..., 1],
                region[..., 2] - xs[:, None],
                region[..., 3] - ys[:, None],
            ),
            -1,
        )
        return distances.min(-1)[0] > 0

    def image_targets(self, locations, target, size_range):
        xs, ys = locations.unbind(1)
        boxes, classes = target.boxes, target.get_field("labels")
        ltrb = torch.stack(
            [
                xs[:, None] - boxes[:, 0][None],
                ys[:, None] - boxes[:, 1][None],
                boxes[:, 2][None] - xs[:, None],
                boxes[:, 3][None] - ys[:, None],
            ],
            dim=2,
        )
        if self.radius > 0:
            inside = self.centre_region(boxes, xs, ys)
        else:
            inside = ltrb.min(dim=2)[0] > 0
        reach = ltrb.max(dim=2)[0]
        in_range = (reach >= size_range[:, [0]]) & (reach <= size_range[:, [1]])
        area = target.area()[None].repeat(len(locations), 1)
        area[inside == 0] = INF
        area[in_range == 0] = INF
        smallest, which = area.min(dim=1)  # the smallest box still claiming the location
        ltrb = ltrb[range(len(locations)), which]
        classes = classes[which]
        classes[smallest == INF] = 0
        return classes, ltrb

    def targets_by_level(self, locations, targets):
        ranges = []
        for level, points in enumerate(locations):
            bounds = points.new_tensor(self.size_ranges[level])
            ranges.append(bounds[None].expand(len(points), -1))
        ranges = torch.cat(ranges, dim=0)
        self.points_per_level = [len(points) for points in locations]
        every = torch.cat(locations, dim=0)
        per_image = [self.image_targets(every, t, ranges) for t in targets]
        split = [
            (
                torch.split(c, self.points_per_level, dim=0),
                torch.split(r, self.points_per_level, dim=0),
            )
            for c, r in per_image
        ]
        classes, boxes = [], []
        for level in range(len(locations)):
            classes.append(torch.cat([c[level] for c, _ in split], dim=0))
            level_boxes = torch.cat([r[level] for _, r in split], dim=0)
            boxes.append(level_boxes / self.strides[level] if self.normalize else level_boxes)
        return classes, boxes

    @staticmethod
    def centerness_of(ltrb):
        lr, tb = ltrb[:, [0, 2]], ltrb[:, [1, 3]]
        ratio = (lr.min(dim=-1)[0] / lr.max(dim=-1)[0]) * (tb.min(dim=-1)[0] / tb.max(dim=-1)[0])
        return torch.sqrt(ratio)

    def __call__(self, locations, logits, regression, centerness, targets):
        num_classes = logits[0].size(1)
        classes, boxes = self.targets_by_level(locations, targets)
        flat_logits = torch.cat(
            [x.permute(0, 2, 3, 1).reshape(-1, num_classes) for x in logits], dim=0
        )
        flat_reg = torch.cat([x.permute(0, 2, 3, 1).reshape(-1, 4) for x in regression], dim=0)
        flat_ctr = torch.cat([x.reshape(-1) for x in centerness], dim=0)
        flat_classes = torch.cat([x.reshape(-1) for x in classes], dim=0)
        flat_boxes = torch.cat([x.reshape(-1, 4) for x in boxes], dim=0)

        positive = torch.nonzero(flat_classes > 0).squeeze(1)
        flat_reg, flat_boxes, flat_ctr = (
            flat_reg[positive],
            flat_boxes[positive],
            flat_ctr[positive],
        )
        n_pos = max(all_reduce_sum(positive.new_tensor([positive.numel()])).item() / 1.0, 1.0)
        cls_loss = self.focal(flat_logits, flat_classes.int()) / n_pos
        if positive.numel() > 0:
            ctr_target = self.centerness_of(flat_boxes)
            reg_loss = (
                self.box_loss(flat_reg, flat_boxes, ctr_target)
                / all_reduce_sum(ctr_target.sum()).item()
            )
            ctr_loss = self.centerness_loss(flat_ctr, ctr_target) / n_pos
        else:
            reg_loss, ctr_loss = flat_reg.sum(), flat_ctr.sum()
        return cls_loss, reg_loss, ctr_loss


class DenseHead(torch.nn.Module):
    """Class and box towers (conv, GroupNorm, ReLU) shared by the levels; a scale per level."""

    def __init__(self, cfg, channels):
        super().__init__()
        c = cfg.MODEL.FCOS
        self.strides, self.normalize, self.ctr_on_reg = (
            c.FPN_STRIDES,
            c.NORM_REG_TARGETS,
            c.CENTERNESS_ON_REG,
        )
        for name in ("cls_tower", "bbox_tower"):
            layers = []
            for _ in range(c.NUM_CONVS):
                layers += [
                    nn.Conv2d(channels, channels, 3, padding=1),
                    nn.GroupNorm(32, channels),
                    nn.ReLU(),
                ]
            self.add_module(name, nn.Sequential(*layers))
        self.cls_logits = nn.Conv2d(channels, c.NUM_CLASSES - 1, 3, padding=1)
        self.bbox_pred = nn.Conv2d(channels, 4, 3, padding=1)
        self.centerness = nn.Conv2d(channels, 1, 3, padding=1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                torch.nn.init.normal_(m.weight, std=0.01)
                torch.nn.init.constant_(m.bias, 0)
        torch.nn.init.constant_(self.cls_logits.bias, -math.log((1 - c.PRIOR_PROB) / c.PRIOR_PROB))
        self.scales = nn.ModuleList([Scale(1.0) for _ in self.strides])

    def forward(self, features):
        logits, regression, centerness = [], [], []
        for level, x in enumerate(features):
            cls_x, box_x = self.cls_tower(x), self.bbox_tower(x)
            logits.append(self.cls_logits(cls_x))
            centerness.append(self.centerness(box_x if self.ctr_on_reg else cls_x))
            reg = self.scales[level](self.bbox_pred(box_x))
            if self.normalize:
                reg = F.relu(reg)
                regression.append(reg if self.training else reg * self.strides[level])
            else:
                regression.append(torch.exp(reg))
        return logits, regression, centerness


class OneStageDetector(torch.nn.Module):
    def __init__(self, cfg, channels):
        super().__init__()
        self.head = DenseHead(cfg, channels)
        self.loss = DenseTargetLoss(cfg)
        self.strides = cfg.MODEL.FCOS.FPN_STRIDES

    @staticmethod
    def grid_points(h, w, stride):
        xs = torch.arange(0, w * stride, step=stride, dtype=torch.float32)
        ys = torch.arange(0, h * stride, step=stride, dtype=torch.float32)
        grid_y, grid_x = torch.meshgrid(ys, xs)
        return torch.stack((grid_x.reshape(-1), grid_y.reshape(-1)), dim=1) + stride // 2

    def forward(self, features, targets):
        logits, regression, centerness = self.head(features)
        locations = [self.grid_points(*f.size()[-2:], s) for f, s in zip(features, self.strides)]
        cls_loss, reg_loss, ctr_loss = self.loss(locations, logits, regression, centerness, targets)
        return {"loss_cls": cls_loss, "loss_reg": reg_loss, "loss_centerness": ctr_loss}


detector = OneStageDetector(cfg, channels=32)
initialize(detector)
optimizer = torch.optim.SGD(detector.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
features = [torch.randn(2, 32, 8, 8), torch.randn(2, 32, 4, 4)]  # two FPN levels
targets = []
for boxes, classes in (
    ([[6.0, 4.0, 22.0, 18.0], [14.0, 12.0, 58.0, 54.0]], [2, 3]),
    ([[28.0, 30.0, 44.0, 46.0]], [1]),
):
    t = Targets(torch.tensor(boxes), (64, 64))
    t.add_field("labels", torch.tensor(classes))
    targets.append(t)
detector.train()
for it in range(3):
    parts = detector(features, targets)
    record.append({k: v.item() for k, v in parts.items()})
    loss = sum(parts.values())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(params_of(detector))
'''


@pytest.mark.parametrize("iou_loss_type, center_sampling_radius", [("iou", 1.5), ("giou", 0.0)])
def test_fcos_loss_trains_as_torch(capsys, iou_loss_type, center_sampling_radius):
    import types

    fcos = types.SimpleNamespace(
        NUM_CLASSES=4, FPN_STRIDES=[8, 16], NORM_REG_TARGETS=True, CENTERNESS_ON_REG=True,
        NUM_CONVS=2, PRIOR_PROB=0.01, LOSS_GAMMA=2.0, LOSS_ALPHA=0.25,
        CENTER_SAMPLING_RADIUS=center_sampling_radius, IOU_LOSS_TYPE=iou_loss_type,
    )  # fmt: skip
    (theirs, ours), _ = runs_with_draws(
        FCOS_SOURCE,
        [IMPORTS, STEP],
        capsys,
        9402,
        initialize=initializer(),
        params_of=params_of,
        cfg=types.SimpleNamespace(MODEL=types.SimpleNamespace(FCOS=fcos)),
    )
    assert len(theirs) == 3 * 2
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


# -- a Mask2Former-style criterion and decoder ----------------------------------------------------
MASK2FORMER_SOURCE = '''
import math
from typing import List

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch import Tensor
from torch.cuda import amp


# ---- point sampling (masks are compared at sampled points, not over every pixel) ----
def sample_points(maps, coords, **kwargs):
    """maps [N, C, H, W] at coords [N, P, 2] in [0, 1]: [N, C, P]."""
    flat = coords.dim() == 3
    if flat:
        coords = coords.unsqueeze(2)
    values = F.grid_sample(maps, 2.0 * coords - 1.0, **kwargs)
    return values.squeeze(3) if flat else values


def uncertainty(logits):
    assert logits.shape[1] == 1
    return -(torch.abs(logits.clone()))


def uncertain_points(logits, num_points, oversample, importance):
    """Oversample random points, keep the most uncertain share, top up with fresh random ones."""
    n = logits.shape[0]
    drawn = int(num_points * oversample)
    coords = torch.rand(n, drawn, 2)
    scores = uncertainty(sample_points(logits, coords, align_corners=False))
    n_hard = int(importance * num_points)
    chosen = torch.topk(scores[:, 0, :], k=n_hard, dim=1)[1]
    chosen += (drawn * torch.arange(n, dtype=torch.long))[:, None]
    coords = coords.view(-1, 2)[chosen.view(-1), :].view(n, n_hard, 2)
    if num_points > n_hard:
        coords = torch.cat([coords, torch.rand(n, num_points - n_hard, 2)], dim=1)
    return coords


def pad_masks(masks: List[Tensor]):
    """Stack [k_i, H_i, W_i] masks into one zero-padded batch, with a True-where-padded map."""
    largest = [max(sizes) for sizes in zip(*[list(m.shape) for m in masks])]
    b = len(masks)
    batch = torch.zeros([b] + largest, dtype=masks[0].dtype)
    padded = torch.ones((b, largest[1], largest[2]), dtype=torch.bool)
    for m, slot, pad in zip(masks, batch, padded):
        slot[: m.shape[0], : m.shape[1], : m.shape[2]].copy_(m)
        pad[: m.shape[1], : m.shape[2]] = False
    return batch, padded


# ---- mask losses (scripted, as a segmentation codebase ships them) ----
def dice(inputs: torch.Tensor, targets: torch.Tensor, num_masks: float):
    probs = inputs.sigmoid().flatten(1)
    overlap = 2 * (probs * targets).sum(-1)
    return (1 - (overlap + 1) / (probs.sum(-1) + targets.sum(-1) + 1)).sum() / num_masks


def point_bce(inputs: torch.Tensor, targets: torch.Tensor, num_masks: float):
    return (
        F.binary_cross_entropy_with_logits(inputs, targets, reduction="none").mean(1).sum()
        / num_masks
    )


def point_focal(inputs, targets, num_masks, alpha: float = 0.25, gamma: float = 2):
    p = inputs.sigmoid()
    ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    return loss.mean(dim=1).sum() / num_masks


dice_scripted = torch.jit.script(dice)
point_bce_scripted = torch.jit.script(point_bce)
MASK_LOSS = point_bce_scripted


# ---- pairwise costs and the Hungarian matching ----
def pairwise_dice(inputs: torch.Tensor, targets: torch.Tensor):
    probs = inputs.sigmoid().flatten(1)
    overlap = 2 * torch.einsum("nc,mc->nm", probs, targets)
    return 1 - (overlap + 1) / (probs.sum(-1)[:, None] + targets.sum(-1)[None, :] + 1)


def pairwise_bce(inputs: torch.Tensor, targets: torch.Tensor):
    as_fg = F.binary_cross_entropy_with_logits(inputs, torch.ones_like(inputs), reduction="none")
    as_bg = F.binary_cross_entropy_with_logits(inputs, torch.zeros_like(inputs), reduction="none")
    cost = torch.einsum("nc,mc->nm", as_fg, targets) + torch.einsum("nc,mc->nm", as_bg, 1 - targets)
    return cost / inputs.shape[1]


pairwise_dice_scripted = torch.jit.script(pairwise_dice)
pairwise_bce_scripted = torch.jit.script(pairwise_bce)


class QueryMatcher(nn.Module):
    def __init__(self, w_class=1.0, w_mask=1.0, w_dice=1.0, num_points=0):
        super().__init__()
        self.w_class, self.w_mask, self.w_dice, self.num_points = (
            w_class,
            w_mask,
            w_dice,
            num_points,
        )

    @torch.no_grad()
    def forward(self, outputs, targets: list):
        n_queries = outputs["pred_logits"].shape[1]
        pairs = []
        for b, target in enumerate(targets):
            probs = outputs["pred_logits"][b].softmax(-1)
            pred = outputs["pred_masks"][b][:, None]
            gt = target["masks"].to(pred)[:, None]
            coords = torch.rand(1, self.num_points, 2)  # one set of points shared by every pair
            gt = sample_points(gt, coords.repeat(gt.shape[0], 1, 1), align_corners=False).squeeze(1)
            pred = sample_points(
                pred, coords.repeat(pred.shape[0], 1, 1), align_corners=False
            ).squeeze(1)
            with amp.autocast(enabled=False):
                pred, gt = pred.float(), gt.float()
                mask_cost = pairwise_bce_scripted(pred, gt)
                dice_cost = pairwise_dice_scripted(pred, gt)
            cost = (
                self.w_mask * mask_cost
                - self.w_class * probs[:, target["labels"]]
                + self.w_dice * dice_cost
            )
            pairs.append(linear_sum_assignment(cost.reshape(n_queries, -1).cpu()))
        return [
            (torch.as_tensor(q, dtype=torch.int64), torch.as_tensor(t, dtype=torch.int64))
            for q, t in pairs
        ]


class MaskSetLoss(nn.Module):
    """Matched-query losses: weighted cross-entropy over classes (a "no object" class weighted by
    eos_coef) and point-sampled mask losses, for the last layer and every auxiliary one."""

    def __init__(self, num_classes, matcher, weights, eos_coef, num_points, oversample, importance):
        super().__init__()
        self.num_classes, self.matcher, self.weights = num_classes, matcher, weights
        class_weight = torch.ones(num_classes + 1)
        class_weight[-1] = eos_coef
        self.register_buffer("class_weight", class_weight)
        self.num_points, self.oversample, self.importance = num_points, oversample, importance

    @staticmethod
    def flat_index(pairs, side):
        image = torch.cat([torch.full_like(p[side], i) for i, p in enumerate(pairs)])
        return image, torch.cat([p[side] for p in pairs])

    def class_loss(self, outputs, targets, pairs):
        logits = outputs["pred_logits"].float()
        wanted = torch.full(logits.shape[:2], self.num_classes, dtype=torch.int64)
        wanted[self.flat_index(pairs, 0)] = torch.cat(
            [t["labels"][j] for t, (_, j) in zip(targets, pairs)]
        )
        return {"loss_ce": F.cross_entropy(logits.transpose(1, 2), wanted, self.class_weight)}

    def mask_loss(self, outputs, targets, pairs, num_masks):
        pred = outputs["pred_masks"][self.flat_index(pairs, 0)][:, None]
        gt, _ = pad_masks([t["masks"] for t in targets])
        gt = gt.to(pred)[self.flat_index(pairs, 1)][:, None]
        with torch.no_grad():
            coords = uncertain_points(pred, self.num_points, self.oversample, self.importance)
            gt_at = sample_points(gt, coords, align_corners=False).squeeze(1)
        pred_at = sample_points(pred, coords, align_corners=False).squeeze(1)
        return {
            "loss_mask": MASK_LOSS(pred_at, gt_at, num_masks),
            "loss_dice": dice_scripted(pred_at, gt_at, num_masks),
        }

    def layer_losses(self, outputs, targets, num_masks, suffix=""):
        pairs = self.matcher(outputs, targets)
        found = {
            **self.class_loss(outputs, targets, pairs),
            **self.mask_loss(outputs, targets, pairs, num_masks),
        }
        return {k + suffix: v for k, v in found.items()}

    def forward(self, outputs, targets: list):
        num_masks = torch.as_tensor([sum(len(t["labels"]) for t in targets)], dtype=torch.float)
        num_masks = torch.clamp(num_masks / 1, min=1).item()  # one process: no all_reduce
        losses = self.layer_losses(
            {k: v for k, v in outputs.items() if k != "aux_outputs"}, targets, num_masks
        )
        for i, aux in enumerate(outputs.get("aux_outputs", [])):
            losses.update(self.layer_losses(aux, targets, num_masks, suffix=f"_{i}"))
        return losses


# ---- a masked-attention decoder: queries attend only where their last mask was foreground ----
class SinePositions(nn.Module):
    def __init__(self, n_feats, temperature=10000):
        super().__init__()
        self.n_feats, self.temperature, self.scale = n_feats, temperature, 2 * math.pi

    def forward(self, x):
        valid = ~torch.zeros((x.size(0), x.size(2), x.size(3)), dtype=torch.bool)
        y = valid.cumsum(1, dtype=torch.float32)
        x_ = valid.cumsum(2, dtype=torch.float32)
        y = y / (y[:, -1:, :] + 1e-6) * self.scale
        x_ = x_ / (x_[:, :, -1:] + 1e-6) * self.scale
        freq = torch.arange(self.n_feats, dtype=torch.float32)
        freq = self.temperature ** (2 * (freq // 2) / self.n_feats)
        px, py = x_[..., None] / freq, y[..., None] / freq
        px = torch.stack((px[..., 0::2].sin(), px[..., 1::2].cos()), dim=4).flatten(3)
        py = torch.stack((py[..., 0::2].sin(), py[..., 1::2].cos()), dim=4).flatten(3)
        return torch.cat((py, px), dim=3).permute(0, 3, 1, 2)


def xavier_matrices(module):
    for p in module.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)


class AttentionBlock(nn.Module):
    """Post-norm attention with a residual; positions added to queries and keys, not values."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=0.0)
        self.norm = nn.LayerNorm(d_model)  # post-norm
        self.drop = nn.Dropout(0.0)
        xavier_matrices(self)

    def forward(self, x, memory=None, mask=None, pos=None, query_pos=None):
        memory = x if memory is None else memory
        key = memory if pos is None else memory + pos
        attended = self.attn(
            x + query_pos, key, value=memory, attn_mask=mask, key_padding_mask=None
        )[0]
        return self.norm(x + self.drop(attended))


class FeedForward(nn.Module):
    def __init__(self, d_model, d_hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_hidden), nn.Linear(d_hidden, d_model)
        self.norm = nn.LayerNorm(d_model)  # post-norm too
        xavier_matrices(self)

    def forward(self, x):
        return self.norm(x + self.fc2(F.relu(self.fc1(x))))


class MaskedDecoder(nn.Module):
    def __init__(
        self,
        channels,
        num_classes,
        d_model,
        num_queries,
        n_heads,
        d_ffn,
        n_layers,
        mask_dim,
        n_levels=2,
    ):
        super().__init__()
        self.n_heads, self.n_layers, self.n_levels = n_heads, n_layers, n_levels
        self.positions = SinePositions(d_model // 2)
        self.cross_layers = nn.ModuleList(
            [AttentionBlock(d_model, n_heads) for _ in range(n_layers)]
        )
        self.self_layers = nn.ModuleList(
            [AttentionBlock(d_model, n_heads) for _ in range(n_layers)]
        )
        self.ffn_layers = nn.ModuleList([FeedForward(d_model, d_ffn) for _ in range(n_layers)])
        self.out_norm = nn.LayerNorm(d_model)
        self.query_feat = nn.Embedding(num_queries, d_model)
        self.query_pos = nn.Embedding(num_queries, d_model)
        self.level_embed = nn.Embedding(n_levels, d_model)
        # no projection when the widths already agree: an empty Sequential passes its input on
        self.project = nn.ModuleList(
            [
                nn.Conv2d(channels, d_model, 1) if channels != d_model else nn.Sequential()
                for _ in range(n_levels)
            ]
        )
        self.classify = nn.Linear(d_model, num_classes + 1)
        self.mask_mlp = nn.ModuleList(
            [nn.Linear(d_model, d_model), nn.Linear(d_model, d_model), nn.Linear(d_model, mask_dim)]
        )

    def heads(self, queries, mask_features, target_size):
        q = self.out_norm(queries).transpose(0, 1)
        emb = q
        for i, layer in enumerate(self.mask_mlp):
            emb = F.relu(layer(emb)) if i < len(self.mask_mlp) - 1 else layer(emb)
        masks = torch.einsum("bqc,bchw->bqhw", emb, mask_features)
        small = F.interpolate(masks, size=target_size, mode="bilinear", align_corners=False)
        # True = may not attend: the pixels this query's mask puts in the background
        blocked = (
            small.sigmoid().flatten(2).unsqueeze(1).repeat(1, self.n_heads, 1, 1).flatten(0, 1)
            < 0.5
        ).bool()
        return self.classify(q), masks, blocked.detach()

    def forward(self, feats, mask_features):
        sizes = [f.shape[-2:] for f in feats]
        memory = [
            (self.project[i](f).flatten(2) + self.level_embed.weight[i][None, :, None]).permute(
                2, 0, 1
            )
            for i, f in enumerate(feats)
        ]
        pos = [self.positions(f).flatten(2).permute(2, 0, 1) for f in feats]
        bs = memory[0].shape[1]
        query_pos = self.query_pos.weight.unsqueeze(1).repeat(1, bs, 1)
        queries = self.query_feat.weight.unsqueeze(1).repeat(1, bs, 1)
        logits, masks, blocked = self.heads(queries, mask_features, sizes[0])
        all_logits, all_masks = [logits], [masks]
        for i in range(self.n_layers):
            level = i % self.n_levels
            # a query whose mask blocks every pixel would attend nowhere: let it see everything
            blocked[torch.where(blocked.sum(-1) == blocked.shape[-1])] = False
            queries = self.cross_layers[i](
                queries, memory[level], mask=blocked, pos=pos[level], query_pos=query_pos
            )
            queries = self.self_layers[i](queries, pos=query_pos, query_pos=query_pos)
            queries = self.ffn_layers[i](queries)
            logits, masks, blocked = self.heads(
                queries, mask_features, sizes[(i + 1) % self.n_levels]
            )
            all_logits.append(logits)
            all_masks.append(masks)
        return {
            "pred_logits": all_logits[-1],
            "pred_masks": all_masks[-1],
            "aux_outputs": [
                {"pred_logits": a, "pred_masks": b} for a, b in zip(all_logits[:-1], all_masks[:-1])
            ],
        }


pixel_decoder = nn.Conv2d(3, 8, 3, stride=2, padding=1)  # a stand-in pixel decoder
decoder = MaskedDecoder(
    8, num_classes=3, d_model=8, num_queries=5, n_heads=2, d_ffn=16, n_layers=2, mask_dim=8
)
initialize(pixel_decoder)
initialize(decoder)
weights = {"loss_ce": 2.0, "loss_mask": 5.0, "loss_dice": 5.0}
weights.update({f"{k}_{i}": v for i in range(2) for k, v in list(weights.items())})
criterion = MaskSetLoss(
    3,
    QueryMatcher(w_class=2.0, w_mask=5.0, w_dice=5.0, num_points=12),
    weights,
    eos_coef=0.1,
    num_points=12,
    oversample=3.0,
    importance=0.75,
)
optimizer = torch.optim.AdamW(
    list(pixel_decoder.parameters()) + list(decoder.parameters()), lr=1e-3, weight_decay=0.05
)
images, gt_masks = torch.randn(2, 3, 16, 16), torch.rand(3, 16, 16) > 0.5
targets = [
    {"labels": torch.tensor([2, 0]), "masks": gt_masks[:2]},
    {"masks": gt_masks[2:], "labels": torch.tensor([1])},
]
for it in range(2):
    # stride 2, non-negative: a query can then put its whole mask in the background
    mask_features = F.relu(pixel_decoder(images))
    outputs = decoder(
        [F.avg_pool2d(mask_features, 2), F.avg_pool2d(mask_features, 4)], mask_features
    )
    losses = criterion(outputs, targets)  # unweighted
    for name in list(losses):
        if name in criterion.weights:
            losses[name] *= criterion.weights[name]
        else:
            losses.pop(name)
    record.append({name: value.item() for name, value in losses.items()})
    loss = sum(losses.values())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(params_of(pixel_decoder, decoder))
'''

MASK2FORMER_STEPS = [IMPORTS, STEP]  # (the from-imports are the harness's to port)


@pytest.mark.parametrize("mask_loss", ["sigmoid_ce", "sigmoid_focal"])
def test_mask2former_criterion_trains_as_torch(capsys, monkeypatch, mask_loss):
    # torch's jit.script reads a function's source file, which text run by exec has not: the
    # torch run calls the losses eagerly, as scripting computes them
    monkeypatch.setattr(torch.jit, "script", lambda fn: fn)
    source = MASK2FORMER_SOURCE
    if mask_loss == "sigmoid_focal":
        assert "MASK_LOSS = point_bce_scripted" in source
        source = source.replace("MASK_LOSS = point_bce_scripted", "MASK_LOSS = point_focal")
    (theirs, ours), _ = runs_with_draws(
        source,
        MASK2FORMER_STEPS,
        capsys,
        9403,
        initialize=initializer(),
        params_of=params_of,
        linear_sum_assignment=linear_sum_assignment,
    )
    assert len(theirs) == 2 * 2
    # the key biases have no true gradient (each adds the same to every score of a query's
    # row, which the softmax takes away), so AdamW moves them by the rounding noise: those
    # entries of in_proj_bias (the middle third) are left out, the rest compared on their own
    key_biased = [
        f"1.{kind}.{i}.attn.in_proj_bias"
        for kind in ("cross_layers", "self_layers")
        for i in range(2)
    ]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=key_biased)
    for mine, reference in zip(ours[1::2], theirs[1::2]):
        for name in key_biased:
            for part in (slice(0, 8), slice(16, 24)):
                np.testing.assert_allclose(
                    mine[name][part], reference[name][part], rtol=2e-4, atol=2e-5, err_msg=name
                )


# -- a deformable-attention encoder in the style of Mask2Former's pixel decoder -------------------
MSDEFORMATTN_SOURCE = '''
import copy
import math
import warnings

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.init import constant_, normal_, xavier_uniform_


def deform_sample(value, shapes, locations, weights):
    """The reference (non-CUDA) deformable sampling.
    value [N, S, heads, d], shapes [levels, 2] (a long tensor),
    locations [N, Q, heads, levels, points, 2]
    in [0, 1], weights [N, Q, heads, levels, points]: [N, Q, heads * d]."""
    n, _, heads, d = value.shape
    _, q, _, levels, points, _ = locations.shape
    per_level = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * locations - 1
    sampled = []
    for lvl, (h, w) in enumerate(shapes):  # h, w: 0-d tensors
        maps = per_level[lvl].flatten(2).transpose(1, 2).reshape(n * heads, d, h, w)
        grid = grids[:, :, :, lvl].transpose(1, 2).flatten(0, 1)
        sampled.append(
            F.grid_sample(maps, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        )
    weights = weights.transpose(1, 2).reshape(n * heads, 1, q, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1).view(n, heads * d, q)
    return out.transpose(1, 2).contiguous()


class DeformableAttention(nn.Module):
    def __init__(self, d_model, n_levels, n_heads, n_points):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not a multiple of n_heads {n_heads}")
        head_dim = d_model // n_heads
        if head_dim & (head_dim - 1):
            warnings.warn("a power of 2 per head suits the CUDA kernel best")
        self.d_model, self.n_levels, self.n_heads, self.n_points = (
            d_model,
            n_levels,
            n_heads,
            n_points,
        )
        samples = n_heads * n_levels * n_points
        self.sampling_offsets = nn.Linear(d_model, 2 * samples)
        self.attention_weights = nn.Linear(d_model, samples)
        self.value_proj, self.output_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.reset()

    def reset(self):
        constant_(self.sampling_offsets.weight.data, 0.0)
        # each head starts looking along its own direction, farther for each further point
        angles = torch.arange(self.n_heads, dtype=torch.float32) * (2.0 * math.pi / self.n_heads)
        directions = torch.stack([angles.cos(), angles.sin()], -1)
        directions = directions / directions.abs().max(-1, keepdim=True)[0]
        start = directions.view(self.n_heads, 1, 1, 2).repeat(1, self.n_levels, self.n_points, 1)
        for p in range(self.n_points):
            start[:, :, p, :] *= p + 1
        with torch.no_grad():
            self.sampling_offsets.bias = nn.Parameter(start.view(-1))
        constant_(self.attention_weights.weight.data, 0.0)
        constant_(self.attention_weights.bias.data, 0.0)
        for proj in (self.value_proj, self.output_proj):
            xavier_uniform_(proj.weight.data)
            constant_(proj.bias.data, 0.0)

    def forward(self, query, reference, memory, shapes, start_index, padding=None):
        n, q, _ = query.shape
        _, s, _ = memory.shape
        assert (shapes[:, 0] * shapes[:, 1]).sum() == s
        value = self.value_proj(memory)
        if padding is not None:
            value = value.masked_fill(padding[..., None], float(0))
        value = value.view(n, s, self.n_heads, self.d_model // self.n_heads)
        offsets = self.sampling_offsets(query).view(
            n, q, self.n_heads, self.n_levels, self.n_points, 2
        )
        weights = self.attention_weights(query).view(
            n, q, self.n_heads, self.n_levels * self.n_points
        )
        weights = F.softmax(weights, -1).view(n, q, self.n_heads, self.n_levels, self.n_points)
        normalizer = torch.stack(
            [shapes[..., 1], shapes[..., 0]], -1
        )  # offsets are in cells: (w, h)
        locations = (
            reference[:, :, None, :, None, :] + offsets / normalizer[None, None, None, :, None, :]
        )
        return self.output_proj(deform_sample(value, shapes, locations, weights))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, d_ffn, n_levels, n_heads, n_points):
        super().__init__()
        self.attn = DeformableAttention(d_model, n_levels, n_heads, n_points)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, d_ffn), nn.ReLU(), nn.Dropout(0.0), nn.Linear(d_ffn, d_model)
        )

    def forward(self, x, pos, reference, shapes, start_index, padding):
        x = self.norm1(x + self.attn(x + pos, reference, x, shapes, start_index, padding))
        return self.norm2(x + self.ffn(x))


class DeformableEncoder(nn.Module):
    """Every pixel of every level attends to a few sampled points on each level."""

    def __init__(self, d_model, n_heads, n_layers, d_ffn, n_levels, n_points):
        super().__init__()
        layer = EncoderLayer(d_model, d_ffn, n_levels, n_heads, n_points)
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(n_layers)])
        self.level_embed = nn.Parameter(torch.Tensor(n_levels, d_model))
        for p in self.parameters():
            if p.dim() > 1:
                xavier_uniform_(p)
        for m in self.modules():
            if isinstance(m, DeformableAttention):
                m.reset()
        normal_(self.level_embed)

    @staticmethod
    def valid_ratios(padding):
        _, h, w = padding.shape
        rows = torch.sum(~padding[:, :, 0], 1).float() / h
        cols = torch.sum(~padding[:, 0, :], 1).float() / w
        return torch.stack([cols, rows], -1)

    @staticmethod
    def reference_points(shapes, ratios):
        points = []
        for lvl, (h, w) in enumerate(shapes):  # 0-d tensors, straight into linspace
            ys, xs = torch.meshgrid(
                torch.linspace(0.5, h - 0.5, h, dtype=torch.float32),
                torch.linspace(0.5, w - 0.5, w, dtype=torch.float32),
            )
            ys = ys.reshape(-1)[None] / (ratios[:, None, lvl, 1] * h)
            xs = xs.reshape(-1)[None] / (ratios[:, None, lvl, 0] * w)
            points.append(torch.stack((xs, ys), -1))
        return torch.cat(points, 1)[:, :, None] * ratios[:, None]

    def forward(self, maps, positions):
        paddings = [torch.zeros((m.size(0), m.size(2), m.size(3)), dtype=torch.bool) for m in maps]
        flat, flat_pad, flat_pos, shapes = [], [], [], []
        for lvl, (m, pad, pos) in enumerate(zip(maps, paddings, positions)):
            shapes.append(tuple(m.shape[2:]))
            flat.append(m.flatten(2).transpose(1, 2))
            flat_pad.append(pad.flatten(1))
            flat_pos.append(pos.flatten(2).transpose(1, 2) + self.level_embed[lvl].view(1, 1, -1))
        x, padding, pos = torch.cat(flat, 1), torch.cat(flat_pad, 1), torch.cat(flat_pos, 1)
        shapes = torch.as_tensor(shapes, dtype=torch.long)
        start_index = torch.cat((shapes.new_zeros((1,)), shapes.prod(1).cumsum(0)[:-1]))
        ratios = torch.stack([self.valid_ratios(p) for p in paddings], 1)
        reference = self.reference_points(shapes, ratios)
        for layer in self.layers:
            x = layer(x, pos, reference, shapes, start_index, padding)
        return x, shapes, start_index


encoder = DeformableEncoder(d_model=8, n_heads=2, n_layers=2, d_ffn=16, n_levels=2, n_points=2)
project = nn.ModuleList(
    [nn.Sequential(nn.Conv2d(3, 8, kernel_size=1), nn.GroupNorm(4, 8)) for _ in range(2)]
)
initialize(encoder)
initialize(project)
# zero offset weights would sample the same points whatever the input: draw them instead
with torch.no_grad():
    for layer in encoder.layers:
        layer.attn.sampling_offsets.weight.copy_(torch.randn(16, 8) * 0.3)
optimizer = torch.optim.AdamW(
    list(encoder.parameters()) + list(project.parameters()), lr=1e-3, weight_decay=1e-4
)
inputs = [torch.randn(2, 3, 6, 6), torch.randn(2, 3, 3, 3)]
goals = [torch.randn(2, 8, 6, 6), torch.randn(2, 8, 3, 3)]
for it in range(2):
    maps = [proj(x) for proj, x in zip(project, inputs)]
    y, shapes, start_index = encoder(maps, [torch.zeros_like(m) for m in maps])
    n_levels = len(maps)
    # back into one map per level: split sizes and view sizes are 0-d tensors
    sizes = [
        (start_index[i + 1] if i + 1 < n_levels else y.shape[1]) - start_index[i]
        for i in range(n_levels)
    ]
    levels = [
        z.transpose(1, 2).view(y.shape[0], -1, shapes[i][0], shapes[i][1])
        for i, z in enumerate(torch.split(y, sizes, dim=1))
    ]
    loss = sum(F.mse_loss(out, goal) for out, goal in zip(levels, goals))
    record.append(loss.item())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(params_of(encoder, project))
record.append(start_index.numpy().copy())
'''


def test_mask2former_msdeformattn_encoder_trains_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        MSDEFORMATTN_SOURCE,
        [IMPORTS, STEP],
        capsys,
        9404,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 2 * 2 + 1
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
