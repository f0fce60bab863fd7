"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
3-D CNNs on video clips, programs written here in the style of kenshohara/3D-ResNets-PyTorch
(its 3-D ResNet and R(2+1)D models, ``AverageMeter``/``calculate_accuracy`` utilities and
``train_epoch`` loop) with mixup of whole clips in the style of facebookresearch/mixup-cifar10.

Surface: ``nn.Conv3d`` with tuple kernels, strides and paddings and ``bias=False``;
``BatchNorm3d``; ``ReLU(inplace=True)`` and ``out += skip``; a ``(t, 7, 7)`` stem with a temporal
stride; ``MaxPool3d(kernel_size=3, stride=2, padding=1)``; the parameter-free shortcut "A"
(``F.avg_pool3d(x, kernel_size=1, stride=s)``, zero channels from a float32 ``torch.zeros``
joined to a float64 ``out.data`` by ``torch.cat`` after an ``isinstance(out.data,
torch.cuda.FloatTensor)`` test) bound by ``functools.partial``; the projection shortcut "B"
(``nn.Sequential`` of a 1x1x1 conv and ``BatchNorm3d``); R(2+1)D blocks with ``(1, 3, 3)``/``(3, 1,
1)`` factorized convolutions and middle widths from parameter counts; ``AdaptiveAvgPool3d((1, 1,
1))``, ``x.view(x.size(0), -1)``; ``kaiming_normal_(mode="fan_out", nonlinearity="relu")`` and
``constant_`` over ``self.modules()``; ``.double()``; accuracy by ``topk(1, 1, largest=True,
sorted=True)``, ``t()``, ``eq(targets.view(1, -1))``; ``targets.to(device, non_blocking=True)``;
mixup by ``np.random.beta``, ``torch.randperm`` and ``x[index, :]``;
``CrossEntropyLoss().to(device)``; ``SGD`` with Nesterov momentum, ``dampening`` and
``weight_decay`` under ``MultiStepLR``; a ``state_dict`` and an ``eval()`` forward under
``no_grad``.

In float64: in float32 the two runs' gradients agree to 1e-5 from equal weights, yet after one
step (weights 6e-7 apart) the R(2+1)D's could differ by 3%, either run's float32 gradient
straying that far from its own float64 one at times (where the stem's max pooling likely meets a
window whose two largest values differ in the last bits); in float64 the runs agree to 1e-13.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
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

MODELS_SOURCE = """
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F


def conv3d(cin, cout, kernel, stride=1, padding=0):
    return nn.Conv3d(cin, cout, kernel_size=kernel, stride=stride, padding=padding, bias=False)


def middle_width(cin, cout, t=3, s=3):
    # the width between a (1, s, s) and a (t, 1, 1) conv that keeps a (t, s, s) conv's size
    return (cin * cout * t * s * s) // (cin * s * s + t * cout)


class Block3d(nn.Module):
    def __init__(self, cin, cout, stride=1, shortcut=None):
        super().__init__()
        self.conv_a, self.norm_a = conv3d(cin, cout, 3, stride, 1), nn.BatchNorm3d(cout)
        self.conv_b, self.norm_b = conv3d(cout, cout, 3, 1, 1), nn.BatchNorm3d(cout)
        self.act = nn.ReLU(inplace=True)
        self.shortcut = shortcut

    def forward(self, x):
        skip = x if self.shortcut is None else self.shortcut(x)
        out = self.act(self.norm_a(self.conv_a(x)))
        out = self.norm_b(self.conv_b(out))
        out += skip
        return self.act(out)


class Block2p1d(nn.Module):
    def __init__(self, cin, cout, stride=1, shortcut=None):
        super().__init__()
        mid_a, mid_b = middle_width(cin, cout), middle_width(cout, cout)
        self.space_a = conv3d(cin, mid_a, (1, 3, 3), (1, stride, stride), (0, 1, 1))
        self.time_a = conv3d(mid_a, cout, (3, 1, 1), (stride, 1, 1), (1, 0, 0))
        self.space_b = conv3d(cout, mid_b, (1, 3, 3), 1, (0, 1, 1))
        self.time_b = conv3d(mid_b, cout, (3, 1, 1), 1, (1, 0, 0))
        self.norms = nn.ModuleList(nn.BatchNorm3d(c) for c in (mid_a, cout, mid_b, cout))
        self.act = nn.ReLU(inplace=True)
        self.shortcut = shortcut

    def forward(self, x):
        out = self.act(self.norms[0](self.space_a(x)))
        out = self.act(self.norms[1](self.time_a(out)))
        out = self.act(self.norms[2](self.space_b(out)))
        out = self.norms[3](self.time_b(out))
        out += x if self.shortcut is None else self.shortcut(x)
        return self.act(out)


class VideoResNet(nn.Module):
    def __init__(self, block, widen=1.0, shortcut="B", stem_frames=7, stem_stride=1,
                 max_pool=True, n_classes=400):
        super().__init__()
        widths = [int(w * widen) for w in (64, 128, 256, 512)]
        self.width = widths[0]
        if block is Block2p1d:
            mid = (3 * self.width * stem_frames * 49) // (3 * 49 + stem_frames * self.width)
            self.stem = nn.Sequential(
                conv3d(3, mid, (1, 7, 7), (1, 2, 2), (0, 3, 3)), nn.BatchNorm3d(mid),
                nn.ReLU(inplace=True),
                conv3d(mid, self.width, (stem_frames, 1, 1), (stem_stride, 1, 1),
                       (stem_frames // 2, 0, 0)))
        else:
            self.stem = conv3d(3, self.width, (stem_frames, 7, 7), (stem_stride, 2, 2),
                               (stem_frames // 2, 3, 3))
        self.stem_norm, self.act = nn.BatchNorm3d(self.width), nn.ReLU(inplace=True)
        self.pool = nn.MaxPool3d(kernel_size=3, stride=2, padding=1) if max_pool else None
        self.stages = nn.Sequential(*[self._stage(block, w, shortcut, 1 if i == 0 else 2)
                                      for i, w in enumerate(widths)])
        self.head_pool = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.fc = nn.Linear(widths[-1], n_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv3d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm3d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)

    @staticmethod
    def _zero_padded(x, planes, stride):
        kept = F.avg_pool3d(x, kernel_size=1, stride=stride)
        zeros = torch.zeros(kept.size(0), planes - kept.size(1), *kept.shape[2:])
        if isinstance(kept.data, torch.cuda.FloatTensor):  # keep the zeros on the GPU too
            zeros = zeros.cuda()
        return torch.cat([kept.data, zeros], dim=1)

    def _stage(self, block, width, shortcut, stride):
        skip = None
        if stride != 1 or self.width != width:
            if shortcut == "A":
                skip = partial(self._zero_padded, planes=width, stride=stride)
            else:
                skip = nn.Sequential(conv3d(self.width, width, 1, stride), nn.BatchNorm3d(width))
        stage = block(self.width, width, stride=stride, shortcut=skip)
        self.width = width
        return stage

    def forward(self, clip):
        x = self.act(self.stem_norm(self.stem(clip)))
        if self.pool is not None:
            x = self.pool(x)
        x = self.head_pool(self.stages(x))
        return self.fc(x.view(x.size(0), -1))
"""

TRAIN_SOURCE = """
import time

import numpy as np
import torch
import torch.nn as nn
from torch import optim


class RunningMean:
    def __init__(self):
        self.total, self.count, self.last = 0.0, 0, 0.0

    def add(self, value, weight=1):
        self.last = value
        self.total += value * weight
        self.count += weight

    @property
    def mean(self):
        return self.total / self.count


def top1_accuracy(logits, targets):
    with torch.no_grad():
        _, best = logits.topk(1, 1, largest=True, sorted=True)
        hits = best.t().eq(targets.view(1, -1))
        return hits.float().sum().item() / targets.size(0)


def mix_clips(clips, targets, alpha):
    # blend every clip with another one of the batch; the loss blends both labels
    weight = np.random.beta(alpha, alpha)
    order = torch.randperm(clips.size()[0])
    return weight * clips + (1 - weight) * clips[order, :], targets, targets[order], weight


def one_epoch(epoch, batches, model, loss_fn, optimizer, device, record, mixup):
    print(f"epoch {epoch}")
    model.train()
    losses, accuracy, timing = RunningMean(), RunningMean(), RunningMean()
    started = time.time()
    for clips, labels in batches:
        targets = labels.to(device, non_blocking=True)
        if mixup:
            clips, first, second, weight = mix_clips(clips, targets, 1.0)
            logits = model(clips)
            loss = weight * loss_fn(logits, first) + (1 - weight) * loss_fn(logits, second)
        else:
            logits = model(clips)
            loss = loss_fn(logits, targets)
        losses.add(loss.item(), clips.size(0))
        accuracy.add(top1_accuracy(logits, targets), clips.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        timing.add(time.time() - started)
        started = time.time()
        record.extend([loss.item(), logits.detach().numpy()])
    record.extend([losses.mean, accuracy.mean])


def fit(net, clips, labels, record, initialize, mixup):
    initialize(net)
    device = torch.device("cpu")
    loss_fn = nn.CrossEntropyLoss().to(device)
    optimizer = optim.SGD(net.parameters(), lr=0.05, momentum=0.9, dampening=0.0,
                          weight_decay=1e-3, nesterov=True)
    schedule = optim.lr_scheduler.MultiStepLR(optimizer, [1])
    batch_size = 4
    batches = [(torch.tensor(clips[i:i + batch_size]), torch.tensor(labels[i:i + batch_size]))
               for i in range(0, len(clips), batch_size)]
    for epoch in range(2):
        one_epoch(epoch, batches, net, loss_fn, optimizer, device, record, mixup)
        schedule.step()
    record.append({name: t.detach().numpy() for name, t in net.state_dict().items()})
    net.eval()
    with torch.no_grad():
        record.append(net(torch.tensor(clips[:2])).numpy())
"""

TRAIN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch import optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd import optim\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]
MODEL_STEPS = [
    (
        "import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn\n"
        "from retrograd.nn import functional as F\n",
    ),
]


@pytest.mark.parametrize(
    ("block", "options", "mixup"),
    [
        ("Block3d", {"shortcut": "A", "stem_stride": 2}, True),
        ("Block3d", {"shortcut": "B", "stem_frames": 3, "max_pool": False}, False),
        ("Block2p1d", {"shortcut": "B", "stem_stride": 2}, False),
    ],
    ids=["r3d-shortcut-A-mixup", "r3d-shortcut-B", "r2plus1d"],
)
def test_3d_resnets_train_on_clips_as_torch(capsys, block, options, mixup):
    rng = np.random.default_rng(2310)
    # one batch an epoch: each step amplifies the runs' rounding differences
    clips = rng.standard_normal((4, 3, 4, 16, 16))
    labels = rng.integers(0, 5, 4)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        np.random.seed(231)
        torch.manual_seed(231)
        rg.seed(231)
        record = []
        ported = lib is not torch
        models = run_source(port(MODELS_SOURCE, MODEL_STEPS) if ported else MODELS_SOURCE, lib)
        train = run_source(port(TRAIN_SOURCE, TRAIN_STEPS) if ported else TRAIN_SOURCE, lib)
        net = models["VideoResNet"](models[block], widen=0.125, n_classes=5, **options).double()
        if mixup:  # the same permutation in both runs
            permutations = iter([np.array([3, 1, 0, 2]), np.array([1, 0, 3, 2])] * 2)
            train["torch"] = _WithRandperm(lib, permutations)
        train["fit"](net, clips, labels, record, initialize, mixup)
        records.append(record)
    assert capsys.readouterr().out.count("epoch") == 4
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)


class _WithRandperm:
    def __init__(self, lib, permutations):
        self._lib, self._permutations = lib, permutations

    def randperm(self, n):
        return self._lib.tensor(next(self._permutations))

    def __getattr__(self, name):
        return getattr(self._lib, name)
