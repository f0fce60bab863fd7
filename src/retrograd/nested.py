"""torch's ``torch.nested``: retrograd has no nested (jagged) tensors, so
:func:`nested_tensor` raises an error that says so (:mod:`retrograd.unsupported`)."""

from __future__ import annotations

from typing import Any, NoReturn

from .unsupported import no_nested

__all__ = ["nested_tensor"]


def nested_tensor(tensor_list: Any, **kwargs: Any) -> NoReturn:
    """Refused: pad the sequences to one length and pass a mask instead."""
    no_nested("nested.nested_tensor")
