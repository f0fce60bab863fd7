"""Real-port tests, continued (the harness: ``tests/real_ports.py``): generative models, as
programs written here in the style of five research code bases, each run under torch and,
ported, under retrograd from the same weights and draws.

- A conditional neural spline flow on two moons, in the style of bayesiains/nflows: monotone
  rational-quadratic splines with linear tails (in-place writes ``edges[..., -1] += eps``,
  ``raw_d[..., 0] = constant``, ``raw_w /= np.sqrt(...)`` on views of a net's output,
  ``out[outside] = x[outside]`` and the tuple assignment of both masked spline results,
  ``gather(-1, k)[..., 0]``, ``F.softplus(beta=)``, the inverse through a quadratic's root),
  couplings whose feature ids are ``masked_select``-ed buffers and whose output is a
  ``torch.empty_like`` filled by index assignment, ``F.glu`` of the context,
  ``BatchNorm1d(eps=1e-3)``, a float64 0-d buffer subtracted from float32 log-densities,
  ``torch.Size([...]) + x.shape[1:]``, sampling through the inverse.
- Karras-style diffusion in the style of k-diffusion: ``x[(...,) + (None,) * n]``, an EMA by
  ``mul_``/``add_(alpha=)`` under ``@torch.no_grad()``, a learning-rate schedule subclassing
  ``_LRScheduler`` that reads ``self._get_lr_called_within_step``, log-normal sigmas, a
  denoiser with soft-min-SNR weighting and Fourier features, Karras and exponential sigma
  schedules, Euler (with churn, ``t_min <= sigmas[i] <= t_max``), Heun, ancestral Euler
  (``min`` of 0-d tensors) and DPM-Solver++(2M) through ``sigma.log()`` of the final zero.
- A DiffWave-style vocoder and a MelGAN-style one: see their tests.
- A two-level VQ-VAE in the style of rosinality's VQ-VAE-2: codebooks in buffers updated by
  ``.data.mul_(decay).add_(..., alpha=)`` and ``.data.copy_``, ``(-dist).max(1)``,
  ``F.one_hot(...).type(dtype)``, ``F.embedding`` of the transposed codebook, the
  straight-through ``x + (q - x).detach()``, ``out += x`` after ``ReLU(inplace=True)``,
  levels joined by ``ConvTranspose2d`` and ``torch.cat``, codes decoded back.

Defect found and fixed: a schedule of one's own reading torch's
``self._get_lr_called_within_step`` in ``get_lr`` failed with an ``AttributeError``;
retrograd's ``LRScheduler`` has torch's flag now
(``test_regression_own_schedule_reads_get_lr_called_within_step``).
"""

from __future__ import annotations

import types
import warnings

import numpy as np
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    params_of,
    port,
    ported_imports,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

NSF_SOURCE = """
import numpy as np
import torch
from torch import nn
from torch.nn import init
from torch import optim


class OutsideDomain(Exception):
    pass


def bin_of(edges, x, eps=1e-6):
    edges[..., -1] += eps  # so that the right edge itself falls in the last bin
    return torch.sum(x[..., None] >= edges, dim=-1) - 1


def knots(raw, lo, hi, min_size):
    # bin sizes from unnormalized logits: cumulative edges from lo to hi and the sizes
    n = raw.shape[-1]
    sizes = min_size + (1 - min_size * n) * F.softmax(raw, dim=-1)
    edges = F.pad(torch.cumsum(sizes, dim=-1), pad=(1, 0), mode='constant', value=0.0)
    edges = (hi - lo) * edges + lo
    edges[..., 0], edges[..., -1] = lo, hi
    return edges, edges[..., 1:] - edges[..., :-1]


def rq_spline(x, raw_w, raw_h, raw_d, inverse, lo=-3.0, hi=3.0, min_size=1e-3, min_slope=1e-3):
    # a monotone rational-quadratic spline on [lo, hi] (Durkan et al. 2019) and log|dy/dx|
    if torch.min(x) < lo or torch.max(x) > hi:
        raise OutsideDomain()
    xs, widths = knots(raw_w, lo, hi, min_size)
    ys, heights = knots(raw_h, lo, hi, min_size)
    slopes = min_slope + F.softplus(raw_d, beta=1.0)
    k = bin_of(ys if inverse else xs, x)[..., None]
    x0, w = xs.gather(-1, k)[..., 0], widths.gather(-1, k)[..., 0]
    y0, h = ys.gather(-1, k)[..., 0], heights.gather(-1, k)[..., 0]
    d0, d1 = slopes.gather(-1, k)[..., 0], slopes[..., 1:].gather(-1, k)[..., 0]
    s = h / w
    if inverse:  # the root of a quadratic in the bin's relative position
        a = (x - y0) * (d0 + d1 - 2 * s) + h * (s - d0)
        b = h * d0 - (x - y0) * (d0 + d1 - 2 * s)
        c = -s * (x - y0)
        disc = b.pow(2) - 4 * a * c
        assert (disc >= 0).all()
        theta = (2 * c) / (-b - torch.sqrt(disc))
        out = theta * w + x0
    else:
        theta = (x - x0) / w
        t1 = theta * (1 - theta)
        out = y0 + h * (s * theta.pow(2) + d0 * t1) / (s + (d0 + d1 - 2 * s) * t1)
    t1 = theta * (1 - theta)
    denom = s + (d0 + d1 - 2 * s) * t1
    numer = s.pow(2) * (d1 * theta.pow(2) + 2 * s * t1 + d0 * (1 - theta).pow(2))
    logdet = torch.log(numer) - 2 * torch.log(denom)
    return out, -logdet if inverse else logdet


def spline_with_tails(x, raw_w, raw_h, raw_d, inverse=False, bound=3.0, min_slope=1e-3):
    # identity outside [-bound, bound], the spline inside, its end slopes matched to 1
    inside = (x >= -bound) & (x <= bound)
    outside = ~inside
    out, logdet = torch.zeros_like(x), torch.zeros_like(x)
    raw_d = F.pad(raw_d, pad=(1, 1))
    edge = np.log(np.exp(1 - min_slope) - 1)
    raw_d[..., 0] = edge
    raw_d[..., -1] = edge
    out[outside] = x[outside]
    logdet[outside] = 0
    if inside.any():
        out[inside], logdet[inside] = rq_spline(
            x[inside], raw_w[inside, :], raw_h[inside, :], raw_d[inside, :], inverse, -bound, bound)
    return out, logdet


class ContextResNet(nn.Module):
    def __init__(self, n_in, n_out, hidden, n_context, blocks=2):
        super().__init__()
        self.hidden_features = hidden
        self.first = nn.Linear(n_in + n_context, hidden)
        self.blocks = nn.ModuleList()
        for _ in range(blocks):
            block = nn.ModuleDict(dict(norm=nn.BatchNorm1d(hidden, eps=1e-3),
                                       linear=nn.Linear(hidden, hidden),
                                       context=nn.Linear(n_context, hidden)))
            init.uniform_(block['linear'].weight, -1e-3, 1e-3)  # blocks start near the identity
            init.uniform_(block['linear'].bias, -1e-3, 1e-3)
            self.blocks.append(block)
        self.last = nn.Linear(hidden, n_out)

    def forward(self, x, context):
        h = self.first(torch.cat((x, context), dim=1))
        for block in self.blocks:
            g = block['linear'](F.relu(block['norm'](h)))
            h = h + F.glu(torch.cat((g, block['context'](context)), dim=1), dim=1)
        return self.last(h)


class SplineCoupling(nn.Module):
    def __init__(self, mask, hidden, n_context, bins=4):
        super().__init__()
        ids = torch.arange(len(mask))
        self.register_buffer('kept', ids.masked_select(mask <= 0))
        self.register_buffer('moved', ids.masked_select(mask > 0))
        self.bins = bins
        n_params = len(self.moved) * (3 * bins - 1)
        self.net = ContextResNet(len(self.kept), n_params, hidden, n_context)

    def forward(self, x, context, inverse=False):
        kept, moved = x[:, self.kept, ...], x[:, self.moved, ...]
        params = self.net(kept, context).view(x.shape[0], len(self.moved), 3 * self.bins - 1)
        n = self.bins
        raw_w, raw_h, raw_d = params[..., :n], params[..., n:2 * n], params[..., 2 * n:]
        raw_w /= np.sqrt(self.net.hidden_features)  # in place on views of the net's output
        raw_h /= np.sqrt(self.net.hidden_features)
        moved, logdet = spline_with_tails(moved, raw_w, raw_h, raw_d, inverse)
        out = torch.empty_like(x)
        out[:, self.kept, ...] = kept
        out[:, self.moved, ...] = moved
        return out, logdet.reshape(x.shape[0], -1).sum(-1)


class Reverse(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer('order', torch.arange(n - 1, -1, -1))

    def forward(self, x, context, inverse=False):
        return torch.index_select(x, 1, self.order), x.new_zeros(x.shape[0])


class Gaussian(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.shape = torch.Size(shape)
        log_z = torch.tensor(0.5 * np.prod(shape) * np.log(2 * np.pi), dtype=torch.float64)
        self.register_buffer('log_z', log_z, persistent=False)

    def log_prob(self, z):
        # less a float64 0-d tensor: still float32
        return -0.5 * (z ** 2).reshape(z.shape[0], -1).sum(-1) - self.log_z

    def sample(self, n):
        return torch.randn(n, *self.shape)


class ConditionalFlow(nn.Module):
    def __init__(self, steps, base):
        super().__init__()
        self.steps, self.base = nn.ModuleList(steps), base

    def log_prob(self, x, context):
        total = x.new_zeros(x.shape[0])
        for step in self.steps:
            x, logdet = step(x, context)
            total = total + logdet
        return self.base.log_prob(x) + total

    def sample(self, n, context):
        # n draws for each context row, laid out (contexts, n, features)
        rows = context[:, None, ...].expand(context.shape[0], n, *context.shape[1:])
        rows = rows.reshape(-1, *context.shape[1:])
        z = self.base.sample(rows.shape[0])
        for step in reversed(self.steps):
            z, _ = step(z, rows, inverse=True)
        return z.reshape(torch.Size([context.shape[0], n]) + z.shape[1:])


flow = ConditionalFlow([SplineCoupling(torch.tensor([1, 0]), 8, 2), Reverse(2),
                        SplineCoupling(torch.tensor([1, 0]), 8, 2), Reverse(2)], Gaussian([2]))
initialize(flow)
optimizer = optim.Adam(flow.parameters(), lr=2e-3)
for points, labels in batches:
    points = torch.tensor(points, dtype=torch.float32)
    context = F.one_hot(torch.tensor(labels), 2).float()
    optimizer.zero_grad()
    loss = -flow.log_prob(points, context).mean()
    loss.backward()
    optimizer.step()
    record.extend([loss.item(), params_of(flow)])
flow.eval()
with torch.no_grad():
    record.append(flow.sample(3, torch.eye(2)).numpy())
    first = torch.tensor(batches[0][0], dtype=torch.float32)
    record.append(flow.log_prob(first, torch.eye(2)[[0] * 16]).numpy())
"""

NSF_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def _moons(rng, n):
    """Two interleaved half circles, noisy (the data, not its draws, matters)."""
    labels = rng.integers(0, 2, n)
    angle = rng.uniform(0, np.pi, n)
    x = np.where(labels == 0, np.cos(angle), 1 - np.cos(angle))
    y = np.where(labels == 0, np.sin(angle), 0.5 - np.sin(angle))
    points = np.stack([x, y], 1) + 0.1 * rng.standard_normal((n, 2))
    return points * 2.0, labels  # (scaled so that some points fall past the tail bound)


def test_neural_spline_flow_trains_and_samples_as_torch():
    rng = np.random.default_rng(8101)
    batches = [_moons(rng, 16) for _ in range(2)]
    assert any((np.abs(x) > 3).any() for x, _ in batches)  # the linear tails are used
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = NSF_SOURCE if lib is torch else ported_imports(port(NSF_SOURCE, NSF_STEPS))
        with SharedDraws(lib, 8101):
            run_source(
                text,
                lib,
                record=record,
                initialize=initialize,
                batches=batches,
                params_of=params_of,
            )
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


KDIFF_SOURCE = """
import math
import warnings
from copy import deepcopy
from functools import partial

import torch
from torch import nn, optim


def pad_dims(x, ndim):
    # trailing singleton axes until x has ndim of them
    missing = ndim - x.ndim
    if missing < 0:
        raise ValueError(f'{x.ndim} dims cannot be padded to {ndim}')
    return x[(...,) + (None,) * missing]


def with_zero(x):
    return torch.cat([x, x.new_zeros([1])], dim=0)


@torch.no_grad()
def update_average(model, average, decay):
    current = dict(model.named_parameters())
    for name, p in average.named_parameters():
        p.mul_(decay).add_(current[name], alpha=1 - decay)
    current = dict(model.named_buffers())
    for name, b in average.named_buffers():
        b.copy_(current[name])


class AverageWarmup:
    # the EMA's decay rising as 1 - (1 + step / inv_gamma) ** -power towards max_value
    def __init__(self, inv_gamma=1.0, power=1.0, min_value=0.0, max_value=1.0):
        self.inv_gamma, self.power = inv_gamma, power
        self.min_value, self.max_value = min_value, max_value
        self.step_count = 0

    def value(self):
        v = 1 - (1 + self.step_count / self.inv_gamma) ** -self.power
        return 0.0 if self.step_count < 0 else min(self.max_value, max(self.min_value, v))

    def step(self):
        self.step_count += 1


class InverseDecay(optim.lr_scheduler._LRScheduler):
    # lr * (1 + epoch / inv_gamma) ** -power, times a warmup of 1 - warmup ** (epoch + 1)
    def __init__(self, optimizer, inv_gamma=1.0, power=1.0, warmup=0.0, floor=0.0, last_epoch=-1):
        self.inv_gamma, self.power, self.warmup, self.floor = inv_gamma, power, warmup, floor
        super().__init__(optimizer, last_epoch=last_epoch)

    def get_lr(self):
        called_in_step = self._get_lr_called_within_step
        if not called_in_step:
            warnings.warn('outside a step, read get_last_lr() instead')
        warm = 1 - self.warmup ** (self.last_epoch + 1)
        factor = (1 + self.last_epoch / self.inv_gamma) ** -self.power
        return [warm * max(self.floor, base * factor) for base in self.base_lrs]


def log_normal(shape, loc=0.0, scale=1.0, device='cpu', dtype=torch.float32):
    return torch.exp(loc + scale * torch.randn(shape, device=device, dtype=dtype))


class KarrasDenoiser(nn.Module):
    def __init__(self, inner, sigma_data=1.0):
        super().__init__()
        self.inner, self.sigma_data = inner, sigma_data

    def scalings(self, sigma):
        total = sigma ** 2 + self.sigma_data ** 2
        root = total ** 0.5
        return self.sigma_data ** 2 / total, sigma * self.sigma_data / root, 1 / root

    def loss(self, x, noise, sigma):
        c_skip, c_out, c_in = [pad_dims(c, x.ndim) for c in self.scalings(sigma)]
        # soft min-SNR weighting
        weight = (sigma * self.sigma_data) ** 2 / (sigma ** 2 + self.sigma_data ** 2) ** 2
        noised = x + noise * pad_dims(sigma, x.ndim)
        target = (x - c_skip * noised) / c_out
        return (self.inner(noised * c_in, sigma) - target).pow(2).flatten(1).mean(1) * weight

    def forward(self, x, sigma):
        c_skip, c_out, c_in = [pad_dims(c, x.ndim) for c in self.scalings(sigma)]
        return self.inner(x * c_in, sigma) * c_out + x * c_skip


class Fourier(nn.Module):
    def __init__(self, n_in, n_out, std=1.0):
        super().__init__()
        self.register_buffer('weight', torch.randn([n_out // 2, n_in]) * std)

    def forward(self, x):
        f = 2 * math.pi * x @ self.weight.T
        return torch.cat([torch.cos(f), torch.sin(f)], dim=-1)


class Inner(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.embed = Fourier(1, 8)
        self.mapping = nn.Sequential(nn.Linear(8, width), nn.GELU(), nn.Linear(width, width))
        self.proj_in, self.norm = nn.Conv2d(1, width, 3, padding=1), nn.GroupNorm(4, width)
        self.proj_out = nn.Conv2d(width, 1, 3, padding=1)

    def forward(self, x, sigma):
        cond = self.mapping(self.embed(sigma.log()[..., None] / 4))
        return self.proj_out(F.silu(self.norm(self.proj_in(x)) + cond[..., None, None]))


def karras_sigmas(n, lo, hi, rho=7.0):
    ramp = torch.linspace(0, 1, n)
    return with_zero((hi ** (1 / rho) + ramp * (lo ** (1 / rho) - hi ** (1 / rho))) ** rho)


def exponential_sigmas(n, lo, hi):
    return with_zero(torch.linspace(math.log(hi), math.log(lo), n).exp())


def slope(x, sigma, denoised):
    return (x - denoised) / pad_dims(sigma, x.ndim)


@torch.no_grad()
def euler(model, x, sigmas, churn=0.0, t_min=0.0, t_max=float('inf')):
    ones = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        gamma = min(churn / (len(sigmas) - 1), 2 ** 0.5 - 1) if t_min <= sigmas[i] <= t_max else 0.0
        sigma = sigmas[i] * (gamma + 1)
        if gamma > 0:  # noise added back before the step
            x = x + torch.randn_like(x) * (sigma ** 2 - sigmas[i] ** 2) ** 0.5
        x = x + slope(x, sigma, model(x, sigma * ones)) * (sigmas[i + 1] - sigma)
    return x


@torch.no_grad()
def heun(model, x, sigmas):
    ones = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        d = slope(x, sigmas[i], model(x, sigmas[i] * ones))
        dt = sigmas[i + 1] - sigmas[i]
        if sigmas[i + 1] == 0:
            x = x + d * dt
        else:
            guess = x + d * dt
            d2 = slope(guess, sigmas[i + 1], model(guess, sigmas[i + 1] * ones))
            x = x + (d + d2) / 2 * dt
    return x


@torch.no_grad()
def euler_ancestral(model, x, sigmas, eta=1.0):
    ones = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * ones)
        now, after = sigmas[i], sigmas[i + 1]
        up = min(after, eta * (after ** 2 * (now ** 2 - after ** 2) / now ** 2) ** 0.5)
        down = (sigmas[i + 1] ** 2 - up ** 2) ** 0.5
        x = x + slope(x, sigmas[i], denoised) * (down - sigmas[i])
        if sigmas[i + 1] > 0:
            x = x + torch.randn_like(x) * up
    return x


@torch.no_grad()
def dpm_2m(model, x, sigmas):
    ones = x.new_ones([x.shape[0]])
    to_t, to_sigma = (lambda s: s.log().neg()), (lambda t: t.neg().exp())
    previous = None
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * ones)
        t, t_next = to_t(sigmas[i]), to_t(sigmas[i + 1])  # the last: log(0), an infinite time
        h = t_next - t
        if previous is None or sigmas[i + 1] == 0:
            x = (to_sigma(t_next) / to_sigma(t)) * x - (-h).expm1() * denoised
        else:
            r = (t - to_t(sigmas[i - 1])) / h
            blended = (1 + 1 / (2 * r)) * denoised - (1 / (2 * r)) * previous
            x = (to_sigma(t_next) / to_sigma(t)) * x - (-h).expm1() * blended
        previous = denoised
    return x


inner = Inner()
initialize(inner)
model = KarrasDenoiser(inner, sigma_data=0.5)
model_ema = deepcopy(model)
opt = optim.AdamW(inner.parameters(), lr=2e-3, betas=(0.95, 0.999), eps=1e-6, weight_decay=1e-3)
sched = InverseDecay(opt, inv_gamma=20.0, power=1.0, warmup=0.9)
ema_sched = AverageWarmup(power=0.75, max_value=0.9999)
draw_sigma = partial(log_normal, loc=-1.2, scale=1.2)
for batch in batches:
    reals = torch.tensor(batch)
    loss = model.loss(reals, torch.randn_like(reals), draw_sigma([reals.shape[0]])).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    decay = ema_sched.value()
    update_average(model, model_ema, decay)
    ema_sched.step()
    record += [[loss.item(), sched.get_last_lr()[0], decay], params_of(model, model_ema)]

x = torch.randn([2, 1, 4, 4]) * 8.0
record.append(exponential_sigmas(4, 1e-2, 8.0).numpy())
sigmas = karras_sigmas(4, 1e-2, 8.0)
record.append(sigmas.numpy())
churned = partial(euler, churn=1.0, t_min=0.05, t_max=5.0)
for sampler in (euler, churned, heun, euler_ancestral, dpm_2m):
    record.append(sampler(model_ema, x, sigmas).numpy())
"""

KDIFF_STEPS = [
    (
        "import torch\nfrom torch import nn, optim\n",
        "import retrograd as torch\nfrom retrograd import nn, optim\n",
    ),
    ("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)"),
]


def test_k_diffusion_trains_and_samples_as_torch():
    rng = np.random.default_rng(8102)
    batches = [rng.uniform(-1, 1, (3, 1, 4, 4)).astype(np.float32) for _ in range(3)]
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = KDIFF_SOURCE if lib is torch else ported_imports(port(KDIFF_SOURCE, KDIFF_STEPS))
        with SharedDraws(lib, 8102):
            run_source(
                text,
                lib,
                record=record,
                initialize=initialize,
                batches=batches,
                params_of=params_of,
            )
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


DIFFWAVE_SOURCE = """
import os
from math import sqrt

import numpy as np
import torch
import torch.nn as nn


class Config(dict):
    def __getattr__(self, name):
        return self[name]

    def override(self, **changes):
        self.update(changes)
        return self


config = Config(
    learning_rate=2e-4, max_grad_norm=None, hop=16, mels=4, channels=4, layers=4, cycle=2,
    schedule=np.linspace(1e-4, 0.05, 50).tolist(),
    fast_schedule=[0.0001, 0.001, 0.01, 0.05, 0.2, 0.5])


def conv1d(*args, **kwargs):
    conv = nn.Conv1d(*args, **kwargs)
    nn.init.kaiming_normal_(conv.weight)
    return conv


@torch.jit.script
def silu(x):
    return x * torch.sigmoid(x)


class StepEmbedding(nn.Module):
    def __init__(self, steps, width=32):
        super().__init__()
        # 64 frequencies from 1 to 1e4 per step
        rows = torch.arange(steps).unsqueeze(1) * 10.0 ** (torch.arange(64).unsqueeze(0) / 15.75)
        table = torch.cat([torch.sin(rows), torch.cos(rows)], dim=1)
        self.register_buffer('table', table, persistent=False)
        self.first, self.second = nn.Linear(128, width), nn.Linear(width, width)

    def forward(self, step):
        if step.dtype in [torch.int32, torch.int64]:
            x = self.table[step]
        else:  # a fractional step: between the rows on either side
            low, high = self.table[torch.floor(step).long()], self.table[torch.ceil(step).long()]
            x = low + (high - low) * (step - torch.floor(step)).unsqueeze(-1)
        return silu(self.second(silu(self.first(x))))


class Upsampler(nn.Module):
    # a mel frame to `hop` samples: two transposed 2-d convolutions stretching time by 4 each
    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleList(
            nn.ConvTranspose2d(1, 1, [3, 8], stride=[1, 4], padding=[1, 2]) for _ in range(2))

    def forward(self, mel):
        x = torch.unsqueeze(mel, 1)
        for stage in self.stages:
            x = F.leaky_relu(stage(x), 0.4)
        return torch.squeeze(x, 1)


class Layer(nn.Module):
    def __init__(self, mels, channels, dilation, width=32):
        super().__init__()
        self.dilated = conv1d(channels, 2 * channels, 3, padding=dilation, dilation=dilation)
        self.step_proj = nn.Linear(width, channels)
        self.mel_proj = conv1d(mels, 2 * channels, 1)
        self.out = conv1d(channels, 2 * channels, 1)

    def forward(self, x, step, mel):
        y = self.dilated(x + self.step_proj(step).unsqueeze(-1)) + self.mel_proj(mel)
        gate, value = torch.chunk(y, 2, dim=1)
        residual, skip = torch.chunk(self.out(torch.sigmoid(gate) * torch.tanh(value)), 2, dim=1)
        return (x + residual) * 2 ** -0.5, skip


class WaveNetDenoiser(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.inp = conv1d(1, cfg.channels, 1)
        self.embed = StepEmbedding(len(cfg.schedule))
        self.upsampler = Upsampler()
        self.layers = nn.ModuleList(
            Layer(cfg.mels, cfg.channels, 2 ** (i % cfg.cycle)) for i in range(cfg.layers))
        self.skip = conv1d(cfg.channels, cfg.channels, 1)
        self.final = conv1d(cfg.channels, 1, 1)
        nn.init.zeros_(self.final.weight)

    def forward(self, audio, step, mel):
        x = F.relu(self.inp(audio.unsqueeze(1)))
        step = self.embed(step)
        if self.upsampler:  # (a module's truth)
            mel = self.upsampler(mel)
        skips = 0
        for layer in self.layers:
            x, skip = layer(x, step, mel)
            skips = skips + skip
        return self.final(F.relu(self.skip(skips / sqrt(len(self.layers)))))


class Learner:
    def __init__(self, folder, model, data, optimizer, cfg):
        self.folder, self.model, self.data = folder, model, data
        self.optimizer, self.cfg = optimizer, cfg
        self.autocast = torch.cuda.amp.autocast(enabled=cfg.get('fp16', False))
        self.scaler = torch.cuda.amp.GradScaler(enabled=cfg.get('fp16', False))
        self.step = 0
        self.alpha_bar = torch.tensor(np.cumprod(1 - np.array(cfg.schedule)).astype(np.float32))
        self.loss_fn = nn.L1Loss()

    def state_dict(self):
        return {'step': self.step, 'model': self.model.state_dict(),
                'optimizer': self.optimizer.state_dict(), 'cfg': dict(self.cfg),
                'scaler': self.scaler.state_dict()}

    def save(self):
        os.makedirs(self.folder, exist_ok=True)
        torch.save(self.state_dict(), f'{self.folder}/weights-{self.step}.pt')

    def restore(self):
        state = torch.load(f'{self.folder}/weights-{self.step}.pt')
        self.model.load_state_dict(state['model'])
        self.optimizer.load_state_dict(state['optimizer'])
        self.scaler.load_state_dict(state['scaler'])
        self.step = state['step']

    def train_step(self, batch):
        for p in self.model.parameters():
            p.grad = None
        audio, mel = batch['audio'], batch['spectrogram']
        with self.autocast:
            t = torch.randint(0, len(self.cfg.schedule), [audio.shape[0]])
            level = self.alpha_bar[t].unsqueeze(1)
            eps = torch.randn_like(audio)
            noisy = level ** 0.5 * audio + (1.0 - level) ** 0.5 * eps
            loss = self.loss_fn(eps, self.model(noisy, t, mel).squeeze(1))
        scaler, optimizer = self.scaler, self.optimizer
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        limit = self.cfg.max_grad_norm or 1e9
        self.grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), limit)
        scaler.step(optimizer)
        scaler.update()
        return loss


def fast_steps(train_schedule, schedule):
    # each inference noise level placed between the training steps whose levels bracket it
    train_bar = np.cumprod(1 - np.array(train_schedule))
    bar = np.cumprod(1 - np.array(schedule))
    steps = []
    for b in bar:
        for t in range(len(train_bar) - 1):
            if train_bar[t + 1] <= b <= train_bar[t]:
                upper, lower = train_bar[t] ** 0.5, train_bar[t + 1] ** 0.5
                steps.append(t + (upper - b ** 0.5) / (upper - lower))
                break
    return np.array(steps, dtype=np.float32)


@torch.no_grad()
def generate(model, mel, cfg):
    beta = np.array(cfg.fast_schedule)
    alpha, alpha_bar = 1 - beta, np.cumprod(1 - beta)
    steps = fast_steps(cfg.schedule, cfg.fast_schedule)
    audio = torch.randn(mel.shape[0], cfg.hop * mel.shape[-1])
    for n in reversed(range(len(alpha))):
        c1, c2 = 1 / alpha[n] ** 0.5, beta[n] / (1 - alpha_bar[n]) ** 0.5  # NumPy float64 scalars
        audio = c1 * (audio - c2 * model(audio, torch.tensor([steps[n]]), mel).squeeze(1))
        if n > 0:
            sigma = ((1.0 - alpha_bar[n - 1]) / (1.0 - alpha_bar[n]) * beta[n]) ** 0.5
            audio += sigma * torch.randn_like(audio)
        audio = audio.clamp(-1.0, 1.0)
    return audio


model = WaveNetDenoiser(config)
initialize(model)
adam = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
learner = Learner(model_dir, model, dataset, adam, config)
while learner.step < 3:
    for batch in learner.data:
        loss = learner.train_step(batch)
        learner.step += 1
        record.extend([[loss.item(), float(learner.grad_norm)], params_of(model)])
learner.save()
fresh = WaveNetDenoiser(config)
restored = Learner(model_dir, fresh, dataset, torch.optim.Adam(fresh.parameters()), config)
restored.step = learner.step
restored.restore()
restored.model.eval()
record.append(generate(restored.model, dataset[0]['spectrogram'], config).numpy())
"""

DIFFWAVE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("        for p in self.model.parameters():\n            p.grad = None\n", ""),
    ("        scaler.scale(loss).backward()\n", "        grads = scaler.scale(loss).backward()\n"),
    ("        scaler.unscale_(optimizer)\n", "        scaler.unscale_(optimizer, grads)\n"),
    ("clip_grad_norm_(self.model.parameters(),", "clip_grad_norm_(grads, self.model.parameters(),"),
    ("        scaler.step(optimizer)\n", "        scaler.step(optimizer, grads)\n"),
]


def test_diffwave_trains_and_samples_as_torch(tmp_path):
    """A DiffWave-style vocoder (lmnt-com/diffwave): a ``dict`` subclass for its
    configuration, a disabled ``torch.cuda.amp.autocast`` entered at every step and a
    disabled ``GradScaler`` (``scale``, ``unscale_``, ``step``, ``update``, ``state_dict``),
    ``clip_grad_norm_(..., max_grad_norm or 1e9)``, a checkpoint through ``torch.save``/
    ``torch.load``; ``@torch.jit.script`` on ``silu``, a sinusoid table as a non-persistent
    buffer indexed by int64 steps and, for fast sampling, ``torch.floor(t).long()``/
    ``torch.ceil`` of fractional steps; ``ConvTranspose2d([3, 8], stride=[1, 4])``
    upsampling, gated dilated ``Conv1d``s split by ``torch.chunk``, a zero-initialized
    output, ``if self.upsampler:`` of a module, NumPy float64 scalars times float32 tensors
    and ``audio += sigma * noise``. The draws come from one seeded stream in both runs."""
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        rng = np.random.default_rng(8104)
        dataset = [
            {
                "audio": lib.tensor(rng.uniform(-0.5, 0.5, (2, 256)), dtype=lib.float32),
                "spectrogram": lib.tensor(rng.standard_normal((2, 4, 16)), dtype=lib.float32),
            }
            for _ in range(2)
        ]
        # (torch's ``jit.script`` reads a function's source file, which text run by ``exec``
        # has not: the torch run calls ``silu`` eagerly, as scripting computes it)
        text = (
            DIFFWAVE_SOURCE.replace("@torch.jit.script\n", "")
            if lib is torch
            else ported_imports(port(DIFFWAVE_SOURCE, DIFFWAVE_STEPS))
        )
        with SharedDraws(lib, 8104):
            run_source(
                text, lib, record=record, initialize=initialize, params_of=params_of,
                dataset=dataset, model_dir=str(tmp_path / lib.__name__),
            )  # fmt: skip
        records.append(record)
    # (atol: Adam's first steps divide each gradient by its own size, so on the few
    # embedding weights whose gradient is ~1e-9 float32 rounding moves them by a fraction of
    # the 2e-4 step)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=5e-5)


MELGAN_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils import weight_norm as normed


def init_weights(m):
    # by class name, as GAN code does; weight_norm's recomputed weight is what is written
    name = m.__class__.__name__
    if name.find('Conv') != -1:
        m.weight.data.normal_(0, 0.02)
    elif name.find('BatchNorm2d') != -1:
        m.weight.data.normal_(1, 0.02)
        m.bias.data.fill_(0)


def wn_conv(*args, **kwargs):
    return normed(nn.Conv1d(*args, **kwargs))


def wn_deconv(*args, **kwargs):
    return normed(nn.ConvTranspose1d(*args, **kwargs))


class LogMel(nn.Module):
    def __init__(self, n_fft=512, hop=128, sr=22050, mels=8):
        super().__init__()
        basis = librosa_mel_fn(sr=sr, n_fft=n_fft, n_mels=mels, fmin=0.0, fmax=None)
        self.register_buffer('basis', torch.from_numpy(basis).float())
        self.register_buffer('window', torch.hann_window(n_fft).float())
        self.n_fft, self.hop = n_fft, hop

    def forward(self, audio):
        side = (self.n_fft - self.hop) // 2
        audio = F.pad(audio, (side, side), 'reflect').squeeze(1)
        spec = torch.stft(audio, n_fft=self.n_fft, hop_length=self.hop, win_length=self.n_fft,
                          window=self.window, center=False, return_complex=False)
        re, im = spec.unbind(-1)
        power = torch.matmul(self.basis, torch.sqrt(re ** 2 + im ** 2))
        return torch.log10(torch.clamp(power, min=1e-5))


class Residual(nn.Module):
    def __init__(self, dim, dilation):
        super().__init__()
        self.block = nn.Sequential(
            nn.LeakyReLU(0.2), nn.ReflectionPad1d(dilation),
            wn_conv(dim, dim, kernel_size=3, dilation=dilation), nn.LeakyReLU(0.2),
            wn_conv(dim, dim, kernel_size=1))
        self.shortcut = wn_conv(dim, dim, kernel_size=1)

    def forward(self, x):
        return self.block(x) + self.shortcut(x)


class Generator(nn.Module):
    # mel frames to samples: upsampled 8, 4, 2 and 2 times, halving the channels each time
    def __init__(self, mels, ngf, ratios=(8, 4, 2, 2)):
        super().__init__()
        ch = ngf * 2 ** len(ratios)
        layers = [nn.ReflectionPad1d(3), wn_conv(mels, ch, kernel_size=7, padding=0)]
        for r in ratios:
            up = wn_deconv(ch, ch // 2, kernel_size=2 * r, stride=r, padding=r // 2 + r % 2,
                           output_padding=r % 2)
            layers += [nn.LeakyReLU(0.2), up, Residual(ch // 2, 1)]
            ch //= 2
        out = wn_conv(ch, 1, kernel_size=7, padding=0)
        layers += [nn.LeakyReLU(0.2), nn.ReflectionPad1d(3), out, nn.Tanh()]
        self.model = nn.Sequential(*layers)
        self.apply(init_weights)

    def forward(self, mel):
        return self.model(mel)


class ScaleDiscriminator(nn.Module):
    def __init__(self, ndf, n_layers, stride, cap=16):
        super().__init__()
        self.layers = nn.ModuleDict()
        self.layers['layer_0'] = nn.Sequential(
            nn.ReflectionPad1d(7), wn_conv(1, ndf, kernel_size=15), nn.LeakyReLU(0.2, True))
        nf = ndf
        for n in range(1, n_layers + 1):  # strided, grouped convolutions
            prev, nf = nf, min(nf * stride, cap)
            self.layers[f'layer_{n}'] = nn.Sequential(
                wn_conv(prev, nf, kernel_size=10 * stride + 1, stride=stride, padding=5 * stride,
                        groups=prev // 4),
                nn.LeakyReLU(0.2, True))
        wide = min(nf * 2, cap)
        self.layers[f'layer_{n_layers + 1}'] = nn.Sequential(wn_conv(nf, wide, 5, 1, padding=2),
                                                             nn.LeakyReLU(0.2, True))
        self.layers[f'layer_{n_layers + 2}'] = wn_conv(wide, 1, kernel_size=3, stride=1, padding=1)

    def forward(self, x):
        features = []
        for name, layer in self.layers.items():
            x = layer(x)
            features.append(x)
        return features


class MultiScale(nn.Module):
    def __init__(self, scales, ndf, n_layers, stride):
        super().__init__()
        self.scales = nn.ModuleDict(
            {f'disc_{i}': ScaleDiscriminator(ndf, n_layers, stride) for i in range(scales)})
        self.pool = nn.AvgPool1d(4, stride=2, padding=1, count_include_pad=False)
        self.apply(init_weights)

    def forward(self, x):
        out = []
        for disc in self.scales.values():
            out.append(disc(x))
            x = self.pool(x)
        return out


mel = LogMel(mels=args.mels)
G, D = Generator(args.mels, args.ngf), MultiScale(args.scales, args.ndf, args.n_layers, args.stride)
initialize(G)
initialize(D)
opt_G = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.5, 0.9))
opt_D = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.5, 0.9))
for real in loader:
    spec = mel(real).detach()
    fake = G(spec)
    with torch.no_grad():
        record.append(F.l1_loss(spec, mel(fake.detach())).item())
    fake_scores, real_scores = D(fake.detach()), D(real)
    pairs = zip(fake_scores, real_scores)
    loss_D = sum(F.relu(1 + f[-1]).mean() + F.relu(1 - r[-1]).mean() for f, r in pairs)
    D.zero_grad()
    loss_D.backward()
    opt_D.step()
    scores = D(fake)
    loss_G = sum(-s[-1].mean() for s in scores)
    weight = 4.0 / (args.n_layers + 1) / args.scales  # feature matching on every layer but the last
    loss_feat = 0
    for s, r in zip(scores, real_scores):
        for j in range(len(s) - 1):
            loss_feat += weight * F.l1_loss(s[j], r[j].detach())
    G.zero_grad()
    (loss_G + 10 * loss_feat).backward()
    opt_G.step()
    record.append([loss_D.item(), loss_G.item(), float(loss_feat)])
    record.append(params_of(G, D))
"""

MELGAN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "    loss_D.backward()\n    opt_D.step()\n",
        "    grads = loss_D.backward()\n    opt_D.step(grads)\n",
    ),
    (
        "    (loss_G + 10 * loss_feat).backward()\n    opt_G.step()\n",
        "    grads = (loss_G + 10 * loss_feat).backward()\n    opt_G.step(grads)\n",
    ),
]


def test_melgan_trains_as_torch():
    """A MelGAN-style vocoder (descriptinc/melgan-neurips): an init writing
    ``m.weight.data.normal_`` over ``weight_norm``'s recomputed weight, weight-normed
    ``Conv1d``/``ConvTranspose1d``, a log-mel front end by ``torch.stft(..., return_complex=
    False)`` (retrograd has no complex tensors), residual blocks of ``ReflectionPad1d``, a
    generator of transposed convolutions with ``output_padding=r % 2``, discriminators in an
    ``nn.ModuleDict`` of grouped strided convolutions iterated by ``.items()``, a multi-scale
    ``AvgPool1d(4, stride=2, padding=1, count_include_pad=False)``, hinge losses and feature
    matching over ``detach()``-ed real features. The mel basis is the NumPy one of
    ``tests/test_real_ports_69.py``."""
    from test_real_ports_69 import librosa_mel_fn

    args = types.SimpleNamespace(mels=8, ngf=2, scales=2, ndf=4, n_layers=3, stride=2)
    audio = np.random.default_rng(8105).uniform(-0.8, 0.8, (2, 1, 1, 512)).astype(np.float32)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = MELGAN_SOURCE if lib is torch else ported_imports(port(MELGAN_SOURCE, MELGAN_STEPS))
        run_source(
            text, lib, record=record, initialize=initialize, params_of=params_of, args=args,
            librosa_mel_fn=librosa_mel_fn, loader=[lib.tensor(x) for x in audio],
        )  # fmt: skip
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


VQVAE2_SOURCE = """
import torch
from torch import nn
from torch import optim


class Codebook(nn.Module):
    # nearest-code quantization; the codes follow their assigned vectors by moving averages
    def __init__(self, dim, size, decay=0.99, eps=1e-5):
        super().__init__()
        self.dim, self.size, self.decay, self.eps = dim, size, decay, eps
        codes = torch.randn(dim, size)
        self.register_buffer('codes', codes)
        self.register_buffer('counts', torch.zeros(size))
        self.register_buffer('sums', codes.clone())

    def forward(self, x):
        flat = x.reshape(-1, self.dim)
        dist = (flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.codes
                + self.codes.pow(2).sum(0, keepdim=True))
        _, index = (-dist).max(1)
        onehot = F.one_hot(index, self.size).type(flat.dtype)
        index = index.view(*x.shape[:-1])
        quantized = self.lookup(index)
        if self.training:
            self.counts.data.mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
            assigned = flat.transpose(0, 1) @ onehot
            self.sums.data.mul_(self.decay).add_(assigned, alpha=1 - self.decay)
            total = self.counts.sum()
            smoothed = (self.counts + self.eps) / (total + self.size * self.eps) * total
            self.codes.data.copy_(self.sums / smoothed.unsqueeze(0))
        commitment = (quantized.detach() - x).pow(2).mean()
        return x + (quantized - x).detach(), commitment, index  # straight through

    def lookup(self, index):
        return F.embedding(index, self.codes.transpose(0, 1))


class Res(nn.Module):
    def __init__(self, ch, hidden):
        super().__init__()
        self.body = nn.Sequential(
            nn.ReLU(), nn.Conv2d(ch, hidden, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(hidden, ch, 1))

    def forward(self, x):
        out = self.body(x)
        out += x
        return out


def down(c_in, ch, stride):
    layers = [nn.Conv2d(c_in, ch // 2, 4, stride=2, padding=1), nn.ReLU(inplace=True)]
    if stride == 4:
        layers += [nn.Conv2d(ch // 2, ch, 4, stride=2, padding=1), nn.ReLU(inplace=True)]
    last = nn.Conv2d(ch // 2 if stride == 2 else ch, ch, 3, padding=1)
    return nn.Sequential(*layers, last, Res(ch, 4), nn.ReLU(inplace=True))


def up(c_in, c_out, ch, stride):
    layers = [nn.Conv2d(c_in, ch, 3, padding=1), Res(ch, 4), nn.ReLU(inplace=True)]
    if stride == 4:
        layers += [nn.ConvTranspose2d(ch, ch // 2, 4, stride=2, padding=1), nn.ReLU(inplace=True),
                   nn.ConvTranspose2d(ch // 2, c_out, 4, stride=2, padding=1)]
    else:
        layers.append(nn.ConvTranspose2d(ch, c_out, 4, stride=2, padding=1))
    return nn.Sequential(*layers)


class TwoLevelVQ(nn.Module):
    def __init__(self, ch=8, dim=4, size=6):
        super().__init__()
        self.enc_b, self.enc_t = down(1, ch, 4), down(ch, ch, 2)
        self.pre_t, self.codes_t = nn.Conv2d(ch, dim, 1), Codebook(dim, size)
        self.dec_t = up(dim, dim, ch, 2)
        self.pre_b, self.codes_b = nn.Conv2d(dim + ch, dim, 1), Codebook(dim, size)
        self.lift_t = nn.ConvTranspose2d(dim, dim, 4, stride=2, padding=1)
        self.dec = up(2 * dim, 1, ch, 4)

    def encode(self, x):
        bottom = self.enc_b(x)
        top = self.enc_t(bottom)
        q_t, diff_t, id_t = self.codes_t(self.pre_t(top).permute(0, 2, 3, 1))
        q_t = q_t.permute(0, 3, 1, 2)
        bottom = torch.cat([self.dec_t(q_t), bottom], 1)
        q_b, diff_b, id_b = self.codes_b(self.pre_b(bottom).permute(0, 2, 3, 1))
        return q_t, q_b.permute(0, 3, 1, 2), (diff_t + diff_b).unsqueeze(0), id_t, id_b

    def decode(self, q_t, q_b):
        return self.dec(torch.cat([self.lift_t(q_t), q_b], 1))

    def decode_codes(self, id_t, id_b):
        top, bottom = self.codes_t.lookup(id_t), self.codes_b.lookup(id_b)
        return self.decode(top.permute(0, 3, 1, 2), bottom.permute(0, 3, 1, 2))

    def forward(self, x):
        q_t, q_b, diff, _, _ = self.encode(x)
        return self.decode(q_t, q_b), diff


model = TwoLevelVQ()
initialize(model)
optimizer = optim.Adam(model.parameters(), lr=4e-3)
mse = nn.MSELoss()
model.train()
for i, (img, label) in enumerate(batches):
    img = torch.tensor(img)
    model.zero_grad()
    out, latent = model(img)
    recon = mse(out, img)
    loss = recon + 0.25 * latent.mean()
    loss.backward()
    optimizer.step()
    latent_mean = latent.mean().item()
    print(f'epoch: 1; step: {i}; mse: {recon.item():.5f}; latent: {latent_mean:.3f}; lr: 4e-3')
    record.extend([[recon.item(), latent.item()], params_of(model)])
    record.append({k: v.numpy().copy() for k, v in model.named_buffers()})
model.eval()
with torch.no_grad():
    _, _, _, id_t, id_b = model.encode(torch.tensor(batches[0][0]))
    record.append(id_t.numpy())
    record.append(id_b.numpy())
    record.append(model.decode_codes(id_t, id_b).numpy())
"""

VQVAE2_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def test_vq_vae_2_trains_as_torch(capsys):
    rng = np.random.default_rng(8103)
    batches = [
        (rng.uniform(-1, 1, (3, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 3))
        for _ in range(2)
    ]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = VQVAE2_SOURCE if lib is torch else ported_imports(port(VQVAE2_SOURCE, VQVAE2_STEPS))
        run_source(
            text, lib, record=record, initialize=initialize, batches=batches, params_of=params_of
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and logs[0].count("epoch:") == 2
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_regression_own_schedule_reads_get_lr_called_within_step():
    """Schedules of one's own, written as torch's are (k-diffusion's inverse decay, most
    warm-up schedules), read ``self._get_lr_called_within_step`` in ``get_lr`` to warn when
    called outside a step. retrograd's schedules had no such flag (an ``AttributeError`` at
    construction); the flag is torch's now, True only while ``step`` calls ``get_lr``."""

    def run(lib):
        class Halving(lib.optim.lr_scheduler._LRScheduler):
            def get_lr(self):
                within = self._get_lr_called_within_step
                if not within:
                    warnings.warn("use get_last_lr()", stacklevel=2)
                return [base_lr * 0.5**self.last_epoch for base_lr in self.base_lrs]

        opt = lib.optim.SGD(lib.nn.Linear(2, 1).parameters(), lr=1.0)
        with warnings.catch_warnings(record=True) as inside:
            warnings.simplefilter("always")
            schedule = Halving(opt)
            schedule.step()
            schedule.step()
        with warnings.catch_warnings(record=True) as outside:
            warnings.simplefilter("always")
            outside_rates = schedule.get_lr()
        # (torch's other warning, of a schedule stepped before its optimizer, left out)
        return (
            [str(w.message) for w in inside if "get_last_lr" in str(w.message)],
            [str(w.message) for w in outside if "get_last_lr" in str(w.message)],
            outside_rates,
            schedule.get_last_lr(),
            schedule._get_lr_called_within_step,
        )

    assert run(rg) == run(torch)
    assert run(torch)[1] == ["use get_last_lr()"]
