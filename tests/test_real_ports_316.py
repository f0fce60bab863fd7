"""Real ports, continued (the harness: ``tests/real_ports.py``): differential equations
stepped by hand, programs written here in the style of physics tutorials that use torch as
an array library.

- a split-step Fourier solver of the 1-d Schrodinger equation: a complex Gaussian packet
  ``torch.exp(-(x - start) ** 2 / (2 * width ** 2)) * torch.exp(1j * kick * x)``, wave
  numbers ``2 * math.pi * torch.fft.fftfreq(n, d=dx, dtype=...)``, half-step potential and
  kinetic phases ``torch.exp(-0.5j * V * dt)`` (complex times real tensors and Python complex
  scalars), ``torch.fft.fft``/``ifft`` each step, norms by ``torch.trapezoid(..., dx=dx)`` of
  ``psi.abs() ** 2``, ``<x>`` through ``(psi.conj() * x * psi).real``, a boolean-mask
  selection, ``torch.fft.fftshift``, ``torch.view_as_real`` and ``torch.angle``.
- the Gray-Scott reaction-diffusion system by explicit Euler: a five-point Laplacian by
  ``torch.roll`` along both axes, a seeded square by slice assignment, in-place ``+=`` and
  ``clamp_``, then ``torch.quantile`` with a tensor of levels, ``torch.histc``,
  ``torch.bucketize``, ``torch.bincount(..., minlength=...)``, ``torch.fft.rfft2`` and a
  radial profile by ``torch.bincount(..., weights=...)`` over ``fftfreq``/``rfftfreq``.

Regressions guarded: complex arithmetic with Python complex scalars and real tensors, the
complex FFTs and ``fftshift``, ``trapezoid`` with ``dx``, ``angle`` of complex, and the
statistics functions (``quantile``, ``histc``, ``bucketize``, weighted ``bincount``) once
failed or disagreed with torch; the programs run unchanged on both libraries.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import run_source

SCHRODINGER_SOURCE = """
# a packet running into a thin barrier, in units where hbar = m = 1
cells, box = 192, 32.0
dx = box / cells
x = torch.arange(cells, dtype=torch.float64) * dx - box / 2
start, width, kick = -4.0, 0.8, 4.0
packet = torch.exp(-(x - start) ** 2 / (2 * width**2)) * torch.exp(1j * kick * x)
packet = packet / torch.sqrt(torch.trapezoid(packet.abs() ** 2, dx=dx))
barrier = torch.where(x.abs() < 0.4, torch.tensor(10.0, dtype=torch.float64), torch.zeros_like(x))
waves = 2 * math.pi * torch.fft.fftfreq(cells, d=dx, dtype=torch.float64)
dt = 0.02
potential_half = torch.exp(-0.5j * barrier * dt)
free_flight = torch.exp(-0.5j * waves**2 * dt)
for tick in range(40):
    packet = potential_half * torch.fft.ifft(free_flight * torch.fft.fft(potential_half * packet))
    if tick % 10 == 9:
        density = packet.abs() ** 2
        centre = torch.trapezoid((packet.conj() * x * packet).real, dx=dx)
        record.append([torch.trapezoid(density, dx=dx).item(), centre.item()])
record.append(torch.view_as_real(packet).numpy())
record.append(torch.angle(packet)[packet.abs() > 1e-3].numpy())  # only where the wave is
record.append(torch.fft.fftshift(torch.fft.fft(packet).abs() ** 2).numpy())
record.append(torch.trapezoid((packet.abs() ** 2)[x > 0.4], dx=dx).item())
record.append(str(packet.dtype).split(".")[-1])
"""

GRAY_SCOTT_SOURCE = """
def spread(field):
    # five-point stencil on a torus
    neighbours = torch.roll(field, 1, 0) + torch.roll(field, -1, 0)
    neighbours = neighbours + torch.roll(field, 1, 1) + torch.roll(field, -1, 1)
    return neighbours - 4 * field


side, seed = 40, 5
feed, kill, diff_u, diff_v = 0.037, 0.06, 0.16, 0.08
u = torch.ones(side, side, dtype=dtype)
v = torch.zeros(side, side, dtype=dtype)
middle = slice(side // 2 - seed, side // 2 + seed)
u[middle, middle] = 0.5
v[middle, middle] = 0.25
u += 0.02 * noise[0]
v += 0.02 * noise[1]
for tick in range(150):
    reaction = u * v * v
    u += diff_u * spread(u) - reaction + feed * (1 - u)
    v += diff_v * spread(v) + reaction - (feed + kill) * v
    u.clamp_(0, 1)
    v.clamp_(0, 1)
    if tick % 50 == 49:
        record.append([u.mean().item(), v.std().item(), v.max().item()])
record.append(v.numpy().copy())
record.append(torch.quantile(v.flatten(), torch.tensor([0.2, 0.5, 0.8], dtype=dtype)).numpy())
record.append(torch.histc(v, bins=8, min=0, max=0.4).numpy())
bands = torch.bucketize(v, torch.tensor([0.05, 0.15, 0.25], dtype=dtype))
record.append(torch.bincount(bands.flatten(), minlength=4).numpy())
power = torch.fft.rfft2(v - v.mean()).abs() ** 2
radius = torch.sqrt(torch.fft.fftfreq(side)[:, None] ** 2 + torch.fft.rfftfreq(side)[None, :] ** 2)
rings = (radius * side).round().long().flatten()
record.append(torch.bincount(rings, weights=power.flatten().to(torch.float64)).numpy())
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
    noise = np.random.default_rng(3160).uniform(-1, 1, (2, 40, 40))
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
