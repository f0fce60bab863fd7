# ruff: noqa: E501  (the program keeps a few long lines)
"""Real ports (the harness: ``tests/real_ports.py``): a fine-tuning loop written here in the
style of MAE's fine-tuning engine and timm's training utilities, over a small ViT, trained a
few updates against torch's run of the same text from the same weights and draws.

- layer-wise learning-rate decay: one param group per layer and decay kind (``"layer_%d_%s"``
  keys), each with its ``lr_scale``; 1-d parameters and ``no_weight_decay()`` names without
  weight decay;
- a per-iteration schedule (linear warm-up, then a half cosine) writing
  ``group["lr"] = lr * group.get("lr_scale", 1.0)``;
- gradient accumulation (``loss /= accum`` in place, an update every ``accum`` steps) under
  ``with torch.cuda.amp.autocast(enabled=cfg.amp)`` (off) and a ``math.isfinite`` check;
- an AMP scaler wrapper (``torch.amp.GradScaler(device=...)``, ``scale(loss).backward(
  create_graph=False)``, ``unscale_`` before ``clip_grad_norm_(..., norm_type=2.0)`` or
  ``clip_grad_value_``, ``step``, ``update``, ``state_dict()["scale"]``);
- an EMA copy (``deepcopy``, ``zip`` of both ``state_dict().values()`` under ``no_grad``,
  ``copy_`` of a blend, which truncates into the int64 ``num_batches_tracked`` as torch does)
  with a ``forward(*inputs, **options)`` passthrough;
- the ViT: a convolutional patch embedding (``Conv2d(bias=False)`` then ``BatchNorm2d``,
  ``flatten(2).transpose(1, 2)``), ``cls_token.expand(B, -1, -1)``, ``nn.init.normal_(...,
  std=...)``, ``qkv`` by ``reshape``/``permute``/``unbind``, ``LayerNorm(eps=1e-6)``, ``GELU``;
  ``AdamW`` over the groups and ``CrossEntropyLoss(label_smoothing=0.1)``.

The port changes the imports and the gradient lines (``backward()`` returns the gradients,
which the scaler sums over the accumulation steps and hands to ``unscale_``, clipping and
``step``).
"""

from __future__ import annotations

import types

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

MAE_FINETUNE_SOURCE = """
import math
from copy import deepcopy

import torch
import torch.nn as nn


def layer_of(name, n_layers):
    # the embeddings are layer 0, block i is layer i + 1, the rest (norm, head) the top one
    if name in ("cls_token", "pos_embed") or name.startswith("patch_embed"):
        return 0
    if name.startswith("blocks."):
        return int(name.split(".")[1]) + 1
    return n_layers


def layer_decay_groups(model, weight_decay, skip=(), decay_rate=0.75):
    n_layers = len(model.blocks) + 1
    groups = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        plain = p.ndim == 1 or name in skip
        layer = layer_of(name, n_layers)
        key = "layer_%d_%s" % (layer, "plain" if plain else "decayed")
        if key not in groups:
            scale = decay_rate ** (n_layers - layer)  # lower layers learn more slowly
            groups[key] = {"params": [], "weight_decay": 0.0 if plain else weight_decay, "lr_scale": scale}
        groups[key]["params"].append(p)
    return list(groups.values())


def set_lr(opt, progress, cfg):
    # linear warm-up, then half a cosine down to min_lr; progress counts epochs, fractionally
    if progress < cfg.warmup:
        lr = cfg.lr * progress / cfg.warmup
    else:
        frac = (progress - cfg.warmup) / (cfg.epochs - cfg.warmup)
        lr = cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * frac))
    for group in opt.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
    return lr


def clip_grads(params, limit, mode="norm"):
    if mode == "norm":
        torch.nn.utils.clip_grad_norm_(params, limit, norm_type=2.0)
    elif mode == "value":
        torch.nn.utils.clip_grad_value_(params, limit)
    else:
        raise ValueError(f"no clipping mode {mode!r}")


class AmpScaler:
    def __init__(self, device="cuda"):
        try:
            self.scaler = torch.amp.GradScaler(device=device)
        except (AttributeError, TypeError):  # an older torch
            self.scaler = torch.cuda.amp.GradScaler()

    def __call__(self, loss, opt, clip=None, mode="norm", params=None, update=True):
        self.scaler.scale(loss).backward(create_graph=False)
        if not update:
            return
        if clip is not None:
            self.scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
            clip_grads(params, clip, mode=mode)
        self.scaler.step(opt)
        self.scaler.update()

    def state_dict(self):
        return self.scaler.state_dict()


class EmaModel(nn.Module):
    def __init__(self, model, decay=0.999):
        super().__init__()
        self.module = deepcopy(model)
        self.module.eval()
        self.decay = decay

    def _blend(self, model, fn):
        with torch.no_grad():
            for mine, live in zip(self.module.state_dict().values(), model.state_dict().values()):
                mine.copy_(fn(mine, live))  # an int64 counter truncates, as copy_ does

    def update(self, model):
        self._blend(model, lambda e, m: self.decay * e + (1.0 - self.decay) * m)

    def forward(self, *inputs, **options):
        return self.module(*inputs, **options)


class SelfAttention(nn.Module):
    def __init__(self, dim, heads=2):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        parts = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = parts.unbind(0)
        weights = (q * self.scale @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden=32):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.attn = SelfAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        x = self.attn(self.norm1(x)) + x
        return self.mlp(self.norm2(x)) + x


class ConvPatches(nn.Module):
    def __init__(self, channels=2, dim=16, patch=4, size=8):
        super().__init__()
        self.count = (size // patch) ** 2
        self.proj = nn.Conv2d(channels, dim, kernel_size=patch, stride=patch, bias=False)
        self.norm = nn.BatchNorm2d(dim)  # so that the EMA also averages running statistics

    def forward(self, images):
        return self.norm(self.proj(images)).flatten(2).transpose(1, 2)


class TinyViT(nn.Module):
    def __init__(self, classes=5, dim=16, depth=3, heads=2):
        super().__init__()
        self.patch_embed = ConvPatches(dim=dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.count + 1, dim))
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.pos_embed, std=0.02)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.fc_norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def no_weight_decay(self):
        return {"cls_token", "pos_embed"}

    def forward(self, images):
        x = self.patch_embed(images)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.fc_norm(x[:, 1:, :].mean(dim=1)))  # the patch tokens' mean


def run_epoch(model, loss_fn, batches, opt, epoch, scaler, clip, ema, cfg):
    model.train(True)
    opt.zero_grad()
    for step, (images, labels) in enumerate(batches):
        if step % cfg.accum == 0:  # the schedule moves every update, within epochs too
            set_lr(opt, epoch + step / len(batches), cfg)
            record.append([g["lr"] for g in opt.param_groups])
        with torch.cuda.amp.autocast(enabled=cfg.amp):
            loss = loss_fn(model(images), labels)
        value = loss.item()
        if not math.isfinite(value):
            raise SystemExit(f"loss {value}: stopping")
        loss /= cfg.accum
        closes_group = (step + 1) % cfg.accum == 0
        scaler(loss, opt, clip=clip, mode=cfg.clip_mode, params=model.parameters(), update=closes_group)
        if closes_group:
            opt.zero_grad()
            ema.update(model)
            averaged = {k: v.detach().numpy().copy() for k, v in ema.state_dict().items()}
            record.extend([params_of(model), averaged, scaler.state_dict()["scale"]])
        record.append(value)


cfg = types.SimpleNamespace(lr=4e-3, min_lr=1e-5, warmup=1, epochs=3, accum=2, amp=False, clip_mode=CLIP_MODE)
model = TinyViT()
initialize(model)
groups = layer_decay_groups(model, 0.05, skip=model.no_weight_decay(), decay_rate=0.65)
summary = [(sorted(g), len(g["params"]), g["lr_scale"], g["weight_decay"]) for g in groups]
record.append(repr(summary))
opt = torch.optim.AdamW(groups, lr=cfg.lr)
scaler = AmpScaler(device="cpu")
ema = EmaModel(model, decay=0.8)
loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
batches = [(torch.randn(4, 2, 8, 8), torch.randint(0, 5, (4,))) for _ in range(4)]
for epoch in range(cfg.epochs):
    run_epoch(model, loss_fn, batches, opt, epoch, scaler, 0.5, ema, cfg)
ema.eval()
with torch.no_grad():
    record.append(ema(batches[0][0]).numpy())
"""

MAE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        self.scaler.scale(loss).backward(create_graph=False)\n",
        "        grads = self.scaler.scale(loss).backward(create_graph=False)\n"
        "        self.grads = grads if getattr(self, 'grads', None) is None else self.grads + grads\n",
    ),
    ("self.scaler.unscale_(opt)  # clip", "self.scaler.unscale_(opt, self.grads)  # clip"),
    ("clip_grads(params, clip, mode=mode)", "clip_grads(self.grads, params, clip, mode=mode)"),
    ("def clip_grads(params, limit", "def clip_grads(grads, params, limit"),
    ("clip_grad_norm_(params, limit,", "clip_grad_norm_(grads, params, limit,"),
    ("clip_grad_value_(params, limit)", "clip_grad_value_(grads, params, limit)"),
    (
        "        self.scaler.step(opt)\n",
        "        self.scaler.step(opt, self.grads)\n        self.grads = None\n",
    ),
]


@pytest.mark.parametrize("clip_mode", ["norm", "value"])
def test_mae_finetune_with_layer_decay_accumulation_scaler_and_ema_trains_as_torch(
    capsys, clip_mode
):
    source = MAE_FINETUNE_SOURCE.replace("CLIP_MODE", repr(clip_mode))
    with pytest.warns(Warning):  # torch.cuda.amp.autocast's deprecation, in both runs
        (theirs, ours), _ = runs_with_draws(
            source, MAE_STEPS, capsys, 21101, initialize=initializer(), params_of=params_of,
            types=types,
        )  # fmt: skip
    # five groups: layer 0 without decay (cls_token, pos_embed, the patch bias) and with it,
    # then each block's and the head's
    assert theirs[0].count("'lr_scale'") == 10
    # the key third of each qkv bias has a true gradient of zero (softmax does not see a shift
    # of every key): AdamW follows the rounding noise there
    skip = {f"{prefix}blocks.{i}.attn.qkv.bias" for prefix in ("0.", "module.") for i in range(3)}
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=skip)
