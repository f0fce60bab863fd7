# ruff: noqa: E501  (the program keeps a few long distribution lines)
"""Real ports, continued (the harness: ``tests/real_ports.py``): a distribution of one's own,
a program written here in the style of the truncated-normal distributions people add to
``torch.distributions`` (the toshas/torch_truncnorm kind).

Surface: ``ClippedGaussian`` deriving from ``Distribution`` with ``arg_constraints``
(``constraints.real``, ``constraints.positive``), ``has_rsample = True``, the support as
``@constraints.dependent_property(event_dim=0, is_discrete=False)`` returning
``constraints.interval(low, high)``, parameters by ``broadcast_all`` (``torch.Size()`` for
numbers), a bounds check by ``(low >= high).view(-1).tolist()``, ``torch.finfo(...).eps``,
``clamp_min``, ``torch.nan_to_num(..., nan=0.0)``, the moments and the ``entropy`` (updated
in place by ``+=``) from the normal's ``.erf()``, ``cdf``/``icdf`` by ``.erfinv()``,
``log_prob`` under ``_validate_sample``, ``rsample`` by the inverse CDF of uniforms over
``_extended_shape``, ``@lazy_property`` bounds by ``torch.stack``; a subclass calling
``super(Class, self).__init__``/``.icdf`` and bounding by ``torch.minimum``/``maximum``.
It is fitted by maximum likelihood with Adam (``validate_args=True``; a value outside the
support raises ``ValueError``) and used as a bounded policy trained through ``rsample``
with an entropy bonus (its ``nn.Linear`` made by the test, from torch's weights).

The uniforms come from ``torch.rand`` of one seeded stream in both runs. The port changes the
imports and the gradient lines.
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

TRUNCNORM_SOURCE = """
import math
from numbers import Number

import torch
from torch.distributions import constraints
from torch.distributions.distribution import Distribution
from torch.distributions.utils import lazy_property, broadcast_all

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def std_pdf(x):
    return (-0.5 * x**2 - LOG_SQRT_2PI).exp()


def std_cdf(x):
    return (0.5 * (1 + (x / math.sqrt(2)).erf())).clamp(0, 1)


def std_icdf(p):
    return math.sqrt(2) * (2 * p - 1).erfinv()


class ClippedGaussian(Distribution):
    # a normal(loc, scale) conditioned on low < x < high
    arg_constraints = {
        "loc": constraints.real,
        "scale": constraints.positive,
        "low": constraints.real,
        "high": constraints.real,
    }
    has_rsample = True

    def __init__(self, loc, scale, low, high, validate_args=None):
        self.loc, self.scale, self.low, self.high = broadcast_all(loc, scale, low, high)
        scalar = all(isinstance(v, Number) for v in (loc, scale, low, high))
        batch_shape = torch.Size() if scalar else self.loc.size()
        super().__init__(batch_shape, validate_args=validate_args)
        if any((self.low >= self.high).view(-1).tolist()):
            raise ValueError("ClippedGaussian needs low < high")
        self.eps = torch.finfo(self.loc.dtype).eps
        self.alpha = (self.low - self.loc) / self.scale
        self.beta = (self.high - self.loc) / self.scale
        self.cdf_alpha = std_cdf(self.alpha)
        self.mass = (std_cdf(self.beta) - self.cdf_alpha).clamp_min(self.eps)
        pdf_a, pdf_b = std_pdf(self.alpha), std_pdf(self.beta)
        # x * pdf(x) must read 0 at an infinite bound, not inf * 0
        tilt = torch.nan_to_num(self.alpha * pdf_a - self.beta * pdf_b, nan=0.0) / self.mass
        shift = (pdf_a - pdf_b) / self.mass
        self._mean = self.loc + self.scale * shift
        self._variance = self.scale**2 * (1 + tilt - shift**2)
        self._entropy = LOG_SQRT_2PI + 0.5 + self.mass.log()
        self._entropy += self.scale.log() + 0.5 * tilt

    @constraints.dependent_property(event_dim=0, is_discrete=False)
    def support(self):
        return constraints.interval(self.low, self.high)

    @lazy_property
    def bounds(self):
        return torch.stack([self.low, self.high])

    @property
    def mean(self):
        return self._mean

    @property
    def variance(self):
        return self._variance

    def entropy(self):
        return self._entropy

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        return ((std_cdf(z) - self.cdf_alpha) / self.mass).clamp(0, 1)

    def icdf(self, value):
        p = (self.cdf_alpha + value * self.mass).clamp(self.eps, 1 - self.eps)
        return self.loc + self.scale * std_icdf(p)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        return -0.5 * z**2 - LOG_SQRT_2PI - self.scale.log() - self.mass.log()

    def rsample(self, sample_shape=torch.Size([])):
        u = torch.rand(self._extended_shape(sample_shape), dtype=self.loc.dtype)
        return self.icdf(self.eps + (1 - 2 * self.eps) * u)  # u kept off 0 and 1


class SymmetricClippedGaussian(ClippedGaussian):
    # bounded to [-limit, limit]: a policy head for actions in a box
    def __init__(self, loc, scale, limit, validate_args=None):
        super(SymmetricClippedGaussian, self).__init__(
            loc, scale, -limit, limit, validate_args=validate_args
        )

    def icdf(self, value):
        # the inverse CDF may round a hair past a bound
        inside = super(SymmetricClippedGaussian, self).icdf(value)
        return torch.minimum(torch.maximum(inside, self.low), self.high)


def fit(samples, low, high, steps, record):
    loc = torch.tensor(0.0, requires_grad=True, dtype=torch.float64)
    log_scale = torch.zeros((), dtype=torch.float64, requires_grad=True)
    adam = torch.optim.Adam([loc, log_scale], lr=0.1)
    for _ in range(steps):
        nll = -ClippedGaussian(loc, log_scale.exp(), low, high, validate_args=True).log_prob(samples).mean()
        adam.zero_grad()
        nll.backward()
        adam.step()
        record.append(nll.item())
    fitted = ClippedGaussian(loc, log_scale.exp(), low, high)
    levels = torch.tensor([0.2, 0.5, 0.8], dtype=torch.float64)
    quantiles = fitted.icdf(levels)
    summary = {
        "loc": loc, "scale": log_scale.exp(), "mean": fitted.mean, "variance": fitted.variance,
        "entropy": fitted.entropy(), "quantiles": quantiles, "levels": fitted.cdf(quantiles),
        "mass": fitted.mass, "bounds": fitted.bounds,
    }
    record.append({k: v.detach().numpy() for k, v in summary.items()})
    checked = ClippedGaussian(loc.detach(), 1.0, low, high, validate_args=True)
    try:
        checked.log_prob(torch.tensor(low - 0.5, dtype=torch.float64))
    except ValueError:
        record.append("a value below the support is refused")


def train_policy(head, states, goals, steps, record):
    sgd = torch.optim.SGD(head.parameters(), lr=0.05, momentum=0.9)
    for _ in range(steps):
        out = head(states)
        pi = SymmetricClippedGaussian(out[:, 0], torch.nn.functional.softplus(out[:, 1]) + 1e-3, 1.0)
        actions = pi.rsample()  # reparameterized: the reward's gradient flows into the head
        objective = -((actions - goals) ** 2).mean() + 0.01 * pi.entropy().mean()
        loss = -objective
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        record.append(loss.item())
    record.append({k: v.detach().numpy().copy() for k, v in head.state_dict().items()})
"""

TRUNCNORM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "        nll.backward()\n        adam.step()\n",
        "        grads = nll.backward()\n        adam.step(grads)\n",
    ),
    (
        "        loss.backward()\n        sgd.step()\n",
        "        grads = loss.backward()\n        sgd.step(grads)\n",
    ),
]


def test_truncated_normal_distribution_of_ones_own_fits_and_trains_as_torch():
    rng = np.random.default_rng(2260)
    draws = 0.5 + 1.2 * rng.standard_normal(400)
    data = draws[(draws > -1.0) & (draws < 2.0)][:80]
    features = rng.standard_normal((16, 3))
    targets = np.tanh(features @ np.array([0.8, -0.5, 0.3]))
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            TRUNCNORM_SOURCE
            if lib is torch
            else port(TRUNCNORM_SOURCE, TRUNCNORM_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib)
        names["fit"](lib.tensor(data), -1.0, 2.0, 30, record)
        net = lib.nn.Linear(3, 2).double()
        initialize(net)
        with SharedDraws(lib, 2261):
            names["train_policy"](net, lib.tensor(features), lib.tensor(targets), 20, record)
        records.append(record)
    assert "a value below the support is refused" in records[0]
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
