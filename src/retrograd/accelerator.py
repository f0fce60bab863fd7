"""torch's ``torch.accelerator``: the device-agnostic spelling of :mod:`retrograd.cuda`'s
queries that current scripts use (``pytorch/examples``: ``use_accel = not args.no_accel and
torch.accelerator.is_available()``). The one accelerator retrograd computes on is CUDA,
through ``rg.TorchBackend("cuda")``; without one ``is_available()`` is False,
``current_accelerator()`` None, ``device_count()`` 0, and the calls that need a device raise
an error that says so, as torch's do.

>>> import retrograd as rg
>>> rg.accelerator.is_available() == (rg.accelerator.device_count() > 0)
True
"""

from __future__ import annotations

from typing import Any

from . import cuda
from .device import Device
from .errors import InvalidArgumentError

__all__ = [
    "current_accelerator",
    "current_device_idx",
    "current_device_index",
    "device_count",
    "is_available",
    "set_device_idx",
    "set_device_index",
    "synchronize",
]


def is_available() -> bool:
    """Whether an accelerator (a CUDA device) can be used."""
    return cuda.is_available()


def device_count() -> int:
    """The number of accelerator devices (0 without one)."""
    return cuda.device_count()


def current_accelerator(check_available: bool = False) -> Device | None:
    """``rg.device("cuda")`` where a CUDA device can be used; None otherwise (torch's answer
    on a machine without one, ``check_available`` or not)."""
    return Device("cuda", 0) if cuda.is_available() else None


def _need(op: str) -> None:
    if not cuda.is_available():
        raise InvalidArgumentError(
            f"accelerator.{op}: cannot access an accelerator device when none is available"
        )


def current_device_index() -> int:
    """The index of the current accelerator device."""
    _need("current_device_index")
    return cuda.current_device()


def set_device_index(device: Any) -> None:
    """Make ``device`` (an index, ``"cuda:1"``, ``rg.device``) the current one."""
    _need("set_device_index")
    cuda.set_device(device)


def synchronize(device: Any = None) -> None:
    """Wait until every kernel queued on ``device`` (the current one by default) is done."""
    _need("synchronize")
    cuda.synchronize(device)


current_device_idx = current_device_index  # torch's older spellings
set_device_idx = set_device_index
