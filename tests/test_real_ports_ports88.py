# ruff: noqa: E501  (the embedded programs keep their sources' long lines)
"""Real ports, round 88 (the harness: ``tests/real_ports.py``): modern image-classification
training recipes, programs written here in the style of public code, each trained a few steps
under torch and, ported, under retrograd from the same weights and draws, every record
compared.

- a ConvNeXt V2 masked-autoencoder pretraining step in the style of facebookresearch/
  ConvNeXt-V2's ``FCMAE`` (its sparse encoder simulated densely: masked positions zeroed after
  the stem and every stage): ``GRN`` (``torch.norm(x, p=2, dim=(1, 2), keepdim=True)``, the
  ratio to its channel mean, ``gamma * (x * Nx) + beta + x``) inside blocks of a depthwise
  7x7 conv and channels-last ``permute``s, a channels-first LayerNorm, timm's ``drop_path``
  (``x.new_empty(shape).bernoulli_(keep)``, ``div_``); the random mask by ``torch.argsort``
  of ``torch.randn`` noise twice, ``mask[:, :keep] = 0`` and ``torch.gather``; the mask upsampled
  by ``reshape(-1, p, p).repeat_interleave(s, axis=1).repeat_interleave(s, axis=2)``, applied
  in place (``x *= 1.0 - mask``); the decoder's ``mask_token.repeat(n, 1, h, w)`` blend,
  ``patchify`` by ``reshape(shape=...)`` and ``einsum('nchpwq->nhwpqc')``, the per-patch
  normalised target (``var(dim=-1, keepdim=True)``, ``** .5``) and the masked mean loss;
  trained by AdamW over timm's ``param_groups_weight_decay`` (``ndim <= 1``, ``.bias``, a
  no-decay name list), a warm-up-then-cosine ``LambdaLR`` stepped per update, gradient
  accumulation (``loss /= update_freq``), ``clip_grad_norm_`` and an EMA of the weights by
  ``torch._foreach_mul_``/``torch._foreach_add_(..., alpha=)`` under ``@torch.no_grad()``.
- a CaiT in the style of facebookresearch/deit's ``cait_models.py`` and timm's training
  utilities: talking-heads attention (``proj_l``/``proj_w`` over the heads through
  ``permute(0, 2, 3, 1)``), class attention (only ``x[:, 0]`` queries), LayerScale
  ``gamma_1``/``gamma_2``, stochastic depth by ``keep + torch.rand(shape)`` and ``floor_()``,
  ``@torch.jit.ignore`` no-decay names; timm's ``Mixup`` switching between blending
  (``x.flip(0).mul_(1 - lam)``, ``x.mul_(lam).add_(...)``) and CutMix (a box from
  ``np.random``, pasted by ``x[:, :, yl:yh, xl:xh] = x.flip(0)[...]`` with NumPy integer
  bounds), smoothed one-hot targets by ``torch.full(...).scatter_(1, x, on_value)``; timm's
  ``BinaryCrossEntropy`` (``register_buffer`` of ``None``, ``target.gt(threshold).to(dtype=)``,
  ``binary_cross_entropy_with_logits(..., pos_weight=)``); timm's ``RMSpropTF``, an
  ``Optimizer`` subclass (``torch.ones_like`` square averages, ``addcdiv_(..., value=)``,
  ``p.add_(-buf)``) under a warm-up-cosine scheduler writing ``param_group["lr"]``; a
  ``ModelEmaV2`` by ``ema_v.lerp_(model_v, weight=)`` over ``state_dict().values()``.
- a RepVGG in the style of DingXiaoH/RepVGG trained with AugMix's consistency loss in the style
  of timm: the three-branch block (3x3 conv-BN, 1x1 conv-BN, identity BN, a squeeze-excitation
  by ``F.avg_pool2d(x, kernel_size=x.size(3))``), grouped convs, the paper's custom L2 of the
  equivalent kernel; ``convert_splitbn_model`` (``torch.nn.modules.batchnorm._BatchNorm``,
  ``add_module`` over ``named_children``, buffers and ``.data`` reassigned) into a
  ``SplitBatchNorm2d`` subclass calling ``super().forward`` on the clean split; augment-and-mix
  images (``np.float32`` Dirichlet weights times tensors, ``torch.rot90``, ``roll``, ``flip``)
  and ``JsdCrossEntropy`` (``torch.split``, ``torch.stack(probs).mean(axis=0)``, ``clamp``,
  ``kl_div(..., reduction="batchmean")``); SGD with Nesterov under ``CosineAnnealingLR``;
  ``AveragedModel(multi_avg_fn=get_ema_multi_avg_fn(0.75), use_buffers=True)``; then the
  structural reparameterisation (``F.pad`` of the 1x1 kernel, the identity kernel from NumPy by
  ``torch.from_numpy(...).to(device)``, ``weight.data = kernel``, ``para.detach_()``,
  ``__delattr__``) of the averaged model, whose fused outputs equal the branches'.

``bernoulli_`` draws from one seeded stream in both runs; ``torch.rand``/``randn``/``randint``
too, and NumPy's global stream is seeded alike (:func:`real_ports.runs_with_draws`). The ports
change the imports and the gradient lines only (a custom optimizer's ``p.grad`` reads the
gradients ``backward()`` returned).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)


@pytest.fixture
def shared_bernoulli(monkeypatch):
    """``Tensor.bernoulli_(p)`` of torch and of retrograd filling from two NumPy streams seeded
    alike (the runs are one after the other: the same draws in both)."""
    for lib in (torch, rg):
        draws = np.random.default_rng(88)

        def bernoulli_(self, p=0.5, *, generator=None, lib=lib, draws=draws):
            kept = (draws.random(tuple(self.shape)) < p).astype(np.float64)
            return self.copy_(lib.tensor(kept, dtype=self.dtype))

        monkeypatch.setattr(lib.Tensor, "bernoulli_", bernoulli_)


#: the import lines every program here ports the same way
IMPORT_LINES = (
    "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
    "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
)


FCMAE_SOURCE = """
import math
from copy import deepcopy

import torch
import torch.nn as nn
import torch.nn.functional as F


def drop_path(x, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # one draw per sample
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob: float = 0.0, scale_by_keep: bool = True):
        super().__init__()
        self.drop_prob = drop_prob
        self.scale_by_keep = scale_by_keep

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)


class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps
        self.data_format = data_format
        if self.data_format not in ["channels_last", "channels_first"]:
            raise NotImplementedError
        self.normalized_shape = (normalized_shape,)

    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class GRN(nn.Module):
    # global response normalization over a channels-last map
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, 1, dim))

    def forward(self, x):
        Gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        Nx = Gx / (Gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * Nx) + self.beta + x


class Block(nn.Module):
    def __init__(self, dim, drop_path=0.0):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.grn = GRN(4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)  # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.grn(x)
        x = self.pwconv2(x)
        x = x.permute(0, 3, 1, 2)
        return input + self.drop_path(x)


class MaskedEncoder(nn.Module):
    # the sparse encoder simulated densely: what is masked is zeroed after every layer
    def __init__(self, in_chans=3, depths=(1, 2), dims=(8, 16), drop_path_rate=0.0):
        super().__init__()
        self.downsample_layers = nn.ModuleList()
        stem = nn.Sequential(
            nn.Conv2d(in_chans, dims[0], kernel_size=2, stride=2),
            LayerNorm(dims[0], eps=1e-6, data_format="channels_first"),
        )
        self.downsample_layers.append(stem)
        for i in range(len(dims) - 1):
            self.downsample_layers.append(nn.Sequential(
                LayerNorm(dims[i], eps=1e-6, data_format="channels_first"),
                nn.Conv2d(dims[i], dims[i + 1], kernel_size=2, stride=2),
            ))
        self.stages = nn.ModuleList()
        dp_rates = [x.item() for x in torch.linspace(0, drop_path_rate, sum(depths))]
        cur = 0
        for i in range(len(dims)):
            self.stages.append(
                nn.Sequential(*[Block(dims[i], dp_rates[cur + j]) for j in range(depths[i])])
            )
            cur += depths[i]
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.constant_(m.bias, 0)

    def upsample_mask(self, mask, scale):
        assert len(mask.shape) == 2
        p = int(mask.shape[1] ** 0.5)
        return mask.reshape(-1, p, p).repeat_interleave(scale, axis=1).repeat_interleave(scale, axis=2)

    def forward(self, x, mask):
        num_stages = len(self.stages)
        for i in range(num_stages):
            x = self.downsample_layers[i](x)
            here = self.upsample_mask(mask, 2 ** (num_stages - 1 - i)).unsqueeze(1).type_as(x)
            x *= 1.0 - here
            x = self.stages[i](x) * (1.0 - here)
        return x


class FCMAE(nn.Module):
    def __init__(self, img_size=16, in_chans=3, depths=(1, 2), dims=(8, 16), decoder_depth=1,
                 decoder_embed_dim=12, patch_size=4, mask_ratio=0.6, norm_pix_loss=True):
        super().__init__()
        self.img_size = img_size
        self.patch_size = patch_size
        self.mask_ratio = mask_ratio
        self.num_patches = (img_size // patch_size) ** 2
        self.norm_pix_loss = norm_pix_loss
        self.encoder = MaskedEncoder(in_chans, depths, dims, drop_path_rate=0.5)
        self.proj = nn.Conv2d(dims[-1], decoder_embed_dim, kernel_size=1)
        self.mask_token = nn.Parameter(torch.zeros(1, decoder_embed_dim, 1, 1))
        self.decoder = nn.Sequential(*[Block(decoder_embed_dim) for _ in range(decoder_depth)])
        self.pred = nn.Conv2d(decoder_embed_dim, patch_size ** 2 * in_chans, kernel_size=1)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Conv2d):
            w = m.weight.data
            nn.init.trunc_normal_(w.view([w.shape[0], -1]), std=0.02)
            nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.constant_(m.bias, 0)
        if hasattr(self, "mask_token"):
            torch.nn.init.normal_(self.mask_token, std=0.02)

    def patchify(self, imgs):
        p = self.patch_size
        assert imgs.shape[2] == imgs.shape[3] and imgs.shape[2] % p == 0
        h = w = imgs.shape[2] // p
        x = imgs.reshape(shape=(imgs.shape[0], 3, h, p, w, p))
        x = torch.einsum("nchpwq->nhwpqc", x)
        return x.reshape(shape=(imgs.shape[0], h * w, p ** 2 * 3))

    def gen_random_mask(self, x, mask_ratio):
        N = x.shape[0]
        L = (x.shape[2] // self.patch_size) ** 2
        len_keep = int(L * (1 - mask_ratio))
        noise = torch.randn(N, L, device=x.device)
        ids_shuffle = torch.argsort(noise, dim=1)  # ascend: small is keep, large is remove
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        mask = torch.ones([N, L], device=x.device)  # 0 is keep, 1 is remove
        mask[:, :len_keep] = 0
        return torch.gather(mask, dim=1, index=ids_restore)

    def forward_decoder(self, x, mask):
        x = self.proj(x)
        n, c, h, w = x.shape
        mask = mask.reshape(-1, h, w).unsqueeze(1).type_as(x)
        mask_token = self.mask_token.repeat(x.shape[0], 1, x.shape[2], x.shape[3])
        x = x * (1.0 - mask) + mask_token * mask
        x = self.decoder(x)
        return self.pred(x)

    def forward_loss(self, imgs, pred, mask):
        if len(pred.shape) == 4:
            n, c, _, _ = pred.shape
            pred = pred.reshape(n, c, -1)
            pred = torch.einsum("ncl->nlc", pred)
        target = self.patchify(imgs)
        if self.norm_pix_loss:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.0e-6) ** 0.5
        loss = (pred - target) ** 2
        loss = loss.mean(dim=-1)  # the mean loss per patch
        return (loss * mask).sum() / mask.sum()  # over the removed patches

    def forward(self, imgs, labels=None, mask_ratio=0.6):
        mask = self.gen_random_mask(imgs, mask_ratio)
        x = self.encoder(imgs, mask)
        pred = self.forward_decoder(x, mask)
        loss = self.forward_loss(imgs, pred, mask)
        return loss, pred, mask


def param_groups_weight_decay(model, weight_decay=1e-5, no_weight_decay_list=()):
    no_weight_decay_list = set(no_weight_decay_list)
    decay = []
    no_decay = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(".bias") or name in no_weight_decay_list:
            no_decay.append(param)
        else:
            decay.append(param)
    return [
        {"params": no_decay, "weight_decay": 0.0},
        {"params": decay, "weight_decay": weight_decay},
    ]


class ModelEma(nn.Module):
    def __init__(self, model, decay=0.9):
        super().__init__()
        self.module = deepcopy(model)
        self.module.eval()
        self.decay = decay

    @torch.no_grad()
    def update(self, model):
        ema_params = tuple(self.module.parameters())
        model_params = tuple(model.parameters())
        torch._foreach_mul_(ema_params, self.decay)
        torch._foreach_add_(ema_params, model_params, alpha=1.0 - self.decay)


def warmup_cosine(warmup, total, floor=0.05):
    def factor(update):
        if update < warmup:
            return (update + 1) / warmup
        progress = (update - warmup) / max(1, total - warmup)
        return floor + (1 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return factor


update_freq, epochs = 2, 2
model = FCMAE()
initialize(model)
groups = param_groups_weight_decay(model, 0.05, no_weight_decay_list=["mask_token"])
record.append([len(g["params"]) for g in groups])
optimizer = torch.optim.AdamW(groups, lr=4e-3, betas=(0.9, 0.95))
batches = [(torch.randn(2, 3, 16, 16), None) for _ in range(2)]
updates = epochs * len(batches) // update_freq
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(1, updates))
ema = ModelEma(model, decay=0.5)
for epoch in range(epochs):
    model.train(True)
    optimizer.zero_grad()
    for data_iter_step, (samples, labels) in enumerate(batches):
        loss, _, mask = model(samples, labels, mask_ratio=model.mask_ratio)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            raise ValueError(f"Loss is {loss_value}, stopping training")
        record.extend([loss_value, mask.sum(dim=1).tolist()])
        loss /= update_freq
        loss.backward()
        if (data_iter_step + 1) % update_freq == 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
            ema.update(model)
            record.extend([norm.item(), scheduler.get_last_lr(), params_of(model), params_of(ema)])
with torch.no_grad():
    loss, pred, mask = ema.module(batches[0][0])
    record.extend([loss.item(), pred.numpy()])
"""

FCMAE_STEPS = [
    IMPORT_LINES,
    ("    optimizer.zero_grad()\n    for", "    optimizer.zero_grad()\n    grads = None\n    for"),
    (
        "        loss.backward()\n",
        "        step_grads = loss.backward()\n"
        "        grads = step_grads if grads is None else grads + step_grads\n",
    ),
    ("clip_grad_norm_(model.parameters(),", "clip_grad_norm_(grads, model.parameters(),"),
    (
        "            optimizer.step()\n            optimizer.zero_grad()\n",
        "            optimizer.step(grads)\n            optimizer.zero_grad()\n"
        "            grads = None\n",
    ),
]


def test_convnext_v2_fcmae_pretraining_trains_as_torch(capsys, shared_bernoulli):
    (theirs, ours), _ = runs_with_draws(
        FCMAE_SOURCE, FCMAE_STEPS, capsys, 8801,
        initialize=initializer(), params_of=params_of, copy=copy,
    )  # fmt: skip
    assert theirs[0] == [29, 24]  # no decay: 1-d, biases and the mask token; decay: GRN
    assert len(theirs) == 1 + 2 * (2 * 2 + 1 * 4) + 2  # one update an epoch
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


CAIT_SOURCE = """
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Optimizer


def drop_path(x, drop_prob: float = 0.0, training: bool = False):
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
    random_tensor.floor_()  # binarize
    return x.div(keep_prob) * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob=None):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TalkingHeadAttn(nn.Module):
    # the heads mix their logits before the softmax and their weights after it
    def __init__(self, dim, num_heads=4, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_l = nn.Linear(num_heads, num_heads)
        self.proj_w = nn.Linear(num_heads, num_heads)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)
        attn = self.proj_l(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        attn = attn.softmax(dim=-1)
        attn = self.proj_w(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class ClassAttn(nn.Module):
    # only the class token queries: the patches are keys and values
    def __init__(self, dim, num_heads=4, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.k = nn.Linear(dim, dim, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q = self.q(x[:, 0]).unsqueeze(1).reshape(B, 1, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        k = self.k(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        q = q * self.scale
        v = self.v(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x_cls = (attn @ v).transpose(1, 2).reshape(B, 1, C)
        return self.proj(x_cls)


class LayerScaleBlockClassAttn(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, drop_path=0.0, init_values=1e-4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = ClassAttn(dim, num_heads=num_heads, qkv_bias=True)
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio))
        self.gamma_1 = nn.Parameter(init_values * torch.ones(dim))
        self.gamma_2 = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x, x_cls):
        u = torch.cat((x_cls, x), dim=1)
        x_cls = x_cls + self.drop_path(self.gamma_1 * self.attn(self.norm1(u)))
        x_cls = x_cls + self.drop_path(self.gamma_2 * self.mlp(self.norm2(x_cls)))
        return x_cls


class LayerScaleBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, drop_path=0.0, init_values=1e-4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = TalkingHeadAttn(dim, num_heads=num_heads, qkv_bias=True)
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio))
        self.gamma_1 = nn.Parameter(init_values * torch.ones(dim))
        self.gamma_2 = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        x = x + self.drop_path(self.gamma_1 * self.attn(self.norm1(x)))
        x = x + self.drop_path(self.gamma_2 * self.mlp(self.norm2(x)))
        return x


class Cait(nn.Module):
    def __init__(self, img_size=8, patch_size=2, in_chans=3, num_classes=5, embed_dim=16,
                 depth=2, num_heads=4, mlp_ratio=2.0, drop_path_rate=0.2, init_values=0.1,
                 depth_token_only=1):
        super().__init__()
        self.num_classes = num_classes
        self.patch_embed = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, embed_dim))
        dpr = [drop_path_rate for i in range(depth)]
        self.blocks = nn.ModuleList([
            LayerScaleBlock(embed_dim, num_heads, mlp_ratio, dpr[i], init_values)
            for i in range(depth)
        ])
        self.blocks_token_only = nn.ModuleList([
            LayerScaleBlockClassAttn(embed_dim, num_heads, mlp_ratio, 0.0, init_values)
            for i in range(depth_token_only)
        ])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    @torch.jit.ignore
    def no_weight_decay(self):
        return {"pos_embed", "cls_token"}

    def forward_features(self, x):
        B = x.shape[0]
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls_tokens = self.cls_token.expand(B, -1, -1)
        x = x + self.pos_embed
        for i, blk in enumerate(self.blocks):
            x = blk(x)
        for i, blk in enumerate(self.blocks_token_only):
            cls_tokens = blk(x, cls_tokens)
        x = torch.cat((cls_tokens, x), dim=1)
        x = self.norm(x)
        return x[:, 0]

    def forward(self, x):
        return self.head(self.forward_features(x))


def one_hot(x, num_classes, on_value=1.0, off_value=0.0):
    x = x.long().view(-1, 1)
    return torch.full((x.size()[0], num_classes), off_value, device=x.device).scatter_(1, x, on_value)


def mixup_target(target, num_classes, lam=1.0, smoothing=0.0):
    off_value = smoothing / num_classes
    on_value = 1.0 - smoothing + off_value
    y1 = one_hot(target, num_classes, on_value=on_value, off_value=off_value)
    y2 = one_hot(target.flip(0), num_classes, on_value=on_value, off_value=off_value)
    return y1 * lam + y2 * (1.0 - lam)


def rand_bbox(img_shape, lam, margin=0.0, count=None):
    ratio = np.sqrt(1 - lam)
    img_h, img_w = img_shape[-2:]
    cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
    margin_y, margin_x = int(margin * cut_h), int(margin * cut_w)
    cy = np.random.randint(0 + margin_y, img_h - margin_y, size=count)
    cx = np.random.randint(0 + margin_x, img_w - margin_x, size=count)
    yl = np.clip(cy - cut_h // 2, 0, img_h)
    yh = np.clip(cy + cut_h // 2, 0, img_h)
    xl = np.clip(cx - cut_w // 2, 0, img_w)
    xh = np.clip(cx + cut_w // 2, 0, img_w)
    return yl, yh, xl, xh


def cutmix_bbox_and_lam(img_shape, lam, correct_lam=True, count=None):
    yl, yu, xl, xu = rand_bbox(img_shape, lam, count=count)
    if correct_lam:
        bbox_area = (yu - yl) * (xu - xl)
        lam = 1.0 - bbox_area / float(img_shape[-2] * img_shape[-1])
    return (yl, yu, xl, xu), lam


class Mixup:
    def __init__(self, mixup_alpha=1.0, cutmix_alpha=0.0, prob=1.0, switch_prob=0.5,
                 correct_lam=True, label_smoothing=0.1, num_classes=1000):
        self.mixup_alpha = mixup_alpha
        self.cutmix_alpha = cutmix_alpha
        self.mix_prob = prob
        self.switch_prob = switch_prob
        self.label_smoothing = label_smoothing
        self.num_classes = num_classes
        self.correct_lam = correct_lam
        self.mixup_enabled = True

    def _params_per_batch(self):
        lam = 1.0
        use_cutmix = False
        if self.mixup_enabled and np.random.rand() < self.mix_prob:
            if self.mixup_alpha > 0.0 and self.cutmix_alpha > 0.0:
                use_cutmix = np.random.rand() < self.switch_prob
                lam_mix = np.random.beta(self.cutmix_alpha, self.cutmix_alpha) if use_cutmix else \\
                    np.random.beta(self.mixup_alpha, self.mixup_alpha)
            elif self.mixup_alpha > 0.0:
                lam_mix = np.random.beta(self.mixup_alpha, self.mixup_alpha)
            else:
                use_cutmix = True
                lam_mix = np.random.beta(self.cutmix_alpha, self.cutmix_alpha)
            lam = float(lam_mix)
        return lam, use_cutmix

    def _mix_batch(self, x):
        lam, use_cutmix = self._params_per_batch()
        if lam == 1.0:
            return 1.0
        if use_cutmix:
            (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(x.shape, lam, correct_lam=self.correct_lam)
            x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        else:
            x_flipped = x.flip(0).mul_(1.0 - lam)
            x.mul_(lam).add_(x_flipped)
        return lam

    def __call__(self, x, target):
        assert len(x) % 2 == 0, "Batch size should be even when using this"
        lam = self._mix_batch(x)
        target = mixup_target(target, self.num_classes, lam, self.label_smoothing)
        return x, target


class BinaryCrossEntropy(nn.Module):
    # BCE over one-hot (or mixed) targets, thresholded into hard multi-label ones
    def __init__(self, smoothing=0.1, target_threshold=None, weight=None, reduction="mean",
                 sum_classes=False, pos_weight=None):
        super().__init__()
        assert 0.0 <= smoothing < 1.0
        self.smoothing = smoothing
        self.target_threshold = target_threshold
        self.reduction = "none" if sum_classes else reduction
        self.sum_classes = sum_classes
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, x, target):
        batch_size = x.shape[0]
        assert batch_size == target.shape[0]
        if target.shape != x.shape:
            num_classes = x.shape[-1]
            off_value = self.smoothing / num_classes
            on_value = 1.0 - self.smoothing + off_value
            target = target.long().view(-1, 1)
            target = torch.full(
                (batch_size, num_classes), off_value, device=x.device, dtype=x.dtype
            ).scatter_(1, target, on_value)
        if self.target_threshold is not None:
            target = target.gt(self.target_threshold).to(dtype=target.dtype)
        loss = F.binary_cross_entropy_with_logits(
            x, target, self.weight, pos_weight=self.pos_weight, reduction=self.reduction
        )
        if self.sum_classes:
            loss = loss.sum(-1).mean()
        return loss


class RMSpropTF(Optimizer):
    # RMSprop as TensorFlow runs it: eps inside the root, square_avg started at one
    def __init__(self, params, lr=1e-2, alpha=0.9, eps=1e-10, weight_decay=0, momentum=0.0,
                 centered=False, decoupled_decay=False, lr_in_momentum=True):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, decoupled_decay=decoupled_decay,
                        lr_in_momentum=lr_in_momentum)
        super(RMSpropTF, self).__init__(params, defaults)

    def __setstate__(self, state):
        super(RMSpropTF, self).__setstate__(state)
        for group in self.param_groups:
            group.setdefault("momentum", 0)
            group.setdefault("centered", False)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    raise RuntimeError("RMSprop does not support sparse gradients")
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["square_avg"] = torch.ones_like(p)  # PyTorch inits to zero
                    if group["momentum"] > 0:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    if group["centered"]:
                        state["grad_avg"] = torch.zeros_like(p)
                square_avg = state["square_avg"]
                one_minus_alpha = 1.0 - group["alpha"]
                state["step"] += 1
                if group["weight_decay"] != 0:
                    if group["decoupled_decay"]:
                        p.mul_(1.0 - group["lr"] * group["weight_decay"])
                    else:
                        grad = grad.add(p, alpha=group["weight_decay"])
                # Tensorflow order of ops for updating squared avg
                square_avg.add_(grad.pow(2) - square_avg, alpha=one_minus_alpha)
                if group["centered"]:
                    grad_avg = state["grad_avg"]
                    grad_avg.add_(grad - grad_avg, alpha=one_minus_alpha)
                    avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).add(group["eps"]).sqrt_()
                else:
                    avg = square_avg.add(group["eps"]).sqrt_()
                if group["momentum"] > 0:
                    buf = state["momentum_buffer"]
                    if group["lr_in_momentum"]:
                        buf.mul_(group["momentum"]).addcdiv_(grad, avg, value=group["lr"])
                        p.add_(-buf)
                    else:
                        buf.mul_(group["momentum"]).addcdiv_(grad, avg)
                        p.add_(buf, alpha=-group["lr"])
                else:
                    p.addcdiv_(grad, avg, value=-group["lr"])
        return loss


class CosineWarmup:
    # per-update warm-up then cosine, written into the groups as timm's schedulers do
    def __init__(self, optimizer, t_initial, lr_min=0.0, warmup_t=0, warmup_lr_init=0.0):
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_values = [group["initial_lr"] for group in optimizer.param_groups]
        self.t_initial, self.lr_min = t_initial, lr_min
        self.warmup_t, self.warmup_lr_init = warmup_t, warmup_lr_init
        self.warmup_steps = [(v - warmup_lr_init) / warmup_t for v in self.base_values]
        self.step_update(0)

    def _get_lr(self, t):
        if t < self.warmup_t:
            return [self.warmup_lr_init + t * s for s in self.warmup_steps]
        t = t - self.warmup_t
        return [self.lr_min + 0.5 * (v - self.lr_min) * (1 + math.cos(math.pi * t / self.t_initial))
                for v in self.base_values]

    def step_update(self, num_updates):
        for param_group, value in zip(self.optimizer.param_groups, self._get_lr(num_updates)):
            param_group["lr"] = value


class ModelEmaV2(nn.Module):
    def __init__(self, model, decay=0.9):
        super().__init__()
        self.module = copy.deepcopy(model)
        self.module.eval()
        self.decay = decay

    @torch.no_grad()
    def update(self, model):
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema_v.is_floating_point():
                ema_v.lerp_(model_v, weight=1.0 - self.decay)
            else:
                ema_v.copy_(model_v)


def param_groups(model, weight_decay, skip=()):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.ndim <= 1 or name.endswith(".bias") or name in skip:
            no_decay.append(param)
        else:
            decay.append(param)
    return [dict(params=no_decay, weight_decay=0.0), dict(params=decay, weight_decay=weight_decay)]


num_classes = 5
model = Cait(num_classes=num_classes)
initialize(model)
mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, label_smoothing=0.1,
                 num_classes=num_classes)
criterion = BinaryCrossEntropy(target_threshold=0.2, pos_weight=torch.linspace(0.5, 1.5, num_classes))
optimizer = RMSpropTF(param_groups(model, 1e-2, model.no_weight_decay()), lr=2e-3, alpha=0.9,
                      eps=1e-3, momentum=0.9, weight_decay=1e-2)
scheduler = CosineWarmup(optimizer, t_initial=4, lr_min=1e-5, warmup_t=2, warmup_lr_init=1e-4)
ema = ModelEmaV2(model, decay=0.8)
batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, num_classes, (4,))) for _ in range(5)]
num_updates = 0
for samples, targets in batches:
    model.train()
    samples, targets = mixup_fn(samples, targets)
    output = model(samples)
    loss = criterion(output, targets)
    record.extend([targets.numpy(), loss.item()])
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0, norm_type=2.0)
    optimizer.step()
    num_updates += 1
    scheduler.step_update(num_updates=num_updates)
    ema.update(model)
    record.extend([[g["lr"] for g in optimizer.param_groups], params_of(model), params_of(ema)])
with torch.no_grad():
    output = ema.module(batches[0][0])
    _, pred = output.topk(1, 1, True, True)
    record.extend([output.numpy(), pred.t().tolist()])
"""

CAIT_STEPS = [
    IMPORT_LINES,
    ("    def step(self, closure=None):\n", "    def step(self, grads, closure=None):\n"),
    ("                if p.grad is None:\n", "                if p.grad(grads) is None:\n"),
    ("                grad = p.grad\n", "                grad = p.grad(grads)\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("clip_grad_norm_(model.parameters(),", "clip_grad_norm_(grads, model.parameters(),"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def test_cait_mixup_bce_rmsprop_tf_and_ema_train_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        CAIT_SOURCE, CAIT_STEPS, capsys, 8808,  # batches 3 and 4 cut, the others blend
        initialize=initializer(), params_of=params_of, copy=copy,
    )  # fmt: skip
    assert len(theirs) == 5 * 5 + 2
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


REPVGG_SOURCE = """
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_bn(in_channels, out_channels, kernel_size, stride, padding, groups=1):
    result = nn.Sequential()
    result.add_module("conv", nn.Conv2d(in_channels=in_channels, out_channels=out_channels,
                                        kernel_size=kernel_size, stride=stride, padding=padding,
                                        groups=groups, bias=False))
    result.add_module("bn", nn.BatchNorm2d(num_features=out_channels))
    return result


class SEBlock(nn.Module):
    def __init__(self, input_channels, internal_neurons):
        super(SEBlock, self).__init__()
        self.down = nn.Conv2d(in_channels=input_channels, out_channels=internal_neurons,
                              kernel_size=1, stride=1, bias=True)
        self.up = nn.Conv2d(in_channels=internal_neurons, out_channels=input_channels,
                            kernel_size=1, stride=1, bias=True)
        self.input_channels = input_channels

    def forward(self, inputs):
        x = F.avg_pool2d(inputs, kernel_size=inputs.size(3))
        x = self.down(x)
        x = F.relu(x)
        x = self.up(x)
        x = torch.sigmoid(x)
        x = x.view(-1, self.input_channels, 1, 1)
        return inputs * x


class RepVGGBlock(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, padding_mode="zeros", deploy=False, use_se=False):
        super(RepVGGBlock, self).__init__()
        self.deploy = deploy
        self.groups = groups
        self.in_channels = in_channels
        assert kernel_size == 3
        assert padding == 1
        padding_11 = padding - kernel_size // 2
        self.nonlinearity = nn.ReLU()
        if use_se:
            self.se = SEBlock(out_channels, internal_neurons=out_channels // 4)
        else:
            self.se = nn.Identity()
        if deploy:
            self.rbr_reparam = nn.Conv2d(in_channels=in_channels, out_channels=out_channels,
                                         kernel_size=kernel_size, stride=stride, padding=padding,
                                         dilation=dilation, groups=groups, bias=True,
                                         padding_mode=padding_mode)
        else:
            self.rbr_identity = nn.BatchNorm2d(num_features=in_channels) \\
                if out_channels == in_channels and stride == 1 else None
            self.rbr_dense = conv_bn(in_channels=in_channels, out_channels=out_channels,
                                     kernel_size=kernel_size, stride=stride, padding=padding,
                                     groups=groups)
            self.rbr_1x1 = conv_bn(in_channels=in_channels, out_channels=out_channels,
                                   kernel_size=1, stride=stride, padding=padding_11, groups=groups)

    def forward(self, inputs):
        if hasattr(self, "rbr_reparam"):
            return self.nonlinearity(self.se(self.rbr_reparam(inputs)))
        if self.rbr_identity is None:
            id_out = 0
        else:
            id_out = self.rbr_identity(inputs)
        return self.nonlinearity(self.se(self.rbr_dense(inputs) + self.rbr_1x1(inputs) + id_out))

    # the L2 of the equivalent kernel, which the paper's custom weight decay penalises
    def get_custom_L2(self):
        K3 = self.rbr_dense.conv.weight
        K1 = self.rbr_1x1.conv.weight
        t3 = (self.rbr_dense.bn.weight / ((self.rbr_dense.bn.running_var + self.rbr_dense.bn.eps).sqrt())).reshape(-1, 1, 1, 1).detach()
        t1 = (self.rbr_1x1.bn.weight / ((self.rbr_1x1.bn.running_var + self.rbr_1x1.bn.eps).sqrt())).reshape(-1, 1, 1, 1).detach()
        l2_loss_circle = (K3 ** 2).sum() - (K3[:, :, 1:2, 1:2] ** 2).sum()
        eq_kernel = K3[:, :, 1:2, 1:2] * t3 + K1 * t1
        l2_loss_eq_kernel = (eq_kernel ** 2 / (t3 ** 2 + t1 ** 2)).sum()
        return l2_loss_eq_kernel + l2_loss_circle

    def get_equivalent_kernel_bias(self):
        kernel3x3, bias3x3 = self._fuse_bn_tensor(self.rbr_dense)
        kernel1x1, bias1x1 = self._fuse_bn_tensor(self.rbr_1x1)
        kernelid, biasid = self._fuse_bn_tensor(self.rbr_identity)
        return kernel3x3 + self._pad_1x1_to_3x3_tensor(kernel1x1) + kernelid, bias3x3 + bias1x1 + biasid

    def _pad_1x1_to_3x3_tensor(self, kernel1x1):
        if kernel1x1 is None:
            return 0
        else:
            return torch.nn.functional.pad(kernel1x1, [1, 1, 1, 1])

    def _fuse_bn_tensor(self, branch):
        if branch is None:
            return 0, 0
        if isinstance(branch, nn.Sequential):
            kernel = branch.conv.weight
            running_mean = branch.bn.running_mean
            running_var = branch.bn.running_var
            gamma = branch.bn.weight
            beta = branch.bn.bias
            eps = branch.bn.eps
        else:
            assert isinstance(branch, nn.BatchNorm2d)
            if not hasattr(self, "id_tensor"):
                input_dim = self.in_channels // self.groups
                kernel_value = np.zeros((self.in_channels, input_dim, 3, 3), dtype=np.float32)
                for i in range(self.in_channels):
                    kernel_value[i, i % input_dim, 1, 1] = 1
                self.id_tensor = torch.from_numpy(kernel_value).to(branch.weight.device)
            kernel = self.id_tensor
            running_mean = branch.running_mean
            running_var = branch.running_var
            gamma = branch.weight
            beta = branch.bias
            eps = branch.eps
        std = (running_var + eps).sqrt()
        t = (gamma / std).reshape(-1, 1, 1, 1)
        return kernel * t, beta - running_mean * gamma / std

    def switch_to_deploy(self):
        if hasattr(self, "rbr_reparam"):
            return
        kernel, bias = self.get_equivalent_kernel_bias()
        self.rbr_reparam = nn.Conv2d(in_channels=self.rbr_dense.conv.in_channels,
                                     out_channels=self.rbr_dense.conv.out_channels,
                                     kernel_size=self.rbr_dense.conv.kernel_size,
                                     stride=self.rbr_dense.conv.stride,
                                     padding=self.rbr_dense.conv.padding,
                                     dilation=self.rbr_dense.conv.dilation,
                                     groups=self.rbr_dense.conv.groups, bias=True)
        self.rbr_reparam.weight.data = kernel
        self.rbr_reparam.bias.data = bias
        for para in self.parameters():
            para.detach_()
        self.__delattr__("rbr_dense")
        self.__delattr__("rbr_1x1")
        if hasattr(self, "rbr_identity"):
            self.__delattr__("rbr_identity")
        if hasattr(self, "id_tensor"):
            self.__delattr__("id_tensor")
        self.deploy = True


class RepVGG(nn.Module):
    def __init__(self, num_blocks, num_classes=4, width_multiplier=None, override_groups_map=None,
                 deploy=False, use_se=False):
        super(RepVGG, self).__init__()
        assert len(width_multiplier) == 3
        self.deploy = deploy
        self.override_groups_map = override_groups_map or dict()
        self.use_se = use_se
        assert 0 not in self.override_groups_map
        self.in_planes = min(8, int(8 * width_multiplier[0]))
        self.stage0 = RepVGGBlock(in_channels=3, out_channels=self.in_planes, kernel_size=3,
                                  stride=2, padding=1, deploy=self.deploy, use_se=self.use_se)
        self.cur_layer_idx = 1
        self.stage1 = self._make_stage(int(8 * width_multiplier[0]), num_blocks[0], stride=1)
        self.stage2 = self._make_stage(int(8 * width_multiplier[1]), num_blocks[1], stride=2)
        self.gap = nn.AdaptiveAvgPool2d(output_size=1)
        self.linear = nn.Linear(int(8 * width_multiplier[2]), num_classes)

    def _make_stage(self, planes, num_blocks, stride):
        strides = [stride] + [1] * (num_blocks - 1)
        blocks = []
        for stride in strides:
            cur_groups = self.override_groups_map.get(self.cur_layer_idx, 1)
            blocks.append(RepVGGBlock(in_channels=self.in_planes, out_channels=planes,
                                      kernel_size=3, stride=stride, padding=1, groups=cur_groups,
                                      deploy=self.deploy, use_se=self.use_se))
            self.in_planes = planes
            self.cur_layer_idx += 1
        return nn.ModuleList(blocks)

    def forward(self, x):
        out = self.stage0(x)
        for stage in (self.stage1, self.stage2):
            for block in stage:
                out = block(out)
        out = self.gap(out)
        out = out.view(out.size(0), -1)
        return self.linear(out)


def repvgg_model_convert(model: torch.nn.Module, do_copy=True):
    if do_copy:
        model = copy.deepcopy(model)
    for module in model.modules():
        if hasattr(module, "switch_to_deploy"):
            module.switch_to_deploy()
    return model


class SplitBatchNorm2d(torch.nn.BatchNorm2d):
    # AugMix's split BN: the clean split through the main BN, each augmented one through its own
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, num_splits=2):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        assert num_splits > 1, "Should have at least one aux BN layer (num_splits at least 2)"
        self.num_splits = num_splits
        self.aux_bn = nn.ModuleList([
            nn.BatchNorm2d(num_features, eps, momentum, affine, track_running_stats)
            for _ in range(num_splits - 1)
        ])

    def forward(self, input: torch.Tensor):
        if self.training:  # aux BN only relevant while training
            split_size = input.shape[0] // self.num_splits
            assert input.shape[0] == split_size * self.num_splits, \\
                "batch size must be evenly divisible by num_splits"
            split_input = input.split(split_size)
            x = [super().forward(split_input[0])]
            for i, a in enumerate(self.aux_bn):
                x.append(a(split_input[i + 1]))
            return torch.cat(x, dim=0)
        else:
            return super().forward(input)


def convert_splitbn_model(module, num_splits=2):
    mod = module
    if isinstance(module, torch.nn.modules.instancenorm._InstanceNorm):
        return module
    if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
        mod = SplitBatchNorm2d(
            module.num_features, module.eps, module.momentum, module.affine,
            module.track_running_stats, num_splits=num_splits)
        mod.running_mean = module.running_mean
        mod.running_var = module.running_var
        mod.num_batches_tracked = module.num_batches_tracked
        if module.affine:
            mod.weight.data = module.weight.data.clone().detach()
            mod.bias.data = module.bias.data.clone().detach()
        for aux in mod.aux_bn:
            aux.running_mean = module.running_mean.clone()
            aux.running_var = module.running_var.clone()
            aux.num_batches_tracked = module.num_batches_tracked.clone()
            if module.affine:
                aux.weight.data = module.weight.data.clone().detach()
                aux.bias.data = module.bias.data.clone().detach()
    for name, child in module.named_children():
        mod.add_module(name, convert_splitbn_model(child, num_splits=num_splits))
    del module
    return mod


class LabelSmoothingCrossEntropy(nn.Module):
    def __init__(self, smoothing=0.1):
        super(LabelSmoothingCrossEntropy, self).__init__()
        assert smoothing < 1.0
        self.smoothing = smoothing
        self.confidence = 1.0 - smoothing

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logprobs = F.log_softmax(x, dim=-1)
        nll_loss = -logprobs.gather(dim=-1, index=target.unsqueeze(1))
        nll_loss = nll_loss.squeeze(1)
        smooth_loss = -logprobs.mean(dim=-1)
        loss = self.confidence * nll_loss + self.smoothing * smooth_loss
        return loss.mean()


class JsdCrossEntropy(nn.Module):
    # AugMix's Jensen-Shannon consistency between the clean and the augmented splits
    def __init__(self, num_splits=3, alpha=12, smoothing=0.1):
        super().__init__()
        self.num_splits = num_splits
        self.alpha = alpha
        if smoothing is not None and smoothing > 0:
            self.cross_entropy_loss = LabelSmoothingCrossEntropy(smoothing)
        else:
            self.cross_entropy_loss = torch.nn.CrossEntropyLoss()

    def __call__(self, output, target):
        split_size = output.shape[0] // self.num_splits
        assert split_size * self.num_splits == output.shape[0]
        logits_split = torch.split(output, split_size)
        # Cross-entropy is only computed on clean images
        loss = self.cross_entropy_loss(logits_split[0], target[:split_size])
        probs = [F.softmax(logits, dim=1) for logits in logits_split]
        # Clamp mixture distribution to avoid exploding KL divergence
        logp_mixture = torch.clamp(torch.stack(probs).mean(axis=0), 1e-7, 1).log()
        loss += self.alpha * sum([F.kl_div(
            logp_mixture, p_split, reduction="batchmean") for p_split in probs]) / len(probs)
        return loss


OPS = [
    lambda x: torch.flip(x, dims=[3]),
    lambda x: torch.roll(x, shifts=1, dims=2),
    lambda x: x.clamp(-0.5, 0.5),
    lambda x: torch.rot90(x, 1, dims=(2, 3)),
]


def augment_and_mix(image, severity=3, width=3, alpha=1.0):
    ws = np.float32(np.random.dirichlet([alpha] * width))
    m = np.float32(np.random.beta(alpha, alpha))
    mix = torch.zeros_like(image)
    for i in range(width):
        image_aug = image.clone()
        depth = np.random.randint(1, 4)
        for _ in range(depth):
            op = OPS[np.random.randint(len(OPS))]
            image_aug = op(image_aug)
        mix += ws[i] * image_aug
    return (1 - m) * image + m * mix


model = RepVGG(num_blocks=[2, 2], width_multiplier=[1, 1.5, 1.5], override_groups_map={2: 2},
               use_se=True)
initialize(model)
model = convert_splitbn_model(model, num_splits=3)
record.append(sorted(name for name, _ in model.named_buffers() if "aux_bn.1" in name))
criterion = JsdCrossEntropy(num_splits=3, alpha=12, smoothing=0.1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                            weight_decay=0.0)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4, eta_min=1e-3)
ema = torch.optim.swa_utils.AveragedModel(
    model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.75), use_buffers=True)
images = torch.randn(4, 3, 8, 8)
labels = torch.randint(0, 4, (4,))
for step in range(3):
    model.train()
    batch = torch.cat([images] + [augment_and_mix(images) for _ in range(2)], 0)
    output = model(batch)
    loss = criterion(output, labels)
    l2 = sum(m.get_custom_L2() for m in model.modules() if hasattr(m, "get_custom_L2"))
    loss = loss + 1e-4 * 0.5 * l2
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    ema.update_parameters(model)
    record.extend([loss.item(), batch.numpy(), params_of(model), state(ema.module)])
model.eval()
ema.eval()
with torch.no_grad():
    trained = ema.module(images)
    deployed = repvgg_model_convert(ema.module)
    fused = deployed(images)
record.extend([trained.numpy(), fused.numpy(), sorted(state(deployed))])
record.append(float((trained - fused).abs().max()) < 1e-4)
"""

REPVGG_STEPS = [
    IMPORT_LINES,
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def state_values(module):
    return {k: np.array(v.detach().numpy(), copy=True) for k, v in module.state_dict().items()}


def test_repvgg_augmix_jsd_split_bn_ema_and_reparameterization_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        REPVGG_SOURCE, REPVGG_STEPS, capsys, 8803,
        initialize=initializer(), params_of=params_of, state=state_values,
    )  # fmt: skip
    assert theirs[-1] is True  # the fused convs compute what the branches did
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
