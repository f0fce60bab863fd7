"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of timgaripov/swa (the original Stochastic Weight Averaging code: its ``utils.py``, a
pre-activation ResNet and ``train.py``), trained against torch's run of the same program from
the same weights and images.

Its surface: ``torch.save`` of a checkpoint dict (epoch, both state dicts, ``swa_n``, the
optimizer's state) and a second run resuming from it (``torch.load``, ``load_state_dict`` of
the model, the SWA model and the optimizer); training and evaluation over
``torch.autograd.Variable`` inputs with ``output.data.max(1, keepdim=True)[1]`` and
``pred.eq(target.data.view_as(pred))``; the running average by ``p.data *= (1.0 - alpha)``
then ``p.data += q.data * alpha``; the batch-norm refresh: ``model.apply`` of functions
testing ``issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm)``, running
statistics replaced by ``torch.zeros_like``/``torch.ones_like``, each ``momentum`` set to
``b / (n + b)`` for a cumulative average over one pass and restored from a dict keyed by
module; a pre-activation ResNet (``out += residual``, a 1x1 downsample, ``AvgPool2d(8)``)
initialised by ``m.weight.data.normal_(0, math.sqrt(2. / n))``; a piecewise-linear learning
rate toward ``swa_lr`` written into ``param_groups``, SGD with momentum and weight decay, SWA
collection from ``swa_start``, the refresh then evaluation of the averaged model, and a table
of each epoch printed through ``tabulate``.

What stands in: CIFAR-10 by 16x16 random images with random labels (no shuffling: each
library's sampler would draw its own order) and tabulate by a small formatter. The port
changes the import lines and the gradient lines; ``initialize`` gives it torch's initial
weights.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    ported_imports,
    run_source,
)

SWA_SOURCE = """
import math
import os

import torch
from torch import nn
from torch.autograd import Variable
from torch.nn import functional as F


def set_lr(opt, lr):
    for group in opt.param_groups:
        group["lr"] = lr


def checkpoint(folder, epoch, **state):
    torch.save(dict(epoch=epoch, **state), os.path.join(folder, "checkpoint-%d.pt" % epoch))


def run(loader, model, opt=None):
    total, right, seen = 0.0, 0, 0
    model.train(opt is not None)
    for images, labels in loader:
        images, labels = Variable(images), Variable(labels)
        out = model(images)
        loss = F.cross_entropy(out, labels)
        if opt is not None:
            opt.zero_grad()
            loss.backward()
            opt.step()
        total += loss.data.item() * images.size(0)
        guess = out.data.max(1, keepdim=True)[1]
        right += guess.eq(labels.data.view_as(guess)).sum().item()
        seen += images.size(0)
    return {"loss": total / seen, "accuracy": 100.0 * right / seen}


def average_into(avg, new, alpha):
    for p, q in zip(avg.parameters(), new.parameters()):
        p.data *= 1.0 - alpha
        p.data += q.data * alpha


def is_bn(module):
    return issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm)


def refresh_bn(loader, model):
    # one pass of cumulative averages over the training set, as if from scratch
    momenta = {}

    def reset(m):
        if is_bn(m):
            m.running_mean = torch.zeros_like(m.running_mean)
            m.running_var = torch.ones_like(m.running_var)
            momenta[m] = m.momentum

    model.apply(reset)
    if not momenta:
        return
    model.train()
    seen = 0
    for images, _ in loader:
        b = images.size(0)
        model.apply(lambda m: setattr(m, "momentum", b / (seen + b)) if is_bn(m) else None)
        model(Variable(images))
        seen += b
    model.apply(lambda m: setattr(m, "momentum", momenta[m]) if is_bn(m) else None)


class PreActBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(cin), nn.BatchNorm2d(cout)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False))

    def forward(self, x):
        residual = x if self.down is None else self.down(x)
        out = self.conv1(F.relu(self.bn1(x)))
        out = self.conv2(F.relu(self.bn2(out)))
        out += residual
        return out


class SmallPreResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.blocks = nn.Sequential(PreActBlock(8, 8, 1), PreActBlock(8, 16, 2))
        self.bn = nn.BatchNorm2d(16)
        self.pool = nn.AvgPool2d(8)
        self.fc = nn.Linear(16, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2.0 / fan))
            elif is_bn(m):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def forward(self, x):
        x = F.relu(self.bn(self.blocks(self.stem(x))))
        return self.fc(self.pool(x).view(x.size(0), -1))


torch.manual_seed(args.seed)
train = torch.utils.data.TensorDataset(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))
test = torch.utils.data.TensorDataset(torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)))
train_loader = torch.utils.data.DataLoader(train, batch_size=2, shuffle=False)
test_loader = torch.utils.data.DataLoader(test, batch_size=2, shuffle=False)

model, swa_model = SmallPreResNet(), SmallPreResNet()
initialize(model)
initialize(swa_model)
swa_n = 0
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
first = 0
if args.resume is not None:
    print("resuming from %s" % os.path.basename(args.resume))
    saved = torch.load(args.resume)
    first = saved["epoch"]
    model.load_state_dict(saved["model"])
    swa_model.load_state_dict(saved["swa_model"])
    opt.load_state_dict(saved["optimizer"])
    swa_n = saved["swa_n"]


def lr_at(epoch, start=2, base=0.1, swa_lr=0.05):
    t = epoch / start
    if t <= 0.5:
        return base
    if t <= 0.9:
        return base * (1.0 - (1.0 - swa_lr / base) * (t - 0.5) / 0.4)
    return swa_lr


headers = ["ep", "lr", "tr_loss", "tr_acc", "swa_loss", "swa_acc"]
for epoch in range(first, args.epochs):
    lr = lr_at(epoch)
    set_lr(opt, lr)
    fit = run(train_loader, model, opt)
    swa = {"loss": None, "accuracy": None}
    if epoch + 1 >= 2:
        average_into(swa_model, model, 1.0 / (swa_n + 1))
        swa_n += 1
        refresh_bn(train_loader, swa_model)
        swa = run(test_loader, swa_model)
    if (epoch + 1) % 2 == 0 or epoch + 1 == args.epochs:
        checkpoint(args.dir, epoch + 1, model=model.state_dict(), swa_model=swa_model.state_dict(),
                   swa_n=swa_n, optimizer=opt.state_dict())
    row = [epoch + 1, lr, fit["loss"], fit["accuracy"], swa["loss"], swa["accuracy"]]
    record.append([v for v in row if v is not None])
    averaged = swa_model.state_dict()
    record.append({k: v.detach().numpy().copy() for k, v in averaged.items()})
    lines = tabulate.tabulate([row], headers, tablefmt="simple", floatfmt="8.4f").split("\\n")
    print("\\n".join(lines if epoch == first else lines[2:]))
"""

SWA_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
]


class _Tabulate:
    """tabulate's ``tabulate(rows, headers, tablefmt='simple', floatfmt=...)``: a header line, a
    rule and one line per row (``None`` printed empty)."""

    @staticmethod
    def tabulate(rows, headers, tablefmt="simple", floatfmt="g"):
        def cell(v):
            return "" if v is None else format(v, floatfmt) if isinstance(v, float) else str(v)

        lines = [" ".join(f"{h:>10}" for h in headers), " ".join("-" * 10 for _ in headers)]
        lines += [" ".join(f"{cell(v):>10}" for v in row) for row in rows]
        return "\n".join(lines)


def test_swa_training_with_bn_refresh_and_resume_matches_torch(capsys, tmp_path):
    """Three epochs with checkpoints at two and three, then a run resumed from
    ``checkpoint-2.pt`` that trains epoch three again: the records (the table rows, the SWA
    model's state after every epoch) agree with torch's."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        text = SWA_SOURCE if lib is torch else ported_imports(port(SWA_SOURCE, SWA_STEPS))
        record = []
        folder = tmp_path / lib.__name__
        folder.mkdir()
        for resume in (None, str(folder / "checkpoint-2.pt")):
            with SharedDraws(lib, 43001):  # (the same images in both runs of a library)
                args = argparse.Namespace(dir=str(folder), epochs=3, seed=1, resume=resume)
                run_source(
                    text, lib, args=args, record=record, initialize=initialize, tabulate=_Tabulate
                )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert sorted(p.name for p in (tmp_path / "torch").iterdir()) == [
        "checkpoint-2.pt", "checkpoint-3.pt",
    ]  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "retrograd").iterdir()) == sorted(
        p.name for p in (tmp_path / "torch").iterdir()
    )
    assert "resuming from checkpoint-2.pt" in logs[0] and logs[0] == logs[1]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
