"""torch's ``torch.utils.hooks``: :class:`RemovableHandle`, what every ``register_*_hook``
returns (its home is :mod:`retrograd.autodiff.handles`), importable where torch code imports
it (``from torch.utils.hooks import RemovableHandle``), and ``unserializable_hook``, torch's
marker of a tensor hook that pickling should not keep (nothing here pickles hooks: the
marker is kept on the function and changes nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..autodiff.handles import RemovableHandle

__all__ = ["RemovableHandle", "unserializable_hook", "warn_if_has_hooks"]


def unserializable_hook(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f``, marked as torch marks a hook that is not to be serialized."""
    f.__torch_unserializable__ = True  # type: ignore[attr-defined]
    return f


def warn_if_has_hooks(tensor: Any) -> None:
    """torch warns when a tensor with backward hooks is serialized; retrograd saves no hooks
    with a tensor, so there is nothing to warn of."""
