"""A plan's search stays within its bound on a long trace: the greedy's ranking of each
round's candidates is paid from the plan's effort, and the anchored schedule's refinement
(:func:`segments._keep_what_fits`, whose model runs in Python) has an effort of its own,
a quarter of a plan's. Before, ranking was free and the refinement had a whole plan's
effort: a 1000-op chain differentiated with ``create_graph`` under a budget (a trace of 2000
values) took 5-6 s to plan; the same trace below stood for it."""

from __future__ import annotations

import pytest

from retrograd.autodiff.checkpoint.budget import plan, segments
from retrograd.autodiff.checkpoint.budget.plan import Effort, Trace, greedy_evictions

pytestmark = pytest.mark.backend_independent("plans a Trace of numbers; no tensor is made")


def _long_chain(n: int) -> Trace:
    """A chain of ``n`` equal values, each read by the backward step that mirrors it."""
    return Trace(
        sizes=[16] * n,
        costs=[1e-6] * n,
        parents=[()] + [(v - 1,) for v in range(1, n)],
        recomputable=[True] * n,
        reads=[[n - 1 - v] for v in range(n)],
        owners=list(range(n)),
        horizon=n,
    )


def _counted(monkeypatch, module, name: str) -> list:
    """A list that gets an entry at each call of ``module.name`` (still called through)."""
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_ranking_candidates_is_paid_from_the_plans_effort(monkeypatch):
    trace = _long_chain(400)
    trials = _counted(monkeypatch, plan, "_trial")
    effort = Effort(200_000)
    greedy_evictions(trace, 16 * 40, effort)
    assert effort.spent
    # what trials spent (the trace's length each) is less than what the effort lost: the
    # rest is the rankings, at least RANKING_VISITS a buffer per round
    assert len(trials) * 400 < 200_000 - effort.left
    assert 200_000 - effort.left - len(trials) * 400 >= plan.RANKING_VISITS * 400


def test_the_anchored_refinement_profiles_within_its_own_effort(monkeypatch):
    n = 2000
    trace = _long_chain(n)
    calls = _counted(monkeypatch, segments, "engine_profile")
    segments.anchored_plan(trace, 16 * 50)
    # the strides' schedules, then at most KEEP_EFFORT / n trials (and the one that spends it)
    assert len(calls) <= 2 * len(segments.STRIDES) + segments.KEEP_EFFORT // n + 1
