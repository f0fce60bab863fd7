"""A program written here in the style of megvii-research/mdistiller (knowledge distillers over
a common base, a trainer with meters, logs and checkpoints, resumable), run under torch and,
ported, under retrograd from the same weights and images (the harness:
``tests/real_ports.py``).

What it exercises: a distiller base whose ``train(mode)`` keeps the teacher in ``eval()``,
whose ``forward(**kwargs)`` dispatches on ``self.training``, with ``get_learnable_parameters``;
four losses: KD (``F.kl_div(log_softmax(s / T), softmax(t / T), reduction="none").sum(1)
.mean()`` times ``T**2``), DKD (target and non-target masks by ``torch.zeros_like(logits)
.scatter_(1, target.unsqueeze(1), 1).bool()``, the binary split by ``sum(dim=1,
keepdims=True)`` (NumPy's keyword), ``F.kl_div(..., size_average=False)``, ``logits / T -
1000.0 * gt_mask``, a warmup ``min(kwargs["epoch"] / warmup, 1.0)``), RKD (distances by ``e @
e.t()``, ``clamp(min=eps)``, ``d[range(n), range(n)] = 0``, ``d[d > 0].mean()``, angles by
``F.normalize`` and ``torch.bmm``, ``F.smooth_l1_loss``) and PKT (``f[f != f] = 0``, cosine
similarities to probabilities, the KL by hand); meters fed 0-d tensors; a top-k accuracy by
``output.topk(k, 1, True, True)``, ``pred.eq(target.reshape(1, -1).expand_as(pred))`` and
``mul_(100.0 / batch)``; validation under ``torch.no_grad()``; step decay by ``np.sum(epoch >
np.asarray(stages))``; checkpoints through open file objects (``torch.save(obj, f)``,
``torch.load(f, map_location="cpu")``); SGD over ``distiller.module.get_learnable_parameters()``
of an ``nn.DataParallel`` (on the CPU); ``sum([l.mean() for l in losses.values()])`` and
``loss.cpu().detach().numpy().mean()``; ``"{:.2f}".format`` of tensors into ``worklog.txt``;
``latest``/``best``/``epoch_N`` checkpoints of the distiller and of the student, and a resumed
run loading ``latest`` into the distiller and the optimizer.

What stands in: CIFAR-100 by random 8x8 images with ten random labels (and each sample's
index), the configs by namespaces, tensorboardX's ``SummaryWriter`` by a recorder of
``add_scalar``. The student and teacher are small CNNs returning ``(logits, {"pooled_feat":
...})``. The port changes the import lines and the gradient lines; ``initialize`` gives it
torch's initial weights.
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

DISTILL_SOURCE = """
import collections
import os

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F


class DistillerBase(nn.Module):
    def __init__(self, student: nn.Module, teacher: nn.Module):
        super().__init__()
        self.student, self.teacher = student, teacher

    def train(self, mode=True):
        self.training = mode
        self.student.train(mode)
        self.teacher.eval()  # the teacher never trains
        return self

    def get_learnable_parameters(self) -> list:
        return list(self.student.parameters())

    def forward(self, **inputs):
        if self.training:
            return self.forward_train(**inputs)
        return self.student(inputs["image"])[0]

    def both(self, image):
        logits_s, feats_s = self.student(image)
        with torch.no_grad():
            logits_t, feats_t = self.teacher(image)
        return logits_s, feats_s, logits_t, feats_t


def soft_kl(s, t, T):
    log_p, q = F.log_softmax(s / T, dim=1), F.softmax(t / T, dim=1)
    per_sample = F.kl_div(log_p, q, reduction="none").sum(1)
    return per_sample.mean() * T**2


class KD(DistillerBase):
    def __init__(self, student: nn.Module, teacher: nn.Module, cfg):
        super().__init__(student, teacher)
        self.T = cfg.KD.TEMPERATURE
        self.ce_w, self.kd_w = cfg.KD.LOSS.CE_WEIGHT, cfg.KD.LOSS.KD_WEIGHT

    def forward_train(self, image, target, **extra):
        s, _, t, _ = self.both(image)
        kd = self.kd_w * soft_kl(s, t, self.T)
        return s, {"ce": self.ce_w * F.cross_entropy(s, target), "kd": kd}


def split_mass(p, first, second):
    # probability of the target class vs the rest, as a 2-way distribution
    on, off = (p * first).sum(dim=1, keepdims=True), (p * second).sum(1, keepdims=True)
    return torch.cat([on, off], dim=1)


def decoupled_kd(s, t, target, alpha, beta, T):
    is_gt = torch.zeros_like(s).scatter_(1, target.unsqueeze(1), 1).bool()
    not_gt = torch.ones_like(s).scatter_(1, target.unsqueeze(1), 0).bool()
    p_s, p_t = F.softmax(s / T, dim=1), F.softmax(t / T, dim=1)
    b_s, b_t = split_mass(p_s, is_gt, not_gt), split_mass(p_t, is_gt, not_gt)
    tckd = F.kl_div(torch.log(b_s), b_t, size_average=False) * T**2 / target.shape[0]
    rest_t = F.softmax(t / T - 1000.0 * is_gt, dim=1)
    rest_s = F.log_softmax(s / T - 1000.0 * is_gt, dim=1)
    nckd = F.kl_div(rest_s, rest_t, size_average=False) * T**2 / target.shape[0]
    return alpha * tckd + beta * nckd


class DKD(DistillerBase):
    def __init__(self, student: nn.Module, teacher: nn.Module, cfg):
        super().__init__(student, teacher)
        self.cfg = cfg.DKD

    def forward_train(self, image, target, **extra):
        s, _, t, _ = self.both(image)
        ramp = min(extra["epoch"] / self.cfg.WARMUP, 1.0)
        kd = ramp * decoupled_kd(s, t, target, self.cfg.ALPHA, self.cfg.BETA, self.cfg.T)
        return s, {"ce": self.cfg.CE_WEIGHT * F.cross_entropy(s, target), "dkd": kd}


def pairwise_dist(e, squared, eps):
    sq = e.pow(2).sum(dim=1)
    d = (sq.unsqueeze(1) + sq.unsqueeze(0) - 2 * (e @ e.t())).clamp(min=eps)
    if not squared:
        d = d.sqrt()
    d = d.clone()
    d[range(len(e)), range(len(e))] = 0
    return d


def relational_kd(f_s, f_t, squared, eps, w_dist, w_angle):
    s, t = f_s.view(f_s.shape[0], -1), f_t.view(f_t.shape[0], -1)
    with torch.no_grad():
        d_t = pairwise_dist(t, squared, eps)
        d_t = d_t / d_t[d_t > 0].mean()
    d_s = pairwise_dist(s, squared, eps)
    d_s = d_s / d_s[d_s > 0].mean()
    dist_term = F.smooth_l1_loss(d_s, d_t)
    with torch.no_grad():
        v_t = F.normalize(t.unsqueeze(0) - t.unsqueeze(1), p=2, dim=2)
        angle_t = torch.bmm(v_t, v_t.transpose(1, 2)).view(-1)
    v_s = F.normalize(s.unsqueeze(0) - s.unsqueeze(1), p=2, dim=2)
    angle_s = torch.bmm(v_s, v_s.transpose(1, 2)).view(-1)
    return w_dist * dist_term + w_angle * F.smooth_l1_loss(angle_s, angle_t)


class RKD(DistillerBase):
    def __init__(self, student: nn.Module, teacher: nn.Module, cfg):
        super().__init__(student, teacher)
        self.cfg = cfg.RKD

    def forward_train(self, image, target, **extra):
        s, fs, _, ft = self.both(image)
        c = self.cfg
        feat = relational_kd(fs["pooled_feat"], ft["pooled_feat"], c.PDIST.SQUARED, c.PDIST.EPSILON,
                             c.DISTANCE_WEIGHT, c.ANGLE_WEIGHT)
        ce = c.LOSS.CE_WEIGHT * F.cross_entropy(s, target)
        return s, {"ce": ce, "rkd": c.LOSS.FEAT_WEIGHT * feat}


def prob_transfer(f_s, f_t, eps=1e-7):
    def cond_probs(f):
        f = f / (torch.sqrt(torch.sum(f**2, dim=1, keepdim=True)) + eps)
        f[f != f] = 0  # zero rows give NaN directions
        sim = (f @ f.transpose(0, 1) + 1.0) / 2.0
        return sim / torch.sum(sim, dim=1, keepdim=True)

    p_s, p_t = cond_probs(f_s), cond_probs(f_t)
    return torch.mean(p_t * torch.log((p_t + eps) / (p_s + eps)))


class PKT(DistillerBase):
    def __init__(self, student: nn.Module, teacher: nn.Module, cfg):
        super().__init__(student, teacher)
        self.cfg = cfg.PKT.LOSS

    def forward_train(self, image, target, **extra):
        s, fs, _, ft = self.both(image)
        feat = self.cfg.FEAT_WEIGHT * prob_transfer(fs["pooled_feat"], ft["pooled_feat"])
        return s, {"ce": self.cfg.CE_WEIGHT * F.cross_entropy(s, target), "pkt": feat}


class Meter:
    def __init__(self):
        self.total, self.count, self.avg = 0, 0, 0

    def update(self, value, n=1):
        self.total += value * n
        self.count += n
        self.avg = self.total / self.count


def topk_acc(output, target, ks=(1,)):
    with torch.no_grad():
        _, pred = output.topk(max(ks), 1, True, True)
        pred = pred.t()
        hits = pred.eq(target.reshape(1, -1).expand_as(pred))
        scale = 100.0 / target.size(0)
        return [hits[:k].reshape(-1).float().sum(0, keepdim=True).mul_(scale) for k in ks]


def evaluate(loader, distiller):
    top1, top5, losses = Meter(), Meter(), Meter()
    distiller.eval()
    with torch.no_grad():
        for image, target in loader:
            out = distiller(image=image.float())
            a1, a5 = topk_acc(out, target, ks=(1, 5))
            losses.update(F.cross_entropy(out, target), image.size(0))
            top1.update(a1[0], image.size(0))
            top5.update(a5[0], image.size(0))
    return top1.avg, top5.avg, losses.avg  # (0-d tensors)


def decayed_lr(epoch, cfg, optimizer):
    passed = np.sum(epoch > np.asarray(cfg.SOLVER.LR_DECAY_STAGES))
    if passed == 0:
        return cfg.SOLVER.LR
    lr = cfg.SOLVER.LR * cfg.SOLVER.LR_DECAY_RATE ** passed
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def save(obj, path):
    with open(path, "wb") as f:
        torch.save(obj, f)


def load(path):
    with open(path, "rb") as f:
        return torch.load(f, map_location=torch.device("cpu"))


class Trainer:
    def __init__(self, name, distiller, train_loader, val_loader, cfg):
        self.cfg, self.distiller = cfg, distiller
        self.train_loader, self.val_loader = train_loader, val_loader
        self.optimizer = optim.SGD(distiller.module.get_learnable_parameters(), lr=cfg.SOLVER.LR,
                                   momentum=cfg.SOLVER.MOMENTUM,
                                   weight_decay=cfg.SOLVER.WEIGHT_DECAY)
        self.best_acc = -1
        self.folder = os.path.join(cfg.LOG.PREFIX, name)
        os.makedirs(self.folder, exist_ok=True)
        self.writer = SummaryWriter(os.path.join(self.folder, "train.events"))

    def fit(self, resume=False):
        epoch = 1
        if resume:
            state = load(os.path.join(self.folder, "latest"))
            epoch = state["epoch"] + 1
            weights, moments = state["model"], state["optimizer"]
            self.distiller.load_state_dict(weights)
            self.optimizer.load_state_dict(moments)
            self.best_acc = state.get("best_acc", -1)
        for epoch in range(epoch, self.cfg.SOLVER.EPOCHS + 1):
            self.one_epoch(epoch)
        with open(os.path.join(self.folder, "worklog.txt"), "a") as log:
            log.write("best_acc\\t{:.2f}".format(float(self.best_acc)))

    def one_epoch(self, epoch):
        lr = decayed_lr(epoch, self.cfg, self.optimizer)
        losses, top1 = Meter(), Meter()
        self.distiller.train()
        for image, target, index in self.train_loader:
            self.optimizer.zero_grad()
            preds, parts = self.distiller(image=image.float(), target=target, epoch=epoch)
            loss = sum([l.mean() for l in parts.values()])
            loss.backward()
            self.optimizer.step()
            losses.update(loss.cpu().detach().numpy().mean(), image.size(0))
            top1.update(topk_acc(preds, target)[0][0], image.size(0))
        test_acc, test_top5, test_loss = evaluate(self.val_loader, self.distiller)
        scalars = collections.OrderedDict(train_acc=top1.avg, train_loss=losses.avg,
                                          test_acc=test_acc,
                              test_acc_top5=test_top5, test_loss=test_loss)
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, epoch)
        self.writer.flush()
        self.best_acc = max(self.best_acc, test_acc)
        with open(os.path.join(self.folder, "worklog.txt"), "a") as log:
            log.write("epoch: {}\\nlr: {:.2f}\\n".format(epoch, float(lr)))
            log.writelines("{}: {:.2f}\\n".format(k, v) for k, v in scalars.items())
        state = {"epoch": epoch, "model": self.distiller.state_dict(),
                 "optimizer": self.optimizer.state_dict(), "best_acc": self.best_acc}
        student = {"model": self.distiller.module.student.state_dict()}
        targets = ["latest"]
        if not epoch % self.cfg.LOG.SAVE_CHECKPOINT_FREQ:
            targets.append("epoch_{}".format(epoch))
        targets += ["best"] if test_acc >= self.best_acc else []
        for tag in targets:
            save(state, os.path.join(self.folder, tag))
            save(student, os.path.join(self.folder, "student_" + tag.replace("epoch_", "")))


class Net(nn.Module):
    def __init__(self, width, classes=10):
        super().__init__()
        conv = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.body = nn.Sequential(conv, nn.BatchNorm2d(width), nn.ReLU())
        self.fc = nn.Linear(width, classes)

    def forward(self, x):
        pooled = F.adaptive_avg_pool2d(self.body(x), 1).flatten(1)
        return self.fc(pooled), {"pooled_feat": pooled}


fit_data = torch.utils.data.TensorDataset(
    torch.randn(12, 3, 8, 8), torch.randint(0, 10, (12,)), torch.arange(12)
)
val_data = torch.utils.data.TensorDataset(torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,)))
fit_loader = torch.utils.data.DataLoader(fit_data, batch_size=6, shuffle=False)
val_loader = torch.utils.data.DataLoader(val_data, batch_size=8, shuffle=False)

kinds = {"KD": KD, "DKD": DKD, "RKD": RKD, "PKT": PKT}
teacher = Net(8)
initialize(teacher)
for name in distillers:
    student = Net(4)
    initialize(student)
    wrapped = torch.nn.DataParallel(kinds[name](student, teacher, cfg))
    for resume, epochs in [(False, 1), (True, 2)]:
        cfg.SOLVER.EPOCHS = epochs
        Trainer(name, wrapped, fit_loader, val_loader, cfg).fit(resume=resume)
    checkpoint = os.path.join(cfg.LOG.PREFIX, name, "student_latest")
    final = load(checkpoint)["model"]
    record.append({k: v.detach().numpy().copy() for k, v in final.items()})
    record.append(sorted(os.listdir(os.path.dirname(checkpoint))))
"""

DISTILL_STEPS = [
    ("from torch.nn import functional as F\n", "from retrograd.nn import functional as F\n"),
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "            loss.backward()\n            self.optimizer.step()\n",
        "            grads = loss.backward()\n            self.optimizer.step(grads)\n",
    ),
]


def _config(prefix: str) -> types.SimpleNamespace:
    """The config nodes the distillers and the trainer read (mdistiller's names), small. The
    step decay first applies in epoch 2, after the resumed run has loaded ``latest``: a decayed
    rate is a NumPy float in the param groups, and torch's default ``weights_only`` load would
    refuse a checkpoint holding one."""

    def node(**entries):
        return types.SimpleNamespace(**entries)

    return node(
        SOLVER=node(TYPE="SGD", LR=0.05, MOMENTUM=0.9, WEIGHT_DECAY=5e-4, EPOCHS=2,
                    LR_DECAY_STAGES=[1], LR_DECAY_RATE=0.1),
        LOG=node(PREFIX=prefix, WANDB=False, SAVE_CHECKPOINT_FREQ=2),
        KD=node(TEMPERATURE=4, LOSS=node(CE_WEIGHT=0.1, KD_WEIGHT=0.9)),
        DKD=node(CE_WEIGHT=1.0, ALPHA=1.0, BETA=8.0, T=4.0, WARMUP=2),
        RKD=node(DISTANCE_WEIGHT=25, ANGLE_WEIGHT=50, LOSS=node(CE_WEIGHT=1.0, FEAT_WEIGHT=1.0),
                 PDIST=node(EPSILON=1e-12, SQUARED=False)),
        PKT=node(LOSS=node(CE_WEIGHT=1.0, FEAT_WEIGHT=30000.0)),
    )  # fmt: skip


class _SummaryWriter:
    """tensorboardX's ``SummaryWriter``, recording each scalar in the run's record."""

    def __init__(self, record):
        self.record = record

    def __call__(self, logdir):
        return self

    def add_scalar(self, tag, value, step):
        self.record.append({f"{tag}@{step}": float(value)})

    def flush(self):
        pass


@pytest.mark.parametrize("distillers", [("KD", "DKD"), ("RKD", "PKT")])
def test_distillers_train_resume_and_checkpoint_as_torch(capsys, tmp_path, distillers):
    """One epoch, then a resumed second, per distiller: every logged scalar (train and test
    accuracy and loss per epoch), the student's final checkpoint and the files written agree
    with torch's."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        text = DISTILL_SOURCE if lib is torch else port(DISTILL_SOURCE, DISTILL_STEPS)
        record = []
        prefix = tmp_path / lib.__name__
        with SharedDraws(lib, 43501):
            run_source(
                text, lib, record=record, initialize=initialize, distillers=distillers,
                cfg=_config(str(prefix)), SummaryWriter=_SummaryWriter(record),
            )  # fmt: skip
        records.append(record)
        capsys.readouterr()
    theirs, ours = records
    assert [*theirs[0], *theirs[4]] == ["train_acc@1", "test_loss@1"]
    assert theirs[11] == [
        "best",
        "epoch_2",
        "latest",
        "student_2",
        "student_best",
        "student_latest",
        "worklog.txt",
    ]
    for name in distillers:  # the work logs: the same epochs, rates and rounded values
        logs = [
            (tmp_path / lib / name / "worklog.txt").read_text() for lib in ("torch", "retrograd")
        ]
        assert logs[1] == logs[0] and logs[0].count("epoch: ") == 2
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
