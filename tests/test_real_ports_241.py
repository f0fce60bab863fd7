"""Real ports, continued (the harness: ``tests/real_ports.py``): a miniature decoder written
here in the style of google/gemma_pytorch's Gemma 2, fine-tuned a few steps with every block
run under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` and then decoded
greedily through its kv cache, against torch's run of the same code from the same weights.

What it exercises: a complex rotary table from ``torch.polar`` (a buffer registered
``persistent=False``, so not in the state dict) applied through ``torch.view_as_complex(
torch.stack(torch.chunk(...), dim=-1))`` and ``torch.view_as_real``; an RMS norm with the unit
offset (``* (1 + self.weight.float())``, the weight initialised to zeros); a GeGLU
(``F.gelu(gate, approximate="tanh") * up``); grouped kv heads (``torch.repeat_interleave``),
the kv cache written by ``index_copy_``, the in-place ``q.mul_(scale)``, the local
sliding-window mask (``torch.triu(ones, -w + 1) * torch.tril(ones, w - 1)`` then
``torch.where(band == 1, mask, -2.3819763e38)``) and attention logit soft-capping (``/ cap``,
``tanh``, ``* cap``); pre/post norms around attention and feed-forward; the embedding scaled
by ``torch.tensor(hidden_size**0.5, dtype=...)`` and a tied output projection with final
soft-capping. The ``Linear``/``Embedding`` stand-ins make their weights with
``requires_grad=False``; fine-tuning turns them back on with ``requires_grad_(True)``, then
``AdamW`` and ``clip_grad_norm_``.

The original port exposed no defect of its own (it passed when added); the file guards that
this surface trains and decodes as torch does. The lines changed: the ``import`` lines and the
gradient lines (``grads = loss.backward()``, given to ``clip_grad_norm_`` and
``optimizer.step``).
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

GEMMA_SOURCE = """
# A miniature Gemma-2-style decoder: rotary positions as complex numbers, grouped kv heads
# with a cache, alternating local and global attention, soft-capped logits.
import enum

import torch
import torch.utils.checkpoint
from torch import nn
from torch.nn import functional as F

NEG = -2.3819763e38


class AttnKind(enum.Enum):
    GLOBAL = 1
    LOCAL = 2


def rotary_table(head_dim, n_pos, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(n_pos).float(), inv)
    return torch.polar(torch.ones_like(angles), angles)


def rotate(x, table):
    # x: (batch, time, heads, dim); the two halves of dim are the real and imaginary parts
    z = torch.view_as_complex(torch.stack(torch.chunk(x.float(), 2, dim=-1), dim=-1).contiguous())
    turned = torch.view_as_real(z * table[:, None, :])
    return torch.cat([turned[..., 0], turned[..., 1]], dim=-1).type_as(x)


class FrozenLinear(nn.Module):
    # weights made without grad, as checkpoint loaders like them; fine-tuning turns it on
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty((n_out, n_in)), requires_grad=False)

    def forward(self, x):
        return F.linear(x, self.weight)


class FrozenEmbedding(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty((vocab, dim)), requires_grad=False)

    def forward(self, ids):
        return F.embedding(ids, self.weight)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))  # used as 1 + weight

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1 + self.weight.float())).type_as(x)


class GeGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate, self.up = FrozenLinear(dim, hidden), FrozenLinear(dim, hidden)
        self.down = FrozenLinear(hidden, dim)

    def forward(self, x):
        return self.down(F.gelu(self.gate(x), approximate="tanh") * self.up(x))


class Attention(nn.Module):
    def __init__(self, cfg, kind):
        super().__init__()
        self.h, self.kv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.qkv = FrozenLinear(cfg.hidden_size, (self.h + 2 * self.kv) * self.d)
        self.out = FrozenLinear(self.h * self.d, cfg.hidden_size)
        self.scale = cfg.query_pre_attn_scalar**-0.5
        self.kind, self.window, self.cap = kind, cfg.sliding_window_size, cfg.attn_logit_softcapping

    def forward(self, x, table, positions, cache, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split([self.h * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = rotate(q.view(b, t, self.h, self.d), table)
        k = rotate(k.view(b, t, self.kv, self.d), table)
        k_cache, v_cache = cache
        k_cache.index_copy_(1, positions, k)
        v_cache.index_copy_(1, positions, v.view(b, t, self.kv, self.d))
        group = self.h // self.kv
        keys = torch.repeat_interleave(k_cache, group, dim=2).permute(0, 2, 3, 1)
        values = torch.repeat_interleave(v_cache, group, dim=2).transpose(1, 2)
        q = q.transpose(1, 2)
        q.mul_(self.scale)
        scores = torch.matmul(q, keys)
        if self.kind == AttnKind.LOCAL:
            span = torch.ones(mask.shape[-1], mask.shape[-1])
            band = torch.triu(span, -self.window + 1) * torch.tril(span, self.window - 1)
            mask = torch.where(band.index_select(0, positions) == 1, mask, NEG)
        scores = torch.tanh(scores / self.cap) * self.cap
        probs = F.softmax(scores.float() + mask, dim=-1).type_as(q)
        return self.out(torch.matmul(probs, values).transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, cfg, kind):
        super().__init__()
        eps = cfg.rms_norm_eps
        self.attn, self.mlp = Attention(cfg, kind), GeGLU(cfg.hidden_size, cfg.intermediate_size)
        self.norms = nn.ModuleList(RMSNorm(cfg.hidden_size, eps) for _ in range(4))

    def forward(self, x, table, positions, cache, mask):
        pre_attn, post_attn, pre_ff, post_ff = self.norms
        x = x + post_attn(self.attn(pre_attn(x), table, positions, cache, mask))
        return x + post_ff(self.mlp(pre_ff(x)))


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        kinds = cfg.attn_types or [AttnKind.GLOBAL] * cfg.num_hidden_layers
        n = cfg.num_hidden_layers
        self.blocks = nn.ModuleList(Block(cfg, kinds[i % len(kinds)]) for i in range(n))
        self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.checkpointing = False

    def forward(self, x, table, positions, caches, mask):
        for block, cache in zip(self.blocks, caches):
            if self.checkpointing and self.training:
                args = (x, table, positions, cache, mask)
                x = torch.utils.checkpoint.checkpoint(block, *args, use_reentrant=False)
            else:
                x = block(x, table, positions, cache, mask)
        return self.final_norm(x)


class TinyGemma(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = FrozenEmbedding(cfg.vocab_size, cfg.hidden_size)
        self.decoder = Decoder(cfg)
        table = rotary_table(cfg.head_dim, 2 * cfg.max_position_embeddings)
        self.register_buffer("rotary", table, persistent=False)

    def empty_caches(self, batch, length):
        shape = (batch, length, self.cfg.num_key_value_heads, self.cfg.head_dim)
        return [(torch.zeros(size=shape), torch.zeros(size=shape)) for _ in self.decoder.blocks]

    def hidden(self, ids, positions, caches, mask):
        x = self.embed(ids)
        x = x * torch.tensor(self.cfg.hidden_size**0.5, dtype=x.dtype)
        return self.decoder(x, self.rotary.index_select(0, positions), positions, caches, mask)

    def logits(self, hidden):
        cap = self.cfg.final_logit_softcapping
        return torch.tanh(torch.matmul(hidden, self.embed.weight.t()) / cap) * cap

    def generate(self, prompts, steps):
        # greedy decoding one position at a time; each row follows its prompt, then itself
        total = max(len(p) for p in prompts) + steps
        tokens = torch.zeros((len(prompts), total), dtype=torch.int64)
        for row, prompt in enumerate(prompts):
            tokens[row, : len(prompt)] = torch.tensor(prompt)
        caches = self.empty_caches(len(prompts), total)
        causal = torch.triu(torch.full((1, 1, total, total), NEG), diagonal=1)
        for t in range(total - 1):
            here = torch.tensor([t])
            h = self.hidden(tokens[:, t : t + 1], here, caches, causal.index_select(2, here))
            best = self.logits(h[:, -1]).argmax(dim=-1)
            for row, prompt in enumerate(prompts):
                if t + 1 >= len(prompt):
                    tokens[row, t + 1] = best[row]
        return [tokens[row, len(p) : len(p) + steps].tolist() for row, p in enumerate(prompts)]
"""

FINETUNE_SOURCE = """
lm = TinyGemma(config)
for p in lm.parameters():
    nn.init.normal_(p, std=0.3 if p.dim() == 2 else 0.1)
initialize(lm)
assert "rotary" not in lm.state_dict()
record.append(np.array(lm.rotary.abs().numpy()))

lm.decoder.checkpointing = True
lm.train()
for p in lm.parameters():
    p.requires_grad_(True)
opt = torch.optim.AdamW(lm.parameters(), lr=1e-2, weight_decay=0.01)
for ids in torch.tensor(batches):
    inputs, targets = ids[:, :-1], ids[:, 1:]
    b, t = inputs.shape
    positions = torch.arange(0, t, dtype=torch.int64)
    causal = torch.triu(torch.full((1, 1, t, t), NEG), diagonal=1)
    logits = lm.logits(lm.hidden(inputs, positions, lm.empty_caches(b, t), causal))
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(lm.parameters(), max_norm=1.0)
    opt.step()
    record += [loss.item(), params_of(lm)]

lm.eval()
with torch.no_grad():
    record.append(lm.generate([[3, 5, 7], [2, 4, 6, 8, 1]], 4))
"""

STEPS = [
    ("import torch\nimport torch.utils.checkpoint\nfrom torch import nn\n",
     "import retrograd as torch\nimport retrograd.utils.checkpoint\nfrom retrograd import nn\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("clip_grad_norm_(lm.parameters()", "clip_grad_norm_(grads, lm.parameters()"),
    ("    opt.step()\n", "    opt.step(grads)\n"),
]  # fmt: skip


def gemma_config(**overrides):
    values = dict(
        vocab_size=13, max_position_embeddings=16, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, hidden_size=16, intermediate_size=24, head_dim=8,
        rms_norm_eps=1e-6, attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
        query_pre_attn_scalar=6, sliding_window_size=3, attn_types=None,
    )  # fmt: skip
    values.update(overrides)
    return types.SimpleNamespace(**values)


@pytest.mark.parametrize("sliding", [False, True])
def test_gemma2_style_fine_tuned_with_checkpointed_layers_and_decoded_as_torch(capsys, sliding):
    config = gemma_config()
    kinds = "config.attn_types = [AttnKind.LOCAL, AttnKind.GLOBAL]\n" if sliding else ""
    rng = np.random.default_rng(24101)
    batches = rng.integers(1, 13, (3, 2, 8)).tolist()
    (theirs, ours), _ = runs_with_draws(
        GEMMA_SOURCE + kinds + FINETUNE_SOURCE, STEPS, capsys, 24101, config=config,
        batches=batches, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
