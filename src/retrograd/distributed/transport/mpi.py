"""The ``mpi`` transport: one device per process, processes started by ``mpiexec``, via mpi4py.

Only buffers cross the wire, with the uppercase (buffer) mpi4py calls: ``Iallreduce`` of the
gradients' NumPy arrays, small int64 arrays of metadata point to point; nothing is pickled.

Three duplicates of ``COMM_WORLD`` keep traffic apart: gradient buckets, user collectives
(each issued in the same order on every rank, as MPI requires of collectives on one
communicator), and the membership's channel (registrations and heartbeats, point to point:
:class:`MpiChannel`). Nothing blocks inside MPI: every operation is non-blocking and polled
against a deadline, so a fault never hangs a rank.

How gradient buckets travel is decided at start-up, alike on every rank, from what the cores
allow (:meth:`MpiTransport._census`):

- with a core to spare beside every rank, gradients are reduced during backward;
- with a core for each rank, a gradient of 1 MiB or more has an ``Iallreduce`` of its own, on
  the gradient itself where the backward hook donated it (``in_place``: copying a large
  gradient into a bucket costs more than one more collective);
- with more ranks than the cores of the one machine they all run on, a bucket goes through
  shared memory (:mod:`.shm`: two meetings, where each of MPI's rounds waits for the
  scheduler to run both ranks of a pair).

MPI cannot cancel a collective a peer never joins, nor finalize with a peer gone: after a
timeout the membership is broken, and the process exits with status 1 without
``MPI_Finalize`` (which would hang). Launch with ``mpiexec -disable-auto-cleanup`` (see
:mod:`retrograd.distributed.launch`) so that survivors of a dead rank live long enough to
report it; without it Hydra kills the whole job at once, which ends the run too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import sys
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ...errors import DistributedError
from ..config import DistributedConfig, ReduceOperation
from ..membership import StepMismatchError
from .base import Capabilities
from .ranks import InFlight, RankTransport, StartError
from .shm import SharedReduce
from .shm import available as shared_memory_available

__all__ = ["MpiChannel", "MpiTransport"]

_TAG_HEARTBEAT, _TAG_REG_HEAD, _TAG_REG_BODY = 11, 12, 13
#: how often ``settle`` tests the collectives in flight
_SETTLE_POLL_SECONDS = 0.0002
#: at most this many bucket shapes keep buffers
_BUFFER_POOLS = 64
#: where buffers may be reduced in place, a gradient of at least this many bytes is reduced
#: by a collective of its own: in place where it is donated (no copy), else from a copy
_OWN_COLLECTIVE_BYTES = 1 << 20
#: ``sys.getrefcount`` of a pooled buffer nothing else references
_UNREFERENCED = 3


def _load_mpi() -> Any:
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
    at this moment. (The load average would also count what ran in the last minute, such as
    a job that has just ended.) 0 where unknown (not Linux)."""
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


class _Registration:
    """One exchange's receives: the head (step number, length) from each peer, then its body."""

    __slots__ = ("bodies", "heads", "number")

    def __init__(self, number: int):
        self.number = number
        self.heads: dict[int, tuple[Any, np.ndarray]] = {}
        self.bodies: dict[int, tuple[Any, np.ndarray]] = {}


class MpiChannel:
    """The membership's channel over a communicator of its own: heartbeats and registrations
    point to point, each ``Isend`` kept (with its buffer) until it completes."""

    #: a read is a ``Test`` per peer: cheap enough to read every quarter interval
    reads_per_beat = 4
    #: a step's begin costs a message per peer: told at once
    announces_steps = True

    def __init__(self, MPI: Any, comm: Any, rank: int, size: int):  # noqa: N803
        self.MPI, self.comm = MPI, comm
        self.rank = rank
        self.peers = [r for r in range(size) if r != rank]
        self._outgoing: list[tuple[Any, np.ndarray]] = []
        self._heartbeats: dict[int, tuple[Any, np.ndarray]] = {}
        self._barrier: Any = None
        for peer in self.peers:
            self._listen(peer)

    def failure(self, error: Exception) -> str | None:
        return f"MPI error: {error}" if isinstance(error, self.MPI.Exception) else None

    def _send(self, buffer: np.ndarray, peer: int, tag: int) -> None:
        self._outgoing.append((self.comm.Isend(buffer, peer, tag), buffer))

    def flush(self) -> None:
        self._outgoing = [(r, b) for r, b in self._outgoing if not r.Test()]

    # heartbeats
    def _listen(self, peer: int) -> None:
        buffer = np.zeros(3, dtype=np.int64)
        self._heartbeats[peer] = (self.comm.Irecv(buffer, peer, _TAG_HEARTBEAT), buffer)

    def beat(self, number: int, step: int, state: int) -> None:
        message = np.array([number, step, state], dtype=np.int64)
        for peer in self.peers:
            self._send(message, peer, _TAG_HEARTBEAT)

    def beats(self) -> dict[int, tuple[int, int, int]]:
        latest = {}
        for peer in self.peers:
            request, buffer = self._heartbeats[peer]
            while request.Test():  # several may be queued
                latest[peer] = (int(buffer[0]), int(buffer[1]), int(buffer[2]))
                self._listen(peer)
                request, buffer = self._heartbeats[peer]
        return latest

    # registrations
    def post(self, number: int, values: np.ndarray) -> _Registration:
        header = np.array([number, len(values)], dtype=np.int64)
        registration = _Registration(number)
        for peer in self.peers:
            self._send(header, peer, _TAG_REG_HEAD)
            self._send(values, peer, _TAG_REG_BODY)
            head = np.empty(2, dtype=np.int64)
            registration.heads[peer] = (self.comm.Irecv(head, peer, _TAG_REG_HEAD), head)
        return registration

    def collect(self, ticket: _Registration, waiting: list[int]) -> dict[int, np.ndarray]:
        for peer, (request, head) in list(ticket.heads.items()):
            if request.Test():
                del ticket.heads[peer]
                if int(head[0]) != ticket.number:
                    raise StepMismatchError(
                        f"rank {peer} is at backward step {int(head[0])} but rank "
                        f"{self.rank} is at step {ticket.number}: the ranks ran different "
                        "numbers of distributed backward steps"
                    )
                body = np.empty(int(head[1]), dtype=np.int64)
                ticket.bodies[peer] = (self.comm.Irecv(body, peer, _TAG_REG_BODY), body)
        arrived = {}
        for peer, (request, body) in list(ticket.bodies.items()):
            if request.Test():
                del ticket.bodies[peer]
                arrived[peer] = body
        return arrived

    def absent(self, ticket: _Registration, waiting: list[int]) -> list[int]:
        return waiting  # MPI does not say whether a message was sent

    def exited(self, peer: int) -> str | None:
        return None

    # closing
    def leave(self) -> None:
        self._barrier = self.comm.Ibarrier()

    def left(self) -> bool:
        return self._barrier.Test()

    def close(self, timeout: float) -> None:
        """Take back the heartbeat receives, drain what peers sent, finish the sends."""
        for request, _ in self._heartbeats.values():
            request.Cancel()
            request.Wait()
        status = self.MPI.Status()
        while self.comm.Iprobe(self.MPI.ANY_SOURCE, _TAG_HEARTBEAT, status):
            self.comm.Recv(np.zeros(3, dtype=np.int64), status.Get_source(), _TAG_HEARTBEAT)
        deadline = time.monotonic() + timeout
        while self._outgoing and time.monotonic() < deadline:
            self.flush()
            time.sleep(0.0005)


class MpiTransport(RankTransport):
    """Collectives between the ranks of an ``mpiexec`` job. See the module docstring."""

    name = "mpi"

    def __init__(self, config: DistributedConfig):
        MPI = _load_mpi()  # noqa: N806
        self.MPI = MPI
        world = MPI.COMM_WORLD
        super().__init__(
            config, world.Get_rank(), world.Get_size(), "cpu", on_fault_exit=self._leave_no_files
        )
        #: gradients reduced in place so far (donated: no copy)
        self.reduced_in_place = 0
        #: reusable bucket buffers, by (bucket, size, dtype)
        self._buffers: dict[tuple, list[np.ndarray]] = {}
        #: gradient buckets go through shared memory where ranks outnumber the cores of the
        #: one machine they all run on; ``None`` otherwise
        self.shared: SharedReduce | None = None
        self.grads, self.ops, self.ctl = self._duplicate(world, 3)
        #: ranks on this machine, the fewest cores any of them may run on, and the processes
        #: of other jobs running on it when the context started (see :func:`_running_now`);
        #: then, on every machine of the job, the cores left over (the fewest)
        self.local_ranks, self.cores, self.others, spare, token = self._census()
        # Without a spare core, nothing is idle while backward computes: a collective in
        # flight progresses only by taking a core from some rank's backward (moving data
        # between ranks of one machine is all CPU work), and so does every poll or wake-up
        # of a waiting rank: one collective after backward costs least. Every rank decides
        # from the same gathered numbers (the collectives must match).
        self.capabilities = Capabilities(
            ordered=True,
            recoverable=False,
            agrees_once=True,
            overlap_pays=spare > 0,
            in_place=spare >= 0,
            spins=self.local_ranks <= self.cores,
        )
        if spare < 0 and self.local_ranks == self.size > 1 and shared_memory_available():
            self.shared = SharedReduce(token, self.rank, self.size)
        self.membership.connect(MpiChannel(MPI, self.ctl, self.rank, self.size))

    # -- set-up -----------------------------------------------------------------------------
    def _every_rank(self, done: Callable[[], bool]) -> None:
        """Wait until ``done()`` (a request every rank must join), at most the timeout."""
        deadline = time.monotonic() + self.timeout
        while not done():
            if time.monotonic() > deadline:
                self.membership.never_started("not every rank created its DistributedContext")
                raise DistributedError(
                    f"mpi: rank {self.rank} of {self.size}: not every rank created its "
                    f"DistributedContext within {self.timeout:g} s"
                )
            time.sleep(0.001)

    def _duplicate(self, world: Any, count: int) -> list[Any]:
        """``count`` duplicates of ``world``, without blocking past the timeout if a rank
        never creates its context."""
        try:
            pairs = [world.Idup() for _ in range(count)]
        except self.MPI.Exception as error:
            raise DistributedError(f"mpi: cannot duplicate COMM_WORLD: {error}") from None
        requests = [request for _, request in pairs]
        self._every_rank(lambda: self.MPI.Request.Testall(requests))
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
        self._every_rank(request.Test)

        def machine(host: int) -> tuple[int, int, int]:
            here = every[every[:, 0] == host]
            # what each rank saw running counts itself and may count its peers here (starting
            # up): only what exceeds this machine's ranks is surely another job's
            return len(here), int(here[:, 1].min()), max(0, int(here[:, 2].max()) - len(here))

        spare = min(cores - ranks - others for ranks, cores, others in map(machine, every[:, 0]))
        return (*machine(mine[0]), spare, int(every[0, 3]))

    # -- collectives ------------------------------------------------------------------------
    def _start_all_reduce(
        self, buffers: Sequence[Any], op: ReduceOperation, key: Hashable, donated: Any
    ) -> tuple[Any, list[Any]]:
        comm = self.grads if key[0] == "grad" else self.ops
        arrays = [np.asarray(b) for b in buffers]
        dtype = arrays[0].dtype
        # One pass packs the gradients into the buffer MPI reduces in place and, for MEAN,
        # divides them by the world size on the way (dividing after the sum would be a second
        # pass over the result).
        scale = self.size if op is ReduceOperation.MEAN else None
        if self.shared is not None and key[0] == "grad":
            result = self._bucket_buffer(key, sum(a.size for a in arrays), dtype)
            try:
                job = self.shared.begin(key[2], result)
            except OSError as error:  # /dev/shm full, say
                raise StartError(
                    f"shared-memory all-reduce failed to start: {error} (each rank needs about "
                    "its gradients' size in /dev/shm; a container may need a larger --shm-size)"
                ) from None
            _pack(arrays, job.contribution, scale)
            job.arrive()
            return ([], job), _split(result, arrays)
        # Large gradients go apart (``in_place``), a collective each, in an order every rank
        # derives from the sizes alone: in place if donated, else copied.
        apart = [
            self.capabilities.in_place and key[0] == "grad" and a.nbytes >= _OWN_COLLECTIVE_BYTES
            for a in arrays
        ]
        views: list[Any] = [None] * len(arrays)
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
            raise StartError(f"all-reduce failed to start: {error}") from None
        return (requests, None), views

    def _start_all_gather(self, buffers: Sequence[Any], key: Hashable) -> tuple[Any, list[Any]]:
        comm = self.grads if key[0] == "grad" else self.ops
        arrays = [np.asarray(b) for b in buffers]
        total = sum(a.size for a in arrays)
        mine = np.empty(total, arrays[0].dtype)
        _pack(arrays, mine, None)
        every = np.empty((self.size, total), arrays[0].dtype)
        try:
            request = comm.Iallgather(mine, every)
        except self.MPI.Exception as error:
            raise StartError(f"all-gather failed to start: {error}") from None
        views, offset = [], 0
        for a in arrays:
            views.append(every[:, offset : offset + a.size].reshape(self.size, *a.shape))
            offset += a.size
        return ([request], None, mine), views

    def _bucket_buffer(self, key: Hashable, size: int, dtype: np.dtype) -> np.ndarray:
        """The buffer a collective reduces in place: for a gradient bucket, one of the two
        kept for it that nothing references any more (the gradients of two steps back are
        views of it: once they are all dropped, it is free), else a new one. Fresh memory
        costs page faults at every step, which a pooled buffer pays once; a training loop
        holds the last step's gradients while it computes the next, hence two."""
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

    def _complete(self, handle: Any) -> bool:
        requests, job = handle[0], handle[1]
        return job.advance() if job is not None else self.MPI.Request.Testall(requests)

    def _failure(self, item: InFlight, error: Exception) -> str | None:
        return f"MPI error: {error}" if isinstance(error, self.MPI.Exception) else None

    def settle(self, seconds: float) -> bool:
        """Test the collectives in flight every 0.2 ms, sleeping in between, until one
        completes or ``seconds`` pass: a bare loop, far cheaper per poll than a full
        ``progress()`` pass and the server's bookkeeping around it."""
        if not self._in_flight or self.membership.exchanging or self._closed:
            return False
        requests = [request for item in self._in_flight for request in item.handle[0]]
        jobs = [item.handle[1] for item in self._in_flight if item.handle[1] is not None]
        deadline = time.monotonic() + seconds
        test = self.MPI.Request.Testany
        try:
            while time.monotonic() < deadline:
                if requests and test(requests)[1]:
                    break
                if any(job.advance() for job in jobs):
                    break
                time.sleep(_SETTLE_POLL_SECONDS)
        except self.MPI.Exception as error:
            self.membership.fail(f"MPI error: {error}")
        return True

    def close(self, timeout: float) -> None:
        """Tell peers, wait (at most ``timeout``) until every rank closes, free the
        communicators. A broken transport is only marked closed (it cannot finalize)."""
        if self._closed:
            return
        if self.shared is not None:
            self.shared.close(everyone=self.broken is not None)
        self.membership.close(timeout)
        if self.broken is None:
            for comm in (self.grads, self.ops, self.ctl):
                comm.Free()
        self._closed = True

    def _leave_no_files(self) -> None:
        """At a broken process's exit: remove every rank's shared-memory files and MPICH's."""
        if self.shared is not None:
            self.shared.close(everyone=True)
        _remove_mpich_shared_memory()


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
    maps. ``MPI_Finalize`` would remove them; a process that ends without it would leave one
    per job in ``/dev/shm`` (megabytes each, until reboot). Every rank of the machine mapped
    them when MPI started, so survivors keep theirs."""
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
