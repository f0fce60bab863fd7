"""Forward hooks of a module (``register_forward_pre_hook``, ``register_forward_hook``) and
the handle that removes one, as torch's.

A module without hooks keeps none: its ``__call__`` looks for ``_call_hooks`` in its
``__dict__`` and calls ``forward`` directly when there are none."""

from __future__ import annotations

from typing import Any

__all__ = ["RemovableHandle", "call_with_hooks", "register_hook"]


class RemovableHandle:
    """What registering a hook returns: ``remove()`` unregisters it (also on leaving a
    ``with`` block)."""

    def __init__(self, table: dict[int, Any], key: int):
        self._table, self.id = table, key

    def remove(self) -> None:
        self._table.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def register_hook(
    module: Any, kind: str, hook: Any, prepend: bool, with_kwargs: bool
) -> RemovableHandle:
    """Add ``hook`` to ``module``'s ``kind`` (``"pre"`` or ``"post"``) table."""
    hooks = module.__dict__.get("_call_hooks")
    if hooks is None:
        hooks = {"pre": {}, "post": {}, "next": 0}
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
    return RemovableHandle(table, key)


def call_with_hooks(module: Any, hooks: dict[str, Any], args: tuple, kwargs: dict) -> Any:
    """``module.forward`` with its pre-hooks before (each may replace the arguments) and its
    hooks after (each may replace the output), in registration order."""
    for hook, with_kwargs in list(hooks["pre"].values()):
        if with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    output = module.forward(*args, **kwargs)
    for hook, with_kwargs in list(hooks["post"].values()):
        result = hook(module, args, kwargs, output) if with_kwargs else hook(module, args, output)
        if result is not None:
            output = result
    return output
