"""What every transport offers: buffer collectives between the members of a context, what it
can do (:class:`Capabilities`, one frozen value), and what it knows of its members when
something times out.

A transport connects the *members* of a context (one per device, in rank order) and moves
buffers; it knows nothing of gradients, buckets or steps. Its collectives are non-blocking:
each returns a :class:`~retrograd.distributed.pending.Pending` that completes with one array
per buffer, and ``progress()`` drives what is in flight. A collective is named by its
``key``, the same on every member: ``("grad", step, bucket)`` for a gradient bucket (traffic
a transport may keep apart and pool buffers for), ``("op", group, n)`` for the n-th user
collective of a group, ``("reg", step)`` for a registration exchange.

Transport methods are called under the sync server's lock (from a device thread or the
server thread), one at a time, so transports need no locks of their own.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ...device import Device
from ..config import ReduceOperation
from ..pending import Pending

__all__ = ["Capabilities", "Polled", "Transport"]


@dataclass(frozen=True)
class Capabilities:
    """What a transport can do, decided once when it starts (alike on every member).

    >>> Capabilities(ordered=True).recoverable
    True
    """

    #: collectives must be launched in the same order on every member (MPI, NCCL, gloo); a
    #: transport that matches them by key accepts any order
    ordered: bool = False
    #: a timed-out collective leaves the transport usable for the next step; else the
    #: transport breaks (nothing in flight can be taken back) and every later call fails
    recoverable: bool = True
    #: members agree on their registrations once per graph shape: while a member registers
    #: what it registered at the last exchange, the sync server reuses the plan agreed then
    #: and checks it with a header in the first bucket (``reducer/fast_path.py``); needs
    #: ``ordered`` collectives and :meth:`Transport.behind` to name a member that never
    #: began a step
    agrees_once: bool = False
    #: reducing gradients during backward can beat one collective after it: false where no
    #: core is free to move the data meanwhile (``DistributedConfig.overlap=None`` follows it)
    overlap_pays: bool = True
    #: a buffer passed as ``donated`` may be reduced in place, becoming its own result,
    #: instead of being copied first (worth it where a copy costs more than a collective)
    in_place: bool = False
    #: a member waiting for a result may poll back to back for a moment; false where ranks
    #: outnumber the cores, so that a spinning rank never takes a core from a peer
    spins: bool = True


class Polled(NamedTuple):
    """What one :meth:`Transport.progress` call found."""

    #: operations remain in flight that only ``progress()`` calls complete
    in_flight: bool
    #: at least one operation completed during the call
    completed: bool
    #: with nothing in flight: seconds until the transport wants ``progress()`` again (its
    #: heartbeats), ``None`` for only once a new operation starts
    due: float | None


#: what a transport with nothing to drive reports
IDLE = Polled(False, False, None)


class Transport:
    """Base of the transports. See the module docstring."""

    #: the transport's name in messages
    name = "?"
    capabilities = Capabilities()

    def __init__(self, members: Sequence[Device], local: Sequence[Device]):
        #: every participant's device, in rank order
        self.members: tuple[Device, ...] = tuple(members)
        #: the members hosted by this process
        self.local: tuple[Device, ...] = tuple(local)
        self.index = {device: i for i, device in enumerate(self.members)}

    @property
    def broken(self) -> str | None:
        """Why the transport is unusable after a fault, or ``None`` (recoverable transports
        never break)."""
        return None

    # -- moving buffers ---------------------------------------------------------------------
    def all_reduce(
        self,
        device: Device,
        buffers: Sequence[Any],
        op: ReduceOperation,
        key: Hashable,
        group: tuple[Device, ...],
        donated: Sequence[bool] | None = None,
    ) -> Pending:
        """Start reducing ``buffers`` (this member's contribution) with every member of
        ``group``; the result is one array per buffer, same shapes. A buffer ``donated`` (by
        position) is the caller's to give: nothing else holds it, and a transport whose
        capabilities say ``in_place`` may reduce it in place."""
        raise NotImplementedError

    def all_gather(
        self, device: Device, buffers: Sequence[Any], key: Hashable, group: tuple[Device, ...]
    ) -> Pending:
        """Start gathering ``buffers`` from every member of ``group``; the result is, per
        buffer, one array of shape ``(len(group), *buffer.shape)``, members in group order."""
        raise NotImplementedError

    def exchange(self, device: Device, values: np.ndarray, key: Hashable) -> Pending:
        """Start gathering a 1-d int64 array from every member (a registration: lengths may
        differ) in a way that names a member that never sends its own; the result is the
        list of arrays in member order."""
        raise NotImplementedError

    def progress(self) -> Polled:
        """Drive operations in flight (the sync server decides when to call again)."""
        return IDLE

    def needs_progress(self) -> bool:
        """Whether operations in flight complete only through ``progress()`` calls."""
        return False

    def settle(self, seconds: float) -> bool:
        """Wait at most ``seconds`` for an operation in flight to complete, in the transport's
        own cheap polling loop (called with nothing else to do; ``progress()`` then collects
        it); false at once from a transport without one (the server then waits as usual)."""
        return False

    # -- what is known of the members ------------------------------------------------------
    def heed_peers(self) -> None:
        """Before a user collective: take in what peers said of themselves (a peer that
        broke breaks this transport too, on transports that break); nothing by default."""

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
        """This process's progress (``membership`` states), told to peers in heartbeats."""

    def close(self, timeout: float) -> None:
        """Release what the transport holds; pending operations fail."""
