"""torch.cuda's streams, events and device contexts as scripts use them around timing and
multi-GPU code (``torch.cuda.Event(enable_timing=True)``, ``with torch.cuda.device(1):``,
``with torch.cuda.stream(s):``): torch's own objects where a CUDA device exists; without one,
what torch's CPU build does (``stream(None)`` and ``device_of`` a CPU tensor change nothing;
making a stream or an event, or entering a device, is refused naming the call)."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Any

from ..backend.accelerators import cuda_call
from .info import device_index

__all__ = ["Event", "Stream", "current_stream", "default_stream", "device", "device_of", "stream"]


def Event(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 (torch's name)
    """A CUDA event (``enable_timing=True`` for ``elapsed_time``): torch's."""
    device_index("Event", None)
    return cuda_call("Event", *args, **kwargs)


def Stream(device: Any = None, priority: int = 0, **kwargs: Any) -> Any:  # noqa: N802
    """A CUDA stream of ``device``: torch's."""
    at = device_index("Stream", device)
    return cuda_call("Stream", at, priority, **kwargs)


def current_stream(device: Any = None) -> Any:
    """The stream torch queues work on, on ``device``."""
    return cuda_call("current_stream", device_index("current_stream", device))


def default_stream(device: Any = None) -> Any:
    """The default stream of ``device``."""
    return cuda_call("default_stream", device_index("default_stream", device))


def stream(stream: Any) -> Any:
    """A context in which ``stream`` is the current stream; ``None`` changes nothing."""
    if stream is None:
        return nullcontext()
    device_index("stream", None)
    return cuda_call("stream", stream)


@contextmanager
def device(device: Any) -> Any:
    """A context in which ``device`` is torch's current CUDA device (a negative index or
    ``None`` changes nothing, as torch's)."""
    if device is None or (isinstance(device, int) and device < 0):
        yield
        return
    at = device_index("device", device)
    previous = int(cuda_call("current_device"))
    cuda_call("set_device", at)
    try:
        yield
    finally:
        cuda_call("set_device", previous)


def device_of(obj: Any) -> Any:
    """:func:`device` of the GPU ``obj`` (a tensor) lives on; on the CPU, nothing changes."""
    on = getattr(obj, "device", None)
    if getattr(on, "type", None) != "cuda":
        return nullcontext()
    return device(on.index or 0)
