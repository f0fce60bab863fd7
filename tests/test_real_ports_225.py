"""Real ports, continued (the harness: ``tests/real_ports.py``): differentiable physics,
programs written here in the style of the "molecular dynamics with autograd" notebooks and of
differentiable PDE solvers.

- a 2-d Morse fluid in a periodic cell: displacements of all pairs by broadcasting, the
  minimum image ``d - L * torch.round(d / L)``, the pairs of ``torch.triu_indices``, a
  ``torch.where`` cutoff, forces ``-torch.autograd.grad(energy, x, create_graph=...)``,
  velocity Verlet wrapping positions by ``torch.floor``; then the potential's depth and width
  (kept as logs) fitted to a reference trajectory by differentiating through the integrator
  (``create_graph=True``: second derivatives of the energy), with
  ``torch.nn.utils.clip_grad_norm_(..., max_norm=...)`` and Adam.
- the periodic heat equation: forward Euler with the Laplacian by ``F.conv1d`` of a
  ``[1, -2, 1]`` kernel over ``F.pad(..., mode="circular")``, and Crank-Nicolson by
  ``torch.linalg.solve`` with matrices from ``torch.diag`` (main and off diagonals) and
  periodic corners set by negative indices; the diffusivity (an ``nn.Parameter`` behind a
  ``softplus`` property) and the initial profile recovered from the final one by Adam through
  either solver, the conserved total heat asserted on every round.

The lines changed: the imports and the gradient lines.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

MORSE_SOURCE = """
import torch


def morse_energy(x, cell, log_depth, log_width, r_cut=2.0, r_eq=1.1):
    depth, width = log_depth.exp(), log_width.exp()
    count = x.shape[0]
    delta = x.unsqueeze(1) - x.unsqueeze(0)
    delta = delta - cell * torch.round(delta / cell)  # nearest periodic image
    a, b = torch.triu_indices(count, count, 1)
    dist = delta[a, b].pow(2).sum(-1).sqrt()
    well = depth * ((1 - torch.exp(-width * (dist - r_eq))) ** 2 - 1)
    at_cut = depth * ((1 - torch.exp(-width * (r_cut - r_eq))) ** 2 - 1)
    # shifted so the energy is continuous where pairs cross the cutoff
    well = torch.where(dist < r_cut, well - at_cut, torch.zeros_like(well))
    return well.sum()


def energy_and_force(x, cell, params, keep_graph):
    if not x.requires_grad:
        x = x.detach().requires_grad_()
    u = morse_energy(x, cell, *params)
    (slope,) = torch.autograd.grad(u, x, create_graph=keep_graph)
    return u, -slope


def run_md(x, v, cell, params, n_steps, dt=0.004, keep_graph=False):
    u, f = energy_and_force(x, cell, params, keep_graph)
    frames, totals = [x], []
    for _ in range(n_steps):
        v_half = v + 0.5 * dt * f
        x = x + dt * v_half
        x = x - cell * torch.floor(x / cell)
        u, f = energy_and_force(x, cell, params, keep_graph)
        v = v_half + 0.5 * dt * f
        totals.append((u + 0.5 * v.pow(2).sum()).detach())
        frames.append(x)
    return torch.stack(frames), torch.stack(totals), v


def fit(x0, v0, cell, reference, n_steps, rounds, record):
    params = [torch.tensor(s, dtype=torch.float64, requires_grad=True) for s in (0.25, -0.1)]
    opt = torch.optim.Adam(params, lr=0.03)
    for r in range(rounds):
        opt.zero_grad()
        frames, _, _ = run_md(x0, v0, cell, params, n_steps, keep_graph=True)
        gap = frames - reference
        gap = gap - cell * torch.round(gap / cell)
        loss = gap.pow(2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, max_norm=0.5)
        opt.step()
        record.append(loss.item())
        print(f"round {r}: loss={loss.item():.4e} depth={params[0].exp().item():.4f}")
    record.append([p.item() for p in params])
"""

MORSE_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("clip_grad_norm_(params, max_norm", "clip_grad_norm_(grads, params, max_norm"),
    ("        opt.step()\n", "        opt.step(grads)\n"),
]


def _grid_start(side=3, spacing=1.2, seed=2250):
    rng = np.random.default_rng(seed)
    cells = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), -1)
    x = (cells.reshape(-1, 2) + 0.5) * spacing + 0.03 * rng.standard_normal((side * side, 2))
    v = 0.4 * rng.standard_normal((side * side, 2))
    return x, v - v.mean(0), side * spacing


def test_morse_md_and_potential_fit_through_the_integrator_as_torch(capsys):
    x, v, cell = _grid_start()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        names = run_source(MORSE_SOURCE if lib is torch else port(MORSE_SOURCE, MORSE_STEPS), lib)
        x0, v0 = lib.tensor(x), lib.tensor(v)
        truth = [lib.tensor(0.0, dtype=lib.float64), lib.tensor(0.2, dtype=lib.float64)]
        frames, totals, v_end = names["run_md"](x0, v0, cell, truth, 25)
        record.extend([frames.detach().numpy(), totals.numpy(), v_end.detach().numpy()])
        names["fit"](x0, v0, cell, frames[:7].detach(), 6, 5, record)
        records.append(record)
        logs.append(capsys.readouterr().out)
    drift = np.ptp(records[0][1]) / abs(records[0][1].mean())
    assert drift < 1e-2  # velocity Verlet keeps the total energy
    assert records[0][-2] < records[0][3]  # the fit gets closer
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)


HEAT_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F


def forward_euler(u, kappa, h, tau):
    kernel = torch.tensor([1.0, -2.0, 1.0], dtype=u.dtype).view(1, 1, 3)
    wrapped = F.pad(u.unsqueeze(1), (1, 1), mode="circular")
    return u + tau * kappa * F.conv1d(wrapped, kernel).squeeze(1) / h**2


def cn_operators(n, kappa, h, tau):
    ratio = kappa * tau / h**2
    side = torch.ones(n - 1, dtype=torch.float64)
    lap = torch.diag(torch.full((n,), -2.0, dtype=torch.float64))
    lap = lap + torch.diag(side, 1) + torch.diag(side, -1)
    lap[0, -1] = lap[-1, 0] = 1.0  # the ring closes
    ident = torch.eye(n, dtype=torch.float64)
    return ident - ratio / 2 * lap, ident + ratio / 2 * lap


def integrate(u, kappa, h, tau, n_steps, method):
    if method == "crank_nicolson":
        implicit, explicit = cn_operators(u.shape[-1], kappa, h, tau)
        for _ in range(n_steps):
            u = torch.linalg.solve(implicit, explicit @ u.unsqueeze(-1)).squeeze(-1)
        return u
    for _ in range(n_steps):
        u = forward_euler(u, kappa, h, tau)
    return u


class Unknowns(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.kappa_raw = nn.Parameter(torch.tensor(-0.5, dtype=torch.float64))
        self.start = nn.Parameter(torch.zeros(1, n, dtype=torch.float64))

    @property
    def kappa(self):
        return F.softplus(self.kappa_raw)


def invert(observed, truth, h, tau, n_steps, method, rounds, record):
    unknowns = Unknowns(observed.shape[-1])
    opt = torch.optim.Adam(unknowns.parameters(), lr=0.05)
    for _ in range(rounds):
        opt.zero_grad()
        final = integrate(unknowns.start, unknowns.kappa, h, tau, n_steps, method)
        # a periodic grid keeps the total heat under both schemes
        assert abs(final.sum().item() - unknowns.start.sum().item()) < 1e-8
        rough = unknowns.start.diff(dim=-1).pow(2).sum()
        loss = F.mse_loss(final, observed) + 1e-3 * rough
        loss.backward()
        opt.step()
        record.append(loss.item())
    record.append([unknowns.kappa.item(), F.mse_loss(unknowns.start, truth).item()])
"""

HEAT_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("from torch.nn import", "from retrograd.nn import"),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        opt.step()\n", "        opt.step(grads)\n"),
]


@pytest.mark.parametrize("method", ["forward_euler", "crank_nicolson"])
def test_heat_equation_inverse_problem_through_the_solver_as_torch(method):
    n, h, tau, n_steps = 16, 1.0 / 16, 4e-4, 12
    grid = np.arange(n) * h
    start = np.exp(-((grid - 0.3) ** 2) / 0.02)[None]
    records = []
    for lib in (torch, rg):
        record = []
        names = run_source(HEAT_SOURCE if lib is torch else port(HEAT_SOURCE, HEAT_STEPS), lib)
        truth = lib.tensor(start)
        observed = names["integrate"](truth, 0.4, h, tau, n_steps, method)
        record.append(observed.numpy())
        names["invert"](observed, truth, h, tau, n_steps, method, 10, record)
        records.append(record)
    assert records[0][-2] < records[0][1]
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-11)
