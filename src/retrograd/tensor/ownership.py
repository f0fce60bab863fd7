"""Who references a tensor's memory: whether an in-place op may write into the buffer itself.

retrograd's primitives never change (a value saved for backward, a gradient or a copy someone
kept must keep its values); an in-place op gives the tensor object a new primitive. Writing
the new values into the old buffer instead, as torch's in-place ops do, saves an array and a
pass over memory (on large parameters, fresh arrays cost more in page faults than the
arithmetic), and nobody can tell the difference when nothing but the tensors being written
references that buffer. Python's reference counts say so: a graph that saved the value, a
``Gradients`` entry, a detached alias, a NumPy view (which holds its base), ``numpy()``, a
capture's constant each hold one, and the backend says whether another array or tensor shares
the memory (``Backend.owns_memory``). Counts are read by attribute or item access (a new
reference, on every CPython), against :data:`HELD_ONCE`, the count of an object one slot holds
read the same way.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from ..errors import DTypeError, InvalidArgumentError
from ._dispatch import TensorBase
from .links import base_of

__all__ = ["HELD_ONCE", "count", "sole_buffer", "swap_tensors"]


def count(x: Any) -> int:
    return sys.getrefcount(x)


# The count of an object that one slot of a container holds, read as ``count(box[0])``: the
# baseline of every count, which reads a slot the same way (``count(owner.attribute)``,
# ``count(mapping[key])``), so it holds on any CPython, whatever a call adds to the count.
_box = [object()]
HELD_ONCE = count(_box[0])
del _box

#: View kinds that alias the whole of their base's values (see :mod:`.views`).
_WHOLE = ("data", "detach")


def _written_together(t: Any) -> list[Any] | None:
    """``t``, the tensors it was taken from by ``.data``/``detach()`` up to its root, and the
    live views taken from those by ``.data``/``detach()`` (theirs too): the tensors an in-place
    write of ``t`` gives the new values, each holding (or having held) ``t``'s buffer; ``None``
    where another kind of view takes part (a slice, a transpose: its own array, which may
    share the memory)."""
    group = [t]
    view = getattr(t, "_view", None)
    while view is not None:
        if view[1] not in _WHOLE:
            return None
        t = base_of(view)
        if t is None:  # a detached tensor whose base is gone
            break
        group.append(t)
        view = getattr(t, "_view", None)
    seen = {id(x) for x in group}
    pending = list(group)
    while pending:
        base = pending.pop()
        for r in getattr(base, "_views", None) or ():
            child = r()
            if child is None or id(child) in seen:
                continue
            view = getattr(child, "_view", None)
            if view is None or base_of(view) is not base:
                continue
            if view[1] not in _WHOLE:
                return None
            seen.add(id(child))
            group.append(child)
            pending.append(child)
    return group


def _sink_holds(x: Any) -> bool:
    """Whether ``x`` was read from a ``Gradients`` (``p.grad(grads)``) that still holds its
    primitive: the write goes back there (:func:`.views.write`), so that entry is no other
    reader."""
    sink = getattr(x, "_grad_sink", None)
    return sink is not None and sink[0].get(sink[1]) is x._prim


def sole_buffer(t: Any) -> list[Any] | None:
    """The tensors that share ``t``'s buffer (:func:`_written_together`) when nothing else
    references it, so that an in-place write of ``t`` may go into the buffer itself; ``None``
    otherwise.

    Each tensor of the group that holds the buffer holds it through its own primitive (on an
    autodiff backend, a primitive nothing else references, whose inner value is the buffer), a
    ``Gradients`` entry it was read from aside; the buffer's references are exactly those, and
    its memory is its own (no other array or tensor over it).
    """
    group = _written_together(t)
    if group is None:
        return None
    backend = t._backend
    holders = 0
    if backend.is_autodiff:
        inner_value = backend.inner_value
        for x in group:
            if inner_value(x._prim) is not inner_value(t._prim):
                continue  # (refreshed from the root after the write)
            if count(x._prim) != HELD_ONCE + _sink_holds(x):
                return None
            holders += 1
        if count(inner_value(t._prim)) != HELD_ONCE + holders - 1:
            return None
        return group if backend.inner.owns_memory(inner_value(t._prim)) else None
    for x in group:
        if x._prim is t._prim:
            holders += 1 + _sink_holds(x)
    if count(t._prim) != HELD_ONCE + holders - 1:
        return None
    return group if backend.owns_memory(t._prim) else None


#: what makes a tensor's value (the slots torch's ``_swap_tensor_impl`` exchanges)
_VALUE_SLOTS = ("_backend", "_device", "_prim")


def _shares_storage(t: Any) -> bool:
    """Whether ``t`` is a view, or a base some live view was taken from."""
    if getattr(t, "_view", None) is not None:
        return True
    return any(r() is not None for r in getattr(t, "_views", None) or ())


def swap_tensors(t1: Any, t2: Any) -> None:
    """torch's ``torch.utils.swap_tensors``: the two tensor objects exchange their class
    (``Parameter`` or plain tensor), attributes and values, each keeping its identity, so
    every name bound to ``t1`` sees what ``t2`` held, and the other way round. As torch's, it
    refuses a view, a base of live views and a tensor something holds a weak reference to,
    whose holders would otherwise find the other tensor's values."""
    for name, t in (("t1", t1), ("t2", t2)):
        if not isinstance(t, TensorBase):
            raise DTypeError(f"swap_tensors: {name} must be a tensor, got {type(t).__name__}")
        if _shares_storage(t):  # (torch refuses these too: its use count is above one)
            raise InvalidArgumentError(
                f"swap_tensors: cannot swap {name}: it is a view or the base of live views, "
                "which would then alias the other tensor"
            )
        if weakref.getweakrefs(t):
            raise InvalidArgumentError(
                f"swap_tensors: cannot swap {name}: something holds a weak reference to it "
                "(registered somewhere that tracks it)"
            )
    if t1 is t2:
        return
    t1.__class__, t2.__class__ = t2.__class__, t1.__class__
    t1.__dict__, t2.__dict__ = t2.__dict__, t1.__dict__
    for slot in _VALUE_SLOTS:
        descriptor = TensorBase.__dict__[slot]
        first, second = descriptor.__get__(t1), descriptor.__get__(t2)
        descriptor.__set__(t1, second)
        descriptor.__set__(t2, first)
