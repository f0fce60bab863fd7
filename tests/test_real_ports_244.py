# ruff: noqa: E501  (the embedded program runs past 100 columns)
"""A GPT-NeoX-style decoder written here in the style of transformers' GPT-NeoX (its eager
attention), trained a few steps with every layer run through ``functools.partial(checkpoint,
use_reentrant=False)`` (set up by ``gradient_checkpointing_enable(
gradient_checkpointing_kwargs={"use_reentrant": False})``), then decoded greedily through its
cached keys and values past the trained context, under torch and, ported, under retrograd from
the same weights (the harness: ``tests/real_ports.py``).

What it exercises: the fused ``query_key_value`` viewed to ``(..., heads, 3 * head_size)`` and
sliced into permuted query/key/value; partial rotary (``rotary_pct``: ``q[..., :rot]``
rotated by ``rotate_half``, the rest passed through and ``torch.cat``-ed back) with
``cos[position_ids].unsqueeze(1)``; three rotary tables (plain, linear scaling by positions
``/ scale``, and dynamic NTK scaling, whose base grows by ``(scale * n / max_positions -
(scale - 1)) ** (dim / (dim - 2))`` when decoding passes ``max_position_embeddings``, with
``inv_freq`` re-registered at run time), rebuilt by ``register_buffer(..., persistent=False)``
when a longer sequence comes; ``torch.baddbmm`` over ``torch.zeros`` with
``alpha=self.norm_factor``; the causal ``bias`` buffer sliced ``[:, :, tk - tq : tk, :tk]``,
grown when the keys outrun it, and ``torch.where(causal, scores, lowest)`` with a 0-d tensor of
``torch.finfo(dtype).min``; the parallel residual (``mlp + attn + x``) and the sequential one;
the tanh GELU (``gelu_new``) and ``nn.GELU``; the padding mask ``(1.0 - mask) *
torch.finfo(self.dtype).min``; the shifted ``nn.CrossEntropyLoss``; ``sorted(state_dict())``
without the non-persistent buffers.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
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

NEOX_SOURCE = """
import functools
import math

import torch
import torch.utils.checkpoint
from torch import nn


class TanhGELU(nn.Module):
    # GELU by its tanh approximation ("gelu_new")
    def forward(self, x):
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


ACTIVATIONS = {"gelu": nn.GELU, "gelu_new": TanhGELU}


class Rotary(nn.Module):
    # cos/sin tables for positions 0..n-1, rebuilt when a longer sequence comes
    def __init__(self, dim, max_positions, base=10000, scale=1.0):
        super().__init__()
        self.dim, self.max_positions, self.base, self.scale = dim, max_positions, base, scale
        self.register_buffer("inv_freq", self.frequencies(base), persistent=False)
        self.build(max_positions)

    def frequencies(self, base):
        return 1.0 / (base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))

    def positions(self, n):
        return torch.arange(n, dtype=torch.int64).type_as(self.inv_freq)

    def build(self, n):
        self.cached = n
        angles = torch.outer(self.positions(n), self.inv_freq)
        both = torch.cat((angles, angles), dim=-1)  # the two halves share their angles
        self.register_buffer("cos_cached", both.cos(), persistent=False)
        self.register_buffer("sin_cached", both.sin(), persistent=False)

    def forward(self, n):
        if n > self.cached:
            self.build(n)
        return self.cos_cached[:n], self.sin_cached[:n]


class LinearScaledRotary(Rotary):
    # positions squeezed by the factor: a longer context at the angles trained on
    def positions(self, n):
        return super().positions(n) / self.scale


class DynamicNTKRotary(Rotary):
    # past the trained length, a larger base stretches the slow frequencies
    def build(self, n):
        if n > self.max_positions:
            stretch = (self.scale * n / self.max_positions) - (self.scale - 1)
            grown = self.base * stretch ** (self.dim / (self.dim - 2))
            self.register_buffer("inv_freq", self.frequencies(grown), persistent=False)
        super().build(n)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(q, k, cos, sin, position_ids):
    cos = cos[position_ids].unsqueeze(1)  # (batch, 1, seq, dim): the same for every head
    sin = sin[position_ids].unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg.num_attention_heads
        if cfg.hidden_size % self.heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        self.head_size = cfg.hidden_size // self.heads
        self.rot = int(self.head_size * cfg.rotary_pct)  # only the first features rotate
        self.make_causal(cfg.max_position_embeddings)
        scaling = cfg.rope_scaling or {}
        kind = {None: Rotary, "linear": LinearScaledRotary, "dynamic": DynamicNTKRotary}[scaling.get("type")]
        self.rotary = kind(self.rot, cfg.max_position_embeddings, base=cfg.rotary_emb_base, scale=scaling.get("factor", 1.0))
        self.norm_factor = self.head_size ** -0.5
        self.query_key_value = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=cfg.attention_bias)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.attention_bias)
        self.drop = nn.Dropout(cfg.attention_dropout)

    def make_causal(self, n, device=None):
        allowed = torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n)
        self.register_buffer("bias", allowed, persistent=False)
        if device is not None:
            self.bias = self.bias.to(device=device)

    def forward(self, x, mask, position_ids, past=None, use_cache=False):
        b, t, _ = x.shape
        hs = self.head_size
        # per head, the fused projection holds [q | k | v]
        qkv = self.query_key_value(x)
        qkv = qkv.view(*(qkv.size()[:-1] + (self.heads, 3 * hs)))
        q = qkv[..., :hs].permute(0, 2, 1, 3)
        k = qkv[..., hs : 2 * hs].permute(0, 2, 1, 3)
        v = qkv[..., 2 * hs :].permute(0, 2, 1, 3)
        n = k.shape[-2] + (past[0].shape[-2] if past is not None else 0)
        cos, sin = self.rotary(n)
        q_rot, k_rot = rope(q[..., : self.rot], k[..., : self.rot], cos, sin, position_ids)
        q = torch.cat((q_rot, q[..., self.rot :]), dim=-1)
        k = torch.cat((k_rot, k[..., self.rot :]), dim=-1)
        if past is not None:
            k = torch.cat((past[0], k), dim=-2)
            v = torch.cat((past[1], v), dim=-2)
        out = self.attend(q, k, v, mask).permute(0, 2, 1, 3).contiguous().view(b, t, self.heads * hs)
        return self.dense(out), ((k, v) if use_cache else None)

    def attend(self, q, k, v, mask):
        b, h, tq, d = q.size()
        tk = k.size(-2)
        if tk > self.bias.shape[-1]:
            self.make_causal(tk, device=k.device)  # the mask grows with the keys
        causal = self.bias[:, :, tk - tq : tk, :tk]
        scores = torch.zeros(b * h, tq, tk, dtype=q.dtype, device=k.device)
        keys_t = k.view(b * h, tk, d).transpose(1, 2)
        scores = torch.baddbmm(scores, q.view(b * h, tq, d), keys_t, beta=1.0, alpha=self.norm_factor)
        scores = scores.view(b, h, tq, tk)
        lowest = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype).to(scores.device)
        scores = torch.where(causal, scores, lowest)
        if mask is not None:
            scores = scores + mask
        weights = self.drop(nn.functional.softmax(scores, dim=-1).to(v.dtype))
        return torch.matmul(weights, v)


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.parallel = cfg.use_parallel_residual
        self.ln_attn = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ln_mlp = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attention = Attention(cfg)
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.act = ACTIVATIONS[cfg.hidden_act]()
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.drop = nn.Dropout(cfg.hidden_dropout)

    def mlp(self, x):
        return self.drop(self.down(self.act(self.up(x))))

    def forward(self, x, mask=None, position_ids=None, use_cache=False, past=None):
        attn, present = self.attention(self.ln_attn(x), mask, position_ids, past, use_cache)
        attn = self.drop(attn)
        if self.parallel:
            # both branches read the same input: x + attn(ln1(x)) + mlp(ln2(x))
            x = self.mlp(self.ln_mlp(x)) + attn + x
        else:
            x = x + attn
            x = self.mlp(self.ln_mlp(x)) + x
        return (x, present) if use_cache else (x,)


class NeoX(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_in = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.drop = nn.Dropout(cfg.hidden_dropout)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.embed_out = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.checkpointing = False

    @property
    def dtype(self):
        return self.embed_in.weight.dtype  # the parameters' dtype

    def padding(self, keep, b):
        # 1 keeps a key, 0 hides it: the hidden ones get the dtype's lowest value added
        keep = keep.view(b, -1)[:, None, None, :].to(dtype=self.dtype)
        return (1.0 - keep) * torch.finfo(self.dtype).min

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None) -> None:
        kwargs = gradient_checkpointing_kwargs or {"use_reentrant": True}
        self.run_checkpointed = functools.partial(torch.utils.checkpoint.checkpoint, **kwargs)
        self.checkpointing = True

    def forward(self, input_ids, attention_mask=None, past_key_values=None, labels=None, use_cache=False):
        b, t = input_ids.size()
        start = 0 if past_key_values is None else past_key_values[0][0].size(-2)
        past_key_values = past_key_values or (None,) * len(self.layers)
        position_ids = torch.arange(start, start + t, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        mask = None if attention_mask is None else self.padding(attention_mask, b)
        checkpointed = self.checkpointing and self.training
        use_cache = use_cache and not checkpointed
        h = self.drop(self.embed_in(input_ids))
        presents = ()
        for layer, past in zip(self.layers, past_key_values):
            if checkpointed:
                out = self.run_checkpointed(layer.__call__, h, mask, position_ids, use_cache, None)
            else:
                out = layer(h, mask=mask, position_ids=position_ids, use_cache=use_cache, past=past)
            h = out[0]
            if use_cache:
                presents += (out[1],)
        logits = self.embed_out(self.final_norm(h))
        loss = None
        if labels is not None:
            # position i predicts token i + 1
            shifted = logits[:, :-1, :].contiguous()
            targets = labels[:, 1:].contiguous()
            loss = nn.CrossEntropyLoss()(shifted.view(-1, shifted.size(-1)), targets.view(-1))
        return loss, logits, (presents if use_cache else None)
"""

TRAIN_SOURCE = """
model = NeoX(config)
initialize(model)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
tokens = torch.tensor(batches)
keep = torch.ones_like(tokens[0])
keep[1, -2:] = 0  # the second row is padded on the right
for i in range(tokens.shape[0]):
    loss, _, _ = model(tokens[i], attention_mask=keep, labels=tokens[i])
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step()
    record.append(loss.item())
    record.append(params_of(model))  # after each step

model.eval()
with torch.no_grad():
    step_ids = torch.tensor([[2, 7, 3], [5, 1, 4]])
    text, cache = step_ids, None
    for _ in range(7):  # beyond max_position_embeddings: the rotary tables and the mask grow
        _, logits, cache = model(step_ids, past_key_values=cache, use_cache=True)
        last = logits[:, -1, :]
        record.append(last.numpy())
        step_ids = last.argmax(dim=-1, keepdim=True)
        text = torch.cat([text, step_ids], dim=-1)
    record.append(text.tolist())
    first = model.layers[0].attention
    record.append(first.rotary.inv_freq.numpy())
    record.append(first.rotary.cos_cached.numpy())
    record.append(list(first.bias.shape))
    record.append(sorted(model.state_dict().keys()))  # no non-persistent buffers
"""

STEPS = [
    ("\nimport torch\nimport torch.utils.checkpoint\nfrom torch import nn\n",
     "\nimport retrograd as torch\nimport retrograd.utils.checkpoint\nfrom retrograd import nn\n"),
    ("    loss.backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)\n    opt.step()\n",
     "    grads = loss.backward()\n    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=1.0)\n    opt.step(grads)\n"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("use_parallel_residual", "rope_scaling", "hidden_act"),
    [
        (True, None, "gelu"),
        (False, {"type": "linear", "factor": 2.0}, "gelu_new"),
        (True, {"type": "dynamic", "factor": 2.0}, "gelu_new"),
    ],
)
def test_gpt_neox_checkpointed_training_and_cached_decoding_as_torch(
    capsys, use_parallel_residual, rope_scaling, hidden_act
):
    config = types.SimpleNamespace(
        vocab_size=11, hidden_size=16, num_attention_heads=2, num_hidden_layers=2,
        intermediate_size=32, rotary_pct=0.5, rotary_emb_base=10000, max_position_embeddings=8,
        rope_scaling=rope_scaling, attention_bias=False, attention_dropout=0.0, hidden_dropout=0.0,
        layer_norm_eps=1e-5, use_parallel_residual=use_parallel_residual, hidden_act=hidden_act,
    )  # fmt: skip
    rng = np.random.default_rng(24401)
    batches = rng.integers(0, 11, (3, 2, 8)).tolist()
    (theirs, ours), _ = runs_with_draws(
        NEOX_SOURCE + TRAIN_SOURCE, STEPS, capsys, 24401,
        config=config, batches=batches, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    # attention_bias=False: the unrotated half of a key bias has no true gradient (it shifts a
    # query's scores by one constant), so Adam would follow the rounding noise
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
