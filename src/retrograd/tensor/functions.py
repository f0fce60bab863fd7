"""torch's function forms: ``rg.exp(x)``, ``rg.max(x, 1)``, ``rg.where(c, a, b)``,
``rg.einsum(...)``, ``rg.meshgrid(...)``...

Most are a tensor method called on the first argument (``rg.exp(x)`` is ``x.exp()``,
``rg.sum(x, dim=1)`` is ``x.sum(dim=1)``), made by :func:`_method` from the table below so
that each keeps its method's signature and meaning. The rest are written out: those whose
first argument is not the tensor the method belongs to (``where``, ``pow`` of a number), and
those with no method (``einsum``, ``meshgrid``, ``broadcast_tensors``...).

>>> import retrograd as rg
>>> rg.max(rg.tensor([[1.0, 3.0], [2.0, 0.0]]), 1).indices.tolist()
[1, 0]
>>> rg.einsum("ij,jk->ik", rg.ones(2, 3), rg.ones(3, 4)).shape
retrograd.Size([2, 4])
"""

from __future__ import annotations

import builtins
import functools
import inspect
import numbers
import string
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..backend.protocol import default_float_dtype
from ..errors import (
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    InvalidValueError,
    MixedDTypeError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
    shape_text,
    warn_at_caller,
)
from ._dispatch import (
    SCALARS,
    TensorBase,
    from_host,
    lift,
    normalize_dim,
    promote,
    result_dtype,
    scalar_dtype,
    scalar_value,
    stood_for,
    tracked_wide_float,
    wrapped_int,
    written_scalar,
)
from .autocasting import autocast_op
from .dtypes import Size
from .inplace import write_out
from .pairs import ValuesAndIndices
from .reduce import CummaxResult, CumminResult
from .shape import cat, refuse_one_tensor
from .strides import contiguous_strides
from .views import refuse_partial_overlap

#: ``rg.<name>(input, *args, **kwargs)`` is ``input.<method>(*args, **kwargs)``.
_METHODS = {
    name: name
    for name in [
        "abs",
        "add",
        "addcdiv",
        "addcmul",
        "amax",
        "amin",
        "any",
        "all",
        "argmax",
        "argmin",
        "argsort",
        "as_strided",
        "bmm",
        "ceil",
        "chunk",
        "clamp",
        "clip",
        "clone",
        "cos",
        "cosh",
        "count_nonzero",
        "cumprod",
        "cumsum",
        "detach",
        "diag",
        "diagonal",
        "diff",
        "div",
        "divide",
        "dot",
        "erf",
        "erfinv",
        "exp",
        "exp2",
        "expm1",
        "flatten",
        "flip",
        "floor",
        "floor_divide",
        "gather",
        "index_select",
        "isfinite",
        "isinf",
        "isnan",
        "lerp",
        "log",
        "log10",
        "log1p",
        "log2",
        "logical_and",
        "logical_not",
        "logical_or",
        "logical_xor",
        "logsumexp",
        "masked_fill",
        "masked_select",
        "matmul",
        "maximum",
        "mean",
        "median",
        "minimum",
        "mm",
        "movedim",
        "mul",
        "multiply",
        "mv",
        "nansum",
        "narrow",
        "ne",
        "neg",
        "negative",
        "norm",
        "numel",
        "outer",
        "permute",
        "prod",
        "reciprocal",
        "relu",
        "remainder",
        "reshape",
        "roll",
        "round",
        "rsqrt",
        "select",
        "sigmoid",
        "sign",
        "sin",
        "sinh",
        "softmax",
        "sort",
        "sqrt",
        "square",
        "squeeze",
        "std",
        "sub",
        "subtract",
        "swapaxes",
        "swapdims",
        "t",
        "take",
        "tan",
        "tanh",
        "tensor_split",
        "tile",
        "topk",
        "trace",
        "transpose",
        "tril",
        "triu",
        "true_divide",
        "trunc",
        "unbind",
        "unflatten",
        "unsqueeze",
        "var",
        "eq",
        "gt",
        "ge",
        "lt",
        "le",
        "greater",
        "greater_equal",
        "less",
        "less_equal",
        "not_equal",
        "log_softmax",
        "fmod",
        "atan2",
        "hypot",
        "acos",
        "asin",
        "atan",
        "acosh",
        "asinh",
        "atanh",
    ]
}
_METHODS.update({"arccos": "acos", "arcsin": "asin", "arctan": "atan", "fix": "trunc"})
_METHODS.update({"arccosh": "acosh", "arcsinh": "asinh", "arctanh": "atanh"})
#: the methods of the special, products and selection mixins, under the same names
_METHODS.update(
    {
        name: name
        for name in [
            "absolute",
            "addbmm",
            "addmm",
            "addmv",
            "addr",
            "aminmax",
            "arctan2",
            "baddbmm",
            "bincount",
            "bitwise_and",
            "bitwise_left_shift",
            "bitwise_not",
            "bitwise_or",
            "bitwise_right_shift",
            "bitwise_xor",
            "cholesky",
            "cholesky_inverse",
            "cholesky_solve",
            "copysign",
            "corrcoef",
            "cov",
            "deg2rad",
            "det",
            "diag_embed",
            "diagflat",
            "digamma",
            "dist",
            "dsplit",
            "erfc",
            "fmax",
            "fmin",
            "frac",
            "frexp",
            "gcd",
            "heaviside",
            "histc",
            "histogram",
            "hsplit",
            "i0",
            "igamma",
            "igammac",
            "index_put",
            "inverse",
            "is_complex",
            "is_nonzero",
            "is_same_size",
            "is_signed",
            "isneginf",
            "isposinf",
            "isreal",
            "kron",
            "kthvalue",
            "lcm",
            "ldexp",
            "lgamma",
            "logaddexp",
            "logaddexp2",
            "logcumsumexp",
            "logdet",
            "lu",
            "lu_solve",
            "mode",
            "logit",
            "matrix_exp",
            "matrix_power",
            "msort",
            "mvlgamma",
            "nan_to_num",
            "nanmean",
            "nanmedian",
            "nanquantile",
            "narrow_copy",
            "nextafter",
            "pinverse",
            "positive",
            "qr",
            "quantile",
            "rad2deg",
            "renorm",
            "rot90",
            "scatter_reduce",
            "select_scatter",
            "diagonal_scatter",
            "sgn",
            "signbit",
            "sinc",
            "slice_scatter",
            "slogdet",
            "split_with_sizes",
            "svd",
            "take_along_dim",
            "triangular_solve",
            "unique_consecutive",
            "vdot",
            "vsplit",
            "bernoulli",
        ]
    }
)


#: functions whose ``input`` torch takes as a Python number before a tensor ``other`` (its
#: argument parser makes one a tensor for the arithmetic ones; ``remainder`` and the bitwise
#: ones have a number-first overload)
_NUMBER_INPUTS = frozenset(
    ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide"]
    + ["floor_divide", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor"]
    + ["bitwise_left_shift", "bitwise_right_shift"]
)


#: the arithmetic functions torch also takes two numbers for (``torch.mul(3, 2)`` is
#: ``tensor(6)``): both become 0-d tensors of the default backend
_TWO_NUMBERS = frozenset(
    ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide"]
)


#: the functions of :data:`_NUMBER_INPUTS` whose result is a float (without ``rounding_mode``)
_TRUE_DIVISIONS = frozenset(["div", "divide", "true_divide"])
_NARROW_INT_DTYPES = frozenset(["uint8", "int8", "int16", "int32"])


#: ``rg.tensor``, for :func:`_number_input`'s two numbers: set by :mod:`.creation`, which this
#: module cannot import (creation imports the modules that import this one)
_number_tensor: Callable[[Any], Any] | None = None


def _number_input(name: str, input: Any, args: tuple, kwargs: dict) -> Any:  # noqa: A002
    """A number ``input`` as a 0-d tensor beside the tensor ``other`` (which types it as
    torch's wrapped number would: a 0-d tensor is as weak in promotion, for retrograd's
    dtypes); beside another number, for :data:`_TWO_NUMBERS`, a 0-d tensor of the default
    backend (the other number then promotes as a number beside a tensor, as torch's does)."""
    other = args[0] if args else kwargs.get("other")
    if not isinstance(other, TensorBase):
        if name in _TWO_NUMBERS and isinstance(other, SCALARS) and _number_tensor is not None:
            return _number_tensor(input)
        return lift_input(name, input)  # raises
    if isinstance(input, bool | np.bool_):
        dtype = "bool"
    elif isinstance(input, numbers.Integral):
        dtype = "int64"
        true_division = name in _TRUE_DIVISIONS and kwargs.get("rounding_mode") is None
        if other.dtype in _NARROW_INT_DTYPES and not true_division:
            # torch's wrapped number takes a narrow integer tensor's dtype, even beside a 0-d
            # one (rg.add(3, 0-d uint8) is uint8, where a 0-d int64 would make it int64),
            # wrapped into its range as the kernel casts it (rg.sub(300, uint8 3) is 41)
            dtype = other.dtype
            input = wrapped_int(input, dtype)  # noqa: A001
    elif isinstance(input, complex | np.complexfloating):
        # torch's wrapped complex number: the complex dtype of the tensor's precision
        dtype = scalar_dtype(other.dtype, input)
    elif other.is_float() or other.is_complex():
        # the tensor's own float dtype: torch's wrapped number keeps its double value until
        # the op casts it to the result's dtype (rg.add(0.3, float64) is 1.3, not 0.3's
        # float32 rounding plus 1)
        dtype = other.dtype
    else:
        dtype = default_float_dtype()
    return from_host(type(other)._result, input, dtype, other._backend, other._device)


#: the functions whose ``out=`` is written: those torch's Python signatures give one (its
#: ``aten::<name>.out`` overloads, less those its bindings leave out: ``clone``, ``flip``,
#: ``roll``, ``trace``, ``isnan``...). Real programs call them so (SNGP's ``cholesky_inverse``;
#: fairseq's beam search fills its buffers by ``gather``, ``index_select``, ``add``, ``topk``
#: with ``out=``, views among them); the tuple results (``sort``, ``topk``, ``max(dim)``...)
#: take a tuple of tensors. The others refuse it, as torch's do.
_WRITES_OUT = frozenset(
    [
        "abs",
        "absolute",
        "acos",
        "acosh",
        "add",
        "addbmm",
        "addcdiv",
        "addcmul",
        "addmm",
        "addmv",
        "addr",
        "all",
        "amax",
        "amin",
        "aminmax",
        "any",
        "arccos",
        "arccosh",
        "arcsin",
        "arcsinh",
        "arctan",
        "arctan2",
        "arctanh",
        "argmax",
        "argmin",
        "argsort",
        "asin",
        "asinh",
        "atan",
        "atan2",
        "atanh",
        "baddbmm",
        "bitwise_and",
        "bitwise_left_shift",
        "bitwise_not",
        "bitwise_or",
        "bitwise_right_shift",
        "bitwise_xor",
        "bmm",
        "ceil",
        "cholesky",
        "cholesky_inverse",
        "cholesky_solve",
        "clamp",
        "clip",
        "copysign",
        "cos",
        "cosh",
        "cumprod",
        "cumsum",
        "deg2rad",
        "diag",
        "diff",
        "digamma",
        "div",
        "divide",
        "dot",
        "eq",
        "erf",
        "erfc",
        "erfinv",
        "exp",
        "exp2",
        "expm1",
        "fix",
        "floor",
        "floor_divide",
        "fmax",
        "fmin",
        "fmod",
        "frac",
        "frexp",
        "gather",
        "gcd",
        "ge",
        "greater",
        "greater_equal",
        "gt",
        "heaviside",
        "histc",
        "hypot",
        "i0",
        "igamma",
        "igammac",
        "index_select",
        "inverse",
        "isneginf",
        "isposinf",
        "kron",
        "kthvalue",
        "lcm",
        "ldexp",
        "le",
        "lerp",
        "less",
        "less_equal",
        "lgamma",
        "log",
        "log10",
        "log1p",
        "log2",
        "log_softmax",
        "logaddexp",
        "logaddexp2",
        "logcumsumexp",
        "logical_and",
        "logical_not",
        "logical_or",
        "logical_xor",
        "logit",
        "logsumexp",
        "lt",
        "lu_solve",
        "masked_select",
        "matmul",
        "matrix_power",
        "maximum",
        "mean",
        "median",
        "minimum",
        "mm",
        "mode",
        "msort",
        "mul",
        "multiply",
        "mv",
        "mvlgamma",
        "nan_to_num",
        "nanmean",
        "nanmedian",
        "nanquantile",
        "nansum",
        "narrow_copy",
        "ne",
        "neg",
        "negative",
        "nextafter",
        "norm",
        "not_equal",
        "outer",
        "prod",
        "quantile",
        "rad2deg",
        "reciprocal",
        "remainder",
        "renorm",
        "round",
        "rsqrt",
        "sgn",
        "sigmoid",
        "sign",
        "signbit",
        "sin",
        "sinc",
        "sinh",
        "softmax",
        "sort",
        "sqrt",
        "square",
        "std",
        "sub",
        "subtract",
        "take",
        "take_along_dim",
        "tan",
        "tanh",
        "topk",
        "tril",
        "triu",
        "true_divide",
        "trunc",
        "var",
        "vdot",
        "sum",
        "max",
        "min",
        "where",
        "cat",
        "concat",
        "concatenate",
        "stack",
    ]
)
#: of those, the ones whose ``out`` must hold the result's own dtype, as torch's index and
#: matrix-product kernels and ``where`` require (the others cast their result to ``out``'s
#: dtype where that is safe, as torch's)
_SAME_DTYPE_OUT = frozenset(
    [
        "gather",
        "index_select",
        "masked_select",
        "topk",
        "sort",
        "mm",
        "bmm",
        "matmul",
        "mv",
        "dot",
        "addmm",
        "addbmm",
        "baddbmm",
        "addmv",
        "where",
    ]
)


def refuse_out(name: str) -> None:
    raise InvalidArgumentError(
        f"{name}: out= is not supported (torch's {name} takes none); assign the result"
    )


def written_out(name: str, out: Any, result: Any, same_dtype: bool = False) -> Any:
    """``result`` written into torch's ``out=`` (a tensor, or a tuple of them for a tuple
    result), returned as torch returns it: ``out`` itself (or the tuple, as its type);
    ``same_dtype``: ``out`` must have the result's dtype (as :data:`_SAME_DTYPE_OUT`)."""
    if not isinstance(result, tuple):
        return _write_out_of(name, out, result, same_dtype)
    if not isinstance(out, tuple | list) or len(out) != len(result):
        raise DTypeError(
            f"{name}: out must be a tuple of {len(result)} tensors, got {type(out).__name__}"
        )
    written = (_write_out_of(name, o, r, same_dtype) for o, r in zip(out, result))
    return type(result)(*written)


def _with_out_parameter(function: Callable[..., Any]) -> inspect.Signature | None:
    """``function``'s signature with torch's keyword ``out=None`` added (what
    ``inspect.signature`` shows of the wrapper, rather than the wrapped function's)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    parameters = list(signature.parameters.values())
    if "out" in signature.parameters:
        return signature
    out = inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None)
    at = len(parameters)
    if parameters and parameters[-1].kind is inspect.Parameter.VAR_KEYWORD:
        at -= 1
    return signature.replace(parameters=[*parameters[:at], out, *parameters[at:]])


def accepts_out(
    name: str, same_dtype: bool = False, dtype_from_out: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A function given torch's keyword ``out=`` (see :func:`written_out`);
    ``dtype_from_out``: a factory (``eye``, ``linspace``...) that, with no ``dtype`` given,
    makes its values in ``out``'s dtype, as torch's factories do."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def with_out(*args: Any, out: Any = None, **kwargs: Any) -> Any:
            if dtype_from_out and out is not None and kwargs.get("dtype") is None:
                if not hasattr(out, "dtype"):
                    raise DTypeError(f"{name}: out must be a tensor, got {type(out).__name__}")
                kwargs["dtype"] = out.dtype
            result = function(*args, **kwargs)
            return result if out is None else written_out(name, out, result, same_dtype)

        with_out.__signature__ = _with_out_parameter(function)  # type: ignore[attr-defined]
        return with_out

    return decorate


def _method(name: str, method: str) -> Callable[..., Any]:
    def function(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002 (torch's name)
        out = kwargs.pop("out", None)
        if out is not None and name not in _WRITES_OUT:
            refuse_out(name)
        if out is not None and name in _OUT_NEEDS_DIM:
            _refuse_out_without_dim(name, args, kwargs)
        if name in _NUMBER_INPUTS and isinstance(input, SCALARS):
            input = _number_input(name, input, args, kwargs)  # noqa: A001
        if out is not None:  # (torch's: an out= aliasing an input in part, x.t() for x)
            refuse_partial_overlap(name, out, input, *args, *kwargs.values())
        result = getattr(lift_input(name, input), method)(*args, **kwargs)
        return result if out is None else written_out(name, out, result)

    function.__name__ = function.__qualname__ = name
    function._tensor_method = method  # type: ignore[attr-defined] (the signature audit reads it)
    function.__doc__ = f"``rg.{name}(input, ...)``: ``input.{method}(...)`` (torch's ``{name}``)."
    return function


def _write_out_of(name: str, out: Any, result: Any, same_dtype: bool = False) -> Any:
    """``result`` written into ``out``, after the dtype check of :data:`_SAME_DTYPE_OUT`."""
    same_dtype = same_dtype or name in _SAME_DTYPE_OUT
    if same_dtype and getattr(out, "dtype", result.dtype) != result.dtype:
        raise DTypeError(
            f"{name}: expected the out tensor to have dtype {result.dtype} (the result's), "
            f"but got {out.dtype}"
        )
    return write_out(name, out, result)


@accepts_out("max")
def max(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A001, A002 (torch's name)
    """``torch.max``: the largest element; ``(values, indices)`` along a dim; or the
    elementwise maximum of two tensors."""
    return lift_input("max", input).max(*args, **kwargs)


def repeat_interleave(
    input: Any,  # noqa: A002 (torch's name)
    repeats: Any = None,
    dim: int | None = None,
    *,
    output_size: int | None = None,
) -> Any:
    """``torch.repeat_interleave``: ``input.repeat_interleave(repeats, dim)``; with ``input``
    alone, a 1-d int64 tensor of counts, each index ``i`` repeated ``input[i]`` times (the
    index of every element of a ``repeat_interleave`` by those counts)."""
    name = "repeat_interleave"
    if repeats is not None:
        return lift_input(name, input).repeat_interleave(repeats, dim, output_size=output_size)
    counts = lift_input(name, input)
    if dim is not None:
        raise InvalidArgumentError(f"{name}: dim needs repeats; got counts alone and dim={dim}")
    if counts.dtype not in ("int64", "int32"):
        raise DTypeError(
            f"{name}: counts alone must be an int64 or int32 tensor, got {counts.dtype}"
        )
    if counts.ndim != 1:
        raise ShapeError(
            f"{name}: counts alone must be a 1-d tensor, got {shape_text(counts.shape)}"
        )
    host = np.asarray(counts.tolist(), dtype=np.int64)
    if (host < 0).any():
        raise ShapeError(f"{name}: counts must be non-negative, got {host.tolist()}")
    indices = np.repeat(np.arange(host.size, dtype=np.int64), host)
    if output_size is not None and output_size != indices.size:
        raise ShapeError(
            f"{name}: output_size {output_size} does not match the counts' total {indices.size}"
        )
    # (the indices in the counts' dtype, as torch's)
    return from_host(type(counts)._result, indices, counts.dtype, counts._backend, counts._device)


def split(tensor: Any, split_size_or_sections: Any, dim: int = 0) -> tuple[Any, ...]:
    """``torch.split``: ``tensor.split(split_size_or_sections, dim)``, under torch's keyword
    names (the function's ``split_size_or_sections``; the method's is ``split_size``)."""
    return lift_input("split", tensor).split(split_size_or_sections, dim)


def cummax(input: Any, dim: int) -> Any:  # noqa: A002 (torch's name)
    """``torch.cummax``: ``(values, indices)`` of the running maximum along ``dim``, as the
    method ``x.cummax(d)`` gives them (:class:`~.pairs.ValuesAndIndices`)."""
    return CummaxResult(*lift_input("cummax", input).cummax_with_indices(dim))


def cummin(input: Any, dim: int) -> Any:  # noqa: A002 (torch's name)
    """``torch.cummin``: ``(values, indices)``, as :func:`cummax`."""
    return CumminResult(*lift_input("cummin", input).cummin_with_indices(dim))


@accepts_out("min")
def min(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A001, A002 (torch's name)
    """``torch.min``, as :func:`max`."""
    return lift_input("min", input).min(*args, **kwargs)


def sum(input: Any, *args: Any, out: Any = None, **kwargs: Any) -> Any:  # noqa: A001, A002
    """``torch.sum``: ``input.sum(dim, keepdim, dtype=)``."""
    if out is not None:
        _refuse_out_without_dim("sum", args, kwargs)
    result = lift_input("sum", input).sum(*args, **kwargs)
    return result if out is None else written_out("sum", out, result)


#: the reductions whose whole-tensor overload (no dim) has no ``out=`` in torch
_OUT_NEEDS_DIM = frozenset({"sum", "prod"})


def _refuse_out_without_dim(name: str, args: tuple, kwargs: dict) -> None:
    if not args and kwargs.get("dim") is None:
        raise InvalidArgumentError(
            f"{name}: out= needs a dim (torch's {name}(input, *, dtype=None) over the whole "
            f"tensor takes no out=); pass dim, or assign the result"
        )


def pow(input: Any, exponent: Any) -> Any:  # noqa: A001, A002 (torch's name)
    """``input ** exponent``; ``input`` may be a number when ``exponent`` is a tensor."""
    if isinstance(input, SCALARS):
        return exponent.__rpow__(input)
    return input.pow(exponent)


def float_power(input: Any, exponent: Any) -> Any:  # noqa: A002 (torch's name)
    """``input ** exponent`` in float64 (torch's ``float_power``)."""
    if not isinstance(exponent, TensorBase):
        lift_input("float_power", input)  # torch has no number-number form
    complex_operands = False
    for v in (input, exponent):  # (``any`` here is torch's)
        if (isinstance(v, TensorBase) and v.is_complex()) or isinstance(v, complex):
            complex_operands = True
    # torch's: in float64, or complex128 where an operand is complex
    wide, number = ("complex128", complex) if complex_operands else ("float64", float)
    base = input.to(wide) if isinstance(input, TensorBase) else number(input)
    power = exponent.to(wide) if isinstance(exponent, TensorBase) else number(exponent)
    return pow(base, power)


def polygamma(n: int, input: Any, *, out: Any = None) -> Any:  # noqa: A002 (torch's name)
    """``torch.polygamma(n, input)``: ``input.polygamma(n)`` (the order comes first)."""
    result = lift_input("polygamma", input).polygamma(n)
    return result if out is None else written_out("polygamma", out, result)


def lift_input(name: str, input: Any) -> Any:  # noqa: A002 (torch's name)
    if not isinstance(input, TensorBase):
        if getattr(type(input), "_sparse_coo", False):  # its method, or its refusal by name
            return input
        if isinstance(input, ValuesAndIndices):  # sort/topk/cummax/cummin: the values
            return input.values
        if hasattr(input, "__retrograd_tensor__"):  # a state dict's entry: a tensor in torch
            return stood_for(input)
        raise DTypeError(f"{name}(): argument 'input' must be a Tensor, not {type(input).__name__}")
    return input


@accepts_out("where")
def where(condition: Any, input: Any = None, other: Any = None) -> Any:  # noqa: A002 (torch's name)
    """``input`` where ``condition`` is true, else ``other`` (tensors or numbers, broadcast
    together; numbers take the tensors' dtype, as torch's); with ``condition`` alone, the
    indices of its true elements (``condition.nonzero(as_tuple=True)``)."""
    if input is None and other is None:
        return condition.nonzero(as_tuple=True)
    condition, input, other = map(stood_for, (condition, input, other))  # noqa: A001
    reference = next((v for v in (input, other, condition) if isinstance(v, TensorBase)), None)
    if reference is None:
        got = ", ".join(type(v).__name__ for v in (condition, input, other))
        raise DTypeError(
            f"where() received an invalid combination of arguments - got ({got}): "
            f"the condition must be a Tensor (and input or other one too)"
        )
    condition = lift(reference, condition, "where")
    if condition.dtype == "uint8":  # torch's legacy byte masks: nonzero is true
        condition = condition.cast("bool")
    if condition.dtype != "bool":
        raise DTypeError(f"where: condition must be a bool tensor, got {condition.dtype}")
    if isinstance(input, TensorBase) and isinstance(other, TensorBase):
        a, b = promote(input, other, "where")
    elif isinstance(input, TensorBase):
        a = input
        b = _scalar_like(a, other)
    elif isinstance(other, TensorBase):
        b = other
        a = _scalar_like(b, input)
    else:
        dtype = (
            default_float_dtype()
            if builtins.any(isinstance(v, float) for v in (input, other))
            else ("bool" if builtins.all(isinstance(v, bool) for v in (input, other)) else "int64")
        )
        a = _filled(condition, input, dtype)
        b = _filled(condition, other, dtype)
    try:
        shape = np.broadcast_shapes(condition.shape, a.shape, b.shape)
    except ValueError:  # (torch's RuntimeError, as its broadcasting ops')
        raise SizeMismatchError(
            f"where: condition {shape_text(condition.shape)}, input {shape_text(a.shape)} and "
            f"other {shape_text(b.shape)} do not broadcast"
        ) from None
    if a.dtype != b.dtype:
        target = result_dtype(a.dtype, b.dtype)
        a, b = a.cast(target), b.cast(target)
    a = a if a.shape == shape else a.expand(shape)
    b = b if b.shape == shape else b.expand(shape)
    mask = condition if condition.shape == shape else condition.expand(shape)
    return b.mask_where(mask, a)


def _scalar_like(t: Any, value: Any) -> Any:
    if not isinstance(value, SCALARS):
        return lift(t, value, "where")
    dtype = scalar_dtype(t.dtype, value)
    return _filled(t, scalar_value(written_scalar("where", value, dtype), dtype), dtype, ())


def _filled(reference: Any, value: Any, dtype: str, shape: tuple | None = None) -> Any:
    shape = reference.shape if shape is None else shape
    prim = reference._backend.full(shape, value, dtype, reference._device)
    return type(reference)._result(prim, reference._backend, reference._device)


def is_tensor(obj: Any) -> bool:
    """torch's ``is_tensor``: a dense tensor, or a sparse one (``tensor/sparse_coo.py``)."""
    return isinstance(obj, TensorBase) or getattr(type(obj), "_sparse_coo", False)


def is_floating_point(input: Any) -> bool:  # noqa: A002 (torch's name)
    return input.is_float()


def numel(input: Any) -> int:  # noqa: A002 (torch's name)
    return input.numel()


def equal(input: Any, other: Any) -> bool:  # noqa: A002 (torch's name)
    """Whether the two tensors have the same shape and elements (a Python bool); a state
    dict's entries count as the tensors they are in torch."""
    input, other = lift_input("equal", input), stood_for(other)  # noqa: A001
    if input.shape != other.shape:
        return False
    return bool(input.eq(other).all().item())


def allclose(input: Any, other: Any, rtol: float = 1e-5, atol: float = 1e-8,  # noqa: A002 (torch's name)
             equal_nan: bool = False) -> bool:  # fmt: skip
    return bool(isclose(input, other, rtol, atol, equal_nan).all().item())


def isclose(input: Any, other: Any, rtol: float = 1e-5, atol: float = 1e-8,  # noqa: A002 (torch's name)
            equal_nan: bool = False) -> Any:  # fmt: skip
    """``|input - other| <= atol + rtol * |other|`` elementwise (infinities equal only to
    themselves; NaNs equal when ``equal_nan``). As torch's, both have one dtype."""
    input = lift_input("isclose", input)  # noqa: A001 (a state dict's entry: a tensor in torch)
    other = lift(input, stood_for(other), "isclose")
    if input.dtype != other.dtype:
        raise MixedDTypeError(  # (torch's RuntimeError: "ComplexDouble did not match Double")
            f"isclose: expected both tensors of one dtype, got {input.dtype} and {other.dtype}"
        )
    if input.dtype == "bool":
        return input.eq(other)
    a, b = input, other
    error = (a - b).abs()
    # torch: a finite error within tolerance (|x - inf| <= inf * rtol is not close)
    within = error.lower_equal((b.abs() * rtol) + atol).logical_and(error.isfinite())
    close = within.logical_or(a.eq(b))
    if equal_nan:
        close = close.logical_or(a.isnan().logical_and(b.isnan()))
    return close


def broadcast_shapes(*shapes: Any) -> Size:
    # (torch's: an int is the shape of one dimension, broadcast_shapes(3, (2, 1)) is (2, 3);
    # a Size, as torch's)
    shapes = tuple((s,) if isinstance(s, numbers.Integral) else s for s in shapes)
    try:
        return Size(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        listed = ", ".join(shape_text(s) for s in shapes)
        raise SizeMismatchError(f"broadcast_shapes: shapes {listed} do not broadcast") from None


def broadcast_tensors(*tensors: Any) -> tuple[Any, ...]:
    shape = broadcast_shapes(*[t.shape for t in tensors])
    return tuple(t if t.shape == shape else t.expand(shape) for t in tensors)


def concat(tensors: Sequence[Any], dim: int = 0) -> Any:
    refuse_one_tensor("concat", tensors)
    return cat(tensors, dim)


concatenate = concat


def hstack(tensors: Sequence[Any]) -> Any:
    refuse_one_tensor("hstack", tensors)
    # torch's atleast_1d first: 0-d tensors join as one row of values
    tensors = [t.reshape((1,)) if isinstance(t, TensorBase) and t.ndim == 0 else t for t in tensors]
    if not tensors:
        raise ShapeError("hstack: expects a non-empty list of tensors")
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Any]) -> Any:
    refuse_one_tensor("vstack", tensors)
    return cat([t if t.ndim > 1 else t.reshape((1, -1)) for t in tensors], 0)


def rsub(input: Any, other: Any, alpha: Any = 1) -> Any:  # noqa: A002 (torch's name)
    """torch's ``rsub``: ``other - alpha * input`` (``alpha`` positional too, as torch's
    parser takes it: ``torch.rsub(x, 3.0, 2)``)."""
    if not isinstance(input, TensorBase):
        raise DTypeError(f"rsub(): argument 'input' must be a Tensor, not {type(input).__name__}")
    if isinstance(other, TensorBase):  # (torch's kernel: sub's, one fused multiply-add)
        return other.sub(input, alpha=alpha)
    scaled = input if alpha == 1 else input * alpha
    return other - scaled


def var_mean(input: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:  # noqa: A002 (torch's name)
    """``(var, mean)`` over the same dims (the arguments of :meth:`Tensor.var`)."""
    return input.var(*args, **kwargs), _mean_of(input, args, kwargs)


def std_mean(input: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:  # noqa: A002 (torch's name)
    # (std's gradient: 0 at zero spread, as torch's)
    return input.std(*args, **kwargs), _mean_of(input, args, kwargs)


def _mean_of(input: Any, args: tuple, kwargs: dict) -> Any:  # noqa: A002 (torch's name)
    """var_mean's mean: over var's dims (all when None), keepdim honoured either way."""
    dim = args[0] if args else kwargs.get("dim")
    if isinstance(dim, bool):  # (var's ``unbiased`` overload: every element)
        dim = None
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    if dim is not None:
        mean = input.mean(dim, keepdim)
    else:
        mean = input.mean().reshape((1,) * input.ndim) if keepdim else input.mean()
    return _as_running_mean(input, mean, dim, keepdim)


def _as_running_mean(input: Any, mean: Any, dim: Any, keepdim: bool) -> Any:  # noqa: A002
    """torch's var_mean mean is Welford's running one: an infinity makes it NaN (``inf - inf``
    or ``x - inf`` on the next step) unless it is its slice's one non-finite value and comes
    last; an infinite plain mean is NaN everywhere else."""
    if not input.is_floating_point() or not input.numel():
        return mean
    dims = (
        list(range(input.ndim))
        if dim is None
        else [d % (input.ndim or 1) for d in ((dim,) if isinstance(dim, int) else dim)]
    )
    if not input.ndim or not dims:
        return mean
    kept = [d for d in range(input.ndim) if d not in dims]
    slices = input.permute(*kept, *dims).reshape(tuple(input.shape[d] for d in kept) + (-1,))
    nonfinite = slices.isfinite().logical_not()
    alone_and_last = (nonfinite.sum(-1) == 1) & nonfinite[..., -1]
    if keepdim:
        alone_and_last = alone_and_last.reshape(mean.shape)
    return mean.masked_fill(mean.isinf() & alone_and_last.logical_not(), float("nan"))


_CDIST_MODES = (
    "use_mm_for_euclid_dist_if_necessary",
    "use_mm_for_euclid_dist",
    "donot_use_mm_for_euclid_dist",
)


@autocast_op("cdist")
def cdist(x1: Any, x2: Any, p: float = 2.0, compute_mode: str = _CDIST_MODES[0]) -> Any:
    """Pairwise ``p``-norm distances between the rows of ``x1`` ``[..., P, M]`` and ``x2``
    ``[..., R, M]``. ``compute_mode`` is checked and otherwise ignored: the distances are
    always computed from the differences (torch's matrix-product route for p = 2 is faster
    and less exact; its results agree to rounding)."""
    if compute_mode not in _CDIST_MODES:
        raise InvalidArgumentError(
            f"cdist: {compute_mode!r} is not a valid value for compute_mode (one of "
            f"{', '.join(_CDIST_MODES)})"
        )
    if not isinstance(p, numbers.Real) or isinstance(p, bool):
        raise DTypeError(f"cdist: p must be a number, got {p!r}")
    if not p >= 0:
        raise InvalidValueError(f"cdist: only supports non-negative p values, got p={p!r}")
    for name, x in (("x1", x1), ("x2", x2)):
        if not isinstance(x, TensorBase) or not x.is_floating_point():
            what = x.dtype if isinstance(x, TensorBase) else type(x).__name__
            raise UnsupportedDTypeError(
                f"cdist: only floating point tensors are supported, {name} is {what}"
            )
        if x.ndim < 2:
            raise ShapeError(f"cdist: {name} must have at least 2 dimensions, got {x.ndim}")
    if x1.dtype != x2.dtype:  # torch's kernel takes one scalar type
        raise MixedDTypeError(
            f"cdist: x1 ({x1.dtype}) and x2 ({x2.dtype}) must have the same dtype"
        )
    if x1.shape[-1] != x2.shape[-1]:
        raise SizeMismatchError(
            f"cdist: x1 {shape_text(x1.shape)} and x2 {shape_text(x2.shape)} must have the same "
            "number of columns"
        )
    rows = builtins.max(x1.shape[-2], x2.shape[-2])
    if (
        p != 2.0
        or compute_mode == _CDIST_MODES[2]
        or (compute_mode == _CDIST_MODES[0] and rows <= 25)
    ):
        # torch's _cdist_forward, whose backward has no derivative (its matrix-product route
        # for p = 2, taken above 25 rows or when asked, differentiates to any order)
        x1, x2 = once_differentiable_inputs("cdist", x1, x2)
    if p > 0 and tracked_wide_float(x1, x2):
        # one op of the op table (autodiff/ops.py) whose rule reads x1, x2 and the distances,
        # as torch's _cdist_backward: as a composite it held the [..., P, R, M] differences
        # and their squares or sizes, a hundred times torch's bytes (7 December)
        if x1._backend is not x2._backend and x2.requires_grad:  # (an inner operand first)
            x1 = lift(x2, x1, "cdist")
        return x1._apply("cdist", (x1, x2), (float(p),))
    diff = x1.unsqueeze_dim(-2) - x2.unsqueeze_dim(-3)
    if p == 0:  # torch's kernel: min(ceil(|d|), 1) summed, so a NaN gives NaN (norm: 1)
        return diff.abs().ceil().clamp(max=1.0).sum(-1)
    return row_distance(diff, p)


def row_distance(diff: Any, p: float) -> Any:
    """The ``p``-norm of ``diff`` along its last dimension, as torch's ``cdist`` and ``pdist``
    kernels differentiate it: at ``p = inf`` each of the tied largest entries takes the whole
    gradient (``norm``'s shares it among them)."""
    if p != float("inf"):
        return diff.norm(p, dim=-1)
    size = diff.abs()
    largest = size.amax(-1).detach()
    # a zero with the gradient of the tied entries' sizes (the finite ones: inf - inf is NaN)
    tied = size.detach().equal(largest.unsqueeze_dim(-1)).logical_and(size.detach().isfinite())
    return largest + (size - size.detach()).mask_fill(tied.logical_not(), 0.0).sum(-1)


def trapezoid(y: Any, x: Any = None, *, dx: float = 1.0, dim: int = -1) -> Any:
    """The trapezoidal rule along ``dim`` (sample spacing ``dx``, or the points ``x``)."""
    n = y.shape[normalize_dim("trapezoid", dim, y.ndim)]
    if not n:  # no samples: torch's zeros of y's dtype (an int64 0 for int64 samples too)
        return y.detach().sum(dim).mul(0).to(y.dtype)
    _refuse_bool("trapezoid", y, x)  # (after that: torch's order)
    _check_sample_points("trapezoid", y, x, n)
    left, right = y.narrow(dim, 0, n - 1), y.narrow(dim, 1, n - 1)
    if x is None:
        return ((left + right) * (dx / 2.0)).sum(dim)
    spacing = sample_spacing("trapezoid", y, x, dim)
    return ((left + right) * spacing * 0.5).sum(dim)


def sample_spacing(op: str, y: Any, x: Any, dim: int) -> Any:
    """The differences of the points ``x`` along the samples' ``dim`` of ``y``, shaped to
    broadcast against them as torch's ``trapezoid``: 1-d points along ``dim``; others with
    leading dims of size 1 up to ``y``'s rank, differenced along ``dim`` counted from the
    front as ``y``'s (``dim=-1`` took the last dim of points of more dims than ``y``, and
    computed where torch's shapes do not broadcast)."""
    d = normalize_dim(op, dim, y.ndim)
    if x.ndim == 1:
        return x.diff(dim=-1).reshape((-1,) + (1,) * (y.ndim - d - 1))
    if x.ndim < y.ndim:
        x = x.reshape((1,) * (y.ndim - x.ndim) + tuple(x.shape))
    return x.diff(dim=d)


def _refuse_bool(op: str, y: Any, x: Any) -> None:
    """torch's refusal of bool samples or points (a ``RuntimeError``)."""
    for t in (y, x):
        if getattr(t, "dtype", None) == "bool":
            raise UnsupportedDTypeError(f"{op}: bool samples or points are not supported")


def _check_sample_points(op: str, y: Any, x: Any, n: int) -> None:
    """torch's refusal of 1-d points ``x`` of another length than the samples (a
    ``RuntimeError``)."""
    if x is not None and getattr(x, "ndim", None) == 1 and x.shape[0] != n:
        raise SizeMismatchError(
            f"{op}: There must be one `x` value for each sample point, got {x.shape[0]} "
            f"values of x for {n} samples of y {shape_text(y.shape)}"
        )


#: torch's older name of :func:`trapezoid` (``trapz(y, x)``, ``trapz(y, dx=...)``)
trapz = trapezoid


def bucketize(input: Any, boundaries: Any, *, out_int32: bool = False, right: bool = False) -> Any:  # noqa: A002 (torch's name)
    """The index of the bucket of each value in the sorted 1-d ``boundaries``: the number of
    boundaries below it (``right=False``: ``boundaries[i-1] < v <= boundaries[i]``). A
    Python or NumPy number ``input`` gives a 0-d result (torch's ``bucketize(Scalar,
    Tensor)``)."""
    if isinstance(boundaries, TensorBase) and isinstance(input, bool | int | float | np.generic):
        input = lift(boundaries, np.asarray(input), "bucketize")  # noqa: A001 (torch's name)
    edges = lift(input, boundaries, "bucketize")
    if input.dtype == "bool" and edges.dtype == "bool" and input.numel():
        raise DTypeError(
            "bucketize: not implemented for a bool input and bool boundaries (as in torch); "
            "cast either to int64"
        )
    if edges.ndim != 1:
        raise ShapeError(f"bucketize: boundaries must be 1-d, got {shape_text(edges.shape)}")
    # in the common dtype by torch's rules for a 0-d input (searchsorted's), before the
    # unsqueeze makes it 1-d
    input, edges = promote(input, edges, "bucketize")  # noqa: A001 (torch's name)
    values = input.unsqueeze_dim(-1)
    # as searchsorted counts them: a NaN value is past every boundary
    after = edges.greater(values) if right else edges.greater_equal(values)
    indices = after.logical_not().cast("int64").sum(-1)
    return indices.cast("int32") if out_int32 else indices


def check_unique_dim(op: str, shape: tuple[int, ...], d: int) -> bool:
    """Whether the slices along ``d`` of an empty tensor are none (then the result is the
    input, with no inverse and no counts); torch's refusals of the other empty shapes."""
    if 0 not in shape:
        return False
    if shape[d] != 0:
        raise ShapeError(
            f"{op}: shape {shape_text(shape)} has a dimension of size 0 other than dim {d}, "
            f"so there are no slices along it to compare"
        )
    if shape.count(0) > 1:
        raise ShapeError(
            f"{op}: shape {shape_text(shape)} has more than one dimension of size 0, "
            f"so the slices along dim {d} have no shape to compare"
        )
    return True


def unique(input: Any, sorted: bool = True, return_inverse: bool = False,  # noqa: A002 (torch's name)
           return_counts: bool = False, dim: int | None = None) -> Any:  # fmt: skip
    """The sorted distinct values (a host read: their number is data, as in torch), with the
    inverse indices and counts when asked."""
    array = input.numpy()
    if dim is None:
        # (each NaN its own value, as torch's: NumPy's default merges them)
        values, inverse, counts = np.unique(
            array, return_inverse=True, return_counts=True, equal_nan=False
        )
        inverse = inverse.reshape(array.shape)
    else:  # the distinct slices along dim, sorted lexicographically (as torch's and NumPy's)
        d = normalize_dim("unique", dim, input.ndim)
        if check_unique_dim("unique", input.shape, d):
            values, inverse, counts = array, np.zeros(0, np.int64), np.zeros(0, np.int64)
        else:
            values, inverse, counts = np.unique(
                array, return_inverse=True, return_counts=True, axis=d
            )
            inverse = inverse.reshape(-1)
    make = type(input)._result
    backend, device = input._backend, input._device

    def host(a: np.ndarray, dtype: str) -> Any:
        return make(backend.from_data(a, dtype, device), backend, device)

    out = refused_derivative("unique", input, host(values, input.dtype))
    extra = []
    if return_inverse:
        extra.append(host(inverse.astype(np.int64), "int64"))
    if return_counts:
        extra.append(host(counts.astype(np.int64), "int64"))
    return (out, *extra) if extra else out


def refused_derivative(op: str, source: Any, out: Any) -> Any:
    """``out``, computed outside the graph from ``source``: when ``source`` requires grad, in
    the graph as torch records it (requiring grad), with a backward that raises torch's "the
    derivative for ... is not implemented" rather than leaving the path out of a gradient."""
    if not source.requires_grad:
        return out
    return source._apply("refused_derivative", (source, out), (op,))


def undefined_derivative(source: Any, out: Any) -> Any:
    """``out``, computed outside the graph from ``source``: when ``source`` requires grad, in
    the graph as torch records it (requiring grad, with a ``grad_fn``), with a backward that
    gives ``source`` no gradient (it stays ``None``, as torch's undefined gradient), neither
    raising nor adding zeros."""
    if not source.requires_grad:
        return out
    return source._apply("undefined_derivative", (source, out), ())


def once_differentiable_inputs(op: str, *inputs: Any, read: bool = True) -> tuple[Any, ...]:
    """``inputs`` as ``op`` (a composition) should take them where torch differentiates it
    only once: each that requires grad passes through a gate, so that the gradient ``op``'s
    backward gives it refuses a second derivative (an ``AutodiffError`` naming ``op``) where
    torch's says "the derivative for ... is not implemented". ``read``: torch's backward
    kernel takes the input, so that its gradient requires grad under create_graph even where
    it is a constant. Others pass as they are."""
    gate = "second_derivative_gate" if read else "second_derivative_gate_unread"
    return tuple(
        x._apply(gate, (x,), (op,)) if isinstance(x, TensorBase) and x.requires_grad else x
        for x in inputs
    )


def kernel_read_inputs(*inputs: Any, derivative: str = "zeros") -> tuple[Any, ...]:
    """``inputs`` as a composition should take them where torch's backward kernel of the op
    reads them (``nll_loss_backward(grad, self, ...)``, ``reflection_pad1d_backward``): each
    that requires grad passes through ``kernel_input_gate``, the identity, so that under
    ``create_graph`` its gradient is a function of it, as torch's is, not a constant: of zero
    derivative, or of none (``derivative="none"``: torch's double backward leaves it
    unset). Others pass as they are; nothing is held for it."""
    gate = "kernel_input_gate" if derivative == "zeros" else "kernel_input_gate_undefined"
    return tuple(
        x._apply(gate, (x,), ()) if isinstance(x, TensorBase) and x.requires_grad else x
        for x in inputs
    )


def kernel_bias(bias: Any, *others: Any) -> Any:
    """``bias`` as a composition should take it where torch computes its gradient in one
    backward kernel with ``others`` (eval-mode ``batch_norm``'s input and weight): under
    ``create_graph`` its gradient requires grad where one of them does, as torch's, with no
    derivative in them. As it is where it does not require grad."""
    if not (isinstance(bias, TensorBase) and bias.requires_grad):
        return bias
    for other in others:
        if isinstance(other, TensorBase) and other.requires_grad:
            bias = bias._apply("kernel_bias_gate", (bias, other), ())
    return bias


def meshgrid(*tensors: Any, indexing: str | None = None) -> tuple[Any, ...]:
    """Grids from 1-d tensors: with ``indexing="ij"`` (torch's default, which without the
    argument warns as torch's) the output's dims follow the inputs; ``"xy"`` swaps the first
    two (NumPy's). Each grid is a view."""
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        tensors = tuple(tensors[0])
    if indexing is None:
        warn_at_caller(
            "torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
            "argument."
        )
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise InvalidValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        if t.ndim > 1:
            raise SizeMismatchError(
                f"meshgrid: expects 0-d or 1-d tensors, got {shape_text(t.shape)}"
            )
    if len({t.dtype for t in tensors}) > 1:  # (torch's RuntimeError; cartesian_prod's too)
        listed = ", ".join(str(t.dtype) for t in tensors)
        raise MixedDTypeError(f"meshgrid: expects tensors of one dtype, got {listed}")
    flat = [t.reshape((-1,)) for t in tensors]
    swap = indexing == "xy" and len(flat) >= 2
    if swap:
        flat[0], flat[1] = flat[1], flat[0]
    shape = tuple(t.shape[0] for t in flat)
    grids = []
    for i, t in enumerate(flat):
        view = t.reshape(tuple(-1 if j == i else 1 for j in range(len(flat))))
        grids.append(view.expand(shape))
    if swap:  # torch: the grids of the swapped inputs, handed back in the inputs' order
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


@autocast_op("einsum")
def einsum(equation: str, *operands: Any) -> Any:
    """Einstein summation (``torch.einsum``): the operands contracted pairwise, left to
    right, each contraction one batched ``matmul``; ``...`` broadcasts, a letter repeated in
    one operand takes its diagonal, and a letter in one operand only is summed first."""
    from .einsum import contract

    if isinstance(equation, TensorBase):  # torch's sublist form: op1, [0, 1], op2, [1, 2]...
        equation, operands = _sublist_equation((equation, *operands))
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    return contract(equation, list(operands))


def _sublist_equation(arguments: tuple) -> tuple[str, tuple]:
    """torch's ``einsum(op1, sublist1, op2, sublist2, ..., [sublist_out])`` as an equation
    and its operands: each subscript an int in [0, 52) (a letter) or ``...``."""
    letters = string.ascii_lowercase + string.ascii_uppercase

    def subscripts(sublist: Any) -> str:
        if not isinstance(sublist, list | tuple):
            raise DTypeError(
                f"einsum: expected a sublist of ints after each operand, got "
                f"{type(sublist).__name__}"
            )
        text = ""
        for item in sublist:
            if item is Ellipsis:
                text += "..."
            elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
                if not 0 <= item < len(letters):
                    raise InvalidArgumentError(
                        f"einsum: subscript {item} is out of range (expected 0 to 51)"
                    )
                text += letters[item]
            else:
                raise DTypeError(f"einsum: subscripts must be ints or ..., got {item!r}")
        return text

    pairs = len(arguments) // 2
    operands = arguments[: 2 * pairs : 2]
    inputs = ",".join(subscripts(sublist) for sublist in arguments[1 : 2 * pairs : 2])
    output = "->" + subscripts(arguments[-1]) if len(arguments) % 2 else ""
    return inputs + output, operands


#: torch's functions that are tensor methods here but were missing as functions (the
#: fuzzer against torch met ``rg.hypot``, ``rg.scatter_add``...), in-place forms included
_METHODS.update(
    {
        name: name
        for name in [
            "abs_",
            "acos_",
            "acosh_",
            "addmv_",
            "arccos_",
            "arccosh_",
            "arcsin_",
            "arcsinh_",
            "arctan_",
            "arctanh_",
            "asin_",
            "asinh_",
            "atan_",
            "atanh_",
            "ceil_",
            "clamp_",
            "clamp_max",
            "clamp_max_",
            "clamp_min",
            "clamp_min_",
            "clip_",
            "cos_",
            "cosh_",
            "deg2rad_",
            "detach_",
            "erf_",
            "erfc_",
            "exp2_",
            "exp_",
            "expm1_",
            "fill_",
            "fix_",
            "floor_",
            "frac_",
            "gcd_",
            "ger",
            "hypot",
            "i0_",
            "index_put_",
            "lcm_",
            "ldexp_",
            "log10_",
            "log1p_",
            "log2_",
            "log_",
            "logit_",
            "moveaxis",
            "nan_to_num_",
            "neg_",
            "negative_",
            "put",
            "rad2deg_",
            "ravel",
            "reciprocal_",
            "relu_",
            "round_",
            "rsqrt_",
            "scatter",
            "scatter_add",
            "sigmoid_",
            "sin_",
            "sinc_",
            "sinh_",
            "sqrt_",
            "square_",
            "tan_",
            "tanh_",
            "trunc_",
            "xlogy_",
            "zero_",
        ]
    }
)


def conj(input: Any) -> Any:  # noqa: A002 (torch's name)
    """The complex conjugate (``input`` itself for a real tensor, as torch returns it)."""
    return _real_tensor("conj", input).conj()


def real(input: Any) -> Any:  # noqa: A002 (torch's name)
    """The real part (``input`` itself for a real tensor, as torch returns it)."""
    return _real_tensor("real", input).real


def imag(input: Any) -> Any:  # noqa: A002 (torch's name)
    return _real_tensor("imag", input).imag


def is_conj(input: Any) -> bool:  # noqa: A002 (torch's name)
    return _real_tensor("is_conj", input).is_conj()


def is_neg(input: Any) -> bool:  # noqa: A002 (torch's name)
    return _real_tensor("is_neg", input).is_neg()


def resolve_conj(input: Any) -> Any:  # noqa: A002 (torch's name)
    return _real_tensor("resolve_conj", input).resolve_conj()


def resolve_neg(input: Any) -> Any:  # noqa: A002 (torch's name)
    return _real_tensor("resolve_neg", input)


conj_physical = conj


def angle(input: Any) -> Any:  # noqa: A002 (torch's name)
    """The argument of each element (``atan2(imag, real)``), as torch's ``angle``."""
    return _real_tensor("angle", input).angle()


def _real_tensor(op: str, input: Any) -> Any:  # noqa: A002 (torch's name)
    if not isinstance(input, TensorBase):
        raise DTypeError(f"{op}(): argument 'input' must be Tensor, not {type(input).__name__}")
    return input


def typename(obj: Any) -> str:
    """torch's ``typename``: a tensor's type name (``x.type()``), else the object's module and
    qualified name (its class's for an instance; a builtin's name alone).

    >>> import retrograd as rg
    >>> rg.typename(3), rg.typename(rg.nn.Linear(1, 1))
    ('int', 'retrograd.nn.modules.linear.Linear')
    """
    if isinstance(obj, TensorBase):
        return obj.type()
    if hasattr(obj, "__qualname__"):
        module, name = getattr(obj, "__module__", "") or "", obj.__qualname__
    else:
        module, name = type(obj).__module__ or "", type(obj).__qualname__
    return name if module in ("", "builtins") else f"{module}.{name}"


def unravel_index(indices: Any, shape: Any) -> tuple[Any, ...]:
    """torch's ``unravel_index``: the coordinates in a tensor of ``shape`` of each flat index
    in ``indices`` (an integer tensor), one int64 tensor per dimension of ``shape``. As
    torch's, an index outside ``[0, prod(shape))`` wraps (each coordinate is taken modulo its
    size, after a floor division), so ``-1`` is the last element.

    >>> import retrograd as rg
    >>> [t.tolist() for t in rg.unravel_index(rg.tensor([5, 1]), (2, 3))]
    [[1, 0], [2, 1]]
    """
    if not isinstance(indices, TensorBase):
        raise DTypeError(
            f"unravel_index: expected 'indices' to be a tensor, got {type(indices).__name__}"
        )
    if indices.dtype == "bool" or indices.is_floating_point():
        raise DTypeError(
            f"unravel_index: expected 'indices' to be integer dtype, but got {indices.dtype}"
        )
    sizes = (shape,) if isinstance(shape, numbers.Integral) else shape
    if not isinstance(sizes, Sequence) or not builtins.all(
        isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in sizes
    ):
        raise DTypeError(
            f"unravel_index: expected 'shape' to be an int or a sequence of ints, got {shape!r}"
        )
    sizes = tuple(int(n) for n in sizes)
    if builtins.any(n < 0 for n in sizes):
        raise InvalidArgumentError(
            f"unravel_index: 'shape' cannot have negative values, but got {sizes}"
        )
    strides = contiguous_strides(sizes)
    if strides and strides[0] > np.iinfo(np.int64).max:
        raise InvalidArgumentError(
            f"unravel_index: the strides of 'shape' {sizes} pass the largest int64"
        )
    if 0 in sizes and indices.numel():
        raise IndexOutOfRangeError(
            f"unravel_index: no index is in a tensor of shape {sizes} (a dimension of size 0)"
        )
    flat = indices.cast("int64")
    return tuple((flat // stride) % size for stride, size in zip(strides, sizes))


for _name, _target in _METHODS.items():
    globals()[_name] = _method(_name, _target)
del _name, _target


def _refusing_out_dtype(name: str) -> Callable[..., Any]:
    """torch's ``mm``/``bmm`` with their ``out_dtype`` parameter, which torch runs on CUDA
    only (its CPU kernels refuse every value): accepted as None alone."""
    product = _method(name, name)

    def function(input: Any, mat2: Any, out_dtype: Any = None, *, out: Any = None) -> Any:  # noqa: A002
        if out_dtype is not None:
            raise InvalidArgumentError(
                f"{name}: out_dtype={out_dtype!r} is not supported (torch computes it on CUDA "
                f"only); cast the product instead: {name}(input, mat2).to(dtype)"
            )
        return product(input, mat2, out=out)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"torch's ``{name}``: ``input.{name}(mat2)`` (``out_dtype`` None only)."
    return function


mm = _refusing_out_dtype("mm")
bmm = _refusing_out_dtype("bmm")

__all__ = sorted(
    {
        *_METHODS,
        "allclose",
        "angle",
        "rsub",
        "broadcast_shapes",
        "broadcast_tensors",
        "cdist",
        "concat",
        "concatenate",
        "conj",
        "conj_physical",
        "cummax",
        "cummin",
        "einsum",
        "equal",
        "float_power",
        "hstack",
        "imag",
        "is_conj",
        "is_floating_point",
        "is_neg",
        "is_tensor",
        "isclose",
        "max",
        "meshgrid",
        "min",
        "numel",
        "polygamma",
        "real",
        "repeat_interleave",
        "resolve_conj",
        "resolve_neg",
        "split",
        "pow",
        "std_mean",
        "sum",
        "trapezoid",
        "trapz",
        "typename",
        "bucketize",
        "unique",
        "unravel_index",
        "var_mean",
        "vstack",
        "where",
    }
)
