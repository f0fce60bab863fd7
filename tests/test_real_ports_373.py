"""Real ports, continued (the harness: ``tests/real_ports.py``): a denoising diffusion program
written here in the style of ermongroup/ddim (its U-Net, weight EMA, optimizer factory,
noise-prediction loss, DDIM and DDPM samplers, data scaling, beta schedule and runner), small:
trained, checkpointed, resumed from the checkpoint and sampled by the generalized (DDIM) and
the noisy ancestral (DDPM) steps, against torch's run of the same code from the same weights
and draws.

What it exercises: the U-Net (``GroupNorm(num_groups=32, ..., eps=1e-6)``, swish
``x * torch.sigmoid(x)``, a sinusoidal embedding of ``steps.float()[:, None]``,
``torch.nn.functional.pad(x, (0, 1, 0, 1), mode="constant", value=0)`` before a stride-2
convolution, ``interpolate(scale_factor=2.0, mode="nearest")``, single-head attention by
``torch.bmm`` of ``reshape``/``permute``-d 1x1 convolutions times ``int(c) ** (-0.5)``,
``nn.Module()`` used as a namespace holding ``ModuleList``s, ``self.up.insert(0, stage)``,
skips by ``hs.pop()``); ``nn.DataParallel`` (its ``module.`` keys), the weight EMA
(``isinstance(module, nn.DataParallel)``, ``p.data.clone()``, ``self.shadow[name].data = ...``
rebinding a tensor's ``data``, ``p.data.copy_``); the loss's ``(1 - betas).cumprod(dim=0)
.index_select(0, t).view(-1, 1, 1, 1)`` and ``.square().sum(dim=(1, 2, 3)).mean(dim=0)``;
antithetic steps ``torch.cat([t, T - t - 1], dim=0)[:n]`` of ``torch.randint(low=0, high=...,
size=(n // 2 + 1,))``; ``clip_grad_norm_`` inside ``try``; ``torch.save`` of a list holding the
model's and the optimizer's state dicts, the epoch, the step and the EMA shadow, then
``torch.load``, ``states[1]["param_groups"][0]["eps"] = ...``, ``optimizer.load_state_dict``
and ``load_state_dict(states[0], strict=True)``; the samplers' cumulative alphas by
``torch.cat([torch.zeros(1), betas])`` and ``index_select(0, t + 1)``, ``torch.ones(n) * i``,
``kwargs.get("eta", 0)``, ``1 - (t == 0).float()``, ``beta_t.log()``; the step sequences
``range(0, T, skip)`` and ``np.linspace(...) ** 2`` cast by ``int``; ``slerp`` by
``torch.acos``/``torch.norm`` over ``torch.arange(0.0, 1.01, 0.1)``.

Stand-ins: the dataset is random 8x8 images with labels (shuffled by one seeded permutation
stream in both runs), ``torchvision.utils.save_image`` keeps the images it is given, the
``tb_logger`` keeps the losses, and the samplers are imported from a stand-in
``functions.denoising`` module; the sizes are small (``ch=32``, the least ``GroupNorm(32,
...)`` allows; 20 diffusion steps, 2 sampling steps). The lines changed for the port: the
``import`` lines and the gradient lines (``grads = loss.backward()``, ``clip_grad_norm_(grads,
...)``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import argparse
import os
import sys
import types

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

DDIM_SOURCE = """
import logging
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as loaders


# -- the noise-predicting U-Net ------------------------------------------------------------------
def sinusoidal_embedding(steps, dim):
    "(n,) diffusion steps -> (n, dim): sines then cosines at geometric frequencies."
    assert steps.dim() == 1
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    angles = steps.float()[:, None] * freqs.to(device=steps.device)[None, :]
    out = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2 == 1:
        out = torch.nn.functional.pad(out, (0, 1, 0, 0))
    return out


def swish(x):
    return x * torch.sigmoid(x)


def group_norm(channels):
    return torch.nn.GroupNorm(num_groups=32, num_channels=channels, eps=1e-6, affine=True)


class Up(nn.Module):
    def __init__(self, channels, conv):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, stride=1, padding=1) if conv else None

    def forward(self, x):
        x = torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
        return x if self.conv is None else self.conv(x)


class Down(nn.Module):
    def __init__(self, channels, conv):
        super().__init__()
        # stride 2 with the padding on the right and bottom only, done by hand
        self.conv = torch.nn.Conv2d(channels, channels, 3, stride=2, padding=0) if conv else None

    def forward(self, x):
        if self.conv is None:
            return torch.nn.functional.avg_pool2d(x, kernel_size=2, stride=2)
        x = torch.nn.functional.pad(x, (0, 1, 0, 1), mode="constant", value=0)
        return self.conv(x)


class TimeResBlock(nn.Module):
    "norm, swish, conv, + projected time embedding, norm, swish, dropout, conv; 1x1 skip."

    def __init__(self, n_in, n_out, temb_ch, dropout):
        super().__init__()
        self.n_in, self.n_out = n_in, n_out
        self.norm_a = group_norm(n_in)
        self.conv_a = torch.nn.Conv2d(n_in, n_out, 3, stride=1, padding=1)
        self.time_proj = torch.nn.Linear(temb_ch, n_out)
        self.norm_b = group_norm(n_out)
        self.drop = torch.nn.Dropout(dropout)
        self.conv_b = torch.nn.Conv2d(n_out, n_out, 3, stride=1, padding=1)
        if n_in != n_out:
            self.skip_proj = torch.nn.Conv2d(n_in, n_out, 1, stride=1, padding=0)

    def forward(self, x, temb):
        h = self.conv_a(swish(self.norm_a(x)))
        h = h + self.time_proj(swish(temb))[:, :, None, None]
        h = self.conv_b(self.drop(swish(self.norm_b(h))))
        skip = x if self.n_in == self.n_out else self.skip_proj(x)
        return skip + h


class SpatialAttention(nn.Module):
    "Single-head self-attention over the pixels, with 1x1 convolutions as projections."

    def __init__(self, channels):
        super().__init__()
        self.norm = group_norm(channels)
        self.to_q, self.to_k, self.to_v, self.to_out = [
            torch.nn.Conv2d(channels, channels, 1, stride=1, padding=0) for _ in range(4)
        ]

    def forward(self, x):
        y = self.norm(x)
        b, c, h, w = x.shape
        q = self.to_q(y).reshape(b, c, h * w).permute(0, 2, 1)  # (b, hw, c)
        k = self.to_k(y).reshape(b, c, h * w)  # (b, c, hw)
        weights = torch.bmm(q, k) * (int(c) ** (-0.5))  # [b, query, key]
        weights = torch.nn.functional.softmax(weights, dim=2)
        v = self.to_v(y).reshape(b, c, h * w)
        out = torch.bmm(v, weights.permute(0, 2, 1)).reshape(b, c, h, w)
        return x + self.to_out(out)


class UNet(nn.Module):
    def __init__(self, config):
        super().__init__()
        m = config.model
        ch, mults = m.ch, tuple(m.ch_mult)
        self.ch, self.levels, self.depth = ch, len(mults), m.num_res_blocks
        temb_ch = 4 * ch
        block = lambda n_in, n_out: TimeResBlock(n_in, n_out, temb_ch, m.dropout)
        self.temb = nn.Module()  # a bare Module as a namespace
        self.temb.dense = nn.ModuleList(
            [torch.nn.Linear(ch, temb_ch), torch.nn.Linear(temb_ch, temb_ch)]
        )
        self.conv_in = torch.nn.Conv2d(m.in_channels, ch, 3, stride=1, padding=1)

        res, widths, width = config.data.image_size, [ch], ch
        self.down = nn.ModuleList()
        for level, mult in enumerate(mults):
            stage = nn.Module()
            stage.res, stage.attn = nn.ModuleList(), nn.ModuleList()
            for _ in range(self.depth):
                stage.res.append(block(width, ch * mult))
                width = ch * mult
                widths.append(width)
                if res in m.attn_resolutions:
                    stage.attn.append(SpatialAttention(width))
            if level != self.levels - 1:
                stage.down = Down(width, m.resamp_with_conv)
                res //= 2
                widths.append(width)
            self.down.append(stage)

        self.mid = nn.Module()
        self.mid.res_1 = block(width, width)
        self.mid.attn = SpatialAttention(width)
        self.mid.res_2 = block(width, width)

        self.up = nn.ModuleList()
        for level in reversed(range(self.levels)):
            stage = nn.Module()
            stage.res, stage.attn = nn.ModuleList(), nn.ModuleList()
            for _ in range(self.depth + 1):
                stage.res.append(block(width + widths.pop(), ch * mults[level]))
                width = ch * mults[level]
                if res in m.attn_resolutions:
                    stage.attn.append(SpatialAttention(width))
            if level != 0:
                stage.up = Up(width, m.resamp_with_conv)
                res *= 2
            self.up.insert(0, stage)  # kept in the order of the levels

        self.norm_out = group_norm(width)
        self.conv_out = torch.nn.Conv2d(width, m.out_ch, 3, stride=1, padding=1)

    def forward(self, x, t):
        temb = self.temb.dense[1](swish(self.temb.dense[0](sinusoidal_embedding(t, self.ch))))
        hs = [self.conv_in(x)]
        for level, stage in enumerate(self.down):
            for i, res_block in enumerate(stage.res):
                h = res_block(hs[-1], temb)
                hs.append(stage.attn[i](h) if len(stage.attn) > 0 else h)
            if level != self.levels - 1:
                hs.append(stage.down(hs[-1]))
        h = self.mid.res_2(self.mid.attn(self.mid.res_1(hs[-1], temb)), temb)
        for level in reversed(range(self.levels)):
            stage = self.up[level]
            for i, res_block in enumerate(stage.res):
                h = res_block(torch.cat([h, hs.pop()], dim=1), temb)
                if len(stage.attn) > 0:
                    h = stage.attn[i](h)
            if level != 0:
                h = stage.up(h)
        return self.conv_out(swish(self.norm_out(h)))


# -- an exponential moving average of the weights --------------------------------------------------
def unwrap(module):
    return module.module if isinstance(module, nn.DataParallel) else module


class WeightEMA:
    def __init__(self, rate=0.999):
        self.rate, self.shadow = rate, {}

    def register(self, module):
        for name, p in unwrap(module).named_parameters():
            if p.requires_grad:
                self.shadow[name] = p.data.clone()

    def update(self, module):
        for name, p in unwrap(module).named_parameters():
            if p.requires_grad:
                # rebinds the shadow tensor's data (not an in-place update)
                old = self.shadow[name].data
                self.shadow[name].data = self.rate * old + (1.0 - self.rate) * p.data

    def copy_to(self, module):
        for name, p in unwrap(module).named_parameters():
            if p.requires_grad:
                p.data.copy_(self.shadow[name].data)

    def state_dict(self):
        return self.shadow

    def load_state_dict(self, shadow):
        self.shadow = shadow


def make_optimizer(config, params):
    o = config.optim
    if o.optimizer == "Adam":
        return optim.Adam(params, lr=o.lr, betas=(o.beta1, 0.999), eps=o.eps,
                          weight_decay=o.weight_decay, amsgrad=o.amsgrad)
    if o.optimizer == "SGD":
        return optim.SGD(params, lr=o.lr, momentum=0.9)
    raise NotImplementedError(o.optimizer)


def epsilon_loss(model, x0, t, noise, betas):
    "Sum over pixels of the squared error of the predicted noise, averaged over the batch."
    abar = (1 - betas).cumprod(dim=0).index_select(0, t).view(-1, 1, 1, 1)
    xt = abar.sqrt() * x0 + (1.0 - abar).sqrt() * noise
    return (noise - model(xt, t.float())).square().sum(dim=(1, 2, 3)).mean(dim=0)


# -- the samplers ----------------------------------------------------------------------------------
def alpha_bar(betas, t):
    "The cumulative alpha at step t; step -1 is the clean image (alpha bar 1)."
    padded = torch.cat([torch.zeros(1).to(betas.device), betas], dim=0)
    return (1 - padded).cumprod(dim=0).index_select(0, t + 1).view(-1, 1, 1, 1)


def ddim_sample(x, seq, model, betas, **kwargs):
    eta = kwargs.get("eta", 0)
    previous = [-1] + list(seq[:-1])
    xs, x0s = [x], []
    with torch.no_grad():
        for i, j in zip(reversed(seq), reversed(previous)):
            t, t_prev = torch.ones(x.size(0)) * i, torch.ones(x.size(0)) * j
            a_t, a_prev = alpha_bar(betas, t.long()), alpha_bar(betas, t_prev.long())
            eps = model(xs[-1], t)
            x0 = (xs[-1] - (1 - a_t).sqrt() * eps) / a_t.sqrt()
            x0s.append(x0)
            sigma = eta * ((1 - a_t / a_prev) * (1 - a_prev) / (1 - a_t)).sqrt()
            direction = ((1 - a_prev) - sigma**2).sqrt()
            xs.append(a_prev.sqrt() * x0 + sigma * torch.randn_like(x) + direction * eps)
    return xs, x0s


def ancestral_sample(x, seq, model, betas, **kwargs):
    previous = [-1] + list(seq[:-1])
    xs, x0s = [x], []
    with torch.no_grad():
        for i, j in zip(reversed(seq), reversed(previous)):
            t, t_prev = torch.ones(x.size(0)) * i, torch.ones(x.size(0)) * j
            a_t, a_prev = alpha_bar(betas, t.long()), alpha_bar(betas, t_prev.long())
            beta_t = 1 - a_t / a_prev
            xt = xs[-1]
            eps = model(xt, t.float())
            x0 = (1.0 / a_t).sqrt() * xt - (1.0 / a_t - 1).sqrt() * eps
            x0 = torch.clamp(x0, -1, 1)
            x0s.append(x0)
            mean = a_prev.sqrt() * beta_t * x0 + (1 - beta_t).sqrt() * (1 - a_prev) * xt
            mean = mean / (1.0 - a_t)
            not_last = (1 - (t == 0).float()).view(-1, 1, 1, 1)
            sd = torch.exp(0.5 * beta_t.log())
            xs.append(mean + not_last * sd * torch.randn_like(x))
    return xs, x0s


# the runner imports them by name, as from a module of the project
functions_denoising.ddim_sample = ddim_sample
functions_denoising.ancestral_sample = ancestral_sample


# -- data scaling and the noise schedule -----------------------------------------------------------
def to_model_range(config, x):
    return 2 * x - 1.0 if config.data.rescaled else x


def to_image_range(config, x):
    if config.data.rescaled:
        x = (x + 1.0) / 2.0
    return torch.clamp(x, 0.0, 1.0)


def beta_schedule(kind, *, start, end, steps):
    if kind == "linear":
        betas = np.linspace(start, end, steps, dtype=np.float64)
    elif kind == "quad":
        betas = np.linspace(start**0.5, end**0.5, steps, dtype=np.float64) ** 2
    elif kind == "const":
        betas = end * np.ones(steps, dtype=np.float64)
    else:
        raise NotImplementedError(kind)
    assert betas.shape == (steps,)
    return betas


def step_sequence(args, total):
    if args.skip_type == "uniform":
        return range(0, total, total // args.timesteps)
    if args.skip_type == "quad":
        return [int(s) for s in list(np.linspace(0, np.sqrt(total * 0.8), args.timesteps) ** 2)]
    raise NotImplementedError(args.skip_type)


class Runner:
    def __init__(self, args, config):
        self.args, self.config = args, config
        self.device = torch.device("cpu")
        d = config.diffusion
        betas = beta_schedule(d.beta_schedule, start=d.beta_start, end=d.beta_end,
                              steps=d.num_diffusion_timesteps)
        self.betas = torch.from_numpy(betas).float().to(self.device)
        self.num_timesteps = self.betas.shape[0]
        if config.model.var_type == "fixedlarge":
            self.logvar = self.betas.log()
        else:
            abar = (1.0 - self.betas).cumprod(dim=0)
            abar_prev = torch.cat([torch.ones(1), abar[:-1]], dim=0)
            self.logvar = (self.betas * (1.0 - abar_prev) / (1.0 - abar)).clamp(min=1e-20).log()

    def checkpoint(self, name):
        return os.path.join(self.args.log_path, name)

    def train(self):
        config, args = self.config, self.args
        dataset, _ = get_dataset(args, config)
        loader = loaders.DataLoader(dataset, batch_size=config.training.batch_size, shuffle=True,
                                 num_workers=config.data.num_workers)
        model = UNet(config)
        initialize(model)
        model = torch.nn.DataParallel(model.to(self.device))
        optimizer = make_optimizer(config, model.parameters())
        ema = WeightEMA(rate=config.model.ema_rate) if config.model.ema else None
        if ema is not None:
            ema.register(model)

        first_epoch, step = 0, 0
        if args.resume_training:
            states = torch.load(self.checkpoint("ckpt.pth"))
            model.load_state_dict(states[0])  # the module. keys of DataParallel
            states[1]["param_groups"][0]["eps"] = config.optim.eps
            optimizer.load_state_dict(states[1])  # with the eps just set
            first_epoch, step = states[2], states[3]
            if ema is not None:
                ema.load_state_dict(states[4])

        for epoch in range(first_epoch, config.training.n_epochs):
            started = time.time()
            for i, (x, _) in enumerate(loader):
                n = x.size(0)
                model.train()
                step += 1
                x = to_model_range(config, x.to(self.device))
                noise = torch.randn_like(x)
                # antithetic steps: t and T - 1 - t in one batch
                T = self.num_timesteps
                t = torch.randint(low=0, high=T, size=(n // 2 + 1,)).to(self.device)
                t = torch.cat([t, T - t - 1], dim=0)[:n]
                loss = epsilon_loss(model, x, t, noise, self.betas)
                config.tb_logger.add_scalar("loss", loss, global_step=step)
                logging.info(f"step {step}: loss {loss.item():.4f} ({time.time() - started:.2f} s)")
                optimizer.zero_grad()
                loss.backward()
                try:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.optim.grad_clip)
                except Exception:
                    pass
                optimizer.step()
                if ema is not None:
                    ema.update(model)
                if step == 1 or step % config.training.snapshot_freq == 0:
                    states = [model.state_dict(), optimizer.state_dict(), epoch, step]
                    if ema is not None:
                        states.append(ema.state_dict())
                    torch.save(states, self.checkpoint(f"ckpt_{step}.pth"))
                    torch.save(states, self.checkpoint("ckpt.pth"))

    def sample(self):
        config = self.config
        states = torch.load(self.checkpoint("ckpt.pth"), map_location=config.device)
        model = torch.nn.DataParallel(UNet(config).to(self.device))
        model.load_state_dict(states[0], strict=True)  # every key
        if config.model.ema:
            ema = WeightEMA(rate=config.model.ema_rate)
            ema.register(model)
            ema.load_state_dict(states[-1])
            ema.copy_to(model)
        model.eval()
        if self.args.interpolation:
            self.interpolate(model)
        elif self.args.sequence:
            self.sequence(model)
        else:
            raise NotImplementedError("no sampling mode chosen")

    def noise(self, n):
        c, s = self.config.data.channels, self.config.data.image_size
        return torch.randn(n, c, s, s, device=self.device)

    def sequence(self, model):
        with torch.no_grad():
            _, x0s = self.denoise(self.noise(8), model, last=False)
        for i, x0 in enumerate(x0s):
            x0 = to_image_range(self.config, x0)
            for j in range(x0.size(0)):
                tvu.save_image(x0[j], os.path.join(self.args.image_folder, f"{j}_{i}.png"))

    def interpolate(self, model):
        def slerp(a, b, w):
            angle = torch.acos(torch.sum(a * b) / (torch.norm(a) * torch.norm(b)))
            return (torch.sin((1 - w) * angle) * a + torch.sin(w * angle) * b) / torch.sin(angle)

        a, b = self.noise(1), self.noise(1)
        weights = torch.arange(0.0, 1.01, 0.1).to(a.device)
        z = torch.cat([slerp(a, b, weights[i]) for i in range(weights.size(0))], dim=0)
        with torch.no_grad():
            images = [self.denoise(z[i : i + 8], model) for i in range(0, z.size(0), 8)]
        images = to_image_range(self.config, torch.cat(images, dim=0))
        for i in range(images.size(0)):
            tvu.save_image(images[i], os.path.join(self.args.image_folder, f"{i}.png"))

    def denoise(self, x, model, last=True):
        seq = step_sequence(self.args, self.num_timesteps)
        if self.args.sample_type == "generalized":  # DDIM, eta-scaled noise
            from functions.denoising import ddim_sample

            out = ddim_sample(x, seq, model, self.betas, eta=self.args.eta)
        elif self.args.sample_type == "ddpm_noisy":  # ancestral, with fresh noise
            from functions.denoising import ancestral_sample

            out = ancestral_sample(x, seq, model, self.betas)
        else:
            raise NotImplementedError(self.args.sample_type)
        return out[0][-1] if last else out


# -- the driver: train one epoch, resume for a second, then sample both ways ----------------------
config, args = make_config(torch), make_args()
config.training.n_epochs = 1
Runner(args, config).train()
args.resume_training, config.training.n_epochs = True, 2
runner = Runner(args, config)
runner.train()
record.append(runner.logvar.numpy())  # log of the betas
saved = torch.load(runner.checkpoint("ckpt.pth"))
record.append({k: v.numpy() for k, v in saved[0].items()})
record.append({k: v.numpy() for k, v in saved[4].items()})
record.append([saved[2], saved[3], saved[1]["state"][0]["step"].item()])
args.sequence, args.eta = True, 0.5
args.sample_type, args.skip_type = "generalized", "uniform"
runner.sample()
args.interpolation, args.sequence = True, False
args.skip_type, args.sample_type = "quad", "ddpm_noisy"
runner.sample()
"""

CLIP = "torch.nn.utils.clip_grad_norm_("
DDIM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n"
        "import torch.utils.data as loaders\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n"
        "import retrograd.utils.data as loaders\n",
    ),
    ("                loss.backward()\n", "                grads = loss.backward()\n"),
    (CLIP + "model.parameters(), ", CLIP + "grads, model.parameters(), "),
    ("                optimizer.step()\n", "                optimizer.step(grads)\n"),
]


def namespace(**sections):
    return argparse.Namespace(
        **{k: argparse.Namespace(**v) if isinstance(v, dict) else v for k, v in sections.items()}
    )


class Keeper:
    """``tb_logger`` and ``torchvision.utils`` stand-ins: each keeps what it is handed."""

    def __init__(self, record):
        self.record = record

    def add_scalar(self, name, value, global_step):
        self.record.append(name)
        self.record.append([float(value), global_step])

    def save_image(self, image, path):
        self.record.append(os.path.basename(path))
        self.record.append(image.numpy())


@pytest.fixture
def shared_permutations(monkeypatch):
    """``DataLoader(shuffle=True)`` of both libraries permuting by one seeded stream."""

    def for_lib(lib, seed):
        rng = np.random.default_rng(seed)

        def randperm(n, generator=None, **_):
            return lib.tensor(rng.permutation(n), dtype=lib.int64)

        monkeypatch.setattr(torch if lib is torch else rg_sampler, "randperm", randperm)

    return for_lib


def test_ddim_trains_resumes_and_samples_ddim_and_ddpm_as_torch(
    tmp_path, monkeypatch, capsys, shared_permutations
):
    initialize, records = initializer(), []
    rng = np.random.default_rng(373)
    images = rng.uniform(0.0, 1.0, (4, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, 4)
    torch.manual_seed(373)
    for lib in (torch, rg):
        record = []
        keeper = Keeper(record)
        log_path = tmp_path / lib.__name__
        log_path.mkdir()

        def make_config(lib, keeper=keeper):
            return namespace(
                data=dict(
                    dataset="TOY",
                    image_size=8,
                    channels=1,
                    num_workers=0,
                    rescaled=True,
                    logit_transform=False,
                    uniform_dequantization=False,
                    gaussian_dequantization=False,
                    random_flip=False,
                ),
                model=dict(
                    type="simple",
                    in_channels=1,
                    out_ch=1,
                    ch=32,
                    ch_mult=[1, 2],
                    num_res_blocks=1,
                    attn_resolutions=[4],
                    dropout=0.0,
                    var_type="fixedlarge",
                    ema_rate=0.9,
                    ema=True,
                    resamp_with_conv=True,
                ),
                diffusion=dict(
                    beta_schedule="linear",
                    beta_start=0.0001,
                    beta_end=0.02,
                    num_diffusion_timesteps=20,
                ),
                training=dict(batch_size=4, n_epochs=1, snapshot_freq=1),
                sampling=dict(batch_size=8),
                optim=dict(
                    weight_decay=0.0,
                    optimizer="Adam",
                    lr=2e-4,
                    beta1=0.9,
                    amsgrad=False,
                    eps=1e-8,
                    grad_clip=1.0,
                ),
                tb_logger=keeper,
                device="cpu",
            )

        def make_args(log_path=log_path):
            return argparse.Namespace(
                log_path=str(log_path),
                image_folder=str(log_path),
                resume_training=False,
                use_pretrained=False,
                fid=False,
                interpolation=False,
                sequence=False,
                sample_type="generalized",
                skip_type="uniform",
                timesteps=2,
                eta=0.0,
            )

        def get_dataset(args, config, lib=lib):
            dataset = lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels))
            return dataset, None

        functions_denoising = types.SimpleNamespace()
        monkeypatch.setitem(sys.modules, "functions.denoising", functions_denoising)
        text = DDIM_SOURCE
        if lib is rg:
            text = port(text, DDIM_STEPS)
        shared_permutations(lib, 373)
        with SharedDraws(lib, 373):
            run_source(
                text,
                lib,
                record=record,
                initialize=initialize,
                make_config=make_config,
                make_args=make_args,
                get_dataset=get_dataset,
                tvu=keeper,
                functions_denoising=functions_denoising,
            )
        records.append(record)
    theirs, ours = records
    assert capsys.readouterr().out == ""
    # epoch 0 runs again on resuming (the checkpoint keeps the epoch it was saved in)
    assert sum(1 for r in theirs if isinstance(r, str) and r == "loss") == 3
    # A 32-channel residual block normalises conv_a's output by GroupNorm(32, 32), one channel
    # a group: conv_a's bias and time_proj's bias (constant over a channel) cancel, so their
    # true gradient is zero and Adam moves them by the rounding noise; so do the biases of the
    # last block's outputs (conv_b, skip_proj), which norm_out (GroupNorm(32, 32)) normalises.
    cancelled = [
        f"{prefix}{block}.{layer}.bias"
        for prefix in ("", "module.")
        for block in ("down.0.res.0", "up.0.res.0", "up.0.res.1")
        for layer in ("conv_a", "time_proj")
    ] + [
        f"{prefix}up.0.res.1.{layer}.bias"
        for prefix in ("", "module.")
        for layer in ("conv_b", "skip_proj")
    ]
    # atol: a quarter of one Adam step (lr 2e-4); an element whose three gradients nearly cancel
    # in Adam's moments moves by the float32 rounding of its convolution's sums (one of 36864 in
    # the middle block's second convolution weight by 3.7e-5)
    assert_records_agree(ours, theirs, rtol=2e-4, atol=5e-5, skip=cancelled)
