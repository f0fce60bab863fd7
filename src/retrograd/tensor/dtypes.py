"""Dtypes as PyTorch names them: ``rg.float32``, ``rg.long``, ``rg.bool``..., ``rg.finfo``,
and the legacy tensor types (``rg.FloatTensor``, ``rg.LongTensor``...).

A :class:`dtype` is a ``str`` (``rg.float32 == "float32"``), so every place that took a dtype
name keeps working and a tensor's ``dtype`` compares equal to both spellings. Backends hold
twelve dtypes (``DTYPES``): ``float32 float64 bfloat16 float16`` and ``complex64
complex128`` (the ones gradients flow through), ``int64 int32 int16 int8 uint8`` and
``bool``, promoted as torch promotes them (``bool < uint8, int8 < int16 < int32 < int64 <
floats < complex``, where uint8 with int8 meets at int16 and float64 with complex64 at
complex128; ``uint8 + 300`` wraps, as torch's).

>>> import retrograd as rg
>>> rg.float32 == "float32", rg.long, rg.float64.is_floating_point
(True, retrograd.int64, True)
>>> rg.finfo(rg.float32).eps
1.1920928955078125e-07
"""

from __future__ import annotations

import builtins
import operator
from typing import Any, ClassVar

import numpy as np

from ..backend.protocol import default_float_dtype, set_default_float_dtype
from ..errors import DTypeError
from ._dispatch import DTYPES, FLOAT_DTYPES, NARROW_RANGES

__all__ = [
    "ALIASES",
    "DTYPE_OBJECTS",
    "LEGACY_NAMES",
    "Size",
    "can_cast",
    "canonical_dtype",
    "cast_host",
    "default_float_dtype",
    "dtype",
    "finfo",
    "iinfo",
    "legacy_type_dtype",
    "legacy_type_name",
    "numpy_dtype_name",
    "set_default_float_dtype",
]

_ITEMSIZE = {
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}


class dtype(str):  # noqa: N801 (torch's name)
    """A dtype name that is also a ``str``: ``rg.float32 == "float32"``.

    ``is_floating_point``, ``is_complex``, ``is_signed`` and ``itemsize`` as torch's dtypes
    have them; ``repr`` is ``retrograd.float32``.
    """

    __slots__ = ()

    @property
    def is_floating_point(self) -> bool:
        return str(self) in FLOAT_DTYPES

    @property
    def is_complex(self) -> bool:
        return self.startswith("complex")

    @property
    def is_signed(self) -> bool:
        return str(self) not in ("bool", "uint8")

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[str(self)]

    def to_real(self) -> dtype:
        return DTYPE_OBJECTS[{"complex64": "float32", "complex128": "float64"}.get(self, self)]

    def to_complex(self) -> dtype:
        """torch's: the complex dtype of a float's width (float16's complex32, which
        retrograd lacks, is complex64); an integer or bool dtype has none."""
        if str(self) not in FLOAT_DTYPES and not self.is_complex:
            raise DTypeError(f"to_complex: {self} has no complex dtype (as torch refuses it)")
        wide = str(self) in ("float64", "complex128")
        return DTYPE_OBJECTS["complex128" if wide else "complex64"]

    def __repr__(self) -> str:
        return f"retrograd.{self!s}"

    def __reduce__(self) -> tuple:
        return (dtype, (str(self),))


#: Every dtype name torch has that code in the wild names, as a :class:`dtype` object.
DTYPE_OBJECTS: dict[str, dtype] = {name: dtype(name) for name in _ITEMSIZE}

#: torch's other names for the same dtypes (``torch.float`` is float32, ``torch.int`` int32).
ALIASES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "cfloat": "complex64",
    "cdouble": "complex128",
}

_PYTHON_TYPES = {builtins.float: "float64", builtins.int: "int64", builtins.bool: "bool"}

_INSTEAD: dict[str, str] = {}


#: NumPy's numeric dtypes met so far, by name (:func:`numpy_dtype_name`)
_NUMPY_NAMES: dict[np.dtype, str] = {}


def numpy_dtype_name(dtype: np.dtype) -> str:
    """NumPy's name of ``dtype``, read once per dtype (a numeric one: a bounded table). NumPy
    builds ``dtype.name`` (and ``str(dtype)``) afresh at each read, and keeps some of the
    strings it builds there, traced on the reading line: dozens alive after thousands of
    reads, 87 after a million (measured with NumPy 2.4), which a soak of a loop saving its
    model's state dict each epoch counted as growth (``tests/test_rel70_fixes.py``)."""
    name = _NUMPY_NAMES.get(dtype)
    if name is None:
        name = dtype.name
        if dtype.kind in "biufc":
            _NUMPY_NAMES[dtype] = name
    return name


def canonical_dtype(op: str, value: Any, allow_none: bool = False) -> str | None:
    """``value`` (an ``rg`` dtype, a name such as ``"float32"``/``"torch.float32"``, a NumPy
    dtype, a torch dtype, or Python's ``float``/``int``/``bool`` as torch reads them) as the
    plain name a backend takes; a dtype the backends do not hold is a ``DTypeError`` that
    says what to use instead."""
    if value is None:
        if allow_none:
            return None
        raise DTypeError(f"{op}: expected a dtype, got None")
    if isinstance(value, type) and value in _PYTHON_TYPES:
        return _PYTHON_TYPES[value]
    if isinstance(value, str):
        name = str(value)
    elif isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        name = numpy_dtype_name(np.dtype(value))
    else:  # a torch dtype prints as "torch.float32"
        name = str(value)
    for prefix in ("torch.", "retrograd.", "rg."):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    name = ALIASES.get(name, name)
    if name in DTYPES:
        return name
    if name in _INSTEAD:
        raise DTypeError(
            f"{op}: retrograd has no {name} tensors; use {_INSTEAD[name]} instead "
            f"(its dtypes: {', '.join(DTYPES)})"
        )
    raise DTypeError(f"{op}: unknown dtype {value!r}; expected one of {', '.join(DTYPES)}")


def cast_host(array: Any, target: str) -> np.ndarray:
    """``array`` cast by NumPy to the dtype ``target`` (wrapping as NumPy's ``astype``), or,
    for a dtype NumPy has not (bfloat16), its values as they are: ``tensor(..., dtype=target)``
    rounds them then, once (``np.asarray(array, dtype="bfloat16")`` is a bare ``TypeError``)."""
    if str(target) == "bfloat16":
        return np.asarray(array)
    return np.asarray(array, dtype=str(target))


def can_cast(source: str, target: str) -> bool:
    """torch's rule for writing a result of dtype ``source`` into a tensor of ``target`` (an
    in-place op): never float into an integer or bool tensor, nor integer into bool, nor
    complex into a real one (its imaginary part would be lost)."""
    kinds = {"bool": 0, "int64": 1, "int32": 1, "int16": 1, "int8": 1, "uint8": 1}
    kinds |= {"complex64": 3, "complex128": 3}
    return kinds.get(str(source), 2) <= kinds.get(str(target), 2)


class finfo:  # noqa: N801 (torch's name)
    """Machine limits of a float dtype, as ``torch.finfo``: ``bits eps max min tiny
    smallest_normal resolution dtype``."""

    _BFLOAT16: ClassVar[dict[str, float]] = {
        "bits": 16,
        "eps": 0.0078125,
        "max": 3.3895313892515355e38,
        "min": -3.3895313892515355e38,
        "tiny": 1.1754943508222875e-38,
        "resolution": 0.01,
    }

    def __init__(self, type: Any = None):  # noqa: A002 (torch's name)
        name = default_float_dtype() if type is None else canonical_dtype("finfo", type)
        # torch's: a complex dtype's limits are those of its real and imaginary parts
        name = {"complex64": "float32", "complex128": "float64"}.get(name, name)
        if name not in FLOAT_DTYPES:
            raise DTypeError(f"finfo: {name} is not a float dtype (use rg.iinfo)")
        if name == "bfloat16":
            values = dict(self._BFLOAT16)
        else:
            info = np.finfo(name)
            values = {
                "bits": int(info.bits),
                "eps": float(info.eps),
                "max": float(info.max),
                "min": float(info.min),
                "tiny": float(info.tiny),
                "resolution": 10.0 ** -int(info.precision),
            }
        self.bits: int = values["bits"]
        self.eps: float = values["eps"]
        self.max: float = values["max"]
        self.min: float = values["min"]
        self.tiny: float = values["tiny"]
        self.smallest_normal: float = values["tiny"]
        self.resolution: float = values["resolution"]
        self.dtype: str = name

    def __repr__(self) -> str:
        return (
            f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, eps={self.eps}, "
            f"smallest_normal={self.smallest_normal}, tiny={self.tiny}, dtype={self.dtype})"
        )


class iinfo:  # noqa: N801 (torch's name)
    """Limits of an integer dtype, as ``torch.iinfo``: ``bits max min dtype``."""

    def __init__(self, type: Any):  # noqa: A002 (torch's name)
        name = str(type).removeprefix("torch.").removeprefix("retrograd.")
        name = ALIASES.get(name, name)
        if name not in ("int64", "int32", "int16", "int8", "uint8"):  # (bool too, as torch's)
            raise DTypeError(f"iinfo: {name} is not an integer dtype (use rg.finfo)")
        info = np.iinfo(name)
        self.bits: int = int(info.bits)
        self.max: int = int(info.max)
        self.min: int = int(info.min)
        self.dtype: str = name

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


#: The legacy tensor type of each dtype (``rg.FloatTensor`` is float32).
LEGACY_NAMES = {
    "float32": "FloatTensor",
    "float64": "DoubleTensor",
    "float16": "HalfTensor",
    "bfloat16": "BFloat16Tensor",
    "int64": "LongTensor",
    "int32": "IntTensor",
    "int16": "ShortTensor",
    "int8": "CharTensor",
    "uint8": "ByteTensor",
    "bool": "BoolTensor",
    "complex64": "ComplexFloatTensor",
    "complex128": "ComplexDoubleTensor",
}
_LEGACY_DTYPES = {name: dtype for dtype, name in LEGACY_NAMES.items()}


def legacy_type_name(dtype: str) -> str:
    """``t.type()``: ``"retrograd.FloatTensor"`` for float32, and so on."""
    return f"retrograd.{LEGACY_NAMES[str(dtype)]}"


def legacy_type_dtype(value: Any) -> str:
    """The dtype a ``t.type(...)`` argument names: a legacy type (``rg.LongTensor``), its name
    (``"torch.FloatTensor"``, ``"retrograd.LongTensor"``), or a dtype."""
    legacy = getattr(value, "dtype_name", None)
    if isinstance(legacy, str):
        return canonical_dtype("type", legacy)
    if isinstance(value, str):
        name = value.rpartition(".")[2]
        if name in _LEGACY_DTYPES:
            return canonical_dtype("type", _LEGACY_DTYPES[name])
    return canonical_dtype("type", value)


class Size(tuple):
    """torch's ``Size``: a tuple of ints (``rg.Size([2, 3])``) with ``numel()``."""

    def __new__(cls, sizes: Any = ()) -> Size:
        return super().__new__(cls, (int(n) for n in sizes))

    def __repr__(self) -> str:
        # torch's ``torch.Size([2, 3])`` under this library's name, as dtypes print
        return f"retrograd.Size({list(self)})"

    def numel(self) -> int:
        count = 1
        for n in self:
            count *= n
        return count

    # torch's ``Size`` arithmetic gives ``Size``s, which the legacy constructors read as a
    # shape: ``torch.FloatTensor(t.size() + (n,))`` is a ``[*t.shape, n]`` tensor, not the
    # 1-d tensor of those numbers a plain tuple would give
    def __add__(self, other: Any) -> Any:
        if not isinstance(other, tuple):
            return NotImplemented
        return _joined_size(tuple.__add__(self, other))

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, tuple):
            return NotImplemented
        return _joined_size(tuple.__add__(other, self))

    def __mul__(self, times: Any) -> Any:
        result = tuple.__mul__(self, times)
        return result if result is NotImplemented else Size(result)

    __rmul__ = __mul__

    def __getitem__(self, index: Any) -> Any:
        item = tuple.__getitem__(self, index)
        return Size(item) if isinstance(index, slice) else item


def _joined_size(items: tuple) -> Size:
    """``items`` (a ``Size`` joined with a tuple) as a ``Size``; each must be an int, as
    torch's ``Size`` requires."""
    sizes = []
    for position, n in enumerate(items):
        try:
            sizes.append(operator.index(n))
        except TypeError:
            raise TypeError(
                f"Size takes an iterable of ints (item {position} is {type(n).__name__})"
            ) from None
    return Size(sizes)


#: the values a draw of each narrow integer dtype can take (torch's ``randint``/``random_``
#: bounds check)
RANDINT_BOUNDS = {"bool": (0, 1), **NARROW_RANGES}
