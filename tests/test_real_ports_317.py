"""Real ports, continued (the harness: ``tests/real_ports.py``): Monte-Carlo simulation with
generator objects, programs written here in the style of quant and Bayesian-statistics
tutorials that use torch as an array library.

- option pricing under geometric Brownian motion: a ``torch.Generator().manual_seed(...)``
  passed as ``generator=`` to ``torch.randn``, antithetic draws ``torch.cat([z, -z])``,
  log-price paths by ``torch.cumsum`` over the steps, ``torch.clamp(..., min=0)`` payoffs of a
  European and an Asian call discounted by ``math.exp``, the standard error by
  ``.std() / math.sqrt(n)``, a common-random-numbers delta from a ``copy.deepcopy`` of the
  generator, the 1% value at risk by ``torch.quantile`` of a float level, the expected
  shortfall by a boolean mask and the terminal distribution by ``torch.histc``.
- random-walk Metropolis on a curved 2-d density: proposals by ``torch.randn`` with a
  generator, acceptance ``torch.rand(...).log() < log_ratio``, ``torch.where`` of the accepted
  rows, the chain by ``torch.stack``, the acceptance rate and ``torch.quantile(..., dim=0)``
  with a tensor of levels.

Regressions guarded: ``generator=`` and ``dtype=`` keywords of the draws, deep copies of a
generator repeating its stream, ``quantile`` with a float and with a tensor of levels and
``dim``, ``histc`` with float bounds, ``where`` with a broadcast ``[:, None]`` condition.
The draws: both runs draw one shared seeded stream (``torch.randn``/``torch.rand`` replaced,
the generators passed along and ignored), so the values compare; without it, each library's
own generators must repeat themselves (what the delta relies on), checked in each.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, run_source

GBM_SOURCE = """
def gbm_paths(spot, rate, vol, years, steps, count, gen):
    dt = years / steps
    half = torch.randn(count // 2, steps, generator=gen, dtype=torch.float64)
    shocks = torch.cat([half, -half])  # antithetic pairs halve the variance for free
    moves = (rate - vol**2 / 2) * dt + vol * math.sqrt(dt) * shocks
    return torch.exp(math.log(spot) + torch.cumsum(moves, dim=1))
"""

SCRIPT_SOURCE = """
def call_values(spot, strike, gen, rate=0.02, vol=0.3, years=0.5):
    paths = gbm_paths(spot, rate, vol, years, 26, 2000, gen)
    growth = math.exp(-rate * years)
    at_expiry = growth * torch.clamp(paths[:, -1] - strike, min=0)
    averaged = growth * torch.clamp(paths.mean(dim=1) - strike, min=0)
    return paths, at_expiry, averaged


gen = torch.Generator().manual_seed(99)
twin = copy.deepcopy(gen)  # same normals for the bumped spot: a low-noise delta
paths, at_expiry, averaged = call_values(50.0, 52.0, gen)
_, bumped, _ = call_values(50.5, 52.0, twin)
error = at_expiry.std().item() / math.sqrt(at_expiry.numel())
record.append([at_expiry.mean().item(), error, averaged.mean().item()])
record.append((bumped.mean() - at_expiry.mean()).item() / 0.5)
loss = 50.0 - paths[:, -1]
var = torch.quantile(loss, 0.99)
record.append([var.item(), loss[loss >= var].mean().item()])
record.append(torch.histc(paths[:, -1], bins=12, min=20.0, max=110.0).numpy())


def log_density(points):
    a, b = points[:, 0], points[:, 1]
    return -(a**2) / 8.0 - 0.5 * (b - 0.4 * a**2 + 1.0) ** 2


def sample_chain(walkers, moves, jump, gen):
    here = torch.zeros(walkers, 2, dtype=torch.float64)
    here_log = log_density(here)
    history, taken = [], 0
    for _ in range(moves):
        there = here + jump * torch.randn(walkers, 2, generator=gen, dtype=torch.float64)
        there_log = log_density(there)
        take = torch.rand(walkers, generator=gen, dtype=torch.float64).log() < there_log - here_log
        here = torch.where(take[:, None], there, here)
        here_log = torch.where(take, there_log, here_log)
        taken += int(take.sum())
        history.append(here)
    return torch.stack(history), taken / (walkers * moves)


chain, acceptance = sample_chain(12, 200, 0.9, torch.Generator().manual_seed(5))
kept = chain[50:].reshape(-1, 2)
record.append(acceptance)
levels = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
record.append(torch.quantile(kept, levels, dim=0).numpy())
record.append(kept.mean(dim=0).numpy())
"""


def test_monte_carlo_pricing_and_metropolis_on_shared_draws_as_torch():
    records = []
    for lib in (torch, rg):
        record = []
        with SharedDraws(lib, 3170):
            run_source(GBM_SOURCE + SCRIPT_SOURCE, lib, record=record, copy=copy)
        records.append(record)
    theirs, ours = records
    # (the shared stream ignores the generators: the bumped run draws new normals here)
    assert_records_agree(ours, theirs, rtol=1e-9, atol=1e-9)


def test_each_librarys_generators_repeat_for_common_random_numbers():
    for lib in (torch, rg):
        ns = run_source(GBM_SOURCE, lib)
        gen = lib.Generator().manual_seed(11)
        twin = copy.deepcopy(gen)
        first = ns["gbm_paths"](80.0, 0.01, 0.2, 1.0, 10, 48, gen)
        again = ns["gbm_paths"](80.0, 0.01, 0.2, 1.0, 10, 48, twin)
        np.testing.assert_array_equal(again.numpy(), first.numpy())
        later = ns["gbm_paths"](80.0, 0.01, 0.2, 1.0, 10, 48, gen)  # gen has moved on
        assert not np.array_equal(later.numpy(), first.numpy())
        # antithetic pairs: the sum of their log-paths is the drift alone, the same in every row
        pair_sums = (first[:24].log() + first[24:].log()).numpy()
        np.testing.assert_allclose(
            pair_sums, np.broadcast_to(pair_sums[:1], pair_sums.shape), rtol=1e-12
        )
