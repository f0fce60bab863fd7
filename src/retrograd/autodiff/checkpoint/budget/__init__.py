"""``BudgetCheckpointing`` and its parts: the memory pool (:mod:`.pool`), the op timer
(:mod:`.timer`), the trace recorder (:mod:`.recorder`), the planner (:mod:`.plan`, and its
client :mod:`.planner`), the forward's evictor (:mod:`.evictor`) and backward under the budget
(:mod:`.backward`), put together by :mod:`.strategy`."""

from .strategy import BudgetCheckpointing, parse_bytes

__all__ = ["BudgetCheckpointing", "parse_bytes"]
