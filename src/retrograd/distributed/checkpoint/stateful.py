"""torch's ``torch.distributed.checkpoint.stateful``: what :func:`save` and :func:`load`
take by its state (``state_dict``/``load_state_dict``)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Stateful"]


@runtime_checkable
class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...
