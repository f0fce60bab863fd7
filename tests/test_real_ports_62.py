"""Real ports, continued from ``tests/test_real_ports_61.py`` (the harness:
``tests/real_ports.py``): programs written here in the style of golbin/WaveNet (with
torchaudio's mu-law functions), lucidrains' perceiver-pytorch, mlp-mixer-pytorch and
g-mlp-pytorch, and rosinality/glow-pytorch:

- a WaveNet on two short mu-law encoded waves with 16 quantization channels: mu-law
  companding as torchaudio writes it (``torch.sign``, ``torch.log1p`` of a 0-d
  ``torch.tensor(mu)``, ``.to(torch.int64)``), one-hot codes by NumPy fancy assignment, the
  kernel-2 causal convolution with ``output[:, :, :-1]``, dilated convolutions (dilations 1,
  2, 4, twice), gated ``Tanh``/``Sigmoid`` residual blocks with ``res += x[:, :, -n:]`` and
  skips cut by ``skip[:, :, -keep:]``, ``torch.stack`` of the skips summed by ``torch.sum(...,
  dim=0)``, a ``Softmax`` output fed to ``CrossEntropyLoss`` (as that project does),
  ``probs.view(-1, channels)`` of a ``.transpose(1, 2).contiguous()``, Adam, sample-by-sample
  generation by ``argmax`` and ``F.one_hot``, and the too-short-input error's message.
- a Perceiver under a classification loop on 4x4 random images with masks, with and without
  tied weights (a caching closure handing the same modules to every layer past the first:
  tied parameters listed once): Fourier features with ``freqs[(*((None,) * (len(x.shape) -
  1)), Ellipsis)]``, ``torch.meshgrid(..., indexing="ij")``, a ``PreNorm`` normalising the
  context through ``kwargs.update``, ``GEGLU``, ``einsum("b i d, b j d -> b i j")``,
  ``sim.masked_fill_(~mask, -torch.finfo(sim.dtype).max)``, ``b, *axis, _, device, dtype =
  *data.shape, data.device, data.dtype`` and ``return_embeddings``, with einops'
  ``rearrange``/``repeat`` and its ``Reduce`` layer.
- an MLP-Mixer and a gMLP: the Mixer's token mixing by ``partial(nn.Conv1d, kernel_size=1)``
  over the patches, einops' ``Rearrange`` layer, AdamW and
  ``CrossEntropyLoss(label_smoothing=0.1)``; gMLP as a causal language model with the tiny
  attention (``attn_dim``), two heads, token shifts (``F.pad(t, (0, 0, amount, -amount))``
  cropping by a negative pad), the spatial gate's ``nn.init.uniform_`` weights,
  ``triu(1).bool()``/``triu_(1).bool()`` masks, ``einsum("b h n d, h m n -> b h m d")``, and
  the circulant-matrix variant (``F.pad``, einops' ``repeat``, ``w[:, :-n].reshape(h, n, 2 * n
  - 1)``), with ``act=nn.Tanh()``.
- a Glow on 4x4 images (two levels of two flow steps, coupling networks of 8 filters), with
  the LU-decomposed 1x1 convolution and affine coupling and with the plain one and additive
  coupling: ``ActNorm``'s data-dependent initialization under ``torch.no_grad()``
  (``per_channel.std(1)``, ``self.loc.data.copy_(-mean)``, ``self.initialized.fill_(1)`` of a
  ``torch.tensor(0, dtype=torch.uint8)`` flag), the LU convolution built from
  ``scipy.linalg.qr``/``lu`` and ``torch.from_numpy`` buffers, ``torch.qr``,
  ``torch.slogdet(...double())[1].float()``, ``.inverse()`` in ``reverse``, a zero-initialised
  convolution over ``F.pad(x, [1, 1, 1, 1], value=1)``, the squeeze by ``view``/``permute``/
  ``contiguous().view``, ``self.flows[::-1]`` and ``self.blocks[::-1]`` of ``ModuleList``s,
  the loss in bits per dimension, the ``n_bits`` dequantization with ``torch.rand_like``,
  sampling from ``torch.randn`` latents at temperature 0.7 and a reconstruction from the
  model's own latents. The draws (``randn``, ``rand_like``) come from one seeded stream in
  both runs.

Defects found and fixed: ``torch.qr(A, some)``, ``torch.svd(A, some, compute_uv)`` and
``torch.lu_solve(b, LU_data, LU_pivots)`` (deprecated in torch, still there and in real code:
Glow's plain 1x1 convolution calls ``torch.qr``) were missing, and their ``Tensor`` methods
too (``AttributeError``): they are ``rg.linalg``'s factorizations in torch's old forms now.

ActNorm's uint8 flag runs as written since retrograd has uint8 tensors (4 December; it was
ported as int64 before): only the gradient lines and imports change.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

GRADIENT_STEPS = [
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def run_both(source, steps, call, **names):
    """The records of ``source`` run under torch and of its port under retrograd, each given
    ``initialize`` (torch's weights in both) and the other ``names``; ``call(names, lib)``
    drives the program."""
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else port(source, steps)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        namespace = run_source(text, lib, record=record, initialize=initialize, **names)
        call(namespace, lib)
        records.append(record)
    return records


# -- WaveNet ---------------------------------------------------------------------------------------
WAVENET_SOURCE = """
# -- mu-law companding, as torchaudio's functional module has it --
def mu_law_encode(wave, channels):
    mu = channels - 1.0
    if not wave.is_floating_point():
        wave = wave.to(torch.float)
    mu = torch.tensor(mu, dtype=wave.dtype)
    squashed = torch.sign(wave) * torch.log1p(mu * torch.abs(wave)) / torch.log1p(mu)
    return ((squashed + 1) / 2 * mu + 0.5).to(torch.int64)


def mu_law_decode(codes, channels):
    mu = channels - 1.0
    if not codes.is_floating_point():
        codes = codes.to(torch.float)
    mu = torch.tensor(mu, dtype=codes.dtype)
    y = codes / mu * 2 - 1.0
    return torch.sign(y) * (torch.exp(torch.abs(y) * torch.log1p(mu)) - 1.0) / mu


def to_one_hot(codes, channels):
    flat = np.zeros((codes.size, channels), dtype=float)
    flat[np.arange(codes.size), codes.ravel()] = 1
    return flat


class TooShortError(Exception):
    def __init__(self, length, receptive_field):
        super().__init__(
            f"a wave of {length} samples is too short: the receptive field is "
            f"{receptive_field} samples, so no output would be left"
        )


# -- the network --
class CausalConv(torch.nn.Module):
    "Kernel 2, padded on both sides and the last output dropped: y[t] sees x[t - 1] and x[t]."

    def __init__(self, n_in, n_out):
        super().__init__()
        self.conv = torch.nn.Conv1d(n_in, n_out, kernel_size=2, stride=1, padding=1, bias=False)

    def forward(self, x):
        return self.conv(x)[:, :, :-1]


class GatedBlock(torch.nn.Module):
    "Dilated kernel-2 convolution, tanh * sigmoid gate, 1x1 residual and skip outputs."

    def __init__(self, res_channels, skip_channels, dilation):  # dilation: 1, 2, 4, ...
        super().__init__()
        self.dilated = torch.nn.Conv1d(
            res_channels, res_channels, kernel_size=2, dilation=dilation, bias=False
        )
        self.to_res = torch.nn.Conv1d(res_channels, res_channels, 1)
        self.to_skip = torch.nn.Conv1d(res_channels, skip_channels, 1)
        self.tanh, self.sigmoid = torch.nn.Tanh(), torch.nn.Sigmoid()

    def forward(self, x, keep):
        h = self.dilated(x)
        gated = self.tanh(h) * self.sigmoid(h)
        res = self.to_res(gated)
        res += x[:, :, -res.size(2) :]  # the dilation shortened the sequence
        return res, self.to_skip(gated)[:, :, -keep:]


class WaveNet(torch.nn.Module):  # dilated stacks, repeated
    def __init__(self, depth, repeats, channels, res_channels):
        super().__init__()
        dilations = [2**i for i in range(depth)] * repeats
        self.receptive_field = int(np.sum(dilations))
        self.causal = CausalConv(channels, res_channels)
        self.blocks = torch.nn.ModuleList(
            [GatedBlock(res_channels, channels, d) for d in dilations]
        )
        self.post = torch.nn.Sequential(
            torch.nn.ReLU(),
            torch.nn.Conv1d(channels, channels, 1),
            torch.nn.ReLU(),
            torch.nn.Conv1d(channels, channels, 1),
            torch.nn.Softmax(dim=1),
        )

    def forward(self, x):
        "x: (batch, time, channels) one-hot; the result: (batch, time - field, channels)."
        x = x.transpose(1, 2)
        keep = int(x.size(2)) - self.receptive_field
        if keep < 1:
            raise TooShortError(int(x.size(2)), self.receptive_field)
        h = self.causal(x)
        skips = []
        for block in self.blocks:
            h, skip = block(h, keep)
            skips.append(skip)
        out = self.post(torch.sum(torch.stack(skips), dim=0))
        return out.transpose(1, 2).contiguous()


class Trainer:
    "Adam on the cross entropy of the network's softmax output (a softmax fed to the loss)."

    def __init__(self, depth, repeats, channels, res_channels, lr):
        self.channels = channels
        self.net = WaveNet(depth, repeats, channels, res_channels)
        initialize(self.net)
        self.criterion = torch.nn.CrossEntropyLoss()
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=lr)

    def step(self, inputs, targets):
        probs = self.net(inputs)
        loss = self.criterion(probs.view(-1, self.channels), targets.long().view(-1))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


def main(audio, steps, channels=16):
    trainer = Trainer(depth=3, repeats=2, channels=channels, res_channels=8, lr=0.01)
    field = trainer.net.receptive_field
    codes = mu_law_encode(torch.from_numpy(audio), channels)
    record.append(codes.numpy().copy())
    record.append(mu_law_decode(codes, channels).numpy().copy())
    one_hot = to_one_hot(codes.numpy(), channels).reshape(*audio.shape, channels)
    inputs = torch.from_numpy(one_hot).float()
    targets = codes[:, field + 1 :].contiguous()
    for _ in range(steps):
        record.append(trainer.step(inputs[:, :-1], targets))
    record.append({k: w.detach().numpy().copy() for k, w in trainer.net.named_parameters()})

    # sampling: the most likely next code, fed back one-hot, four times
    with torch.no_grad():
        context = inputs[:1, -(field + 1) :]
        drawn = []
        for _ in range(4):
            code = trainer.net(context)[:, -1].argmax(dim=-1)
            drawn.append(code.item())
            step_in = F.one_hot(code, channels).float().unsqueeze(1)
            context = torch.cat([context[:, 1:], step_in], dim=1)
        record.append(drawn)
        record.append(mu_law_decode(torch.tensor(drawn), channels).numpy().copy())
    try:
        trainer.net(inputs[:, :field])
    except TooShortError as error:
        record.append(str(error))
"""


WAVENET_STEPS = [
    (
        "        loss.backward()\n        self.optimizer.step()\n",
        "        grads = loss.backward()\n        self.optimizer.step(grads)\n",
    ),
]


def test_wavenet_trains_as_torch():
    rng = np.random.default_rng(6201)
    t = np.linspace(0, 1, 24, dtype=np.float32)
    audio = (0.6 * np.sin(2 * np.pi * 3 * t) + 0.1 * rng.standard_normal((2, 24))).astype(
        np.float32
    )
    records = run_both(
        WAVENET_SOURCE,
        WAVENET_STEPS,
        lambda names, lib: names["main"](audio, 4),
    )
    assert "the receptive field is 14 samples" in records[0][-1]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- Perceiver -------------------------------------------------------------------------------------
PERCEIVER_SOURCE = """
import math
from functools import wraps

from einops import rearrange as arrange, repeat as tile
from einops.layers.torch import Reduce  # the mean over the latents


def given(x):
    return x is not None


def or_else(x, fallback):
    return x if given(x) else fallback


def once_per_key(build):
    "build(...) called once per key when asked to cache: later calls get the same module."
    made = {}

    @wraps(build)
    def get(*args, _cache=True, key=None, **kwargs):
        if not _cache:
            return build(*args, **kwargs)
        if key not in made:
            made[key] = build(*args, **kwargs)
        return made[key]

    return get


def fourier_features(pos, max_freq, bands):
    "pos (..., axes) -> (..., axes, 2 * bands + 1): sines, cosines and the position itself."
    pos = pos.unsqueeze(-1)
    freqs = torch.linspace(1.0, max_freq / 2, bands, device=pos.device, dtype=pos.dtype)
    freqs = freqs[(*((None,) * (len(pos.shape) - 1)), Ellipsis)]  # broadcast over pos
    angles = pos * freqs * math.pi
    return torch.cat([angles.sin(), angles.cos(), pos], dim=-1)


class PreNorm(nn.Module):
    "LayerNorm of the input, and of the context when there is one, before fn."

    def __init__(self, dim, fn, context_dim=None):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)
        self.context_norm = nn.LayerNorm(context_dim) if given(context_dim) else None

    def forward(self, x, **kwargs):  # kwargs: context=, mask=
        if given(self.context_norm):
            kwargs.update(context=self.context_norm(kwargs["context"]))
        return self.fn(self.norm(x), **kwargs)


class GEGLU(nn.Module):
    def forward(self, x):
        h, gate = x.chunk(2, dim=-1)
        return h * F.gelu(gate)


def feed_forward(dim, mult=4, dropout=0.0):
    return nn.Sequential(
        nn.Linear(dim, 2 * dim * mult), GEGLU(), nn.Linear(dim * mult, dim), nn.Dropout(dropout)
    )


class Attention(nn.Module):
    def __init__(self, dim, context_dim=None, heads=8, dim_head=64, dropout=0.0):
        super().__init__()
        inner = heads * dim_head
        self.heads, self.scale = heads, dim_head**-0.5
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_kv = nn.Linear(or_else(context_dim, dim), 2 * inner, bias=False)
        self.drop = nn.Dropout(dropout)
        self.to_out = nn.Linear(inner, dim)

    def forward(self, x, context=None, mask=None):
        context = or_else(context, x)
        split = lambda t: arrange(t, "b n (h d) -> (b h) n d", h=self.heads)
        q = split(self.to_q(x))
        k, v = map(split, self.to_kv(context).chunk(2, dim=-1))
        sim = torch.einsum("b i d, b j d -> b i j", q, k) * self.scale
        if given(mask):
            mask = tile(arrange(mask, "b ... -> b (...)"), "b j -> (b h) () j", h=self.heads)
            sim.masked_fill_(~mask, -torch.finfo(sim.dtype).max)
        weights = self.drop(sim.softmax(dim=-1))
        out = torch.einsum("b i j, b j d -> b i d", weights, v)
        return self.to_out(arrange(out, "(b h) n d -> b n (h d)", h=self.heads))


class Perceiver(nn.Module):
    def __init__(
        self, *, bands, depth, max_freq, channels=3, axes=2, latents=16, latent_dim=32,
        cross_heads=1, latent_heads=4, cross_dim_head=8, latent_dim_head=8, classes=10,
        self_per_cross=1, tie_weights=False,
    ):
        super().__init__()
        self.axes, self.max_freq, self.bands = axes, max_freq, bands
        input_dim = channels + axes * (2 * bands + 1)
        self.latents = nn.Parameter(torch.randn(latents, latent_dim))

        cross_attn = once_per_key(lambda: PreNorm(
            latent_dim, Attention(latent_dim, input_dim, cross_heads, cross_dim_head), input_dim
        ))
        cross_ff = once_per_key(lambda: PreNorm(latent_dim, feed_forward(latent_dim)))
        self_attn = once_per_key(
            lambda: PreNorm(latent_dim, Attention(latent_dim, None, latent_heads, latent_dim_head))
        )
        self_ff = once_per_key(lambda: PreNorm(latent_dim, feed_forward(latent_dim)))

        self.layers = nn.ModuleList()
        for i in range(depth):
            share = {"_cache": tie_weights and i > 0}  # layers past the first reuse the second's
            inner = nn.ModuleList([
                nn.ModuleList([self_attn(**share, key=j), self_ff(**share, key=j)])
                for j in range(self_per_cross)
            ])
            self.layers.append(nn.ModuleList([cross_attn(**share), cross_ff(**share), inner]))

        self.head = nn.Sequential(
            Reduce("b n d -> b d", "mean"), nn.LayerNorm(latent_dim), nn.Linear(latent_dim, classes)
        )

    def forward(self, data, mask=None, return_embeddings=False):
        b, *axis, _, device, dtype = *data.shape, data.device, data.dtype  # all at once
        assert len(axis) == self.axes, "one axis per spatial dimension, then the channels"
        grids = [torch.linspace(-1.0, 1.0, steps=n, device=device, dtype=dtype) for n in axis]
        pos = torch.stack(torch.meshgrid(*grids, indexing="ij"), dim=-1)
        enc = arrange(fourier_features(pos, self.max_freq, self.bands), "... n d -> ... (n d)")
        data = torch.cat((data, tile(enc, "... -> b ...", b=b)), dim=-1)
        data = arrange(data, "b ... d -> b (...) d")

        x = tile(self.latents, "n d -> b n d", b=b)
        for cross_attn, cross_ff, inner in self.layers:
            x = x + cross_attn(x, context=data, mask=mask)
            x = x + cross_ff(x)
            for self_attn, self_ff in inner:
                x = x + self_attn(x)
                x = x + self_ff(x)
        return x if return_embeddings else self.head(x)


def main(images, labels, masks, steps, tie_weights):
    model = Perceiver(
        channels=3, axes=2, bands=3, max_freq=4.0, depth=3, latents=4, latent_dim=8,
        cross_heads=1, latent_heads=2, cross_dim_head=4, latent_dim_head=4, classes=3,
        self_per_cross=2, tie_weights=tie_weights,
    )
    initialize(model)
    record.append(len(list(model.parameters())))  # tied modules are listed once
    record.append(list(model.state_dict()))  # the names, in order
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    for step in range(steps):
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images, mask=masks), labels)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    model.eval()
    with torch.no_grad():
        record.append(model(images).numpy().copy())  # logits
        record.append(model(images, return_embeddings=True).numpy().copy())  # latents
    record.append({k: w.detach().numpy().copy() for k, w in model.named_parameters()})
"""

PERCEIVER_STEPS = [
    ("from einops.layers.torch import Reduce", "from einops.layers.retrograd import Reduce"),
    *GRADIENT_STEPS,
]


@pytest.mark.parametrize("tie_weights", [False, True])
def test_perceiver_trains_as_torch(tie_weights):
    rng = np.random.default_rng(6202)
    images = rng.standard_normal((3, 4, 4, 3)).astype(np.float32)
    labels = rng.integers(0, 3, 3)
    masks = rng.uniform(size=(3, 4, 4)) > 0.3
    masks[:, 0, 0] = True

    def call(names, lib):
        names["main"](lib.tensor(images), lib.tensor(labels), lib.tensor(masks), 4, tie_weights)

    records = run_both(PERCEIVER_SOURCE, PERCEIVER_STEPS, call)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- MLP-Mixer and gMLP ----------------------------------------------------------------------------
MIXER_SOURCE = """
from functools import partial

from einops import rearrange as arrange, repeat as tile
from einops.layers.torch import Reduce, Rearrange


# -- an MLP-Mixer image classifier --
def as_pair(x):
    return x if isinstance(x, tuple) else (x, x)


class NormThenAdd(nn.Module):
    "x + fn(LayerNorm(x))"

    def __init__(self, dim, fn):
        super().__init__()
        self.norm, self.fn = nn.LayerNorm(dim), fn

    def forward(self, x):
        return x + self.fn(self.norm(x))


def mlp(width, factor, dropout, layer):
    hidden = int(width * factor)
    return nn.Sequential(
        layer(width, hidden),
        nn.GELU(),
        nn.Dropout(dropout),
        layer(hidden, width),
        nn.Dropout(dropout),
    )


def mixer(*, image_size, channels, patch, dim, depth, classes, token_factor=4, channel_factor=0.5,
          dropout=0.0):
    h, w = as_pair(image_size)
    assert h % patch == 0 and w % patch == 0, "the patches must tile the image"
    patches = (h // patch) * (w // patch)
    across_patches = partial(nn.Conv1d, kernel_size=1)  # mixes along the patch axis
    blocks = [
        nn.Sequential(
            NormThenAdd(dim, mlp(patches, token_factor, dropout, across_patches)),
            NormThenAdd(dim, mlp(dim, channel_factor, dropout, nn.Linear)),
        )
        for _ in range(depth)
    ]
    return nn.Sequential(
        Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch, p2=patch),
        nn.Linear(patch * patch * channels, dim),
        *blocks,
        nn.LayerNorm(dim),
        Reduce("b n c -> b c", "mean"),
        nn.Linear(dim, classes),
    )


# -- a gMLP causal language model --
def given(x):
    return x is not None


def shift_tokens(t, amount):
    "Move the sequence amount steps later (earlier if negative), zeros filling in."
    if amount == 0:
        return t
    return F.pad(t, (0, 0, amount, -amount), value=0.0)


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return x + self.fn(x)


class Normed(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm, self.fn = nn.LayerNorm(dim), fn

    def forward(self, x):
        return self.fn(self.norm(x))


class ShiftedSlices(nn.Module):
    "The features cut into one slice per shift, each slice shifted along the sequence."

    def __init__(self, shifts, fn):  # shifts: e.g. (0, 1)
        super().__init__()
        self.shifts, self.fn = tuple(shifts), fn

    def forward(self, x):
        if self.shifts == (0,):
            return self.fn(x)
        n = len(self.shifts)
        pieces = x.split(x.shape[-1] // n, dim=-1)
        moved = [shift_tokens(piece, s) for piece, s in zip(pieces[:n], self.shifts)]
        return self.fn(torch.cat((*moved, *pieces[n:]), dim=-1))


class TinyAttention(nn.Module):
    def __init__(self, dim, dim_out, inner, causal=False):
        super().__init__()
        self.scale, self.causal = inner**-0.5, causal
        self.qkv = nn.Linear(dim, 3 * inner, bias=False)
        self.out = nn.Linear(inner, dim_out)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        sim = torch.einsum("b i d, b j d -> b i j", q, k) * self.scale
        if self.causal:
            future = torch.ones(sim.shape[-2:], device=x.device).triu(1).bool()
            sim.masked_fill_(future[None, ...], -torch.finfo(q.dtype).max)
        return self.out(torch.einsum("b i j, b j d -> b i d", sim.softmax(dim=-1), v))


class SpatialGate(nn.Module):
    "Half the features gate the other half after a learned mixing along the sequence."

    def __init__(self, dim, seq_len, causal=False, act=nn.Identity(), heads=1, eps=1e-3,
                 circulant=False):
        super().__init__()
        self.heads, self.causal, self.circulant, self.act = heads, causal, circulant, act
        self.norm = nn.LayerNorm(dim // 2)
        if circulant:
            self.row_scale = nn.Parameter(torch.ones(heads, seq_len))
            self.col_scale = nn.Parameter(torch.ones(heads, seq_len))
        shape = (heads, seq_len) if circulant else (heads, seq_len, seq_len)
        self.weight = nn.Parameter(torch.zeros(shape))
        nn.init.uniform_(self.weight, -eps / seq_len, eps / seq_len)  # near identity gating
        self.bias = nn.Parameter(torch.ones(heads, seq_len))

    def mixing_matrix(self):
        w, h = self.weight, self.heads
        if not self.circulant:
            return w
        n = w.shape[-1]
        # each row the previous one shifted right: tile [w, 0...] and cut rows of 2n - 1
        w = tile(F.pad(w, (0, n), value=0), "... n -> ... (r n)", r=n)
        w = w[:, :-n].reshape(h, n, 2 * n - 1)[:, :, n - 1 :]
        rows = arrange(self.row_scale, "h i -> h i ()")
        return w * rows * arrange(self.col_scale, "h j -> h () j")

    def forward(self, x, extra=None):
        n = x.shape[1]
        keep, gate = x.chunk(2, dim=-1)
        gate = self.norm(gate)
        w, b = self.mixing_matrix(), self.bias
        if self.causal:
            w, b = w[:, :n, :n], b[:, :n]
            future = torch.ones(w.shape[-2:], device=x.device).triu_(1).bool()
            w = w.masked_fill(arrange(future, "i j -> () i j"), 0.0)
        gate = arrange(gate, "b n (h d) -> b h n d", h=self.heads)
        gate = torch.einsum("b h n d, h m n -> b h m d", gate, w)
        gate = arrange(gate + arrange(b, "h n -> () h n ()"), "b h n d -> b n (h d)")
        if given(extra):
            gate = gate + extra
        return self.act(gate) * keep


class GatedBlock(nn.Module):
    def __init__(self, *, dim, hidden, seq_len, heads=1, attn_dim=None, causal=False,
                 act=nn.Identity(), circulant=False):
        super().__init__()
        self.up = nn.Sequential(nn.Linear(dim, hidden), nn.GELU())
        self.attn = TinyAttention(dim, hidden // 2, attn_dim, causal) if given(attn_dim) else None
        self.gate = SpatialGate(hidden, seq_len, causal, act, heads, circulant=circulant)
        self.down = nn.Linear(hidden // 2, dim)

    def forward(self, x):
        extra = self.attn(x) if given(self.attn) else None
        return self.down(self.gate(self.up(x), extra=extra))


class GatedMLP(nn.Module):
    def __init__(self, *, vocab, dim, depth, seq_len, heads=1, mult=4, attn_dim=None,
                 causal=True, circulant=False, shift=0, act=nn.Identity()):
        super().__init__()
        assert dim % heads == 0
        shifts = tuple(range(0 if causal else -shift, shift + 1))
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([
            Residual(Normed(dim, ShiftedSlices(shifts, GatedBlock(
                dim=dim, hidden=dim * mult, seq_len=seq_len, heads=heads, attn_dim=attn_dim,
                causal=causal, act=act, circulant=circulant,
            ))))
            for _ in range(depth)
        ])
        self.logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, vocab))

    def forward(self, ids):
        return self.logits(nn.Sequential(*self.layers)(self.embed(ids)))


# -- the training loops --
def fit_mixer(images, labels, steps):
    model = mixer(image_size=(4, 6), channels=3, patch=2, dim=8, depth=2, classes=3)
    initialize(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05)
    smoothed_ce = nn.CrossEntropyLoss(label_smoothing=0.1)
    for step in range(steps):
        optimizer.zero_grad()
        loss = smoothed_ce(model(images), labels)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append({k: w.detach().numpy().copy() for k, w in model.named_parameters()})


def fit_gmlp(tokens, steps, **options):
    model = GatedMLP(vocab=7, dim=8, depth=2, seq_len=tokens.shape[1] - 1, **options)
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for step in range(steps):
        model.train()
        optimizer.zero_grad()
        logits = model(tokens[:, :-1])  # predict each next token
        loss = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:])  # (B, V, T)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    model.eval()
    with torch.no_grad():
        record.append(model(tokens[:, :-1]).argmax(dim=-1).tolist())  # greedy guesses
    record.append({k: w.detach().numpy().copy() for k, w in model.named_parameters()})
"""

MIXER_STEPS = [
    (
        "from einops.layers.torch import Reduce, Rearrange",
        "from einops.layers.retrograd import Reduce, Rearrange",
    ),
    *GRADIENT_STEPS,
]


def test_mlp_mixer_and_gmlp_train_as_torch():
    rng = np.random.default_rng(6203)
    images = rng.standard_normal((3, 3, 4, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 3)
    tokens = rng.integers(0, 7, (2, 7))

    def call(names, lib):
        names["fit_mixer"](lib.tensor(images), lib.tensor(labels), 3)
        names["fit_gmlp"](lib.tensor(tokens), 3, heads=2, attn_dim=4, shift=1)
        names["fit_gmlp"](lib.tensor(tokens), 3, circulant=True, act=names["nn"].Tanh())

    records = run_both(MIXER_SOURCE, MIXER_STEPS, call)
    # the token-mixing convolutions' output biases add one value per patch along the features,
    # which the next block's LayerNorm removes: their true gradient is zero, and Adam's steps
    # follow each library's rounding noise
    skip = ("2.0.fn.3.bias", "3.0.fn.3.bias")
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5, skip=skip)


# -- Glow ------------------------------------------------------------------------------------------
GLOW_SOURCE = """
import math

from scipy import linalg as sla


def log_abs(x):
    return torch.log(torch.abs(x))


class ActNorm(nn.Module):
    "Per-channel affine map, initialised from the first batch to zero mean and unit spread."

    def __init__(self, channels):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.scale = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))  # a flag

    def data_init(self, x):
        with torch.no_grad():
            per_channel = x.permute(1, 0, 2, 3).contiguous().view(x.shape[1], -1)
            mean = per_channel.mean(1).view(1, -1, 1, 1)
            std = per_channel.std(1).view(1, -1, 1, 1)
            self.loc.data.copy_(-mean)
            self.scale.data.copy_(1 / (std + 1e-6))  # unit spread afterwards

    def forward(self, x):
        if self.initialized.item() == 0:  # the first batch seen
            self.data_init(x)
            self.initialized.fill_(1)
        pixels = x.shape[2] * x.shape[3]
        return self.scale * (x + self.loc), pixels * torch.sum(log_abs(self.scale))

    def reverse(self, y):
        return y / self.scale - self.loc


class Conv1x1(nn.Module):
    "An invertible 1x1 convolution from a random rotation; log|det| by slogdet in double."

    def __init__(self, channels):
        super().__init__()
        q, _ = torch.qr(torch.randn(channels, channels))
        self.weight = nn.Parameter(q.unsqueeze(2).unsqueeze(3))

    def forward(self, x):
        w = self.weight.squeeze()
        logdet = x.shape[2] * x.shape[3] * torch.slogdet(w.double())[1].float()
        return F.conv2d(x, self.weight), logdet

    def reverse(self, y):
        return F.conv2d(y, self.weight.squeeze().inverse().unsqueeze(2).unsqueeze(3))


class Conv1x1LU(nn.Module):
    "The same map kept as P L (U + diag(sign * exp(log_s))): log|det| is sum(log_s)."

    def __init__(self, channels):
        super().__init__()
        rotation, _ = sla.qr(np.random.randn(channels, channels))
        p, lower, upper = sla.lu(rotation.astype(np.float32))
        s = np.diag(upper)
        above = np.triu(np.ones_like(upper), 1)
        self.register_buffer("perm", torch.from_numpy(p))
        self.register_buffer("upper_mask", torch.from_numpy(above))
        self.register_buffer("lower_mask", torch.from_numpy(above.T))
        self.register_buffer("sign_s", torch.sign(torch.from_numpy(s)))
        self.register_buffer("eye", torch.eye(channels))
        self.lower = nn.Parameter(torch.from_numpy(lower))
        self.log_s = nn.Parameter(log_abs(torch.from_numpy(s)))
        self.upper = nn.Parameter(torch.from_numpy(np.triu(upper, 1)))

    def matrix(self):
        lower = self.lower * self.lower_mask + self.eye
        upper = self.upper * self.upper_mask + torch.diag(self.sign_s * torch.exp(self.log_s))
        return self.perm @ lower @ upper

    def forward(self, x):
        logdet = x.shape[2] * x.shape[3] * torch.sum(self.log_s)
        return F.conv2d(x, self.matrix().unsqueeze(2).unsqueeze(3)), logdet

    def reverse(self, y):
        return F.conv2d(y, self.matrix().inverse().unsqueeze(2).unsqueeze(3))


class ZeroInitConv(nn.Module):
    "3x3 convolution over a border of ones, starting at zero, scaled by exp(3 * scale)."

    def __init__(self, n_in, n_out):
        super().__init__()
        self.conv = nn.Conv2d(n_in, n_out, 3, padding=0)
        self.conv.weight.data.zero_()
        self.conv.bias.data.zero_()
        self.scale = nn.Parameter(torch.zeros(1, n_out, 1, 1))

    def forward(self, x):
        return self.conv(F.pad(x, [1, 1, 1, 1], value=1)) * torch.exp(3 * self.scale)


class Coupling(nn.Module):
    "The second half of the channels moved by a network of the first (affine or additive)."

    def __init__(self, channels, width, affine=True):
        super().__init__()
        self.affine = affine
        self.net = nn.Sequential(
            nn.Conv2d(channels // 2, width, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 1),
            nn.ReLU(inplace=True),
            ZeroInitConv(width, channels if affine else channels // 2),
        )
        for i in (0, 2):
            self.net[i].weight.data.normal_(0, 0.05)
            self.net[i].bias.data.zero_()

    def forward(self, x):
        a, b = x.chunk(2, 1)
        if not self.affine:
            return torch.cat([a, b + self.net(a)], 1), None
        raw_scale, shift = self.net(a).chunk(2, 1)
        scale = F.sigmoid(raw_scale + 2)
        logdet = torch.sum(torch.log(scale).view(x.shape[0], -1), 1)
        return torch.cat([a, (b + shift) * scale], 1), logdet

    def reverse(self, y):
        a, b = y.chunk(2, 1)
        if not self.affine:
            return torch.cat([a, b - self.net(a)], 1)
        raw_scale, shift = self.net(a).chunk(2, 1)
        return torch.cat([a, b / F.sigmoid(raw_scale + 2) - shift], 1)


class FlowStep(nn.Module):
    def __init__(self, channels, width, affine=True, lu=True):
        super().__init__()
        self.norm = ActNorm(channels)
        self.mix = Conv1x1LU(channels) if lu else Conv1x1(channels)
        self.coupling = Coupling(channels, width, affine=affine)

    def forward(self, x):
        x, logdet = self.norm(x)
        x, det = self.mix(x)
        x, det_c = self.coupling(x)
        logdet = logdet + det
        return x, logdet if det_c is None else logdet + det_c

    def reverse(self, y):
        return self.norm.reverse(self.mix.reverse(self.coupling.reverse(y)))


def normal_log_density(x, mean, log_sd):
    return -0.5 * math.log(2 * math.pi) - log_sd - 0.5 * (x - mean) ** 2 / torch.exp(2 * log_sd)


def squeeze2(x):
    "(b, c, h, w) -> (b, 4c, h/2, w/2)"
    b, c, h, w = x.shape
    x = x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
    return x.contiguous().view(b, c * 4, h // 2, w // 2)


def unsqueeze2(x):
    b, c, h, w = x.shape
    x = x.view(b, c // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.contiguous().view(b, c // 4, h * 2, w * 2)


class Level(nn.Module):
    "Squeeze, K flow steps, then half the channels factored out under a learned prior."

    def __init__(self, channels, steps, width, split=True, affine=True, lu=True):
        super().__init__()
        self.split = split
        self.flows = nn.ModuleList(
            [FlowStep(4 * channels, width, affine=affine, lu=lu) for _ in range(steps)]
        )
        if split:  # the kept half predicts the mean and log-sd of the factored-out half
            self.prior = ZeroInitConv(2 * channels, 4 * channels)
        else:  # a learned constant prior, computed from zeros
            self.prior = ZeroInitConv(4 * channels, 8 * channels)

    def forward(self, x):
        h = squeeze2(x)
        logdet = 0
        for flow in self.flows:
            h, det = flow(h)
            logdet = logdet + det
        if self.split:
            h, z = h.chunk(2, 1)
            mean, log_sd = self.prior(h).chunk(2, 1)
        else:
            z = h
            mean, log_sd = self.prior(torch.zeros_like(h)).chunk(2, 1)
        log_p = normal_log_density(z, mean, log_sd).view(x.shape[0], -1).sum(1)
        return h, logdet, log_p, z

    def reverse(self, h, z, reconstruct=False):
        if reconstruct:  # z is the latent itself
            h = torch.cat([h, z], 1) if self.split else z
        else:  # z is unit noise, scaled by the prior
            mean, log_sd = self.prior(h if self.split else torch.zeros_like(h)).chunk(2, 1)
            z = mean + torch.exp(log_sd) * z
            h = torch.cat([h, z], 1) if self.split else z
        for flow in self.flows[::-1]:
            h = flow.reverse(h)
        return unsqueeze2(h)


class Glow(nn.Module):
    def __init__(self, channels, steps, levels, width, affine=True, lu=True):
        super().__init__()
        self.blocks = nn.ModuleList()
        for _ in range(levels - 1):
            self.blocks.append(Level(channels, steps, width, affine=affine, lu=lu))
            channels *= 2
        self.blocks.append(Level(channels, steps, width, split=False, affine=affine))

    def forward(self, x):
        log_p, logdet, zs = 0, 0, []
        for block in self.blocks:
            x, det, lp, z = block(x)
            zs.append(z)
            logdet = logdet + det
            log_p = log_p + lp
        return log_p, logdet, zs

    def reverse(self, zs, reconstruct=False):
        h = zs[-1]
        for i, block in enumerate(self.blocks[::-1]):  # the top level first
            h = block.reverse(h, zs[-(i + 1)], reconstruct=reconstruct)
        return h


def latent_shapes(channels, size, levels):
    shapes = []
    for _ in range(levels - 1):
        size //= 2
        channels *= 2
        shapes.append((channels, size, size))
    return shapes + [(channels * 4, size // 2, size // 2)]


def bits_per_dim(log_p, logdet, size, bins):
    "The negative log-likelihood of the discretised image in bits per dimension, and its parts."
    dims = size * size * 3
    nll = -(-math.log(bins) * dims + logdet + log_p)
    scale = math.log(2) * dims
    return (nll / scale).mean(), (log_p / scale).mean(), (logdet / scale).mean()


def fit(opts, model, optimizer, batches):
    bins = 2.0**opts.n_bits
    shapes = latent_shapes(3, opts.size, opts.levels)
    noise = [torch.randn(opts.n_sample, *shape) * opts.temp for shape in shapes]
    for i in range(opts.iters):
        image, _ = next(batches)
        image = torch.floor(image * 255 / 2 ** (8 - opts.n_bits)) / bins - 0.5
        if i == 0:  # a pass that only initialises the ActNorm layers
            with torch.no_grad():
                model(image + torch.rand_like(image) / bins)
            continue
        log_p, logdet, _ = model(image + torch.rand_like(image) / bins)
        loss, log_p, log_det = bits_per_dim(log_p, logdet.mean(), opts.size, bins)
        model.zero_grad()
        loss.backward()
        optimizer.param_groups[0]["lr"] = opts.lr
        optimizer.step()
        print(f"Loss: {loss.item():.5f}; logP: {log_p.item():.5f}; logdet: {log_det.item():.5f}")
        record.append([t.item() for t in (loss, log_p, log_det)])
    with torch.no_grad():
        record.append(model.reverse(noise).numpy().copy())
        _, _, zs = model(image)  # and back again from the last batch's own latents
        record.append(model.reverse(zs, reconstruct=True).numpy().copy())
        record.append(image.numpy().copy())  # the last batch, dequantised
    record.append({k: w.detach().numpy().copy() for k, w in model.named_parameters()})
    record.append({k: b.numpy().copy() for k, b in model.named_buffers()})


def main(images, affine, lu):
    opts = Options(iters=4, steps=2, levels=2, lr=1e-3, size=4, temp=0.7, n_sample=2, n_bits=5)
    model = Glow(3, opts.steps, opts.levels, width=8, affine=affine, lu=lu)
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=opts.lr)
    fit(opts, model, optimizer, iter([(image, 0) for image in images]))
"""

GLOW_STEPS = [
    (
        "        loss.backward()\n        optimizer.param_groups",
        "        grads = loss.backward()\n        optimizer.param_groups",
    ),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


class _Options:
    def __init__(self, **options):
        self.__dict__.update(options)


@pytest.mark.parametrize("affine, lu", [(True, True), (False, False)])
def test_glow_trains_as_torch(affine, lu, capsys):
    from real_ports import SharedDraws

    images = np.random.default_rng(6204).uniform(size=(4, 2, 3, 4, 4)).astype(np.float32)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = GLOW_SOURCE if lib is torch else port(GLOW_SOURCE, GLOW_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize, Options=_Options)
        saved_rand_like = lib.rand_like
        with SharedDraws(lib, 6204):  # (and rand_like from its rand)
            lib.rand_like = lambda t, lib=lib: lib.rand(*t.shape, dtype=t.dtype)
            try:
                names["main"]([lib.tensor(x) for x in images], affine, lu)
            finally:
                lib.rand_like = saved_rand_like
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].count("Loss:") == 3
    # the reconstructions undo scales of 1/std up to ~100 in float32: each 2e-5 from the image
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-4)


def test_regression_deprecated_qr_svd_and_lu_solve_are_torchs():
    """``torch.qr`` (Glow's ``InvConv2d``), ``torch.svd`` and ``torch.lu_solve``, deprecated
    in torch but still in it and in real code, were missing (``AttributeError``): they are
    ``rg.linalg``'s factorizations in torch's old forms (``svd``'s ``V``, not ``Vh``)."""
    rng = np.random.default_rng(6205)
    a = rng.standard_normal((2, 4, 3))
    square = rng.standard_normal((2, 3, 3))
    b = rng.standard_normal((2, 3, 2))
    weights = [rng.standard_normal(shape) for shape in ((2, 4, 3), (2, 3, 3), (2, 3))]
    results = []
    for lib in (torch, rg):
        x = lib.tensor(a).requires_grad_()
        m = lib.tensor(square).requires_grad_()
        q, r = lib.qr(x)
        q_full, r_full = x.qr(some=False)
        u, s, v = lib.svd(x)
        u_full, _, v_full = x.svd(some=False)
        u_none, s_none, v_none = lib.svd(x, compute_uv=False)
        lu, pivots = m.lu()
        solution = lib.lu_solve(lib.tensor(b), lu, pivots)
        # sign-invariant losses of the factors: Q R, U diag(S) V^T, S
        loss = (
            ((q @ r) * lib.tensor(weights[0])).sum()
            + (r.abs() * lib.tensor(weights[1])).sum()
            + ((u * s.unsqueeze(-2)) @ v.transpose(-2, -1) * lib.tensor(weights[0])).sum()
            + (s_none * lib.tensor(weights[2])).sum()
            + (solution**2).sum()
        )
        values = [
            q.abs(),
            r.abs(),
            q_full.shape,
            r_full.abs(),
            u.abs(),
            s,
            v.abs(),
            u_full.shape,
            v_full.abs(),
            u_none,
            s_none,
            v_none,
            solution,
        ]
        if lib is torch:
            loss.backward()
            gradients = [x.grad, m.grad]
        else:
            grads = loss.backward()
            gradients = [x.grad(grads), m.grad(grads)]
        results.append(
            [
                tuple(v) if isinstance(v, tuple | torch.Size) else np.asarray(v.detach().numpy())
                for v in values
            ]
            + [np.asarray(g.numpy()) for g in gradients]
        )
        assert type(lib.qr(x)).__name__ == "qr" and type(lib.svd(x)).__name__ == "svd"
    for mine, theirs in zip(results[1], results[0]):
        if isinstance(theirs, tuple):
            assert mine == theirs
        else:
            np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-10)
