"""Elementwise operations: arithmetic, the Python operators, unary math, activations,
comparisons and logic.

:class:`ElementwiseMixin` needs one primitive from the class it is mixed into:
``_apply(op, inputs, params=())`` (:func:`retrograd.tensor._dispatch.apply`), which lifts
scalars and other tensors, promotes dtypes and translates errors. Every method here is one call
of it with a :class:`~retrograd.tensor._dispatch.TensorOp` declared below (the backend kernel,
its ``*_scalar`` form, the dtype rule: ``COMMON``; ``FLOAT`` for ops computed in float;
``COMPARE`` for comparisons) or the name of a kernel that takes any dtype. It also reads
``dtype`` and ``shape``.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend.protocol import FLOAT_DTYPES, INT_DTYPES, default_float_dtype
from ..errors import (
    DTypeError,
    InvalidArgumentError,
    KernelDTypeError,
    MixedDTypeError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
    shape_text,
)
from ._dispatch import (
    COMMON,
    COMPARE,
    FLOAT,
    TensorBase,
    TensorOp,
    check_float_range,
    check_scalar,
    check_scalar_int,
    host_number,
    lift,
    normalize_dim,
    promote,
    promoted_dtype,
    promoted_dtype_of,
    python_sequence,
    real_only,
    refuse_sequence,
    scalar_dims,
    scalar_dtype,
    scalar_value,
    tensor_argument,
    untracked,
    wrap,
    written_scalar,
)
from .autocasting import autocast_op
from .compositions import (
    bounded,
    check_alpha,
    check_integer_divisor,
    erfinv,
    extremum,
    integer_power,
    refuse_complex,
    rounded_quotient,
    scaled,
)

__all__ = ["ElementwiseMixin"]

SCALAR_TYPES = (int, float, bool, np.integer, np.floating, np.bool_)
_LN2 = math.log(2.0)
_INV_LN2 = 1.0 / math.log(2.0)
_INV_LN10 = 1.0 / math.log(10.0)

# -- the ops of this module: name, scalar kernel, dtype rule (see _dispatch.TensorOp) ------------
ADD = TensorOp("add", scalar="add_scalar", promote=COMMON)
SUB = TensorOp("sub", scalar="sub_scalar", promote=COMMON)
RSUB = TensorOp("sub", scalar="rsub_scalar", promote=COMMON)
MUL = TensorOp("mul", scalar="mul_scalar", promote=COMMON)
DIV = TensorOp("div", scalar="div_scalar", promote=FLOAT)
RDIV = TensorOp("div", scalar="rdiv_scalar", promote=FLOAT)
POW = TensorOp("pow", scalar="pow_scalar", promote=FLOAT)
RPOW = TensorOp("pow", scalar="rpow_scalar", promote=FLOAT)
REMAINDER = TensorOp("remainder", scalar="remainder_scalar", promote=COMMON)
RREMAINDER = TensorOp("remainder", scalar="rremainder_scalar", promote=COMMON)
ATAN2 = TensorOp("atan2", promote=FLOAT)
HYPOT = TensorOp("hypot", promote=FLOAT)

EQUAL = TensorOp("equal", scalar="equal_elem", promote=COMPARE)
NOT_EQUAL = TensorOp("not_equal", scalar="not_equal_elem", promote=COMPARE)
GREATER = TensorOp("greater", scalar="greater_elem", promote=COMPARE)
GREATER_EQUAL = TensorOp("greater_equal", scalar="greater_equal_elem", promote=COMPARE)
LOWER = TensorOp("lower", scalar="lower_elem", promote=COMPARE)
LOWER_EQUAL = TensorOp("lower_equal", scalar="lower_equal_elem", promote=COMPARE)

# Unary ops computed in float (an int tensor in the default float dtype); the others take any
# dtype and are called by name.
(
    EXP,
    EXPM1,
    LOG,
    LOG1P,
    SQRT,
    RECIP,
    SIN,
    COS,
    TAN,
    SINH,
    COSH,
    TANH,
    ASIN,
    ACOS,
    ATAN,
    ASINH,
    ACOSH,
    ATANH,
    ERF,
    RELU,
    GELU,
    SIGMOID,
    LOG_SIGMOID,
    SILU,
    SOFTPLUS,
    LEAKY_RELU,
    SOFTMAX,
    LOG_SOFTMAX,
    LOG2,
    LOG10,
    EXP2,
) = (
    TensorOp(name, floats=True)
    for name in (
        "exp",
        "expm1",
        "log",
        "log1p",
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
        "relu",
        "gelu",
        "sigmoid",
        "log_sigmoid",
        "silu",
        "softplus",
        "leaky_relu",
        "softmax",
        "log_softmax",
        "log2",
        "log10",
        "exp2",
    )
)


def _scaled_log(x: Any, scale: float) -> Any:
    """``log(x) * scale`` (``log2``, ``log10``); of a complex ``x`` part by part, as torch's
    kernels: a complex product would make ``log(0) = -inf + 0j`` into ``-inf + nan j``."""
    out = x.log()
    if out.is_complex():
        return out._apply("complex", (out.real * scale, out.imag * scale))
    return out * scale


def _real_scale(op: str, x: Any, value: Any) -> None:
    """torch's refusal of a complex ``value`` for a real result: it is cast to the result's
    dtype, which has no imaginary part to keep."""
    if isinstance(value, complex) and not x.is_complex():
        raise DTypeError(
            f"{op}: value {value!r} cannot be converted to the result's dtype {x.dtype} (as "
            "in torch); make the operands complex"
        )
    check_float_range(op, value, x.dtype)  # (float32's 1e300 no, as torch's)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool | np.bool_) or getattr(value, "dtype", None) == "bool"


def _no_bool_subtraction(a: Any, b: Any) -> None:
    """torch refuses ``-`` with a bool operand (tensor or Python bool): a RuntimeError."""
    if _is_bool(a) or _is_bool(b):
        raise KernelDTypeError(
            "sub: subtraction with a bool tensor is not supported (as in torch); use ^ or "
            "logical_xor() for bools, ~ or logical_not() to invert a mask"
        )


def _given(alpha: Any) -> bool:
    """Whether ``alpha`` is other than the default 1 (``1.0`` and ``True`` count: torch checks
    their types against the result's dtype)."""
    return type(alpha) is not int or alpha != 1


def _scale_first(
    op: str, scale: str, args: tuple, given: Any, operands: int = 1
) -> tuple[Any, tuple]:
    """torch's deprecated overloads that take the scale first, still in torch 2 (with a
    warning) and common in pre-1.5 optimizers: ``add(alpha, other)``, ``sub(alpha, other)``,
    ``addcmul(value, tensor1, tensor2)``, ``addcdiv(value, tensor1, tensor2)`` (``p.data.add_(
    -lr, d_p)``, ``exp_avg_sq.addcmul_(1 - beta2, grad, grad)``). ``args`` are the positional
    arguments: one more than the current form takes, a number first and tensors after, and no
    ``scale`` keyword besides; returns the scale and the ``operands`` operands (more given
    were a bare "too many values to unpack" where the caller unpacked them)."""
    if (
        len(args) != operands + 1
        or not isinstance(args[0], SCALAR_TYPES)
        or not all(isinstance(a, (TensorBase, *SCALAR_TYPES)) for a in args[1:])
    ):
        kinds = ", ".join(type(a).__name__ for a in args)
        raise DTypeError(
            f"{op}: invalid arguments ({kinds}); {scale} is a keyword argument "
            f"({op}(..., {scale}=...)), or the deprecated {op}({scale}, ...) takes a number first "
            "and tensors after"
        )
    if _given(given):
        raise DTypeError(f"{op}: {scale} given twice (first argument and keyword)")
    warnings.warn(
        f"This overload of {op} is deprecated: {op}(Number {scale}, ...); use "
        f"{op}(..., {scale}=...) instead",
        UserWarning,
        stacklevel=3,
    )
    return args[0], args[1:]


#: the scales (``alpha``, ``value``) that torch's fused float kernels take
_REAL_SCALARS = (int, float, np.integer, np.floating)


def _fused_scaled_sum(op: str, x: Any, other: Any, alpha: Any, result: str | None) -> Any:
    """``x + alpha * other`` of float tensors as torch's ``add`` kernel computes it, one fused
    multiply-add (``fma(other, alpha, x)``, so the bits are torch's); ``None`` where the
    composition runs instead (a number ``other``, an integer or bool result, a complex or
    bool ``alpha``)."""
    if (
        result not in FLOAT_DTYPES
        or not isinstance(other, TensorBase)
        or not isinstance(alpha, _REAL_SCALARS)
        or isinstance(alpha, bool | np.bool_)
    ):
        return None
    check_alpha(op, alpha, result)
    x, other = promote(x, other, op)  # (one backend, one dtype: as the composition's)
    return x._apply("add_scaled", (x, other), (float(alpha),))


def _sum_dtype(a: Any, b: Any) -> str | None:
    """The dtype of ``a + b`` (torch's promotion), ``None`` where ``b`` is neither a tensor
    nor a number (it is lifted later, and refused there if it cannot be)."""
    if isinstance(b, SCALAR_TYPES):
        return scalar_dtype(a.dtype, b)
    if hasattr(b, "_prim") and hasattr(b, "dtype"):
        return promoted_dtype(a.dtype, b.dtype, a.shape, b.shape)
    return None


def _tracked(bound: Any) -> bool:
    return bool(getattr(bound, "requires_grad", False))


def untracked_bound(bound: Any) -> Any:
    return untracked(bound) if hasattr(bound, "dtype") else bound


def _bound(x: Any, bound: Any, dtype: str) -> Any:
    """A clamp bound as a tensor of ``dtype`` (a number fills ``x``'s shape)."""
    if hasattr(bound, "dtype"):
        return lift(x, bound, "clamp").cast(dtype)
    return wrap(x, x._backend.full(x.shape, bound, dtype, x._device))


#: the sequences ``*`` repeats: torch's ``*`` leaves them to Python, which repeats one by a
#: one-element integer tensor (``[0] * n``, ``"ab" * t``, read through ``__index__``)
_REPEATED_SEQUENCES = frozenset({list, tuple, str, bytes})


def _repeated(t: Any, sequence: Any) -> Any:
    """``NotImplemented`` for Python to repeat ``sequence`` by a one-element integer or bool
    tensor ``t``; any other tensor refused as torch refuses it (a ``TypeError``), naming the
    sequence rather than ``__index__``."""
    if t.numel() == 1 and (t.dtype in INT_DTYPES or t.dtype == "bool"):
        return NotImplemented
    raise DTypeError(
        f"mul(): expected a tensor or a number, got a Python {type(sequence).__name__} (as "
        "torch refuses it; only a one-element integer tensor repeats a sequence)"
    )


def _real_bound(t: Any, bound: Any) -> Any:
    """A complex number bound of a float tensor's clamp as torch converts it: its real part
    where its imaginary part is zero (``clamp(max=2 + 0j)``); anything else as it is."""
    if isinstance(bound, complex | np.complexfloating) and bound.imag == 0 and t.is_float():
        return float(bound.real)
    return bound


def _no_bool(op: str) -> None:
    # (torch's kernel has none: "abs_cpu" not implemented for 'Bool', a NotImplementedError)
    raise UnsupportedDTypeError(f"{op}: not implemented for bool tensors (as in torch)")


def _truth(t: Any) -> Any:
    """``t`` as a bool tensor: non-zero is true (NaN too), as torch's logical ops read it."""
    return t if t.dtype == "bool" else t.not_equal(0)


def _truths(a: Any, b: Any) -> tuple[Any, Any]:
    """:func:`_truth` of two operands, each first cast to their promoted dtype as torch's
    logical kernels cast them (a 0-d int64 ``256`` beside a uint8 tensor is a wrapped 0:
    false)."""
    if a.dtype != b.dtype:
        common = promoted_dtype(a.dtype, b.dtype, a.shape, b.shape)
        a, b = a.cast(common), b.cast(common)
    return _truth(a), _truth(b)


def _defers_equality(other: Any) -> bool:
    """Whether ``t == other`` is left to Python, as torch leaves it: ``None`` and strings get
    the identity fallback (``if mask == None:`` is False), and an object that defines its own
    equality answers it (``norm == pytest.approx(1.0)``, ``mock.ANY``), and so do Python
    lists and tuples (``t == [1, 2]`` is False, as torch's: no elementwise comparison); numbers,
    arrays and tensors are compared elementwise."""
    if other is None or isinstance(other, str) or python_sequence(other):
        return True
    if isinstance(other, TensorBase | numbers.Number | np.ndarray | np.generic):
        return False
    return type(other).__eq__ is not object.__eq__


class ElementwiseMixin:
    """Elementwise methods and operators; needs ``_apply`` (see the module docstring)."""

    __slots__ = ()
    _apply: Callable[..., Any]  # the one primitive: retrograd.tensor._dispatch.apply
    dtype: str
    shape: tuple[int, ...]
    ndim: int
    _backend: Any
    _device: Any

    # -- arithmetic ---------------------------------------------------------------------------
    def add(self, other: Any, *args: Any, alpha: Any = 1) -> Any:
        """``self + alpha * other``, broadcasting; ``other`` may be a Python scalar (and
        torch's deprecated ``add(alpha, other)`` is taken, with its warning)."""
        if args:
            alpha, (other,) = _scale_first("add", "alpha", (other, *args), alpha)
        if type(alpha) is not int:  # (the common ``x + y`` pays no NumPy-scalar check)
            alpha = host_number(alpha)
        if _given(alpha):
            other = host_number(other)
            result = _sum_dtype(self, other)
            if result == "bool" and _is_bool(other):
                # torch: bool + alpha * bool stays bool (a logical or with a true alpha)
                check_alpha("add", alpha, result)
                return self.logical_or(other) if alpha else self.logical_or(False)
            fused = _fused_scaled_sum("add", self, other, alpha, result)
            if fused is not None:
                return fused
            other = scaled("add", other, alpha, result)
        return self._apply(ADD, (self, other))

    def sub(self, other: Any, *args: Any, alpha: Any = 1) -> Any:
        """``self - alpha * other`` (or torch's deprecated ``sub(alpha, other)``)."""
        if args:
            alpha, (other,) = _scale_first("sub", "alpha", (other, *args), alpha)
        other, alpha = host_number(other), host_number(alpha)
        _no_bool_subtraction(self, other)
        if _given(alpha):
            result = _sum_dtype(self, other)
            if isinstance(alpha, _REAL_SCALARS) and not isinstance(alpha, bool | np.bool_):
                # (a complex or bool alpha is refused below, as torch refuses it)
                fused = _fused_scaled_sum("sub", self, other, -alpha, result)
                if fused is not None:
                    return fused
            other = scaled("sub", other, alpha, result)
        return self._apply(SUB, (self, other))

    def mul(self, other: Any) -> Any:
        return self._apply(MUL, (self, other))

    multiply = mul
    subtract = sub

    def div(self, other: Any, *, rounding_mode: str | None = None) -> Any:
        """True division (ints are divided in the default float dtype); ``rounding_mode="trunc"`` or
        ``"floor"`` rounds the quotient as torch's ``div`` does (keeping an int dtype)."""
        if rounding_mode is None:
            return self._apply(DIV, (self, other))
        other = host_number(other)
        if isinstance(rounding_mode, str) and rounding_mode in ("trunc", "floor"):
            # (a str first: an array's == is elementwise, its truth value an error)
            return rounded_quotient(self, other, rounding_mode)
        raise DTypeError(
            f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}"
        )

    divide = true_divide = div

    def floor_divide(self, other: Any) -> Any:
        return rounded_quotient(self, host_number(other), "floor")

    def __floordiv__(self, other):
        return rounded_quotient(self, host_number(other), "floor")

    def __rfloordiv__(self, other):
        other = host_number(other)
        refuse_sequence("floor_divide", other)
        refuse_complex("div (rounding_mode='floor')", other, self)
        if isinstance(other, SCALAR_TYPES):
            dtype = scalar_dtype(self.dtype, other)  # (wrapped into uint8/int32: 300 is 44)
            value = scalar_value(other, dtype)
            other = wrap(self, self._backend.full(self.shape, value, dtype, self._device))
        return rounded_quotient(lift(self, other, "floor_divide"), self, "floor")

    def rsqrt(self) -> Any:
        """``1 / sqrt(self)`` (torch's kernel for float tensors: the reciprocal of the rounded
        square root, and torch's gradient rule)."""
        if self.dtype in FLOAT_DTYPES:
            return self._apply("rsqrt", (self,))
        return self.sqrt().recip()

    def reciprocal(self) -> Any:
        return self._apply(RECIP, (self,))

    def log2(self) -> Any:
        """The base-2 logarithm, exact at powers of two (the backend's kernel, as torch's)."""
        return self._exact_base(LOG2, _INV_LN2)

    def log10(self) -> Any:
        """The base-10 logarithm, exact at powers of ten (the backend's kernel, as torch's)."""
        return self._exact_base(LOG10, _INV_LN10)

    def exp2(self) -> Any:
        """``2 ** self``, exact at integers (the backend's kernel, as torch's)."""
        return self._exact_base(EXP2, None)

    def _exact_base(self, op: TensorOp, log_scale: float | None) -> Any:
        """``op`` (``log2``, ``log10``: ``log_scale`` the natural log's factor; ``exp2``:
        None) by the backend's kernel; 16-bit in float32, complex as a composition."""
        if self.dtype in ("float16", "bfloat16"):
            # torch computes in float32 and rounds once (a logarithm rounded to 16 bits, then
            # scaled, missed torch's value in 10 of 42 normal draws; x * ln2 rounded to 8 bits
            # would miss 2**50 by 9%)
            return self.cast("float32")._exact_base(op, log_scale).cast(self.dtype)
        if self.is_complex():
            return (self * _LN2).exp() if log_scale is None else _scaled_log(self, log_scale)
        return self._apply(op, (self,))

    def erfinv(self) -> Any:
        """The inverse error function: Newton steps on ``erf`` from Giles' approximation,
        converged to the last bits; the gradient is ``sqrt(pi)/2 * exp(erfinv(x)**2)``."""
        return erfinv(self)

    def addcmul(self, tensor1: Any, tensor2: Any, *args: Any, value: Any = 1) -> Any:
        """``self + value * tensor1 * tensor2``, in the dtype of the three taken together (or
        torch's deprecated ``addcmul(value, tensor1, tensor2)``)."""
        if args:
            value, (tensor1, tensor2) = _scale_first(
                "addcmul", "value", (tensor1, tensor2, *args), value, 2
            )
        x, t1, t2 = _common(self, tensor1, tensor2, "addcmul")
        _real_scale("addcmul", x, value)
        if x.dtype == "bool":
            raise DTypeError("addcmul: not implemented for bool tensors (as in torch)")
        if x.dtype in INT_DTYPES and isinstance(value, float | np.floating):
            value = int(value)  # torch casts value to the result's dtype, truncating
        if x.dtype in FLOAT_DTYPES and isinstance(value, _REAL_SCALARS):
            # torch's kernel, one fused multiply-add: fma(value * t1, t2, x)
            return x._apply("addcmul", (x, t1, t2), (float(value),))
        # (value * t1 first, as torch's kernel: t1 * t2 alone can overflow where the
        # scaled product does not)
        return x + (t1 * t2 if value == 1 else (t1 * value) * t2)

    def addcdiv(self, tensor1: Any, tensor2: Any, *args: Any, value: Any = 1) -> Any:
        """``self + value * tensor1 / tensor2``, in the dtype of the three taken together (or
        torch's deprecated ``addcdiv(value, tensor1, tensor2)``)."""
        if args:
            value, (tensor1, tensor2) = _scale_first(
                "addcdiv", "value", (tensor1, tensor2, *args), value, 2
            )
        tensor1 = lift(self, tensor1, "addcdiv")
        tensor2 = lift(self, tensor2, "addcdiv")
        if not any(t.is_float() or t.is_complex() for t in (tensor1, tensor2)):
            raise DTypeError(
                "addcdiv: integer division with addcdiv is not supported (as in torch); "
                "divide with a float tensor, or use div(..., rounding_mode=...)"
            )
        x, t1, t2 = _common(self, tensor1, tensor2, "addcdiv")
        _real_scale("addcdiv", x, value)
        if x.dtype in ("float16", "bfloat16"):
            # torch's kernel works in float32 and rounds once: in 16 bits, each of the three
            # steps rounding, 11% of normal draws missed its value
            wide = x.cast("float32").addcdiv(t1.cast("float32"), t2.cast("float32"), value=value)
            return wide.cast(x.dtype)
        # (value * t1 / t2, as torch's kernel: 2 * 3e38 / 3e38 is inf in float32, as torch's)
        return x + (t1 / t2 if value == 1 else (t1 * value) / t2)

    def lerp(self, end: Any, weight: Any) -> Any:
        """``self + weight * (end - self)``, computed as torch's kernel computes it (one fused
        multiply-add, from ``end`` when ``|weight| >= 0.5``, so both ends are exact)."""
        end = lift(self, end, "lerp")
        if isinstance(weight, complex) and self.is_complex():
            weight = complex(weight)  # a number, as a float weight is (NumPy's too)
        elif not isinstance(weight, SCALAR_TYPES):
            weight = lift(self, weight, "lerp")
            if weight.dtype != self.dtype and not weight.ndim and end.dtype == self.dtype:
                # torch takes a 0-d weight of another dtype, the three promoted together (a
                # float one makes integer ends float)
                target = promoted_dtype_of(self, end, weight)
                if target in FLOAT_DTYPES or target in ("complex64", "complex128"):
                    return self.cast(target).lerp(end.cast(target), weight.cast(target))
        if not (self.is_float() or self.is_complex()):
            raise DTypeError(
                f"lerp: not implemented for {self.dtype} input {shape_text(self.shape)} "
                "(torch's lerp takes a floating or complex input)"
            )
        if end.dtype != self.dtype:  # torch: no promotion in lerp (its RuntimeError)
            raise KernelDTypeError(
                f"lerp: expected end of the input's floating dtype, got input {self.dtype} "
                f"{shape_text(self.shape)} and end {end.dtype} {shape_text(end.shape)}"
            )
        if not isinstance(weight, (*SCALAR_TYPES, complex)):
            if weight.dtype != self.dtype:
                raise KernelDTypeError(
                    f"lerp: expected weight of the input's dtype {self.dtype} (or a 0-d one), "
                    f"got {weight.dtype} {shape_text(weight.shape)}"
                )
            if not self.is_complex():  # (complex: the composition below)
                # the op table's: torch's fused kernel and torch's rules (a composition's
                # masked branch would give NaN gradients, 0 * inf, where torch's are infinite)
                return self._apply("lerp", (self, end, weight))
            diff = end - self
            near_start = self + weight * diff
            near_end = end - diff * (1.0 - weight)
            return near_start.mask_where(weight.abs().greater_equal(0.5), near_end)
        if not self.is_complex():
            # torch takes a scalar weight in the tensor's dtype (a 0-d float32 one, e.g.)
            check_float_range("lerp", weight, self.dtype)
            return self._apply("lerp_scalar", (self, end), (float(weight),))
        diff = end - self
        if abs(weight) < 0.5:
            return self + diff * weight
        return end - diff * (1.0 - weight)

    def maximum(self, other: Any) -> Any:
        """The elementwise larger (torch's ``maximum``: a tie splits the gradient evenly)."""
        return extremum(self, other, "maximum")

    def minimum(self, other: Any) -> Any:
        return extremum(self, other, "minimum")

    def add_scalar(self, value: float) -> Any:
        value = check_scalar("add_scalar", value)
        return self._apply(ADD, (self, value))

    def sub_scalar(self, value: float) -> Any:
        value = check_scalar("sub_scalar", value)
        return self._apply(SUB, (self, value))

    def mul_scalar(self, value: float) -> Any:
        value = check_scalar("mul_scalar", value)
        return self._apply(MUL, (self, value))

    def div_scalar(self, value: float) -> Any:
        """``self / value``; an int tensor divided by an int is Burn's int division (the
        quotient rounded toward zero, an int tensor), as ``div_scalar`` is Burn's name and
        torch has none; ``/`` and ``div`` keep torch's true division."""
        value = check_scalar("div_scalar", value)
        if self.dtype in INT_DTYPES and isinstance(value, numbers.Integral):
            return rounded_quotient(self, int(value), "trunc")
        return self._apply(DIV, (self, value))

    def powf(self, other: Any) -> Any:
        """``self ** other`` elementwise (float)."""
        return self._apply(POW, (self, other))

    def pow(self, exponent: Any) -> Any:
        """``self ** exponent``: int64 when both are integers (torch's rule), else float."""
        other = host_number(exponent)
        if other.__class__ in (float, int) and other == 0.5 and self.is_complex():
            # torch's kernel takes a complex x ** 0.5 as sqrt (exp(0.5 * log x) is NaN in
            # the imaginary part at infinities: sqrt(inf j) is inf + inf j)
            return self.sqrt()
        if _is_bool(self) and _is_bool(other):
            if isinstance(other, bool):  # torch: x ** True is x, x ** False all true
                return self.logical_and(True) if other else self.logical_or(True)
            _no_bool("pow")
        result = integer_power(self, other)
        return self._apply(POW, (self, other)) if result is None else result

    def powf_scalar(self, value: float) -> Any:
        value = check_scalar("powf_scalar", value)
        return self._apply(POW, (self, value))

    def powi_scalar(self, value: int) -> Any:
        """Burn's ``powi_scalar``: ``self ** value`` for an int ``value`` (as :meth:`pow`)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise DTypeError(f"powi_scalar: the exponent must be an int, got {value!r}")
        return self.pow(int(value))

    def powi(self, other: Any) -> Any:
        """Burn's ``powi``: ``self ** other`` for an int tensor (or int) ``other``."""
        return self.pow(other)

    def remainder(self, other: Any) -> Any:
        """Remainder with the sign of the divisor (Python's ``%``, PyTorch's ``remainder``)."""
        other = host_number(other)
        if _is_bool(self) and _is_bool(other):
            _no_bool("remainder")
        refuse_complex("remainder", self, other)
        check_integer_divisor("remainder", self, other)
        return self._apply(REMAINDER, (self, other))

    def remainder_scalar(self, value: float) -> Any:
        value = check_scalar("remainder_scalar", value)
        refuse_complex("remainder_scalar", self, value)
        check_integer_divisor("remainder_scalar", self, value)
        return self._apply(REMAINDER, (self, value))

    def cross(self, other: Any, dim: int | None = None) -> Any:
        """Cross product of 3-vectors along ``dim`` (torch's default: the first dimension of
        size 3 of the operands' broadcast shape). Both operands are tensors of one dtype, as
        torch's (which does not promote)."""
        if not hasattr(other, "dtype") or not hasattr(other, "shape"):
            raise DTypeError(f"cross: other must be a tensor, got {type(other).__name__}")
        if other.dtype != self.dtype:
            raise MixedDTypeError(
                f"cross: expected both inputs of one dtype, got {self.dtype} and {other.dtype}"
            )
        if self.dtype == "bool":  # (torch's NotImplementedError)
            raise UnsupportedDTypeError("cross: not implemented for bool tensors")
        a, b = promote(self, other, "cross")
        if dim is None:
            try:
                shape = np.broadcast_shapes(a.shape, b.shape)
            except ValueError:
                shape = ()
            dim = next((d for d, n in enumerate(shape) if n == 3), None)
            if dim is None:
                raise SizeMismatchError(
                    f"cross: no dimension of size 3 in {shape_text(a.shape)} and "
                    f"{shape_text(b.shape)}; give dim"
                )
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:  # (torch's RuntimeError)
            raise SizeMismatchError(
                f"cross: shapes {shape_text(a.shape)} and {shape_text(b.shape)} do not broadcast"
            ) from None
        ndim = max(a.ndim, b.ndim)
        # the dim of the broadcast shape, counted from the end: an operand of fewer dims is
        # aligned at the end, and one without that dim has it as size 1
        from_end = normalize_dim("cross", dim, ndim) - ndim
        if any(-from_end > t.ndim or t.shape[from_end] != 3 for t in (a, b)):
            raise SizeMismatchError(
                f"cross: dimension {dim} must have size 3 in both inputs, got shapes "
                f"{shape_text(a.shape)} and {shape_text(b.shape)}"
            )
        return self._apply("cross", (a, b), (from_end,))

    def atan2(self, other: Any) -> Any:
        return self._apply(ATAN2, (self, other))

    def hypot(self, other: Any) -> Any:
        other = tensor_argument("hypot", other)
        other_float = other.is_float() if hasattr(other, "dtype") else False
        if not self.is_float() and not other_float:  # torch has no integer nor complex hypot
            raise UnsupportedDTypeError(
                f"hypot: not implemented for {self.dtype} operands (as in torch)"
            )
        return self._apply(HYPOT, (self, other))

    # -- operators ----------------------------------------------------------------------------
    def __add__(self, other):
        return self._apply(ADD, (self, other))

    def __radd__(self, other):
        return self._apply(ADD, (other, self))

    def __sub__(self, other):  # (a bool operand is refused in dispatch's slow path)
        return self._apply(SUB, (self, other))

    def __rsub__(self, other):
        return self._apply(RSUB, (other, self))

    def __mul__(self, other):
        if other.__class__ in _REPEATED_SEQUENCES:
            return _repeated(self, other)
        return self._apply(MUL, (self, other))

    def __rmul__(self, other):
        if other.__class__ in _REPEATED_SEQUENCES:
            return _repeated(self, other)
        return self._apply(MUL, (other, self))

    def __truediv__(self, other):
        return self._apply(DIV, (self, other))

    def __rtruediv__(self, other):
        if isinstance(other, SCALAR_TYPES):
            # torch's number / tensor is reciprocal(tensor) * number (two roundings), and its
            # gradient is the two ops' own: one division op differed from torch's values in a
            # third of float32 elements and from its gradients in half of them
            return self.reciprocal() * other
        return self._apply(RDIV, (other, self))

    def __pow__(self, other):
        return self.pow(other)

    def __rpow__(self, other):
        other = host_number(other)
        if _is_bool(self) and _is_bool(other):
            _no_bool("pow")
        result = integer_power(other, self)
        result = self._apply(RPOW, (other, self)) if result is None else result
        if isinstance(other, (*SCALAR_TYPES, complex)):  # torch's pow(Scalar, Tensor): row-major
            result._layout = None
        return result

    def __mod__(self, other):
        return self.remainder(other)

    def __rmod__(self, other):
        other = host_number(other)
        if _is_bool(self) and _is_bool(other):
            _no_bool("remainder")
        refuse_complex("remainder", other, self)
        check_integer_divisor("remainder", other, self)
        return self._apply(RREMAINDER, (other, self))

    def __neg__(self):
        return self.neg()

    def __pos__(self):
        if self.dtype == "bool":
            raise DTypeError("+: the unary + operator on a bool tensor is not supported (as torch)")
        return self

    def __abs__(self):
        return self.abs()

    def __eq__(self, other):  # type: ignore[override]
        if _defers_equality(other):
            return NotImplemented
        return self._apply(EQUAL, (self, other))

    def __ne__(self, other):  # type: ignore[override]
        if _defers_equality(other):
            return NotImplemented
        return self._apply(NOT_EQUAL, (self, other))

    def __lt__(self, other):
        return self._apply(LOWER, (self, other))

    def __le__(self, other):
        return self._apply(LOWER_EQUAL, (self, other))

    def __gt__(self, other):
        return self._apply(GREATER, (self, other))

    def __ge__(self, other):
        return self._apply(GREATER_EQUAL, (self, other))

    __hash__ = object.__hash__

    def __invert__(self):
        if self.dtype != "bool":
            return self.bitwise_not()  # integers (floats refused there)
        return self._apply("logical_not", (self,))

    # bool operands are logical, integer ones bitwise (SpecialMixin), as torch's operators
    def __and__(self, other):
        return self.logical_and(other) if self._bools(other) else self.bitwise_and(other)

    def __or__(self, other):
        return self.logical_or(other) if self._bools(other) else self.bitwise_or(other)

    def __xor__(self, other):
        return self.logical_xor(other) if self._bools(other) else self.bitwise_xor(other)

    def _bools(self, other: Any) -> bool:
        return self.dtype == "bool" and (
            isinstance(other, bool) or getattr(other, "dtype", None) == "bool"
        )

    __rand__ = __and__
    __ror__ = __or__
    __rxor__ = __xor__

    # -- unary --------------------------------------------------------------------------------
    def neg(self) -> Any:
        if self.dtype == "bool":
            # (torch: a RuntimeError)
            raise KernelDTypeError("neg: bool tensors cannot be negated; use ~ (logical not)")
        return self._apply("neg", (self,))

    def abs(self) -> Any:
        if self._backend.dtype(self._prim) == "bool":
            _no_bool("abs")
        return self._apply("abs", (self,))

    def exp(self) -> Any:
        return self._apply(EXP, (self,))

    def expm1(self) -> Any:
        return self._apply(EXPM1, (self,))

    def log(self) -> Any:
        return self._apply(LOG, (self,))

    def log1p(self) -> Any:
        return self._apply(LOG1P, (self,))

    def sqrt(self) -> Any:
        return self._apply(SQRT, (self,))

    def square(self) -> Any:
        if self.dtype == "bool":  # torch: bools square as int64 (pow(x, 2))
            return self.cast("int64")
        return self._apply("square", (self,))

    def recip(self) -> Any:
        """``1 / self``."""
        return self._apply(RECIP, (self,))

    def sin(self) -> Any:
        return self._apply(SIN, (self,))

    def cos(self) -> Any:
        return self._apply(COS, (self,))

    def tan(self) -> Any:
        return self._apply(TAN, (self,))

    def sinh(self) -> Any:
        return self._apply(SINH, (self,))

    def cosh(self) -> Any:
        return self._apply(COSH, (self,))

    def tanh(self) -> Any:
        return self._apply(TANH, (self,))

    def asin(self) -> Any:
        return self._apply(ASIN, (self,))

    def acos(self) -> Any:
        return self._apply(ACOS, (self,))

    def atan(self) -> Any:
        return self._apply(ATAN, (self,))

    def asinh(self) -> Any:
        return self._apply(ASINH, (self,))

    def acosh(self) -> Any:
        return self._apply(ACOSH, (self,))

    def atanh(self) -> Any:
        return self._apply(ATANH, (self,))

    def erf(self) -> Any:
        return self._apply(ERF, (self,))

    def sign(self) -> Any:
        """-1, 0 or 1 (bools: themselves; NaN: 0, as torch's ``(0 < x) - (x < 0)``); its
        gradient is zero."""
        if self.dtype == "bool":
            return self
        out = self._apply("sign", (self,))
        if self.dtype in INT_DTYPES:
            return out
        return out.mask_fill(self.isnan(), 0.0)

    def round(self, *, decimals: int | None = None) -> Any:
        """Round half to even, as PyTorch; zero gradient. ``decimals`` as torch's:
        ``round(x * 10^d) / 10^d``, or ``round(x / 10^-d) * 10^-d`` when negative.

        >>> import retrograd as rg
        >>> rg.tensor([1.2345, 2.5]).round(decimals=2).tolist()
        [1.2300000190734863, 2.5]
        """
        if self.dtype == "bool":
            _no_bool("round")
        if decimals is not None and not self.is_float():
            # (torch's round with decimals, 0 too, has no integer kernel; plain round has)
            raise DTypeError(
                f"round: decimals={decimals} needs a floating point tensor (as in torch)"
            )
        decimals = 0 if decimals is None else decimals
        if isinstance(decimals, bool) or not isinstance(decimals, int):
            raise InvalidArgumentError(f"round: decimals must be an int, got {decimals!r}")
        if decimals == 0:
            return self._apply("round", (self,))
        if self.dtype in ("float16", "bfloat16"):
            # torch's kernel scales in float32 (its opmath type): 800 * 100 is no half inf
            return self.cast("float32").round(decimals=decimals).cast(self.dtype)
        scale = 10.0 ** abs(decimals)
        if decimals > 0:
            scaled = self * scale
            return scaled._apply("round", (scaled,)) / scale
        scaled = self / scale
        return scaled._apply("round", (scaled,)) * scale

    def floor(self) -> Any:
        if self._backend.dtype(self._prim) == "bool":
            _no_bool("floor")
        return self._apply("floor", (self,))

    def ceil(self) -> Any:
        if self._backend.dtype(self._prim) == "bool":
            _no_bool("ceil")
        return self._apply("ceil", (self,))

    def trunc(self) -> Any:
        if self._backend.dtype(self._prim) == "bool":
            _no_bool("trunc")
        return self._apply("trunc", (self,))

    def clamp(self, min: Any = None, max: Any = None) -> Any:  # noqa: A002 (torch's name)
        """Limit values to ``[min, max]`` (either may be ``None``, or a tensor); the gradient
        passes inside. As in torch, ``min > max`` gives ``max`` everywhere."""
        if min is None and max is None:
            raise ShapeError("clamp: at least one of min and max must not be None")
        # complex numbers have no order: torch refuses them (one bound alone cast the tensor
        # to its real part here); a complex bound too
        min, max = (_real_bound(self, b) for b in (min, max))  # noqa: A001 (torch's names)
        for operand in (self, min, max):
            real_only("clamp", operand)
            if isinstance(operand, complex | np.complexfloating):
                raise DTypeError(f"clamp: a complex bound ({operand}) has no order")
            if isinstance(operand, int):
                check_scalar_int(operand, "clamp")
        min, max = host_number(min), host_number(max)  # noqa: A001 (torch's names)
        if (
            min is not None
            and max is not None
            and (isinstance(min, SCALAR_TYPES) != isinstance(max, SCALAR_TYPES))
        ):
            # torch has a numbers form and a tensors form: beside a number, a bound tensor
            # is read as a number when it is 0-d, and refused otherwise
            bound = max if isinstance(min, SCALAR_TYPES) else min
            if getattr(bound, "ndim", None) != 0:
                raise DTypeError(
                    f"clamp: min ({type(min).__name__}) and max ({type(max).__name__}) must "
                    "both be numbers or both tensors (a tensor beside a number must be 0-d)"
                )
            min, max = (  # noqa: A001 (torch's names)
                b if b is None or isinstance(b, SCALAR_TYPES) else b.item() for b in (min, max)
            )
        if (min is None or isinstance(min, SCALAR_TYPES)) and (
            max is None or isinstance(max, SCALAR_TYPES)
        ):
            x, low, high = self, min, max
            dtype = self._backend.dtype(self._prim)
            if dtype in FLOAT_DTYPES:  # (a float tensor, the common case, goes straight)
                for b in (min, max):  # (within the dtype's range, as torch writes them)
                    check_float_range("clamp", b, dtype)
            else:
                bounds = [b for b in (min, max) if b is not None]
                if dtype == "bool" and all(isinstance(b, bool) for b in bounds):
                    _no_bool("clamp")
                if any(isinstance(b, float) for b in bounds):
                    x = x.cast(default_float_dtype())  # torch's promotion with a float scalar
                elif dtype == "bool":
                    x = x.cast("int64")
                else:  # (torch converts integer bounds to the tensor's dtype, as it writes them)
                    low, high = (None if b is None else written_scalar("clamp", b, dtype)
                                 for b in (min, max))  # fmt: skip
            # min > max gives max everywhere, with no gradient (the kernel's order of
            # min(max(x, lo), hi) and the gradient's rule lo <= x <= hi, as torch's)
            return x._apply("clamp", (x,), (low, high))
        if self.dtype == getattr(min, "dtype", None) == getattr(max, "dtype", None) == "bool":
            _no_bool("clamp")  # (torch's two-bound kernel; one bound is maximum/minimum's)
        value = untracked(self)
        bounds = [b for b in (min, max) if isinstance(b, TensorBase)]
        target = promoted_dtype_of(self, *bounds)  # (all three at once, as torch's kernel:
        if target != value.dtype:  # a bool tensor within uint8 and int32 0-d bounds is int32)
            value = value.cast(target)
        if min is not None:
            value = bounded(value, untracked_bound(min), "lower")
        if max is not None:
            value = bounded(value, untracked_bound(max), "greater")
        if not (self.requires_grad or _tracked(min) or _tracked(max)):
            return value
        # torch's clamp_backward_min_max: x's gradient where min <= x <= max; min's where
        # x < min < max; max's where x > max or max < min (so none at x < min == max, nor NaN)
        dtype = value.dtype
        x = self.cast(dtype)
        lo = None if min is None else _bound(x, min, dtype)
        hi = None if max is None else _bound(x, max, dtype)
        inside = None
        if lo is not None:
            inside = x.greater_equal(lo)
        if hi is not None:
            below = x.lower_equal(hi)
            inside = below if inside is None else inside.logical_and(below)
        out = value.mask_where(inside, x)
        if lo is not None:
            to_min = x.lower(lo)
            if hi is not None:
                to_min = to_min.logical_and(lo.lower(hi))
            out = out.mask_where(to_min, lo)
        if hi is not None:
            to_max = x.greater(hi)
            if lo is not None:
                inverted = hi.lower(lo)
                to_max = to_max.logical_or(inverted)
                # where x is NaN the value stays NaN, the gradient still goes to max
                hi = hi.mask_where(inverted.logical_and(x.isnan()), hi + untracked(x))
            out = out.mask_where(to_max, hi)
        return out

    clip = clamp

    def clamp_min(self, min: float) -> Any:  # noqa: A002
        return self.clamp(min, None)

    def clamp_max(self, max: float) -> Any:  # noqa: A002
        return self.clamp(None, max)

    # -- activations --------------------------------------------------------------------------
    def relu(self) -> Any:
        dtype = self._backend.dtype(self._prim)
        if dtype not in FLOAT_DTYPES:  # torch keeps an integer tensor's dtype, refuses bool
            if dtype == "bool":
                raise DTypeError("relu: not implemented for bool tensors (as in torch)")
            return self.clamp_min(0)
        return self._apply(RELU, (self,))

    def gelu(self) -> Any:
        """``x * Phi(x)`` with the exact normal CDF (PyTorch's default ``gelu``)."""
        return self._apply(GELU, (self,))

    def sigmoid(self) -> Any:
        return self._apply(SIGMOID, (self,))

    def log_sigmoid(self) -> Any:
        return self._apply(LOG_SIGMOID, (self,))

    def silu(self) -> Any:
        return self._apply(SILU, (self,))

    def softplus(self, beta: float = 1.0) -> Any:
        return self._apply(SOFTPLUS, (self,), (float(beta),))

    def leaky_relu(self, slope: float = 0.01) -> Any:
        return self._apply(LEAKY_RELU, (self,), (float(slope),))

    @autocast_op("softmax")
    @scalar_dims
    def softmax(self, dim: int, dtype: Any = None) -> Any:
        """Softmax along ``dim``; ``dtype`` casts first (torch's ``x.softmax(-1,
        dtype=torch.float32)``, as attention code computes in float32)."""
        x = self if dtype is None else self.cast(dtype)
        if not x.is_float():  # torch has no integer nor complex softmax (pass dtype=); empty passes
            if x.numel():  # (torch's NotImplementedError: "softmax_kernel_impl" not implemented)
                raise UnsupportedDTypeError(
                    f"softmax: expected a floating point tensor, got {x.dtype}"
                )
            return x
        d = normalize_dim("softmax", dim, x.ndim)
        return x._apply(SOFTMAX, (x,), (d,))

    @autocast_op("log_softmax")
    @scalar_dims
    def log_softmax(self, dim: int, dtype: Any = None) -> Any:
        x = self if dtype is None else self.cast(dtype)
        if not x.is_float():
            if x.numel():  # (torch's NotImplementedError, as softmax's)
                raise UnsupportedDTypeError(
                    f"log_softmax: expected a floating point tensor, got {x.dtype}"
                )
            return x
        d = normalize_dim("log_softmax", dim, x.ndim)
        return x._apply(LOG_SOFTMAX, (x,), (d,))

    # -- comparisons --------------------------------------------------------------------------
    def equal(self, other: Any) -> Any:
        return self._apply(EQUAL, (self, other))

    def eq(self, other: Any) -> Any:
        """``self == other`` elementwise (torch's ``eq``)."""
        return self._apply(EQUAL, (self, other))

    def ne(self, other: Any) -> Any:
        return self._apply(NOT_EQUAL, (self, other))

    def gt(self, other: Any) -> Any:
        return self._apply(GREATER, (self, other))

    def ge(self, other: Any) -> Any:
        return self._apply(GREATER_EQUAL, (self, other))

    def lt(self, other: Any) -> Any:
        return self._apply(LOWER, (self, other))

    def le(self, other: Any) -> Any:
        return self._apply(LOWER_EQUAL, (self, other))

    def less(self, other: Any) -> Any:
        return self._apply(LOWER, (self, other))

    def less_equal(self, other: Any) -> Any:
        return self._apply(LOWER_EQUAL, (self, other))

    def isnan(self) -> Any:
        return self._apply("is_nan", (self,))

    def isinf(self) -> Any:
        return self._apply("is_inf", (self,))

    def isfinite(self) -> Any:
        return ~(self.is_nan() | self.is_inf())

    is_finite = isfinite  # Burn's name

    def not_equal(self, other: Any) -> Any:
        return self._apply(NOT_EQUAL, (self, other))

    def greater(self, other: Any) -> Any:
        return self._apply(GREATER, (self, other))

    def greater_equal(self, other: Any) -> Any:
        return self._apply(GREATER_EQUAL, (self, other))

    def lower(self, other: Any) -> Any:
        return self._apply(LOWER, (self, other))

    def lower_equal(self, other: Any) -> Any:
        return self._apply(LOWER_EQUAL, (self, other))

    def equal_elem(self, value: float) -> Any:
        return self.equal(check_scalar("equal_elem", value))

    def not_equal_elem(self, value: float) -> Any:
        return self.not_equal(check_scalar("not_equal_elem", value))

    def greater_elem(self, value: float) -> Any:
        return self.greater(check_scalar("greater_elem", value))

    def greater_equal_elem(self, value: float) -> Any:
        return self.greater_equal(check_scalar("greater_equal_elem", value))

    def lower_elem(self, value: float) -> Any:
        return self.lower(check_scalar("lower_elem", value))

    def lower_equal_elem(self, value: float) -> Any:
        return self.lower_equal(check_scalar("lower_equal_elem", value))

    def is_nan(self) -> Any:
        return self._apply("is_nan", (self,))

    def is_inf(self) -> Any:
        return self._apply("is_inf", (self,))

    # -- logic --------------------------------------------------------------------------------
    def logical_not(self) -> Any:
        # ``~`` of an int tensor is bitwise; logical_not is "== 0" for every dtype (torch)
        return ~self if self.dtype == "bool" else self == 0

    def logical_and(self, other: Any) -> Any:
        return self._logical(other, "logical_and")

    def logical_or(self, other: Any) -> Any:
        return self._logical(other, "logical_or")

    def logical_xor(self, other: Any) -> Any:
        """True where exactly one operand is (bool tensors: ``!=``)."""
        if isinstance(other, bool):
            other = wrap(self, self._backend.full(self.shape, other, "bool", self._device))
        a, b = _truths(self, lift(self, other, "logical_xor"))
        return a._apply(NOT_EQUAL, (a, b))

    def _logical(self, other: Any, op: str) -> Any:
        """torch's logical ops take any dtype, non-zero as true (a Python bool fills this
        tensor's shape)."""
        if isinstance(other, bool):
            other = wrap(self, self._backend.full(self.shape, other, "bool", self._device))
        a, b = _truths(self, lift(self, other, op))
        return a._apply(op, (a, b))


def _common(x: Any, a: Any, b: Any, op: str) -> tuple[Any, Any, Any]:
    """``x``, ``a`` and ``b`` cast to the dtype torch's kernel gives the three together."""
    a, b = lift(x, a, op), lift(x, b, op)
    dtype = promoted_dtype_of(x, a, b)
    return tuple(t if t.dtype == dtype else t.cast(dtype) for t in (x, a, b))
