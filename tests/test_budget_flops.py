"""Issue 24: what share of a step's FLOPs a budget's plan recomputes, counted from its ops'
shapes (``budget/flops.py``), not timed: a bound on a budgeted step's time that no timing
noise moves, reported by ``BudgetCheckpointing.recompute_fraction``, ``retrograd graph
--checkpointing budget:SIZE`` and ``retrograd train``'s summary."""

from __future__ import annotations

import re

import pytest

import retrograd as rg
from retrograd.app.cli import main
from retrograd.autodiff.checkpoint.budget.flops import op_flops, recompute_fraction
from retrograd.autodiff.checkpoint.budget.plan import Trace
from test_budget_repeat import WIDTH, _mlp_step

pytestmark = [
    pytest.mark.own_checkpointing("every backend is built here, under a budget"),
    pytest.mark.backend_independent("every backend is built here, on NumPy"),
]


def test_op_flops_count_products_by_their_shapes_and_the_rest_by_elements():
    # by hand: 2 * m * n * k per product, over the broadcast batch
    assert op_flops(("matmul", 0, (3, 1, 5, 7), (4, 7, 2)), 0) == 2 * 12 * 5 * 7 * 2
    assert op_flops(("matmul", 0, (5, 7), (7, 2)), 0) == 2 * 5 * 7 * 2
    assert op_flops(("linear", 0, (2, 3, 8), (6, 8), (6,)), 0) == 2 * 6 * 8 * 6
    # attention: q @ k^T and the weights @ v, 2 * b * h * t * s * (d + dv)
    shapes = ((2, 4, 5, 8), (2, 4, 9, 8), (2, 4, 9, 6), (1, 1, 5, 9))
    assert op_flops(("attention", 0, *shapes), 0) == 2 * 8 * 5 * 9 * (8 + 6)
    assert op_flops(("softmax", 0, (4, 5, 9)), 0) == 4 * 5 * 9
    assert op_flops(("add", 0, (4, 1), (1, 6)), 0) == 6  # the largest operand's elements
    assert op_flops((), 40) == 10  # untimed, unknown: one per 4 bytes


def test_the_fraction_is_what_the_plan_reruns_over_three_forwards():
    # a chain a -> b -> c, FLOPs 10, 20, 30; only c read by backward: evicting b reruns it
    trace = Trace(
        [4, 4, 4],
        [1.0] * 3,
        [(), (0,), (1,)],
        [True] * 3,
        [[0], [1], [0]],
        [0, 1, 2],
        horizon=2,
        flops=[10.0, 20.0, 30.0],
    )
    assert recompute_fraction(trace, [False, False, False]) == 0.0
    assert recompute_fraction(trace, [False, True, False]) == pytest.approx(20 / (3 * 60))
    assert recompute_fraction(trace.with_costs([5.0] * 3), [False, True, False]) == (
        pytest.approx(20 / 180)  # prices never enter it
    )
    uncounted = Trace([4], [1.0], [()], [True], [[0]], [0], horizon=1)
    assert recompute_fraction(uncounted, [True]) is None


def test_the_residual_mlp_at_half_its_peak_recomputes_half_its_products():
    # At half the peak the plan recomputes 6 matmuls, 4 tanh and 2 adds a step
    # (test_budget_repeat.py). By hand, in units of B*W: a product 2W, any other op 1; the
    # forward has 12 products, 6 tanh, 6 adds, h * h and the mean; backward twice that.
    peak = _mlp_step(rg.Autodiff(rg.NumpyBackend()), 0)[0].peak_bytes
    budget = rg.BudgetCheckpointing(peak // 2)
    backend = rg.Autodiff(rg.NumpyBackend(), budget)
    assert budget.recompute_fraction is None  # no plan yet
    ops = [_mlp_step(backend, i)[0].recomputed_ops for i in range(3)]
    assert ops[1:] == [12, 12], ops
    forward = 12 * 2 * WIDTH + 6 + 6 + 1 + 1
    assert budget.recompute_fraction == pytest.approx((6 * 2 * WIDTH + 4 + 2) / (3 * forward))


def test_the_budget_graph_reports_the_share_of_flops_its_plan_recomputes(tmp_path, capsys):
    arguments = ["graph", "--model", "mlp", "--checkpointing", "budget:2KB"]
    assert main([*arguments, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    found = re.search(r"the plan recomputes (\d+\.\d)% of the step's FLOPs", printed)
    assert found is not None, printed
    assert 0.0 < float(found.group(1)) < 100.0
    assert main(["graph", "--model", "mlp", "--out", str(tmp_path / "plain")]) == 0
    assert "of the step's FLOPs" not in capsys.readouterr().out
