"""The budget's client of the planner (:mod:`.plan`): when to plan, whether the step being
recorded follows the plan, and how its backward runs.

The first step of a training loop, and any step whose graph differs from the one before,
runs eagerly (evicting during forward, :mod:`.evictor`). When its backward starts, the
recorded step is kept; the next step plans from it when it starts (a single step never pays
for planning). A later step whose values match the plan's signatures, one by one, follows it:
the plan evicts some values as soon as they are made, and its backward runs as the plan
assumed. A step that stops matching runs eagerly from there and is planned afresh.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .plan import Trace, plan_evictions

__all__ = ["EvictionPlan", "Planner"]


class EvictionPlan(NamedTuple):
    """What the steps that follow a plan do."""

    #: the signature of every value, in recording order
    signatures: list
    #: per value: evicted as soon as it is made
    evict: list[bool]
    #: the bytes held the engine may count while following it
    limit: int


class Planner:
    """Plans the steps under ``max_bytes`` and follows them (see the module docstring).

    ``limit`` is the byte limit forward evicts above now: the budget, or a followed plan's
    count. ``plans`` and ``planned_steps`` count plans made and steps that followed one.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.plan: EvictionPlan | None = None
        #: the step being recorded has matched the plan so far
        self.following = False
        #: what the next step plans from: signatures and trace (see backward_begins)
        self._pending: tuple[list, Trace] | None = None
        self.limit = max_bytes
        #: backward runs as the plan assumed (see backward_ended); the step now checks that
        self._plan_backward = True
        self._checking = False
        #: the peak of the last backward run as after an eager step (``None``: none yet)
        self._eager_peak: int | None = None
        self.plans = 0
        self.planned_steps = 0

    def on_value(self, noted: tuple[int, tuple] | None, recompute: bool) -> bool:
        """A value was recorded (``noted``: its position and signature, ``None`` past the
        trace's end): whether the plan evicts it at once."""
        if noted is None:
            self.following = False
            return False
        position, signature = noted
        if position == 0 and self._pending is not None:  # a step starts: plan it
            self.plan = self._make_plan(*self._pending)
            self._pending = None
            self.following = True
            self.limit = self.plan.limit
        if not self.following:
            return False
        plan = self.plan
        if position < len(plan.signatures) and plan.signatures[position] == signature:
            return plan.evict[position] and recompute
        self.following = False  # another graph: eager from here on, and planned afresh
        self.limit = self.max_bytes
        return False

    def backward_begins(self, recorded: Any, steps: list) -> int | None:
        """The step just recorded (a :class:`~.recorder.RecordedStep`) ends: plan the next
        ones from it, unless it followed the current plan. The byte limit its backward keeps
        to when it runs as the plan assumed, else ``None`` (backward as after an eager step)."""
        plan = self.plan
        followed = (
            self.following and plan is not None and len(recorded.values) == len(plan.signatures)
        )
        if not followed and recorded.plannable():
            self._pending = recorded.observe(steps)
            plan = self.plan = None
        self.following = plan is not None
        self.limit = plan.limit if plan is not None else self.max_bytes
        self._checking = False
        if not followed:
            return None
        self.planned_steps += 1
        if not self._plan_backward:
            return None  # backward as after an eager step (see backward_ended)
        self._checking = True
        return self.limit

    def backward_ended(self, peak_bytes: int) -> None:
        """A backward ended, having held ``peak_bytes`` at most.

        A plan that does not fit leaves backward to drop values for the budget, which it can
        only do for values whose parents it still holds; when that fails (the budget passed
        by more than a tenth) and an eager step's backward held less, later steps keep the
        plan's forward but run backward as after an eager step, reserving parents so that
        everything stays droppable. (Where the budget is out of reach, the eager backward can
        hold more than the plan's: then the plan's stays, the lower of the two.)"""
        if not self._checking:
            self._eager_peak = peak_bytes
        elif peak_bytes > 1.1 * self.limit and (
            self._eager_peak is None or peak_bytes > self._eager_peak
        ):
            self._plan_backward = False
        self._checking = False

    def _make_plan(self, signatures: list, trace: Trace) -> EvictionPlan:
        """The plan: the signatures to match, which values to evict, the byte limit.

        A plan that fits lets the engine count what it plans (the engine counts a view apart
        from what it views). One that does not leaves backward to keep the budget by dropping
        values, the engine's count of activations then being all it sees: it leaves room for
        the temporaries of the op running at the worst moment (a backward rule's intermediate
        results, about one largest value)."""
        budget = self.max_bytes
        evict, planned_profile, counted = plan_evictions(trace, budget)
        self.plans += 1
        if planned_profile.peak <= budget:
            limit = max(budget, counted)
        else:
            largest = max(trace.sizes, default=0)
            limit = budget - largest if 4 * largest <= budget else budget
        # backward as planned first; backward_ended compares it with an eager step's
        self._plan_backward = True
        return EvictionPlan(signatures, evict, limit)
