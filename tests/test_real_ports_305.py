"""Programs written with einops, ported to retrograd line for line (the harness:
``tests/real_ports.py``), continued from ``tests/test_real_ports_303.py``; both written here
in the style of lucidrains' repositories.

- A parallel-block language model in the style of lucidrains/PaLM-pytorch (its model, its
  autoregressive wrapper and its ``train.py`` loop), small: a layer norm with a learned scale
  and a ``shift`` buffer by ``F.layer_norm``, rotary angles by ``einsum("i , j -> i j", ...)``
  and the half rotation by einops' ``rearrange(x, "... (j d) -> ... j d", j=2)`` and
  ``unbind(dim=-2)``, one fused projection cut by ``split(self.splits, dim=-1)``, multi-query
  attention (``rearrange(q, "b n (h d) -> b h n d", h=...)``, ``einsum("b h i d, b j d -> b h
  i j", ...)``, ``rearrange(out, "b h n d -> b n (h d)")``), the causal mask and rotary angles
  cached by ``register_buffer(..., persistent=False)`` over a ``None`` buffer, a SiLU-gated
  feed-forward, an ``nn.Sequential`` whose output ``Linear`` is tied to the embedding
  (``net[-1].weight = net[0].weight``) before ``nn.init.normal_``; the wrapper's
  ``F.cross_entropy(rearrange(logits, "b c n -> b n c"), targets)``, sampling under
  ``@torch.no_grad()`` and an eval-mode decorator with top-k by ``torch.full_like(logits,
  float("-inf")).scatter_(1, where, top)`` and ``torch.multinomial``; a ``Dataset`` of
  ``torch.randint`` windows through ``DataLoader``, gradient accumulation,
  ``clip_grad_norm_`` and Adam, its ``print`` log compared. The draws (``randint``,
  ``multinomial``) come from one seeded stream in both runs.
- A vector quantiser in the style of lucidrains/vector-quantize-pytorch (as of late 2021,
  before its multi-head versions): k-means by ``rearrange(points, 'n d -> n () d') -
  rearrange(centres, 'c d -> () c d')``, ``torch.bincount(..., minlength=...)``,
  ``new_zeros(..., dtype=...).scatter_add_(0, repeat(owner, 'n -> n d', d=dim), points)`` and
  ``torch.where``; Euclidean and cosine codebooks (subclasses of one base) with their buffers
  (``torch.Tensor([not kmeans_init])`` read by ``if not self.initted``), moving averages by
  ``average.data.mul_(decay).add_(value, alpha=(1 - decay))``, ``rearrange(x, '... d -> (...)
  d')``, ``F.one_hot(...).type(dtype)``, ``F.embedding`` of the codebook, dead codes re-drawn
  by ``torch.randperm``/``torch.randint`` and ``.data.copy_``; the quantiser with the
  straight-through ``x + (quantized - x).detach()``, the commitment loss and ``codebook_dim``
  projections. Driven between an encoder and a decoder trained by Adam, in five
  configurations; the draws (``randn``, ``randint``, ``randperm``) come from one seeded stream
  in both runs.

The lines changed: the imports (``torch`` is retrograd; ``from einops import ...`` is
unchanged: einops takes retrograd tensors) and the gradient lines (``loss.backward()`` returns
the gradients, summed over the accumulation; ``clip_grad_norm_`` and ``step`` take them).
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
from torch.nn import functional as F
from einops import rearrange
from torch import einsum, nn
from torch.utils.data import Dataset, DataLoader


class ScaleOnlyNorm(nn.Module):
    # layer norm with a learned scale and a fixed zero shift (kept as a buffer)
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        self.register_buffer("shift", torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.scale, self.shift)


class Skip(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return x + self.fn(x)


class Rotary(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)))

    def forward(self, n, *, device):
        t = torch.arange(n, device=device, dtype=self.inv_freq.dtype)
        angles = einsum("i , j -> i j", t, self.inv_freq)
        return torch.cat((angles, angles), dim=-1)


def rotate(x, angles):
    # rotate each (first half, second half) feature pair by its angle
    halves = rearrange(x, "... (j d) -> ... j d", j=2)
    first, second = halves.unbind(dim=-2)
    turned = torch.cat((-second, first), dim=-1)
    return x * angles.cos() + turned * angles.sin()


class GatedSiLU(nn.Module):
    def forward(self, x):
        value, gate = x.chunk(2, dim=-1)
        return value * F.silu(gate)


class ParallelBlock(nn.Module):
    """Attention and feed-forward side by side from one normalised input and one fused
    projection; the attention has many query heads and a single key/value head."""

    def __init__(self, dim, head_dim=64, heads=8, ff_mult=4):
        super().__init__()
        self.norm = ScaleOnlyNorm(dim)
        self.heads, self.scale = heads, head_dim**-0.5
        ff_dim = ff_mult * dim
        self.splits = (heads * head_dim, head_dim, head_dim, 2 * ff_dim)
        self.proj_in = nn.Linear(dim, sum(self.splits), bias=False)
        self.attn_out = nn.Linear(heads * head_dim, dim, bias=False)
        self.ff_out = nn.Sequential(GatedSiLU(), nn.Linear(ff_dim, dim, bias=False))
        self.rotary = Rotary(head_dim)
        # built on first use, rebuilt when a longer sequence comes
        self.register_buffer("future", None, persistent=False)
        self.register_buffer("angles", None, persistent=False)

    def causal_mask(self, n, device):
        if self.future is None or self.future.shape[-1] < n:
            upper = torch.ones((n, n), device=device, dtype=torch.bool).triu(1)
            self.register_buffer("future", upper, persistent=False)
        return self.future[:n, :n]

    def rotary_angles(self, n, device):
        if self.angles is None or self.angles.shape[-2] < n:
            self.register_buffer("angles", self.rotary(n, device=device), persistent=False)
        return self.angles[:n]

    def forward(self, x):
        n, device = x.shape[1], x.device
        q, k, v, ff = self.proj_in(self.norm(x)).split(self.splits, dim=-1)
        q = rearrange(q, "b n (h d) -> b h n d", h=self.heads)
        angles = self.rotary_angles(n, device)
        q, k = rotate(q, angles) * self.scale, rotate(k, angles)
        scores = einsum("b h i d, b j d -> b h i j", q, k)
        scores = scores.masked_fill(self.causal_mask(n, device), -torch.finfo(scores.dtype).max)
        out = einsum("b h i j, b j d -> b h i d", scores.softmax(dim=-1), v)
        return self.attn_out(rearrange(out, "b h n d -> b n (h d)")) + self.ff_out(ff)


def parallel_lm(*, vocab, dim, depth, head_dim=64, heads=8, ff_mult=4):
    blocks = [Skip(ParallelBlock(dim, head_dim, heads, ff_mult)) for _ in range(depth)]
    net = nn.Sequential(nn.Embedding(vocab, dim), *blocks, ScaleOnlyNorm(dim),
                        nn.Linear(dim, vocab, bias=False))
    net[-1].weight = net[0].weight  # logits by the (shared) embedding matrix
    nn.init.normal_(net[0].weight, mean=0.0, std=0.02)
    return net


def evaluating(method):
    # run a method in eval mode, then restore the mode the model was in
    def wrapped(model, *args, **kwargs):
        mode = model.training
        model.eval()
        try:
            return method(model, *args, **kwargs)
        finally:
            model.train(mode)

    return wrapped


def keep_top(logits, fraction_dropped=0.9):
    k = int((1 - fraction_dropped) * logits.shape[-1])
    top, where = torch.topk(logits, k)
    return torch.full_like(logits, float("-inf")).scatter_(1, where, top)


class NextToken(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    @torch.no_grad()
    @evaluating
    def sample(self, prompt, length, temperature=1.0, fraction_dropped=0.9):
        out = prompt
        for _ in range(length):
            logits = keep_top(self.net(out)[:, -1, :], fraction_dropped)
            pick = torch.multinomial(F.softmax(logits / temperature, dim=-1), 1)
            out = torch.cat((out, pick), dim=-1)
        return out[:, prompt.shape[1] :]

    def forward(self, seq):
        logits = self.net(seq[:, :-1])
        return F.cross_entropy(rearrange(logits, "b c n -> b n c"), seq[:, 1:])


def forever(loader):
    while True:
        yield from loader


def as_text(tokens):
    return "".join(chr(max(32, int(t))) for t in tokens)


class RandomWindows(Dataset):
    # windows of length + 1 bytes at random offsets; the index is ignored
    def __init__(self, data, length):
        super().__init__()
        self.data, self.length = data, length

    def __getitem__(self, index):
        start = torch.randint(0, self.data.size(0) - self.length, (1,))
        return self.data[start : start + self.length + 1].long()

    def __len__(self):
        return self.data.size(0) // self.length


def main(train_bytes, val_bytes, *, steps, batch, accumulate, lr, val_every, sample_every,
         sample_length, window):
    model = NextToken(parallel_lm(vocab=64, dim=16, depth=2, head_dim=8, heads=2))
    initialize(model)
    val_windows = RandomWindows(val_bytes, window)
    train_batches = forever(DataLoader(RandomWindows(train_bytes, window), batch_size=batch))
    val_batches = forever(DataLoader(val_windows, batch_size=batch))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        model.train()
        for _ in range(accumulate):
            loss = model(next(train_batches))
            loss.backward()
        print(f"step {step} train {loss.item()}")
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        opt.step()
        opt.zero_grad()
        record.append(loss.item())
        if step % val_every == 0:
            model.eval()
            with torch.no_grad():
                val_loss = model(next(val_batches))
            print(f"step {step} val {val_loss.item()}")
            record.append(val_loss.item())
        if step % sample_every == 0:
            prompt = random.choice(val_windows)[:-1]
            print("prompt:", as_text(prompt))
            text = as_text(model.sample(prompt[None, ...], sample_length)[0])
            print("sample:", text)
            record.append(text)
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
'''

PALM_STEPS = [
    (
        "import torch\nfrom torch.nn import functional as F\nfrom einops import rearrange\n"
        "from torch import einsum, nn\n",
        "import retrograd as torch\nfrom retrograd.nn import functional as F\n"
        "from einops import rearrange\nfrom retrograd import einsum, nn\n",
    ),
    (
        "        for _ in range(accumulate):\n"
        "            loss = model(next(train_batches))\n"
        "            loss.backward()\n"
        '        print(f"step {step} train {loss.item()}")\n'
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)\n"
        "        opt.step()\n",
        "        grads = None\n"
        "        for _ in range(accumulate):\n"
        "            loss = model(next(train_batches))\n"
        "            g = loss.backward()\n"
        "            grads = g if grads is None else grads + g\n"
        '        print(f"step {step} train {loss.item()}")\n'
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=0.5)\n"
        "        opt.step(grads)\n",
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


def test_parallel_block_lm_trains_and_samples_as_torch(capsys):
    rng = np.random.default_rng(3051)
    train_bytes = rng.integers(33, 64, 80).astype(np.uint8)  # printable bytes
    val_bytes = rng.integers(33, 64, 40).astype(np.uint8)
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
                lib.from_numpy(train_bytes.astype(np.int64)),
                lib.from_numpy(val_bytes.astype(np.int64)),
                steps=3,
                batch=2,
                accumulate=2,
                lr=1e-3,
                val_every=1,
                sample_every=2,
                sample_length=4,
                window=8,
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    # the losses print in full: equal to 4 digits (the records compare them closer)
    assert _rounded(logs[1]) == _rounded(logs[0])
    assert logs[0].count(" val ") == 3 and logs[0].count("sample:") == 2
    assert sum(isinstance(r, str) and len(r) == 4 for r in records[0]) == 2  # the samples
    # the output layer is the embedding (tied), in the state dict twice
    assert list(records[0][-1]) == list(records[1][-1])
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- a vector quantiser in the style of lucidrains/vector-quantize-pytorch -----------------------
VQ_SOURCE = """
import torch
from torch import nn, einsum
from torch.nn import functional as F
from einops import repeat, rearrange


def unit(t):
    return F.normalize(t, p=2, dim=-1)


def ema_(average, value, decay):
    # average <- decay * average + (1 - decay) * value, in place on the storage
    average.data.mul_(decay).add_(value, alpha=(1 - decay))


def pick_rows(rows, count):
    n = rows.shape[0]
    if n >= count:
        chosen = torch.randperm(n, device=rows.device)[:count]
    else:
        chosen = torch.randint(0, n, (count,), device=rows.device)
    return rows[chosen]


def cluster(points, k, iters=10, cosine=False):
    # Lloyd's iterations from k sampled points; an empty cluster keeps its centre
    dim = points.shape[-1]
    centres = pick_rows(points, k)
    for _ in range(iters):
        if cosine:
            affinity = points @ centres.t()
        else:
            offsets = rearrange(points, 'n d -> n () d') - rearrange(centres, 'c d -> () c d')
            affinity = -(offsets ** 2).sum(dim=-1)
        owner = affinity.max(dim=-1).indices
        counts = torch.bincount(owner, minlength=k)
        empty = counts == 0
        sums = owner.new_zeros(k, dim, dtype=points.dtype)
        sums.scatter_add_(0, repeat(owner, 'n -> n d', d=dim), points)
        means = sums / counts.masked_fill(empty, 1)[..., None]
        if cosine:
            means = unit(means)
        centres = torch.where(empty[..., None], centres, means)
    return centres, counts


class Codebook(nn.Module):
    \"\"\"Codes kept as buffers and learned by moving averages, not by gradients; optionally
    started by k-means on the first batch, and codes used too rarely re-drawn from it.\"\"\"

    cosine = False

    def __init__(self, dim, size, kmeans_init=False, kmeans_iters=10, decay=0.8, eps=1e-5,
                 dead_below=2):
        super().__init__()
        self.size, self.decay, self.eps = size, decay, eps
        self.kmeans_iters, self.dead_below = kmeans_iters, dead_below
        started = torch.Tensor([not kmeans_init])  # a float flag, read as a bool
        self.register_buffer('initted', started)
        self.register_buffer('cluster_size', torch.zeros(size))
        self.register_buffer('embed', self.first_codes(size, dim, kmeans_init))

    def first_codes(self, size, dim, kmeans_init):
        return torch.zeros(size, dim) if kmeans_init else torch.randn(size, dim)

    def start_from(self, points):
        codes, counts = cluster(points, self.size, self.kmeans_iters, cosine=self.cosine)
        self.embed.data.copy_(codes)
        self.cluster_size.data.copy_(counts)
        done = torch.Tensor([True])
        self.initted.data.copy_(done)

    def renew_dead(self, x):
        if self.dead_below == 0:
            return
        dead = self.cluster_size < self.dead_below
        if not torch.any(dead):
            return
        rows = self.prepare(rearrange(x, '... d -> (...) d'))
        fresh = torch.where(dead[..., None], pick_rows(rows, self.size), self.embed)
        self.embed.data.copy_(fresh)

    def prepare(self, rows):
        return rows

    def forward(self, x):
        rows = self.prepare(rearrange(x, '... d -> (...) d'))
        if not self.initted:
            self.start_from(rows)
        index = self.affinity(rows).max(dim=-1).indices
        onehot = F.one_hot(index, self.size).type(x.dtype)
        index = index.view(*x.shape[:-1])
        quantized = F.embedding(index, self.embed)
        if self.training:
            self.learn(rows, onehot)
            self.renew_dead(x)
        return quantized, index


class EuclideanCodes(Codebook):
    def __init__(self, dim, size, **kwargs):
        super().__init__(dim, size, **kwargs)
        self.register_buffer('embed_avg', self.embed.clone())

    def start_from(self, points):
        super().start_from(points)
        self.embed_avg.data.copy_(self.embed.clone())

    def affinity(self, rows):
        codes = self.embed.t()
        squared = rows.pow(2).sum(1, keepdim=True) - 2 * rows @ codes
        return -(squared + codes.pow(2).sum(0, keepdim=True))

    def learn(self, rows, onehot):
        ema_(self.cluster_size, onehot.sum(0), self.decay)
        ema_(self.embed_avg, (rows.t() @ onehot).t(), self.decay)
        # Laplace smoothing keeps an unused code's count above zero
        total = self.cluster_size.sum()
        smoothed = (self.cluster_size + self.eps) / (total + self.size * self.eps) * total
        self.embed.data.copy_(self.embed_avg / smoothed.unsqueeze(1))


class CosineCodes(Codebook):
    cosine = True

    def first_codes(self, size, dim, kmeans_init):
        return torch.zeros(size, dim) if kmeans_init else unit(torch.randn(size, dim))

    def prepare(self, rows):
        return unit(rows)

    def affinity(self, rows):
        return rows @ unit(self.embed).t()

    def learn(self, rows, onehot):
        counts = onehot.sum(0)
        ema_(self.cluster_size, counts, self.decay)
        empty = counts == 0
        means = (rows.t() @ onehot / counts.masked_fill(empty, 1.).unsqueeze(0)).t()
        means = torch.where(empty[..., None], unit(self.embed), unit(means))
        ema_(self.embed, means, self.decay)


class Quantizer(nn.Module):
    def __init__(self, dim, codebook_size, codebook_dim=None, decay=0.8, commitment=1.,
                 eps=1e-5, kmeans_init=False, kmeans_iters=10, use_cosine_sim=False,
                 threshold_ema_dead_code=0):
        super().__init__()
        inner = codebook_dim if codebook_dim is not None else dim
        self.project_in = nn.Linear(dim, inner) if inner != dim else nn.Identity()
        self.project_out = nn.Linear(inner, dim) if inner != dim else nn.Identity()
        self.commitment = commitment
        kind = CosineCodes if use_cosine_sim else EuclideanCodes
        self.codes = kind(inner, codebook_size, kmeans_init=kmeans_init,
                          kmeans_iters=kmeans_iters, decay=decay, eps=eps,
                          dead_below=threshold_ema_dead_code)

    def forward(self, x):
        x = self.project_in(x)
        quantized, index = self.codes(x)
        commit = 0.
        if self.training:
            commit = F.mse_loss(quantized.detach(), x) * self.commitment
            quantized = x + (quantized - x).detach()  # straight-through gradient
        return self.project_out(quantized), index, commit


# an autoencoder with the quantiser in its bottleneck, trained by Adam
def main(x, steps, **options):
    width = x.shape[-1]
    encoder = nn.Linear(width, 6)
    quantizer = Quantizer(6, codebook_size=5, decay=0.8, commitment=1., **options)
    decoder = nn.Linear(6, width)
    model = nn.ModuleList([encoder, quantizer, decoder])
    initialize(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        model.train()
        codes, index, commit = quantizer(encoder(x))
        loss = F.mse_loss(decoder(codes), x) + commit
        opt.zero_grad()
        loss.backward()
        opt.step()
        state = {name: t.detach().numpy().copy() for name, t in model.state_dict().items()}
        record.extend([loss.item(), index.tolist(), state])
    model.eval()
    with torch.no_grad():
        codes, index, commit = quantizer(encoder(x))
    record.extend([codes.numpy().copy(), index.tolist(), commit])
"""

VQ_STEPS = [
    (
        "import torch\nfrom torch import nn, einsum\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn, einsum\n"
        "from retrograd.nn import functional as F\n",
    ),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
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
def test_vector_quantizer_learns_its_codebook_as_torch(options):
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
