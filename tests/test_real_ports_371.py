"""A program written here in the style of cloneofsimo/minRF (a rectified-flow trainer and a
DiT with LLaMA-style blocks), run under torch and, ported, under retrograd from the same weights
and draws (the harness: ``tests/real_ports.py``): a class-conditional flow trained a few steps
and sampled with classifier-free guidance, small.

What it exercises: logit-normal times ``torch.sigmoid(torch.randn((b,)))``, ``t.view([b,
*([1] * len(x.shape[1:]))])``, the velocity loss ``((z1 - x - v) ** 2).mean(dim=list(range(1,
len(x.shape))))``, per-sample losses paired by ``zip(t, losses)`` over a tensor and binned by
``int(t * 10)`` of 0-d tensors; sampling under ``@torch.no_grad()`` with ``torch.tensor([dt] *
b)`` and guidance ``vu + cfg * (vc - vu)``; the DiT: a ``Conv2d``/``SiLU``/``GroupNorm(32,
...)`` stem, patches by ``view``/``permute(0, 2, 4, 1, 3, 5).flatten(-3).flatten(1, 2)`` and
back by ``x.reshape(shape=(...))`` and ``torch.einsum("nhwpqc->nchpwq", x)``, the timestep
embedding (``torch.arange(start=0, end=half)``, ``t[:, None] * freqs[None]``,
``.to(dtype=next(self.parameters()).dtype)``), label dropout by ``torch.where(drop, n_classes,
labels)`` of a Python int, rotary embeddings through complex numbers (``torch.polar(
torch.ones_like(f), f)`` of ``torch.outer``, ``torch.view_as_complex`` of
``x.float().reshape(*x.shape[:-1], -1, 2)``, complex products, ``torch.view_as_real(...)
.flatten(3)``), q/k ``LayerNorm``, ``F.scaled_dot_product_attention(..., dropout_p=0.0,
is_causal=False)``, SwiGLU, adaLN modulation by ``.chunk(6, dim=1)``, a zero-initialised final
layer (``nn.init.constant_``) with ``LayerNorm(elementwise_affine=False)``, guidance inside the
model by ``torch.split``; ``DataLoader(shuffle=True, drop_last=True)``.

The data is a stand-in for MNIST (random 8x8 digits in ``[-1, 1]`` with labels, shuffled by one
seeded permutation stream in both runs); the sizes are small (``dim=64``, the least
``GroupNorm(32, dim // 2)`` allows, one block, four heads, two epochs of two batches). The port
changes the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

MIN_RF_SOURCE = """
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


def shift_scale(x, shift, scale):
    return shift.unsqueeze(1) + x * (1 + scale.unsqueeze(1))


class TimeEmbedding(nn.Module):
    def __init__(self, width, freq_dim=64):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, width), nn.SiLU(), nn.Linear(width, width))

    def forward(self, t):
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(start=0, end=half) / half)
        angles = t[:, None] * freqs[None]
        waves = torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)
        return self.mlp(waves.to(dtype=next(self.parameters()).dtype))


class ClassEmbedding(nn.Module):
    # one extra row: the "no class" token used for classifier-free guidance
    def __init__(self, n_classes, width, p_drop):
        super().__init__()
        self.n_classes, self.p_drop = n_classes, p_drop
        self.table = nn.Embedding(n_classes + 1, width)

    def forward(self, labels, training):
        if training and self.p_drop > 0:
            drop = torch.rand(labels.shape[0]) < self.p_drop
            labels = torch.where(drop, self.n_classes, labels)
        return self.table(labels)


def rotary_table(head_dim, length, theta=10000.0):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(length), inv).float()
    return torch.polar(torch.ones_like(angles), angles)


def rotate(x, table):
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    turned = pairs * table[: x.shape[1]].view(1, x.shape[1], 1, -1)
    return torch.view_as_real(turned).flatten(3)


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.q_norm, self.k_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x, table):
        b, n, _ = x.shape
        split = (b, n, self.heads, self.head_dim)
        q = self.q_norm(self.q(x)).view(split)
        k = self.k_norm(self.k(x)).view(split)
        v = self.v(x).view(split)
        q, k = rotate(q, table).to(x.dtype), rotate(k, table).to(x.dtype)
        heads_first = [t.permute(0, 2, 1, 3) for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*heads_first, dropout_p=0.0, is_causal=False)
        return self.o(out.permute(0, 2, 1, 3).flatten(-2))


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn, self.mlp = SelfAttention(dim, heads), SwiGLU(dim, 2 * dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-5), nn.LayerNorm(dim, eps=1e-5)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(self, x, table, cond):
        s1, m1, g1, s2, m2, g2 = self.ada(cond).chunk(6, dim=1)
        x = x + g1.unsqueeze(1) * self.attn(shift_scale(self.norm1(x), s1, m1), table)
        return x + g2.unsqueeze(1) * self.mlp(shift_scale(self.norm2(x), s2, m2))


class LastLayer(nn.Module):
    def __init__(self, dim, patch, channels):
        super().__init__()
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.proj = nn.Linear(dim, patch * patch * channels)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        nn.init.constant_(self.proj.weight, 0)  # start as the zero velocity
        nn.init.constant_(self.proj.bias, 0)

    def forward(self, x, cond):
        shift, scale = self.ada(cond).chunk(2, dim=1)
        return self.proj(shift_scale(self.norm(x), shift, scale))


class FlowDiT(nn.Module):
    def __init__(self, channels, size, patch=2, dim=64, depth=1, heads=4, n_classes=10,
                 p_drop=0.1):
        super().__init__()
        self.channels, self.patch = channels, patch
        half = dim // 2
        self.stem = nn.Sequential(
            nn.Conv2d(channels, half, kernel_size=3, padding=1), nn.SiLU(), nn.GroupNorm(32, half))
        self.embed = nn.Linear(patch * patch * half, dim)
        self.time, self.label = TimeEmbedding(dim), ClassEmbedding(n_classes, dim, p_drop)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.last = LastLayer(dim, patch, channels)
        self.table = rotary_table(dim // heads, (size // patch) ** 2)

    def to_patches(self, x):
        b, c, h, w = x.size()
        p = self.patch
        x = x.view(b, c, h // p, p, w // p, p)
        return x.permute(0, 2, 4, 1, 3, 5).flatten(-3).flatten(1, 2)

    def from_patches(self, x):
        p, c = self.patch, self.channels
        side = int(x.shape[1] ** 0.5)
        x = torch.einsum("nhwpqc->nchpwq", x.reshape(shape=(x.shape[0], side, side, p, p, c)))
        return x.reshape(shape=(x.shape[0], c, side * p, side * p))

    def forward(self, x, t, y):
        cond = self.time(t).to(x.dtype) + self.label(y, self.training).to(x.dtype)
        x = self.embed(self.to_patches(self.stem(x)))
        for block in self.blocks:
            x = block(x, self.table, cond)
        return self.from_patches(self.last(x, cond))

    def guided(self, x, t, y, scale):
        top = x[: len(x) // 2]
        out = self(torch.cat([top, top], dim=0), t, y)
        cond, uncond = torch.split(out, len(out) // 2, dim=0)
        mixed = uncond + scale * (cond - uncond)
        return torch.cat([mixed, mixed], dim=0)


class RectifiedFlow:
    def __init__(self, model, logit_normal=True):
        self.model, self.logit_normal = model, logit_normal

    def loss(self, x, y):
        b = x.size(0)
        t = torch.sigmoid(torch.randn((b,))) if self.logit_normal else torch.rand((b,))
        tb = t.view([b, *([1] * len(x.shape[1:]))])
        noise = torch.randn_like(x)
        v = self.model((1 - tb) * x + tb * noise, t, y)
        per_sample = ((noise - x - v) ** 2).mean(dim=list(range(1, len(x.shape))))
        losses = per_sample.detach().reshape(-1).tolist()
        return per_sample.mean(), list(zip(t, losses))

    @torch.no_grad()
    def sample(self, z, y, y_null=None, steps=10, cfg=2.0):
        b = z.size(0)
        dt = torch.tensor([1.0 / steps] * b).view([b, *([1] * len(z.shape[1:]))])
        path = [z]
        for i in range(steps, 0, -1):
            t = torch.tensor([i / steps] * b)
            vc = self.model(z, t, y)
            if y_null is not None:
                vu = self.model(z, t, y_null)
                vc = vu + cfg * (vc - vu)
            z = z - dt * vc
            path.append(z)
        return path


if __name__ == "__main__":
    import torch.optim as optim
    from torch.utils import data

    model = FlowDiT(1, 8)
    initialize(model)
    flow = RectifiedFlow(model)
    adam = optim.Adam(model.parameters(), lr=3e-4)
    loader = data.DataLoader(make_mnist(), batch_size=8, shuffle=True, drop_last=True)
    for epoch in range(2):
        bins, counts = [0.0] * 10, [1e-6] * 10
        for x, y in loader:
            adam.zero_grad()
            loss, per_t = flow.loss(x, y)
            loss.backward()
            adam.step()
            record.append(loss.item())
            for t, l in per_t:
                bins[int(t * 10)] += l
                counts[int(t * 10)] += 1
        for k in range(10):
            print(f"epoch {epoch} bin {k} mean loss {bins[k] / counts[k]}")
        model.eval()
        labels = torch.arange(0, 12) % 10
        noise = torch.randn(12, 1, 8, 8)
        path = flow.sample(noise, labels, torch.ones_like(labels) * 10, steps=3)
        record += [path[-1].numpy(), len(path)]
        model.train()
    record.append({name: w.detach().numpy() for name, w in model.state_dict().items()})
    model.eval()
    both = model.guided(noise[:4], torch.tensor([0.4] * 4), torch.tensor([3, 7, 10, 10]), 2.0)
    record.append(both.detach().numpy())
"""

MIN_RF_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("    import torch.optim as optim\n", "    import retrograd.optim as optim\n"),
    (
        "            loss.backward()\n            adam.step()\n",
        "            grads = loss.backward()\n            adam.step(grads)\n",
    ),
]


def mnist_stand_in(lib, seed):
    """MNIST's interface (a dataset of ``(image, label)`` pairs) with random 8x8 digits
    normalised to ``[-1, 1]`` as ``transforms.Normalize((0.5,), (0.5,))`` leaves them."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(0.0, 1.0, (16, 1, 8, 8)).astype(np.float32) * 2 - 1
    labels = rng.integers(0, 10, 16)
    return lambda: lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels))


@pytest.fixture
def shared_permutations(monkeypatch):
    """``DataLoader(shuffle=True)`` of both libraries permuting by one seeded stream."""

    def for_lib(lib, seed):
        rng = np.random.default_rng(seed)

        def randperm(n, generator=None, **_):
            return lib.tensor(rng.permutation(n), dtype=lib.int64)

        monkeypatch.setattr(torch if lib is torch else rg_sampler, "randperm", randperm)

    return for_lib


def test_min_rf_dit_llama_trains_and_samples_with_guidance_as_torch(capsys, shared_permutations):
    initialize, records, logs = initializer(), [], []
    seed = 371
    torch.manual_seed(seed)
    for lib in (torch, rg):
        record = []
        text = MIN_RF_SOURCE
        if lib is rg:
            text = port(text, MIN_RF_STEPS).replace("from torch.", "from retrograd.")
        shared_permutations(lib, seed)
        with SharedDraws(lib, seed):
            run_source(
                text,
                lib,
                __name__="__main__",
                record=record,
                initialize=initialize,
                make_mnist=mnist_stand_in(lib, seed),
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[0].count("mean loss") == 20
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
    # the binned losses are printed at full precision: compare them as numbers
    numbers = [[float(line.rsplit(" ", 1)[1]) for line in log.splitlines()] for log in logs]
    np.testing.assert_allclose(numbers[1], numbers[0], rtol=2e-4, atol=1e-6)
