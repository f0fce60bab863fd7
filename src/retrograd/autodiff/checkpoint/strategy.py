"""The checkpointing strategy: the interface between the autodiff engine and checkpointing.

The engine makes two calls, whatever the strategy:

- while recording, :meth:`CheckpointStrategy.save` for every node: what its backward step will
  read, as a :class:`~.builder.Saved` record (Burn's ``checkpoint_parents`` and the op's
  builder);
- when a backward starts, :meth:`CheckpointStrategy.begin_backward`: the
  :class:`~.checkpointer.Checkpointer` that hands the saved values out; backward then calls
  its ``retrieve`` and, at the end, its ``end``.

A strategy that decides per op subclasses this and overrides :meth:`recomputes` alone
(:class:`~.no_checkpointing.NoCheckpointing`, :class:`~.balanced.BalancedCheckpointing`, any
custom one); :class:`~.budget.strategy.BudgetCheckpointing` refines the calls themselves.
"""

from __future__ import annotations

from typing import Any

from ..ids import new_node_id
from .anchored import SqrtAnchors
from .builder import NOTHING_SAVED, CheckpointerBuilder, Saved
from .checkpointer import Checkpointer, HeldCheckpointer
from .state import RECOMPUTE, RECOMPUTED, State

__all__ = ["CheckpointStrategy"]

_new = object.__new__


def _held_by_a_reader(node: Any, value: Any) -> None:
    """A kept op's rule reads the output ``value`` of ``node``, a node the strategy
    recomputes: that output is held until backward anyway, so ``node`` will never be
    recomputed, and the parents it backed up for that (held since forward: a residual
    ``add``'s projection, which nothing else reads) are let go now. Its output is backed up
    instead (the same array: no new bytes), so that a backward that does not walk the
    reader still finds it."""
    saved = node.saved
    actions = saved.actions
    if not actions:  # consumed by a backward already
        return
    last_key, _, last_is_backup = actions[-1]
    if last_is_backup and last_key == node.id:  # done for an earlier reader
        return
    actions = [action for action in actions if not action[2]]
    actions.append((node.id, value, True))
    saved.actions = actions


def save_kept(node: Any, recipe: Any, inputs: tuple, out: Any) -> Saved:
    """:meth:`CheckpointStrategy.save` for a node whose values are kept: what its rules read, a
    tracked input keyed by its node, an untracked one under a fresh key (the commonest record
    of all, so no more than that is done here). ``Autodiff._record`` inlines it: keep the
    two alike."""
    keys = ()
    actions = []
    parents = node.parents
    for i in recipe.saved_inputs:
        parent = parents[i]
        value = inputs[i].value
        if parent is None:
            key = new_node_id()
        else:
            key = parent.id
            if parent.saved.recompute:
                _held_by_a_reader(parent, value)
        actions.append((key, value, False))
        keys += (key,)
    if recipe.save_out:
        node_id = node.id
        keys += (node_id,)
        actions.append((node_id, out, False))
    elif not keys:
        return NOTHING_SAVED
    saved = _new(Saved)  # Saved.__init__'s slots, assigned here: an __init__ costs a frame
    saved.keys = keys
    saved.actions = actions
    saved.recompute = False
    return saved


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

    #: the :class:`~.builder.CheckpointerBuilder` that gathers this strategy's records
    builder = CheckpointerBuilder
    #: what a step plan calls a value missing when backward starts
    #: (:func:`~retrograd.autodiff.explain.step_plan`)
    recomputed_status = RECOMPUTED

    def recomputes(self, op: Any) -> bool:
        raise NotImplementedError

    def save(self, node: Any, recipe: Any, inputs: tuple, out: Any) -> Saved:
        """What ``node``'s backward step reads, and how it is held: its
        :class:`~.builder.Saved` record (see :mod:`.builder` for the actions).

        ``recipe`` (:class:`~retrograd.autodiff.backend.Recipe`) says which inputs and whether
        the output the rules read; ``inputs`` are the op's autodiff primitives, ``out`` the
        inner value of its output. Called for every recorded node, so written for speed.
        """
        # Only an op whose inputs are all tracked can be recomputed from the graph.
        if recipe.all_tracked and self.recomputes(node.op):
            return self._save_recomputed(node, recipe, inputs, out)
        return save_kept(node, recipe, inputs, out)

    def saver(self) -> Any:
        """What the engine calls to save a node's values: :meth:`save`, or, for a strategy
        that recomputes nothing and saves as this class does (``NoCheckpointing``),
        :func:`save_kept` itself, which skips the ``recomputes`` call every record paid."""
        cls, own = type(self), getattr(self, "__dict__", {})
        if (
            cls.save is CheckpointStrategy.save
            and getattr(cls.recomputes, "never", False)
            and "save" not in own
            and "recomputes" not in own
        ):
            return save_kept
        return self.save

    def _save_recomputed(self, node: Any, recipe: Any, inputs: tuple, out: Any) -> Saved:
        """:meth:`save` for a node the strategy recomputes (its inputs are all tracked)."""
        actions = []
        for x in inputs:  # back up the parents it would be recomputed from
            parent = x.node
            actions.append((parent.id, RECOMPUTE if parent.saved.recompute else x.value, True))
        # What its rules read: an input is recomputed rather than kept only when its own node
        # is too (a compute-bound op keeps what it reads, docs/checkpointing.md).
        keys = ()
        parents = node.parents
        for i in recipe.saved_inputs:
            parent = parents[i]
            key = parent.id
            actions.append((key, RECOMPUTE if parent.saved.recompute else inputs[i].value, False))
            keys += (key,)
        if recipe.save_out:
            keys += (node.id,)
            actions.append((node.id, RECOMPUTE, False))
        return Saved(keys, actions, True)

    def begin_backward(
        self, tape: Any, inner: Any, consume: bool
    ) -> Checkpointer | HeldCheckpointer:
        """A backward over ``tape`` (:class:`~retrograd.autodiff.runtime.Tape`) starts: its
        checkpointer. ``consume``: the walked nodes' records let go of their values."""
        tree = self.tree_of(tape)
        builder = self.builder(tree, consume)
        try:
            if not builder.recomputed:  # nothing was dropped: every value read is held
                checkpointer: Any = HeldCheckpointer(
                    builder.held(), builder.reads, builder.activation_bytes()
                )
            else:
                sizes = builder.sizes()
                states = builder.states(builder.count_reads())
                by_products = SqrtAnchors.for_graph(builder.recomputable)
                checkpointer = Checkpointer(
                    states, tree, inner, sizes, by_products, sum(sizes.values())
                )
        except BaseException:  # (an interrupt: the graph keeps its records)
            builder.give_back()
            raise
        checkpointer.taken = builder.taken
        return checkpointer

    def backward_interrupted(self) -> None:
        """A backward was stopped (an interrupt) while its graph was walked, before
        :meth:`begin_backward`. A strategy that records each step between backwards (a
        memory budget's) drops the step it was recording; the others have nothing to do."""

    def planned_states(self, tape: Any) -> dict[int, State]:
        """The state of every value a backward over ``tape`` would read, as it would start:
        held, or missing (to recompute). Changes nothing, consumes nothing."""
        builder = self.builder(self.tree_of(tape), consume=False)
        return builder.states(builder.count_reads())

    def tree_of(self, tape: Any) -> dict[int, Any]:
        """node id -> node of the graph a backward over ``tape`` walks, as recomputation sees
        it (a strategy that recomputes from more than the nodes' parents refines it)."""
        return tape.nodes

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))
