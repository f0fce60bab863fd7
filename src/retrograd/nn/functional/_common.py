"""Argument handling shared by the functional layers: integer tuples, float inputs,
batching, channel biases."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import (
    ArgumentTypeError,
    DTypeError,
    KernelDTypeError,
    MixedDTypeError,
    ResultCastError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
)
from ...tensor import Tensor
from ...tensor.internal import (
    FLOAT_DTYPES,
    INT_DTYPES,
    int_arguments,
    lift,
    promote,
    shape_text,
    stood_for,
    untracked,
    wrap,
)

IntOrTuple = int | Sequence[int]


# -- argument handling -----------------------------------------------------------------------------
def _ints(fn: str, name: str, value: Any, count: int, minimum: int) -> tuple[int, ...]:
    """``value`` (an int, or one int per spatial dimension) as a tuple of ``count`` ints."""
    value = int_arguments(fn, value, name)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        values = (int(value),) * count
    else:
        # a float, a bool, None, a str or a tuple holding one: the wrong type, torch's
        # TypeError ("must be tuple of ints"); a tuple of ints of the wrong length, or a
        # value below the bound, its RuntimeError: a SizeMismatchError here
        wrong_type = ArgumentTypeError(
            f"{fn}: {name} must be an int or a tuple of ints, got {value!r}"
        )
        if isinstance(value, str):
            raise wrong_type
        try:
            values = tuple(value)
        except TypeError:
            raise wrong_type from None
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
            raise wrong_type
        if len(values) == 1:
            values *= count
        if len(values) != count:
            raise SizeMismatchError(
                f"{fn}: {name} must be an int or a tuple of {count} ints, got {value!r}"
            )
        values = tuple(int(v) for v in values)
    if any(v < minimum for v in values):
        bound = "positive" if minimum == 1 else "non-negative"
        raise SizeMismatchError(f"{fn}: {name} must be {bound}, got {value!r}")
    return values


def _real(fn: str, name: str, value: Any) -> float:
    """``value`` where it is a real number (a 0-d tensor: the number it holds, as torch's
    parser reads it); a str, a tuple or None is torch's ``TypeError`` ("must be float"), a
    ``DTypeError`` here."""
    if isinstance(value, Tensor | np.ndarray) and value.ndim == 0:
        value = value.item()
    if not isinstance(value, numbers.Real):
        raise DTypeError(f"{fn}: {name} must be a float, got {value!r}")
    return value


def _as_tensor(fn: str, reference: Tensor, value: Any, name: str) -> Tensor:
    """``value`` (a tensor, array or nested list) on ``reference``'s backend and device."""
    try:
        return lift(reference, value, fn)
    except DTypeError:
        raise DTypeError(f"{fn}: {name} must be a tensor, got {type(value).__name__}") from None


#: the half-precision dtypes (a loss's weight of another dtype than half logits is refused)
_HALF_DTYPES = frozenset({"bfloat16", "float16"})

#: the dtypes of a layer's common call, which the layers' fast paths take (float32/float64:
#: no lift, promotion or cast applies to them)
_PLAIN_DTYPES = frozenset({"float32", "float64"})


def _float_pair(
    fn: str,
    x: Any,
    other: Any,
    name: str,
    integers: bool = False,
    one_dtype: bool = False,
    complex_ok: bool = False,
) -> tuple[Tensor, Tensor]:
    """``x`` and ``other`` on one backend and one float dtype (or, with ``integers``, one
    integer dtype too: torch's CPU convolutions compute those). With ``one_dtype`` (matrix
    products, convolutions, ``prelu``, ``binary_cross_entropy``) a tensor ``other`` of
    another dtype is refused, as torch refuses it, rather than promoted (a float64 input to a
    float32 layer computed in float64 before). A state dict's entries count as the tensors
    they are in torch."""
    x, other = stood_for(x), stood_for(other)
    if not isinstance(x, Tensor):
        raise DTypeError(f"{fn}: input must be a tensor, got {type(x).__name__}")
    given = isinstance(other, Tensor)
    other = _as_tensor(fn, x, other, name)
    if one_dtype and given and x.dtype != other.dtype:
        raise MixedDTypeError(
            f"{fn}: input and {name} must have the same dtype, got input {x.dtype} "
            f"{shape_text(x.shape)} and {name} {other.dtype} {shape_text(other.shape)}"
        )
    x, other = promote(x, other, fn)
    if (
        x.dtype not in FLOAT_DTYPES
        and not (integers and x.dtype in INT_DTYPES)
        and not (complex_ok and x.is_complex())
    ):
        kinds = "float or integer" if integers else "float"
        # a complex input: torch's NotImplementedError ("mse_cpu" not implemented for
        # 'ComplexFloat') or RuntimeError ("expected common dtype to be floating point")
        error = UnsupportedDTypeError if x.is_complex() else DTypeError
        raise error(f"{fn}: expected {kinds} tensors, got {x.dtype} input and {name}")
    return x, other


def _float_input(fn: str, x: Any) -> Tensor:
    x = stood_for(x)
    if not isinstance(x, Tensor):
        raise DTypeError(f"{fn}: input must be a tensor, got {type(x).__name__}")
    if x.is_complex():  # (torch's NotImplementedError: "elu_cpu" not implemented for complex)
        raise UnsupportedDTypeError(
            f"{fn}: expected a float input, got {x.dtype} {shape_text(x.shape)}"
        )
    if x.dtype not in FLOAT_DTYPES:
        raise KernelDTypeError(  # (torch's RuntimeError: "... not implemented for 'Long'")
            f"{fn}: expected a float input, got {x.dtype} {shape_text(x.shape)}"
        )
    return x


def _refuse_integer(fn: str, value: Any, kind: type[DTypeError], what: str = "input") -> None:
    """Refuse an integer or bool tensor ``value`` (``what``: its parameter) where torch's
    kernel has none for it: ``kind`` is torch's class, :class:`UnsupportedDTypeError` where
    it raises ``NotImplementedError`` (``"log_sigmoid_cpu" not implemented for 'Long'``),
    :class:`ResultCastError` where a float result cannot be written into it. Checked before
    :func:`_float_pair`, which promotes an integer operand beside a float one (and computed
    where torch refuses)."""
    value = stood_for(value)
    if isinstance(value, Tensor) and value.dtype not in FLOAT_DTYPES and not value.is_complex():
        why = (
            "a float result cannot be cast to it"
            if issubclass(kind, ResultCastError)
            else "no kernel for that dtype"
        )
        raise kind(
            f"{fn}: expected a float {what}, got {value.dtype} {shape_text(value.shape)} ({why})"
        )


def _batched(fn: str, x: Tensor, spatial: int) -> tuple[Tensor, bool]:
    """``x`` with a batch dimension (``[C, *spatial]`` inputs get one, as in PyTorch)."""
    if x.ndim == spatial + 2:
        return x, False
    if x.ndim == spatial + 1:
        return x.unsqueeze_dim(0), True
    raise ShapeError(
        f"{fn}: expected a {spatial + 1}-d (unbatched) or {spatial + 2}-d (batched) input, got "
        f"input {shape_text(x.shape)}"
    )


def _unbatched(out: Tensor, squeeze: bool) -> Tensor:
    return out.squeeze_dim(0) if squeeze else out


def _channel_bias(fn: str, x: Tensor, bias: Any, channels: int) -> Tensor:
    """``bias`` checked to be ``[channels]``, in ``x``'s dtype, or the empty "no bias"."""
    if bias is None:
        return wrap(x, x.backend.zeros((0,), x.dtype, x.device))
    bias = _as_tensor(fn, x, bias, "bias")
    if bias.shape != (channels,):
        raise ShapeError(
            f"{fn}: bias must have shape [{channels}] (one per output channel), got "
            f"{shape_text(bias.shape)}"
        )
    if x.dtype in FLOAT_DTYPES and bias.dtype not in FLOAT_DTYPES:
        raise DTypeError(f"{fn}: bias must be a float tensor, got {bias.dtype}")
    if x.dtype not in FLOAT_DTYPES and bias.dtype != x.dtype:  # an integer convolution's
        raise DTypeError(f"{fn}: bias must be {x.dtype} as the input is, got {bias.dtype}")
    return bias.cast(x.dtype)


def _clamped_min(value: Tensor, eps: float) -> Tensor:
    """``max(value, eps)`` in value, with the gradient of ``value`` itself: torch clamps
    these (a norm, a variance) in place under ``no_grad``, so its backward never sees the
    clamp. The clamp enters as a constant offset, ``eps - value`` where the value is below
    ``eps`` and 0 elsewhere (not ``clamp(value) - value``, which is ``inf - inf``, NaN, at an
    infinite value: ``gaussian_nll_loss`` of an infinite variance gave NaN, torch's inf)."""
    constant = untracked(value)
    return value + (-constant + eps).clamp_min(0.0)
