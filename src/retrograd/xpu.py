"""torch's ``torch.xpu`` (Intel's GPUs): retrograd runs on none, so its answers are those of a
torch built without XPU: not available, no devices, seeding and ``empty_cache`` do nothing,
the memory counters are 0, and the calls that need a device (``synchronize``,
``current_device``, ``get_device_name``, the random state) raise an error that says there is
none, where torch's assert.

>>> import retrograd as rg
>>> rg.xpu.is_available(), rg.xpu.device_count(), rg.xpu.memory_allocated()
(False, 0, 0)
"""

from __future__ import annotations

from typing import Any, NoReturn

from .errors import UninitializedError

__all__ = [
    "current_device",
    "device_count",
    "empty_cache",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "is_available",
    "is_bf16_supported",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "synchronize",
]


def is_available() -> bool:
    """False: retrograd has no XPU backend."""
    return False


def device_count() -> int:
    """0, as a torch built without XPU answers."""
    return 0


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False: there is no XPU device."""
    return False


def manual_seed(seed: int) -> None:
    """Nothing to seed (a torch without XPU does nothing either)."""


def manual_seed_all(seed: int) -> None:
    """Nothing to seed."""


def seed() -> None:
    """Nothing to seed."""


def seed_all() -> None:
    """Nothing to seed."""


def empty_cache() -> None:
    """Nothing to free (a torch without XPU does nothing either)."""


def reset_peak_memory_stats(device: Any = None) -> None:
    """Nothing to reset."""


def memory_allocated(device: Any = None) -> int:
    """0: no XPU memory is held."""
    return 0


def max_memory_allocated(device: Any = None) -> int:
    """0: no XPU memory is held."""
    return 0


def memory_reserved(device: Any = None) -> int:
    """0: no XPU memory is held."""
    return 0


def max_memory_reserved(device: Any = None) -> int:
    """0: no XPU memory is held."""
    return 0


def _no_device(op: str) -> NoReturn:
    raise UninitializedError(
        f"xpu.{op}: no XPU device is available (retrograd runs on the CPU, or on CUDA through "
        "rg.TorchBackend)"
    )


def synchronize(device: Any = None) -> NoReturn:
    """Refused: there is no XPU device to wait for."""
    _no_device("synchronize")


def current_device() -> NoReturn:
    """Refused: there is no XPU device."""
    _no_device("current_device")


def set_device(device: Any) -> NoReturn:
    """Refused: there is no XPU device."""
    _no_device("set_device")


def get_device_name(device: Any = None) -> NoReturn:
    """Refused: there is no XPU device."""
    _no_device("get_device_name")


def get_device_properties(device: Any = None) -> NoReturn:
    """Refused: there is no XPU device."""
    _no_device("get_device_properties")


def get_rng_state(device: Any = "xpu") -> NoReturn:
    """Refused: there is no XPU generator."""
    _no_device("get_rng_state")


def set_rng_state(new_state: Any, device: Any = "xpu") -> NoReturn:
    """Refused: there is no XPU generator."""
    _no_device("set_rng_state")
