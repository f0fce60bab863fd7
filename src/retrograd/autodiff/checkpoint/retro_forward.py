"""Recomputing a dropped value (Burn's ``RetroForward``): its op's forward, rerun on its
parents' values, in topological order from the kept values it is recomputed from.

A recomputation of one value makes its missing ancestors too. What happens to those
*by-products* is a policy: :class:`KeepByProducts` (Burn's) keeps each until its last read;
:class:`~.anchored.SqrtAnchors` keeps only √n of a long chain.
"""

from __future__ import annotations

import threading
from typing import Any

from .state import RECOMPUTE

__all__ = ["KeepByProducts", "recomputing", "rerun", "topological_order"]

_RERUNNING = threading.local()


def recomputing() -> bool:
    """Whether this thread is inside a retro-forward. A FLOP counter reads it: a program's
    FLOPs must not depend on which values its checkpointing strategy chose to recompute."""
    return getattr(_RERUNNING, "depth", 0) > 0


def topological_order(states: dict, tree: dict, key: int) -> list[int]:
    """``key`` and its ancestors that must be recomputed first, parents first; no recursion."""
    order: list[int] = []
    seen: set[int] = set()
    stack: list[tuple[int, bool]] = [(key, False)]
    while stack:
        current, expanded = stack.pop()
        if expanded:
            order.append(current)
            continue
        if current in seen or states[current].value is not RECOMPUTE:
            continue
        seen.add(current)
        stack.append((current, True))
        stack.extend((parent.id, False) for parent in reversed(tree[current].parents))
    return order


def rerun(node: Any, inner: Any, values: list) -> Any:
    """``node``'s output again: its op's forward on the inner backend and its parents'
    values (the retro-forward), without the ``aux`` output."""
    op = node.op
    depth = getattr(_RERUNNING, "depth", 0)
    _RERUNNING.depth = depth + 1
    try:
        output = op.run_forward(inner, values, node.params[: len(op.params)])
    finally:
        _RERUNNING.depth = depth
    return output[0] if op.aux else output


class KeepByProducts:
    """Every by-product of a recomputation is kept until its last read (Burn): each value is
    recomputed once, at the memory of the whole chain."""

    __slots__ = ()

    def transient(self, order: list[int], key: int, tree: dict) -> None:
        """No by-product is dropped early."""
        return None
