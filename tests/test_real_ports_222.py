# ruff: noqa: E501, N806  (the programs are kept in their authors' manner: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
Hamiltonian Monte Carlo for a Bayesian logistic regression, in the manner of hamiltorch's
``samplers.py`` (a flat parameter vector, ``log_prob_func``, ``params_grad`` by
``torch.autograd.grad`` of a detached copy made ``requires_grad_()``, the leapfrog's in-place
momentum updates ``momentum += 0.5 * step_size * ...``, the Hamiltonian with
``torch.dot(momentum, momentum)``, the Metropolis test ``rho = min(0., -new_ham + ham)``
against ``torch.log(torch.rand(1))`` with a Python ``min`` over a 0-d tensor, rejected
proposals restoring the last accepted parameters), and a Bayesian neural network's
parameters unflattened by ``torch.nn.utils.vector_to_parameters`` inside the log density.
The gradient of the log density comes from ``torch.autograd.grad`` or ``torch.func.grad``;
the momenta (``torch.randn_like``) and uniforms (``torch.rand``) come from one seeded stream
in both runs. Nothing is changed by the port but the imports.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


HMC_SOURCE = """
import torch
import torch.nn as nn


def params_grad(p, log_prob_func, functional):
    if functional:
        return torch.func.grad(log_prob_func)(p.detach())
    p = p.detach().requires_grad_()
    log_prob = log_prob_func(p)
    p = torch.autograd.grad(log_prob, p)[0]
    return p


def leapfrog(params, momentum, log_prob_func, steps=10, step_size=0.1, functional=False):
    params = params.clone()
    momentum = momentum.clone()
    ret_params = []
    ret_momenta = []
    momentum += 0.5 * step_size * params_grad(params, log_prob_func, functional)
    for n in range(steps):
        params = params + step_size * momentum
        p_grad = params_grad(params, log_prob_func, functional)
        momentum += step_size * p_grad
        ret_params.append(params.clone())
        ret_momenta.append(momentum.clone())
    ret_momenta[-1] = ret_momenta[-1] - 0.5 * step_size * p_grad.clone()
    return ret_params, ret_momenta


def hamiltonian(params, momentum, log_prob_func):
    log_prob = log_prob_func(params)
    potential = -log_prob
    kinetic = 0.5 * torch.dot(momentum, momentum)
    return potential + kinetic


def sample(log_prob_func, params_init, num_samples=10, num_steps_per_sample=10, step_size=0.1, burn=0, functional=False):
    params = params_init.clone().requires_grad_()
    ret_params = [params.clone()]
    num_rejected = 0
    for n in range(num_samples):
        momentum = torch.randn_like(params)
        ham = hamiltonian(params, momentum, log_prob_func)
        leapfrog_params, leapfrog_momenta = leapfrog(params, momentum, log_prob_func, steps=num_steps_per_sample, step_size=step_size, functional=functional)
        params = leapfrog_params[-1].detach().requires_grad_()
        momentum = leapfrog_momenta[-1]
        new_ham = hamiltonian(params, momentum, log_prob_func)
        rho = min(0., -new_ham + ham)
        if rho >= torch.log(torch.rand(1)):
            if n > burn:
                ret_params.append(leapfrog_params[-1])
            else:
                ret_params.append(leapfrog_params[-1])
        else:
            num_rejected += 1
            params = ret_params[-1]
            if n > burn:
                ret_params.append(ret_params[-1])
    print(f"Acceptance Rate {1 - num_rejected / num_samples:.2f}")
    return list(map(lambda t: t.detach(), ret_params))


def logistic_log_prob(X, y, prior_scale):
    def log_prob_func(params):
        w, b = params[:-1], params[-1]
        logits = X @ w + b
        log_lik = torch.distributions.Bernoulli(logits=logits).log_prob(y).sum()
        log_prior = torch.distributions.Normal(torch.zeros_like(params), prior_scale).log_prob(params).sum()
        return log_lik + log_prior
    return log_prob_func


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(2, 8)
        self.fc2 = nn.Linear(8, 1)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x))).squeeze(-1)


def bnn_log_prob(net, X, y, prior_prec):
    shapes = [p.shape for p in net.parameters()]

    def log_prob_func(params):
        start = 0
        log_prior = 0.
        weights = []
        for shape in shapes:
            n = shape.numel()
            w = params[start:start + n].reshape(shape)
            weights.append(w)
            log_prior = log_prior - 0.5 * prior_prec * (w ** 2).sum()
            start += n
        h = torch.tanh(X @ weights[0].t() + weights[1])
        logits = (h @ weights[2].t() + weights[3]).squeeze(-1)
        return -torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="sum") + log_prior
    return log_prob_func


def predictive(net, samples, X):
    probs = []
    for s in samples:
        torch.nn.utils.vector_to_parameters(s, net.parameters())
        with torch.no_grad():
            probs.append(torch.sigmoid(net(X)))
    return torch.stack(probs).mean(0)
"""

HMC_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
]


def _data(seed=2220, n=30):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    y = (X @ np.array([2.0, -1.0]) + 0.3 + 0.5 * rng.standard_normal(n) > 0).astype(np.float64)
    return X, y


@pytest.mark.parametrize("functional", [False, True])
def test_hmc_bayesian_logistic_regression_samples_as_torch(capsys, functional):
    X, y = _data()
    records, logs = [], []
    for lib in (torch, rg):
        names = run_source(HMC_SOURCE if lib is torch else port(HMC_SOURCE, HMC_STEPS), lib)
        log_prob = names["logistic_log_prob"](lib.tensor(X), lib.tensor(y), 2.0)
        with SharedDraws(lib, 2221):
            samples = names["sample"](
                log_prob,
                lib.zeros(3, dtype=lib.float64),
                num_samples=12,
                num_steps_per_sample=8,
                step_size=0.6,
                burn=3,
                functional=functional,
            )
        records.append([np.stack([s.numpy() for s in samples])])
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "Acceptance Rate 0.75" in logs[0]  # accepted and rejected proposals both
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-11)


def test_hmc_bayesian_neural_network_samples_and_predicts_as_torch(capsys):
    X, y = _data(2222, 24)
    records, logs = [], []
    state = None
    for lib in (torch, rg):
        names = run_source(HMC_SOURCE if lib is torch else port(HMC_SOURCE, HMC_STEPS), lib)
        net = names["Net"]().double()
        if state is None:
            state = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
        else:
            net.load_state_dict(state)
        data = lib.tensor(X), lib.tensor(y)
        params_init = lib.nn.utils.parameters_to_vector(net.parameters()).detach()
        log_prob = names["bnn_log_prob"](net, *data, 1.0)
        with SharedDraws(lib, 2223):
            samples = names["sample"](
                log_prob, params_init, num_samples=8, num_steps_per_sample=6, step_size=0.3
            )
        probs = names["predictive"](net, samples, data[0])
        records.append([np.stack([s.numpy() for s in samples]), probs.numpy()])
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "Acceptance Rate 0.50" in logs[0]  # accepted and rejected proposals both
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
