"""More of torch's function forms: tensors assembled from others (``atleast_2d``,
``column_stack``, ``dstack``, ``block_diag``, ``cartesian_prod``, ``combinations``,
``tensordot``, ``chain_matmul``), index grids (``tril_indices``, ``triu_indices``), searches
(``searchsorted``, ``isin``), calculus on samples (``cumulative_trapezoid``, ``gradient``),
signal windows (``hann_window``...), and the function forms of methods that had none
(``rg.broadcast_to(x, shape)`` is ``x.broadcast_to(shape)``...).

Each is composed of differentiable tensor operations, so gradients follow (the windows and
index grids are constants, as in torch).

>>> import retrograd as rg
>>> rg.block_diag(rg.ones((1, 1)), 2 * rg.ones((2, 1))).tolist()
[[1.0, 0.0], [0.0, 2.0], [0.0, 2.0]]
>>> rg.searchsorted(rg.tensor([1, 3, 5]), rg.tensor([3, 6])).tolist()
[1, 3]
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend.protocol import FLOAT_DTYPES, default_float_dtype
from ..errors import (
    DTypeError,
    InvalidArgumentError,
    InvalidValueError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
    shape_text,
)
from ._dispatch import (
    TensorBase,
    int_argument,
    int_arguments,
    lift,
    normalize_dim,
    promote,
    promoted_dtype_of,
)
from .autocasting import autocast_op
from .creation import tensor, zeros
from .dtypes import canonical_dtype
from .functions import _method, lift_input
from .shape import cat, refuse_one_tensor, stack

#: ``rg.<name>(input, *args, **kwargs)`` is ``input.<name>(*args, **kwargs)``
_METHODS = [
    "argwhere",
    "broadcast_to",
    "cross",
    "fliplr",
    "flipud",
    "index_add",
    "index_copy",
    "index_fill",
    "index_reduce",
    "masked_scatter",
]
for _name in _METHODS:
    globals()[_name] = _method(_name, _name)
del _name


def _tensors(op: str, tensors: Any) -> list:
    tensors = (
        list(tensors[0])
        if len(tensors) == 1 and isinstance(tensors[0], list | tuple)
        else list(tensors)
    )
    for t in tensors:
        if not isinstance(t, TensorBase):
            raise InvalidArgumentError(f"{op}: expected tensors, got {type(t).__name__}")
    return tensors


def _atleast(op: str, tensors: tuple, ndim: int) -> Any:
    def one(t: Any) -> Any:
        if t.ndim >= ndim:
            return t
        if ndim == 3 and t.ndim == 2:
            return t.unsqueeze_dim(-1)  # torch: [m, n] -> [m, n, 1]
        if ndim == 3 and t.ndim == 1:
            return t.reshape((1, t.shape[0], 1))
        return t.reshape((1,) * (ndim - t.ndim) + tuple(t.shape))

    if len(tensors) == 1 and isinstance(tensors[0], TensorBase):
        return one(tensors[0])
    return tuple(one(t) for t in _tensors(op, tensors))


def atleast_1d(*tensors: Any) -> Any:
    """Each tensor with at least one dimension (a tuple for several)."""
    return _atleast("atleast_1d", tensors, 1)


def atleast_2d(*tensors: Any) -> Any:
    """Each tensor with at least two dimensions (new ones in front)."""
    return _atleast("atleast_2d", tensors, 2)


def atleast_3d(*tensors: Any) -> Any:
    """Each tensor with at least three dimensions, as torch adds them (``[n]`` becomes
    ``[1, n, 1]``, ``[m, n]`` becomes ``[m, n, 1]``)."""
    return _atleast("atleast_3d", tensors, 3)


def column_stack(tensors: Sequence[Any]) -> Any:
    """The tensors as columns side by side (a 1-d or 0-d one as one column)."""
    refuse_one_tensor("column_stack", tensors)
    columns = [
        t.reshape((-1, 1)) if t.ndim <= 1 else t for t in _tensors("column_stack", (tensors,))
    ]
    return cat(columns, 1)


def row_stack(tensors: Sequence[Any]) -> Any:
    """``vstack``: the tensors as rows, one under another."""
    refuse_one_tensor("row_stack", tensors)
    rows = atleast_2d(*_tensors("row_stack", (tensors,)))
    # (atleast_2d of one tensor is that tensor, not a tuple: a list of it would be its rows)
    return cat(list(rows) if isinstance(rows, tuple) else [rows], 0)


def dstack(tensors: Sequence[Any]) -> Any:
    """The tensors stacked along the third dimension (after :func:`atleast_3d`)."""
    refuse_one_tensor("dstack", tensors)
    parts = atleast_3d(*_tensors("dstack", (tensors,)))
    return cat(list(parts) if isinstance(parts, tuple) else [parts], 2)


def block_diag(*tensors: Any) -> Any:
    """A block-diagonal matrix of the given 0-, 1- or 2-d tensors (a 1-d one is a row)."""
    given = _tensors("block_diag", tensors)
    blocks = [t.reshape((1, -1)) if t.ndim <= 1 else t for t in given]
    for t in blocks:
        if t.ndim != 2:
            raise SizeMismatchError(
                f"block_diag: inputs must have at most 2 dimensions, got {shape_text(t.shape)}"
            )
    if not blocks:
        return zeros((1, 0))  # torch's block_diag() of nothing
    # torch's dtype of the inputs taken together, a 0-d one by its category alone (float64 []
    # beside float32 [2, 3] gives float32), before the 0-d ones become rows
    dtype = promoted_dtype_of(*given)
    blocks = [t if t.dtype == dtype else t.to(dtype) for t in blocks]
    width = sum(t.shape[1] for t in blocks)
    first = blocks[0]
    rows, before = [], 0
    for t in blocks:
        after = width - before - t.shape[1]
        pad = dict(dtype=t.dtype, backend=first.backend, device=first.device)
        parts = [zeros((t.shape[0], before), **pad), t, zeros((t.shape[0], after), **pad)]
        rows.append(cat([p for p in parts if p.shape[1]] or [t], 1))
        before += t.shape[1]
    return cat(rows, 0)


def cartesian_prod(*tensors: Any) -> Any:
    """Every combination of one element of each 1-d tensor, as rows ``[n1*n2*..., k]``
    (one tensor: itself)."""
    from .functions import meshgrid

    tensors = _tensors("cartesian_prod", tensors)
    for t in tensors:  # a matrix would come back as itself, or flattened into the product
        if t.ndim != 1:
            raise SizeMismatchError(
                f"cartesian_prod: expects 1-d tensors, got shape {shape_text(t.shape)}"
            )
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return stack([g.reshape((-1,)) for g in grids], 1)


def vander(x: Any, N: int | None = None, increasing: bool = False) -> Any:  # noqa: N803
    """torch's ``vander``: ``[len(x), N]`` of the powers of the 1-d ``x``, ``x**(N-1)`` first
    (``increasing``: ``x**0`` first); ``N`` defaults to ``len(x)``. The powers are running
    products, as torch computes them (so their rounding and gradient are torch's)."""
    x = lift_input("vander", x)
    if x.ndim != 1:
        raise SizeMismatchError(f"vander: x must be a 1-d tensor, got shape {shape_text(x.shape)}")
    n = x.shape[0] if N is None else int_argument("vander", N, "N")
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
        raise InvalidValueError(f"vander: N must be a non-negative int, got {N!r}")
    if x.dtype == "bool":
        x = x.cast("int64")
    if n == 0:
        return x.reshape((-1, 1))[:, :0]
    ones = x.reshape((-1, 1)).ones_like()
    powers = cat([ones, x.reshape((-1, 1)).expand((x.shape[0], n - 1))], 1).cumprod(1)
    return powers if increasing else powers.flip((1,))


def combinations(input: Any, r: int = 2, with_replacement: bool = False) -> Any:  # noqa: A002
    """The length-``r`` combinations of a 1-d tensor's elements, as rows (itertools' order)."""
    if input.ndim != 1:
        raise SizeMismatchError(
            f"combinations: expects a 1-d tensor, got {shape_text(input.shape)}"
        )
    if not isinstance(r, numbers.Integral) or r < 0:  # (torch's RuntimeError)
        raise InvalidValueError(f"combinations: r must be a non-negative int, got {r!r}")
    choose = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    if not r:  # torch: no combinations of length 0 at all, an empty 1-d tensor
        return input[:0]
    index = np.array(list(choose(range(input.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    if not len(index):
        return input[:0].reshape((0, r))
    picked = input.index_select(
        0, tensor(index.reshape(-1), backend=input.backend, device=input.device)
    )
    return picked.reshape((-1, r))


def _triangle_indices(
    op: str, row: int, col: int, offset: int, lower: bool, dtype: Any, device: Any
) -> Any:
    row, col, offset = int_arguments(op, (row, col, offset), "size")
    dtype = "int64" if dtype is None else canonical_dtype(op, dtype)
    if dtype not in ("int64", "int32"):  # (torch's kernel: not implemented for the others)
        raise UnsupportedDTypeError(
            f"{op}: not implemented for {dtype} (as torch's); use int64 or int32"
        )
    if row < 0 or col < 0:
        raise InvalidValueError(f"{op}: row and col must be non-negative, got {row}, {col}")
    mask = (
        np.tri(row, col, offset, dtype=bool) if lower else ~np.tri(row, col, offset - 1, dtype=bool)
    )
    return tensor(np.stack(np.nonzero(mask)).astype(np.int64), dtype=dtype, device=device)


def tril_indices(
    row: int, col: int, offset: int = 0, *, dtype: Any = None, device: Any = None
) -> Any:
    """The ``[2, n]`` row and column indices of the lower triangle (``offset`` above the
    diagonal counts in), row by row, as torch orders them."""
    return _triangle_indices("tril_indices", row, col, offset, True, dtype, device)


def triu_indices(
    row: int, col: int, offset: int = 0, *, dtype: Any = None, device: Any = None
) -> Any:
    """The ``[2, n]`` indices of the upper triangle (``offset`` above the diagonal on)."""
    return _triangle_indices("triu_indices", row, col, offset, False, dtype, device)


@autocast_op("tensordot")
def tensordot(a: Any, b: Any, dims: Any = 2) -> Any:
    """The sum of products over ``dims``: the last ``dims`` of ``a`` with the first of ``b``,
    or two lists of dimensions; one ``matmul`` after a permute and reshape of each."""
    b = lift(a, b, "tensordot")
    if hasattr(dims, "ndim") and hasattr(dims, "tolist"):  # torch also takes dims as a tensor
        dims = dims.tolist()
    if isinstance(dims, np.integer):
        dims = int(dims)
    if isinstance(dims, int):
        if dims < 0 or dims > min(a.ndim, b.ndim):
            raise SizeMismatchError(
                f"tensordot: dims={dims} is out of range for {shape_text(a.shape)} and "
                f"{shape_text(b.shape)}"
            )
        dims_a, dims_b = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        dims_a, dims_b = ([d] if isinstance(d, int) else list(d) for d in dims)
    dims_a = [d % a.ndim for d in dims_a]
    dims_b = [d % b.ndim for d in dims_b]
    if len(dims_a) == len(dims_b):
        # a contracted size 1 against a larger one: the other side summed there first (torch's
        # broadcast of contracted dimensions)
        for i, j in zip(dims_a, dims_b):
            if b.shape[j] == 1 and a.shape[i] != 1:
                a = a.sum(i, keepdim=True)
            elif a.shape[i] == 1 and b.shape[j] != 1:
                b = b.sum(j, keepdim=True)
    if len(dims_a) != len(dims_b) or any(a.shape[i] != b.shape[j] for i, j in zip(dims_a, dims_b)):
        raise SizeMismatchError(
            f"tensordot: contracted dimensions {dims_a} of {shape_text(a.shape)} and {dims_b} of "
            f"{shape_text(b.shape)} differ"
        )
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    size = math.prod(a.shape[d] for d in dims_a)
    # explicit sizes: with a size-0 dimension, -1 would be ambiguous
    left = a.permute(free_a + dims_a).reshape((math.prod(a.shape[d] for d in free_a), size))
    right = b.permute(dims_b + free_b).reshape((size, math.prod(b.shape[d] for d in free_b)))
    shape = tuple(a.shape[d] for d in free_a) + tuple(b.shape[d] for d in free_b)
    return (left @ right).reshape(shape)


def nonzero(input: Any, *, as_tuple: bool = False) -> Any:  # noqa: A002 (torch's name)
    """torch's ``nonzero``: the indices ``[count, ndim]`` of the non-zero elements, or one
    1-d tensor per dimension with ``as_tuple``."""
    return input.nonzero(as_tuple=as_tuple)


@autocast_op("inner")
def inner(input: Any, other: Any) -> Any:  # noqa: A002 (torch's name)
    """torch's ``inner``: the sum of products over the last dimension of both (a product for
    a 0-d operand). (``Tensor.inner()`` is retrograd's access to the inner backend's tensor,
    API.md section 3, so this one is a function only.)"""
    other = lift(input, other, "inner")
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    return tensordot(input, other, ([-1], [-1]))


@autocast_op("chain_matmul")
def chain_matmul(*matrices: Any) -> Any:
    """The product of the matrices, left to right."""
    matrices = _tensors("chain_matmul", matrices)
    if not matrices:
        raise InvalidArgumentError("chain_matmul: expects at least one matrix")
    for m in matrices:  # (matmul's vector and batch forms are no chain of matrices)
        if m.ndim != 2:
            raise ShapeError(f"chain_matmul: expects 2-d matrices, got shape {shape_text(m.shape)}")
    return functools.reduce(lambda x, y: x @ y, matrices)


def searchsorted(sorted_sequence: Any, values: Any, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter: Any = None) -> Any:  # fmt: skip
    """For each value, the index where it would be inserted to keep its row of
    ``sorted_sequence`` sorted (``right``/``side="right"``: after equal elements)."""
    if side is not None:
        if side not in ("left", "right"):
            raise InvalidArgumentError(
                f"searchsorted: side must be 'left' or 'right', got {side!r}"
            )
        if right and side == "left":  # (torch takes right=False with either side)
            raise InvalidArgumentError(
                "searchsorted: side and right can't be set to opposites, got side='left' "
                "while right=True"
            )
        right = side == "right"
    if sorter is not None:
        if not isinstance(sorter, TensorBase) or sorter.dtype != "int64":
            raise DTypeError(
                "searchsorted: sorter must be an int64 tensor, got "
                f"{getattr(sorter, 'dtype', type(sorter).__name__)}"
            )
        if sorter.shape != sorted_sequence.shape:  # (gather would take a smaller one)
            raise ShapeError(
                f"searchsorted: sorter {shape_text(sorter.shape)} must have the shape of "
                f"sorted_sequence {shape_text(sorted_sequence.shape)}"
            )
        sorted_sequence = sorted_sequence.gather(-1, sorter)
    if not isinstance(values, TensorBase):
        values = _like(sorted_sequence, values)
    _refuse_bools("searchsorted", sorted_sequence, values)
    if sorted_sequence.ndim > 1 and sorted_sequence.shape[:-1] != values.shape[:-1]:
        raise ShapeError(
            "searchsorted: the leading dimensions of sorted_sequence "
            f"{shape_text(sorted_sequence.shape)} and values {shape_text(values.shape)} differ"
        )
    # compared in the two's common dtype, by torch's rules for a 0-d values tensor (or a
    # number): the boundaries' dtype wins within a category (a 0-d int16 -1 against uint8
    # boundaries is 255), before the unsqueeze below makes values 1-d
    sorted_sequence, values = promote(sorted_sequence, values, "searchsorted")
    edges = sorted_sequence.unsqueeze_dim(-2)
    points = values.unsqueeze_dim(-1)
    # the edges a value is not left of (right: not strictly right of), as torch's binary
    # search counts them: a NaN value is past every edge
    after = edges.greater(points) if right else edges.greater_equal(points)
    below = after.logical_not()
    # one index per value (a 0-d values tensor's one included: the compare made it 1-d)
    indices = below.cast("int64").sum(-1).reshape(values.shape)
    return indices.cast("int32") if out_int32 else indices


def isin(
    elements: Any, test_elements: Any, *, assume_unique: bool = False, invert: bool = False
) -> Any:
    """Whether each element is among ``test_elements``."""
    if not isinstance(elements, TensorBase):
        elements = _like(test_elements, elements)
    if not isinstance(test_elements, TensorBase):
        test_elements = _like(elements, test_elements)
    if "bool" in (elements.dtype, test_elements.dtype):
        raise DTypeError(
            f"isin: not implemented for bool tensors (as in torch), got elements "
            f"{elements.dtype} and test_elements {test_elements.dtype}"
        )
    if elements.is_complex() or test_elements.is_complex():  # (torch: "Unsupported input type")
        raise UnsupportedDTypeError(
            f"isin: not implemented for complex tensors (as in torch), got elements "
            f"{elements.dtype} and test_elements {test_elements.dtype}"
        )
    tests = lift(elements, test_elements, "isin").reshape((-1,))
    found = elements.unsqueeze_dim(-1).equal(tests).any(-1)  # an empty test set: all False
    return found.logical_not() if invert else found


def _refuse_bools(op: str, boundaries: Any, values: Any) -> None:
    """torch's binary search compares in the two tensors' common dtype, which has no bool
    kernel (no values: nothing to search, no refusal)."""
    if boundaries.dtype == "bool" and values.dtype == "bool" and values.numel():
        raise DTypeError(
            f"{op}: not implemented for bool boundaries and bool values (as in torch); cast "
            "either to int64"
        )


def _like(reference: Any, value: Any) -> Any:
    """A Python number or list as a tensor on ``reference``'s backend and device."""
    return tensor(value, backend=reference.backend, device=reference.device)


def cumulative_trapezoid(y: Any, x: Any = None, *, dx: float = 1.0, dim: int = -1) -> Any:
    """The running trapezoidal integral along ``dim`` (one element shorter)."""
    from .functions import _check_sample_points, _refuse_bool, sample_spacing

    _refuse_bool("cumulative_trapezoid", y, x)
    n = y.shape[normalize_dim("cumulative_trapezoid", dim, y.ndim)]
    _check_sample_points("cumulative_trapezoid", y, x, n)
    # no samples: no intervals (an empty running integral), not a narrow of -1
    length = n - 1 if n else 0
    left, right = y.narrow(dim, 0, length), y.narrow(dim, 1 if n else 0, length)
    if x is None:
        return ((left + right) * (dx / 2.0)).cumsum(dim)
    spacing = sample_spacing("cumulative_trapezoid", y, x, dim)
    return ((left + right) * spacing * 0.5).cumsum(dim)


def gradient(input: Any, *, spacing: Any = 1, dim: Any = None, edge_order: int = 1) -> tuple:  # noqa: A002
    """torch's ``gradient``: central differences inside, one-sided ones (first or second
    order, ``edge_order``) at the ends, along each of ``dim`` (every dimension by default),
    with uniform ``spacing`` (a number, or one per dimension) or, given a list or tuple of
    1-d tensors, at those coordinates (one tensor per dimension, as long as it)."""
    dims = (
        list(range(input.ndim)) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    )
    # checked here: ``d % ndim`` below would take dim 5 of a matrix as dim 1, silently
    dims = [normalize_dim("gradient", d, input.ndim) for d in dims]
    if len(set(dims)) != len(dims):
        raise ShapeError(f"gradient: dim {dim!r} names a dimension more than once")
    steps = list(spacing) if isinstance(spacing, list | tuple) else [spacing] * len(dims)
    numbers_given = all(isinstance(h, int | float) for h in steps)
    coordinates_given = isinstance(spacing, list | tuple) and all(
        isinstance(h, TensorBase) for h in steps
    )
    if len(steps) != len(dims) or not (numbers_given or coordinates_given):
        raise InvalidArgumentError(
            "gradient: spacing must be a number, one number per dimension or one 1-d tensor of "
            f"coordinates per dimension, got {spacing!r} for {len(dims)} dimension(s)"
        )
    if edge_order not in (1, 2):
        raise InvalidValueError(f"gradient: edge_order must be 1 or 2, got {edge_order}")
    out = []
    for d, h in zip(dims, steps):
        d %= input.ndim
        n = input.shape[d]
        if n < edge_order + 1:
            raise SizeMismatchError(
                f"gradient: dimension {d} of {shape_text(input.shape)} needs at least "
                f"{edge_order + 1} samples"
            )
        at = functools.partial(input.narrow, d)  # (start, length) along d
        if coordinates_given:
            out.append(_gradient_at_coordinates(input, at, h, d, n, edge_order))
            continue
        inner = (at(2, n - 2) - at(0, n - 2)) * (0.5 / h)
        if edge_order == 1:
            first = (at(1, 1) - at(0, 1)) * (1.0 / h)
            last = (at(n - 1, 1) - at(n - 2, 1)) * (1.0 / h)
        else:
            first = (at(0, 1) * -3.0 + at(1, 1) * 4.0 - at(2, 1)) * (0.5 / h)
            last = (at(n - 3, 1) - at(n - 2, 1) * 4.0 + at(n - 1, 1) * 3.0) * (0.5 / h)
        out.append(cat([first, inner, last], d))
    return tuple(out)


def _gradient_at_coordinates(values: Any, at: Any, x: Any, d: int, n: int, edge_order: int) -> Any:
    """``gradient`` along ``d`` sampled at the 1-d coordinates ``x``: torch's second-order
    differences of unevenly spaced samples inside (``a * f[i - 1] + b * f[i] + c * f[i + 1]``),
    one-sided ones at the ends, each weight computed as torch computes it."""
    if x.ndim != 1 or x.shape[0] != n:
        raise ShapeError(
            f"gradient: the coordinates of dimension {d} of {shape_text(values.shape)} must be "
            f"a 1-d tensor of {n} values, got one of shape {shape_text(x.shape)}"
        )
    shape = [1] * values.ndim
    shape[d] = -1
    dx = x.diff()
    dx1, dx2 = dx.narrow(0, 0, n - 2), dx.narrow(0, 1, n - 2)
    a = (-dx2 / (dx1 * (dx1 + dx2))).reshape(shape)
    b = ((dx2 - dx1) / (dx1 * dx2)).reshape(shape)
    c = (dx1 / (dx2 * (dx1 + dx2))).reshape(shape)
    inner = a * at(0, n - 2) + b * at(1, n - 2) + c * at(2, n - 2)
    if edge_order == 1:
        first = (at(1, 1) - at(0, 1)) / dx[0]
        last = (at(n - 1, 1) - at(n - 2, 1)) / dx[-1]
    else:
        h0, h1 = dx[0], dx[1]
        first = (
            -(2.0 * h0 + h1) / (h0 * (h0 + h1)) * at(0, 1)
            + (h0 + h1) / (h0 * h1) * at(1, 1)
            + (-h0) / (h1 * (h0 + h1)) * at(2, 1)
        )
        hl, hp = dx[-1], dx[-2]
        last = (
            hl / (hp * (hl + hp)) * at(n - 3, 1)
            + -(hl + hp) / (hl * hp) * at(n - 2, 1)
            + (2 * hl + hp) / (hl * (hl + hp)) * at(n - 1, 1)
        )
    return cat([first, inner, last], d)


# -- signal windows (constants) -----------------------------------------------------------------
def _window(
    op: str,
    length: int,
    periodic: bool,
    dtype: Any,
    device: Any,
    requires_grad: bool,
    values: Any,
) -> Any:
    if not isinstance(length, int) or length < 0:
        raise InvalidArgumentError(
            f"{op}: window_length must be a non-negative int, got {length!r}"
        )
    dtype = canonical_dtype(op, dtype, allow_none=True) or default_float_dtype()
    if dtype not in FLOAT_DTYPES:  # an int window would truncate its values to 0 and 1
        raise DTypeError(f"{op} expects a floating point dtype, got {dtype}")
    if length <= 1:
        return tensor(np.ones(length), dtype=dtype, device=device, requires_grad=requires_grad)
    n = length + 1 if periodic else length
    # torch's kernels run each step in the window's dtype (float32 rounds between steps)
    host = np.float32 if dtype == "float32" else np.float64
    array = values(np.arange(n, dtype=host), n, host)
    return tensor(array[:length], dtype=dtype, device=device, requires_grad=requires_grad)


def _cos(x: np.ndarray) -> np.ndarray:
    """``cos`` of each value, rounded once to its dtype."""
    return np.cos(x.astype(np.float64)).astype(x.dtype)


def _hamming(alpha: float, beta: float) -> Any:
    """torch's ``hamming_window`` steps: ``k * (2 pi / (n - 1))``, ``cos``, ``* -beta``,
    ``+ alpha`` (``hann_window`` is ``alpha = beta = 0.5``)."""

    def values(k: np.ndarray, n: int, host: Any) -> np.ndarray:
        return _cos(k * host(2.0 * math.pi / (n - 1))) * host(-beta) + host(alpha)

    return values


def hann_window(
    window_length: int,
    periodic: bool = True,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Any:
    return _window(
        "hann_window", window_length, periodic, dtype, device, requires_grad, _hamming(0.5, 0.5)
    )


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54,
                   beta: float = 0.46, *, dtype: Any = None, device: Any = None,
                   requires_grad: bool = False) -> Any:  # fmt: skip
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   _hamming(alpha, beta))  # fmt: skip


def blackman_window(
    window_length: int,
    periodic: bool = True,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Any:
    def values(k: np.ndarray, n: int, host: Any) -> np.ndarray:
        phase = k * host(math.pi / (n - 1))
        return _cos(phase * host(4)) * host(0.08) - _cos(phase * host(2)) * host(0.5) + host(0.42)

    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad, values)


def bartlett_window(
    window_length: int,
    periodic: bool = True,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Any:
    def values(k: np.ndarray, n: int, host: Any) -> np.ndarray:
        # torch's: the rising half ``k * 2 / (n - 1)``, the rest ``2 - k * 2 / (n - 1)``
        ramp = k * host(2.0 / (n - 1))
        first_half = ((n - 1) >> 1) + 1
        ramp[first_half:] = host(2) - ramp[first_half:]
        return ramp

    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad, values)


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *,
                  dtype: Any = None, device: Any = None,
                  requires_grad: bool = False) -> Any:  # fmt: skip
    def values(k: np.ndarray, n: int, host: Any) -> np.ndarray:
        return np.i0(
            beta * np.sqrt(np.clip(1.0 - (2.0 * k / (n - 1) - 1.0) ** 2, 0.0, None))
        ) / np.i0(beta)

    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad, values)


__all__ = sorted(
    {
        *_METHODS,
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "bartlett_window",
        "blackman_window",
        "block_diag",
        "cartesian_prod",
        "chain_matmul",
        "column_stack",
        "combinations",
        "cumulative_trapezoid",
        "dstack",
        "gradient",
        "hamming_window",
        "hann_window",
        "inner",
        "isin",
        "kaiser_window",
        "nonzero",
        "row_stack",
        "searchsorted",
        "tensordot",
        "tril_indices",
        "triu_indices",
        "vander",
    }
)
