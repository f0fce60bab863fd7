"""The differentiable collectives (``all_reduce``, ``all_gather``, ``reduce_scatter``,
``broadcast``) and their pending result, :class:`CollectiveTensor`.

Each is one node of the autodiff graph whose backward runs its dual collective on the
incoming gradient (:func:`.calls.dual`): all-reduce's is all-reduce with the same operation
(Burn's rule: for ``MEAN`` each output is ``(1/n) * sum``, so an input's gradient is the mean
of the outputs' gradients again); all-gather's is the reduce-scatter (SUM) of the gradient;
reduce-scatter's the all-gather of it (times 1/n for MEAN); broadcast's the sum of the
gradients delivered to the source, zeros elsewhere. A backward under ``create_graph`` records
the dual as a node in turn, so higher-order gradients come free.

The node is an :class:`~retrograd.autodiff.ops.Op` created outside the op table and run with
``Autodiff.apply``. It is compute-bound and not ``recomputable``, so no checkpointing strategy
ever recomputes it: its "forward" only hands over the result the collective already produced.

How a collective moves buffers: ``all_gather`` through the transport's all-gather; the others
through its all-reduce (a broadcast's non-source members contribute ``-0.0``, the additive
identity of IEEE floats, so the source's bits arrive unchanged; a reduce-scatter keeps its
slice of the reduced tensor). Shaping the result (concatenating, slicing) runs on the inner
backend's protocol, so the result stays on the input's backend and device.

Before any data moves, the members agree on what was called (:mod:`.calls`, the context's
``start_collective``): mismatched shapes, dtypes, dims or sources fail every member with one
message instead of reaching the transport.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..autodiff.ops import Op
from ..device import Device
from ..errors import (
    DistributedError,
    DTypeError,
    IndexOutOfRangeError,
    RetrogradError,
    ShapeError,
)
from .buffers import from_buffer, to_buffer
from .calls import Call, dual
from .config import ReduceOperation
from .registry import active_context

__all__ = [
    "CollectiveTensor",
    "all_gather",
    "all_reduce",
    "broadcast",
    "record_all_reduce",
    "reduce_scatter",
]

_FLOATS = ("float32", "float64", "bfloat16", "float16")


class _Result:
    """The collective's output, handed once to the op's forward (which keeps nothing)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def take(self) -> Any:
        value, self.value = self.value, None
        if value is None:
            raise DistributedError("a collective's result cannot be recomputed")
        return value

    def __repr__(self) -> str:
        return "<collective result>"


def _forward(backend: Any, x: Any, call: Any, device: Any, result: _Result) -> Any:
    return result.take()


def _backward(B: Any, g: Any, call: Call, device: Device) -> Any:  # noqa: N803
    """The dual collective of ``g`` (recorded as a node where ``B`` is an autodiff backend)."""
    dual_call, scale = dual(call)
    out = run_collective(B, g, dual_call, device)
    return out if scale is None else B.mul_scalar(out, scale)


COLLECTIVE = Op(
    "distributed_collective",
    ("x",),
    ("call", "device", "result"),
    (_backward,),
    memory_bound=False,
    forward=_forward,
    recomputable=False,
)


def _record(backend: Any, x: Any, value: Any, call: Call, device: Device) -> Any:
    """``value`` (the inner result of ``call`` on ``x``, already computed) as the output of a
    collective node of the autodiff ``backend`` over ``x``."""
    return backend.apply(COLLECTIVE, x, params=(call, device, _Result(value)))


def record_all_reduce(
    backend: Any,
    x: Any,
    reduced: Any,
    op: ReduceOperation,
    devices: tuple[Device, ...],
    device: Device,
) -> Any:
    """``reduced`` (the all-reduce of ``x``'s value, already computed) as the output of an
    all-reduce node of the autodiff ``backend`` over ``x`` (the gradient sync's
    ``create_graph`` path)."""
    value = from_buffer(backend.inner, reduced, backend.inner_value(x), device)
    return _record(backend, x, value, Call("all_reduce", op, tuple(devices)), device)


def _context_for(device: Device, what: str) -> Any:
    context = active_context(device)
    if context is None:
        raise DistributedError(
            f"{what}: no running DistributedContext hosts {device}; create the tensor with "
            "device= one of the context's devices, inside `with DistributedContext(...)`"
        )
    return context


# -- one member's part of a collective ------------------------------------------------------
def _problem(call: Call, device: Device, shape: tuple[int, ...], dtype: str) -> RetrogradError:
    """What makes this member's call invalid whatever the others do, or ``None``."""
    what = call.describe()
    if call.dim is not None and not 0 <= call.dim < max(len(shape), 1):
        return ShapeError(f"{what}: dim out of range for a tensor of shape {list(shape)}")
    if call.kind == "all_gather" and not shape:
        return ShapeError(f"{what}: cannot gather 0-d tensors along a dim (reshape to [1])")
    if call.kind == "reduce_scatter":
        if not shape:
            return ShapeError(f"{what}: cannot scatter a 0-d tensor")
        if shape[call.dim] % len(call.devices):
            return ShapeError(
                f"{what}: dim {call.dim} of shape {list(shape)} is not divisible by the "
                f"{len(call.devices)} devices"
            )
    if call.src is not None and not 0 <= call.src < len(call.devices):
        return IndexOutOfRangeError(
            f"{what}: src {call.src} is not an index of the {len(call.devices)} devices"
        )
    if call.op is ReduceOperation.MEAN and dtype not in _FLOATS:
        return DTypeError(f"{what}: cannot take the MEAN of a {dtype} tensor")
    if call.op is not None and dtype == "bool":
        return DTypeError(f"{what}: cannot reduce a bool tensor")
    return None


def _contribution(inner: Any, x: Any, call: Call, device: Device) -> Any:
    """The buffer this member hands to the transport for ``call``."""
    if call.kind == "broadcast" and call.devices[call.src] != device:
        dtype = inner.dtype(x)
        if dtype != "bool":  # (bool travels by all-gather: the source's row is kept)
            identity = -0.0 if dtype in _FLOATS else 0
            return to_buffer(inner, inner.full(inner.shape(x), identity, dtype, device))
    return to_buffer(inner, x)


def _shape_result(inner: Any, call: Call, device: Device, result: Any, like: Any) -> Any:
    """The transport's result as this member's output, a primitive of ``inner``."""
    out = from_buffer(inner, result, like, device)
    context = _context_for(device, call.kind)
    group = sorted(call.devices, key=context.transport.index.__getitem__)
    if call.kind in ("all_gather", "broadcast") and inner.shape(out) != inner.shape(like):
        rows = [group.index(d) for d in call.devices]  # rows in the transport's member order
        if call.kind == "broadcast":  # a bool broadcast: the source's row
            row = rows[call.src]
            return inner.reshape(inner.slice(out, (slice(row, row + 1),)), inner.shape(like))
        if rows != sorted(rows):
            out = inner.cat([inner.slice(out, (slice(r, r + 1),)) for r in rows], 0)
        shape = inner.shape(out)  # (n, *like's shape)
        n, dim = shape[0], call.dim
        if dim:
            order = (*range(1, dim + 1), 0, *range(dim + 1, len(shape)))
            out = inner.permute(out, order)
        merged = (*shape[1 : dim + 1], n * shape[dim + 1], *shape[dim + 2 :])
        return inner.reshape(out, merged)
    if call.kind == "reduce_scatter":
        size = inner.shape(out)[call.dim] // len(call.devices)
        start = call.devices.index(device) * size
        slices = (*(slice(None),) * call.dim, slice(start, start + size))
        return inner.slice(out, slices)
    if call.kind == "reduce_to" and call.devices[call.src] != device:
        return inner.zeros(inner.shape(like), inner.dtype(like), device)
    return out


def _start(inner: Any, x: Any, call: Call, device: Device) -> tuple[Any, Any]:
    """Start this member's part of ``call`` on ``x`` (a primitive of ``inner``):
    ``(context, pending)``. A call this member finds invalid still takes part in the members'
    agreement (as a rejection, so the others fail at once instead of waiting for it), then
    raises here."""
    context = _context_for(device, call.kind)
    if device not in call.devices:
        raise DistributedError(
            f"{call.describe()}: the tensor is on {device}, which is not one of the devices"
        )
    buffer = to_buffer(inner, x)
    problem = _problem(call, device, inner.shape(x), inner.dtype(x))
    if problem is not None:
        context.start_collective(call, device, buffer, rejected=True)
        raise problem
    transport_buffer = _contribution(inner, x, call, device)
    return context, context.start_collective(call, device, transport_buffer)


def run_collective(B: Any, x: Any, call: Call, device: Device) -> Any:  # noqa: N803
    """``call`` on ``x``, a primitive of ``B``, waited for: a primitive of ``B`` (recorded as
    a node where ``B`` is an autodiff backend: the backward rules' path)."""
    autodiff = getattr(B, "is_autodiff", False)
    inner, value = (B.inner, B.inner_value(x)) if autodiff else (B, x)
    context, pending = _start(inner, value, call, device)
    result = context.wait_for(pending, f"{call.describe()} on {device}")[0]
    out = _shape_result(inner, call, device, result, value)
    return _record(B, x, out, call, device) if autodiff else out


class CollectiveTensor:
    """The pending result of a collective (:func:`all_reduce`, :func:`all_gather`,
    :func:`reduce_scatter`, :func:`broadcast`); :meth:`resolve` waits for it.

    >>> # out = dist.all_reduce(t, dist.ReduceOperation.SUM, devices).resolve()
    """

    __slots__ = ("_call", "_context", "_pending", "_resolved", "_tensor")

    def __init__(self, tensor: Any, pending: Any, call: Call, context: Any):
        self._tensor = tensor
        self._pending = pending
        self._call = call
        self._context = context
        self._resolved = None

    @property
    def device(self) -> Device:
        return self._resolved.device if self._resolved is not None else self._tensor.device

    def is_resolved(self) -> bool:
        """Whether the collective has completed (``resolve`` would not wait)."""
        return self._resolved is not None or self._pending.done()

    def resolve(self) -> Any:
        """Wait for the collective (at most the context's timeout) and return its result, on
        the input's backend and device; differentiable on autodiff backends."""
        if self._resolved is not None:
            return self._resolved
        from ..tensor import Tensor

        tensor, call = self._tensor, self._call
        result = self._context.wait_for(self._pending, call.describe())[0]
        backend, device = tensor.backend, tensor.device
        x = tensor.primitive
        if backend.is_autodiff:
            inner_x = backend.inner_value(x)
            value = _shape_result(backend.inner, call, device, result, inner_x)
            primitive = _record(backend, x, value, call, device)
        else:
            primitive = _shape_result(backend, call, device, result, x)
        self._resolved = Tensor(primitive, backend, device)
        self._tensor = None
        return self._resolved

    def __repr__(self) -> str:
        state = "resolved" if self.is_resolved() else "pending"
        return f"CollectiveTensor({self._call.describe()}, {state})"


def _begin(
    what: str,
    tensor: Any,
    devices: Iterable[Any],
    op: ReduceOperation | None = None,
    dim: int | None = None,
    src: int | None = None,
) -> CollectiveTensor:
    """Check the arguments, start this device's part and hand back its pending result."""
    from ..tensor import Tensor

    if not isinstance(tensor, Tensor):
        raise DTypeError(f"{what}: expected a Tensor, got {type(tensor).__name__}")
    if what in ("all_reduce", "reduce_scatter") and not isinstance(op, ReduceOperation):
        raise DTypeError(f"{what}: op must be a ReduceOperation, got {op!r}")
    if dim is not None:
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise DTypeError(f"{what}: dim must be an int, got {dim!r}")
        dim = dim + tensor.ndim if dim < 0 else dim
    if src is not None and (not isinstance(src, int) or isinstance(src, bool)):
        raise DTypeError(f"{what}: src must be an int index into devices, got {src!r}")
    call = Call(what, op, tuple(Device(d) for d in devices), dim, src)
    device = tensor.device
    backend = tensor.backend
    inner = backend.inner if backend.is_autodiff else backend
    x = backend.inner_value(tensor.primitive) if backend.is_autodiff else tensor.primitive
    context, pending = _start(inner, x, call, device)
    return CollectiveTensor(tensor, pending, call, context)


def all_reduce(tensor: Any, op: ReduceOperation, devices: Iterable[Any]) -> CollectiveTensor:
    """Start reducing ``tensor`` with the tensors the other ``devices`` pass to their own
    ``all_reduce`` call (the k-th collective call of each device over the same devices are
    matched).

    Non-blocking for the data: returns once every device has made the call (their calls are
    checked to agree) with a :class:`CollectiveTensor`, whose ``resolve()`` waits. Every
    device must pass the same ``op``, ``devices`` and tensor shape and dtype. Differentiable:
    backward all-reduces the gradient with the same ``op``.

    >>> # with dist.DistributedContext(devices, config):        (in each device's thread)
    >>> #     y = dist.all_reduce(x, dist.ReduceOperation.MEAN, devices).resolve()
    """
    return _begin("all_reduce", tensor, devices, op=op)


def all_gather(tensor: Any, devices: Iterable[Any], dim: int = 0) -> CollectiveTensor:
    """Every device's ``tensor`` concatenated along ``dim``, in the order of ``devices``.
    Differentiable: a device's gradient is its slice of the sum of every device's incoming
    gradient (the reduce-scatter of them).

    >>> # g = dist.all_gather(x, ctx.devices, dim=0).resolve()   # [n * rows, ...]
    """
    return _begin("all_gather", tensor, devices, dim=dim)


def reduce_scatter(
    tensor: Any, op: ReduceOperation, devices: Iterable[Any], dim: int = 0
) -> CollectiveTensor:
    """Every device's ``tensor`` reduced with ``op``, then split along ``dim`` into as many
    equal slices as devices: device ``i`` of ``devices`` keeps slice ``i`` (``dim``'s size
    must be divisible by their number). Differentiable: the gradient is the all-gather of the
    incoming ones (times 1/n for MEAN).

    >>> # r = dist.reduce_scatter(x, dist.ReduceOperation.SUM, ctx.devices).resolve()
    """
    return _begin("reduce_scatter", tensor, devices, op=op, dim=dim)


def broadcast(tensor: Any, src: int, devices: Iterable[Any]) -> CollectiveTensor:
    """The ``tensor`` of ``devices[src]`` on every device (each passes a tensor of the same
    shape and dtype; only the source's values are read). Differentiable: the source's gradient
    is the sum of every device's incoming gradient, the others' zeros.

    >>> # w = dist.broadcast(w, 0, ctx.devices).resolve()
    """
    return _begin("broadcast", tensor, devices, src=src)
