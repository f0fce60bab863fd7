"""Real ports, continued (the harness: ``tests/real_ports.py``): programs that
differentiate through derivatives or with respect to their inputs, written here in the style of
public projects, each trained a few steps against torch's run of the same program from the same
weights and draws.

- a Lagrangian neural network in the style of the PyTorch ports of MilesCranmer/lagrangian_nns:
  the analytic Lagrangian of a pendulum on a spring gives the target accelerations by
  ``torch.linalg.pinv`` of ``torch.autograd.functional.hessian`` in the velocities, times the
  ``jacobian`` in the positions minus the mixed ``jacobian(... jacobian(..., create_graph=True)
  ...)`` times the velocities (checked against the closed form); the learned Lagrangian (a
  softplus MLP) gives the accelerations by ``hessian``/``jacobian`` of the whole state with
  ``create_graph=True`` and by the tuple form ``hessian(self.lagrangian, (q, q_dot),
  create_graph=True)``, and Adam trains it through the pseudo-inverse and the second
  derivatives.
- score matching in the style of ermongroup/ncsn: annealed denoising score matching
  (``sigmas[levels].view(...)``, ``torch.randn_like``), sliced score matching and its
  variance-reduced form (``x.requires_grad_(True)``, ``autograd.grad(..., x,
  create_graph=True)``), the Hutchinson trace estimator with Rademacher probes in the style of
  FFJORD's (``torch.autograd.grad(f, y, probe, create_graph=True)``), a noise-conditioned net
  with ``embedding.weight.data.uniform_()``, and (annealed) Langevin dynamics under
  ``torch.no_grad()``, its ``print`` log compared.
- a joint energy-based classifier in the style of wgrathwohl/JEM: the energy as
  ``logits.logsumexp(1)`` or ``t.gather(logits, 1, y[:, None])`` (or an energy head of its own,
  unconditionally), a replay buffer drawn by ``t.randint``/``t.rand`` with uniform re-draws
  (``t.rand(...) * 2 - 1``, so both runs share them), SGLD on ``t.autograd.Variable(start,
  requires_grad=True)`` by ``t.autograd.grad(net(x, y=y).sum(), [x], retain_graph=True)`` and
  ``x.data += ...``, the buffer written back by ``buffer[slots] = samples.cpu()``; the loss of
  ``p(x)`` and ``p(y|x)`` by Adam (``betas`` a list), class-conditional and unconditional. The
  regression it guards (found by the program it replaces): the SGLD chain stopped on its
  second step, a leaf made from a view of the buffer (``Variable(buffer[slots],
  requires_grad=True)``) losing its ``requires_grad`` at the write through ``.data``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import re
import types

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

# -- a Lagrangian neural network, in the style of the PyTorch ports of lagrangian_nns -------------
LNN_SOURCE = """
import torch
from torch import nn, optim
from torch.autograd.functional import hessian, jacobian


# the analytic system: a pendulum on a spring, q = (stretch r, angle theta)
def spring_pendulum(q, q_dot, m=1.0, k=12.0, rest=1.0, g=9.8):
    r, theta = q
    r_dot, theta_dot = q_dot
    kinetic = 0.5 * m * (r_dot**2 + (r * theta_dot) ** 2)
    potential = -m * g * r * torch.cos(theta) + 0.5 * k * (r - rest) ** 2
    return kinetic - potential


def accelerations(lagrangian, state):
    # Euler-Lagrange solved for q'': (d2L/dq'2)^+ (dL/dq - d2L/dq dq' q')
    q, q_dot = torch.split(state, 2)
    mass = hessian(lambda v: lagrangian(q, v), q_dot)
    force = jacobian(lambda x: lagrangian(x, q_dot), q)

    def momentum(x):
        return jacobian(lambda v: lagrangian(x, v), q_dot, create_graph=True)

    mixed = jacobian(momentum, q)
    return torch.linalg.pinv(mass) @ (force - mixed @ q_dot)


class LearnedLagrangian(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(4, hidden), nn.Softplus(),
            nn.Linear(hidden, hidden), nn.Softplus(),
            nn.Linear(hidden, 1),
        )

    def lagrangian(self, q, q_dot):
        return self.net(torch.cat([q, q_dot], dim=-1)).squeeze(-1)

    def forward(self, states):
        # derivatives of the whole state at once, then the blocks picked out
        out = []
        for s in states:
            whole = lambda z: self.lagrangian(z[:2], z[2:])
            H = hessian(whole, s, create_graph=True)
            grad = jacobian(whole, s, create_graph=True)
            out.append(torch.linalg.pinv(H[2:, 2:]) @ (grad[:2] - H[2:, :2] @ s[2:]))
        return torch.stack(out)

    def by_parts(self, states):
        # the same by hessian/jacobian of a function of two inputs (nested tuples back)
        out = []
        for s in states:
            q, q_dot = s[:2], s[2:]
            (_, _), (H_vq, H_vv) = hessian(self.lagrangian, (q, q_dot), create_graph=True)
            dq, _ = jacobian(self.lagrangian, (q, q_dot), create_graph=True)
            out.append(torch.linalg.pinv(H_vv) @ (dq - H_vq @ q_dot))
        return torch.stack(out)


states = torch.tensor(data).float()
states[:, 0] = states[:, 0] + 1.5  # a positive stretch
targets = torch.stack([accelerations(spring_pendulum, s) for s in states])
record.append(targets)

model = LearnedLagrangian(hidden=16)
initialize(model)
optimizer = optim.Adam(model.parameters(), lr=0.001)
for step in range(3):
    predict = model.by_parts if step % 2 else model
    loss = ((predict(states) - targets) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.extend([loss.item(), params_of(model)])
"""

LNN_STEPS = [
    (
        "\nimport torch\nfrom torch import nn, optim\n",
        "\nimport retrograd as torch\nfrom retrograd import nn, optim\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_lagrangian_neural_network_trains_as_torch(capsys):
    states = np.random.default_rng(9101).uniform(-1, 1, (2, 4))
    (theirs, ours), _ = runs_with_draws(
        LNN_SOURCE,
        LNN_STEPS,
        capsys,
        9101,
        data=states,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 7
    # the targets, against the closed form of the spring pendulum:
    # r'' = r theta'^2 + g cos(theta) - k/m (r - rest); theta'' = -(g sin(theta) + 2 r' theta') / r
    s = states.astype(np.float32).copy()
    s[:, 0] += 1.5
    r, theta, dr, dtheta = s.T
    closed = np.stack(
        [
            r * dtheta**2 + 9.8 * np.cos(theta) - 12.0 * (r - 1.0),
            -(9.8 * np.sin(theta) + 2 * dr * dtheta) / r,
        ],
        axis=1,
    )
    np.testing.assert_allclose(theirs[0].numpy(), closed, rtol=1e-4, atol=1e-4)
    # The accelerations solve with the Hessian of the Lagrangian in float32, whose conditioning
    # magnifies rounding: on a CPU without AVX-512 (torch's and OpenBLAS's AVX2 kernels) the
    # fifth record, a loss of 2825.9, differs from torch's by 1.26e-4 relative on NumPy and
    # 1.35e-4 on the torch backend; with AVX-512 kernels within 1e-4.
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)


# -- score matching, in the style of ermongroup/ncsn (and FFJORD's trace estimator) ---------------
NCSN_SOURCE = """
import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch import autograd


def denoising_score_loss(net, x, levels, sigmas, power=2.0):
    # perturb each sample at its noise level; the score of the perturbation kernel is the target
    sigma = sigmas[levels].view(x.shape[0], *([1] * len(x.shape[1:])))
    noisy = x + torch.randn_like(x) * sigma
    target = -(noisy - x) / sigma**2
    residual = (net(noisy, levels) - target).view(x.shape[0], -1)
    per_sample = 0.5 * (residual**2).sum(dim=-1) * sigma.squeeze() ** power
    return per_sample.mean(dim=0)


def replicate(x, copies):
    return x.unsqueeze(0).expand(copies, *x.shape).contiguous().view(-1, *x.shape[1:])


def sliced_loss(net, x, copies=1):
    # E[ v' (ds/dx) v + (v' s)^2 / 2 ] over random unit directions v
    x = replicate(x, copies)
    x.requires_grad_(True)
    v = torch.randn_like(x)
    v = v / torch.norm(v, dim=-1, keepdim=True)
    s = net(x)
    projected = torch.sum(s * v, dim=-1)
    jvp = autograd.grad(torch.sum(s * v), x, create_graph=True)[0]
    first = (projected**2 * 0.5).view(copies, -1).mean(dim=0)
    second = torch.sum(v * jvp, dim=-1).view(copies, -1).mean(dim=0)
    return (first + second).mean(), first.mean(), second.mean()


def sliced_loss_vr(net, x, copies=1):
    # the variance-reduced form: |s|^2 / 2 in closed form, Gaussian directions for the trace
    x = replicate(x, copies)
    x.requires_grad_(True)
    v = torch.randn_like(x)
    s = net(x)
    jvp = autograd.grad(torch.sum(s * v), x, create_graph=True)[0]
    first = (torch.sum(s.view(x.shape[0], -1) ** 2, dim=-1) / 2.0).view(copies, -1).mean(dim=0)
    second = torch.sum((v * jvp).view(x.shape[0], -1), dim=-1).view(copies, -1).mean(dim=0)
    return (first + second).mean(), first.mean(), second.mean()


def trace_estimate(f, y, probe):
    # Hutchinson: probe' (df/dy) probe, one vector-Jacobian product per sample
    vjp = torch.autograd.grad(f, y, probe, create_graph=True)[0]
    return (vjp * probe).view(y.shape[0], -1).sum(dim=1)


def rademacher(y):
    signs = torch.randint(0, 2, y.shape).to(y)
    return 2 * signs - 1


def hutchinson_loss(net, x):
    x = x.clone().requires_grad_()
    s = net(x)
    return (0.5 * (s**2).sum(dim=1) + trace_estimate(s, x, rademacher(x))).mean()


class NoiseConditionedNet(nn.Module):
    # the noise level enters by a learned per-level gain on the hidden units
    def __init__(self, dim, hidden, levels):
        super().__init__()
        self.inp = nn.Linear(dim, hidden)
        self.gain = nn.Embedding(levels, hidden)
        self.gain.weight.data.uniform_()
        self.mid = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, dim)

    def forward(self, x, level):
        h = F.softplus(self.inp(x)) * self.gain(level)
        return self.out(F.elu(self.mid(h)))


def plain_net(dim, hidden):
    return nn.Sequential(
        nn.Linear(dim, hidden), nn.Softplus(), nn.Linear(hidden, hidden), nn.Tanh(),
        nn.Linear(hidden, dim),
    )


def annealed_langevin(x, net, sigmas, steps_per_level=100, eps=2e-5):
    # Langevin steps at each noise level in turn, the step size shrinking with sigma^2
    frames = []
    with torch.no_grad():
        for i, sigma in enumerate(sigmas):
            level = (torch.ones(x.shape[0], device=x.device) * i).long()
            alpha = eps * (sigma / sigmas[-1]) ** 2
            for _ in range(steps_per_level):
                frames.append(torch.clamp(x, 0.0, 1.0).to("cpu"))
                x = x + alpha * net(x, level) + torch.randn_like(x) * np.sqrt(alpha * 2)
    return frames


def langevin(x, net, steps=1000, eps=2e-5):
    frames = []
    with torch.no_grad():
        for _ in range(steps):
            frames.append(torch.clamp(x, 0.0, 1.0).to("cpu"))
            noise = torch.randn_like(x) * np.sqrt(eps * 2)
            s = net(x)
            x = x + eps * s + noise
            print("score size: mean {}, max {}".format(s.abs().mean(), s.abs().max()))
    return frames


levels = 4
sigmas = torch.tensor(np.geomspace(1.0, 0.01, levels)).float()
data = torch.tensor(points).float()

net = NoiseConditionedNet(2, 16, levels)
initialize(net)
optimizer = optim.Adam(
    net.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.0, amsgrad=False
)
for batch in data.split(8):
    chosen = torch.randint(0, len(sigmas), (batch.shape[0],), device=batch.device)
    loss = denoising_score_loss(net, batch, chosen, sigmas, 2.0)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(params_of(net))
record.append(torch.stack(annealed_langevin(torch.rand(4, 2), net, sigmas, 3, 0.01)).numpy())

for kind in ("sliced", "sliced_vr", "hutchinson"):
    net = plain_net(2, 16)
    initialize(net)
    optimizer = optim.Adam(net.parameters(), lr=1e-3)
    for batch in data.split(8):
        if kind == "sliced":
            loss = sliced_loss(net, batch, copies=2)[0]
        elif kind == "sliced_vr":
            loss = sliced_loss_vr(net, batch, copies=1)[0]
        else:
            loss = hutchinson_loss(net, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append(params_of(net))
    record.append(torch.stack(langevin(torch.rand(4, 2), net, steps=2, eps=0.01)).numpy())
"""

NCSN_STEPS = [
    (
        "\nimport torch\nfrom torch import nn, optim\nfrom torch.nn import functional as F\n"
        "from torch import autograd\n",
        "\nimport retrograd as torch\nfrom retrograd import nn, optim\n"
        "from retrograd.nn import functional as F\nfrom retrograd import autograd\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_score_matching_losses_and_langevin_sampling_run_as_torch(capsys):
    points = np.random.default_rng(9102).standard_normal((16, 2))
    (theirs, ours), logs = runs_with_draws(
        NCSN_SOURCE,
        NCSN_STEPS,
        capsys,
        9102,
        points=points,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 16
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert logs[0].count("score size") == logs[1].count("score size") == 6


# -- a joint energy-based classifier, in the style of wgrathwohl/JEM -----------------------------
JEM_SOURCE = """
import torch as t, torch.nn as nn
from torch.nn import functional as tnnF
import numpy as np


class TinyBackbone(nn.Module):
    # two convolutions and a global average: a stand-in for a wide ResNet (exposes last_dim)
    def __init__(self, width, channels=3, leak=0.2):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, stride=2)
        self.act = nn.LeakyReLU(leak)
        self.last_dim = width

    def forward(self, x):
        h = self.act(self.conv2(self.act(self.conv1(x))))
        return tnnF.avg_pool2d(h, h.shape[2]).view(h.size(0), -1)


class EnergyNet(nn.Module):
    # unconditional: an energy head of its own beside the classifier
    def __init__(self, width=4, n_classes=10):
        super().__init__()
        self.body = TinyBackbone(width)
        self.energy_head = nn.Linear(self.body.last_dim, 1)
        self.class_head = nn.Linear(self.body.last_dim, n_classes)

    def forward(self, x, y=None):
        return self.energy_head(self.body(x)).squeeze()

    def classify(self, x):
        return self.class_head(self.body(x)).squeeze()


class ClassEnergyNet(EnergyNet):
    # the classifier's logits are the energies: logsumexp for p(x), the y-th for p(x, y)
    def forward(self, x, y=None):
        logits = self.classify(x)
        return logits.logsumexp(1) if y is None else t.gather(logits, 1, y[:, None])


def uniform_noise(n):
    return t.rand(n, channels, size, size) * 2 - 1


def build(cfg):
    net = (EnergyNet if cfg.uncond else ClassEnergyNet)(cfg.width, cfg.n_classes)
    if not cfg.uncond:
        assert cfg.buffer_size % cfg.n_classes == 0, "one buffer slice per class"
    return net, uniform_noise(cfg.buffer_size)


def make_sampler(cfg):
    def starts(buffer, n, y=None):
        # from the replay buffer (the class's slice of it when y is given), some re-drawn
        per_slice = len(buffer) if y is None else len(buffer) // cfg.n_classes
        slots = t.randint(0, per_slice, (n,))
        if y is not None:
            slots = y.cpu() * per_slice + slots
        fresh = (t.rand(n) < cfg.reinit_freq).float()[:, None, None, None]
        return fresh * uniform_noise(n) + (1 - fresh) * buffer[slots], slots

    def sgld(net, buffer, y=None, steps=cfg.n_steps):
        net.eval()
        start, slots = starts(buffer, cfg.batch_size if y is None else y.size(0), y)
        x = t.autograd.Variable(start, requires_grad=True)
        for _ in range(steps):
            # climb the (negative) energy, with a little noise, outside the graph
            step = t.autograd.grad(net(x, y=y).sum(), [x], retain_graph=True)[0]
            x.data += cfg.sgld_lr * step + cfg.sgld_std * t.randn_like(x)
        net.train()
        samples = x.detach()
        buffer[slots] = samples.cpu()
        return samples

    return sgld


device = t.device("cpu")
sgld = make_sampler(cfg)
net, buffer = build(cfg)
initialize(net)
opt = t.optim.Adam(net.parameters(), lr=cfg.lr, betas=[0.9, 0.999], weight_decay=cfg.weight_decay)
seen = 0
for epoch in range(cfg.n_epochs):
    for i, (x_data, _) in enumerate(unlabelled):
        x_data = t.tensor(x_data, dtype=t.float32)
        x_lab, y_lab = labelled[i]
        x_lab, y_lab = t.tensor(x_lab).float(), t.tensor(y_lab)
        total = 0.0
        if cfg.p_x_weight > 0:
            if cfg.conditional_samples:
                y_q = t.randint(0, cfg.n_classes, (cfg.batch_size,)).to(device)
                x_q = sgld(net, buffer, y=y_q)
            else:
                x_q = sgld(net, buffer)
            e_data, e_model = net(x_data).mean(), net(x_q).mean()
            print("p(x)   {}:{:>d} data={:>14.9f} model={:>14.9f} gap={:>14.9f}".format(
                epoch, i, e_data, e_model, e_data - e_model))
            total += cfg.p_x_weight * -(e_data - e_model)
        if cfg.p_y_given_x_weight > 0:
            logits = net.classify(x_lab)
            xent = nn.CrossEntropyLoss()(logits, y_lab)
            accuracy = (logits.max(1)[1] == y_lab).float().mean()
            print("p(y|x) {}:{:>d} loss={:>14.9f} acc={:>14.9f}".format(
                epoch, seen, xent.item(), accuracy.item()))
            total += cfg.p_y_given_x_weight * xent
        if total.abs().item() > 1e8:
            raise RuntimeError("the loss diverged")
        opt.zero_grad()
        total.backward()
        opt.step()
        seen += 1
        record.extend([total.item(), params_of(net), buffer.numpy().copy()])
"""

JEM_STEPS = [
    (
        "\nimport torch as t, torch.nn as nn\nfrom torch.nn import functional as tnnF\n",
        "\nimport retrograd as t, retrograd.nn as nn\n"
        "from retrograd.nn import functional as tnnF\n",
    ),
    (
        "        total.backward()\n        opt.step()\n",
        "        grads = total.backward()\n        opt.step(grads)\n",
    ),
]


def _masked(log: str) -> str:
    return re.sub(r"-?\d+\.\d+", "#", log)


def _jem_config(uncond):
    return types.SimpleNamespace(
        width=4, n_classes=3, uncond=uncond, buffer_size=6, n_steps=2, batch_size=4,
        reinit_freq=0.25, sgld_lr=1.0, sgld_std=0.01, lr=1e-3, weight_decay=0.0, n_epochs=1,
        p_x_weight=1.0, p_y_given_x_weight=1.0, conditional_samples=not uncond,
    )  # fmt: skip


@pytest.mark.parametrize("uncond", [False, True])
def test_energy_classifier_sgld_and_replay_buffer_train_as_torch(capsys, uncond):
    rng = np.random.default_rng(9103)
    unlabelled = [(rng.uniform(-1, 1, (4, 3, 4, 4)), None) for _ in range(2)]
    labelled = [(rng.uniform(-1, 1, (4, 3, 4, 4)), rng.integers(0, 3, 4)) for _ in range(2)]
    (theirs, ours), logs = runs_with_draws(
        JEM_SOURCE, JEM_STEPS, capsys, 9103, cfg=_jem_config(uncond), channels=3, size=4,
        unlabelled=unlabelled, labelled=labelled, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert len(theirs) == 6
    # the buffer was written back: it differs from one step to the next
    assert not np.array_equal(theirs[2], theirs[5])
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert _masked(logs[1]) == _masked(logs[0])  # (the numbers: in the records)
