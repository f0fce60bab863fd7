"""The handle every ``register_*_hook`` returns (torch's ``RemovableHandle``): tensor hooks
here, module and optimizer hooks above take it from this layer."""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["RemovableHandle"]


class RemovableHandle:
    """What registering a hook returns: ``remove()`` unregisters it (also on leaving a
    ``with`` block). It holds the table of hooks it was registered in (a dict by key), which
    for tensor hooks a leaf's successors share (:meth:`.backend.Autodiff.succeed_leaf`).

    torch's own form, which a module with hooks of its own uses (``handle =
    RemovableHandle(self._hooks); self._hooks[handle.id] = hook``), gives no key: the handle
    takes the next of one process-wide count; ``extra_dict`` names more tables it removes from.

    >>> hooks = {}
    >>> handle = RemovableHandle(hooks)
    >>> hooks[handle.id] = print
    >>> handle.remove(); hooks
    {}
    """

    _next_id = itertools.count()

    def __init__(
        self, table: dict[int, Any], key: int | None = None, *, extra_dict: Any = None
    ) -> None:
        self._table = table
        self.id = next(RemovableHandle._next_id) if key is None else key
        extra = () if extra_dict is None else extra_dict
        self._extra = [extra] if isinstance(extra, dict) else list(extra)

    def remove(self) -> None:
        for table in (self._table, *self._extra):
            table.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()
