"""torch's ``torch.sparse`` namespace as far as it holds on dense tensors (every retrograd
tensor is dense, API.md section 10).

- ``torch``: in torch, ``torch.sparse`` imports ``torch`` and so carries it as an attribute, and
  real code reaches the package through it (gram-ai's capsule network builds its one-hot
  labels with ``torch.sparse.torch.eye(NUM_CLASSES).index_select(dim=0, index=labels)``);
  here ``rg.sparse.torch`` is ``retrograd`` (set by the package, which this module may not
  import).
- :func:`mm`: torch's ``torch.sparse.mm`` of a dense first operand is the matrix product
  (values and gradients); so is this.
- ``sum``, ``softmax``, ``log_softmax``: sparse-only in torch (a dense input is refused there
  too): refused, with an error that says retrograd has no sparse layouts.

>>> import retrograd as rg
>>> rg.sparse.torch.eye(2).tolist()
[[1.0, 0.0], [0.0, 1.0]]
"""

from __future__ import annotations

from typing import Any, NoReturn

from .tensor import Tensor
from .unsupported import dense_mm, no_sparse

__all__ = ["log_softmax", "mm", "softmax", "sum"]


def mm(mat1: Tensor, mat2: Any) -> Tensor:
    """``mat1 @ mat2`` for two matrices (torch's ``sparse.mm`` of a dense ``mat1``)."""
    return dense_mm("sparse.mm", "mat1", mat1, mat2)


def sum(input: Any, *args: Any, **kwargs: Any) -> NoReturn:  # noqa: A001, A002 (torch's names)
    """Refused: torch's ``sparse.sum`` takes sparse tensors only."""
    no_sparse("sparse.sum")


def softmax(input: Any, *args: Any, **kwargs: Any) -> NoReturn:  # noqa: A002 (torch's name)
    """Refused: torch's ``sparse.softmax`` takes sparse tensors only."""
    no_sparse("sparse.softmax")


def log_softmax(input: Any, *args: Any, **kwargs: Any) -> NoReturn:  # noqa: A002
    """Refused: torch's ``sparse.log_softmax`` takes sparse tensors only."""
    no_sparse("sparse.log_softmax")
