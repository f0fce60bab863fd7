"""Creation functions: tensors from host data, filled tensors, ranges, identity matrices and
random values.

Each takes ``dtype``, ``backend`` (default: the current backend, see
:func:`retrograd.use_backend`) and ``device`` (default ``cpu:0``), checks them, and asks the
backend for the primitive.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from ..context import current_backend
from ..device import CPU0, Device
from ..errors import DTypeError, InvalidArgumentError, ShapeError, shape_text
from ._dispatch import DTYPES, FLOAT_DTYPES, from_host
from .core import Tensor
from .shape import shape_arg

__all__ = [
    "arange",
    "eye",
    "full",
    "ones",
    "ones_like",
    "random",
    "seed",
    "tensor",
    "zeros",
    "zeros_like",
]


def _target(backend: Any, device: Any) -> tuple[Any, Device]:
    backend = backend if backend is not None else current_backend()
    return backend, getattr(backend, "default_device", CPU0) if device is None else Device(device)


def _check_dtype(op: str, dtype: str | None) -> None:
    if dtype is not None and dtype not in DTYPES:
        raise DTypeError(f"{op}: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")


def tensor(data: Any, dtype: str | None = None, backend: Any = None, device: Any = None) -> Tensor:
    """A tensor holding a copy of ``data`` (a scalar, nested lists or a NumPy array).

    Python numbers and nested lists default to float32 (bools to bool); a NumPy array keeps
    its dtype (float64 stays float64, other ints become int64).

    >>> import retrograd as rg
    >>> rg.tensor([[1, 2], [3, 4]]).dtype
    'float32'
    """
    _check_dtype("tensor", dtype)
    backend, device = _target(backend, device)
    if isinstance(data, Tensor):
        data = data.numpy()  # a copy: the user's tensor may live on another backend
    return from_host(Tensor, data, dtype, backend, device)


def zeros(
    shape: Sequence[int], dtype: str = "float32", backend: Any = None, device: Any = None
) -> Tensor:
    """A tensor of zeros."""
    _check_dtype("zeros", dtype)
    backend, device = _target(backend, device)
    return Tensor(backend.zeros(_creation_shape("zeros", shape), dtype, device), backend, device)


def ones(
    shape: Sequence[int], dtype: str = "float32", backend: Any = None, device: Any = None
) -> Tensor:
    _check_dtype("ones", dtype)
    backend, device = _target(backend, device)
    return Tensor(backend.ones(_creation_shape("ones", shape), dtype, device), backend, device)


def full(
    shape: Sequence[int],
    value: Any,
    dtype: str | None = None,
    backend: Any = None,
    device: Any = None,
) -> Tensor:
    """A tensor filled with ``value`` (float32 for floats, int64 for ints, bool for bools)."""
    if dtype is None:
        dtype = (
            "bool"
            if isinstance(value, bool)
            else ("int64" if isinstance(value, numbers.Integral) else "float32")
        )
    _check_dtype("full", dtype)
    backend, device = _target(backend, device)
    return Tensor(
        backend.full(_creation_shape("full", shape), value, dtype, device), backend, device
    )


def zeros_like(t: Tensor) -> Tensor:
    return zeros(t.shape, t.dtype, t.backend, t.device)


def ones_like(t: Tensor) -> Tensor:
    return ones(t.shape, t.dtype, t.backend, t.device)


def eye(
    n: int, m: int | None = None, dtype: str = "float32", backend: Any = None, device: Any = None
) -> Tensor:
    """The identity matrix (``n`` by ``m``)."""
    _check_dtype("eye", dtype)
    if n < 0 or (m is not None and m < 0):
        raise ShapeError(f"eye: sizes must be non-negative, got {n} and {m}")
    backend, device = _target(backend, device)
    return Tensor(backend.eye(int(n), int(n if m is None else m), dtype, device), backend, device)


def arange(
    start: int,
    end: int | None = None,
    step: int = 1,
    dtype: str = "int64",
    backend: Any = None,
    device: Any = None,
) -> Tensor:
    """``start, start+step, ...`` below ``end``, int64 by default (``arange(n)`` counts from 0)."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ShapeError("arange: step must not be zero")
    _check_dtype("arange", dtype)
    backend, device = _target(backend, device)
    return Tensor(backend.arange(start, end, step, dtype, device), backend, device)


def random(
    shape: Sequence[int],
    distribution: str = "uniform",
    dtype: str = "float32",
    backend: Any = None,
    device: Any = None,
) -> Tensor:
    """Random values, ``"uniform"`` on [0, 1) or standard ``"normal"``; see :func:`seed`."""
    if distribution not in ("uniform", "normal"):
        raise InvalidArgumentError(
            f"random: distribution must be 'uniform' or 'normal', got {distribution!r}"
        )
    if dtype not in FLOAT_DTYPES:
        raise DTypeError(f"random: dtype must be a float dtype, got {dtype!r}")
    backend, device = _target(backend, device)
    shape = _creation_shape("random", shape)
    return Tensor(backend.random(shape, distribution, dtype, device), backend, device)


def seed(value: int) -> None:
    """Seed the generator behind :func:`random` and dropout, for reproducible runs."""
    current_backend().seed(int(value))


def _creation_shape(op: str, shape: Any) -> tuple[int, ...]:
    shape = shape_arg(shape)
    if any(n < 0 for n in shape):
        raise ShapeError(f"{op}: negative dimension in shape {shape_text(shape)}")
    return shape
