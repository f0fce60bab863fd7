"""The trace of the step being recorded, for planning the steps that follow (:mod:`.plan`).

Every node recorded under a budget is noted in order: its signature (op, output bytes, the
positions of its recorded parents), which a later step must match to follow a plan; its
bytes, its op's measured time, its parents, whether it can be recomputed, and the value whose
buffer it shares. When backward starts, :meth:`RecordedStep.observe` adds what only backward
knows: the step at which each value is read, and how long each gradient lives.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

from ..state import RECOMPUTE
from .flops import op_flops
from .plan import PLAN_LIMIT, Trace
from .pool import Constant

__all__ = ["RecordedStep", "RecordedValue", "TraceRecorder", "walked"]


class RecordedValue(NamedTuple):
    """One node of the step being recorded, as the plan for the next steps sees it."""

    #: (op name, output bytes, parent positions): what a later step must match
    signature: tuple
    nbytes: int
    #: its op's measured seconds; ``None`` while a plan was followed, which priced it (see
    #: :meth:`RecordedStep.observe`)
    seconds: float | None
    #: what its op is priced by (the timer's key of the op and its sizes)
    priced_as: tuple
    #: positions of its recorded parents
    parents: tuple[int, ...]
    #: whether it can be recomputed from its parents
    recomputable: bool
    #: position of the value whose buffer it shares (a view of a parent), or its own
    owner: int


class RecordedStep(NamedTuple):
    """A whole recorded step: its values in order (a ``None`` last when it grew past
    :data:`~.plan.PLAN_LIMIT`), node id -> position, and key -> (bytes, backed up) of the
    untracked values held; key -> the node ids of the consumers each backed-up one is held
    for (``None`` for a step recorded before they were noted); what was held for backward
    when its first value was recorded (:meth:`TraceRecorder.note_held_before`)."""

    values: list
    positions: dict[int, int]
    constants: dict[int, tuple[int, bool]]
    consumers: dict[int, list[int]] | None = None
    held_before: tuple = ()

    def plannable(self) -> bool:
        return 0 < len(self.values) <= PLAN_LIMIT

    def observe(
        self,
        steps: list,
        fastest: Callable[[tuple, float], float] | None = None,
        planned: list | None = None,
        walks: tuple[int, ...] = (),
    ) -> tuple[list, Trace]:
        """The values (each with its price) and the :class:`~.plan.Trace` to plan from, given the
        backward's ``steps`` (its nodes in the order it runs them); each value priced by
        ``fastest(priced_as, seconds)`` when given (the timer's fastest time of its op), else
        at its own measured seconds. A value recorded while a plan was followed (not timed:
        its ``seconds`` is ``None``) is priced as that plan priced it (``planned``, by
        position).

        Besides the values a plan decides on, the trace holds the gradients in flight (a
        node's gradient lives from its first child's step to its own) and the untracked values
        rules read: the budget is then the real peak of the step.

        ``walks``: where each later walk of a retained graph starts in ``steps`` (the steps of
        every ``backward(retain_graph=True)`` of the step and of the backward calls that walk
        its graph again, in turn, as :func:`walked` keeps them). The plan profiles each walk
        as the engine runs it, a backward of its own that counts what it reads and
        recomputes what it needs afresh (:meth:`~.plan.Trace.walk_traces`).

        A backed-up untracked value is counted until the backward step of its last consumer
        (``consumers``), or its last read by a rule if later: no step needs to recompute a
        consumer after the consumer's own step."""
        values, positions, constants, consumers, held_before = self
        if planned is not None:
            values = [
                value if value.seconds is not None else value._replace(seconds=planned[at])
                for at, value in enumerate(values)
            ]
        n = len(values)
        reads: list[list[int]] = [[] for _ in range(n)]
        grad_start: dict[int, int] = {}
        fixed: list[tuple[int, int, int]] = []
        gradients: list[tuple[int, int, int]] = []
        constant_reads: dict[int, int] = {}
        # values of an earlier trace that this backward reads (the graph of a gradient taken
        # with create_graph, which a gradient penalty differentiates again): held, or
        # recomputed, beside this step's own values until their last read
        earlier = _earlier_values(steps, positions)
        earlier_reads: dict[int, int] = {}
        for step, node in enumerate(steps):
            position = positions.get(node.id)
            if position is not None and position in grad_start:
                gradients.append((values[position].nbytes, grad_start.pop(position), step))
            if node.op is None:
                continue
            for parent in node.parents:
                if parent is not None:
                    at = positions.get(parent.id)
                    if at is not None and at not in grad_start:
                        grad_start[at] = step
            for key in node.saved.keys:
                position = positions.get(key)
                if position is not None:
                    reads[position].append(step)
                elif key in constants:
                    constant_reads[key] = step
                elif key in earlier:
                    earlier_reads[key] = step
        horizon = len(steps)
        # A backed-up constant is needed, at the latest, to recompute a consumer, which no
        # backward step needs once the consumer's own step has run (every reader of its
        # output is a child, whose step comes first): counted until then, not to backward's
        # end (a dropout mask, the labels, a regression target: the engine lets them go
        # there). A consumer the backward does not walk keeps it to the end.
        step_of = {node.id: step for step, node in enumerate(steps)}
        backup_ends: dict[int, int] = {}
        for key, nodes in (consumers or {}).items():
            if nodes and all(node in step_of for node in nodes):
                backup_ends[key] = max(step_of[node] for node in nodes)
        # A value that cannot be recomputed but backs up one that can is held through forward,
        # read or not (backward lets it go when it starts, unless a recomputation needs it).
        for value in values:
            if value.recomputable:
                for p in value.parents:
                    if not values[p].recomputable and not reads[p]:
                        reads[p].append(0)
        fixed.extend(
            (
                nbytes,
                0,
                max(backup_ends.get(key, horizon), constant_reads.get(key, 0))
                if backup
                else constant_reads[key],
            )
            for key, (nbytes, backup) in constants.items()
            if backup or key in constant_reads
        )
        fixed.extend((earlier[key], 0, step) for key, step in earlier_reads.items())
        before = _held_before_unread(held_before, steps, positions, constants, earlier_reads)
        if before:  # held through forward, which the engine counts, and let go after it
            fixed.append((before, 0, 0))
        trace = Trace(
            sizes=[value.nbytes for value in values],
            costs=[
                value.seconds if fastest is None else fastest(value.priced_as, value.seconds)
                for value in values
            ],
            parents=[value.parents for value in values],
            recomputable=[value.recomputable for value in values],
            reads=reads,
            owners=[value.owner for value in values],
            fixed=fixed,
            gradients=gradients,
            horizon=horizon,
            walks=walks,
            flops=[  # a view shares its parent's buffer: no op ran for it
                0.0 if value.owner != at else op_flops(value.priced_as, value.nbytes)
                for at, value in enumerate(values)
            ],
        )
        return values, trace


_new_value = tuple.__new__


class _Walked:
    """A walked node as :meth:`RecordedStep.observe` reads it, without its values: what a
    retained graph's walk leaves for the plan while the graph walks again (holding the nodes
    themselves would keep the graph alive)."""

    __slots__ = ("id", "op", "parents", "saved")

    def __init__(self, node_id: int, op: Any, parents: tuple, saved: Any):
        self.id, self.op, self.parents, self.saved = node_id, op, parents, saved


class _WalkedSaved(NamedTuple):
    keys: tuple
    slot: Any


class _Size(NamedTuple):
    """A slot as :func:`_earlier_values` reads it: its bytes, and the slot's identity (see
    :func:`_held_before_unread`)."""

    nbytes: int
    ident: int


def walked(steps: list) -> list[_Walked]:
    """``steps`` (a backward's nodes in order) as :meth:`RecordedStep.observe` reads them,
    holding no node and no value."""
    light = []
    for node in steps:
        if node.op is None:
            light.append(_Walked(node.id, None, (), None))
            continue
        slot = getattr(node.saved, "slot", None)
        parents = tuple(None if p is None else _Walked(p.id, None, (), None) for p in node.parents)
        saved = _WalkedSaved(
            node.saved.keys, None if slot is None else _Size(slot.nbytes, id(slot))
        )
        light.append(_Walked(node.id, node.op, parents, saved))
    return light


def _earlier_values(steps: list, positions: dict[int, int]) -> dict[int, int]:
    """Key -> bytes of the values held for ``steps`` that the recorded step did not make
    (nodes of a graph recorded before it, which its backward walks again): their outputs,
    and the untracked values their rules read (:func:`_earlier_constants`)."""
    earlier = {}
    for node in steps:
        if node.id in positions:
            continue
        slot = getattr(node.saved, "slot", None)
        if slot is not None:
            earlier[node.id] = slot.nbytes
        earlier.update(_earlier_constants(node.saved))
    return earlier


def _earlier_constants(saved: Any) -> dict[int, int]:
    """Key -> bytes of the untracked values (:class:`~.pool.Constant`: an input batch, a
    mask) that an earlier graph's node holds for its rules. A backward that walks that graph
    again reads them, and the engine counts them: a second head's loss built after the first
    head's ``backward(retain_graph=True)`` walks the trunk again, whose matmul reads the
    input batch; the plan, counting the trunk's outputs alone, predicted 256 bytes of the
    512 its steps held, and re-planned every step for nothing."""
    return {
        key: slot.nbytes
        for key, slot, is_backup in getattr(saved, "actions", None) or ()
        if not is_backup and type(slot) is Constant
    }


def _held_before_unread(
    held_before: tuple, steps: list, positions: dict, constants: dict, earlier_reads: dict
) -> int:
    """Bytes of what was held for backward when the step's first value was recorded
    (``held_before``: ``(weak reference to the slot, constant key or None, bytes)``) and is
    still held as its backward starts, that its trace counts nowhere else: neither a value
    of an earlier graph its backward reads (``earlier_reads``, by key) nor an untracked value
    of its own (``constants``).

    A graph recorded after a retained backward (a second head's loss built after the first
    head's ``backward(retain_graph=True)``, a gradient penalty's ``total`` after its
    ``autograd.grad(..., create_graph=True)``) starts with the retained graph's values held,
    and the engine counts them in the step's forward peak, read by its backward or not
    (:meth:`~.strategy.BudgetCheckpointing._step_starts`). Its plan counted only those its
    backward reads: round 67's random program 1 at 2x of its peak, a late head, held 4,317
    bytes where its plan counted 1,024, and was re-planned for nothing. One let go during
    forward (a critic's output graph, dropped once ``autograd.grad`` took its slope) is not
    counted: held only at the forward's start, it added 256 bytes to a critic step's
    prediction of the 1,776 it held."""
    if not held_before:
        return 0
    counted = set()
    for node in steps:
        if node.id in earlier_reads and node.id not in positions:
            slot = getattr(node.saved, "slot", None)
            if slot is not None:
                counted.add(slot.ident if type(slot) is _Size else id(slot))
    found = 0
    for ref, key, nbytes in held_before:
        slot = ref()
        if slot is None or slot.value is RECOMPUTE or key in constants or key in earlier_reads:
            continue
        if id(slot) not in counted:
            found += nbytes
    return found


def _gone() -> None:
    """A dead reference (before the first node of a step)."""
    return None


class TraceRecorder:
    """Notes each node recorded under the budget until the step's backward starts, or until
    the step's graph is dropped without one."""

    def __init__(self) -> None:
        self._values: list = []
        self._positions: dict[int, int] = {}
        self._constants: dict[int, tuple[int, bool]] = {}
        self._consumers: dict[int, list[int]] = {}
        #: the step's first node: once it is gone, so is the step's graph (dropped without a
        #: backward, as an evaluation without gradients would be), and the next node starts
        #: a new step
        self._first: weakref.ref = _gone
        self._held_before: tuple = ()

    def note(
        self,
        node: Any,
        inputs: tuple,
        out: Any,
        out_bytes: int,
        seconds: float,
        recompute: bool,
        priced_as: tuple = (),
    ) -> tuple[int, tuple] | None:
        """Note ``node``: its position in the step and its signature, or ``None`` once the
        step is too long to plan (it is then not traced any further)."""
        values = self._values
        if values and self._first() is None:  # the step's graph was dropped: a new step
            self.take()
            values = self._values
        position = len(values)
        if position == 0:
            self._first = weakref.ref(node)
        if position >= PLAN_LIMIT:  # too large to plan (or no backward for a long time)
            if position == PLAN_LIMIT:
                self._positions.clear()
                self._constants.clear()
                self._consumers.clear()
                values.append(None)
            return None
        positions = self._positions
        at_of = []  # a loop, not a comprehension: a comprehension costs a frame
        for p in node.parents:
            at_of.append(-1 if p is None else positions.get(p.id, -1))
        parents = tuple(at_of)
        signature = (node.op.name, out_bytes, parents)
        # A view of an input shares its buffer (NumPy's ``base``): the plan counts it once.
        owner = position
        base = getattr(out, "base", None)
        if base is not None:
            for at, x in zip(parents, inputs):
                value = x.value
                if at >= 0 and (value is base or getattr(value, "base", None) is base):
                    owner = values[at].owner
                    break
        recorded = parents if -1 not in parents else tuple([p for p in parents if p >= 0])
        values.append(  # the tuple itself: a NamedTuple's __new__ would cost a frame
            _new_value(
                RecordedValue,
                (signature, out_bytes, seconds, priced_as, recorded, recompute, owner),
            )
        )
        positions[node.id] = position
        return position, signature

    def note_followed(
        self, node: Any, inputs: tuple, out: Any, out_bytes: int, recompute: bool, plan: list
    ) -> tuple[int, tuple] | None:
        """:meth:`note` for a step that follows a plan made from the recorded values ``plan``:
        a node that matches the plan's value at its position is noted as that value (nothing
        to build: the plan's trace already knows it, priced as it was); any other is noted
        afresh, not timed (see :meth:`reprice_last`)."""
        values = self._values
        position = len(values)
        if position and position < len(plan) and self._first() is not None:
            expected = plan[position]
            signature = expected.signature
            if signature[0] == node.op.name and signature[1] == out_bytes:
                positions = self._positions
                at_of = []
                for p in node.parents:
                    at_of.append(-1 if p is None else positions.get(p.id, -1))
                if signature[2] == tuple(at_of):
                    values.append(expected)
                    positions[node.id] = position
                    return position, signature
        return self.note(node, inputs, out, out_bytes, None, recompute)

    def reprice_last(self, seconds: float, priced_as: tuple) -> None:
        """The value noted last was timed after all (``seconds``, the timer's key
        ``priced_as``): the plan it was noted under was left at it."""
        values = self._values
        values[-1] = values[-1]._replace(seconds=seconds, priced_as=priced_as)

    def note_constant(
        self, key: int, nbytes: int, backup: bool, consumer: int | None = None
    ) -> None:
        """An untracked value held under ``key``: read by a rule, or backed up (``backup``)
        for a recomputation of its consumer (the node ``consumer``), which may come at any
        backward step up to the consumer's own."""
        if len(self._values) <= PLAN_LIMIT:
            held = self._constants.get(key)
            self._constants[key] = (nbytes, backup or (held is not None and held[1]))
            if backup and consumer is not None:
                self._consumers.setdefault(key, []).append(consumer)

    def note_held_before(self, held: tuple) -> None:
        """What was held for backward as the step's first value was recorded: ``(weak
        reference to the slot, constant key or None, bytes)`` per slot (see
        :func:`_held_before_unread`)."""
        self._held_before = held

    def take(self) -> RecordedStep:
        """The step recorded so far; the next starts empty."""
        step = RecordedStep(
            self._values, self._positions, self._constants, self._consumers, self._held_before
        )
        self._values, self._positions, self._constants, self._consumers = [], {}, {}, {}
        self._held_before = ()
        return step
