"""torch's ``torch.cpu``: the device queries of the CPU (always there, one device) and
``torch.cpu.amp``'s ``autocast`` and ``GradScaler``, as scripts call them unguarded."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from . import amp as _amp

__all__ = ["amp", "current_device", "device_count", "is_available", "set_device", "synchronize"]


def is_available() -> bool:
    """True: the CPU is always there."""
    return True


def device_count() -> int:
    """1, as torch's: the CPU is one device."""
    return 1


def current_device() -> str:
    """``"cpu"``, as torch's."""
    return "cpu"


def set_device(device: Any) -> None:
    """Nothing to set: there is one CPU device (torch's does nothing either)."""


def synchronize(device: Any = None) -> None:
    """Nothing to wait for: CPU work is done when its call returns."""


class _CpuAutocast(_amp.autocast):
    """``torch.cpu.amp.autocast(enabled=True, dtype=torch.bfloat16, cache_enabled=True)``:
    :class:`retrograd.amp.autocast` on the CPU."""

    def __init__(self, enabled: bool = True, dtype: Any = "bfloat16", cache_enabled: bool = True):
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


_CpuAutocast.__name__ = _CpuAutocast.__qualname__ = "autocast"

#: ``torch.cpu.amp``
amp = SimpleNamespace(autocast=_CpuAutocast, GradScaler=_amp.GradScaler)
