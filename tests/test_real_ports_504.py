# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_503.py``
(the harness: ``tests/real_ports.py``): diffGrad as shivram1987/diffGrad writes it
(``diffGrad_v2.py``, the version its README recommends), trained against torch's run of the
same code with its state dict saved mid-training and loaded into a fresh optimizer:

- the friction coefficient ``dfc = 1. / (1. + torch.exp(-diff))`` of ``diff =
  abs(previous_grad - grad)`` (Python's ``abs`` of a tensor), the previous gradient kept by
  ``state['previous_grad'] = grad.clone()`` (a copy: the gradient itself is edited in place
  by the next line of weight decay, ``grad.add_(group['weight_decay'], p.data)``, in torch's
  ``p.grad`` as well);
- the deprecated overloads ``exp_avg.mul_(beta1).add_(1 - beta1, grad)``,
  ``exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, grad, grad)`` and ``p.data.addcdiv_(-step_size,
  exp_avg1, denom)``; the file's tab-indented comment lines inside the space-indented step.

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


DIFFGRAD_SOURCE = '''
# Fixes a bug in original diffGrad code
import math
import torch
from torch.optim.optimizer import Optimizer
import numpy as np
import torch.nn as nn
#import torch.optim as Optimizer

class diffgrad(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super(diffgrad, self).__init__(params, defaults)

    def __setstate__(self, state):
        super(diffgrad, self).__setstate__(state)

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
                    raise RuntimeError('diffGrad does not support sparse gradients, please consider SparseAdam instead')

                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state['step'] = 0
                    # Exponential moving average of gradient values
                    state['exp_avg'] = torch.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = torch.zeros_like(p.data)
                    # Previous gradient
                    state['previous_grad'] = torch.zeros_like(p.data)

                exp_avg, exp_avg_sq, previous_grad = state['exp_avg'], state['exp_avg_sq'], state['previous_grad']
                beta1, beta2 = group['betas']

                state['step'] += 1

                if group['weight_decay'] != 0:
                    grad.add_(group['weight_decay'], p.data)

                # Decay the first and second moment running average coefficient
                exp_avg.mul_(beta1).add_(1 - beta1, grad)
                exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, grad, grad)
                denom = exp_avg_sq.sqrt().add_(group['eps'])

                bias_correction1 = 1 - beta1 ** state['step']
                bias_correction2 = 1 - beta2 ** state['step']

                # compute diffgrad coefficient (dfc)
                diff = abs(previous_grad - grad)
                dfc = 1. / (1. + torch.exp(-diff))
                #state['previous_grad'] = grad %used in paper but has the bug that previous grad is overwritten with grad and diff becomes always zero. Fixed in the next line.
                state['previous_grad'] = grad.clone()
\t\t\t\t
\t\t\t\t# update momentum with dfc
                exp_avg1 = exp_avg * dfc

                step_size = group['lr'] * math.sqrt(bias_correction2) / bias_correction1

                p.data.addcdiv_(-step_size, exp_avg1, denom)

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
    make = lambda: diffgrad(model.parameters(), lr=2e-2, weight_decay=weight_decay)
    optimizer = make()
    for step in range(steps):
        if step == resume_at:  # a checkpoint, loaded into a fresh optimizer
            saved = optimizer.state_dict()
            optimizer = make()
            optimizer.load_state_dict(saved)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        # the gradient as the step left it (weight decay added in place)
        record.append({name: p.grad.detach().numpy().copy() for name, p in model.named_parameters()})
    record.append(params_of(model))
    for i, p in enumerate(model.parameters()):
        state = optimizer.state[p]
        record.append({f"{i}.{k}": v.detach().numpy().copy() for k, v in state.items() if k != 'step'})
"""

SOURCE = DIFFGRAD_SOURCE + TRAINING_SOURCE

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("p.grad", "p.grad(grads)"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def _run(weight_decay, resume_at):
    rng = np.random.default_rng(5041)
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
def test_diffgrad_trains_and_resumes_as_torch(weight_decay, resume_at):
    theirs, ours = _run(weight_decay, resume_at)
    assert theirs[10] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
