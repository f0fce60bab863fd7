"""``BudgetCheckpointing``: the activations held for backward kept under a byte budget.

The strategy puts together the budget's parts, each a small class of its own module:

- while forward records: the :class:`~.timer.OpTimer` measures each op, the
  :class:`~.recorder.TraceRecorder` notes it, the :class:`~.planner.Planner` says whether a
  followed plan evicts it at once, the :class:`~.pool.MemoryPool` holds its values in slots and
  the :class:`~.evictor.Evictor` evicts when the bytes held pass the limit;
- when backward starts: the planner plans the next steps from the recorded one (or checks the
  step followed its plan) and the strategy builds the checkpointer of :mod:`.backward`.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from ..anchored import SqrtAnchors
from ..builder import Saved
from ..checkpointer import Checkpointer
from ..retro_forward import KeepByProducts
from ..state import EVICTED, RECOMPUTE, nbytes_of
from ..strategy import CheckpointStrategy
from .backward import BudgetCheckpointer, BudgetCheckpointerBuilder, ReservingBudgetCheckpointer
from .evictor import Evictor
from .planner import Planner
from .pool import BudgetSaved, MemoryPool, Slot
from .recorder import TraceRecorder
from .timer import OpTimer

__all__ = ["BudgetCheckpointing", "parse_bytes"]

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(size: int | str) -> int:
    """``512``, ``"512MB"`` (10**6), ``"2GiB"`` (2**30), ``"1.5 gb"`` -> bytes."""
    if isinstance(size, bool):
        raise TypeError(f"BudgetCheckpointing: max_bytes must be an int or a string, got {size!r}")
    if isinstance(size, int):
        number = size
    elif isinstance(size, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", size)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(
                f"BudgetCheckpointing: cannot read the size {size!r}; write bytes as an int "
                "or a string such as '512MB', '64MiB' or '2GiB'"
            )
        number = int(float(match.group(1)) * _UNITS[unit])
    else:
        raise TypeError(f"BudgetCheckpointing: max_bytes must be an int or a string, got {size!r}")
    if number <= 0:
        raise ValueError(f"BudgetCheckpointing: max_bytes must be positive, got {size!r}")
    return number


def _of_part(part: str, name: str, doc: str) -> property:
    """A read-only attribute of the strategy that one of its parts holds."""
    return property(lambda self: getattr(getattr(self, part), name), doc=doc)


class BudgetCheckpointing(CheckpointStrategy):
    """Keeps the activations held for backward under ``max_bytes`` (an int, or ``"512MB"``,
    ``"2GiB"``), evicting during forward and recomputing on demand in backward.

    After Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021): every value a backward
    rule reads is held in a *slot*; when the bytes held pass the budget, the held value that is
    cheapest to recompute per byte freed is evicted, the least recently used first among
    values of about the same price. Its price is measured, not guessed: the time its op took
    when it ran (the wall time since the previous recorded op), plus that of its evicted
    ancestors, which a recomputation would rerun too (DTR's evicted neighbourhood). An evicted
    value keeps backups of its parents (held or evicted themselves), so backward recomputes it
    recursively. Backward keeps what it recomputes under the same budget, dropping the value
    read furthest in the future per unit of recompute cost (:mod:`.backward`).

    That is the first step of a training loop, and any step whose graph differs from the
    one before. When a backward starts, the strategy knows the whole step (every value's
    size, its op's time, its parents, the step at which backward reads it) and plans the
    next steps (:mod:`.plan`): which values to evict as soon as they are made so that the
    bytes held over the whole step, gradients in flight included, fit the budget for the
    least recomputation. A later step whose ops match the plan's, one by one, follows it.
    Gradients are bit-identical to :class:`NoCheckpointing`'s. A single value larger than the
    budget is still held: the step runs, and ``Gradients.peak_bytes`` shows by how much the
    budget was passed.
    """

    builder = BudgetCheckpointerBuilder
    recomputed_status = EVICTED

    def __init__(self, max_bytes: int | str):
        self.max_bytes = parse_bytes(max_bytes)
        # reentrant: a slot freed by the garbage collector while the budget works calls back in
        self._lock = threading.RLock()
        self.evictor = Evictor()
        self.pool = MemoryPool(self._lock, self.evictor)
        self.timer = OpTimer()
        self.recorder = TraceRecorder()
        self.planner = Planner(self.max_bytes)

    # -- what reports and tests read: attributes of the parts ------------------------------------
    held_bytes = _of_part("pool", "held_bytes", "Bytes of the values held for backward now.")
    evictions = _of_part("evictor", "evictions", "Values evicted during forward, all time.")
    plans = _of_part("planner", "plans", "Plans made.")
    planned_steps = _of_part("planner", "planned_steps", "Steps that followed a plan.")

    def recomputes(self, op: Any) -> bool:
        return False  # everything is kept at first; eviction decides later

    def __repr__(self) -> str:
        return f"BudgetCheckpointing({self.max_bytes})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.max_bytes == other.max_bytes

    def __hash__(self) -> int:
        return hash((type(self), self.max_bytes))

    # -- forward --------------------------------------------------------------------------------
    def save(self, node: Any, recipe: Any, inputs: tuple, out: Any) -> Saved:
        """The values ``node``'s rules read, in slots; its parents backed up if it can be
        recomputed; evicted at once if the plan says so; then evictions until the bytes held
        fit the limit again."""
        plain = super().save(node, recipe, inputs, out)  # every value held as it is
        with self._lock:
            op = node.op
            recompute = op.recomputable and None not in node.parents
            saved = node.saved = BudgetSaved(plain.keys, None, recompute)
            out_bytes = nbytes_of(out)
            seconds = self.timer.measure(op.name, out_bytes, inputs)
            noted = self.recorder.note(node, inputs, out, out_bytes, seconds, recompute)
            evict_now = self.planner.on_value(noted, recompute)
            by_parent = {
                parent.id: (parent, x.value)
                for parent, x in zip(node.parents, inputs)
                if parent is not None
            }
            actions = []
            if recompute:  # its parents, to recompute it from should it be evicted
                backups = {
                    parent_id: self._slot_of(parent, value, False)
                    for parent_id, (parent, value) in by_parent.items()
                }
                parents = tuple([backups[parent.id] for parent in node.parents])
                slot = saved.slot = Slot(RECOMPUTE, out_bytes, seconds, parents, out_bytes > 0)
                slot.planned = evict_now if self.planner.following else None
                actions.extend((parent_id, slot, True) for parent_id, slot in backups.items())
            for key, value, is_backup in plain.actions or ():
                if key == node.id:
                    slot = self._slot_of(node, out)
                elif key in by_parent:
                    slot = self._slot_of(*by_parent[key])
                else:  # an untracked input a rule reads, under a key of its own
                    slot = Slot(value, nbytes_of(value), 0.0, (), False)
                    self.pool.hold(slot)
                    self.recorder.note_constant(key, slot.nbytes)
                actions.append((key, slot, is_backup))
            saved.actions = actions or None
            pool, limit = self.pool, self.planner.limit
            if pool.held_bytes > limit:
                self.evictor.evict_until(pool, limit)
            pool.note_peak()
            self.timer.restart()
        return saved

    def _slot_of(self, node: Any, value: Any, read: bool = True) -> Slot:
        """The slot of ``node``'s output. A rule reading it (``read``) holds ``value`` in it;
        a mere backup of a recomputable parent leaves it evicted, so that backups cost no
        memory NoCheckpointing would not spend (the parent's own backups recompute it): such
        a node got its slot, evicted, when it was recorded (:meth:`save`)."""
        if node.op is None:  # a parameter: not an activation, and its value may change
            return Slot(value, 0, 0.0, (), False)
        saved = node.saved
        if type(saved) is not BudgetSaved:  # consumed by an earlier backward: its record is gone
            saved = node.saved = BudgetSaved(saved.keys, saved.actions, saved.recompute)
        slot = saved.slot
        if slot is None:  # an op with an untracked input: it cannot be recomputed, so kept
            slot = saved.slot = Slot(value, nbytes_of(value), 0.0, (), False)
            self.pool.hold(slot)
        elif slot.value is RECOMPUTE and (read or slot.planned is False) and not slot.planned:
            # read again while at hand, or backed up and the plan keeps it: held (again)
            slot.value = value
            self.pool.hold(slot)
        elif slot.value is not RECOMPUTE:  # used again: evicted later among its tier
            self.evictor.touch(slot)
        return slot

    # -- backward -------------------------------------------------------------------------------
    def begin_backward(self, tape: Any, inner: Any, consume: bool) -> Checkpointer:
        """The step just recorded ends: the planner plans the next ones from it, unless it
        followed the current plan; then the checkpointer of its backward, as the plan assumed
        or as after an eager step."""
        with self._lock:
            forward_peak = self.pool.take_peak()
            self.timer.pause()  # backward runs before the next op: not that op's time
            limit = self.planner.backward_begins(self.recorder.take(), tape.steps)
        nodes = tape.nodes
        builder = BudgetCheckpointerBuilder(nodes, consume)
        sizes = builder.sizes()
        needs = builder.needs_in_order(tape.steps)
        states = builder.states({key: len(times) for key, times in needs.items()})
        if limit is None:  # as after an eager step
            kind, budget = ReservingBudgetCheckpointer, self.max_bytes
            by_products = SqrtAnchors.for_graph(builder.recomputable)
            reserved = builder.reserve(states, needs)
        else:  # as the plan assumed
            kind, budget = BudgetCheckpointer, limit
            by_products, reserved = KeepByProducts(), set()
        start_peak = max(forward_peak, sum(sizes.values()))
        return kind(
            states,
            nodes,
            inner,
            sizes,
            by_products,
            start_peak,
            budget=budget,
            needs=needs,
            costs=builder.costs,
            reserved=reserved,
            on_end=self._backward_ended,
        )

    def _backward_ended(self, peak_bytes: int) -> None:
        with self._lock:
            self.planner.backward_ended(peak_bytes)
