"""Dispatch: the one way a tensor operation reaches its backend.

Every method of :class:`~retrograd.tensor.Tensor` that computes something ends in
:func:`apply` (a :class:`TensorOp`, the operands, the parameters), which

- lifts its operands: a Python scalar goes to the op's ``*_scalar`` kernel, an array or a list
  becomes a tensor, a tensor of the inner backend joins its autodiff decorator (:func:`lift`);
- promotes them to one dtype (``bool < int64 < float32 < float64``; a scalar takes the
  tensor's dtype unless it is wider, as in PyTorch) and, for float ops, to a float dtype;
- calls the backend kernel on the primitives and wraps what comes back (one primitive or a
  tuple of them) as tensors of the first operand's backend and device;
- translates what the kernel raises into the hierarchy of :mod:`retrograd.errors`, naming the
  op and the inputs' shapes: the backend says which class its exception means
  (``Backend.error_class``), so nothing here knows NumPy's exceptions.

Fast paths keep the common ops cheap, and are checked before anything else: two tensors of
one backend, device and dtype go straight to the kernel; so does a float tensor with a Python
``float`` or ``int`` (either side), and a float tensor for a unary float op. They make the
result without calling ``__init__`` and call the kernel without ``*args``, and ``apply``'s
signature is positional: keyword arguments, ``*args`` or a ``staticmethod`` here would each
add interpreter work to every op. They raise through the same translation as the general
path.

:class:`TensorBase` is the data every tensor holds (a backend primitive, the backend, a device
label); the mixins and :class:`~retrograd.tensor.Tensor` build on it.
"""

from __future__ import annotations

import functools
import math
import numbers
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..autodiff.grad_mode import is_grad_enabled
from ..backend.protocol import (
    COMPLEX_DTYPES,
    COMPLEX_OF_REAL,
    COMPLEX_SEEN,
    DTYPES,
    FLOAT_DTYPES,
    GRAD_DTYPES,
    INT_DTYPES,
    default_float_dtype,
)
from ..context import capturing
from ..device import CPU0, Device
from ..errors import (
    RESULT_WATCH,
    ArgumentTypeError,
    AutodiffError,
    DTypeError,
    InnerOperandError,
    InvalidArgumentError,
    InvalidValueError,
    KernelDTypeError,
    RetrogradError,
    ShapeError,
    UnsupportedDTypeError,
    reported,
    shape_text,
    translate,
)
from .pairs import ValuesAndIndices
from .strides import (
    contiguous_strides,
    elementwise_strides,
    non_overlapping_and_dense,
    strides_of,
)

__all__ = [
    "COMMON",
    "COMPARE",
    "COMPLEX_DTYPES",
    "DTYPES",
    "FLOAT",
    "FLOAT_DTYPES",
    "GRAD_DTYPES",
    "INT_DTYPES",
    "NARROW_INTS",
    "NARROW_RANGES",
    "SCALARS",
    "TensorBase",
    "TensorOp",
    "apply",
    "check_float_range",
    "check_narrow_data",
    "check_same_dtype",
    "check_scalar",
    "check_written_tensor",
    "dispatch",
    "follow_layout",
    "from_host",
    "int_argument",
    "int_arguments",
    "int_dims",
    "joined",
    "lift",
    "no_generator",
    "normalize_dim",
    "on_backend",
    "preserved_layout",
    "promote",
    "result_dtype",
    "scalar_dtype",
    "scalar_value",
    "tracked_wide_float",
    "untracked",
    "wrap",
    "wrapped_int",
    "written_scalar",
]

# torch's promotion lattice restricted to retrograd's dtypes: a chain, but for two pairs of
# one rank: uint8 and int8 meet at int16, the two half types at float32
_RANK = {
    "bool": 0,
    "uint8": 1,
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "bfloat16": 5,
    "float16": 5,
    "float32": 6,
    "float64": 7,
    "complex64": 8,
    "complex128": 9,
}
_JOIN_OF_EQUALS = {1: "int16", 5: "float32"}
SCALARS = (int, float, bool, complex, np.integer, np.floating, np.complexfloating, np.bool_)


def tensor_argument(op: str, value: Any, name: str = "other") -> Any:
    """``value``, refused where it is a Python (or NumPy) number: the binary ops whose torch
    signature takes ``Tensor other`` alone (``hypot``, ``logaddexp``, ``heaviside``...) have no
    number overload, and torch's argument parser raises rather than wrap it."""
    if isinstance(value, SCALARS):
        raise DTypeError(
            f"{op}(): argument '{name}' (position 1) must be Tensor, not {type(value).__name__}"
            " (torch has no number form of it; pass a tensor, e.g. torch.tensor(value))"
        )
    return value


# The dtype rules of a binary TensorOp, compared by identity on the hot path.
#: ``TensorOp(..., promote=COMMON)``: lift the two operands and promote them to one dtype.
COMMON = "common"
#: ``TensorOp(..., promote=FLOAT)``: as COMMON, then compute in float (ints and bools in the
#: default float dtype, ``rg.get_default_dtype()``).
FLOAT = "float"
#: ``TensorOp(..., promote=COMPARE)``: as COMMON for two tensors; a scalar is compared as it is,
#: the tensor keeping its dtype.
COMPARE = "compare"
_RULES = {None: None, COMMON: COMMON, FLOAT: FLOAT, COMPARE: COMPARE}
_new = object.__new__


#: Every tensor class (TensorBase's subclasses): the binary fast path takes two of them.
_KINDS: set[type] = set()


class TensorBase:
    """What every tensor holds: a backend primitive, its backend and a device label.

    :func:`apply` reads these three slots and nothing else; results are made by calling the
    operand's class, so the mixins and :class:`~retrograd.tensor.Tensor` need no import of
    each other here.
    """

    __slots__ = ("__weakref__", "_backend", "_device", "_prim")
    #: made in ``inference_mode()``, or a view of a tensor that was (set in the instance
    #: dict of the classes that have one: see :mod:`.inference`)
    _inference = False

    #: How this tensor was taken from a base (:mod:`.views`) and, for a tensor that is no
    #: view, the strides torch would give it when they are not row-major (an elementwise
    #: op's result follows its operands' layout, as torch's): both ``None`` for the common,
    #: contiguous tensor, so an op checks two attributes to know there is nothing to follow.
    _view: Any = None
    _layout: Any = None

    #: The class of what an operation on this tensor returns: the class itself, unless a
    #: subclass names another in its body. ``nn.Parameter`` names ``Tensor``: ``2 * weight``
    #: is a plain tensor, as in PyTorch, not a second parameter a module would register.
    _result: type

    #: Whether what an operation returns takes this tensor's class even where it is not the
    #: first operand (``y * x``, ``W @ x``): ``vmap``'s element of a mapped input, whose
    #: derived values the function must not read on the host whichever side they stood
    _sticky = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_result" not in cls.__dict__:
            cls._result = cls
        _KINDS.add(cls)

    def __init__(self, primitive: Any, backend: Any, device: Device = CPU0):
        self._prim = primitive
        self._backend = backend
        self._device = device


TensorBase._result = TensorBase


# -- dtype rules ---------------------------------------------------------------------------------
def result_dtype(a: str, b: str) -> str:
    """The dtype two tensors of dtypes ``a`` and ``b`` are promoted to (PyTorch's rules:
    ``bfloat16`` with ``float16`` gives ``float32``, ``uint8`` with ``int8`` ``int16``)."""
    rank_a, rank_b = _RANK[a], _RANK[b]
    if (a == "float64" and b == "complex64") or (b == "float64" and a == "complex64"):
        return "complex128"  # torch's: the complex dtype wide enough for both
    if rank_a == rank_b and a != b:
        return _JOIN_OF_EQUALS[rank_a]
    return a if rank_a >= rank_b else b


def _category(dtype: str) -> int:
    if dtype in COMPLEX_DTYPES:
        return 3
    return 2 if dtype in FLOAT_DTYPES else (1 if dtype in INT_DTYPES else 0)


def _promoted(a: str, b: str, a_shape: tuple, b_shape: tuple) -> str:
    """torch's rule for two tensors: a 0-d tensor with one that has dimensions counts only by
    its category (bool, integer, float): ``float32 [n]`` with ``float64 []`` is float32, but
    ``int64 [n]`` with ``float64 []`` is float64."""
    a_zero, b_zero = len(a_shape) == 0, len(b_shape) == 0
    if a_zero != b_zero:
        return _beside(b, a) if a_zero else _beside(a, b)
    return result_dtype(a, b)


def _beside(dims: str, zero: str) -> str:
    """The dtype of a tensor with dimensions (``dims``) taken with a 0-d one (``zero``):
    the 0-d one counts only where its category is higher (a complex 0-d one with a float
    tensor: the complex dtype of the float's precision, torch's ``float32 [n]`` with
    ``complex128 []`` being complex64)."""
    if _category(zero) <= _category(dims):
        return dims
    if zero in COMPLEX_DTYPES and dims in FLOAT_DTYPES:
        return COMPLEX_OF_REAL[dims]
    return zero


#: torch's dtype for two tensors, 0-d ones by category (for the tensor methods that check a
#: result's dtype before computing it)
promoted_dtype = _promoted


def promoted_dtype_of(*tensors: Any) -> str:
    """torch's dtype for several tensors taken together (as one kernel takes ``addcmul``'s
    three): the dimensioned ones' dtype, unless a 0-d one is of a higher category. Pairwise
    steps differ: ``float32 [n] + float64 [] * int64 [n]`` is float32, not float64."""
    dims = [t.dtype for t in tensors if t.ndim]
    zeros = [t.dtype for t in tensors if not t.ndim]
    zero = functools.reduce(result_dtype, zeros) if zeros else None
    if not dims:
        return zero
    dim = functools.reduce(result_dtype, dims)
    return dim if zero is None else _beside(dim, zero)


def scalar_dtype(tensor_dtype: str, scalar: Any) -> str:
    """The dtype of ``tensor op scalar`` (PyTorch's rule: the tensor's, unless it is wider)."""
    if isinstance(scalar, bool | np.bool_):
        return tensor_dtype
    if isinstance(scalar, numbers.Integral):
        check_scalar_int(scalar)
        return "int64" if tensor_dtype == "bool" else tensor_dtype
    if isinstance(scalar, complex | np.complexfloating):
        if tensor_dtype in COMPLEX_DTYPES:
            return tensor_dtype
        return COMPLEX_OF_REAL.get(tensor_dtype) or COMPLEX_OF_REAL[default_float_dtype()]
    if tensor_dtype in COMPLEX_DTYPES:
        return tensor_dtype
    return tensor_dtype if tensor_dtype in FLOAT_DTYPES else default_float_dtype()


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_END = 2**64  # (torch reads an int from 2**63 on as an unsigned 64-bit scalar)


def check_scalar_int(value: numbers.Integral, op: str | None = None) -> None:
    """torch reads a Python int operand as a 64-bit scalar, signed or (from 2**63) unsigned:
    one outside ``[-2**63, 2**64)`` it refuses ("int too big to convert"), where a cast here
    would wrap it or NumPy fail with a bare ``OverflowError``."""
    if not _INT64_MIN <= value < _UINT64_END:
        prefix = "" if op is None else f"{op}: "
        raise InvalidArgumentError(
            f"{prefix}the integer {value} is too big to convert to a 64-bit scalar "
            "(as torch refuses it)"
        )


def scalar_value(value: Any, dtype: str) -> Any:
    """``value`` as the Python scalar a kernel of ``dtype`` takes."""
    if dtype in FLOAT_DTYPES:
        return float(value)
    if dtype in COMPLEX_DTYPES:
        return complex(value)
    if dtype in INT_DTYPES:
        return wrapped_int(value, dtype)
    return bool(value)


#: the narrow integer dtypes: (lowest, highest value). The tables below derive from it.
NARROW_RANGES = {
    "uint8": (0, 2**8 - 1),
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
}
#: the narrow integer dtypes: (modulus, lowest value)
_NARROW_INTS = {dtype: (high - low + 1, low) for dtype, (low, high) in NARROW_RANGES.items()}
#: torch's bounds of a number written into a narrow integer tensor: (integers, floats); an
#: unsigned dtype takes negative integers down to ``-max`` (wrapped: ``-1`` is uint8's 255)
NARROW_INTS = {
    dtype: ((-high if low == 0 else low, high), (low, high))
    for dtype, (low, high) in NARROW_RANGES.items()
}


def wrapped_int(value: Any, dtype: str) -> int:
    """Integer ``value`` as a kernel of integer ``dtype`` takes it: on a narrow dtype (uint8,
    int8, int16, int32) wrapped into its range, as torch casts a scalar operand (``uint8 +
    300`` adds 44, ``uint8 < -1`` compares with 255, ``int8 + 200`` adds -56)."""
    value = int(value)
    narrow = _NARROW_INTS.get(dtype)
    if narrow is None:
        return value
    modulus, low = narrow
    return (value - low) % modulus + low


def written_scalar(op: str, value: Any, dtype: str) -> Any:
    """Number ``value`` as torch writes it into a tensor of ``dtype`` (``full``, ``fill_``,
    ``masked_fill``, ``x[i] = value``): into a narrow integer dtype, a float is truncated, a
    negative integer wraps into uint8 (``-1`` is 255), and a value past torch's bounds is
    refused (uint8's ``300``, int8's ``128``), where arithmetic wraps it (``uint8 + 300``);
    other dtypes' values come back as they are."""
    if isinstance(value, int):
        check_scalar_int(value, op)
    if isinstance(value, complex | np.complexfloating) and dtype not in COMPLEX_DTYPES:
        value = _real_part(op, value, dtype)
    check_float_range(op, value, dtype)
    bounds = NARROW_INTS.get(dtype)
    past_int64 = isinstance(value, float | np.floating) and not -(2.0**63) <= value < 2.0**63
    if dtype == "int64" and past_int64:  # (NaN too: NumPy's cast writes -2**63)
        raise InvalidValueError(  # (torch: RuntimeError)
            f"{op}: {value!r} cannot be converted to int64 without overflow (as torch's)"
        )
    if bounds is None:
        return value
    if isinstance(value, bool | np.bool_):
        return int(value)
    integral = isinstance(value, numbers.Integral)
    low, high = bounds[0 if integral else 1]
    if not low <= value <= high:  # (NaN too)
        raise InvalidValueError(  # (torch: RuntimeError)
            f"{op}: {value!r} cannot be converted to {dtype} without overflow (as torch's)"
        )
    return wrapped_int(value, dtype) if integral else int(value)


#: the largest finite value of the floating dtypes narrower than a Python float (complex64:
#: of each of its parts)
_FLOAT_MAX = {
    "float32": float(np.finfo(np.float32).max),
    "float16": float(np.finfo(np.float16).max),
    "bfloat16": 3.3895313892515355e38,  # (2 - 2**-7) * 2**127
    "complex64": float(np.finfo(np.float32).max),
}


def check_float_range(op: str, value: Any, dtype: str) -> None:
    """torch's refusal of a finite number past the range of the floating ``dtype`` it is
    written into ("value cannot be converted to type float without overflow": ``full(size,
    finfo(float64).min)`` in float32, ``masked_fill(mask, 1e300)``), where a cast here would
    write an infinity; infinities and NaN pass, as torch's."""
    high = _FLOAT_MAX.get(dtype)
    if high is None or not isinstance(value, numbers.Complex) or isinstance(value, bool | np.bool_):
        return
    for part in (float(value.real), float(value.imag)):
        if math.isfinite(part) and not -high <= part <= high:
            raise InvalidValueError(  # (torch: RuntimeError)
                f"{op}: {value!r} cannot be converted to {dtype} without overflow (as torch's)"
            )


def _real_part(op: str, value: Any, dtype: str) -> Any:
    """A complex number written into a tensor of real ``dtype``, as torch writes it: its
    truth into a bool tensor, its real part where its imaginary part is zero, else refused
    (NumPy would drop the imaginary part or fail with a bare ``TypeError``)."""
    if dtype == "bool":
        return bool(value)
    if value.imag != 0:  # (torch: "value cannot be converted ... without overflow", a RuntimeError)
        raise KernelDTypeError(
            f"{op}: the complex value {value!r} cannot be converted to {dtype} (as torch "
            "refuses it); take .real or abs() of it first"
        )
    return float(value.real)


def check_narrow_data(op: str, data: Any, dtype: str) -> None:
    """torch's bounds on Python numbers made into a narrow integer tensor (``[-1]`` wraps to
    255; ``[300]`` is refused): :func:`written_scalar`'s, for each of them (other dtypes and
    data that is not numbers, lists or tuples pass unchecked)."""
    if dtype not in NARROW_INTS or not isinstance(data, list | tuple | numbers.Number):
        return
    try:
        values = np.asarray(data)
    except (ValueError, TypeError):  # (ragged data: the backend names it)
        return
    if values.dtype.kind in "iuf" and values.size:
        written_scalar(op, values.min().item(), dtype)
        written_scalar(op, values.max().item(), dtype)


def check_written_tensor(op: str, value: Any, dtype: str) -> None:
    """torch's bounds check of a one-element tensor ``value`` written as a scalar into a
    tensor of ``dtype`` (``masked_fill(mask, tensor(2**31))`` into int32, ``u8[mask] =
    tensor(-2**31)``, ``masked_fill(mask, tensor(1j))`` into float32, ``tensor(nan)`` into
    int64): torch reads it as a number and refuses one past ``dtype``'s bounds, or a complex
    one with an imaginary part into a real dtype, where a cast would wrap or drop it. Read on
    the host only for those pairs of dtypes (a float into a float is never read), except while
    a step is captured."""
    if value.dtype == dtype or capturing.get():
        return
    complex_into_real = value.dtype in COMPLEX_DTYPES and dtype not in COMPLEX_DTYPES
    float_into_int64 = value.dtype in FLOAT_DTYPES and dtype == "int64"
    if dtype in NARROW_INTS or complex_into_real or float_into_int64:
        written_scalar(op, value.reshape(()).item(), dtype)


def check_same_dtype(op: str, x: Any, source: Any) -> None:
    """torch's refusal of a source tensor of another dtype than ``x`` (the ops that write a
    source into ``x``, such as ``index_add`` and ``scatter_reduce``, do not promote)."""
    if isinstance(source, TensorBase) and source.dtype != x.dtype:
        raise DTypeError(
            f"{op}: self ({x.dtype}) and source ({source.dtype}) must have the same dtype, "
            "as in torch; cast one of them"
        )


def check_scalar(op: str, value: Any) -> Any:
    """``value`` checked to be a scalar (NumPy scalars become Python ones)."""
    if not isinstance(value, SCALARS):
        raise DTypeError(f"{op}: expected a Python scalar, got {type(value).__name__}")
    if isinstance(value, np.generic):
        return value.item()
    return value


def host_number(value: Any) -> Any:
    """A NumPy scalar as the Python number torch reads it as (``np.int64(3)`` is ``3``, an
    int, so ``x % np.int64(3)`` keeps ``x``'s dtype); anything else as it is."""
    return value.item() if isinstance(value, np.generic) else value


def no_generator(op: str, generator: Any) -> None:
    """torch's ``generator=`` names a stream of its own; where a draw here cannot take one
    (``multinomial``), a generator given is refused rather than ignored."""
    if generator is not None:
        raise InvalidArgumentError(
            f"{op}: generator= is not supported (one seeded stream: rg.manual_seed); drop it"
        )


def checked_generator(op: str, generator: Any) -> Any:
    """``generator`` when it is ``None`` or an ``rg.Generator`` (:mod:`.generator`: known here
    by its ``draws`` method, so that this module needs no import of it); otherwise an error."""
    if generator is None or getattr(generator, "is_default_stream", False):
        return None  # ``default_generator``: the stream drawn from without a generator
    if callable(getattr(generator, "draws", None)):
        return generator
    raise DTypeError(f"{op}: generator must be an rg.Generator, got {type(generator).__name__}")


def int_argument(op: str, value: Any, name: str = "argument") -> Any:
    """``value`` as torch's argument parser reads an int (a size, a count, a dimension, an
    index): a 0-d integer tensor is its int (``x.view(n, -1)`` with ``n = lengths.max()``,
    ``topk(k=t)``), a 0-d tensor of another dtype is refused as torch refuses it (a
    :class:`~retrograd.errors.DTypeError`); anything else comes back as given, for the
    caller's own checks. The one place every int argument goes through for this."""
    if isinstance(value, TensorBase) and value.ndim == 0:
        if value.dtype in INT_DTYPES:
            return int(value.item())
        raise DTypeError(
            f"{op}: {name} must be an int (or a 0-d integer tensor), got a 0-d {value.dtype} tensor"
        )
    return value


def int_parameter(op: str, value: Any, name: str) -> int:
    """``value`` as an int parameter torch's parser takes (an int, a NumPy integer, a 0-d int
    tensor: :func:`int_argument`); a float, a str, a bool or a tensor of several elements is
    the wrong type, a ``DTypeError`` naming ``op`` and ``name`` (torch's ``TypeError``)."""
    value = int_argument(op, value, name)
    if not isinstance(value, numbers.Integral) or isinstance(value, bool | np.bool_):
        raise ArgumentTypeError(f"{op}: {name} must be an int, got {_described(value)}")
    return int(value)


def int_arguments(op: str, values: Any, name: str = "argument") -> Any:
    """:func:`int_argument` of ``values``, or of each of them where it is a list or tuple."""
    if isinstance(values, (list, tuple)):
        return type(values)(int_argument(op, v, name) for v in values)
    return int_argument(op, values, name)


def _described(value: Any) -> str:
    """An argument as a type error names it: a tensor or array by its shape and dtype."""
    if isinstance(value, TensorBase | np.ndarray):
        return f"a {type(value).__name__} of shape {shape_text(value.shape)} ({value.dtype})"
    return repr(value)


def check_int_list(op: str, value: Any, name: str) -> None:
    """torch's refusal of a tensor or an array of several elements given whole for a list of
    ints (``x.reshape(tensor([2, 3]))``, ``x.sum(tensor([0, 1]))``: "must be tuple of ints,
    not Tensor"); one of a single integer element is that int, as torch reads it."""
    if (
        isinstance(value, TensorBase | np.ndarray)
        and value.ndim  # (a 0-d one is an int argument: int_argument reads it)
        and (math.prod(value.shape) != 1 or str(value.dtype) not in ("int64", "int32"))
    ):
        raise ArgumentTypeError(f"{op}: {name} must be a tuple of ints, got {_described(value)}")


def int_dims(op: str, dim: Any) -> tuple[Any, ...]:
    """``dim`` (an int, a 0-d int tensor, or several of them) as a tuple, each read by
    :func:`int_argument`."""
    check_int_list(op, dim, "dim")
    dim = int_arguments(op, dim, "dimension")
    return (dim,) if isinstance(dim, numbers.Integral) else tuple(int_arguments(op, tuple(dim)))


def normalize_dim(op: str, dim: Any, ndim: int, extra: int = 0, scalar: bool = False) -> int:
    """``dim`` in ``[-(ndim+extra), ndim+extra)`` mapped to a non-negative index. ``scalar``:
    a 0-d tensor takes ``0`` and ``-1`` as torch's shape ops do (its one dimension when seen
    as ``[1]``), mapped to 0."""
    dim = int_argument(op, dim, "dimension")
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        # a float, a str, a tensor of several elements: the wrong type, torch's TypeError
        raise ArgumentTypeError(f"{op}: dimension must be an int, got {_described(dim)}")
    size = ndim + extra
    if scalar and size == 0:
        if dim not in (0, -1):
            raise ShapeError(
                f"{op}: dimension {dim} is out of range for a 0-d tensor (expected 0 or -1)"
            )
        return 0
    if not -size <= dim < size:
        if size == 0:
            raise ShapeError(f"{op}: dimension {dim} given for a 0-d tensor, which has none")
        raise ShapeError(
            f"{op}: dimension {dim} is out of range for a tensor with {ndim} dimensions "
            f"(expected {-size} to {size - 1})"
        )
    return int(dim) % size if size else 0


def _is_scalar_dim(dim: Any) -> bool:
    if isinstance(dim, numbers.Integral) and not isinstance(dim, bool):
        return dim in (0, -1)
    if isinstance(dim, list | tuple) and dim:
        return all(_is_scalar_dim(d) for d in dim) and len(dim) == 1
    return False


def _as_zero_dim(out: Any) -> Any:
    if isinstance(out, TensorBase):
        return out.reshape(()) if out.numel() == 1 else out
    if isinstance(out, tuple):
        items = [_as_zero_dim(o) for o in out]
        return type(out)(*items) if hasattr(out, "_fields") else tuple(items)
    return out


def scalar_dims(method: Any = None, *, position: int = 0) -> Any:
    """``method`` (whose ``dim`` is its argument number ``position`` after ``self``) taking,
    on a 0-d tensor, dimension ``0`` or ``-1`` (or a one-element tuple of them) as torch
    does: as the one dimension of the tensor seen as ``[1]``, the result 0-d again (keepdim
    or not)."""
    if method is None:
        return functools.partial(scalar_dims, position=position)

    op = method.__name__

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        # dims given as 0-d int tensors are read as torch reads them (a bare tensor there is
        # left to the method: ``max(other)`` takes one; a dim's own parsing reads it)
        if len(args) > position and isinstance(args[position], list | tuple):
            dim = int_arguments(op, args[position], "dimension")
            args = (*args[:position], dim, *args[position + 1 :])
        if "dim" in kwargs:
            kwargs = {**kwargs, "dim": int_arguments(op, kwargs["dim"], "dimension")}
        if (args or kwargs) and self.ndim == 0:  # (no dim given: nothing to wrap)
            if "dim" in kwargs and _is_scalar_dim(kwargs["dim"]):
                dim = kwargs["dim"]
                kwargs = {**kwargs, "dim": 0 if isinstance(dim, numbers.Integral) else (0,)}
                return _as_zero_dim(method(self.reshape((1,)), *args, **kwargs))
            if len(args) > position and _is_scalar_dim(args[position]):
                dim = 0 if isinstance(args[position], numbers.Integral) else (0,)
                args = (*args[:position], dim, *args[position + 1 :])
                return _as_zero_dim(method(self.reshape((1,)), *args, **kwargs))
        return method(self, *args, **kwargs)

    return wrapper


# -- operands ------------------------------------------------------------------------------------
def wrap(reference: TensorBase, prim: Any) -> Any:
    """``prim`` (a primitive of ``reference``'s backend) as a tensor on ``reference``'s device."""
    return type(reference)._result(prim, reference._backend, reference._device)


def from_host(cls: type, data: Any, dtype: str | None, backend: Any, device: Device) -> Any:
    """A tensor of class ``cls`` holding a copy of host ``data`` (scalar, lists, array)."""
    with reported(f"tensor: cannot make a tensor from {type(data).__name__}", backend):
        primitive = backend.from_data(data, dtype, device)
    return cls(primitive, backend, device)


#: inner backend -> {(device, dtype, shape, bytes): primitive}: constants of the shapes alone
_HOST_CONSTANTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_HOST_CONSTANTS_KEPT = 256  # per backend, the oldest dropped first
_HOST_CONSTANTS_LOCK = threading.Lock()


def host_constant(cls: type, array: np.ndarray, backend: Any, device: Device) -> Any:
    """A tensor of class ``cls`` holding ``array``, a constant that depends on shapes alone
    (the positions a pad, a resampling or a diagonal reads), copied onto the device once and
    kept for the next call. A copy from the host at every call is a host round trip: on an
    accelerator a blocking copy waits for the whole queue, each step. The primitive is shared
    (nothing writes into an index it was given), outside any graph."""
    inner = backend.inner if backend.is_autodiff else backend
    try:
        with _HOST_CONSTANTS_LOCK:
            table = _HOST_CONSTANTS.setdefault(inner, {})
    except TypeError:  # (a backend without weak references or a hash: made each time)
        return from_host(cls, array, array.dtype.name, backend, device)
    key = (device, array.dtype.str, array.shape, array.tobytes())
    primitive = table.get(key)
    if primitive is None:
        with reported(f"tensor: cannot make a tensor from {type(array).__name__}", inner):
            primitive = inner.from_data(array, array.dtype.name, device)  # (float16 kept)
        with _HOST_CONSTANTS_LOCK:  # (the in-process engine's threads share the table)
            if len(table) >= _HOST_CONSTANTS_KEPT:
                del table[next(iter(table))]
            table[key] = primitive
    if backend.is_autodiff:
        primitive = backend.wrap(primitive)
    return cls(primitive, backend, device)


def tracked_wide_float(x: TensorBase, *others: TensorBase) -> bool:
    """Whether a function that has an op of its own in the op table records it: ``x`` is
    float32 or float64, and ``x`` or one of ``others`` requires grad. Elsewhere (16 bits,
    complex, integers, nothing tracked) it keeps its composition, which computes the same
    values; the op is there for what backward holds."""
    return x.dtype in ("float32", "float64") and (
        x.requires_grad or any(t.requires_grad for t in others)
    )


def untracked(t: TensorBase) -> Any:
    """``t``'s values as a tensor outside the graph (no node, not requiring grad; unlike
    ``detach()``, which keeps a leaf's requirement, as Burn's)."""
    backend = t._backend
    if not backend.is_autodiff:
        return t
    out = type(t)._result(backend.wrap(backend.inner_value(t._prim)), backend, t._device)
    if t._view is not None or t._layout is not None:  # what is computed from it follows t's
        strides = preserved_layout(t)
        if strides is not None:
            out._layout = (out.shape, strides)
    return out


def on_backend(t: TensorBase, backend: Any, op: str) -> Any:
    """``t`` moved onto ``backend``: equal backends share primitives, and an inner-backend
    tensor lifts into its autodiff decorator untracked. A tracked tensor goes onto its inner
    backend only where no graph is recorded (``torch.no_grad``: ``G.T @ X`` of a gradient
    ``G`` and a parameter ``X``, as torch's result, requires no grad)."""
    source = t._backend
    if source == backend:
        return type(t)._result(t._prim, backend, t._device)
    if backend.is_autodiff and backend.inner == source:
        return type(t)._result(backend.wrap(t._prim), backend, t._device)
    if source.is_autodiff and source.inner == backend:
        if source.is_tracked(t._prim) and is_grad_enabled():  # its inner value would lose it
            # the public entry the user called runs again on ``source`` (errors.guard)
            raise InnerOperandError(
                f"{op}: a tensor that requires grad ({shape_text(t.shape)} {t.dtype}) cannot"
                f" join a tensor of {backend!r}, which records no graph; make that one a"
                f" tensor of {source!r} first (rg.Tensor.from_inner(t, backend=...))",
                functools.partial(_rejoined, source),
            )
        return type(t)._result(source.inner_value(t._prim), backend, t._device)
    raise RetrogradError(f"{op}: cannot combine tensors of {source!r} and {backend!r}")


def _rejoined(decorator: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict, Any] | None:
    """``args`` and ``kwargs`` of an op with their tensors of ``decorator``'s inner backend
    lifted onto ``decorator`` as constants (in lists, tuples, dicts and ``(values, indices)``
    pairs too; never ``out=``, which the op writes into), and the function to call once the op
    has run on them: it writes back into each inner tensor what the op wrote into its lifted
    copy (``batch_norm``'s running statistics); ``None`` where there is no tensor to lift.
    torch records an op of a tensor that requires grad and a plain one (a gradient) with the
    plain one as a constant: so does the op run again on these."""
    inner = decorator.inner
    copies: list[tuple[Any, Any, Any]] = []  # (inner tensor, its lifted copy, copy's primitive)

    def lifted(value: Any) -> Any:
        if isinstance(value, TensorBase):
            source = value._backend
            if source is decorator or source.is_autodiff or source != inner:
                return value
            prim = decorator.wrap(value._prim)
            copy = type(value)._result(prim, decorator, value._device)
            copies.append((value, copy, prim))
            return copy
        if isinstance(value, ValuesAndIndices):
            return type(value)(lifted(value.values), lifted(value.indices))
        kind = type(value)
        if kind is list or kind is tuple:
            return kind(lifted(item) for item in value)
        if kind is dict:
            return {key: lifted(item) for key, item in value.items()}
        return value

    new_args = tuple(lifted(value) for value in args)
    new_kwargs = {key: value if key == "out" else lifted(value) for key, value in kwargs.items()}
    if not copies:
        return None

    def write_back(op: str) -> None:
        for original, copy, prim in copies:
            if copy._prim is prim:  # (nothing written, or written into the shared buffer)
                continue
            if decorator.is_tracked(copy._prim) and is_grad_enabled():
                raise AutodiffError(
                    f"{op}: wrote a value that requires grad into a tensor of {inner!r}, which"
                    f" records no graph; make that one a tensor of {decorator!r} first"
                    " (rg.Tensor.from_inner(t, backend=...))"
                )
            original.copy_(untracked(copy))

    return new_args, new_kwargs, write_back


def stood_for(value: Any) -> Any:
    """``value``, or the tensor it stands for where a tensor is due (``__retrograd_tensor__``:
    a state dict's entry, which is a tensor in torch)."""
    return value.__retrograd_tensor__() if hasattr(value, "__retrograd_tensor__") else value


def lift(reference: TensorBase, value: Any, op: str) -> Any:
    """``value`` (a tensor, NumPy array or nested list) as a tensor ``reference`` can be
    combined with: on its backend and device. Scalars are not lifted (a ``DTypeError``)."""
    if isinstance(value, TensorBase):
        if value._backend is not reference._backend:
            value = on_backend(value, reference._backend, op)
        if value._device is not reference._device:
            raise RetrogradError(
                f"{op}: tensors on different devices ({reference._device} and {value._device})"
            )
        return value
    if isinstance(value, ValuesAndIndices):  # sort/topk/cummax/cummin: the values
        return lift(reference, value.values, op)
    if getattr(type(value), "_sparse_coo", False):  # a sparse tensor (tensor/sparse_coo.py)
        raise InvalidArgumentError(
            f"{op}: a sparse COO tensor operand is not supported here (retrograd's sparse "
            "tensors multiply dense matrices: mm, matmul, @); call .to_dense() first"
        )
    if isinstance(value, np.ndarray | list | tuple):
        if hasattr(value, "_fields"):  # a (values, indices) result, not data
            raise DTypeError(
                f"{op}: cannot combine a tensor with {type(value).__name__}{tuple(value._fields)}"
                " (a named tuple); take one of its fields"
            )
        return from_host(
            type(reference)._result, value, None, reference._backend, reference._device
        )
    raise DTypeError(f"{op}: cannot combine a tensor with {type(value).__name__}")


def joined(a: TensorBase, b: Any, op: str) -> tuple[Any, Any]:
    """Tensor ``a`` and ``b`` (lifted with :func:`lift`) on one backend: an inner-backend
    tensor with one of its autodiff decorator's goes onto the decorator, whichever comes
    first, so that the result is recorded (``x_inner + w`` and ``G @ w`` keep w's gradient)."""
    if isinstance(b, TensorBase) and b._backend.is_autodiff and not a._backend.is_autodiff:
        a = on_backend(a, b._backend, op)
    return a, lift(a, b, op)


def promote(a: Any, b: Any, op: str, floats: bool = False) -> tuple[Any, Any]:
    """Tensor ``a`` and ``b`` (lifted with :func:`lift`) on one backend, in one dtype: the
    wider of the two, and a float dtype when ``floats`` (ints and bools: the default one)."""
    a, b = joined(a, b, op)
    backend = b._backend
    target = backend.dtype(a._prim)
    b_dtype = backend.dtype(b._prim)
    if target != b_dtype:
        target = _promoted(target, b_dtype, backend.shape(a._prim), backend.shape(b._prim))
    if floats and target not in FLOAT_DTYPES and target not in COMPLEX_DTYPES:
        # each operand straight to the float dtype, as torch casts them, never through a
        # narrower common integer dtype (``u8 / int32_tensor(-1)`` divides by -1, not 255)
        target = default_float_dtype()
    if backend.dtype(a._prim) != target:
        a = a.cast(target)
    if b_dtype != target:
        b = b.cast(target)
    return a, b


# -- the entry -----------------------------------------------------------------------------------
class TensorOp:
    """An operation as :func:`apply` runs it: the name errors report, the backend kernel, and
    how its operands are made to fit.

    - ``promote`` (``COMMON``, ``FLOAT`` or ``COMPARE``): a binary elementwise op; its two
      operands are lifted and promoted (see :func:`apply`), and ``scalar`` names the kernel
      for a Python scalar operand (``add_scalar``; ``rsub_scalar`` for a reflected op).
    - ``floats``: a unary op computed in float (an int or bool tensor in the default float dtype).
    - neither: the operands already fit (one backend, the dtypes the kernel wants). Such an
      op may also be given to :func:`apply` as the kernel's name alone.

    A module declares its ops once, as constants (``ADD = TensorOp("add", scalar="add_scalar",
    promote=COMMON)``): :func:`apply` then reads a few slots per call.
    """

    __slots__ = ("floats", "kernel", "name", "promote", "scalar")

    def __init__(
        self,
        name: str,
        kernel: str | None = None,
        scalar: str | None = None,
        promote: str | None = None,
        floats: bool = False,
    ):
        if promote not in _RULES:
            raise ValueError(
                f"TensorOp {name!r}: promote must be one of {list(_RULES)}, got {promote!r}"
            )
        if floats and promote is not None:
            raise ValueError(f"TensorOp {name!r}: floats is for unary ops; use promote=FLOAT")
        self.name = name
        self.kernel = kernel or name
        self.scalar = scalar
        self.promote = _RULES[promote]  # the module's own objects: apply compares identities
        self.floats = bool(floats)

    def __repr__(self) -> str:
        return (
            f"TensorOp({self.name!r}, kernel={self.kernel!r}, scalar={self.scalar!r}, "
            f"promote={self.promote!r}, floats={self.floats!r})"
        )


def apply(op: TensorOp | str, inputs: Sequence[Any], params: tuple = ()) -> Any:
    """Run ``op`` on the tensors ``inputs`` and the non-tensor ``params`` (a tuple, passed to
    the kernel after the operands' primitives); errors are translated, naming ``op.name`` and
    the inputs.

    ``op`` is a :class:`TensorOp`, or a string naming a kernel whose operands already fit. The
    result is a tensor, or a tuple of tensors where the kernel returns a tuple of primitives,
    on the first operand's backend and device.

    For a binary op (``op.promote`` set), either of the two operands may also be a Python or
    NumPy scalar, an array or a list. Tensors are lifted and promoted (:func:`promote`); a
    scalar goes to kernel ``op.scalar`` as ``scalar(tensor, value)``: a scalar given first
    makes a reflected op, whose ``scalar`` kernel takes it second (``rsub_scalar``). For a
    unary op with ``op.floats``, an int or bool tensor is cast to the default float dtype first.

    Fast paths, checked first: two tensors of one backend, device and dtype; a float tensor
    with a Python ``float`` or ``int``; a float tensor for a ``floats`` op. They go straight to
    the kernel (and make the result without a call of ``__init__``).

    The signature is positional, without ``*args`` or keywords, so that CPython (3.11)
    specialises the calls: one method call plus this function is the whole Python overhead of
    an op on the fast paths.
    """
    return dispatch(None, op, inputs, params)


def _watched_dispatch(
    _receiver: Any, op: TensorOp | str, inputs: Sequence[Any], params: tuple = ()
) -> Any:
    """:func:`dispatch` while some thread runs in ``inference_mode()``: its result shown to
    :data:`~retrograd.errors.RESULT_WATCH` (which marks inference tensors)."""
    result = _plain_dispatch(_receiver, op, inputs, params)
    watch = RESULT_WATCH[0]
    if watch is not None:
        watch(tuple(inputs), result)
    return result


#: the Python numbers of :func:`dispatch`'s fast path with a float tensor
_REAL_NUMBERS = (float, int)


def dispatch(_receiver: Any, op: TensorOp | str, inputs: Sequence[Any], params: tuple = ()) -> Any:
    """:func:`apply`, as the method ``Tensor._apply`` the mixins call (the receiver is not
    used: a plain function bound as a method is what CPython 3.11 specialises best, better than
    a ``staticmethod``)."""
    if COMPLEX_SEEN[0]:  # complex tensors exist in this process: is this op given one?
        refuse_complex(op, inputs)
    if op.__class__ is not TensorOp:  # a kernel name: the operands fit as they are
        result = _run(op, op, inputs, params)
        if op in _LAYOUT_KERNELS and any(
            t._view is not None or t._layout is not None
            for t in inputs
            if isinstance(t, TensorBase)
        ):
            follow_layout(result, inputs)
        return result
    rule = op.promote
    if rule is not None:  # a binary elementwise op
        a, b = inputs
        kind = type(a)
        # two tensors (of one class, or a Tensor and an nn.Parameter: both in _KINDS)
        if kind is type(b) or (kind in _KINDS and type(b) in _KINDS):
            backend = a._backend
            if b._backend is backend and b._device is a._device:
                pa, pb = a._prim, b._prim
                if backend.same_dtype(pa, pb) and (
                    rule is not FLOAT or backend.dtype(pa) in FLOAT_DTYPES
                ):
                    try:  # the common case, kept short: same backend, device and dtype
                        out = getattr(backend, op.kernel)(pa, pb)
                    except Exception as error:
                        raise translate(op.name, error, backend, inputs)  # noqa: B904 (errors.translate)
                    result = _new(  # TensorBase.__init__, inlined (a Python call less)
                        kind._result if kind is type(b) or not type(b)._sticky else type(b)._result
                    )
                    result._prim, result._backend, result._device = out, backend, a._device
                    if (
                        a._view is not None
                        or a._layout is not None
                        or b._view is not None
                        or b._layout is not None
                    ):
                        follow_layout(result, (a, b))
                    return result
        elif op.scalar is not None and (
            type(b) in _REAL_NUMBERS or kind in _REAL_NUMBERS
        ):  # a Python int or float with a float tensor, either side (a complex number, a
            # bool: the general path below, whose result follows the layout too)
            other = type(b)
            if other is float or other is int:
                t, value = a, b
            else:  # reflected
                t, value, other = b, a, kind
            backend, prim = t._backend, t._prim
            if backend.dtype(prim) in FLOAT_DTYPES:
                if other is int and not _INT64_MIN <= value < _UINT64_END:
                    check_scalar_int(value, op.name)
                if other is int and rule is not COMPARE:
                    value = float(value)
                try:
                    out = getattr(backend, op.scalar)(prim, value)
                except Exception as error:
                    raise translate(op.name, error, backend, (t,))  # noqa: B904
                result = _new(type(t)._result)
                result._prim, result._backend, result._device = out, backend, t._device
                if t._view is not None or t._layout is not None:
                    follow_layout(result, (t,))
                return result
        result = _binary(op, a, b, params)
        operands = [v for v in (a, b) if isinstance(v, TensorBase)]
        if any(v._view is not None or v._layout is not None for v in operands):
            follow_layout(result, operands)
        return result
    if not op.floats:
        result = _run(op.name, op.kernel, inputs, params)
        if op.kernel in _LAYOUT_KERNELS and any(
            t._view is not None or t._layout is not None
            for t in inputs
            if isinstance(t, TensorBase)
        ):
            follow_layout(result, inputs)
        return result
    x = inputs[0]  # a unary op computed in float
    backend, prim = x._backend, x._prim
    if backend.dtype(prim) not in FLOAT_DTYPES and backend.dtype(prim) not in COMPLEX_DTYPES:
        result = _run(op.name, op.kernel, (x.cast(default_float_dtype()), *inputs[1:]), params)
        if (x._view is not None or x._layout is not None) and op.kernel in _LAYOUT_KERNELS:
            follow_layout(result, (x,))
        return result
    try:  # without params, a plain call: CPython inlines a Python kernel's frame then
        out = (
            getattr(backend, op.kernel)(prim, *params)
            if params
            else (getattr(backend, op.kernel)(prim))
        )
    except Exception as error:
        raise translate(op.name, error, backend, inputs)  # noqa: B904
    result = _new(type(x)._result)
    result._prim, result._backend, result._device = out, backend, x._device
    if (x._view is not None or x._layout is not None) and op.kernel in _LAYOUT_KERNELS:
        follow_layout(result, (x,))
    return result


_plain_dispatch = dispatch


#: the classes whose ``_apply`` is :func:`dispatch` (``Tensor``): rebound with it
APPLY_CLASSES: list[type] = []


def watch_results(watched: bool) -> None:
    """Make :func:`dispatch` (``Tensor._apply``) show every result to
    :data:`~retrograd.errors.RESULT_WATCH`, or stop: bound while ``inference_mode()`` blocks
    are open, so that ordinary ops pay nothing for them, not even a test."""
    global dispatch
    dispatch = _watched_dispatch if watched else _plain_dispatch
    for cls in APPLY_CLASSES:
        cls._apply = dispatch


#: the kernels that compute complex operands besides the ops with complex gradient rules (the
#: op table's ``complex_rules``): tests of equality and of NaN/infinity, and bit views
_COMPLEX_UNTRACKED = frozenset(
    ["equal", "not_equal", "equal_elem", "not_equal_elem", "is_nan", "is_inf", "bitcast"]
)


def real_only(op: str, t: Any) -> Any:
    """``t``, unless it is complex: then the ``UnsupportedDTypeError`` of ``op``, which
    computes in real numbers only here (a composition that would otherwise cast it to a real
    dtype first); torch's refusal there is a ``NotImplementedError`` (``"logit_cpu" not
    implemented for 'ComplexDouble'``, ``clamp is not supported for complex types``) or a
    ``RuntimeError`` (``deg2rad is not supported for complex tensors``): the class is both."""
    if isinstance(t, TensorBase) and t._backend.dtype(t._prim) in COMPLEX_DTYPES:
        raise UnsupportedDTypeError(
            f"{op}: not implemented for {t._backend.dtype(t._prim)} tensors in retrograd"
        )
    return t


def refuse_complex(op: TensorOp | str, inputs: Sequence[Any]) -> None:
    """The ``UnsupportedDTypeError`` of ``op`` given a complex tensor where its kernel computes
    none (a comparison, a rounding, an activation...): never a wrong result nor a bare backend
    error. torch refuses these with a ``NotImplementedError`` (``"gt_cpu" not implemented for
    'ComplexDouble'``, ``floor is not supported for complex inputs``) or a ``RuntimeError``
    (``Sort does not support complex dtypes``, ``argmax(): does not support complex input``):
    the class is both (and a ``DTypeError``, a ``TypeError``, as before)."""
    complex_dtype = None
    scalar = False
    for t in inputs:
        if isinstance(t, TensorBase):
            dtype = t._backend.dtype(t._prim)
            if dtype in COMPLEX_DTYPES:
                complex_dtype = dtype
        else:
            scalar = True
    if complex_dtype is None:
        return
    if op.__class__ is TensorOp:
        name, kernel = op.name, (op.scalar if scalar and op.scalar else op.kernel)
    else:
        name = kernel = op
    from ..autodiff.ops import OPS

    declared = OPS.get(kernel)
    if declared is None or declared.complex_vjps is not None or kernel in _COMPLEX_UNTRACKED:
        return
    raise UnsupportedDTypeError(
        f"{name}: not implemented for {complex_dtype} tensors in retrograd (its complex "
        "tensors have arithmetic, exp/log/sqrt/trigonometry, abs/angle, sums and means, "
        "matmul/einsum, linear algebra, convolutions, shape and indexing ops, and torch.fft)"
    )


#: The one declaration of which kernels keep layout: the elementwise kernels besides the
#: binary ops with a promotion rule (all elementwise, followed in :func:`dispatch` itself),
#: called by kernel name or through a :class:`TensorOp`. Their result follows a non-contiguous
#: operand's layout (torch's ``TensorIterator``); the others (reductions, softmax, shape ops)
#: make row-major results, as torch's do. The comparisons with a number, the logical ops and
#: ``mask_fill`` are here because the compositions that torch computes as one elementwise
#: kernel (``sign``, ``//``, ``nan_to_num``, ``isfinite``, ``hardswish``, ``threshold``...)
#: are made of them.
_LAYOUT_KERNELS = frozenset(
    [
        "exp",
        "expm1",
        "log",
        "log1p",
        "log2",
        "log10",
        "exp2",
        "sqrt",
        "recip",
        "sin",
        "cos",
        "tan",
        "sinh",
        "cosh",
        "tanh",
        "asin",
        "acos",
        "atan",
        "asinh",
        "acosh",
        "atanh",
        "erf",
        "erfc",
        "relu",
        "gelu",
        "sigmoid",
        "log_sigmoid",
        "silu",
        "softplus",
        "leaky_relu",
        "lgamma",
        "digamma",
        "polygamma",
        "i0",
        "abs",
        "neg",
        "sign",
        "round",
        "trunc",
        "floor",
        "ceil",
        "square",
        "signbit",
        "is_nan",
        "is_inf",
        "logical_not",
        "clamp",
        "pow",
        "pow_scalar",
        "floor_divide",
        "bitwise_not",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "bitwise_left_shift",
        "bitwise_right_shift",
        "nextafter",
        "hardswish",
        "rsqrt",
        "lerp",
        "lerp_scalar",
        "add_scaled",
        "addcmul",
        "gcd",
        "lcm",
        "cast",
        "mask_where",
        "mask_fill",
        "equal_elem",
        "not_equal_elem",
        "greater_elem",
        "greater_equal_elem",
        "lower_elem",
        "lower_equal_elem",
        "logical_and",
        "logical_or",
        "logical_xor",
        "xlogy",
        "xlog1py",
        "sinc",
        "logit",
        "erfinv",
        "conj",
        "complex",
        "refused_derivative",
        # (not elementwise, but torch's output is ``empty_like(self)`` in its layout)
        "flip",
    ]
)


def preserved_layout(t: Any) -> tuple[int, ...] | None:
    """The strides of torch's ``preserve_format`` copy of ``t`` (``clone``, ``empty_like``,
    ``zeros_like``...): ``t``'s own where they are non-overlapping and dense, else the
    dimensions ordered by ``t``'s strides and laid out densely; ``None`` where that is
    row-major (or ``t`` is a contiguous root)."""
    if t._view is None and t._layout is None:
        return None
    shape = tuple(t.shape)
    own = strides_of(t)
    if not shape:
        return None
    # torch's empty_like: a non-overlapping, dense tensor's own strides (a contiguous one's
    # too, whatever its size-1 or empty dimensions have), else its order laid out densely
    dense = non_overlapping_and_dense(shape, own)
    strides = tuple(own) if dense else elementwise_strides(shape, [(shape, own)])
    return None if strides is None or strides == contiguous_strides(shape) else strides


def follow_layout(result: Any, operands: Sequence[Any]) -> None:
    """Give ``result``, the output of an elementwise op on ``operands`` (one of them not a
    contiguous root tensor), the strides torch's would have (:func:`.strides.elementwise_strides`),
    where they are not row-major."""
    if not isinstance(result, TensorBase):
        return
    shape = tuple(result._backend.shape(result._prim))
    tensors = [t for t in operands if isinstance(t, TensorBase)]
    if any(len(t.shape) > len(shape) for t in tensors):
        return  # (not an elementwise result: nothing to follow)
    strides = elementwise_strides(shape, [(tuple(t.shape), strides_of(t)) for t in tensors])
    if strides is not None and strides != contiguous_strides(shape):
        result._layout = (shape, strides)


def _run(name: str, kernel: str, inputs: Sequence[Any], params: tuple) -> Any:
    """:func:`apply` for operands that fit the kernel as they are."""
    first = inputs[0]
    backend = first._backend
    try:
        if len(inputs) == 1:
            out = (
                getattr(backend, kernel)(first._prim, *params)
                if params
                else (getattr(backend, kernel)(first._prim))
            )
        else:
            out = getattr(backend, kernel)(*[t._prim for t in inputs], *params)
    except Exception as error:
        lifted = _inner_operands_lifted(backend, inputs) if len(inputs) > 1 else None
        if lifted is not None:  # (checked after a failure alone: the common call pays nothing)
            return _run(name, kernel, lifted, params)
        raise translate(name, error, backend, inputs)  # noqa: B904
    kind = type(first)._result
    if len(inputs) > 1 and not type(first)._sticky:
        kind = sticky_class(inputs, kind)
    if type(out) is tuple:
        return tuple(kind(value, backend, first._device) for value in out)
    result = _new(kind)
    result._prim, result._backend, result._device = out, backend, first._device
    return result


def sticky_class(operands: Sequence[Any], default: type) -> type:
    """The class of an op's result: that of a sticky operand (``TensorBase._sticky``: an
    element of a ``vmap``'s mapped input) wherever it stands, else ``default``."""
    for t in operands:
        if getattr(type(t), "_sticky", False):
            return type(t)._result
    return default


def _inner_operands_lifted(backend: Any, inputs: Sequence[Any]) -> list | None:
    """``inputs`` with those of ``backend``'s inner backend lifted onto ``backend``, an autodiff
    decorator, as constants; ``None`` where there is none. An op that joined its first operand
    onto the decorator (:func:`promote`) after lifting a mask or an index onto that operand's
    inner backend (``G.masked_fill(mask, w)`` of a gradient ``G``) gives its kernel both."""
    if not backend.is_autodiff:
        return None
    inner = backend.inner
    lifted = [
        type(t)._result(backend.wrap(t._prim), backend, t._device)
        if isinstance(t, TensorBase) and t._backend is not backend and t._backend == inner
        else t
        for t in inputs
    ]
    return None if all(a is b for a, b in zip(lifted, inputs, strict=True)) else lifted


_SUBTRACTIONS = ("sub", "rsub")
_SUMS = ("add", "sub")


def _masked_product(a: Any, b: Any) -> tuple[Any, Any] | None:
    """``(x, mask)`` for the product of a float32/float64 tensor that requires grad and a bool
    tensor (``x * (x > 0)``), recorded as ``mul_mask``, whose rule reads the bool mask as
    torch's mul saves it, not its cast to x's dtype (4x the bytes, 7 December); else None."""
    a_bool, b_bool = _is_bool(a), _is_bool(b)
    if a_bool == b_bool:
        return None
    x, mask = (b, a) if a_bool else (a, b)
    backend = x._backend
    if (
        mask._backend is not backend
        or mask._device is not x._device
        or not backend.is_autodiff
        or backend.dtype(x._prim) not in ("float32", "float64")
        or not x.requires_grad
    ):
        return None
    return x, mask


def _is_bool(value: Any) -> bool:
    if isinstance(value, bool | np.bool_):
        return True
    return isinstance(value, TensorBase) and value._backend.dtype(value._prim) == "bool"


def _is_plain_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


#: the comparisons with a number that order their operands (``<``, ``<=``, ``>``, ``>=``)
_ORDERINGS = frozenset(["lower_elem", "lower_equal_elem", "greater_elem", "greater_equal_elem"])


def python_sequence(value: Any) -> bool:
    """A Python list or plain tuple: data, not a tensor (a named tuple -- ``sort``'s
    ``(values, indices)``, which also acts as its values -- is not one)."""
    return isinstance(value, list) or (isinstance(value, tuple) and not hasattr(value, "_fields"))


def refuse_sequence(op: str, operand: Any) -> None:
    """torch's binary ops take tensors and numbers, never a Python sequence (``t + [1, 2]``,
    ``[1, 2] @ t``, ``[7] // t``, ``torch.add(t, [1, 2])``: TypeError); lifted, it was a
    silent copy made every call."""
    if python_sequence(operand):
        raise DTypeError(
            f"{op}(): expected a tensor or a number, got a Python "
            f"{type(operand).__name__} (as torch refuses it); make it one with rg.tensor(...)"
        )


#: the kernels torch runs on a float16/bfloat16 tensor and a 0-d right operand in float32
_BY_ZERO_DIM = frozenset({"mul", "div"})
_REDUCED_FLOATS = ("float16", "bfloat16")


def _by_zero_dim(op: TensorOp, a: Any, b: Any, params: tuple) -> Any:
    """torch's ``mul`` and ``div`` (and ``mul_``/``div_``) of a float16 or bfloat16 tensor by
    a 0-d tensor of another dtype that does not promote it (float32, float64, an integer):
    its kernels read the 0-d operand's own value in float32 (``original_scalar_value``),
    compute in float32 and round once; cast to 16 bits first (``x * torch.tensor(0.1)``) the
    product missed torch's value in a third of entries, ``x * torch.tensor(100000)`` was
    inf. A 0-d left operand is cast first, as torch casts it. ``None`` where this is not
    the case."""
    a, b = joined(a, b, op.name)
    backend = a._backend
    a_dtype, b_dtype = backend.dtype(a._prim), backend.dtype(b._prim)
    if a_dtype not in _REDUCED_FLOATS or b_dtype == a_dtype:
        return None
    if _promoted(a_dtype, b_dtype, backend.shape(a._prim), ()) != a_dtype:
        return None  # (a complex 0-d operand, or a 0-d a: the result is wider)
    wide = _run(op.name, op.kernel, (a.cast("float32"), b.cast("float32")), params)
    return wide.cast(a_dtype)


def _binary(op: TensorOp, a: Any, b: Any, params: tuple) -> Any:
    """:func:`apply` for two operands that missed the fast paths."""
    if op.kernel in _SUMS and getattr(type(b), "_sparse_coo", False):
        b = b.to_dense()  # torch's dense + sparse and dense - sparse: dense results
    if op.kernel in _SUBTRACTIONS and (_is_bool(a) or _is_bool(b)):
        # torch refuses ``-`` with a bool operand (two bool tensors fail in the kernel), a
        # RuntimeError
        raise KernelDTypeError(
            f"{op.name}: subtraction with a bool tensor is not supported (as in torch); use "
            "^ or logical_xor() for bools, ~ or logical_not() to invert a mask"
        )
    rule = op.promote
    if op.scalar is not None:
        if isinstance(b, SCALARS):
            t, value = a, b
        elif isinstance(a, SCALARS):
            t, value = b, a
        else:
            t = None
        if t is not None:
            if isinstance(value, int):
                check_scalar_int(value, op.name)
            if rule is COMPARE:
                if op.scalar in _ORDERINGS and isinstance(value, complex):
                    # a complex number has no order (torch's refusal; NumPy would order the
                    # real tensor against the complex number lexicographically)
                    raise UnsupportedDTypeError(  # (torch's NotImplementedError)
                        f"{op.name}: not implemented for complex numbers (got {value!r}): "
                        "complex numbers have no order; compare .real or .abs()"
                    )
                if t._backend.dtype(t._prim) in _NARROW_INTS and _is_plain_int(value):
                    value = wrapped_int(value, t._backend.dtype(t._prim))
                return _run(op.name, op.scalar, (t,), (value,))
            dtype = t._backend.dtype(t._prim)
            target = scalar_dtype(dtype, value)
            if rule is FLOAT and target not in FLOAT_DTYPES and target not in COMPLEX_DTYPES:
                target = default_float_dtype()
            if target == "int64" and not _INT64_MIN <= value <= _INT64_MAX:  # torch refuses it
                raise InvalidArgumentError(f"{op.name}: the integer {value} is out of int64 range")
            source = t if target == dtype else t.cast(target)
            return _run(op.name, op.scalar, (source,), (scalar_value(value, target),))
    if op.kernel == "mul" and isinstance(a, TensorBase) and isinstance(b, TensorBase):
        masked = _masked_product(a, b)
        if masked is not None:
            return _run(op.name, "mul_mask", masked, params)
    refuse_sequence(op.name, a)
    refuse_sequence(op.name, b)
    if isinstance(a, TensorBase):
        if op.kernel in _BY_ZERO_DIM and isinstance(b, TensorBase) and not b.ndim:
            once = _by_zero_dim(op, a, b, params)
            if once is not None:
                return once
        a, b = promote(a, b, op.name, rule is FLOAT)
    else:  # reflected: lift the left operand onto the tensor on the right
        a, b = promote(lift(b, a, op.name), b, op.name, rule is FLOAT)
    return _run(op.name, op.kernel, (a, b), params)
