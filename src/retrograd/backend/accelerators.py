"""What the machine offers beyond the CPU, asked of torch (the one library here that drives
a GPU), imported only when asked and only if installed: without torch, or without a CUDA
device, there are none. ``rg.cuda`` answers from here, so that nothing above ``backend/``
imports torch.
"""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = [
    "cpu_backend_gpu_refusal",
    "cuda_call",
    "cuda_device_count",
    "cuda_rng_states",
    "set_cuda_rng_states",
]


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


def cpu_backend_gpu_refusal() -> str:
    """Why a tensor of a CPU backend cannot go to a CUDA device: on a machine without one,
    what torch's CPU build says (``Torch not compiled with CUDA enabled``, and
    ``rg.cuda.is_available()`` is False); with one, which backend computes there."""
    if cuda_device_count() == 0:
        return (
            "Torch not compiled with CUDA enabled, or no CUDA device is present "
            "(rg.cuda.is_available() is False): this backend computes on the CPU; pick the "
            "device with 'cuda' if rg.cuda.is_available() else 'cpu'"
        )
    return (
        "this backend computes on the CPU; make tensors on rg.Autodiff(rg.TorchBackend('cuda')) "
        "(rg.set_default_backend) to use a GPU"
    )


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
