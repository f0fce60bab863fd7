"""``NoCheckpointing``: every needed intermediate output is kept (Burn's default)."""

from __future__ import annotations

from typing import Any

from .strategy import CheckpointStrategy

__all__ = ["NoCheckpointing"]


class NoCheckpointing(CheckpointStrategy):
    """Every needed intermediate output is kept (Burn treats every op as compute-bound)."""

    def recomputes(self, op: Any) -> bool:
        return False

    #: it never recomputes: the engine saves with ``save_kept`` directly (``saver``)
    recomputes.never = True  # type: ignore[attr-defined]
