"""Real-port tests (the harness: ``tests/real_ports.py``): CIFAR classifiers written here in the
style of kuangliu/pytorch-cifar's ``models/*.py`` (small: 16x16 inputs, narrow and shallow; none
is copied from it), each trained by a script in the manner of its ``main.py``:

- pre-activation ResNets (a basic and a bottleneck block) with the shortcut made only when needed
  and taken by ``self.shortcut(h) if hasattr(self, "shortcut") else x``, ``h += skip``,
  ``F.avg_pool2d(h, 2)``;
- a dual path network: ``torch.cat([x[:, :r, :, :] + y[:, :r, :, :], x[:, r:, :, :], y[:, r:, :,
  :]], 1)`` after grouped convolutions, an empty ``nn.Sequential()`` as the identity;
- deep layer aggregation: a recursive ``Tree`` registering its subtrees by
  ``self.__setattr__("level_%d" % i, ...)`` and reading them by ``self.__getattr__("level_%d" %
  i)``, a root over ``torch.cat(parts, 1)`` of a list, ``nn.ReLU(True)``;
- PNASNet-style cells: depthwise convolutions (``groups=c_in``, kernels 3, 5 and 7),
  ``F.max_pool2d(x, kernel_size=3, stride=self.stride, padding=1)`` branches, the cell classes
  passed to the network;
- RegNet X and Y: squeeze-excitation by ``F.adaptive_avg_pool2d(x, (1, 1))`` and ``.sigmoid()``,
  a fixed group width, ``int(round(c_out * bottleneck_ratio))``, a config dict;
- an SE network of pre-activation blocks with ``F.avg_pool2d(h, h.size(2))`` and ``F.sigmoid``;
- ResNeXt: blocks of ``cardinality`` groups with the group width doubled per stage
  (``self.group_width *= 2``).

The training script around them: ``nn.CrossEntropyLoss``, SGD with momentum 0.9 and
``weight_decay=5e-4``, ``CosineAnnealingLR(sgd, T_max=200)`` stepped per epoch,
``logits.max(1)``, ``guess.eq(labels).sum().item()``, ``running / (step + 1)`` and the test loop
under ``torch.no_grad()`` in ``net.eval()``, the best state dict kept. Everything in float64
(BatchNorm's statistics, and SGD steps on weights whose gradients are small, would drift apart in
float32 rounding only). The port changes only the gradient lines (DLA's explicit
``self.__getattr__`` of a sub-module included).
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import assert_records_agree
from test_real_ports_15 import _run
from test_real_ports_17 import default_float64

PREACT_SOURCE = """
# pre-activation ResNets: BN and ReLU before each convolution, the shortcut taken from the
# activated input when it needs a projection and from the raw input otherwise


def projection(c_in, c_out, stride):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False))


class PreActBasic(nn.Module):
    expansion = 1

    def __init__(self, c_in, c, stride=1):
        super().__init__()
        self.bn_a = nn.BatchNorm2d(c_in)
        self.conv_a = nn.Conv2d(c_in, c, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn_b = nn.BatchNorm2d(c)
        self.conv_b = nn.Conv2d(c, c, kernel_size=3, padding=1, bias=False)
        if stride != 1 or c_in != c * self.expansion:
            self.shortcut = projection(c_in, c * self.expansion, stride)

    def forward(self, x):
        h = F.relu(self.bn_a(x))
        skip = self.shortcut(h) if hasattr(self, "shortcut") else x
        h = self.conv_b(F.relu(self.bn_b(self.conv_a(h))))
        h += skip
        return h


class PreActBottle(nn.Module):
    expansion = 4

    def __init__(self, c_in, c, stride=1):
        super().__init__()
        self.norms = nn.ModuleList([nn.BatchNorm2d(c_in), nn.BatchNorm2d(c), nn.BatchNorm2d(c)])
        self.convs = nn.ModuleList(
            [
                nn.Conv2d(c_in, c, kernel_size=1, bias=False),
                nn.Conv2d(c, c, kernel_size=3, stride=stride, padding=1, bias=False),
                nn.Conv2d(c, c * self.expansion, kernel_size=1, bias=False),
            ]
        )
        if stride != 1 or c_in != c * self.expansion:
            self.shortcut = projection(c_in, c * self.expansion, stride)

    def forward(self, x):
        h = F.relu(self.norms[0](x))
        skip = self.shortcut(h) if hasattr(self, "shortcut") else x
        h = self.convs[0](h)
        for norm, conv in zip(self.norms[1:], self.convs[1:]):
            h = conv(F.relu(norm(h)))
        h += skip
        return h


class PreActNet(nn.Module):
    def __init__(self, block, depths, widths=(6, 8, 12, 16), classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, widths[0], kernel_size=3, padding=1, bias=False)
        self.c = widths[0]
        self.stages = nn.Sequential(
            *[
                self.stage(block, w, n, 1 if i == 0 else 2)
                for i, (w, n) in enumerate(zip(widths, depths))
            ]
        )
        self.fc = nn.Linear(widths[-1] * block.expansion, classes)

    def stage(self, block, width, n, stride):
        blocks = []
        for s in [stride] + [1] * (n - 1):
            blocks.append(block(self.c, width, s))
            self.c = width * block.expansion
        return nn.Sequential(*blocks)

    def forward(self, x):
        h = F.avg_pool2d(self.stages(self.stem(x)), 2)  # 16x16 in, 2x2 after three halvings
        return self.fc(h.view(h.size(0), -1))


def preact_basic():
    return PreActNet(PreActBasic, [2, 1, 1, 1])


def preact_bottleneck():
    return PreActNet(PreActBottle, [1, 1, 1, 1], widths=(4, 6, 8, 8))
"""

DPN_SOURCE = """
# a dual path network: each block's output splits into a residual part (added to the input's first
# channels) and a dense part (appended after the input's remaining channels)


class DualPathBlock(nn.Module):
    def __init__(self, c_prev, c_mid, c_res, growth, stride, project):
        super().__init__()
        self.c_res = c_res
        self.body = nn.Sequential(
            nn.Conv2d(c_prev, c_mid, 1, bias=False),
            nn.BatchNorm2d(c_mid),
            nn.ReLU(),
            nn.Conv2d(c_mid, c_mid, 3, stride=stride, padding=1, groups=2, bias=False),
            nn.BatchNorm2d(c_mid),
            nn.ReLU(),
            nn.Conv2d(c_mid, c_res + growth, 1, bias=False),
            nn.BatchNorm2d(c_res + growth),
        )
        self.skip = nn.Sequential()  # the identity, unless the first block of a stage
        if project:
            self.skip = nn.Sequential(
                nn.Conv2d(c_prev, c_res + growth, 1, stride=stride, bias=False),
                nn.BatchNorm2d(c_res + growth),
            )

    def forward(self, x):
        y, x = self.body(x), self.skip(x)
        r = self.c_res
        return F.relu(
            torch.cat([x[:, :r, :, :] + y[:, :r, :, :], x[:, r:, :, :], y[:, r:, :, :]], 1)
        )


class DualPathNet(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6), nn.ReLU()
        )
        self.c = 6
        stages = []
        for i, (mid, res, n, growth) in enumerate(
            zip(spec["mid"], spec["res"], spec["blocks"], spec["growth"])
        ):
            blocks = []
            for j in range(n):
                blocks.append(
                    DualPathBlock(self.c, mid, res, growth, 2 if i and not j else 1, j == 0)
                )
                self.c = res + (j + 2) * growth  # every block appends `growth` dense channels
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(self.c, 10)

    def forward(self, x):
        h = F.avg_pool2d(self.stages(self.stem(x)), 2)
        return self.fc(h.view(h.size(0), -1))


def dual_path():
    return DualPathNet(
        {
            "mid": (4, 6, 8, 8),
            "res": (8, 10, 12, 14),
            "blocks": (2, 1, 1, 2),
            "growth": (2, 3, 2, 3),
        }
    )
"""

DLA_SOURCE = """
# deep layer aggregation: trees of residual blocks whose outputs are merged by a root node; deeper
# trees hold their subtrees under generated attribute names


class Residual(nn.Module):
    def __init__(self, c_in, c, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.skip = nn.Sequential()
        if stride != 1 or c_in != c:
            self.skip = nn.Sequential(
                nn.Conv2d(c_in, c, 1, stride=stride, bias=False), nn.BatchNorm2d(c)
            )

    def forward(self, x):
        h = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        h += self.skip(x)
        return F.relu(h)


class Aggregate(nn.Module):
    def __init__(self, c_in, c):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, parts):
        return F.relu(self.bn(self.conv(torch.cat(parts, 1))))


class Tree(nn.Module):
    def __init__(self, c_in, c, depth=1, stride=1):
        super().__init__()
        self.depth = depth
        self.root = Aggregate((depth + 1) * c, c)
        for i in range(depth - 1, 0, -1):  # level_{depth-1} .. level_1, each a smaller tree
            self.__setattr__("level_%d" % i, Tree(c_in, c, depth=i, stride=stride))
        first_in, first_stride = (c_in, stride) if depth == 1 else (c, 1)
        self.left = Residual(first_in, c, stride=first_stride)
        self.right = Residual(c, c)

    def forward(self, x):
        parts = []
        for i in range(self.depth - 1, 0, -1):
            x = self.__getattr__("level_%d" % i)(x)
            parts.append(x)
        x = self.left(x)
        parts.append(x)
        parts.append(self.right(x))
        return self.root(parts)


class DLA(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        stem = []
        for c_in, c in ((3, 4), (4, 4), (4, 6)):
            stem += [nn.Conv2d(c_in, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(True)]
        self.stem = nn.Sequential(*stem)
        self.trees = nn.Sequential(
            Tree(6, 6),
            Tree(6, 8, depth=2, stride=2),
            Tree(8, 10, depth=2, stride=2),
            Tree(10, 12, stride=2),
        )
        self.fc = nn.Linear(12, classes)

    def forward(self, x):
        h = F.avg_pool2d(self.trees(self.stem(x)), 2)
        return self.fc(h.view(h.size(0), -1))


def dla():
    return DLA()
"""

PNASNET_SOURCE = """
# progressive NAS cells: depthwise separable convolutions of several kernel sizes and a max-pool
# branch, the cell type given to the network as a class


class DepthwiseConv(nn.Module):
    def __init__(self, c_in, c, k, stride):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c, k, stride, padding=k // 2, groups=c_in, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return self.bn(self.conv(x))


class PoolBranch(nn.Module):
    def __init__(self, c_in, c, stride):
        super().__init__()
        self.stride = stride
        if stride == 2:  # match the channels after the strided pool
            self.proj = nn.Sequential(nn.Conv2d(c_in, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = F.max_pool2d(x, kernel_size=3, stride=self.stride, padding=1)
        return self.proj(y) if self.stride == 2 else y


class OneBranchCell(nn.Module):
    def __init__(self, c_in, c, stride=1):
        super().__init__()
        self.sep = DepthwiseConv(c_in, c, 7, stride)
        self.pool = PoolBranch(c_in, c, stride)

    def forward(self, x):
        return F.relu(self.sep(x) + self.pool(x))


class TwoBranchCell(nn.Module):
    def __init__(self, c_in, c, stride=1):
        super().__init__()
        self.left = nn.ModuleList(
            [DepthwiseConv(c_in, c, 7, stride), DepthwiseConv(c_in, c, 3, stride)]
        )
        self.right_sep = DepthwiseConv(c_in, c, 5, stride)
        self.right_pool = PoolBranch(c_in, c, stride)
        self.merge = nn.Sequential(nn.Conv2d(2 * c, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        a = F.relu(self.left[0](x) + self.left[1](x))
        b = F.relu(self.right_pool(x) + self.right_sep(x))
        return F.relu(self.merge(torch.cat([a, b], 1)))


class PNASNet(nn.Module):
    def __init__(self, cell, width):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        plan = [(width, 1), (2 * width, 2), (2 * width, 1), (4 * width, 2), (4 * width, 1)]
        cells, c = [], width
        for c_out, stride in plan:
            cells.append(cell(c, c_out, stride=stride))
            c = c_out
        self.cells = nn.Sequential(*cells)
        self.fc = nn.Linear(4 * width, 10)

    def forward(self, x):
        h = F.avg_pool2d(self.cells(self.stem(x)), 4)  # 16 -> 4 after two strided cells
        return self.fc(h.view(h.size(0), -1))


def pnas_one_branch():
    return PNASNet(OneBranchCell, 4)


def pnas_two_branch():
    return PNASNet(TwoBranchCell, 4)
"""

REGNET_SOURCE = """
# RegNet X/Y blocks: a 1x1 - grouped 3x3 - 1x1 bottleneck with a fixed group width, the Y variant
# adding squeeze-and-excitation; the network described by a config dict


class SqueezeExcite(nn.Module):
    def __init__(self, c, c_squeezed):
        super().__init__()
        self.down = nn.Conv2d(c, c_squeezed, 1)
        self.up = nn.Conv2d(c_squeezed, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, (1, 1))
        return x * self.up(F.relu(self.down(s))).sigmoid()


class RegBlock(nn.Module):
    def __init__(self, c_in, c_out, stride, group_width, bottleneck_ratio, se_ratio):
        super().__init__()
        c_b = int(round(c_out * bottleneck_ratio))
        layers = [
            nn.Conv2d(c_in, c_b, 1, bias=False),
            nn.BatchNorm2d(c_b),
            nn.ReLU(),
            nn.Conv2d(c_b, c_b, 3, stride=stride, padding=1, groups=c_b // group_width, bias=False),
            nn.BatchNorm2d(c_b),
            nn.ReLU(),
        ]
        if se_ratio > 0:
            layers.append(SqueezeExcite(c_b, int(round(c_in * se_ratio))))
        layers += [nn.Conv2d(c_b, c_out, 1, bias=False), nn.BatchNorm2d(c_out)]
        self.body = nn.Sequential(*layers)
        self.skip = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.skip = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x):
        h = self.body(x)
        h += self.skip(x)
        return F.relu(h)


class RegNet(nn.Module):
    def __init__(self, cfg, classes=10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
        )
        blocks, c = [], 8
        for depth, width, stride in zip(cfg["depths"], cfg["widths"], cfg["strides"]):
            for i in range(depth):
                blocks.append(
                    RegBlock(
                        c,
                        width,
                        stride if i == 0 else 1,
                        cfg["group_width"],
                        cfg["bottleneck_ratio"],
                        cfg["se_ratio"],
                    )
                )
                c = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cfg["widths"][-1], classes)

    def forward(self, x):
        h = F.adaptive_avg_pool2d(self.blocks(self.stem(x)), (1, 1))
        return self.fc(h.view(h.size(0), -1))


def regnet_x():
    return RegNet(
        {
            "depths": [1, 1, 2, 1],
            "widths": [8, 16, 24, 32],
            "strides": [1, 2, 2, 2],
            "group_width": 8,
            "bottleneck_ratio": 1,
            "se_ratio": 0,
        }
    )


def regnet_y():
    return RegNet(
        {
            "depths": [1, 2, 1, 1],
            "widths": [8, 16, 24, 32],
            "strides": [1, 2, 2, 2],
            "group_width": 4,
            "bottleneck_ratio": 0.5,
            "se_ratio": 0.25,
        }
    )
"""

SENET_SOURCE = """
# squeeze-and-excitation on pre-activation residual blocks: the channel weights from a global
# average pool the size of the feature map, through two 1x1 convolutions


class SEPreActBlock(nn.Module):
    def __init__(self, c_in, c, stride=1, reduction=8):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(c_in), nn.BatchNorm2d(c)
        self.conv1 = nn.Conv2d(c_in, c, 3, stride=stride, padding=1, bias=False)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        if stride != 1 or c_in != c:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c, 1, stride=stride, bias=False))
        self.squeeze = nn.Conv2d(c, c // reduction, 1)
        self.excite = nn.Conv2d(c // reduction, c, 1)

    def forward(self, x):
        h = F.relu(self.bn1(x))
        skip = self.shortcut(h) if hasattr(self, "shortcut") else x
        h = self.conv2(F.relu(self.bn2(self.conv1(h))))
        gate = F.sigmoid(self.excite(F.relu(self.squeeze(F.avg_pool2d(h, h.size(2))))))
        h = h * gate
        h += skip
        return h


class SENet(nn.Module):
    def __init__(self, depths, widths=(16, 16, 24, 32), classes=10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        blocks, c = [], widths[0]
        for i, (w, n) in enumerate(zip(widths, depths)):
            for j in range(n):
                blocks.append(SEPreActBlock(c, w, 2 if i and not j else 1))
                c = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(widths[-1], classes)

    def forward(self, x):
        h = F.avg_pool2d(self.blocks(self.stem(x)), 2)
        return self.fc(h.view(h.size(0), -1))


def senet():
    return SENet([2, 1, 1, 1])
"""

RESNEXT_SOURCE = """
# ResNeXt: bottleneck blocks whose 3x3 convolution is split into `cardinality` groups, the width of
# each group doubled from one stage to the next


class GroupedBlock(nn.Module):
    expansion = 2

    def __init__(self, c_in, cardinality, group_width, stride=1):
        super().__init__()
        inner = cardinality * group_width
        out = self.expansion * inner
        self.body = nn.Sequential(
            nn.Conv2d(c_in, inner, 1, bias=False),
            nn.BatchNorm2d(inner),
            nn.ReLU(),
            nn.Conv2d(inner, inner, 3, stride=stride, padding=1, groups=cardinality, bias=False),
            nn.BatchNorm2d(inner),
            nn.ReLU(),
            nn.Conv2d(inner, out, 1, bias=False),
            nn.BatchNorm2d(out),
        )
        self.skip = nn.Sequential()
        if stride != 1 or c_in != out:
            self.skip = nn.Sequential(
                nn.Conv2d(c_in, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)
            )

    def forward(self, x):
        h = self.body(x)
        h += self.skip(x)
        return F.relu(h)


class ResNeXt(nn.Module):
    def __init__(self, depths, cardinality, group_width, classes=10):
        super().__init__()
        self.cardinality, self.group_width, self.c = cardinality, group_width, 8
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.stages = nn.Sequential(
            *[self.stage(n, 1 if i == 0 else 2) for i, n in enumerate(depths)]
        )
        self.fc = nn.Linear(self.c, classes)

    def stage(self, n, stride):
        blocks = []
        for s in [stride] + [1] * (n - 1):
            blocks.append(GroupedBlock(self.c, self.cardinality, self.group_width, s))
            self.c = GroupedBlock.expansion * self.cardinality * self.group_width
        self.group_width *= 2  # wider groups in the next stage
        return nn.Sequential(*blocks)

    def forward(self, x):
        h = F.avg_pool2d(self.stages(self.stem(x)), 4)
        return self.fc(h.view(h.size(0), -1))


def resnext():
    return ResNeXt([1, 1, 1], cardinality=2, group_width=2)
"""

# a training script in the manner of the repository's main.py; the loaders are lists of batches
MAIN_SOURCE = """


def fit(net, train_batches, test_batches, epochs=2, lr=0.1):
    log = []
    loss_fn = nn.CrossEntropyLoss()
    sgd = optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(sgd, T_max=200)
    best = {"acc": 0.0}

    def one_epoch(epoch):
        print(f"epoch {epoch}")
        net.train()
        running, hits, seen = 0.0, 0, 0
        for step, (images, labels) in enumerate(train_batches):
            sgd.zero_grad()
            logits = net(images)
            loss = loss_fn(logits, labels)
            loss.backward()
            sgd.step()
            running += loss.item()
            _, guess = logits.max(1)
            seen += labels.size(0)
            hits += guess.eq(labels).sum().item()
            log.append([loss.item(), running / (step + 1), 100.0 * hits / seen])

    def check(epoch):
        net.eval()
        total, hits, seen = 0.0, 0, 0
        with torch.no_grad():
            for images, labels in test_batches:
                logits = net(images)
                total += loss_fn(logits, labels).item()
                hits += logits.max(1)[1].eq(labels).sum().item()
                seen += labels.size(0)
                log.append(logits.numpy().copy())
        acc = 100.0 * hits / seen
        if acc > best["acc"]:  # what a checkpoint would save
            best.update(acc=acc, epoch=epoch, weights=net.state_dict())
        log.append([total, acc, best["acc"]])

    for epoch in range(epochs):
        one_epoch(epoch)
        check(epoch)
        cosine.step()
        log.append(sgd.param_groups[0]["lr"])
    log.append({k: t.detach().numpy().copy() for k, t in net.state_dict().items()})
    return log
"""

MAIN_STEP = [
    (
        "            loss.backward()\n            sgd.step()",
        "            grads = loss.backward()\n            sgd.step(grads)",
    )
]

MODELS = {
    "preact_basic": PREACT_SOURCE,
    "preact_bottleneck": PREACT_SOURCE,
    "dual_path": DPN_SOURCE,
    "dla": DLA_SOURCE,
    "pnas_one_branch": PNASNET_SOURCE,
    "pnas_two_branch": PNASNET_SOURCE,
    "regnet_x": REGNET_SOURCE,
    "regnet_y": REGNET_SOURCE,
    "senet": SENET_SOURCE,
    "resnext": RESNEXT_SOURCE,
}


@pytest.mark.parametrize("name", list(MODELS))
def test_pytorch_cifar_style_model_trains_as_in_torch(monkeypatch, capsys, name):
    source = MODELS[name]
    rng = np.random.default_rng(len(name))
    train = [(rng.standard_normal((2, 3, 16, 16)), rng.integers(0, 10, 2)) for _ in range(2)]
    test = [(rng.standard_normal((3, 3, 16, 16)), rng.integers(0, 10, 3))]

    def go(names, lib, models):
        def batches(pairs):
            return [(lib.tensor(x), lib.tensor(y)) for x, y in pairs]

        return names["fit"](models[0], batches(train), batches(test))

    with default_float64():
        records = _run(
            monkeypatch, source + MAIN_SOURCE, MAIN_STEP, 19, lambda names: (names[name](),), go
        )
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)
