"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of lucidrains/denoising-diffusion-pytorch, a small diffusion U-Net written with einops
trained on the noise-prediction loss, under torch and, ported, under retrograd from the same
weights, images, noise and timesteps.

What it exercises: a downsampling ``nn.Sequential`` opening with einops'
``Rearrange('b c (h p1) (w p2) -> b (c p1 p2) h w', p1=2, p2=2)`` before a 1x1 conv, and
``nn.Upsample(scale_factor=2, mode='nearest')``; an RMS norm by ``F.normalize(x, dim=1)``;
sinusoidal time features (``torch.arange(n, device=)``, ``x[:, None] * f[None, :]``); residual
blocks with a time-conditioned scale and shift (``rearrange(t, 'b c -> b c 1 1')``,
``chunk(2, dim=1)``), ``nn.SiLU``, ``nn.GELU``, ``nn.Identity``; linear attention (heads by
``rearrange(t, 'b (h c) x y -> b h c (x y)', h=)``, memory key/values by ``map(lambda t:
repeat(t, 'h c n -> b h c n', b=b), param)`` iterating a parameter, joined by
``map(partial(torch.cat, dim=-1), ...)``, ``torch.einsum('b h d n, b h e n -> b h d e')``);
full attention by ``einsum`` of ``from torch import einsum``; skips kept in a list and
``pop``-ped; the diffusion pieces: a float64 ``torch.linspace`` beta schedule, ``cumprod``,
``.to(torch.float32)``, ``clamp_(max=)`` of a ``clone``, coefficients picked by
``a.gather(-1, t)`` and reshaped to broadcast, ``F.mse_loss(reduction='none')`` reduced by
``reduce(loss, 'b ... -> b', 'mean')``, a noise default by ``torch.randn_like``; Adam.

The lines changed: the imports (``torch`` is retrograd; einops' layer comes from
``einops.layers.retrograd``, or, in the ``torch_layers_kept`` run, stays einops' torch layer,
which the ``nn.Sequential`` converts) and the gradient lines. The weights are torch's
(``initialize``); dropout is 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

pytest.importorskip("einops", minversion="0.8")

UNET_SOURCE = """
import math
from functools import partial

import torch
from torch import nn, einsum
from torch.nn import functional as F

from einops import repeat, reduce, rearrange
from einops.layers.torch import Rearrange  # space-to-depth as a layer


def fallback(value, make):
    if value is not None:
        return value
    return make() if callable(make) else make


class ChannelRMSNorm(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(1, ch, 1, 1))
        self.ch = ch

    def forward(self, x):
        return F.normalize(x, dim=1) * self.gain * math.sqrt(self.ch)


class TimeFeatures(nn.Module):
    def __init__(self, width, base=10000):
        super().__init__()
        self.width, self.base = width, base

    def forward(self, t):
        half = self.width // 2
        step = math.log(self.base) / (half - 1)
        freqs = torch.exp(torch.arange(half, device=t.device) * -step)
        angles = t[:, None] * freqs[None, :]
        return torch.cat((angles.sin(), angles.cos()), dim=-1)


class ConvNormAct(nn.Module):
    def __init__(self, cin, cout, p=0.0):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(cin, cout, 3, padding=1), ChannelRMSNorm(cout)
        self.act, self.drop = nn.SiLU(), nn.Dropout(p)

    def forward(self, x, film=None):
        x = self.norm(self.conv(x))
        if film is not None:
            gamma, beta = film
            x = x * (gamma + 1) + beta
        return self.drop(self.act(x))


class TimedResBlock(nn.Module):
    def __init__(self, cin, cout, t_dim):
        super().__init__()
        self.to_film = nn.Sequential(nn.SiLU(), nn.Linear(t_dim, 2 * cout))
        self.first, self.second = ConvNormAct(cin, cout), ConvNormAct(cout, cout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, t_emb):
        film = rearrange(self.to_film(t_emb), "b c -> b c 1 1").chunk(2, dim=1)
        return self.second(self.first(x, film)) + self.skip(x)


class LinearAttn(nn.Module):
    # softmax over features for q and over positions for k: cost linear in the pixels
    def __init__(self, ch, heads=2, head_ch=4, n_mem=2):
        super().__init__()
        self.heads, self.scale = heads, head_ch**-0.5
        self.norm = ChannelRMSNorm(ch)
        self.memory = nn.Parameter(torch.randn(2, heads, head_ch, n_mem))
        self.qkv = nn.Conv2d(ch, 3 * heads * head_ch, 1, bias=False)
        self.out = nn.Sequential(nn.Conv2d(heads * head_ch, ch, 1), ChannelRMSNorm(ch))

    def forward(self, x):
        b, _, hgt, wid = x.shape
        parts = self.qkv(self.norm(x)).chunk(3, dim=1)
        q, k, v = map(lambda t: rearrange(t, "b (h c) x y -> b h c (x y)", h=self.heads), parts)
        mem_k, mem_v = map(lambda t: repeat(t, "h c n -> b h c n", b=b), self.memory)
        k, v = map(partial(torch.cat, dim=-1), ((mem_k, k), (mem_v, v)))
        q, k = q.softmax(dim=-2) * self.scale, k.softmax(dim=-1)
        ctx = torch.einsum("b h d n, b h e n -> b h d e", k, v)
        mixed = torch.einsum("b h d e, b h d n -> b h e n", ctx, q)
        grid = rearrange(mixed, "b h c (x y) -> b (h c) x y", h=self.heads, x=hgt, y=wid)
        return self.out(grid)


class FullAttn(nn.Module):
    def __init__(self, ch, heads=2, head_ch=4, n_mem=2):
        super().__init__()
        self.heads = heads
        self.norm = ChannelRMSNorm(ch)
        self.memory = nn.Parameter(torch.randn(2, heads, n_mem, head_ch))
        self.qkv = nn.Conv2d(ch, 3 * heads * head_ch, 1, bias=False)
        self.out = nn.Conv2d(heads * head_ch, ch, 1)

    def forward(self, x):
        b, _, hgt, wid = x.shape
        parts = self.qkv(self.norm(x)).chunk(3, dim=1)
        q, k, v = map(lambda t: rearrange(t, "b (h c) x y -> b h (x y) c", h=self.heads), parts)
        mem_k, mem_v = map(lambda t: repeat(t, "h n d -> b h n d", b=b), self.memory)
        k, v = map(partial(torch.cat, dim=-2), ((mem_k, k), (mem_v, v)))
        sim = einsum("b h i d, b h j d -> b h i j", q, k) * q.shape[-1] ** -0.5
        mixed = einsum("b h i j, b h j d -> b h i d", sim.softmax(dim=-1), v)
        return self.out(rearrange(mixed, "b h (x y) d -> b (h d) x y", x=hgt, y=wid))


class TinyUNet(nn.Module):
    # one resolution down and up around a full-attention middle; skips concatenated
    def __init__(self, width=8, in_ch=1):
        super().__init__()
        t_dim, wide = 4 * width, 2 * width
        self.stem = nn.Conv2d(in_ch, width, 7, padding=3)
        self.time = nn.Sequential(
            TimeFeatures(width), nn.Linear(width, t_dim), nn.GELU(), nn.Linear(t_dim, t_dim)
        )
        block = partial(TimedResBlock, t_dim=t_dim)
        self.down = nn.ModuleList([block(width, width), LinearAttn(width)])
        self.shrink = nn.Sequential(
            Rearrange("b c (h p1) (w p2) -> b (c p1 p2) h w", p1=2, p2=2),
            nn.Conv2d(4 * width, wide, 1),
        )
        self.mid = nn.ModuleList([block(wide, wide), FullAttn(wide), block(wide, wide)])
        self.grow = nn.Sequential(
            nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(wide, width, 3, padding=1)
        )
        self.up = nn.ModuleList([block(2 * width, width), LinearAttn(width)])
        self.last = block(2 * width, width)
        self.head = nn.Conv2d(width, in_ch, 1)

    def forward(self, x, t):
        assert all(side % 2 == 0 for side in x.shape[-2:]), "the sides must be even"
        x = self.stem(x)
        stem_out = x.clone()
        t_emb = self.time(t)
        skips = []
        res, attn = self.down
        x = res(x, t_emb)
        x = attn(x) + x
        skips.append(x)
        first, middle_attn, second = self.mid
        x = first(self.shrink(x), t_emb)
        x = second(middle_attn(x) + x, t_emb)
        res, attn = self.up
        x = res(torch.cat((self.grow(x), skips.pop()), dim=1), t_emb)
        x = attn(x) + x
        return self.head(self.last(torch.cat((x, stem_out), dim=1), t_emb))


# DDPM's noise-prediction objective with a linear beta schedule and a clipped-SNR weight
steps = 50
betas = torch.linspace(1000 / steps * 1e-4, 1000 / steps * 0.02, steps, dtype=torch.float64)
alpha_bar = torch.cumprod(1.0 - betas, dim=0)
keep_coef = torch.sqrt(alpha_bar).to(torch.float32)
noise_coef = torch.sqrt(1.0 - alpha_bar).to(torch.float32)
snr = alpha_bar / (1 - alpha_bar)
clipped = snr.clone()
clipped.clamp_(max=5.0)
weight = (clipped / snr).to(torch.float32)


def at(table, t, shape):
    return table.gather(-1, t).reshape(t.shape[0], *((1,) * (len(shape) - 1)))


def denoising_loss(net, x0, t, noise=None):
    noise = fallback(noise, lambda: torch.randn_like(x0))
    noisy = at(keep_coef, t, x0.shape) * x0 + at(noise_coef, t, x0.shape) * noise
    per_pixel = F.mse_loss(net(noisy, t), noise, reduction="none")
    per_image = reduce(per_pixel, "b ... -> b", "mean")
    return (per_image * at(weight, t, per_image.shape)).mean()


unet = TinyUNet()
initialize(unet)
opt = torch.optim.Adam(unet.parameters(), lr=1e-3)
for x0, eps, t in batches:
    loss = denoising_loss(unet, torch.tensor(x0), torch.tensor(t), noise=torch.tensor(eps))
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
    record.append(params_of(unet))
"""

UNET_STEPS = [
    (
        "import torch\nfrom torch import nn, einsum\n",
        "import retrograd as torch\nfrom retrograd import nn, einsum\n",
    ),
    ("from einops.layers.torch import Rearrange", "from einops.layers.retrograd import Rearrange"),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
]

#: The port that keeps ``from einops.layers.torch import Rearrange`` (the layers are torch
#: modules): retrograd's modules own retrograd's layer made from each one they are given.
UNET_STEPS_KEEPING_TORCH_LAYERS = [step for step in UNET_STEPS if "einops" not in step[0]]


@pytest.mark.parametrize(
    "layers", ["retrograd", "torch"], ids=["retrograd_layers", "torch_layers_kept"]
)
def test_diffusion_unet_trains_as_torch(capsys, layers):
    rng = np.random.default_rng(302)
    batches = [
        (
            rng.standard_normal((2, 1, 8, 8)).astype(np.float32),
            rng.standard_normal((2, 1, 8, 8)).astype(np.float32),
            rng.integers(0, 50, 2),
        )
        for _ in range(3)
    ]
    (theirs, ours), logs = runs_with_draws(
        UNET_SOURCE,
        UNET_STEPS if layers == "retrograd" else UNET_STEPS_KEEPING_TORCH_LAYERS, capsys, 3020,
        batches=batches, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1]
    assert len(theirs) == 2 * len(batches)
    assert_records_agree(ours, theirs, rtol=5e-4, atol=5e-5)
