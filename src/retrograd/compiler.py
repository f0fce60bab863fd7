"""torch's ``torch.compiler`` names that model and library code carries, with eager meaning.

Code written for ``torch.compile`` branches on ``torch.compiler.is_compiling()`` (timm,
Hugging Face's ``is_torchdynamo_compiling``) and marks functions to keep out of a compiled
graph (``@torch.compiler.disable``, ``allow_in_graph``, ``assume_constant_result``).
retrograd compiles nothing (``rg.compile`` returns its model unchanged; a step is made fast by
:func:`retrograd.capture`), so nothing is ever being compiled: the queries are ``False`` and
the decorators return what they are given.

>>> import retrograd as rg
>>> @rg.compiler.disable
... def log_stats(x):
...     return x.mean()
>>> rg.compiler.is_compiling(), log_stats(rg.tensor([1.0, 3.0])).item()
(False, 2.0)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import DTypeError

__all__ = [
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
