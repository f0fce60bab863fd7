"""Real ports, continued (the harness: ``tests/real_ports.py``): masked autoregressive flows
on ``torch.distributions``, a program written here in the style of MADE/MAF/IAF repositories
(karpathy's pytorch-made and pytorch-normalizing-flows): an autoregressive network whose masks
live in buffers, wrapped in ``Transform`` subclasses of our own, trained on two moons.

The surface it exercises: a ``nn.Linear`` subclass with a ``register_buffer`` mask set by
``mask.data.copy_(m.t().to(dtype))`` and applied by ``F.linear(x, self.mask * self.weight,
self.bias)``; unit degrees drawn by ``torch.randint(low, high, size=(n,))`` and masks by
broadcast comparison, repeated by ``torch.cat([m] * k, dim=1)``; ``Transform`` subclasses
(``domain``/``codomain = constraints.real_vector``, ``bijective = True``, ``sign``,
``super().__init__(cache_size=1)``, ``_call``, ``_inverse``, ``log_abs_det_jacobian``,
``__eq__``): the MAF direction (density in one pass, sampling by a loop writing
``x[..., i]`` of a clone) and the IAF direction (the other way round), a flip permutation
between layers, composed in ``TransformedDistribution(Independent(Normal(loc, scale), 1),
[...])`` and trained by ``-flow.log_prob(x).mean()`` with ``Adam(weight_decay=...)``; then
``sample``/``rsample``, the IAF's ``log_prob`` of its own ``rsample`` read from the cache,
``ComposeTransform(...).inv``, ``log_abs_det_jacobian``, ``.with_cache(1)`` and ``inv.inv``.

Regressions guarded: user ``Transform`` subclasses with caching and ``__eq__`` inside a
``TransformedDistribution`` and a ``ComposeTransform``; buffers copied into through ``.data``.
The draws (``torch.randint``/``rand``/``randn``, ``Normal.sample``/``rsample``) come from one
seeded stream in both runs. The lines changed: the imports and the gradient lines.
"""

from __future__ import annotations

import pytest
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
from test_real_ports_221 import SharedNormalNoise

FLOW_SOURCE = """
import torch
import torch.nn as nn
from torch.distributions import ComposeTransform, Independent, Normal, constraints
from torch.distributions import Transform, TransformedDistribution
from torch.nn import functional as F


class MaskedDense(nn.Linear):
    # a linear layer that only sees the inputs its mask (a buffer) lets through
    def __init__(self, n_in, n_out):
        super().__init__(n_in, n_out)
        self.register_buffer("mask", torch.ones(n_out, n_in))

    def use_mask(self, allowed):  # allowed: (n_in, n_out) booleans
        self.mask.data.copy_(allowed.t().to(self.mask.dtype))

    def forward(self, x):
        return F.linear(x, self.mask * self.weight, self.bias)


def degree_masks(n_in, widths, repeat):
    degrees = [torch.arange(n_in)]
    for width in widths:
        low = degrees[-1].min().item()
        degrees.append(torch.randint(low, n_in - 1, size=(width,)))
    masks = [a[:, None] <= b[None, :] for a, b in zip(degrees, degrees[1:])]
    final = degrees[-1][:, None] < degrees[0][None, :]  # strictly earlier inputs only
    return masks + [torch.cat([final] * repeat, dim=1)]


class Made(nn.Module):
    def __init__(self, n_in, widths, repeat=2):
        super().__init__()
        sizes = [n_in, *widths, n_in * repeat]
        layers = []
        for a, b in zip(sizes, sizes[1:]):
            layers += [MaskedDense(a, b), nn.ReLU()]
        self.body = nn.Sequential(*layers[:-1])
        dense = [m for m in self.body.modules() if isinstance(m, MaskedDense)]
        for layer, allowed in zip(dense, degree_masks(n_in, widths, repeat)):
            layer.use_mask(allowed)

    def shift_and_log_scale(self, x):
        shift, raw = self.body(x).chunk(2, dim=-1)
        return shift, torch.tanh(raw)  # bounded scales keep the loop stable


class Autoregressive(Transform):
    # x = u * exp(s) + m; MAF conditions m, s on x (fast density), IAF on u (fast sampling)
    domain = codomain = constraints.real_vector
    bijective = True
    sign = +1

    def __init__(self, made, fast_density):
        Transform.__init__(self, cache_size=1)
        self.made, self.fast_density = made, fast_density

    def __eq__(self, other):
        return isinstance(other, Autoregressive) and other.made is self.made

    def _call(self, u):
        if not self.fast_density:
            shift, log_scale = self.made.shift_and_log_scale(u)
            return u * log_scale.exp() + shift
        x = torch.zeros_like(u)
        for i in range(u.shape[-1]):  # one dimension per pass
            shift, log_scale = self.made.shift_and_log_scale(x)
            x = x.clone()
            x[..., i] = u[..., i] * torch.exp(log_scale[..., i]) + shift[..., i]
        return x

    def _inverse(self, x):
        if self.fast_density:
            shift, log_scale = self.made.shift_and_log_scale(x)
            return (x - shift) * torch.exp(-log_scale)
        u = torch.zeros_like(x)
        for i in range(x.shape[-1]):
            shift, log_scale = self.made.shift_and_log_scale(u)
            u = u.clone()
            u[..., i] = (x[..., i] - shift[..., i]) * torch.exp(-log_scale[..., i])
        return u

    def log_abs_det_jacobian(self, noise, value):
        given = value if self.fast_density else noise
        return self.made.shift_and_log_scale(given)[1].sum(-1)


class Flip(Transform):
    domain = codomain = constraints.real_vector
    bijective = True
    sign = +1

    def __eq__(self, other):
        return isinstance(other, Flip)

    def _call(self, x):
        return x.flip(-1)

    def _inverse(self, y):
        return y.flip(-1)

    def log_abs_det_jacobian(self, inputs, outputs):
        return torch.zeros(inputs.shape[:-1], dtype=inputs.dtype)


class Flow(nn.Module):
    def __init__(self, dim, width, depth, kind):
        super().__init__()
        self.mades = nn.ModuleList(Made(dim, [width, width]) for _ in range(depth))
        self.transforms = []
        for made in self.mades:
            self.transforms += [Autoregressive(made, kind == "maf"), Flip()]
        self.register_buffer("loc", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))

    def dist(self):
        prior = Independent(Normal(self.loc, self.scale), 1)
        return TransformedDistribution(prior, self.transforms)


def two_moons(n, jitter=0.1):
    angle = torch.rand(n) * math.pi
    top = torch.rand(n) > 0.5
    a = torch.where(top, torch.cos(angle), 1 - torch.cos(angle))
    b = torch.where(top, torch.sin(angle), 0.5 - torch.sin(angle))
    return torch.stack([a, b], dim=-1) + jitter * torch.randn(n, 2)


def fit(flow, steps, record):
    opt = torch.optim.Adam(flow.parameters(), lr=3e-3, weight_decay=1e-5)
    for step in range(steps):
        nll = -flow.dist().log_prob(two_moons(48)).mean()
        opt.zero_grad()
        nll.backward()
        opt.step()
        record.append(nll.item())
        if step % 4 == 0:
            print(f"step {step:3d}  nll {nll.item():.4f}")


def evaluate(flow, record):
    dist = flow.dist()
    with torch.no_grad():
        drawn = dist.sample((12,))
        record += [drawn.numpy().copy(), dist.log_prob(drawn).numpy().copy()]
    z = dist.rsample((6,))
    record.append(dist.log_prob(z).detach().numpy().copy())  # the IAF reads its cache
    chain = ComposeTransform(flow.transforms)
    x = two_moons(4)
    u = chain.inv(x)
    outs = [u, chain.log_abs_det_jacobian(u, x), chain(u)]
    outs.append(torch.stack([chain.with_cache(1)(u), chain.inv.inv(u)]))
    record += [t.detach().numpy().copy() for t in outs]
"""

FLOW_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    (
        "        nll.backward()\n        opt.step()\n",
        "        grads = nll.backward()\n        opt.step(grads)\n",
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
            names["fit"](flow, 8, record)
            record.append({k: v.detach().numpy().copy() for k, v in flow.state_dict().items()})
            names["evaluate"](flow, record)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
