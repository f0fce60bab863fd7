"""Hooks of a module, as torch's: forward (``register_forward_pre_hook``,
``register_forward_hook``), backward (``register_full_backward_hook``,
``register_full_backward_pre_hook``), and the handle that removes one.

Backward hooks see the gradients flowing through the module: its input is passed through an
identity :class:`~retrograd.autograd.Function` whose backward receives the input's gradient,
and its output through another whose backward receives the output's (torch's
``BackwardHook`` does the same). They are supported for a module called with one tensor and
returning one tensor (a layer: the Grad-CAM and gradient-logging uses); another call raises
an error that says so.

A module without hooks keeps none: its ``__call__`` looks for ``_call_hooks`` in its
``__dict__`` and calls ``forward`` directly when there are none."""

from __future__ import annotations

import warnings
from typing import Any

from ...autodiff.handles import RemovableHandle
from ...autograd import Function
from ...errors import (
    AutodiffError,
    DTypeError,
    InvalidArgumentError,
    ShapeError,
    check_callable,
)
from ...tensor import Tensor

__all__ = [
    "GLOBAL_HOOKS",
    "RemovableHandle",
    "any_global_hooks",
    "call_with_hooks",
    "register_hook",
    "register_state_hook",
    "state_hooks",
]


#: the register method of each kind of hook, for errors
_NAMES = {
    "pre": "forward_pre",
    "post": "forward",
    "backward": "full_backward",
    "backward_pre": "full_backward_pre",
    "legacy": "backward",
}


def _tables() -> dict[str, Any]:
    return {
        "pre": {},
        "post": {},
        "backward": {},
        "backward_pre": {},
        "legacy": {},  # register_backward_hook's (torch's deprecated, non-full ones)
        "always": set(),  # the keys of the forward hooks registered with always_call
        "next": 0,
    }


#: torch's global hooks (``nn.modules.module.register_module_forward_pre_hook``,
#: ``register_module_forward_hook``, ``register_module_full_backward_pre_hook`` and
#: ``register_module_full_backward_hook``): every module's call runs them before its own
GLOBAL_HOOKS = _tables()
_NO_HOOKS = _tables()


def any_global_hooks() -> bool:
    """Whether a global hook is registered (a module without its own then still goes through
    :func:`call_with_hooks`)."""
    return bool(
        GLOBAL_HOOKS["pre"]
        or GLOBAL_HOOKS["post"]
        or GLOBAL_HOOKS["backward"]
        or GLOBAL_HOOKS["backward_pre"]
    )


def register_hook(
    module: Any, kind: str, hook: Any, prepend: bool, with_kwargs: bool, always_call: bool = False
) -> RemovableHandle:
    """Add ``hook`` to ``module``'s ``kind`` (``"pre"`` or ``"post"``) table (``module``
    ``None``: the global one); ``always_call`` (forward hooks): it runs also when the
    forward, or a hook before it, raises."""
    # refused here: registered, it would fail every later call of the module
    check_callable(f"register_{_NAMES.get(kind, kind)}_hook", hook, "hook")
    if module is None:
        hooks = GLOBAL_HOOKS
    else:
        hooks = module.__dict__.get("_call_hooks")
        if hooks is None:
            hooks = _tables()
            object.__setattr__(module, "_call_hooks", hooks)
    key = hooks["next"]
    hooks["next"] = key + 1
    table = hooks[kind]
    if prepend:  # the same dict, reordered: handles keep referring to it
        rest = list(table.items())
        table.clear()
        table[key] = (hook, with_kwargs)
        table.update(rest)
    else:
        table[key] = (hook, with_kwargs)
    if always_call:
        hooks.setdefault("always", set()).add(key)
    return RemovableHandle(table, key)


#: the kinds of state hooks: torch's tables ``_state_dict_pre_hooks``, ``_state_dict_hooks``,
#: ``_load_state_dict_pre_hooks``, ``_load_state_dict_post_hooks``
STATE_KINDS = ("state_dict_pre", "state_dict", "load_state_dict_pre", "load_state_dict_post")


def register_state_hook(
    module: Any, kind: str, hook: Any, op: str, public: bool = True
) -> RemovableHandle:
    """Add ``hook`` to ``module``'s ``kind`` state hooks (:data:`STATE_KINDS`); ``public``:
    registered by torch's public method (a ``state_dict`` post-hook must then return None;
    one of ``_register_state_dict_hook`` may return the dict that replaces the state)."""
    check_callable(op, hook, "hook")
    hooks = module.__dict__.get("_state_hooks")
    if hooks is None:
        hooks = {kind: {} for kind in STATE_KINDS} | {"next": 0}
        object.__setattr__(module, "_state_hooks", hooks)
    key = hooks["next"]
    hooks["next"] = key + 1
    hooks[kind][key] = (hook, public)
    return RemovableHandle(hooks[kind], key)


def state_hooks(module: Any, kind: str) -> list[tuple[Any, bool]]:
    """``module``'s ``kind`` state hooks, ``(hook, public)`` in registration order."""
    hooks = module.__dict__.get("_state_hooks")
    return [] if hooks is None else list(hooks[kind].values())


def _phase(hooks: dict[str, Any], kind: str) -> list[tuple[Any, tuple[Any, bool]]]:
    """The ``kind`` hooks to run now, the global ones first (their
    keys kept apart from the module's), read when the phase starts as torch's ``_call_impl``
    does: a hook removed (or added) by a sub-module's call during the forward is seen by the
    outer module's hooks that run after it."""
    return [(("global", k), v) for k, v in GLOBAL_HOOKS[kind].items()] + list(hooks[kind].items())


def _always_called(hooks: dict[str, Any], key: Any) -> bool:
    if isinstance(key, tuple):
        return key[1] in GLOBAL_HOOKS["always"]
    return key in hooks.get("always", ())


def call_with_hooks(module: Any, hooks: dict[str, Any] | None, args: tuple, kwargs: dict) -> Any:
    """``module.forward`` with its pre-hooks before (each may replace the arguments) and its
    hooks after (each may replace the output), in registration order, the global ones first.
    When any of it raises, the forward hooks registered with ``always_call`` that have not
    run yet are called (with the output so far, ``None`` if the forward did not return), then
    the error goes on, as torch's ``_call_impl`` does. The backward hooks that will see this
    call's gradients are those registered when it starts (torch's ``BackwardHook`` keeps the
    list): a handle removed between the forward and the backward still gets this one."""
    hooks = _NO_HOOKS if hooks is None else hooks
    backward_hooks = {kind: dict(_phase(hooks, kind)) for kind in ("backward", "backward_pre")}
    called: set[Any] = set()
    output = None
    try:
        for _, (hook, with_kwargs) in _phase(hooks, "pre"):
            if with_kwargs:
                result = hook(module, args, kwargs)
                if result is not None:
                    args, kwargs = _args_and_kwargs(module, result)
            else:
                result = hook(module, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        backward = backward_hooks["backward"] or backward_hooks["backward_pre"]
        if backward:
            args, state = _watch_input(module, backward_hooks, args)
        output = module.forward(*args, **kwargs)
        for key, (hook, with_kwargs) in _phase(hooks, "post"):
            if _always_called(hooks, key):
                called.add(key)
            result = (
                hook(module, args, kwargs, output) if with_kwargs else hook(module, args, output)
            )
            if result is not None:
                output = result
        if backward:
            output = _watch_output(module, backward_hooks, output, state)
        if hooks.get("legacy"):
            _hook_last_op(module, hooks["legacy"], args, output)
        return output
    except Exception:
        for key, (hook, with_kwargs) in _phase(hooks, "post"):
            if not _always_called(hooks, key) or key in called:
                continue
            try:
                result = (
                    hook(module, args, kwargs, output)
                    if with_kwargs
                    else hook(module, args, output)
                )
            except Exception as error:  # the forward's error is the one that goes on
                warnings.warn(
                    "a forward hook with always_call=True raised an exception that was "
                    f"silenced as another error was raised in forward: {error}",
                    stacklevel=3,
                )
                continue
            if result is not None:
                output = result
        raise


def _args_and_kwargs(module: Any, result: Any) -> tuple[tuple, dict]:
    """A ``with_kwargs`` pre-hook's result: an ``(args, kwargs)`` pair, or an error naming
    the module (unpacking anything else failed with a bare ``ValueError``)."""
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        raise InvalidArgumentError(
            f"{type(module).__name__}: a forward pre-hook registered with with_kwargs=True "
            "must return None or a tuple of (new_args, new_kwargs), got "
            f"{type(result).__name__}" + (f" of {len(result)}" if isinstance(result, tuple) else "")
        )
    args, kwargs = result
    return (args if isinstance(args, tuple) else (args,)), kwargs


def _watch_input(module: Any, hooks: dict[str, Any], args: tuple) -> tuple[tuple, dict]:
    from ...tensor import Tensor

    positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    if not positions:  # the tensor given by keyword (``layer(input=x)``): torch's hooks then
        # get an empty grad_input (it watches the positional arguments only)
        return args, {"grad_output": None, "input_tracked": False, "no_input": ()}
    if len(positions) != 1:
        raise AutodiffError(
            f"{type(module).__name__}: backward hooks are supported on a module called with one "
            f"tensor, this call has {len(positions)}; register the hook on a submodule, or use "
            "an rg.autograd.Function"
        )
    i = positions[0]
    state = {"grad_output": None, "input_tracked": args[i].requires_grad}
    if args[i].requires_grad:
        args = (*args[:i], _InputGradients.apply(args[i], module, hooks, state), *args[i + 1 :])
    return args, state


def _watch_output(module: Any, hooks: dict[str, Any], output: Any, state: dict) -> Any:
    from ...tensor import Tensor

    if not isinstance(output, Tensor):
        raise AutodiffError(
            f"{type(module).__name__}: backward hooks are supported on a module returning one "
            f"tensor, this call returned {type(output).__name__}"
        )
    if not output.requires_grad:
        return output
    return _OutputGradients.apply(output, module, hooks, state)


def _replacement(ctx: Any, kind: str, result: Any, grad: Any) -> Any:
    """The gradient a backward hook's ``result`` gives in place of ``grad``: a tensor of
    ``grad``'s shape (or None), or an error naming the module and the hook (the identity
    Function the hook runs in named neither: "function _InputGradientsBackward returned
    ...")."""
    new = result[0] if isinstance(result, tuple | list) and len(result) == 1 else result
    where = f"{type(ctx.module).__name__}: a {kind} hook"
    if new is None:  # (None,): no gradient, as torch's
        return None
    if not isinstance(new, Tensor):
        raise DTypeError(
            f"{where} returned {type(result).__name__}; expected None, a tensor, or a tuple "
            "of one tensor (the gradient that replaces the one it was given)"
        )
    if grad is not None and tuple(new.shape) != tuple(grad.shape):
        raise ShapeError(
            f"{where} returned a gradient of shape {list(new.shape)} for one of shape "
            f"{list(grad.shape)}"
        )
    return new


class _Watch(Function):
    """Identity on a module's input or output whose backward sees the gradient flowing
    through it; the module, its hooks and the call's shared state ride along. As torch's
    ``BackwardHookFunction`` node it runs whenever the backward walks it, a gradient or not
    (a hook returned ``None``): the output's hooks then see ``None`` and pass it on into
    the module, the input's see zeros (torch materializes them) and pass those on."""

    _runs_without_gradient = True

    @staticmethod
    def forward(ctx: Any, x: Any, module: Any, hooks: dict, state: dict) -> Any:
        ctx.module, ctx.hooks, ctx.state = module, hooks, state
        return x.clone()


class _OutputGradients(_Watch):
    """Identity; its backward hands the output's gradient to the pre-hooks (which may replace
    it) and keeps it for the full hooks."""

    @staticmethod
    def forward(ctx: Any, x: Any, module: Any, hooks: dict, state: dict) -> Any:
        ctx.set_materialize_grads(False)  # torch's output hook sees and returns the None
        return _Watch.forward(ctx, x, module, hooks, state)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        for hook, _ in list(ctx.hooks["backward_pre"].values()):
            result = hook(ctx.module, (grad,))
            if result is not None:
                grad = _replacement(ctx, "register_full_backward_pre_hook", result, grad)
        ctx.state["grad_output"] = (grad,)
        if not ctx.state["input_tracked"]:  # no input gradient will come: torch's (None,)
            for hook, _ in list(ctx.hooks["backward"].values()):
                hook(ctx.module, ctx.state.get("no_input", (None,)), (grad,))
        return grad, None, None, None


class _InputGradients(_Watch):
    """Identity; its backward hands the input's gradient, with the output's, to the full
    hooks (each may replace the input's)."""

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        for hook, _ in list(ctx.hooks["backward"].values()):
            result = hook(ctx.module, (grad,), ctx.state["grad_output"])
            if result is not None:
                grad = _replacement(ctx, "register_full_backward_hook", result, grad)
        return grad, None, None, None


# -- the deprecated module backward hooks (register_backward_hook) -------------------------------
_MULTIPLE_NODES = (
    "Using a non-full backward hook when the forward contains multiple autograd Nodes is "
    "deprecated and will be removed in future versions. This hook will be missing some "
    "grad_input. Please use register_full_backward_hook to get the documented behavior."
)


def _hook_last_op(module: Any, legacy: dict, args: tuple, output: Any) -> None:
    """torch's non-full backward hooks: registered on the op that made the output's first
    tensor, so ``grad_input`` is what that op's backward computed for its own inputs (the
    module's input only where the module is that one op), in torch's order for that op;
    torch's FutureWarning when the module's output or input is not tensors, or its forward
    is more than that op."""
    first = output
    while not isinstance(first, Tensor):
        if isinstance(first, dict):
            first = next((v for v in first.values() if isinstance(v, Tensor)), None)
        elif isinstance(first, tuple | list) and first:
            first = first[0]
        else:
            return
        if first is None:
            return
    backend = first.backend
    node = getattr(first._prim, "node", None) if backend.is_autodiff else None
    if node is None or node.op is None:
        return
    for hook, _ in list(legacy.values()):
        backend.register_input_hook(first._prim, _node_hook(module, hook, first, node))
    _warn_legacy(args, output, node)


def _node_of(value: Any) -> Any:
    if not isinstance(value, Tensor) or not value.backend.is_autodiff:
        return None
    node = getattr(value._prim, "node", None)
    return None if node is None or node.op is None else node


def _warn_legacy(args: tuple, output: Any, node: Any) -> None:
    """torch's ``_maybe_warn_non_full_backward_hook``, the same FutureWarnings."""
    outputs = (output,) if isinstance(output, Tensor) else output
    if not (isinstance(outputs, tuple) and all(isinstance(o, Tensor) for o in outputs)):
        warnings.warn(
            "Using non-full backward hooks on a Module that does not return a single Tensor or "
            "a tuple of Tensors is deprecated and will be removed in future versions. This hook "
            "will be missing some of the grad_output. Please use register_full_backward_hook to "
            "get the documented behavior.",
            FutureWarning,
            stacklevel=4,
        )
        return
    if not all(isinstance(a, Tensor) for a in args):
        warnings.warn(
            "Using non-full backward hooks on a Module that does not take as input a single "
            "Tensor or a tuple of Tensors is deprecated and will be removed in future versions. "
            "This hook will be missing some of the grad_input. Please use "
            "register_full_backward_hook to get the documented behavior.",
            FutureWarning,
            stacklevel=4,
        )
        return
    made_by = {id(n): n for n in map(_node_of, outputs) if n is not None}
    if len(made_by) > 1:
        warnings.warn(
            "Using a non-full backward hook when outputs are generated by different autograd "
            "Nodes is deprecated and will be removed in future versions. This hook will be "
            "missing some grad_output. Please use register_full_backward_hook to get the "
            "documented behavior.",
            FutureWarning,
            stacklevel=4,
        )
        return
    # torch compares the inputs' backward nodes with the op's next functions (a leaf's
    # accumulator, None for an untracked input): equal only when the forward is that one op
    inputs = {id(n) for n in map(_node_of, args) if n is not None}
    parents = {None if p is None else id(p) for p in node.parents}
    if inputs != parents:
        warnings.warn(_MULTIPLE_NODES, FutureWarning, stacklevel=4)


def _node_hook(module: Any, hook: Any, output: Tensor, node: Any) -> Any:
    """``hook(module, grad_input, grad_output)`` as the backend's input hook of ``node``,
    the gradients as tensors (in torch's order for the op: :data:`_TORCH_ORDER`)."""
    make, backend, device = type(output)._result, output.backend, output.device
    layout = _TORCH_ORDER.get(node.op.name)
    to_torch, from_torch = layout(node, module) if layout is not None else (None, None)
    name = type(module).__name__

    def on_gradients(grad_backend: Any, found: tuple, grad: Any) -> Any:
        tracked = getattr(grad_backend, "is_autodiff", False)

        def as_tensor(value: Any) -> Any:
            if value is None:
                return None
            if tracked:
                return make(value, grad_backend, device)
            return make(backend.wrap(value), backend, device)

        grad_input = tuple(as_tensor(v) for v in found)
        if to_torch is not None:
            grad_input = to_torch(grad_input)
        result = hook(module, grad_input, (as_tensor(grad),))
        if result is None:
            return None
        if isinstance(result, Tensor):
            result = (result,)
        if not isinstance(result, tuple | list) or len(result) != len(grad_input):
            raise InvalidArgumentError(
                f"{name}: a backward hook (register_backward_hook) returned "
                f"{type(result).__name__}"
                + (f" of {len(result)}" if isinstance(result, tuple | list) else "")
                + f"; expected None or a tuple of {len(grad_input)} gradients (its grad_input)"
            )
        for new, old in zip(result, grad_input):
            if new is not None and not isinstance(new, Tensor):
                raise DTypeError(
                    f"{name}: a backward hook (register_backward_hook) returned a "
                    f"{type(new).__name__} in grad_input; expected tensors or None"
                )
            if new is not None and old is not None and tuple(new.shape) != tuple(old.shape):
                raise ShapeError(
                    f"{name}: a backward hook (register_backward_hook) returned a gradient of "
                    f"shape {list(new.shape)} for one of shape {list(old.shape)}"
                )
        if from_torch is not None:
            result = from_torch(tuple(result))

        def as_inner(value: Any) -> Any:
            if value is None:
                return None
            prim, source = value._prim, value.backend
            if tracked:
                return (
                    prim if source is grad_backend else grad_backend.wrap(source.inner_value(prim))
                )
            return source.inner_value(prim) if source.is_autodiff else prim

        return [as_inner(v) for v in result]

    return on_gradients


def _transposed(value: Any) -> Any:
    return None if value is None else value.t()


def _linear_order(node: Any, module: Any) -> tuple[Any, Any]:
    """``linear`` (input, weight, bias) is torch's ``addmm(bias, input, weight.t())``, or
    ``mm(input, weight.t())`` without a bias: the gradients in that order, and back. A bias
    that requires no gradient is no parent of the node, as none is; the module's ``bias``
    tells them apart (``None`` in ``grad_input`` for a frozen one, as torch's)."""
    frozen_bias = isinstance(getattr(module, "bias", None), Tensor)
    if node.parents[2] is not None or frozen_bias:
        return (
            lambda g: (g[2], g[0], _transposed(g[1])),
            lambda g: (g[1], _transposed(g[2]), g[0]),
        )
    return (
        lambda g: (g[0], _transposed(g[1])),
        lambda g: (g[0], _transposed(g[1]), None),
    )


#: the ops whose backward node torch lays out otherwise than retrograd's op: by op name, the
#: node to ``(to_torch, from_torch)``, the functions between the two orders of gradients
_TORCH_ORDER = {"linear": _linear_order}
