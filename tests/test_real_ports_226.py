# ruff: noqa: E501  (the programs are kept in their authors' manner: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a distribution of one's own in the manner of the widely copied ``TruncatedNormal`` for
``torch.distributions`` (toshas/torch_truncnorm's layout): ``TruncatedStandardNormal``
deriving from ``Distribution`` with ``arg_constraints`` of ``constraints.real``,
``has_rsample = True``, the support as ``@constraints.dependent_property(is_discrete=False,
event_dim=0)`` returning ``constraints.interval(self.a, self.b)``, parameters by
``broadcast_all``, ``torch.finfo(...).eps``, the moments and ``entropy`` from the normal's
``erf``, ``cdf``/``icdf`` by ``erfinv``, ``log_prob`` under ``_validate_sample``, and
``rsample`` by the inverse CDF of uniforms; ``TruncatedNormal`` deriving from it with ``loc``
and ``scale`` (``@lazy_property`` for the standardized bounds), then fitted by maximum
likelihood to truncated data and used as a bounded policy trained by the reparameterized
gradient with an entropy bonus (its ``nn.Linear`` made by the test, from torch's weights).

The uniforms come from ``torch.rand`` of one seeded stream in both runs (the original draws
with ``torch.empty(shape).uniform_(...)``). The lines changed: the imports and the gradient
lines.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


TRUNCNORM_SOURCE = '''
import math
from numbers import Number

import torch
from torch.distributions import Distribution, constraints
from torch.distributions.utils import broadcast_all, lazy_property

CONST_SQRT_2 = math.sqrt(2)
CONST_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
CONST_INV_SQRT_2 = 1 / math.sqrt(2)
CONST_LOG_INV_SQRT_2PI = math.log(CONST_INV_SQRT_2PI)
CONST_LOG_SQRT_2PI_E = 0.5 * math.log(2 * math.pi * math.e)


class TruncatedStandardNormal(Distribution):
    """Truncated Standard Normal distribution."""

    arg_constraints = {'a': constraints.real, 'b': constraints.real}
    has_rsample = True

    def __init__(self, a, b, validate_args=None):
        self.a, self.b = broadcast_all(a, b)
        if isinstance(a, Number) and isinstance(b, Number):
            batch_shape = torch.Size()
        else:
            batch_shape = self.a.size()
        super(TruncatedStandardNormal, self).__init__(batch_shape, validate_args=validate_args)
        if self.a.dtype != self.b.dtype:
            raise ValueError('Truncation bounds types are different')
        if any((self.a >= self.b).view(-1,).tolist()):
            raise ValueError('Incorrect truncation range')
        eps = torch.finfo(self.a.dtype).eps
        self._dtype_min_gt_0 = eps
        self._dtype_max_lt_1 = 1 - eps
        self._little_phi_a = self._little_phi(self.a)
        self._little_phi_b = self._little_phi(self.b)
        self._big_phi_a = self._big_phi(self.a)
        self._big_phi_b = self._big_phi(self.b)
        self._Z = (self._big_phi_b - self._big_phi_a).clamp_min(eps)
        self._log_Z = self._Z.log()
        little_phi_coeff_a = torch.nan_to_num(self.a, nan=math.nan)
        little_phi_coeff_b = torch.nan_to_num(self.b, nan=math.nan)
        self._lpbb_m_lpaa_d_Z = (self._little_phi_b * little_phi_coeff_b - self._little_phi_a * little_phi_coeff_a) / self._Z
        self._mean = -(self._little_phi_b - self._little_phi_a) / self._Z
        self._variance = 1 - self._lpbb_m_lpaa_d_Z - ((self._little_phi_b - self._little_phi_a) / self._Z) ** 2
        self._entropy = CONST_LOG_SQRT_2PI_E + self._log_Z - 0.5 * self._lpbb_m_lpaa_d_Z

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.a, self.b)

    @property
    def mean(self):
        return self._mean

    @property
    def variance(self):
        return self._variance

    def entropy(self):
        return self._entropy

    @property
    def auc(self):
        return self._Z

    @staticmethod
    def _little_phi(x):
        return (-(x ** 2) * 0.5).exp() * CONST_INV_SQRT_2PI

    @staticmethod
    def _big_phi(x):
        phi = 0.5 * (1 + (x * CONST_INV_SQRT_2).erf())
        return phi.clamp(0, 1)

    @staticmethod
    def _inv_big_phi(x):
        return CONST_SQRT_2 * (2 * x - 1).erfinv()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self._standard_cdf(value)

    def _standard_cdf(self, value):
        return ((self._big_phi(value) - self._big_phi_a) / self._Z).clamp(0, 1)

    def icdf(self, value):
        y = self._big_phi_a + value * self._Z
        y = y.clamp(self._dtype_min_gt_0, self._dtype_max_lt_1)
        return self._inv_big_phi(y)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self._standard_log_prob(value)

    def _standard_log_prob(self, value):
        return CONST_LOG_INV_SQRT_2PI - self._log_Z - (value ** 2) * 0.5

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        p = torch.rand(shape, dtype=self.a.dtype) * (self._dtype_max_lt_1 - self._dtype_min_gt_0) + self._dtype_min_gt_0
        return self.icdf(p)


class TruncatedNormal(TruncatedStandardNormal):
    """Truncated Normal distribution."""

    has_rsample = True
    arg_constraints = {'loc': constraints.real, 'scale': constraints.positive,
                       'a': constraints.real, 'b': constraints.real}

    def __init__(self, loc, scale, a, b, validate_args=None):
        self.loc, self.scale, a, b = broadcast_all(loc, scale, a, b)
        self._non_std_a = a
        self._non_std_b = b
        a = (a - self.loc) / self.scale
        b = (b - self.loc) / self.scale
        super(TruncatedNormal, self).__init__(a, b, validate_args=validate_args)
        self._log_scale = self.scale.log()
        self._mean = self._mean * self.scale + self.loc
        self._variance = self._variance * self.scale ** 2
        self._entropy += self._log_scale

    @lazy_property
    def bounds(self):
        return torch.stack([self._non_std_a, self._non_std_b])

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self._non_std_a, self._non_std_b)

    def _to_std_rv(self, value):
        return (value - self.loc) / self.scale

    def _from_std_rv(self, value):
        return value * self.scale + self.loc

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self._standard_cdf(self._to_std_rv(value))

    def icdf(self, value):
        return self._from_std_rv(super(TruncatedNormal, self).icdf(value))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self._standard_log_prob(self._to_std_rv(value)) - self._log_scale


def fit(data, low, high, steps, record):
    loc = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    log_scale = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([loc, log_scale], lr=0.1)
    for step in range(steps):
        d = TruncatedNormal(loc, log_scale.exp(), low, high, validate_args=True)
        loss = -d.log_prob(data).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    d = TruncatedNormal(loc, log_scale.exp(), low, high)
    q = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    record.append({"loc": loc.detach().numpy(), "scale": log_scale.exp().detach().numpy(),
                   "mean": d.mean.detach().numpy(), "variance": d.variance.detach().numpy(),
                   "entropy": d.entropy().detach().numpy(), "icdf": d.icdf(q).detach().numpy(),
                   "cdf": d.cdf(d.icdf(q)).detach().numpy(), "auc": d.auc.detach().numpy(),
                   "bounds": d.bounds.detach().numpy()})
    try:
        TruncatedNormal(loc, log_scale.exp(), low, high, validate_args=True).log_prob(torch.tensor(high + 1.0, dtype=torch.float64))
    except ValueError:
        record.append("outside the support refused")


def policy(net, features, targets, steps, record):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        out = net(features)
        loc, scale = out[:, 0], torch.nn.functional.softplus(out[:, 1]) + 1e-3
        pi = TruncatedNormal(loc, scale, -1.0, 1.0)
        action = pi.rsample()
        reward = -(action - targets) ** 2
        loss = -(reward.mean() + 0.01 * pi.entropy().mean())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
    return net
'''

TRUNCNORM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
        "        optimizer.zero_grad()\n        grads = loss.backward()\n        optimizer.step(grads)\n",
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
            names["policy"](net, lib.tensor(features), lib.tensor(targets), 20, record)
        records.append(record)
    assert "outside the support refused" in records[0]
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
