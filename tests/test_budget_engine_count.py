"""A plan's count is the engine's (``planner.engine_count``): a recomputation rerun in
recording order, each by-product let go after its last reader, each op's parents counted
while it runs. The greedy searches with a coarser bound, which holds everything a backward
step recomputes at once; a plan that fits by the engine's count but not by that bound is
followed as fitting, not taken for one under the floor."""

from __future__ import annotations

import pytest

from retrograd.autodiff.checkpoint.budget.plan import Trace, plan_evictions, profile
from retrograd.autodiff.checkpoint.budget.planner import FITS, Planner, engine_count

pytestmark = pytest.mark.backend_independent("the planner's counts of traces made here: no tensor")

MB = 2**20


def _trace() -> Trace:
    """a (the input, 1 MiB, not recomputable) -> b (2) -> c (4) -> d (4), and x (8) from a.
    Backward reads x at its step 0 and d at step 1; b and c no rule reads."""
    return Trace(
        sizes=[1 * MB, 2 * MB, 4 * MB, 4 * MB, 8 * MB],
        costs=[1.0] * 5,
        parents=[(), (0,), (1,), (2,), (0,)],
        recomputable=[False, True, True, True, True],
        reads=[[0, 1], [], [], [1], [0]],
        owners=[0, 1, 2, 3, 4],
        horizon=2,
    )


def test_the_engine_counts_a_chain_op_by_op_where_the_greedys_bound_holds_it_whole():
    trace = _trace()
    evicted = [False, True, True, True, False]  # d recomputed at step 1, through b and c
    # the bound: a, b, c and d at step 1; the engine: a, then c with d (b gone once c is made)
    assert profile(trace, evicted, views=False).peak == 11 * MB
    assert engine_count(trace, evicted) == (1 + 4 + 4) * MB
    # step 0 holds a and x either way
    assert engine_count(trace, [False, True, True, True, True]) == 9 * MB


def test_a_plan_that_fits_by_the_engines_count_is_followed_as_fitting():
    trace = _trace()
    budget = 10 * MB
    _, _, bound = plan_evictions(trace, budget)
    assert bound > budget  # the greedy's own bound has it under the floor
    plan = Planner(budget)._make_plan([("op", size, ()) for size in trace.sizes], trace)
    assert plan.mode == FITS, plan.mode
    assert plan.counted == engine_count(trace, plan.evict) <= budget, plan.counted
