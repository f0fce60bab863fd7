"""``NoCheckpointing``: every needed intermediate output is kept (Burn's default)."""

from __future__ import annotations

from typing import Any

from .strategy import CheckpointStrategy

__all__ = ["NoCheckpointing"]


class NoCheckpointing(CheckpointStrategy):
    """Every needed intermediate output is kept (Burn treats every op as compute-bound)."""

    def recomputes(self, op: Any) -> bool:
        return False
