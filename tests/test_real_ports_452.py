# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs built on torchvision, ported to retrograd (the harness:
``tests/real_ports.py``).

- torchvision's own RetinaNet classification head (``torchvision/models/detection/
  retinanet.py`` as written: ``_sum``, ``RetinaNetClassificationHead`` with its four
  conv/ReLU pairs gathered in an ``nn.ModuleList`` then ``nn.Sequential(*conv)``,
  ``torch.nn.init.normal_(std=0.01)``, the prior-probability bias ``-math.log((1 -
  prior_probability) / prior_probability)``, ``compute_loss`` writing ``gt_classes_target[
  foreground_idxs_per_image, targets_per_image["labels"][matched_idxs_per_image[
  foreground_idxs_per_image]]] = 1.0`` (a boolean mask and an index tensor together), the
  ignored anchors dropped by ``matched_idxs != self.BETWEEN_THRESHOLDS``,
  ``sigmoid_focal_loss(..., reduction="sum") / max(1, num_foreground)`` of a 0-d tensor, and
  ``forward`` permuting ``(N, A * K, H, W)`` to ``(N, HWA, K)``), trained a few SGD steps on
  two pyramid levels. The driver (anchors, the matcher's thresholds by ``box_iou``, the loop)
  is written here; ``det_utils`` is a namespace holding ``Matcher.BETWEEN_THRESHOLDS``.

torchvision is not installed beside this torch: the torch run's ``sigmoid_focal_loss`` and
``box_iou`` are written here from torchvision's code. Both runs start from torch's weights.
"""

from types import SimpleNamespace

import numpy as np
import torch
from tests.real_ports import assert_records_agree, initializer, port, ported_imports, run_source

import retrograd as rg

RETINANET_SOURCE = '''
import math
from typing import Dict, List, Tuple, Optional, Any, Union, cast

import torch
from torch import nn, Tensor

from torchvision.ops import boxes as box_ops
from torchvision.ops import sigmoid_focal_loss


def _sum(x: List[Tensor]) -> Tensor:
    res = x[0]
    for i in x[1:]:
        res = res + i
    return res


class RetinaNetClassificationHead(nn.Module):
    """
    A classification head for use in RetinaNet.

    Args:
        in_channels (int): number of channels of the input feature
        num_anchors (int): number of anchors to be predicted
        num_classes (int): number of classes to be predicted
        prior_probability (float): probability of priors to initialise the head
    """

    def __init__(self, in_channels: int, num_anchors: int, num_classes: int, prior_probability: float = 0.01) -> None:
        super().__init__()

        conv = nn.ModuleList()
        for _ in range(4):
            conv.append(nn.Conv2d(in_channels, in_channels, kernel_size=3, stride=1, padding=1))
            conv.append(nn.ReLU())
        self.conv = nn.Sequential(*conv)

        for layer in self.conv.children():
            if isinstance(layer, nn.Conv2d):
                torch.nn.init.normal_(layer.weight, std=0.01)
                torch.nn.init.constant_(layer.bias, 0)

        self.cls_logits = nn.Conv2d(in_channels, num_anchors * num_classes, kernel_size=3, stride=1, padding=1)
        torch.nn.init.normal_(self.cls_logits.weight, std=0.01)
        torch.nn.init.constant_(self.cls_logits.bias, -math.log((1 - prior_probability) / prior_probability))

        self.num_classes = num_classes
        self.num_anchors = num_anchors

        # This is to fix using det_utils.Matcher.BETWEEN_THRESHOLDS in TorchScript.
        # TorchScript doesn't support class attributes.
        # https://github.com/pytorch/vision/pull/1697#issuecomment-630255584
        self.BETWEEN_THRESHOLDS = det_utils.Matcher.BETWEEN_THRESHOLDS

    def compute_loss(
        self,
        targets: List[Dict[str, Tensor]],
        head_outputs: Dict[str, Tensor],
        matched_idxs: List[Tensor],
    ) -> Tensor:
        losses = []

        cls_logits = head_outputs["cls_logits"]

        for targets_per_image, cls_logits_per_image, matched_idxs_per_image in zip(targets, cls_logits, matched_idxs):
            # determine only the foreground
            foreground_idxs_per_image = matched_idxs_per_image >= 0
            num_foreground = foreground_idxs_per_image.sum()

            # create the target classification
            gt_classes_target = torch.zeros_like(cls_logits_per_image)
            gt_classes_target[
                foreground_idxs_per_image,
                targets_per_image["labels"][matched_idxs_per_image[foreground_idxs_per_image]],
            ] = 1.0

            # find indices for which anchors should be ignored
            valid_idxs_per_image = matched_idxs_per_image != self.BETWEEN_THRESHOLDS

            # compute the classification loss
            losses.append(
                sigmoid_focal_loss(
                    cls_logits_per_image[valid_idxs_per_image],
                    gt_classes_target[valid_idxs_per_image],
                    reduction="sum",
                )
                / max(1, num_foreground)
            )

        return _sum(losses) / len(targets)

    def forward(
        self,
        x: List[Tensor],
    ) -> Tensor:
        all_cls_logits = []

        for features in x:
            cls_logits = self.conv(features)
            cls_logits = self.cls_logits(cls_logits)

            # Permute classification output from (N, A * K, H, W) to (N, HWA, K).
            N, _, H, W = cls_logits.shape
            cls_logits = cls_logits.view(N, -1, self.num_classes, H, W)
            cls_logits = cls_logits.permute(0, 3, 4, 1, 2)
            cls_logits = cls_logits.reshape(N, -1, self.num_classes)  # Size=(N, HWA, 4)

            all_cls_logits.append(cls_logits)

        return torch.cat(all_cls_logits, dim=1)


# the driver (written for this port)
head = RetinaNetClassificationHead(in_channels=8, num_anchors=2, num_classes=3)
initialize(head)
optimizer = torch.optim.SGD(head.parameters(), lr=0.05, momentum=0.9)
features, anchors, targets = make_inputs(torch)
matched_idxs = []
for targets_per_image in targets:
    iou = box_ops.box_iou(targets_per_image["boxes"], anchors)
    matched_vals, matches = iou.max(dim=0)
    matches[matched_vals < 0.3] = -1
    matches[(matched_vals >= 0.3) & (matched_vals < 0.5)] = det_utils.Matcher.BETWEEN_THRESHOLDS
    matched_idxs.append(matches)
record.append([m.tolist() for m in matched_idxs])
for step in range(4):
    loss = head.compute_loss(targets, {"cls_logits": head(features)}, matched_idxs)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append({k: v.detach().numpy().copy() for k, v in head.state_dict().items()})
'''

STEPS = [
    ("import torch\nfrom torch import nn, Tensor", "from torch import nn, Tensor"),
    ("from torchvision.ops import", "from retrograd.vision.ops import"),
    ("    optimizer.zero_grad()\n", ""),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def torch_ops_stand_in() -> SimpleNamespace:
    """torchvision.ops' ``sigmoid_focal_loss`` and ``boxes.box_iou`` as torchvision's code
    computes them, in torch."""

    def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2, reduction="none"):
        p = torch.sigmoid(inputs)
        ce = torch.nn.functional.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = ce * ((1 - p_t) ** gamma)
        if alpha >= 0:
            loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
        return {"none": loss, "mean": loss.mean(), "sum": loss.sum()}[reduction]

    def box_iou(boxes1, boxes2):
        def area(b):
            return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])

        lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
        rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
        wh = (rb - lt).clamp(min=0)
        inter = wh[:, :, 0] * wh[:, :, 1]
        return inter / (area(boxes1)[:, None] + area(boxes2) - inter)

    return SimpleNamespace(sigmoid_focal_loss=sigmoid_focal_loss, box_iou=box_iou)


def make_inputs(lib):
    """Two pyramid levels (8x8 and 4x4 of a 32-pixel image), two anchors a location (square
    and wide, in the head's (H, W, A) order), two images of boxes."""
    rng = np.random.default_rng(452)
    features = [lib.tensor(rng.normal(size=(2, 8, s, s)), dtype=lib.float32) for s in (8, 4)]
    anchors = []
    for size, stride in ((8, 4), (4, 8)):
        for y in range(size):
            for x in range(size):
                cx, cy = (x + 0.5) * stride, (y + 0.5) * stride
                for w, h in ((2 * stride, 2 * stride), (3 * stride, 1.5 * stride)):
                    anchors.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
    targets = [
        {
            "boxes": lib.tensor([[2.0, 3.0, 10.0, 11.0], [12.0, 16.0, 30.0, 26.0]]),
            "labels": lib.tensor([1, 2]),
        },
        {"boxes": lib.tensor([[4.0, 4.0, 20.0, 12.0]]), "labels": lib.tensor([0])},
    ]
    return features, lib.tensor(anchors, dtype=lib.float32), targets


def test_retinanet_classification_head_trains_as_torch():
    torch.manual_seed(0)
    initialize = initializer()
    det_utils = SimpleNamespace(Matcher=SimpleNamespace(BETWEEN_THRESHOLDS=-2))
    records = []
    for lib in (torch, rg):
        record = []
        shared = {
            "record": record,
            "initialize": initialize,
            "make_inputs": make_inputs,
            "det_utils": det_utils,
        }
        if lib is torch:
            ops = torch_ops_stand_in()
            source = RETINANET_SOURCE.replace(
                "from torchvision.ops import boxes as box_ops\n", ""
            ).replace("from torchvision.ops import sigmoid_focal_loss\n", "")
            shared.update(
                box_ops=SimpleNamespace(box_iou=ops.box_iou),
                sigmoid_focal_loss=ops.sigmoid_focal_loss,
            )
        else:
            source = ported_imports(port(RETINANET_SOURCE, STEPS))
        run_source(source, lib, **shared)
        records.append(record)
    theirs, ours = records
    matched = np.concatenate([np.array(m) for m in theirs[0]])
    # foreground, background and ignored anchors all met
    assert {-2, -1, 0, 1} <= set(matched.tolist())
    assert theirs[4] < theirs[1]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
