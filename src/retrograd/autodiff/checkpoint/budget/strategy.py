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
import weakref
from time import perf_counter
from typing import Any

from ....errors import DTypeError, InvalidArgumentError
from ...ids import new_node_id
from ..anchored import SqrtAnchors
from ..builder import Saved
from ..checkpointer import Checkpointer, HeldCheckpointer
from ..retro_forward import KeepByProducts
from ..state import EVICTED, RECOMPUTE, nbytes_of
from ..strategy import CheckpointStrategy
from .backward import (
    BudgetCheckpointer,
    BudgetCheckpointerBuilder,
    PlannedCheckpointer,
    ReservingBudgetCheckpointer,
)
from .evictor import Evictor
from .flops import recompute_fraction
from .planner import ANCHORED, FITS, FLOOR, REPLAY, Planner
from .pool import BudgetSaved, Constant, MemoryPool, Slot
from .recorder import TraceRecorder
from .timer import REPRICE_FACTOR, OpTimer

__all__ = ["BudgetCheckpointing", "backs_up", "parse_bytes"]

_new = object.__new__
#: the constants of a node whose inputs are all tracked: none (shared, never changed)
_NO_CONSTANTS: dict = {}

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
        raise DTypeError(f"BudgetCheckpointing: max_bytes must be an int or a string, got {size!r}")
    if isinstance(size, int):
        number = size
    elif isinstance(size, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", size)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise InvalidArgumentError(
                f"BudgetCheckpointing: cannot read the size {size!r}; write bytes as an int "
                "or a string such as '512MB', '64MiB' or '2GiB'"
            )
        number = int(float(match.group(1)) * _UNITS[unit])
    else:
        raise DTypeError(f"BudgetCheckpointing: max_bytes must be an int or a string, got {size!r}")
    if number <= 0:
        raise InvalidArgumentError(f"BudgetCheckpointing: max_bytes must be positive, got {size!r}")
    return number


def backs_up(nbytes: int, out_bytes: int, read: bool) -> bool:
    """Whether an untracked input of ``nbytes`` (a mask, a constant, the input batch) is held
    under a budget, so that its consumer, of ``out_bytes``, can be evicted and recomputed.

    It is when it is no larger than the consumer's output: holding it never costs more than
    the bytes it lets the budget free. It is too when a backward rule reads it (``read``): it
    is held for that anyway. One held for another consumer is shared (one copy per primitive),
    whatever this rule says. A large untracked table read into a small output is not: that
    consumer is kept, as under NoCheckpointing.

    >>> backs_up(4096, 65536, read=False)  # a causal mask of a masked attention
    True
    >>> backs_up(2**20, 2048, read=False)  # a 1 MiB table gathered into 2 KiB
    False
    >>> backs_up(2**20, 2048, read=True)  # held for its rule anyway
    True
    """
    return read or nbytes <= out_bytes


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
        #: id(primitive) -> the Constant holding it, while one lives (see _constants_of)
        self._constants: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        #: position -> the slot of each value of the step being recorded that the plans it
        #: matches disagree on (held until they agree, see Planner._narrow), weakly
        self._disputed: dict[int, weakref.ref] = {}
        #: a replay's step (:data:`~.planner.REPLAY`): the timer's key -> the lowest price the
        #: replayed values of that key were given so far in the step, so that the replay
        #: reprices its held values as the eager step it copies did (see _replayed)
        self._replay_prices: dict[tuple, float] = {}

    # -- what reports and tests read: attributes of the parts ------------------------------------
    held_bytes = _of_part("pool", "held_bytes", "Bytes of the values held for backward now.")
    evictions = _of_part("evictor", "evictions", "Values evicted during forward, all time.")
    plans = _of_part("planner", "plans", "Plans made.")
    planned_steps = _of_part("planner", "planned_steps", "Steps that followed a plan.")

    @property
    def predicted_peak(self) -> int | None:
        """The activation bytes the latest plan predicts for its steps (the engine's count,
        which ``Gradients.peak_bytes`` reports), ``None`` before the first plan."""
        kept = self.planner.kept
        return kept[0].counted if kept else None

    @property
    def recompute_fraction(self) -> float | None:
        """The share of a step's FLOPs the latest plan recomputes, counted from its ops'
        shapes (:mod:`.flops`: products ``2mnk``, one per element otherwise, backward twice
        forward), each evicted value rerun once as the plan models it: no timing enters it.
        ``None`` before the first plan, and for a replay of an eager step (which recomputes
        as its forward's evictions go, chains several times over: its count is the
        ``Gradients.recomputed_ops`` of its steps)."""
        kept = self.planner.kept
        if not kept or kept[0].mode == REPLAY:
            return None
        return recompute_fraction(kept[0].trace, kept[0].evict)

    def recomputes(self, op: Any) -> bool:
        return False  # everything is kept at first; eviction decides later

    def __repr__(self) -> str:
        return f"BudgetCheckpointing({self.max_bytes})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.max_bytes == other.max_bytes

    def __hash__(self) -> int:
        return hash((type(self), self.max_bytes))

    def __reduce__(self) -> tuple:
        # its settings: the lock, the pool, the timings and plans belong to this process's steps
        return type(self), (self.max_bytes,)

    # -- forward --------------------------------------------------------------------------------
    def save(self, node: Any, recipe: Any, inputs: tuple, out: Any) -> Saved:
        """The values ``node``'s rules read, in slots; its parents backed up if it can be
        recomputed; evicted at once if the plan says so; then evictions until the bytes held
        fit the limit again."""
        with self._lock:
            op = node.op
            parents = node.parents
            out_bytes = nbytes_of(out)
            if None in parents:
                constants = self._constants_of(node, inputs, recipe, out_bytes, op.recomputable)
                recompute = op.recomputable and len(constants) == parents.count(None)
            else:
                constants, recompute = _NO_CONSTANTS, op.recomputable
            keys = ()
            # BudgetSaved's slots, assigned here: its __init__ (and Saved's) would cost frames
            saved = node.saved = _new(BudgetSaved)
            saved.actions, saved.recompute, saved.slot, saved.sources = None, recompute, None, None
            planner, timer, recorder = self.planner, self.timer, self.recorder
            # A followed plan prices the op: it is timed only while no plan is followed.
            if planner.following:
                measured, plan = None, planner.plan.values
                if plan is not None:
                    noted = recorder.note_followed(node, inputs, out, out_bytes, recompute, plan)
                    if noted is not None and planner.starts_again(*noted):
                        self._abandon(recorder.take())
                        noted = recorder.note(node, inputs, out, out_bytes, None, recompute)
                else:
                    noted = recorder.note(node, inputs, out, out_bytes, None, recompute)
            else:
                measured = timer.measure(op.name, out_bytes, inputs)
                noted = recorder.note(node, inputs, out, out_bytes, measured, recompute, timer.key)
            planned, seconds = planner.on_value(noted, recompute)
            if noted is not None and noted[0] == 0:  # a step starts
                self._step_starts()
                if self._disputed:  # (the last one's graph was dropped)
                    self._disputed.clear()
            # the plans still matched disagree on it (Planner._narrow), and there is no room to
            # hold it until they agree: evicted
            if planner.disputed_now and self.pool.held_bytes + out_bytes > planner.limit:
                planned = True
                planner.disputed_now = False
            if seconds < 0:  # no plan followed: the measured time stands
                seconds = measured
                if seconds is None:  # the plan was left at this op: it is timed after all
                    seconds = timer.measure(op.name, out_bytes, inputs)
                    if noted is not None:
                        recorder.reprice_last(seconds, timer.key)
            actions = []
            if recompute:  # its parents, to recompute it from should it be evicted
                sources = parents
                if constants:
                    sources = tuple(
                        [constants[i] if p is None else p for i, p in enumerate(parents)]
                    )
                    saved.sources = sources
                backups = []  # by parent position; one action per distinct parent
                # the distinct parents by key, in a dict: a scan of the actions so far for
                # each parent made `stack`/`cat` of n tensors O(n²) (10,000 took 13 s)
                backup_of: dict[int, Any] = {}
                for source, x in zip(sources, inputs):
                    key = source.id
                    backup = backup_of.get(key)
                    if backup is None:
                        if type(source) is Constant:
                            backup = source
                        else:
                            backup = self._slot_of(source, x.value, False)
                        backup_of[key] = backup
                        actions.append((key, backup, True))
                    backups.append(backup)
                # Slot's attributes, assigned here: its __init__ would cost a frame
                slot = saved.slot = _new(Slot)
                slot.value, slot.nbytes, slot.cost = RECOMPUTE, out_bytes, seconds
                slot.parents, slot.evictable, slot.planned = tuple(backups), out_bytes > 0, planned
                if measured is not None:
                    slot.priced_as = timer.key
                elif planned is None and noted is not None and planner.following:
                    slot.priced_as = self._replayed(noted[0], seconds)
                else:
                    slot.priced_as = ()
                if planner.disputed_now:
                    self._disputed[noted[0]] = weakref.ref(slot)
            if planner.settled:
                self._evict_settled()
            # What its rules read: a tracked input by its node's key, an untracked one by its
            # constant's (or, too large to back up, held under a key of its own).
            for i in recipe.saved_inputs:
                parent, value = parents[i], inputs[i].value
                if parent is not None:
                    key, slot = parent.id, self._slot_of(parent, value)
                elif i in constants:
                    key, slot = constants[i].id, constants[i]
                else:
                    key, slot = new_node_id(), Slot(value, nbytes_of(value), 0.0, (), False)
                    self.pool.hold(slot)
                    self.recorder.note_constant(key, slot.nbytes, False)
                keys += (key,)
                actions.append((key, slot, False))
            if recipe.save_out:
                keys += (node.id,)
                actions.append((node.id, self._slot_of(node, out), False))
            saved.keys = keys
            saved.actions = actions or None
            pool, limit = self.pool, planner.limit
            if timer.improved is not None:  # the values priced at a slower run of this op
                self.evictor.reprice(*timer.improved)
                timer.improved = None
            if pool.held_bytes > limit:
                self.evictor.evict_until(pool, limit)
            if pool.held_bytes > pool.peak:  # MemoryPool.note_peak, inlined
                pool.peak = pool.held_bytes
            timer.tick = perf_counter()  # OpTimer.restart, inlined: the next op's time starts
        return saved

    def _replayed(self, position: int, seconds: float) -> tuple:
        """The timer's key of the replayed value at ``position``, priced ``seconds`` by its
        plan; the held values of the same key priced higher are repriced, as
        :meth:`.Evictor.reprice` repriced them in the eager step the replay copies (whose
        prices, the fastest run so far of each op as it went, fall within the step)."""
        values = self.planner.plan.values
        if values is None or position >= len(values):
            return ()
        prices = self._replay_prices
        key = values[position].priced_as
        lowest = prices.get(key)
        if lowest is None or seconds < lowest:
            prices[key] = seconds
            if lowest is not None and seconds * REPRICE_FACTOR <= lowest:
                self.evictor.reprice(key, seconds)
        return key

    def _abandon(self, step: Any) -> None:
        """``step`` (a :class:`~.recorder.RecordedStep`) ran no backward and the next step has
        begun (:meth:`.Planner.starts_again`): it is not traced further, and the values it
        holds, which its plan kept for a backward that may never come, may be evicted for the
        new step's budget (its graph lives on, and a backward through it recomputes them)."""
        before = {id(slot) for ref, _, _ in step.held_before if (slot := ref()) is not None}
        self.pool.unpin(before)
        self.planner.after_abandoned = True

    def _step_starts(self) -> None:
        """A step's first value is recorded: its forward's peak counts from what is held now.
        The peak was reset when the last backward ended, to what was held then; what the
        last step's graph still held there (a gradient penalty's values its second backward
        did not walk, the rest of a retained graph) was freed with the graph, but counted in
        this step's forward peak: a planned step's peak followed the plan of the step before
        it (a penalty's ``autograd.grad`` walk held 1,229 or 1,453 bytes by turns).
        What is held now (a retained graph's values, after its backward) is noted with the
        step: its plan counts what of it its backward does not read
        (:func:`~.recorder._held_before_unread`)."""
        self._replay_prices.clear()
        self.pool.take_peak()
        if self.pool.held_bytes:
            self.recorder.note_held_before(self.pool.held_slots())

    def _evict_settled(self) -> None:
        """Evict the disputed values the plans still matched now all evict."""
        disputed, pool = self._disputed, self.pool
        for position in self.planner.settled:
            ref = disputed.pop(position, None)
            slot = None if ref is None else ref()
            if slot is not None:
                slot.planned = True  # stays evicted when read again
                pool.drop(slot)
        self.planner.settled.clear()

    def _constants_of(
        self, node: Any, inputs: tuple, recipe: Any, out_bytes: int, recomputable: bool
    ) -> dict[int, Constant]:
        """The :class:`~.pool.Constant` of each untracked input (by input index) that is
        backed up or read by a rule.

        One copy per primitive, whatever the number of consumers; the size rule is
        :func:`backs_up`."""
        parents = node.parents
        if None not in parents:
            return {}
        constants: dict[int, Constant] = {}
        held = self._constants
        for i, parent in enumerate(parents):
            if parent is not None:
                continue
            value = inputs[i].value
            constant = held.get(id(value))
            if constant is not None and constant.value is not value:
                constant = None  # another primitive now lives at that address
            if constant is None:
                nbytes = nbytes_of(value)
                if not recomputable and i not in recipe.saved_inputs:
                    continue
                if not backs_up(nbytes, out_bytes, i in recipe.saved_inputs):
                    continue
                constant = held[id(value)] = Constant(new_node_id(), value, nbytes)
                self.pool.hold(constant)
            self.recorder.note_constant(constant.id, constant.nbytes, recomputable, node.id)
            constants[i] = constant
        return constants

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
        elif slot.planned is None and slot.value is not RECOMPUTE:
            # used again: evicted later among its tier (a slot a followed plan decides on is
            # no candidate)
            self.evictor.touch(slot)
        return slot

    # -- backward -------------------------------------------------------------------------------
    def begin_backward(
        self, tape: Any, inner: Any, consume: bool
    ) -> Checkpointer | HeldCheckpointer:
        """The step just recorded ends: the planner plans the next ones from it, unless it
        followed the current plan; then the checkpointer of its backward, as the plan assumed
        or as after an eager step."""
        try:
            return self._checkpointer_for(tape, inner, consume)
        except BaseException:
            self.backward_interrupted()
            raise

    def backward_interrupted(self) -> None:
        """A backward stopped before its checkpointer existed (an interrupt while its graph
        was walked, or anything raised in :meth:`begin_backward`): its step is dropped as a
        failed backward's (:meth:`.Planner.backward_failed`), with what it recorded.
        Otherwise the next step's forward was recorded as the rest of this one, or the
        planner waited on the end of a backward that never ran: a loop interrupted there
        planned a graph of two forwards, and its next step held 1.3x the budget."""
        with self._lock:
            self.recorder.take()
            self.planner.backward_failed()
            self.planner.settled.clear()
            self._disputed.clear()

    def _checkpointer_for(
        self, tape: Any, inner: Any, consume: bool
    ) -> Checkpointer | HeldCheckpointer:
        with self._lock:
            forward_peak = self.pool.take_peak()
            walk = self.planner.walk
            self.timer.pause()  # backward runs before the next op: not that op's time
            planned = self.planner.backward_begins(
                self.recorder.take(), tape.steps, self.timer.fastest, retained=not consume
            )
            if self.planner.walk > walk:
                # a later walk of a retained graph: no forward ran since the walk before, and
                # a walk counts what it reads (as under NoCheckpointing), not all the graph holds
                forward_peak = 0
            if self.planner.settled:  # the step's own plan evicts what it held in dispute
                self._evict_settled()
            self._disputed.clear()
        nodes = self.tree_of(tape)
        builder = BudgetCheckpointerBuilder(nodes, consume)
        try:
            checkpointer = self._checkpointer(builder, planned, tape, inner, nodes, forward_peak)
        except BaseException:
            builder.give_back()
            raise
        # (its checkpointer keeps no ``taken``: the records hold slots, which let go of their
        # values below, so a backward that stops mid-way cannot hand them back to its steps)
        if builder.slots is not None:  # the checkpointer alone holds the values from now on
            builder.leave_backups(tape.run)
            with self._lock:
                self.pool.release(builder.slots)
        return checkpointer

    def _checkpointer(
        self, builder: Any, planned: Any, tape: Any, inner: Any, nodes: dict, forward_peak: int
    ) -> Checkpointer | HeldCheckpointer:
        """The checkpointer of the backward of ``builder``'s values: as the plan ``planned``
        (its byte limit and mode, or ``None``) assumed, or as after an eager step."""
        if planned is not None and planned[1] == FITS and not builder.recomputed:
            # a plan that evicts nothing this backward reads: every value is held, as under
            # NoCheckpointing, and its peak is what forward held
            peak = max(forward_peak, builder.activation_bytes())
            return HeldCheckpointer(builder.held(), builder.reads, peak, self._backward_ended)
        sizes = builder.sizes()
        if planned is not None and planned[1] == FITS:
            # as the plan assumed, which fits: each evicted value recomputed once and kept to
            # its last read, nothing dropped (a miss is re-planned when the backward ends)
            states = builder.states(builder.count_reads())
            start_peak = max(forward_peak, sum(sizes.values()))
            return PlannedCheckpointer(
                states, nodes, inner, sizes, KeepByProducts(), start_peak, self._backward_ended
            )
        needs = builder.needs_in_order(tape.steps)
        states = builder.states({key: len(times) for key, times in needs.items()})
        reserved: set[int] = set()
        if planned is None:  # as after an eager step
            kind, budget = ReservingBudgetCheckpointer, self.max_bytes
            by_products: Any = SqrtAnchors.for_graph(builder.recomputable)
            reserved = builder.reserve(states, needs)
        elif planned[1] in (FLOOR, ANCHORED):  # as the plan assumed, dropping if it holds more
            kind, budget = BudgetCheckpointer, planned[0]
            by_products = KeepByProducts()
        else:  # a replay of the eager step (under the floor): from √n anchors, dropping
            kind, budget = ReservingBudgetCheckpointer, self.max_bytes
            by_products = SqrtAnchors.for_graph(builder.recomputable)
            reserved = builder.reserve(states, needs)
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

    def tree_of(self, tape: Any) -> dict[int, Any]:
        """The walked graph, a node with backed-up untracked inputs seen as
        :class:`_Sourced` (the engine's own nodes keep ``None`` for untracked parents)."""
        return _with_sources(tape.nodes)

    def _backward_ended(self, report: Any) -> None:
        """A backward's report, or ``None``: it stopped before its end (see
        :meth:`.Planner.backward_failed`)."""
        with self._lock:
            if report is None:
                self.planner.backward_failed()
            else:
                self.planner.backward_ended(report.peak_bytes)
            self.pool.take_peak()  # the next step's forward peak starts from what is held now


class _Sourced:
    """A node as a recomputation under a budget sees it: its parents with each backed-up
    untracked input in place (:class:`~.pool.Constant`), the rest the node's own."""

    __slots__ = ("id", "op", "params", "parents", "saved")

    def __init__(self, node: Any, sources: tuple):
        self.id = node.id
        self.op = node.op
        self.params = node.params
        self.parents = sources
        self.saved = node.saved


def _with_sources(nodes: dict[int, Any]) -> dict[int, Any]:
    """``nodes``, with each node that has backed-up untracked inputs as :class:`_Sourced`
    (in a copy; ``nodes`` itself when there is none)."""
    tree = None
    for key, node in nodes.items():
        saved = node.saved
        if type(saved) is BudgetSaved and saved.sources is not None:
            if tree is None:
                tree = dict(nodes)
            tree[key] = _Sourced(node, saved.sources)
    return nodes if tree is None else tree
