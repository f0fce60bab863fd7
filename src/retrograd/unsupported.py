"""torch forms that cannot hold in retrograd, each an error that says so (API.md section 10):
nested tensors (:mod:`retrograd.nested`), memory shared between processes
(``share_memory``), and the sparse layouts other than COO (:func:`no_sparse`; COO tensors are
:mod:`retrograd.tensor.sparse_coo`). :func:`dense_mm` is torch's sparse products' meaning on
two dense matrices, the matrix product.

Tensors here are dense. Complex tensors (complex64, complex128) exist, with the ops that
compute them (:mod:`retrograd.tensor.complexes`, :mod:`retrograd.fft`); an op without complex
kernels refuses a complex tensor by name (``tensor/_dispatch.py``'s ``refuse_complex``), as
does :func:`no_complex` for what still has none. A name torch code uses is better met by an
error that names what is missing than by an ``AttributeError``, and never by a result that
differs from torch's.

>>> import retrograd as rg
>>> rg.nested.nested_tensor([rg.ones(2), rg.ones(3)])
Traceback (most recent call last):
...
retrograd.errors.InvalidArgumentError: nested.nested_tensor: retrograd has no nested ...
"""

from __future__ import annotations

from typing import Any, NoReturn

from .errors import DTypeError, InvalidArgumentError

__all__ = [
    "dense_mm",
    "no_complex",
    "no_nested",
    "no_shared_memory",
    "no_sparse",
]


def no_complex(op: str, dtype: str = "complex") -> NoReturn:
    raise DTypeError(
        f"{op}: not implemented for {dtype} tensors in retrograd; compute with the real and "
        "imaginary parts (.real, .imag) as two real tensors"
    )


def no_sparse(op: str) -> NoReturn:
    raise InvalidArgumentError(
        f"{op}: retrograd has no sparse layouts but COO (CSR, CSC and block layouts are not "
        "supported); build a sparse COO tensor (rg.sparse_coo_tensor, .to_sparse()) or the "
        "dense tensor instead"
    )


def no_nested(op: str) -> NoReturn:
    raise InvalidArgumentError(
        f"{op}: retrograd has no nested (jagged) tensors; pad the sequences to one length and "
        "pass a mask"
    )


def no_shared_memory(op: str) -> NoReturn:
    raise InvalidArgumentError(
        f"{op}: retrograd's tensors cannot be shared between processes: a process given a "
        "model trains its own copy, which the others never see (Hogwild would train nothing); "
        "train data-parallel with rg.nn.parallel.DistributedDataParallel (threads or "
        "processes), or share a model between threads, which needs no call"
    )


def dense_mm(op: str, name: str, first: Any, mat2: Any) -> Any:
    """``first.mm(mat2)``, the product torch's sparse products give for a dense ``first``
    (named ``name`` in the errors of ``op``)."""
    from .errors import DTypeError, ShapeError, shape_text

    if not hasattr(first, "mm"):
        raise DTypeError(f"{op}: {name} must be a tensor, got {type(first).__name__}")
    if first.ndim != 2:
        raise ShapeError(
            f"{op}: expects two matrices, got {name} of shape {shape_text(first.shape)}"
        )
    try:
        return first.mm(mat2)
    except ShapeError as error:
        raise ShapeError(f"{op}: {error}") from None
