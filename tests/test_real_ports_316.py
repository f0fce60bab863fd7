# ruff: noqa: E501  (the programs are kept as written: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
differential equations stepped by hand, torch used as an array library.

- the split-step Fourier solution of the 1-d Schrodinger equation as the physics tutorials
  write it in torch: a complex Gaussian wave packet ``torch.exp(-(x - x0) ** 2 / (2 *
  sigma ** 2)) * torch.exp(1j * k0 * x)``, wave numbers from ``2 * math.pi *
  torch.fft.fftfreq(n, d=dx)``, the half-step potential phase ``torch.exp(-0.5j * V * dt)``
  and kinetic phase ``torch.exp(-0.5j * k ** 2 * dt)`` (complex times real tensors and Python
  complex scalars), ``torch.fft.fft``/``ifft`` each step, the norm by ``torch.trapezoid`` of
  ``psi.abs() ** 2``, ``<x>`` through ``psi.conj() * x * psi`` and ``.real``, the momentum
  density by ``torch.fft.fftshift``, ``torch.view_as_real`` and ``torch.angle`` of the final
  state.
- the Gray-Scott reaction-diffusion system stepped by explicit Euler with a five-point
  Laplacian by ``torch.roll`` along both axes, the seeded square written by slice assignment,
  ``torch.clamp_`` in place, and the pattern's statistics by ``torch.quantile``,
  ``torch.histc`` and ``torch.bucketize`` of the final field, then the field's spectrum by
  ``torch.fft.rfft2`` and its radial profile by ``torch.bincount(..., weights=...)``.

Nothing changes but the library.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import run_source

SCHRODINGER_SOURCE = """
n, L = 256, 40.0
dx = L / n
x = torch.arange(n, dtype=torch.float64) * dx - L / 2
x0, sigma, k0 = -5.0, 1.0, 3.0
psi = torch.exp(-(x - x0) ** 2 / (2 * sigma ** 2)) * torch.exp(1j * k0 * x)
psi = psi / torch.sqrt(torch.trapezoid(psi.abs() ** 2, dx=dx))
V = torch.where(x.abs() < 0.5, torch.tensor(8.0, dtype=torch.float64), torch.zeros_like(x))
k = 2 * math.pi * torch.fft.fftfreq(n, d=dx, dtype=torch.float64)
dt, steps = 0.01, 60
half_potential = torch.exp(-0.5j * V * dt)
kinetic = torch.exp(-0.5j * k ** 2 * dt)
for step in range(steps):
    psi = half_potential * psi
    psi = torch.fft.ifft(kinetic * torch.fft.fft(psi))
    psi = half_potential * psi
    if step % 20 == 0:
        norm = torch.trapezoid(psi.abs() ** 2, dx=dx)
        mean_x = torch.trapezoid((psi.conj() * x * psi).real, dx=dx)
        record.append([norm.item(), mean_x.item()])
density_k = torch.fft.fftshift(torch.fft.fft(psi).abs() ** 2)
transmitted = torch.trapezoid((psi.abs() ** 2)[x > 0.5], dx=dx)
record.append(torch.view_as_real(psi).numpy())
record.append(torch.angle(psi)[psi.abs() > 1e-3].numpy())  # the phase where there is a wave
record.append(density_k.numpy())
record.append(transmitted.item())
record.append(str(psi.dtype).split(".")[-1])
"""

GRAY_SCOTT_SOURCE = """
def laplacian(Z):
    return (torch.roll(Z, 1, 0) + torch.roll(Z, -1, 0) + torch.roll(Z, 1, 1) + torch.roll(Z, -1, 1) - 4 * Z)

n = 48
U = torch.ones(n, n, dtype=dtype)
V = torch.zeros(n, n, dtype=dtype)
r = 6
U[n // 2 - r:n // 2 + r, n // 2 - r:n // 2 + r] = 0.50
V[n // 2 - r:n // 2 + r, n // 2 - r:n // 2 + r] = 0.25
U += 0.02 * noise[0]
V += 0.02 * noise[1]
Du, Dv, F, k, dt = 0.16, 0.08, 0.035, 0.065, 1.0
for step in range(200):
    UVV = U * V * V
    U += dt * (Du * laplacian(U) - UVV + F * (1 - U))
    V += dt * (Dv * laplacian(V) + UVV - (F + k) * V)
    U.clamp_(0, 1)
    V.clamp_(0, 1)
    if step % 50 == 49:
        record.append([U.mean().item(), V.std().item(), V.max().item()])
record.append(V.numpy().copy())
record.append(torch.quantile(V.flatten(), torch.tensor([0.1, 0.5, 0.9], dtype=dtype)).numpy())
record.append(torch.histc(V, bins=10, min=0, max=0.5).numpy())
levels = torch.bucketize(V, torch.tensor([0.05, 0.1, 0.2, 0.3], dtype=dtype))
record.append(torch.bincount(levels.flatten(), minlength=5).numpy())
spectrum = torch.fft.rfft2(V - V.mean()).abs() ** 2
ky = torch.fft.fftfreq(n).abs()
kx = torch.fft.rfftfreq(n)
radius = torch.sqrt(ky[:, None] ** 2 + kx[None, :] ** 2)
shell = (radius * n).round().long().flatten()
profile = torch.bincount(shell, weights=spectrum.flatten().to(torch.float64))
record.append(profile.numpy())
"""


def _compare(ours, theirs, tolerance):
    assert len(ours) == len(theirs)
    for i, (mine, reference) in enumerate(zip(ours, theirs, strict=True)):
        if isinstance(reference, str):
            assert mine == reference, i
        else:
            np.testing.assert_allclose(
                np.asarray(mine), np.asarray(reference), tolerance, tolerance, err_msg=str(i)
            )


def test_split_step_fourier_schrodinger_as_torch():
    records = []
    for lib in (torch, rg):
        record = []
        run_source(SCHRODINGER_SOURCE, lib, record=record)
        records.append(record)
    _compare(records[1], records[0], 1e-9)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gray_scott_reaction_diffusion_as_torch(dtype):
    noise = np.random.default_rng(3160).uniform(-1, 1, (2, 48, 48))
    records = []
    for lib in (torch, rg):
        record = []
        as_lib = getattr(lib, dtype)
        run_source(
            GRAY_SCOTT_SOURCE,
            lib,
            record=record,
            dtype=as_lib,
            noise=lib.tensor(noise, dtype=as_lib),
        )
        records.append(record)
    _compare(records[1], records[0], {"float32": 2e-4, "float64": 1e-9}[dtype])
