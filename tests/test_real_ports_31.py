"""Real ports, continued (the harness: ``tests/real_ports.py``): SAGAN, a program written
here in the style of heykeetae/Self-Attention-GAN (its hand-written spectral norm, its
self-attention layer, generator, discriminator and one trainer step), small (16x16 images,
8 base channels).

What it exercises: a ``SpectralNorm`` wrapper that takes a layer's weight apart (``del
self.module._parameters[self.name]``, ``register_parameter(self.name + "_u", ...)`` of
``Parameter(w.data.new(rows).normal_(0, 1), requires_grad=False)``, ``u.data = unit(...)``,
found again by ``getattr`` under ``try``/``except AttributeError``) and before every forward
runs the power iteration on ``.data`` (``torch.mv(torch.t(w.view(rows, -1).data), u.data)``)
and puts the normalised weight back as a plain attribute, ``setattr(self.module, self.name, w
/ sigma.expand_as(w))`` with ``sigma = u.dot(w.view(rows, -1).mv(v))``, read by the wrapped
``Conv2d``/``ConvTranspose2d``'s own ``forward``; a self-attention layer (``torch.bmm`` of 1x1
convolution projections, ``nn.Softmax(dim=-1)``, ``self.gamma = nn.Parameter(torch.zeros(1))``);
the generator and discriminator built from lists into ``nn.Sequential(*layers)`` with
``int(np.log2(size)) - 3``; Adam over ``filter(lambda p: p.requires_grad, ...)`` with betas as
a list; the hinge loss by ``torch.nn.ReLU()(1.0 - d_real).mean()`` and the WGAN-GP variant
(``torch.rand(...).expand_as``, ``Variable(..., requires_grad=True)``,
``torch.autograd.grad(outputs=, inputs=, grad_outputs=torch.ones(out.size()), retain_graph=True,
create_graph=True, only_inputs=True)[0]``), ``zero_grad`` of both optimizers.

``torch.randn`` and ``torch.rand`` draw from one seeded NumPy stream in both runs; the models run
in float64 (several parameters have a zero gradient: transposed-convolution biases before a
BatchNorm, the keys' biases, whose Adam steps would follow float32 rounding noise).

One deliberate difference shows (API.md section 10: a value saved for backward is never changed
by a later write): the discriminator runs twice (real, then fake images) before the backward,
and the second run's power iteration replaces ``u.data`` and ``v.data``. torch's autograd saved
``u`` and ``v`` (for ``sigma``) by reference, and a ``.data`` assignment swaps their storage
without bumping the version counter, so torch's backward of the first run reads the second
run's ``u`` and ``v``: not the derivative of the loss it computed. retrograd differentiates what
was computed. The torch run is given ``u.clone()`` and ``v.clone()`` in ``sigma`` (the same
values forward) so that it does too; ``test_a_data_swap_after_the_forward_leaves_the_saved_value``
pins the difference on its own.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both, run_source

SAGAN_SOURCE = """
from torch import autograd


def unit(v, eps=1e-12):
    return v / (v.norm() + eps)


class SpectralNormWrapper(nn.Module):
    # divides the wrapped layer's weight by its largest singular value, estimated by one power
    # iteration per forward; u and v are state, not trained
    def __init__(self, module, name="weight", iterations=1):
        super().__init__()
        self.module, self.name, self.iterations = module, name, iterations
        if not self._has_vectors():
            self._split_weight()

    def _has_vectors(self):
        try:
            for suffix in ("_u", "_v", "_bar"):
                getattr(self.module, self.name + suffix)
        except AttributeError:
            return False
        return True

    def _split_weight(self):
        layer = self.module
        w = getattr(layer, self.name)
        rows = w.data.shape[0]
        cols = w.view(rows, -1).data.shape[1]
        u = nn.Parameter(w.data.new(rows).normal_(0, 1), requires_grad=False)
        v = nn.Parameter(w.data.new(cols).normal_(0, 1), requires_grad=False)
        u.data, v.data = unit(u.data), unit(v.data)
        layer = self.module
        del layer._parameters[self.name]
        layer.register_parameter(self.name + "_u", u)
        layer.register_parameter(self.name + "_v", v)
        layer.register_parameter(self.name + "_bar", nn.Parameter(w.data))

    def _normalise(self):
        layer = self.module
        u, v = getattr(layer, self.name + "_u"), getattr(layer, self.name + "_v")
        w = getattr(layer, self.name + "_bar")
        rows = w.data.shape[0]
        for _ in range(self.iterations):
            v.data = unit(torch.mv(torch.t(w.view(rows, -1).data), u.data))
            u.data = unit(torch.mv(w.view(rows, -1).data, v.data))
        sigma = u.dot(w.view(rows, -1).mv(v))
        setattr(layer, self.name, w / sigma.expand_as(w))

    def forward(self, *inputs):
        self._normalise()
        return self.module.forward(*inputs)


class SelfAttention(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.query = nn.Conv2d(in_channels=channels, out_channels=channels // 8, kernel_size=1)
        self.key = nn.Conv2d(in_channels=channels, out_channels=channels // 8, kernel_size=1)
        self.value = nn.Conv2d(in_channels=channels, out_channels=channels, kernel_size=1)
        self.gamma = nn.Parameter(torch.zeros(1))  # starts as the identity
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        b, c, h, w = x.size()
        q = self.query(x).view(b, -1, h * w).permute(0, 2, 1)  # b, hw, c/8
        k = self.key(x).view(b, -1, h * w)  # b, c/8, hw
        weights = self.softmax(torch.bmm(q, k))  # b, hw (queries), hw (keys)
        attended = torch.bmm(self.value(x).view(b, -1, h * w), weights.permute(0, 2, 1))
        return self.gamma * attended.view(b, c, h, w) + x, weights


class ImageGenerator(nn.Module):
    def __init__(self, size=16, z_dim=8, width=8):
        super().__init__()
        mult = 2 ** (int(np.log2(size)) - 3)
        top = width * mult
        first = [SpectralNormWrapper(nn.ConvTranspose2d(z_dim, top, 4))]
        first += [nn.BatchNorm2d(top), nn.ReLU()]
        second = [SpectralNormWrapper(nn.ConvTranspose2d(top, top // 2, 4, 2, 1))]
        second += [nn.BatchNorm2d(top // 2), nn.ReLU()]
        self.block1, self.block2 = nn.Sequential(*first), nn.Sequential(*second)
        self.attn = SelfAttention(top // 2)
        self.to_rgb = nn.Sequential(*[nn.ConvTranspose2d(top // 2, 3, 4, 2, 1), nn.Tanh()])

    def forward(self, z):
        h = self.block2(self.block1(z.view(z.size(0), z.size(1), 1, 1)))
        h, attention = self.attn(h)
        return self.to_rgb(h), attention


class Critic(nn.Module):
    def __init__(self, size=16, width=8):
        super().__init__()
        first = [SpectralNormWrapper(nn.Conv2d(3, width, 4, 2, 1)), nn.LeakyReLU(0.1)]
        self.block1 = nn.Sequential(*first)
        down = [SpectralNormWrapper(nn.Conv2d(width, 2 * width, 4, 2, 1)), nn.LeakyReLU(0.1)]
        self.block2 = nn.Sequential(*down)
        self.attn = SelfAttention(2 * width)
        self.score = nn.Conv2d(2 * width, 1, size // 4)

    def forward(self, x):
        h, attention = self.attn(self.block2(self.block1(x)))
        return self.score(h).squeeze(), attention


class GANStep:
    def __init__(self, G, D, cfg):
        self.G, self.D, self.cfg = G, D, cfg
        trainable = lambda p: p.requires_grad
        betas = [cfg.beta1, cfg.beta2]
        self.opt_g = torch.optim.Adam(filter(trainable, G.parameters()), cfg.g_lr, betas)
        self.opt_d = torch.optim.Adam(filter(trainable, D.parameters()), cfg.d_lr, betas)

    def zero_grads(self):
        self.opt_d.zero_grad()
        self.opt_g.zero_grad()

    def __call__(self, real):
        cfg = self.cfg
        self.G.train()
        self.D.train()
        real = autograd.Variable(real)
        d_real, real_attention = self.D(real)
        fake, fake_attention = self.G(autograd.Variable(torch.randn(real.size(0), cfg.z_dim)))
        d_fake, _ = self.D(fake)
        if cfg.loss == "hinge":
            d_loss_real = torch.nn.ReLU()(1.0 - d_real).mean()
            d_loss_fake = torch.nn.ReLU()(1.0 + d_fake).mean()
        else:
            d_loss_real, d_loss_fake = -d_real.mean(), d_fake.mean()
        d_loss = d_loss_fake + d_loss_real
        self.zero_grads()
        d_loss.backward()
        self.opt_d.step()

        if cfg.loss == "wgan-gp":
            # the critic's gradient norm pulled to 1 on points between real and fake
            mix = torch.rand(real.size(0), 1, 1, 1).expand_as(real)
            between = autograd.Variable(mix * real.data + (1 - mix) * fake.data, requires_grad=True)
            score, _ = self.D(between)
            slope = torch.autograd.grad(outputs=score, inputs=between,
                                        grad_outputs=torch.ones(score.size()),
                                        retain_graph=True, create_graph=True,
                                        only_inputs=True)[0]
            slope_norm = torch.sqrt(torch.sum(slope.view(slope.size(0), -1) ** 2, dim=1))
            penalty = cfg.gp_weight * torch.mean((slope_norm - 1) ** 2)
            self.zero_grads()
            penalty.backward()
            self.opt_d.step()
            d_loss = penalty

        fake, _ = self.G(autograd.Variable(torch.randn(real.size(0), cfg.z_dim)))
        g_loss = -self.D(fake)[0].mean()
        self.zero_grads()
        g_loss.backward()
        self.opt_g.step()
        return [d_loss_real.item(), d_loss_fake.item(), g_loss.item(), d_loss.item(),
                fake_attention.detach().numpy(), real_attention.detach().numpy()]
"""

SAGAN_STEP = [
    (
        "        d_loss.backward()\n        self.opt_d.step()",
        "        grads = d_loss.backward()\n        self.opt_d.step(grads)",
    ),
    (
        "            penalty.backward()\n            self.opt_d.step()",
        "            grads = penalty.backward()\n            self.opt_d.step(grads)",
    ),
    (
        "        g_loss.backward()\n        self.opt_g.step()",
        "        grads = g_loss.backward()\n        self.opt_g.step(grads)",
    ),
]


# torch's run differentiates the sigma it computed (see the module docstring)
TORCH_SAVES_BY_VALUE = (
    "sigma = u.dot(w.view(rows, -1).mv(v))",
    "sigma = u.clone().dot(w.view(rows, -1).mv(v.clone()))",
)


def test_a_data_swap_after_the_forward_leaves_the_saved_value():
    """``y = (w * u).sum()``, then ``u.data = ...`` before ``backward``: the gradient of ``w`` is
    the ``u`` that ``y`` was computed from (retrograd); torch's reads the swapped-in value."""
    old, new = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    grads = []
    for lib in (torch, rg):
        w = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64, requires_grad=True)
        u = lib.nn.Parameter(lib.tensor(old, dtype=lib.float64), requires_grad=False)
        y = (w * u).sum()
        u.data = lib.tensor(new, dtype=lib.float64)
        if lib is torch:
            y.backward()
            grads.append(w.grad.numpy())
        else:
            grads.append(w.grad(y.backward()).numpy())
    np.testing.assert_array_equal(grads[0], new)  # torch: the swapped-in value
    np.testing.assert_array_equal(grads[1], old)  # retrograd: the value y was computed from


def _draws(lib, seed):
    rng = np.random.default_rng(seed)

    def randn(*size, **kwargs):
        return lib.tensor(rng.standard_normal(size), dtype=lib.float64)

    def rand(*size, **kwargs):
        return lib.tensor(rng.uniform(size=size), dtype=lib.float64)

    return randn, rand


@pytest.mark.parametrize("adv_loss", ["hinge", "wgan-gp"])
def test_sagan_spectral_norm_and_self_attention_training_match_torch(monkeypatch, adv_loss):
    theirs = run_source(SAGAN_SOURCE.replace(*TORCH_SAVES_BY_VALUE), torch)
    _, ours = both(SAGAN_SOURCE, SAGAN_STEP)
    images = np.random.default_rng(31).uniform(-1, 1, (2, 2, 3, 16, 16))
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        gen = names["ImageGenerator"]().double()
        disc = names["Critic"]().double()
        # the weight became weight_bar, weight_u, weight_v (u and v not trained)
        conv = disc.block1[0].module
        assert sorted(n for n, _ in conv.named_parameters()) == [
            "bias",
            "weight_bar",
            "weight_u",
            "weight_v",
        ]
        assert not conv.weight_u.requires_grad
        if initial is None:
            for p in gen.parameters():  # the attention gamma starts at zero: give it a value
                if p.dim() == 1 and p.numel() == 1:
                    p.data.fill_(0.3)
            initial = [
                {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
                for m in (gen, disc)
            ]
        else:
            for m, state in zip((gen, disc), initial):
                m.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
        cfg = types.SimpleNamespace(
            loss=adv_loss, z_dim=8, gp_weight=10, g_lr=1e-3, d_lr=4e-3, beta1=0.0, beta2=0.9
        )
        randn, rand = _draws(lib, 32)
        with monkeypatch.context() as patch:
            patch.setattr(lib, "randn", randn)
            patch.setattr(lib, "rand", rand)
            step = names["GANStep"](gen, disc, cfg)
            record = [step(lib.tensor(batch, dtype=lib.float64)) for batch in images]
        flat = []
        for values in record:
            flat.extend(values)
        flat.append({n: p.detach().numpy().copy() for n, p in gen.named_parameters()})
        flat.append({n: p.detach().numpy().copy() for n, p in disc.named_parameters()})
        records.append(flat)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)
