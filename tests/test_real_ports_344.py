"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the energy-based vector fields of DiffEqML/torchdyn (``torchdyn/models/energy.py`` as it
stands: ``Stable``, ``HNN`` and ``LNN``), each fitted to a vector field the way torchdyn's
tutorials fit them and then rolled out by a hand-written RK4, small, against torch's run of the
same code from the same weights.

What it exercises: ``with torch.set_grad_enabled(True)`` around ``x.requires_grad_(True)``
and ``-torch.autograd.grad(eps, x, allow_unused=False, create_graph=True)[0]`` (``Stable``);
``x.requires_grad_(True) ; n = x.shape[1] // 2`` on the caller's tensor, the symplectic
``torch.cat([gradH[:, n:], -gradH[:, :n]], 1).to(x)`` (``HNN``); the ``LNN``'s
``torch.autograd.Variable(x, requires_grad=True)``, a tuple of per-sample rows ``x[i, :]``
mapped through ``functools.partial(torch.autograd.functional.jacobian, self._lagrangian,
create_graph=True)`` and ``hessian`` of a method, ``hess[n:, n:].pinverse()@(jac[:n] -
hess[n:, :n]@qqd[n:])`` and ``torch.cat([qdd[None] for qdd in qdd_batch])``; each trained
by Adam through those derivatives, and the rollouts under grad mode with ``.detach()``
between steps.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``opt.step(grads)``).
"""

from __future__ import annotations

import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

ENERGY_SOURCE = """
import torch
import torch.nn as nn
from torch.autograd.functional import jacobian, hessian
from functools import partial

class Stable(nn.Module):
    \"\"\"Stable Neural ODE

    :param func: function parametrizing the vector field.
    :type func: nn.Module
    \"\"\"
    def __init__(self, net:nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        with torch.set_grad_enabled(True):
            bs, n = x.shape[0], x.shape[1] // 2
            x = x.requires_grad_(True)
            eps = self.net(x).sum()
            out = -torch.autograd.grad(eps, x, allow_unused=False, create_graph=True)[0]
        return out

class HNN(nn.Module):
    \"\"\"Hamiltonian Neural ODE

    :param net: function parametrizing the vector field.
    :type net: nn.Module
    \"\"\"
    def __init__(self, net:nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        x.requires_grad_(True) ; n = x.shape[1] // 2
        gradH = torch.autograd.grad(self.net(x).sum(), x,
                                    create_graph=True)[0]
        return torch.cat([gradH[:, n:], -gradH[:, :n]], 1).to(x)


class LNN(nn.Module):
    \"\"\"Lagrangian Neural ODE

    :param net: function parametrizing the vector field.
    :type net: nn.Module
    \"\"\"
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        self.n = n = x.shape[1]//2 ; bs = x.shape[0]
        x = torch.autograd.Variable(x, requires_grad=True)
        qqd_batch = tuple(x[i, :] for i in range(bs))
        jac = tuple(map(partial(jacobian, self._lagrangian, create_graph=True), qqd_batch))
        hess = tuple(map(partial(hessian, self._lagrangian, create_graph=True), qqd_batch))
        qdd_batch = tuple(map(self._qdd, zip(jac, hess, qqd_batch)))
        qd, qdd = x[:, n:], torch.cat([qdd[None] for qdd in qdd_batch])
        return torch.cat([qd, qdd], 1)

    def _lagrangian(self, qqd):
        return self.net(qqd).sum()

    def _qdd(self, inp):
        n = self.n ; jac, hess, qqd = inp
        return hess[n:, n:].pinverse()@(jac[:n] - hess[n:, :n]@qqd[n:])


# the tutorials' fit: a vector field sampled on random states, matched by Adam
def fit(model, x, dxdt, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        pred = model(x.clone())
        loss = ((pred - dxdt) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        record.append(loss.item())
        print(f"{type(model).__name__} step {step} loss {loss.item():.6f}")
    return model


def rk4(f, x, h, n_steps):
    traj = [x]
    for _ in range(n_steps):
        k1 = f(x)
        k2 = f(x + h / 2 * k1)
        k3 = f(x + h / 2 * k2)
        k4 = f(x + h * k3)
        x = (x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)).detach()
        traj.append(x)
    return torch.stack(traj)


kind = {"stable": Stable, "hnn": HNN, "lnn": LNN}[which]
net = nn.Sequential(nn.Linear(2, 16), nn.Softplus(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
initialize(net)
model = kind(net)
x = torch.randn(12, 2)
if which == "stable":  # gradient flow of a quadratic bowl
    dxdt = -torch.cat([2.0 * x[:, :1], 0.5 * x[:, 1:]], 1)
elif which == "hnn":  # mass-spring: H = (q^2 + p^2) / 2
    dxdt = torch.cat([x[:, 1:], -x[:, :1]], 1)
else:  # pendulum: L = qd^2 / 2 + cos(q)
    dxdt = torch.cat([x[:, 1:], -torch.sin(x[:, :1])], 1)
fit(model, x, dxdt, steps=4, lr=1e-2)
record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})
record.append(rk4(model, torch.tensor([[1.0, 0.0], [0.5, -0.5]]), 0.1, 5).detach().numpy())
"""

ENERGY_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.autograd.functional",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.autograd.functional",
    ),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


@pytest.mark.parametrize("which", ["stable", "hnn", "lnn"])
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
    assert len(logs[1].splitlines()) == len(logs[0].splitlines()) == 4
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
