# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
ildoonet/pytorch-gradual-warmup-lr's ``GradualWarmupScheduler`` (``warmup_scheduler/
scheduler.py`` whole, and ``run.py``), a ``_LRScheduler`` subclass that warms the rate up and
then hands over to another schedule, driving training runs against torch's runs of the same
code from the same weights and batches.

- ``get_lr`` from ``self.last_epoch`` and ``self.base_lrs``, writing the after-schedule's
  ``base_lrs`` once the warmup ends and returning its ``get_last_lr()``; ``step(epoch)``
  through ``super().step(epoch)`` (torch's deprecated epoch argument) and, once finished,
  ``after_scheduler.step(epoch - self.total_epoch)`` or ``step(None)`` with ``last_epoch`` and
  ``_last_lr`` written from the after-schedule's; ``type(self.after_scheduler) !=
  ReduceLROnPlateau``; ``step_ReduceLROnPlateau``, which writes the warmup rates into the
  param groups itself and then calls ``after_scheduler.step(metrics, epoch - total_epoch)``
  (ReduceLROnPlateau's deprecated second argument, which retrograd refused: fixed);
- ``run.py`` as written (``torch.nn.Parameter(torch.randn(2, 2, requires_grad=True))`` in a
  list given to ``torch.optim.sgd.SGD``, a ``StepLR`` after a ``multiplier=1`` warmup, stepped
  with the epoch), and a training loop per after-schedule (``StepLR``, ``CosineAnnealingLR``,
  ``ExponentialLR``, ``ReduceLROnPlateau`` on the validation loss, none) with a ``multiplier``
  of 1 or 8, stepped with or without the epoch.

The port changes the import lines and the gradient lines; ``run.py``'s two steps of an
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

WARMUP_SOURCE = '''
# -- warmup_scheduler/scheduler.py --------------------------------------------------------------
from torch.optim.lr_scheduler import _LRScheduler
from torch.optim.lr_scheduler import ReduceLROnPlateau


class GradualWarmupScheduler(_LRScheduler):
    """ Gradually warm-up(increasing) learning rate in optimizer.
    Proposed in 'Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour'.

    Args:
        optimizer (Optimizer): Wrapped optimizer.
        multiplier: target learning rate = base lr * multiplier if multiplier > 1.0. if multiplier = 1.0, lr starts from 0 and ends up with the base_lr.
        total_epoch: target learning rate is reached at total_epoch, gradually
        after_scheduler: after target_epoch, use this scheduler(eg. ReduceLROnPlateau)
    """

    def __init__(self, optimizer, multiplier, total_epoch, after_scheduler=None):
        self.multiplier = multiplier
        if self.multiplier < 1.:
            raise ValueError('multiplier should be greater thant or equal to 1.')
        self.total_epoch = total_epoch
        self.after_scheduler = after_scheduler
        self.finished = False
        super(GradualWarmupScheduler, self).__init__(optimizer)

    def get_lr(self):
        if self.last_epoch > self.total_epoch:
            if self.after_scheduler:
                if not self.finished:
                    self.after_scheduler.base_lrs = [base_lr * self.multiplier for base_lr in self.base_lrs]
                    self.finished = True
                return self.after_scheduler.get_last_lr()
            return [base_lr * self.multiplier for base_lr in self.base_lrs]

        if self.multiplier == 1.0:
            return [base_lr * (float(self.last_epoch) / self.total_epoch) for base_lr in self.base_lrs]
        else:
            return [base_lr * ((self.multiplier - 1.) * self.last_epoch / self.total_epoch + 1.) for base_lr in self.base_lrs]

    def step_ReduceLROnPlateau(self, metrics, epoch=None):
        if epoch is None:
            epoch = self.last_epoch + 1
        self.last_epoch = epoch if epoch != 0 else 1  # ReduceLROnPlateau is called at the end of epoch, whereas others are called at beginning
        if self.last_epoch <= self.total_epoch:
            warmup_lr = [base_lr * ((self.multiplier - 1.) * self.last_epoch / self.total_epoch + 1.) for base_lr in self.base_lrs]
            for param_group, lr in zip(self.optimizer.param_groups, warmup_lr):
                param_group['lr'] = lr
        else:
            if epoch is None:
                self.after_scheduler.step(metrics, None)
            else:
                self.after_scheduler.step(metrics, epoch - self.total_epoch)

    def step(self, epoch=None, metrics=None):
        if type(self.after_scheduler) != ReduceLROnPlateau:
            if self.finished and self.after_scheduler:
                if epoch is None:
                    self.after_scheduler.step(None)
                else:
                    self.after_scheduler.step(epoch - self.total_epoch)
                self.last_epoch = self.after_scheduler.last_epoch + self.total_epoch + 1
                self._last_lr = self.after_scheduler.get_last_lr()
            else:
                return super(GradualWarmupScheduler, self).step(epoch)
        else:
            self.step_ReduceLROnPlateau(metrics, epoch)


# -- warmup_scheduler/run.py ---------------------------------------------------------------------
import torch
from torch.optim.lr_scheduler import StepLR, ExponentialLR
from torch.optim.sgd import SGD



if __name__ == '__main__' or True:  # (run as a module here)
    model = [torch.nn.Parameter(torch.randn(2, 2, requires_grad=True))]
    optim = SGD(model, 0.1)

    # scheduler_warmup is chained with schduler_steplr
    scheduler_steplr = StepLR(optim, step_size=10, gamma=0.1)
    scheduler_warmup = GradualWarmupScheduler(optim, multiplier=1, total_epoch=5, after_scheduler=scheduler_steplr)

    # this zero gradient update is needed to avoid a warning message, issue #8.
    optim.zero_grad()
    optim.step()

    for epoch in range(1, 20):
        scheduler_warmup.step(epoch)
        print(epoch, optim.param_groups[0]['lr'])
        record.append(optim.param_groups[0]['lr'])

        optim.step()    # backward pass (update network)


# -- training loops around it -------------------------------------------------------------------
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR

batches = [(torch.randn(6, 4), torch.randint(0, 3, (6,))) for _ in range(2)]
val_batch = (torch.randn(6, 4), torch.randint(0, 3, (6,)))
for after, multiplier, with_epoch in SETTINGS:
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    initialize(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if after == "step":
        after_scheduler = StepLR(optimizer, step_size=3, gamma=0.5)
    elif after == "cosine":
        after_scheduler = CosineAnnealingLR(optimizer, T_max=6, eta_min=0.001)
    elif after == "exponential":
        after_scheduler = ExponentialLR(optimizer, gamma=0.8)
    elif after == "plateau":
        after_scheduler = ReduceLROnPlateau(optimizer, patience=1, factor=0.5)
    else:
        after_scheduler = None
    scheduler = GradualWarmupScheduler(optimizer, multiplier=multiplier, total_epoch=3, after_scheduler=after_scheduler)
    for epoch in range(1, 11):
        for x, y in batches:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            val_loss = F.cross_entropy(model(val_batch[0]), val_batch[1]).item()
        if after == "plateau":
            scheduler.step(epoch if with_epoch else None, metrics=val_loss)
        elif with_epoch:
            scheduler.step(epoch)
        else:
            scheduler.step()
        record.append([loss.item(), val_loss, optimizer.param_groups[0]["lr"], scheduler.last_epoch])
    record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
'''

WARMUP_STEPS = [
    (
        "import torch\nfrom torch.optim.lr_scheduler import StepLR",
        "import retrograd as torch\nfrom torch.optim.lr_scheduler import StepLR",
    ),
    (
        "import torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    ("    optim.step()\n", "    pass  # (optim.step(): no gradients, nothing to update)\n"),
    (
        "        optim.step()    # backward pass (update network)",
        "        pass    # (optim.step(): no gradients, nothing to update)",
    ),
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
    """run.py's printed rates, then each training loop's losses, rates and epochs per epoch and
    final weights agree with torch's."""
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
    assert theirs[:6] == pytest.approx([0.02, 0.04, 0.06, 0.08, 0.1, 0.1])  # run.py's warmup
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-6)
