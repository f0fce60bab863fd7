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

``bernoulli_`` draws from one seeded stream in both runs; ``torch.randn`` too
(:func:`real_ports.runs_with_draws`). The port changes the imports and the gradient lines.
"""

from __future__ import annotations

import copy
import random

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
batches = [(torch.randn(2, 3, 16, 16), None) for _ in range(4)]
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
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
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
    assert len(theirs) == 1 + 2 * (4 * 2 + 2 * 4) + 2
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
