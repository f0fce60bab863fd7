# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
knowledge distillation as megvii-research/mdistiller writes it, trained by its own trainer
against torch's run of the same code from the same weights and images.

- ``distillers/_base.py``'s ``Distiller`` (``train(mode)`` overridden to keep the teacher in
  ``eval()``, ``forward(**kwargs)`` dispatching on ``self.training``,
  ``get_learnable_parameters``), and four distillers whole: ``KD`` (``F.kl_div(log_softmax(s /
  T), softmax(t / T), reduction="none").sum(1).mean()`` times ``T**2``), ``DKD`` (the decoupled
  target/non-target losses: masks by ``torch.zeros_like(logits).scatter_(1, target.unsqueeze(1),
  1).bool()``, ``cat_mask``'s ``sum(dim=1, keepdims=True)`` (NumPy's keyword),
  ``F.kl_div(..., size_average=False)``, ``logits / T - 1000.0 * gt_mask``, the warmup factor
  ``min(kwargs["epoch"] / self.warmup, 1.0)``), ``RKD`` (``_pdist`` by ``e @ e.t()``,
  ``clamp(min=eps)``, ``res[range(len(e)), range(len(e))] = 0``, ``t_d[t_d > 0].mean()``,
  the angle term by ``F.normalize`` and ``torch.bmm``, ``F.smooth_l1_loss``) and ``PKT``
  (``f_s[f_s != f_s] = 0``, similarities to probabilities, the KL by hand);
- ``engine/utils.py`` whole: ``AverageMeter`` fed 0-d tensors, ``accuracy`` by ``output.topk(maxk,
  1, True, True)``, ``pred.eq(target.reshape(1, -1).expand_as(pred))`` and
  ``correct_k.mul_(100.0 / batch_size)``, ``validate`` under ``torch.no_grad()``,
  ``adjust_learning_rate``'s ``np.sum(epoch > np.asarray(stages))``, ``save_checkpoint``/
  ``load_checkpoint`` through open file objects (``torch.load(f, map_location="cpu")``);
- ``engine/trainer.py``'s ``BaseTrainer``: SGD over ``self.distiller.module.
  get_learnable_parameters()`` of an ``nn.DataParallel`` (``tools/train.py``'s wrapping, on the
  CPU), ``train_iter``'s ``sum([l.mean() for l in losses_dict.values()])`` and
  ``loss.cpu().detach().numpy().mean()``, ``log``'s ``"{:.2f}".format`` of tensors into
  ``worklog.txt``, the ``latest``/``best``/``epoch_N`` checkpoints of the whole distiller and of
  the student, and ``train(resume=True)`` loading ``latest`` back into the distiller and the
  optimizer.

What stands in: CIFAR-100 by random 8x8 images with ten random labels (and the dataset's index,
as mdistiller's ``CIFAR100Instance`` gives it), the configs by namespaces, tensorboardX's
``SummaryWriter`` by a recorder of ``add_scalar``; the ``.cuda(non_blocking=True)`` lines are
dropped (a CPU run). The student and teacher are small CNNs returning ``(logits, {"pooled_feat":
...})`` as mdistiller's models do. The port changes the import lines and the gradient lines;
``initialize`` gives it torch's initial weights.
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

MDISTILLER_SOURCE = '''
import os
import sys
import time
import getpass
from collections import OrderedDict
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import numpy as np
from tqdm import tqdm


# -- mdistiller/distillers/_base.py ----------------------------------------------------------
class Distiller(nn.Module):
    def __init__(self, student, teacher):
        super(Distiller, self).__init__()
        self.student = student
        self.teacher = teacher

    def train(self, mode=True):
        # teacher as eval mode by default
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        self.teacher.eval()
        return self

    def get_learnable_parameters(self):
        # if the method introduces extra parameters, re-impl this function
        return [v for k, v in self.student.named_parameters()]

    def get_extra_parameters(self):
        # calculate the extra parameters introduced by the distiller
        return 0

    def forward_train(self, **kwargs):
        # training function for the distillation method
        raise NotImplementedError()

    def forward_test(self, image):
        return self.student(image)[0]

    def forward(self, **kwargs):
        if self.training:
            return self.forward_train(**kwargs)
        return self.forward_test(kwargs["image"])


class Vanilla(nn.Module):
    def __init__(self, student):
        super(Vanilla, self).__init__()
        self.student = student

    def get_learnable_parameters(self):
        return [v for k, v in self.student.named_parameters()]

    def forward_train(self, image, target, **kwargs):
        logits_student, _ = self.student(image)
        loss = F.cross_entropy(logits_student, target)
        return logits_student, {"ce": loss}

    def forward(self, **kwargs):
        if self.training:
            return self.forward_train(**kwargs)
        return self.forward_test(kwargs["image"])

    def forward_test(self, image):
        return self.student(image)[0]


# -- mdistiller/distillers/KD.py -------------------------------------------------------------
def kd_loss(logits_student, logits_teacher, temperature):
    log_pred_student = F.log_softmax(logits_student / temperature, dim=1)
    pred_teacher = F.softmax(logits_teacher / temperature, dim=1)
    loss_kd = F.kl_div(log_pred_student, pred_teacher, reduction="none").sum(1).mean()
    loss_kd *= temperature**2
    return loss_kd


class KD(Distiller):
    """Distilling the Knowledge in a Neural Network"""

    def __init__(self, student, teacher, cfg):
        super(KD, self).__init__(student, teacher)
        self.temperature = cfg.KD.TEMPERATURE
        self.ce_loss_weight = cfg.KD.LOSS.CE_WEIGHT
        self.kd_loss_weight = cfg.KD.LOSS.KD_WEIGHT

    def forward_train(self, image, target, **kwargs):
        logits_student, _ = self.student(image)
        with torch.no_grad():
            logits_teacher, _ = self.teacher(image)

        # losses
        loss_ce = self.ce_loss_weight * F.cross_entropy(logits_student, target)
        loss_kd = self.kd_loss_weight * kd_loss(
            logits_student, logits_teacher, self.temperature
        )
        losses_dict = {
            "loss_ce": loss_ce,
            "loss_kd": loss_kd,
        }
        return logits_student, losses_dict


# -- mdistiller/distillers/DKD.py ------------------------------------------------------------
def dkd_loss(logits_student, logits_teacher, target, alpha, beta, temperature):
    gt_mask = _get_gt_mask(logits_student, target)
    other_mask = _get_other_mask(logits_student, target)
    pred_student = F.softmax(logits_student / temperature, dim=1)
    pred_teacher = F.softmax(logits_teacher / temperature, dim=1)
    pred_student = cat_mask(pred_student, gt_mask, other_mask)
    pred_teacher = cat_mask(pred_teacher, gt_mask, other_mask)
    log_pred_student = torch.log(pred_student)
    tckd_loss = (
        F.kl_div(log_pred_student, pred_teacher, size_average=False)
        * (temperature**2)
        / target.shape[0]
    )
    pred_teacher_part2 = F.softmax(
        logits_teacher / temperature - 1000.0 * gt_mask, dim=1
    )
    log_pred_student_part2 = F.log_softmax(
        logits_student / temperature - 1000.0 * gt_mask, dim=1
    )
    nckd_loss = (
        F.kl_div(log_pred_student_part2, pred_teacher_part2, size_average=False)
        * (temperature**2)
        / target.shape[0]
    )
    return alpha * tckd_loss + beta * nckd_loss


def _get_gt_mask(logits, target):
    target = target.reshape(-1)
    mask = torch.zeros_like(logits).scatter_(1, target.unsqueeze(1), 1).bool()
    return mask


def _get_other_mask(logits, target):
    target = target.reshape(-1)
    mask = torch.ones_like(logits).scatter_(1, target.unsqueeze(1), 0).bool()
    return mask


def cat_mask(t, mask1, mask2):
    t1 = (t * mask1).sum(dim=1, keepdims=True)
    t2 = (t * mask2).sum(1, keepdims=True)
    rt = torch.cat([t1, t2], dim=1)
    return rt


class DKD(Distiller):
    """Decoupled Knowledge Distillation(CVPR 2022)"""

    def __init__(self, student, teacher, cfg):
        super(DKD, self).__init__(student, teacher)
        self.ce_loss_weight = cfg.DKD.CE_WEIGHT
        self.alpha = cfg.DKD.ALPHA
        self.beta = cfg.DKD.BETA
        self.temperature = cfg.DKD.T
        self.warmup = cfg.DKD.WARMUP

    def forward_train(self, image, target, **kwargs):
        logits_student, _ = self.student(image)
        with torch.no_grad():
            logits_teacher, _ = self.teacher(image)

        # losses
        loss_ce = self.ce_loss_weight * F.cross_entropy(logits_student, target)
        loss_dkd = min(kwargs["epoch"] / self.warmup, 1.0) * dkd_loss(
            logits_student,
            logits_teacher,
            target,
            self.alpha,
            self.beta,
            self.temperature,
        )
        losses_dict = {
            "loss_ce": loss_ce,
            "loss_kd": loss_dkd,
        }
        return logits_student, losses_dict


# -- mdistiller/distillers/RKD.py ------------------------------------------------------------
def _pdist(e, squared, eps):
    e_square = e.pow(2).sum(dim=1)
    prod = e @ e.t()
    res = (e_square.unsqueeze(1) + e_square.unsqueeze(0) - 2 * prod).clamp(min=eps)

    if not squared:
        res = res.sqrt()

    res = res.clone()
    res[range(len(e)), range(len(e))] = 0
    return res


def rkd_loss(f_s, f_t, squared=False, eps=1e-12, distance_weight=25, angle_weight=50):
    stu = f_s.view(f_s.shape[0], -1)
    tea = f_t.view(f_t.shape[0], -1)

    # RKD distance loss
    with torch.no_grad():
        t_d = _pdist(tea, squared, eps)
        mean_td = t_d[t_d > 0].mean()
        t_d = t_d / mean_td

    d = _pdist(stu, squared, eps)
    mean_d = d[d > 0].mean()
    d = d / mean_d

    loss_d = F.smooth_l1_loss(d, t_d)

    # RKD Angle loss
    with torch.no_grad():
        td = tea.unsqueeze(0) - tea.unsqueeze(1)
        norm_td = F.normalize(td, p=2, dim=2)
        t_angle = torch.bmm(norm_td, norm_td.transpose(1, 2)).view(-1)

    sd = stu.unsqueeze(0) - stu.unsqueeze(1)
    norm_sd = F.normalize(sd, p=2, dim=2)
    s_angle = torch.bmm(norm_sd, norm_sd.transpose(1, 2)).view(-1)

    loss_a = F.smooth_l1_loss(s_angle, t_angle)

    loss = distance_weight * loss_d + angle_weight * loss_a
    return loss


class RKD(Distiller):
    """Relational Knowledge Disitllation, CVPR2019"""

    def __init__(self, student, teacher, cfg):
        super(RKD, self).__init__(student, teacher)
        self.distance_weight = cfg.RKD.DISTANCE_WEIGHT
        self.angle_weight = cfg.RKD.ANGLE_WEIGHT
        self.ce_loss_weight = cfg.RKD.LOSS.CE_WEIGHT
        self.feat_loss_weight = cfg.RKD.LOSS.FEAT_WEIGHT
        self.eps = cfg.RKD.PDIST.EPSILON
        self.squared = cfg.RKD.PDIST.SQUARED

    def forward_train(self, image, target, **kwargs):
        logits_student, feature_student = self.student(image)
        with torch.no_grad():
            _, feature_teacher = self.teacher(image)

        # losses
        loss_ce = self.ce_loss_weight * F.cross_entropy(logits_student, target)
        loss_rkd = self.feat_loss_weight * rkd_loss(
            feature_student["pooled_feat"],
            feature_teacher["pooled_feat"],
            self.squared,
            self.eps,
            self.distance_weight,
            self.angle_weight,
        )
        losses_dict = {
            "loss_ce": loss_ce,
            "loss_kd": loss_rkd,
        }
        return logits_student, losses_dict


# -- mdistiller/distillers/PKT.py ------------------------------------------------------------
def pkt_loss(f_s, f_t, eps=1e-7):
    # Normalize each vector by its norm
    output_net_norm = torch.sqrt(torch.sum(f_s**2, dim=1, keepdim=True))
    f_s = f_s / (output_net_norm + eps)
    f_s[f_s != f_s] = 0
    target_net_norm = torch.sqrt(torch.sum(f_t**2, dim=1, keepdim=True))
    f_t = f_t / (target_net_norm + eps)
    f_t[f_t != f_t] = 0

    # Calculate the cosine similarity
    model_similarity = torch.mm(f_s, f_s.transpose(0, 1))
    target_similarity = torch.mm(f_t, f_t.transpose(0, 1))
    # Scale cosine similarity to 0..1
    model_similarity = (model_similarity + 1.0) / 2.0
    target_similarity = (target_similarity + 1.0) / 2.0
    # Transform them into probabilities
    model_similarity = model_similarity / torch.sum(
        model_similarity, dim=1, keepdim=True
    )
    target_similarity = target_similarity / torch.sum(
        target_similarity, dim=1, keepdim=True
    )
    # Calculate the KL-divergence
    loss = torch.mean(
        target_similarity
        * torch.log((target_similarity + eps) / (model_similarity + eps))
    )
    return loss


class PKT(Distiller):
    """
    Probabilistic Knowledge Transfer for deep representation learning
    Code from: https://github.com/passalis/probabilistic_kt
    """

    def __init__(self, student, teacher, cfg):
        super(PKT, self).__init__(student, teacher)
        self.ce_loss_weight = cfg.PKT.LOSS.CE_WEIGHT
        self.feat_loss_weight = cfg.PKT.LOSS.FEAT_WEIGHT

    def forward_train(self, image, target, **kwargs):
        logits_student, feature_student = self.student(image)
        with torch.no_grad():
            _, feature_teacher = self.teacher(image)

        # lossess
        loss_ce = self.ce_loss_weight * F.cross_entropy(logits_student, target)
        loss_feat = self.feat_loss_weight * pkt_loss(
            feature_student["pooled_feat"], feature_teacher["pooled_feat"]
        )
        losses_dict = {
            "loss_ce": loss_ce,
            "loss_kd": loss_feat,
        }
        return logits_student, losses_dict


# -- mdistiller/engine/utils.py --------------------------------------------------------------
class AverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def validate(val_loader, distiller):
    batch_time, losses, top1, top5 = [AverageMeter() for _ in range(4)]
    criterion = nn.CrossEntropyLoss()
    num_iter = len(val_loader)
    pbar = tqdm(range(num_iter))

    distiller.eval()
    with torch.no_grad():
        start_time = time.time()
        for idx, (image, target) in enumerate(val_loader):
            image = image.float()
            output = distiller(image=image)
            loss = criterion(output, target)
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            batch_size = image.size(0)
            losses.update(loss.cpu().detach().numpy().mean(), batch_size)
            top1.update(acc1[0], batch_size)
            top5.update(acc5[0], batch_size)

            # measure elapsed time
            batch_time.update(time.time() - start_time)
            start_time = time.time()
            msg = "Top-1:{top1.avg:.3f}| Top-5:{top5.avg:.3f}".format(
                top1=top1, top5=top5
            )
            pbar.set_description(log_msg(msg, "EVAL"))
            pbar.update()
    pbar.close()
    return top1.avg, top5.avg, losses.avg


def log_msg(msg, mode="INFO"):
    color_map = {
        "INFO": 36,
        "TRAIN": 32,
        "EVAL": 31,
    }
    msg = "\033[{}m[{}] {}\033[0m".format(color_map[mode], mode, msg)
    return msg


def adjust_learning_rate(epoch, cfg, optimizer):
    steps = np.sum(epoch > np.asarray(cfg.SOLVER.LR_DECAY_STAGES))
    if steps > 0:
        new_lr = cfg.SOLVER.LR * (cfg.SOLVER.LR_DECAY_RATE**steps)
        for param_group in optimizer.param_groups:
            param_group["lr"] = new_lr
        return new_lr
    return cfg.SOLVER.LR


def accuracy(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.reshape(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


def save_checkpoint(obj, path):
    with open(path, "wb") as f:
        torch.save(obj, f)


def load_checkpoint(path):
    with open(path, "rb") as f:
        return torch.load(f, map_location="cpu")


# -- mdistiller/engine/trainer.py (BaseTrainer) ----------------------------------------------
class BaseTrainer(object):
    def __init__(self, experiment_name, distiller, train_loader, val_loader, cfg):
        self.cfg = cfg
        self.distiller = distiller
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.optimizer = self.init_optimizer(cfg)
        self.best_acc = -1

        username = getpass.getuser()
        # init loggers
        self.log_path = os.path.join(cfg.LOG.PREFIX, experiment_name)
        if not os.path.exists(self.log_path):
            os.makedirs(self.log_path)
        self.tf_writer = SummaryWriter(os.path.join(self.log_path, "train.events"))

    def init_optimizer(self, cfg):
        if cfg.SOLVER.TYPE == "SGD":
            optimizer = optim.SGD(
                self.distiller.module.get_learnable_parameters(),
                lr=cfg.SOLVER.LR,
                momentum=cfg.SOLVER.MOMENTUM,
                weight_decay=cfg.SOLVER.WEIGHT_DECAY,
            )
        else:
            raise NotImplementedError(cfg.SOLVER.TYPE)
        return optimizer

    def log(self, lr, epoch, log_dict):
        # tensorboard log
        for k, v in log_dict.items():
            self.tf_writer.add_scalar(k, v, epoch)
        self.tf_writer.flush()
        # wandb log
        if self.cfg.LOG.WANDB:
            import wandb

            wandb.log({"current lr": lr})
            wandb.log(log_dict)
        if log_dict["test_acc"] > self.best_acc:
            self.best_acc = log_dict["test_acc"]
            if self.cfg.LOG.WANDB:
                wandb.run.summary["best_acc"] = self.best_acc
        # worklog.txt
        with open(os.path.join(self.log_path, "worklog.txt"), "a") as writer:
            lines = [
                "-" * 25 + os.linesep,
                "epoch: {}".format(epoch) + os.linesep,
                "lr: {:.2f}".format(float(lr)) + os.linesep,
            ]
            for k, v in log_dict.items():
                lines.append("{}: {:.2f}".format(k, v) + os.linesep)
            lines.append("-" * 25 + os.linesep)
            writer.writelines(lines)

    def train(self, resume=False):
        epoch = 1
        if resume:
            state = load_checkpoint(os.path.join(self.log_path, "latest"))
            epoch = state["epoch"] + 1
            self.distiller.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.best_acc = state["best_acc"]
        while epoch < self.cfg.SOLVER.EPOCHS + 1:
            self.train_epoch(epoch)
            epoch += 1
        print(log_msg("Best accuracy:{}".format(self.best_acc), "EVAL"))
        with open(os.path.join(self.log_path, "worklog.txt"), "a") as writer:
            writer.write("best_acc\t" + "{:.2f}".format(float(self.best_acc)))

    def train_epoch(self, epoch):
        lr = adjust_learning_rate(epoch, self.cfg, self.optimizer)
        train_meters = {
            "training_time": AverageMeter(),
            "data_time": AverageMeter(),
            "losses": AverageMeter(),
            "top1": AverageMeter(),
            "top5": AverageMeter(),
        }
        num_iter = len(self.train_loader)
        pbar = tqdm(range(num_iter))

        # train loops
        self.distiller.train()
        for idx, data in enumerate(self.train_loader):
            msg = self.train_iter(data, epoch, train_meters)
            pbar.set_description(log_msg(msg, "TRAIN"))
            pbar.update()
        pbar.close()

        # validate
        test_acc, test_acc_top5, test_loss = validate(self.val_loader, self.distiller)

        # log
        log_dict = OrderedDict(
            {
                "train_acc": train_meters["top1"].avg,
                "train_loss": train_meters["losses"].avg,
                "test_acc": test_acc,
                "test_acc_top5": test_acc_top5,
                "test_loss": test_loss,
            }
        )
        self.log(lr, epoch, log_dict)
        # saving checkpoint
        state = {
            "epoch": epoch,
            "model": self.distiller.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "best_acc": self.best_acc,
        }
        student_state = {"model": self.distiller.module.student.state_dict()}
        save_checkpoint(state, os.path.join(self.log_path, "latest"))
        save_checkpoint(
            student_state, os.path.join(self.log_path, "student_latest")
        )
        if epoch % self.cfg.LOG.SAVE_CHECKPOINT_FREQ == 0:
            save_checkpoint(
                state, os.path.join(self.log_path, "epoch_{}".format(epoch))
            )
            save_checkpoint(
                student_state,
                os.path.join(self.log_path, "student_{}".format(epoch)),
            )
        # update the best
        if test_acc >= self.best_acc:
            save_checkpoint(state, os.path.join(self.log_path, "best"))
            save_checkpoint(
                student_state, os.path.join(self.log_path, "student_best")
            )

    def train_iter(self, data, epoch, train_meters):
        self.optimizer.zero_grad()
        train_start_time = time.time()
        image, target, index = data
        train_meters["data_time"].update(time.time() - train_start_time)
        image = image.float()

        # forward
        preds, losses_dict = self.distiller(image=image, target=target, epoch=epoch)

        # backward
        loss = sum([l.mean() for l in losses_dict.values()])
        loss.backward()
        self.optimizer.step()
        train_meters["training_time"].update(time.time() - train_start_time)
        # collect info
        batch_size = image.size(0)
        acc1, acc5 = accuracy(preds, target, topk=(1, 5))
        train_meters["losses"].update(loss.cpu().detach().numpy().mean(), batch_size)
        train_meters["top1"].update(acc1[0], batch_size)
        train_meters["top5"].update(acc5[0], batch_size)
        # print info
        msg = "Epoch:{}| Time(data):{:.3f}| Time(train):{:.3f}| Loss:{:.4f}| Top-1:{:.3f}| Top-5:{:.3f}".format(
            epoch,
            train_meters["data_time"].avg,
            train_meters["training_time"].avg,
            train_meters["losses"].avg,
            train_meters["top1"].avg,
            train_meters["top5"].avg,
        )
        return msg


# -- tools/train.py, on small models ---------------------------------------------------------
class Net(nn.Module):
    def __init__(self, width, num_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        pooled_feat = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(pooled_feat), {"pooled_feat": pooled_feat}


train_set = torch.utils.data.TensorDataset(torch.randn(12, 3, 8, 8), torch.randint(0, 10, (12,)), torch.arange(12))
val_set = torch.utils.data.TensorDataset(torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,)))
train_loader = torch.utils.data.DataLoader(train_set, batch_size=6, shuffle=False)
val_loader = torch.utils.data.DataLoader(val_set, batch_size=8, shuffle=False)

distiller_dict = {"KD": KD, "DKD": DKD, "RKD": RKD, "PKT": PKT}
model_teacher = Net(8)
initialize(model_teacher)
for name in distillers:
    model_student = Net(4)
    initialize(model_student)
    distiller = distiller_dict[name](model_student, model_teacher, cfg)
    distiller = torch.nn.DataParallel(distiller)
    for resume, epochs in ((False, 1), (True, 2)):
        cfg.SOLVER.EPOCHS = epochs
        trainer = BaseTrainer(name, distiller, train_loader, val_loader, cfg)
        trainer.train(resume=resume)
    student = load_checkpoint(os.path.join(cfg.LOG.PREFIX, name, "student_latest"))["model"]
    record.append({k: v.detach().numpy().copy() for k, v in student.items()})
    record.append(sorted(os.listdir(os.path.join(cfg.LOG.PREFIX, name))))
'''

MDISTILLER_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        self.optimizer.step()\n",
        "        grads = loss.backward()\n        self.optimizer.step(grads)\n",
    ),
]


def _config(prefix: str) -> types.SimpleNamespace:
    """mdistiller's yacs defaults (``engine/cfg.py``) that these distillers read, small. The
    rate decays in the second epoch, after the ``latest`` checkpoint the resumed run loads:
    ``adjust_learning_rate`` writes a NumPy float (``LR * RATE ** np.sum(...)``) into the
    param groups, which torch 2.13's default ``weights_only`` load refuses in a checkpoint
    (retrograd's load takes it from a file its own save wrote)."""

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
def test_mdistiller_trains_resumes_and_checkpoints_as_torch(
    capsys, monkeypatch, tmp_path, distillers
):
    """One epoch, then a resumed second, per distiller: every logged scalar (train and test
    accuracy and loss per epoch), the student's final checkpoint and the files written agree
    with torch's."""
    monkeypatch.setenv("USER", "ci")  # (BaseTrainer's getpass.getuser(): a uid with no name)
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        text = MDISTILLER_SOURCE if lib is torch else port(MDISTILLER_SOURCE, MDISTILLER_STEPS)
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
