"""torch's ``torch.autograd`` names over retrograd's gradients-as-a-value: ``Variable``,
``grad``, ``inference_mode``, custom functions (``Function``) and ``vmap`` (torch's
``torch.vmap``, here since it maps functions of tensors as ``grad`` does).

``Variable(t, requires_grad=False)`` is the tensor itself (torch deprecated the wrapper long
ago: a tensor is a variable); with ``requires_grad=True`` a leaf that requires grad.
``grad(outputs, inputs)`` returns the gradients of ``outputs`` with respect to ``inputs``, as
torch's does: it runs ``backward`` on the sum of the outputs (weighted by ``grad_outputs``)
and reads each input's gradient from the result. The inputs must be leaves that require grad
or tensors whose gradient is retained (``retain_grad()``) before the outputs are computed.

>>> import retrograd as rg
>>> x = rg.autograd.Variable(rg.tensor([1.0, 2.0]), requires_grad=True)
>>> rg.autograd.grad((x * x).sum(), x)[0].tolist()
[2.0, 4.0]
"""

from __future__ import annotations

import weakref
from typing import Any

from ..autodiff import enable_grad, no_grad, set_grad_enabled
from ..autodiff.ops import Op
from ..errors import AutodiffError, InvalidArgumentError, ShapeError, check_callable
from ..tensor import Tensor
from . import functional, profiler
from .anomaly_mode import (
    detect_anomaly,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_detect_anomaly,
)
from .differentiate import backward, grad
from .gradient_checks import GradcheckError, gradcheck, gradgradcheck

__all__ = [
    "Function",
    "FunctionCtx",
    "GradcheckError",
    "Variable",
    "backward",
    "detect_anomaly",
    "functional",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "inference_mode",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "profiler",
    "set_detect_anomaly",
    "set_grad_enabled",
    "vmap",
]


def Variable(data: Any, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # noqa: N802 (torch's name)
    """The tensor ``data`` itself (made a leaf that requires grad with ``requires_grad``)."""
    if not isinstance(data, Tensor):
        from ..tensor import tensor

        data = tensor(data)
    if requires_grad and not data.is_require_grad():
        data = data.detach() if data.requires_grad else data
        data.require_grad()
    return data


class inference_mode(no_grad):  # noqa: N801 (torch's name)
    """torch's ``inference_mode``: nothing is recorded in the block (``rg.no_grad``);
    ``inference_mode(False)`` records as usual. A context manager and a decorator."""

    def __init__(self, mode: bool = True):
        super().__init__()
        self._target = not mode


# -- custom functions ------------------------------------------------------------------------------
class FunctionCtx:
    """What ``forward`` hands ``backward`` in a :class:`Function`: ``save_for_backward``,
    ``saved_tensors``, ``needs_input_grad``, ``mark_non_differentiable``,
    ``set_materialize_grads``, and any attribute set on it."""

    def __init__(self, needs_input_grad: tuple[bool, ...]) -> None:
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True
        self._saved: tuple[Any, ...] = ()
        self._non_differentiable: set[int] = set()

    def save_for_backward(self, *tensors: Any) -> None:
        """Keep ``tensors`` for ``backward`` (their values now: a later in-place op on one of
        them is not seen, as torch's version check would have it refuse)."""
        self._saved = tuple(
            Tensor._result(t._prim, t._backend, t._device) if isinstance(t, Tensor) else t
            for t in tensors
        )

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return self._saved

    def mark_non_differentiable(self, *tensors: Any) -> None:
        """These outputs carry no gradient (indices, masks)."""
        self._non_differentiable.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool) -> None:
        """Whether ``backward`` gets zeros (default) or ``None`` for outputs without a gradient."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors: Any) -> None:
        raise AutodiffError(
            "Function: mark_dirty (an input modified in place by forward) is not supported; "
            "return a new tensor from forward"
        )


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

    def take(self, k: int) -> Any:
        value, self._pending[k] = self._pending[k], None
        if value is None:
            raise AutodiffError("Function: a custom function's output cannot be recomputed")
        return value

    def input_gradients(self, B: Any, g: Any, k: int) -> tuple:  # noqa: N803 (the rules' name)
        """``backward``'s gradients of the tensor inputs, as ``B``'s primitives, for the
        gradient ``g`` of output ``k`` (the others' taken as zero); one call per ``g``."""
        # The gradients of every input come from one backward call per incoming ``g``; the
        # cache is keyed by the object itself (a weak reference: an id alone could be reused
        # by the next backward's gradient, with retain_graph, once this one is freed).
        if self._cache is not None and self._cache[0] == k and self._cache[1]() is g:
            return self._cache[2]
        tracked = getattr(B, "is_autodiff", False)
        if tracked:  # create_graph: backward is recorded as it runs
            incoming = Tensor(g, B, self.device)
        else:
            incoming = Tensor(self.backend.wrap(g), self.backend, self.device)
        from ..tensor import zeros_like

        grads_out = []
        for j, out in enumerate(self.outputs):
            if j == self.differentiable[k]:
                grads_out.append(incoming)
            elif isinstance(out, Tensor) and self.ctx.materialize_grads:
                zeros = zeros_like(out)
                grads_out.append(zeros if out.is_float() else zeros.cast(incoming.dtype))
            else:
                grads_out.append(None)
        mode = enable_grad() if tracked else no_grad()
        with mode:
            result = self.cls.backward(self.ctx, *grads_out)
        result = result if isinstance(result, tuple) else (result,)
        expected = len(self.ctx.needs_input_grad)
        if len(result) != expected:
            raise AutodiffError(
                f"function {self.cls.__name__}Backward returned an incorrect number of "
                f"gradients (expected {expected}, got {len(result)})"
            )
        grads = tuple(
            self._primitive(B, result[p], i, tracked) for i, p in enumerate(self.positions)
        )
        try:
            self._cache = (k, weakref.ref(g), grads)
        except TypeError:  # a primitive without weak references: no caching
            self._cache = None
        return grads

    def _primitive(self, B: Any, grad: Any, i: int, tracked: bool) -> Any:  # noqa: N803
        shape = self.shapes[i]
        if grad is None:  # no gradient: the input's stays absent, as torch's (not zeros)
            return None
        if not isinstance(grad, Tensor):
            raise AutodiffError(
                f"function {self.cls.__name__}Backward returned a {type(grad).__name__} as "
                f"gradient {self.positions[i]}; expected a tensor or None"
            )
        grad_shape = grad.shape
        if grad_shape != shape:
            grad = _summed_to(grad, shape)
        if grad is None:
            raise ShapeError(
                f"function {self.cls.__name__}Backward returned an invalid gradient at index "
                f"{self.positions[i]} - got shape {list(grad_shape)}, expected shape "
                f"{list(shape)}"
            )
        if grad.dtype != self.dtypes[i]:  # torch's validate_outputs: the input's dtype
            grad = grad.cast(self.dtypes[i])
        prim = grad._prim
        if tracked:
            return prim if grad._backend is B else B.wrap(grad._backend.inner_value(prim))
        return grad._backend.inner_value(prim) if grad._backend.is_autodiff else prim


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
    return call.input_gradients(B, g, k)[index]


_FUNCTION = Op(
    "autograd_function",
    (),
    ("call", "output"),
    (_function_vjp,),
    memory_bound=False,
    variadic=True,
    forward=_function_forward,
    recomputable=False,
)


class Function:
    """torch's ``autograd.Function``: a differentiable operation written as two static
    methods, ``forward(ctx, *args)`` (run without recording, as torch's) and
    ``backward(ctx, *grad_outputs)`` returning one gradient (or ``None``) per argument of
    ``forward``; or torch's newer form, ``forward(*args)`` with ``setup_context(ctx, inputs,
    output)``. ``MyFunction.apply(*args)`` runs it and records one node per output in the
    graph; ``backward`` runs on tensors of the same backend, recorded under
    ``backward(create_graph=True)`` (so it is differentiable again when written with tensor
    ops). With several outputs, ``backward`` is called once per output that receives a
    gradient, the others' gradients zero (the sum is the same: ``backward`` is linear in them).

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

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Function: define forward as a static method")

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> Any:
        return NotImplemented

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError("Function: define backward as a static method")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        with no_grad():
            if cls.setup_context is not Function.setup_context:
                output = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        positions = [i for i, wanted in enumerate(needs) if wanted]
        if not positions:
            return output
        outputs = output if isinstance(output, tuple) else (output,)
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
        recorded = list(outputs)
        prims = [t._prim for t in inputs]
        for k, j in enumerate(differentiable):
            prim = backend.apply(_FUNCTION, *prims, params=(call, k))
            recorded[j] = Tensor(prim, backend, outputs[j]._device)
        # a saved output is the recorded one, as torch's: a backward that reads it is then
        # differentiable through it (second order)
        by_value = {id(outputs[j]._prim): recorded[j] for j in differentiable}
        ctx._saved = tuple(
            by_value.get(id(t._prim), t) if isinstance(t, Tensor) else t for t in ctx._saved
        )
        return tuple(recorded) if isinstance(output, tuple) else recorded[0]


# -- vmap ------------------------------------------------------------------------------------------
def vmap(
    func: Any,
    in_dims: Any = 0,
    out_dims: Any = 0,
    randomness: str = "error",
    *,
    chunk_size: int | None = None,
) -> Any:
    """torch's ``vmap``: ``func`` mapped over dimension ``in_dims`` of its tensor arguments
    (an int for all, or one int or ``None`` per positional argument; an argument may be a
    pytree, a tuple, list or dict of tensors, mapped leaf by leaf), the results stacked along
    ``out_dims`` (an int, or one per output of a tuple; a dict or list output is stacked leaf
    by leaf, as torch's per-sample gradients of ``grad`` over a parameter dict are). Computed
    as a loop over the batch (the results and gradients are those of torch's batching rules;
    the speed is a loop's). torch refuses random ops inside unless ``randomness`` says how;
    here each call draws for itself, as ``randomness="different"`` does."""
    check_callable("vmap", func)

    def checked(dim: Any, leaf: Tensor) -> Any:
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise InvalidArgumentError(
                f"vmap: in_dims={in_dims!r}: each in_dim must be an int or None, got {dim!r}"
            )
        if not -max(leaf.ndim, 1) <= dim < max(leaf.ndim, 1) or leaf.ndim == 0:
            raise ShapeError(
                f"vmap: in_dims={in_dims!r}: got in_dim={dim} for an input of shape "
                f"{tuple(leaf.shape)}; expected {-leaf.ndim} <= in_dim < {leaf.ndim}"
            )
        return leaf.shape[dim]

    def mapped(*args: Any) -> Any:
        dims = in_dims if isinstance(in_dims, tuple | list) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ShapeError(
                f"vmap: in_dims is compatible with {len(dims)} arguments, got {len(args)}"
            )
        sizes = {
            checked(d, leaf)
            for a, d in zip(args, dims)
            if d is not None
            for leaf in _leaves(a)
            if isinstance(leaf, Tensor)
        }
        if len(sizes) != 1:
            raise ShapeError(
                "vmap: expected all tensors to have the same size in the mapped dimension, got "
                f"sizes {sorted(sizes)} (and at least one mapped tensor)"
            )
        (size,) = sizes
        results = []
        for i in range(size):
            picked = [a if d is None else _select(a, d, i) for a, d in zip(args, dims)]
            results.append(func(*picked))
        if isinstance(results[0], Tensor) and isinstance(out_dims, tuple) and len(out_dims) == 1:
            return _stacked(results, out_dims[0], out_dims)  # torch's one exception
        return _stacked(results, out_dims, out_dims)

    return mapped


# vmap's helpers are module functions, not closures: a closure that calls itself is a
# reference cycle, left to the garbage collector at every vmap call
def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, dict):
        return [leaf for value in tree.values() for leaf in _leaves(value)]
    if isinstance(tree, tuple | list):
        return [leaf for value in tree for leaf in _leaves(value)]
    return [tree]


def _select(tree: Any, dim: int, i: int) -> Any:
    if isinstance(tree, dict):
        return {key: _select(value, dim, i) for key, value in tree.items()}
    if isinstance(tree, tuple | list):
        return type(tree)(_select(value, dim, i) for value in tree)
    return tree.select(dim, i) if isinstance(tree, Tensor) else tree


def _stacked(results: list[Any], dim: Any, out_dims: Any) -> Any:
    """The results stacked leaf by leaf, ``dim`` an int for a whole subtree or a tree of
    dims with the results' structure (torch's pytree prefix); ``out_dims`` as vmap got it."""
    from ..tensor import stack

    first = results[0]
    if isinstance(first, dict):
        if isinstance(dim, dict) and set(dim) != set(first):
            _mismatch(out_dims, dim, first)
        return {
            key: _stacked(
                [r[key] for r in results], dim[key] if isinstance(dim, dict) else dim, out_dims
            )
            for key in first
        }
    if isinstance(first, tuple | list):
        if isinstance(dim, tuple | list) and (
            type(dim) is not type(first) or len(dim) != len(first)
        ):
            _mismatch(out_dims, dim, first)
        return type(first)(
            _stacked(
                [r[k] for r in results], dim[k] if isinstance(dim, tuple | list) else dim, out_dims
            )
            for k in range(len(first))
        )
    if not isinstance(dim, int) or isinstance(dim, bool):
        _mismatch(out_dims, dim, first)
    return stack(results, dim=dim)


def _mismatch(out_dims: Any, dim: Any, output: Any) -> None:
    raise InvalidArgumentError(
        f"vmap: out_dims={out_dims!r} is not compatible with the structure of the outputs "
        f"(out_dims {dim!r} against a {type(output).__name__})"
    )
