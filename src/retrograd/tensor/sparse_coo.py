"""torch's sparse COO tensors, as far as graph code uses them: an adjacency built from
``(indices, values, size)`` and multiplied by dense features.

A :class:`SparseTensor` holds two dense tensors, ``indices`` (int64, ``ndim x nnz``: a
constant) and ``values`` (``nnz``, differentiable), and its size. What it computes is written
over the dense tensor API and one backend kernel, ``sparse_coo_mm`` (the product with a dense
matrix: SciPy's CSR kernel on NumPy, ``torch.sparse.mm`` on the torch inner backend), so a
gradient reaches ``values`` (and whatever they were computed from) and the dense operand as
torch's does. It covers:

- construction: :func:`sparse_coo_tensor` (dtype and size inferred as torch's),
  ``Tensor.to_sparse()``, ``rg.sparse.FloatTensor(indices, values, size)``...;
- reading: ``shape``, ``size()``, ``dtype``, ``device``, ``layout``, ``is_sparse``,
  ``_indices()``, ``_values()``, ``indices()``/``values()`` (coalesced only, as torch's),
  ``_nnz()``, ``is_coalesced()``, ``coalesce()``, ``to_dense()``;
- products with a dense matrix (or vector): ``rg.sparse.mm``, ``rg.spmm``, ``rg.mm``,
  ``rg.matmul``, ``@`` either side; ``rg.sparse.sum`` and ``sum()``;
  ``rg.sparse.softmax`` and ``log_softmax`` (attention normalized over each row's edges);
  a product or quotient by a number;
  sums of sparse tensors, and ``dense + sparse`` (dense);
  ``t()``/``transpose``; ``to``/``cuda``/``cpu``/``float``/``double``, ``detach``,
  ``requires_grad_``, ``grad(grads)`` (sparse, at the coalesced nonzeros).

Everything else torch does on a sparse tensor is refused by name (an
:class:`~retrograd.errors.InvalidArgumentError`), never computed on the values as if they were
the tensor. ``isinstance(s, rg.Tensor)`` holds, as in torch (``Tensor``'s metaclass admits it),
though a sparse tensor is no subclass of the dense one here: ``issubclass`` and the library's
own checks (``TensorBase``) tell them apart, and ``rg.nn.Parameter`` admits none.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NoReturn

from ..errors import (
    ArgumentTypeError,
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    ShapeError,
    shape_text,
)
from ..unsupported import no_sparse
from ._dispatch import TensorBase, check_int_list, int_parameter, lift, normalize_dim, promote
from .dtypes import DTYPE_OBJECTS, Size, canonical_dtype, default_float_dtype
from .layouts import SPARSE_ADMISSION, SPARSE_CLASSES, sparse_coo
from .printing import sparse_text
from .shape import cat

__all__ = [
    "SparseRefusalError",
    "SparseTensor",
    "check_sparse_parts",
    "dense_sparse_mm",
    "dense_to_sparse",
    "refuse",
    "sparse_mm",
    "sparse_softmax",
    "sparse_sum",
]

_SUPPORTED = (
    "supported on sparse COO tensors: coalesce, indices/values, to_dense, mm/matmul/@ with a "
    "dense matrix, sum and sparse.sum, sparse.softmax and log_softmax, + and - of sparse "
    "tensors, * and / by a number, t/transpose, "
    "to/cuda/cpu/float/double, detach, requires_grad_"
)


class SparseRefusalError(InvalidArgumentError, AttributeError):
    """An operation a sparse tensor does not have here. Also an ``AttributeError``, so that
    ``hasattr(s, name)`` and ``getattr(s, name, default)`` answer as for a missing name."""


def refuse(op: str) -> NoReturn:
    raise SparseRefusalError(
        f"{op}: not supported on a sparse COO tensor in retrograd ({_SUPPORTED}); call "
        ".to_dense() first"
    )


#: whether ``isinstance(s, rg.Tensor)`` admits sparse tensors yet: from the first one made
_ADMITTED = [False]


class SparseTensor:
    """A sparse COO tensor (torch's ``layout=torch.sparse_coo``); see the module docstring."""

    __slots__ = ("__weakref__", "_coalesced", "_indices_t", "_size", "_values_t")

    #: what :func:`~retrograd.tensor._dispatch.lift` reads to refuse it as a dense operand
    _sparse_coo = True
    is_sparse = True
    is_sparse_csr = False
    is_quantized = False
    is_nested = False
    layout = sparse_coo

    def __new__(cls, *args: Any, **kwargs: Any) -> SparseTensor:
        # (unpickling and copying make one through here too, without ``__init__``)
        if not _ADMITTED[0]:
            SPARSE_ADMISSION[0]()  # type: ignore[misc]
            _ADMITTED[0] = True
        return super().__new__(cls)

    def __init__(self, indices: Any, values: Any, size: tuple[int, ...], coalesced: bool):
        self._indices_t, self._values_t = indices, values
        self._size, self._coalesced = Size(size), bool(coalesced)

    # -- what it is -----------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return self._size

    def size(self, dim: int | None = None) -> Any:
        if dim is None:
            return self._size
        return self._size[normalize_dim("size", dim, len(self._size))]

    def dim(self) -> int:
        return len(self._size)

    ndimension = dim

    @property
    def ndim(self) -> int:
        return len(self._size)

    def numel(self) -> int:
        return math.prod(self._size)

    nelement = numel

    def sparse_dim(self) -> int:
        return len(self._size)

    def dense_dim(self) -> int:
        return 0

    def _nnz(self) -> int:
        return self._values_t.shape[0]

    @property
    def dtype(self) -> Any:
        return self._values_t.dtype

    @property
    def device(self) -> Any:
        return self._values_t.device

    @property
    def is_cuda(self) -> bool:
        return self._values_t.is_cuda

    def is_floating_point(self) -> bool:
        return self._values_t.is_floating_point()

    def is_complex(self) -> bool:
        return False

    def is_coalesced(self) -> bool:
        return self._coalesced

    def _indices(self) -> Any:
        return self._indices_t

    def _values(self) -> Any:
        return self._values_t

    def indices(self) -> Any:
        self._require_coalesced("indices")
        return self._indices_t

    def values(self) -> Any:
        self._require_coalesced("values")
        return self._values_t

    def _require_coalesced(self, op: str) -> None:
        if not self._coalesced:  # torch's refusal: the order and repeats are not defined
            raise InvalidArgumentError(
                f"{op}: cannot get {op} on an uncoalesced tensor, please call .coalesce() "
                f"first (or read ._{op}())"
            )

    def __repr__(self) -> str:
        return sparse_text(
            self._indices_t.numpy(),
            self._values_t.numpy(),
            tuple(self._size),
            self._nnz(),
            self._values_t.dtype,
            default_float_dtype(),
            self.layout,
            requires_grad=bool(self.requires_grad),
        )

    # -- autodiff: through the values ----------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._values_t.requires_grad

    @requires_grad.setter
    def requires_grad(self, requires_grad: bool) -> None:
        self._values_t.requires_grad = requires_grad

    def requires_grad_(self, requires_grad: bool = True) -> SparseTensor:
        self._values_t.requires_grad_(requires_grad)
        return self

    @property
    def is_leaf(self) -> bool:
        return self._values_t.is_leaf

    def grad(self, grads: Any) -> SparseTensor | None:
        """The gradient ``grads`` holds for this (leaf) tensor, sparse at its nonzeros,
        coalesced (torch's ``grad`` of a sparse leaf). Every op here gives each stored value
        the gradient of its place, so the values of a repeated place are equal: their mean is
        that gradient."""
        values = self._values_t.grad(grads)
        if values is None:
            return None
        out = SparseTensor(self._indices_t, values, self._size, self._coalesced)
        if self._coalesced:
            return out
        summed = out.coalesce()
        ones = SparseTensor(self._indices_t, values.new_ones(values.shape), self._size, False)
        counts = ones.coalesce()._values_t
        return SparseTensor(summed._indices_t, summed._values_t / counts, self._size, True)

    def detach(self) -> SparseTensor:
        return SparseTensor(self._indices_t, self._values_t.detach(), self._size, self._coalesced)

    @property
    def data(self) -> SparseTensor:
        return SparseTensor(self._indices_t, self._values_t.data, self._size, self._coalesced)

    def clone(self, *, memory_format: Any = None) -> SparseTensor:
        return SparseTensor(
            self._indices_t.clone(), self._values_t.clone(), self._size, self._coalesced
        )

    # -- moves and casts: of the values (the indices stay int64) -------------------------------
    def to(self, *args: Any, **kwargs: Any) -> SparseTensor:
        for value in (*args, *kwargs.values()):
            if isinstance(value, SparseTensor | TensorBase):
                raise InvalidArgumentError("to: a tensor argument is not supported for sparse")
        values = self._values_t.to(*args, **kwargs)
        indices = self._indices_t.to(values.device)
        return SparseTensor(indices, values, self._size, self._coalesced)

    def cuda(self, device: Any = None, non_blocking: bool = False) -> SparseTensor:
        values = self._values_t.cuda(device, non_blocking)
        return SparseTensor(self._indices_t.to(values.device), values, self._size, self._coalesced)

    def cpu(self) -> SparseTensor:
        values = self._values_t.cpu()
        return SparseTensor(self._indices_t.cpu(), values, self._size, self._coalesced)

    def float(self) -> SparseTensor:
        return self._cast("float32")

    def double(self) -> SparseTensor:
        return self._cast("float64")

    def type_as(self, other: Any) -> SparseTensor:
        return self._cast(other.dtype)

    def _cast(self, dtype: Any) -> SparseTensor:
        return SparseTensor(self._indices_t, self._values_t.to(dtype), self._size, self._coalesced)

    # -- layout changes ------------------------------------------------------------------------
    def _flat_indices(self) -> Any:
        """Each nonzero's place in the row-major flattened tensor (int64)."""
        flat = None
        for d, extent in enumerate(self._size):
            row = self._indices_t[d]
            flat = row if flat is None else flat * extent + row
        return flat if flat is not None else self._indices_t.new_zeros((self._nnz(),))

    def _host_places(self) -> list[int]:
        """:meth:`_flat_indices` read to the host (read whole: no view of the indices)."""
        rows = self._indices_t.tolist()
        strides = [math.prod(self._size[d + 1 :]) for d in range(len(self._size))]
        return [sum(row[k] * step for row, step in zip(rows, strides)) for k in range(self._nnz())]

    def coalesce(self) -> SparseTensor:
        """The places in order, each once, the values of a repeated one summed (torch's)."""
        if self._coalesced:
            return self
        flat = self._flat_indices()
        places, inverse = flat.unique(sorted=True, return_inverse=True)
        values = self._values_t.new_zeros((places.shape[0],)).index_add(0, inverse, self._values_t)
        # each place back to one index per dimension: (place // stride) % extent
        strides = [math.prod(self._size[d + 1 :]) for d in range(self.ndim)]
        column = (self.ndim, 1)
        indices = places.unsqueeze(0).div(
            self._indices_t.new_tensor(strides).reshape(column), rounding_mode="floor"
        ) % self._indices_t.new_tensor(list(self._size)).reshape(column)
        return SparseTensor(indices, values, self._size, True)

    def to_dense(self, dtype: Any = None, *, masked_grad: Any = None) -> Any:
        """The dense tensor, repeated places summed; differentiable in the values."""
        values = self._values_t if dtype is None else self._values_t.to(dtype)
        flat = values.new_zeros((self.numel(),)).index_add(0, self._flat_indices(), values)
        return flat.reshape(tuple(self._size))

    def to_sparse(self, *args: Any, **kwargs: Any) -> SparseTensor:
        if args or kwargs:
            refuse("to_sparse with arguments")
        return self

    def to_sparse_coo(self) -> SparseTensor:
        return self

    def t(self) -> SparseTensor:
        if self.ndim > 2:
            raise ShapeError(f"t: expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        return self.transpose(0, 1) if self.ndim == 2 else self

    def transpose(self, dim0: int, dim1: int) -> SparseTensor:
        a = normalize_dim("transpose", dim0, self.ndim)
        b = normalize_dim("transpose", dim1, self.ndim)
        order = list(range(self.ndim))
        order[a], order[b] = b, a
        size = tuple(self._size[d] for d in order)
        indices = self._indices_t[order] if self.ndim else self._indices_t
        # torch marks the result uncoalesced (its order is column-major now)
        return SparseTensor(indices, self._values_t, size, self._coalesced and a == b)

    # -- arithmetic ----------------------------------------------------------------------------
    def mul(self, other: Any) -> SparseTensor:
        return SparseTensor(
            self._indices_t, self._values_t * _number("mul", other), self._size, self._coalesced
        )

    def div(self, other: Any) -> SparseTensor:
        return SparseTensor(
            self._indices_t, self._values_t / _number("div", other), self._size, self._coalesced
        )

    def neg(self) -> SparseTensor:
        return SparseTensor(self._indices_t, -self._values_t, self._size, self._coalesced)

    def add(self, other: Any, *, alpha: Any = 1) -> SparseTensor:
        """``self + alpha * other`` of two sparse tensors of one size, stored as torch's CPU
        sum stores it: a sum of two coalesced tensors coalesced; otherwise their entries
        merged as two ordered lists would be (:func:`_merged_places`: an entry of each at one
        place summed, the result uncoalesced). A dense ``other`` is refused, as torch refuses
        it (``dense + sparse`` is the dense sum)."""
        if not isinstance(other, SparseTensor):
            refuse(f"add of a sparse and a {type(other).__name__} (dense + sparse is supported)")
        if tuple(other.shape) != tuple(self._size):
            raise ShapeError(
                f"add: expected sizes of 'self' and 'other' to match, but "
                f"{list(self._size)} != {list(other.shape)}"
            )
        other_values = other._values_t if alpha == 1 else other._values_t * _number("add", alpha)
        mine, theirs = promote(self._values_t, other_values, "add")
        if self._coalesced and other._coalesced:
            indices = cat([self._indices_t, other._indices_t], 1)
            return SparseTensor(indices, cat([mine, theirs], 0), self._size, False).coalesce()
        mine_at, theirs_at, count = _merged_places(self._host_places(), other._host_places())
        index = self._indices_t
        places = index.new_tensor(mine_at + theirs_at)
        indices = mine.new_zeros((len(self._size), count), dtype=index.dtype)
        indices = indices.index_copy(1, places, cat([index, other._indices_t], 1))
        values = mine.new_zeros((count,)).index_add(0, places, cat([mine, theirs], 0))
        return SparseTensor(indices, values, self._size, False)

    def sub(self, other: Any, *, alpha: Any = 1) -> SparseTensor:
        if not isinstance(other, SparseTensor):
            refuse(f"sub of a sparse and a {type(other).__name__} (dense - sparse is supported)")
        return self.add(other, alpha=-alpha)

    __add__ = add
    __sub__ = subtract = sub
    __mul__ = __rmul__ = multiply = mul
    __truediv__ = true_divide = divide = div
    __neg__ = negative = neg

    def sum(self, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
        """torch's ``Tensor.sum`` of a sparse tensor: as :func:`sparse_sum`, the summed
        dimensions kept with extent 1 where ``keepdim`` (a sparse result only, as torch's)."""
        summed = sparse_sum(self, dim, dtype)
        if not keepdim or not isinstance(summed, SparseTensor):
            if keepdim:
                refuse("sum over every dimension with keepdim=True")
            return summed
        dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
        gone = {normalize_dim("sum", d, self.ndim) for d in dims}
        kept, places = iter(range(summed.ndim)), summed._indices_t
        rows = [
            places[0].new_zeros(summed._nnz()) if d in gone else places[next(kept)]
            for d in range(self.ndim)
        ]
        size = tuple(1 if d in gone else self.shape[d] for d in range(self.ndim))
        indices = cat([row.unsqueeze(0) for row in rows], 0)
        return SparseTensor(indices, summed._values_t, size, True)

    def mm(self, mat2: Any) -> Any:
        return sparse_mm("mm", self, mat2)

    def matmul(self, other: Any) -> Any:
        return sparse_mm("matmul", self, other, vector=True)

    def mv(self, vec: Any) -> Any:
        if getattr(vec, "ndim", None) != 1:
            raise ShapeError(f"mv: expects a vector, got {shape_text(getattr(vec, 'shape', ()))}")
        return sparse_mm("mv", self, vec, vector=True)

    __matmul__ = matmul

    def __rmatmul__(self, other: Any) -> Any:
        return dense_sparse_mm("matmul", other, self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name not in _dense_names(self):
            raise AttributeError(f"'SparseTensor' object has no attribute '{name}'")
        refuse(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SparseTensor.__slots__ or name == "requires_grad":
            object.__setattr__(self, name, value)
        else:
            refuse(f"setting {name}")

    def __deepcopy__(self, memo: dict) -> SparseTensor:
        """A copy of the indices and values (``copy.deepcopy`` of a model holding its graph
        as an attribute, as LightGCN's ``self.Graph``)."""
        import copy

        return SparseTensor(
            copy.deepcopy(self._indices_t, memo),
            copy.deepcopy(self._values_t, memo),
            self._size,
            self._coalesced,
        )

    def __copy__(self) -> SparseTensor:
        return SparseTensor(self._indices_t, self._values_t, self._size, self._coalesced)

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        refuse("saving (pickle, rg.save)")

    def __len__(self) -> int:
        if not self._size:
            raise DTypeError("len() of a 0-d tensor")
        return self._size[0]

    __hash__ = object.__hash__


def _refusing(op: str) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        refuse(op)

    method.__name__ = op
    return method


# Python looks operators up on the class, past __getattr__: each refused by its torch name
for _dunder, _op in {
    "__radd__": "add", "__iadd__": "add_",
    "__rsub__": "sub", "__isub__": "sub_", "__imul__": "mul_", "__itruediv__": "div_",
    "__rtruediv__": "div", "__floordiv__": "floor_divide", "__pow__": "pow", "__rpow__": "pow",
    "__mod__": "remainder", "__abs__": "abs", "__pos__": "positive", "__invert__": "bitwise_not",
    "__and__": "bitwise_and", "__or__": "bitwise_or", "__xor__": "bitwise_xor", "__eq__": "eq",
    "__ne__": "ne", "__lt__": "lt", "__le__": "le", "__gt__": "gt", "__ge__": "ge",
    "__getitem__": "indexing", "__setitem__": "index assignment", "__iter__": "iteration",
    "__bool__": "bool", "__float__": "float()", "__int__": "int()", "__index__": "index",
    "__array__": "numpy conversion",
}.items():  # fmt: skip
    setattr(SparseTensor, _dunder, _refusing(_op))

SPARSE_CLASSES.add(SparseTensor)  # isinstance(s, rg.Tensor), as torch's

_DENSE_NAMES: dict[type, frozenset[str]] = {}


def _dense_names(sparse: SparseTensor) -> frozenset[str]:
    """The names of the dense tensor class (its values'): what torch code may call on a
    sparse tensor too, refused here by name rather than missing."""
    try:
        kind = type(object.__getattribute__(sparse, "_values_t"))
    except AttributeError:  # half-made (copy, unpickling): nothing to refuse by name
        return frozenset()
    names = _DENSE_NAMES.get(kind)
    if names is None:
        names = _DENSE_NAMES[kind] = frozenset(n for n in dir(kind) if not n.startswith("__"))
    return names


def _merged_places(ours: list[int], others: list[int]) -> tuple[list[int], list[int], int]:
    """Where each entry of two sparse tensors (their flattened places ``ours`` and
    ``others``) lands in their sum, and how many entries it has: torch's merge, which walks
    both lists as if each were in order, takes the smaller place first and one entry of each
    at an equal place as one (its values summed)."""
    mine_at, theirs_at = [0] * len(ours), [0] * len(others)
    i = j = count = 0
    while i < len(ours) or j < len(others):
        if j == len(others) or (i < len(ours) and ours[i] < others[j]):
            mine_at[i], i = count, i + 1
        elif i == len(ours) or others[j] < ours[i]:
            theirs_at[j], j = count, j + 1
        else:
            mine_at[i], theirs_at[j], i, j = count, count, i + 1, j + 1
        count += 1
    return mine_at, theirs_at, count


def _number(op: str, value: Any) -> Any:
    """``value`` if it is a number or a 0-d dense tensor (torch scales the values by it)."""
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return value
    if isinstance(value, TensorBase) and value.ndim == 0:
        return value
    shape = f" of shape {shape_text(value.shape)}" if hasattr(value, "shape") else ""
    refuse(f"{op} by {type(value).__name__}{shape} (only a number or a 0-d tensor)")


# -- construction ----------------------------------------------------------------------------------
def _sparse_size(op: str, size: Any) -> tuple[int, ...]:
    """``size`` as a tuple of non-negative ints, as torch's parser reads it: a float, a str or
    another non-int extent is the wrong type (torch's ``TypeError``), a negative one an
    ``InvalidArgumentError`` (torch fails on it as an overflow of the element count)."""
    check_int_list(op, size, "size")
    if isinstance(size, TensorBase) and size.ndim:
        size = tuple(size.tolist())
    if isinstance(size, numbers.Integral | TensorBase):
        size = (size,)
    if not isinstance(size, list | tuple):
        raise DTypeError(f"{op}: size must be a tuple of ints, got {type(size).__name__}")
    extents = tuple(int_parameter(op, extent, "size") for extent in size)
    if any(extent < 0 for extent in extents):
        raise InvalidArgumentError(
            f"{op}: size must hold non-negative extents, got {list(extents)}"
        )
    if any(extent >= 2**63 for extent in extents):  # torch: "Overflow when unpacking long"
        raise ArgumentTypeError(f"{op}: size {list(extents)} overflows int64")
    return extents


def check_sparse_parts(
    op: str, indices: Any, values: Any, size: Any, requires_grad: bool, is_coalesced: Any
) -> SparseTensor:
    """The sparse tensor of the dense tensors ``indices`` and ``values`` and ``size`` (inferred
    from the largest indices when ``None``), each checked as torch's ``sparse_coo_tensor``
    checks them."""
    if indices.dtype not in ("int64", "int32", "int16", "int8", "uint8"):
        raise DTypeError(f"{op}: indices must be an int64 tensor, got {indices.dtype}")
    indices = indices.long()
    indices = indices.to(values.device)
    if indices.ndim != 2:
        raise ShapeError(
            f"{op}: indices must be sparse_dim x nnz (2-d), but got shape "
            f"{shape_text(indices.shape)}"
        )
    if values.ndim != 1:
        raise ShapeError(
            f"{op}: values must be 1-d (nnz), got shape {shape_text(values.shape)}: hybrid "
            "tensors (values with dense dimensions) are not supported in retrograd"
        )
    if indices.shape[1] != values.shape[0]:
        raise ShapeError(
            f"{op}: indices and values must have the same number of elements (nnz), but got "
            f"{indices.shape[1]} and {values.shape[0]}"
        )
    nnz = values.shape[0]
    lows = indices.amin(dim=1).tolist() if nnz else [0] * indices.shape[0]
    highs = indices.amax(dim=1).tolist() if nnz else [-1] * indices.shape[0]
    if any(low < 0 for low in lows):
        raise IndexOutOfRangeError(f"{op}: found a negative index {min(lows)} in indices")
    if size is None:
        size = tuple(high + 1 for high in highs)
    else:
        size = _sparse_size(op, size)
        if len(size) != indices.shape[0]:
            raise ShapeError(
                f"{op}: number of dimensions must be sparse_dim ({indices.shape[0]}, the rows "
                f"of indices) + dense_dim (0), but got size {list(size)}"
            )
        for d, (high, extent) in enumerate(zip(highs, size)):
            if high >= extent:
                raise IndexOutOfRangeError(
                    f"{op}: size is inconsistent with indices: for dim {d}, size is {extent} "
                    f"but found index {high}"
                )
    if requires_grad:
        values = values.detach().requires_grad_()
    coalesced = nnz <= 1 if is_coalesced is None else bool(is_coalesced)
    return SparseTensor(indices, values, size, coalesced)


def dense_to_sparse(x: Any, sparse_dim: Any = None, layout: Any = None) -> SparseTensor:
    """``x.to_sparse()``: its nonzeros, coalesced; differentiable in ``x``."""
    if layout is not None and layout is not sparse_coo:
        no_sparse(f"to_sparse(layout={layout})")
    if sparse_dim is not None and sparse_dim != x.ndim:
        raise InvalidArgumentError(
            f"to_sparse: sparse_dim={sparse_dim} makes a hybrid tensor, which retrograd does "
            f"not support (give sparse_dim={x.ndim} or none)"
        )
    if x.ndim == 0:
        raise ShapeError("to_sparse: a 0-d tensor is not supported in retrograd")
    indices = x.detach().nonzero().t()
    values = x[tuple(indices[d] for d in range(x.ndim))]
    return SparseTensor(indices, values, tuple(x.shape), True)


# -- products ------------------------------------------------------------------------------------
def _check_dense(op: str, sparse: SparseTensor, dense: Any, name: str) -> Any:
    if isinstance(dense, SparseTensor):
        refuse(f"{op} of two sparse tensors")
    if not isinstance(dense, TensorBase):
        raise DTypeError(f"{op}: {name} must be a tensor, got {type(dense).__name__}")
    if dense.dtype != sparse.dtype:
        raise DTypeError(
            f"{op}: expected both operands to have one dtype, got {sparse.dtype} (sparse) and "
            f"{dense.dtype}"
        )
    if dense.device != sparse.device:
        raise InvalidArgumentError(
            f"{op}: tensors on different devices ({sparse.device} and {dense.device})"
        )
    return dense


def sparse_mm(op: str, sparse: SparseTensor, dense: Any, vector: bool = False) -> Any:
    """``sparse @ dense`` for a 2-d sparse tensor and a dense matrix (or vector, where
    ``vector``): dense, differentiable in both the sparse values and ``dense``."""
    dense = _check_dense(op, sparse, dense, "mat2")
    if sparse.ndim != 2 or (dense.ndim != 2 and not (vector and dense.ndim == 1)):
        raise ShapeError(
            f"{op}: expects a 2-d sparse matrix and a dense matrix, got shapes "
            f"{shape_text(sparse.shape)} (sparse) and {shape_text(dense.shape)}"
        )
    if sparse.shape[1] != dense.shape[0]:
        raise ShapeError(
            f"{op}: mat1 and mat2 shapes cannot be multiplied ({sparse.shape[0]}x"
            f"{sparse.shape[1]} and {'x'.join(str(s) for s in dense.shape)})"
        )
    matrix = dense.unsqueeze(1) if dense.ndim == 1 else dense
    # the kernel takes operands of one backend: the dense operand's (an inner-backend
    # tensor joins its autodiff decorator, as in any binary op)
    if sparse._values_t._backend.is_autodiff and not matrix._backend.is_autodiff:
        matrix = lift(sparse._values_t, matrix, op)
    rows, cols, values = (
        lift(matrix, part, op)
        for part in (sparse._indices_t[0], sparse._indices_t[1], sparse._values_t)
    )
    out = matrix._apply("sparse_coo_mm", [rows, cols, values, matrix], (sparse.shape[0],))
    return out.squeeze(1) if dense.ndim == 1 else out


def dense_sparse_mm(op: str, dense: Any, sparse: SparseTensor) -> Any:
    """``dense @ sparse`` (torch's ``mm`` of a dense and a sparse matrix): the transposed
    product, ``(sparse.t() @ dense.t()).t()``."""
    dense = _check_dense(op, sparse, dense, "input")
    if op == "matmul" and dense.ndim == 1:
        # torch's matmul of a vector and a matrix: the vector times each column
        return sparse_mm(op, sparse.t(), dense, vector=True)
    if dense.ndim != 2:
        raise ShapeError(
            f"{op}: expects a dense matrix and a 2-d sparse matrix, got shapes "
            f"{shape_text(dense.shape)} and {shape_text(sparse.shape)} (sparse)"
        )
    return sparse_mm(op, sparse.t(), dense.t()).t()


def sparse_softmax(
    op: str, sparse: SparseTensor, dim: Any, dtype: Any = None, log: bool = False
) -> SparseTensor:
    """torch's ``sparse.softmax``/``log_softmax``: over the specified entries that share every
    index but ``dim`` (the unspecified ones count as ``-inf``, so they stay unspecified), on the
    coalesced tensor; differentiable in the values."""
    if not isinstance(sparse, SparseTensor):
        refuse(f"{op} of a dense tensor (torch takes sparse tensors only)")
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise ArgumentTypeError(f"{op}: dim must be an int, got {type(dim).__name__}")
    axis = normalize_dim(op, int(dim), sparse.ndim)
    if dtype is not None:
        sparse = sparse._cast(DTYPE_OBJECTS[canonical_dtype(op, dtype)])
    if not sparse.is_floating_point():
        raise DTypeError(f"{op}: expects floating-point values, got {sparse.dtype}")
    sparse = sparse.coalesce()
    values = sparse._values_t
    if values.ndim != 1:
        refuse(f"{op} of a hybrid sparse tensor (values of shape {shape_text(values.shape)})")
    if values.shape[0] == 0:
        return SparseTensor(sparse._indices_t, values, sparse._size, True)
    # one group per line along ``axis``: the flat place with that axis' index set to 0
    strides = [math.prod(sparse._size[d + 1 :]) for d in range(sparse.ndim)]
    strides[axis] = 0
    line = (sparse._indices_t * sparse._indices_t.new_tensor(strides).unsqueeze(1)).sum(0)
    _, group = line.unique(return_inverse=True)
    groups = int(group.max().item()) + 1
    # the largest of each line, held constant: softmax does not depend on it
    peak = values.detach().new_full((groups,), -math.inf)
    peak = peak.scatter_reduce(0, group, values.detach(), "amax")
    shifted = values - peak[group]
    total = values.new_zeros((groups,)).index_add(0, group, shifted.exp())
    out = shifted - total.log()[group] if log else shifted.exp() / total[group]
    return SparseTensor(sparse._indices_t, out, sparse._size, True)


def sparse_sum(sparse: SparseTensor, dim: Any = None, dtype: Any = None) -> Any:
    """torch's ``sparse.sum``: a dense 0-d sum over every dimension, else a sparse tensor
    over the dimensions kept (coalesced)."""
    if dtype is not None:  # (given to .to() as it came, a str was read as a device)
        dtype = DTYPE_OBJECTS[canonical_dtype("sparse.sum", dtype)]
    values = sparse._values_t if dtype is None else sparse._values_t.to(dtype)
    if dim is None:
        return values.sum()
    dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
    summed = {normalize_dim("sparse.sum", d, sparse.ndim) for d in dims}
    if len(summed) != len(dims):
        raise InvalidArgumentError(f"sparse.sum: dim {list(dims)} names a dimension twice")
    if len(summed) == sparse.ndim:
        return values.sum()
    kept = [d for d in range(sparse.ndim) if d not in summed]
    size = tuple(sparse.shape[d] for d in kept)
    return SparseTensor(sparse._indices_t[kept], values, size, False).coalesce()
