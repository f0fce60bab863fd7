"""The checkpointer of one backward (Burn's ``Checkpointer``): hands out the values backward
rules read, recomputing dropped ones on demand, and forgets each value right after its last
read.

:meth:`Checkpointer.retrieve` is the one call backward's steps make; :meth:`Checkpointer.end`
closes the backward and reports what the strategy did (:class:`BackwardReport`). What a
recomputation keeps of its by-products is the policy it was given
(:mod:`.retro_forward`, :mod:`.anchored`); a memory budget's checkpointer
(:class:`~.budget.backward.BudgetCheckpointer`) refines the hooks ``_before_rerun``,
``_rerun`` and ``_after_rerun`` and the bookkeeping of reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from .retro_forward import rerun, topological_order
from .state import RECOMPUTE, State, nbytes_of

__all__ = ["BackwardReport", "Checkpointer", "HeldCheckpointer", "checkpointer_checks_enabled"]


class BackwardReport(NamedTuple):
    """What a backward's checkpointing did (``Gradients`` carries it)."""

    #: bytes of outputs recomputed
    recomputed_bytes: int
    #: op executions spent recomputing
    recomputed_ops: int
    #: activation bytes held at the worst moment of forward + backward
    peak_bytes: int


def checkpointer_checks_enabled() -> bool:
    """``RETROGRAD_CHECK_CHECKPOINTER=1``: every backward asserts the checkpointer drained."""
    return os.environ.get("RETROGRAD_CHECK_CHECKPOINTER") == "1"


class HeldCheckpointer:
    """The checkpointer of a backward that recomputes nothing: every value its rules read is
    held (always under :class:`~.no_checkpointing.NoCheckpointing`; under any strategy when the
    walked graph has nothing dropped). It hands ``values`` out, each forgotten at the last of
    its ``reads``; ``peak_bytes``, what was held when backward started, is its peak, since
    nothing is added. No :class:`~.state.State` per value and no byte count per read: this is
    every eager step's checkpointer, so it is written for speed.
    """

    __slots__ = ("on_end", "peak_bytes", "reads", "taken", "values")

    def __init__(self, values: dict[int, Any], reads: dict[int, int], peak_bytes: int, on_end=None):
        #: the records a consuming backward took, to give back if it stops early (see
        #: :attr:`.builder.CheckpointerBuilder.taken`), or None
        self.taken: dict[int, list] | None = None
        self.values = values
        self.reads = reads
        self.peak_bytes = peak_bytes
        #: called with the :class:`BackwardReport` when the backward ends (a budget's planner
        #: listens), or None
        self.on_end = on_end

    def retrieve(self, key: int) -> Any:
        """The value saved under ``key``; forgotten after its last read."""
        reads = self.reads
        left = reads[key] - 1
        if left:
            reads[key] = left
            return self.values[key]
        del reads[key]
        return self.values.pop(key)

    def retrieve_step(self, keys: tuple) -> list:
        """The values one backward step reads (``keys``, in its rule's order), each as
        :meth:`retrieve` gives it: one call per step rather than one per value."""
        reads, values = self.reads, self.values
        saved = []
        for key in keys:
            left = reads[key] - 1
            if left:
                reads[key] = left
                saved.append(values[key])
            else:
                del reads[key]
                saved.append(values.pop(key))
        return saved

    def end(self) -> BackwardReport:
        """Close this backward (it has read everything) and report: nothing recomputed."""
        if checkpointer_checks_enabled() and not self.is_empty():
            raise AssertionError(
                f"checkpointer not drained after backward: {sorted(self.reads)} left"
            )
        report = BackwardReport(0, 0, self.peak_bytes)
        if self.on_end is not None:
            self.on_end(report)
        return report

    def abandon(self) -> None:
        """The backward stopped before its end (a rule, hook or Function raised): its
        listener hears ``None``, no report (see :meth:`Checkpointer.abandon`)."""
        if self.on_end is not None:
            self.on_end(None)

    def is_empty(self) -> bool:
        return not self.reads


class Checkpointer:
    """Hands out saved values by key; recomputes missing ones from their parents.

    ``states``: key -> :class:`~.state.State` of every value backward reads; ``tree``: node
    id -> node of the walked graph; ``sizes``: key -> bytes that count while the value is held
    (activations, not parameters); ``by_products``: what a recomputation keeps of the values
    it makes on the way; ``start_peak``: the bytes held at forward's worst moment (what was
    held when backward started, or more under a budget, which evicts as forward goes).
    """

    __slots__ = (
        "by_products",
        "held_bytes",
        "inner",
        "peak_bytes",
        "recomputed_bytes",
        "recomputed_ops",
        "sizes",
        "start_peak",
        "states",
        "taken",
        "tree",
    )

    def __init__(
        self,
        states: dict[int, State],
        tree: dict[int, Any],
        inner: Any,
        sizes: dict[int, int],
        by_products: Any,
        start_peak: int = 0,
    ):
        self.states = states
        self.tree = tree
        self.inner = inner
        self.sizes = sizes
        self.by_products = by_products
        self.start_peak = start_peak
        #: see :attr:`HeldCheckpointer.taken`
        self.taken: dict[int, list] | None = None
        self.held_bytes = sum(
            sizes.get(key, 0) for key, state in states.items() if state.value is not RECOMPUTE
        )
        #: the most bytes this backward held
        self.peak_bytes = self.held_bytes
        self.recomputed_bytes = 0
        self.recomputed_ops = 0

    def end(self) -> BackwardReport:
        """Close this backward (it has read everything) and report what was done."""
        if checkpointer_checks_enabled() and not self.is_empty():
            raise AssertionError(
                f"checkpointer not drained after backward: {sorted(self.states)} left"
            )
        peak = max(self.start_peak, self.peak_bytes)
        return BackwardReport(self.recomputed_bytes, self.recomputed_ops, peak)

    def is_empty(self) -> bool:
        return not self.states

    # -- reads ------------------------------------------------------------------------------------
    def abandon(self) -> None:
        """The backward stopped before its end (a rule, hook or Function raised). Nothing to
        report: a strategy that learns from each backward (a memory budget's planner) would
        learn from half a step, so the budget's checkpointers tell their listener ``None``."""

    def retrieve(self, key: int) -> Any:
        """The value saved under ``key`` for a backward step; forgotten after its last read."""
        state = self.states[key]
        if state.value is RECOMPUTE:
            self._recompute((key,))
        state.reads_left -= 1
        if state.reads_left == 0:
            self._forget(key)
        return state.value

    #: a read by a recomputation (a subclass that counts backward's steps tells the two apart)
    _read = retrieve

    def retrieve_step(self, keys: tuple) -> list:
        """The values one backward step reads (``keys``, in its rule's order), each as
        :meth:`retrieve` gives it. What several of them miss is recomputed first, in one
        pass in recording order, as the plan's model reruns a step's recomputations
        (:func:`~.budget.segments.engine_profile`): one key's chain at a time kept what the
        next key's chain was about to free (an attention block's qkv projection, read by the
        value slice its second key needs, stayed while its first key's scores were remade)."""
        if len(keys) > 1:
            states = self.states
            missing = [key for key in keys if states[key].value is RECOMPUTE]
            if len(missing) > 1:
                self._recompute(missing)
        return list(map(self.retrieve, keys))

    def _forget(self, key: int) -> None:
        """Delete a state after its last read."""
        state = self.states.pop(key)
        if state.value is not RECOMPUTE:
            self.held_bytes -= self.sizes.get(key, 0)

    # -- recomputation ----------------------------------------------------------------------------
    def _recompute(self, keys: Sequence[int]) -> None:
        """Recompute ``keys`` and their missing ancestors, parents first."""
        self._recompute_order(keys, topological_order(self.states, self.tree, keys))

    def _recompute_order(self, keys: Sequence[int], order: list[int]) -> None:
        states, tree, sizes = self.states, self.tree, self.sizes
        transient = self.by_products.transient(order, keys, tree)
        for node_id in order:
            state = states[node_id]
            if state.value is not RECOMPUTE:  # recomputed meanwhile, by a parent's retrieve
                continue
            node = tree[node_id]
            self._before_rerun(node_id, node)
            held_before = self.held_bytes
            values = [self._read(parent.id) for parent in node.parents]
            output = self._rerun(node_id, node, values)
            size = sizes[node_id] = nbytes_of(output)
            self.recomputed_bytes += size
            self.recomputed_ops += 1
            state.value = output
            self._note_rerun_peak(held_before, size)
            self.held_bytes += size
            if transient is not None:
                transient.read_parents(node, self._drop)
            self._after_rerun(node_id)

    def _note_rerun_peak(self, held_before: int, size: int) -> None:
        """A recomputed output of ``size`` bytes exists while the parents it was made from
        still do: a parent read for the last time (forgotten by its read, ``held_bytes``
        already without it) was alive while the op ran. The peak counts what was held before
        the reads, or after them if they recomputed, with the output: the memory the process
        had at that moment, and what the plan's model counts
        (:func:`~.budget.segments.engine_profile`)."""
        during = max(held_before, self.held_bytes) + size
        if during > self.peak_bytes:
            self.peak_bytes = during

    def _before_rerun(self, node_id: int, node: Any) -> None:
        """Called before ``node``'s output is recomputed (before its parents are read)."""

    def _rerun(self, node_id: int, node: Any, values: list) -> Any:
        """``node``'s output, recomputed from its parents' ``values``."""
        return rerun(node, self.inner, values)

    def _after_rerun(self, node_id: int) -> None:
        """Called once ``node_id``'s recomputed output is held and its by-products dropped."""

    # -- dropping ---------------------------------------------------------------------------------
    def _droppable(self, node_id: int) -> bool:
        """Whether the value of ``node_id`` is held and can be recomputed from what the
        checkpointer still has."""
        state = self.states.get(node_id)
        node = self.tree.get(node_id)
        if state is None or state.value is RECOMPUTE or node is None or not node.saved.recompute:
            return False
        states = self.states
        return all(parent.id in states for parent in node.parents)

    def _drop(self, node_id: int) -> bool:
        """Forget a held value that can be recomputed from what the checkpointer still has
        (its parents each get one more read for that)."""
        if not self._droppable(node_id):
            return False
        self.states[node_id].value = RECOMPUTE
        self.held_bytes -= self.sizes.get(node_id, 0)
        self._reread_parents(node_id)
        return True

    def _reread_parents(self, node_id: int) -> None:
        """The recomputation of dropped ``node_id`` will read each of its parents once more."""
        states = self.states
        for parent in self.tree[node_id].parents:
            states[parent.id].reads_left += 1
