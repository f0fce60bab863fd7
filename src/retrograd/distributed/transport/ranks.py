"""What the transports of one process per rank (``mpi``, ``torch``) share: a
:class:`~retrograd.distributed.membership.Membership` over the channel each provides, the
collectives in flight, and the checks every collective starts with.

A subclass says how a collective starts (``_start_all_reduce``, ``_start_all_gather``: a
handle and the result the library fills in), how to tell it has completed (``_complete``),
what an error it raises means (``_failure``), and closes itself. Everything else (the broken
state, registration exchanges, heartbeats, what a timeout says of each rank) is the
membership's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ...device import Device
from ..config import DistributedConfig, ReduceOperation
from ..membership import Membership
from ..pending import Pending
from .base import IDLE, Polled, Transport

__all__ = ["InFlight", "RankTransport", "StartError"]


class InFlight:
    """A collective the library is running: its handle (the subclass's), and its result,
    which the library fills in place (kept, with whatever it reduces in place, until then)."""

    __slots__ = ("handle", "pending", "result")

    def __init__(self, pending: Pending, handle: Any, result: list[Any]):
        self.pending = pending
        self.handle = handle
        self.result = result


class StartError(Exception):
    """A collective could not start; the transport breaks with ``reason``."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def dtype_name(buffer: Any) -> str:
    """A buffer's dtype as NumPy names it (torch's ``torch.float32`` ends alike)."""
    return str(buffer.dtype).rpartition(".")[2]


class RankTransport(Transport):
    """Collectives between the ranks of a job, one device each. See the module docstring."""

    def __init__(
        self,
        config: DistributedConfig,
        rank: int,
        size: int,
        kind: str,
        on_fault_exit: Callable[[], None] | None = None,
    ):
        members = [Device(kind, r) for r in range(size)]
        super().__init__(members, [members[rank]])
        self.rank, self.size = rank, size
        self.peers = [r for r in range(size) if r != rank]
        self.timeout = config.timeout
        self.membership = Membership(
            self.name, rank, size, config.heartbeat_interval, self._fail_in_flight, on_fault_exit
        )
        self._in_flight: list[InFlight] = []
        #: what a fault left unfinished: the library may still write into its buffers (a
        #: peer that catches up), so they stay allocated for as long as the process lives
        self._abandoned: list[InFlight] = []
        self._closed = False

    @property
    def broken(self) -> str | None:
        return self.membership.broken

    # -- collectives ------------------------------------------------------------------------
    # (the collectives' signatures and types: ``Transport``)
    def all_reduce(self, device, buffers, op, key, group, donated=None) -> Pending:
        pending = Pending(key)
        if not self._admit(pending, "all_reduce", buffers, group):
            return pending
        if self.size == 1:  # nothing to reduce with: the buffers are the result
            pending.finish(list(buffers))
            return pending
        return self._launch(pending, lambda: self._start_all_reduce(buffers, op, key, donated))

    def all_gather(self, device, buffers, key, group) -> Pending:
        pending = Pending(key)
        if not self._admit(pending, "all_gather", buffers, group):
            return pending
        if self.size == 1:
            pending.finish([buffer[None] for buffer in buffers])
            return pending
        return self._launch(pending, lambda: self._start_all_gather(buffers, key))

    def exchange(self, device: Device, values: np.ndarray, key: Hashable) -> Pending:
        pending = Pending(key)
        self.membership.exchange(pending, int(key[1]), values)
        return pending

    def _admit(self, pending: Pending, what: str, buffers: Sequence[Any], group: tuple) -> bool:
        """Whether a collective may start; else ``pending`` fails with why."""
        if self.broken:
            problem = self.broken
        elif tuple(group) != self.members:
            problem = (
                f"{what} runs over every rank (ctx.devices); subgroups are not supported, "
                f"got {', '.join(map(str, group))}"
            )
        elif any(b.dtype != buffers[0].dtype for b in buffers) and (
            len({dtype_name(b) for b in buffers}) > 1  # (names: NumPy's and torch's dtypes)
        ):
            problem = f"a fused {what.replace('_', '-')} needs one dtype"
        else:
            return True
        pending.finish(error=f"{self.name}: {problem}")
        return False

    def _launch(self, pending: Pending, start: Callable[[], tuple[Any, list[Any]]]) -> Pending:
        try:
            handle, result = start()
        except StartError as failure:
            self.membership.fail(failure.reason)
            pending.finish(error=f"{self.name}: {self.broken}")
            return pending
        self._in_flight.append(InFlight(pending, handle, result))
        return pending

    def _start_all_reduce(
        self, buffers: Sequence[Any], op: ReduceOperation, key: Hashable, donated: Any
    ) -> tuple[Any, list[Any]]:
        """Start the library's all-reduce: ``(handle, result)`` (raises :class:`StartError`)."""
        raise NotImplementedError

    def _start_all_gather(self, buffers: Sequence[Any], key: Hashable) -> tuple[Any, list[Any]]:
        """Start the library's all-gather: ``(handle, result)`` (raises :class:`StartError`)."""
        raise NotImplementedError

    def _complete(self, handle: Any) -> bool:
        """Whether the collective of ``handle`` has completed (raises what the library does)."""
        raise NotImplementedError

    def _failure(self, item: InFlight, error: Exception) -> str | None:
        """``error``, raised by the library about ``item``, as the reason the transport
        breaks; ``None``: not the library's (an error of ours, raised again)."""
        return None

    def _interruption(self) -> str | None:
        """A reason to stop waiting on peers now (the launcher stops this rank), or ``None``."""
        return None

    # -- driving ---------------------------------------------------------------------------
    def needs_progress(self) -> bool:
        return bool(self._in_flight or self.membership.exchanging)

    def progress(self) -> Polled:
        if self._closed:
            return IDLE
        membership = self.membership
        if membership.broken is None:
            interrupted = self._interruption()
            if interrupted is not None:
                membership.fail(interrupted)
        completed = False
        for item in list(self._in_flight) if self._in_flight else ():
            if item not in self._in_flight:  # a completion's callback broke the transport
                continue
            try:
                done = self._complete(item.handle)
            except Exception as error:
                failure = self._failure(item, error)
                if failure is None:
                    raise
                membership.fail(failure)  # fails it and the rest
                break
            if done:
                completed = True
                self._in_flight.remove(item)
                item.pending.finish(item.result)  # its callbacks may launch more
        membership.progress()
        if self._in_flight or membership.exchanging:
            return Polled(True, completed, None)
        return Polled(False, completed, membership.due())

    def _fail_in_flight(self, message: str) -> None:
        items, self._in_flight = self._in_flight, []
        self._abandoned.extend(items)
        for item in items:
            item.pending.finish(error=message)

    # -- what is known of the members -------------------------------------------------------
    def heed_peers(self) -> None:
        self.membership.heed_peers()

    def missing(self, pending: Pending) -> list[int] | None:
        return self.membership.missing(pending)

    def behind(self, step: int) -> list[int] | None:
        return self.membership.behind(step)

    def member_name(self, index: int) -> str:
        return f"rank {index}"

    def member_status(self, index: int) -> str | None:
        return self.membership.member_status(index)

    def abandon(self, pending: Pending, reason: str) -> None:
        """A timed-out collective or exchange cannot be taken back: the transport breaks."""
        self.membership.fail(reason)

    def set_state(self, step: int, state: int) -> None:
        self.membership.set_state(step, state)
