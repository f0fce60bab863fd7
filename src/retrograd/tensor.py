"""The tensor API: what users call.

A :class:`Tensor` is a backend primitive, the backend it belongs to, and a device label. Every
method validates its arguments (dimensions, dtypes, index ranges) and calls the backend
protocol; errors come out of the hierarchy in :mod:`retrograd.errors`, naming the operation and
the shapes or values at fault, and leave every tensor and graph as they were.
"""

from __future__ import annotations

import builtins
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from .context import current_backend
from .device import CPU0, Device
from .errors import (
    AutodiffError,
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    RetrogradError,
    ShapeError,
)

__all__ = [
    "Tensor",
    "arange",
    "cat",
    "eye",
    "full",
    "ones",
    "ones_like",
    "random",
    "seed",
    "stack",
    "tensor",
    "zeros",
    "zeros_like",
]

FLOAT_DTYPES = ("float32", "float64")
DTYPES = ("float32", "float64", "int64", "bool")
_RANK = {"bool": 0, "int64": 1, "float32": 2, "float64": 3}
_SCALARS = (int, float, bool, np.integer, np.floating, np.bool_)


def _shape_text(shape: tuple) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def _translate(op: str, error: Exception, tensors: Sequence[Tensor]) -> RetrogradError:
    described = ", ".join(f"{_shape_text(t.shape)} {t.dtype}" for t in tensors)
    message = f"{op}: {error} (inputs: {described})"
    if isinstance(error, IndexError):
        return IndexOutOfRangeError(message)
    if isinstance(error, TypeError):
        return DTypeError(message)
    return ShapeError(message)


def _normalize_dim(op: str, dim: Any, ndim: int, extra: int = 0) -> int:
    """``dim`` in ``[-(ndim+extra), ndim+extra)`` mapped to a non-negative index."""
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise ShapeError(f"{op}: dimension must be an int, got {dim!r}")
    size = ndim + extra
    if not -size <= dim < size:
        raise ShapeError(
            f"{op}: dimension {dim} is out of range for a tensor with {ndim} dimensions "
            f"(expected {-size} to {size - 1})"
        )
    return int(dim) % size if size else 0


def _result_dtype(a: str, b: str) -> str:
    return a if _RANK[a] >= _RANK[b] else b


def _scalar_dtype(tensor_dtype: str, scalar: Any) -> str:
    """The dtype of ``tensor op scalar`` (PyTorch's rule: the tensor's, unless it is wider)."""
    if isinstance(scalar, bool | np.bool_):
        return tensor_dtype
    if isinstance(scalar, numbers.Integral):
        return "int64" if tensor_dtype == "bool" else tensor_dtype
    return tensor_dtype if tensor_dtype in FLOAT_DTYPES else "float32"


class Tensor:
    """An n-dimensional array on a backend; differentiable on the autodiff backend.

    >>> import retrograd as rg
    >>> x = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).require_grad()
    >>> grads = (x * x).sum().backward()
    >>> x.grad(grads).tolist()
    [[2.0, 4.0], [6.0, 8.0]]
    """

    __slots__ = ("__weakref__", "_backend", "_device", "_prim")
    __array_priority__ = 1000  # NumPy defers to our reflected operators

    def __init__(self, primitive: Any, backend: Any, device: Device = CPU0):
        self._prim = primitive
        self._backend = backend
        self._device = device

    # -- metadata -----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The dimensions, as a tuple of ints."""
        return tuple(self._backend.shape(self._prim))

    @property
    def ndim(self) -> int:
        return len(self._backend.shape(self._prim))

    @property
    def dtype(self) -> str:
        """``"float32"``, ``"float64"``, ``"int64"`` or ``"bool"``."""
        return self._backend.dtype(self._prim)

    @property
    def device(self) -> Device:
        return self._device

    @property
    def backend(self) -> Any:
        return self._backend

    @property
    def primitive(self) -> Any:
        """The backend primitive this tensor wraps."""
        return self._prim

    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def numel(self) -> int:
        return math.prod(self.shape)

    def size(self, dim: int | None = None) -> Any:
        shape = self.shape
        return shape if dim is None else shape[_normalize_dim("size", dim, len(shape))]

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    # -- conversion ---------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (shares memory with the tensor where it can)."""
        return np.asarray(self._backend.to_numpy(self._prim))

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        if dtype is not None:
            array = array.astype(dtype, copy=False)
        return np.array(array, copy=True) if copy else array

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Any:
        """The value of a one-element tensor as a Python scalar."""
        array = self.numpy()
        if array.size != 1:
            raise ShapeError(f"item: expected a one-element tensor, got shape {list(array.shape)}")
        return array.reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        return bool(self.item())

    def __index__(self) -> int:
        if self.dtype != "int64":
            raise DTypeError(
                f"__index__: only int64 tensors can be used as an index, got {self.dtype}"
            )
        return int(self.item())

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        tracked = self._backend.is_autodiff and self._backend.is_tracked(self._prim)
        suffix = ", requires_grad" if tracked and self.is_require_grad() else (
            ", tracked" if tracked else "")  # fmt: skip
        return f"tensor({body}, dtype={self.dtype}{suffix})"

    def cast(self, dtype: str) -> Tensor:
        """This tensor in ``dtype``; float-to-float casts keep the gradient flowing."""
        if dtype not in DTYPES:
            raise DTypeError(f"cast: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        if dtype == self.dtype:
            return self
        return self._wrap(self._backend.cast(self._prim, dtype))

    def float(self) -> Tensor:
        """Cast to float32 (a float64 tensor stays float64)."""
        return self if self.dtype in FLOAT_DTYPES else self.cast("float32")

    def double(self) -> Tensor:
        return self.cast("float64")

    def int(self) -> Tensor:
        return self.cast("int64")

    def bool(self) -> Tensor:
        return self.cast("bool")

    def to(self, device: Device | str) -> Tensor:
        """The same values labelled with (and moved to) ``device``."""
        device = Device(device)
        return Tensor(self._backend.to_device(self._prim, device), self._backend, device)

    # -- helpers ------------------------------------------------------------------------------
    def _wrap(self, primitive: Any) -> Tensor:
        return Tensor(primitive, self._backend, self._device)

    def _call(self, op: str, *args: Any, name: str | None = None) -> Tensor:
        """``backend.<name>(self, *args)`` with NumPy-level errors translated."""
        try:
            return Tensor(
                getattr(self._backend, name or op)(self._prim, *args), self._backend, self._device
            )
        except RetrogradError:
            raise
        except (ValueError, IndexError, TypeError) as error:
            raise _translate(op, error, [self]) from None

    def _as_float(self) -> Tensor:
        return self if self._backend.dtype(self._prim) in FLOAT_DTYPES else self.cast("float32")

    def _float_unary(self, op: str, *params: Any) -> Tensor:
        backend, prim = self._backend, self._prim
        if backend.dtype(prim) not in FLOAT_DTYPES:
            return self.cast("float32")._float_unary(op, *params)
        try:
            return Tensor(getattr(backend, op)(prim, *params), backend, self._device)
        except RetrogradError:
            raise
        except (ValueError, IndexError, TypeError) as error:
            raise _translate(op, error, [self]) from None

    def _lift(self, other: Any, op: str) -> Tensor:
        """``other`` as a tensor this one can be combined with (same backend and device)."""
        if isinstance(other, Tensor):
            if other._backend is not self._backend:
                other = _on_backend(other, self._backend, op)
            if other._device is not self._device:
                raise RetrogradError(
                    f"{op}: tensors on different devices ({self._device} and {other._device})"
                )
            return other
        if isinstance(other, np.ndarray | list | tuple):
            return tensor(other, backend=self._backend, device=self._device)
        raise DTypeError(f"{op}: cannot combine a tensor with {type(other).__name__}")

    def _pair(self, other: Tensor, op: str) -> tuple[Tensor, Tensor, Any]:
        """Both operands on one backend, promoted to one dtype."""
        other = self._lift(other, op)
        a, b = self, other
        if a._backend is not b._backend:  # an inner-backend tensor lifted the other way round
            a = _on_backend(a, b._backend, op)
        backend = b._backend
        a_dtype, b_dtype = backend.dtype(a._prim), backend.dtype(b._prim)
        if a_dtype != b_dtype:
            target = _result_dtype(a_dtype, b_dtype)
            a, b = a.cast(target), b.cast(target)
        return a, b, backend

    def _binary(self, other: Any, op: str, scalar_op: str | None = None, float_only=False):
        kind = type(other)
        if kind is Tensor and other._backend is self._backend and other._device is self._device:
            backend, a, b = self._backend, self._prim, other._prim
            if backend.same_dtype(a, b) and (not float_only or backend.dtype(a) in FLOAT_DTYPES):
                try:  # the common case, kept short: same backend, device and dtype
                    return Tensor(getattr(backend, op)(a, b), backend, self._device)
                except RetrogradError:
                    raise
                except (ValueError, IndexError, TypeError) as error:
                    raise _translate(op, error, [self, other]) from None
        elif (kind is float or kind is int) and scalar_op is not None:
            backend, prim = self._backend, self._prim
            if backend.dtype(prim) in FLOAT_DTYPES:
                try:
                    return Tensor(getattr(backend, scalar_op)(prim, float(other)), backend,
                                  self._device)  # fmt: skip
                except RetrogradError:
                    raise
                except (ValueError, IndexError, TypeError) as error:
                    raise _translate(op, error, [self]) from None
        if isinstance(other, _SCALARS) and scalar_op is not None:
            dtype = self._backend.dtype(self._prim)
            target = "float32" if float_only and dtype not in FLOAT_DTYPES else _scalar_dtype(
                dtype, other)  # fmt: skip
            source = self if target == dtype else self.cast(target)
            return source._call(op, _scalar_value(other, target), name=scalar_op)
        a, b, backend = self._pair(other, op)
        if float_only and backend.dtype(a._prim) not in FLOAT_DTYPES:
            a, b = a.cast("float32"), b.cast("float32")
        try:
            return Tensor(getattr(backend, op)(a._prim, b._prim), backend, a._device)
        except RetrogradError:
            raise
        except (ValueError, IndexError, TypeError) as error:
            raise _translate(op, error, [a, b]) from None

    def _reflected(self, other: Any, op: str, scalar_op: str, float_only=False):
        if isinstance(other, _SCALARS):
            return self._binary(other, op, scalar_op, float_only)
        return self._lift(other, op)._binary(self, op, None, float_only)

    # -- autodiff -----------------------------------------------------------------------------
    def _autodiff(self, op: str) -> Any:
        backend = self._backend
        if not backend.is_autodiff:
            raise AutodiffError(
                f"{op}: tensors of {backend!r} do not track gradients; "
                "create them on rg.Autodiff(...) (the default backend)"
            )
        return backend

    def require_grad(self) -> Tensor:
        """Mark this leaf as requiring grad (in place, returns ``self``); error on a non-leaf.

        >>> import retrograd as rg
        >>> rg.tensor([1.0]).require_grad().is_require_grad()
        True
        """
        backend = self._autodiff("require_grad")
        if self.dtype not in FLOAT_DTYPES:
            raise DTypeError(
                f"require_grad: only float tensors can require grad, this one is {self.dtype}"
            )
        self._prim = backend.require_grad(self._prim)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """PyTorch spelling of :meth:`require_grad`."""
        return self.require_grad() if requires_grad else self.detach()

    def is_require_grad(self) -> bool:
        """Whether this is a leaf that requires grad."""
        return self._backend.is_autodiff and self._backend.is_require_grad(self._prim)

    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow through this tensor (leaf or tracked intermediate)."""
        return self._backend.is_autodiff and self._backend.is_tracked(self._prim)

    def detach(self) -> Tensor:
        """A new leaf cut from the graph, requiring grad iff this one was such a leaf."""
        if not self._backend.is_autodiff:
            return self
        return self._wrap(self._backend.detach(self._prim))

    def retain_grad(self) -> Tensor:
        """Keep this intermediate's gradient in the result of ``backward`` (returns ``self``)."""
        self._autodiff("retain_grad").retain_grad(self._prim)
        return self

    def backward(
        self,
        grad: Tensor | None = None,
        *,
        retain_graph: bool = False,
        create_graph: bool = False,
    ) -> Any:
        """Backpropagate from this tensor and return the :class:`~retrograd.Gradients`.

        ``grad`` seeds the backward (ones of this tensor's shape by default). The part of the
        graph walked is consumed unless ``retain_graph``; ``create_graph`` records the backward
        itself, so gradients are tracked tensors that can be differentiated again.
        """
        backend = self._autodiff("backward")
        seed = None
        if grad is not None:
            grad = self._lift(grad, "backward")
            if grad.shape != self.shape:
                raise ShapeError(
                    f"backward: grad has shape {_shape_text(grad.shape)}, expected "
                    f"{_shape_text(self.shape)}"
                )
            seed = backend.inner_value(grad.cast(self.dtype)._prim)
        return backend.backward(self._prim, seed, retain_graph, create_graph, self._device)

    def grad(self, grads: Any) -> Tensor | None:
        """This tensor's gradient in ``grads``, on the inner backend, or ``None``."""
        value = self._autodiff("grad").grad(self._prim, grads)
        return None if value is None else Tensor(value, grads.backend, self._device)

    def grad_remove(self, grads: Any) -> Tensor | None:
        """Remove this tensor's gradient from ``grads`` and return it."""
        value = self._autodiff("grad_remove").grad_remove(self._prim, grads)
        return None if value is None else Tensor(value, grads.backend, self._device)

    def grad_replace(self, grads: Any, grad: Tensor) -> None:
        """Set this tensor's gradient in ``grads`` to ``grad``."""
        backend = self._autodiff("grad_replace")
        if grad.shape != self.shape:
            raise ShapeError(
                f"grad_replace: grad has shape {_shape_text(grad.shape)}, expected "
                f"{_shape_text(self.shape)}"
            )
        value = grad._prim
        if grad._backend is not grads.backend:
            value = _on_backend(grad, grads.backend, "grad_replace")._prim
        backend.grad_replace(self._prim, grads, value)

    def inner(self) -> Tensor:
        """The same values on the inner backend, without graph."""
        backend = self._autodiff("inner")
        return Tensor(backend.inner_value(self._prim), backend.inner, self._device)

    @staticmethod
    def from_inner(inner_tensor: Tensor, backend: Any = None) -> Tensor:
        """An untracked tensor of the autodiff ``backend`` holding ``inner_tensor``'s values."""
        backend = backend if backend is not None else current_backend()
        if not backend.is_autodiff:
            raise AutodiffError(f"from_inner: {backend!r} is not an autodiff backend")
        return Tensor(backend.wrap(inner_tensor._prim), backend, inner_tensor._device)

    def set_distributed(self, param_id: Any) -> Tensor:
        """Mark this parameter's gradient for all-reduce during backward (returns ``self``)."""
        backend = self._autodiff("set_distributed")
        self._prim = backend.set_distributed(self._prim, param_id)
        return self

    def is_distributed(self) -> bool:
        return self._backend.is_autodiff and self._backend.param_id(self._prim) is not None

    # -- elementwise arithmetic ---------------------------------------------------------------
    def add(self, other: Any) -> Tensor:
        """``self + other``, broadcasting; ``other`` may be a Python scalar."""
        return self._binary(other, "add", "add_scalar")

    def sub(self, other: Any) -> Tensor:
        return self._binary(other, "sub", "sub_scalar")

    def mul(self, other: Any) -> Tensor:
        return self._binary(other, "mul", "mul_scalar")

    def div(self, other: Any) -> Tensor:
        """True division; ints are divided as float32."""
        return self._binary(other, "div", "div_scalar", float_only=True)

    def add_scalar(self, value: float) -> Tensor:
        return self._binary(_check_scalar("add_scalar", value), "add", "add_scalar")

    def sub_scalar(self, value: float) -> Tensor:
        return self._binary(_check_scalar("sub_scalar", value), "sub", "sub_scalar")

    def mul_scalar(self, value: float) -> Tensor:
        return self._binary(_check_scalar("mul_scalar", value), "mul", "mul_scalar")

    def div_scalar(self, value: float) -> Tensor:
        return self._binary(_check_scalar("div_scalar", value), "div", "div_scalar", True)

    def powf(self, other: Any) -> Tensor:
        """``self ** other`` elementwise (float)."""
        return self._binary(other, "pow", "pow_scalar", float_only=True)

    def powf_scalar(self, value: float) -> Tensor:
        return self._binary(_check_scalar("powf_scalar", value), "pow", "pow_scalar", True)

    pow = powf

    def remainder(self, other: Any) -> Tensor:
        """Remainder with the sign of the divisor (Python's ``%``, PyTorch's ``remainder``)."""
        return self._binary(other, "remainder", "remainder_scalar")

    def remainder_scalar(self, value: float) -> Tensor:
        return self._binary(_check_scalar("remainder_scalar", value), "remainder",
                            "remainder_scalar")  # fmt: skip

    def atan2(self, other: Any) -> Tensor:
        return self._binary(other, "atan2", None, float_only=True)

    def hypot(self, other: Any) -> Tensor:
        return self._binary(other, "hypot", None, float_only=True)

    def matmul(self, other: Tensor) -> Tensor:
        """Matrix product; batched, batch dims broadcasting; 1-d operands as in NumPy."""
        a, b, backend = self._pair(other, "matmul")
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError(
                f"matmul: both operands need at least 1 dimension, got shapes "
                f"{_shape_text(a.shape)} and {_shape_text(b.shape)}"
            )
        squeeze = []
        if a.ndim == 1:
            a = a.unsqueeze_dim(0)
            squeeze.append(-2)
        if b.ndim == 1:
            b = b.unsqueeze_dim(1)
            squeeze.append(-1)
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(
                f"matmul: inner dimensions differ: {_shape_text(self.shape)} @ "
                f"{_shape_text(other.shape)} ({a.shape[-1]} != {b.shape[-2]})"
            )
        try:
            out = Tensor(backend.matmul(a._prim, b._prim), backend, a._device)
        except (ValueError, IndexError, TypeError) as error:
            raise _translate("matmul", error, [a, b]) from None
        for dim in squeeze:
            out = out.squeeze_dim(dim)
        return out

    def cross(self, other: Tensor, dim: int) -> Tensor:
        """Cross product of 3-vectors along ``dim``."""
        a, b, _ = self._pair(other, "cross")
        d = _normalize_dim("cross", dim, max(a.ndim, b.ndim))
        if a.shape[d - a.ndim] != 3 or b.shape[d - b.ndim] != 3:
            raise ShapeError(
                f"cross: dimension {dim} must have size 3 in both inputs, got shapes "
                f"{_shape_text(a.shape)} and {_shape_text(b.shape)}"
            )
        return a._binary_with(b, "cross", d - max(a.ndim, b.ndim))

    def _binary_with(self, other: Tensor, op: str, *params: Any) -> Tensor:
        try:
            return self._wrap(getattr(self._backend, op)(self._prim, other._prim, *params))
        except RetrogradError:
            raise
        except (ValueError, IndexError, TypeError) as error:
            raise _translate(op, error, [self, other]) from None

    # -- operators ----------------------------------------------------------------------------
    def __add__(self, other):
        return self._binary(other, "add", "add_scalar")

    def __radd__(self, other):
        return self._binary(other, "add", "add_scalar")

    def __sub__(self, other):
        return self._binary(other, "sub", "sub_scalar")

    def __rsub__(self, other):
        return self._reflected(other, "sub", "rsub_scalar")

    def __mul__(self, other):
        return self._binary(other, "mul", "mul_scalar")

    def __rmul__(self, other):
        return self._binary(other, "mul", "mul_scalar")

    def __truediv__(self, other):
        return self._binary(other, "div", "div_scalar", float_only=True)

    def __rtruediv__(self, other):
        return self._reflected(other, "div", "rdiv_scalar", float_only=True)

    def __pow__(self, other):
        return self._binary(other, "pow", "pow_scalar", float_only=True)

    def __rpow__(self, other):
        return self._reflected(other, "pow", "rpow_scalar", float_only=True)

    def __mod__(self, other):
        return self._binary(other, "remainder", "remainder_scalar")

    def __rmod__(self, other):
        return self._reflected(other, "remainder", "rremainder_scalar")

    def __matmul__(self, other):
        return self.matmul(other)

    def __rmatmul__(self, other):
        return self._lift(other, "matmul").matmul(self)

    def __neg__(self):
        return self.neg()

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __eq__(self, other):  # type: ignore[override]
        return self._compare(other, "equal")

    def __ne__(self, other):  # type: ignore[override]
        return self._compare(other, "not_equal")

    def __lt__(self, other):
        return self._compare(other, "lower")

    def __le__(self, other):
        return self._compare(other, "lower_equal")

    def __gt__(self, other):
        return self._compare(other, "greater")

    def __ge__(self, other):
        return self._compare(other, "greater_equal")

    __hash__ = object.__hash__

    def __invert__(self):
        if self.dtype != "bool":
            raise DTypeError(f"~: only bool tensors can be inverted, this one is {self.dtype}")
        return self._call("logical_not")

    def __and__(self, other):
        return self._logical(other, "logical_and")

    def __or__(self, other):
        return self._logical(other, "logical_or")

    # -- elementwise unary --------------------------------------------------------------------
    def neg(self) -> Tensor:
        if self.dtype == "bool":
            raise DTypeError("neg: bool tensors cannot be negated; use ~ (logical not)")
        return self._call("neg")

    def abs(self) -> Tensor:
        return self._call("abs")

    def exp(self) -> Tensor:
        return self._float_unary("exp")

    def expm1(self) -> Tensor:
        return self._float_unary("expm1")

    def log(self) -> Tensor:
        return self._float_unary("log")

    def log1p(self) -> Tensor:
        return self._float_unary("log1p")

    def sqrt(self) -> Tensor:
        return self._float_unary("sqrt")

    def square(self) -> Tensor:
        return self._call("square")

    def recip(self) -> Tensor:
        """``1 / self``."""
        return self._float_unary("recip")

    def sin(self) -> Tensor:
        return self._float_unary("sin")

    def cos(self) -> Tensor:
        return self._float_unary("cos")

    def tan(self) -> Tensor:
        return self._float_unary("tan")

    def sinh(self) -> Tensor:
        return self._float_unary("sinh")

    def cosh(self) -> Tensor:
        return self._float_unary("cosh")

    def tanh(self) -> Tensor:
        return self._float_unary("tanh")

    def asin(self) -> Tensor:
        return self._float_unary("asin")

    def acos(self) -> Tensor:
        return self._float_unary("acos")

    def atan(self) -> Tensor:
        return self._float_unary("atan")

    def asinh(self) -> Tensor:
        return self._float_unary("asinh")

    def acosh(self) -> Tensor:
        return self._float_unary("acosh")

    def atanh(self) -> Tensor:
        return self._float_unary("atanh")

    def erf(self) -> Tensor:
        return self._float_unary("erf")

    def sign(self) -> Tensor:
        """-1, 0 or 1; its gradient is zero."""
        return self._call("sign")

    def round(self) -> Tensor:
        """Round half to even, as PyTorch; zero gradient."""
        return self._call("round")

    def floor(self) -> Tensor:
        return self._call("floor")

    def ceil(self) -> Tensor:
        return self._call("ceil")

    def trunc(self) -> Tensor:
        return self._call("trunc")

    def clamp(self, min: float | None = None, max: float | None = None) -> Tensor:  # noqa: A002
        """Limit values to ``[min, max]`` (either may be ``None``); the gradient passes inside."""
        if min is not None and max is not None and min > max:
            raise ShapeError(f"clamp: min {min} is greater than max {max}")
        return self._call("clamp", min, max)

    def clamp_min(self, min: float) -> Tensor:  # noqa: A002
        return self.clamp(min, None)

    def clamp_max(self, max: float) -> Tensor:  # noqa: A002
        return self.clamp(None, max)

    # -- activations --------------------------------------------------------------------------
    def relu(self) -> Tensor:
        return self._float_unary("relu")

    def gelu(self) -> Tensor:
        """``x * Phi(x)`` with the exact normal CDF (PyTorch's default ``gelu``)."""
        return self._float_unary("gelu")

    def sigmoid(self) -> Tensor:
        return self._float_unary("sigmoid")

    def log_sigmoid(self) -> Tensor:
        return self._float_unary("log_sigmoid")

    def silu(self) -> Tensor:
        return self._float_unary("silu")

    def softplus(self, beta: float = 1.0) -> Tensor:
        return self._float_unary("softplus", float(beta))

    def leaky_relu(self, slope: float = 0.01) -> Tensor:
        return self._float_unary("leaky_relu", float(slope))

    def softmax(self, dim: int) -> Tensor:
        return self._float_unary("softmax", _normalize_dim("softmax", dim, self.ndim))

    def log_softmax(self, dim: int) -> Tensor:
        return self._float_unary("log_softmax", _normalize_dim("log_softmax", dim, self.ndim))

    # -- comparisons --------------------------------------------------------------------------
    def _compare(self, other: Any, op: str) -> Tensor:
        if isinstance(other, _SCALARS):
            return self._call(op, other, name=op + "_elem")
        a, b, _ = self._pair(other, op)
        return a._binary_with(b, op)

    def _logical(self, other: Any, op: str) -> Tensor:
        if isinstance(other, bool):
            other = full(self.shape, other, "bool", self._backend, self._device)
        other = self._lift(other, op)
        if self.dtype != "bool" or other.dtype != "bool":
            raise DTypeError(f"{op}: expected bool tensors, got {self.dtype} and {other.dtype}")
        return self._binary_with(other, op)

    def equal(self, other: Any) -> Tensor:
        return self._compare(other, "equal")

    def not_equal(self, other: Any) -> Tensor:
        return self._compare(other, "not_equal")

    def greater(self, other: Any) -> Tensor:
        return self._compare(other, "greater")

    def greater_equal(self, other: Any) -> Tensor:
        return self._compare(other, "greater_equal")

    def lower(self, other: Any) -> Tensor:
        return self._compare(other, "lower")

    def lower_equal(self, other: Any) -> Tensor:
        return self._compare(other, "lower_equal")

    def equal_elem(self, value: float) -> Tensor:
        return self._compare(_check_scalar("equal_elem", value), "equal")

    def not_equal_elem(self, value: float) -> Tensor:
        return self._compare(_check_scalar("not_equal_elem", value), "not_equal")

    def greater_elem(self, value: float) -> Tensor:
        return self._compare(_check_scalar("greater_elem", value), "greater")

    def greater_equal_elem(self, value: float) -> Tensor:
        return self._compare(_check_scalar("greater_equal_elem", value), "greater_equal")

    def lower_elem(self, value: float) -> Tensor:
        return self._compare(_check_scalar("lower_elem", value), "lower")

    def lower_equal_elem(self, value: float) -> Tensor:
        return self._compare(_check_scalar("lower_equal_elem", value), "lower_equal")

    def nonzero(self) -> list[Tensor]:
        """int64 indices of the non-zero (true) elements, one 1-d tensor per dimension."""
        return [self._wrap(index) for index in self._backend.nonzero(self._prim)]

    def argwhere(self) -> Tensor:
        """int64 indices ``[count, ndim]`` of the non-zero (true) elements."""
        return (
            stack(self.nonzero(), 1)
            if self.ndim
            else zeros((int(bool(self)), 0), "int64", self._backend, self._device)
        )

    def is_nan(self) -> Tensor:
        return self._call("is_nan")

    def is_inf(self) -> Tensor:
        return self._call("is_inf")

    def logical_not(self) -> Tensor:
        return ~self

    def logical_and(self, other: Any) -> Tensor:
        return self._logical(other, "logical_and")

    def logical_or(self, other: Any) -> Tensor:
        return self._logical(other, "logical_or")

    # -- reductions ---------------------------------------------------------------------------
    def _reduce(self, op: str) -> Tensor:
        if self.numel() == 0 and op in ("max", "min"):
            raise ShapeError(
                f"{op}: cannot reduce an empty tensor of shape {_shape_text(self.shape)}"
            )
        return self._call(op)

    def _reduce_dim(self, op: str, dim: int) -> Tensor:
        d = _normalize_dim(op, dim, self.ndim)
        if self.shape[d] == 0 and op in ("max_dim", "min_dim", "argmax", "argmin"):
            raise ShapeError(f"{op}: dimension {dim} of shape {_shape_text(self.shape)} is empty")
        return d

    def sum(self) -> Tensor:
        """Sum of all elements, as a 0-d tensor."""
        return self._reduce("sum")

    def mean(self) -> Tensor:
        return self._as_float()._reduce("mean")

    def prod(self) -> Tensor:
        """Product of all elements; its gradient is exact where elements are zero."""
        return self._reduce("prod")

    def max(self) -> Tensor:
        """Largest element (0-d); ties share the gradient evenly, as in PyTorch."""
        return self._reduce("max")

    def min(self) -> Tensor:
        return self._reduce("min")

    def sum_dim(self, dim: int) -> Tensor:
        """Sum along ``dim``, kept with size 1."""
        return self._call("sum_dim", (self._reduce_dim("sum_dim", dim),))

    def mean_dim(self, dim: int) -> Tensor:
        return self._as_float()._call("mean_dim", (self._reduce_dim("mean_dim", dim),))

    def prod_dim(self, dim: int) -> Tensor:
        return self._call("prod_dim", self._reduce_dim("prod_dim", dim))

    def max_dim(self, dim: int) -> Tensor:
        return self.max_dim_with_indices(dim)[0]

    def min_dim(self, dim: int) -> Tensor:
        return self.min_dim_with_indices(dim)[0]

    def max_dim_with_indices(self, dim: int) -> tuple[Tensor, Tensor]:
        """``(values, int64 indices)`` of the maximum along ``dim`` (kept with size 1)."""
        return self._with_indices("max_dim", self._reduce_dim("max_dim", dim))

    def min_dim_with_indices(self, dim: int) -> tuple[Tensor, Tensor]:
        return self._with_indices("min_dim", self._reduce_dim("min_dim", dim))

    def _with_indices(self, op: str, *params: Any) -> tuple[Tensor, Tensor]:
        try:
            values, indices = getattr(self._backend, op)(self._prim, *params)
        except RetrogradError:
            raise
        except (ValueError, IndexError, TypeError) as error:
            raise _translate(op, error, [self]) from None
        return self._wrap(values), self._wrap(indices)

    def argmax(self, dim: int) -> Tensor:
        return self._call("argmax", self._reduce_dim("argmax", dim))

    def argmin(self, dim: int) -> Tensor:
        return self._call("argmin", self._reduce_dim("argmin", dim))

    def var(self, dim: int) -> Tensor:
        """Unbiased variance along ``dim`` (divides by n - 1, as Burn), kept with size 1."""
        d = _normalize_dim("var", dim, self.ndim)
        x = self._as_float()
        n = x.shape[d]
        centered = x - x.mean_dim(d)
        return centered.square().sum_dim(d).div_scalar(builtins.max(n - 1, 1) if n > 1 else 0.0)

    def cumsum(self, dim: int) -> Tensor:
        return self._call("cumsum", _normalize_dim("cumsum", dim, self.ndim))

    def cumprod(self, dim: int) -> Tensor:
        """Cumulative product; its gradient is exact where elements are zero."""
        return self._call("cumprod", _normalize_dim("cumprod", dim, self.ndim))

    def cummax(self, dim: int) -> Tensor:
        return self._with_indices("cummax", _normalize_dim("cummax", dim, self.ndim))[0]

    def cummin(self, dim: int) -> Tensor:
        return self._with_indices("cummin", _normalize_dim("cummin", dim, self.ndim))[0]

    def cummax_with_indices(self, dim: int) -> tuple[Tensor, Tensor]:
        return self._with_indices("cummax", _normalize_dim("cummax", dim, self.ndim))

    def cummin_with_indices(self, dim: int) -> tuple[Tensor, Tensor]:
        return self._with_indices("cummin", _normalize_dim("cummin", dim, self.ndim))

    def sort(self, dim: int = -1, descending: bool = False) -> Tensor:
        """Stable sort along ``dim``."""
        return self.sort_with_indices(dim, descending)[0]

    def sort_with_indices(self, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
        d = _normalize_dim("sort", dim, self.ndim)
        return self._with_indices("sort", d, bool(descending))

    def argsort(self, dim: int = -1, descending: bool = False) -> Tensor:
        return self.sort_with_indices(dim, descending)[1]

    def topk(self, k: int, dim: int = -1) -> Tensor:
        """The ``k`` largest values along ``dim``, largest first (Burn returns values only)."""
        return self.topk_with_indices(k, dim)[0]

    def topk_with_indices(self, k: int, dim: int = -1) -> tuple[Tensor, Tensor]:
        d = _normalize_dim("topk", dim, self.ndim)
        if not 0 <= k <= self.shape[d]:
            raise ShapeError(
                f"topk: k={k} is out of range for dimension {dim} of size {self.shape[d]}"
            )
        return self._with_indices("topk", int(k), d)

    # -- shape --------------------------------------------------------------------------------
    def reshape(self, shape: Sequence[int]) -> Tensor:
        """The same elements in ``shape``; one entry may be -1."""
        shape = _shape_arg(shape)
        target = _infer_shape("reshape", self.shape, shape)
        return self._call("reshape", target)

    view = reshape

    def transpose(self) -> Tensor:
        """Swap the last two dimensions (a tensor with fewer than 2 is returned unchanged)."""
        if self.ndim < 2:
            return self
        return self._call("swap_dims", self.ndim - 2, self.ndim - 1)

    @property
    def T(self) -> Tensor:  # noqa: N802
        return self.transpose()

    def swap_dims(self, dim1: int, dim2: int) -> Tensor:
        a = _normalize_dim("swap_dims", dim1, self.ndim)
        b = _normalize_dim("swap_dims", dim2, self.ndim)
        return self if a == b else self._call("swap_dims", a, b)

    def permute(self, dims: Sequence[int]) -> Tensor:
        ndim = self.ndim
        normalized = tuple(_normalize_dim("permute", d, ndim) for d in dims)
        if sorted(normalized) != list(range(ndim)):
            raise ShapeError(
                f"permute: {list(dims)} is not a permutation of the {ndim} dimensions of "
                f"{_shape_text(self.shape)}"
            )
        return self._call("permute", normalized)

    def flip(self, dims: Sequence[int]) -> Tensor:
        ndim = self.ndim
        normalized = tuple(_normalize_dim("flip", d, ndim) for d in _dims_arg(dims))
        if len(set(normalized)) != len(normalized):
            raise ShapeError(f"flip: dimensions {list(dims)} repeat")
        return self._call("flip", normalized) if normalized else self

    def expand(self, shape: Sequence[int]) -> Tensor:
        """Broadcast to ``shape`` (-1 keeps a dimension), without copying."""
        shape = _shape_arg(shape)
        own = self.shape
        if len(shape) < len(own):
            raise ShapeError(
                f"expand: cannot expand shape {_shape_text(own)} to fewer dimensions "
                f"{_shape_text(shape)}"
            )
        lead = len(shape) - len(own)
        target = tuple(own[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(shape))
        for i, n in enumerate(own):
            if n != 1 and n != target[lead + i]:
                raise ShapeError(
                    f"expand: dimension {i} of size {n} cannot expand to {target[lead + i]} "
                    f"({_shape_text(own)} -> {_shape_text(shape)})"
                )
        if any(n < 0 for n in target):
            raise ShapeError(f"expand: invalid target shape {_shape_text(shape)}")
        return self if target == own else self._call("expand", target)

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        return self.expand(shape)

    def repeat_dim(self, dim: int, times: int) -> Tensor:
        """Tile the tensor ``times`` times along ``dim``."""
        d = _normalize_dim("repeat_dim", dim, self.ndim)
        if not isinstance(times, numbers.Integral) or times < 0:
            raise ShapeError(f"repeat_dim: times must be a non-negative int, got {times!r}")
        return self if times == 1 else self._call("repeat_dim", d, int(times))

    def repeat(self, sizes: Sequence[int]) -> Tensor:
        """Tile the tensor ``sizes[d]`` times along each dimension ``d`` (PyTorch's ``repeat``,
        Burn's ``repeat``); extra leading sizes add dimensions."""
        sizes = _shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: {len(sizes)} sizes for a tensor with {self.ndim} dimensions")
        out = self.reshape((1,) * (len(sizes) - self.ndim) + self.shape)
        for dim, times in enumerate(sizes):
            out = out.repeat_dim(dim, times)
        return out

    def squeeze_dim(self, dim: int) -> Tensor:
        """Remove dimension ``dim``, which must have size 1."""
        shape = self.shape
        d = _normalize_dim("squeeze_dim", dim, len(shape))
        if shape[d] != 1:
            raise ShapeError(
                f"squeeze_dim: dimension {dim} has size {shape[d]}, expected 1 "
                f"(shape {_shape_text(shape)})"
            )
        return self._call("reshape", shape[:d] + shape[d + 1 :])

    def squeeze(self, dim: int | None = None) -> Tensor:
        if dim is not None:
            return self.squeeze_dim(dim)
        return self._call("reshape", tuple(n for n in self.shape if n != 1))

    def unsqueeze_dim(self, dim: int) -> Tensor:
        """Insert a dimension of size 1 at ``dim`` (negative counts from the output's end)."""
        shape = self.shape
        d = _normalize_dim("unsqueeze_dim", dim, len(shape), extra=1)
        return self._call("reshape", shape[:d] + (1,) + shape[d:])

    unsqueeze = unsqueeze_dim

    def flatten(self, start: int = 0, end: int = -1) -> Tensor:
        """Merge dimensions ``start..=end`` into one."""
        shape = self.shape
        if not shape:
            return self.reshape((1,))
        s = _normalize_dim("flatten", start, len(shape))
        e = _normalize_dim("flatten", end, len(shape))
        if s > e:
            raise ShapeError(f"flatten: start {start} comes after end {end}")
        merged = math.prod(shape[s : e + 1])
        return self._call("reshape", shape[:s] + (merged,) + shape[e + 1 :])

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        d = _normalize_dim("narrow", dim, self.ndim)
        size = self.shape[d]
        if start < 0:
            start += size
        if not (0 <= start <= size and length >= 0 and start + length <= size):
            raise ShapeError(
                f"narrow: start {start} and length {length} do not fit dimension {dim} of size "
                f"{size}"
            )
        return self._call("slice", (slice(None),) * d + (slice(start, start + length),))

    def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]:
        """Split into ``chunks`` pieces of ceil(size / chunks) (the last may be smaller)."""
        if not isinstance(chunks, numbers.Integral) or chunks <= 0:
            raise ShapeError(f"chunk: chunks must be a positive int, got {chunks!r}")
        d = _normalize_dim("chunk", dim, self.ndim)
        size = self.shape[d]
        step = builtins.max(1, -(-size // chunks))
        return [self.narrow(d, s, builtins.min(step, size - s)) for s in range(0, size, step)]

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> list[Tensor]:
        """Pieces of ``split_size`` along ``dim`` (the last may be smaller), or of each size."""
        d = _normalize_dim("split", dim, self.ndim)
        size = self.shape[d]
        if isinstance(split_size, numbers.Integral):
            if split_size <= 0:
                raise ShapeError(f"split: split_size must be positive, got {split_size}")
            sizes = [builtins.min(split_size, size - s) for s in range(0, size, split_size)]
        else:
            sizes = [int(n) for n in split_size]
            if sum(sizes) != size or any(n < 0 for n in sizes):
                raise ShapeError(f"split: sizes {sizes} do not add up to dimension size {size}")
        pieces, start = [], 0
        for n in sizes:
            pieces.append(self.narrow(d, start, n))
            start += n
        return pieces

    def unfold(self, dim: int, size: int, step: int) -> Tensor:
        """Sliding windows of ``size`` every ``step`` along ``dim``, as a new last dimension."""
        d = _normalize_dim("unfold", dim, self.ndim)
        length = self.shape[d]
        if size <= 0 or step <= 0 or size > length:
            raise ShapeError(
                f"unfold: window size {size} and step {step} do not fit dimension {dim} of size "
                f"{length}"
            )
        return self._call("unfold", d, int(size), int(step))

    # -- indexing -----------------------------------------------------------------------------
    def __getitem__(self, index: Any) -> Tensor:
        return _basic_index(self, index)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def slice(self, ranges: Sequence[Any]) -> Tensor:
        """Slice the leading dimensions: one ``(start, end)`` pair or ``slice`` per dimension.

        An end past the dimension's size is an error, as in Burn.

        >>> import retrograd as rg
        >>> rg.tensor([[1.0, 2.0, 3.0]]).slice([(0, 1), (1, 3)]).tolist()
        [[2.0, 3.0]]
        """
        return self._call("slice", _ranges("slice", self.shape, ranges))

    def slice_assign(self, ranges: Sequence[Any], values: Tensor) -> Tensor:
        """A copy with the sliced region replaced by ``values``."""
        slices = _ranges("slice_assign", self.shape, ranges)
        region = np.empty(self.shape, dtype=np.bool_)[slices].shape
        values = self._lift(values, "slice_assign")
        if values.shape != region:
            values = _broadcast_values("slice_assign", values, region)
        a, b, _ = self._pair(values, "slice_assign")
        return a._binary_with(b, "slice_assign", slices)

    def select(self, dim: int, indices: Tensor) -> Tensor:
        """Take the entries of ``indices`` (int64, 1-d) along ``dim``."""
        d = _normalize_dim("select", dim, self.ndim)
        indices = _index_tensor("select", self, indices, d, self.shape[d], one_dim=True)
        return self._binary_with(indices, "select", d)

    def select_assign(
        self, dim: int, indices: Tensor, values: Tensor, update: str = "add"
    ) -> Tensor:
        """A copy with ``values`` added to (``update="add"``) or written over (``"assign"``) the
        entries ``indices`` along ``dim``."""
        d = _normalize_dim("select_assign", dim, self.ndim)
        indices = _index_tensor("select_assign", self, indices, d, self.shape[d], one_dim=True)
        expected = self.shape[:d] + (indices.shape[0],) + self.shape[d + 1 :]
        values = self._lift(values, "select_assign")
        if values.shape != expected:
            raise ShapeError(
                f"select_assign: values have shape {_shape_text(values.shape)}, expected "
                f"{_shape_text(expected)} for {indices.shape[0]} indices along dimension {dim} "
                f"of {_shape_text(self.shape)}"
            )
        op = _update_op("select_assign", update, "select")
        a, b, _ = self._pair(values, "select_assign")
        return _ternary(a, indices, b, op, d)

    def gather(self, dim: int, indices: Tensor) -> Tensor:
        """``out[i][j] = self[i][indices[i][j]]`` along ``dim`` (PyTorch's ``gather``)."""
        d = _normalize_dim("gather", dim, self.ndim)
        indices = _index_tensor("gather", self, indices, d, self.shape[d])
        for axis, (n, m) in enumerate(zip(indices.shape, self.shape)):
            if axis != d and n > m:
                raise ShapeError(
                    f"gather: indices of shape {_shape_text(indices.shape)} exceed the input of "
                    f"shape {_shape_text(self.shape)} in dimension {axis}"
                )
        return self._binary_with(indices, "gather", d)

    def scatter(self, dim: int, indices: Tensor, values: Tensor, update: str = "add") -> Tensor:
        """A copy with ``values`` added at (``"add"``) or written to (``"assign"``) ``indices``
        along ``dim``; ``values`` has the shape of ``indices``."""
        d = _normalize_dim("scatter", dim, self.ndim)
        indices = _index_tensor("scatter", self, indices, d, self.shape[d])
        values = self._lift(values, "scatter")
        if values.shape != indices.shape:
            raise ShapeError(
                f"scatter: values of shape {_shape_text(values.shape)} must have the shape of "
                f"indices {_shape_text(indices.shape)}"
            )
        for axis, (n, m) in enumerate(zip(indices.shape, self.shape)):
            if axis != d and n > m:
                raise ShapeError(
                    f"scatter: indices of shape {_shape_text(indices.shape)} exceed the input of "
                    f"shape {_shape_text(self.shape)} in dimension {axis}"
                )
        op = _update_op("scatter", update, "scatter")
        a, b, _ = self._pair(values, "scatter")
        return _ternary(a, indices, b, op, d)

    def mask_where(self, mask: Tensor, values: Tensor) -> Tensor:
        """``values`` where ``mask`` is true, else ``self`` (broadcasting)."""
        mask = _mask_tensor("mask_where", self, mask)
        a, b, _ = self._pair(values, "mask_where")
        return _ternary(a, mask, b, "mask_where")

    def mask_fill(self, mask: Tensor, value: float) -> Tensor:
        """``value`` where ``mask`` is true, else ``self``."""
        mask = _mask_tensor("mask_fill", self, mask)
        value = _check_scalar("mask_fill", value)
        source = self
        if isinstance(value, float) and self.dtype not in FLOAT_DTYPES:
            source = self.cast("float32")
        return source._binary_with(mask, "mask_fill", value)


# -- module-level helpers ------------------------------------------------------------------------
def _scalar_value(value: Any, dtype: str) -> Any:
    if dtype in FLOAT_DTYPES:
        return float(value)
    if dtype == "int64":
        return int(value)
    return builtins.bool(value)


def _check_scalar(op: str, value: Any) -> Any:
    if not isinstance(value, _SCALARS):
        raise DTypeError(f"{op}: expected a Python scalar, got {type(value).__name__}")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _on_backend(t: Tensor, backend: Any, op: str) -> Tensor:
    """``t`` moved onto ``backend``: equal backends share primitives, and an inner-backend
    tensor lifts into its autodiff decorator untracked."""
    source = t._backend
    if source == backend:
        return Tensor(t._prim, backend, t._device)
    if backend.is_autodiff and backend.inner == source:
        return Tensor(backend.wrap(t._prim), backend, t._device)
    if source.is_autodiff and source.inner == backend:
        return Tensor(source.inner_value(t._prim), backend, t._device)
    raise RetrogradError(f"{op}: cannot combine tensors of {source!r} and {backend!r}")


def _shape_arg(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    try:
        return tuple(int(n) for n in shape)
    except TypeError:
        raise ShapeError(f"expected a shape (a sequence of ints), got {shape!r}") from None


def _dims_arg(dims: Any) -> tuple[int, ...]:
    return (dims,) if isinstance(dims, numbers.Integral) else tuple(dims)


def _infer_shape(op: str, own: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    count = math.prod(own)
    unknown = [i for i, n in enumerate(shape) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in shape):
        raise ShapeError(f"{op}: invalid shape {_shape_text(shape)}")
    if unknown:
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or count % known:
            raise ShapeError(
                f"{op}: cannot reshape {_shape_text(own)} ({count} elements) to "
                f"{_shape_text(shape)}"
            )
        shape = tuple(count // known if n == -1 else n for n in shape)
    if math.prod(shape) != count:
        raise ShapeError(
            f"{op}: cannot reshape {_shape_text(own)} ({count} elements) to {_shape_text(shape)}"
        )
    return shape


def _ranges(op: str, shape: tuple[int, ...], ranges: Sequence[Any]) -> tuple[slice, ...]:
    """Normalize one ``(start, end)`` pair or ``slice`` per leading dimension.

    As in Burn, ``start`` and ``end`` bound the range ``[start, end)`` whatever the step, and
    a negative step walks that range backwards from its last element: ``slice(0, 4, -2)``
    takes elements 3 and 1.
    """
    single_pair = (
        isinstance(ranges, tuple)
        and len(ranges) == 2
        and all(isinstance(v, numbers.Integral | type(None)) for v in ranges)
    )
    if isinstance(ranges, slice) or single_pair:
        ranges = [ranges]
    ranges = list(ranges)
    if len(ranges) > len(shape):
        raise ShapeError(
            f"{op}: {len(ranges)} ranges for a tensor with {len(shape)} dimensions "
            f"({_shape_text(shape)})"
        )
    slices = []
    for dim, (item, size) in enumerate(zip(ranges, shape)):
        if isinstance(item, slice):
            start, end, step = item.start, item.stop, item.step
        else:
            try:
                start, end = item
            except (TypeError, ValueError):
                raise ShapeError(
                    f"{op}: range {item!r} for dimension {dim} is neither (start, end) nor a slice"
                ) from None
            step = None
        step = 1 if step is None else int(step)
        if step == 0:
            raise ShapeError(f"{op}: step for dimension {dim} must not be zero")
        start = 0 if start is None else int(start)
        end = size if end is None else int(end)
        if start < 0:
            start += size
        if end < 0:
            end += size
        if not 0 <= start <= end <= size:
            raise ShapeError(
                f"{op}: range {start}..{end} is out of bounds for dimension {dim} of size {size} "
                f"(shape {_shape_text(shape)})"
            )
        if step > 0 or start == end:
            slices.append(slice(start, end, step))
        else:
            slices.append(slice(end - 1, start - 1 if start else None, step))
    return tuple(slices)


def _broadcast_values(op: str, values: Tensor, region: tuple[int, ...]) -> Tensor:
    try:
        if np.broadcast_shapes(values.shape, region) != region:
            raise ValueError
    except ValueError:
        raise ShapeError(
            f"{op}: values of shape {_shape_text(values.shape)} do not fit the region of shape "
            f"{_shape_text(region)}"
        ) from None
    return values.expand(region)


def _index_tensor(op: str, x: Tensor, indices: Any, dim: int, size: int, one_dim=False) -> Tensor:
    if not isinstance(indices, Tensor):
        indices = tensor(np.asarray(indices), backend=x._backend, device=x._device)
    else:
        indices = x._lift(indices, op)
    if indices.dtype != "int64":
        raise DTypeError(f"{op}: indices must be int64, got {indices.dtype}")
    if one_dim and indices.ndim != 1:
        raise ShapeError(f"{op}: indices must be 1-d, got shape {_shape_text(indices.shape)}")
    if not one_dim and indices.ndim != x.ndim:
        raise ShapeError(
            f"{op}: indices of shape {_shape_text(indices.shape)} must have as many dimensions "
            f"as the input of shape {_shape_text(x.shape)}"
        )
    bad = first_out_of_range(indices, size)
    if bad is not None:
        raise IndexOutOfRangeError(
            f"{op}: index {bad} is out of range for dimension {dim} of size {size} "
            f"(input shape {_shape_text(x.shape)})"
        )
    return indices


def first_out_of_range(indices: Tensor, size: int, ignore: int | None = None) -> int | None:
    """The first index outside ``[0, size)`` (skipping the value ``ignore``), or ``None``."""
    values = indices.numpy()
    if not values.size or (values.min() >= 0 and values.max() < size):
        return None
    bad = (values < 0) | (values >= size)
    if ignore is not None:
        bad &= values != ignore
    return int(values[bad].flat[0]) if bad.any() else None


def _mask_tensor(op: str, x: Tensor, mask: Any) -> Tensor:
    mask = x._lift(mask, op)
    if mask.dtype != "bool":
        raise DTypeError(f"{op}: mask must be a bool tensor, got {mask.dtype}")
    try:
        np.broadcast_shapes(mask.shape, x.shape)
    except ValueError:
        raise ShapeError(
            f"{op}: mask of shape {_shape_text(mask.shape)} does not broadcast with the tensor "
            f"of shape {_shape_text(x.shape)}"
        ) from None
    return mask


def _update_op(op: str, update: str, prefix: str) -> str:
    if update not in ("add", "assign"):
        raise InvalidArgumentError(f"{op}: update must be 'add' or 'assign', got {update!r}")
    return f"{prefix}_{update}"


def _ternary(a: Tensor, middle: Tensor, b: Tensor, op: str, *params: Any) -> Tensor:
    try:
        return a._wrap(getattr(a._backend, op)(a._prim, middle._prim, b._prim, *params))
    except RetrogradError:
        raise
    except (ValueError, IndexError, TypeError) as error:
        raise _translate(op, error, [a, middle, b]) from None


def _basic_index(t: Tensor, index: Any) -> Tensor:
    """``t[index]`` with ints, slices (positive steps), ``...`` and ``None``."""
    if not isinstance(index, tuple):
        index = (index,)
    if isinstance(index, tuple) and any(isinstance(i, Tensor | list | np.ndarray) for i in index):
        positions = [k for k, i in enumerate(index) if isinstance(i, Tensor | list | np.ndarray)]
        if len(positions) == 1 and all(
            isinstance(i, slice) and i == slice(None) for i in index[: positions[0]]
        ):
            indices = index[positions[0]]
            if not isinstance(indices, Tensor):
                indices = tensor(np.asarray(indices, dtype=np.int64), None, t._backend, t._device)
            selected = t.select(positions[0], indices)
            rest = (slice(None),) * (positions[0] + 1) + tuple(index[positions[0] + 1 :])
            return _basic_index(selected, rest) if len(rest) > positions[0] + 1 else selected
        raise IndexOutOfRangeError(
            "indexing: only one index tensor, after full slices, is supported; use gather/select"
        )
    shape = t.shape
    ellipses = sum(1 for i in index if i is Ellipsis)
    if ellipses > 1:
        raise IndexOutOfRangeError("indexing: an index can only have a single ellipsis ('...')")
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    if consumed > len(shape):
        raise IndexOutOfRangeError(
            f"indexing: too many indices ({consumed}) for a tensor of shape {_shape_text(shape)}"
        )
    if ellipses:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - consumed) + index[at + 1 :]
    else:
        index = index + (slice(None),) * (len(shape) - consumed)
    slices, out_shape, dim = [], [], 0
    for item in index:
        if item is None:
            out_shape.append(1)
            continue
        size = shape[dim]
        if isinstance(item, numbers.Integral) and not isinstance(item, bool):
            i = int(item)
            if not -size <= i < size:
                raise IndexOutOfRangeError(
                    f"indexing: index {i} is out of range for dimension {dim} of size {size}"
                )
            i %= size
            slices.append(slice(i, i + 1, 1))
        elif isinstance(item, slice):
            start, stop, step = item.indices(size)
            count = len(range(start, stop, step))
            if step < 0 and stop < 0:  # Python's "before the first element"
                stop = None
            slices.append(slice(start, stop, step))
            out_shape.append(count)
        else:
            raise IndexOutOfRangeError(f"indexing: unsupported index {item!r}")
        dim += 1
    out = t
    if any(s != slice(0, n, 1) for s, n in zip(slices, shape)):
        out = t._call("slice", tuple(slices))
    out_shape = tuple(out_shape)
    return out if out.shape == out_shape else out._call("reshape", out_shape)


# -- creation ------------------------------------------------------------------------------------
def _target(backend: Any, device: Any) -> tuple[Any, Device]:
    backend = backend if backend is not None else current_backend()
    return backend, CPU0 if device is None else Device(device)


def _check_dtype(op: str, dtype: str | None) -> None:
    if dtype is not None and dtype not in DTYPES:
        raise DTypeError(f"{op}: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")


def tensor(data: Any, dtype: str | None = None, backend: Any = None, device: Any = None) -> Tensor:
    """A tensor holding a copy of ``data`` (a scalar, nested lists or a NumPy array).

    Python numbers and nested lists default to float32 (bools to bool); a NumPy array keeps
    its dtype (float64 stays float64, other ints become int64).

    >>> import retrograd as rg
    >>> rg.tensor([[1, 2], [3, 4]]).dtype
    'float32'
    """
    _check_dtype("tensor", dtype)
    backend, device = _target(backend, device)
    if isinstance(data, Tensor):
        data = data.numpy()
    try:
        primitive = backend.from_data(data, dtype, device)
    except RetrogradError:
        raise
    except (ValueError, TypeError) as error:
        raise ShapeError(
            f"tensor: cannot make a tensor from {type(data).__name__}: {error}"
        ) from None
    return Tensor(primitive, backend, device)


def zeros(
    shape: Sequence[int], dtype: str = "float32", backend: Any = None, device: Any = None
) -> Tensor:
    """A tensor of zeros."""
    _check_dtype("zeros", dtype)
    backend, device = _target(backend, device)
    return Tensor(backend.zeros(_creation_shape("zeros", shape), dtype, device), backend, device)


def ones(
    shape: Sequence[int], dtype: str = "float32", backend: Any = None, device: Any = None
) -> Tensor:
    _check_dtype("ones", dtype)
    backend, device = _target(backend, device)
    return Tensor(backend.ones(_creation_shape("ones", shape), dtype, device), backend, device)


def full(
    shape: Sequence[int],
    value: Any,
    dtype: str | None = None,
    backend: Any = None,
    device: Any = None,
) -> Tensor:
    """A tensor filled with ``value`` (float32 for floats, int64 for ints, bool for bools)."""
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else (
            "int64" if isinstance(value, numbers.Integral) else "float32")  # fmt: skip
    _check_dtype("full", dtype)
    backend, device = _target(backend, device)
    return Tensor(
        backend.full(_creation_shape("full", shape), value, dtype, device), backend, device
    )


def zeros_like(t: Tensor) -> Tensor:
    return zeros(t.shape, t.dtype, t.backend, t.device)


def ones_like(t: Tensor) -> Tensor:
    return ones(t.shape, t.dtype, t.backend, t.device)


def eye(
    n: int, m: int | None = None, dtype: str = "float32", backend: Any = None, device: Any = None
) -> Tensor:
    """The identity matrix (``n`` by ``m``)."""
    _check_dtype("eye", dtype)
    if n < 0 or (m is not None and m < 0):
        raise ShapeError(f"eye: sizes must be non-negative, got {n} and {m}")
    backend, device = _target(backend, device)
    return Tensor(backend.eye(int(n), int(n if m is None else m), dtype, device), backend, device)


def arange(
    start: int, end: int | None = None, step: int = 1, dtype: str = "int64", backend: Any = None,
    device: Any = None,
) -> Tensor:  # fmt: skip
    """``start, start+step, ...`` below ``end``, int64 by default (``arange(n)`` counts from 0)."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ShapeError("arange: step must not be zero")
    _check_dtype("arange", dtype)
    backend, device = _target(backend, device)
    return Tensor(backend.arange(start, end, step, dtype, device), backend, device)


def random(
    shape: Sequence[int],
    distribution: str = "uniform",
    dtype: str = "float32",
    backend: Any = None,
    device: Any = None,
) -> Tensor:
    """Random values, ``"uniform"`` on [0, 1) or standard ``"normal"``; see :func:`seed`."""
    if distribution not in ("uniform", "normal"):
        raise InvalidArgumentError(
            f"random: distribution must be 'uniform' or 'normal', got {distribution!r}"
        )
    if dtype not in FLOAT_DTYPES:
        raise DTypeError(f"random: dtype must be a float dtype, got {dtype!r}")
    backend, device = _target(backend, device)
    shape = _creation_shape("random", shape)
    return Tensor(backend.random(shape, distribution, dtype, device), backend, device)


def seed(value: int) -> None:
    """Seed the generator behind :func:`random` and dropout, for reproducible runs."""
    current_backend().seed(int(value))


def _creation_shape(op: str, shape: Any) -> tuple[int, ...]:
    shape = _shape_arg(shape)
    if any(n < 0 for n in shape):
        raise ShapeError(f"{op}: negative dimension in shape {_shape_text(shape)}")
    return shape


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate along ``dim``; the other dimensions must match.

    >>> import retrograd as rg
    >>> rg.cat([rg.zeros((1, 2)), rg.ones((2, 2))], 0).shape
    (3, 2)
    """
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("cat: needs at least one tensor")
    first = tensors[0]
    lifted = [first] + [first._lift(t, "cat") for t in tensors[1:]]
    dtype = lifted[0].dtype
    for t in lifted[1:]:
        dtype = _result_dtype(dtype, t.dtype)
    lifted = [t.cast(dtype) for t in lifted]
    ndim = lifted[0].ndim
    d = _normalize_dim("cat", dim, ndim)
    reference = lifted[0].shape
    for t in lifted[1:]:
        shape = t.shape
        if len(shape) != ndim or any(
            a != b for axis, (a, b) in enumerate(zip(shape, reference)) if axis != d
        ):
            raise ShapeError(
                f"cat: shapes {', '.join(_shape_text(x.shape) for x in lifted)} differ outside "
                f"dimension {dim}"
            )
    backend = lifted[0]._backend
    return Tensor(backend.cat([t._prim for t in lifted], d), backend, first._device)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Stack equal-shaped tensors along a new dimension ``dim`` (negative counts from the
    output's end)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack: needs at least one tensor")
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        listed = ", ".join(_shape_text(s) for s in shapes)
        raise ShapeError(f"stack: all tensors need the same shape, got {listed}")
    d = _normalize_dim("stack", dim, tensors[0].ndim, extra=1)
    return cat([t.unsqueeze_dim(d) for t in tensors], d)
