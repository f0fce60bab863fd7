# ruff: noqa: E501  (the programs are kept in their authors' manner: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
masked autoregressive flows written on ``torch.distributions``: MADE (Germain et al.) with its
masks in buffers (``MaskedLinear`` deriving from ``nn.Linear``, ``F.linear(input, self.mask *
self.weight, self.bias)``, the degrees drawn by ``torch.randint`` and the masks by broadcast
comparison), wrapped in ``Transform`` subclasses of one's own (``domain``/``codomain =
constraints.real_vector``, ``bijective = True``, ``super().__init__(cache_size=1)``,
``_call``, ``_inverse``, ``log_abs_det_jacobian``, ``__eq__``): MAF (density by one pass,
sampling by a loop over the dimensions) and IAF (the other way round), a ``ReverseTransform``
of one's own between them, composed in ``TransformedDistribution(Independent(Normal(...), 1),
[...])`` and trained by ``-flow.log_prob(x).mean()``; then ``flow.sample``/``rsample`` through
``flow.transforms`` and the cache (the IAF's ``log_prob`` of its own ``rsample`` reads the
cached input), ``ComposeTransform(...).inv`` and ``.with_cache()``.

The draws (``torch.randint``, ``Normal.sample``/``rsample``) come from one seeded stream in
both runs. The lines changed: the imports and the gradient lines.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source
from test_real_ports_221 import SharedNormalNoise


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


FLOW_SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Independent, Normal, TransformedDistribution, Transform, constraints
from torch.distributions.transforms import ComposeTransform


class MaskedLinear(nn.Linear):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__(in_features, out_features, bias)
        self.register_buffer('mask', torch.ones(out_features, in_features))

    def set_mask(self, mask):
        self.mask.data.copy_(mask.t().to(self.mask.dtype))

    def forward(self, input):
        return F.linear(input, self.mask * self.weight, self.bias)


class MADE(nn.Module):
    def __init__(self, nin, hidden_sizes, nout):
        super().__init__()
        self.nin, self.nout, self.hidden_sizes = nin, nout, hidden_sizes
        assert self.nout % self.nin == 0, "nout must be integer multiple of nin"
        self.net = []
        hs = [nin] + hidden_sizes + [nout]
        for h0, h1 in zip(hs, hs[1:]):
            self.net.extend([MaskedLinear(h0, h1), nn.ReLU()])
        self.net.pop()
        self.net = nn.Sequential(*self.net)
        self.update_masks()

    def update_masks(self):
        L = len(self.hidden_sizes)
        self.m = {}
        self.m[-1] = torch.arange(self.nin)
        for l in range(L):
            self.m[l] = torch.randint(self.m[l - 1].min().item(), self.nin - 1, size=(self.hidden_sizes[l],))
        masks = [self.m[l - 1][:, None] <= self.m[l][None, :] for l in range(L)]
        masks.append(self.m[L - 1][:, None] < self.m[-1][None, :])
        if self.nout > self.nin:
            k = int(self.nout / self.nin)
            masks[-1] = torch.cat([masks[-1]] * k, dim=1)
        layers = [l for l in self.net.modules() if isinstance(l, MaskedLinear)]
        for l, m in zip(layers, masks):
            l.set_mask(m)

    def forward(self, x):
        return self.net(x)


class MAFTransform(Transform):
    """x = u * exp(log_s(x_<i)) + mu(x_<i): density in one pass, sampling in nin passes."""
    domain = constraints.real_vector
    codomain = constraints.real_vector
    bijective = True
    sign = +1

    def __init__(self, made):
        super().__init__(cache_size=1)
        self.made = made

    def __eq__(self, other):
        return isinstance(other, MAFTransform) and other.made is self.made

    def _params(self, x):
        mu, log_s = self.made(x).chunk(2, dim=-1)
        return mu, torch.tanh(log_s)

    def _call(self, u):
        x = torch.zeros_like(u)
        for i in range(u.shape[-1]):
            mu, log_s = self._params(x)
            x = x.clone()
            x[..., i] = u[..., i] * torch.exp(log_s[..., i]) + mu[..., i]
        return x

    def _inverse(self, x):
        mu, log_s = self._params(x)
        return (x - mu) * torch.exp(-log_s)

    def log_abs_det_jacobian(self, u, x):
        _, log_s = self._params(x)
        return log_s.sum(-1)


class IAFTransform(Transform):
    """x = u * exp(log_s(u_<i)) + mu(u_<i): sampling in one pass, density in nin passes."""
    domain = constraints.real_vector
    codomain = constraints.real_vector
    bijective = True

    def __init__(self, made):
        super().__init__(cache_size=1)
        self.made = made

    def _params(self, u):
        mu, log_s = self.made(u).chunk(2, dim=-1)
        return mu, torch.tanh(log_s)

    def _call(self, u):
        mu, log_s = self._params(u)
        return u * log_s.exp() + mu

    def _inverse(self, x):
        u = torch.zeros_like(x)
        for i in range(x.shape[-1]):
            mu, log_s = self._params(u)
            u = u.clone()
            u[..., i] = (x[..., i] - mu[..., i]) * torch.exp(-log_s[..., i])
        return u

    def log_abs_det_jacobian(self, u, x):
        _, log_s = self._params(u)
        return log_s.sum(-1)


class ReverseTransform(Transform):
    domain = constraints.real_vector
    codomain = constraints.real_vector
    bijective = True
    sign = +1

    def __eq__(self, other):
        return isinstance(other, ReverseTransform)

    def _call(self, x):
        return x.flip(-1)

    def _inverse(self, y):
        return y.flip(-1)

    def log_abs_det_jacobian(self, x, y):
        return torch.zeros(x.shape[:-1], dtype=x.dtype)


class Flow(nn.Module):
    def __init__(self, dim, hidden, num_layers, kind):
        super().__init__()
        self.mades = nn.ModuleList([MADE(dim, [hidden, hidden], 2 * dim) for _ in range(num_layers)])
        cls = MAFTransform if kind == "maf" else IAFTransform
        self.transforms = []
        for made in self.mades:
            self.transforms.extend([cls(made), ReverseTransform()])
        self.register_buffer("base_loc", torch.zeros(dim))
        self.register_buffer("base_scale", torch.ones(dim))

    def dist(self):
        base = Independent(Normal(self.base_loc, self.base_scale), 1)
        return TransformedDistribution(base, self.transforms)


def moons(n, noise=0.1):
    t = torch.rand(n) * 3.14159
    upper = torch.rand(n) > 0.5
    x = torch.where(upper, torch.cos(t), 1 - torch.cos(t))
    y = torch.where(upper, torch.sin(t), 0.5 - torch.sin(t))
    return torch.stack([x, y], dim=-1) + noise * torch.randn(n, 2)


def train(flow, steps, record):
    optimizer = torch.optim.Adam(flow.parameters(), lr=3e-3, weight_decay=1e-5)
    for step in range(steps):
        x = moons(64)
        loss = -flow.dist().log_prob(x).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        if step % 5 == 0:
            print(f"iter {step}: nll {loss.item():.4f}")


def evaluate(flow, record):
    dist = flow.dist()
    with torch.no_grad():
        samples = dist.sample((16,))
        record.append(samples.numpy().copy())
        record.append(dist.log_prob(samples).numpy().copy())
    z = dist.rsample((8,))
    log_q = dist.log_prob(z)  # the IAF's inverse is read from the cache
    record.append(log_q.detach().numpy().copy())
    composed = ComposeTransform(flow.transforms)
    x = moons(5)
    u = composed.inv(x)
    record.append(u.detach().numpy().copy())
    record.append(composed.log_abs_det_jacobian(u, x).detach().numpy().copy())
    record.append(composed(u).detach().numpy().copy())
    cached = composed.with_cache(1)
    record.append(torch.stack([cached(u), composed.inv.inv(u)]).detach().numpy().copy())
'''

FLOW_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("kind", ["maf", "iaf"])
def test_masked_autoregressive_flows_on_distributions_train_as_torch(capsys, kind):
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            FLOW_SOURCE
            if lib is torch
            else port(FLOW_SOURCE, FLOW_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib)
        with SharedDraws(lib, 2230), SharedNormalNoise(lib, 2231):
            flow = names["Flow"](2, 16, 2, kind)
            initialize(flow)
            names["train"](flow, 12, record)
            record.append({k: v.detach().numpy().copy() for k, v in flow.state_dict().items()})
            names["evaluate"](flow, record)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
