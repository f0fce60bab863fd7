"""torch's further elementwise methods: special functions (``lgamma``, ``digamma``,
``polygamma``, ``mvlgamma``, ``i0``, ``erfc``, ``xlogy``, ``logit``, ``sinc``), the C library's
(``fmod``, ``copysign``, ``nextafter``, ``ldexp``, ``fmax``/``fmin``), NaN handling
(``nan_to_num``), integer ops (``gcd``, ``lcm``, the bitwise operations), predicates
(``isclose``, ``signbit``, ``isposinf``...) and the aliases (``arccos``, ``absolute``...).

:class:`SpecialMixin` needs one primitive from the class it is mixed into: ``_apply(op,
inputs, params=())`` (:func:`retrograd.tensor._dispatch.apply`); it also calls the methods of
:class:`~retrograd.tensor.elementwise.ElementwiseMixin`. An op with a kernel of its own
(:mod:`retrograd.backend.protocol_math`) is one ``_apply``; the others are compositions of
differentiable ops that compute what torch's kernel computes, so their gradients are the
parts' (NaN-free where a branch is masked: the masked operand is replaced before the
arithmetic, not after).

>>> import retrograd as rg
>>> rg.tensor([1.0, 0.5]).lgamma().tolist()
[0.0, 0.5723649263381958]
>>> (rg.tensor([12, 10]) & 6).tolist(), (rg.tensor([1, 2]) << 2).tolist()
([4, 2], [4, 8])
"""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend.protocol import default_float_dtype
from ..backend.sizes import check_allocation
from ..errors import DTypeError, InvalidArgumentError, UnsupportedDTypeError
from ._dispatch import (
    COMMON,
    FLOAT_DTYPES,
    GRAD_DTYPES,
    INT_DTYPES,
    SCALARS,
    TensorBase,
    TensorOp,
    host_number,
    lift,
    promote,
    real_only,
    scalar_dtype,
    scalar_value,
    tensor_argument,
    untracked,
    wrap,
)
from .compositions import check_integer_divisor, refuse_complex
from .functions import allclose, float_power, isclose, where

# The largest power of two each float dtype holds: 2**step is finite
_LDEXP_STEP = {"float16": 15, "bfloat16": 127, "float32": 127, "float64": 1023}

__all__ = ["GAMMAINC", "GAMMAINCC", "FrexpResult", "SpecialMixin", "float_operands", "operand"]

FrexpResult = namedtuple("frexp", ["mantissa", "exponent"])

LGAMMA, DIGAMMA, POLYGAMMA, I0, ERFC = (
    TensorOp(name, floats=True) for name in ("lgamma", "digamma", "polygamma", "i0", "erfc")
)
FMOD = TensorOp("fmod", promote=COMMON)
#: torch's ``igamma``/``igammac`` (``torch.special.gammainc``/``gammaincc``): operands in hand
GAMMAINC = TensorOp("igamma", kernel="gammainc")
GAMMAINCC = TensorOp("igammac", kernel="gammaincc")
XLOGY = TensorOp("xlogy")
_INTEGERS = (*INT_DTYPES, "bool")
#: torch's ``deg2rad``/``rad2deg`` factors (``M_PI / 180`` and ``180 / M_PI`` as doubles)
_DEG2RAD = math.pi / 180.0
_RAD2DEG = 180.0 / math.pi
_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def operand(t: Any, value: Any, op: str) -> Any:
    """``value`` as a tensor to combine with ``t``: a Python number as a 0-d tensor of the
    dtype ``t op value`` takes (torch's rule for a number), anything else lifted."""
    if isinstance(value, SCALARS):
        dtype = scalar_dtype(t.dtype, value)
        return wrap(t, t._backend.full((), scalar_value(value, dtype), dtype, t._device))
    return lift(t, value, op)


def _float_operand(t: Any, value: Any, op: str) -> Any:
    """:func:`operand` for an op computed in float: an integer number beside an integer
    tensor goes straight to the default float dtype, unwrapped (torch's ``xlogy(u8, 300)``
    takes 300, not uint8's 44)."""
    if isinstance(value, SCALARS) and scalar_dtype(t.dtype, value) not in FLOAT_DTYPES:
        return wrap(t, t._backend.full((), float(value), default_float_dtype(), t._device))
    return operand(t, value, op)


def _floats(op: str, a: Any, b: Any) -> tuple[Any, Any]:
    """``a`` and ``b`` promoted to one float dtype (ints as the default one)."""
    return promote(a, _float_operand(a, b, op), op, True)


def float_kernel_operands(op: str, a: Any, b: Any) -> tuple[Any, Any]:
    """:func:`float_operands` for the functions torch has float kernels only for: two integer
    or bool operands are refused (torch promotes them among themselves, then finds no
    kernel), one float operand is enough."""
    x, y = (a, operand(a, b, op)) if isinstance(a, TensorBase) else (operand(b, a, op), b)
    if x.dtype in _INTEGERS and y.dtype in _INTEGERS:
        raise DTypeError(
            f"{op}: not implemented for {x.dtype} and {y.dtype} operands (as in torch); cast "
            "either to a floating dtype"
        )
    return float_operands(op, a, b)


def float_operands(op: str, a: Any, b: Any) -> tuple[Any, Any]:
    """The two operands of a binary float function taking a tensor and a tensor or a number,
    either side (torch's ``Tensor, Number`` and ``Number, Tensor`` overloads), promoted to one
    float dtype."""
    if isinstance(a, TensorBase):
        return _floats(op, a, b)
    if isinstance(b, TensorBase):
        return promote(_float_operand(b, a, op), b, op, True)
    raise DTypeError(
        f"{op}(): expected a tensor for 'input' or 'other', got {type(a).__name__} and "
        f"{type(b).__name__}"
    )


def xlogy(input: Any, other: Any, *, out: Any = None) -> Any:  # noqa: A002 (torch's name)
    """``torch.xlogy``: ``input * log(other)``, 0 where ``input`` is 0; either argument may
    be a number.

    >>> import retrograd as rg
    >>> xlogy(0.0, rg.tensor([0.0, 2.0])).tolist()
    [0.0, 0.0]
    """
    if out is not None:
        raise InvalidArgumentError("xlogy: out= is not supported (tensors are values here)")
    x, y = float_operands("xlogy", input, other)
    return x.xlogy(y)


class SpecialMixin:
    """Special functions, C-library functions, bit operations, predicates and aliases; needs
    ``_apply`` (see the module docstring)."""

    __slots__ = ()
    _apply: Callable[..., Any]  # the one primitive: retrograd.tensor._dispatch.apply
    dtype: str
    shape: tuple[int, ...]
    _backend: Any
    _device: Any

    # -- special functions --------------------------------------------------------------------
    def lgamma(self) -> Any:
        """``log |Gamma(x)|``; its gradient is ``digamma``."""
        return self._apply(LGAMMA, (self,))

    def digamma(self) -> Any:
        """``d/dx lgamma(x)``; its gradient is ``polygamma(1, x)``."""
        return self._apply(DIGAMMA, (self,))

    def polygamma(self, n: int) -> Any:
        """The ``n``-th derivative of ``digamma`` (torch's method order: ``x.polygamma(n)``;
        the function is ``rg.polygamma(n, x)``)."""
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise InvalidArgumentError(f"polygamma: n must be a non-negative int, got {n!r}")
        return self._apply(POLYGAMMA, (self,), (int(n),))

    def mvlgamma(self, p: int) -> Any:
        """The log of the multivariate gamma function of dimension ``p``:
        ``p(p-1)/4 log(pi) + sum_{i<p} lgamma(x - i/2)``; at or below ``(p-1)/2`` it is
        what that sum gives (``inf`` at the poles), as torch 2.13's (which no longer refuses
        such elements)."""
        if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p < 2**63:
            raise InvalidArgumentError(f"mvlgamma: p must be an int64 >= 1, got {p!r}")
        x = real_only("mvlgamma", self)
        if x.dtype == "bool":
            raise DTypeError("mvlgamma: the input tensor may not be a boolean tensor (as in torch)")
        x = x if x.dtype in FLOAT_DTYPES else x.cast(default_float_dtype())
        log_pi_term = p * (p - 1) / 4.0 * math.log(math.pi)
        if not x.numel():  # (no p-long row of shifts for no elements: p may be huge)
            return x * 0.0 + log_pi_term
        # torch's form: one [..., p] row of shifted copies, not p ops (a large p never ends)
        check_allocation("mvlgamma", (*x.shape, p), x.dtype, f"p = {p}")
        shifts = x.new_tensor(np.arange(p, dtype=np.float64) / 2.0, dtype=x.dtype)
        return (x.unsqueeze(-1) - shifts).lgamma().sum(-1) + log_pi_term

    def i0(self) -> Any:
        """The modified Bessel function of the first kind, order 0; gradient ``i1``."""
        return self._apply(I0, (self,))

    def erfc(self) -> Any:
        """``1 - erf(x)``, accurate in the tail (a kernel, not the subtraction)."""
        return self._apply(ERFC, (self,))

    def igamma(self, other: Any) -> Any:
        """The regularized lower incomplete gamma function ``P(self, other)`` (torch's
        ``igamma``, ``rg.special.gammainc``); differentiable in ``other`` only, as torch's:
        a gradient for ``self`` raises ``rg.AutodiffError``."""
        other = tensor_argument("igamma", other)
        return self._apply(GAMMAINC, float_kernel_operands("igamma", self, other))

    def igammac(self, other: Any) -> Any:
        """``1 - igamma(self, other)``, accurate where ``igamma`` is near 1."""
        other = tensor_argument("igammac", other)
        return self._apply(GAMMAINCC, float_kernel_operands("igammac", self, other))

    def xlogy(self, other: Any) -> Any:
        """``self * log(other)``, 0 where ``self`` is 0 (unless ``other`` is NaN), as torch's.
        The gradient in ``self`` is ``xlogy(grad, other)`` (0 for a zero ``grad``), 0 where
        ``self`` is 0 and ``other`` is not positive (torch's); in ``other`` it is torch's
        ``self / other``, NaN where both are 0."""
        return self._apply(XLOGY, _floats("xlogy", self, other))

    def logaddexp(self, other: Any) -> Any:
        """``log(exp(self) + exp(other))`` without overflow: ``max + log1p(exp(-|a - b|))``,
        the equal infinities kept, as torch's kernel."""
        return _logaddexp("logaddexp", self, other)

    def logaddexp2(self, other: Any) -> Any:
        """``log2(2**self + 2**other)``, as :meth:`logaddexp`."""
        return _logaddexp("logaddexp2", self, other, math.log(2.0))

    def logit(self, eps: float | None = None) -> Any:
        """``log(z / (1 - z))`` with ``z`` the input clamped to ``[eps, 1 - eps]`` when ``eps``
        is given (the gradient is then 0 outside, as torch's)."""
        z = real_only("logit", self)
        z = z if z.dtype in FLOAT_DTYPES else z.cast(default_float_dtype())
        if eps is not None and (
            isinstance(eps, str | bytes | complex) or not hasattr(eps, "__float__")
        ):
            raise DTypeError(f"logit(): argument 'eps' must be float, not {type(eps).__name__}")
        if z.dtype in ("float32", "float64"):
            # one op: the backend's logit kernel (torch's on the torch backend), its rule
            # torch's logit_backward, reading z as torch saves it (autodiff/ops.py)
            return z._apply("logit", (z,), (None if eps is None else float(eps),))
        # -0 + 0 is +0: torch's gradient at -0 is +inf (its kernel's dy * inf at x == 0),
        # where 1 / z would give -inf
        z = z + 0.0
        if eps is not None:
            # (log z - log1p(-z), not log(z / (1 - z)): at eps = 0 the quotient's gradient is
            # NaN at 0 and 1, torch's 1 / (z (1 - z)) infinite)
            # torch's kernel, x < eps ? eps : (x > 1 - eps ? 1 - eps : x), not clamp: eps
            # wins for eps > 1/2; its backward (0 outside [eps, 1 - eps]) passes a NaN through
            low, high = float(eps), 1.0 - float(eps)
            clamped = z.mask_fill(untracked(z).greater_elem(high), high)
            clamped = clamped.mask_fill(untracked(z).lower_elem(low), low)
            return clamped.log() - (-clamped).log1p()
        # log(z) - log1p(-z): torch's gradient 1 / (z (1 - z)), infinite (not NaN) at 0
        # and 1; outside [0, 1] the value and torch's gradient are NaN
        out = z.log() - (-z).log1p()
        outside = z.lower_elem(0.0).logical_or(z.greater_elem(1.0))
        nan_there = (untracked(z) * 0.0).mask_fill(outside, math.nan)  # 0 inside: no NaN leaks
        return out.mask_where(outside, z * nan_there)

    def sinc(self) -> Any:
        """``sin(pi x) / (pi x)``, 1 at 0 (gradient 0 there, and where ``x * x`` underflows
        to 0, as torch's: its formula divides by ``pi x^2``; the second derivative at 0 is
        the true ``-pi^2 / 3``, where torch's is NaN)."""
        x = self if self.dtype in GRAD_DTYPES else self.cast(default_float_dtype())
        if x.dtype in ("float16", "bfloat16"):
            # torch's kernel works in float32 and rounds once: pi x in float16 made sinc(1)
            # 3e-4 (not -0) and sinc(60000) NaN (not 0)
            return x.cast("float32").sinc().cast(x.dtype)
        if x.dtype in ("float32", "float64"):
            # one op of the op table (autodiff/ops.py), the backend's sinc kernel (torch's on
            # the torch backend), whose rule reads x, as torch's; the composite below held
            # four arrays of x's size (7 December)
            return x._apply("sinc", (x,))
        zero = untracked(x).square().equal_elem(0.0)
        product = x.mask_fill(zero, 1.0) * math.pi
        out = (product.sin() / product).mask_fill(zero, 1.0)
        # at 0 itself, the series 1 - (pi x)^2 / 6: value 1 and first derivative 0 (torch's),
        # and the true second derivative -pi^2/3 (torch's double backward is NaN there, a 0 *
        # inf of its masked division; a constant 1 made it 0)
        series = 1.0 - (x * math.pi).square() / 6.0
        return out.mask_where(untracked(x).equal_elem(0.0), series)

    # -- NaN and infinities -------------------------------------------------------------------
    def nan_to_num(
        self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
    ) -> Any:
        """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (by default the
        dtype's largest and lowest finite values); the gradient is 0 where replaced. Integer
        tensors come back unchanged."""
        for name, value in (("nan", nan), ("posinf", posinf), ("neginf", neginf)):
            if isinstance(value, complex | np.complexfloating):  # (torch's parser: a float)
                raise DTypeError(f"nan_to_num(): argument '{name}' must be float, not complex")
        if self.is_complex():  # each part replaced, as torch's
            real = self.real.nan_to_num(nan, posinf, neginf)
            return self._apply("complex", (real, self.imag.nan_to_num(nan, posinf, neginf)))
        if self.dtype not in FLOAT_DTYPES:
            return self
        largest = _FLOAT_MAX.get(self.dtype) or float(np.finfo(self.dtype).max)

        def fill(value: float) -> float:
            # in the tensor's precision first, as torch's kernel casts it: 1e300 is inf in
            # float32 (not an overflow error from the fill)
            if self.dtype not in _FLOAT_MAX:  # (the half types: the backend's own rounding)
                with np.errstate(over="ignore"):
                    return float(np.asarray(value, np.float64).astype(self.dtype))
            return float(value)

        out = self.mask_fill(self.isnan(), fill(nan))
        out = out.mask_fill(self.isposinf(), largest if posinf is None else fill(posinf))
        return out.mask_fill(self.isneginf(), -largest if neginf is None else fill(neginf))

    def isposinf(self) -> Any:
        return self.isinf().logical_and(self.greater_elem(0))

    def isneginf(self) -> Any:
        return self.isinf().logical_and(self.lower_elem(0))

    def isreal(self) -> Any:
        """Where the imaginary part is 0 (all true for a real tensor)."""
        if self.is_complex():
            return self.imag == 0
        return wrap(self, self._backend.full(self.shape, True, "bool", self._device))

    def signbit(self) -> Any:
        """Whether the sign bit is set (true for ``-0.0`` and negative NaNs)."""
        if self.dtype == "bool":
            return self.logical_and(False)
        if self.dtype in INT_DTYPES:
            return self.lower_elem(0)
        return self._apply("signbit", (self,))

    def isclose(
        self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
    ) -> Any:
        """``|self - other| <= atol + rtol * |other|`` elementwise (``rg.isclose``)."""
        return isclose(self, other, rtol, atol, equal_nan)

    def allclose(
        self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
    ) -> bool:
        """Whether :meth:`isclose` holds everywhere (a Python bool)."""
        return allclose(self, other, rtol, atol, equal_nan)

    # -- the C library ------------------------------------------------------------------------
    def fmod(self, other: Any) -> Any:
        """C's ``fmod``: the remainder with the sign of the dividend (``remainder`` takes the
        divisor's); integer division by zero is an error."""
        other = host_number(other)
        if self.dtype == "bool" and (
            isinstance(other, bool) or getattr(other, "dtype", None) == "bool"
        ):
            raise UnsupportedDTypeError("fmod: not implemented for bool tensors (as in torch)")
        refuse_complex("fmod", self, other)
        check_integer_divisor("fmod", self, other)
        return self._apply(FMOD, (self, operand(self, other, "fmod")))

    def frac(self) -> Any:
        """``x - trunc(x)`` (float tensors, as torch's)."""
        if self.dtype not in FLOAT_DTYPES:  # (torch's "frac_cpu" not implemented for 'Long')
            raise UnsupportedDTypeError(f"frac: expected a floating point tensor, got {self.dtype}")
        return self - self.trunc()

    def fix(self) -> Any:
        """:meth:`trunc` under NumPy's name."""
        return self.trunc()

    def copysign(self, other: Any) -> Any:
        """``|self|`` with the sign of ``other`` (its sign bit: ``-0.0`` counts as negative);
        float. The gradient reaches ``self`` only: torch's ``g * out / self``, 0 where
        ``self`` is 0 and NaN where it is infinite."""
        x, y = _floats("copysign", self, other)
        if x.requires_grad or y.requires_grad:
            # the op table's, for torch's rule (a tracked ``other`` tracks the result too,
            # with a zero gradient, as torch's)
            return x._apply("copysign", (x, y))
        magnitude = x.abs()  # (a tensor of an inner backend too, which has no such kernel)
        return magnitude.mask_where(y.signbit(), magnitude.neg())

    def heaviside(self, values: Any) -> Any:
        """0 where ``self < 0``, ``values`` where it is 0, 1 where it is positive (one dtype
        for both, as torch requires). Not differentiable, as in torch: the result of an
        input that requires grad requires grad too, and backward through it raises
        (torch's "the derivative for heaviside is not implemented")."""
        values = operand(self, tensor_argument("heaviside", values, "values"), "heaviside")
        if values.dtype != self.dtype:
            raise DTypeError(
                f"heaviside: input and values must have one dtype, got {self.dtype} and "
                f"{values.dtype}"
            )
        x, v = untracked(self), untracked(values)
        step = x.greater_elem(0).cast(x.dtype)
        zero = x.equal_elem(0)
        out = where(zero, v, step)
        for source in (self, values):
            if source.requires_grad:
                return source._apply("refused_derivative", (source, out), ("heaviside",))
        return out

    def sgn(self) -> Any:
        """:meth:`sign`; of a complex tensor, ``z / |z|`` (0 at 0), as torch's."""
        if not self.is_complex():
            return self.sign()
        magnitude = self.abs()
        zero = magnitude == 0
        # part by part, as torch's kernel: a complex quotient by a subnormal magnitude scales
        # by its reciprocal, which overflows (sgn(1e-310j) would be nan + inf j, not 1j)
        divisor = magnitude.masked_fill(zero, 1.0)
        unit = self._apply("complex", (self.real / divisor, self.imag / divisor))
        return unit.masked_fill(zero, 0.0)

    def deg2rad(self) -> Any:
        x = real_only("deg2rad", self)  # (torch refuses complex tensors too)
        return (x if x.dtype in FLOAT_DTYPES else x.cast(default_float_dtype())) * _DEG2RAD

    def rad2deg(self) -> Any:
        x = real_only("rad2deg", self)
        return (x if x.dtype in FLOAT_DTYPES else x.cast(default_float_dtype())) * _RAD2DEG

    def float_power(self, exponent: Any) -> Any:
        """``self ** exponent`` in float64."""
        return float_power(self, exponent)

    def fmax(self, other: Any) -> Any:
        """The larger, ignoring NaN (NaN only where both are); at a tie the gradient goes to
        ``self``, as torch's."""
        return _nan_ignoring(self, tensor_argument("fmax", other), "fmax", "greater_equal")

    def fmin(self, other: Any) -> Any:
        return _nan_ignoring(self, tensor_argument("fmin", other), "fmin", "lower_equal")

    def ldexp(self, other: Any) -> Any:
        """``self * 2**other``, as torch computes it: a float ``self`` with an int64 ``other``
        exactly, in ``self``'s dtype (torch's ``std::ldexp`` kernel); otherwise ``2**other`` in
        float and a product that promotes, so a 0-d float64 ``other`` makes an int or bool
        ``self``'s result float64. The gradient is ``grad * 2**other`` (torch's takes the power
        in int64, which is 0 for a negative exponent)."""
        exponent = operand(self, tensor_argument("ldexp", other), "ldexp")
        if self.dtype in FLOAT_DTYPES and exponent.dtype == "bool":
            # (torch's float kernel takes no bool exponent; an integer mantissa's promotes)
            raise DTypeError(
                f"ldexp: not implemented for a {self.dtype} input with a bool exponent (as in "
                "torch); cast the exponent to int64"
            )
        if self.dtype in FLOAT_DTYPES and exponent.dtype in INT_DTYPES:
            exponent = exponent.cast("int64")  # (uint8 and int32 exponents too, as torch's)
            # torch's std::ldexp kernel: in the input's own dtype, whole (2**1000 times a
            # float64 is finite, not float32's inf). Three powers of two, each finite, span
            # every exponent that can change the result (0 stays 0, never 0 * inf). The
            # kernel's exponent is a C int: int64's wrap into int32 first (2**62 is 0 there)
            top = _LDEXP_STEP[self.dtype]
            exponent = (exponent + 2**31).remainder(2**32) - 2**31
            exponent = exponent.clamp(-3 * top, 3 * top)
            out = self
            for _ in range(2):
                step = exponent.clamp(-top, top)
                out = out * step.cast(self.dtype).__rpow__(2.0)
                exponent = exponent - step
            return out * exponent.cast(self.dtype).__rpow__(2.0)
        return self * exponent.__rpow__(2.0)

    def frexp(self) -> Any:
        """``(mantissa, exponent)`` with ``self = mantissa * 2**exponent`` and ``0.5 <=
        |mantissa| < 1`` (zeros, infinities and NaN: themselves and exponent 0), as torch's
        ``frexp``; the exponent is int32, as torch's, the mantissa's gradient ``grad /
        2**exponent``, as torch's, except where ``2**exponent`` overflows the dtype (``|x|``
        in the dtype's top binade): torch's is 0 there, this one the true ``grad * 2**-e``."""
        if self.dtype not in FLOAT_DTYPES:
            raise DTypeError(f"frexp: expected a floating point tensor, got {self.dtype}")
        exponent = self._apply("frexp_exponent", (self,))
        # times 2**-e in two exact steps: a float32 subnormal's 2**149 would overflow in one
        shift = -exponent
        half = shift // 2
        mantissa = self * 2.0 ** half.cast(self.dtype) * 2.0 ** (shift - half).cast(self.dtype)
        return FrexpResult(mantissa, exponent.cast("int32"))

    def nextafter(self, other: Any) -> Any:
        """The next float after ``self`` towards ``other`` (float tensors); the gradient
        passes to ``self`` where it steps (0 where it equals ``other``) and is 0 for
        ``other``, as torch's."""
        other = tensor_argument("nextafter", other)
        x, y = promote(self, operand(self, other, "nextafter"), "nextafter")
        if x.dtype not in FLOAT_DTYPES:
            raise DTypeError(f"nextafter: expected floating point tensors, got {x.dtype}")
        return self._apply("nextafter", (x, y))

    # -- integers and bits --------------------------------------------------------------------
    def gcd(self, other: Any) -> Any:
        """The greatest common divisor (integer tensors)."""
        other = tensor_argument("gcd", other)
        return self._apply("gcd", _integers("gcd", self, other, INT_DTYPES))

    def lcm(self, other: Any) -> Any:
        other = tensor_argument("lcm", other)
        return self._apply("lcm", _integers("lcm", self, other, INT_DTYPES))

    def bitwise_and(self, other: Any) -> Any:
        """``&`` of integer or bool tensors (a number takes the tensor's dtype)."""
        return self._apply("bitwise_and", _integers("bitwise_and", self, other))

    def bitwise_or(self, other: Any) -> Any:
        return self._apply("bitwise_or", _integers("bitwise_or", self, other))

    def bitwise_xor(self, other: Any) -> Any:
        return self._apply("bitwise_xor", _integers("bitwise_xor", self, other))

    def bitwise_not(self) -> Any:
        """``~``: bitwise not of an int64 tensor, logical not of a bool one."""
        _integers("bitwise_not", self, None)
        return self._apply("bitwise_not", (self,))

    def bitwise_left_shift(self, other: Any) -> Any:
        """``self << other`` (int64; a bool operand counts as 0/1); shifts of 64 or more
        give 0."""
        return self._apply("bitwise_left_shift", _shift_operands("bitwise_left_shift", self, other))

    def bitwise_right_shift(self, other: Any) -> Any:
        """Arithmetic ``self >> other`` (int64)."""
        operands = _shift_operands("bitwise_right_shift", self, other)
        return self._apply("bitwise_right_shift", operands)

    def __lshift__(self, other):
        return self.bitwise_left_shift(other)

    def __rshift__(self, other):
        return self.bitwise_right_shift(other)

    def __rlshift__(self, other):
        return operand(self, other, "bitwise_left_shift").bitwise_left_shift(self)

    def __rrshift__(self, other):
        return operand(self, other, "bitwise_right_shift").bitwise_right_shift(self)

    # -- aliases (torch's and NumPy's names) --------------------------------------------------
    def absolute(self) -> Any:
        return self.abs()

    def negative(self) -> Any:
        return self.neg()

    def positive(self) -> Any:
        """The tensor itself (torch refuses bool tensors)."""
        if self.dtype == "bool":
            raise DTypeError("positive: bool tensors have no unary +; use the tensor itself")
        return self

    def arccos(self) -> Any:
        return self.acos()

    def arcsin(self) -> Any:
        return self.asin()

    def arctan(self) -> Any:
        return self.atan()

    def arccosh(self) -> Any:
        return self.acosh()

    def arcsinh(self) -> Any:
        return self.asinh()

    def arctanh(self) -> Any:
        return self.atanh()

    def arctan2(self, other: Any) -> Any:
        return self.atan2(other)


def _logaddexp(op: str, a: Any, b: Any, scale: float = 1.0) -> Any:
    x, y = float_kernel_operands(op, a, tensor_argument(op, b))
    if x.dtype in ("float16", "bfloat16"):
        # torch's kernel works in float32 and rounds once (in bfloat16 the softplus of a tiny
        # gap, rounded term by term, made logaddexp2(0, 6e-8) 0.996)
        wide = _logaddexp(op, x.cast("float32"), y.cast("float32"), scale)
        return wide.cast(x.dtype)
    if x.is_complex() and scale == 1.0:
        # torch's complex kernel: the operand of the larger real part plus log1p(exp(the
        # other - it)); a composition, so its gradient is torch's g / conj(1 + exp(y - x))
        first = x.real.greater_equal(y.real)
        top, other = y.mask_where(first, x), x.mask_where(first, y)
        out = top + (other - top).exp().log1p()
        # equal infinite real parts (inf - inf would make NaN): torch's kernel gives the
        # second operand at -inf, and computes log(exp(x) + exp(y)) at +inf
        same_infinity = x.real.isinf().logical_and(x.real.eq(y.real))
        out = out.mask_where(same_infinity.logical_and(x.real.gt(0)), _log_of_infinite_sum(x, y))
        out = out.mask_where(same_infinity.logical_and(x.real.lt(0)), other)
        # a NaN part anywhere: NaN in both parts, the kernel's first check
        return out.mask_fill(x.isnan().logical_or(y.isnan()), complex(math.nan, math.nan))
    if x.dtype in ("float32", "float64"):
        # one op of the op table (autodiff/ops.py) whose rules read x and y, torch's (its
        # composition held four arrays of x's size, 7 December); untracked too: the backend's
        # kernel (torch's on the torch backend, to the bit; the protocol's composition else)
        return x._apply("logaddexp", (x, y), (float(scale),))
    # (a complex logaddexp2: torch's kernel has none, "logaddexp2_cpu" not implemented)
    raise UnsupportedDTypeError(f"{op}: not implemented for {x.dtype} tensors (as in torch)")


def _log_of_infinite_sum(x: Any, y: Any) -> Any:
    """C's complex ``log(exp(x) + exp(y))`` (torch's kernel's) where both real parts are
    +inf: ``exp(inf + i t)`` is ``inf * cis(t)`` (``inf + 0i`` at ``t == 0``, NaN parts for a
    NaN or infinite ``t``), and the log of a sum with an infinite part is ``inf + i atan2``.
    Read untracked: the gradient there is not a number either way."""
    from .complexes import complex as complex_of_parts

    def exp_parts(t: Any) -> tuple[Any, Any]:
        angle = untracked(t).imag
        infinite = angle.abs().add(math.inf)
        real = (angle.cos() * infinite).mask_where(angle.isinf(), infinite)
        return real, (angle.sin() * infinite).mask_where(angle.eq(0), angle)

    (real_x, imag_x), (real_y, imag_y) = exp_parts(x), exp_parts(y)
    real, imag = real_x + real_y, imag_x + imag_y
    magnitude = real.isinf().logical_or(imag.isinf())
    log_magnitude = (
        real.abs().mask_fill(magnitude, math.inf).mask_fill(magnitude.logical_not(), math.nan)
    )
    return complex_of_parts(log_magnitude, imag.atan2(real))


def _nan_ignoring(a: Any, b: Any, op: str, keeps_first: str) -> Any:
    """torch's ``fmax``/``fmin``: ``a`` where it wins, ties or ``b`` is NaN; else ``b``."""
    x, y = promote(a, operand(a, b, op), op)
    if x.dtype == "bool":
        return x.logical_or(y) if op == "fmax" else x.logical_and(y)
    first = getattr(x, keeps_first)(y).logical_or(y.isnan())
    return y.mask_where(first, x)


def _integers(op: str, a: Any, b: Any, dtypes: tuple[str, ...] = _INTEGERS) -> tuple[Any, ...]:
    """The operands of an integer op, promoted to one dtype and checked to be one of
    ``dtypes`` (floats are refused, as torch refuses them)."""
    if b is None:
        operands: tuple[Any, ...] = (a,)
    else:
        operands = promote(a, operand(a, b, op), op)
    dtype = operands[0].dtype
    if dtype not in dtypes:
        allowed = " or ".join(dtypes)
        # (torch's kernels have none: "bitwise_and_cpu" not implemented for 'Float')
        raise UnsupportedDTypeError(f"{op}: expected {allowed} tensors, got {dtype}")
    return operands


def _shift_operands(op: str, a: Any, b: Any) -> tuple[Any, Any]:
    x, y = promote(a, operand(a, b, op), op)
    # (two bools promote to bool, which torch's shift kernels refuse; a bool beside an int
    # promotes to int64)
    if x.dtype not in INT_DTYPES:
        raise UnsupportedDTypeError(f"{op}: expected integer tensors, got {x.dtype}")
    return x, y
