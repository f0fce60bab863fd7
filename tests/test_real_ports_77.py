"""Real-port tests, continued (the harness: ``tests/real_ports.py``): programs written here
in the style of three kinds of real PyTorch code, each run under torch and, ported, under
retrograd from the same weights and draws, their records compared.

- A text classifier over imbalanced data, in the style of ufoym/imbalanced-dataset-sampler
  and PyTorch-NLP's samplers. Surface: a ``torch.utils.data.sampler.Sampler`` subclass
  weighting samples by inverse label counts (``torch.DoubleTensor``) whose ``__iter__``
  indexes a list by the 0-d tensors of ``torch.multinomial(..., replacement=True)``; or
  ``WeightedRandomSampler`` over weights built from ``torch.unique(target, sorted=True)``
  counts; a ``BatchSampler`` subclass (``super().__init__(sampler, batch_size, drop_last)``,
  its own ``__len__``) batching buckets of an inner ``BatchSampler`` sorted by length through
  a ``Sampler`` subclass (``super().__init__()``) and shuffled by
  ``SubsetRandomSampler(list(BatchSampler(...)))``, given to ``DataLoader(batch_sampler=)``;
  ``ConcatDataset``; a ``Subset`` of a ``range``; a ``zip(*batch)`` collate with
  ``pad_sequence(batch_first=True, padding_value=0)``; a bidirectional LSTM over
  ``pack_padded_sequence(enforce_sorted=False)`` reading ``h_n[-2]``/``h_n[-1]`` and a
  length-masked mean of ``pad_packed_sequence``; gradient accumulation (ported as a sum of
  ``Gradients``) with ``clip_grad_norm_``; evaluation under ``@torch.no_grad()``.
- A Mamba-2 style character model, in the style of mamba2-minimal: a ``dataclass`` config,
  ``NamedTuple`` caches, ``torch.empty`` parameters initialised under ``no_grad`` (``rand``,
  ``expm1``, ``clamp``, ``uniform_``, ``fill_``), ``torch.split``, a depthwise ``Conv1d``,
  ``F.pad`` with a negative (cropping) width, einops ``rearrange``/``repeat``, the chunked
  scan by ``segsum`` (``tril`` masks, ``masked_fill(-inf)``, ``cumsum``, ``exp``) and
  three- and four-operand ``einsum``; generation by the recurrent step (``torch.roll``,
  ``copy_`` into the cache) with top-k/top-p filtering (``topk``, ``sort(descending=True)``,
  boolean-mask assignment of ``-torch.inf``, ``multinomial``); AdamW, tied embeddings.
- A tabular FT-Transformer, in the style of rtdl: numerical and categorical feature
  tokenizers (per-feature weights, category offsets as a non-persistent buffer built by
  ``cumsum``), a ``[CLS]`` token, ReGLU/GEGLU by ``chunk``, attention with heads split by
  ``reshape``/``transpose`` and Linformer-style key/value compression shared head-wise or
  layer-wise, ``ModuleList`` of ``ModuleDict`` blocks with ``nn.Identity``, ``nn.init``'s
  ``kaiming_uniform_``/``xavier_uniform_``/``zeros_``, AdamW with a no-decay parameter group,
  binary, multiclass and regression losses.

These programs brought no fix of their own (the ports they replace found none); they guard
the surfaces above. The tests after them guard the data-loading fixes that came with them:
``len(iter(loader))``, ``collate(collate_fn_map=)``, loaders remade from another's attributes,
``Subset`` reading through ``__getitems__``, ``ConcatDataset.cumsum``, and
``pack_padded_sequence`` taking float lengths.
"""

from __future__ import annotations

import functools
import importlib

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    ported_imports,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

IMBALANCED_SOURCE = """
import math
import torch
import torch.nn as nn
import torch.utils.data
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import ConcatDataset, DataLoader, Dataset, Subset
from torch.utils.data.sampler import BatchSampler, Sampler
from torch.utils.data.sampler import SubsetRandomSampler, WeightedRandomSampler


class InverseFrequencySampler(torch.utils.data.sampler.Sampler):
    # draws indices with replacement, each class equally likely overall
    def __init__(self, dataset, label_of):
        self.positions = list(range(len(dataset)))
        labels = [label_of(dataset, i) for i in self.positions]
        counts = {}
        for y in labels:
            counts[y] = counts.get(y, 0) + 1
        self.weights = torch.DoubleTensor([1.0 / counts[y] for y in labels])

    def __iter__(self):
        drawn = torch.multinomial(self.weights, len(self.positions), replacement=True)
        return (self.positions[k] for k in drawn)

    def __len__(self):
        return len(self.positions)


class ShortestFirst(Sampler):
    def __init__(self, indices, key):
        super().__init__()
        self.order = sorted(range(len(indices)), key=lambda j: key(indices[j]))

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)


class LengthBuckets(BatchSampler):
    # batches of similar lengths: a bucket of `spread` batches is sorted, cut, then shuffled
    def __init__(self, sampler, batch_size, drop_last, key, spread=2):
        super().__init__(sampler, batch_size=batch_size, drop_last=drop_last)
        self.key = key
        self.buckets = BatchSampler(sampler, min(batch_size * spread, len(sampler)), False)

    def __iter__(self):
        for bucket in self.buckets:
            ordered = ShortestFirst(bucket, self.key)
            cuts = list(BatchSampler(ordered, self.batch_size, self.drop_last))
            for batch in SubsetRandomSampler(cuts):
                yield [bucket[j] for j in batch]

    def __len__(self):
        n = len(self.sampler) / self.batch_size
        return int(n) if self.drop_last else math.ceil(n)


class Reviews(Dataset):
    def __init__(self, token_lists, labels):
        self.items = [torch.LongTensor(t) for t in token_lists]
        self.labels = labels

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i], self.labels[i]


def collate(batch):
    tokens, labels = zip(*batch)
    lengths = [len(t) for t in tokens]
    return pad_sequence(tokens, batch_first=True, padding_value=0), torch.tensor(labels), lengths


class BiLSTMClassifier(nn.Module):
    def __init__(self, vocab, dim=6, hidden=5, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.rnn = nn.LSTM(dim, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(4 * hidden, classes)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(
            self.embed(tokens), lengths, batch_first=True, enforce_sorted=False
        )
        seq, (h_n, _) = self.rnn(packed)
        seq, seq_lengths = pad_packed_sequence(seq, batch_first=True)
        ends = torch.cat((h_n[-2], h_n[-1]), dim=1)
        real = torch.arange(seq.size(1))[None, :] < seq_lengths[:, None]
        mean = (seq * real.unsqueeze(-1)).sum(1) / seq_lengths.unsqueeze(1).float()
        return self.out(torch.cat([ends, mean], dim=1))


@torch.no_grad()
def score(model, loader, loss_fn):
    model.eval()
    loss_sum, hits, seen = 0.0, 0, 0
    for tokens, labels, lengths in loader:
        logits = model(tokens, lengths)
        loss_sum += loss_fn(logits, labels).item() * labels.size(0)
        hits += (logits.argmax(1) == labels).sum().item()
        seen += labels.size(0)
    model.train()
    return loss_sum / seen, hits / seen


def main(parts, held_out, balancing, vocab, epochs=2, batch_size=4, accumulate=2):
    train_set = ConcatDataset([Reviews(*part) for part in parts])
    if balancing == 'inverse':
        sampler = InverseFrequencySampler(train_set, lambda ds, i: ds[i][1])
    else:
        target = torch.tensor([y for _, y in train_set])
        counts = torch.tensor([(target == c).sum() for c in torch.unique(target, sorted=True)])
        per_class = 1.0 / counts.float()
        sampler = WeightedRandomSampler(torch.tensor([per_class[c] for c in target]), len(target))
    lengths = [len(t) for t, _ in train_set]
    buckets = LengthBuckets(sampler, batch_size, False, key=lambda i: lengths[i])
    train_loader = DataLoader(train_set, batch_sampler=buckets, collate_fn=collate)
    check_set = Subset(Reviews(*held_out), range(0, len(held_out[0]), 2))
    check_loader = DataLoader(check_set, batch_size=batch_size, collate_fn=collate)

    model = BiLSTMClassifier(vocab)
    initialize(model)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    optimizer.zero_grad()
    for epoch in range(epochs):
        for i, (tokens, labels, lens) in enumerate(train_loader):
            record.append([labels.tolist(), list(lens)])
            loss = loss_fn(model(tokens, lens), labels) / accumulate
            loss.backward()
            if (i + 1) % accumulate == 0 or i + 1 == len(train_loader):
                nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
                optimizer.step()
                optimizer.zero_grad()
                record.append({k: p.detach().numpy().copy() for k, p in model.named_parameters()})
            record.append(loss.item())
        check_loss, accuracy = score(model, check_loader, loss_fn)
        record.append([check_loss, accuracy])
        print(f"epoch {epoch}: held-out loss {check_loss:.4f} accuracy {accuracy:.3f}")
"""

IMBALANCED_STEPS = [
    (
        "    optimizer.zero_grad()\n    for epoch in range(epochs):\n",
        "    optimizer.zero_grad()\n    grads = None\n    for epoch in range(epochs):\n",
    ),
    (
        "            loss.backward()\n",
        "            g = loss.backward()\n            grads = g if grads is None else grads + g\n",
    ),
    ("clip_grad_norm_(model.parameters(),", "clip_grad_norm_(grads, model.parameters(),"),
    (
        "                optimizer.step()\n                optimizer.zero_grad()\n",
        "                optimizer.step(grads)\n                optimizer.zero_grad()\n"
        "                grads = None\n",
    ),
    ("import torch\n", "import retrograd as torch\n"),
    (
        "import torch.nn as nn\nimport torch.utils.data\n",
        "import retrograd.nn as nn\nimport retrograd.utils.data\n",
    ),
]


class SharedSampling:
    """``torch.multinomial`` (1-d weights, with replacement) and ``torch.randperm`` of a
    library drawing from one seeded stream, also where its samplers look them up (torch's
    through the module ``torch``, retrograd's as names imported into its sampler module)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)
        self.homes = [lib] if lib is torch else [lib, rg_sampler]

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randperm(n, generator=None, **_):
            return lib.tensor(rng.permutation(int(n)), dtype=lib.int64)

        def multinomial(weights, num_samples, replacement=False, generator=None):
            assert replacement and weights.ndim == 1
            w = np.asarray(weights.numpy(), dtype=np.float64)
            cumulative = np.cumsum(w / w.sum())
            picks = (cumulative[None, :] < rng.uniform(size=(num_samples, 1))).sum(-1)
            return lib.tensor(np.minimum(picks, len(w) - 1), dtype=lib.int64)

        self.saved = [(home, home.randperm, home.multinomial) for home in self.homes]
        for home in self.homes:
            home.randperm, home.multinomial = randperm, multinomial
        return self

    def __exit__(self, *exc):
        for home, saved_randperm, saved_multinomial in self.saved:
            home.randperm, home.multinomial = saved_randperm, saved_multinomial
        return False


def _reviews(rng, counts, vocab_size):
    """Token sequences of lengths 2..6 (0 is the padding index), class ``c`` leaning on
    token ``c + 1``, ``counts[c]`` of each class in a shuffled order."""
    labels = [c for c, n in enumerate(counts) for _ in range(n)]
    rng.shuffle(labels)
    sequences = []
    for label in labels:
        tokens = rng.integers(1, vocab_size, rng.integers(2, 7)).tolist()
        tokens[rng.integers(0, len(tokens))] = label + 1
        sequences.append(tokens)
    return sequences, labels


@pytest.mark.parametrize("balancing", ["inverse", "weighted"])
def test_imbalanced_bucketed_padded_lstm_classifier_matches_torch(capsys, balancing):
    rng = np.random.default_rng(7701)
    vocab_size = 10
    parts = [_reviews(rng, (6, 2, 0), vocab_size), _reviews(rng, (2, 0, 2), vocab_size)]
    held_out = _reviews(rng, (2, 2, 2), vocab_size)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            IMBALANCED_SOURCE
            if lib is torch
            else ported_imports(port(IMBALANCED_SOURCE, IMBALANCED_STEPS))
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedSampling(lib, 7702):
            names["main"](parts, held_out, balancing, vocab_size)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert logs[0].count("held-out loss") == 2
    # 12 samples drawn, buckets of 8 and 4: three batches an epoch, stepped after the
    # second and the third
    assert sum(isinstance(r, dict) for r in records[0]) == 4
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


MAMBA_SOURCE = """
import dataclasses
from typing import NamedTuple

import torch
from torch.nn import functional as F
from einops import repeat, rearrange
from torch import Tensor, nn


@dataclasses.dataclass
class SSMConfig:
    vocab: int
    width: int = 8
    layers: int = 2
    state: int = 4
    kernel: int = 3
    heads: int = 4
    chunk: int = 4

    @property
    def inner(self):
        return 2 * self.width


class LayerCache(NamedTuple):
    conv: Tensor  # (batch, channels, kernel): the last inputs of the convolution
    ssm: Tensor   # (batch, heads, head size, state)


def silu(t):
    return t * F.sigmoid(t)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

    def forward(self, t, gate=None):
        if gate is not None:
            t = t * silu(gate)
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def segsum(a):
    # out[..., i, j] = a[j+1] + ... + a[i] below the diagonal, 0 on it, -inf above
    n = a.size(-1)
    a = repeat(a, "... i -> ... i j", j=n)
    a = a.masked_fill(~torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1), 0)
    total = torch.cumsum(a, dim=-2)
    return total.masked_fill(~torch.tril(torch.ones(n, n, dtype=torch.bool)), -torch.inf)


def chunked_scan(x, a, B, C, chunk):
    # x: (b, l, h, p), a: (b, l, h), B and C: (b, l, n); returns y and the final state
    x, a, B, C = [rearrange(t, "b (c l) ... -> b c l ...", l=chunk) for t in (x, a, B, C)]
    a = rearrange(a, "b c l h -> b h c l")
    run = torch.cumsum(a, dim=-1)
    within = torch.einsum("bcln, bcsn, bhcls, bcshp -> bclhp", C, B, torch.exp(segsum(a)), x)
    to_end = torch.exp(run[..., -1:] - run)
    ends = torch.einsum("bcln, bhcl, bclhp -> bchpn", B, to_end, x)
    ends = torch.cat([torch.zeros_like(ends[:, :1]), ends], dim=1)
    across = torch.exp(segsum(F.pad(run[..., -1], (1, 0))))
    starts = torch.einsum("bhzc, bchpn -> bzhpn", across, ends)
    carried = torch.einsum("bcln, bchpn, bhcl -> bclhp", C, starts[:, :-1], torch.exp(run))
    return rearrange(within + carried, "b c l h p -> b (c l) h p"), starts[:, -1]


class Mixer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        conv_channels = cfg.inner + 2 * cfg.state
        self.in_proj = nn.Linear(cfg.width, cfg.inner + conv_channels + cfg.heads, bias=False)
        self.conv1d = nn.Conv1d(conv_channels, conv_channels, cfg.kernel, groups=conv_channels,
                                padding=cfg.kernel - 1)
        self.dt_bias = nn.Parameter(torch.empty(cfg.heads))
        self.A_log = nn.Parameter(torch.empty(cfg.heads))
        self.D = nn.Parameter(torch.empty(cfg.heads))
        self.norm = RMSNorm(cfg.inner)
        self.out_proj = nn.Linear(cfg.inner, cfg.width, bias=False)

    def sizes(self):
        return [self.cfg.inner, self.cfg.inner + 2 * self.cfg.state, self.cfg.heads]

    def forward(self, u):
        cfg, steps = self.cfg, u.shape[1]
        z, xbc, dt = torch.split(self.in_proj(u), self.sizes(), dim=-1)
        dt = F.softplus(dt + self.dt_bias)
        conv_tail = F.pad(rearrange(xbc, "b l d -> b d l"), (cfg.kernel - steps, 0))
        xbc = silu(self.conv1d(xbc.transpose(1, 2)).transpose(1, 2)[:, :steps])
        x, B, C = torch.split(xbc, [cfg.inner, cfg.state, cfg.state], dim=-1)
        x = rearrange(x, "b l (h p) -> b l h p", h=cfg.heads)
        A = -torch.exp(self.A_log)
        y, last = chunked_scan(x * dt.unsqueeze(-1), A * dt, B, C, cfg.chunk)
        y = rearrange(y + x * rearrange(self.D, "h -> h 1"), "b l h p -> b l (h p)")
        return self.out_proj(self.norm(y, z)), LayerCache(conv_tail, last)

    def step(self, u, cache):
        cfg = self.cfg
        z, xbc, dt = torch.split(self.in_proj(u.squeeze(1)), self.sizes(), dim=-1)
        cache.conv.copy_(torch.roll(cache.conv, shifts=-1, dims=-1))
        cache.conv[:, :, -1] = xbc
        xbc = torch.sum(cache.conv * rearrange(self.conv1d.weight, "d 1 k -> d k"), dim=-1)
        xbc = silu(xbc + self.conv1d.bias)
        x, B, C = torch.split(xbc, [cfg.inner, cfg.state, cfg.state], dim=-1)
        dt = F.softplus(dt + self.dt_bias)
        decay = torch.exp(dt * -torch.exp(self.A_log))
        x = rearrange(x, "b (h p) -> b h p", h=cfg.heads)
        cache.ssm.copy_(cache.ssm * rearrange(decay, "b h -> b h 1 1")
                        + torch.einsum("bh, bn, bhp -> bhpn", dt, B, x))
        y = torch.einsum("bhpn, bn -> bhp", cache.ssm, C) + rearrange(self.D, "h -> h 1") * x
        return self.out_proj(self.norm(rearrange(y, "b h p -> b (h p)"), z)).unsqueeze(1)


class CharSSM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.width)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(dict(norm=RMSNorm(cfg.width), mixer=Mixer(cfg)))
            for _ in range(cfg.layers)
        )
        self.norm_f = RMSNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids, caches=None):
        h = self.embed(ids)
        new_caches = []
        for i, block in enumerate(self.blocks):
            normed = block.norm(h)
            if caches is None:
                out, cache = block.mixer(normed)
            else:
                out, cache = block.mixer.step(normed, caches[i]), caches[i]
            h = h + out
            new_caches.append(cache)
        return self.head(self.norm_f(h)), new_caches


def pick(logits, temperature=3.0, top_k=5, top_p=0.9):
    logits = logits / temperature
    logits[logits < torch.topk(logits, k=top_k)[0][-1]] = -torch.inf
    ranked, order = torch.sort(logits, descending=True)
    beyond = torch.cumsum(F.softmax(ranked, dim=-1), dim=-1) > top_p
    beyond[1:] = beyond[:-1].clone()
    beyond[0] = False
    logits[order[beyond]] = -torch.inf
    return torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)


def train(text, steps=3, batch=2, window=8):
    vocab = sorted(set(text))
    ids = {ch: i for i, ch in enumerate(vocab)}
    cfg = SSMConfig(vocab=len(vocab))
    model = CharSSM(cfg)
    with torch.no_grad():
        for block in model.blocks:
            mixer = block.mixer
            # time steps log-uniform in [1e-3, 1e-1], floored at 1e-4
            low, high = math.log(1e-3), math.log(1e-1)
            dt = torch.clamp(torch.exp(low + (high - low) * torch.rand(cfg.heads)), min=1e-4)
            mixer.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
            mixer.A_log.copy_(torch.log(torch.empty(cfg.heads).uniform_(1, 8)))
            mixer.D.fill_(1.0)
    initialize(model)

    data = torch.tensor([ids[ch] for ch in text], dtype=torch.long)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    for step in range(steps):
        starts = torch.randint(len(data) - window - 1, (batch,))
        x = torch.stack([data[s:s + window] for s in starts])
        y = torch.stack([data[s + 1:s + window + 1] for s in starts])
        logits, _ = model(x)
        loss = F.cross_entropy(logits.view(-1, cfg.vocab), y.view(-1))
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        optimizer.step()
        record.append(loss.item())
        record.append({k: p.detach().numpy().copy() for k, p in model.named_parameters()})

    model.eval()
    with torch.no_grad():
        logits, caches = model(data[None, :window])
        out = []
        for _ in range(5):
            token = pick(logits[0, -1])
            out.append(vocab[token.item()])
            record.append([c.ssm.numpy().copy() for c in caches])
            record.append([c.conv.numpy().copy() for c in caches])
            logits, caches = model(token[None], caches)
    record.append(out)
"""

MAMBA_STEPS = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("clip_grad_norm_(model.parameters(),", "clip_grad_norm_(grads, model.parameters(),"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
    ("import torch\n", "import retrograd as torch\n"),
]


class SharedMultinomial:
    """``torch.multinomial(probs, 1)`` of a 1-d ``probs`` drawing from one seeded stream (the
    inverse of the cumulative sums)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def multinomial(probs, num_samples, replacement=False, generator=None):
            assert num_samples == 1 and probs.ndim == 1
            p = np.asarray(probs.detach().numpy(), dtype=np.float64)
            pick = int((np.cumsum(p / p.sum()) < rng.uniform()).sum())
            return lib.tensor([min(pick, len(p) - 1)], dtype=lib.int64)

        self.saved = lib.multinomial
        lib.multinomial = multinomial
        return self

    def __exit__(self, *exc):
        self.lib.multinomial = self.saved
        return False


def test_mamba_style_model_trains_by_chunked_scan_and_samples_by_its_recurrent_step_as_torch():
    text = "a rat and a cat sat in a hat on a mat. "
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        source = MAMBA_SOURCE if lib is torch else ported_imports(port(MAMBA_SOURCE, MAMBA_STEPS))
        with SharedDraws(lib, 7711), SharedMultinomial(lib, 7712):
            names = run_source(source, lib, record=record, initialize=initialize)
            names["train"](text)
        records.append(record)
    assert len(set(records[0][-1])) > 1 and len(records[0][-1]) == 5
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


TABULAR_SOURCE = """
import enum
import math

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch import Tensor


class TokenInit(enum.Enum):
    UNIFORM = 'uniform'
    NORMAL = 'normal'

    def fill_(self, t: Tensor, d: int) -> None:
        bound = 1 / math.sqrt(d)
        if self is TokenInit.UNIFORM:
            nn.init.uniform_(t, a=-bound, b=bound)
        else:
            nn.init.normal_(t, std=bound)


class NumberTokens(nn.Module):
    def __init__(self, n_features, d, init=TokenInit.UNIFORM):
        super().__init__()
        self.weight = nn.Parameter(Tensor(n_features, d))
        self.bias = nn.Parameter(Tensor(n_features, d))
        for p in (self.weight, self.bias):
            init.fill_(p, d)

    def forward(self, x):
        return self.weight[None] * x[..., None] + self.bias[None]


class CategoryTokens(nn.Module):
    category_offsets: Tensor

    def __init__(self, cardinalities, d):
        super().__init__()
        offsets = torch.tensor([0] + cardinalities[:-1]).cumsum(0)
        self.register_buffer('category_offsets', offsets, persistent=False)
        self.embeddings = nn.Embedding(sum(cardinalities), d)
        self.bias = nn.Parameter(Tensor(len(cardinalities), d))
        nn.init.kaiming_uniform_(self.bias, a=math.sqrt(5))

    def forward(self, x):
        return self.embeddings(x + self.category_offsets[None]) + self.bias[None]


class ReGLU(nn.Module):
    def forward(self, x):
        value, gate = x.chunk(2, dim=-1)
        return value * F.relu(gate)


class GEGLU(nn.Module):
    def forward(self, x):
        value, gate = x.chunk(2, dim=-1)
        return value * F.gelu(gate)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(d, d) for _ in range(4))
        for layer in (self.query, self.key, self.value, self.out):
            if layer is not self.out:
                nn.init.xavier_uniform_(layer.weight, gain=1 / math.sqrt(2))
            nn.init.zeros_(layer.bias)

    def split(self, t):
        b, n, d = t.shape
        t = t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
        return t.reshape(b * self.heads, n, -1)

    def forward(self, x_q, x_kv, squeeze_k=None, squeeze_v=None):
        q, k, v = self.query(x_q), self.key(x_kv), self.value(x_kv)
        if squeeze_k is not None:  # mix the tokens down to fewer keys and values
            k = squeeze_k(k.transpose(1, 2)).transpose(1, 2)
            v = squeeze_v(v.transpose(1, 2)).transpose(1, 2)
        b, n_q, d = q.shape
        logits = self.split(q) @ self.split(k).transpose(1, 2) / math.sqrt(d // self.heads)
        mixed = F.softmax(logits, dim=-1) @ self.split(v)
        mixed = mixed.reshape(b, self.heads, n_q, -1).transpose(1, 2).reshape(b, n_q, d)
        return self.out(mixed)


class TabularTransformer(nn.Module):
    def __init__(self, n_num, cards, d_out, d=8, blocks=2, heads=2, ffn=6, ratio=None,
                 sharing=None):
        super().__init__()
        self.numbers = NumberTokens(n_num, d, TokenInit.NORMAL)
        self.categories = CategoryTokens(cards, d)
        self.cls = nn.Parameter(Tensor(d))
        TokenInit.UNIFORM.fill_(self.cls, d)
        n_tokens = n_num + len(cards) + 1
        squeeze = lambda: nn.Linear(n_tokens, int(n_tokens * ratio), bias=False)
        self.shared_squeeze = squeeze() if ratio and sharing == 'layerwise' else None
        self.blocks = nn.ModuleList()
        for i in range(blocks):
            block = nn.ModuleDict({
                'attention': Attention(d, heads),
                'attention_norm': nn.LayerNorm(d) if i else nn.Identity(),
                'ffn_in': nn.Linear(d, 2 * ffn),
                'ffn_act': ReGLU() if i % 2 == 0 else GEGLU(),
                'ffn_out': nn.Linear(ffn, d),
                'ffn_norm': nn.LayerNorm(d),
                'output': nn.Identity(),
            })
            if ratio and sharing == 'headwise':
                block['key_squeeze'], block['value_squeeze'] = squeeze(), squeeze()
            self.blocks.append(block)
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, d_out))

    def squeezes(self, block):
        if self.shared_squeeze is not None:
            return self.shared_squeeze, self.shared_squeeze
        if 'key_squeeze' in block:
            return block['key_squeeze'], block['value_squeeze']
        return None, None

    def forward(self, x_num, x_cat):
        x = torch.cat([self.numbers(x_num), self.categories(x_cat)], dim=1)
        x = torch.cat([x, self.cls.view(1, 1, -1).expand(len(x), 1, -1)], dim=1)
        for i, block in enumerate(self.blocks):
            last = i + 1 == len(self.blocks)
            h = block['attention_norm'](x)
            queries = h[:, -1:] if last else h  # only the [CLS] token is read after the last block
            x = (x[:, -1:] if last else x) + block['attention'](queries, h, *self.squeezes(block))
            h = block['ffn_out'](block['ffn_act'](block['ffn_in'](block['ffn_norm'](x))))
            x = block['output'](x + h)
        return self.head(x[:, -1])

    def optimizer(self, lr):
        # no weight decay for biases, norms and the tokenizers
        def quiet(name):
            return name.endswith('.bias') or '_norm' in name or name.startswith(
                ('numbers', 'categories', 'head.0'))

        groups = [
            {'params': [p for n, p in self.named_parameters() if not quiet(n)]},
            {'params': [p for n, p in self.named_parameters() if quiet(n)], 'weight_decay': 0.0},
        ]
        return torch.optim.AdamW(groups, lr=lr, weight_decay=1e-5)


def main(X, y, task, n_classes, cards, ratio, sharing, orders, epochs=2, batch_size=5):
    device = torch.device('cpu')
    X = {part: {k: torch.tensor(v, device=device) for k, v in columns.items()}
         for part, columns in X.items()}
    y = {part: torch.tensor(v, device=device) for part, v in y.items()}
    if task == 'regression':
        mean, std = y['train'].mean().item(), y['train'].std().item()
        y = {part: (v - mean) / std for part, v in y.items()}
    if task != 'multiclass':
        y = {part: v.float() for part, v in y.items()}
    n_num = X['train']['num'].shape[1]
    model = TabularTransformer(n_num, cards, n_classes or 1, ratio=ratio, sharing=sharing)
    initialize(model)
    model.to(device)
    optimizer = model.optimizer(lr=3e-3)
    losses = {'binclass': F.binary_cross_entropy_with_logits, 'multiclass': F.cross_entropy}
    loss_fn = losses.get(task, F.mse_loss)

    @torch.no_grad()
    def evaluate(part):
        model.eval()
        batches = zip(X[part]['num'].split(4), X[part]['cat'].split(4))
        out = torch.cat([model(num, cat) for num, cat in batches])
        out, target = out.squeeze(1).cpu().numpy(), y[part].cpu().numpy()
        if task == 'binclass':
            return float(np.mean(np.round(1 / (1 + np.exp(-out))) == target))
        if task == 'multiclass':
            return float(np.mean(out.argmax(1) == target))
        return float(np.mean((out - target) ** 2)) ** 0.5 * std

    best = None
    for epoch, order in enumerate(orders):
        for batch_idx in torch.tensor(order).split(batch_size):
            model.train()
            optimizer.zero_grad()
            out = model(X['train']['num'][batch_idx], X['train']['cat'][batch_idx])
            loss = loss_fn(out.squeeze(1), y['train'][batch_idx])
            loss.backward()
            optimizer.step()
            record.append(loss.item())
        score = evaluate('val') * (-1 if task == 'regression' else 1)
        improved = best is None or score > best
        best = score if improved else best
        print(f'epoch {epoch} | validation {abs(score):.4f}' + (' (best)' if improved else ''))
        record.append({k: p.detach().numpy().copy() for k, p in model.named_parameters()})
"""

TABULAR_STEPS = [
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


@pytest.mark.parametrize(
    "task, ratio, sharing",
    [("multiclass", None, None), ("regression", 0.5, "headwise"), ("binclass", 0.7, "layerwise")],
)
def test_tabular_transformer_tokenizes_features_and_trains_as_torch(capsys, task, ratio, sharing):
    rng = np.random.default_rng(7721)
    cards = [3, 5]
    n_classes = 3 if task == "multiclass" else None
    features, targets = {}, {}
    for part, n in (("train", 15), ("val", 6)):
        num = rng.standard_normal((n, 3)).astype(np.float32)
        cat = np.stack([rng.integers(0, c, n) for c in cards], 1)
        features[part] = {"num": num, "cat": cat}
        score = num[:, 0] - num[:, 1] + (cat[:, 0] == 1)
        targets[part] = (
            np.digitize(score, [-0.5, 0.5]) if task == "multiclass"
            else (score > 0).astype(np.int64) if task == "binclass"
            else score.astype(np.float32)
        )  # fmt: skip
    orders = [rng.permutation(15) for _ in range(2)]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        source = (
            TABULAR_SOURCE if lib is torch else ported_imports(port(TABULAR_SOURCE, TABULAR_STEPS))
        )
        names = run_source(source, lib, record=record, initialize=initialize)
        names["main"](features, targets, task, n_classes, cards, ratio, sharing, orders)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "(best)" in logs[0]
    # without key compression the keys' bias adds the same logit to every key of a query,
    # which the softmax takes away: its true gradient is zero, so Adam steps it by the noise
    skip = [] if ratio else [f"blocks.{i}.attention.key.bias" for i in range(2)]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5, skip=skip)


def test_a_dataloaders_iterator_has_the_loaders_len_as_torch():
    # the domain-adaptation loops: ``data_iter = iter(loader)`` then ``for i in
    # range(len(data_iter)): x, y = next(data_iter)`` (and ``tqdm(iter(loader))``'s total)
    for lib in (torch, rg):
        data = lib.utils.data
        dataset = data.TensorDataset(lib.arange(10.0), lib.arange(10))
        loaders = [
            data.DataLoader(dataset, batch_size=3),
            data.DataLoader(dataset, batch_size=3, drop_last=True),
            data.DataLoader(dataset, batch_sampler=[[0, 1], [2], [3, 4, 5]]),
            data.DataLoader(dataset, batch_size=None, sampler=[4, 2]),
        ]
        lengths = []
        for loader in loaders:
            data_iter = iter(loader)
            lengths.append(len(data_iter))
            labels = [next(data_iter)[1].tolist() for _ in range(len(data_iter))]
            lengths.append(len(data_iter))  # the sampler's length, however far it has gone
            assert len(labels) == len(loader)
        assert lengths == [4, 4, 3, 3, 3, 3, 2, 2], lib.__name__

    class Stream(rg.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(rg.errors.DTypeError, match="IterableDataset"):
        len(iter(rg.utils.data.DataLoader(Stream(), batch_size=2)))


def test_collate_with_a_map_of_a_programs_own_types_extends_default_collate_as_torch():
    # torch's documented way to extend default_collate (its docstring and data.html):
    # ``collate(batch, collate_fn_map={**default_collate_fn_map, MyType: fn})`` with fn called as
    # ``fn(batch, collate_fn_map=...)``; retrograd had no collate nor default_collate_fn_map
    class Sentence:
        def __init__(self, tokens):
            self.tokens = tokens

    results = []
    for lib in (torch, rg):
        from_collate = importlib.import_module(f"{lib.__name__}.utils.data._utils.collate")

        def collate_sentence_fn(batch, *, collate_fn_map=None, lib=lib):
            return lib.nn.utils.rnn.pad_sequence(
                [lib.tensor(s.tokens) for s in batch], batch_first=True
            )

        collate_map = {**from_collate.default_collate_fn_map, Sentence: collate_sentence_fn}
        batch = [
            {"text": Sentence([3, 1]), "label": 0, "weight": np.float32(0.5), "id": "a"},
            {"text": Sentence([4, 1, 5]), "label": 1, "weight": np.float32(2.0), "id": "b"},
        ]
        out = from_collate.collate(batch, collate_fn_map=collate_map)
        loader = lib.utils.data.DataLoader(
            batch,
            batch_size=2,
            collate_fn=functools.partial(from_collate.collate, collate_fn_map=collate_map),
        )
        assert next(iter(loader))["text"].tolist() == out["text"].tolist()
        results.append(
            [
                out["text"].tolist(),
                out["label"].tolist(),
                str(out["weight"].dtype).rpartition(".")[2],
                out["id"],
                from_collate.default_collate([np.str_("x"), np.str_("y")]),
            ]
        )
        with pytest.raises(TypeError):  # a type no function of the map takes
            from_collate.collate([Sentence([1]), Sentence([2])])
    assert results[1] == results[0]


def test_a_loader_remade_like_another_with_a_new_sampler_as_torch():
    # the training libraries' way to swap a loader's sampler (accelerate's prepare_data_loader,
    # Lightning's re-instantiation): a new DataLoader built from the old one's attributes;
    # retrograd's had no prefetch_factor, persistent_workers, multiprocessing_context
    results = []
    for lib in (torch, rg):
        data = lib.utils.data
        dataset = data.TensorDataset(lib.arange(6.0), lib.arange(6))
        dl = data.DataLoader(dataset, batch_size=4, shuffle=False, drop_last=False)
        remade = data.DataLoader(
            dl.dataset,
            batch_size=dl.batch_size,
            sampler=[5, 1, 3],
            num_workers=dl.num_workers,
            collate_fn=dl.collate_fn,
            pin_memory=dl.pin_memory,
            drop_last=dl.drop_last,
            timeout=dl.timeout,
            worker_init_fn=dl.worker_init_fn,
            multiprocessing_context=dl.multiprocessing_context,
            generator=dl.generator,
            prefetch_factor=dl.prefetch_factor,
            persistent_workers=dl.persistent_workers,
        )
        with_workers = data.DataLoader(dataset, batch_size=2, num_workers=1)
        results.append(
            [[b[1].tolist() for b in remade], dl.prefetch_factor, with_workers.prefetch_factor]
        )
        # what the batches are made from cannot change afterwards: torch raises ValueError
        for name, value in (("batch_size", 2), ("sampler", [0]), ("drop_last", True)):
            with pytest.raises(ValueError, match=f"{name} attribute should not be set"):
                setattr(dl, name, value)
        dl.collate_fn = lambda batch: len(batch)  # this one may change, as torch's
        assert list(dl) == [4, 2]
    assert results[1] == results[0] == [[[5, 1, 3]], None, 2]


def test_a_subset_reads_its_batches_through_the_datasets_getitems_as_torch():
    # a dataset with batched reading (``__getitems__``, as Hugging Face's datasets have) seen
    # through random_split's Subset: torch's Subset hands the batch's indices to it
    for lib in (torch, rg):
        data = lib.utils.data

        class Rows(data.Dataset):
            def __init__(self, lib):
                self.lib, self.calls = lib, []

            def __len__(self):
                return 6

            def __getitem__(self, i):
                return self.lib.tensor(i)

            def __getitems__(self, indices):
                self.calls.append(list(indices))
                return [self.lib.tensor(10 * i) for i in indices]

        rows = Rows(lib)
        subset = data.Subset(rows, [5, 3, 1])
        batches = [b.tolist() for b in data.DataLoader(subset, batch_size=2)]
        assert batches == [[50, 30], [10]], lib.__name__
        assert rows.calls == [[5, 3], [1]], lib.__name__
        assert subset[0].tolist() == 5  # one sample still through __getitem__


def test_a_concat_dataset_subclass_recomputes_its_sizes_by_cumsum_as_torch():
    # continual-learning replay buffers grow a ConcatDataset: ``self.datasets.append(d)`` then
    # ``self.cumulative_sizes = self.cumsum(self.datasets)`` (torch's static method)
    results = []
    for lib in (torch, rg):
        data = lib.utils.data

        class Replay(data.ConcatDataset):
            def add(self, dataset):
                self.datasets.append(dataset)
                self.cumulative_sizes = self.cumsum(self.datasets)

        replay = Replay([data.TensorDataset(lib.arange(2))])
        replay.add(data.TensorDataset(lib.arange(10, 13)))
        sampler = data.WeightedRandomSampler([1.0] * len(replay), len(replay))
        with pytest.warns(FutureWarning, match="renamed to `cumulative_sizes`"):
            misspelt = replay.cummulative_sizes
        results.append(
            [
                len(replay),
                replay.cumulative_sizes,
                misspelt,
                replay[3][0].tolist(),
                data.ConcatDataset.cumsum([[1], [2, 3]]),
                sampler.generator,  # read when remaking samplers
            ]
        )
    assert results[1] == results[0] == [5, [2, 5], [2, 5], 11, [1, 3], None]


def test_packing_by_lengths_summed_from_a_float_mask_and_packed_conversions_as_torch():
    # ``lengths = mask.sum(1)`` of a float mask, handed on as ``lengths.cpu()``: torch reads
    # them as int64; retrograd refused float lengths. And the packed batch's own conversions
    # (``packed.cpu()``, ``.long()``, ``.is_pinned()``), which retrograd's lacked
    tokens = np.array([[3, 1, 4, 0], [1, 5, 0, 0], [9, 2, 6, 5]])
    results = []
    for lib in (torch, rg):
        rnn = lib.nn.utils.rnn
        ids = lib.tensor(tokens)
        mask = (ids != 0).float()
        lengths = mask.sum(1)
        packed = rnn.pack_padded_sequence(
            ids.float().unsqueeze(-1), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        moved = packed.cpu().long()
        padded, out_lengths = rnn.pad_packed_sequence(moved, batch_first=True)
        results.append(
            [
                packed.batch_sizes.tolist(),
                str(moved.data.dtype).rpartition(".")[2],
                padded.squeeze(-1).tolist(),
                out_lengths.tolist(),
                packed.is_pinned(),
                lib.ones(2).is_pinned(),
            ]
        )
    assert results[1] == results[0]
    with pytest.raises(rg.errors.InvalidArgumentError, match="whole numbers"):
        rg.nn.utils.rnn.pack_padded_sequence(rg.ones(3, 2, 1), rg.tensor([2.5, 1.0]))
