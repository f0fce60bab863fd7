"""The internal API: what library code outside this package (``nn/functional.py``, the
optimizers) uses to build operations on tensors, instead of the tensors' private attributes.

Operations
    ``apply(op, inputs, *params, kernel=None, scalar=None, promote=None)``
        Run backend kernel ``kernel`` (default ``op``) on the tensors ``inputs`` and the
        non-tensor ``params``; returns a tensor, or a tuple of tensors where the kernel returns a
        tuple. Errors the backend raises become the hierarchy's (``Backend.error_class``),
        naming ``op`` (the user-facing name, e.g. ``"conv2d"`` for kernel ``"conv"``) and the
        inputs' shapes. ``promote`` (``COMMON``, ``FLOAT``, ``COMPARE``) lifts and promotes two
        operands as the elementwise methods do; see :func:`._dispatch.apply`.

Operands
    ``lift(reference, value, op) -> Tensor``
        ``value`` (tensor, array, nested list) on ``reference``'s backend and device.
    ``promote(a, b, op, floats=False) -> (Tensor, Tensor)``
        ``b`` lifted, both on one backend in one dtype (at least float32 when ``floats``).
    ``primitive(t)``, ``wrap(reference, prim) -> Tensor``
        A tensor's backend primitive; a primitive of ``reference``'s backend as a tensor on its
        device. (``t.backend`` and ``t.device`` are public.)

Validation
    ``check_indices(indices, size, message, ignore=None)``
        Raise ``IndexOutOfRangeError(message(bad))`` for an index outside ``[0, size)``; the
        backend checks on its device (``Backend.check_index_range``), no host copy.
    ``normalize_dim(op, dim, ndim, extra=0) -> int``, ``check_scalar(op, value)``
    ``shape_text(shape) -> "[2, 3]"``

Errors
    ``reported(op, backend, inputs)``: a ``with`` block whose backend errors are translated
    (:mod:`retrograd.errors`); ``failure(op, error, backend, inputs)``: the exception to raise
    for ``error`` in an ``except`` clause on a hot path.

Dtypes
    ``FLOAT_DTYPES``, ``DTYPES``, ``result_dtype(a, b)``; the ``promote`` rules ``COMMON``,
    ``FLOAT``, ``COMPARE``.
"""

from __future__ import annotations

from ..errors import reported, shape_text
from ._dispatch import (
    COMMON,
    COMPARE,
    DTYPES,
    FLOAT,
    FLOAT_DTYPES,
    apply,
    check_scalar,
    failure,
    lift,
    normalize_dim,
    primitive,
    promote,
    result_dtype,
    wrap,
)
from .indexing import check_indices

__all__ = [
    "COMMON",
    "COMPARE",
    "DTYPES",
    "FLOAT",
    "FLOAT_DTYPES",
    "apply",
    "check_indices",
    "check_scalar",
    "failure",
    "lift",
    "normalize_dim",
    "primitive",
    "promote",
    "reported",
    "result_dtype",
    "shape_text",
    "wrap",
]
