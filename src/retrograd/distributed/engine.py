"""The collective interface every engine implements, and the handle of an operation in flight.

An engine connects the *members* of a context (one per device, in rank order) and offers two
non-blocking collectives: an all-reduce of NumPy buffers and an all-gather of small int64
arrays (the metadata devices agree on before a backward's gradients are reduced). Each returns a
:class:`Pending`; ``progress()`` drives what is in flight. Engine methods are called under the
sync server's lock (from a device thread or the server thread), one at a time, so engines need
no locks of their own.

Engines here: ``local`` (threads of one process, shared memory) and ``mpi`` (one process per
rank, ``mpi4py``). A ``torch.distributed`` engine (gloo, NCCL) fits the same shape: its
``all_reduce`` is ``dist.all_reduce(tensor, async_op=True)``, ``progress`` polls each
``Work.is_completed()``, ``ordered`` is true as for MPI, and the heartbeats of the MPI engine
can ride on its store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ..device import Device
from ..errors import DistributedError
from .config import ReduceOperation

__all__ = [
    "CLOSING",
    "IDLE",
    "IN_BACKWARD",
    "STATE_TEXT",
    "WAITING",
    "Collective",
    "Pending",
    "RankCollective",
]

# A member's progress (``Collective.set_state``), as peers see it in heartbeats.
IDLE, IN_BACKWARD, WAITING, CLOSING = 0, 1, 2, 3
#: a peer's state as a fault message says it
STATE_TEXT = {
    IDLE: "not in a backward",
    IN_BACKWARD: "in its backward",
    WAITING: "waiting for its all-reduces",
    CLOSING: "closing its distributed context (exiting)",
}


class Pending:
    """A collective in flight; completes once, with a result or an error message.

    ``wait(timeout)`` blocks the calling (device) thread until it completes and says whether
    it did; ``outcome()`` then returns the result or raises :class:`DistributedError`.
    ``then`` and ``finish`` run under the sync server's lock only.
    """

    __slots__ = (
        "_done",
        "_event",
        "callbacks",
        "error",
        "finished_at",
        "key",
        "launched_at",
        "result",
    )

    def __init__(self, key: Hashable):
        self.key = key
        self.result: Any = None
        self.error: str | None = None
        self.callbacks: list[Callable[[Pending], None]] = []
        self.launched_at = time.perf_counter()
        self.finished_at: float | None = None
        self._done = False
        # Made on the first wait only: most handles (a bucket's) are never waited on by a
        # thread, and an Event costs a lock and a condition.
        self._event: threading.Event | None = None

    def done(self) -> bool:
        return self._done

    def wait(self, timeout: float | None) -> bool:
        if self._done:
            return True
        with _EVENT_LOCK:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        # finish() sets _done before it looks for the event, and the event is published
        # before _done is read again here: one of the two sides sees the other.
        if self._done:
            return True
        return event.wait(timeout)

    def outcome(self) -> Any:
        if self.error is not None:
            raise DistributedError(self.error)
        return self.result

    def then(self, callback: Callable[[Pending], None]) -> None:
        """Call ``callback(self)`` on completion (now, if already complete)."""
        if self._done:
            callback(self)
        else:
            self.callbacks.append(callback)

    def finish(self, result: Any = None, error: str | None = None) -> None:
        """Complete with ``result`` or ``error`` (first call wins); runs the callbacks."""
        if self._done:
            return
        self.result, self.error = result, error
        self.finished_at = time.perf_counter()
        self._done = True
        event = self._event
        if event is not None:
            event.set()
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback(self)

    def __repr__(self) -> str:
        state = "error" if self.error else ("done" if self._done else "in flight")
        return f"Pending({self.key!r}, {state})"


_EVENT_LOCK = threading.Lock()


class Collective:
    """Base of the engines. See the module docstring."""

    #: the engine's name in messages
    name = "?"
    #: collectives must be launched in the same order on every member (MPI, NCCL); the local
    #: engine matches them by key and accepts any order
    ordered = False
    #: a timed-out collective leaves the engine usable for the next step
    recoverable = True
    #: members agree on their registrations once per graph shape: while a member registers
    #: what it registered at the last exchange, the server reuses the plan agreed then and
    #: checks it with a flag in the first bucket instead of exchanging (engines of one
    #: device per process, whose collectives launch in one order: ``mpi``); such an engine
    #: says in :meth:`behind` which members have not begun a step
    agrees_once = False
    #: set by the server while a device thread is blocked on a result: engines that must be
    #: polled poll as fast as they can then
    urgent = False
    #: whether reducing gradients during backward can beat one collective after it: false
    #: when no core is free to move the data meanwhile (``DistributedConfig.overlap=None``
    #: follows it)
    overlap_pays = True
    #: set by the server: gradients are reduced during backward (else in one collective
    #: after it, which the waiting device thread drives itself)
    overlapping = True
    #: gradient buffers the server passes as ``donated`` may be reduced in place, the buffer
    #: becoming its own result, instead of being copied into a bucket buffer first: worth it
    #: where copying costs more than a collective more (``mpi`` with a core for each rank).
    #: The server then sends the first bucket's header in a collective of its own, ahead of
    #: the buckets, so that a fast attempt knows it holds before it gives up its gradients
    #: (they are kept for a redo until then)
    donates = False

    def __init__(self, members: Sequence[Device], local: Sequence[Device]):
        #: every participant's device, in rank order
        self.members: tuple[Device, ...] = tuple(members)
        #: the members hosted by this process
        self.local: tuple[Device, ...] = tuple(local)
        self.index = {device: i for i, device in enumerate(self.members)}
        #: set when a fault left the engine unusable (``recoverable`` engines never set it)
        self.broken: str | None = None

    # -- the collectives -------------------------------------------------------------------
    def all_reduce(
        self,
        device: Device,
        buffers: Sequence[np.ndarray],
        op: ReduceOperation,
        key: Hashable,
        group: tuple[Device, ...],
        donated: Sequence[bool] | None = None,
    ) -> Pending:
        """Start reducing ``buffers`` (this member's contribution) with every member of
        ``group``; the result is one array per buffer, same shapes. A buffer ``donated`` (by
        position) is the caller's to give: nothing else holds it, and an engine that
        ``donates`` may reduce it in place."""
        raise NotImplementedError

    def all_gather(self, device: Device, values: np.ndarray, key: Hashable) -> Pending:
        """Start gathering a 1-d int64 array from every member; the result is the list of
        arrays in member order (lengths may differ)."""
        raise NotImplementedError

    def progress(self) -> float | None:
        """Drive operations in flight; return how soon to call again (``None``: only when a
        new operation is started)."""
        return None

    def needs_progress(self) -> bool:
        """Whether operations in flight complete only through ``progress()`` calls."""
        return False

    def settle(self, seconds: float) -> bool:
        """Wait at most ``seconds`` for an operation in flight to complete, in the engine's
        own cheap polling loop (called with nothing else to do; ``progress()`` then collects
        it); false at once from an engine without one (the server then waits as usual)."""
        return False

    # -- faults ----------------------------------------------------------------------------
    def missing(self, pending: Pending) -> list[int] | None:
        """Member indices that have not joined ``pending`` yet, or ``None`` if unknown."""
        return None

    def behind(self, step: int) -> list[int] | None:
        """Members known (from their heartbeats) not to have begun backward step ``step``
        yet, or ``None`` if unknown."""
        return None

    def member_name(self, index: int) -> str:
        """A member, as error messages name it."""
        return str(self.members[index])

    def member_status(self, index: int) -> str | None:
        """What is known of a member's state (a sentence that names it), if anything."""
        return None

    def abandon(self, pending: Pending, reason: str) -> None:
        """Give up on ``pending`` (it timed out): fail it and whatever it cannot outlive."""
        pending.finish(error=reason)

    def set_state(self, step: int, state: int) -> None:
        """This process's progress, told to peers in heartbeats (engines across processes)."""

    def close(self, timeout: float) -> None:
        """Release what the engine holds; pending operations fail."""


class RankCollective(Collective):
    """What the engines of one process per rank (``mpi``, ``torch``) share: the collectives
    (``_in_flight``) and registration exchanges (``_exchanges``) they track, each with its
    ``pending``, and that a fault breaks them all: a timed-out collective cannot be taken back
    on any rank, so the engine is unusable afterwards."""

    def abandon(self, pending: Pending, reason: str) -> None:
        """A timed-out collective or exchange cannot be taken back: the engine breaks."""
        self._break(reason)

    def _break(self, reason: str) -> None:
        if self.broken is None:
            self.broken = f"unusable after an earlier fault ({reason})"
        message = f"{self.name}: {reason}"
        for item in self._in_flight:
            item.pending.finish(error=message)
        for exchange in self._exchanges:
            exchange.pending.finish(error=message)
        # The library may still write into the buffers of what never completed (a peer that
        # catches up): they stay allocated for as long as the process lives.
        self._abandoned = [*getattr(self, "_abandoned", ()), *self._in_flight, *self._exchanges]
        self._in_flight, self._exchanges = [], []
