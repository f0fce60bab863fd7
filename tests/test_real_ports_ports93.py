# ruff: noqa: E501  (the embedded programs keep their sources' long lines)
"""Real ports, round 93 (the harness: ``tests/real_ports.py``): niche scientific and robotics
models, programs written here in the style of public single-file implementations, each trained
a few steps under torch and, ported, under retrograd from the same weights and draws, every
record compared.

- FourCastNet's adaptive Fourier neural operator, in the style of NVlabs/FourCastNet's
  ``afnonet.py``: a patch embedding by a strided ``Conv2d`` with ``flatten(2).transpose(1, 2)``,
  a learned position embedding under ``trunc_normal_``; the ``AFNO2D`` token mixer:
  ``x.float()``, ``torch.fft.rfft2(x, dim=(1, 2), norm="ortho")``, the block-diagonal complex
  two-layer MLP over the kept modes only (``hard_thresholding_fraction``), written into
  ``torch.zeros`` buffers by slice assignment of ``F.relu(torch.einsum('...bi,bio->...bo',
  x[...].real, w1[0]) - torch.einsum(..., x[...].imag, w1[1]) + b1[0])``, ``torch.stack([real,
  imag], dim=-1)``, ``F.softshrink(x, lambd=)``, ``torch.view_as_complex``,
  ``torch.fft.irfft2(x, s=(H, W), dim=(1, 2), norm="ortho")``, ``x.type(dtype)`` and the
  residual; ``double_skip`` blocks with ``nn.LayerNorm(eps=1e-6)``, a GELU MLP and
  ``DropPath`` (rate 0 here: ``nn.Identity``); the head unpatchified by ``reshape``/``permute``
  (einops' ``rearrange`` written out); FourCastNet's relative ``LpLoss`` (``torch.norm(...,
  self.p, 1)``); a two-step autoregressive rollout loss (``model(gen_step_one)``); AdamW under
  ``CosineAnnealingLR``; ``clip_grad_norm_``.
- Evoformer pieces in the style of aqlaboratory/openfold: its ``Linear`` subclass choosing
  AlphaFold's initialisers by name (``lecun_normal``, ``gating``, ``final``; the zero ones moved
  off zero in place so every weight learns), ``permute_final_dims``/``flatten_final_dims``,
  gated multi-head ``Attention`` (``view(q.shape[:-1] + (h, -1))``, ``q /= math.sqrt(c)``,
  ``a += b`` over a list of biases); MSA row attention with pair bias, the mask bias
  ``(inf * (mask - 1))[..., :, None, None, :]``; the outer product mean
  (``torch.einsum("...bac,...dae->...bdce")`` and its mask normaliser); triangle multiplicative
  updates outgoing and incoming by ``einsum("...ikc,...jkc->...ijc")`` and
  ``einsum("...kic,...kjc->...ijc")`` with sigmoid gates, classes made by
  ``partialmethod(__init__, _outgoing=False)``; triangle attention around the starting and the
  ending node (``transpose(-2, -3)`` of the pair and of its mask) with the triangle bias
  ``permute_final_dims(linear(x), (2, 0, 1)).unsqueeze(-4)``; transitions; relative positions by
  ``torch.argmin`` and ``one_hot``; a symmetrised distogram head and OpenFold's distogram loss
  (``torch.linspace`` boundaries squared, ``torch.sum(dists > boundaries, dim=-1)``,
  ``keepdims=True``, a masked mean); two Adam steps on padded chains.
- an ACT policy in the style of tonyzhaozh/act (``detr_vae.py``, ``policy.py``,
  ``imitate_episodes.py``) with DETR's transformer: the CVAE encoder over ``[CLS]``, the joint
  positions and the action chunk (``torch.full((bs, 2), False)`` catted to the padding mask,
  a NumPy sinusoid table as a buffer, ``pos_table.clone().detach()``), ``reparametrize`` by
  ``Variable(std.data.new(std.size()).normal_())``, the latent and proprioception tokens before
  the image tokens of two cameras folded into the width, DETR's ``PositionEmbeddingSine``
  (``cumsum(..., dtype=)``, ``torch.div(..., rounding_mode="floor")``), post-norm
  encoder/decoder layers on ``nn.MultiheadAttention`` (sequence first, ``key_padding_mask``),
  ``return_intermediate``; the loss ``F.l1_loss(reduction="none")`` masked by ``~is_pad`` plus
  the KL of ``kl_divergence`` (``mu.data.ndimension()``, ``mean(0, True)``) weighted 10; AdamW
  over a backbone group and the rest; action chunks padded past the episode's end; then the
  evaluation's temporal ensembling under ``torch.inference_mode()``:
  ``all_time_actions[[t], t:t + num_queries] = all_actions``, ``torch.all(... != 0, axis=1)``,
  float32 actions times NumPy's float64 weights (``torch.from_numpy(...).unsqueeze(dim=1)``).

``torch.rand``/``randn`` and ``Tensor.normal_`` draw from one seeded stream in both runs (NumPy's
global stream seeded alike). The ports change the imports and the gradient lines only.

Found while checking the transforms these ports reach (the ports agreed with torch before), and
fixed (``tests/test_ports93_fixes.py``): the real forward transforms
(``rfft``, ``rfft2``, ``rfftn``, ``ihfft``) were the complex transform of the input, cut, whose
rounding left imaginary parts of about 1e-16 at the bins torch's real-input kernels make exactly
real, so ``angle`` jumped by 2 pi there (``fft``/``ifft`` of a real input too).
"""

from __future__ import annotations

import torch

import retrograd as rg
from real_ports import (
    SharedFills,
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

#: the import lines every program here ports the same way
IMPORT_LINES = (
    "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
    "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
)


AFNO_SOURCE = """
import math
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.fft
from torch.nn.init import trunc_normal_


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.0):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop = nn.Dropout(drop) if drop > 0.0 else nn.Identity()

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


class AFNO2D(nn.Module):
    def __init__(self, hidden_size, num_blocks=8, sparsity_threshold=0.01, hard_thresholding_fraction=1, hidden_size_factor=1):
        super().__init__()
        assert hidden_size % num_blocks == 0, f"hidden_size {hidden_size} should be divisble by num_blocks {num_blocks}"

        self.hidden_size = hidden_size
        self.sparsity_threshold = sparsity_threshold
        self.num_blocks = num_blocks
        self.block_size = self.hidden_size // self.num_blocks
        self.hard_thresholding_fraction = hard_thresholding_fraction
        self.hidden_size_factor = hidden_size_factor
        self.scale = 0.02

        self.w1 = nn.Parameter(self.scale * torch.randn(2, self.num_blocks, self.block_size, self.block_size * self.hidden_size_factor))
        self.b1 = nn.Parameter(self.scale * torch.randn(2, self.num_blocks, self.block_size * self.hidden_size_factor))
        self.w2 = nn.Parameter(self.scale * torch.randn(2, self.num_blocks, self.block_size * self.hidden_size_factor, self.block_size))
        self.b2 = nn.Parameter(self.scale * torch.randn(2, self.num_blocks, self.block_size))

    def forward(self, x):
        bias = x

        dtype = x.dtype
        x = x.float()
        B, H, W, C = x.shape

        x = torch.fft.rfft2(x, dim=(1, 2), norm="ortho")
        x = x.reshape(B, H, W // 2 + 1, self.num_blocks, self.block_size)

        o1_real = torch.zeros([B, H, W // 2 + 1, self.num_blocks, self.block_size * self.hidden_size_factor], device=x.device)
        o1_imag = torch.zeros([B, H, W // 2 + 1, self.num_blocks, self.block_size * self.hidden_size_factor], device=x.device)
        o2_real = torch.zeros(x.shape, device=x.device)
        o2_imag = torch.zeros(x.shape, device=x.device)

        total_modes = H // 2 + 1
        kept_modes = int(total_modes * self.hard_thresholding_fraction)

        o1_real[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes] = F.relu(
            torch.einsum('...bi,bio->...bo', x[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes].real, self.w1[0]) - \\
            torch.einsum('...bi,bio->...bo', x[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes].imag, self.w1[1]) + \\
            self.b1[0]
        )

        o1_imag[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes] = F.relu(
            torch.einsum('...bi,bio->...bo', x[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes].imag, self.w1[0]) + \\
            torch.einsum('...bi,bio->...bo', x[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes].real, self.w1[1]) + \\
            self.b1[1]
        )

        o2_real[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes] = (
            torch.einsum('...bi,bio->...bo', o1_real[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes], self.w2[0]) - \\
            torch.einsum('...bi,bio->...bo', o1_imag[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes], self.w2[1]) + \\
            self.b2[0]
        )

        o2_imag[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes] = (
            torch.einsum('...bi,bio->...bo', o1_imag[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes], self.w2[0]) + \\
            torch.einsum('...bi,bio->...bo', o1_real[:, total_modes-kept_modes:total_modes+kept_modes, :kept_modes], self.w2[1]) + \\
            self.b2[1]
        )

        x = torch.stack([o2_real, o2_imag], dim=-1)
        x = F.softshrink(x, lambd=self.sparsity_threshold)
        x = torch.view_as_complex(x)
        x = x.reshape(B, H, W // 2 + 1, C)
        x = torch.fft.irfft2(x, s=(H, W), dim=(1, 2), norm="ortho")
        x = x.type(dtype)

        return x + bias


class Block(nn.Module):
    def __init__(self, dim, mlp_ratio=4.0, drop=0.0, drop_path=0.0, act_layer=nn.GELU,
                 norm_layer=nn.LayerNorm, double_skip=True, num_blocks=8, sparsity_threshold=0.01,
                 hard_thresholding_fraction=1.0):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.filter = AFNO2D(dim, num_blocks, sparsity_threshold, hard_thresholding_fraction)
        self.drop_path = nn.Identity()  # drop_path > 0 draws; the runs keep it off
        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=drop)
        self.double_skip = double_skip

    def forward(self, x):
        residual = x
        x = self.norm1(x)
        x = self.filter(x)

        if self.double_skip:
            x = x + residual
            residual = x

        x = self.norm2(x)
        x = self.mlp(x)
        x = self.drop_path(x)
        x = x + residual
        return x


class PatchEmbed(nn.Module):
    def __init__(self, img_size=(16, 16), patch_size=(4, 4), in_chans=3, embed_dim=16):
        super().__init__()
        num_patches = (img_size[1] // patch_size[1]) * (img_size[0] // patch_size[0])
        self.img_size = img_size
        self.patch_size = patch_size
        self.num_patches = num_patches
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        B, C, H, W = x.shape
        assert H == self.img_size[0] and W == self.img_size[1], f"Input image size ({H}*{W}) doesn't match model ({self.img_size[0]}*{self.img_size[1]})."
        x = self.proj(x).flatten(2).transpose(1, 2)
        return x


class AFNONet(nn.Module):
    def __init__(self, img_size=(16, 16), patch_size=(4, 4), in_chans=2, out_chans=2, embed_dim=16,
                 depth=2, mlp_ratio=2.0, drop_rate=0.0, drop_path_rate=0.0, num_blocks=4,
                 sparsity_threshold=0.01, hard_thresholding_fraction=1.0):
        super().__init__()
        self.img_size = img_size
        self.patch_size = patch_size
        self.in_chans = in_chans
        self.out_chans = out_chans
        self.num_features = self.embed_dim = embed_dim
        self.num_blocks = num_blocks
        norm_layer = partial(nn.LayerNorm, eps=1e-6)

        self.patch_embed = PatchEmbed(img_size=img_size, patch_size=self.patch_size, in_chans=self.in_chans, embed_dim=embed_dim)
        num_patches = self.patch_embed.num_patches

        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, embed_dim))
        self.pos_drop = nn.Dropout(p=drop_rate)

        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]

        self.h = img_size[0] // self.patch_size[0]
        self.w = img_size[1] // self.patch_size[1]

        self.blocks = nn.ModuleList([
            Block(dim=embed_dim, mlp_ratio=mlp_ratio, drop=drop_rate, drop_path=dpr[i], norm_layer=norm_layer,
                  num_blocks=self.num_blocks, sparsity_threshold=sparsity_threshold,
                  hard_thresholding_fraction=hard_thresholding_fraction)
            for i in range(depth)])

        self.norm = norm_layer(embed_dim)

        self.head = nn.Linear(embed_dim, self.out_chans * self.patch_size[0] * self.patch_size[1], bias=False)

        trunc_normal_(self.pos_embed, std=.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    @torch.jit.ignore
    def no_weight_decay(self):
        return {'pos_embed', 'cls_token'}

    def forward_features(self, x):
        B = x.shape[0]
        x = self.patch_embed(x)
        x = x + self.pos_embed
        x = self.pos_drop(x)

        x = x.reshape(B, self.h, self.w, self.embed_dim)
        for blk in self.blocks:
            x = blk(x)

        return x

    def forward(self, x):
        x = self.forward_features(x)
        x = self.head(x)
        # rearrange(x, "b h w (p1 p2 c_out) -> b c_out (h p1) (w p2)")
        B, h, w, _ = x.shape
        p1, p2 = self.patch_size
        x = x.reshape(B, h, w, p1, p2, self.out_chans)
        x = x.permute(0, 5, 1, 3, 2, 4)
        x = x.reshape(B, self.out_chans, h * p1, w * p2)
        return x


class LpLoss(object):
    def __init__(self, d=2, p=2, size_average=True, reduction=True):
        super(LpLoss, self).__init__()
        assert d > 0 and p > 0
        self.d = d
        self.p = p
        self.reduction = reduction
        self.size_average = size_average

    def rel(self, x, y):
        num_examples = x.size()[0]
        diff_norms = torch.norm(x.reshape(num_examples, -1) - y.reshape(num_examples, -1), self.p, 1)
        y_norms = torch.norm(y.reshape(num_examples, -1), self.p, 1)
        if self.reduction:
            if self.size_average:
                return torch.mean(diff_norms / y_norms)
            else:
                return torch.sum(diff_norms / y_norms)
        return diff_norms / y_norms

    def __call__(self, x, y):
        return self.rel(x, y)


model = AFNONet(hard_thresholding_fraction=0.67)
initialize(model)
record.append(sorted(model.no_weight_decay()))
loss_obj = LpLoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)
# a field evolving in time: two channels on a 16 x 16 grid, three frames
frames = torch.randn(2, 3, 2, 16, 16)
for step in range(3):
    model.train()
    inp, tar = frames[:, 0], frames[:, 1:].reshape(2, 4, 16, 16)
    n_out = 2
    gen_step_one = model(inp).to(torch.float)
    loss_step_one = loss_obj(gen_step_one, tar[:, 0:n_out])
    gen_step_two = model(gen_step_one).to(torch.float)
    loss_step_two = loss_obj(gen_step_two, tar[:, n_out:2 * n_out])
    loss = loss_step_one + loss_step_two
    optimizer.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    record.extend([loss_step_one.item(), loss_step_two.item(), norm.item(), params_of(model)])
model.eval()
with torch.no_grad():
    spectrum = torch.fft.rfft2(model.blocks[0].norm1(model.forward_features(frames[:, 0])), dim=(1, 2), norm="ortho")
    record.extend([model(frames[:, 0]).numpy(), torch.view_as_real(spectrum).numpy()])
"""

AFNO_STEPS = [
    IMPORT_LINES,
    ("import torch.fft\n", "import retrograd.fft\n"),
    (
        "    loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    optimizer.step()\n",
        "    grads = loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)\n    optimizer.step(grads)\n",
    ),
]


def test_fourcastnet_afno_two_step_rollout_trains_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        AFNO_SOURCE, AFNO_STEPS, capsys, 9301, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert theirs[0] == ["cls_token", "pos_embed"]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


EVOFORMER_SOURCE = """
import math
from functools import partial, partialmethod
from typing import List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def permute_final_dims(tensor: torch.Tensor, inds: List[int]):
    zero_index = -1 * len(inds)
    first_inds = list(range(len(tensor.shape[:zero_index])))
    return tensor.permute(first_inds + [zero_index + i for i in inds])


def flatten_final_dims(t: torch.Tensor, no_dims: int):
    return t.reshape(t.shape[:-no_dims] + (-1,))


def _calculate_fan(linear_weight_shape, fan="fan_in"):
    fan_out, fan_in = linear_weight_shape
    if fan == "fan_in":
        f = fan_in
    elif fan == "fan_out":
        f = fan_out
    elif fan == "fan_avg":
        f = (fan_in + fan_out) / 2
    else:
        raise ValueError("Invalid fan option")
    return f


def lecun_normal_init_(weights):
    scale = 1.0 / max(1, _calculate_fan(weights.shape, "fan_in"))
    std = math.sqrt(scale)
    with torch.no_grad():
        weights.normal_(0, std)


class Linear(nn.Linear):
    # OpenFold's Linear: AlphaFold's initialisers by name (the final and gating ones are zeros and
    # would hide every gradient but the biases; the runs overwrite them with torch's draws)
    def __init__(self, in_dim: int, out_dim: int, bias: bool = True, init: str = "default"):
        super(Linear, self).__init__(in_dim, out_dim, bias=bias)
        if bias:
            with torch.no_grad():
                self.bias.fill_(0)
        with torch.no_grad():
            if init == "default":
                lecun_normal_init_(self.weight)
            elif init == "relu":
                nn.init.kaiming_normal_(self.weight, nonlinearity="relu")
            elif init == "glorot":
                nn.init.xavier_uniform_(self.weight, gain=1)
            elif init == "gating":
                self.weight.fill_(0.0)
                if bias:
                    self.bias.fill_(1.0)
            elif init == "final":
                self.weight.fill_(0.0)
            else:
                raise ValueError("Invalid init string.")


def jitter(module):
    # the zero inits moved off zero, in place, so every weight learns
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape))


class Attention(nn.Module):
    def __init__(self, c_q: int, c_k: int, c_v: int, c_hidden: int, no_heads: int, gating: bool = True):
        super(Attention, self).__init__()
        self.c_q = c_q
        self.c_k = c_k
        self.c_v = c_v
        self.c_hidden = c_hidden
        self.no_heads = no_heads
        self.gating = gating
        self.linear_q = Linear(self.c_q, self.c_hidden * self.no_heads, bias=False, init="glorot")
        self.linear_k = Linear(self.c_k, self.c_hidden * self.no_heads, bias=False, init="glorot")
        self.linear_v = Linear(self.c_v, self.c_hidden * self.no_heads, bias=False, init="glorot")
        self.linear_o = Linear(self.c_hidden * self.no_heads, self.c_q, init="final")
        self.linear_g = None
        if self.gating:
            self.linear_g = Linear(self.c_q, self.c_hidden * self.no_heads, init="gating")
        self.sigmoid = nn.Sigmoid()

    def _prep_qkv(self, q_x: torch.Tensor, kv_x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q = self.linear_q(q_x)
        k = self.linear_k(kv_x)
        v = self.linear_v(kv_x)
        # [*, Q/K/V, H, C_hidden]
        q = q.view(q.shape[:-1] + (self.no_heads, -1))
        k = k.view(k.shape[:-1] + (self.no_heads, -1))
        v = v.view(v.shape[:-1] + (self.no_heads, -1))
        # [*, H, Q/K, C_hidden]
        q = q.transpose(-2, -3)
        k = k.transpose(-2, -3)
        v = v.transpose(-2, -3)
        q /= math.sqrt(self.c_hidden)
        return q, k, v

    def _wrap_up(self, o: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
        if self.linear_g is not None:
            g = self.sigmoid(self.linear_g(q_x))
            # [*, Q, H, C_hidden]
            g = g.view(g.shape[:-1] + (self.no_heads, -1))
            o = o * g
        # [*, Q, H * C_hidden]
        o = flatten_final_dims(o, 2)
        return self.linear_o(o)

    def forward(self, q_x: torch.Tensor, kv_x: torch.Tensor, biases: Optional[List[torch.Tensor]] = None) -> torch.Tensor:
        if biases is None:
            biases = []
        q, k, v = self._prep_qkv(q_x, kv_x)
        # [*, H, Q, K]
        a = torch.matmul(q, permute_final_dims(k, (1, 0)))
        for b in biases:
            a += b
        a = torch.nn.functional.softmax(a, dim=-1)
        # [*, H, Q, C_hidden] -> [*, Q, H, C_hidden]
        o = torch.matmul(a, v).transpose(-2, -3)
        return self._wrap_up(o, q_x)


class MSARowAttentionWithPairBias(nn.Module):
    def __init__(self, c_m, c_z, c_hidden, no_heads, inf=1e9):
        super().__init__()
        self.c_hidden = c_hidden
        self.no_heads = no_heads
        self.inf = inf
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.layer_norm_z = nn.LayerNorm(c_z)
        self.linear_z = Linear(c_z, self.no_heads, bias=False, init="default")
        self.mha = Attention(c_m, c_m, c_m, c_hidden, no_heads)

    def forward(self, m, z, mask=None):
        n_seq, n_res = m.shape[-3:-1]
        if mask is None:
            mask = m.new_ones(m.shape[:-3] + (n_seq, n_res))
        # [*, N_seq, 1, 1, N_res]
        mask_bias = (self.inf * (mask - 1))[..., :, None, None, :]
        z = self.layer_norm_z(z)
        # [*, 1, no_heads, N_res, N_res]
        z = permute_final_dims(self.linear_z(z), (2, 0, 1)).unsqueeze(-4)
        m = self.layer_norm_m(m)
        return self.mha(q_x=m, kv_x=m, biases=[mask_bias, z])


class MSATransition(nn.Module):
    def __init__(self, c_m, n):
        super().__init__()
        self.layer_norm = nn.LayerNorm(c_m)
        self.linear_1 = Linear(c_m, n * c_m, init="relu")
        self.relu = nn.ReLU()
        self.linear_2 = Linear(n * c_m, c_m, init="final")

    def forward(self, m, mask=None):
        if mask is None:
            mask = m.new_ones(m.shape[:-1])
        mask = mask.unsqueeze(-1)
        m = self.layer_norm(m)
        return self.linear_2(self.relu(self.linear_1(m))) * mask


class OuterProductMean(nn.Module):
    def __init__(self, c_m, c_z, c_hidden, eps=1e-3):
        super(OuterProductMean, self).__init__()
        self.c_hidden = c_hidden
        self.eps = eps
        self.layer_norm = nn.LayerNorm(c_m)
        self.linear_1 = Linear(c_m, c_hidden)
        self.linear_2 = Linear(c_m, c_hidden)
        self.linear_out = Linear(c_hidden ** 2, c_z, init="final")

    def _opm(self, a, b):
        # [*, N_res, N_res, C, C]
        outer = torch.einsum("...bac,...dae->...bdce", a, b)
        # [*, N_res, N_res, C * C]
        outer = outer.reshape(outer.shape[:-2] + (-1,))
        return self.linear_out(outer)

    def forward(self, m, mask=None):
        if mask is None:
            mask = m.new_ones(m.shape[:-1])
        ln = self.layer_norm(m)
        mask = mask.unsqueeze(-1)
        a = self.linear_1(ln) * mask
        b = self.linear_2(ln) * mask
        a = a.transpose(-2, -3)
        b = b.transpose(-2, -3)
        outer = self._opm(a, b)
        # [*, N_res, N_res, 1]
        norm = torch.einsum("...abc,...adc->...bdc", mask, mask)
        return outer / (self.eps + norm)


class TriangleMultiplicativeUpdate(nn.Module):
    def __init__(self, c_z, c_hidden, _outgoing=True):
        super(TriangleMultiplicativeUpdate, self).__init__()
        self.c_z = c_z
        self.c_hidden = c_hidden
        self._outgoing = _outgoing
        self.linear_a_p = Linear(self.c_z, self.c_hidden)
        self.linear_a_g = Linear(self.c_z, self.c_hidden, init="gating")
        self.linear_b_p = Linear(self.c_z, self.c_hidden)
        self.linear_b_g = Linear(self.c_z, self.c_hidden, init="gating")
        self.linear_g = Linear(self.c_z, self.c_z, init="gating")
        self.linear_z = Linear(self.c_hidden, self.c_z, init="final")
        self.layer_norm_in = nn.LayerNorm(self.c_z)
        self.layer_norm_out = nn.LayerNorm(self.c_hidden)
        self.sigmoid = nn.Sigmoid()

    def _combine_projections(self, a, b):
        # AlphaFold's algorithms 11 and 12: sum over the third edge k of the triangle
        if self._outgoing:
            return torch.einsum("...ikc,...jkc->...ijc", a, b)
        return torch.einsum("...kic,...kjc->...ijc", a, b)

    def forward(self, z, mask=None):
        if mask is None:
            mask = z.new_ones(z.shape[:-1])
        mask = mask.unsqueeze(-1)
        z = self.layer_norm_in(z)
        a = mask
        a = a * self.sigmoid(self.linear_a_g(z))
        a = a * self.linear_a_p(z)
        b = mask
        b = b * self.sigmoid(self.linear_b_g(z))
        b = b * self.linear_b_p(z)
        x = self._combine_projections(a, b)
        del a, b
        x = self.layer_norm_out(x)
        x = self.linear_z(x)
        g = self.sigmoid(self.linear_g(z))
        return x * g


class TriangleMultiplicationOutgoing(TriangleMultiplicativeUpdate):
    __init__ = partialmethod(TriangleMultiplicativeUpdate.__init__, _outgoing=True)


class TriangleMultiplicationIncoming(TriangleMultiplicativeUpdate):
    __init__ = partialmethod(TriangleMultiplicativeUpdate.__init__, _outgoing=False)


class TriangleAttention(nn.Module):
    def __init__(self, c_in, c_hidden, no_heads, starting=True, inf=1e9):
        super(TriangleAttention, self).__init__()
        self.c_in = c_in
        self.c_hidden = c_hidden
        self.no_heads = no_heads
        self.starting = starting
        self.inf = inf
        self.layer_norm = nn.LayerNorm(self.c_in)
        self.linear = Linear(c_in, self.no_heads, bias=False, init="default")
        self.mha = Attention(self.c_in, self.c_in, self.c_in, self.c_hidden, self.no_heads)

    def forward(self, x, mask=None):
        if mask is None:
            # [*, I, J]
            mask = x.new_ones(x.shape[:-1])
        if not self.starting:
            x = x.transpose(-2, -3)
            mask = mask.transpose(-1, -2)
        # [*, I, J, C_in]
        x = self.layer_norm(x)
        # [*, I, 1, 1, J]
        mask_bias = (self.inf * (mask - 1))[..., :, None, None, :]
        # [*, H, I, J]
        triangle_bias = permute_final_dims(self.linear(x), (2, 0, 1))
        # [*, 1, H, I, J]
        triangle_bias = triangle_bias.unsqueeze(-4)
        x = self.mha(q_x=x, kv_x=x, biases=[mask_bias, triangle_bias])
        if not self.starting:
            x = x.transpose(-2, -3)
        return x


TriangleAttentionStartingNode = TriangleAttention


class TriangleAttentionEndingNode(TriangleAttention):
    __init__ = partialmethod(TriangleAttention.__init__, starting=False)


class PairTransition(nn.Module):
    def __init__(self, c_z, n):
        super().__init__()
        self.layer_norm = nn.LayerNorm(c_z)
        self.linear_1 = Linear(c_z, n * c_z, init="relu")
        self.relu = nn.ReLU()
        self.linear_2 = Linear(n * c_z, c_z, init="final")

    def forward(self, z, mask=None):
        if mask is None:
            mask = z.new_ones(z.shape[:-1])
        mask = mask.unsqueeze(-1)
        z = self.layer_norm(z)
        return self.linear_2(self.relu(self.linear_1(z))) * mask


class EvoformerBlock(nn.Module):
    # dropout off (rate 0): AlphaFold's shared row-wise dropout masks would draw
    def __init__(self, c_m, c_z, c_hidden_msa_att=4, c_hidden_opm=4, c_hidden_mul=8,
                 c_hidden_pair_att=4, no_heads_msa=2, no_heads_pair=2, transition_n=2, inf=1e9):
        super().__init__()
        self.msa_att_row = MSARowAttentionWithPairBias(c_m, c_z, c_hidden_msa_att, no_heads_msa, inf=inf)
        self.msa_transition = MSATransition(c_m, transition_n)
        self.outer_product_mean = OuterProductMean(c_m, c_z, c_hidden_opm)
        self.tri_mul_out = TriangleMultiplicationOutgoing(c_z, c_hidden_mul)
        self.tri_mul_in = TriangleMultiplicationIncoming(c_z, c_hidden_mul)
        self.tri_att_start = TriangleAttentionStartingNode(c_z, c_hidden_pair_att, no_heads_pair, inf=inf)
        self.tri_att_end = TriangleAttentionEndingNode(c_z, c_hidden_pair_att, no_heads_pair, inf=inf)
        self.pair_transition = PairTransition(c_z, transition_n)

    def forward(self, m, z, msa_mask, pair_mask):
        m = m + self.msa_att_row(m, z=z, mask=msa_mask)
        m = m + self.msa_transition(m, mask=msa_mask)
        z = z + self.outer_product_mean(m, mask=msa_mask)
        z = z + self.tri_mul_out(z, mask=pair_mask)
        z = z + self.tri_mul_in(z, mask=pair_mask)
        z = z + self.tri_att_start(z, mask=pair_mask)
        z = z + self.tri_att_end(z, mask=pair_mask)
        z = z + self.pair_transition(z, mask=pair_mask)
        return m, z


class DistogramHead(nn.Module):
    def __init__(self, c_z, no_bins):
        super(DistogramHead, self).__init__()
        self.linear = Linear(c_z, no_bins, init="final")

    def forward(self, z):
        # [*, N, N, no_bins]
        logits = self.linear(z)
        logits = logits + logits.transpose(-2, -3)
        return logits


def softmax_cross_entropy(logits, labels):
    loss = -1 * torch.sum(labels * torch.nn.functional.log_softmax(logits, dim=-1), dim=-1)
    return loss


def distogram_loss(logits, pseudo_beta, pseudo_beta_mask, min_bin=2.3125, max_bin=21.6875, no_bins=64, eps=1e-6):
    boundaries = torch.linspace(min_bin, max_bin, no_bins - 1, device=logits.device)
    boundaries = boundaries ** 2
    dists = torch.sum((pseudo_beta[..., None, :] - pseudo_beta[..., None, :, :]) ** 2, dim=-1, keepdims=True)
    true_bins = torch.sum(dists > boundaries, dim=-1)
    errors = softmax_cross_entropy(logits, torch.nn.functional.one_hot(true_bins, no_bins))
    square_mask = pseudo_beta_mask[..., None] * pseudo_beta_mask[..., None, :]
    # FP16-friendly sum: the denominator first
    denom = eps + torch.sum(square_mask, dim=(-1, -2))
    mean = errors * square_mask
    mean = torch.sum(mean, dim=-1)
    mean = mean / denom[..., None]
    mean = torch.sum(mean, dim=-1)
    return torch.mean(mean)


class TinyEvoformer(nn.Module):
    def __init__(self, n_aa=21, c_m=8, c_z=8, no_blocks=2, no_bins=16, relpos_k=4):
        super().__init__()
        self.relpos_k = relpos_k
        self.linear_tf_z_i = Linear(n_aa, c_z)
        self.linear_tf_z_j = Linear(n_aa, c_z)
        self.linear_tf_m = Linear(n_aa, c_m)
        self.linear_msa_m = Linear(n_aa, c_m)
        self.linear_relpos = Linear(2 * relpos_k + 1, c_z)
        self.blocks = nn.ModuleList([EvoformerBlock(c_m, c_z) for _ in range(no_blocks)])
        self.distogram = DistogramHead(c_z, no_bins)

    def relpos(self, ri):
        d = ri[..., None] - ri[..., None, :]
        boundaries = torch.arange(start=-self.relpos_k, end=self.relpos_k + 1, device=d.device)
        reshaped_bins = boundaries.view(((1,) * len(d.shape)) + (len(boundaries),))
        d = d[..., None] - reshaped_bins
        d = torch.abs(d)
        d = torch.argmin(d, dim=-1)
        d = nn.functional.one_hot(d, num_classes=len(boundaries)).float()
        d = d.to(ri.dtype) if ri.is_floating_point() else d
        return self.linear_relpos(d)

    def forward(self, tf, ri, msa, msa_mask, pair_mask):
        tf_emb_i = self.linear_tf_z_i(tf)
        tf_emb_j = self.linear_tf_z_j(tf)
        pair_emb = tf_emb_i[..., None, :] + tf_emb_j[..., None, :, :]
        pair_emb = pair_emb + self.relpos(ri.type(tf_emb_i.dtype))
        n_clust = msa.shape[-3]
        tf_m = self.linear_tf_m(tf).unsqueeze(-3).expand(((-1,) * len(tf.shape[:-2]) + (n_clust, -1, -1)))
        msa_emb = self.linear_msa_m(msa) + tf_m
        m, z = msa_emb, pair_emb
        for block in self.blocks:
            m, z = block(m, z, msa_mask, pair_mask)
        return m, z, self.distogram(z)


n_res, n_seq, batch = 6, 3, 2
model = TinyEvoformer()
jitter(model)
initialize(model)
aatype = torch.randint(0, 20, (batch, n_res))
tf = F.one_hot(aatype, 21).float()
residue_index = torch.arange(n_res).expand(batch, n_res)
msa = F.one_hot(torch.randint(0, 21, (batch, n_seq, n_res)), 21).float()
seq_mask = torch.ones(batch, n_res)
seq_mask[1, -2:] = 0  # the second chain is padded by two residues
msa_mask = seq_mask[:, None, :].expand(batch, n_seq, n_res).clone()
msa_mask[0, 2, 1] = 0
pair_mask = seq_mask[..., None] * seq_mask[..., None, :]
pseudo_beta = 3.8 * torch.cumsum(torch.randn(batch, n_res, 3), dim=1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-6)
for step in range(2):
    m, z, logits = model(tf, residue_index, msa, msa_mask, pair_mask)
    loss = distogram_loss(logits, pseudo_beta, seq_mask, min_bin=2.0, max_bin=22.0, no_bins=16)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    optimizer.step()
    record.extend([loss.item(), m.detach().numpy(), z.detach().numpy(), params_of(model)])
"""

EVOFORMER_STEPS = [
    IMPORT_LINES,
    (
        "    loss.backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)\n    optimizer.step()\n",
        "    grads = loss.backward()\n    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 0.1)\n    optimizer.step(grads)\n",
    ),
]


def test_evoformer_triangle_updates_and_distogram_train_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        EVOFORMER_SOURCE, EVOFORMER_STEPS, capsys, 9302, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


ACT_SOURCE = """
import copy
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import Variable


def reparametrize(mu, logvar):
    std = logvar.div(2).exp()
    eps = Variable(std.data.new(std.size()).normal_())
    return mu + std * eps


def get_sinusoid_encoding_table(n_position, d_hid):
    def get_position_angle_vec(position):
        return [position / np.power(10000, 2 * (hid_j // 2) / d_hid) for hid_j in range(d_hid)]

    sinusoid_table = np.array([get_position_angle_vec(pos_i) for pos_i in range(n_position)])
    sinusoid_table[:, 0::2] = np.sin(sinusoid_table[:, 0::2])  # dim 2i
    sinusoid_table[:, 1::2] = np.cos(sinusoid_table[:, 1::2])  # dim 2i+1

    return torch.FloatTensor(sinusoid_table).unsqueeze(0)


def _get_clones(module, N):
    return nn.ModuleList([copy.deepcopy(module) for i in range(N)])


def _get_activation_fn(activation):
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if activation == "glu":
        return F.glu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}.")


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", normalize_before=False):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = _get_activation_fn(activation)
        self.normalize_before = normalize_before

    def with_pos_embed(self, tensor, pos: Optional[Tensor]):
        return tensor if pos is None else tensor + pos

    def forward_post(self, src, src_mask: Optional[Tensor] = None, src_key_padding_mask: Optional[Tensor] = None, pos: Optional[Tensor] = None):
        q = k = self.with_pos_embed(src, pos)
        src2 = self.self_attn(q, k, value=src, attn_mask=src_mask, key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)
        src = self.norm1(src)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
        src = src + self.dropout2(src2)
        src = self.norm2(src)
        return src

    def forward_pre(self, src, src_mask: Optional[Tensor] = None, src_key_padding_mask: Optional[Tensor] = None, pos: Optional[Tensor] = None):
        src2 = self.norm1(src)
        q = k = self.with_pos_embed(src2, pos)
        src2 = self.self_attn(q, k, value=src2, attn_mask=src_mask, key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)
        src2 = self.norm2(src)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src2))))
        src = src + self.dropout2(src2)
        return src

    def forward(self, src, src_mask: Optional[Tensor] = None, src_key_padding_mask: Optional[Tensor] = None, pos: Optional[Tensor] = None):
        if self.normalize_before:
            return self.forward_pre(src, src_mask, src_key_padding_mask, pos)
        return self.forward_post(src, src_mask, src_key_padding_mask, pos)


class TransformerEncoder(nn.Module):
    def __init__(self, encoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask: Optional[Tensor] = None, src_key_padding_mask: Optional[Tensor] = None, pos: Optional[Tensor] = None):
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=mask, src_key_padding_mask=src_key_padding_mask, pos=pos)
        if self.norm is not None:
            output = self.norm(output)
        return output


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", normalize_before=False):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.activation = _get_activation_fn(activation)
        self.normalize_before = normalize_before

    def with_pos_embed(self, tensor, pos: Optional[Tensor]):
        return tensor if pos is None else tensor + pos

    def forward(self, tgt, memory, tgt_mask: Optional[Tensor] = None, memory_mask: Optional[Tensor] = None,
                tgt_key_padding_mask: Optional[Tensor] = None, memory_key_padding_mask: Optional[Tensor] = None,
                pos: Optional[Tensor] = None, query_pos: Optional[Tensor] = None):
        q = k = self.with_pos_embed(tgt, query_pos)
        tgt2 = self.self_attn(q, k, value=tgt, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask)[0]
        tgt = tgt + self.dropout1(tgt2)
        tgt = self.norm1(tgt)
        tgt2 = self.multihead_attn(query=self.with_pos_embed(tgt, query_pos), key=self.with_pos_embed(memory, pos),
                                   value=memory, attn_mask=memory_mask, key_padding_mask=memory_key_padding_mask)[0]
        tgt = tgt + self.dropout2(tgt2)
        tgt = self.norm2(tgt)
        tgt2 = self.linear2(self.dropout(self.activation(self.linear1(tgt))))
        tgt = tgt + self.dropout3(tgt2)
        tgt = self.norm3(tgt)
        return tgt


class TransformerDecoder(nn.Module):
    def __init__(self, decoder_layer, num_layers, norm=None, return_intermediate=False):
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.return_intermediate = return_intermediate

    def forward(self, tgt, memory, tgt_mask: Optional[Tensor] = None, memory_mask: Optional[Tensor] = None,
                tgt_key_padding_mask: Optional[Tensor] = None, memory_key_padding_mask: Optional[Tensor] = None,
                pos: Optional[Tensor] = None, query_pos: Optional[Tensor] = None):
        output = tgt
        intermediate = []
        for layer in self.layers:
            output = layer(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                           tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                           pos=pos, query_pos=query_pos)
            if self.return_intermediate:
                intermediate.append(self.norm(output))
        if self.norm is not None:
            output = self.norm(output)
            if self.return_intermediate:
                intermediate.pop()
                intermediate.append(output)
        if self.return_intermediate:
            return torch.stack(intermediate)
        return output.unsqueeze(0)


class Transformer(nn.Module):
    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                 dropout=0.1, activation="relu", normalize_before=False, return_intermediate_dec=False):
        super().__init__()
        encoder_layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, normalize_before)
        encoder_norm = nn.LayerNorm(d_model) if normalize_before else None
        self.encoder = TransformerEncoder(encoder_layer, num_encoder_layers, encoder_norm)
        decoder_layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation, normalize_before)
        decoder_norm = nn.LayerNorm(d_model)
        self.decoder = TransformerDecoder(decoder_layer, num_decoder_layers, decoder_norm, return_intermediate=return_intermediate_dec)
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead

    def _reset_parameters(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src, mask, query_embed, pos_embed, latent_input=None, proprio_input=None, additional_pos_embed=None):
        if len(src.shape) == 4:  # has H and W
            # flatten NxCxHxW to HWxNxC
            bs, c, h, w = src.shape
            src = src.flatten(2).permute(2, 0, 1)
            pos_embed = pos_embed.flatten(2).permute(2, 0, 1).repeat(1, bs, 1)
            query_embed = query_embed.unsqueeze(1).repeat(1, bs, 1)
            additional_pos_embed = additional_pos_embed.unsqueeze(1).repeat(1, bs, 1)  # seq, bs, dim
            pos_embed = torch.cat([additional_pos_embed, pos_embed], axis=0)
            addition_input = torch.stack([latent_input, proprio_input], axis=0)
            src = torch.cat([addition_input, src], axis=0)
        else:
            assert len(src.shape) == 3
            bs, hw, c = src.shape
            src = src.permute(1, 0, 2)
            pos_embed = pos_embed.unsqueeze(1).repeat(1, bs, 1)
            query_embed = query_embed.unsqueeze(1).repeat(1, bs, 1)
        tgt = torch.zeros_like(query_embed)
        memory = self.encoder(src, src_key_padding_mask=mask, pos=pos_embed)
        hs = self.decoder(tgt, memory, memory_key_padding_mask=mask, pos=pos_embed, query_pos=query_embed)
        hs = hs.transpose(1, 2)
        return hs


class PositionEmbeddingSine(nn.Module):
    def __init__(self, num_pos_feats=64, temperature=10000, normalize=False, scale=None):
        super().__init__()
        self.num_pos_feats = num_pos_feats
        self.temperature = temperature
        self.normalize = normalize
        if scale is not None and normalize is False:
            raise ValueError("normalize should be True if scale is passed")
        if scale is None:
            scale = 2 * math.pi
        self.scale = scale

    def forward(self, tensor):
        x = tensor
        not_mask = torch.ones_like(x[0, [0]])
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        if self.normalize:
            eps = 1e-6
            y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
            x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale
        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32, device=x.device)
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.num_pos_feats)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
        return pos


class Backbone(nn.Module):
    # a stand-in for the ResNet-18 trunk: a small conv stack with a frozen BatchNorm-free stem
    def __init__(self, num_channels=8):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, num_channels, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(num_channels, num_channels, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.num_channels = num_channels
        self.position_embedding = PositionEmbeddingSine(8, normalize=True)  # hidden_dim // 2

    def forward(self, x):
        features = self.body(x)
        return [features], [self.position_embedding(features).to(features.dtype)]


class DETRVAE(nn.Module):
    def __init__(self, backbones, transformer, encoder, state_dim, num_queries, camera_names):
        super().__init__()
        self.num_queries = num_queries
        self.camera_names = camera_names
        self.transformer = transformer
        self.encoder = encoder
        hidden_dim = transformer.d_model
        self.action_head = nn.Linear(hidden_dim, state_dim)
        self.is_pad_head = nn.Linear(hidden_dim, 1)
        self.query_embed = nn.Embedding(num_queries, hidden_dim)
        self.input_proj = nn.Conv2d(backbones[0].num_channels, hidden_dim, kernel_size=1)
        self.backbones = nn.ModuleList(backbones)
        self.input_proj_robot_state = nn.Linear(14, hidden_dim)

        # encoder extra parameters
        self.latent_dim = 4  # final size of latent z
        self.cls_embed = nn.Embedding(1, hidden_dim)  # extra cls token embedding
        self.encoder_action_proj = nn.Linear(14, hidden_dim)  # project action to embedding
        self.encoder_joint_proj = nn.Linear(14, hidden_dim)  # project qpos to embedding
        self.latent_proj = nn.Linear(hidden_dim, self.latent_dim * 2)  # project hidden state to latent std, var
        self.register_buffer("pos_table", get_sinusoid_encoding_table(1 + 1 + num_queries, hidden_dim))  # [CLS], qpos, a_seq

        # decoder extra parameters
        self.latent_out_proj = nn.Linear(self.latent_dim, hidden_dim)  # project latent sample to embedding
        self.additional_pos_embed = nn.Embedding(2, hidden_dim)  # learned position embedding for proprio and latent

    def forward(self, qpos, image, env_state, actions=None, is_pad=None):
        is_training = actions is not None  # train or val
        bs, _ = qpos.shape
        ### Obtain latent z from action sequence
        if is_training:
            # project action sequence to embedding dim, and concat with a CLS token
            action_embed = self.encoder_action_proj(actions)  # (bs, seq, hidden_dim)
            qpos_embed = self.encoder_joint_proj(qpos)  # (bs, hidden_dim)
            qpos_embed = torch.unsqueeze(qpos_embed, axis=1)  # (bs, 1, hidden_dim)
            cls_embed = self.cls_embed.weight  # (1, hidden_dim)
            cls_embed = torch.unsqueeze(cls_embed, axis=0).repeat(bs, 1, 1)  # (bs, 1, hidden_dim)
            encoder_input = torch.cat([cls_embed, qpos_embed, action_embed], axis=1)  # (bs, seq+1, hidden_dim)
            encoder_input = encoder_input.permute(1, 0, 2)  # (seq+1, bs, hidden_dim)
            # do not mask cls token
            cls_joint_is_pad = torch.full((bs, 2), False).to(qpos.device)  # False: not a padding
            is_pad = torch.cat([cls_joint_is_pad, is_pad], axis=1)  # (bs, seq+1)
            # obtain position embedding
            pos_embed = self.pos_table.clone().detach()
            pos_embed = pos_embed.permute(1, 0, 2)  # (seq+1, 1, hidden_dim)
            # query model
            encoder_output = self.encoder(encoder_input, pos=pos_embed, src_key_padding_mask=is_pad)
            encoder_output = encoder_output[0]  # take cls output only
            latent_info = self.latent_proj(encoder_output)
            mu = latent_info[:, :self.latent_dim]
            logvar = latent_info[:, self.latent_dim:]
            latent_sample = reparametrize(mu, logvar)
            latent_input = self.latent_out_proj(latent_sample)
        else:
            mu = logvar = None
            latent_sample = torch.zeros([bs, self.latent_dim], dtype=torch.float32).to(qpos.device)
            latent_input = self.latent_out_proj(latent_sample)

        # Image observation features and position embeddings
        all_cam_features = []
        all_cam_pos = []
        for cam_id, cam_name in enumerate(self.camera_names):
            features, pos = self.backbones[0](image[:, cam_id])
            features = features[0]  # take the last layer feature
            pos = pos[0]
            all_cam_features.append(self.input_proj(features))
            all_cam_pos.append(pos)
        # proprioception features
        proprio_input = self.input_proj_robot_state(qpos)
        # fold camera dimension into width dimension
        src = torch.cat(all_cam_features, axis=3)
        pos = torch.cat(all_cam_pos, axis=3)
        hs = self.transformer(src, None, self.query_embed.weight, pos, latent_input, proprio_input, self.additional_pos_embed.weight)[0]
        a_hat = self.action_head(hs)
        is_pad_hat = self.is_pad_head(hs)
        return a_hat, is_pad_hat, [mu, logvar]


def kl_divergence(mu, logvar):
    batch_size = mu.size(0)
    assert batch_size != 0
    if mu.data.ndimension() == 4:
        mu = mu.view(mu.size(0), mu.size(1))
    if logvar.data.ndimension() == 4:
        logvar = logvar.view(logvar.size(0), logvar.size(1))

    klds = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
    total_kld = klds.sum(1).mean(0, True)
    dimension_wise_kld = klds.mean(0)
    mean_kld = klds.mean(1).mean(0, True)

    return total_kld, dimension_wise_kld, mean_kld


class ACTPolicy(nn.Module):
    def __init__(self, model, kl_weight):
        super().__init__()
        self.model = model
        self.kl_weight = kl_weight
        self.mean = torch.tensor([0.485, 0.456, 0.406])
        self.std = torch.tensor([0.229, 0.224, 0.225])

    def __call__(self, qpos, image, actions=None, is_pad=None):
        env_state = None
        image = (image - self.mean[:, None, None]) / self.std[:, None, None]
        if actions is not None:  # training time
            actions = actions[:, :self.model.num_queries]
            is_pad = is_pad[:, :self.model.num_queries]

            a_hat, is_pad_hat, (mu, logvar) = self.model(qpos, image, env_state, actions, is_pad)
            total_kld, dim_wise_kld, mean_kld = kl_divergence(mu, logvar)
            loss_dict = dict()
            all_l1 = F.l1_loss(actions, a_hat, reduction="none")
            l1 = (all_l1 * ~is_pad.unsqueeze(-1)).mean()
            loss_dict["l1"] = l1
            loss_dict["kl"] = total_kld[0]
            loss_dict["loss"] = loss_dict["l1"] + loss_dict["kl"] * self.kl_weight
            return loss_dict
        else:  # inference time
            a_hat, _, (_, _) = self.model(qpos, image, env_state)  # no action, sample from prior
            return a_hat


hidden_dim, num_queries, state_dim, camera_names = 16, 4, 14, ["top", "angle"]
backbones = [Backbone(8)]
transformer = Transformer(d_model=hidden_dim, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                          dim_feedforward=32, dropout=0.0, normalize_before=False, return_intermediate_dec=True)
encoder = TransformerEncoder(TransformerEncoderLayer(hidden_dim, 2, 32, 0.0, "relu", False), 1, None)
model = DETRVAE(backbones, transformer, encoder, state_dim=state_dim, num_queries=num_queries, camera_names=camera_names)
initialize(model)
policy = ACTPolicy(model, kl_weight=10)
param_dicts = [
    {"params": [p for n, p in model.named_parameters() if "backbone" not in n and p.requires_grad]},
    {"params": [p for n, p in model.named_parameters() if "backbone" in n and p.requires_grad], "lr": 1e-4},
]
optimizer = torch.optim.AdamW(param_dicts, lr=1e-3, weight_decay=1e-4)

# an episode of demonstrations: joint positions, two camera images, action chunks padded past its end
episode_len = 6
qpos_data = torch.randn(episode_len, 14)
image_data = torch.rand(episode_len, 2, 3, 12, 12)
action_data = torch.randn(episode_len, 14).cumsum(0) * 0.1
for step in range(3):
    start_ts = np.random.choice(episode_len, size=2)
    actions = torch.zeros(2, num_queries, 14)
    is_pad = torch.zeros(2, num_queries)
    for i, ts in enumerate(start_ts.tolist()):
        chunk = action_data[ts:ts + num_queries]
        actions[i, :len(chunk)] = chunk
        is_pad[i, len(chunk):] = 1
    is_pad = is_pad.bool()
    loss_dict = policy(qpos_data[start_ts], image_data[start_ts], actions, is_pad)
    loss = loss_dict["loss"]
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.extend([start_ts.tolist(), {k: v.item() for k, v in loss_dict.items()}, params_of(model)])

# evaluation: temporal ensembling of the overlapping chunks
model.eval()
max_timesteps = 5
query_frequency = 1
with torch.inference_mode():
    all_time_actions = torch.zeros([max_timesteps, max_timesteps + num_queries, state_dim])
    qpos = qpos_data[0:1]
    for t in range(max_timesteps):
        curr_image = image_data[t:t + 1]
        if t % query_frequency == 0:
            all_actions = policy(qpos, curr_image)
        all_time_actions[[t], t:t + num_queries] = all_actions
        actions_for_curr_step = all_time_actions[:, t]
        actions_populated = torch.all(actions_for_curr_step != 0, axis=1)
        actions_for_curr_step = actions_for_curr_step[actions_populated]
        k = 0.01
        exp_weights = np.exp(-k * np.arange(len(actions_for_curr_step)))
        exp_weights = exp_weights / exp_weights.sum()
        exp_weights = torch.from_numpy(exp_weights).to(qpos.device).unsqueeze(dim=1)
        raw_action = (actions_for_curr_step * exp_weights).sum(dim=0, keepdim=True)
        raw_action = raw_action.squeeze(0).cpu().numpy()
        record.extend([str(raw_action.dtype), int(actions_populated.sum()), raw_action])
        qpos = qpos + 0.1 * torch.from_numpy(raw_action).float().unsqueeze(0)
"""

ACT_STEPS = [
    IMPORT_LINES,
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_act_cvae_action_chunking_and_temporal_ensembling_as_torch(capsys):
    with SharedFills(torch, 9303), SharedFills(rg, 9303):
        (theirs, ours), _ = runs_with_draws(
            ACT_SOURCE, ACT_STEPS, capsys, 9303, initialize=initializer(), params_of=params_of,
        )  # fmt: skip
    assert theirs[-3] == "float64"  # float32 actions times the float64 weights NumPy made
    # the key third of each attention's in-projection bias has a zero true gradient (the
    # softmax ignores a shift shared by every key): Adam's steps there follow the rounding
    noise = {f"0.{name}.in_proj_bias": slice(16, 32) for name in ATTENTIONS}
    # the decoder's first self-attention reads tgt = zeros_like(query_embed) as its value, so
    # every position's value is the same (the value bias) and its output does not depend on
    # the attention weights: the query and key projections (rows 0-31 of its in-projection)
    # have a zero true gradient too, and their Adam steps follow the rounding (ci129: 6 of
    # 768 weights 0.25% apart, in a worker where other tests had run first)
    first = "0.transformer.decoder.layers.0.self_attn"
    noise[f"{first}.in_proj_bias"] = noise[f"{first}.in_proj_weight"] = slice(0, 32)
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, noise=noise)


ATTENTIONS = (
    "transformer.encoder.layers.0.self_attn",
    "transformer.decoder.layers.0.self_attn",
    "transformer.decoder.layers.0.multihead_attn",
    "encoder.layers.0.self_attn",
)
