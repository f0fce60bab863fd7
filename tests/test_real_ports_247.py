"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of LLaMA-Factory's packed supervised fine-tuning (documents numbered 1, 2, 3... in the
attention mask, turned into a block-diagonal causal 4-d mask, with positions restarting at
each document as ``transformers``' ``DataCollatorWithFlattening`` does), over a tiny Llama
(rotary embeddings of ``position_ids``, rotate-half, RMSNorm, SwiGLU, grouped key/value
heads), trained a few steps against torch's run from the same weights; the packed logits and
loss are checked against the documents run one by one.

What it exercises: ``torch.eq(m, m.transpose(-1, -2)).int() * padding`` and the in-place
``*=`` of a ``torch.tril`` of longs, ``torch.where(mask != 0, 1, 0)`` and ``torch.where(mask !=
0, torch.tensor(0, dtype=dtype), torch.finfo(dtype).min)``; ``counts[:, i] =
torch.sum(mask == i + 1, dim=-1)``, ``counts[counts.nonzero().squeeze(dim=-1)]``,
``torch.nonzero(..., as_tuple=False)``, ``F.pad(torch.cumsum(lengths, dim=0,
dtype=torch.int32), (1, 0))``; a rotary module with a non-persistent buffer and a
``@torch.no_grad()`` ``forward``, ``softmax(..., dtype=torch.float32)``, ``expand`` then
``reshape`` of shared key/value heads; the packed logits split per document by
``torch.split(..., lengths.tolist())``; ``cross_entropy(ignore_index=-100,
reduction="sum")``.

Only the imports and the gradient lines differ.
"""

from __future__ import annotations

import types

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

PACKED_SFT_SOURCE = """
import math

import torch
from torch import nn
from torch.nn import functional as F


# -- packing helpers: documents of a row are numbered 1, 2, 3... in its attention mask --------
def doc_lengths(numbered_mask):
    rows, n_docs = numbered_mask.size(0), int(torch.max(numbered_mask).item())
    per_row = torch.zeros((rows, n_docs), dtype=numbered_mask.dtype)
    for k in range(n_docs):
        per_row[:, k] = torch.sum(numbered_mask == k + 1, dim=-1)
    per_row = per_row.flatten()
    return per_row[per_row.nonzero().squeeze(dim=-1)]  # drop rows' missing documents


def varlen_layout(numbered_mask):
    lengths = doc_lengths(numbered_mask)
    kept = torch.nonzero(numbered_mask.flatten(), as_tuple=False).flatten()
    offsets = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    return kept, offsets, lengths.max().item()


def block_causal_bias(numbered_mask, dtype):
    # 0 where a token may attend (same document, not ahead), the dtype's min elsewhere
    b, n = numbered_mask.size()
    doc = numbered_mask[:, None, None, :].expand(b, 1, n, n)
    real = torch.where(doc != 0, 1, 0)
    allowed = torch.eq(doc, doc.transpose(-1, -2)).int() * real
    allowed *= torch.tril(torch.ones((n, n), dtype=torch.long))
    return torch.where(allowed != 0, torch.tensor(0, dtype=dtype), torch.finfo(dtype).min)


# -- a tiny Llama-style decoder --------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class Rotary(nn.Module):
    def __init__(self, head_dim, theta=10000):
        super().__init__()
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
        self.register_buffer("inv_freq", 1.0 / theta ** exponents, persistent=False)

    @torch.no_grad()
    def forward(self, like, positions):
        freqs = self.inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
        angles = (freqs @ positions[:, None, :].float()).transpose(1, 2)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(dtype=like.dtype), angles.sin().to(dtype=like.dtype)


def half_turn(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def share_kv(x, groups):
    if groups == 1:
        return x
    b, heads, n, d = x.shape
    return x[:, :, None].expand(b, heads, groups, n, d).reshape(b, heads * groups, n, d)


class GroupedAttention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, heads * self.hd, bias=False)
        self.kv = nn.ModuleList(nn.Linear(dim, kv_heads * self.hd, bias=False) for _ in "kv")
        self.out = nn.Linear(heads * self.hd, dim, bias=False)
        self.rope = Rotary(self.hd)

    def forward(self, x, bias, positions):
        b, n, _ = x.size()
        q = self.q(x).view(b, n, self.heads, self.hd).transpose(1, 2)
        k, v = (proj(x).view(b, n, self.kv_heads, self.hd).transpose(1, 2) for proj in self.kv)
        cos, sin = self.rope(v, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = q * cos + half_turn(q) * sin, k * cos + half_turn(k) * sin
        k, v = share_kv(k, self.heads // self.kv_heads), share_kv(v, self.heads // self.kv_heads)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd)
        scores = scores + bias[:, :, :, : k.shape[-2]]
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        mixed = torch.matmul(probs, v).transpose(1, 2).contiguous()
        return self.out(mixed.reshape(b, n, -1))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(cfg.dim, cfg.eps), RMSNorm(cfg.dim, cfg.eps)
        self.attn = GroupedAttention(cfg.dim, cfg.heads, cfg.kv_heads)
        self.gate = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.up = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.dim, bias=False)
        self.act = nn.SiLU()

    def forward(self, x, bias, positions):
        x = x + self.attn(self.norm1(x), bias, positions)
        h = self.norm2(x)
        return x + self.down(self.act(self.gate(h)) * self.up(h))


class TinyLlama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, ids, bias, positions):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, bias, positions)
        return self.head(self.norm(x)).float()


def summed_next_token_loss(logits, labels):
    preds = logits[..., :-1, :].contiguous()
    targets = labels[..., 1:].contiguous()
    return F.cross_entropy(preds.view(-1, preds.size(-1)), targets.view(-1), ignore_index=-100,
                           reduction="sum")


def pack(rows):
    # positions restart at each document; a document's first token is no one's target
    width = max(sum(map(len, row)) for row in rows)
    fields = {"ids": [], "mask": [], "pos": [], "labels": []}
    for row in rows:
        ids = [t for doc in row for t in doc]
        mask = [k for k, doc in enumerate(row, 1) for _ in doc]
        pos = [i for doc in row for i in range(len(doc))]
        labels = [t if i else -100 for doc in row for i, t in enumerate(doc)]
        pad = width - len(ids)
        for key, values, fill in zip(fields, (ids, mask, pos, labels), (0, 0, 0, -100)):
            fields[key].append(values + [fill] * pad)
    return {key: torch.tensor(values) for key, values in fields.items()}


model = TinyLlama(cfg)
initialize(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
for rows in packed_rows:
    batch = pack(rows)
    bias = block_causal_bias(batch["mask"], torch.float32)
    kept, offsets, longest = varlen_layout(batch["mask"])
    lengths = doc_lengths(batch["mask"])
    record += [lengths.tolist(), [kept.tolist(), offsets.tolist(), longest], bias.numpy()]
    logits = model(batch["ids"], bias, batch["pos"])
    n_targets = batch["labels"][:, 1:].ne(-100).sum()
    loss = summed_next_token_loss(logits, batch["labels"]) / n_targets

    with torch.no_grad():  # each document alone gives the logits and loss it had packed
        packed = torch.split(logits.reshape(-1, logits.size(-1))[kept], lengths.tolist())
        alone_total = 0.0
        for doc, doc_logits in zip([d for row in rows for d in row], packed):
            ids = torch.tensor([doc])
            solo_bias = block_causal_bias(torch.ones_like(ids), torch.float32)
            alone = model(ids, solo_bias, torch.arange(len(doc))[None])
            record.append(torch.allclose(alone[0], doc_logits, rtol=0, atol=1e-4))
            alone_total = alone_total + F.cross_entropy(alone[0, :-1], ids[0, 1:], reduction="sum")
        record.append((alone_total / n_targets).item())
        record.append(abs((alone_total / n_targets).item() - loss.item()) < 1e-5)

    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record += [loss.item(), params_of(model)]
"""

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_packed_sft_with_block_diagonal_masks_as_torch(capsys):
    cfg = types.SimpleNamespace(vocab=13, dim=16, ffn=24, layers=2, heads=4, kv_heads=2, eps=1e-5)
    rng = np.random.default_rng(24701)

    def doc(n):
        return rng.integers(1, 13, n).tolist()

    packed_rows = [
        [[doc(3), doc(4), doc(2)], [doc(5), doc(2)]],
        [[doc(6), doc(3)], [doc(2), doc(2), doc(2), doc(3)]],
    ]
    (theirs, ours), _ = runs_with_draws(
        PACKED_SFT_SOURCE, STEPS, capsys, 24701, cfg=cfg,
        packed_rows=packed_rows, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert all(flag for flag in ours if isinstance(flag, bool))
