"""A program written here in the style of a small detector trained with torchvision's ops,
run under torch and, ported, under retrograd (the harness: ``tests/real_ports.py``).

- a simplified detection loss (focal loss for classes and objectness through
  ``torchvision.ops.sigmoid_focal_loss``, a GIoU box loss through a repository's
  ``utils.box_ops.generalized_box_iou``): each pyramid level flattened by ``h.view(B, C, H *
  W).permute(0, 2, 1)`` and joined by ``torch.cat(..., dim=1)``; totals started as
  ``torch.tensor(0.0, device=device)`` and grown by ``+=``; positives drawn by
  ``torch.randperm(N, device=device)[:k]``; ``cls_targets[i, lbl] = 1.0`` indexed by the 0-d
  label tensors met iterating ``labels[:k]`` (compared by ``0 < lbl < num_classes``);
  ``torch.diag`` of the GIoU matrix; an image without boxes taking the all-negative branch
  (``boxes.numel() == 0``); trained a few SGD steps on a detector whose neck is
  ``torchvision.ops.FeaturePyramidNetwork`` over two backbone levels with
  ``LastLevelMaxPool`` and whose heads are shared convolutions.

torchvision is not installed beside this torch: the torch run's ``torchvision.ops`` is a
stand-in written here to torchvision's documented definitions (``sigmoid_focal_loss``,
``generalized_box_iou``, ``FeaturePyramidNetwork`` without norm layers). ``torch.randperm``
draws from one NumPy stream in both runs.
"""

import collections
from types import SimpleNamespace

import numpy as np
import torch
from tests.real_ports import assert_records_agree, initializer, port, ported_imports, run_source

import retrograd as rg

LOSS_SOURCE = """
import torch
import torch.nn as nn
from utils import box_ops
from torchvision.ops import sigmoid_focal_loss as focal_loss


def flatten_levels(maps):
    # [B, C, H, W] per level -> [B, sum of H*W, C]
    rows = []
    for level in maps:
        b, c, h, w = level.shape
        rows.append(level.view(b, c, h * w).permute(0, 2, 1))
    return torch.cat(rows, dim=1)


class FocalGiouLoss(nn.Module):
    # no anchor matching: the positives are random places, one per ground-truth box
    def __init__(self, alpha=0.25, gamma=2.0, box_weight=1.0):
        super().__init__()
        self.alpha, self.gamma, self.box_weight = alpha, gamma, box_weight

    def focal(self, logits, targets):
        spread = dict(alpha=self.alpha, gamma=self.gamma)
        return focal_loss(logits, targets, reduction="sum", **spread)

    def forward(self, heads, targets):
        device = heads["cls"][0].device
        cls, box, obj = (flatten_levels(heads[name]) for name in ("cls", "box", "obj"))
        batch, places, classes = cls.shape
        cls_sum = torch.tensor(0.0, device=device)
        box_sum = torch.tensor(0.0, device=device)
        obj_sum = torch.tensor(0.0, device=device)
        positives = 0
        for i in range(batch):
            gt_boxes = targets[i]["boxes"].to(device)
            gt_labels = targets[i]["labels"].to(device)
            objectness = obj[i].squeeze(-1)
            if gt_boxes.numel() == 0:
                obj_sum += self.focal(objectness, torch.zeros_like(objectness))
                continue
            k = min(gt_boxes.size(0), places)
            picked = torch.randperm(places, device=device)[:k]
            logits = cls[i, picked]
            wanted = torch.zeros_like(logits)
            for j, lbl in enumerate(gt_labels[:k]):
                if lbl > 0 and lbl < classes:  # 0 is background
                    wanted[j, lbl] = 1.0
            cls_sum += self.focal(logits, wanted)
            present = torch.zeros_like(objectness)
            present[picked] = 1.0
            obj_sum += self.focal(objectness, present)
            overlap = box_ops.generalized_box_iou(gt_boxes[:k], box[i, picked])
            box_sum += (1.0 - torch.diag(overlap)).sum()
            positives += k
        positives = max(positives, 1)
        parts = {"cls": cls_sum / positives, "obj": obj_sum / positives,
                 "box": self.box_weight * box_sum / positives}
        parts["total"] = parts["cls"] + parts["obj"] + parts["box"]
        return parts


import collections

import torchvision
from torchvision.ops import feature_pyramid_network as fpn


class PyramidDetector(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.ReLU())
        self.stage = nn.Sequential(nn.Conv2d(4, 6, 3, stride=2, padding=1), nn.ReLU())
        pool = fpn.LastLevelMaxPool()
        self.neck = torchvision.ops.FeaturePyramidNetwork([4, 6], 6, extra_blocks=pool)
        self.cls_head = nn.Conv2d(6, classes, 3, padding=1)
        self.box_head = nn.Conv2d(6, 4, 3, padding=1)
        self.obj_head = nn.Conv2d(6, 1, 3, padding=1)

    def forward(self, images):
        fine = self.stem(images)
        coarse = self.stage(fine)
        levels = list(self.neck(collections.OrderedDict(fine=fine, coarse=coarse)).values())
        return {"cls": [self.cls_head(f) for f in levels],
                "box": [4.0 * (self.box_head(f) + 2.0) for f in levels],
                "obj": [self.obj_head(f) for f in levels]}


detector = PyramidDetector(classes=4)
initialize(detector)
loss_fn = FocalGiouLoss(box_weight=2.0)
sgd = torch.optim.SGD(detector.parameters(), lr=0.02, momentum=0.9)
pictures, truth = make_batch(torch)
for step in range(3):
    parts = loss_fn(detector(pictures), truth)
    sgd.zero_grad()
    parts["total"].backward()
    sgd.step()
    record.append({name: value.item() for name, value in parts.items()})
record.append({k: v.detach().numpy().copy() for k, v in detector.state_dict().items()})
"""

STEPS = [
    ("import torch\nimport torch.nn as nn\n", ""),
    (
        "from torchvision.ops import sigmoid_focal_loss as focal_loss",
        "from retrograd.vision.ops import sigmoid_focal_loss as focal_loss",
    ),
    (
        "from utils import box_ops",
        "from retrograd.vision import ops as box_ops",
    ),
    ("import torchvision\n", "import retrograd.vision as torchvision\n"),
    ("from torchvision.ops import feature", "from retrograd.vision.ops import feature"),
    ("    sgd.zero_grad()\n", ""),
    (
        '    parts["total"].backward()\n    sgd.step()',
        '    grads = parts["total"].backward()\n    sgd.step(grads)',
    ),
]


def torch_ops_stand_in() -> SimpleNamespace:
    """The torch run's torchvision.ops: focal loss, generalized IoU and a feature pyramid
    (1x1 lateral convolutions, nearest upsampling top-down, 3x3 output convolutions, a max
    pool of stride 2 as the extra level), written to torchvision's documented definitions."""
    F = torch.nn.functional  # noqa: N806 (torch scripts' name for it)

    def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2, reduction="none"):
        prob = torch.sigmoid(inputs)
        bce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
        right = targets * prob + (1 - targets) * (1 - prob)
        loss = bce * (1 - right) ** gamma
        if alpha >= 0:
            loss = (targets * alpha + (1 - targets) * (1 - alpha)) * loss
        if reduction == "none":
            return loss
        return loss.sum() if reduction == "sum" else loss.mean()

    def generalized_box_iou(first, second):
        def area(b):
            return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])

        a, b = first[:, None, :], second[None, :, :]
        inter_wh = (torch.min(a[..., 2:], b[..., 2:]) - torch.max(a[..., :2], b[..., :2])).clamp(
            min=0
        )
        inter = inter_wh[..., 0] * inter_wh[..., 1]
        union = area(first)[:, None] + area(second)[None, :] - inter
        hull_wh = (torch.max(a[..., 2:], b[..., 2:]) - torch.min(a[..., :2], b[..., :2])).clamp(
            min=0
        )
        hull = hull_wh[..., 0] * hull_wh[..., 1]
        return inter / union - (hull - union) / hull

    class LastLevelMaxPool(torch.nn.Module):
        def forward(self, outputs, inputs, names):
            return [*outputs, F.max_pool2d(outputs[-1], 1, 2, 0)], [*names, "pool"]

    class FeaturePyramidNetwork(torch.nn.Module):
        def __init__(self, in_channels_list, out_channels, extra_blocks=None):
            super().__init__()
            nn = torch.nn

            def conv(c_in, size):
                layer = nn.Conv2d(c_in, out_channels, size, padding=size // 2)
                nn.init.kaiming_uniform_(layer.weight, a=1)
                nn.init.constant_(layer.bias, 0)
                return nn.Sequential(layer)

            # torchvision's parameter names: inner_blocks.i.0, layer_blocks.i.0
            self.inner_blocks = nn.ModuleList([conv(c, 1) for c in in_channels_list])
            self.layer_blocks = nn.ModuleList([conv(out_channels, 3) for _ in in_channels_list])
            self.extra_blocks = extra_blocks

        def forward(self, x):
            names, maps = list(x), list(x.values())
            top = self.inner_blocks[-1](maps[-1])
            outs = [self.layer_blocks[-1](top)]
            for i in reversed(range(len(maps) - 1)):
                lateral = self.inner_blocks[i](maps[i])
                top = lateral + F.interpolate(top, size=lateral.shape[-2:], mode="nearest")
                outs.insert(0, self.layer_blocks[i](top))
            if self.extra_blocks is not None:
                outs, names = self.extra_blocks(outs, maps, names)
            return collections.OrderedDict(zip(names, outs))

    return SimpleNamespace(
        sigmoid_focal_loss=sigmoid_focal_loss,
        generalized_box_iou=generalized_box_iou,
        FeaturePyramidNetwork=FeaturePyramidNetwork,
        LastLevelMaxPool=LastLevelMaxPool,
    )


def make_batch(lib):
    rng = np.random.default_rng(451)
    images = lib.tensor(rng.normal(size=(3, 3, 16, 16)), dtype=lib.float32)
    corners = rng.uniform(0, 8, size=(3, 2))
    targets = [
        {
            "boxes": lib.tensor(np.concatenate([corners, corners + [6, 5]], 1), dtype=lib.float32),
            "labels": lib.tensor([2, 0, 3]),
        },
        {"boxes": lib.zeros((0, 4)), "labels": lib.zeros((0,), dtype=lib.int64)},
        {
            "boxes": lib.tensor([[1.0, 2.0, 9.0, 12.0], [4.0, 4.0, 14.0, 9.0]]),
            "labels": lib.tensor([1, 3]),
        },
    ]
    return images, targets


def test_detection_loss_on_fpn_detector_trains_as_torch():
    torch.manual_seed(0)
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        draws = np.random.default_rng(451)

        def randperm(n, *, device=None, lib=lib, draws=draws, **_):
            return lib.tensor(draws.permutation(n), dtype=lib.int64)

        shared = {"record": record, "initialize": initialize, "make_batch": make_batch}
        if lib is torch:
            ops = torch_ops_stand_in()
            source = port(
                LOSS_SOURCE,
                [
                    ("from utils import box_ops\n", ""),
                    ("from torchvision.ops import sigmoid_focal_loss as focal_loss\n", ""),
                    ("import torchvision\n", ""),
                    ("from torchvision.ops import feature_pyramid_network as fpn\n", ""),
                ],
            )
            shared.update(
                torchvision=SimpleNamespace(ops=ops),
                focal_loss=ops.sigmoid_focal_loss,
                box_ops=ops,
                fpn=ops,
            )
        else:
            source = ported_imports(port(LOSS_SOURCE, STEPS))
        saved = lib.randperm
        lib.randperm = randperm
        try:
            run_source(source, lib, **shared)
        finally:
            lib.randperm = saved
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 4 and all(r["box"] > 0 for r in theirs[:3])
    assert theirs[2]["total"] < theirs[0]["total"]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
