"""torch's ``torch.compiler`` names that model and library code carries, with eager meaning.

Code written for ``torch.compile`` branches on ``torch.compiler.is_compiling()`` (timm,
Hugging Face's ``is_torchdynamo_compiling``) and marks functions to keep out of a compiled
graph (``@torch.compiler.disable``, ``allow_in_graph``, ``assume_constant_result``).
retrograd compiles nothing (``rg.compile`` runs its model eagerly, wrapped as torch wraps it;
a step is made fast by :func:`retrograd.capture`), so nothing is ever being compiled: the
queries are ``False`` and the decorators return what they are given.

>>> import retrograd as rg
>>> @rg.compiler.disable
... def log_stats(x):
...     return x.mean()
>>> rg.compiler.is_compiling(), log_stats(rg.tensor([1.0, 3.0])).item()
(False, 2.0)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .errors import DTypeError

__all__ = [
    "CompilerSettings",
    "allow_in_graph",
    "assume_constant_result",
    "disable",
    "is_compiling",
    "is_dynamo_compiling",
    "is_exporting",
    "reset",
]


def is_compiling() -> bool:
    """False: no code runs inside a compiled graph here."""
    return False


def is_dynamo_compiling() -> bool:
    """False (see :func:`is_compiling`)."""
    return False


def is_exporting() -> bool:
    """False: nothing is exported (``torch.export``) here."""
    return False


def _marked(op: str, fn: Any) -> Any:
    if not callable(fn):
        raise DTypeError(f"compiler.{op}: expected a function, got {type(fn).__name__}")
    return fn


def disable(
    fn: Callable[..., Any] | None = None, recursive: bool = True, *, reason: Any = None
) -> Any:
    """``fn`` itself (as a decorator with arguments only, the identity decorator): it runs
    eagerly, as everything does here."""
    if fn is None:
        return lambda f: _marked("disable", f)
    return _marked("disable", fn)


def allow_in_graph(fn: Any) -> Any:
    """``fn`` itself (there is no graph to let it into)."""
    return _marked("allow_in_graph", fn)


def assume_constant_result(fn: Any) -> Any:
    """``fn`` itself (it is called each time, as torch's eager mode calls it)."""
    return _marked("assume_constant_result", fn)


def reset() -> None:
    """Nothing to clear: no compiled code is cached."""


class CompilerSettings:
    """A compiler's settings namespace (``torch._dynamo.config``, ``torch._inductor.config``)
    with eager meaning: scripts tune the compiler before ``torch.compile``
    (``config.suppress_errors = True``, ``config.coordinate_descent_tuning = True``), and since
    nothing is compiled here, every assignment is taken and read back, and changes nothing.
    Reading a setting never set and not among torch's common ones raises ``AttributeError``
    naming it, as torch's does; ``patch`` sets some for a block (or a decorated function).

    >>> config = CompilerSettings("torch._dynamo.config", {"recompile_limit": 8})
    >>> config.recompile_limit *= 8
    >>> with config.patch(suppress_errors=True):
    ...     config.suppress_errors
    True
    >>> config.recompile_limit, hasattr(config, "suppress_errors")
    (64, False)
    """

    def __init__(self, name: str, defaults: dict[str, Any], aliases: dict[str, str] | None = None):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_values", dict(defaults))
        object.__setattr__(self, "_aliases", dict(aliases or {}))

    def _key(self, key: str) -> str:
        return self._aliases.get(key, key)

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__"):
            raise AttributeError(key)
        try:
            return self._values[self._key(key)]
        except KeyError:
            raise AttributeError(f"{self._name}.{key} does not exist") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self._values[self._key(key)] = value

    def __delattr__(self, key: str) -> None:
        self._values.pop(self._key(key), None)

    def __dir__(self) -> list[str]:
        return sorted(self._values)

    def __repr__(self) -> str:
        return f"<{self._name}: settings with no effect (nothing is compiled)>"

    def get_config_copy(self) -> dict[str, Any]:
        """The settings, as a dict."""
        return {key: value for key, value in self._values.items()
                if not isinstance(value, CompilerSettings)}  # fmt: skip

    def patch(self, changes: dict[str, Any] | None = None, **more: Any) -> _SettingsPatch:
        """Set ``changes`` for a ``with`` block or a decorated function, then restore them."""
        return _SettingsPatch(self, {**(changes or {}), **more})


class _SettingsPatch:
    """:meth:`CompilerSettings.patch`'s context manager and decorator."""

    def __init__(self, settings: CompilerSettings, changes: dict[str, Any]):
        self.settings, self.changes, self.saved = settings, changes, []

    def __enter__(self) -> None:
        values = self.settings._values
        keys = [self.settings._key(k) for k in self.changes]
        self.saved.append({k: values[k] for k in keys if k in values})
        for key, value in zip(keys, self.changes.values()):
            values[key] = value

    def __exit__(self, *exc: object) -> None:
        values, saved = self.settings._values, self.saved.pop()
        for key in [self.settings._key(k) for k in self.changes]:
            if key in saved:
                values[key] = saved[key]
            else:
                values.pop(key, None)

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def patched(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return patched
