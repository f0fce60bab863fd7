"""``BalancedCheckpointing``: memory-bound outputs recomputed, compute-bound ones kept (Burn's
``BalancedCheckpointing``)."""

from __future__ import annotations

from typing import Any

from .strategy import CheckpointStrategy

__all__ = ["VIEWS", "BalancedCheckpointing"]

#: Memory-bound ops whose output is a view of their input wherever the layout allows (on NumPy
#: and torch alike): recomputing one needs its input kept, which is the same memory, so it
#: frees nothing, and each recomputation is counted as new bytes. They are kept.
VIEWS = frozenset({"reshape", "permute", "swap_dims", "expand", "slice"})


class BalancedCheckpointing(CheckpointStrategy):
    """Outputs of memory-bound ops are recomputed during backward; compute-bound ones kept.

    A memory-bound output that a compute-bound op reads in its backward rule (the input of a
    matmul, say) is kept too: recomputing it could mean recomputing a whole residual stream.
    Views (:data:`VIEWS`) are kept: recomputing one frees nothing.
    """

    def recomputes(self, op: Any) -> bool:
        return op.memory_bound and op.name not in VIEWS
