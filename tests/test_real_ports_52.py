"""Real ports, continued (the harness: ``tests/real_ports.py``): four programs written here in
the style of public projects, each run on torch and, ported, on retrograd from the same weights
and draws, every record compared.

- A StyleGAN2 in the style of rosinality/stylegan2-pytorch (its CPU paths of the fused
  activation, ``upfirdn2d`` and the convolutions), an 8x8 generator and discriminator of width
  8, two iterations of the non-saturating loss with lazy R1 and path-length regularization:
  equalized layers (``torch.randn(fan_out, fan_in).div_(lr_mul)``,
  ``torch.zeros(fan_out).fill_(bias_init)``), a leaky ReLU with its bias added through
  ``bias.view(1, bias.shape[0], *ones)``, an FIR resampler (``F.pad`` of a 6-d view with eight
  pads, crops bounded by ``y.shape[1] - max(-py1, 0)``, ``torch.flip(kernel, [0, 1])``,
  ``[:, ::dy, ::dx, :]``), a kernel normalized by ``k /= k.sum()``, modulated convolutions
  demodulated by ``torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)`` with the batch folded
  into the channels for ``F.conv2d``/``F.conv_transpose2d(..., groups=n)``, noise from
  ``x.new_empty(...).normal_()``, a learned constant by ``repeat``, noise buffers registered on
  a bare ``nn.Module()`` and read back by ``getattr`` (the EMA generator's samples use them),
  style mixing (``torch.randn(2, ...).unbind(0)``, ``random.randint`` for the crossover), a
  ``ConvBlock(nn.Sequential)`` setting ``self.padding`` before ``super().__init__(*layers)``,
  the minibatch-stddev feature (``var(0, unbiased=False)``, ``mean([2, 3, 4],
  keepdims=True)``), R1 by ``autograd.grad(outputs=pred.sum(), inputs=real,
  create_graph=True)`` after ``real.requires_grad = True``, the path-length penalty by
  ``autograd.grad`` of ``(fake * noise).sum()`` into the broadcast latents with ``weighted +=
  0 * fake[0, 0, 0, 0]``, ``p.requires_grad = flag`` toggles, Adam at ``lr * ratio`` with
  ``betas=(0**ratio, 0.99**ratio)``, ``torch.distributed.is_available()``/``is_initialized()``
  guards, and an EMA generator by ``p.data.mul_(decay).add_(src.data, alpha=1 - decay)``.
  ``torch.randn``, ``randn_like`` and ``normal_`` draw from one seeded stream in both runs.
- A click model in the style of facebookresearch/dlrm, in three configurations (dot
  interactions with learned per-sample bag weights and BCE; with self-interactions, no weights
  and class-weighted BCE; concatenated features, fixed weights, MSE and a clamped output):
  layer sizes by ``np.fromstring(..., dtype=int, sep="-")``, ``layer.weight.data =
  torch.tensor(W, requires_grad=True)`` of NumPy draws, ``nn.EmbeddingBag(n, m, mode="sum")``
  called with offsets and ``per_sample_weights=w.gather(0, indices)`` of an
  ``nn.ParameterList`` of ``Parameter(torch.ones(n))``, offsets from ``torch.tensor`` of a list
  mixing ``int`` and ``np.int32``, ``torch.bmm(T, torch.transpose(T, 1, 2))`` indexed by
  ``Z[:, rows, cols]`` from list comprehensions, ``record_function`` blocks,
  ``class_weights[t.data.view(-1).long()].view_as(t)`` (float64 weights on float32 losses) and
  a warm-up/decay schedule deriving from ``_LRScheduler`` whose ``get_lr`` reads
  ``self._step_count``.
- DLinear and NLinear forecasters in the style of cure-lab/LTSF-Linear, per-channel and
  shared: a moving average padded by ``x[:, 0:1, :].repeat(...)`` under ``nn.AvgPool1d``, a
  decomposition module, per-channel ``nn.Linear`` layers of an ``nn.ModuleList`` written into
  ``torch.zeros([...], dtype=...).to(device)`` by ``out[:, i, :] = ...`` (and ``[:, :, i]``),
  ``x[:, -1:, :].detach()`` normalization, a ``DataLoader`` collating float64 NumPy windows
  (then ``.float()``), ``np.average`` of a list of 0-d tensors, a learning rate set through
  ``param_groups`` and ``'{0}'.format`` logs.
- A TabNet classifier in the style of dreamquark-ai/tabnet with sparsemax and with entmax-1.5
  masks: the ``autograd.Function``s (``z -= top`` on the input in ``forward``,
  ``ctx.save_for_backward(k, p)``, ``g_in[p == 0] = 0``, ``torch.where``, ``dz -= q * s``),
  ranks by ``r.view(shape).transpose(0, dim)``, ``torch.sort(..., descending=True)``,
  ``cumsum`` and a ``gather`` at the support size, modules setting ``self.dim`` before
  ``super().__init__()``, ghost batch norm by ``x.chunk(int(np.ceil(...)), 0)``, ``Linear``
  layers shared by every step through one ``ModuleList``, ``torch.FloatTensor([0.5])``
  scales, ``fc if fc else ...`` of a module, ``torch.sum(d, axis=1)``, ``clip_grad_norm_``
  and ``torch.nn.Softmax(dim=1)(logits)`` into ``np.vstack``. ``p.grad = None`` before each
  batch is the line changed there (to ``pass``: nothing to clear before a backward).

The lines changed: the gradient lines (``grads = loss.backward()``, ``step(grads)``,
``clip_grad_norm_(grads, ...)``), ``from torch`` import lines, and the click model's
``sparse=True`` (retrograd has no sparse gradients: the dense ones, which SGD steps to the
same values).
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, params_of, port, ported_imports, run_source


def _runs(source, steps, capsys, patch=None, **names):
    """The records and logs of ``source`` under torch and of its port under retrograd, each
    run with ``patch(lib)`` (a context manager) holding; ``make_<name>(lib)`` gives each run
    its own ``<name>``."""
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        torch.manual_seed(0)
        text = (
            source
            if lib is torch
            else port(source, steps).replace("from torch.", "from retrograd.")
        )
        shared = {
            k.removeprefix("make_"): v(lib) if k.startswith("make_") else v
            for k, v in names.items()
        }
        with patch(lib):
            run_source(text, lib, record=record, **shared)
        records.append(record)
        logs.append(capsys.readouterr().out)
    return records, logs


class _SharedDraws:
    """``torch.randn``, ``torch.randn_like`` and ``Tensor.normal_`` of a library drawing from
    one seeded stream (the same in both runs)."""

    def __init__(self, seed):
        self.seed = seed

    def __call__(self, lib):
        self.lib, self.rng = lib, np.random.default_rng(self.seed)
        return self

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randn(*size, device=None, dtype=None, **_):
            shape = size[0] if len(size) == 1 and not isinstance(size[0], int) else size
            return lib.tensor(rng.standard_normal(tuple(shape)), dtype=dtype or lib.float32)

        def randn_like(t, **_):
            return randn(*t.shape, dtype=t.dtype)

        def normal_(t, mean=0.0, std=1.0, **_):
            with lib.no_grad():
                t.copy_(randn(*t.shape, dtype=t.dtype) * std + mean)
            return t

        self.saved = lib.randn, lib.randn_like, lib.Tensor.normal_
        lib.randn, lib.randn_like, lib.Tensor.normal_ = randn, randn_like, normal_
        return self

    def __exit__(self, *exc):
        self.lib.randn, self.lib.randn_like, self.lib.Tensor.normal_ = self.saved
        return False


# -- StyleGAN2 ------------------------------------------------------------------------------------
STYLEGAN2_SOURCE = """
# An 8x8 StyleGAN2: mapping network, modulated convolutions with per-pixel noise and skip RGB
# outputs; a residual discriminator with a minibatch-stddev feature. `random` is the test's
# seeded `random.Random` (the crossover draws), not the module.
from collections import abc

from torch import autograd, distributed as dist

LRELU_GAIN = math.sqrt(2)


def as_pair(v):
    return tuple(v) if isinstance(v, abc.Iterable) else (v, v)


def resample(x, kernel, up=1, down=1, pads=(0, 0)):
    # zero-stuff by `up`, pad (negative pads crop), filter with `kernel`, keep every `down`-th
    (uy, ux), (dy, dx) = as_pair(up), as_pair(down)
    px0, px1, py0, py1 = pads if len(pads) == 4 else (*pads, *pads)
    n, c, h, w = x.shape
    kh, kw = kernel.shape
    y = F.pad(x.reshape(n * c, h, 1, w, 1, 1), [0, 0, 0, ux - 1, 0, 0, 0, uy - 1])
    y = y.view(n * c, h * uy, w * ux, 1)
    y = F.pad(y, [0, 0, max(px0, 0), max(px1, 0), max(py0, 0), max(py1, 0)])
    rows = slice(max(-py0, 0), y.shape[1] - max(-py1, 0))
    cols = slice(max(-px0, 0), y.shape[2] - max(-px1, 0))
    y = y[:, rows, cols, :]
    hp, wp = y.shape[1], y.shape[2]
    taps = torch.flip(kernel, [0, 1]).view(1, 1, kh, kw)
    y = F.conv2d(y.permute(0, 3, 1, 2).reshape(-1, 1, hp, wp), taps)
    y = y.permute(0, 2, 3, 1)[:, ::dy, ::dx, :]
    return y.reshape(n, c, y.shape[1], y.shape[2])


def fir(taps, gain=1.0):
    k = torch.tensor(taps, dtype=torch.float32)
    k = k[:, None] * k[None, :]
    k /= k.sum()
    return k * gain


def lrelu(x, bias=None):
    if bias is not None:
        ones = [1] * (x.ndim - bias.ndim - 1)
        x = x + bias.view(1, bias.shape[0], *ones)
    return F.leaky_relu(x, negative_slope=0.2) * LRELU_GAIN


class BiasLReLU(nn.Module):
    def __init__(self, channels, bias=True):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None

    def forward(self, x):
        return lrelu(x, self.bias)


class PixelNorm(nn.Module):
    def forward(self, z):
        return z * (z.pow(2).mean(dim=1, keepdim=True) + 1e-8).rsqrt()


class EqLinear(nn.Module):
    # weights stored at unit variance and scaled at run time (equalized learning rate)
    def __init__(self, fan_in, fan_out, lr_mul=1.0, bias_init=0.0, act=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(fan_out, fan_in).div_(lr_mul))
        self.bias = nn.Parameter(torch.zeros(fan_out).fill_(bias_init))
        self.gain, self.lr_mul, self.act = lr_mul / math.sqrt(fan_in), lr_mul, act

    def forward(self, x):
        if self.act:
            return lrelu(F.linear(x, self.weight * self.gain), self.bias * self.lr_mul)
        return F.linear(x, self.weight * self.gain, bias=self.bias * self.lr_mul)

    def __repr__(self):
        return f"EqLinear({self.weight.shape[1]} -> {self.weight.shape[0]})"


class EqConv2d(nn.Module):
    def __init__(self, cin, cout, k, stride=1, padding=0, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin, k, k))
        self.bias = nn.Parameter(torch.zeros(cout)) if bias else None
        self.gain, self.stride, self.padding = 1 / math.sqrt(cin * k * k), stride, padding

    def forward(self, x):
        w = self.weight * self.gain
        return F.conv2d(x, w, bias=self.bias, stride=self.stride, padding=self.padding)

    def __repr__(self):
        cout, cin, k, _ = self.weight.shape
        return f"EqConv2d({cin} -> {cout}, k={k}, stride={self.stride}, pad={self.padding})"


class Blur(nn.Module):
    def __init__(self, pads, gain=1.0, up=1):
        super().__init__()
        self.register_buffer("kernel", fir([1, 3, 3, 1], gain))
        self.pads, self.up = pads, up

    def forward(self, x):
        return resample(x, self.kernel, up=self.up, pads=self.pads)


class ModConv(nn.Module):
    def __init__(self, cin, cout, k, w_dim, demod=True, up=False):
        super().__init__()
        self.cin, self.cout, self.k, self.demod, self.up = cin, cout, k, demod, up
        self.weight = nn.Parameter(torch.randn(1, cout, cin, k, k))
        self.gain = 1 / math.sqrt(cin * k * k)
        self.affine = EqLinear(w_dim, cin, bias_init=1.0)
        if up:  # the transposed conv's 2h + k - 2 rows filtered back to 2h
            extra = 4 - 2 - (k - 1)
            self.blur = Blur(((extra + 1) // 2 + 1, extra // 2 + 1), gain=4.0)

    def __repr__(self):
        return f"ModConv({self.cin} -> {self.cout}, k={self.k}, up={self.up})"

    def forward(self, x, w):
        n, cin, h, wd = x.shape
        weight = self.gain * self.weight * self.affine(w).view(n, 1, cin, 1, 1)
        if self.demod:
            norm = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * norm.view(n, self.cout, 1, 1, 1)
        x = x.reshape(1, n * cin, h, wd)
        if self.up:
            weight = weight.transpose(1, 2).reshape(n * cin, self.cout, self.k, self.k)
            y = F.conv_transpose2d(x, weight, padding=0, stride=2, groups=n)
            return self.blur(y.view(n, self.cout, y.shape[2], y.shape[3]))
        weight = weight.reshape(n * self.cout, cin, self.k, self.k)
        y = F.conv2d(x, weight, padding=self.k // 2, groups=n)
        return y.view(n, self.cout, h, wd)


class AddNoise(nn.Module):
    def __init__(self):
        super().__init__()
        self.strength = nn.Parameter(torch.zeros(1))

    def forward(self, x, noise=None):
        if noise is None:
            n, _, h, w = x.shape
            noise = x.new_empty(n, 1, h, w).normal_()
        return x + self.strength * noise


class StyleLayer(nn.Module):
    def __init__(self, cin, cout, w_dim, up=False):
        super().__init__()
        self.conv = ModConv(cin, cout, 3, w_dim, up=up)
        self.noise = AddNoise()
        self.act = BiasLReLU(cout)

    def forward(self, x, w, noise=None):
        return self.act(self.noise(self.conv(x, w), noise))


class ToRGB(nn.Module):
    def __init__(self, cin, w_dim, up=True):
        super().__init__()
        self.conv = ModConv(cin, 3, 1, w_dim, demod=False)
        self.bias = nn.Parameter(torch.zeros((1, 3, 1, 1)))
        if up:
            self.upsample = Blur((2, 1), gain=4.0, up=2)

    def forward(self, x, w, skip=None):
        rgb = self.conv(x, w) + self.bias
        return rgb if skip is None else rgb + self.upsample(skip)


class LearnedConstant(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.value = nn.Parameter(torch.randn(1, channels, 4, 4))

    def forward(self, w):
        return self.value.repeat(w.shape[0], 1, 1, 1)


class Generator(nn.Module):
    def __init__(self, size, w_dim, n_mlp, width, lr_mlp=0.01):
        super().__init__()
        self.mapping = nn.Sequential(
            PixelNorm(), *[EqLinear(w_dim, w_dim, lr_mul=lr_mlp, act=True) for _ in range(n_mlp)]
        )
        self.const = LearnedConstant(width)
        self.first = StyleLayer(width, width, w_dim)
        self.first_rgb = ToRGB(width, w_dim, up=False)
        self.ups, self.convs, self.rgbs = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        levels = int(math.log2(size)) - 2
        for _ in range(levels):
            self.ups.append(StyleLayer(width, width, w_dim, up=True))
            self.convs.append(StyleLayer(width, width, w_dim))
            self.rgbs.append(ToRGB(width, w_dim))
        self.n_noise, self.n_w = 1 + 2 * levels, 2 + 2 * levels
        self.noises = nn.Module()
        for j in range(self.n_noise):
            side = 4 * 2 ** ((j + 1) // 2)
            self.noises.register_buffer(f"noise_{j}", torch.randn(1, 1, side, side))

    def forward(self, zs, fixed_noise=False, return_ws=False):
        ws = [self.mapping(z) for z in zs]
        if fixed_noise:
            noises = [getattr(self.noises, f"noise_{j}") for j in range(self.n_noise)]
        else:
            noises = [None] * self.n_noise
        if len(ws) == 1:
            w = ws[0].unsqueeze(1).repeat(1, self.n_w, 1)
        else:  # style mixing: the first `cut` layers take one latent, the rest the other
            cut = random.randint(1, self.n_w - 1)
            head = ws[0].unsqueeze(1).repeat(1, cut, 1)
            w = torch.cat([head, ws[1].unsqueeze(1).repeat(1, self.n_w - cut, 1)], 1)
        x = self.first(self.const(w), w[:, 0], noises[0])
        rgb = self.first_rgb(x, w[:, 1])
        for j, (up, conv, to_rgb) in enumerate(zip(self.ups, self.convs, self.rgbs)):
            x = up(x, w[:, 2 * j + 1], noises[2 * j + 1])
            x = conv(x, w[:, 2 * j + 2], noises[2 * j + 2])
            rgb = to_rgb(x, w[:, 2 * j + 3], rgb)
        return rgb, (w if return_ws else None)


class ConvBlock(nn.Sequential):
    def __init__(self, cin, cout, k, down=False, bias=True, act=True):
        layers = []
        if down:
            extra = 4 - 2 + (k - 1)
            layers.append(Blur(((extra + 1) // 2, extra // 2)))
            self.padding, stride = 0, 2
        else:
            self.padding, stride = k // 2, 1
        conv_bias = bias and not act
        layers.append(EqConv2d(cin, cout, k, stride=stride, padding=self.padding, bias=conv_bias))
        if act:
            layers.append(BiasLReLU(cout, bias=bias))
        super().__init__(*layers)


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = ConvBlock(cin, cin, 3)
        self.conv2 = ConvBlock(cin, cout, 3, down=True)
        self.skip = ConvBlock(cin, cout, 1, down=True, bias=False, act=False)

    def forward(self, x):
        return (self.conv2(self.conv1(x)) + self.skip(x)) / math.sqrt(2)


class Critic(nn.Module):
    def __init__(self, size, width, group=4):
        super().__init__()
        blocks = [ConvBlock(3, width, 1)]
        for _ in range(int(math.log2(size)) - 2):
            blocks.append(ResBlock(width, width))
        self.blocks = nn.Sequential(*blocks)
        self.group = group
        self.final = ConvBlock(width + 1, width, 3)
        self.head = nn.Sequential(EqLinear(width * 16, width, act=True), EqLinear(width, 1))

    def forward(self, img):
        x = self.blocks(img)
        n, c, h, w = x.shape
        g = min(n, self.group)
        spread = x.view(g, -1, 1, c, h, w).var(0, unbiased=False)
        spread = torch.sqrt(spread + 1e-8).mean([2, 3, 4], keepdims=True).squeeze(2)
        x = torch.cat([x, spread.repeat(g, 1, h, w)], 1)
        return self.head(self.final(x).view(n, -1))


def world_mean(t):
    if dist.is_available() and dist.is_initialized():
        t = t.clone()
        dist.all_reduce(t)
        return t / dist.get_world_size()
    return t


def set_trainable(module, flag):
    for p in module.parameters():
        p.requires_grad = flag


def ema_update(target, source, decay):
    src = dict(source.named_parameters())
    for name, p in target.named_parameters():
        p.data.mul_(decay).add_(src[name].data, alpha=1 - decay)


def draw_z(n):
    if cfg.mixing > 0 and random.random() < cfg.mixing:
        return list(torch.randn(2, n, cfg.latent).unbind(0))
    return [torch.randn(n, cfg.latent)]


G = Generator(cfg.size, cfg.latent, 2, cfg.width)
D = Critic(cfg.size, cfg.width)
G_ema = Generator(cfg.size, cfg.latent, 2, cfg.width)
G_ema.eval()
ema_update(G_ema, G, 0)

# lazy regularization: the optimizers' rates and betas account for the skipped penalty steps
g_ratio = cfg.g_reg_every / (cfg.g_reg_every + 1)
d_ratio = cfg.d_reg_every / (cfg.d_reg_every + 1)
g_opt = optim.Adam(G.parameters(), lr=cfg.lr * g_ratio, betas=(0**g_ratio, 0.99**g_ratio))
d_opt = optim.Adam(D.parameters(), lr=cfg.lr * d_ratio, betas=(0**d_ratio, 0.99**d_ratio))
decay = 0.5 ** (cfg.batch / 500)
fixed_z = torch.randn(2, cfg.latent)
mean_path = 0
r1 = path_loss = torch.tensor(0.0)
record.append(repr(G.ups[0].conv) + repr(D.blocks[1].conv2[1]))

for step, real in zip(range(cfg.iters), loader):
    set_trainable(G, False)
    set_trainable(D, True)
    fake, _ = G(draw_z(cfg.batch))
    fake_score, real_score = D(fake), D(real)
    d_loss = F.softplus(fake_score).mean() + F.softplus(-real_score).mean()
    D.zero_grad()
    d_loss.backward()
    d_opt.step()

    if step % cfg.d_reg_every == 0:
        real.requires_grad = True
        pred = D(real)
        (grad,) = autograd.grad(outputs=pred.sum(), inputs=real, create_graph=True)
        r1 = grad.pow(2).reshape(grad.shape[0], -1).sum(1).mean()
        D.zero_grad()
        r1_term = cfg.r1 / 2 * r1 * cfg.d_reg_every + 0 * pred[0]
        r1_term.backward()
        d_opt.step()

    set_trainable(G, True)
    set_trainable(D, False)
    fake, _ = G(draw_z(cfg.batch))
    g_loss = F.softplus(-D(fake)).mean()
    G.zero_grad()
    g_loss.backward()
    g_opt.step()

    if step % cfg.g_reg_every == 0:
        fake, ws = G(draw_z(max(1, cfg.batch // cfg.path_shrink)), return_ws=True)
        probe = torch.randn_like(fake) / math.sqrt(fake.shape[2] * fake.shape[3])
        (grad,) = autograd.grad(outputs=(fake * probe).sum(), inputs=ws, create_graph=True)
        lengths = grad.pow(2).sum(2).mean(1).sqrt()
        target = mean_path + 0.01 * (lengths.mean() - mean_path)
        path_loss = (lengths - target).pow(2).mean()
        mean_path = target.detach()
        G.zero_grad()
        weighted = cfg.path_reg * cfg.g_reg_every * path_loss
        weighted += 0 * fake[0, 0, 0, 0]
        weighted.backward()
        g_opt.step()

    ema_update(G_ema, G, decay)
    mean_path_all = world_mean(mean_path).item()
    losses = [d_loss.item(), g_loss.item(), r1.item(), path_loss.item()]
    print("d: {:.4f} g: {:.4f} r1: {:.4f} path: {:.4f}".format(*losses))
    scores = [real_score.mean().item(), fake_score.mean().item()]
    record.append(losses + scores + [mean_path_all])
    record.append(params_of(G, D, G_ema))
    with torch.no_grad():
        record.append(G_ema([fixed_z], fixed_noise=True)[0].numpy())
"""

STYLEGAN2_STEPS = [
    ("from torch import", "from retrograd import"),
    (
        "    d_loss.backward()\n    d_opt.step()",
        "    grads = d_loss.backward()\n    d_opt.step(grads)",
    ),
    (
        "        r1_term.backward()\n        d_opt.step()",
        "        grads = r1_term.backward()\n        d_opt.step(grads)",
    ),
    (
        "    g_loss.backward()\n    g_opt.step()",
        "    grads = g_loss.backward()\n    g_opt.step(grads)",
    ),
    (
        "        weighted.backward()\n        g_opt.step()",
        "        grads = weighted.backward()\n        g_opt.step(grads)",
    ),
]


def _config():
    return types.SimpleNamespace(
        size=8, width=8, latent=8, batch=4, iters=2, mixing=0.9, r1=10.0, path_reg=2.0,
        path_shrink=2, d_reg_every=2, g_reg_every=2, lr=0.002,
    )  # fmt: skip


def test_stylegan2_trains_as_torch(capsys):
    images = np.random.default_rng(52).uniform(-1, 1, size=(3, 4, 3, 8, 8)).astype(np.float32)
    records, logs = _runs(
        STYLEGAN2_SOURCE,
        STYLEGAN2_STEPS,
        capsys,
        patch=_SharedDraws(52),
        make_cfg=lambda lib: _config(),
        make_loader=lambda lib: [lib.tensor(image) for image in images],
        make_random=lambda lib: random.Random(5),
        params_of=params_of,
    )
    ours, theirs = records[1], records[0]
    assert theirs[0] == "ModConv(8 -> 8, k=3, up=True)EqConv2d(8 -> 8, k=3, stride=2, pad=0)"
    assert logs[0].count("d: ") == 2
    assert theirs[1][2] > 0 and theirs[1][3] > 0  # both penalties ran in the first step
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


# -- DLRM -----------------------------------------------------------------------------------------
DLRM_SOURCE = """
# A small DLRM-style click model: a bottom MLP over dense features, summed embedding bags over
# sparse ones, pairwise dot (or concatenated) interactions and a top MLP with a sigmoid.
import sys

from torch.autograd import profiler
from torch.optim import lr_scheduler


def dashed(spec, dtype=int):
    return np.fromstring(spec, dtype=dtype, sep="-")


def synthetic_batch(n, dense_dim, table_rows, max_bag):
    dense = torch.tensor(np.random.rand(n, dense_dim).astype(np.float32))
    offsets, indices = [], []
    for rows in table_rows:
        starts, picked, at = [], [], 0
        for _ in range(n):
            draw = max(1.0, np.random.random() * min(rows, max_bag))
            bag = np.unique(np.round(np.random.random(int(np.round(draw))) * (rows - 1)))
            starts.append(at)  # an int, then NumPy int32s
            picked.extend(bag.astype(np.int64).tolist())
            at += np.int32(bag.size)
        offsets.append(torch.tensor(starts))
        indices.append(torch.tensor(picked))
    clicks = np.round(np.random.rand(n, 1)).astype(np.float32)
    return dense, offsets, indices, torch.tensor(clicks)


class WarmupThenSquareDecay(lr_scheduler._LRScheduler):
    # linear warm-up, the rate held, then a quadratic decay whose last value is kept
    def __init__(self, optimizer, warmup, decay_from, decay_steps):
        if decay_from < warmup:
            sys.exit("the decay must start after the warm-up")
        self.warmup, self.decay_from, self.decay_steps = warmup, decay_from, decay_steps
        self.kept = None
        super().__init__(optimizer)

    def get_lr(self):
        t = self._step_count
        if t < self.warmup:
            self.kept = [lr * t / self.warmup for lr in self.base_lrs]
        elif self.decay_from <= t < self.decay_from + self.decay_steps:
            left = 1 - (t - self.decay_from) / self.decay_steps
            self.kept = [max(1e-7, lr * left**2) for lr in self.base_lrs]
        elif self.kept is None or self.decay_steps == 0:
            return list(self.base_lrs)
        return self.kept


class ClickModel(nn.Module):
    def __init__(self, cfg, bottom, top, table_rows):
        super().__init__()
        self.cfg = cfg
        self.bottom = self.mlp(bottom, sigmoid_at=-1)
        self.top = self.mlp(top, sigmoid_at=top.size - 2)
        self.tables = nn.ModuleList()
        ones = []
        for rows in table_rows:
            bag = nn.EmbeddingBag(rows, cfg.emb_dim, mode="sum", sparse=True)
            bound = np.sqrt(1 / rows)
            table = np.random.uniform(-bound, bound, size=(rows, cfg.emb_dim)).astype(np.float32)
            bag.weight.data = torch.tensor(table, requires_grad=True)
            self.tables.append(bag)
            ones.append(torch.ones(rows, dtype=torch.float32))
        if cfg.bag_weights == "learned":
            self.bag_weights = nn.ParameterList()
            for w in ones:
                self.bag_weights.append(nn.Parameter(w))
        elif cfg.bag_weights == "fixed":
            self.bag_weights = ones
        else:
            self.bag_weights = [None] * len(ones)
        if cfg.loss == "wbce":
            self.class_weights = torch.tensor(dashed(cfg.class_weights, dtype=float))
        losses = {"mse": nn.MSELoss, "bce": nn.BCELoss}
        reduction = "none" if cfg.loss == "wbce" else "mean"
        self.criterion = losses.get(cfg.loss, nn.BCELoss)(reduction=reduction)

    @staticmethod
    def mlp(widths, sigmoid_at):
        layers = []
        for i in range(widths.size - 1):
            fan_in, fan_out = widths[i], widths[i + 1]
            linear = nn.Linear(int(fan_in), int(fan_out), bias=True)
            w = np.random.normal(0.0, np.sqrt(2 / (fan_in + fan_out)), size=(fan_out, fan_in))
            b = np.random.normal(0.0, np.sqrt(1 / fan_out), size=fan_out)
            linear.weight.data = torch.tensor(w.astype(np.float32), requires_grad=True)
            linear.bias.data = torch.tensor(b.astype(np.float32), requires_grad=True)
            layers += [linear, nn.Sigmoid() if i == sigmoid_at else nn.ReLU()]
        return nn.Sequential(*layers)

    def pool(self, offsets, indices):
        pooled = []
        for k, table in enumerate(self.tables):
            w = self.bag_weights[k]
            weights = None if w is None else w.gather(0, indices[k])
            pooled.append(table(indices[k], offsets[k], per_sample_weights=weights))
        return pooled

    def interact(self, x, pooled):
        if self.cfg.interaction == "cat":
            return torch.cat([x] + pooled, dim=1)
        n, d = x.shape
        feats = torch.cat([x] + pooled, dim=1).view((n, -1, d))
        gram = torch.bmm(feats, torch.transpose(feats, 1, 2))
        m, shift = gram.shape[1], int(self.cfg.self_interaction)
        rows = torch.tensor([a for a in range(m) for b in range(a + shift)])
        cols = torch.tensor([b for a in range(m) for b in range(a + shift)])
        return torch.cat([x, gram[:, rows, cols]], dim=1)

    def forward(self, dense, offsets, indices):
        p = self.top(self.interact(self.bottom(dense), self.pool(offsets, indices)))
        eps = self.cfg.clamp
        return torch.clamp(p, min=eps, max=1.0 - eps) if 0.0 < eps < 1.0 else p

    def loss(self, p, t):
        if self.cfg.loss != "wbce":
            return self.criterion(p, t)
        w = self.class_weights[t.data.view(-1).long()].view_as(t)
        return (w * self.criterion(p, t)).mean()


np.random.seed(cfg.seed)
bottom, table_rows = dashed(cfg.bottom), dashed(cfg.tables)
n_feats, d = table_rows.size + 1, bottom[-1]
if cfg.interaction == "cat":
    top_in = n_feats * d
elif cfg.self_interaction:
    top_in = n_feats * (n_feats + 1) // 2 + d
else:
    top_in = n_feats * (n_feats - 1) // 2 + d
top = dashed(f"{top_in}-{cfg.top}")
batches = [synthetic_batch(cfg.batch_size, bottom[0], table_rows, cfg.max_bag)
           for _ in range(cfg.n_batches)]
model = ClickModel(cfg, bottom, top, table_rows)
opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
schedule = WarmupThenSquareDecay(opt, cfg.warmup, cfg.decay_from, cfg.decay_steps)

for epoch in range(cfg.epochs):
    for dense, offsets, indices, clicks in batches:
        with profiler.record_function("forward"):
            p = model(dense, offsets, indices)
        with profiler.record_function("loss"):
            loss = model.loss(p, clicks)
        hits = np.sum(np.round(p.detach().cpu().numpy()) == clicks.numpy())
        with profiler.record_function("backward and step"):
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
        record.append([loss.item(), hits / len(clicks), schedule.get_last_lr()[0]])
    record.append(params_of(model))
"""

DLRM_STEPS = [
    # retrograd has no sparse gradients (nn.EmbeddingBag refuses sparse=True): the dense ones,
    # whose values SGD steps the same
    ('mode="sum", sparse=True)', 'mode="sum", sparse=False)'),
    (
        "            loss.backward()\n            opt.step()",
        "            grads = loss.backward()\n            opt.step(grads)",
    ),
]


def _dlrm_config(**changes):
    cfg = dict(
        seed=7, emb_dim=4, tables="6-8-5", bottom="5-6-4", top="5-1", interaction="dot",
        self_interaction=False, clamp=0.0, bag_weights="learned", loss="bce",
        class_weights="1.0-1.0", batch_size=6, max_bag=3, n_batches=3, epochs=2, lr=0.4,
        warmup=3, decay_from=3, decay_steps=3,
    )  # fmt: skip
    cfg.update(changes)
    return types.SimpleNamespace(**cfg)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"self_interaction": True, "bag_weights": None, "loss": "wbce", "class_weights": "0.6-1.4"},
        {"interaction": "cat", "bag_weights": "fixed", "loss": "mse", "clamp": 0.02},
    ],
)
def test_dlrm_trains_as_torch(capsys, changes):
    records, _ = _runs(
        DLRM_SOURCE,
        DLRM_STEPS,
        capsys,
        patch=lambda lib: _nothing(),
        make_cfg=lambda lib: _dlrm_config(**changes),
        params_of=params_of,
    )
    ours, theirs = records[1], records[0]
    assert len(theirs) == 8
    # warm-up (step 2 of 3), the decay's start, then (2/3)**2 of the base rate, held at the end
    lrs = [theirs[i][2] for i in (0, 1, 2, 4, 5, 6)]
    assert lrs == pytest.approx([0.8 / 3, 0.4, 1.6 / 9, 0.4 / 9, 0.4 / 9, 0.4 / 9])
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


class _nothing:  # noqa: N801
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- DLinear / NLinear ----------------------------------------------------------------------------
LTSF_SOURCE = '''
# Long-horizon forecasting with one linear map over time per component (DLinear: a moving
# average trend and its remainder; NLinear: the series shifted by its last value), per channel
# or shared, trained on sliding windows of a float64 series.
from torch.utils.data import Dataset, DataLoader


class TrendFilter(nn.Module):
    """A centred moving average; the ends repeat the first and last values."""

    def __init__(self, width):
        super().__init__()
        self.half = (width - 1) // 2
        self.pool = nn.AvgPool1d(kernel_size=width, stride=1, padding=0)

    def forward(self, x):  # [batch, time, channels]
        head = x[:, 0:1, :].repeat(1, self.half, 1)
        tail = x[:, -1:, :].repeat(1, self.half, 1)
        smooth = self.pool(torch.cat([head, x, tail], dim=1).permute(0, 2, 1))
        return smooth.permute(0, 2, 1)


class Decomposition(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.trend = TrendFilter(width)

    def forward(self, x):
        trend = self.trend(x)
        return x - trend, trend


def time_maps(cfg):
    if cfg.individual:
        return nn.ModuleList([nn.Linear(cfg.seq_len, cfg.pred_len) for _ in range(cfg.enc_in)])
    return nn.Linear(cfg.seq_len, cfg.pred_len)


class DLinear(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.split = Decomposition(9)
        self.seasonal, self.trend = time_maps(cfg), time_maps(cfg)

    def forward(self, x):
        season, trend = (part.permute(0, 2, 1) for part in self.split(x))  # [batch, ch, time]
        if not self.cfg.individual:
            return (self.seasonal(season) + self.trend(trend)).permute(0, 2, 1)
        shape = [season.size(0), season.size(1), self.cfg.pred_len]
        out = torch.zeros(shape, dtype=season.dtype).to(season.device)
        for i in range(self.cfg.enc_in):
            out[:, i, :] = self.seasonal[i](season[:, i, :]) + self.trend[i](trend[:, i, :])
        return out.permute(0, 2, 1)


class NLinear(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.maps = time_maps(cfg)

    def forward(self, x):
        last = x[:, -1:, :].detach()
        x = x - last
        if self.cfg.individual:
            y = torch.zeros([x.size(0), self.cfg.pred_len, x.size(2)], dtype=x.dtype).to(x.device)
            for i, linear in enumerate(self.maps):
                y[:, :, i] = linear(x[:, :, i])
        else:
            y = self.maps(x.permute(0, 2, 1)).permute(0, 2, 1)
        return y + last


class Windows(Dataset):
    """(input window, label + target window, and their time stamps) at each start."""

    def __init__(self, values, cfg):
        self.values, self.cfg = values, cfg
        self.stamps = (np.arange(len(values)) / len(values)).astype(np.float32)[:, None]

    def __len__(self):
        return len(self.values) - self.cfg.seq_len - self.cfg.pred_len + 1

    def __getitem__(self, start):
        cut = start + self.cfg.seq_len
        later = slice(cut - self.cfg.label_len, cut + self.cfg.pred_len)
        x, y = self.values[start:cut], self.values[later]
        return x, y, self.stamps[start:cut], self.stamps[later]


def outputs_and_targets(model, x, y, cfg):
    x, y = x.float(), y.float()
    # the decoder input a seq2seq model would take (unused by the linear ones)
    blank = torch.zeros_like(y[:, -cfg.pred_len :, :]).float()
    _ = torch.cat([y[:, : cfg.label_len, :], blank], dim=1).float()
    first = -1 if cfg.features == "MS" else 0  # "MS": score only the last channel
    return model(x)[:, -cfg.pred_len :, first:], y[:, -cfg.pred_len :, first:]


def evaluate(model, loader, criterion, cfg):
    model.eval()
    losses = []
    with torch.no_grad():
        for x, y, _, _ in loader:
            pred, true = outputs_and_targets(model, x, y, cfg)
            losses.append(criterion(pred.detach().cpu(), true.detach().cpu()))
    model.train()
    return np.average(losses)


def halve_learning_rate(optimizer, epoch, cfg):
    if cfg.lradj == "type1":
        lr = cfg.learning_rate * 0.5 ** (epoch - 1)
        for group in optimizer.param_groups:
            group["lr"] = lr
        print("learning rate now {0}".format(lr))


model = {"DLinear": DLinear, "NLinear": NLinear}[cfg.model](cfg).float()
initialize(model)
train_loader = DataLoader(Windows(series[:80], cfg), batch_size=cfg.batch_size, drop_last=True)
val_loader = DataLoader(Windows(series[60:], cfg), batch_size=cfg.batch_size, shuffle=False)
opt = optim.Adam(model.parameters(), lr=cfg.learning_rate)
criterion = nn.MSELoss()
for epoch in range(1, cfg.train_epochs + 1):
    model.train()
    losses = []
    for x, y, x_stamp, y_stamp in train_loader:
        opt.zero_grad()
        pred, true = outputs_and_targets(model, x, y, cfg)
        loss = criterion(pred, true)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    train_loss, val_loss = np.average(losses), evaluate(model, val_loader, criterion, cfg)
    print("epoch {0}: {1} batches, train {2:.6f}, validation {3:.6f}".format(
        epoch, len(train_loader), train_loss, val_loss))
    record.append([train_loss, float(val_loss)])
    record.append(params_of(model))
    halve_learning_rate(opt, epoch + 1, cfg)
'''

LTSF_STEPS = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    ),
]


@pytest.mark.parametrize(
    "model, individual, features",
    [
        ("DLinear", True, "M"),
        ("DLinear", False, "MS"),
        ("NLinear", True, "M"),
        ("NLinear", False, "M"),
    ],
)
def test_ltsf_linear_models_train_as_torch(capsys, model, individual, features):
    t = np.arange(100)[:, None]
    series = np.cos(t / np.array([4.0, 6.0, 9.0])) + 0.02 * t  # [100, 3], float64

    def config(lib):
        return types.SimpleNamespace(
            model=model, individual=individual, features=features, seq_len=24, label_len=6,
            pred_len=8, enc_in=3, batch_size=8, learning_rate=0.01, train_epochs=3, lradj="type1",
        )  # fmt: skip

    states = []

    def initialize(lib):
        def load(module):
            if lib is torch:
                states.append(
                    {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
                )
            else:
                module.load_state_dict(states[0])

        return load

    records, logs = _runs(
        LTSF_SOURCE,
        LTSF_STEPS,
        capsys,
        patch=lambda lib: _nothing(),
        make_cfg=config,
        make_initialize=initialize,
        series=series,
        params_of=params_of,
    )
    assert logs[0].count("learning rate now") == 3
    assert records[0][4][0] < records[0][0][0]
    # the logs' losses to float32's rounding
    assert_records_agree(records[1], records[0], rtol=2e-5, atol=1e-6)


# -- TabNet ---------------------------------------------------------------------------------------
SPARSEMAX_SOURCE = '''
# Sparse replacements for softmax (sparsemax and 1.5-entmax), each an autograd.Function with
# its closed-form backward, for attention masks that can be exactly zero.
from torch import autograd


def ranks_like(z, dim):
    """1, 2, ..., n along ``dim``, shaped to broadcast against ``z``."""
    r = torch.arange(1, z.size(dim) + 1, device=z.device, dtype=z.dtype)
    shape = [1] * z.dim()
    shape[0] = -1
    return r.view(shape).transpose(0, dim)


class SparsemaxFn(autograd.Function):
    @staticmethod
    def forward(ctx, z, dim=-1):
        ctx.dim = dim
        top, _ = z.max(dim=dim, keepdim=True)
        z -= top  # shifted in place, as softmax implementations do
        ordered, _ = torch.sort(z, descending=True, dim=dim)
        running = ordered.cumsum(dim) - 1
        k = (ranks_like(z, dim) * ordered > running).sum(dim=dim).unsqueeze(dim)
        tau = running.gather(dim, k - 1)
        tau /= k.to(z.dtype)
        p = torch.clamp(z - tau, min=0)
        ctx.save_for_backward(k, p)
        return p

    @staticmethod
    def backward(ctx, g):
        k, p = ctx.saved_tensors
        g_in = g.clone()
        g_in[p == 0] = 0
        mean = (g_in.sum(dim=ctx.dim) / k.to(p.dtype).squeeze()).unsqueeze(ctx.dim)
        return torch.where(p != 0, g_in - mean, g_in), None


class Entmax15Fn(autograd.Function):
    @staticmethod
    def forward(ctx, z, dim=-1):
        ctx.dim = dim
        top, _ = z.max(dim=dim, keepdim=True)
        z = (z - top) / 2
        ordered, _ = torch.sort(z, descending=True, dim=dim)
        r = ranks_like(z, dim)
        mean = ordered.cumsum(dim) / r
        spread = r * ((ordered**2).cumsum(dim) / r - mean**2)
        tau = mean - torch.sqrt(torch.clamp((1 - spread) / r, 0))
        k = (tau <= ordered).sum(dim).unsqueeze(dim)
        p = torch.clamp(z - tau.gather(dim, k - 1), min=0) ** 2
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        s = p.sqrt()
        dz = g * s
        q = (dz.sum(ctx.dim) / s.sum(ctx.dim)).unsqueeze(ctx.dim)
        dz -= q * s
        return dz, None


class Sparsemax(nn.Module):
    def __init__(self, dim=-1):
        self.dim = dim
        super().__init__()

    def forward(self, z):
        return SparsemaxFn.apply(z, self.dim)


class Entmax15(nn.Module):
    def __init__(self, dim=-1):
        self.dim = dim
        super().__init__()

    def forward(self, z):
        return Entmax15Fn.apply(z, self.dim)
'''

TABNET_SOURCE = '''
# A two-step TabNet-style classifier: GLU feature blocks under ghost batch norm (the first
# layers shared by every step) and attentive transformers choosing features through sparse
# masks, trained with a sparsity bonus and clipped gradients.
from torch.nn import BatchNorm1d, Linear, ReLU
from torch.utils.data import TensorDataset, DataLoader


def xavier(layer, fan_in, fan_out, glu=False):
    gain = np.sqrt((fan_in + fan_out) / np.sqrt(fan_in if glu else 4 * fan_in))
    torch.nn.init.xavier_normal_(layer.weight, gain=gain)


class GhostBN(torch.nn.Module):
    """Batch norm over virtual batches of ``size`` rows."""

    def __init__(self, dim, size, momentum):
        super().__init__()
        self.size = size
        self.bn = BatchNorm1d(dim, momentum=momentum)

    def forward(self, x):
        pieces = x.chunk(int(np.ceil(x.shape[0] / self.size)), 0)
        return torch.cat([self.bn(piece) for piece in pieces], dim=0)


class GLU(torch.nn.Module):
    def __init__(self, fan_in, width, fc=None, size=8, momentum=0.02):
        super().__init__()
        self.width = width
        self.fc = fc if fc else Linear(fan_in, 2 * width, bias=False)
        xavier(self.fc, fan_in, 2 * width, glu=True)
        self.bn = GhostBN(2 * width, size, momentum)

    def forward(self, x):
        h = self.bn(self.fc(x))
        return h[:, : self.width] * torch.sigmoid(h[:, self.width :])


class GLUStack(torch.nn.Module):
    """GLU layers summed residually at half variance; a ``first`` stack's first is not."""

    def __init__(self, fan_in, width, n, first, shared=None, size=8, momentum=0.02):
        super().__init__()
        self.first = first
        self.layers = torch.nn.ModuleList()
        for i in range(n):
            fc = shared[i] if shared else None
            self.layers.append(GLU(fan_in if i == 0 else width, width, fc, size, momentum))

    def forward(self, x):
        half = torch.sqrt(torch.FloatTensor([0.5]).to(x.device))
        start = 1 if self.first else 0
        if self.first:
            x = self.layers[0](x)
        for i in range(start, len(self.layers)):
            x = torch.add(x, self.layers[i](x)) * half
        return x


class FeatureBlock(torch.nn.Module):
    def __init__(self, fan_in, width, shared, n_own, size, momentum):
        super().__init__()
        self.shared = GLUStack(fan_in, width, len(shared), True, shared, size, momentum)
        self.own = GLUStack(width, width, n_own, False, None, size, momentum)

    def forward(self, x):
        return self.own(self.shared(x))


class Attention(torch.nn.Module):
    def __init__(self, fan_in, n_features, size, momentum, mask_type):
        super().__init__()
        self.fc = Linear(fan_in, n_features, bias=False)
        xavier(self.fc, fan_in, n_features)
        self.bn = GhostBN(n_features, size, momentum)
        masks = {"sparsemax": sparsemax.Sparsemax, "entmax": sparsemax.Entmax15}
        self.select = masks[mask_type](dim=-1)

    def forward(self, prior, h):
        return self.select(torch.mul(self.bn(self.fc(h)), prior))


class TabNet(torch.nn.Module):
    def __init__(self, n_in, n_out, n_d=4, n_a=4, n_steps=2, gamma=1.3, n_shared=2, n_own=2,
                 size=8, momentum=0.02, mask_type="sparsemax"):
        super().__init__()
        self.n_d, self.gamma = n_d, gamma
        self.bn = BatchNorm1d(n_in, momentum=0.01)
        self.groups = torch.eye(n_in)
        shared = torch.nn.ModuleList()
        for i in range(n_shared):
            shared.append(Linear(n_in if i == 0 else n_d + n_a, 2 * (n_d + n_a), bias=False))
        block = lambda: FeatureBlock(n_in, n_d + n_a, shared, n_own, size, momentum)
        self.splitter = block()
        self.blocks = torch.nn.ModuleList([block() for _ in range(n_steps)])
        self.attend = torch.nn.ModuleList(
            [Attention(n_a, n_in, size, momentum, mask_type) for _ in range(n_steps)]
        )
        self.head = Linear(n_d, n_out, bias=False)
        xavier(self.head, n_d, n_out)

    def steps(self, x):
        """Each step's mask, its feature-level mask and its decision output."""
        x = self.bn(x)
        prior = torch.ones((x.shape[0], x.shape[1])).to(x.device)
        h = self.splitter(x)[:, self.n_d :]
        for block, attend in zip(self.blocks, self.attend):
            mask = attend(prior, h)
            prior = torch.mul(self.gamma - mask, prior)
            feature_mask = torch.matmul(mask, self.groups)
            out = block(torch.mul(feature_mask, x))
            yield mask, feature_mask, ReLU()(out[:, : self.n_d])
            h = out[:, self.n_d :]

    def forward(self, x):
        decisions, neg_entropy = [], 0
        for mask, _, d in self.steps(x):
            neg_entropy += torch.mean(torch.sum(torch.mul(mask, torch.log(mask + 1e-15)), dim=1))
            decisions.append(d)
        summed = torch.sum(torch.stack(decisions, dim=0), dim=0)
        return self.head(summed), neg_entropy / len(decisions)

    def explain(self, x):
        importance, masks = torch.zeros(x.shape).to(x.device), {}
        for step, (_, feature_mask, d) in enumerate(self.steps(x)):
            masks[step] = feature_mask
            importance += torch.mul(feature_mask, torch.sum(d, axis=1).unsqueeze(dim=1))
        return importance, masks


model = TabNet(X_train.shape[1], 3, mask_type=mask_type)
initialize(model)
opt = torch.optim.Adam(model.parameters(), lr=2e-2)
loader = DataLoader(TensorDataset(X_train, y_train), batch_size=16, shuffle=False, drop_last=True)


def train_batch(X, y, sparsity=1e-3, clip=1.0):
    for p in model.parameters():
        p.grad = None
    logits, neg_entropy = model(X.float())
    loss = torch.nn.functional.cross_entropy(logits, y.long()) - sparsity * neg_entropy
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return loss.cpu().detach().numpy().item()


for epoch in range(2):
    model.train()
    for X, y in loader:
        record.append(train_batch(X, y))
    record.append(params_of(model))
    record.append({k: v.numpy().copy() for k, v in model.state_dict().items() if "running" in k})

model.eval()
probabilities = []
for (X,) in DataLoader(TensorDataset(X_train[:12]), batch_size=16, shuffle=False):
    logits, _ = model(X.float())
    probabilities.append(torch.nn.Softmax(dim=1)(logits).cpu().detach().numpy())
record.append(np.vstack(probabilities))
importance, masks = model.explain(X_train[:6].float())
record.append(importance.detach().numpy())
record.append(masks[1].detach().numpy())
'''

TABNET_STEPS = [
    # nothing to clear before a backward: its gradients are the value it returns
    ("        p.grad = None", "        pass"),
    (
        "    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n"
        "    opt.step()",
        "    grads = loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), clip)\n"
        "    opt.step(grads)",
    ),
]


@pytest.mark.parametrize("mask_type", ["sparsemax", "entmax"])
def test_tabnet_trains_as_torch(capsys, mask_type):
    rng = np.random.default_rng(53)
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    states = []

    def initialize(lib):
        def load(module):
            if lib is torch:
                states.append(
                    {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
                )
            else:
                module.load_state_dict(states[0])

        return load

    def sparsemax_module(lib):
        source = SPARSEMAX_SOURCE if lib is torch else ported_imports(SPARSEMAX_SOURCE)
        return types.SimpleNamespace(**run_source(source, lib))

    records, _ = _runs(
        TABNET_SOURCE,
        TABNET_STEPS,
        capsys,
        patch=lambda lib: _nothing(),
        make_initialize=initialize,
        make_sparsemax=sparsemax_module,
        make_X_train=lambda lib: lib.tensor(x),
        make_y_train=lambda lib: lib.tensor(y),
        mask_type=mask_type,
        params_of=params_of,
    )
    ours, theirs = records[1], records[0]
    assert theirs[-1].min() == 0.0  # a sparse mask
    np.testing.assert_allclose(theirs[-1].sum(1), 1.0, rtol=1e-5)
    # the losses closely; the weights, statistics, probabilities and masks to 2e-3: float32's
    # rounding (which moves with the BLAS's threads) through the ghost batches' statistics and
    # the masks' thresholds is followed by Adam's first, sign-like steps (lr 0.02) wherever a
    # gradient is near 0 (in float64 the first gradients agree with torch's to 1e-9)
    losses = [i for i, r in enumerate(theirs) if isinstance(r, float)]
    assert losses == [0, 1, 4, 5]
    assert_records_agree([ours[i] for i in losses], [theirs[i] for i in losses], rtol=5e-5, atol=0)
    assert_records_agree(ours, theirs, rtol=2e-3, atol=2e-3)
