# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_501.py``
(the harness: ``tests/real_ports.py``): AdaHessian as amirgholami/adahessian writes it
(``image_classification/optim_adahessian.py``), trained as its ``main.py`` trains a CIFAR
ResNet (``loss.backward(create_graph=True)`` then ``optimizer.step()``, a ``MultiStepLR``
schedule), here a small convolutional classifier:

- ``get_trace``'s check that every gradient has a ``grad_fn`` (the backward made a graph),
  Rademacher vectors ``2 * torch.randint_like(p, high=2) - 1`` (drawn from one seeded stream in
  both runs), the Hessian-vector products ``torch.autograd.grad(grads, params,
  grad_outputs=v, only_inputs=True, retain_graph=True)`` through the recorded gradients, and
  Hutchinson's diagonal ``hv.abs()`` (a convolution's kernel averaged by ``torch.mean(hv.abs(),
  dim=[2, 3], keepdim=True)``);
- ``step``'s moments by ``exp_avg.mul_(beta1).add_(grad.detach_(), alpha=1 - beta1)`` (the
  gradient detached in place) and ``addcmul_(hut_trace, hut_trace, value=1 - beta2)``, the
  ``hessian_power``, and the update assigned to ``p.data`` (``p.data = p.data - group['lr'] *
  (...)``);
- a state dict saved mid-training and loaded into a fresh optimizer; and the error of
  ``get_trace`` when the backward made no graph.

The lines changed: the ``import`` lines and the gradient lines (``gradients =
loss.backward(create_graph=True)``, ``step`` taking them, ``p.grad`` read as
``p.grad(gradients)``: the program's own ``grads`` is a list of its step).
"""

from __future__ import annotations

import random

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


ADAHESSIAN_SOURCE = """
import math
import torch
from torch.optim.optimizer import Optimizer


class Adahessian(Optimizer):
    def __init__(self, params, lr=0.15, betas=(0.9, 0.999), eps=1e-4,
                 weight_decay=0, hessian_power=1, single_gpu=True):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(
                "Invalid beta parameter at index 0: {}".format(
                    betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(
                "Invalid beta parameter at index 1: {}".format(
                    betas[1]))
        if not 0.0 <= hessian_power <= 1.0:
            raise ValueError("Invalid Hessian power value: {}".format(hessian_power))
        defaults = dict(lr=lr, betas=betas, eps=eps,
                        weight_decay=weight_decay, hessian_power=hessian_power)
        self.single_gpu = single_gpu 
        super(Adahessian, self).__init__(params, defaults)

    def get_trace(self, params, grads):
        # Check backward was called with create_graph set to True
        for i, grad in enumerate(grads):
            if grad.grad_fn is None:
                raise RuntimeError('Gradient tensor {:} does not have grad_fn. When calling\\n'.format(i) +
                           '\\t\\t\\t  loss.backward(), make sure the option create_graph is\\n' +
                           '\\t\\t\\t  set to True.')

        v = [2 * torch.randint_like(p, high=2) - 1 for p in params]

        # this is for distributed setting with single node and multi-gpus, 
        # for multi nodes setting, we have not support it yet.
        if not self.single_gpu:
            for v1 in v:
                dist.all_reduce(v1)
        if not self.single_gpu:
            for v_i in v:
                v_i[v_i < 0.] = -1.
                v_i[v_i >= 0.] = 1.

        hvs = torch.autograd.grad(
            grads,
            params,
            grad_outputs=v,
            only_inputs=True,
            retain_graph=True)

        hutchinson_trace = []
        for hv in hvs:
            param_size = hv.size()
            if len(param_size) <= 2:  # for 0/1/2D tensor
                # Hessian diagonal block size is 1 here.
                # We use that torch.abs(hv * vi) = hv.abs()
                tmp_output = hv.abs()

            elif len(param_size) == 4:  # Conv kernel
                # Hessian diagonal block size is 9 here: torch.sum() reduces the dim 2/3.
                # We use that torch.abs(hv * vi) = hv.abs()
                tmp_output = torch.mean(hv.abs(), dim=[2, 3], keepdim=True)
            hutchinson_trace.append(tmp_output)

        # this is for distributed setting with single node and multi-gpus, 
        # for multi nodes setting, we have not support it yet.
        if not self.single_gpu:
            for output1 in hutchinson_trace:
                dist.all_reduce(output1 / torch.cuda.device_count())
        
        return hutchinson_trace

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()

        params = []
        groups = []
        grads = []

        # Flatten groups into lists, so that
        #  hut_traces can be called with lists of parameters
        #  and grads 
        for group in self.param_groups:
            for p in group['params']:
                if p.grad is not None:
                    params.append(p)
                    groups.append(group)
                    grads.append(p.grad)

        # get the Hessian diagonal

        hut_traces = self.get_trace(params, grads)

        for (p, group, grad, hut_trace) in zip(params, groups, grads, hut_traces):

            state = self.state[p]

            # State initialization
            if len(state) == 0:
                state['step'] = 0
                # Exponential moving average of gradient values
                state['exp_avg'] = torch.zeros_like(p.data)
                # Exponential moving average of Hessian diagonal square values
                state['exp_hessian_diag_sq'] = torch.zeros_like(p.data)

            exp_avg, exp_hessian_diag_sq = state['exp_avg'], state['exp_hessian_diag_sq']

            beta1, beta2 = group['betas']

            state['step'] += 1

            # Decay the first and second moment running average coefficient
            exp_avg.mul_(beta1).add_(grad.detach_(), alpha=1 - beta1)
            exp_hessian_diag_sq.mul_(beta2).addcmul_(hut_trace, hut_trace, value=1 - beta2)

            bias_correction1 = 1 - beta1 ** state['step']
            bias_correction2 = 1 - beta2 ** state['step']

            # make the square root, and the Hessian power
            k = group['hessian_power']
            denom = (
                (exp_hessian_diag_sq.sqrt() ** k) /
                math.sqrt(bias_correction2) ** k).add_(
                group['eps'])

            # make update
            p.data = p.data - \\
                group['lr'] * (exp_avg / bias_correction1 / denom + group['weight_decay'] * p.data)

        return loss
"""

TRAINING_SOURCE = """
class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.fc = nn.Linear(2 * 3 * 3, 3)

    def forward(self, x):
        x = torch.tanh(self.conv(x.view(-1, 1, 5, 5)))
        return self.fc(torch.flatten(x, 1))


def train(lr, hessian_power, resume_at, create_graph=True):
    model = ConvNet()
    initialize(model)
    criterion = nn.CrossEntropyLoss()
    make = lambda: Adahessian(model.parameters(), lr=lr, weight_decay=5e-4, hessian_power=hessian_power)
    optimizer = make()
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [3], gamma=0.5, last_epoch=-1)
    for epoch in range(5):
        if epoch == resume_at:  # a checkpoint, loaded into a fresh optimizer
            saved = optimizer.state_dict()
            optimizer = make()
            optimizer.load_state_dict(saved)
            scheduler.optimizer = optimizer
        optimizer.zero_grad()
        output = model(inputs)
        loss = criterion(output, labels)
        loss.backward(create_graph=create_graph)
        optimizer.step()
        scheduler.step()
        record.append(loss.item())
    record.append(params_of(model))
    for i, p in enumerate(model.parameters()):
        state = optimizer.state[p]
        record.append({f"{i}.{k}": v.detach().numpy().copy() for k, v in state.items() if k != 'step'})
    record.append([optimizer.state[p]['step'] for p in model.parameters()])
"""

SOURCE = ADAHESSIAN_SOURCE + TRAINING_SOURCE

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    def step(self, closure=None):", "    def step(self, gradients, closure=None):"),
    ("p.grad", "p.grad(gradients)"),
    (
        "        loss.backward(create_graph=create_graph)\n        optimizer.step()\n",
        "        gradients = loss.backward(create_graph=create_graph)\n        optimizer.step(gradients)\n",
    ),
]


class SharedSigns:
    """``torch.randint_like(p, high=2)`` of a library drawing from one seeded stream (in the
    tensor's dtype, as torch's), so both runs take the same Rademacher vectors."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        self.saved = lib.randint_like

        def randint_like(t, low=0, high=None, **_):
            return lib.tensor(rng.integers(low, high, tuple(t.shape)), dtype=t.dtype)

        lib.randint_like = randint_like
        return self

    def __exit__(self, *exc):
        self.lib.randint_like = self.saved
        return False


def _run(call):
    rng = np.random.default_rng(5021)
    inputs = rng.standard_normal((12, 25)).astype(np.float32)
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
        with SharedSigns(lib, 5022):
            call(names)
        records.append(record)
    return records


@pytest.mark.parametrize(("hessian_power", "resume_at"), [(1.0, 2), (0.5, None)])
def test_adahessian_trains_by_hessian_vector_products_as_torch(hessian_power, resume_at):
    theirs, ours = _run(lambda names: names["train"](0.02, hessian_power, resume_at))
    assert theirs[4] < theirs[0]
    assert theirs[-1] == [5, 5, 5, 5]
    # (Hutchinson's |Hv| sums terms of random signs: where they cancel, float32 rounding is a
    # larger part of what is left, and the division by it carries that into the convolution's
    # bias, which moves far in five steps: 2e-5 of it apart on the torch backend too)
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)


def test_adahessian_refuses_gradients_made_without_a_graph_as_torch():
    for lib in (torch, rg):
        with pytest.raises(RuntimeError, match="Gradient tensor 0 does not have grad_fn"):
            _run_one(lib, lambda names: names["train"](0.05, 1.0, None, create_graph=False))


def _run_one(lib, call):
    text = SOURCE if lib is torch else port(SOURCE, STEPS).replace("from torch.", "from retrograd.")
    rng = np.random.default_rng(5021)
    names = run_source(
        text,
        lib,
        record=[],
        initialize=lambda model: None,
        params_of=params_of,
        inputs=lib.tensor(rng.standard_normal((12, 25)).astype(np.float32)),
        labels=lib.tensor(rng.integers(0, 3, 12), dtype=lib.int64),
    )
    with SharedSigns(lib, 5022):
        call(names)
