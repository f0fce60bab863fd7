"""What forward records for backward, and how backward gathers it (Burn's
``CheckpointerBuilder``).

Forward: every recorded node gets a :class:`Saved` record (``node.saved``): the keys of the
values its backward rules read and the *actions* that hold them, ``(key, value, is_backup)``:

- a *main* action for each value its rules read: the value itself when the node that made it
  is kept, or :data:`~.state.RECOMPUTE` when that node's output is recomputed and the reading
  op is itself recomputed (a compute-bound op keeps the inputs it reads, which bounds every
  recomputation at the nearest compute-bound op; see docs/checkpointing.md);
- when the strategy recomputes the node, a *backup* action for each of its parents, so that
  its output can be recomputed later if anyone needs it.

Backward: :class:`CheckpointerBuilder` gathers the actions of the nodes the backward walks,
counts how many times each value will be read (walking up from every recomputed value to the
kept values it is recomputed from) and makes the :class:`~.state.State` of each value read.
Backups nobody needs are dropped then.
"""

from __future__ import annotations

from typing import Any

from ...errors import AutodiffError
from .state import RECOMPUTE, State, nbytes_of

__all__ = ["NOTHING_SAVED", "CheckpointerBuilder", "Saved"]

_new = object.__new__


class Saved:
    """Checkpointing's record of one node (``node.saved``).

    - ``keys``: the keys of the values its backward rules read, in the order the rules take
      them (saved inputs, then the output); a tracked input's key is its node's id, an
      untracked one's a fresh id.
    - ``actions``: the list of ``(key, value, is_backup)`` that hold those values (and the
      backups), ``None`` when there are none or once a backward has gathered them.
    - ``recompute``: its output is recomputed during backward rather than kept (under a
      memory budget: it can be, should it be evicted).
    """

    __slots__ = ("actions", "keys", "recompute")

    #: Whether :meth:`outlives_release` can answer True: read by the engine for every node a
    #: backward releases, so a strategy that never keeps a recipe costs it one attribute read.
    may_outlive_release = False

    def __init__(self, keys: tuple, actions: list | None, recompute: bool):
        self.keys = keys
        self.actions = actions
        self.recompute = recompute

    def outlives_release(self) -> bool:
        """Whether a backward releasing this node must keep its recipe (its parents and
        what rebuilds its output): see :meth:`.budget.pool.BudgetSaved.outlives_release`."""
        return False

    def __repr__(self) -> str:
        return f"Saved(keys={self.keys}, actions={self.actions}, recompute={self.recompute})"


#: The record of a node that saves nothing (a leaf, an ``add``, a consumed node): shared,
#: never changed.
NOTHING_SAVED = Saved((), None, False)


class CheckpointerBuilder:
    """The actions of the walked nodes, gathered when a backward starts.

    ``kept``: key -> value of every value held (a main action's first, else a backup's: a
    value moved to another device keeps its node, and its key); ``reads``: key -> the reads
    of the main actions that hold a value; ``recomputed``: the keys of the main actions that
    mark a value to recompute (one entry per read); ``recomputable``: how many walked nodes
    can be recomputed. ``consume``: the records let go of their actions, so that each value is
    held by the checkpointer alone and freed at its last read.
    """

    __slots__ = ("backups", "kept", "reads", "recomputable", "recomputed", "taken", "tree")

    def __init__(self, tree: dict[int, Any], consume: bool):
        #: node id -> node, for every node the backward walks
        self.tree = tree
        self.kept: dict[int, Any] = {}
        self.reads: dict[int, int] = {}
        self.recomputed: list[int] = []
        self.backups: list[tuple[int, Any]] = []
        #: node id -> the actions a consuming backward took from its record: all of them go
        #: back should its checkpointer not be made (:meth:`give_back`); once it runs, the
        #: checkpointer may keep them (its ``taken``), each dropped once the node's step ran,
        #: so that a backward that stops early (an error, an interrupt) gives the rest back
        #: and a later backward through those steps reads them
        self.taken: dict[int, list] | None = {} if consume else None
        taken = self.taken
        kept, reads, backups = self.kept, self.reads, self.backups
        plain = type(self).add is CheckpointerBuilder.add  # (a budget's builder refines it)
        recomputable = 0
        try:
            for node in tree.values():
                saved = node.saved
                if saved.recompute:
                    recomputable += 1
                actions = saved.actions
                if not actions:
                    continue
                if saved.recompute or not plain:
                    self.add(actions)
                else:  # add(), inlined for a kept node's actions (every node of an eager step)
                    for key, value, is_backup in actions:
                        if is_backup:
                            if value is not RECOMPUTE:
                                backups.append((key, value))
                        elif value is RECOMPUTE:
                            self.recomputed.append(key)
                        else:
                            if key not in kept:
                                kept[key] = value
                            reads[key] = reads.get(key, 0) + 1
                if taken is not None:
                    taken[node.id] = actions
                    saved.actions = None
        except BaseException:
            self.give_back()
            raise
        self.recomputable = recomputable
        kept = self.kept
        for key, value in self.backups:
            if key not in kept:
                kept[key] = value

    def give_back(self) -> None:
        """The backward that took the records will not run (an interrupt, an error while its
        checkpointer is made): every node gets its own back, and a later backward through the
        graph reads them."""
        taken, tree = self.taken, self.tree
        if taken:
            for node_id, actions in taken.items():
                tree[node_id].saved.actions = actions
            taken.clear()

    def add(self, actions: list) -> None:
        """Gather one node's actions."""
        kept, reads = self.kept, self.reads
        for key, value, is_backup in actions:
            if is_backup:
                if value is not RECOMPUTE:
                    self.backups.append((key, value))
            elif value is RECOMPUTE:
                self.recomputed.append(key)
            else:
                if key not in kept:
                    kept[key] = value
                reads[key] = reads.get(key, 0) + 1

    def held(self) -> dict[int, Any]:
        """key -> value of every value read, when none is to be recomputed (``recomputed``
        empty): every key read is then held, and the held keys read by no one are backups."""
        kept, reads = self.kept, self.reads
        if len(kept) == len(reads):  # no backup of its own: the same keys
            return kept
        return {key: kept[key] for key in reads}

    def activation_bytes(self) -> int:
        """The bytes of every held value but the parameters: the sum of :meth:`sizes`."""
        tree = self.tree
        total = 0
        for key, value in self.kept.items():
            node = tree.get(key)
            if node is None or node.op is not None:
                total += getattr(value, "nbytes", 0)  # nbytes_of, inlined: once per value
        return total

    def sizes(self) -> dict[int, int]:
        """key -> bytes, for every held value but the parameters (leaves are the model, not
        activations); untracked values a rule reads (keys of no node) count."""
        tree = self.tree
        sizes: dict[int, int] = {}
        for key, value in self.kept.items():
            node = tree.get(key)
            if node is None or node.op is not None:
                sizes[key] = nbytes_of(value)
        return sizes

    def count_reads(self) -> dict[int, int]:
        """How many times backward reads each value: the main actions' reads, and for a
        recomputed value one read of each parent at its recomputation (its first read).
        Counted into :attr:`reads`: call it once."""
        reads = self.reads
        kept, tree = self.kept, self.tree
        for key in self.recomputed:
            stack = [key]
            while stack:
                current = stack.pop()
                if current in reads:
                    reads[current] += 1
                    continue
                reads[current] = 1
                if current not in kept:
                    stack.extend(parent.id for parent in tree[current].parents)
        return reads

    def states(self, reads: dict[int, int]) -> dict[int, State]:
        """The state of every value read: held, or to recompute from its node's parents."""
        kept, tree = self.kept, self.tree
        states: dict[int, State] = {}
        for key, count in reads.items():
            value = kept.get(key, RECOMPUTE)
            if value is RECOMPUTE:
                node = tree.get(key)
                if node is None or not node.saved.recompute:
                    raise AutodiffError(
                        f"backward: the output of node {key} is needed but was never checkpointed"
                    )
            state = states[key] = _new(State)  # State.__init__'s slots: no frame per value
            state.value = value
            state.reads_left = count
        return states
