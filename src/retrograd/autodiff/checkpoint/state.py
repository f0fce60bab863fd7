"""A saved value's state during backward, as Burn's ``State``: its value, or the mark that it
must be recomputed, and how many reads are left.

The statuses a step plan gives a value (:func:`~retrograd.autodiff.explain.step_plan`) are
named here too: they describe the same thing, a value's state when backward starts.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EVICTED",
    "FREED",
    "LEAF",
    "RECOMPUTE",
    "RECOMPUTED",
    "SAVED",
    "State",
    "nbytes_of",
]


class _Recompute:
    __slots__ = ()

    def __repr__(self) -> str:
        return "RECOMPUTE"


#: Marks an action (or a state) whose value must be recomputed from the node's parents.
RECOMPUTE = _Recompute()

#: A value held from forward until backward's last read of it.
SAVED = "saved"
#: A value the strategy drops after forward and backward recomputes from its parents.
RECOMPUTED = "recomputed"
#: A value a memory budget evicted during forward; backward recomputes it.
EVICTED = "evicted"
#: A value no backward rule reads: freed as soon as forward no longer needs it.
FREED = "freed"
#: A leaf that requires grad: the model's, held whatever the strategy.
LEAF = "leaf"


class State:
    """One saved value during backward (Burn's ``enum State``): ``value`` is the value
    (Burn's ``Computed``) or :data:`RECOMPUTE` (Burn's ``Recompute``); ``reads_left`` counts
    the reads to come, and the checkpointer forgets the state at the last of them."""

    __slots__ = ("reads_left", "value")

    def __init__(self, value: Any, reads_left: int):
        self.value = value
        self.reads_left = reads_left

    @property
    def computed(self) -> bool:
        """Whether the value is held (``False``: it must be recomputed before it is read)."""
        return self.value is not RECOMPUTE

    def __repr__(self) -> str:
        value = "RECOMPUTE" if self.value is RECOMPUTE else type(self.value).__name__
        return f"State({value}, reads_left={self.reads_left})"


def nbytes_of(value: Any) -> int:
    """Bytes of an inner primitive (NumPy arrays and torch tensors both have ``nbytes``)."""
    return getattr(value, "nbytes", 0)
