# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_504.py``
(the harness: ``tests/real_ports.py``): AdaMod as lancopku/AdaMod writes it
(``adamod/adamod.py``), trained as its CIFAR-100 demo trains (``AdaMod(net.parameters(),
lr=..., beta3=...)`` under a ``MultiStepLR`` schedule) against torch's run of the same code,
its state dict saved mid-training and loaded into a fresh optimizer:

- the momental bound of the actual rates: ``step_size = torch.full_like(denom, step_size)``,
  ``step_size.div_(denom)``, ``exp_avg_lr.mul_(group['gamma']).add_(1 - group['gamma'],
  step_size)`` and the elementwise ``torch.min(step_size,  exp_avg_lr)``;
- the decoupled decay by a parameter added to itself, ``p.data.add_(-group['weight_decay'] *
  group['lr'], p.data)``, and the deprecated overloads ``add_(1 - beta1, grad)`` and
  ``addcmul_(1 - beta2, grad, grad)``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``step`` taking them, ``p.grad(grads)``).
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


ADAMOD_SOURCE = '''
import math
import torch
from torch.optim import Optimizer

class AdaMod(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), gamma=0.999,
                 eps=1e-8, weight_decay=0):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        if not 0.0 <= gamma < 1.0:
            raise ValueError("Invalid gamma parameter: {}".format(gamma))
        defaults = dict(lr=lr, betas=betas, gamma=gamma, eps=eps,
                        weight_decay=weight_decay)
        super(AdaMod, self).__init__(params, defaults)

    def __setstate__(self, state):
        super(AdaMod, self).__setstate__(state)

    def step(self, closure=None):
        """Performs a single optimization step.
        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError(
                        'AdaMod does not support sparse gradients')

                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state['step'] = 0
                    # Exponential moving average of gradient values
                    state['exp_avg'] = torch.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = torch.zeros_like(p.data)
                    # Exponential moving average of actual learning rates
                    state['exp_avg_lr'] = torch.zeros_like(p.data)

                exp_avg, exp_avg_sq, exp_avg_lr = state['exp_avg'], state['exp_avg_sq'], state['exp_avg_lr']
                beta1, beta2 = group['betas']

                state['step'] += 1

                # Decay the first and second moment running average coefficient
                exp_avg.mul_(beta1).add_(1 - beta1, grad)
                exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, grad, grad)

                denom = exp_avg_sq.sqrt().add_(group['eps'])

                bias_correction1 = 1 - beta1 ** state['step']
                bias_correction2 = 1 - beta2 ** state['step']
                step_size = group['lr'] * math.sqrt(bias_correction2) / bias_correction1

                if group['weight_decay'] != 0:
                    p.data.add_(-group['weight_decay'] * group['lr'], p.data)

                # Applies momental bounds on actual learning rates
                step_size = torch.full_like(denom, step_size)
                step_size.div_(denom)
                exp_avg_lr.mul_(group['gamma']).add_(1 - group['gamma'], step_size)
                step_size = torch.min(step_size,  exp_avg_lr)
                step_size.mul_(exp_avg)

                p.data.add_(-step_size)

        return loss
'''

TRAINING_SOURCE = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def train(weight_decay, resume_at, steps=6):
    model = Net()
    initialize(model)
    make = lambda: AdaMod(model.parameters(), lr=2e-2, gamma=0.9, weight_decay=weight_decay)
    optimizer = make()
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[4], gamma=0.1)
    for step in range(steps):
        if step == resume_at:  # a checkpoint, loaded into a fresh optimizer and schedule
            saved = {'optimizer': optimizer.state_dict(), 'scheduler': scheduler.state_dict()}
            optimizer = make()
            optimizer.load_state_dict(saved['optimizer'])
            scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[4], gamma=0.1)
            scheduler.load_state_dict(saved['scheduler'])
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        scheduler.step()
        record.append(loss.item())
        record.append([group['lr'] for group in optimizer.param_groups])
    record.append(params_of(model))
    for i, p in enumerate(model.parameters()):
        state = optimizer.state[p]
        record.append({f"{i}.{k}": v.detach().numpy().copy() for k, v in state.items() if k != 'step'})
"""

SOURCE = ADAMOD_SOURCE + TRAINING_SOURCE

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("p.grad", "p.grad(grads)"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def _run(weight_decay, resume_at):
    rng = np.random.default_rng(5051)
    inputs = rng.standard_normal((12, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 12)
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = (
            SOURCE
            if lib is torch
            else port(SOURCE, STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            params_of=params_of,
            inputs=lib.tensor(inputs),
            labels=lib.tensor(labels, dtype=lib.int64),
        )
        with warnings.catch_warnings():  # (the deprecated positional-scalar overloads)
            warnings.simplefilter("ignore", UserWarning)
            names["train"](weight_decay, resume_at)
        records.append(record)
    return records


@pytest.mark.parametrize(("weight_decay", "resume_at"), [(1e-2, 3), (0.0, None)])
def test_adamod_trains_under_a_schedule_and_resumes_as_torch(weight_decay, resume_at):
    theirs, ours = _run(weight_decay, resume_at)
    assert theirs[10] < theirs[0]
    assert theirs[11] == [pytest.approx(2e-3)]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
