"""Programs written here in the style of training scripts that average weights, run under torch
and, ported, under retrograd from the same weights and draws (the harness:
``tests/real_ports.py``).

- an exponential moving average of a model in the style of timm's ``ModelEmaV3``: a decay
  held at 0 until ``update_after_step`` and then following the warmup power schedule
  ``1 - (1 + step / gamma) ** -power``; updates under ``@torch.no_grad()`` by
  ``torch._foreach_lerp_`` over the floating ``state_dict()`` values (the others
  ``copy_``-ed, found by ``is_floating_point``), by per-tensor ``lerp_(..., weight=...)``
  (``foreach=False``), or over the parameters only with the buffers copied
  (``exclude_buffers``); ``set``; a ``deepcopy``-ed ``eval()`` copy; ``OneCycleLR`` per batch;
- Stochastic Weight Averaging as torch's docs lay it out: ``AveragedModel``, a
  ``CosineAnnealingLR`` until ``swa_start``, then ``SWALR`` with ``swa_lr``,
  ``anneal_epochs`` and ``anneal_strategy="cos"``, ``update_parameters(model)``,
  ``n_averaged``, and ``torch.optim.swa_utils.update_bn(loader, swa_model)`` recomputing the
  BatchNorm statistics of the averaged weights.

The port changes the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401 (a fixture: the tests seed every stream)
    params_of,
    runs_with_draws,
)


@pytest.fixture(autouse=True)
def _seeded(global_streams_restored):  # noqa: F811 (the fixture imported above)
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


AVERAGING_SOURCE = """
from copy import deepcopy

import torch
import torch.nn as nn
from torch.optim.swa_utils import SWALR, AveragedModel


class WeightEma(nn.Module):
    # a shadow copy of the model whose weights trail the trained ones
    def __init__(self, model, decay=0.999, after=0, warmup=False, gamma=1.0, power=2 / 3,
                 foreach=True, params_only=False):
        super().__init__()
        self.module = deepcopy(model).eval()
        self.decay, self.after, self.warmup = decay, after, warmup
        self.gamma, self.power = gamma, power
        self.foreach, self.params_only = foreach, params_only

    def decay_at(self, step):
        step = max(0, step - self.after - 1)
        if step == 0:
            return 0.0  # copy the weights outright at first
        if not self.warmup:
            return self.decay
        return min(self.decay, 1 - (1 + step / self.gamma) ** -self.power)

    @torch.no_grad()
    def update(self, model, step):
        keep = self.decay_at(step)
        if self.params_only:
            shadow, live = list(self.module.parameters()), list(model.parameters())
            torch._foreach_lerp_(shadow, live, weight=1.0 - keep)
            for mine, theirs in zip(self.module.buffers(), model.buffers()):
                mine.copy_(theirs)
            return
        pairs = zip(self.module.state_dict().values(), model.state_dict().values())
        floats = []
        for mine, theirs in pairs:
            if not mine.is_floating_point():
                mine.copy_(theirs)  # counters such as num_batches_tracked
            elif self.foreach:
                floats.append((mine, theirs))
            else:
                mine.lerp_(theirs.to(device=mine.device), weight=1.0 - keep)
        if floats and hasattr(torch, "_foreach_lerp_"):
            shadow, live = zip(*floats)
            torch._foreach_lerp_(list(shadow), list(live), weight=1.0 - keep)

    @torch.no_grad()
    def set(self, model):
        for mine, theirs in zip(self.module.state_dict().values(), model.state_dict().values()):
            mine.copy_(theirs)

    def forward(self, x):
        return self.module(x)


def classifier():
    net = nn.Sequential(nn.Linear(4, 10), nn.BatchNorm1d(10), nn.Tanh(), nn.Linear(10, 3))
    initialize(net)
    return net


batches = [(torch.randn(5, 4), torch.randint(0, 3, (5,))) for _ in range(2)]
probe = torch.randn(3, 4)
criterion = nn.CrossEntropyLoss()

for settings in (dict(after=1, warmup=True), dict(foreach=False, decay=0.8),
                 dict(params_only=True, decay=0.5)):
    net = classifier()
    sgd = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    cycle = torch.optim.lr_scheduler.OneCycleLR(sgd, max_lr=0.3, total_steps=2 * len(batches),
                                                pct_start=0.5)
    ema = WeightEma(net, **settings)
    ema.set(net)
    step = 0
    for epoch in range(2):
        net.train()
        for x, y in batches:
            sgd.zero_grad()
            loss = criterion(net(x), y)
            loss.backward()
            sgd.step()
            cycle.step()
            step += 1
            ema.update(net, step)
            record += [loss.item(), ema.decay_at(step)]
    record.append({k: v.detach().numpy().copy() for k, v in ema.state_dict().items()})
    with torch.no_grad():
        record.append(ema(probe).numpy())

net = classifier()
sgd = torch.optim.SGD(net.parameters(), lr=0.1)
averaged = AveragedModel(net)
cosine = torch.optim.lr_scheduler.CosineAnnealingLR(sgd, T_max=5)
swa_from = 1
swa_lr = SWALR(sgd, swa_lr=0.03, anneal_epochs=2, anneal_strategy="cos")
for epoch in range(4):
    for x, y in batches:
        sgd.zero_grad()
        criterion(net(x), y).backward()
        sgd.step()
    if epoch >= swa_from:
        averaged.update_parameters(net)
        swa_lr.step()
    else:
        cosine.step()
    record += [sgd.param_groups[0]["lr"], params_of(net), float(averaged.n_averaged)]
torch.optim.swa_utils.update_bn(batches, averaged)  # BatchNorm statistics of the average
record.append({k: v.detach().numpy().copy() for k, v in averaged.state_dict().items()})
averaged.eval()
with torch.no_grad():
    record.append(averaged(probe).numpy())
"""

AVERAGING_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "            loss.backward()\n            sgd.step()\n",
        "            grads = loss.backward()\n            sgd.step(grads)\n",
    ),
    (
        "        criterion(net(x), y).backward()\n        sgd.step()\n",
        "        grads = criterion(net(x), y).backward()\n        sgd.step(grads)\n",
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
        AVERAGING_SOURCE, AVERAGING_STEPS, capsys, 217, initialize=initialize,
        params_of=params_of,
    )  # fmt: skip
    # the warmup decay: 0 until after + 1, then 1 - (1 + step) ** -2/3
    assert theirs[1] == theirs[3] == 0.0
    assert theirs[5] == pytest.approx(1 - 2 ** (-2 / 3))
    assert theirs[-3] == 3.0  # the SWA average took epochs 1, 2 and 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
