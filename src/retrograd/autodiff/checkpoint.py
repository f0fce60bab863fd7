"""Checkpointing, as Burn does it: which outputs are kept for backward, which are recomputed.

During forward every recorded op leaves *actions* on its node, ``(key, value, backup)``:

- a *main* action for each value its backward rule will read: the value itself when the node
  that made it is kept (``Computed``), or ``RECOMPUTE`` when that node's output is recomputed
  and the reading op is itself recomputable (a compute-bound op keeps the inputs it reads,
  which bounds every recomputation at the nearest compute-bound op; see docs/checkpointing.md);
- under a strategy that recomputes an op, *backup* actions for each of its parents, so that
  its output can be recomputed later if anyone needs it.

Under :class:`BudgetCheckpointing` an action's value is a :class:`Slot` shared by every action
that holds the same node's output, so evicting the value during forward is one assignment.

At backward, :class:`CheckpointerBuilder` gathers the actions of the nodes the backward walks,
counts how many times each value will be read (walking up from every recomputed value to the
kept values it is recomputed from), drops every backup nobody needs, and builds a
:class:`Checkpointer`. Its :meth:`Checkpointer.retrieve` hands a value out, recomputing missing
ancestors first in topological order, and forgets each value right after its last read.
Recomputation is linear in the number of ops under every strategy (:meth:`Checkpointer._recompute`
keeps √n anchors of a long recomputation), and stays under a byte budget when there is one
(dropping the value read furthest ahead: backward's order of reads is known when it starts).
"""

from __future__ import annotations

import bisect
import heapq
import math
import os
import re
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, NamedTuple

from ..errors import AutodiffError
from .plan import PLAN_LIMIT, Trace, plan_evictions

__all__ = [
    "RECOMPUTE",
    "BalancedCheckpointing",
    "BudgetCheckpointing",
    "CheckpointStrategy",
    "Checkpointer",
    "CheckpointerBuilder",
    "NoCheckpointing",
    "Slot",
    "parse_bytes",
]


class _Recompute:
    __slots__ = ()

    def __repr__(self) -> str:
        return "RECOMPUTE"


#: Marks an action (or a state) whose value must be recomputed from the node's parents.
RECOMPUTE = _Recompute()


def nbytes_of(value: Any) -> int:
    """Bytes of an inner primitive (NumPy arrays and torch tensors both have ``nbytes``)."""
    return getattr(value, "nbytes", 0)


class CheckpointStrategy:
    """Decides, per op, whether its output is recomputed during backward instead of kept.

    Subclass it and override :meth:`recomputes`; ``op`` is the
    :class:`~retrograd.autodiff.ops.Op` being recorded (``op.name``, ``op.memory_bound``).
    Whatever it answers, an op with an untracked parent is kept (its output could not be
    recomputed from the graph), and gradients do not change, only memory and time.

    A strategy that must see every value held for backward (a memory budget) also defines
    ``track(node, inputs, out)``; the autodiff backend then calls it for every node it records.

    >>> class RecomputeActivations(CheckpointStrategy):
    ...     def recomputes(self, op):
    ...         return op.name in ("relu", "gelu", "sigmoid")
    """

    #: the byte budget backward recomputes under (``None``: no budget)
    max_bytes: int | None = None
    #: ``track(node, inputs, out)``, called for every recorded node, or ``None``
    track = None

    def recomputes(self, op: Any) -> bool:
        raise NotImplementedError

    def forward_peak(self) -> int:
        """Bytes held at the worst moment of forward since the last call (0: not tracked)."""
        return 0

    def begin_backward(self, steps: list) -> int | None:
        """Called when a backward starts, with its nodes in the order it runs them. When the
        forward followed a plan made for it: the byte limit the backward keeps to (the
        checkpointer then keeps what it recomputes until its last read, as the plan
        assumed); otherwise ``None``."""
        return None

    def end_backward(self, peak_bytes: int) -> None:
        """Called when a backward ends, with the most bytes it held."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


class NoCheckpointing(CheckpointStrategy):
    """Every needed intermediate output is kept (Burn treats every op as compute-bound)."""

    def recomputes(self, op: Any) -> bool:
        return False


class BalancedCheckpointing(CheckpointStrategy):
    """Outputs of memory-bound ops are recomputed during backward; compute-bound ones kept.

    A memory-bound output that a compute-bound op reads in its backward rule (the input of a
    matmul, say) is kept too: recomputing it could mean recomputing a whole residual stream.
    """

    def recomputes(self, op: Any) -> bool:
        return op.memory_bound


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


class Slot:
    """A value held for backward under :class:`BudgetCheckpointing`: ``value`` is the inner
    primitive, or ``RECOMPUTE`` once evicted. Every action holding the node's output shares
    the slot; when the last of them goes (backward consumed them, or the graph was freed),
    the pool forgets the slot."""

    __slots__ = (
        "__weakref__",
        "cost",
        "evictable",
        "nbytes",
        "parents",
        "planned",
        "value",
    )

    def __init__(self, value: Any, nbytes: int, cost: float, parents: tuple, evictable: bool):
        self.value = value
        self.nbytes = nbytes
        self.cost = cost
        #: the parents' slots, for the cost of an evictable slot's evicted neighbourhood (a
        #: slot never refers to its node: node.slot -> slot -> node would be a cycle, and
        #: graphs must be freed by reference counting alone)
        self.parents = parents
        self.evictable = evictable
        #: the step's plan for it: evicted at once (``True``: stays evicted even when read
        #: again in forward), kept (``False``: held even when only backed up), or ``None``
        self.planned: bool | None = None


class _Recorded(NamedTuple):
    """One node of the step being recorded, as the plan for the next steps sees it."""

    #: (op name, output bytes, parent positions): what a later step must match
    signature: tuple
    nbytes: int
    #: its op's measured seconds
    seconds: float
    #: positions of its recorded parents
    parents: tuple[int, ...]
    #: whether it can be recomputed from its parents
    recomputable: bool
    #: position of the value whose buffer it shares (a view of a parent), or its own
    owner: int


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
    read furthest in the future per unit of recompute cost (see :class:`Checkpointer`).

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

    def __init__(self, max_bytes: int | str):
        self.max_bytes = parse_bytes(max_bytes)
        # reentrant: a slot freed by the garbage collector during track() calls back in
        self._lock = threading.RLock()
        #: id(slot) -> weak reference, for every live slot whose bytes count
        self._held: dict[int, weakref.ref] = {}
        #: price tier -> id(slot) -> weak reference: the held slots that may be evicted, by
        #: tier of recompute seconds per byte, least recently used first within a tier
        self._tiers: dict[int, OrderedDict[int, weakref.ref]] = {}
        #: id(slot) -> its tier, for the held evictable slots
        self._tier_of: dict[int, int] = {}
        #: (op name, output bytes, input bytes) -> fastest run seen: a training loop reruns the
        #: same ops, so the minimum over steps filters out pauses and noise
        self._seconds: dict[tuple, float] = {}
        self._tick = time.perf_counter()
        self.held_bytes = 0
        self._peak = 0
        #: values evicted during forward, all time (for reports and tests)
        self.evictions = 0
        # The step being recorded, for planning the next ones (see plan.py): each recorded
        # node in order; node id -> position; key -> bytes of the untracked values rules read.
        self._trace: list[_Recorded] = []
        self._positions: dict[int, int] = {}
        self._constants: dict[int, int] = {}
        #: the plan for the step: signature of every node, whether it is evicted at once,
        #: and the bytes held the engine may count while following it (see _make_plan)
        self._plan: tuple[list, list[bool], int] | None = None
        #: this step has matched the plan so far
        self._following = False
        #: what the next step plans from (see begin_backward)
        self._pending: tuple | None = None
        #: forward evicts above this many bytes (the budget, or a followed plan's count)
        self._limit = self.max_bytes
        #: backward runs as the plan assumed (see end_backward); the step now checks that
        self._plan_backward = True
        self._checking = False
        #: the peak of the last backward run as after an eager step (``None``: none yet)
        self._eager_peak: int | None = None
        #: plans made, and steps that followed one (for reports and tests)
        self.plans = 0
        self.planned_steps = 0

    def recomputes(self, op: Any) -> bool:
        return False  # everything is kept at first; eviction decides later

    def __repr__(self) -> str:
        return f"BudgetCheckpointing({self.max_bytes})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.max_bytes == other.max_bytes

    def __hash__(self) -> int:
        return hash((type(self), self.max_bytes))

    def forward_peak(self) -> int:
        with self._lock:
            peak, self._peak = self._peak, self.held_bytes
            # backward runs before the next op: that op's measured time would include it
            self._tick = math.inf
        return peak

    def begin_backward(self, steps: list) -> int | None:
        """The step just recorded ends: plan the next ones from it, unless it followed the
        current plan (then the byte limit of its backward). See :mod:`.plan`."""
        with self._lock:
            trace, positions, constants = self._trace, self._positions, self._constants
            plan = self._plan
            followed = self._following and plan is not None and len(trace) == len(plan[0])
            self._trace, self._positions, self._constants = [], {}, {}
            if not followed and 0 < len(trace) <= PLAN_LIMIT:
                # planned when the next step starts: a single step never pays for it
                self._pending = self._observe(trace, positions, constants, steps)
                plan = self._plan = None
            self._following = plan is not None
            self._limit = plan[2] if plan is not None else self.max_bytes
            self._checking = False
            if not followed:
                return None
            self.planned_steps += 1
            if not self._plan_backward:
                return None  # backward as after an eager step (see end_backward)
            self._checking = True
            return self._limit

    def end_backward(self, peak_bytes: int) -> None:
        """A plan that does not fit leaves backward to drop values for the budget, which it
        can only do for values whose parents it still holds; when that fails (the budget
        passed by more than a tenth) and an eager step's backward held less, later steps keep
        the plan's forward but run backward as after an eager step, reserving parents so that
        everything stays droppable. (Where the budget is out of reach, the eager backward can
        hold more than the plan's: then the plan's stays, the lower of the two.)"""
        with self._lock:
            if not self._checking:
                self._eager_peak = peak_bytes
            elif peak_bytes > 1.1 * self._limit and (
                self._eager_peak is None or peak_bytes > self._eager_peak
            ):
                self._plan_backward = False
            self._checking = False

    def _observe(self, trace: list, positions: dict, constants: dict, steps: list) -> tuple:
        """What the plan for the steps to come needs from this one: its signatures and
        :class:`~.plan.Trace` (sizes, times, parents, and the step of every read).

        Besides the values a plan decides on, the profile holds the gradients in flight
        (a node's gradient lives from its first child's step to its own) and the untracked
        values rules read: the budget is then the real peak of the step, temporaries of
        the op at the peak included (room for one largest value is left for them). A plan
        that fits lets the engine count what it plans (the engine counts a view apart from
        what it views); one that does not is enforced at the budget by backward's drops."""
        n = len(trace)
        reads: list[list[int]] = [[] for _ in range(n)]
        grad_start: dict[int, int] = {}
        fixed: list[tuple[int, int, int]] = []
        constant_reads: dict[int, int] = {}
        for step, node in enumerate(steps):
            position = positions.get(node.id)
            if position is not None and position in grad_start:
                fixed.append((trace[position].nbytes, grad_start.pop(position), step))
            if node.op is None:
                continue
            for parent in node.parents:
                if parent is not None:
                    at = positions.get(parent.id)
                    if at is not None and at not in grad_start:
                        grad_start[at] = step
            for key in node.keys:
                position = positions.get(key)
                if position is not None:
                    reads[position].append(step)
                elif key in constants:
                    constant_reads[key] = step
        fixed.extend((constants[key], 0, step) for key, step in constant_reads.items())
        planned = Trace(
            sizes=[entry.nbytes for entry in trace],
            costs=[entry.seconds for entry in trace],
            parents=[entry.parents for entry in trace],
            recomputable=[entry.recomputable for entry in trace],
            reads=reads,
            owners=[entry.owner for entry in trace],
            fixed=fixed,
            horizon=len(steps),
        )
        return [entry.signature for entry in trace], planned

    def _make_plan(self, signatures: list, planned: Trace) -> tuple:
        """The plan: the signatures to match, which values to evict, the byte limit."""
        budget = self.max_bytes
        evict, planned_profile, counted = plan_evictions(planned, budget)
        self.plans += 1
        # A plan that fits lets the engine count what it plans. One that does not leaves
        # backward to keep the budget by dropping values, the engine's count of activations
        # then being all it sees: it leaves room for the temporaries of the op running at
        # the worst moment (a backward rule's intermediate results, about one largest value).
        if planned_profile.peak <= budget:
            limit = max(budget, counted)
        else:
            largest = max(planned.sizes, default=0)
            limit = budget - largest if 4 * largest <= budget else budget
        # backward as planned first; end_backward compares it with an eager step's
        self._plan_backward = True
        return signatures, evict, limit

    # -- the pool ---------------------------------------------------------------------------------
    def _forget(self, ident: int, nbytes: int) -> Any:
        """Called when a slot dies: its bytes (if still held) stop counting."""

        def callback(_ref: Any) -> None:
            with self._lock:
                if self._held.pop(ident, None) is not None:
                    self.held_bytes -= nbytes
                tier = self._tier_of.pop(ident, None)
                if tier is not None:
                    del self._tiers[tier][ident]

        return callback

    def _slot_of(self, node: Any, value: Any, read: bool = True) -> Slot:
        """The slot of ``node``'s output. A rule reading it (``read``) holds ``value`` in it;
        a mere backup of a recomputable parent leaves it evicted, so that backups cost no
        memory NoCheckpointing would not spend (the parent's own backups recompute it): such
        a node got its slot, evicted, when it was recorded (:meth:`track`)."""
        if node.op is None:  # a parameter: not an activation, and its value may change
            return Slot(value, 0, 0.0, (), False)
        slot = node.slot
        if slot is None:  # an op with an untracked input: it cannot be recomputed, so kept
            slot = node.slot = Slot(value, nbytes_of(value), 0.0, (), False)
            self._hold(slot)
        elif slot.value is RECOMPUTE and (read or slot.planned is False) and not slot.planned:
            # read again while at hand, or backed up and the plan keeps it: held (again)
            slot.value = value
            self._hold(slot)
        elif slot.value is not RECOMPUTE:  # used again: evicted later among its tier
            tier = self._tier_of.get(id(slot))
            if tier is not None:
                self._tiers[tier].move_to_end(id(slot))
        return slot

    def _constant_slot(self, value: Any) -> Slot:
        slot = Slot(value, nbytes_of(value), 0.0, (), False)
        self._hold(slot)
        return slot

    def _hold(self, slot: Slot) -> None:
        if not slot.nbytes:
            return
        ident = id(slot)
        ref = weakref.ref(slot, self._forget(ident, slot.nbytes))
        self._held[ident] = ref
        self.held_bytes += slot.nbytes
        if slot.evictable:
            self._enter(ident, ref, _tier(slot.cost, slot.nbytes))

    def _enter(self, ident: int, ref: weakref.ref, tier: int) -> None:
        members = self._tiers.get(tier)
        if members is None:
            members = self._tiers[tier] = OrderedDict()
        members[ident] = ref
        self._tier_of[ident] = tier

    def _measure(self, node: Any, inputs: tuple, out_bytes: int) -> float:
        """Seconds ``node``'s op took: the time since the previous recorded op ended (its
        kernel and the Python around it), the fastest seen for the same op and sizes."""
        now = time.perf_counter()
        seconds = now - self._tick
        key = (node.op.name, out_bytes, *[nbytes_of(x.value) for x in inputs])
        best = self._seconds.get(key)
        if best is not None and best <= seconds:
            return best
        if seconds <= 0 or seconds == math.inf:  # the first op after a backward: unknown
            return best if best is not None else _DEFAULT_SECONDS_PER_BYTE * (out_bytes + 1)
        self._seconds[key] = seconds
        return seconds

    def track(self, node: Any, inputs: tuple, out: Any) -> None:
        """Put the values ``node``'s actions hold into slots, back up its parents if it can be
        recomputed, evict it at once if the plan says so, and evict until the bytes held fit
        the budget again."""
        with self._lock:
            op = node.op
            node.recompute = op.recomputable and None not in node.parents
            out_bytes = nbytes_of(out)
            seconds = self._measure(node, inputs, out_bytes)
            evict_now = self._note(node, inputs, out, out_bytes, seconds)
            by_parent = {
                parent.id: (parent, x.value)
                for parent, x in zip(node.parents, inputs)
                if parent is not None
            }
            actions = []
            if node.recompute:  # its parents, to recompute it from should it be evicted
                backups = {
                    parent_id: self._slot_of(parent, value, False)
                    for parent_id, (parent, value) in by_parent.items()
                }
                parents = tuple([backups[parent.id] for parent in node.parents])
                slot = node.slot = Slot(RECOMPUTE, out_bytes, seconds, parents, out_bytes > 0)
                slot.planned = evict_now if self._following else None
                actions.extend((parent_id, slot, True) for parent_id, slot in backups.items())
            for key, value, backup in node.actions or ():
                if key == node.id:
                    slot = self._slot_of(node, out)
                elif key in by_parent:
                    slot = self._slot_of(*by_parent[key])
                else:  # an untracked input a rule reads, under a key of its own
                    slot = self._constant_slot(value)
                    if len(self._trace) <= PLAN_LIMIT:
                        self._constants[key] = slot.nbytes
                actions.append((key, slot, backup))
            node.actions = actions or None
            if self.held_bytes > self._limit:
                self._evict()
            if self.held_bytes > self._peak:
                self._peak = self.held_bytes
            self._tick = time.perf_counter()

    def _note(self, node: Any, inputs: tuple, out: Any, out_bytes: int, seconds: float) -> bool:
        """Record ``node`` in the trace of this step; whether the plan evicts it at once."""
        trace = self._trace
        position = len(trace)
        if position >= PLAN_LIMIT:  # too large to plan (or no backward for a long time)
            if position == PLAN_LIMIT:
                self._positions.clear()
                self._constants.clear()
                trace.append(None)
            self._following = False
            return False
        positions = self._positions
        parents = tuple([-1 if p is None else positions.get(p.id, -1) for p in node.parents])
        signature = (node.op.name, out_bytes, parents)
        # A view of an input shares its buffer (NumPy's ``base``): the plan counts it once.
        owner = position
        base = getattr(out, "base", None)
        if base is not None:
            for at, x in zip(parents, inputs):
                value = x.value
                if at >= 0 and (value is base or getattr(value, "base", None) is base):
                    owner = trace[at].owner
                    break
        trace.append(
            _Recorded(
                signature,
                out_bytes,
                seconds,
                tuple([p for p in parents if p >= 0]),
                node.recompute,
                owner,
            )
        )
        positions[node.id] = position
        if position == 0 and self._pending is not None:  # a step starts: plan it
            self._plan = self._make_plan(*self._pending)
            self._pending = None
            self._following = True
            self._limit = self._plan[2]
        if not self._following:
            return False
        signatures, evict, _limit = self._plan
        if position < len(signatures) and signatures[position] == signature:
            return evict[position] and node.recompute
        self._following = False  # another graph: eager from here on, and planned afresh
        self._limit = self.max_bytes
        return False

    def _evict(self) -> None:
        """Evict the held values cheapest to recompute per byte until under the budget.

        Values sit in tiers of recompute seconds per byte (a factor √2 apart), least recently
        used first in each. The first value of the cheapest tier is evicted, unless evictions
        since it entered made it dearer (its evicted ancestors would be recomputed with it):
        it then moves to its true tier and the search goes on. Each eviction is O(tiers).
        """
        tiers = self._tiers
        while self.held_bytes > self._limit and self._tier_of:
            tier = min(t for t, members in tiers.items() if members)
            members = tiers[tier]
            ident, ref = next(iter(members.items()))
            slot = ref()
            if slot is None:  # dying: its callback removes it
                del members[ident]
                del self._tier_of[ident]
                continue
            true_tier = _tier(_neighbourhood_cost(slot), slot.nbytes)
            if true_tier > tier:
                del members[ident]
                self._enter(ident, ref, true_tier)
                continue
            del members[ident]
            del self._tier_of[ident]
            del self._held[ident]
            self.held_bytes -= slot.nbytes
            slot.value = RECOMPUTE
            self.evictions += 1


#: seconds per byte assumed for an op whose time was not measured (about a memory-bound op's)
_DEFAULT_SECONDS_PER_BYTE = 1e-10
#: how many evicted ancestors the price of an eviction walks at most
_NEIGHBOURHOOD = 64


def _tier(seconds: float, nbytes: int) -> int:
    """The price tier of recomputing ``nbytes`` in ``seconds``: tiers a factor √2 apart."""
    return math.floor(2 * math.log2(max(seconds, 1e-12) / max(nbytes, 1)))


def _neighbourhood_cost(slot: Slot) -> float:
    """Seconds to recompute ``slot``'s value: its own op's plus those of the evicted
    ancestors a recomputation would rerun first (DTR's evicted neighbourhood, walked up to
    :data:`_NEIGHBOURHOOD` slots)."""
    cost = slot.cost
    seen: set[int] = set()
    stack = [parent for parent in slot.parents if parent.value is RECOMPUTE]
    while stack and len(seen) < _NEIGHBOURHOOD:
        parent = stack.pop()
        if id(parent) in seen:
            continue
        seen.add(id(parent))
        cost += parent.cost
        stack.extend(grand for grand in parent.parents if grand.value is RECOMPUTE)
    return cost


class Checkpointer:
    """Hands out the values backward rules read, recomputing dropped ones on demand.

    It also accounts the bytes it holds (``held_bytes``, its ``peak_bytes``) and, under a
    budget, drops recomputable values it holds to stay under it: the backward's order of
    reads is known when it starts, so it drops the value read furthest in the future
    (Belady's rule) among the few furthest, the one cheapest to recompute per byte (DTR's
    score with the true distance to the next read in place of staleness).
    """

    __slots__ = (
        "active",
        "anchor_every",
        "budget",
        "costs",
        "far",
        "held_bytes",
        "inner",
        "needs",
        "now",
        "peak_bytes",
        "planned",
        "recomputed_bytes",
        "recomputed_ops",
        "reserved",
        "sizes",
        "states",
        "tree",
    )

    def __init__(
        self,
        states: dict[int, list],
        tree: dict[int, Any],
        inner: Any,
        sizes: dict[int, int] | None = None,
        budget: int | None = None,
        needs: dict[int, list[int]] | None = None,
        costs: dict[int, float] | None = None,
        reserved: set[int] | None = None,
    ):
        #: key -> [value or RECOMPUTE, reads left]
        self.states = states
        #: node id -> node, for every node the backward walked
        self.tree = tree
        self.inner = inner
        #: key -> bytes that count while the key's value is held (activations, not parameters)
        self.sizes = sizes if sizes is not None else {}
        self.budget = budget
        self.held_bytes = sum(
            self.sizes.get(key, 0) for key, state in states.items() if state[0] is not RECOMPUTE
        )
        self.peak_bytes = self.held_bytes
        #: under a budget: key -> the backward steps (positions in the tape) at which its
        #: reads left happen, ascending, one per read (see CheckpointerBuilder.build)
        self.needs = needs if needs is not None else {}
        #: under a budget: key -> seconds its op takes (measured in forward, or here)
        self.costs = costs if costs is not None else {}
        #: the step of the latest read by a backward step
        self.now = 0
        #: the forward followed a plan (see plan_followed)
        self.planned = False
        #: under a budget: heap of (-next read, key) of held values, stale entries included
        self.far: list[tuple[int, int]] = []
        #: under a budget: values holding one read of each parent, so that they can be
        #: dropped and recomputed (see _recompute_order and CheckpointerBuilder.build)
        self.reserved: set[int] = reserved if reserved is not None else set()
        #: the values recomputations in progress make and read: never dropped for the budget
        #: (dropping them would recompute them again at once, and a graph of diamonds over and
        #: over: each read costs at most one recomputation of its missing ancestors)
        self.active: set[int] = set()
        if budget is not None:
            for key, state in states.items():
                if state[0] is not RECOMPUTE:
                    self._offer(key)
        #: bytes of outputs recomputed during this backward (for reports)
        self.recomputed_bytes = 0
        #: op executions spent recomputing (for reports and the linearity tests)
        self.recomputed_ops = 0
        recomputable = sum(1 for node in tree.values() if node.recompute)
        #: a recomputation longer than this keeps only every this-th by-product (√n anchors)
        self.anchor_every = max(4, math.isqrt(recomputable) + 1)

    def plan_followed(self, limit: int) -> None:
        """The forward followed a budget's plan, which assumed that every recomputed value is
        kept until its last read: no anchors, and no reads reserved to drop values again;
        the bytes held stay under ``limit`` (the plan's own count, or the budget) by
        dropping what can be, should the plan be off."""
        self.anchor_every = math.inf
        self.planned = True
        self.budget = limit

    def retrieve(self, key: int) -> Any:
        """The value saved under ``key`` for a backward step; forgotten after its last read."""
        if self.budget is not None:
            self.now = self.needs[key][0]
        return self._read(key)

    def _read(self, key: int) -> Any:
        state = self.states[key]
        if state[0] is RECOMPUTE:
            self._recompute(key)
        state[1] -= 1
        value = state[0]
        if self.budget is not None:
            del self.needs[key][0]
        if state[1] == 0:
            self._forget(key)
        elif self.budget is not None and value is not RECOMPUTE:
            self._offer(key)
        return value

    def _offer(self, key: int) -> None:
        """Under a budget: (re)enter a held value among the candidates to drop."""
        heapq.heappush(self.far, (-self.needs[key][0], key))

    def _need(self, parent: int, when: int) -> None:
        """One more read of ``parent``, at step ``when``."""
        self.states[parent][1] += 1
        if self.budget is not None:
            bisect.insort(self.needs[parent], when)
            if self.states[parent][0] is not RECOMPUTE:
                self._offer(parent)

    def _forget(self, key: int) -> None:
        """Delete a state after its last read, releasing the reads it reserved, recursively."""
        stack = [key]
        states = self.states
        budget = self.budget is not None
        while stack:
            current = stack.pop()
            state = states.pop(current)
            dropped = state[0] is RECOMPUTE
            if not dropped:
                self.held_bytes -= self.sizes.get(current, 0)
            if budget:
                self.needs.pop(current, None)
                # A reserved value, or one dropped (only children's reservations kept it, and
                # its parents hold one read for its recomputation): release the parents' reads.
                if current in self.reserved or dropped:
                    self.reserved.discard(current)
                    for parent in self.tree[current].parents:
                        parent_state = states[parent.id]
                        parent_state[1] -= 1
                        self.needs[parent.id].pop()  # the latest: a reservation's
                        if parent_state[1] == 0:
                            stack.append(parent.id)

    def _topological_order(self, key: int) -> list[int]:
        """Recomputed ancestors of ``key`` (and ``key``), parents first; no recursion."""
        order: list[int] = []
        seen: set[int] = set()
        stack: list[tuple[int, bool]] = [(key, False)]
        states, tree = self.states, self.tree
        while stack:
            current, expanded = stack.pop()
            if expanded:
                order.append(current)
                continue
            if current in seen or states[current][0] is not RECOMPUTE:
                continue
            seen.add(current)
            stack.append((current, True))
            stack.extend((parent.id, False) for parent in reversed(tree[current].parents))
        return order

    def _recompute(self, key: int) -> None:
        """Recompute ``key`` and its missing ancestors, parents first.

        The ancestors are by-products that later steps read too. Keeping them all until their
        last read (Burn) costs the memory of the whole chain; dropping them all again (so
        each read recomputes its chain) costs n²/2 op executions on a chain of n. Here a
        recomputation of at most ``anchor_every`` ops keeps its by-products, and a longer one
        keeps every ``anchor_every``-th of them as an anchor and drops the others once this
        recomputation has read them: the later reads then recompute short segments from the
        anchors, each segment once (Chen et al. 2016). A chain of n costs about 2n op
        executions and holds about 2√n values.
        """
        order = self._topological_order(key)
        _states, tree, _sizes = self.states, self.tree, self.sizes
        if self.budget is not None:
            outermost = not self.active
            active = self.active
            for node_id in order:
                active.add(node_id)
                for parent in tree[node_id].parents:
                    active.add(parent.id)
        try:
            self._recompute_order(key, order)
        finally:
            if self.budget is not None and outermost:
                self.active.clear()
        if self.budget is not None and self.held_bytes > self.budget and not self.active:
            self._enforce_budget(protect=key)

    def _recompute_order(self, key: int, order: list[int]) -> None:
        states, tree, sizes = self.states, self.tree, self.sizes
        budget = self.budget is not None
        anchor_every = self.anchor_every
        long = len(order) > anchor_every
        chain_reads: dict[int, int] = {}
        if long:
            for node_id in order:
                for parent in tree[node_id].parents:
                    chain_reads[parent.id] = chain_reads.get(parent.id, 0) + 1
        # by-products of this recomputation that are not anchors: dropped after their use here
        transient = {node_id for i, node_id in enumerate(order, 1) if i % anchor_every}
        transient.discard(key)
        for node_id in order:
            node = tree[node_id]
            state = states[node_id]
            if state[0] is not RECOMPUTE:  # recomputed meanwhile, by a parent's retrieve
                continue
            if budget and not self.planned and node_id not in self.reserved:
                # Under a budget the value may have to be dropped again later: each parent
                # keeps one read for that (released when this value is forgotten), so what
                # this recomputation makes stays droppable.
                self.reserved.add(node_id)
                last = self.needs[node_id][-1]
                for parent in node.parents:
                    self._need(parent.id, last)
            values = [self._read(parent.id) for parent in node.parents]
            started = time.perf_counter()
            output = run_forward(node.op, self.inner, values, node.params[: len(node.op.params)])
            if budget:
                self.costs[node_id] = time.perf_counter() - started
            if node.op.aux:
                output = output[0]
            size = sizes[node_id] = nbytes_of(output)
            self.recomputed_bytes += size
            self.recomputed_ops += 1
            state[0] = output
            self.held_bytes += size
            if self.held_bytes > self.peak_bytes:
                self.peak_bytes = self.held_bytes
            if budget:
                self._offer(node_id)
            if long:
                for parent in node.parents:
                    parent_id = parent.id
                    chain_reads[parent_id] -= 1
                    if chain_reads[parent_id] == 0 and parent_id in transient:
                        self._drop(parent_id)
            if budget and self.held_bytes > self.budget:
                self._enforce_budget(protect=node_id)

    def _droppable(self, node_id: int) -> bool:
        state = self.states.get(node_id)
        node = self.tree.get(node_id)
        if state is None or state[0] is RECOMPUTE or node is None or not node.recompute:
            return False
        states = self.states
        return all(parent.id in states for parent in node.parents)

    def _drop(self, node_id: int) -> bool:
        """Forget a held value that can be recomputed from what the checkpointer still has
        (its parents each get one more read for that)."""
        if not self._droppable(node_id):
            return False
        states = self.states
        states[node_id][0] = RECOMPUTE
        self.held_bytes -= self.sizes.get(node_id, 0)
        if node_id in self.reserved:  # its reserved reads become the reads of its recomputation
            self.reserved.discard(node_id)
        else:
            when = self.needs[node_id][0] if self.budget is not None else 0
            for parent in self.tree[node_id].parents:
                self._need(parent.id, when)
        return True

    def _drop_cost(self, node_id: int) -> float:
        """Seconds a recomputation of ``node_id`` would take: its op's, and its dropped
        parents' (one level: DTR's evicted neighbourhood, approximately)."""
        costs, states = self.costs, self.states
        cost = costs.get(node_id, 0.0)
        for parent in self.tree[node_id].parents:
            if states[parent.id][0] is RECOMPUTE:
                cost += costs.get(parent.id, 0.0)
        return cost

    def _enforce_budget(self, protect: int) -> None:
        """Drop held values until under the budget.

        Backward's reads are known in advance (``needs``), so the value read again furthest
        in the future is the one to drop first (Belady's rule); among the few furthest, the
        cheapest to recompute per byte and per step of distance goes (DTR's score, with the
        true distance in place of staleness). A value that can no longer be dropped (a
        parent was released) never becomes droppable again and leaves the queue.
        """
        far, states, needs, sizes = self.far, self.states, self.needs, self.sizes
        active = self.active
        now = self.now
        skipped = []
        while self.held_bytes > self.budget and far:
            picks = []
            while far and len(picks) < _DROP_CANDIDATES:
                entry = heapq.heappop(far)
                key = entry[1]
                state = states.get(key)
                if state is None or state[0] is RECOMPUTE or needs[key][0] != -entry[0]:
                    continue  # stale
                if key == protect or key in active:
                    skipped.append(entry)
                    continue
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

    def is_empty(self) -> bool:
        return not self.states


#: how many of the values read furthest in the future a drop in backward compares
_DROP_CANDIDATES = 4


def run_forward(op: Any, backend: Any, values: list, params: tuple) -> Any:
    """Run ``op``'s forward on ``backend``: at record time and as its retro-forward."""
    if op.forward is not None:
        if op.variadic:
            return op.forward(backend, values, *params)
        return op.forward(backend, *values, *params)
    return getattr(backend, op.name)(*values, *params)


class CheckpointerBuilder:
    """Collects the actions of the walked nodes and builds the :class:`Checkpointer`."""

    __slots__ = ("backup", "costs", "main")

    def __init__(self) -> None:
        self.main: list[tuple[int, Any]] = []
        self.backup: list[tuple[int, Any]] = []
        #: key -> seconds its op took in forward, from a budget's slots
        self.costs: dict[int, float] = {}

    def extend(self, actions: list[tuple[int, Any, bool]]) -> None:
        for key, value, is_backup in actions:
            if type(value) is Slot:
                self.costs[key] = value.cost
                value = value.value
            if is_backup:
                self.backup.append((key, value))
            else:
                self.main.append((key, value))

    def __len__(self) -> int:
        return len(self.main) + len(self.backup)

    def build(
        self,
        tree: dict[int, Any],
        inner: Any,
        budget: int | None = None,
        steps: list | None = None,
        planned: int | None = None,
    ) -> tuple[Checkpointer, int]:
        """The checkpointer, and the bytes of activations held when backward started.

        Under a budget, ``steps`` (the nodes in the order backward runs them) gives every
        read its step, so that the checkpointer knows which value is read furthest ahead;
        without them backward cannot keep a budget (and does not try).
        """
        if steps is None:
            budget = planned = None
        kept: dict[int, Any] = {}
        for key, value in self.main:
            if value is not RECOMPUTE:
                kept[key] = value
        for key, value in self.backup:
            if value is not RECOMPUTE and key not in kept:
                kept[key] = value

        # What counts: every held value but the parameters (leaves are the model, not
        # activations); untracked values a rule reads (keys of no node) count.
        sizes: dict[int, int] = {}
        for key, value in kept.items():
            node = tree.get(key)
            if node is None or node.op is not None:
                sizes[key] = nbytes_of(value)
        held_at_start = sum(sizes.values())

        needs: dict[int, list[int]] | None = None
        reads: dict[int, int] = {}
        if budget is not None:
            needs = self._count_in_order(steps, kept, tree)
            reads = {key: len(times) for key, times in needs.items()}
        else:
            for key, value in self.main:
                if value is RECOMPUTE:
                    self._count_with_ancestors(key, reads, kept, tree)
                else:
                    reads[key] = reads.get(key, 0) + 1

        states: dict[int, list] = {}
        for key, count in reads.items():
            if key in kept:
                states[key] = [kept[key], count]
            elif key in tree and tree[key].recompute:
                states[key] = [RECOMPUTE, count]
            else:
                raise AutodiffError(
                    f"backward: the output of node {key} is needed but was never checkpointed"
                )
        reserved: set[int] = set()
        if needs is not None and planned is None:
            self._reserve(states, needs, kept, tree, reserved)
        checkpointer = Checkpointer(
            states, tree, inner, sizes, budget, needs, self.costs if needs else None, reserved
        )
        if planned is not None:
            checkpointer.plan_followed(planned)
        return checkpointer, held_at_start

    @staticmethod
    def _count_in_order(steps: list, kept: dict, tree: dict) -> dict[int, list[int]]:
        """The reads of every value as the steps at which they happen, in backward's order
        (the counts of :meth:`_count_with_ancestors`, with times)."""
        needs: dict[int, list[int]] = {}
        for position, node in enumerate(steps):
            if node.op is None:
                continue
            for key in node.keys:
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

    @staticmethod
    def _reserve(states: dict, needs: dict, kept: dict, tree: dict, reserved: set) -> None:
        """Under a budget, a value kept from forward that could be recomputed reserves one
        read of each parent until its own last read, as a recomputed one does: it can then be
        dropped for the budget during backward and recomputed when read. A parent nobody
        else reads costs nothing when it is evicted (its own first read then reads its
        parents, as for any recomputed value); when it is held, it becomes droppable too."""
        pending = [key for key, state in states.items() if state[0] is not RECOMPUTE]
        while pending:
            key = pending.pop()
            node = tree.get(key)
            if node is None or not node.recompute or key in reserved:
                continue
            if not all(p.id in states or p.id in kept or p.recompute for p in node.parents):
                continue
            last = needs[key][-1]
            reserved.add(key)
            stack = [parent.id for parent in node.parents]
            while stack:
                current = stack.pop()
                state = states.get(current)
                if state is not None:
                    state[1] += 1
                    bisect.insort(needs[current], last)
                    continue
                value = kept.get(current, RECOMPUTE)
                states[current] = [value, 1]
                needs[current] = [last]
                if value is RECOMPUTE:  # its recomputation reads its parents once
                    stack.extend(parent.id for parent in tree[current].parents)
                else:
                    pending.append(current)

    @staticmethod
    def _count_with_ancestors(key: int, reads: dict, kept: dict, tree: dict) -> None:
        """One more read of ``key``; the first read of a recomputed value also reads its
        parents once (they are what it is recomputed from)."""
        stack = [key]
        while stack:
            current = stack.pop()
            if current in reads:
                reads[current] += 1
                continue
            reads[current] = 1
            if current not in kept:
                stack.extend(parent.id for parent in tree[current].parents)


def checkpointer_checks_enabled() -> bool:
    """``RETROGRAD_CHECK_CHECKPOINTER=1``: every backward asserts the checkpointer drained."""
    return os.environ.get("RETROGRAD_CHECK_CHECKPOINTER") == "1"
