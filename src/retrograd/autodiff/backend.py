"""The autodiff backend decorator: the backend protocol over autodiff primitives.

``Autodiff(inner)`` implements every protocol method by running the inner backend on the inner
primitives and, when an input is tracked, recording a node with what the op's backward rules
will read. Its op methods are generated from the op table (:mod:`.ops`), so an op is declared
once and this class holds no per-op code.
"""

from __future__ import annotations

from typing import Any

from ..backend.numpy_backend import NumpyBackend
from ..backend.protocol import Backend
from ..errors import AutodiffError
from . import nn_ops, runtime  # noqa: F401  (nn_ops declares the nn ops into OPS)
from .checkpoint import RECOMPUTE, CheckpointStrategy, NoCheckpointing, run_forward
from .graph import AutodiffPrimitive, Node, new_node_id
from .ops import OPS, Op

__all__ = ["Autodiff"]

_FLOAT_DTYPES = ("float32", "float64")
_TRACKED = (True,)


class Autodiff(Backend):
    """Backend decorator adding reverse-mode autodiff to ``inner``.

    >>> import retrograd as rg
    >>> B = rg.Autodiff(rg.NumpyBackend(), checkpointing=rg.BalancedCheckpointing())
    >>> x = rg.tensor([1.0, 2.0], backend=B).require_grad()
    >>> (x * x).sum().backward()  # doctest: +ELLIPSIS
    Gradients(...)
    """

    is_autodiff = True

    def __init__(
        self, inner: Backend | None = None, checkpointing: CheckpointStrategy | None = None
    ):
        self.inner = inner if inner is not None else NumpyBackend()
        self.checkpointing = checkpointing if checkpointing is not None else NoCheckpointing()
        if not isinstance(self.checkpointing, CheckpointStrategy):
            raise TypeError(
                f"Autodiff: checkpointing must be a CheckpointStrategy, got {checkpointing!r}"
            )
        self._recomputes = self.checkpointing.recomputes

    @property
    def name(self) -> str:
        return f"autodiff<{self.inner.name}>"

    def __repr__(self) -> str:
        return f"Autodiff({self.inner!r}, checkpointing={self.checkpointing!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Autodiff)
            and self.inner == other.inner
            and self.checkpointing == other.checkpointing
        )

    def __hash__(self) -> int:
        return hash((Autodiff, self.inner, self.checkpointing))

    # -- recording ----------------------------------------------------------------------------
    def _record(
        self, op: Op, inputs: tuple, params: tuple, out: Any, aux: Any
    ) -> AutodiffPrimitive:
        """Make the node of a tracked op's output and the checkpointing actions it needs.

        Written out flat: this runs once per tracked op and is most of autodiff's overhead.
        """
        parents = tuple([x.node for x in inputs])
        mask = tuple([parent is not None for parent in parents])
        plan = op._plans.get(mask) or op.plan(mask)
        node_id = new_node_id()
        order = 0
        for parent in parents:
            if parent is not None and parent.order > order:
                order = parent.order
        actions = []
        recompute = self._recomputes(op) and False not in mask
        if recompute:  # back up the parents it would be recomputed from
            for x in inputs:
                parent = x.node
                actions.append((parent.id, RECOMPUTE if parent.recompute else x.value, True))
        keys = tuple([_save(inputs[i], recompute, actions) for i in plan.saved_inputs])
        if plan.save_out:
            keys += (node_id,)
            actions.append((node_id, RECOMPUTE if recompute else out, False))
        if plan.meta:
            inner = self.inner
            params = params + tuple([
                inner.shape(inputs[i].value) if kind == "shape" else inner.dtype(inputs[i].value)
                for kind, i in plan.meta
            ])  # fmt: skip
        if op.aux:
            params = (*params, aux)
        node = Node(node_id, op, parents, params, order + 1, plan, keys, actions or None, recompute)
        if op.broadcast:
            shape = self.inner.shape
            out_shape = shape(out)
            shapes = tuple([
                shape(x.value) if tracked and shape(x.value) != out_shape else None
                for tracked, x in zip(mask, inputs)
            ])  # fmt: skip
            if shapes.count(None) != len(shapes):
                node.bshapes = shapes
        return AutodiffPrimitive(out, node)

    def _record_unary(self, op: Op, x: AutodiffPrimitive, params: tuple, out: Any, aux: Any):
        """:meth:`_record` for the commonest case, one tracked input."""
        parent = x.node
        plan = op._plans.get(_TRACKED) or op.plan(_TRACKED)
        node_id = new_node_id()
        actions = None
        recompute = self._recomputes(op)
        saved = RECOMPUTE if recompute and parent.recompute else x.value
        if recompute:
            actions = [(parent.id, saved, True)]
        keys = ()
        if plan.saved_inputs:
            keys = (parent.id,)
            if actions is None:
                actions = [(parent.id, saved, False)]
            else:
                actions.append((parent.id, saved, False))
        if plan.save_out:
            keys += (node_id,)
            action = (node_id, RECOMPUTE if recompute else out, False)
            if actions is None:
                actions = [action]
            else:
                actions.append(action)
        if plan.meta:
            value = x.value
            params = params + tuple([
                self.inner.shape(value) if kind == "shape" else self.inner.dtype(value)
                for kind, _ in plan.meta
            ])  # fmt: skip
        if op.aux:
            params = (*params, aux)
        node = Node(node_id, op, (parent,), params, parent.order + 1, plan, keys, actions,
                    recompute)  # fmt: skip
        return AutodiffPrimitive(out, node)

    def _record_binary(self, op: Op, x: AutodiffPrimitive, y: AutodiffPrimitive, params: tuple,
                       out: Any) -> AutodiffPrimitive:  # fmt: skip
        """:meth:`_record` for two inputs (elementwise ops, matmul)."""
        x_node, y_node = x.node, y.node
        mask = (x_node is not None, y_node is not None)
        plan = op._plans.get(mask) or op.plan(mask)
        node_id = new_node_id()
        actions = []
        recompute = x_node is not None and y_node is not None and self._recomputes(op)
        if recompute:
            actions.append((x_node.id, RECOMPUTE if x_node.recompute else x.value, True))
            actions.append((y_node.id, RECOMPUTE if y_node.recompute else y.value, True))
        saved = plan.saved_inputs
        if not saved:
            keys = ()
        elif len(saved) == 2:
            keys = (_save(x, recompute, actions), _save(y, recompute, actions))
        else:
            keys = (_save(y if saved[0] else x, recompute, actions),)
        if plan.save_out:
            keys += (node_id,)
            actions.append((node_id, RECOMPUTE if recompute else out, False))
        if plan.meta:
            inner = self.inner
            params = params + tuple([
                inner.shape((x, y)[i].value) if kind == "shape" else inner.dtype((x, y)[i].value)
                for kind, i in plan.meta
            ])  # fmt: skip
        if x_node is None:
            order = y_node.order
        elif y_node is None or x_node.order >= y_node.order:
            order = x_node.order
        else:
            order = y_node.order
        node = Node(node_id, op, (x_node, y_node), params, order + 1, plan, keys, actions or None,
                    recompute)  # fmt: skip
        if op.broadcast:
            shape = self.inner.shape
            x_shape, y_shape = shape(x.value), shape(y.value)
            # Equal shapes never broadcast (for matmul: equal batch dimensions).
            if x_shape != y_shape if op.broadcast is True else x_shape[:-2] != y_shape[:-2]:
                node.bshapes = (x_shape if x_node is not None else None,
                                y_shape if y_node is not None else None)  # fmt: skip
        return AutodiffPrimitive(out, node)

    def apply(self, op: Op, *inputs: AutodiffPrimitive, params: tuple = ()) -> Any:
        """Run ``op`` (declared with :class:`~retrograd.autodiff.ops.Op`) on ``inputs``: its
        forward on the inner values, and a node if an input is tracked.

        This is how code outside the op table (custom ops, collectives) joins the graph.
        """
        out = run_forward(op, self.inner, [x.value for x in inputs], params)
        aux = None
        if op.aux:
            out, aux = out
        if not op.differentiable or all(x.node is None for x in inputs):
            result = AutodiffPrimitive(out, None)
        else:
            result = self._record(op, inputs, params, out, aux)
        return (result, AutodiffPrimitive(aux, None)) if op.aux else result

    # -- data, creation, metadata (never tracked) ----------------------------------------------
    def from_data(self, data, dtype, device):
        return AutodiffPrimitive(self.inner.from_data(data, dtype, device), None)

    def to_numpy(self, x):
        return self.inner.to_numpy(x.value)

    def shape(self, x):
        return self.inner.shape(x.value)

    def dtype(self, x):
        return self.inner.dtype(x.value)

    def same_dtype(self, x, y):
        return self.inner.same_dtype(x.value, y.value)

    def device(self, x):
        return self.inner.device(x.value)

    def zeros(self, shape, dtype, device):
        return AutodiffPrimitive(self.inner.zeros(shape, dtype, device), None)

    def ones(self, shape, dtype, device):
        return AutodiffPrimitive(self.inner.ones(shape, dtype, device), None)

    def full(self, shape, value, dtype, device):
        return AutodiffPrimitive(self.inner.full(shape, value, dtype, device), None)

    def zeros_like(self, x):
        return AutodiffPrimitive(self.inner.zeros_like(x.value), None)

    def ones_like(self, x):
        return AutodiffPrimitive(self.inner.ones_like(x.value), None)

    def eye(self, n, m, dtype, device):
        return AutodiffPrimitive(self.inner.eye(n, m, dtype, device), None)

    def arange(self, start, end, step, dtype, device):
        return AutodiffPrimitive(self.inner.arange(start, end, step, dtype, device), None)

    def random(self, shape, distribution, dtype, device):
        return AutodiffPrimitive(self.inner.random(shape, distribution, dtype, device), None)

    def bernoulli(self, shape, p, device):
        return AutodiffPrimitive(self.inner.bernoulli(shape, p, device), None)

    def seed(self, seed):
        self.inner.seed(seed)

    def to_device(self, x, device):
        return AutodiffPrimitive(self.inner.to_device(x.value, device), x.node)

    def any(self, x):
        return self.inner.any(x.value)

    def check_index_range(self, indices, size, message, ignore=None):
        self.inner.check_index_range(indices.value, size, message, ignore)

    def error_class(self, error):
        return self.inner.error_class(error)

    def nonzero(self, x):
        return tuple(AutodiffPrimitive(index, None) for index in self.inner.nonzero(x.value))

    def cast(self, x, dtype):
        value = self.inner.cast(x.value, dtype)
        if x.node is None or dtype not in _FLOAT_DTYPES:
            return AutodiffPrimitive(value, None)
        return self._record_unary(_CAST, x, (dtype,), value, None)

    # -- autodiff-specific --------------------------------------------------------------------
    def require_grad(self, x: AutodiffPrimitive) -> AutodiffPrimitive:
        """A leaf that requires grad, holding ``x``'s value; error on a non-leaf."""
        node = x.node
        if node is not None:
            if node.op is not None:
                raise AutodiffError(
                    "require_grad: only leaves can require grad; this tensor is the output of "
                    f"{node.describe()}; use detach().require_grad() for a new leaf"
                )
            return x
        return AutodiffPrimitive(x.value, Node.leaf())

    def is_require_grad(self, x: AutodiffPrimitive) -> bool:
        return x.node is not None and x.node.op is None

    def is_tracked(self, x: AutodiffPrimitive) -> bool:
        return x.node is not None

    def detach(self, x: AutodiffPrimitive) -> AutodiffPrimitive:
        """A new leaf cut from the graph; requires grad iff ``x`` was a leaf requiring grad."""
        if self.is_require_grad(x):
            return AutodiffPrimitive(x.value, Node.leaf())
        return AutodiffPrimitive(x.value, None)

    def retain_grad(self, x: AutodiffPrimitive) -> None:
        if x.node is None:
            raise AutodiffError("retain_grad: the tensor is not part of a graph")
        x.node.retain = True

    def backward(self, x, seed=None, retain_graph=False, create_graph=False, device=None):
        return runtime.backward(self, x, seed, retain_graph, create_graph, device)

    def grad(self, x: AutodiffPrimitive, grads: Any) -> Any:
        return None if x.node is None else grads.get(x.node.id)

    def grad_remove(self, x: AutodiffPrimitive, grads: Any) -> Any:
        return None if x.node is None else grads.remove(x.node.id)

    def grad_replace(self, x: AutodiffPrimitive, grads: Any, value: Any) -> None:
        if x.node is None:
            raise AutodiffError("grad_replace: the tensor is not part of a graph")
        grads.replace(x.node.id, value)

    def set_distributed(self, x: AutodiffPrimitive, param_id: Any) -> AutodiffPrimitive:
        """Mark a parameter (a leaf, made to require grad) for gradient all-reduce."""
        x = self.require_grad(x)
        node = x.node
        node.param_id = param_id
        # Gradient sync plans its buckets when backward starts, before any gradient exists,
        # so the node (all the tape holds) carries the parameter's size and dtype.
        node.param_shape = tuple(self.inner.shape(x.value))
        node.param_dtype = self.inner.dtype(x.value)
        return x

    def param_id(self, x: AutodiffPrimitive) -> Any:
        return None if x.node is None else x.node.param_id

    def inner_value(self, x: AutodiffPrimitive) -> Any:
        return x.value

    def wrap(self, value: Any) -> AutodiffPrimitive:
        return AutodiffPrimitive(value, None)


def _save(x: AutodiffPrimitive, recompute: bool, actions: list) -> int:
    """Record the main action that keeps input ``x`` for a backward rule; return its key.

    An untracked input is kept under a fresh key. A tracked one is keyed by its node, and is
    recomputed rather than kept only when both it and the op reading it are recomputable:
    a compute-bound reader keeps its inputs (docs/checkpointing.md).
    """
    node = x.node
    if node is None:
        key = new_node_id()
        actions.append((key, x.value, False))
        return key
    actions.append((node.id, RECOMPUTE if recompute and node.recompute else x.value, False))
    return node.id


def _untracked_method(op: Op):
    name = op.name

    def method(self, *args):
        n = len(op.inputs)
        values = [x.value for x in args[:n]]
        return AutodiffPrimitive(getattr(self.inner, name)(*values, *args[n:]), None)

    return method


def _unary_method(op: Op):
    name = op.name
    has_aux = op.aux
    if not op.params and not has_aux:

        def method(self, x):
            out = getattr(self.inner, name)(x.value)
            if x.node is None:
                return AutodiffPrimitive(out, None)
            return self._record_unary(op, x, (), out, None)

        return method

    def method(self, x, *params):
        out = getattr(self.inner, name)(x.value, *params)
        if has_aux:
            out, aux = out
            if x.node is None:
                return AutodiffPrimitive(out, None), AutodiffPrimitive(aux, None)
            return self._record_unary(op, x, params, out, aux), AutodiffPrimitive(aux, None)
        if x.node is None:
            return AutodiffPrimitive(out, None)
        return self._record_unary(op, x, params, out, None)

    return method


def _binary_method(op: Op):
    name = op.name
    if not op.params:

        def method(self, x, y):
            out = getattr(self.inner, name)(x.value, y.value)
            if x.node is None and y.node is None:
                return AutodiffPrimitive(out, None)
            return self._record_binary(op, x, y, (), out)

        return method

    def method(self, x, y, *params):
        out = getattr(self.inner, name)(x.value, y.value, *params)
        if x.node is None and y.node is None:
            return AutodiffPrimitive(out, None)
        return self._record_binary(op, x, y, params, out)

    return method


def _general_method(op: Op):
    n = len(op.inputs)

    def method(self, *args):
        inputs, params = args[:n], args[n:]
        out = run_forward(op, self.inner, [x.value for x in inputs], params)
        if all(x.node is None for x in inputs):
            return AutodiffPrimitive(out, None)
        return self._record(op, inputs, params, out, None)

    return method


def _cat(self, xs, dim):
    values = [x.value for x in xs]
    out = self.inner.cat(values, dim)
    if all(x.node is None for x in xs):
        return AutodiffPrimitive(out, None)
    bounds, start = [], 0
    for value in values:
        end = start + self.inner.shape(value)[dim]
        bounds.append((start, end))
        start = end
    return self._record(OPS["cat"], tuple(xs), (dim, tuple(bounds)), out, None)


_CAST = OPS["cast"]

for _op in OPS.values():
    if _op.name in ("cast", "cat"):
        continue
    if not _op.differentiable:
        _method = _untracked_method(_op)
    elif len(_op.inputs) == 1:
        _method = _unary_method(_op)
    elif len(_op.inputs) == 2:
        _method = _binary_method(_op)
    else:
        _method = _general_method(_op)
    _method.__name__ = _op.name
    _method.__qualname__ = f"Autodiff.{_op.name}"
    setattr(Autodiff, _op.name, _method)
Autodiff.cat = _cat
