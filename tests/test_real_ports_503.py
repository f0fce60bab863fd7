# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_502.py``
(the harness: ``tests/real_ports.py``): the quasi-hyperbolic optimizers of
facebookresearch/qhoptim (``qhoptim/pyt/qhm.py``, ``qhoptim/pyt/qhadam.py`` and the
hyper-parameter conversions of ``qhoptim/common/param_conv.py``), each used as its docstring
shows and trained against torch's run of the same code, its state dict saved mid-training
and loaded into a fresh optimizer:

- ``QHM`` with ``required`` defaults, built by ``QHM.from_synthesized_nesterov`` and
  ``QHM.from_pid`` (class methods returning ``_params_to_dict`` of a ``namedtuple``), the
  ``"grad"`` and ``"direct"`` weight decays, the deprecated ``momentum_buffer.mul_(momentum)
  .add_(1.0 - momentum, d_p)`` and ``p.data.add_(-lr * nu, momentum_buffer)``;
- ``QHAdam`` and ``QHAdamW`` (a function constructing ``QHAdam(..., decouple_weight_decay=
  True)``), built by ``QHAdam.from_nadam``: Python floats ``beta1_weight``/``beta2_weight`` in
  the state beside its tensors (saved and loaded as numbers), ``d_p.mul(d_p)``,
  ``avg_grad_rms.sqrt_()`` and the deprecated ``p.data.addcdiv_(-lr, avg_grad,
  avg_grad_rms)``.

The lines changed: the ``import`` lines (the package's relative ``from ..common import
param_conv`` names the conversions, given to both runs) and the gradient lines (``grads =
loss.backward()``, ``step`` taking them, ``p.grad(grads)``).
"""

from __future__ import annotations

import random
import types
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


PARAM_CONV_SOURCE = """
import collections
import math


QHMParams = collections.namedtuple("QHMParams", ["alpha", "nu", "beta"])

QHAdamParams = collections.namedtuple("QHAdamParams", ["alpha", "nu1", "nu2", "beta1", "beta2"])


def from_pid(k_p, k_i, k_d):
    alpha = k_i
    nu = k_p * k_p / (k_i * k_d)
    beta = k_d / (k_d - k_p)
    return QHMParams(alpha=alpha, nu=nu, beta=beta)


def from_synthesized_nesterov(alpha, beta1, beta2):
    new_alpha = alpha / (1.0 - beta1)
    nu = 1.0 - ((1.0 - beta1) / beta1) * beta2
    beta = beta1
    return QHMParams(alpha=new_alpha, nu=nu, beta=beta)


def from_nadam(lr, beta1, beta2):
    return QHAdamParams(alpha=lr, nu1=beta1, nu2=1.0, beta1=beta1, beta2=beta2)
"""

QHM_SOURCE = '''
import torch
from torch.optim.optimizer import Optimizer, required

# (from ..common import param_conv: the package's own module, given to the program)


class QHM(Optimizer):
    def __init__(self, params, lr=required, momentum=required, nu=required, weight_decay=0.0, weight_decay_type="grad"):
        if lr is not required and lr < 0.0:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if momentum < 0.0:
            raise ValueError("Invalid momentum value: {}".format(momentum))
        if weight_decay < 0.0:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
        if weight_decay_type not in ("grad", "direct"):
            raise ValueError("Invalid weight_decay_type value: {}".format(weight_decay_type))

        defaults = {
            "lr": lr,
            "momentum": momentum,
            "nu": nu,
            "weight_decay": weight_decay,
            "weight_decay_type": weight_decay_type,
        }
        super(QHM, self).__init__(params, defaults)

    def step(self, closure=None):
        """Performs a single optimization step.

        Args:
            closure (callable, optional):
                A closure that reevaluates the model and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            lr, nu, momentum = group["lr"], group["nu"], group["momentum"]
            weight_decay, weight_decay_type = group["weight_decay"], group["weight_decay_type"]

            for p in group["params"]:
                if p.grad is None:
                    continue
                d_p = p.grad.data
                param_state = self.state[p]

                if weight_decay != 0:
                    if weight_decay_type == "grad":
                        d_p.add_(weight_decay, p.data)
                    elif weight_decay_type == "direct":
                        p.data.mul_(1.0 - lr * weight_decay)
                    else:
                        raise ValueError("Invalid weight decay type provided")

                if len(param_state) == 0:
                    param_state["momentum_buffer"] = torch.zeros_like(p.data)

                momentum_buffer = param_state["momentum_buffer"]
                momentum_buffer.mul_(momentum).add_(1.0 - momentum, d_p)

                p.data.add_(-lr * nu, momentum_buffer)
                p.data.add_(-lr * (1.0 - nu), d_p)

        return loss

    @classmethod
    def _params_to_dict(cls, params):
        return {"lr": params.alpha, "nu": params.nu, "momentum": params.beta}

    @classmethod
    def from_pid(cls, k_p, k_i, k_d):
        return cls._params_to_dict(param_conv.from_pid(k_p, k_i, k_d))

    @classmethod
    def from_synthesized_nesterov(cls, alpha, beta1, beta2):
        return cls._params_to_dict(param_conv.from_synthesized_nesterov(alpha, beta1, beta2))
'''

QHADAM_SOURCE = '''
import torch
from torch.optim.optimizer import Optimizer

# (from ..common import param_conv: the package's own module, given to the program)


class QHAdam(Optimizer):
    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        nus=(1.0, 1.0),
        weight_decay=0.0,
        decouple_weight_decay=False,
        eps=1e-8,
    ):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        if weight_decay < 0.0:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))

        defaults = {
            "lr": lr,
            "betas": betas,
            "nus": nus,
            "weight_decay": weight_decay,
            "decouple_weight_decay": decouple_weight_decay,
            "eps": eps,
        }
        super(QHAdam, self).__init__(params, defaults)

    def step(self, closure=None):
        """Performs a single optimization step.

        Args:
            closure (callable, optional):
                A closure that reevaluates the model and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            lr = group["lr"]
            beta1, beta2 = group["betas"]
            nu1, nu2 = group["nus"]
            weight_decay = group["weight_decay"]
            decouple_weight_decay = group["decouple_weight_decay"]
            eps = group["eps"]

            for p in group["params"]:
                if p.grad is None:
                    continue

                d_p = p.grad.data
                if d_p.is_sparse:
                    raise RuntimeError("QHAdam does not support sparse gradients")

                param_state = self.state[p]

                if weight_decay != 0:
                    if decouple_weight_decay:
                        p.data.mul_(1 - lr * weight_decay)
                    else:
                        d_p.add_(weight_decay, p.data)

                d_p_sq = d_p.mul(d_p)

                if len(param_state) == 0:
                    param_state["beta1_weight"] = 0.0
                    param_state["beta2_weight"] = 0.0
                    param_state["exp_avg"] = torch.zeros_like(p.data)
                    param_state["exp_avg_sq"] = torch.zeros_like(p.data)

                param_state["beta1_weight"] = 1.0 + beta1 * param_state["beta1_weight"]
                param_state["beta2_weight"] = 1.0 + beta2 * param_state["beta2_weight"]

                beta1_weight = param_state["beta1_weight"]
                beta2_weight = param_state["beta2_weight"]
                exp_avg = param_state["exp_avg"]
                exp_avg_sq = param_state["exp_avg_sq"]

                beta1_adj = 1.0 - (1.0 / beta1_weight)
                beta2_adj = 1.0 - (1.0 / beta2_weight)
                exp_avg.mul_(beta1_adj).add_(1.0 - beta1_adj, d_p)
                exp_avg_sq.mul_(beta2_adj).add_(1.0 - beta2_adj, d_p_sq)

                avg_grad = exp_avg.mul(nu1)
                if nu1 != 1.0:
                    avg_grad.add_(1.0 - nu1, d_p)

                avg_grad_rms = exp_avg_sq.mul(nu2)
                if nu2 != 1.0:
                    avg_grad_rms.add_(1.0 - nu2, d_p_sq)
                avg_grad_rms.sqrt_()
                if eps != 0.0:
                    avg_grad_rms.add_(eps)

                p.data.addcdiv_(-lr, avg_grad, avg_grad_rms)

        return loss

    @classmethod
    def _params_to_dict(cls, params):
        return {"lr": params.alpha, "nus": (params.nu1, params.nu2), "betas": (params.beta1, params.beta2)}

    @classmethod
    def from_nadam(cls, lr=1e-3, betas=(0.9, 0.999)):
        return cls._params_to_dict(param_conv.from_nadam(lr, betas[0], betas[1]))


def QHAdamW(params, *args, **kwargs):
    return QHAdam(params, *args, decouple_weight_decay=True, **kwargs)
'''

TRAINING_SOURCE = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def train(make_optimizer, resume_at, steps=6):
    model = Net()
    initialize(model)
    optimizer = make_optimizer(model.parameters())
    for step in range(steps):
        if step == resume_at:  # a checkpoint, loaded into a fresh optimizer
            saved = optimizer.state_dict()
            optimizer = make_optimizer(model.parameters())
            optimizer.load_state_dict(saved)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append(params_of(model))
    for i, p in enumerate(model.parameters()):
        state = optimizer.state[p]
        record.append({f"{i}.{k}": v.detach().numpy().copy() for k, v in state.items() if torch.is_tensor(v)})
        record.append([float(v) for k, v in state.items() if not torch.is_tensor(v)])
"""

SOURCE = QHM_SOURCE + QHADAM_SOURCE + TRAINING_SOURCE

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("p.grad", "p.grad(grads)"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]

OPTIMIZERS = {
    "qhm-nesterov": lambda n: (
        lambda params: n["QHM"](
            params,
            weight_decay=1e-3,
            **n["QHM"].from_synthesized_nesterov(alpha=0.1, beta1=0.9, beta2=0.6),
        )
    ),
    "qhm-pid-direct": lambda n: (
        lambda params: n["QHM"](
            params,
            weight_decay=1e-2,
            weight_decay_type="direct",
            **n["QHM"].from_pid(k_p=-0.1, k_i=0.5, k_d=3.0),
        )
    ),
    "qhadam-nadam": lambda n: (
        lambda params: n["QHAdam"](
            params, weight_decay=1e-3, **n["QHAdam"].from_nadam(lr=1e-2, betas=(0.9, 0.999))
        )
    ),
    "qhadamw": lambda n: (
        lambda params: n["QHAdamW"](
            params, lr=1e-2, nus=(0.7, 0.8), betas=(0.99, 0.999), weight_decay=1e-2
        )
    ),
}


def _run(name, resume_at):
    rng = np.random.default_rng(5031)
    inputs = rng.standard_normal((12, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 12)
    param_conv = types.SimpleNamespace()
    exec(PARAM_CONV_SOURCE, param_conv.__dict__)
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
            param_conv=param_conv,
            inputs=lib.tensor(inputs),
            labels=lib.tensor(labels, dtype=lib.int64),
        )
        with warnings.catch_warnings():  # (the deprecated positional-scalar overloads)
            warnings.simplefilter("ignore", UserWarning)
            names["train"](OPTIMIZERS[name](names), resume_at)
        records.append(record)
    return records


@pytest.mark.parametrize(
    ("name", "resume_at"),
    [("qhm-nesterov", 3), ("qhm-pid-direct", None), ("qhadam-nadam", 3), ("qhadamw", 2)],
)
def test_quasi_hyperbolic_optimizers_train_and_resume_as_torch(name, resume_at):
    theirs, ours = _run(name, resume_at)
    assert theirs[5] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
