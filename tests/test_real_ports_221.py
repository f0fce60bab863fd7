# ruff: noqa: E501, N806  (the programs are kept in their authors' manner: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
stochastic variational inference written by hand, in the manner of Pyro's ``SVI`` loop
without Pyro (a Bayesian linear regression with a mean-field guide).

- the guide keeps unconstrained parameters and maps them by ``biject_to(constraints.
  positive)`` (and ``biject_to(constraints.simplex)``, the stick-breaking map, for mixture weights over two noise
  levels); the noise scale's guide and prior are ``TransformedDistribution(Normal(...),
  [ExpTransform()])``; the weights are ``Independent(Normal(...).expand([d]), 1)``; the ELBO
  is estimated with ``rsample`` over several particles, with the KL of the weights either
  sampled or analytic (``kl_divergence`` of two ``Independent``s and of two
  ``TransformedDistribution``s with equal transforms); Pyro's ``ClippedAdam`` written as
  ``clip_grad_norm_`` + ``Adam`` + ``ExponentialLR``; the posterior summarized by
  ``LogNormal(...).mean``/``variance``, ``Normal.icdf`` credible intervals and ``cdf``.

``Normal.rsample`` draws its noise from one seeded stream in both runs (``loc + scale *
eps``). The lines changed: the imports and the gradient lines.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


class SharedNormalNoise:
    """``Normal.rsample``/``sample`` of a library drawing their noise from one seeded
    stream (``loc + scale * eps``)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        normal = lib.distributions.Normal
        self.saved = {name: normal.__dict__.get(name) for name in ("rsample", "sample")}

        def rsample(distribution, sample_shape=()):
            shape = tuple(sample_shape) + tuple(distribution.batch_shape)
            noise = lib.tensor(rng.standard_normal(shape), dtype=distribution.loc.dtype)
            return distribution.loc + distribution.scale * noise

        def sample(distribution, sample_shape=()):
            with lib.no_grad():
                return rsample(distribution, sample_shape)

        normal.rsample, normal.sample = rsample, sample
        return self

    def __exit__(self, *exc):
        normal = self.lib.distributions.Normal
        for name, saved in self.saved.items():
            if saved is None:
                delattr(normal, name)
            else:
                setattr(normal, name, saved)
        return False


SVI_SOURCE = '''
import torch
import torch.nn as nn
from torch.distributions import (Normal, LogNormal, Independent, TransformedDistribution,
                                 Categorical, MixtureSameFamily, kl_divergence, constraints,
                                 biject_to, transform_to)
from torch.distributions.transforms import ExpTransform


def model_log_joint(w, b, sigma, X, y):
    d = X.shape[-1]
    prior_w = Independent(Normal(torch.tensor(0., dtype=X.dtype), 1.).expand([d]), 1)
    prior_b = Normal(torch.tensor(0., dtype=X.dtype), 10.)
    prior_sigma = TransformedDistribution(Normal(torch.tensor(0., dtype=X.dtype), 1.), [ExpTransform()])
    likelihood = Normal(X @ w + b, sigma)
    return prior_w.log_prob(w) + prior_b.log_prob(b) + prior_sigma.log_prob(sigma) + likelihood.log_prob(y).sum(-1)


class Guide(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w_loc = nn.Parameter(torch.zeros(d, dtype=torch.float64))
        self.w_unconstrained_scale = nn.Parameter(torch.full((d,), -2., dtype=torch.float64))
        self.b_loc = nn.Parameter(torch.tensor(0., dtype=torch.float64))
        self.b_unconstrained_scale = nn.Parameter(torch.tensor(-2., dtype=torch.float64))
        self.log_sigma_loc = nn.Parameter(torch.tensor(0., dtype=torch.float64))
        self.log_sigma_unconstrained_scale = nn.Parameter(torch.tensor(-2., dtype=torch.float64))

    def forward(self):
        positive = biject_to(constraints.positive)
        q_w = Independent(Normal(self.w_loc, positive(self.w_unconstrained_scale)), 1)
        q_b = Normal(self.b_loc, positive(self.b_unconstrained_scale))
        q_sigma = TransformedDistribution(
            Normal(self.log_sigma_loc, positive(self.log_sigma_unconstrained_scale)), [ExpTransform()])
        return q_w, q_b, q_sigma


def elbo(guide, X, y, num_particles, analytic_kl):
    q_w, q_b, q_sigma = guide()
    d = X.shape[-1]
    prior_w = Independent(Normal(torch.zeros(d, dtype=X.dtype), torch.ones(d, dtype=X.dtype)), 1)
    prior_sigma = TransformedDistribution(Normal(torch.tensor(0., dtype=X.dtype), torch.tensor(1., dtype=X.dtype)), [ExpTransform()])
    total = 0.
    for _ in range(num_particles):
        w = q_w.rsample()
        b = q_b.rsample()
        sigma = q_sigma.rsample()
        if analytic_kl:
            log_lik = Normal(X @ w + b, sigma).log_prob(y).sum()
            particle = log_lik + Normal(torch.tensor(0., dtype=X.dtype), 10.).log_prob(b) - q_b.log_prob(b)
            particle = particle - kl_divergence(q_w, prior_w) - kl_divergence(q_sigma, prior_sigma)
        else:
            particle = model_log_joint(w, b, sigma, X, y) - q_w.log_prob(w) - q_b.log_prob(b) - q_sigma.log_prob(sigma)
        total = total + particle
    return total / num_particles


def train(X, y, num_steps, num_particles, analytic_kl, record):
    guide = Guide(X.shape[-1])
    optimizer = torch.optim.Adam(guide.parameters(), lr=0.05, betas=(0.9, 0.999))
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.99)
    for step in range(num_steps):
        optimizer.zero_grad()
        loss = -elbo(guide, X, y, num_particles, analytic_kl)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(guide.parameters(), 10.0)
        optimizer.step()
        scheduler.step()
        record.append(loss.item())
        if step % 10 == 0:
            print(f"step {step:3d}  elbo {-loss.item():.3f}")
    record.append({k: v.detach().clone().numpy() for k, v in guide.state_dict().items()})
    return guide


def summarize(guide, record):
    with torch.no_grad():
        q_w, q_b, q_sigma = guide()
        lower = q_w.base_dist.icdf(torch.tensor(0.025, dtype=torch.float64))
        upper = q_w.base_dist.icdf(torch.tensor(0.975, dtype=torch.float64))
        zero_mass = q_w.base_dist.cdf(torch.zeros_like(guide.w_loc))
        sigma_posterior = LogNormal(q_sigma.base_dist.loc, q_sigma.base_dist.scale)
        record.append({"lower": lower.numpy(), "upper": upper.numpy(), "zero_mass": zero_mass.numpy(),
                       "entropy": q_w.entropy().numpy(), "sigma_mean": sigma_posterior.mean.numpy(),
                       "sigma_variance": sigma_posterior.variance.numpy(),
                       "log_density_at_mean": q_sigma.log_prob(sigma_posterior.mean).numpy()})


def noise_mixture(X, y, num_steps, record):
    """The noise as a mixture of two scales: weights on the simplex by stick breaking."""
    w = torch.zeros(X.shape[-1], dtype=torch.float64, requires_grad=True)
    unconstrained_weights = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    log_scales = torch.tensor([-1., 1.], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([w, unconstrained_weights, log_scales], lr=0.05)
    for step in range(num_steps):
        optimizer.zero_grad()
        weights = biject_to(constraints.simplex)(unconstrained_weights)
        residual = y - X @ w
        noise = MixtureSameFamily(Categorical(probs=weights), Normal(torch.zeros(2, dtype=torch.float64), log_scales.exp()))
        loss = -noise.log_prob(residual).mean()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append({'w': w.detach().numpy().copy(), "weights": weights.detach().numpy().copy(),
                   "log_scales": log_scales.detach().numpy().copy(), "cdf": noise.cdf(residual[:4]).detach().numpy(),
                   "mean": noise.mean.detach().numpy(), "variance": noise.variance.detach().numpy()})
'''

SVI_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    (
        "        loss.backward()\n        torch.nn.utils.clip_grad_norm_(guide.parameters(), 10.0)\n        optimizer.step()\n",
        "        grads = loss.backward()\n        torch.nn.utils.clip_grad_norm_(grads, guide.parameters(), 10.0)\n        optimizer.step(grads)\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n        record.append(loss.item())\n    record.append({'w': w.",
        "        grads = loss.backward()\n        optimizer.step(grads)\n        record.append(loss.item())\n    record.append({'w': w.",
    ),
]


def _data(seed=2210, n=40, d=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = X @ np.array([1.5, -2.0, 0.0]) + 0.7 + 0.5 * rng.standard_normal(n)
    y[::7] += 4.0 * rng.standard_normal(len(y[::7]))  # a few outliers for the noise mixture
    return X, y


@pytest.mark.parametrize(("num_particles", "analytic_kl"), [(1, False), (3, False), (2, True)])
def test_hand_written_svi_bayesian_regression_trains_as_torch(capsys, num_particles, analytic_kl):
    X, y = _data()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        text = (
            SVI_SOURCE
            if lib is torch
            else port(SVI_SOURCE, SVI_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib)
        data = lib.tensor(X, dtype=lib.float64), lib.tensor(y, dtype=lib.float64)
        with SharedNormalNoise(lib, 2211):
            guide = names["train"](*data, 30, num_particles, analytic_kl, record)
        names["summarize"](guide, record)
        names["noise_mixture"](*data, 25, record)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)
