"""The one place distributed code meets a backend's values: a primitive as the buffer the
engines reduce (:func:`to_buffer`), and a reduced buffer as a primitive again
(:func:`from_buffer`).

Engines move NumPy arrays, and the ``torch`` engine also device memory. Nothing here knows
which backend it serves: primitives are told apart by the DLPack protocol, which NumPy, torch
and the other array libraries share.

- A NumPy primitive (the default backend's) is its own buffer, without a copy either way.
- A primitive in host memory that speaks DLPack (a CPU torch tensor) is handed over as a NumPy
  view of the same memory (``np.from_dlpack``): every engine reduces it, none copies it first.
- A primitive in device memory (a CUDA tensor), or of a dtype NumPy lacks (bfloat16), is
  handed over as it is: only an engine that moves such memory (``torch``, NCCL) reduces it.

On the way back, a result of the primitive's own kind on its device is the new primitive
as it is; anything else goes through the backend's ``from_data``. A parameter that received
no gradient on a device has no primitive to match: its backend says what its primitives are
(a zero-size one), so its reduced gradient is a primitive of the running backend, never a
stray NumPy array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["as_host_array", "from_buffer", "to_buffer"]

#: DLPack's device type of host memory (``kDLCPU``)
_DLPACK_CPU = 1


def _dlpack_device(value: Any) -> tuple[int, int] | None:
    """``(device type, index)`` of a DLPack producer, or ``None`` for anything else."""
    query = getattr(value, "__dlpack_device__", None)
    if query is None:
        return None
    kind, index = query()
    return int(kind), int(index)


def to_buffer(backend: Any, value: Any) -> Any:
    """``value``, a primitive of ``backend`` (an autodiff backend's: its untracked value), as
    the buffer an engine reduces: a NumPy array sharing its memory where it lives on the host,
    else the primitive itself (device memory).

    >>> from retrograd.backend import NumpyBackend
    >>> a = np.ones(3, np.float32)
    >>> to_buffer(NumpyBackend(), a) is a
    True
    """
    if getattr(backend, "is_autodiff", False):
        value = backend.inner_value(value)
        backend = backend.inner
    if isinstance(value, np.ndarray):
        return value
    device = _dlpack_device(value)
    if device is None:
        return np.asarray(backend.to_numpy(value))
    if device[0] == _DLPACK_CPU:
        try:
            return np.from_dlpack(value)  # a view: no copy
        except (BufferError, RuntimeError, TypeError):
            pass  # a dtype NumPy has not (bfloat16): the primitive itself, as device memory
    return value


def as_host_array(buffer: Any) -> np.ndarray:
    """``buffer`` (a NumPy array, or a DLPack tensor anywhere) as a NumPy array: a view of host
    memory, a copy of device memory."""
    if isinstance(buffer, np.ndarray):
        return buffer
    device = _dlpack_device(buffer)
    if device is not None and device[0] != _DLPACK_CPU:
        return np.from_dlpack(buffer, device="cpu", copy=True)
    return np.from_dlpack(buffer) if device is not None else np.asarray(buffer)


def _dtype_name(buffer: Any) -> str:
    # NumPy's dtype names ("float32") and torch's ("torch.float32") end alike.
    return str(buffer.dtype).rpartition(".")[2]


def from_buffer(backend: Any, array: Any, like: Any, device: Any, dtype: str | None = None) -> Any:
    """``array`` (a reduced buffer) as a primitive of ``backend`` (not an autodiff one) on
    ``device``, of the kind ``like`` is: ``array`` itself where it already is one (a NumPy
    array for a NumPy ``like``; a tensor of ``like``'s type on ``like``'s device), else a new
    primitive of ``dtype`` (``None``: ``array``'s own). With no ``like`` (the parameter had no
    gradient here), the kind is the backend's own.

    >>> from retrograd.backend import NumpyBackend
    >>> a = np.ones(3, np.float32)
    >>> from_buffer(NumpyBackend(), a, np.zeros(3, np.float32), None) is a
    True
    >>> from_buffer(NumpyBackend(), a, None, None) is a
    True
    """
    if like is None:
        # What the backend's primitives are, asked of the backend: a zero-size one.
        like = backend.zeros((0,), dtype or _dtype_name(array), device)
    if isinstance(like, np.ndarray):
        return as_host_array(array)
    if (
        type(array) is type(like)
        and _dlpack_device(array) == _dlpack_device(like)
        and (dtype is None or _dtype_name(array) == dtype)
    ):
        return array
    return backend.from_data(as_host_array(array), dtype, device)
