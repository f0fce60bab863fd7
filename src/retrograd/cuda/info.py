"""torch.cuda's informational calls that scripts make unguarded (logging the device's name and
memory, saving every device's random state with a checkpoint): with a CUDA device, torch's
answers; without one, torch's CPU build's (an empty list, ``{}``, 0, or, where torch's CPU
build raises, an error of the hierarchy that says no CUDA device is available)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ..backend.accelerators import (
    cuda_call,
    cuda_device_count,
    cuda_rng_states,
    set_cuda_rng_states,
)
from ..device import Device
from ..errors import InvalidArgumentError, OutOfMemoryError

__all__ = [
    "OutOfMemoryError",
    "can_device_access_peer",
    "clock_rate",
    "default_generators",
    "device_memory_used",
    "get_arch_list",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_gencode_flags",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "get_sync_debug_mode",
    "has_half",
    "has_magma",
    "host_memory_stats",
    "init",
    "is_current_stream_capturing",
    "is_initialized",
    "is_tf32_supported",
    "max_memory_cached",
    "mem_get_info",
    "memory_cached",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "memory_usage",
    "power_draw",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_sync_debug_mode",
    "temperature",
    "utilization",
]

has_half = True
has_magma = False
#: torch's CUDA generators, one per device: none here (retrograd's draws on a GPU come from
#: the stream ``rg.manual_seed`` seeds; ``rg.cuda.manual_seed`` seeds torch's)
default_generators: tuple = ()


def device_index(op: str, device: Any) -> int:
    """A device (an int, ``"cuda:1"``, ``rg.device``) as the index of an existing GPU."""
    count = cuda_device_count()
    if count == 0:
        raise InvalidArgumentError(
            f"cuda.{op}: no CUDA device is available (torch sees none, or torch is not installed)"
        )
    if device is None:
        return int(cuda_call("current_device"))
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        target = (
            Device(device)
            if isinstance(device, str | Device)
            else Device(device.type, device.index or 0)
        )
        if target.kind != "cuda":
            raise InvalidArgumentError(f"cuda.{op}: expected a CUDA device, got {target}")
        index = target.index
    if not 0 <= index < count:
        raise InvalidArgumentError(
            f"cuda.{op}: invalid device ordinal {index}: there are {count} CUDA devices"
        )
    return index


def _device(op: str, device: Any = None) -> int:
    return device_index(op, device)


def _to_retrograd(state: Any) -> Any:
    from ..tensor import tensor

    return tensor(state)


def _host(state: Any) -> Any:
    import numpy as np

    return np.asarray(state.numpy() if hasattr(state, "numpy") else state, dtype=np.uint8)


# -- answered on the CPU as torch's CPU build answers ------------------------------------------
def get_rng_state_all() -> list:
    """Every CUDA device's random state (a uint8 tensor each): ``[]`` without a device."""
    if cuda_device_count() == 0:
        return []
    return [_to_retrograd(s) for s in cuda_rng_states("get_rng_state_all")]


def set_rng_state_all(new_states: Any) -> None:
    """Set every CUDA device's random state (:func:`get_rng_state_all`'s); a no-op without a
    device, as torch's CPU build."""
    states = list(new_states)
    if cuda_device_count() > 0:
        set_cuda_rng_states("set_rng_state_all", [_host(s) for s in states])


def set_rng_state(new_state: Any, device: Any = "cuda") -> None:
    """Set a CUDA device's random state; a no-op without a device, as torch's CPU build."""
    if cuda_device_count() > 0:
        set_cuda_rng_states("set_rng_state", _host(new_state), _device("set_rng_state", device))


def memory_stats(device: Any = None) -> dict:
    """torch's allocator statistics (an empty dict without a device)."""
    if cuda_device_count() == 0:
        return OrderedDict()
    return cuda_call("memory_stats", _device("memory_stats", device))


def memory_stats_as_nested_dict(device: Any = None) -> dict:
    if cuda_device_count() == 0:
        return {}
    return cuda_call("memory_stats_as_nested_dict", _device("memory_stats", device))


def host_memory_stats() -> dict:
    if cuda_device_count() == 0:
        return OrderedDict()
    return cuda_call("host_memory_stats")


def _reserved(name: str, device: Any) -> int:
    # torch's CPU build answers 0, whatever device is named
    if cuda_device_count() == 0:
        return 0
    return int(cuda_call(name, device_index(name, device)))


def memory_cached(device: Any = None) -> int:
    """torch's deprecated name of ``memory_reserved`` (0 without a device)."""
    return _reserved("memory_reserved", device)


def max_memory_cached(device: Any = None) -> int:
    """torch's deprecated name of ``max_memory_reserved`` (0 without a device)."""
    return _reserved("max_memory_reserved", device)


def get_arch_list() -> list:
    """The CUDA architectures torch was built for (``[]`` without CUDA)."""
    return list(cuda_call("get_arch_list")) if cuda_device_count() else []


def get_gencode_flags() -> str:
    return str(cuda_call("get_gencode_flags")) if cuda_device_count() else ""


def is_initialized() -> bool:
    """Whether torch's CUDA state is initialized (False without a device)."""
    return bool(cuda_call("is_initialized")) if cuda_device_count() else False


def is_tf32_supported() -> bool:
    return bool(cuda_call("is_tf32_supported")) if cuda_device_count() else False


# -- refused without a device, as torch's CPU build refuses them ---------------------------------
def _on_device(op: str, *args: Any, device: Any = None, index: bool = True) -> Any:
    """``torch.cuda.<op>`` on the device (checked: an error without one)."""
    at = _device(op, device)
    return cuda_call(op, *args, at) if index else cuda_call(op, *args)


def get_rng_state(device: Any = "cuda") -> Any:
    """A CUDA device's random state (a uint8 tensor)."""
    return _to_retrograd(cuda_rng_states("get_rng_state", _device("get_rng_state", device)))


def get_device_properties(device: Any = None) -> Any:
    """torch's properties of a CUDA device (``name``, ``total_memory``, ``major``...)."""
    return _on_device("get_device_properties", device=device)


def get_device_name(device: Any = None) -> str:
    return str(_on_device("get_device_name", device=device))


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return tuple(_on_device("get_device_capability", device=device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes of a CUDA device."""
    return tuple(_on_device("mem_get_info", device=device))


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    return str(_on_device("memory_summary", device=device, index=False))


def memory_snapshot(mempool_id: Any = None, include_traces: bool = True) -> Any:
    _device("memory_snapshot")
    return cuda_call("memory_snapshot")


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _on_device("reset_accumulated_memory_stats", device=device)


def reset_max_memory_allocated(device: Any = None) -> None:
    _on_device("reset_max_memory_allocated", device=device)


def reset_max_memory_cached(device: Any = None) -> None:
    _on_device("reset_max_memory_cached", device=device)


def init() -> None:
    """Initialize torch's CUDA state (an error without a device, as torch's CPU build)."""
    _device("init")
    cuda_call("init")


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    _on_device("set_per_process_memory_fraction", fraction, device=device)


def get_per_process_memory_fraction(device: Any = None) -> float:
    return float(_on_device("get_per_process_memory_fraction", device=device))


def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    at = _device("can_device_access_peer", device)
    peer = _device("can_device_access_peer", peer_device)
    return bool(cuda_call("can_device_access_peer", at, peer))


def get_sync_debug_mode() -> int:
    _device("get_sync_debug_mode")
    return int(cuda_call("get_sync_debug_mode"))


def set_sync_debug_mode(debug_mode: int | str) -> None:
    _device("set_sync_debug_mode")
    cuda_call("set_sync_debug_mode", debug_mode)


def is_current_stream_capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (an error without a device, as
    torch's CPU build)."""
    _device("is_current_stream_capturing")
    return bool(cuda_call("is_current_stream_capturing"))


# NVML's readings of a device (torch reads them through ``pynvml``)
def utilization(device: Any = None) -> int:
    return int(_on_device("utilization", device=device))


def temperature(device: Any = None) -> int:
    return int(_on_device("temperature", device=device))


def power_draw(device: Any = None) -> int:
    return int(_on_device("power_draw", device=device))


def clock_rate(device: Any = None) -> int:
    return int(_on_device("clock_rate", device=device))


def memory_usage(device: Any = None) -> int:
    return int(_on_device("memory_usage", device=device))


def device_memory_used(device: Any = None) -> int:
    return int(_on_device("device_memory_used", device=device))
