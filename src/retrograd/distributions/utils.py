"""Helpers the distributions share: parameters broadcast to one shape and dtype, and the
clamp that keeps probabilities off 0 and 1 (torch's ``distributions.utils``)."""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from ..autodiff import enable_grad
from ..errors import InvalidArgumentError, ShapeError, shape_text
from ..tensor import tensor
from ..tensor.dtypes import default_float_dtype, finfo

__all__ = [
    "BinaryProbsOrLogits",
    "binary_cross_entropy_with_logits",
    "broadcast_all",
    "clamp_probs",
    "lazy_property",
    "logits_to_probs",
    "probs_to_logits",
    "tiny",
    "tril_matrix_to_vec",
    "vec_to_tril_matrix",
]


class lazy_property:  # noqa: N801  (torch's name)
    """torch's decorator for a distribution's derived parameter (``scale_tril``, ``probs``):
    computed on first reading, under grad mode so that it stays differentiable even when first
    read under ``no_grad``, then stored on the instance in place of the descriptor."""

    def __init__(self, wrapped: Callable[[Any], Any]) -> None:
        self.wrapped = wrapped
        functools.update_wrapper(self, wrapped)  # type: ignore[arg-type]

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return property(self.wrapped)  # (on the class: a property, as torch's)
        with enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


class BinaryProbsOrLogits:
    """For a distribution given ``probs`` or ``logits`` of one event (Bernoulli, Binomial,
    Geometric...): it keeps the one given (in ``__dict__``, set by its ``__init__``) and
    derives the other on its first reading, under grad mode, then keeps it: torch's
    ``lazy_property`` of ``probs``/``logits``. Built under ``no_grad`` from ``logits`` that
    require grad, the ``probs`` first read with grad enabled (or inside ``no_grad``, as
    torch's) stay differentiable in the ``logits``, where a derivation at construction
    would have cut them off."""

    def __getattr__(self, name: str) -> Any:
        known = self.__dict__
        if name == "probs" and "logits" in known:
            derive = functools.partial(logits_to_probs, known["logits"], is_binary=True)
        elif name == "logits" and "probs" in known:
            derive = functools.partial(probs_to_logits, known["probs"], is_binary=True)
        else:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        with enable_grad():
            value = derive()
        known[name] = value
        return value


def _tril_mask(n: int, diag: int, device: Any) -> Any:
    rows = np.arange(n)
    return tensor(rows[None, :] < rows[:, None] + (diag + 1), device=device)


def tril_matrix_to_vec(mat: Any, diag: int = 0) -> Any:
    """The lower-triangular entries (below the ``diag``-th diagonal, inclusive) of a (batch
    of) square matrix, row by row."""
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise InvalidArgumentError(
            f"tril_matrix_to_vec: diag ({diag}) provided is outside [{-n}, {n - 1}]."
        )
    return mat[..., _tril_mask(n, diag, mat.device)]


def vec_to_tril_matrix(vec: Any, diag: int = 0) -> Any:
    """The (batch of) square lower-triangular matrix whose entries (below the ``diag``-th
    diagonal, inclusive), row by row, are ``vec``'s last dimension."""
    length = vec.shape[-1]
    root = (
        -(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * length + 4 * abs(diag) * (diag + 1)) ** 0.5
    ) / 2
    n = round(root)
    if abs(root - n) > 1e-9:
        raise ShapeError(
            f"vec_to_tril_matrix: the size of last dimension is {length} which cannot be "
            "expressed as the lower triangular part of a square D x D matrix."
        )
    mat = vec.new_zeros(tuple(vec.shape[:-1]) + (n, n))
    mat[..., _tril_mask(n, diag, vec.device)] = vec
    return mat


def broadcast_all(*values: Any) -> tuple[Any, ...]:
    """Tensors and numbers broadcast to one shape; numbers take the tensors' float dtype
    (torch's default dtype, ``rg.get_default_dtype()``, when all are numbers)."""
    tensors = [v for v in values if hasattr(v, "shape")]
    floats = [t for t in tensors if t.is_float()]
    dtype = floats[0].dtype if floats else default_float_dtype()
    device = tensors[0].device if tensors else None
    lifted = []
    for v in values:
        if isinstance(v, numbers.Number):
            v = tensor(float(v), dtype=dtype, device=device)
        elif not hasattr(v, "shape"):
            v = tensor(v, dtype=dtype, device=device)
        elif not v.is_float():
            v = v.cast(dtype)
        lifted.append(v)
    shapes = [tuple(v.shape) for v in lifted]
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(
            f"broadcast_all: parameters of shapes {', '.join(shape_text(s) for s in shapes)} "
            f"do not broadcast together"
        ) from None
    return tuple(v if tuple(v.shape) == shape else v.expand(shape) for v in lifted)


def as_value(value: Any, like: Any) -> Any:
    """``value`` as a tensor of ``like``'s float dtype (numbers and lists lifted)."""
    if hasattr(value, "shape"):
        return value
    return tensor(value, dtype=like.dtype, device=like.device)


def tiny(t: Any) -> float:
    return finfo(t.dtype).tiny


def eps(t: Any) -> float:
    return finfo(t.dtype).eps


def clamp_probs(probs: Any) -> Any:
    """``probs`` clamped into ``[eps, 1 - eps]``."""
    e = eps(probs)
    return probs.clamp(e, 1 - e)


def probs_to_logits(probs: Any, is_binary: bool = False) -> Any:
    clamped = clamp_probs(probs)
    if is_binary:
        return clamped.log() - (-clamped).log1p()
    return clamped.log()


def logits_to_probs(logits: Any, is_binary: bool = False) -> Any:
    return logits.sigmoid() if is_binary else logits.softmax(-1)


def binary_cross_entropy_with_logits(logits: Any, target: Any) -> Any:
    """Elementwise ``-target log sigmoid(logits) - (1 - target) log sigmoid(-logits)``, the
    form of ``nn.functional.binary_cross_entropy_with_logits`` (which this layer may not
    import): its gradient is ``sigmoid(logits) - target`` everywhere, where the overflow-free
    ``clamp(min=0) + log1p(exp(-|x|))`` spelling takes the kinks' one-sided gradients at a zero
    logit."""
    return (1.0 - target) * logits - logits.log_sigmoid()
