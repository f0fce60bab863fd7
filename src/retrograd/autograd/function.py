"""torch's ``torch.autograd.function``: custom differentiable operations (:class:`Function`,
its context :class:`FunctionCtx`) and ``once_differentiable``, the decorator of a ``backward``
written with NumPy or other untracked code (``from torch.autograd.function import
once_differentiable`` in custom CUDA ops' Python halves).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

from ..autodiff import enable_grad, is_grad_enabled, no_grad
from ..autodiff.ops import Op
from ..autodiff.runtime import running_gradient
from ..errors import AutodiffError, DTypeError, ShapeError
from ..tensor import Tensor
from ..tensor.layouts import SPARSE_CLASSES
from .vmap_depth import VMAP

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """What ``forward`` hands ``backward`` in a :class:`Function`: ``save_for_backward``,
    ``saved_tensors``, ``needs_input_grad``, ``mark_non_differentiable``,
    ``set_materialize_grads``, and any attribute set on it."""

    def __init__(self, needs_input_grad: tuple[bool, ...]) -> None:
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True
        self._saved: tuple[Any, ...] = ()
        self._saved_for_forward: tuple[Any, ...] | None = None
        self._in_jvp = False
        self._non_differentiable: set[int] = set()
        self._dirty: tuple[Any, ...] = ()
        #: a consuming backward released the function's node (:func:`_release_call`)
        self._freed = False

    def save_for_backward(self, *tensors: Any) -> None:
        """Keep ``tensors`` for ``backward`` (their values now: a later in-place op on one of
        them is not seen, as torch's version check would have it refuse). Only tensors (sparse
        ones too) and ``None`` are saved, as torch's: anything else raises a ``DTypeError`` (a
        ``TypeError``; a number or string was kept before round 94), ``ctx.attr = value``
        being the place for it."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor) and type(t) not in SPARSE_CLASSES:
                raise DTypeError(
                    "save_for_backward can only save tensors (or None), but argument "
                    f"{i} is of type {type(t).__name__}; keep other values as attributes "
                    "of ctx (ctx.value = ...), as in torch"
                )
        self._saved = tuple(
            Tensor._result(t._prim, t._backend, t._device) if isinstance(t, Tensor) else t
            for t in tensors
        )

    def save_for_forward(self, *tensors: Any) -> None:
        """Keep ``tensors`` for ``jvp``, which reads them as ``saved_tensors`` (torch's; a
        ``jvp`` of a function that saved none for it reads those saved for backward)."""
        self._saved_for_forward = tuple(tensors)

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        """What ``save_for_backward`` kept. Read (from a context kept past it) after a
        backward consumed the function's node, it refuses, as torch's (it gave the tensors
        the backward was done with: round 94)."""
        if self._in_jvp and self._saved_for_forward is not None:
            return self._saved_for_forward
        if self._freed:
            raise AutodiffError(
                "saved_tensors: trying to backward through the graph a second time (or "
                "directly access saved tensors after they have already been freed); "
                "specify retain_graph=True in the first backward to keep them, as in torch"
            )
        return self._saved

    def mark_non_differentiable(self, *tensors: Any) -> None:
        """These outputs carry no gradient (indices, masks). Each call names them all, as
        torch's: a second call replaces the first's."""
        self._non_differentiable = {id(t) for t in tensors}

    def set_materialize_grads(self, value: bool) -> None:
        """Whether ``backward`` gets zeros (default) or ``None`` for outputs without a gradient."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors: Any) -> None:
        """These inputs were modified in place by ``forward`` and are returned as outputs:
        each then holds the function's output, in the graph (a view writes through to its
        base), as torch's. Each call names them all, as torch's."""
        self._dirty = tuple(tensors)


class _Call:
    """One ``Function.apply``: the class, its context, the tensor inputs' positions, shapes and
    dtypes, and the outputs (handed once to the recorded op's forward)."""

    def __init__(self, cls: type, ctx: FunctionCtx, positions: list[int], inputs: list[Tensor],
                 outputs: tuple, differentiable: list[int], backend: Any) -> None:  # fmt: skip
        self.cls, self.ctx, self.backend = cls, ctx, backend
        self.positions = positions
        self.shapes = [t.shape for t in inputs]
        self.dtypes = [t.dtype for t in inputs]
        self.outputs = outputs  # every output of forward; backward gets one gradient each
        self.differentiable = differentiable  # the recorded ones, by output index
        self.device = inputs[0].device
        self._pending: list[Any] = [
            outputs[j]._backend.inner_value(outputs[j]._prim) for j in differentiable
        ]
        self._cache: tuple[int, Any, tuple] | None = None
        #: the nodes of the recorded outputs, by ``k`` (weakly: they hold this call)
        self.nodes: list[Any] = []
        #: the backward (its :class:`Gradients`, weakly) whose one call of ``backward`` took
        #: the gradients of every output: the other outputs' steps then give nothing more
        self._answered: Any = None

    def take(self, k: int) -> Any:
        value, self._pending[k] = self._pending[k], None
        if value is None:
            raise AutodiffError("Function: a custom function's output cannot be recomputed")
        return value

    def _gradients_of_outputs(self, g: Any, k: int) -> list[Any] | None:
        """The gradient of each recorded output for the backward now running: ``g`` for
        output ``k``, the others' read from the backward's gradients (final: the outputs'
        nodes are equally deep, and every deeper node has run). ``None`` where this backward
        already called ``backward`` with them all (an other output's step came first)."""
        gathered: list[Any] = [None] * len(self.differentiable)
        gathered[k] = g
        siblings = [(other, ref()) for other, ref in enumerate(self.nodes) if other != k]
        siblings = [(other, node) for other, node in siblings if node is not None]
        if not siblings:
            return gathered
        grads = running_gradient(siblings[0][1])[0]
        if grads is not None:
            # (asked first: a later output's step found its siblings' gradients still held
            # and ran their tensor hooks a second time, with three outputs: round 94)
            if self._answered is not None and self._answered() is grads:
                return None
            self._answered = weakref.ref(grads)
        for other, node in siblings:
            value = running_gradient(node)[1]
            if value is not None and node.hooks is not None and node.id not in grads.hooked:
                value = grads.run_hooks(node, value)  # its tensor hooks, once
            gathered[other] = value
        return gathered

    def input_gradients(self, B: Any, g: Any, k: int) -> tuple:  # noqa: N803 (the rules' name)
        """``backward``'s gradients of the tensor inputs, as ``B``'s primitives, for the
        gradient ``g`` of output ``k``: one call of ``backward`` per backward pass, as torch's,
        given the gradient of every output (zeros, or ``None`` with
        ``set_materialize_grads(False)``, for those that got none, and for the outputs
        marked non-differentiable); the steps of the other outputs' nodes give nothing."""
        # The gradients of every input come from one backward call per incoming ``g``; the
        # cache is keyed by the object itself (held, not its id: an id could be reused by the
        # next backward's gradient, with retain_graph, once this one is freed; and a recorded
        # gradient under create_graph takes no weak reference), until the last input's rule
        # has read it (``_function_vjp``).
        if self._cache is not None and self._cache[0] == k and self._cache[1] is g:
            return self._cache[2]
        tracked = getattr(B, "is_autodiff", False)
        gathered = self._gradients_of_outputs(g, k)
        if gathered is None:  # given to the one call already
            grads = (None,) * len(self.positions)
            self._remember(k, g, grads)
            return grads
        incoming = [
            None
            if value is None
            else Tensor(value, B, self.device)  # create_graph: backward is recorded
            if tracked
            else Tensor(self.backend.wrap(value), self.backend, self.device)
            for value in gathered
        ]
        from ..tensor import zeros_like

        grads_out = []
        for j, out in enumerate(self.outputs):
            given = incoming[self.differentiable.index(j)] if j in self.differentiable else None
            if given is not None:
                grads_out.append(given)
            elif isinstance(out, Tensor) and self.ctx.materialize_grads:
                # torch's materialized gradient is zeros of the output's own dtype, an int or
                # bool output's too (these were cast to the gradients' float dtype: round 94)
                grads_out.append(zeros_like(out))
            else:
                grads_out.append(None)
        if tracked and _transposing_for_tangents() and _has_own_jvp(self.cls):
            # forward AD's pass (``unpack_dual``) transposes this backward: its transpose is
            # the function's own ``jvp``, which torch's forward mode calls
            result = _BackwardOfOwnJvp.apply(self, *grads_out)
        else:
            with enable_grad() if tracked else no_grad():
                result = self.cls.backward(self.ctx, *grads_out)
        result = result if isinstance(result, tuple) else (result,)
        expected = len(self.ctx.needs_input_grad)
        if len(result) > expected and all(extra is None for extra in result[expected:]):
            result = result[:expected]  # torch drops surplus trailing Nones
        if len(result) != expected:
            raise AutodiffError(
                f"function {self.cls.__name__}Backward returned an incorrect number of "
                f"gradients (expected {expected}, got {len(result)})"
            )
        grads = tuple(
            self._primitive(B, result[p], i, tracked) for i, p in enumerate(self.positions)
        )
        self._remember(k, g, grads)
        return grads

    def _remember(self, k: int, g: Any, grads: tuple) -> None:
        """Keep ``grads`` for the other inputs' rules of output ``k``'s step, which ask
        again with the same ``g`` (the one call of ``backward`` has answered for every
        output: asking again would give nothing)."""
        self._cache = (k, g, grads)

    def _primitive(self, B: Any, grad: Any, i: int, tracked: bool) -> Any:  # noqa: N803
        shape = self.shapes[i]
        if grad is None:  # no gradient: the input's stays absent, as torch's (not zeros)
            return None
        if not isinstance(grad, Tensor):
            raise AutodiffError(
                f"function {self.cls.__name__}Backward returned a {type(grad).__name__} as "
                f"gradient {self.positions[i] - self.cls._hidden_inputs}; expected a tensor or None"
            )
        grad_shape = grad.shape
        if grad_shape != shape:
            grad = _summed_to(grad, shape)
        if grad is None:
            raise ShapeError(
                f"function {self.cls.__name__}Backward returned an invalid gradient at index "
                f"{self.positions[i] - self.cls._hidden_inputs} - got shape {list(grad_shape)}, "
                f"expected shape "
                f"{list(shape)}"
            )
        if grad.dtype != self.dtypes[i]:  # torch's validate_outputs: the input's dtype
            grad = grad.cast(self.dtypes[i])
        prim = grad._prim
        if tracked:
            return prim if grad._backend is B else B.wrap(grad._backend.inner_value(prim))
        return grad._backend.inner_value(prim) if grad._backend.is_autodiff else prim


def _transposing_for_tangents() -> bool:
    from .forward_ad import transposing_for_tangents

    return transposing_for_tangents()


def _has_own_jvp(cls: type) -> bool:
    return callable(getattr(cls, "jvp", None))


def _backward_results(call: _Call, grads_out: tuple) -> tuple:
    with no_grad():
        result = call.cls.backward(call.ctx, *grads_out)
    return result if isinstance(result, tuple) else (result,)


def _summed_to(grad: Tensor, shape: tuple[int, ...]) -> Tensor | None:
    """A gradient of a shape ``shape`` broadcasts to, summed back to ``shape`` (torch's
    ``validate_outputs``); ``None`` when ``shape`` does not broadcast to it."""
    extra = grad.ndim - len(shape)
    if extra < 0:
        return None
    for n, m in zip(shape, grad.shape[extra:]):
        if n not in (m, 1):
            return None
    dims = list(range(extra)) + [
        extra + i for i, n in enumerate(shape) if n == 1 != grad.shape[extra + i]
    ]
    return (grad.sum(dims) if dims else grad).reshape(shape)


def _function_forward(backend: Any, values: list, call: _Call, k: int) -> Any:
    return call.take(k)


def _function_vjp(B: Any, g: Any, index: int, call: _Call, k: int) -> Any:  # noqa: N803
    grads = call.input_gradients(B, g, k)
    if index == len(call.positions) - 1:  # the last input's rule: nothing asks again
        call._cache = None
    return grads[index]


def _in_vmap() -> bool:
    return VMAP.depth > 0


def _refuse_unmappable(cls: type) -> None:
    """torch's refusals of a user's Function inside ``vmap``: the old form (``forward(ctx,
    ...)``) cannot be transformed at all, the new one needs a ``vmap`` rule or
    ``generate_vmap_rule``."""
    if cls.setup_context is Function.setup_context:
        raise AutodiffError(
            "In order to use an autograd.Function with functorch transforms (vmap, grad, jvp, "
            f"jacrev, ...), it must override the setup_context staticmethod ({cls.__name__} "
            "defines forward(ctx, ...)); write forward(*args) and setup_context(ctx, inputs, "
            "output), as in torch"
        )
    if not cls.generate_vmap_rule and cls.vmap is Function.vmap:
        raise AutodiffError(
            f"You tried to vmap over {cls.__name__}, but it does not have vmap support. Please "
            "override and implement the vmap staticmethod or set generate_vmap_rule=True."
        )


_FUNCTION = Op(
    "autograd_function",
    (),
    ("call", "output"),
    (_function_vjp,),
    memory_bound=False,
    variadic=True,
    forward=_function_forward,
    recomputable=False,
    without_gradient=lambda call, output: call.cls._runs_without_gradient,
)


def _release_call(node: Any) -> None:
    """``Op.on_release`` of a custom Function's node: its name (its class's, read from the
    call a consuming backward lets go of: it showed ``FunctionBackward``) is kept, and its
    context's saved tensors are freed, as torch's (a context kept past the backward gave
    them: round 94)."""
    call = node.params[0]
    if node.torch_name is None:
        node.torch_name = f"{call.cls.__name__}Backward"
    call.ctx._freed = True


_FUNCTION.on_release = _release_call


class Function:
    """torch's ``autograd.Function``: a differentiable operation written as two static
    methods, ``forward(ctx, *args)`` (run without recording, as torch's) and
    ``backward(ctx, *grad_outputs)`` returning one gradient (or ``None``) per argument of
    ``forward``; or torch's newer form, ``forward(*args)`` with ``setup_context(ctx, inputs,
    output)``. ``MyFunction.apply(*args)`` runs it and records one node per output in the
    graph; ``backward`` runs on tensors of the same backend, recorded under
    ``backward(create_graph=True)`` (so it is differentiable again when written with tensor
    ops). With several outputs, ``backward`` is called once per backward pass with one
    gradient per output, as torch's: zeros (``None`` after ``ctx.set_materialize_grads(False)``)
    for the outputs no gradient reached and those marked non-differentiable.

    >>> import retrograd as rg
    >>> class Square(rg.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x * x
    ...     @staticmethod
    ...     def backward(ctx, grad):
    ...         (x,) = ctx.saved_tensors
    ...         return 2 * x * grad
    >>> x = rg.tensor([3.0]).require_grad()
    >>> x.grad(Square.apply(x).sum().backward()).tolist()
    [6.0]
    """

    #: whether ``backward`` runs (given ``None``, or zeros when the context materializes)
    #: when the backward walks this node but no gradient reached it, as torch's engine runs
    #: its nodes; off for users' functions, which get called for gradients only
    _runs_without_gradient = False
    #: leading ``apply`` arguments the user never passed (a custom op's kernel call): the
    #: engine's messages number gradients from the user's first input, as torch's do
    _hidden_inputs = 0

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Function: define forward as a static method")

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> Any:
        return NotImplemented

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError("Function: define backward as a static method")

    #: torch's: ``vmap`` maps the function as it maps any other (here, a loop, as always)
    generate_vmap_rule = False

    @staticmethod
    def vmap(info: Any, in_dims: Any, *args: Any) -> Any:
        """torch's batching rule of the function, which a subclass defines to be mapped by
        ``vmap`` (or sets ``generate_vmap_rule = True``); here vmap loops over the batch, so
        its presence is what matters, as torch's refusal without it."""
        raise AutodiffError(
            "To use autograd.Function with vmap, you must either override the vmap "
            "staticmethod or set generate_vmap_rule=True."
        )

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        if _in_vmap() and not cls.__module__.startswith("retrograd."):
            _refuse_unmappable(cls)
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        # the inputs' values in the graph before forward, which may write into them in place
        before = [a._prim if isinstance(a, Tensor) else None for a in args]
        from .forward_ad import tangents_paused

        with no_grad(), tangents_paused():
            if cls.setup_context is not Function.setup_context:
                output = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        if cls.backward is Function.backward and hasattr(cls, "jvp"):  # forward mode only
            from .forward_ad import dual_outputs

            duals = dual_outputs(cls, ctx, args, output)
            if duals is not None:
                return duals
        positions = [i for i, wanted in enumerate(needs) if wanted]
        outputs = output if isinstance(output, tuple) else (output,)
        if ctx._dirty:
            _check_dirty(cls, ctx, outputs)
        if not positions:
            return output
        differentiable = [
            j
            for j, out in enumerate(outputs)
            if isinstance(out, Tensor) and out.is_float() and id(out) not in ctx._non_differentiable
        ]
        if not differentiable:
            return output
        inputs = [args[i] for i in positions]
        backend = inputs[0]._backend
        call = _Call(cls, ctx, positions, inputs, outputs, differentiable, backend)
        call.arguments = [(a.shape, a.dtype, a.is_float()) if isinstance(a, Tensor) else None
                          for a in args]  # fmt: skip
        recorded = list(outputs)
        prims = [before[i] for i in positions]
        dirty = {id(t) for t in ctx._dirty}
        for k, j in enumerate(differentiable):
            prim = backend.apply(_FUNCTION, *prims, params=(call, k))
            recorded[j] = Tensor(prim, backend, outputs[j]._device)
            if id(outputs[j]) in dirty:
                recorded[j] = _dirty_output(outputs[j], recorded[j])
            if prim.node is not None:  # (None: recorded under no_grad, nothing to gather)
                call.nodes.append(weakref.ref(prim.node))
                if j:  # torch's one node has every output: next_functions name which
                    prim.node.torch_output = j
        # a saved output is the recorded one, as torch's: a backward that reads it is then
        # differentiable through it (second order)
        by_value = {id(outputs[j]._prim): recorded[j] for j in differentiable}
        ctx._saved = tuple(
            by_value.get(id(t._prim), t) if isinstance(t, Tensor) else t for t in ctx._saved
        )
        return tuple(recorded) if isinstance(output, tuple) else recorded[0]


def _dirty_output(dirty: Tensor, result: Tensor) -> Tensor:
    """What ``apply`` returns for the input ``dirty`` that forward wrote into: the input
    itself, holding ``result`` in the graph (a view writes it through to its base); under
    ``no_grad`` (forward wrote the values already) one that requires grad is returned as
    another tensor of its memory that does not, as torch's."""
    from ..tensor.inplace import _name_written
    from ..tensor.views import root_of, write

    if not is_grad_enabled():
        return dirty.data if dirty.requires_grad else dirty
    # (the root of a view written shows as torch's CopySlices: it showed SliceAssignBackward0)
    before = getattr(dirty._prim, "node", None)
    root_before = getattr(root_of(dirty)._prim, "node", None)
    write("mark_dirty", dirty, result, False)
    _name_written(dirty, "mark_dirty", before, root_before, ())
    return dirty


def _check_dirty(cls: type, ctx: FunctionCtx, outputs: tuple) -> None:
    """torch's checks of the inputs ``mark_dirty`` named: each returned as an output, and
    none a leaf that requires grad (nor a view of one) while gradients are recorded."""
    returned = {id(out) for out in outputs}
    if any(id(t) not in returned for t in ctx._dirty):
        raise AutodiffError(
            f"{cls.__name__}: some elements marked as dirty during the forward method were not "
            "returned as output. The inputs that are modified inplace must all be outputs of "
            "the Function."
        )
    if not is_grad_enabled():
        return
    from ..tensor.views import root_of

    tensors_out = sum(isinstance(out, Tensor) for out in outputs)
    if tensors_out > 1 and any(root_of(t) is not t for t in ctx._dirty if isinstance(t, Tensor)):
        raise AutodiffError(
            f"{cls.__name__}: if your Function modifies inplace an input that is a view of "
            "another Tensor, your Function cannot return more than one Tensor (torch's engine "
            "does not support it); make sure the input is not a view (using .clone() for "
            "example) or return one Tensor"
        )

    for t in ctx._dirty:
        if not isinstance(t, Tensor) or not t._backend.is_autodiff:
            continue
        root = root_of(t)
        if t.is_require_grad() or root.is_require_grad():
            which = "a leaf" if root is t else "a view of a leaf"
            raise AutodiffError(
                f"{cls.__name__}: {which} Variable that requires grad has been used in an "
                "in-place operation (marked dirty by forward); do it under rg.no_grad(), as "
                "in torch"
            )


class _DifferentiatedTwice(Function):
    """The node ``once_differentiable`` puts on the gradients it returns under
    ``create_graph``: the identity forward, a backward that refuses (torch's ``DelayedError``)."""

    @staticmethod
    def forward(ctx: Any, *values: Tensor) -> Any:
        return values[0].clone() if len(values) == 1 else tuple(v.clone() for v in values)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise AutodiffError(
            "trying to differentiate twice a function that was marked with @once_differentiable"
        )


def once_differentiable(backward: Callable[..., Any]) -> Callable[..., Any]:
    """torch's decorator of a :class:`Function`'s ``backward`` that is not differentiable
    itself (NumPy, in-place or hand-written code): it runs without recording, and under
    ``backward(create_graph=True)`` the gradients it returns carry a node that refuses a
    second derivative with an ``AutodiffError``, as torch's do, where a gradient taken as a
    constant would make a wrong (zero) second derivative.

    >>> import retrograd as rg
    >>> class Cube(rg.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x**3
    ...     @staticmethod
    ...     @once_differentiable
    ...     def backward(ctx, grad):
    ...         (x,) = ctx.saved_tensors
    ...         return 3 * x**2 * grad
    >>> x = rg.tensor([2.0]).require_grad()
    >>> x.grad(Cube.apply(x).sum().backward()).tolist()
    [12.0]
    """

    @functools.wraps(backward)
    def wrapper(ctx: Any, *grad_outputs: Any) -> Any:
        with no_grad():
            result = backward(ctx, *grad_outputs)
        recording = is_grad_enabled() and any(
            isinstance(g, Tensor) and g.requires_grad for g in grad_outputs
        )
        if not recording:
            return result
        results = result if isinstance(result, tuple) else (result,)
        marked = tuple(
            _DifferentiatedTwice.apply(r.detach().require_grad())
            if isinstance(r, Tensor) and r.is_float()
            else r
            for r in results
        )
        return marked if isinstance(result, tuple) else marked[0]

    return wrapper


class _BackwardOfOwnJvp(Function):
    """A custom function's ``backward`` as forward-mode AD's transposition pass records it:
    ``backward`` is linear in the output gradients, and the transpose of that map is the
    function's ``jvp``, so the tangent ``unpack_dual`` reads through the function is
    ``jvp``'s, as torch's forward mode computes it (``backward`` is not differentiated)."""

    @staticmethod
    def forward(ctx: Any, call: _Call, *grads_out: Any) -> Any:
        ctx.call = call
        ctx.outputs = [(g.shape, g.dtype) if isinstance(g, Tensor) else None for g in grads_out]
        return _backward_results(call, grads_out)

    @staticmethod
    def backward(ctx: Any, *input_tangents: Any) -> Any:
        from ..tensor import zeros

        call = ctx.call
        like = next(t for t in input_tangents if isinstance(t, Tensor))
        tangents = []
        for i, spec in enumerate(call.arguments):
            tangent = input_tangents[i] if i < len(input_tangents) else None
            if tangent is None and spec is not None and spec[2]:
                tangent = zeros(spec[0], dtype=spec[1], backend=like.backend, device=like.device)
            tangents.append(tangent)
        call.ctx._in_jvp = True
        try:
            out_tangents = call.cls.jvp(call.ctx, *tangents[call.cls._hidden_inputs :])
        finally:
            call.ctx._in_jvp = False
        out_tangents = out_tangents if isinstance(out_tangents, tuple) else (out_tangents,)
        if len(out_tangents) != len(ctx.outputs):
            raise AutodiffError(
                f"function {call.cls.__name__}.jvp returned {len(out_tangents)} tangents for "
                f"{len(ctx.outputs)} outputs"
            )
        return (None, *out_tangents)
