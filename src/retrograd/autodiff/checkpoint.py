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
keeps √n anchors of a long recomputation), and stays under a byte budget when there is one.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import threading
import weakref
from collections import OrderedDict
from typing import Any

from ..errors import AutodiffError

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

    __slots__ = ("__weakref__", "cost", "evictable", "last", "nbytes", "parents", "value")

    def __init__(self, value: Any, nbytes: int, cost: float, parents: tuple, evictable: bool):
        self.value = value
        self.nbytes = nbytes
        self.cost = cost
        #: the parents' slots, for the cost of an evictable slot's evicted neighbourhood (a
        #: slot never refers to its node: node.slot -> slot -> node would be a cycle, and
        #: graphs must be freed by reference counting alone)
        self.parents = parents
        self.evictable = evictable
        self.last = 0


class BudgetCheckpointing(CheckpointStrategy):
    """Keeps the activations held for backward under ``max_bytes`` (an int, or ``"512MB"``,
    ``"2GiB"``), evicting during forward and recomputing on demand in backward.

    After Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021): every value a backward
    rule reads is held in a *slot*; when the bytes held pass the budget, the held value with the
    smallest ``cost / (bytes x staleness)`` whose op can be rerun is evicted (``cost``: its op's
    estimated work plus that of its evicted parents, which a recomputation would rerun too;
    ``staleness``: ops recorded since it was last used). An evicted value keeps backups of its
    parents (held or evicted themselves), so backward recomputes it recursively. Backward then
    keeps what it recomputes under the same budget. Gradients are bit-identical to
    :class:`NoCheckpointing`'s. A single value larger than the budget is still held: the step
    runs, and ``Gradients.peak_bytes`` shows by how much the budget was passed.
    """

    def __init__(self, max_bytes: int | str):
        self.max_bytes = parse_bytes(max_bytes)
        # reentrant: a slot freed by the garbage collector during track() calls back in
        self._lock = threading.RLock()
        #: id(slot) -> weak reference, for every live slot whose bytes count
        self._held: dict[int, weakref.ref] = {}
        #: id(slot) -> weak reference, for the held slots that may be evicted, oldest first
        self._candidates: OrderedDict[int, weakref.ref] = OrderedDict()
        self.held_bytes = 0
        self._peak = 0
        self._clock = 0
        #: values evicted during forward, all time (for reports and tests)
        self.evictions = 0

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
        return peak

    # -- the pool ---------------------------------------------------------------------------------
    def _forget(self, ident: int, nbytes: int) -> Any:
        """Called when a slot dies: its bytes (if still held) stop counting."""

        def callback(_ref: Any) -> None:
            with self._lock:
                if self._held.pop(ident, None) is not None:
                    self.held_bytes -= nbytes
                self._candidates.pop(ident, None)

        return callback

    def _slot_of(self, node: Any, value: Any, read: bool = True) -> Slot:
        """The slot of ``node``'s output. A rule reading it (``read``) holds ``value`` in it;
        a mere backup of a recomputable parent starts evicted instead, so that backups cost
        no memory NoCheckpointing would not spend (the parent's own backups recompute it)."""
        if node.op is None:  # a parameter: not an activation, and its value may change
            return Slot(value, 0, 0.0, (), False)
        slot = node.slot
        if slot is None:
            nbytes = nbytes_of(value)
            if node.recompute and nbytes:  # its parents' slots exist: it backed them up
                parents = tuple([parent.slot for parent in node.parents])
                slot = Slot(value, nbytes, _cost(node.op, nbytes), parents, True)
                if not read:
                    slot.value = RECOMPUTE
                    node.slot = slot
                    return slot
            else:
                slot = Slot(value, nbytes, 0.0, (), False)
            node.slot = slot
            self._hold(slot)
        elif read and slot.value is RECOMPUTE:  # read again while at hand: held again
            slot.value = value
            self._hold(slot)
        slot.last = self._clock
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
            self._candidates[ident] = ref

    def track(self, node: Any, inputs: tuple, out: Any) -> None:
        """Put the values ``node``'s actions hold into slots, back up its parents if it can be
        recomputed, and evict until the bytes held fit the budget again."""
        with self._lock:
            self._clock += 1
            node.recompute = node.op.recomputable and None not in node.parents
            by_parent = {
                parent.id: (parent, x.value)
                for parent, x in zip(node.parents, inputs)
                if parent is not None
            }
            actions = []
            for key, value, backup in node.actions or ():
                if key == node.id:
                    slot = self._slot_of(node, out)
                elif key in by_parent:
                    slot = self._slot_of(*by_parent[key])
                else:  # an untracked input a rule reads, under a key of its own
                    slot = self._constant_slot(value)
                actions.append((key, slot, backup))
            if node.recompute:  # its parents, to recompute it from should it be evicted
                for parent, value in by_parent.values():
                    actions.append((parent.id, self._slot_of(parent, value, False), True))
            node.actions = actions or None
            if self.held_bytes > self.max_bytes:
                self._evict()
            if self.held_bytes > self._peak:
                self._peak = self.held_bytes

    def _evict(self) -> None:
        """Evict the cheapest held values per byte and staleness until under the budget."""
        clock = self._clock
        candidates = self._candidates
        while self.held_bytes > self.max_bytes and candidates:
            # DTR scores every candidate; a window of the oldest ones (the stalest, mostly)
            # keeps each eviction O(1) on graphs of any size, as DTR's own sampling does.
            best, best_score = None, math.inf
            for ref in itertools.islice(candidates.values(), _WINDOW):
                slot = ref()
                if slot is None:
                    continue
                score = _neighbourhood_cost(slot) / (slot.nbytes * (clock - slot.last + 1))
                if score < best_score:
                    best, best_score = slot, score
            if best is None:
                break
            ident = id(best)
            del self._candidates[ident]
            del self._held[ident]
            self.held_bytes -= best.nbytes
            best.value = RECOMPUTE
            self.evictions += 1


#: how many of the oldest candidates an eviction during forward compares
_WINDOW = 64


def _cost(op: Any, nbytes: int) -> float:
    """Estimated work of rerunning ``op``: the bytes it writes for a memory-bound op, a
    multiple of them for a compute-bound one (a matmul reads a whole inner dimension per
    output element)."""
    if op is None:
        return 0.0
    return float(nbytes) if op.memory_bound else 16.0 * nbytes


def _neighbourhood_cost(slot: Slot) -> float:
    """The slot's own cost plus that of its evicted parents (DTR's evicted neighbourhood,
    one level deep: a recomputation reruns them too)."""
    cost = slot.cost
    for parent in slot.parents:
        if parent is not None and parent.value is RECOMPUTE:
            cost += parent.cost
    return cost


class Checkpointer:
    """Hands out the values backward rules read, recomputing dropped ones on demand.

    It also accounts the bytes it holds (``held_bytes``, its ``peak_bytes``) and, under a
    budget, drops recomputable values it holds, least recently used first, to stay under it.
    """

    __slots__ = (
        "active",
        "anchor_every",
        "budget",
        "held_bytes",
        "inner",
        "peak_bytes",
        "recent",
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
        #: under a budget: the held keys that may be dropped, least recently used first
        self.recent: OrderedDict[int, None] | None = None
        #: under a budget: recomputed values holding one read of each parent (see _recompute)
        self.reserved: set[int] = set()
        #: the values recomputations in progress make and read: never dropped for the budget
        #: (dropping them would recompute them again at once, and a graph of diamonds over and
        #: over: each read costs at most one recomputation of its missing ancestors)
        self.active: set[int] = set()
        if budget is not None:
            self.recent = OrderedDict(
                (key, None)
                for key, state in states.items()
                if state[0] is not RECOMPUTE and self._droppable(key)
            )
        #: bytes of outputs recomputed during this backward (for reports)
        self.recomputed_bytes = 0
        #: op executions spent recomputing (for reports and the linearity tests)
        self.recomputed_ops = 0
        recomputable = sum(1 for node in tree.values() if node.recompute)
        #: a recomputation longer than this keeps only every this-th by-product (√n anchors)
        self.anchor_every = max(4, math.isqrt(recomputable) + 1)

    def retrieve(self, key: int) -> Any:
        """The value saved under ``key``; forgotten after its last read."""
        state = self.states[key]
        if state[0] is RECOMPUTE:
            self._recompute(key)
        state[1] -= 1
        value = state[0]
        if state[1] == 0:
            self._forget(key)
        elif self.recent is not None and key in self.recent:
            self.recent.move_to_end(key)
        return value

    def _forget(self, key: int) -> None:
        """Delete a state after its last read, releasing the reads it reserved, recursively."""
        stack = [key]
        states = self.states
        while stack:
            current = stack.pop()
            state = states.pop(current)
            dropped = state[0] is RECOMPUTE
            if not dropped:
                self.held_bytes -= self.sizes.get(current, 0)
            if self.recent is not None:
                self.recent.pop(current, None)
                # A reserved value, or one dropped (only children's reservations kept it, and
                # its parents hold one read for its recomputation): release the parents' reads.
                if current in self.reserved or dropped:
                    self.reserved.discard(current)
                    for parent in self.tree[current].parents:
                        parent_state = states[parent.id]
                        parent_state[1] -= 1
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
            if self.budget is not None and node_id not in self.reserved:
                # Under a budget the value may have to be dropped again later: each parent
                # keeps one read for that (released when this value is forgotten), so what
                # this recomputation makes stays droppable.
                self.reserved.add(node_id)
                for parent in node.parents:
                    states[parent.id][1] += 1
            values = [self.retrieve(parent.id) for parent in node.parents]
            output = run_forward(node.op, self.inner, values, node.params[: len(node.op.params)])
            if node.op.aux:
                output = output[0]
            size = sizes[node_id] = nbytes_of(output)
            self.recomputed_bytes += size
            self.recomputed_ops += 1
            state[0] = output
            self.held_bytes += size
            if self.held_bytes > self.peak_bytes:
                self.peak_bytes = self.held_bytes
            if self.recent is not None:
                self.recent[node_id] = None
            if long:
                for parent in node.parents:
                    parent_id = parent.id
                    chain_reads[parent_id] -= 1
                    if chain_reads[parent_id] == 0 and parent_id in transient:
                        self._drop(parent_id)
            if self.budget is not None and self.held_bytes > self.budget:
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
        if self.recent is not None:
            self.recent.pop(node_id, None)
        if node_id in self.reserved:  # its reserved reads become the reads of its recomputation
            self.reserved.discard(node_id)
        else:
            for parent in self.tree[node_id].parents:
                states[parent.id][1] += 1
        return True

    def _enforce_budget(self, protect: int) -> None:
        """Drop held values, least recently used first, until under the budget.

        Backward reads in roughly the reverse order of forward, so the value used longest
        ago is the one read again last: dropping it first is what Belady's rule would do.
        A value that can no longer be dropped (a parent was released) never becomes
        droppable again and leaves the queue.
        """
        recent = self.recent
        active = self.active
        skipped = []
        while self.held_bytes > self.budget and recent:
            node_id, _ = recent.popitem(last=False)
            if node_id == protect or node_id in active:
                skipped.append(node_id)
                continue
            self._drop(node_id)
        for node_id in skipped:
            recent[node_id] = None

    def is_empty(self) -> bool:
        return not self.states


def run_forward(op: Any, backend: Any, values: list, params: tuple) -> Any:
    """Run ``op``'s forward on ``backend``: at record time and as its retro-forward."""
    if op.forward is not None:
        if op.variadic:
            return op.forward(backend, values, *params)
        return op.forward(backend, *values, *params)
    return getattr(backend, op.name)(*values, *params)


class CheckpointerBuilder:
    """Collects the actions of the walked nodes and builds the :class:`Checkpointer`."""

    __slots__ = ("backup", "main")

    def __init__(self) -> None:
        self.main: list[tuple[int, Any]] = []
        self.backup: list[tuple[int, Any]] = []

    def extend(self, actions: list[tuple[int, Any, bool]]) -> None:
        for key, value, is_backup in actions:
            if type(value) is Slot:
                value = value.value
            if is_backup:
                self.backup.append((key, value))
            else:
                self.main.append((key, value))

    def __len__(self) -> int:
        return len(self.main) + len(self.backup)

    def build(
        self, tree: dict[int, Any], inner: Any, budget: int | None = None
    ) -> tuple[Checkpointer, int]:
        """The checkpointer, and the bytes of activations held when backward started."""
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

        reads: dict[int, int] = {}
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
        return Checkpointer(states, tree, inner, sizes, budget), held_at_start

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
