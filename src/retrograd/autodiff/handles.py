"""The handle every ``register_*_hook`` returns (torch's ``RemovableHandle``): tensor hooks
here, module and optimizer hooks above take it from this layer."""

from __future__ import annotations

from typing import Any

__all__ = ["RemovableHandle"]


class RemovableHandle:
    """What registering a hook returns: ``remove()`` unregisters it (also on leaving a
    ``with`` block). It holds the table of hooks it was registered in (a dict by key), which
    for tensor hooks a leaf's successors share (:meth:`.backend.Autodiff.succeed_leaf`)."""

    def __init__(self, table: dict[int, Any], key: int):
        self._table, self.id = table, key

    def remove(self) -> None:
        self._table.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()
