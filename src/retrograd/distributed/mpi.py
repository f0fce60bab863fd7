"""The ``mpi`` engine: one device per process, processes started by ``mpiexec``, via mpi4py.

Only buffers cross the wire, with the uppercase (buffer) mpi4py calls: ``Iallreduce`` of the
gradients' NumPy arrays and small int64 arrays of metadata; nothing is pickled.

Three duplicates of ``COMM_WORLD`` keep traffic apart: gradient buckets, user ``all_reduce``
calls (each issued in the same order on every rank, as MPI requires of collectives on one
communicator), and control messages (registrations and heartbeats, point to point).

Faults never hang a rank, because nothing here blocks inside MPI: every operation is
non-blocking, polled against a deadline.

- At the first backward, and whenever a rank's parameters change, ranks exchange their
  registrations point to point, so a rank that never registers is named (its message is the
  one that did not arrive), and differing parameter sets are found from the metadata, before
  the step's own collectives start. In between, the plan agreed then is reused
  (``agrees_once``: a flag and the step number ride in the first bucket, see the sync server)
  and a rank that never began a step is named from its heartbeats (``behind``).
- Every rank sends a heartbeat to every other rank a few times per timeout (with its step and
  state), so a collective that times out can say which rank went silent (died), closed its
  context (exited), or is alive but elsewhere.

Gradient buckets travel by what the cores allow, decided at start-up alike on every rank:
with a core for each rank, a gradient of 1 MiB or more has an ``Iallreduce`` of its own, on
the gradient itself where the backward hook donated it (nothing else holds it: no copy into
a bucket); with more ranks than the cores of the one machine they all run on, a bucket goes
through shared memory (:mod:`.shm`: two meetings, where MPI's rounds each wait for the
scheduler). See docs/distributed.md, "Gradients in place, shared memory when ranks outnumber
cores".

MPI cannot cancel a collective a peer never joins, nor finalize with a peer gone: after a
timeout the engine is *broken*. Every later operation fails at once, and when the process
exits it skips ``MPI_Finalize`` (which would hang) and ends with status 1. A mismatch of the
parameter sets is found before any collective starts, so it fails that step on every rank and
leaves the engine usable. Launch with ``mpiexec -disable-auto-cleanup`` (see
:mod:`retrograd.distributed.launch`) so that survivors of a dead rank live long enough to
report it; without it Hydra kills the whole job at once, which ends the run too.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import socket
import sys
import time
import weakref
from collections.abc import Hashable, Sequence

import numpy as np

from ..device import Device
from ..errors import DistributedError
from .config import DistributedConfig, ReduceOperation
from .engine import CLOSING, STATE_TEXT, Pending, RankCollective
from .shm import SharedReduce
from .shm import available as shared_memory_available

__all__ = ["MpiEngine"]

_TAG_HEARTBEAT, _TAG_REG_HEAD, _TAG_REG_BODY = 11, 12, 13
# MPI progresses only inside MPI calls, and a collective takes several rounds in which both
# ranks must call in, so how often we poll sets its latency (a 40 KB all-reduce: 0.02 ms when
# polled back to back, 1.4 ms with 0.2 ms sleeps in between). While backward still computes,
# poll gently: the collective is hidden behind it, and polling steals CPU from it. While a
# device is blocked waiting for a result, poll back to back, but only briefly: mostly it is
# waiting for a peer still computing, and on a machine whose cores are shared (a VM) spinning
# slows that peer down: on the 2-vCPU VM of docs/benchmarks.md, no spin and a 2 ms spin
# both beat a 20 ms spin, neither consistently better than the other.
#
# With more ranks than cores, nothing spins: a rank polls every 0.2 ms from the start of its
# wait (a machine only busy with other jobs keeps the short spin). 8 ranks on 2 cores, a
# 7.4 MB Iallreduce (the benchmark MLP's gradients), median of 5:
# 158 ms polled back to back, 28 ms with 0.2 ms sleeps, 40 ms with 1 ms sleeps, 45 ms for a
# blocking Allreduce; at 2 ranks on 2 cores, back to back is the fastest (docs/distributed.md).
# Without the overlap, nothing but the registrations is in flight during backward, and the
# device thread polls them itself: the server thread only backs it up, every 10 ms.
_POLL_SECONDS = 0.001
_SPIN_SECONDS = 0.002
_BACKED_OFF_POLL_SECONDS = 0.0002
_IDLE_POLL_SECONDS = 0.01

#: at most this many bucket shapes keep buffers
_BUFFER_POOLS = 64
#: on an engine that ``donates``, a gradient of at least this many bytes is reduced by a
#: collective of its own: in place where it is donated (no copy), else from a copy. Copying
#: into a bucket (with the MEAN division) costs ~0.1 ms per MB with both cores busy on the
#: 2-vCPU VM of docs/distributed.md; a collective more, ~0.03 ms at 2 ranks
_OWN_COLLECTIVE_BYTES = 1 << 20
#: ``sys.getrefcount`` of a pooled buffer nothing else references
_UNREFERENCED = 3

_ENGINES: weakref.WeakSet = weakref.WeakSet()
_EXIT_HANDLER_REGISTERED = False


def _load_mpi():
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise DistributedError(
            'the mpi engine needs mpi4py and an MPI library: pip install "retrograd[distributed]"'
            f" ({error})"
        ) from None
    return MPI


def _running_now(samples: int = 5, interval: float = 0.002) -> int:
    """Processes running on this machine now (Linux's ``procs_running``, the caller
    included), the fewest of a few readings ``interval`` apart: what competes for the cores
    at this moment. (The load average, used before, also counts what ran in the last minute:
    right after a job of as many ranks as cores, it turned the overlap off for the next job,
    5-10% slower at 2 ranks on 2 cores, docs/distributed.md.) 0 where unknown (not Linux)."""
    readings = []
    for index in range(samples):
        try:
            with open("/proc/stat", "rb") as stat:
                for line in stat:
                    if line.startswith(b"procs_running"):
                        readings.append(int(line.split()[1]))
                        break
        except (OSError, ValueError):
            return 0
        if index + 1 < samples:
            time.sleep(interval)
    return min(readings, default=0)


class _InFlight:
    __slots__ = ("job", "pending", "requests", "views")

    def __init__(self, pending, requests, views, job=None):
        self.pending = pending
        self.requests = requests
        # what MPI reduces in place (bucket buffers, donated gradients), held until completion
        self.views = views
        #: a shared-memory all-reduce (:mod:`.shm`) instead of MPI requests
        self.job = job

    def test(self, MPI) -> bool:  # noqa: N803
        return self.job.advance() if self.job is not None else MPI.Request.Testall(self.requests)


class _Exchange:
    """An all-gather of int64 arrays, point to point, so a missing rank can be named."""

    def __init__(self, engine: MpiEngine, pending: Pending, number: int, values: np.ndarray):
        self.engine = engine
        self.pending = pending
        self.number = number
        comm, rank = engine.ctl, engine.rank
        self.values = np.ascontiguousarray(values, dtype=np.int64)
        self.header = np.array([number, len(self.values)], dtype=np.int64)
        self.received: dict[int, np.ndarray] = {rank: self.values}
        self.heads: dict[int, tuple[object, np.ndarray]] = {}
        self.bodies: dict[int, tuple[object, np.ndarray]] = {}
        for peer in engine.peers:
            engine._send(comm.Isend(self.header, peer, _TAG_REG_HEAD), self.header)
            engine._send(comm.Isend(self.values, peer, _TAG_REG_BODY), self.values)
            head = np.empty(2, dtype=np.int64)
            self.heads[peer] = (comm.Irecv(head, peer, _TAG_REG_HEAD), head)

    def poll(self) -> bool:
        """Advance; true once complete (or failed)."""
        comm = self.engine.ctl
        for peer, (request, head) in list(self.heads.items()):
            if request.Test():
                del self.heads[peer]
                if int(head[0]) != self.number:
                    self.engine._break(
                        f"rank {peer} is at backward step {int(head[0])} but rank "
                        f"{self.engine.rank} is at step {self.number}: the ranks ran different "
                        "numbers of distributed backward steps"
                    )
                    return True
                body = np.empty(int(head[1]), dtype=np.int64)
                self.bodies[peer] = (comm.Irecv(body, peer, _TAG_REG_BODY), body)
        for peer, (request, body) in list(self.bodies.items()):
            if request.Test():
                del self.bodies[peer]
                self.received[peer] = body
        if len(self.received) == self.engine.size:
            self.pending.finish([self.received[r] for r in range(self.engine.size)])
            return True
        return False

    def missing(self) -> list[int]:
        return [r for r in range(self.engine.size) if r not in self.received]


class MpiEngine(RankCollective):
    """Collectives between ranks. See the module docstring."""

    name = "mpi"
    ordered = True
    agrees_once = True
    recoverable = False

    def __init__(self, config: DistributedConfig):
        MPI = _load_mpi()  # noqa: N806
        self.MPI = MPI
        global _EXIT_HANDLER_REGISTERED
        if not _EXIT_HANDLER_REGISTERED:
            atexit.register(_exit_without_finalize_if_broken)
            _EXIT_HANDLER_REGISTERED = True
        world = MPI.COMM_WORLD
        self.rank, self.size = world.Get_rank(), world.Get_size()
        members = [Device("cpu", r) for r in range(self.size)]
        super().__init__(members, [members[self.rank]])
        self.peers = [r for r in range(self.size) if r != self.rank]
        self.timeout = config.timeout
        self.heartbeat_interval = config.heartbeat_interval
        self._in_flight: list[_InFlight] = []
        #: gradients reduced in place so far (donated: no copy)
        self.reduced_in_place = 0
        #: reusable bucket buffers, by (bucket, size, dtype)
        self._buffers: dict[tuple, list[np.ndarray]] = {}
        self._exchanges: list[_Exchange] = []
        self._outgoing: list[tuple[object, np.ndarray]] = []
        self._closing = False
        self._closed = False
        self._spinning_since: float | None = None
        self.grads, self.ops, self.ctl = self._duplicate(world, 3)
        #: ranks on this machine, the fewest cores any of them may run on, and the processes
        #: of other jobs running on it when the context started (see :func:`_running_now`);
        #: then, on every machine of the job, the cores left over (the fewest)
        self.local_ranks, self.cores, self.others, spare, token = self._census()
        # Without a spare core, nothing is idle while backward computes: a collective in
        # flight progresses only by taking a core from some rank's backward (moving data
        # between ranks of one machine is all CPU work), and every poll or wake-up of a
        # waiting rank does too. One collective after backward then costs least
        # (docs/distributed.md, "Performance"). With a core for each rank, large gradients
        # are reduced in place, each in a collective of its own (a copy costs more than a
        # collective). With more ranks than cores, each of MPI's rounds waits for the
        # scheduler: gradients go in one collective, through shared memory where every rank
        # runs on this machine. Every rank decides from the same gathered numbers (the
        # collectives must match).
        self.overlap_pays = spare > 0
        self.donates = spare >= 0
        #: gradient buckets go through shared memory where ranks outnumber the cores of the
        #: one machine they all run on (two meetings instead of MPI's rounds: see
        #: :mod:`.shm`); ``None`` otherwise
        self.shared: SharedReduce | None = None
        if spare < 0 and self.local_ranks == self.size > 1 and shared_memory_available():
            self.shared = SharedReduce(token, self.rank, self.size)
        started = time.monotonic()
        self._step, self._state = 0, 0
        self._last_seen = dict.fromkeys(self.peers, started)
        self._peer_state = {peer: (0, 0) for peer in self.peers}
        self._heartbeats: dict[int, tuple[object, np.ndarray]] = {}
        for peer in self.peers:
            self._listen(peer)
        self._next_heartbeat = started
        self._heartbeat_number = 0
        self._listen_interval = self.heartbeat_interval / 4
        self._next_listen = started
        _ENGINES.add(self)

    def _duplicate(self, world, count: int):
        """``count`` duplicates of ``world``, without blocking past the timeout if a rank
        never creates its context."""
        try:
            pairs = [world.Idup() for _ in range(count)]
        except self.MPI.Exception as error:
            raise DistributedError(f"mpi: cannot duplicate COMM_WORLD: {error}") from None
        deadline = time.monotonic() + self.timeout
        requests = [request for _, request in pairs]
        while not self.MPI.Request.Testall(requests):
            if time.monotonic() > deadline:
                self.broken = "not every rank created its DistributedContext"
                _ENGINES.add(self)
                raise DistributedError(
                    f"mpi: rank {self.rank} of {self.size}: not every rank created its "
                    f"DistributedContext within {self.timeout:g} s"
                )
            time.sleep(0.001)
        return [comm for comm, _ in pairs]

    def _census(self) -> tuple[int, int, int, int, int]:
        """``(ranks on this machine, fewest usable cores among them, processes of other jobs
        running, the fewest cores left over on any machine of the job, a token naming the job
        (rank 0's random number))``, gathered from every rank (so all decide alike), without
        blocking past the timeout."""
        host = hashlib.blake2b(socket.gethostname().encode(), digest_size=8).digest()
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            cores = os.cpu_count() or 1
        running = _running_now()
        token = int.from_bytes(os.urandom(8), "little") >> 1
        mine = np.array(
            [int.from_bytes(host, "little") >> 1, cores, running, token], dtype=np.int64
        )
        every = np.empty((self.size, 4), dtype=np.int64)
        request = self.ctl.Iallgather(mine, every)
        deadline = time.monotonic() + self.timeout
        while not request.Test():
            if time.monotonic() > deadline:
                self.broken = "not every rank created its DistributedContext"
                _ENGINES.add(self)
                raise DistributedError(
                    f"mpi: rank {self.rank} of {self.size}: not every rank created its "
                    f"DistributedContext within {self.timeout:g} s"
                )
            time.sleep(0.001)

        def machine(host: int) -> tuple[int, int, int]:
            here = every[every[:, 0] == host]
            # what each rank saw running counts itself and may count its peers here (starting
            # up): only what exceeds this machine's ranks is surely another job's
            return len(here), int(here[:, 1].min()), max(0, int(here[:, 2].max()) - len(here))

        spare = min(cores - ranks - others for ranks, cores, others in map(machine, every[:, 0]))
        return (*machine(mine[0]), spare, int(every[0, 3]))

    # -- collectives -------------------------------------------------------------------------
    def all_reduce(
        self,
        device: Device,
        buffers: Sequence[np.ndarray],
        op: ReduceOperation,
        key: Hashable,
        group: tuple[Device, ...],
        donated: Sequence[bool] | None = None,
    ) -> Pending:
        pending = Pending(key)
        if self.broken:
            pending.finish(error=f"mpi: {self.broken}")
            return pending
        if tuple(group) != self.members:
            pending.finish(
                error=(
                    "mpi: all_reduce runs over every rank (ctx.devices); subgroups are not "
                    f"supported, got {', '.join(map(str, group))}"
                )
            )
            return pending
        comm = self.grads if key[0] == "grad" else self.ops
        arrays = [np.asarray(b) for b in buffers]
        dtype = arrays[0].dtype
        if any(a.dtype != dtype for a in arrays):
            pending.finish(error="mpi: a fused all-reduce needs one dtype")
            return pending
        if self.size == 1:  # nothing to reduce with: the gradients are the result
            pending.finish([np.asarray(a) for a in arrays])
            return pending
        # One pass packs the gradients into the buffer MPI reduces in place and, for MEAN,
        # divides them by the world size on the way (dividing after the sum would be a second
        # pass over the result). Large gradients go apart (``donates``), a collective each, in
        # an order every rank derives from the sizes alone: in place if donated, else copied.
        scale = self.size if op is ReduceOperation.MEAN else None
        if self.shared is not None and key[0] == "grad":
            result = self._bucket_buffer(key, sum(a.size for a in arrays), dtype)
            try:
                job = self.shared.begin(key[2], result)
            except OSError as error:  # /dev/shm full, say
                self._break(
                    f"shared-memory all-reduce failed to start: {error} (each rank needs about "
                    "its gradients' size in /dev/shm; a container may need a larger --shm-size)"
                )
                pending.finish(error=f"mpi: {self.broken}")
                return pending
            _pack(arrays, job.contribution, scale)
            job.arrive()
            self._in_flight.append(_InFlight(pending, [], _split(result, arrays), job))
            return pending
        apart = [
            self.donates and key[0] == "grad" and a.nbytes >= _OWN_COLLECTIVE_BYTES for a in arrays
        ]
        views: list[np.ndarray | None] = [None] * len(arrays)
        requests = []
        try:
            for position, a in enumerate(arrays):
                if not apart[position]:
                    continue
                if donated is not None and donated[position]:
                    target = a.reshape(-1)  # a view: the gradient itself
                    self.reduced_in_place += 1
                    if scale is not None:
                        np.divide(target, scale, out=target)
                else:
                    target = self._bucket_buffer((*key[:2], (key[2], position)), a.size, dtype)
                    _pack([a], target, scale)
                requests.append(comm.Iallreduce(self.MPI.IN_PLACE, target, op=self.MPI.SUM))
                views[position] = target.reshape(a.shape)
            packed = [position for position, alone in enumerate(apart) if not alone]
            if packed:
                together = [arrays[position] for position in packed]
                result = self._bucket_buffer(key, sum(a.size for a in together), dtype)
                _pack(together, result, scale)
                for position, view in zip(packed, _split(result, together)):
                    views[position] = view
                requests.append(comm.Iallreduce(self.MPI.IN_PLACE, result, op=self.MPI.SUM))
        except self.MPI.Exception as error:
            self._break(f"all-reduce failed to start: {error}")
            pending.finish(error=f"mpi: {self.broken}")
            return pending
        self._in_flight.append(_InFlight(pending, requests, views))
        return pending

    def _bucket_buffer(self, key: Hashable, size: int, dtype: np.dtype) -> np.ndarray:
        """The buffer a collective reduces in place: for a gradient bucket, one of the two
        kept for it that nothing references any more (the gradients of two steps back are
        views of it: once they are all dropped, it is free), else a new one. Fresh memory
        costs page faults on every step: 0.3 ms packing and 0.5 ms reducing the benchmark
        MLP's 7.4 MB at 2 ranks (CPU, docs/distributed.md); a training loop holds the last
        step's gradients while it computes the next, hence two."""
        if key[0] != "grad":
            return np.empty(size, dtype)
        pool = self._buffers.get((key[2], size, dtype))
        if pool is None:
            if len(self._buffers) >= _BUFFER_POOLS:  # graphs of many shapes: start afresh
                self._buffers.clear()
            pool = self._buffers[(key[2], size, dtype)] = []
        for buffer in pool:
            # referenced by the pool, this loop and the call only: no view of it is alive
            if sys.getrefcount(buffer) == _UNREFERENCED:
                return buffer
        buffer = np.empty(size, dtype)
        if len(pool) < 2:
            pool.append(buffer)
        return buffer

    def all_gather(self, device: Device, values: np.ndarray, key: Hashable) -> Pending:
        pending = Pending(key)
        if self.broken:
            pending.finish(error=f"mpi: {self.broken}")
            return pending
        exchange = _Exchange(self, pending, int(key[1]), values)
        if not exchange.poll():
            self._exchanges.append(exchange)
        return pending

    def needs_progress(self) -> bool:
        return bool(self._in_flight or self._exchanges)

    def settle(self, seconds: float) -> bool:
        """Test the collectives in flight every 0.2 ms, sleeping in between, until one
        completes or ``seconds`` pass: a bare loop, because a full ``progress()`` pass and
        the server's bookkeeping around it cost a rank of 8 on 2 cores ~15 us a poll, 5 ms
        of CPU in a step's wait (docs/distributed.md, "Performance")."""
        if not self._in_flight or self._exchanges or self._closed:
            return False
        requests = [request for item in self._in_flight for request in item.requests]
        jobs = [item.job for item in self._in_flight if item.job is not None]
        deadline = time.monotonic() + seconds
        test = self.MPI.Request.Testany
        try:
            while time.monotonic() < deadline:
                if requests and test(requests)[1]:
                    break
                if any(job.advance() for job in jobs):
                    break
                time.sleep(_BACKED_OFF_POLL_SECONDS)
        except self.MPI.Exception as error:
            self._break(f"MPI error: {error}")
        return True

    def progress(self) -> float | None:
        if self._closed:
            return None
        try:
            if self._in_flight:
                still = []
                for item in self._in_flight:
                    if item.test(self.MPI):
                        self._spinning_since = None  # progress: a fresh spin budget
                        item.pending.finish(item.views)
                    else:
                        still.append(item)
                self._in_flight = still
            if self._exchanges:
                self._exchanges = [e for e in self._exchanges if not e.poll()]
            self._heartbeat()
        except self.MPI.Exception as error:
            self._break(f"MPI error: {error}")
        if self._in_flight or self._exchanges:
            if not self.urgent:
                return _POLL_SECONDS if self.overlapping else _IDLE_POLL_SECONDS
            if self.local_ranks > self.cores:  # a spinning rank takes a core from a peer's
                # backward. On a machine only busy with other jobs the short spin stays (2
                # ranks at 128, 6 rounds: 1.14x naive with it, 1.06x without in one paired
                # run, 0.90x with it in the next: within this machine's noise)
                return _BACKED_OFF_POLL_SECONDS
            if self._spinning_since is None:
                self._spinning_since = time.monotonic()
            elif time.monotonic() - self._spinning_since > _SPIN_SECONDS:
                return _BACKED_OFF_POLL_SECONDS
            return 0.0
        self._spinning_since = None
        return max(0.0, self._next_heartbeat - time.monotonic())

    # -- heartbeats ---------------------------------------------------------------------------
    def _listen(self, peer: int) -> None:
        buffer = np.zeros(3, dtype=np.int64)
        self._heartbeats[peer] = (self.ctl.Irecv(buffer, peer, _TAG_HEARTBEAT), buffer)

    def _send(self, request, buffer: np.ndarray) -> None:
        self._outgoing.append((request, buffer))

    def _heartbeat(self) -> None:
        now = time.monotonic()
        # Peers' heartbeats matter only when a timeout is diagnosed (member_status reads them
        # then too): testing every peer's on every poll cost a rank of 8 a Test per peer per
        # poll, thousands a step, ~7% of its step in the profile of docs/distributed.md.
        if now >= self._next_listen:
            self._next_listen = now + self._listen_interval
            self._receive_heartbeats(now)
            if self._outgoing:
                self._outgoing = [(r, b) for r, b in self._outgoing if not r.Test()]
        if now >= self._next_heartbeat and not self._closing:
            self._broadcast_state()
            self._next_heartbeat = now + self.heartbeat_interval

    def _receive_heartbeats(self, now: float) -> None:
        for peer, (request, buffer) in list(self._heartbeats.items()):
            while request.Test():  # several may be queued
                self._last_seen[peer] = now
                self._peer_state[peer] = (int(buffer[1]), int(buffer[2]))
                self._listen(peer)
                request, buffer = self._heartbeats[peer]

    def _broadcast_state(self) -> None:
        self._heartbeat_number += 1
        message = np.array([self._heartbeat_number, self._step, self._state], dtype=np.int64)
        for peer in self.peers:
            self._send(self.ctl.Isend(message, peer, _TAG_HEARTBEAT), message)

    def set_state(self, step: int, state: int) -> None:
        # Peers are told at once when a step begins (a peer that times out must know whether
        # this rank registered it); the other changes ride on the periodic heartbeats, which
        # come several times per timeout: a message to every peer at each change cost a rank
        # of 8 three rounds of 7 sends per step.
        if self._closing:
            return
        begun = step != self._step
        self._step, self._state = step, state
        if begun:
            try:
                self._broadcast_state()
            except self.MPI.Exception as error:
                self._break(f"MPI error: {error}")

    # -- faults -------------------------------------------------------------------------------
    def missing(self, pending: Pending) -> list[int] | None:
        for exchange in self._exchanges:
            if exchange.pending is pending:
                return exchange.missing()
        return None  # a collective: MPI does not say who has not joined

    def member_name(self, index: int) -> str:
        return f"rank {index}"

    def behind(self, step: int) -> list[int] | None:
        if not self._closed:
            with contextlib.suppress(self.MPI.Exception):
                self._receive_heartbeats(time.monotonic())
        return [peer for peer in self.peers if self._peer_state[peer][0] < step]

    def member_status(self, index: int) -> str | None:
        if index == self.rank:
            return None
        if not self._closed:
            with contextlib.suppress(self.MPI.Exception):
                self._receive_heartbeats(time.monotonic())
        silent = time.monotonic() - self._last_seen[index]
        step, state = self._peer_state[index]
        if state == CLOSING:
            return f"rank {index} closed its distributed context (its process is exiting)"
        if silent > 3 * self.heartbeat_interval:
            return f"rank {index} has sent no heartbeat for {silent:.1f} s, so it has probably died"
        return (
            f"rank {index} is alive (last heartbeat {silent:.1f} s ago) at backward step {step}, "
            f"{STATE_TEXT.get(state, '?')}"
        )

    def close(self, timeout: float) -> None:
        """Tell peers, wait (at most ``timeout``) until every rank closes, free the
        communicators. On a broken engine, only mark it closed (it cannot finalize)."""
        if self._closed:
            return
        if self.shared is not None:
            self.shared.close(everyone=self.broken is not None)
        if self.broken is None:
            self._state = CLOSING
            self._broadcast_state()
            self._closing = True
            barrier = self.ctl.Ibarrier()
            deadline = time.monotonic() + timeout
            while not barrier.Test():
                self._heartbeat()
                if time.monotonic() > deadline:
                    waiting = "; ".join(self.member_status(p) for p in self.peers)
                    self._break(f"closing: not every rank closed its context ({waiting})")
                    break
                time.sleep(0.001)
        if self.broken is None:
            for request, _ in self._heartbeats.values():
                request.Cancel()
                request.Wait()
            status = self.MPI.Status()
            while self.ctl.Iprobe(self.MPI.ANY_SOURCE, _TAG_HEARTBEAT, status):
                self.ctl.Recv(np.zeros(3, dtype=np.int64), status.Get_source(), _TAG_HEARTBEAT)
            deadline = time.monotonic() + timeout
            while self._outgoing and time.monotonic() < deadline:
                self._outgoing = [(r, b) for r, b in self._outgoing if not r.Test()]
                time.sleep(0.0005)
            for comm in (self.grads, self.ops, self.ctl):
                comm.Free()
        self._closed = True


def _pack(arrays: Sequence[np.ndarray], flat: np.ndarray, scale: int | None) -> None:
    """``arrays`` one after another into the 1-d ``flat``, divided by ``scale`` on the way if
    given (one pass: dividing after the sum would be a second one over the result)."""
    offset = 0
    for array in arrays:
        target = flat[offset : offset + array.size]
        if scale is None:
            target[...] = array.reshape(-1)
        else:
            np.divide(array.reshape(-1), scale, out=target)
        offset += array.size


def _split(flat: np.ndarray, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Views of ``flat`` where :func:`_pack` put ``arrays``, in their shapes."""
    views, offset = [], 0
    for array in arrays:
        views.append(flat[offset : offset + array.size].reshape(array.shape))
        offset += array.size
    return views


def _remove_mpich_shared_memory() -> None:
    """Unlink the files of MPICH's shared memory (``/dev/shm/mpich_shm_*``) this process
    maps. ``MPI_Finalize`` would remove them; a process that ends without it left one per
    job in ``/dev/shm`` (2-8 MB of memory each, until reboot). Every rank of the machine
    mapped them when MPI started, so survivors keep theirs."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {
                fields[5].strip()
                for fields in (line.split(maxsplit=5) for line in maps)
                if len(fields) == 6 and fields[5].startswith("/dev/shm/mpich_shm_")
            }
    except OSError:  # not Linux
        return
    for path in paths:
        if not path.endswith("(deleted)"):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _exit_without_finalize_if_broken() -> None:
    """At exit: MPI_Finalize (mpi4py calls it from ``Py_AtExit``, after every ``atexit``
    handler) would hang with a peer gone, so a broken engine ends the process here."""
    if any(engine.broken for engine in list(_ENGINES)):
        for engine in list(_ENGINES):
            if getattr(engine, "shared", None) is not None:
                engine.shared.close(everyone=True)
        _remove_mpich_shared_memory()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # nothing left to report to
                stream.flush()
        os._exit(1)
