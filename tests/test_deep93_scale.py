"""Reliability round 93: graphs of real size (deep chains, wide fan-in, many parameters).

What the engine does per node or per input must not grow with the graph. These tests count
the Python bytecode steps the code under test runs (``sys.settrace`` opcode events, exact and
free of the machine's load) and assert growth factors with generous margins: a linear cost
grows about 8x when the size grows 8x, a quadratic one 64x.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.own_checkpointing("builds BudgetCheckpointing backends of its own")


#: the budget strategy's code: the steps counted are those run in files under it
BUDGET_CODE = str(Path(rg.__file__).parent / "autodiff" / "checkpoint" / "budget")


def _steps_in(folder: str, run) -> int:
    """The bytecode steps ``run()`` executes in files under ``folder``."""
    steps = 0

    def count(frame, event, arg):
        nonlocal steps
        if event == "opcode":
            steps += 1
        return count

    def enter(frame, event, arg):
        if frame.f_code.co_filename.startswith(folder):
            frame.f_trace_opcodes = True
            return count
        return None

    before = sys.gettrace()
    sys.settrace(enter)
    try:
        run()
    finally:
        sys.settrace(before)
    return steps


def _stack_steps(n: int) -> int:
    """The budget code's steps to record one ``rg.stack`` of ``n`` leaves."""
    backend = rg.Autodiff(inner_backend(), checkpointing=rg.BudgetCheckpointing(1 << 30))
    with rg.use_backend(backend):
        leaves = [rg.tensor([float(i), 1.0], requires_grad=True) for i in range(n)]
        rg.stack(leaves)  # the first record of an op prices it; not what is measured
        return _steps_in(BUDGET_CODE, lambda: rg.stack(leaves))


def test_budget_records_a_stack_of_many_tensors_in_linear_steps():
    """``BudgetCheckpointing.save`` found each input's backup by scanning the backups made so
    far: ``stack``/``cat`` of n tensors cost n²/2 comparisons (10,000 tensors took 13 s to
    record, 0.4 s on a NoCheckpointing backend). 8x the inputs now costs about 8x the steps,
    not 64x."""
    small, large = _stack_steps(100), _stack_steps(800)
    assert large < 16 * small, (small, large)


def test_budget_stack_of_many_tensors_backpropagates_as_torch():
    n = 1000
    values = np.linspace(-1.0, 1.0, 2 * n).reshape(n, 2).astype(np.float32)
    backend = rg.Autodiff(inner_backend(), checkpointing=rg.BudgetCheckpointing(256))
    with rg.use_backend(backend):
        leaves = [rg.tensor(row, requires_grad=True) for row in values]
        loss = (rg.stack(leaves).sin() * rg.cat(leaves[::-1]).reshape(n, 2)).sum()
        grads = loss.backward()
        ours = np.stack([leaf.grad(grads).numpy() for leaf in leaves])
    theirs_leaves = [torch.tensor(row, requires_grad=True) for row in values]
    theirs = (torch.stack(theirs_leaves).sin() * torch.cat(theirs_leaves[::-1]).reshape(n, 2)).sum()
    theirs.backward()
    expected = np.stack([leaf.grad.numpy() for leaf in theirs_leaves])
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)
