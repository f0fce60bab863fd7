"""The members of a job across processes (one rank each): who is alive and where, the
registration exchange that names a rank that never sends, the broken state after a fault, and
how a broken process exits. Every transport of one process per rank (``mpi``, ``torch``)
holds one :class:`Membership` over a small point-to-point :class:`Channel` of its own.

- **Heartbeats.** Every rank tells every other one, a few times per timeout, its heartbeat
  number, backward step and state (:data:`IDLE`, :data:`IN_BACKWARD`, :data:`WAITING`,
  :data:`CLOSING`, :data:`BROKEN`), so a collective that times out can say which rank went
  silent (died), closed its context (exited), or is alive but elsewhere
  (:meth:`Membership.member_status`).
  A rank tells its peers at once when it begins a step where the channel makes that cheap
  (a peer that times out must know whether this rank registered it); other changes ride on
  the periodic heartbeats.
- **Registration exchanges.** Each rank sends its registration to every peer through the
  channel, so a rank whose registration never arrives is named, and differing parameter sets
  are found from the metadata before the step's own collectives start.
- **Broken.** A collective a peer never joins cannot be taken back (MPI cannot cancel it,
  torch.distributed cannot either): after a timeout the membership is *broken*, every
  operation in flight fails, and every later one fails at once. The rank tells its peers at
  once (:data:`BROKEN`), and a peer that reads it before its next user collective breaks
  too (:meth:`Membership.heed_peers`): that collective would otherwise be matched with the
  one the broken rank abandoned (MPI's and gloo's collectives are matched by order), failing
  with a misleading mismatch or waiting out its timeout.
- **Exit.** At exit a process whose membership broke ends with status 1 before its library
  tears down (``MPI_Finalize``, the destructors of torch.distributed's groups), which would
  wait for the peer that is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from .pending import Pending

__all__ = [
    "BROKEN",
    "CLOSING",
    "IDLE",
    "IN_BACKWARD",
    "STATE_TEXT",
    "WAITING",
    "Channel",
    "Membership",
    "StepMismatchError",
]

# A member's progress (``Membership.set_state``), as peers see it in heartbeats.
IDLE, IN_BACKWARD, WAITING, CLOSING, BROKEN = 0, 1, 2, 3, 4
#: a peer's state as a fault message says it
STATE_TEXT = {
    IDLE: "not in a backward",
    IN_BACKWARD: "in its backward",
    WAITING: "waiting for its all-reduces",
    CLOSING: "closing its distributed context (exiting)",
    BROKEN: "broken by an earlier fault",
}
#: a peer silent for this many heartbeat intervals has probably died
_SILENT_BEATS = 3
#: how often ``close`` checks whether every rank has left
_CLOSE_POLL_SECONDS = 0.001


class StepMismatchError(Exception):
    """Raised by :meth:`Channel.collect`: a peer's registration is of another step."""


class Channel(Protocol):
    """What membership needs of a transport: small messages to and from every peer, none
    blocking. Errors it raises are named by :meth:`failure`."""

    #: how many times per heartbeat interval peers' heartbeats are read (cheap reads: several)
    reads_per_beat: int
    #: whether a step's begin is told at once rather than with the next heartbeat
    announces_steps: bool

    def beat(self, number: int, step: int, state: int) -> None:
        """Send this rank's heartbeat to every peer."""

    def beats(self) -> dict[int, tuple[int, int, int]]:
        """The latest ``(number, step, state)`` received from peers (any subset)."""

    def flush(self) -> None:
        """Let go of sends that have completed."""

    def post(self, number: int, values: np.ndarray) -> Any:
        """Send this rank's registration for exchange ``number``; a ticket for the others."""

    def collect(self, ticket: Any, waiting: list[int]) -> dict[int, np.ndarray]:
        """The registrations of ``waiting`` ranks that have arrived; :class:`StepMismatchError`
        if one is of another exchange."""

    def absent(self, ticket: Any, waiting: list[int]) -> list[int]:
        """Which of ``waiting`` have not sent their registration at all."""

    def exited(self, peer: int) -> str | None:
        """A sentence if the peer's process is known to have exited."""

    def leave(self) -> None:
        """Tell peers this rank is closing (after its last heartbeat)."""

    def left(self) -> bool:
        """Whether every rank has left."""

    def close(self, timeout: float) -> None:
        """Release what the channel holds (every rank has left)."""

    def failure(self, error: Exception) -> str | None:
        """``error`` (raised by the channel) as a fault's reason; ``None``: not the channel's."""


class _Exchange:
    __slots__ = ("number", "pending", "received", "ticket")

    def __init__(self, pending: Pending, number: int, ticket: Any, received: dict):
        self.pending = pending
        self.number = number
        self.ticket = ticket
        self.received: dict[int, np.ndarray] = received


class Membership:
    """One rank's view of its job. See the module docstring.

    ``on_break(message)`` fails what the transport has in flight; ``on_fault_exit()`` removes
    what a broken process would leave behind at exit (files in ``/dev/shm``).
    """

    def __init__(
        self,
        name: str,
        rank: int,
        size: int,
        heartbeat_interval: float,
        on_break: Callable[[str], None],
        on_fault_exit: Callable[[], None] | None = None,
    ):
        self.name, self.rank, self.size = name, rank, size
        self.peers = [r for r in range(size) if r != rank]
        self.heartbeat_interval = heartbeat_interval
        #: set when a fault left the job unusable
        self.broken: str | None = None
        #: this rank has said it closes (no heartbeats from now on), then it has closed
        self.closing = False
        self.closed = False
        #: this rank's backward step and state, as heartbeats tell them
        self.step, self.state = 0, IDLE
        self._on_break = on_break
        self._on_fault_exit = on_fault_exit
        self._channel: Channel | None = None
        self._exchanges: list[_Exchange] = []
        #: what a fault left unfinished: the channel may still write into its buffers
        self._abandoned: list[_Exchange] = []
        self._beat_number = 0
        self._peer_beat = dict.fromkeys(self.peers, -1)
        self._peer_state = {peer: (0, IDLE) for peer in self.peers}
        self._last_seen = dict.fromkeys(self.peers, time.monotonic())
        self._next_beat = self._next_read = self._read_interval = 0.0
        _watch(self)

    # -- set-up ---------------------------------------------------------------------------
    def never_started(self, reason: str) -> None:
        """The transport could not be set up (a rank never arrived): broken from the start."""
        self.broken = reason

    def connect(self, channel: Channel) -> None:
        """Start heartbeats over ``channel`` (the first is sent now)."""
        self._channel = channel
        now = time.monotonic()
        self._last_seen = dict.fromkeys(self.peers, now)
        self._beat()
        self._read_interval = self.heartbeat_interval / channel.reads_per_beat
        self._next_beat = now + self.heartbeat_interval
        self._next_read = now + self._read_interval

    # -- faults ---------------------------------------------------------------------------
    def fail(self, reason: str) -> None:
        """Break: fail everything in flight (the transport's, then the exchanges)."""
        if self.broken is None:
            self.broken = f"unusable after an earlier fault ({reason})"
            self._tell_broken()
        message = f"{self.name}: {reason}"
        exchanges, self._exchanges = self._exchanges, []
        self._abandoned.extend(exchanges)
        self._on_break(message)
        for exchange in exchanges:
            exchange.pending.finish(error=message)

    def _tell_broken(self) -> None:
        """Tell the peers at once that this rank broke (best effort: the channel may be what
        failed)."""
        self.state = BROKEN
        if self._channel is not None and not self.closing:
            with contextlib.suppress(Exception):
                self._beat()

    def heed_peers(self) -> None:
        """Read the peers' latest heartbeats now and break if one of them broke (called
        before a user collective starts: it would be matched with the collective that peer
        abandoned)."""
        if self.broken is not None or self._channel is None or self.closed:
            return
        try:
            self._read(time.monotonic())
        except Exception as error:
            self._failed(error)
            return
        broke = [peer for peer in self.peers if self._peer_state[peer][1] == BROKEN]
        if broke:
            # (only here: a rank still waiting on a collective keeps its own diagnosis of
            # who never joined it rather than taking a peer's word that the group broke)
            names = ", ".join(f"rank {peer}" for peer in broke)
            self.fail(f"{names} broke after a fault, so the group is broken")

    def _failed(self, error: Exception, what: str = "") -> None:
        """Break on ``error`` if the channel raised it, else raise it again."""
        failure = self._channel.failure(error) if self._channel is not None else None
        if failure is None:
            raise error
        self.fail(f"{what}{failure}")

    # -- registration exchanges -----------------------------------------------------------
    def exchange(self, pending: Pending, number: int, values: np.ndarray) -> None:
        """Gather every rank's registration for backward step ``number`` into ``pending``."""
        if self.broken:
            pending.finish(error=f"{self.name}: {self.broken}")
            return
        values = np.ascontiguousarray(values, dtype=np.int64)
        try:
            ticket = self._channel.post(number, values)
            exchange = _Exchange(pending, number, ticket, {self.rank: values})
            self._exchanges.append(exchange)
            if self._poll(exchange) and exchange in self._exchanges:
                self._exchanges.remove(exchange)
        except Exception as error:
            self._failed(error)
            pending.finish(error=f"{self.name}: {self.broken}")

    @property
    def exchanging(self) -> bool:
        return bool(self._exchanges)

    def _poll(self, exchange: _Exchange) -> bool:
        """Advance ``exchange``; true once complete (or failed)."""
        waiting = [r for r in range(self.size) if r not in exchange.received]
        try:
            exchange.received.update(self._channel.collect(exchange.ticket, waiting))
        except StepMismatchError as error:
            self.fail(str(error))
            return True
        if len(exchange.received) < self.size:
            return False
        exchange.pending.finish([exchange.received[r] for r in range(self.size)])
        return True

    def _absent(self, exchange: _Exchange) -> list[int]:
        waiting = [r for r in range(self.size) if r not in exchange.received]
        return self._channel.absent(exchange.ticket, waiting)

    def missing(self, pending: Pending) -> list[int] | None:
        """The ranks whose registration for ``pending`` (an exchange) never came, or
        ``None`` for anything else (a collective does not say who has not joined)."""
        for exchange in self._exchanges:
            if exchange.pending is pending:
                with contextlib.suppress(Exception):  # the channel is gone: nobody known
                    return self._absent(exchange)
        return None

    def unregistered(self) -> list[tuple[int, int]]:
        """``(step, rank)`` of every registration this rank still waits for."""
        found = []
        for exchange in self._exchanges:
            with contextlib.suppress(Exception):  # the channel is gone: nobody known
                found += [(exchange.number, rank) for rank in self._absent(exchange)]
        return found

    # -- heartbeats ------------------------------------------------------------------------
    def progress(self) -> None:
        """Advance the exchanges, send a heartbeat when one is due, read the peers' when
        theirs are."""
        if self.closed or self._channel is None:
            return
        try:
            for exchange in list(self._exchanges) if self._exchanges else ():
                if self._poll(exchange) and exchange in self._exchanges:
                    self._exchanges.remove(exchange)
            self._tick()
        except Exception as error:
            self._failed(error)

    def due(self) -> float | None:
        """Seconds until the next heartbeat is due (``None`` once closed)."""
        if self.closed or self._channel is None:
            return None
        return max(0.0, self._next_beat - time.monotonic())

    def _beat(self) -> None:
        self._beat_number += 1
        self._channel.beat(self._beat_number, self.step, self.state)

    def _tick(self) -> None:
        now = time.monotonic()
        # Peers' heartbeats matter only when a timeout is diagnosed (``member_status`` reads
        # them then too): reading them on every poll would cost a read per peer per poll.
        if now >= self._next_read:
            self._next_read = now + self._read_interval
            self._read(now)
            self._channel.flush()
        if now >= self._next_beat and not self.closing:
            self._beat()
            self._next_beat = now + self.heartbeat_interval

    def _read(self, now: float) -> None:
        for peer, (number, step, state) in self._channel.beats().items():
            if number != self._peer_beat[peer]:
                self._peer_beat[peer] = number
                self._last_seen[peer] = now
            self._peer_state[peer] = (step, state)

    def _refresh(self) -> None:
        """Read the peers' latest heartbeats, if the channel still can."""
        if self._channel is not None and not self.closed:
            with contextlib.suppress(Exception):  # what was read before is the best known
                self._read(time.monotonic())

    def set_state(self, step: int, state: int) -> None:
        """This rank's progress; a step's begin is told at once where the channel
        ``announces_steps`` (a message to every peer at each change would cost every step
        three rounds of them)."""
        if self.closing or self.broken is not None:
            return
        begun = step != self.step
        self.step, self.state = step, state
        if begun and self._channel is not None and self._channel.announces_steps:
            try:
                self._beat()
            except Exception as error:
                self._failed(error)

    # -- what is known of the peers -------------------------------------------------------
    def behind(self, step: int) -> list[int]:
        """Peers whose heartbeats say they have not begun backward step ``step``."""
        self._refresh()
        return [peer for peer in self.peers if self._peer_state[peer][0] < step]

    def member_status(self, index: int) -> str | None:
        """What is known of rank ``index``, as a sentence that names it."""
        if index == self.rank:
            return None
        self._refresh()
        exited = self._channel.exited(index) if self._channel is not None else None
        if exited:
            return exited
        step, state = self._peer_state[index]
        if state == CLOSING:
            return f"rank {index} closed its distributed context (its process is exiting)"
        silent = time.monotonic() - self._last_seen[index]
        if silent > _SILENT_BEATS * self.heartbeat_interval:
            return f"rank {index} has sent no heartbeat for {silent:.1f} s, so it has probably died"
        return (
            f"rank {index} is alive (last heartbeat {silent:.1f} s ago) at backward step {step}, "
            f"{STATE_TEXT.get(state, '?')}"
        )

    def peers_status(self) -> str:
        """What is known of every peer."""
        known = [self.member_status(peer) for peer in self.peers]
        return "; ".join(text for text in known if text)

    # -- closing ----------------------------------------------------------------------------
    def close(self, timeout: float, interrupted: Callable[[], str | None] | None = None) -> None:
        """Tell peers, wait (at most ``timeout``) until every rank has left, release the
        channel. ``interrupted()`` gives a reason to stop waiting early (``None``: go on).
        A broken membership only marks itself closed: its peers may be gone."""
        if self.broken is None and self._channel is not None:
            try:
                self.state = CLOSING
                self._beat()
                self.closing = True
                self._channel.leave()
                deadline = time.monotonic() + timeout
                while not self._channel.left():
                    self._tick()
                    reason = interrupted() if interrupted is not None else None
                    if reason:
                        self.fail(reason)
                        break
                    if time.monotonic() > deadline:
                        waiting = self.peers_status()
                        self.fail(f"closing: not every rank closed its context ({waiting})")
                        break
                    time.sleep(_CLOSE_POLL_SECONDS)
            except Exception as error:
                self._failed(error, "closing: ")
        if self.broken is None and self._channel is not None:
            self._channel.close(timeout)
        self.closed = True


_MEMBERSHIPS: weakref.WeakSet = weakref.WeakSet()
_EXIT_HANDLER_REGISTERED = False


def _watch(membership: Membership) -> None:
    """Check ``membership`` at exit (the handler is registered with the first one)."""
    global _EXIT_HANDLER_REGISTERED
    if not _EXIT_HANDLER_REGISTERED:
        atexit.register(_exit_if_broken)
        _EXIT_HANDLER_REGISTERED = True
    _MEMBERSHIPS.add(membership)


def _exit_if_broken() -> None:
    """At exit: a process whose membership broke ends here, with status 1 (see the module
    docstring), once every membership has removed what it would leave behind."""
    memberships = list(_MEMBERSHIPS)
    if any(membership.broken for membership in memberships):
        for membership in memberships:
            if membership._on_fault_exit is not None:
                membership._on_fault_exit()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # nothing left to report to
                stream.flush()
        os._exit(1)
