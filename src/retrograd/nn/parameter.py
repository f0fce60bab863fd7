"""``nn.Parameter``: a named, mutable slot holding a leaf tensor that requires a gradient.

A :class:`Parameter` *is* a tensor (``p.grad(grads)``, ``np.asarray(p)``, ``p * 2``,
``F.linear(x, p)``); what sets it apart is identity. Assigning one to a module attribute
registers it, and the object stays the same for the module's life: an optimizer step,
``load_state_dict``, ``nn.init.*_`` and ``module.to(dtype)`` replace the value it holds
(:func:`retrograd.tensor.inplace.assign`), never the object. So the same ``Parameter`` reachable
under two names (weight tying) is one parameter everywhere: listed once, one gradient (its
leaf's, the sum of both uses), one optimizer state, one object after every update.

Operations on a parameter return plain tensors (``type(2 * p) is rg.Tensor``), as in PyTorch:
only a ``Parameter`` assigned to a module registers as one.

>>> import retrograd as rg
>>> from retrograd import nn
>>> p = nn.Parameter(rg.ones((2,)))
>>> p.is_require_grad(), type(p * 2).__name__
(True, 'Tensor')
"""

from __future__ import annotations

from typing import Any

from ..errors import DTypeError, UninitializedError, check_bool
from ..tensor import GRAD_DTYPES, Tensor, tensor, zeros
from ..tensor._dispatch import normalize_dim
from ..tensor.dtypes import Size
from ..tensor.inference import refuse_require_grad
from ..tensor.inplace import assign

__all__ = ["Buffer", "Parameter", "UninitializedBuffer", "UninitializedParameter", "is_lazy"]


class Parameter(Tensor):
    """A leaf tensor that requires grad (``requires_grad=False``: an untracked one), held in a
    slot that updates replace the value of in place.

    ``Parameter(t)`` shares ``t``'s values but is a new leaf: ``t`` itself is not marked or
    changed. Arrays and nested lists are accepted too (as ``rg.tensor`` reads them).
    """

    __slots__ = ()
    _result = Tensor  # what operations on a parameter return (see TensorBase._result)

    def __init__(self, data: Any = None, requires_grad: bool = True):
        check_bool("Parameter", requires_grad, "requires_grad")
        if data is None:
            data = tensor([])
        elif not isinstance(data, Tensor):
            data = tensor(data)
        if requires_grad and data.dtype not in GRAD_DTYPES:
            raise DTypeError(
                f"Parameter: only float tensors can require grad, got {data.dtype} of shape "
                f"{list(data.shape)}"
            )
        if requires_grad and data.is_inference():
            refuse_require_grad("Parameter", data)
        backend = data.backend
        primitive = data.primitive
        if backend.is_autodiff:
            # A fresh leaf on the same values: ``data``'s own node (if any) stays its own.
            primitive = backend.wrap(backend.inner_value(primitive))
            if requires_grad:
                primitive = backend.require_grad(primitive)
        super().__init__(primitive, backend, data.device)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class Buffer(Tensor):
    """torch's ``nn.Buffer`` (torch 2.5): ``self.x = nn.Buffer(t, persistent=False)`` in a
    module registers ``t``'s values as a buffer, as ``register_buffer("x", t, persistent)``
    does. ``Buffer(t)`` is a new leaf on ``t``'s values (requiring grad iff ``t`` did, as
    torch's); the buffer the module then holds is a plain tensor, untracked as every
    registered buffer here. It prints as a tensor, as torch's (a plain tensor there)."""

    _result = Tensor

    def __init__(self, data: Any = None, *, persistent: bool = True) -> None:
        if data is None:
            data = tensor([])
        elif not isinstance(data, Tensor):
            data = tensor(data)
        backend, primitive = data.backend, data.primitive
        if backend.is_autodiff:  # torch's: a new leaf, requiring grad iff ``data`` did
            requires_grad = data.requires_grad
            primitive = backend.wrap(backend.inner_value(primitive))
            if requires_grad:
                primitive = backend.require_grad(primitive)
        super().__init__(primitive, backend, data.device)
        self.persistent = bool(persistent)


class _Uninitialized:
    """What a lazy module holds before its first call (torch's ``UninitializedTensorMixin``):
    an empty placeholder that prints as ``<UninitializedParameter>`` and refuses to be
    counted, where an empty ``[0]`` tensor would quietly count as 0 elements."""

    __slots__ = ()

    def numel(self) -> int:
        raise UninitializedError(
            f"numel: attempted to use an {type(self).__name__} (a lazy module's, before its "
            "first call set its shape): call the module on an input first, or skip it with "
            "nn.parameter.is_lazy(p)"
        )

    @property
    def shape(self) -> Any:
        raise UninitializedError(
            f"shape: can't access the shape of an {type(self).__name__} (a lazy module's, "
            "before its first call set it); this usually happens in load_state_dict when "
            "loading it into an initialized one: call the module on an input first"
        )

    def size(self, dim: int | None = None) -> Any:
        """The placeholder's own size, ``[0]`` (torch's ``size()`` answers it too)."""
        shape = tuple.__new__(Size, self._backend.shape(self._prim))
        return shape if dim is None else shape[normalize_dim("size", dim, len(shape))]

    def __len__(self) -> int:
        raise UninitializedError(
            f"len: attempted to use an {type(self).__name__} (a lazy module's, before its "
            "first call set its shape): call the module on an input first"
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    __str__ = __repr__

    def materialize(self, shape: Any, device: Any = None, dtype: Any = None) -> None:
        """Give the placeholder ``shape`` (its values zeros, where torch's are left
        uninitialized) and make it, the same object, the class it becomes (``Parameter`` or
        ``Tensor``): torch's ``UninitializedTensorMixin.materialize``, which a custom lazy
        module calls from its ``initialize_parameters``."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        value = zeros(shape, dtype=dtype or self.dtype, device=device or self.device)
        op = f"{type(self).__name__}.materialize"
        assign(self, value, op, check_shape=False, keep_dtype=False, device=device)
        self.__class__ = self.cls_to_become


class UninitializedParameter(_Uninitialized, Parameter):
    """A lazy module's parameter before its first call; the same object becomes a
    :class:`Parameter` holding the values when the module is built (torch's)."""

    __slots__ = ()
    cls_to_become = Parameter


class UninitializedBuffer(_Uninitialized, Tensor):
    """A lazy module's buffer before its first call (torch's ``UninitializedBuffer``)."""

    __slots__ = ()
    cls_to_become = Tensor


def is_lazy(param: Any) -> bool:
    """Whether ``param`` is a lazy module's uninitialized parameter or buffer (torch's)."""
    return isinstance(param, _Uninitialized)
