# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
packed supervised fine-tuning as hiyouga/LLaMA-Factory writes it (``model/model_utils/
packing.py``'s ``get_seqlens_in_batch`` and ``get_unpad_data``, ``data/collator.py``'s
``prepare_4d_attention_mask``: documents numbered 1, 2, 3... in the attention mask, turned
into a block-diagonal causal 4-d mask) with ``transformers``' ``DataCollatorWithFlattening``
way of restarting ``position_ids`` at each document, over a tiny Llama (its
``LlamaRotaryEmbedding`` of ``position_ids``, ``rotate_half``, ``LlamaRMSNorm``, SwiGLU,
``repeat_kv``), trained a few steps against torch's run of the same code from the same
weights; the packed loss is checked against the documents run one by one.

What it exercises: ``torch.eq(expanded_mask, expanded_mask.transpose(-1, -2)).int() *
padding_mask`` and the in-place ``*=`` of a ``torch.tril`` of longs, ``torch.where(mask != 0,
torch.tensor(0, dtype=dtype), min_dtype)``; ``counts[:, i] = torch.sum(attention_mask == (i +
1), dim=-1)``, ``counts[counts.nonzero().squeeze(dim=-1)]``, ``F.pad(torch.cumsum(seqlens,
dim=0, dtype=torch.int32), (1, 0))``; the packed logits split per document by
``torch.split(..., seqlens.tolist())``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``).
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


PACKING_SOURCE = '''
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


def get_seqlens_in_batch(attention_mask: "torch.Tensor") -> "torch.Tensor":
    r"""
    Gets the sequnce lengths in the current batch.

    e.g.
    ```python
    # input
    [
        [1, 1, 2, 2, 2, 0],
        [1, 2, 2, 3, 3, 3],
    ]
    # output
    [2, 3, 1, 2, 3]
    ```
    """
    bsz = attention_mask.size(0)
    dtype, device = attention_mask.dtype, attention_mask.device
    max_num = torch.max(attention_mask).item()
    counts: "torch.Tensor" = torch.zeros((bsz, max_num), dtype=dtype, device=device)
    for i in range(max_num):
        counts[:, i] = torch.sum(attention_mask == (i + 1), dim=-1)

    counts = counts.flatten()
    seqlens = counts[counts.nonzero().squeeze(dim=-1)]
    return seqlens


def get_unpad_data(attention_mask: "torch.Tensor") -> Tuple["torch.Tensor", "torch.Tensor", int]:
    r"""
    Prepares the indices and seqlens for flash attn varlen function.

    Returns:
        indices: indices of non-masked tokens from the flattened sequence.
        cu_seqlens: the cumulative sequence lengths in the current batch, always starts from 0.
        max_seqlen_in_batch: the largest seqlen in the current batch.

    e.g.
    ```python
    # input
    [
        [1, 1, 2, 2, 2, 0],
        [1, 2, 2, 3, 3, 3],
    ]
    # output
    [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    [0, 2, 5, 6, 8, 11]
    3
    ```
    """
    seqlens_in_batch = get_seqlens_in_batch(attention_mask)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = seqlens_in_batch.max().item()
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    return indices, cu_seqlens, max_seqlen_in_batch


def prepare_4d_attention_mask(attention_mask_with_indices: "torch.Tensor", dtype: "torch.dtype") -> "torch.Tensor":
    r"""
    Expands the attention mask with indices from (batch_size, seq_len) to (batch_size, 1, seq_len, seq_len),
    while handles packed sequences and transforms the mask to lower triangular form to prevent future peeking.
    """
    bsz, seq_len = attention_mask_with_indices.size()
    min_dtype = torch.finfo(dtype).min
    expanded_mask = attention_mask_with_indices[:, None, None, :].expand(bsz, 1, seq_len, seq_len)
    # Create a binary mask from the original mask where zeros remain zeros and all other values are set to one
    padding_mask = torch.where(expanded_mask != 0, 1, 0)
    # Create a block-diagonal mask.
    attention_mask_4d = torch.eq(expanded_mask, expanded_mask.transpose(-1, -2)).int() * padding_mask
    # Use the lower triangular mask to zero out the upper triangular part
    attention_mask_4d *= torch.tril(torch.ones((seq_len, seq_len), dtype=torch.long))
    # Invert the attention mask.
    attention_mask_4d = torch.where(attention_mask_4d != 0, torch.tensor(0, dtype=dtype), min_dtype)
    return attention_mask_4d


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos()
        sin = emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim)

    def forward(self, hidden_states, attention_mask, position_ids):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)

        cos, sin = self.rotary_emb(value_states, position_ids)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        if attention_mask is not None:  # no matter the length, we just slice it
            causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
            attn_weights = attn_weights + causal_mask

        # upcast attention to fp32
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, -1)
        return self.o_proj(attn_output)


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask, position_ids):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, attention_mask, position_ids)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class LlamaForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, position_ids):
        hidden_states = self.embed_tokens(input_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, position_ids)
        return self.lm_head(self.norm(hidden_states)).float()


def packed_causal_lm_loss(logits, labels):
    # Shift so that tokens < n predict n
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    return F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1), ignore_index=-100, reduction="sum")
'''

TRAIN_SOURCE = '''
model = LlamaForCausalLM(config)
initialize(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

def collate(rows):
    """documents packed into rows, numbered in the attention mask, positions restarting at 0,
    the first token of each document not a target of the token before it"""
    width = max(sum(len(doc) for doc in row) for row in rows)
    input_ids, attention_mask, position_ids, labels = [], [], [], []
    for row in rows:
        ids, mask, pos, lab = [], [], [], []
        for number, doc in enumerate(row, start=1):
            ids += doc
            mask += [number] * len(doc)
            pos += list(range(len(doc)))
            lab += [-100] + doc[1:]
        pad = width - len(ids)
        input_ids.append(ids + [0] * pad)
        attention_mask.append(mask + [0] * pad)
        position_ids.append(pos + [0] * pad)
        labels.append(lab + [-100] * pad)
    return {k: torch.tensor(v) for k, v in zip(("input_ids", "attention_mask", "position_ids", "labels"), (input_ids, attention_mask, position_ids, labels))}

for rows in packed_rows:
    batch = collate(rows)
    mask_4d = prepare_4d_attention_mask(batch["attention_mask"], torch.float32)
    indices, cu_seqlens, max_seqlen = get_unpad_data(batch["attention_mask"])
    record.append(get_seqlens_in_batch(batch["attention_mask"]).tolist())
    record.append([indices.tolist(), cu_seqlens.tolist(), max_seqlen])
    record.append(mask_4d.numpy())
    logits = model(batch["input_ids"], mask_4d, batch["position_ids"])
    n_targets = (batch["labels"][..., 1:] != -100).sum()
    loss = packed_causal_lm_loss(logits, batch["labels"]) / n_targets

    # the same documents one by one: the packed loss is theirs
    with torch.no_grad():
        seqlens = get_seqlens_in_batch(batch["attention_mask"])
        flat_logits = logits.reshape(-1, logits.size(-1))[indices]
        per_doc = torch.split(flat_logits, seqlens.tolist())
        total = 0.0
        for doc, doc_logits in zip([d for row in rows for d in row], per_doc):
            ids = torch.tensor([doc])
            alone = model(ids, prepare_4d_attention_mask(torch.ones_like(ids), torch.float32), torch.arange(len(doc))[None])
            record.append((alone[0] - doc_logits).abs().max().item() < 1e-4)
            total = total + F.cross_entropy(alone[0, :-1], ids[0, 1:], reduction="sum")
        record.append((total / n_targets).item())
        record.append(abs((total / n_targets).item() - loss.item()) < 1e-5)

    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(model))
'''

STEPS = [
    ("\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n",
     "\nimport retrograd as torch\nimport retrograd.nn.functional as F\nfrom retrograd import nn\n"),
    ("    loss.backward()\n    optimizer.step()\n",
     "    grads = loss.backward()\n    optimizer.step(grads)\n"),
]  # fmt: skip


def test_llama_factory_packed_sft_with_block_diagonal_masks_as_torch(capsys):
    config = types.SimpleNamespace(
        vocab_size=13, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
    )  # fmt: skip
    rng = np.random.default_rng(24701)

    def doc(n):
        return rng.integers(1, 13, n).tolist()

    packed_rows = [
        [[doc(3), doc(4), doc(2)], [doc(5), doc(2)]],
        [[doc(6), doc(3)], [doc(2), doc(2), doc(2), doc(3)]],
        [[doc(9)], [doc(4), doc(4)]],
    ]
    (theirs, ours), _ = runs_with_draws(
        PACKING_SOURCE + TRAIN_SOURCE, STEPS, capsys, 24701, config=config,
        packed_rows=packed_rows, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert all(flag for flag in ours if isinstance(flag, bool))
