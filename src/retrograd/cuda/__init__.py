"""torch's ``torch.cuda`` queries: ``is_available``, ``device_count``, ``current_device``,
``set_device``, ``synchronize``, answered by the backend layer
(:mod:`retrograd.backend.accelerators`: torch's view of the machine). Without torch or
without a CUDA device there is none: ``is_available()`` is False, ``device_count()`` 0, and the
calls that need a device raise an error that says so. Tensors compute on a GPU under
``rg.Autodiff(rg.TorchBackend("cuda"))`` (API.md section 9). ``retrograd.cuda.amp`` is torch's
older home of ``GradScaler`` and ``autocast`` (``from torch.cuda.amp import GradScaler``).

>>> import retrograd as rg
>>> rg.cuda.is_available() == (rg.cuda.device_count() > 0)
True
"""

from __future__ import annotations

from typing import Any

from ..backend.accelerators import cuda_call, cuda_device_count
from ..errors import InvalidArgumentError
from ..tensor.legacy import cuda_legacy
from . import amp, info, streams
from .info import *  # noqa: F403 (the informational calls: info.__all__)
from .info import device_index as _index
from .streams import *  # noqa: F403 (streams, events, device contexts: streams.__all__)

__all__ = [
    "BFloat16Tensor",
    "BoolTensor",
    "ByteTensor",
    "CharTensor",
    "DoubleTensor",
    "FloatTensor",
    "HalfTensor",
    "IntTensor",
    "LongTensor",
    "ShortTensor",
    "amp",
    "current_device",
    "device_count",
    "empty_cache",
    "initial_seed",
    "ipc_collect",
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
    "synchronize",
    *info.__all__,
    *streams.__all__,
]


def is_available() -> bool:
    """Whether a CUDA device can be used (through ``rg.TorchBackend("cuda")``)."""
    return cuda_device_count() > 0


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the current CUDA device computes in bfloat16 (torch's answer; False without a
    CUDA device, as torch's)."""
    if cuda_device_count() == 0:
        return False
    return bool(cuda_call("is_bf16_supported", including_emulation))


def device_count() -> int:
    """The number of CUDA devices (0 without torch or without CUDA)."""
    return cuda_device_count()


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


def ipc_collect() -> None:
    """Free the CUDA memory other processes no longer hold through IPC (an error without a
    device, as torch's CPU build answers)."""
    _index("ipc_collect", None)
    cuda_call("ipc_collect")


def reset_peak_memory_stats(device: Any = None) -> None:
    """Start new peaks for :func:`max_memory_allocated` and :func:`max_memory_reserved` (an
    error without a device, as torch's CPU build answers)."""
    cuda_call("reset_peak_memory_stats", _index("reset_peak_memory_stats", device))


def initial_seed() -> int:
    """The seed of torch's CUDA generator (an error without a device, as torch's CPU build)."""
    _index("initial_seed", None)
    return int(cuda_call("initial_seed"))


# Seeding: retrograd's random tensors on a GPU are drawn from the stream ``rg.manual_seed``
# seeds (on the host, or on the device with ``TorchBackend("cuda", generator="torch")``, which
# ``rg.manual_seed`` seeds too). These seed torch's own CUDA generators, and without a device
# they do nothing, silently, as torch's CPU build does, so scripts that call them run anywhere.
def _seed(op: str, seed: Any) -> int:
    """``int(seed)``, read first as torch reads it (without a GPU too: a str seed is refused
    there, where it was ignored here)."""
    try:
        return int(seed)
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"{op}: expected an int seed, got {seed!r} ({error})") from None


def manual_seed(seed: int) -> None:
    """Seed torch's generator of the current CUDA device; a no-op without one."""
    seed = _seed("cuda.manual_seed", seed)
    if cuda_device_count() > 0:
        cuda_call("manual_seed", seed)


def manual_seed_all(seed: int) -> None:
    """Seed torch's generators of every CUDA device; a no-op without one."""
    seed = _seed("cuda.manual_seed_all", seed)
    if cuda_device_count() > 0:
        cuda_call("manual_seed_all", seed)


def seed() -> None:
    """Seed the current CUDA device's generator non-deterministically; a no-op without one."""
    if cuda_device_count() > 0:
        cuda_call("seed")


def seed_all() -> None:
    """Seed every CUDA device's generator non-deterministically; a no-op without one."""
    if cuda_device_count() > 0:
        cuda_call("seed_all")


def empty_cache() -> None:
    """Return torch's cached, unused CUDA memory to the driver; a no-op without a device."""
    if cuda_device_count() > 0:
        cuda_call("empty_cache")


def _counter(name: str, device: Any) -> int:
    # torch's CPU build answers 0 for every counter, whatever device is named.
    if cuda_device_count() == 0:
        return 0
    return int(cuda_call(name, _index(name, device)))


def memory_allocated(device: Any = None) -> int:
    """Bytes of CUDA memory tensors occupy now (0 without a device)."""
    return _counter("memory_allocated", device)


def max_memory_allocated(device: Any = None) -> int:
    """The peak of :func:`memory_allocated` since the last reset (0 without a device)."""
    return _counter("max_memory_allocated", device)


def memory_reserved(device: Any = None) -> int:
    """Bytes of CUDA memory torch's caching allocator holds (0 without a device)."""
    return _counter("memory_reserved", device)


def max_memory_reserved(device: Any = None) -> int:
    """The peak of :func:`memory_reserved` since the last reset (0 without a device)."""
    return _counter("max_memory_reserved", device)


# torch's legacy CUDA tensor types (``torch.cuda.FloatTensor``...): tensors on the GPU
FloatTensor = cuda_legacy("FloatTensor")
DoubleTensor = cuda_legacy("DoubleTensor")
HalfTensor = cuda_legacy("HalfTensor")
BFloat16Tensor = cuda_legacy("BFloat16Tensor")
LongTensor = cuda_legacy("LongTensor")
IntTensor = cuda_legacy("IntTensor")
ByteTensor = cuda_legacy("ByteTensor")
ShortTensor = cuda_legacy("ShortTensor")
CharTensor = cuda_legacy("CharTensor")
BoolTensor = cuda_legacy("BoolTensor")
