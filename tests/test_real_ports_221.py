"""A program written here in the manner of a Pyro ``SVI`` loop without Pyro, run under torch and,
ported, under retrograd from the same draws (the harness: ``tests/real_ports.py``): a Bayesian
linear regression fitted by stochastic variational inference with a mean-field guide, then a
noise model that mixes two scales.

- the guide keeps unconstrained parameters mapped by ``biject_to(constraints.positive)``; the
  mixture weights by ``biject_to(constraints.simplex)`` (the stick-breaking map); the noise
  scale's guide and prior are ``TransformedDistribution(Normal(...), [ExpTransform()])``; the
  weights' prior is ``Independent(Normal(...).expand([d]), 1)``; the ELBO averages
  ``rsample`` particles, with the weights' KL either sampled or analytic (``kl_divergence``
  of two ``Independent``s and of two ``TransformedDistribution``s with equal transforms);
  Pyro's ``ClippedAdam`` as ``clip_grad_norm_`` + ``Adam`` + ``ExponentialLR``; the
  posterior summarised by ``Normal.icdf`` intervals, ``cdf``, ``Independent.entropy``,
  ``LogNormal(...).mean``/``variance`` and the ``log_prob`` of a transformed distribution;
  ``MixtureSameFamily(Categorical(probs=...), Normal(...))`` trained by its ``log_prob``,
  then its ``cdf``, ``mean`` and ``variance``.

``Normal.rsample`` draws its noise from one seeded stream in both runs (``loc + scale *
eps``). The port changes the imports and the gradient lines.
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
    port,
    run_source,
)


@pytest.fixture(autouse=True)
def _seeded(global_streams_restored):  # noqa: F811 (the fixture imported above)
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


SVI_SOURCE = """
import torch
import torch.nn as nn
from torch.distributions import (
    Categorical, Independent, LogNormal, MixtureSameFamily, Normal, TransformedDistribution,
    biject_to, constraints, kl_divergence,
)
from torch.distributions.transforms import ExpTransform  # sigma = exp(z)

f64 = torch.float64


def log_normal_prior(dtype):
    # sigma = exp(z), z ~ N(0, 1)
    return TransformedDistribution(Normal(torch.tensor(0.0, dtype=dtype), 1.0), [ExpTransform()])


class MeanField(nn.Module):
    # one Gaussian per latent; scales live on the real line and are mapped to (0, inf)
    def __init__(self, dims):
        super().__init__()
        self.coef_mu = nn.Parameter(torch.zeros(dims, dtype=f64))
        self.coef_raw = nn.Parameter(torch.full((dims,), -1.5, dtype=f64))
        self.icpt_mu = nn.Parameter(torch.tensor(0.0, dtype=f64))
        self.icpt_raw = nn.Parameter(torch.tensor(-1.5, dtype=f64))
        self.noise_mu = nn.Parameter(torch.tensor(0.0, dtype=f64))
        self.noise_raw = nn.Parameter(torch.tensor(-1.5, dtype=f64))

    def forward(self):
        pos = biject_to(constraints.positive)
        coef = Independent(Normal(self.coef_mu, pos(self.coef_raw)), 1)
        icpt = Normal(self.icpt_mu, pos(self.icpt_raw))
        log_noise = Normal(self.noise_mu, pos(self.noise_raw))
        noise = TransformedDistribution(log_noise, [ExpTransform()])
        return coef, icpt, noise


def neg_elbo(guide, feats, target, particles, closed_form_kl):
    dims = feats.shape[-1]
    q_coef, q_icpt, q_noise = guide()
    p_coef = Independent(Normal(torch.tensor(0.0, dtype=f64), 1.0).expand([dims]), 1)
    p_icpt = Normal(torch.tensor(0.0, dtype=f64), 5.0)
    p_noise = log_normal_prior(f64)
    estimate = 0.0
    for _ in range(particles):
        coef, icpt, noise = q_coef.rsample(), q_icpt.rsample(), q_noise.rsample()
        fit = Normal(feats @ coef + icpt, noise).log_prob(target).sum()
        term = fit + p_icpt.log_prob(icpt) - q_icpt.log_prob(icpt)
        if closed_form_kl:
            term = term - kl_divergence(q_coef, p_coef) - kl_divergence(q_noise, p_noise)
        else:
            term = term + p_coef.log_prob(coef) - q_coef.log_prob(coef)
            term = term + p_noise.log_prob(noise) - q_noise.log_prob(noise)
        estimate = estimate + term
    return -estimate / particles


def run_svi(feats, target, steps, particles, closed_form_kl, record):
    guide = MeanField(feats.shape[-1])
    adam = torch.optim.Adam(guide.parameters(), lr=0.08)
    decay = torch.optim.lr_scheduler.ExponentialLR(adam, gamma=0.98)
    for step in range(steps):
        adam.zero_grad()
        loss = neg_elbo(guide, feats, target, particles, closed_form_kl)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(guide.parameters(), 5.0)
        adam.step()
        decay.step()
        record.append(loss.item())
        if step % 8 == 0:
            print("svi step", step, "elbo %.4f" % -loss.item())
    record.append({name: p.detach().clone().numpy() for name, p in guide.named_parameters()})
    return guide


def describe(guide, record):
    with torch.no_grad():
        q_coef, _, q_noise = guide()
        marginal = q_coef.base_dist
        interval = [marginal.icdf(torch.tensor(p, dtype=f64)).numpy() for p in (0.05, 0.95)]
        sigma = LogNormal(q_noise.base_dist.loc, q_noise.base_dist.scale)
        record.append({
            "low": interval[0], "high": interval[1],
            "below_zero": marginal.cdf(torch.zeros_like(guide.coef_mu)).numpy(),
            "entropy": q_coef.entropy().numpy(),
            "sigma_mean": sigma.mean.numpy(), "sigma_var": sigma.variance.numpy(),
            "density": q_noise.log_prob(sigma.mean).numpy(),
        })


def two_scale_noise(feats, target, steps, record):
    coef = torch.zeros(feats.shape[-1], dtype=f64, requires_grad=True)
    stick = torch.zeros(1, dtype=f64, requires_grad=True)
    log_sd = torch.tensor([-0.5, 1.5], dtype=f64, requires_grad=True)
    adam = torch.optim.Adam([coef, stick, log_sd], lr=0.06)
    for _ in range(steps):
        adam.zero_grad()
        mix = biject_to(constraints.simplex)(stick)
        resid = target - feats @ coef
        scales = Normal(torch.zeros(2, dtype=f64), log_sd.exp())
        noise = MixtureSameFamily(Categorical(probs=mix), scales)
        nll = -noise.log_prob(resid).mean()
        nll.backward()
        adam.step()
        record.append(nll.item())
    record.append({
        "coef": coef.detach().numpy().copy(), "mix": mix.detach().numpy().copy(),
        "log_sd": log_sd.detach().numpy().copy(), "cdf": noise.cdf(resid[:3]).detach().numpy(),
        "mean": noise.mean.detach().numpy(), "var": noise.variance.detach().numpy(),
    })
"""

SVI_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    (
        "        loss.backward()\n        torch.nn.utils.clip_grad_norm_(guide.parameters(), 5.0)\n"
        "        adam.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, guide.parameters(), 5.0)\n"
        "        adam.step(grads)\n",
    ),
    (
        "        nll.backward()\n        adam.step()\n",
        "        grads = nll.backward()\n        adam.step(grads)\n",
    ),
]


def _regression_data(seed=221, n=30):
    rng = np.random.default_rng(seed)
    feats = rng.standard_normal((n, 2))
    target = feats @ np.array([-1.2, 0.8]) + 0.3 + 0.4 * rng.standard_normal(n)
    target[::6] += 3.0 * rng.standard_normal(len(target[::6]))  # outliers: the second scale
    return feats, target


@pytest.mark.parametrize(("particles", "closed_form_kl"), [(3, False), (2, True)])
def test_hand_written_svi_bayesian_regression_trains_as_torch(capsys, particles, closed_form_kl):
    feats, target = _regression_data()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        text = (
            SVI_SOURCE
            if lib is torch
            else port(SVI_SOURCE, SVI_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib)
        data = lib.tensor(feats, dtype=lib.float64), lib.tensor(target, dtype=lib.float64)
        with SharedNormalNoise(lib, 2211):
            guide = names["run_svi"](*data, 20, particles, closed_form_kl, record)
        names["describe"](guide, record)
        names["two_scale_noise"](*data, 20, record)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)
