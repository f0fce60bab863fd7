"""What torch's ``p.grad`` would hold between optimizer steps, kept as a mark on the parameter
(gradients are a value here, fresh at every backward; torch's stay on the parameters): "held"
(a step had a gradient for it, or a backward gave it one before it joined an optimizer),
"zero" (``optimizer.zero_grad(set_to_none=False)`` zeroed it), absent: None. A parameter that
keeps a zero is stepped with it where a step gives it no gradient (momentum, weight decay and
Adam's moments move it, as torch's), and clipping reaches that zero (torch's ``0 * nan``).

The mark lives on the parameter, as torch's ``.grad`` does, so that every optimizer over it
(one made from a state-dict round trip, a ``ZeroRedundancyOptimizer``'s shard, a captured
step's replay) and ``nn.utils``'s clipping see it: they take it from here, below them all."""

from __future__ import annotations

from typing import Any

from ..autodiff.gradients import held_by_live_gradients
from .core import Tensor
from .creation import zeros_like

__all__ = [
    "forget_gradient",
    "keeps_zero_gradient",
    "kept_zero_gradient",
    "mark_gradient_held",
    "mark_gradient_joined",
    "zero_kept_gradient",
]

#: the parameter's ``__dict__`` entry holding the mark
_GRAD_KEPT = "_optimizer_grad_kept"


def mark_gradient_held(parameter: Tensor) -> None:
    """A step had a gradient for ``parameter`` (torch's ``p.grad`` now holds one)."""
    parameter.__dict__[_GRAD_KEPT] = "held"


def mark_gradient_joined(parameter: Tensor) -> None:
    """``parameter`` joins an optimizer: a gradient that some ``Gradients`` still alive holds
    for it is torch's ``p.grad``, set by a backward before it joined."""
    if _GRAD_KEPT not in parameter.__dict__ and _has_live_gradient(parameter):
        mark_gradient_held(parameter)


def zero_kept_gradient(parameter: Tensor) -> None:
    """``zero_grad(set_to_none=False)``: a parameter that had a gradient keeps a zero."""
    if parameter.__dict__.get(_GRAD_KEPT) is not None:
        parameter.__dict__[_GRAD_KEPT] = "zero"


def forget_gradient(parameter: Tensor) -> None:
    """``zero_grad()`` (``set_to_none=True``): torch's ``p.grad`` is None again."""
    parameter.__dict__.pop(_GRAD_KEPT, None)


def keeps_zero_gradient(parameter: Tensor) -> bool:
    """Whether torch's ``p.grad`` of ``parameter`` is a zero kept by
    ``zero_grad(set_to_none=False)``: a step without a gradient for it steps it with zeros."""
    return parameter.__dict__.get(_GRAD_KEPT) == "zero"


def kept_zero_gradient(parameter: Tensor, grads: Any) -> Tensor | None:
    """The zero gradient torch keeps in ``p.grad`` after ``zero_grad(set_to_none=False)``,
    for a parameter that has none in ``grads``: put into ``grads`` and returned, so that what
    changes the gradients before the step (``clip_grad_norm_``'s NaN factor, torch's
    ``0 * nan``) changes it as torch's does; ``None`` for a parameter without one, or frozen
    (``requires_grad_(False)``: no gradient of it can be put in ``grads``; its step takes
    the zero as it is)."""
    if not (keeps_zero_gradient(parameter) and parameter.requires_grad):
        return None
    parameter.grad_replace(grads, zeros_like(parameter.inner()))
    return parameter.grad(grads)


def _has_live_gradient(parameter: Tensor) -> bool:
    """Whether some ``Gradients`` still alive holds a gradient of ``parameter`` (torch's
    ``p.grad`` is not None: a backward gave it one)."""
    if not parameter.backend.is_autodiff:
        return False
    key = parameter.backend.grad_key(parameter.primitive)
    keys = [key, *(former.key for former in parameter._former_keys)]
    return any(k is not None and held_by_live_gradients(k) for k in keys)
