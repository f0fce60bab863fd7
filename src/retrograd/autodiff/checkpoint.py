"""Checkpointing, as Burn does it: which outputs are kept for backward, which are recomputed.

During forward every recorded op leaves *actions* on its node, ``(key, value, backup)``:

- a *main* action for each value its backward rule will read: the value itself when the node
  that made it is kept (``Computed``), or ``RECOMPUTE`` when that node's output is recomputed
  and the reading op is itself recomputable (a compute-bound op keeps the inputs it reads,
  which bounds every recomputation at the nearest compute-bound op; see docs/checkpointing.md);
- under a strategy that recomputes an op, *backup* actions for each of its parents, so that
  its output can be recomputed later if anyone needs it.

At backward, :class:`CheckpointerBuilder` gathers the actions of the nodes the backward walks,
counts how many times each value will be read (walking up from every recomputed value to the
kept values it is recomputed from), drops every backup nobody needs, and builds a
:class:`Checkpointer`. Its :meth:`Checkpointer.retrieve` hands a value out, recomputing missing
ancestors first in topological order, and forgets each value right after its last read.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import AutodiffError

__all__ = [
    "RECOMPUTE",
    "BalancedCheckpointing",
    "CheckpointStrategy",
    "Checkpointer",
    "CheckpointerBuilder",
    "NoCheckpointing",
]


class _Recompute:
    __slots__ = ()

    def __repr__(self) -> str:
        return "RECOMPUTE"


#: Marks an action (or a state) whose value must be recomputed from the node's parents.
RECOMPUTE = _Recompute()


class CheckpointStrategy:
    """Decides, per op, whether its output is recomputed during backward instead of kept.

    Subclass it and override :meth:`recomputes`; ``op`` is the
    :class:`~retrograd.autodiff.ops.Op` being recorded (``op.name``, ``op.memory_bound``).
    Whatever it answers, an op with an untracked parent is kept (its output could not be
    recomputed from the graph), and gradients do not change, only memory and time.

    >>> class RecomputeActivations(CheckpointStrategy):
    ...     def recomputes(self, op):
    ...         return op.name in ("relu", "gelu", "sigmoid")
    """

    def recomputes(self, op: Any) -> bool:
        raise NotImplementedError

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


class Checkpointer:
    """Hands out the values backward rules read, recomputing dropped ones on demand."""

    __slots__ = ("inner", "recomputed_bytes", "states", "tree")

    def __init__(self, states: dict[int, list], tree: dict[int, Any], inner: Any):
        #: key -> [value or RECOMPUTE, reads left]
        self.states = states
        #: node id -> node, for every node the backward walked
        self.tree = tree
        self.inner = inner
        #: bytes of outputs recomputed during this backward (for reports)
        self.recomputed_bytes = 0

    def retrieve(self, key: int) -> Any:
        """The value saved under ``key``; forgotten after its last read."""
        state = self.states[key]
        if state[0] is RECOMPUTE:
            self._recompute(key)
        state[1] -= 1
        value = state[0]
        if state[1] == 0:
            del self.states[key]
        return value

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

        Ancestors that later steps also read are by-products of this recomputation. Burn keeps
        them until their last read; here a recomputable by-product is dropped again as soon as
        this recomputation has finished reading it, provided its parents are still in the
        checkpointer (held, or recomputable themselves; each gets one more read for that). It
        then occupies memory only from its own first read on, instead of from the first read of
        anything downstream of it.
        """
        order = self._topological_order(key)
        states, tree = self.states, self.tree
        chain_reads: dict[int, int] = {}
        for node_id in order:
            for parent in tree[node_id].parents:
                chain_reads[parent.id] = chain_reads.get(parent.id, 0) + 1
        for node_id in order:
            node = tree[node_id]
            values = [self.retrieve(parent.id) for parent in node.parents]
            output = run_forward(node.op, self.inner, values, node.params[: len(node.op.params)])
            if node.op.aux:
                output = output[0]
            self.recomputed_bytes += getattr(output, "nbytes", 0)
            states[node_id][0] = output
            for parent in node.parents:
                chain_reads[parent.id] -= 1
                if chain_reads[parent.id] == 0:
                    self._drop_if_recomputable(parent.id)

    def _drop_if_recomputable(self, node_id: int) -> None:
        state = self.states.get(node_id)
        node = self.tree.get(node_id)
        if state is None or state[0] is RECOMPUTE or node is None or not node.recompute:
            return
        parents = node.parents
        if all(parent.id in self.states for parent in parents):
            state[0] = RECOMPUTE
            for parent in parents:
                self.states[parent.id][1] += 1

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
            if is_backup:
                self.backup.append((key, value))
            else:
                self.main.append((key, value))

    def __len__(self) -> int:
        return len(self.main) + len(self.backup)

    def build(self, tree: dict[int, Any], inner: Any) -> Checkpointer:
        kept: dict[int, Any] = {}
        for key, value in self.main:
            if value is not RECOMPUTE:
                kept[key] = value
        for key, value in self.backup:
            if value is not RECOMPUTE and key not in kept:
                kept[key] = value

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
        return Checkpointer(states, tree, inner)

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
