"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
image classifiers written here in the style of torchvision's models (an Inception net with a
side classifier, a SqueezeNet-like net of Fire modules, a ShuffleNetV2-like net), trained by a
loop in the style of torchvision's classification reference, and a super-resolution net in the
style of sanghyun-son/EDSR-PyTorch:

- the training loop: weight-decay groups found by walking ``named_parameters(recurse=False)``
  and ``named_children`` by hand against ``torch.nn.modules.batchnorm._BatchNorm``,
  ``torch.nn.modules.instancenorm._InstanceNorm``, ``LayerNorm``, ``GroupNorm`` and
  ``LocalResponseNorm`` (norm layers in a group without decay), Nesterov SGD,
  ``CosineAnnealingLR`` after a ``LinearLR`` warm-up in a ``SequentialLR`` and
  ``get_last_lr()``, ``CrossEntropyLoss(label_smoothing=0.1)``, ``clip_grad_norm_``, ``with
  torch.cuda.amp.autocast(enabled=False)``, an exponential moving average (a
  ``swa_utils.AveragedModel(..., use_buffers=True)`` subclass with its own averaging function,
  ``n_averaged.fill_(0)`` during the warm-up) evaluated too, and top-k accuracy by
  ``logits.topk(k, 1, True, True)``, ``.t()``, ``.eq(labels[None])`` and ``hits[:k].flatten().
  sum(dtype=torch.float32)`` under ``torch.inference_mode()``; ``.to(device,
  non_blocking=True)``. 16 random images of 6 classes, 2 epochs of 2 batches of 8:
- the Inception net: ``namedtuple`` outputs in training and the tensor in evaluation,
  ``@torch.jit.unused``, ``torch.jit.is_scripting()``, ``trunc_normal_(..., a=-2, b=2)``, the
  ``FutureWarning`` of ``init_weights=None`` caught by ``warnings.catch_warnings(record=True)``,
  ``MaxPool2d(ceil_mode=True)``, ``F.adaptive_avg_pool2d(x, (4, 4))`` up from 2x2,
  ``F.relu(..., inplace=True)``, ``BatchNorm2d(eps=0.001)``, the side loss weighed by 0.3;
- the Fire net (1x1 and 3x3 expansions concatenated, ceil-mode pooling, ``kaiming_uniform_``
  with the last convolution ``normal_``, ``AdaptiveAvgPool2d((1, 1))``): its logits tie at 0
  after the final ReLU, so the accuracies (which of the tied classes ``topk`` takes is torch's
  partial sort's, unspecified) are left out;
- the ShuffleNetV2-like net (channel shuffle by ``view``/``torch.transpose``/``contiguous``,
  ``x.chunk(2, dim=1)``, depthwise convolutions, ``x.mean([2, 3])``) on 32x32 images.
- the super-resolution net, x2 and x3: a frozen ``Conv2d`` subclass whose ``weight.data``/
  ``bias.data`` are replaced and frozen by ``requires_grad = False``, residual blocks by
  ``.mul(scale)`` and ``out += x``, ``PixelShuffle(2)`` and ``(3)``, its own ``load_state_dict``
  copying through ``self.state_dict()[name].copy_(value)`` (the state dict's tensors must be
  the live ones) and skipping a tail of another factor (a ``copy_`` of the wrong shape
  raises), ``quantize`` by ``mul``/``clamp``/``round``/``div``, a PSNR with the luma weights by
  ``diff.new_tensor(...)``, Adam over ``filter(lambda p: p.requires_grad, ...)``,
  ``MultiStepLR``, ``L1Loss`` and ``clip_grad_value_``.

The lines changed: the gradient lines (``grads = loss.backward()``, ``clip_grad_norm_(grads,
...)``/``clip_grad_value_(grads, ...)``, ``optimizer.step(grads)``) and the ``import`` lines
naming ``torch``.
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

# -- the training loop ----------------------------------------------------------------------------
REFERENCE_SOURCE = """
import warnings
import collections
from typing import Any, List, Optional

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn import functional as F, init


class EMA(torch.optim.swa_utils.AveragedModel):
    # weights and buffers averaged as decay * average + (1 - decay) * current
    def __init__(self, net, decay, device="cpu"):
        def blend(averaged, current, n):
            return decay * averaged + (1 - decay) * current

        super().__init__(net, device, blend, use_buffers=True)


def topk_accuracy(logits, labels, ks=(1,)):
    with torch.inference_mode():
        if labels.ndim == 2:  # (one-hot or mixed targets)
            labels = labels.max(dim=1)[1]
        _, best = logits.topk(max(ks), 1, True, True)
        hits = best.t().eq(labels[None])
        return [hits[:k].flatten().sum(dtype=torch.float32) * (100.0 / labels.size(0)) for k in ks]


layers = torch.nn.modules
NORMS = (
    layers.batchnorm._BatchNorm,
    layers.instancenorm._InstanceNorm,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
)


def decay_groups(model: nn.Module, decay: float, norm_decay: Optional[float] = None) -> List[dict]:
    # no weight decay on normalization layers: walk the tree by hand, one level at a time
    found = {"norm": [], "rest": []}

    def visit(module):
        for _, p in module.named_parameters(recurse=False):
            if p.requires_grad:
                use_norm = norm_decay is not None and isinstance(module, NORMS)
                found["norm" if use_norm else "rest"].append(p)
        for _, child in module.named_children():
            visit(child)

    visit(model)
    rates = {"norm": norm_decay, "rest": decay}
    return [{"params": ps, "weight_decay": rates[k]} for k, ps in found.items() if ps]


def one_epoch(model, criterion, optimizer, batches, device, epoch, cfg, ema=None):
    model.train()
    for i, (x, y) in enumerate(batches):
        x, y = x.to(device), y.to(device)
        with torch.cuda.amp.autocast(enabled=False):
            out = model(x)
            loss = loss_of(criterion, out, y)
        optimizer.zero_grad()
        loss.backward()
        if cfg.clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        optimizer.step()
        if ema is not None and i % cfg.ema_every == 0:
            ema.update_parameters(model)
            if epoch < cfg.warmup_epochs:
                ema.n_averaged.fill_(0)  # (during the warm-up the average restarts)
        if isinstance(out, tuple):
            out = out[0]
        top1, top3 = topk_accuracy(out, y, ks=(1, 3))
        record.append([loss.item(), top1.item(), top3.item()])


def evaluate(model, criterion, batches, device, tag=""):
    model.eval()
    seen, correct, losses = 0, 0.0, []
    with torch.inference_mode():
        for x, y in batches:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            out = model(x)
            losses.append(criterion(out, y).item())
            correct += topk_accuracy(out, y)[0].item() * x.shape[0]
            seen += x.shape[0]
    record.append(out.numpy().copy())
    print(f"{tag} top-1 {correct / seen:.2f} loss {np.mean(losses):.4f}")


def run(cfg, model):
    device = torch.device(cfg.device)
    initialize(model)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.SGD(
        decay_groups(model, cfg.weight_decay, norm_decay=0.0),
        lr=cfg.lr,
        momentum=0.9,
        weight_decay=cfg.weight_decay,
        nesterov=True,
    )
    sched = torch.optim.lr_scheduler
    n_warm = cfg.warmup_epochs
    warm = sched.LinearLR(optimizer, start_factor=0.1, total_iters=n_warm)
    cosine = sched.CosineAnnealingLR(optimizer, T_max=cfg.epochs - n_warm)
    schedule = sched.SequentialLR(optimizer, [warm, cosine], milestones=[n_warm])
    ema = EMA(model, device=device, decay=0.8)
    for epoch in range(cfg.epochs):
        one_epoch(model, criterion, optimizer, train_batches, device, epoch, cfg, ema)
        schedule.step()
        record.append(schedule.get_last_lr())
        evaluate(model, criterion, test_batches, device)
        evaluate(ema, criterion, test_batches, device, tag="EMA")
    record.append(params_of(model))  # the trained weights
    stats = model.state_dict()
    record.append({name: stats[name].numpy().copy() for name in stats if "running" in name})
    record.append(params_of(ema.module))


class Config:
    device = "cpu"
    lr = 0.01
    weight_decay = 1e-4
    epochs = 2
    warmup_epochs = 1
    ema_every = 1
    clip = 5.0


train_batches = [(images[i : i + 8], labels[i : i + 8]) for i in range(0, len(images), 8)]
test_batches = [(images[:6], labels[:6])]
"""

REFERENCE_STEPS = [
    (
        "        loss.backward()\n        if cfg.clip is not None:\n"
        "            nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)\n"
        "        optimizer.step()",
        "        grads = loss.backward()\n        if cfg.clip is not None:\n"
        "            nn.utils.clip_grad_norm_(grads, model.parameters(), cfg.clip)\n"
        "        optimizer.step(grads)",
    ),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


def train_as_torch(model_source, driver, capsys, seed, size=16):
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((16, 3, size, size)).astype(np.float32)
    labels = rng.integers(0, 6, 16)
    records, logs = runs_with_draws(
        REFERENCE_SOURCE + model_source + driver,
        REFERENCE_STEPS,
        capsys,
        seed=seed,
        initialize=initializer(),
        params_of=params_of,
        make_images=lambda lib: lib.tensor(images),
        make_labels=lambda lib: lib.tensor(labels),
    )
    return records[1], records[0], logs


def losses_only(record):
    """``record`` with the training steps' ``[loss, top1, top3]`` cut to ``[loss]``."""
    return [r[:1] if isinstance(r, list) and len(r) == 3 else r for r in record]


def assert_trained_alike(ours, theirs, rtol=5e-5, atol=2e-6, params_atol=1e-5):
    """Losses, accuracies, rates and evaluated outputs within float32 rounding, and the
    parameters and running statistics (dicts) within ``params_atol``."""
    split = [[r for r in record if isinstance(r, dict)] for record in (ours, theirs)]
    rest = [[r for r in record if not isinstance(r, dict)] for record in (ours, theirs)]
    assert_records_agree(*rest, rtol=rtol, atol=atol)
    assert_records_agree(*split, rtol=0, atol=params_atol)


# -- the Inception net ----------------------------------------------------------------------------
INCEPTION_SOURCE = """
Outputs = collections.namedtuple("Outputs", ["logits", "aux_logits"])


class ConvBN(nn.Module):
    def __init__(self, c_in: int, c_out: int, **conv: Any) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, bias=False, **conv)
        self.bn = nn.BatchNorm2d(c_out, eps=0.001)

    def forward(self, t: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv(t)), inplace=True)


class Mixed(nn.Module):
    # four parallel branches, concatenated along the channels
    def __init__(self, c_in: int, c1: int, c3_mid: int, c3: int, c_pool: int) -> None:
        super().__init__()
        self.one = ConvBN(c_in, c1, kernel_size=1)
        self.three = nn.Sequential(
            ConvBN(c_in, c3_mid, kernel_size=1), ConvBN(c3_mid, c3, kernel_size=3, padding=1)
        )
        self.pooled = nn.Sequential(
            nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True),
            ConvBN(c_in, c_pool, kernel_size=1),
        )

    def forward(self, t: Tensor) -> Tensor:
        return torch.cat([self.one(t), self.three(t), self.pooled(t)], 1)


class SideHead(nn.Module):
    def __init__(self, c_in: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.conv = ConvBN(c_in, 4, kernel_size=1)
        self.fc1 = nn.Linear(64, 16)
        self.fc2 = nn.Linear(16, classes)
        self.drop = nn.Dropout(dropout)

    def forward(self, h: Tensor) -> Tensor:
        h = self.conv(F.adaptive_avg_pool2d(h, (4, 4)))  # (up from 2x2 here)
        h = F.relu(self.fc1(torch.flatten(h, 1)), inplace=True)
        return self.fc2(self.drop(h))


class TinyInception(nn.Module):
    def __init__(self, classes: int = 6, aux: bool = True, init_weights: Optional[bool] = None,
                 dropout: float = 0.2, dropout_aux: float = 0.7) -> None:
        super().__init__()
        if init_weights is None:
            warnings.warn("the default init will change: pass init_weights", FutureWarning)
            init_weights = True
        self.aux = aux
        self.stem = nn.Sequential(
            ConvBN(3, 8, kernel_size=3, stride=2, padding=1),
            nn.MaxPool2d(3, stride=2, ceil_mode=True),
        )
        self.mixed1 = Mixed(8, 4, 4, 8, 4)
        self.pool = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.mixed2 = Mixed(16, 8, 4, 8, 4)
        self.side = SideHead(16, classes, dropout_aux) if aux else None
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(20, classes)
        if init_weights:
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    torch.nn.init.trunc_normal_(m.weight, mean=0.0, std=0.05, a=-2, b=2)
                elif type(m) is nn.BatchNorm2d:
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

    @torch.jit.unused
    def pack(self, logits: Tensor, aux_logits: Optional[Tensor]):
        if self.training and self.aux:
            return Outputs(logits, aux_logits)
        return logits

    def forward(self, x: Tensor):
        x = self.pool(self.mixed1(self.stem(x)))
        aux_logits = self.side(x) if self.side is not None and self.training else None
        x = F.adaptive_avg_pool2d(self.mixed2(x), (1, 1))
        x = self.fc(self.drop(torch.flatten(x, 1)))
        if torch.jit.is_scripting():
            return Outputs(x, aux_logits)
        return self.pack(x, aux_logits)
"""

INCEPTION_DRIVER = """
def loss_of(criterion, out, y):
    if isinstance(out, Outputs):  # the side head's loss weighs 0.3, as fine-tuning does
        return criterion(out.logits, y) + 0.3 * criterion(out.aux_logits, y)
    return criterion(out, y)


with warnings.catch_warnings(record=True) as heard:
    warnings.simplefilter("always", FutureWarning)
    model = TinyInception(classes=6, dropout=0.0, dropout_aux=0.0)
record.append([w.category.__name__ for w in heard])
run(Config(), model)
"""


def test_googlenet_trains_as_torch(capsys):
    ours, theirs, logs = train_as_torch(INCEPTION_SOURCE, INCEPTION_DRIVER, capsys, seed=56)
    assert theirs[0] == ["FutureWarning"]
    assert logs[0].count("top-1") == logs[1].count("top-1") == 4
    assert_trained_alike(ours, theirs)


# -- the Fire net ---------------------------------------------------------------------------------
FIRE_SOURCE = """
class Fire(nn.Module):
    # squeeze to a few channels, then expand by 1x1 and 3x3 side by side
    def __init__(self, c_in: int, squeeze: int, wide1: int, wide3: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(c_in, squeeze, kernel_size=1), nn.ReLU(inplace=True))
        self.wide1 = nn.Sequential(nn.Conv2d(squeeze, wide1, kernel_size=1), nn.ReLU(inplace=True))
        self.wide3 = nn.Sequential(nn.Conv2d(squeeze, wide3, 3, padding=1), nn.ReLU(inplace=True))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.squeeze(h)
        return torch.cat([self.wide1(h), self.wide3(h)], 1)


class FireNet(nn.Module):
    def __init__(self, classes: int = 6, dropout: float = 0.5) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, stride=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 4, 8, 8),
            Fire(16, 4, 8, 8),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 8, 16, 16),
        )
        last = nn.Conv2d(32, classes, kernel_size=1)
        self.head = nn.Sequential(
            nn.Dropout(dropout), last, nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1))
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is last:
                    init.normal_(m.weight, std=0.01)
                else:
                    init.kaiming_uniform_(m.weight, a=0)
                init.constant_(m.bias, 0)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.head(self.body(images)), 1)
"""

PLAIN_LOSS = """
def loss_of(criterion, out, y):
    return criterion(out, y)
"""


def test_squeezenet_trains_as_torch(capsys):
    driver = PLAIN_LOSS + "run(Config(), FireNet(classes=6, dropout=0.0))\n"
    ours, theirs, logs = train_as_torch(FIRE_SOURCE, driver, capsys, seed=57)
    assert logs[0].count("top-1") == 4
    assert_trained_alike(losses_only(ours), losses_only(theirs))


# -- the ShuffleNetV2-like net --------------------------------------------------------------------
SHUFFLE_SOURCE = """
def shuffle_channels(x: Tensor, groups: int) -> Tensor:
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    return torch.transpose(x, 1, 2).contiguous().view(b, -1, h, w)


def depthwise(c: int, stride: int) -> nn.Conv2d:
    return nn.Conv2d(c, c, 3, stride, 1, bias=False, groups=c)


class ShuffleUnit(nn.Module):
    # stride 1: half the channels pass through untouched; stride 2: both halves are convolved
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = c_out // 2
        if stride > 1:
            self.left = nn.Sequential(
                depthwise(c_in, stride), nn.BatchNorm2d(c_in),
                nn.Conv2d(c_in, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True),
            )
        else:
            self.left = nn.Sequential()
        c_right = c_in if stride > 1 else half
        self.right = nn.Sequential(
            nn.Conv2d(c_right, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True),
            depthwise(half, stride), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True),
        )

    def forward(self, x: Tensor) -> Tensor:  # (x: the unit's input)
        if self.stride == 1:
            kept, moved = x.chunk(2, dim=1)
            out = torch.cat((kept, self.right(moved)), dim=1)
        else:
            out = torch.cat((self.left(x), self.right(x)), dim=1)
        return shuffle_channels(out, 2)


class TinyShuffle(nn.Module):
    def __init__(self, widths: List[int], classes: int = 6) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 2, 1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        stages = []
        for c_in, c_out in zip(widths[:-2], widths[1:-1]):
            stages += [ShuffleUnit(c_in, c_out, 2), ShuffleUnit(c_out, c_out, 1)]
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(
            nn.Conv2d(widths[-2], widths[-1], 1, bias=False),
            nn.BatchNorm2d(widths[-1]),
            nn.ReLU(inplace=True),
        )
        self.fc = nn.Linear(widths[-1], classes)

    def forward(self, images: Tensor) -> Tensor:
        x = self.head(self.stages(self.stem(images)))
        return self.fc(x.mean([2, 3]))  # global average pool
"""


def test_shufflenet_v2_trains_as_torch(capsys):
    driver = PLAIN_LOSS + "run(Config(), TinyShuffle([8, 16, 32, 64], classes=6))\n"
    ours, theirs, logs = train_as_torch(SHUFFLE_SOURCE, driver, capsys, seed=58, size=32)
    assert logs[0].count("top-1") == logs[1].count("top-1") == 4
    assert_trained_alike(ours, theirs, params_atol=1e-4)


# -- the super-resolution net ---------------------------------------------------------------------
EDSR_SOURCE = """
import math
import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim import lr_scheduler as sched


def conv3(c_in, c_out, k=3, bias=True):
    return nn.Conv2d(c_in, c_out, k, padding=k // 2, bias=bias)


class ColorShift(nn.Conv2d):
    # a frozen 1x1 convolution adding (sign=1) or removing (sign=-1) the data set's mean color
    def __init__(self, pixel_max, mean=(0.45, 0.44, 0.40), std=(1.0, 1.0, 1.0), sign=-1):
        super(ColorShift, self).__init__(3, 3, kernel_size=1)
        std = torch.Tensor(std)
        self.weight.data = torch.eye(3).view(3, 3, 1, 1) / std[:, None, None, None]
        self.bias.data = sign * pixel_max * torch.Tensor(mean) / std
        for p in self.parameters():
            p.requires_grad = False


class Residual(nn.Module):
    def __init__(self, width, scale=1.0):
        super(Residual, self).__init__()
        self.body = nn.Sequential(conv3(width, width), nn.ReLU(True), conv3(width, width))
        self.scale = scale

    def forward(self, x):
        out = self.body(x).mul(self.scale)
        out += x
        return out


def upsampler(width, factor):
    if factor & (factor - 1) == 0:  # a power of two: one x2 pixel shuffle at a time
        layers = []
        for _ in range(int(math.log2(factor))):
            layers += [conv3(width, 4 * width), nn.PixelShuffle(2)]
        return nn.Sequential(*layers)
    if factor == 3:
        return nn.Sequential(conv3(width, 9 * width), nn.PixelShuffle(3))
    raise NotImplementedError(factor)


class SuperRes(nn.Module):
    def __init__(self, factor, width=8, blocks=2, pixel_max=255, res_scale=0.1):
        super(SuperRes, self).__init__()
        self.remove_mean = ColorShift(pixel_max)
        self.restore_mean = ColorShift(pixel_max, sign=1)
        self.head = conv3(3, width)
        residuals = [Residual(width, res_scale) for _ in range(blocks)]
        self.body = nn.Sequential(*residuals, conv3(width, width))
        self.tail = nn.Sequential(upsampler(width, factor), conv3(width, 3))

    def forward(self, x):
        x = self.head(self.remove_mean(x))
        skip = self.body(x)
        skip += x
        return self.restore_mean(self.tail(skip))

    def load_state_dict(self, weights, strict=True):
        # copy what fits into the live state; a tail made for another factor is skipped
        mine = self.state_dict()
        for name, value in weights.items():
            if name not in mine:
                if strict and 'tail' not in name:
                    raise KeyError('unexpected key {}'.format(name))
                continue
            if isinstance(value, nn.Parameter):
                value = value.data
            try:
                mine[name].copy_(value)
            except Exception:
                if 'tail' not in name:
                    shapes = (mine[name].size(), value.size())
                    raise RuntimeError('{}: {} in the model, {} given'.format(name, *shapes))


def quantize(img, pixel_max):
    step = 255 / pixel_max
    return img.mul(step).clamp(0, 255).round().div(step)


def psnr(sr, hr, factor, pixel_max, luma=False):
    diff = (sr - hr) / pixel_max
    border = factor if luma else factor + 6
    if luma:
        weights = diff.new_tensor([65.738, 129.057, 25.064]).view(1, 3, 1, 1) / 256
        diff = diff.mul(weights).sum(dim=1)
    inner = diff[..., border:-border, border:-border]
    return -10 * math.log10(inner.pow(2).mean())


net = SuperRes(factor)
initialize(net)
record.append(sorted(name for name, p in net.named_parameters() if not p.requires_grad))
trainable = filter(lambda p: p.requires_grad, net.parameters())
optimizer = optim.Adam(trainable, lr=1e-4, betas=(0.9, 0.999))
scheduler = sched.MultiStepLR(optimizer, [2], gamma=0.5)
l1 = nn.L1Loss()
net.train()
for low, high in pairs:
    optimizer.zero_grad()
    loss = l1(net(low), high)
    loss.backward()
    nn.utils.clip_grad_value_(net.parameters(), 0.5)
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), scheduler.get_last_lr()[0]])
net.eval()
with torch.no_grad():
    low, high = pairs[0]
    sr = quantize(net(low), 255)
    record.append(sr.numpy())
    record.append([psnr(sr, high, factor, 255), psnr(sr, high, factor, 255, luma=True)])
record.append(params_of(net))
net.load_state_dict(other_checkpoint, strict=False)
record.append(params_of(net))
"""

EDSR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "    loss.backward()\n    nn.utils.clip_grad_value_(net.parameters(), 0.5)\n"
        "    optimizer.step()",
        "    grads = loss.backward()\n    nn.utils.clip_grad_value_(grads, net.parameters(), 0.5)\n"
        "    optimizer.step(grads)",
    ),
]


@pytest.mark.parametrize("factor", [2, 3])
def test_edsr_trains_as_torch(capsys, factor):
    rng = np.random.default_rng(59)
    pairs = [
        (rng.uniform(0, 255, (2, 3, 6, 6)), rng.uniform(0, 255, (2, 3, 6 * factor, 6 * factor)))
        for _ in range(3)
    ]
    checkpoint = {
        "head.weight": rng.standard_normal((8, 3, 3, 3)),
        "tail.1.weight": np.zeros((1, 1)),
        "tail.9.bias": np.zeros(3),
    }

    def make_pairs(lib):
        return [
            (lib.tensor(a, dtype=lib.float32), lib.tensor(b, dtype=lib.float32)) for a, b in pairs
        ]

    def make_checkpoint(lib):  # a checkpoint of another factor: its tail does not fit
        return {k: lib.tensor(v, dtype=lib.float32) for k, v in checkpoint.items()}

    records, _ = runs_with_draws(
        EDSR_SOURCE,
        EDSR_STEPS,
        capsys,
        seed=59,
        initialize=initializer(),
        params_of=params_of,
        factor=factor,
        make_pairs=make_pairs,
        make_other_checkpoint=make_checkpoint,
    )
    ours, theirs = records[1], records[0]
    frozen = ["remove_mean.bias", "remove_mean.weight", "restore_mean.bias", "restore_mean.weight"]
    assert theirs[0] == frozen
    loaded = ours[-1]["0.head.weight"]  # copied through state_dict()'s live tensors
    np.testing.assert_allclose(loaded, checkpoint["head.weight"].astype(np.float32))
    assert_records_agree(ours, theirs, rtol=2e-5, atol=2e-4)
