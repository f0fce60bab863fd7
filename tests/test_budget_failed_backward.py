"""A backward that stops before its end (a hook, rule or Function raised) under a memory
budget: its step is no step to plan from. The planner made the next step's plan from the
failed step's trace, priced with the peak of an earlier step (or none), and the steps after
it did different work (15, 16, 15 recomputed ops) where a loop without the failure repeats
one plan. Now the next step runs eagerly, as a first step does, the one after follows the plan
made from it, and every later step does the same work with NoCheckpointing's gradients."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn


class _RefusedError(Exception):
    pass


def _model(backend):
    rg.seed(0)
    layers = []
    for _ in range(6):
        layers += [nn.Linear(8, 8, backend=backend), nn.Tanh()]
    return nn.Sequential(*layers)


INPUT = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


@pytest.mark.parametrize("failing_step", [0, 1, 3])
def test_a_failed_backward_is_no_step_to_plan_from(failing_step):
    strategy = rg.BudgetCheckpointing(600)
    inner = type(rg.default_backend().inner)  # NumPy, or torch under RETROGRAD_INNER=torch
    backend = rg.Autodiff(inner(), checkpointing=strategy)
    model = _model(backend)
    plain = rg.Autodiff(inner())
    reference = _model(plain)
    x = rg.tensor(INPUT, backend=backend)
    fail = {"now": False}

    def hook(module, grad_input, grad_output):
        if fail["now"]:
            fail["now"] = False
            raise _RefusedError

    model[4].register_full_backward_hook(hook)
    planned, ops = [], []
    for step in range(7):
        fail["now"] = step == failing_step
        try:
            grads = model(x).sum().backward()
        except _RefusedError:
            planned.append(None)
            continue
        planned.append(strategy.planned_steps)
        ops.append(grads.recomputed_ops)
        expected = reference(rg.tensor(INPUT, backend=plain)).sum().backward()
        for ours, theirs in zip(model.parameters(), reference.parameters()):
            assert np.array_equal(np.asarray(ours.grad(grads)), np.asarray(theirs.grad(expected)))
    after = planned[failing_step + 1 :]
    # the step after the failure plans nothing new: it follows the plan made before the
    # failure (a step failed later) or runs eagerly (the first step failed), never one made
    # from the failed step's trace
    if failing_step == 0:
        assert after[0] == 0 and after[1] == 1, planned
    assert all(b - a == 1 for a, b in itertools.pairwise(after[1:])), planned
    assert len(set(ops[-4:])) == 1, ops  # the same work in every step after the plan
