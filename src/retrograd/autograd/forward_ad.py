"""torch's ``torch.autograd.forward_ad``: dual tensors (a primal and its tangent) whose
tangents flow through ordinary code, as the forward-mode AD tutorial writes it::

    with fwAD.dual_level():
        dual_input = fwAD.make_dual(primal, tangent)
        dual_output = fn(dual_input, plain_tensor)
        jvp = fwAD.unpack_dual(dual_output).tangent

Retrograd records reverse mode only, so a dual tensor is a tensor of the graph (a fresh leaf,
or a copy still connected to a primal that requires grad) that the open level remembers with
its tangent, and :func:`unpack_dual` computes a tensor's tangent when asked: the
Jacobian-vector product with the tangents of every dual it depends on, by the double-backward
trick that :func:`retrograd.func.jvp` uses (the values of forward mode, at the cost of two
backward passes per unpack). Tangents are read only through :func:`unpack_dual`; outside a
level, or for a tensor no dual reaches, the tangent is ``None``, as torch's. Under grad mode
a tangent that depends on something requiring grad (a module's parameters, a primal or a
tangent that requires grad) is itself differentiable in reverse mode, as torch's, so a JVP
can be a training objective's term. (Unlike torch's, tangents need grad mode: under
``no_grad`` nothing is recorded, so a tensor computed there has no tangent.) A custom
``Function`` with a ``backward`` has it differentiated (its ``jvp`` is not needed); one with a
``jvp`` and no ``backward`` (forward mode only) has its ``jvp`` called when an argument
carries a tangent, and its outputs are new duals, cut from the graph as no reverse mode
through it exists.

>>> import retrograd as rg
>>> import retrograd.autograd.forward_ad as fwAD
>>> with fwAD.dual_level():
...     x = fwAD.make_dual(rg.tensor([1.0, 2.0]), rg.tensor([1.0, 0.0]))
...     fwAD.unpack_dual(x * x).tangent.tolist()
[2.0, 0.0]
"""

from __future__ import annotations

import contextvars
from collections import namedtuple
from typing import Any

from ..autodiff import enable_grad, is_grad_enabled
from ..errors import AutodiffError, DTypeError, ShapeError, shape_text
from ..tensor import Tensor, zeros_like
from .functional import _fresh, _gradients

__all__ = ["UnpackedDualTensor", "dual_level", "enter_dual_level", "exit_dual_level",
           "make_dual", "unpack_dual"]  # fmt: skip

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


class _Level:
    """One open dual level: its duals with their tangents, in the order made."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.duals: list[tuple[Tensor, Tensor]] = []


#: the open levels of this context, innermost last (torch allows one at a time)
_LEVELS: contextvars.ContextVar[tuple[_Level, ...]] = contextvars.ContextVar(
    "retrograd_dual_levels", default=()
)


def enter_dual_level() -> int:
    """Open a dual level and return its index (torch's; one level at a time)."""
    levels = _LEVELS.get()
    if levels:
        raise AutodiffError(
            "enter_dual_level: a dual level is already open; nested forward AD levels are not "
            "supported (as in torch)"
        )
    _LEVELS.set((*levels, _Level(len(levels))))
    return len(levels)


def exit_dual_level(*, level: int | None = None) -> None:
    """Close the innermost dual level (``level``: its index, checked): its duals are plain
    tensors again (their tangents are ``None``)."""
    levels = _LEVELS.get()
    if not levels:
        raise AutodiffError("exit_dual_level: no dual level is open")
    if level is not None and level != levels[-1].index:
        raise AutodiffError(
            f"exit_dual_level: level {level} is not the innermost open level ({levels[-1].index})"
        )
    _LEVELS.set(levels[:-1])


class dual_level:  # noqa: N801 (torch's name)
    """Context manager opening a dual level for :func:`make_dual` and :func:`unpack_dual`."""

    def __enter__(self) -> int:
        return enter_dual_level()

    def __exit__(self, *exc: Any) -> None:
        exit_dual_level()


def _open_level(op: str, level: int | None) -> _Level | None:
    levels = _LEVELS.get()
    if not levels:
        return None
    if level is not None and level != levels[-1].index:
        raise AutodiffError(f"{op}: level {level} is not the open dual level")
    return levels[-1]


def make_dual(tensor: Tensor, tangent: Tensor, *, level: int | None = None) -> Tensor:
    """A dual tensor holding ``tensor``'s values whose tangent is ``tangent`` (same shape,
    float): a new tensor, still differentiable with respect to ``tensor`` in reverse mode when
    that requires grad. Only inside a :class:`dual_level`."""
    opened = _open_level("make_dual", level)
    if opened is None:
        raise AutodiffError(
            "make_dual: no dual level is open; make dual tensors inside "
            "`with forward_ad.dual_level():`"
        )
    for name, value in (("tensor", tensor), ("tangent", tangent)):
        if not isinstance(value, Tensor):
            raise DTypeError(
                f"make_dual: expected {name} to be a tensor, got {type(value).__name__}"
            )
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise ShapeError(
            f"make_dual: the tangent has shape {shape_text(tangent.shape)}, expected "
            f"{shape_text(tensor.shape)} (the primal's)"
        )
    if not tangent.is_float():
        raise DTypeError(f"make_dual: expected a float tangent, got {tangent.dtype}")
    with enable_grad():
        dual = _fresh(tensor, True, "make_dual")
    opened.duals.append((dual, tangent))
    return dual


def unpack_dual(tensor: Any, *, level: int | None = None) -> UnpackedDualTensor:
    """``(primal, tangent)`` of ``tensor``: the tangent given to :func:`make_dual` for a dual,
    the Jacobian-vector product with the duals' tangents for a tensor computed from duals, and
    ``None`` for a tensor no dual reaches or outside a dual level."""
    opened = _open_level("unpack_dual", level)
    if opened is None or not isinstance(tensor, Tensor):
        return UnpackedDualTensor(tensor, None)
    for dual, tangent in opened.duals:
        if dual is tensor:
            return UnpackedDualTensor(tensor, tangent)
    if not tensor.requires_grad or not tensor.is_float() or not opened.duals:
        return UnpackedDualTensor(tensor, None)
    duals, tangents = zip(*opened.duals)
    # torch's tangent is differentiable in reverse mode, as any value computed under grad
    # mode: a JVP regularizer trains the parameters it passes through. It records when
    # something it depends on requires grad: a tangent, a dual's primal, or a tensor the
    # computation closes over (a module's parameters).
    records = is_grad_enabled() and (
        any(t.requires_grad for t in tangents)
        or not all(d.is_leaf for d in duals)
        or tensor._backend.reaches_other_leaves([tensor._prim], [d._prim for d in duals])
    )
    with enable_grad():
        # J^T u for a dummy u (the backward is linear in u), whose gradient with respect to u,
        # weighted by the tangents, is J t
        dummy = zeros_like(tensor).require_grad()
        transposed = _gradients([tensor], list(duals), [dummy], create_graph=True)
        reached = [(g, t) for g, t in zip(transposed, tangents) if g is not None]
        if not reached:
            return UnpackedDualTensor(tensor, None)
        grads, weights = zip(*reached)
        weights = weights if records else [w.detach() for w in weights]
        (jvp,) = _gradients(list(grads), [dummy], list(weights), records)
    if jvp is None:
        return UnpackedDualTensor(tensor, zeros_like(tensor))
    return UnpackedDualTensor(tensor, jvp if records else jvp.detach())


def dual_outputs(cls: Any, ctx: Any, args: tuple, output: Any) -> Any:
    """The outputs of a custom function ``cls`` with a ``jvp`` and no ``backward`` as duals,
    their tangents ``cls.jvp(ctx, *input_tangents)`` (zeros for a float argument without one);
    ``None`` where no argument carries a tangent (no open level, no dual reaches them)."""
    opened = _open_level("Function.apply", None)
    if opened is None:
        return None
    tangents = [unpack_dual(a).tangent if isinstance(a, Tensor) else None for a in args]
    if all(t is None for t in tangents):
        return None
    tangents = [
        zeros_like(a) if t is None and isinstance(a, Tensor) and a.is_float() else t
        for a, t in zip(args, tangents)
    ]
    out_tangents = cls.jvp(ctx, *tangents)
    outputs = output if isinstance(output, tuple) else (output,)
    out_tangents = out_tangents if isinstance(out_tangents, tuple) else (out_tangents,)
    if len(out_tangents) != len(outputs):
        raise AutodiffError(
            f"function {cls.__name__}.jvp returned {len(out_tangents)} tangents for "
            f"{len(outputs)} outputs"
        )
    duals = tuple(
        make_dual(o, t) if isinstance(o, Tensor) and t is not None else o
        for o, t in zip(outputs, out_tangents)
    )
    return duals if isinstance(output, tuple) else duals[0]
