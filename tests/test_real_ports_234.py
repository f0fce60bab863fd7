"""Real ports, continued (the harness: ``tests/real_ports.py``): a two-stage detector's
second stage in torch ops, a program written here in the style of
ruotianluo/pytorch-faster-rcnn (RoI pooling by a spatial transformer, a smooth-L1 box loss
with inside/outside weights, box decoding and clipping), its head trained on one image.

The surface it exercises: ``rois.detach()`` and strided coordinate slices ``rois[:, 1::4] /
16.0``; an affine ``theta`` joined by ``torch.cat`` with a
``torch.autograd.Variable(rois.data.new(n, 1).zero_())`` column and viewed ``(-1, 2, 3)``;
``F.affine_grid(theta, torch.Size(...))`` and ``F.grid_sample`` of an ``expand``ed feature map
with their default corners (both libraries warn about ``align_corners``), then
``F.max_pool2d(x, 2, 2)`` or not; the smooth-L1 loss with a ``(|d| < 1 / sigma**2).detach()
.float()`` switch, ``torch.pow`` and sums over ``sorted(dims, reverse=True)``; box decoding by
``deltas[:, k::4]``, ``unsqueeze``, ``torch.exp`` and ``torch.cat`` of ``unsqueeze(2)``s
viewed ``(len(boxes), -1)``; clipping by ``torch.stack`` of ``clamp``s; ``nn.Module.__init__
(self)``, ``nn.ReLU(True)``, ``.double()``, SGD with momentum and weight decay,
``F.cross_entropy`` and ``F.softmax(dim=1)``. In float64: a pooled window of equal values
would otherwise route the gradient by each run's rounding.

Regressions guarded: ``affine_grid``/``grid_sample``'s defaults (and their warning), the
legacy ``Variable``/``data.new(...).zero_()`` forms. The lines changed: the ``import`` lines and
the gradient lines (``grads = loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

FASTER_RCNN_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F

STRIDE = 16.0  # image pixels per feature cell
POOL = 5


def roi_crops(features, rois, pool_after):
    # each RoI (batch, x1, y1, x2, y2) becomes an affine sampling grid over the features
    rois = rois.detach()
    x1, y1 = rois[:, 1::4] / STRIDE, rois[:, 2::4] / STRIDE
    x2, y2 = rois[:, 3::4] / STRIDE, rois[:, 4::4] / STRIDE
    h, w = features.size(2), features.size(3)
    nil = torch.autograd.Variable(rois.data.new(rois.size(0), 1).zero_())
    rows = [(x2 - x1) / (w - 1), nil, (x1 + x2 - w + 1) / (w - 1)]
    rows += [nil, (y2 - y1) / (h - 1), (y1 + y2 - h + 1) / (h - 1)]
    theta = torch.cat(rows, 1).view(-1, 2, 3)
    side = 2 * POOL if pool_after else POOL
    grid = F.affine_grid(theta, torch.Size((rois.size(0), 1, side, side)))
    tiled = features.expand(rois.size(0), *features.shape[1:])
    crops = F.grid_sample(tiled, grid)
    return F.max_pool2d(crops, 2, 2) if pool_after else crops


def smooth_l1(pred, target, inside, outside, sigma=1.0, dims=(1,)):
    s2 = sigma**2
    diff = inside * (pred - target)
    near = (diff.abs() < 1.0 / s2).detach().float()  # quadratic zone, no gradient through it
    per_coord = torch.pow(diff, 2) * (s2 / 2.0) * near + (diff.abs() - 0.5 / s2) * (1.0 - near)
    total = outside * per_coord
    for d in sorted(dims, reverse=True):
        total = total.sum(d)
    return total.mean()


def decode(boxes, deltas):
    if len(boxes) == 0:
        return deltas.detach() * 0
    bw = boxes[:, 2] - boxes[:, 0] + 1.0
    bh = boxes[:, 3] - boxes[:, 1] + 1.0
    cx = (boxes[:, 0] + 0.5 * bw).unsqueeze(1) + deltas[:, 0::4] * bw.unsqueeze(1)
    cy = (boxes[:, 1] + 0.5 * bh).unsqueeze(1) + deltas[:, 1::4] * bh.unsqueeze(1)
    half_w = 0.5 * torch.exp(deltas[:, 2::4]) * bw.unsqueeze(1)
    half_h = 0.5 * torch.exp(deltas[:, 3::4]) * bh.unsqueeze(1)
    sides = [cx - half_w, cy - half_h, cx + half_w, cy + half_h]
    return torch.cat([v.unsqueeze(2) for v in sides], 2).view(len(boxes), -1)


def clip(boxes, image_hw):
    per_class = boxes.view(boxes.size(0), -1, 4)
    top_x, top_y = image_hw[1] - 1, image_hw[0] - 1
    limits = [top_x, top_y, top_x, top_y]
    clipped = torch.stack([per_class[:, :, k].clamp(0, limits[k]) for k in range(4)], 2)
    return clipped.view(boxes.size(0), -1)


class RoIHead(nn.Module):
    def __init__(self, classes=3):
        nn.Module.__init__(self)
        self.classes = classes
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 6, 3, stride=4, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(6, 8, 3, stride=4, padding=1), nn.ReLU(inplace=True),
        )
        self.fc = nn.Sequential(nn.Linear(8 * POOL * POOL, 24), nn.ReLU(True))
        self.scores = nn.Linear(24, classes)
        self.deltas = nn.Linear(24, 4 * classes)

    def forward(self, image, rois, pool_after):
        pooled = roi_crops(self.backbone(image), rois, pool_after)
        hidden = self.fc(pooled.view(pooled.size(0), -1))
        logits = self.scores(hidden)
        return logits, F.softmax(logits, dim=1), self.deltas(hidden)


def train(image, rois, labels, targets, inside, outside, pool_after, record, initialize):
    head = RoIHead().double()
    initialize(head)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    image, rois, labels = torch.tensor(image), torch.tensor(rois), torch.tensor(labels)
    targets, inside, outside = (torch.tensor(a) for a in (targets, inside, outside))
    for step in range(3):
        logits, _, deltas = head(image, rois, pool_after)
        cls_loss = F.cross_entropy(logits.view(-1, head.classes), labels)
        box_loss = smooth_l1(deltas, targets, inside, outside)
        loss = cls_loss + box_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append([cls_loss.item(), box_loss.item()])
    record.append({k: v.detach().numpy() for k, v in head.state_dict().items()})
    with torch.no_grad():
        _, probs, deltas = head(image, rois, pool_after)
        boxes = clip(decode(rois[:, 1:5], deltas), image.shape[2:])
    record.append(probs.numpy())
    record.append(boxes.numpy())
"""

FASTER_RCNN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "from retrograd.nn import functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(
    "max_pool", [True, False], ids=["pre-pool-then-max-pool", "crop-at-pool-size"]
)
def test_pytorch_faster_rcnn_crop_pool_head_trains_and_decodes_as_torch(max_pool):
    rng = np.random.default_rng(2340)
    image = rng.standard_normal((1, 3, 64, 64))
    corners = rng.uniform(0, 36, (6, 2))
    sizes = rng.uniform(12, 28, (6, 2))
    rois = np.concatenate([np.zeros((6, 1)), corners, np.minimum(corners + sizes, 63)], 1)
    labels = np.array([0, 1, 2, 1, 0, 2])
    bbox_targets = np.zeros((6, 12))
    inside = np.zeros((6, 12))
    for i, label in enumerate(labels):
        if label > 0:
            bbox_targets[i, 4 * label : 4 * label + 4] = rng.standard_normal(4) * 0.5
            inside[i, 4 * label : 4 * label + 4] = 1.0
    outside = (inside > 0) / 6.0
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        program = run_source(
            FASTER_RCNN_SOURCE if lib is torch else port(FASTER_RCNN_SOURCE, FASTER_RCNN_STEPS), lib
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            program["train"](
                image, rois, labels, bbox_targets, inside, outside, max_pool, record, initialize
            )
        # both warn that affine_grid and grid_sample take align_corners=False by default now
        assert any("align_corners" in str(w.message) for w in caught), lib.__name__
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-11)
