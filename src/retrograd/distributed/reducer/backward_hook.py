"""Gradient sync during backward: the backward hook, as Burn's ``DistributedGradientRegistration``.

``begin`` (backward starts) finds the distributed parameters in the walked graph, predicts the
order their gradients will become final, and registers them with the device's context; the
``Gradients`` registration hook submits a parameter's gradient the moment its last contribution
arrives, a bucket at a time; ``end`` waits for this device's all-reduces (driving the transport)
and puts the reduced gradients into the result. One backward's state is a :class:`BackwardSync`.

Two of ``DistributedDataParallel``'s options reach in here, as torch's reach its ``Reducer``:
``no_sync()`` (:func:`unsynced`) makes a device's backwards local, their gradients summed
(:data:`_ACCUMULATED`) until the next synced backward adds them to its own before the
all-reduce; ``find_unused_parameters=True`` (:func:`expect_every_parameter`) registers every
parameter of the module whenever one of them is in the graph, those without a gradient
contributing zeros, and a parameter no device used keeps no gradient, as in torch.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from time import monotonic, perf_counter
from typing import Any

import numpy as np

from ...errors import DistributedError
from ..buffers import from_buffer, to_buffer
from ..collective import record_all_reduce
from ..registry import active_context
from .buckets import bucket_plan
from .rounds import DeviceStep, ParamSlot

__all__ = [
    "HOOK",
    "BackwardSync",
    "GradientSyncHook",
    "distributed_slots",
    "expect_every_parameter",
    "sole_owner",
    "unsynced",
]

_STATE_LOCK = threading.Lock()
#: device -> how many ``no_sync`` blocks are open on it
_UNSYNCED: dict[Any, int] = {}
#: device -> {parameter id value: (its node, the sum of its local gradients)} of the
#: backwards run under ``no_sync`` since the last synced one
_ACCUMULATED: dict[Any, dict[int, tuple[Any, Any]]] = {}
#: modules (``DistributedDataParallel(find_unused_parameters=True)``) all of whose parameters
#: a backward registers once it reaches any of them
_COMPLETE: weakref.WeakSet = weakref.WeakSet()


@contextmanager
def unsynced(device: Any) -> Iterator[None]:
    """Backwards on ``device`` inside the block are not synced; the gradients they return are
    local, and are added to the next synced backward's before its all-reduce."""
    with _STATE_LOCK:
        _UNSYNCED[device] = _UNSYNCED.get(device, 0) + 1
    try:
        yield
    finally:
        with _STATE_LOCK:
            _UNSYNCED[device] -= 1
            if not _UNSYNCED[device]:
                del _UNSYNCED[device]


def expect_every_parameter(module: Any) -> None:
    """Register every distributed parameter of ``module`` in each backward that reaches one."""
    with _STATE_LOCK:
        _COMPLETE.add(module)


def _copied(buffer: Any) -> Any:
    return buffer.copy() if isinstance(buffer, np.ndarray) else buffer.clone()


def _completed(
    slots: list[ParamSlot], device: Any
) -> tuple[list[ParamSlot], list[tuple[Any, bool]]]:
    """``slots`` and the parameters a backward must register beyond its graph's: those of a
    ``find_unused_parameters`` module it reaches, and those with gradients accumulated under
    ``no_sync``; then ``(node, used here)`` of the modules' parameters, whose use every
    device agrees on after the sync."""
    present = {slot.pid.value for slot in slots}
    # a module counts as reached by its own parameters' nodes, not by ids alone: another
    # find_unused_parameters model whose parameters happen to have the same names (a GAN's
    # two models, a model rebuilt while the old one is alive) is not this backward's
    reached = {id(slot.node) for slot in slots}
    extra: list[Any] = []
    agreed: list[Any] = []
    with _STATE_LOCK:
        modules = list(_COMPLETE)
        accumulated = dict(_ACCUMULATED.get(device, {}))
    for module in modules:
        nodes = [
            node
            for parameter in module.parameters()
            if parameter.device == device
            and (node := getattr(parameter._prim, "node", None)) is not None
            and node.distributed is not None
        ]
        if any(id(node) in reached for node in nodes):
            agreed += nodes
            extra += [node for node in nodes if node.distributed.id.value not in present]
            present.update(node.distributed.id.value for node in nodes)
    for value, (node, _) in accumulated.items():
        if value not in present:
            extra.append(node)
            present.add(value)
    used = {slot.pid.value for slot in slots} | set(accumulated)
    first = len(slots)
    for k, node in enumerate(extra):
        param = node.distributed
        slots = [*slots, ParamSlot(first + k, param.id, node, param.shape, param.dtype)]
    return slots, [(node, node.distributed.id.value in used) for node in agreed]


#: how often backward polls collectives in flight (between its steps)
_POLL_SECONDS = 0.0005
#: ``sys.getrefcount`` of an array only its caller holds, seen from a function the caller
#: passes it to (the caller's variable, the parameter, ``getrefcount``'s argument). From
#: Python 3.14 the interpreter may borrow references without counting them, so a count no
#: longer proves sole ownership there: gradients are not donated.
_SOLE = 3
_COUNTS_PROVE_OWNERSHIP = sys.implementation.name == "cpython" and sys.version_info < (3, 14)


def sole_owner(array: object) -> bool:
    """Whether the caller holds the only reference to ``array``, a writable C-contiguous
    NumPy array owning its memory: nothing sees it change if the caller reduces it in place
    (torch's ``AccumulateGrad`` steals a gradient on the same evidence, its use count).

    >>> import numpy as np
    >>> gradient = np.ones(4, np.float32)
    >>> sole_owner(gradient)
    True
    >>> also = gradient
    >>> sole_owner(gradient), sole_owner(np.ones(4)[::2]), sole_owner(np.broadcast_to(1.0, 3))
    (False, False, False)
    """
    return (
        _COUNTS_PROVE_OWNERSHIP
        and type(array) is np.ndarray
        and array.base is None
        and array.flags.writeable
        and array.flags.c_contiguous
        and sys.getrefcount(array) == _SOLE
    )


def distributed_slots(tape: Any) -> list[ParamSlot]:
    """The distributed parameters of the walked graph, in the order their gradients will
    become final: a leaf's gradient is final once the last node reading it has run its step,
    and backward runs the nodes level by level, deepest first."""
    last_use: dict[int, int] = {}
    for position, node in enumerate(tape.steps, start=1):  # the order backward runs them
        for parent in node.parents:
            if parent is not None and parent.distributed is not None:
                last_use[parent.id] = position
    nodes = tape.nodes
    root = tape.steps[0]
    if root.distributed is not None and not tape.children.get(root.id):  # a parameter as root
        last_use.setdefault(root.id, 0)
    ordered = sorted(last_use, key=lambda i: (last_use[i], nodes[i].distributed.id.value))
    slots: list[ParamSlot] = []
    seen: dict[int, Any] = {}
    for node_id in ordered:
        node = nodes[node_id]
        param = node.distributed
        pid = param.id
        if pid.value in seen:
            raise DistributedError(
                f"backward: parameter id {pid.label!r} is set on two different tensors of this "
                "graph; each distributed parameter needs its own id"
            )
        seen[pid.value] = node
        if pid.value >= 1 << 63:
            raise DistributedError(f"backward: parameter id {pid.label!r} does not fit 63 bits")
        slots.append(ParamSlot(len(slots), pid, node, param.shape, param.dtype))
    return slots


class BackwardSync:
    """One device's backward, as the hook sees it: its step, the gradients it holds until
    their bucket is complete, and when it last polled the transport.

    :meth:`on_register` runs on every gradient registration of the backward, so it keeps what
    it reads in slots, and returns at once unless a parameter just became final or a poll is
    due.

    Where the transport reduces in place, a final gradient is held until the next registration (or
    the end of backward) before it is submitted: by then the backward step that made it has
    returned, so the references its frames held are gone, and a count of references says
    whether anything else holds it (:func:`sole_owner`).
    """

    __slots__ = (
        "accumulated",
        "agreed",
        "batches",
        "bucket_of",
        "by_node",
        "context",
        "donating",
        "held",
        "keep_local",
        "poll_at",
        "polls",
        "server",
        "step",
        "waiting_for",
    )

    def __init__(self, context: Any, step: DeviceStep, backend: Any):
        self.context = context
        self.server = context.server
        self.step = step
        self.by_node = step.by_node
        # Final gradients go to the server a bucket at a time (as this device plans buckets;
        # the server launches by the plan the members agree on, normally the same one).
        entries = tuple((slot.pid.value, slot.numel, slot.dtype) for slot in step.slots)
        self.bucket_of, sizes = bucket_plan(entries, self.server.config)  # the one in force
        self.waiting_for = list(sizes)
        #: per bucket, ``(slot index, buffer)`` of its final gradients not yet submitted
        self.batches: list[list[tuple[int, np.ndarray]]] = [[] for _ in sizes]
        self.poll_at = 0.0
        # Without the overlap nothing is in flight during backward for a poll to advance
        # (registrations agreed before are not exchanged again; a first exchange waits for
        # the end of backward, like the one collective).
        self.polls = self.server.overlapping
        # The reduced gradient replaces the local one at the end; until then the local one is
        # only the collective's input, and dropping it here lets its memory go once it is
        # packed (keeping both raised each step's peak, and fresh memory costs page faults).
        # A differentiable sync (create_graph) records the local one as its input, so keeps it.
        self.keep_local = getattr(backend, "is_autodiff", False)
        #: the transport may reduce gradients in place: say which ones nothing else holds
        self.donating = self.server.transport.capabilities.in_place and not self.keep_local
        #: the last final gradient, ``(slot, buffer)``, until its maker's frames are gone
        self.held: tuple[ParamSlot, Any] | None = None
        #: parameter id value -> the local gradients summed under ``no_sync`` before this step
        self.accumulated: dict[int, Any] = {}
        #: ``(node, used here)`` of the find_unused_parameters modules' parameters
        self.agreed: list[tuple[Any, bool]] = []

    def on_register(self, node: Any, grads: Any) -> None:
        if self.polls:
            now = perf_counter()
            if now >= self.poll_at:
                self.poll_at = now + _POLL_SECONDS
                self.server.poll()
        if self.held is not None:
            self._give_held()
        if node.distributed is None or grads.remaining.get(node.id, 0) > 0:
            return
        slot = self.by_node.get(node.id)
        if slot is None or slot.sent:
            return
        slot.sent = True
        if node.id not in grads.values:
            # every contribution arrived empty (a custom function's backward returned None):
            # zeros complete the bucket now, as an unused parameter's do at the end
            self._submit(slot, np.zeros(slot.shape, dtype=slot.dtype))
            return
        value = grads.values[node.id] if self.keep_local else grads.values.pop(node.id)
        if self.donating:
            self.held = (slot, to_buffer(grads.backend, value))
        else:
            self._submit(slot, to_buffer(grads.backend, value))

    def _give_held(self) -> None:
        """Submit the held gradient, owned (donated) if nothing else holds it now."""
        slot, buffer = self.held
        self.held = None
        if sole_owner(buffer):
            self.step.owned.add(slot.index)
        self._submit(slot, buffer)

    def _with_accumulated(self, slot: ParamSlot, buffer: Any) -> Any:
        earlier = self.accumulated.pop(slot.pid.value, None)
        return buffer if earlier is None else buffer + earlier

    def _submit(self, slot: ParamSlot, buffer: Any) -> None:
        buffer = self._with_accumulated(slot, buffer)
        bucket = self.bucket_of[slot.index]
        batch = self.batches[bucket]
        batch.append((slot.index, buffer))
        self.waiting_for[bucket] -= 1
        if self.waiting_for[bucket] == 0:
            self.batches[bucket] = []
            if self.donating:
                # the header's collective, launched when backward began, has likely arrived
                # from every peer: a poll sees it, and the bucket may then give its gradients
                self.server.poll()
            self.server.submit_many(self.step, batch)

    def finish(self, grads: Any) -> None:
        """Submit what is left, wait for the reduced gradients (driving the transport), and put
        them in ``grads``."""
        step, context, server = self.step, self.context, self.server
        started = perf_counter()
        timeout = context.config.timeout
        deadline = monotonic() + timeout
        if self.held is not None:
            if not self.polls:
                # One collective after backward, normally launched here: first the header's,
                # which says whether this step's gradients may be given up (in place, no
                # copy). It completes when every peer has begun this step and reached its
                # end, as the bucket's would: waiting for it costs a small collective's time.
                server.waiting(step)  # polled back to back from now on
                server.drive_until(server.header(step), timeout)
            self._give_held()
        # A parameter whose gradient never arrived (no path carried one) contributes zeros,
        # so its peers are not left waiting.
        late = [item for batch in self.batches for item in batch]
        for slot in step.slots:
            if not slot.sent:
                slot.sent = True
                value = grads.values.get(slot.node.id)
                if value is None:
                    array = np.zeros(slot.shape, dtype=slot.dtype)
                else:
                    array = to_buffer(grads.backend, value)
                late.append((slot.index, self._with_accumulated(slot, array)))
        if late:
            if self.donating:
                server.poll()
            server.submit_many(step, late)
        server.waiting(step)
        if not server.drive_until(step.done, max(0.0, deadline - monotonic())):
            server.stalled(step)
            step.done.wait(1.0)
        waited = perf_counter() - started
        if step.error is not None:
            raise DistributedError(step.error)
        if not step.done.is_set():  # the server is gone (the context closed meanwhile)
            raise DistributedError(
                f"gradient sync on {step.device} did not complete within {timeout:g} s: the "
                "distributed context is no longer running"
            )
        backend = grads.backend
        for slot in step.slots:
            result = step.results[slot.index]
            if result.shape != slot.shape:
                result = result.reshape(slot.shape)
            old = grads.values.get(slot.node.id)
            grads.values[slot.node.id] = self._primitive(result, old, backend, slot)
        step.results.clear()  # the gradients hold them now
        context.record_step(step, started, waited)
        if self.agreed:
            self._drop_unused_everywhere(grads)

    def _drop_unused_everywhere(self, grads: Any) -> None:
        """A find_unused_parameters module's parameter that no device used keeps no gradient
        (torch leaves its ``.grad`` as it was): every device's use of each, all-reduced."""
        from ...tensor import tensor
        from ..collective import all_reduce
        from ..config import ReduceOperation

        device = self.step.device
        used = tensor([float(here) for _, here in self.agreed], dtype="float32", device=device)
        devices = self.context.devices
        users = all_reduce(used, ReduceOperation.SUM, devices).resolve().tolist()
        for (node, _), count in zip(self.agreed, users):
            if count == 0:
                grads.values.pop(node.id, None)

    def _primitive(self, result: np.ndarray, old: Any, backend: Any, slot: ParamSlot) -> Any:
        """The reduced gradient as a primitive of the gradients' backend."""
        device = self.step.device
        if getattr(backend, "is_autodiff", False):
            # backward(create_graph=True): the gradient stays differentiable through the sync.
            if old is None:  # no gradient reached this parameter here: nothing to differentiate
                return backend.wrap(from_buffer(backend.inner, result, None, device, slot.dtype))
            config = self.context.config
            return record_all_reduce(
                backend, old, result, config.all_reduce_op, self.context.devices, device
            )
        return from_buffer(backend, result, old, device, slot.dtype)


class GradientSyncHook:
    """The entry in ``BACKWARD_HOOKS``; applies to backwards on a device a context hosts."""

    def __init__(self) -> None:
        self._syncs: dict[int, BackwardSync] = {}
        #: the distributed parameters of backwards run under ``no_sync``, until they end
        self._local: dict[int, list[ParamSlot]] = {}
        self._lock = threading.Lock()

    def begin(self, tape: Any, grads: Any) -> None:
        device = grads.device
        context = active_context(device)
        if context is None:
            return
        slots = distributed_slots(tape)
        if device in _UNSYNCED:
            if slots:
                with self._lock:
                    self._local[id(grads)] = slots
            return
        slots, agreed = _completed(slots, device)
        if not slots:
            return
        step = DeviceStep(device, slots)
        sync = BackwardSync(context, step, grads.backend)
        sync.agreed = agreed
        with _STATE_LOCK:
            accumulated = _ACCUMULATED.pop(device, {})
        sync.accumulated = {value: buffer for value, (_, buffer) in accumulated.items()}
        with self._lock:
            # A backward of this device that raised never reached ``end``: forget it.
            stale = [key for key, other in self._syncs.items() if other.step.device == step.device]
            for key in stale:
                del self._syncs[key]
            self._syncs[id(grads)] = sync
        grads.on_register.append(sync.on_register)
        context.server.register(step)

    def end(self, grads: Any) -> None:
        with self._lock:
            sync = self._syncs.pop(id(grads), None)
            local = self._local.pop(id(grads), None)
        if local is not None:
            self._accumulate(local, grads)
        if sync is None:
            return
        grads.on_register.remove(sync.on_register)
        sync.finish(grads)

    def abandon(self, grads: Any) -> None:
        """A backward that ``begin`` saw raised: what was kept for it goes (``end`` never
        comes). A ``no_sync`` backward's slots are dropped unsummed, as torch's ``.grad``
        holds nothing of a backward that raised before its parameters' gradients were ready;
        a synced one's round fails at once (the other members' backwards of it get an error
        naming this device, where theirs did not raise too), and every member's next
        backward syncs in a round of its own, as torch's do after a backward that raised on
        every rank."""
        with self._lock:
            sync = self._syncs.pop(id(grads), None)
            self._local.pop(id(grads), None)
        if sync is None:
            return
        if sync.on_register in grads.on_register:
            grads.on_register.remove(sync.on_register)
        sync.server.withdraw(sync.step)

    @staticmethod
    def forget(devices: Any) -> None:
        """Drop what ``no_sync`` backwards accumulated on ``devices`` (their context closed)."""
        with _STATE_LOCK:
            for device in devices:
                _ACCUMULATED.pop(device, None)

    @staticmethod
    def _accumulate(slots: list[ParamSlot], grads: Any) -> None:
        """Add a ``no_sync`` backward's local gradients to its device's sums."""
        with _STATE_LOCK:
            sums = _ACCUMULATED.setdefault(grads.device, {})
            for slot in slots:
                value = grads.values.get(slot.node.id)
                if value is None:
                    continue
                buffer = to_buffer(grads.backend, value)
                earlier = sums.get(slot.pid.value)
                total = _copied(buffer) if earlier is None else earlier[1] + buffer
                sums[slot.pid.value] = (slot.node, total)


#: the one hook every running context installs (:func:`.registry.register_context`)
HOOK = GradientSyncHook()
