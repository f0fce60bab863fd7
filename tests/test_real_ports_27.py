# ruff: noqa: E501  (the embedded programs run past 100 columns)
"""Programs written here in the style of two LLaMA code bases, each run under torch and under
retrograd from the same weights and draws (the harness: ``tests/real_ports.py``):

- a LLaMA 2 decoder with a KV cache in the style of meta-llama/llama (``llama/model.py`` and
  the sampling loop of ``llama/generation.py``), small, on one process: ``RMSNorm`` on
  ``x.float()`` then ``type_as``, rotary frequencies by ``torch.outer`` and ``torch.polar``
  (complex64), rotation through ``torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1,
  2))`` times the broadcast frequencies and ``torch.view_as_real(...).flatten(3)``,
  grouped-query heads shared by ``x[:, :, :, None, :].expand(...).reshape``, the KV cache
  (``self.cache_k = self.cache_k.to(q)``, ``self.cache_k[:b, start : start + t] = k``), the
  mask of ``torch.full(..., float("-inf"))``, ``torch.triu(..., diagonal=1)`` and
  ``torch.hstack`` with the cached columns, ``@torch.inference_mode()``, and a completion loop
  writing prompts into ``torch.full((n, total), pad)``, ``torch.where(given[:, pos],
  tokens[:, pos], nxt)``, ``done |= ...``, greedy or nucleus sampling (``torch.sort(
  descending=True)``, ``cumsum``, ``sorted_probs[mass_before > p] = 0.0``, ``div_``,
  ``torch.gather``);
- a LLaMA written for training in the style of karpathy/llama2.c (``model.py``, ``train.py``):
  rotary embeddings in real arithmetic (``reshape(x.shape[:-1] + (-1, 2)).unbind(-1)``,
  ``torch.stack([...], dim=-1).flatten(3)``), the fused path
  (``F.scaled_dot_product_attention(is_causal=True)``, chosen by ``hasattr``) and the manual
  one (a ``torch.full((1, 1, n, n), float("-inf"))`` mask buffer sliced ``[:, :, :t, :t]``),
  weight tying, ``self.apply(self._init)`` and the scaled init of ``w3``/``wo`` by
  name, ``last_loss``, ``configure_optimizers`` (AdamW groups by ``p.dim()``, ``'fused' in
  inspect.signature(torch.optim.AdamW).parameters``), ``generate`` under
  ``@torch.inference_mode()`` with ``h[:, [-1], :]`` and top-k (``logits[logits < kth[:,
  [-1]]] = -float('Inf')``), a warmup + cosine learning rate written into every
  ``param_group``, gradient accumulation and ``clip_grad_norm_``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both, run_source

LLAMA_SOURCE = """
import math
import dataclasses
from typing import List, Optional


@dataclasses.dataclass
class Config:
    dim: int = 512
    n_layers: int = 8
    n_heads: int = 8
    n_kv_heads: Optional[int] = None  # fewer key/value heads than query heads: grouped
    vocab_size: int = 256
    multiple_of: int = 64  # the MLP's width is rounded up to a multiple of this
    norm_eps: float = 1e-5
    max_batch_size: int = 8
    max_seq_len: int = 256


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.gain = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # normalised in float32 whatever the input's dtype, then cast back
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.gain


def rope_table(head_dim, n_positions, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(n_positions, device=inv.device), inv).float()
    return torch.polar(torch.ones_like(angles), angles)  # unit complex numbers (complex64)


def rotate(q, k, table):
    # consecutive feature pairs as complex numbers, turned by their position's angle
    qc = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    kc = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    table = table.view(1, qc.shape[1], 1, qc.shape[-1])
    q_out = torch.view_as_real(qc * table).flatten(3)
    k_out = torch.view_as_real(kc * table).flatten(3)
    return q_out.type_as(q), k_out.type_as(k)


def expand_kv(x, groups):
    # each key/value head serves `groups` query heads
    if groups == 1:
        return x
    b, t, h, d = x.shape
    return x[:, :, :, None, :].expand(b, t, h, groups, d).reshape(b, t, h * groups, d)


class CachedAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv = cfg.n_kv_heads or cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, self.n_kv * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, self.n_kv * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, cfg.dim, bias=False)
        shape = (cfg.max_batch_size, cfg.max_seq_len, self.n_kv, self.head_dim)
        self.cache_k, self.cache_v = torch.zeros(shape), torch.zeros(shape)

    def forward(self, x, start, table, mask):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, t, self.n_kv, self.head_dim)
        v = self.wv(x).view(b, t, self.n_kv, self.head_dim)
        q, k = rotate(q, k, table)
        self.cache_k = self.cache_k.to(q)
        self.cache_v = self.cache_v.to(q)
        self.cache_k[:b, start : start + t] = k
        self.cache_v[:b, start : start + t] = v
        groups = self.n_heads // self.n_kv
        keys = expand_kv(self.cache_k[:b, : start + t], groups).transpose(1, 2)
        values = expand_kv(self.cache_v[:b, : start + t], groups).transpose(1, 2)
        scores = torch.matmul(q.transpose(1, 2), keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        weights = F.softmax(scores.float(), dim=-1).type_as(q)
        out = torch.matmul(weights, values).transpose(1, 2).contiguous().view(b, t, -1)
        return self.wo(out)


class SwiGLU(nn.Module):
    def __init__(self, dim, multiple_of):
        super().__init__()
        hidden = int(2 * 4 * dim / 3)
        hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = CachedAttention(cfg)
        self.mlp_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = SwiGLU(cfg.dim, cfg.multiple_of)

    def forward(self, x, start, table, mask):
        x = x + self.attn(self.attn_norm(x), start, table, mask)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.unembed = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.table = rope_table(cfg.dim // cfg.n_heads, 2 * cfg.max_seq_len)

    @torch.inference_mode()
    def forward(self, tokens, start):
        t = tokens.shape[1]
        h = self.embed(tokens)
        self.table = self.table.to(h.device)
        mask = None
        if t > 1:
            # causal among the new tokens; every cached position stays visible
            future = torch.triu(torch.full((t, t), float("-inf"), device=tokens.device), diagonal=1)
            mask = torch.hstack([torch.zeros((t, start), device=tokens.device), future]).type_as(h)
        for layer in self.layers:
            h = layer(h, start, self.table[start : start + t], mask)
        return self.unembed(self.norm(h)).float()


def nucleus_sample(probs, p):
    # the smallest set of most likely tokens whose mass reaches p, renormalised
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    sorted_probs[mass_before > p] = 0.0
    sorted_probs.div_(sorted_probs.sum(dim=-1, keepdim=True))
    choice = torch.multinomial(sorted_probs, num_samples=1)
    return torch.gather(order, -1, choice)


@torch.inference_mode()
def complete(model, prompts: List[List[int]], max_new: int, temperature=0.6, top_p=0.9, pad=-1, eos=1):
    n = len(prompts)
    shortest, longest = min(map(len, prompts)), max(map(len, prompts))
    total = min(model.cfg.max_seq_len, max_new + longest)
    tokens = torch.full((n, total), pad, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        tokens[row, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
    given = tokens != pad
    done = torch.tensor([False] * n)
    seen = []
    start = 0
    for pos in range(shortest, total):
        logits = model.forward(tokens[:, start:pos], start)
        seen.append(logits.numpy().copy())
        if temperature > 0:
            nxt = nucleus_sample(torch.softmax(logits[:, -1] / temperature, dim=-1), top_p)
        else:
            nxt = torch.argmax(logits[:, -1], dim=-1)
        # a row still reading its prompt keeps the prompt's token
        nxt = torch.where(given[:, pos], tokens[:, pos], nxt.reshape(-1))
        tokens[:, pos] = nxt
        done |= (~given[:, pos]) & (nxt == eos)
        start = pos
        if all(done):
            break
    outputs = []
    for prompt, row in zip(prompts, tokens.tolist()):
        new = row[len(prompt) : len(prompt) + max_new]
        outputs.append(new[: new.index(eos)] if eos in new else new)
    return outputs, seen
"""


def test_complex_rotary_embedding_runs_as_written():
    """``rope_table`` (``torch.polar``, complex64) and ``rotate`` (``view_as_complex``, a
    complex product, ``view_as_real``), values and gradients against torch."""
    rng = np.random.default_rng(27)
    xq, xk = rng.standard_normal((2, 3, 2, 8)), rng.standard_normal((2, 3, 1, 8))
    results = []
    for lib in (torch, rg):
        names = run_source(LLAMA_SOURCE, lib)
        table = names["rope_table"](8, 3)
        assert table.dtype == lib.complex64
        q, k = lib.tensor(xq, requires_grad=True), lib.tensor(xk, requires_grad=True)
        q_out, k_out = names["rotate"](q, k, table)
        loss = (q_out * q_out.detach().sin()).sum() + (k_out**3).sum()
        if lib is torch:
            grads = torch.autograd.grad(loss, [q, k])
        else:
            gradients = loss.backward()
            grads = [q.grad(gradients), k.grad(gradients)]
        results.append(
            [q_out.detach().numpy(), k_out.detach().numpy(), *[g.numpy() for g in grads]]
        )
        assert q_out.dtype == lib.float64  # type_as(q)
    assert_records_agree(results[1], results[0], rtol=1e-5, atol=1e-6)


def _multinomial(lib, draws):
    """``torch.multinomial`` by the inverse CDF of one seeded stream of uniforms."""

    def multinomial(probs, num_samples, replacement=False, generator=None):
        p = np.asarray(probs.numpy(), dtype=np.float64)
        cdf = np.cumsum(p / p.sum(-1, keepdims=True), -1)
        u = draws.uniform(size=p.shape[:-1] + (1,))
        return lib.tensor(np.minimum((u > cdf).sum(-1, keepdims=True), p.shape[-1] - 1))

    return multinomial


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_meta_llama_generation_with_kv_cache_matches_torch(monkeypatch, temperature):
    theirs, ours = both(LLAMA_SOURCE, [])
    prompts = [[3, 7, 2, 9], [5, 4], [8, 6, 6]]
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        with monkeypatch.context() as patch:
            patch.setattr(lib, "multinomial", _multinomial(lib, np.random.default_rng(5)))
            torch.manual_seed(0)
            cfg = names["Config"](
                dim=16,
                n_layers=2,
                n_heads=4,
                n_kv_heads=2,
                vocab_size=12,
                multiple_of=8,
                max_batch_size=4,
                max_seq_len=12,
            )
            model = names["Decoder"](cfg)
            if initial is None:
                for p in model.parameters():  # larger than torch's defaults: varied samples
                    torch.nn.init.normal_(p, std=0.5)
                initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
            tokens, logits = names["complete"](
                model, prompts, max_new=6, temperature=temperature, top_p=0.7
            )
            records.append([tokens, *logits])
    assert records[1][0] == records[0][0]
    assert_records_agree(records[1][1:], records[0][1:], rtol=2e-4, atol=2e-5)


LLAMA2C_SOURCE = """
import inspect
import math
import dataclasses
from typing import Optional


@dataclasses.dataclass
class TrainConfig:
    dim: int = 288
    n_layers: int = 6
    n_heads: int = 6
    n_kv_heads: Optional[int] = None  # None: as many as the query heads
    vocab_size: int = 32000
    hidden_dim: Optional[int] = None  # when None: 8/3 of dim, rounded up
    multiple_of: int = 32
    norm_eps: float = 1e-5
    max_seq_len: int = 256
    dropout: float = 0.0


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.gain = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        mean_square = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(mean_square + self.eps)).type_as(x) * self.gain


def rope_cos_sin(head_dim, n, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(n, device=inv.device), inv).float()
    return torch.cos(angles), torch.sin(angles)


def rotate_pairs(x, cos, sin):
    # (even, odd) feature pairs rotated by their position's angle, in real arithmetic
    even, odd = x.float().reshape(x.shape[:-1] + (-1, 2)).unbind(-1)
    cos = cos.view(1, even.shape[1], 1, even.shape[-1])
    sin = sin.view(1, even.shape[1], 1, even.shape[-1])
    turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return turned.flatten(3).type_as(x)


def share_kv(x, groups):
    if groups == 1:
        return x
    b, t, h, d = x.shape
    return x[:, :, :, None, :].expand(b, t, h, groups, d).reshape(b, t, h * groups, d)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv = cfg.n_kv_heads or cfg.n_heads
        assert cfg.n_heads % self.n_kv == 0
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, self.n_kv * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, self.n_kv * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.p = cfg.dropout
        self.attn_drop, self.out_drop = nn.Dropout(cfg.dropout), nn.Dropout(cfg.dropout)
        # torch >= 2.0 has the fused kernel; an older one takes the masked matmul path
        self.flash = hasattr(F, 'scaled_dot_product_attention')
        if not self.flash:
            print("no scaled_dot_product_attention: attention by explicit matmuls")
            n = cfg.max_seq_len
            self.register_buffer("mask", torch.triu(torch.full((1, 1, n, n), float("-inf")), diagonal=1))

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = rotate_pairs(self.wq(x).view(b, t, self.n_heads, self.head_dim), cos, sin)
        k = rotate_pairs(self.wk(x).view(b, t, self.n_kv, self.head_dim), cos, sin)
        v = self.wv(x).view(b, t, self.n_kv, self.head_dim)
        groups = self.n_heads // self.n_kv
        q, k, v = q.transpose(1, 2), share_kv(k, groups).transpose(1, 2), share_kv(v, groups).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.p if self.training else 0.0, is_causal=True)
        else:
            att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
            att = att + self.mask[:, :, :t, :t]
            att = self.attn_drop(F.softmax(att.float(), dim=-1).type_as(q))
            y = torch.matmul(att, v)
        y = y.transpose(1, 2).contiguous().view(b, t, -1)
        return self.out_drop(self.wo(y))


class MLP(nn.Module):
    def __init__(self, dim, hidden, multiple_of, dropout):
        super().__init__()
        if hidden is None:
            hidden = int(2 * (4 * dim) / 3)
            hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.w2(F.silu(self.w1(x)) * self.w3(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = Attention(cfg)
        self.mlp = MLP(cfg.dim, cfg.hidden_dim, cfg.multiple_of, cfg.dropout)
        self.norm1 = RMSNorm(cfg.dim, cfg.norm_eps)
        self.norm2 = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class TinyLlama(nn.Module):
    last_loss: Optional[torch.Tensor]  # set by a forward given targets

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.tok_embeddings.weight = self.output.weight  # tied: one matrix in and out
        cos, sin = rope_cos_sin(cfg.dim // cfg.n_heads, cfg.max_seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init)
        # the projections back into the residual stream start smaller, by depth
        for name, p in self.named_parameters():
            if name.endswith('w3.weight') or name.endswith('wo.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layers))
        self.last_loss = None

    def _init(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            torch.nn.init.zeros_(m.bias)

    def forward(self, tokens, targets=None):
        t = tokens.shape[1]
        h = self.drop(self.tok_embeddings(tokens))
        for layer in self.layers:
            h = layer(h, self.rope_cos[:t], self.rope_sin[:t])
        h = self.norm(h)
        if targets is None:
            self.last_loss = None
            return self.output(h[:, [-1], :])  # the last position only, its time axis kept
        logits = self.output(h)
        flat = logits.view(-1, logits.size(-1))
        self.last_loss = F.cross_entropy(flat, targets.view(-1), ignore_index=-1)
        return logits

    def configure_optimizers(self, weight_decay, lr, betas, device_type):
        params = {n: p for n, p in self.named_parameters() if p.requires_grad}
        # matrices (and the embedding) decay; vectors (the norms' gains) do not
        decay = [p for p in params.values() if p.dim() >= 2]
        keep = [p for p in params.values() if p.dim() < 2]
        groups = [{'params': decay, 'weight_decay': weight_decay}, {'params': keep, 'weight_decay': 0.0}]
        print(f"{len(decay)} decayed tensors ({sum(p.numel() for p in decay):,} numbers), "
              f"{len(keep)} not ({sum(p.numel() for p in keep):,})")
        fused = 'fused' in inspect.signature(torch.optim.AdamW).parameters and device_type == 'cuda'
        print(f"fused AdamW: {fused}")
        return torch.optim.AdamW(groups, lr=lr, betas=betas, **(dict(fused=True) if fused else {}))

    @torch.inference_mode()
    def generate(self, idx, steps, temperature=1.0, top_k=None):
        for _ in range(steps):
            n = self.cfg.max_seq_len
            window = idx if idx.size(1) <= n else idx[:, -n:]
            logits = self(window)[:, -1, :]
            if temperature == 0.0:
                _, nxt = torch.topk(logits, k=1, dim=-1)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < kth[:, [-1]]] = -float('Inf')
                nxt = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, nxt), dim=1)
        return idx


LR, WARMUP, DECAY_END, MIN_LR = 5e-3, 2, 8, 5e-4
WEIGHT_DECAY, BETAS, CLIP, ACCUM = 1e-1, (0.9, 0.95), 1.0, 2


def lr_at(step):
    if step < WARMUP:
        return LR * step / WARMUP  # linear warmup
    if step > DECAY_END:
        return MIN_LR
    progress = (step - WARMUP) / (DECAY_END - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * progress)) * (LR - MIN_LR)  # cosine


def train(model, batches, max_iters: int):
    out = []
    optimizer = model.configure_optimizers(WEIGHT_DECAY, LR, BETAS, 'cpu')
    stream = iter(batches)
    x, y = next(stream)
    for step in range(max_iters + 1):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        for _ in range(ACCUM):
            model(x, y)
            loss = model.last_loss / ACCUM
            x, y = next(stream)  # the next batch fetched before the backward
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # the gradients freed
        out.append(loss.item() * ACCUM)
        out.append(float(norm))
    out.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return out
"""

LLAMA2C_STEP = [
    (
        "    for step in range(max_iters + 1):\n",
        "    for step in range(max_iters + 1):\n        grads = None\n",
    ),
    (
        "            loss.backward()\n",
        "            g = loss.backward()\n            grads = g if grads is None else grads + g\n",
    ),
    (
        "clip_grad_norm_(model.parameters(), CLIP)",
        "clip_grad_norm_(grads, model.parameters(), CLIP)",
    ),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


@pytest.mark.parametrize("flash", [True, False])
def test_llama2c_training_and_generation_match_torch(monkeypatch, capsys, flash):
    theirs, ours = both(LLAMA2C_SOURCE, LLAMA2C_STEP)
    rng = np.random.default_rng(27)
    data = rng.integers(0, 16, size=(12, 2, 9))
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        with monkeypatch.context() as patch:
            patch.setattr(lib, "multinomial", _multinomial(lib, np.random.default_rng(6)))
            if not flash:  # the path taken by a torch before 2.0
                patch.delattr(lib.nn.functional, "scaled_dot_product_attention")
            torch.manual_seed(0)
            cfg = names["TrainConfig"](
                dim=16,
                n_layers=2,
                n_heads=4,
                n_kv_heads=2,
                vocab_size=16,
                multiple_of=8,
                max_seq_len=8,
            )
            model = names["TinyLlama"](cfg)
        assert model.layers[0].attention.flash is flash
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        batches = [
            (lib.tensor(row[:, :-1], dtype=lib.long), lib.tensor(row[:, 1:], dtype=lib.long))
            for row in data
        ]
        record = names["train"](model, batches, max_iters=4)
        with monkeypatch.context() as patch:
            patch.setattr(lib, "multinomial", _multinomial(lib, np.random.default_rng(6)))
            prompt = lib.tensor([[1, 2, 3], [4, 5, 6]], dtype=lib.long)
            record.append(model.generate(prompt, 4, temperature=0.0).tolist())
            record.append(model.generate(prompt, 4, temperature=0.9, top_k=5).tolist())
        records.append(record)
    assert "fused AdamW: False" in capsys.readouterr().out
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
