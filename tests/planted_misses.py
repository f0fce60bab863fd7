"""A budget planner whose followed plans all miss the budget (a planted miss), for the tests of
what re-planning keeps and frees (``test_reliability_31``, ``test_reliability_regressions_17``)."""

from __future__ import annotations

from retrograd.autodiff.checkpoint.budget.planner import Planner


class PlantedMisses(Planner):
    """A planner told that each followed backward held 64 bytes more than the budget, at
    least, whose re-plans are made for the budget itself: every plan that fits misses, and
    no re-plan cures it. (Since 7 December a step that held more than its plan predicted but
    kept the budget is not re-planned, and a re-plan for a lower target may leave the plans
    that fit: so the miss is planted above the budget, and the target kept.)"""

    def backward_ended(self, peak_bytes: int) -> None:
        if self._checking is not None:
            peak_bytes = max(peak_bytes, self.max_bytes + 64)
        super().backward_ended(peak_bytes)

    def _make_plan(self, signatures, trace, target=None, attempts=None, values=None):
        return super()._make_plan(signatures, trace, None, attempts, values)
