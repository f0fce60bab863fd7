"""Real ports, continued (the harness: ``tests/real_ports.py``): four programs written here in
the style of public PyTorch projects, each run on torch and, ported, on retrograd from torch's
initial weights and the same draws, every record compared.

- A text-to-text stack with bucketed relative position biases, written in the style of Hugging
  Face transformers' T5 (an encoder with bidirectional buckets, a decoder with causal ones):
  an RMS norm over ``x.to(torch.float32).pow(2).mean(-1, keepdim=True)`` and ``torch.rsqrt``
  (``self.weight.dtype in [torch.float16, torch.bfloat16]``), a plain and a gated MLP
  (``isinstance(w, torch.Tensor)``, ``torch.int8``) with activations from an ``OrderedDict``
  subclass that builds a module per lookup (the tanh GELU by ``torch.pow(x, 3.0)`` and
  ``torch.tanh``), the bucket function (``(offset > 0).to(torch.long)``, ``torch.abs``,
  ``-torch.min(offset, torch.zeros_like(offset))``, ``torch.log(distance.float() / exact)``
  of zero distances (``-inf``, cast to long and then not taken), ``torch.full_like``, ``bucket
  += torch.where(...)`` onto the int ``0``), the bias table through an ``nn.Embedding`` and
  ``permute([2, 0, 1])``, ``scores += bias`` in place, the first block's bias shared by the
  others, ``F.softmax(scores.float(), dim=-1).type_as(scores)``, the fp16 clamp
  (``torch.isinf(h).any()``, ``torch.finfo``), the decoder's mask by ``ids[None, None, :]
  .repeat(batch, length, 1) <= ids[None, :, None]`` and ``(1.0 - keep) *
  torch.finfo(dtype).min``, the ``width**-0.5`` rescale before the head,
  ``CrossEntropyLoss(ignore_index=-100)`` and ``torch.optim.Adafactor``;
- a small image-text dual encoder written in the style of openai/CLIP (its ViT variant), under
  a contrastive fine-tuning loop with open_clip's clamp of the temperature: a float32
  ``LayerNorm`` subclass (``super().forward(x.type(torch.float32))`` and back), ``QuickGELU``
  (``x * torch.sigmoid(1.702 * x)``), ``nn.MultiheadAttention(width, heads)`` called with
  ``need_weights=False, attn_mask=`` a causal mask made by ``torch.empty``, ``fill_(float(
  "-inf"))`` and ``triu_(1)`` (moved by ``.to(dtype=x.dtype, device=x.device)`` every call),
  an ``nn.Sequential(OrderedDict(...))`` MLP, the class token by ``self.cls.to(x.dtype) +
  torch.zeros(x.shape[0], 1, x.shape[-1], ...)``, ``x @ self.proj``, ``nn.Parameter(
  torch.ones([]) * np.log(1 / 0.07))`` and its ``.exp()``, the end-token features
  ``x[torch.arange(x.shape[0]), ids.argmax(dim=-1)]``, ``nn.init.normal_`` of
  ``block.attn.in_proj_weight``, the symmetric cross-entropy over ``torch.arange(len(images))``,
  ``model.logit_scale.clamp_(0, math.log(100))`` under ``no_grad``, zero-shot ``(100.0 * img @
  txt.T).softmax(dim=-1)`` and ``topk``, and a float16 cast (``m.weight.data =
  m.weight.data.half()``, the attention's ``in_proj_weight``/``bias_k``/``bias_v`` by
  ``getattr``; under the torch inner backend: NumPy has no float16 and refuses it by name);
- a walk through ``torch.nn.utils.parametrize`` written in the style of the PyTorch
  parametrizations tutorial (its ``print`` calls recorded, its ``torch.rand`` draws and the
  layers' initial weights from one seeded stream, its import lines given by the harness):
  a symmetric matrix by ``M.triu() + M.triu(1).transpose(-1, -2)``,
  ``register_parametrization`` on a ``Linear`` and a ``Conv2d`` (skew kernels),
  ``layer.parametrizations.weight.original``, ``torch.dist``, a parametrization that announces
  each evaluation, computed again on each read and once under ``parametrize.cached()``, a
  Cayley map (a registered ``torch.eye`` buffer, ``torch.linalg.solve``) and ``torch.matrix_exp``
  chained after the skew or the symmetric map, ``torch.linalg.eigvalsh``, ``right_inverse``
  with ``layer.weight = X``, ``remove_parametrizations`` with and without
  ``leave_parametrized``; then the orthogonal, SPD and Cayley layers trained by SGD;
- a one-level UNet written in the style of CompVis/latent-diffusion's diffusion modules, under a
  DDPM training step: a recomputing checkpoint through a ``torch.autograd.Function`` whose
  ``forward`` runs under ``no_grad`` and whose ``backward`` recomputes under
  ``torch.enable_grad()`` from ``t.detach().requires_grad_(True)`` and ``t.view_as(t)``, then
  ``torch.autograd.grad(..., allow_unused=True)`` for the inputs and ``self.parameters()``;
  sinusoidal time embeddings, zero-initialised branches by ``p.detach().zero_()``, a float32
  ``GroupNorm`` subclass (``super().forward(x.float()).type(x.dtype)``), a time-taking block
  class with an ``@abstractmethod`` and an ``nn.Sequential`` subclass dispatching on it,
  ``F.interpolate(x, scale_factor=2, mode="nearest")``, strided-convolution and average-pool
  downsampling, residual blocks (``t[..., None]`` until the ranks match, ``torch.chunk`` scale
  and shift, ``self.in_layers[:-1]``, up and down), spatial attention in both q/k/v layouts
  (``torch.einsum("bct,bcs->bts", ...)``), ``torch.cumprod`` of the betas and
  ``signal[t].view(-1, 1, 1, 1)``.

The regressions these guard (each with a focused test in ``test_realports9_fixes.py``): an
optimizer step on a 0-d parameter whose value NumPy holds as a scalar (the temperature's
``nn.Parameter(torch.ones([]) * np.log(1 / 0.07))``): Adam and RMSprop failed ("return arrays
must be of ArrayType"), and SGD silently left the parameter unchanged; the state dict's
``v.float()``, ``.double()``, ``.half()``, ``.long()``, ``.to(dtype)`` and ``.clone()``
returned plain NumPy arrays, so ``v.float().numpy()`` failed; there was no top-level
``torch.matrix_exp`` (nor ``Tensor.matrix_exp``), only ``rg.linalg.matrix_exp``;
``autograd.grad`` called under ``no_grad`` (as ``Function.backward`` runs) found nothing to
differentiate in a graph built under ``enable_grad``: its weighted sum of the outputs was
recorded in the caller's grad mode.
"""

from __future__ import annotations

import abc
import math
import os
from collections import OrderedDict

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port

T5_SOURCE = '''
class TanhGELU(nn.Module):
    """GELU by its tanh approximation (the form BERT and GPT-2 shipped with)."""

    def forward(self, x):
        cubic = x + 0.044715 * torch.pow(x, 3.0)
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * cubic))


class ActivationTable(OrderedDict):
    """Name -> module class (or (class, kwargs)); every lookup builds a fresh module."""

    def __getitem__(self, name):
        entry = super().__getitem__(name)
        factory, options = entry if isinstance(entry, tuple) else (entry, {})
        return factory(**options)


ACTIVATIONS = ActivationTable([("relu", nn.ReLU), ("gelu", nn.GELU), ("gelu_tanh", TanhGELU)])


class RelativeConfig:
    """Sizes of a text-to-text stack with bucketed relative position biases."""

    def __init__(self, vocab=100, width=64, head_dim=16, hidden=128, depth=2, heads=4,
                 buckets=32, max_distance=128, dropout=0.1, eps=1e-6, mlp="relu", causal=False):
        self.vocab, self.width, self.head_dim, self.hidden = vocab, width, head_dim, hidden
        self.depth, self.heads, self.dropout, self.eps = depth, heads, dropout, eps
        self.buckets, self.max_distance, self.causal = buckets, max_distance, causal
        prefix, _, act = mlp.rpartition("-")
        if prefix not in ("", "gated"):
            raise ValueError(f"mlp must read 'ACT' or 'gated-ACT', not {mlp!r}")
        self.gated = prefix == "gated"
        # the gated variant's "gelu" was trained with the tanh approximation
        self.act = "gelu_tanh" if (self.gated and act == "gelu") else act


class RMSNorm(nn.Module):
    """Scale by the root mean square, no centring and no bias; the square is averaged in
    float32 even for half-precision activations."""

    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        mean_square = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(mean_square + self.eps)
        half = self.weight.dtype in [torch.float16, torch.bfloat16]
        if half:
            x = x.to(self.weight.dtype)
        return self.weight * x


def match_output_dtype(h, layer):
    # an int8-quantised output layer takes its input as it comes; otherwise cast to its dtype
    w = layer.weight
    if isinstance(w, torch.Tensor) and h.dtype != w.dtype and w.dtype != torch.int8:
        h = h.to(w.dtype)
    return h


class PlainMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.up = nn.Linear(cfg.width, cfg.hidden, bias=False)
        self.down = nn.Linear(cfg.hidden, cfg.width, bias=False)
        self.act = ACTIVATIONS[cfg.act]
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        h = self.drop(self.act(self.up(x)))
        return self.down(match_output_dtype(h, self.down))


class GatedMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate = nn.Linear(cfg.width, cfg.hidden, bias=False)
        self.up = nn.Linear(cfg.width, cfg.hidden, bias=False)
        self.down = nn.Linear(cfg.hidden, cfg.width, bias=False)
        self.act = ACTIVATIONS[cfg.act]
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        h = self.drop(self.act(self.gate(x)) * self.up(x))
        return self.down(match_output_dtype(h, self.down))


def relative_bucket(offset, bidirectional=True, num_buckets=32, max_distance=128):
    """Bucket index of each key-minus-query offset: exact buckets for short distances,
    logarithmic ones out to max_distance, everything further in the last bucket. A causal
    stack sees only offsets <= 0; a bidirectional one spends half its buckets on each sign."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        bucket += (offset > 0).to(torch.long) * num_buckets
        distance = torch.abs(offset)
    else:
        distance = -torch.min(offset, torch.zeros_like(offset))
    exact = num_buckets // 2
    near = distance < exact
    # log(0) is -inf at zero distance: cast to long, and never taken (near holds there)
    log_ratio = torch.log(distance.float() / exact) / math.log(max_distance / exact)
    far = exact + (log_ratio * (num_buckets - exact)).to(torch.long)
    far = torch.min(far, torch.full_like(far, num_buckets - 1))
    bucket += torch.where(near, distance, far)
    return bucket


class RelativeSelfAttention(nn.Module):
    def __init__(self, cfg, owns_bias=False):
        super().__init__()
        self.cfg = cfg
        self.inner = cfg.heads * cfg.head_dim
        # no 1/sqrt(d) on the scores: the initialisation accounts for it
        self.q = nn.Linear(cfg.width, self.inner, bias=False)
        self.k = nn.Linear(cfg.width, self.inner, bias=False)
        self.v = nn.Linear(cfg.width, self.inner, bias=False)
        self.o = nn.Linear(self.inner, cfg.width, bias=False)
        self.owns_bias = owns_bias
        if owns_bias:
            self.bias_table = nn.Embedding(cfg.buckets, cfg.heads)

    def position_bias(self, n_query, n_key):
        query_at = torch.arange(n_query, dtype=torch.long)[:, None]
        key_at = torch.arange(n_key, dtype=torch.long)[None, :]
        buckets = relative_bucket(key_at - query_at, bidirectional=not self.cfg.causal,
                                  num_buckets=self.cfg.buckets, max_distance=self.cfg.max_distance)
        # (query, key, head) -> (1, head, query, key)
        return self.bias_table(buckets).permute([2, 0, 1]).unsqueeze(0)

    def forward(self, x, mask=None, bias=None):
        batch, length = x.shape[:2]

        def heads(t):
            return t.view(batch, -1, self.cfg.heads, self.cfg.head_dim).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = torch.matmul(q, k.transpose(3, 2))
        if bias is None:
            if self.owns_bias:
                bias = self.position_bias(length, length)
            else:
                bias = torch.zeros((1, self.cfg.heads, length, length), dtype=scores.dtype)
            if mask is not None:
                bias = bias + mask
        scores += bias
        attn = F.softmax(scores.float(), dim=-1).type_as(scores)
        attn = F.dropout(attn, p=self.cfg.dropout, training=self.training)
        mixed = torch.matmul(attn, v).transpose(1, 2).contiguous().view(batch, -1, self.inner)
        return self.o(mixed), bias


class RelativeBlock(nn.Module):
    def __init__(self, cfg, owns_bias=False):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.width, eps=cfg.eps)
        self.attn = RelativeSelfAttention(cfg, owns_bias=owns_bias)
        self.mlp_norm = RMSNorm(cfg.width, eps=cfg.eps)
        self.mlp = GatedMLP(cfg) if cfg.gated else PlainMLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h, mask, bias):
        update, bias = self.attn(self.attn_norm(h), mask=mask, bias=bias)
        h = h + self.drop(update)
        if h.dtype == torch.float16:
            # keep fp16 activations finite: pull them just under the largest half
            biggest = torch.finfo(h.dtype).max
            limit = torch.where(torch.isinf(h).any(), biggest - 1000, biggest)
            h = torch.clamp(h, min=-limit, max=limit)
        h = h + self.drop(self.mlp(self.mlp_norm(h)))
        return h, bias


class RelativeStack(nn.Module):
    def __init__(self, cfg, embedding):
        super().__init__()
        self.cfg = cfg
        self.embedding = embedding
        # only the first block learns position biases; the later blocks reuse them
        self.blocks = nn.ModuleList(
            [RelativeBlock(cfg, owns_bias=i == 0) for i in range(cfg.depth)])
        self.final_norm = RMSNorm(cfg.width, eps=cfg.eps)
        self.drop = nn.Dropout(cfg.dropout)

    def additive_mask(self, keep, shape):
        """(batch, length) ones and zeros -> an additive mask broadcast over the heads,
        causal too for a decoder: 0 where attended, the dtype's lowest value elsewhere."""
        dtype = next(self.parameters()).dtype
        if self.cfg.causal:
            batch, length = shape
            ids = torch.arange(length)
            causal = ids[None, None, :].repeat(batch, length, 1) <= ids[None, :, None]
            keep = causal.to(keep.dtype)[:, None, :, :] * keep[:, None, None, :]
        else:
            keep = keep[:, None, None, :]
        keep = keep.to(dtype=dtype)
        return (1.0 - keep) * torch.finfo(dtype).min

    def forward(self, ids, keep=None):
        shape = ids.size()
        h = self.drop(self.embedding(ids.view(-1, shape[-1])))
        if keep is None:
            keep = torch.ones(*shape)
        mask = self.additive_mask(keep, shape)
        bias = None
        for block in self.blocks:
            h, bias = block(h, mask, bias)
        return self.drop(self.final_norm(h))


cfg = RelativeConfig(vocab=21, width=16, head_dim=4, hidden=24, depth=2, heads=4, buckets=8,
                     max_distance=12, dropout=0.0, mlp=MLP, causal=CAUSAL)
embedding = nn.Embedding(cfg.vocab, cfg.width)
stack = RelativeStack(cfg, embedding)
head = nn.Linear(cfg.width, cfg.vocab, bias=False)
model = nn.ModuleDict({"stack": stack, "head": head})
initialize(model)
offsets = torch.arange(-20, 21)
for both_ways in (True, False):
    buckets = relative_bucket(offsets, bidirectional=both_ways, num_buckets=8, max_distance=12)
    record.append(buckets.tolist())
criterion = CrossEntropyLoss(ignore_index=-100)
opt = torch.optim.Adafactor(model.parameters(), lr=1e-2)
for ids, keep, targets in batches:
    hidden = stack(ids, keep=keep)
    # tied-embedding convention: shrink by 1/sqrt(width) before the vocabulary projection
    logits = head(hidden * (cfg.width**-0.5))
    loss = criterion(logits.view(-1, logits.size(-1)), targets.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
'''
CLIP_SOURCE = '''
class Float32LayerNorm(nn.LayerNorm):
    """LayerNorm computed in float32 whatever the activations' dtype, returned in theirs."""

    def forward(self, x):
        kind = x.dtype
        out = super().forward(x.type(torch.float32))
        return out.type(kind)


class QuickGELU(nn.Module):
    # the sigmoid approximation of GELU
    def forward(self, x):
        return torch.sigmoid(1.702 * x) * x


class Block(nn.Module):
    def __init__(self, width, heads, mask=None):
        super().__init__()
        self.norm1 = Float32LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads)
        self.norm2 = Float32LayerNorm(width)
        layers = OrderedDict([
            ("fc", nn.Linear(width, 4 * width)),
            ("act", QuickGELU()),
            ("out", nn.Linear(4 * width, width)),
        ])
        self.mlp = nn.Sequential(layers)
        self.mask = mask

    def attend(self, x):
        if self.mask is not None:
            self.mask = self.mask.to(dtype=x.dtype, device=x.device)
        out, _ = self.attn(x, x, x, need_weights=False, attn_mask=self.mask)
        return out

    def forward(self, x):
        x = x + self.attend(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Tower(nn.Module):
    """Residual attention blocks over (sequence, batch, width) activations."""

    def __init__(self, width, depth, heads, mask=None):
        super().__init__()
        self.width, self.depth = width, depth
        self.blocks = nn.Sequential(*[Block(width, heads, mask) for _ in range(depth)])

    def forward(self, x):
        return self.blocks(x)


class PatchEncoder(nn.Module):
    def __init__(self, size, patch, width, depth, heads, out_dim):
        super().__init__()
        self.patchify = nn.Conv2d(3, width, kernel_size=patch, stride=patch, bias=False)
        s = width**-0.5
        self.cls = nn.Parameter(s * torch.randn(width))
        self.pos = nn.Parameter(s * torch.randn((size // patch) ** 2 + 1, width))
        self.norm_in = Float32LayerNorm(width)
        self.tower = Tower(width, depth, heads)
        self.norm_out = Float32LayerNorm(width)
        self.proj = nn.Parameter(s * torch.randn(width, out_dim))

    def forward(self, images):
        x = self.patchify(images)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)  # (batch, patches, width)
        blank = torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype, device=x.device)
        x = torch.cat([self.cls.to(x.dtype) + blank, x], dim=1)
        x = self.norm_in(x + self.pos.to(x.dtype))
        x = self.tower(x.permute(1, 0, 2)).permute(1, 0, 2)
        return self.norm_out(x[:, 0, :]) @ self.proj


class DualEncoder(nn.Module):
    def __init__(self, embed_dim, image_size, patch, image_width, image_depth,
                 context, vocab, text_width, text_heads, text_depth):
        super().__init__()
        self.context = context
        self.image = PatchEncoder(image_size, patch, image_width, image_depth,
                                  heads=image_width // 16, out_dim=embed_dim)
        self.text = Tower(text_width, text_depth, text_heads, mask=self.causal_mask())
        self.tokens = nn.Embedding(vocab, text_width)
        self.text_pos = nn.Parameter(torch.empty(context, text_width))
        self.text_norm = Float32LayerNorm(text_width)
        self.text_proj = nn.Parameter(torch.empty(text_width, embed_dim))
        # temperature learned in log space, started at 1/0.07
        start = np.log(1 / 0.07)
        self.logit_scale = nn.Parameter(torch.ones([]) * start)
        self.reset_parameters()

    def reset_parameters(self):
        width, depth = self.text.width, self.text.depth
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.text_pos, std=0.01)
        for block in self.text.blocks:
            nn.init.normal_(block.attn.in_proj_weight, std=width**-0.5)
            nn.init.normal_(block.attn.out_proj.weight, std=width**-0.5 * (2 * depth) ** -0.5)
            nn.init.normal_(block.mlp.fc.weight, std=(2 * width) ** -0.5)
            nn.init.normal_(block.mlp.out.weight, std=width**-0.5 * (2 * depth) ** -0.5)
        nn.init.normal_(self.text_proj, std=width**-0.5)

    def causal_mask(self):
        # additive: -inf above the diagonal, 0 on and below it
        mask = torch.empty(self.context, self.context)
        mask.fill_(float("-inf"))
        mask.triu_(1)
        return mask

    @property
    def dtype(self):
        return self.image.patchify.weight.dtype

    def embed_images(self, images):
        return self.image(images.type(self.dtype))

    def embed_texts(self, ids):
        x = self.tokens(ids).type(self.dtype) + self.text_pos.type(self.dtype)
        x = self.text(x.permute(1, 0, 2)).permute(1, 0, 2)
        x = self.text_norm(x).type(self.dtype)
        # each caption's summary sits at its end token, the largest id in the row
        ends = ids.argmax(dim=-1)
        return x[torch.arange(x.shape[0]), ends] @ self.text_proj

    def forward(self, images, ids):
        img = self.embed_images(images)
        txt = self.embed_texts(ids)
        img = img / img.norm(dim=1, keepdim=True)
        txt = txt / txt.norm(dim=1, keepdim=True)
        per_image = self.logit_scale.exp() * img @ txt.t()
        return per_image, per_image.t()


def to_half(model):
    """Cast the matrices to float16 (the norms stay in float32), as a release checkpoint is."""

    def cast(m):
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Linear)):
            m.weight.data = m.weight.data.half()
            if m.bias is not None:
                m.bias.data = m.bias.data.half()
        if isinstance(m, nn.MultiheadAttention):
            names = [f"{part}_proj_weight" for part in ("in", "q", "k", "v")]
            for name in names + ["in_proj_bias", "bias_k", "bias_v"]:
                t = getattr(m, name)
                if t is not None:
                    t.data = t.data.half()
        for name in ("text_proj", "proj"):
            t = getattr(m, name, None)
            if t is not None:
                t.data = t.data.half()

    model.apply(cast)


model = DualEncoder(embed_dim=8, image_size=8, patch=4, image_width=32, image_depth=1,
                    context=6, vocab=17, text_width=16, text_heads=2, text_depth=2)
initialize(model)

# contrastive fine-tuning: matching pairs on the diagonal, cross-entropy both ways; the
# temperature kept at most 100 after each step
ceiling = math.log(100)
image_loss, text_loss = nn.CrossEntropyLoss(), nn.CrossEntropyLoss()
opt = optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2)
for images, ids in loader:
    images, ids = images.to("cpu"), ids.to("cpu")
    opt.zero_grad()
    per_image, per_text = model(images, ids)
    targets = torch.arange(len(images), dtype=torch.long)
    contrastive = (image_loss(per_image, targets) + text_loss(per_text, targets)) / 2
    contrastive.backward()
    opt.step()
    with torch.no_grad():
        model.logit_scale.clamp_(0, ceiling)
    record.append(contrastive.item())

# zero-shot: which caption fits the first image best
model.eval()
with torch.no_grad():
    img = model.embed_images(images)
    txt = model.embed_texts(ids)
    img /= img.norm(dim=-1, keepdim=True)
    txt /= txt.norm(dim=-1, keepdim=True)
    probs = (100.0 * img @ txt.T).softmax(dim=-1)
    best, which = probs[0].topk(2)
record += [probs, which.tolist(), model.logit_scale.item()]
record.append({name: t.detach().float().numpy().copy() for name, t in model.state_dict().items()})
'''

STEP = [("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)")]


def run_program(source, step, lib, state, **names):
    """``source`` run under ``lib`` (its port under retrograd), the model initialised by torch
    and then loaded with torch's initial weights; the program's record."""

    def initialize(model):
        if not state:
            state.update({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

    torch.manual_seed(0)
    record = []
    namespace = {
        "torch": lib,
        "nn": lib.nn,
        "optim": lib.optim,
        "F": lib.nn.functional,
        "math": math,
        "np": np,
        "OrderedDict": OrderedDict,
        "record": record,
        "initialize": initialize,
        **names,
    }
    program = source if lib is torch else port(source, step)
    exec(compile(program, f"<{lib.__name__} port>", "exec"), namespace)
    return record, namespace


@pytest.mark.parametrize(("mlp", "causal"), [("relu", False), ("gated-gelu", True)])
def test_relative_position_stack_matches_torch(mlp, causal):
    rng = np.random.default_rng(51)
    tokens = rng.integers(0, 21, (2, 2, 9))
    lengths = [[9, 6], [5, 8]]
    masks = np.array([[[1] * n + [0] * (9 - n) for n in pair] for pair in lengths])
    labels = np.where(masks == 1, rng.integers(0, 21, tokens.shape), -100)
    records, state = [], {}
    for lib in (torch, rg):
        batches = [
            (lib.tensor(t), lib.tensor(m), lib.tensor(y)) for t, m, y in zip(tokens, masks, labels)
        ]
        record, _ = run_program(
            T5_SOURCE,
            STEP,
            lib,
            state,
            MLP=mlp,
            CAUSAL=causal,
            batches=batches,
            CrossEntropyLoss=lib.nn.CrossEntropyLoss,
        )
        records.append(record)
    # the buckets of offsets -20..20 (8 buckets, max distance 12): bidirectional, the far
    # left capped in bucket 3 and offset 0 in bucket 0; causal, the right side all bucket 0
    assert records[0][0][:3] == [3, 3, 3] and records[0][0][20] == 0
    assert set(records[0][1][20:]) == {0}
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


CLIP_STEP = [
    (
        "    contrastive.backward()\n    opt.step()",
        "    grads = contrastive.backward()\n    opt.step(grads)",
    )
]


def test_dual_encoder_matches_torch():
    rng = np.random.default_rng(511)
    images = rng.standard_normal((3, 4, 3, 8, 8)).astype(np.float32)
    texts = rng.integers(1, 16, (3, 4, 6))
    for batch in texts:  # the end token, the highest id, ends each caption
        for row, end in zip(batch, rng.integers(2, 6, 4)):
            row[end] = 16
            row[end + 1 :] = 0
    records, state = [], {}
    for lib in (torch, rg):
        data = lib.utils.data
        loader = data.DataLoader(
            data.TensorDataset(
                lib.tensor(images.reshape(12, 3, 8, 8)), lib.tensor(texts.reshape(12, 6))
            ),
            batch_size=4,
        )
        record, names = run_program(CLIP_SOURCE, CLIP_STEP, lib, state, loader=loader)
        records.append(record)
        # the float16 cast: float16 is the torch inner backend's (NumPy has none, and says so)
        model = names["model"]
        if lib is rg and os.environ.get("RETROGRAD_INNER") != "torch":
            with pytest.raises(rg.errors.DTypeError, match="float16"):
                names["to_half"](model)
            continue
        names["to_half"](model)
        halves = [
            model.image.proj,
            model.image.patchify.weight,
            model.text.blocks[0].attn.in_proj_weight,
            model.text_proj,
        ]
        assert all(p.dtype == lib.float16 for p in halves)
        assert model.image.norm_in.weight.dtype == lib.float32
    # the key part of in_proj_bias has no true gradient (it shifts a query's scores by one
    # constant), so Adam's steps on it follow the rounding noise: the query and value parts
    # are compared on their own
    ours, theirs = records[1][-1], records[0][-1]
    skip = [k for k in theirs if k.endswith("attn.in_proj_bias")]
    assert skip
    for name in skip:
        n = len(theirs[name]) // 3
        for part in (slice(0, n), slice(2 * n, 3 * n)):
            np.testing.assert_allclose(ours[name][part], theirs[name][part], rtol=2e-4, atol=2e-5)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5, skip=skip)


PARAMETRIZATIONS_SOURCE = """
import torch
from torch import nn
from torch.nn.utils import parametrize as P

# a symmetric matrix from any square one: its upper triangle mirrored below the diagonal
def mirror_upper(M):
    return M.triu() + M.triu(1).transpose(-1, -2)

M = torch.rand(4, 4)
S = mirror_upper(M)
print(torch.allclose(S, S.T))
print(S)


class Mirror(nn.Module):
    def forward(self, M):
        return mirror_upper(M)


class AntiMirror(nn.Module):
    def forward(self, M):
        upper = M.triu(1)
        return upper - upper.transpose(-1, -2)


# a symmetric linear map, and a convolution whose kernels are all skew-symmetric
sym = nn.Linear(4, 4)
print(sym)
P.register_parametrization(sym, "weight", Mirror())
print(sym)
print(torch.allclose(sym.weight, sym.weight.T))
print(sym.parametrizations.weight)
print(sym.parametrizations.weight.original)
print(torch.dist(sym.weight, mirror_upper(sym.parametrizations.weight.original)))

conv = nn.Conv2d(2, 3, kernel_size=3)
P.register_parametrization(conv, "weight", AntiMirror())
print(conv.weight[1, 0])
print(conv.weight[2, 1] + conv.weight[2, 1].T)


# a parametrization that announces each evaluation: every read of the weight recomputes it,
# except inside parametrize.cached()
class Announced(nn.Module):
    def forward(self, M):
        print("evaluated")
        return M


probe = nn.Linear(3, 3)
P.register_parametrization(probe, "weight", Announced())
print("reads outside the cache")
twice = probe.weight @ probe.weight
with P.cached():
    print("reads inside the cache")
    once = probe.weight @ probe.weight
print(torch.dist(twice, once))


class Cayley(nn.Module):
    # (I - A)^-1 (I + A): orthogonal whenever A is skew-symmetric
    def __init__(self, n):
        super().__init__()
        self.register_buffer("eye", torch.eye(n))

    def forward(self, A):
        return torch.linalg.solve(self.eye - A, self.eye + A)


class Expm(nn.Module):
    def forward(self, A):
        return torch.matrix_exp(A)


cayley = nn.Linear(3, 3)
P.register_parametrization(cayley, "weight", AntiMirror())
P.register_parametrization(cayley, "weight", Cayley(3))
Q = cayley.weight
print(torch.dist(Q.T @ Q, torch.eye(3)))

rotation = nn.Linear(3, 3)
P.register_parametrization(rotation, "weight", AntiMirror())
P.register_parametrization(rotation, "weight", Expm())
Q = rotation.weight
print(torch.dist(Q @ Q.T, torch.eye(3)))

spd = nn.Linear(3, 3)
P.register_parametrization(spd, "weight", Mirror())
P.register_parametrization(spd, "weight", Expm())
W = spd.weight
print(torch.dist(W, W.T))
print(torch.linalg.eigvalsh(W))
print((torch.linalg.eigvalsh(W) > 0.0).all())


# with a right inverse, assigning to the weight stores a preimage in `original`
class InvertibleMirror(Mirror):
    def right_inverse(self, S):
        return S.triu()


class InvertibleAntiMirror(AntiMirror):
    def right_inverse(self, A):
        return A.triu(1)


target = torch.rand(3, 3)
target = target + target.T
layer = nn.Linear(3, 3)
P.register_parametrization(layer, "weight", InvertibleMirror())
layer.weight = target
print(torch.dist(layer.weight, target))
print(layer.weight, layer.parametrizations.weight.original)

target = torch.rand(3, 3)
target = target - target.T
layer = nn.Linear(3, 3)
P.register_parametrization(layer, "weight", InvertibleAntiMirror())
layer.weight = target
print(torch.dist(layer.weight, target))

# removing a parametrization keeps its current value, or restores the unconstrained one
for keep in (True, False):
    layer = nn.Linear(3, 3)
    plain = layer.weight.detach().clone()
    P.register_parametrization(layer, "weight", AntiMirror())
    constrained = layer.weight.detach().clone()
    P.remove_parametrizations(layer, "weight", leave_parametrized=keep)
    print(layer)
    print(layer.weight)
    print(torch.dist(layer.weight, constrained if keep else plain))

# the constrained layers trained: gradients through solve and matrix_exp to `original`
opt = torch.optim.SGD([*cayley.parameters(), *rotation.parameters(), *spd.parameters()], lr=0.1)
x = torch.rand(8, 3)
for _ in range(3):
    opt.zero_grad()
    fit = (rotation(x) - x.flip(1)).pow(2).mean()
    loss = fit + 0.01 * spd(x).sum() + cayley(x).abs().mean()
    loss.backward()
    opt.step()
    print(loss)
print(cayley.weight)
print(rotation.weight)
print(spd.weight)
print(sorted(cayley.state_dict()))
"""

#: the walk's import lines: both runs get torch, nn and parametrize from the harness (the
#: draws of torch.rand and the layers' initial weights from one seeded stream)
PARAMETRIZATIONS_IMPORTS = [
    (
        "import torch\nfrom torch import nn\nfrom torch.nn.utils import parametrize as P\n",
        "",
    ),
]


class SharedDraws:
    """``lib`` with ``rand`` drawn from one seeded stream, and ``nn`` whose ``Linear`` and
    ``Conv2d`` take their initial weights from it, so both runs start alike."""

    def __init__(self, lib, rng):
        self._lib, self._rng = lib, rng

        def draw(*shape):
            return lib.tensor(rng.uniform(-0.5, 0.5, shape).astype(np.float32))

        def initialized(base):
            class Layer(base):
                def __init__(self, *args, **kwargs):
                    super().__init__(*args, **kwargs)
                    with lib.no_grad():
                        self.weight.copy_(draw(*self.weight.shape))
                        self.bias.copy_(draw(*self.bias.shape))

            Layer.__name__ = Layer.__qualname__ = base.__name__
            return Layer

        self.nn = type("nn", (), {})()
        for name in ("Module", "Parameter"):
            setattr(self.nn, name, getattr(lib.nn, name))
        self.nn.Linear = initialized(lib.nn.Linear)
        self.nn.Conv2d = initialized(lib.nn.Conv2d)

    def rand(self, *shape):
        return self._lib.tensor(self._rng.uniform(0.0, 1.0, shape).astype(np.float32))

    def __getattr__(self, name):
        return getattr(self._lib, name)


def test_parametrize_walkthrough_matches_torch():
    records = []
    for lib in (torch, rg):
        shim = SharedDraws(lib, np.random.default_rng(512))
        record = []

        def show(*values, record=record, lib=lib):
            for value in values:
                if isinstance(value, lib.Tensor):
                    value = value.detach().numpy().copy()
                    record.append(bool(value) if value.dtype == bool else value)
                else:
                    record.append(value if isinstance(value, str | list) else repr(value))

        names = {"torch": shim, "nn": shim.nn, "P": lib.nn.utils.parametrize, "print": show}
        source = port(PARAMETRIZATIONS_SOURCE, PARAMETRIZATIONS_IMPORTS)
        if lib is rg:
            source = port(source, STEP)
        exec(compile(source, f"<{lib.__name__} parametrize>", "exec"), names)
        records.append(record)
    # the announcing parametrization: once by register_parametrization's check, twice for
    # the two uncached reads, once for both reads inside parametrize.cached()
    texts = [r for r in records[0] if isinstance(r, str)]
    assert texts.count("evaluated") == 4
    assert texts.index("reads inside the cache") - texts.index("reads outside the cache") == 3
    assert any(text.startswith("ParametrizedLinear(") for text in texts)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


UNET_SOURCE = '''
def checkpointed(fn, inputs, params, enabled):
    """fn(*inputs), its activations dropped after the forward pass and recomputed in the
    backward one; params are what fn reads besides its inputs."""
    if not enabled:
        return fn(*inputs)
    return Recompute.apply(fn, len(inputs), *inputs, *params)


class Recompute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, n_inputs, *tensors):
        ctx.fn = fn
        ctx.inputs = list(tensors[:n_inputs])
        ctx.params = list(tensors[n_inputs:])
        with torch.no_grad():
            return fn(*ctx.inputs)

    @staticmethod
    def backward(ctx, *grad_out):
        inputs = [t.detach().requires_grad_(True) for t in ctx.inputs]
        with torch.enable_grad():
            # views, so that an in-place first op in fn does not write to a detached leaf
            out = ctx.fn(*[t.view_as(t) for t in inputs])
        grads = torch.autograd.grad(out, inputs + ctx.params, grad_out, allow_unused=True)
        ctx.inputs = ctx.params = ctx.fn = None
        return (None, None, *grads)


def sinusoidal_embedding(t, dim, max_period=10000):
    # cosines then sines of t at geometrically spaced frequencies; an odd dim padded by zeros
    half = dim // 2
    exponent = -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
    freqs = torch.exp(exponent).to(device=t.device)
    angles = t[:, None].float() * freqs[None]
    emb = torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


def zeroed(module):
    # start a residual branch at zero: the block begins as the identity
    for p in module.parameters():
        p.detach().zero_()
    return module


class Float32GroupNorm(nn.GroupNorm):
    def forward(self, x):
        out = super().forward(x.float())
        return out.type(x.dtype)


def norm(channels):
    return Float32GroupNorm(8, channels)


def conv(dims, *args, **kwargs):
    return {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims](*args, **kwargs)


def pool(dims, *args, **kwargs):
    return {1: nn.AvgPool1d, 2: nn.AvgPool2d, 3: nn.AvgPool3d}[dims](*args, **kwargs)


class NeedsTime(nn.Module):
    """A block whose forward takes the time embedding as well."""

    @abstractmethod
    def forward(self, x, t_emb):
        ...


class TimeSequential(nn.Sequential, NeedsTime):
    def forward(self, x, t_emb):
        for layer in self:
            x = layer(x, t_emb) if isinstance(layer, NeedsTime) else layer(x)
        return x


class Up(nn.Module):
    def __init__(self, channels, with_conv, dims=2):
        super().__init__()
        self.channels = channels
        self.conv = conv(dims, channels, channels, 3, padding=1) if with_conv else None

    def forward(self, x):
        assert x.shape[1] == self.channels, x.shape
        x = F.interpolate(x, mode="nearest", scale_factor=2)
        return x if self.conv is None else self.conv(x)


class Down(nn.Module):
    def __init__(self, channels, with_conv, dims=2):
        super().__init__()
        self.channels = channels
        if with_conv:
            self.op = conv(dims, channels, channels, 3, stride=2, padding=1)
        else:
            self.op = pool(dims, kernel_size=2, stride=2)

    def forward(self, x):
        assert x.shape[1] == self.channels, x.shape
        return self.op(x)


class Residual(NeedsTime):
    def __init__(self, channels, t_dim, dropout, out_channels=None, conv_skip=False,
                 scale_shift=False, dims=2, recompute=False, up=False, down=False):
        super().__init__()
        out_channels = out_channels or channels
        self.scale_shift, self.recompute = scale_shift, recompute
        self.in_layers = nn.Sequential(norm(channels), nn.SiLU(),
                                       conv(dims, channels, out_channels, 3, padding=1))
        self.resample = up or down
        if up:
            self.h_resample, self.x_resample = (Up(channels, False, dims) for _ in "hx")
        elif down:
            self.h_resample, self.x_resample = (Down(channels, False, dims) for _ in "hx")
        self.t_layers = nn.Sequential(
            nn.SiLU(), nn.Linear(t_dim, 2 * out_channels if scale_shift else out_channels))
        self.post = nn.Sequential(
            norm(out_channels), nn.SiLU(), nn.Dropout(p=dropout),
            zeroed(conv(dims, out_channels, out_channels, 3, padding=1)))
        if out_channels == channels:
            self.skip = nn.Identity()
        elif conv_skip:
            self.skip = conv(dims, channels, out_channels, 3, padding=1)
        else:
            self.skip = conv(dims, channels, out_channels, 1)

    def forward(self, x, t_emb):
        return checkpointed(self.run, (x, t_emb), self.parameters(), self.recompute)

    def run(self, x, t_emb):
        if self.resample:
            # resample between the normalisation and the convolution
            h = self.in_layers[:-1](x)
            h = self.in_layers[-1](self.h_resample(h))
            x = self.x_resample(x)
        else:
            h = self.in_layers(x)
        t = self.t_layers(t_emb).type(h.dtype)
        while len(t.shape) < len(h.shape):
            t = t[..., None]
        if self.scale_shift:
            scale, shift = torch.chunk(t, 2, dim=1)
            h = self.post[0](h) * (1 + scale) + shift
            h = self.post[1:](h)
        else:
            h = self.post(h + t)
        return self.skip(x) + h


def attend_heads_first(qkv, heads):
    # (batch, heads * 3 * c, length): each head's q, k and v side by side
    batch, width, length = qkv.shape
    c = width // (3 * heads)
    q, k, v = qkv.reshape(batch * heads, 3 * c, length).split(c, dim=1)
    s = 1 / math.sqrt(math.sqrt(c))  # scale both factors: gentler on half precision
    w = torch.einsum("bct,bcs->bts", q * s, k * s)
    w = torch.softmax(w.float(), dim=-1).type(w.dtype)
    return torch.einsum("bts,bcs->bct", w, v).reshape(batch, -1, length)


def attend_qkv_first(qkv, heads):
    # (batch, 3 * heads * c, length): all queries, then all keys, then all values
    batch, width, length = qkv.shape
    c = width // (3 * heads)
    q, k, v = qkv.chunk(3, dim=1)
    s = 1 / math.sqrt(math.sqrt(c))
    w = torch.einsum("bct,bcs->bts", (q * s).view(batch * heads, c, length),
                     (k * s).view(batch * heads, c, length))
    w = torch.softmax(w.float(), dim=-1).type(w.dtype)
    out = torch.einsum("bts,bcs->bct", w, v.reshape(batch * heads, c, length))
    return out.reshape(batch, -1, length)


class HeadsFirst(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = heads

    def forward(self, qkv):
        return attend_heads_first(qkv, self.heads)


class QKVFirst(HeadsFirst):
    def forward(self, qkv):
        return attend_qkv_first(qkv, self.heads)


class SpatialAttention(nn.Module):
    def __init__(self, channels, heads=1, head_channels=-1, qkv_first=False):
        super().__init__()
        heads = heads if head_channels == -1 else channels // head_channels
        self.norm = norm(channels)
        self.qkv = conv(1, channels, 3 * channels, 1)
        self.attention = QKVFirst(heads) if qkv_first else HeadsFirst(heads)
        self.out = zeroed(conv(1, channels, channels, 1))

    def forward(self, x):
        return checkpointed(self.run, (x,), self.parameters(), True)

    def run(self, x):
        n, c, *grid = x.shape
        x = x.reshape(n, c, -1)
        x = x + self.out(self.attention(self.qkv(self.norm(x))))
        return x.reshape(n, c, *grid)


class SmallUNet(nn.Module):
    """One resolution level with skips, every block kind above in it."""

    def __init__(self, channels=3, width=16, recompute=False):
        super().__init__()
        self.width = width
        t_dim = 2 * width
        self.time_mlp = nn.Sequential(nn.Linear(width, t_dim), nn.SiLU(), nn.Linear(t_dim, t_dim))
        self.down = nn.ModuleList([
            TimeSequential(conv(2, channels, width, 3, padding=1)),
            TimeSequential(Residual(width, t_dim, 0.0, recompute=recompute),
                           SpatialAttention(width, heads=2)),
            TimeSequential(Down(width, True)),
        ])
        self.middle = TimeSequential(
            Residual(width, t_dim, 0.0, scale_shift=True, recompute=recompute),
            SpatialAttention(width, head_channels=8, qkv_first=True),
            Residual(width, t_dim, 0.0, down=True),
            Residual(width, t_dim, 0.0, up=True),
        )
        self.up = nn.ModuleList([
            TimeSequential(Residual(2 * width, t_dim, 0.0, out_channels=width), Up(width, True)),
            TimeSequential(Residual(2 * width, t_dim, 0.0, out_channels=width, conv_skip=True)),
        ])
        last = zeroed(conv(2, width, channels, 3, padding=1))
        self.head = nn.Sequential(norm(width), nn.SiLU(), last)

    def forward(self, x, t):
        t_emb = self.time_mlp(sinusoidal_embedding(t, self.width))
        h, skips = x.type(torch.float32), []
        for block in self.down:
            h = block(h, t_emb)
            skips.append(h)
        h = self.middle(h, t_emb)
        for block in self.up:
            h = block(torch.cat([h, skips.pop()], dim=1), t_emb)
        return self.head(h.type(x.dtype))


model = SmallUNet(recompute=RECOMPUTE)
initialize(model)
# the linear beta schedule of DDPM, in float64 until the square roots are taken
betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
alpha_bar = torch.cumprod(1.0 - betas, dim=0)
signal = torch.sqrt(alpha_bar).float()
noise_level = torch.sqrt(1.0 - alpha_bar).float()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for x0, t, eps in batches:
    xt = signal[t].view(-1, 1, 1, 1) * x0 + noise_level[t].view(-1, 1, 1, 1) * eps
    loss = F.mse_loss(model(xt, t), eps)
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
'''


def test_diffusion_unet_blocks_match_torch():
    # the residual blocks recompute too (the attention blocks always do): every block's
    # backward runs the Function's recomputation
    rng = np.random.default_rng(513)
    images = rng.standard_normal((2, 2, 3, 8, 8)).astype(np.float32)
    steps = rng.integers(0, 1000, (2, 2))
    noises = rng.standard_normal(images.shape).astype(np.float32)
    records, state = [], {}
    for lib in (torch, rg):
        batches = [
            (lib.tensor(x), lib.tensor(t), lib.tensor(n)) for x, t, n in zip(images, steps, noises)
        ]
        record, _ = run_program(
            UNET_SOURCE,
            STEP,
            lib,
            state,
            RECOMPUTE=True,
            batches=batches,
            abstractmethod=abc.abstractmethod,
        )
        records.append(record)
    # AdamW's first steps on the zero-initialised convolutions' near-zero gradients follow
    # float32 rounding: a tenth of a step (lr 1e-3) apart at most
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=1e-4)
