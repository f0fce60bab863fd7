"""√n anchoring: a long recomputation keeps every k-th by-product as an anchor and drops the
others once it has read them (Chen et al. 2016, *Training Deep Nets with Sublinear Memory
Cost*).

A recomputation's by-products are values later steps read too. Keeping them all until their
last read (:class:`~.retro_forward.KeepByProducts`) costs the memory of the whole chain;
dropping them all again (so that each read recomputes its chain) costs n²/2 op executions on a
chain of n. With anchors every k = √n values, the later reads recompute short segments from
the anchors, each segment once: a chain of n costs about 2n op executions and holds about 2√n
values. This keeps backward linear in the number of ops under every strategy (API.md
section 4).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["SqrtAnchors", "Transient"]


class SqrtAnchors:
    """Keep every ``every``-th by-product of a recomputation longer than ``every`` ops."""

    __slots__ = ("every",)

    def __init__(self, every: int):
        self.every = every

    @classmethod
    def for_graph(cls, recomputable: int) -> SqrtAnchors:
        """Anchors √n apart, n being the number of recomputable nodes of the walked graph."""
        return cls(max(4, math.isqrt(recomputable) + 1))

    def transient(self, order: list[int], keys: Sequence[int], tree: dict) -> Transient | None:
        """What the recomputation of ``keys`` along ``order`` drops once read (``None``: a
        short one, which keeps everything)."""
        every = self.every
        if len(order) <= every:
            return None
        reads: dict[int, int] = {}
        for node_id in order:
            for parent in tree[node_id].parents:
                reads[parent.id] = reads.get(parent.id, 0) + 1
        dropped = {node_id for i, node_id in enumerate(order, 1) if i % every}
        dropped.difference_update(keys)
        return Transient(reads, dropped)


class Transient:
    """The by-products one recomputation drops once it has read them: ``dropped`` (every
    value of the order but the anchors and the value asked for), with ``reads``, how many
    times the recomputation still reads each value."""

    __slots__ = ("dropped", "reads")

    def __init__(self, reads: dict[int, int], dropped: set[int]):
        self.reads = reads
        self.dropped = dropped

    def read_parents(self, node: Any, drop: Callable[[int], bool]) -> None:
        """``node`` was recomputed: its parents were read; ``drop`` those read for the last
        time by this recomputation that are not anchors."""
        reads, dropped = self.reads, self.dropped
        for parent in node.parents:
            parent_id = parent.id
            reads[parent_id] -= 1
            if reads[parent_id] == 0 and parent_id in dropped:
                drop(parent_id)
