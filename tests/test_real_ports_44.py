# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- ConvNeXt as facebookresearch/ConvNeXt writes it (``models/convnext.py``, ``utils.py``'s
  ``cosine_scheduler``, the parameter groups of ``optim_factory.py`` and the step of
  ``engine.py``), over timm's ``trunc_normal_``/``DropPath`` (``timm/models/layers/drop.py``)
  and ``LabelSmoothingCrossEntropy`` (``timm/loss/cross_entropy.py``), narrower and shallower
  through its own ``depths``/``dims``: the ``LayerNorm`` of ``data_format="channels_first"``
  (``u = x.mean(1, keepdim=True)``, ``(x - u).pow(2).mean(1, keepdim=True)``,
  ``self.weight[:, None, None] * x``) and of ``channels_last`` (``F.layer_norm(x,
  self.normalized_shape, ...)``), the block's depthwise ``nn.Conv2d(dim, dim, kernel_size=7,
  padding=3, groups=dim)`` and ``permute``s around the ``nn.Linear`` pointwise convolutions, the
  layer scale ``nn.Parameter(layer_scale_init_value * torch.ones((dim)), requires_grad=True) if
  ... else None``, ``dp_rates=[x.item() for x in torch.linspace(0, drop_path_rate,
  sum(depths))]``, ``self.apply(self._init_weights)`` and ``self.head.weight.data.mul_(
  head_init_scale)``, ``x.mean([-2, -1])``; ``drop_path``'s ``x.new_empty(shape).bernoulli_(
  keep_prob)`` and ``random_tensor.div_(keep_prob)``; the label-smoothing loss's
  ``-logprobs.gather(dim=-1, index=target.unsqueeze(1))``; ``optimizer.param_groups`` given
  ``lr_scale`` and stepped by the schedules' ``param_group["lr"] = lr_schedule_values[it] *
  param_group["lr_scale"]`` and ``param_group["weight_decay"] = wd_schedule_values[it]``.

``bernoulli_`` draws from one seeded stream in both runs. Only the gradient lines differ.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, port

CONVNEXT_SOURCE = """
# timm/models/layers/weight_init.py (the form its callers use)
def trunc_normal_(tensor, mean=0., std=1., a=-2., b=2.):
    return nn.init.trunc_normal_(tensor, mean, std, a, b)


# timm/models/layers/drop.py
def drop_path(x, drop_prob: float = 0., training: bool = False, scale_by_keep: bool = True):
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    \"\"\"Drop paths (Stochastic Depth) per sample  (when applied in main path of residual blocks).
    \"\"\"
    def __init__(self, drop_prob: float = 0., scale_by_keep: bool = True):
        super(DropPath, self).__init__()
        self.drop_prob = drop_prob
        self.scale_by_keep = scale_by_keep

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)

    def extra_repr(self):
        return f'drop_prob={round(self.drop_prob,3):0.3f}'


# timm/loss/cross_entropy.py
class LabelSmoothingCrossEntropy(nn.Module):
    \"\"\" NLL loss with label smoothing.
    \"\"\"
    def __init__(self, smoothing=0.1):
        super(LabelSmoothingCrossEntropy, self).__init__()
        assert smoothing < 1.0
        self.smoothing = smoothing
        self.confidence = 1. - smoothing

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logprobs = F.log_softmax(x, dim=-1)
        nll_loss = -logprobs.gather(dim=-1, index=target.unsqueeze(1))
        nll_loss = nll_loss.squeeze(1)
        smooth_loss = -logprobs.mean(dim=-1)
        loss = self.confidence * nll_loss + self.smoothing * smooth_loss
        return loss.mean()


# models/convnext.py
class Block(nn.Module):
    r\"\"\" ConvNeXt Block. There are two equivalent implementations:
    (1) DwConv -> LayerNorm (channels_first) -> 1x1 Conv -> GELU -> 1x1 Conv; all in (N, C, H, W)
    (2) DwConv -> Permute to (N, H, W, C); LayerNorm (channels_last) -> Linear -> GELU -> Linear; Permute back
    We use (2) as we find it slightly faster in PyTorch
    \"\"\"
    def __init__(self, dim, drop_path=0., layer_scale_init_value=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim) # depthwise conv
        self.norm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim) # pointwise/1x1 convs, implemented with linear layers
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones((dim)),
                                    requires_grad=True) if layer_scale_init_value > 0 else None
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1) # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.pwconv2(x)
        if self.gamma is not None:
            x = self.gamma * x
        x = x.permute(0, 3, 1, 2) # (N, H, W, C) -> (N, C, H, W)

        x = input + self.drop_path(x)
        return x

class ConvNeXt(nn.Module):
    r\"\"\" ConvNeXt
        A PyTorch impl of : `A ConvNet for the 2020s`  -
          https://arxiv.org/pdf/2201.03545.pdf
    \"\"\"
    def __init__(self, in_chans=3, num_classes=1000,
                 depths=[3, 3, 9, 3], dims=[96, 192, 384, 768], drop_path_rate=0.,
                 layer_scale_init_value=1e-6, head_init_scale=1.,
                 ):
        super().__init__()

        self.downsample_layers = nn.ModuleList() # stem and 3 intermediate downsampling conv layers
        stem = nn.Sequential(
            nn.Conv2d(in_chans, dims[0], kernel_size=4, stride=4),
            LayerNorm(dims[0], eps=1e-6, data_format="channels_first")
        )
        self.downsample_layers.append(stem)
        for i in range(3):
            downsample_layer = nn.Sequential(
                    LayerNorm(dims[i], eps=1e-6, data_format="channels_first"),
                    nn.Conv2d(dims[i], dims[i+1], kernel_size=2, stride=2),
            )
            self.downsample_layers.append(downsample_layer)

        self.stages = nn.ModuleList() # 4 feature resolution stages, each consisting of multiple residual blocks
        dp_rates=[x.item() for x in torch.linspace(0, drop_path_rate, sum(depths))]
        cur = 0
        for i in range(4):
            stage = nn.Sequential(
                *[Block(dim=dims[i], drop_path=dp_rates[cur + j],
                layer_scale_init_value=layer_scale_init_value) for j in range(depths[i])]
            )
            self.stages.append(stage)
            cur += depths[i]

        self.norm = nn.LayerNorm(dims[-1], eps=1e-6) # final norm layer
        self.head = nn.Linear(dims[-1], num_classes)

        self.apply(self._init_weights)
        self.head.weight.data.mul_(head_init_scale)
        self.head.bias.data.mul_(head_init_scale)

    def _init_weights(self, m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            trunc_normal_(m.weight, std=.02)
            nn.init.constant_(m.bias, 0)

    def forward_features(self, x):
        for i in range(4):
            x = self.downsample_layers[i](x)
            x = self.stages[i](x)
        return self.norm(x.mean([-2, -1])) # global average pooling, (N, C, H, W) -> (N, C)

    def forward(self, x):
        x = self.forward_features(x)
        x = self.head(x)
        return x

class LayerNorm(nn.Module):
    r\"\"\" LayerNorm that supports two data formats: channels_last (default) or channels_first.
    The ordering of the dimensions in the inputs. channels_last corresponds to inputs with
    shape (batch_size, height, width, channels) while channels_first corresponds to inputs
    with shape (batch_size, channels, height, width).
    \"\"\"
    def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps
        self.data_format = data_format
        if self.data_format not in ["channels_last", "channels_first"]:
            raise NotImplementedError
        self.normalized_shape = (normalized_shape, )

    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        elif self.data_format == "channels_first":
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + self.eps)
            x = self.weight[:, None, None] * x + self.bias[:, None, None]
            return x


# utils.py
def cosine_scheduler(base_value, final_value, epochs, niter_per_ep, warmup_epochs=0,
                     start_warmup_value=0, warmup_steps=-1):
    warmup_schedule = np.array([])
    warmup_iters = warmup_epochs * niter_per_ep
    if warmup_steps > 0:
        warmup_iters = warmup_steps
    print("Set warmup steps = %d" % warmup_iters)
    if warmup_epochs > 0:
        warmup_schedule = np.linspace(start_warmup_value, base_value, warmup_iters)

    iters = np.arange(epochs * niter_per_ep - warmup_iters)
    schedule = np.array(
        [final_value + 0.5 * (base_value - final_value) * (1 + math.cos(math.pi * i / (len(iters)))) for i in iters])

    schedule = np.concatenate((warmup_schedule, schedule))

    assert len(schedule) == epochs * niter_per_ep
    return schedule


# optim_factory.py (get_parameter_groups, without layer decay: every scale 1.)
def get_parameter_groups(model, weight_decay=1e-5, skip_list=(), get_num_layer=None, get_layer_scale=None):
    parameter_group_names = {}
    parameter_group_vars = {}

    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue  # frozen weights
        if len(param.shape) == 1 or name.endswith(".bias") or name in skip_list:
            group_name = "no_decay"
            this_weight_decay = 0.
        else:
            group_name = "decay"
            this_weight_decay = weight_decay
        if get_num_layer is not None:
            layer_id = get_num_layer(name)
            group_name = "layer_%d_%s" % (layer_id, group_name)
        else:
            layer_id = None

        if group_name not in parameter_group_names:
            if get_layer_scale is not None:
                scale = get_layer_scale(layer_id)
            else:
                scale = 1.

            parameter_group_names[group_name] = {
                "weight_decay": this_weight_decay,
                "params": [],
                "lr_scale": scale
            }
            parameter_group_vars[group_name] = {
                "weight_decay": this_weight_decay,
                "params": [],
                "lr_scale": scale
            }

        parameter_group_vars[group_name]["params"].append(param)
        parameter_group_names[group_name]["params"].append(name)
    return list(parameter_group_vars.values())


# engine.py (train_one_epoch, its step; no mixup, no amp)
def train_one_epoch(model, criterion, data_loader, optimizer, epoch, start_steps=None,
                    lr_schedule_values=None, wd_schedule_values=None, num_training_steps_per_epoch=None,
                    update_freq=None):
    model.train(True)
    optimizer.zero_grad()

    for data_iter_step, (samples, targets) in enumerate(data_loader):
        step = data_iter_step // update_freq
        if step >= num_training_steps_per_epoch:
            continue
        it = start_steps + step  # global training iteration
        # Update LR & WD for the first acc
        if lr_schedule_values is not None or wd_schedule_values is not None and data_iter_step % update_freq == 0:
            for i, param_group in enumerate(optimizer.param_groups):
                if lr_schedule_values is not None:
                    param_group["lr"] = lr_schedule_values[it] * param_group["lr_scale"]
                if wd_schedule_values is not None and param_group["weight_decay"] > 0:
                    param_group["weight_decay"] = wd_schedule_values[it]

        output = model(samples)
        loss = criterion(output, targets)

        loss_value = loss.item()

        if not math.isfinite(loss_value): # this could trigger if using AMP
            print("Loss is {}, stopping training".format(loss_value))
            assert math.isfinite(loss_value)

        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

        class_acc = (output.max(-1)[-1] == targets).float().mean()
        record.append([loss_value, class_acc.item(), optimizer.param_groups[1]["lr"], optimizer.param_groups[0]["weight_decay"]])


model = ConvNeXt(in_chans=3, num_classes=5, depths=[1, 2, 1, 1], dims=[8, 16, 16, 24],
                 drop_path_rate=0.3, layer_scale_init_value=1e-1, head_init_scale=0.5)
initialize(model)
parameters = get_parameter_groups(model, weight_decay=0.05)
optimizer = optim.AdamW(parameters, lr=4e-3)
criterion = LabelSmoothingCrossEntropy(smoothing=0.1)
num_training_steps_per_epoch = len(data_loader)
lr_schedule_values = cosine_scheduler(4e-3, 1e-6, 2, num_training_steps_per_epoch, warmup_epochs=1)
wd_schedule_values = cosine_scheduler(0.05, 0.1, 2, num_training_steps_per_epoch)
for epoch in range(2):
    train_one_epoch(model, criterion, data_loader, optimizer, epoch,
                    start_steps=epoch * num_training_steps_per_epoch,
                    lr_schedule_values=lr_schedule_values, wd_schedule_values=wd_schedule_values,
                    num_training_steps_per_epoch=num_training_steps_per_epoch, update_freq=1)
model.eval()
with torch.no_grad():
    record.append(model(images[:2]))
"""

CONVNEXT_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


def test_convnext_matches_torch(monkeypatch, capsys):
    rng = np.random.default_rng(44)
    images = rng.standard_normal((4, 3, 32, 32)).astype(np.float32)
    labels = rng.integers(0, 5, 4)
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
    assert logs[0].count("Set warmup steps") == 2 and logs[1] == logs[0]
    assert len(records[0]) == 6
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
