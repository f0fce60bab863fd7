"""How a view holds its base (a :data:`.views.Link`'s first item): the base itself, or, for a
detached view of a tensor computed in the graph, a :class:`WeakBase` (see
:func:`.views.link`). The modules that walk views read it through :func:`base_of`."""

from __future__ import annotations

from typing import Any
from weakref import ref

__all__ = ["WeakBase", "base_of"]


class WeakBase(ref):
    """A detached view's link to a base computed in the graph, held weakly, so that the
    detached tensor does not keep the base's graph alive."""

    __slots__ = ()


def base_of(view: tuple) -> Any:
    """The base of a view's link (``(base, kind, params)``); ``None`` when it was held
    weakly and is gone."""
    base = view[0]
    return base() if type(base) is WeakBase else base
