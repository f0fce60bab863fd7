"""The one place distributed code meets a backend's values: a primitive as the NumPy buffer
the engines reduce (:func:`to_buffer`), and a reduced buffer as a primitive again
(:func:`from_buffer`).

Engines move NumPy arrays. A backend whose primitives already are NumPy arrays (the default
one) hands them over without a copy either way; a backend with device memory (torch) changes
these two functions and nothing else.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["from_buffer", "to_buffer"]


def to_buffer(backend: Any, value: Any) -> np.ndarray:
    """``value``, a primitive of ``backend`` (an autodiff backend's: its untracked value), as
    a NumPy array, without a copy where it is one.

    >>> from retrograd.backend import NumpyBackend
    >>> a = np.ones(3, np.float32)
    >>> to_buffer(NumpyBackend(), a) is a
    True
    """
    if getattr(backend, "is_autodiff", False):
        value = backend.inner_value(value)
        backend = backend.inner
    if isinstance(value, np.ndarray):
        return value
    return np.asarray(backend.to_numpy(value))


def from_buffer(
    backend: Any, array: np.ndarray, like: Any, device: Any, dtype: str | None = None
) -> Any:
    """``array`` as a primitive of ``backend`` (not an autodiff one) on ``device``, of the
    kind ``like`` is: ``array`` itself where ``like`` is a NumPy array (or absent: nothing to
    match), else a new primitive of ``dtype`` (``None``: ``array``'s own).

    >>> from retrograd.backend import NumpyBackend
    >>> a = np.ones(3, np.float32)
    >>> from_buffer(NumpyBackend(), a, np.zeros(3, np.float32), None) is a
    True
    """
    if like is None or isinstance(like, np.ndarray):
        return array
    return backend.from_data(array, dtype, device)
