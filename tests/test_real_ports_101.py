# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the speedrun GPT of KellerJordan/modded-nanogpt as its January 2025 record writes it
  (``train_gpt.py``), smaller (6 layers, width 32, blocks of 16 tokens where it has 128, the
  end-of-text token the vocabulary's last): ``norm`` by ``F.rms_norm``, ``CastedLinear``'s
  ``F.linear(x, self.weight.type_as(x))``, the half-truncated ``Rotary`` with ``nn.Buffer``s,
  QK-norm, value embeddings mixed by ``lambdas`` in the ``012 ... 012`` pattern, ReLU², the
  U-net skip weights, the shifted tanh soft-cap ``30 * torch.sigmoid(logits / (7.5 *
  x.size(-1)**0.5))``, and ``create_blockmasks``' hand-made document-causal block masks
  (``dense_to_ordered``'s stable ``argsort(...).flip(-1)``, ``BlockMask.from_kv_blocks``
  with the long and short sliding windows' ``torch.clamp_max`` of the block counts) given to
  ``flex_attention(..., block_mask=..., scale=0.12)``; trained by its loop: Adam (``betas=(0.8,
  0.95), eps=1e-10, fused=True``) over the head, embeddings and scalars, ``torch.optim.Muon``
  over the hidden matrices with the momentum warm-up, ``initial_lr`` and the cooldown
  schedule. The attention's ``q``/``k``/``v`` are the three ``CastedLinear`` of the December
  2024 record (January's merged ``qkv_w`` is 3-d, which ``torch.optim.Muon`` refuses), and the
  record's ``torch.compile`` and CUDA placement are left out (torch's CPU would compile
  flex_attention with a C++ toolchain). retrograd's ``BlockMask`` had no ``from_kv_blocks``.

The lines changed: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import random
import warnings

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


MODDED_NANOGPT_SOURCE = """
from functools import lru_cache
import torch
from torch import Tensor, nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention
flex_attention = dense_flex_attention  # torch's CPU flex_attention has no backward

BLOCK_SIZE_TOKENS = 16
EOT = 63

def next_multiple_of_n(v: float | int, *, n: int):
    return next(x for x in range(n, int(v) + 1 + n, n) if x >= v)

def norm(x: Tensor):
    return F.rms_norm(x, (x.size(-1),))

class CastedLinear(nn.Linear):
    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features, bias=False)

    def reset_parameters(self) -> None:
        std = 0.5 * (self.in_features ** -0.5) # 0.5 is a bit better than the default 1/sqrt(3)
        bound = (3 ** 0.5) * std
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)

    def forward(self, x: Tensor):
        return F.linear(x, self.weight.type_as(x))

class Rotary(nn.Module):
    def __init__(self, dim: int, max_seq_len=65536):
        super().__init__()
        # half-truncate RoPE by @YouJiacheng (w/ base freq tuning)
        angular_freq = (1 / 1024) ** torch.linspace(0, 1, steps=dim//4, dtype=torch.float32)
        angular_freq = torch.cat([angular_freq, angular_freq.new_zeros(dim//4)])
        t = torch.arange(max_seq_len, dtype=torch.float32)
        theta = torch.einsum("i,j -> ij", t, angular_freq)
        self.cos = nn.Buffer(theta.cos(), persistent=False)
        self.sin = nn.Buffer(theta.sin(), persistent=False)

    def forward(self, x_BTHD: Tensor):
        assert self.cos.size(0) >= x_BTHD.size(-3)
        cos, sin = self.cos[None, :x_BTHD.size(-3), None, :], self.sin[None, :x_BTHD.size(-3), None, :]
        x1, x2 = x_BTHD.to(dtype=torch.float32).chunk(2, dim=-1)
        y1 = x1 * cos + x2 * sin
        y2 = x1 * (-sin) + x2 * cos
        return torch.cat((y1, y2), 3).type_as(x_BTHD)

class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, max_seq_len: int, head_dim=16):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        hdim = num_heads * head_dim
        self.c_q = CastedLinear(dim, hdim)
        self.c_k = CastedLinear(dim, hdim)
        self.c_v = CastedLinear(dim, hdim)
        self.lambdas = nn.Parameter(torch.tensor([0.5, 0.5]))
        self.rotary = Rotary(head_dim, max_seq_len)
        self.c_proj = CastedLinear(hdim, dim)
        self.c_proj.weight.detach().zero_() # zero init suggested by @Grad62304977

    def forward(self, x: Tensor, ve: Tensor | None, block_mask: BlockMask):
        B, T = x.size(0), x.size(1) # batch size, sequence length
        assert B == 1, "Must use batch size = 1 for FlexAttention"
        q = self.c_q(x).view(B, T, self.num_heads, self.head_dim)
        k = self.c_k(x).view(B, T, self.num_heads, self.head_dim)
        v = self.c_v(x).view(B, T, self.num_heads, self.head_dim)
        q, k = norm(q), norm(k) # QK norm @Grad62304977
        q, k = self.rotary(q), self.rotary(k)
        if ve is not None:
            v = self.lambdas[0] * v + self.lambdas[1] * ve.view_as(v) # @KoszarskyB & @Grad62304977
        else: # skip mid-layers token value embeddings by @YouJiacheng
            v = self.lambdas[0] * v
        # scale the attention logits by given constant, instead of the default head_dim**-0.5, by @leloykun
        y = flex_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block_mask, scale=0.12).transpose(1, 2)
        y = y.contiguous().view(B, T, self.num_heads * self.head_dim) # re-assemble all head outputs side by side
        y = self.c_proj(y)
        return y

class MLP(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        hdim = 4 * dim
        self.c_fc = CastedLinear(dim, hdim)
        self.c_proj = CastedLinear(hdim, dim)
        self.c_proj.weight.detach().zero_() # zero init suggested by @Grad62304977

    def forward(self, x: Tensor):
        x = self.c_fc(x)
        x = F.relu(x).square() # https://arxiv.org/abs/2109.08668v2; ~1-2% better than GELU; suggested by @SKYLINEZ007 and @Grad62304977
        x = self.c_proj(x)
        return x

class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, max_seq_len: int, layer_idx: int):
        super().__init__()
        # skip attention of blocks.7 (the 8th layer) by @YouJiacheng
        self.attn = CausalSelfAttention(dim, num_heads, max_seq_len) if layer_idx != 7 else None
        self.mlp = MLP(dim)
        self.lambdas = nn.Parameter(torch.tensor([1., 0.]))

    def forward(self, x: Tensor, ve: Tensor | None, x0: Tensor, block_mask: BlockMask):
        x = self.lambdas[0] * x + self.lambdas[1] * x0
        if self.attn is not None:
            x = x + self.attn(norm(x), ve, block_mask)
        x = x + self.mlp(norm(x))
        return x

class GPT(nn.Module):
    def __init__(self, vocab_size: int, num_layers: int, num_heads: int, model_dim: int, max_seq_len: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, model_dim)
        # token value embeddings by @KoszarskyB - inspired by @Grad62304977's value residual implementation following https://arxiv.org/abs/2410.17897
        self.value_embeds = nn.ModuleList([nn.Embedding(vocab_size, model_dim) for _ in range(3)])
        self.blocks = nn.ModuleList([Block(model_dim, num_heads, max_seq_len, i) for i in range(num_layers)])
        # there are only 50257 unique GPT-2 tokens; we extend to nearest multiple of 128 for efficiency.
        self.lm_head = CastedLinear(model_dim, next_multiple_of_n(vocab_size, n=128))
        self.lm_head.weight.detach().zero_() # @Grad62304977
        # Add learnable skip connection weights for decoder layers
        assert num_layers % 2 == 0
        self.skip_weights = nn.Parameter(torch.ones(num_layers//2))

    def create_blockmasks(self, input_seq: Tensor, sliding_window_num_blocks: Tensor):
        BLOCK_SIZE = BLOCK_SIZE_TOKENS
        docs = (input_seq == EOT).cumsum(0)

        def document_causal(b, h, q_idx, kv_idx):
            causal_mask = q_idx >= kv_idx
            document_mask = docs[q_idx] == docs[kv_idx]
            return causal_mask & document_mask

        def dense_to_ordered(dense_blockmask: Tensor):
            num_blocks = dense_blockmask.sum(dim=-1, dtype=torch.int32)
            indices = dense_blockmask.argsort(dim=-1, descending=False, stable=True).flip(-1).to(torch.int32)
            return num_blocks[None, None].contiguous(), indices[None, None].contiguous()

        # manual block mask creation by @YouJiacheng
        assert len(input_seq) % BLOCK_SIZE == 0
        NUM_BLOCKS = len(input_seq) // BLOCK_SIZE
        block_idx = torch.arange(NUM_BLOCKS, dtype=torch.int32)
        causal_blockmask_any = block_idx[:, None] >= block_idx
        causal_blockmask_all = block_idx[:, None] > block_idx
        docs_low = docs.view(-1, BLOCK_SIZE)[:, 0].contiguous()
        docs_high = docs.view(-1, BLOCK_SIZE)[:, -1].contiguous()
        document_blockmask_any = (docs_low[:, None] <= docs_high) & (docs_high[:, None] >= docs_low)
        document_blockmask_all = (docs_low[:, None] == docs_high) & (docs_high[:, None] == docs_low)
        blockmask_any = causal_blockmask_any & document_blockmask_any
        blockmask_all = causal_blockmask_all & document_blockmask_all
        partial_kv_num_blocks, partial_kv_indices = dense_to_ordered(blockmask_any & ~blockmask_all)
        full_kv_num_blocks, full_kv_indices = dense_to_ordered(blockmask_all)
        def build_bm(window_size_blocks: Tensor) -> BlockMask:
            return BlockMask.from_kv_blocks(
                torch.clamp_max(partial_kv_num_blocks, window_size_blocks - full_kv_num_blocks),
                partial_kv_indices,
                torch.clamp_max(full_kv_num_blocks, window_size_blocks - 1),
                full_kv_indices,
                BLOCK_SIZE=BLOCK_SIZE,
                mask_mod=document_causal,
            )
        # Long-short SWA block masks by @leloykun & @YouJiacheng, adapated from suggestion by @Grad62304977, following Gemma 2 paper
        return build_bm(sliding_window_num_blocks), build_bm(sliding_window_num_blocks // 2)

    def forward(self, input_seq: Tensor, target_seq: Tensor, sliding_window_num_blocks: Tensor):
        assert input_seq.ndim == 1

        ve = [value_embed(input_seq) for value_embed in self.value_embeds]
        # 012 ... 012 structure on token value embeddings by @YouJiacheng, improved on @leloykun's U-net structure
        ve = [ve[0], ve[1], ve[2]] + [None] * (len(self.blocks) - 6) + [ve[0], ve[1], ve[2]]
        assert len(ve) == len(self.blocks)

        long_bm, short_bm = self.create_blockmasks(input_seq, sliding_window_num_blocks)
        block_masks = [long_bm, short_bm, short_bm, short_bm, long_bm, short_bm]
        assert len(block_masks) == len(self.blocks)
        record.append([long_bm.kv_num_blocks.tolist(), long_bm.full_kv_num_blocks.tolist(), short_bm.to_dense().tolist(), short_bm.q_num_blocks.tolist()])

        x = x0 = norm(self.embed(input_seq)[None]) # use of norm here by @Grad62304977

        # U-net design by @brendanh0gan
        skip_connections = []
        n = len(self.skip_weights)
        for i in range(len(self.blocks)):
            if i >= n:
                x = x + self.skip_weights[i - n] * skip_connections.pop()
            x = self.blocks[i](x, ve[i], x0, block_masks[i])
            if i < n:
                skip_connections.append(x)

        x = norm(x)
        logits = self.lm_head(x).float()
        # @Grad62304977 added tanh softcapping following Gemma 2 paper, @KoszarskyB reduced it from 30 to 15, @YouJiacheng shifted it by +15 (2*sigmoid(2*x)=tanh(x)+1)
        logits = 30 * torch.sigmoid(logits / (7.5 * x.size(-1)**0.5))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), target_seq, reduction='sum' if self.training else 'mean')
        return loss

num_iterations = 2
cooldown_frac = 0.4
model = GPT(vocab_size=64, num_layers=6, num_heads=1, model_dim=16, max_seq_len=48)
initialize(model)

# collect the parameters to optimize
hidden_matrix_params = [p for n, p in model.blocks.named_parameters() if p.ndim >= 2 and "embed" not in n]
embed_params = [p for n, p in model.named_parameters() if "embed" in n]
scalar_params = [p for p in model.parameters() if p.ndim < 2]
head_params = [model.lm_head.weight]

# init the optimizer(s)
adam_params = [dict(params=head_params, lr=0.22), dict(params=embed_params, lr=0.6), dict(params=scalar_params, lr=0.04)]
optimizer1 = torch.optim.Adam(adam_params, betas=(0.8, 0.95), eps=1e-10, fused=True)
optimizer2 = torch.optim.Muon(hidden_matrix_params, lr=0.05, momentum=0.95, adjust_lr_fn="original")
optimizers = [optimizer1, optimizer2]
for opt in optimizers:
    for group in opt.param_groups:
        group["initial_lr"] = group["lr"]

# learning rate schedule: stable then decay
def get_lr(step: int):
    x = step / num_iterations # progress in training
    assert 0 <= x < 1
    if x < 1 - cooldown_frac:
        return 1.0
    else:
        w = (1 - x) / cooldown_frac
        return w * 1.0 + (1 - w) * 0.1

@lru_cache(1)
def get_window_size_blocks_helper(window_size: int):
    return torch.tensor(window_size // BLOCK_SIZE_TOKENS, dtype=torch.int32)
def get_window_size_blocks(step: int):
    x = step / num_iterations # progress in training
    assert 0 <= x <= 1
    # Linearly increase the block-wise sliding window size over training 128 -> 1792
    window_size = next_multiple_of_n(48 * x + 16, n=BLOCK_SIZE_TOKENS)
    return get_window_size_blocks_helper(window_size)

tokens = torch.randint(0, 64, (49,))
tokens[20] = EOT
tokens[41] = EOT
inputs, targets = tokens[:-1], tokens[1:]
for step in range(num_iterations):
    model.train()
    loss = model(inputs, targets, get_window_size_blocks(step))
    loss.backward()
    record.append(loss.item())
    record.append({n: p.grad.float().numpy().copy() for n, p in model.named_parameters()})
    # set optimization hyperparameters
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * get_lr(step)
    for group in optimizer2.param_groups:
        frac = min(step / 300, 1) # momentum warmup for muon
        group["momentum"] = (1 - frac) * 0.85 + frac * 0.95
    # step the optimizers
    for opt in optimizers:
        opt.step()
    # null the gradients
    model.zero_grad(set_to_none=True)
    record.append({n: p.detach().float().numpy().copy() for n, p in model.named_parameters()})
model.eval()
with torch.no_grad():
    record.append(model(inputs, targets, get_window_size_blocks(num_iterations)).item())
"""

MODDED_NANOGPT_STEPS = [
    ("flex_attention = dense_flex_attention  # torch's CPU flex_attention has no backward\n", ""),
    (
        "import torch\nfrom torch import Tensor, nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nfrom retrograd import Tensor, nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    record.append(loss.item())\n    record.append({n: p.grad.float()",
        "    grads = loss.backward()\n    record.append(loss.item())\n    record.append({n: p.grad(grads).float()",
    ),
    ("        opt.step()\n", "        opt.step(grads)\n"),
]


def dense_flex_attention(query, key, value, block_mask, scale):
    """torch's eager FlexAttention (the mask_mod asked for every score) as torch's SDPA over
    ``create_mask``: differentiable on the CPU, where torch's ``flex_attention`` refuses a
    backward."""
    from torch.nn.attention.flex_attention import create_mask

    length = query.shape[-2]
    mask = create_mask(block_mask.mask_mod, 1, 1, length, length, device="cpu")
    return torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, scale=scale
    )


def test_modded_nanogpt_speedrun_flex_block_masks_and_muon_as_torch(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "flex_attention called without compile"
        (theirs, ours), _ = runs_with_draws(
            MODDED_NANOGPT_SOURCE, MODDED_NANOGPT_STEPS, capsys, 10101,
            initialize=initializer(), params_of=params_of, dense_flex_attention=dense_flex_attention,
        )  # fmt: skip
    # the first step's block lists, loss and gradients, before any Muon update: tightly
    assert_records_agree(ours[:3], theirs[:3], rtol=1e-5, atol=1e-6)
    # after: torch's Muon orthogonalizes in bfloat16 (so does retrograd's torch backend; the
    # NumPy one, which has no bfloat16, in float32), which moves its updates by about 1e-2
    assert_records_agree(ours[3:], theirs[3:], rtol=2e-2, atol=3e-3)


def test_block_mask_from_kv_blocks_lists_and_attention_as_torchs():
    from torch.nn.attention.flex_attention import BlockMask as TheirBlockMask
    from torch.nn.attention.flex_attention import flex_attention as their_flex_attention

    from retrograd.nn.attention.flex_attention import BlockMask, flex_attention

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    counts = np.array([[[1, 1, 2]]], dtype=np.int32)
    indices = np.array([[[[0, 2, 1], [1, 0, 2], [2, 0, 1]]]], dtype=np.int32)
    full_counts = np.array([[[0, 1, -1]]], dtype=np.int32)  # a negative count keeps none
    full_indices = np.array([[[[1, 2, 0], [0, 1, 2], [0, 1, 2]]]], dtype=np.int32)
    masks = [
        lib_mask.from_kv_blocks(
            lib.tensor(counts), lib.tensor(indices), lib.tensor(full_counts),
            lib.tensor(full_indices), BLOCK_SIZE=4, mask_mod=causal,
        )
        for lib, lib_mask in ((torch, TheirBlockMask), (rg, BlockMask))
    ]  # fmt: skip
    theirs, ours = masks
    assert ours.shape == theirs.shape == (1, 1, 12, 12)
    assert ours.BLOCK_SIZE == theirs.BLOCK_SIZE
    for field in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        np.testing.assert_array_equal(getattr(ours, field).numpy(), getattr(theirs, field).numpy())
    np.testing.assert_array_equal(ours.to_dense().numpy(), theirs.to_dense().numpy())
    np.testing.assert_array_equal(ours.q_num_blocks.numpy(), theirs.q_num_blocks.numpy())
    default = BlockMask.from_kv_blocks(rg.tensor(counts), rg.tensor(indices))
    assert (
        default.shape
        == TheirBlockMask.from_kv_blocks(torch.tensor(counts), torch.tensor(indices)).shape
    )
    q, k, v = (
        np.random.default_rng(i).standard_normal((1, 2, 12, 4)).astype(np.float32) for i in range(3)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "flex_attention called without compile"
        expected = their_flex_attention(
            torch.tensor(q), torch.tensor(k), torch.tensor(v), block_mask=theirs, scale=0.3
        )
    got = flex_attention(rg.tensor(q), rg.tensor(k), rg.tensor(v), block_mask=ours, scale=0.3)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(rg.errors.ShapeError, match="from_kv_blocks"):
        BlockMask.from_kv_blocks(rg.tensor(counts[..., :2]), rg.tensor(indices))
