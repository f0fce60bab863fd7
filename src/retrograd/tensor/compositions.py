"""Elementwise operations composed of others (their gradients follow from the parts): torch's
``alpha`` of ``add``/``sub``, clamping to tensor bounds, rounded division, ``maximum``/
``minimum`` with torch's tie rule, and the inverse error function.

Used by :class:`~retrograd.tensor.elementwise.ElementwiseMixin`; each takes tensors (and
numbers) and calls their methods, so it needs nothing of the class but its methods.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..backend.protocol import COMPLEX_DTYPES, FLOAT_DTYPES, INT_DTYPES, default_float_dtype
from ..context import capturing
from ..errors import DTypeError, InvalidValueError, UnsupportedDTypeError, shape_text
from ._dispatch import (
    check_float_range,
    lift,
    promote,
    promoted_dtype,
    real_only,
    scalar_dtype,
    untracked,
    wrap,
    wrapped_int,
    written_scalar,
)

#: the dtypes integer arithmetic takes (bools count as integers)
_INTEGRAL = (*INT_DTYPES, "bool")

__all__ = [
    "bounded",
    "check_alpha",
    "check_integer_divisor",
    "erfinv",
    "extremum",
    "integer_power",
    "number_scale",
    "rounded_quotient",
    "scaled",
]

SCALAR_TYPES = (int, float, bool, np.integer, np.floating, np.bool_)


def scaled(op: str, other: Any, alpha: Any, result: str | None = None) -> Any:
    """``alpha * other`` for ``add``/``sub``'s ``alpha``. ``result`` is the dtype of the sum
    (both operands promoted): torch checks ``alpha`` against it, refusing a float alpha
    (even ``2.0``) for an integral result and a bool alpha for a non-bool one, and a tensor
    ``other`` is cast to it before the scaling (``float64 [] + 0.5 * bool [n]`` is float64)."""
    number_scale(op, alpha)
    if result is None:  # (the fused products: their own checks ran)
        if isinstance(alpha, float) and isinstance(other, int | bool):
            return other * alpha
        if hasattr(other, "dtype") and other.dtype in _INTEGRAL and isinstance(alpha, float):
            if not float(alpha).is_integer():
                raise DTypeError(f"{op}: a float alpha ({alpha}) for an integer tensor")
            alpha = int(alpha)
        return other * alpha
    check_alpha(op, alpha, result)
    if hasattr(other, "dtype") and other.dtype != result:
        other = other.cast(result)
    if (
        result == "int64"
        and isinstance(other, int | np.integer)
        and isinstance(alpha, int | np.integer)
        and -(2**63) <= other < 2**63
        and -(2**63) <= alpha < 2**63
    ):
        # torch multiplies in int64: the product wraps (3 * (2**63 - 1) is 2**63 - 3)
        return (int(other) * int(alpha) + 2**63) % 2**64 - 2**63
    if result in INT_DTYPES and isinstance(other, int | np.integer) and isinstance(alpha, int):
        return wrapped_int(int(other) * alpha, result)  # (uint8, int32: wrapped as torch's)
    return other * alpha


def check_alpha(op: str, alpha: Any, result: str) -> None:
    """torch's checks of ``add``/``sub``'s ``alpha`` against the result's dtype."""
    number_scale(op, alpha)
    if isinstance(alpha, complex | np.complexfloating) and result not in COMPLEX_DTYPES:
        raise DTypeError(
            f"{op}: a complex alpha ({alpha}) for a non-complex ({result}) result, as torch refuses"
        )
    if isinstance(alpha, bool | np.bool_) and result != "bool":
        raise DTypeError(f"{op}: a bool alpha ({alpha}) is only supported for bool results")
    if isinstance(alpha, float | np.floating) and result not in FLOAT_DTYPES + COMPLEX_DTYPES:
        raise DTypeError(
            f"{op}: a float alpha ({alpha}) for an integral ({result}) result, as torch refuses"
        )
    if isinstance(alpha, int | np.integer):  # (torch converts it to a narrow integer result's
        written_scalar(f"{op} (alpha)", alpha, result)  # dtype within its bounds: int8's 200 no)
    check_float_range(f"{op} (alpha)", alpha, result)  # (float32's 1e300 no, as torch's)


def number_scale(op: str, scale: Any) -> None:
    """torch's ``alpha``/``beta`` is a number (or a 0-d tensor, read as one): a tuple, a list
    or a tensor of several elements would scale elementwise, a result torch refuses."""
    if isinstance(scale, numbers.Number | np.number | np.bool_):
        return
    if getattr(scale, "shape", None) == ():
        return
    shape = getattr(scale, "shape", None)
    given = f"of shape {shape_text(shape)}" if isinstance(shape, tuple) else repr(scale)[:40]
    raise DTypeError(f"{op}: alpha and beta must be numbers, got {type(scale).__name__} {given}")


def bounded(x: Any, bound: Any, side: str) -> Any:
    """``bound`` (a number or a tensor) where ``x`` lies beyond it on ``side``."""
    if isinstance(bound, SCALAR_TYPES):
        return x.mask_fill(getattr(x, side)(bound), bound)
    bound = lift(x, bound, "clamp")
    beyond = getattr(x, side)(bound)
    if bound.is_float():  # a NaN bound gives NaN, as torch's max/min propagate it
        beyond = beyond.logical_or(bound.isnan())
    return x.mask_where(beyond, bound)


def _integral(x: Any) -> bool:
    if hasattr(x, "dtype"):
        return x.dtype in _INTEGRAL
    return isinstance(x, int | np.integer | bool | np.bool_)


def _integer_result(a: Any, b: Any) -> str:
    """The dtype of an integer op of tensor ``a`` and ``b`` (a tensor or a Python integer), by
    torch's promotion (bools with bools: int64, the kernels having no bool version)."""
    if hasattr(b, "dtype"):
        dtype = promoted_dtype(a.dtype, b.dtype, tuple(a.shape), tuple(b.shape))
    else:
        dtype = scalar_dtype(a.dtype, b)
    return "int64" if dtype == "bool" else dtype


def _as_int64(like: Any, value: Any, dtype: str) -> Any:
    """``value`` (an integer or bool tensor, or a Python integer) as the int64 tensor that holds
    its values once cast to ``dtype`` (torch casts the operands to the result's dtype, a narrow
    one wrapping them), on ``like``'s backend and device."""
    if not hasattr(value, "dtype"):
        return wrap(like, like._backend.full((), wrapped_int(value, dtype), "int64", like._device))
    return lift(like, value, "div").cast(dtype).cast("int64")


def refuse_complex(op: str, a: Any, b: Any) -> None:
    """torch's ``remainder``, ``fmod`` and rounded ``div`` have no complex kernel
    (``"remainder_cpu" not implemented for 'ComplexFloat'``, a ``NotImplementedError``): a
    complex operand, tensor or number, is refused in those terms."""
    for value in (a, b):
        dtype = getattr(value, "dtype", None)
        if isinstance(value, complex | np.complexfloating) or dtype in COMPLEX_DTYPES:
            raise UnsupportedDTypeError(
                f"{op}: not implemented for complex numbers (got {_named(value)})"
            )


def _named(value: Any) -> str:
    return f"a {value.dtype} tensor" if hasattr(value, "dtype") else repr(value)


def check_integer_divisor(op: str, a: Any, b: Any) -> None:
    """Integer division or remainder by zero is an error, as in torch and Python, not the
    undefined value an integer kernel makes. A divisor tensor is read on the host for it,
    except while a step is captured (where a host read is refused)."""
    if not (_integral(a) and _integral(b)):
        return
    if hasattr(a, "dtype") and a.numel() == 0:  # nothing is divided (torch: an empty result)
        return
    # (the divisor as the kernel sees it: cast to the result's dtype first, so a uint8
    # dividend's ``% 256`` or ``// int32_tensor(-2**31)`` divides by a wrapped 0)
    dtype = _integer_result(a, b) if hasattr(a, "dtype") else _integer_result(b, a)
    if not hasattr(b, "dtype"):
        zero = wrapped_int(b, dtype) == 0
    elif capturing.get() or b.numel() == 0:
        return
    else:
        zero = bool(b.cast(dtype).cast("int64").equal_elem(0).any().item())
    if zero:
        raise InvalidValueError(f"{op}: integer division by zero")  # (torch: RuntimeError)


def integer_power(base: Any, exponent: Any) -> Any | None:
    """torch's power of integers: an integer result when both are integers (bools count as
    integers; the dtype promoted as torch's, uint8 powers wrapping); ``None`` when either is
    a float. A negative Python exponent is refused, as
    torch refuses it; a negative entry of an exponent tensor gives torch's integer result
    (1 for a base of 1, +-1 for -1 by the exponent's parity, 0 otherwise)."""
    if not (_integral(base) and _integral(exponent)):
        return None
    if not hasattr(exponent, "dtype") and exponent < 0:
        raise InvalidValueError(  # (torch's RuntimeError)
            f"pow: integers to negative integer powers are not allowed (exponent {exponent})"
        )
    # (the backend's integer power: exact, and wrapping on overflow as torch's kernel does;
    # computed in int64, whose wrapping agrees with the narrower dtypes' modulo their size)
    if not hasattr(exponent, "dtype"):
        dtype = _integer_result(base, exponent)
        # torch converts a number exponent to a uint8/int32 base's dtype within its bounds
        # (``u8 ** 256`` is refused, not 1 as a wrapped 0 would give)
        written_scalar("pow", exponent, dtype)
        base = base.cast(dtype).cast("int64")
        return base._apply("pow_scalar", (base,), (int(exponent),)).cast(dtype)
    dtype = _integer_result(exponent, base) if not hasattr(base, "dtype") else None
    dtype = dtype or _integer_result(base, exponent)
    exponent = exponent.cast(dtype).cast("int64")
    base = _as_int64(exponent, base, dtype)
    negative = exponent.lower_elem(0)
    power = base._apply("pow", (base, exponent.mask_fill(negative, 0)))
    odd = exponent.remainder(2).equal_elem(1)
    minus_one = odd.cast("int64") * -2 + 1  # (-1) ** exponent
    small = base.equal_elem(1).cast("int64") + base.equal_elem(-1).cast("int64") * minus_one
    return power.mask_where(negative, small).cast(dtype)


def rounded_quotient(a: Any, b: Any, mode: str) -> Any:
    """``a / b`` rounded toward zero (``"trunc"``) or down (``"floor"``), as torch's ``div``
    with ``rounding_mode``; integer operands keep an integer result. The floor of a float
    quotient is taken from the exact remainder (``a - remainder(a, b)`` is a multiple of
    ``b``), as torch's kernel takes it from ``fmod``, so a quotient that rounds up to an
    integer is still floored right."""
    refuse_complex(f"div (rounding_mode={mode!r})", a, b)
    if not hasattr(a, "dtype"):
        a = lift(b, a, "div")
    if a.dtype == "bool" and (getattr(b, "dtype", None) == "bool" or isinstance(b, bool)):
        # (torch: "div_floor_cpu" not implemented for 'Bool', a NotImplementedError)
        raise UnsupportedDTypeError(
            f"div (rounding_mode={mode!r}): not implemented for bool tensors"
        )
    b_integral = (hasattr(b, "dtype") and b.dtype in _INTEGRAL) or (
        isinstance(b, int | np.integer | np.bool_)  # a Python bool too: torch's int
    )
    if a.dtype in _INTEGRAL and b_integral:
        check_integer_divisor(f"div (rounding_mode={mode!r})", a, b)
        dtype = _integer_result(a, b)
        x, y = a.cast(dtype).cast("int64"), _as_int64(a, b, dtype)
        if mode == "trunc":  # (an exact multiple of y: its floor quotient is the truncated one)
            x = x - x.fmod(y)
        return x._apply("floor_divide", (x, y)).cast(dtype)
    quotient = a / b
    if mode == "trunc":
        return _zero_gradient(untracked(quotient).trunc(), a, b)
    return _floor_quotient(a, b, quotient)


def _zero_gradient(out: Any, a: Any, b: Any) -> Any:
    """``out`` (computed outside the graph) in the graph of ``a`` and ``b`` with a zero
    gradient for each, as torch's rounded divisions have (no NaN from ``1 / b`` at 0)."""
    everywhere = out.equal(out).logical_or(True)
    for operand in (a, b):
        if getattr(operand, "requires_grad", False):
            out = operand.cast(out.dtype).mask_where(everywhere, out)
    return out


def _floor_quotient(a: Any, b: Any, quotient: Any) -> Any:
    """torch's ``div_floor_floating``, step for step: the exact multiple ``a - fmod(a, b)``
    divided by ``b``, one less where ``fmod``'s sign is not ``b``'s, floored, and rounded up
    where the division left it more than half below; a zero quotient keeps the sign of
    ``a / b`` and ``b == 0`` gives ``a / b`` (so ``-1 // inf`` is ``-1`` and ``0 // -0.5``
    is ``-0.0``). As torch's, the gradient is zero for both operands."""
    dtype = quotient.dtype
    x = untracked(a).cast(dtype)
    if isinstance(b, SCALAR_TYPES):
        y = wrap(x, x._backend.full((), float(b), dtype, x._device))
    else:
        y = untracked(lift(a, b, "div")).cast(dtype)
    q = untracked(quotient)
    mod = x.fmod(y)
    div = (x - mod) / y
    div = div.mask_where(
        mod.not_equal(0.0).logical_and(mod.lower(0.0).not_equal(y.lower(0.0))), div - 1.0
    )
    floored = div.floor()
    floored = floored.mask_where((div - floored).greater(0.5), floored + 1.0)
    zero = (q * 0.0).mask_fill(q.isnan().logical_or(q.isinf()), 0.0).copysign(q)
    out = floored.mask_where(div.equal(0.0), zero).mask_where(y.equal(0.0), q)
    # a finite dividend whose quotient overflows (1 // 1e-310): torch's exact scalar fmod
    # leaves (a - fmod) / b infinite; a vectorized fmod (the torch backend's) gives NaN there
    overflowed = q.isinf().logical_and(x.isfinite())
    return _zero_gradient(out.mask_where(overflowed, q), a, b)


def extremum(a: Any, b: Any, kind: str) -> Any:
    """torch's ``maximum``/``minimum``: values from the larger (smaller) operand; at a tie
    each operand receives half the gradient. Bools and ints as themselves."""
    a, b = promote(a, b, kind)
    if a.dtype == "bool":
        return a.logical_or(b) if kind == "maximum" else a.logical_and(b)
    if a.dtype not in ("float32", "float64", "bfloat16", "float16"):
        return b.mask_where(a.greater(b) if kind == "maximum" else a.lower(b), a)
    # one op of the op table (autodiff/ops.py: a tie's value and gradient, NaN's)
    return a._apply(kind, (a, b))


def erfinv(y: Any) -> Any:
    """The inverse error function: the backend's kernel (torch's on the torch backend, SciPy's
    on NumPy; the protocol's default is Newton's method on ``erf``), one op whose rule is
    torch's, ``sqrt(pi) / 2 * exp(erfinv(x)^2) * grad``, from its output (autodiff/ops.py).
    16-bit floats are computed in float32 and rounded, as torch's kernels compute them."""
    x = real_only("erfinv", y)
    x = x if x.is_float() else x.cast(default_float_dtype())
    if x.dtype not in ("float32", "float64"):
        return erfinv(x.cast("float32")).cast(x.dtype)
    return x._apply("erfinv", (x,))
