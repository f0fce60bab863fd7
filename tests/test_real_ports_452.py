"""Real ports built on torchvision's detection ops (the harness: ``tests/real_ports.py``): a
program written here in the style of torchvision's RetinaNet classification head.

- a dense classification head: four conv/ReLU pairs gathered in an ``nn.ModuleList`` and
  unpacked into ``nn.Sequential(*layers)``, ``nn.init.normal_(w, std=0.01)`` and
  ``constant_``, the prior-probability bias ``-math.log((1 - prior) / prior)``, a class
  attribute copied to the instance (the matcher's "between thresholds" code), ``forward``
  turning each level's ``(N, A * K, H, W)`` into ``(N, HWA, K)`` by ``view``/``permute``/
  ``reshape`` and ``torch.cat`` of the levels, type hints from ``typing`` and
  ``from torch import nn, Tensor``;
- its loss: a one-hot target by ``torch.zeros_like`` written as ``target[mask, labels[
  matched[mask]]] = 1.0`` (a boolean mask and an index tensor together), the ignored anchors
  dropped by ``matched != IGNORE``, ``sigmoid_focal_loss(..., reduction="sum") / max(1,
  n_foreground)`` of a 0-d tensor, the images' losses summed by a helper loop;
- a driver matching anchors to boxes by ``box_iou`` and ``iou.max(dim=0)`` with masked index
  writes, then a few SGD steps with momentum on two pyramid levels.

torchvision is not installed beside this torch: the torch run's ``sigmoid_focal_loss`` and
``box_iou`` are written here (``torch_ops_stand_in``); the port imports
``retrograd.vision.ops``. Both runs start from torch's weights.
"""

from types import SimpleNamespace

import numpy as np
import torch
from tests.real_ports import assert_records_agree, initializer, port, ported_imports, run_source

import retrograd as rg

HEAD_SOURCE = '''
import math
from typing import Dict, List

import torch
from torch import nn, Tensor

from torchvision.ops import boxes as box_utils, sigmoid_focal_loss


def add_all(parts: List[Tensor]) -> Tensor:
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


class DenseClassHead(nn.Module):
    """Per-anchor class logits over every pyramid level."""

    IGNORE = -2

    def __init__(self, width: int, anchors: int, classes: int, prior: float = 0.01) -> None:
        super().__init__()
        layers = nn.ModuleList()
        for _ in range(4):
            layers.append(nn.Conv2d(width, width, kernel_size=3, padding=1))
            layers.append(nn.ReLU())
        self.tower = nn.Sequential(*layers)
        for block in self.tower.children():
            if not isinstance(block, nn.Conv2d):
                continue
            nn.init.normal_(block.weight, std=0.01)
            nn.init.constant_(block.bias, 0.0)
        self.logits = nn.Conv2d(width, anchors * classes, kernel_size=3, padding=1)
        torch.nn.init.normal_(self.logits.weight, std=0.01)
        # start every anchor at probability `prior`: rare foreground does not swamp the loss
        torch.nn.init.constant_(self.logits.bias, -math.log((1 - prior) / prior))
        self.classes = classes
        self.ignore = self.IGNORE

    def forward(self, levels: List[Tensor]) -> Tensor:
        outputs = []
        for level in levels:
            scores = self.logits(self.tower(level))
            n, _, h, w = scores.shape
            scores = scores.view(n, -1, self.classes, h, w).permute(0, 3, 4, 1, 2)
            outputs.append(scores.reshape(n, -1, self.classes))
        return torch.cat(outputs, dim=1)

    def loss(self, targets: List[Dict[str, Tensor]], scores: Tensor, matched: List[Tensor]):
        per_image = []
        for target, image_scores, image_matched in zip(targets, scores, matched):
            positive = image_matched >= 0
            one_hot = torch.zeros_like(image_scores)
            one_hot[positive, target["labels"][image_matched[positive]]] = 1.0
            kept = image_matched != self.ignore
            focal = sigmoid_focal_loss(image_scores[kept], one_hot[kept], reduction="sum")
            per_image.append(focal / max(1, positive.sum()))
        return add_all(per_image) / len(targets)


head = DenseClassHead(width=8, anchors=2, classes=3)
initialize(head)
sgd = torch.optim.SGD(head.parameters(), lr=0.05, momentum=0.9)
levels, anchors, targets = make_inputs(torch)
matched = []
for target in targets:
    best, owner = box_utils.box_iou(target["boxes"], anchors).max(dim=0)
    owner[best < 0.3] = -1
    owner[(best >= 0.3) & (best < 0.5)] = DenseClassHead.IGNORE
    matched.append(owner)
record.append([m.tolist() for m in matched])
for _ in range(3):
    loss = head.loss(targets, head(levels), matched)
    sgd.zero_grad()
    loss.backward()
    sgd.step()
    record.append(loss.item())
record.append({name: t.detach().numpy().copy() for name, t in head.state_dict().items()})
'''

STEPS = [
    ("import torch\nfrom torch import nn, Tensor", "from torch import nn, Tensor"),
    ("from torchvision.ops import", "from retrograd.vision.ops import"),
    ("    sgd.zero_grad()\n", ""),
    ("    loss.backward()\n    sgd.step()", "    grads = loss.backward()\n    sgd.step(grads)"),
]


def torch_ops_stand_in() -> SimpleNamespace:
    """The two torchvision ops the torch run needs, in plain torch: the focal loss of
    Lin et al. (alpha-weighted, ``(1 - p_t) ** gamma`` times the cross-entropy) and the
    pairwise IoU of ``(x1, y1, x2, y2)`` boxes."""

    def sigmoid_focal_loss(logits, labels, alpha=0.25, gamma=2, reduction="none"):
        prob = torch.sigmoid(logits)
        bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels, reduction="none")
        right = torch.where(labels > 0.5, prob, 1 - prob)
        weight = torch.where(labels > 0.5, alpha, 1 - alpha)
        out = weight * (1 - right) ** gamma * bce
        return out.sum() if reduction == "sum" else out.mean() if reduction == "mean" else out

    def box_iou(first, second):
        top_left = torch.maximum(first[:, None, :2], second[None, :, :2])
        bottom_right = torch.minimum(first[:, None, 2:], second[None, :, 2:])
        overlap = (bottom_right - top_left).clamp(min=0).prod(dim=-1)
        size_a = (first[:, 2:] - first[:, :2]).prod(dim=-1)
        size_b = (second[:, 2:] - second[:, :2]).prod(dim=-1)
        return overlap / (size_a[:, None] + size_b[None, :] - overlap)

    return SimpleNamespace(sigmoid_focal_loss=sigmoid_focal_loss, box_iou=box_iou)


def make_inputs(lib):
    """Two pyramid levels (8x8 and 4x4 of a 32-pixel image), two anchors a location (square
    and wide, in the head's (H, W, A) order), two images of boxes."""
    rng = np.random.default_rng(452)
    levels = [lib.tensor(rng.normal(size=(2, 8, s, s)), dtype=lib.float32) for s in (8, 4)]
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
    return levels, lib.tensor(anchors, dtype=lib.float32), targets


def test_dense_classification_head_trains_as_torch():
    torch.manual_seed(0)
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        shared = {"record": record, "initialize": initialize, "make_inputs": make_inputs}
        if lib is torch:
            ops = torch_ops_stand_in()
            source = HEAD_SOURCE.replace(
                "from torchvision.ops import boxes as box_utils, sigmoid_focal_loss\n", ""
            )
            shared.update(
                box_utils=SimpleNamespace(box_iou=ops.box_iou),
                sigmoid_focal_loss=ops.sigmoid_focal_loss,
            )
        else:
            source = ported_imports(port(HEAD_SOURCE, STEPS))
        run_source(source, lib, **shared)
        records.append(record)
    theirs, ours = records
    matched = np.concatenate([np.array(m) for m in theirs[0]])
    # foreground, background and ignored anchors all met
    assert {-2, -1, 0, 1} <= set(matched.tolist())
    assert theirs[3] < theirs[1]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
