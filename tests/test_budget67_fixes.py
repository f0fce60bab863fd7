"""Regressions of the defects round 67's random programs under the memory budget found
(``tests/test_random_budget_67.py``), each failing before its fix."""

from __future__ import annotations

import numpy as np

import retrograd as rg
from backends import inner_backend
from retrograd.autodiff.checkpoint.budget.planner import FITS
from test_budget_soak_25 import Backwards

STEPS = 5


def _arrays(*shapes) -> list[np.ndarray]:
    rng = np.random.default_rng(67)
    return [(rng.standard_normal(shape) / 3).astype(np.float32) for shape in shapes]


def test_a_steps_forward_peak_does_not_count_what_the_step_before_left_held():
    # Fixed in strategy.py (BudgetCheckpointing._step_starts): the forward peak was reset
    # when a backward ended, to what was held then, and the values a step still held there
    # (a branch no backward walks, alive to the step's end: 1,024 bytes) counted in the
    # next step's peak although they were freed before it began. The first planned step
    # held 1,152 bytes where its plan counted 256, and its graph was planned again for it.
    w, v, x = _arrays((8, 8), (8, 64), (4, 8))

    def step(backend):
        with rg.use_backend(backend):
            wt, vt, xt = rg.tensor(w).requires_grad_(), rg.tensor(v).requires_grad_(), rg.tensor(x)
            unused = (xt @ vt).tanh()  # noqa: F841 (held by the budget until the step ends)
            grads = (xt @ wt).tanh().sum().backward()
            return grads.peak_bytes, wt.grad(grads).numpy().copy()

    plain, expected = step(rg.Autodiff(inner_backend()))
    strategy = rg.BudgetCheckpointing(10**6)
    backwards = Backwards(strategy)
    backend = rg.Autodiff(inner_backend(), strategy)
    for _ in range(STEPS):
        assert np.array_equal(step(backend)[1], expected)
    planned = backwards.log[1:]
    assert [entry["mode"] for entry in planned] == [FITS] * (STEPS - 1)
    assert [entry["peak"] for entry in planned] == [plain] * (STEPS - 1), planned
    assert all(entry["counted"] == plain for entry in planned), planned
    assert strategy.plans == 1 and strategy.held_bytes == 0


def test_a_walk_of_an_earlier_graph_counts_the_untracked_values_its_rules_read():
    # Fixed in recorder.py (_earlier_constants): a second head's loss built after the first
    # head's backward(retain_graph=True) is a step of its own whose backward walks the trunk
    # again; the trunk's matmul reads the input batch, an untracked value of the trunk's
    # step, which the second step's plan did not count. It predicted 128 bytes where its
    # steps held 256 (re-planned every step for nothing), and under a budget of 200 bytes it
    # took its graph to fit, and held 256.
    w, x = _arrays((8, 8), (4, 8))

    def step(backend):
        with rg.use_backend(backend):
            wt = rg.tensor(w).requires_grad_()
            h = (rg.tensor(x) @ wt).tanh()
            first = h.sum().backward(retain_graph=True)
            second = (h * h).sum().backward()
            return [first.peak_bytes, second.peak_bytes], wt.grad(second).numpy().copy()

    peaks, expected = step(rg.Autodiff(inner_backend()))
    assert peaks == [256, 256]  # the tanh output and the batch, each 128 bytes
    for budget in (10**6, 200):
        strategy = rg.BudgetCheckpointing(budget)
        backwards = Backwards(strategy)
        backend = rg.Autodiff(inner_backend(), strategy)
        for _ in range(STEPS):
            assert np.array_equal(step(backend)[1], expected)
        for entry in backwards.log[2:]:  # each step's two backward calls, planned
            if entry["mode"] == FITS:
                assert entry["peak"] <= min(entry["counted"], budget), (budget, entry)
        assert strategy.held_bytes == 0
