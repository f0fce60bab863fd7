"""torch's legacy tensor types: ``rg.FloatTensor``, ``rg.LongTensor``... and ``t.type()``.

``rg.FloatTensor(2, 3)`` makes a float32 tensor of that shape (zeros: torch leaves it
uninitialized), ``rg.FloatTensor([1, 2])`` one holding the data; ``isinstance(t,
rg.FloatTensor)`` asks the dtype; ``t.type()`` names the type (``"retrograd.FloatTensor"``) and
``t.type(rg.LongTensor)`` casts. ``IntTensor`` (int32), ``ShortTensor`` (int16), ``CharTensor``
(int8) and ``ByteTensor`` (uint8) are types of tensors like the others.
"""

from __future__ import annotations

import numbers
from typing import Any

from ..backend.accelerators import cuda_device_count
from ..errors import DTypeError, ShapeError
from ._dispatch import TensorBase
from .core import Tensor
from .dtypes import LEGACY_NAMES, canonical_dtype

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
]

_DTYPES = {name: dtype for dtype, name in LEGACY_NAMES.items()}


class _LegacyMeta(type):
    """``isinstance(t, rg.FloatTensor)``: a retrograd tensor of that dtype."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, TensorBase) and instance.dtype == cls.dtype_name

    def __repr__(cls) -> str:
        return f"<class 'retrograd.{cls.__name__}'>"


class _LegacyTensor(metaclass=_LegacyMeta):
    dtype_name = "float32"

    def __new__(cls, *args: Any, device: Any = None) -> Any:  # type: ignore[misc]
        return legacy_new(cls.__name__, canonical_dtype(cls.__name__, cls.dtype_name), args, device)


def legacy_new(fn: str, dtype: str, args: tuple, device: Any, alias: bool = False) -> Any:
    """torch's legacy constructor forms: ``()`` an empty tensor, sizes (ints, or one
    ``Size``) a tensor of that shape (zeros: torch leaves it uninitialized), one sequence or
    array the data in ``dtype``, one tensor that tensor (``alias``: itself, as
    ``torch.Tensor(t)`` shares ``t``'s storage; else cast to ``dtype``)."""
    from .creation import size_of, tensor, zeros

    if not args:
        return zeros((0,), dtype=dtype, device=device)
    if len(args) > 1:  # sizes may be integer tensors of one element, as torch unpacks them
        args = tuple(size_of(a, fn) for a in args)
    if all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args):
        if any(a < 0 for a in args):
            raise ShapeError(f"{fn}: sizes must be non-negative, got {tuple(args)}")
        return zeros(tuple(int(a) for a in args), dtype=dtype, device=device)
    if len(args) == 1 and isinstance(args[0], tuple) and type(args[0]).__name__ == "Size":
        return zeros(args[0], dtype=dtype, device=device)
    if len(args) != 1:
        raise DTypeError(
            f"{fn}: expected sizes or one sequence of data, got {len(args)} arguments "
            f"({', '.join(type(a).__name__ for a in args)})"
        )
    data = args[0]
    if isinstance(data, TensorBase):
        return data.view(data.shape) if alias else data.cast(dtype)
    if isinstance(data, (numbers.Number, str, bytes)):
        raise DTypeError(f"{fn}: data must be a sequence, got {type(data).__name__} {data!r}")
    return tensor(data, dtype=dtype, device=device)


def _legacy(name: str) -> type:
    return _LegacyMeta(name, (_LegacyTensor,), {"dtype_name": _DTYPES[name], "__slots__": ()})


FloatTensor = _legacy("FloatTensor")
DoubleTensor = _legacy("DoubleTensor")
HalfTensor = _legacy("HalfTensor")
BFloat16Tensor = _legacy("BFloat16Tensor")
LongTensor = _legacy("LongTensor")
IntTensor = _legacy("IntTensor")
ByteTensor = _legacy("ByteTensor")
ShortTensor = _legacy("ShortTensor")
CharTensor = _legacy("CharTensor")
BoolTensor = _legacy("BoolTensor")


class _CudaLegacyMeta(_LegacyMeta):
    """``isinstance(t, rg.cuda.FloatTensor)``: a retrograd tensor of that dtype on a GPU."""

    def __instancecheck__(cls, instance: Any) -> bool:
        device = getattr(instance, "device", None)
        return super().__instancecheck__(instance) and getattr(device, "kind", None) == "cuda"

    def __repr__(cls) -> str:
        return f"<class 'retrograd.cuda.{cls.__name__}'>"


class _CudaLegacyTensor(metaclass=_CudaLegacyMeta):
    dtype_name = "float32"
    device_kind = "cuda"

    def __new__(cls, *args: Any, device: Any = None) -> Any:  # type: ignore[misc]
        fn = f"cuda.{cls.__name__}"
        if cuda_device_count() == 0:
            raise DTypeError(
                f"type retrograd.{fn} not available: no CUDA device (torch sees none, or torch "
                f"is not installed); use rg.{cls.__name__} for a tensor on the CPU"
            )
        dtype = canonical_dtype(fn, cls.dtype_name)
        return legacy_new(fn, dtype, args, "cuda" if device is None else device)


def cuda_legacy(name: str) -> type:
    """The CUDA form of the legacy type ``name`` (``rg.cuda.FloatTensor``)."""
    return _CudaLegacyMeta(
        name, (_CudaLegacyTensor,), {"dtype_name": _DTYPES[name], "__slots__": ()}
    )


Tensor._legacy_new = staticmethod(legacy_new)  # ``rg.Tensor(2, 3)`` (see ``Tensor.__new__``)
