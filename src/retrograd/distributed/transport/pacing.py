"""How often a transport is polled: one schedule for every transport whose collectives
complete only when polled (``mpi``) or are only noticed when polled (``torch``).

MPI progresses only inside MPI calls, and a collective takes several rounds in which both
ranks must call in, so how often a rank polls sets its latency (gloo and NCCL progress on
threads of their own: there polling only decides how soon a completion is noticed).

- While backward still computes, poll gently: the collective is hidden behind it, and each
  poll takes CPU from it. Without the overlap nothing but a registration exchange is in flight
  during backward, which the device thread polls itself: the server thread only backs it up.
- While a device waits for a result, poll back to back, but briefly: mostly it waits for a
  peer that still computes, and where cores are shared, spinning slows that peer down. Then
  poll every 0.2 ms, which costs little and still notices a completion soon.
- Where ranks outnumber the cores (``Capabilities.spins`` false), never spin: a spinning rank
  takes the core a peer's backward needs.
"""

from __future__ import annotations

import time

from .base import Polled

__all__ = ["Pacer"]

#: while backward computes and gradients are reduced meanwhile
POLL_SECONDS = 0.001
#: while backward computes and nothing is reduced before its end
IDLE_POLL_SECONDS = 0.01
#: how long a waiting member polls back to back, from its last completion
SPIN_SECONDS = 0.002
#: a waiting member's poll interval after its spin
BACKED_OFF_POLL_SECONDS = 0.0002


class Pacer:
    """The next poll's delay, from what a poll found and whether a device waits; keeps the
    spin budget (it starts afresh at every completion).

    >>> pacer = Pacer(spins=False)
    >>> pacer.delay(Polled(True, False, None), urgent=False, overlapping=True)
    0.001
    >>> pacer.delay(Polled(True, False, None), urgent=True, overlapping=True)
    0.0002
    >>> pacer.delay(Polled(False, True, 0.5), urgent=True, overlapping=True)
    0.5
    """

    __slots__ = ("_spinning_since", "spins")

    def __init__(self, spins: bool):
        self.spins = spins
        self._spinning_since: float | None = None

    def delay(self, polled: Polled, urgent: bool, overlapping: bool) -> float | None:
        """Seconds until the next poll (``None``: only once new work starts)."""
        if polled.completed:
            self._spinning_since = None
        if not polled.in_flight:
            self._spinning_since = None
            return polled.due
        if not urgent:
            return POLL_SECONDS if overlapping else IDLE_POLL_SECONDS
        if not self.spins:
            return BACKED_OFF_POLL_SECONDS
        if self._spinning_since is None:
            self._spinning_since = time.monotonic()
        elif time.monotonic() - self._spinning_since > SPIN_SECONDS:
            return BACKED_OFF_POLL_SECONDS
        return 0.0
