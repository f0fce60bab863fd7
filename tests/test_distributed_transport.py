"""The transport layer and the membership on their own, in one process: the local transport's
collectives, the poll schedule, a :class:`Membership` over an in-memory channel (heartbeats,
member status, registration exchanges, the broken state, closing), and what the transports of
one process per rank share (:class:`RankTransport`), over a stand-in library."""

from __future__ import annotations

import time

import numpy as np
import pytest

from retrograd.device import Device
from retrograd.distributed import DistributedConfig, ReduceOperation
from retrograd.distributed import membership as membership_module
from retrograd.distributed.membership import (
    CLOSING,
    IN_BACKWARD,
    WAITING,
    Membership,
    StepMismatchError,
)
from retrograd.distributed.pending import Pending
from retrograd.distributed.transport.base import Capabilities, Polled
from retrograd.distributed.transport.local import LocalTransport
from retrograd.distributed.transport.pacing import (
    BACKED_OFF_POLL_SECONDS,
    IDLE_POLL_SECONDS,
    POLL_SECONDS,
    SPIN_SECONDS,
    Pacer,
)
from retrograd.distributed.transport.ranks import RankTransport, StartError

pytestmark = pytest.mark.backend_independent("transports move NumPy arrays, no tensor")

SUM, MEAN = ReduceOperation.SUM, ReduceOperation.MEAN


@pytest.fixture(autouse=True)
def _no_exit_on_fault():
    """A membership a test breaks must not end the test process at exit (as it would end a
    rank's): forget the ones made here."""
    before = set(membership_module._MEMBERSHIPS)
    yield
    for made in set(membership_module._MEMBERSHIPS) - before:
        membership_module._MEMBERSHIPS.discard(made)


# -- the local transport ------------------------------------------------------------------------
def test_local_collectives_complete_when_every_member_joined():
    devices = (Device("cpu", 0), Device("cpu", 1))
    transport = LocalTransport(devices)
    a, b = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    first = transport.all_reduce(devices[0], [a], MEAN, ("op", devices, 0), devices)
    assert not first.done() and transport.missing(first) == [1]
    second = transport.all_reduce(devices[1], [b], MEAN, ("op", devices, 0), devices)
    assert first.done() and second.done()
    np.testing.assert_array_equal(first.outcome()[0], (a + b) / 2)
    assert first.outcome()[0] is second.outcome()[0]  # one result, shared read-only
    assert not first.outcome()[0].flags.writeable

    gathered = [
        transport.all_gather(d, [x, x[0]], ("op", devices, 1), devices)
        for d, x in zip(devices, (a, b))
    ]
    stacked, rows = gathered[0].outcome()
    np.testing.assert_array_equal(stacked, np.stack([a, b]))
    np.testing.assert_array_equal(rows, np.stack([a[0], b[0]]))
    assert gathered[1].outcome()[0] is stacked

    exchanged = [
        transport.exchange(d, np.arange(n, dtype=np.int64), ("reg", 1))
        for d, n in zip(devices, (2, 3))
    ]
    assert [v.tolist() for v in exchanged[1].outcome()] == [[0, 1], [0, 1, 2]]


def test_local_collectives_name_what_differs():
    devices = (Device("cpu", 0), Device("cpu", 1))
    transport = LocalTransport(devices)
    key = ("op", devices, 0)
    transport.all_gather(devices[0], [np.zeros(2)], key, devices)
    late = transport.all_gather(devices[1], [np.zeros(3)], key, devices)
    assert "differ in shape or dtype (cpu: [2] float64, cpu:1: [3] float64)" in late.error
    transport.all_reduce(devices[0], [np.zeros(2)], SUM, ("op", devices, 1), devices)
    wrong = transport.all_gather(devices[1], [np.zeros(2)], ("op", devices, 1), devices)
    assert "joined with group" in wrong.error and "all_reduce" in wrong.error


# -- polling --------------------------------------------------------------------------------------
def test_a_waiting_member_spins_briefly_then_backs_off_and_a_completion_renews_the_spin():
    pacer = Pacer(spins=True)
    busy = Polled(True, False, None)
    assert pacer.delay(busy, urgent=False, overlapping=True) == POLL_SECONDS
    assert pacer.delay(busy, urgent=False, overlapping=False) == IDLE_POLL_SECONDS
    assert pacer.delay(busy, urgent=True, overlapping=True) == 0.0
    time.sleep(2 * SPIN_SECONDS)
    assert pacer.delay(busy, urgent=True, overlapping=True) == BACKED_OFF_POLL_SECONDS
    assert pacer.delay(Polled(True, True, None), urgent=True, overlapping=True) == 0.0
    assert pacer.delay(Polled(False, False, 0.25), urgent=True, overlapping=True) == 0.25


def test_capabilities_are_one_frozen_value():
    capabilities = Capabilities(ordered=True, recoverable=False)
    with pytest.raises(AttributeError):
        capabilities.ordered = False  # type: ignore[misc]
    assert LocalTransport.capabilities == Capabilities()


# -- the membership over an in-memory channel -------------------------------------------------
class BusDownError(Exception):
    pass


class Bus:
    """What the ranks of one test share: heartbeats, registrations, who has left."""

    def __init__(self, size: int):
        self.size = size
        self.beats: dict[int, tuple[int, int, int]] = {}
        self.registrations: dict[tuple[int, int], np.ndarray] = {}
        self.left: set[int] = set()
        self.down = False


class BusChannel:
    reads_per_beat = 2
    announces_steps = True

    def __init__(self, bus: Bus, rank: int):
        self.bus, self.rank = bus, rank
        self.peers = [r for r in range(bus.size) if r != rank]

    def _check(self) -> None:
        if self.bus.down:
            raise BusDownError("the bus is down")

    def failure(self, error: Exception) -> str | None:
        return f"bus error: {error}" if isinstance(error, BusDownError) else None

    def beat(self, number, step, state):
        self._check()
        self.bus.beats[self.rank] = (number, step, state)

    def beats(self):
        self._check()
        return {peer: self.bus.beats[peer] for peer in self.peers if peer in self.bus.beats}

    def flush(self):
        pass

    def post(self, number, values):
        self._check()
        self.bus.registrations[(number, self.rank)] = values
        return number

    def collect(self, ticket, waiting):
        self._check()
        arrived = {}
        for rank in waiting:
            if (ticket, rank) in self.bus.registrations:
                arrived[rank] = self.bus.registrations[(ticket, rank)]
            elif any(n > ticket and r == rank for n, r in self.bus.registrations):
                raise StepMismatchError(f"rank {rank} is past step {ticket}")
        return arrived

    def absent(self, ticket, waiting):
        return [r for r in waiting if (ticket, r) not in self.bus.registrations]

    def exited(self, peer):
        return None

    def leave(self):
        self.bus.left.add(self.rank)

    def left(self):
        return len(self.bus.left) == self.bus.size

    def close(self, timeout):
        pass


def members(size: int, interval: float = 1.0):
    """``size`` connected memberships over one bus, and what each one's transport failed."""
    bus = Bus(size)
    failed: list[list[str]] = [[] for _ in range(size)]
    made = []
    for rank in range(size):
        membership = Membership("bus", rank, size, interval, failed[rank].append)
        membership.connect(BusChannel(bus, rank))
        made.append(membership)
    return bus, made, failed


def test_an_exchange_completes_with_every_ranks_registration_and_names_the_missing():
    _, (zero, one, two), _ = members(3)
    pendings = [Pending(("reg", 1)) for _ in range(3)]
    zero.exchange(pendings[0], 1, np.array([7, 7]))
    one.exchange(pendings[1], 1, np.array([8]))
    assert zero.exchanging and zero.missing(pendings[0]) == [2]
    assert zero.unregistered() == [(1, 2)]
    two.exchange(pendings[2], 1, np.array([9, 9, 9]))
    assert pendings[2].done()
    for membership in (zero, one):
        membership.progress()
    for pending in pendings:
        assert [v.tolist() for v in pending.outcome()] == [[7, 7], [8], [9, 9, 9]]
    assert not zero.exchanging and zero.missing(pendings[0]) is None


class Clock:
    """A stand-in for the ``time`` module: its clock moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_member_status_says_alive_closing_or_silent(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(membership_module, "time", clock)
    _, (zero, one), _ = members(2, interval=0.5)
    one.set_state(3, WAITING)  # a step's begin is announced at once on this channel
    clock.sleep(0.25)
    assert zero.member_status(1) == (
        "rank 1 is alive (last heartbeat 0.0 s ago) at backward step 3, waiting for its all-reduces"
    )
    assert zero.member_status(0) is None
    assert zero.behind(3) == [] and zero.behind(4) == [1]
    clock.sleep(2.0)  # rank 1 sends nothing more
    assert zero.member_status(1) == (
        "rank 1 has sent no heartbeat for 2.0 s, so it has probably died"
    )
    one.set_state(3, CLOSING)
    one.progress()  # its heartbeat is due
    assert zero.member_status(1) == (
        "rank 1 closed its distributed context (its process is exiting)"
    )


def test_a_fault_breaks_the_membership_and_fails_what_is_in_flight():
    _, (zero, one), failed = members(2)
    pending = Pending(("reg", 1))
    zero.exchange(pending, 1, np.array([1]))
    zero.fail("a collective timed out")
    assert zero.broken == "unusable after an earlier fault (a collective timed out)"
    assert pending.error == "bus: a collective timed out"
    assert failed[0] == ["bus: a collective timed out"]
    later = Pending(("reg", 2))
    zero.exchange(later, 2, np.array([1]))
    assert later.error == f"bus: {zero.broken}"
    assert one.broken is None


def test_a_channel_error_or_a_rank_at_another_step_breaks_it():
    bus, (zero, one), _ = members(2)
    ahead = Pending(("reg", 2))
    one.exchange(ahead, 2, np.array([1]))
    behind = Pending(("reg", 1))
    zero.exchange(behind, 1, np.array([1]))
    assert behind.error == "bus: rank 1 is past step 1"
    bus.down = True
    one.set_state(5, IN_BACKWARD)
    assert one.broken == "unusable after an earlier fault (bus error: the bus is down)"
    assert ahead.error == "bus: bus error: the bus is down"


def test_closing_waits_for_every_rank_and_breaks_past_the_timeout():
    bus, (zero, _one), _ = members(2)
    bus.left.add(1)  # rank 1 has closed
    zero.close(timeout=5.0)
    assert zero.closed and zero.broken is None
    _, (zero, _one), _ = members(2)
    zero.close(timeout=0.05)  # rank 1 never closes
    assert zero.closed and "closing: not every rank closed its context (rank 1 is" in zero.broken
    _, (zero, _one), _ = members(2)
    zero.close(timeout=5.0, interrupted=lambda: "stopped by the launcher")
    assert zero.broken == "unusable after an earlier fault (stopped by the launcher)"


# -- what the transports of one process per rank share ---------------------------------------
class Handle:
    def __init__(self, error: Exception | None = None):
        self.done, self.error = False, error


class StandIn(RankTransport):
    """A RankTransport over a stand-in library whose collectives complete when told to."""

    name = "stand-in"
    capabilities = Capabilities(ordered=True, recoverable=False)

    def __init__(self, rank: int, size: int, bus: Bus, refuse: str | None = None):
        super().__init__(DistributedConfig(timeout=5.0), rank, size, "cpu")
        self.membership.connect(BusChannel(bus, rank))
        self.refuse = refuse
        self.handles: list[Handle] = []

    def _start_all_reduce(self, buffers, op, key, donated):
        if self.refuse:
            raise StartError(self.refuse)
        handle = Handle()
        self.handles.append(handle)
        return handle, [np.asarray(b) * self.size for b in buffers]

    def _complete(self, handle):
        if handle.error is not None:
            raise handle.error
        return handle.done

    def _failure(self, item, error):
        return f"library error: {error}" if isinstance(error, RuntimeError) else None

    def close(self, timeout):
        self.membership.close(timeout)
        self._closed = True


def test_a_rank_transport_checks_launches_completes_and_breaks():
    bus = Bus(2)
    transport = StandIn(0, 2, bus)
    devices = transport.members
    assert devices == (Device("cpu", 0), Device("cpu", 1)) and transport.local == devices[:1]
    refused = transport.all_reduce(devices[0], [np.ones(2)], SUM, ("op", devices, 0), devices[:1])
    assert "stand-in: all_reduce runs over every rank (ctx.devices)" in refused.error
    mixed = [np.ones(2, np.float32), np.ones(2)]
    refused = transport.all_reduce(devices[0], mixed, SUM, ("op", devices, 0), devices)
    assert refused.error == "stand-in: a fused all-reduce needs one dtype"

    first = transport.all_reduce(devices[0], [np.ones(2)], SUM, ("grad", 1, 0), devices)
    second = transport.all_reduce(devices[0], [np.ones(3)], SUM, ("grad", 1, 1), devices)
    polled = transport.progress()
    assert polled.in_flight and not polled.completed and transport.needs_progress()
    transport.handles[0].done = True
    polled = transport.progress()
    assert polled.completed and first.outcome()[0].tolist() == [2.0, 2.0]
    assert not second.done()

    transport.handles[1].error = RuntimeError("peer reset")
    transport.progress()
    assert second.error == "stand-in: library error: peer reset"
    assert transport.broken == "unusable after an earlier fault (library error: peer reset)"
    after = transport.all_reduce(devices[0], [np.ones(2)], SUM, ("grad", 2, 0), devices)
    assert after.error == f"stand-in: {transport.broken}"
    assert not transport.needs_progress()


def test_a_rank_transport_that_cannot_start_a_collective_breaks():
    transport = StandIn(0, 2, Bus(2), refuse="out of memory")
    devices = transport.members
    pending = transport.all_reduce(devices[0], [np.ones(2)], SUM, ("grad", 1, 0), devices)
    assert pending.error == "stand-in: unusable after an earlier fault (out of memory)"
    alone = StandIn(0, 1, Bus(1))
    buffer = np.ones(2)
    result = alone.all_reduce(alone.members[0], [buffer], SUM, ("grad", 1, 0), alone.members)
    assert result.outcome()[0] is buffer  # nothing to reduce with
    gathered = alone.all_gather(alone.members[0], [buffer], ("op", alone.members, 0), alone.members)
    assert gathered.outcome()[0].shape == (1, 2)
