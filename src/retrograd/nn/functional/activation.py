"""Activation functions: thin, differentiable wrappers over tensor methods."""

from __future__ import annotations

import functools
import math
import numbers
import struct
from collections.abc import Callable
from typing import Any

from ...errors import (
    AutodiffError,
    DTypeError,
    InvalidArgumentError,
    KernelDTypeError,
    RetrogradError,
    ShapeError,
    UnsupportedDTypeError,
    shape_text,
)
from ...tensor import Tensor, random
from ...tensor.autocasting import autocast_op
from ...tensor.internal import normalize_dim, tracked_wide_float
from ._common import (
    _HALF_DTYPES,
    _float_input,
    _float_pair,
    _real,
)


def _rounded_once(f: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``f`` computed in float32 and rounded once for a float16 or bfloat16 input, as torch's
    kernels compute these activations (composed in 16 bits, each step rounding, ``F.elu``,
    ``F.softplus``, ``F.mish``... missed torch's value in 6 to 44% of normal draws); the
    gradient is the float32 rule's rounded once, as torch's 16-bit backward kernels'."""

    @functools.wraps(f)
    def wrapped(x: Any, *args: Any, **kwargs: Any) -> Tensor:
        if isinstance(x, Tensor) and x.dtype in _HALF_DTYPES:
            return f(x.cast("float32"), *args, **kwargs).cast(x.dtype)
        return f(x, *args, **kwargs)

    return wrapped


def relu(x: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)``; the gradient at 0 is 0. ``inplace`` is accepted; the result is a new
    tensor (as for the modules' ``inplace``: API.md section 8)."""
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``, Phi the standard normal CDF; with ``approximate="tanh"``, PyTorch's
    ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``."""
    if approximate == "none":
        return _float_input("gelu", x).gelu()
    if approximate != "tanh":
        raise InvalidArgumentError(
            f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}"
        )
    return _gelu_tanh(_float_input("gelu", x))


@_rounded_once
def _gelu_tanh(x: Tensor) -> Tensor:
    # one op whose rule reads x (as torch's gelu_backward): composed as
    # ``x * 0.5 * ((x + x * x * x * 0.044715) * sqrt(2 / pi)).tanh() + 1)``, it held five
    # arrays of x's size for backward (5x torch's bytes), 6 December
    return x._apply("gelu_tanh", (x,))


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def log_sigmoid(x: Tensor) -> Tensor:
    """``log(sigmoid(x))``, computed without overflow."""
    return _float_input("log_sigmoid", x).log_sigmoid()


def silu(x: Tensor, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)``; ``inplace`` is accepted as :func:`relu`'s (torch's signature:
    ``F.silu(x, inplace=True)``)."""
    if isinstance(x, Tensor) and x.is_complex():
        # torch's complex kernel, x / (1 + exp(-x)), which it computes outside a graph only
        out = x * x.sigmoid()
        if out.requires_grad:
            raise AutodiffError(
                f"silu: does not support automatic differentiation for outputs with complex "
                f"dtype (as torch's), got a {x.dtype} {shape_text(x.shape)} input that requires "
                "grad (write x * x.sigmoid(), whose gradient is recorded)"
            )
        return out
    return _float_input("silu", x).silu()


@_rounded_once
def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, computed without overflow; where ``beta * x`` is
    above ``threshold``, ``x`` itself (torch's linear tail, gradient 1)."""
    x = _float_input("softplus", x)
    if threshold is None:
        return x.softplus(beta)
    # one op of torch's kernels' formulas, log1p(exp(x * beta)) / beta and x above the
    # threshold, whose rule is torch's softplus_backward from x: composed of the exact softplus
    # and a mask, its values missed torch's in 5-10% of the elements and its gradients (g
    # times the sigmoid) in 35-50% on the torch backend (7 December)
    return x._apply("softplus_threshold", (x,), (float(beta), float(threshold)))


def leaky_relu(x: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    negative_slope = _real("leaky_relu", "negative_slope", negative_slope)
    return _float_input("leaky_relu", x).leaky_relu(negative_slope)


def softmax(x: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, shifted by the max for stability; ``dtype``
    casts first (torch's arguments)."""
    if dtype is not None:
        x = x.cast(dtype)
    return x.softmax(_softmax_dim("softmax", x, dim))


def log_softmax(
    x: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None
) -> Tensor:
    if dtype is not None:
        x = x.cast(dtype)
    return x.log_softmax(_softmax_dim("log_softmax", x, dim))


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)``: torch's ``hardtanh(x, 0, 6)``, with its gradient."""
    return hardtanh(x, 0.0, 6.0)


def hardtanh(
    x: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """``x`` clamped to ``[min_val, max_val]``; the gradient passes strictly inside."""
    if min_val > max_val:
        raise InvalidArgumentError(
            f"hardtanh: min_val {min_val} cannot be greater than max_val {max_val}"
        )
    if x.dtype == "bool":
        raise DTypeError("hardtanh: bool inputs are not supported (as in torch)")
    if x.dtype == "uint8" and (min_val < 0 or max_val < 0):  # (torch's RuntimeError)
        raise KernelDTypeError(
            f"hardtanh: cannot do hardtanh on an unsigned type with negative limits, got a "
            f"uint8 {shape_text(x.shape)} input with min_val {min_val}, max_val {max_val}"
        )
    if not x.is_float():  # torch keeps an integer tensor's dtype
        return x.clamp(int(min_val), int(max_val))
    # one op whose rule reads its output (torch's hardtanh_backward: no gradient where
    # x <= min_val or x >= max_val, NaN passes), not clamp's: clamp's gradient passes on the
    # bounds. (Written as the input where the bounds stop nothing, else a copy of the clamped
    # output, it held a second full-size array per ReLU6 under a memory budget, which backs
    # up untracked inputs: MobileNetV2 at a budget of 0.5x held 0.69x, 6 December.)
    return x._apply("hardtanh", (x,), (float(min_val), float(max_val)))


@_rounded_once
def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    """``relu6(x + 3) / 6`` (torch's gradient: 1/6 strictly inside ``(-3, 3)``)."""
    x = _float_input("hardsigmoid", x)
    # one op whose rule reads x (torch's hardsigmoid_backward, which has no derivative: a
    # second one through it raises). Composed of a clamp with a mask beside it and detached
    # copies, it held 1.25x its input's bytes, and 1.9x NoCheckpointing's peak under a budget
    # of 0.5x (an untracked full-size copy backed up), 6 December.
    return x._apply("hardsigmoid", (x,))


@_rounded_once
def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6``, with torch's gradient (``x / 3 + 0.5`` inside ``(-3, 3)``)."""
    x = _float_input("hardswish", x)
    return x._apply("hardswish", (x,))


@_rounded_once
def elu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""
    x = _float_input("elu", x)
    if not isinstance(alpha, numbers.Real):  # (a tensor, or no number: its errors)
        return x.mask_where(x.less_equal(0.0), _negative_branch(x, alpha, 1.0))
    # one op whose rule reads x (as torch's elu_backward); composed of masks and
    # _negative_branch, it held two arrays beside x (2x torch's bytes), 6 December
    return x._apply("elu", (x,), (float(alpha), 1.0, 1.0, 1.0))


def _negative_branch(x: Tensor, scale: float, input_scale: float) -> Tensor:
    """``scale * (exp(x * input_scale) - 1)`` where ``x < 0``; ``x * scale * input_scale``
    at 0, torch's derivatives there: the first is the exponential's, the second 0 (torch's
    double backward masks by ``x < 0``). Elsewhere the exponential sees 0, so that exp(inf)
    puts no NaN into the gradient."""
    safe = x.mask_fill(x.less(0.0).logical_not(), 0.0)
    if input_scale != 1.0:
        safe = safe * input_scale
    zero = x.equal(0.0)
    # (x enters the slope at 0 masked to 0 elsewhere: a NaN scale times the zero gradient the
    # other positions send this branch would put NaN where torch's derivative is 1)
    at_zero = x.mask_fill(zero.logical_not(), 0.0) * (scale * input_scale)
    return (safe.expm1() * scale).mask_where(zero, at_zero)


@_rounded_once
def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    x = _float_input("celu", x)
    if isinstance(alpha, complex):  # torch: "cannot be converted to type double"
        raise DTypeError(f"celu: alpha must be a real number, got {alpha!r}")
    if alpha == 0:  # torch's refusal: x / alpha has no limit to take
        raise InvalidArgumentError("celu: alpha cannot be 0 for CELU")
    # torch's derivative (elu_backward, and its own derivative) scales by 1 / alpha with alpha
    # rounded to float32 (``1.0 / alpha.toFloat()``) while the value divides by alpha itself:
    # elu's op takes the two input scales apart (its rule reads x alone, torch's elu_backward)
    inverse = 1.0 / alpha  # (first, as before: an alpha that is no number fails here)
    torch_scale = 1.0 / struct.unpack("f", struct.pack("f", alpha))[0]
    if isinstance(alpha, numbers.Real):
        return x._apply("elu", (x,), (float(alpha), inverse, 1.0, torch_scale))
    branch = _negative_branch(x, alpha, inverse)
    if x.requires_grad and torch_scale != inverse:
        slope = _negative_branch(x, alpha, torch_scale)
        branch = branch.detach() + (slope - slope.detach())
    return x.mask_where(x.less_equal(0.0), branch)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@_rounded_once
def selu(x: Tensor, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with torch's constants: torch's elu kernel with its scale
    (``expm1(x) * (alpha * scale)``, ``x * scale``), whose rule is torch's elu_backward from
    x. (As elu's value times the scale, rounded twice, 15% of the values and 13% of the
    gradients were an ulp off torch's, 7 December.)"""
    x = _float_input("selu", x)
    return x._apply("elu", (x,), (_SELU_ALPHA, 1.0, _SELU_SCALE, 1.0))


@autocast_op("prelu")
def prelu(x: Tensor, weight: Tensor) -> Tensor:
    """``x`` where positive, ``weight * x`` elsewhere; ``weight`` has one value, or one per
    channel (dimension 1)."""
    x, weight = _float_pair("prelu", _float_input("prelu", x), weight, "weight", one_dtype=True)
    if weight.numel() != 1 and (x.ndim < 2 or weight.numel() != x.shape[1]):
        raise InvalidArgumentError(
            f"prelu: weight has {weight.numel()} values; expected 1 or one per channel "
            f"({x.shape[1] if x.ndim > 1 else 1})"
        )
    slope = (
        weight.reshape(())
        if weight.numel() == 1
        else weight.reshape((x.shape[1],) + (1,) * (x.ndim - 2))
    )
    # one op with backward kernels of its own (the op table's ``prelu``): torch's derivatives
    # of its backward differ from its first derivative at x == 0
    return x._apply("prelu", (x, slope))


@_rounded_once
def mish(x: Tensor, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``."""
    x = _float_input("mish", x)
    # one op whose rule reads x (as torch's mish_backward): the composition held tanh's
    # output beside x (2x torch's bytes), 6 December
    return x._apply("mish", (x,))


def softsign(x: Tensor) -> Tensor:
    if x.dtype == "bool":
        raise DTypeError("softsign: not implemented for bool tensors (as in torch)")
    if tracked_wide_float(x):
        # one op of the op table (autodiff/ops.py) whose rule reads x: the composition held
        # its denominator and quotient beside x (7 December)
        return x._apply("softsign", (x,))
    return x / (x.abs() + 1.0)


def tanhshrink(x: Tensor) -> Tensor:
    return x - x.tanh()


def threshold(x: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where above ``threshold``, else ``value``."""
    if x.dtype == "bool":
        raise DTypeError("threshold: not implemented for bool tensors (as in torch)")
    if tracked_wide_float(x):
        # one op whose rule reads the output (x where value > threshold), torch's
        # threshold_backward: the composition held a bool mask a budget could not recompute
        # (7 December)
        op = "threshold" if value <= threshold else "threshold_of_x"
        return x._apply(op, (x,), (float(threshold), float(value)))
    # torch writes ``value`` in the input's dtype (an integer tensor stays one)
    return x.mask_fill(x.less_equal(threshold), value if x.is_float() else int(value))


def thresholded_relu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """Burn's (and ONNX's) ``thresholded_relu``: ``x`` where ``x > alpha``, else 0."""
    return _float_input("thresholded_relu", x).thresholded_relu(alpha)


def hard_sigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    """Burn's (and ONNX's) ``hard_sigmoid``: ``clamp(alpha * x + beta, 0, 1)``."""
    return _float_input("hard_sigmoid", x).hard_sigmoid(alpha, beta)


def quiet_softmax(x: Tensor, dim: int) -> Tensor:
    """Burn's ``quiet_softmax``: ``exp(x_i) / (1 + sum_j exp(x_j))`` along ``dim``."""
    return _float_input("quiet_softmax", x).quiet_softmax(dim)


@_rounded_once
def glu(x: Tensor, dim: int = -1) -> Tensor:
    """``a * sigmoid(b)``, ``a`` and ``b`` the halves of ``x`` along ``dim``."""
    if not x.is_floating_point():  # (torch's "glu_cpu" has no int, bool or complex kernel)
        raise UnsupportedDTypeError(f"glu: not implemented for {x.dtype} tensors")
    size = x.shape[normalize_dim("glu", dim, x.ndim)]
    if size % 2:
        raise ShapeError(
            f"glu: halving dimension {dim} must be even, but it has size {size} (input "
            f"{shape_text(x.shape)})"
        )
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


def softmin(x: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return softmax(-x, dim, dtype=dtype)


def logsigmoid(x: Tensor) -> Tensor:
    """torch's name for :func:`log_sigmoid`."""
    return log_sigmoid(x)


def _softmax_dim(fn: str, x: Tensor, dim: int | None) -> int:
    """torch's implicit dim (deprecated there): 0 for 0-, 1- and 3-d inputs, else 1."""
    if dim is not None:
        return dim
    return 0 if x.ndim in (0, 1, 3) else 1


# -- shrinkage, randomized leaky ReLU, Gumbel softmax ------------------------------------------
def hardshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, else 0 (torch's gradient: 0 on ``[-lambd, lambd]``)."""
    x = _float_input("hardshrink", x)
    if tracked_wide_float(x) and lambd >= 0:
        # one op whose rule reads the output (0 exactly where the gradient stops), torch's
        # hardshrink_backward: the composition held a bool mask beside the fill's (7 December)
        return x._apply("hardshrink", (x,), (float(lambd),))
    return x.mask_fill(x.abs().lower_equal(lambd), 0.0)


@_rounded_once
def softshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, 0 between."""
    x = _float_input("softshrink", x)
    if not 0 <= lambd < math.inf:  # NaN and infinity too, as torch's range check
        raise InvalidArgumentError(
            f"softshrink: lambd must be non-negative and finite, got {lambd}"
        )
    if tracked_wide_float(x):
        # one op whose rule reads the output (0 exactly where the gradient stops), torch's
        # softshrink_backward: the composition held two bool masks (7 December)
        return x._apply("softshrink", (x,), (float(lambd),))
    shrunk = (x - lambd).mask_where(x.less(-lambd), x + lambd)
    return shrunk.mask_fill(x.abs().lower_equal(lambd), 0.0)


def rrelu(
    x: Tensor,
    lower: float = 1.0 / 8,
    upper: float = 1.0 / 3,
    training: bool = False,
    inplace: bool = False,
) -> Tensor:
    """Randomized leaky ReLU: in training, each element at or below 0 is scaled by its own
    slope drawn from U(``lower``, ``upper``) (from ``rg.seed``'s stream); in evaluation, the
    leaky ReLU of the mean slope ``(lower + upper) / 2``. ``inplace`` as :func:`relu`."""
    x = _float_input("rrelu", x)
    if not lower <= upper:
        raise InvalidArgumentError(
            f"rrelu: lower bound ({lower}) must not exceed the upper bound ({upper})"
        )
    if not training:
        return x.leaky_relu((lower + upper) / 2.0)
    slopes = random(x.shape, "uniform", x.dtype, x.backend, x.device) * (upper - lower) + lower
    return x.mask_where(x.less_equal(0.0), x * slopes)


def gumbel_softmax(
    logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1
) -> Tensor:
    """A sample of the Gumbel-softmax distribution: ``softmax((logits + g) / tau)``, ``g``
    standard Gumbel noise (from ``rg.seed``'s stream); with ``hard``, the one-hot of its
    argmax, whose gradient is the soft sample's (the straight-through estimator). ``eps`` is
    unused, as in torch."""
    logits = _float_input("gumbel_softmax", logits)
    uniform = random(logits.shape, "uniform", logits.dtype, logits.backend, logits.device)
    gumbels = -(-(1.0 - uniform).log()).log()  # -log(Exp(1)), Exp(1) = -log(1 - U)
    return _gumbel_softmax(logits, gumbels, tau, hard, dim)


def _gumbel_softmax(logits: Tensor, gumbels: Tensor, tau: float, hard: bool, dim: int) -> Tensor:
    """:func:`gumbel_softmax` for given noise ``gumbels``."""
    soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return soft
    index = soft.argmax(dim, keepdim=True)
    one_hot = soft.new_zeros(soft.shape).scatter(dim, index, 1.0)
    return one_hot - soft.detach() + soft


# -- torch's in-place forms: the input tensor object takes the result (API.md section 10) --------
def _into(op: str, x: Tensor, out: Tensor) -> Tensor:
    """``x`` made to hold ``out`` (computed from it), torch's errors named after ``op``."""
    try:
        return x.copy_(out)
    except RetrogradError as error:
        raise type(error)(str(error).replace("copy_", op, 1)) from None


def relu_(x: Tensor) -> Tensor:
    return _into("relu_", x, relu(x))


def elu_(x: Tensor, alpha: float = 1.0) -> Tensor:
    return _into("elu_", x, elu(x, alpha))


def selu_(x: Tensor) -> Tensor:
    return _into("selu_", x, selu(x))


def celu_(x: Tensor, alpha: float = 1.0) -> Tensor:
    return _into("celu_", x, celu(x, alpha))


def leaky_relu_(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return _into("leaky_relu_", x, leaky_relu(x, negative_slope))


def hardtanh_(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return _into("hardtanh_", x, hardtanh(x, min_val, max_val))


def threshold_(x: Tensor, threshold: float, value: float) -> Tensor:
    return _into("threshold_", x, x.mask_fill(x.less_equal(threshold), value))


def rrelu_(
    x: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False
) -> Tensor:
    return _into("rrelu_", x, rrelu(x, lower, upper, training))
