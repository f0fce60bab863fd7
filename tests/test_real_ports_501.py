# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_500.py``
(the harness: ``tests/real_ports.py``): Shampoo as moskomule/shampoo.pytorch writes it
(``shampoo.py``), trained as its ``exec.py`` trains a CIFAR ResNet (``Shampoo(params=
model.parameters(), lr=lr, momentum=momentum, weight_decay=1e-4, epsilon=epsilon,
update_freq=update_freq)`` with ``F.cross_entropy``), on a small convolutional net:

- ``_matrix_power`` by ``u, s, v = torch.svd(matrix)`` and ``u @ s.pow_(power).diag() @
  v.t()``, the inverse root ``-1 / order`` of each preconditioner refreshed every
  ``update_freq`` steps into ``inv_precond.copy_(...)``;
- the preconditioners made by ``group["epsilon"] * torch.eye(dim, out=grad.new(dim, dim))``
  and ``grad.new(dim, dim).zero_()``, one per dimension of every parameter (a convolution's
  4-d kernel: four, one of them 1 x 1), saved and loaded with the optimizer's state dict;
- the gradient matricised by the in-place ``grad.transpose_(0, dim_id).contiguous()`` and
  ``view(dim, -1)``, multiplied by ``inv_precond`` from the left (and, at the last dimension,
  ``grad_t @ inv_precond`` from the right);
- the deprecated overloads ``grad.mul_(1 - momentum).add_(momentum, state["momentum_buffer"])``,
  ``grad.add_(group["weight_decay"], p.data)`` and ``p.data.add_(-group["lr"], grad)``.

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


SHAMPOO_SOURCE = '''
import torch
from torch.optim.optimizer import Optimizer


def _matrix_power(matrix, power):
    u, s, v = torch.svd(matrix)
    return u @ s.pow_(power).diag() @ v.t()


class Shampoo(Optimizer):

    def __init__(self, params, lr=1e-1, momentum=0, weight_decay=0, epsilon=1e-4, update_freq=1):
        """

        :param params (iterable): iterable of parameters to optimize or dicts defining
            parameter groups
        :param lr (float, optional): learning rate (default: 1e-1)
        :param momentum: (float, optional): momentum factor (default: 0)
        :param weight_decay: (float, optional): weigt decay factor (default: 0)
        :param epsilon: (float, optional): momentum factor (default: 1e-4)
        :param update_freq: (int, optional): update frequency to compute inverse (default: 1)
        """
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, epsilon=epsilon, update_freq=update_freq)
        super(Shampoo, self).__init__(params, defaults)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                order = grad.ndimension()
                original_size = grad.size()
                state = self.state[p]
                momentum = group["momentum"]
                weight_decay = group["weight_decay"]

                if len(state) == 0:
                    state["step"] = 0
                    if momentum > 0:
                        state["momentum_buffer"] = grad.clone()
                    for dim_id, dim in enumerate(grad.size()):
                        # precondition matrices
                        state[f"precond_{dim_id}"] = group["epsilon"] * torch.eye(dim, out=grad.new(dim, dim))
                        state[f"inv_precond_{dim_id}"] = grad.new(dim, dim).zero_()

                if momentum > 0:
                    # grad = (1 - moment) * grad(t) + moment * grad(t-1)
                    # and grad(-1) = grad(0)
                    grad.mul_(1 - momentum).add_(momentum, state["momentum_buffer"])

                if weight_decay > 0:
                    grad.add_(group["weight_decay"], p.data)

                # See Algorithm 2 for detail
                for dim_id, dim in enumerate(grad.size()):
                    precond = state[f"precond_{dim_id}"]
                    inv_precond = state[f"inv_precond_{dim_id}"]

                    # mat_{dim_id}(grad)
                    grad = grad.transpose_(0, dim_id).contiguous()
                    transposed_size = grad.size()
                    grad = grad.view(dim, -1)

                    grad_t = grad.t()
                    precond.add_(grad @ grad_t)
                    if state["step"] % group["update_freq"] == 0:
                        inv_precond.copy_(_matrix_power(precond, -1 / order))

                    if dim_id == order - 1:
                        # finally
                        grad = grad_t @ inv_precond
                        # grad: (-1, last_dim)
                        grad = grad.view(original_size)
                    else:
                        # if not final
                        grad = inv_precond @ grad
                        # grad (dim, -1)
                        grad = grad.view(transposed_size)

                state["step"] += 1
                state["momentum_buffer"] = grad
                p.data.add_(-group["lr"], grad)

        return loss
'''

TRAINING_SOURCE = """
class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.fc = nn.Linear(2 * 3 * 3, 3)

    def forward(self, x):
        x = torch.tanh(self.conv(x.view(-1, 1, 5, 5)))
        return self.fc(torch.flatten(x, 1))


def main(lr, momentum, epsilon, update_freq, resume_at):
    model = ConvNet()
    initialize(model)
    make = lambda: Shampoo(params=model.parameters(), lr=lr, momentum=momentum,
                           weight_decay=1e-4, epsilon=epsilon, update_freq=update_freq)
    optimizer = make()
    for step in range(5):
        if step == resume_at:  # a checkpoint, loaded into a fresh optimizer
            saved = optimizer.state_dict()
            optimizer = make()
            optimizer.load_state_dict(saved)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append(params_of(model))
    for i, p in enumerate(model.parameters()):
        state = optimizer.state[p]
        record.append([f"{k}: {list(v.shape)}" for k, v in state.items() if torch.is_tensor(v)])
        record.append({f"{i}.{k}": v.detach().numpy().copy() for k, v in state.items() if k.startswith("precond")})
"""

SOURCE = SHAMPOO_SOURCE + TRAINING_SOURCE

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("p.grad", "p.grad(grads)"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def _run(call):
    rng = np.random.default_rng(5011)
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
        with warnings.catch_warnings():  # (the deprecated add_(number, tensor) overloads)
            warnings.simplefilter("ignore", UserWarning)
            call(names)
        records.append(record)
    return records


# (epsilon large enough that the preconditioners' inverse roots do not amplify float32 rounding
# step over step: the repository's "momentum" feeds the preconditioned gradient back in)
@pytest.mark.parametrize(
    ("momentum", "epsilon", "update_freq", "resume_at"), [(0.9, 0.3, 1, 3), (0.0, 0.1, 2, None)]
)
def test_shampoo_trains_a_convnet_as_torch(momentum, epsilon, update_freq, resume_at):
    theirs, ours = _run(lambda names: names["main"](0.1, momentum, epsilon, update_freq, resume_at))
    assert theirs[4] < theirs[0]
    kernel_state = [
        f"{kind}precond_{i}: {[n, n]}" for i, n in enumerate((2, 1, 3, 3)) for kind in ("", "inv_")
    ]
    assert set(kernel_state) <= set(theirs[6])
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
