"""Gradient sync during backward: the backward hook, as Burn's ``DistributedGradientRegistration``.

``begin`` (backward starts) finds the distributed parameters in the walked graph, predicts the
order their gradients will become final, and registers them with the device's context; the
``Gradients`` registration hook submits a parameter's gradient the moment its last contribution
arrives, a bucket at a time; ``end`` waits for this device's all-reduces (driving the engine)
and puts the reduced gradients into the result.
"""

from __future__ import annotations

import threading
from time import perf_counter
from typing import Any

import numpy as np

from ..device import Device
from ..errors import DistributedError
from .server import DeviceStep, ParamSlot, local_bucket_plan

__all__ = ["GradientSyncHook", "active_context", "register_context", "unregister_context"]

#: how often backward polls collectives in flight (between its steps)
_POLL_SECONDS = 0.0005
_LOCK = threading.Lock()
#: device -> the running context that hosts it
_CONTEXTS: dict[Device, Any] = {}


def active_context(device: Device) -> Any:
    return _CONTEXTS.get(device)


def register_context(context: Any) -> None:
    from ..autodiff.runtime import BACKWARD_HOOKS

    with _LOCK:
        taken = [d for d in context.local_devices if d in _CONTEXTS]
        if taken:
            raise DistributedError(
                f"DistributedContext: {', '.join(map(str, taken))} already belong to a running "
                "context; close it first"
            )
        for device in context.local_devices:
            _CONTEXTS[device] = context
        if _HOOK not in BACKWARD_HOOKS:
            BACKWARD_HOOKS.append(_HOOK)


def unregister_context(context: Any) -> None:
    from ..autodiff.runtime import BACKWARD_HOOKS

    with _LOCK:
        for device in context.local_devices:
            if _CONTEXTS.get(device) is context:
                del _CONTEXTS[device]
        if not _CONTEXTS and _HOOK in BACKWARD_HOOKS:
            BACKWARD_HOOKS.remove(_HOOK)


def distributed_slots(tape: Any) -> list[ParamSlot]:
    """The distributed parameters of the walked graph, in the order their gradients will
    become final: a leaf's gradient is final once the last node reading it has run its step,
    and backward runs the nodes level by level, deepest first."""
    last_use: dict[int, int] = {}
    for position, node in enumerate(tape.steps, start=1):  # the order backward runs them
        for parent in node.parents:
            if parent is not None and parent.param_id is not None:
                last_use[parent.id] = position
    nodes = tape.nodes
    root = tape.steps[0]
    if root.param_id is not None and not tape.children.get(root.id):  # a parameter as root
        last_use.setdefault(root.id, 0)
    ordered = sorted(last_use, key=lambda i: (last_use[i], nodes[i].param_id.value))
    slots: list[ParamSlot] = []
    seen: dict[int, Any] = {}
    for node_id in ordered:
        node = nodes[node_id]
        pid = node.param_id
        if pid.value in seen:
            raise DistributedError(
                f"backward: parameter id {pid.label!r} is set on two different tensors of this "
                "graph; each distributed parameter needs its own id"
            )
        seen[pid.value] = node
        if pid.value >= 1 << 63:
            raise DistributedError(f"backward: parameter id {pid.label!r} does not fit 63 bits")
        if node.param_shape is None:
            raise DistributedError(
                f"backward: parameter {pid.label!r} was marked without its shape; mark it with "
                "tensor.set_distributed(param_id)"
            )
        slots.append(ParamSlot(len(slots), pid, node, node.param_shape, node.param_dtype))
    return slots


class GradientSyncHook:
    """The entry in ``BACKWARD_HOOKS``; applies to backwards on a device a context hosts."""

    def __init__(self) -> None:
        self._steps: dict[int, tuple[DeviceStep, Any, Any]] = {}
        self._lock = threading.Lock()

    def begin(self, tape: Any, grads: Any) -> None:
        context = _CONTEXTS.get(grads.device)
        if context is None:
            return
        slots = distributed_slots(tape)
        if not slots:
            return
        step = DeviceStep(grads.device, slots)
        server = context._server
        by_node = step.by_node
        # Final gradients go to the server a bucket at a time (as this device plans buckets;
        # the server launches by the plan the members agree on, normally the same one).
        bucket_of, bucket_sizes = local_bucket_plan(slots, context.config)
        waiting_for = list(bucket_sizes)
        batches: list[list] = [[] for _ in bucket_sizes]
        step.unsent = batches

        poll_at = [0.0]
        # The reduced gradient replaces the local one at the end; until then the local one is
        # only the collective's input, and dropping it here lets its memory go once it is
        # packed (keeping both raised each step's peak, and fresh memory costs page faults).
        # A differentiable sync (create_graph) records the local one as its input, so keeps it.
        keep_local = getattr(grads.backend, "is_autodiff", False)

        def on_register(node: Any, grads: Any) -> None:
            # Runs on every registration of the backward: return fast unless a parameter
            # just became final, or collectives in flight are due a poll.
            now = perf_counter()
            if now >= poll_at[0]:
                poll_at[0] = now + _POLL_SECONDS
                server.poll()
            if node.param_id is None or grads.remaining.get(node.id, 0) > 0:
                return
            slot = by_node.get(node.id)
            if slot is None or slot.sent:
                return
            slot.sent = True
            bucket = bucket_of[slot.index]
            batch = batches[bucket]
            value = grads.values[node.id] if keep_local else grads.values.pop(node.id)
            batch.append((slot.index, _buffer(value, grads.backend)))
            waiting_for[bucket] -= 1
            if waiting_for[bucket] == 0:
                batches[bucket] = []
                server.submit_many(step, batch)

        with self._lock:
            stale = [key for key, entry in self._steps.items() if entry[0].device == step.device]
            for key in stale:
                del self._steps[key]
            self._steps[id(grads)] = (step, context, on_register)
        grads.on_register.append(on_register)
        server.register(step)

    def end(self, grads: Any) -> None:
        with self._lock:
            entry = self._steps.pop(id(grads), None)
        if entry is None:
            return
        step, context, on_register = entry
        grads.on_register.remove(on_register)
        server = context._server
        # A parameter whose gradient never arrived (no path carried one) contributes zeros,
        # so its peers are not left waiting.
        late = [item for batch in step.unsent for item in batch]
        for slot in step.slots:
            if not slot.sent:
                slot.sent = True
                value = grads.values.get(slot.node.id)
                if value is None:
                    array = np.zeros(slot.shape, dtype=slot.dtype)
                else:
                    array = _buffer(value, grads.backend)
                late.append((slot.index, array))
        if late:
            server.submit_many(step, late)
        started = perf_counter()
        server.waiting(step)
        if not server.drive_until(step.done, context.config.timeout):
            server.stalled(step)
            step.done.wait(1.0)
        waited = perf_counter() - started
        if step.error is not None:
            raise DistributedError(step.error)
        if not step.done.is_set():  # the server is gone (the context closed meanwhile)
            raise DistributedError(
                f"gradient sync on {step.device} did not complete within "
                f"{context.config.timeout:g} s: the distributed context is no longer running"
            )
        backend = grads.backend
        for slot in step.slots:
            result = step.results[slot.index]
            if result.shape != slot.shape:
                result = result.reshape(slot.shape)
            old = grads.values.get(slot.node.id)
            grads.values[slot.node.id] = _primitive(result, old, backend, slot, context, step)
        step.results.clear()  # the gradients hold them now
        context._record_step(step, started, waited)


def _buffer(value: Any, backend: Any) -> np.ndarray:
    """A NumPy view of a gradient (the inner value of a tracked one)."""
    if getattr(backend, "is_autodiff", False):
        value = value.value
        backend = backend.inner
    if isinstance(value, np.ndarray):
        return value
    return np.asarray(backend.to_numpy(value))


def _primitive(result: np.ndarray, old: Any, backend: Any, slot, context, step) -> Any:
    """The reduced gradient as a primitive of the gradients' backend."""
    if getattr(backend, "is_autodiff", False):
        # backward(create_graph=True): the gradient stays differentiable through the sync.
        from .collective import record_all_reduce

        if old is None:  # no gradient reached this parameter here: nothing to differentiate
            return backend.wrap(result)

        return record_all_reduce(
            backend, old, result, context.config.all_reduce_op, context.devices, step.device
        )
    if isinstance(old, np.ndarray) or old is None:
        return result
    return backend.from_data(result, slot.dtype, step.device)


_HOOK = GradientSyncHook()
