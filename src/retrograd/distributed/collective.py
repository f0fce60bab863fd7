"""The differentiable ``all_reduce`` and its pending result, :class:`CollectiveTensor`.

Forward reduces the tensors of every device in ``devices``; backward all-reduces the incoming
gradient with the same operation (Burn's rule). For ``SUM`` that is exact: each input
contributes once to every output. For ``MEAN`` each output is ``(1/n) * sum``, so an input's
gradient is ``(1/n) * sum`` of the outputs' gradients: the mean again, its scaling done by
the collective.

The autodiff node is an :class:`~retrograd.autodiff.ops.Op` created outside the op table and
run with ``Autodiff.apply``. It is compute-bound and not ``recomputable``, so no checkpointing
strategy ever recomputes it: its "forward" only hands over the result the collective already
produced.

The running context of a device is found in :mod:`.registry`; the context starts and waits
for the collective (``start_all_reduce``, ``wait_for``, ``all_reduce_array``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..autodiff.ops import Op
from ..device import Device
from ..errors import DistributedError, DTypeError
from .buffers import from_buffer, to_buffer
from .config import ReduceOperation
from .registry import active_context

__all__ = ["CollectiveTensor", "all_reduce"]


class _Result:
    """The collective's output, handed once to the op's forward (which keeps nothing)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def take(self) -> Any:
        value, self.value = self.value, None
        if value is None:
            raise DistributedError("all_reduce: a collective's result cannot be recomputed")
        return value

    def __repr__(self) -> str:
        return "<all-reduce result>"


def _forward(backend: Any, x: Any, op: Any, devices: Any, device: Any, result: _Result) -> Any:
    return result.take()


def _backward(B: Any, g: Any, op: ReduceOperation, devices: tuple, device: Device) -> Any:  # noqa: N803
    context = _context_for(device, "all_reduce backward")
    reduced = context.all_reduce_array(device, devices, to_buffer(B, g), op)
    if getattr(B, "is_autodiff", False):  # create_graph: the gradient's reduction is recorded
        return record_all_reduce(B, g, reduced, op, devices, device)
    return from_buffer(B, reduced, g, device, B.dtype(g))


ALL_REDUCE = Op(
    "distributed_all_reduce",
    ("x",),
    ("op", "devices", "device", "result"),
    (_backward,),
    memory_bound=False,
    forward=_forward,
    recomputable=False,
)


def record_all_reduce(
    backend: Any,
    x: Any,
    reduced: np.ndarray,
    op: ReduceOperation,
    devices: tuple[Device, ...],
    device: Device,
) -> Any:
    """``reduced`` (the all-reduce of ``x``'s value, already computed) as the output of an
    all-reduce node of the autodiff ``backend`` over ``x``."""
    value = from_buffer(backend.inner, reduced, backend.inner_value(x), device)
    return backend.apply(ALL_REDUCE, x, params=(op, tuple(devices), device, _Result(value)))


def _context_for(device: Device, what: str) -> Any:
    context = active_context(device)
    if context is None:
        raise DistributedError(
            f"{what}: no running DistributedContext hosts {device}; create the tensor with "
            "device= one of the context's devices, inside `with DistributedContext(...)`"
        )
    return context


class CollectiveTensor:
    """The pending result of :func:`all_reduce`; :meth:`resolve` waits for it.

    >>> # out = dist.all_reduce(t, dist.ReduceOperation.SUM, devices).resolve()
    """

    __slots__ = ("_context", "_devices", "_op", "_pending", "_resolved", "_tensor")

    def __init__(
        self, tensor: Any, pending: Any, op: ReduceOperation, devices: tuple, context: Any
    ):
        self._tensor = tensor
        self._pending = pending
        self._op = op
        self._devices = devices
        self._context = context
        self._resolved = None

    @property
    def device(self) -> Device:
        return self._tensor.device

    def is_resolved(self) -> bool:
        """Whether the collective has completed (``resolve`` would not wait)."""
        return self._resolved is not None or self._pending.done()

    def resolve(self) -> Any:
        """Wait for the collective (at most the context's timeout) and return the reduced
        tensor, on the input's backend and device; differentiable on autodiff backends."""
        if self._resolved is not None:
            return self._resolved
        from ..tensor import Tensor

        tensor = self._tensor
        reduced = self._context.wait_for(self._pending, self._describe())[0]
        backend, device = tensor.backend, tensor.device
        if backend.is_autodiff:
            primitive = record_all_reduce(
                backend, tensor.primitive, reduced, self._op, self._devices, device
            )
        else:
            primitive = from_buffer(backend, reduced, tensor.primitive, device)
        self._resolved = Tensor(primitive, backend, tensor.device)
        self._tensor = None
        return self._resolved

    def _describe(self) -> str:
        return f"all_reduce ({self._op.name}) over {', '.join(map(str, self._devices))}"

    def __repr__(self) -> str:
        state = "resolved" if self.is_resolved() else "pending"
        return f"CollectiveTensor({self._describe()}, {state})"


def all_reduce(tensor: Any, op: ReduceOperation, devices: Iterable[Any]) -> CollectiveTensor:
    """Start reducing ``tensor`` with the tensors the other ``devices`` pass to their own
    ``all_reduce`` call (the k-th call of each device over the same devices are matched).

    Non-blocking: returns a :class:`CollectiveTensor`, whose ``resolve()`` waits. Every device
    must pass the same ``op``, ``devices`` and tensor shape. Differentiable: backward
    all-reduces the gradient with the same ``op``.

    >>> # with dist.DistributedContext(devices, config):        (in each device's thread)
    >>> #     y = dist.all_reduce(x, dist.ReduceOperation.MEAN, devices).resolve()
    """
    from ..tensor import Tensor

    if not isinstance(tensor, Tensor):
        raise DTypeError(f"all_reduce: expected a Tensor, got {type(tensor).__name__}")
    if not isinstance(op, ReduceOperation):
        raise DTypeError(f"all_reduce: op must be a ReduceOperation, got {op!r}")
    device = tensor.device
    context = _context_for(device, "all_reduce")
    devices = tuple(Device(d) for d in devices)
    if device not in devices:
        raise DistributedError(
            f"all_reduce: the tensor is on {device}, which is not one of the devices "
            f"{', '.join(map(str, devices))}"
        )
    dtype = tensor.dtype
    if dtype not in ("float32", "float64") and (op is ReduceOperation.MEAN or dtype == "bool"):
        raise DTypeError(f"all_reduce: cannot take the {op.name} of a {dtype} tensor")
    array = to_buffer(tensor.backend, tensor.primitive)
    pending = context.start_all_reduce(device, devices, array, op)
    return CollectiveTensor(tensor, pending, op, devices, context)
