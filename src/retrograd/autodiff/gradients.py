"""The gradients container: the value ``backward()`` returns."""

from __future__ import annotations

import numbers
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import AutodiffError, DTypeError
from .graph import CAPTURED, Node

__all__ = ["Gradients", "held_by_live_gradients"]

#: Every ``Gradients`` not yet collected, for :func:`held_by_live_gradients`.
_LIVE: weakref.WeakSet = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def held_by_live_gradients(key: int) -> bool:
    """Whether some ``Gradients`` still alive holds a gradient under ``key``: a tensor that
    in-place writes made a fresh leaf forgets its old leaf's key only when nothing can hand
    it a gradient under that key any more."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    return any(key in gradients.values for gradients in live)


class Gradients:
    """Gradients by node, as Burn's ``Gradients``.

    During backward, :meth:`register` accumulates every contribution and :meth:`consume` hands
    a node's gradient to its backward step: an intermediate's is removed then (its memory goes
    with it), a leaf's (or a ``retain_grad()`` node's) stays. Afterwards it holds the gradients
    of the leaves that require grad, read with ``tensor.grad(grads)``.

    ``backend`` is the backend the gradient primitives belong to (the inner backend, or the
    autodiff backend itself after ``backward(create_graph=True)``). ``on_register`` hooks are
    called with ``(node, gradients)`` after every registration; :attr:`remaining` tells, for
    each node of the walked graph, how many contributions it still expects, so a hook knows the
    moment a gradient is final (data-parallel training launches its all-reduce there).
    """

    __slots__ = (
        "__weakref__",
        "backend",
        "device",
        "hooked",
        "in_place",
        "kept",
        "leaf_groups",
        "on_register",
        "owned",
        "peak_bytes",
        "recomputed_bytes",
        "recomputed_ops",
        "remaining",
        "values",
    )

    def __init__(self, backend: Any, device: Any = None, remaining: dict[int, int] | None = None):
        self.values: dict[int, Any] = {}
        with _LIVE_LOCK:
            _LIVE.add(self)
        self.backend = backend
        self.device = device
        self.remaining = remaining if remaining is not None else {}
        self.on_register: list[Callable[[Node, Gradients], None]] = []
        #: bytes of outputs the checkpointer recomputed during this backward
        self.recomputed_bytes = 0
        #: op executions the checkpointer spent recomputing during this backward
        self.recomputed_ops = 0
        #: activation bytes held for backward at the worst moment of forward + backward
        self.peak_bytes = 0
        #: whether sums may be accumulated in place (backward sets it, except with
        #: ``create_graph``, whose gradients are recorded values)
        self.in_place = False
        #: node id -> the gradient sum this object allocated and alone holds (a sum of
        #: contributions, or a fresh slice gradient): only those are added into in place.
        #: Intermediates only: each is dropped when its node's step reads it, so nothing is
        #: left here after backward (a leaf's gradient, which hooks may take or replace as
        #: soon as it is final, is always summed into a new array)
        self.owned: dict[int, Any] = {}
        #: ids of recorded nodes whose gradient is a result too (``backward(inputs=)``'s
        #: non-leaf inputs), kept when their step reads it, as a leaf's
        self.kept: frozenset[int] = frozenset()
        #: ids of the leaves whose tensor hooks have run (once their gradient was final)
        self.hooked: set[int] = set()
        #: the nodes this backward walks (set by the engine while it runs, for
        #: :meth:`run_leaf_hooks`), then the groups found in them: node id -> the leaves
        #: sharing that leaf's tensor hooks (one tensor's, in-place writes made it fresh
        #: leaves), for the leaves with such company, and the ids of those already final
        self.leaf_groups: Any = None

    def register(self, node: Node, value: Any, fresh: bool = False) -> None:
        """Add ``value`` to the gradient of ``node``; ``fresh``: ``value`` is a new array that
        nothing else references (a slice's gradient), which may then be added into."""
        values = self.values
        node_id = node.id
        old = values.get(node_id)
        if old is None:
            values[node_id] = value
            if fresh and self.in_place and node.op is not None:
                self.owned[node_id] = value
        elif self.in_place and node.op is not None:
            # a second contribution makes a new sum, which later ones are added into
            if self.owned.get(node_id) is old:
                total = self.backend.accumulate(old, value)
            elif fresh:
                total = self.backend.accumulate(value, old)
            else:
                total = self.backend.add(old, value)
            values[node_id] = self.owned[node_id] = total
        else:
            values[node_id] = self.backend.add(old, value)
        if self.on_register:  # tested here, not in _registered: a frame per gradient saved
            self._registered(node)

    def absent(self, node: Node) -> None:
        """A contribution to ``node``'s gradient that carries nothing (a custom function's
        ``backward`` returned ``None`` for it, as torch's leaves ``.grad`` undefined): nothing
        is added, but the hooks count it as arrived, so a gradient that no other path
        reaches is known final (and a data-parallel bucket does not wait for it)."""
        if self.on_register:
            self._registered(node)

    def owned_sum(self, node: Node) -> Any:
        """The gradient sum of ``node`` if this object allocated it and alone holds it (so a
        contribution may be added into it), else ``None``."""
        value = self.owned.get(node.id)
        return value if value is not None and self.values.get(node.id) is value else None

    def replace_sum(self, node: Node, value: Any) -> None:
        """Register ``value``, the sum of ``node``'s gradient and a new contribution made by
        adding that contribution into :meth:`owned_sum`'s array."""
        self.values[node.id] = self.owned[node.id] = value
        if self.on_register:
            self._registered(node)

    def _registered(self, node: Node) -> None:
        """Count the registration down and call the ``on_register`` hooks (there are some).
        A leaf's tensor hooks run first, the moment its gradient is final, so that what the
        ``on_register`` hooks take (data parallel's all-reduce) is the hooked gradient."""
        left = self.remaining.get(node.id)
        if left is not None:
            self.remaining[node.id] = left - 1
            if left == 1 and node.op is None and node.hooks is not None:
                self.run_leaf_hooks(node)
        for hook in self.on_register:
            hook(node, self)

    def run_leaf_hooks(self, node: Node) -> None:
        """Run the tensor hooks of the leaf ``node``, whose gradient is final now. A leaf that
        in-place writes (under ``no_grad``) replaced by fresh ones shares its hooks with
        them (one tensor's): torch's tensor has one gradient, so the hooks run once, when the
        last of those this backward reaches is final, on their gradients' sum, which is then
        kept under that last one's key alone (``Tensor.grad`` reads the tensor's former keys
        too)."""
        if node.id in self.hooked:
            return
        groups = self.leaf_groups
        if not isinstance(groups, tuple):  # first leaf hooks of this backward: group them
            groups = self.leaf_groups = (_groups_sharing_hooks(groups or ()), set())
        group = groups[0].get(node.id)
        if group is None:
            self.run_hooks(node, self.values.get(node.id))
            return
        final = groups[1]
        final.add(node.id)
        if any(member.id not in final for member in group):
            return  # (another of the tensor's leaves may still get a contribution)
        total = None
        for member in group:  # oldest first: the sum's order of a single leaf's sum
            part = self.values.pop(member.id, None)
            if part is not None:
                total = part if total is None else self.backend.add(total, part)
            self.hooked.add(member.id)
        if total is not None:
            self.values[node.id] = total
            self.run_hooks(node, total)

    def run_hooks(self, node: Node, value: Any) -> Any:
        """``node``'s gradient ``value`` through its tensor hooks (``register_hook``'s), in the
        order they were registered. A leaf's or a retained gradient is the hooked one, as
        torch runs ``retain_grad``'s hook last; a non-leaf input of ``backward(inputs=)``
        whose step runs (an input below it wants a gradient) keeps the gradient it received,
        as torch's ``autograd.grad`` captures it before the tensor's hooks then (the engine
        stores the hooked one where the step does not run)."""
        if value is None:
            return None
        self.hooked.add(node.id)
        # torch's autograd.grad captures the gradient tensor itself: what hooks write into it
        # in place (and return None) shows in the captured one, until a hook returns another
        aliased = node.op is not None and node.retain == CAPTURED
        for hook in list(node.hooks.values()):
            value = hook(self.backend, value)
            if aliased and getattr(hook, "kept_its_argument", (False,))[0]:
                self.values[node.id] = value
            else:
                aliased = False
        if node.op is None or node.retain is True:  # (not autograd.grad's CAPTURED)
            self.values[node.id] = value
        return value

    def consume(self, node: Node) -> Any:
        """The gradient of ``node`` for its backward step (``None`` if nothing reached it).
        (The engine's ``_step`` inlines this for recorded nodes: keep the two alike.)"""
        if self.owned:  # from here on it is read: no longer added into
            self.owned.pop(node.id, None)
        if node.op is None or node.retain or node.id in self.kept:  # a result: kept
            return self.values.get(node.id)
        return self.values.pop(node.id, None)

    # -- by node id, for the tensor API -----------------------------------------------------
    def get(self, node_id: int) -> Any:
        return self.values.get(node_id)

    def remove(self, node_id: int) -> Any:
        return self.values.pop(node_id, None)

    def replace(self, node_id: int, value: Any) -> None:
        self.values[node_id] = value

    def __len__(self) -> int:
        return len(self.values)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.values

    def __repr__(self) -> str:
        return f"Gradients({len(self.values)} tensors)"

    # -- arithmetic, for gradient accumulation -----------------------------------------------
    def _like(self, values: dict[int, Any]) -> Gradients:
        """A new, finished ``Gradients`` on this backend holding ``values`` (no hooks)."""
        result = Gradients(self.backend, self.device)
        result.values = values
        return result

    def __add__(self, other: object) -> Gradients:
        """The sum of two gradient sets, for accumulation over micro-batches.

        The result holds the union of both sets of tensors: a tensor with a gradient in both
        gets the sum, a tensor with a gradient in only one keeps that one (a missing gradient
        counts as zero, as when torch accumulates into ``.grad`` and a parameter took no part
        in one of the backward passes). Neither operand changes. Both must hold gradients on
        the same backend (an ``AutodiffError`` otherwise), or one on an autodiff backend (a
        ``backward(create_graph=True)``'s) and the other on its inner one (a plain
        backward's, as a gradient penalty's): the sum is then on the autodiff backend.

        >>> import retrograd as rg
        >>> w = rg.tensor([1.0, 2.0]).require_grad()
        >>> total = (w * 3).sum().backward() + (w * w).sum().backward()
        >>> w.grad(total).tolist()
        [5.0, 7.0]
        """
        if isinstance(other, numbers.Number) and other == 0:
            return self._like(dict(self.values))  # sum(list_of_gradients) starts from 0
        if not isinstance(other, Gradients):
            # an error of the hierarchy, not NotImplemented: Python's own TypeError would
            # speak of sequences (``[1] + grads``) or name no operation
            raise DTypeError(
                f"Gradients +: adds another Gradients (or 0), got {type(other).__name__}"
            )
        if other.backend != self.backend and _lifts_into(other.backend, self.backend):
            other = other._lifted(self.backend)
        elif other.backend != self.backend and _lifts_into(self.backend, other.backend):
            return self._lifted(other.backend) + other
        if other.backend != self.backend:
            raise AutodiffError(
                f"Gradients +: the operands hold gradients on different backends "
                f"({self.backend!r} and {other.backend!r})"
            )
        add = self.backend.add
        values = dict(self.values)
        for node_id, value in other.values.items():
            old = values.get(node_id)
            values[node_id] = value if old is None else add(old, value)
        result = self._like(values)
        result.recomputed_bytes = self.recomputed_bytes + other.recomputed_bytes
        return result

    __radd__ = __add__

    def _lifted(self, backend: Any) -> Gradients:
        """These gradients on ``backend``: plain values of its inner backend wrapped
        untracked (a ``backward(create_graph=True)`` holds recorded ones, a plain backward
        not, and a gradient penalty adds the two)."""
        if backend == self.backend:
            return self
        result = Gradients(backend, self.device)
        result.values = {node_id: backend.wrap(v) for node_id, v in self.values.items()}
        result.recomputed_bytes = self.recomputed_bytes
        return result

    def __mul__(self, scale: object) -> Gradients:
        """Every gradient multiplied by the number ``scale`` (e.g. ``1 / accumulation_steps``);
        dtypes are kept."""
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
            raise DTypeError(f"Gradients *: scales by a number, got {type(scale).__name__}")
        mul = self.backend.mul_scalar
        factor = float(scale)
        return self._like({node_id: mul(value, factor) for node_id, value in self.values.items()})

    __rmul__ = __mul__

    def __truediv__(self, divisor: object) -> Gradients:
        if isinstance(divisor, bool) or not isinstance(divisor, numbers.Real):
            raise DTypeError(f"Gradients /: divides by a number, got {type(divisor).__name__}")
        if divisor == 0:
            raise AutodiffError("Gradients /: division by zero")
        return self * (1.0 / float(divisor))


def _lifts_into(inner: Any, autodiff: Any) -> bool:
    """Whether ``inner``'s values wrap untracked into ``autodiff``'s: it decorates ``inner``."""
    return bool(getattr(autodiff, "is_autodiff", False)) and autodiff.inner == inner


def _groups_sharing_hooks(walk: Any) -> dict[int, tuple[Node, ...]]:
    """Node id -> the leaves of ``walk`` sharing its tensor hooks (the very same dict: one
    tensor's leaves, see ``Autodiff.succeed_leaf``), oldest first, for those with company."""
    by_hooks: dict[int, list[Node]] = {}
    for node in walk:
        if node.op is None and node.hooks is not None:
            by_hooks.setdefault(id(node.hooks), []).append(node)
    groups: dict[int, tuple[Node, ...]] = {}
    for members in by_hooks.values():
        if len(members) > 1:
            ordered = tuple(sorted(members, key=lambda member: member.id))
            for member in ordered:
                groups[member.id] = ordered
    return groups
