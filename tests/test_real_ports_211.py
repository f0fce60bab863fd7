# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd (the harness: ``tests/real_ports.py``): the
fine-tuning loop of facebookresearch/mae as its authors wrote it, over a small ViT, trained a
few updates against torch's run of the same code from the same weights and draws.

- ``util/lr_decay.py``'s ``param_groups_lrd`` (layer-wise lr decay: one group per layer and
  decay kind, each with its ``lr_scale``; 1-d parameters and ``no_weight_decay`` names without
  weight decay) and ``get_layer_id_for_vit``;
- ``util/lr_sched.py``'s ``adjust_learning_rate`` (linear warmup, then half-cycle cosine, per
  iteration, ``param_group["lr"] = lr * param_group["lr_scale"]``);
- ``engine_finetune.py``'s ``train_one_epoch`` with gradient accumulation (``loss /=
  accum_iter``, ``update_grad=(data_iter_step + 1) % accum_iter == 0``);
- timm's ``NativeScaler`` (``utils/cuda.py``: ``torch.amp.GradScaler(device=device)``, the
  ``unscale_`` before ``dispatch_clip_grad``'s ``clip_grad_norm_`` or ``clip_grad_value_``,
  ``step``, ``update``) and ``ModelEmaV2`` (``utils/model_ema.py``: ``deepcopy``, ``zip`` of
  both ``state_dict().values()`` under ``no_grad``, ``ema_v.copy_(update_fn(ema_v,
  model_v))``, which truncates into the int64 ``num_batches_tracked`` as torch does);
- a convolutional patch embedding (``Conv2d(bias=False)`` then ``BatchNorm2d``), so that the
  EMA also averages running statistics and ``num_batches_tracked``.

The lines changed: the ``import`` lines and the gradient lines (``backward()`` returns the
gradients, which the scaler sums over the accumulation steps and hands to ``unscale_``,
clipping and ``step``).
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


MAE_FINETUNE_SOURCE = '''
import math
from copy import deepcopy
import torch
import torch.nn as nn
import torch.nn.functional as F


# -- util/lr_decay.py --------------------------------------------------------------------
def param_groups_lrd(model, weight_decay=0.05, no_weight_decay_list=[], layer_decay=.75):
    """
    Parameter groups for layer-wise lr decay
    Following BEiT: https://github.com/microsoft/unilm/blob/master/beit/optim_factory.py#L58
    """
    param_group_names = {}
    param_groups = {}

    num_layers = len(model.blocks) + 1

    layer_scales = list(layer_decay ** (num_layers - i) for i in range(num_layers + 1))

    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue

        # no decay: all 1D parameters and model specific ones
        if p.ndim == 1 or n in no_weight_decay_list:
            g_decay = "no_decay"
            this_decay = 0.
        else:
            g_decay = "decay"
            this_decay = weight_decay

        layer_id = get_layer_id_for_vit(n, num_layers)
        group_name = "layer_%d_%s" % (layer_id, g_decay)

        if group_name not in param_group_names:
            this_scale = layer_scales[layer_id]

            param_group_names[group_name] = {
                "lr_scale": this_scale,
                "weight_decay": this_decay,
                "params": [],
            }
            param_groups[group_name] = {
                "lr_scale": this_scale,
                "weight_decay": this_decay,
                "params": [],
            }

        param_group_names[group_name]["params"].append(n)
        param_groups[group_name]["params"].append(p)

    return list(param_groups.values())


def get_layer_id_for_vit(name, num_layers):
    """
    Assign a parameter with its layer id
    Following BEiT: https://github.com/microsoft/unilm/blob/master/beit/optim_factory.py#L33
    """
    if name in ['cls_token', 'pos_embed']:
        return 0
    elif name.startswith('patch_embed'):
        return 0
    elif name.startswith('blocks'):
        return int(name.split('.')[1]) + 1
    else:
        return num_layers


# -- util/lr_sched.py --------------------------------------------------------------------
def adjust_learning_rate(optimizer, epoch, args):
    """Decay the learning rate with half-cycle cosine after warmup"""
    if epoch < args.warmup_epochs:
        lr = args.lr * epoch / args.warmup_epochs
    else:
        lr = args.min_lr + (args.lr - args.min_lr) * 0.5 * \\
            (1. + math.cos(math.pi * (epoch - args.warmup_epochs) / (args.epochs - args.warmup_epochs)))
    for param_group in optimizer.param_groups:
        if "lr_scale" in param_group:
            param_group["lr"] = lr * param_group["lr_scale"]
        else:
            param_group["lr"] = lr
    return lr


# -- timm/utils/clip_grad.py, timm/utils/cuda.py -------------------------------------------
def dispatch_clip_grad(parameters, value: float, mode: str = 'norm', norm_type: float = 2.0):
    """ Dispatch to gradient clipping method

    Args:
        parameters (Iterable): model parameters to clip
        value (float): clipping value/factor/norm, mode dependant
        mode (str): clipping mode, one of 'norm', 'value', 'agc'
        norm_type (float): p-norm, default 2.0
    """
    if mode == 'norm':
        torch.nn.utils.clip_grad_norm_(parameters, value, norm_type=norm_type)
    elif mode == 'value':
        torch.nn.utils.clip_grad_value_(parameters, value)
    else:
        assert False, f"Unknown clip mode ({mode})."


class NativeScaler:
    state_dict_key = "amp_scaler"

    def __init__(self, device='cuda'):
        try:
            self._scaler = torch.amp.GradScaler(device=device)
        except (AttributeError, TypeError) as e:
            self._scaler = torch.cuda.amp.GradScaler()

    def __call__(
            self,
            loss,
            optimizer,
            clip_grad=None,
            clip_mode='norm',
            parameters=None,
            create_graph=False,
            need_update=True,
    ):
        self._scaler.scale(loss).backward(create_graph=create_graph)
        if need_update:
            if clip_grad is not None:
                assert parameters is not None
                self._scaler.unscale_(optimizer)  # unscale the gradients of optimizer's assigned params in-place
                dispatch_clip_grad(parameters, clip_grad, mode=clip_mode)
            self._scaler.step(optimizer)
            self._scaler.update()

    def state_dict(self):
        return self._scaler.state_dict()

    def load_state_dict(self, state_dict):
        self._scaler.load_state_dict(state_dict)


# -- timm/utils/model_ema.py -------------------------------------------------------------
class ModelEmaV2(nn.Module):
    """ Model Exponential Moving Average V2 """
    def __init__(self, model, decay=0.9999, device=None):
        super().__init__()
        # make a copy of the model for accumulating moving average of weights
        self.module = deepcopy(model)
        self.module.eval()
        self.decay = decay
        self.device = device  # perform ema on different device from model if set
        if self.device is not None:
            self.module.to(device=device)

    def _update(self, model, update_fn):
        with torch.no_grad():
            for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                if self.device is not None:
                    model_v = model_v.to(device=self.device)
                ema_v.copy_(update_fn(ema_v, model_v))

    def update(self, model):
        self._update(model, update_fn=lambda e, m: self.decay * e + (1. - self.decay) * m)

    def set(self, model):
        self._update(model, update_fn=lambda e, m: m)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


# -- a small ViT (timm's vision_transformer.py, its pieces kept) ----------------------------
class Attention(nn.Module):
    def __init__(self, dim, num_heads=2, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=2.):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads=num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Linear(int(dim * mlp_ratio), dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x


class PatchEmbed(nn.Module):
    def __init__(self, img_size=8, patch_size=4, in_chans=2, embed_dim=16):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size, bias=False)
        self.norm = nn.BatchNorm2d(embed_dim)

    def forward(self, x):
        return self.norm(self.proj(x)).flatten(2).transpose(1, 2)


class VisionTransformer(nn.Module):
    def __init__(self, num_classes=5, embed_dim=16, depth=3, num_heads=2, global_pool=True):
        super().__init__()
        self.patch_embed = PatchEmbed(embed_dim=embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches + 1, embed_dim))
        torch.nn.init.normal_(self.cls_token, std=.02)
        torch.nn.init.normal_(self.pos_embed, std=.02)
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads) for i in range(depth)])
        self.global_pool = global_pool
        self.fc_norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)

    def no_weight_decay(self):
        return {'pos_embed', 'cls_token'}

    def forward_features(self, x):
        B = x.shape[0]
        x = self.patch_embed(x)
        cls_tokens = self.cls_token.expand(B, -1, -1)  # stole cls_tokens impl from Phil Wang, thanks
        x = torch.cat((cls_tokens, x), dim=1)
        x = x + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        if self.global_pool:
            x = x[:, 1:, :].mean(dim=1)  # global pool without cls token
            outcome = self.fc_norm(x)
        return outcome

    def forward(self, x):
        return self.head(self.forward_features(x))


# -- engine_finetune.py's train_one_epoch (metric logging and mixup left out) ---------------
def train_one_epoch(model, criterion, data_loader, optimizer, epoch, loss_scaler, max_norm=0,
                    model_ema=None, args=None):
    model.train(True)
    accum_iter = args.accum_iter

    optimizer.zero_grad()

    for data_iter_step, (samples, targets) in enumerate(data_loader):

        # we use a per iteration (instead of per epoch) lr scheduler
        if data_iter_step % accum_iter == 0:
            lr = adjust_learning_rate(optimizer, data_iter_step / len(data_loader) + epoch, args)
            record.append([g["lr"] for g in optimizer.param_groups])

        with torch.cuda.amp.autocast(enabled=False):
            outputs = model(samples)
            loss = criterion(outputs, targets)

        loss_value = loss.item()

        if not math.isfinite(loss_value):
            print("Loss is {}, stopping training".format(loss_value))
            raise SystemExit(1)

        loss /= accum_iter
        loss_scaler(loss, optimizer, clip_grad=max_norm, clip_mode=args.clip_mode,
                    parameters=model.parameters(), create_graph=False,
                    need_update=(data_iter_step + 1) % accum_iter == 0)
        if (data_iter_step + 1) % accum_iter == 0:
            optimizer.zero_grad()
            if model_ema is not None:
                model_ema.update(model)
            record.append(params_of(model))
            record.append({k: v.detach().numpy().copy() for k, v in model_ema.state_dict().items()})
            record.append(loss_scaler.state_dict()["scale"])

        record.append(loss_value)


args = types.SimpleNamespace(lr=4e-3, min_lr=1e-5, warmup_epochs=1, epochs=3, accum_iter=2,
                             weight_decay=0.05, layer_decay=0.65, clip_grad=0.5, clip_mode=CLIP_MODE)
model = VisionTransformer()
initialize(model)
param_groups = param_groups_lrd(model, args.weight_decay, no_weight_decay_list=model.no_weight_decay(), layer_decay=args.layer_decay)
record.append(repr([(sorted(g.keys()), len(g["params"]), g["lr_scale"], g["weight_decay"]) for g in param_groups]))
optimizer = torch.optim.AdamW(param_groups, lr=args.lr)
loss_scaler = NativeScaler(device="cpu")
model_ema = ModelEmaV2(model, decay=0.8)
criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
data_loader = [(torch.randn(4, 2, 8, 8), torch.randint(0, 5, (4,))) for _ in range(4)]
for epoch in range(args.epochs):
    train_one_epoch(model, criterion, data_loader, optimizer, epoch, loss_scaler,
                    args.clip_grad, model_ema=model_ema, args=args)
model_ema.eval()
with torch.no_grad():
    record.append(model_ema(data_loader[0][0]).numpy())
'''

MAE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        self._scaler.scale(loss).backward(create_graph=create_graph)\n",
        "        grads = self._scaler.scale(loss).backward(create_graph=create_graph)\n"
        "        self.grads = grads if getattr(self, 'grads', None) is None else self.grads + grads\n",
    ),
    (
        "self._scaler.unscale_(optimizer)  # unscale",
        "self._scaler.unscale_(optimizer, self.grads)  # unscale",
    ),
    (
        "dispatch_clip_grad(parameters, clip_grad, mode=clip_mode)",
        "dispatch_clip_grad(self.grads, parameters, clip_grad, mode=clip_mode)",
    ),
    (
        "def dispatch_clip_grad(parameters, value",
        "def dispatch_clip_grad(grads, parameters, value",
    ),
    (
        "torch.nn.utils.clip_grad_norm_(parameters, value, norm_type=norm_type)",
        "torch.nn.utils.clip_grad_norm_(grads, parameters, value, norm_type=norm_type)",
    ),
    (
        "torch.nn.utils.clip_grad_value_(parameters, value)",
        "torch.nn.utils.clip_grad_value_(grads, parameters, value)",
    ),
    (
        "            self._scaler.step(optimizer)\n",
        "            self._scaler.step(optimizer, self.grads)\n            self.grads = None\n",
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
