"""torch's ``torch.fx`` names that model code carries.

Model libraries mark functions that symbolic tracing must not enter with
``torch.fx.wrap(fn)`` at module level (timm's layers do); here it returns what it is given, as
there is no tracing to keep out of. Tracing a model into a graph (``symbolic_trace``, and
making a ``GraphModule``, ``Graph`` or ``Tracer``) is refused by name: retrograd has no graph
capture of Python code (:func:`retrograd.capture` records a training step's kernels instead).
The classes exist, so ``isinstance(m, torch.fx.GraphModule)`` is ``False`` as for any eager
module.

>>> import retrograd as rg
>>> rg.fx.wrap(len) is len  # a doctest runs at its module's top level
True
"""

from __future__ import annotations

import inspect
from typing import Any, NoReturn

from .errors import InvalidArgumentError

__all__ = ["Graph", "GraphModule", "Node", "Proxy", "Tracer", "symbolic_trace", "wrap"]


def wrap(fn_or_name: Any) -> Any:
    """torch's ``fx.wrap``: what it is given (a function, or a function's name); as torch's,
    only at a module's top level."""
    caller = inspect.currentframe().f_back  # type: ignore[union-attr]
    if caller is not None and caller.f_code.co_name != "<module>":
        raise InvalidArgumentError("fx.wrap: wrap must be called at the top level of a module")
    return fn_or_name


def _refused(name: str) -> NoReturn:
    raise InvalidArgumentError(
        f"fx.{name}: retrograd does not trace Python code into a graph; run the model "
        "eagerly (rg.capture records a training step's kernels for replay)"
    )


def symbolic_trace(*args: Any, **kwargs: Any) -> NoReturn:
    """torch's ``fx.symbolic_trace``: refused (see the module docstring)."""
    _refused("symbolic_trace")


class _Refused:
    """A torch.fx class whose instances cannot be made here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refused(type(self).__name__)


class GraphModule(_Refused):
    """torch's ``fx.GraphModule``: refused when made."""


class Graph(_Refused):
    """torch's ``fx.Graph``: refused when made."""


class Tracer(_Refused):
    """torch's ``fx.Tracer``: refused when made."""


class Node(_Refused):
    """torch's ``fx.Node``: refused when made."""


class Proxy(_Refused):
    """torch's ``fx.Proxy``: refused when made."""
