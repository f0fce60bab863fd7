"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of jzbontar/pixelcnn-pytorch and YongfeiYan/Gumbel_Softmax_VAE.

- a PixelCNN over 16 grey levels on 5x5 images: a ``CausalConv(nn.Conv2d)`` taking ``kind,
  *args, **kwargs``, its mask made by ``register_buffer('mask', self.weight.data.clone())``,
  ``fill_(1)`` and slice writes whose bound adds a bool (``width // 2 + (kind == 'B')``),
  ``self.weight.data *= self.mask`` before every ``super(...).forward(x)``; ``nn.ReLU(True)``,
  ``BatchNorm2d``, ``Variable`` from ``torch.autograd``, the target ``(x.data[:, 0] *
  15).long()``, ``F.cross_entropy`` over the level classes, Adam with its default rate,
  ``net.train(True/False)``, and sampling pixel by pixel into a ``torch.Tensor(...)`` that was
  ``fill_(0)``-ed, with ``F.softmax(logits)`` (no dim: torch's implicit dim 1 for a 2-d input)
  and ``canvas[:, :, row, col] = torch.multinomial(probs, 1).float() / 15.`` under
  ``torch.no_grad()``.
- a VAE with categorical latents: Gumbel noise ``-torch.log(eps - torch.log(u + eps))`` of
  ``torch.rand(shape)`` with a ``torch.Size``, the straight-through ``hard`` sample
  (``torch.zeros_like(y).view(-1, shape[-1])``, ``scatter_(1, index.view(-1, 1), 1)`` with a
  scalar, ``(one_hot - y).detach() + y``), ``soft.max(dim=-1)`` unpacked,
  ``F.softmax(..., dim=-1).reshape(*q.size())``, ``F.binary_cross_entropy(...,
  size_average=False)``, a KL term through ``torch.log(q * K + 1e-20)`` and the temperature
  annealed by ``np.maximum(tau * np.exp(-rate * step), tau_min)`` (a NumPy float dividing the
  logits).

``torch.multinomial`` and ``torch.rand`` draw from one seeded stream for both libraries (the
sample by the inverse CDF of the same uniforms). The lines changed: the gradient lines.

Regression guarded beside them: ``clip_grad_norm_``/``clip_grad_value_`` refused torch's
``foreach`` argument (positional fifth in ``clip_grad_norm_``, as torch's since 2.0); it is
accepted and, as in torch, changes nothing in the result.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

PIXELCNN_SOURCE = """
from torch.autograd import Variable  # (old style: a no-op wrapper today)

LEVELS = 16  # grey levels the model predicts for each pixel


class CausalConv(nn.Conv2d):
    # sees only the pixels above and to the left; kind 'B' sees the centre pixel too
    def __init__(self, kind, *args, **kwargs):
        super(CausalConv, self).__init__(*args, **kwargs)
        assert kind in ('A', 'B')
        self.register_buffer("mask", self.weight.data.clone())
        _, _, height, width = self.weight.size()
        self.mask.fill_(1)
        self.mask[:, :, height // 2 + 1:, :] = 0
        self.mask[:, :, height // 2, width // 2 + (kind == 'B'):] = 0

    def forward(self, x):
        self.weight.data *= self.mask
        return super(CausalConv, self).forward(x)


def make_pixelcnn(channels=6, depth=3, kernel=5):
    pad = kernel // 2
    layers = [CausalConv('A', 1, channels, kernel, 1, pad, bias=False)]
    layers += [nn.BatchNorm2d(channels), nn.ReLU(True)]
    for _ in range(depth - 1):
        layers.append(CausalConv('B', channels, channels, kernel, 1, pad, bias=False))
        layers += [nn.BatchNorm2d(channels), nn.ReLU(True)]
    return nn.Sequential(*layers, nn.Conv2d(channels, LEVELS, 1))


def to_classes(images):
    return (images.data[:, 0] * (LEVELS - 1)).long()


def fit_and_sample(net, train_batches, test_batches, epochs=2, side=5):
    log = []
    adam = optim.Adam(net.parameters())
    for epoch in range(epochs):
        net.train(True)
        for images, _ in train_batches:
            images = Variable(images)
            loss = F.cross_entropy(net(images), Variable(to_classes(images)))
            adam.zero_grad()
            loss.backward()
            adam.step()
            log.append(loss.item())
        net.train(False)
        held_out = [F.cross_entropy(net(Variable(x)), to_classes(x)) for x, _ in test_batches]
        log.append(np.mean([loss.item() for loss in held_out]))

    canvas = torch.Tensor(3, 1, side, side)
    canvas.fill_(0)
    with torch.no_grad():
        for row in range(side):
            for col in range(side):
                logits = net(Variable(canvas))[:, :, row, col]
                probs = F.softmax(logits).data
                canvas[:, :, row, col] = torch.multinomial(probs, 1).float() / (LEVELS - 1.)
    log.append(canvas.numpy().copy())
    log.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
    return log
"""

PIXELCNN_STEP = [
    (
        "            loss.backward()\n            adam.step()",
        "            adam.step(loss.backward())",
    ),
]


def test_pixelcnn_training_and_sampling_match_torch(monkeypatch):
    rng = np.random.default_rng(80)
    tr = [(rng.integers(0, 16, (2, 1, 5, 5)) / 15.0, None) for _ in range(2)]
    te = [(rng.integers(0, 16, (2, 1, 5, 5)) / 15.0, None)]
    theirs, ours = both(PIXELCNN_SOURCE, PIXELCNN_STEP)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        draws = np.random.default_rng(81)

        def multinomial(
            probs, num_samples, replacement=False, generator=None, lib=lib, draws=draws
        ):
            p = np.asarray(probs.numpy(), dtype=np.float64)
            cdf = np.cumsum(p / p.sum(-1, keepdims=True), -1)
            u = draws.uniform(size=p.shape[:-1] + (1,))
            return lib.tensor(np.minimum((u > cdf).sum(-1, keepdims=True), p.shape[-1] - 1))

        with monkeypatch.context() as patch:
            patch.setattr(lib, "multinomial", multinomial)
            torch.manual_seed(0)
            net = names["make_pixelcnn"]()
            if initial is None:
                initial = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
            else:
                net.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
            batches = [
                [(lib.tensor(x, dtype=lib.float32), y) for x, y in part] for part in (tr, te)
            ]
            records.append(names["fit_and_sample"](net, *batches))
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


def test_gradient_clipping_takes_torch_s_foreach_switch():
    """``clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite, foreach)`` and
    ``clip_grad_value_(params, clip_value, foreach=True)``, torch's signatures since 2.0 (the
    multi-tensor kernels give the same result): the same norms and gradients as torch's."""
    w = np.array([[3.0, -4.0], [0.5, 2.0]])
    theirs = torch.tensor(w, requires_grad=True)
    ((theirs * theirs).sum() * 2).backward()
    norm = torch.nn.utils.clip_grad_norm_([theirs], 1.0, 2.0, False, True)
    torch.nn.utils.clip_grad_value_([theirs], 0.3, foreach=True)

    ours = rg.tensor(w).requires_grad_()
    grads = ((ours * ours).sum() * 2).backward()
    our_norm = rg.nn.utils.clip_grad_norm_(grads, [ours], 1.0, 2.0, False, True)
    rg.nn.utils.clip_grad_value_(grads, [ours], 0.3, foreach=True)
    np.testing.assert_allclose(our_norm, norm.item(), rtol=1e-12)
    np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), rtol=1e-12)


# -- a VAE with Gumbel-softmax latents ------------------------------------------------------------
GUMBEL_SOURCE = """
N_VARS, N_CLASSES = 2, 5  # two categorical latents of five classes each
MIN_TEMP, DECAY = 0.4, 0.15
on_gpu = False


def gumbel_noise(shape, eps=1e-20):
    u = torch.rand(shape)
    if on_gpu:
        u = u.cuda()
    return -torch.log(eps - torch.log(u + eps))


def relaxed_one_hot(logits, tau, hard=False):
    soft = F.softmax((logits + gumbel_noise(logits.size())) / tau, dim=-1)
    if hard:
        # straight through: one-hot going forward, the soft sample's gradient going back
        shape = soft.size()
        _, winner = soft.max(dim=-1)
        one_hot = torch.zeros_like(soft).view(-1, shape[-1])
        one_hot.scatter_(1, winner.view(-1, 1), 1)
        soft = (one_hot.view(*shape) - soft).detach() + soft
    return soft.view(-1, N_VARS * N_CLASSES)


class CategoricalVAE(nn.Module):
    def __init__(self, pixels=25, hidden=14):
        super(CategoricalVAE, self).__init__()
        self.pixels = pixels
        codes = N_VARS * N_CLASSES
        self.encoder = nn.Sequential(
            nn.Linear(pixels, hidden), nn.ReLU(), nn.Linear(hidden, codes), nn.ReLU()
        )
        self.decoder = nn.Sequential(
            nn.Linear(codes, hidden), nn.ReLU(), nn.Linear(hidden, pixels), nn.Sigmoid()
        )

    def forward(self, x, tau, hard):
        logits = self.encoder(x.view(-1, self.pixels))
        grouped = logits.view(logits.size(0), N_VARS, N_CLASSES)
        z = relaxed_one_hot(grouped, tau, hard)
        return self.decoder(z), F.softmax(grouped, dim=-1).reshape(*logits.size())


def elbo_loss(recon, x, posterior):
    flat = x.view(-1, recon.shape[1])
    nll = F.binary_cross_entropy(recon, flat, size_average=False) / x.shape[0]
    # KL divergence to the uniform prior over each latent's classes
    kl = torch.sum(posterior * torch.log(posterior * N_CLASSES + 1e-20), dim=-1).mean()
    return nll + kl


def run(model, loader, settings):
    log = []
    opt = optim.Adam(model.parameters(), lr=1e-2)
    tau = settings.temp
    for epoch in range(settings.epochs):
        model.train()
        total = 0.0
        for step, (x, _) in enumerate(loader):
            opt.zero_grad()
            recon, posterior = model(x, tau, settings.hard)
            loss = elbo_loss(recon, x, posterior)
            loss.backward()
            opt.step()
            total += loss.item() * len(x)
            if step % 2 == 1:
                tau = np.maximum(tau * np.exp(-DECAY * step), MIN_TEMP)
            log.append([loss.item(), float(tau)])
        log.append(total / len(loader))
    log.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    return log
"""

GUMBEL_STEP = [
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("            opt.step()\n", "            opt.step(grads)\n"),
]


@pytest.mark.parametrize("hard", [False, True])
def test_gumbel_softmax_vae_matches_torch(monkeypatch, hard):
    import types

    args = types.SimpleNamespace(temp=1.0, hard=hard, epochs=2)
    rng = np.random.default_rng(90)
    batches = [(rng.uniform(0, 1, (4, 1, 5, 5)), None) for _ in range(3)]
    theirs, ours = both(GUMBEL_SOURCE, GUMBEL_STEP)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        draws = np.random.default_rng(91)

        def rand(*shape, lib=lib, draws=draws, **_):
            size = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
            return lib.tensor(draws.uniform(size=tuple(size)), dtype=lib.float32)

        with monkeypatch.context() as patch:
            patch.setattr(lib, "rand", rand)
            torch.manual_seed(0)
            model = names["CategoricalVAE"]()
            if initial is None:
                initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
            loader = [(lib.tensor(x, dtype=lib.float32), y) for x, y in batches]
            records.append(names["run"](model, loader, args))
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
