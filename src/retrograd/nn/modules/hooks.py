"""Hooks of a module, as torch's: forward (``register_forward_pre_hook``,
``register_forward_hook``), backward (``register_full_backward_hook``,
``register_full_backward_pre_hook``), and the handle that removes one.

Backward hooks see the gradients flowing through the module: its input is passed through an
identity :class:`~retrograd.autograd.Function` whose backward receives the input's gradient,
and its output through another whose backward receives the output's (torch's
``BackwardHook`` does the same). As torch's, the input's gradients are one per positional
argument (``None`` for one that is no tensor or needs no gradient), the output's one per
output (the output, or each element of a returned tuple).

A module without hooks keeps none: its ``__call__`` looks for ``_call_hooks`` in its
``__dict__`` and calls ``forward`` directly when there are none."""

from __future__ import annotations

import warnings
from typing import Any

from ...autodiff.grad_mode import is_grad_enabled
from ...autodiff.handles import RemovableHandle
from ...autograd import Function
from ...errors import (
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


def _put(base: tuple, positions: list[int], values: Any) -> tuple:
    """``base`` with ``values`` at ``positions``: the call's arguments or outputs with their
    watched tensors, or (``base`` all ``None``) torch's ``BackwardHook._pack_with_none``, a
    gradient per argument or per output of the call."""
    items = list(base)
    for i, value in zip(positions, values):
        items[i] = value
    return tuple(items)


def _watch_input(module: Any, hooks: dict[str, Any], args: tuple) -> tuple[tuple, dict]:
    """The call's positional arguments, their tensors passed through one identity Function
    whose backward runs the full hooks with a gradient per argument (``None`` for one that is
    no tensor or needs none), as torch's ``BackwardHook.setup_input_hook``."""
    positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    tracked = any(args[i].requires_grad for i in positions) and is_grad_enabled()
    state = {
        "grad_output": None,
        "input_tracked": tracked,
        "inputs": (positions, len(args)),
        # (what the full hooks get when no input gradient will come: torch's Nones, one per
        # argument; none for a tensor given by keyword, which torch does not watch)
        "no_input": (None,) * len(args),
    }
    if tracked:
        watched = _InputGradients.apply(module, hooks, state, *(args[i] for i in positions))
        args = _put(args, positions, watched)
    return args, state


def _watch_output(module: Any, hooks: dict[str, Any], output: Any, state: dict) -> Any:
    """The output, its tensors (the output, or those of a returned tuple) passed through one
    identity Function whose backward runs the pre-hooks and keeps the gradients, one per
    output, for the full hooks (torch's ``setup_output_hook``); an output with no tensor
    that requires grad is returned as it is (the full hooks then do not run, as torch's)."""
    outputs = output if isinstance(output, tuple) else (output,)
    positions = [i for i, out in enumerate(outputs) if isinstance(out, Tensor)]
    if not (any(outputs[i].requires_grad for i in positions) and is_grad_enabled()):
        return output
    state["outputs"] = (positions, len(outputs))
    watched = _OutputGradients.apply(module, hooks, state, *(outputs[i] for i in positions))
    replaced = _put(outputs, positions, watched)
    return replaced if isinstance(output, tuple) else replaced[0]


def _replaced_gradients(ctx: Any, kind: str, result: Any, grads: tuple) -> tuple:
    """The gradients a backward hook's ``result`` gives in place of ``grads`` (one per
    argument or output of the call): as many entries, each a tensor of the shape it replaces
    or ``None``; a bare tensor stands for a one-entry tuple. Anything else is an error naming
    the module and the hook (the identity Function the hook runs in named neither)."""
    where = f"{type(ctx.module).__name__}: a {kind} hook"
    if isinstance(result, Tensor) and len(grads) == 1:
        result = (result,)
    if not isinstance(result, tuple | list):
        raise DTypeError(
            f"{where} returned {type(result).__name__}; expected None or a tuple of "
            f"{len(grads)} gradient(s) (tensors or None) that replace the ones it was given"
        )
    if len(result) != len(grads):
        raise InvalidArgumentError(
            f"{where} returned an invalid number of gradients, got {len(result)}, but "
            f"expected {len(grads)}"
        )
    replaced = []
    for new, grad in zip(result, grads):
        if new is not None and not isinstance(new, Tensor):
            raise DTypeError(
                f"{where} returned a {type(new).__name__} among its gradients; expected "
                "tensors or None"
            )
        if new is not None and grad is not None and tuple(new.shape) != tuple(grad.shape):
            raise ShapeError(
                f"{where} returned a gradient of shape {list(new.shape)} for one of shape "
                f"{list(grad.shape)}"
            )
        replaced.append(new)
    return tuple(replaced)


class _Watch(Function):
    """Identity on a module call's input tensors, or its output tensors, whose backward sees
    the gradients flowing through them; the module, its hooks and the call's shared state
    ride along (first, so that the tensors can be any number). As torch's
    ``BackwardHookFunction`` node it runs whenever the backward walks it, a gradient or not
    (a hook returned ``None``): the output's hooks then see ``None`` and pass it on into the
    module, the input's see zeros (torch materializes them) and pass those on."""

    _runs_without_gradient = True

    @staticmethod
    def forward(ctx: Any, module: Any, hooks: dict, state: dict, *tensors: Any) -> Any:
        ctx.module, ctx.hooks, ctx.state = module, hooks, state
        copies = tuple(t.clone() for t in tensors)
        # a tensor that needs no gradient stays one that needs none (torch's marks them)
        ctx.mark_non_differentiable(*(c for c, t in zip(copies, tensors) if not t.requires_grad))
        return copies


class _OutputGradients(_Watch):
    """Identity; its backward hands the outputs' gradients to the pre-hooks (which may
    replace them) and keeps them for the full hooks."""

    @staticmethod
    def forward(ctx: Any, module: Any, hooks: dict, state: dict, *tensors: Any) -> Any:
        ctx.set_materialize_grads(False)  # torch's output hook sees and returns the None
        return _Watch.forward(ctx, module, hooks, state, *tensors)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        positions, size = ctx.state["outputs"]
        grad_output = _put((None,) * size, positions, grads)
        for hook, _ in list(ctx.hooks["backward_pre"].values()):
            result = hook(ctx.module, grad_output)
            if result is not None:
                grad_output = _replaced_gradients(
                    ctx, "register_full_backward_pre_hook", result, grad_output
                )
        ctx.state["grad_output"] = grad_output
        if not ctx.state["input_tracked"]:  # no input gradient will come: torch's Nones
            for hook, _ in list(ctx.hooks["backward"].values()):
                result = hook(ctx.module, ctx.state["no_input"], grad_output)
                if result is not None and not (
                    isinstance(result, tuple | list) and all(r is None for r in result)
                ):
                    raise InvalidArgumentError(
                        f"{type(ctx.module).__name__}: a register_full_backward_hook hook "
                        "of a module where no input requires gradient should always return "
                        "None or None for all gradients"
                    )
            ctx.state["grad_output"] = None
        return (None, None, None, *(grad_output[i] for i in positions))


class _InputGradients(_Watch):
    """Identity; its backward hands the inputs' gradients, with the outputs', to the full
    hooks (each may replace the inputs')."""

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        positions, size = ctx.state["inputs"]
        grad_output = ctx.state["grad_output"]
        if grad_output is None:  # the gradient did not come through the module's output
            # (a double backward): torch's hooks do not run
            return (None, None, None, *grads)
        grad_input = _put((None,) * size, positions, grads)
        for hook, _ in list(ctx.hooks["backward"].values()):
            result = hook(ctx.module, grad_input, grad_output)
            if result is not None:
                grad_input = _replaced_gradients(
                    ctx, "register_full_backward_hook", result, grad_input
                )
        ctx.state["grad_output"] = None
        return (None, None, None, *(grad_input[i] for i in positions))


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
