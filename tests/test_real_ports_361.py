# ruff: noqa: E501  (the program's loss and accuracy lines read best unwrapped)
"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
knowledge distillation, a small CIFAR ResNet student taught by a saved teacher, against torch's
run of the same code from the same weights and images.

- A program written here in the style of HobbitLong/RepDistiller: a soft-target KL loss
  ``F.kl_div(log_p, q, size_average=False) * T**2 / batch`` (torch's deprecated
  ``size_average`` form, a sum); a hint loss (``nn.MSELoss``) through a regressor whose
  ``kernel_size=(1 + s_H - t_H, 1 + s_W - t_W)`` is a tuple; attention transfer
  (``F.normalize(f.pow(p).mean(1).view(n, -1))``, ``F.adaptive_avg_pool2d`` where the sizes
  differ, the teacher's stem being unpadded) summed by ``sum(losses)``; ResNets whose stages'
  last blocks return ``(out, preact)`` through ``nn.Sequential``, the features list of
  ``is_feat=True``, ``nn.ReLU(inplace=True)``, ``nn.init.kaiming_normal_(mode='fan_out')``;
  an average meter, top-k accuracy (``output.topk(k, 1, True, True)``, ``pred.t()``,
  ``pred.eq(target.view(1, -1).expand_as(pred))``, ``hits[:k].contiguous().view(-1).float()
  .sum(0, keepdim=True)``, ``mul_(100.0 / batch)``) and a step schedule by ``np.sum(epoch >
  np.asarray(decay_epochs))``; a distillation epoch (every module ``train()``, the teacher
  ``eval()``, its features under ``torch.no_grad()`` and ``[f.detach() for f in feats]``,
  ``loss = gamma * ce + alpha * kl + beta * extra`` with ``extra = 0`` for plain KD) and an
  evaluation; the teacher saved by ``torch.save({'model': ...})``, found by its path and
  loaded by ``torch.load(path)['model']``, shapes probed by ``torch.randn(2, 3, 32, 32)`` in
  ``eval()``, ``nn.ModuleList`` lists of modules, trainables and losses, ``optim.SGD(
  trainable.parameters(), ...)`` made before the teacher joins the module list.

The dataset is a few synthetic CIFAR-shaped batches yielding ``(input, target, index)``; the
logger records what it is given. Compared against torch: the teacher's accuracy, each epoch's
accuracies, losses, learning rate and trained weights, and the logged values. The lines a port
changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

REPDISTILLER_SOURCE = """
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F


class SoftTargetKL(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.T = temperature

    def forward(self, student_logits, teacher_logits):
        log_p = F.log_softmax(student_logits / self.T, dim=1)
        q = F.softmax(teacher_logits / self.T, dim=1)
        # (size_average=False: the deprecated spelling of a summed loss)
        return F.kl_div(log_p, q, size_average=False) * self.T**2 / student_logits.shape[0]


class Regressor(nn.Module):
    # maps a student feature map onto a (smaller or equal) teacher one
    def __init__(self, s_shape, t_shape):
        super().__init__()
        (_, s_c, s_h, s_w), (_, t_c, t_h, t_w) = s_shape, t_shape
        self.conv = nn.Conv2d(s_c, t_c, kernel_size=(1 + s_h - t_h, 1 + s_w - t_w))
        self.bn = nn.BatchNorm2d(t_c)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class AttentionTransfer(nn.Module):
    def __init__(self, p=2):
        super().__init__()
        self.p = p

    def spatial(self, f):
        flat = f.pow(self.p).mean(1).view(f.size(0), -1)
        return F.normalize(flat)

    def forward(self, student_feats, teacher_feats):
        losses = []
        for f_s, f_t in zip(student_feats, teacher_feats):
            if f_s.shape[2] > f_t.shape[2]:
                f_s = F.adaptive_avg_pool2d(f_s, (f_t.shape[2], f_t.shape[3]))
            losses.append((self.spatial(f_s) - self.spatial(f_t)).pow(2).mean())
        return losses


class Block(nn.Module):
    def __init__(self, cin, cout, stride, last):
        super().__init__()
        self.last = last
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.act = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.bn2(self.conv2(self.act(self.bn1(self.conv1(x)))))
        out = out + (x if self.down is None else self.down(x))
        pre = out
        out = F.relu(out)
        return (out, pre) if self.last else out


class CifarResNet(nn.Module):
    # each stage's last block also returns its pre-activation
    def __init__(self, widths, blocks, num_classes=10, stem_padding=1):
        super().__init__()
        self.stem = nn.Conv2d(3, widths[0], 3, padding=stem_padding, bias=False)
        self.bn = nn.BatchNorm2d(widths[0])
        self.act = nn.ReLU(inplace=True)
        stages, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers = [Block(cin if j == 0 else w, w, 2 if i and j == 0 else 1, j == blocks - 1)
                      for j in range(blocks)]
            stages.append(nn.Sequential(*layers))
            cin = w
        self.stages = nn.ModuleList(stages)
        self.fc = nn.Linear(widths[-1], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, images, is_feat=False, preact=False):
        x = self.act(self.bn(self.stem(images)))
        feats = [x]
        for stage in self.stages:
            x, pre = stage(x)
            feats.append(pre if preact else x)
        x = F.avg_pool2d(x, x.size(3)).view(x.size(0), -1)
        feats.append(x)
        out = self.fc(x)
        return (feats, out) if is_feat else out


models = {
    "resnet8": lambda num_classes: CifarResNet((4, 4, 8), 1, num_classes),
    "resnet14": lambda num_classes: CifarResNet((4, 8, 16), 2, num_classes, stem_padding=0),
}


class Meter:
    def __init__(self):
        self.total, self.count, self.avg = 0.0, 0, 0.0

    def update(self, value, n=1):
        self.total += value * n
        self.count += n
        self.avg = self.total / self.count


def topk_accuracy(output, target, ks=(1,)):
    with torch.no_grad():
        best = max(ks)
        _, pred = output.topk(best, 1, True, True)
        pred = pred.t()
        hits = pred.eq(target.view(1, -1).expand_as(pred))
        return [hits[:k].contiguous().view(-1).float().sum(0, keepdim=True).mul_(100.0 / target.size(0))
                for k in ks]


def set_learning_rate(epoch, opt, optimizer):
    decays = np.sum(epoch > np.asarray(opt.lr_decay_epochs))
    for group in optimizer.param_groups:
        group["lr"] = opt.learning_rate * opt.lr_decay_rate**decays


def distill_epoch(loader, modules, losses_fns, optimizer, opt):
    for m in modules:
        m.train()
    modules[-1].eval()  # the teacher
    student, teacher = modules[0], modules[-1]
    ce, kl, extra = losses_fns
    seen, top1 = Meter(), Meter()
    for images, labels, _ in loader:
        feats_s, logits_s = student(images.float(), is_feat=True)
        with torch.no_grad():
            feats_t, logits_t = teacher(images.float(), is_feat=True)
            feats_t = [f.detach() for f in feats_t]
        if opt.distill == "kd":
            distill_term = 0
        elif opt.distill == "hint":
            distill_term = extra(modules[1](feats_s[opt.hint_layer]), feats_t[opt.hint_layer])
        else:
            distill_term = sum(extra(feats_s[1:-1], feats_t[1:-1]))
        loss = opt.gamma * ce(logits_s, labels) + opt.alpha * kl(logits_s, logits_t) + opt.beta * distill_term
        seen.update(loss.item(), images.size(0))
        top1.update(topk_accuracy(logits_s, labels)[0], images.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"train: loss {seen.avg:.4f} top1 {float(top1.avg):.2f}")
    return top1.avg, seen.avg


def evaluate(loader, model, ce):
    model.eval()
    loss_m, top1, top5 = Meter(), Meter(), Meter()
    with torch.no_grad():
        for images, labels in loader:
            output = model(images.float())
            a1, a5 = topk_accuracy(output, labels, ks=(1, 5))
            loss_m.update(ce(output, labels).item(), images.size(0))
            top1.update(a1[0], images.size(0))
            top5.update(a5[0], images.size(0))
    return top1.avg, top5.avg, loss_m.avg


def teacher_from(path, classes):
    arch = path.split("/")[-2].split("_")[0]  # .../<arch>_<run>/ckpt.pth
    net = models[arch](num_classes=classes)
    net.load_state_dict(torch.load(path)["model"])
    return net


teacher = models["resnet14"](num_classes=10)
initialize(teacher)
torch.save({"epoch": 100, "model": teacher.state_dict()}, teacher_path)

opt = parse_option()
teacher = teacher_from(opt.path_t, 10)
student = models[opt.model_s](num_classes=10)
initialize(student)
probe = torch.randn(2, 3, 32, 32)  # (shapes only: each library draws its own)
teacher.eval()
student.eval()
shapes_t = [f.shape for f in teacher(probe, is_feat=True)[0]]
shapes_s = [f.shape for f in student(probe, is_feat=True)[0]]
modules, trainable = nn.ModuleList([student]), nn.ModuleList([student])
ce = nn.CrossEntropyLoss()
if opt.distill == "hint":
    extra = nn.MSELoss()
    regressor = Regressor(shapes_s[opt.hint_layer], shapes_t[opt.hint_layer])
    initialize(regressor)
    modules.append(regressor)
    trainable.append(regressor)
elif opt.distill == "attention":
    extra = AttentionTransfer()
else:
    extra = SoftTargetKL(opt.kd_T)
losses_fns = nn.ModuleList([ce, SoftTargetKL(opt.kd_T), extra])
optimizer = optim.SGD(
    trainable.parameters(), lr=opt.learning_rate, momentum=opt.momentum, weight_decay=opt.weight_decay
)
modules.append(teacher)  # after the optimizer: the teacher is not trained
record.append(float(evaluate(val_loader, teacher, ce)[0]))
for epoch in range(1, 1 + opt.epochs):
    set_learning_rate(epoch, opt, optimizer)
    train_acc, train_loss = distill_epoch(train_loader, modules, losses_fns, optimizer, opt)
    logger.log_value("train_acc", train_acc, epoch)
    logger.log_value("train_loss", train_loss, epoch)
    test_acc, test_top5, test_loss = evaluate(val_loader, student, ce)
    logger.log_value("test_acc", test_acc, epoch)
    logger.log_value("test_loss", test_loss, epoch)
    record.append([float(train_acc), train_loss, float(test_acc), float(test_top5), test_loss,
                   optimizer.param_groups[0]["lr"]])
    record.append(params_of(*trainable))
"""

REPDISTILLER_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "import torch.nn as nn\nimport torch.optim as optim\nfrom torch.nn import functional as F\n",
        "import retrograd.nn as nn\nimport retrograd.optim as optim\n"
        "from retrograd.nn import functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class Logger:
    def __init__(self):
        self.values = []

    def log_value(self, name, value, step):
        self.values.append((name, float(value), step))


@pytest.mark.parametrize("distill", ["kd", "hint", "attention"])
def test_repdistiller_trains_a_student_as_torch(tmp_path, capsys, distill):
    torch.manual_seed(361)  # torch's initial weights, which the port loads
    rng = np.random.default_rng(361)
    train_batches = [
        (
            rng.standard_normal((4, 3, 32, 32)).astype(np.float32),
            rng.integers(0, 10, 4),
            np.arange(4 * i, 4 * i + 4),
        )
        for i in range(2)
    ]
    val_batches = [(rng.standard_normal((4, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, 4))]
    opt = SimpleNamespace(
        distill=distill,
        model_s="resnet8",
        kd_T=4,
        gamma=0.1,
        alpha=0.9,
        beta=0.0 if distill == "kd" else 100.0,
        hint_layer=2,
        learning_rate=0.05,
        momentum=0.9,
        weight_decay=5e-4,
        lr_decay_epochs=[1],
        lr_decay_rate=0.1,
        epochs=2,
        print_freq=100,
    )
    initialize, records, loggers = initializer(), [], []
    for lib in (torch, rg):
        folder = tmp_path / lib.__name__ / "resnet14_run1"
        folder.mkdir(parents=True)
        opt.path_t = str(folder / "ckpt.pth")
        record, logger = [], Logger()
        text = (
            REPDISTILLER_SOURCE if lib is torch else port(REPDISTILLER_SOURCE, REPDISTILLER_STEPS)
        )
        run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            params_of=params_of,
            parse_option=lambda: opt,
            logger=logger,
            teacher_path=opt.path_t,
            train_loader=[tuple(lib.tensor(a) for a in batch) for batch in train_batches],
            val_loader=[tuple(lib.tensor(a) for a in batch) for batch in val_batches],
        )
        records.append(record)
        loggers.append(logger.values)
        capsys.readouterr()
    theirs, ours = records
    assert len(theirs) == 1 + 2 * 2
    assert theirs[-2][-1] == pytest.approx(0.005)
    assert [v[0::2] for v in loggers[1]] == [v[0::2] for v in loggers[0]]
    np.testing.assert_allclose(
        [v[1] for v in loggers[1]], [v[1] for v in loggers[0]], rtol=1e-4, atol=1e-5
    )
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
