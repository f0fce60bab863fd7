"""The error hierarchy of API.md section 7.

Every error raised on bad input derives from :class:`RetrogradError` and also from the built-in
exception a Python user would catch for it (``ValueError`` for shapes, ``TypeError`` for dtypes,
``IndexError`` for indices, ``RuntimeError`` for graph and communication failures).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "AutodiffError",
    "DTypeError",
    "DistributedError",
    "IndexOutOfRangeError",
    "RetrogradError",
    "ShapeError",
    "StateDictError",
    "reported",
    "translate",
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


class StateDictError(RetrogradError, KeyError, RuntimeError):
    """A state dict whose keys do not match the module's under strict loading: a
    ``KeyError``, and the ``RuntimeError`` torch raises there, so either ``except`` catches it."""

    def __str__(self) -> str:  # KeyError's own quotes the message
        return str(self.args[0]) if self.args else ""


def shape_text(shape: Sequence[int]) -> str:
    """``[2, 3]``: a shape as error messages write it."""
    return "[" + ", ".join(str(n) for n in shape) + "]"


def translate(op: str, error: Exception, backend: Any, inputs: Sequence[Any] = ()) -> Exception:
    """What the user sees for ``error``, raised by ``backend`` while running ``op`` on ``inputs``.

    The backend says which class of the hierarchy its exception means
    (``Backend.error_class``: NumPy's ``ValueError`` is a shape error, torch's ``RuntimeError``
    about sizes too); errors already in the hierarchy, and exceptions the backend does not
    recognise as bad input (bugs), come back unchanged, to propagate with their own cause and
    context. ``inputs`` are tensors (anything with ``shape`` and ``dtype``) named in the
    message. A translated error hides its context (the kernel's traceback is noise to the
    user), so ``raise translate(...)`` in an ``except`` clause needs no ``from None``, which
    would also wipe an untranslated error's context.
    """
    if isinstance(error, RetrogradError):
        return error
    kind = backend.error_class(error)
    if kind is None:
        return error
    described = ", ".join(f"{shape_text(t.shape)} {t.dtype}" for t in inputs)
    message = f"{op}: {error}" + (f" (inputs: {described})" if described else "")
    translated = kind(message)
    translated.__suppress_context__ = True
    return translated


class reported:  # noqa: N801  (used as a ``with`` statement, like contextlib's helpers)
    """``with reported(op, backend, inputs): ...``: the one place a backend's exceptions become
    the hierarchy's, naming the op and the inputs' shapes (:func:`translate`).

    A class, not a ``contextlib`` generator: entering and leaving cost two plain method calls,
    which matters on paths that run once per op.
    """

    __slots__ = ("backend", "inputs", "op")

    def __init__(self, op: str, backend: Any, inputs: Sequence[Any] = ()):
        self.op = op
        self.backend = backend
        self.inputs = inputs

    def __enter__(self) -> reported:
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> bool:
        if error is None or not isinstance(error, Exception):
            return False
        translated = translate(self.op, error, self.backend, self.inputs)
        if translated is error:
            return False
        raise translated
