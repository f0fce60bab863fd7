"""A step abandoned before its backward, under a memory budget: a Ctrl-C while forward ran or
before ``backward()``, or a forward kept without one, whose graph is still alive when the
next step records (``Planner.starts_again``). The next step is a step of its own, follows
its plan, and may evict what the abandoned one holds; no plan is made of the two forwards
together. Until 6 December they were recorded as one step: the steps after left their plan
for two steps, and a plan of a graph no step runs again was kept."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

LAYERS, BATCH, WIDTH = 3, 4, 32
_RNG = np.random.default_rng(24)
_W = [(_RNG.standard_normal((WIDTH, WIDTH)) / WIDTH**0.5).astype(np.float32) for _ in range(6)]
_X = _RNG.standard_normal((BATCH, 8, WIDTH)).astype(np.float32)


def _forward(backend: rg.Backend, ws: list, layers: int = LAYERS):
    """The step's loss; with fewer ``layers``, what an interrupt there leaves (no loss)."""
    x = rg.tensor(_X, backend=backend)
    for k in range(layers):
        h = (x @ ws[2 * k]).tanh()
        x = x + (h @ ws[2 * k + 1]).sigmoid()
    return (x * x).sum() if layers == LAYERS else x


def _loop(backend: rg.Backend, abandon: dict[int, int]) -> list:
    """Ten steps; at step ``s`` in ``abandon``, a forward of ``abandon[s]`` layers is kept
    alive without a backward while the step runs (``LAYERS``: an interrupt before
    ``backward()``; fewer: one while forward ran). (peak, predicted, ops) per step run."""
    ws = [rg.tensor(w, backend=backend).require_grad() for w in _W]
    runs, kept = [], []
    for step in range(10):
        if step in abandon:  # alive through the step
            kept.append(_forward(backend, ws, abandon[step]))
        grads = _forward(backend, ws).backward()
        kept.clear()
        predicted = getattr(backend.checkpointing, "predicted_peak", None)
        runs.append((grads.peak_bytes, predicted, grads.recomputed_ops))
    return runs


@pytest.mark.parametrize("layers", [LAYERS, 2, 1], ids=["before-backward", "mid-forward", "early"])
@pytest.mark.parametrize("fraction", [0.65, 0.5, 0.25])
def test_the_step_after_an_abandoned_one_follows_its_plan(fraction, layers):
    full = _loop(rg.Autodiff(inner_backend()), {})[0][0]
    strategy = rg.BudgetCheckpointing(int(full * fraction))
    backend = rg.Autodiff(inner_backend(), checkpointing=strategy)
    runs = _loop(backend, {4: layers})
    planner = strategy.planner
    assert strategy.plans == 1 and len(planner.kept) == 1, (strategy.plans, len(planner.kept))
    assert planner.planned_steps == 9  # every step after the first, the one at 4 included
    # the same work and peak, as predicted, but beside the abandoned graph (which a replay's
    # forward evicts from with its own values, for the budget)
    steady = [run for step, run in enumerate(runs[1:], 1) if step != 4]
    assert len(set(steady)) == 1, runs
    peak, predicted, _ = steady[0]
    assert peak == predicted, runs
    # what the abandoned graph holds may be evicted for the budget: the step beside it held
    # 0.7x NoCheckpointing's peak at 0.5x and 0.65x (its plan's steps 0.6x), and 1.2x while
    # the plan kept those values pinned
    assert runs[4][0] <= peak + 0.25 * full, (runs[4], peak, full)


def test_a_repeated_first_op_inside_a_step_is_no_new_step():
    # two products of the untracked input by the same weight open the step: the second has the
    # first one's signature (no recorded parent), and the plan expects it there
    def step(backend, ws):
        x = rg.tensor(_X, backend=backend)
        a, b = x @ ws[0], x @ ws[0]
        return ((a.tanh() @ ws[1]) * b).sum()

    full = step(rg.Autodiff(inner_backend()), [rg.tensor(w).require_grad() for w in _W])
    peak = full.backward().peak_bytes
    strategy = rg.BudgetCheckpointing(peak // 2)
    backend = rg.Autodiff(inner_backend(), checkpointing=strategy)
    ws = [rg.tensor(w, backend=backend).require_grad() for w in _W]
    ops = [step(backend, ws).backward().recomputed_ops for _ in range(5)]
    assert strategy.plans == 1 and strategy.planned_steps == 4, (strategy.plans, ops)
    assert len(set(ops[1:])) == 1, ops
