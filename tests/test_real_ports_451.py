# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs built on torchvision's ops, ported to retrograd (the harness:
``tests/real_ports.py``).

- A simplified detection loss as a public repository writes it (``DetectionLoss`` over
  ``torchvision.ops.sigmoid_focal_loss`` and ``generalized_box_iou``: ``concat_outputs``
  flattening each level by ``h.view(B, C, H * W).permute(0, 2, 1)`` and ``torch.cat``, loss
  totals started as ``torch.tensor(0.0)`` and grown by ``+=``, positives drawn by
  ``torch.randperm(N, device=device)[:k]``, ``cls_targets[i, lbl] = 1.0`` indexed by the 0-d
  label tensors met iterating ``labels[:k]`` (compared by ``lbl > 0 and lbl < num_classes``),
  ``torch.diag`` of the GIoU matrix), trained a few SGD steps on a small detector whose neck is
  ``torchvision.ops.FeaturePyramidNetwork`` (two backbone levels, ``LastLevelMaxPool``) and
  whose heads are shared convolutions over the pyramid's levels; one image without boxes takes
  the "all negative" branch. The driver (backbone, heads, data, loop) is written here; the
  repository's ``utils.box_ops.generalized_box_iou`` is torchvision's.

torchvision is not installed beside this torch: the torch run's ``torchvision.ops`` is a stand-in
written here from torchvision's code (``sigmoid_focal_loss``, ``generalized_box_iou``,
``FeaturePyramidNetwork``). ``torch.randperm`` draws from one NumPy stream in both runs.
"""

from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import torch
from tests.real_ports import assert_records_agree, initializer, port, ported_imports, run_source

import retrograd as rg

LOSS_SOURCE = '''
from typing import Dict, List, Tuple

import torch
import torch.nn as nn
from torchvision.ops import sigmoid_focal_loss

from utils.box_ops import generalized_box_iou


class DetectionLoss(nn.Module):
    """
    Simplified detection loss combining:
      - Focal loss for classification + objectness
      - GIoU loss for bounding boxes
    """

    def __init__(self, alpha: float = 1.0, gamma: float = 2.0, lambda_box: float = 1.0):
        super().__init__()
        self.alpha = alpha
        self.gamma = gamma
        self.lambda_box = lambda_box

    def forward(
        self,
        outputs: Dict[str, List[torch.Tensor]],
        targets: List[Dict[str, torch.Tensor]],
    ) -> Dict[str, torch.Tensor]:
        """
        NOTE: For brevity, this implements a very simple anchor-free style matching:
        - We flatten all predictions and use nearest box center matching
        This is not production-grade YOLO matching, but keeps the example functional.
        """
        device = outputs["obj_cls"][0].device

        # Concatenate feature maps
        def concat_outputs(head_list: List[torch.Tensor]):
            flat = []
            for h in head_list:
                B, C, H, W = h.shape
                flat.append(h.view(B, C, H * W).permute(0, 2, 1))  # B, HW, C
            return torch.cat(flat, dim=1)  # B, sum(HW), C

        obj_cls = concat_outputs(outputs["obj_cls"])
        obj_reg = concat_outputs(outputs["obj_reg"])
        obj_obj = concat_outputs(outputs["obj_obj"])

        B, N, _ = obj_cls.shape
        num_classes = obj_cls.shape[-1]

        total_cls_loss = torch.tensor(0.0, device=device)
        total_box_loss = torch.tensor(0.0, device=device)
        total_obj_loss = torch.tensor(0.0, device=device)
        num_pos = 0

        for b in range(B):
            tgt = targets[b]
            boxes = tgt["boxes"].to(device)
            labels = tgt["labels"].to(device)

            if boxes.numel() == 0 or labels.numel() == 0:
                # all negative
                obj_logits = obj_obj[b].squeeze(-1)
                total_obj_loss += sigmoid_focal_loss(
                    obj_logits, torch.zeros_like(obj_logits), alpha=self.alpha, gamma=self.gamma, reduction="sum"
                )
                continue

            # simple heuristic: randomly assign some locations as positives based on number of GT boxes
            # (in real implementation, use anchor/grid matching)
            k = min(boxes.size(0), N)
            pos_indices = torch.randperm(N, device=device)[:k]

            # classification targets
            cls_logits = obj_cls[b, pos_indices]  # k, num_classes
            cls_targets = torch.zeros_like(cls_logits)
            for i, lbl in enumerate(labels[:k]):
                if lbl > 0 and lbl < num_classes:
                    cls_targets[i, lbl] = 1.0
            total_cls_loss += sigmoid_focal_loss(
                cls_logits, cls_targets, alpha=self.alpha, gamma=self.gamma, reduction="sum"
            )

            # objectness targets
            obj_logits = obj_obj[b].squeeze(-1)  # N
            obj_targets = torch.zeros_like(obj_logits)
            obj_targets[pos_indices] = 1.0
            total_obj_loss += sigmoid_focal_loss(
                obj_logits, obj_targets, alpha=self.alpha, gamma=self.gamma, reduction="sum"
            )

            # box regression (use GIoU)
            pred_boxes = obj_reg[b, pos_indices]  # k, 4 (cx,cy,w,h style is not enforced here)
            # For demonstration we interpret them as xyxy with no decoding; in practice use proper decode.
            tgt_boxes = boxes[:k]
            giou = generalized_box_iou(tgt_boxes, pred_boxes)
            # diagonal of giou
            giou_diag = torch.diag(giou)
            box_loss = 1.0 - giou_diag
            total_box_loss += box_loss.sum()
            num_pos += k

        num_pos = max(num_pos, 1)
        losses = {
            "loss_cls": total_cls_loss / num_pos,
            "loss_obj": total_obj_loss / num_pos,
            "loss_box": self.lambda_box * total_box_loss / num_pos,
        }
        losses["loss_total"] = losses["loss_cls"] + losses["loss_obj"] + losses["loss_box"]
        return losses


# the driver (written for this port)
import torchvision
from collections import OrderedDict
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool


class TinyDetector(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.c3 = nn.Sequential(nn.Conv2d(3, 6, 3, stride=2, padding=1), nn.ReLU())
        self.c4 = nn.Sequential(nn.Conv2d(6, 8, 3, stride=2, padding=1), nn.ReLU())
        self.fpn = torchvision.ops.FeaturePyramidNetwork(
            [6, 8], 8, extra_blocks=LastLevelMaxPool()
        )
        self.cls = nn.Conv2d(8, num_classes, 3, padding=1)
        self.reg = nn.Conv2d(8, 4, 3, padding=1)
        self.obj = nn.Conv2d(8, 1, 3, padding=1)

    def forward(self, images):
        c3 = self.c3(images)
        c4 = self.c4(c3)
        features = self.fpn(OrderedDict([("p3", c3), ("p4", c4)]))
        levels = list(features.values())
        return {
            "obj_cls": [self.cls(f) for f in levels],
            "obj_reg": [(self.reg(f) + 2.0) * 4.0 for f in levels],
            "obj_obj": [self.obj(f) for f in levels],
        }


model = TinyDetector(num_classes=4)
initialize(model)
criterion = DetectionLoss(alpha=0.25, gamma=2.0, lambda_box=2.0)
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
images, targets = make_batch(torch)
for step in range(4):
    losses = criterion(model(images), targets)
    optimizer.zero_grad()
    losses["loss_total"].backward()
    optimizer.step()
    record.append({k: v.item() for k, v in losses.items()})
record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
'''

STEPS = [
    ("import torch\nimport torch.nn as nn\n", ""),
    (
        "from torchvision.ops import sigmoid_focal_loss",
        "from retrograd.vision.ops import sigmoid_focal_loss",
    ),
    (
        "from utils.box_ops import generalized_box_iou",
        "from retrograd.vision.ops import generalized_box_iou",
    ),
    ("import torchvision\n", "import retrograd.vision as torchvision\n"),
    ("from torchvision.ops.", "from retrograd.vision.ops."),
    ("    optimizer.zero_grad()\n", ""),
    (
        '    losses["loss_total"].backward()\n    optimizer.step()',
        '    grads = losses["loss_total"].backward()\n    optimizer.step(grads)',
    ),
]


def torch_ops_stand_in() -> SimpleNamespace:
    """torchvision.ops' sigmoid_focal_loss, generalized_box_iou, FeaturePyramidNetwork and
    LastLevelMaxPool as torchvision's code computes them, in torch (norm_layer=None)."""
    F = torch.nn.functional  # noqa: N806 (torch scripts' name for it)

    def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2, reduction="none"):
        p = torch.sigmoid(inputs)
        ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = ce_loss * ((1 - p_t) ** gamma)
        if alpha >= 0:
            alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
            loss = alpha_t * loss
        return {"none": loss, "mean": loss.mean(), "sum": loss.sum()}[reduction]

    def box_area(boxes):
        return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])

    def generalized_box_iou(boxes1, boxes2):
        area1, area2 = box_area(boxes1), box_area(boxes2)
        lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
        rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
        wh = (rb - lt).clamp(min=0)
        inter = wh[:, :, 0] * wh[:, :, 1]
        union = area1[:, None] + area2 - inter
        iou = inter / union
        lti = torch.min(boxes1[:, None, :2], boxes2[:, :2])
        rbi = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])
        whi = (rbi - lti).clamp(min=0)
        areai = whi[:, :, 0] * whi[:, :, 1]
        return iou - (areai - union) / areai

    class LastLevelMaxPool(torch.nn.Module):
        def forward(self, x, y, names):
            names.append("pool")
            x.append(F.max_pool2d(x[-1], kernel_size=1, stride=2, padding=0))
            return x, names

    class FeaturePyramidNetwork(torch.nn.Module):
        def __init__(self, in_channels_list, out_channels, extra_blocks=None):
            super().__init__()
            conv = torch.nn.Conv2d
            self.inner_blocks = torch.nn.ModuleList(
                torch.nn.Sequential(conv(c, out_channels, 1, padding=0)) for c in in_channels_list
            )
            self.layer_blocks = torch.nn.ModuleList(
                torch.nn.Sequential(conv(out_channels, out_channels, 3, padding=1))
                for _ in in_channels_list
            )
            for m in self.modules():
                if isinstance(m, conv):
                    torch.nn.init.kaiming_uniform_(m.weight, a=1)
                    torch.nn.init.constant_(m.bias, 0)
            self.extra_blocks = extra_blocks

        def forward(self, x):
            names = list(x.keys())
            x = list(x.values())
            last_inner = self.inner_blocks[-1](x[-1])
            results = [self.layer_blocks[-1](last_inner)]
            for idx in range(len(x) - 2, -1, -1):
                inner_lateral = self.inner_blocks[idx](x[idx])
                feat_shape = inner_lateral.shape[-2:]
                inner_top_down = F.interpolate(last_inner, size=feat_shape, mode="nearest")
                last_inner = inner_lateral + inner_top_down
                results.insert(0, self.layer_blocks[idx](last_inner))
            if self.extra_blocks is not None:
                results, names = self.extra_blocks(results, x, names)
            return OrderedDict(zip(names, results))

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
            source = (
                LOSS_SOURCE.replace("from torchvision.ops import sigmoid_focal_loss\n", "")
                .replace("from utils.box_ops import generalized_box_iou\n", "")
                .replace("import torchvision\n", "")
                .replace(
                    "from torchvision.ops.feature_pyramid_network import LastLevelMaxPool\n", ""
                )
            )
            shared.update(
                torchvision=SimpleNamespace(ops=ops),
                sigmoid_focal_loss=ops.sigmoid_focal_loss,
                generalized_box_iou=ops.generalized_box_iou,
                LastLevelMaxPool=ops.LastLevelMaxPool,
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
    assert len(theirs) == 5 and all(r["loss_box"] > 0 for r in theirs[:4])
    assert theirs[3]["loss_total"] < theirs[0]["loss_total"]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
