"""torch's ``torch.cuda`` queries: ``is_available``, ``device_count``, ``current_device``,
``set_device``, ``synchronize``, answered by the backend layer
(:mod:`retrograd.backend.accelerators`: torch's view of the machine). Without torch or
without a CUDA device there is none: ``is_available()`` is False, ``device_count()`` 0, and the
calls that need a device raise an error that says so. Tensors compute on a GPU under
``rg.Autodiff(rg.TorchBackend("cuda"))`` (API.md section 9).

>>> import retrograd as rg
>>> rg.cuda.is_available() == (rg.cuda.device_count() > 0)
True
"""

from __future__ import annotations

from typing import Any

from . import amp as _amp
from .backend.accelerators import cuda_call, cuda_device_count
from .device import Device
from .errors import InvalidArgumentError

__all__ = ["amp", "current_device", "device_count", "is_available", "set_device", "synchronize"]


def is_available() -> bool:
    """Whether a CUDA device can be used (through ``rg.TorchBackend("cuda")``)."""
    return cuda_device_count() > 0


def device_count() -> int:
    """The number of CUDA devices (0 without torch or without CUDA)."""
    return cuda_device_count()


def _index(op: str, device: Any) -> int:
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


def current_device() -> int:
    """The index of the current CUDA device."""
    return _index("current_device", None)


def set_device(device: Any) -> None:
    """Make ``device`` torch's current CUDA device (what ``"cuda"`` means to torch, and the
    device NCCL binds under ``torchrun``)."""
    cuda_call("set_device", _index("set_device", device))


def synchronize(device: Any = None) -> None:
    """Wait until every kernel queued on ``device`` (the current one by default) is done."""
    cuda_call("synchronize", _index("synchronize", device))


class _CudaAmp:
    """``torch.cuda.amp``: the older spellings of :mod:`retrograd.amp`'s names, for the GPU
    (``GradScaler(init_scale, ...)``, ``autocast(enabled=True, dtype=float16, ...)``)."""

    @staticmethod
    def GradScaler(  # noqa: N802 (torch's name)
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> _amp.GradScaler:
        return _amp.GradScaler(
            "cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled
        )

    @staticmethod
    def autocast(
        enabled: bool = True, dtype: Any = "float16", cache_enabled: bool = True
    ) -> _amp.autocast:
        return _amp.autocast("cuda", dtype, enabled, cache_enabled)


#: torch's ``torch.cuda.amp``
amp = _CudaAmp()
