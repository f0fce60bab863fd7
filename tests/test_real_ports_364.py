# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
timm's weight-standardized convolutions and adaptive gradient clipping (the NFNet recipe) as
timm writes them, training a small normalizer-free network against torch's run of the same code
from the same weights and images.

- ``timm/layers/std_conv.py``'s ``StdConv2d`` and ``ScaledStdConv2d``: the weight standardized
  by ``F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None, weight=(self.gain
  * self.scale).view(-1), training=True, momentum=0., eps=self.eps).reshape_as(self.weight)``
  (batch statistics of a ``(1, C, K)`` tensor, no running statistics), ``self.scale = gamma *
  self.weight[0].numel() ** -0.5``, ``nn.Parameter(torch.empty((self.out_channels, 1, 1, 1),
  **dd))`` with ``dd = {'device': None, 'dtype': None}``, and the ``reset_parameters`` override
  that ``nn.Conv2d.__init__`` calls before ``gain`` exists (``hasattr(self, 'gain')`` false: it
  does nothing) and the constructor calls again (``constant_`` of the gain, then
  ``super().reset_parameters()``);
- ``timm/layers/padding.py``'s ``get_padding`` (its integer form);
- ``timm/utils/agc.py``'s ``unitwise_norm`` (``x.norm(norm_type, dim=tuple(range(1, x.ndim)),
  keepdim=True)``, or ``x.norm(norm_type)`` of 1-d tensors) and ``adaptive_clip_grad``
  (``clamp_(min=eps).mul_(clip_factor)``, ``torch.where(grad_norm < max_norm, g_data,
  clipped_grad)`` written back by ``p.grad.detach().copy_(new_grads)``), dispatched by
  ``timm/utils/clip_grad.py``'s ``dispatch_clip_grad`` (modes ``agc``, ``norm``, ``value``).

The network (an NF-ResNet-like stack with a scaled GELU and a skip gain) and the loop are written
for the test. The lines changed: the ``import`` lines, and the gradient lines: ``grads =
loss.backward()``, ``optimizer.step(grads)``; ``adaptive_clip_grad``, ``dispatch_clip_grad``
and torch's clipping functions take the gradients (``dispatch_clip_grad(grads, parameters,
...)``), and ``p.grad`` is ``p.grad(grads)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

NF_SOURCE = """
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F


# timm/layers/padding.py (the integer form)
def get_padding(kernel_size: int, stride: int = 1, dilation: int = 1, **_) -> int:
    padding = ((stride - 1) + dilation * (kernel_size - 1)) // 2
    return padding


# timm/layers/std_conv.py
class StdConv2d(nn.Conv2d):
    def __init__(
            self,
            in_channel: int,
            out_channels: int,
            kernel_size: Union[int, Tuple[int, int]],
            stride: Union[int, Tuple[int, int]] = 1,
            padding: Optional[Union[int, Tuple[int, int]]] = None,
            dilation: Union[int, Tuple[int, int]] = 1,
            groups: int = 1,
            bias: bool = False,
            eps: float = 1e-6,
            device=None,
            dtype=None,
    ):
        if padding is None:
            padding = get_padding(kernel_size, stride, dilation)
        super().__init__(
            in_channel, out_channels, kernel_size, stride=stride,
            padding=padding, dilation=dilation, groups=groups, bias=bias, device=device, dtype=dtype)
        self.eps = eps

    def forward(self, x):
        weight = F.batch_norm(
            self.weight.reshape(1, self.out_channels, -1),
            None,  # running_mean
            None,  # running_var
            training=True,
            momentum=0.,
            eps=self.eps,
        ).reshape_as(self.weight)
        x = F.conv2d(x, weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        return x


class ScaledStdConv2d(nn.Conv2d):
    def __init__(
            self,
            in_channels: int,
            out_channels: int,
            kernel_size: Union[int, Tuple[int, int]],
            stride: Union[int, Tuple[int, int]] = 1,
            padding: Optional[Union[int, Tuple[int, int], str]] = None,
            dilation: Union[int, Tuple[int, int]] = 1,
            groups: int = 1,
            bias: bool = True,
            gamma: float = 1.0,
            eps: float = 1e-6,
            gain_init: float = 1.0,
            device=None,
            dtype=None,
    ):
        dd = {'device': device, 'dtype': dtype}
        if padding is None:
            padding = get_padding(kernel_size, stride, dilation)
        super().__init__(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, dilation=dilation,
            groups=groups, bias=bias, **dd)
        self.scale = gamma * self.weight[0].numel() ** -0.5  # gamma * 1 / sqrt(fan-in)
        self.eps = eps
        self.gain_init = gain_init

        self.gain = nn.Parameter(torch.empty((self.out_channels, 1, 1, 1), **dd))

        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Only initialize gain if it exists (for the second call)
        if hasattr(self, 'gain'):
            torch.nn.init.constant_(self.gain, self.gain_init)
            # Also reset parent parameters if needed
            super().reset_parameters()
        # On first call (from super().__init__), do nothing

    def forward(self, x):
        weight = F.batch_norm(
            self.weight.reshape(1, self.out_channels, -1),
            None,  # running_mean
            None,  # running_var
            weight=(self.gain * self.scale).view(-1),
            training=True,
            momentum=0.,
            eps=self.eps,
        ).reshape_as(self.weight)
        return F.conv2d(x, weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


# timm/utils/agc.py
def unitwise_norm(x, norm_type=2.0):
    if x.ndim <= 1:
        return x.norm(norm_type)
    else:
        # works for nn.ConvNd and nn,Linear where output dim is first in the kernel/weight tensor
        # might need special cases for other weights (possibly MHA) where this may not be true
        return x.norm(norm_type, dim=tuple(range(1, x.ndim)), keepdim=True)


def adaptive_clip_grad(parameters, clip_factor=0.01, eps=1e-3, norm_type=2.0):
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    for p in parameters:
        if p.grad is None:
            continue
        p_data = p.detach()
        g_data = p.grad.detach()
        max_norm = unitwise_norm(p_data, norm_type=norm_type).clamp_(min=eps).mul_(clip_factor)
        grad_norm = unitwise_norm(g_data, norm_type=norm_type)
        clipped_grad = g_data * (max_norm / grad_norm.clamp(min=1e-6))
        new_grads = torch.where(grad_norm < max_norm, g_data, clipped_grad)
        p.grad.detach().copy_(new_grads)


# timm/utils/clip_grad.py
def dispatch_clip_grad(parameters, value: float, mode: str = 'norm', norm_type: float = 2.0):
    if mode == 'norm':
        torch.nn.utils.clip_grad_norm_(parameters, value, norm_type=norm_type)
    elif mode == 'value':
        torch.nn.utils.clip_grad_value_(parameters, value)
    elif mode == 'agc':
        adaptive_clip_grad(parameters, value, norm_type=norm_type)
    else:
        assert False, f"Unknown clip mode ({mode})."


# the test's normalizer-free network and loop
class NFBlock(nn.Module):
    def __init__(self, chs, alpha=0.2):
        super().__init__()
        self.alpha = alpha
        self.conv1 = ScaledStdConv2d(chs, chs, 3, gamma=1.7)
        self.conv2 = ScaledStdConv2d(chs, chs, 3, gamma=1.7)
        self.skipinit_gain = nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        out = self.conv1(F.gelu(x) * 1.7)
        out = self.conv2(F.gelu(out) * 1.7)
        return x + out * self.alpha * self.skipinit_gain


model = nn.Sequential(
    StdConv2d(3, 8, 3, stride=2, bias=True),
    NFBlock(8),
    ScaledStdConv2d(8, 12, 1, gain_init=0.5),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 5),
)
initialize(model)
record.append(sorted(k for k, _ in model.named_parameters()))
optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9, nesterov=True)
for step in range(4):
    inputs, targets = data[step % len(data)]
    loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    dispatch_clip_grad(model.parameters(), clip_value, mode=clip_mode)
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(model))
"""

NF_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "def adaptive_clip_grad(parameters, clip_factor",
        "def adaptive_clip_grad(grads, parameters, clip_factor",
    ),
    ("if p.grad is None:", "if p.grad(grads) is None:"),
    ("g_data = p.grad.detach()", "g_data = p.grad(grads).detach()"),
    ("p.grad.detach().copy_(new_grads)", "p.grad(grads).detach().copy_(new_grads)"),
    (
        "def dispatch_clip_grad(parameters, value",
        "def dispatch_clip_grad(grads, parameters, value",
    ),
    ("clip_grad_norm_(parameters,", "clip_grad_norm_(grads, parameters,"),
    ("clip_grad_value_(parameters,", "clip_grad_value_(grads, parameters,"),
    ("adaptive_clip_grad(parameters, value,", "adaptive_clip_grad(grads, parameters, value,"),
    (
        "    loss.backward()\n    dispatch_clip_grad(model.parameters(), clip_value, mode=clip_mode)\n    optimizer.step()\n",
        "    grads = loss.backward()\n    dispatch_clip_grad(grads, model.parameters(), clip_value, mode=clip_mode)\n    optimizer.step(grads)\n",
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
    assert len(theirs) == 1 + 2 * 4
    assert "1.conv1.gain" in theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
