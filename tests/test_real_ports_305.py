# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs written with einops, ported to retrograd line for line (the harness:
``tests/real_ports.py``), continued from ``tests/test_real_ports_303.py``:

- PaLM as lucidrains/PaLM-pytorch writes it (``palm_pytorch/palm_pytorch.py``,
  ``palm_pytorch/autoregressive_wrapper.py`` and ``train.py``'s loop), small: the bias-less
  ``LayerNorm`` by ``F.layer_norm`` with a ``beta`` buffer, ``RotaryEmbedding``'s
  ``einsum("i , j -> i j", ...)`` and ``rotate_half`` by einops' ``rearrange(x, "... (j d) ->
  ... j d", j=2)`` and ``unbind(dim=-2)``, ``ParallelTransformerBlock``'s fused projection
  ``split(self.fused_dims, dim=-1)``, multi-query attention (``rearrange(q, "b n (h d) -> b h n
  d", h=h)``, ``einsum("b h i d, b j d -> b h i j", ...)``, ``rearrange(out, "b h n d -> b n (h
  d)")``), the causal mask and rotary embeddings cached by ``register_buffer(...,
  persistent=False)`` over a ``None`` buffer, ``SwiGLU``, the ``nn.Sequential`` whose output
  ``Linear`` is tied to the embedding (``net[-1].weight = net[0].weight``) after
  ``nn.init.normal_``; the wrapper's ``F.cross_entropy(rearrange(logits, "b c n -> b n c"),
  x_labels)``, ``generate`` under ``@torch.no_grad()`` and ``eval_decorator`` with ``top_k``'s
  ``torch.full_like(logits, float("-inf")).scatter_(1, ind, val)`` and ``torch.multinomial``;
  ``train.py``'s ``TextSamplerDataset`` of ``torch.randint`` windows through ``DataLoader``,
  gradient accumulation, ``clip_grad_norm_`` and Adam. The draws (``randint``, ``multinomial``)
  come from one seeded stream in both runs.
- lucidrains/vector-quantize-pytorch's ``vector_quantize_pytorch.py`` as of October 2021
  (commit 2352c87, before the multi-head and distributed versions) whole: ``kmeans`` by ``rearrange(samples, 'n d -> n ()
  d') - rearrange(means, 'c d -> () c d')``, ``torch.bincount(..., minlength=...)``,
  ``new_zeros(..., dtype=...).scatter_add_(0, repeat(buckets, 'n -> n d', d = dim), samples)``
  and ``torch.where``; ``EuclideanCodebook`` and ``CosineSimCodebook`` with their buffers
  (``torch.Tensor([not kmeans_init])`` read by ``if not self.initted``), the EMA updates by
  ``moving_avg.data.mul_(decay).add_(new, alpha = (1 - decay))``, ``rearrange(x, '... d ->
  (...) d')``, ``F.one_hot(...).type(dtype)``, ``F.embedding`` of the codebook, dead-code
  expiry by ``sample_vectors`` (``torch.randperm``/``torch.randint``) and ``.data.copy_``;
  ``VectorQuantize`` with the straight-through ``x + (quantize - x).detach()``, the
  commitment loss and ``codebook_dim`` projections. Driven as the README
  uses it, between an encoder and a decoder trained by Adam, in five configurations; the
  draws (``randn``, ``randint``, ``randperm``) come from one seeded stream in both runs.

The lines changed: the imports (``torch`` is retrograd; ``from einops import ...`` is
unchanged: einops takes retrograd tensors) and the gradient lines (``loss.backward()`` returns
the gradients, summed over the accumulation; ``clip_grad_norm_`` and ``step`` take them).
PaLM's ``train.py``: its module-level script is a ``main`` taking its constants, ``.cuda()``
left out, ``PaLM`` the plain one (``train.py`` imports the Triton one), enwik8 the bytes given.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

pytest.importorskip("einops", minversion="0.8")

PALM_SOURCE = '''
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import einsum, nn
from torch.utils.data import DataLoader, Dataset

# normalization
# they use layernorm without bias, something that pytorch does not offer


class LayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))
        self.register_buffer("beta", torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.gamma, self.beta)

# residual


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


# rotary positional embedding
# https://arxiv.org/abs/2104.09864


class RotaryEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, max_seq_len, *, device):
        seq = torch.arange(max_seq_len, device=device, dtype=self.inv_freq.dtype)
        freqs = einsum("i , j -> i j", seq, self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)


def rotate_half(x):
    x = rearrange(x, "... (j d) -> ... j d", j=2)
    x1, x2 = x.unbind(dim=-2)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(pos, t):
    return (t * pos.cos()) + (rotate_half(t) * pos.sin())


# classic Noam Shazeer paper, except here they use SwiGLU instead of the more popular GEGLU for gating the feedforward
# https://arxiv.org/abs/2002.05202


class SwiGLU(nn.Module):
    def forward(self, x):
        x, gate = x.chunk(2, dim=-1)
        return F.silu(gate) * x


# parallel attention and feedforward with residual
# discovered by Wang et al + EleutherAI from GPT-J fame


class ParallelTransformerBlock(nn.Module):
    def __init__(self, dim, dim_head=64, heads=8, ff_mult=4):
        super().__init__()
        self.norm = LayerNorm(dim)

        attn_inner_dim = dim_head * heads
        ff_inner_dim = dim * ff_mult
        self.fused_dims = (attn_inner_dim, dim_head, dim_head, (ff_inner_dim * 2))

        self.heads = heads
        self.scale = dim_head**-0.5
        self.rotary_emb = RotaryEmbedding(dim_head)

        self.fused_attn_ff_proj = nn.Linear(dim, sum(self.fused_dims), bias=False)
        self.attn_out = nn.Linear(attn_inner_dim, dim, bias=False)

        self.ff_out = nn.Sequential(
            SwiGLU(),
            nn.Linear(ff_inner_dim, dim, bias=False)
        )

        # for caching causal mask and rotary embeddings

        self.register_buffer("mask", None, persistent=False)
        self.register_buffer("pos_emb", None, persistent=False)

    def get_mask(self, n, device):
        if self.mask is not None and self.mask.shape[-1] >= n:
            return self.mask[:n, :n]

        mask = torch.ones((n, n), device=device, dtype=torch.bool).triu(1)
        self.register_buffer("mask", mask, persistent=False)
        return mask

    def get_rotary_embedding(self, n, device):
        if self.pos_emb is not None and self.pos_emb.shape[-2] >= n:
            return self.pos_emb[:n]

        pos_emb = self.rotary_emb(n, device=device)
        self.register_buffer("pos_emb", pos_emb, persistent=False)
        return pos_emb

    def forward(self, x):
        """
        einstein notation
        b - batch
        h - heads
        n, i, j - sequence length (base sequence length, source, target)
        d - feature dimension
        """

        n, device, h = x.shape[1], x.device, self.heads

        # pre layernorm

        x = self.norm(x)

        # attention queries, keys, values, and feedforward inner

        q, k, v, ff = self.fused_attn_ff_proj(x).split(self.fused_dims, dim=-1)

        # split heads
        # they use multi-query single-key-value attention, yet another Noam Shazeer paper
        # they found no performance loss past a certain scale, and more efficient decoding obviously
        # https://arxiv.org/abs/1911.02150

        q = rearrange(q, "b n (h d) -> b h n d", h=h)

        # rotary embeddings

        positions = self.get_rotary_embedding(n, device)
        q, k = map(lambda t: apply_rotary_pos_emb(positions, t), (q, k))

        # scale

        q = q * self.scale

        # similarity

        sim = einsum("b h i d, b j d -> b h i j", q, k)

        # causal mask

        causal_mask = self.get_mask(n, device)
        sim = sim.masked_fill(causal_mask, -torch.finfo(sim.dtype).max)

        # attention

        attn = sim.softmax(dim=-1)

        # aggregate values

        out = einsum("b h i j, b j d -> b h i d", attn, v)

        # merge heads

        out = rearrange(out, "b h n d -> b n (h d)")
        return self.attn_out(out) + self.ff_out(ff)


# transformer


def PaLM(*, dim, num_tokens, depth, dim_head=64, heads=8, ff_mult=4):
    net = nn.Sequential(
        nn.Embedding(num_tokens, dim),
        *[
            Residual(ParallelTransformerBlock(dim=dim, dim_head=dim_head, heads=heads, ff_mult=ff_mult))
            for _ in range(depth)
        ],
        LayerNorm(dim),
        nn.Linear(dim, num_tokens, bias=False)
    )

    # they used embedding weight tied projection out to logits, not common, but works
    net[-1].weight = net[0].weight

    nn.init.normal_(net[0].weight, std=0.02)
    return net


# palm_pytorch/autoregressive_wrapper.py

# helper function


def exists(val):
    return val is not None


def eval_decorator(fn):
    def inner(model, *args, **kwargs):
        was_training = model.training
        model.eval()
        out = fn(model, *args, **kwargs)
        model.train(was_training)
        return out

    return inner


# top k filtering


def top_k(logits, thres=0.9):
    k = int((1 - thres) * logits.shape[-1])
    val, ind = torch.topk(logits, k)
    probs = torch.full_like(logits, float("-inf"))
    probs.scatter_(1, ind, val)
    return probs


class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, max_seq_len=2048, pad_value=0):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.pad_value = pad_value
        self.net = net

    @torch.no_grad()
    @eval_decorator
    def generate(
        self,
        start_tokens,
        seq_len,
        eos_token=None,
        temperature=1.0,
        filter_thres=0.9,
        **kwargs
    ):
        b, t, device = *start_tokens.shape, start_tokens.device

        out = start_tokens

        for _ in range(seq_len):
            logits = self.net(out, **kwargs)[:, -1, :]

            filtered_logits = top_k(logits, thres=filter_thres)
            probs = F.softmax(filtered_logits / temperature, dim=-1)

            sample = torch.multinomial(probs, 1)

            out = torch.cat((out, sample), dim=-1)

            if exists(eos_token):
                is_eos_token = out == eos_token

                if is_eos_token.any(dim=-1).all():
                    # mask out everything after the eos tokens
                    shifted_is_eos_tokens = F.pad(is_eos_token, (1, -1))
                    mask = shifted_is_eos_tokens.float().cumsum(dim=-1) >= 1
                    out = out.masked_fill(mask, self.pad_value)
                    break

        out = out[:, t:]
        return out

    def forward(self, x, **kwargs):
        x_inp, x_labels = x[:, :-1], x[:, 1:]
        logits = self.net(x_inp, **kwargs)
        return F.cross_entropy(rearrange(logits, "b c n -> b n c"), x_labels)


# train.py (enwik8 replaced by the bytes given; model, steps and lengths small)


def cycle(loader):
    while True:
        for data in loader:
            yield data


def decode_token(token):
    return str(chr(max(32, token)))


def decode_tokens(tokens):
    return "".join(list(map(decode_token, tokens)))


def main(data_train, data_val, NUM_BATCHES, BATCH_SIZE, GRADIENT_ACCUMULATE_EVERY, LEARNING_RATE, VALIDATE_EVERY, GENERATE_EVERY, GENERATE_LENGTH, SEQ_LEN):
    # instantiate GPT-like decoder model

    model = PaLM(num_tokens=64, dim=16, depth=2, dim_head=8, heads=2)

    model = AutoregressiveWrapper(model, max_seq_len=SEQ_LEN)
    initialize(model)

    class TextSamplerDataset(Dataset):
        def __init__(self, data, seq_len):
            super().__init__()
            self.data = data
            self.seq_len = seq_len

        def __getitem__(self, index):
            rand_start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
            full_seq = self.data[rand_start : rand_start + self.seq_len + 1].long()
            return full_seq

        def __len__(self):
            return self.data.size(0) // self.seq_len

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset = TextSamplerDataset(data_val, SEQ_LEN)
    train_loader = cycle(DataLoader(train_dataset, batch_size=BATCH_SIZE))
    val_loader = cycle(DataLoader(val_dataset, batch_size=BATCH_SIZE))

    # optimizer

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    # training

    for i in range(NUM_BATCHES):
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(train_loader))
            loss.backward()

        print(f"training loss: {loss.item()}")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        record.append(loss.item())

        if i % VALIDATE_EVERY == 0:
            model.eval()
            with torch.no_grad():
                loss = model(next(val_loader))
                print(f"validation loss: {loss.item()}")
                record.append(loss.item())

        if i % GENERATE_EVERY == 0:
            model.eval()
            inp = random.choice(val_dataset)[:-1]
            prime = decode_tokens(inp)
            print(f"%s \\n\\n %s", (prime, "*" * 100))

            sample = model.generate(inp[None, ...], GENERATE_LENGTH)
            output_str = decode_tokens(sample[0])
            print(output_str)
            record.append(output_str)

    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
'''

PALM_STEPS = [
    (
        "import torch\nimport torch.nn.functional as F\nfrom einops import rearrange\nfrom torch import einsum, nn\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\nfrom einops import rearrange\nfrom retrograd import einsum, nn\n",
    ),
    (
        '        for __ in range(GRADIENT_ACCUMULATE_EVERY):\n            loss = model(next(train_loader))\n            loss.backward()\n\n        print(f"training loss: {loss.item()}")\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n        optim.step()\n',
        '        grads = None\n        for __ in range(GRADIENT_ACCUMULATE_EVERY):\n            loss = model(next(train_loader))\n            g = loss.backward()\n            grads = g if grads is None else grads + g\n\n        print(f"training loss: {loss.item()}")\n        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 0.5)\n        optim.step(grads)\n',
    ),
]


class SharedMultinomial:
    """``torch.multinomial(probs, 1)`` of a library drawing from one seeded stream (the
    inverse of the rows' cumulative sums at uniform draws)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def multinomial(probs, num_samples, replacement=False, generator=None):
            rows = np.asarray(probs.detach().numpy(), dtype=np.float64)
            cumulative = np.cumsum(rows / rows.sum(-1, keepdims=True), -1)
            draws = rng.uniform(size=(rows.shape[0], 1))
            picks = (cumulative < draws).sum(-1, keepdims=True)
            return lib.tensor(np.minimum(picks, rows.shape[-1] - 1), dtype=lib.int64)

        self.saved = lib.multinomial
        lib.multinomial = multinomial
        return self

    def __exit__(self, *exc):
        self.lib.multinomial = self.saved
        return False


def _rounded(log):
    return re.sub(r"\d+\.\d+", lambda number: f"{float(number.group()):.4g}", log)


def test_palm_trains_and_generates_as_torch(capsys):
    rng = np.random.default_rng(3051)
    data_train = rng.integers(33, 64, 80).astype(np.uint8)  # printable, as enwik8's bytes
    data_val = rng.integers(33, 64, 40).astype(np.uint8)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        random.seed(3051)
        text = PALM_SOURCE if lib is torch else port(PALM_SOURCE, PALM_STEPS)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        names = run_source(text, lib, record=record, initialize=initialize, random=random)
        with SharedDraws(lib, 3051), SharedMultinomial(lib, 3052):
            names["main"](
                lib.from_numpy(data_train.astype(np.int64)),
                lib.from_numpy(data_val.astype(np.int64)),
                NUM_BATCHES=3,
                BATCH_SIZE=2,
                GRADIENT_ACCUMULATE_EVERY=2,
                LEARNING_RATE=1e-3,
                VALIDATE_EVERY=1,
                GENERATE_EVERY=2,
                GENERATE_LENGTH=4,
                SEQ_LEN=8,
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    # the losses print in full (``f"training loss: {loss.item()}"``): equal to 4 digits (the records compare them closer)
    assert _rounded(logs[1]) == _rounded(logs[0])
    assert logs[0].count("validation loss") == 3
    assert sum(isinstance(r, str) and len(r) == 4 for r in records[0]) == 2  # the samples
    # the output layer is the embedding (tied), in the state dict twice
    assert list(records[0][-1]) == list(records[1][-1])
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- vector-quantize-pytorch ----------------------------------------------------------------
VQ_SOURCE = """
import torch
from torch import nn, einsum
import torch.nn.functional as F
from einops import rearrange, repeat

def exists(val):
    return val is not None

def default(val, d):
    return val if exists(val) else d

def l2norm(t):
    return F.normalize(t, p = 2, dim = -1)

def ema_inplace(moving_avg, new, decay):
    moving_avg.data.mul_(decay).add_(new, alpha = (1 - decay))

def laplace_smoothing(x, n_categories, eps = 1e-5):
    return (x + eps) / (x.sum() + n_categories * eps)

def sample_vectors(samples, num):
    num_samples, device = samples.shape[0], samples.device

    if num_samples >= num:
        indices = torch.randperm(num_samples, device = device)[:num]
    else:
        indices = torch.randint(0, num_samples, (num,), device = device)

    return samples[indices]

def kmeans(samples, num_clusters, num_iters = 10, use_cosine_sim = False):
    dim, dtype, device = samples.shape[-1], samples.dtype, samples.device

    means = sample_vectors(samples, num_clusters)

    for _ in range(num_iters):
        if use_cosine_sim:
            dists = samples @ means.t()
        else:
            diffs = rearrange(samples, 'n d -> n () d') \
                    - rearrange(means, 'c d -> () c d')
            dists = -(diffs ** 2).sum(dim = -1)

        buckets = dists.max(dim = -1).indices
        bins = torch.bincount(buckets, minlength = num_clusters)
        zero_mask = bins == 0
        bins_min_clamped = bins.masked_fill(zero_mask, 1)

        new_means = buckets.new_zeros(num_clusters, dim, dtype = dtype)
        new_means.scatter_add_(0, repeat(buckets, 'n -> n d', d = dim), samples)
        new_means = new_means / bins_min_clamped[..., None]

        if use_cosine_sim:
            new_means = l2norm(new_means)

        means = torch.where(zero_mask[..., None], means, new_means)

    return means, bins

# distance types

class EuclideanCodebook(nn.Module):
    def __init__(
        self,
        dim,
        codebook_size,
        kmeans_init = False,
        kmeans_iters = 10,
        decay = 0.8,
        eps = 1e-5,
        threshold_ema_dead_code = 2
    ):
        super().__init__()
        self.decay = decay
        init_fn = torch.randn if not kmeans_init else torch.zeros
        embed = init_fn(codebook_size, dim)

        self.codebook_size = codebook_size
        self.kmeans_iters = kmeans_iters
        self.eps = eps
        self.threshold_ema_dead_code = threshold_ema_dead_code

        self.register_buffer('initted', torch.Tensor([not kmeans_init]))
        self.register_buffer('cluster_size', torch.zeros(codebook_size))
        self.register_buffer('embed', embed)
        self.register_buffer('embed_avg', embed.clone())

    def init_embed_(self, data):
        embed, cluster_size = kmeans(data, self.codebook_size, self.kmeans_iters)
        self.embed.data.copy_(embed)
        self.embed_avg.data.copy_(embed.clone())
        self.cluster_size.data.copy_(cluster_size)
        self.initted.data.copy_(torch.Tensor([True]))

    def replace(self, samples, mask):
        modified_codebook = torch.where(
            mask[..., None],
            sample_vectors(samples, self.codebook_size),
            self.embed
        )
        self.embed.data.copy_(modified_codebook)

    def expire_codes_(self, batch_samples):
        if self.threshold_ema_dead_code == 0:
            return

        expired_codes = self.cluster_size < self.threshold_ema_dead_code
        if not torch.any(expired_codes):
            return
        batch_samples = rearrange(batch_samples, '... d -> (...) d')
        self.replace(batch_samples, mask = expired_codes)

    def forward(self, x):
        shape, dtype = x.shape, x.dtype
        flatten = rearrange(x, '... d -> (...) d')
        embed = self.embed.t()

        if not self.initted:
            self.init_embed_(flatten)

        dist = -(
            flatten.pow(2).sum(1, keepdim=True)
            - 2 * flatten @ embed
            + embed.pow(2).sum(0, keepdim=True)
        )

        embed_ind = dist.max(dim = -1).indices
        embed_onehot = F.one_hot(embed_ind, self.codebook_size).type(dtype)
        embed_ind = embed_ind.view(*shape[:-1])
        quantize = F.embedding(embed_ind, self.embed)

        if self.training:
            ema_inplace(self.cluster_size, embed_onehot.sum(0), self.decay)
            embed_sum = flatten.t() @ embed_onehot
            ema_inplace(self.embed_avg, embed_sum.t(), self.decay)
            cluster_size = laplace_smoothing(self.cluster_size, self.codebook_size, self.eps) * self.cluster_size.sum()
            embed_normalized = self.embed_avg / cluster_size.unsqueeze(1)
            self.embed.data.copy_(embed_normalized)
            self.expire_codes_(x)

        return quantize, embed_ind

class CosineSimCodebook(nn.Module):
    def __init__(
        self,
        dim,
        codebook_size,
        kmeans_init = False,
        kmeans_iters = 10,
        decay = 0.8,
        eps = 1e-5,
        threshold_ema_dead_code = 2
    ):
        super().__init__()
        self.decay = decay

        if not kmeans_init:
            embed = l2norm(torch.randn(codebook_size, dim))
        else:
            embed = torch.zeros(codebook_size, dim)

        self.codebook_size = codebook_size
        self.kmeans_iters = kmeans_iters
        self.eps = eps
        self.threshold_ema_dead_code = threshold_ema_dead_code

        self.register_buffer('initted', torch.Tensor([not kmeans_init]))
        self.register_buffer('cluster_size', torch.zeros(codebook_size))
        self.register_buffer('embed', embed)

    def init_embed_(self, data):
        embed, cluster_size = kmeans(data, self.codebook_size, self.kmeans_iters,
                       use_cosine_sim = True)
        self.embed.data.copy_(embed)
        self.cluster_size.data.copy_(cluster_size)
        self.initted.data.copy_(torch.Tensor([True]))

    def replace(self, samples, mask):
        samples = l2norm(samples)
        modified_codebook = torch.where(
            mask[..., None],
            sample_vectors(samples, self.codebook_size),
            self.embed
        )
        self.embed.data.copy_(modified_codebook)

    def expire_codes_(self, batch_samples):
        if self.threshold_ema_dead_code == 0:
            return

        expired_codes = self.cluster_size < self.threshold_ema_dead_code
        if not torch.any(expired_codes):
            return
        batch_samples = rearrange(batch_samples, '... d -> (...) d')
        self.replace(batch_samples, mask = expired_codes)

    def forward(self, x):
        shape, dtype = x.shape, x.dtype
        flatten = rearrange(x, '... d -> (...) d')
        flatten = l2norm(flatten)

        if not self.initted:
            self.init_embed_(flatten)

        embed = l2norm(self.embed)
        dist = flatten @ embed.t()
        embed_ind = dist.max(dim = -1).indices
        embed_onehot = F.one_hot(embed_ind, self.codebook_size).type(dtype)
        embed_ind = embed_ind.view(*shape[:-1])

        quantize = F.embedding(embed_ind, self.embed)

        if self.training:
            bins = embed_onehot.sum(0)
            ema_inplace(self.cluster_size, bins, self.decay)

            zero_mask = (bins == 0)
            bins = bins.masked_fill(zero_mask, 1.)

            embed_sum = flatten.t() @ embed_onehot
            embed_normalized = (embed_sum / bins.unsqueeze(0)).t()
            embed_normalized = l2norm(embed_normalized)
            embed_normalized = torch.where(zero_mask[..., None], embed,
                                           embed_normalized)
            ema_inplace(self.embed, embed_normalized, self.decay)
            self.expire_codes_(x)

        return quantize, embed_ind

# main class

class VectorQuantize(nn.Module):
    def __init__(
        self,
        dim,
        codebook_size,
        n_embed = None,
        codebook_dim = None,
        decay = 0.8,
        commitment = 1.,
        eps = 1e-5,
        kmeans_init = False,
        kmeans_iters = 10,
        use_cosine_sim = False,
        threshold_ema_dead_code = 0,
        channel_last = True
    ):
        super().__init__()
        n_embed = default(n_embed, codebook_size)

        codebook_dim = default(codebook_dim, dim)
        requires_projection = codebook_dim != dim
        self.project_in = nn.Linear(dim, codebook_dim) if requires_projection \
                          else nn.Identity()
        self.project_out = nn.Linear(codebook_dim, dim) if requires_projection \
                           else nn.Identity()

        self.eps = eps
        self.commitment = commitment

        codebook_class = EuclideanCodebook if not use_cosine_sim \
                         else CosineSimCodebook

        self._codebook = codebook_class(
            dim = codebook_dim,
            codebook_size = n_embed,
            kmeans_init = kmeans_init,
            kmeans_iters = kmeans_iters,
            decay = decay,
            eps = eps,
            threshold_ema_dead_code = threshold_ema_dead_code
        )

        self.codebook_size = codebook_size
        self.channel_last = channel_last

    @property
    def codebook(self):
        return self._codebook.codebook

    def forward(self, x):
        need_transpose = not self.channel_last

        if need_transpose:
            x = rearrange(x, 'b n d -> b d n')

        x = self.project_in(x)

        quantize, embed_ind = self._codebook(x)

        commit_loss = 0.

        if self.training:
            commit_loss = F.mse_loss(quantize.detach(), x) * self.commitment
            quantize = x + (quantize - x).detach()

        quantize = self.project_out(quantize)

        if need_transpose:
            quantize = rearrange(quantize, 'b d n -> b n d')

        return quantize, embed_ind, commit_loss


# -- the README's use, in a small autoencoder trained by Adam --
def main(x, steps, **vq_kwargs):
    encoder = nn.Linear(x.shape[-1], 6)
    vq = VectorQuantize(dim = 6, codebook_size = 5, decay = 0.8, commitment = 1., **vq_kwargs)
    decoder = nn.Linear(6, x.shape[-1])
    model = nn.ModuleList([encoder, vq, decoder])
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr = 1e-3)
    for step in range(steps):
        model.train()
        quantized, indices, commit_loss = vq(encoder(x))
        loss = F.mse_loss(decoder(quantized), x) + commit_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        record.append(indices.tolist())
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    model.eval()
    with torch.no_grad():
        quantized, indices, commit_loss = vq(encoder(x))
    record.append(quantized.numpy().copy())
    record.append(indices.tolist())
    record.append(commit_loss)
"""

VQ_STEPS = [
    (
        "import torch\nfrom torch import nn, einsum\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn, einsum\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class SharedRandperm:
    """``torch.randperm(n)`` of a library drawing from one seeded stream."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randperm(n, *, device=None, dtype=None, generator=None, **_):
            return lib.tensor(rng.permutation(n), dtype=dtype or lib.int64)

        self.saved = lib.randperm
        lib.randperm = randperm
        return self

    def __exit__(self, *exc):
        self.lib.randperm = self.saved
        return False


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"kmeans_init": True, "kmeans_iters": 3, "threshold_ema_dead_code": 2},
        {"use_cosine_sim": True, "kmeans_init": True, "threshold_ema_dead_code": 2},
        {"codebook_dim": 4},
        {"use_cosine_sim": True},
    ],
    ids=["euclidean", "kmeans-expiry", "cosine-kmeans-expiry", "projected", "cosine"],
)
def test_vector_quantize_trains_its_codebook_as_torch(options):
    x = 4 * np.random.default_rng(3053).standard_normal((2, 7, 3)).astype(np.float32)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = VQ_SOURCE if lib is torch else port(VQ_SOURCE, VQ_STEPS)
        with SharedDraws(lib, 3053), SharedRandperm(lib, 3054):
            names = run_source(text, lib, record=record, initialize=initialize)
            names["main"](lib.tensor(x), 4, **options)
        records.append(record)
    assert len({code for row in records[0][-2] for code in row}) > 1  # more than one code used
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
