# ruff: noqa: N806  (X for a design matrix, as statisticians write it)
"""Real ports, continued (the harness: ``tests/real_ports.py``): Hamiltonian Monte Carlo, a
program written here in the style of hamiltorch-like samplers, for a Bayesian logistic
regression and a small Bayesian neural network.

Surface: a flat parameter vector and a ``log_density`` closure; its gradient by
``torch.autograd.grad`` of a detached copy made ``requires_grad_()``, or by
``torch.func.grad``; leapfrog steps updating the momentum in place (``r += 0.5 * eps * g``);
the energy with ``torch.dot(r, r)``; the Metropolis test ``min(0.0, before - after)`` (a
Python ``min`` over a 0-d tensor) against ``torch.log(torch.rand(1))``, rejected proposals
keeping the chain where it was; ``torch.distributions.Bernoulli(logits=...)`` and
``Normal(torch.zeros_like(theta), scale)`` log-probabilities; the network's parameters cut
from the flat vector by ``shape.numel()``/``reshape`` inside the density, scored by
``F.binary_cross_entropy_with_logits(..., reduction="sum")``, and written back by
``torch.nn.utils.vector_to_parameters`` for the posterior predictive (``no_grad``,
``sigmoid``, ``torch.stack(...).mean(0)``). The momenta (``torch.randn_like``) and uniforms
(``torch.rand``) come from one seeded stream in both runs; the chains accept and reject both,
and their samples and predictions agree with torch's. The port changes only the imports.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

HMC_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


def grad_log_density(log_density, theta, use_func):
    if use_func:
        return torch.func.grad(log_density)(theta.detach())
    theta = theta.detach().requires_grad_()
    (g,) = torch.autograd.grad(log_density(theta), theta)
    return g


def energy(log_density, theta, r):
    # the potential (minus the log density) plus the kinetic energy of unit-mass momenta
    return -log_density(theta) + 0.5 * torch.dot(r, r)


def integrate(log_density, theta, r, eps, n_leap, use_func):
    theta, r = theta.clone(), r.clone()
    r += 0.5 * eps * grad_log_density(log_density, theta, use_func)
    for i in range(n_leap):
        theta = theta + eps * r
        g = grad_log_density(log_density, theta, use_func)
        r += eps * g if i < n_leap - 1 else 0.5 * eps * g
    return theta, r


def hmc(log_density, start, draws=10, n_leap=10, eps=0.1, warmup=0, use_func=False):
    theta = start.clone().requires_grad_()
    kept, rejections = [], 0
    for t in range(draws):
        r = torch.randn_like(theta)
        before = energy(log_density, theta, r)
        proposal, r_end = integrate(log_density, theta, r, eps, n_leap, use_func)
        proposal = proposal.detach().requires_grad_()
        after = energy(log_density, proposal, r_end)
        log_accept = min(0.0, before - after)  # a Python min over a 0-d tensor
        if log_accept >= torch.log(torch.rand(1)):
            theta = proposal
        else:
            rejections += 1  # stay where the chain was
        if t >= warmup:
            kept.append(theta.detach())
    print(f"accepted {draws - rejections} of {draws}")
    return kept


def logistic_posterior(features, labels, prior_sd):
    def log_density(theta):
        weights, bias = theta[:-1], theta[-1]
        likelihood = torch.distributions.Bernoulli(logits=features @ weights + bias)
        prior = torch.distributions.Normal(torch.zeros_like(theta), prior_sd)
        return likelihood.log_prob(labels).sum() + prior.log_prob(theta).sum()

    return log_density


class TinyClassifier(nn.Module):
    def __init__(self, hidden=6):
        super().__init__()
        self.hidden = nn.Linear(2, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x))).squeeze(-1)


def network_posterior(model, features, labels, precision):
    shapes = [p.shape for p in model.parameters()]

    def log_density(theta):
        pieces, offset, log_prior = [], 0, 0.0
        for shape in shapes:
            size = shape.numel()
            piece = theta[offset : offset + size].reshape(shape)
            log_prior = log_prior - 0.5 * precision * (piece**2).sum()
            pieces.append(piece)
            offset += size
        w1, b1, w2, b2 = pieces
        logits = (torch.tanh(features @ w1.t() + b1) @ w2.t() + b2).squeeze(-1)
        return log_prior - F.binary_cross_entropy_with_logits(logits, labels, reduction="sum")

    return log_density


def posterior_predictive(model, thetas, features):
    outputs = []
    for theta in thetas:
        torch.nn.utils.vector_to_parameters(theta, model.parameters())
        with torch.no_grad():
            outputs.append(torch.sigmoid(model(features)))
    return torch.stack(outputs).mean(0)
"""

HMC_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
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
        log_prob = names["logistic_posterior"](lib.tensor(X), lib.tensor(y), 2.0)
        with SharedDraws(lib, 2221):
            samples = names["hmc"](
                log_prob,
                lib.zeros(3, dtype=lib.float64),
                draws=12,
                n_leap=8,
                eps=0.6,
                warmup=3,
                use_func=functional,
            )
        records.append([np.stack([s.numpy() for s in samples])])
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert logs[0] == "accepted 9 of 12\n"  # accepted and rejected proposals both
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-11)


def test_hmc_bayesian_neural_network_samples_and_predicts_as_torch(capsys):
    X, y = _data(2222, 24)
    records, logs = [], []
    state = None
    for lib in (torch, rg):
        names = run_source(HMC_SOURCE if lib is torch else port(HMC_SOURCE, HMC_STEPS), lib)
        net = names["TinyClassifier"]().double()
        if state is None:
            state = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
        else:
            net.load_state_dict(state)
        data = lib.tensor(X), lib.tensor(y)
        params_init = lib.nn.utils.parameters_to_vector(net.parameters()).detach()
        log_prob = names["network_posterior"](net, *data, 1.0)
        with SharedDraws(lib, 2223):
            samples = names["hmc"](log_prob, params_init, draws=8, n_leap=6, eps=0.3)
        probs = names["posterior_predictive"](net, samples, data[0])
        records.append([np.stack([s.numpy() for s in samples]), probs.numpy()])
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert logs[0] == "accepted 7 of 8\n"  # accepted and rejected proposals both
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
