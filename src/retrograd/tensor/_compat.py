"""Phase-1 compatibility: the private names ``nn/functional.py`` imports from
``retrograd.tensor`` today. Each delegates to its replacement in
:mod:`retrograd.tensor.internal`; phase 2 switches ``nn/functional.py`` over and deletes this
module (and ``Tensor._lift``, ``Tensor._pair``, ``Tensor._wrap``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import shape_text, translate

__all__ = ["_shape_text", "_translate", "first_out_of_range"]


def _shape_text(shape: Sequence[int]) -> str:
    """Deprecated: :func:`retrograd.errors.shape_text`."""
    return shape_text(shape)


def _translate(op: str, error: Exception, tensors: Sequence[Any]) -> Exception:
    """Deprecated: :func:`retrograd.errors.translate`, the backend taken from the first tensor
    (or ``reported`` / ``internal.apply``, which translate for you)."""
    return translate(op, error, tensors[0].backend, tensors)


def first_out_of_range(indices: Any, size: int, ignore: int | None = None) -> int | None:
    """Deprecated (copies the indices to the host): :func:`retrograd.tensor.internal.check_indices`,
    which the backend runs on its device.

    The first index outside ``[0, size)`` (skipping the value ``ignore``), or ``None``."""
    values = indices.numpy()
    if not values.size or (values.min() >= 0 and values.max() < size):
        return None
    bad = (values < 0) | (values >= size)
    if ignore is not None:
        bad &= values != ignore
    return int(values[bad].flat[0]) if bad.any() else None
