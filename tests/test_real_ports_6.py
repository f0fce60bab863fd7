"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of the Annotated Diffusion Model (a small DDPM), run under torch and, ported, under
retrograd from the same weights and draws.

Its surface: the cosine beta schedule (``torch.linspace``, ``torch.pi``, ``torch.clip``),
``torch.cumprod(alphas, axis=0)`` (NumPy's name for ``dim``), ``F.pad(..., value=1.0)``,
per-sample coefficients by ``a.gather(-1, t.cpu())`` reshaped to
``(b, *((1,) * (len(shape) - 1)))``, sinusoidal time embeddings
(``t[:, None] * freqs[None, :]``), a U-Net of ``GroupNorm``/``SiLU`` blocks with a scale and
shift from ``chunk(2, dim=1)``, attention through ``torch.einsum("b h d i, b h d j -> b h i j")``
and ``amax(...).detach()``, ``nn.Upsample``, an ``x.clone()`` skip and a list used as a stack;
the l1 / l2 / huber losses, an EMA copy made by ``copy.deepcopy(model)`` with
``requires_grad_(False)`` and updated by ``ema.data.mul_(decay).add_(p.data, alpha=1 - decay)``,
and ``@torch.no_grad()`` ancestral sampling with ``torch.full`` time steps, the final sample's
scale taken by ``amax(axis=..., keepdims=True)``.

Random draws (``randn``, ``randn_like``, ``randint``) come from one seeded stream for both.

The regression guarded: torch's arg parser takes NumPy's ``axis`` for ``dim`` and
``keepdims`` for ``keepdim`` in every native function (``torch.cumprod(a, axis=0)``,
``x.sum(axis=1, keepdims=True)``); retrograd refused them. Every guarded function with a
``dim`` or ``keepdim`` parameter now takes them (``errors.guard``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

DDPM_SOURCE = """
import copy

STEPS = 20

def cosine_betas(n, s=0.008):
    # betas from a squared-cosine curve of the cumulative alphas
    grid = torch.linspace(0, n, n + 1)
    cum = torch.cos((grid / n + s) / (1 + s) * torch.pi * 0.5) ** 2
    cum = cum / cum[0]
    return torch.clip(1 - cum[1:] / cum[:-1], 0.0001, 0.9999)

betas = cosine_betas(STEPS)
alphas = 1.0 - betas
alpha_bar = torch.cumprod(alphas, axis=0)
alpha_bar_prev = F.pad(alpha_bar[:-1], (1, 0), value=1.0)
root_alpha_bar, root_one_minus = torch.sqrt(alpha_bar), torch.sqrt(1.0 - alpha_bar)
inv_root_alpha = torch.sqrt(1.0 / alphas)
posterior_var = betas * (1.0 - alpha_bar_prev) / (1.0 - alpha_bar)

def take_at(table, t, shape):
    # table[t] per sample, shaped to broadcast over an image batch
    picked = table.gather(-1, t.cpu())
    return picked.reshape(t.shape[0], *((1,) * (len(shape) - 1))).to(t.device)

class TimeEmbedding(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.width = width

    def forward(self, t):
        half = self.width // 2
        freqs = torch.exp(torch.arange(half, device=t.device) * -(math.log(10000) / (half - 1)))
        angles = t[:, None] * freqs[None, :]
        return torch.cat((angles.sin(), angles.cos()), dim=-1)

class ConvNormAct(nn.Module):
    def __init__(self, c_in, c_out, groups=2):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm = nn.GroupNorm(groups, c_out)
        self.act = nn.SiLU()

    def forward(self, x, modulation=None):
        x = self.norm(self.conv(x))
        if modulation is not None:
            scale, shift = modulation
            x = x * (scale + 1) + shift
        return self.act(x)

class ResBlock(nn.Module):
    def __init__(self, c_in, c_out, t_dim):
        super().__init__()
        self.to_scale_shift = nn.Sequential(nn.SiLU(), nn.Linear(t_dim, 2 * c_out))
        self.a, self.b = ConvNormAct(c_in, c_out), ConvNormAct(c_out, c_out)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x, t_emb):
        scale_shift = self.to_scale_shift(t_emb)[:, :, None, None].chunk(2, dim=1)
        return self.b(self.a(x, scale_shift)) + self.skip(x)

class SelfAttention2d(nn.Module):
    def __init__(self, channels, heads=2, head_dim=4):
        super().__init__()
        self.heads, self.scale = heads, head_dim ** -0.5
        self.qkv = nn.Conv2d(channels, 3 * heads * head_dim, 1, bias=False)
        self.out = nn.Conv2d(heads * head_dim, channels, 1)

    def forward(self, x):
        b, _, h, w = x.shape
        q, k, v = (part.reshape(b, self.heads, -1, h * w) for part in self.qkv(x).chunk(3, dim=1))
        logits = torch.einsum("b h d i, b h d j -> b h i j", q * self.scale, k)
        logits = logits - logits.amax(dim=-1, keepdim=True).detach()  # stable softmax
        mixed = torch.einsum("b h i j, b h d j -> b h i d", logits.softmax(dim=-1), v)
        return self.out(mixed.permute(0, 1, 3, 2).reshape(b, -1, h, w))

class TinyUNet(nn.Module):
    def __init__(self, width=4, channels=1):
        super().__init__()
        t_dim = 4 * width
        self.stem = nn.Conv2d(channels, width, 1)
        self.time = nn.Sequential(
            TimeEmbedding(width), nn.Linear(width, t_dim), nn.GELU(), nn.Linear(t_dim, t_dim)
        )
        self.down_block = ResBlock(width, width, t_dim)
        self.down = nn.Conv2d(width, 2 * width, 4, 2, 1)  # halves the side
        self.middle = nn.ModuleList(
            [ResBlock(2 * width, 2 * width, t_dim), SelfAttention2d(2 * width)]
        )
        self.up_block = ResBlock(4 * width, 2 * width, t_dim)
        self.up = nn.Sequential(
            nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(2 * width, width, 3, padding=1)
        )
        self.last_block = ResBlock(3 * width, width, t_dim)
        self.head = nn.Conv2d(width, channels, 1)

    def forward(self, x, t):
        x = self.stem(x)
        first = x.clone()
        t_emb = self.time(t)
        saved = []
        x = self.down_block(x, t_emb)
        saved.append(x)
        x = self.down(x)
        saved.append(x)
        x = self.middle[1](self.middle[0](x, t_emb))
        x = self.up(self.up_block(torch.cat((x, saved.pop()), dim=1), t_emb))
        x = torch.cat((x, saved.pop(), first), dim=1)
        return self.head(self.last_block(x, t_emb))

def noised(x0, t, noise):
    return take_at(root_alpha_bar, t, x0.shape) * x0 + take_at(root_one_minus, t, x0.shape) * noise

def denoising_loss(model, x0, t, kind):
    noise = torch.randn_like(x0)
    guess = model(noised(x0, t, noise), t)
    losses = {"l1": F.l1_loss, "l2": F.mse_loss, "huber": F.smooth_l1_loss}
    return losses[kind](noise, guess)

@torch.no_grad()
def sample(model, shape):
    device = next(iter(model.parameters())).device
    x = torch.randn(shape, device=device)
    for i in reversed(range(STEPS)):
        t = torch.full((shape[0],), i, device=device, dtype=torch.long)
        mean = take_at(inv_root_alpha, t, x.shape) * (
            x - take_at(betas, t, x.shape) * model(x, t) / take_at(root_one_minus, t, x.shape)
        )
        if i == 0:
            return mean  # the last step adds no noise
        x = mean + torch.sqrt(take_at(posterior_var, t, x.shape)) * torch.randn_like(x)

class Averaged:
    # an exponential moving average of the weights, in a frozen copy of the model
    def __init__(self, source, decay=0.9):
        self.decay, self.model = decay, copy.deepcopy(source)
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        for slow, fast in zip(self.model.parameters(), model.parameters()):
            slow.data.mul_(self.decay).add_(fast.data, alpha=1 - self.decay)

def train(model, data, epochs, kind):
    opt = optim.Adam(model.parameters(), lr=1e-3)
    ema = Averaged(model)
    log = []
    for _ in range(epochs):
        for x0 in data:
            opt.zero_grad()
            t = torch.randint(0, STEPS, (x0.shape[0],)).long()
            loss = denoising_loss(model, x0, t, kind)
            loss.backward()
            opt.step()
            ema.update(model)
            log.append(loss.item())
    log.append({n: p.detach().numpy().copy() for n, p in ema.model.named_parameters()})
    final = sample(ema.model, (2, 1, 8, 8))
    log.append((final / final.abs().amax(axis=(1, 2, 3), keepdims=True)).numpy())
    return log
"""

DDPM_STEP = [
    (
        "            loss.backward()\n            opt.step()",
        "            grads = loss.backward()\n            opt.step(grads)",
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
def test_small_ddpm_training_ema_and_sampling_match_torch(monkeypatch, loss_type):
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedDraws(4).patch(patch, lib)
            names = both(DDPM_SOURCE, DDPM_STEP)[0 if lib is torch else 1]
            torch.manual_seed(0)
            model = names["TinyUNet"]()
            if initial is None:
                initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            else:
                model.load_state_dict(initial)
            rng = np.random.default_rng(1)
            data = [
                lib.tensor(rng.standard_normal((2, 1, 8, 8)), dtype=lib.float32) for _ in range(2)
            ]
            records.append(names["train"](model, data, 2, loss_type))
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
