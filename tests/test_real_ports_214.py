"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of torchvision's image-classification reference recipe (``references/classification``)
over a small network, run against torch's run from the same weights and draws, and resumed
from its checkpoint.

- optimizer groups by module class (``nn.modules.batchnorm._BatchNorm``, ``nn.LayerNorm``,
  ``nn.GroupNorm``, ``nn.modules.instancenorm._InstanceNorm``, ``nn.LocalResponseNorm`` get
  the norm decay) and by parameter name (``bias``), walked with
  ``named_parameters(recurse=False)`` and ``named_children()``;
- a weight EMA subclassing ``torch.optim.swa_utils.AveragedModel`` with its own averaging
  function and ``use_buffers=True``, updated every few steps, ``n_averaged.fill_(0)`` during
  warmup, evaluated as a model and checkpointed by ``state_dict``;
- ``SequentialLR`` of a ``LinearLR`` or ``ConstantLR`` warmup and a ``CosineAnnealingLR`` or
  ``StepLR``, stepped per epoch; SGD (Nesterov) and AdamW over the groups;
- the ``torch.amp.GradScaler("cpu")`` path (``scale``, ``unscale_``, then
  ``nn.utils.clip_grad_norm_``, ``step``, ``update``) under ``torch.cuda.amp.autocast(enabled=
  False)``; ``CrossEntropyLoss(label_smoothing=...)``; a ``DistributedSampler`` with
  ``set_epoch`` feeding a ``DataLoader`` given ``sampler=``, ``pin_memory=True`` and
  ``collate_fn=default_collate``; a ``SequentialSampler(range(n))``; ``torch.inference_mode()``;
- a checkpoint dict (model, optimizer, scheduler, EMA, scaler, epoch and the
  ``argparse.Namespace`` of the run) saved each epoch and loaded with ``map_location="cpu",
  weights_only=False`` (torch's default load refuses the namespace); the resumed run
  continues the uninterrupted run's trajectory exactly.

Only the imports and the gradient lines differ.
"""

from __future__ import annotations

import argparse
import os
import warnings

import torch

from real_ports import (
    assert_records_agree,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

TRAINING_RECIPE_SOURCE = '''
import os

import torch
import torch.utils.data
from torch import nn
from torch.optim.swa_utils import AveragedModel
from torch.utils.data.dataloader import DataLoader, default_collate

NORM_LAYERS = (
    nn.modules.batchnorm._BatchNorm,
    nn.modules.instancenorm._InstanceNorm,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.LocalResponseNorm,
)


class WeightEMA(AveragedModel):
    """An exponential moving average of the weights and the batch-norm buffers."""

    def __init__(self, model, decay=0.9, device="cpu"):
        def blend(averaged, current, count):
            return decay * averaged + (1 - decay) * current

        super().__init__(model, device, blend, use_buffers=True)


def decay_groups(model, weight_decay, norm_decay=None, by_name=()):
    """Optimizer groups: parameters named in ``by_name`` first, then those of norm layers,
    then the rest, each group with its own weight decay."""
    buckets = {name: [] for name, _ in by_name}
    buckets.update(norm=[], rest=[])
    decays = dict(by_name, norm=norm_decay, rest=weight_decay)

    def visit(module, path):
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            full = f"{path}.{name}" if path else name
            key = next((k for k in dict(by_name) if k in (name, full)), None)
            if key is None:
                use_norm = norm_decay is not None and isinstance(module, NORM_LAYERS)
                key = "norm" if use_norm else "rest"
            buckets[key].append(param)
        for child_name, child in module.named_children():
            visit(child, f"{path}.{child_name}" if path else child_name)

    visit(model, "")
    return [{"params": ps, "weight_decay": decays[k]} for k, ps in buckets.items() if ps]


class SmallConvNet(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1, bias=False),
            nn.BatchNorm2d(6),
            nn.ReLU(inplace=True),
            nn.Conv2d(6, 8, 3, stride=2, padding=1),
            nn.GroupNorm(2, 8),
            nn.ReLU(inplace=True),
        )
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.ln = nn.LayerNorm(8)
        self.classifier = nn.Linear(8, classes)

    def forward(self, x):
        return self.classifier(self.ln(torch.flatten(self.pool(self.stem(x)), 1)))


def make_optimizer(groups, cfg):
    if cfg.opt in ("sgd", "sgd_nesterov"):
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=0.9, weight_decay=cfg.wd,
                               nesterov=cfg.opt.endswith("nesterov"))
    if cfg.opt == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.wd)
    raise ValueError(cfg.opt)


def make_schedule(opt, cfg):
    sched = torch.optim.lr_scheduler
    if cfg.schedule == "cosine":
        after = sched.CosineAnnealingLR(opt, T_max=cfg.epochs - cfg.warmup, eta_min=1e-4)
    elif cfg.schedule == "step":
        after = sched.StepLR(opt, step_size=1, gamma=0.5)
    else:
        after = sched.ExponentialLR(opt, gamma=0.7)
    if cfg.warmup_kind == "linear":
        before = sched.LinearLR(opt, start_factor=0.1, total_iters=cfg.warmup)
    else:
        before = sched.ConstantLR(opt, factor=0.25, total_iters=cfg.warmup)
    return sched.SequentialLR(opt, schedulers=[before, after], milestones=[cfg.warmup])


def one_epoch(model, loss_fn, opt, scaler, loader, ema, epoch, cfg):
    model.train()
    for step, (x, y) in enumerate(loader):
        x, y = x.to(cfg.device), y.to(cfg.device)
        with torch.cuda.amp.autocast(enabled=cfg.amp):
            loss = loss_fn(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
        nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        scaler.step(opt)
        scaler.update()
        if step % cfg.ema_every == 0:
            ema.update_parameters(model)
            if epoch < cfg.warmup:
                ema.n_averaged.fill_(0)  # while warming up the average just copies the model
        record.append(loss.item())


def mean_loss(model, loss_fn, loader, device):
    model.eval()
    total = 0.0
    with torch.inference_mode():
        for x, y in loader:
            total += loss_fn(model(x.to(device)), y.to(device)).item()
    return total / len(loader)


def run(cfg, images, labels):
    device = torch.device(cfg.device)
    train_set = torch.utils.data.TensorDataset(images, labels)
    sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=2, rank=cfg.rank, shuffle=True)
    train_loader = DataLoader(
        train_set, batch_size=cfg.batch, sampler=sampler, num_workers=0,
        pin_memory=True, collate_fn=default_collate)
    held_out = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(images[-6:], labels[-6:]), batch_size=3,
        sampler=torch.utils.data.SequentialSampler(range(6)))

    model = SmallConvNet()
    initialize(model)
    model.to(device)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    groups = decay_groups(model, cfg.wd, norm_decay=0.0, by_name=[("bias", 0.0)])
    record.append(repr([(len(g["params"]), g["weight_decay"]) for g in groups]))
    opt = make_optimizer(groups, cfg)
    scaler = torch.amp.GradScaler("cpu")
    schedule = make_schedule(opt, cfg)
    ema = WeightEMA(model, decay=0.8, device=device)

    first = 0
    if cfg.resume:
        ckpt = torch.load(cfg.resume, map_location="cpu", weights_only=False)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        schedule.load_state_dict(ckpt["lr_scheduler"])
        ema.load_state_dict(ckpt["model_ema"])
        scaler.load_state_dict(ckpt["scaler"])
        first = ckpt["epoch"] + 1

    for epoch in range(first, cfg.epochs):
        sampler.set_epoch(epoch)
        one_epoch(model, loss_fn, opt, scaler, train_loader, ema, epoch, cfg)
        schedule.step()
        record.extend([
            mean_loss(model, loss_fn, held_out, device),
            mean_loss(ema, loss_fn, held_out, device),
            opt.param_groups[0]["lr"],
            params_of(model),
            {k: v.detach().numpy().copy() for k, v in ema.state_dict().items()},
        ])
        ckpt = {
            "model": model.state_dict(), "optimizer": opt.state_dict(),
            "lr_scheduler": schedule.state_dict(), "model_ema": ema.state_dict(),
            "scaler": scaler.state_dict(), "epoch": epoch, "args": cfg,
        }
        torch.save(ckpt, os.path.join(cfg.out, f"epoch_{epoch}.pth"))


images, labels = torch.randn(20, 3, 6, 6), torch.randint(0, 4, (20,))
recipes = [
    dict(opt="sgd_nesterov", lr=0.05, schedule="cosine", warmup_kind="linear"),
    dict(opt="adamw", lr=5e-3, schedule="step", warmup_kind="constant"),
]
for recipe in recipes:
    cfg = argparse.Namespace(device="cpu", rank=1, batch=4, wd=1e-3, clip=1.0, epochs=3,
                             warmup=1, ema_every=2, amp=False, out=output_dir, resume="",
                             **recipe)
    run(cfg, images, labels)
    start = len(record)
    cfg.resume = os.path.join(output_dir, "epoch_0.pth")
    run(cfg, images, labels)
    resumed += [(start, len(record))]
'''

TRAINING_RECIPE_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.utils.data\n", "import retrograd.utils.data\n"),
    ("        scaler.scale(loss).backward()\n", "        grads = scaler.scale(loss).backward()\n"),
    ("        scaler.unscale_(opt)  #", "        scaler.unscale_(opt, grads)  #"),
    (
        "        nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)\n"
        "        scaler.step(opt)\n",
        "        nn.utils.clip_grad_norm_(grads, model.parameters(), cfg.clip)\n"
        "        scaler.step(opt, grads)\n",
    ),
]


def test_classification_recipe_trains_and_resumes_as_torch(capsys, tmp_path):
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
            TRAINING_RECIPE_SOURCE, TRAINING_RECIPE_STEPS, capsys, 21401, initialize=initialize,
            params_of=params_of, argparse=argparse, os=os, make_output_dir=output_dir,
            make_resumed=resumed,
        )  # fmt: skip
    # groups: every bias (the name key wins over the norm layers: their biases too), the
    # norms' weights (no decay), the other weights
    assert theirs[0] == "[(5, 0.0), (3, 0.0), (3, 0.001)]"
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
    assert spans["retrograd"] == spans["torch"]
    # the run resumed after epoch 0 repeats the uninterrupted run's last two epochs
    for start, end in spans["retrograd"]:
        tail = end - start - 1  # the group record, then epochs 1 and 2
        assert_records_agree(ours[start + 1 : end], ours[start - tail : start], rtol=0, atol=0)
