"""A program written here in the style of torchvision's mobile classifiers (MobileNetV2's
inverted residuals, EfficientNet's MBConv blocks with squeeze-excitation and stochastic depth)
and its classification reference's training loop, run under torch and, ported, under retrograd
from the same weights and draws (the harness: ``tests/real_ports.py``), narrow and shallow, in
float64.

What it exercises: ``make_divisible``; a conv-norm-activation ``nn.Sequential`` subclass that
builds its layers before ``super().__init__(*layers)`` (``padding = (kernel_size - 1) // 2 *
dilation``, ``bias = norm_layer is None``, ``activation_layer(**params)`` with ``{"inplace":
inplace}``, a ``self.__class__ ==`` check); ``nn.ReLU6``, ``nn.SiLU`` and ``partial(nn.SiLU,
inplace=True)``; inverted residual blocks (``int(round(inp * expand))``, depthwise
``groups=hidden``, ``self._is_cn``); squeeze-excitation (``nn.AdaptiveAvgPool2d(1)``, 1x1
convolutions, ``scale * input``); ``stochastic_depth`` in ``"row"`` mode (``torch.empty(size,
dtype=x.dtype, device=x.device)``, ``noise.bernoulli_(survival)``, ``noise.div_(survival)``) with
``result += input``; a block config over a ``@dataclass`` with static ``adjust_channels``/
``adjust_depth`` and ``copy.copy(cfg)`` per block, the drop probability growing with the block
index; ``isinstance`` checks of the config; the init loops (``kaiming_normal_(m.weight,
mode="fan_out")``, ``isinstance(m, (nn.BatchNorm2d, nn.GroupNorm))``, ``1.0 /
math.sqrt(m.out_features)`` uniform ranges); ``nn.functional.adaptive_avg_pool2d(x, (1, 1))``
and ``torch.flatten(x, 1)``. The loop: ``nn.CrossEntropyLoss(label_smoothing=...)``, SGD with
``nesterov``, ``LinearLR`` warm-up then ``CosineAnnealingLR`` under ``SequentialLR(...,
milestones=[...])``, ``nn.utils.clip_grad_norm_``, an EMA subclass of
``torch.optim.swa_utils.AveragedModel(model, device, ema_avg, use_buffers=True)`` updated each
step with ``n_averaged.fill_(0)`` during warm-up, a top-k accuracy under
``torch.inference_mode()`` (``topk``, ``.t()``, ``eq``, ``sum(dtype=torch.float32)``), and
``.to(device, non_blocking=True)``.

Both runs draw ``torch.randn`` and ``Tensor.bernoulli_`` (stochastic depth's noise) from one
seeded NumPy stream; the classifier's dropout is 0 (its masks are each library's own). Only the
gradient lines differ.
"""

from __future__ import annotations

import collections.abc
import itertools

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port, run_source

MOBILE_NETS_SOURCE = """
import copy
import warnings
import dataclasses
from functools import partial
from typing import Callable, Optional


def make_divisible(v: float, divisor: int = 8) -> int:
    rounded = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * v else rounded  # never lose over 10%


class ConvBNAct(nn.Sequential):
    def __init__(self, c_in, c_out, kernel_size=3, stride=1, groups=1, dilation=1,
                 norm_layer: Optional[Callable] = nn.BatchNorm2d,
                 activation_layer: Optional[Callable] = nn.ReLU, inplace: Optional[bool] = True):
        padding = dilation * ((kernel_size - 1) // 2)
        layers = [nn.Conv2d(c_in, c_out, kernel_size, stride, padding, dilation=dilation,
                            groups=groups, bias=norm_layer is None)]
        if norm_layer is not None:
            layers.append(norm_layer(c_out))
        if activation_layer:
            kwargs = {} if inplace is None else {"inplace": inplace}
            layers += [activation_layer(**kwargs)]
        super().__init__(*layers)
        self.out_channels = c_out
        if self.__class__ == ConvBNAct and kernel_size > 7:
            warnings.warn("large kernels are slow here")


class SqueezeExcite(nn.Module):
    def __init__(self, channels, squeezed, act=nn.SiLU):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)
        self.act, self.gate = act(), nn.Sigmoid()

    def forward(self, x):
        scale = self.gate(self.expand(self.act(self.reduce(self.pool(x)))))
        return scale * x


def stochastic_depth(x, p: float, mode: str, training: bool = True):
    if not training or p == 0.0:
        return x
    survival = 1.0 - p
    size = [x.shape[0]] + [1] * (x.ndim - 1) if mode == "row" else [1] * x.ndim
    noise = torch.empty(size, dtype=x.dtype, device=x.device)
    noise = noise.bernoulli_(survival)
    if survival > 0.0:
        noise.div_(survival)
    return x * noise


def reset_weights(net, uniform_head):
    for layer in net.modules():
        if isinstance(layer, nn.Conv2d):
            nn.init.kaiming_normal_(layer.weight, mode="fan_out")  # fan_out: as depthwise nets do
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
        if isinstance(layer, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.ones_(layer.weight)
            nn.init.zeros_(layer.bias)
        if isinstance(layer, nn.Linear):
            if uniform_head:
                bound = 1.0 / math.sqrt(layer.out_features)
                nn.init.uniform_(layer.weight, -bound, bound)
            else:
                nn.init.normal_(layer.weight, mean=0.0, std=0.01)
            nn.init.zeros_(layer.bias)


class InvertedBlock(nn.Module):
    def __init__(self, inp, oup, stride, expand, norm_layer=nn.BatchNorm2d):
        super().__init__()
        hidden = int(round(inp * expand))
        self.use_skip = stride == 1 and inp == oup
        relu6 = dict(norm_layer=norm_layer, activation_layer=nn.ReLU6)
        parts = [] if expand == 1 else [ConvBNAct(inp, hidden, 1, **relu6)]
        parts += [
            ConvBNAct(hidden, hidden, stride=stride, groups=hidden, **relu6),
            nn.Conv2d(hidden, oup, 1, bias=False),
            norm_layer(oup),
        ]
        self.conv = nn.Sequential(*parts)
        self._is_cn = stride > 1

    def forward(self, x):
        return x + self.conv(x) if self.use_skip else self.conv(x)


class MobileV2(nn.Module):
    def __init__(self, num_classes=10, width_mult=1.0, stages=((1, 16, 1, 1), (6, 24, 2, 2)),
                 last=1280, dropout=0.2):
        super().__init__()
        c_in = make_divisible(32 * width_mult)
        self.last_channel = make_divisible(last * max(1.0, width_mult))
        blocks = [ConvBNAct(3, c_in, stride=2, activation_layer=nn.ReLU6)]
        for t, c, n, s in stages:
            c_out = make_divisible(c * width_mult)
            for i in range(n):
                blocks.append(InvertedBlock(c_in, c_out, s if i == 0 else 1, expand=t))
                c_in = c_out
        blocks.append(ConvBNAct(c_in, self.last_channel, 1, activation_layer=nn.ReLU6))
        self.features = nn.Sequential(*blocks)
        head = nn.Linear(self.last_channel, num_classes)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), head)
        reset_weights(self, uniform_head=False)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


@dataclasses.dataclass
class StageConfig:
    expand: float
    kernel: int
    stride: int
    c_in: int
    c_out: int
    layers: int

    @staticmethod
    def adjust_channels(channels: int, width_mult: float) -> int:
        return make_divisible(channels * width_mult)

    @staticmethod
    def adjust_depth(layers: int, depth_mult: float) -> int:
        return int(math.ceil(layers * depth_mult))


def stage(expand, kernel, stride, c_in, c_out, layers, width_mult=1.0, depth_mult=1.0):
    return StageConfig(expand, kernel, stride, StageConfig.adjust_channels(c_in, width_mult),
                       StageConfig.adjust_channels(c_out, width_mult),
                       StageConfig.adjust_depth(layers, depth_mult))


class MBConv(nn.Module):
    def __init__(self, cfg: StageConfig, drop: float, norm_layer):
        super().__init__()
        self.use_skip = cfg.stride == 1 and cfg.c_in == cfg.c_out
        act = partial(nn.SiLU, inplace=True)
        hidden = StageConfig.adjust_channels(cfg.c_in, cfg.expand)
        norm_act = dict(norm_layer=norm_layer, activation_layer=act)
        parts = []
        if hidden != cfg.c_in:
            parts.append(ConvBNAct(cfg.c_in, hidden, 1, **norm_act))
        parts += [
            ConvBNAct(hidden, hidden, cfg.kernel, cfg.stride, groups=hidden, **norm_act),
            SqueezeExcite(hidden, max(1, cfg.c_in // 4)),
            ConvBNAct(hidden, cfg.c_out, 1, norm_layer=norm_layer, activation_layer=None),
        ]
        self.block = nn.Sequential(*parts)
        self.drop = drop

    def forward(self, x):
        result = self.block(x)
        if self.use_skip:
            result = stochastic_depth(result, self.drop, "row", self.training)
            result += x
        return result


class EffNet(nn.Module):
    def __init__(self, stages, drop_path=0.2, num_classes=10, dropout=0.2,
                 norm_layer=nn.BatchNorm2d):
        super().__init__()
        if not all(isinstance(s, StageConfig) for s in stages):
            raise TypeError("stages must be StageConfig")
        parts = [ConvBNAct(3, stages[0].c_in, stride=2, norm_layer=norm_layer,
                           activation_layer=nn.SiLU)]
        total = sum(s.layers for s in stages)
        index = 0
        for cfg in stages:
            for i in range(cfg.layers):
                block_cfg = copy.copy(cfg)
                if i > 0:
                    block_cfg.c_in, block_cfg.stride = block_cfg.c_out, 1
                parts.append(MBConv(block_cfg, drop_path * index / total, norm_layer))
                index += 1
        self.features = nn.Sequential(*parts)
        head = nn.Linear(stages[-1].c_out, num_classes)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), head)
        reset_weights(self, uniform_head=True)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class EMA(torch.optim.swa_utils.AveragedModel):
    def __init__(self, model, decay: float, device="cpu"):
        def blend(avg, new, n):
            return decay * avg + (1 - decay) * new
        super().__init__(model, device, blend, use_buffers=True)


def topk_accuracy(logits, target, ks=(1,)):
    with torch.inference_mode():
        _, best = logits.topk(max(ks), 1, True, True)
        hits = best.t().eq(target[None])
        return [hits[:k].flatten().sum(dtype=torch.float32) * (100.0 / target.size(0)) for k in ks]


def train(args, model, dataset):
    device = torch.device(args.device or "cpu")
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size)
    smoothed_ce = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay, nesterov=True)
    lr_sched = torch.optim.lr_scheduler
    warmup = lr_sched.LinearLR(optimizer, start_factor=args.warmup_factor,
                               total_iters=args.warmup_epochs)
    cosine = lr_sched.CosineAnnealingLR(optimizer, T_max=args.epochs - args.warmup_epochs,
                                        eta_min=args.lr_min)
    schedule = lr_sched.SequentialLR(optimizer, schedulers=[warmup, cosine],
                                     milestones=[args.warmup_epochs])
    ema = EMA(model, device=device, decay=args.ema_decay)
    for epoch in range(args.epochs):
        model.train()
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            logits = model(images)
            loss = smoothed_ce(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.clip_grad_norm)
            optimizer.step()
            ema.update_parameters(model)
            if epoch < args.warmup_epochs:
                ema.n_averaged.fill_(0)  # keep copying the weights while warming up
            top1, top3 = topk_accuracy(logits, labels, ks=(1, 3))
            record.append([loss.item(), top1.item(), top3.item(), optimizer.param_groups[0]["lr"]])
        schedule.step()
        for net in (model, ema):
            net.eval()
            with torch.inference_mode():
                for images, labels in loader:
                    logits = net(images.to(device))
                    record.append([smoothed_ce(logits, labels).item(), logits])
    return ema
"""

MOBILE_NETS_STEP = [
    (
        "            loss.backward()\n"
        "            nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.clip_grad_norm)\n"
        "            optimizer.step()",
        "            grads = loss.backward()\n"
        "            nn.utils.clip_grad_norm_(\n"
        "                grads, model.parameters(), max_norm=args.clip_grad_norm\n"
        "            )\n"
        "            optimizer.step(grads)",
    )
]


def _patch_draws(monkeypatch, lib, seed):
    """``torch.randn`` and ``Tensor.bernoulli_`` from one seeded stream."""
    rng = np.random.default_rng(seed)

    def bernoulli_(self, p=0.5, *, generator=None):
        self.copy_(lib.tensor(rng.uniform(size=tuple(self.shape)) < p, dtype=self.dtype))
        return self

    monkeypatch.setattr(lib.Tensor, "bernoulli_", bernoulli_)


@pytest.mark.parametrize("arch", ["mobilenet_v2", "efficientnet"])
def test_mobile_classifiers_train_with_ema_as_torch(monkeypatch, arch):
    rng = np.random.default_rng(42)
    images = rng.standard_normal((8, 3, 16, 16))
    targets = rng.integers(0, 6, 8)
    args = type(
        "Args",
        (),
        dict(
            device="cpu",
            batch_size=4,
            label_smoothing=0.1,
            lr=0.2,
            momentum=0.9,
            weight_decay=1e-4,
            epochs=3,
            warmup_epochs=1,
            lr_min=0.01,
            warmup_factor=0.1,
            ema_decay=0.8,
            clip_grad_norm=2.0,
        ),
    )
    state, records = {}, []
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    try:
        for lib in (torch, rg):
            lib.set_default_dtype(lib.float64)
            torch.manual_seed(0)
            source = (
                MOBILE_NETS_SOURCE if lib is torch else port(MOBILE_NETS_SOURCE, MOBILE_NETS_STEP)
            )
            record = []
            names = run_source(
                source, lib, record=record, collections=collections, itertools=itertools
            )
            if arch == "mobilenet_v2":
                model = names["MobileV2"](
                    num_classes=6,
                    width_mult=0.25,
                    dropout=0.0,
                    stages=[[1, 16, 1, 1], [6, 24, 2, 2]],
                )
                assert model.last_channel == 1280 and model.features[2]._is_cn
            else:
                cfg = names["partial"](names["stage"], width_mult=0.25, depth_mult=0.5)
                stages = [cfg(1, 3, 1, 32, 16, 1), cfg(6, 3, 2, 16, 24, 2), cfg(6, 5, 1, 24, 24, 3)]
                model = names["EffNet"](
                    stages,
                    drop_path=0.5,
                    dropout=0.0,
                    num_classes=6,
                    norm_layer=names["partial"](lib.nn.BatchNorm2d, eps=1e-03),
                )
                drops = [m.drop for m in model.modules() if type(m).__name__ == "MBConv"]
                assert drops == [0.0, 0.5 / 4, 1.0 / 4, 1.5 / 4]  # depth_mult: 1, 1 and 2 blocks
            if not state:
                state.update({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
            _patch_draws(monkeypatch, lib, 43)
            dataset = lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(targets))
            ema = names["train"](args, model, dataset)
            monkeypatch.undo()
            record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
            record.append(
                {k: v.detach().numpy().copy() for k, v in ema.module.state_dict().items()}
            )
            flat = [
                item for entry in record for item in (entry if isinstance(entry, list) else [entry])
            ]
            records.append([r.detach().numpy() if hasattr(r, "detach") else r for r in flat])
    finally:
        torch.set_default_dtype(previous)
        rg.set_default_dtype(our_previous)
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
