"""The autodiff backend decorator: the backend protocol over autodiff primitives.

``Autodiff(inner)`` implements every protocol method by running the inner backend on the inner
primitives and, when an input is tracked, recording a node with what the op's backward rules
will read. Its op methods are generated from the op table (:mod:`.ops`), so an op is declared
once and this class holds no per-op code; all of them record through one method,
:meth:`Autodiff._record`, which a subclass observes through one hook, ``_on_record``. What a
node saves for backward is the checkpointing strategy's to decide (its ``save``).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

from ..backend.numpy_backend import NumpyBackend
from ..backend.protocol import COMPLEX_DTYPES, COMPLEX_SEEN, GRAD_DTYPES, Backend
from ..errors import AutodiffError, DTypeError
from . import nn_ops, runtime  # noqa: F401  (nn_ops declares the nn ops into OPS)
from .checkpoint import CheckpointStrategy, NoCheckpointing
from .checkpoint.builder import NOTHING_SAVED, Saved
from .checkpoint.strategy import _held_by_a_reader, save_kept
from .grad_mode import _MODE, DISABLED_THREADS, FORWARD_TANGENTS
from .gradients import held_by_live_gradients
from .graph import (
    FROZEN_LEAVES,
    INFERENCE_SEEN,
    AutodiffPrimitive,
    InferencePrimitive,
    Node,
    new_node_id,
)
from .handles import RemovableHandle
from .ops import OPS, Op, Plan
from .params import DistributedParam, ParamId
from .saved_hooks import HOOKED_THREADS, active_pair, pack_saved

#: anomaly mode's flags (``rg.autograd.detect_anomaly``), read once per recorded op
_ANOMALY = runtime.ANOMALY

__all__ = ["Autodiff", "Recipe"]

_TRACKED = (True,)
_new = object.__new__


class RetiredLeaf:
    """The gradient ``key`` of a leaf an in-place write replaced; called, whether a gradient
    under it can still be read: a graph still holds the leaf's node (a backward may yet
    produce one), or a live ``Gradients`` holds one.

    A copy is this object (it names the same key); a pickled one names none (key ``None``)
    and answers no: node ids are this process's, and an unpickled tensor has no graph here."""

    __slots__ = ("key", "node")

    def __init__(self, key: int | None, node: Any = None):
        self.key = key
        self.node = node

    def __call__(self) -> bool:
        if self.key is None:
            return False
        return (self.node is not None and self.node() is not None) or held_by_live_gradients(
            self.key
        )

    def __copy__(self) -> RetiredLeaf:
        return self

    def __deepcopy__(self, memo: dict) -> RetiredLeaf:
        return self

    def __reduce__(self) -> tuple:
        return RetiredLeaf, (None,)


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
        if not isinstance(self.inner, Backend):  # here, not as an AttributeError at an op
            raise DTypeError(
                "Autodiff: inner must be a backend (rg.NumpyBackend(), rg.TorchBackend(...)), "
                f"got {inner!r}"
            )
        self.checkpointing = checkpointing if checkpointing is not None else NoCheckpointing()
        if not isinstance(self.checkpointing, CheckpointStrategy):
            raise DTypeError(
                f"Autodiff: checkpointing must be a CheckpointStrategy, got {checkpointing!r}"
            )
        self._save = self.checkpointing.saver()  # what a node saves for backward
        self._hook = type(self)._on_record  # the recording hook, or None (see _record)

    @property
    def default_device(self) -> Any:
        return self.inner.default_device

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

    def __reduce__(self) -> tuple:
        # pickled as what makes it, not its graph: an unpickled tensor starts no graph
        return type(self), (self.inner, self.checkpointing)

    # -- recording ----------------------------------------------------------------------------
    #: The recording hook. A subclass may define ``_on_record(self, node, out)``: it is then
    #: called with every node this backend records (after the node is complete) and the inner
    #: value of its output; graphview notes output shapes with it. ``__init__`` looks it up
    #: once, so that the ordinary backend pays one ``is None`` test per node for it.
    _on_record = None

    def _record(
        self, recipe: Recipe, inputs: tuple, parents: tuple, params: tuple, out: Any, aux: Any
    ) -> AutodiffPrimitive:
        """Make the node of a tracked op's output; the strategy saves what its rules read.

        Every recorded op comes here. The op methods pass the :class:`Recipe` of the op for the
        requires-grad mask of this call (they pick it with the tracking check they make
        anyway), the ``inputs`` and their ``parents`` (``x.node``, ``None`` when untracked),
        the op's ``params``, its output ``out`` and its ``aux`` output.

        This runs once per tracked op and is most of autodiff's overhead, so it is written for
        the interpreter: what depends only on the op and the mask is decided once, in the
        recipe; the cheap tests come first; loops are plain ``for`` loops (a comprehension is
        a function call, and the local names it reads become cells, which every call pays
        for); the node is made without a call of ``Node.__init__`` (a Python ``__init__``
        costs a frame); nothing is built that the node does not keep.
        """
        if DISABLED_THREADS[0] and not _MODE.enabled:  # in rg.no_grad() in this thread
            carries = FORWARD_TANGENTS[0]  # (a dual's tangent flows under no_grad)
            if carries is None or not carries(parents):
                return AutodiffPrimitive(out, None)
        if COMPLEX_SEEN[0]:  # complex arrays exist: an op with a complex operand or output
            recipe = _complex_recipe(self.inner, recipe, inputs, parents, out)
        meta = recipe.meta
        if meta:
            inner = self.inner
            for kind, i in meta:
                value = inputs[i].value
                params = params + (inner.shape(value) if kind == "shape" else inner.dtype(value),)
        if recipe.aux:
            params = (*params, aux)
        single = recipe.single
        if single is not None:  # one tracked input: the commonest case, no loop
            order = parents[single].order
        else:
            order = 0
            for parent in parents:
                if parent is not None and parent.order > order:
                    order = parent.order
        if INFERENCE_SEEN[0]:  # an inference tensor's primitive exists: is one saved here?
            for i in recipe.saved_inputs:
                if type(inputs[i]) is InferencePrimitive:
                    _refuse_saved_inference(recipe)
        node = _new(Node)  # the slots Node.__init__ assigns, assigned here
        node.id = new_node_id()
        node.order = order + 1
        node.op = recipe.op
        node.parents = parents
        node.params = params
        node.plan = recipe.plan
        node.consumed = False
        save = self._save
        if save is not save_kept:
            node.saved = save(node, recipe, inputs, out)
        else:  # save_kept (every node NoCheckpointing records), inlined: keep the two alike
            keys = ()
            actions = []
            for i in recipe.saved_inputs:
                parent = parents[i]
                value = inputs[i].value
                if parent is None:
                    key = new_node_id()
                else:
                    key = parent.id
                    if parent.saved.recompute:
                        _held_by_a_reader(parent, value)
                actions.append((key, value, False))
                keys += (key,)
            if recipe.save_out:
                node_id = node.id
                keys += (node_id,)
                actions.append((node_id, out, False))
            if keys:
                saved = _new(Saved)  # Saved.__init__'s slots, assigned here
                saved.keys = keys
                saved.actions = actions
                saved.recompute = False
                node.saved = saved
            else:
                node.saved = NOTHING_SAVED
        if HOOKED_THREADS[0]:  # saved_tensors_hooks in some thread: is it this one?
            pair = active_pair()
            if pair is not None:
                pack_saved(self, node.saved, pair)
        broadcast = recipe.broadcast
        if broadcast is not None:
            bshapes = broadcast(self.inner, recipe.op, inputs, parents, out)
            if bshapes is not None:  # most nodes leave it unset (a class default, no dict)
                node.bshapes = bshapes
        if self._hook is not None:
            self._hook(self, node, out)
        if _ANOMALY["enabled"]:  # torch's anomaly mode records where each op was called
            node.forward_stack = runtime.forward_stack()
        result = _new(AutodiffPrimitive)  # AutodiffPrimitive.__init__'s slots: a frame less
        result.value = out
        result.node = node
        return result

    def apply(self, op: Op, *inputs: AutodiffPrimitive, params: tuple = ()) -> Any:
        """Run ``op`` (declared with :class:`~retrograd.autodiff.ops.Op`) on ``inputs``: its
        forward on the inner values, and a node if an input is tracked.

        This is how code outside the op table (custom ops, collectives) joins the graph.
        """
        out = op.run_forward(self.inner, [x.value for x in inputs], params)
        aux = None
        if op.aux:
            out, aux = out
        parents = tuple([x.node for x in inputs])
        mask = tuple([parent is not None for parent in parents])
        if not op.differentiable or True not in mask:
            result = AutodiffPrimitive(out, None)
        else:
            result = self._record(_output_recipe(op, mask), inputs, parents, params, out, aux)
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

    def has_dtype(self, dtype):
        return self.inner.has_dtype(dtype)

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

    def rng_state(self):
        return self.inner.rng_state()

    def set_rng_state(self, words):
        self.inner.set_rng_state(words)

    def to_device(self, x, device):
        return AutodiffPrimitive(self.inner.to_device(x.value, device), x.node)

    def any(self, x):
        return self.inner.any(x.value)

    def memory_allocated(self):
        return self.inner.memory_allocated()

    def reset_peak_memory(self):
        self.inner.reset_peak_memory()

    def check_index_range(self, indices, size, message, ignore=None):
        self.inner.check_index_range(indices.value, size, message, ignore)

    def error_class(self, error):
        return self.inner.error_class(error)

    def nonzero(self, x):
        return tuple(AutodiffPrimitive(index, None) for index in self.inner.nonzero(x.value))

    def batch_norm_update(self, running_mean, running_var, stats, momentum, eps, count):
        # state, never tracked: the inner backend's own update, not the protocol's default
        # composed of a dozen op calls each wrapped here
        updated = self.inner.batch_norm_update(
            running_mean.value, running_var.value, stats.value, momentum, eps, count
        )
        return tuple(AutodiffPrimitive(value, None) for value in updated)

    def cast(self, x, dtype):
        value = self.inner.cast(x.value, dtype)
        if x.node is None or dtype not in GRAD_DTYPES:
            return AutodiffPrimitive(value, None)
        return self._record(_CAST_RECIPE, (x,), (x.node,), (dtype,), value, None)

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

    def inference_primitive(self, x: AutodiffPrimitive, inference: bool) -> AutodiffPrimitive:
        """``x``'s value and node in a primitive that is an inference tensor's (an op recorded
        outside ``inference_mode()`` then refuses to save it for backward, as torch's), or,
        ``inference=False``, an ordinary tensor's. A new primitive where ``x`` is not of that
        kind: tensors share primitives (a clone holds its source's), and only the tensor
        asked about changes kind."""
        kind = InferencePrimitive if inference else AutodiffPrimitive
        if type(x) is kind:
            return x
        if inference:
            INFERENCE_SEEN[0] = True
        return kind(x.value, x.node)

    def is_require_grad(self, x: AutodiffPrimitive) -> bool:
        return x.node is not None and x.node.op is None

    def is_tracked(self, x: AutodiffPrimitive) -> bool:
        return x.node is not None

    def reaches_other_leaves(
        self, outputs: list[AutodiffPrimitive], leaves: list[AutodiffPrimitive]
    ) -> bool:
        """Whether the graph of ``outputs`` holds a leaf that requires grad besides ``leaves``
        (``rg.func``'s test of a tensor the transformed function closes over): a walk of the
        graph's nodes, no arithmetic."""
        own = {x.node.id for x in leaves if x.node is not None}
        return any(node.op is None and node.id not in own for node in _graph_nodes(outputs))

    def reaches(
        self, outputs: list[AutodiffPrimitive], targets: list[AutodiffPrimitive]
    ) -> bool | None:
        """Whether the graph of ``outputs`` holds one of ``targets`` (the duals a forward-mode
        tangent is taken with respect to): a walk of the graph's nodes, no arithmetic.
        ``None`` when not found but the walk met a node a backward consumed (its parents
        dropped: a target may lie beyond it)."""
        wanted = {x.node.id for x in targets if x.node is not None}
        unknown = False
        for node in _graph_nodes(outputs):
            if node.id in wanted:
                return True
            unknown = unknown or bool(node.consumed)
        return None if unknown else False

    def detach(self, x: AutodiffPrimitive) -> AutodiffPrimitive:
        """A new leaf cut from the graph; requires grad iff ``x`` was a leaf requiring grad."""
        if self.is_require_grad(x):
            return AutodiffPrimitive(x.value, Node.leaf())
        return AutodiffPrimitive(x.value, None)

    def retain_grad(self, x: AutodiffPrimitive, retain: bool | str = True) -> None:
        """Keep ``x``'s gradient in what backward returns (``retain=False``: stop keeping
        it, as ``autograd.grad`` does after a backward it kept it for; ``graph.CAPTURED``:
        kept by ``autograd.grad``, before the tensor's hooks)."""
        if x.node is None:
            raise AutodiffError("retain_grad: the tensor is not part of a graph")
        _gradient_node(x.node).retain = retain

    def gradient_node(self, x: AutodiffPrimitive) -> Node | None:
        """The node holding the gradient of the tensor whose primitive is ``x``: ``x``'s own,
        or, after writes under ``no_grad`` (or through ``.data``), the node that made the
        tensor before them (torch keeps its ``grad_fn``); ``None`` when untracked."""
        return _gradient_node(x.node)

    def register_hook(self, x: AutodiffPrimitive, hook: Any, retired: Any = ()) -> RemovableHandle:
        """Call ``hook(backend, gradient)`` on ``x``'s gradient once a backward has summed it,
        its result taking the gradient's place before it flows on to ``x``'s inputs (or, for a
        leaf, is returned): torch's tensor hooks. ``backend`` is the one the gradient belongs
        to (the inner backend, or this one under ``create_graph``). ``retired``: the
        :class:`RetiredLeaf` keys of the leaves in-place writes replaced by the leaf ``x``
        (one tensor's, as torch's): they share its hooks, which then run once on the sum of
        their gradients. A tensor an in-place write changed under ``no_grad`` (or through
        ``.data``) keeps its gradient: the hook goes to the node that made it."""
        node = _gradient_node(x.node)
        if node is None:
            raise AutodiffError(
                "register_hook: cannot register a hook on a tensor that doesn't require gradient"
            )
        if node.hooks is None:
            node.hooks = {}
        if node.op is None:
            for former in retired:
                old = former.node() if former.node is not None else None
                if old is not None and old.op is None and old.hooks is None:
                    old.hooks = node.hooks
        key = next(_HOOK_KEYS)
        node.hooks[key] = hook
        return RemovableHandle(node.hooks, key)

    def register_input_hook(self, x: AutodiffPrimitive, hook: Any) -> RemovableHandle:
        """Call ``hook(backend, input_gradients, gradient)`` when a backward runs the step of
        the op that made ``x``, with the gradients that step computed for the op's inputs
        (a tuple in the op's input order, ``None`` for an untracked input) and ``x``'s own;
        a non-``None`` result (as many gradients) replaces them before they flow on: torch's
        hooks on a tensor's ``grad_fn``."""
        node = x.node
        if node is None or node.op is None:
            raise AutodiffError(
                "register_input_hook: the tensor was not made by a recorded op (a leaf, or a "
                "tensor that doesn't require gradient)"
            )
        if node.input_hooks is None:
            node.input_hooks = {}
        key = next(_HOOK_KEYS)
        node.input_hooks[key] = hook
        return RemovableHandle(node.input_hooks, key)

    def succeed_leaf(self, old: AutodiffPrimitive, value: AutodiffPrimitive) -> AutodiffPrimitive:
        """The fresh leaf holding ``value`` (untracked) that takes the place of the leaf
        ``old`` when an in-place write replaces its values (an optimizer's step): it keeps
        what belongs to the tensor rather than to one value, the data-parallel mark and the
        tensor hooks (shared, so a handle removes them from both)."""
        param_id = self.param_id(old)
        if param_id is not None:
            new = self.set_distributed(value, param_id)
        else:
            new = self.require_grad(value)
        if old.node.hooks is not None:
            new.node.hooks = old.node.hooks
        return new

    def backward(
        self,
        x,
        seed=None,
        retain_graph=False,
        create_graph=False,
        device=None,
        inputs=None,
        retired=(),
    ):
        """``inputs``: primitives whose gradients alone are wanted (torch's ``inputs=``): the
        backward walks only toward them and consumes nothing else. ``retired``: the
        :class:`RetiredLeaf` keys of leaves that in-place writes replaced by ``inputs`` (a
        graph recorded before the write reaches the old leaf: torch's one tensor), wanted
        too."""
        stop = None
        if inputs is not None:
            stop = frozenset(_gradient_id(p.node) for p in inputs if p.node is not None)
            stop |= frozenset(key for key in retired if key is not None)
        return runtime.backward(self, x, seed, retain_graph, create_graph, device, stop)

    def grad(self, x: AutodiffPrimitive, grads: Any) -> Any:
        return None if x.node is None else grads.get(_gradient_id(x.node))

    def grad_key(self, x: AutodiffPrimitive) -> int | None:
        """The key of ``x``'s gradient in a ``Gradients`` (``grads.replace(key, value)``),
        kept where holding ``x`` itself would keep its value alive."""
        return None if x.node is None else _gradient_id(x.node)

    def retired_leaf(self, x: AutodiffPrimitive) -> RetiredLeaf | None:
        """The gradient key of the leaf ``x``, which an in-place write is about to replace
        with a fresh leaf, as a :class:`RetiredLeaf` that tells whether a gradient under it
        can still be read. ``None`` for an untracked ``x``."""
        node = x.node
        return None if node is None else RetiredLeaf(node.id, weakref.ref(node))

    def freeze_leaf(self, retired: RetiredLeaf, frozen: bool) -> None:
        """Mark the replaced leaf ``retired`` frozen (``requires_grad_(False)``: a backward
        through a graph recorded before gives it no gradient) or thawed again."""
        node = None if retired.node is None else retired.node()
        if frozen and node is not None:
            FROZEN_LEAVES[retired.key] = node
        else:
            FROZEN_LEAVES.pop(retired.key, None)

    def grad_remove(self, x: AutodiffPrimitive, grads: Any) -> Any:
        return None if x.node is None else grads.remove(_gradient_id(x.node))

    def grad_replace(self, x: AutodiffPrimitive, grads: Any, value: Any) -> None:
        if x.node is None:
            raise AutodiffError("grad_replace: the tensor is not part of a graph")
        grads.replace(_gradient_id(x.node), value)

    def set_distributed(self, x: AutodiffPrimitive, param_id: Any) -> AutodiffPrimitive:
        """Mark a parameter (a leaf, made to require grad) for gradient all-reduce.

        ``param_id``: an int, a str or a :class:`ParamId`, the parameter's name on every device.
        """
        x = self.require_grad(x)
        x.node.distributed = DistributedParam(
            ParamId.of(param_id), tuple(self.inner.shape(x.value)), self.inner.dtype(x.value)
        )
        return x

    def param_id(self, x: AutodiffPrimitive) -> Any:
        node = x.node
        return None if node is None or node.distributed is None else node.distributed.id

    def inner_value(self, x: AutodiffPrimitive) -> Any:
        return x.value

    def wrap(self, value: Any) -> AutodiffPrimitive:
        return AutodiffPrimitive(value, None)


_HOOK_KEYS = itertools.count()


@dataclass(frozen=True, slots=True)
class Recipe:
    """How :meth:`Autodiff._record` records an op for one requires-grad mask, decided once
    per op and mask (:func:`_recipe`)."""

    op: Op
    #: the op's :class:`~retrograd.autodiff.ops.Plan` for the mask
    plan: Plan
    #: every input is tracked (only then can the op be recomputed from the graph)
    all_tracked: bool
    #: the position of the only tracked input, ``None`` unless exactly one is
    single: int | None
    #: the plan's fields, read on every record: inputs its rules read, whether they read the
    #: output, and the input shapes/dtypes they read
    saved_inputs: tuple[int, ...]
    save_out: bool
    meta: tuple
    #: the op has an ``aux`` output (which its node keeps as its last param)
    aux: bool
    #: the broadcast rule of the recording op method (:func:`_pairwise_bshapes`,
    #: :func:`_output_bshapes`), or ``None``
    broadcast: Any


def _refuse_saved_inference(recipe: Recipe) -> NoReturn:
    """torch's refusal of an inference tensor among the inputs a node saves for backward
    (``w * x`` of an ``x`` made in ``inference_mode()``; ``w + x`` saves nothing of it)."""
    raise AutodiffError(
        f"{recipe.op.name}: Inference tensors cannot be saved for backward. Please do not use "
        "Tensors created in inference mode in computation tracked by autograd. To work around "
        "this, you can make a clone to get a normal tensor and use it in autograd."
    )


def _recipe(op: Op, mask: tuple, broadcast: Any) -> Recipe:
    """The :class:`Recipe` of ``op`` for ``mask``, with the op method's ``broadcast`` rule."""
    plan = op.plan(mask)
    tracked = [i for i, flag in enumerate(mask) if flag]
    return Recipe(
        op=op,
        plan=plan,
        all_tracked=False not in mask,
        single=tracked[0] if len(tracked) == 1 else None,
        saved_inputs=plan.saved_inputs,
        save_out=plan.save_out,
        meta=plan.meta,
        aux=op.aux,
        broadcast=broadcast,
    )


_OUTPUT_RECIPES: dict[tuple[Op, tuple], Recipe] = {}
_COMPLEX_RECIPES: dict[tuple, Recipe] = {}


def _graph_nodes(outputs: list[AutodiffPrimitive]) -> Iterator[Node]:
    """Every node of the graph of ``outputs``, each once, outputs first (a walk of the
    recorded parents; a lazy one, so a caller that has its answer stops it there)."""
    seen: set[int] = set()
    stack = [x.node for x in outputs if x.node is not None]
    while stack:
        node = stack.pop()
        if node.id in seen:
            continue
        seen.add(node.id)
        yield node
        if node.op is not None:
            stack.extend(parent for parent in node.parents if parent is not None)


def _complex_recipe(inner: Backend, recipe: Recipe, inputs: tuple, parents: tuple, out: Any):
    """``recipe``, or, where an operand or the output of its op is complex, the recipe of the
    op's complex twin (:meth:`~retrograd.autodiff.ops.Op.complex_twin`); an op without complex
    rules is refused there."""
    dtype = inner.dtype
    real_inputs = tuple([dtype(x.value) not in COMPLEX_DTYPES for x in inputs])
    if False not in real_inputs and dtype(out) not in COMPLEX_DTYPES:
        return recipe
    op = recipe.op
    if op.complex_vjps is None:
        complex_dtype = next(
            (dtype(v) for v in (out, *[x.value for x in inputs]) if dtype(v) in COMPLEX_DTYPES),
            "complex",
        )
        raise DTypeError(
            f"{op.name}: retrograd has no gradient of {op.name} for {complex_dtype} tensors "
            "(torch's complex autograd here covers arithmetic, exp/log/trigonometry, matmul, "
            "linear algebra, reductions by sums, shape ops and torch.fft); detach() the input "
            "or compute "
            "with the real and imaginary parts"
        )
    mask = tuple([parent is not None for parent in parents])
    key = (op, real_inputs, mask, recipe.broadcast)
    twin_recipe = _COMPLEX_RECIPES.get(key)
    if twin_recipe is None:
        twin = op.complex_twin(real_inputs)
        twin_recipe = _COMPLEX_RECIPES[key] = _recipe(twin, mask, recipe.broadcast)
    return twin_recipe


def _output_recipe(op: Op, mask: tuple) -> Recipe:
    """The recipe of ``op`` for ``mask`` when recorded by :meth:`Autodiff.apply`, by an op
    method of three or more inputs, or by ``cat``: ones that broadcast use
    :func:`_output_bshapes`."""
    recipe = _OUTPUT_RECIPES.get((op, mask))
    if recipe is None:
        broadcast = _output_bshapes if op.broadcast else None
        recipe = _OUTPUT_RECIPES[op, mask] = _recipe(op, mask, broadcast)
    return recipe


def _output_bshapes(inner: Backend, op: Op, inputs: tuple, parents: tuple, out: Any):
    """The shapes of the tracked inputs whose shape differs from the output's (``None`` for the
    others), or ``None`` when broadcasting changed none: what the engine sums gradients back to."""
    shape = inner.shape
    out_shape = shape(out)
    shapes = tuple(
        [
            shape(x.value) if parent is not None and shape(x.value) != out_shape else None
            for parent, x in zip(parents, inputs)
        ]
    )
    return None if shapes.count(None) == len(shapes) else shapes


def _elementwise_bshapes(inner: Backend, op: Op, inputs: tuple, parents: tuple, out: Any):
    """:func:`_pairwise_bshapes` of an elementwise op (``broadcast=True``), whose shapes
    broadcast in full: a test of ``op.broadcast`` less on every binary record."""
    shape = inner.shape
    x_shape = shape(inputs[0].value)
    y_shape = shape(inputs[1].value)
    if x_shape == y_shape:  # the common case: nothing to sum back
        return None
    return (
        x_shape if parents[0] is not None else None,
        y_shape if parents[1] is not None else None,
    )


def _pairwise_bshapes(inner: Backend, op: Op, inputs: tuple, parents: tuple, out: Any):
    """For the two inputs of a binary op: both tracked inputs' shapes, or ``None``, when the two
    shapes differ (for ``broadcast="batch"``, matmul: when their batch dimensions differ)."""
    x, y = inputs
    x_shape, y_shape = inner.shape(x.value), inner.shape(y.value)
    # Equal shapes never broadcast (for matmul: equal batch dimensions).
    if x_shape != y_shape if op.broadcast is True else x_shape[:-2] != y_shape[:-2]:
        return (
            x_shape if parents[0] is not None else None,
            y_shape if parents[1] is not None else None,
        )
    return None


def _untracked_method(op: Op):
    name = op.name

    def method(self, *args):
        n = len(op.inputs)
        values = [x.value for x in args[:n]]
        return AutodiffPrimitive(getattr(self.inner, name)(*values, *args[n:]), None)

    return method


def _unary_method(op: Op):
    name = op.name
    recipe = _recipe(op, _TRACKED, None)
    if op.aux:

        def method(self, x, *params):
            out, aux = getattr(self.inner, name)(x.value, *params)
            parent = x.node
            if parent is None:
                return AutodiffPrimitive(out, None), AutodiffPrimitive(aux, None)
            result = self._record(recipe, (x,), (parent,), params, out, aux)
            return result, AutodiffPrimitive(aux, None)

        return method
    if not op.params:

        def method(self, x):
            out = getattr(self.inner, name)(x.value)
            parent = x.node
            if parent is None:
                return AutodiffPrimitive(out, None)
            return self._record(recipe, (x,), (parent,), (), out, None)

        return method

    def method(self, x, *params):
        out = getattr(self.inner, name)(x.value, *params)
        parent = x.node
        if parent is None:
            return AutodiffPrimitive(out, None)
        return self._record(recipe, (x,), (parent,), params, out, None)

    return method


def _binary_method(op: Op):
    name = op.name
    if not op.broadcast:
        broadcast = None
    else:
        broadcast = _elementwise_bshapes if op.broadcast is True else _pairwise_bshapes
    both = _recipe(op, (True, True), broadcast)
    x_only = _recipe(op, (True, False), broadcast)
    y_only = _recipe(op, (False, True), broadcast)
    if not op.params:

        def method(self, x, y):
            out = getattr(self.inner, name)(x.value, y.value)
            x_node, y_node = x.node, y.node
            if x_node is None:
                if y_node is None:
                    return AutodiffPrimitive(out, None)
                recipe = y_only
            else:
                recipe = x_only if y_node is None else both
            return self._record(recipe, (x, y), (x_node, y_node), (), out, None)

        return method

    def method(self, x, y, *params):
        out = getattr(self.inner, name)(x.value, y.value, *params)
        x_node, y_node = x.node, y.node
        if x_node is None:
            if y_node is None:
                return AutodiffPrimitive(out, None)
            recipe = y_only
        else:
            recipe = x_only if y_node is None else both
        return self._record(recipe, (x, y), (x_node, y_node), params, out, None)

    return method


def _general_method(op: Op):
    n = len(op.inputs)

    if op.aux:  # a second, untracked output (attention's log-sum-exp, layer norm's statistics)

        def method(self, *args):
            inputs, params = args[:n], args[n:]
            out, aux = op.run_forward(self.inner, [x.value for x in inputs], params)
            parents = tuple([x.node for x in inputs])
            mask = tuple([parent is not None for parent in parents])
            if True not in mask:
                return AutodiffPrimitive(out, None), AutodiffPrimitive(aux, None)
            recipe = _output_recipe(op, mask)
            result = self._record(recipe, inputs, parents, params, out, aux)
            return result, AutodiffPrimitive(aux, None)

        return method

    def method(self, *args):
        inputs, params = args[:n], args[n:]
        out = op.run_forward(self.inner, [x.value for x in inputs], params)
        parents = tuple([x.node for x in inputs])
        mask = tuple([parent is not None for parent in parents])
        if True not in mask:
            return AutodiffPrimitive(out, None)
        return self._record(_output_recipe(op, mask), inputs, parents, params, out, None)

    return method


def _cat(self, xs, dim):
    values = [x.value for x in xs]
    out = self.inner.cat(values, dim)
    parents = tuple([x.node for x in xs])
    mask = tuple([parent is not None for parent in parents])
    if True not in mask:
        return AutodiffPrimitive(out, None)
    bounds, start = [], 0
    for value in values:
        end = start + self.inner.shape(value)[dim]
        bounds.append((start, end))
        start = end
    recipe = _output_recipe(_CAT, mask)
    return self._record(recipe, tuple(xs), parents, (dim, tuple(bounds)), out, None)


_CAST_RECIPE = _recipe(OPS["cast"], _TRACKED, None)
_CAT = OPS["cat"]

for _op in OPS.values():
    if _op.name in ("cast", "cat"):
        continue
    if not _op.differentiable:
        _method = _untracked_method(_op)
    elif len(_op.inputs) == 1 and _op.forward is None:
        _method = _unary_method(_op)
    elif len(_op.inputs) == 2 and _op.forward is None:  # a ``forward=`` runs in the general one
        _method = _binary_method(_op)
    else:
        _method = _general_method(_op)
    _method.__name__ = _op.name
    _method.__qualname__ = f"Autodiff.{_op.name}"
    setattr(Autodiff, _op.name, _method)
Autodiff.cat = _cat
_record_data_write = Autodiff.data_write


def _data_write(self: Autodiff, x: AutodiffPrimitive, y: AutodiffPrimitive) -> AutodiffPrimitive:
    """``data_write`` recorded, its node naming the node whose gradient is the tensor's: the
    written tensor is still the one ``x``'s node made (torch keeps its ``grad_fn``), whose
    gradient sums the uses before and after the write (the write's passes to it whole)."""
    out = _record_data_write(self, x, y)
    node, source = out.node, x.node
    if node is not None and source is not None and source.op is not None:
        node.gradient_of = _gradient_id(source)
    return out


_data_write.__qualname__ = "Autodiff.data_write"
Autodiff.data_write = _data_write


def _gradient_id(node: Node) -> int:
    """The key of the gradient of the tensor holding ``node`` (see :func:`_data_write`)."""
    return node.id if node.gradient_of is None else node.gradient_of


def _gradient_node(node: Node | None) -> Node | None:
    """The node whose gradient is that of the tensor holding ``node``: through writes under
    ``no_grad`` (``data_write``'s, still linked to the node before them) to that node."""
    while node is not None and node.gradient_of is not None and node.parents:
        parent = node.parents[0]
        if parent is None:
            break
        node = parent
    return node
