"""The :class:`Tensor` class: the mixins combined over the data every tensor holds.

A :class:`Tensor` is a backend primitive, the backend it belongs to, and a device label
(:class:`~retrograd.tensor._dispatch.TensorBase`). Its methods come from the mixins, organised
as tinygrad's tensor surface is: each mixin declares the one primitive it needs and gives its
methods in terms of it. Here that primitive is ``_apply``
(:func:`~retrograd.tensor._dispatch.apply`), which this class provides:

- :class:`~retrograd.tensor.elementwise.ElementwiseMixin`: arithmetic, operators, unary math,
  activations, comparisons, logic;
- :class:`~retrograd.tensor.reduce.ReduceMixin`: reductions, sorting, matmul;
- :class:`~retrograd.tensor.shape.ShapeMixin`: reshaping, broadcasting, splitting;
- :class:`~retrograd.tensor.indexing.IndexingMixin`: ``t[...]``, slices, gather/scatter, masks.

What is left here is what is particular to a tensor: metadata, conversion to host values
(the user asked for them), casts, devices, and the autodiff surface (``require_grad``,
``backward``, gradients). Every method validates its arguments; errors come out of the
hierarchy in :mod:`retrograd.errors`, naming the operation and the shapes or values at fault,
and leave every tensor and graph as they were.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..context import current_backend
from ..device import Device
from ..errors import AutodiffError, DTypeError, ShapeError, shape_text
from ._dispatch import (
    DTYPES,
    FLOAT_DTYPES,
    TensorBase,
    apply,
    dispatch,
    lift,
    normalize_dim,
    on_backend,
)
from .elementwise import ElementwiseMixin
from .indexing import IndexingMixin
from .reduce import ReduceMixin
from .shape import ShapeMixin

__all__ = ["Tensor"]


class Tensor(ElementwiseMixin, ReduceMixin, ShapeMixin, IndexingMixin, TensorBase):
    """An n-dimensional array on a backend; differentiable on the autodiff backend.

    >>> import retrograd as rg
    >>> x = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).require_grad()
    >>> grads = (x * x).sum().backward()
    >>> x.grad(grads).tolist()
    [[2.0, 4.0], [6.0, 8.0]]
    """

    __slots__ = ()
    __array_priority__ = 1000  # NumPy defers to our reflected operators
    __hash__ = object.__hash__  # ``==`` is elementwise; a tensor hashes by identity

    #: The one primitive the mixins need, ``self._apply(op, inputs, params=())``: run a backend
    #: kernel, operands lifted and promoted, errors translated (:func:`._dispatch.apply`).
    _apply = dispatch

    # -- metadata -----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The dimensions, as a tuple of ints."""
        return tuple(self._backend.shape(self._prim))

    @property
    def ndim(self) -> int:
        return len(self._backend.shape(self._prim))

    @property
    def dtype(self) -> str:
        """``"float32"``, ``"float64"``, ``"int64"`` or ``"bool"``."""
        return self._backend.dtype(self._prim)

    @property
    def device(self) -> Device:
        return self._device

    @property
    def backend(self) -> Any:
        return self._backend

    @property
    def primitive(self) -> Any:
        """The backend primitive this tensor wraps."""
        return self._prim

    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def dim(self) -> int:
        """The number of dimensions (torch's ``dim()``; :attr:`ndim`)."""
        return len(self._backend.shape(self._prim))

    def numel(self) -> int:
        return math.prod(self.shape)

    def size(self, dim: int | None = None) -> Any:
        """The shape, or with ``dim`` the size of that dimension (negative counts from the end)."""
        shape = self.shape
        return shape if dim is None else shape[normalize_dim("size", dim, len(shape))]

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    # -- conversion ---------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (shares memory with the tensor where it can)."""
        return np.asarray(self._backend.to_numpy(self._prim))

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        if dtype is not None:
            array = array.astype(dtype, copy=False)
        return np.array(array, copy=True) if copy else array

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Any:
        """The value of a one-element tensor as a Python scalar."""
        array = self.numpy()
        if array.size != 1:
            raise ShapeError(f"item: expected a one-element tensor, got shape {list(array.shape)}")
        return array.reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        return bool(self.item())

    def __index__(self) -> int:
        if self.dtype != "int64":
            raise DTypeError(
                f"__index__: only int64 tensors can be used as an index, got {self.dtype}"
            )
        return int(self.item())

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        tracked = self._backend.is_autodiff and self._backend.is_tracked(self._prim)
        suffix = (
            ", requires_grad"
            if tracked and self.is_require_grad()
            else (", tracked" if tracked else "")
        )
        return f"tensor({body}, dtype={self.dtype}{suffix})"

    def cast(self, dtype: str) -> Tensor:
        """This tensor in ``dtype``; float-to-float casts keep the gradient flowing."""
        if dtype not in DTYPES:
            raise DTypeError(f"cast: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        if dtype == self.dtype:
            return self
        return apply("cast", (self,), (dtype,))

    def float(self) -> Tensor:
        """Cast to float32 (a float64 tensor stays float64)."""
        return self if self.dtype in FLOAT_DTYPES else self.cast("float32")

    def double(self) -> Tensor:
        return self.cast("float64")

    def int(self) -> Tensor:
        return self.cast("int64")

    def bool(self) -> Tensor:
        return self.cast("bool")

    def to(self, device: Device | str) -> Tensor:
        """The same values labelled with (and moved to) ``device``."""
        device = Device(device)
        return Tensor(self._backend.to_device(self._prim, device), self._backend, device)

    # -- autodiff -----------------------------------------------------------------------------
    def _autodiff(self, op: str) -> Any:
        backend = self._backend
        if not backend.is_autodiff:
            raise AutodiffError(
                f"{op}: tensors of {backend!r} do not track gradients; "
                "create them on rg.Autodiff(...) (the default backend)"
            )
        return backend

    def require_grad(self) -> Tensor:
        """Mark this leaf as requiring grad (in place, returns ``self``); error on a non-leaf.

        >>> import retrograd as rg
        >>> rg.tensor([1.0]).require_grad().is_require_grad()
        True
        """
        backend = self._autodiff("require_grad")
        if self.dtype not in FLOAT_DTYPES:
            raise DTypeError(
                f"require_grad: only float tensors can require grad, this one is {self.dtype}"
            )
        self._prim = backend.require_grad(self._prim)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """PyTorch spelling of :meth:`require_grad`."""
        return self.require_grad() if requires_grad else self.detach()

    def is_require_grad(self) -> bool:
        """Whether this is a leaf that requires grad."""
        return self._backend.is_autodiff and self._backend.is_require_grad(self._prim)

    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow through this tensor (leaf or tracked intermediate)."""
        return self._backend.is_autodiff and self._backend.is_tracked(self._prim)

    def detach(self) -> Tensor:
        """A new leaf cut from the graph, requiring grad iff this one was such a leaf."""
        if not self._backend.is_autodiff:
            return self
        return Tensor(self._backend.detach(self._prim), self._backend, self._device)

    def retain_grad(self) -> Tensor:
        """Keep this intermediate's gradient in the result of ``backward`` (returns ``self``)."""
        self._autodiff("retain_grad").retain_grad(self._prim)
        return self

    def backward(
        self,
        grad: Tensor | None = None,
        *,
        retain_graph: bool = False,
        create_graph: bool = False,
    ) -> Any:
        """Backpropagate from this tensor and return the :class:`~retrograd.Gradients`.

        ``grad`` seeds the backward (ones of this tensor's shape by default). The part of the
        graph walked is consumed unless ``retain_graph``; ``create_graph`` records the backward
        itself, so gradients are tracked tensors that can be differentiated again.
        """
        backend = self._autodiff("backward")
        seed = None
        if grad is not None:
            grad = lift(self, grad, "backward")
            if grad.shape != self.shape:
                raise ShapeError(
                    f"backward: grad has shape {shape_text(grad.shape)}, expected "
                    f"{shape_text(self.shape)}"
                )
            seed = backend.inner_value(grad.cast(self.dtype)._prim)
        return backend.backward(self._prim, seed, retain_graph, create_graph, self._device)

    def grad(self, grads: Any) -> Tensor | None:
        """This tensor's gradient in ``grads``, on the inner backend, or ``None``."""
        value = self._autodiff("grad").grad(self._prim, grads)
        return None if value is None else Tensor(value, grads.backend, self._device)

    def grad_remove(self, grads: Any) -> Tensor | None:
        """Remove this tensor's gradient from ``grads`` and return it."""
        value = self._autodiff("grad_remove").grad_remove(self._prim, grads)
        return None if value is None else Tensor(value, grads.backend, self._device)

    def grad_replace(self, grads: Any, grad: Tensor) -> None:
        """Set this tensor's gradient in ``grads`` to ``grad``."""
        backend = self._autodiff("grad_replace")
        if grad.shape != self.shape:
            raise ShapeError(
                f"grad_replace: grad has shape {shape_text(grad.shape)}, expected "
                f"{shape_text(self.shape)}"
            )
        value = grad._prim
        if grad._backend is not grads.backend:
            value = on_backend(grad, grads.backend, "grad_replace")._prim
        backend.grad_replace(self._prim, grads, value)

    def inner(self) -> Tensor:
        """The same values on the inner backend, without graph."""
        backend = self._autodiff("inner")
        return Tensor(backend.inner_value(self._prim), backend.inner, self._device)

    @staticmethod
    def from_inner(inner_tensor: Tensor, backend: Any = None) -> Tensor:
        """An untracked tensor of the autodiff ``backend`` holding ``inner_tensor``'s values."""
        backend = backend if backend is not None else current_backend()
        if not backend.is_autodiff:
            raise AutodiffError(f"from_inner: {backend!r} is not an autodiff backend")
        return Tensor(backend.wrap(inner_tensor._prim), backend, inner_tensor._device)

    def set_distributed(self, param_id: Any) -> Tensor:
        """Mark this parameter's gradient for all-reduce during backward (returns ``self``)."""
        backend = self._autodiff("set_distributed")
        self._prim = backend.set_distributed(self._prim, param_id)
        return self

    def is_distributed(self) -> bool:
        return self._backend.is_autodiff and self._backend.param_id(self._prim) is not None
