"""Creation functions: tensors from host data, filled tensors, ranges, identity matrices and
random values.

Each takes ``dtype``, ``backend`` (default: the current backend, see
:func:`retrograd.use_backend`) and ``device`` (default ``cpu:0``), checks them, and asks the
backend for the primitive.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from ..context import current_backend
from ..device import CPU0, Device
from ..errors import DTypeError, InvalidArgumentError, ShapeError, shape_text
from ._dispatch import DTYPES, FLOAT_DTYPES, from_host
from .core import Tensor
from .shape import shape_arg

__all__ = [
    "arange",
    "eye",
    "full",
    "multinomial",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "random",
    "seed",
    "tensor",
    "zeros",
    "zeros_like",
]


def _target(backend: Any, device: Any) -> tuple[Any, Device]:
    backend = backend if backend is not None else current_backend()
    return backend, getattr(backend, "default_device", CPU0) if device is None else Device(device)


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
        data = data.numpy()  # a copy: the user's tensor may live on another backend
    return from_host(Tensor, data, dtype, backend, device)


def zeros(*args: Any, dtype: str = "float32", backend: Any = None, device: Any = None) -> Tensor:
    """A tensor of zeros: ``zeros((2, 3))`` or torch's ``zeros(2, 3, dtype=...)`` (see
    :func:`_leading_shape` for the positional forms)."""
    shape, dtype, backend, device = _leading_shape("zeros", args, dtype, backend, device)
    _check_dtype("zeros", dtype)
    backend, device = _target(backend, device)
    return Tensor(backend.zeros(shape, dtype, device), backend, device)


def ones(*args: Any, dtype: str = "float32", backend: Any = None, device: Any = None) -> Tensor:
    """A tensor of ones: ``ones((2, 3))`` or ``ones(2, 3)``."""
    shape, dtype, backend, device = _leading_shape("ones", args, dtype, backend, device)
    _check_dtype("ones", dtype)
    backend, device = _target(backend, device)
    return Tensor(backend.ones(shape, dtype, device), backend, device)


def full(
    shape: Sequence[int],
    value: Any,
    dtype: str | None = None,
    backend: Any = None,
    device: Any = None,
) -> Tensor:
    """A tensor filled with ``value`` (float32 for floats, int64 for ints, bool for bools)."""
    if dtype is None:
        dtype = (
            "bool"
            if isinstance(value, bool)
            else ("int64" if isinstance(value, numbers.Integral) else "float32")
        )
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
    start: int,
    end: int | None = None,
    step: int = 1,
    dtype: str = "int64",
    backend: Any = None,
    device: Any = None,
) -> Tensor:
    """``start, start+step, ...`` below ``end``, int64 by default (``arange(n)`` counts from 0)."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ShapeError("arange: step must not be zero")
    _check_dtype("arange", dtype)
    backend, device = _target(backend, device)
    return Tensor(backend.arange(start, end, step, dtype, device), backend, device)


def rand(*args: Any, dtype: str = "float32", backend: Any = None, device: Any = None) -> Tensor:
    """Uniform values on [0, 1) (``torch.rand``): ``rand(2, 3)`` or ``rand((2, 3))``."""
    shape, dtype, backend, device = _leading_shape("rand", args, dtype, backend, device)
    return random(shape, "uniform", dtype, backend, device)


def randn(*args: Any, dtype: str = "float32", backend: Any = None, device: Any = None) -> Tensor:
    """Standard normal values (``torch.randn``): ``randn(2, 3)`` or ``randn((2, 3))``."""
    shape, dtype, backend, device = _leading_shape("randn", args, dtype, backend, device)
    return random(shape, "normal", dtype, backend, device)


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


def multinomial(probs: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """int64 indices drawn from the categories of each row of ``probs`` (1-d, or 2-d with one
    distribution per row; weights need not sum to one), as ``torch.multinomial``.

    Draws come from the backend's seeded generator (:func:`seed`), on the backend: with
    ``replacement``, by inverting each row's cumulative distribution at uniform draws;
    without, by the Gumbel top-k trick (the ``num_samples`` largest of ``log p - log(-log u)``),
    which draws exactly as sampling one at a time without replacement does. Nothing is read on
    the host, so the values of ``probs`` are not checked (torch refuses negative or all-zero
    rows; here such rows give unspecified indices).

    >>> import retrograd as rg
    >>> rg.seed(0)
    >>> rg.multinomial(rg.tensor([0.0, 1.0, 0.0]), 2, replacement=True).tolist()
    [1, 1]
    """
    if not isinstance(probs, Tensor):
        raise DTypeError(f"multinomial: probs must be a tensor, got {type(probs).__name__}")
    if probs.dtype not in FLOAT_DTYPES:
        raise DTypeError(f"multinomial: probs must be a float tensor, got {probs.dtype}")
    if probs.ndim not in (1, 2) or probs.shape[-1] == 0:
        raise ShapeError(
            f"multinomial: probs must be 1-d or 2-d with at least one category, got shape "
            f"{shape_text(probs.shape)}"
        )
    if not isinstance(num_samples, numbers.Integral) or num_samples < 1:
        raise InvalidArgumentError(
            f"multinomial: num_samples must be a positive int, got {num_samples!r}"
        )
    categories = probs.shape[-1]
    if not replacement and num_samples > categories:
        raise InvalidArgumentError(
            f"multinomial: cannot draw {num_samples} samples without replacement from "
            f"{categories} categories (shape {shape_text(probs.shape)})"
        )
    p = probs.detach().float()
    rows = p if p.ndim == 2 else p.unsqueeze_dim(0)
    count = rows.shape[0]
    backend, device = p.backend, p.device
    if replacement:
        cdf = rows.cumsum(1)
        total = cdf.narrow(1, categories - 1, 1)  # [rows, 1]
        draws = random((count, int(num_samples)), "uniform", p.dtype, backend, device) * total
        # The index is how many cumulative weights lie at or below the draw (zero-weight
        # categories are never chosen: their cumulative weight equals the one before).
        below = cdf.unsqueeze_dim(1) <= draws.unsqueeze_dim(2)  # [rows, samples, categories]
        out = below.int().sum_dim(2).squeeze_dim(2).clamp_max(categories - 1)
    else:
        uniform = random((count, categories), "uniform", p.dtype, backend, device)
        # u in [0, 1): clamp away from 0 and 1 so both logs stay finite.
        gumbel = -(-(uniform.clamp(1e-20, 1.0 - 1e-7)).log()).log()
        # Zero-weight categories get key -inf (last, never drawn while others remain); the
        # clamp only keeps log from warning about the zeros the fill replaces.
        keys = (rows.clamp_min(1e-30).log() + gumbel).mask_fill(rows <= 0.0, -math.inf)
        out = keys.topk_with_indices(int(num_samples), 1)[1]
    return out if probs.ndim == 2 else out.squeeze_dim(0)


def _leading_shape(
    op: str, args: tuple[Any, ...], dtype: Any, backend: Any, device: Any
) -> tuple[tuple[int, ...], Any, Any, Any]:
    """Split a creation function's positional arguments: torch's varargs shape (leading ints,
    ``zeros(2, 3)``) or one shape sequence (``zeros((2, 3))``), then this library's positional
    ``dtype, backend, device`` (``zeros((2, 3), "float64")``) as before varargs existed."""
    if not args:
        raise ShapeError(f"{op}: missing the shape")
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
    return _creation_shape(op, shape), dtype, backend, device


def _creation_shape(op: str, shape: Any) -> tuple[int, ...]:
    shape = shape_arg(shape)
    if any(n < 0 for n in shape):
        raise ShapeError(f"{op}: negative dimension in shape {shape_text(shape)}")
    return shape
