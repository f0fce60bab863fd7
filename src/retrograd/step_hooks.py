"""torch's optimizer step hooks: each optimizer's own (``register_step_pre_hook``,
``register_step_post_hook``) and the global ones (``torch.optim.optimizer.
register_optimizer_step_pre_hook``...), run around every outermost ``step`` call. Every
``rg.optim`` optimizer and ``distributed.ZeroRedundancyOptimizer`` (torch's is an optimizer)
take them from :class:`StepHooks`, here below both.

An outermost ``step`` call (its hooks and the update) also holds its optimizer's lock
(:func:`step_lock`): threads that step one optimizer (hogwild training of a shared model, each
thread with the gradients its own ``backward()`` returned) step it in turn. Each update reads
a parameter and writes it back; two at once lost one of them (four threads of 200 SGD steps
moved a parameter about a third of the way), and the hooks' mark of a step in progress made a
second thread's step skip its hooks."""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from collections import OrderedDict
from typing import Any

from .autodiff.handles import RemovableHandle
from .errors import DTypeError, InvalidArgumentError

__all__ = [
    "StepHooks",
    "has_step_hooks",
    "hooked_step",
    "register_in",
    "register_optimizer_step_post_hook",
    "register_optimizer_step_pre_hook",
    "step_lock",
]

#: torch's global step hooks
_GLOBAL_STEP_PRE_HOOKS: OrderedDict = OrderedDict()
_GLOBAL_STEP_POST_HOOKS: OrderedDict = OrderedDict()
_HOOK_IDS = itertools.count()


def register_in(table: OrderedDict, hook: Any, prepend: bool = False) -> RemovableHandle:
    """``hook`` added to ``table`` (first with ``prepend``), with the handle that removes it:
    how an optimizer's hooks of every kind (step, state dict) are kept."""
    if not callable(hook):
        raise DTypeError(
            f"register an optimizer hook: expected a callable, got {type(hook).__name__}"
        )
    key = next(_HOOK_IDS)
    table[key] = hook
    if prepend:
        table.move_to_end(key, last=False)
    return RemovableHandle(table, key)


def register_optimizer_step_pre_hook(hook: Any) -> RemovableHandle:
    """torch's: ``hook(optimizer, args, kwargs)`` runs before every optimizer's step."""
    return register_in(_GLOBAL_STEP_PRE_HOOKS, hook)


def register_optimizer_step_post_hook(hook: Any) -> RemovableHandle:
    """torch's: ``hook(optimizer, args, kwargs)`` runs after every optimizer's step."""
    return register_in(_GLOBAL_STEP_POST_HOOKS, hook)


class StepHooks:
    """An optimizer's own step hooks (kept in its ``__dict__``, as torch's)."""

    def register_step_pre_hook(self, hook: Any) -> RemovableHandle:
        """torch's: ``hook(optimizer, args, kwargs)`` runs before each ``step`` (after the
        global ones); a non-None result, an ``(args, kwargs)`` pair, replaces the step's
        arguments. Returns a handle whose ``remove()`` unregisters it."""
        return register_in(self._hook_table("_optimizer_step_pre_hooks"), hook)

    def register_step_post_hook(self, hook: Any) -> RemovableHandle:
        """torch's: ``hook(optimizer, args, kwargs)`` runs after each ``step`` (before the
        global ones). Returns a handle whose ``remove()`` unregisters it."""
        return register_in(self._hook_table("_optimizer_step_post_hooks"), hook)

    def _hook_table(self, name: str) -> OrderedDict:
        # (an optimizer unpickled from an older version, or whose subclass skipped __init__,
        # has none yet)
        return self.__dict__.setdefault(name, OrderedDict())


def has_step_hooks(optimizer: Any) -> bool:
    """Whether a step of ``optimizer`` has step hooks to run (its own or global ones): a
    step that skips the optimizer's ``step`` (a captured step's replay) takes it then."""
    state = optimizer.__dict__
    return bool(
        _GLOBAL_STEP_PRE_HOOKS
        or _GLOBAL_STEP_POST_HOOKS
        or state.get("_optimizer_step_pre_hooks")
        or state.get("_optimizer_step_post_hooks")
    )


#: each optimizer's step lock (kept beside it: a lock in its ``__dict__`` would not pickle)
_STEP_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_STEP_LOCKS_MADE = threading.Lock()
#: the lock of an optimizer that cannot be a weak key (unhashable, or without weak references)
_SHARED_STEP_LOCK = threading.RLock()


def step_lock(optimizer: Any) -> Any:
    """The re-entrant lock ``optimizer``'s steps hold (module docstring)."""
    with _STEP_LOCKS_MADE:
        try:
            lock = _STEP_LOCKS.get(optimizer)
            if lock is None:
                lock = _STEP_LOCKS[optimizer] = threading.RLock()
        except TypeError:
            lock = _SHARED_STEP_LOCK
    return lock


def hooked_step(step: Any) -> Any:
    """``step`` with torch's step hooks around it, once per outermost call (a subclass's step
    calling ``super().step``, or a closure's step calling ``self.step``, runs them once)."""
    if getattr(step, "__retrograd_step_hooked__", False):
        return step

    @functools.wraps(step)
    def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
        # torch's mark of a step taken, which a learning-rate schedule's first step reads
        # (its warning when the schedule steps before the optimizer)
        self.__dict__["_opt_called"] = True
        with step_lock(self):
            return _hooked(self, *args, **kwargs)

    def _hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
        state = self.__dict__
        if state.get("_in_step_hooks") or not has_step_hooks(self):
            return step(self, *args, **kwargs)
        name = f"{type(self).__name__}.step"
        for hook in [*_GLOBAL_STEP_PRE_HOOKS.values(), *self._hook_table(
            "_optimizer_step_pre_hooks").values()]:  # fmt: skip
            result = hook(self, args, kwargs)
            if result is None:
                continue
            if not (isinstance(result, tuple) and len(result) == 2):
                raise InvalidArgumentError(
                    f"{name}: a step pre-hook must return None or a tuple of (new_args, "
                    f"new_kwargs), but got {result!r}"
                )
            args, kwargs = result
        state["_in_step_hooks"] = True
        try:
            out = step(self, *args, **kwargs)
        finally:
            state["_in_step_hooks"] = False
        for hook in [*self._hook_table("_optimizer_step_post_hooks").values(),
                     *_GLOBAL_STEP_POST_HOOKS.values()]:  # fmt: skip
            hook(self, args, kwargs)
        return out

    # (no __wrapped__: capture's patching of a class's step looks for its own wrappers so)
    del hooked.__wrapped__
    hooked.__retrograd_step_hooked__ = True
    return hooked
