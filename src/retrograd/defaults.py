"""torch's process-wide defaults and their queries, answered for retrograd:
``get_default_device``/``set_default_device`` and the autocast state
(``is_autocast_enabled``, ``get_autocast_dtype``...).

Tensors are made on their backend's device (API.md section 1), so the default device is the
current backend's; ``set_default_device`` accepts the device that already is the default and
refuses another with an error that says how to get there (a backend on that device).

The autocast state is :mod:`retrograd.amp`'s (per thread and device type, as torch's):
``is_autocast_enabled(device_type)`` is True inside an enabled ``autocast`` region (or after
``set_autocast_enabled``); ``get_autocast_dtype(device_type)`` is the dtype it computes in
(by default bfloat16 on the CPU, float16 on a GPU, as torch answers it).

>>> import retrograd as rg
>>> rg.get_default_device().type, rg.is_autocast_enabled("cpu"), rg.get_autocast_dtype("cpu")
('cpu', False, retrograd.bfloat16)
"""

from __future__ import annotations

import contextvars
import warnings
from typing import Any

from .amp import clear_autocast_cache, is_autocast_cache_enabled, set_autocast_cache_enabled
from .context import current_backend, thread_device
from .device import Device
from .errors import InvalidArgumentError
from .tensor.autocasting import state as _autocast_state
from .tensor.dtypes import DTYPE_OBJECTS

__all__ = [
    "autocast_decrement_nesting",
    "autocast_increment_nesting",
    "clear_autocast_cache",
    "get_autocast_cpu_dtype",
    "get_autocast_dtype",
    "get_autocast_gpu_dtype",
    "get_autocast_ipu_dtype",
    "get_autocast_xla_dtype",
    "get_default_device",
    "is_autocast_cache_enabled",
    "is_autocast_cpu_enabled",
    "is_autocast_enabled",
    "is_autocast_ipu_enabled",
    "is_autocast_xla_enabled",
    "set_autocast_cache_enabled",
    "set_autocast_cpu_dtype",
    "set_autocast_cpu_enabled",
    "set_autocast_dtype",
    "set_autocast_enabled",
    "set_autocast_gpu_dtype",
    "set_autocast_ipu_dtype",
    "set_autocast_ipu_enabled",
    "set_autocast_xla_dtype",
    "set_autocast_xla_enabled",
    "set_default_device",
]

#: torch's default autocast dtype per device type (the device types these functions take)
_AUTOCAST_DTYPES = {
    "cpu": "bfloat16",
    "cuda": "float16",
    "mps": "float16",
    "xpu": "bfloat16",
    "ipu": "float16",
    "xla": "bfloat16",
}


def get_default_device() -> Device:
    """The device new tensors are made on: the current backend's."""
    return thread_device.get() or current_backend().default_device


#: the thread's device ``set_default_device("meta")`` replaced (wrapped in a tuple: ``None``
#: is a value), put back when another device is set; torch's default device is per-thread
_BEFORE_META: contextvars.ContextVar[tuple[Any] | None] = contextvars.ContextVar(
    "retrograd_before_meta", default=None
)


def set_default_device(device: Any) -> None:
    """torch's ``set_default_device``: ``"meta"`` makes this thread's new tensors meta ones
    (as ``with rg.device("meta"):`` does) until another device is set; otherwise accepted for
    the device tensors are already made on (``None`` means the CPU, as torch's); another
    device raises, naming the backend to use."""
    target = Device("cpu") if device is None else _as_device(device)
    before = _BEFORE_META.get()
    if target.kind == "meta":
        if before is None:
            _BEFORE_META.set((thread_device.get(),))
        thread_device.set(target)
        return
    if before is not None:
        thread_device.set(before[0])
        _BEFORE_META.set(None)
    current = get_default_device()
    if target.kind != current.kind or (_has_index(device) and target.index != current.index):
        raise InvalidArgumentError(
            f"set_default_device: tensors are made on their backend's device ({current}), not "
            f"on {target}; make the backend compute there instead, e.g. "
            f"rg.set_default_backend(rg.Autodiff(rg.TorchBackend({str(target)!r})))"
        )


def _has_index(device: Any) -> bool:
    if isinstance(device, Device):
        return True
    if isinstance(device, int):
        return True
    return isinstance(device, str) and ":" in device


def _as_device(device: Any) -> Device:
    if isinstance(device, Device):
        return device
    if isinstance(device, int):
        return Device("cuda", device)
    if isinstance(device, str):
        return Device(device)
    if isinstance(getattr(device, "type", None), str):  # a torch.device
        return Device(device.type, getattr(device, "index", None) or 0)
    raise InvalidArgumentError(f"set_default_device: expected a device, got {device!r}")


def _device_type(op: str, device_type: str) -> str:
    if not isinstance(device_type, str) or device_type not in _AUTOCAST_DTYPES:
        raise InvalidArgumentError(
            f"{op}: expected one of {', '.join(_AUTOCAST_DTYPES)} as device_type, "
            f"got {device_type!r}"
        )
    return device_type


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether autocast is on for ``device_type`` in this thread (torch's default device type
    is ``"cuda"``)."""
    _device_type("is_autocast_enabled", device_type)
    return _autocast_state.enabled.get(device_type, False)


def _deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"rg.{old}() is deprecated, as torch's is. Please use rg.{new} instead.",
        DeprecationWarning,
        stacklevel=3,
    )


def is_autocast_cpu_enabled() -> bool:
    """``is_autocast_enabled("cpu")`` (deprecated, as torch's)."""
    _deprecated("is_autocast_cpu_enabled", "is_autocast_enabled('cpu')")
    return is_autocast_enabled("cpu")


def get_autocast_dtype(device_type: str) -> Any:
    """The dtype torch's autocast uses on ``device_type`` (its default there, or the one
    :func:`set_autocast_dtype` set)."""
    device_type = _device_type("get_autocast_dtype", device_type)
    name = _autocast_state.dtypes.get(device_type, _AUTOCAST_DTYPES[device_type])
    return DTYPE_OBJECTS[name]


def set_autocast_dtype(device_type: str, dtype: Any) -> None:
    """Set the dtype autocast computes in on ``device_type`` in this thread (an ``autocast``
    region sets its own and puts this one back when it ends)."""
    from .tensor.dtypes import canonical_dtype

    device_type = _device_type("set_autocast_dtype", device_type)
    _autocast_state.dtypes[device_type] = canonical_dtype("set_autocast_dtype", dtype)
    _autocast_state.refresh()


def set_autocast_enabled(*args: Any) -> None:
    """torch's ``set_autocast_enabled(device_type, enabled)`` (or ``(enabled)`` for CUDA):
    turns autocast on or off for ``device_type`` in this thread (the low-level switch an
    ``autocast`` region sets and restores)."""
    if len(args) == 1:
        device_type, enabled = "cuda", args[0]
    elif len(args) == 2:
        device_type, enabled = args
    else:
        raise InvalidArgumentError(
            f"set_autocast_enabled: expected (device_type, enabled) or (enabled), got {args!r}"
        )
    _device_type("set_autocast_enabled", device_type)
    if not isinstance(enabled, bool):
        raise InvalidArgumentError(f"set_autocast_enabled: enabled must be a bool, got {enabled!r}")
    _autocast_state.enabled[device_type] = enabled
    _autocast_state.refresh()


def set_autocast_cpu_enabled(enabled: bool) -> None:
    """``set_autocast_enabled("cpu", enabled)`` (deprecated, as torch's)."""
    _deprecated("set_autocast_cpu_enabled", "set_autocast_enabled('cpu', enabled)")
    set_autocast_enabled("cpu", enabled)


def set_autocast_cpu_dtype(dtype: Any) -> None:
    """``set_autocast_dtype("cpu", dtype)`` (deprecated, as torch's)."""
    _deprecated("set_autocast_cpu_dtype", "set_autocast_dtype('cpu', dtype)")
    set_autocast_dtype("cpu", dtype)


def set_autocast_gpu_dtype(dtype: Any) -> None:
    """``set_autocast_dtype("cuda", dtype)`` (deprecated, as torch's)."""
    _deprecated("set_autocast_gpu_dtype", "set_autocast_dtype('cuda', dtype)")
    set_autocast_dtype("cuda", dtype)


def set_autocast_ipu_dtype(dtype: Any) -> None:
    _deprecated("set_autocast_ipu_dtype", "set_autocast_dtype('ipu', dtype)")
    set_autocast_dtype("ipu", dtype)


def set_autocast_xla_dtype(dtype: Any) -> None:
    _deprecated("set_autocast_xla_dtype", "set_autocast_dtype('xla', dtype)")
    set_autocast_dtype("xla", dtype)


def get_autocast_ipu_dtype() -> Any:
    _deprecated("get_autocast_ipu_dtype", "get_autocast_dtype('ipu')")
    return get_autocast_dtype("ipu")


def get_autocast_xla_dtype() -> Any:
    _deprecated("get_autocast_xla_dtype", "get_autocast_dtype('xla')")
    return get_autocast_dtype("xla")


def set_autocast_ipu_enabled(enabled: bool) -> None:
    _deprecated("set_autocast_ipu_enabled", "set_autocast_enabled('ipu', enabled)")
    set_autocast_enabled("ipu", enabled)


def set_autocast_xla_enabled(enabled: bool) -> None:
    _deprecated("set_autocast_xla_enabled", "set_autocast_enabled('xla', enabled)")
    set_autocast_enabled("xla", enabled)


def is_autocast_ipu_enabled() -> bool:
    """``is_autocast_enabled("ipu")`` (deprecated, as torch's)."""
    _deprecated("is_autocast_ipu_enabled", "is_autocast_enabled('ipu')")
    return is_autocast_enabled("ipu")


def is_autocast_xla_enabled() -> bool:
    """``is_autocast_enabled("xla")`` (deprecated, as torch's)."""
    _deprecated("is_autocast_xla_enabled", "is_autocast_enabled('xla')")
    return is_autocast_enabled("xla")


def autocast_increment_nesting() -> int:
    """torch's autocast nesting depth, one deeper; returns the new depth."""
    _autocast_state.nesting += 1
    return _autocast_state.nesting


def autocast_decrement_nesting() -> int:
    """torch's autocast nesting depth, one shallower; returns the new depth."""
    _autocast_state.nesting -= 1
    return _autocast_state.nesting


def get_autocast_cpu_dtype() -> Any:
    """``get_autocast_dtype("cpu")``: bfloat16 (deprecated, as torch's)."""
    _deprecated("get_autocast_cpu_dtype", "get_autocast_dtype('cpu')")
    return get_autocast_dtype("cpu")


def get_autocast_gpu_dtype() -> Any:
    """``get_autocast_dtype("cuda")``: float16 (deprecated, as torch's)."""
    _deprecated("get_autocast_gpu_dtype", "get_autocast_dtype('cuda')")
    return get_autocast_dtype("cuda")
