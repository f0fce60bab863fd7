"""Creation functions: tensors from host data, filled tensors, ranges, identity matrices and
random values.

Each takes ``dtype``, ``backend`` (default: the current backend, see
:func:`retrograd.use_backend`) and ``device`` (default ``cpu:0``), checks them, and asks the
backend for the primitive.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend.accelerators import (
    HOSTED_DEVICE_KINDS,
    absent_device_refusal,
    cpu_backend_gpu_refusal,
)
from ..backend.numpy_fma import fused_multiply_add
from ..backend.protocol import Backend, default_float_dtype
from ..context import current_backend, thread_device
from ..device import CPU0, Device, run_device_blocks_with
from ..errors import (
    ArgumentTypeError,
    DeviceUnavailableError,
    DTypeError,
    InvalidArgumentError,
    InvalidValueError,
    ShapeError,
    UnsupportedDTypeError,
    shape_text,
)
from . import functions
from ._dispatch import (
    COMPLEX_DTYPES,
    DTYPES,
    FLOAT_DTYPES,
    GRAD_DTYPES,
    INT_DTYPES,
    NARROW_INTS,
    check_float_range,
    check_narrow_data,
    checked_generator,
    from_host,
    int_argument,
    int_arguments,
    preserved_layout,
    untracked,
    written_scalar,
)
from .compositions import _zero_gradient
from .core import Tensor, warn_copy_construct
from .dtypes import RANDINT_BOUNDS, canonical_dtype
from .indexing import check_values
from .layouts import check_memory_format, preserve_format
from .selection import multinomial
from .shape import lay_out, shape_arg
from .spacing import torch_linspace

__all__ = [
    "arange",
    "as_tensor",
    "asarray",
    "empty",
    "empty_like",
    "eye",
    "from_numpy",
    "full",
    "full_like",
    "linspace",
    "logspace",
    "manual_seed",
    "multinomial",
    "normal",
    "ones",
    "ones_like",
    "poisson",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "random",
    "randperm",
    "scalar_tensor",
    "seed",
    "tensor",
    "torch_range",
    "zeros",
    "zeros_like",
]


def _target(backend: Any, device: Any) -> tuple[Any, Device]:
    if backend is None:
        backend = current_backend()
    elif not isinstance(backend, Backend):  # a str or a tensor given for it: named here
        raise DTypeError(
            "expected a backend (rg.NumpyBackend(), rg.Autodiff(...)), got "
            f"{type(backend).__name__}"
        )
    default = thread_device.get() or getattr(backend, "default_device", CPU0)
    if device is None:
        return backend, default
    device = _device_arg(device)
    if device.kind == "cuda" and default.kind != "cuda":
        raise DeviceUnavailableError(
            f"cannot make a tensor on {device} with {backend!r}: " + cpu_backend_gpu_refusal()
        )
    if device.kind not in HOSTED_DEVICE_KINDS:
        raise DeviceUnavailableError(
            f"cannot make a tensor on {device}: " + absent_device_refusal(device.kind)
        )
    return backend, device


def _enter_device_block(device: Device) -> Any:
    """``with device:``: ``device`` the default of the block's new tensors (refused where no
    tensor could be made on it: cuda on a CPU backend); the token that restores the previous."""
    _target(None, device)
    return thread_device.set(device)


run_device_blocks_with(_enter_device_block, thread_device.reset)


def _device_arg(device: Any) -> Device:
    if isinstance(device, Device | str):
        return Device(device)
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if isinstance(kind, str):  # a torch.device
        return Device(kind, index)
    if isinstance(device, int):  # torch reads an int as a CUDA device index
        return Device("cuda", device)
    raise DTypeError(f"expected a device, got {device!r}")


def _check_dtype(op: str, dtype: Any) -> Any:
    """``dtype`` as the plain name backends take (``None`` stays ``None``)."""
    if dtype is None or (dtype.__class__ is str and dtype in DTYPES):
        return dtype
    return canonical_dtype(op, dtype)


def _requiring(t: Tensor, requires_grad: bool) -> Tensor:
    return t.require_grad() if requires_grad else t


def tensor(
    data: Any,
    dtype: Any = None,
    backend: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    pin_memory: bool = False,
) -> Tensor:
    """A tensor holding a copy of ``data`` (a scalar, nested lists, a NumPy array or a
    tensor), as ``torch.tensor``.

    Python floats take the default float dtype (float32 unless :func:`rg.set_default_dtype
    <retrograd.set_default_dtype>` changed it), ints int64, bools bool (torch's rules); a NumPy
    array or a torch tensor keeps its dtype (float64 stays float64, uint8 and int32 stay; other
    ints become int64).
    ``requires_grad=True`` makes it a leaf that requires grad.

    >>> import retrograd as rg
    >>> rg.tensor([[1, 2], [3, 4]]).dtype, rg.tensor([1.5]).dtype
    (retrograd.int64, retrograd.float32)
    """
    dtype = _check_dtype("tensor", dtype)
    backend, device = _target(backend, device)
    if isinstance(data, Tensor):
        warn_copy_construct("torch.tensor(sourceTensor)")
        data = data.numpy()  # a copy: the user's tensor may live on another backend
    elif isinstance(data, list | tuple):
        data = _scalars_of_tensors(data)
    elif type(data) is not np.ndarray and isinstance(data, np.ndarray) and hasattr(data, "numpy"):
        # an array standing for a tensor (a state-dict value, torch's the module's storage):
        # its numbers of now, which NumPy's own copy of a subclass's buffer would not read
        data = data.numpy()
    if dtype is None and not isinstance(data, np.ndarray | np.generic):
        dtype = _foreign_dtype(data) or _python_dtype(data)
    else:
        check_narrow_data("tensor", data, dtype)
    return _requiring(from_host(Tensor, data, dtype, backend, device), requires_grad)


def _scalars_of_tensors(data: list | tuple) -> Any:
    """Nested lists with each one-element tensor as a 0-d array of its dtype: torch reads a
    tensor inside a list as a number (``tensor([t.sum(), x[0:1]])`` has shape ``[2]``, not
    ``[2, 1]``); a tensor of more elements stays as it is (stacked). Lists without tensors
    come back as they are."""
    if set(map(type, data)) <= _NUMBERS:  # the common case, read at C speed
        return data
    out, changed = [], False
    for v in data:
        if isinstance(v, Tensor) and v.numel() == 1:
            v, changed = v.numpy().reshape(()), True
        elif isinstance(v, list | tuple):
            new = _scalars_of_tensors(v)
            v, changed = new, changed or new is not v
        out.append(v)
    return out if changed else data


def _foreign_dtype(data: Any) -> str | None:
    """The dtype a tensor made from another library's array (a torch tensor) keeps, as
    ``torch.tensor(t)`` keeps it (its ints as int64); ``None`` for Python data."""
    if isinstance(data, list | tuple | int | float | bool) or not hasattr(data, "dtype"):
        return None
    name = str(data.dtype).removeprefix("torch.")
    if name in DTYPES:
        return name
    return "int64" if name.startswith(("int", "uint")) else None


def _python_dtype(data: Any) -> str | None:
    """torch's dtype for Python data: int64 for ints, the default float dtype for floats;
    ``None`` (the backend's reading) for bools and what NumPy cannot read. Lists of NumPy
    uint8, int8, int16 or int32 scalars or arrays keep that dtype (``tensor([np.uint8(3),
    np.uint8(4)])`` is uint8; ``np.int8`` with ``np.uint8`` int16), as torch's inference
    promotes its elements' dtypes as NumPy's does, a Python int counting as int64."""
    try:
        inferred = np.asarray(data).dtype
    except (ValueError, TypeError):
        return None
    kind = inferred.kind
    if kind == "f" and _holds_float64(data):
        return "float64"
    if kind == "c" and _holds_float64(data):
        return "complex128"  # (torch's: a float64 or complex128 element widens the complex)
    if kind in "iu":
        return _narrow_int_name(kind, inferred.itemsize)
    return default_float_dtype() if kind == "f" else None


#: The narrow integer dtypes' names by NumPy's kind and item size (either byte order)
_NARROW_INT_NAMES = {(np.dtype(name).kind, np.dtype(name).itemsize): name for name in NARROW_INTS}


def _narrow_int_name(kind: str, itemsize: int) -> str:
    """The name of the NumPy integer dtype of ``kind`` (``"i"`` or ``"u"``) and ``itemsize``
    if it is a narrow one, else ``"int64"``: looked up by kind and size, not by the dtype's
    ``name``, which NumPy builds afresh at each read; strings so made stayed traced on the
    reading line, dozens at a time and more as reads went on (a ``Dataset`` making
    ``torch.tensor(label)`` of an int per item: 10 KB more over 90 epochs of 12 items,
    ``tests/test_rel70_fixes.py``)."""
    return _NARROW_INT_NAMES.get((kind, itemsize), "int64")


def _holds_float64(data: Any) -> bool:
    """Whether nested lists hold a float64 (or complex128) NumPy scalar, array or tensor:
    torch's inference then promotes to float64 (``tensor([np.float64(1.5), 2.0])``, a list of
    float64 arrays) or complex128 (``[np.float64(1.5), 1j]``), where Python floats and
    complex numbers alone give the default dtype's."""
    if isinstance(data, Tensor):
        return data.dtype in ("float64", "complex128")
    if isinstance(data, np.ndarray | np.generic):
        return data.dtype in (np.float64, np.complex128)
    if isinstance(data, list | tuple):
        return not set(map(type, data)) <= _NUMBERS and any(map(_holds_float64, data))
    return False


_NUMBERS = {float, int, bool}


def zeros(
    *args: Any,
    dtype: Any = None,
    backend: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    out: Any = None,
    size: Any = None,
) -> Tensor:
    """A tensor of zeros: ``zeros((2, 3))`` or torch's ``zeros(2, 3, dtype=...)`` (see
    :func:`_leading_shape` for the positional forms)."""
    return _constant(
        "zeros", _sized("zeros", args, size), dtype, backend, device, requires_grad, out
    )


def ones(
    *args: Any,
    dtype: Any = None,
    backend: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    out: Any = None,
    size: Any = None,
) -> Tensor:
    """A tensor of ones: ``ones((2, 3))`` or ``ones(2, 3)``."""
    return _constant("ones", _sized("ones", args, size), dtype, backend, device, requires_grad, out)


def _constant(
    op: str, args: tuple, dtype: Any, backend: Any, device: Any, requires_grad: bool, out: Any
) -> Tensor:
    """``zeros``/``ones``: the arguments read, the backend's kernel of that name called."""
    _no_out(op, out)
    shape, dtype, backend, device = _leading_shape(op, args, dtype, backend, device)
    dtype = _check_dtype(op, dtype) or default_float_dtype()
    backend, device = _target(backend, device)
    made = getattr(backend, op)(shape, dtype, device)
    return _requiring(Tensor(made, backend, device), requires_grad)


def empty(
    *args: Any,
    dtype: Any = None,
    backend: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    memory_format: Any = None,
    pin_memory: bool = False,
    size: Any = None,
) -> Tensor:
    """torch's ``empty``: a tensor of that shape whose values are unspecified (here zeros:
    primitives are never written in place, so nothing is saved by leaving them unset)."""
    args = _sized("empty", args, size)
    return zeros(*args, dtype=dtype, backend=backend, device=device, requires_grad=requires_grad)


def _sized(op: str, args: tuple, size: Any) -> tuple:
    """torch's keyword form ``zeros(size=(2, 3))``: the shape as the one positional argument."""
    if size is None:
        return args
    if args:
        raise DTypeError(f"{op}: the shape given twice, as {args!r} and as size={size!r}")
    return (size,)


def full(
    shape: Sequence[int] | None = None,
    value: Any = None,
    dtype: Any = None,
    backend: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    *,
    size: Sequence[int] | None = None,
    fill_value: Any = None,
) -> Tensor:
    """A tensor filled with ``value`` (the default float dtype for floats, int64 for ints, bool
    for bools; ``value`` may be a 0-d tensor). torch's keywords ``size=`` and ``fill_value=``
    name them too."""
    shape, value = (
        _keyword("full", "shape", shape, "size", size),
        _keyword("full", "value", value, "fill_value", fill_value),
    )
    if isinstance(value, Tensor):
        value = value.item()
    if dtype is None:
        dtype = (
            "bool"
            if isinstance(value, bool)
            else ("int64" if isinstance(value, numbers.Integral) else default_float_dtype())
        )
        if isinstance(value, complex | np.complexfloating):
            dtype = "complex128" if default_float_dtype() == "float64" else "complex64"
    dtype = _check_dtype("full", dtype)
    if dtype == "int64" and isinstance(value, float | np.floating) and not _in_int64(value):
        raise InvalidArgumentError(f"full: {value!r} cannot be converted to int64 without overflow")
    value = written_scalar("full", value, dtype)
    backend, device = _target(backend, device)
    shape = _creation_shape("full", shape)
    return _requiring(
        Tensor(backend.full(shape, value, dtype, device), backend, device), requires_grad
    )


def _in_int64(value: float) -> bool:
    """Whether a float converts to int64 (torch's check: NaN and infinities do not)."""
    return -(2.0**63) <= value < 2.0**63


def _keyword(op: str, name: str, value: Any, torch_name: str, torch_value: Any) -> Any:
    """One argument given positionally or by torch's keyword, not both and not neither."""
    if (value is None) == (torch_value is None):
        given = "twice" if value is not None else "not given"
        raise TypeError(f"{op}: {name} ({torch_name}=) {given}")
    return value if torch_value is None else torch_value


def _like(t: Tensor, dtype: Any, device: Any) -> tuple[Any, Any, Any]:
    return (
        t.dtype if dtype is None else _check_dtype("like", dtype),
        t.backend,
        t.device if device is None else device,
    )


def _laid_out_like(out: Tensor, t: Tensor, options: dict[str, Any]) -> Tensor:
    """``out``, made like ``t``, with the strides torch's ``*_like`` gives it: those of a
    ``preserve_format`` copy of ``t`` (the default: a transposed input's), those of another format
    (``rg.channels_last``) where it is given, row-major for
    ``memory_format=contiguous_format``."""
    memory_format = options.get("memory_format")
    check_memory_format("like", memory_format, t.ndim)
    if type(t)._sticky and type(out) is not type(t):
        # made like an element of a vmap's batch: of the batch too, as torch's batching rules
        # of the ``*_like`` factories give (``zeros_like(a).add_(a)`` writes a batch value)
        out.__class__ = type(t)._result
    if memory_format is None or memory_format is preserve_format:
        strides = preserved_layout(t)
        if strides is not None:
            out._layout = (out.shape, strides)
    else:
        lay_out(out, memory_format)
    return out


def zeros_like(
    input: Tensor,  # noqa: A002 (torch's name)
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    **options: Any,
) -> Tensor:
    t = input
    dtype, backend, device = _like(t, dtype, device)
    out = zeros(t.shape, dtype=dtype, backend=backend, device=device, requires_grad=requires_grad)
    return _laid_out_like(out, t, options)


def ones_like(
    input: Tensor,  # noqa: A002 (torch's name)
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    **options: Any,
) -> Tensor:
    t = input
    dtype, backend, device = _like(t, dtype, device)
    out = ones(t.shape, dtype=dtype, backend=backend, device=device, requires_grad=requires_grad)
    return _laid_out_like(out, t, options)


def empty_like(
    input: Tensor,  # noqa: A002 (torch's name)
    dtype: Any = None,
    device: Any = None,
    **kwargs: Any,
) -> Tensor:
    """torch's ``empty_like`` (values unspecified: here zeros)."""
    return zeros_like(input, dtype, device, **kwargs)


def full_like(
    input: Tensor, fill_value: Any, dtype: Any = None, device: Any = None,  # noqa: A002
    requires_grad: bool = False, **options: Any,
) -> Tensor:  # fmt: skip
    t = input
    dtype, backend, device = _like(t, dtype, device)
    out = full(t.shape, fill_value, dtype, backend, device, requires_grad)
    return _laid_out_like(out, t, options)


def rand_like(
    input: Tensor,  # noqa: A002 (torch's name)
    dtype: Any = None,
    device: Any = None,
    **kwargs: Any,
) -> Tensor:
    """Uniform values on [0, 1) of ``input``'s shape, dtype and device (``torch.rand_like``),
    from ``generator=`` when given."""
    return _random_like(input, "uniform", dtype, device, kwargs)


def randn_like(
    input: Tensor,  # noqa: A002 (torch's name)
    dtype: Any = None,
    device: Any = None,
    **kwargs: Any,
) -> Tensor:
    """Standard normal values of ``input``'s shape, dtype and device (``torch.randn_like``),
    from ``generator=`` when given."""
    return _random_like(input, "normal", dtype, device, kwargs)


def _random_like(t: Tensor, distribution: str, dtype: Any, device: Any, options: dict) -> Tensor:
    dtype, backend, device = _like(t, dtype, device)
    out = random(t.shape, distribution, dtype, backend, device, generator=options.get("generator"))
    return _laid_out_like(_requiring(out, options.get("requires_grad", False)), t, options)


def eye(
    n: int,
    m: int | None = None,
    dtype: Any = None,
    backend: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """The identity matrix (``n`` by ``m``)."""
    dtype = _check_dtype("eye", dtype) or default_float_dtype()
    n, m = int_argument("eye", n, "n"), int_argument("eye", m, "m")
    if n < 0 or (m is not None and m < 0):
        # (torch: a RuntimeError)
        raise InvalidValueError(f"eye: sizes must be non-negative, got {n} and {m}")
    backend, device = _target(backend, device)
    out = Tensor(backend.eye(int(n), int(n if m is None else m), dtype, device), backend, device)
    return _requiring(out, requires_grad)


def arange(
    start: Any = None,
    end: Any = None,
    step: Any = 1,
    dtype: Any = None,
    backend: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    out: Any = None,
) -> Tensor:
    """``start, start+step, ...`` below ``end`` (``arange(n)`` counts from 0): int64 when
    all three are ints, the default float dtype otherwise, as ``torch.arange``. Float ranges
    have torch's length, ``ceil((end - start) / step)``, and its values to the last place
    (:func:`_arange_as_torch`).
    ``out=`` (Tacotron 2's ``torch.arange(0, max_len, out=torch.LongTensor(max_len))``) is
    written in place, in its dtype unless ``dtype`` says otherwise, resized if its shape
    differs (as torch resizes it), and returned."""
    if out is not None:
        if not isinstance(out, Tensor):
            raise DTypeError(f"arange: out must be a tensor, got {type(out).__name__}")
        made = arange(start, end, step, dtype=dtype or out.dtype, device=device)
        if tuple(out.shape) != tuple(made.shape):
            out.resize_(made.shape)
        return out.copy_(made)
    if end is None:
        if start is None:
            raise DTypeError("arange: missing its end (arange(end) or arange(start, end, step))")
        start, end = 0, start
    elif start is None:  # TransE's ``torch.arange(end=n)``: torch's start defaults to 0
        start = 0
    values = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    dtype = _no_bool_range("arange", _check_dtype("arange", dtype))
    start, end, step = values
    # (torch's refusals here are RuntimeErrors, its truncated int64 step of 0 a ValueError:
    # InvalidValueError is both)
    if step == 0:
        raise InvalidValueError("arange: step must not be zero")
    if not all(math.isfinite(v) for v in values):
        raise InvalidValueError(f"arange: unsupported range {start} -> {end} (step {step})")
    if (end - start) * step < 0:  # torch's rule (on the values given): the step walks away
        raise InvalidValueError(
            f"arange: start {start} and end {end} are inconsistent with the sign of step {step}"
        )
    if dtype in INT_DTYPES and dtype != "int64":
        # torch's narrower integer aranges count the steps from the values given, then write
        # int(start) + i * int(step): arange(1, 4.5, 0.5, dtype=uint8) is seven 1s,
        # arange(-1.5, 4.5, dtype=int32) six values from -1
        count = max(0, math.ceil((end - start) / step))
        backend, device = _target(backend, device)
        steps = Tensor(backend.arange(0, count, 1, "int64", device), backend, device)
        out = steps * int(step) + int(start)
        return _requiring(out.cast(dtype), requires_grad)
    if dtype in INT_DTYPES:
        # torch's int64 arange truncates the three to integers first (a step of 0.5 is 0)
        values = [int(v) for v in values]
        start, end, step = values
        if step == 0:
            raise InvalidValueError("arange: step must not be zero")
    integral = all(isinstance(v, numbers.Integral) for v in values)
    dtype = dtype or ("int64" if integral else default_float_dtype())
    backend, device = _target(backend, device)
    if integral and dtype in INT_DTYPES:
        # counted in int64, then wrapped into a narrower dtype as torch's (uint8 from -2 is 254)
        counted = backend.arange(int(start), int(end), int(step), "int64", device)
        out = Tensor(counted, backend, device)
        # (requires_grad=True refused for integers, as torch refuses it)
        return _requiring(out if dtype == "int64" else out.cast(dtype), requires_grad)
    count = max(0, math.ceil((end - start) / step))
    if dtype in ("float32", "float64"):
        host = _arange_as_torch(start, step, count, dtype)
    else:
        host = np.float64(start) + np.arange(count, dtype=np.float64) * np.float64(step)
    out = from_host(Tensor, host, dtype, backend, device)
    return _requiring(out, requires_grad)


def _fused_multiply_add(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` rounded once, as a fused multiply-add rounds it (exact up to a tie in the
    last place): the product split exactly into ``p + e`` (Dekker), ``p + c`` into ``s + t``
    (Knuth), then ``s + (t + e)``."""
    p = a * b
    split = 134217729.0  # 2**27 + 1
    a_hi = a * split - (a * split - a)
    b_hi = b * split - (b * split - b)
    a_lo, b_lo = a - a_hi, b - b_hi
    e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    s = p + c
    virtual = s - p
    t = (p - (s - virtual)) + (c - virtual)
    return s + (t + e)


def _arange_as_torch(start: float, step: float, count: int, dtype: str) -> np.ndarray:
    """torch's CPU ``arange`` for float32/float64, value for value. Its kernel (AVX2) writes
    pairs of vectors of ``lanes`` values: each vector ``base + j * step`` from a ``base =
    start + step * i`` rounded to the dtype, the elements past the last pair ``start + step
    * i``; both in double, contracted to fused multiply-adds. ``start + i * step`` (NumPy's)
    differs in the last place, which a later ``.long()`` can turn into a whole index."""
    lanes = 4 if dtype == "float64" else 8
    index = np.arange(count, dtype=np.float64)
    start_, step_ = np.float64(start), np.float64(step)
    out = _fused_multiply_add(np.full(count, step_), index, np.full(count, start_))
    paired = count // (2 * lanes) * (2 * lanes)
    if paired:
        lane = index[:paired] % lanes
        rounded = (
            out[:paired][::lanes]
            if dtype == "float64"
            else out[:paired][::lanes].astype(np.float32)
        )
        base = rounded.astype(np.float64).repeat(lanes)
        out[:paired] = _fused_multiply_add(lane, np.full(paired, step_), base)
    return out


def _no_bool_range(op: str, dtype: Any, steps: Any = None) -> Any:
    """``dtype``, refused when it is bool: torch's ranges have no bool kernel (``linspace``
    and ``logspace`` of 0 or 1 ``steps`` do not reach it)."""
    if dtype == "bool" and (not isinstance(steps, numbers.Integral) or steps > 1):
        raise DTypeError(f"{op}: not implemented for bool (as in torch); make an int64 range")
    return dtype


def torch_range(
    start: Any,
    end: Any,
    step: Any = 1,
    dtype: Any = None,
    backend: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """``torch.range`` (``rg.range``): torch's deprecated range, ``end`` included, with
    ``floor((end - start) / step) + 1`` values ``start + i * step``, in the default float
    dtype unless ``dtype`` says otherwise (ints too); it warns, as torch's does."""
    warnings.warn(
        "torch.range is deprecated and will be removed in a future release because its "
        "behavior is inconsistent with Python's range builtin. Instead, use torch.arange, "
        "which produces values in [start, end).",
        UserWarning,
        stacklevel=2,
    )
    start, end, step = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if step == 0:
        raise ShapeError("range: step must not be zero")
    if not all(math.isfinite(v) for v in (start, end, step)):
        raise InvalidArgumentError(f"range: unsupported range {start} -> {end} (step {step})")
    if (end - start) * step < 0:
        raise InvalidArgumentError(
            f"range: start {start} and end {end} are inconsistent with the sign of step {step}"
        )
    dtype = _check_dtype("range", dtype) or default_float_dtype()
    backend, device = _target(backend, device)
    count = math.floor((end - start) / step) + 1
    host = np.float64(start) + np.arange(count, dtype=np.float64) * np.float64(step)
    out = from_host(Tensor, host, dtype, backend, device)
    return _requiring(out, requires_grad)


def linspace(
    start: Any, end: Any, steps: int, dtype: Any = None, backend: Any = None,
    device: Any = None, requires_grad: bool = False,
) -> Tensor:  # fmt: skip
    """``steps`` evenly spaced values from ``start`` to ``end`` (both included), in the default
    float dtype unless ``dtype``: torch's values to the bit (:func:`torch_linspace`)."""
    steps = int_argument("linspace", steps, "steps")
    if not isinstance(steps, numbers.Integral) or steps < 0:
        # (torch: a RuntimeError, "number of steps must be non-negative")
        raise InvalidValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    dtype = (
        _no_bool_range("linspace", _check_dtype("linspace", dtype), steps) or default_float_dtype()
    )
    start = start.item() if isinstance(start, Tensor) else start
    end = end.item() if isinstance(end, Tensor) else end
    if dtype in NARROW_INTS and steps:  # torch converts both ends first: -2 is 254 in uint8,
        # 300 refused (not for 0 steps, which write nothing)
        start, end = (written_scalar("linspace", v, dtype) for v in (start, end))
    for written in (start, end)[: min(steps, 2)]:  # (one step writes only the start)
        check_float_range("linspace", written, dtype)  # (float32's 1e300 no, as torch's)
    start, end = float(start), float(end)
    if dtype in INT_DTYPES:
        host = _integer_linspace(int(start), int(end), steps)
    else:
        precision = np.float64 if dtype == "float64" else np.float32
        host = torch_linspace(start, end, steps, precision)
    backend, device = _target(backend, device)
    return _requiring(from_host(Tensor, host, dtype, backend, device), requires_grad)


def _integer_linspace(start: int, end: int, steps: int) -> np.ndarray:
    """torch's CPU ``linspace`` of an integer dtype: ``start`` and ``end`` truncated to
    integers, the step ``(end - start) / (steps - 1)`` a double, each value computed in
    double from the nearer end (as :func:`torch_linspace`) with one rounding (its kernel's
    multiply-add is fused: ``linspace(1, -3, 11)``'s sixth value is ``-3 + 5 * 0.4`` =
    -0.99999..., truncated to 0) and truncated toward zero."""
    if steps == 1:
        return np.array([start], dtype=np.int64)
    step = (float(end) - float(start)) / max(steps - 1, 1)
    index = np.arange(steps)
    below = fused_multiply_add(step, index.astype(np.float64), float(start), np.float64)
    above = fused_multiply_add(
        -step, (steps - 1 - index).astype(np.float64), float(end), np.float64
    )
    return np.trunc(np.where(index < steps // 2, below, above)).astype(np.int64)


def logspace(
    start: Any, end: Any, steps: int, base: float = 10.0, dtype: Any = None, **kwargs: Any
) -> Tensor:
    """``base ** linspace(start, end, steps)`` (``torch.logspace``), the powers taken in
    float64 (``2 ** 3`` exactly 8, where ``exp(3 log 2)`` is 7.999...); for an integer dtype
    ``start`` and ``end`` are truncated to integers first, as torch's."""
    steps = int_argument("logspace", steps, "steps")
    dtype = (
        _no_bool_range("logspace", _check_dtype("logspace", dtype), steps) or default_float_dtype()
    )
    # asked of the result, not of the linspace it is computed from: torch's is a leaf
    requires_grad = kwargs.pop("requires_grad", False)
    # (one integer step is ``base ** start`` of the start given, before any conversion:
    # logspace(0.5, 1, 1, dtype=uint8) is 3 = trunc(10 ** 0.5))
    given = float(start.item() if isinstance(start, Tensor) else start)
    if dtype in NARROW_INTS:  # both ends converted first, as linspace's (-2 is 254 in uint8)
        start, end = (
            written_scalar("logspace", v.item() if isinstance(v, Tensor) else v, dtype)
            for v in (start, end)
        )
    if isinstance(steps, numbers.Integral) and steps >= 2:  # (one step: base ** start only)
        for written in (start, end):
            value = written.item() if isinstance(written, Tensor) else written
            check_float_range("logspace", value, dtype)
    if dtype in INT_DTYPES:
        start, end = (int(v.item() if isinstance(v, Tensor) else v) for v in (start, end))
        if not isinstance(steps, numbers.Integral) or steps < 0:
            raise InvalidValueError(f"logspace: steps must be a non-negative int, got {steps!r}")
        # torch's integer kernel: the base rounded to float32, each exponent a double from
        # the nearer end (no fused multiply-add), the power a double, truncated; one step is
        # the base to the power of ``start`` as given, in double
        step = (float(end) - float(start)) / max(steps - 1, 1)
        index = np.arange(steps, dtype=np.float64)
        exponent = np.where(
            index < steps // 2, float(start) + step * index, float(end) - step * (steps - 1 - index)
        )
        power = np.float64(np.float32(base)) ** exponent
        host = np.trunc(np.float64(base) ** np.full(1, given) if steps == 1 else power)
        host = host.astype(np.int64)
        backend, device = _target(kwargs.get("backend"), kwargs.get("device"))
        return _requiring(from_host(Tensor, host, dtype, backend, device), requires_grad)
    powers = float(base) ** linspace(start, end, steps, dtype="float64", **kwargs)
    return _requiring(powers.cast(dtype), requires_grad)


def rand(*args: Any, dtype: Any = None, backend: Any = None, device: Any = None,
         requires_grad: bool = False, generator: Any = None,
         size: Any = None) -> Tensor:  # fmt: skip
    """Uniform values on [0, 1) (``torch.rand``): ``rand(2, 3)`` or ``rand((2, 3))``."""
    args = _sized("rand", args, size)
    shape, dtype, backend, device = _leading_shape("rand", args, dtype, backend, device)
    drawn = random(shape, "uniform", dtype, backend, device, generator=generator)
    return _requiring(drawn, requires_grad)


def randn(*args: Any, dtype: Any = None, backend: Any = None, device: Any = None,
          requires_grad: bool = False, generator: Any = None,
          size: Any = None) -> Tensor:  # fmt: skip
    """Standard normal values (``torch.randn``): ``randn(2, 3)`` or ``randn((2, 3))``."""
    args = _sized("randn", args, size)
    shape, dtype, backend, device = _leading_shape("randn", args, dtype, backend, device)
    drawn = random(shape, "normal", dtype, backend, device, generator=generator)
    return _requiring(drawn, requires_grad)


def randint(*args: Any, dtype: Any = "int64", backend: Any = None, device: Any = None,
            generator: Any = None, requires_grad: bool = False, low: Any = None,
            high: Any = None, size: Any = None) -> Tensor:  # fmt: skip
    """Integers drawn uniformly from ``[low, high)``: ``randint(high, size)`` or
    ``randint(low, high, size)`` (``torch.randint``), int64 by default; any of them may be
    given by torch's keyword (``randint(10, size=(3,))``)."""
    if low is not None or high is not None or size is not None:
        rest = list(args)
        size = size if size is not None else (rest.pop() if rest else None)
        high = high if high is not None else (rest.pop() if rest else None)
        low = low if low is not None else (rest.pop() if rest else 0)
        if rest or size is None or high is None:
            raise ShapeError(
                f"randint: expected (high, size) or (low, high, size), got {args!r} with "
                f"low={low!r}, high={high!r}, size={size!r}"
            )
        args = (low, high, size)
    args = tuple(int_arguments("randint", a, "size" if i == len(args) - 1 else "bound")
                 for i, a in enumerate(args))  # fmt: skip
    ints = [a for a in args if isinstance(a, numbers.Integral) and not isinstance(a, bool)]
    if len(args) == 2 and len(ints) == 1:
        low, high, size = 0, args[0], args[1]
    elif len(args) == 3:
        low, high, size = args
    else:
        raise ShapeError(f"randint: expected (high, size) or (low, high, size), got {args!r}")
    if int(high) <= int(low):
        raise ShapeError(f"randint: expects low < high, got low={low}, high={high}")
    if int(low) < -(2**63) or int(high) > 2**63:  # torch refuses them too; the draws would wrap
        raise InvalidArgumentError(f"randint: low={low} and high={high} must lie in int64's range")
    dtype = _check_dtype("randint", dtype)
    smallest, largest = RANDINT_BOUNDS.get(dtype, (-(2**63), 2**63 - 1))
    if not smallest <= int(low) <= largest or not smallest <= int(high) - 1 <= largest:
        # torch's bounds check: the draws would wrap (uint8's randint(0, 300) gave 44 for 300);
        # its RuntimeError "to - 1 is out of bounds for unsigned char"
        raise InvalidValueError(
            f"randint: low={low} and high={high} are out of bounds for {dtype} "
            f"({smallest} <= low < high <= {largest + 1})"
        )
    shape = _creation_shape("randint", size)
    draws = random(shape, "uniform", "float64", backend, device, generator=generator)
    out = (draws * float(int(high) - int(low))).floor().cast("int64") + int(low)
    return _requiring(out if dtype == "int64" else out.cast(dtype), requires_grad)


def randint_like(
    input: Tensor,  # noqa: A002 (torch's name)
    *args: Any,
    dtype: Any = None,
    **kwargs: Any,
) -> Tensor:
    """Integers from ``[low, high)`` of ``input``'s shape (``randint_like(x, high)``,
    ``randint_like(x, low, high)``, or torch's ``low=``/``high=`` keywords)."""
    t = input
    if "high" in kwargs:
        args = (*args, kwargs.pop("high"))
        if "low" in kwargs:
            args = (kwargs.pop("low"), *args)
    out = randint(*args, tuple(t.shape), dtype=dtype or t.dtype, backend=t.backend,
                  device=t.device, generator=kwargs.get("generator"))  # fmt: skip
    return _laid_out_like(out, t, kwargs)


def randperm(n: int, *, dtype: Any = "int64", backend: Any = None, device: Any = None,
             generator: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    """A random permutation of ``0 .. n-1`` (the order of ``n`` uniform draws); with
    ``requires_grad`` (a float ``dtype``) a leaf that requires grad, as torch's."""
    n = int_argument("randperm", n, "n")
    if not isinstance(n, numbers.Integral) or n < 0:
        raise ShapeError(f"randperm: n must be a non-negative int, got {n!r}")
    draws = random((int(n),), "uniform", "float64", backend, device, generator=generator)
    out = draws.sort_with_indices(0)[1]
    dtype = _check_dtype("randperm", dtype)
    return _requiring(out if dtype == "int64" else out.cast(dtype), requires_grad)


def normal(mean: Any = 0.0, std: Any = 1.0, size: Any = None, *, dtype: Any = None,
           backend: Any = None, device: Any = None, generator: Any = None,
           requires_grad: bool = False) -> Tensor:  # fmt: skip
    """Normal draws with ``mean`` and ``std`` (numbers with a ``size``, or tensors that
    broadcast), as ``torch.normal``; ``requires_grad`` makes the numbers' draw a leaf that
    requires grad (torch takes it in that form only)."""
    if isinstance(std, numbers.Real) and not std >= 0.0:  # NaN too, as torch's check
        raise InvalidArgumentError(f"normal: expects std >= 0.0, but found std {std!r}")
    if isinstance(std, Tensor):
        check_values(
            std.greater_equal_elem(0.0),
            lambda: InvalidArgumentError(
                f"normal: expects all elements of std >= 0.0 (std {shape_text(std.shape)})"
            ),
        )
    reference = next((v for v in (mean, std) if isinstance(v, Tensor)), None)
    if reference is not None:
        if requires_grad:  # (torch's tensor forms have no such argument)
            raise DTypeError(
                "normal: requires_grad= is taken with a number mean and std and a size only"
            )
        shape = np.broadcast_shapes(*[v.shape for v in (mean, std) if isinstance(v, Tensor)])
        noise = random(
            shape, "normal", reference.dtype, reference.backend, reference.device,
            generator=generator,
        )  # fmt: skip
        # torch's draw is not reparameterized (``Normal.rsample`` is): mean and std get a zero
        # gradient (slot attention's ``torch.normal(mu, sigma)`` leaves them untrained there)
        return _zero_gradient(untracked(noise * std + mean), mean, std)
    if size is None:
        raise ShapeError("normal: give a size for scalar mean and std")
    dtype = _check_dtype("normal", dtype) or default_float_dtype()
    shape = _creation_shape("normal", size)
    drawn = random(shape, "normal", dtype, backend, device, generator=generator) * std + mean
    return _requiring(drawn, requires_grad)


def poisson(input: Tensor, generator: Any = None) -> Tensor:  # noqa: A002 (torch's name)
    """Poisson counts with the rates ``input`` (``torch.poisson``), in its dtype. As torch's,
    a draw: the rates get a zero gradient."""
    if not isinstance(input, Tensor) or input.dtype not in FLOAT_DTYPES:
        raise DTypeError(
            f"poisson: expected a floating point tensor of rates, got "
            f"{getattr(input, 'dtype', type(input).__name__)}"
        )
    check_values(
        input.greater_equal_elem(0.0),
        lambda: InvalidArgumentError(
            f"poisson: invalid Poisson rate, expected rate to be non-negative "
            f"(rates {shape_text(input.shape)})"
        ),
    )
    from scipy import stats  # (imported at the first draw: see distributions.discrete)

    uniforms = random(
        input.shape, "uniform", "float64", input.backend, input.device, generator=generator
    )
    rates = np.asarray(untracked(input).numpy(), np.float64)
    counts = stats.poisson.ppf(uniforms.numpy(), rates)
    drawn = tensor(counts, dtype=input.dtype, backend=input.backend, device=input.device)
    return _zero_gradient(untracked(drawn), input, input)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor holding ``array``'s values, with its dtype (``torch.from_numpy``). torch shares
    the array's memory; retrograd's tensors never write their memory (an in-place op gives the
    tensor a new value), so here writes to one are not seen by the other: the array is
    copied."""
    if not isinstance(array, np.ndarray):
        raise DTypeError(f"from_numpy: expected np.ndarray (got {type(array).__name__})")
    return tensor(array)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """``data`` as a tensor: a tensor itself when its dtype and device already fit (as
    ``torch.as_tensor``), else a converted copy."""
    if isinstance(data, Tensor):
        out = data if dtype is None else data.cast(dtype)
        return out if device is None else out.to(device)
    return tensor(data, dtype=dtype, device=device)


def asarray(
    obj: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    copy: bool | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """torch's ``asarray``: ``obj`` as a tensor, the tensor itself where its dtype and device
    fit and no ``copy=True`` is asked; a copy otherwise, refused with ``copy=False``
    (torch's: a copy it was told not to make). ``requires_grad`` makes the result a leaf that
    requires grad.

    >>> import retrograd as rg
    >>> x = rg.ones(2)
    >>> rg.asarray(x) is x, rg.asarray(x, copy=True) is x, rg.asarray([1, 2]).dtype
    (True, False, retrograd.int64)
    """
    if isinstance(obj, Tensor):
        out = as_tensor(obj, dtype=dtype, device=device)
        if copy and out is obj:
            out = obj.clone()
        elif copy is False and out is not obj:
            raise InvalidArgumentError(
                f"asarray: copy=False, but the {obj.dtype} tensor on {obj.device} has to be "
                f"copied to give dtype={dtype!r}, device={device!r}"
            )
    else:
        out = as_tensor(obj, dtype=dtype, device=device)
    if requires_grad:
        out = out.detach() if out is obj else out
        out.requires_grad_(True)
    return out


def scalar_tensor(
    s: Any,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    **_: Any,
) -> Tensor:
    """A 0-d tensor of ``s``, in the default float dtype unless ``dtype`` (as torch's,
    an int or bool ``s`` too); ``requires_grad`` makes it a leaf that requires grad."""
    dtype = dtype or default_float_dtype()
    return tensor(s, dtype=dtype, device=device, requires_grad=requires_grad)


def random(
    shape: Sequence[int],
    distribution: str = "uniform",
    dtype: Any = None,
    backend: Any = None,
    device: Any = None,
    *,
    generator: Any = None,
) -> Tensor:
    """Random values, ``"uniform"`` on [0, 1) or standard ``"normal"``, from the stream
    :func:`seed` seeds, or from ``generator`` (an ``rg.Generator``: :mod:`.generator`)."""
    generator = checked_generator("random", generator)
    if distribution not in ("uniform", "normal"):
        raise InvalidArgumentError(
            f"random: distribution must be 'uniform' or 'normal', got {distribution!r}"
        )
    dtype = _check_dtype("random", dtype) or default_float_dtype()
    if dtype not in GRAD_DTYPES:
        # (torch: "check_uniform_bounds" not implemented for 'Long', a NotImplementedError)
        raise UnsupportedDTypeError(f"random: dtype must be a float dtype, got {dtype!r}")
    backend, device = _target(backend, device)
    shape = _creation_shape("random", shape)
    if generator is not None and dtype in COMPLEX_DTYPES:
        raise DTypeError(f"random: a generator draws no {dtype} values here; omit generator=")
    if generator is not None:
        drawn = generator.draws(shape, distribution, dtype)
        return from_host(Tensor, drawn, dtype, backend, device)
    return Tensor(backend.random(shape, distribution, dtype, device), backend, device)


def seed(value: int) -> None:
    """Seed the generator behind :func:`random` and dropout, for reproducible runs."""
    current_backend().seed(int(value))


_seed = seed  # (manual_seed's argument is torch's ``seed``, which shadows the function there)


def manual_seed(seed: int) -> None:
    """torch's name for :func:`seed` (the draws themselves differ from torch's generator)."""
    _seed(seed)


def _no_out(op: str, out: Any) -> None:
    if out is not None:
        raise InvalidArgumentError(
            f"{op}: out= is not supported (tensors are values here); assign the result"
        )


def _leading_shape(
    op: str, args: tuple[Any, ...], dtype: Any, backend: Any, device: Any
) -> tuple[tuple[int, ...], Any, Any, Any]:
    """Split a creation function's positional arguments: torch's varargs shape (leading ints,
    ``zeros(2, 3)``) or one shape sequence (``zeros((2, 3))``), then this library's positional
    ``dtype, backend, device`` (``zeros((2, 3), "float64")``) as before varargs existed."""
    if not args:
        # (torch: "zeros() missing 1 required positional arguments", a TypeError)
        raise ArgumentTypeError(f"{op}: missing the shape")
    args = tuple(size_of(a, op) for a in args)
    if isinstance(args[0], numbers.Integral) and not isinstance(args[0], bool):
        count = 0
        while count < len(args) and isinstance(args[count], numbers.Integral):
            count += 1
        shape, rest = tuple(int(n) for n in args[:count]), args[count:]
    else:
        shape, rest = args[0], args[1:]
    if len(rest) > 3:
        raise ShapeError(f"{op}: too many positional arguments {args!r}")
    given = list(rest) + [None] * (3 - len(rest))
    dtype = given[0] if given[0] is not None else dtype
    backend = given[1] if given[1] is not None else backend
    device = given[2] if given[2] is not None else device
    # the dtype read here, so that a refused one (torch.cfloat) names the function called
    return _creation_shape(op, shape), _check_dtype(op, dtype), backend, device


def size_of(arg: Any, op: str) -> Any:
    """``arg`` as an int where it is an integer tensor of one element, a size as torch
    unpacks it (Tacotron 2's ``torch.LongTensor(len(batch), max_input_len)`` of a sorted
    length, ``torch.zeros(2, n)`` of ``n = lengths.max()``); else as given (a 0-d tensor of
    another dtype refused, naming ``op``)."""
    if isinstance(arg, Tensor) and arg.numel() == 1 and arg.dtype == "int64":
        return int(arg.item())
    return int_argument(op, arg, "size")


def _creation_shape(op: str, shape: Any) -> tuple[int, ...]:
    entries = shape if isinstance(shape, (list, tuple)) else (shape,)
    if entries and isinstance(entries[0], bool | np.bool_):
        # torch's "must be tuple of ints, but found element of type bool at pos 0" (a layer
        # built with a bool for a size: ``PReLU(True)``); its parser reads the type of the
        # first entry only, so that a later bool is taken as the int it is
        raise ArgumentTypeError(f"{op}: a size must be an int, got a bool in {shape!r}")
    shape = shape_arg(shape, op)
    if any(n < 0 for n in shape):
        raise ShapeError(f"{op}: negative dimension in shape {shape_text(shape)}")
    return shape


functions._number_tensor = tensor  # rg.mul(3, 2): see functions._number_input
