"""Real ports, continued (the harness: ``tests/real_ports.py``): consistency training, a
program written here in the style of cloneofsimo/consistency_models (a small U-Net consistency
model with its loss and multistep sampler, Karras noise levels, a growing discretisation, an
EMA target network and the training loop), run against torch's run of the same code from the
same weights and draws.

What it exercises: a ``lambda`` building ``nn.Sequential`` blocks of ``GroupNorm(groups,
num_channels=c)``, ``SiLU`` and padded convolutions, a ``self.freqs`` table kept as a plain
tensor attribute (``torch.arange(start=, end=, dtype=)``), ``isinstance(t, float)`` times turned
into ``torch.tensor([t] * n, dtype=torch.float32).to(x.device).unsqueeze(1)``,
``F.interpolate(x, scale_factor=0.5)`` and ``(scale_factor=2, mode="nearest")``, indexing an
``nn.Sequential`` by position (``self.time_proj[i](emb)[:, :, None, None]``), the skip and output
scalings by ``t.pow(2)`` and ``.pow(0.5)``; the loss's target from the EMA network under
``torch.no_grad()`` and ``@torch.no_grad()`` sampling with ``math.sqrt(t * t - eps**2) *
torch.randn_like(x)``; the noise levels as ``torch.tensor`` of a list comprehension indexed by an
``(n, 1)`` int64 tensor of ``torch.randint(0, N - 1, (n, 1), device=...)`` (``sigmas[level]``,
``sigmas[level + 1]``); the target network as ``deepcopy(net).eval().requires_grad_(False)
.to(device)`` updated under ``@torch.inference_mode()`` by ``q.mul_(decay).add_(p, alpha=1 -
decay)``; ``AdamW(..., eps=1e-5)`` under ``OneCycleLR`` stepped every batch
(``get_last_lr()[0]``); ``from torch import autocast`` entered for ``"cuda"`` with
``dtype=torch.float16`` on a machine without CUDA (both libraries warn and disable it);
``torch.cuda.amp.GradScaler()``'s ``scale(loss).backward()``, ``step(opt)`` and ``update()``;
``torch.inference_mode()`` around sampling, ``(x * 0.5 + 0.5).clamp(0, 1)`` and
``torch.save(net.state_dict(), ...)`` loaded back by the test.

The data are two batches of random 8x8 images in ``[-1, 1]``; ``save_images`` keeps the samples.
torch's ``torch.cuda.amp.GradScaler()`` disables itself without CUDA while retrograd's keeps
scaling by 2**16 and unscaling before the step (exact powers of two): the losses and weights
agree all the same. The lines changed for the port: the ``import`` lines and the gradient lines
(``grads = loss_scaler.scale(loss).backward()``, ``loss_scaler.step(opt, grads)``).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

CONSISTENCY_SOURCE = """
# -- the model -----------------------------------------------------------------------------------
import math
from typing import List

import torch
import torch.nn as nn
from torch.nn import functional as F

conv_block = lambda c_in, c_out: nn.Sequential(
    nn.GroupNorm(4, num_channels=c_in),
    nn.SiLU(),
    nn.Conv2d(c_in, c_out, 3, padding=1),
    nn.GroupNorm(4, num_channels=c_out),
    nn.SiLU(),
    nn.Conv2d(c_out, c_out, 3, padding=1),
)


class TinyConsistencyNet(nn.Module):
    # f(x, t) = c_skip(t) x + c_out(t) F(x, t), the identity at t = eps by construction
    def __init__(self, channels: int, width: int = 8, eps: float = 0.002) -> None:
        super(TinyConsistencyNet, self).__init__()
        self.eps = eps
        steps = torch.arange(start=0, end=width, dtype=torch.float32) / width
        self.freqs = torch.exp(-math.log(10000.0) * steps)  # a plain tensor, not a buffer
        self.stem = nn.Conv2d(channels, width, 3, padding=1)
        self.encoder = nn.Sequential(*[conv_block(width, width), conv_block(width, 2 * width)])
        self.time_proj = nn.Sequential(
            nn.Linear(2 * width, width), nn.Linear(2 * width, 2 * width)
        )
        self.middle = conv_block(2 * width, 2 * width)
        self.decoder = nn.Sequential(
            *[conv_block(4 * width, width), conv_block(2 * width, width)]
        )
        self.out = nn.Conv2d(width + channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, t) -> torch.Tensor:
        if isinstance(t, float):
            t = torch.tensor([t] * x.shape[0], dtype=torch.float32).to(x.device).unsqueeze(1)
        phase = t.float() * self.freqs[None].to(t.device)
        emb = torch.cat([torch.sin(phase), torch.cos(phase)], dim=-1).to(x.device)

        h, skips = self.stem(x), []
        for i, block in enumerate(self.encoder):
            h = block(h) + self.time_proj[i](emb)[:, :, None, None]
            skips.append(h)
            h = F.interpolate(h, scale_factor=0.5)
        h = self.middle(h) + h
        for block in self.decoder:
            h = F.interpolate(h, scale_factor=2, mode="nearest")
            h = block(torch.cat([h, skips.pop()], dim=1))
        h = self.out(torch.cat([h, x], dim=1))

        shifted = t - self.eps  # sigma_data = 0.5
        c_skip = 0.25 / (shifted.pow(2) + 0.25)
        c_out = 0.5 * shifted / (t.pow(2) + 0.25).pow(0.5)
        return c_skip[:, :, None, None] * x + c_out[:, :, None, None] * h

    def consistency_loss(self, x, noise, t_near, t_far, target_net):
        online = self(x + noise * t_far[:, :, None, None], t_far)
        with torch.no_grad():
            target = target_net(x + noise * t_near[:, :, None, None], t_near)
        return F.mse_loss(online, target)

    @torch.no_grad()
    def sample(self, noise, times: List[float]):
        x = self(noise, times[0])
        for t in times[1:]:
            x = self(x + math.sqrt(t * t - self.eps**2) * torch.randn_like(x), t)
        return x


# -- training ------------------------------------------------------------------------------------
import contextlib
import types
from copy import deepcopy

from torch import autocast
from torch.optim.lr_scheduler import OneCycleLR

cfg = types.SimpleNamespace(
    epochs=2,
    lr=5e-4,
    device=("cuda" if torch.cuda.is_available() else "cpu"),
    amp=True,
    s0=2,
    s1=150,
    mu0=0.9,
    smoothing=0.99,
    sigma_min=0.002,
    sigma_max=80.0,
    rho=7.0,
)


def karras_sigmas(n, lo=cfg.sigma_min, hi=cfg.sigma_max, rho=cfg.rho):
    # n noise levels evenly spaced in sigma ** (1 / rho)
    a, b = lo ** (1 / rho), hi ** (1 / rho)
    return torch.tensor([(a + i / (n - 1) * (b - a)) ** rho for i in range(n)])


def discretisation(progress):
    # the number of noise levels grows from s0 to s1 + 1 over training
    grown = math.sqrt(progress * ((cfg.s1 + 1) ** 2 - cfg.s0**2) + cfg.s0**2)
    return math.ceil(grown - 1) + 1


class TargetNetwork:
    def __init__(self, online):
        self.online = online
        self.net = deepcopy(online).eval().requires_grad_(False).to(cfg.device)

    @torch.inference_mode()
    def follow(self, n_levels):
        decay = math.exp(cfg.s0 * math.log(cfg.mu0) / n_levels)
        for p, q in zip(self.online.parameters(), self.net.parameters()):
            q.mul_(decay).add_(p, alpha=1 - decay)


def draw_samples(net, like, sigmas):
    net.eval()
    with torch.inference_mode():
        out = net.sample(torch.randn_like(like).to(device=cfg.device) * cfg.sigma_max, sigmas)
        save_images((out * 0.5 + 0.5).clamp(0, 1))


def train(batches):
    net = TinyConsistencyNet(1)
    initialize(net)
    net.to(cfg.device)
    opt = torch.optim.AdamW(net.parameters(), eps=1e-5)
    schedule = OneCycleLR(opt, max_lr=cfg.lr, steps_per_epoch=len(batches), epochs=cfg.epochs)
    loss_scaler = torch.cuda.amp.GradScaler()
    target = TargetNetwork(net)
    seen, total = 0, cfg.epochs * len(batches) * batches[0].shape[0]
    for epoch in range(cfg.epochs):
        n_levels = discretisation(seen / total)
        sigmas = karras_sigmas(n_levels).to(cfg.device)
        net.train()
        smoothed = None
        for x in batches:
            opt.zero_grad()
            x = x.to(cfg.device)
            noise = torch.randn_like(x)
            level = torch.randint(0, n_levels - 1, (x.shape[0], 1), device=cfg.device)
            with autocast("cuda", dtype=torch.float16) if cfg.amp else contextlib.nullcontext():
                loss = net.consistency_loss(x, noise, sigmas[level], sigmas[level + 1], target.net)
            loss_scaler.scale(loss).backward() if cfg.amp else loss.backward()
            if cfg.amp:
                loss_scaler.step(opt)
                loss_scaler.update()
            else:
                opt.step()
            schedule.step()
            target.follow(n_levels)
            seen += len(x)
            value = loss.item()
            if smoothed is None:
                smoothed = value
            smoothed = cfg.smoothing * smoothed + (1 - cfg.smoothing) * value
            record.append([value, smoothed, schedule.get_last_lr()[0], n_levels])
        draw_samples(net, x, [80.0, 20.0, 5.0])
        draw_samples(net, x, [80.0])
    torch.save(net.state_dict(), f"{outdir}/consistency.pth")
    record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})
    record.append({k: v.detach().numpy() for k, v in target.net.state_dict().items()})


train(get_batches())
"""

CONSISTENCY_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("from torch import autocast\n", "from retrograd import autocast\n"),
    (
        "            loss_scaler.scale(loss).backward() if cfg.amp else loss.backward()\n",
        "            grads = loss_scaler.scale(loss).backward() if cfg.amp else loss.backward()\n",
    ),
    ("                loss_scaler.step(opt)\n", "                loss_scaler.step(opt, grads)\n"),
]


class SilentTqdm:
    def __init__(self, iterable=()):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def set_description(self, text):
        pass


def test_consistency_training_and_multistep_sampling_as_torch(tmp_path, capsys):
    initialize, records = initializer(), []
    rng = np.random.default_rng(375)
    images = rng.uniform(-1, 1, (2, 4, 1, 8, 8)).astype(np.float32)
    torch.manual_seed(375)
    for lib in (torch, rg):
        record = []
        outdir = tmp_path / lib.__name__
        outdir.mkdir()
        batches = [lib.tensor(x) for x in images]
        text = CONSISTENCY_SOURCE if lib is torch else port(CONSISTENCY_SOURCE, CONSISTENCY_STEPS)
        text = text.replace("from torch.", "from retrograd.") if lib is rg else text
        with SharedDraws(lib, 375), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_source(
                text,
                lib,
                record=record,
                initialize=initialize,
                outdir=str(outdir),
                get_batches=lambda batches=batches: batches,
                save_images=lambda images, record=record: record.append(images.numpy()),
            )
        # autocast("cuda") without CUDA: both libraries warn and compute in float32
        assert any("CUDA is not available" in str(w.message) for w in caught)
        saved = lib.load(str(outdir / "consistency.pth"))
        record.append({k: v.numpy() for k, v in saved.items()})
        records.append(record)
    theirs, ours = records
    assert capsys.readouterr().out == ""
    assert len(theirs) == 2 * (2 + 2) + 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
