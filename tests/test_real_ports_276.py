"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of the pytorch-spectral-normalization-gan repository and of huggingface/peft's PiSSA
adapter initialization, run under torch and, ported, under retrograd from the same weights.

- Spectral normalization by power iteration as a module wrapper: the wrapped weight removed
  with ``del module._parameters[name]`` and re-registered as ``<name>_orig``, ``<name>_u``,
  ``<name>_v`` (``register_parameter``; ``Parameter(w.data.new(n).normal_(0, 1),
  requires_grad=False)``, whose draws the port replaces by loading torch's ``u``, ``v``),
  ``u.data``/``v.data`` rewritten from ``torch.mv(torch.t(w.view(h, -1).data), u.data)``,
  ``sigma = u.dot(w.view(h, -1).mv(v))`` and ``setattr(module, name, w / sigma.expand_as(w))``,
  in a small hinge-loss critic trained a few steps with Adam over ``filter(lambda p:
  p.requires_grad, ...)``, checked with ``torch.linalg.matrix_norm(ord=2)`` and
  ``torch.linalg.svdvals``. The critic scores real and fake images in one call: with two
  calls, torch's backward of the first would read the ``u``, ``v`` the second wrote through
  ``.data`` (its saved tensors alias them), while retrograd's graph keeps the values it was
  given, so that form is not compared;
- PiSSA: an adapter's factors from the principal singular triplets (``torch.linalg.svd(...,
  full_matrices=False)``, or ``torch.svd_lowrank(w, r, niter=...)``'s randomized sketch and
  ``Ur.t()``), ``Sr /= scaling`` in place, ``torch.diag(torch.sqrt(Sr))``, the residual
  written back into ``weight.data`` after ``weight.to(torch.float32)``, the base frozen with
  ``requires_grad_(False)``, ``torch.linalg.matrix_norm(ord='nuc')``, then a few SGD steps.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``).
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

SN_PISSA_SOURCE = """
import torch
from torch import nn
from torch.nn import Parameter, functional as F


def unit(vec, eps=1e-12):
    return vec / (vec.norm() + eps)


class SpectralNormed(nn.Module):
    # divides the wrapped module's weight by its top singular value, estimated by one
    # power-iteration step per forward pass (u, v persist as frozen parameters)
    def __init__(self, inner, attr="weight", steps=1):
        super().__init__()
        self.inner, self.attr, self.steps = inner, attr, steps
        if not self._ready():
            self._split_weight()

    def _ready(self):
        try:
            getattr(self.inner, self.attr + "_orig")
        except AttributeError:
            return False
        return True

    def _split_weight(self):
        w = getattr(self.inner, self.attr)
        rows = w.data.shape[0]
        cols = w.view(rows, -1).data.shape[1]
        u = Parameter(w.data.new(rows).normal_(0, 1), requires_grad=False)
        v = Parameter(w.data.new(cols).normal_(0, 1), requires_grad=False)
        u.data, v.data = unit(u.data), unit(v.data)
        orig = Parameter(w.data)
        del self.inner._parameters[self.attr]
        self.inner.register_parameter(self.attr + "_orig", orig)
        self.inner.register_parameter(self.attr + "_u", u)
        self.inner.register_parameter(self.attr + "_v", v)

    def _normalize(self):
        w = getattr(self.inner, self.attr + "_orig")
        u = getattr(self.inner, self.attr + "_u")
        v = getattr(self.inner, self.attr + "_v")
        rows = w.data.shape[0]
        for _ in range(self.steps):
            v.data = unit(torch.mv(torch.t(w.view(rows, -1).data), u.data))
            u.data = unit(torch.mv(w.view(rows, -1).data, v.data))
        sigma = u.dot(w.view(rows, -1).mv(v))
        setattr(self.inner, self.attr, w / sigma.expand_as(w))

    def forward(self, *inputs):
        self._normalize()
        return self.inner.forward(*inputs)


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = SpectralNormed(nn.Conv2d(1, 3, 3, padding=1))
        self.c2 = SpectralNormed(nn.Conv2d(3, 6, 4, stride=2, padding=(1, 1)))
        # no bias: while every score is inside the margin its hinge gradient is exactly zero,
        # and Adam would step on the rounding noise
        self.out = SpectralNormed(nn.Linear(6 * 3 * 3, 1, bias=False))

    def forward(self, img):
        h = nn.LeakyReLU(0.2)(self.c1(img))
        h = nn.LeakyReLU(0.2)(self.c2(h))
        return self.out(h.view(-1, 6 * 3 * 3))


critic = Critic()
initialize(critic)
trainable = filter(lambda p: p.requires_grad, critic.parameters())
opt = torch.optim.Adam(trainable, lr=1e-3, betas=(0.0, 0.9))
real = torch.tensor(real_np, dtype=torch.float32)
fake = torch.tensor(fake_np, dtype=torch.float32)
for it in range(4):
    opt.zero_grad()
    score = critic(torch.cat([real, fake]))
    hinge = nn.ReLU()(1.0 - score[:3]).mean() + nn.ReLU()(1.0 + score[3:]).mean()
    hinge.backward()
    opt.step()
    record.append(hinge.item())
record.append({name: t.detach().numpy() for name, t in critic.state_dict().items()})
record.append(torch.linalg.matrix_norm(critic.out.inner.weight_orig.detach(), ord=2).item())
conv_w = critic.c2.inner.weight_orig.detach()
record.append(torch.linalg.svdvals(conv_w.view(conv_w.shape[0], -1)).numpy())
record.append(critic.out.inner.weight.detach().numpy())


class Adapted(nn.Module):
    # frozen base plus a rank-r update B @ A, both factors from the base's top singular triplets
    def __init__(self, base, rank=2, alpha=3):
        super().__init__()
        self.base, self.rank, self.scale = base, rank, alpha / rank
        self.down = nn.Linear(base.in_features, rank, bias=False)
        self.up = nn.Linear(rank, base.out_features, bias=False)

    def principal_init(self, how):
        kept_dtype = self.base.weight.dtype
        w = self.base.weight.to(torch.float32)
        if how == "svd":
            U, S, Vh = torch.linalg.svd(w.data, full_matrices=False)
            Ur, Sr, Vhr = U[:, : self.rank], S[: self.rank], Vh[: self.rank]
        else:
            iters = int(how.split("_niter_")[1])
            Ur, Sr, Vr = torch.svd_lowrank(w.data, self.rank, niter=iters)
            Vhr = Vr.t()
        Sr /= self.scale
        root = torch.diag(torch.sqrt(Sr))
        self.down.weight.data = root @ Vhr
        self.up.weight.data = Ur @ root
        residual = w.data - self.scale * self.up.weight.data @ self.down.weight.data
        self.base.weight.data = residual.to(kept_dtype)

    def forward(self, x):
        return self.base(x) + self.scale * self.up(self.down(x))


feats = torch.tensor(feats_np, dtype=torch.float32)
classes = torch.tensor(classes_np)
for how in ("svd", "lowrank_niter_3"):
    base = nn.Linear(7, 5)
    initialize(base)
    reference = base(feats).detach()
    model = Adapted(base)
    model.principal_init(how)
    model.base.weight.requires_grad_(False)
    model.base.bias.requires_grad_(False)
    record.append((model(feats).detach() - reference).abs().max().item() < 1e-5)
    update = model.up.weight @ model.down.weight
    record.append(torch.linalg.matrix_norm(update, ord="nuc").item())
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.2)
    for it in range(4):
        opt.zero_grad()
        ce = F.cross_entropy(model(feats), classes)
        ce.backward()
        opt.step()
        record.append(ce.item())
    # the singular vectors' signs are the solver's choice: compare what does not depend on them
    record.append({k: t.detach().numpy() for k, t in model.state_dict().items() if "base" in k})
    record.append((model.up.weight @ model.down.weight).detach().numpy())
    record.append((model.down.weight.T @ model.down.weight).detach().numpy())
"""

SN_PISSA_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    ("    hinge.backward()\n    opt.step()", "    grads = hinge.backward()\n    opt.step(grads)"),
    (
        "        ce.backward()\n        opt.step()",
        "        grads = ce.backward()\n        opt.step(grads)",
    ),
]


def test_sn_gan_power_iteration_and_pissa_init_as_torch(capsys):
    rng = np.random.default_rng(27601)
    (theirs, ours), _ = runs_with_draws(
        SN_PISSA_SOURCE, SN_PISSA_STEPS, capsys, 27601,
        real_np=rng.standard_normal((3, 1, 6, 6)), fake_np=0.5 * rng.standard_normal((3, 1, 6, 6)),
        feats_np=rng.standard_normal((9, 7)), classes_np=rng.integers(0, 5, 9),
        initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
