"""What the machine offers beyond the CPU, asked of torch (the one library here that drives
a GPU), imported only when asked and only if installed: without torch, or without a CUDA
device, there are none. ``rg.cuda`` answers from here, so that nothing above ``backend/``
imports torch.
"""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["cuda_call", "cuda_device_count", "cuda_rng_states", "set_cuda_rng_states"]


def _torch() -> Any:
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch


def cuda_device_count() -> int:
    """How many CUDA devices torch sees (0 without torch or without CUDA)."""
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return 0
    return int(torch.cuda.device_count())


def cuda_call(name: str, *args: Any, **kwargs: Any) -> Any:
    """``torch.cuda.<name>(*args, **kwargs)``; call only when :func:`cuda_device_count` is
    positive."""
    return getattr(_torch().cuda, name)(*args, **kwargs)


def cuda_rng_states(name: str, *args: Any) -> Any:
    """``torch.cuda.<name>(*args)``'s random state(s) (a uint8 tensor, or a list of them) as
    NumPy arrays; call only when :func:`cuda_device_count` is positive."""
    states = cuda_call(name, *args)
    if isinstance(states, list | tuple):
        return [s.cpu().numpy() for s in states]
    return states.cpu().numpy()


def set_cuda_rng_states(name: str, states: Any, *args: Any) -> None:
    """``torch.cuda.<name>(states, *args)`` with ``states`` (an array, or a list of them) made
    torch's uint8 tensors; call only when :func:`cuda_device_count` is positive."""
    torch = _torch()
    if isinstance(states, list | tuple):
        converted: Any = [torch.from_numpy(s.copy()) for s in states]
    else:
        converted = torch.from_numpy(states.copy())
    cuda_call(name, converted, *args)
