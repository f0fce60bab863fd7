"""Views: which tensors alias which, so that in-place updates behave as PyTorch's.

Primitives never change where anything else can see them (a value saved for backward is
never modified; :func:`.inplace._in_buffer` writes into a buffer only the tensors being written
reference); what an in-place op changes is the primitive a tensor *object* holds. PyTorch's
aliasing is kept by remembering, for each tensor made by a view op (``view``/``reshape``
where torch views, ``transpose``, ``permute``, ``t()``, basic indexing,
``narrow``/``chunk``/``split``/``unbind``, ``expand``, ``unfold``, ``squeeze``/``unsqueeze``,
``detach()``, ``.data``), its *base* and how it was taken (a :class:`Link`), and for each base
its live views (weak references). Then:

- an in-place update of a view computes its base's new value (the view's values scattered
  back: ``slice_assign`` for a slice, the inverse permutation for a transpose, a reshape back)
  and updates the base the same way, up to the root, recorded in the graph as functional ops,
  so gradients flow as torch's ``CopySlices`` makes them flow;
- after a tensor is updated, every live view of it (and their views) is recomputed from it.

A view holds its base, but ``detach()`` and ``.data`` of a tensor computed in the graph hold
it weakly (:func:`_held`): a detached tensor keeps its base's storage, as torch's does, not its
base's graph.

Writes through ``.data`` or ``detach()`` are outside the graph of the tensor written to: its
values are given to a leaf as a new value (``p.data.add_(g, alpha=-lr)``), or to a tensor
computed in the graph through the op ``data_write``, which keeps it there as torch's ``.data``
write does. A value computed in the graph (``d.copy_(y)``, ``d.mul_(y)``, ``y`` requiring
grad, outside ``no_grad``) is recorded, as torch records it, on the detached tensor and its
views below it only (they require grad from then on; ``write(recorded=True)``). A
write that cannot alias as torch's would (an expanded or overlapping-window view: one element
in several places) is refused with an error that says so, as torch refuses it.

Strides are modelled, lazily, only to decide what torch decides with them: whether
``reshape``/``view``/``flatten`` of a view is a view (:func:`view_strides`, torch's
``computeStride``) and whether ``contiguous()`` returns the tensor itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any
from weakref import ref

import numpy as np

from ..autodiff.grad_mode import is_grad_enabled, no_grad, recording
from ..backend.sizes import ITEMSIZE
from ..context import captured_writes
from ..effects import WRITES
from ..errors import (
    AutodiffError,
    MemoryLayoutError,
    PartialOverlapError,
    ShapeError,
    shape_text,
)
from ._dispatch import TensorBase, from_host, host_constant, lift, untracked
from .inference import mark_inference
from .links import WeakBase, base_of
from .strides import (
    contiguous_strides,
    copy_order,
    is_contiguous,
    non_overlapping,
    non_overlapping_and_dense,
    overlapping_view_strides,
    storage_offset_of,
    strides_of,
    view_strides,
)

__all__ = [
    "BASE",
    "FILLS",
    "KIND",
    "PARAMS",
    "Link",
    "as_strided_input_positions",
    "as_strided_of",
    "as_strided_positions",
    "base_of",
    "complex_view_of",
    "contiguous_strides",
    "detached_view",
    "diagonal_assign",
    "diagonal_of",
    "is_contiguous",
    "keep_former_key",
    "link",
    "move_views",
    "outside_graph",
    "positions_in_root",
    "refuse_backward",
    "refuse_gradient_through_overlap",
    "refuse_internal_overlap",
    "refuse_multi_output_view",
    "refuse_no_grad_view",
    "refuse_partial_overlap",
    "refuse_rebased_no_grad_view",
    "remember_leaf",
    "strides_of",
    "unlink",
    "view_strides",
    "write",
    "written_positions",
]

#: View kinds written back outside the graph.
_DETACHED = ("data", "detach")
#: ... and with ``view(dtype)``'s (not differentiable, as torch's: a write through it reaches
#: its base, a leaf that requires grad too, as a write through ``.data`` would)
_OUTSIDE = (*_DETACHED, "bitcast")


#: A view's link, ``(base, kind, params)``: how it was taken from its base. A plain tuple:
#: making one is most of what a view op pays; whether the view is recorded in the graph is
#: read from the view itself when it is recomputed.
Link = tuple
BASE, KIND, PARAMS = 0, 1, 2


def link(view: Any, base: Any, kind: str, params: tuple = ()) -> Any:
    """Record ``view`` as taken from ``base`` by ``kind``; returns ``view``. A view taken
    under ``no_grad``, or from such a view, is marked (``_no_grad_view``): torch refuses its
    in-place writes that would be recorded (:func:`refuse_no_grad_view`)."""
    if base.__dict__.get("_rebased_no_grad_view") and is_grad_enabled() and kind not in _OUTSIDE:
        # (torch reads the base's grad_fn to record the view: it refuses)
        refuse_rebased_no_grad_view(kind, base)
    view._view = (_held(base, kind), kind, params)
    if view._inference is not base._inference:
        # a view of an inference tensor is one, wherever it is taken, and a view of an
        # ordinary tensor is ordinary, inside inference_mode() too
        mark_inference(view, base._inference)
    if kind not in _OUTSIDE and base._multi_output_view is not None:
        view._multi_output_view = base._multi_output_view
    if kind not in _OUTSIDE and (getattr(base, "_no_grad_view", False) or not is_grad_enabled()):
        view._no_grad_view = True
        backend = view._backend
        if (
            backend.is_autodiff
            and not base._inference
            and backend.is_tracked(base._prim)
            and not backend.is_tracked(view._prim)
        ):
            # torch's view of a tensor that requires grad, taken under no_grad: it requires
            # grad too, a leaf of its own (a graph built on it later reaches the view only);
            # but not a view of an inference tensor (one made with requires_grad=True in
            # inference_mode), which never requires grad: that view was made to (round 93)
            view._prim = backend.require_grad(view._prim)
    views = getattr(base, "_views", None)
    if views is None:
        base._views = [ref(view)]
        return view
    views.append(ref(view))
    count = len(views)
    if count >= 8 and count & (count - 1) == 0:  # at powers of two: drop the dead ones
        views[:] = [r for r in views if r() is not None]
    return view


def _held(base: Any, kind: str) -> Any:
    """How a view of ``kind`` holds ``base``: strongly, but for ``detach()`` and ``.data`` of
    a tensor computed in the graph, weakly. Through a strong link a detached tensor kept its
    base's whole graph alive, saved activations included, for as long as it lived
    (``preds.append(model(x).detach())`` in a loop without ``no_grad``: each batch's
    activations; ``(p - lr * g).detach()``: the old parameters), where torch's keeps only the
    storage. When such a base goes, its detached views that live on share the first of them
    as their base (:func:`_orphaned`), as torch's share the storage."""
    if kind not in _DETACHED:
        return base
    backend = base._backend
    if not (backend.is_autodiff and backend.is_tracked(base._prim)):
        return base
    held = base._weak_base
    if held is None:
        if getattr(base, "_views", None) is None:
            base._views = []
        held = base._weak_base = WeakBase(base, _orphaned(base._views))
    return held


def detached_view(t: Any, make: Any) -> Any | None:
    """``.data``/``detach()`` of ``t``, a view computed in the graph, as a chain of views that
    reaches ``t``'s root: the root's values outside the graph (a ``data`` link), then ``t``'s
    views of it taken again (untracked), ``make(primitive)`` making each tensor. ``None``
    where ``t`` is no such view.

    A detached tensor holds a base computed in the graph weakly (:func:`_held`); linked to
    ``t`` itself, it lost its way to the root as soon as ``t`` went (``w[:, 0].data.fill_(0)``:
    the temporary ``w[:, 0]`` goes at once, and the write reached nothing), where torch's
    shares the root's storage."""
    backend = t._backend
    if not (backend.is_autodiff and backend.is_tracked(t._prim)):
        return None
    chain = []
    node = t
    while True:
        view = getattr(node, "_view", None)
        if view is None or view[KIND] in _OUTSIDE:
            break
        base = base_of(view)
        if base is None:
            break
        chain.append((view[KIND], view[PARAMS]))
        node = base
    if not chain:
        return None
    out = link(make(backend.wrap(backend.inner_value(node._prim))), node, "data")
    for kind, params in reversed(chain):
        out = link(make(_forward(out, kind, params)._prim), out, kind, params)
    return out


def _orphaned(views: list) -> Any:
    """The callback of a weakly held base whose live views are ``views``: its detached views
    that live on become one root and its views."""

    def relink(gone: Any) -> None:
        survivors = []
        for r in views:
            child = r()
            view = None if child is None else getattr(child, "_view", None)
            if view is not None and view[BASE] is gone:
                survivors.append((child, view[KIND], view[PARAMS]))
        if not survivors:
            return
        root = survivors[0][0]
        root._view = None
        for child, kind, params in survivors[1:]:
            link(child, root, kind, params)

    return relink


def move_views(source: Any, target: Any) -> None:
    """Make ``target`` the base of ``source``'s live views (each taken as it was)."""
    views, source._views = source._views or (), None
    for r in views:
        view = r()
        if view is not None and view._view is not None:
            link(view, target, view._view[KIND], view._view[PARAMS])


def unlink(t: Any) -> None:
    """Cut ``t`` from its base and its views from it (``t.data = x`` gives ``t`` new storage:
    torch's old views keep aliasing the old one)."""
    view = getattr(t, "_view", None)
    if view is not None:
        t._view = None
    if getattr(t, "_layout", None) is not None:  # new storage: row-major
        t._layout = None
    for r in getattr(t, "_views", None) or ():
        child = r()
        if child is not None and getattr(child, "_view", None) is not None:
            child._view = None
    t._views = []


def outside_graph(t: Any) -> bool:
    """Whether ``t`` is reached from its root through ``.data``, ``detach()`` or
    ``view(dtype)``."""
    view = getattr(t, "_view", None)
    while view is not None:
        if view[KIND] in _OUTSIDE:
            return True
        view = getattr(base_of(view), "_view", None)
    return False


def refuse_no_grad_view(op: str, t: Any, value: Any) -> None:
    """torch's refusal of an in-place write, with grad on, through a view taken under
    ``no_grad`` (``t``) where the write would be recorded: its base requires grad, or the new
    ``value`` does (whether the write should reach the graph is ambiguous)."""
    if not (t._no_grad_view and is_grad_enabled()):
        return
    backend = t._backend
    root = root_of(t)
    if backend.is_tracked(root._prim) or backend.is_tracked(value._prim):
        raise AutodiffError(
            f"{op}: a view was created in no_grad mode and is being modified in place with "
            "grad mode enabled (shape "
            f"{shape_text(t.shape)}); as in torch, take both the view and the in-place op "
            "inside the no_grad block, or both outside"
        )


#: torch's refusal of a view taken under ``no_grad`` once its memory was written in place
_REBASED_NO_GRAD_VIEW = (
    "a view was created in no_grad mode and its base or another view of its base has been "
    "modified in place (shape {shape}); as in torch, this use case is ambiguous and "
    "forbidden: take both the view and the in-place op inside the no_grad block (the "
    "write not recorded), or both outside (recorded), or use .detach() of the view"
)


def _rebase_no_grad_view(view: Any, leaf: bool = True) -> None:
    """Mark ``view``, taken under ``no_grad`` from a tensor that requires grad (a leaf of its
    own here, as torch's), after an in-place write into its memory through it, its base or
    another of its views (not through ``.data``): torch then refuses to give its ``grad_fn``
    or ``is_leaf`` and any op recorded on it, where this read ``None``, ``True`` and
    differentiated it as a leaf (round 94). Its ``grad_fn`` and ``is_leaf`` refuse here
    (:func:`refuse_rebased_no_grad_view`), and a backward that reaches it raises (torch
    raises when the op is recorded). A ``leaf``'s hook goes once: the leaves later writes
    make it share its hooks; a view of such a view, computed in the graph, takes one on each
    node a write recomputes it as (the old node goes with its graph)."""
    if leaf and view.__dict__.get("_rebased_no_grad_view"):
        return
    view._rebased_no_grad_view = True
    message = _REBASED_NO_GRAD_VIEW.format(shape=shape_text(view.shape))

    def refuse(_backend: Any, _gradient: Any) -> Any:
        raise AutodiffError(f"backward: {message}")

    view._backend.register_hook(view._prim, refuse)


def refuse_rebased_no_grad_view(op: str, t: Any) -> None:
    """torch's refusal to read ``grad_fn`` or ``is_leaf`` of a view taken under ``no_grad``
    whose memory was then written in place (:func:`_rebase_no_grad_view`)."""
    if t.__dict__.get("_rebased_no_grad_view"):
        raise AutodiffError(f"{op}: " + _REBASED_NO_GRAD_VIEW.format(shape=shape_text(t.shape)))


def refuse_multi_output_view(op: str, t: Any) -> None:
    """torch's refusal of an in-place op, with grad on, on an output of ``split``/``chunk``/
    ``unbind`` (or a view of one) taken with grad on from a tensor that requires grad
    (``_multi_output_view``): such an op's outputs share one backward node, which a write
    into one of them cannot be recorded on. A write through ``detach()``/``.data``, or under
    ``no_grad``, is taken."""
    made = t._multi_output_view
    if made is None or not is_grad_enabled() or outside_graph(t):
        return
    number, name = made
    raise AutodiffError(
        f"{op}: output {number} of {name} is a view (shape {shape_text(t.shape)}) and is being "
        "modified in place. This view is the output of a function that returns multiple "
        "views (split, chunk, unbind). Such functions do not allow the output views to be "
        "modified in place with grad on, as in torch: use the out-of-place op, clone() the "
        "piece, or write under rg.no_grad()"
    )


def root_of(t: Any) -> Any:
    view = getattr(t, "_view", None)
    while view is not None:
        base = base_of(view)
        if base is None:
            return t
        t = base
        view = getattr(t, "_view", None)
    return t


def refuse_partial_overlap(op: str, target: Any, *operands: Any, full: bool = False) -> None:
    """Refuse, as torch does, an in-place write into ``target`` whose tensor ``operands`` are
    views of the same storage overlapping it in part (``x[1:] += x[:-1]``, ``x[1:] = x[:-1]``,
    ``x.add_(x[0])``): torch would read elements it has already written. torch's rule
    (``get_overlap_status``): only where both tensors are non-overlapping and dense (a
    permutation of contiguous) is the overlap decided, from the storage ranges they span; the
    same range with the same strides is the same tensor (refused too with ``full``, as
    ``index_put_`` refuses it). Elsewhere torch writes without checking, and retrograd writes
    the operands' values as they were before the write."""
    target_view = getattr(target, "_view", None)
    for other in operands:
        if other is target or not isinstance(other, TensorBase):
            continue
        other_view = getattr(other, "_view", None)
        if target_view is None and other_view is None:
            continue  # two roots: two storages
        if root_of(target) is root_of(other) and _overlap(target, other, full):
            raise PartialOverlapError(
                f"{op}: unsupported operation: some elements of the input tensor and the "
                "written-to tensor refer to a single memory location (a view of "
                f"{shape_text(other.shape)} overlapping the {shape_text(target.shape)} "
                "tensor written to, in part); clone() it before the operation, as in torch"
            )


def _overlap(a: Any, b: Any, full: bool) -> bool:
    """Whether torch's ``get_overlap_status`` of two views of one storage says Partial (or
    Full, with ``full``)."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    strides_a, strides_b = strides_of(a), strides_of(b)
    if not (
        non_overlapping_and_dense(a.shape, strides_a)
        and non_overlapping_and_dense(b.shape, strides_b)
    ):
        return False  # torch's "too hard": not checked
    # (in bytes: a view(dtype) counts its offset in its own elements)
    begin_a = storage_offset_of(a) * ITEMSIZE[a.dtype]
    begin_b = storage_offset_of(b) * ITEMSIZE[b.dtype]
    end_a = begin_a + a.numel() * ITEMSIZE[a.dtype]
    end_b = begin_b + b.numel() * ITEMSIZE[b.dtype]
    if begin_a == end_a or begin_b == end_b:
        return False
    if begin_a == begin_b and end_a == end_b:
        same = tuple(a.shape) == tuple(b.shape) and strides_a == strides_b
        return full or not same
    return begin_a < end_b and begin_b < end_a


# -- the forward of each kind (recomputing a view from its base) -------------------------------
def _forward(base: Any, kind: str, params: tuple) -> Any:
    if kind == "reshape":  # (params[1], where present, says how a squeeze set its strides)
        return base._apply("reshape", (base,), params[:1])
    if kind == "permute":
        return base._apply("permute", (base,), params)
    if kind == "index":
        slices, out_shape = params[0], params[1]
        out = base._apply("slice", (base,), (slices,)) if slices is not None else base
        return out if out.shape == out_shape else out._apply("reshape", (out,), (out_shape,))
    if kind == "expand":
        return base._apply("expand", (base,), params)
    if kind == "unfold":
        return base._apply("unfold", (base,), params)
    if kind == "diagonal":
        return diagonal_of(base, params)
    if kind == "as_strided":
        return as_strided_of(base, params)
    if kind == "bitcast":
        return base._apply("bitcast", (base,), params)
    if kind in _COMPLEX_VIEWS:
        return complex_view_of(base, kind)
    if kind == "data":
        backend = base._backend
        if not backend.is_autodiff:
            return type(base)._result(base._prim, backend, base._device)
        prim = backend.wrap(backend.inner_value(base._prim))
        return type(base)._result(prim, backend, base._device)
    if kind == "detach":
        backend = base._backend
        prim = backend.detach(base._prim) if backend.is_autodiff else base._prim
        return type(base)._result(prim, backend, base._device)
    raise AssertionError(f"unknown view kind {kind!r}")


def _scatter_back(
    op: str, base: Any, kind: str, params: tuple, value: Any, written: Any = None
) -> Any:
    """``base``'s new value when its view of ``kind`` takes ``value`` (``written``: the
    positions of the view a fill wrote, where :func:`written_positions` knows them)."""
    if kind == "reshape":
        return value._apply("reshape", (value,), (base.shape,))
    if kind == "permute":
        order = params[0]
        inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
        return value._apply("permute", (value,), (inverse,))
    if kind == "index":
        slices, _, region = params[:3]
        if slices is None:
            return value._apply("reshape", (value,), (base.shape,))
        values = value if value.shape == region else value._apply("reshape", (value,), (region,))
        return base._apply("slice_assign", (base, values), (slices,))
    if kind in _DETACHED:
        return value
    if kind == "bitcast":  # (the bytes read back as the base's dtype, in its shape)
        return value._apply("bitcast", (value,), (base.dtype,))
    if kind == "diagonal":
        return diagonal_assign(base, params, value)
    if kind in _COMPLEX_VIEWS:
        return _complex_view_assign(base, kind, value)
    if kind == "unfold" and (params[2] >= params[1] or value.shape[params[0]] <= 1):
        return unfold_assign(base, params, value)
    if kind == "as_strided":
        assigned = as_strided_assign(base, params, value)
        if assigned is not None:
            return assigned
    if kind == "expand" or (op in FILLS and kind in ("unfold", "as_strided")):
        # (an update or copy_ into a tensor with a 0 stride was refused before it started:
        # refuse_internal_overlap; what reaches an expand here writes each element once)
        return _write_through_overlap(base, kind, params, value, written)
    what = {
        "expand": "an expanded tensor",
        "as_strided": "an as_strided view whose strides overlap",
    }.get(kind, "overlapping windows of unfold")
    raise MemoryLayoutError(
        f"{op}: unsupported operation: more than one element of the written-to tensor refers "
        f"to a single memory location ({what}); clone() it before writing, as in torch"
    )


#: the writes torch makes into a tensor whose elements share memory (an expanded tensor,
#: overlapping unfold windows or as_strided positions) without refusing them: each element
#: written takes a value that does not depend on what it held (torch checks the overlap in
#: the arithmetic updates and copy_ only), so the memory an element shares takes it
FILLS = ("fill_", "zero_", "fill_diagonal_", "masked_fill_", "index_fill_", "index_put_")


def refuse_internal_overlap(op: str, t: Any) -> None:
    """torch's ``assert_no_internal_overlap`` before an update or a copy into ``t``: refused
    where a dimension of more than one element has stride 0 (an expanded tensor, or a view of
    one that keeps an expanded dimension); a view of an expanded tensor that takes each
    element once (``x.expand(3, 3).diagonal()``, ``x.expand(2, n)[1]``) is written."""
    if t.numel() == 0:
        return  # (nothing written; torch's empty tensor is non-overlapping and dense)
    if any(n > 1 and step == 0 for n, step in zip(t.shape, strides_of(t))):
        raise MemoryLayoutError(
            f"{op}: unsupported operation: more than one element of the written-to tensor "
            f"refers to a single memory location (an expanded tensor of shape "
            f"{shape_text(t.shape)}, strides {list(strides_of(t))}); clone() it before "
            "writing, as in torch"
        )


def refuse_gradient_through_overlap(op: str, t: Any) -> None:
    """After a fill (one of :data:`FILLS`) recorded in the graph into ``t``, a tensor with
    an expanded dimension (a stride of 0 over more than one element): torch takes the write,
    but its backward writes the gradient back through the same view and refuses there ("more
    than one element of the written-to tensor refers to a single memory location"). The
    written root takes a gradient hook that raises that error when a backward reaches it, so
    a program runs, and fails, where torch's does; a view of such a tensor that takes each
    element once (``x.expand(2, n)[1]``, and the diagonal ``fill_diagonal_`` writes) is
    differentiated as any write."""
    if getattr(t, "_view", None) is None or op == "fill_diagonal_":
        return  # (a root's elements are its own: nothing shares memory)
    if t.numel() == 0:
        return  # (no element written, no gradient written back: torch's backward runs)
    if not (is_grad_enabled() and t._backend.is_autodiff):
        return
    strides = strides_of(t)
    if not any(n > 1 and s == 0 for n, s in zip(t.shape, strides)):
        return
    root = root_of(t)
    refuse_backward(
        root,
        f"{op}: unsupported operation in backward: more than one element of the written-to "
        f"tensor refers to a single memory location (a write into an expanded tensor of shape "
        f"{shape_text(t.shape)}, strides {list(strides)}, recorded in the graph); clone() it "
        "before writing, as in torch",
        MemoryLayoutError,
    )


def refuse_backward(t: Any, message: str, error: type[Exception] = ShapeError) -> None:
    """A gradient hook on ``t`` (when it is in the graph) that raises ``error(message)`` when
    a backward reaches it: a program runs, and fails, where torch's does."""
    backend = t._backend
    if not (is_grad_enabled() and backend.is_autodiff and backend.is_tracked(t._prim)):
        return

    def refuse(_backend: Any, _gradient: Any) -> Any:
        raise error(message)

    backend.register_hook(t._prim, refuse)


def _write_through_overlap(
    base: Any, kind: str, params: tuple, value: Any, written: Any = None
) -> Any:
    """``base``'s new value when ``value``, its view of ``kind``, holds some elements of
    ``base`` more than once and a write (one of :data:`FILLS`, or one that takes each
    element once) changed it: each element of ``base`` takes the value of a position of the
    view that the write wrote (the last, in the view's row-major order, as torch's CPU loop
    writes them), and keeps its own where none did. The positions written are those whose
    value changed, and ``written`` (a bool tensor of the view's shape) where a fill in the
    graph told them: a position that took the value it held already is written too, so its
    gradient goes to the fill's value, once per position, as torch's backward gathers it
    through the overlapping view; and where a location's last position in the view is not
    written but an earlier one is, its old value keeps its gradient too, as torch's backward
    copies the gradient back position by position (:func:`_gradient_kept`)."""
    count = math.prod(base.shape)
    where = _positions_in(base, kind, params)
    old = _forward(base, kind, params)
    with no_grad():
        new, before = untracked(value), untracked(old)
        changed = new.ne(before)
        if new.is_floating_point() or new.is_complex():
            changed = changed.logical_and(new.isnan().logical_and(before.isnan()).logical_not())
        if written is not None:
            changed = changed.logical_or(written)
    flat = base._apply("reshape", (base,), ((count,),))
    new_flat = flat.index_put((where[changed],), value[changed].to(base.dtype))
    if written is not None:
        order = copy_order(value.shape, _overlapping_strides(base, kind, params))
        kept = _gradient_kept(where, changed, count, order)
        if kept is not None:
            mask = host_constant(type(base)._result, kept, base._backend, base._device)
            both = flat._apply("overwrite_sharing_gradient", (flat, new_flat))
            new_flat = new_flat._apply("mask_where", (new_flat, mask, both))
    return new_flat._apply("reshape", (new_flat,), (base.shape,))


def _overlapping_strides(base: Any, kind: str, params: tuple) -> tuple[int, ...]:
    """The strides torch gives ``base``'s view of ``kind`` (``"expand"``, ``"unfold"`` or
    ``"as_strided"``), as :func:`~.strides.strides_of` derives them."""
    return overlapping_view_strides(base.shape, strides_of(base), kind, params)


def _gradient_kept(where: Any, written: Any, count: int, order: np.ndarray) -> np.ndarray | None:
    """The elements (of ``count``, flattened) that a write through the view whose positions
    lie at ``where`` wrote at some position but not at the last one holding them, in torch's
    ``order`` of copying into the view (:func:`~.strides.copy_order`); ``None`` where there
    are none. torch's backward copies the fill's gradient back through the view position by
    position in that order, the last one winning: such an element's old value keeps its
    gradient, though its forward value was overwritten."""
    at = untracked(where).numpy().reshape(-1)
    wrote = untracked(written).numpy().reshape(-1)
    steps = order.reshape(-1)
    last_step = np.full(count, -1, np.int64)
    np.maximum.at(last_step, at, steps)
    last = np.full(count, -1, np.int64)
    touched_at = last_step[at] == steps  # each element's last position
    last[at[touched_at]] = np.flatnonzero(touched_at)
    some = np.zeros(count, bool)
    some[at[wrote]] = True
    touched = last >= 0
    kept = some & touched
    kept[touched] &= ~wrote[last[touched]]
    return kept if kept.any() else None


def _positions_in(base: Any, kind: str, params: tuple) -> Any:
    """For each element of ``base``'s view of ``kind``, its position in ``base`` flattened."""
    positions = np.arange(math.prod(base.shape), dtype=np.int64).reshape(base.shape)
    index = host_constant(type(base)._result, positions, base._backend, base._device)
    return _forward(index, kind, params)


#: the view kinds whose elements are elements of the base (:func:`_positions_in` maps them)
_LOCATED = ("reshape", "permute", "index", "expand", "unfold", "diagonal", "as_strided")


def written_positions(t: Any, compute: Any) -> Any:
    """The positions of ``t`` a fill ``compute`` (``t``'s new value as a function of its
    old one) writes, as a bool tensor of ``t``'s shape, where that is needed: a fill in the
    graph into a float tensor that a view with overlapping elements (unfold windows,
    as_strided) lies between ``t`` and its root; ``None`` elsewhere. Found by filling two
    probes, one of NaN (a position written holds a number after, or NaN where the fill's
    value is NaN) and one of zeros (NaN after only where the value is NaN and written)."""
    floating = t.is_floating_point() or t.is_complex()
    if not (floating and is_grad_enabled() and t._backend.is_autodiff):
        return None
    if not _through_overlap(t) or _written_at_root(t):
        return None  # (written in one scatter, which needs no positions)
    make, backend, device = type(t)._result, t._backend, t._device
    with no_grad():
        nans = host_constant(make, np.full(t.shape, np.nan), backend, device).to(t.dtype)
        zeros = host_constant(make, np.zeros(t.shape), backend, device).to(t.dtype)
        return compute(nans).isnan().logical_not().logical_or(compute(zeros).isnan())


def positions_in_root(t: Any, through_expand: bool = False) -> tuple[Any, Any] | None:
    """``t``'s root and, for each element of ``t``, its position in the root flattened, where
    a view whose elements overlap (unfold windows, as_strided positions; an ``expand`` too
    with ``through_expand``) lies between them and every view of the chain maps elements to
    elements; ``None`` elsewhere."""
    overlaps = ("unfold", "as_strided", "expand") if through_expand else ("unfold", "as_strided")
    chain, overlapping, view = [], False, getattr(t, "_view", None)
    while view is not None:
        if view[KIND] not in _LOCATED:
            return None
        overlapping = overlapping or view[KIND] in overlaps
        chain.append((view[KIND], view[PARAMS]))
        t = base_of(view)
        view = getattr(t, "_view", None)
    if not overlapping:
        return None
    positions = np.arange(math.prod(t.shape), dtype=np.int64).reshape(t.shape)
    index = host_constant(type(t)._result, positions, t._backend, t._device)
    for kind, params in reversed(chain):
        index = _forward(index, kind, params)
    return t, index


def _written_in_base(base: Any, kind: str, params: tuple, written: Any) -> Any:
    """``written`` (positions of ``base``'s view of ``kind``) as positions of ``base``: an
    element is written where any of the view's positions holding it is; ``None`` where the
    view's elements are not ``base``'s (complex parts, bit casts)."""
    if written is None or kind not in _LOCATED:
        return None
    count = math.prod(base.shape)
    with no_grad():
        where = _positions_in(base, kind, params)
        flat = host_constant(
            type(base)._result, np.zeros(count, dtype=bool), base._backend, base._device
        )
        true = host_constant(type(base)._result, np.ones((), bool), base._backend, base._device)
        flat = flat.index_put((where[written],), true)
        return flat.reshape(base.shape)


# -- complex parts (views torch takes by reinterpreting the storage as real numbers) --------------
#: ``z.real``, ``z.imag``, ``view_as_real(z)`` (the parts in a last dimension of 2) and
#: ``view_as_complex(x)``
_COMPLEX_VIEWS = ("real", "imag", "view_as_real", "view_as_complex")


def _last_part(t: Any, k: int) -> Any:
    """``t[..., k]`` of a last dimension of 2, as plain ops (no view recorded)."""
    slices = (slice(None),) * (t.ndim - 1) + (slice(k, k + 1, 1),)
    part = t._apply("slice", (t,), (slices,))
    return part._apply("reshape", (part,), (t.shape[:-1],))


def complex_view_of(base: Any, kind: str) -> Any:
    """The values of ``base``'s view of ``kind`` (one of :data:`_COMPLEX_VIEWS`)."""
    if kind in ("real", "imag"):
        return base._apply(kind, (base,))
    if kind == "view_as_complex":
        real, imag = _last_part(base, 0), _last_part(base, 1)
        return real._apply("complex", (real, imag))
    return _paired(base._apply("real", (base,)), base._apply("imag", (base,)))


def _paired(real: Any, imag: Any) -> Any:
    """``real`` and ``imag`` side by side in a last dimension of size 2 (``stack(..., -1)``,
    written with the ops this module reads, as shape's ``stack`` imports this module)."""
    pair = real.unsqueeze(-1).expand(*real.shape, 2)
    return pair.slice_scatter(imag.unsqueeze(-1), dim=-1, start=1, end=2)


def _complex_view_assign(base: Any, kind: str, value: Any) -> Any:
    """``base``'s new value when its complex-part view of ``kind`` takes ``value``."""
    if kind == "real":
        return value._apply("complex", (value, base._apply("imag", (base,))))
    if kind == "imag":
        real = base._apply("real", (base,))
        return real._apply("complex", (real, value))
    if kind == "view_as_real":
        real, imag = _last_part(value, 0), _last_part(value, 1)
        return real._apply("complex", (real, imag))
    return _paired(value._apply("real", (value,)), value._apply("imag", (value,)))


# -- writing ---------------------------------------------------------------------------------------
def detached_values(t: Any) -> Any:
    """``t`` as a write through ``.data``/``detach()`` reads it: torch's detached tensor does
    not require grad, so its values are untracked (Burn's ``detach()`` of a leaf is a leaf
    that requires grad, and a view of it is computed from it), unless an earlier recorded
    write (:func:`write` with ``recorded``) put the detached tensor into the graph: then its
    value, with that graph."""
    view = getattr(t, "_view", None)
    while view is not None and view[KIND] not in _DETACHED:
        view = getattr(base_of(view), "_view", None)
    detached = t if view is None else _detached_of(t)
    backend = t._backend
    prim = detached._prim
    if backend.is_autodiff and backend.is_tracked(prim) and not backend.is_require_grad(prim):
        return t
    return untracked(t)


def _detached_of(t: Any) -> Any:
    """The tensor on ``t``'s chain of views made by ``.data``/``detach()`` (``t`` itself or a
    base of it)."""
    while t._view[KIND] not in _DETACHED:
        t = base_of(t._view)
    return t


def write(
    op: str,
    t: Any,
    value: Any,
    outside: bool,
    fresh: bool = False,
    recorded: bool = False,
    written: Any = None,
) -> None:
    """Make ``t`` hold ``value`` (its shape and dtype), through its bases up to the root,
    then recompute every live view of what changed. ``outside``: a write through
    ``.data``/``detach()``, recorded nowhere. ``fresh``: ``value`` does not depend on ``t``'s
    old value (``copy_``). ``recorded``: a write through ``.data``/``detach()`` of a value
    computed in the graph (``d.copy_(y)``, ``d.mul_(y)`` with ``y`` requiring grad): as in
    torch, the detached tensor and its views below it take the value in the graph (they
    require grad from then on), the tensor it was detached from takes the values only."""
    view = getattr(t, "_view", None)
    base = None if view is None else base_of(view)
    if base is None:  # a root, or a detached tensor whose base is gone: a root now
        if view is not None:
            t._view = None
        _set_root(op, t, value, outside, fresh)
        refresh(t, regenerated=not outside)
        return
    kind = view[KIND]
    backend = t._backend
    if (
        t.numel() == 0
        and not recorded
        and not (backend.is_autodiff and backend.is_tracked(value._prim))
    ):
        # no element written: the base keeps its value, whatever the view's elements share
        # (torch's write is a no-op; written back, an overlapping view would be refused), and
        # the view its place in the graph; a value in the graph is written back as any write
        # (torch's base takes the graph: it requires grad from then on)
        return
    if recorded:
        # t is the detached tensor, or a view(dtype) (not differentiable either: torch's
        # records the write on the view, its base takes the values only): the graph stops here
        if kind in _OUTSIDE:
            with no_grad():
                new_base = _scatter_back(op, base, kind, view[PARAMS], untracked(value))
            write(op, base, new_base, True, fresh)
            WRITES.note()
            t._prim = value._prim
            refresh(t)
            return
        new_base = _scatter_back(op, detached_values(base), kind, view[PARAMS], value)
        whole = kind in ("reshape", "permute") or (kind == "index" and view[PARAMS][0] is None)
        write(op, base, new_base, outside, fresh and whole, recorded=True)
        return
    at_root = _distinct_in_root(t)
    if at_root is not None:
        root, positions = at_root
        with no_grad() if outside else nullcontext():
            flat = root.reshape(math.prod(root.shape))
            new_root = flat.index_put((positions.reshape(-1),), value.reshape(-1))
            new_root = new_root.reshape(root.shape)
        write(op, root, new_root, outside, False)
        return
    outside = outside or kind in _OUTSIDE
    through = _through_expand(base, kind, view[PARAMS], value)
    if through is not None:  # a slice of an expanded tensor taking each element once
        write(op, through[0], through[1], outside, False)
        return
    if kind in _DETACHED:
        new_base = value  # (_scatter_back's: the whole base, no op to run)
    elif outside:
        with no_grad():
            new_base = _scatter_back(op, base, kind, view[PARAMS], value)
    else:
        new_base = _scatter_back(op, base, kind, view[PARAMS], value, written)
        written = _written_in_base(base, kind, view[PARAMS], written)
    # (a view of the whole base: its new value does not depend on the old one either)
    whole = kind in ("reshape", "permute") or (kind == "index" and view[PARAMS][0] is None)
    write(op, base, new_base, outside, fresh and whole, written=written)


def _distinct_in_root(t: Any) -> tuple[Any, Any] | None:
    """``t``'s root and the position in it (flattened) of each of ``t``'s elements, where a
    view whose elements overlap (unfold windows, as_strided positions) lies between them but
    ``t`` itself takes each location once (``x.unfold(0, 2, 1)[::2]``): torch writes through
    such a view as through any other, by its own strides into the root, so its write goes
    there in one step, and the root's old values at every position written get no gradient.
    Written link by link instead, the overlapping link would keep the gradient of positions
    its windows share (:func:`_write_through_overlap`). ``None`` elsewhere."""
    return positions_in_root(t) if _written_at_root(t) else None


def _through_overlap(t: Any) -> bool:
    """Whether a view whose elements overlap (unfold windows, as_strided positions) lies
    between ``t`` and its root."""
    view = getattr(t, "_view", None)
    while view is not None and view[KIND] not in ("unfold", "as_strided"):
        view = getattr(base_of(view), "_view", None)
    return view is not None


def _written_at_root(t: Any) -> bool:
    """Whether a write into ``t`` goes to its root in one scatter (:func:`_distinct_in_root`):
    an overlapping view lies on the chain, every link maps elements to elements, and ``t``
    takes each location once."""
    if not _through_overlap(t):
        return False  # (most writes: checked first)
    view = getattr(t, "_view", None)
    while view is not None and view[KIND] in _LOCATED:
        view = getattr(base_of(view), "_view", None)
    return view is None and non_overlapping(t.shape, strides_of(t))


def _through_expand(base: Any, kind: str, params: tuple, value: Any) -> tuple[Any, Any] | None:
    """A write of ``value`` through a slice (``kind`` "index", ``params`` its) of ``base``, an
    expanded tensor, that takes at most one copy of each element (at most one position along
    every expanded dimension: ``x.expand(2, n)[1]``): the expand's own base and its new
    value, as torch writes through such a slice; ``None`` otherwise (the expand's write-back
    refuses it)."""
    outer = getattr(base, "_view", None)
    if kind != "index" or outer is None or outer[KIND] != "expand" or params[0] is None:
        return None
    source = base_of(outer)
    slices, region = params[0], params[2]
    if math.prod(region) == 0:  # no element written (torch's write is a no-op)
        return source, source
    lead = len(base.shape) - len(source.shape)
    inner: list[slice] = []
    # (the slices may stop before the last dimensions, taken whole: expanded ones too)
    slices = (*slices, *(slice(None),) * (len(region) - len(slices)))
    for d, (piece, size) in enumerate(zip(slices, region)):
        expanded = d < lead or (source.shape[d - lead] == 1 and base.shape[d] != 1)
        if expanded and size > 1:
            return None
        if d >= lead:
            inner.append(slice(0, size, 1) if expanded else piece)
    values = value._apply("reshape", (value,), (region,)) if value.shape != region else value
    kept = tuple(n for d, n in enumerate(region) if d >= lead)
    if values.shape != kept:
        values = values._apply("reshape", (values,), (kept,))
    return source, source._apply("slice_assign", (source, values), (tuple(inner),))


def _set_root(op: str, t: Any, value: Any, outside: bool, fresh: bool) -> None:
    backend = t._backend
    prim = value._prim
    WRITES.note()
    writes = captured_writes.get()
    if writes is not None:
        writes.append((t, t._prim))
    if backend.is_autodiff:
        old = t._prim
        if backend.is_require_grad(old):  # a leaf: a new value, still a leaf (assign's rule)
            remember_leaf(t, old)
            prim = backend.succeed_leaf(old, backend.wrap(backend.inner_value(prim)))
        elif (outside or not is_grad_enabled()) and backend.is_tracked(old):
            # (under no_grad torch changes the values and keeps the tensor in its graph, the
            # write unseen by backward: as a write through .data)
            prim = _through_data(t, old, value)
        elif (
            is_grad_enabled()
            and backend.is_tracked(old)
            and (fresh or not backend.is_tracked(prim))
        ):
            prim = _overwritten(t, old, prim)
        if is_grad_enabled() and not outside:  # (a recorded write: a new grad_fn in torch)
            _carry_retain(backend.gradient_node(old), prim)
    t._prim = prim
    sink = getattr(t, "_grad_sink", None)
    if sink is not None:  # a gradient read from a Gradients (Tensor.grad): written back there
        grads, key = sink
        grads.replace(key, prim)


def _carry_retain(old_node: Any, new: Any) -> None:
    """``old_node``: the node holding the written tensor's gradient (``gradient_node``).
    ``retain_grad()`` of a tensor computed in the graph follows it through an in-place
    write: its gradient is then the new value's, as torch moves the retaining hook to the
    tensor's new ``grad_fn`` (its tensor hooks stay with the old value, as torch's)."""
    new_node = getattr(new, "node", None)
    if (
        old_node is not None
        and old_node.op is not None
        and old_node.retain is True
        and new_node is not None
        and new_node is not old_node
        and new_node.op is not None
    ):
        new_node.retain = True
        old_node.retain = False


def remember_leaf(t: Any, old: Any) -> None:
    """Before a write makes the leaf ``t`` a fresh leaf (its old node keeps the values the
    graph recorded), remember the old leaf's gradient key: ``t.grad(grads)`` of a graph
    recorded before the write still finds its gradient, as torch's ``.grad`` would, however
    many writes came between (a row-by-row update writes once a row). Keys no graph and no
    ``Gradients`` can hold any more are forgotten here, so a training loop's tensors keep
    only the few a live graph or gradient set still has."""
    retired = t._backend.retired_leaf(old)
    if retired is not None:
        keep_former_key(t, retired)


def keep_former_key(t: Any, retired: Any) -> None:
    """Add the retired leaf key ``retired`` to ``t``'s former keys, dropping those no graph
    and no ``Gradients`` can hold any more, and an earlier one of the same key: a write an
    interrupt stopped after this step, before the tensor took its fresh leaf, is written
    again on the same old leaf."""
    key = retired.key
    t._former_keys = (
        retired,
        *(former for former in t._former_keys if former.key != key and former()),
    )


#: ``show_as(node, old)``: make the node of a write through ``.data`` show as ``old``, the node
#: it replaced, as torch's tensor keeps its ``grad_fn``. ``selection.stands_for``, put here by
#: selection (which imports this module, so this one cannot import it).
SHOW_AS_REPLACED: list[Callable[[Any, Any], None]] = [lambda node, old: None]


def _through_data(t: Any, old: Any, value: Any) -> Any:
    """The primitive a tensor computed in the graph holds after a write through ``.data``:
    torch's ``.data`` write changes the values and leaves the tensor in its graph, so later
    uses still send their gradient back through it (TCN initializes its weight-normed
    convolutions so: ``conv.weight.data.normal_()``, recomputed at the next forward anyway).
    The op table's ``data_write``: the new values, the gradient passing whole to the old."""
    backend = t._backend
    with recording():
        written = backend.data_write(old, backend.detach(value._prim))
    SHOW_AS_REPLACED[0](getattr(written, "node", None), getattr(old, "node", None))
    return written


def _overwritten(t: Any, old: Any, prim: Any) -> Any:
    """The primitive a tensor computed in the graph holds after an in-place write of values
    that do not depend on it (``fill_``, ``zero_``, ``t[...] = 2.0``, ``copy_``): torch keeps
    such a tensor in the graph (it still requires grad; backward sends its old value a zero
    gradient: ``autograd.grad`` finds it used), so it stays there, as ``mask_where`` of the
    old value with every element taken from the new one."""
    backend = t._backend
    everywhere = backend.ones(tuple(t.shape), "bool", t._device)
    return backend.mask_where(old, everywhere, prim)


def refresh(t: Any, regenerated: bool = True) -> None:
    """Recompute every live view of ``t`` (and theirs) from ``t``'s value. ``regenerated``:
    they show torch's ``AsStridedBackward0``, as torch regenerates a view's ``grad_fn`` after
    a write that bumps its base's version; not after a write through ``.data``, which bumps
    none (the view keeps its ``SelectBackward0``)."""
    views = getattr(t, "_views", None)
    if not views:
        return
    alive = []
    for r in views:
        child = r()
        if child is None:
            continue
        view = getattr(child, "_view", None)
        if view is None or base_of(view) is not t:
            continue
        alive.append(r)
        backend = child._backend
        if backend.is_autodiff and backend.is_require_grad(child._prim):
            # a leaf that requires grad made from a view (JEM's ``Variable(buffer[inds],
            # requires_grad=True)``, then ``x_k.data += ...``) stays that leaf with the new
            # values, as torch's leaf sharing its base's storage does
            with no_grad():
                fresh = _forward(t, view[KIND], view[PARAMS])
            old = child._prim
            remember_leaf(child, old)
            child._prim = backend.succeed_leaf(old, backend.wrap(backend.inner_value(fresh._prim)))
            if regenerated and child._no_grad_view:
                _rebase_no_grad_view(child)
            refresh(child, regenerated)
            continue
        # recorded: record again; an untracked view of a base the write put into the graph
        # joins it too (torch: a view of a tensor that requires grad requires grad)
        rebased = False
        if view[KIND] in _DETACHED:  # (the base's value wrapped: no op, no mode to set)
            fresh = _detached_again(t, view[KIND], child)
        elif backend.is_autodiff and (
            backend.is_tracked(child._prim)
            or (is_grad_enabled() and view[KIND] not in _DETACHED and backend.is_tracked(t._prim))
        ):
            with recording():
                fresh = _forward(t, view[KIND], view[PARAMS])
            if regenerated:
                _name_regenerated(fresh, t)
                # (a view, taken with grad on, of a view taken under no_grad)
                rebased = child._no_grad_view
            else:  # (torch's view keeps its grad_fn: the new node shows as the old one)
                _show_as(fresh, child, t)
        else:
            with no_grad():
                fresh = _forward(t, view[KIND], view[PARAMS])
        child._prim = fresh._prim
        if rebased:
            _rebase_no_grad_view(child, leaf=False)
        refresh(child, regenerated)
    views[:] = alive


def _name_regenerated(view: Any, base: Any) -> None:
    """A view recomputed in the graph after its base was written shows as torch's: torch
    regenerates the ``grad_fn`` of a view whose base changed as ``AsStridedBackward0`` (on
    the CPU, without view replay), where this showed the op that took the view
    (``SelectBackward0``, ``ViewBackward0``)."""
    node = getattr(view._prim, "node", None)
    if node is not None and node.op is not None and node is not getattr(base._prim, "node", None):
        node.torch_name = "AsStridedBackward0"


def _show_as(fresh: Any, child: Any, base: Any) -> None:
    """Make the node of ``fresh`` (``child`` recomputed from ``base`` after a write through
    ``.data``) show as the node ``child`` held: its ``SelectBackward0``, not the
    ``ViewBackward0`` the recomputation records."""
    node = getattr(fresh._prim, "node", None)
    old = getattr(child._prim, "node", None)
    if node is not None and node is not old and node is not getattr(base._prim, "node", None):
        SHOW_AS_REPLACED[0](node, old)


def _detached_again(base: Any, kind: str, child: Any) -> Any:
    """``child``'s new value after a write into ``base``, of which it is ``.data`` or
    ``detach()``, keeping ``child`` out of the graph where it was. Burn's ``detach()`` of a
    leaf that requires grad requires grad (API.md section 3); taken again, it turned a
    detached tensor whose ``requires_grad_(False)`` had made it torch's back into one that
    requires grad at the next write into it or its base (``d = x.detach()
    .requires_grad_(False); d.add_(1)``: ``d.requires_grad`` True, torch's False), and the
    next backward through it gave ``x`` a gradient."""
    fresh = _forward(base, kind, ())
    backend = child._backend
    if (
        backend.is_autodiff
        and not backend.is_tracked(child._prim)
        and backend.is_tracked(fresh._prim)
    ):
        return type(base)._result(
            backend.wrap(backend.inner_value(fresh._prim)), backend, base._device
        )
    return fresh


# -- strides -------------------------------------------------------------------------------------
def view_error(op: str, shape: tuple[int, ...], target: tuple[int, ...]) -> ShapeError:
    return MemoryLayoutError(
        f"{op}: view size {shape_text(target)} is not compatible with the input's size "
        f"{shape_text(shape)} and stride (at least one dimension spans across two contiguous "
        "subspaces, as after a transpose); use .reshape(...) instead, as in torch"
    )


# -- diagonals (a view torch takes with strides; here a select of the merged dimensions) ----
def _diagonal_positions(t: Any, params: tuple) -> tuple[Any, tuple[int, ...], list[int]]:
    """``t`` with ``dim1``, ``dim2`` moved last and merged, the flat positions of the
    diagonal in that merged dimension, and the permutation used."""
    a, b, offset = params
    shape = t.shape
    rest = [d for d in range(t.ndim) if d not in (a, b)]
    order = rest + [a, b]
    rows, cols = shape[a], shape[b]
    if offset >= 0:
        length = max(0, min(rows, cols - offset))
        positions = [i * cols + i + offset for i in range(length)]
    else:
        length = max(0, min(rows + offset, cols))
        positions = [(i - offset) * cols + i for i in range(length)]
    moved = t._apply("permute", (t,), (tuple(order),)) if order != list(range(t.ndim)) else t
    merged = moved._apply("reshape", (moved,), (tuple(shape[d] for d in rest) + (rows * cols,),))
    # (copied to the device once per shape: a copy each call would be a host round trip)
    index = host_constant(
        type(t)._result, np.asarray(positions, dtype=np.int64), t._backend, t._device
    )
    return merged, index, order


def diagonal_of(t: Any, params: tuple) -> Any:
    merged, index, _ = _diagonal_positions(t, params)
    return merged._apply("select", (merged, index), (merged.ndim - 1,))


def unfold_assign(t: Any, params: tuple, values: Any) -> Any:
    """``t`` with its windows (``unfold(dim, size, step)``'s, ``step >= size`` or one window:
    no element in two windows) replaced by ``values``."""
    d, size, step = params
    count = values.shape[d]
    last = values.ndim - 1
    order = (*range(d + 1), last, *range(d + 1, last))
    moved = values._apply("permute", (values,), (order,)) if d + 1 != last else values
    merged = moved._apply("reshape", (moved,), ((*t.shape[:d], count * size, *t.shape[d + 1 :]),))
    positions = [w * step + j for w in range(count) for j in range(size)]
    # (copied to the device once per shape: a copy each call would be a host round trip)
    index = host_constant(
        type(t)._result, np.asarray(positions, dtype=np.int64), t._backend, t._device
    )
    return t._apply("select_assign", (t, index, merged.cast(t.dtype)), (d,))


def diagonal_assign(t: Any, params: tuple, values: Any) -> Any:
    """``t`` with its diagonal (as :func:`diagonal_of` takes it) replaced by ``values``."""
    merged, index, order = _diagonal_positions(t, params)
    values = lift(t, values, "diagonal").cast(t.dtype)
    written = merged._apply("select_assign", (merged, index, values), (merged.ndim - 1,))
    shape = t.shape
    unmerged = written._apply("reshape", (written,), (tuple(shape[d] for d in order),))
    if order == list(range(t.ndim)):
        return unmerged
    inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
    return unmerged._apply("permute", (unmerged,), (inverse,))


# -- as_strided (a view over the input's storage, as torch's) -----------------------------
def as_strided_positions(
    size: tuple[int, ...], stride: tuple[int, ...], storage_offset: int
) -> np.ndarray:
    """The flat (row-major) positions ``storage_offset + sum(i_k * stride_k)`` of every
    element of an ``as_strided`` view of ``size``, in the view's own row-major order."""
    positions = np.full((), storage_offset, dtype=np.int64)
    for n, s in zip(size, stride):
        positions = positions[..., None] + np.arange(n, dtype=np.int64) * s
    return positions.reshape(size)


def as_strided_input_positions(
    t: Any, size: tuple[int, ...], stride: tuple[int, ...], storage_offset: int
) -> np.ndarray:
    """Where each element of torch's ``t.as_strided(size, stride, storage_offset)`` is among
    ``t``'s own elements (flat, row-major), torch's storage semantics: the view reads ``t``'s
    storage -- its root's elements, laid out by their strides -- at ``storage_offset +
    sum(i_k * stride_k)``, so a transposed, sliced or permuted-layout ``t`` gives torch's
    values, not those of ``t``'s elements in row-major order. A view reaching storage that is
    not ``t``'s (an offset before a slice's first element) and an input holding one storage
    element twice (an expanded view) are refused: their values and gradient are another
    tensor's."""
    _no_bitcast_between_sizes(t)
    root = root_of(t)
    storage = math.prod(root.shape)
    wanted = as_strided_positions(size, stride, storage_offset).reshape(-1)
    if wanted.size and int(wanted.max()) >= storage:
        raise ShapeError(
            f"as_strided: size {list(size)}, stride {list(stride)} and storage_offset "
            f"{storage_offset} reach storage element {int(wanted.max())}, out of bounds for "
            f"the storage of {storage} elements of the input of shape {shape_text(t.shape)}"
        )
    own_strides, own_offset = strides_of(t), storage_offset_of(t)
    if is_contiguous(t.shape, own_strides) and math.prod(t.shape) > 0:
        positions = wanted - own_offset  # the common case: no search
        inside = (positions >= 0) & (positions < math.prod(t.shape))
    else:
        own = as_strided_positions(t.shape, own_strides, own_offset).reshape(-1)
        order = np.argsort(own, kind="stable")
        ordered = own[order]
        if ordered.size > 1 and bool((ordered[1:] == ordered[:-1]).any()):
            raise ShapeError(
                f"as_strided: the input of shape {shape_text(t.shape)} holds a storage element "
                f"more than once (strides {list(own_strides)}: an expanded view); take "
                "as_strided of a .contiguous() copy"
            )
        found = np.minimum(np.searchsorted(ordered, wanted), max(ordered.size - 1, 0))
        inside = ordered[found] == wanted if ordered.size else np.zeros(wanted.shape, bool)
        positions = order[found] if ordered.size else found
    if not inside.all():
        outside = sorted({int(p) for p in wanted[~inside][:4]})
        raise ShapeError(
            f"as_strided: size {list(size)}, stride {list(stride)} and storage_offset "
            f"{storage_offset} reach storage elements {outside} that are not the input's (a "
            f"view of shape {shape_text(t.shape)}, strides {list(own_strides)} and storage "
            f"offset {own_offset} of a tensor of {storage} elements); take as_strided of "
            "the tensor it is a view of"
        )
    return positions.reshape(size).astype(np.int64, copy=False)


def _no_bitcast_between_sizes(t: Any) -> None:
    """``as_strided`` counts storage in the root's elements: refused for a view reached
    through ``view(dtype)`` between element sizes, whose elements are not the root's."""
    view = getattr(t, "_view", None)
    while view is not None:
        base = base_of(view)
        if view[KIND] == "bitcast" and ITEMSIZE[view[PARAMS][0]] != ITEMSIZE[base.dtype]:
            raise ShapeError(
                f"as_strided: the input of shape {shape_text(t.shape)} is a view(dtype) of a "
                f"{base.dtype} tensor as {view[PARAMS][0]} (another element size); take "
                "as_strided of a .clone() of it"
            )
        view = getattr(base, "_view", None)


def _as_strided_parts(t: Any, params: tuple) -> tuple[Any, Any]:
    """``t`` flattened and the positions of ``params``'s view in it, as an int64 tensor."""
    flat = t if t.ndim == 1 else t._apply("reshape", (t,), ((math.prod(t.shape),),))
    positions = params[3].reshape(-1)
    index = from_host(type(t)._result, positions, None, t._backend, t._device)
    return flat, index


def as_strided_of(t: Any, params: tuple) -> Any:
    """The view of ``params`` (``size, stride, storage_offset`` and the positions among ``t``'s
    row-major elements that :func:`as_strided_input_positions` found): a select of those
    positions, whose gradient adds each incoming element into the position it came from
    (torch's ``as_strided_backward`` for an input that does not overlap itself)."""
    flat, index = _as_strided_parts(t, params)
    taken = flat._apply("select", (flat, index), (0,))
    return taken._apply("reshape", (taken,), (params[0],))


def as_strided_assign(t: Any, params: tuple, values: Any) -> Any | None:
    """``t`` with the elements of its ``as_strided`` view of ``params`` replaced by
    ``values``; ``None`` where the view holds an element twice (a write there is ambiguous,
    as torch refuses it)."""
    flat, index = _as_strided_parts(t, params)
    positions = params[3]
    if np.unique(positions).size != positions.size:
        return None
    values = lift(t, values, "as_strided").cast(t.dtype)
    values = values._apply("reshape", (values,), ((positions.size,),))
    written = flat._apply("select_assign", (flat, index, values), (0,))
    return written._apply("reshape", (written,), (t.shape,))
