"""A program written here in the style of facebookresearch/ConvNeXt's training code (its model,
schedules, parameter groups and training step) over timm-style stochastic depth and
label-smoothing loss, run under torch and, ported, under retrograd from the same weights and
draws (the harness: ``tests/real_ports.py``), narrow and shallow:

- a LayerNorm for ``channels_first`` (``u = x.mean(1, keepdim=True)``, ``(x -
  u).pow(2).mean(1, keepdim=True)``, ``self.weight[:, None, None] * x``) and ``channels_last``
  (``F.layer_norm(x, self.normalized_shape, ...)``); a block of a depthwise ``nn.Conv2d(dim,
  dim, kernel_size=7, padding=3, groups=dim)`` and ``permute``s around ``nn.Linear``
  pointwise layers, a layer scale ``nn.Parameter(init * torch.ones((dim)),
  requires_grad=True) if init > 0 else None``; drop rates from ``[x.item() for x in
  torch.linspace(0, rate, sum(depths))]``; ``self.apply(self._init_weights)`` with
  ``nn.init.trunc_normal_`` and ``self.head.weight.data.mul_(scale)``; ``x.mean([-2, -1])``;
- stochastic depth by ``x.new_empty(shape).bernoulli_(keep)`` and ``mask.div_(keep)``, a
  module with ``extra_repr``; label smoothing by ``-logprobs.gather(dim=-1,
  index=target.unsqueeze(1))``;
- ``optimizer.param_groups`` carrying ``lr_scale``, set each step by ``group["lr"] =
  lr_values[it] * group["lr_scale"]`` and ``group["weight_decay"] = wd_values[it]`` from
  NumPy cosine schedules with warmup; ``AdamW``; ``math.isfinite`` of ``loss.item()``;
  accuracy by ``(output.max(-1)[-1] == targets).float().mean()``.

``bernoulli_`` draws from one seeded stream in both runs. Only the gradient lines differ.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, port

CONVNEXT_SOURCE = """
class ChannelNorm(nn.Module):
    # LayerNorm over channels for NCHW ("channels_first") or NHWC ("channels_last") tensors
    def __init__(self, channels, eps=1e-6, layout="channels_last"):
        super().__init__()
        if layout not in ("channels_last", "channels_first"):
            raise NotImplementedError(layout)
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps, self.layout, self.normalized_shape = eps, layout, (channels,)

    def forward(self, x):
        if self.layout == "channels_last":
            w, b = self.weight, self.bias
            return F.layer_norm(x, self.normalized_shape, w, b, self.eps)
        u = x.mean(1, keepdim=True)
        var = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(var + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class StochasticDepth(nn.Module):
    def __init__(self, p=0.0):
        super().__init__()
        self.p = p

    def forward(self, x):
        if self.p == 0.0 or not self.training:
            return x
        keep = 1 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        mask.div_(keep)  # keep the expected value
        return x * mask

    def extra_repr(self):
        return "p={:.3f}".format(self.p)


class SmoothedCE(nn.Module):
    def __init__(self, eps=0.1):
        super().__init__()
        self.eps = eps

    def forward(self, logits, target):
        logprobs = F.log_softmax(logits, dim=-1)
        picked = -logprobs.gather(dim=-1, index=target.unsqueeze(1)).squeeze(1)
        return ((1.0 - self.eps) * picked - self.eps * logprobs.mean(dim=-1)).mean()


class NeXtBlock(nn.Module):
    def __init__(self, dim, drop=0.0, scale_init=1e-6):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = ChannelNorm(dim)
        self.expand, self.act = nn.Linear(dim, 4 * dim), nn.GELU()
        self.reduce = nn.Linear(4 * dim, dim)
        s = scale_init  # the layer scale, or none when 0
        self.gamma = nn.Parameter(s * torch.ones((dim)), requires_grad=True) if s > 0 else None
        self.drop = StochasticDepth(drop) if drop > 0.0 else nn.Identity()

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)  # NCHW -> NHWC for the linear layers
        y = self.reduce(self.act(self.expand(self.norm(y))))
        if self.gamma is not None:
            y = self.gamma * y
        return x + self.drop(y.permute(0, 3, 1, 2))


class TinyNeXt(nn.Module):
    def __init__(self, classes, depths=(1, 2), dims=(8, 12), drop_rate=0.0, scale_init=1e-6,
                 head_scale=1.0):
        super().__init__()
        stem = nn.Conv2d(3, dims[0], kernel_size=4, stride=4)  # patchify
        first_norm = ChannelNorm(dims[0], layout="channels_first")
        self.down = nn.ModuleList([nn.Sequential(stem, first_norm)])
        for c_in, c_out in zip(dims[:-1], dims[1:]):
            norm = ChannelNorm(c_in, layout="channels_first")
            self.down.append(nn.Sequential(norm, nn.Conv2d(c_in, c_out, kernel_size=2, stride=2)))
        rates = [r.item() for r in torch.linspace(0, drop_rate, sum(depths))]
        self.stages, first = nn.ModuleList(), 0
        for dim, depth in zip(dims, depths):
            blocks = [NeXtBlock(dim, rates[first + j], scale_init) for j in range(depth)]
            self.stages.append(nn.Sequential(*blocks))
            first += depth
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)
        self.apply(self._reset)
        self.head.weight.data.mul_(head_scale)
        self.head.bias.data.mul_(head_scale)

    def _reset(self, m):
        if isinstance(m, nn.Linear) or isinstance(m, nn.Conv2d):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.constant_(m.bias, 0)

    def forward(self, x):
        for down, stage in zip(self.down, self.stages):
            x = stage(down(x))
        return self.head(self.norm(x.mean([-2, -1])))  # global average pool


def cosine_values(start, end, epochs, per_epoch, warmup_epochs=0):
    warm = warmup_epochs * per_epoch
    print("warmup iterations: %d" % warm)
    ramp = np.linspace(0.0, start, warm) if warm else np.array([])
    rest = np.arange(epochs * per_epoch - warm)
    decay = np.array([end + 0.5 * (start - end) * (1 + math.cos(math.pi * i / len(rest)))
                      for i in rest])
    return np.concatenate((ramp, decay))


def param_groups(model, weight_decay):
    groups = {}
    for name, p in model.named_parameters():
        flat = p.ndim == 1 or name.endswith(".bias")  # norms, biases and layer scales
        key = "no_decay" if flat else "decay"
        decay = 0.0 if flat else weight_decay
        groups.setdefault(key, {"params": [], "weight_decay": decay, "lr_scale": 1.0})
        groups[key]["params"].append(p)
    return list(groups.values())


def fit_epoch(model, loss_fn, loader, opt, first_it, lr_values, wd_values):
    model.train(True)
    opt.zero_grad()
    for k, (x, y) in enumerate(loader):
        it = first_it + k
        for group in opt.param_groups:
            group["lr"] = lr_values[it] * group["lr_scale"]
            if group["weight_decay"] > 0:
                group["weight_decay"] = wd_values[it]
        out = model(x)
        loss = loss_fn(out, y)
        value = loss.item()
        if not math.isfinite(value):
            raise RuntimeError("loss is {}".format(value))
        loss.backward()
        opt.step()
        opt.zero_grad()
        acc = (out.max(-1)[-1] == y).float().mean()
        groups = opt.param_groups
        record.append([value, acc.item(), groups[1]["lr"], groups[0]["weight_decay"]])


model = TinyNeXt(classes=4, drop_rate=0.4, scale_init=0.1, head_scale=0.5)
initialize(model)
opt = optim.AdamW(param_groups(model, 0.05), lr=3e-3)
per_epoch = len(data_loader)
lr_values = cosine_values(3e-3, 1e-6, 2, per_epoch, warmup_epochs=1)
wd_values = cosine_values(0.05, 0.1, 2, per_epoch)
for epoch in range(2):
    fit_epoch(model, SmoothedCE(0.1), data_loader, opt, epoch * per_epoch, lr_values, wd_values)
model.eval()
with torch.no_grad():
    record.append(model(images[:2]))  # eval mode: no stochastic depth
"""

CONVNEXT_STEP = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    )
]


def test_convnext_matches_torch(monkeypatch, capsys):
    rng = np.random.default_rng(44)
    images = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    labels = rng.integers(0, 4, 4)
    records, logs, state = [], [], {}
    for lib in (torch, rg):
        draws = np.random.default_rng(4)

        def bernoulli_(self, p=0.5, *, generator=None, lib=lib, draws=draws):
            mask = (draws.random(tuple(self.shape)) < p).astype(np.float32)
            return self.copy_(lib.tensor(mask, dtype=self.dtype))

        monkeypatch.setattr(lib.Tensor, "bernoulli_", bernoulli_)

        def initialize(model):
            if not state:
                state.update({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

        torch.manual_seed(0)
        record = []
        data = lib.utils.data
        names = {
            "torch": lib,
            "nn": lib.nn,
            "F": lib.nn.functional,
            "optim": lib.optim,
            "math": math,
            "np": np,
            "record": record,
            "initialize": initialize,
            "images": lib.tensor(images),
            "data_loader": data.DataLoader(
                data.TensorDataset(lib.tensor(images), lib.tensor(labels)), batch_size=2
            ),
        }
        source = CONVNEXT_SOURCE if lib is torch else port(CONVNEXT_SOURCE, CONVNEXT_STEP)
        exec(compile(source, f"<{lib.__name__} convnext>", "exec"), names)
        record.append(
            {k: v.detach().numpy().copy() for k, v in names["model"].state_dict().items()}
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
        monkeypatch.undo()
    assert logs[0].count("warmup iterations") == 2 and logs[1] == logs[0]
    assert len(records[0]) == 6
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
