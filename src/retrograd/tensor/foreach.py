"""torch's ``_foreach_*`` functions: one op over lists of tensors, as optimizers written for
torch call them in their multi-tensor paths (sail-sg's Adan with its default ``foreach=True``,
lion-pytorch's and timm's optimizers: ``torch._foreach_mul_(exp_avgs, beta1)``,
``torch._foreach_addcdiv_(params, exp_avgs, denom, value=-step_size)``).

Each is the tensor method of the same name applied to each tensor of the list in turn (so its
checks, dtype rules and in-place semantics are the method's); a second operand is one scalar
or tensor for all, or a list with one per tensor. torch's in-place forms return the list of
the tensors written (the list or tuple given, itself), the others a new tuple (as torch 2.13's:
``torch._foreach_norm(grads) + (total,)`` works, ``.append`` does not).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import DTypeError, InvalidArgumentError, ShapeError, guard, shape_text
from ._dispatch import TensorBase

#: torch's unary ``_foreach_`` ops: the method of each name (an in-place form each, ``name_``)
UNARY = (
    "abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
    "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round",
    "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
)  # fmt: skip
#: the binary ones (a scalar, a tensor, or a list of either as the second operand)
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "clamp_min", "clamp_max")
#: the ternary ones: ``(self, tensor1, tensor2, value)``, and ``lerp``'s ``(self, end, weight)``
TERNARY = ("addcmul", "addcdiv")


def _is_tensor(value: Any) -> bool:
    """A tensor, or a module's state-dict value (nn's ``StateValue``: an array that answers
    the tensor methods and whose in-place ones write into the module, as torch's state-dict
    tensors share the module's storage; timm's ``ModelEmaV3`` lerps a list of them)."""
    return isinstance(value, TensorBase) or (
        isinstance(value, np.ndarray) and callable(getattr(value, "copy_", None))
    )


def _tensors(op: str, tensors: Any, what: str = "self") -> list[Any]:
    if isinstance(tensors, TensorBase) or not isinstance(tensors, list | tuple):
        raise DTypeError(f"{op}: {what} must be a list of tensors, got {type(tensors).__name__}")
    bad = next((t for t in tensors if not _is_tensor(t)), None)
    if bad is not None:
        raise DTypeError(f"{op}: {what} must hold tensors only, got a {type(bad).__name__}")
    if not tensors:  # torch refuses an empty list rather than doing nothing
        raise InvalidArgumentError(f"{op}: {what} must have at least one tensor, got none")
    return list(tensors)


def _each(op: str, other: Any, count: int, what: str) -> list[Any]:
    """``other`` once per tensor: a list or tuple (one each, as many as the tensors), a 1-d
    tensor of scalars where torch takes ``scalars: Tensor`` (``value``), or one value for
    all."""
    if isinstance(other, list | tuple):
        if len(other) != count:
            raise InvalidArgumentError(
                f"{op}: tensor lists must have the same number of tensors, got {count} and "
                f"{len(other)} ({what})"
            )
        return list(other)
    return [other] * count


#: torch's ``_foreach_maximum(tensors, scalar)``: ``Tensor.maximum`` takes tensors only
_SCALAR_FORMS = {"maximum": "clamp_min", "minimum": "clamp_max"}


def _written(given: Any) -> Any:
    """What torch's in-place forms return: the list (or tuple) given itself."""
    return given


def _call(t: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``t.method(*args)``; an in-place ``method`` tensors lack (torch has ``_foreach_maximum_``
    but no ``Tensor.maximum_``) as the out-of-place one copied into ``t``."""
    scalar_form = _SCALAR_FORMS.get(method.rstrip("_"))
    if scalar_form is not None and args and not isinstance(args[0], TensorBase):
        method = scalar_form + ("_" if method.endswith("_") else "")
    if method.endswith("_") and not hasattr(t, method):
        return t.copy_(getattr(t, method[:-1])(*args, **kwargs))
    return getattr(t, method)(*args, **kwargs)


def _unary(name: str, in_place: bool) -> Callable[..., Any]:
    method = name + "_" if in_place else name
    op = f"_foreach_{method}"

    def foreach(self: Any) -> Any:
        tensors = _tensors(op, self)
        results = [_call(t, method) for t in tensors]
        return _written(self) if in_place else tuple(results)

    foreach.__name__ = foreach.__qualname__ = op
    foreach.__doc__ = f"``[t.{method}() for t in self]``{' in place' if in_place else ''}."
    return foreach


def _binary(name: str, in_place: bool) -> Callable[..., Any]:
    method = name + "_" if in_place else name
    op = f"_foreach_{method}"

    def foreach(
        self: Any, other: Any = None, *, scalar: Any = None, scalars: Any = None, **kwargs: Any
    ) -> Any:
        # torch's overloads name the operand: ``other`` (tensors), ``scalar``, ``scalars``
        given = [x for x in (other, scalar, scalars) if x is not None]
        if len(given) != 1:
            raise InvalidArgumentError(
                f"{op}: expected one of other, scalar or scalars, got {len(given)}"
            )
        other = given[0]
        if name == "pow" and not in_place and not isinstance(self, list | tuple):
            # torch's ``_foreach_pow(scalar, exponents)``: one base to each tensor's power
            return tuple(self**t for t in _tensors(op, other, "exponent"))
        tensors = _tensors(op, self)
        if kwargs and not isinstance(other, list | tuple | TensorBase):
            # torch's scalar overloads take no ``alpha``; only a tensor (list) is scaled
            raise DTypeError(
                f"{op}: {', '.join(kwargs)} needs a tensor or a list of tensors "
                f"as other, got {type(other).__name__}"
            )
        others = _each(op, other, len(tensors), "other")
        results = [_call(t, method, o, **kwargs) for t, o in zip(tensors, others)]
        return _written(self) if in_place else tuple(results)

    foreach.__name__ = foreach.__qualname__ = op
    foreach.__doc__ = (
        f"``t.{method}(other, **kwargs)`` for each tensor (``other`` one for all or a list)."
    )
    return foreach


def _ternary(name: str, in_place: bool) -> Callable[..., Any]:
    method = name + "_" if in_place else name
    op = f"_foreach_{method}"

    def foreach(self: Any, tensor1: Any, tensor2: Any, value: Any = 1, scalars: Any = None) -> Any:
        tensors = _tensors(op, self)
        firsts = _each(op, _tensors(op, tensor1, "tensor1"), len(tensors), "tensor1")
        seconds = _each(op, _tensors(op, tensor2, "tensor2"), len(tensors), "tensor2")
        if scalars is not None:  # torch's name of the list (or tensor) form of ``value``
            value = scalars
        if isinstance(value, TensorBase):  # torch's ``scalars: Tensor``: one value each
            if value.ndim != 1:
                raise ShapeError(
                    f"{op}: a tensor of scalars must be 1-d, got shape {shape_text(value.shape)}"
                )
            value = value.tolist()
        values = _each(op, value, len(tensors), "value")
        results = [
            getattr(t, method)(a, b, value=v)
            for t, a, b, v in zip(tensors, firsts, seconds, values)
        ]
        return _written(self) if in_place else tuple(results)

    foreach.__name__ = foreach.__qualname__ = op
    foreach.__doc__ = f"``t.{method}(t1, t2, value=v)`` for each tensor."
    return foreach


def _lerp(in_place: bool) -> Callable[..., Any]:
    method = "lerp_" if in_place else "lerp"
    op = f"_foreach_{method}"

    def foreach(self: Any, tensors1: Any, weight: Any) -> Any:
        tensors = _tensors(op, self)
        ends = _each(op, _tensors(op, tensors1, "tensors1"), len(tensors), "tensors1")
        weights = _each(op, weight, len(tensors), "weight")
        results = [getattr(t, method)(e, w) for t, e, w in zip(tensors, ends, weights)]
        return _written(self) if in_place else tuple(results)

    foreach.__name__ = foreach.__qualname__ = op
    foreach.__doc__ = f"``t.{method}(end, weight)`` for each tensor."
    return foreach


def _foreach_zero_(self: Any) -> Any:
    """``t.zero_()`` for each tensor."""
    tensors = _tensors("_foreach_zero_", self)
    for t in tensors:
        t.zero_()
    return _written(self)


def _foreach_copy_(self: Any, src: Any, non_blocking: bool = False) -> Any:
    """``t.copy_(s)`` for each pair."""
    tensors = _tensors("_foreach_copy_", self)
    sources = _each("_foreach_copy_", _tensors("_foreach_copy_", src, "src"), len(tensors), "src")
    for t, s in zip(tensors, sources):
        t.copy_(s)
    return _written(self)


def _foreach_norm(self: Any, ord: Any = 2, dtype: Any = None) -> tuple[Any, ...]:  # noqa: A002
    """The vector norm of each tensor (``torch.linalg.vector_norm(t, ord)``)."""
    from .norms import vector_norm

    return tuple(vector_norm(t, ord, dtype=dtype) for t in _tensors("_foreach_norm", self))


def functions() -> dict[str, Callable[..., Any]]:
    """Every ``_foreach_`` function by name (of the methods tensors have)."""
    from .core import Tensor

    made: dict[str, Callable[..., Any]] = {}
    for kinds, build in ((UNARY, _unary), (BINARY, _binary), (TERNARY, _ternary)):
        for name in kinds:
            for in_place in (False, True):
                if hasattr(Tensor, name):  # (an in-place form by the method's copy: _call)
                    f = build(name, in_place)
                    made[f.__name__] = f
    for in_place in (False, True):
        f = _lerp(in_place)
        made[f.__name__] = f
    for f in (_foreach_zero_, _foreach_copy_, _foreach_norm):
        made[f.__name__] = f
    # an argument no check foresaw (an unknown keyword) still gets the hierarchy's error
    return {name: guard(name, f) for name, f in made.items()}
