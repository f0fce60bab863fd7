# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- DDPM as the Annotated Diffusion Model writes it (huggingface.co/blog/annotated-diffusion),
  smaller: the cosine beta schedule (``torch.linspace``, ``torch.pi``, ``torch.clip``),
  ``torch.cumprod(alphas, axis=0)`` (NumPy's name for ``dim``), ``F.pad(..., value=1.0)``,
  ``extract`` by ``a.gather(-1, t.cpu())`` reshaped to ``(b, *((1,) * (len(x_shape) - 1)))``,
  sinusoidal time embeddings (``time[:, None] * embeddings[None, :]``), a U-Net of
  ``GroupNorm``/``SiLU`` blocks with scale-shift from ``chunk(2, dim=1)``, attention through
  ``torch.einsum("b h d i, b h d j -> b h i j")`` and ``amax(...).detach()``,
  ``nn.Upsample``, ``x.clone()`` skips and a list used as a stack; the l1 / l2 / huber
  losses, an EMA copy made by ``copy.deepcopy(model)`` with ``requires_grad_(False)`` and
  updated by ``ema_param.data.mul_(decay).add_(param.data, alpha=1 - decay)``, and
  ``@torch.no_grad()`` ancestral sampling with ``torch.full`` time steps.

Random draws (``randn``, ``randn_like``, ``randint``) come from one seeded stream for both.

The defect found: torch's arg parser takes NumPy's ``axis`` for ``dim`` and ``keepdims`` for
``keepdim`` in every native function (``torch.cumprod(a, axis=0)``, ``x.sum(axis=1,
keepdims=True)``); retrograd refused them. Every guarded function with a ``dim`` or
``keepdim`` parameter now takes them (``errors.guard``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

DDPM_SOURCE = """
import copy
from functools import partial

def linear_beta_schedule(timesteps):
    beta_start = 0.0001
    beta_end = 0.02
    return torch.linspace(beta_start, beta_end, timesteps)

def cosine_beta_schedule(timesteps, s=0.008):
    steps = timesteps + 1
    x = torch.linspace(0, timesteps, steps)
    alphas_cumprod = torch.cos(((x / timesteps) + s) / (1 + s) * torch.pi * 0.5) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - (alphas_cumprod[1:] / alphas_cumprod[:-1])
    return torch.clip(betas, 0.0001, 0.9999)

def extract(a, t, x_shape):
    batch_size = t.shape[0]
    out = a.gather(-1, t.cpu())
    return out.reshape(batch_size, *((1,) * (len(x_shape) - 1))).to(t.device)

class SinusoidalPositionEmbeddings(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
    def forward(self, time):
        device = time.device
        half_dim = self.dim // 2
        embeddings = math.log(10000) / (half_dim - 1)
        embeddings = torch.exp(torch.arange(half_dim, device=device) * -embeddings)
        embeddings = time[:, None] * embeddings[None, :]
        embeddings = torch.cat((embeddings.sin(), embeddings.cos()), dim=-1)
        return embeddings

class Block(nn.Module):
    def __init__(self, dim, dim_out, groups=4):
        super().__init__()
        self.proj = nn.Conv2d(dim, dim_out, 3, padding=1)
        self.norm = nn.GroupNorm(groups, dim_out)
        self.act = nn.SiLU()
    def forward(self, x, scale_shift=None):
        x = self.proj(x)
        x = self.norm(x)
        if scale_shift is not None:
            scale, shift = scale_shift
            x = x * (scale + 1) + shift
        x = self.act(x)
        return x

class ResnetBlock(nn.Module):
    def __init__(self, dim, dim_out, *, time_emb_dim=None, groups=4):
        super().__init__()
        self.mlp = (
            nn.Sequential(nn.SiLU(), nn.Linear(time_emb_dim, dim_out * 2))
            if time_emb_dim is not None
            else None
        )
        self.block1 = Block(dim, dim_out, groups=groups)
        self.block2 = Block(dim_out, dim_out, groups=groups)
        self.res_conv = nn.Conv2d(dim, dim_out, 1) if dim != dim_out else nn.Identity()
    def forward(self, x, time_emb=None):
        scale_shift = None
        if self.mlp is not None and time_emb is not None:
            time_emb = self.mlp(time_emb)
            time_emb = time_emb[:, :, None, None]
            scale_shift = time_emb.chunk(2, dim=1)
        h = self.block1(x, scale_shift=scale_shift)
        h = self.block2(h)
        return h + self.res_conv(x)

class Attention(nn.Module):
    def __init__(self, dim, heads=2, dim_head=8):
        super().__init__()
        self.scale = dim_head**-0.5
        self.heads = heads
        hidden_dim = dim_head * heads
        self.to_qkv = nn.Conv2d(dim, hidden_dim * 3, 1, bias=False)
        self.to_out = nn.Conv2d(hidden_dim, dim, 1)
    def forward(self, x):
        b, c, h, w = x.shape
        qkv = self.to_qkv(x).chunk(3, dim=1)
        q, k, v = map(lambda t: t.reshape(b, self.heads, -1, h * w), qkv)
        q = q * self.scale
        sim = torch.einsum("b h d i, b h d j -> b h i j", q, k)
        sim = sim - sim.amax(dim=-1, keepdim=True).detach()
        attn = sim.softmax(dim=-1)
        out = torch.einsum("b h i j, b h d j -> b h i d", attn, v)
        out = out.permute(0, 1, 3, 2).reshape(b, -1, h, w)
        return self.to_out(out)

class Unet(nn.Module):
    def __init__(self, dim=8, channels=1, dim_mults=(1, 2)):
        super().__init__()
        self.channels = channels
        self.init_conv = nn.Conv2d(channels, dim, 1, padding=0)
        dims = [dim, *map(lambda m: dim * m, dim_mults)]
        in_out = list(zip(dims[:-1], dims[1:]))
        time_dim = dim * 4
        self.time_mlp = nn.Sequential(
            SinusoidalPositionEmbeddings(dim),
            nn.Linear(dim, time_dim),
            nn.GELU(),
            nn.Linear(time_dim, time_dim),
        )
        self.downs = nn.ModuleList([])
        self.ups = nn.ModuleList([])
        num_resolutions = len(in_out)
        for ind, (dim_in, dim_out) in enumerate(in_out):
            is_last = ind >= (num_resolutions - 1)
            self.downs.append(
                nn.ModuleList(
                    [
                        ResnetBlock(dim_in, dim_in, time_emb_dim=time_dim),
                        nn.Conv2d(dim_in, dim_out, 4, 2, 1) if not is_last else nn.Conv2d(dim_in, dim_out, 3, padding=1),
                    ]
                )
            )
        mid_dim = dims[-1]
        self.mid_block1 = ResnetBlock(mid_dim, mid_dim, time_emb_dim=time_dim)
        self.mid_attn = Attention(mid_dim)
        self.mid_block2 = ResnetBlock(mid_dim, mid_dim, time_emb_dim=time_dim)
        for ind, (dim_in, dim_out) in enumerate(reversed(in_out)):
            is_last = ind == (len(in_out) - 1)
            self.ups.append(
                nn.ModuleList(
                    [
                        ResnetBlock(dim_out + dim_in, dim_out, time_emb_dim=time_dim),
                        nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(dim_out, dim_in, 3, padding=1))
                        if not is_last
                        else nn.Conv2d(dim_out, dim_in, 3, padding=1),
                    ]
                )
            )
        self.final_res_block = ResnetBlock(dim * 2, dim, time_emb_dim=time_dim)
        self.final_conv = nn.Conv2d(dim, channels, 1)

    def forward(self, x, time):
        x = self.init_conv(x)
        r = x.clone()
        t = self.time_mlp(time)
        h = []
        for block1, downsample in self.downs:
            x = block1(x, t)
            h.append(x)
            x = downsample(x)
        x = self.mid_block1(x, t)
        x = self.mid_attn(x)
        x = self.mid_block2(x, t)
        for block1, upsample in self.ups:
            x = torch.cat((x, h.pop()), dim=1)
            x = block1(x, t)
            x = upsample(x)
        x = torch.cat((x, r), dim=1)
        x = self.final_res_block(x, t)
        return self.final_conv(x)

timesteps = 50
betas = cosine_beta_schedule(timesteps=timesteps)
alphas = 1. - betas
alphas_cumprod = torch.cumprod(alphas, axis=0)
alphas_cumprod_prev = F.pad(alphas_cumprod[:-1], (1, 0), value=1.0)
sqrt_recip_alphas = torch.sqrt(1.0 / alphas)
sqrt_alphas_cumprod = torch.sqrt(alphas_cumprod)
sqrt_one_minus_alphas_cumprod = torch.sqrt(1. - alphas_cumprod)
posterior_variance = betas * (1. - alphas_cumprod_prev) / (1. - alphas_cumprod)

def q_sample(x_start, t, noise=None):
    if noise is None:
        noise = torch.randn_like(x_start)
    sqrt_alphas_cumprod_t = extract(sqrt_alphas_cumprod, t, x_start.shape)
    sqrt_one_minus_alphas_cumprod_t = extract(
        sqrt_one_minus_alphas_cumprod, t, x_start.shape
    )
    return sqrt_alphas_cumprod_t * x_start + sqrt_one_minus_alphas_cumprod_t * noise

def p_losses(denoise_model, x_start, t, noise=None, loss_type="l1"):
    if noise is None:
        noise = torch.randn_like(x_start)
    x_noisy = q_sample(x_start=x_start, t=t, noise=noise)
    predicted_noise = denoise_model(x_noisy, t)
    if loss_type == 'l1':
        loss = F.l1_loss(noise, predicted_noise)
    elif loss_type == 'l2':
        loss = F.mse_loss(noise, predicted_noise)
    elif loss_type == "huber":
        loss = F.smooth_l1_loss(noise, predicted_noise)
    else:
        raise NotImplementedError()
    return loss

@torch.no_grad()
def p_sample(model, x, t, t_index):
    betas_t = extract(betas, t, x.shape)
    sqrt_one_minus_alphas_cumprod_t = extract(
        sqrt_one_minus_alphas_cumprod, t, x.shape
    )
    sqrt_recip_alphas_t = extract(sqrt_recip_alphas, t, x.shape)
    model_mean = sqrt_recip_alphas_t * (
        x - betas_t * model(x, t) / sqrt_one_minus_alphas_cumprod_t
    )
    if t_index == 0:
        return model_mean
    else:
        posterior_variance_t = extract(posterior_variance, t, x.shape)
        noise = torch.randn_like(x)
        return model_mean + torch.sqrt(posterior_variance_t) * noise

@torch.no_grad()
def p_sample_loop(model, shape):
    device = next(model.parameters()).device
    b = shape[0]
    img = torch.randn(shape, device=device)
    imgs = []
    for i in reversed(range(0, timesteps)):
        img = p_sample(model, img, torch.full((b,), i, device=device, dtype=torch.long), i)
        imgs.append(img.cpu().numpy())
    return imgs

class EMA:
    def __init__(self, model, decay=0.9):
        self.decay = decay
        self.shadow = copy.deepcopy(model)
        self.shadow.eval()
        for p in self.shadow.parameters():
            p.requires_grad_(False)
    @torch.no_grad()
    def update(self, model):
        for ema_param, param in zip(self.shadow.parameters(), model.parameters()):
            ema_param.data.mul_(self.decay).add_(param.data, alpha=1 - self.decay)

def train(model, data, epochs, loss_type):
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    ema = EMA(model)
    records = []
    for epoch in range(epochs):
        for step, batch in enumerate(data):
            optimizer.zero_grad()
            batch_size = batch.shape[0]
            t = torch.randint(0, timesteps, (batch_size,)).long()
            loss = p_losses(model, batch, t, loss_type=loss_type)
            loss.backward()
            optimizer.step()
            ema.update(model)
            records.append(loss.item())
    records.append({n: p.detach().numpy().copy() for n, p in ema.shadow.named_parameters()})
    samples = p_sample_loop(ema.shadow, shape=(2, 1, 8, 8))
    records.append(samples[-1])
    return records
"""

DDPM_STEP = [
    (
        "            loss.backward()\n            optimizer.step()",
        "            grads = loss.backward()\n            optimizer.step(grads)",
    )
]


class SharedDraws:
    """``randn``, ``randn_like`` and ``randint`` of a library drawing from one seeded stream."""

    def __init__(self, seed):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        rng = np.random.default_rng(self.seed)

        def randn(*size, generator=None, dtype=None, device=None, **_):
            shape = size[0] if len(size) == 1 and not isinstance(size[0], int) else size
            return lib.tensor(rng.standard_normal(tuple(shape)), dtype=dtype or lib.float32)

        def randn_like(t, **_):
            return lib.tensor(rng.standard_normal(tuple(t.shape)), dtype=t.dtype)

        def randint(low, high, size, generator=None, **_):
            return lib.tensor(rng.integers(low, high, tuple(size)), dtype=lib.int64)

        monkeypatch.setattr(lib, "randn", randn)
        monkeypatch.setattr(lib, "randn_like", randn_like)
        monkeypatch.setattr(lib, "randint", randint)


@pytest.mark.parametrize("loss_type", ["l1", "l2", "huber"])
def test_annotated_diffusion_training_ema_and_sampling_match_torch(monkeypatch, loss_type):
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedDraws(4).patch(patch, lib)
            names = both(DDPM_SOURCE, DDPM_STEP)[0 if lib is torch else 1]
            torch.manual_seed(0)
            model = names["Unet"]()
            if initial is None:
                initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            else:
                model.load_state_dict(initial)
            rng = np.random.default_rng(1)
            data = [
                lib.tensor(rng.standard_normal((2, 1, 8, 8)), dtype=lib.float32) for _ in range(2)
            ]
            out = names["train"](model, data, 2, loss_type)
        # the last 50 sampling steps grow the image to ~1e4: compared relative to its scale
        sample = out[-1]
        out[-1] = sample / np.abs(sample).max()
        records.append(out)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- the defect found ------------------------------------------------------------------------------
NUMPY_NAMED = [
    ("sum", (), {"axis": 0}),
    ("sum", (1,), {"keepdims": True}),
    ("mean", (), {"axis": 1, "keepdims": True}),
    ("cumsum", (), {"axis": 0}),
    ("cumprod", (), {"axis": 1}),
    ("argmax", (), {"axis": 1}),
    ("max", (), {"axis": 1}),
    ("amax", (), {"axis": 0, "keepdims": True}),
    ("std", (), {"axis": 0}),
    ("var", (), {"axis": 1, "keepdims": True}),
    ("logsumexp", (), {"axis": 0}),
    ("prod", (), {"axis": 0}),
    ("softmax", (), {"axis": 1}),
    ("all", (), {"axis": 0}),
    ("sort", (), {"axis": 1}),
    ("argsort", (), {"axis": 0}),
    ("squeeze", (), {"axis": 0}),
    ("unsqueeze", (), {"axis": 2}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), NUMPY_NAMED)
def test_methods_and_functions_take_numpy_s_axis_and_keepdims_as_torch_does(name, args, kwargs):
    values = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    if name == "squeeze":
        values = values[None]
    for call in ("method", "function"):
        results = []
        for lib in (torch, rg):
            x = lib.tensor(values)
            out = (
                getattr(x, name)(*args, **kwargs)
                if call == "method"
                else getattr(lib, name)(x, *args, **kwargs)
            )
            parts = out if isinstance(out, tuple) else (out,)
            results.append([np.asarray(p.numpy(), dtype=np.float64) for p in parts])
        assert len(results[0]) == len(results[1])
        for mine, reference in zip(results[1], results[0]):
            np.testing.assert_allclose(mine, reference, rtol=1e-12, err_msg=f"{call} {name}")


def test_axis_names_on_the_creation_side_and_both_names_at_once():
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert rg.cat([x, x], axis=0).shape == torch.cat([torch.ones(2, 2)] * 2, axis=0).shape
    assert rg.stack([x, x], axis=1).shape == (2, 2, 2)
    with pytest.raises(TypeError, match="dim"):  # torch: sum() got an unexpected keyword
        x.sum(dim=0, axis=0)
