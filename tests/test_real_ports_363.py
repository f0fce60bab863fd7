# ruff: noqa: E501  (the optimizers' option lines read best unwrapped)
"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
AdamP and SGDP (projected updates for scale-invariant weights) training a small convolutional
classifier whose convolutions feed batch norms, against torch's run of the same code from the
same weights and images.

- A program written here in the style of clovaai/AdamP: per-channel and per-layer views
  (``x.view(x.size(0), -1)``, ``x.view(1, -1)``), ``F.cosine_similarity(x, y, dim=1,
  eps=eps).abs_()`` of the gradient and the weight, ``cosine.max() < delta /
  math.sqrt(view(p.data).size(1))`` on a 0-d tensor, the unit weight ``p.data /
  view(p.data).norm(dim=1).view(shape).add_(eps)`` and ``update -= unit * view(unit *
  update).sum(dim=1).view(shape)`` in place, ``shape = [-1] + [1] * (len(p.shape) - 1)``; the
  decoupled decay ``p.data.mul_(1 - lr * wd * ratio)`` (SGDP's divided by ``1 - momentum``)
  and ``p.data.add_(update, alpha=-step)``; ``Optimizer`` subclasses with a mixin, ``required``.
- SGDP without Nesterov steps by the momentum buffer itself, so the in-place projection edits
  the buffer (the aliasing the port must keep); with Nesterov ``grad + momentum * buf`` is a
  new tensor.

Compared against torch: the losses and weights of every step and the optimizer's state of a
convolution. The lines a port changes: the ``import`` lines, and the gradient lines: ``grads =
loss.backward()``, ``optimizer.step(grads)``, ``step(self, grads, closure=None)`` and
``p.grad`` read as ``p.grad(grads)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

ADAMP_SOURCE = """
import math

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.optim import Optimizer
from torch.optim.optimizer import required


class ProjectedMixin:
    # for weights a batch norm follows, take out of the update its component along the weight
    # (per output channel, else for the whole layer) when the gradient is nearly orthogonal to it
    @staticmethod
    def per_channel(t):
        return t.view(t.size(0), -1)

    @staticmethod
    def whole(t):
        return t.view(1, -1)

    def project(self, p, grad, update, delta, wd_ratio, eps):
        shape = [-1] + [1] * (len(p.shape) - 1)
        for view in (self.per_channel, self.whole):
            cosine = F.cosine_similarity(view(grad), view(p.data), dim=1, eps=eps).abs_()
            if cosine.max() < delta / math.sqrt(view(p.data).size(1)):
                unit = p.data / view(p.data).norm(dim=1).view(shape).add_(eps)
                update -= unit * view(unit * update).sum(dim=1).view(shape)
                return update, wd_ratio
        return update, 1


class AdamP(ProjectedMixin, Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 delta=0.1, wd_ratio=0.1, nesterov=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      delta=delta, wd_ratio=wd_ratio, nesterov=nesterov))

    def step(self, closure=None):
        for opts in self.param_groups:
            b1, b2 = opts["betas"]
            for p in opts["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]
                if not state:
                    state.update(step=0, m=torch.zeros_like(p.data), v=torch.zeros_like(p.data))
                state["step"] += 1
                state["m"].mul_(b1).add_(grad, alpha=1 - b1)
                state["v"].mul_(b2).addcmul_(grad, grad, value=1 - b2)
                denom = (state["v"].sqrt() / math.sqrt(1 - b2 ** state["step"])).add_(opts["eps"])
                m = b1 * state["m"] + (1 - b1) * grad if opts["nesterov"] else state["m"]
                update, ratio = m / denom, 1
                if len(p.shape) > 1:
                    update, ratio = self.project(p, grad, update, opts["delta"], opts["wd_ratio"], opts["eps"])
                if opts["weight_decay"] > 0:
                    p.data.mul_(1 - opts["lr"] * opts["weight_decay"] * ratio)
                p.data.add_(update, alpha=-opts["lr"] / (1 - b1 ** state["step"]))
        return None


class SGDP(ProjectedMixin, Optimizer):
    def __init__(self, params, lr=required, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, eps=1e-8, delta=0.1, wd_ratio=0.1):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, eps=eps, delta=delta, wd_ratio=wd_ratio))

    def step(self, closure=None):
        for opts in self.param_groups:
            mom = opts["momentum"]
            for p in opts["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]
                if "buffer" not in state:
                    state["buffer"] = torch.zeros_like(p.data)
                buf = state["buffer"].mul_(mom).add_(grad, alpha=1 - opts["dampening"])
                # without Nesterov the step is the buffer itself: the projection edits it
                update, ratio = (grad + mom * buf if opts["nesterov"] else buf), 1
                if len(p.shape) > 1:
                    update, ratio = self.project(p, grad, update, opts["delta"], opts["wd_ratio"], opts["eps"])
                if opts["weight_decay"] > 0:
                    p.data.mul_(1 - opts["lr"] * opts["weight_decay"] * ratio / (1 - mom))
                p.data.add_(update, alpha=-opts["lr"])
        return None


net = nn.Sequential(
    nn.Conv2d(3, 5, 3, padding=1, bias=False), nn.BatchNorm2d(5), nn.ReLU(),
    nn.Conv2d(5, 6, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(6), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 4),
)
initialize(net)
if which == "adamp":
    optimizer = AdamP(net.parameters(), lr=0.001, betas=(0.9, 0.999), weight_decay=1e-2)
else:
    optimizer = SGDP(net.parameters(), lr=0.1, weight_decay=1e-5, momentum=0.9, nesterov=which == "sgdp_nesterov")
for step in range(3):
    images, labels = data[step % len(data)]
    loss = F.cross_entropy(net(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(net))
record.append({k: v.numpy() for k, v in optimizer.state[net[3].weight].items() if k != "step"})
"""

ADAMP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.nn import functional as F\n",
    ),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("if p.grad is None:", "if p.grad(grads) is None:"),
    ("grad = p.grad.data", "grad = p.grad(grads).data"),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("which", ["adamp", "sgdp", "sgdp_nesterov"])
def test_adamp_and_sgdp_project_scale_invariant_weights_as_torch(which):
    torch.manual_seed(363)  # torch's initial weights, which the port loads
    rng = np.random.default_rng(363)
    batches = [
        (rng.standard_normal((4, 3, 8, 8)).astype(np.float32), rng.integers(0, 4, 4))
        for _ in range(2)
    ]
    initialize, records = initializer(), []
    for lib in (torch, rg):
        record = []
        text = (
            ADAMP_SOURCE
            if lib is torch
            else port(ADAMP_SOURCE, ADAMP_STEPS).replace("from torch.", "from retrograd.")
        )
        data = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
        run_source(
            text,
            lib,
            record=record,
            data=data,
            which=which,
            initialize=initialize,
            params_of=params_of,
        )
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 2 * 3 + 1
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
