"""The memory pool of a budget: the values held for backward, each in a :class:`Slot`, and
the bytes they hold.

Every action holding a node's output shares the node's slot (:class:`BudgetSaved` keeps it),
so evicting the value is one assignment. The pool counts a slot's bytes while its value is
held; when the last action holding the slot goes (backward consumed it, or the graph was
freed), a weak reference's callback stops counting them. The :class:`~.evictor.Evictor`
indexes the evictable slots the pool holds.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from ..builder import NOTHING_SAVED, Saved
from ..state import RECOMPUTE

__all__ = ["BudgetSaved", "Constant", "MemoryPool", "Slot"]


class Slot:
    """A value held for backward under a budget: ``value`` is the inner primitive, or
    ``RECOMPUTE`` once evicted."""

    __slots__ = (
        "__weakref__",
        "cost",
        "evictable",
        "nbytes",
        "parents",
        "planned",
        "priced_as",
        "value",
    )

    def __init__(self, value: Any, nbytes: int, cost: float, parents: tuple, evictable: bool):
        self.value = value
        self.nbytes = nbytes
        #: seconds its op took
        self.cost = cost
        #: the parents' slots, for the cost of an evictable slot's evicted neighbourhood (a
        #: slot never refers to its node: node.saved.slot -> slot -> node would be a cycle,
        #: and graphs must be freed by reference counting alone)
        self.parents = parents
        self.evictable = evictable
        #: the step's plan for it: evicted at once (``True``: stays evicted even when read
        #: again in forward), kept (``False``: held even when only backed up), or ``None``
        self.planned: bool | None = None
        #: the timer's key of its op (:attr:`~.timer.OpTimer.key`) when it was timed, else
        #: ``()``: a faster run of the same op and shapes later lowers its ``cost``
        self.priced_as: tuple = ()


class BudgetSaved(Saved):
    """A node's record under a budget: its actions hold :class:`Slot` objects, and ``slot``
    is its own output's (``None`` until an action holds it). ``sources``: when an input is
    untracked but backed up (a :class:`Constant`), the node's parents with each ``None``
    replaced by its constant, which a recomputation reads; else ``None``."""

    __slots__ = ("slot", "sources")

    may_outlive_release = True

    def __init__(self, keys: tuple, actions: list | None, recompute: bool):
        super().__init__(keys, actions, recompute)
        self.slot: Slot | None = None
        self.sources: tuple | None = None

    def outlives_release(self) -> bool:
        """A backward releases this record's node (it walked the node without
        ``retain_graph``), but the node's output was evicted and another graph still reads
        it: a graph that ``create_graph`` recorded reads the nodes of the graph it
        differentiated, and a backward through the one releases nodes the other needs
        (``g = grad(y, x, create_graph=True, retain_graph=True)``, then ``grad(g.sum(),
        [x, w])`` releases ``w[:3]``'s node, whose evicted output ``y``'s retained graph reads
        again in ``grad(y, x)``). Under NoCheckpointing that reader holds the value itself;
        here only the node can rebuild it. So the node keeps its recipe: its parents, and of
        this record the backups of their values (what its own backward step read goes, as
        that step never runs again). Whether another reader holds the output's slot is told by
        letting go of this record's reference: the slot outlives it exactly when one does.
        A parent's slot that the kept backups hold is then held by a live reader too, so the
        parent, released after its child, keeps its recipe in turn, down to the leaves.

        A record that keeps no recipe lets go of its slot and actions here, as the node lets
        go of the record: the backward's own view of a node with backed-up inputs
        (``_Sourced``) refers to the record until the backward ends, and a released record's
        backups would hold its parents' slots that long, each parent then seen as read by
        another graph."""
        slot = self.slot
        if slot is None or slot.value is not RECOMPUTE or not self.recompute:
            self.slot = self.actions = None
            return False
        alive = weakref.ref(slot)
        self.slot = slot = None
        slot = alive()
        if slot is None:
            self.actions = None
            return False
        self.slot = slot
        actions = self.actions
        self.actions = [action for action in actions if action[2]] if actions else None
        self.keys = ()
        return True


class Constant(Slot):
    """An untracked input held under a budget (a mask, the input batch, a constant): the slot
    of its value, and what a recomputation of its consumers reads in place of a parent node.
    Like a node it has an ``id`` (a key of its own), no parents and no op, and it is never
    recomputed. Every consumer of the same primitive shares one
    (:class:`~.strategy.BudgetCheckpointing` finds them by the primitive's identity while they
    live), so its bytes count once."""

    __slots__ = ("id",)

    op = None
    saved = NOTHING_SAVED

    def __init__(self, key: int, value: Any, nbytes: int):
        super().__init__(value, nbytes, 0.0, (), False)
        self.id = key

    def __repr__(self) -> str:
        return f"Constant({self.id}, {self.nbytes} bytes)"


class _HeldRef(weakref.ref):
    """The weak reference the pool holds a slot by: it carries the slot's identity and bytes
    for the pool's one callback (no closure per slot, which would cost a function and its
    cells, objects the garbage collector tracks, per value held)."""

    __slots__ = ("ident", "nbytes")


class MemoryPool:
    """The bytes of the slots held now (``held_bytes``), and the most since :meth:`take_peak`.

    ``lock`` is the budget's (reentrant: a slot freed by the garbage collector while the
    budget works calls back in); ``evictor`` is told of every evictable slot held and
    forgotten.
    """

    def __init__(self, lock: threading.RLock, evictor: Any):
        self._lock = lock
        self._evictor = evictor
        #: id(slot) -> weak reference, for every live slot whose bytes count
        self._held: dict[int, weakref.ref] = {}
        self.held_bytes = 0
        #: the most bytes held since :meth:`take_peak` (the budget's ``save`` inlines
        #: :meth:`note_peak`)
        self.peak = 0
        # the slots' callback made once, not once per slot held; it reaches the pool through a
        # weak reference: a bound method kept on the pool would be a reference cycle, and a
        # budget (a backend made per run or per trial) would be freed only by the collector
        self._forget_held = _weak_callback(self)

    def hold(self, slot: Slot) -> None:
        """Count ``slot``'s bytes until it is evicted or dies."""
        if not slot.nbytes:
            return
        ident = id(slot)
        ref = _HeldRef(slot, self._forget_held)
        ref.ident, ref.nbytes = ident, slot.nbytes
        self._held[ident] = ref
        self.held_bytes += slot.nbytes
        if slot.evictable and slot.planned is not False:  # a followed plan keeps it held
            self._evictor.enter(ident, ref, slot)

    def evict(self, ident: int, slot: Slot) -> None:
        """Drop ``slot``'s value: its bytes stop counting; backward recomputes it."""
        del self._held[ident]
        self.held_bytes -= slot.nbytes
        slot.value = RECOMPUTE

    def drop(self, slot: Slot) -> None:
        """Drop ``slot``'s value, held or not: its bytes stop counting (a followed plan
        evicts it after all); backward recomputes it."""
        ident = id(slot)
        if self._held.pop(ident, None) is not None:
            self.held_bytes -= slot.nbytes
            self._evictor.discard(ident)
        slot.value = RECOMPUTE

    def release(self, slots: list) -> None:
        """A backward consumed the records of ``slots``: its checkpointer holds their values
        and frees each at its last read, so the slots let go of them (a slot would otherwise
        keep its value alive until its node dies). A :class:`Constant`, shared by the steps,
        keeps its own, and so does a slot that is not evictable (a parameter's, or the output
        of an op that cannot be recomputed): a graph this backward does not walk may share
        the slot (one that ``create_graph`` recorded, retained), and its value would be lost
        for good, where an evictable one is rebuilt from the recipe its released node keeps
        (:meth:`BudgetSaved.outlives_release`). Such a value lives until its node's step (the
        last holder of its slot) instead of its last read: never longer than the backward."""
        held, evictor = self._held, self._evictor
        for slot in slots:
            if type(slot) is Slot and slot.evictable and slot.value is not RECOMPUTE:
                ident = id(slot)
                if held.pop(ident, None) is not None:
                    self.held_bytes -= slot.nbytes
                    evictor.discard(ident)
                slot.value = RECOMPUTE

    def held_slots(self) -> tuple:
        """``(weak reference, constant key or None, bytes)`` of every slot held now (a plain
        reference, without the pool's callback: it may outlive the slot's place here). Read
        from a copy of the table: a slot that dies meanwhile (its callback, run by a
        collection any allocation here may start, or another thread's step) leaves the table,
        and iterating it then raised "dictionary changed size during iteration" (threads
        training on one shared budget, ci87)."""
        found = []
        for ref in self._held.copy().values():
            slot = ref()
            if slot is not None:
                found.append((weakref.ref(slot), getattr(slot, "id", None), ref.nbytes))
        return tuple(found)

    def unpin(self, kept: set[int]) -> None:
        """Every held slot a followed plan keeps (``planned`` False), but those of ``kept``
        (ids of slots), becomes a candidate for eviction again: what a step abandoned before
        its backward holds (see :meth:`.Planner.starts_again`), which the next step's forward
        may evict for the budget as any value no plan decides on."""
        for ident, ref in self._held.copy().items():
            slot = ref()
            if slot is not None and ident not in kept and slot.planned is False:
                slot.planned = None
                if slot.evictable:
                    self._evictor.enter(ident, ref, slot)

    def note_peak(self) -> None:
        if self.held_bytes > self.peak:
            self.peak = self.held_bytes

    def take_peak(self) -> int:
        """The most bytes held since the last call (forward's worst moment)."""
        peak, self.peak = self.peak, self.held_bytes
        return peak

    def _forget(self, ref: _HeldRef) -> None:
        """The callback of a slot's weak reference: its bytes (if still held) stop counting."""
        ident = ref.ident
        with self._lock:
            if self._held.pop(ident, None) is not None:
                self.held_bytes -= ref.nbytes
            self._evictor.discard(ident)


def _weak_callback(pool: MemoryPool) -> Any:
    """``pool._forget``, for the slots' weak references, holding ``pool`` weakly (a slot that
    outlives its budget has nothing left to count)."""
    pool_ref = weakref.ref(pool)

    def forget(ref: _HeldRef) -> None:
        live = pool_ref()
        if live is not None:
            live._forget(ref)

    return forget
