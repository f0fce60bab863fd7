"""torch's ``torch.sparse`` namespace as far as it holds on dense tensors (every retrograd
tensor is dense, API.md section 10).

- ``torch``: in torch, ``torch.sparse`` imports ``torch`` and so carries it as an attribute, and
  real code reaches the package through it (gram-ai's capsule network builds its one-hot
  labels with ``torch.sparse.torch.eye(NUM_CLASSES).index_select(dim=0, index=labels)``);
  here ``rg.sparse.torch`` is ``retrograd`` (set by the package, which this module may not
  import).
- :func:`mm`: torch's ``torch.sparse.mm`` of a dense first operand is the matrix product
  (values and gradients); so is this. :func:`addmm` likewise is ``torch.addmm``.
- ``sum``, ``softmax``, ``log_softmax``: sparse-only in torch (a dense input is refused there
  too): refused, with an error that says retrograd has no sparse layouts.
- the legacy sparse types ``FloatTensor``, ``LongTensor``...: tkipf/pygcn builds its adjacency
  by ``torch.sparse.FloatTensor(indices, values, shape)``; a call is refused with that same
  error (not an ``AttributeError``), and no dense tensor is an instance of them.

>>> import retrograd as rg
>>> rg.sparse.torch.eye(2).tolist()
[[1.0, 0.0], [0.0, 1.0]]
"""

from __future__ import annotations

from typing import Any, NoReturn

from .errors import DTypeError
from .tensor import Tensor
from .unsupported import dense_mm, no_sparse

__all__ = [
    "BFloat16Tensor",
    "ByteTensor",
    "CharTensor",
    "DoubleTensor",
    "FloatTensor",
    "HalfTensor",
    "IntTensor",
    "LongTensor",
    "ShortTensor",
    "addmm",
    "log_softmax",
    "mm",
    "softmax",
    "sum",
]


def mm(mat1: Tensor, mat2: Any) -> Tensor:
    """``mat1 @ mat2`` for two matrices (torch's ``sparse.mm`` of a dense ``mat1``)."""
    return dense_mm("sparse.mm", "mat1", mat1, mat2)


def addmm(mat: Any, mat1: Any, mat2: Any, *, beta: Any = 1.0, alpha: Any = 1.0) -> Tensor:
    """``beta * mat + alpha * (mat1 @ mat2)``: torch's ``sparse.addmm`` is ``addmm`` with a
    backward for a sparse ``mat1``, and every ``mat1`` here is dense."""
    if not isinstance(mat, Tensor):
        raise DTypeError(f"sparse.addmm: mat must be a tensor, got {type(mat).__name__}")
    return mat.addmm(mat1, mat2, beta=beta, alpha=alpha)


def sum(input: Any, *args: Any, **kwargs: Any) -> NoReturn:  # noqa: A001, A002 (torch's names)
    """Refused: torch's ``sparse.sum`` takes sparse tensors only."""
    no_sparse("sparse.sum")


def softmax(input: Any, *args: Any, **kwargs: Any) -> NoReturn:  # noqa: A002 (torch's name)
    """Refused: torch's ``sparse.softmax`` takes sparse tensors only."""
    no_sparse("sparse.softmax")


def log_softmax(input: Any, *args: Any, **kwargs: Any) -> NoReturn:  # noqa: A002
    """Refused: torch's ``sparse.log_softmax`` takes sparse tensors only."""
    no_sparse("sparse.log_softmax")


class _SparseLegacyMeta(type):
    """``isinstance(t, rg.sparse.FloatTensor)``: never, every retrograd tensor being dense."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return False

    def __repr__(cls) -> str:
        return f"<class 'retrograd.sparse.{cls.__name__}'>"


class _SparseLegacyTensor(metaclass=_SparseLegacyMeta):
    def __new__(cls, *args: Any, **kwargs: Any) -> NoReturn:  # type: ignore[misc]
        no_sparse(f"sparse.{cls.__name__}")


def _sparse_legacy(name: str) -> type:
    return _SparseLegacyMeta(name, (_SparseLegacyTensor,), {"__slots__": ()})


FloatTensor = _sparse_legacy("FloatTensor")
DoubleTensor = _sparse_legacy("DoubleTensor")
HalfTensor = _sparse_legacy("HalfTensor")
BFloat16Tensor = _sparse_legacy("BFloat16Tensor")
LongTensor = _sparse_legacy("LongTensor")
IntTensor = _sparse_legacy("IntTensor")
ShortTensor = _sparse_legacy("ShortTensor")
CharTensor = _sparse_legacy("CharTensor")
ByteTensor = _sparse_legacy("ByteTensor")
