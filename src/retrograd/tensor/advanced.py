"""Advanced indexing, as torch's: ``x[idx]``, ``x[rows, cols]``, ``x[mask]``, ``x[:, [0, 2]]``,
and item assignment ``x[index] = value`` (torch's ``index_put_``).

Ints, slices, ``None`` and ``...`` are applied first, as a view (torch selects the ints before
it indexes with tensors); the index tensors (int64 tensors, lists, arrays; a bool mask stands
for the indices of its true elements, read on the host as torch reads them) are broadcast
together, and the dimensions they index are merged into one, indexed with one ``index_select``
(``select_assign`` to write): the gradient accumulates over repeated indices as torch's.
Where the indexed dimensions are adjacent, the result's index dimensions take their place;
otherwise they come first (NumPy's and torch's rule).
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np

from ..autodiff.grad_mode import is_grad_enabled, no_grad
from ..errors import (
    AutodiffError,
    DTypeError,
    IndexOutOfRangeError,
    ShapeError,
    shape_text,
    warn_at_caller,
)
from . import views
from ._dispatch import (
    INT_DTYPES,
    NARROW_INTS,
    SCALARS,
    TensorBase,
    check_written_tensor,
    from_host,
    lift,
    written_scalar,
)
from .strides import strides_of

__all__ = [
    "get_index",
    "index_items",
    "index_put",
    "put_through_aliases",
    "set_index",
    "split_bool_scalars",
]


def index_items(index: Any) -> tuple[Any, ...]:
    """``index`` as the tuple of items torch reads: a tuple as it is; a list holding a
    tensor, a sequence, a slice, ``...`` or ``None`` as a tuple of its items (torch's
    ``treatSequenceAsTuple``, NumPy's old rule: ``x[[rows, cols]]`` is ``x[rows, cols]``);
    anything else as a one-item tuple."""
    if isinstance(index, tuple):
        return index
    sequences = TensorBase | list | tuple | range | np.ndarray | slice
    if (
        isinstance(index, list)
        and len(index) < 32
        and any(i is None or i is Ellipsis or isinstance(i, sequences) for i in index)
    ):
        return tuple(index)
    return (index,)


def int_scalars(index: tuple[Any, ...]) -> tuple[Any, ...]:
    """``index`` with each 0-d integer tensor read as its integer: torch's indexing
    takes one as a Python int (a select, giving a view, in get and set alike), not as an index
    tensor (``x[t0, :, i]`` selects first; an index tensor would put the broadcast dims
    first); and each uint8 tensor or array read as the bool mask torch reads it as (its legacy
    byte masks, with torch's deprecation warning)."""
    if any(
        str(getattr(i, "dtype", "")) == "uint8" and not isinstance(i, np.generic) for i in index
    ):
        warn_byte_mask()
    return tuple(_int_scalar(i) for i in index)


def warn_byte_mask() -> None:
    """torch's deprecation warning for a legacy uint8 mask, which it still reads as bool."""
    warn_at_caller(
        "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead."
    )


def _int_scalar(item: Any) -> Any:
    if isinstance(item, TensorBase):
        if item.dtype == "uint8":
            return item.cast("bool")
        if item.ndim == 0 and item.dtype in INT_DTYPES:
            return int(item.item())
    elif isinstance(item, np.ndarray) and item.dtype == np.uint8:
        return item.astype(np.bool_)
    elif isinstance(item, np.ndarray) and item.ndim == 0 and np.issubdtype(item.dtype, np.integer):
        return int(item)  # (torch reads a 0-d integer array as the int, a basic index)
    return item


def _is_bool_scalar(item: Any) -> bool:
    if isinstance(item, bool | np.bool_):
        return True
    return isinstance(item, TensorBase | np.ndarray) and not np.ndim(item) and _is_bool(item)


def split_bool_scalars(index: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """torch's reading of a bool scalar in an index (``True``, ``False``, a 0-d bool
    tensor): a new dimension of size 1 there (``None``), indexed by ``[0]`` (true) or by no
    index at all (false), as two indexes to apply in turn; ``None`` when there is none."""
    if not any(_is_bool_scalar(item) for item in index):
        return None
    unsqueeze: list[Any] = []
    pick: list[Any] = []
    for item in index:
        if _is_bool_scalar(item):
            unsqueeze.append(None)
            pick.append(np.zeros(1 if bool(item) else 0, dtype=np.int64))
        elif item is None:
            unsqueeze.append(None)
            pick.append(slice(None))
        elif item is Ellipsis:
            unsqueeze.append(Ellipsis)
            pick.append(Ellipsis)
        else:  # what the second index consumes: one dimension, or a mask's
            mask = isinstance(item, TensorBase | np.ndarray) and _is_bool(item)
            unsqueeze.extend([slice(None)] * (max(np.ndim(item), 1) if mask else 1))
            pick.append(item)
    return tuple(unsqueeze), tuple(pick)


def _split(t: Any, index: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[tuple[int, Any]]]:
    """The basic part of ``index`` (advanced items replaced by full slices) and, for the
    tensor it gives, each advanced dimension's position and index tensor."""
    arrays = TensorBase | list | np.ndarray | range | tuple  # sequences of indices, as torch's
    shape = t.shape
    consumed = 0
    for item in index:
        if isinstance(item, TensorBase | np.ndarray) and _is_bool(item):
            consumed += max(np.ndim(item) if isinstance(item, np.ndarray) else item.ndim, 1)
        elif item is not None and item is not Ellipsis:
            consumed += 1
    if consumed > len(shape):
        raise IndexOutOfRangeError(
            f"indexing: too many indices ({consumed}) for a tensor of shape {shape_text(shape)}"
        )
    if any(i is Ellipsis for i in index):
        at = next(k for k, i in enumerate(index) if i is Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - consumed) + index[at + 1 :]
    basic: list[Any] = []
    advanced: list[tuple[int, Any]] = []
    out_dim = dim = 0
    for item in index:
        if item is None:
            basic.append(None)
            out_dim += 1
        elif isinstance(item, bool):
            raise IndexOutOfRangeError("indexing: a Python bool index is not supported")
        elif isinstance(item, numbers.Integral):
            basic.append(item)
            dim += 1
        elif isinstance(item, slice):
            basic.append(item)
            out_dim += 1
            dim += 1
        elif isinstance(item, arrays):
            tensor = _as_index(t, item)
            if tensor.dtype == "bool" and type(tensor)._sticky:
                # (a mask of a vmap's batch: each element would keep its own count)
                raise AutodiffError(
                    "vmap: We do not support batching operators that can support dynamic "
                    "shape. Attempting to batch over indexing with a boolean mask."
                )
            if tensor.dtype == "bool":
                check_mask(tensor.shape, shape, dim)
                per_dim = tensor.nonzero(as_tuple=True) if tensor.ndim else ()
                for k, positions in enumerate(per_dim):
                    basic.append(slice(None))
                    advanced.append((out_dim + k, positions))
                out_dim += tensor.ndim
                dim += tensor.ndim
            else:
                basic.append(slice(None))
                advanced.append((out_dim, tensor))
                out_dim += 1
                dim += 1
        else:
            raise IndexOutOfRangeError(f"indexing: unsupported index {item!r}")
    return tuple(basic), advanced


def check_mask(mask: tuple[int, ...], shape: tuple[int, ...], dim: int) -> None:
    """A bool mask indexing from ``dim`` must have the shape of the dims it covers (torch's
    "The shape of the mask [3] at index 0 does not match the shape of the indexed
    tensor")."""
    covered = shape[dim : dim + len(mask)]
    if mask != covered:
        raise IndexOutOfRangeError(
            f"indexing: the mask of shape {shape_text(mask)} does not match "
            f"the indexed shape {shape_text(covered)} at dimension {dim}"
        )


def _is_bool(item: Any) -> bool:
    dtype = item.dtype
    return dtype == "bool" or dtype == np.bool_


def _as_index(t: Any, item: Any) -> Any:
    if isinstance(item, TensorBase):
        tensor = lift(t, item, "indexing")
    else:
        array = np.asarray(item)
        if array.size == 0:
            array = array.astype(np.int64)
        if array.dtype != np.bool_ and not np.issubdtype(array.dtype, np.integer):
            raise IndexOutOfRangeError(
                f"indexing: tensors used as indices must be long, int or bool, got {array.dtype}"
            )
        if array.dtype.kind == "i":  # (torch reads a NumPy int8 or int16 index array as int64)
            array = array.astype(np.int64, copy=False)
        tensor = from_host(type(t)._result, array, None, t._backend, t._device)
    if tensor.dtype == "int32":
        return tensor.cast("int64")
    if tensor.dtype not in ("int64", "bool"):
        raise IndexOutOfRangeError(
            f"indexing: tensors used as indices must be long, int or bool, got {tensor.dtype}"
        )
    return tensor


def _plan(y: Any, advanced: list[tuple[int, Any]]) -> tuple[Any, Any, tuple, tuple, list]:
    """``y`` with its indexed dimensions merged in front, the flat int64 index into them, the
    broadcast index shape, the shape of what the index gives, and the permutation used."""
    shape = y.shape
    positions = [p for p, _ in advanced]
    try:
        broadcast = np.broadcast_shapes(*[tensor.shape for _, tensor in advanced])
    except ValueError:
        shapes = ", ".join(shape_text(tensor.shape) for _, tensor in advanced)
        raise IndexOutOfRangeError(
            f"indexing: shape mismatch: indexing tensors could not be broadcast together "
            f"with shapes {shapes}"
        ) from None
    rest = [d for d in range(len(shape)) if d not in positions]
    order = positions + rest
    moved = y if order == list(range(len(shape))) else y.permute(order)
    sizes = [shape[p] for p in positions]
    merged = moved.reshape((math.prod(sizes),) + tuple(shape[d] for d in rest))
    flat = None
    stride = 1
    # torch checks each index as it copies an element: where the result has no elements (a
    # dimension left unindexed is empty), no index is checked
    unchecked = math.prod(shape[d] for d in rest) == 0 and all(sizes)
    for (position, tensor), size in reversed(list(zip(advanced, sizes))):
        index = tensor.expand(broadcast) if tensor.shape != broadcast else tensor
        if unchecked:
            index = index.clamp(-size, size - 1)
        else:
            _check(index, size, position, shape)
        index = index.mask_where(index.lower(0), index + size)  # torch wraps negatives
        term = index if stride == 1 else index * stride
        flat = term if flat is None else flat + term
        stride *= size
    rest_shape = tuple(shape[d] for d in rest)
    adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
    if adjacent and positions[0] > 0:
        lead = positions[0]
        result_shape = rest_shape[:lead] + tuple(broadcast) + rest_shape[lead:]
    else:
        result_shape = tuple(broadcast) + rest_shape
    return merged, flat.reshape(-1), tuple(broadcast), result_shape, [adjacent, positions, rest]


def _check(index: Any, size: int, dim: int, shape: tuple[int, ...]) -> None:
    """Indices must lie in ``[-size, size)`` (:func:`check_from_end`)."""
    check_from_end(
        index,
        size,
        lambda which: (
            f"indexing: {which} is out of range for dimension {dim} of size {size} "
            f"(shape {shape_text(shape)})"
        ),
    )


def check_from_end(index: Any, size: int, describe: Any) -> Any:
    """Check that the int64 tensor ``index`` lies in ``[-size, size)`` (a negative index
    counting from the end), on the backend as ``index + size`` in ``[0, 2 size)``, and return
    that ``index + size``; a bad one raises ``IndexOutOfRangeError(describe(which))``,
    ``which`` naming the index as given ("index -7", or "an index" where the backend reports
    no value)."""

    def message(bad: int | None) -> str:
        return describe("an index" if bad is None else f"index {bad - size}")

    shifted = index + size
    shifted._backend.check_index_range(shifted._prim, 2 * size, message, None)
    return shifted


def _to_result(taken: Any, broadcast: tuple, layout: list, inverse: bool = False) -> Any:
    """The merged-dimension result ``[*broadcast, *rest]`` put in torch's order (the index
    dimensions where the indexed ones were, when those were adjacent and not first);
    ``inverse``: back from torch's order."""
    adjacent, positions, _ = layout
    if not (adjacent and positions[0] > 0):
        return taken
    lead, count = positions[0], len(broadcast)
    ndim = taken.ndim
    if inverse:
        order = [*range(lead, lead + count), *range(lead), *range(lead + count, ndim)]
    else:
        order = [*range(count, count + lead), *range(count), *range(count + lead, ndim)]
    return taken.permute(order)


def get_index(t: Any, index: tuple[Any, ...]) -> Any:
    """``t[index]`` with index tensors, lists or masks among the items."""
    basic, advanced = _split(t, index)
    y = t[basic] if any(not _full(b) for b in basic) else t
    if not advanced:
        return y
    merged, flat, broadcast, _, layout = _plan(y, advanced)
    rest = merged.shape[1:]
    taken = merged.index_select(0, flat).reshape(broadcast + rest)
    # torch's result is a new contiguous tensor, whatever order its dimensions come in
    # (``x[:, idx, :].view(-1, d)`` works there): not a permuted view of ``taken``
    return _to_result(taken, broadcast, layout).contiguous()


def _full(item: Any) -> bool:
    return isinstance(item, slice) and item == slice(None)


def index_put(y: Any, advanced: list[tuple[int, Any]], value: Any, accumulate: bool) -> Any:
    """``y`` with ``value`` written (added, with ``accumulate``) where ``advanced`` indexes."""
    merged, flat, broadcast, result_shape, layout = _plan(y, advanced)
    values = value if isinstance(value, TensorBase) else _host_value(y, value)
    values = lift(y, values, "index_put_")
    if values.dtype != y.dtype:
        values = values.cast(y.dtype)
    try:
        fits = np.broadcast_shapes(values.shape, result_shape) == result_shape
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(
            f"index_put_: shape mismatch: value tensor of shape {shape_text(values.shape)} "
            f"cannot be broadcast to indexing result of shape {shape_text(result_shape)}"
        )
    values = _to_result(values.expand(result_shape), broadcast, layout, inverse=True)
    rest = merged.shape[1:]
    values = values.reshape((flat.shape[0],) + rest)
    written = merged.select_assign(0, flat, values, "add" if accumulate else "assign")
    _, positions, rest_dims = layout
    order = positions + rest_dims
    unmerged = written.reshape(tuple(y.shape[d] for d in order))
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return unmerged if order == sorted(order) else unmerged.permute(inverse)


def _host_value(y: Any, value: Any) -> Any:
    if isinstance(value, SCALARS):
        value = written_scalar("setitem", value, y.dtype)
        return from_host(type(y)._result, np.asarray(value), y.dtype, y._backend, y._device)
    return np.asarray(value)


def _is_bool_index(item: Any) -> bool:
    if isinstance(item, bool):
        return True
    if isinstance(item, TensorBase | np.ndarray):
        return str(item.dtype) == "bool"
    return isinstance(item, list) and bool(item) and all(isinstance(v, bool) for v in item)


def _whole_of(target: Any, t: Any) -> bool:
    """Whether ``target = t[index]`` is all of ``t`` (``t[:]``, ``t[...]``, ``t[:, :]``):
    torch's ``t[index] = v`` then skips the trivial slices and copies into ``t`` itself (its
    ``grad_fn`` a ``CopyBackwards``, not a ``CopySlices`` of a view: round 93)."""
    link = getattr(target, "_view", None)
    return (
        link is not None
        and link[views.KIND] == "index"
        and link[views.PARAMS][0] is None
        and views.base_of(link) is t
        and target.shape == t.shape
    )


def set_index(t: Any, index: Any, value: Any) -> None:
    """``t[index] = value``: a basic index writes through its view (``t[index].copy_(v)``);
    index tensors, lists and masks as torch's ``index_put_``."""
    # (the value is then converted to the tensor's dtype, as for ``t[1] = v``)
    index = index_items(index)
    _refuse_byte_mask_fill(t, index, value)
    index = int_scalars(index)
    bools = split_bool_scalars(index)
    if bools is not None:  # through the view with the new dimensions
        set_index(t[bools[0]], bools[1], value)
        return
    given = value
    if isinstance(value, TensorBase) and value.ndim and value.shape[0] == 1:
        # torch drops the value's leading size-1 dims first (``slicePrefix1sDims``), so
        # ``t[0, 0] = ones(1)`` and ``t[0] = ones(1, 1, n)`` fit
        shape = value.shape
        lead = next((i for i, n in enumerate(shape) if n != 1), len(shape))
        value = value.reshape(shape[lead:])
    arrays = TensorBase | list | np.ndarray | range | tuple
    if not any(isinstance(i, arrays | bool) for i in index):
        target = t[index]
        _refuse_setitem_overlap(target, given, value)
        if _whole_of(target, t):
            target = t
        target._copy_unchecked(value)
        return
    for item in index:  # (torch refuses an index of another dtype before the value's)
        if isinstance(item, TensorBase) and item.dtype not in ("int64", "int32", "bool"):
            raise IndexOutOfRangeError(
                f"setitem: tensors used as indices must be long, int or bool, got {item.dtype}"
            )
    if isinstance(value, TensorBase) and value.dtype != t.dtype:
        picks = [i for i in index if isinstance(i, arrays | bool)]
        one_mask = len(picks) == 1 and _is_bool_index(picks[0])
        if one_mask and value.numel() == 1:  # torch: a masked_fill_, which casts the value
            check_written_tensor("index_put_", value, t.dtype)
            value = value.cast(t.dtype)
    if isinstance(value, TensorBase) and value.dtype != t.dtype:
        _check_before_dtype(t, index, value)
        raise DTypeError(
            f"index_put_: the value's dtype {value.dtype} is not the tensor's {t.dtype} (torch "
            "requires them to match when indexing with tensors, lists or masks); cast it first"
        )
    basic, advanced = _split(t, index)
    target = t[basic] if any(not _full(b) for b in basic) else t
    mask = _whole_mask(target, index, advanced, value)
    if mask is None:  # (torch's masked_fill_ of a one-element value reads it first)
        views.refuse_partial_overlap("index_put_", target, value, full=True)
    if mask is not None:
        fill = value
        expanded = _expanded_source(target, mask)
        if expanded is not None:
            target, mask = expanded
        target._update("index_put_", lambda y: _masked(y, mask, fill), operands=(fill,))
        return
    leading = [d for d, _ in advanced] == list(range(len(advanced)))
    if leading and put_through_aliases(target, [i for _, i in advanced], value, False):
        return
    target._update("index_put_", lambda y: index_put(y, advanced, value, False), operands=(value,))


def put_through_aliases(t: Any, indices: Any, values: Any, accumulate: bool) -> bool:
    """``t.index_put_(indices, values, accumulate)`` where ``t`` is a view whose elements share
    memory, done as torch does it, on ``t``'s root; returns whether it was (not for other
    tensors: their write is an update like any other). torch writes (adds, with
    ``accumulate``) each value in turn into the memory its index names, so a location held by
    several positions takes every add made through any of them, or keeps the value written
    last: through an expanded view (which torch takes, with a deprecation warning), written
    link by link, the view's last position holding a location gave its value
    (``e = x[:1].expand(2, n); e[tensor([1, 0])] = v`` left ``v[0]``, torch ``v[1]``; an
    accumulating put kept one value instead of the sum: draw94). Overlapping unfold windows
    and as_strided positions are done so for an accumulating put."""
    if not isinstance(values, TensorBase) or any(
        i is not None and not isinstance(i, TensorBase) for i in indices
    ):
        return False
    strides = strides_of(t) if getattr(t, "_view", None) is not None else ()
    expanded = any(n > 1 and s == 0 for n, s in zip(t.shape, strides))
    if not (accumulate or expanded):
        # (through overlapping unfold windows torch's CopySlices gives the old values at a
        # location written by one position but copied last by another their gradient, which
        # the write link by link keeps: tests/test_leftovers20.py)
        return False
    found = views.positions_in_root(t, through_expand=expanded)
    if found is None:
        return False
    root, positions = found
    targets = positions[tuple(indices)]
    try:
        put = values.expand(targets.shape).reshape(-1)
    except ShapeError:
        return False  # (index_put's own refusal, with its message)
    count = math.prod(root.shape)

    def write(r: Any) -> Any:
        flat = r.reshape(count).index_put((targets.reshape(-1),), put, accumulate=accumulate)
        return flat.reshape(r.shape)

    root._update("index_put_", write, operands=(values,))
    node = getattr(root._prim, "node", None)
    if node is not None and node.torch_name == "IndexPutBackward0":
        node.torch_name = "torch::autograd::CopySlices"  # (written through a view, as torch's)
    views.refuse_gradient_through_overlap("index_put_", t)  # (an expanded view: as any write)
    return True


def _check_before_dtype(t: Any, index: tuple, value: Any) -> None:
    """torch's ``index_put_`` checks the indices (their broadcast, a mask's shape) and the
    value's shape before the value's dtype (their range after it): a write of a value of
    another dtype raises their error first, found by the write into a copy, outside the graph,
    of the value cast."""
    with no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            probe, cast = t.detach().clone(), value.detach().cast(t.dtype)
        except Exception:  # (a value that cannot be cast: the dtype error is the one)
            return
        try:
            set_index(probe, index, cast)
        except IndexOutOfRangeError as error:
            if "is out of range for dimension" in str(error):
                return  # (torch's kernel checks the range after the dtype: _check's error)
            raise


def _refuse_byte_mask_fill(t: Any, index: tuple, value: Any) -> None:
    """torch writes through a legacy uint8 mask as through a bool one, except where its
    ``index_put_`` takes the ``masked_fill_`` path (the mask the only index tensor, one value),
    which refuses any mask but a bool one, once the mask's shape is checked."""
    arrays = TensorBase | list | np.ndarray | range | tuple
    # (a 0-d int tensor or array is read as an int, a select: int_scalars)
    picks = [i for i in index if isinstance(i, arrays) and not isinstance(_int_scalar(i), int)]
    if len(picks) != 1 or str(getattr(picks[0], "dtype", "")) != "uint8":
        return
    if not (isinstance(value, SCALARS) or (isinstance(value, TensorBase) and value.numel() == 1)):
        return
    with no_grad():
        t.detach()[int_scalars(index)]  # (a mask of the wrong shape: torch's IndexError first)
    raise DTypeError(
        "setitem: masked_fill_ only supports boolean masks, but got a uint8 mask (as torch's "
        "index_put_ of one value through a mask); use a bool mask (mask.bool())"
    )


def _refuse_setitem_overlap(target: Any, given: Any, value: Any) -> None:
    """torch's ``copy_to`` of ``t[basic] = given``: a 0-d ``given`` is a ``fill_`` (nothing
    checked); one of the target's shape is copied as it is, checked for a partial overlap
    with the target; otherwise ``value`` (``given`` without its leading size-1 dims) is
    expanded to the target's shape and copied: checked only where the expansion repeats no
    element (an expanded tensor is one torch does not check)."""
    if not isinstance(given, TensorBase) or given.ndim == 0:
        return
    if tuple(given.shape) == tuple(target.shape):
        views.refuse_partial_overlap("copy_", target, given)
        return
    lead = target.ndim - value.ndim
    repeats = lead < 0 or any(n != 1 for n in target.shape[:lead])
    repeats = repeats or any(v != n and n > 1 for v, n in zip(value.shape, target.shape[lead:]))
    if not repeats:
        views.refuse_partial_overlap("copy_", target, value)


def _whole_mask(target: Any, index: tuple, advanced: list, value: Any) -> Any:
    """The bool mask of ``x[mask] = scalar`` (a mask over the leading dimensions), written
    with ``mask_where`` on the device, without reading the mask on the host."""
    if len(index) != 1 or not isinstance(index[0], TensorBase) or not _is_bool(index[0]):
        return None
    if not (isinstance(value, SCALARS) or (isinstance(value, TensorBase) and value.numel() == 1)):
        return None
    mask = lift(target, index[0], "index_put_")
    if mask.shape != target.shape[: mask.ndim]:
        return None
    return mask.reshape(mask.shape + (1,) * (target.ndim - mask.ndim))


def _expanded_source(target: Any, mask: Any) -> tuple[Any, Any] | None:
    """``(base, mask on it)`` for ``x[mask] = scalar`` into ``x``, an expanded tensor (XNOR-Net's
    ``m = w.norm(1, 1, keepdim=True).expand(s); m[w.lt(-1.0)] = 0``): as torch writes it (with a
    deprecation warning), each memory location shared by several elements takes the value if
    any of them is selected, so the write is a masked fill of the expand's base by the mask
    reduced with ``any`` over the expanded dimensions. ``None`` for any other tensor."""
    view = getattr(target, "_view", None)
    if view is None or view[views.KIND] != "expand":
        return None
    backend = target._backend
    if backend.is_autodiff and backend.is_tracked(target._prim) and is_grad_enabled():
        return None  # in a graph: refused (torch's backward then fails), the write-back's error
    warnings.warn(
        "index_put_: writing through a mask into an expanded tensor writes each element's "
        "shared memory location (deprecated in torch, which warns too); clone() it first to "
        "write the elements one by one",
        UserWarning,
        stacklevel=4,
    )
    source = views.base_of(view)
    lead = target.ndim - source.ndim
    selected = mask.expand(target.shape)
    for d in reversed(range(target.ndim)):
        if d < lead or (source.shape[d - lead] == 1 and target.shape[d] != 1):
            selected = selected.any(d, keepdim=True)
    return source, selected.reshape(source.shape)


def _masked(y: Any, mask: Any, value: Any) -> Any:
    if isinstance(value, TensorBase):
        check_written_tensor("index_put_", value, y.dtype)
        values = lift(y, value, "index_put_").reshape(()).cast(y.dtype)
        return y.mask_where(mask, values.expand(y.shape))
    if y.dtype == "int64" and isinstance(value, float):  # torch converts, toward zero
        if not math.isfinite(value):
            raise DTypeError(f"index_put_: cannot write {value!r} into an int64 tensor")
        value = int(value)
    elif y.dtype in NARROW_INTS and isinstance(value, float):
        # torch converts toward zero within the dtype's bounds (``u8[m] = 2.9`` writes 2)
        value = written_scalar("index_put_", value, y.dtype)
    elif y.dtype == "bool" and isinstance(value, float):  # torch converts: nonzero (NaN too)
        value = bool(value)
    return y.mask_fill(mask, value)
