"""What the machine offers beyond the CPU, asked of torch (the one library here that drives
a GPU), imported only when asked and only if installed: without torch, or without a CUDA
device, there are none. ``rg.cuda`` answers from here, so that nothing above ``backend/``
imports torch.
"""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = [
    "HOSTED_DEVICE_KINDS",
    "absent_device_refusal",
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


#: the device kinds a tensor can be placed on here: the CPU, CUDA (where a backend computes
#: there) and ``meta``, a label only (``with rg.device("meta")`` builds a model's structure
#: before ``to_empty``; its tensors hold data here, where torch's hold none)
HOSTED_DEVICE_KINDS = frozenset(("cpu", "cuda", "meta"))


def absent_device_refusal(kind: str) -> str:
    """Why no tensor goes to a device of ``kind`` (``mps``, ``xpu``, ``xla``, ...): torch's
    CPU and CUDA builds refuse them too ("PyTorch is not linked with support for mps
    devices"). Such tensors were labelled with the device while computing on the CPU, so a
    program that asked for one ran where torch's stops."""
    return (
        f"PyTorch is not linked with support for {kind} devices, and no retrograd backend "
        "computes there (they compute on the CPU, and on CUDA devices with TorchBackend); "
        "pick the device with 'cuda' if rg.cuda.is_available() else 'cpu'"
    )


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
