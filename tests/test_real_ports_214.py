# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd (the harness: ``tests/real_ports.py``): the image
classification reference script of torchvision (``references/classification/train.py`` and
``utils.py``) over a small network, run against torch's run of the same code from the same
weights and draws, and resumed from its checkpoint.

- ``utils.set_weight_decay``: parameter groups by module class (``nn.modules.batchnorm.
  _BatchNorm``, ``nn.LayerNorm``, ``nn.GroupNorm``, ``nn.modules.instancenorm._InstanceNorm``,
  ``nn.LocalResponseNorm`` get ``norm_weight_decay``) and by custom key (``("bias", ...)``),
  walked with ``named_parameters(recurse=False)`` and ``named_children()``;
- ``utils.ExponentialMovingAverage``, a ``torch.optim.swa_utils.AveragedModel`` subclass with
  an ``ema_avg`` function and ``use_buffers=True``, updated every ``model_ema_steps`` with
  ``model_ema.n_averaged.fill_(0)`` during warmup;
- the ``SequentialLR`` of a ``LinearLR`` (or ``ConstantLR``) warmup and a ``CosineAnnealingLR``
  (or ``StepLR``/``ExponentialLR``), stepped per epoch;
- ``train_one_epoch``'s ``GradScaler`` path (``scale``, ``unscale_`` then
  ``nn.utils.clip_grad_norm_``, ``step``, ``update``), the ``CrossEntropyLoss`` with
  ``label_smoothing``, a ``DistributedSampler`` with ``set_epoch`` feeding a ``DataLoader``
  given ``sampler=``, ``pin_memory=True`` and ``collate_fn=default_collate``;
- the checkpoint dict (``model``, ``optimizer``, ``lr_scheduler``, ``epoch``, ``args``,
  ``model_ema``, ``scaler``) saved each epoch and the ``--resume`` path, which continues the
  uninterrupted run's trajectory.

Changed besides the ``import`` and gradient lines: the scaler is ``torch.amp.GradScaler("cpu")``
(the script's ``torch.cuda.amp.GradScaler()`` is disabled off a GPU), and the resume loads with
``weights_only=False`` (the checkpoint holds the ``argparse.Namespace``, which torch's default
load refuses).
"""

from __future__ import annotations

import argparse
import os
import random
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


TORCHVISION_SOURCE = '''
import torch
import torch.utils.data
from torch import nn
from torch.utils.data.dataloader import default_collate


# -- references/classification/utils.py ---------------------------------------------------
class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    """Maintains moving averages of model parameters using an exponential decay.
    ``ema_avg = decay * avg_model_param + (1 - decay) * model_param``
    `torch.optim.swa_utils.AveragedModel <https://pytorch.org/docs/stable/optim.html#custom-averaging-strategies>`_
    is used to compute the EMA.
    """

    def __init__(self, model, decay, device="cpu"):
        def ema_avg(avg_model_param, model_param, num_averaged):
            return decay * avg_model_param + (1 - decay) * model_param

        super().__init__(model, device, ema_avg, use_buffers=True)


def set_weight_decay(
    model,
    weight_decay,
    norm_weight_decay=None,
    norm_classes=None,
    custom_keys_weight_decay=None,
):
    if not norm_classes:
        norm_classes = [
            torch.nn.modules.batchnorm._BatchNorm,
            torch.nn.LayerNorm,
            torch.nn.GroupNorm,
            torch.nn.modules.instancenorm._InstanceNorm,
            torch.nn.LocalResponseNorm,
        ]
    norm_classes = tuple(norm_classes)

    params = {
        "other": [],
        "norm": [],
    }
    params_weight_decay = {
        "other": weight_decay,
        "norm": norm_weight_decay,
    }
    custom_keys = []
    if custom_keys_weight_decay is not None:
        for key, weight_decay in custom_keys_weight_decay:
            params[key] = []
            params_weight_decay[key] = weight_decay
            custom_keys.append(key)

    def _add_params(module, prefix=""):
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            is_custom_key = False
            for key in custom_keys:
                target_name = f"{prefix}.{name}" if prefix != "" and "." in key else name
                if key == target_name:
                    params[key].append(p)
                    is_custom_key = True
                    break
            if not is_custom_key:
                if norm_weight_decay is not None and isinstance(module, norm_classes):
                    params["norm"].append(p)
                else:
                    params["other"].append(p)

        for child_name, child_module in module.named_children():
            child_prefix = f"{prefix}.{child_name}" if prefix != "" else child_name
            _add_params(child_module, prefix=child_prefix)

    _add_params(model)

    param_groups = []
    for key in params:
        if len(params[key]) > 0:
            param_groups.append({"params": params[key], "weight_decay": params_weight_decay[key]})
    return param_groups


# -- references/classification/train.py --------------------------------------------------
def train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args, model_ema=None, scaler=None):
    model.train()
    for i, (image, target) in enumerate(data_loader):
        image, target = image.to(device), target.to(device)
        with torch.cuda.amp.autocast(enabled=False):
            output = model(image)
            loss = criterion(output, target)

        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            if args.clip_grad_norm is not None:
                # we should unscale the gradients of optimizer's assigned params if do gradient clipping
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            if args.clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            optimizer.step()

        if model_ema and i % args.model_ema_steps == 0:
            model_ema.update_parameters(model)
            if epoch < args.lr_warmup_epochs:
                # Reset ema buffer to keep copying weights during warmup period
                model_ema.n_averaged.fill_(0)
        record.append(loss.item())


def evaluate(model, criterion, data_loader, device):
    model.eval()
    total = 0.0
    with torch.inference_mode():
        for image, target in data_loader:
            output = model(image.to(device))
            total += criterion(output, target.to(device)).item()
    return total / len(data_loader)


class Net(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.GroupNorm(2, 8), nn.ReLU(inplace=True),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.fc(self.norm(torch.flatten(self.avgpool(self.features(x)), 1)))


def main(args):
    device = torch.device(args.device)
    dataset = torch.utils.data.TensorDataset(images, labels)
    train_sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=2, rank=args.rank, shuffle=True)
    data_loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=train_sampler,
        num_workers=args.workers,
        pin_memory=True,
        collate_fn=default_collate,
    )
    data_loader_test = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(images[:6], labels[:6]), batch_size=3, sampler=torch.utils.data.SequentialSampler(range(6)), num_workers=args.workers, pin_memory=True
    )
    model = Net()
    initialize(model)
    model.to(device)
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)

    custom_keys_weight_decay = []
    if args.bias_weight_decay is not None:
        custom_keys_weight_decay.append(("bias", args.bias_weight_decay))
    parameters = set_weight_decay(
        model,
        args.weight_decay,
        norm_weight_decay=args.norm_weight_decay,
        custom_keys_weight_decay=custom_keys_weight_decay if len(custom_keys_weight_decay) > 0 else None,
    )
    record.append(repr([(len(g["params"]), g["weight_decay"]) for g in parameters]))

    opt_name = args.opt.lower()
    if opt_name.startswith("sgd"):
        optimizer = torch.optim.SGD(
            parameters,
            lr=args.lr,
            momentum=args.momentum,
            weight_decay=args.weight_decay,
            nesterov="nesterov" in opt_name,
        )
    elif opt_name == "rmsprop":
        optimizer = torch.optim.RMSprop(
            parameters, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay, eps=0.0316, alpha=0.9
        )
    elif opt_name == "adamw":
        optimizer = torch.optim.AdamW(parameters, lr=args.lr, weight_decay=args.weight_decay)

    scaler = torch.amp.GradScaler("cpu") if args.amp else None

    args.lr_scheduler = args.lr_scheduler.lower()
    if args.lr_scheduler == "steplr":
        main_lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.lr_step_size, gamma=args.lr_gamma)
    elif args.lr_scheduler == "cosineannealinglr":
        main_lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, T_max=args.epochs - args.lr_warmup_epochs, eta_min=args.lr_min
        )
    elif args.lr_scheduler == "exponentiallr":
        main_lr_scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=args.lr_gamma)

    if args.lr_warmup_epochs > 0:
        if args.lr_warmup_method == "linear":
            warmup_lr_scheduler = torch.optim.lr_scheduler.LinearLR(
                optimizer, start_factor=args.lr_warmup_decay, total_iters=args.lr_warmup_epochs
            )
        elif args.lr_warmup_method == "constant":
            warmup_lr_scheduler = torch.optim.lr_scheduler.ConstantLR(
                optimizer, factor=args.lr_warmup_decay, total_iters=args.lr_warmup_epochs
            )
        lr_scheduler = torch.optim.lr_scheduler.SequentialLR(
            optimizer, schedulers=[warmup_lr_scheduler, main_lr_scheduler], milestones=[args.lr_warmup_epochs]
        )
    else:
        lr_scheduler = main_lr_scheduler

    model_without_ddp = model

    model_ema = None
    if args.model_ema:
        adjust = args.world_size * args.batch_size * args.model_ema_steps / args.epochs
        alpha = 1.0 - args.model_ema_decay
        alpha = min(1.0, alpha * adjust)
        model_ema = ExponentialMovingAverage(model_without_ddp, device=device, decay=1.0 - alpha)

    if args.resume:
        checkpoint = torch.load(args.resume, map_location="cpu", weights_only=False)
        model_without_ddp.load_state_dict(checkpoint["model"])
        if not args.test_only:
            optimizer.load_state_dict(checkpoint["optimizer"])
            lr_scheduler.load_state_dict(checkpoint["lr_scheduler"])
        args.start_epoch = checkpoint["epoch"] + 1
        if model_ema:
            model_ema.load_state_dict(checkpoint["model_ema"])
        if scaler:
            scaler.load_state_dict(checkpoint["scaler"])

    for epoch in range(args.start_epoch, args.epochs):
        train_sampler.set_epoch(epoch)
        train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args, model_ema, scaler)
        lr_scheduler.step()
        record.append(evaluate(model, criterion, data_loader_test, device=device))
        if model_ema:
            record.append(evaluate(model_ema, criterion, data_loader_test, device=device))
        record.append(optimizer.param_groups[0]["lr"])
        record.append(params_of(model))
        record.append({k: v.detach().numpy().copy() for k, v in model_ema.state_dict().items()})
        if args.output_dir:
            checkpoint = {
                "model": model_without_ddp.state_dict(),
                "optimizer": optimizer.state_dict(),
                "lr_scheduler": lr_scheduler.state_dict(),
                "epoch": epoch,
                "args": args,
            }
            if model_ema:
                checkpoint["model_ema"] = model_ema.state_dict()
            if scaler:
                checkpoint["scaler"] = scaler.state_dict()
            torch.save(checkpoint, os.path.join(args.output_dir, f"model_{epoch}.pth"))
            torch.save(checkpoint, os.path.join(args.output_dir, "checkpoint.pth"))


images, labels = torch.randn(22, 3, 6, 6), torch.randint(0, 4, (22,))
for opt in ("sgd_nesterov", "adamw"):
    args = argparse.Namespace(
        device="cpu", rank=1, batch_size=4, workers=0, label_smoothing=0.1, weight_decay=1e-3,
        norm_weight_decay=0.0, bias_weight_decay=0.0, opt=opt, lr=0.05 if opt != "adamw" else 5e-3,
        momentum=0.9, amp=True, lr_scheduler="cosineannealinglr", lr_step_size=2, lr_gamma=0.5,
        lr_min=1e-4, epochs=4, lr_warmup_epochs=1, lr_warmup_method="linear", lr_warmup_decay=0.1,
        model_ema=True, world_size=2, model_ema_steps=2, model_ema_decay=0.9, resume="",
        test_only=False, start_epoch=0, output_dir=output_dir, clip_grad_norm=1.0,
    )
    main(args)
    start = len(record)
    args.resume, args.start_epoch = os.path.join(output_dir, "model_1.pth"), 0
    main(args)
    resumed.append((start, len(record)))
'''

TORCHVISION_STEPS = [
    (
        "import torch\nimport torch.utils.data\nfrom torch import nn\n",
        "import retrograd as torch\nimport retrograd.utils.data\nfrom retrograd import nn\n",
    ),
    (
        "            scaler.scale(loss).backward()\n",
        "            grads = scaler.scale(loss).backward()\n",
    ),
    (
        "                scaler.unscale_(optimizer)\n",
        "                scaler.unscale_(optimizer, grads)\n",
    ),
    (
        "                nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)\n            scaler.step(optimizer)",
        "                nn.utils.clip_grad_norm_(grads, model.parameters(), args.clip_grad_norm)\n            scaler.step(optimizer, grads)",
    ),
]


def test_torchvision_classification_reference_trains_and_resumes_as_torch(capsys, tmp_path):
    states = []

    def initialize(module):
        if isinstance(module, torch.nn.Module):
            if not states:
                states.append(
                    {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
                )
            module.load_state_dict({k: torch.tensor(v) for k, v in states[0].items()})
        else:
            module.load_state_dict(states[0])

    def output_dir(lib):
        (tmp_path / lib.__name__).mkdir()
        return str(tmp_path / lib.__name__)

    spans = {}

    def resumed(lib):
        spans[lib.__name__] = []
        return spans[lib.__name__]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.cuda.amp.autocast's deprecation, in both runs
        (theirs, ours), _ = runs_with_draws(
            TORCHVISION_SOURCE, TORCHVISION_STEPS, capsys, 21401, initialize=initialize,
            params_of=params_of, argparse=argparse, os=os, make_output_dir=output_dir,
            make_resumed=resumed,
        )  # fmt: skip
    # groups: the other weights, the norms' weights (no decay), every bias (the custom key
    # comes first: the norms' biases too)
    assert theirs[0] == "[(3, 0.001), (3, 0.0), (5, 0.0)]"
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
    assert spans["retrograd"] == spans["torch"]
    # the resumed run (epochs 2 and 3) repeats the uninterrupted run's last two epochs
    for start, end in spans["retrograd"]:
        tail = end - start - 1  # the group record, then epochs 2 and 3
        assert_records_agree(ours[start + 1 : end], ours[start - tail : start], rtol=0, atol=0)
