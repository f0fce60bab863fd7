# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
two more of lucidrains' einops-heavy models.

- perceiver-pytorch's ``PerceiverLM`` (``perceiver_pytorch/perceiver_io.py``: ``exists``,
  ``default``, ``cache_fn`` with ``_cache`` weight tying, ``PreNorm`` with its context norm,
  ``GEGLU``, ``FeedForward``, ``Attention`` (``rearrange(t, 'b n (h d) -> (b h) n d', h =
  h)`` of ``map``, ``einsum('b i d, b j d -> b i j', q, k)`` of ``from torch import einsum``,
  the padding mask by ``rearrange(mask, 'b ... -> b (...)')`` and ``repeat(mask, 'b j ->
  (b h) () j', h = h)`` filled in place with ``-torch.finfo(sim.dtype).max``),
  ``PerceiverIO`` (latents by ``repeat(self.latents, 'n d -> b n d', b = b)``) and
  ``PerceiverLM`` (``rearrange(pos_emb, 'n d -> () n d')``)), trained as a masked token
  model on drawn sequences with padding, with Adam.
- mlp-mixer-pytorch's ``MLPMixer`` (``mlp_mixer_pytorch/mlp_mixer_pytorch.py``): an
  ``nn.Sequential`` between einops' ``Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)',
  ...)`` and ``Reduce('b n c -> b c', 'mean')`` layers, token mixing by ``partial(nn.Conv1d,
  kernel_size = 1)``; trained by SGD with momentum on drawn images.

The lines changed: the imports (``torch`` is retrograd; einops' layers come from
``einops.layers.retrograd``) and the gradient lines. The weights are torch's
(``initialize``); dropout is 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

pytest.importorskip("einops", minversion="0.8")

PERCEIVER_SOURCE = """
from math import pi, log
from functools import wraps

import torch
from torch import nn, einsum
import torch.nn.functional as F

from einops import rearrange, repeat

# helpers

def exists(val):
    return val is not None

def default(val, d):
    return val if exists(val) else d

def cache_fn(f):
    cache = None
    @wraps(f)
    def cached_fn(*args, _cache = True, **kwargs):
        if not _cache:
            return f(*args, **kwargs)
        nonlocal cache
        if cache is not None:
            return cache
        cache = f(*args, **kwargs)
        return cache
    return cached_fn

# helper classes

class PreNorm(nn.Module):
    def __init__(self, dim, fn, context_dim = None):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)
        self.norm_context = nn.LayerNorm(context_dim) if exists(context_dim) else None

    def forward(self, x, **kwargs):
        x = self.norm(x)

        if exists(self.norm_context):
            context = kwargs['context']
            normed_context = self.norm_context(context)
            kwargs.update(context = normed_context)

        return self.fn(x, **kwargs)

class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim = -1)
        return x * F.gelu(gates)

class FeedForward(nn.Module):
    def __init__(self, dim, mult = 4):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, dim * mult * 2),
            GEGLU(),
            nn.Linear(dim * mult, dim)
        )

    def forward(self, x):
        return self.net(x)

class Attention(nn.Module):
    def __init__(self, query_dim, context_dim = None, heads = 8, dim_head = 64):
        super().__init__()
        inner_dim = dim_head * heads
        context_dim = default(context_dim, query_dim)
        self.scale = dim_head ** -0.5
        self.heads = heads

        self.to_q = nn.Linear(query_dim, inner_dim, bias = False)
        self.to_kv = nn.Linear(context_dim, inner_dim * 2, bias = False)
        self.to_out = nn.Linear(inner_dim, query_dim)

    def forward(self, x, context = None, mask = None):
        h = self.heads

        q = self.to_q(x)
        context = default(context, x)
        k, v = self.to_kv(context).chunk(2, dim = -1)

        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> (b h) n d', h = h), (q, k, v))

        sim = einsum('b i d, b j d -> b i j', q, k) * self.scale

        if exists(mask):
            mask = rearrange(mask, 'b ... -> b (...)')
            max_neg_value = -torch.finfo(sim.dtype).max
            mask = repeat(mask, 'b j -> (b h) () j', h = h)
            sim.masked_fill_(~mask, max_neg_value)

        # attention, what we cannot get enough of
        attn = sim.softmax(dim = -1)

        out = einsum('b i j, b j d -> b i d', attn, v)
        out = rearrange(out, '(b h) n d -> b n (h d)', h = h)
        return self.to_out(out)

# main class

class PerceiverIO(nn.Module):
    def __init__(
        self,
        *,
        depth,
        dim,
        queries_dim,
        logits_dim = None,
        num_latents = 512,
        latent_dim = 512,
        cross_heads = 1,
        latent_heads = 8,
        cross_dim_head = 64,
        latent_dim_head = 64,
        weight_tie_layers = False,
        decoder_ff = False
    ):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(num_latents, latent_dim))

        self.cross_attend_blocks = nn.ModuleList([
            PreNorm(latent_dim, Attention(latent_dim, dim, heads = cross_heads, dim_head = cross_dim_head), context_dim = dim),
            PreNorm(latent_dim, FeedForward(latent_dim))
        ])

        get_latent_attn = lambda: PreNorm(latent_dim, Attention(latent_dim, heads = latent_heads, dim_head = latent_dim_head))
        get_latent_ff = lambda: PreNorm(latent_dim, FeedForward(latent_dim))
        get_latent_attn, get_latent_ff = map(cache_fn, (get_latent_attn, get_latent_ff))

        self.layers = nn.ModuleList([])
        cache_args = {'_cache': weight_tie_layers}

        for i in range(depth):
            self.layers.append(nn.ModuleList([
                get_latent_attn(**cache_args),
                get_latent_ff(**cache_args)
            ]))

        self.decoder_cross_attn = PreNorm(queries_dim, Attention(queries_dim, latent_dim, heads = cross_heads, dim_head = cross_dim_head), context_dim = latent_dim)
        self.decoder_ff = PreNorm(queries_dim, FeedForward(queries_dim)) if decoder_ff else None

        self.to_logits = nn.Linear(queries_dim, logits_dim) if exists(logits_dim) else nn.Identity()

    def forward(
        self,
        data,
        mask = None,
        queries = None
    ):
        b, *_, device = *data.shape, data.device

        x = repeat(self.latents, 'n d -> b n d', b = b)

        cross_attn, cross_ff = self.cross_attend_blocks

        # cross attention only happens once for Perceiver IO

        x = cross_attn(x, context = data, mask = mask) + x
        x = cross_ff(x) + x

        # layers

        for self_attn, self_ff in self.layers:
            x = self_attn(x) + x
            x = self_ff(x) + x

        if not exists(queries):
            return x

        # make sure queries contains batch dimension

        if queries.ndim == 2:
            queries = repeat(queries, 'n d -> b n d', b = b)

        # cross attend from decoder queries to latents

        latents = self.decoder_cross_attn(queries, context = x)

        # optional decoder feedforward

        if exists(self.decoder_ff):
            latents = latents + self.decoder_ff(latents)

        # final linear out

        return self.to_logits(latents)

# Perceiver LM example

class PerceiverLM(nn.Module):
    def __init__(
        self,
        *,
        dim,
        num_tokens,
        max_seq_len,
        **kwargs
    ):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)

        self.perceiver_io = PerceiverIO(
            dim = dim,
            queries_dim = dim,
            logits_dim = num_tokens,
            **kwargs
        )

    def forward(
        self,
        x,
        mask = None
    ):
        n, device = x.shape[1], x.device
        x = self.token_emb(x)

        pos_emb = self.pos_emb(torch.arange(n, device = device))
        pos_emb = rearrange(pos_emb, 'n d -> () n d')
        x = x + pos_emb

        logits = self.perceiver_io(x, mask = mask, queries = x)
        return logits


model = PerceiverLM(
    num_tokens = 20,
    dim = 16,
    depth = 2,
    max_seq_len = 12,
    num_latents = 6,
    latent_dim = 24,
    cross_heads = 1,
    latent_heads = 2,
    cross_dim_head = 8,
    latent_dim_head = 8,
    weight_tie_layers = weight_tie_layers
)
initialize(model)
opt = torch.optim.Adam(model.parameters(), lr = 1e-3)
for seq, mask in batches:
    seq, mask = torch.tensor(seq), torch.tensor(mask)
    logits = model(seq, mask = mask)
    loss = F.cross_entropy(rearrange(logits, 'b n c -> b c n'), seq, reduction = 'none')
    loss = (loss * mask).sum() / mask.sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
    record.append(params_of(model))
"""

PERCEIVER_STEPS = [
    (
        "import torch\nfrom torch import nn, einsum\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn, einsum\nimport retrograd.nn.functional as F\n",
    ),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
]


@pytest.mark.parametrize("weight_tie_layers", [False, True], ids=["untied", "tied"])
def test_perceiver_lm_trains_as_torch(capsys, weight_tie_layers):
    rng = np.random.default_rng(303)
    batches = []
    for _ in range(3):
        lengths = rng.integers(5, 13, 3)
        mask = np.arange(12)[None, :] < lengths[:, None]
        batches.append((rng.integers(0, 20, (3, 12)), mask))
    (theirs, ours), logs = runs_with_draws(
        PERCEIVER_SOURCE, PERCEIVER_STEPS, capsys, 3030,
        weight_tie_layers=weight_tie_layers, batches=batches, initialize=initializer(),
        params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1]
    assert len(theirs) == 2 * len(batches)
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


MIXER_SOURCE = """
from torch import nn
from functools import partial
from einops.layers.torch import Rearrange, Reduce

pair = lambda x: x if isinstance(x, tuple) else (x, x)

class PreNormResidual(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.fn(self.norm(x)) + x

def FeedForward(dim, expansion_factor = 4, dropout = 0., dense = nn.Linear):
    inner_dim = int(dim * expansion_factor)
    return nn.Sequential(
        dense(dim, inner_dim),
        nn.GELU(),
        nn.Dropout(dropout),
        dense(inner_dim, dim),
        nn.Dropout(dropout)
    )

def MLPMixer(*, image_size, channels, patch_size, dim, depth, num_classes, expansion_factor = 4, expansion_factor_token = 0.5, dropout = 0.):
    image_h, image_w = pair(image_size)
    assert (image_h % patch_size) == 0 and (image_w % patch_size) == 0, 'image must be divisible by patch size'
    num_patches = (image_h // patch_size) * (image_w // patch_size)
    chan_first, chan_last = partial(nn.Conv1d, kernel_size = 1), nn.Linear

    return nn.Sequential(
        Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)', p1 = patch_size, p2 = patch_size),
        nn.Linear((patch_size ** 2) * channels, dim),
        *[nn.Sequential(
            PreNormResidual(dim, FeedForward(num_patches, expansion_factor, dropout, chan_first)),
            PreNormResidual(dim, FeedForward(dim, expansion_factor_token, dropout, chan_last))
        ) for _ in range(depth)],
        nn.LayerNorm(dim),
        Reduce('b n c -> b c', 'mean'),
        nn.Linear(dim, num_classes)
    )


model = MLPMixer(
    image_size = 16,
    channels = 3,
    patch_size = 4,
    dim = 24,
    depth = 2,
    num_classes = 5
)
initialize(model)
opt = torch.optim.SGD(model.parameters(), lr = 0.05, momentum = 0.9)
for img, labels in batches:
    pred = model(torch.tensor(img))
    loss = nn.functional.cross_entropy(pred, torch.tensor(labels))
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
    record.append(params_of(model))
"""

MIXER_STEPS = [
    ("from torch import nn\n", "from retrograd import nn\n"),
    (
        "from einops.layers.torch import Rearrange, Reduce",
        "from einops.layers.retrograd import Rearrange, Reduce",
    ),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
]


def test_mlp_mixer_trains_as_torch(capsys):
    rng = np.random.default_rng(3031)
    batches = [
        (rng.standard_normal((4, 3, 16, 16)).astype(np.float32), rng.integers(0, 5, 4))
        for _ in range(3)
    ]
    (theirs, ours), logs = runs_with_draws(
        MIXER_SOURCE, MIXER_STEPS, capsys, 3031,
        batches=batches, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
