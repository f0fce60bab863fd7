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
from collections.abc import Callable, Sequence
from typing import Any

from ....errors import AutodiffError
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

#: how many of the values read furthest in the future a drop in backward compares (with 4,
#: the residual MLP of ``benchmarks/bench_budget_loops.py`` at 0.25x held 5 of its 13 values
#: and recomputed 89 ops a step; with 8, 4 values, the least any schedule holds, and 56 ops)
_DROP_CANDIDATES = 8
#: dropped ancestors a drop's price counts at most (:meth:`BudgetCheckpointer._rerun_price`)
_COST_HORIZON = 64
#: recomputations one backward may spend on values it has already recomputed once (the
#: ops a drop of such a value would rerun, counted when it is dropped): a small graph may
#: recompute its chains from their start for each read (the residual MLP at 0.25x spends
#: 80), while a long chain stays linear, each value recomputed at most about twice
#: (API.md section 4: a 20,000-op chain under ``BudgetCheckpointing(256)`` recomputes
#: about 2n ops, where an unbounded drop took n^2/30)
_SPARE_RERUNS = 128


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

    def leave_backups(self, steps: list) -> None:
        """A consuming backward took the records' actions; each of ``steps`` (the nodes its
        steps run, and then release) gets its backups back, its recipe's inputs. A released
        node may keep its recipe, when another graph still reads its evicted output
        (:meth:`.pool.BudgetSaved.outlives_release`), and the recipe needs the backups: a
        parameter's value, or an op's output that no recipe rebuilds, is held nowhere else.
        They cost no memory the pool's release does not account for (an evictable slot lets
        go of its value all the same), and go when the node is released without a recipe.
        Not a node the walk reached but does not run: it is not released, and its backups
        (an input batch's constant) would live on with the graph, which NoCheckpointing's
        taken records do not."""
        taken = self.taken
        for node in steps:
            actions = taken.get(node.id)
            if actions:
                backups = [action for action in actions if action[2]]
                if backups:
                    node.saved.actions = backups

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
                        made_by = tree.get(current)
                        if made_by is None:
                            raise _held_elsewhere()
                        stack.extend(parent.id for parent in made_by.parents)
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


def _held_elsewhere() -> AutodiffError:
    """A value this backward reads is neither held for it nor recomputable from the graph it
    walks: a consuming backward still running (this one was started from its hook, as a
    deep-equilibrium layer's implicit backward starts ``autograd.grad``) has taken the
    graph's values and released the nodes to recompute them from."""
    return AutodiffError(
        "backward: a value this backward reads was evicted under the memory budget and the "
        "nodes to recompute it are being consumed by a backward() still running (this one "
        "was called from its hook); under BudgetCheckpointing, compute what the hook "
        "differentiates with retain_graph=True on the outer backward, or under another "
        "checkpointing strategy"
    )


class PlannedCheckpointer(Checkpointer):
    """Backward of a step that follows a plan that fits: the plain checkpointer (each evicted
    value recomputed once, kept to its last read, nothing dropped: no bookkeeping of future
    reads), which gives its report to ``on_end`` when it ends."""

    __slots__ = ("on_end",)

    def __init__(self, *base: Any):
        *base, self.on_end = base
        super().__init__(*base)

    def end(self) -> BackwardReport:
        report = super().end()
        self.on_end(report)
        return report

    def abandon(self) -> None:
        self.on_end(None)


class BudgetCheckpointer(Checkpointer):
    """A checkpointer that keeps the bytes it holds under ``budget`` by dropping what it can
    (see the module docstring). ``base``: the arguments of :class:`~.checkpointer.Checkpointer`;
    ``needs`` and ``costs``: see :class:`BudgetCheckpointerBuilder`; ``reserved``: the values
    holding one read of each parent; ``on_end``: called with the report (the most bytes held over
    the step, forward and this backward; the ops recomputed) when the backward ends."""

    __slots__ = (
        "active",
        "budget",
        "costs",
        "far",
        "needs",
        "now",
        "on_end",
        "parked",
        "reruns",
        "reserved",
        "spare",
    )

    def __init__(
        self,
        *base: Any,
        budget: int,
        needs: dict[int, list[int]],
        costs: dict[int, float],
        reserved: set[int],
        on_end: Callable[[BackwardReport], None],
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
        #: the values recomputations in progress make and read, each with the reads they still
        #: owe it: never dropped for the budget while it owes any (dropping it would recompute
        #: it again at once, and a graph of diamonds over and over: each read costs at most one
        #: recomputation of its missing ancestors). Once read by the last of them, a value
        #: another step reads later may go, to be recomputed again from the anchors before it
        #: (Chen et al.'s schedule: a chain recomputed from its start for each of its reads)
        self.active: dict[int, int] = {}
        #: active values a drop took out of ``far``, offered again when the outermost
        #: recomputation ends (left in ``far``, every drop during a long recomputation would
        #: pop and push them all again)
        self.parked: list[int] = []
        #: key -> times backward recomputed it
        self.reruns: dict[int, int] = {}
        #: what is left of :data:`_SPARE_RERUNS`
        self.spare = _SPARE_RERUNS
        for key, state in states.items():
            if state.value is not RECOMPUTE:
                self._offer(key)

    def retrieve(self, key: int) -> Any:
        self.now = self.needs[key][0]
        return self._read(key)

    def retrieve_step(self, keys: tuple) -> list:
        if keys:
            self.now = self.needs[keys[0]][0]  # (the step's, for what its recomputation drops)
        return super().retrieve_step(keys)

    def end(self) -> BackwardReport:
        report = super().end()
        self.on_end(report)
        return report

    def abandon(self) -> None:
        self.on_end(None)

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
    def _recompute(self, keys: Sequence[int]) -> None:
        order = topological_order(self.states, self.tree, keys)
        active = self.active
        outermost = not active
        for key in keys:  # the read this recomputation is for
            active[key] = active.get(key, 0) + 1
        for node_id in order:
            active.setdefault(node_id, 0)
            for parent in self.tree[node_id].parents:
                active[parent.id] = active.get(parent.id, 0) + 1
        try:
            self._recompute_order(keys, order)
        finally:
            if outermost:
                active.clear()
                self._unpark()
        if self.held_bytes > self.budget and not active:
            self._enforce_budget(protect=keys)

    def _unpark(self) -> None:
        states, needs = self.states, self.needs
        for key in self.parked:
            state = states.get(key)
            if state is not None and state.value is not RECOMPUTE and needs.get(key):
                self._offer(key)
        self.parked.clear()

    def _after_rerun(self, node_id: int) -> None:
        self.reruns[node_id] = self.reruns.get(node_id, 0) + 1
        active = self.active
        for parent in self.tree[node_id].parents:
            owed = active.get(parent.id)
            if owed is not None:
                if owed <= 1:
                    del active[parent.id]
                else:
                    active[parent.id] = owed - 1
        self._offer(node_id)
        if self.held_bytes > self.budget:
            self._enforce_budget(protect=(node_id,))

    # -- dropping ---------------------------------------------------------------------------------
    def _reread_parents(self, node_id: int) -> None:
        if node_id in self.reserved:  # its reserved reads become the reads of its recomputation
            self.reserved.discard(node_id)
            return
        when = self.needs[node_id][0]
        for parent in self.tree[node_id].parents:
            self._need(parent.id, when)

    def _rerun_price(self, node_id: int) -> tuple[float, int]:
        """Seconds a recomputation of ``node_id`` would take (its op, and every dropped
        ancestor it would recompute first: DTR's evicted neighbourhood, upstream), and the
        values that walk met (those ops and the held values they read: an upper bound of the
        ops, what the spare is charged). In a chain
        recomputed from its start, a value late in it costs the whole chain: the values that
        shorten the chains to come (anchors) are the last to go. At most
        :data:`_COST_HORIZON` ancestors are counted, so that a drop costs no more than that."""
        costs, states, tree = self.costs, self.states, self.tree
        cost = costs.get(node_id, 0.0)
        seen = {node_id}
        stack = [parent.id for parent in tree[node_id].parents]
        while stack and len(seen) <= _COST_HORIZON:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            state = states.get(current)
            if state is not None and state.value is RECOMPUTE:
                cost += costs.get(current, 0.0)
                stack.extend(parent.id for parent in tree[current].parents)
        return cost, len(seen)

    def _enforce_budget(self, protect: Sequence[int]) -> None:
        """Drop held values until under the budget: among the :data:`_DROP_CANDIDATES` read
        furthest ahead, the cheapest per byte and per step of distance. A value already
        recomputed once goes only while :data:`_SPARE_RERUNS` covers the ops its
        recomputation would rerun. The values ``protect`` (what the read being served
        needs) stay. A value that can no longer be dropped (a parent was
        released, or the spare is spent) leaves the queue; an active one waits in ``parked``
        until the recomputation using it ends."""
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
                if key in protect:
                    skipped.append(entry)
                    continue
                if key in active:
                    parked.append(key)
                    continue
                if not self._droppable(key) or not sizes.get(key):
                    continue
                cost, ops = self._rerun_price(key)
                if reruns.get(key) and (ops > self.spare or ops > _COST_HORIZON):
                    continue  # recomputed again, past the spare (or a chain not counted out)
                picks.append((cost / (sizes[key] * (max(-entry[0] - now, 0) + 1)), ops, entry))
            if not picks:
                break
            best = min(picks, key=lambda pick: pick[0])
            for pick in picks:
                if pick is not best:
                    heapq.heappush(far, pick[2])
            key = best[2][1]
            if reruns.get(key):
                self.spare -= best[1]
            self._drop(key)
        for entry in skipped:
            heapq.heappush(far, entry)


class ReservingBudgetCheckpointer(BudgetCheckpointer):
    """Backward after an eager step: what it recomputes stays droppable (see the module
    docstring)."""

    __slots__ = ()

    def retrieve_step(self, keys: tuple) -> list:
        """Each value one by one, its chain recomputed when it is read: this backward keeps
        the budget by dropping as it goes, and a step's values recomputed together would
        all be held before the first is read."""
        return list(map(self.retrieve, keys))

    def _before_rerun(self, node_id: int, node: Any) -> None:
        """The value may have to be dropped again later: each parent keeps one read for that
        (released when this value is forgotten), so what this recomputation makes stays
        droppable."""
        if node_id not in self.reserved:
            self.reserved.add(node_id)
            last = self.needs[node_id][-1]
            for parent in node.parents:
                self._need(parent.id, last)
