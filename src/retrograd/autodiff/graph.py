"""The autodiff graph: nodes and the autodiff primitive.

The graph *is* the web of nodes: a node holds its parents and nothing else holds a node but its
children and the tensors built on it. So a graph that no tensor references is freed by Python's
reference counting the moment its last tensor goes, whether it was backpropagated or not, and
graphs built in different threads share no structure (and no lock) until an op joins them, at
which point the joined node simply has parents in both.

A node holds what reverse-mode autodiff needs. What the other subsystems need hangs off it in
records of their own: ``saved``, checkpointing's (:class:`~.checkpoint.builder.Saved`: the keys
its rules read, the values held for them, whether it is recomputed), and ``distributed``, data
parallel's (:class:`~.params.DistributedParam`, on the leaves marked for all-reduce).
"""

from __future__ import annotations

import weakref
from typing import Any

from .checkpoint.builder import NOTHING_SAVED
from .ids import new_node_id

__all__ = [
    "CAPTURED",
    "FROZEN_LEAVES",
    "INFERENCE_SEEN",
    "AutodiffPrimitive",
    "InferencePrimitive",
    "Node",
    "new_node_id",
]

#: ``Node.retain`` of a non-leaf input ``autograd.grad`` keeps the gradient of for one backward
#: (the user's ``retain_grad()`` sets ``True``): truthy as well, but its value is captured
#: before the tensor's hooks when its step runs, where a retained ``.grad`` is the hooked one
CAPTURED = "captured"

#: the leaves frozen by ``requires_grad_(False)`` (by node id), kept while a graph holds them:
#: a backward through a graph recorded before the freeze gives them no gradient, as torch's
#: engine accumulates none into a leaf that does not require grad
FROZEN_LEAVES: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


class Node:
    """One recorded operation (or a leaf that requires grad).

    - ``id``: unique, increasing; ``order``: depth, 1 + the deepest parent, 0 for leaves.
    - ``op``: the :class:`~retrograd.autodiff.ops.Op` that made it (``None`` for leaves);
      ``parents``: one entry per op input, the input's node or ``None`` when untracked.
    - ``params``: what the backward rules read besides saved tensors: the op's parameters,
      then the input shapes/dtypes its plan asks for, then the ``aux`` output if any.
    - ``plan``: the op's :class:`~retrograd.autodiff.ops.Plan` for this requires-grad mask
      (how each rule finds its arguments); ``None`` for leaves.
    - ``saved``: checkpointing's record for this node's backward step
      (:class:`~.checkpoint.builder.Saved`).
    - ``consumed``: a backward has walked the node and released what it held; it cannot be
      backpropagated through again.

    Rarely set, so they live in the class until set (a node gets a ``__dict__`` only then):
    ``retain`` (``retain_grad()`` was called), ``bshapes`` (input shapes broadcasting changed,
    for the engine to sum gradients back to), ``distributed`` (the
    :class:`~.params.DistributedParam` of a leaf marked for gradient all-reduce), ``hooks``
    (``register_hook``'s: a dict of ``hook(backend, gradient) -> gradient`` by key, called
    in order on the node's summed gradient before it flows on or is returned),
    ``input_hooks`` (a dict of ``hook(backend, input_gradients, gradient) -> input_gradients
    or None`` by key, called once the node's step has computed its inputs' gradients, before
    they flow on: torch's hooks on a backward node, which the deprecated module backward
    hooks use); ``torch_name`` (the class name of torch's node for the public op whose result
    this node made, where it differs from this node's op's: ``x.sum(1)``'s reshape);
    ``torch_inputs`` (the nodes, or ``None``, of the differentiable tensor arguments of that
    public op, where it is a composite whose first records torch's graph does not have:
    torch's ``next_functions``) and ``torch_output`` (which output of that op this node's
    result is: ``x.unbind()[1]``'s is 1).

    The recording path (:meth:`Autodiff._record <retrograd.autodiff.backend.Autodiff._record>`)
    makes nodes without calling ``__init__``, assigning the same slots: a Python ``__init__``
    costs a frame per recorded op.
    """

    __slots__ = (
        "__dict__",
        "__weakref__",
        "consumed",
        "id",
        "op",
        "order",
        "params",
        "parents",
        "plan",
        "saved",
    )

    retain = False
    torch_name = None
    torch_inputs = None
    torch_output = 0
    bshapes = None
    distributed = None
    hooks = None
    input_hooks = None
    #: the id of the node whose gradient is this one's tensor's (a write under ``no_grad``)
    gradient_of = None

    def __init__(self, node_id: int, op: Any, parents: tuple, params: tuple, order: int, plan: Any):
        self.id = node_id
        self.order = order
        self.op = op
        self.parents = parents
        self.params = params
        self.plan = plan
        self.saved = NOTHING_SAVED
        self.consumed = False

    @classmethod
    def leaf(cls) -> Node:
        """A leaf that requires grad."""
        return cls(new_node_id(), None, (), (), 0, None)

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


class InferencePrimitive(AutodiffPrimitive):
    """The primitive of an inference tensor (one ``inference_mode()`` made): an
    :class:`AutodiffPrimitive` whose class says so, which a record refuses to save for
    backward, as torch refuses. A primitive becomes one by a class change, which needs no
    copy (:meth:`~retrograd.autodiff.backend.Autodiff.mark_inference`)."""

    __slots__ = ()


#: Whether an inference primitive was ever made: until then a record does not look for one
#: among what it saves
INFERENCE_SEEN = [False]
