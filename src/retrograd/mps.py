"""torch's ``torch.mps`` (Apple's GPUs): retrograd runs on none, so its answers are torch's on a
machine without one: not available, no devices, seeding does nothing, and the calls that need
the device (``synchronize``, ``empty_cache``, the memory counters, the random state) raise an
error that says there is none, as torch's raise ``RuntimeError``. Scripts choose the device
with ``torch.backends.mps.is_available()`` (``rg.backends.mps``) and then call these only on
the Mac.

>>> import retrograd as rg
>>> rg.mps.is_available(), rg.mps.device_count()
(False, 0)
"""

from __future__ import annotations

from typing import Any, NoReturn

from .errors import UninitializedError

__all__ = [
    "current_allocated_memory",
    "device_count",
    "driver_allocated_memory",
    "empty_cache",
    "get_rng_state",
    "is_available",
    "manual_seed",
    "recommended_max_memory",
    "seed",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "synchronize",
]


def is_available() -> bool:
    """False: retrograd has no MPS backend."""
    return False


def device_count() -> int:
    """0, as torch's answer on a machine without an MPS device."""
    return 0


def manual_seed(seed: int) -> None:
    """Nothing to seed (torch's does nothing without the device either)."""


def _no_device(op: str) -> NoReturn:
    raise UninitializedError(
        f"mps.{op}: no MPS device is available (retrograd runs on the CPU, or on CUDA through "
        "rg.TorchBackend)"
    )


def synchronize() -> NoReturn:
    """Refused: there is no MPS device to wait for."""
    _no_device("synchronize")


def empty_cache() -> NoReturn:
    """Refused: there is no MPS memory to free."""
    _no_device("empty_cache")


def current_allocated_memory() -> NoReturn:
    """Refused: there is no MPS memory."""
    _no_device("current_allocated_memory")


def driver_allocated_memory() -> NoReturn:
    """Refused: there is no MPS memory."""
    _no_device("driver_allocated_memory")


def recommended_max_memory() -> NoReturn:
    """Refused: there is no MPS memory."""
    _no_device("recommended_max_memory")


def set_per_process_memory_fraction(fraction: float) -> NoReturn:
    """Refused: there is no MPS memory."""
    _no_device("set_per_process_memory_fraction")


def seed() -> NoReturn:
    """Refused: there is no MPS generator."""
    _no_device("seed")


def get_rng_state(device: Any = "mps") -> NoReturn:
    """Refused: there is no MPS generator."""
    _no_device("get_rng_state")


def set_rng_state(new_state: Any, device: Any = "mps") -> NoReturn:
    """Refused: there is no MPS generator."""
    _no_device("set_rng_state")
