"""The internal API: what library code outside this package (``nn/functional/``, the
optimizers) uses to build operations on tensors, instead of the tensors' private attributes.

Operations
    ``TensorOp(name, kernel=None, scalar=None, promote=None, floats=False)``
        An operation, declared once as a module constant: the name errors report (``"conv2d"``),
        the backend kernel (``"conv"``), and how operands are made to fit (see
        :class:`TensorOp`). The op table of the autodiff decorator (``autodiff.ops.Op``) is
        another thing: a differentiable op with its backward rules.
    ``apply(op, inputs, params=()) -> Tensor | tuple[Tensor, ...]``
        Run ``op`` (a ``TensorOp``, or a kernel name whose operands already fit) on the tensors
        ``inputs`` and the tuple of non-tensor ``params``; a tuple of primitives from the kernel
        comes back as a tuple of tensors. Errors the backend raises become the hierarchy's
        (``Backend.error_class``), naming the op and the inputs' shapes. With ``promote``
        (``COMMON``, ``FLOAT``, ``COMPARE``), two operands are lifted and promoted as the
        elementwise methods do.

Operands
    ``lift(reference, value, op) -> Tensor``
        ``value`` (tensor, array, nested list) on ``reference``'s backend and device.
    ``promote(a, b, op, floats=False) -> (Tensor, Tensor)``
        ``b`` lifted, both on one backend in one dtype (a float dtype when ``floats``).
    ``stood_for(value) -> Any``
        ``value``, or the tensor it stands for (a state dict's entry: a tensor in torch).
    ``untracked(t) -> Tensor``
        ``t``'s values outside the graph (no node; not requiring grad).
    ``tracked_wide_float(x, *others) -> bool``
        Whether a function with an op of its own records it (float32/float64, one operand
        requiring grad) rather than its composition.
    ``wrap(reference, prim) -> Tensor``
        A primitive of ``reference``'s backend as a tensor on its device. (``t.primitive``,
        ``t.backend`` and ``t.device`` are public properties.)

Validation
    ``check_indices(indices, size, message, ignore=None)``
        Raise ``IndexOutOfRangeError(message(bad))`` for an index outside ``[0, size)``; the
        backend checks on its device (``Backend.check_index_range``), no host copy.
    ``check_values(ok, error)``
        Raise ``error()`` unless the bool tensor ``ok`` is all true; checked as indices are.
    ``normalize_dim(op, dim, ndim, extra=0) -> int``, ``check_scalar(op, value)``,
    ``no_generator(op, generator)`` (torch's ``generator=`` refused where no draw takes one),
    ``checked_generator(op, generator)`` (``None`` or an ``rg.Generator``, else an error)
    ``shape_text(shape) -> "[2, 3]"``
    ``int_argument(op, value, name)``, ``int_arguments(op, values, name)``: an int argument
    (a size, a count, a dimension) given as a 0-d int64 tensor read as its int, as torch
    reads it; a 0-d float tensor refused

Layouts
    ``follow_channels_last(out, *sources) -> out``: a convolution's, pooling's or
    normalization's 4-d/5-d result given torch's channels-last strides where a source is laid
    out so; ``lay_out(t, memory_format)``: ``t`` itself given that format's strides (values
    unchanged)

Errors
    ``reported(op, backend, inputs)``: a ``with`` block whose backend errors are translated
    (:mod:`retrograd.errors`); ``translate(op, error, backend, inputs)``: the exception to raise
    for ``error`` in an ``except`` clause on a hot path.

Dtypes
    ``FLOAT_DTYPES``, ``DTYPES``, ``result_dtype(a, b)``; the ``promote`` rules ``COMMON``,
    ``FLOAT``, ``COMPARE``.

Library code reads a tensor's primitive, backend and device through the public properties
``t.primitive``, ``t.backend`` and ``t.device``, never through the tensor's private
attributes: the tensor package may change those.
"""

from __future__ import annotations

from ..errors import reported, shape_text, translate
from ._dispatch import (
    COMMON,
    COMPARE,
    DTYPES,
    FLOAT,
    FLOAT_DTYPES,
    INT_DTYPES,
    TensorOp,
    apply,
    check_scalar,
    checked_generator,
    int_argument,
    int_arguments,
    lift,
    no_generator,
    normalize_dim,
    promote,
    result_dtype,
    scalar_dtype,
    stood_for,
    tracked_wide_float,
    untracked,
    wrap,
)
from .indexing import check_indices, check_values
from .shape import follow_channels_last, lay_out

__all__ = [
    "COMMON",
    "COMPARE",
    "DTYPES",
    "FLOAT",
    "FLOAT_DTYPES",
    "INT_DTYPES",
    "TensorOp",
    "apply",
    "check_indices",
    "check_scalar",
    "check_values",
    "checked_generator",
    "follow_channels_last",
    "int_argument",
    "int_arguments",
    "lay_out",
    "lift",
    "no_generator",
    "normalize_dim",
    "promote",
    "reported",
    "result_dtype",
    "scalar_dtype",
    "shape_text",
    "stood_for",
    "tracked_wide_float",
    "translate",
    "untracked",
    "wrap",
]
