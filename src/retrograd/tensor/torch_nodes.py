"""Nodes torch's graph has where retrograd's has none, for ``grad_fn.next_functions`` to walk
torch's structure: the ``TBackward0`` of the weight torch's ``linear`` transposes, the
``SelectBackward0`` of ``x[1, :2]``'s first step, the ``LogSoftmaxBackward0`` of
``cross_entropy``."""

from __future__ import annotations

from typing import Any

__all__ = ["TorchOnlyNode"]


class TorchOnlyNode:
    """A node of torch's graph that records nothing here: its name and its inputs (the nodes,
    or ``None``, its ``next_functions`` lead to), read as a graph node's are."""

    op = None
    plan = None
    consumed = False
    torch_output = 0

    def __init__(self, name: str, inputs: tuple[Any, ...]) -> None:
        self.torch_name = name
        self.torch_inputs = inputs
        self.parents = inputs
