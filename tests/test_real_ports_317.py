# ruff: noqa: E501  (the programs are kept as written: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
Monte-Carlo simulation with generator objects, torch used as an array library.

- Monte-Carlo pricing of a European and an Asian call under geometric Brownian motion as the
  quant tutorials write it in torch: a ``torch.Generator().manual_seed(...)`` passed as
  ``generator=`` to ``torch.randn``, antithetic paths by ``torch.cat([z, -z])``, log-price
  paths by ``torch.cumsum`` over the steps, ``torch.clamp(S_T - K, min=0)`` payoffs discounted
  by ``math.exp``, the standard error by ``.std() / math.sqrt(n)``, a common-random-numbers
  delta from a ``copy.deepcopy`` of the generator (the bumped run draws the same normals),
  the 1% value at risk by ``torch.quantile`` and the expected shortfall by a boolean mask,
  the terminal distribution by ``torch.histc``.
- random-walk Metropolis sampling of a banana-shaped density: proposals from ``torch.randn``,
  acceptance by ``torch.rand(...).log() < log_ratio`` with a generator, ``torch.where`` of the
  accepted rows, the chain kept by ``torch.stack``, its acceptance rate and its
  quantiles by ``torch.quantile(..., dim=0)``.

The draws: both runs draw one shared seeded stream (``torch.randn``/``torch.rand`` replaced,
the generators passed along and ignored), so the values compare; without the shared stream,
each library's own generators must repeat themselves (the common-random-numbers property the
delta relies on), which is checked in each.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, run_source

PRICING_SOURCE = """
def simulate_paths(S0, r, sigma, T, n_steps, n_paths, generator):
    dt = T / n_steps
    z = torch.randn(n_paths // 2, n_steps, generator=generator, dtype=torch.float64)
    z = torch.cat([z, -z])
    increments = (r - 0.5 * sigma ** 2) * dt + sigma * math.sqrt(dt) * z
    log_paths = math.log(S0) + torch.cumsum(increments, dim=1)
    return torch.exp(log_paths)


def price(S0, K, r, sigma, T, n_steps, n_paths, generator):
    paths = simulate_paths(S0, r, sigma, T, n_steps, n_paths, generator)
    discount = math.exp(-r * T)
    european = discount * torch.clamp(paths[:, -1] - K, min=0)
    asian = discount * torch.clamp(paths.mean(dim=1) - K, min=0)
    return paths, european, asian


g = torch.Generator().manual_seed(2024)
S0, K, r, sigma, T = 100.0, 105.0, 0.03, 0.25, 1.0
bump = 1.0
g_bumped = copy.deepcopy(g)
paths, european, asian = price(S0, K, r, sigma, T, 52, 4000, g)
_, european_up, _ = price(S0 + bump, K, r, sigma, T, 52, 4000, g_bumped)
record.append([european.mean().item(), european.std().item() / math.sqrt(len(european)), asian.mean().item()])
record.append((european_up.mean() - european.mean()).item() / bump)
pnl = paths[:, -1] - S0
var_99 = -torch.quantile(pnl, 0.01)
shortfall = -pnl[pnl <= -var_99].mean()
record.append([var_99.item(), shortfall.item()])
record.append(torch.histc(paths[:, -1], bins=20, min=40.0, max=240.0).numpy())


def log_banana(x):
    return -0.5 * (x[:, 0] ** 2 / 4.0 + (x[:, 1] - 0.5 * x[:, 0] ** 2 + 2.0) ** 2)


def metropolis(n_chains, n_steps, step_size, generator):
    x = torch.zeros(n_chains, 2, dtype=torch.float64)
    log_p = log_banana(x)
    chain, accepted = [], 0
    for _ in range(n_steps):
        proposal = x + step_size * torch.randn(n_chains, 2, generator=generator, dtype=torch.float64)
        log_p_new = log_banana(proposal)
        accept = torch.rand(n_chains, generator=generator, dtype=torch.float64).log() < log_p_new - log_p
        x = torch.where(accept[:, None], proposal, x)
        log_p = torch.where(accept, log_p_new, log_p)
        accepted += accept.sum().item()
        chain.append(x)
    return torch.stack(chain), accepted / (n_chains * n_steps)


samples, rate = metropolis(16, 300, 0.8, torch.Generator().manual_seed(7))
burned = samples[100:].reshape(-1, 2)
record.append(rate)
record.append(torch.quantile(burned, torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64), dim=0).numpy())
record.append(burned.mean(dim=0).numpy())
"""


def test_monte_carlo_pricing_and_metropolis_on_shared_draws_as_torch():
    records = []
    for lib in (torch, rg):
        record = []
        with SharedDraws(lib, 3170):
            run_source(PRICING_SOURCE, lib, record=record, copy=copy)
        records.append(record)
    theirs, ours = records
    # (the shared stream ignores the generators: the bumped run draws new normals here)
    assert_records_agree(ours, theirs, rtol=1e-9, atol=1e-9)


def test_each_librarys_generators_repeat_for_common_random_numbers():
    for lib in (torch, rg):
        ns = run_source(
            PRICING_SOURCE.split("\ng = torch.Generator()")[0], lib, record=[], copy=copy
        )
        g = lib.Generator().manual_seed(11)
        twin = copy.deepcopy(g)
        first = ns["simulate_paths"](100.0, 0.03, 0.25, 1.0, 12, 64, g)
        again = ns["simulate_paths"](100.0, 0.03, 0.25, 1.0, 12, 64, twin)
        np.testing.assert_array_equal(again.numpy(), first.numpy())
        later = ns["simulate_paths"](100.0, 0.03, 0.25, 1.0, 12, 64, g)  # g has moved on
        assert not np.array_equal(later.numpy(), first.numpy())
        # antithetic pairs: the sum of their log-paths is the drift alone, the same in every row
        pair_sums = (first[:32].log() + first[32:].log()).numpy()
        np.testing.assert_allclose(
            pair_sums, np.broadcast_to(pair_sums[:1], pair_sums.shape), rtol=1e-12
        )
