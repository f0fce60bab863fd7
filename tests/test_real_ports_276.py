# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
spectral normalization by power iteration as christiancosgrove/pytorch-spectral-normalization-
gan writes it (``SpectralNorm`` wrapping a module, ``_make_params`` registering ``w_u``,
``w_v``, ``w_bar`` as parameters, ``_update_u_v`` with ``l2normalize`` and ``torch.mv`` on
``w.view(height, -1).data``, ``setattr(self.module, self.name, w / sigma.expand_as(w))``) in a
small SN discriminator trained a few steps (one discriminator call per step on real and fake
images together: the author's two calls, ``D(real)`` then ``D(fake)``, make torch's backward of
the first use the ``u``, ``v`` the second wrote through ``.data``, as its saved tensors alias
them; retrograd's graph keeps the values it was given, so that form is not compared), checked against ``torch.linalg.matrix_norm(ord=2)``;
and PiSSA's adapter initialization as huggingface/peft writes it (``pissa_init``: the principal
singular vectors by ``torch.linalg.svd`` or, for ``pissa_niter_N``, by ``svd_lowrank``, the
residual written back into ``weight.data``), fine-tuned a few steps, against torch's run of
the same code from the same weights and draws.

What it exercises: ``del self.module._parameters[self.name]`` then ``register_parameter``;
``w.data.new(height).normal_(0, 1)`` (its draws replaced: the port loads torch's ``u``, ``v``);
``torch.mv(torch.t(w.view(height, -1).data), u.data)``; ``torch.linalg.svd(weight.data,
full_matrices=False)``; ``torch.svd_lowrank(weight.data, r, niter=4)``'s randomized sketch;
``torch.diag(torch.sqrt(Sr))``; ``torch.linalg.matrix_norm(W, ord=2)`` and ``ord='nuc'``
gradients; ``torch.linalg.svdvals``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


SN_PISSA_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Parameter


def l2normalize(v, eps=1e-12):
    return v / (v.norm() + eps)


class SpectralNorm(nn.Module):
    def __init__(self, module, name='weight', power_iterations=1):
        super(SpectralNorm, self).__init__()
        self.module = module
        self.name = name
        self.power_iterations = power_iterations
        if not self._made_params():
            self._make_params()

    def _update_u_v(self):
        u = getattr(self.module, self.name + "_u")
        v = getattr(self.module, self.name + "_v")
        w = getattr(self.module, self.name + "_bar")

        height = w.data.shape[0]
        for _ in range(self.power_iterations):
            v.data = l2normalize(torch.mv(torch.t(w.view(height, -1).data), u.data))
            u.data = l2normalize(torch.mv(w.view(height, -1).data, v.data))

        # sigma = torch.dot(u.data, torch.mv(w.view(height,-1).data, v.data))
        sigma = u.dot(w.view(height, -1).mv(v))
        setattr(self.module, self.name, w / sigma.expand_as(w))

    def _made_params(self):
        try:
            u = getattr(self.module, self.name + "_u")
            v = getattr(self.module, self.name + "_v")
            w = getattr(self.module, self.name + "_bar")
            return True
        except AttributeError:
            return False

    def _make_params(self):
        w = getattr(self.module, self.name)

        height = w.data.shape[0]
        width = w.view(height, -1).data.shape[1]

        u = Parameter(w.data.new(height).normal_(0, 1), requires_grad=False)
        v = Parameter(w.data.new(width).normal_(0, 1), requires_grad=False)
        u.data = l2normalize(u.data)
        v.data = l2normalize(v.data)
        w_bar = Parameter(w.data)

        del self.module._parameters[self.name]

        self.module.register_parameter(self.name + "_u", u)
        self.module.register_parameter(self.name + "_v", v)
        self.module.register_parameter(self.name + "_bar", w_bar)

    def forward(self, *args):
        self._update_u_v()
        return self.module.forward(*args)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.conv1 = SpectralNorm(nn.Conv2d(1, 4, 3, stride=1, padding=(1, 1)))
        self.conv2 = SpectralNorm(nn.Conv2d(4, 8, 4, stride=2, padding=(1, 1)))
        self.fc = SpectralNorm(nn.Linear(4 * 4 * 8, 1))

    def forward(self, x):
        m = x
        m = nn.LeakyReLU(0.1)(self.conv1(m))
        m = nn.LeakyReLU(0.1)(self.conv2(m))
        return self.fc(m.view(-1, 4 * 4 * 8))


D = Discriminator()
initialize(D)
optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, D.parameters()), lr=2e-4, betas=(0.0, 0.9))
real = torch.tensor(images, dtype=torch.float32)
fake = torch.tensor(fakes, dtype=torch.float32)
for step in range(6):
    optimizer.zero_grad()
    scores = D(torch.cat([real, fake]))
    loss = nn.ReLU()(1.0 - scores[:4]).mean() + nn.ReLU()(1.0 + scores[4:]).mean()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append({k: v.detach().numpy() for k, v in D.state_dict().items()})
w = D.fc.module.weight_bar.detach()
record.append(torch.linalg.matrix_norm(w, ord=2).item())
record.append(torch.linalg.svdvals(D.conv2.module.weight_bar.detach().view(8, -1)).numpy())
record.append(D.fc.module.weight.detach().numpy())


class LoraLinear(nn.Module):
    def __init__(self, base_layer, r=2, lora_alpha=4):
        super().__init__()
        self.base_layer = base_layer
        self.r = r
        self.scaling = lora_alpha / r
        self.lora_A = nn.Linear(base_layer.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base_layer.out_features, bias=False)

    def pissa_init(self, init_lora_weights):
        weight = self.base_layer.weight
        dtype = weight.dtype
        weight = weight.to(torch.float32)
        if init_lora_weights == "pissa":
            V, S, Uh = torch.linalg.svd(weight.data, full_matrices=False)
            Vr = V[:, : self.r]
            Sr = S[: self.r]
            Sr /= self.scaling
            Uhr = Uh[: self.r]
        elif len(init_lora_weights.split("_niter_")) == 2:
            Vr, Sr, Ur = torch.svd_lowrank(
                weight.data, self.r, niter=int(init_lora_weights.split("_niter_")[-1])
            )
            Sr /= self.scaling
            Uhr = Ur.t()
        else:
            raise ValueError(f"init_lora_weights should be 'pissa' or 'pissa_niter_[number of iters]', got {init_lora_weights} instead.")
        lora_A = torch.diag(torch.sqrt(Sr)) @ Uhr
        lora_B = Vr @ torch.diag(torch.sqrt(Sr))
        self.lora_A.weight.data = lora_A
        self.lora_B.weight.data = lora_B
        weight = weight.data - self.scaling * lora_B @ lora_A
        weight = weight.to(dtype)
        self.base_layer.weight.data = weight

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(x)) * self.scaling


x = torch.tensor(inputs, dtype=torch.float32)
y = torch.tensor(labels)
for init in ("pissa", "pissa_niter_4"):
    base = nn.Linear(10, 6)
    initialize(base)
    before = base(x).detach()
    layer = LoraLinear(base)
    layer.pissa_init(init)
    layer.base_layer.weight.requires_grad_(False)
    layer.base_layer.bias.requires_grad_(False)
    record.append((layer(x).detach() - before).abs().max().item() < 1e-5)
    record.append(torch.linalg.matrix_norm(layer.lora_B.weight @ layer.lora_A.weight, ord='nuc').item())
    optimizer = torch.optim.SGD([p for p in layer.parameters() if p.requires_grad], lr=0.1)
    for step in range(5):
        optimizer.zero_grad()
        loss = F.cross_entropy(layer(x), y)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    # each singular pair's sign is the LAPACK's choice (torch's docs): A's row and B's column
    # flip together, so their product and the training are the same
    record.append({k: v.detach().numpy() for k, v in layer.state_dict().items() if "lora" not in k})
    record.append((layer.lora_B.weight @ layer.lora_A.weight).detach().numpy())
    record.append((layer.lora_A.weight.T @ layer.lora_A.weight).detach().numpy())
"""

SN_PISSA_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch.nn import Parameter",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd.nn import Parameter",
    ),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def test_sn_gan_power_iteration_and_pissa_init_as_torch(capsys):
    rng = np.random.default_rng(27601)
    loaded = initializer()
    (theirs, ours), _ = runs_with_draws(
        SN_PISSA_SOURCE, SN_PISSA_STEPS, capsys, 27601,
        images=rng.standard_normal((4, 1, 8, 8)), fakes=rng.standard_normal((4, 1, 8, 8)) * 0.5,
        inputs=rng.standard_normal((12, 10)), labels=rng.integers(0, 6, 12), initialize=loaded,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
