"""An all-reduce through shared memory, for ranks of one machine that outnumber its cores.

MPI's all-reduce moves data in rounds (2 log p or 2(p - 1) of them), each of which needs the
ranks that exchange to be on a core at the same time. With more ranks than cores each round
waits for the scheduler to run both, and the collective costs several times its copies. Here
the ranks meet twice, whatever their number:

1. each rank writes its contribution into its own segment (a file in ``/dev/shm`` that every
   rank maps) and raises its *arrived* flag;
2. once every rank's flag is up, each sums its 1/p slice of everyone's contributions, in rank
   order, into its output, and raises its *reduced* flag;
3. once every rank's is up, each copies every rank's output slice into its result.

A rank writes only its own segment, and every slice is summed once, so all ranks get
identical results.

Reuse is safe because each step waits for everyone: a rank writes its contribution to a
collective's next use only after every rank has summed the last one (its reduced flag), and
writes an output slot only after every rank arrived at the use after the one that last wrote
it (two slots, by parity), by which time every rank has copied that one out.

Flags are written after the data they announce and read before it; x86-64 makes stores visible
in program order, so the transport is offered only there (elsewhere it would need fences).
A segment's file is unlinked once every peer has read it (after its first use): a rank that
dies leaves nothing in ``/dev/shm`` after that, and before it a survivor's ``close(everyone=True)``
removes what it left.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import platform
from collections.abc import Hashable

import numpy as np

__all__ = ["SharedReduce", "available"]

_DIRECTORY = "/dev/shm"
#: bytes of a segment's header (its flags), a cache line of its own
_HEADER_BYTES = 64
_ARRIVED, _REDUCED = 0, 1


def available() -> bool:
    """Whether this machine offers the transport: x86-64 (see the module docstring) and a
    writable ``/dev/shm``."""
    return platform.machine().lower() in ("x86_64", "amd64") and os.access(_DIRECTORY, os.W_OK)


def slice_bounds(size: int, ranks: int) -> list[int]:
    """Where each rank's slice of ``size`` elements starts (and the end).

    >>> slice_bounds(10, 3)
    [0, 3, 6, 10]
    """
    return [size * rank // ranks for rank in range(ranks + 1)]


class _Segment:
    """One rank's segment of a channel: its flags, its contribution, its two output slots."""

    def __init__(self, memory: mmap.mmap, size: int, slot: int, dtype: np.dtype):
        self.memory = memory
        self.flags = np.frombuffer(memory, np.int64, 2, 0)
        self.contribution = np.frombuffer(memory, dtype, size, _HEADER_BYTES)
        offset = _HEADER_BYTES + _aligned(size * dtype.itemsize)
        self.outputs = [
            np.frombuffer(memory, dtype, slot, offset + k * _aligned(slot * dtype.itemsize))
            for k in range(2)
        ]


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 64) * 64


class _Channel:
    """One collective's segments (a gradient bucket's), used once per step by every rank."""

    def __init__(self, owner: SharedReduce, name: str, size: int, dtype: np.dtype):
        self.owner = owner
        self.size, self.dtype = size, dtype
        self.bounds = slice_bounds(size, owner.ranks)
        self.slot = max(b - a for a, b in zip(self.bounds, self.bounds[1:]))
        self.nbytes = (
            _HEADER_BYTES
            + _aligned(size * dtype.itemsize)
            + 2 * _aligned(self.slot * dtype.itemsize)
        )
        self.paths = [f"{_DIRECTORY}/{owner.prefix}-{name}-r{rank}" for rank in range(owner.ranks)]
        self.segments: list[_Segment | None] = [None] * owner.ranks
        self.uses = 0
        self.linked = True
        self.segments[owner.rank] = self._create(self.paths[owner.rank])

    def _create(self, path: str) -> _Segment:
        # written under a temporary name and renamed: a peer never maps a short file
        temporary = f"{path}.{os.getpid()}"
        descriptor = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            # reserved now: memory /dev/shm lacks fails here, not later as a SIGBUS on write
            os.posix_fallocate(descriptor, 0, self.nbytes)
            memory = mmap.mmap(descriptor, self.nbytes)
        finally:
            os.close(descriptor)
        os.rename(temporary, path)
        return _Segment(memory, self.size, self.slot, self.dtype)

    def segment(self, rank: int) -> _Segment | None:
        """Rank ``rank``'s segment, mapped on first sight; ``None`` while it has none yet."""
        segment = self.segments[rank]
        if segment is None:
            try:
                descriptor = os.open(self.paths[rank], os.O_RDWR)
            except FileNotFoundError:
                return None
            try:
                memory = mmap.mmap(descriptor, self.nbytes)
            finally:
                os.close(descriptor)
            segment = self.segments[rank] = _Segment(memory, self.size, self.slot, self.dtype)
        return segment

    def unlink(self, everyone: bool = False) -> None:
        if self.linked:
            self.linked = False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.paths[self.owner.rank])
        if everyone:
            for path in self.paths:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


class Job:
    """One use of a channel in flight: :meth:`advance` moves it on without blocking."""

    __slots__ = ("channel", "result", "state", "use")

    def __init__(self, channel: _Channel, use: int, result: np.ndarray):
        self.channel, self.use, self.result = channel, use, result
        self.state = _ARRIVED  # waiting for every rank's arrival, then for every reduction

    @property
    def contribution(self) -> np.ndarray:
        """Where this rank writes what it contributes (1-d, the result's size)."""
        return self.channel.segments[self.channel.owner.rank].contribution

    def arrive(self) -> None:
        """Tell the other ranks this rank's contribution is written."""
        self.channel.segments[self.channel.owner.rank].flags[_ARRIVED] = self.use

    def _all_reached(self, flag: int) -> bool:
        channel = self.channel
        for rank in range(channel.owner.ranks):
            segment = channel.segment(rank)
            if segment is None or segment.flags[flag] < self.use:
                return False
        return True

    def advance(self) -> bool:
        """Do what can be done now; true once the result is complete."""
        channel, owner = self.channel, self.channel.owner
        if self.state == _ARRIVED:
            if not self._all_reached(_ARRIVED):
                return False
            begin, end = channel.bounds[owner.rank], channel.bounds[owner.rank + 1]
            mine = channel.segments[owner.rank]
            output = mine.outputs[self.use & 1][: end - begin]
            parts = [segment.contribution[begin:end] for segment in channel.segments]
            if len(parts) == 1:
                output[...] = parts[0]
            else:
                np.add(parts[0], parts[1], out=output)
                for part in parts[2:]:
                    np.add(output, part, out=output)
            mine.flags[_REDUCED] = self.use
            self.state = _REDUCED
        if self.state == _REDUCED:
            if not self._all_reached(_REDUCED):
                return False
            for rank, segment in enumerate(channel.segments):
                begin, end = channel.bounds[rank], channel.bounds[rank + 1]
                self.result[begin:end] = segment.outputs[self.use & 1][: end - begin]
            self.state = None
            # every peer has mapped this rank's segment by now (it read its contribution)
            channel.unlink()
        return self.state is None


class SharedReduce:
    """Sum-all-reduces over shared memory among the ``ranks`` ranks of one machine, one
    channel per collective key; see the module docstring."""

    def __init__(self, token: int, rank: int, ranks: int, channels: int = 64):
        #: names this job's files apart from any other's
        self.prefix = f"retrograd-{token:016x}"
        self.rank, self.ranks = rank, ranks
        self._channels: dict[Hashable, _Channel] = {}
        self._capacity = channels
        self._created = 0  # channels so far: each file name is new

    def begin(self, key: Hashable, result: np.ndarray) -> Job:
        """The next use of the collective ``key``, whose sum goes into ``result`` (1-d): write
        this rank's contribution into the job's :attr:`~Job.contribution`, then
        :meth:`~Job.arrive`. Every rank must begin the same keys, with the same sizes, in the
        same order."""
        channel = self._channel(key, result.size, result.dtype)
        channel.uses += 1
        return Job(channel, channel.uses, result)

    def _channel(self, key: Hashable, size: int, dtype: np.dtype) -> _Channel:
        channel = self._channels.get((key, size, dtype.str))
        if channel is None:
            if len(self._channels) >= self._capacity:  # graphs of many shapes: start afresh
                self.close()
            self._created += 1
            name = f"{self._created}-{size}-{dtype.str.strip('<>|=')}"
            channel = self._channels[(key, size, dtype.str)] = _Channel(self, name, size, dtype)
        return channel

    def close(self, everyone: bool = False) -> None:
        """Unlink this rank's files (``everyone``: every rank's, after a fault: a rank that
        died before a collective's first use completed left its file); the mappings go with
        the last reference to them."""
        for channel in self._channels.values():
            channel.unlink(everyone)
        self._channels.clear()
