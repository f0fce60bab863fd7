"""Logical devices."""

from __future__ import annotations

import threading

__all__ = ["Device"]

_INTERNED: dict = {}
_LOCK = threading.Lock()


class Device:
    """A logical device: a kind (``"cpu"``, ``"cuda"``) and an index. ``rg.device`` is this
    class, as ``torch.device``: ``rg.device("cuda:1")``, ``rg.device("cpu")``.

    Devices are interned, so ``Device("cpu", 1) is Device("cpu", 1)``; several cpu devices may
    live in one process (the in-process data-parallel engine gives each its own thread).

    >>> Device("cpu", 1)
    Device('cpu', 1)
    """

    __slots__ = ("__weakref__", "index", "kind")

    kind: str
    index: int

    def __new__(cls, kind: str = "cpu", index: int = 0) -> Device:
        if isinstance(kind, Device):
            return kind
        if ":" in kind:
            kind, _, number = kind.partition(":")
            index = int(number)
        key = (str(kind), int(index))
        device = _INTERNED.get(key)
        if device is None:
            with _LOCK:
                device = _INTERNED.get(key)
                if device is None:
                    device = object.__new__(cls)
                    object.__setattr__(device, "kind", key[0])
                    object.__setattr__(device, "index", key[1])
                    _INTERNED[key] = device
        return device

    @property
    def type(self) -> str:
        """The kind, under torch's name (``torch.device("cuda").type``)."""
        return self.kind

    def __setattr__(self, name, value):
        raise AttributeError("Device is immutable")

    def __repr__(self) -> str:
        return f"Device({self.kind!r}, {self.index})"

    def __str__(self) -> str:
        return f"{self.kind}:{self.index}"

    def __reduce__(self):
        return (Device, (self.kind, self.index))


CPU0 = Device("cpu", 0)
