"""A program written here in the style of tanelp/tiny-diffusion (a DDPM on 2-d toy point
clouds: an MLP over positional embeddings of the point and the time step, a noise scheduler, a
``__main__`` that trains and samples), run under torch and, ported, under retrograd from the
same weights and draws (the harness: ``tests/real_ports.py``), small.

What it exercises: a sinusoidal embedding (a ``scale: torch.float = 1.0`` annotation evaluated
at definition, ``torch.log(torch.Tensor([10000.0]))``, the frequency table held as
``nn.Parameter(freqs, requires_grad=False)``), a learnable embedding's ``t.unsqueeze(-1).float()
/ self.size`` of integer time steps, identity/linear/zero embeddings, widths read by ``len(...)``
through a module's ``__len__``, residual GELU blocks; the scheduler (linear and quadratic
``torch.linspace(..., dtype=torch.float32)`` schedules, ``torch.cumprod(alphas, axis=0)``,
``F.pad(..., (1, 0), value=1.)``, ``** 0.5`` and ``torch.sqrt(1 / ...)``, tables indexed by a
batch of int64 steps and ``.reshape(-1, 1)``, ``if t == 0`` of a 0-d tensor, ``.clip(1e-20)``,
``if t > 0`` and ``torch.randn_like`` in the reverse step); training by ``DataLoader(...,
shuffle=True, drop_last=True)`` over a ``TensorDataset`` of ``torch.from_numpy(X.astype(
np.float32))`` (one seeded permutation stream in both runs), ``batch = batch[0]``,
``torch.randint(...).long()``, ``loss.backward(loss)`` (the loss seeding its own backward, so the
gradients are scaled by the loss), ``clip_grad_norm_``, ``AdamW``, ``loss.detach().item()``;
sampling by ``torch.from_numpy(np.repeat(t, n)).long()`` under ``torch.no_grad()``,
``.to("cpu")``, ``.numpy()``; ``torch.save(model.state_dict(), ...)`` and ``np.save`` of the
losses and frames; ``argparse`` reading the test's argument list.

``tqdm`` is a silent stand-in. The port changes the ``import`` lines and the gradient lines
(``grads = loss.backward(loss)``, ``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import assert_records_agree, initializer, port, run_source

TOY_DDPM_SOURCE = """
import argparse
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SineEmbed(nn.Module):
    def __init__(self, size: int, scale: torch.float = 1.0) -> None:
        super().__init__()
        self.size, self.scale = size, scale
        half = size // 2
        rate = torch.log(torch.Tensor([10000.0])) / (half - 1)
        self.freqs = nn.Parameter(torch.exp(-rate * torch.arange(half)), requires_grad=False)

    def forward(self, x):
        angles = (x * self.scale).unsqueeze(-1) * self.freqs.unsqueeze(0)
        return torch.cat((torch.sin(angles), torch.cos(angles)), dim=-1)

    def __len__(self):
        return self.size


class LearnedEmbed(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.proj = nn.Linear(1, size)

    def forward(self, x):
        return self.proj(x.unsqueeze(-1).float() / self.size)

    def __len__(self):
        return self.size


class ScalarEmbed(nn.Module):
    # "identity", "linear" (divided by the size) or "zero": one feature per input
    def __init__(self, kind: str, size: int = 1):
        super().__init__()
        self.kind, self.size = kind, size

    def forward(self, x):
        if self.kind == "zero":
            return x.unsqueeze(-1) * 0
        if self.kind == "linear":
            return (x / self.size).unsqueeze(-1)
        return x.unsqueeze(-1)

    def __len__(self):
        return 1


def embedding(kind, size, **kwargs):
    if kind == "sinusoidal":
        return SineEmbed(size, **kwargs)
    if kind == "learnable":
        return LearnedEmbed(size)
    return ScalarEmbed(kind, size)


class Residual(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.GELU()

    def forward(self, x):
        return x + self.act(self.fc(x))


class Denoiser(nn.Module):
    def __init__(self, width, depth, emb, time_kind, point_kind):
        super().__init__()
        self.t_embed = embedding(time_kind, emb)
        sharp = {"scale": 25.0} if point_kind == "sinusoidal" else {}
        self.x_embed = embedding(point_kind, emb, **sharp)
        self.y_embed = embedding(point_kind, emb, **sharp)
        fan_in = len(self.t_embed) + len(self.x_embed) + len(self.y_embed)
        self.net = nn.Sequential(
            nn.Linear(fan_in, width),
            nn.GELU(),
            *[Residual(width) for _ in range(depth)],
            nn.Linear(width, 2),
        )

    def forward(self, points, t):
        x, y = self.x_embed(points[:, 0]), self.y_embed(points[:, 1])
        return self.net(torch.cat((x, y, self.t_embed(t)), dim=-1))


class Schedule:
    def __init__(self, steps=50, low=1e-4, high=0.02, kind="linear"):
        self.steps = steps
        if kind == "linear":
            self.betas = torch.linspace(low, high, steps, dtype=torch.float32)
        else:  # quadratic: linear in sqrt(beta)
            roots = torch.linspace(low ** 0.5, high ** 0.5, steps, dtype=torch.float32)
            self.betas = roots ** 2
        self.alphas = 1 - self.betas
        self.abar = torch.cumprod(self.alphas, axis=0)
        self.abar_prev = F.pad(self.abar[:-1], (1, 0), value=1.)
        self.keep = self.abar ** 0.5
        self.mix = (1 - self.abar) ** 0.5
        self.inv_keep = torch.sqrt(1 / self.abar)
        self.inv_mix = torch.sqrt(1 / self.abar - 1)
        self.post_x0 = self.betas * torch.sqrt(self.abar_prev) / (1.0 - self.abar)
        self.post_xt = (1.0 - self.abar_prev) * torch.sqrt(self.alphas) / (1.0 - self.abar)

    def __len__(self):
        return self.steps

    def noised(self, x0, eps, t):
        return self.keep[t].reshape(-1, 1) * x0 + self.mix[t].reshape(-1, 1) * eps

    def variance(self, t):
        if t == 0:
            return 0
        var = self.betas[t] * (1.0 - self.abar_prev[t]) / (1.0 - self.abar[t])
        return var.clip(1e-20)

    def reverse(self, eps_hat, t, xt):
        x0_hat = self.inv_keep[t].reshape(-1, 1) * xt - self.inv_mix[t].reshape(-1, 1) * eps_hat
        mean = self.post_x0[t].reshape(-1, 1) * x0_hat + self.post_xt[t].reshape(-1, 1) * xt
        if t > 0:
            mean = mean + self.variance(t) ** 0.5 * torch.randn_like(eps_hat)
        return mean


def point_cloud(name, n, seed=7):
    rng = np.random.default_rng(seed)
    if name == "ring":
        angle = rng.uniform(0, 2 * np.pi, n)
        radius = 2.0 + 0.05 * rng.standard_normal(n)
        pts = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    else:  # "bars": two vertical strips
        column = rng.choice([-1.5, 1.5], n) + 0.1 * rng.standard_normal(n)
        pts = np.stack([column, rng.uniform(-2, 2, n)], axis=1)
    return TensorDataset(torch.from_numpy(pts.astype(np.float32)))


if __name__ == "__main__":
    cli = argparse.ArgumentParser()
    cli.add_argument("--data", default="ring", choices=["ring", "bars"])
    cli.add_argument("--points", type=int, default=1024)
    cli.add_argument("--batch", type=int, default=128)
    cli.add_argument("--samples", type=int, default=500)
    cli.add_argument("--epochs", type=int, default=100)
    cli.add_argument("--lr", type=float, default=1e-3)
    cli.add_argument("--steps", type=int, default=50)
    cli.add_argument("--schedule", default="linear", choices=["linear", "quadratic"])
    cli.add_argument("--emb", type=int, default=64)
    cli.add_argument("--width", type=int, default=64)
    cli.add_argument("--depth", type=int, default=2)
    cli.add_argument("--time_emb", default="sinusoidal")
    cli.add_argument("--point_emb", default="sinusoidal")
    cli.add_argument("--snapshot_every", type=int, default=10)
    opts = cli.parse_args(ARGV)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device: {device}")

    cloud = point_cloud(opts.data, opts.points)
    loader = DataLoader(cloud, batch_size=opts.batch, shuffle=True, drop_last=True)
    model = Denoiser(opts.width, opts.depth, opts.emb, opts.time_emb, opts.point_emb).to(device)
    initialize(model)
    schedule = Schedule(opts.steps, kind=opts.schedule)
    optimizer = torch.optim.AdamW(model.parameters(), lr=opts.lr)

    losses, frames = [], []
    for epoch in range(opts.epochs):
        model.train()
        for batch in tqdm(loader):
            batch = batch[0]
            eps = torch.randn(batch.shape)
            t = torch.randint(0, schedule.steps, (batch.shape[0],)).long()
            noisy = schedule.noised(batch, eps, t)
            loss = F.mse_loss(model(noisy.to(device), t.to(device)), eps.to(device))
            loss.backward(loss)
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad()
            losses += [loss.detach().item()]
        if epoch % opts.snapshot_every == 0 or epoch == opts.epochs - 1:
            model.eval()
            x = torch.randn(opts.samples, 2)
            for step in reversed(range(len(schedule))):
                t = torch.from_numpy(np.repeat(step, opts.samples)).long()
                with torch.no_grad():
                    eps_hat = model(x.to(device), t.to(device)).to("cpu")
                x = schedule.reverse(eps_hat, t[0], x)
            frames.append(x.numpy())
        print(f"epoch {epoch}: last loss {losses[-1]:.4f}")

    os.makedirs("out", exist_ok=True)
    torch.save(model.state_dict(), "out/denoiser.pt")
    np.save("out/losses.npy", np.array(losses))
    np.save("out/frames.npy", frames)
"""

TOY_DDPM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("from torch import nn\n", "from retrograd import nn\n"),
    (
        "            loss.backward(loss)\n"
        "            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)\n"
        "            optimizer.step()\n",
        "            grads = loss.backward(loss)\n"
        "            nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=1.0)\n"
        "            optimizer.step(grads)\n",
    ),
]


class SilentTqdm:
    """``tqdm``'s surface that the script uses, printing nothing."""

    def __init__(self, iterable=(), total=None, **_):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def update(self, n=1):
        pass

    def set_description(self, text):
        pass

    def set_postfix(self, **logs):
        pass

    def close(self):
        pass


@pytest.fixture
def shared_permutations(monkeypatch):
    """``DataLoader(shuffle=True)`` of both libraries permuting by one seeded stream (each
    library's ``randperm`` draws from its own generator otherwise)."""

    def for_lib(lib, seed):
        rng = np.random.default_rng(seed)

        def randperm(n, generator=None, **_):
            return lib.tensor(rng.permutation(n), dtype=lib.int64)

        monkeypatch.setattr(torch if lib is torch else rg_sampler, "randperm", randperm)

    return for_lib


def run_tiny_diffusion(argv, seed, tmp_path, monkeypatch, capsys, shared_permutations):
    from real_ports import SharedDraws

    initialize, records, logs = initializer(), [], []
    torch.manual_seed(seed)
    for lib in (torch, rg):
        text = TOY_DDPM_SOURCE
        if lib is rg:
            text = port(text, TOY_DDPM_STEPS).replace("from torch.", "from retrograd.")
        shared_permutations(lib, seed)
        monkeypatch.chdir(tmp_path / lib.__name__)
        with SharedDraws(lib, seed):
            names = run_source(
                text, lib, __name__="__main__", ARGV=argv, tqdm=SilentTqdm, initialize=initialize
            )
        saved = lib.load("out/denoiser.pt")
        records.append(
            [
                *names["losses"],
                *names["frames"],
                {k: v.detach().numpy() for k, v in names["model"].state_dict().items()},
                {k: v.numpy() for k, v in saved.items()},
                np.load("out/losses.npy"),
                np.load("out/frames.npy"),
            ]
        )
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and "device: cpu" in logs[0]
    return records


@pytest.fixture
def workdirs(tmp_path):
    for name in ("torch", "retrograd"):
        os.makedirs(tmp_path / name)
    return tmp_path


def test_toy_ddpm_on_a_ring_trains_and_samples_as_torch(
    workdirs, monkeypatch, capsys, shared_permutations
):
    argv = "--data ring --points 64 --batch 24 --samples 12 --epochs 2 --steps 8 --emb 8"
    argv += " --width 16 --depth 1 --snapshot_every 1"
    theirs, ours = run_tiny_diffusion(
        argv.split(), 370, workdirs, monkeypatch, capsys, shared_permutations
    )
    assert len(theirs) == 2 * 2 + 2 + 4  # losses, frames, then the states and saved arrays
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


def test_toy_ddpm_learnable_time_linear_points_quadratic_schedule_as_torch(
    workdirs, monkeypatch, capsys, shared_permutations
):
    argv = "--data bars --points 48 --batch 24 --samples 12 --epochs 1 --steps 8 --emb 8"
    argv += " --schedule quadratic --width 16 --depth 1 --time_emb learnable --point_emb linear"
    theirs, ours = run_tiny_diffusion(
        argv.split(), 371, workdirs, monkeypatch, capsys, shared_permutations
    )
    assert len(theirs) == 2 + 1 + 4
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
