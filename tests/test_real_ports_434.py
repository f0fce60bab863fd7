"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of ildoonet/pytorch-gradual-warmup-lr: a ``_LRScheduler`` subclass that warms the rate up
and then hands over to another schedule, driving training runs against torch's runs of the
same code from the same weights and batches.

- the scheduler: ``get_lr`` from ``self.last_epoch`` and ``self.base_lrs``, writing the next
  schedule's ``base_lrs`` once the warmup ends and returning its ``get_last_lr()``;
  ``step(epoch)`` through ``super(...).step(epoch)`` (torch's deprecated epoch argument) and,
  once handed over, ``then.step(epoch - warmup)`` or ``step(None)`` with ``last_epoch`` and
  ``_last_lr`` written from the next schedule's; ``type(self.then) == ReduceLROnPlateau``; a
  plateau path that writes the warmup rates into the param groups itself and then calls
  ``then.step(metrics, epoch - warmup)`` (ReduceLROnPlateau's deprecated second argument,
  which retrograd refused: fixed);
- a demonstration (``torch.nn.Parameter(torch.randn(..., requires_grad=True))`` in a list given
  to ``torch.optim.sgd.SGD``, a ``StepLR`` after a ``factor=1`` warmup, stepped with the
  epoch, the rate printed), and a training loop per next schedule (``StepLR``,
  ``CosineAnnealingLR``, ``ExponentialLR``, ``ReduceLROnPlateau`` on the validation loss,
  none) with a ``factor`` of 1 or more, stepped with or without the epoch.

The port changes the import lines and the gradient lines; the demonstration's steps of an
optimizer that holds no gradient (torch's step skips such parameters) become no-ops:
retrograd's ``step`` takes the gradients ``backward()`` returned and there are none.
``initialize`` gives the training loops torch's initial weights.
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

from real_ports import assert_records_agree, initializer, runs_with_draws

WARMUP_SOURCE = """
# -- the scheduler -------------------------------------------------------------------------------
from torch.optim.lr_scheduler import _LRScheduler, ReduceLROnPlateau


class LinearWarmup(_LRScheduler):
    # Ramps each group's rate over `warmup_epochs` epochs up to `factor` times its base rate
    # (from zero when the factor is 1), then lets `then` schedule from there.
    def __init__(self, optimizer, factor, warmup_epochs, then=None):
        if factor < 1.0:
            raise ValueError("factor must be at least 1")
        self.factor = factor
        self.warmup_epochs = warmup_epochs
        self.then = then
        self.handed_over = False
        super(LinearWarmup, self).__init__(optimizer)

    def _ramp(self, epoch):
        progress = epoch / self.warmup_epochs
        if self.factor == 1.0:
            return [lr * progress for lr in self.base_lrs]
        return [lr * (1.0 + (self.factor - 1.0) * progress) for lr in self.base_lrs]

    def get_lr(self):
        if self.last_epoch <= self.warmup_epochs:
            return self._ramp(float(self.last_epoch))
        if self.then is None:
            return [lr * self.factor for lr in self.base_lrs]
        if not self.handed_over:
            self.then.base_lrs = [lr * self.factor for lr in self.base_lrs]
            self.handed_over = True
        return self.then.get_last_lr()

    def step(self, epoch=None, metrics=None):  # (epoch: the deprecated form)
        if type(self.then) == ReduceLROnPlateau:
            return self._step_on_plateau(metrics, epoch)
        if not (self.handed_over and self.then):
            return super(LinearWarmup, self).step(epoch)
        self.then.step(None if epoch is None else epoch - self.warmup_epochs)
        self.last_epoch = self.then.last_epoch + self.warmup_epochs + 1
        self._last_lr = self.then.get_last_lr()

    def _step_on_plateau(self, metrics, epoch):
        # a plateau schedule steps after each epoch's validation: epoch 0 counts as 1
        self.last_epoch = max(1, self.last_epoch + 1 if epoch is None else epoch)
        if self.last_epoch > self.warmup_epochs:
            self.then.step(metrics, self.last_epoch - self.warmup_epochs)
            return
        for group, lr in zip(self.optimizer.param_groups, self._ramp(self.last_epoch)):
            group["lr"] = lr


# -- a demonstration -----------------------------------------------------------------------------
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, ExponentialLR, StepLR
from torch.optim.sgd import SGD  # (by its module's path, as older scripts import it)

weights = [torch.nn.Parameter(torch.randn(3, 2, requires_grad=True))]
sgd = SGD(weights, 0.2)
warmup = LinearWarmup(sgd, factor=1, warmup_epochs=4, then=StepLR(sgd, step_size=4, gamma=0.5))
sgd.zero_grad()
sgd.step()  # no gradient yet: nothing moves, but the schedulers see a step first
for epoch in range(1, 14):
    warmup.step(epoch)
    rate = sgd.param_groups[0]["lr"]
    print(f"epoch {epoch}: lr {rate:.4f}")
    record.append(rate)
    sgd.step()


# -- training loops ------------------------------------------------------------------------------
import torch.nn as nn
from torch.nn import functional as F

train_set = [(torch.randn(5, 3), torch.randint(0, 2, (5,))) for _ in range(2)]
val_x, val_y = torch.randn(5, 3), torch.randint(0, 2, (5,))
for then_name, factor, pass_epoch in SETTINGS:
    net = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 2))
    initialize(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    then = {
        "step": lambda: StepLR(optimizer, step_size=2, gamma=0.5),
        "cosine": lambda: CosineAnnealingLR(optimizer, T_max=5, eta_min=0.002),
        "exponential": lambda: ExponentialLR(optimizer, gamma=0.7),
        "plateau": lambda: ReduceLROnPlateau(optimizer, factor=0.5, patience=1),
        None: lambda: None,
    }[then_name]()
    schedule = LinearWarmup(optimizer, factor=factor, warmup_epochs=2, then=then)
    for epoch in range(1, 9):
        for x, y in train_set:
            loss = F.cross_entropy(net(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            val_loss = F.cross_entropy(net(val_x), val_y).item()
        if then_name == "plateau":
            schedule.step(epoch if pass_epoch else None, metrics=val_loss)
        elif pass_epoch:
            schedule.step(epoch)
        else:
            schedule.step()
        rate = optimizer.param_groups[0]["lr"]
        record.append([loss.item(), val_loss, rate, schedule.last_epoch])
    record.append({key: w.detach().numpy().copy() for key, w in net.named_parameters()})
"""

WARMUP_STEPS = [
    (
        "import torch\nfrom torch.optim.lr_scheduler import CosineAnnealingLR",
        "import retrograd as torch\nfrom torch.optim.lr_scheduler import CosineAnnealingLR",
    ),
    (
        "import torch.nn as nn\n",
        "import retrograd.nn as nn\n",
    ),
    ("sgd.step()", "pass  # (sgd.step(): no gradients, nothing to update)"),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]

SETTINGS = {
    "after_step_with_epochs": [("step", 1, True), ("step", 8, False)],
    "after_cosine_and_exponential": [
        ("cosine", 8, True),
        ("exponential", 1, False),
        (None, 4, False),
    ],
    "after_plateau": [("plateau", 1, True), ("plateau", 8, False)],
}


@pytest.mark.parametrize("settings", sorted(SETTINGS))
def test_gradual_warmup_scheduler_drives_training_as_torch(capsys, settings):
    """The demonstration's printed rates, then each training loop's losses, rates and epochs
    per epoch and final weights agree with torch's."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the deprecated epoch argument, both libraries)
        (theirs, ours), logs = runs_with_draws(
            WARMUP_SOURCE, WARMUP_STEPS, capsys, 43401, initialize=initializer(),
            SETTINGS=SETTINGS[settings],
        )  # fmt: skip
    assert logs[1] == logs[0]
    assert theirs[:5] == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.2])  # the demonstration's warmup
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-6)
