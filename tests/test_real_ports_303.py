"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of two of lucidrains' einops-heavy models, trained under torch and, ported, under
retrograd from the same weights.

- A Perceiver-IO language model in the style of perceiver-pytorch: a cached-factory helper
  (``functools.wraps``, a ``_cache`` keyword, ``nonlocal``) that ties the latent layers'
  weights when asked; pre-norm wrappers normalizing a ``context`` keyword too; a GEGLU
  feed-forward; attention with heads by ``rearrange(t, 'b n (h d) -> (b h) n d', h=)`` of
  ``map``, ``einsum('b i d, b j d -> b i j')`` of ``from torch import einsum``, a padding
  mask by ``rearrange(mask, 'b ... -> b (...)')`` and ``repeat(mask, 'b j -> (b h) () j',
  h=)`` filled in place (``masked_fill_(~mask, -torch.finfo(sim.dtype).max)``); latents by
  ``repeat(latents, 'n d -> b n d', b=)``; positions by ``rearrange(pos, 'n d -> () n d')``;
  a masked token loss ``F.cross_entropy(rearrange(logits, 'b n c -> b c n'), seq,
  reduction='none')``; Adam.
- An MLP-Mixer in the style of mlp-mixer-pytorch: an ``nn.Sequential`` between einops'
  ``Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)', ...)`` and ``Reduce('b n c -> b c',
  'mean')`` layers, token mixing by ``partial(nn.Conv1d, kernel_size=1)``; SGD with momentum.

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
from functools import wraps

import torch
from torch import nn, einsum
from torch.nn import functional as F

from einops import repeat, rearrange


def once(factory):
    # with _cache=True every call after the first returns the first module: tied weights
    made = None

    @wraps(factory)
    def get(*args, _cache=True, **kwargs):
        nonlocal made
        if not _cache:
            return factory(*args, **kwargs)
        if made is None:
            made = factory(*args, **kwargs)
        return made

    return get


class Normed(nn.Module):
    def __init__(self, width, inner, context_width=None):
        super().__init__()
        self.inner, self.norm = inner, nn.LayerNorm(width)
        self.context_norm = nn.LayerNorm(context_width) if context_width is not None else None

    def forward(self, x, **kw):
        if self.context_norm is not None:
            kw.update(context=self.context_norm(kw["context"]))
        return self.inner(self.norm(x), **kw)


class GatedGelu(nn.Module):
    def forward(self, x):
        value, gate = x.chunk(2, dim=-1)
        return value * F.gelu(gate)


def geglu_mlp(width, mult=2):
    inner = mult * width
    return nn.Sequential(nn.Linear(width, 2 * inner), GatedGelu(), nn.Linear(inner, width))


class CrossOrSelfAttention(nn.Module):
    def __init__(self, q_width, ctx_width=None, heads=2, head_width=8):
        super().__init__()
        ctx_width = q_width if ctx_width is None else ctx_width
        self.heads, self.scale = heads, head_width**-0.5
        self.q = nn.Linear(q_width, heads * head_width, bias=False)
        self.kv = nn.Linear(ctx_width, 2 * heads * head_width, bias=False)
        self.out = nn.Linear(heads * head_width, q_width)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        k, v = self.kv(context).chunk(2, dim=-1)
        split = lambda t: rearrange(t, "b n (h d) -> (b h) n d", h=self.heads)
        q, k, v = map(split, (self.q(x), k, v))
        sim = einsum("b i d, b j d -> b i j", q, k) * self.scale
        if mask is not None:
            keep = repeat(rearrange(mask, "b ... -> b (...)"), "b j -> (b h) () j", h=self.heads)
            sim.masked_fill_(~keep, -torch.finfo(sim.dtype).max)
        mixed = einsum("b i j, b j d -> b i d", sim.softmax(dim=-1), v)
        return self.out(rearrange(mixed, "(b h) n d -> b n (h d)", h=self.heads))


class LatentLM(nn.Module):
    # tokens -> cross-attend into a few latents -> latent self-attention -> tokens query back
    def __init__(self, *, vocab, width, max_len, n_latents, latent_width, depth, tie):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(max_len, width)
        self.latents = nn.Parameter(torch.randn(n_latents, latent_width))
        self.read = nn.ModuleList([
            Normed(latent_width, CrossOrSelfAttention(latent_width, width, 1), context_width=width),
            Normed(latent_width, geglu_mlp(latent_width)),
        ])
        make_attn = once(lambda: Normed(latent_width, CrossOrSelfAttention(latent_width)))
        make_mlp = once(lambda: Normed(latent_width, geglu_mlp(latent_width)))
        self.think = nn.ModuleList(
            nn.ModuleList([make_attn(_cache=tie), make_mlp(_cache=tie)]) for _ in range(depth)
        )
        query_back = CrossOrSelfAttention(width, latent_width, heads=1)
        self.write = Normed(width, query_back, context_width=latent_width)
        self.logits = nn.Linear(width, vocab)

    def forward(self, seq, mask=None):
        n = seq.shape[1]
        x = self.tok(seq) + rearrange(self.pos(torch.arange(n, device=seq.device)), "n d -> () n d")
        z = repeat(self.latents, "n d -> b n d", b=seq.shape[0])
        attend, mlp = self.read
        z = attend(z, context=x, mask=mask) + z
        z = mlp(z) + z
        for attend, mlp in self.think:
            z = attend(z) + z
            z = mlp(z) + z
        return self.logits(self.write(x, context=z))


lm = LatentLM(vocab=16, width=12, max_len=10, n_latents=4, latent_width=16, depth=2, tie=tie)
initialize(lm)
opt = torch.optim.Adam(lm.parameters(), lr=1e-3)
for tokens, valid in batches:
    tokens, valid = torch.tensor(tokens), torch.tensor(valid)
    logits = lm(tokens, mask=valid)
    per_token = F.cross_entropy(rearrange(logits, "b n c -> b c n"), tokens, reduction="none")
    loss = (per_token * valid).sum() / valid.sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
    record.append(params_of(lm))
"""

PERCEIVER_STEPS = [
    (
        "import torch\nfrom torch import nn, einsum\n",
        "import retrograd as torch\nfrom retrograd import nn, einsum\n",
    ),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
]


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_perceiver_lm_trains_as_torch(capsys, tie):
    rng = np.random.default_rng(303)
    batches = []
    for _ in range(3):
        lengths = rng.integers(4, 11, 3)
        mask = np.arange(10)[None, :] < lengths[:, None]
        batches.append((rng.integers(0, 16, (3, 10)), mask))
    (theirs, ours), logs = runs_with_draws(
        PERCEIVER_SOURCE, PERCEIVER_STEPS, capsys, 3030,
        tie=tie, batches=batches, initialize=initializer(),
        params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1]
    assert len(theirs) == 2 * len(batches)
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


MIXER_SOURCE = """
from functools import partial

from torch import nn
from einops.layers.torch import Reduce, Rearrange


class Residual(nn.Module):
    def __init__(self, width, inner):
        super().__init__()
        self.inner, self.norm = inner, nn.LayerNorm(width)

    def forward(self, x):
        return x + self.inner(self.norm(x))


def two_layer(width, factor, layer=nn.Linear, p=0.0):
    hidden = int(width * factor)
    return nn.Sequential(
        layer(width, hidden), nn.GELU(), nn.Dropout(p), layer(hidden, width), nn.Dropout(p)
    )


def mixer(*, side, in_ch, patch, width, depth, classes, token_factor=2, channel_factor=0.5):
    assert side % patch == 0, "the patch size must divide the image side"
    tokens = (side // patch) ** 2
    across_tokens = partial(nn.Conv1d, kernel_size=1)  # mixes along the patch axis
    blocks = [
        nn.Sequential(
            Residual(width, two_layer(tokens, token_factor, across_tokens)),
            Residual(width, two_layer(width, channel_factor)),
        )
        for _ in range(depth)
    ]
    return nn.Sequential(
        Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch, p2=patch),
        nn.Linear(patch * patch * in_ch, width),
        *blocks,
        nn.LayerNorm(width),
        Reduce("b n c -> b c", "mean"),
        nn.Linear(width, classes),
    )


net = mixer(side=8, in_ch=3, patch=4, width=16, depth=2, classes=4)
initialize(net)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
for pixels, targets in batches:
    loss = nn.functional.cross_entropy(net(torch.tensor(pixels)), torch.tensor(targets))
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
    record.append(params_of(net))
"""

MIXER_STEPS = [
    ("from torch import nn\n", "from retrograd import nn\n"),
    (
        "from einops.layers.torch import Reduce, Rearrange",
        "from einops.layers.retrograd import Reduce, Rearrange",
    ),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
]


def test_mlp_mixer_trains_as_torch(capsys):
    rng = np.random.default_rng(3031)
    batches = [
        (rng.standard_normal((3, 3, 8, 8)).astype(np.float32), rng.integers(0, 4, 3))
        for _ in range(3)
    ]
    (theirs, ours), logs = runs_with_draws(
        MIXER_SOURCE, MIXER_STEPS, capsys, 3031,
        batches=batches, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
