"""The autodiff graph: nodes, their requirements, and the autodiff primitive.

The graph *is* the web of nodes: a node holds its parents and nothing else holds a node but its
children and the tensors built on it. So a graph that no tensor references is freed by Python's
reference counting the moment its last tensor goes, whether it was backpropagated or not, and
graphs built in different threads share no structure (and no lock) until an op joins them, at
which point the joined node simply has parents in both.
"""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["CONSUMED", "AutodiffPrimitive", "Node", "Requirement", "new_node_id"]


class Requirement:
    """What a node needs from backward (Burn's ``Requirement``)."""

    NONE = 0
    #: An intermediate: its gradient flows through backward and is dropped once used.
    GRAD_IN_BACKWARD = 1
    #: A leaf the user asked gradients for: its gradient is kept in the result.
    GRAD = 2


#: Monotonic node ids; ``next`` on ``itertools.count`` is atomic under the GIL.
new_node_id = itertools.count(1).__next__


class _Consumed:
    __slots__ = ()

    def __repr__(self) -> str:
        return "CONSUMED"


#: The ``plan`` of a node a backward has consumed.
CONSUMED = _Consumed()


class Node:
    """One recorded operation (or a leaf that requires grad).

    - ``id``: unique, increasing; ``order``: depth, 1 + the deepest parent, 0 for leaves.
    - ``op``: the :class:`~retrograd.autodiff.ops.Op` that made it (``None`` for leaves);
      ``parents``: one entry per op input, the input's node or ``None`` when untracked.
    - ``params``: what the backward rules read besides saved tensors: the op's parameters,
      then the input shapes/dtypes its plan asks for, then the ``aux`` output if any.
    - ``plan``: the op's :class:`~retrograd.autodiff.ops.Plan` for this requires-grad mask,
      or ``CONSUMED`` once a backward has walked the node.
    - ``keys``: checkpointer keys of the values the rules read (saved inputs, then the output).
    - ``actions``: checkpointing actions recorded at forward, ``(key, value, backup)``.
    - ``recompute``: this node's output is recomputed during backward, not kept.

    Rarely set, so they live in the class until set: ``retain`` (``retain_grad()`` was
    called), ``param_id`` (a distributed parameter) with its ``param_shape`` and
    ``param_dtype``, ``bshapes`` (input shapes broadcasting changed, for the engine to sum
    gradients back to), ``slot`` (its output's slot under a memory budget).
    """

    __slots__ = (
        "__dict__",
        "__weakref__",
        "actions",
        "id",
        "keys",
        "op",
        "order",
        "params",
        "parents",
        "plan",
        "recompute",
    )

    retain = False
    param_id = None
    param_shape = None
    param_dtype = None
    bshapes = None
    slot = None

    def __init__(self, node_id, op, parents, params, order, plan, keys, actions, recompute):
        self.id = node_id
        self.order = order
        self.op = op
        self.parents = parents
        self.params = params
        self.plan = plan
        self.keys = keys
        self.actions = actions
        self.recompute = recompute

    @classmethod
    def leaf(cls) -> Node:
        """A leaf that requires grad."""
        return cls(new_node_id(), None, (), (), 0, None, (), None, False)

    @property
    def requirement(self) -> int:
        if self.op is None:
            return Requirement.GRAD
        return Requirement.GRAD_IN_BACKWARD

    @property
    def consumed(self) -> bool:
        return self.plan is CONSUMED

    def describe(self) -> str:
        return f"{self.op.name if self.op else 'leaf'}#{self.id}"

    def __repr__(self) -> str:
        return f"Node({self.describe()}, order={self.order})"


class AutodiffPrimitive:
    """The autodiff backend's primitive: an inner-backend primitive and its node.

    ``node`` is ``None`` for untracked values (constants, ints, bools, anything computed only
    from untracked values), which then cost nothing beyond the inner primitive.
    """

    __slots__ = ("node", "value")

    def __init__(self, value: Any, node: Node | None):
        self.value = value
        self.node = node

    def __repr__(self) -> str:
        return f"AutodiffPrimitive({self.value!r}, node={self.node!r})"
