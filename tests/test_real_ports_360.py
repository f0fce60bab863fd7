# ruff: noqa: E501  (the programs' optimizer signatures and option lines read best unwrapped)
"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
Gradient Centralization optimizers training a small CIFAR-style ResNet, against torch's run of
the same code from the same weights and images.

- A program written here in the style of Yonghongwei/Gradient-Centralization: the
  centralization ``g.add_(-g.mean(dim=tuple(range(1, len(list(g.size())))), keepdim=True))`` on
  tensors of more than one (or, conv-only, three) dimensions, in place; ``Optimizer``
  subclasses (``required``, defaults carried into every group, ``@torch.no_grad()`` steps): an
  SGD whose ``torch.clone(d_p).detach()`` momentum buffer is centralized in place (the step
  *is* the buffer) and added by ``p.add_(g, alpha=-lr)``; an Adam that centralizes the gradient
  before the moments, with ``torch.zeros_like(p, memory_format=torch.preserve_format)`` state,
  ``addcmul_`` and the decay by ``.add(p.data, alpha=wd)``; a Ranger (rectified Adam with
  lookahead) where ``p.grad.data.float()`` and ``p.data.float()`` of float32 tensors are the
  tensors themselves (so the update lands in the parameter before ``p.data.copy_``), the step
  below the rectification threshold *is* the first moment and the decay and centralization
  edit it in place, a cache keyed by ``step % 10``, ``torch.empty_like`` then ``copy_``,
  ``type_as`` of the state, and ``slow.add_(p.data - slow, alpha=...)`` every ``k`` steps;
- a ResNet of basic blocks (``out += self.shortcut(x)``, an empty ``nn.Sequential()``
  shortcut, ``F.avg_pool2d(out, 4)``), ``StepLR`` stepped per epoch, training and testing
  (``outputs.max(1)``, ``predicted.eq(targets).sum().item()``, ``torch.no_grad()``).

The dataset is a few synthetic 32x32 batches. Compared against torch: the losses, accuracies,
learning rates and weights of every epoch and the log's first lines. The lines a port changes:
the ``import`` lines, and the gradient lines: ``grads = loss.backward()``,
``optimizer.step(grads)``, ``step(self, grads, closure=None)`` and ``p.grad`` read as
``p.grad(grads)``.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

GC_SOURCE = """
import math

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.optim import Optimizer
from torch.optim.lr_scheduler import StepLR
from torch.optim.optimizer import required


def centralize(g, use_gc=True, conv_only=False):
    # subtract from each output unit's slice its mean, in place (4-d only when conv_only)
    if use_gc and len(list(g.size())) > (3 if conv_only else 1):
        g.add_(-g.mean(dim=tuple(range(1, len(list(g.size())))), keepdim=True))
    return g


class SGDGC(Optimizer):
    def __init__(self, params, lr=required, momentum=0.0, weight_decay=0.0, use_gc=False, conv_only=False):
        if lr is not required and not lr >= 0.0:
            raise ValueError(f"bad learning rate {lr}")
        super().__init__(
            params,
            dict(lr=lr, momentum=momentum, weight_decay=weight_decay, use_gc=use_gc, conv_only=conv_only),
        )

    @torch.no_grad()
    def step(self, closure=None):
        for settings in self.param_groups:
            for p in settings["params"]:
                if p.grad is None:
                    continue
                d_p = p.grad
                if settings["weight_decay"]:
                    d_p = d_p.add(p, alpha=settings["weight_decay"])
                if settings["momentum"]:
                    state = self.state[p]
                    if "velocity" not in state:
                        state["velocity"] = torch.clone(d_p).detach()
                    else:
                        state["velocity"].mul_(settings["momentum"]).add_(d_p)
                    d_p = state["velocity"]  # (centralized in place below, buffer and all)
                p.add_(centralize(d_p, settings["use_gc"], settings["conv_only"]), alpha=-settings["lr"])
        return None


class AdamGC(Optimizer):
    # gc_on_grad: centralize the gradient before the moments (the AdamW variant) or the step after
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, use_gc=False,
                 conv_only=False, gc_on_grad=True):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.use_gc, self.conv_only, self.gc_on_grad = use_gc, conv_only, gc_on_grad

    @torch.no_grad()
    def step(self, closure=None):
        for settings in self.param_groups:
            b1, b2 = settings["betas"]
            for p in settings["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["v"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if self.gc_on_grad:
                    grad = centralize(grad, self.use_gc, self.conv_only)
                state["step"] += 1
                state["m"].mul_(b1).add_(grad, alpha=1 - b1)
                state["v"].mul_(b2).addcmul_(grad, grad, value=1 - b2)
                denom = (state["v"].sqrt() / math.sqrt(1 - b2 ** state["step"])).add_(settings["eps"])
                update = (state["m"] / denom).add(p.data, alpha=settings["weight_decay"])
                if not self.gc_on_grad:
                    update = centralize(update, self.use_gc, self.conv_only)
                p.add_(update, alpha=-settings["lr"] / (1 - b1 ** state["step"]))
        return None


class RangerGC(Optimizer):
    # rectified Adam with a lookahead every k steps, the step optionally centralized
    def __init__(self, params, lr=1e-3, alpha=0.5, k=2, threshold=5, betas=(0.95, 0.999), eps=1e-5,
                 weight_decay=0.0, use_gc=False, conv_only=False):
        super().__init__(params, dict(lr=lr, alpha=alpha, k=k, betas=betas, eps=eps, weight_decay=weight_decay))
        self.alpha, self.threshold = alpha, threshold
        self.use_gc, self.conv_only = use_gc, conv_only
        self.cache = [[None, None, None] for _ in range(10)]  # step -> (n_sma, step size)
        print(f"Ranger with gradient centralization: {use_gc} (conv only: {conv_only})")

    def step(self, closure=None):
        for settings in self.param_groups:
            b1, b2 = settings["betas"]
            for p in settings["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data.float()
                weights = p.data.float()  # (float32 already: the parameter's own storage)
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(weights)
                    state["v"] = torch.zeros_like(weights)
                    state["slow"] = torch.empty_like(p.data)
                    state["slow"].copy_(p.data)
                else:
                    state["m"] = state["m"].type_as(weights)
                    state["v"] = state["v"].type_as(weights)
                m, v = state["m"], state["v"]
                state["step"] += 1
                v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
                m.mul_(b1).add_(grad, alpha=1 - b1)
                entry = self.cache[int(state["step"] % 10)]
                if entry[0] == state["step"]:
                    n_sma, size = entry[1], entry[2]
                else:
                    b2_t = b2 ** state["step"]
                    n_max = 2 / (1 - b2) - 1
                    n_sma = n_max - 2 * state["step"] * b2_t / (1 - b2_t)
                    if n_sma > self.threshold:
                        rect = (n_sma - 4) * (n_sma - 2) * n_max / ((n_max - 4) * n_sma * (n_max - 2))
                        size = math.sqrt((1 - b2_t) * rect) / (1 - b1 ** state["step"])
                    else:
                        size = 1.0 / (1 - b1 ** state["step"])
                    entry[:] = [state["step"], n_sma, size]
                # below the threshold the step is the first moment itself, edited in place
                direction = m / v.sqrt().add_(settings["eps"]) if n_sma > self.threshold else m
                if settings["weight_decay"]:
                    direction.add_(weights, alpha=settings["weight_decay"])
                direction = centralize(direction, self.use_gc, self.conv_only)
                weights.add_(direction, alpha=-size * settings["lr"])
                p.data.copy_(weights)
                if state["step"] % settings["k"] == 0:
                    slow = state["slow"]
                    slow.add_(p.data - slow, alpha=self.alpha)
                    p.data.copy_(slow)
        return None


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        project = stride != 1 or cin != cout  # else the shortcut is an empty Sequential
        layers = [nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)]
        self.shortcut = nn.Sequential(*(layers if project else []))

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        out += self.shortcut(x)
        return F.relu(out)


class SmallResNet(nn.Module):
    def __init__(self, widths=(4, 8, 16, 32), classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]))
        stages, cin = [], widths[0]
        for i, w in enumerate(widths):
            stages.append(Block(cin, w, 1 if i == 0 else 2))
            cin = w
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(widths[-1], classes)

    def forward(self, x):
        out = self.stages(F.relu(self.stem(x)))
        return self.fc(F.avg_pool2d(out, 4).view(x.size(0), -1))


net = SmallResNet()
initialize(net)
loss_fn = nn.CrossEntropyLoss()
print("optimizer:", args.alg)
if args.alg == "sgdGCC":
    optimizer = SGDGC(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.wd, use_gc=True, conv_only=True)
elif args.alg == "adamWGC":
    optimizer = AdamGC(net.parameters(), lr=args.lr * 0.01, weight_decay=args.wd, use_gc=True)
else:
    optimizer = RangerGC(net.parameters(), lr=args.lr * 0.01, weight_decay=args.wd, use_gc=True)
schedule = StepLR(optimizer, step_size=2, gamma=0.1)


def run_epoch(loader, training):
    net.train(training)
    total_loss, correct, seen = 0.0, 0, 0
    for inputs, targets in loader:
        if training:
            optimizer.zero_grad()
            outputs = net(inputs)
            loss = loss_fn(outputs, targets)
            loss.backward()
            optimizer.step()
            record.append(loss.item())
        else:
            with torch.no_grad():
                outputs = net(inputs)
                loss = loss_fn(outputs, targets)
        total_loss += loss.item()
        _, predicted = outputs.max(1)
        seen += targets.size(0)
        correct += int(predicted.eq(targets).sum().item())
    print("%s: loss %.4f acc %.4f" % ("train" if training else "test", total_loss / len(loader), correct / seen))
    return total_loss, 100.0 * correct / seen


for epoch in range(args.epochs):
    print("epoch", epoch)
    _, train_acc = run_epoch(trainloader, True)
    schedule.step()
    test_loss, test_acc = run_epoch(testloader, False)
    record.append(test_loss)
    record.append([train_acc, test_acc, optimizer.param_groups[0]["lr"]])
    record.append(params_of(net))
"""

GC_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    (
        "import torch.nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd.nn as nn\nfrom retrograd.nn import functional as F\n",
    ),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("if p.grad is None:", "if p.grad(grads) is None:"),
    ("d_p = p.grad\n", "d_p = p.grad(grads)\n"),
    ("grad = p.grad\n", "grad = p.grad(grads)\n"),
    ("grad = p.grad.data.float()", "grad = p.grad(grads).data.float()"),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


def _loader(rng, batches, size):
    return [
        (
            rng.standard_normal((size, 3, 32, 32)).astype(np.float32),
            rng.integers(0, 10, size),
        )
        for _ in range(batches)
    ]


@pytest.mark.parametrize("alg", ["sgdGCC", "adamWGC", "rangerGC"])
def test_gradient_centralization_optimizers_train_the_cifar_resnet_as_torch(capsys, alg):
    # torch's initial weights, which the port loads; the seed keeps every ReLU input of the
    # training steps at least 5e-6 from the kink, where float rounding could flip a unit
    torch.manual_seed(361)
    rng = np.random.default_rng(361)
    train_batches, test_batches = _loader(rng, 2, 3), _loader(rng, 1, 3)
    args = SimpleNamespace(model="r18", alg=alg, lr=0.1, wd=5e-4, epochs=3)
    initialize, records, logs = initializer(), [], []
    for lib in (torch, rg):
        record = []
        text = GC_SOURCE if lib is torch else port(GC_SOURCE, GC_STEPS)
        text = text.replace("from torch.", "from retrograd.") if lib is rg else text
        loaders = {
            name: [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
            for name, batches in (("trainloader", train_batches), ("testloader", test_batches))
        }
        run_source(
            text,
            lib,
            record=record,
            args=args,
            initialize=initialize,
            params_of=params_of,
            **loaders,
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert len(theirs) == 3 * (2 + 1 + 2)
    assert theirs[-2][2] == pytest.approx(
        0.1 * (0.01 if alg.startswith(("adam", "ranger")) else 1) * 0.1
    )
    assert logs[1].count("epoch ") == 3 and logs[1].splitlines()[:2] == logs[0].splitlines()[:2]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
