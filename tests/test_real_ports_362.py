# ruff: noqa: E501  (the program's block constructors read best on one line each)
"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
EfficientNet/MobileNetV3-style blocks trained under a per-update cosine schedule with warmup,
against torch's run of the same code from the same weights and draws.

- A program written here in the style of rwightman's gen-efficientnet-pytorch and timm:
  activations with an ``inplace`` option (hard swish by ``F.relu6(x + 3.0).div_(6.0)`` then
  ``x.mul_(gate)``: applied in place to a batch norm's output, which autograd must
  differentiate as torch does; swish by ``x.mul_(x.sigmoid())``; hard sigmoid); TensorFlow
  ``'SAME'`` padding in an ``nn.Conv2d`` subclass (``F.pad(x, [pw // 2, pw - pw // 2, ...])``
  then ``F.conv2d(x, weight, bias, stride, (0, 0), dilation, groups)``, strided); a mixed
  depthwise convolution subclassing ``nn.ModuleDict`` over ``torch.split(x, sizes, 1)``, its
  ``self.values()`` joined by ``torch.cat``; channel rounding; drop-path by ``keep +
  torch.rand((n, 1, 1, 1), dtype=..., device=...)`` and ``mask.floor_()``; squeeze-excite with a
  hard-sigmoid gate; conv-bn-act, depthwise-separable and inverted-bottleneck blocks (``x +=
  shortcut``); a schedule that sets ``initial_lr`` by ``group.setdefault`` and is stepped per
  update (``step_update``), its ``state_dict``; parameter groups without weight decay for
  1-d parameters, ``SGD(..., nesterov=True)``, ``model.to(memory_format=torch.channels_last)``,
  ``x.contiguous(memory_format=torch.channels_last)``, a disabled ``torch.autocast('cpu',
  enabled=False)``, ``nn.CrossEntropyLoss(label_smoothing=0.1)``.

Compared against torch: the learning rates, losses and weights of every update, the outputs in
``eval()`` mode, the running statistics and the schedule's state keys. ``torch.rand`` draws from
one seeded stream in both runs. The lines a port changes: the ``import`` lines and the gradient
lines.
"""

from __future__ import annotations

import numpy as np
import torch

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

GEFFNET_SOURCE = """
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


# ---- activations with an in-place option --------------------------------------------------
def hard_swish(x, inplace=False):
    gate = F.relu6(x + 3.0).div_(6.0)
    return x.mul_(gate) if inplace else x.mul(gate)


def hard_sigmoid(x, inplace=False):
    return F.relu6(x + 3.0).div_(6.0) if inplace else F.relu6(x + 3.0) / 6.0


def swish(x, inplace=False):
    gate = x.sigmoid()
    return x.mul_(gate) if inplace else x.mul(gate)


class Act(nn.Module):
    def __init__(self, fn, inplace=False):
        super().__init__()
        self.fn, self.inplace = fn, inplace

    def forward(self, x):
        return self.fn(x, self.inplace)


HardSwish = lambda inplace=False: Act(hard_swish, inplace)
Swish = lambda inplace=False: Act(swish, inplace)
ReLU = lambda inplace=False: nn.ReLU(inplace=inplace)


# ---- convolutions ----------------------------------------------------------------------------
class SameConv2d(nn.Conv2d):
    # TensorFlow's 'SAME' padding, worked out from the input's size at each call
    def forward(self, x):
        def extra(size, k, s, d):
            return max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)

        ph = extra(x.size(-2), self.weight.size(-2), self.stride[0], self.dilation[0])
        pw = extra(x.size(-1), self.weight.size(-1), self.stride[1], self.dilation[1])
        x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])
        return F.conv2d(x, self.weight, self.bias, self.stride, (0, 0), self.dilation, self.groups)


class MixedDepthwise(nn.ModuleDict):
    # the channels split among depthwise kernels of several sizes
    def __init__(self, channels, kernels, stride=1):
        sizes = [channels // len(kernels)] * len(kernels)
        sizes[0] += channels - sum(sizes)
        super().__init__({
            str(k): nn.Conv2d(c, c, k, stride, padding=k // 2, groups=c, bias=False)
            for k, c in zip(kernels, sizes)
        })
        self.sizes = sizes

    def forward(self, x):
        parts = torch.split(x, self.sizes, 1)
        return torch.cat([conv(part) for part, conv in zip(parts, self.values())], 1)


def conv(cin, cout, k, stride=1, groups=1, same=False):
    if isinstance(k, list):
        return MixedDepthwise(cin, k, stride)
    if same and stride > 1:
        return SameConv2d(cin, cout, k, stride, groups=groups, bias=False)
    return nn.Conv2d(cin, cout, k, stride, padding=k // 2, groups=groups, bias=False)


def round_channels(v, divisor=8):
    rounded = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * v else rounded


def drop_path(x, rate, training):
    if not training or rate == 0.0:
        return x
    keep = 1.0 - rate
    mask = keep + torch.rand((x.size()[0], 1, 1, 1), dtype=x.dtype, device=x.device)
    mask.floor_()
    return x.div(keep) * mask


# ---- blocks ----------------------------------------------------------------------------------
class SE(nn.Module):
    def __init__(self, channels, mid_from, ratio, act=ReLU, gate=torch.sigmoid):
        super().__init__()
        mid = round_channels(mid_from * ratio)
        self.reduce = nn.Conv2d(channels, mid, 1)
        self.act = act(inplace=True)
        self.expand = nn.Conv2d(mid, channels, 1)
        self.gate = gate

    def forward(self, x):
        s = self.act(self.reduce(x.mean((2, 3), keepdim=True)))
        return x * self.gate(self.expand(s))


class ConvBnAct(nn.Module):
    def __init__(self, cin, cout, k, stride=1, act=ReLU):
        super().__init__()
        self.conv, self.bn, self.act = conv(cin, cout, k, stride), nn.BatchNorm2d(cout), act(inplace=True)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class DepthwiseBlock(nn.Module):
    def __init__(self, cin, cout, k=3, se=0.0, act=ReLU, drop=0.0):
        super().__init__()
        self.residual, self.drop = cin == cout, drop
        self.dw, self.bn1, self.act = conv(cin, cin, k, groups=cin), nn.BatchNorm2d(cin), act(inplace=True)
        self.se = SE(cin, cin, se, gate=hard_sigmoid) if se else nn.Identity()
        self.pw, self.bn2 = conv(cin, cout, 1), nn.BatchNorm2d(cout)

    def forward(self, x):
        out = self.bn2(self.pw(self.se(self.act(self.bn1(self.dw(x))))))
        if self.residual:
            out = drop_path(out, self.drop, self.training)
            out += x
        return out


class InvertedBottleneck(nn.Module):
    def __init__(self, cin, cout, k=3, stride=1, expand=3.0, se=0.0, act=ReLU, drop=0.0, same=False):
        super().__init__()
        mid = round_channels(cin * expand)
        self.residual, self.drop = cin == cout and stride == 1, drop
        self.expand, self.bn1, self.act1 = conv(cin, mid, 1), nn.BatchNorm2d(mid), act(inplace=True)
        self.dw = conv(mid, mid, k, stride, groups=mid, same=same)
        self.bn2, self.act2 = nn.BatchNorm2d(mid), act(inplace=True)
        self.se = SE(mid, cin, se, gate=hard_sigmoid) if se else nn.Identity()
        self.project, self.bn3 = conv(mid, cout, 1), nn.BatchNorm2d(cout)

    def forward(self, x):
        shortcut = x
        x = self.act1(self.bn1(self.expand(x)))
        x = self.se(self.act2(self.bn2(self.dw(x))))
        x = self.bn3(self.project(x))
        if self.residual:
            x = drop_path(x, self.drop, self.training)
            x += shortcut
        return x


# ---- a per-update cosine schedule with linear warmup ---------------------------------------
class WarmupCosine:
    def __init__(self, optimizer, total, lr_min=0.0, warmup=0, warmup_lr=0.0):
        self.optimizer, self.total, self.lr_min = optimizer, total, lr_min
        self.warmup, self.warmup_lr = warmup, warmup_lr
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base = [group["initial_lr"] for group in optimizer.param_groups]
        self.slopes = [(v - warmup_lr) / warmup for v in self.base] if warmup else []
        self.step_update(0)

    def values(self, t):
        if t < self.warmup:
            return [self.warmup_lr + t * slope for slope in self.slopes]
        t = min(t - self.warmup, self.total)
        return [self.lr_min + 0.5 * (v - self.lr_min) * (1 + math.cos(math.pi * t / self.total)) for v in self.base]

    def step_update(self, num_updates, metric=None):
        for group, value in zip(self.optimizer.param_groups, self.values(num_updates)):
            group["lr"] = value

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}


class Net(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Sequential(SameConv2d(3, 8, 3, 2, bias=False), nn.BatchNorm2d(8), HardSwish(inplace=True))
        self.blocks = nn.Sequential(
            DepthwiseBlock(8, 8, se=0.25, drop=0.25),
            InvertedBottleneck(8, 8, k=[3, 5], expand=3.0, se=0.25, act=Swish, drop=0.5),
            InvertedBottleneck(8, 16, k=5, stride=2, expand=2.0, se=0.25, act=HardSwish, same=True),
            ConvBnAct(16, 24, 1, act=HardSwish),
        )
        self.head = nn.Linear(24, classes)

    def forward(self, x):
        return self.head(nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


model = Net()
initialize(model)
model = model.to(memory_format=torch.channels_last)
plain, decayed = [], []
for name, p in model.named_parameters():
    (plain if p.ndim <= 1 or name.endswith(".bias") else decayed).append(p)
optimizer = torch.optim.SGD(
    [{"params": plain, "weight_decay": 0.0}, {"params": decayed, "weight_decay": 1e-4}],
    lr=0.2, momentum=0.9, nesterov=True,
)
schedule = WarmupCosine(optimizer, total=4, lr_min=1e-3, warmup=2, warmup_lr=1e-2)
record.append([(g["lr"], g["initial_lr"]) for g in optimizer.param_groups])
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
updates = 0
for epoch in range(2):
    model.train()
    for images, labels in loader:
        images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cpu", enabled=False):
            loss = criterion(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        updates += 1
        schedule.step_update(num_updates=updates, metric=loss.item())
        record.append(loss.item())
        record.append([g["lr"] for g in optimizer.param_groups])
    record.append(dict(params_of(model)))
    model.eval()
    with torch.no_grad():
        record.append(model(loader[-1][0]).numpy())
record.append({k: v.numpy() for k, v in model.state_dict().items() if "running" in k})
record.append(sorted(schedule.state_dict()))
"""

GEFFNET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.nn import functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_geffnet_blocks_train_under_timm_cosine_warmup_as_torch(capsys):
    torch.manual_seed(362)  # torch's initial weights, which the port loads
    rng = np.random.default_rng(362)
    batches = [
        (rng.standard_normal((4, 3, 16, 16)).astype(np.float32), rng.integers(0, 5, 4))
        for _ in range(3)
    ]
    (theirs, ours), _ = runs_with_draws(
        GEFFNET_SOURCE,
        GEFFNET_STEPS,
        capsys,
        362,
        initialize=initializer(),
        params_of=params_of,
        make_loader=lambda lib: [(lib.tensor(x), lib.tensor(y)) for x, y in batches],
    )
    assert theirs[0] == [(0.01, 0.2), (0.01, 0.2)]
    assert len(theirs) == 1 + 2 * (3 * 2 + 2) + 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
