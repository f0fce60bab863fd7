"""Every rank's array, gathered outside retrograd: the reference the MPI scripts compare the
engine's reduced gradients with.

Each rank computes only its own unsynced gradients (a plain backward, nothing distributed) and
this gathers them with mpi4py's own ``Iallgather`` on ``COMM_WORLD`` (the engine's traffic
runs on duplicates of it). Recomputing every rank's gradients on every rank instead costs
each rank ``world_size`` backward passes (8 ranks sharing 2 cores spent most of their work
on it). Polled with a sleep, as the engine polls, rather than a blocking call that spins
while ranks outnumber the cores."""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI


def every_ranks(array, timeout: float = 60.0) -> list[np.ndarray]:
    """``[rank 0's array, rank 1's, ...]``: ``array`` (same shape and dtype on every rank)
    from each rank of ``COMM_WORLD``."""
    comm = MPI.COMM_WORLD
    send = np.ascontiguousarray(array)
    received = np.empty((comm.Get_size(), *send.shape), send.dtype)
    request = comm.Iallgather(send, received)
    deadline = time.monotonic() + timeout
    while not request.Test():
        if time.monotonic() > deadline:
            raise TimeoutError(f"every_ranks: not every rank joined within {timeout:g} s")
        time.sleep(0.0005)
    return list(received)
