"""The one in-place update of the library: a tensor object made to hold new values.

Operations never modify their operands. What PyTorch code does in place, and retrograd must do
too for that code to port line for line, is rebinding a *slot*: an optimizer step replaces a
parameter's value (``nn.Parameter``, or any leaf given to an optimizer), batch norm replaces its
running statistics, ``load_state_dict`` and ``nn.init`` replace a parameter's values. The
tensor object stays the same (a tied parameter stays one object; a module's attribute, an
optimizer's list and a user's reference all see the new value); only the primitive it holds
changes. A graph already recorded from the old value is unaffected: nodes hold primitives, not
tensor objects.

:func:`assign` is that rebinding, used by ``nn`` and ``optim`` (one layer, which do not import
each other) through this module.
"""

from __future__ import annotations

from typing import Any

from ..errors import DTypeError, ShapeError, shape_text
from ._dispatch import TensorBase, on_backend

__all__ = ["assign"]


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
    ``target`` stays what it was: a leaf requiring grad if it was one (a fresh leaf, so a
    gradient of the old value in an earlier ``Gradients`` is not mistaken for one of the new),
    carrying its distributed mark; untracked otherwise, or with ``untrack=True``.
    ``check_shape`` (the default) requires the old shape: a ``ShapeError`` naming ``op``.
    """
    if not isinstance(value, TensorBase):
        raise DTypeError(f"{op}: expected a tensor, got {type(value).__name__}")
    backend = target._backend
    if check_shape and tuple(value.shape) != tuple(target.shape):
        raise ShapeError(
            f"{op}: the tensor has shape {shape_text(target.shape)}, the new value "
            f"{shape_text(value.shape)}"
        )
    if value._backend is not backend:
        value = on_backend(value, backend, op)
    if keep_dtype and value.dtype != target.dtype:
        value = value.cast(target.dtype)
    device = target._device if device is None else device
    if value._device != device:
        value = value.to(device)
    primitive = value._prim
    if backend.is_autodiff:
        old = target._prim
        primitive = backend.wrap(backend.inner_value(primitive))  # untracked, same values
        if backend.is_require_grad(old) and not untrack:
            param_id = backend.param_id(old)
            primitive = (
                backend.set_distributed(primitive, param_id)
                if param_id is not None
                else backend.require_grad(primitive)
            )
    target._prim = primitive
    target._device = device
    return target
