"""``BalancedCheckpointing``: memory-bound outputs recomputed, compute-bound ones kept (Burn's
``BalancedCheckpointing``)."""

from __future__ import annotations

from typing import Any

from .strategy import CheckpointStrategy

__all__ = ["BalancedCheckpointing"]


class BalancedCheckpointing(CheckpointStrategy):
    """Outputs of memory-bound ops are recomputed during backward; compute-bound ones kept.

    A memory-bound output that a compute-bound op reads in its backward rule (the input of a
    matmul, say) is kept too: recomputing it could mean recomputing a whole residual stream.
    """

    def recomputes(self, op: Any) -> bool:
        return op.memory_bound
