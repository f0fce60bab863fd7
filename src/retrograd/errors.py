"""The error hierarchy of API.md section 7.

Every error raised on bad input derives from :class:`RetrogradError` and also from the built-in
exception a Python user would catch for it (``ValueError`` for shapes, ``TypeError`` for dtypes,
``IndexError`` for indices, ``RuntimeError`` for graph and communication failures).
"""

from __future__ import annotations

__all__ = [
    "AutodiffError",
    "DTypeError",
    "DistributedError",
    "IndexOutOfRangeError",
    "RetrogradError",
    "ShapeError",
]


class RetrogradError(Exception):
    """Base class of every error retrograd raises on purpose."""


class ShapeError(RetrogradError, ValueError):
    """Shapes or dimensions that do not fit the operation."""


class InvalidArgumentError(RetrogradError, ValueError):
    """An argument value the operation does not accept (an unknown mode, a negative size)."""


class DTypeError(RetrogradError, TypeError):
    """A dtype the operation does not accept (an int mask, a float index, grad on ints...)."""


class IndexOutOfRangeError(RetrogradError, IndexError):
    """An index value outside the dimension it indexes."""


class AutodiffError(RetrogradError, RuntimeError):
    """Misuse of the autodiff graph: a consumed graph, grad on a non-leaf, no graph at all."""


class DistributedError(RetrogradError, RuntimeError):
    """A collective that failed: a peer that died, never arrived, or disagreed."""
