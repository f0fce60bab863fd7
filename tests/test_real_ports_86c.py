# ruff: noqa: E501  (the embedded script and the port steps replacing its lines run past 100 columns)
"""Real ports, round 86 (the harness: ``tests/real_ports.py``): the Deep Ritz method, a program
written here in the style of ZeyuJia/DeepRitz and the Deep Ritz paper's (E and Yu) Poisson
problem, with the energy's gradient taken by autograd as the PINN codes take it and an L-BFGS
polish at the end; run in float64 under torch and, ported, under retrograd from the same weights
and draws, every record compared.

It reaches:

- ``torch.set_default_dtype(torch.float64)`` at the top of the program;
- the Ritz network: blocks of two ``nn.Linear`` with the activation ``torch.relu(x) ** 3``
  (``F.relu(x).pow(3)``) and an identity skip, the input padded to the width by
  ``F.pad(x, (0, width - d))``, held in an ``nn.ModuleList``;
- the energy: interior points ``torch.rand(n, 2) * 2 - 1`` with ``requires_grad_()``,
  ``torch.autograd.grad(u, x, grad_outputs=torch.ones_like(u), create_graph=True)[0]``, the
  energy density ``0.5 * (grad_u ** 2).sum(dim=1, keepdim=True) - f * u`` with ``f = 2 pi^2
  sin(pi x) sin(pi y)`` by ``torch.sin(math.pi * x[:, 0:1])``; boundary points of the four sides
  by ``torch.cat`` of ``torch.full_like``/``torch.ones``; a penalty ``beta * mean(u^2)``;
- training: ``Adam`` with ``MultiStepLR(milestones=[...], gamma=0.1)``, points redrawn every
  ``sample_step`` steps; then ``optim.LBFGS(lr=1, max_iter=, history_size=,
  line_search_fn="strong_wolfe")`` with a ``closure`` over fixed points;
- evaluation: ``torch.meshgrid(xs, ys, indexing="ij")``, ``torch.stack([...], dim=-1)
  .reshape(-1, 2)``, the relative L2 error ``torch.linalg.norm(u - exact) /
  torch.linalg.norm(exact)``.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``, the closure returning ``loss, grads``).
"""

from __future__ import annotations

import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

DEEP_RITZ_SOURCE = """import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

params = {"d": 2, "width": 8, "depth": 2, "dd": 1, "bodyBatch": 64, "bdryBatch": 16,
          "beta": 500.0, "lr": 0.01, "milestones": [3, 5], "gamma": 0.1, "trainStep": 6,
          "sampleStep": 3}


class RitzNet(nn.Module):
    def __init__(self, params):
        super(RitzNet, self).__init__()
        self.params = params
        self.linear = nn.ModuleList()
        for _ in range(params["depth"]):
            self.linear.append(nn.Linear(params["width"], params["width"]))
            self.linear.append(nn.Linear(params["width"], params["width"]))
        self.linearOut = nn.Linear(params["width"], params["dd"])

    def forward(self, x):
        x = F.pad(x, (0, self.params["width"] - self.params["d"]))
        for i in range(0, len(self.linear), 2):
            x_temp = torch.relu(self.linear[i](x)) ** 3
            x_temp = F.relu(self.linear[i + 1](x_temp)).pow(3)
            x = x_temp + x
        return self.linearOut(x)


def ffun(data):
    return 2 * math.pi ** 2 * torch.sin(math.pi * data[:, 0:1]) * torch.sin(math.pi * data[:, 1:2])


def exact(data):
    return torch.sin(math.pi * data[:, 0:1]) * torch.sin(math.pi * data[:, 1:2])


def sample_interior(n):
    return torch.rand(n, 2) * 2 - 1


def sample_boundary(n):
    t = torch.rand(n // 4, 1) * 2 - 1
    sides = [torch.cat([t, torch.ones_like(t)], dim=1), torch.cat([t, -torch.ones_like(t)], dim=1),
             torch.cat([torch.full_like(t, 1.0), t], dim=1), torch.cat([torch.full_like(t, -1.0), t], dim=1)]
    return torch.cat(sides, dim=0)


def ritz_loss(model, interior, boundary):
    interior = interior.clone().requires_grad_()
    u = model(interior)
    grad_u = torch.autograd.grad(u, interior, grad_outputs=torch.ones_like(u), create_graph=True)[0]
    energy = torch.mean(0.5 * (grad_u ** 2).sum(dim=1, keepdim=True) - ffun(interior) * u)
    penalty = params["beta"] * torch.mean(model(boundary) ** 2)
    return energy + penalty, energy, penalty


def relative_error(model, n=11):
    xs = torch.linspace(-1, 1, n)
    gx, gy = torch.meshgrid(xs, xs, indexing="ij")
    grid = torch.stack([gx, gy], dim=-1).reshape(-1, 2)
    with torch.no_grad():
        u = model(grid)
        target = exact(grid)
    return (torch.linalg.norm(u - target) / torch.linalg.norm(target)).item()


model = RitzNet(params)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=params["lr"])
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=params["milestones"],
                                                 gamma=params["gamma"])

interior, boundary = sample_interior(params["bodyBatch"]), sample_boundary(params["bdryBatch"])
for step in range(params["trainStep"]):
    if step % params["sampleStep"] == params["sampleStep"] - 1:
        interior, boundary = sample_interior(params["bodyBatch"]), sample_boundary(params["bdryBatch"])
    loss, energy, penalty = ritz_loss(model, interior, boundary)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), energy.item(), penalty.item(), scheduler.get_last_lr()[0]])
record.append(params_of(model))
record.append(relative_error(model))

lbfgs = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=5, history_size=5,
                          line_search_fn="strong_wolfe")


def closure():
    lbfgs.zero_grad()
    loss, _, _ = ritz_loss(model, interior, boundary)
    loss.backward()
    return loss


for _ in range(2):
    loss = lbfgs.step(closure)
    record.append(loss.item())
record.append(params_of(model))
record.append(relative_error(model))
record.append(repr(torch.get_default_dtype()).replace("retrograd", "torch"))
"""

DEEP_RITZ_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    (
        "    loss.backward()\n    return loss\n",
        "    grads = loss.backward()\n    return loss, grads\n",
    ),
]


@pytest.fixture
def default_dtype_restored():
    """torch's and retrograd's default dtypes as they were before the test (the program sets
    float64)."""
    saved = torch.get_default_dtype(), rg.get_default_dtype()
    yield
    torch.set_default_dtype(saved[0])
    rg.set_default_dtype(saved[1])


@pytest.mark.usefixtures("default_dtype_restored")
def test_deep_ritz_poisson_with_autograd_energy_and_lbfgs_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        DEEP_RITZ_SOURCE,
        DEEP_RITZ_STEPS,
        capsys,
        8603,
        initialize=initializer(),
        params_of=params_of,
    )
    assert_records_agree(ours, theirs, rtol=1e-8, atol=1e-10)
