# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd (the harness: ``tests/real_ports.py``): weight
averaging as training scripts write it, run against torch's run of the same code from the
same weights and draws.

- timm's ``ModelEmaV3`` (``utils/model_ema.py``): ``get_decay`` with ``update_after_step`` and
  the ``use_warmup`` power schedule, ``apply_update_``'s ``torch._foreach_lerp_`` over the
  floating ``state_dict()`` values (non-floating ones ``copy_``-ed), the per-tensor
  ``lerp_`` path (``foreach=False``), ``apply_update_no_buffers_`` (``exclude_buffers``:
  ``_foreach_lerp_`` of the parameters, buffers copied), ``set``, under ``@torch.no_grad()``;
- the Stochastic Weight Averaging recipe of torch's docs (``optim.rst``): ``AveragedModel``,
  a ``CosineAnnealingLR`` until ``swa_start``, then ``SWALR`` with ``swa_lr`` and
  ``anneal_epochs``, ``swa_model.update_parameters(model)``, and
  ``torch.optim.swa_utils.update_bn(loader, swa_model)`` recomputing the BatchNorm statistics
  of the averaged weights; ``OneCycleLR`` per batch for the EMA run.

The lines changed: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import random

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


AVERAGING_SOURCE = '''
from copy import deepcopy
from typing import Optional

import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, SWALR


class ModelEmaV3(nn.Module):
    def __init__(
            self,
            model,
            decay: float = 0.9999,
            min_decay: float = 0.0,
            update_after_step: int = 0,
            use_warmup: bool = False,
            warmup_gamma: float = 1.0,
            warmup_power: float = 2/3,
            device: Optional[torch.device] = None,
            foreach: bool = True,
            exclude_buffers: bool = False,
    ):
        super().__init__()
        # make a copy of the model for accumulating moving average of weights
        self.module = deepcopy(model)
        self.module.eval()
        self.decay = decay
        self.min_decay = min_decay
        self.update_after_step = update_after_step
        self.use_warmup = use_warmup
        self.warmup_gamma = warmup_gamma
        self.warmup_power = warmup_power
        self.foreach = foreach
        self.device = device  # perform ema on different device from model if set
        self.exclude_buffers = exclude_buffers
        if self.device is not None and device != next(model.parameters()).device:
            self.foreach = False  # cannot use foreach methods with different devices
            self.module.to(device=device)

    def get_decay(self, step: Optional[int] = None) -> float:
        """
        Compute the decay factor for the exponential moving average.
        """
        if step is None:
            return self.decay

        step = max(0, step - self.update_after_step - 1)
        if step <= 0:
            return 0.0

        if self.use_warmup:
            decay = 1 - (1 + step / self.warmup_gamma) ** -self.warmup_power
            decay = max(min(decay, self.decay), self.min_decay)
        else:
            decay = self.decay

        return decay

    @torch.no_grad()
    def update(self, model, step: Optional[int] = None):
        decay = self.get_decay(step)
        if self.exclude_buffers:
            self.apply_update_no_buffers_(model, decay)
        else:
            self.apply_update_(model, decay)

    def apply_update_(self, model, decay: float):
        # interpolate parameters and buffers
        if self.foreach:
            ema_lerp_values = []
            model_lerp_values = []
            for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                if ema_v.is_floating_point():
                    ema_lerp_values.append(ema_v)
                    model_lerp_values.append(model_v)
                else:
                    ema_v.copy_(model_v)

            if hasattr(torch, '_foreach_lerp_'):
                torch._foreach_lerp_(ema_lerp_values, model_lerp_values, weight=1. - decay)
            else:
                torch._foreach_mul_(ema_lerp_values, scalar=decay)
                torch._foreach_add_(ema_lerp_values, model_lerp_values, alpha=1. - decay)
        else:
            for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                if ema_v.is_floating_point():
                    ema_v.lerp_(model_v.to(device=self.device), weight=1. - decay)
                else:
                    ema_v.copy_(model_v.to(device=self.device))

    def apply_update_no_buffers_(self, model, decay: float):
        # interpolate parameters, copy buffers
        ema_params = tuple(self.module.parameters())
        model_params = tuple(model.parameters())
        if self.foreach:
            if hasattr(torch, '_foreach_lerp_'):
                torch._foreach_lerp_(ema_params, model_params, weight=1. - decay)
            else:
                torch._foreach_mul_(ema_params, scalar=decay)
                torch._foreach_add_(ema_params, model_params, alpha=1 - decay)
        else:
            for ema_p, model_p in zip(ema_params, model_params):
                ema_p.lerp_(model_p.to(device=self.device), weight=1. - decay)

        for ema_b, model_b in zip(self.module.buffers(), model.buffers()):
            ema_b.copy_(model_b.to(device=self.device))

    @torch.no_grad()
    def set(self, model):
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
            ema_v.copy_(model_v.to(device=self.device))

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def make_model():
    model = nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    initialize(model)
    return model


loader = [(torch.randn(6, 5), torch.randint(0, 3, (6,))) for _ in range(3)]
test_input = torch.randn(4, 5)
loss_fn = nn.CrossEntropyLoss()

# -- timm's EMA, three ways, under a OneCycleLR ---------------------------------------------
for options in ({"foreach": True, "use_warmup": True, "update_after_step": 1},
                {"foreach": False, "decay": 0.7},
                {"exclude_buffers": True, "decay": 0.6}):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.2, total_steps=3 * len(loader), pct_start=0.4)
    model_ema = ModelEmaV3(model, **options)
    model_ema.set(model)
    step = 0
    for epoch in range(3):
        model.train()
        for input, target in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(input), target)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            model_ema.update(model, step=step)
            record.append(loss.item())
            record.append(model_ema.get_decay(step))
        record.append({k: v.detach().numpy().copy() for k, v in model_ema.state_dict().items()})
    with torch.no_grad():
        record.append(model_ema(test_input).numpy())

# -- torch's SWA recipe ----------------------------------------------------------------------
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
swa_model = torch.optim.swa_utils.AveragedModel(model)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6)
swa_start = 2
swa_scheduler = SWALR(optimizer, swa_lr=0.05, anneal_epochs=2, anneal_strategy="cos")
for epoch in range(6):
    for input, target in loader:
        optimizer.zero_grad()
        loss_fn(model(input), target).backward()
        optimizer.step()
    if epoch > swa_start:
        swa_model.update_parameters(model)
        swa_scheduler.step()
    else:
        scheduler.step()
    record.append(optimizer.param_groups[0]["lr"])
    record.append(params_of(model))
    record.append(float(swa_model.n_averaged))
# Update bn statistics for the swa_model at the end
torch.optim.swa_utils.update_bn(loader, swa_model)
record.append({k: v.detach().numpy().copy() for k, v in swa_model.state_dict().items()})
# Use swa_model to make predictions on test data
swa_model.eval()
with torch.no_grad():
    preds = swa_model(test_input)
record.append(preds.numpy())
'''

AVERAGING_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
    (
        "        loss_fn(model(input), target).backward()\n        optimizer.step()\n",
        "        grads = loss_fn(model(input), target).backward()\n        optimizer.step(grads)\n",
    ),
]


def test_timm_ema_v3_and_torch_swa_recipe_average_weights_as_torch(capsys):
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

    (theirs, ours), _ = runs_with_draws(
        AVERAGING_SOURCE, AVERAGING_STEPS, capsys, 21701, initialize=initialize,
        params_of=params_of,
    )  # fmt: skip
    # the warmup decay: 0 until update_after_step + 1, then 1 - (1 + step) ** -2/3
    assert theirs[1] == theirs[3] == 0.0
    assert theirs[5] == pytest.approx(1 - 2 ** (-2 / 3))
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
