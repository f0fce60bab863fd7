"""torch's ``torch.sparse`` namespace: sparse COO tensors (:mod:`retrograd.tensor.sparse_coo`)
and the functions graph code calls on them.

- ``torch``: in torch, ``torch.sparse`` imports ``torch`` and so carries it as an attribute, and
  real code reaches the package through it (gram-ai's capsule network builds its one-hot
  labels with ``torch.sparse.torch.eye(NUM_CLASSES).index_select(dim=0, index=labels)``);
  here ``rg.sparse.torch`` is ``retrograd`` (set by the package, which this module may not
  import).
- :func:`mm`: a sparse times a dense matrix (values and gradients, the sparse operand's at its
  nonzeros), or, for a dense ``mat1``, the matrix product, as torch's; :func:`addmm` likewise.
- :func:`sum`: torch's ``sparse.sum`` of a sparse tensor; :func:`softmax` and
  :func:`log_softmax` over the specified entries along a dimension (a dense input is
  refused, as in torch).
- the legacy sparse types ``FloatTensor``, ``LongTensor``...: tkipf/pygcn builds its adjacency
  by ``torch.sparse.FloatTensor(indices, values, shape)``: a sparse COO tensor, of the values'
  dtype as in torch; ``torch.sparse.FloatTensor(2, 3)`` an empty one. ``isinstance(s,
  rg.sparse.FloatTensor)`` is whether ``s`` is a sparse float32 tensor, as in torch.

>>> import retrograd as rg
>>> rg.sparse.torch.eye(2).tolist()
[[1.0, 0.0], [0.0, 1.0]]
>>> adj = rg.sparse.FloatTensor(rg.tensor([[0, 1], [1, 0]]), rg.tensor([2.0, 3.0]), (2, 2))
>>> rg.sparse.mm(adj, rg.ones(2, 1)).tolist()
[[2.0], [3.0]]
"""

from __future__ import annotations

from typing import Any

from .errors import DTypeError, ShapeError
from .tensor import Tensor, as_tensor
from .tensor.dtypes import DTYPE_OBJECTS, canonical_dtype
from .tensor.sparse_coo import (
    SparseTensor,
    check_sparse_parts,
    dense_sparse_mm,
    refuse,
    sparse_mm,
    sparse_softmax,
    sparse_sum,
)
from .unsupported import dense_mm

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
    "sparse_coo_tensor",
    "spmm",
    "sum",
]


def sparse_coo_tensor(
    indices: Any,
    values: Any,
    size: Any = None,
    *,
    dtype: Any = None,
    device: Any = None,
    pin_memory: bool = False,
    requires_grad: bool = False,
    check_invariants: Any = None,
    is_coalesced: Any = None,
    op: str = "sparse_coo_tensor",
) -> SparseTensor:
    """torch's ``sparse_coo_tensor``: the nonzeros ``values`` at the columns of ``indices``
    (``ndim x nnz``); ``size`` inferred from the largest index when not given; ``dtype``
    inferred from ``values`` as ``rg.tensor`` does (a list of ints: int64). Hybrid tensors
    (values of more than one dimension) are refused."""
    if isinstance(indices, SparseTensor) or isinstance(values, SparseTensor):
        raise DTypeError(f"{op}: indices and values must be dense tensors")
    indices = indices if isinstance(indices, Tensor) else as_tensor(indices)
    values = values if isinstance(values, Tensor) else as_tensor(values)
    if not isinstance(requires_grad, bool):  # torch's parser: a bool only (not np.bool_)
        raise DTypeError(f"{op}: requires_grad must be a bool, got {requires_grad!r}")
    if dtype is not None:  # read as a dtype here: .to() takes a str for a device
        values = values.to(DTYPE_OBJECTS[canonical_dtype(op, dtype)])
    if device is not None:
        values = values.to(device)
    return check_sparse_parts(op, indices, values, size, requires_grad, is_coalesced)


def mm(mat1: Any, mat2: Any) -> Any:
    """torch's ``sparse.mm``: ``mat1 @ mat2``, either of them sparse (a sparse ``mat1``: its
    gradient is sparse at its nonzeros), or both dense."""
    if isinstance(mat1, SparseTensor):
        return sparse_mm("sparse.mm", mat1, mat2)
    if isinstance(mat2, SparseTensor):
        return dense_sparse_mm("sparse.mm", mat1, mat2)
    return dense_mm("sparse.mm", "mat1", mat1, mat2)


def spmm(input: Any, mat2: Any) -> Any:  # noqa: A002 (torch's name)
    """torch's ``spmm``: the product of a sparse (or dense) matrix and a dense one (tkipf's
    GCN layers call it on the adjacency, sparse or dense)."""
    if isinstance(input, SparseTensor):
        return sparse_mm("spmm", input, mat2)
    return dense_mm("spmm", "input", input, mat2)


def addmm(mat: Any, mat1: Any, mat2: Any, *, beta: Any = 1.0, alpha: Any = 1.0) -> Tensor:
    """``beta * mat + alpha * (mat1 @ mat2)``, ``mat1`` sparse or dense."""
    if not isinstance(mat, Tensor):
        raise DTypeError(f"sparse.addmm: mat must be a dense tensor, got {type(mat).__name__}")
    if isinstance(mat1, SparseTensor):
        product = sparse_mm("sparse.addmm", mat1, mat2)
        if _broadcast_to(tuple(mat.shape), tuple(product.shape)) != tuple(product.shape):
            raise ShapeError(
                f"sparse.addmm: mat of shape {list(mat.shape)} does not expand to the shape of "
                f"mat1 @ mat2, {list(product.shape)} (mat1 {list(mat1.shape)}, mat2 "
                f"{list(mat2.shape)})"
            )
        return mat * beta + product * alpha if beta != 0 else product * alpha
    return mat.addmm(mat1, mat2, beta=beta, alpha=alpha)


def _broadcast_to(shape: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...] | None:
    """``shape`` expanded to ``target`` as torch expands the bias of ``addmm``, or ``None``
    where it does not expand to it."""
    if len(shape) > len(target):
        return None
    padded = (1,) * (len(target) - len(shape)) + shape
    if any(extent not in (1, goal) for extent, goal in zip(padded, target)):
        return None
    return target


def sum(input: Any, dim: Any = None, dtype: Any = None) -> Any:  # noqa: A001, A002 (torch's names)
    """torch's ``sparse.sum``: a dense 0-d sum over every dimension (or those of ``dim`` when
    they are all), else a sparse tensor over the dimensions kept."""
    if not isinstance(input, SparseTensor):
        refuse("sparse.sum of a dense tensor (torch takes sparse tensors only)")
    return sparse_sum(input, dim, dtype)


def softmax(input: Any, dim: int, *, dtype: Any = None) -> SparseTensor:  # noqa: A002
    """torch's ``sparse.softmax``: a softmax over the specified entries along ``dim`` (the
    unspecified ones taken as ``-inf``), a sparse tensor of the same places."""
    return sparse_softmax("sparse.softmax", input, dim, dtype)


def log_softmax(input: Any, dim: int, *, dtype: Any = None) -> SparseTensor:  # noqa: A002
    """torch's ``sparse.log_softmax``, as :func:`softmax`."""
    return sparse_softmax("sparse.log_softmax", input, dim, dtype, log=True)


class _SparseLegacyMeta(type):
    """``isinstance(t, rg.sparse.FloatTensor)``: ``t`` is sparse, of the type's dtype."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, SparseTensor) and instance.dtype == cls._dtype

    def __repr__(cls) -> str:
        return f"<class 'retrograd.sparse.{cls.__name__}'>"


class _SparseLegacyTensor(metaclass=_SparseLegacyMeta):
    _dtype = "float32"

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        op = f"sparse.{cls.__name__}"
        device = kwargs.pop("device", None)
        if kwargs:
            raise DTypeError(f"{op}: unexpected keyword arguments {sorted(kwargs)}")
        if not args or all(isinstance(a, int) for a in args):
            from .tensor import tensor

            empty = tensor([], dtype=cls._dtype, device=device)
            indices = tensor([], dtype="int64", device=device).reshape(len(args), 0)
            return sparse_coo_tensor(indices, empty, tuple(args), op=op)
        if len(args) not in (2, 3):
            raise DTypeError(
                f"{op}: expects (indices, values), (indices, values, size) or sizes, got "
                f"{len(args)} arguments"
            )
        # torch keeps the values' dtype here (a float64 ``values`` makes a float64 tensor)
        return sparse_coo_tensor(*args, device=device, op=op)


def _sparse_legacy(name: str, dtype: str) -> type:
    return _SparseLegacyMeta(name, (_SparseLegacyTensor,), {"__slots__": (), "_dtype": dtype})


FloatTensor = _sparse_legacy("FloatTensor", "float32")
DoubleTensor = _sparse_legacy("DoubleTensor", "float64")
HalfTensor = _sparse_legacy("HalfTensor", "float16")
BFloat16Tensor = _sparse_legacy("BFloat16Tensor", "bfloat16")
LongTensor = _sparse_legacy("LongTensor", "int64")
IntTensor = _sparse_legacy("IntTensor", "int32")
ShortTensor = _sparse_legacy("ShortTensor", "int16")
CharTensor = _sparse_legacy("CharTensor", "int8")
ByteTensor = _sparse_legacy("ByteTensor", "uint8")
