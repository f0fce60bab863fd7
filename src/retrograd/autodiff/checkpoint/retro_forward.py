"""Recomputing a dropped value (Burn's ``RetroForward``): its op's forward, rerun on its
parents' values, in topological order from the kept values it is recomputed from.

A recomputation of one value makes its missing ancestors too. What happens to those
*by-products* is a policy: :class:`KeepByProducts` (Burn's) keeps each until its last read;
:class:`~.anchored.SqrtAnchors` keeps only √n of a long chain.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .state import RECOMPUTE

__all__ = ["KeepByProducts", "recomputing", "rerun", "topological_order"]

_RERUNNING = threading.local()


def recomputing() -> bool:
    """Whether this thread is inside a retro-forward. A FLOP counter reads it: a program's
    FLOPs must not depend on which values its checkpointing strategy chose to recompute."""
    return getattr(_RERUNNING, "depth", 0) > 0


def topological_order(states: dict, tree: dict, keys: Sequence[int]) -> list[int]:
    """``keys`` and their ancestors that must be recomputed first, in recording order (node
    ids count up as forward records, so parents come first); no recursion.

    Recording order, not a walk from each key: it is the order the plan's model reruns a
    step's recomputations in (:func:`~.budget.segments.engine_profile`), and it reruns each
    by-product's last reader as early as forward did. A walk from the softmax of an
    attention block reran the scores before the value slice, so the qkv projection both
    read stayed while the scores were made: nanoGPT at a quarter of its peak held 12.1 MB
    where its schedule counted 11.1."""
    order: list[int] = []
    seen: set[int] = set()
    stack = list(keys)
    while stack:
        current = stack.pop()
        if current in seen or states[current].value is not RECOMPUTE:
            continue
        seen.add(current)
        order.append(current)
        stack.extend(parent.id for parent in tree[current].parents)
    order.sort()
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

    def transient(self, order: list[int], keys: Sequence[int], tree: dict) -> None:
        """No by-product is dropped early."""
        return None
