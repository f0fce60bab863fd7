"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
energy-based vector fields (a gradient flow, Hamiltonian and Lagrangian networks), each fitted to
a vector field and then rolled out by a hand-written RK4, small, against torch's run of the same
code from the same weights.

- Programs written here in the style of DiffEqML/torchdyn's energy models and tutorials:
  ``with torch.set_grad_enabled(True)`` around ``x.requires_grad_(True)`` and
  ``-torch.autograd.grad(energy, x, allow_unused=False, create_graph=True)[0]`` (the gradient
  flow); ``x.requires_grad_(True)`` on the caller's tensor and the symplectic
  ``torch.cat([dH[:, n:], -dH[:, :n]], 1).to(x)`` (the Hamiltonian); the Lagrangian's
  ``torch.autograd.Variable(x, requires_grad=True)``, a tuple of per-sample rows ``x[i, :]``
  mapped through ``functools.partial(torch.autograd.functional.jacobian, self.method,
  create_graph=True)`` and ``hessian``, ``hess[n:, n:].pinverse() @ (jac[:n] - hess[n:, :n] @
  qd)`` and ``torch.cat([a[None] for a in accelerations])``; each trained by Adam through
  those derivatives, and the rollouts under grad mode with ``.detach()`` between steps.

Compared against torch: the losses, the weights after fitting, the rollouts and the log. The
lines a port changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

ENERGY_SOURCE = """
import functools

import torch
import torch.nn as nn
from torch.autograd.functional import hessian, jacobian


class GradientFlow(nn.Module):
    # dx/dt = -grad E(x): the energy only decreases along a trajectory
    def __init__(self, energy):
        super().__init__()
        self.energy = energy

    def forward(self, x):
        with torch.set_grad_enabled(mode=True):
            x = x.requires_grad_(True)
            e = self.energy(x).sum()
            return -torch.autograd.grad(e, x, allow_unused=False, create_graph=True)[0]


class Hamiltonian(nn.Module):
    # x = (q, p); dq/dt = dH/dp, dp/dt = -dH/dq
    def __init__(self, energy):
        super().__init__()
        self.energy = energy

    def forward(self, x):
        x.requires_grad_(True)
        half = x.shape[1] // 2
        dh = torch.autograd.grad(self.energy(x).sum(), x, create_graph=True)[0]
        return torch.cat([dh[:, half:], -dh[:, :half]], 1).to(x)


class Lagrangian(nn.Module):
    # x = (q, qd); the Euler-Lagrange equations solved for qdd, one sample at a time
    def __init__(self, energy):
        super().__init__()
        self.energy = energy

    def lagrangian(self, state):
        return self.energy(state).sum()

    def forward(self, x):
        half = x.shape[1] // 2
        leaf = torch.autograd.Variable(x, requires_grad=True)
        rows = tuple(leaf[i, :] for i in range(leaf.shape[0]))
        first = map(functools.partial(jacobian, self.lagrangian, create_graph=True), rows)
        second = map(functools.partial(hessian, self.lagrangian, create_graph=True), rows)
        accelerations = []
        for jac, hess, row in zip(first, second, rows):
            force = jac[:half] - hess[half:, :half] @ row[half:]
            accelerations.append(hess[half:, half:].pinverse() @ force)
        return torch.cat([leaf[:, half:], torch.cat([a[None] for a in accelerations])], 1)


def train(field, states, rates, steps, lr):
    opt = torch.optim.Adam(field.parameters(), lr=lr)
    for step in range(steps):
        loss = ((field(states.clone()) - rates) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        record.append(loss.item())
        print(f"{field.__class__.__name__}: step {step}, loss {loss.item():.6f}")


def runge_kutta(field, x, dt, steps):
    path = [x]
    for _ in range(steps):
        a = field(x)
        b = field(x + 0.5 * dt * a)
        c = field(x + 0.5 * dt * b)
        d = field(x + dt * c)
        x = (x + dt * (a + 2 * b + 2 * c + d) / 6).detach()
        path.append(x)
    return torch.stack(path)


energy = nn.Sequential(
    nn.Linear(2, 12), nn.Softplus(), nn.Linear(12, 12), nn.Tanh(), nn.Linear(12, 1)
)
initialize(energy)
states = torch.randn(8, 2)
q, v = states[:, :1], states[:, 1:]
if which == "flow":
    field, rates = GradientFlow(energy), -torch.cat([2.0 * q, 0.5 * v], 1)  # a tilted bowl
elif which == "hamiltonian":
    field, rates = Hamiltonian(energy), torch.cat([v, -q], 1)  # a spring
else:
    field, rates = Lagrangian(energy), torch.cat([v, -torch.sin(q)], 1)  # a pendulum
train(field, states, rates, steps=3, lr=1e-2)
record.append({name: t.detach().numpy() for name, t in field.state_dict().items()})
start = torch.tensor([[0.8, 0.0], [0.3, -0.6]])
record.append(runge_kutta(field, start, 0.1, 4).detach().numpy())
"""

ENERGY_STEPS = [
    ("from torch.autograd.functional import", "from retrograd.autograd.functional import"),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


@pytest.mark.parametrize("which", ["flow", "hamiltonian", "lagrangian"])
def test_torchdyn_energy_models_fit_and_roll_out_as_torch(capsys, which):
    initialize, records, logs = initializer(), [], []
    # torch's initial weights, which the port loads, the same whatever ran before on the
    # worker: a few of L-BFGS's or Adam's trajectories from other weights part by more
    # than the tolerance (rounding that a line search's branch or a long fit amplifies)
    torch.manual_seed(344)
    for lib in (torch, rg):
        record = []
        text = ENERGY_SOURCE if lib is torch else port(ENERGY_SOURCE, ENERGY_STEPS)
        with SharedDraws(lib, 344):
            run_source(text, lib, record=record, initialize=initialize, which=which)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert len(logs[1].splitlines()) == len(logs[0].splitlines()) == 3
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
