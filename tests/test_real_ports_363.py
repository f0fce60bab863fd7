# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
clovaai/AdamP's ``AdamP`` and ``SGDP`` (``adamp/adamp.py``, ``adamp/sgdp.py``) training a small
convolutional classifier whose convolutions feed batch norms (the scale-invariant weights the
optimizers project), against torch's run of the same code from the same weights and images.

- ``_channel_view``/``_layer_view`` (``x.view(x.size(0), -1)``, ``x.view(1, -1)``),
  ``F.cosine_similarity(x, y, dim=1, eps=eps).abs_()`` of the gradient and the weight,
  ``cosine_sim.max() < delta / math.sqrt(view_func(p.data).size(1))`` on a 0-d tensor, the
  projection ``p_n = p.data / view_func(p.data).norm(dim=1).view(expand_size).add_(eps)`` and
  ``perturb -= p_n * view_func(p_n * perturb).sum(dim=1).view(expand_size)`` in place, with
  ``expand_size = [-1] + [1] * (len(p.shape) - 1)``; the decoupled decay
  ``p.data.mul_(1 - group['lr'] * group['weight_decay'] * wd_ratio)`` (SGDP's divided by
  ``1-momentum``) and ``p.data.add_(perturb, alpha=-step_size)``;
- SGDP without Nesterov sets ``d_p = buf``, so the in-place projection edits the momentum buffer
  itself (the original's aliasing, which the port must keep); with Nesterov ``d_p = grad +
  momentum * buf`` is a new tensor.

The optimizers are built as the README shows (``AdamP(params, lr=0.001, betas=(0.9, 0.999),
weight_decay=1e-2)``, ``SGDP(params, lr=0.1, weight_decay=1e-5, momentum=0.9,
nesterov=True)``); the model and loop are written for the test. The lines changed: the
``import`` lines, and the gradient lines: ``grads = loss.backward()``, ``optimizer.step(grads)``,
``step(self, grads, closure=None)`` and ``p.grad`` read as ``p.grad(grads)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

ADAMP_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.optimizer import Optimizer, required
import math


# adamp/adamp.py
class AdamP(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0, delta=0.1, wd_ratio=0.1, nesterov=False):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        delta=delta, wd_ratio=wd_ratio, nesterov=nesterov)
        super(AdamP, self).__init__(params, defaults)

    def _channel_view(self, x):
        return x.view(x.size(0), -1)

    def _layer_view(self, x):
        return x.view(1, -1)

    def _cosine_similarity(self, x, y, eps, view_func):
        x = view_func(x)
        y = view_func(y)

        return F.cosine_similarity(x, y, dim=1, eps=eps).abs_()

    def _projection(self, p, grad, perturb, delta, wd_ratio, eps):
        wd = 1
        expand_size = [-1] + [1] * (len(p.shape) - 1)
        for view_func in [self._channel_view, self._layer_view]:

            cosine_sim = self._cosine_similarity(grad, p.data, eps, view_func)

            if cosine_sim.max() < delta / math.sqrt(view_func(p.data).size(1)):
                p_n = p.data / view_func(p.data).norm(dim=1).view(expand_size).add_(eps)
                perturb -= p_n * view_func(p_n * perturb).sum(dim=1).view(expand_size)
                wd = wd_ratio

                return perturb, wd

        return perturb, wd

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue

                grad = p.grad.data
                beta1, beta2 = group['betas']
                nesterov = group['nesterov']

                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state['step'] = 0
                    state['exp_avg'] = torch.zeros_like(p.data)
                    state['exp_avg_sq'] = torch.zeros_like(p.data)

                # Adam
                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']

                state['step'] += 1
                bias_correction1 = 1 - beta1 ** state['step']
                bias_correction2 = 1 - beta2 ** state['step']

                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)

                denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(group['eps'])
                step_size = group['lr'] / bias_correction1

                if nesterov:
                    perturb = (beta1 * exp_avg + (1 - beta1) * grad) / denom
                else:
                    perturb = exp_avg / denom

                # Projection
                wd_ratio = 1
                if len(p.shape) > 1:
                    perturb, wd_ratio = self._projection(p, grad, perturb, group['delta'], group['wd_ratio'], group['eps'])

                # Weight decay
                if group['weight_decay'] > 0:
                    p.data.mul_(1 - group['lr'] * group['weight_decay'] * wd_ratio)

                # Step
                p.data.add_(perturb, alpha=-step_size)

        return loss


# adamp/sgdp.py
class SGDP(Optimizer):
    def __init__(self, params, lr=required, momentum=0, dampening=0,
                 weight_decay=0, nesterov=False, eps=1e-8, delta=0.1, wd_ratio=0.1):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, eps=eps, delta=delta, wd_ratio=wd_ratio)
        super(SGDP, self).__init__(params, defaults)

    def _channel_view(self, x):
        return x.view(x.size(0), -1)

    def _layer_view(self, x):
        return x.view(1, -1)

    def _cosine_similarity(self, x, y, eps, view_func):
        x = view_func(x)
        y = view_func(y)

        return F.cosine_similarity(x, y, dim=1, eps=eps).abs_()

    def _projection(self, p, grad, perturb, delta, wd_ratio, eps):
        wd = 1
        expand_size = [-1] + [1] * (len(p.shape) - 1)
        for view_func in [self._channel_view, self._layer_view]:

            cosine_sim = self._cosine_similarity(grad, p.data, eps, view_func)

            if cosine_sim.max() < delta / math.sqrt(view_func(p.data).size(1)):
                p_n = p.data / view_func(p.data).norm(dim=1).view(expand_size).add_(eps)
                perturb -= p_n * view_func(p_n * perturb).sum(dim=1).view(expand_size)
                wd = wd_ratio

                return perturb, wd

        return perturb, wd

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            momentum = group['momentum']
            dampening = group['dampening']
            nesterov = group['nesterov']

            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state['momentum'] = torch.zeros_like(p.data)

                # SGD
                buf = state['momentum']
                buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                if nesterov:
                    d_p = grad + momentum * buf
                else:
                    d_p = buf

                # Projection
                wd_ratio = 1
                if len(p.shape) > 1:
                    d_p, wd_ratio = self._projection(p, grad, d_p, group['delta'], group['wd_ratio'], group['eps'])

                # Weight decay
                if group['weight_decay'] > 0:
                    p.data.mul_(1 - group['lr'] * group['weight_decay'] * wd_ratio / (1-momentum))

                # Step
                p.data.add_(d_p, alpha=-group['lr'])

        return loss


# the test's classifier and loop
model = nn.Sequential(
    nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6), nn.ReLU(),
    nn.Conv2d(6, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
)
initialize(model)
if which == 'adamp':
    optimizer = AdamP(model.parameters(), lr=0.001, betas=(0.9, 0.999), weight_decay=1e-2)
else:
    optimizer = SGDP(model.parameters(), lr=0.1, weight_decay=1e-5, momentum=0.9, nesterov=which == 'sgdp_nesterov')
for step in range(4):
    inputs, targets = data[step % len(data)]
    loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(model))
record.append({k: v.numpy() for k, v in optimizer.state[model[0].weight].items() if k != 'step'})
"""

ADAMP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("if p.grad is None:", "if p.grad(grads) is None:"),
    ("grad = p.grad.data", "grad = p.grad(grads).data"),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("which", ["adamp", "sgdp", "sgdp_nesterov"])
def test_adamp_and_sgdp_project_scale_invariant_weights_as_torch(which):
    torch.manual_seed(363)  # torch's initial weights, which the port loads
    rng = np.random.default_rng(363)
    batches = [
        (rng.standard_normal((4, 3, 8, 8)).astype(np.float32), rng.integers(0, 4, 4))
        for _ in range(2)
    ]
    initialize, records = initializer(), []
    for lib in (torch, rg):
        record = []
        text = (
            ADAMP_SOURCE
            if lib is torch
            else port(ADAMP_SOURCE, ADAMP_STEPS).replace("from torch.", "from retrograd.")
        )
        data = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
        run_source(
            text,
            lib,
            record=record,
            data=data,
            which=which,
            initialize=initialize,
            params_of=params_of,
        )
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 2 * 4 + 1
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
