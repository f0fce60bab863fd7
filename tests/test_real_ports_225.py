# ruff: noqa: E501  (the programs are kept in their authors' manner: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
differentiable physics in the manner of the "molecular dynamics with PyTorch autograd"
notebooks and of differentiable PDE solvers.

- a Lennard-Jones fluid in a periodic box: pair displacements by broadcasting with the
  minimum image ``dr - L * torch.round(dr / L)``, pairs by ``torch.triu_indices``, the
  energy summed over them, forces ``-torch.autograd.grad(energy, pos, create_graph=...)[0]``,
  velocity Verlet; then the potential's ``epsilon`` and ``sigma`` (kept as logs) fitted to a
  reference trajectory by differentiating through the integrator (``create_graph=True``,
  second derivatives of the energy), with ``torch.nn.utils.clip_grad_norm_``.
- the heat equation ``u_t = D u_xx``: explicit Euler with the Laplacian by ``F.conv1d`` of
  the stencil ``[1, -2, 1]`` over ``F.pad(..., mode="circular")``, and Crank-Nicolson with
  ``torch.linalg.solve`` of ``I - r/2 A`` built by ``torch.diag(..., 1)``; the diffusivity
  (``softplus``) and the initial condition recovered from the final state by Adam through
  both solvers; the conserved total heat checked along the way.

The lines changed: the imports and the gradient lines.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


MD_SOURCE = """
import torch
import torch.nn as nn


def lj_energy(pos, box, log_eps, log_sigma, cutoff=2.5):
    eps, sigma = log_eps.exp(), log_sigma.exp()
    n = pos.shape[0]
    dr = pos[:, None, :] - pos[None, :, :]
    dr = dr - box * torch.round(dr / box)
    i, j = torch.triu_indices(n, n, offset=1)
    r2 = (dr[i, j] ** 2).sum(-1)
    sr6 = (sigma ** 2 / r2) ** 3
    pair = 4 * eps * (sr6 ** 2 - sr6)
    shift = 4 * eps * ((sigma / cutoff) ** 12 - (sigma / cutoff) ** 6)
    pair = torch.where(r2 < cutoff ** 2, pair - shift, torch.zeros_like(pair))
    return pair.sum()


def forces(pos, box, log_eps, log_sigma, create_graph):
    if not pos.requires_grad:
        pos = pos.requires_grad_()
    energy = lj_energy(pos, box, log_eps, log_sigma)
    force = -torch.autograd.grad(energy, pos, create_graph=create_graph)[0]
    return energy, force


def simulate(pos, vel, box, log_eps, log_sigma, steps, dt=0.005, mass=1.0, create_graph=False):
    energy, f = forces(pos, box, log_eps, log_sigma, create_graph)
    trajectory, energies = [pos], []
    for step in range(steps):
        vel = vel + 0.5 * dt * f / mass
        pos = pos + dt * vel
        pos = pos - box * torch.floor(pos / box)
        energy, f = forces(pos, box, log_eps, log_sigma, create_graph)
        vel = vel + 0.5 * dt * f / mass
        kinetic = 0.5 * mass * (vel ** 2).sum()
        energies.append((energy + kinetic).detach())
        trajectory.append(pos)
    return torch.stack(trajectory), torch.stack(energies), vel


def fit_potential(pos0, vel0, box, target, steps, iterations, record):
    log_eps = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    log_sigma = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([log_eps, log_sigma], lr=0.02)
    for it in range(iterations):
        optimizer.zero_grad()
        traj, energies, _ = simulate(pos0, vel0, box, log_eps, log_sigma, steps, create_graph=True)
        diff = traj - target
        diff = diff - box * torch.round(diff / box)
        loss = (diff ** 2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([log_eps, log_sigma], 1.0)
        optimizer.step()
        record.append(loss.item())
        print(f"iter {it} loss {loss.item():.3e} eps {log_eps.exp().item():.4f} sigma {log_sigma.exp().item():.4f}")
    record.append([log_eps.item(), log_sigma.item()])
"""

MD_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    (
        "        loss.backward()\n        torch.nn.utils.clip_grad_norm_([log_eps, log_sigma], 1.0)\n        optimizer.step()\n",
        "        grads = loss.backward()\n        torch.nn.utils.clip_grad_norm_(grads, [log_eps, log_sigma], 1.0)\n        optimizer.step(grads)\n",
    ),
]


def _lattice(n_side=3, spacing=1.2, seed=2250):
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.arange(n_side)] * 2, indexing="ij"), -1).reshape(-1, 2)
    pos = (grid + 0.5) * spacing + 0.03 * rng.standard_normal(grid.shape)
    vel = 0.5 * rng.standard_normal(grid.shape)
    vel -= vel.mean(0)
    return pos, vel, n_side * spacing


def test_lennard_jones_md_and_potential_fit_through_the_integrator_as_torch(capsys):
    pos, vel, box = _lattice()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        names = run_source(MD_SOURCE if lib is torch else port(MD_SOURCE, MD_STEPS), lib)
        pos0, vel0 = lib.tensor(pos), lib.tensor(vel)
        true_log_eps, true_log_sigma = (
            lib.tensor(0.0, dtype=lib.float64),
            lib.tensor(0.0, dtype=lib.float64),
        )
        traj, energies, vel_end = names["simulate"](
            pos0, vel0, box, true_log_eps, true_log_sigma, 30
        )
        record.extend([traj.detach().numpy(), energies.numpy(), vel_end.detach().numpy()])
        target = traj[:9].detach()
        names["fit_potential"](pos0, vel0, box, target, 8, 6, record)
        records.append(record)
        logs.append(capsys.readouterr().out)
    drift = np.ptp(records[0][1]) / abs(records[0][1].mean())
    assert drift < 1e-2  # velocity Verlet keeps the total energy
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)


HEAT_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


def explicit_step(u, D, dx, dt):
    stencil = torch.tensor([[[1., -2., 1.]]], dtype=u.dtype)
    lap = F.conv1d(F.pad(u[:, None, :], (1, 1), mode="circular"), stencil)[:, 0, :] / dx ** 2
    return u + dt * D * lap


def crank_nicolson_matrices(n, D, dx, dt):
    r = D * dt / dx ** 2
    off = torch.ones(n - 1, dtype=torch.float64)
    A = torch.diag(-2 * torch.ones(n, dtype=torch.float64)) + torch.diag(off, 1) + torch.diag(off, -1)
    A[0, -1] = 1.
    A[-1, 0] = 1.
    eye = torch.eye(n, dtype=torch.float64)
    return eye - 0.5 * r * A, eye + 0.5 * r * A


def solve(u0, D, dx, dt, steps, scheme):
    u = u0
    if scheme == "crank_nicolson":
        lhs, rhs = crank_nicolson_matrices(u0.shape[-1], D, dx, dt)
        for _ in range(steps):
            u = torch.linalg.solve(lhs, (rhs @ u.unsqueeze(-1))).squeeze(-1)
    else:
        for _ in range(steps):
            u = explicit_step(u, D, dx, dt)
    return u


class Inverse(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.raw_D = nn.Parameter(torch.tensor(-1., dtype=torch.float64))
        self.u0 = nn.Parameter(torch.zeros(1, n, dtype=torch.float64))

    @property
    def D(self):
        return F.softplus(self.raw_D)


def recover(target, true_u0, dx, dt, steps, scheme, iterations, record):
    model = Inverse(target.shape[-1])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for it in range(iterations):
        optimizer.zero_grad()
        u = solve(model.u0, model.D, dx, dt, steps, scheme)
        heat = (u.sum() - model.u0.sum()).abs().item()
        assert heat < 1e-8, heat
        loss = F.mse_loss(u, target) + 1e-3 * (model.u0[:, 1:] - model.u0[:, :-1]).pow(2).sum()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append([model.D.item(), F.mse_loss(model.u0, true_u0).item()])
"""

HEAT_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("scheme", ["explicit", "crank_nicolson"])
def test_heat_equation_inverse_problem_through_the_solver_as_torch(scheme):
    n, dx, dt, steps = 24, 1.0 / 24, 2e-4, 20
    x = np.arange(n) * dx
    u0 = np.exp(-((x - 0.4) ** 2) / 0.01)[None]
    records = []
    for lib in (torch, rg):
        record = []
        names = run_source(HEAT_SOURCE if lib is torch else port(HEAT_SOURCE, HEAT_STEPS), lib)
        true_u0 = lib.tensor(u0)
        target = names["solve"](true_u0, 0.5, dx, dt, steps, scheme)
        record.append(target.numpy())
        names["recover"](target, true_u0, dx, dt, steps, scheme, 15, record)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-11)
