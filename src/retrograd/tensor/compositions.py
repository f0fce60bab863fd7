"""Elementwise operations composed of others (their gradients follow from the parts): torch's
``alpha`` of ``add``/``sub``, clamping to tensor bounds, rounded division, ``maximum``/
``minimum`` with torch's tie rule, and the inverse error function.

Used by :class:`~retrograd.tensor.elementwise.ElementwiseMixin`; each takes tensors (and
numbers) and calls their methods, so it needs nothing of the class but its methods.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..backend.protocol import default_float_dtype
from ..context import capturing
from ..errors import DTypeError, InvalidArgumentError
from ._dispatch import lift, promote, untracked

__all__ = [
    "bounded",
    "check_integer_divisor",
    "erfinv",
    "extremum",
    "integer_power",
    "rounded_quotient",
    "scaled",
]

SCALAR_TYPES = (int, float, bool, np.integer, np.floating, np.bool_)


def scaled(op: str, other: Any, alpha: Any) -> Any:
    """``alpha * other`` for ``add``/``sub``'s ``alpha`` (torch refuses a float alpha for ints
    and a non-bool alpha for bools, as here)."""
    if isinstance(alpha, float) and isinstance(other, int | bool):
        return other * alpha
    if hasattr(other, "dtype") and other.dtype in ("int64", "bool") and isinstance(alpha, float):
        if not float(alpha).is_integer():
            raise DTypeError(f"{op}: a float alpha ({alpha}) for an integer tensor")
        alpha = int(alpha)
    return other * alpha


def bounded(x: Any, bound: Any, side: str) -> Any:
    """``bound`` (a number or a tensor) where ``x`` lies beyond it on ``side``."""
    if isinstance(bound, SCALAR_TYPES):
        return x.mask_fill(getattr(x, side)(bound), bound)
    bound = lift(x, bound, "clamp")
    return x.mask_where(getattr(x, side)(bound), bound)


def _integral(x: Any) -> bool:
    if hasattr(x, "dtype"):
        return x.dtype in ("int64", "bool")
    return isinstance(x, int | np.integer | bool | np.bool_)


def check_integer_divisor(op: str, a: Any, b: Any) -> None:
    """Integer division or remainder by zero is an error, as in torch and Python, not the
    undefined value an integer kernel makes. A divisor tensor is read on the host for it,
    except while a step is captured (where a host read is refused)."""
    if not (_integral(a) and _integral(b)):
        return
    if not hasattr(b, "dtype"):
        zero = b == 0
    elif capturing.get() or b.numel() == 0:
        return
    else:
        zero = bool(b.cast("int64").equal_elem(0).any().item())
    if zero:
        raise InvalidArgumentError(f"{op}: integer division by zero")


def integer_power(base: Any, exponent: Any) -> Any | None:
    """torch's power of integers: an int64 result when both are integers (bools count as
    integers); ``None`` when either is a float. A negative integer exponent is refused, as
    torch refuses it."""
    if not (_integral(base) and _integral(exponent)):
        return None
    if hasattr(exponent, "dtype"):
        if (
            not capturing.get()
            and exponent.numel()
            and bool(exponent.cast("int64").lower_elem(0).any().item())
        ):
            raise InvalidArgumentError("pow: integers to negative integer powers are not allowed")
        exponent = exponent.cast("float64")
    elif exponent < 0:
        raise InvalidArgumentError(
            f"pow: integers to negative integer powers are not allowed (exponent {exponent})"
        )
    base = base.cast("float64") if hasattr(base, "dtype") else float(base)
    # exact below 2**53; torch's integer power wraps on overflow, as this does not
    return (base**exponent).round().cast("int64")


def rounded_quotient(a: Any, b: Any, mode: str) -> Any:
    """``a / b`` rounded toward zero (``"trunc"``) or down (``"floor"``), as torch's ``div``
    with ``rounding_mode``; integer operands keep an integer result. The floor of a float
    quotient is taken from the exact remainder (``a - remainder(a, b)`` is a multiple of
    ``b``), as torch's kernel takes it from ``fmod``, so a quotient that rounds up to an
    integer is still floored right."""
    if not hasattr(a, "dtype"):
        a = lift(b, a, "div")
    b_integral = (hasattr(b, "dtype") and b.dtype in ("int64", "bool")) or (
        isinstance(b, int | np.integer) and not isinstance(b, bool)
    )
    if a.dtype in ("int64", "bool") and b_integral:
        check_integer_divisor(f"div (rounding_mode={mode!r})", a, b)
        a64 = a.cast("int64")
        if mode == "trunc":
            return (a64.cast("float64") / b).trunc().cast("int64")
        multiple = (a64 - a64.remainder(b)).cast("float64")
        return (multiple / b).round().cast("int64")
    quotient = a / b
    if mode == "trunc":
        return quotient.trunc()
    floored = ((a - a.remainder(b)) / b).round()
    zero = lift(a, b, "div").equal(0.0) if not isinstance(b, SCALAR_TYPES) else (b == 0)
    if zero is True:
        return quotient
    return floored if zero is False else floored.mask_where(zero, quotient)


def extremum(a: Any, b: Any, kind: str) -> Any:
    """torch's ``maximum``/``minimum``: values from the larger (smaller) operand; at a tie
    each operand receives half the gradient. Bools and ints as themselves."""
    a, b = promote(a, b, kind)
    if a.dtype == "bool":
        return a.logical_or(b) if kind == "maximum" else a.logical_and(b)
    first = a.greater(b) if kind == "maximum" else a.lower(b)
    second = b.greater(a) if kind == "maximum" else b.lower(a)
    if a.dtype not in ("float32", "float64", "bfloat16", "float16"):
        return b.mask_where(first, a)
    tie = (a + b) * 0.5
    return tie.mask_where(first, a).mask_where(second, b)


# Giles (2010), "Approximating the erfinv function": single-precision coefficients, refined
# by Newton steps on erf to the precision of the dtype.
_GILES_CENTRAL = (
    2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
    -0.00125372503, -0.00417768164, 0.246640727, 1.50140941,
)  # fmt: skip
_GILES_TAIL = (
    -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
    -0.0076224613, 0.00943887047, 1.00167406, 2.83297682,
)  # fmt: skip
_SQRT_PI_HALF = math.sqrt(math.pi) / 2.0


def erfinv(y: Any) -> Any:
    from ..autodiff.grad_mode import no_grad

    x = y if y.is_float() else y.cast(default_float_dtype())
    with no_grad():
        value = untracked(x)
        w = -((1.0 - value) * (1.0 + value)).log()
        central, tail = w - 2.5, w.clamp_min(5.0).sqrt() - 3.0
        p_central = central * 0.0 + _GILES_CENTRAL[0]
        p_tail = tail * 0.0 + _GILES_TAIL[0]
        for c, t in zip(_GILES_CENTRAL[1:], _GILES_TAIL[1:]):
            p_central = p_central * central + c
            p_tail = p_tail * tail + t
        guess = p_central.mask_where(w.greater_equal(5.0), p_tail) * value
        guess = guess.mask_where(value.abs().equal(1.0), value * math.inf)
        for _ in range(3):
            step = (guess.erf() - value) * _SQRT_PI_HALF * (guess.square()).exp()
            guess = guess - step.mask_fill(step.is_nan(), 0.0)
    if not x.requires_grad:
        return guess
    # the last Newton step recorded: its gradient is exactly 1 / erf'(guess)
    return guess + (x - guess.erf()) * (_SQRT_PI_HALF * guess.square().exp())
