"""The gradients container: the value ``backward()`` returns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .graph import Node

__all__ = ["Gradients"]


class Gradients:
    """Gradients by node, as Burn's ``Gradients``.

    During backward, :meth:`register` accumulates every contribution and :meth:`consume` hands
    a node's gradient to its backward step: an intermediate's is removed then (its memory goes
    with it), a leaf's (or a ``retain_grad()`` node's) stays. Afterwards it holds the gradients
    of the leaves that require grad, read with ``tensor.grad(grads)``.

    ``backend`` is the backend the gradient primitives belong to (the inner backend, or the
    autodiff backend itself after ``backward(create_graph=True)``). ``on_register`` hooks are
    called with ``(node, gradients)`` after every registration; :attr:`remaining` tells, for
    each node of the walked graph, how many contributions it still expects, so a hook knows the
    moment a gradient is final (data-parallel training launches its all-reduce there).
    """

    __slots__ = (
        "__weakref__",
        "backend",
        "device",
        "on_register",
        "peak_bytes",
        "recomputed_bytes",
        "recomputed_ops",
        "remaining",
        "values",
    )

    def __init__(self, backend: Any, device: Any = None, remaining: dict[int, int] | None = None):
        self.values: dict[int, Any] = {}
        self.backend = backend
        self.device = device
        self.remaining = remaining if remaining is not None else {}
        self.on_register: list[Callable[[Node, Gradients], None]] = []
        #: bytes of outputs the checkpointer recomputed during this backward
        self.recomputed_bytes = 0
        #: op executions the checkpointer spent recomputing during this backward
        self.recomputed_ops = 0
        #: activation bytes held for backward at the worst moment of forward + backward
        self.peak_bytes = 0

    def register(self, node: Node, value: Any) -> None:
        """Add ``value`` to the gradient of ``node``."""
        values = self.values
        node_id = node.id
        old = values.get(node_id)
        values[node_id] = value if old is None else self.backend.add(old, value)
        if self.on_register:
            left = self.remaining.get(node.id)
            if left is not None:
                self.remaining[node.id] = left - 1
            for hook in self.on_register:
                hook(node, self)

    def consume(self, node: Node) -> Any:
        """The gradient of ``node`` for its backward step (``None`` if nothing reached it)."""
        if node.op is None or node.retain:  # a leaf (Requirement.GRAD), or retained
            return self.values.get(node.id)
        return self.values.pop(node.id, None)

    # -- by node id, for the tensor API -----------------------------------------------------
    def get(self, node_id: int) -> Any:
        return self.values.get(node_id)

    def remove(self, node_id: int) -> Any:
        return self.values.pop(node_id, None)

    def replace(self, node_id: int, value: Any) -> None:
        self.values[node_id] = value

    def __len__(self) -> int:
        return len(self.values)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.values

    def __repr__(self) -> str:
        return f"Gradients({len(self.values)} tensors)"
