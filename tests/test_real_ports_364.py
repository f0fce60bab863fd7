# ruff: noqa: E501  (the program's layer signatures and port steps read best unwrapped)
"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
weight-standardized convolutions and adaptive gradient clipping (the NFNet recipe), training a
small normalizer-free network against torch's run of the same code from the same weights and
images.

- A program written here in the style of timm's ``std_conv``, ``agc`` and ``clip_grad``
  layers and utilities: the weight standardized by ``F.batch_norm(weight.reshape(1, C, -1),
  None, None, weight=(gain * scale).view(-1), training=True, momentum=0., eps=eps)
  .reshape_as(weight)`` (batch statistics of a ``(1, C, K)`` tensor, no running statistics),
  ``scale = gamma * weight[0].numel() ** -0.5``, ``nn.Parameter(torch.empty((C, 1, 1, 1),
  **factory))`` with ``factory = {'device': None, 'dtype': None}``, ``nn.Conv2d(...,
  device=None, dtype=None)``, and a ``reset_parameters`` override that ``nn.Conv2d.__init__``
  calls before the gain exists (``hasattr`` false: it does nothing) and the constructor calls
  again (``nn.init.constant_`` of the gain, then ``super().reset_parameters()``); integer
  same-padding; unit-wise norms (``x.norm(p, dim=tuple(range(1, x.ndim)), keepdim=True)``, or
  ``x.norm(p)`` of 1-d tensors) and adaptive clipping (``clamp_(min=eps).mul_(factor)``,
  ``torch.where(norms < limit, g, scaled)`` written back by ``p.grad.detach().copy_(...)``),
  dispatched by mode (``agc``, ``norm`` with ``norm_type``, ``value``); a normalizer-free
  block with a scaled GELU and a 0-d skip-gain parameter.

Compared against torch: the parameter names, and the losses and weights of every step. The lines
a port changes: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``; the clipping functions and torch's take the gradients, and
``p.grad`` is ``p.grad(grads)``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

NF_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F


def same_padding(k, stride=1, dilation=1):
    return ((stride - 1) + dilation * (k - 1)) // 2


def standardize(weight, out_channels, eps, scale=None):
    # each output filter to zero mean and unit variance: a batch norm of a (1, C, K) view
    flat = weight.reshape(1, out_channels, -1)
    return F.batch_norm(flat, None, None, weight=scale, training=True, momentum=0.0, eps=eps).reshape_as(weight)


class WSConv2d(nn.Conv2d):
    def __init__(self, cin, cout, k, stride=1, padding=None, bias=False, eps=1e-6, device=None, dtype=None):
        padding = same_padding(k, stride) if padding is None else padding
        super().__init__(cin, cout, k, stride=stride, padding=padding, bias=bias, device=device, dtype=dtype)
        self.eps = eps

    def forward(self, x):
        w = standardize(self.weight, self.out_channels, self.eps)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


class GainWSConv2d(nn.Conv2d):
    # standardized weights times a learned per-filter gain and gamma / sqrt(fan-in)
    def __init__(self, cin, cout, k, stride=1, bias=True, gamma=1.0, eps=1e-6, gain_init=1.0,
                 device=None, dtype=None):
        factory = {"device": device, "dtype": dtype}
        super().__init__(cin, cout, k, stride=stride, padding=same_padding(k, stride), bias=bias, **factory)
        self.scale = gamma * self.weight[0].numel() ** -0.5
        self.eps, self.gain_init = eps, gain_init
        self.gain = nn.Parameter(torch.empty((self.out_channels, 1, 1, 1), **factory))
        self.reset_parameters()

    def reset_parameters(self):
        # nn.Conv2d.__init__ calls this before the gain exists: nothing to do then
        if hasattr(self, "gain"):
            nn.init.constant_(self.gain, self.gain_init)
            super().reset_parameters()

    def forward(self, x):
        w = standardize(self.weight, self.out_channels, self.eps, (self.gain * self.scale).view(-1))
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


def unit_norms(x, p=2.0):
    return x.norm(p) if x.ndim <= 1 else x.norm(p, dim=tuple(range(1, x.ndim)), keepdim=True)


def clip_adaptively(parameters, factor=0.01, eps=1e-3, p=2.0):
    for param in parameters:
        if param.grad is None:
            continue
        g = param.grad.detach()
        limit = unit_norms(param.detach(), p).clamp_(min=eps).mul_(factor)
        norms = unit_norms(g, p)
        scaled = g * (limit / norms.clamp(min=1e-6))
        param.grad.detach().copy_(torch.where(norms < limit, g, scaled))


def clip_gradients(parameters, value, mode="norm", p=2.0):
    if mode == "agc":
        clip_adaptively(parameters, value, p=p)
    elif mode == "value":
        torch.nn.utils.clip_grad_value_(parameters, clip_value=value)
    else:
        torch.nn.utils.clip_grad_norm_(parameters, value, norm_type=p)


class NormFreeBlock(nn.Module):
    def __init__(self, channels, alpha=0.2, gamma=1.7):
        super().__init__()
        self.alpha, self.gamma = alpha, gamma
        self.first = GainWSConv2d(channels, channels, 3, gamma=gamma)
        self.second = GainWSConv2d(channels, channels, 3, gamma=gamma)
        self.skip_gain = nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        h = self.second(F.gelu(self.first(F.gelu(x) * self.gamma)) * self.gamma)
        return x + self.alpha * self.skip_gain * h


net = nn.Sequential(
    WSConv2d(3, 6, 3, stride=2, bias=True), NormFreeBlock(6), GainWSConv2d(6, 10, 1, gain_init=0.5),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(10, 5),
)
initialize(net)
record.append(sorted(name for name, _ in net.named_parameters()))
optimizer = torch.optim.SGD(net.parameters(), lr=0.3, momentum=0.9, nesterov=True)
for step in range(3):
    images, labels = data[step % len(data)]
    loss = F.cross_entropy(net(images), labels)
    optimizer.zero_grad()
    loss.backward()
    clip_gradients(net.parameters(), clip_value, mode=clip_mode)
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(net))
"""

NF_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.nn import functional as F\n",
    ),
    ("def clip_adaptively(parameters,", "def clip_adaptively(grads, parameters,"),
    ("if param.grad is None:", "if param.grad(grads) is None:"),
    ("g = param.grad.detach()", "g = param.grad(grads).detach()"),
    ("param.grad.detach().copy_(", "param.grad(grads).detach().copy_("),
    ("def clip_gradients(parameters,", "def clip_gradients(grads, parameters,"),
    ("clip_adaptively(parameters, value,", "clip_adaptively(grads, parameters, value,"),
    ("clip_grad_value_(parameters,", "clip_grad_value_(grads, parameters,"),
    ("clip_grad_norm_(parameters,", "clip_grad_norm_(grads, parameters,"),
    (
        "    loss.backward()\n    clip_gradients(net.parameters(), clip_value, mode=clip_mode)\n    optimizer.step()\n",
        "    grads = loss.backward()\n    clip_gradients(grads, net.parameters(), clip_value, mode=clip_mode)\n    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(
    ("clip_mode", "clip_value"), [("agc", 0.02), ("norm", 0.5), ("value", 0.01)]
)
def test_timm_std_convs_train_with_adaptive_gradient_clipping_as_torch(clip_mode, clip_value):
    torch.manual_seed(364)  # torch's initial weights, which the port loads
    rng = np.random.default_rng(364)
    batches = [
        (rng.standard_normal((4, 3, 8, 8)).astype(np.float32), rng.integers(0, 5, 4))
        for _ in range(2)
    ]
    initialize, records = initializer(), []
    for lib in (torch, rg):
        record = []
        text = NF_SOURCE if lib is torch else port(NF_SOURCE, NF_STEPS)
        data = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
        run_source(
            text,
            lib,
            record=record,
            data=data,
            clip_mode=clip_mode,
            clip_value=clip_value,
            initialize=initialize,
            params_of=params_of,
        )
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 1 + 2 * 3
    assert "1.first.gain" in theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
