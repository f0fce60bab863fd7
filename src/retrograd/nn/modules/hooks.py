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
}


def _tables() -> dict[str, Any]:
    return {
        "pre": {},
        "post": {},
        "backward": {},
        "backward_pre": {},
        "always": set(),  # the keys of the forward hooks registered with always_call
        "next": 0,
    }


#: torch's global forward hooks (``nn.modules.module.register_module_forward_pre_hook`` and
#: ``register_module_forward_hook``): every module's call runs them before its own
GLOBAL_HOOKS = _tables()
_NO_HOOKS = _tables()


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


def _with_global(hooks: dict[str, Any] | None) -> dict[str, Any]:
    """``hooks`` (a module's tables, ``None`` for none) with the global forward hooks first,
    as torch's ``_call_impl`` runs them (their keys kept apart from the module's)."""
    hooks = _NO_HOOKS if hooks is None else hooks
    if not (GLOBAL_HOOKS["pre"] or GLOBAL_HOOKS["post"]):
        return hooks
    merged = dict(hooks)
    for kind in ("pre", "post"):
        merged[kind] = {("global", k): v for k, v in GLOBAL_HOOKS[kind].items()} | hooks[kind]
    merged["always"] = {("global", k) for k in GLOBAL_HOOKS["always"]} | hooks["always"]
    return merged


def call_with_hooks(module: Any, hooks: dict[str, Any] | None, args: tuple, kwargs: dict) -> Any:
    """``module.forward`` with its pre-hooks before (each may replace the arguments) and its
    hooks after (each may replace the output), in registration order, the global ones first.
    When any of it raises, the forward hooks registered with ``always_call`` that have not
    run yet are called (with the output so far, ``None`` if the forward did not return), then
    the error goes on, as torch's ``_call_impl`` does."""
    hooks = _with_global(hooks)
    called: set[Any] = set()
    output = None
    try:
        for hook, with_kwargs in list(hooks["pre"].values()):
            if with_kwargs:
                result = hook(module, args, kwargs)
                if result is not None:
                    args, kwargs = _args_and_kwargs(module, result)
            else:
                result = hook(module, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        backward = hooks["backward"] or hooks["backward_pre"]
        if backward:
            args, state = _watch_input(module, hooks, args)
        output = module.forward(*args, **kwargs)
        always = hooks.get("always", ())
        for key, (hook, with_kwargs) in list(hooks["post"].items()):
            if key in always:
                called.add(key)
            result = (
                hook(module, args, kwargs, output) if with_kwargs else hook(module, args, output)
            )
            if result is not None:
                output = result
        if backward:
            output = _watch_output(module, hooks, output, state)
        return output
    except Exception:
        always = hooks.get("always", ())
        for key, (hook, with_kwargs) in list(hooks["post"].items()):
            if key not in always or key in called:
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
    through it; the module, its hooks and the call's shared state ride along."""

    @staticmethod
    def forward(ctx: Any, x: Any, module: Any, hooks: dict, state: dict) -> Any:
        ctx.module, ctx.hooks, ctx.state = module, hooks, state
        return x.clone()


class _OutputGradients(_Watch):
    """Identity; its backward hands the output's gradient to the pre-hooks (which may replace
    it) and keeps it for the full hooks."""

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        for hook, _ in list(ctx.hooks["backward_pre"].values()):
            result = hook(ctx.module, (grad,))
            if result is not None:
                grad = _replacement(ctx, "register_full_backward_pre_hook", result, grad)
        ctx.state["grad_output"] = (grad,)
        if not ctx.state["input_tracked"]:  # no input gradient will come: torch's (None,)
            for hook, _ in list(ctx.hooks["backward"].values()):
                hook(ctx.module, (None,), (grad,))
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
