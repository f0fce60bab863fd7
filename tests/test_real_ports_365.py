# ruff: noqa: E501  (the program's layer lists read best one block a line)
"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
a GhostNet-style network narrowed by its ``width``, trained a few steps against torch's run of
the same code from the same weights and images.

- A program written here in the style of huawei-noah's GhostNet: ghost modules
  (``math.ceil(cout / ratio)`` primary channels, the cheap depthwise ``nn.Conv2d(p, e, k, 1,
  k // 2, groups=p)``, ``nn.ReLU(inplace=True) if relu else nn.Sequential()`` with an empty
  ``Sequential`` as the identity, ``torch.cat([a, b], dim=1)`` sliced back by ``[:, :cout, :,
  :]``); ghost bottlenecks (a strided depthwise convolution between the ghost modules, a
  hard-sigmoid squeeze-excite with channels rounded to a divisor of 4, ``y +=
  self.shortcut(x)`` with an empty or a depthwise-then-pointwise shortcut); stages from rows
  ``[k, mid, out, se, stride]``, a 1x1 head after global pooling, ``x.view(x.size(0), -1)``,
  ``F.dropout(..., training=self.training)`` when ``dropout > 0``; SGD with Nesterov momentum
  and weight decay, ``nn.CrossEntropyLoss(label_smoothing=0.1)``, ``eval()`` outputs.

Compared against torch: the ghost modules' widths, the losses and weights of every step and
the outputs in ``eval()`` mode. ``dropout=0.`` (its masks are each library's own draws). The
lines a port changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import numpy as np
import torch

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

GHOSTNET_SOURCE = """
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


def round_to(v, divisor=4):
    r = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return r + divisor if r < 0.9 * v else r


def hard_sigmoid(x, inplace=False):
    return x.add_(3.0).clamp_(0.0, 6.0).div_(6.0) if inplace else F.relu6(x + 3.0) / 6.0


def maybe_relu(on):
    return nn.ReLU(inplace=True) if on else nn.Sequential()  # (an empty Sequential: identity)


class Ghost(nn.Module):
    # half the outputs from a pointwise conv, the rest from a cheap depthwise conv of those
    def __init__(self, cin, cout, ratio=2, cheap_k=3, relu=True):
        super().__init__()
        self.cout = cout
        primary = math.ceil(cout / ratio)
        extra = primary * (ratio - 1)
        self.primary = nn.Sequential(nn.Conv2d(cin, primary, 1, bias=False), nn.BatchNorm2d(primary), maybe_relu(relu))
        self.cheap = nn.Sequential(
            nn.Conv2d(primary, extra, cheap_k, 1, cheap_k // 2, groups=primary, bias=False),
            nn.BatchNorm2d(extra), maybe_relu(relu),
        )

    def forward(self, x):
        a = self.primary(x)
        both = torch.cat([a, self.cheap(a)], dim=1)
        return both[:, : self.cout, :, :]


class SE(nn.Module):
    def __init__(self, channels, ratio=0.25):
        super().__init__()
        mid = round_to(channels * ratio)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.squeeze, self.act, self.excite = nn.Conv2d(channels, mid, 1), nn.ReLU(inplace=True), nn.Conv2d(mid, channels, 1)

    def forward(self, x):
        return x * hard_sigmoid(self.excite(self.act(self.squeeze(self.pool(x)))))


class GhostBlock(nn.Module):
    def __init__(self, cin, mid, cout, k=3, stride=1, se=0.0):
        super().__init__()
        self.expand = Ghost(cin, mid, relu=True)
        self.down = None
        if stride > 1:
            self.down = nn.Sequential(nn.Conv2d(mid, mid, k, stride, (k - 1) // 2, groups=mid, bias=False), nn.BatchNorm2d(mid))
        self.se = SE(mid, se) if se else None
        self.reduce = Ghost(mid, cout, relu=False)
        projection = [
            nn.Conv2d(cin, cin, k, stride, (k - 1) // 2, groups=cin, bias=False), nn.BatchNorm2d(cin),
            nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout),
        ]
        # the identity is an empty Sequential
        self.shortcut = nn.Sequential(*([] if cin == cout and stride == 1 else projection))

    def forward(self, x):
        y = self.expand(x)
        if self.down is not None:
            y = self.down(y)
        if self.se is not None:
            y = self.se(y)
        y = self.reduce(y)
        y += self.shortcut(x)
        return y


class TinyGhostNet(nn.Module):
    def __init__(self, stages, classes=5, width=1.0, dropout=0.0, head=64):
        super().__init__()
        self.dropout = dropout
        c = round_to(16 * width)
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True))
        layers = []
        for rows in stages:
            blocks = []
            for k, mid, out, se, stride in rows:
                out_c = round_to(out * width)
                blocks.append(GhostBlock(c, round_to(mid * width), out_c, k, stride, se))
                c = out_c
            layers.append(nn.Sequential(*blocks))
        last = round_to(mid * width)
        layers.append(nn.Sequential(nn.Conv2d(c, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU(inplace=True)))
        self.blocks = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.head = nn.Sequential(nn.Conv2d(last, head, 1), nn.ReLU(inplace=True))
        self.classifier = nn.Linear(head, classes)

    def forward(self, x):
        x = self.head(self.pool(self.blocks(self.stem(x))))
        x = x.view(x.size(0), -1)
        if self.dropout > 0.0:
            x = F.dropout(x, self.dropout, training=self.training)
        return self.classifier(x)


stages = [
    [[3, 16, 16, 0, 1]],
    [[3, 48, 24, 0, 2]],
    [[5, 64, 32, 0.25, 2], [3, 96, 32, 0.25, 1]],
]
net = TinyGhostNet(stages, width=0.25)
initialize(net)
record.append([m.cout for m in net.modules() if isinstance(m, Ghost)])
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=4e-5)
smoothed_ce = nn.CrossEntropyLoss(label_smoothing=0.1)
for step in range(3):
    net.train()
    images, labels = data[step % len(data)]
    loss = smoothed_ce(net(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(net))
net.eval()
with torch.no_grad():
    record.append(net(data[-1][0]).numpy())
"""

GHOSTNET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.nn import functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_ghostnet_trains_as_torch(capsys):
    torch.manual_seed(365)  # torch's initial weights, which the port loads
    rng = np.random.default_rng(365)
    batches = [
        (rng.standard_normal((4, 3, 16, 16)).astype(np.float32), rng.integers(0, 5, 4))
        for _ in range(2)
    ]
    (theirs, ours), _ = runs_with_draws(
        GHOSTNET_SOURCE,
        GHOSTNET_STEPS,
        capsys,
        365,
        initialize=initializer(),
        params_of=params_of,
        make_data=lambda lib: [(lib.tensor(x), lib.tensor(y)) for x, y in batches],
    )
    assert theirs[0] == [4, 4, 12, 8, 16, 8, 24, 8]
    assert len(theirs) == 1 + 3 * 2 + 1
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
