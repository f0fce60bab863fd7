"""In-place updates: a tensor object made to hold new values, as PyTorch's in-place ops do.

Operations never modify a primitive that anything else can see (a value saved for backward,
a gradient or an array someone kept never changes); an in-place op replaces the primitive a
tensor *object* holds, so every name bound to the object sees the new value. Where nothing but
the tensors being written references the buffer, ``add_``, ``sub_``, ``mul_`` and ``div_``
outside the graph write into the buffer itself, as torch's do (:func:`_in_buffer`, the same
bits). Under autodiff the update is a functional op recorded in the graph: ``x.mul_(2)`` is
``x = x * 2`` with the object kept, and gradients flow as they would out of place. Views
(:mod:`.views`) carry the update to their base and from a base to its views, as torch's
aliasing does; torch's errors are kept where torch has them (an in-place op on a leaf that
requires grad, outside ``no_grad``; a float result written into an int tensor).

- :class:`InplaceMixin` gives the ``*_`` methods, ``__setitem__`` and the augmented operators
  (``+=``...). Its one primitive is ``_update(op, compute)``: replace the tensor's value with
  ``compute(self)`` (an out-of-place method of the other mixins), checked and written through
  its views.
- :func:`assign` is the update ``nn`` and ``optim`` make outside the graph (an optimizer step,
  ``load_state_dict``, ``nn.init``, batch norm's running statistics): the object keeps being a
  leaf that requires grad, with its distributed mark.
"""

from __future__ import annotations

import math
import numbers
import sys
import warnings
from contextlib import nullcontext
from typing import Any
from weakref import ref

import numpy as np

from ..autodiff.grad_mode import in_inference_mode, is_grad_enabled, no_grad
from ..backend.protocol import COMPLEX_DTYPES, FLOAT_DTYPES
from ..context import captured_writes, capturing
from ..effects import WRITES
from ..errors import (
    AutodiffError,
    DTypeError,
    InvalidArgumentError,
    InvalidValueError,
    ResultCastError,
    ShapeError,
    SizeMismatchError,
    shape_text,
)
from ._dispatch import (
    NARROW_INTS,
    SCALARS,
    TensorBase,
    check_float_range,
    check_scalar_int,
    checked_generator,
    from_host,
    lift,
    on_backend,
    untracked,
    wrap,
    written_scalar,
)
from .advanced import put_through_aliases
from .compositions import scaled
from .dtypes import RANDINT_BOUNDS, can_cast, canonical_dtype
from .elementwise import _given, _sum_dtype
from .inference import mark_inference, refuse_write
from .ownership import sole_buffer
from .shape import shape_arg
from .strides import contiguous_strides
from .views import (
    FILLS,
    KIND,
    base_of,
    detached_values,
    move_views,
    outside_graph,
    refresh,
    refuse_gradient_through_overlap,
    refuse_internal_overlap,
    refuse_multi_output_view,
    refuse_no_grad_view,
    refuse_partial_overlap,
    remember_leaf,
    root_of,
    write,
    written_positions,
)

__all__ = ["InplaceMixin", "assign", "foreach_mul_", "write_out"]


def assign(
    target: Any,
    value: Any,
    op: str = "assign",
    *,
    check_shape: bool = True,
    keep_dtype: bool = True,
    device: Any = None,
    untrack: bool = False,
) -> Any:
    """Make ``target`` hold ``value``'s values, in place, and return ``target``.

    ``value`` (a tensor of ``target``'s backend or of its inner backend) is cut from any graph
    and, unless ``keep_dtype=False``, cast to ``target``'s dtype; it is moved to ``device``
    (``target``'s own by default), where ``target`` then lives. On an autodiff backend
    ``target`` stays what it was: a leaf requiring grad if it was one (a fresh leaf, whose
    node holds nothing of the old value's; ``target.grad(grads)`` still finds a gradient the
    old leaf got, as torch's ``.grad`` survives an update, see :func:`.views.remember_leaf`),
    carrying its distributed mark; untracked otherwise, or with ``untrack=True``.
    ``check_shape`` (the default) requires the old shape: a ``ShapeError`` naming ``op``.
    Views of ``target`` see the new value; a ``target`` that is a view writes to its base.
    """
    if not isinstance(value, TensorBase):
        raise DTypeError(f"{op}: expected a tensor, got {type(value).__name__}")
    backend = target._backend
    # (size(): a lazy module's placeholder answers it, where its shape refuses)
    if check_shape and tuple(value.shape) != tuple(target.size()):
        raise ShapeError(
            f"{op}: the tensor has shape {shape_text(target.size())}, the new value "
            f"{shape_text(value.shape)}"
        )
    if value._backend is not backend:
        if value._backend.is_autodiff and not backend.is_autodiff:
            value = untracked(value)  # cut from its graph, as documented, then moved
        value = on_backend(value, backend, op)
    if keep_dtype and value.dtype != target.dtype:
        value = value.cast(target.dtype)
    device = target._device if device is None else device
    if value._device != device:
        value = value.to(device)
    sink = getattr(target, "_grad_sink", None)
    if sink is not None and tuple(value.shape) != tuple(target.shape):
        raise ShapeError(
            f"{op}: a gradient read from the Gradients keeps its parameter's shape "
            f"{shape_text(target.shape)}, the new value has {shape_text(value.shape)}"
        )
    primitive = value._prim
    WRITES.note()
    writes = captured_writes.get()
    if writes is not None:
        writes.append((target, target._prim))
    if backend.is_autodiff:
        old = target._prim
        primitive = backend.wrap(backend.inner_value(primitive))  # untracked, same values
        if getattr(target, "_view", None) is not None and check_shape and not untrack:
            write(op, target, wrap(target, primitive), True)  # through the view to its base
            return target
        if backend.is_require_grad(old) and not untrack:
            # (a value of another shape: the old gradient does not fit; one of the same shape,
            # given by ``p.data = x`` too, keeps it: torch's ``.grad`` survives the write)
            if tuple(value.shape) == tuple(target.size()):
                remember_leaf(target, old)
            primitive = backend.succeed_leaf(old, primitive)
    target._prim = primitive
    target._device = device
    if target._inference:  # (written inside inference_mode: still one, as torch's)
        mark_inference(target)
    if sink is not None:  # a gradient read by Tensor.grad (``p.grad(grads).data = g``, XNOR-Net's
        grads, key = sink  # rescaled gradient): written back there, as an in-place write is
        grads.replace(key, primitive)
    if getattr(target, "_views", None) and not untrack:
        # (a leaf frozen by ``requires_grad_(False)`` keeps its values: its views keep the
        # graph they were taken in, as torch's keep their grad_fn)
        refresh(target)
    return target


def write_out(op: str, out: Any, result: Any) -> Any:
    """torch's ``out=`` for the few functions real programs call with it (``normalize``'s
    power iteration, SNGP's ``cholesky_inverse(u, out=self.covariance)``, fairseq's beam
    buffers): ``result`` written into ``out`` in place (a view writes through to its base;
    resized as torch resizes it, cast to its dtype where torch's casting allows) and
    ``out`` returned; refused, as torch refuses it, where the result needs a graph."""
    if not hasattr(out, "copy_"):
        raise DTypeError(f"{op}: out must be a tensor, got {type(out).__name__}")
    # (``out`` itself requiring grad counts, as torch counts it: one of the arguments)
    if result.requires_grad or (is_grad_enabled() and out.requires_grad and not outside_graph(out)):
        raise AutodiffError(
            f"{op}: functions with out= arguments don't support automatic differentiation, "
            "but one of the arguments requires grad (call it under no_grad, or assign the "
            "result)"
        )
    if not can_cast(result.dtype, out.dtype):
        raise ResultCastError(
            f"{op}: result type {result.dtype} can't be cast to the desired output type {out.dtype}"
        )
    if tuple(out.shape) != tuple(result.shape):
        if out.numel() != 0:
            warnings.warn(
                f"An output with one or more elements was resized since it had shape "
                f"{list(out.shape)}, which does not match the required output shape "
                f"{list(result.shape)}. This behavior is deprecated, and in a future PyTorch "
                "release outputs will not be resized unless they have zero elements. You can "
                "explicitly reuse an out tensor t by resizing it, inplace, to zero elements "
                "with t.resize_(0).",
                UserWarning,
                stacklevel=5,
            )
        out.resize_(result.shape)
    return out.copy_(result)


#: torch's words for an in-place write of a value of a vmap's batch into a tensor that is
#: not of it (one the function closes over, or made inside it from constants)
_UNBATCHED_WRITE = (
    "vmap: {op}(self, *extra_args) is not possible because there exists a Tensor `other` in "
    "extra_args that has more elements than `self`. This happened due to `other` being "
    "vmapped over but `self` not being vmapped over in a vmap. Please try to use "
    "out-of-place operators instead of inplace arithmetic. If said operator is being called "
    "inside the PyTorch framework, please file a bug report instead."
)

#: the modules between a user's in-place call and :func:`_fit`
_WRITE_PATH = frozenset(
    [__name__, "retrograd.errors", "retrograd.tensor._dispatch", "retrograd.tensor.advanced"]
)


def _written_by_the_user() -> bool:
    """Whether the in-place write being checked was called by code outside retrograd (the
    function a vmap runs): the library's own writes into buffers it made are no user's."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") in _WRITE_PATH:
        frame = frame.f_back
    name = "" if frame is None else frame.f_globals.get("__name__", "")
    return not (name == "retrograd" or name.startswith("retrograd."))


def _fit(op: str, t: Any, value: Any) -> Any:
    """``value`` made to fit ``t`` as torch's in-place ops require: its broadcast shape must be
    ``t``'s, and its dtype one that casts to ``t``'s (never float into int, nor int into
    bool)."""
    if not isinstance(value, TensorBase):
        raise DTypeError(f"{op}: expected a tensor, got {type(value).__name__}")
    if type(value)._sticky and not type(t)._sticky and _written_by_the_user():
        raise AutodiffError(_UNBATCHED_WRITE.format(op=op))
    shape = t.shape
    if value.shape != shape:
        try:
            fits = np.broadcast_shapes(value.shape, shape) == shape
        except ValueError:
            fits = False
        if not fits:
            broadcasts = _broadcasts(value.shape, shape)
            wider = np.broadcast_shapes(value.shape, shape) if broadcasts else None
            raise SizeMismatchError(  # (torch's RuntimeError)
                f"{op}: output with shape {shape_text(shape)} doesn't match the broadcast "
                f"shape {shape_text(value.shape if wider is None else wider)}"
            )
        value = value.expand(shape)
    dtype = t.dtype
    if value.dtype != dtype:
        if not can_cast(value.dtype, dtype):
            raise ResultCastError(
                f"{op}: result type {value.dtype} can't be cast to the desired output type "
                f"{dtype} (the tensor's own)"
            )
        value = value.cast(dtype)
    if value._backend is not t._backend:  # ``inner_t.add_(tracked)``: computed on autodiff
        # ``t`` records no graph: under no_grad nothing is lost, otherwise the gradient is
        value = on_backend(value if is_grad_enabled() else untracked(value), t._backend, op)
    return value


#: The arithmetic :func:`_in_buffer` writes into a tensor's own memory: the kernel with a
#: tensor operand, and with a Python number.
_IN_BUFFER = {
    "add_": ("add", "add_scalar"),
    "sub_": ("sub", "sub_scalar"),
    "mul_": ("mul", "mul_scalar"),
    "div_": ("div", "div_scalar"),
}


#: Tensors from this many elements (256 KiB of float32) on take :func:`_in_buffer`: below, a
#: new array (from the allocator's free lists, no fresh pages) costs less than the checks that
#: would spare it.
IN_BUFFER_MIN_SIZE = 1 << 16


def _in_buffer(op: str, t: Any, other: Any, alpha: Any = 1) -> bool:
    """Write ``t``'s in-place arithmetic ``op`` (``add_``/``sub_`` with ``alpha``, ``mul_``,
    ``div_``) into ``t``'s own buffer, as torch does, where no one can tell it from
    :meth:`InplaceMixin._update`'s new value; returns whether it did.

    That is: a float ``t`` of :data:`IN_BUFFER_MIN_SIZE` elements or more, and an operand
    that is a Python number or a tensor of ``t``'s dtype and device (of its backend or its
    inner one) broadcasting to ``t``'s shape; nothing recorded (under ``no_grad``, or a write
    through ``.data``/``detach()`` of an operand outside the graph) and nothing in the graph
    among the tensors written (leaves and untracked values only); no capture being recorded;
    and nothing but those tensors referencing the buffer (:func:`.ownership.sole_buffer`: not
    a value a graph saved, a gradient or copy someone kept, a view's memory). The operand is
    computed as ``_update`` computes it (``alpha * other`` first), the last kernel writes into
    the buffer (``Backend.write_into``: the same bits), and :func:`.views.write` then does what
    it does after any in-place op (a leaf stays a leaf, views are refreshed, a gradient read
    from a ``Gradients`` is written back there).
    """
    refuse_internal_overlap(op, t)
    shape = t.shape
    if math.prod(shape) < IN_BUFFER_MIN_SIZE or t.dtype not in FLOAT_DTYPES or capturing.get():
        return False
    backend = t._backend
    tensor_operand = type(other) is not float and type(other) is not int
    if tensor_operand and (not _fits_in_buffer(t, other) or type(other)._sticky):
        return False
    outside = outside_graph(t)
    recording = backend.is_autodiff and is_grad_enabled()
    if recording and (not outside or (tensor_operand and _tracked(other))):
        return False
    group = sole_buffer(t)
    if group is None:
        return False
    if backend.is_autodiff:
        for x in group:
            if backend.is_tracked(x._prim) and not backend.is_require_grad(x._prim):
                return False
    scale = None
    if _given(alpha):
        if tensor_operand and (type(alpha) is float or type(alpha) is int):
            scale = float(alpha)  # (a float tensor times a number: the number as a float)
        else:
            other = scaled(op[:-1], other, alpha, _sum_dtype(t, other))
    kernel, scalar_kernel = _IN_BUFFER[op]
    if type(other) is float or type(other) is int:
        kernel, operand = scalar_kernel, float(other)
    elif isinstance(other, TensorBase):
        operand = other._prim
        if other._backend.is_autodiff:
            operand = other._backend.inner_value(operand)
    else:
        return False
    if backend.is_autodiff:
        out = backend.inner.write_into(kernel, backend.inner_value(t._prim), operand, scale)
        value = None if out is None else wrap(t, backend.wrap(out))
    else:
        out = backend.write_into(kernel, t._prim, operand, scale)
        value = None if out is None else wrap(t, out)
    if value is None:
        return False
    write(op, t, value, outside)
    return True


def foreach_mul_(tensors: list[Any], factor: Any) -> None:
    """``t.mul_(factor)`` for each of ``tensors`` (torch's ``_foreach_mul_``), ``factor`` a
    0-d tensor. A tensor of a backend that records no graph (the gradients ``Tensor.grad``
    returns), of ``factor``'s dtype, backend and device, whose buffer nothing else references
    (:func:`.ownership.sole_buffer`; no capture being recorded) gets the product written into
    its buffer by the backend's ``write_into``, as ``mul_`` writes a large one, without
    ``mul_``'s per-call checks and at any size (``clip_grad_norm_`` scales every gradient so:
    the same bits); the others take ``mul_``. The tensor objects, and a ``Gradients`` entry
    they were read from, keep holding the same buffer."""
    prim, backend, device, dtype = factor._prim, factor._backend, factor._device, factor.dtype
    direct = not backend.is_autodiff and not capturing.get()
    for t in tensors:
        if (
            direct
            and t._backend is backend
            and t._device is device
            and t.dtype == dtype
            and sole_buffer(t) is not None
            and backend.write_into("mul", t._prim, prim) is not None
        ):
            continue
        t.mul_(factor)


def _tracked(x: Any) -> bool:
    backend = x._backend
    return backend.is_autodiff and backend.is_tracked(x._prim)


def _fits_in_buffer(t: Any, other: Any) -> bool:
    """A tensor operand of :func:`_in_buffer`: ``t``'s dtype and device, on ``t``'s backend or
    its inner one, broadcasting to ``t``'s shape."""
    if not isinstance(other, TensorBase) or other.dtype != t.dtype:
        return False
    backend = other._backend
    if backend is not t._backend and not (t._backend.is_autodiff and backend is t._backend.inner):
        return False
    if other._device is not t._device:
        return False
    shape, small = t.shape, other.shape
    if small == shape:
        return True
    if len(small) > len(shape):
        return False
    return all(n == 1 or n == m for n, m in zip(reversed(small), reversed(shape)))


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True


def _view_in_place(tensor: Any, op: str, make: Any) -> Any:
    """``tensor`` made ``make(tensor)`` in place, as torch's in-place view ops change only a
    tensor's shape and strides: what ``tensor`` was lives on as a tensor of its own that takes
    over its link to its base and its views, and ``tensor`` becomes a view of it, so a write
    through ``tensor`` (or a view taken before) still reaches the base and each sees the
    other's. A leaf that requires grad is refused, as torch refuses it (under ``no_grad``
    it is reshaped as a leaf when nothing aliases it)."""
    refuse_multi_output_view(op, tensor)
    outside = outside_graph(tensor)
    if tensor._view is not None and not outside and is_grad_enabled():
        # torch refuses a view of a leaf that requires grad here as it refuses a write into
        # one, though only the view's shape would change
        root = root_of(tensor)
        if root._backend.is_autodiff and root._backend.is_require_grad(root._prim):
            raise AutodiffError(
                f"{op}: a view of a leaf tensor that requires grad is being used in an "
                "in-place operation; do it under rg.no_grad(), or on .data, as in torch"
            )
    # (a tensor detached from a leaf that requires grad requires grad itself, Burn's rule, but
    # is torch's detached tensor: its shape is its own to change, as torch's)
    leaf = tensor.requires_grad and tensor.is_leaf and not outside
    if leaf and is_grad_enabled():
        raise AutodiffError(
            f"{op}: a leaf tensor that requires grad cannot be changed in place (shape "
            f"{shape_text(tensor.shape)}); use the out-of-place op ({op[:-1]}) or no_grad()"
        )
    # (a view taken of such a leaf under ``no_grad`` is a leaf too, and torch reshapes it in
    # place there as any view: rewired below, its base untouched)
    if leaf and tensor._view is None:
        if any(r() is not None for r in tensor._views or ()):
            raise InvalidArgumentError(
                f"{op}: the {shape_text(tensor.shape)} leaf is a view or has views; apply "
                f"{op[:-1]} out of place"
            )
        return assign(tensor, make(untracked(tensor)), op, check_shape=False)
    with no_grad():
        make(untracked(tensor))  # a bad dimension refused before anything is rewired
    former = type(tensor)._result(tensor._prim, tensor._backend, tensor._device)
    layout = getattr(tensor, "_layout", None)
    if layout is not None:  # (a root's strides kept from its source: a clone of a transpose)
        former._layout = layout
    taken = tensor._view
    if taken is not None:
        former._view = taken
        base = base_of(taken)
        if base is not None:
            base._views = [ref(former) if r() is tensor else r for r in base._views]
    if tensor._views:
        move_views(tensor, former)
    made = make(former)
    tensor._prim = made._prim
    if made._view is not None and base_of(made._view) is former:
        tensor._view = made._view
        former._views = [ref(tensor) if r() is made else r for r in former._views]
    else:  # nothing to change (``squeeze_`` of no size-1 dimension): as it was
        tensor._view = taken
        if taken is not None and base is not None:
            base._views = [ref(tensor) if r() is former else r for r in base._views]
        move_views(former, tensor)
    return tensor


class InplaceMixin:
    """In-place methods, ``t[idx] = v`` and ``+=``...; needs ``_update`` (below) and the
    out-of-place methods of the other mixins."""

    __slots__ = ()
    shape: tuple[int, ...]
    dtype: str
    _backend: Any
    _device: Any
    _prim: Any

    # -- the primitive ------------------------------------------------------------------------
    def _update(
        self, op: str, compute: Any, fresh: bool = False, operands: tuple | None = None
    ) -> Any:
        """Replace this tensor's value with ``compute(self)``, in place; returns ``self``.
        ``fresh``: the new value does not depend on the old one (``copy_``). ``operands``:
        the op's arguments after ``self`` (tensors or numbers) where torch's node lists them
        in its ``next_functions`` (:func:`_name_written`).

        Through ``.data``/``detach()`` the tensor detached from takes the values only (a
        value computed in the graph is recorded on the detached tensor, as torch's);
        otherwise an update of a leaf that requires grad (or of a view of one) is refused
        while gradients are recorded, as in torch.
        """
        if op not in FILLS:
            refuse_internal_overlap(op, self)
        outside = outside_graph(self)
        # (inside inference_mode nothing is recorded, enable_grad() or not: round 93)
        recording = is_grad_enabled() and not in_inference_mode()
        recorded = False
        if outside and is_grad_enabled() and self._backend.is_autodiff:
            # torch records a write through detach()/.data of a value computed in the graph
            # (``d.copy_(y)``, ``d.mul_(y)``, y requiring grad): d requires grad from then on
            value = _fit(op, self, compute(detached_values(self)))
            recorded = self._backend.is_tracked(value._prim)
        elif outside:
            with no_grad():
                value = _fit(op, self, compute(self))
        else:
            refuse_multi_output_view(op, self)
            # (torch writes into a leaf that requires grad inside inference_mode, as under
            # no_grad; refused here: round 93)
            if recording and self._backend.is_autodiff:
                root = root_of(self)
                # (a view made a leaf by requires_grad_() counts as a view of a leaf; one taken
                # under no_grad is refused as such below)
                made_leaf = not self._no_grad_view and self._backend.is_require_grad(self._prim)
                if made_leaf or root._backend.is_require_grad(root._prim):
                    which = "a leaf" if root is self else "a view of a leaf"
                    raise AutodiffError(
                        f"{op}: {which} tensor that requires grad is being used in an in-place "
                        "operation; do it under rg.no_grad(), or on .data, as in torch"
                    )
            value = _fit(op, self, compute(self))
            refuse_no_grad_view(op, self, value)
        backend = self._backend
        if backend.is_autodiff and backend.is_require_grad(value._prim):
            # the new value is a leaf itself (copy_ of a leaf, fill_ of a 0-d one): held as
            # is, this tensor would become that leaf (refusing later in-place ops, taking its
            # gradient); torch's result is a non-leaf copy of it (untracked under no_grad)
            with no_grad() if outside and not recorded else nullcontext():
                value = value.clone()
        # (a value that does not depend on the old one, zero_ or fill_, keeps a tracked
        # tensor in the graph: views._overwritten, where every write ends)
        # (which positions a fill wrote, where a view with overlapping elements needs it)
        written = written_positions(self, compute) if op in FILLS and not outside else None
        named = recording and not outside and backend.is_autodiff
        if named:
            before = getattr(self._prim, "node", None)
            root_before = getattr(root_of(self)._prim, "node", None)
        write(op, self, value, outside, fresh, recorded, written)
        if named:
            _name_written(self, op, before, root_before, operands)
        if op in FILLS and not outside:
            refuse_gradient_through_overlap(op, self)
        return self

    # -- arithmetic ---------------------------------------------------------------------------
    def add_(self, other: Any, *args: Any, alpha: Any = 1) -> Any:
        refuse_partial_overlap("add_", self, other)
        if not args and _in_buffer("add_", self, other, alpha):
            return self
        return self._update("add_", lambda t: t.add(other, *args, alpha=alpha), operands=(other,))

    def sub_(self, other: Any, *args: Any, alpha: Any = 1) -> Any:
        refuse_partial_overlap("sub_", self, other)
        if not args and _in_buffer("sub_", self, other, alpha):
            return self
        return self._update("sub_", lambda t: t.sub(other, *args, alpha=alpha), operands=(other,))

    def mul_(self, other: Any) -> Any:
        refuse_partial_overlap("mul_", self, other)
        if _in_buffer("mul_", self, other):
            return self
        return self._update("mul_", lambda t: t.mul(other), operands=(other,))

    def div_(self, other: Any, *, rounding_mode: str | None = None) -> Any:
        refuse_partial_overlap("div_", self, other)
        if rounding_mode is None and _in_buffer("div_", self, other):
            return self
        return self._update(
            "div_", lambda t: t.div(other, rounding_mode=rounding_mode), operands=(other,)
        )

    def pow_(self, exponent: Any) -> Any:
        refuse_partial_overlap("pow_", self, exponent)
        return self._update("pow_", lambda t: t.pow(exponent))

    def remainder_(self, other: Any) -> Any:
        refuse_partial_overlap("remainder_", self, other)
        return self._update("remainder_", lambda t: t.remainder(other))

    def addcmul_(self, tensor1: Any, tensor2: Any, *args: Any, value: float = 1) -> Any:
        refuse_partial_overlap("addcmul_", self, tensor1, tensor2)
        return self._update("addcmul_", lambda t: t.addcmul(tensor1, tensor2, *args, value=value))

    def addcdiv_(self, tensor1: Any, tensor2: Any, *args: Any, value: float = 1) -> Any:
        refuse_partial_overlap("addcdiv_", self, tensor1, tensor2)
        return self._update("addcdiv_", lambda t: t.addcdiv(tensor1, tensor2, *args, value=value))

    def lerp_(self, end: Any, weight: Any) -> Any:
        refuse_partial_overlap("lerp_", self, end, weight)
        return self._update("lerp_", lambda t: t.lerp(end, weight))

    def clamp_(self, min: Any = None, max: Any = None) -> Any:  # noqa: A002 (torch's name)
        refuse_partial_overlap("clamp_", self, min, max)
        return self._update("clamp_", lambda t: t.clamp(min, max))

    clip_ = clamp_

    def clamp_min_(self, min: Any) -> Any:  # noqa: A002 (torch's name)
        return self._update("clamp_min_", lambda t: t.clamp(min, None))

    def clamp_max_(self, max: Any) -> Any:  # noqa: A002 (torch's name)
        return self._update("clamp_max_", lambda t: t.clamp(None, max))

    # -- unary (each the method of the same name without the underscore) ----------------------
    def neg_(self) -> Any:
        return self._update("neg_", lambda t: t.neg())

    def abs_(self) -> Any:
        return self._absolute_in_place("abs_")

    def absolute_(self) -> Any:
        return self._absolute_in_place("absolute_")

    def _absolute_in_place(self, op: str) -> Any:
        if self.is_complex():  # the real magnitude cannot be written back (torch refuses too,
            raise ResultCastError(  # its RuntimeError)
                f"{op}: in-place abs is not supported for complex tensors (got {self.dtype}); "
                "use abs() for the float magnitudes"
            )
        return self._update(op, lambda t: t.abs())

    def exp_(self) -> Any:
        return self._update("exp_", lambda t: t.exp())

    def log_(self) -> Any:
        return self._update("log_", lambda t: t.log())

    def sqrt_(self) -> Any:
        return self._update("sqrt_", lambda t: t.sqrt())

    def rsqrt_(self) -> Any:
        return self._update("rsqrt_", lambda t: t.rsqrt())

    def reciprocal_(self) -> Any:
        return self._update("reciprocal_", lambda t: t.reciprocal())

    def square_(self) -> Any:
        return self._update("square_", lambda t: t.square())

    def sigmoid_(self) -> Any:
        return self._update("sigmoid_", lambda t: t.sigmoid())

    def tanh_(self) -> Any:
        return self._update("tanh_", lambda t: t.tanh())

    def relu_(self) -> Any:
        return self._update("relu_", lambda t: t.relu())

    def sin_(self) -> Any:
        return self._update("sin_", lambda t: t.sin())

    def cos_(self) -> Any:
        return self._update("cos_", lambda t: t.cos())

    def floor_(self) -> Any:
        return self._update("floor_", lambda t: t.floor())

    def ceil_(self) -> Any:
        return self._update("ceil_", lambda t: t.ceil())

    def round_(self, *, decimals: int | None = None) -> Any:
        return self._update("round_", lambda t: t.round(decimals=decimals))

    def trunc_(self) -> Any:
        return self._update("trunc_", lambda t: t.trunc())

    def sign_(self) -> Any:
        return self._update("sign_", lambda t: t.sign())

    def erfinv_(self) -> Any:
        return self._update("erfinv_", lambda t: t.erfinv())

    def tril_(self, diagonal: int = 0) -> Any:
        return self._update("tril_", lambda t: t.tril(diagonal))

    def triu_(self, diagonal: int = 0) -> Any:
        return self._update("triu_", lambda t: t.triu(diagonal))

    # -- comparisons written as the tensor's dtype ---------------------------------------------
    def eq_(self, other: Any) -> Any:
        return self._update("eq_", lambda t: t.eq(other))

    def ne_(self, other: Any) -> Any:
        return self._update("ne_", lambda t: t.ne(other))

    def gt_(self, other: Any) -> Any:
        return self._update("gt_", lambda t: t.gt(other))

    def ge_(self, other: Any) -> Any:
        return self._update("ge_", lambda t: t.ge(other))

    def lt_(self, other: Any) -> Any:
        return self._update("lt_", lambda t: t.lt(other))

    def le_(self, other: Any) -> Any:
        return self._update("le_", lambda t: t.le(other))

    # -- filling and copying ------------------------------------------------------------------
    def fill_(self, value: Any) -> Any:
        """Every element ``value`` (a scalar, or a 0-d tensor: then differentiable in it)."""
        if isinstance(value, TensorBase):
            if value.ndim != 0:
                raise ShapeError(
                    f"fill_: only a 0-d tensor can fill, got shape {shape_text(value.shape)}"
                )
            # (torch fills from a tensor through copy_, which refuses an expanded target)
            refuse_internal_overlap("fill_", self)
            # torch casts the value to the tensor's dtype, whatever the two are
            return self._update(
                "fill_",
                lambda t: _cast(lift(t, value, "fill_"), t.dtype).expand(t.shape),
                operands=(value,),
            )
        if not isinstance(value, SCALARS):
            raise DTypeError(f"fill_: expected a number, got {type(value).__name__}")
        return self._update("fill_", lambda t: _filled(t, value), operands=())

    def zero_(self) -> Any:
        return self._update("zero_", lambda t: _filled(t, 0), operands=())

    def copy_(self, src: Any, non_blocking: bool = False) -> Any:
        """This tensor's values replaced by ``src``'s (broadcast to its shape, cast to its
        dtype); the gradient flows to ``src``, as torch's."""
        refuse_partial_overlap("copy_", self, src)
        return self._copy_unchecked(src, "copy_")

    def _copy_unchecked(self, src: Any, op: str = "setitem") -> Any:
        """``copy_`` without the partial-overlap check: for ``t[basic] = v``, whose check is
        torch's ``copy_to``'s (:func:`.advanced.set_index`). A number is written as ``op``
        writes it: ``copy_``'s cast (wrapped, a real part) or a write's checked value."""
        return self._update("copy_", lambda t: _copied(t, src, op), fresh=True, operands=(src,))

    def masked_fill_(self, mask: Any, value: Any) -> Any:
        return self._update("masked_fill_", lambda t: t.masked_fill(mask, value))

    def masked_scatter_(self, mask: Any, source: Any) -> Any:
        return self._update("masked_scatter_", lambda t: t.masked_scatter(mask, source))

    def index_add_(self, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Any:
        return self._update("index_add_", lambda t: t.index_add(dim, index, source, alpha=alpha))

    def index_reduce_(
        self, dim: int, index: Any, source: Any, reduce: str, *, include_self: bool = True
    ) -> Any:
        return self._update(
            "index_reduce_",
            lambda t: t.index_reduce(dim, index, source, reduce, include_self=include_self),
        )

    def index_copy_(self, dim: int, index: Any, source: Any) -> Any:
        return self._update("index_copy_", lambda t: t.index_copy(dim, index, source))

    def index_fill_(self, dim: int, index: Any, value: Any) -> Any:
        return self._update("index_fill_", lambda t: t.index_fill(dim, index, value))

    def scatter_(self, dim: int, index: Any, src: Any = None, *, value: Any = None,
                 reduce: str | None = None) -> Any:  # fmt: skip
        return self._update(
            "scatter_", lambda t: t.scatter(dim, index, src, value=value, reduce=reduce)
        )

    def scatter_add_(self, dim: int, index: Any, src: Any) -> Any:
        return self._update("scatter_add_", lambda t: t.scatter_add(dim, index, src))

    def put_(self, index: Any, source: Any, accumulate: bool = False) -> Any:
        return self._update("put_", lambda t: t.put(index, source, accumulate))

    # -- resizing -----------------------------------------------------------------------------
    def resize_(self, *sizes: Any, memory_format: Any = None) -> Any:
        """torch's ``resize_``: this tensor made ``sizes``, in place, its elements kept in
        their flat (row-major) order: the first ``numel`` of them when it shrinks, zeros
        after them when it grows (torch's new memory is uninitialized). As torch's, a tensor
        that requires grad is refused; a view, or a tensor with views, is refused too (torch
        would keep them aliasing one storage, which retrograd's tensors do not share)."""
        shape = shape_arg(sizes[0] if len(sizes) == 1 else sizes, "resize_")
        if any(n < 0 for n in shape):
            raise ShapeError(f"resize_: negative dimension in {shape_text(shape)}")
        if self.requires_grad:
            raise AutodiffError("resize_: cannot resize tensors that require grad")
        if shape == tuple(self.shape):
            return self
        count = math.prod(shape)
        aliased = root_of(self) is not self or any(r() is not None for r in self._views or ())
        if aliased and count <= self.numel() and self.is_contiguous():
            # torch keeps the storage when the new size fits: the tensor becomes its first
            # `count` elements, still aliasing what it aliased (crnn.pytorch's
            # `v.data.resize_(data.size()).copy_(data)` writes into v's first elements)
            strides = contiguous_strides(shape)
            return _view_in_place(
                self, "resize_", lambda t: t.as_strided(shape, strides, t.storage_offset())
            )
        if aliased:
            raise InvalidArgumentError(
                f"resize_: the {shape_text(self.shape)} tensor is a view or has views and "
                f"{shape_text(shape)} does not fit in its elements (or it is not contiguous); "
                "resize a tensor of its own (x.clone().resize_(...))"
            )
        with no_grad():
            flat = untracked(self).reshape(-1)
            if count <= flat.numel():
                values = flat[:count]
            else:
                values = flat.new_zeros(count)
                values[: flat.numel()] = flat
        return assign(self, values.reshape(shape), "resize_", check_shape=False)

    def resize_as_(self, other: Any, memory_format: Any = None) -> Any:
        """``resize_(other.shape)``."""
        if not isinstance(other, TensorBase):
            raise DTypeError(f"resize_as_: expected a tensor, got {type(other).__name__}")
        return self.resize_(tuple(other.shape))

    # -- in-place view ops: the same tensor object, another shape over the same elements ---
    def unsqueeze_(self, dim: int) -> Any:
        """torch's ``unsqueeze_``: this tensor given a dimension of size 1 at ``dim``, in
        place, still aliasing what it aliased (``x[t].unsqueeze_(0)`` stays a view of ``x``)."""
        return _view_in_place(self, "unsqueeze_", lambda t: t.unsqueeze(dim))

    def squeeze_(self, dim: Any = None) -> Any:
        """torch's ``squeeze_``: this tensor without its size-1 dimensions (or ``dim``'s, an
        int or a tuple), in place, still aliasing what it aliased."""
        return _view_in_place(
            self, "squeeze_", lambda t: t.squeeze() if dim is None else t.squeeze(dim)
        )

    def transpose_(self, dim0: int, dim1: int) -> Any:
        """torch's ``transpose_``: this tensor with ``dim0`` and ``dim1`` swapped, in place,
        still aliasing what it aliased."""
        return _view_in_place(self, "transpose_", lambda t: t.transpose(dim0, dim1))

    swapdims_ = transpose_

    def swapaxes_(self, axis0: int, axis1: int) -> Any:
        """torch's ``swapaxes_`` (under its parameter names): :meth:`transpose_`."""
        return self.transpose_(axis0, axis1)

    def t_(self) -> Any:
        """torch's ``t_``: this (at most 2-d) tensor transposed in place."""
        return _view_in_place(self, "t_", lambda t: t.t())

    def as_strided_(self, size: Any, stride: Any, storage_offset: Any = None) -> Any:
        """torch's ``as_strided_``: this tensor made, in place, the :meth:`as_strided` view of
        its storage (its base's, for a view), which it keeps aliasing."""
        return _view_in_place(
            self, "as_strided_", lambda t: t.as_strided(size, stride, storage_offset)
        )

    # -- Python callables per element (torch's CPU apply_/map_) -------------------------------
    def apply_(self, callable: Any) -> Any:  # noqa: A002 (torch's name)
        """Each element replaced by ``callable(element)`` (a Python number in, one out, cast
        to the tensor's dtype), as torch's ``apply_``; refused on a tensor that requires
        grad, as torch's (the callable is not differentiable)."""
        _check_untracked("apply_", self)
        return self._update("apply_", lambda t: _elementwise(t, "apply_", callable, t))

    def map_(self, tensor: Any, callable: Any) -> Any:  # noqa: A002 (torch's name)
        """Each element replaced by ``callable(element, other)``, ``other`` the element of
        ``tensor`` broadcast to this tensor's shape, as torch's ``map_``."""
        _check_untracked("map_", self)
        if isinstance(tensor, TensorBase):
            _check_untracked("map_", tensor)
        return self._update(
            "map_",
            lambda t: _elementwise(
                t, "map_", callable, t, _source(t, tensor, "map_").expand(t.shape)
            ),
        )

    # -- random fills (values from the stream rg.manual_seed seeds, or from generator=) -------
    def uniform_(
        self, a: float = 0.0, b: float = 1.0, *, generator: Any = None, **bounds: Any
    ) -> Any:
        """Values drawn uniformly from ``[a, b)``; torch's keyword names ``to=`` and
        ``**{"from": ...}`` too."""
        unknown = sorted(set(bounds) - {"from", "to"})
        if unknown:
            raise DTypeError(f"uniform_: unexpected keyword arguments {unknown} (from, to)")
        a = bounds.get("from", a)
        b = bounds.get("to", b)
        low, high = _real("uniform_", "from", a), _real("uniform_", "to", b)
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise InvalidArgumentError(
                f"uniform_: expects to return a [from, to) range, but found from={a!r} to={b!r}"
            )

        def draw(t: Any) -> Any:
            if t.dtype not in ("float16", "bfloat16"):
                return _random(t, "uniform_", generator=generator) * (b - a) + a
            # rounded to nearest, a + (b - a) * u reaches b (4 + 255/256 is 5.0 in bfloat16):
            # computed wide, then rounded down onto t's grid, the draws are the values t holds
            # in [a, b), each about equally often, as torch's
            wide = _random(t, "uniform_", dtype="float64", generator=generator) * (b - a) + a
            out = wide.cast(t.dtype)
            out = out.mask_where(
                out.cast("float64").greater(wide),
                out.nextafter(out.new_full(out.shape, -math.inf)),
            )
            # (an a that t cannot hold: its rounding down would fall below a)
            return out.mask_where(
                out.cast("float64").lower(wide.new_full(wide.shape, a)),
                out.nextafter(out.new_full(out.shape, math.inf)),
            )

        return self._update("uniform_", draw)

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Any:
        _real("normal_", "mean", mean)
        if not _real("normal_", "std", std) >= 0.0:  # NaN too
            raise InvalidArgumentError(f"normal_: expects std >= 0.0, but found std {std!r}")
        return self._update(
            "normal_", lambda t: _random(t, "normal_", "normal", generator=generator) * std + mean
        )

    def bernoulli_(self, p: Any = 0.5, *, generator: Any = None) -> Any:
        """Ones with probability ``p`` (a number, or a tensor of them), zeros elsewhere; a
        probability outside ``[0, 1]`` is an error, as torch's (it would silently clip)."""
        _check_probability("bernoulli_", p)

        def draw(t: Any) -> Any:
            probability = p if isinstance(p, TensorBase) else float(p)
            return (_random(t, "bernoulli_", generator=generator) < probability).cast(t.dtype)

        return self._update("bernoulli_", draw)

    def exponential_(self, lambd: float = 1.0, *, generator: Any = None) -> Any:
        if not _real("exponential_", "lambd", lambd) > 0.0:  # NaN too
            raise InvalidArgumentError(
                f"exponential_: expects lambda > 0.0, but found lambda={lambd!r}"
            )
        return self._update(
            "exponential_",
            lambda t: -(1.0 - _random(t, "exponential_", generator=generator)).log() / lambd,
        )

    def log_normal_(self, mean: float = 1.0, std: float = 2.0, *, generator: Any = None) -> Any:
        """``exp`` of normal draws of ``mean`` and ``std`` (torch's: the parameters are the
        underlying normal's)."""
        _real("log_normal_", "mean", mean)
        if not _real("log_normal_", "std", std) > 0.0:  # NaN too
            raise InvalidArgumentError(f"log_normal_: expects std > 0.0, but found std={std!r}")
        return self._update(
            "log_normal_",
            lambda t: (_random(t, "log_normal_", "normal", generator=generator) * std + mean).exp(),
        )

    def cauchy_(self, median: float = 0.0, sigma: float = 1.0, *, generator: Any = None) -> Any:
        """Cauchy draws ``median + sigma * tan(pi * (u - 1/2))`` of uniform ``u``."""
        _real("cauchy_", "median", median)
        if not _real("cauchy_", "sigma", sigma) > 0.0:  # NaN too
            raise InvalidArgumentError(f"cauchy_: expects sigma > 0.0, but found sigma={sigma!r}")
        return self._update(
            "cauchy_",
            lambda t: (
                ((_random(t, "cauchy_", generator=generator) - 0.5) * math.pi).tan() * sigma
                + median
            ),
        )

    def geometric_(self, p: float, *, generator: Any = None) -> Any:
        """The number of Bernoulli(``p``) trials up to the first success (1, 2, ...):
        ``ceil(log(1 - u) / log(1 - p))`` of uniform ``u``, as torch's."""
        probability = _real("geometric_", "p", p)
        if not 0.0 < probability < 1.0:  # NaN too; torch refuses p = 1 as well
            raise InvalidArgumentError(f"geometric_: p must be in (0, 1), got p={p!r}")

        def draw(t: Any) -> Any:
            uniform = _random(t, "geometric_", dtype="float64", generator=generator)
            trials = ((1.0 - uniform).log() / math.log1p(-probability)).ceil()
            # (u == 0 would give 0 trials); counts, so an integer tensor takes them too
            return trials.clamp(min=1.0).cast(t.dtype)

        return self._update("geometric_", draw)

    def random_(self, *args: Any, generator: Any = None, **bounds: Any) -> Any:
        """Integers drawn uniformly from ``[from, to)`` (``random_(to)``, ``random_(from, to)``,
        torch's keywords ``to=`` and ``**{"from": ...}`` too); without ``to`` (or with
        ``to=None``) up to ``2**24`` for float32 and ``2**53`` for float64, inclusive."""
        unknown = sorted(set(bounds) - {"from", "to"})
        if unknown or len(args) + len(bounds) > 2 or ("from" in bounds and args):
            raise DTypeError(
                f"random_: expected (to) or (from, to), got {len(args)} positional and "
                f"keywords {sorted(bounds)}"
            )
        if "from" in bounds and "to" not in bounds:
            raise DTypeError("random_: from= needs to= as well, as in torch")
        if len(args) == 2:
            low, high = args
        elif len(args) == 1:
            low, high = (args[0], bounds["to"]) if "to" in bounds else (0, args[0])
        elif bounds:
            low, high = bounds.get("from", 0), bounds["to"]
        else:
            low, high = 0, None
        if high is None:
            digits = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}
            high = 2 ** digits.get(self.dtype, 63) + 1
            if self.dtype in RANDINT_BOUNDS:  # torch's [0, max] of a narrow integer dtype
                high = RANDINT_BOUNDS[self.dtype][1] + 1
        if not isinstance(low, numbers.Integral) or high <= low:
            raise ShapeError(f"random_: expects from < to, got from={low} to={high}")
        smallest, largest = RANDINT_BOUNDS.get(self.dtype, (low, high - 1))
        if not smallest <= low <= largest or not smallest <= high - 1 <= largest:
            # torch's bounds check: the draws would wrap (uint8's random_(0, 300) gave 44s); a
            # RuntimeError in torch
            raise InvalidValueError(
                f"random_: from={low} and to={high} are out of bounds for {self.dtype} "
                f"({smallest} <= from < to <= {largest + 1})"
            )

        def draw(t: Any) -> Any:
            uniform = _random(t, "random_", dtype="float64", generator=generator)
            drawn = (uniform * (high - low)).floor().cast("int64") + low
            # (a bool tensor's draws are 0 and 1, its own values: torch's random bools)
            return drawn.cast("bool") if t.dtype == "bool" else drawn

        return self._update("random_", draw)

    # -- detaching in place -------------------------------------------------------------------
    def detach_(self) -> Any:
        """Cut this tensor from the graph in place: it becomes a leaf that does not require
        grad (torch's ``detach_``; a view cannot be detached in place, as in torch)."""
        if in_inference_mode() and not self._inference:
            # torch's detach_ of an ordinary tensor inside inference_mode changes nothing (it
            # keeps requiring grad, in its graph); this cut it (round 93)
            return self
        view = getattr(self, "_view", None)
        # (a tensor given by detach() or .data shares its base's memory but is no view of
        # it in torch's autograd: torch detaches it in place, and so does this)
        # (nor is a view of an inference tensor one: torch tracks no views of those)
        if view is not None and view[KIND] not in ("detach", "data") and not self._inference:
            raise AutodiffError(
                "detach_: can't detach views in-place; use detach() instead, as in torch"
            )
        backend = self._backend
        if backend.is_autodiff and self.is_require_grad():
            # a leaf: as requires_grad_(False), which freezes the keys of the leaves earlier
            # writes replaced with it (torch accumulates nothing into a leaf that does not
            # require grad, whatever graph a gradient comes through)
            self.requires_grad_(False)
        elif backend.is_autodiff:
            if self.retains_grad:
                # torch's flag outlives the cut (the tensor's autograd meta keeps it)
                self._retains_grad_after_detach = True
            self._prim = backend.wrap(backend.inner_value(self._prim))
        return self

    # -- item assignment and augmented assignment ---------------------------------------------
    def __setitem__(self, index: Any, value: Any) -> None:
        """``t[index] = value``: basic indices write through the view they select (as
        ``t[index].copy_(value)``); index tensors, lists and masks as torch's ``index_put_``."""
        from .advanced import set_index

        refuse_write("__setitem__", self)
        refuse_multi_output_view("__setitem__", self)
        set_index(self, index, value)

    def __iadd__(self, other: Any) -> Any:
        return self.add_(other)

    def __isub__(self, other: Any) -> Any:
        return self.sub_(other)

    def __imul__(self, other: Any) -> Any:
        return self.mul_(other)

    def __itruediv__(self, other: Any) -> Any:
        return self.div_(other)

    def __ifloordiv__(self, other: Any) -> Any:
        return self._update("__ifloordiv__", lambda t: t // other)

    def __ipow__(self, other: Any) -> Any:
        return self.pow_(other)

    def __imod__(self, other: Any) -> Any:
        return self.remainder_(other)

    def __iand__(self, other: Any) -> Any:
        return self._update("__iand__", lambda t: t & other)

    def __ior__(self, other: Any) -> Any:
        return self._update("__ior__", lambda t: t | other)

    def __ixor__(self, other: Any) -> Any:
        return self._update("__ixor__", lambda t: t ^ other)

    def __ilshift__(self, other: Any) -> Any:
        return self._update("__ilshift__", lambda t: t << other)

    def __irshift__(self, other: Any) -> Any:
        return self._update("__irshift__", lambda t: t >> other)


def _filled(t: Any, value: Any, op: str = "fill_") -> Any:
    """A tensor of ``t``'s shape, dtype and device holding ``value`` (untracked)."""
    if isinstance(value, int):
        check_scalar_int(value, op)
    if isinstance(value, complex | np.complexfloating):
        value = written_scalar(op, value, t.dtype)
    if t.dtype == "bool":
        value = bool(value)
    elif t.dtype == "int64":
        if isinstance(value, float) and not -(2.0**63) <= value < 2.0**63:  # NaN too
            raise DTypeError(f"fill_: cannot fill an int64 tensor with {value!r}")
        value = int(value)  # torch converts, truncating toward zero (fill_(1.5) writes 1)
    elif t.dtype in NARROW_INTS:
        value = written_scalar(op, value, t.dtype)
    elif t.dtype in ("complex64", "complex128"):
        check_float_range(op, value, t.dtype)
        value = complex(value)
    else:
        check_float_range(op, value, t.dtype)
        value = float(value)
    return wrap(t, t._backend.full(t.shape, value, t.dtype, t._device))


def _copied(t: Any, src: Any, op: str) -> Any:
    """What ``t.copy_(src)`` (or ``t[...] = src``) writes into ``t``: ``src`` in ``t``'s dtype,
    on its backend and device, never ``src`` itself where ``src`` is in the graph and ``t`` is
    not. Written as is, ``t`` shared ``src``'s node: ``t.retain_grad()`` and ``t``'s hooks got
    ``src``'s whole gradient (round 93: ``t.copy_(o); loss = (2 * t).sum() + (3 * o).sum()``
    gave ``t`` the gradient 5, torch's 2), and ``t.grad_fn`` was ``src``'s. torch records a
    ``CopyBackwards`` node of its own (named by :func:`_name_written`)."""
    value = _converted(t, _source(t, src, op))
    if value is src and src.requires_grad and not t.requires_grad:
        return value.clone()
    return value


#: torch's names of the node an in-place write records on the tensor written, where it is no
#: view (through a view, the root's is ``CopySlices`` and the views' ``AsStridedBackward0``);
#: the other writes record their out-of-place op, named as it is
_WRITTEN_NODE_NAMES = {
    "copy_": "torch::autograd::CopyBackwards",
    "zero_": "ZeroBackward0",
    "fill_": "FillBackward2",
    "index_put_": "IndexPutBackward0",
}


def _name_written(
    t: Any, op: str, before: Any, root_before: Any, operands: tuple | None = None
) -> None:
    """Give the nodes a recorded in-place write of ``t`` made torch's names (``before``,
    ``root_before``: the nodes ``t`` and its root held before the write). A write through a
    view is torch's ``CopySlices`` at the root (retrograd's ``slice_assign`` node showed as
    ``SliceAssignBackward0``, no torch name); ``copy_``, ``zero_``, ``fill_`` of a tensor that
    is no view record ``CopyBackwards``, ``ZeroBackward0``, ``FillBackward2`` (they showed as
    ``WhereBackward0``, the ``mask_where`` that keeps the old value in the graph, or as the
    copied tensor's own node). Their ``next_functions`` are torch's (:func:`_written_edges`)."""
    root = root_of(t)
    node = getattr(root._prim, "node", None)
    if node is None or node is root_before or node.op is None:
        return
    if root is not t:
        node.torch_name = "torch::autograd::CopySlices"
        if operands is not None:
            node.torch_inputs = _written_edges(root_before, operands)
    elif node is not before and op in _WRITTEN_NODE_NAMES:
        filled_by_tensor = op == "fill_" and node.op.name != "mask_where"
        node.torch_name = "FillBackward3" if filled_by_tensor else _WRITTEN_NODE_NAMES[op]
        if operands is not None:
            node.torch_inputs = _written_edges(before, operands)


def _written_edges(old: Any, operands: tuple) -> tuple:
    """torch's ``next_functions`` of the node an in-place write records: the written
    tensor's node before the write (``None`` where it required no grad), then one per
    operand, the operand's node (``None`` for a number or a tensor outside the graph).
    Read from the recorded op's inputs, ``CopyBackwards`` lacked the leading ``(None, 0)``
    of a tensor that required no grad, and listed the clone of the source it records (or
    the written tensor's old node last); ``CopySlices`` listed the whole write's op
    (``AddBackward0``) where torch lists the operand (round 94)."""
    edges = [old]
    for operand in operands:
        edge = None
        if isinstance(operand, TensorBase) and operand._backend.is_autodiff:
            edge = getattr(operand._prim, "node", None)
        edges.append(edge)
    return tuple(edges)


def _converted(t: Any, src: Any) -> Any:
    """``src`` in ``t``'s dtype: torch's ``copy_`` converts any dtype (float into an int or
    bool tensor too), unlike the in-place arithmetic, which refuses a narrowing."""
    return src if src.dtype == t.dtype else src.cast(t.dtype)


#: the dtype of the 0-d tensor torch makes of a Python number (a "wrapped number")
_NUMBER_DTYPES = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}


def _source(t: Any, src: Any, op: str) -> Any:
    if isinstance(src, np.generic):
        src = src.item()
    if op == "copy_" and isinstance(src, complex) and t.dtype not in _NONINTEGRAL:
        src = src.real  # (then truncated as a float is, NaN and overflow refused)
    if op == "copy_" and isinstance(src, int | complex):
        # torch copies a number as the 0-d tensor of it, cast as any tensor is: an int
        # wrapped into a narrow dtype (int8's 128 is -128), a complex number's real part,
        # its truth into bool (a fill or a write refuses those instead); a float into an
        # integer dtype as a fill (past the dtype, or NaN, torch's cast is undefined)
        if isinstance(src, int):
            check_scalar_int(src, op)
        natural = _NUMBER_DTYPES[type(src)]
        return wrap(t, t._backend.full((), src, natural, t._device))
    if isinstance(src, SCALARS):
        return _filled(t, src, op)
    if not isinstance(src, TensorBase):
        src = lift(t, np.asarray(src), op)
    elif src._backend is not t._backend:
        src = on_backend(src, t._backend, op)
    if src._device is not t._device:
        src = src.to(t._device)
    return src


_NONINTEGRAL = (*FLOAT_DTYPES, *COMPLEX_DTYPES, "bool")


def _check_untracked(op: str, t: Any) -> None:
    if t.requires_grad:
        raise AutodiffError(
            f"{op}: can't call {op}() on a tensor that requires grad (the callable is not "
            f"differentiable); use t.detach().{op}(...) instead"
        )


def _elementwise(t: Any, op: str, f: Any, *operands: Any) -> Any:
    """``f`` of the operands' elements (Python numbers, as torch passes them), as a
    tensor of ``t``'s dtype, device and backend (untracked)."""
    if not callable(f):
        raise DTypeError(f"{op}: expected a callable, got {type(f).__name__}")
    columns = [np.asarray(x.numpy()).ravel().tolist() for x in operands]
    values = [f(*elements) for elements in zip(*columns)]
    for value in values:
        if not isinstance(value, SCALARS) or isinstance(value, complex):
            raise DTypeError(f"{op}: the callable must return a number, got {type(value).__name__}")
    array = np.asarray(values, dtype=np.dtype(t.dtype)).reshape(tuple(t.shape))
    return from_host(type(t)._result, array, t.dtype, t._backend, t._device)


def _random(
    t: Any,
    op: str,
    distribution: str = "uniform",
    dtype: str | None = None,
    *,
    generator: Any = None,
) -> Any:
    """Draws of ``t``'s shape, in float (``t``'s dtype when it is one), from the seeded
    stream or from ``generator`` (an ``rg.Generator``)."""
    backend = t._backend
    if dtype is None:
        dtype = t.dtype if t.is_float() else "float64"
    if checked_generator(op, generator) is not None:
        drawn = generator.draws(t.shape, distribution, dtype)
        return untracked(from_host(type(t)._result, drawn, dtype, backend, t._device))
    return wrap(t, backend.random(t.shape, distribution, dtype, t._device))


#: torch's in-place forms of methods whose arguments they share: ``x.<name>_(...)`` is
#: ``x.<name>(...)`` written into ``x`` through :meth:`InplaceMixin._update` (the dtype kept;
#: a result that does not cast to it, a float into an int tensor, is refused as in torch).
SAME_ARGUMENTS = (
    "absolute", "acos", "acosh", "addbmm", "addmm", "addmv", "addr", "arccos", "arccosh",
    "arcsin", "arcsinh", "arctan", "arctan2", "arctanh", "asin", "asinh", "atan", "atan2",
    "atanh", "baddbmm", "bitwise_and", "bitwise_left_shift", "bitwise_not", "bitwise_or",
    "bitwise_right_shift", "bitwise_xor", "copysign", "cosh", "cumprod", "cumsum", "deg2rad",
    "digamma", "divide", "erf", "erfc", "exp2", "expm1", "fix", "floor_divide", "fmod", "frac",
    "gcd", "greater", "greater_equal", "heaviside", "hypot", "i0", "igamma", "igammac",
    "index_put", "lcm", "ldexp", "less", "less_equal", "lgamma", "log10", "log1p", "log2",
    "logical_and", "logical_not", "logical_or", "logical_xor", "logit", "multiply",
    "mvlgamma", "nan_to_num", "negative", "nextafter", "not_equal", "polygamma", "rad2deg",
    "renorm", "scatter_reduce", "sgn", "sinc", "sinh", "subtract", "tan", "true_divide",
    "xlogy",
)  # fmt: skip


#: those of :data:`SAME_ARGUMENTS` that are elementwise in their tensor operands: torch
#: refuses an operand overlapping the written tensor in part (:func:`.views.refuse_partial_overlap`)
_ELEMENTWISE_OPERANDS = frozenset(
    ["arctan2", "atan2", "bitwise_and", "bitwise_left_shift", "bitwise_or"]
    + ["bitwise_right_shift", "bitwise_xor", "copysign", "divide", "floor_divide", "fmod"]
    + ["gcd", "greater", "greater_equal", "heaviside", "hypot", "igamma", "igammac", "lcm"]
    + ["ldexp", "less", "less_equal", "logical_and", "logical_or", "logical_xor", "multiply"]
    + ["nextafter", "not_equal", "subtract", "true_divide", "xlogy"]
)


def _in_place(name: str) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if name in _ELEMENTWISE_OPERANDS:
            refuse_partial_overlap(f"{name}_", self, *args, *kwargs.values())
        elif name == "index_put" and len(args) > 1:  # (torch's index_put_: the same too)
            refuse_partial_overlap("index_put_", self, args[1], full=True)
            accumulate = args[2] if len(args) > 2 else kwargs.get("accumulate", False)
            if put_through_aliases(self, args[0], args[1], accumulate):
                return self
        if kwargs.get("dtype") is not None:  # cumsum_/cumprod_: only the tensor's own dtype
            dtype = canonical_dtype(f"{name}_", kwargs["dtype"])
            if dtype != self.dtype:
                raise DTypeError(
                    f"{name}_: dtype={dtype} differs from the tensor's own {self.dtype} (an "
                    "in-place result keeps it, as in torch)"
                )
        operands = None
        if name == "index_put":  # (torch's IndexPutBackward0 lists the values: _written_edges)
            operands = (args[1] if len(args) > 1 else kwargs.get("values"),)
        return self._update(
            f"{name}_", lambda t: getattr(t, name)(*args, **kwargs), operands=operands
        )

    method.__name__ = method.__qualname__ = f"{name}_"
    method.__doc__ = f"``{name}`` in place (torch's ``{name}_``); returns ``self``."
    return method


for _name in SAME_ARGUMENTS:
    if not hasattr(InplaceMixin, f"{_name}_"):
        setattr(InplaceMixin, f"{_name}_", _in_place(_name))
del _name


def _real(op: str, name: str, value: Any) -> float:
    """A random fill's parameter as a float: a number (or a one-element tensor), as torch's."""
    if isinstance(value, TensorBase) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise DTypeError(f"{op}: {name} must be a number, got {type(value).__name__}")
    return float(value)


def _check_probability(op: str, p: Any) -> None:
    if isinstance(p, TensorBase):
        if p.numel() and not bool(((p >= 0) & (p <= 1)).all()):
            raise InvalidArgumentError(
                f"{op}: probabilities must be in [0, 1], got values from {float(p.min())} to "
                f"{float(p.max())}"
            )
        return
    probability = float(p)
    if not 0.0 <= probability <= 1.0:
        raise InvalidArgumentError(f"{op}: p must be in [0, 1], got {p!r}")


def _cast(value: Any, dtype: str) -> Any:
    return value if value.dtype == dtype else value.cast(dtype)
