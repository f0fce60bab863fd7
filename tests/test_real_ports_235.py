"""Real ports, continued (the harness: ``tests/real_ports.py``): volumetric segmentation
losses, programs written here in the style of wolny/pytorch-3dunet's ``losses.py`` and
``utils.py``.

- a channel-first flattening (``permute((1, 0) + tuple(range(2, t.dim())))`` then
  ``contiguous().view(C, -1)``), a per-channel Dice with the V-Net squared denominator and
  ``clamp(min=eps)``, a Dice base module holding ``register_buffer('weight', None)`` or a
  tensor and a normalisation that is ``nn.Sigmoid()``, ``nn.Softmax(dim=1)`` or a ``lambda``;
  the plain Dice loss, the generalised Dice loss (the one-channel case by ``torch.cat((p, 1 -
  p))``, class weights with ``requires_grad = False`` set on a computed tensor), BCE plus Dice
  with ``nn.BCEWithLogitsLoss``;
- one-hot labels with an ignore index: ``labels.expand(shape) == ignore``, a masked zeroing
  write on a ``clone()``, ``torch.zeros(shape).to(labels.device).scatter_(1, labels, 1)`` and
  the ignore value written back through the mask; beside ``F.cross_entropy(...,
  ignore_index=...)`` over ``(N, C, D, H, W)``;
- a small 3-D encoder-decoder (``GroupNorm``/``Conv3d``/``MaxPool3d``, ``F.interpolate(...,
  mode='trilinear', align_corners=False)`` back to the skip's size, ``.double()``) trained by
  Adam, in float64 (a pooled window of equal values would route the gradient by each run's
  rounding).

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``opt.step(grads)``).
"""

from __future__ import annotations

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

LOSSES_SOURCE = """
import torch
from torch import nn as nn
from torch.nn import functional as F


def channels_first(t):
    # (N, C, *spatial) -> (C, N * prod(spatial)): one row of voxels per class
    order = (1, 0) + tuple(range(2, t.dim()))
    return t.permute(order).contiguous().view(t.size(1), -1)


def one_hot_volume(labels, classes, ignore=None):
    labels = labels.unsqueeze(1)
    shape = list(labels.size())
    shape[1] = classes
    if ignore is None:
        return torch.zeros(shape).to(labels.device).scatter_(1, labels, 1)
    hidden = labels.expand(shape) == ignore
    labels = labels.clone()
    labels[labels == ignore] = 0  # scatter_ needs a valid class; the mask restores it
    encoded = torch.zeros(shape).to(labels.device).scatter_(1, labels, 1)
    encoded[hidden] = ignore
    return encoded


def dice_per_channel(probs, target, eps=1e-6, weight=None):
    probs, target = channels_first(probs), channels_first(target).float()
    overlap = (probs * target).sum(-1)
    if weight is not None:
        overlap = weight * overlap
    squares = (probs * probs).sum(-1) + (target * target).sum(-1)
    return 2 * overlap / squares.clamp(min=eps)


class DiceBase(nn.Module):
    def __init__(self, class_weight=None, normalization='sigmoid'):
        super(DiceBase, self).__init__()
        self.register_buffer('weight', class_weight)  # None stays a None buffer
        choices = {'sigmoid': lambda: nn.Sigmoid(), 'softmax': lambda: nn.Softmax(dim=1),
                   'none': lambda: (lambda t: t)}
        self.normalization = choices[normalization]()

    def forward(self, logits, target):
        score = self.score(self.normalization(logits), target)
        return 1.0 - torch.mean(score)


class Dice(DiceBase):
    def score(self, probs, target):
        return dice_per_channel(probs, target, weight=self.weight)


class GeneralizedDice(DiceBase):
    def __init__(self, normalization='sigmoid', eps=1e-6):
        super().__init__(None, normalization)
        self.eps = eps

    def score(self, probs, target):
        probs, target = channels_first(probs), channels_first(target).float()
        if probs.size(0) == 1:  # one class: score foreground and background separately
            probs = torch.cat((probs, 1.0 - probs), dim=0)
            target = torch.cat((target, 1.0 - target), dim=0)
        volume = target.sum(-1)
        inverse = 1 / (volume * volume).clamp(min=self.eps)  # rare classes count as much
        inverse.requires_grad = False
        top = ((probs * target).sum(-1) * inverse).sum()
        bottom = ((probs + target).sum(-1) * inverse).clamp(min=self.eps).sum()
        return 2 * top / bottom


class BceAndDice(nn.Module):
    def __init__(self, w_bce, w_dice):
        super(BceAndDice, self).__init__()
        self.w_bce, self.w_dice = w_bce, w_dice
        self.bce, self.dice = nn.BCEWithLogitsLoss(), Dice()

    def forward(self, logits, target):
        return self.w_bce * self.bce(logits, target) + self.w_dice * self.dice(logits, target)


def stage(c_in, c_out, groups):
    conv = nn.Conv3d(c_in, c_out, 3, padding=1, bias=False)  # the norm comes first
    return nn.Sequential(nn.GroupNorm(groups, c_in), conv, nn.ReLU(inplace=True))


class SmallUNet3D(nn.Module):
    def __init__(self, c_in, c_out, width=4):
        super().__init__()
        self.down1, self.down2 = stage(c_in, width, 1), stage(width, 2 * width, 2)
        self.pool = nn.MaxPool3d(2)
        self.up = stage(3 * width, width, 2)
        self.head = nn.Conv3d(width, c_out, 1)

    def forward(self, vol):
        skip = self.down1(vol)
        deep = self.down2(self.pool(skip))
        deep = F.interpolate(deep, size=skip.size()[2:], mode='trilinear', align_corners=False)
        return self.head(self.up(torch.cat((skip, deep), dim=1)))


def train(volumes, labels, which, record, initialize):
    net = SmallUNet3D(1, 3).double()
    initialize(net)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, weight_decay=1e-5)
    volumes, labels = torch.tensor(volumes), torch.tensor(labels)
    criteria = {'dice': lambda: Dice(torch.tensor([0.5, 1.0, 2.0]).double(), 'softmax'),
                'gdl': lambda: GeneralizedDice('sigmoid'), 'bce_dice': lambda: BceAndDice(0.5, 0.5),
                'cross_entropy': lambda: None}
    criterion = criteria[which]()
    for _ in range(3):
        logits = net(volumes)
        if criterion is None:
            loss = F.cross_entropy(logits, labels, ignore_index=-1, reduction='mean')
        else:
            loss = criterion(logits, one_hot_volume(labels, 3, ignore=-1).clamp(min=0).double())
        opt.zero_grad()
        loss.backward()
        opt.step()
        record.append(loss.item())
    record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})
    record.append(one_hot_volume(labels, 3, ignore=-1).numpy())
    if which == 'gdl':  # one class alone: scored against its complement
        first = one_hot_volume(labels, 3, ignore=-1).clamp(min=0).double()[:, :1]
        record.append(criterion(logits[:, :1].detach(), first).item())
"""

LOSSES_STEPS = [
    (
        "import torch\nfrom torch import nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn as nn\n"
        "from retrograd.nn import functional as F\n",
    ),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


@pytest.mark.parametrize("loss_name", ["dice", "gdl", "bce_dice", "cross_entropy"])
def test_3d_segmentation_losses_train_a_volumetric_segmenter_as_torch(loss_name):
    rng = np.random.default_rng(2350)
    volumes = rng.standard_normal((2, 1, 6, 8, 8))
    labels = rng.integers(0, 3, (2, 6, 8, 8))
    labels[0, :2, :3, :3] = -1  # ignored voxels
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        program = run_source(
            LOSSES_SOURCE if lib is torch else port(LOSSES_SOURCE, LOSSES_STEPS), lib
        )
        program["train"](volumes, labels, loss_name, record, initialize)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-11)
