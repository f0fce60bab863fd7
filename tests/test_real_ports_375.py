# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them: long lines, trailing blanks)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
consistency training as cloneofsimo/consistency_models writes it (``consistency_models/unet.py``'s
``ConsistencyModel`` with its ``loss`` and multistep ``sample``, ``consistency_models/utils.py``'s
``kerras_boundaries``, ``main.py``'s config, ``Nk``, ``EMA``, ``sample`` and ``train``), small,
against torch's run of the same code from the same weights and draws.

What it exercises: a ``lambda`` building ``nn.Sequential`` blocks of ``GroupNorm(32,
num_channels=ic)``, a ``self.freqs`` table kept as a plain tensor attribute, ``isinstance(t,
float)`` times turned into ``torch.tensor([t] * x.shape[0], dtype=torch.float32).unsqueeze(1)``,
``F.interpolate(x, scale_factor=0.5)`` and ``(scale_factor=2, mode="nearest")``, indexing an
``nn.Sequential`` by position (``self.time_downs[idx](t_emb)[:, :, None, None]``), the skip and
output scalings ``c_skip_t``/``c_out_t`` by ``t.pow(2)`` and ``.pow(0.5)``; the loss's target
from the EMA model under ``torch.no_grad()`` and ``@torch.no_grad()`` sampling with
``math.sqrt(t**2 - self.eps**2) * torch.randn_like(x)``; ``main.py``'s ``Nk`` schedule,
``kerras_boundaries`` as ``torch.tensor`` of a list comprehension, ``boundaries[t]`` and
``boundaries[t + 1]`` indexed by an ``(n, 1)`` int64 tensor of ``torch.randint(0, N - 1,
(x.shape[0], 1), device=...)``, ``EMA``'s ``deepcopy(model).eval().requires_grad_(False)
.to(device)`` updated under ``@torch.inference_mode()`` by ``ema_p.mul_(mu).add_(p, alpha=1 -
mu)``, ``AdamW(..., eps=1e-5)`` under ``OneCycleLR`` stepped every batch
(``scheduler.get_last_lr()[0]``), ``from torch import autocast`` entered for ``"cuda"`` with
``dtype=torch.float16`` on a machine without CUDA (both libraries warn and disable it),
``torch.cuda.amp.GradScaler()``'s ``scale(loss).backward()``, ``step(optim)`` and ``update()``,
``torch.inference_mode()`` around sampling, ``(xh * 0.5 + 0.5).clamp(0, 1)``, and
``torch.save(model.state_dict(), ...)``.

Stand-ins: ``get_data`` is a list of two batches of random 8x8 digits in ``[-1, 1]``; ``tqdm``
prints nothing; ``make_grid``/``save_image`` keep the images; wandb is off (``wandb=False``);
the sizes are small (``D=32``, the least ``GroupNorm(32, ...)`` allows; three epochs of two
batches, the repository's loop skipping the first). torch's ``torch.cuda.amp.GradScaler()``
disables itself without CUDA while retrograd's keeps scaling by 2**16 and unscaling before the
step (exact powers of two): the losses and weights agree all the same. The lines changed for
the port: the ``import`` lines and the gradient lines (``grads = scaler.scale(loss).backward()``,
``scaler.step(optim, grads)``).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

CONSISTENCY_SOURCE = '''
# -- consistency_models/unet.py --------------------------------------------------------------------
import math
from typing import List


import torch
import torch.nn as nn
import torch.nn.functional as F


blk = lambda ic, oc: nn.Sequential(
    nn.GroupNorm(32, num_channels=ic),
    nn.SiLU(),
    nn.Conv2d(ic, oc, 3, padding=1),
    nn.GroupNorm(32, num_channels=oc),
    nn.SiLU(),
    nn.Conv2d(oc, oc, 3, padding=1),
)


class ConsistencyModel(nn.Module):
    """
    This is ridiculous Unet structure, hey but it works!
    """

    def __init__(self, n_channel: int, eps: float = 0.002, D: int = 128) -> None:
        super(ConsistencyModel, self).__init__()

        self.eps = eps

        self.freqs = torch.exp(
            -math.log(10000) * torch.arange(start=0, end=D, dtype=torch.float32) / D
        )

        self.down = nn.Sequential(
            *[
                nn.Conv2d(n_channel, D, 3, padding=1),
                blk(D, D),
                blk(D, 2 * D),
                blk(2 * D, 2 * D),
            ]
        )

        self.time_downs = nn.Sequential(
            nn.Linear(2 * D, D),
            nn.Linear(2 * D, D),
            nn.Linear(2 * D, 2 * D),
            nn.Linear(2 * D, 2 * D),
        )

        self.mid = blk(2 * D, 2 * D)

        self.up = nn.Sequential(
            *[
                blk(2 * D, 2 * D),
                blk(2 * 2 * D, D),
                blk(D, D),
                nn.Conv2d(2 * D, 2 * D, 3, padding=1),
            ]
        )
        self.last = nn.Conv2d(2 * D + n_channel, n_channel, 3, padding=1)

    def forward(self, x, t) -> torch.Tensor:
        if isinstance(t, float):
            t = (
                torch.tensor([t] * x.shape[0], dtype=torch.float32)
                .to(x.device)
                .unsqueeze(1)
            )
        # time embedding
        args = t.float() * self.freqs[None].to(t.device)
        t_emb = torch.cat([torch.sin(args), torch.cos(args)], dim=-1).to(x.device)

        x_ori = x

        # perform F(x, t)
        hs = []
        for idx, layer in enumerate(self.down):
            if idx % 2 == 1:
                x = layer(x) + x
            else:
                x = layer(x)
                x = F.interpolate(x, scale_factor=0.5)
                hs.append(x)

            x = x + self.time_downs[idx](t_emb)[:, :, None, None]

        x = self.mid(x)

        for idx, layer in enumerate(self.up):
            if idx % 2 == 0:
                x = layer(x) + x
            else:
                x = torch.cat([x, hs.pop()], dim=1)
                x = F.interpolate(x, scale_factor=2, mode="nearest")
                x = layer(x)

        x = self.last(torch.cat([x, x_ori], dim=1))

        t = t - self.eps
        c_skip_t = 0.25 / (t.pow(2) + 0.25)
        c_out_t = 0.25 * t / ((t + self.eps).pow(2) + 0.25).pow(0.5)

        return c_skip_t[:, :, None, None] * x_ori + c_out_t[:, :, None, None] * x

    def loss(self, x, z, t1, t2, ema_model):
        x2 = x + z * t2[:, :, None, None]
        x2 = self(x2, t2)

        with torch.no_grad():
            x1 = x + z * t1[:, :, None, None]
            x1 = ema_model(x1, t1)

        return F.mse_loss(x1, x2)

    @torch.no_grad()
    def sample(self, x, ts: List[float]):
        x = self(x, ts[0])

        for t in ts[1:]:
            z = torch.randn_like(x)
            x = x + math.sqrt(t**2 - self.eps**2) * z
            x = self(x, t)

        return x

# -- consistency_models/utils.py -------------------------------------------------------------------
def kerras_boundaries(sigma, eps, N, T):
    # This will be used to generate the boundaries for the time discretization

    return torch.tensor(
        [
            (eps ** (1 / sigma) + i / (N - 1) * (T ** (1 / sigma) - eps ** (1 / sigma)))
            ** sigma
            for i in range(N)
        ]
    )

# -- main.py (wandb off; get_data, tqdm, make_grid and save_image stand-ins) -----------------------
# Implementation of Consistency Model
# https://arxiv.org/pdf/2303.01469.pdf

import argparse
from contextlib import nullcontext
from types import SimpleNamespace
from copy import deepcopy
import math

from torch import autocast
from torch.optim.lr_scheduler import OneCycleLR, CosineAnnealingLR

WANDB_PROJECT = "consistency-model"

config = SimpleNamespace(
    img_size=8,
    batch_size=4,
    num_workers=0,
    dataset="mnist",
    lr=4e-4,
    n_epochs=3,
    sample_every_n_epoch=1,
    device="cuda" if torch.cuda.is_available() else "cpu",
    wandb=False,
    mixed_precision=True,
    s_0=2, 
    s_1=150,
    mu_0=0.9,
    ema_rate=0.999,
)

def Nk(step, s_0=config.s_0, s_1=config.s_1):
    return math.ceil(math.sqrt((step * ((s_1+1)**2 - s_0**2) ) + s_0**2) - 1) + 1

class EMA:
    def __init__(self, model, device=config.device):
        self.model = model
        self.ema_model = deepcopy(model).eval().requires_grad_(False).to(device)

    @torch.inference_mode()
    def update(self, N):
        mu = math.exp(config.s_0 * math.log(config.mu_0) / N)
        # update \\theta_{-}
        for p, ema_p in zip(self.model.parameters(), self.ema_model.parameters()):
            ema_p.mul_(mu).add_(p, alpha=1 - mu)
    
def sample(model, x, epoch, values=[5.0, 10.0, 20.0, 40.0, 80.0], n=64):
    "Sample images from model"
    x = x[:n]
    model.eval()
    with torch.inference_mode():
        xh = model.sample(
            torch.randn_like(x).to(device=config.device) * 80.0,
            list(reversed(values)),
        )
        xh = (xh * 0.5 + 0.5).clamp(0, 1)
        grid = make_grid(xh, nrow=4)
        save_image(grid, f"./contents/ct_{config.dataset}_sample_{len(values)}step_{epoch}.png")
        if config.wandb:
            wandb.log({f"sampled_images_{len(values)}": [wandb.Image(img.permute(1,2,0).squeeze().cpu().numpy()) for img in xh]})
    
def save(model, epoch, model_name):
    "Save model weights"
    torch.save(model.state_dict(), f"{outdir}/ct_{model_name}.pth")


def train(config):
    dataloader = get_data(config.dataset, 
                          config.batch_size, 
                          config.num_workers)
    n_channels = 3 if config.dataset=="cifar10" else 1
    model = ConsistencyModel(n_channels, D=32)
    initialize(model)
    model.to(config.device)
    optim = torch.optim.AdamW(model.parameters(), eps=1e-5)
    scheduler = OneCycleLR(optim, max_lr=config.lr, 
                           steps_per_epoch=len(dataloader), epochs=config.n_epochs)
    # scheduler = CosineAnnealingLR(optim, T_max=config.n_epochs*len(dataloader), eta_min=0.0)
    scaler = torch.cuda.amp.GradScaler()
    ema = EMA(model, device=config.device)
    example_ct = 0
    total_ct = config.n_epochs*len(dataloader)*config.batch_size

    for epoch in range(1, config.n_epochs):
        N = Nk(example_ct/total_ct)
        boundaries = kerras_boundaries(7.0, 0.002, N, 80.0).to(config.device)
        pbar = tqdm(dataloader)
        loss_ema = None
        model.train()
        for x, _ in pbar:
            optim.zero_grad()
            x = x.to(config.device)
            z = torch.randn_like(x)
            t = torch.randint(0, N - 1, (x.shape[0], 1), device=config.device)
            t_0 = boundaries[t]
            t_1 = boundaries[t + 1]
            with autocast("cuda", dtype=torch.float16) if config.mixed_precision else nullcontext():
                loss = model.loss(x, z, t_0, t_1, ema_model=ema.ema_model)
            scaler.scale(loss).backward() if config.mixed_precision else loss.backward()
            if loss_ema is None:
                loss_ema = loss.item()
            else:
                loss_ema = config.ema_rate * loss_ema + (1-config.ema_rate) * loss.item()

            if config.mixed_precision:
                scaler.step(optim) 
                scaler.update()
            else:
                optim.step()
            scheduler.step()
            ema.update(N)
            example_ct += len(x)
            record.append([loss.item(), loss_ema, scheduler.get_last_lr()[0], N])
            pbar.set_description(f"epoch: {epoch}, loss: {loss_ema:.4f}, N: {N:.10f}")

        if epoch % config.sample_every_n_epoch == 0:
            sample(model, x, epoch, values=[5.0, 10.0, 20.0, 40.0, 80.0])
            sample(model, x, epoch, values=[5.0, 80.0])
    
    # only save model at the end
    save(model, epoch, model_name=config.dataset)
    record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})
    record.append({k: v.detach().numpy() for k, v in ema.ema_model.state_dict().items()})

train(config)
'''

CONSISTENCY_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    ("from torch import autocast\n", "from retrograd import autocast\n"),
    (
        "            scaler.scale(loss).backward() if config.mixed_precision else loss.backward()\n",
        "            grads = scaler.scale(loss).backward() if config.mixed_precision else loss.backward()\n",
    ),
    ("                scaler.step(optim) \n", "                scaler.step(optim, grads) \n"),
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
        batches = [(lib.tensor(x), lib.zeros(4, dtype=lib.int64)) for x in images]
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
                get_data=lambda dataset, batch_size, num_workers, batches=batches: batches,
                tqdm=SilentTqdm,
                make_grid=lambda xh, nrow: xh,
                save_image=lambda grid, path, record=record: record.append(grid.numpy()),
            )
        # autocast("cuda") without CUDA: both libraries warn and compute in float32
        assert any("CUDA is not available" in str(w.message) for w in caught)
        saved = lib.load(str(outdir / "ct_mnist.pth"))
        record.append({k: v.numpy() for k, v in saved.items()})
        records.append(record)
    theirs, ours = records
    assert capsys.readouterr().out == ""
    assert len(theirs) == 2 * (2 + 2) + 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
