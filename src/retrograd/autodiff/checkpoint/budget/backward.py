"""Backward under a byte budget: the checkpointer drops values it holds to stay under it.

Backward's order of reads is known when it starts (``needs``: key -> the backward steps at
which its reads happen), so the value read again furthest in the future is the one to drop
first (Belady's rule); among the few furthest, the cheapest to recompute per byte and per step
of distance goes (DTR's score, with the true distance to the next read in place of
staleness).

The checkpointers, for the ways a budgeted step's backward runs:

- :class:`PlannedCheckpointer`, for a step that followed a plan that fits: as the plan
  assumed, each recomputed value is kept until its last read, nothing is dropped;
- :class:`BudgetCheckpointer`, for a step that followed a plan under its floor: the same, and
  values are dropped should it hold more than the plan's count;
- :class:`ReservingBudgetCheckpointer`, after an eager step: a value kept from forward or
  recomputed *reserves* one read of each parent until its own last read, so that it can be
  dropped for the budget and recomputed when read again.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from typing import Any

from ..builder import CheckpointerBuilder
from ..checkpointer import BackwardReport, Checkpointer
from ..retro_forward import topological_order
from ..state import RECOMPUTE, State

__all__ = [
    "BudgetCheckpointer",
    "BudgetCheckpointerBuilder",
    "PlannedCheckpointer",
    "ReservingBudgetCheckpointer",
]

#: how many of the values read furthest in the future a drop in backward compares
_DROP_CANDIDATES = 4

#: how many times backward may recompute one value, under a budget smaller than a value it
#: holds, before the value is kept to its last read. No drop can meet such a budget, and
#: dropping each value of a chain right after recomputing it recomputes the chain again for
#: the next read: O(n^2) op executions for n ops (API.md section 4 allows about two reruns of
#: each op; a 2,000-op chain under a 256-byte budget took 100 s). A budget that one value fits
#: keeps DTR's trade of recomputation for memory unchanged.
_MAX_RERUNS = 2


class BudgetCheckpointerBuilder(CheckpointerBuilder):
    """Gathers a budget's records, whose actions hold slots: their values, and the seconds
    each value's op took in forward (``costs``)."""

    __slots__ = ("costs", "slots")

    def __init__(self, tree: dict[int, Any], consume: bool):
        #: key -> seconds its op took in forward
        self.costs: dict[int, float] = {}
        #: the slots gathered, when the records let go of their values (``consume``)
        self.slots: list | None = [] if consume else None
        super().__init__(tree, consume)

    def add(self, actions: list) -> None:
        """Gather one node's actions, each holding a slot: its op's seconds, the slot itself
        and its value as :meth:`~.builder.CheckpointerBuilder.add` gathers it."""
        costs, slots = self.costs, self.slots
        for key, slot, _ in actions:
            costs[key] = slot.cost
            if slots is not None:
                slots.append(slot)
        super().add([(key, slot.value, is_backup) for key, slot, is_backup in actions])

    def needs_in_order(self, steps: list) -> dict[int, list[int]]:
        """The reads of every value as the backward steps at which they happen, ascending
        (the counts of :meth:`~.builder.CheckpointerBuilder.count_reads`, with times)."""
        kept, tree = self.kept, self.tree
        needs: dict[int, list[int]] = {}
        for position, node in enumerate(steps):
            if node.op is None:
                continue
            for key in node.saved.keys:
                stack = [key]
                while stack:
                    current = stack.pop()
                    times = needs.get(current)
                    if times is not None:
                        times.append(position)
                        continue
                    needs[current] = [position]
                    if current not in kept:
                        stack.extend(parent.id for parent in tree[current].parents)
        return needs

    def reserve(self, states: dict[int, State], needs: dict[int, list[int]]) -> set[int]:
        """Make every value kept from forward that could be recomputed droppable: it
        reserves one read of each parent until its own last read, as a recomputed one does
        (:meth:`ReservingBudgetCheckpointer._before_rerun`); the values that do.

        A parent nobody else reads costs nothing when it is evicted (its own first read then
        reads its parents, as for any recomputed value); when it is held, it becomes
        droppable too."""
        kept, tree = self.kept, self.tree
        reserved: set[int] = set()
        pending = [key for key, state in states.items() if state.value is not RECOMPUTE]
        while pending:
            key = pending.pop()
            node = tree.get(key)
            if node is None or not node.saved.recompute or key in reserved:
                continue
            if not all(p.id in states or p.id in kept or p.saved.recompute for p in node.parents):
                continue
            last = needs[key][-1]
            reserved.add(key)
            stack = [parent.id for parent in node.parents]
            while stack:
                current = stack.pop()
                state = states.get(current)
                if state is not None:
                    state.reads_left += 1
                    bisect.insort(needs[current], last)
                    continue
                value = kept.get(current, RECOMPUTE)
                states[current] = State(value, 1)
                needs[current] = [last]
                if value is RECOMPUTE:  # its recomputation reads its parents once
                    stack.extend(parent.id for parent in tree[current].parents)
                else:
                    pending.append(current)
        return reserved


class PlannedCheckpointer(Checkpointer):
    """Backward of a step that follows a plan that fits: the plain checkpointer (each evicted
    value recomputed once, kept to its last read, nothing dropped: no bookkeeping of future
    reads), which reports its peak to ``on_end`` when it ends."""

    __slots__ = ("on_end",)

    def __init__(self, *base: Any):
        *base, self.on_end = base
        super().__init__(*base)

    def end(self) -> BackwardReport:
        report = super().end()
        self.on_end(report.peak_bytes)
        return report


class BudgetCheckpointer(Checkpointer):
    """A checkpointer that keeps the bytes it holds under ``budget`` by dropping what it can
    (see the module docstring). ``base``: the arguments of :class:`~.checkpointer.Checkpointer`;
    ``needs`` and ``costs``: see :class:`BudgetCheckpointerBuilder`; ``reserved``: the values
    holding one read of each parent; ``on_end``: called with the most bytes held over the
    step (forward and this backward) when the backward ends."""

    __slots__ = (
        "active",
        "budget",
        "cannot_fit",
        "costs",
        "far",
        "needs",
        "now",
        "on_end",
        "parked",
        "reruns",
        "reserved",
    )

    def __init__(
        self,
        *base: Any,
        budget: int,
        needs: dict[int, list[int]],
        costs: dict[int, float],
        reserved: set[int],
        on_end: Callable[[int], None],
    ):
        super().__init__(*base)
        states = self.states
        self.budget = budget
        self.needs = needs
        #: key -> seconds its op took in forward (never measured again here: a step that
        #: repeats another with the same prices drops and recomputes the same values)
        self.costs = costs
        self.reserved = reserved
        self.on_end = on_end
        #: the step of the latest read by a backward step
        self.now = 0
        #: heap of (-next read, key) of held values, stale entries included
        self.far: list[tuple[int, int]] = []
        #: the values recomputations in progress make and read: never dropped for the budget
        #: (dropping them would recompute them again at once, and a graph of diamonds over and
        #: over: each read costs at most one recomputation of its missing ancestors)
        self.active: set[int] = set()
        #: active values taken out of ``far`` by a drop, offered again when the recomputation
        #: ends (left in ``far``, every drop during a long recomputation would pop and push
        #: them all back: O(n) per rerun)
        self.parked: list[int] = []
        #: key -> times backward recomputed it (see :data:`_MAX_RERUNS`)
        self.reruns: dict[int, int] = {}
        #: whether a value held in this backward is larger than the budget
        self.cannot_fit = False
        sizes = self.sizes
        for key, state in states.items():
            if state.value is not RECOMPUTE:
                self._offer(key)
                if sizes.get(key, 0) > budget:
                    self.cannot_fit = True

    def retrieve(self, key: int) -> Any:
        self.now = self.needs[key][0]
        return self._read(key)

    def end(self) -> BackwardReport:
        report = super().end()
        self.on_end(report.peak_bytes)
        return report

    # -- reads: each read is one step of ``needs`` ------------------------------------------------
    def _read(self, key: int) -> Any:
        needs = self.needs[key]
        value = super()._read(key)
        del needs[0]
        if key in self.states and value is not RECOMPUTE:
            self._offer(key)
        return value

    def _offer(self, key: int) -> None:
        """(Re)enter a held value among the candidates to drop."""
        heapq.heappush(self.far, (-self.needs[key][0], key))

    def _need(self, parent: int, when: int) -> None:
        """One more read of ``parent``, at step ``when``."""
        state = self.states[parent]
        state.reads_left += 1
        bisect.insort(self.needs[parent], when)
        if state.value is not RECOMPUTE:
            self._offer(parent)

    def _forget(self, key: int) -> None:
        """Delete a state after its last read, releasing the reads it reserved, recursively."""
        stack = [key]
        states, needs, reserved = self.states, self.needs, self.reserved
        while stack:
            current = stack.pop()
            dropped = states[current].value is RECOMPUTE
            super()._forget(current)
            needs.pop(current, None)
            # A reserved value, or one dropped (only children's reservations kept it, and its
            # parents hold one read for its recomputation): release the parents' reads.
            if current in reserved or dropped:
                reserved.discard(current)
                for parent in self.tree[current].parents:
                    parent_state = states[parent.id]
                    parent_state.reads_left -= 1
                    needs[parent.id].pop()  # the latest: a reservation's
                    if parent_state.reads_left == 0:
                        stack.append(parent.id)

    # -- recomputation ----------------------------------------------------------------------------
    def _recompute(self, key: int) -> None:
        order = topological_order(self.states, self.tree, key)
        active = self.active
        outermost = not active
        for node_id in order:
            active.add(node_id)
            for parent in self.tree[node_id].parents:
                active.add(parent.id)
        try:
            self._recompute_order(key, order)
        finally:
            if outermost:
                active.clear()
                self._unpark()
        if self.held_bytes > self.budget and not active:
            self._enforce_budget(protect=key)

    def _unpark(self) -> None:
        states, needs = self.states, self.needs
        for key in self.parked:
            state = states.get(key)
            if state is not None and state.value is not RECOMPUTE and needs.get(key):
                self._offer(key)
        self.parked.clear()

    def _after_rerun(self, node_id: int) -> None:
        self.reruns[node_id] = self.reruns.get(node_id, 0) + 1
        if self.sizes[node_id] > self.budget:
            self.cannot_fit = True
        self._offer(node_id)
        if self.held_bytes > self.budget:
            self._enforce_budget(protect=node_id)

    # -- dropping ---------------------------------------------------------------------------------
    def _reread_parents(self, node_id: int) -> None:
        if node_id in self.reserved:  # its reserved reads become the reads of its recomputation
            self.reserved.discard(node_id)
            return
        when = self.needs[node_id][0]
        for parent in self.tree[node_id].parents:
            self._need(parent.id, when)

    def _drop(self, node_id: int) -> bool:
        # Also bounds the drops of a recomputation's transient by-products (anchored.py).
        if self.cannot_fit and self.reruns.get(node_id, 0) >= _MAX_RERUNS:
            return False
        return super()._drop(node_id)

    def _drop_cost(self, node_id: int) -> float:
        """Seconds a recomputation of ``node_id`` would take: its op's, and its dropped
        parents' (one level: DTR's evicted neighbourhood, approximately)."""
        costs, states = self.costs, self.states
        cost = costs.get(node_id, 0.0)
        for parent in self.tree[node_id].parents:
            if states[parent.id].value is RECOMPUTE:
                cost += costs.get(parent.id, 0.0)
        return cost

    def _enforce_budget(self, protect: int) -> None:
        """Drop held values until under the budget: among the :data:`_DROP_CANDIDATES` read
        furthest ahead, the cheapest per byte and per step of distance. A value that can no
        longer be dropped (a parent was released) never becomes droppable again and leaves
        the queue."""
        far, states, needs, sizes = self.far, self.states, self.needs, self.sizes
        active, parked, reruns = self.active, self.parked, self.reruns
        now = self.now
        skipped = []
        while self.held_bytes > self.budget and far:
            picks = []
            while far and len(picks) < _DROP_CANDIDATES:
                entry = heapq.heappop(far)
                key = entry[1]
                state = states.get(key)
                if state is None or state.value is RECOMPUTE or needs[key][0] != -entry[0]:
                    continue  # stale
                if key == protect:
                    skipped.append(entry)
                    continue
                if key in active:
                    parked.append(key)
                    continue
                if self.cannot_fit and reruns.get(key, 0) >= _MAX_RERUNS:
                    continue  # kept to its last read from now on
                if not self._droppable(key) or not sizes.get(key):
                    continue
                picks.append(entry)
            if not picks:
                break
            best = min(
                picks,
                key=lambda e: self._drop_cost(e[1]) / (sizes[e[1]] * (max(-e[0] - now, 0) + 1)),
            )
            for entry in picks:
                if entry is not best:
                    heapq.heappush(far, entry)
            self._drop(best[1])
        for entry in skipped:
            heapq.heappush(far, entry)


class ReservingBudgetCheckpointer(BudgetCheckpointer):
    """Backward after an eager step: what it recomputes stays droppable (see the module
    docstring)."""

    __slots__ = ()

    def _before_rerun(self, node_id: int, node: Any) -> None:
        """The value may have to be dropped again later: each parent keeps one read for that
        (released when this value is forgotten), so what this recomputation makes stays
        droppable."""
        if node_id not in self.reserved:
            self.reserved.add(node_id)
            last = self.needs[node_id][-1]
            for parent in node.parents:
                self._need(parent.id, last)
