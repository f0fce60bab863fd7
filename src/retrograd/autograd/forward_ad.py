"""torch's ``torch.autograd.forward_ad``: dual tensors (a primal and its tangent) whose
tangents flow through ordinary code, as the forward-mode AD tutorial writes it::

    with fwAD.dual_level():
        dual_input = fwAD.make_dual(primal, tangent)
        dual_output = fn(dual_input, plain_tensor)
        jvp = fwAD.unpack_dual(dual_output).tangent

Retrograd records reverse mode only, so a dual tensor is a tensor of the graph (computed from
a hidden leaf, or a copy still connected to a primal that requires grad) that the open level
remembers with its tangent, and :func:`unpack_dual` computes a tensor's tangent when asked: the
Jacobian-vector product with the tangents of every dual it depends on, by the double-backward
trick that :func:`retrograd.func.jvp` uses (the values of forward mode, at the cost of two
backward passes the first time a tensor is unpacked; the level keeps the pair, so unpacking
the same tensor again costs nothing and gives the same tangent, as torch's stored one;
differentiable again, as torch's tangents, when a primal, a tangent or a tensor closed over
requires grad). Tangents are read only through :func:`unpack_dual`; outside a level, or for a
tensor no dual reaches, the tangent is ``None``, as torch's. As in torch, tangents flow
through ops run under ``no_grad`` (an op whose inputs carry a tangent is recorded there all
the same, so its result reports ``requires_grad``, where torch's does not). Unlike torch's,
tangents need the graph: none flows once a backward has consumed the graph (which
:func:`unpack_dual` then says), an in-place op on a dual does not write the primal it was made
from, and the primal :func:`unpack_dual` gives of a tensor that depends on parameters (so that
a loss on it trains them, as torch's) still carries the tangent to ops on it inside the level.
A custom ``Function`` with a ``jvp`` has it called for the tangents of its outputs, as torch's
forward mode calls it (with a ``backward`` too, the transposition pass records ``backward``
with ``jvp`` as its transpose; ``backward`` alone is differentiated); one with a ``jvp`` and no
``backward`` (forward mode only) has its outputs made new duals, cut from the graph as no
reverse mode through it exists.

>>> import retrograd as rg
>>> import retrograd.autograd.forward_ad as fwAD
>>> with fwAD.dual_level():
...     x = fwAD.make_dual(rg.tensor([1.0, 2.0]), rg.tensor([1.0, 0.0]))
...     fwAD.unpack_dual(x * x).tangent.tolist()
[2.0, 0.0]
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections import namedtuple
from collections.abc import Iterator
from typing import Any

from ..autodiff import enable_grad, is_grad_enabled
from ..autodiff.grad_mode import FORWARD_TANGENTS
from ..errors import AutodiffError, DTypeError, ShapeError, shape_text
from ..tensor import Tensor, ones_like, zeros_like
from .functional import _fresh, _gradients

__all__ = ["UnpackedDualTensor", "dual_level", "enter_dual_level", "exit_dual_level",
           "make_dual", "unpack_dual"]  # fmt: skip

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


class _Level:
    """One open dual level: its duals with their tangents, in the order made."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.duals: list[_Dual] = []
        #: node id -> whether a dual's seed is in its graph, for ops run under ``no_grad``
        self.carrying: dict[int, bool] = {}
        #: (id of a tensor's primitive, whether its tangent is recorded) -> (the primitive,
        #: its node then, what :func:`unpack_dual` gave for it)
        self.tangents: dict[tuple[int, bool], tuple[Any, Any, UnpackedDualTensor]] = {}

    def carries(self, parents: tuple) -> bool:
        """Whether one of ``parents`` (nodes of an op's inputs) has a dual's seed in its
        graph: a walk remembered per node, so a forward under ``no_grad`` pays once per node."""
        known = self.carrying
        for d in self.duals:
            if d.seed._prim.node is not None:
                known.setdefault(d.seed._prim.node.id, True)
        return any(start is not None and _reaches_known(known, start) for start in parents)


def _reaches_known(known: dict[int, bool], start: Any) -> bool:
    """Whether ``start``'s graph holds a node ``known`` says is a seed: a post-order walk
    that records the answer of every node it decides."""
    stack = [(start, False)]
    while stack:
        node, expanded = stack.pop()
        if node.id in known:
            continue
        if node.op is None:  # a leaf that is no seed
            known[node.id] = False
        elif expanded:
            known[node.id] = any(known.get(p.id, False) for p in node.parents if p is not None)
        else:
            stack.append((node, True))
            stack.extend((p, False) for p in node.parents if p is not None and p.id not in known)
    return known[start.id]


class _Dual:
    """A dual made by :func:`make_dual`: the tensor handed out, the hidden tensor tangents are
    taken with respect to (the dual is computed from it, so that an in-place update of the
    dual is recorded and its tangent follows), the tangent, the tensor given to
    :func:`make_dual` and the primitive the dual held when made (it is replaced by an
    in-place update)."""

    def __init__(self, dual: Tensor, seed: Tensor, tangent: Tensor, primal: Tensor) -> None:
        self.dual = dual
        self.seed = seed
        self.tangent = tangent
        self.primal = primal
        self.made_prim = dual._prim

    def unchanged(self, tensor: Tensor) -> bool:
        """Whether ``tensor`` is this dual, not updated in place since it was made."""
        return tensor is self.dual and tensor._prim is self.made_prim


#: the open levels of this context, innermost last (torch allows one at a time)
_LEVELS: contextvars.ContextVar[tuple[_Level, ...]] = contextvars.ContextVar(
    "retrograd_dual_levels", default=()
)


#: whether this context is in :func:`unpack_dual`'s first pass, whose recorded backward is
#: transposed: a custom function with its own ``jvp`` records that as its backward's transpose
_TRANSPOSING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "retrograd_transposing_for_tangents", default=False
)


def transposing_for_tangents() -> bool:
    """Whether the backward running now is :func:`unpack_dual`'s transposition pass."""
    return _TRANSPOSING.get()


def enter_dual_level() -> int:
    """Open a dual level and return its index (torch's; one level at a time)."""
    levels = _LEVELS.get()
    if levels:
        raise AutodiffError(
            "enter_dual_level: a dual level is already open; nested forward AD levels are not "
            "supported (as in torch)"
        )
    opened = _Level(len(levels))
    _LEVELS.set((*levels, opened))
    _tangent_test_opened()
    return len(levels)


#: dual levels open now, in all threads (each thread, each context, opens its own)
_OPEN_LEVELS = [0]
_OPEN_LOCK = threading.Lock()


def _tangent_test_opened() -> None:
    """A dual level opened: the recording path's test of tangents under ``no_grad``
    (``grad_mode.FORWARD_TANGENTS``) is installed while any thread has a level open. It
    answers from the calling thread's own levels, so it is harmless to threads without one.
    Installed and removed per level instead, a thread closing its level removed it under
    another thread still inside its own: that thread's ops on duals under ``no_grad`` then
    recorded nothing, and their tangents came back ``None`` (torch's: the dual's tangent)."""
    with _OPEN_LOCK:
        _OPEN_LEVELS[0] += 1
        FORWARD_TANGENTS[0] = _carries_in_open_level


def _tangent_test_closed() -> None:
    """A dual level closed: the test goes when no thread has a level open (ops under
    ``no_grad`` then pay nothing for forward AD)."""
    with _OPEN_LOCK:
        _OPEN_LEVELS[0] -= 1
        if _OPEN_LEVELS[0] <= 0:
            _OPEN_LEVELS[0] = 0
            FORWARD_TANGENTS[0] = None


def _carries_in_open_level(parents: tuple) -> bool:
    """The test ``no_grad`` recording asks (``grad_mode.FORWARD_TANGENTS``): whether an op's
    parents carry a tangent of this context's open level."""
    levels = _LEVELS.get()
    if not levels or not levels[-1].duals or _PAUSED.get():
        return False
    return levels[-1].carries(parents)


#: inside a custom function's ``forward``: no tangent flows there (torch's forward AD skips
#: it too; the function's ``jvp``, or its recorded node, gives its outputs' tangents)
_PAUSED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "retrograd_tangents_paused", default=False
)


@contextlib.contextmanager
def tangents_paused() -> Iterator[None]:
    """No op run inside records for a tangent under ``no_grad``."""
    token = _PAUSED.set(True)
    try:
        yield
    finally:
        _PAUSED.reset(token)


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
    _tangent_test_closed()


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
    if _has_tangent(opened, tensor):
        raise AutodiffError(
            f"make_dual: the {shape_text(tensor.shape)} tensor already has a tangent at dual "
            f"level {opened.index} (it is a dual or computed from one); make the dual from "
            "a tensor without one, e.g. unpack_dual(tensor).primal, as in torch"
        )
    with enable_grad():
        seed = _fresh(tensor, True, "make_dual")
        # a leaf seed is kept hidden: the dual, computed from it, is no leaf, so in-place ops
        # on the dual are recorded (as torch's, where a dual does not require grad)
        dual = seed.clone() if seed.is_leaf else seed
    opened.duals.append(_Dual(dual, seed, tangent, tensor))
    return dual


def _has_tangent(opened: _Level, tensor: Tensor) -> bool:
    """Whether ``tensor`` is a dual of the level or computed from one."""
    if any(d.dual is tensor or d.seed is tensor for d in opened.duals):
        return True
    return bool(_reached(opened, tensor))


def _reached(opened: _Level, tensor: Tensor) -> bool | None:
    """Whether the graph of ``tensor`` holds a dual's seed (a walk, no arithmetic); ``None``
    when a backward consumed part of it."""
    if not tensor.requires_grad or not opened.duals:
        return False
    return tensor._backend.reaches([tensor._prim], [d.seed._prim for d in opened.duals])


def unpack_dual(tensor: Any, *, level: int | None = None) -> UnpackedDualTensor:
    """``(primal, tangent)`` of ``tensor``: the tangent given to :func:`make_dual` for a dual,
    the Jacobian-vector product with the duals' tangents for a tensor computed from duals, and
    ``None`` for a tensor no dual reaches or outside a dual level. The primal of a tensor with
    a tangent carries none (as torch's): the tensor given to :func:`make_dual` for an
    unchanged dual, else the tensor's values detached."""
    if not isinstance(tensor, Tensor):
        raise DTypeError(f"unpack_dual: expected a tensor, got {type(tensor).__name__}")
    opened = _open_level("unpack_dual", level)
    if opened is None:
        return UnpackedDualTensor(tensor, None)
    for made in opened.duals:
        if made.unchanged(tensor):
            return UnpackedDualTensor(made.primal, made.tangent)
    # (where a backward consumed the graph, the backward below says so)
    if not tensor.is_float() or _reached(opened, tensor) is False:
        return UnpackedDualTensor(tensor, None)
    seeds = [d.seed for d in opened.duals]
    # torch's tangent is differentiable (reverse over forward: the Hessian-vector product as
    # the gradient of a tangent) when a primal, a tangent or a tensor closed over requires
    # grad; the hidden seeds do not count
    # the primal stays differentiable in reverse mode where it depends on something that
    # requires grad (a module's parameters: sliced score matching trains on it), as torch's
    differentiable = is_grad_enabled() and tensor._backend.reaches_other_leaves(
        [tensor._prim], [s._prim for s in seeds]
    )
    records = differentiable or (
        is_grad_enabled() and any(d.tangent.requires_grad for d in opened.duals)
    )
    prim = tensor._prim
    key = (id(prim), records)
    known = opened.tangents.get(key)
    # unpacked before, and not changed in place since (which gives the primitive a new node):
    # its tangent, as torch hands out the one it stores (no second pair of passes)
    if known is not None and known[0] is prim and known[1] is prim.node:
        return known[2]
    unpacked = _tangent_of(opened, tensor, seeds, differentiable, records)
    # the primitive itself is held: its id stays its own while the entry lives
    opened.tangents[key] = (prim, prim.node, unpacked)
    return unpacked


def _tangent_of(
    opened: _Level, tensor: Tensor, seeds: list[Tensor], differentiable: bool, records: bool
) -> UnpackedDualTensor:
    """:func:`unpack_dual`'s computed pair: the Jacobian-vector product by two backward
    passes, the first transposed (``unpack_dual`` has no forward rules to run)."""
    with enable_grad():
        # J^T u for a dummy u (the backward is linear in u), whose gradient with respect to u,
        # weighted by the tangents, is J t; u is ones, not zeros: a backward written in log
        # space (logcumsumexp's, log|u|) has no derivative at u = 0
        dummy = ones_like(tensor).require_grad()
        token = _TRANSPOSING.set(True)
        try:
            transposed = _gradients([tensor], seeds, [dummy], create_graph=True)
        finally:
            _TRANSPOSING.reset(token)
        reached = [(g, d.tangent) for g, d in zip(transposed, opened.duals) if g is not None]
        if not reached:
            return UnpackedDualTensor(tensor, None)
        grads, weights = zip(*reached)
        if not records:
            weights = [w.detach() for w in weights]
        (jvp,) = _gradients(list(grads), [dummy], list(weights), records)
    if jvp is None:
        tangent = zeros_like(tensor)
    else:
        tangent = jvp if records else jvp.detach()
    # (a differentiable primal is the tensor itself here: its graph reaches the duals' seeds,
    # so ops on it inside the level still carry their tangents, where torch's do not)
    return UnpackedDualTensor(tensor if differentiable else tensor.detach(), tangent)


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
    ctx._in_jvp = True
    try:
        out_tangents = cls.jvp(ctx, *tangents)
    finally:
        ctx._in_jvp = False
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
