"""torch's ``torch.testing``: ``assert_close`` (and the deprecated ``assert_allclose``), and
``make_tensor`` (random test tensors of a shape and dtype, as torch's makes them).

>>> import retrograd as rg
>>> rg.testing.assert_close(rg.tensor([1.0, 2.0]), rg.tensor([1.0, 2.0 + 1e-7]))
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import InvalidArgumentError
from .tensor import Tensor

__all__ = ["assert_allclose", "assert_close", "make_tensor"]

#: torch's default tolerances by dtype (``rtol``, ``atol``)
_TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}


def _values(x: Any) -> tuple[np.ndarray, str]:
    if isinstance(x, Tensor):
        return x.numpy(), str(x.dtype)
    array = np.asarray(x)
    return array, str(array.dtype)


def assert_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    check_dtype: bool = True,
    msg: str | None = None,
    **_: Any,
) -> None:
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` have the same shape (and
    dtype, with ``check_dtype``) and ``|actual - expected| <= atol + rtol * |expected|``
    elementwise, torch's default tolerances chosen by dtype (exact for integers)."""
    a, a_dtype = _values(actual)
    e, e_dtype = _values(expected)
    if a.shape != e.shape:
        raise AssertionError(
            msg or f"The values for attribute 'shape' do not match: {a.shape} != {e.shape}."
        )
    if check_dtype and a_dtype != e_dtype:
        raise AssertionError(
            msg or f"The values for attribute 'dtype' do not match: {a_dtype} != {e_dtype}."
        )
    default = _TOLERANCES.get(a_dtype, (0.0, 0.0))
    rtol = default[0] if rtol is None else rtol
    atol = default[1] if atol is None else atol
    if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan):
        worst = float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64))))
        raise AssertionError(
            msg
            or f"Tensor-likes are not close! Greatest absolute difference: {worst} "
            f"(up to {atol} allowed, rtol {rtol})"
        )


def assert_allclose(
    actual: Any,
    expected: Any,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = True,
    msg: str = "",
) -> None:
    """torch's deprecated form of :func:`assert_close` (no dtype check)."""
    assert_close(
        actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=False,
        msg=msg or None,
    )  # fmt: skip


def _bounds(
    dtype: str,
    low: float | None,
    high: float | None,
    lowest: float,
    highest: float,
    default: tuple[float, float],
) -> tuple[float, float]:
    """torch's ``modify_low_high``: defaults, checks, clamping into the dtype's range, and
    ints' bounds ceiled (``randint``'s ``high`` is exclusive)."""
    low = default[0] if low is None else low
    high = default[1] if high is None else high
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        raise InvalidArgumentError(
            f"make_tensor: `low` and `high` cannot be NaN, but got low={low} and high={high}"
        )
    floating = dtype.startswith(("float", "bfloat"))
    if low == high and floating:
        warnings.warn(
            "make_tensor: low == high for a floating dtype is deprecated, as torch's; use "
            "full(...) instead",
            FutureWarning,
            stacklevel=3,
        )
    elif low >= high:
        raise InvalidArgumentError(
            f"make_tensor: `low` must be less than `high`, but got {low} >= {high}"
        )
    elif high < lowest or low >= highest:
        raise InvalidArgumentError(
            f"make_tensor: the value interval specified by `low` and `high` is [{low}, {high}), "
            f"but {dtype} only supports [{lowest}, {highest})"
        )
    low, high = min(max(low, lowest), highest), min(max(high, lowest), highest)
    if not floating:
        return math.ceil(low), math.ceil(high)
    return low, high


def make_tensor(
    *shape: Any,
    dtype: Any,
    device: Any = None,
    low: float | None = None,
    high: float | None = None,
    requires_grad: bool = False,
    noncontiguous: bool = False,
    exclude_zero: bool = False,
    memory_format: Any = None,
) -> Tensor:
    """torch's ``torch.testing.make_tensor``: a tensor of ``shape`` and ``dtype`` of values
    drawn uniformly from ``[low, high)`` (defaults ``[-9, 9)`` for floats, ``[-9, 10)``
    for ints, clamped to the dtype's range; bools ``False``/``True``), from the stream
    ``rg.manual_seed`` seeds. ``noncontiguous`` gives a strided view; ``exclude_zero``
    replaces zeros with 1 (ints) or the dtype's smallest normal number (floats)."""
    from .tensor import rand, randint
    from .tensor.dtypes import DTYPE_OBJECTS, canonical_dtype, finfo, iinfo

    name = canonical_dtype("make_tensor", dtype)
    if name.startswith("complex"):
        raise InvalidArgumentError(
            f"make_tensor: the requested dtype {name!r} is not supported here (no complex tensors)"
        )
    if len(shape) == 1 and isinstance(shape[0], Sequence):
        shape = tuple(shape[0])
    shape = tuple(int(n) for n in shape)
    if noncontiguous and memory_format is not None:
        raise InvalidArgumentError(
            "make_tensor: the parameters `noncontiguous` and `memory_format` are mutually "
            f"exclusive, but got noncontiguous={noncontiguous} and "
            f"memory_format={memory_format}"
        )
    floating = name.startswith(("float", "bfloat"))
    if requires_grad and not floating:
        raise InvalidArgumentError(
            "make_tensor: `requires_grad=True` is not supported for boolean and integral "
            f"dtypes, but got dtype={name}"
        )
    noncontiguous = noncontiguous and math.prod(shape) > 1
    drawn_shape = (*shape[:-1], 2 * shape[-1]) if noncontiguous else shape
    if name == "bool":
        low, high = _bounds(name, low, high, 0, 2, (0, 2))
        result = randint(low, high, drawn_shape, device=device).cast("bool")
    elif not floating:
        info = iinfo(DTYPE_OBJECTS[name])
        highest = info.max + (1 if name != "int64" else 0)
        low, high = _bounds(name, low, high, info.min, highest, (-9, 10))
        result = randint(low, high, drawn_shape, dtype=name, device=device)
    else:
        info = finfo(DTYPE_OBJECTS[name])
        low, high = _bounds(name, low, high, info.min, info.max, (-9, 9))
        result = (rand(drawn_shape, dtype="float64", device=device) * (high - low) + low).cast(name)
    if noncontiguous:
        result = result[..., 1::2]
    if exclude_zero:
        replacement = 1 if not floating else finfo(DTYPE_OBJECTS[name]).tiny
        result = result.masked_fill(result == 0, replacement)
    if requires_grad:
        result = result.require_grad()
    return result
