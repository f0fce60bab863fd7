"""A program written here in the style of davidtvs/pytorch-lr-finder (a learning-rate range
test: raise the rate each batch, track a smoothed loss, stop on divergence, suggest the steepest
descent, restore the model and optimizer), run under torch and, ported, under retrograd from
the same weights and batches (the harness: ``tests/real_ports.py``).

What it exercises: a state cache of the model's and the optimizer's ``state_dict()`` kept in
memory by ``copy.deepcopy`` or on disk by ``torch.save`` into a cache folder and read back by
``torch.load(path, map_location=lambda storage, location: storage)``, ``reset()`` loading both
back; a refusal of optimizers already under a scheduler (``"initial_lr"`` in a param group);
its own ``lr_scheduler._LRScheduler`` subclasses (linear and exponential ``get_lr`` from
``self.last_epoch`` and ``self.base_lrs``, read by ``schedule.get_lr()[0]``), the smoothed loss
and the divergence stop, the start rate written into ``param_groups``; gradient accumulation
(``loss /= steps`` in place, ``total += loss``); the ``torch.amp`` path
(``torch.amp.autocast(**amp_config)`` entered by ``with``,
``scaler.scale(loss).backward()``, ``scaler.step``/``update``) with a disabled ``GradScaler``
on the CPU; validation under ``torch.no_grad()``; a batch iterator that restarts an exhausted
``DataLoader``; ``obj.to(device, non_blocking=...)``; the steepest-gradient suggestion by
``np.gradient`` drawn on a given axes.

What stands in: MNIST-shaped random images with random labels (no shuffling: each library's
sampler would draw its own order), matplotlib's axes by a recorder. The port changes the import
lines and the gradient lines (each micro-batch's gradients summed, then given to ``step``). Both
run in float64: the exponential test runs Adam up to lr=1000 until the loss diverges, which
magnifies float32 rounding.
"""

from __future__ import annotations

import random

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

LR_RANGE_SOURCE = """
import copy
import os

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset


class Snapshot:
    # the model's and optimizer's states, in memory or as files in `folder`
    def __init__(self, in_memory, folder=None):
        self.in_memory, self.folder, self.saved = in_memory, folder, {}

    def keep(self, key, state):
        if self.in_memory:
            self.saved[key] = copy.deepcopy(state)
        else:
            path = os.path.join(self.folder, f"snapshot_{key}_{id(self)}.pt")
            torch.save(state, path)
            self.saved[key] = path

    def restore(self, key):
        if self.in_memory:
            return self.saved[key]
        return torch.load(self.saved[key], map_location=lambda storage, location: storage)


class LinearRamp(lr_scheduler._LRScheduler):
    def __init__(self, optimizer, end_lr, steps, last_epoch=-1):
        self.end_lr, self.steps = end_lr, steps
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        frac = self.last_epoch / (self.steps - 1)
        return [lr + frac * (self.end_lr - lr) for lr in self.base_lrs]


class ExpRamp(lr_scheduler._LRScheduler):
    def __init__(self, optimizer, end_lr, steps, last_epoch=-1):
        self.end_lr, self.steps = end_lr, steps
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        frac = self.last_epoch / (self.steps - 1)
        return [lr * (self.end_lr / lr) ** frac for lr in self.base_lrs]


def batches_forever(loader):
    while True:  # start the loader over once it runs out
        for batch in loader:
            yield batch


class RangeTest:
    def __init__(self, model, optimizer, loss_fn, device="cpu", in_memory=True, folder=None,
                 amp_config=None, scaler=None):
        for group in optimizer.param_groups:
            if "initial_lr" in group:
                raise RuntimeError("the optimizer is already driven by a scheduler")
        self.model, self.optimizer, self.loss_fn, self.device = model, optimizer, loss_fn, device
        self.amp_config, self.scaler = amp_config, scaler
        self.snapshot = Snapshot(in_memory, folder)
        self.snapshot.keep("model", model.state_dict())
        self.snapshot.keep("optimizer", optimizer.state_dict())
        self.history = dict(lr=[], loss=[])

    def reset(self):
        self.model.load_state_dict(self.snapshot.restore("model"))
        self.optimizer.load_state_dict(self.snapshot.restore("optimizer"))

    def run(self, loader, val_loader=None, start_lr=None, end_lr=10, steps=100, mode="exp",
            beta=0.05, diverge_at=5, accumulate=1):
        self.history = dict(lr=[], loss=[])
        if start_lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = start_lr
        ramp = (ExpRamp if mode == "exp" else LinearRamp)(self.optimizer, end_lr, steps)
        source, best = batches_forever(loader), None
        for step in range(steps):
            loss = self.train_step(source, accumulate)
            if val_loader is not None:
                loss = self.validate(val_loader)
            self.history["lr"].append(ramp.get_lr()[0])
            ramp.step()
            if step > 0:
                loss = beta * loss + (1 - beta) * self.history["loss"][-1]
            best = loss if best is None or loss < best else best
            self.history["loss"] += [loss]
            if loss > diverge_at * best:
                print("loss diverged: stopping the range test")
                break

    def train_step(self, source, accumulate):
        self.model.train()
        self.optimizer.zero_grad()
        total = None
        for _ in range(accumulate):
            x, y = next(source)
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            if self.amp_config is not None:
                autocast = torch.amp.autocast(**self.amp_config)
                with autocast:
                    loss = self.loss_fn(self.model(x), y)
                loss /= accumulate
                self.scaler.scale(loss).backward()
            else:
                loss = self.loss_fn(self.model(x), y)
                loss /= accumulate
                loss.backward()
            total = loss if total is None else total + loss
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        return total.item()

    def validate(self, loader):
        self.model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for x, y in loader:
                logits = self.model(x.to(self.device))
                total += self.loss_fn(logits, y.to(self.device)).item() * len(y)
                count += len(y)
        return total / count

    def plot(self, ax, skip_start=10, skip_end=5):
        lrs = self.history["lr"][skip_start:-skip_end]
        losses = self.history["loss"][skip_start:-skip_end]
        steepest = int(np.gradient(np.array(losses)).argmin())
        ax.plot(lrs, losses)
        ax.scatter(lrs[steepest], losses[steepest], s=75, marker="o", color="red", zorder=3)
        ax.set_xscale("log")
        ax.set_xlabel("learning rate (log scale)")
        ax.set_ylabel("Loss")
        return ax, lrs[steepest]


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        conv = nn.Conv2d(1, 3, 3, stride=2, bias=False)
        self.features = nn.Sequential(conv, nn.BatchNorm2d(3), nn.ReLU())
        self.head = nn.Linear(3 * 6 * 6, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


train_data = TensorDataset(torch.randn(12, 1, 14, 14), torch.randint(0, 10, (12,)))
val_data = TensorDataset(torch.randn(6, 1, 14, 14), torch.randint(0, 10, (6,)))
train_loader = DataLoader(train_data, batch_size=4)
val_loader = DataLoader(val_data, batch_size=3)
net = SmallNet()
initialize(net)
ce = nn.CrossEntropyLoss()


def weights():
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


finder = RangeTest(net, optim.Adam(net.parameters(), lr=1e-7, weight_decay=1e-2), ce)
finder.run(train_loader, end_lr=1000, steps=16)
record.extend([finder.history["lr"], finder.history["loss"], weights()])
axes = Axes()
_, suggestion = finder.plot(axes, skip_start=2, skip_end=1)
record.extend([suggestion, axes.calls])
finder.reset()
record.append(weights())

sgd = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
finder = RangeTest(net, sgd, ce, in_memory=False, folder=cache_dir)
finder.run(train_loader, val_loader=val_loader, end_lr=1, steps=5, mode="linear")
record.extend([finder.history["lr"], finder.history["loss"], len(os.listdir(cache_dir)) == 2])
finder.reset()
record.append(weights())

# two micro-batches of 4 per step, through a disabled GradScaler
finder = RangeTest(net, optim.AdamW(net.parameters(), lr=1e-3), ce,
                   amp_config=dict(device_type="cpu", enabled=False),
                   scaler=torch.amp.GradScaler("cpu", enabled=False))
finder.run(train_loader, start_lr=1e-4, end_lr=10, steps=4, accumulate=2)
record.extend([finder.history["lr"], finder.history["loss"], weights()])
"""

LR_RANGE_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "import torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "        self.optimizer.zero_grad()\n",
        "        self.optimizer.zero_grad()\n        grads = None\n",
    ),
    (
        "                self.scaler.scale(loss).backward()\n",
        "                g = self.scaler.scale(loss).backward()\n"
        "                grads = g if grads is None else grads + g\n",
    ),
    (
        "                loss.backward()\n",
        "                g = loss.backward()\n"
        "                grads = g if grads is None else grads + g\n",
    ),
    (
        "            self.scaler.step(self.optimizer)\n",
        "            self.scaler.step(self.optimizer, grads)\n",
    ),
    ("            self.optimizer.step()\n", "            self.optimizer.step(grads)\n"),
]


class _Axes:
    """A matplotlib ``Axes`` that records what is drawn on it (the calls and their keywords: the
    drawn values are the history, recorded apart)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def draw(*args, **kwargs):
            self.calls.append(f"{name}{sorted(kwargs.items())!r}")

        return draw


def test_lr_range_tests_and_resets_as_torch(capsys, tmp_path):
    """The exponential test with a divergence stop, the linear test against a validation set
    with the state cached on disk, and the accumulated test through a disabled GradScaler:
    each history, the suggested rate, what is drawn, and the weights after each test and each
    ``reset`` agree with torch's."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        text = LR_RANGE_SOURCE if lib is torch else port(LR_RANGE_SOURCE, LR_RANGE_STEPS)
        text = text.replace("from torch.", "from retrograd.") if lib is rg else text
        cache_dir = tmp_path / lib.__name__
        cache_dir.mkdir()
        record = []
        lib.set_default_dtype(lib.float64)
        try:
            with SharedDraws(lib, 43101):
                run_source(
                    text, lib, record=record, initialize=initialize, Axes=_Axes,
                    cache_dir=str(cache_dir),
                )  # fmt: skip
        finally:
            lib.set_default_dtype(lib.float32)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert "loss diverged: stopping the range test" in logs[0]
    assert logs[1] == logs[0]
    assert theirs[8] is True
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)
