"""A program written here in the style of Hugging Face transformers' Phi-3 (eager attention with
fused projections, the long-context "su" and "yarn" rotary embeddings that switch factors past
``original_max_position_embeddings``, and a 4-d additive mask: causal, sliding window,
padding), trained a few steps on short rows and scored on rows past the original length, run
under torch and, ported, under retrograd from the same weights (the harness:
``tests/real_ports.py``).

What it exercises: ``register_buffer(name="inv_freq", tensor=None, persistent=False)`` (torch's
keywords) filled on the first call and replaced by attribute assignment;
``torch.max(position_ids) + 1`` compared with an int; ``inv_freq[None, :,
None].float().expand(...) @ position_ids[:, None, :].float()`` under
``torch.autocast(device_type=..., enabled=False)``; the su/yarn scaling factors (``math.sqrt(1 +
math.log(scale) / math.log(original))``, ``0.1 * math.log(scale) + 1.0``); a fused ``qkv_proj``
sliced by position, ``repeat_kv``'s ``expand``/``reshape``; a fused ``gate_up_proj`` split by
``chunk(2, dim=-1)``; ``softmax(..., dtype=torch.float32)``; the causal mask by
``mask.masked_fill_(idx < (idx + 1).view(...), 0)``, its sliding window by
``torch.tril(torch.ones_like(mask, dtype=torch.bool), diagonal=...)``, padding by
``masked_fill(padding.bool(), torch.finfo(dtype).min)``; labels by ``masked_fill(..., -100)``
and a shifted ``CrossEntropyLoss``; a non-persistent buffer left out of ``state_dict()``.

The port changes the ``import`` lines and the gradient lines (``grads = loss.backward()``,
given to ``clip_grad_norm_`` and ``optimizer.step``).
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

PHI3_STYLE_SOURCE = """
import math

import torch
from torch import nn


def additive_mask(keep, n, dtype, window=None):
    # [b, 1, n, n]: 0 where a query may look, the dtype's lowest value elsewhere
    lowest = torch.finfo(dtype).min
    mask = torch.full((n, n), lowest, dtype=dtype)
    idx = torch.arange(n)
    mask.masked_fill_(idx < (idx + 1).view(n, 1), 0)
    if window is not None:
        too_old = torch.tril(torch.ones_like(mask, dtype=torch.bool), diagonal=-window)
        mask = mask.masked_fill(too_old, lowest)
    b = keep.shape[0]
    padding = (1.0 - keep[:, None, None, :].to(dtype)).expand(b, 1, n, n)
    return mask[None, None].expand(b, 1, n, n).masked_fill(padding.bool(), lowest)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class LongRope(nn.Module):
    # rotary angles; with `scaling`, per-frequency factors chosen by the sequence's length
    def __init__(self, dim, max_len, base, original_len, scaling=None):
        super().__init__()
        self.dim, self.max_len, self.base = dim, max_len, base
        self.original_len, self.scaling = original_len, scaling
        self.register_buffer(name="inv_freq", tensor=None, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        exponents = torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim
        magnitude = 1.0
        if self.scaling is None:
            if self.inv_freq is None:
                self.inv_freq = 1.0 / self.base ** exponents
        else:
            is_long = torch.max(position_ids) + 1 > self.original_len
            key = "long_factor" if is_long else "short_factor"
            stretch = torch.tensor(self.scaling[key], dtype=torch.float32)
            self.inv_freq = 1.0 / (stretch * self.base ** exponents)
            ratio = self.max_len / self.original_len
            if self.scaling["type"] == "su":
                magnitude = math.sqrt(1 + math.log(ratio) / math.log(self.original_len))
            else:
                magnitude = 0.1 * math.log(ratio) + 1.0
        freqs = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        with torch.autocast(device_type="cpu", enabled=False):
            angles = (freqs @ position_ids[:, None, :].float()).transpose(1, 2)
            both = torch.cat((angles, angles), dim=-1)
            cos, sin = both.cos() * magnitude, both.sin() * magnitude
        return cos.to(x.dtype), sin.to(x.dtype)


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def repeat_kv(x, times):
    b, heads, n, d = x.shape
    if times == 1:
        return x
    return x[:, :, None, :, :].expand(b, heads, times, n, d).reshape(b, heads * times, n, d)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.hidden_size // self.heads
        width = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, width, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)
        self.rope = LongRope(self.head_dim, cfg.max_position_embeddings, cfg.rope_theta,
                             cfg.original_max_position_embeddings, cfg.rope_scaling)

    def forward(self, h, mask, position_ids):
        b, n, _ = h.shape
        qkv = self.qkv_proj(h)
        q_end = self.heads * self.head_dim
        k_end = q_end + self.kv_heads * self.head_dim
        q = qkv[..., :q_end].view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = qkv[..., q_end:k_end].view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = qkv[..., k_end:].view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rope(v, position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        k, v = repeat_kv(k, group), repeat_kv(v, group)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim) + mask
        probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
        return self.o_proj((probs @ v).transpose(1, 2).reshape(b, n, -1))


class GatedMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act = nn.SiLU()

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(up * self.act(gate))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = GatedMLP(cfg)

    def forward(self, h, mask, position_ids):
        h = h + self.attn(self.attn_norm(h), mask, position_ids)
        return h + self.mlp(self.mlp_norm(h))


class TinyPhi(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, ids, keep, labels=None):
        b, n = ids.shape
        h = self.embed(ids)
        position_ids = torch.arange(n, dtype=torch.long).unsqueeze(0).expand(b, -1)
        mask = additive_mask(keep, n, h.dtype, self.cfg.sliding_window)
        for block in self.blocks:
            h = block(h, mask, position_ids)
        logits = self.lm_head(self.norm(h)).float()
        if labels is None:
            return None, logits
        shifted = logits[..., :-1, :].contiguous().view(-1, self.cfg.vocab_size)
        targets = labels[..., 1:].contiguous().view(-1)
        return nn.CrossEntropyLoss()(shifted, targets), logits


model = TinyPhi(config)
initialize(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
for rows in short_batches:
    ids = torch.tensor(rows)
    keep = (ids != config.pad_token_id).long()
    loss, _ = model(ids, keep, labels=ids.masked_fill(keep == 0, -100))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step()
    record.append(loss.item())
    record += [params_of(model)]
    record.append(model.blocks[0].attn.rope.inv_freq.numpy())

model.eval()
with torch.no_grad():
    ids = torch.tensor(long_batch)
    loss, logits = model(ids, torch.ones_like(ids), labels=ids)
    record.append(loss.item())
    record.append(logits.numpy())
    record.append(model.blocks[1].attn.rope.inv_freq.numpy())
    record.append(sorted(model.state_dict().keys()))
"""

PHI3_STYLE_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("from torch import nn\n", "from retrograd import nn\n"),
    (
        "    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)\n"
        "    opt.step()\n",
        "    grads = loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=1.0)\n"
        "    opt.step(grads)\n",
    ),
]


@pytest.mark.parametrize(
    ("rope_type", "sliding_window", "num_key_value_heads"),
    [(None, None, 4), ("su", 5, 2), ("yarn", 3, 1)],
)
def test_phi3_style_long_rope_sliding_window_training_and_long_scoring_as_torch(
    capsys, rope_type, sliding_window, num_key_value_heads
):
    head_dim = 4
    rope_scaling = None
    if rope_type is not None:
        rope_scaling = {
            "type": rope_type,
            "short_factor": [1.0, 1.5],
            "long_factor": [1.0, 4.0],
        }  # head_dim // 2 factors
    config = types.SimpleNamespace(
        vocab_size=13, hidden_size=4 * head_dim, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=num_key_value_heads, max_position_embeddings=32,
        original_max_position_embeddings=8, rope_theta=10000.0, rope_scaling=rope_scaling,
        sliding_window=sliding_window, hidden_act="silu", rms_norm_eps=1e-5, attention_dropout=0.0,
        resid_pdrop=0.0, embd_pdrop=0.0, pad_token_id=0,
    )  # fmt: skip
    rng = np.random.default_rng(24601)
    short_batches = rng.integers(1, 13, (3, 2, 8))
    short_batches[:, 1, -2:] = 0  # right padding
    long_batch = rng.integers(1, 13, (2, 12)).tolist()
    (theirs, ours), _ = runs_with_draws(
        PHI3_STYLE_SOURCE, PHI3_STYLE_STEPS, capsys, 24601, config=config,
        short_batches=short_batches.tolist(), long_batch=long_batch,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
